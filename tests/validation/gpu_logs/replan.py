#!/usr/bin/env python3
"""Re-plan every GPU log in logs.yaml with kvplan and compare (issue 17, items 2 and 3).

For each log: run `kvplan --json` with the entry's arguments, take the KV, compute and host-compute
allocations per GPU pool, and compare them with the logged figures:

- KV: must equal the log (to 0.01 MiB, the log's rounding) where `kv_exact` is true;
- compute: kvplan's typical figure against the log (signed % error), and whether the logged buffer
  is above kvplan's upper bound (`high_bytes`), the figure the fit check relies on.

Usage:
  replan.py --kvplan build/kvplan                 # print the table
  replan.py --kvplan build/kvplan --markdown F    # also write the per-log and per-backend tables to F
  replan.py --kvplan build/kvplan --check         # exit 1 if a KV figure that must be exact is not

The compute targets are reported, not enforced (the lead decides when they become a failing test).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
MIB = 1 << 20
KV_TOLERANCE_MIB = 0.01  # the log prints two decimals


@dataclass
class Figure:
    """One logged buffer next to kvplan's typical and upper figures (MiB)."""
    log_id: str
    backend: str
    kind: str  # kv | compute | compute_request | host_compute
    device: str
    logged: float
    typical: float | None
    high: float | None

    @property
    def error_pct(self) -> float | None:
        if self.typical is None or self.logged == 0:
            return None
        return 100.0 * (self.typical - self.logged) / self.logged

    @property
    def above_bound(self) -> bool | None:
        if self.high is None:
            return None
        return self.logged > self.high + KV_TOLERANCE_MIB


@dataclass
class Result:
    entry: dict
    figures: list[Figure] = field(default_factory=list)
    error: str | None = None


PINNED_BUILD = 10454  # data/engines/llama.cpp.yaml engine.build


def replay_engine(data_root: Path, build: int) -> tuple[str, Path]:
    """An engine that is the pinned llama.cpp with another build number, so that kvplan applies the
    build rules (data/engines/llama.cpp.yaml build_rules) of the log's build instead of b10454's."""
    engine_id = f"llama.cpp-b{build}"
    out = data_root / "engines" / f"{engine_id}.yaml"
    if not out.exists():
        src = (REPO / "data" / "engines" / "llama.cpp.yaml").read_text()
        src = re.sub(r"(?m)^  id: llama\.cpp$", f"  id: {engine_id}", src, count=1)
        src = re.sub(r"(?m)^  build: \d+$", f"  build: {build}", src, count=1)
        src = re.sub(r"(?m)^  build_name: .*$", f'  build_name: "b{build} (replay of a log\'s build)"', src, count=1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(src)
    return engine_id, data_root


def run_kvplan(kvplan: str, entry: dict, replay_root: Path | None = None) -> dict:
    args = [kvplan, *map(str, entry["kvplan"]), "--json", "--top", "1"]
    if entry.get("n_outputs_max"):
        args += ["--n-outputs-max", str(entry["n_outputs_max"])]
    build = entry.get("replay_build")
    if replay_root is not None and build and build < PINNED_BUILD:
        engine_id, root = replay_engine(replay_root, int(build))
        args += ["--data", str(root), "--engine", engine_id]
    if entry.get("data_overlay"):  # the log's model file differs from the catalog's (overlays/*/ say how)
        args += ["--data", str(HERE / entry["data_overlay"])]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, 1):  # 1: nothing fits, the plan is still printed
        raise RuntimeError(f"kvplan exit {proc.returncode}: {proc.stderr.strip()[:300]}")
    return json.loads(proc.stdout)


def pool_sums(option: dict) -> dict[str, dict[str, list[float]]]:
    """{pool: {what: [typical MiB, high MiB]}} summed over the option's allocations."""
    sums: dict[str, dict[str, list[float]]] = {}
    host_part = False  # unified memory: one pool; what follows weights_host is the host's share
    for alloc in option["allocations"]:
        pool = alloc["pool"]
        if pool == "unified":
            host_part = host_part or alloc["what"] == "weights_host"
            pool = "host" if host_part or alloc["what"] == "compute_host" else "gpu0"
        slot = sums.setdefault(pool, {}).setdefault(alloc["what"], [0.0, 0.0])
        slot[0] += alloc["bytes"] / MIB
        slot[1] += alloc["high_bytes"] / MIB
    return sums


# Host buffers a log names: KV of layers left on the CPU ("CPU") or pinned host memory ("CUDA_Host", -ngl 0).
HOST_DEVICES = ("CPU", "CUDA_Host")


