#!/usr/bin/env python3
"""Dumps the graphs llama.cpp reserves its CPU compute buffer with, for one model and configuration.

    .venv-validation/bin/python tests/validation/graph_dump.py qwen3next-tiny --ctx 1024 -ctk q4_0 -fa off \
        --out /tmp/qwen3next.graph

Builds graph_dump.cpp against the installed llama-cpp-python sdist (as run.sh builds probe.cpp), re-runs this
script with it preloaded, creates the context through measure.py's Engine, and writes every reserved graph
(nodes in execution order with op, size, view source and layout; then the leafs) to --out. It prints llama.cpp's
compute buffer size, which kvplan's reserve-graph model must equal: write the architecture's graph in
libplanner/src/memory/transformer_graph.cpp from the dump, then check it over the sweep with compare.py.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def build_library() -> Path:
    src = next((HERE.parents[1] / ".venv-validation" / "src").glob("llama_cpp_python-*")) / "vendor" / "llama.cpp"
    out = HERE / "models" / "libgraphdump.so"
    if not out.exists() or (HERE / "graph_dump.cpp").stat().st_mtime > out.stat().st_mtime:
        out.parent.mkdir(exist_ok=True)
        subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", str(HERE / "graph_dump.cpp"), "-o", str(out),
                        f"-I{src / 'include'}", f"-I{src / 'ggml' / 'include'}", f"-I{src / 'ggml' / 'src'}", "-ldl"],
                       check=True)  # ggml left unresolved: linking it here would load it ahead of probe.cpp's interposers
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a model of make_models.py (models/NAME.gguf)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("-ctk", "--cache-type-k", default="f16")
    ap.add_argument("-ctv", "--cache-type-v", default="f16")
    ap.add_argument("-fa", "--flash-attn", choices=["on", "off"], default="on")
    ap.add_argument("-np", "--parallel", type=int, default=1)
    ap.add_argument("-ub", "--ubatch-size", type=int, default=256)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    if "KVPLAN_GRAPH_DUMP" not in os.environ:  # re-run with the library preloaded
        lib = build_library()
        args.out.unlink(missing_ok=True)
        env = dict(os.environ, KVPLAN_GRAPH_DUMP=str(args.out), LD_PRELOAD=str(lib))
        return subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env=env).returncode

    import measure  # noqa: PLC0415
    import sweep  # noqa: PLC0415
    engine = measure.Engine(HERE / "models" / "libkvprobe.so")
    model, _, _ = engine.load_model(HERE / "models" / f"{args.model}.gguf")
    cfg = sweep.Config(ctx=args.ctx, type_k=args.cache_type_k, type_v=args.cache_type_v, fa=args.flash_attn == "on",
                       n_seq=args.parallel, unified=False, ubatch=args.ubatch_size, swa_full=False)
    row = engine.measure(model, cfg)
    if row.get("status") != "ok":
        print(f"graph_dump: llama.cpp refused {cfg.key}: {row.get('error')}", file=sys.stderr)
        return 1
    print(f"graph_dump: {args.model} {cfg.key}: llama.cpp's compute buffer {row['compute']} B; graphs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
