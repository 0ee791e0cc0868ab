#!/usr/bin/env python3
"""Re-plan every vLLM / SGLang start-up log in this directory with kvplan and compare (issue 18, item 5).

Each <id>.yaml holds one log quoted in a public thread: its source, engine, GPUs, tensor/pipeline parallel
sizes, model, launch flags, the figures it printed (`logged`, GiB per GPU) and the lines verbatim. For
each, this script runs

    kvplan --engine vllm|sglang --gpu G --tp N --model M --ctx-size max_model_len --np 1 --json
           [--weights W] [--cache-type-k D --cache-type-v D]

with the engine's budget set from the log: a copy of data/engines/<engine>.yaml in a temporary --data
directory whose memory_fraction is the log's --gpu-memory-utilization / --mem-fraction-static, and (vLLM)
whose activation batch is the log's --max-num-batched-tokens when the log states it. It then compares, per
GPU (gpu0):

- weights: the `weights` allocation with the log's "Model loading took" / "Load weight end ... mem usage";
- KV bytes per token: kvplan's K+V for ctx tokens over ctx with the log's pool over its token count
  (SGLang prints the pool and the tokens; vLLM prints the pool and the tokens, or blocks of 16);
- KV pool: kvplan's planned KV plus the device headroom (the pool its capacity figure assumes) with
  vLLM's "Available KV cache memory" (V0: kv_cache_size / "the rest of the memory reserved for KV Cache")
  and SGLang's K size + V size;
- KV tokens: kvplan's max_concurrency x ctx (how vLLM derives "GPU KV cache size") with the log's tokens
  (vLLM V0: GPU blocks x 16);
- capacity: kvplan's max_concurrency with "Maximum concurrency for N tokens per request: X";
- CUDA graphs (`cuda_graphs`), activation peak (`compute`), non-torch memory (the pool's overhead).

Where kvplan has no figure, or the log no model kvplan knows, the row says so. Signed error = (kvplan -
log) / |log|.

Usage:
  replan.py --kvplan build/kvplan                      # print the tables
  replan.py --kvplan build/kvplan --markdown FILE      # also write them to FILE
  replan.py --kvplan build/kvplan --update-doc docs/accuracy.md
  replan.py --kvplan build/kvplan --check              # exit 1 when a checked figure is out of tolerance
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
GIB = float(1 << 30)
VLLM_BLOCK = 16  # CacheConfig block_size default: a V0 log prints blocks, V1 tokens

# --check: weights from the parameter count within 2 % where the checkpoint is a format kvplan plans (bf16,
# fp8) and no stand-in; KV bytes per token within the log's own rounding (Row.tol, see per_token_row).
WEIGHTS_TOL = 0.02

# What the engine's version did that today's vLLM (data/engines/vllm.yaml) does otherwise; each from the source:
# - CUDA graphs were captured after the pool was sized, outside the budget, until vLLM estimated them during
#   profiling (vllm-project/vllm PR #30515, merged 2025-12-11; on by default since v0.21.0): logs dated before
#   that are replayed without kvplan's graph estimate, and their graph figure is compared with that estimate.
# - The profile's sampler sorted the logits (vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p) where
#   FlashInfer's sampler was off (vLLM 0.8.x: PR #14815, FlashInfer >= 0.2.3 disabled, until PR #15777): a log
#   whose entry says `sampler: sort` (settings) is replayed with that path's bytes per logit (the measurement of
#   PR #32558, 37 B, plus the 2 B of the bf16 logits the caller keeps).
GRAPHS_IN_BUDGET_SINCE = "2025-12-11"
SORT_SAMPLER_BYTES_PER_LOGIT = 39


@dataclass
class Row:
    figure: str
    logged: float | None
    kvplan: float | None
    unit: str = "GiB"
    note: str = ""
    tol: float | None = None  # relative tolerance when --check enforces this row

    @property
    def error(self) -> float | None:
        if self.logged is None or self.kvplan is None or self.logged == 0:
            return None
        return (self.kvplan - self.logged) / abs(self.logged)

    @property
    def failed(self) -> bool:
        return self.tol is not None and (self.error is None or abs(self.error) > self.tol)


@dataclass
class Result:
    entry: dict
    rows: list[Row] = field(default_factory=list)
    skipped: str | None = None
    plan_exit: int | None = None


def load_entries(folder: Path) -> list[dict]:
    entries = [yaml.safe_load(p.read_text()) for p in sorted(folder.glob("*.yaml"))]
    for e in entries:
        for key in ("id", "source", "engine", "gpu", "tp", "model", "settings", "logged", "lines"):
            if key not in e:
                raise SystemExit(f"{e.get('id', '?')}: missing field {key!r}")
    return entries


def set_field(src: str, key: str, value: object, path: Path) -> str:
    """Replace the line `  key: <value>` in an engine file; a file without the field is an error, not a silent default."""
    out, n = re.subn(rf"(?m)^  {key}: .*$", f"  {key}: {value}", src, count=1)
    if n != 1:
        raise SystemExit(f"{path}: no '{key}:' field to replay the log's setting into")
    return out


def replay_engine(data_root: Path, entry: dict, engines_dir: Path) -> str:
    """A copy of the engine's data file with the log's budget, under an id of its own."""
    engine, settings = entry["engine"], entry["settings"]
    engine_id = f"{engine}-replay-{entry['id']}"
    path = engines_dir / f"{engine}.yaml"
    src = set_field(path.read_text(), "id", engine_id, path)
    fraction = settings.get("gpu_memory_utilization", settings.get("mem_fraction_static"))
    if fraction is not None:
        src = set_field(src, "memory_fraction", fraction, path)
    batched = settings.get("max_num_batched_tokens")
    if batched is not None and engine == "vllm":
        src = set_field(src, "activation_tokens", batched, path)
        src = set_field(src, "activation_tokens_large", batched, path)
    if engine == "vllm" and (graphs_outside_budget(entry) or settings.get("enforce_eager")):
        src = set_field(src, "graphs_mib", "{typical: 0, high: 0}", path)
    if engine == "vllm" and settings.get("sampler") == "sort":
        src = set_field(src, "sampler_bytes_per_logit", SORT_SAMPLER_BYTES_PER_LOGIT, path)
    out = data_root / "engines" / f"{engine_id}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(src)
    return engine_id


def graphs_outside_budget(entry: dict) -> bool:
    return str(entry.get("date", "")) < GRAPHS_IN_BUDGET_SINCE


def engine_graphs_gib(engines_dir: Path) -> float:
    """kvplan's typical CUDA-graph estimate for vLLM (data/engines/vllm.yaml graphs_mib)."""
    runtime = yaml.safe_load((engines_dir / "vllm.yaml").read_text())["runtime"]
    return runtime["graphs_mib"]["typical"] / 1024


