#!/usr/bin/env python3
"""Print the sweep results (data/priors/measured/*.csv from measure.py) as markdown tables:
perplexity change vs f16/f16 and KLD, by K/V pair and rotation (rows) and context length (columns),
and the trend of each pair from the shortest to the longest context measured."""
from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
FULL_CELL_TOKENS = 32000  # as export.py: fewer scored tokens than the design make a partial cell
DEFAULT = HERE.parent.parent / "data/priors/measured/gemma3-270m-kv-sweep.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv", nargs="?", type=Path, default=DEFAULT)
    a = ap.parse_args()
    rows = list(csv.DictReader(a.csv.open()))
    ctxs = sorted({int(r["ctx"]) for r in rows})
    cell: dict[tuple[str, str, str], dict[int, dict[str, str]]] = defaultdict(dict)
    base: dict[int, dict[str, str]] = {}
    for r in rows:
        c = int(r["ctx"])
        if r["metric"] == "ppl" and r["k_type"] == "f16" and r["v_type"] == "f16" and not r["baseline"]:
            base[c] = r
            continue
        key = (f"{r['k_type']}/{r['v_type']}", r["rotation"], r["metric"])
        cell[key][c] = r

    def part(r: dict[str, str]) -> str:
        short = int(r.get("scored_tokens") or 0) < FULL_CELL_TOKENS
        return "*" if "partial" in r.get("notes", "") or short else ""

    print("f16/f16 base perplexity (± per-token SE; scored tokens):\n")
    print("| ctx | " + " | ".join(str(c) for c in ctxs) + " |")
    print("|---|" + "---|" * len(ctxs))
    print("| f16/f16 | " + " | ".join(
        f"{float(base[c]['value']):.2f} ± {float(base[c]['stderr']):.2f} ({base[c]['scored_tokens']}){part(base[c])}"
        if c in base else "–" for c in ctxs) + " |")
    for metric, title, f in (
        ("ppl", "perplexity change vs f16/f16 at the same context, % (± paired SE)",
         lambda r: f"{100 * float(r['rel_change']):+.2f} ± {100 * float(r['noise']):.2f}"),
        ("kld", "mean KL divergence from f16/f16, nats (± per-token SE)",
         lambda r: f"{float(r['value']):.4f} ± {float(r['stderr']):.4f}"),
    ):
        print(f"\n{title}:\n")
        print("| K/V | rotation | " + " | ".join(str(c) for c in ctxs) + " | trend, shortest → longest |")
        print("|---|---|" + "---|" * len(ctxs) + "---|")
        for (pair, rot, m), byc in sorted(cell.items()):
            if m != metric:
                continue
            vals = [f(byc[c]) + part(byc[c]) if c in byc else "–" for c in ctxs]
            have = [c for c in ctxs if c in byc]
            trend = ""
            if len(have) >= 2:
                lo, hi = byc[have[0]], byc[have[-1]]
                if metric == "kld":
                    d = float(hi["value"]) - float(lo["value"])
                    se = math.hypot(float(hi["stderr"] or 0), float(lo["stderr"] or 0))
                else:
                    d = float(hi["rel_change"]) - float(lo["rel_change"])
                    se = math.hypot(float(hi["noise"] or 0), float(lo["noise"] or 0))
                scale = 1.0 if metric == "kld" else 100.0
                trend = f"{scale * d:+.4g} ({d / se:+.1f} SE)" if se > 0 else f"{scale * d:+.4g}"
            print(f"| {pair} | {rot} | " + " | ".join(vals) + f" | {trend} |")
    print(f"\n* = partial cell: fewer than {FULL_CELL_TOKENS:,} scored tokens (a run stopped early, or a shorter run)")


if __name__ == "__main__":
    main()