def device_pools(logged: dict, sums: dict) -> dict[str, str]:
    """Map the log's device names (CUDA0, ROCm1, Metal, CPU ...) to kvplan's pools, in order."""
    gpu_pools = sorted(p for p in sums if p.startswith("gpu"))
    devices: list[str] = []
    for key in ("kv_mib", "compute_mib", "compute_request_mib"):
        for dev in logged.get(key, {}):
            if dev not in devices and dev not in HOST_DEVICES:
                devices.append(dev)
    mapping = dict(zip(devices, gpu_pools))
    mapping.update({dev: "host" for dev in HOST_DEVICES})
    return mapping


KV_KINDS = ("k_cache", "v_cache", "swa_k_cache", "swa_v_cache")


def figures_for(entry: dict, plan: dict) -> list[Figure]:
    option = plan["options"][0]
    sums = pool_sums(option)
    logged = entry["logged"]
    pools = device_pools(logged, sums)
    out: list[Figure] = []

    def pick(pool: str, kinds: tuple[str, ...]) -> tuple[float | None, float | None]:
        got = [sums.get(pool, {}).get(k) for k in kinds]
        got = [g for g in got if g]
        if not got:
            return None, None
        return sum(g[0] for g in got), sum(g[1] for g in got)

    for dev, mib in logged.get("kv_mib", {}).items():
        typ, high = pick(pools.get(dev, "?"), KV_KINDS)
        out.append(Figure(entry["id"], entry["backend"], "kv", dev, mib, typ, high))
    for key, kind in (("compute_mib", "compute"), ("compute_request_mib", "compute_request")):
        for dev, mib in logged.get(key, {}).items():
            typ, high = pick(pools.get(dev, "?"), ("compute",))
            out.append(Figure(entry["id"], entry["backend"], kind, dev, mib, typ, high))
    if "host_compute_mib" in logged:
        typ, high = pick("host", ("compute_host",))
        out.append(Figure(entry["id"], entry["backend"], "host_compute", "host",
                          logged["host_compute_mib"], typ, high))
    return out


def replan_one(kvplan: str, entry: dict, replay_root: Path) -> Result:
    res = Result(entry)
    try:
        res.figures = figures_for(entry, run_kvplan(kvplan, entry, replay_root))
    except (RuntimeError, KeyError, IndexError, json.JSONDecodeError, subprocess.TimeoutExpired) as exc:
        res.error = str(exc)
    return res


def replan_all(kvplan: str, entries: list[dict], replay_root: Path) -> list[Result]:
    # The replay engines are written first (one per build), so the parallel runs only read them.
    for build in {e.get("replay_build") for e in entries}:
        if build and build < PINNED_BUILD:
            replay_engine(replay_root, int(build))
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda e: replan_one(kvplan, e, replay_root), entries))


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def fmt_pct(v: float | None) -> str:
    return "—" if v is None else f"{v:+.1f} %"


