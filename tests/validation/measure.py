#!/usr/bin/env python3
"""Measures what llama.cpp allocates for each model x configuration of the validation sweep.

For every synthetic model (make_models.py) and every configuration (sweep.py) this loads the model
once on the CPU backend (mmap off, no extra buffer types, no GPU layers) and creates one llama_context
per configuration through llama-cpp-python's low-level C API (llama_model_load_from_file,
llama_init_from_model with every llama_context_params field set). It records:

- exact bytes, from the kvprobe library (probe.cpp): every weight, KV and recurrent-state buffer with
  the allocation size of each tensor in it, the output buffer, and llama.cpp's own memory breakdown
  (llama_get_memory_breakdown: model / context / compute bytes);
- llama.cpp's log lines (llama_log_set): "KV buffer size", "llama_kv_cache: size = ... (N cells,
  L layers, S/T seqs)", "RS buffer size", "llama_memory_recurrent: size = ...", "compute buffer size",
  "model buffer size", "output buffer size", which are checked against the exact bytes (to their 0.01
  MiB resolution) and kept for the report.

    python measure.py [--subset|--full] [--models a,b] [--jobs N] [--out out/measured-subset.jsonl]

Each model runs in a worker process: a configuration that aborts llama.cpp is recorded as "crashed" and
the worker restarts after it. Output: one JSON object per line, sorted by model and configuration key.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sweep  # noqa: E402

MIB = 1024 * 1024

GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}

RE_KV_SIZE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB")
RE_RS_SIZE = re.compile(
    r"llama_memory_recurrent: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs +(\d+) rs_seq\), "
    r"R \((\w+)\): +([\d.]+) MiB, S \((\w+)\): +([\d.]+) MiB")
RE_BUF = re.compile(r"(\w+): +(\S+) +(KV|RS|model|compute| output) buffer size = +([\d.]+) MiB")
RE_ISWA = re.compile(r"creating +(non-SWA|SWA) KV cache, size = (\d+) cells")
RE_CPARAM = re.compile(r"llama_context: (n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|flash_attn|kv_unified) += (\S+)")


# --------------------------------------------------------------------------------------------------
# worker: runs inside one process per model


class Engine:
    """llama-cpp-python's C API with the kvprobe library interposed on ggml's allocator."""

    def __init__(self, probe_path: Path):
        # The probe must be loaded (RTLD_GLOBAL) before libllama so that its definitions of
        # ggml_backend_alloc_ctx_tensors_from_buft / ggml_backend_buft_alloc_buffer come first.
        self.probe = ctypes.CDLL(str(probe_path), mode=ctypes.RTLD_GLOBAL)
        self.probe.kvprobe_take_records.restype = ctypes.c_char_p
        self.probe.kvprobe_breakdown.restype = ctypes.c_char_p
        self.probe.kvprobe_breakdown.argtypes = [ctypes.c_void_p]
        import llama_cpp  # noqa: E402  (after the probe)
        import llama_cpp.llama_cpp as C  # noqa: E402
        self.version = llama_cpp.__version__
        fn = ctypes.cast(C._lib["_Z26llama_get_memory_breakdownPK13llama_context"], ctypes.c_void_p)
        self.probe.kvprobe_set_breakdown_fn.argtypes = [ctypes.c_void_p]
        self.probe.kvprobe_set_breakdown_fn(fn)
        self.C = C
        self.log: list[str] = []
        self._partial = ""

        @C.llama_log_callback
        def on_log(level, text, user_data):  # noqa: ARG001
            s = (text or b"").decode("utf-8", "replace")
            self._partial += s
            while "\n" in self._partial:
                line, self._partial = self._partial.split("\n", 1)
                self.log.append(line)

        self._on_log = on_log  # keep alive
        C.llama_log_set(on_log, ctypes.c_void_p())
        C.llama_backend_init()
        self.system_info = C.llama_print_system_info().decode()

    def take_log(self) -> list[str]:
        out, self.log = self.log, []
        return out

    def take_records(self) -> list[dict]:
        return json.loads(self.probe.kvprobe_take_records().decode())

    def load_model(self, path: Path):
        C = self.C
        p = C.llama_model_default_params()
        p.n_gpu_layers = 0
        p.split_mode = 0  # LLAMA_SPLIT_MODE_NONE
        p.load_mode = 0  # LLAMA_LOAD_MODE_NONE: no mmap, no mlock, no direct I/O
        p.main_gpu = 0
        p.vocab_only = False
        p.check_tensors = False
        p.use_extra_bufts = False  # no repacked CPU_REPACK / AMX buffers
        p.no_host = False
        p.no_alloc = False
        p.load_mtp = False
        self.take_log()
        self.take_records()
        model = C.llama_model_load_from_file(str(path).encode(), p)
        log = self.take_log()
        records = self.take_records()
        if not model:
            raise RuntimeError("llama_model_load_from_file failed:\n" + "\n".join(log[-20:]))
        return model, log, records

    def context_params(self, cfg: sweep.Config):
        C = self.C
        p = C.llama_context_default_params()
        p.n_ctx = cfg.ctx
        p.n_batch = cfg.batch
        p.n_ubatch = cfg.ubatch
        p.n_seq_max = cfg.n_seq
        p.n_rs_seq = 0
        p.n_outputs_max = cfg.outputs  # 0: n_batch (the library's default); llama-server's is n_parallel · (1 + n_draft)
        p.n_outputs_max_per_seq = 0
        p.n_threads = 2
        p.n_threads_batch = 2
        p.ctx_type = 0  # LLAMA_CONTEXT_TYPE_DEFAULT
        p.rope_scaling_type = -1  # LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED: from the model
        p.pooling_type = -1  # unspecified: from the model
        p.attention_type = -1  # unspecified: causal
        p.flash_attn_type = 1 if cfg.fa else 0  # LLAMA_FLASH_ATTN_TYPE_ENABLED / _DISABLED
        p.rope_freq_base = 0.0
        p.rope_freq_scale = 0.0
        p.yarn_ext_factor = -1.0
        p.yarn_orig_ctx = 0
        p.type_k = GGML_TYPES[cfg.type_k]
        p.type_v = GGML_TYPES[cfg.type_v]
        p.embeddings = False
        p.offload_kqv = True  # no device but the CPU: the cache is in CPU memory either way
        p.no_perf = True
        p.op_offload = True
        p.swa_full = cfg.swa_full
        p.kv_unified = cfg.unified
        return p

    def measure(self, model, cfg: sweep.Config) -> dict:
        C = self.C
        self.take_log()
        self.take_records()
        t0 = time.perf_counter()
        ctx = C.llama_init_from_model(model, self.context_params(cfg))
        elapsed = time.perf_counter() - t0
        log = self.take_log()
        records = self.take_records()
        if not ctx:
            errors = [line for line in log if "error" in line.lower() or "failed" in line.lower()
                      or "requires" in line.lower()]
            return {"status": "refused", "error": errors[-3:] or log[-3:], "seconds": round(elapsed, 3)}
        try:
            breakdown = json.loads(self.probe.kvprobe_breakdown(ctx).decode())
            row = {"status": "ok", "seconds": round(elapsed, 3),
                   "n_ctx": C.llama_n_ctx(ctx), "n_ctx_seq": C.llama_n_ctx_seq(ctx)
                   if hasattr(C, "llama_n_ctx_seq") else None,
                   "n_batch": C.llama_n_batch(ctx), "n_ubatch": C.llama_n_ubatch(ctx),
                   "n_seq_max": C.llama_n_seq_max(ctx)}
            row.update(interpret_context(records, breakdown, log))
            return row
        finally:
            C.llama_free(ctx)


def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def interpret_context(records: list[dict], breakdown: list[dict], log: list[str]) -> dict:
    """Turns the probe's records and the log of one llama_init_from_model into the measured row."""
    caches = []  # attention caches in creation order
    states = []  # recurrent caches
    for rec in records:
        if rec["kind"] != "ctx_tensors":
            continue
        names = [t[0] for t in rec["tensors"]]
        if any(n.startswith(("cache_k_l", "cache_v_l")) for n in names):
            caches.append(rec)
        elif any(n.startswith(("cache_r_l", "cache_s_l")) for n in names):
            states.append(rec)

    def part(rec: dict, prefix: str) -> dict:
        ts = [t for t in rec["tensors"] if t[0].startswith(prefix)]
        # ggml_backend_alloc_ctx_tensors_from_buft places tensors at the buffer's alignment (32 on the CPU)
        return {"bytes": sum(_pad(t[4], 32) for t in ts), "tensor_bytes": sum(t[3] for t in ts),
                "layers": sorted(int(t[0].rsplit("_l", 1)[1]) for t in ts), "type": ts[0][1] if ts else None,
                "ne": ts[0][2] if ts else None}

    size_lines = [RE_KV_SIZE.search(line) for line in log]
    size_lines = [m for m in size_lines if m]
    iswa = [RE_ISWA.search(line) for line in log]
    iswa = [m.group(1) for m in iswa if m]

    # DeepSeek-V3.2's llama_kv_cache_dsa (src/llama-kv-cache-dsa.cpp) creates the MLA cache, then a second one for the
    # lightning indexer's keys: its buffer is the "indexer" row, not the main cache's
    dsa = any("creating indexer KV cache" in line for line in log)
    out: dict = {"kv": None, "swa": None, "state": None, "indexer": None, "log": {}}
    # attach each size line to a cache; size lines with 0 layers have no buffer
    kinds = iswa if iswa else ["full"] * len(size_lines)
    buf_iter = iter(caches)
    log_kv = []
    for kind, m in zip(kinds, size_lines):
        layers = int(m.group(3))
        entry = {"kind": "swa" if kind == "SWA" else "full", "cells": int(m.group(2)), "layers": layers,
                 "seqs": f"{m.group(4)}/{m.group(5)}", "mib": float(m.group(1)), "k_mib": float(m.group(7)),
                 "v_mib": float(m.group(9))}
        log_kv.append(entry)
        if layers == 0:
            continue
        rec = next(buf_iter)
        k, v = part(rec, "cache_k_l"), part(rec, "cache_v_l")
        cache = {"k_bytes": k["bytes"], "v_bytes": v["bytes"], "buffer_bytes": rec["size"],
                 "cells": k["ne"][1], "streams": k["ne"][2], "k_row": k["ne"][0],
                 "v_row": v["ne"][0] if v["ne"] else 0, "layers": k["layers"], "type_k": k["type"],
                 "type_v": v["type"]}
        cache["log_consistent"] = (abs(k["bytes"] / MIB - entry["k_mib"]) <= 0.006
                                   and abs(v["bytes"] / MIB - entry["v_mib"]) <= 0.006
                                   and cache["cells"] == entry["cells"] and len(k["layers"]) == layers)
        slot = "swa" if entry["kind"] == "swa" else ("indexer" if dsa and out["kv"] else "kv")
        out[slot] = cache
    if len(caches) != sum(1 for e in log_kv if e["layers"] > 0):
        raise RuntimeError(f"{len(caches)} KV buffers for {len(log_kv)} llama_kv_cache size lines")

    rs_lines = [m for m in (RE_RS_SIZE.search(line) for line in log) if m]
    if states:
        rec = states[0]
        r, s = part(rec, "cache_r_l"), part(rec, "cache_s_l")
        st = {"r_bytes": r["bytes"], "s_bytes": s["bytes"], "bytes": r["bytes"] + s["bytes"],
              "buffer_bytes": rec["size"], "cells": r["ne"][1], "r_row": r["ne"][0], "s_row": s["ne"][0],
              "layers": r["layers"], "type_r": r["type"], "type_s": s["type"]}
        if rs_lines:
            m = rs_lines[0]
            st["log_consistent"] = (abs(r["bytes"] / MIB - float(m.group(7))) <= 0.006
                                    and abs(s["bytes"] / MIB - float(m.group(9))) <= 0.006)
        out["state"] = st

    out["context"] = sum(b["context"] for b in breakdown)
    out["compute"] = sum(b["compute"] for b in breakdown)
    out["compute_by_buft"] = {b["buft"]: b["compute"] for b in breakdown if b["compute"]}
    out["model"] = sum(b["model"] for b in breakdown)
    outputs = [r for r in records if r["kind"] == "buffer" and "output_reserve" in r["caller"]]
    out["output"] = outputs[-1]["size"] if outputs else None

    bufs = {}
    for line in log:
        m = RE_BUF.search(line)
        if m:
            bufs.setdefault(m.group(3).strip(), []).append(float(m.group(4)))
    cparams = {}
    for line in log:
        m = RE_CPARAM.search(line)
        if m:
            cparams[m.group(1)] = m.group(2)
    out["log"] = {"kv_caches": log_kv, "buffers_mib": bufs, "cparams": cparams,
                  "rs": [m.group(0) for m in rs_lines]}
    kv_sum = sum((c or {}).get("buffer_bytes", 0) for c in (out["kv"], out["swa"], out["indexer"])) + \
        ((out["state"] or {}).get("buffer_bytes", 0))
    out["context_consistent"] = kv_sum == out["context"]
    logged = bufs.get("compute", [])
    out["compute_log_consistent"] = abs(out["compute"] / MIB - sum(logged)) <= 0.006 * max(1, len(logged))
    return out


