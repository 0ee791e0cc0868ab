#!/usr/bin/env python3
"""The task factor T that one model's own measurements imply (issue 14, item 4).

kvplan turns the perplexity-class cache loss L (nats: ln(PPL_Q / PPL_base)) into a task loss 1 - exp(-T * L)
(docs/priors.md 1, data/tasks.yaml). With L measured by measure.py on a model and the exact-match drop measured by
tasks.py on the same model, file and engine, T = -ln(1 - drop) / L. A cell that lost nothing bounds T from above
by one lost query: T < -ln(1 - 1/n) / L.

Usage: python tools/measure_kv/task_factor.py --sweep data/priors/measured/<m>-kv-sweep.csv
                                               --tasks data/priors/measured/<m>-kv-tasks.csv [--ctx-l 2048]
L is read at --ctx-l (the sweep's context) for every task context: the rows say which contexts were measured.
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path


def cache_losses(sweep: Path, ctx: int) -> dict[tuple[str, str, str], tuple[float, int]]:
    """(K, V, rotation) -> (L in nats, scored tokens) from the sweep's relative-perplexity rows at ctx."""
    out = {}
    with sweep.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] != "ppl" or not r["rel_change"] or int(r["ctx"]) != ctx:
                continue
            out[(r["k_type"], r["v_type"], r["rotation"])] = (math.log1p(float(r["rel_change"])), int(r["scored_tokens"] or 0))
    return out


def implied(drop: float, lost: int, n: int, loss: float) -> str:
    if loss <= 0:
        return "-"
    if lost == 0:
        return f"< {-math.log1p(-1.0 / n) / loss:.3g}"
    if drop >= 1 - 1e-9:  # every query lost: at least as large as one query short of that
        return f"> {-math.log(1.0 / n) / loss:.3g}"
    return f"{-math.log1p(-drop) / loss:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", type=Path, required=True)
    ap.add_argument("--tasks", type=Path, required=True)
    ap.add_argument("--ctx-l", type=int, default=2048, help="the sweep context whose L is used")
    a = ap.parse_args()
    losses = cache_losses(a.sweep, a.ctx_l)
    print(f"L from {a.sweep} at {a.ctx_l} tokens; drops from {a.tasks}\n")
    print("| task | ctx | K/V | rotation | L (nats) | exact base -> cell | lost / queries | implied T |")
    print("|---|---|---|---|---|---|---|---|")
    with a.tasks.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["k_type"] == "f16" and r["v_type"] == "f16":
                continue
            key = (r["k_type"], r["v_type"], r["rotation"])
            if key not in losses:
                continue
            loss, _ = losses[key]
            n = int(r["queries"])
            drop = float(r["exact_base"]) - float(r["exact"])
            lost = int(r["flips_lost"] or 0)
            print(f"| {r['task']} | {r['ctx']} | {r['k_type']}/{r['v_type']} | {r['rotation']} | {loss:.4f} | "
                  f"{float(r['exact_base']):.3f} -> {float(r['exact']):.3f} | {lost} / {n} | {implied(drop, lost, n, loss)} |")


if __name__ == "__main__":
    main()