def kvplan_args(entry: dict, engine_id: str, data_root: Path) -> list[str]:
    model, settings = entry["model"], entry["settings"]
    replan = entry.get("replan", {})
    gpu = replan.get("gpu", entry["gpu"].get("kvplan"))
    tp = replan.get("tp", entry["tp"])
    ctx = replan.get("ctx_size", settings.get("max_total_tokens", settings.get("max_model_len")))
    args = ["--engine", engine_id, "--data", str(data_root), "--gpu", gpu, "--tp", str(tp),
            "--model", model["kvplan"], "--ctx-size", str(ctx), "--np", "1", "--json", "--top", "1"]
    weights = replan.get("weights", model.get("weights"))
    if weights not in (None, "native"):
        args += ["--weights", weights]
    if settings.get("max_num_seqs") is not None:
        args += ["--max-num-seqs", str(settings["max_num_seqs"])]
    dtype = settings.get("kv_cache_dtype")
    if dtype is not None:
        args += ["--cache-type-k", dtype, "--cache-type-v", dtype]
    return args


def run_kvplan(kvplan: str, args: list[str]) -> tuple[int, dict]:
    proc = subprocess.run([kvplan, *args], capture_output=True, text=True, timeout=120)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"kvplan exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:300]}")


KV_KINDS = ("k_cache", "v_cache", "swa_k_cache", "swa_v_cache", "state")


def gpu0_figures(plan: dict) -> dict[str, float] | None:
    """Bytes per kind on the first GPU pool of the top option, its headroom and overhead, and the capacity."""
    if not plan.get("options"):
        return None
    option = plan["options"][0]
    pools = [p for p in option.get("pools", []) if p["pool"].startswith("gpu")]
    pool_id = pools[0]["pool"] if pools else "gpu0"
    sums: dict[str, float] = {}
    for a in option["allocations"]:
        if a["pool"] == pool_id:
            sums[a["what"]] = sums.get(a["what"], 0.0) + a["bytes"]
    sums["kv"] = sum(sums.get(k, 0.0) for k in KV_KINDS)
    if pools:
        sums["headroom"] = float(pools[0]["headroom_bytes"])
        # the headroom is what the pool's upper bounds leave; with the typical figures instead it grows by this
        sums["bound_slack"] = float(pools[0]["total_high_bytes"] - pools[0]["total_bytes"])
        sums["overhead"] = float(pools[0]["total_bytes"] - pools[0]["allocations_bytes"])  # the runtime's own
    sums["max_concurrency"] = option.get("max_concurrency")
    sums["pool_tokens"] = option.get("kv_pool_tokens")  # the engine's own token count, where the build prints it
    resolved = plan.get("resolved", {})
    sums["seqs"] = float(max(1, resolved.get("concurrency") or resolved.get("n_parallel") or 1))
    return sums


