#!/usr/bin/env python3
"""Checks data/quality/*.yaml against the catalog and prints the coverage table of data/quality/README.md.

Usage: python tools/quality_coverage.py [--data DIR] [--families a,b,...] [--markdown]

Checks (exit 2 on the first list of errors): every benchmark id is defined once; every score names a defined
benchmark and a catalog model id (data/models/*.yaml); no duplicate (model, benchmark, variant, mode) row; every
value lies inside its benchmark's scale; mode is thinking, non-thinking or null; source and date are present.

Coverage: for each task group (general, coding, agentic, rag, reasoning) the number of catalog models with at least
one score on a benchmark whose `tasks` list contains that task. Needs PyYAML.
"""
import argparse
import glob
import os
import sys

import yaml

TASK_GROUPS = ("general", "coding", "agentic", "rag", "reasoning")
MODES = (None, "thinking", "non-thinking")


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def catalog_models(data_dir):
    """Model id -> family (file stem) for every model in data/models/*.yaml."""
    models = {}
    for path in sorted(glob.glob(os.path.join(data_dir, "models", "*.yaml"))):
        family = os.path.splitext(os.path.basename(path))[0]
        for entry in load_yaml(path).get("models", []) or []:
            models[entry["id"]] = family
    return models


def load_quality(data_dir):
    benchmarks, scores = {}, []
    errors = []
    for path in sorted(glob.glob(os.path.join(data_dir, "quality", "*.yaml"))):
        doc = load_yaml(path)
        for b in doc.get("benchmarks", []) or []:
            if b["id"] in benchmarks:
                errors.append(f"{path}: benchmark '{b['id']}' defined twice")
            benchmarks[b["id"]] = b
        for s in doc.get("scores", []) or []:
            scores.append((path, s))
    return benchmarks, scores, errors


def check_scores(benchmarks, scores, models):
    errors, seen = [], set()
    for path, s in scores:
        where = f"{path}: score {s.get('model')}/{s.get('benchmark')}"
        bench = benchmarks.get(s.get("benchmark"))
        if s.get("model") not in models:
            errors.append(f"{where}: unknown catalog model id")
        if bench is None:
            errors.append(f"{where}: unknown benchmark id")
            continue
        lo, hi = bench["scale"]
        value = s.get("value")
        if not isinstance(value, (int, float)) or not lo <= value <= hi:
            errors.append(f"{where}: value {value!r} outside scale [{lo}, {hi}]")
        if s.get("mode") not in MODES:
            errors.append(f"{where}: mode {s.get('mode')!r} is not thinking, non-thinking or null")
        if not s.get("source") or not s.get("date"):
            errors.append(f"{where}: source and date are required")
        key = (s.get("model"), s.get("benchmark"), s.get("variant"), s.get("mode"))
        if key in seen:
            errors.append(f"{where}: duplicate (model, benchmark, variant, mode) {key}")
        seen.add(key)
    return errors


def coverage(benchmarks, scores, models, families=None):
    """Task group -> (covered model ids, catalog model ids considered)."""
    considered = {m for m, fam in models.items() if families is None or fam in families}
    covered = {t: set() for t in TASK_GROUPS}
    for _, s in scores:
        bench = benchmarks.get(s["benchmark"])
        if bench is None or s["model"] not in considered:
            continue
        for task in bench["tasks"]:
            if task in covered:
                covered[task].add(s["model"])
    return covered, considered


def table(covered, considered, markdown):
    n = len(considered)
    lines = []
    if markdown:
        lines += ["| task group | models with a figure | of catalog | coverage |", "|---|---|---|---|"]
    for task in TASK_GROUPS:
        k = len(covered[task])
        pct = 100.0 * k / n if n else 0.0
        lines.append(f"| {task} | {k} | {n} | {pct:.0f}% |" if markdown else f"{task:10s} {k:4d} / {n:<4d} {pct:5.1f}%")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data"))
    parser.add_argument("--families", help="comma-separated data/models file stems to restrict the coverage to")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--missing", action="store_true", help="list the models without a figure per task group")
    args = parser.parse_args()

    models = catalog_models(args.data)
    benchmarks, scores, errors = load_quality(args.data)
    errors += check_scores(benchmarks, scores, models)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    families = set(args.families.split(",")) if args.families else None
    covered, considered = coverage(benchmarks, scores, models, families)
    print(table(covered, considered, args.markdown))
    if args.missing:
        for task in TASK_GROUPS:
            print(f"{task}: no figure for {', '.join(sorted(considered - covered[task])) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