def worker(args) -> int:
    eng = Engine(Path(args.probe))
    cfgs = [sweep.Config.from_dict(d) for d in json.loads(Path(args.configs).read_text())]
    model, log, records = eng.load_model(Path(args.model))
    weights = [r for r in records if r["kind"] == "ctx_tensors"]
    model_info = {
        "model_bytes": sum(r["size"] for r in weights),
        "model_buffers": [{"buft": r["buft"], "size": r["size"], "tensors": len(r["tensors"])} for r in weights],
        "model_log_mib": [float(m.group(4)) for m in (RE_BUF.search(line) for line in log) if m and m.group(3) == "model"],
        "llama_cpp_python": eng.version,
        "system_info": eng.system_info,
    }
    with open(args.out, "a") as f:
        for i in range(args.start, len(cfgs)):
            cfg = cfgs[i]
            # tell the parent which configuration is running, in case it aborts
            Path(args.out + ".running").write_text(str(i))
            row = {"index": i, "config": cfg.as_dict(), "key": cfg.key}
            row.update(eng.measure(model, cfg))
            row["weights"] = model_info
            f.write(json.dumps(row) + "\n")
            f.flush()
    eng.C.llama_model_free(model)
    Path(args.out + ".running").unlink(missing_ok=True)
    return 0