def logged_pool(entry: dict) -> tuple[float | None, int]:
    """The logged KV pool (GiB per GPU) and how many two-decimal figures it adds up."""
    lg = entry["logged"]
    if "kv_cache_gib" in lg:
        return lg["kv_cache_gib"], 1
    if "k_size_gib" in lg:
        return lg["k_size_gib"] + lg.get("v_size_gib", 0.0), 2
    return lg.get("kv_size_gib"), 1


def logged_tokens(entry: dict) -> tuple[float | None, str]:
    lg = entry["logged"]
    if "kv_tokens" in lg:
        return lg["kv_tokens"], ""
    if "gpu_blocks" in lg:
        return lg["gpu_blocks"] * entry["settings"].get("block_size", VLLM_BLOCK), "blocks x 16"
    return None, ""


def per_token_row(entry: dict, fig: dict, ctx: int) -> Row | None:
    """KV bytes per token: the log's pool over its tokens against kvplan's K+V over ctx. The log's pool has two
    decimals of GiB (each figure +-0.005) and vLLM rounds the pool down to whole blocks of 16 tokens; that is
    the tolerance. vLLM with TP > 1 prints one rank's pool but sizes every rank by the smallest: not checked."""
    (pool, figures), (tokens, how) = logged_pool(entry), logged_tokens(entry)
    if pool is None or not tokens or pool <= 0:
        return None
    tol = 0.005 * figures / pool + (VLLM_BLOCK / tokens if entry["engine"] == "vllm" else 0.0) + 1e-4
    checked = entry["engine"] == "sglang" or entry["tp"] == 1
    if entry.get("kv_note"):
        checked = False
    note = "log: pool / tokens" + (f" ({how})" if how else "")
    if not checked:
        note += "; pool and tokens of different ranks, not checked"
    per_token = fig["kv"] / (ctx * fig["seqs"]) if fig.get("kv") else None
    return Row("kv_per_token", pool * GIB / tokens / 1024, per_token / 1024 if per_token else None, "KiB",
               note, tol if checked else None)


def pool_rows(entry: dict, fig: dict, ctx: int) -> list[Row]:
    """kvplan's pool is its planned KV plus the device headroom, the quantity its max_concurrency divides; it
    is computed here also where one request does not fit (headroom < 0), when kvplan prints no capacity."""
    lg, rows = entry["logged"], []
    if entry["settings"].get("max_total_tokens") is not None:
        return rows  # the pool is fixed by the flag: only its bytes per token say anything
    kv = fig.get("kv") or 0.0
    per_conversation = kv / fig["seqs"]
    conc = fig.get("max_concurrency")
    derived = conc is None and kv > 0
    if derived:  # one request does not fit: the pool its headroom leaves, as kvplan's own formula would give it
        conc = (kv + fig["headroom"]) / per_conversation
    pool_bytes = conc * per_conversation if conc is not None and kv else None
    note = "kvplan: capacity x one conversation's KV" + (
        "; one request does not fit, kvplan prints no capacity: KV + headroom" if derived else "")
    pool, _ = logged_pool(entry)
    if pool is not None:
        rows.append(Row("kv_pool", pool, pool_bytes / GIB if pool_bytes is not None else None, note=note))
        typical = (kv + fig["headroom"] + fig["bound_slack"]) / GIB if kv else None
        rows.append(Row("kv_pool_typical", pool, typical,
                        note="kvplan: KV + headroom with its typical figures instead of its upper bounds"))
    tokens, how = logged_tokens(entry)
    if tokens:
        planned = fig.get("pool_tokens") or (conc * ctx if conc is not None else None)
        source = "kvplan: kv_pool_tokens" if fig.get("pool_tokens") else "kvplan: capacity x ctx"
        rows.append(Row("kv_tokens", tokens, planned, "tokens", "; ".join(x for x in (how, source) if x)))
    if "max_concurrency" in lg:
        rows.append(Row("capacity", lg["max_concurrency"], conc, "x", "derived from the pool" if derived else ""))
        typical = (kv + fig["headroom"] + fig["bound_slack"]) / per_conversation if kv else None
        rows.append(Row("capacity_typical", lg["max_concurrency"], typical, "x",
                        "kvplan: the pool at its typical figures over one conversation's KV"))
    return rows


