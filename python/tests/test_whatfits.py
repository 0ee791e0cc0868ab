"""kvplan.what_fits / kvplan.needs: the C++ ranking as records, the same JSON as the CLI, and the plot."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

import kvplan  # noqa: E402
from kvplan import plots  # noqa: E402

from conftest import REPO  # noqa: E402

SCHEMA = json.loads((REPO / "schema" / "what_fits.schema.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fits() -> kvplan.WhatFits:
    return kvplan.what_fits("rtx3060-12gb", "chat", top=15, host_ram="64GB")


def test_records_follow_the_rule_and_fit(fits: kvplan.WhatFits) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(fits.to_dict(), SCHEMA)
    rows = fits.records
    assert 10 <= len(rows) <= 15
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    for a, b in zip(rows, rows[1:]):
        ta, tb = (not a["reaches_task_min"], not a["meets_speed_floor"]), (not b["reaches_task_min"], not b["meets_speed_floor"])
        assert ta < tb or (ta == tb and a["score"] >= b["score"])
    for r in rows:
        assert r["score"] == pytest.approx(r["quality"] * r["plan_factor"], abs=0.2)
        assert r["device_bytes"] <= 12 * 2**30


def test_dataframe_has_one_row_per_model(fits: kvplan.WhatFits) -> None:
    pytest.importorskip("pandas")
    df = fits.to_dataframe()
    assert list(df["model"]) == [r["model"] for r in fits.records]
    assert {"quality", "quality_estimated", "weights", "ctx_per_slot", "decode_tokens_per_s", "score"} <= set(df.columns)


def test_filters_and_models() -> None:
    w = kvplan.what_fits("rtx4090", "agentic", arch_kind="moe", min_ctx="32k", min_tps=30, host_ram="64GB")
    assert all(r["moe"] and r["ctx_per_slot"] >= 32768 and r["decode_tokens_per_s"] >= 30 for r in w.records)
    w = kvplan.what_fits("rtx4090", "coding", models=["qwen3-8b", "qwen2.5-coder-32b"])
    assert sorted(r["model"] for r in w.records) == ["qwen2.5-coder-32b-instruct", "qwen3-8b"]
    w = kvplan.what_fits("rtx4090", "agentic", license=["apache-2.0", "mit"], host_ram="64GB")
    assert w.records and all(r["license"] in ("apache-2.0", "mit") for r in w.records)
    assert w.to_dict()["request"]["license"] == ["apache-2.0", "mit"]
    assert all(m.license and m.license_source for m in kvplan.models())


def test_same_json_as_the_cli(tmp_path: Path) -> None:
    cli = REPO / "build" / "kvplan"
    if not cli.exists():
        pytest.skip("build/kvplan not built")
    args = ["--gpu", "rtx4090", "--task", "agentic", "--top", "5", "--ram", "64GB", "--json"]
    out = subprocess.run([str(cli), *args], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == kvplan.what_fits("rtx4090", "agentic", top=5, host_ram="64GB").to_dict()


def test_bad_input_is_input_error() -> None:
    with pytest.raises(kvplan.InputError) as e:
        kvplan.what_fits("rtx4090", "agentic", arch_kind="mixture")
    assert e.value.field == "--arch-kind" and "moe" in e.value.accepted
    with pytest.raises(kvplan.InputError):
        kvplan.what_fits("rtx4090", "agentic", family="qwen9")
    with pytest.raises(kvplan.InputError) as e:
        kvplan.what_fits("rtx4090", "agentic", license="apache2")
    assert e.value.field == "--license" and "apache-2.0" in e.value.accepted and "open" in e.value.accepted
    with pytest.raises(kvplan.InputError):
        kvplan.what_fits("rtx4090", "agentic", topp=3)  # type: ignore[call-arg]


def test_needs_meets_the_requirement() -> None:
    n = kvplan.needs("qwen2.5-coder-32b", "agentic", max_gpus=2)
    assert n.found
    gpu = next(r for r in n.records if r["kind"] == "smallest_gpu")
    assert gpu["ctx_per_slot"] >= 32768 and gpu["cache_type_k"] in ("f16", "q8_0") and gpu["decode_tokens_per_s"] >= 10
    assert len(n.to_dataframe()) == len(n.records)


def test_quality_vs_speed_renders(fits: kvplan.WhatFits, tmp_path: Path) -> None:
    fig = plots.quality_vs_speed(fits)
    out = tmp_path / "fits.png"
    fig.savefig(out, dpi=80)
    assert out.read_bytes().startswith(b"\x89PNG")
    assert len(fig.axes[0].collections) == sum(1 for r in fits.records if r["decode_tokens_per_s"])
    with pytest.raises(kvplan.InputError):
        plots.quality_vs_speed("not a result")  # type: ignore[arg-type]
