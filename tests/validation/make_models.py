#!/usr/bin/env python3
"""Writes the synthetic GGUF models of kvplan's validation against llama.cpp.

Each model has the tensor names, shapes and metadata that llama.cpp b10454 (llama-cpp-python 0.3.35)
expects for its architecture, mirroring what convert_hf_to_gguf.py writes for the real family, with
random (small tensors) or zero (large tensors) weights and a minimal SentencePiece-style vocabulary.
The widths are small so that a context is created in well under a second, except `llama-wide`, which
has Llama-3-8B's width and vocabulary (2 layers) so that the compute-buffer terms are realistic.

    python make_models.py [--out DIR] [--only NAME,...] [--list]

The files are deterministic (fixed seed) and are not committed: run.sh writes them to
tests/validation/models/ (git-ignored).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sweep  # noqa: E402

# Tensors with at most this many elements get random data quantized by gguf-py; larger ones are
# written as zero blocks of the same type (zero scales: valid data, and fast to write).
RANDOM_LIMIT = 1 << 20

# gguf-py can quantize these types itself; others are written as zero blocks.
GGUF_PY_QUANTIZES = {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.MXFP4}


@dataclass
class Tensor:
    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the row length
    qtype: Q


@dataclass
class Model:
    name: str
    arch: str
    description: str
    n_vocab: int
    kv: list[tuple[str, object]] = field(default_factory=list)  # (writer method, value) pairs
    tensors: list[Tensor] = field(default_factory=list)
    file_type: int = 7  # LLAMA_FTYPE_MOSTLY_Q8_0, informative only

    def add(self, name: str, ne: tuple[int, ...] | list[int], qtype: Q = Q.F32) -> None:
        self.tensors.append(Tensor(name, tuple(int(x) for x in ne), qtype))

    def meta(self, method: str, value: object) -> None:
        self.kv.append((method, value))


# --------------------------------------------------------------------------------------------------
# building blocks


def common(m: Model, *, n_embd: int, n_layer: int, n_ff: int | list[int], n_head: int, n_head_kv: int | list[int],
           ctx_train: int = 131072, rms_eps: float = 1e-6, rope_base: float | None = 10000.0,
           key_length: int | None = None, value_length: int | None = None, rope_dims: int | None = None) -> None:
    m.meta("add_context_length", ctx_train)
    m.meta("add_embedding_length", n_embd)
    m.meta("add_block_count", n_layer)
    m.meta("add_feed_forward_length", n_ff)
    m.meta("add_head_count", n_head)
    m.meta("add_head_count_kv", n_head_kv)
    m.meta("add_layer_norm_rms_eps", rms_eps)
    if rope_base is not None:
        m.meta("add_rope_freq_base", rope_base)
    if key_length is not None:
        m.meta("add_key_length", key_length)
    if value_length is not None:
        m.meta("add_value_length", value_length)
    if rope_dims is not None:
        m.meta("add_rope_dimension_count", rope_dims)


def embeddings(m: Model, n_embd: int, *, embd_type: Q, output_type: Q | None) -> None:
    """token_embd, output_norm and (untied models) output."""
    m.add("token_embd.weight", (n_embd, m.n_vocab), embd_type)
    m.add("output_norm.weight", (n_embd,))
    if output_type is not None:
        m.add("output.weight", (n_embd, m.n_vocab), output_type)


def attention(m: Model, i: int, n_embd: int, n_q: int, n_k: int, n_v: int, n_out_in: int, qt: Q, vt: Q | None = None,
              bias: bool = False) -> None:
    m.add(f"blk.{i}.attn_q.weight", (n_embd, n_q), qt)
    m.add(f"blk.{i}.attn_k.weight", (n_embd, n_k), qt)
    m.add(f"blk.{i}.attn_v.weight", (n_embd, n_v), vt or qt)
    if bias:
        m.add(f"blk.{i}.attn_q.bias", (n_q,))
        m.add(f"blk.{i}.attn_k.bias", (n_k,))
        m.add(f"blk.{i}.attn_v.bias", (n_v,))
    m.add(f"blk.{i}.attn_output.weight", (n_out_in, n_embd), qt)


def dense_ffn(m: Model, i: int, n_embd: int, n_ff: int, qt: Q, down_t: Q | None = None) -> None:
    m.add(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), qt)
    m.add(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), qt)
    m.add(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), down_t or qt)


def moe_ffn(m: Model, i: int, n_embd: int, n_ff_exp: int, n_expert: int, qt: Q) -> None:
    m.add(f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_expert))
    m.add(f"blk.{i}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), qt)
    m.add(f"blk.{i}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), qt)
    m.add(f"blk.{i}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), qt)


def shared_expert(m: Model, i: int, n_embd: int, n_ff_sh: int, qt: Q) -> None:
    m.add(f"blk.{i}.ffn_gate_shexp.weight", (n_embd, n_ff_sh), qt)
    m.add(f"blk.{i}.ffn_up_shexp.weight", (n_embd, n_ff_sh), qt)
    m.add(f"blk.{i}.ffn_down_shexp.weight", (n_ff_sh, n_embd), qt)


# --------------------------------------------------------------------------------------------------
# the families


def mamba2_meta(m: Model, *, DC: int, DS: int, NG: int, DI: int, NH: int) -> None:
    """The Mamba-2 keys every hybrid's converter writes: conv kernel, state size, group count, inner size and the
    head count as time_step_rank."""
    m.meta("add_ssm_conv_kernel", DC)
    m.meta("add_ssm_state_size", DS)
    m.meta("add_ssm_group_count", NG)
    m.meta("add_ssm_inner_size", DI)
    m.meta("add_ssm_time_step_rank", NH)


def mamba2_mixer(m: Model, i: int, *, E: int, DI: int, DS: int, NG: int, NH: int, DC: int) -> None:
    """A Mamba-2 mixer's tensors as the mamba2, granitehybrid, nemotron_h and falcon-h1 loaders create them
    (src/llama-model.cpp, src/models/*.cpp load_arch_tensors): in_proj = z, xBC and dt."""
    conv_dim = DI + 2 * NG * DS
    m.add(f"blk.{i}.ssm_in.weight", (E, DI + conv_dim + NH), Q.Q8_0)
    m.add(f"blk.{i}.ssm_conv1d.weight", (DC, conv_dim))
    m.add(f"blk.{i}.ssm_conv1d.bias", (conv_dim,))
    m.add(f"blk.{i}.ssm_dt.bias", (NH,))
    m.add(f"blk.{i}.ssm_a", (1, NH))
    m.add(f"blk.{i}.ssm_d", (1, NH))
    m.add(f"blk.{i}.ssm_norm.weight", (DI // NG, NG))
    m.add(f"blk.{i}.ssm_out.weight", (DI, E), Q.Q8_0)


def llama_tiny() -> Model:
    m = Model("llama-tiny", "llama", sweep.FAMILIES["llama-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 2, 512, 4, 2, 64
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, rope_dims=D, rope_base=500000.0)
    m.meta("add_vocab_size", m.n_vocab)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_0, Q.Q8_0)
    return m


def llama_wide() -> Model:
    """Llama-3-8B's shape (n_embd 4096, 32/8 heads, n_ff 14336, vocab 128256) with 2 layers, in a
    Q4_K_M-like mix, so that the compute buffer (logits, KQ, FFN terms) is at real scale."""
    m = Model("llama-wide", "llama", sweep.FAMILIES["llama-wide"], n_vocab=128256,
              file_type=15)
    E, L, F, H, HKV, D = 4096, 2, 14336, 32, 8, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, rope_dims=D, rope_base=500000.0, rms_eps=1e-5)
    m.meta("add_vocab_size", m.n_vocab)
    embeddings(m, E, embd_type=Q.Q4_K, output_type=Q.Q6_K)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q4_K, vt=Q.Q6_K)
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_K, Q.Q6_K)
    return m


def qwen3_tiny() -> Model:
    """Qwen3: explicit head size (128) larger than n_embd / n_head (64), Q/K norms, tied embeddings."""
    m = Model("qwen3-tiny", "qwen3", sweep.FAMILIES["qwen3-tiny"],
              n_vocab=1000)
    E, L, F, H, HKV, D = 256, 2, 512, 4, 2, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=1000000.0)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=None)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.attn_q_norm.weight", (D,))
        m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_0)
    return m


def gemma3_tiny() -> Model:
    """Gemma 3: sliding window 512 on 5 of every 6 layers (the pattern is not written, as in converted
    files: llama.cpp defaults it to 6), head size 128, tied embeddings."""
    m = Model("gemma3-tiny", "gemma3", sweep.FAMILIES["gemma3-tiny"],
              n_vocab=1000)
    E, L, F, H, HKV, D = 256, 8, 512, 4, 2, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=1000000.0)
    m.meta("add_sliding_window", 512)
    m.meta("add_rope_freq_base_swa", 10000.0)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=None)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.post_attention_norm.weight", (E,))
        m.add(f"blk.{i}.attn_q_norm.weight", (D,))
        m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_0)
        m.add(f"blk.{i}.post_ffw_norm.weight", (E,))
    return m


def gpt_oss_tiny() -> Model:
    """gpt-oss: sliding window 128 on alternate layers (pattern 2, not written, as in converted files),
    attention sinks, biases, MoE with MXFP4 experts (as the published GGUFs ship them)."""
    m = Model("gpt-oss-tiny", "gpt-oss", sweep.FAMILIES["gpt-oss-tiny"],
              n_vocab=1000, file_type=38)
    E, L, H, HKV, D, NE, NU, FE = 256, 4, 8, 2, 64, 4, 2, 256
    common(m, n_embd=E, n_layer=L, n_ff=0, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=150000.0, rms_eps=1e-5)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_sliding_window", 128)
    m.meta("add_expert_feed_forward_length", FE)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        m.add(f"blk.{i}.post_attention_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0, bias=True)
        m.add(f"blk.{i}.attn_sinks.weight", (H,))
        m.add(f"blk.{i}.attn_output.bias", (E,))
        moe_ffn(m, i, E, FE, NE, Q.MXFP4)
        m.add(f"blk.{i}.ffn_gate_inp.bias", (NE,))
        m.add(f"blk.{i}.ffn_gate_exps.bias", (FE, NE))
        m.add(f"blk.{i}.ffn_up_exps.bias", (FE, NE))
        m.add(f"blk.{i}.ffn_down_exps.bias", (E, NE))
    return m


def _deepseek_mla(m: Model, indexer: tuple[int, int, int] | None) -> Model:
    """DeepSeek-V3-style MLA (q_lora_rank > 0, kv_lora_rank 128, rope 32) and MoE: one leading dense block, then
    experts with a shared one; with `indexer` (head count, key length, top-k) the DSA lightning indexer of every
    layer as deepseek32 adds it."""
    E, L, F, H = 256, 3, 512, 4
    KV_LORA, Q_LORA, ROPE, NOPE, VHEAD = 128, 128, 32, 64, 64
    NE, NU, NS, FE = 4, 2, 1, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=1, key_length=KV_LORA + ROPE, value_length=KV_LORA,
           rope_dims=ROPE, rope_base=10000.0)
    m.meta("add_leading_dense_block_count", 1)
    m.meta("add_vocab_size", m.n_vocab)
    m.meta("add_q_lora_rank", Q_LORA)
    m.meta("add_kv_lora_rank", KV_LORA)
    m.meta("add_key_length_mla", NOPE + ROPE)
    m.meta("add_value_length_mla", VHEAD)
    m.meta("add_expert_feed_forward_length", FE)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_shared_count", NS)
    m.meta("add_expert_weights_scale", 2.5)
    m.meta("add_expert_weights_norm", True)
    m.meta("add_expert_gating_func", gguf.ExpertGatingFuncType.SIGMOID)
    if indexer:
        m.meta("add_indexer_head_count", indexer[0])
        m.meta("add_indexer_key_length", indexer[1])
        m.meta("add_indexer_top_k", indexer[2])
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        m.add(f"blk.{i}.attn_q_a_norm.weight", (Q_LORA,))
        m.add(f"blk.{i}.attn_kv_a_norm.weight", (KV_LORA,))
        m.add(f"blk.{i}.attn_q_a.weight", (E, Q_LORA), Q.Q8_0)
        m.add(f"blk.{i}.attn_q_b.weight", (Q_LORA, H * (NOPE + ROPE)), Q.Q8_0)
        m.add(f"blk.{i}.attn_kv_a_mqa.weight", (E, KV_LORA + ROPE), Q.Q8_0)
        m.add(f"blk.{i}.attn_k_b.weight", (NOPE, KV_LORA, H), Q.Q8_0)
        m.add(f"blk.{i}.attn_v_b.weight", (KV_LORA, VHEAD, H), Q.Q8_0)
        m.add(f"blk.{i}.attn_output.weight", (H * VHEAD, E), Q.Q8_0)
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        if indexer:
            IH, ID, _ = indexer
            m.add(f"blk.{i}.indexer.k_norm.weight", (ID,))
            m.add(f"blk.{i}.indexer.k_norm.bias", (ID,))
            m.add(f"blk.{i}.indexer.proj.weight", (E, IH))
            m.add(f"blk.{i}.indexer.attn_k.weight", (E, ID), Q.Q8_0)
            m.add(f"blk.{i}.indexer.attn_q_b.weight", (Q_LORA, IH * ID), Q.Q8_0)
        if i < 1:
            dense_ffn(m, i, E, F, Q.Q4_0)
        else:
            moe_ffn(m, i, E, FE, NE, Q.Q4_0)
            m.add(f"blk.{i}.exp_probs_b.bias", (NE,))
            shared_expert(m, i, E, FE * NS, Q.Q8_0)
    return m


def deepseek2_tiny() -> Model:
    """DeepSeek-V3-style MLA: the cache holds one latent row of kv_lora_rank + n_rot = 160 per token and no V."""
    return _deepseek_mla(Model("deepseek2-tiny", "deepseek2", sweep.FAMILIES["deepseek2-tiny"], n_vocab=1000), None)


def deepseek32_tiny() -> Model:
    """DeepSeek-V3.2 (deepseek32): deepseek2-tiny's MLA and MoE plus the DSA lightning indexer of every layer
    (src/models/deepseek32.cpp load_arch_tensors: indexer.k_norm weight and bias, indexer.proj, indexer.attn_k,
    indexer.attn_q_b; load_arch_hparams: attention.indexer.head_count / key_length / top_k required), whose keys
    llama-kv-cache-dsa.cpp caches in a second cache of one head of key_length."""
    m = Model("deepseek32-tiny", "deepseek32", sweep.FAMILIES["deepseek32-tiny"], n_vocab=1000)
    return _deepseek_mla(m, (4, 64, 256))


def qwen3moe_tiny() -> Model:
    m = Model("qwen3moe-tiny", "qwen3moe", sweep.FAMILIES["qwen3moe-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D, NE, NU, FE = 256, 2, 768, 4, 2, 128, 8, 2, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=1000000.0)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_feed_forward_length", FE)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.attn_q_norm.weight", (D,))
        m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        moe_ffn(m, i, E, FE, NE, Q.Q4_0)
    return m


def mamba2_tiny() -> Model:
    """Mamba-2: no attention; recurrent state of (d_conv-1)·(d_inner + 2·n_group·d_state) conv values
    and d_state·d_inner SSM values per layer and sequence (f32)."""
    m = Model("mamba2-tiny", "mamba2", sweep.FAMILIES["mamba2-tiny"], n_vocab=1000)
    E, L, DI, DS, NG, DC, HD = 256, 2, 512, 64, 2, 4, 64
    NH = DI // HD
    m.meta("add_context_length", 1 << 20)
    m.meta("add_embedding_length", E)
    m.meta("add_feed_forward_length", 0)
    m.meta("add_head_count", 0)
    m.meta("add_block_count", L)
    m.meta("add_ssm_conv_kernel", DC)
    m.meta("add_ssm_inner_size", DI)
    m.meta("add_ssm_state_size", DS)
    m.meta("add_ssm_time_step_rank", NH)
    m.meta("add_ssm_group_count", NG)
    m.meta("add_layer_norm_rms_eps", 1e-5)
    conv_dim = DI + 2 * NG * DS
    d_in_proj = DI + conv_dim + NH
    embeddings(m, E, embd_type=Q.Q8_0, output_type=None)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        m.add(f"blk.{i}.ssm_in.weight", (E, d_in_proj), Q.Q8_0)
        m.add(f"blk.{i}.ssm_conv1d.weight", (DC, conv_dim))
        m.add(f"blk.{i}.ssm_conv1d.bias", (conv_dim,))
        m.add(f"blk.{i}.ssm_dt.bias", (NH,))
        m.add(f"blk.{i}.ssm_a", (1, NH))
        m.add(f"blk.{i}.ssm_d", (1, NH))
        m.add(f"blk.{i}.ssm_norm.weight", (DI // NG, NG))
        m.add(f"blk.{i}.ssm_out.weight", (DI, E), Q.Q8_0)
    return m


def qwen3next_tiny() -> Model:
    """Qwen3-Next: 3 of every 4 layers are gated-delta-net (recurrent) layers, the 4th full attention
    with a gated Q projection; MoE with a shared expert in every layer."""
    m = Model("qwen3next-tiny", "qwen3next", sweep.FAMILIES["qwen3next-tiny"],
              n_vocab=1000)
    E, L, F, H, HKV, D = 256, 4, 512, 4, 2, 128
    DC, DS, NKH, NVH = 4, 64, 2, 4  # conv kernel, head dim (k = v), key heads, value heads
    NE, NU, FE, FS = 4, 2, 128, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_dims=D // 4, rope_base=10000000.0)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_feed_forward_length", FE)
    m.meta("add_expert_shared_feed_forward_length", FS)
    m.meta("add_ssm_conv_kernel", DC)
    m.meta("add_ssm_state_size", DS)
    m.meta("add_ssm_group_count", NKH)
    m.meta("add_ssm_time_step_rank", NVH)
    m.meta("add_ssm_inner_size", DS * NVH)
    m.meta("add_full_attention_interval", 4)
    key_dim, value_dim = DS * NKH, DS * NVH
    conv_dim = 2 * key_dim + value_dim
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        m.add(f"blk.{i}.post_attention_norm.weight", (E,))
        if (i + 1) % 4 == 0:
            attention(m, i, E, H * D * 2, HKV * D, HKV * D, H * D, Q.Q8_0)
            m.add(f"blk.{i}.attn_q_norm.weight", (D,))
            m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        else:
            m.add(f"blk.{i}.attn_qkv.weight", (E, conv_dim), Q.Q8_0)
            m.add(f"blk.{i}.attn_gate.weight", (E, value_dim), Q.Q8_0)
            m.add(f"blk.{i}.ssm_conv1d.weight", (DC, conv_dim))
            m.add(f"blk.{i}.ssm_dt.bias", (NVH,))
            m.add(f"blk.{i}.ssm_a", (NVH,))
            m.add(f"blk.{i}.ssm_ba.weight", (E, 2 * NVH), Q.Q8_0)
            m.add(f"blk.{i}.ssm_norm.weight", (DS,))
            m.add(f"blk.{i}.ssm_out.weight", (value_dim, E), Q.Q8_0)
        moe_ffn(m, i, E, FE, NE, Q.Q4_0)
        m.add(f"blk.{i}.ffn_gate_inp_shexp.weight", (E,))
        shared_expert(m, i, E, FS, Q.Q8_0)
    return m


def granitehybrid_tiny() -> Model:
    """Granite 4.0-H (dense): Mamba-2 layers and attention layers chosen by a per-layer head_count_kv
    array (0 = recurrent), as the converter writes it."""
    m = Model("granitehybrid-tiny", "granitehybrid", sweep.FAMILIES["granitehybrid-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 4, 512, 4, 2, 64
    DI, DS, NG, DC, HD = 512, 64, 1, 4, 64
    NH = DI // HD
    attn_layers = {3}
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=[HKV if i in attn_layers else 0 for i in range(L)],
           rope_base=10000.0, ctx_train=1 << 20)
    mamba2_meta(m, DC=DC, DS=DS, NG=NG, DI=DI, NH=NH)
    m.meta("add_rope_scaling_finetuned", False)
    m.meta("add_residual_scale", 0.22)
    m.meta("add_embedding_scale", 12.0)
    m.meta("add_logit_scale", 4.0)
    m.meta("add_attention_scale", 0.0078125)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=None)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        if i in attn_layers:
            attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        else:
            mamba2_mixer(m, i, E=E, DI=DI, DS=DS, NG=NG, NH=NH, DC=DC)
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_0)
    return m


def glm4moe_tiny() -> Model:
    """GLM-4.5: full attention with q/k/v biases, explicit head size 128 > n_embd / n_head, partial RoPE (half
    the head), QK norms (GLM-4.5, not 4.5-Air), one leading dense block, then MoE with a shared expert and a
    sigmoid router with exp_probs_b, untied; block_count counts the NextN/MTP block (convert_hf_to_gguf.py
    Glm4MoeModel: num_hidden_layers + num_nextn_predict_layers), whose tensors llama.cpp skips (TENSOR_SKIP)
    but whose layer still gets a KV cache (src/llama-kv-cache.cpp loops over n_layer_all)."""
    m = Model("glm4moe-tiny", "glm4moe", sweep.FAMILIES["glm4moe-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 4, 512, 4, 2, 128  # L: 3 layers + 1 NextN block
    NE, NU, NS, FE, NEXTN = 4, 2, 1, 128, 1
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_dims=D // 2, rope_base=1000000.0, rms_eps=1e-5)
    m.meta("add_vocab_size", m.n_vocab)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_feed_forward_length", FE)
    m.meta("add_expert_shared_count", NS)
    m.meta("add_leading_dense_block_count", 1)
    m.meta("add_expert_gating_func", gguf.ExpertGatingFuncType.SIGMOID)
    m.meta("add_expert_weights_scale", 2.5)
    m.meta("add_expert_weights_norm", True)
    m.meta("add_nextn_predict_layers", NEXTN)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0, bias=True)
        m.add(f"blk.{i}.attn_q_norm.weight", (D,))
        m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        m.add(f"blk.{i}.post_attention_norm.weight", (E,))
        if i < 1:
            dense_ffn(m, i, E, F, Q.Q4_0)
        else:
            moe_ffn(m, i, E, FE, NE, Q.Q4_0)
            m.add(f"blk.{i}.exp_probs_b.bias", (NE,))
            shared_expert(m, i, E, FE * NS, Q.Q8_0)
        if i >= L - NEXTN:
            m.add(f"blk.{i}.nextn.eh_proj.weight", (2 * E, E), Q.Q8_0)
            m.add(f"blk.{i}.nextn.enorm.weight", (E,))
            m.add(f"blk.{i}.nextn.hnorm.weight", (E,))
            m.add(f"blk.{i}.nextn.shared_head_norm.weight", (E,))
    return m


def llama4_tiny() -> Model:
    """Llama 4 Maverick's layout: interleave_moe_layer_step 2, so layer i is MoE iff (i + 1) % 2 == 0 (128 experts
    and a shared expert of the routed width there, a dense FFN of feed_forward_length elsewhere; src/models/llama4.cpp
    load_arch_tensors); chunked attention, window 8192 fixed by b10454 (load_arch_hparams sets n_swa = 8192 unless
    attention.sliding_window is 0) in 3 of every 4 layers; untied."""
    m = Model("llama4-tiny", "llama4", sweep.FAMILIES["llama4-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D, NE, NU, FE = 256, 4, 512, 4, 2, 64, 4, 1, 128
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, rope_base=500000.0, rms_eps=1e-5)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_feed_forward_length", FE)
    m.meta("add_interleave_moe_layer_step", 2)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        if (i + 1) % 2 == 0:
            moe_ffn(m, i, E, FE, NE, Q.Q4_0)
            shared_expert(m, i, E, FE, Q.Q8_0)
        else:
            dense_ffn(m, i, E, F, Q.Q4_0)
    return m


def gemma3n_tiny() -> Model:
    """Gemma 3n: 22 layers so that layers 20 and 21 reuse the caches of layers 18 and 19 (llama.cpp hard-codes
    n_layer_kv_from_start = 20; the converter writes shared_kv_layers = 2 for this shape), sliding window 512 on
    4 of every 5 layers (the converter writes the pattern as a bool array, which llama.cpp's scalar read ignores:
    period 5), AltUp (4 inputs), Laurel (rank 64) and per-layer embeddings of 256 per layer, tied."""
    m = Model("gemma3n-tiny", "gemma3n", sweep.FAMILIES["gemma3n-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 22, 512, 4, 2, 128
    ALTUP, LAUREL, PLE = 4, 64, 256  # llama-hparams.h defaults n_altup, laurel_rank, n_embd_altup
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=1000000.0, ctx_train=32768)
    m.meta("add_sliding_window", 512)
    m.meta("add_rope_freq_base_swa", 10000.0)
    m.meta("add_altup_active_idx", 0)
    m.meta("add_altup_num_inputs", ALTUP)
    m.meta("add_embedding_length_per_layer_input", PLE)
    m.meta("add_shared_kv_layers", L - 20)
    m.meta("add_activation_sparsity_scale", [1.6448536] * 10 + [0.0] * (L - 10))
    m.meta("add_sliding_window_pattern", [i % 5 < 4 for i in range(L)])
    m.add("token_embd.weight", (E, m.n_vocab), Q.Q8_0)
    m.add("altup_proj.weight", (E, E, ALTUP - 1), Q.Q8_0)
    m.add("altup_unembd_proj.weight", (E, E, ALTUP - 1), Q.Q8_0)
    m.add("per_layer_token_embd.weight", (PLE * L, m.n_vocab), Q.Q8_0)
    m.add("per_layer_model_proj.weight", (E, PLE * L), Q.Q8_0)
    m.add("per_layer_proj_norm.weight", (PLE,))
    m.add("output_norm.weight", (E,))
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.attn_q_norm.weight", (D,))
        m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        m.add(f"blk.{i}.post_attention_norm.weight", (E,))
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_0)
        m.add(f"blk.{i}.post_ffw_norm.weight", (E,))
        m.add(f"blk.{i}.inp_gate.weight", (E, PLE), Q.Q8_0)
        m.add(f"blk.{i}.proj.weight", (PLE, E), Q.Q8_0)
        m.add(f"blk.{i}.post_norm.weight", (E,))
        m.add(f"blk.{i}.altup_correct_coef.weight", (ALTUP, ALTUP))
        m.add(f"blk.{i}.altup_correct_scale.weight", (E,))
        m.add(f"blk.{i}.altup_predict_coef.weight", (ALTUP, ALTUP * ALTUP))
        m.add(f"blk.{i}.altup_router.weight", (E, ALTUP))
        m.add(f"blk.{i}.altup_router_norm.weight", (E,))
        m.add(f"blk.{i}.laurel_l.weight", (E, LAUREL), Q.Q8_0)
        m.add(f"blk.{i}.laurel_r.weight", (LAUREL, E), Q.Q8_0)
        m.add(f"blk.{i}.laurel_post_norm.weight", (E,))
    return m


# --- Qwen3.5 / 3.6 (qwen35, qwen35moe): gated delta-net hybrids with a trailing MTP block ----------------------


def _qwen35_common(m: Model, *, E: int, L: int, F: int, H: int, HKV: int, D: int, DC: int, DS: int, NKH: int,
                   NVH: int, NEXTN: int) -> None:
    """Qwen3.5's metadata (conversion/qwen.py Qwen3_5TextModel): block_count counts the MTP block(s) too
    (_QwenMtpMixin: num_hidden_layers + mtp_num_hidden_layers), nextn_predict_layers says how many; MRoPE
    sections are always written."""
    common(m, n_embd=E, n_layer=L + NEXTN, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_dims=D // 4, rope_base=10000000.0, ctx_train=262144)
    m.meta("add_rope_dimension_sections", [11, 11, 10, 0])
    m.meta("add_ssm_conv_kernel", DC)
    m.meta("add_ssm_state_size", DS)
    m.meta("add_ssm_group_count", NKH)
    m.meta("add_ssm_time_step_rank", NVH)
    m.meta("add_ssm_inner_size", DS * NVH)
    m.meta("add_full_attention_interval", 4)
    m.meta("add_nextn_predict_layers", NEXTN)


def _qwen35_mixer(m: Model, i: int, *, E: int, H: int, HKV: int, D: int, DC: int, DS: int, NKH: int, NVH: int,
                  attn: bool) -> None:
    """src/models/qwen35.cpp load_block_trunk: a gated full-attention layer (wq 2·n_head·head wide) or a gated
    delta-net layer (separate ssm_alpha / ssm_beta, unlike qwen3next's fused ssm_ba)."""
    m.add(f"blk.{i}.attn_norm.weight", (E,))
    m.add(f"blk.{i}.post_attention_norm.weight", (E,))
    if attn:
        attention(m, i, E, H * D * 2, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.attn_q_norm.weight", (D,))
        m.add(f"blk.{i}.attn_k_norm.weight", (D,))
        return
    key_dim, value_dim = DS * NKH, DS * NVH
    conv_dim = 2 * key_dim + value_dim
    m.add(f"blk.{i}.attn_qkv.weight", (E, conv_dim), Q.Q8_0)
    m.add(f"blk.{i}.attn_gate.weight", (E, value_dim), Q.Q8_0)
    m.add(f"blk.{i}.ssm_conv1d.weight", (DC, conv_dim))
    m.add(f"blk.{i}.ssm_dt.bias", (NVH,))
    m.add(f"blk.{i}.ssm_a", (NVH,))
    m.add(f"blk.{i}.ssm_beta.weight", (E, NVH), Q.F32)
    m.add(f"blk.{i}.ssm_alpha.weight", (E, NVH), Q.F32)
    m.add(f"blk.{i}.ssm_norm.weight", (DS,))
    m.add(f"blk.{i}.ssm_out.weight", (value_dim, E), Q.Q8_0)


def _qwen35_nextn(m: Model, i: int, E: int) -> None:
    m.add(f"blk.{i}.nextn.eh_proj.weight", (2 * E, E), Q.Q8_0)
    m.add(f"blk.{i}.nextn.enorm.weight", (E,))
    m.add(f"blk.{i}.nextn.hnorm.weight", (E,))
    m.add(f"blk.{i}.nextn.shared_head_norm.weight", (E,))


def qwen35_tiny() -> Model:
    """Qwen3.5 dense: layers 0-2 and 4-6 gated delta-net, 3 and 7 attention (interval 4), dense FFN, V heads
    (4) > K heads (2), and one MTP block (blk.8) that b10454 neither loads (load_mtp false: TENSOR_SKIP) nor
    caches (create_memory's hybrid filters keep il < n_layer())."""
    m = Model("qwen35-tiny", "qwen35", sweep.FAMILIES["qwen35-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 8, 512, 4, 2, 128
    DC, DS, NKH, NVH, NEXTN = 4, 64, 2, 4, 1
    _qwen35_common(m, E=E, L=L, F=F, H=H, HKV=HKV, D=D, DC=DC, DS=DS, NKH=NKH, NVH=NVH, NEXTN=NEXTN)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=None)
    for i in range(L + NEXTN):
        _qwen35_mixer(m, i, E=E, H=H, HKV=HKV, D=D, DC=DC, DS=DS, NKH=NKH, NVH=NVH, attn=i >= L or (i + 1) % 4 == 0)
        dense_ffn(m, i, E, F, Q.Q4_0)
        if i >= L:
            _qwen35_nextn(m, i, E)
    return m


def qwen35moe_tiny() -> Model:
    """Qwen3.5 MoE: qwen35's mixers with routed experts and a sigmoid-gated shared expert in every layer, one
    MTP block (skipped and uncached as qwen35's)."""
    m = Model("qwen35moe-tiny", "qwen35moe", sweep.FAMILIES["qwen35moe-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 4, 512, 4, 2, 128
    DC, DS, NKH, NVH, NEXTN = 4, 64, 2, 4, 1
    NE, NU, FE, FS = 4, 2, 128, 128
    _qwen35_common(m, E=E, L=L, F=F, H=H, HKV=HKV, D=D, DC=DC, DS=DS, NKH=NKH, NVH=NVH, NEXTN=NEXTN)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_feed_forward_length", FE)
    m.meta("add_expert_shared_feed_forward_length", FS)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L + NEXTN):
        _qwen35_mixer(m, i, E=E, H=H, HKV=HKV, D=D, DC=DC, DS=DS, NKH=NKH, NVH=NVH, attn=i >= L or (i + 1) % 4 == 0)
        moe_ffn(m, i, E, FE, NE, Q.Q4_0)
        m.add(f"blk.{i}.ffn_gate_inp_shexp.weight", (E,))
        shared_expert(m, i, E, FS, Q.Q8_0)
        if i >= L:
            _qwen35_nextn(m, i, E)
    return m


# --- Nemotron-H (nemotron_h): Mamba-2, attention and FFN-only layers -----------------------------------------------


def nemotron_h_tiny() -> Model:
    """Nemotron-H (dense): a hybrid_override_pattern 'M-M*-M-' of Mamba-2 (M), attention (*) and FFN-only (-)
    layers, as conversion/nemotron.py writes it: per-layer head_count_kv (n_kv on '*' only) and
    feed_forward_length (n_ff on '-' only); relu^2 FFN with up/down only; d_inner = mamba_num_heads x
    mamba_head_dim."""
    m = Model("nemotron_h-tiny", "nemotron_h", sweep.FAMILIES["nemotron_h-tiny"], n_vocab=1000)
    E, F, H, HKV, D = 256, 512, 4, 2, 64
    NH, HD, DS, NG, DC = 8, 64, 64, 2, 4
    DI = NH * HD
    pattern = "M-M*-M-"
    L = len(pattern)
    common(m, n_embd=E, n_layer=L, n_ff=[F if c == "-" else 0 for c in pattern], n_head=H,
           n_head_kv=[HKV if c == "*" else 0 for c in pattern], key_length=D, value_length=D, rope_base=None,
           rms_eps=1e-5, ctx_train=1 << 17)
    m.meta("add_layer_norm_eps", 1e-5)
    mamba2_meta(m, DC=DC, DS=DS, NG=NG, DI=DI, NH=NH)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i, c in enumerate(pattern):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        if c == "M":
            mamba2_mixer(m, i, E=E, DI=DI, DS=DS, NG=NG, NH=NH, DC=DC)
        elif c == "*":
            attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        else:
            m.add(f"blk.{i}.ffn_up.weight", (E, F), Q.Q4_0)
            m.add(f"blk.{i}.ffn_down.weight", (F, E), Q.Q8_0)
    return m


# --- Nemotron 3 (nemotron_h_moe): Mamba-2, attention and MoE layers ------------------------------------------------


def nemotron_h_moe_tiny() -> Model:
    """Nemotron-H MoE (Nemotron 3): the pattern 'MEM*EME' of Mamba-2 (M), attention (*) and MoE (E) layers, as
    conversion/nemotron.py writes it for is_moe: feed_forward_length per layer (moe_intermediate_size on 'E', else 0),
    expert_feed_forward_length, expert_shared_feed_forward_length, expert_count / used / shared_count / group_count;
    each MoE layer has a router with exp_probs_b, up/down experts (relu^2, no gate) and an up/down shared expert
    (src/models/nemotron-h.cpp load_arch_tensors, n_expert != 0)."""
    m = Model("nemotron_h_moe-tiny", "nemotron_h_moe", sweep.FAMILIES["nemotron_h_moe-tiny"], n_vocab=1000)
    E, H, HKV, D = 256, 4, 2, 64
    NH, HD, DS, NG, DC = 8, 64, 64, 2, 4
    NE, NU, FE, FS = 8, 2, 128, 256
    DI = NH * HD
    pattern = "MEM*EME"
    L = len(pattern)
    common(m, n_embd=E, n_layer=L, n_ff=[FE if c == "E" else 0 for c in pattern], n_head=H,
           n_head_kv=[HKV if c == "*" else 0 for c in pattern], key_length=D, value_length=D, rope_base=None,
           rms_eps=1e-5, ctx_train=1 << 18)
    m.meta("add_layer_norm_eps", 1e-5)
    mamba2_meta(m, DC=DC, DS=DS, NG=NG, DI=DI, NH=NH)
    m.meta("add_expert_count", NE)
    m.meta("add_expert_used_count", NU)
    m.meta("add_expert_feed_forward_length", FE)
    m.meta("add_expert_shared_feed_forward_length", FS)
    m.meta("add_expert_shared_count", 1)
    m.meta("add_expert_weights_norm", True)
    m.meta("add_expert_weights_scale", 2.5)
    m.meta("add_expert_group_count", 1)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i, c in enumerate(pattern):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        if c == "M":
            mamba2_mixer(m, i, E=E, DI=DI, DS=DS, NG=NG, NH=NH, DC=DC)
        elif c == "*":
            attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        else:
            m.add(f"blk.{i}.ffn_gate_inp.weight", (E, NE))
            m.add(f"blk.{i}.exp_probs_b.bias", (NE,))
            m.add(f"blk.{i}.ffn_up_exps.weight", (E, FE, NE), Q.Q4_0)
            m.add(f"blk.{i}.ffn_down_exps.weight", (FE, E, NE), Q.Q8_0)
            m.add(f"blk.{i}.ffn_up_shexp.weight", (E, FS), Q.Q8_0)
            m.add(f"blk.{i}.ffn_down_shexp.weight", (FS, E), Q.Q8_0)
    return m


# --- Falcon-H1 (falcon-h1): attention and Mamba-2 side by side in every layer ---------------------------------------


def falcon_h1_tiny() -> Model:
    """Falcon-H1: every layer has an attention block and a Mamba-2 mixer in parallel, then a dense FFN
    (src/models/falcon-h1.cpp load_arch_tensors); conversion/falcon_h1.py writes scalar head counts, key_length,
    ssm.inner_size = mamba_d_ssm (not expand x n_embd) and ssm.time_step_rank = d_inner / mamba_d_head."""
    m = Model("falcon-h1-tiny", "falcon-h1", sweep.FAMILIES["falcon-h1-tiny"], n_vocab=1000)
    E, L, F, H, HKV, D = 256, 3, 512, 4, 2, 64
    DI, DS, NG, DC, HD = 384, 64, 1, 4, 64
    NH = DI // HD
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=100000.0, rms_eps=1e-5, ctx_train=1 << 17)
    m.meta("add_vocab_size", m.n_vocab)
    mamba2_meta(m, DC=DC, DS=DS, NG=NG, DI=DI, NH=NH)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=Q.Q8_0)
    for i in range(L):
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        mamba2_mixer(m, i, E=E, DI=DI, DS=DS, NG=NG, NH=NH, DC=DC)
        attention(m, i, E, H * D, HKV * D, HKV * D, H * D, Q.Q8_0)
        m.add(f"blk.{i}.ffn_norm", (E,))  # load_arch_tensors asks for tn(LLM_TENSOR_FFN_NORM, i): no .weight suffix
        dense_ffn(m, i, E, F, Q.Q4_0)
    return m


# --- Gemma 4 (gemma4): per-layer sliding pattern and head sizes, trailing layers reuse earlier caches -------------


def _gemma4(m: Model, ple: int) -> Model:
    """Gemma 4 (dense): sliding_window_pattern written per layer (sliding, sliding, sliding, full, sliding, full),
    head size 128 on full and 64 on sliding layers (key_length_swa), shared_kv_layers 2 (src/models/gemma4.cpp:
    n_layer_kv_from_start = n_layer - 2; layer 4 reuses layer 2's sliding cache, layer 5 layer 3's full one, as
    create_memory's reuse callback says); with `ple` > 0 the per-layer input embeddings of E2B/E4B
    (embedding_length_per_layer_input; load_arch_tensors: per_layer_token_embd, per_layer_model_proj,
    per_layer_proj_norm, and inp_gate, proj, post_norm in every layer)."""
    E, F, H, HKV, D, DSWA = 256, 512, 4, 2, 128, 64
    pattern = [True, True, True, False, True, False]
    L, SHARED = len(pattern), 2
    common(m, n_embd=E, n_layer=L, n_ff=F, n_head=H, n_head_kv=HKV, key_length=D, value_length=D,
           rope_base=1000000.0)
    m.meta("add_key_length_swa", DSWA)
    m.meta("add_value_length_swa", DSWA)
    m.meta("add_sliding_window", 256)
    m.meta("add_sliding_window_pattern", pattern)
    m.meta("add_rope_freq_base_swa", 10000.0)
    m.meta("add_shared_kv_layers", SHARED)
    m.meta("add_embedding_length_per_layer_input", ple)
    embeddings(m, E, embd_type=Q.Q8_0, output_type=None)
    if ple:
        m.add("per_layer_token_embd.weight", (ple * L, m.n_vocab), Q.Q8_0)
        m.add("per_layer_model_proj.weight", (E, ple * L), Q.Q8_0)
        m.add("per_layer_proj_norm.weight", (ple,))
    m.add("rope_freqs.weight", (D // 2,))
    for i, swa in enumerate(pattern):
        hd = DSWA if swa else D
        m.add(f"blk.{i}.attn_norm.weight", (E,))
        m.add(f"blk.{i}.attn_q.weight", (E, H * hd), Q.Q8_0)
        if i < L - SHARED:
            m.add(f"blk.{i}.attn_k.weight", (E, HKV * hd), Q.Q8_0)
            m.add(f"blk.{i}.attn_v.weight", (E, HKV * hd), Q.Q8_0)
            m.add(f"blk.{i}.attn_k_norm.weight", (hd,))
        m.add(f"blk.{i}.attn_output.weight", (H * hd, E), Q.Q8_0)
        m.add(f"blk.{i}.attn_q_norm.weight", (hd,))
        m.add(f"blk.{i}.post_attention_norm.weight", (E,))
        m.add(f"blk.{i}.ffn_norm.weight", (E,))
        dense_ffn(m, i, E, F, Q.Q4_0)
        m.add(f"blk.{i}.post_ffw_norm.weight", (E,))
        if ple:
            m.add(f"blk.{i}.inp_gate.weight", (E, ple), Q.Q8_0)
            m.add(f"blk.{i}.proj.weight", (ple, E), Q.Q8_0)
            m.add(f"blk.{i}.post_norm.weight", (E,))
    return m


def gemma4_tiny() -> Model:
    """Gemma 4 as the 26B-A4B and 31B have it: no per-layer input embeddings (embedding_length_per_layer_input 0)."""
    return _gemma4(Model("gemma4-tiny", "gemma4", sweep.FAMILIES["gemma4-tiny"], n_vocab=1000), 0)


def gemma4_e_tiny() -> Model:
    """Gemma 4 as E2B/E4B have it: per-layer input embeddings of 64 per layer."""
    return _gemma4(Model("gemma4-e-tiny", "gemma4", sweep.FAMILIES["gemma4-e-tiny"], n_vocab=1000), 64)


MODELS: dict[str, Callable[[], Model]] = {
    "llama-tiny": llama_tiny,
    "llama-wide": llama_wide,
    "qwen3-tiny": qwen3_tiny,
    "gemma3-tiny": gemma3_tiny,
    "gpt-oss-tiny": gpt_oss_tiny,
    "deepseek2-tiny": deepseek2_tiny,
    "qwen3moe-tiny": qwen3moe_tiny,
    "mamba2-tiny": mamba2_tiny,
    "qwen3next-tiny": qwen3next_tiny,
    "granitehybrid-tiny": granitehybrid_tiny,
    "glm4moe-tiny": glm4moe_tiny,
    "gemma3n-tiny": gemma3n_tiny,
    "qwen35-tiny": qwen35_tiny,
    "qwen35moe-tiny": qwen35moe_tiny,
    "nemotron_h-tiny": nemotron_h_tiny,
    "llama4-tiny": llama4_tiny,
    "nemotron_h_moe-tiny": nemotron_h_moe_tiny,
    "falcon-h1-tiny": falcon_h1_tiny,
    "gemma4-tiny": gemma4_tiny,
    "deepseek32-tiny": deepseek32_tiny,
    "gemma4-e-tiny": gemma4_e_tiny,
}

# Architectures kvplan still refuses (sweep.PENDING_FAMILIES): written only when named with --only.
PENDING: dict[str, Callable[[], Model]] = {}


# --------------------------------------------------------------------------------------------------
# writing


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """A minimal SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte tokens llama.cpp's
    SPM tokenizer needs (it looks up <0x0A> for the newline), then filler pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    i = 0
    while len(tokens) < n_vocab:
        tokens.append(f"\u2581t{i}")
        types.append(gguf.TokenType.NORMAL)
        i += 1
    tokens, types = tokens[:n_vocab], types[:n_vocab]
    scores = [0.0] * 3 + [0.0] * 256 + [-float(k) for k in range(n_vocab - 259)]
    return tokens, scores[:n_vocab], [int(t) for t in types]


def tensor_data(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(reversed(t.ne))  # numpy order
    n = int(np.prod(shape))
    if t.qtype == Q.F32:
        if n <= RANDOM_LIMIT:
            return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        return np.zeros(shape, dtype=np.float32)
    if t.qtype == Q.F16:
        if n <= RANDOM_LIMIT:
            return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
        return np.zeros(shape, dtype=np.float16)
    if t.qtype in GGUF_PY_QUANTIZES and n <= RANDOM_LIMIT:
        data = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
        return gguf.quants.quantize(data, t.qtype)
    byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, t.qtype)
    return np.zeros(byte_shape, dtype=np.uint8)


def spec_hash(m: Model) -> str:
    """Identifies a model's definition (and the writer's version), so that run.sh rewrites a file
    only when its definition changed."""
    text = repr((m.name, m.arch, m.n_vocab, m.kv, m.tensors, m.file_type, RANDOM_LIMIT, gguf.__version__
                 if hasattr(gguf, "__version__") else ""))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_model(m: Model, out_dir: Path) -> Path:
    path = out_dir / f"{m.name}.gguf"
    tmp = path.with_suffix(".gguf.tmp")
    seed = int.from_bytes(hashlib.sha256(m.name.encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(tmp), m.arch)
    w.add_name(m.name)
    w.add_description(f"kvplan validation model (synthetic, random weights): {m.description}")
    w.add_file_type(m.file_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for method, value in m.kv:
        getattr(w, method)(value)
    tokens, scores, types = vocabulary(m.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    for t in m.tensors:
        data = tensor_data(t, rng)
        if t.qtype in (Q.F32, Q.F16):
            w.add_tensor(t.name, data)
        else:
            w.add_tensor(t.name, data, raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "models")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--force", action="store_true", help="rewrite files that already exist")
    args = ap.parse_args(argv)
    if args.list:
        for name, fn in MODELS.items():
            print(f"{name:20s} {fn().description}")
        return 0
    known = {**MODELS, **PENDING}
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"make_models: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        m = known[name]()
        path = args.out / f"{name}.gguf"
        stamp = path.with_suffix(".gguf.spec")
        spec = spec_hash(m)
        if path.exists() and stamp.exists() and stamp.read_text().strip() == spec and not args.force:
            print(f"make_models: {path.name} is up to date")
            continue
        write_model(m, args.out)
        stamp.write_text(spec + "\n")
        print(f"make_models: wrote {path.name} ({path.stat().st_size / 2**20:.1f} MiB, {len(m.tensors)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