def compare(entry: dict, fig: dict[str, float], ctx: int, weights_id: str, graphs_estimate: float) -> list[Row]:
    lg, rows = entry["logged"], []
    checked_weights = entry["model"].get("weights") in ("bf16", "fp8") and not entry["model"].get("note")
    if "weights_gib" in lg:
        rows.append(Row("weights", lg["weights_gib"], fig.get("weights", 0.0) / GIB or None,
                        note=f"kvplan weights: {weights_id}", tol=WEIGHTS_TOL if checked_weights else None))
    row = per_token_row(entry, fig, ctx)
    if row:
        rows.append(row)
    rows += pool_rows(entry, fig, ctx)
    if "cuda_graph_gib" in lg:
        graphs = fig.get("cuda_graphs")
        if graphs:
            rows.append(Row("cuda_graphs", lg["cuda_graph_gib"], graphs / GIB))
        elif entry["engine"] == "vllm":  # this version captured them outside the budget: kvplan's estimate as is
            rows.append(Row("cuda_graphs", lg["cuda_graph_gib"], graphs_estimate,
                            note="kvplan's typical estimate (vllm.yaml graphs_mib); this version captured outside the budget"))
        else:
            rows.append(Row("cuda_graphs", lg["cuda_graph_gib"], None, note="kvplan counts none (outside the fraction)"))
    activation, note = lg.get("activation_gib"), ""
    if activation is None and "torch_peak_gib" in lg and "weights_gib" in lg:
        activation, note = lg["torch_peak_gib"] - lg["weights_gib"], "log: torch peak - weights"
    if activation is not None:
        act = fig.get("compute")
        rows.append(Row("activation", activation, act / GIB if act else None, note=note))
    if "non_torch_gib" in lg:
        rows.append(Row("non_torch", lg["non_torch_gib"], fig["overhead"] / GIB if fig.get("overhead") else None,
                        note="kvplan: the pool's runtime overhead (CUDA context, non-torch)"))
    only = entry.get("replan", {}).get("compare")
    return [r for r in rows if only is None or r.figure in only]


def replan(kvplan: str, entry: dict, data_root: Path, engines_dir: Path) -> Result:
    res = Result(entry)
    if entry.get("skip"):
        res.skipped = entry["skip"]
        return res
    if not entry["model"].get("kvplan") or not (entry["gpu"].get("kvplan") or entry.get("replan", {}).get("gpu")):
        res.skipped = "no kvplan catalog id for the model or the GPU"
        return res
    engine_id = replay_engine(data_root, entry, engines_dir)
    args = kvplan_args(entry, engine_id, data_root)
    try:
        res.plan_exit, plan = run_kvplan(kvplan, args)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        res.skipped = f"kvplan failed: {exc}"
        return res
    if "error" in plan:
        res.skipped = f"kvplan refused: {plan['error'].get('message', plan['error'])}"
        return res
    fig = gpu0_figures(plan)
    if fig is None:
        res.skipped = "kvplan returned no option"
        return res
    ctx = int(args[args.index("--ctx-size") + 1])
    res.rows = compare(entry, fig, ctx, plan["options"][0]["weights"], engine_graphs_gib(engines_dir))
    return res


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "tokens":
        return f"{v:,.0f}"
    return f"{v:.2f}" if unit != "KiB" else f"{v:.3f}"


def pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:+.1f} %"


def entry_label(e: dict) -> str:
    gpu = e["gpu"]
    stand_in = e.get("replan", {}).get("gpu")
    name = gpu.get("kvplan") or (f"{stand_in} (stand-in)" if stand_in else "not in the catalog")
    where = f"{gpu.get('count', 1)}x {name}"
    par = f"TP{e['tp']}" + (f" PP{e['pp']}" if e.get("pp", 1) > 1 else "")
    return f"[{e['id']}]({e['source']}) | {e['engine']} | {e['model']['hf_id']} | {where} {par}"


