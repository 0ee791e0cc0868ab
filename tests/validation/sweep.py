"""The configurations of the validation sweep, shared by measure.py and compare.py.

A configuration is what a user passes to llama-server (and to kvplan): context size, K and V cache
types, flash attention, slots with or without a unified cache, ubatch size and --swa-full. The CI subset
is a fixed list chosen to touch every rule once per family; the full sweep is the cartesian product.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

# The nine cache types llama.cpp accepts for -ctk / -ctv (common/arg.cpp kv_cache_types).
CACHE_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]

# Mixed K/V pairs of the full sweep, on top of the nine K = V pairs.
MIXED_PAIRS = [("f16", "q8_0"), ("q8_0", "q4_0"), ("f16", "q4_0"), ("q4_0", "f16")]

# Models with sliding-window layers get --swa-full variants.
SWA_MODELS = {"gemma3-tiny", "gpt-oss-tiny", "gemma3n-tiny", "gemma4-tiny", "gemma4-e-tiny"}

# Families whose architecture has no `graph:` rule in data/engines/llama.cpp.yaml: kvplan sizes their compute buffer
# with the closed forms of docs/formulas.md §5.2, whose target is their upper bound (kvplan's compute high_bytes at
# least llama.cpp's buffer); the error against the 10 % band is reported, not failed.
CLOSED_FORM_COMPUTE = {"glm4moe-tiny", "gemma3n-tiny", "nemotron_h-tiny", "llama4-tiny", "nemotron_h_moe-tiny",
                       "falcon-h1-tiny", "gemma4-tiny", "deepseek32-tiny", "gemma4-e-tiny"}

# The model whose contexts are expensive (Llama-3-8B width): the full sweep keeps its grid smaller.
WIDE_MODELS = {"llama-wide"}

# The synthetic models (make_models.py) and what each exercises.
FAMILIES = {
    "llama-tiny": "llama: GQA 4/2 heads of 64, untied output, q8_0/q4_0 weights",
    "llama-wide": "llama at Llama-3-8B width and vocabulary (4096, 32/8 heads, n_ff 14336, vocab 128256), 2 layers, "
                  "Q4_K_M-like mix: realistic compute terms",
    "qwen3-tiny": "qwen3: explicit head_dim 128 > n_embd/n_head, QK norm, tied embeddings",
    "gemma3-tiny": "gemma3: sliding window 512, pattern 6 (the default, not in the file), 8 layers (2 full), "
                   "head_dim 128, tied",
    "gpt-oss-tiny": "gpt-oss: sliding window 128 on alternate layers, attention sinks, 4 experts (2 used) in MXFP4",
    "deepseek2-tiny": "deepseek2: MLA (kv_lora_rank 128 + rope 32, q_lora_rank 128), 1 dense + 2 MoE layers "
                      "with a shared expert",
    "qwen3moe-tiny": "qwen3moe: 8 experts (2 used), head_dim 128, untied",
    "mamba2-tiny": "mamba2: recurrent only; d_inner 512, d_state 64, 8 heads, 2 groups, tied",
    "qwen3next-tiny": "qwen3next: hybrid, 3 gated-delta-net + 1 attention layer, head_dim 128, MoE + shared expert",
    "granitehybrid-tiny": "granitehybrid: hybrid, 3 Mamba-2 + 1 attention layer (per-layer head_count_kv), dense FFN",
    "glm4moe-tiny": "glm4moe: q/k/v bias, head_dim 128, partial RoPE, 1 dense + 2 MoE layers with a shared expert, "
                    "sigmoid router, plus a NextN/MTP block (weights skipped, KV cached)",
    "gemma3n-tiny": "gemma3n: sliding window 512, period 5, 22 layers with layers 20-21 reusing earlier caches, "
                    "AltUp, Laurel, per-layer embeddings, tied",
    "qwen35-tiny": "qwen35: hybrid, 6 gated-delta-net + 2 gated attention layers, V heads 4 > K heads 2, dense FFN, "
                   "one MTP block (not loaded, not cached)",
    "qwen35moe-tiny": "qwen35moe: hybrid, 3 gated-delta-net + 1 attention layer, MoE + gated shared expert, one MTP "
                      "block (not loaded, not cached)",
    "nemotron_h-tiny": "nemotron_h: hybrid 'M-M*-M-': 3 Mamba-2, 1 attention, 3 FFN-only layers (per-layer "
                       "head_count_kv and feed_forward_length)",
    "llama4-tiny": "llama4: Maverick's interleave (dense FFN on even layers, 4 experts top-1 + a shared expert on odd "
                   "ones), chunked attention (window 8192, 3 of 4 layers), untied",
    "nemotron_h_moe-tiny": "nemotron_h_moe: hybrid 'MEM*EME': 3 Mamba-2, 1 attention, 3 MoE layers (8 experts top-2, "
                           "relu^2 up/down, a shared expert, per-layer head_count_kv and feed_forward_length)",
    "falcon-h1-tiny": "falcon-h1: parallel hybrid, attention (4/2 heads of 64) and Mamba-2 (d_inner 384) in each of 3 "
                      "layers, dense FFN",
    "gemma4-tiny": "gemma4: per-layer sliding pattern (4 sliding of 6, window 256), head size 128 full / 64 sliding, "
                   "the last 2 layers reuse earlier caches, tied output",
    "deepseek32-tiny": "deepseek32: deepseek2-tiny's MLA and MoE plus the DSA lightning indexer (4 heads of 64, top-k "
                       "256) and its own key cache",
    "gemma4-e-tiny": "gemma4 as E2B/E4B: gemma4-tiny plus per-layer input embeddings of 64 per layer",
}
MODELS = list(FAMILIES)

# Families of architectures kvplan still refuses (data/engines/llama.cpp.yaml unmodelled_archs says why): make_models.py
# writes them with --only, and measure.py / compare.py take them with --models, but the subset and the full sweep leave
# them out until kvplan sizes them. None at present (deepseek32-tiny left it when the DSA indexer cache was sized).
PENDING_FAMILIES: dict[str, str] = {}

# Where the documented wall times were measured (every developer's and CI's machine has this size).
MACHINE = "2 CPU cores"
# pip install of the llama-cpp-python sdist (CPU backend) on that machine, measured once
PACKAGE_BUILD = "16 min (947 s)"

N_BATCH = 2048  # llama-server's default -b; kvplan's default too


@dataclass(frozen=True)
class Config:
    ctx: int
    type_k: str
    type_v: str
    fa: bool
    n_seq: int
    unified: bool
    ubatch: int
    swa_full: bool
    batch: int = N_BATCH
    # llama_context_params.n_outputs_max: 0 is the library's default (n_batch); llama-server sets
    # n_parallel · (1 + n_draft) (tools/server/server-context.cpp server_output_limits).
    outputs: int = 0

    @property
    def key(self) -> str:
        return (f"c{self.ctx}-k{self.type_k}-v{self.type_v}-fa{int(self.fa)}-np{self.n_seq}"
                f"{'u' if self.unified else ''}-ub{self.ubatch}{'-swafull' if self.swa_full else ''}"
                f"{f'-out{self.outputs}' if self.outputs else ''}")

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "Config":
        return Config(**{k: d[k] for k in ("ctx", "type_k", "type_v", "fa", "n_seq", "unified", "ubatch",
                                           "swa_full", "batch")}, outputs=d.get("outputs", 0))

    def kvplan_args(self) -> list[str]:
        args = ["--ctx-size", str(self.ctx), "-ctk", self.type_k, "-ctv", self.type_v,
                "-fa", "on" if self.fa else "off", "-np", str(self.n_seq), "-ub", str(self.ubatch),
                "--batch-size", str(self.batch),
                # measure.py creates library contexts (n_outputs_max 0 = n_batch, clamped by the context), not
                # llama-server's (n_parallel): the reserve graph's logits rows follow.
                "--n-outputs-max", str(self.outputs or min(self.ctx, self.batch))]
        if self.unified:
            args.append("-kvu")
        if self.swa_full:
            args.append("--swa-full")
        return args


def _subset(model: str) -> list[Config]:
    C = Config
    out = [
        C(4096, "f16", "f16", True, 1, False, 512, False),
        C(4096, "f16", "f16", False, 1, False, 512, False),
        C(1000, "q8_0", "q8_0", True, 4, True, 512, False),
        C(32768, "q4_0", "q4_0", True, 4, False, 256, False),
        C(4096, "q8_0", "q4_0", True, 1, False, 512, False),
        C(4096, "f16", "q8_0", True, 1, False, 512, False),
        C(4096, "q4_0", "f16", False, 1, False, 512, False),
        C(4096, "q8_0", "q8_0", False, 1, False, 512, False),  # refused: quantized V needs FA
        C(16384, "f16", "f16", False, 4, True, 256, False),
        C(4096, "f16", "f16", False, 4, True, 512, False),
        C(10000, "f16", "f16", False, 2, False, 512, False),
        C(10000, "q8_0", "q8_0", True, 2, False, 1024, False),
        C(512, "f16", "f16", True, 1, False, 1024, False),  # ubatch clamps to the context
        C(8192, "bf16", "bf16", True, 1, False, 1024, False),
    ]
    out += [C(4096, t, t, True, 1, False, 512, False) for t in CACHE_TYPES if t not in ("f16",)]
    if model in SWA_MODELS:
        out += [
            C(4096, "f16", "f16", True, 1, False, 512, True),
            C(1000, "q8_0", "q8_0", True, 4, True, 512, True),
            C(16384, "f16", "f16", False, 4, False, 512, True),
            C(16384, "f16", "f16", True, 4, True, 256, False),
            C(32768, "q8_0", "q8_0", True, 1, False, 1024, False),
        ]
    out += _server_outputs()
    if model in WIDE_MODELS:
        # keep CI time down: no 32k context without flash attention on the wide model
        out = [c for c in out if c.ctx <= 16384 or c.fa]
    return _dedup(out)


def _server_outputs() -> list[Config]:
    """Contexts as llama-server creates them: logits rows n_parallel · (1 + n_draft), not n_batch."""
    C = Config
    return [
        C(4096, "f16", "f16", True, 1, False, 512, False, outputs=1),
        C(4096, "f16", "f16", False, 1, False, 512, False, outputs=1),
        C(4096, "q8_0", "q8_0", True, 4, True, 512, False, outputs=4),
        C(8192, "q8_0", "q8_0", True, 2, False, 512, False, outputs=8),  # two slots with a draft of 3 tokens
        C(1000, "f16", "f16", True, 1, False, 256, False, outputs=4),
    ]


def _full(model: str) -> list[Config]:
    pairs = [(t, t) for t in CACHE_TYPES] + MIXED_PAIRS
    ctxs = [512, 1000, 4096, 10000, 32768]
    seqs = [(1, False), (2, False), (4, True), (4, False)]
    ubs = [256, 512, 1024]
    swa = [False, True] if model in SWA_MODELS else [False]
    if model in WIDE_MODELS:
        ctxs, ubs = [1000, 8192], [256, 512]
    out = [Config(c, k, v, fa, n, u, ub, sf)
           for c, (k, v), fa, (n, u), ub, sf in itertools.product(ctxs, pairs, [True, False], seqs, ubs, swa)]
    return _dedup(out + _server_outputs())


def _dedup(configs: list[Config]) -> list[Config]:
    seen: set[str] = set()
    out = []
    for c in configs:
        if c.key not in seen:
            seen.add(c.key)
            out.append(c)
    return out


def configs(model: str, mode: str) -> list[Config]:
    if mode == "subset":
        return _subset(model)
    if mode == "full":
        return _full(model)
    raise ValueError(f"unknown sweep mode {mode!r}")
