#!/usr/bin/env python3
"""Compares kvplan's predictions with what llama.cpp allocated (measure.py's output).

For every measured context this runs

    build/kvplan --model MODEL.gguf --backend cpu --gpu 64GB --ctx-size N -ctk K -ctv V -fa on|off
                 -np S [-kvu] -ub U --batch-size B --n-outputs-max min(N, B) [--swa-full] --json

and checks the targets of the validation:

- K, V, sliding-window K/V and recurrent-state bytes equal to the byte;
- weight bytes (llama.cpp's model buffer; on the CPU backend token_embd is in it too) equal to the byte;
- the output buffer equal to the byte (kvplan labels it exact);
- the compute buffer within 10 % (the worst case is reported), or, for the families whose architecture kvplan
  sizes with closed forms (sweep.CLOSED_FORM_COMPUTE), kvplan's upper bound at least llama.cpp's buffer;
- never "fits" where llama.cpp needs more: the sum of kvplan's upper bounds is at least what llama.cpp
  allocated in all (weights + caches + output + compute);
- llama.cpp refuses a configuration (e.g. quantized V without flash attention) exactly when kvplan does.

It prints a table per family, writes one CSV row per context and a JSON summary (results/), and exits 1
if any target is missed, 0 otherwise.

    python compare.py [--subset|--full] [--measured FILE] [--kvplan build/kvplan] [--jobs N]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import shutil
import tempfile
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import sweep  # noqa: E402

COMPUTE_TOLERANCE = 0.10
GPU = "64GB"

# kvplan allocation names -> the measured component they are compared with
EXACT = [
    ("k", "k_cache"), ("v", "v_cache"), ("swa_k", "swa_k_cache"), ("swa_v", "swa_v_cache"),
    ("state", "state"), ("weights", None), ("output", "output"),
]

CSV_FIELDS = [
    "model", "key", "ctx", "type_k", "type_v", "fa", "n_seq", "unified", "ubatch", "swa_full",
    "measured", "kvplan", "n_ctx", "n_ctx_seq", "n_ubatch", "kv_cells", "swa_cells", "state_cells",
    "weights_meas", "weights_pred", "k_meas", "k_pred", "v_meas", "v_pred", "swa_k_meas", "swa_k_pred",
    "swa_v_meas", "swa_v_pred", "state_meas", "state_pred", "output_meas", "output_pred",
    "compute_meas", "compute_pred", "compute_err_pct", "compute_high_pred", "total_meas", "total_high_pred", "misses",
]


def kvplan_predict(kvplan: Path, model_path: Path, cfg: sweep.Config) -> dict:
    cmd = [str(kvplan), "--model", str(model_path), "--backend", "cpu", "--gpu", GPU] + cfg.kvplan_args() + ["--json"]
    for attempt in range(5):
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            break
        except OSError:  # the binary is being relinked (cmake --build while this runs)
            if attempt == 4:
                raise
            time.sleep(2)
    # exit 1 is a verdict (nothing fits, or nothing acceptable for the task) that still prints the sized plan;
    # only exit 2 — the configuration is refused, as llama.cpp refuses it — is a refusal
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        return {"status": "refused", "rc": proc.returncode, "message": proc.stderr.strip()[:400], "cmd": cmd}
    plan = json.loads(proc.stdout)
    if not plan.get("options"):
        return {"status": "no-option", "rc": proc.returncode, "message": json.dumps(plan.get("nothing_fits"))[:400],
                "cmd": cmd}
    opt = plan["options"][0]
    alloc: dict[str, int] = {}
    high: dict[str, int] = {}
    for a in opt["allocations"]:
        alloc[a["what"]] = alloc.get(a["what"], 0) + int(a["bytes"])
        high[a["what"]] = high.get(a["what"], 0) + int(a["high_bytes"])
    return {"status": "ok", "alloc": alloc, "high": high, "fits": opt.get("fits"), "cmd": cmd,
            "engine_build": plan.get("resolved", {}).get("engine_build")}


def measured_components(row: dict) -> dict:
    kv, swa, st = row.get("kv") or {}, row.get("swa") or {}, row.get("state") or {}
    # kvplan's k_cache holds DeepSeek-V3.2's indexer keys too (the engine's memory breakdown sums both caches)
    indexer = row.get("indexer") or {}
    return {
        "weights": row["weights"]["model_bytes"],
        "k": kv.get("k_bytes", 0) + indexer.get("k_bytes", 0), "v": kv.get("v_bytes", 0),
        "swa_k": swa.get("k_bytes", 0), "swa_v": swa.get("v_bytes", 0),
        "state": st.get("bytes", 0),
        "output": row.get("output") or 0,
        "compute": row["compute"],
    }


def predicted_components(pred: dict) -> dict:
    a = pred["alloc"]
    return {
        "weights": a.get("weights", 0) + a.get("weights_host", 0),
        "k": a.get("k_cache", 0), "v": a.get("v_cache", 0),
        "swa_k": a.get("swa_k_cache", 0), "swa_v": a.get("swa_v_cache", 0),
        "state": a.get("state", 0),
        "output": a.get("output", 0),
        "compute": a.get("compute", 0) + a.get("compute_host", 0),
    }


def compare_row(row: dict, pred: dict) -> dict:
    cfg = sweep.Config.from_dict(row["config"])
    out = {"model": row["model"], "key": row["key"], **{k: v for k, v in cfg.as_dict().items() if k not in ("batch", "outputs")},
           "measured": row["status"], "kvplan": pred["status"], "misses": []}
    if row["status"] != "ok" or pred["status"] != "ok":
        if (row["status"] == "refused") != (pred["status"] == "refused"):
            out["misses"].append("refusal")
        if row["status"] == "crashed":
            out["misses"].append("crashed")
        out["detail"] = {"measured_error": row.get("error"), "kvplan_message": pred.get("message")}
        return out
    m, p = measured_components(row), predicted_components(pred)
    out.update({"n_ctx": row.get("n_ctx"), "n_ctx_seq": row.get("n_ctx_seq"), "n_ubatch": row.get("n_ubatch"),
                "kv_cells": (row.get("kv") or {}).get("cells"), "swa_cells": (row.get("swa") or {}).get("cells"),
                "state_cells": (row.get("state") or {}).get("cells")})
    for comp in ("weights", "k", "v", "swa_k", "swa_v", "state", "output"):
        out[f"{comp}_meas"], out[f"{comp}_pred"] = m[comp], p[comp]
        if m[comp] != p[comp]:
            out["misses"].append(comp)
    out["compute_meas"], out["compute_pred"] = m["compute"], p["compute"]
    err = (p["compute"] - m["compute"]) / m["compute"] if m["compute"] else 0.0
    out["compute_err_pct"] = round(100 * err, 2)
    out["compute_high_pred"] = pred["high"].get("compute", 0) + pred["high"].get("compute_host", 0)
    if row["model"] in sweep.CLOSED_FORM_COMPUTE:  # closed forms: the target is their upper bound
        if out["compute_high_pred"] < m["compute"]:
            out["misses"].append("compute")
    elif abs(err) > COMPUTE_TOLERANCE:
        out["misses"].append("compute")
    total = m["weights"] + m["k"] + m["v"] + m["swa_k"] + m["swa_v"] + m["state"] + m["output"] + m["compute"]
    high = sum(pred["high"].values())
    out["total_meas"], out["total_high_pred"] = total, high
    if high < total:
        out["misses"].append("fits")
    # the measurement's own consistency (exact bytes vs llama.cpp's logged MiB and its breakdown)
    checks = [(row.get("kv") or {}).get("log_consistent", True), (row.get("swa") or {}).get("log_consistent", True),
              (row.get("indexer") or {}).get("log_consistent", True),
              (row.get("state") or {}).get("log_consistent", True), row.get("context_consistent", True),
              row.get("compute_log_consistent", True)]
    if not all(checks):
        out["misses"].append("measurement-inconsistent")
    return out


def family_table(rows: list[dict]) -> list[dict]:
    fams: dict[str, dict] = {}
    for r in rows:
        f = fams.setdefault(r["model"], {"model": r["model"], "contexts": 0, "ok": 0, "refused_agree": 0,
                                         "refusal_disagree": 0, "crashed": 0,
                                         "exact": {c: [0, 0] for c in ("weights", "k", "v", "swa_k", "swa_v",
                                                                       "state", "output")},
                                         "compute_worst_pct": None, "compute_worst_key": None,
                                         "compute_min_pct": None, "compute_max_pct": None,
                                         "compute_worst_fa_on_pct": None, "compute_worst_fa_off_pct": None,
                                         "compute_within": [0, 0], "fits_safe": [0, 0], "misses": 0})
        f["contexts"] += 1
        if r["misses"]:
            f["misses"] += 1
        if r["measured"] == "crashed":
            f["crashed"] += 1
        if r["measured"] != "ok" or r["kvplan"] != "ok":
            if r["measured"] == "refused" and r["kvplan"] == "refused":
                f["refused_agree"] += 1
            elif "refusal" in r["misses"]:
                f["refusal_disagree"] += 1
            continue
        f["ok"] += 1
        for c in f["exact"]:
            meas = r[f"{c}_meas"]
            if meas == 0 and r[f"{c}_pred"] == 0:
                continue  # the model has no such cache
            f["exact"][c][1] += 1
            if meas == r[f"{c}_pred"]:
                f["exact"][c][0] += 1
        e = r["compute_err_pct"]
        f["compute_within"][1] += 1
        if abs(e) <= 100 * COMPUTE_TOLERANCE:
            f["compute_within"][0] += 1
        if r["model"] in sweep.CLOSED_FORM_COMPUTE:
            bound = f.setdefault("compute_bound", [0, 0])
            bound[1] += 1
            if r.get("compute_high_pred") is not None and r["compute_high_pred"] >= r["compute_meas"]:
                bound[0] += 1
        if f["compute_worst_pct"] is None or abs(e) > abs(f["compute_worst_pct"]):
            f["compute_worst_pct"], f["compute_worst_key"] = e, r["key"]
        f["compute_min_pct"] = e if f["compute_min_pct"] is None else min(f["compute_min_pct"], e)
        f["compute_max_pct"] = e if f["compute_max_pct"] is None else max(f["compute_max_pct"], e)
        k = "compute_worst_fa_on_pct" if r["fa"] else "compute_worst_fa_off_pct"
        if f[k] is None or abs(e) > abs(f[k]):
            f[k] = e
        f["fits_safe"][1] += 1
        if "fits" not in r["misses"]:
            f["fits_safe"][0] += 1
    return [fams[k] for k in sorted(fams, key=lambda n: sweep.MODELS.index(n) if n in sweep.MODELS else 99)]


def miss_groups(compared: list[dict]) -> list[dict]:
    """Misses grouped by family and target, with the count, a few examples and the worst case."""
    groups: dict[tuple[str, str], dict] = {}
    for c in compared:
        for what in c["misses"]:
            g = groups.setdefault((c["model"], what), {"model": c["model"], "target": what, "count": 0,
                                                        "examples": [], "detail": None})
            g["count"] += 1
            if len(g["examples"]) < 3:
                g["examples"].append(c["key"])
            if what in ("weights", "k", "v", "swa_k", "swa_v", "state", "output") and g["detail"] is None:
                g["detail"] = {"key": c["key"], "llama_cpp": c[f"{what}_meas"], "kvplan": c[f"{what}_pred"]}
            elif what == "compute" and c["model"] in sweep.CLOSED_FORM_COMPUTE:
                rel = (c["compute_high_pred"] - c["compute_meas"]) / c["compute_meas"] if c["compute_meas"] else 0.0
                if g["detail"] is None or rel < g["detail"]["rel"]:
                    g["detail"] = {"key": c["key"], "llama_cpp": c["compute_meas"], "kvplan": c["compute_high_pred"],
                                   "rel": round(rel, 4), "bound": True}
            elif what in ("compute", "fits"):
                under = c["compute_pred"] - c["compute_meas"] if what == "compute" else \
                    c["total_high_pred"] - c["total_meas"]
                base = c["compute_meas"] if what == "compute" else c["total_meas"]
                rel = under / base if base else 0.0
                if g["detail"] is None or abs(rel) > abs(g["detail"]["rel"]):
                    g["detail"] = {"key": c["key"], "llama_cpp": base,
                                   "kvplan": c["compute_pred"] if what == "compute" else c["total_high_pred"],
                                   "rel": round(rel, 4)}
            elif what == "refusal" and g["detail"] is None:
                g["detail"] = {"key": c["key"], "llama_cpp": c["measured"], "kvplan": c["kvplan"],
                               "message": (c.get("detail") or {}).get("measured_error")}
    order = {m: i for i, m in enumerate(sweep.MODELS)}
    return sorted(groups.values(), key=lambda g: (order.get(g["model"], 99), g["target"]))


def fmt_frac(pair: list[int]) -> str:
    return "-" if pair[1] == 0 else f"{pair[0]}/{pair[1]}"


def print_table(fams: list[dict]) -> None:
    head = ["family", "ctxs", "K", "V", "SWA K", "SWA V", "state", "weights", "output", "compute<=10%",
            "worst compute", "fits-safe", "refusals", "missed"]
    lines = [head]
    for f in fams:
        ex = f["exact"]
        worst = "-" if f["compute_worst_pct"] is None else f"{f['compute_worst_pct']:+.1f}%"
        lines.append([f["model"], str(f["contexts"]), fmt_frac(ex["k"]), fmt_frac(ex["v"]), fmt_frac(ex["swa_k"]),
                      fmt_frac(ex["swa_v"]), fmt_frac(ex["state"]), fmt_frac(ex["weights"]), fmt_frac(ex["output"]),
                      fmt_frac(f["compute_within"]), worst, fmt_frac(f["fits_safe"]),
                      f"{f['refused_agree']} agree" + (f", {f['refusal_disagree']} DISAGREE" if f["refusal_disagree"] else ""),
                      str(f["misses"])])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for i, line in enumerate(lines):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def read_compared(csv_path: Path) -> list[dict]:
    """The rows of a committed compare-*.csv(.gz), typed as compare_row returns them (for --merge)."""
    opener = gzip.open if csv_path.suffix == ".gz" else open
    with opener(csv_path, "rt", newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        c: dict = dict(r)
        c["misses"] = [m for m in r["misses"].split(";") if m]
        for k in ("fa", "unified", "swa_full"):
            c[k] = r[k] == "True"
        for k, v in r.items():
            if k.endswith(("_meas", "_pred")) or k in ("ctx", "n_seq", "ubatch", "n_ctx", "n_ctx_seq", "n_ubatch",
                                                       "kv_cells", "swa_cells", "state_cells"):
                c[k] = int(v) if v not in ("", None) else None
        c["compute_err_pct"] = float(r["compute_err_pct"]) if r.get("compute_err_pct") else None
        out.append(c)
    return out


def kvplan_version(kvplan: Path) -> str:
    try:
        version = subprocess.run([str(kvplan), "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        version = "?"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip()
    except OSError:
        head = ""
    dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "libplanner", "cli", "data"],
                           stderr=subprocess.DEVNULL).returncode != 0 if head else False
    if not head:
        return version
    return f"{version} (built from {head}{' with uncommitted changes' if dirty else ''})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--subset", dest="mode", action="store_const", const="subset")
    mode.add_argument("--full", dest="mode", action="store_const", const="full")
    ap.add_argument("--measured", type=Path, default=None)
    ap.add_argument("--model-dir", type=Path, default=HERE / "models")
    ap.add_argument("--kvplan", type=Path, default=ROOT / "build" / "kvplan")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--show", type=int, default=25, help="mismatching contexts to print in full")
    ap.add_argument("--merge", action="store_true",
                    help="re-run only the measured file's families: keep the other families' rows of the existing "
                         "results (their CSV and summary) and replace these; the summary records the merge")
    ap.add_argument("--no-fail-on", default="", metavar="TARGETS",
                    help="comma-separated targets reported but not failed on (e.g. compute,fits while the compute "
                         "model is being fixed); the results still record them")
    args = ap.parse_args(argv)
    args.mode = args.mode or "subset"
    measured_path = args.measured or HERE / "out" / f"measured-{args.mode}.jsonl"
    rows = [json.loads(line) for line in measured_path.read_text().splitlines() if line.strip()]
    meta_path = Path(str(measured_path) + ".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}

    t0 = time.time()
    # a private copy of the binary: a rebuild while the sweep runs must not mix two kvplans in one result
    tmp = tempfile.TemporaryDirectory(prefix="kvplan-validation-")
    private = Path(tmp.name) / "kvplan"
    shutil.copy2(args.kvplan, private)
    version = kvplan_version(private)
    args.kvplan = private

    def one(row: dict) -> tuple[dict, dict]:
        cfg = sweep.Config.from_dict(row["config"])
        return row, kvplan_predict(args.kvplan, args.model_dir / f"{row['model']}.gguf", cfg)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pairs = list(pool.map(one, rows))
    compared = [compare_row(r, p) for r, p in pairs]
    compare_secs = time.time() - t0
    csv_path = args.results / (f"compare-{args.mode}.csv" + (".gz" if args.mode == "full" else ""))
    summary_path = args.results / f"summary-{args.mode}.json"
    merged = None
    if args.merge:
        rerun = sorted({r["model"] for r in rows}, key=lambda n: sweep.MODELS.index(n) if n in sweep.MODELS else 99)
        previous = json.loads(summary_path.read_text())
        kept = [c for c in read_compared(csv_path) if c["model"] not in rerun]
        merged = {"rerun_models": rerun, "rerun_contexts": len(compared),
                  "kept_models": sorted({c["model"] for c in kept}, key=lambda n: sweep.MODELS.index(n)
                                        if n in sweep.MODELS else 99),
                  "kept_contexts": len(kept), "kept_kvplan_version": previous.get("kvplan_version"),
                  "kept_measure_wall_seconds": previous.get("measure_wall_seconds"),
                  "kept_compare_wall_seconds": previous.get("compare_wall_seconds")}
        compared = kept + compared

    fams = family_table(compared)
    if merged:  # the kept families as their own run summarised them (its tie-breaks of equal compute errors)
        kept_fams = {f["model"]: f for f in previous["families"]}
        fams = [kept_fams.get(f["model"], f) if f["model"] in merged["kept_models"] else f for f in fams]
    print(f"kvplan vs llama.cpp ({args.mode}, CPU backend, {len(compared)} contexts): exact bytes matched / compared")
    print_table(fams)

    misses = [c for c in compared if c["misses"]]
    if misses:
        print(f"\n{len(misses)} context(s) missed a target:")
        for c in misses[: args.show]:
            line = f"  {c['model']:18s} {c['key']:48s} missed {','.join(c['misses'])}"
            parts = []
            for comp in ("weights", "k", "v", "swa_k", "swa_v", "state", "output"):
                if comp in c["misses"]:
                    parts.append(f"{comp} llama.cpp {c[f'{comp}_meas']} kvplan {c[f'{comp}_pred']}")
            if "compute" in c["misses"] and c["model"] in sweep.CLOSED_FORM_COMPUTE:
                parts.append(f"compute llama.cpp {c['compute_meas']} > kvplan upper bound {c['compute_high_pred']}")
            elif "compute" in c["misses"]:
                parts.append(f"compute llama.cpp {c['compute_meas']} kvplan {c['compute_pred']} ({c['compute_err_pct']:+.1f}%)")
            if "fits" in c["misses"]:
                parts.append(f"total llama.cpp {c['total_meas']} > kvplan upper bound {c['total_high_pred']}")
            if "detail" in c:
                parts.append(f"llama.cpp: {c['detail']['measured_error']}; kvplan: {c['detail']['kvplan_message']}")
            print(line + ("\n      " + "\n      ".join(parts) if parts else ""))
        if len(misses) > args.show:
            print(f"  ... and {len(misses) - args.show} more (see the CSV)")

    args.results.mkdir(parents=True, exist_ok=True)
    # the subset's CSV is committed as text; the full sweep's (about 17 000 rows) gzipped
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for c in sorted(compared, key=lambda c: (sweep.MODELS.index(c["model"]) if c["model"] in sweep.MODELS else 99,
                                             c["key"])):
        w.writerow({**c, "misses": ";".join(c["misses"])})
    if args.mode == "full":
        with open(csv_path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(buf.getvalue().encode())
    else:
        csv_path.write_text(buf.getvalue())

    first_ok = next((r for r in rows if r.get("status") == "ok"), {})
    engine_build = next((p.get("engine_build") for _, p in pairs if p.get("engine_build")), None)
    summary = {
        "mode": args.mode,
        "backend": "cpu",
        "llama_cpp_python": (first_ok.get("weights") or {}).get("llama_cpp_python"),
        "llama_cpp_build": "b10454 (4df29be4f)",
        "kvplan_engine_build": engine_build,
        "kvplan_version": version,
        "system_info": (first_ok.get("weights") or {}).get("system_info"),
        "contexts": len(compared),
        "contexts_missed": len(misses),
        "measure_wall_seconds": meta.get("wall_seconds"),
        "measure_jobs": meta.get("jobs"),
        "compare_wall_seconds": round(compare_secs, 1),
        "families": fams,
        "miss_groups": miss_groups(compared),
    }
    if merged:
        # the walls of the whole sweep: the kept families' share plus this run's
        for key in ("measure_wall_seconds", "compare_wall_seconds"):
            if summary[key] is not None and merged[f"kept_{key}"] is not None:
                summary[key] = round(summary[key] + merged[f"kept_{key}"], 1)
        summary["merged"] = merged
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\ncompare: {len(compared)} contexts, {len(misses)} missed a target; "
          f"kvplan ran in {compare_secs:.1f} s -> {csv_path}")
    tolerated = {t for t in args.no_fail_on.split(",") if t}
    failing = [c for c in misses if set(c["misses"]) - tolerated]
    if tolerated and len(failing) != len(misses):
        print(f"compare: {len(misses) - len(failing)} context(s) missed only {','.join(sorted(tolerated))} "
              "(--no-fail-on): not failing on them")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