def table(results: list[Result]) -> list[str]:
    out = ["| log | engine | model | GPUs | figure | logged | kvplan | error | note |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.skipped:
            out.append(f"| {entry_label(r.entry)} | — | | | | skipped: {' '.join(r.skipped.split())} |")
            continue
        for row in r.rows:
            unit = "" if row.unit in ("x", "tokens") else f" {row.unit}"
            note = row.note + (f" (checked, ±{100 * row.tol:.2g} %)" if row.tol is not None else "")
            out.append(f"| {entry_label(r.entry)} | {row.figure} | {fmt(row.logged, row.unit)}{unit} | "
                       f"{fmt(row.kvplan, row.unit)}{unit} | {pct(row.error)} | {note.strip()} |")
    return out


def summary(results: list[Result]) -> list[str]:
    figures = ["weights", "kv_per_token", "kv_pool", "kv_pool_typical", "kv_tokens", "capacity", "capacity_typical", "cuda_graphs", "activation", "non_torch"]
    out = ["| figure | compared | median error | min | max | within 10 % | no kvplan figure |",
           "|---|---|---|---|---|---|---|"]
    for name in figures:
        rows = [row for r in results for row in r.rows if row.figure == name]
        errs = sorted(row.error for row in rows if row.error is not None)
        missing = sum(1 for row in rows if row.error is None)
        if not rows:
            continue
        med = errs[len(errs) // 2] if errs else None
        out.append(f"| {name} | {len(errs)} | {pct(med)} | {pct(errs[0] if errs else None)} | "
                   f"{pct(errs[-1] if errs else None)} | {sum(abs(e) <= 0.10 for e in errs)} | {missing} |")
    return out


def coverage(results: list[Result]) -> str:
    def count(key) -> str:
        seen: dict[str, int] = {}
        for r in results:
            seen[key(r.entry)] = seen.get(key(r.entry), 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
    replanned = sum(1 for r in results if not r.skipped)
    return (f"{len(results)} logs, {replanned} re-planned. Engines: {count(lambda e: e['engine'])}. "
            f"GPUs: {count(lambda e: e['gpu'].get('kvplan') or 'other')}. "
            f"TP: {count(lambda e: str(e['tp']))}. "
            f"Weights: {count(lambda e: e['model'].get('weights') or '?')}.")


BEGIN, END = "<!-- serving-logs:begin -->", "<!-- serving-logs:end -->"


def update_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    note = "<!-- Generated by tests/validation/serving_logs/replan.py --update-doc; edit the logs' YAML, not this text. -->\n"
    block = BEGIN + "\n" + note + "\n" + text + "\n" + END
    if BEGIN in doc:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        doc = head + block + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvplan", default="build/kvplan", help="path to the kvplan binary")
    ap.add_argument("--logs", default=str(HERE), help="directory of <id>.yaml logs")
    ap.add_argument("--engines-dir", default=str(REPO / "data" / "engines"),
                    help="the vllm.yaml / sglang.yaml the replay engines copy (those of the kvplan build being run)")
    ap.add_argument("--markdown", help="write the tables to this file")
    ap.add_argument("--update-doc", help="replace the serving-logs block of this file (docs/accuracy.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a checked figure is out of tolerance")
    args = ap.parse_args()

    entries = load_entries(Path(args.logs))
    with tempfile.TemporaryDirectory(prefix="kvplan-serving-") as tmp:
        results = [replan(args.kvplan, e, Path(tmp), Path(args.engines_dir)) for e in entries]
    text = "\n".join([coverage(results), ""] + summary(results) + [""] + table(results)) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.update_doc:
        update_doc(Path(args.update_doc), text)
    bad = [(r.entry["id"], row) for r in results for row in r.rows if row.failed]
    for log_id, row in bad:
        print(f"OUT OF TOLERANCE: {log_id} {row.figure}: logged {row.logged:.4f}, kvplan "
              f"{fmt(row.kvplan, row.unit)} ({pct(row.error)}, tolerance {100 * row.tol:.2g} %)", file=sys.stderr)
    # a log meant to be re-planned that kvplan could not plan is a regression, not a skip
    lost = [r for r in results if r.skipped and not r.entry.get("skip")]
    for r in lost:
        print(f"NOT RE-PLANNED: {r.entry['id']}: {r.skipped}", file=sys.stderr)
    checked = sum(1 for r in results for row in r.rows if row.tol is not None)
    if checked == 0:
        print("NOTHING CHECKED: no figure with a tolerance was compared", file=sys.stderr)
    return 1 if (args.check and (bad or lost or checked == 0)) else 0


if __name__ == "__main__":
    sys.exit(main())
