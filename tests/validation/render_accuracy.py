#!/usr/bin/env python3
"""Renders the validation section of docs/accuracy.md from the committed results.

The section lies between `<!-- validation:begin -->` and `<!-- validation:end -->` and is generated
from tests/validation/results/summary-subset.json and summary-full.json (written by compare.py).

    python render_accuracy.py            rewrite the section (appended at the end if the markers are absent)
    python render_accuracy.py --check    exit 1 if the document does not match the results (for ctest)
    python render_accuracy.py --print    print the section

Standard library only: the check runs without the validation environment.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DOC = ROOT / "docs" / "accuracy.md"
RESULTS = HERE / "results"
BEGIN = "<!-- validation:begin -->"
END = "<!-- validation:end -->"

sys.path.insert(0, str(HERE))
import sweep  # noqa: E402  (standard library only)


def frac(pair: list[int]) -> str:
    if pair[1] == 0:
        return "—"
    return f"{pair[0]}/{pair[1]}"


def mib(b: int | None) -> str:
    return "—" if b is None else f"{b / 2**20:.2f}"


def duration(sec: float | None) -> str:
    if sec is None:
        return "?"
    sec = float(sec)
    if sec < 120:
        return f"{sec:.0f} s"
    return f"{sec / 60:.1f} min"


def family_table(summary: dict) -> list[str]:
    out = ["| family | what it exercises | contexts | K | V | SWA K | SWA V | state | weights | output | "
           "compute within 10 % | worst compute error | never fits where llama.cpp needs more | refusals agree |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in summary["families"]:
        ex = f["exact"]
        worst = "—" if f["compute_worst_pct"] is None else f"{f['compute_worst_pct']:+.1f} % (`{f['compute_worst_key']}`)"
        refusals = f"{f['refused_agree']}" + (f" ({f['refusal_disagree']} disagree)" if f["refusal_disagree"] else "")
        out.append(f"| `{f['model']}` | {sweep.FAMILIES.get(f['model'], '')} | {f['contexts']} | {frac(ex['k'])} | "
                   f"{frac(ex['v'])} | {frac(ex['swa_k'])} | {frac(ex['swa_v'])} | {frac(ex['state'])} | "
                   f"{frac(ex['weights'])} | {frac(ex['output'])} | {frac(f['compute_within'])} | {worst} | "
                   f"{frac(f['fits_safe'])} | {refusals} |")
    return out


def closed_form_note(summary: dict) -> list[str]:
    """The families whose compute buffer kvplan sizes with closed forms: their target is the upper bound."""
    fams = [f for f in summary["families"] if f.get("compute_bound")]
    if not fams:
        return []
    held = "; ".join(f"`{f['model']}` {frac(f['compute_bound'])}, error {f['compute_min_pct']:+.1f} to "
                     f"{f['compute_max_pct']:+.1f} %" for f in fams)
    return ["", "The architectures of " + ", ".join(f"`{f['model']}`" for f in fams) + " have no `graph:` rule in "
            "`data/engines/llama.cpp.yaml`: kvplan sizes their compute buffer with the closed forms of "
            "docs/formulas.md §5.2, whose target is their upper bound (kvplan's compute `high_bytes` at least "
            "llama.cpp's buffer); the 10 % column is reported, not a target. Upper bound held: " + held + "."]


def worst_compute(summary: dict) -> tuple[float | None, str]:
    worst, where = None, ""
    for f in summary["families"]:
        if f.get("compute_bound"):
            continue  # closed forms: their target is the bound (closed_form_note)
        e = f["compute_worst_pct"]
        if e is not None and (worst is None or abs(e) > abs(worst)):
            worst, where = e, f"{f['model']} `{f['compute_worst_key']}`"
    return worst, where


def misses_list(summary: dict) -> list[str]:
    groups = summary.get("miss_groups") or []
    if not groups:
        return ["No context missed a target."]
    csv_name = "compare-full.csv.gz" if summary["mode"] == "full" else f"compare-{summary['mode']}.csv"
    out = [f"{summary['contexts_missed']} of {summary['contexts']} contexts missed a target "
           f"(`tests/validation/results/{csv_name}` has every number):", "",
           "| family | target | contexts | example | llama.cpp | kvplan |", "|---|---|---|---|---|---|"]
    for g in groups:
        d = g.get("detail") or {}
        if g["target"] == "compute" and d.get("bound"):
            ex = f"tightest: `{d.get('key')}` (upper bound {100 * d.get('rel', 0):+.1f} %)"
            lc, kv = f"{d.get('llama_cpp')} B", f"{d.get('kvplan')} B (upper bound)"
        elif g["target"] in ("compute", "fits"):
            label = "worst" if g["target"] == "compute" else "worst (total vs kvplan's upper bound)"
            ex = f"{label}: `{d.get('key')}` ({100 * d.get('rel', 0):+.1f} %)"
            lc, kv = f"{d.get('llama_cpp')} B", f"{d.get('kvplan')} B"
        elif g["target"] == "refusal":
            ex = f"`{d.get('key')}`"
            msg = d.get("message") or []
            lc = d.get("llama_cpp", "") + (f": {msg[-1]}" if msg else "")
            lc = lc.replace("|", "\\|")
            kv = d.get("kvplan", "")
        else:
            ex = f"`{d.get('key')}`" if d else ", ".join(f"`{k}`" for k in g["examples"])
            lc, kv = (f"{d.get('llama_cpp')} B", f"{d.get('kvplan')} B") if d else ("", "")
        out.append(f"| `{g['model']}` | {TARGET_NAMES.get(g['target'], g['target'])} | {g['count']} | {ex} | {lc} | {kv} |")
    return out


TARGET_NAMES = {
    "k": "K bytes", "v": "V bytes", "swa_k": "SWA K bytes", "swa_v": "SWA V bytes", "state": "recurrent state bytes",
    "weights": "weight bytes", "output": "output buffer", "compute": "compute within 10 %",
    "fits": "never fits where llama.cpp needs more", "refusal": "refuses exactly when llama.cpp does",
    "crashed": "llama.cpp crashed", "measurement-inconsistent": "measurement self-check",
}


def number(n: int) -> str:
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]
    return words[n] if n < len(words) else str(n)


def render() -> str:
    summaries = {}
    for mode in ("subset", "full"):
        p = RESULTS / f"summary-{mode}.json"
        if p.exists():
            summaries[mode] = json.loads(p.read_text())
    lines = [BEGIN,
             "<!-- Generated by tests/validation/render_accuracy.py from tests/validation/results/summary-*.json; "
             "edit those, not this text. -->", ""]
    if not summaries:
        lines += ["No validation results are committed yet (`tests/validation/run.sh` writes them).", "", END]
        return "\n".join(lines) + "\n"
    main = summaries.get("full") or summaries["subset"]
    lines += [
        f"`tests/validation/` creates llama.cpp contexts for synthetic GGUF models of {number(len(main['families']))} "
        "architecture families and",
        "compares what llama.cpp allocated with kvplan's prediction for the same file (`kvplan --model FILE.gguf",
        "--backend cpu …`). The bytes come from llama.cpp itself: a small probe library interposed on ggml's",
        "allocator reads every weight, KV and recurrent-state buffer tensor by tensor, and",
        "`llama_get_memory_breakdown` gives the compute buffer; the logged sizes (`KV buffer size`,",
        "`llama_kv_cache: size = … (N cells, L layers, S/T seqs)`, `RS buffer size`, `compute buffer size`) are",
        "checked against those bytes.",
        "",
        f"- llama.cpp: {main.get('llama_cpp_build')}, as vendored by llama-cpp-python {main.get('llama_cpp_python')} "
        "(built from the PyPI sdist, `-DGGML_NATIVE=OFF`).",
        "- Backend: CPU only, weights loaded without mmap, no extra (repacked) buffer types, `n_gpu_layers = 0`;",
        "  every `llama_context_params` field set explicitly (llama-cpp-python's defaults differ from llama-server's).",
        f"- kvplan: `{main.get('kvplan_version')}`.",
        "- Sweep (`tests/validation/sweep.py`): contexts 512 to 32768 (including sizes that are not multiples of 256),",
        "  all nine cache types as K = V plus four mixed pairs, flash attention on and off, 1, 2 and 4 slots with",
        "  and without `-kvu`, ubatch 256, 512 and 1024, and `--swa-full` on and off for the sliding-window families.",
        "- Weights: llama.cpp's CPU model buffer, which on the CPU backend also holds `token_embd`; compared with",
        "  kvplan's `weights` + `weights_host`. Compute: llama.cpp's CPU compute buffer; compared with kvplan's",
        "  `compute` + `compute_host`. \"Never fits where llama.cpp needs more\": the sum of kvplan's upper bounds",
        "  (`high_bytes`) is at least what llama.cpp allocated in all.",
        "",
    ]
    for mode, s in summaries.items():
        lines.append(f"- `run.sh --{mode}`: {s['contexts']} contexts; measuring took "
                     f"{duration(s.get('measure_wall_seconds'))} ({s.get('measure_jobs')} jobs on {sweep.MACHINE}), "
                     f"kvplan's predictions {duration(s.get('compare_wall_seconds'))}; "
                     f"{s['contexts_missed']} missed a target.")
        if s.get("merged"):
            mg = s["merged"]
            lines.append(f"  Merged run: {', '.join(f'`{m}`' for m in mg['rerun_models'])} ({mg['rerun_contexts']} contexts) "
                         f"measured and predicted by this kvplan; the other {len(mg['kept_models'])} families' "
                         f"{mg['kept_contexts']} contexts kept from the run of `{mg['kept_kvplan_version']}` "
                         "(`run.sh --models … --merge`); the times add both runs.")
    lines.append(f"- Building llama-cpp-python {main.get('llama_cpp_python')} from source, once per machine: "
                 f"{sweep.PACKAGE_BUILD} on {sweep.MACHINE}.")
    worst, where = worst_compute(main)
    lines += ["", f"### Predicted vs measured per family (CPU backend, {main['mode']} sweep)", "",
              "Exact figures: contexts where kvplan's bytes equal llama.cpp's / contexts where the family has that "
              "buffer. Compute: contexts within 10 %, and the worst signed error "
              "((kvplan − llama.cpp) / llama.cpp).", ""]
    lines += family_table(main)
    lines += closed_form_note(main)
    closed = any(f.get("compute_bound") for f in main["families"])
    lines += ["", f"Worst compute-buffer error{' of the graph-modelled families' if closed else ''}: "
              f"{'—' if worst is None else f'{worst:+.1f} %'}"
              + (f" ({where})." if where else "."), ""]
    lines += ["Where kvplan missed:", ""]
    lines += misses_list(main)
    if "full" in summaries and "subset" in summaries:
        lines += ["", "### CI subset", "", "The fixed subset CI runs (`run.sh --subset`), same columns:", ""]
        lines += family_table(summaries["subset"])
        lines += closed_form_note(summaries["subset"])
    lines += [
        "",
        "### Rerunning it",
        "",
        "```sh",
        "cmake --build build                      # kvplan",
        "tests/validation/run.sh --subset         # the CI subset; the first run builds llama-cpp-python",
        "tests/validation/run.sh --full           # the whole sweep",
        "python3 tests/validation/render_accuracy.py   # regenerate this section from results/",
        "```",
        "",
        "Other backends (CUDA, Metal, …) are not measured by this harness yet.",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def splice(doc: str, section: str) -> str:
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + section.rstrip("\n") + tail
    return doc.rstrip("\n") + "\n\n## 4. Validation against llama.cpp\n\n" + section


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--print", action="store_true")
    ap.add_argument("--doc", type=Path, default=DOC)
    args = ap.parse_args(argv)
    section = render()
    if args.print:
        sys.stdout.write(section)
        return 0
    doc = args.doc.read_text()
    new = splice(doc, section)
    if args.check:
        if new != doc:
            sys.stdout.writelines(difflib.unified_diff(doc.splitlines(True), new.splitlines(True),
                                                       str(args.doc), "rendered from tests/validation/results"))
            print(f"render_accuracy: {args.doc} does not match tests/validation/results; "
                  "run python3 tests/validation/render_accuracy.py", file=sys.stderr)
            return 1
        print(f"render_accuracy: {args.doc} matches tests/validation/results")
        return 0
    args.doc.write_text(new)
    print(f"render_accuracy: wrote the validation section of {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
