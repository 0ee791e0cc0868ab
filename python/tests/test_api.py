"""The Pythonic layer: keywords, result objects, queries, catalog, errors."""

from __future__ import annotations

import html
import inspect
import json
import pickle
import re
from pathlib import Path

import pytest
from conftest import REPO, run_cli

import kvplan

MISSION = {"gpu": "24GB", "model": "qwen2.5-coder-32b", "task": "agentic"}


@pytest.fixture(scope="module")
def mission() -> kvplan.Plan:
    return kvplan.plan(**MISSION)


def test_plan_result_objects(mission: kvplan.Plan) -> None:
    assert mission.fits and mission.mode == "rank" and mission.nothing_fits is None
    rec = mission.recommended
    assert rec is mission.options[0] and rec.rank == 1 and rec.plan is mission
    assert [o.rank for o in mission.options] == list(range(1, len(mission.options) + 1))
    assert mission.model.id == "qwen2.5-coder-32b-instruct" and mission.task.id == "agentic"
    assert mission.device.id == "gpu0" and mission.device.capacity_bytes == 24 << 30
    # the values are the JSON's: one source of numbers
    d = mission.to_dict()
    first = d["options"][0]
    assert rec.to_dict() == first
    assert (rec.weights, rec.ctx_size, rec.cache_type_k, rec.cache_type_v) == (
        first["weights"], first["ctx_size"], first["cache_type_k"], first["cache_type_v"])
    for key, value in first["memory"].items():
        if key.endswith("_bytes") and hasattr(rec.memory, key):
            assert getattr(rec.memory, key) == value, key
    assert rec.memory.total_high_bytes == first["pools"][0]["total_high_bytes"]
    assert rec.quality.expected_loss == first["quality"]["expected_loss"]
    assert rec.quality.risk == first["quality"]["risk"]
    assert rec.launch == first["launch"] and rec.launch_line == first["launch"]["llama-server"]
    assert [a.what for a in rec.allocations] == [a["what"] for a in first["allocations"]]
    assert list(mission.explanation) == d["explanation"]
    assert d["schema_version"] == kvplan.SCHEMA_VERSION


def test_to_json_indent(mission: kvplan.Plan) -> None:
    assert json.loads(mission.to_json(indent=0)) == mission.to_dict()
    assert mission.to_json().endswith("}\n")


def test_repr_and_html(mission: kvplan.Plan) -> None:
    text = repr(mission)
    assert text.startswith("<kvplan.Plan mode=rank, fits: Qwen2.5-Coder-32B-Instruct")
    assert mission.recommended is not None and mission.recommended.launch_line in text
    assert re.search(r"(free|mild|noticeable|avoid) \(~?[<0-9.]+%\)", text)
    assert re.match(r"<kvplan.Option #1: Q4_K_M, 32768 tokens, K=q8_0 V=q8_0, FA on, total \d+\.\d\d GiB",
                    repr(mission.recommended))
    page = mission._repr_html_()
    assert page.count("<tr") >= len(mission.options) + 1
    assert "Recommended" in page and "K cache" in page
    assert "<pre>llama-server -m Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf" in page
    assert "<table>" in mission.recommended._repr_html_()


@pytest.mark.parametrize("model", ["gemma-4-31b-it", "gemma-3-27b-it", "qwen3-next-80b-a3b-instruct", "deepseek-v2-lite"])
def test_notebook_header_names_the_cli_shape(model: str) -> None:
    """The notebook page's Model row is the table's Model line: Gemma 4's two KV geometries, SWA and recurrent layers."""
    p = kvplan.plan(gpu="rtx4090", model=model, task="chat", top=1)
    row = dict(p._header())["Model"]
    cli = run_cli(["--gpu", "rtx4090", "--model", model, "--task", "chat", "--top", "1"])
    line = next(x for x in cli.stdout.decode().splitlines() if x.startswith("Model "))
    assert line.split(None, 1)[1].replace("  (", " (", 1) == row
    assert html.escape(row) in p._repr_html_()