# --------------------------------------------------------------------------------------------------
# parent


def run_model(name: str, model_path: Path, cfgs: list[sweep.Config], probe: Path, tmp_dir: Path,
              env: dict) -> list[dict]:
    cfg_file = tmp_dir / f"{name}.configs.json"
    cfg_file.write_text(json.dumps([c.as_dict() for c in cfgs]))
    part = tmp_dir / f"{name}.part.jsonl"
    part.unlink(missing_ok=True)
    start = 0
    crashed: list[dict] = []
    while start < len(cfgs):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--model", str(model_path),
               "--configs", str(cfg_file), "--start", str(start), "--out", str(part), "--probe", str(probe)]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        done = [json.loads(line) for line in part.read_text().splitlines()] if part.exists() else []
        if proc.returncode == 0:
            break
        running = tmp_dir / f"{name}.part.jsonl.running"
        if not running.exists():
            raise RuntimeError(f"measure: worker for {name} failed before any configuration:\n{proc.stdout[-4000:]}")
        idx = int(running.read_text())
        running.unlink()
        tail = [line for line in proc.stdout.splitlines() if line.strip()][-5:]
        crashed.append({"index": idx, "config": cfgs[idx].as_dict(), "key": cfgs[idx].key, "status": "crashed",
                        "returncode": proc.returncode, "error": tail})
        start = idx + 1
        del done
    rows = [json.loads(line) for line in part.read_text().splitlines()] if part.exists() else []
    rows += crashed
    rows.sort(key=lambda r: r["index"])
    for r in rows:
        r["model"] = name
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--subset", dest="mode", action="store_const", const="subset")
    mode.add_argument("--full", dest="mode", action="store_const", const="full")
    ap.add_argument("--models", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--model-dir", type=Path, default=HERE / "models")
    ap.add_argument("--probe", type=Path, default=HERE / "models" / "libkvprobe.so")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--configs", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.out = str(args.out)
        return worker(args)

    args.mode = args.mode or "subset"
    names = [n for n in args.models.split(",") if n] or sweep.MODELS
    out = args.out or HERE / "out" / f"measured-{args.mode}.jsonl"
    tmp_dir = args.model_dir / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")

    from concurrent.futures import ThreadPoolExecutor
    t0 = time.time()
    results: dict[str, list[dict]] = {}

    def one(name: str) -> tuple[str, list[dict], float]:
        t = time.time()
        cfgs = sweep.configs(name, args.mode)
        rows = run_model(name, args.model_dir / f"{name}.gguf", cfgs, args.probe, tmp_dir, env)
        return name, rows, time.time() - t

    # the wide model first: it takes longest
    order = sorted(names, key=lambda n: n not in sweep.WIDE_MODELS)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name, rows, secs in pool.map(one, order):
            results[name] = rows
            by = {}
            for r in rows:
                by[r["status"]] = by.get(r["status"], 0) + 1
            print(f"measure: {name:20s} {len(rows):5d} contexts in {secs:6.1f} s  {by}", flush=True)
    wall = time.time() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for name in names:
            for r in results[name]:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    n = sum(len(v) for v in results.values())
    print(f"measure: {n} contexts of {len(names)} models in {wall:.1f} s -> {out}")
    meta = {"mode": args.mode, "wall_seconds": round(wall, 1), "contexts": n, "jobs": args.jobs,
            "models": names, "cpu_count": os.cpu_count()}
    Path(str(out) + ".meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