def per_log_rows(results: list[Result]) -> list[str]:
    rows = ["| log | backend | program | figure | device | logged MiB | kvplan typical | error | kvplan high | above bound |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        e = res.entry
        if res.error:
            rows.append(f"| [{e['id']}]({e['source']}) | {e['backend']} | {e['program']} | kvplan failed: "
                        f"{res.error[:80]} | | | | | | |")
            continue
        program = re.split(r"[ (]", e["program"], maxsplit=1)[0]
        for f in res.figures:
            above = "—" if f.above_bound is None else ("**yes**" if f.above_bound else "no")
            rows.append(f"| [{e['id']}]({e['source']}) | {f.backend} | {program} | {f.kind} | {f.device} | "
                        f"{f.logged:.2f} | {fmt(f.typical)} | {fmt_pct(f.error_pct)} | {fmt(f.high)} | {above} |")
    return rows


def compute_stats(figs: list[Figure]) -> tuple[int, int, int, int, int, int]:
    """(figures, within 5 %, within 10 %, under by > 10 %, over by > 10 %, logged above the bound)."""
    f = [x for x in figs if x.error_pct is not None]
    return (len(f), sum(abs(x.error_pct) <= 5 for x in f), sum(abs(x.error_pct) <= 10 for x in f),
            sum(x.error_pct < -10 for x in f), sum(x.error_pct > 10 for x in f), sum(bool(x.above_bound) for x in f))


def summary_rows(results: list[Result]) -> list[str]:
    rows = ["| backend | logs | KV exact / checked | GPU compute figures | within 5 % | within 10 % | "
            "under > 10 % | over > 10 % | above kvplan's bound | host compute figures | within 10 % | above bound |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    backends = sorted({r.entry["backend"] for r in results})
    for be in backends + ["all"]:
        rs = [r for r in results if be in ("all", r.entry["backend"])]
        figs = [f for r in rs for f in r.figures]
        kv = [f for f in figs if f.kind == "kv" and f.typical is not None]
        kv_ok = sum(1 for f in kv if abs(f.typical - f.logged) <= KV_TOLERANCE_MIB)
        dev = compute_stats([f for f in figs if f.kind in ("compute", "compute_request")])
        host = compute_stats([f for f in figs if f.kind == "host_compute"])
        name = f"**{be}**" if be == "all" else be
        rows.append(f"| {name} | {len(rs)} | {kv_ok} / {len(kv)} | {dev[0]} | {dev[1]} | {dev[2]} | {dev[3]} | "
                    f"{dev[4]} | {dev[5]} | {host[0]} | {host[2]} | {host[5]} |")
    return rows


def coverage_line(results: list[Result]) -> str:
    """Logs per family, MoE/dense, FA, cache types, partial offload and GPU count."""
    def count(key) -> str:
        seen: dict[str, int] = {}
        for r in results:
            k = key(r.entry)
            seen[k] = seen.get(k, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
    args = lambda e: [str(a) for a in e["kvplan"]]
    def val(e, flag):
        a = args(e)
        return a[a.index(flag) + 1] if flag in a else None
    return ("Logs per family: " + count(lambda e: e["family"]) + ". MoE / dense: " +
            count(lambda e: "MoE" if e.get("moe") else "dense") + ". Flash attention: " +
            count(lambda e: val(e, "--fa") or "?") + ". K cache: " + count(lambda e: val(e, "--ctk") or "?") +
            ". Partial offload (`--ngl`): " + count(lambda e: "yes" if "--ngl" in args(e) else "no") +
            ". GPUs: " + count(lambda e: str(max(1, args(e).count("--gpu")))) + ".")


def kv_failures(results: list[Result]) -> list[str]:
    bad = []
    for res in results:
        if not res.entry.get("kv_exact"):
            continue
        if res.error:
            bad.append(f"{res.entry['id']}: kvplan failed: {res.error}")
            continue
        for f in res.figures:
            if f.kind == "kv" and (f.typical is None or abs(f.typical - f.logged) > KV_TOLERANCE_MIB):
                bad.append(f"{f.log_id} {f.device}: KV logged {f.logged:.2f} MiB, kvplan {fmt(f.typical)} MiB")
    return bad


def compute_misses(results: list[Result]) -> list[str]:
    """Compute figures more than 10 % off the log, or logged above kvplan's upper bound."""
    out = []
    for res in results:
        if res.error:
            out.append(f"{res.entry['id']}: kvplan failed: {res.error[:120]}")
        for f in res.figures:
            if f.kind == "kv" or f.error_pct is None:
                continue
            if abs(f.error_pct) > 10 or f.above_bound:
                bound = " ABOVE BOUND" if f.above_bound else ""
                out.append(f"{f.log_id} {f.kind} {f.device}: logged {f.logged:.2f} MiB, typical "
                           f"{fmt(f.typical)} ({fmt_pct(f.error_pct)}), high {fmt(f.high)}{bound}")
    return out


BEGIN, END = "<!-- gpu-logs:begin -->", "<!-- gpu-logs:end -->"


def update_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    note = "<!-- Generated by tests/validation/gpu_logs/replan.py --update-doc; edit logs.yaml, not this text. -->\n"
    path.write_text(head + BEGIN + "\n" + note + "\n" + text + "\n" + END + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvplan", default="build/kvplan", help="path to the kvplan binary")
    ap.add_argument("--logs", default=str(HERE / "logs.yaml"))
    ap.add_argument("--markdown", help="write the summary and per-log tables to this file")
    ap.add_argument("--update-doc", help="replace the text between the gpu-logs markers of this file (docs/accuracy.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 if a KV figure that must be exact differs")
    args = ap.parse_args()

    entries = yaml.safe_load(Path(args.logs).read_text())["logs"]
    with tempfile.TemporaryDirectory(prefix="kvplan-replay-") as tmp:
        results = replan_all(args.kvplan, entries, Path(tmp))
    text = "\n".join(summary_rows(results) + ["", coverage_line(results), ""] + per_log_rows(results)) + "\n"
    if args.check:  # ctest: the summary, then the compute misses (reported, not enforced), then KV
        print("\n".join(summary_rows(results)))
        misses = compute_misses(results)
        print(f"\ncompute figures off by > 10 % or above kvplan's bound (reported, not enforced): {len(misses)}")
        for line in misses:
            print("  " + line)
    else:
        print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.update_doc:
        update_doc(Path(args.update_doc), text)
    bad = kv_failures(results)
    for line in bad:
        print("KV MISMATCH:", line, file=sys.stderr)
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