def test_nothing_fits() -> None:
    p = kvplan.plan(gpu="8GB", model="llama-3.1-70b", host_ram="8GB", top=2)  # no room for the layers in RAM either
    assert not p.fits and p.recommended is None and p.nothing_fits and "would fit with host RAM" in p.nothing_fits
    assert p.verdict == "nothing_fits" and p.to_dict()["verdict"] == "nothing_fits"
    assert len(p.options) == 2 and not p.options[0].fits  # the GPU holds its layers; host RAM is what falls short
    pools = {u["pool"]: u for u in p.options[0].to_dict()["pools"]}
    assert pools["gpu0"]["headroom_bytes"] >= 0 and pools["host"]["headroom_bytes"] < 0
    assert "NOTHING FITS" in repr(p) and "Nothing fits" in p._repr_html_() and "DOES NOT FIT" in repr(p.options[0])


def test_breakdown_of_one_configuration() -> None:
    o = kvplan.breakdown(gpu="rtx4090", model="qwen2.5-coder-32b", weights="Q4_K_M", ctx_size=28672,
                         cache_type_k="q8_0", cache_type_v="q8_0")
    assert o.plan.mode == "single" and o.fits
    assert (o.weights, o.ctx_size, o.cache_type_k, o.cache_type_v) == ("Q4_K_M", 28672, "q8_0", "q8_0")
    assert {a.what for a in o.allocations} >= {"weights", "k_cache", "v_cache", "compute"}
    k = next(a for a in o.allocations if a.what == "k_cache")
    assert k.accuracy == "exact" and k.bytes == o.memory.k_cache_bytes
    too_big = kvplan.breakdown(gpu="rtx4090", model="qwen2.5-coder-32b", weights="Q4_K_M", ctx_size=32768,
                               cache_type_k="f16", cache_type_v="f16")
    assert not too_big.fits and too_big.memory.headroom_bytes < 0


def test_max_context_is_the_inverse_query() -> None:
    p = kvplan.max_context(gpu="rtx4090", model="qwen2.5-coder-32b", cache_type_k="f16", cache_type_v="f16",
                           weights="Q4_K_M")
    assert p.mode == "max_context" and p.recommended is not None and p.to_dict()["request"]["max_ctx"] is True
    best = p.recommended.ctx_size
    assert kvplan.breakdown(gpu="rtx4090", model="qwen2.5-coder-32b", weights="Q4_K_M", ctx_size=best,
                            cache_type_k="f16", cache_type_v="f16", flash_attn="on").fits
    assert not kvplan.breakdown(gpu="rtx4090", model="qwen2.5-coder-32b", weights="Q4_K_M", ctx_size=best + 256,
                                cache_type_k="f16", cache_type_v="f16", flash_attn="on").fits


def test_placement_keywords() -> None:
    p = kvplan.plan(gpu="24GB", model="qwen3-30b-a3b", task="coding", cpu_moe=True, host_ram="64GB", top=3)
    assert p.resolved.n_cpu_moe == -1 and p.to_dict()["request"]["host_ram_bytes"] == 64 << 30
    assert "--cpu-moe" in p.options[0].launch_line
    partial = kvplan.plan(gpu="16GB", model="qwen2.5-coder-32b", task="coding", n_gpu_layers=40, top=1)
    o = partial.options[0]
    assert partial.resolved.n_gpu_layers == 40 and "-ngl 40" in o.launch_line
    assert {a.pool for a in o.allocations if a.what == "weights"} == {"gpu0"}
    assert o.memory.weights_bytes == o.to_dict()["memory"]["weights_bytes"]


def test_keyword_conversions() -> None:
    by_text = kvplan.plan(**MISSION, reserve="1GB", flash_attn=True, n_gpu_layers="all")
    by_value = kvplan.plan(**MISSION, reserve=1 << 30, flash_attn="on", n_gpu_layers=-1)
    assert by_text.to_json() == by_value.to_json()
    assert by_text.to_dict()["request"]["reserve_bytes"] == 1 << 30
    assert kvplan.plan(**MISSION, flash_attn=False).to_dict()["request"]["flash_attn"] == "off"


