"""Bad input to the Python API: every bad call raises kvplan.InputError, never anything else, and never crashes.

Each case is a call written as Python source (``P(ctx_size='32k')`` is kvplan.plan on 24GB / qwen3-8b with
that keyword), the field the error must name, and a text the message must show (the value, or its start).
Every call can reach C++ (a crafted file, a data overlay that once divided by zero, a to_json that once
overflowed), so every call runs in a worker subprocess (``python test_bad_input.py --worker FILES``) that the
tests restart when it dies: a call that kills the interpreter fails its own case, not the whole run. Crafted
files (GGUF headers, config.json, data overlays) are written once per session by ``files()``.
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SEED = REPO / "tests" / "fuzz" / "seeds" / "llama-small.gguf"
LONG = "x" * 1_000_000  # a 1,000,000-character name: refused in well under a second
LONG_OT = "a" * 100_000 + "=CPU"  # std::regex once overflowed the stack on this (the CLI's -ot)
NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class Case:
    name: str
    code: str  # a call, evaluated in namespace(): P, B, M, kvplan, F (the crafted files), LONG, NAN, ...
    field: str | tuple[str, ...]  # InputError.field (one of them)
    shows: str = ""  # a text str(error) must contain (the value, or its start)
    suggestion: str | None = None  # InputError.suggestion, when one is expected
    limit_s: float = 10.0  # the call must answer within this


# ---------------------------------------------------------------- crafted files


def gguf(kvs: list[tuple[str, int, Any]], tensors: Sequence[tuple[str, list[int], int, int]] = (), *, n_tensors: int | None = None, n_kv: int | None = None, magic: bytes = b"GGUF", version: int = 3,
         data: int = 8192) -> bytes:
    """A GGUF file: (key, type, value) pairs and (name, dims, type, offset) tensors; counts may lie."""
    fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def string(s: str | bytes) -> bytes:
        b = s if isinstance(s, bytes) else s.encode()
        return struct.pack("<Q", len(b)) + b

    def value(t: int, v: Any) -> bytes:
        if t == 8:
            return string(v)
        if t == 9:
            at, items = v
            return struct.pack("<IQ", at, len(items)) + b"".join(value(at, x) for x in items)
        return struct.pack("<" + fmt[t], v)

    out = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    for key, t, v in kvs:
        out += string(key) + struct.pack("<I", t) + value(t, v)
    for name, dims, t, offset in tensors:
        out += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", t, offset)
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * data


def llama_kvs(**changed: tuple[int, Any] | None) -> list[tuple[str, int, Any]]:
    """The keys of tests/fuzz/seeds/llama-small.gguf, some replaced by (type, value) (None drops one)."""
    kvs: dict[str, tuple[int, Any]] = {
        "general.architecture": (8, "llama"), "llama.block_count": (4, 1), "llama.embedding_length": (4, 64),
        "llama.attention.head_count": (4, 2), "llama.attention.head_count_kv": (4, 1),
        "llama.context_length": (4, 256)}
    for key, tv in changed.items():
        key = key.replace("__", ".")
        if tv is None:
            kvs.pop(key, None)
        else:
            kvs[key] = tv
    return [(k, t, v) for k, (t, v) in kvs.items()]


LLAMA_TENSORS = [("token_embd.weight", [64, 8], 1, 0), ("blk.0.attn_q.weight", [64, 64], 8, 1024)]

CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
          "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 4096}


def files(root: Path) -> dict[str, Path]:
    """The crafted files every case may name, written under root."""
    f: dict[str, Path] = {}

    def put(name: str, content: bytes | str) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def config(folder: str, text: str | dict[str, Any], index: str | None = None) -> Path:
        put(f"{folder}/config.json", text if isinstance(text, str) else json.dumps(text))
        if index is not None:
            put(f"{folder}/model.safetensors.index.json", index)
        return root / folder

    f["seed"] = SEED
    f["missing"] = root / "no" / "such" / "model.gguf"
    f["empty_dir"] = root / "empty_dir"
    f["empty_dir"].mkdir()
    f["readme_dir"] = root / "readme_dir"
    put("readme_dir/README.md", "# not a model\n")
    f["text_gguf"] = put("text.gguf", "this is not a GGUF file\n" * 10)
    f["text_file"] = put("notes.txt", "hello\n")
    f["empty_gguf"] = put("empty.gguf", b"")
    f["truncated"] = put("truncated.gguf", SEED.read_bytes()[:30])
    f["bad_magic"] = put("magic.gguf", gguf(llama_kvs(), LLAMA_TENSORS, magic=b"GGUX"))
    f["bad_version"] = put("version.gguf", gguf(llama_kvs(), LLAMA_TENSORS, version=99))
    f["nan_embd"] = put("nan_embd.gguf", gguf(llama_kvs(llama__embedding_length=(6, NAN)), LLAMA_TENSORS))
    f["neg_embd"] = put("neg_embd.gguf", gguf(llama_kvs(llama__embedding_length=(5, -64)), LLAMA_TENSORS))
    f["zero_heads"] = put("zero_heads.gguf", gguf(llama_kvs(llama__attention__head_count=(4, 0),
                                                            llama__attention__head_count_kv=(4, 0)), LLAMA_TENSORS))
    f["kv_not_divisor"] = put("kv3.gguf", gguf(llama_kvs(llama__attention__head_count_kv=(4, 3)), LLAMA_TENSORS))
    f["huge_layers"] = put("layers.gguf", gguf(llama_kvs(llama__block_count=(4, 0xFFFFFFFF)), LLAMA_TENSORS))
    f["huge_ctx"] = put("ctx.gguf", gguf(llama_kvs(llama__context_length=(10, 2**63)), LLAMA_TENSORS))
    f["no_arch"] = put("noarch.gguf", gguf(llama_kvs(general__architecture=None), LLAMA_TENSORS))
    f["arch_int"] = put("archint.gguf", gguf(llama_kvs(general__architecture=(4, 7)), LLAMA_TENSORS))
    f["unknown_arch"] = put("unknown_arch.gguf", gguf(llama_kvs(general__architecture=(8, "made-up-arch")), LLAMA_TENSORS))
    f["huge_shape"] = put("shape.gguf", gguf(llama_kvs(), [("token_embd.weight", [2**62, 2**62], 1, 0),
                                                           ("blk.0.attn_q.weight", [64, 64], 8, 0)]))
    f["offset_past"] = put("offset.gguf", gguf(llama_kvs(), [("token_embd.weight", [64, 8], 1, 2**64 - 16),
                                                            ("blk.0.attn_q.weight", [64, 64], 8, 1024)]))
    f["many_dims"] = put("dims.gguf", gguf(llama_kvs(), [("token_embd.weight", [2] * 60, 1, 0)]))
    f["bad_tensor_type"] = put("ttype.gguf", gguf(llama_kvs(), [("token_embd.weight", [64, 8], 9999, 0)]))
    f["huge_n_tensors"] = put("ntensors.gguf", gguf(llama_kvs(), LLAMA_TENSORS, n_tensors=2**60))
    f["huge_n_kv"] = put("nkv.gguf", gguf(llama_kvs(), LLAMA_TENSORS, n_kv=2**60))
    # the first key claims to be 2 GiB long: the reader must not allocate it
    f["huge_key"] = put("key.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**31) + b"general")
    f["huge_string"] = put("string.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 20)
                           + b"general.architecture" + struct.pack("<IQ", 8, 2**62))
    f["huge_array"] = put("array.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k"
                          + struct.pack("<I", 9) + struct.pack("<IQ", 4, 2**61))
    f["nested_array"] = put("nested.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k"
                            + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 100_000)
    f["bad_value_type"] = put("vtype.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k"
                              + struct.pack("<I", 77) + b"\0" * 64)
    f["split_second"] = put("Model-00002-of-00003.gguf", gguf(llama_kvs(split__count=(2, 3)), LLAMA_TENSORS))
    f["split_missing"] = put("Other-00001-of-00002.gguf", gguf(llama_kvs(split__count=(2, 2)), LLAMA_TENSORS))
    f["mmproj_not_clip"] = SEED
    f["bad_utf8_name"] = put("utf8name.gguf", gguf([*llama_kvs(), ("general.name", 8, b"Bad\xff\xfeName")], LLAMA_TENSORS))
    f["bad_utf8_arch"] = put("utf8arch.gguf", gguf(llama_kvs(general__architecture=(8, b"ll\xffama")), LLAMA_TENSORS))
    # config.json
    f["cfg_type"] = config("cfg_type", '{"model_type": 5}')
    f["cfg_syntax"] = config("cfg_syntax", '{"model_type": "llama",')
    f["cfg_list"] = config("cfg_list", "[]")
    f["cfg_empty"] = config("cfg_empty", "")
    f["cfg_neg_layers"] = config("cfg_neg_layers", {**CONFIG, "num_hidden_layers": -1})
    f["cfg_huge_width"] = config("cfg_huge_width", {**CONFIG, "hidden_size": 1e300})
    f["cfg_float_layers"] = config("cfg_float_layers", {**CONFIG, "num_hidden_layers": 2.5})
    f["cfg_zero_heads"] = config("cfg_zero_heads", {**CONFIG, "num_attention_heads": 0})
    f["cfg_str_width"] = config("cfg_str_width", {**CONFIG, "hidden_size": "4096"})
    f["cfg_kv_not_divisor"] = config("cfg_kv", {**CONFIG, "num_key_value_heads": 3})
    f["cfg_unknown_type"] = config("cfg_unknown", {**CONFIG, "model_type": "made-up"})
    f["cfg_deep"] = config("cfg_deep", "[" * 100_000 + "]" * 100_000)
    f["cfg_total_size"] = config("cfg_total", CONFIG, '{"metadata": {"total_size": 1e300}}')
    f["cfg_total_neg"] = config("cfg_total_neg", CONFIG, '{"metadata": {"total_size": -5}}')
    f["cfg_total_str"] = config("cfg_total_str", CONFIG, '{"metadata": {"total_size": "big"}}')
    f["cfg_index_bad"] = config("cfg_index_bad", CONFIG, "{")
    f["cfg_is_dir"] = root / "cfg_is_dir"
    (root / "cfg_is_dir" / "config.json").mkdir(parents=True)
    f["cfg_file"] = f["cfg_type"] / "config.json"
    # data overlays (--data)
    f["data_missing"] = root / "no_such_data"
    f["data_file"] = put("data_file.yaml", "gpus: []\n")
    f["data_unknown_key"] = root / "data_unknown_key"
    put("data_unknown_key/x.yaml", "gpuz: []\n")
    f["data_syntax"] = root / "data_syntax"
    put("data_syntax/x.yaml", "gpus: [ {id: a\n")
    f["data_not_mapping"] = root / "data_not_mapping"
    put("data_not_mapping/x.yaml", "- 1\n- 2\n")
    gpu = ("gpus:\n  - {{id: bad-card, name: Bad Card, vendor: nvidia, backend: cuda, memory: dedicated, total_mib: {},"
           " total_source: test, bandwidth_gbs: 100, source: test}}\n")
    for name, mib in (("data_nan_gpu", ".nan"), ("data_neg_gpu", "-24000"), ("data_str_gpu", "lots"), ("data_huge_gpu", "1e300")):
        f[name] = root / name
        put(f"{name}/gpus.yaml", gpu.format(mib))
    engine = (REPO / "data" / "engines" / "llama.cpp.yaml").read_text(encoding="utf-8")
    for name, old, new in (("data_block0", "q8_0:    {id: 8,  block: 32,", "q8_0:    {id: 8,  block: 0,"),):
        f[name] = root / name
        assert old in engine, old
        put(f"{name}/engine.yaml", engine.replace(old, new))
    for name, key in (("data_ctx_pad0", "ctx_pad"), ("data_alignment0", "alignment")):
        f[name] = root / name
        lines = [ln if not ln.lstrip().startswith(key + ":") else ln[:ln.index(key)] + f"{key}: 0"
                 for ln in engine.splitlines()]
        put(f"{name}/engine.yaml", "\n".join(lines) + "\n")
    vllm = (REPO / "data" / "engines" / "vllm.yaml").read_text(encoding="utf-8")
    f["data_vllm_granularity0"] = root / "data_vllm_granularity0"
    put("data_vllm_granularity0/vllm.yaml", vllm.replace("token_granularity: 16", "token_granularity: 0"))
    f["data_utf8"] = root / "data_utf8"
    put("data_utf8/gpus.yaml", gpu.format(24000).encode().replace(b"Bad Card", b"Bad\xff Card"))
    f["data_task_nan"] = root / "data_task_nan"
    put("data_task_nan/tasks.yaml", "tasks:\n  - {id: nantask, name: NaN task, metric: x, summary: x, ctx_target: .nan, "
        "ctx_min: 1024, decode_floor_tps: 1, source: test, speed_source: test}\n")
    return f


# ---------------------------------------------------------------- the cases

FLAGS = {
    "task": "--task", "weights": "--weights", "ctx_size": "--ctx-size", "cache_type_k": "--cache-type-k",
    "cache_type_v": "--cache-type-v", "flash_attn": "--flash-attn", "n_parallel": "--parallel",
    "tensor_parallel": "--tensor-parallel-size", "fit_placement": "--fit", "fit_target_mib": "--fit-target",
    "kv_unified": "--kv-unified", "n_ubatch": "--ubatch-size", "n_batch": "--batch-size",
    "n_outputs_max": "--n-outputs-max", "model_draft": "--model-draft", "weights_draft": "--weights-draft",
    "cache_type_k_draft": "--cache-type-k-draft", "cache_type_v_draft": "--cache-type-v-draft",
    "n_gpu_layers_draft": "--n-gpu-layers-draft", "draft_max": "--spec-draft-n-max", "mmproj": "--mmproj",
    "mmproj_offload": "--no-mmproj-offload", "tensor_split": "--tensor-split", "split_mode": "--split-mode",
    "host_bandwidth_gbs": "--ram-bandwidth", "override_tensors": "--override-tensor", "swa_full": "--swa-full",
    "n_gpu_layers": "--n-gpu-layers", "cpu_moe": "--cpu-moe", "n_cpu_moe": "--n-cpu-moe",
    "rope_scaling": "--rope-scaling", "rope_scale": "--rope-scale", "yarn_orig_ctx": "--yarn-orig-ctx",
    "engine": "--engine", "backend": "--backend", "build": "--build", "allow_slow": "--allow-slow",
    "reserve": "--reserve", "free": "--free", "host_ram": "--ram", "top": "--top", "data": "--data",
    "max_ctx": "--max-ctx", "accept_risk": "--accept-risk", "gpu": "--gpu", "model": "--model",
    "pipeline_parallel_size": "--pipeline-parallel-size", "data_parallel": "--data-parallel-size",
    "expert_parallel": "--enable-expert-parallel", "nodes": "--nodes", "interconnect": "--interconnect",
    "max_num_seqs": "--max-num-seqs", "concurrency": "--concurrency", "max_batched_tokens": "--max-num-batched-tokens",
    "rpc_servers": "--rpc"}

LITERALS: dict[str, Any] = {"NAN": NAN, "INF": INF, "LONG": LONG, "LONG_OT": LONG_OT, "Path": Path}


def shown(expr: str) -> str:
    """What the message must show of a value written as `expr`: a string itself (its start when long), else repr."""
    value = eval(expr, dict(LITERALS))  # noqa: S307 (the table's own literals)
    if isinstance(value, str):
        return value[:40] if value.isprintable() else ""
    return repr(value)[:40]


def keyword_cases(call: str, keyword: str, exprs: list[str], **kw: Any) -> list[Case]:
    return [Case(f"{call}-{keyword}={expr[:24]}", f"{call}({keyword}={expr})", FLAGS[keyword], shown(expr), **kw)
            for expr in exprs]


STRINGS = ["123", "['q8_0']", "b'q8_0'", "1.5", "LONG", "'q8\\x00_0'", "'\\udc80'"]
INTS = ["'32k'", "3.5", "True", "NAN", "[4]", "2**63", "10**30"]
BOOLS = ["'yes'", "1", "'False'", "[True]", "NAN"]
FLOATS = ["NAN", "INF", "-INF", "'fast'", "True", "[60]"]
SIZES = ["-1", "'lots'", "NAN", "1.5", "True", "'-1GB'", "'nanGB'", "'1e999GB'", "[1]", "''", "2**70", "LONG"]

CASES: list[Case] = [
    # ---- kvplan.plan: the arguments the brief names
    Case("plan-ctx_size-32kk", "P(ctx_size='32kk')", "--ctx-size", "32kk"),
    Case("plan-ctx_size-3.5", "P(ctx_size=3.5)", "--ctx-size", "3.5"),
    Case("plan-gpu-None", "kvplan.plan(gpu=None, model='qwen3-8b')", "--gpu", "is required"),
    Case("plan-model-123", "P(model=123)", "--model", "123"),
    Case("plan-top-str", "P(top='5')", "--top", "5"),
    Case("plan-n_parallel-True", "P(n_parallel=True)", "--parallel", "True"),
    Case("plan-ctk-list", "P(cache_type_k=['q8_0'])", "--cache-type-k", "['q8_0']"),
    Case("plan-reserve--1", "P(reserve=-1)", "--reserve", "-1"),
    Case("plan-host_ram-lots", "P(host_ram='lots')", "--ram", "lots"),
    Case("plan-model-long", "P(model=LONG)", "--model", "xxxxxxxxxx", limit_s=1.0),
    Case("plan-gpu-long", "P(gpu=LONG)", "--gpu", "xxxxxxxxxx", limit_s=1.0),
    Case("plan-task-long", "P(task=LONG)", "--task", "xxxxxxxxxx", limit_s=1.0),
    Case("model-long", "kvplan.model(LONG)", "--model", "xxxxxxxxxx", limit_s=1.0),
    Case("gpu-long", "kvplan.gpu(LONG)", "--gpu", "xxxxxxxxxx", limit_s=1.0),
    Case("engine-long", "kvplan.engine(LONG)", "--engine", "xxxxxxxxxx", limit_s=1.0),
    Case("plan-unknown-keyword", "P(ctx_sise=32768)", "kvplan.plan()", "ctx_sise", suggestion="ctx_size"),
    Case("plan-unknown-keyword-2", "P(modle='qwen3-8b')", "kvplan.plan()", "modle", suggestion="model"),
    Case("plan-unknown-keyword-3", "P(tpo=3)", "kvplan.plan()", "tpo", suggestion="top"),
    Case("plan-unknown-keyword-long", "P(**{LONG: 1})", "kvplan.plan()", "xxxxxxxxxx", limit_s=1.0),
    Case("plan-unknown-keyword-none", "P(context=32768)", "kvplan.plan()", "context"),
    Case("plan-too-many-positional", "kvplan.plan('24GB', 'qwen3-8b', 'general', 'q8_0')", "kvplan.plan()", "4"),
    Case("plan-given-twice", "kvplan.plan('24GB', gpu='24GB', model='qwen3-8b')", "--gpu", "24GB"),
    # ---- kvplan.plan: values the library refuses (suggestions where one exists)
    Case("plan-ctk-q9", "P(cache_type_k='q9_0')", "--cache-type-k", "q9_0", suggestion="q8_0"),
    Case("plan-ctv-q4k", "P(cache_type_v='q4_k')", "--cache-type-v", "q4_k", suggestion="q4_0"),
    Case("plan-task-typo", "P(task='agentc')", "--task", "agentc", suggestion="agentic"),
    Case("plan-model-typo", "P(model='qwen3-8bb')", "--model", "qwen3-8bb", suggestion="qwen3-8b"),
    Case("plan-gpu-typo", "P(gpu='rtx4091')", "--gpu", "rtx4091", suggestion="rtx4090"),
    Case("plan-engine-typo", "P(engine='vlm')", "--engine", "vlm", suggestion="vllm"),
    Case("plan-weights-typo", "P(weights='Q4_K_N')", "--weights", "Q4_K_N", suggestion="Q4_K_M"),
    Case("plan-flash_attn-maybe", "P(flash_attn='maybe')", "--flash-attn", "maybe"),
    Case("plan-build-typo", "P(build='fa-all-quant')", "--build", "fa-all-quant", suggestion="fa-all-quants"),
    Case("plan-ngl-most", "P(n_gpu_layers='most')", "--n-gpu-layers", "most"),
    Case("plan-ngl-al", "P(n_gpu_layers='al')", "--n-gpu-layers", "al", suggestion="all"),
    Case("plan-ngl-3.5", "P(n_gpu_layers=3.5)", "--n-gpu-layers", "3.5"),
    Case("plan-ngl-True", "P(n_gpu_layers=True)", "--n-gpu-layers", "True"),
    Case("plan-ngl--5", "P(n_gpu_layers=-5)", "--n-gpu-layers", "-5"),
    Case("plan-ngl-NAN", "P(n_gpu_layers=NAN)", "--n-gpu-layers", "nan"),
    Case("plan-ngl-huge", "P(n_gpu_layers=10**20)", "--n-gpu-layers", "100000000000000000000"),
    Case("plan-ctx_size-0", "P(ctx_size=0)", "--ctx-size", "0"),
    Case("plan-ctx_size--1", "P(ctx_size=-1)", "--ctx-size", "-1"),
    Case("plan-ctx_size-int-max", "P(ctx_size=2**31 - 1)", "--ctx-size", "2147483647"),
    Case("plan-n_parallel-0", "P(n_parallel=0)", "--parallel", "0"),
    Case("plan-n_parallel-huge", "P(n_parallel=2**40)", "--parallel", "1099511627776"),
    Case("plan-top-0", "P(top=0)", "--top", "0"),
    Case("plan-n_ubatch-0", "P(n_ubatch=0)", "--ubatch-size", "0"),
    Case("plan-n_batch--1", "P(n_batch=-1)", "--batch-size", "-1"),
    Case("plan-draft_max-1000", "D(draft_max=1000)", ("--spec-draft-n-max", "--draft-max"), "1000"),
    Case("plan-fit_target-neg", "P(fit_placement=True, fit_target_mib=-1)", "--fit-target", "-1"),
    Case("plan-fit_target-without-fit", "P(fit_target_mib=512)", "--fit-target", "512"),
    Case("plan-n_outputs_max-0", "P(n_outputs_max=0)", "--n-outputs-max", "0"),
    Case("plan-tp-llama", "P(tensor_parallel=2)", "--tensor-parallel-size", "2"),
    Case("plan-cpu_moe-both", "P(cpu_moe=True, n_cpu_moe=4)", "--cpu-moe", "not both"),
    Case("plan-n_cpu_moe--2", "P(n_cpu_moe=-2)", "--n-cpu-moe", "-2"),
    Case("plan-ram-bandwidth-0", "P(host_bandwidth_gbs=0)", "--ram-bandwidth", "0"),
    Case("plan-ram-bandwidth-neg", "P(host_bandwidth_gbs=-60)", "--ram-bandwidth", "-60"),
    Case("plan-rope_scaling-bad", "P(rope_scaling='linear')", "--rope-scaling", "linear"),
    Case("plan-rope_scale-nan", "P(model='qwen2.5-coder-32b', rope_scaling='yarn', rope_scale=NAN)", "--rope-scale", "nan"),
    Case("plan-rope_scale-zero", "P(model='qwen2.5-coder-32b', rope_scaling='yarn', rope_scale=0)", "--rope-scale", "0"),
    Case("plan-yarn_orig_ctx-bad", "P(model='qwen2.5-coder-32b', rope_scaling='yarn', yarn_orig_ctx=5)", "--yarn-orig-ctx", "5"),
    Case("plan-free-too-much", "P(free='1TB')", "--free", "1024.00 GiB"),
    Case("plan-gpu-empty", "P(gpu='')", "--gpu", "is required"),
    Case("plan-gpu-empty-list", "P(gpu=[])", "--gpu", "is required"),
    Case("plan-gpu-list-int", "P(gpu=['rtx3090', 5])", "--gpu", "5"),
    Case("plan-gpu-list-None", "P(gpu=['rtx3090', None])", "--gpu", "None"),
    Case("plan-gpu-list-long", "P(gpu=['rtx3090'] * 1000)", "--gpu", "1000"),
    Case("plan-gpu-123", "P(gpu=123)", "--gpu", "123"),
    Case("plan-gpu-float", "P(gpu=24.0)", "--gpu", "24.0"),
    Case("plan-gpu-0GB", "P(gpu='0GB')", "--gpu", "0GB"),
    Case("plan-gpu--24GB", "P(gpu='-24GB')", "--gpu", "-24GB"),
    Case("plan-gpu-nanGB", "P(gpu='nanGB')", "--gpu", "nanGB"),
    Case("plan-gpu-1e400GB", "P(gpu='1e400GB')", "--gpu", "1e400GB"),
    Case("plan-gpu-tiny", "P(gpu='0.0000001KB')", "--gpu", "0.0000001KB"),
    Case("plan-gpu-100x", "P(gpu='100x24GB')", "--gpu", "100x24GB"),
    Case("plan-gpu-dict", "P(gpu={'rtx3090': 2})", "--gpu", "{'rtx3090': 2}"),
    Case("plan-model-None", "kvplan.plan(gpu='24GB', model=None)", "--model", "is required"),
    Case("plan-model-empty", "P(model='')", "--model", "is required"),
    Case("plan-model-bytes", "P(model=b'qwen3-8b')", "--model", "qwen3-8b"),
    Case("plan-model-list", "P(model=['qwen3-8b'])", "--model", "['qwen3-8b']"),
    Case("plan-model-nul", "P(model='qwen3-8b\\x00')", "--model", "qwen3-8b"),
    Case("plan-model-surrogate", "P(model='qwen3-\\udc80')", "--model", "qwen3-"),
    Case("plan-model-missing-path", "P(model=str(F['missing']))", "--model", "no such file"),
    Case("plan-model-missing-pathlib", "P(model=F['missing'])", "--model", "no such file"),
    Case("plan-model-missing-abs", "P(model='/nonexistent/x.gguf')", "--model", "/nonexistent/x.gguf"),
    Case("plan-model-missing-rel", "P(model='models/qwen3-8b-Q4_K_M.gguf')", "--model", "models/qwen3-8b-Q4_K_M.gguf"),
    Case("plan-model-path-too-long", "P(model='/tmp/' + 'd/' * 5000)", "--model", "/tmp/d/d/", limit_s=1.0),
    Case("plan-model-empty-dir", "P(model=F['empty_dir'])", "--model", "empty_dir"),
    Case("plan-model-readme-dir", "P(model=F['readme_dir'])", "--model", "readme_dir"),
    Case("plan-model-text-gguf", "P(model=F['text_gguf'])", ("--model", "text.gguf"), "text.gguf"),
    Case("plan-model-text-file", "P(model=F['text_file'])", "--model", "notes.txt"),
    Case("plan-model-empty-gguf", "P(model=F['empty_gguf'])", ("--model", "empty.gguf"), "empty.gguf"),
    Case("plan-weights-disagree", "P(model=F['seed'], weights='Q4_K_M')", "--weights", "Q4_K_M"),
    Case("plan-model_draft-int", "P(model_draft=5)", "--model-draft", "5"),
    Case("plan-model_draft-missing", "P(model_draft='/nonexistent/d.gguf')", "--model-draft", "/nonexistent/d.gguf"),
    Case("plan-model_draft-typo", "P(model_draft='qwen3-0.6bb')", "--model-draft", "qwen3-0.6bb", suggestion="qwen3-0.6b"),
    Case("plan-model_draft-long", "P(model_draft=LONG)", "--model-draft", "xxxxxxxxxx", limit_s=1.0),
    Case("plan-model_draft-text", "P(model_draft=F['text_gguf'])", ("--model-draft", "text.gguf", "--model"), "text.gguf"),
    Case("plan-draft-flags-no-draft", "P(cache_type_k_draft='q8_0')", "--model-draft", "draft"),
    Case("plan-mmproj-int", "P(mmproj=5)", "--mmproj", "5"),
    Case("plan-mmproj-missing", "P(mmproj='/nonexistent/mm.gguf')", "--mmproj", "/nonexistent/mm.gguf"),
    Case("plan-mmproj-text", "P(mmproj=F['text_gguf'])", ("--mmproj", "text.gguf"), "text.gguf"),
    Case("plan-mmproj-not-clip", "P(mmproj=F['mmproj_not_clip'])", "--mmproj", "clip"),
    Case("plan-mmproj-dir", "P(mmproj=F['empty_dir'])", "--mmproj", "empty_dir"),
    Case("plan-no-mmproj-offload-alone", "P(mmproj_offload=False)", "--no-mmproj-offload", "--mmproj"),
    Case("plan-tensor_split-str", "P(gpu=['rtx3090', 'rtx3090'], tensor_split='3,1')", "--tensor-split", "3,1"),
    Case("plan-tensor_split-letters", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=['a', 'b'])", "--tensor-split", "a"),
    Case("plan-tensor_split-nan", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=[NAN, 1])", "--tensor-split", "nan"),
    Case("plan-tensor_split-inf", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=[INF, 1])", "--tensor-split", "inf"),
    Case("plan-tensor_split-neg", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=[-1, 2])", "--tensor-split", "-1"),
    Case("plan-tensor_split-zero", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=[0, 0])", "--tensor-split", "not all zero"),
    Case("plan-tensor_split-count", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=[1, 1, 1])", "--tensor-split", "3"),
    Case("plan-tensor_split-int", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=5)", "--tensor-split", "5"),
    Case("plan-tensor_split-bool", "P(gpu=['rtx3090', 'rtx3090'], tensor_split=[True, 1])", "--tensor-split", "True"),
    Case("plan-split_mode-row", "P(gpu=['rtx3090', 'rtx3090'], split_mode='row')", "--split-mode", "row"),
    Case("plan-ot-int", "P(override_tensors=5)", "--override-tensor", "5"),
    Case("plan-ot-list-int", "P(override_tensors=[5])", "--override-tensor", "5"),
    Case("plan-ot-list-None", "P(override_tensors=[None])", "--override-tensor", "None"),
    Case("plan-ot-no-eq", "P(override_tensors='exps')", "--override-tensor", "exps"),
    Case("plan-ot-device", "P(override_tensors='exps=GPU9')", "--override-tensor", "exps=GPU9"),
    Case("plan-ot-regex", "P(override_tensors=['(unclosed=CPU'])", "--override-tensor", "(unclosed"),
    Case("plan-ot-long", "P(override_tensors=LONG_OT)", "--override-tensor", "aaaaaaaaaa", limit_s=1.0),
    Case("plan-ot-empty", "P(override_tensors='')", "--override-tensor", "PATTERN=DEVICE"),
    Case("plan-ot-comma", "P(override_tensors=',')", "--override-tensor", "PATTERN=DEVICE"),
    Case("plan-ot-empty-item", "P(override_tensors=[''])", "--override-tensor", "PATTERN=DEVICE"),
    Case("plan-model_draft-empty", "P(model_draft='')", "--model-draft", "is empty"),
    Case("plan-backend-typo", "P(backend='cudaa')", ("backend", "--backend"), "cudaa"),
    Case("plan-task-empty", "P(task='')", "--task", "unknown task"),
    Case("plan-weights-empty", "P(weights='')", "--weights", "unknown weight format"),
    Case("plan-flash_attn-empty", "P(flash_attn='')", "--flash-attn", "unknown value"),
    Case("plan-mmproj-empty", "P(mmproj='')", "--mmproj", "no such file"),
    Case("plan-data-empty", "P(data='')", "--data", "no such directory"),
    Case("plan-data-int", "P(data=123)", "--data", "123"),
    Case("plan-data-missing", "P(data=F['data_missing'])", "--data", "no_such_data"),
    Case("plan-data-file", "P(data=F['data_file'])", "--data", "data_file.yaml"),
    Case("plan-data-list-None", "P(data=[None])", "--data", "None"),
    Case("plan-data-long", "P(data=LONG)", "--data", "xxxxxxxxxx", limit_s=1.0),
    Case("plan-data-unknown-key", "P(data=F['data_unknown_key'])", ("--data", "x.yaml"), "gpuz"),
    Case("plan-data-syntax", "P(data=F['data_syntax'])", ("--data", "x.yaml"), "x.yaml"),
    Case("plan-data-not-mapping", "P(data=F['data_not_mapping'])", ("--data", "x.yaml"), "x.yaml"),
    Case("plan-data-nan-gpu", "P(gpu='bad-card', data=F['data_nan_gpu'])", ("--data", "gpus.yaml"), "total_mib"),
    Case("plan-data-neg-gpu", "P(gpu='bad-card', data=F['data_neg_gpu'])", ("--data", "gpus.yaml"), "total_mib"),
    Case("plan-data-str-gpu", "P(gpu='bad-card', data=F['data_str_gpu'])", ("--data", "gpus.yaml"), "total_mib"),
    Case("plan-data-huge-gpu", "P(gpu='bad-card', data=F['data_huge_gpu'])", ("--data", "gpus.yaml"), "total_mib"),
    Case("plan-data-block0", "P(cache_type_k='q8_0', cache_type_v='q8_0', data=F['data_block0'])",
         ("--data", "engine.yaml"), "block"),
    Case("plan-data-ctx_pad0", "P(data=F['data_ctx_pad0'])", ("--data", "engine.yaml"), "ctx_pad"),
    Case("plan-data-alignment0", "P(data=F['data_alignment0'])", ("--data", "engine.yaml"), "alignment"),
    Case("plan-data-vllm-granularity0", "P(engine='vllm', data=F['data_vllm_granularity0'])",
         ("--data", "vllm.yaml"), "token_granularity"),
    Case("plan-data-utf8", "P(gpu='bad-card', data=F['data_utf8'])", ("--data", "gpus.yaml"), "UTF-8"),
    Case("gpus-data-utf8", "kvplan.gpus(data=F['data_utf8'])", ("--data", "gpus.yaml"), "UTF-8"),
    Case("plan-data-task-nan", "P(task='nantask', data=F['data_task_nan'])", ("--data", "tasks.yaml"), "ctx_target"),
    Case("plan-env-data-missing", "ENV(lambda: P(), KVPLAN_DATA=str(F['data_missing']))", ("--data", "KVPLAN_DATA"),
         "no_such_data"),
    # ---- model files (kvplan.plan(model=PATH) and kvplan.read_model read them alike)
    *[Case(f"read_model-{key}", f"kvplan.read_model(F['{key}'])", ("--model", f"F:{key}"), shows)
      for key, shows in (
          ("missing", "no such file"), ("empty_dir", "empty_dir"), ("readme_dir", "readme_dir"), ("text_gguf", "text.gguf"),
          ("text_file", "notes.txt"), ("empty_gguf", "empty.gguf"), ("truncated", "truncated.gguf"),
          ("bad_magic", "magic.gguf"), ("bad_version", "version.gguf"), ("nan_embd", "embedding_length"),
          ("neg_embd", "embedding_length"), ("zero_heads", "head_count"), ("kv_not_divisor", "head_count_kv"),
          ("huge_layers", "block_count"), ("huge_ctx", "context_length"), ("no_arch", "architecture"),
          ("arch_int", "architecture"), ("unknown_arch", "made-up-arch"), ("huge_shape", "token_embd.weight"),
          ("offset_past", "token_embd.weight"), ("many_dims", "token_embd.weight"), ("bad_tensor_type", "token_embd.weight"),
          ("huge_n_tensors", "ntensors.gguf"), ("huge_n_kv", "nkv.gguf"), ("huge_key", "key.gguf"),
          ("huge_string", "string.gguf"), ("huge_array", "array.gguf"), ("nested_array", "nested.gguf"),
          ("bad_value_type", "vtype.gguf"), ("split_second", "00001-of-00003"), ("split_missing", "Other-00002-of-00002"),
          ("cfg_type", "model_type"), ("cfg_syntax", "JSON"), ("cfg_list", "object"), ("cfg_empty", "JSON"),
          ("cfg_neg_layers", "num_hidden_layers"), ("cfg_huge_width", "hidden_size"), ("cfg_float_layers", "num_hidden_layers"),
          ("cfg_zero_heads", "num_attention_heads"), ("cfg_str_width", "hidden_size"), ("cfg_kv_not_divisor", "num_key_value_heads"),
          ("cfg_unknown_type", "made-up"), ("cfg_deep", "config.json"), ("cfg_total_size", "total_size"),
          ("cfg_total_neg", "total_size"), ("cfg_total_str", "total_size"), ("cfg_index_bad", "safetensors"),
          ("cfg_is_dir", "cfg_is_dir"), ("cfg_file", "model_type"), ("bad_utf8_name", "utf8name.gguf"),
          ("bad_utf8_arch", "utf8arch.gguf"))],
    Case("read_model-utf8-name-json", "kvplan.read_model(F['bad_utf8_name']).to_json()", ("--model", "F:bad_utf8_name"),
         "utf8name.gguf"),
    Case("plan-model-utf8-name", "P(model=F['bad_utf8_name']).to_json()", ("--model", "F:bad_utf8_name"), "utf8name.gguf"),
    Case("plan-model-nan-embd", "P(model=F['nan_embd'])", ("--model", "F:nan_embd"), "embedding_length"),
    Case("plan-model-huge-shape", "P(model=F['huge_shape'])", ("--model", "F:huge_shape"), "token_embd.weight"),
    Case("plan-model-huge-key", "P(model=F['huge_key'])", ("--model", "F:huge_key"), "key.gguf", limit_s=2.0),
    Case("plan-model-cfg-type", "P(model=F['cfg_type'])", ("--model", "F:cfg_type"), "model_type"),
    Case("plan-model-cfg-total", "P(model=F['cfg_total_size'])", ("--model", "F:cfg_total_size"), "total_size"),
    Case("read_model-int", "kvplan.read_model(123)", "--model", "123"),
    Case("read_model-None", "kvplan.read_model(None)", "--model", "None"),
    Case("read_model-bytes", "kvplan.read_model(b'/tmp')", "--model", "/tmp"),
    Case("read_model-long", "kvplan.read_model(LONG)", "--model", "xxxxxxxxxx", limit_s=1.0),
    Case("read_model-nul", "kvplan.read_model('/tmp/a\\x00b')", "--model", "/tmp/a"),
    Case("read_model-engine-typo", "kvplan.read_model(F['seed'], engine='vlm')", "--engine", "vlm", suggestion="vllm"),
    Case("read_model-engine-int", "kvplan.read_model(F['seed'], engine=5)", "--engine", "5"),
    Case("read_model-data-int", "kvplan.read_model(F['seed'], data=5)", "--data", "5"),
    Case("read_model-unknown-keyword", "kvplan.read_model(F['seed'], engin='vllm')", "kvplan.read_model()", "engin",
         suggestion="engine"),
    Case("read_model-no-args", "kvplan.read_model()", "path", "is required"),
    # ---- kvplan.breakdown and kvplan.max_context
    Case("breakdown-no-weights", "kvplan.breakdown('24GB', 'qwen3-8b', ctx_size=8192, cache_type_k='q8_0', cache_type_v='q8_0')",
         "--weights", "kvplan.breakdown()"),
    Case("breakdown-None-ctk", "B(cache_type_k=None)", "--cache-type-k", "kvplan.breakdown()"),
    Case("breakdown-ctx-str", "B(ctx_size='8 thousand')", "--ctx-size", "8 thousand"),
    Case("breakdown-ctx-nan", "B(ctx_size=NAN)", "--ctx-size", "nan"),
    Case("breakdown-weights-int", "B(weights=4)", "--weights", "4"),
    Case("breakdown-weights-typo", "B(weights='Q8_1')", "--weights", "Q8_1", suggestion="Q8_0"),
    Case("breakdown-ctv-typo", "B(cache_type_v='q8')", "--cache-type-v", "q8"),
    Case("breakdown-unknown-keyword", "B(n_gpu_layer=10)", "kvplan.breakdown()", "n_gpu_layer", suggestion="n_gpu_layers"),
    Case("breakdown-ngl-str", "B(n_gpu_layers='half')", "--n-gpu-layers", "half"),
    Case("breakdown-reserve-nan", "B(reserve=NAN)", "--reserve", "nan"),
    Case("breakdown-model-long", "B(model=LONG)", "--model", "xxxxxxxxxx", limit_s=1.0),
    Case("breakdown-gpu-None", "B(gpu=None)", "--gpu", "is required"),
    Case("breakdown-positional", "kvplan.breakdown('24GB', 'qwen3-8b', 'Q4_K_M')", "kvplan.breakdown()", "3"),
    Case("max_context-max_ctx", "M(max_ctx=False)", "kvplan.max_context()", "max_ctx"),
    Case("max_context-ctx_size", "M(ctx_size=8192)", "kvplan.max_context()", "ctx_size"),
    Case("max_context-ctk-int", "M(cache_type_k=8)", "--cache-type-k", "8"),
    Case("max_context-ctk-typo", "M(cache_type_k='q8_1', cache_type_v='q8_0')", "--cache-type-k", "q8_1", suggestion="q8_0"),
    Case("max_context-top-nan", "M(top=NAN)", "--top", "nan"),
    Case("max_context-host_ram-neg", "M(host_ram=-5)", "--ram", "-5"),
    Case("max_context-gpu-typo", "M(gpu='rtx4091')", "--gpu", "rtx4091", suggestion="rtx4090"),
    Case("max_context-unknown-keyword", "M(taks='coding')", "kvplan.max_context()", "taks", suggestion="task"),
    Case("max_context-no-model", "kvplan.max_context('24GB')", "--model", "is required"),
    # ---- catalog lookups
    Case("model-typo", "kvplan.model('qwen3-8bb')", "--model", "qwen3-8bb", suggestion="qwen3-8b"),
    Case("model-int", "kvplan.model(8)", "--model", "8"),
    Case("model-None", "kvplan.model(None)", "--model", "None"),
    Case("model-empty", "kvplan.model('')", "--model", "is required"),
    Case("model-list", "kvplan.model(['qwen3-8b'])", "--model", "['qwen3-8b']"),
    Case("model-data-int", "kvplan.model('qwen3-8b', data=7)", "--data", "7"),
    Case("model-data-missing", "kvplan.model('qwen3-8b', data=F['data_missing'])", "--data", "no_such_data"),
    Case("gpu-typo", "kvplan.gpu('rtx4091')", "--gpu", "rtx4091", suggestion="rtx4090"),
    Case("gpu-int", "kvplan.gpu(4090)", "--gpu", "4090"),
    Case("gpu-size", "kvplan.gpu('24GB')", "--gpu", "24GB"),
    Case("gpu-None", "kvplan.gpu(None)", "--gpu", "None"),
    Case("engine-typo", "kvplan.engine('vlm')", "--engine", "vlm", suggestion="vllm"),
    Case("engine-int", "kvplan.engine(5)", "--engine", "5"),
    Case("engine-None", "kvplan.engine(None)", "--engine", "None"),
    Case("cache_types-typo", "kvplan.cache_types('vlm')", "--engine", "vlm", suggestion="vllm"),
    Case("cache_types-int", "kvplan.cache_types(5)", "--engine", "5"),
    Case("cache_types-unknown-keyword", "kvplan.cache_types(engin='vllm')", "kvplan.cache_types()", "engin",
         suggestion="engine"),
    Case("models-data-int", "kvplan.models(data=5)", "--data", "5"),
    Case("models-data-missing", "kvplan.models(F['data_missing'])", "--data", "no_such_data"),
    Case("gpus-data-list-int", "kvplan.gpus(data=[5])", "--data", "5"),
    Case("gpus-data-syntax", "kvplan.gpus(data=F['data_syntax'])", ("--data", "x.yaml"), "x.yaml"),
    Case("tasks-data-file", "kvplan.tasks(data=F['data_file'])", "--data", "data_file.yaml"),
    Case("engines-data-nan", "kvplan.engines(data=NAN)", "--data", "nan"),
    Case("weight_formats-data-bytes", "kvplan.weight_formats(data=b'/tmp')", "--data", "/tmp"),
    Case("models-unknown-keyword", "kvplan.models(dta='x')", "kvplan.models()", "dta", suggestion="data"),
    Case("gpus-extra-positional", "kvplan.gpus(None, None)", "kvplan.gpus()", "2"),
    # ---- results: Plan.to_json, Model.to_json, Suggestion.replan
    Case("to_json-indent-str", "PLAN().to_json(indent='2')", "indent", "2"),
    Case("to_json-indent-nan", "PLAN().to_json(indent=NAN)", "indent", "nan"),
    Case("to_json-indent-huge", "PLAN().to_json(indent=10**20)", "indent", "100000000000000000000"),
    Case("to_json-indent-big", "PLAN().to_json(indent=10**8)", "indent", "100000000", limit_s=1.0),
    Case("to_json-unknown-keyword", "PLAN().to_json(indnet=2)", "Plan.to_json()", "indnet", suggestion="indent"),
    Case("model_to_json-indent-str", "kvplan.model('qwen3-8b').to_json(indent='x')", "indent", "x"),
    Case("model_to_json-indent-big", "kvplan.model('qwen3-8b').to_json(indent=10**8)", "indent", "100000000", limit_s=1.0),
    # ---- keywords of every type, each given a wrong Python value
    *[c for k in ("task", "weights", "cache_type_k", "engine", "backend", "split_mode", "rope_scaling")
      for c in keyword_cases("P", k, STRINGS)],
    *keyword_cases("P", "cache_type_v", ["3", "['f16']", "NAN"]),
    *keyword_cases("P", "build", ["3", "LONG"]),
    *keyword_cases("P", "ctx_size", ["'32kk'", "3.5", "True", "NAN", "[4]", "2**63", "10**30"]),
    *[c for k in ("n_parallel", "top", "n_ubatch", "n_batch", "n_cpu_moe", "fit_target_mib",
                  "n_outputs_max", "yarn_orig_ctx", "tensor_parallel")
      for c in keyword_cases("P", k, INTS)],
    *keyword_cases("D", "draft_max", ["'3'", "3.0", "NAN"]),
    *keyword_cases("D", "n_gpu_layers_draft", ["'all'", "2.5", "NAN"]),
    *[c for k in ("fit_placement", "kv_unified", "swa_full", "allow_slow", "cpu_moe", "max_ctx", "accept_risk",
                  "mmproj_offload")
      for c in keyword_cases("P", k, BOOLS)],
    *[c for k in ("host_bandwidth_gbs", "rope_scale") for c in keyword_cases("P", k, FLOATS)],
    *[c for k in ("reserve", "free", "host_ram") for c in keyword_cases("P", k, SIZES)],
    *keyword_cases("P", "flash_attn", ["1", "NAN", "['on']", "'ON!'", "LONG"]),
    *keyword_cases("D", "weights_draft", ["5", "LONG"]),
    *keyword_cases("D", "cache_type_k_draft", ["5", "'q9_0'"]),
    *keyword_cases("D", "cache_type_v_draft", ["['q8_0']", "'q4_k'"]),
    *keyword_cases("P", "override_tensors", ["NAN", "{'exps': 'CPU'}"]),
    # ---- issue 18's serving keywords (vLLM/SGLang, llama.cpp over RPC)
    *[c for k in ("pipeline_parallel_size", "data_parallel", "nodes", "max_num_seqs", "concurrency", "max_batched_tokens")
      for c in keyword_cases("P", k, INTS)],
    *keyword_cases("P", "expert_parallel", BOOLS),
    *keyword_cases("P", "interconnect", ["5", "['ib-ndr']", "LONG"]),
    *keyword_cases("P", "rpc_servers", ["NAN", "{'h': 1}"]),
    Case("plan-rpc-int-entry", "P(rpc_servers=[5])", "--rpc", "5"),
    Case("plan-concurrency-0", "P(engine='vllm', gpu='h100-sxm', tensor_parallel=8, model='llama-3.3-70b', concurrency=0)",
         "--concurrency", "0"),
    Case("plan-interconnect-unknown", "P(engine='vllm', gpu='h100-sxm', tensor_parallel=8, pipeline_parallel_size=2, nodes=2, "
         "model='llama-3.3-70b', interconnect='infiniband')", "--interconnect", "infiniband"),
    Case("plan-rpc-no-port", "P(rpc_servers=['10.0.0.2=rtx3090'])", "--rpc", "10.0.0.2=rtx3090"),
]

# a plot is a bad call too (matplotlib, when installed)
PLOT_CASES: list[Case] = [
    Case("plots-pairs-str", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', pairs='f16')", "pairs", "f16"),
    Case("plots-pairs-short", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', pairs=[('f16',)])", "pairs", "f16"),
    Case("plots-pairs-typo", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', pairs=[('f16', 'q9_0')])",
         ("--cache-type-v",), "q9_0"),
    Case("plots-contexts-neg", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', contexts=[-5])", "--ctx-size", "-5"),
    Case("plots-contexts-str", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', contexts='big')", "contexts", "big"),
    Case("plots-contexts-many", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', contexts=range(256, 10**7))",
         "contexts", "9,999,744", limit_s=2.0),
    Case("plots-model-long", "kvplan.plots.memory_vs_context('24GB', LONG)", "--model", "xxxxxxxxxx", limit_s=1.0),
    Case("plots-unknown-keyword", "kvplan.plots.memory_vs_context('24GB', 'qwen3-8b', weight='Q4_K_M')",
         "kvplan.plots.memory_vs_context()", "weight", suggestion="weights"),
    Case("plots-risk-not-plan", "kvplan.plots.risk_frontier(5)", "plan", "5"),
    Case("plots-risk-None", "kvplan.plots.risk_frontier(None)", "plan", "None"),
]


# the harness's own checks: a call that kills the worker, and one that raises an internal error
HARNESS_CASES = [Case("harness-abort", "__import__('os').abort()", "--model"),
                 Case("harness-internal", "PLAN()._core.options[0].usage('nope')", "")]


# ---------------------------------------------------------------- the worker (a subprocess)


def namespace(f: dict[str, Path]) -> dict[str, Any]:
    import kvplan

    def P(**kw: Any) -> Any:  # noqa: N802
        return kvplan.plan(**{"gpu": "24GB", "model": "qwen3-8b", **kw})

    def B(**kw: Any) -> Any:  # noqa: N802
        return kvplan.breakdown(**{"gpu": "24GB", "model": "qwen3-8b", "weights": "Q4_K_M", "ctx_size": 8192,
                                   "cache_type_k": "q8_0", "cache_type_v": "q8_0", **kw})

    def D(**kw: Any) -> Any:  # noqa: N802  (with a draft model)
        return P(**{"model_draft": "qwen3-0.6b", **kw})

    def M(**kw: Any) -> Any:  # noqa: N802
        return kvplan.max_context(**{"gpu": "24GB", "model": "qwen3-8b", **kw})

    def ENV(call: Any, **env: str) -> Any:  # noqa: N802
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return call()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    plan = kvplan.plan(gpu="24GB", model="qwen3-8b")
    try:
        import kvplan.plots  # noqa: F401
    except ImportError:
        pass
    return {**LITERALS, "kvplan": kvplan, "P": P, "B": B, "M": M, "ENV": ENV, "D": D, "F": f, "PLAN": lambda: plan}


def run_case(code: str, ns: dict[str, Any]) -> dict[str, Any]:
    """Evaluate one call; what it raised (or returned), as JSON-able values."""
    from kvplan import InputError
    start = time.perf_counter()
    try:
        result = eval(code, ns)  # noqa: S307 (the table's own calls)
    except InputError as e:
        return {"raised": "InputError", "field": e.field, "value": e.value[:200], "message": str(e)[:2000],
                "suggestion": e.suggestion, "keyword": e.keyword, "accepted": e.accepted[:20],
                "is_value_error": isinstance(e, ValueError), "seconds": time.perf_counter() - start}
    except BaseException as e:  # noqa: BLE001 (anything else is the failure this test looks for)
        return {"raised": type(e).__name__, "message": str(e)[:2000], "seconds": time.perf_counter() - start}
    return {"raised": None, "message": f"returned {type(result).__name__}", "seconds": time.perf_counter() - start}


def worker(root: str) -> None:
    """Read case names from stdin, one a line; answer each with one JSON line."""
    f = {k: Path(v) for k, v in json.loads(Path(root, "files.json").read_text()).items()}
    ns = namespace(f)
    by_name = {c.name: c for c in (*CASES, *PLOT_CASES, *HARNESS_CASES)}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(run_case(by_name[line.strip()].code, ns)), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker(sys.argv[2])
    sys.exit(0)


# ---------------------------------------------------------------- the tests

import pytest  # noqa: E402


class Worker:
    """The subprocess that runs the calls; started again after a call that kills it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        # the worker runs in the crafted files' folder (no relative path there is a model), so the import path
        # is made absolute
        path = os.pathsep.join(str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
        env = {**os.environ, "KVPLAN_RAM": "unknown", "PYTHONPATH": path}
        env.pop("KVPLAN_DATA", None)
        with (self.root / "stderr").open("w") as err:
            proc = subprocess.Popen([sys.executable, __file__, "--worker", str(self.root)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, text=True, cwd=self.root, env=env)
        self.proc = proc
        line = self.read(120)
        assert line and json.loads(line) == {"ready": True}, f"the worker did not start: {self.stderr()}"
        return proc

    def read(self, timeout: float) -> str | None:
        """The worker's next line; "" when it closed its output (it died), None when it said nothing in time."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if ready else None

    def stderr(self) -> str:
        return (self.root / "stderr").read_text(errors="replace")[-3000:]

    def ask(self, case: Case) -> dict[str, Any]:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self.start()
        assert proc.stdin is not None
        proc.stdin.write(case.name + "\n")
        proc.stdin.flush()
        wait = max(60.0, 4 * case.limit_s)
        line = self.read(wait)
        if line:
            answer: dict[str, Any] = json.loads(line)
            return answer
        if line is None:
            proc.kill()
            proc.wait()
            return {"raised": "timeout", "message": f"no answer within {wait} s"}
        try:
            code: int | str = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "none: it closed its output and hung"
        return {"raised": f"crash (exit {code})", "message": self.stderr()}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad_input")
    f = files(root)
    (root / "files.json").write_text(json.dumps({k: str(v) for k, v in f.items()}))
    return f


@pytest.fixture(scope="session")
def worker_proc(crafted: dict[str, Path]) -> Iterator[Worker]:
    w = Worker(crafted["empty_dir"].parent)
    yield w
    w.close()


def field_allowed(field: str, expected: str | tuple[str, ...], f: dict[str, Path]) -> bool:
    """"--flag" and "kvplan.plan()" match exactly; "F:key" matches the crafted file or a path in it (its
    config.json, "file.yaml:3"); a file name ("x.yaml") matches a field that names it."""
    for e in expected if isinstance(expected, tuple) else (expected,):
        if e.startswith("F:"):
            if field.startswith(str(f[e[2:]])):
                return True
        elif "." in e and not e.startswith(("--", "kvplan.", "Plan.")):
            if e in field:
                return True
        elif field == e:
            return True
    return False


def check(case: Case, answer: dict[str, Any], f: dict[str, Path]) -> None:
    call = case.code[:120]
    assert answer["raised"] == "InputError", f"{call}: {answer['raised'] or 'no exception'}: {answer['message'][:600]}"
    assert answer["is_value_error"]
    assert field_allowed(answer["field"], case.field, f), f"{call}: field {answer['field']!r}, expected {case.field!r}"
    message = answer["message"]
    assert not case.shows or case.shows in message, f"{call}: the message does not show {case.shows!r}: {message[:600]}"
    assert len(message) < 1500, f"{call}: a message of {len(message)} characters"
    if case.suggestion is not None:
        assert answer["suggestion"] == case.suggestion, f"{call}: suggestion {answer['suggestion']!r}: {message}"
    assert answer["seconds"] < case.limit_s, f"{call}: {answer['seconds']:.2f} s (limit {case.limit_s} s)"


def test_enough_cases() -> None:
    assert len(CASES) >= 150
    assert len({c.name for c in (*CASES, *PLOT_CASES)}) == len(CASES) + len(PLOT_CASES), "case names must be unique"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_call(case: Case, worker_proc: Worker, crafted: dict[str, Path]) -> None:
    check(case, worker_proc.ask(case), crafted)


@pytest.mark.parametrize("case", PLOT_CASES, ids=lambda c: c.name)
def test_bad_plot_call(case: Case, worker_proc: Worker, crafted: dict[str, Path]) -> None:
    pytest.importorskip("matplotlib")
    check(case, worker_proc.ask(case), crafted)


def test_a_crash_fails_its_case(worker_proc: Worker, crafted: dict[str, Path]) -> None:
    """The harness itself: a call that kills the interpreter is reported as a crash, and the next call runs."""
    answer = worker_proc.ask(HARNESS_CASES[0])
    assert answer["raised"].startswith("crash"), answer
    assert worker_proc.ask(CASES[0])["raised"] == "InputError"


def test_an_internal_error_says_so(worker_proc: Worker) -> None:
    """A C++ exception that is not kvplan::InputError is kvplan's bug: a RuntimeError naming it, not a crash.
    (Only the private module can reach one: here, a pool that no option has.)"""
    answer = worker_proc.ask(HARNESS_CASES[1])
    assert answer["raised"] == "RuntimeError", answer
    assert answer["message"].startswith("kvplan internal error (std::out_of_range): no pool nope"), answer
