#!/usr/bin/env python3
"""Writes data/engines/llama.cpp-server-flags.yaml: every flag llama-server accepts at the pinned build, with how many
values it takes, read from that build's common/arg.cpp (common_params_parser_init: each add_opt(common_arg(...)) with
its set_examples/set_excludes).

    tools/llama_server_flags.py --source .venv-validation/src/llama_cpp_python-0.3.35/vendor/llama.cpp
    tools/llama_server_flags.py --source DIR --check     # exit 1 when the committed file differs

The pinned llama.cpp source arrives with tests/validation/run.sh --install-only (llama-cpp-python's sdist vendors it).
A pasted llama-server line may carry any of these flags: kvplan plans the ones that change memory (cli/main.cpp's own
flags), keeps the rest and writes them back on the launch line, and refuses the few listed in MEMORY_UNMODELLED, whose
memory kvplan cannot size yet (so a plan never silently ignores memory it does not count).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "data" / "engines" / "llama.cpp-server-flags.yaml"

# Flags whose memory effect kvplan does not size. Each reason says what memory the flag changes (read in the same
# build's source); a pasted line with one of them is refused by name rather than planned wrong.
MEMORY_UNMODELLED = {
    "--no-kv-offload": "keeps the KV cache in host memory (llama_context_params.offload_kqv = false)",
    "--cache-ram": "server prompt cache in host RAM (server_prompt_cache, MiB)",
    "--ctx-checkpoints": "per-slot SWA/recurrent context checkpoints (server-context.cpp n_ctx_checkpoints)",
    "--lora": "LoRA adapter weights loaded beside the model",
    "--lora-scaled": "LoRA adapter weights loaded beside the model",
    "--control-vector": "control vector tensors loaded beside the model",
    "--control-vector-scaled": "control vector tensors loaded beside the model",
    "--device": "device selection (kvplan places on the devices given with --gpu)",
    "--main-gpu": "main GPU for --split-mode none/row (kvplan plans the first --gpu)",
    "--no-op-offload": "host-side compute for offloaded weights (op offload changes the compute buffers)",
    "--fit-ctx": "llama-server's fit may shrink the context to this minimum; kvplan plans a fixed -c",
    "--spec-replace": "speculative decoding vocabulary mapping of a draft kvplan does not load",
    "--model-vocoder": "a second (vocoder) model loaded beside the main one",
    "--hf-repo-v": "a second (vocoder) model loaded beside the main one",
    "--hf-file-v": "a second (vocoder) model loaded beside the main one",
    "--embeddings": "embedding mode: pooled outputs instead of logits (changes the output buffer)",
    "--reranking": "reranking mode: pooled outputs instead of logits (changes the output buffer)",
    "--pooling": "pooled outputs instead of logits (changes the output buffer)",
    "--override-kv": "overrides model metadata kvplan read from the model (layer counts, windows, context length)",
    "--rpc": "layers on remote rpc-server hosts, whose memory kvplan does not plan yet",
    "--spec-draft-override-tensor": "moves draft-model tensors between devices",
    "--spec-draft-cpu-moe": "keeps draft-model experts in host RAM",
    "--spec-draft-n-cpu-moe": "keeps draft-model experts in host RAM",
    "--spec-draft-hf": "a draft model from the Hub (give its file with --model-draft)",
    "--mmproj-url": "a projector from a URL (give its file with --mmproj)",
    "--models-dir": "router mode loads several models on demand",
    "--models-preset": "router mode loads several models on demand",
    "--models-max": "router mode loads several models on demand",
}

EXAMPLES_FOR_SERVER = {"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"}


def split_top(text: str) -> list[str]:
    """Top-level comma-separated parts of a C++ argument list (strings, parens, braces and lambdas respected)."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "'" and i + 2 < len(text) and (text[i + 2] == "'" or text[i + 1] == "\\"):
            j = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1)
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def matching(text: str, open_at: int) -> int:
    """Index of the parenthesis that closes the one at open_at (strings and char literals skipped)."""
    depth, i = 0, open_at
    while True:
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "'" and text[i + 1] != "'" and (text[i + 2] == "'" or text[i + 1] == "\\"):
            i = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1)
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1


def strings(brace: str) -> list[str]:
    return re.findall(r'"([^"]+)"', brace)


def parse(arg_cpp: str) -> list[dict]:
    flags = []
    for m in re.finditer(r"add_opt\(common_arg\(", arg_cpp):
        start = m.end() - 1
        end = matching(arg_cpp, start)
        args = split_top(arg_cpp[start + 1:end])
        names = strings(args[0])
        negatives = strings(args[1]) if args[1].startswith("{") else []
        values = 0 if negatives or len(args) == 3 else len(args) - 3
        chain = arg_cpp[end + 1:arg_cpp.index(");", end)] if ");" in arg_cpp[end:end + 2000] else ""
        ex = re.search(r"set_examples\(\{([^}]*)\}\)", chain)
        examples = set(re.findall(r"LLAMA_EXAMPLE_\w+", ex.group(1))) if ex else {"LLAMA_EXAMPLE_COMMON"}
        exc = re.search(r"set_excludes\(\{([^}]*)\}\)", chain)
        excludes = set(re.findall(r"LLAMA_EXAMPLE_\w+", exc.group(1))) if exc else set()
        if not examples & EXAMPLES_FOR_SERVER or "LLAMA_EXAMPLE_SERVER" in excludes:
            continue
        if any(names == f["names"][:len(names)] for f in flags):
            continue  # defined once per program (e.g. -np for the server and for the CLI): same names, same arity
        flags.append({"names": names + negatives, "values": values})
    return flags


def render(flags: list[dict], build_source: str) -> str:
    lines = [
        "# Every flag llama-server accepts at the pinned build, written by tools/llama_server_flags.py (do not edit by hand).",
        "# values: how many values follow the flag. effect: 'kept' = no memory effect kvplan plans, written back on the",
        "# launch line as given; 'unmodelled' = changes memory kvplan does not size (refused, with the reason). Flags that",
        "# kvplan plans (-c, -ctk, -ngl, ...) are kvplan's own flags (cli/main.cpp) and take precedence over this table.",
        f'source: "{build_source}"',
        "engine:",
        "  id: llama.cpp",
        "  server_flags:",
    ]
    for f in flags:
        unmodelled = next((MEMORY_UNMODELLED[n] for n in f["names"] if n in MEMORY_UNMODELLED), None)
        names = ", ".join(f'"{n}"' for n in f["names"])
        entry = f"    - {{names: [{names}], values: {f['values']}"
        entry += f', effect: unmodelled, reason: "{unmodelled}"}}' if unmodelled else ", effect: kept}"
        lines.append(entry)
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, help="the pinned llama.cpp source tree")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    src = Path(a.source)
    flags = parse((src / "common" / "arg.cpp").read_text())
    build = ("ggml-org/llama.cpp@4df29be4f (b10454, vendored by llama-cpp-python 0.3.35) common/arg.cpp "
             "common_params_parser_init: options whose set_examples include LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON")
    text = render(flags, build)
    if a.check:
        same = OUT.exists() and OUT.read_text() == text
        print("llama-server flags: up to date" if same else f"llama-server flags: {OUT} differs from the source")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}: {len(flags)} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
