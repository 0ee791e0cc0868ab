#!/usr/bin/env python3
"""Measures MLX's KV cache for real (the PyPI mlx CPU build and mlx-lm) and compares it with kvplan --engine mlx.

For each case the caches mlx-lm builds for one layer of each kind are filled the way mlx_lm.generate fills
them (a prompt of ctx - 256 tokens in prefill chunks of 2048, the default prefill_step_size, then 256 tokens
decoded one by one; bf16 keys and values of the model's KV-head shape) and the largest `nbytes` seen is
taken, times the model's layers of that kind:

    KVCache                                full-attention layers, fp16/bf16 cache
    QuantizedKVCache(group_size=64, bits)  full-attention layers with --kv-bits
    RotatingKVCache(max_size=window)       sliding-window layers (it has no quantized form)

kvplan's prediction is `kvplan --engine mlx ... --json` (k/v and swa k/v cache bytes). Both go to
tests/validation/results/mlx-cache.csv; the exit status is 1 when any case differs.

    python tests/validation/mlx_cache.py [--kvplan build/kvplan] [--python-env DIR]

Needs the Linux CPU wheels of tests/validation/requirements-mlx.txt (`pip install -r`, then
`pip install --no-deps mlx-lm==0.32.2`); tests/validation/mlx_cache.sh does both in .venv-mlx/.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import importlib.util
import types

import mlx.core as mx

# mlx_lm's package __init__ imports its model loaders (huggingface_hub, transformers); the cache classes need
# only mlx, so the packages are stood in for and models/cache.py is imported on its own (mlx-lm installed
# with --no-deps).
_spec = importlib.util.find_spec("mlx_lm")
assert _spec is not None and _spec.origin is not None, "mlx-lm is not installed"
for _name, _dir in (("mlx_lm", Path(_spec.origin).parent), ("mlx_lm.models", Path(_spec.origin).parent / "models")):
    _pkg = types.ModuleType(_name)
    _pkg.__path__ = [str(_dir)]
    sys.modules.setdefault(_name, _pkg)
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREFILL_STEP = 2048  # mlx_lm.generate generate_step(prefill_step_size=2048)
GENERATED = 256      # tokens decoded one by one after the prompt (the cache grows differently from prefill)
CASES = [  # (model, cache type as kvplan --engine mlx spells it, context)
    *((m, t, c) for m in ("qwen3-14b",) for t in ("fp16", "8", "4") for c in (1000, 4096, 10000, 32768)),
    *(("gemma-3-27b", "fp16", c) for c in (1000, 1500, 4096, 10000, 32768)),
]


def predicted(kvplan: str, model: str, ctype: str, ctx: int) -> tuple[int, int, dict]:
    out = subprocess.run([kvplan, "--engine", "mlx", "--gpu", "m4max-128gb", "--model", model, "-c", str(ctx), "-ctk", ctype,
                          "--weights", "bf16", "--json"], check=True, capture_output=True, text=True).stdout
    plan = json.loads(out)
    allocations = plan["options"][0]["allocations"]
    def total(*whats: str) -> int:
        return sum(a["bytes"] for a in allocations if a["what"] in whats)
    return total("k_cache", "v_cache"), total("swa_k_cache", "swa_v_cache"), plan["model"]


def peak_bytes(cache: object, kv_heads: int, head_dim: int, ctx: int) -> int:
    """The largest nbytes while a prompt of ctx - GENERATED tokens is prefilled and GENERATED tokens are decoded."""
    peak, done = 0, 0
    prompt = ctx - GENERATED
    while done < ctx:
        n = min(PREFILL_STEP, prompt - done) if done < prompt else 1
        x = mx.zeros((1, kv_heads, n, head_dim), dtype=mx.bfloat16)
        cache.update_and_fetch(x, x)  # type: ignore[attr-defined]
        mx.eval(cache.state)  # type: ignore[attr-defined]
        peak = max(peak, cache.nbytes)  # type: ignore[attr-defined]
        done += n
    return peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvplan", default=str(ROOT / "build" / "kvplan"))
    ap.add_argument("--out", default=str(HERE / "results" / "mlx-cache.csv"))
    args = ap.parse_args()
    import importlib.metadata as md
    versions = f"mlx {md.version('mlx')}, mlx-lm {md.version('mlx-lm')}, {mx.default_device()}"
    rows, misses = [], 0
    for model, ctype, ctx in CASES:
        full_pred, swa_pred, m = predicted(args.kvplan, model, ctype, ctx)
        kinds = m["layer_kinds"]
        heads, dim = m["n_head_kv"], m["head_dim_k"]
        full = KVCache() if ctype == "fp16" else QuantizedKVCache(group_size=64, bits=int(ctype))
        full_meas = peak_bytes(full, heads, dim, ctx) * kinds["full"]
        swa_meas = 0
        if kinds["sliding"]:
            window = m["sliding_window"]["window_tokens"]
            swa_meas = peak_bytes(RotatingKVCache(max_size=window), heads, dim, ctx) * kinds["sliding"]
        equal = full_meas == full_pred and swa_meas == swa_pred
        ok = full_meas <= full_pred and swa_meas <= swa_pred
        misses += not ok
        rows.append({"model": model, "cache": ctype, "ctx": ctx, "full_measured": full_meas, "full_kvplan": full_pred,
                     "sliding_measured": swa_meas, "sliding_kvplan": swa_pred, "result": "equal" if equal else "bound" if ok else "UNDER", "engine": versions})
        print(f"{model:12} {ctype:5} {ctx:6}  full {full_meas:>12} vs {full_pred:>12}  sliding {swa_meas:>11} vs {swa_pred:>11}"
              f"  {'equal' if equal else 'bound' if ok else 'UNDER'}")
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    n_equal = sum(r["result"] == "equal" for r in rows)
    print(f"mlx_cache: {n_equal}/{len(rows)} equal, {len(rows) - misses}/{len(rows)} at or above the measured peak ({versions}) -> {args.out}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