def test_wrong_types_are_input_errors() -> None:
    """A value of the wrong Python type is bad input like any other (python/tests/test_bad_input.py has the rest)."""
    with pytest.raises(kvplan.InputError, match="--ctx-size '32kk': not a token count") as raised:
        kvplan.plan(**MISSION, ctx_size="32kk")
    assert raised.value.keyword == "ctx_size" and isinstance(raised.value, ValueError)
    with pytest.raises(kvplan.InputError, match="--reserve '1.5'") as size:
        kvplan.plan(**MISSION, reserve=1.5)  # type: ignore[arg-type]
    assert size.value.keyword == "reserve" and "1.5GB" in size.value.accepted
    with pytest.raises(kvplan.InputError, match="unknown keyword argument; did you mean 'ctx_size'") as unknown:
        kvplan.plan(**MISSION, ctx_siz=32768)  # type: ignore[call-arg]
    assert (unknown.value.field, unknown.value.value, unknown.value.suggestion) == ("kvplan.plan()", "ctx_siz", "ctx_size")


def test_plan_options_list_every_keyword() -> None:
    params = inspect.signature(kvplan.plan).parameters
    assert kvplan.PlanOptions.__optional_keys__ == set(params) - {"gpu", "model"}
    assert kvplan.Options.__optional_keys__ == set(params) - {"gpu", "model", "weights", "ctx_size", "cache_type_k",
                                                              "cache_type_v", "max_ctx"}
    flags = kvplan._request.FLAG_OF_KEYWORD
    assert set(flags) == set(params)


def test_model_files(in_repo: Path) -> None:
    folder = REPO / "tests" / "golden" / "models" / "qwen2.5-coder-32b"
    m = kvplan.read_model(folder)
    assert m.file_paths and m.fields_used and m.layers == kvplan.model("qwen2.5-coder-32b").layers
    assert json.loads(m.to_json())["source"] == "config.json"
    p = kvplan.plan(gpu="24GB", model=folder, task="agentic")
    assert p.model.file_paths == m.file_paths and p.to_dict()["request"]["model"] == str(folder)
    assert json.loads(kvplan.model("qwen3-8b").to_json())["source"] == "catalog"
    with pytest.raises(kvplan.InputError) as raised:
        kvplan.read_model(folder / "README.md")
    assert raised.value.field == "--model"


def test_input_error_fields() -> None:
    with pytest.raises(kvplan.InputError) as raised:
        kvplan.plan(gpu="24GB", model="qwen3-8b", cache_type_k="q4_k")
    e = raised.value
    assert (e.field, e.value, e.keyword, e.suggestion) == ("--cache-type-k", "q4_k", "cache_type_k", "q4_0")
    assert "q8_0" in e.accepted and e.problem.startswith("unknown cache type")
    copy = pickle.loads(pickle.dumps(e))
    assert (str(copy), copy.field, copy.accepted, copy.suggestion) == (str(e), e.field, e.accepted, e.suggestion)
    with pytest.raises(kvplan.InputError, match="give either --cpu-moe or --n-cpu-moe N, not both") as moe:
        kvplan.plan(gpu="24GB", model="qwen3-30b-a3b", cpu_moe=True, n_cpu_moe=4)
    assert moe.value.keyword == "cpu_moe"
    with pytest.raises(kvplan.InputError, match="--n-cpu-moe '-2': must be a layer count"):
        kvplan.plan(gpu="24GB", model="qwen3-30b-a3b", n_cpu_moe=-2)
    with pytest.raises(kvplan.InputError, match="not a layer count") as ngl:
        kvplan.plan(gpu="24GB", model="qwen3-8b", n_gpu_layers="most")  # type: ignore[arg-type]
    assert ngl.value.keyword == "n_gpu_layers"
    with pytest.raises(kvplan.InputError, match="--reserve '1 parsec'") as size:
        kvplan.plan(**MISSION, reserve="1 parsec")
    assert size.value.keyword == "reserve"


