#!/usr/bin/env python3
"""Copy the harness results (data/priors/measured/<model-id>-kv-sweep.csv) into data/priors/measurements.csv,
the table tools/fit_priors.py fits: one measurements.csv row per result row, the provenance columns folded into
`notes`, ids `<prefix>c<ctx>_<K>_<V>_<rot|norot|base>_<metric>` with one prefix per model (PREFIXES: kvplan270m-
for Gemma 3 270M, kvplansmol135m- for SmolLM2-135M-Instruct,
kvplanqwen05b- for Qwen2.5-Coder-0.5B-Instruct). Rows of earlier exports of that model (its prefix)
are replaced, every other row is kept as it is and in its place; a model exported for the first time is appended.
Run after measure.py (and --normalize), then refit."""
from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MEASURED = ROOT / "data/priors/measured"
SWEEP = MEASURED / "gemma3-270m-kv-sweep.csv"
MEASUREMENTS = ROOT / "data/priors/measurements.csv"
# model id (measure.py MODELS; the sweep file is <model id>-kv-sweep.csv) -> measurements.csv id prefix
PREFIXES = {"gemma3-270m": "kvplan270m-", "smollm2-135m": "kvplansmol135m-", "qwen25-coder-0.5b": "kvplanqwen05b-"}
PREFIX = PREFIXES["gemma3-270m"]
# prefixes whose rows keep the notes of their first export (the provenance columns stay in the sweep file only)
LEGACY_NOTES = {"kvplan270m-"}
# "at least 32K scored tokens per cell": the harness default (65,536 tokens read per context length) scores
# 32,640 (ctx 512) to 32,760 (ctx 8192), the second half of every window; fewer is a partial cell
FULL_CELL_TOKENS = 32000
# A complete run of a smaller design (TOTAL_TOKENS=8192: the same ~4.1K scored tokens at every context length, the
# SmolLM2 seed-effect stage) is fitted with its standard error; a killed run, or fewer tokens, is a partial cell
STAGE_CELL_TOKENS = 4000


def prefix_of(sweep: Path) -> str:
    mid = sweep.name.removesuffix("-kv-sweep.csv")
    if mid not in PREFIXES:
        raise SystemExit(f"{sweep}: no measurements.csv prefix for model id {mid!r} (known: {', '.join(PREFIXES)})")
    return PREFIXES[mid]


def measurement_id(r: dict[str, str], prefix: str = PREFIX) -> str:
    rot = {"yes": "rot", "no": "norot"}[r["rotation"]]
    if r["k_type"] == "f16" and r["v_type"] == "f16" and not r["baseline"]:
        rot = "base"
    return f"{prefix}c{r['ctx']}_{r['k_type']}_{r['v_type']}_{rot}_{r['metric']}"


def measurement_row(r: dict[str, str], columns: list[str], sweep_name: str, prefix: str = PREFIX) -> dict[str, str]:
    scored = int(r["scored_tokens"] or 0)
    notes = r["notes"]
    if "partial run" in notes or scored < STAGE_CELL_TOKENS:
        notes += f"; {scored} scored tokens (partial run: the design asks at least {FULL_CELL_TOKENS})"
    elif scored < FULL_CELL_TOKENS:
        notes += (f"; {scored} scored tokens in {r['chunks']} windows, a complete run of the same-tokens stage "
                  f"(total_tokens {r.get('total_tokens', '')}; the full design asks {FULL_CELL_TOKENS}); {r['date']}")
    else:
        notes += f"; {scored} scored tokens in {r['chunks']} windows; {r['date']}"
    if r.get("model_sha256") and prefix not in LEGACY_NOTES:
        notes += (f"; {r.get('model_file', '')} sha256 {r['model_sha256'][:16]}, {r.get('engine_build', '')}, "
                  f"corpus {r.get('corpus', '')}, {r.get('seconds', '')} s wall")
    notes += f"; row {r['id']} of {sweep_name}"
    out = {c: r.get(c, "") for c in columns}
    out["id"] = measurement_id(r, prefix)
    out["notes"] = notes
    return out


def export(sweep: Path, measurements: Path, prefix: str | None = None) -> tuple[int, int]:
    pfx = prefix or (prefix_of(sweep) if sweep.name.endswith("-kv-sweep.csv") else PREFIX)
    with measurements.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        existing = list(reader)
    with sweep.open(newline="") as f:
        results = list(csv.DictReader(f))
    try:
        name = str(sweep.resolve().relative_to(ROOT))
    except ValueError:
        name = sweep.name
    new = [measurement_row(r, columns, name, pfx) for r in results]
    ids = [r["id"] for r in new]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"{sweep}: repeated cells; run measure.py --normalize {sweep} first")
    kept = [r for r in existing if not r["id"].startswith(pfx)]
    # the exported block goes where the previous export was (or at the end)
    at = next((i for i, r in enumerate(existing) if r["id"].startswith(pfx)), len(existing))
    before = [r for r in existing[:at] if not r["id"].startswith(pfx)]
    rows = before + new + kept[len(before):]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    measurements.write_bytes(buf.getvalue().encode())
    return len(new), len(existing) - len(kept)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sweep", type=Path, nargs="*", default=None,
                    help="results files (default: every data/priors/measured/<model id>-kv-sweep.csv of a known model)")
    ap.add_argument("--measurements", type=Path, default=MEASUREMENTS)
    a = ap.parse_args()
    sweeps = a.sweep or [MEASURED / f"{m}-kv-sweep.csv" for m in PREFIXES if (MEASURED / f"{m}-kv-sweep.csv").exists()]
    for sw in sweeps:
        added, replaced = export(sw, a.measurements)
        print(f"{a.measurements}: {added} rows from {sw} (replacing {replaced})")


if __name__ == "__main__":
    main()
