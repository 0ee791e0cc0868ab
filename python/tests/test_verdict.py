"""Schema 4 in Python: the verdict and its suggestions, kvplan's placement, max_context() with nothing pinned,
the tasks' speed floors."""

from __future__ import annotations

import json
import re

import pytest
from conftest import keywords, run_cli

import kvplan

# every option that fits rates avoid for reasoning: 8 GB and 1 GiB of RAM leave a 14B model at Q2_K, q4_0
UNACCEPTABLE = {"gpu": "8GB", "model": "qwen2.5-14b", "task": "reasoning", "host_ram": "1GB"}
# an MoE twice the card's size with RAM for its experts
MOE_PLACED = {"gpu": "8GB", "model": "qwen3-30b-a3b", "host_ram": "64GB"}


def same_option(o: kvplan.Option, s: kvplan.SuggestedOption) -> None:
    """The plan's recommendation is the suggestion's option, field by field."""
    assert (o.weights, o.ctx_size, o.ctx_per_slot, o.cache_type_k, o.cache_type_v, o.flash_attn) == (
        s.weights, s.ctx_size, s.ctx_per_slot, s.cache_type_k, s.cache_type_v, s.flash_attn)
    assert (o.quality.risk, o.quality.expected_loss, o.n_gpu_layers, o.n_cpu_moe, o.launch_line) == (
        s.risk, s.expected_loss, s.n_gpu_layers, s.n_cpu_moe, s.launch)
    assert o.decode_tps == s.decode_tps


@pytest.fixture(scope="module")
def unacceptable() -> kvplan.Plan:
    return kvplan.plan(**UNACCEPTABLE)


def test_nothing_acceptable_recommends_nothing(unacceptable: kvplan.Plan) -> None:
    p = unacceptable
    assert p.verdict == "nothing_acceptable" and p.recommended is None
    assert p.fits and p.options and all(o.fits and o.quality.risk == "avoid" for o in p.options)
    assert p.nothing_fits is None and p.nothing_acceptable and "--accept-risk" in p.nothing_acceptable
    d = p.to_dict()
    assert (d["verdict"], d["recommended"], d["fits"], d["nothing_acceptable"]) == (
        "nothing_acceptable", None, True, p.nothing_acceptable)
    assert d["request"]["host_ram_source"] == "--ram" and d["request"]["accept_risk"] is False
    assert "NOTHING ACCEPTABLE" in repr(p) and "nothing acceptable: " in repr(p)
    page = p._repr_html_()
    assert "Nothing acceptable" in page and "Recommended" not in page and "kvplan --gpu" in page


def test_suggestions_replan_to_their_option(unacceptable: kvplan.Plan) -> None:
    assert unacceptable.suggestions
    assert [s.to_dict() for s in unacceptable.suggestions] == unacceptable.to_dict()["suggestions"]
    for s in unacceptable.suggestions:
        assert s.summary and s.option.risk != "avoid" and f"<kvplan.Suggestion: {s.summary}>" == repr(s)
        assert s.args[0] == "--gpu" and "--task" in s.args
        # its request, planned again here
        again = s.replan()
        assert again.verdict == "ok" and again.recommended is not None
        same_option(again.recommended, s.option)
        # its arguments, planned as kvplan.plan() keywords and by the CLI: the same plan
        by_args = kvplan.plan(**keywords(list(s.args)))
        assert by_args.to_json() == again.to_json()
        cli = run_cli([*s.args, "--json"])
        assert cli.returncode == 0, cli.stderr.decode()
        assert cli.stdout == again.to_json().encode("utf-8")
        first = json.loads(cli.stdout)["options"][0]
        option = s.to_dict()["option"]
        for key in ("weights", "ctx_size", "ctx_per_slot", "cache_type_k", "cache_type_v", "flash_attn"):
            assert first[key] == option[key], key
        assert first["launch"]["llama-server"] == option["launch"]


def test_accept_risk_takes_the_least_bad(unacceptable: kvplan.Plan) -> None:
    p = kvplan.plan(**UNACCEPTABLE, accept_risk=True)
    assert p.verdict == "ok" and p.nothing_acceptable is None and not p.suggestions
    rec = p.recommended
    assert rec is not None and rec.quality.risk == "avoid"
    assert (rec.weights, rec.ctx_size) == (unacceptable.options[0].weights, unacceptable.options[0].ctx_size)
    assert any("--accept-risk" in w for w in p.warnings)
    assert p.to_dict()["request"]["accept_risk"] is True and p.to_dict()["recommended"] == 1


def test_nothing_fits_verdict_has_suggestions() -> None:
    p = kvplan.plan(gpu="8GB", model="llama-3.1-70b-instruct", host_ram="8GB")
    assert p.verdict == "nothing_fits" and not p.fits and p.recommended is None and p.nothing_acceptable is None
    assert p.suggestions and all(s.replan().recommended is not None for s in p.suggestions)