def test_no_suggestion_is_none() -> None:
    with pytest.raises(kvplan.InputError) as raised:
        kvplan.plan(gpu="24GB")
    assert raised.value.field == "--model" and raised.value.suggestion is None and raised.value.accepted == []


def test_data_dirs_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVPLAN_DATA", raising=False)
    override = REPO / "tests" / "golden" / "data_override"
    with pytest.raises(kvplan.InputError):
        kvplan.plan(gpu="golden card", model="qwen3-8b")
    assert kvplan.plan(gpu="golden card", model="qwen3-8b", data=override).fits
    assert kvplan.plan(gpu="golden card", model="qwen3-8b", data=[str(override)]).fits
    assert "test-card-40gb" in {g.id for g in kvplan.gpus(data=override)}
    monkeypatch.setenv("KVPLAN_DATA", str(override))
    assert kvplan.plan(gpu="golden card", model="qwen3-8b").fits
    with pytest.raises(kvplan.InputError, match="no such directory|not a directory"):
        kvplan.plan(gpu="rtx4090", model="qwen3-8b", data=Path("/no/such/dir"))


def test_catalog() -> None:
    models = kvplan.models()
    assert len(models) > 20 and all(m.source for m in models)
    coder = kvplan.model("Qwen/Qwen2.5-Coder-32B-Instruct")
    assert coder.id == "qwen2.5-coder-32b-instruct" and coder.rope_scaling is not None
    assert coder.max_ctx == coder.ctx_extended > coder.ctx_native
    gemma = kvplan.model("gemma-3-27b")
    assert gemma.swa is not None and gemma.swa.window > 0
    assert kvplan.gpu("RTX 4090").total_mib == 24564
    assert {"rtx4090", "h100-sxm", "m4max-128gb"} <= {g.id for g in kvplan.gpus()}
    assert {t.id for t in kvplan.tasks()} >= {"general", "agentic", "coding", "rag", "chat"}
    assert {"q8_0", "q4_0", "f16"} <= set(kvplan.cache_types())
    assert "Q4_K_M" in {f.id for f in kvplan.weight_formats()}
    assert [e.id for e in kvplan.engines()] == ["llama.cpp", "exllamav2", "exllamav3", "mlx", "ollama", "sglang", "vllm"]
    with pytest.raises(kvplan.InputError) as raised:
        kvplan.gpu("rtx4091")
    assert raised.value.suggestion == "rtx4090"
    assert kvplan.cache_types(engine="vllm") == ["auto", "fp8", "fp8_e5m2"]
    with pytest.raises(kvplan.InputError):
        kvplan.cache_types(engine="vlm")


def test_version() -> None:
    text = (REPO / "CMakeLists.txt").read_text()
    match = re.search(r"project\(kvplan VERSION ([0-9.]+)", text)
    assert match is not None and kvplan.__version__ == match.group(1)


def test_package_docstring_example() -> None:
    import doctest
    result = doctest.testmod(kvplan, verbose=False)
    assert result.attempted >= 2 and result.failed == 0


def test_engines_plan_and_emit_like_the_cli() -> None:
    """engine= restricts the plan to what the engine runs; launch carries every line the CLI's --emit prints."""
    ollama = kvplan.plan(gpu="24GB", model="qwen2.5-coder-32b", task="agentic", engine="ollama")
    rec = ollama.recommended
    assert rec is not None and rec.cache_type_k == rec.cache_type_v
    assert list(rec.launch) == ["ollama-env", "modelfile"]
    assert rec.launch_line == rec.launch["ollama-env"] and rec.max_concurrency is None
    first = json.loads(ollama.to_json())["options"][0]
    assert first["launch"] == rec.launch
    vllm = kvplan.plan(gpu="h100-sxm", model="qwen3-14b", engine="vllm", n_parallel=4, cache_type_k="fp8")
    assert vllm.resolved.engine_id == "vllm" and vllm.resolved.memory_fraction == 0.92
    best = vllm.recommended
    assert best is not None and best.cache_type_v == "fp8"  # one dtype for K and V
    assert best.max_concurrency is not None and best.max_concurrency >= 4
    assert best.launch["vllm"].startswith("vllm serve Qwen/Qwen3-14B ")
    with pytest.raises(kvplan.InputError, match="one cache type for K and V"):
        kvplan.plan(gpu="24GB", model="qwen3-8b", engine="ollama", cache_type_k="q8_0", cache_type_v="q4_0")
    with pytest.raises(kvplan.InputError, match="did you mean 'vllm'"):
        kvplan.plan(gpu="24GB", model="qwen3-8b", engine="vlm")
    assert kvplan.cache_types("exllamav2") == ["FP16", "Q8", "Q6", "Q4"]
    assert kvplan.engine("tabbyapi").id == "exllamav3" and not kvplan.engine("exl3").same_type_kv


def test_context_sizes_as_the_cli_reads_them() -> None:
    """ctx_size takes what --ctx-size takes: tokens, or "32k" / "128K" / "1M" with k = 1024 (issue 20's one surface)."""
    for text, tokens in (("32k", 32768), ("32K", 32768), ("8192", 8192), ("1.5k", 1536)):
        assert kvplan.plan(**MISSION, ctx_size=text).options[0].ctx_size == tokens
    with pytest.raises(kvplan.InputError, match="not a token count"):
        kvplan.plan(**MISSION, ctx_size="0.1k")


def test_serving_keywords_are_the_json_requests() -> None:
    """vLLM/SGLang at scale (issue 18): the keywords carry the JSON request's names and shapes, and plan as the CLI."""
    given = {"pipeline_parallel_size": 2, "data_parallel": 1, "expert_parallel": True, "nodes": 2,
             "interconnect": "ib-hdr", "max_num_seqs": 48, "concurrency": 4, "max_batched_tokens": 4096}
    p = kvplan.plan(engine="sglang", gpu="h100-sxm", tensor_parallel=4, model="qwen3-235b-a22b", weights="fp8",
                    ctx_size=32768, top=1, **given)
    request = p.to_dict()["request"]
    assert {k: request[k] for k in given} == given
    serving = p.to_dict()["resolved"]["serving"]
    assert (serving["pipeline_stages"], serving["nodes"], serving["max_num_seqs"], serving["concurrency"]) == (2, 2, 48, 4)
    line = p.options[0].launch_line
    assert "--pp-size 2" in line and "--ep-size 4" in line and "--nnodes 2" in line and "--max-running-requests 48" in line


def test_serving_capacity_for_the_issue_example() -> None:
    """Llama-3.3-70B on 8x H100 at 32K with 128 admitted: exit 0 as the CLI, --max-num-seqs from the workload,
    capacity about 42 conversations (issue 18)."""
    p = kvplan.plan(engine="vllm", gpu="h100-sxm", tensor_parallel=8, model="llama-3.3-70b", ctx_size=32768,
                    n_parallel=128, top=1)
    o = p.options[0]
    assert p.verdict == "ok" and "--max-num-seqs 128" in o.launch_line
    assert o.max_concurrency is not None and 35 < o.max_concurrency < 50
    one = kvplan.plan(engine="vllm", gpu="h100-sxm", tensor_parallel=8, model="llama-3.3-70b", ctx_size=32768,
                      n_parallel=1, top=1)
    assert "--max-num-seqs 1 " in one.options[0].launch_line  # an explicit 1 is kept, as the CLI keeps --parallel 1


def test_rpc_servers_as_a_list_or_the_cli_text() -> None:
    hosts = ["10.0.0.2:50052=rtx3090", "10.0.0.3:50052=24GB"]
    as_list = kvplan.plan(gpu="rtx4090", model="qwen2.5-32b-instruct", rpc_servers=hosts, top=1)
    as_text = kvplan.plan(gpu="rtx4090", model="qwen2.5-32b-instruct", rpc_servers=",".join(hosts), top=1)
    assert as_list.to_json() == as_text.to_json()
    assert as_list.to_dict()["request"]["rpc_servers"] == hosts
    assert "--rpc 10.0.0.2:50052,10.0.0.3:50052" in as_list.options[0].launch_line