def test_moe_experts_in_ram() -> None:
    p = kvplan.plan(**MOE_PLACED)
    rec = p.recommended
    assert p.verdict == "ok" and rec is not None
    assert rec.n_cpu_moe is not None and 0 < rec.n_cpu_moe <= p.model.layers and rec.n_gpu_layers is None
    assert re.search(rf"(^| )--n-cpu-moe {rec.n_cpu_moe}( |$)", rec.launch_line), rec.launch_line
    assert f"--n-cpu-moe {rec.n_cpu_moe}" in repr(rec) and rec.placement_text == f"--n-cpu-moe {rec.n_cpu_moe}"
    # the experts' bytes are host memory, and the speed says so
    host_weights = sum(a.bytes for a in rec.allocations if a.what == "weights_host" and a.pool == "host")
    assert host_weights > 1 << 30 and rec.host_bytes >= host_weights
    assert 0 < rec.decode_relative < 1
    placement = rec.to_dict()["placement"]
    assert placement == {"n_gpu_layers": None, "n_cpu_moe": rec.n_cpu_moe, "host_bytes": rec.host_bytes}
    assert rec.to_dict()["score"] == pytest.approx(rec.score, abs=1e-6)
    df = p.to_dataframe()
    assert df.loc[1, "n_cpu_moe"] == rec.n_cpu_moe and str(df["n_cpu_moe"].dtype) == "Int64"
    assert df["n_gpu_layers"].isna().all()
    # the same request on the command line
    cli = run_cli(["--gpu", "8GB", "--model", "qwen3-30b-a3b", "--ram", "64GB", "--json"])
    assert cli.returncode == 0 and cli.stdout == p.to_json().encode("utf-8")


def test_dense_layers_in_ram() -> None:
    p = kvplan.plan(gpu="8GB", model="llama-3.1-70b", host_ram="64GB")
    rec = p.recommended
    assert rec is not None and rec.n_cpu_moe is None
    assert rec.n_gpu_layers is not None and 0 < rec.n_gpu_layers < p.model.layers
    assert f"-ngl {rec.n_gpu_layers} " in rec.launch_line and rec.to_dict()["placement"]["n_gpu_layers"] == rec.n_gpu_layers


def test_breakdown_keeps_every_layer_on_the_gpu() -> None:
    o = kvplan.breakdown(gpu="rtx4090", model="qwen2.5-coder-32b", weights="Q4_K_M", ctx_size=32768,
                         cache_type_k="f16", cache_type_v="f16")
    assert not o.fits and o.n_gpu_layers == -1 and o.n_cpu_moe is None and o.placement_text == ""
    assert " -ngl 99 " in o.launch_line and {a.pool for a in o.allocations if a.what == "weights"} == {"gpu0"}
    placed = kvplan.plan(gpu="rtx4090", model="qwen2.5-coder-32b", weights="Q4_K_M", ctx_size=32768,
                         cache_type_k="f16", cache_type_v="f16", host_ram="64GB")
    rec = placed.recommended
    assert rec is not None and rec.n_gpu_layers is not None and rec.placement_text == f"-ngl {rec.n_gpu_layers}"
    assert rec.memory.weights_host_bytes > o.memory.weights_host_bytes  # the layers kvplan keeps in RAM


def test_max_context_with_nothing_pinned() -> None:
    free = kvplan.max_context("rtx4090", "qwen3-coder-30b-a3b")
    assert free.mode == "max_context" and free.verdict == "ok" and free.recommended is not None
    request = free.to_dict()["request"]
    assert request["max_ctx"] is True and request["cache_type_k"] is None and request["weights"] is None
    best = free.recommended.ctx_per_slot
    assert best == max(o.ctx_per_slot for o in free.options)
    # larger than the ranked answer, and than any pinned pair's answer
    assert best > kvplan.plan("rtx4090", "qwen3-coder-30b-a3b").recommended.ctx_per_slot  # type: ignore[union-attr]
    for k, v in (("q8_0", "q8_0"), ("f16", "f16")):
        pinned = kvplan.max_context("rtx4090", "qwen3-coder-30b-a3b", cache_type_k=k, cache_type_v=v).recommended
        assert pinned is not None and pinned.ctx_per_slot <= best
    cli = run_cli(["--gpu", "rtx4090", "--model", "qwen3-coder-30b-a3b", "--max-ctx", "--json"])
    assert cli.returncode == 0 and cli.stdout == free.to_json().encode("utf-8")


def test_pinned_plan_suggests_better() -> None:
    p = kvplan.plan(gpu="24GB", model="Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf", ctx_size=16384, n_parallel=1,
                    flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0", n_gpu_layers=99)
    assert p.mode == "single" and p.verdict == "ok" and p.recommended is not None
    assert p.recommended.n_gpu_layers == 99 and p.suggestions
    longer = p.suggestions[0]
    assert longer.option.ctx_per_slot > p.recommended.ctx_per_slot
    same_option(longer.replan().recommended, longer.option)  # type: ignore[arg-type]


def test_task_speed_floors() -> None:
    tasks = {t.id: t for t in kvplan.tasks()}
    assert all(t.decode_floor_tps > 0 and t.speed_source for t in tasks.values())
    assert tasks["rag"].ttft_max_s == 60 and tasks["general"].ttft_max_s is None
    assert tasks["agentic"].decode_floor_tps > tasks["chat"].decode_floor_tps
    p = kvplan.plan(gpu="rtx4090", model="qwen3-8b", task="rag")
    assert p.task == tasks["rag"]
    floor = p.to_dict()["speed_floor"]
    assert floor == {"decode_tokens_per_s": p.task.decode_floor_tps, "time_to_first_token_s": p.task.ttft_max_s,
                     "source": p.task.speed_source}
    rec = p.recommended
    assert rec is not None and rec.ttft_s is not None and rec.ttft_s > 0
    assert rec.to_dict()["decode"]["time_to_first_token_s"] == pytest.approx(rec.ttft_s, abs=0.05)
    assert kvplan.plan(gpu="24GB", model="qwen3-8b").options[0].ttft_s is None  # a bare size: no throughput
