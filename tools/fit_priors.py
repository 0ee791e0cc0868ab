#!/usr/bin/env python3
"""Fit kvplan's KV-cache quality prior to the published measurements.

    .venv/bin/python tools/fit_priors.py            # fit, write data/priors/{prior.yaml,fit_residuals.csv,fit_report.md}
    .venv/bin/python tools/fit_priors.py --check    # fit and compare with the committed files; exit 1 if they differ

Inputs
  data/priors/measurements.csv   one published measurement per row (source, engine, model, size, metric, ctx,
                                 K type, V type, rotation, value, baseline, rel_change, noise)
  data/tasks.yaml                the task factors T that accuracy metrics are mapped with
  data/weights/gguf_quality.yaml bits per weight of GGUF formats (the W factor) and the KLD <-> PPL pairs that
                                 check the KLD mapping rule

Outputs
  data/priors/prior.yaml         the fitted parameters (everything above the evidence marker is generated here;
                                 the hand-written evidence list below the marker is kept as it is)
  data/priors/fit_residuals.csv  every row: how it was mapped, the prediction, the residual, LOSO prediction
  data/priors/fit_report.md      the acceptance figures and the list of disagreements (docs/priors.md quotes it)

The model (the same formula as libplanner/src/priors/prior.cpp; docs/priors.md section 1):

  e       = eq_bits - bits_ref                       eq_bits: Gaussian-equivalent bits of the cache type (below)
  a_K     = a_k * exp(-beta_k * e_K) * (1 + r_norot * exp(-beta_norot * e_K) * S_R(N)   if K is not rotated)
  a_V     = a_v * exp(-beta_v * e_V)
  S_x(N)  = min(max(size_knee_b / N, 1)^sigma_x, size_clamp_high)     x = K, V, R: 1 at and above the knee, a power law below
  (fitted with a_v <= a_k and sigma_v <= sigma_k, so K never costs less than V at equal bits; beta_k = beta_v = ln 4
  is fixed, not fitted: to second order the loss is proportional to the rounding error's variance, which falls by
  4x per equivalent bit -- docs/priors.md section 1)
  g(c,a)  = (max(c, ctx_floor) / ctx_floor)^a
  alpha_K = min(alpha_k * (size_ref_b / N)^alpha_k_size, alpha_k_max)  if eq_bits_K <= low_bits, else 0
  alpha_V = alpha_v                                                     if eq_bits_V <= low_bits, else 0
  F_K     = family.k_low_bits_rot / _norot  if eq_bits_K <= family.k_low_bits_max, else 1
  F_all   = family.all_bits                 if K or V is quantized, else 1
  L_kv    = F_all * (F_K * S_K * a_K * g(ctx, alpha_K) + S_V * a_V * g(ctx, alpha_V))
  row     = T_task * W(bpw) * L_kv          (T = 1 for perplexity, KLD and NLL rows)

Dependencies: numpy, scipy, PyYAML (requirements-dev.txt).
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import yaml
from scipy import optimize, stats

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "data/priors/measurements.csv"
PRIOR_YAML = ROOT / "data/priors/prior.yaml"
RESIDUALS = ROOT / "data/priors/fit_residuals.csv"
REPORT = ROOT / "data/priors/fit_report.md"
TASKS = ROOT / "data/tasks.yaml"
GGUF_QUALITY = ROOT / "data/weights/gguf_quality.yaml"
EVIDENCE_MARKER = "  # ---- evidence: hand-written, kept as is by tools/fit_priors.py ----"

# =====================================================================================================
# 1. Cache types. eq_bits: the storage bits of a symmetric block-32 integer format (q4_0-style: 16 levels,
#    the block's signed maximum on level -8, one fp16 scale) whose rms rounding error on Gaussian data equals
#    this type's. q4_0 is 4.5 by construction, q8_0 8.5. Types whose quantizer kvplan cannot reproduce keep
#    their storage bits ("nominal"). rotation: "engine" = rotated when the engine rotates quantized caches
#    (llama.cpp >= PR #21038, ik_llama -khad, a row's own "rotation: yes"); "builtin" = rotation is part of the
#    format (ExLlamaV2/V3 Hadamard, TurboQuant codebooks; a row that says "rotation: no" measured a version
#    before the rotation was added); "robust" = outlier-robust by construction (per-element float exponent,
#    KIVI's per-channel keys): the unrotated term never applies. kvplan (C++) treats builtin and robust alike.
# =====================================================================================================


@dataclass
class TypeSpec:
    name: str
    engine: str
    bits: float  # storage bits per element, scales included
    quantizer: str  # key into QUANTIZERS, "" for unquantized, "nominal" for storage bits
    rotation: str = "engine"
    source: str = ""
    k_of: str = ""  # K role uses this type's eq_bits (exl2_q6: K 8-bit, V 4-bit)
    v_of: str = ""
    planned: bool = True  # kvplan offers or will offer it (False: only in measurements)
    defective: bool = False  # measured with a known implementation defect: an analog of itself only
    codebook_kind: str = ""  # when the quantizer's kind does not say it (KIVI: per-channel K)

    @property
    def codebook(self) -> str:
        """The rounding grid's kind (docs/priors.md 1.4): measurements of one kind never predict another's cells."""
        return self.codebook_kind or codebook_of(self.k_of or self.quantizer)

    @property
    def group(self) -> int:
        """Elements per scale (0: one scale per tensor, or unquantized)."""
        return GROUP.get(self.k_of or self.quantizer, 32) if (self.k_of or self.quantizer) else 0


def codebook_of(quantizer: str) -> str:
    if not quantizer:
        return "none"
    if quantizer == "lm4_narrow":
        return "lloyd_max_narrow"
    for prefix, kind in (("q8_0", "absmax"), ("sym", "absmax"), ("exl2_", "absmax"), ("exl3_", "absmax"),
                         ("minmax", "affine"), ("mlx", "affine"), ("iq4_nl", "nonuniform"), ("lm", "lloyd_max"),
                         ("e4m3", "float"), ("e5m2", "float"), ("nvfp4", "float"), ("mxfp4", "float")):
        if quantizer.startswith(prefix):
            return kind
    return "nominal"


GROUP = {"e4m3": 0, "e5m2": 0, "e5m2_trunc": 0, "nvfp4": 16, "mxfp4_16": 16, "mlx4": 64, "mlx8": 64, "mlx2": 64,
         "lm4_narrow": 128, "lm4": 128, "lm3": 128, "lm2": 128}


TYPES: list[TypeSpec] = [
    # llama.cpp (common/arg.cpp kv_cache_types); ggml block layouts
    TypeSpec("f32", "llama.cpp", 32, ""),
    TypeSpec("f16", "llama.cpp", 16, ""),
    TypeSpec("bf16", "llama.cpp", 16, ""),
    TypeSpec("q8_0", "llama.cpp", 8.5, "q8_0", source="ggml quantize_row_q8_0: block 32, d = amax/127"),
    TypeSpec("q5_1", "llama.cpp", 6.0, "minmax5", source="ggml q5_1: block 32, min + 31 steps"),
    TypeSpec("q5_0", "llama.cpp", 5.5, "sym5", source="ggml q5_0: block 32, d = max/-16"),
    TypeSpec("q4_1", "llama.cpp", 5.0, "minmax4", source="ggml q4_1: block 32, min + 15 steps"),
    TypeSpec("iq4_nl", "llama.cpp", 4.5, "iq4_nl", source="ggml iq4_nl: block 32, non-linear 16-value codebook, scale search"),
    TypeSpec("q4_0", "llama.cpp", 4.5, "sym4", source="ggml q4_0: block 32, d = max/-8 (the reference)"),
    # floating point (vLLM, SGLang, TensorRT-LLM): per-element exponent, per-tensor scale
    TypeSpec("fp8_e4m3", "vllm/sglang/trtllm", 8, "e4m3", "robust", "OCP FP8 E4M3, round to nearest, per-tensor scale"),
    TypeSpec("fp8_e5m2", "vllm/sglang", 8, "e5m2", "robust", "OCP FP8 E5M2, round to nearest"),
    TypeSpec("nvfp4", "trtllm", 4.5, "nvfp4", source="NVFP4: E2M1 values, E4M3 scale per 16 (NVIDIA blog 2025-12-08)"),
    TypeSpec("fp4_e2m1", "sglang", 4.5, "mxfp4_16", source="SGLang fp4_e2m1 = MXFP4, E8M0 scale per 16 (sglang docs quantized_kv_cache.md)"),
    # ExLlamaV2 cache modes (exllamav2/exllamav2_ext/cuda/cache_q.cuh, cache.cu; verified)
    TypeSpec("exl2_fp8", "exllamav2", 8, "e5m2_trunc", "robust", "FP16 truncated to E5M2, no rounding, no scale (cache.cu since e9c0cd8)"),
    TypeSpec("exl2_q4", "exllamav2", 4.5, "exl2_q4", "builtin", "H32 Hadamard + absmax, 4 bits, fp16 scale per 32 (cache_q.cuh)"),
    TypeSpec("exl2_q8", "exllamav2", 8.5, "exl2_q8", "builtin", "H32 Hadamard + absmax, 8 bits, fp16 scale per 32 (cache_q.cuh)"),
    TypeSpec("exl2_q6", "exllamav2", 6.5, "", "builtin", "Q6 mode = K 8-bit, V 4-bit (cache.cu fp16_to_q_kv_kernel<8, 4>)",
             k_of="exl2_q8", v_of="exl2_q4"),
    # ExLlamaV3 CacheLayer_quant(k_bits, v_bits), 2..8 bits (exllamav3_ext/cache/q_cache_kernels.cuh; verified)
    *[TypeSpec(f"exl3_{b}", "exllamav3", b + 0.5, f"exl3_{b}", "builtin",
               f"H32 Hadamard + absmax, {b}-bit midpoint grid, fp16 scale per 32 (q_cache_kernels.cuh)") for b in range(2, 9)],
    # MLX QuantizedKVCache (mlx-lm kv_bits, group_size 64, affine: scale and bias per group)
    TypeSpec("mlx_4bit", "mlx", 4.5, "mlx4", source="mlx.core.quantize affine, group 64, bf16 scale + bias"),
    TypeSpec("mlx_8bit", "mlx", 8.5, "mlx8", source="mlx.core.quantize affine, group 64, bf16 scale + bias"),
    # measured only (forks, papers): calibrate the shared bit curve
    TypeSpec("q6_0", "ik_llama.cpp", 6.5, "sym6", source="ik_llama.cpp q6_0: block 32, d = max/-32", planned=False),
    TypeSpec("q6_1", "beellama.cpp", 7.0, "minmax6", planned=False, source="fork type, min + 63 steps (assumed layout)"),
    TypeSpec("q3_0", "beellama.cpp", 3.5, "sym3", planned=False, source="fork type, q4_0 layout with 3 bits (assumed)"),
    TypeSpec("q3_1", "beellama.cpp", 4.0, "minmax3", planned=False, source="fork type, q4_1 layout with 3 bits (assumed)"),
    TypeSpec("q2_0", "beellama.cpp", 2.5, "sym2", planned=False, source="fork type, q4_0 layout with 2 bits (assumed)"),
    TypeSpec("q2_1", "beellama.cpp", 3.0, "minmax2", planned=False, source="fork type, q4_1 layout with 2 bits (assumed)"),
    TypeSpec("turbo4", "llama.cpp fork", 4.25, "lm4_narrow", "builtin",
             "TurboQuant: WHT rotation + 4-bit codebook; the measured C/CUDA port's table was too narrow (outer centroid 0.1739 vs 0.2402; "
             "fixed 2026-06, turboquant_plus docs/turbo4-rematch-2026-06.md), simulated as such", planned=False, defective=True),
    TypeSpec("turbo3", "llama.cpp fork", 3.125, "lm3", "builtin", "TurboQuant: WHT rotation + 3-bit codebook (modelled)", planned=False),
    TypeSpec("turbo2", "llama.cpp fork", 2.125, "lm2", "builtin", "TurboQuant: WHT rotation + 2-bit codebook (modelled)", planned=False),
    TypeSpec("tbq4", "llama.cpp fork", 4.25, "lm4", "builtin", "as turbo4", planned=False),
    TypeSpec("tbq4_1", "llama.cpp fork", 4.5, "lm4", "builtin", "as turbo4", planned=False),
    TypeSpec("tbq3", "llama.cpp fork", 3.125, "lm3", "builtin", "as turbo3", planned=False),
    TypeSpec("tq4_0", "llama.cpp PR #20995", 4.5, "lm4", "builtin", "rotated 4-bit (modelled as turbo4)", planned=False),
    TypeSpec("pq4_0", "llama.cpp fork", 4.5, "lm4", "builtin", "PolarQuant 4-bit (modelled as turbo4)", planned=False),
    TypeSpec("pq3_0", "llama.cpp fork", 3.5, "lm3", "builtin", "PolarQuant 3-bit (modelled as turbo3)", planned=False),
    TypeSpec("other_4bit", "own Metal implementation", 4.5, "sym4", planned=False, source="symmetric 4-bit (as q4_0)"),
    TypeSpec("uniform_4b", "quant.cpp", 5.0, "minmax4", planned=False, source="uniform 4-bit with min (as q4_1)"),
    TypeSpec("hqq_4", "HF transformers HQQ", 4.5, "mlx4", planned=False, source="affine, group 64 (as mlx_4bit)"),
    TypeSpec("hqq_2", "HF transformers HQQ", 2.5, "mlx2", planned=False, source="affine, group 64"),
    TypeSpec("quanto_int4", "HF transformers quanto", 4.5, "mlx4", planned=False, source="affine per token, group 64"),
    TypeSpec("quanto_int2", "HF transformers quanto", 2.5, "mlx2", planned=False, source="affine per token, group 64"),
    TypeSpec("kivi_4", "KIVI", 5.0, "minmax4", "robust", "per-channel K / per-token V, group 32, fp16 window", planned=False, codebook_kind="affine_per_channel"),
    TypeSpec("kivi_2", "KIVI", 3.0, "minmax2", "robust", "per-channel K / per-token V, group 32, fp16 window", planned=False, codebook_kind="affine_per_channel"),
]
TYPE = {t.name: t for t in TYPES}


# --- Gaussian rounding-error simulation -------------------------------------------------------------

def _blocks(x: np.ndarray, n: int) -> np.ndarray:
    return x.reshape(-1, n)


def _sym(x: np.ndarray, b: int, n: int = 32) -> np.ndarray:
    y = _blocks(x, n)
    m = 2 ** (b - 1)
    mx = y[np.arange(len(y)), np.abs(y).argmax(1)][:, None]
    d = mx / -m
    q = np.clip(np.floor(y / d + m + 0.5), 0, 2 * m - 1)
    return ((q - m) * d).reshape(-1)


def _absmax(x: np.ndarray, qmax: int, n: int = 32) -> np.ndarray:
    y = _blocks(x, n)
    d = np.abs(y).max(1, keepdims=True) / qmax
    return (np.round(y / d) * d).reshape(-1)


def _minmax(x: np.ndarray, b: int, n: int = 32) -> np.ndarray:
    y = _blocks(x, n)
    lo, hi = y.min(1, keepdims=True), y.max(1, keepdims=True)
    d = (hi - lo) / (2 ** b - 1)
    q = np.clip(np.floor((y - lo) / d + 0.5), 0, 2 ** b - 1)
    return (q * d + lo).reshape(-1)


_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], float)


def _iq4nl(x: np.ndarray) -> np.ndarray:
    y = _blocks(x, 32)
    amax = np.abs(y).max(1, keepdims=True)
    best, best_err = None, None
    for s in np.linspace(100, 140, 41):  # ggml searches the scale around amax/127 the same way
        d = amax / s
        q = _IQ4NL[np.abs((y / d)[..., None] - _IQ4NL).argmin(-1)] * d
        e = ((q - y) ** 2).sum(1, keepdims=True)
        if best is None:
            best, best_err = q, e
        else:
            better = e < best_err
            best, best_err = np.where(better, q, best), np.minimum(e, best_err)
    return best.reshape(-1)


def _fp(x: np.ndarray, mant: int, trunc: bool = False) -> np.ndarray:
    ulp = 2.0 ** (np.floor(np.log2(np.abs(x) + 1e-300)) - mant)
    if trunc:
        return np.sign(x) * np.floor(np.abs(x) / ulp) * ulp
    return np.round(x / ulp) * ulp


_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6.0])
_E2M1 = np.concatenate([-_E2M1[::-1], _E2M1])


def _fp4(x: np.ndarray, n: int, scale: str) -> np.ndarray:
    y = _blocks(x, n)
    amax = np.abs(y).max(1, keepdims=True)
    s = 2.0 ** (np.floor(np.log2(amax)) - 2) if scale == "e8m0" else _fp(amax / 6, 3)
    z = np.clip(y / s, -6, 6)
    return (_E2M1[np.abs(z[..., None] - _E2M1).argmin(-1)] * s).reshape(-1)


def _exl2(x: np.ndarray, b: int) -> np.ndarray:  # rotation leaves iid Gaussian data Gaussian
    y = _blocks(x, 32)
    s = np.abs(y).max(1, keepdims=True)
    m = 2 ** (b - 1)
    q = np.clip(np.round(y / s * m + m), 0, 2 * m - 1) - m
    return (q * s / m).reshape(-1)


def _exl3(x: np.ndarray, b: int) -> np.ndarray:
    y = _blocks(x, 32)
    s = np.abs(y).max(1, keepdims=True)
    m = 2 ** (b - 1)
    q = np.clip(np.floor(y / s * m + m), 0, 2 * m - 1)
    return (((2 * q + 1) / 2 ** b - 1) * s).reshape(-1)


def _lloyd_max(b: int) -> np.ndarray:
    k = 2 ** b
    c = stats.norm.ppf((np.arange(k) + 0.5) / k)
    for _ in range(300):
        t = np.concatenate([[-np.inf], (c[1:] + c[:-1]) / 2, [np.inf]])
        c = (stats.norm.pdf(t[:-1]) - stats.norm.pdf(t[1:])) / (stats.norm.cdf(t[1:]) - stats.norm.cdf(t[:-1]))
    return c


def _codebook(x: np.ndarray, b: int, n: int = 128, scale: float = 1.0) -> np.ndarray:
    y = _blocks(x, n)
    r = np.sqrt((y ** 2).mean(1, keepdims=True))
    c = _lloyd_max(b) * scale
    return (c[np.abs((y / r)[..., None] - c).argmin(-1)] * r).reshape(-1)


QUANTIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "q8_0": lambda x: _absmax(x, 127),
    **{f"sym{b}": (lambda x, b=b: _sym(x, b)) for b in range(2, 9)},
    **{f"minmax{b}": (lambda x, b=b: _minmax(x, b)) for b in range(2, 9)},
    "iq4_nl": _iq4nl,
    "e4m3": lambda x: _fp(x, 3),
    "e5m2": lambda x: _fp(x, 2),
    "e5m2_trunc": lambda x: _fp(x, 2, trunc=True),
    "nvfp4": lambda x: _fp4(x, 16, "e4m3"),
    "mxfp4_16": lambda x: _fp4(x, 16, "e8m0"),
    "exl2_q4": lambda x: _exl2(x, 4),
    "exl2_q8": lambda x: _exl2(x, 8),
    **{f"exl3_{b}": (lambda x, b=b: _exl3(x, b)) for b in range(2, 9)},
    "mlx2": lambda x: _minmax(x, 2, 64),
    "mlx4": lambda x: _minmax(x, 4, 64),
    "mlx8": lambda x: _minmax(x, 8, 64),
    "lm2": lambda x: _codebook(x, 2),
    "lm3": lambda x: _codebook(x, 3),
    "lm4": lambda x: _codebook(x, 4),
    "lm4_narrow": lambda x: _codebook(x, 4, scale=0.1739 / 0.2402),
}


def equivalent_bits() -> dict[str, float]:
    """eq_bits of every quantizer (deterministic: fixed seed, 1.28M Gaussian samples)."""
    x = np.random.default_rng(20260401).standard_normal(20000 * 64)

    def rms(y: np.ndarray) -> float:
        return float(np.sqrt(((y - x) ** 2).mean()))

    ladder = np.array([rms(_sym(x, b)) for b in range(2, 9)])  # reference: storage bits b + 0.5
    lb = -np.log2(ladder)
    out = {}
    for key, q in QUANTIZERS.items():
        e = -math.log2(rms(q(x)))
        # linear in log2(error) between ladder points; beyond 8.5 bits extrapolate one bit per halving
        out[key] = float(np.interp(e, lb, np.arange(2, 9) + 0.5)) if e <= lb[-1] else 8.5 + (e - lb[-1])
    return out


def type_eq_bits(eq: dict[str, float]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for t in TYPES:
        if not t.quantizer and not t.k_of:
            out[t.name] = (t.bits, t.bits)
        elif t.k_of:
            continue
        else:
            b = round(eq[t.quantizer], 2) if t.quantizer in eq else t.bits
            out[t.name] = (b, b)
    for t in TYPES:
        if t.k_of:
            out[t.name] = (out[t.k_of][0], out[t.v_of][1])
    return out


# =====================================================================================================
# 2. Parameters. Fitted ones carry a regularising prior (the hand-set values of prior model version 1,
#    data/priors/prior.yaml at 1d7ccd2, with a wide sd): the fit moves away from them where the measurements demand it. log: fitted in log space.
# =====================================================================================================


@dataclass
class Param:
    name: str
    init: float
    sd: float
    lo: float
    hi: float
    log: bool = False
    rows: str = ""  # the measurements that calibrate it (for the yaml comment and the docs)


FIXED = {
    "bits_ref": 4.5,  # e = 0 at q4_0
    "size_ref_b": 7.0,
    "size_clamp_high": 10.0,
    "low_bits": 5.0,
    "alpha_k_max": 1.5,
    "weight_bpw_high": 6.0,
    "weight_bpw_mid": 3.5,
    "w_high": 1.0,
    "weight_loss_ref_b": 8.0,
    "band_free": 0.005,
    "band_mild": 0.02,
    "band_noticeable": 0.10,
    # The bit slope of K and V: ln 4. To second order a small perturbation of K or V costs in proportion to the
    # rounding error's variance (KLD ~ 1/2 d^T F d), and eq_bits are defined so that the rms error halves per
    # equivalent bit: loss ~ 4^-e. The perplexity, NLL and ctx-growth rows alone, fitted with a free slope, give
    # 1.37; the 8-bit KLD rows (which overstate small PPL changes, PR #6936: ln(1+dPPL)/KLD = 0.31 at Q8_0) pulled a
    # free slope down to 0.67 and cost the out-of-sample ranking (docs/priors.md section 5).
    "beta_k": math.log(4),
}

PARAMS: list[Param] = [
    Param("a_k", 0.004, 2.3, 1e-5, 1.0, True,
          "rotated K rows: ik1034 -khad ladder, exl2doc Q4 (Hadamard), tqasym/tqrec/tqasymx turbo, ollama37, neuralfeed, beellama"),
    Param("v_over_k", 0.75, 2.3, 0.01, 1.0, True,
          "a_v / a_k (bounded <= 1): V-only rows kvsplit K8V4, writeupB f16/q4_0, tqasym/tqrec q8_0/turboN, pr7412 V, mlx1060, mlx1550"),
    Param("r_norot", 9.0, 2.3, 0.01, 1e4, True, "unrotated vs rotated K: ik1034 pairs, exl2doc Q4 old vs new, sglang36172, pr20995"),
    Param("beta_norot", 1.386, 1.0, 0.0, 4.0, False, "the same pairs across bits: ik1034 q8_0/q6_0/q5_0/q4_0 with and without -khad"),
    Param("size_exponent_k", 0.5, 1.0, 0.0, 3.0, False,
          "kvsplit/pr20995/quantcpp/mlx1555 at 1-2B vs exl2doc/tqasym at 7-104B, sglang 8B/32B/235B"),
    Param("size_v_over_k", 0.5, 1.0, 0.0, 1.0, False,
          "size_exponent_v / size_exponent_k (bounded <= 1): V-only rows at 0.6-1.1B (writeupB, kvsplit) vs 4-104B (tqasym, tqrec)"),
    Param("size_exponent_norot", 0.5, 1.0, 0.0, 3.0, False, "unrotated 4-bit K at 1B (kvsplit, pr20995, quantcpp) vs 7-47B (exl2doc Q4 old)"),
    Param("size_knee_b", 3.0, 2.3, 0.05, 1000.0, True, "the size from which loss stops falling (S = 1 above it): tqasym 14B/70B/104B no better than 7B, tqasymx-06 8B vs tqasym-17 70B"),
    Param("ctx_floor", 4096.0, 2.3, 256.0, 4096.0, True, "context growth below 4K: writeupB 2K->4K->8K, mlx1555 K4 at 4K vs the 512-token rows"),
    Param("alpha_k", 0.5, 1.0, 0.0, 1.5, False, "writeupB 2K->4K->8K growth, mlx1555 K4 at 4K, tqrec 70B 512 vs 48K, beellama 64K"),
    Param("alpha_k_size", 0.6, 1.0, 0.0, 2.0, False, "the same rows: growth strong at 0.6B, weak at 70B"),
    Param("alpha_v", 0.1, 1.0, 0.0, 1.0, False, "tqrec 70B q8_0/turbo4 512 vs 8K, beellama 64K, vllmblog fp8 MRCR to 1M"),
    Param("w_mid", 1.5, 2.3, 1.0, 10.0, True, "exl2doc 3.5-5.0 bpw vs FP16 weights, tqasym Q4_K_M rows (bounded >= 1: coarser weights never lower the cache loss)"),
    Param("w_low_ratio", 1.67, 2.3, 1.0, 10.0, True, "w_low / w_mid: exl2doc 3.0 bpw, ik1034 IQ2_XXS (bounded >= 1, so w_low >= w_mid)"),
    # family factors
    Param("fam_qwen2_k", 10.0, 2.3, 0.1, 1e5, True, "qwen2 low-bit K: tqasym Qwen2.5-7B turbo4/turbo3 (Metal, HIP), tqasymx-08, mlx1060 KLD 6.86"),
    Param("fam_qwen3_k_rot", 3.0, 2.3, 0.05, 1e3, True, "qwen3 rotated low-bit K: ik1034 -khad, mlx1555 Qwen3-1.7B, tqasymx tbq3/tbq4, sglang36172 rotated"),
    Param("fam_qwen3_k_norot", 3.0, 2.3, 0.05, 1e3, True, "qwen3 unrotated low-bit K (on top of r_norot): ik1034, writeupB, sglang36172, sglangdoc"),
    Param("fam_qwen35_k", 1.0, 2.3, 0.01, 1e3, True, "qwen3.5 and later: neuralfeed, ollama37, tqrec Qwen3.5-4B, beellama, openclaw, localbench"),
    Param("fam_mistral_all", 1.0, 2.3, 0.01, 100.0, True, "mistral: exl2doc Mistral-7B/Mixtral vs Llama-2-7B (FP8, Q4), tqasymx Mistral-7B V-only, kivi"),
    Param("fam_sink_all", 50.0, 2.3, 0.1, 1e4, True, "attention sinks with 128-token windows: tq305 gpt-oss-20b median KLD, sglangdoc gpt-oss-120b"),
    Param("fam_gemma4_all", 1.0, 2.3, 0.1, 1e4, True, "gemma4: localbench Gemma-4-26B-A4B/31B q8_0 and q4_0 KLD"),
]


PUBLISHED = [  # (prior.yaml key, comment): what prior.cpp reads, in this order
    ("a_k", ""), ("a_v", "= a_k * v_over_k"), ("r_norot", ""), ("beta_norot", ""),
    ("size_exponent_k", ""), ("size_exponent_v", "= size_exponent_k * size_v_over_k"), ("size_exponent_norot", ""),
    ("size_knee_b", ""), ("ctx_floor", ""), ("alpha_k", ""), ("alpha_k_size", ""), ("alpha_v", ""), ("w_mid", ""),
    ("w_low", "= w_mid * w_low_ratio"),
]


def published(free: dict[str, float]) -> dict[str, float]:
    """The free (fitted) parameters -> the parameters prior.yaml publishes and prior.cpp reads."""
    q = dict(free)
    q["a_v"] = free["a_k"] * free["v_over_k"]
    q["beta_k"] = q["beta_v"] = FIXED["beta_k"]
    q["size_exponent_v"] = free["size_exponent_k"] * free["size_v_over_k"]
    q["w_low"] = free["w_mid"] * free["w_low_ratio"]
    return q


# family key in the prior -> (K factor parameter (rot, norot), all-bits parameter, k_low_bits_max)
FAMILIES = {
    "qwen2": (("fam_qwen2_k", "fam_qwen2_k"), None, 6.0,
              "Qwen2/2.5: large K outlier channels and K bias; symmetric low-bit K breaks even when rotated"),
    "qwen3": (("fam_qwen3_k_rot", "fam_qwen3_k_norot"), None, 6.0, "Qwen3 0.6B-235B: outlier K channels (mlx-lm #1555)"),
    "qwen3.5": (("fam_qwen35_k", "fam_qwen35_k"), None, 6.0, "Qwen3.5 and later (3.6, 3.8): tolerant of low-bit K"),
    "mistral": ((None, None), "fam_mistral_all", 6.0, "Mistral/Mixtral: tolerant (exllamav2 FP8 and Q4 cache 5-20x below Llama-2-7B)"),
    "gpt-oss": ((None, None), "fam_sink_all", 6.0, "learned attention sinks + 128-token sliding-window layers"),
    "gemma4": ((None, None), "fam_gemma4_all", 6.0,
               "Gemma 4: sliding-window layers; loses even at 8 bits in its only measurements (localbench, secondary)"),
}


# =====================================================================================================
# 3. The prediction (mirrors libplanner/src/priors/prior.cpp kv_loss / assess)
# =====================================================================================================


@dataclass
class Config:
    params_b: float
    family: str
    k_type: str
    v_type: str
    rotation: bool  # the engine rotates quantized caches (a row's "rotation: yes")
    ctx: float
    bpw: float = 16.0
    task_factor: float = 1.0
    builtin_off: bool = False  # a row measured a "builtin" type before its rotation existed (exllamav2 <= 0.0.18)
    saturate: bool = False  # accuracy rows: predicted drop = 1 - exp(-T * W * L_kv)
    swa: tuple[int, int, int] | None = None  # (layers, window, pattern) of a sliding-window model (kvplan catalog)


# family -> the K codebooks its own low-bit-K rows measured (run() fills it from the rows before the fit): a family's
# K factor applies to those codebooks only, so Qwen2's factor (fitted to TurboQuant codebooks) never reaches q4_0
FAMILY_CODEBOOKS: dict[str, set[str]] = {}


def family_covers(family: str, k_type: str, eq=None) -> bool:
    """A family's K factor reaches the codebooks its rows measured and every type of as many equivalent K bits or
    fewer within its range (fewer bits never lose less; prior.cpp family_covers). `eq`: type_eq_bits."""
    books = FAMILY_CODEBOOKS.get(family)
    if books is None or TYPE[k_type].codebook in books:
        return True
    if eq is None:
        return False
    top = FAMILIES[family][2] if family in FAMILIES else 0.0
    bits = eq[k_type][0]
    return any(TYPE[t].bits < 16 and bits <= eq[t][0] <= top and TYPE[t].codebook in books for t in TYPE if t in eq)


def family_codebooks(rows: list["Row"], eq) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {f: set() for f in FAMILIES}
    for r in rows:
        if r.kind == "excluded" or r.cfg is None or r.cfg.family not in FAMILIES:
            continue
        t = TYPE[r.cfg.k_type]
        if t.bits < 16 and eq[t.name][0] <= FAMILIES[r.cfg.family][2]:
            out[r.cfg.family].add(t.codebook)
    return out


def attended_context(c: Config) -> float:
    """Mirrors prior.cpp attended_context: the mean span the attention layers attend to; a sliding layer
    (llama.cpp set_swa_pattern: il % pattern < pattern - 1) attends to at most its window."""
    if not c.swa:
        return c.ctx
    layers, window, pattern = c.swa
    sliding = sum(1 for il in range(layers) if pattern > 1 and il % pattern < pattern - 1)
    return ((layers - sliding) * c.ctx + sliding * min(c.ctx, window)) / layers


def load_sliding_windows() -> dict[str, tuple[int, int, int]]:
    """Catalog models with a sliding window, by every name a measurement row may use (id, name, aliases)."""
    out = {}
    for f in sorted((ROOT / "data" / "models").glob("*.yaml")):
        for m in yaml.safe_load(f.read_text()).get("models", []):
            if m.get("swa") and not m.get("recurrent"):
                names = [m["id"], m.get("name", "")] + list(m.get("aliases", []))
                for n in names:
                    if n:
                        out[_model_key(n)] = (int(m["layers"]), int(m["swa"]["window"]), int(m["swa"].get("pattern", 0)))
    return out


def _model_key(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def rotated(t: str, engine_rotates: bool, builtin_off: bool = False) -> bool:
    cls = TYPE[t].rotation
    if cls == "robust":
        return True
    if cls == "builtin":
        return not builtin_off
    return engine_rotates


@dataclass
class Model:
    p: dict[str, float]
    eq: dict[str, tuple[float, float]]

    @property
    def ctx_floor(self) -> float:
        return self.p["ctx_floor"]

    @property
    def free(self) -> dict[str, float]:
        return {q.name: self.p[q.name] for q in PARAMS}

    def quantized(self, t: str) -> bool:
        return TYPE[t].bits < 16

    def size_factor(self, n: float, sigma: float) -> float:
        """1 at and above the knee (no measurement shows a larger model losing less than a 7-14B one at equal
        types: TheTom's grid, docs/priors.md section 1.5); a power law below it (prior.cpp size_factor)."""
        return min(max(self.p["size_knee_b"] / n, 1.0) ** sigma, FIXED["size_clamp_high"])

    def kv_parts(self, c: Config) -> tuple[float, float]:
        """(K term, V term) of L_kv, each with its size, context and family factors; F_all applied to both."""
        p, fx = self.p, FIXED
        n = c.params_b
        ctx = max(attended_context(c), self.ctx_floor) / self.ctx_floor
        kq, vq = self.quantized(c.k_type), self.quantized(c.v_type)
        bk, bv = self.eq[c.k_type][0], self.eq[c.v_type][1]
        rot_k = rotated(c.k_type, c.rotation, c.builtin_off)
        fam = FAMILIES.get(c.family)
        k = v = 0.0
        if kq:
            e = bk - fx["bits_ref"]
            a_rot = p["a_k"] * math.exp(-p["beta_k"] * e)
            a_norot = a_rot * (1 + p["r_norot"] * math.exp(-p["beta_norot"] * e) * self.size_factor(n, p["size_exponent_norot"]))
            s = self.size_factor(n, p["size_exponent_k"])
            alpha = min(p["alpha_k"] * (fx["size_ref_b"] / n) ** p["alpha_k_size"], fx["alpha_k_max"]) if bk <= fx["low_bits"] else 0.0
            f_rot = f_norot = 1.0
            if fam and fam[0][0] and bk <= fam[2] and family_covers(c.family, c.k_type, self.eq):
                f_rot, f_norot = p[fam[0][0]], p[fam[0][1]]
            # rotation never predicted to hurt: a rotated K term is at most the unrotated one (prior.cpp kv_parts)
            k_norot = f_norot * a_norot
            k = (min(f_rot * a_rot, k_norot) if rot_k else k_norot) * s * ctx ** alpha
        if vq:
            e = bv - fx["bits_ref"]
            a = p["a_v"] * math.exp(-p["beta_v"] * e)
            s = self.size_factor(n, p["size_exponent_v"])
            alpha = p["alpha_v"] if bv <= fx["low_bits"] else 0.0
            v = s * a * ctx ** alpha
        if (kq or vq) and fam and fam[1]:
            k *= p[fam[1]]
            v *= p[fam[1]]
        return k, v

    def kv_loss(self, c: Config) -> float:
        k, v = self.kv_parts(c)
        return k + v

    def weights_factor(self, bpw: float) -> float:
        if bpw >= FIXED["weight_bpw_high"]:
            return FIXED["w_high"]
        if bpw >= FIXED["weight_bpw_mid"]:
            return self.p["w_mid"]
        return self.p["w_low"]

    def row(self, c: Config) -> float:
        x = c.task_factor * self.weights_factor(c.bpw) * self.kv_loss(c)
        return -math.expm1(-x) if c.saturate else x


# =====================================================================================================
# 4. Rows -> the loss unit. Every row ends up with: kind, measured m (in the row's own loss unit), noise nu
#    (same unit), and a Config whose prediction is in that unit.
#
#    ppl        relative PPL increase against an f16/bf16 cache (or a q8_0 baseline, taken as lossless), as is
#    ctx_growth PPL of one cache at ctx over the same cache at 2048: predicted (1+L(ctx))/(1+L(2048)) - 1
#    kld        exp(KLD - floor) - 1: ln(PPL_Q/PPL_base) ~ KLD (checked on PR #6936's 24 weight formats)
#    nll        exp(dNLL) - 1
#    acc        relative accuracy drop, predicted as T_task * W * L_kv with T of the kvplan task the metric is
#               (gsm8k: general 1, aime/gpqa/math: reasoning 5, humaneval: coding 2, LongBench QA/retrieval and
#               MRCR: rag 2/3, summarisation 1)
# =====================================================================================================

HIGHER_BETTER = re.compile(r"acc|pass|recovery|humaneval|longbench|niah|similarity|tool_call")

# metric -> (kvplan task, default context when the row states none, benchmark size for the binomial noise)
ACC_METRICS = {
    "gsm8k_acc": ("general", 2048, 1319), "gsm8k_acc_pct": ("general", 2048, 1319),
    "aime25_acc": ("reasoning", 8192, 30), "gpqa_diamond_acc": ("reasoning", 8192, 198),
    "gpqa_diamond_acc_pct": ("reasoning", 8192, 198), "math500_acc_pct": ("reasoning", 8192, 500),
    "math_acc_pct": ("reasoning", 32768, 91), "math_acc": ("reasoning", 8192, 500),
    "reasoning_recovery_pct_min": ("reasoning", 8192, 198),
    "humaneval_pass1_pct": ("coding", 1024, 164), "humaneval_python_en_pct": ("coding", 1024, 164),
    "humaneval_python_cn_pct": ("coding", 1024, 164),
    "longbench_avg": ("rag", 8192, 3000), "longbench_passage_retrieval": ("rag", 8192, 200),
    "longbench_passage_retrieval_en": ("rag", 8192, 200), "longbench_hotpotqa": ("rag", 8192, 200),
    "longbench_triviaqa": ("rag", 8192, 200), "longbench_samsum": ("summarization", 8192, 200),
    "longbench_trec": ("general", 8192, 200),
    "mrcr_auc_recovery_pct": ("rag", None, 0),
}
EXCLUDED_METRICS = {
    "niah_pass_count": "single-needle retrieval passes even when PPL explodes (TheTom/turboquant_plus NIAH runs; FreeToken PR #268); not a kvplan task",
    "niah_acc_pct": "single-needle retrieval (the two rows differ by a kernel accumulation bug, not the cache type)",
    "output_similarity_pct": "greedy-decoding divergence, not a loss (one changed token changes the rest of the text)",
    "nmse_logits": "no conversion to a perplexity change; the two rows are different models",
    "output_tokens_mean": "trace length, not a quality metric",
    "ppl_delta": "absolute PPL change with no baseline PPL",
    "tool_call_pass_count": "no number (arms not resolved)",
    "agentic_tool_calls": "no number",
    "math_reasoning": "no number",
    "mrcr_auc": "no number",
    "accuracy_loss": "a stated bound on an unnamed model",
    "acc_avg": "baseline is another quantized cache (K4V4) and the models are unnamed",
    "acc": "baseline is another quantized cache (K4V2) and the models are unnamed",
}
# Rotation for rows that say "unknown" (only matters for llama.cpp-class types): the build date decides.
ROTATION_UNKNOWN = {
    "writeupB": (False, "no date or build given; treated as a pre-rotation build (llama.cpp rotated only from 2026-04)"),
    "beellama": (True, "2026 fork that carries upstream rotation (row note)"),
    "neuralfeed": (True, "2026 post, current llama-perplexity (after PR #21038)"),
    "openclaw": (True, "2026 fork of current llama.cpp"),
    "tq305": (True, "2026 fork of current llama.cpp"),
    "tqasymx": (False, "quoted validations of various dates; the rows involved are V-only"),
    "inventivehq": (False, "undated secondary source"),
    "xllama181": (True, "2026 build"),
    "freetoken": (False, "own Triton engine"),
    "nvblog": (False, "NVFP4 has no rotation"),
    "l1t": (False, "vLLM-class server, no rotation"),
    "kvtuner": (False, "paper"),
}
# Context where a row states none
CTX_DEFAULT_PPL = 512  # llama-perplexity's own default n_ctx (tools/perplexity/perplexity.cpp: params.n_ctx = 512)
CTX_ASSUMED = {
    "writeupB-04": (2048, "the sweep's q4_0 minimum is at 2048; the +280% is read there"),
    "writeupB-05": (2048, "same sweep as writeupB-04"),
}
# Weights column -> bits per weight (GGUF formats from data/weights/gguf_quality.yaml bpw_llama31_8b)
BPW_EXTRA = {"": 16.0, "f16": 16.0, "bf16": 16.0, "mlx_8bit": 8.5, "IQ5_K": 5.5, "UD-IQ1_S": 1.9,
             "exl2_3.0bpw": 3.0, "exl2_3.5bpw": 3.5, "exl2_4.0bpw": 4.0, "exl2_5.0bpw": 5.0, "exl2_6.0bpw": 6.0}
# Fixed per-source facts the rows need (documented in docs/priors.md section 3)
KLD_FLOOR = {"pr7412": 0.000189}  # f16/f16 FA path vs f16 reference (row pr7412-01)
KLD_FLOOR_DEFAULT = 0.0005  # PR #6936: f16 logits downcast KLD 0.000551 (gguf_quality.yaml F16)
PPL_NOISE_FLOOR = 0.0004  # PR #7412: f16 FA vs non-FA path dPPL 0.002443 / 6.23 = 0.04%


@dataclass
class Row:
    id: str
    src: str  # source tag (the id prefix)
    source: str
    raw: dict[str, str]
    kind: str = "excluded"
    reason: str = ""
    m: float = float("nan")  # measured, in the row's loss unit
    nu: float = 0.0  # noise, same unit
    cfg: Config | None = None
    base: Config | None = None  # ctx_growth / nll: the baseline configuration
    upper_bound: bool = False
    loss_raw: float = float("nan")  # the row's own quality-loss number (ordering within a group)
    noise_raw: float = 0.0
    kld_floor: float = 0.0  # KLD rows: the source's lossless-cache KLD, subtracted (kld_floor())
    assumptions: list[str] = field(default_factory=list)


def _num(s: str) -> float | None:
    s = (s or "").strip()
    if not s:
        return None
    return float(s)


def _half_digit(s: str) -> float:
    """Half a unit of the last printed digit of a number as written."""
    s = (s or "").strip().lstrip("+-")
    if not s or "e" in s.lower():
        return 0.0
    if "." not in s:
        return 0.5
    return 0.5 * 10.0 ** -len(s.split(".")[1])


def load_tasks() -> dict[str, list[tuple[int, float]]]:
    data = yaml.safe_load(TASKS.read_text())
    out = {}
    for t in data["tasks"]:
        out[t["id"]] = [(b["upto"] or 0, float(b["factor"])) for b in t["strictness"]]
    return out


def task_factor(bands: list[tuple[int, float]], ctx: float) -> float:
    for upto, f in bands:
        if upto == 0 or ctx <= upto:
            return f
    return bands[-1][1]


def load_bpw() -> dict[str, float]:
    data = yaml.safe_load(GGUF_QUALITY.read_text())
    out = dict(BPW_EXTRA)
    for f in data["formats"]:
        if f.get("bpw_llama31_8b"):
            out[f["id"]] = float(f["bpw_llama31_8b"])
    return out


def map_rows() -> list[Row]:
    tasks = load_tasks()
    bpw_of = load_bpw()
    sliding = load_sliding_windows()
    rows = []
    q8_floor = q8_kld_floors()
    raws = {raw["id"]: raw for raw in csv.DictReader(MEASUREMENTS.open(newline=""))}
    for raw in raws.values():
        r = Row(raw["id"], raw["id"].rsplit("-", 1)[0], raw["source"], raw)
        rows.append(r)
        metric, notes = raw["metric"], raw["notes"]
        k, v = raw["k_type"], raw["v_type"]
        if "MLA" in notes and not v:
            v = k
            r.assumptions.append("MLA: one latent cache serves K and V, predicted as K = V = " + k)
        if not v and raw["id"].startswith("mlx1555"):
            v = "f16"
            r.assumptions.append("V type not stated: K-only experiment assumed (V = f16)")
        rel = _num(raw["rel_change"])
        value, baseline = _num(raw["value"]), _num(raw["baseline"])
        # the row's own quality-loss figure for ordering (higher = worse)
        if rel is not None:
            r.loss_raw = -rel if HIGHER_BETTER.search(metric) else rel
        elif value is not None and metric in ("kld", "median_kld", "nmse_logits"):
            r.loss_raw = value
        # --- exclusions
        if metric in EXCLUDED_METRICS:
            r.reason = EXCLUDED_METRICS[metric]
        elif k not in TYPE or v not in TYPE:
            r.reason = f"cache type not modelled ({k}/{v})"
        elif rel is None and metric not in ("kld", "median_kld"):
            r.reason = "no number relative to a baseline"
        elif "partial run" in notes:
            r.reason = ("partial cell of tools/measure_kv (fewer than 32,000 scored tokens, below its design): "
                        "kept out of the fit")
        elif "baseline = K4V2" in notes or "baseline is q6_0" in notes or "baseline = q8_0-K/turbo3-V" in notes:
            r.reason = "baseline is another quantized cache, not f16"
        elif "baseline = rotation off" in notes:
            r.reason = "baseline is the same cache without rotation (a rotation check, not a loss against f16)"
        elif r.id.startswith("pr7412") and raw["weights"] != "f16":
            r.reason = "KLD includes the q8_0 weight quantization (reference point for weights)"
        elif r.id == "pr7412-01":
            r.reason = "the f16/f16 KLD floor itself (used as this source's floor)"
        # size/family/context
        pb = _num(raw["params_b"])
        fam = raw["family"]
        rot_s = raw["rotation"]
        if rot_s == "unknown":
            rot, why = ROTATION_UNKNOWN.get(r.src, (False, "no date: treated as unrotated"))
            r.assumptions.append(f"rotation unknown -> {'rotated' if rot else 'unrotated'}: {why}")
        else:
            rot = rot_s == "yes"
        ctx = _num(raw["ctx"])
        if r.id in CTX_ASSUMED:
            ctx, why = CTX_ASSUMED[r.id]
            r.assumptions.append(f"ctx {ctx}: {why}")
        task = None
        if metric in ACC_METRICS:
            task, dctx, _ = ACC_METRICS[metric]
            if ctx is None and dctx:
                ctx = dctx
                r.assumptions.append(f"ctx {dctx}: default for {metric}")
        if ctx is None:
            ctx = CTX_DEFAULT_PPL
            r.assumptions.append(f"ctx {CTX_DEFAULT_PPL}: not stated (llama-perplexity's default)")
        weights = raw["weights"]
        bpw = bpw_of.get(weights)
        if bpw is None:
            bpw = 16.0
            r.assumptions.append(f"weights {weights}: bpw unknown, W = 1")
        if pb is None:
            pb_used = 7.0
            if not r.reason:
                r.reason = "model size not stated"
        else:
            pb_used = pb
        tf = task_factor(tasks[task], ctx) if task else 1.0
        sw = sliding.get(_model_key(raw["model"]))
        if sw:
            r.assumptions.append(f"sliding window {sw[1]} on {sum(1 for il in range(sw[0]) if il % sw[2] < sw[2] - 1)} of {sw[0]} layers "
                                 "(kvplan catalog): context growth uses the attended context")
        if k in TYPE and v in TYPE:
            r.cfg = Config(pb_used, fam, k, v, rot, ctx, bpw, tf, builtin_off=rot_s == "no" and TYPE[k].rotation == "builtin",
                           saturate=task is not None, swa=sw)
        if r.reason:
            # still give excluded rows a prediction (ordering within groups uses it)
            r.noise_raw = _raw_noise(r, metric, value, baseline, rel)
            continue
        # --- mapping to the loss unit
        if metric == "ppl":
            if "baseline = same config at" in notes:
                r.kind = "ctx_growth"
                r.base = Config(pb_used, fam, k, v, rot, 2048, bpw, 1.0, swa=sw)
            else:
                r.kind = "ppl"
                if "baseline q8_0/q8_0" in notes or "baseline = q8 no -khad" in notes:
                    r.base = Config(pb_used, fam, "q8_0", "q8_0", False, ctx, bpw, 1.0, swa=sw)
                    r.assumptions.append("baseline q8_0/q8_0 (unrotated): predicted as (1+L)/(1+L_base) - 1")
            r.m = rel
        elif metric == "ppl_by_position":
            r.kind, r.m = "ppl", rel
        elif metric in ("kld", "median_kld"):
            floor = kld_floor(r, q8_floor, raws)
            r.kld_floor = floor
            if floor and CATEGORY_OF.search(notes):
                r.assumptions.append(f"KLD floor {floor:.4g}: the source's q8_0/q8_0 KLD on this model x this category's "
                                     f"KLD / the whole corpus's ({CATEGORY_OF.search(notes).group(1)})")
            elif floor and r.src not in KLD_FLOOR:
                r.assumptions.append(f"KLD floor {floor:g}: the source's q8_0/q8_0 KLD on this model (no f16 floor given)")
            r.kind = "kld"
            r.m = math.expm1(max(value - floor, 0.0))
            if metric == "median_kld":
                r.assumptions.append("median KLD used as the mean (understates the mean)")
            if "value = bound" in notes:
                r.upper_bound = True
        elif metric == "nll":
            r.kind, r.m = "nll", math.expm1(rel)
            r.base = Config(pb_used, fam, "mlx_8bit", "mlx_8bit", rot, ctx, bpw, 1.0, swa=sw)
        elif metric in ACC_METRICS:
            r.kind = "acc"
            r.m = -rel
            if "value = bound" in notes or "stated <" in notes:
                r.upper_bound = True
        else:
            r.reason = f"metric {metric} has no mapping"
            continue
        r.noise_raw = _raw_noise(r, metric, value, baseline, rel)
        r.nu = _noise(r, metric, value, baseline, rel)
    return rows


def q8_kld_floors() -> dict[tuple, float]:
    """(source tag, model, weights, metric, ctx) -> the source's q8_0/q8_0 KLD on that model and corpus.
    A KLD source that gives no f16/f16 floor measures its own floor (reference run, corpus, kernels) with q8_0:
    every q8_0 KLD in the file is 0.0006-0.004 except those of sources with a floor of their own (localbench
    0.04-0.38, TheTom #305 0.055 on gpt-oss), and the prior puts q8_0 at 1/256 of q4_0 (docs/priors.md 3.3)."""
    out = {}
    for raw in csv.DictReader(MEASUREMENTS.open(newline="")):
        if raw["metric"] in ("kld", "median_kld") and raw["k_type"] == "q8_0" and raw["v_type"] == "q8_0":
            out[_floor_key(raw)] = float(raw["value"])
    return out


def _floor_key(raw: dict[str, str]) -> tuple:
    # the model by its family and size (a source may spell one model two ways: localbench-04 and -06)
    return (raw["id"].rsplit("-", 1)[0], raw["family"], raw["params_b"], raw["weights"], raw["metric"], raw["ctx"])


CATEGORY_OF = re.compile(r"\bcategory of ([a-z0-9]+-\d+)\b")  # notes: "... category of <row id of the whole-corpus run>"


def kld_floor(r: "Row", q8_floor: dict[tuple, float], raws: dict[str, dict[str, str]]) -> float:
    """The KLD a row's source measures with a lossless cache: its f16/f16 reading where it gives one (KLD_FLOOR),
    else its q8_0/q8_0 reading on the same model, corpus and context, else 0.

    A category row (one part of a corpus, notes "category of <id>") is scaled by its reading over the whole-corpus
    reading of the same runs: a small perturbation of the logits costs 1/2 d^T F d nats, so a part of the corpus
    where the model's output is more sensitive (larger Fisher F) multiplies the non-cache perturbation behind the
    floor by the same factor as the cache's (docs/priors.md 3.2). The category's own q8_0 reading is not published."""
    if r.src in KLD_FLOOR:
        return KLD_FLOOR[r.src]
    floor = q8_floor.get(_floor_key(r.raw), 0.0)
    parent = CATEGORY_OF.search(r.raw["notes"])
    if parent and floor:
        whole = raws[parent.group(1)]
        floor *= float(r.raw["value"]) / float(whole["value"])
    return floor


def _raw_noise(r: Row, metric: str, value, baseline, rel) -> float:
    """Noise in the row's own loss figure (docs/priors.md section 3.3)."""
    raw = r.raw
    if _num(raw["noise"]) is not None:  # the noise column is in the unit of rel_change (or of value for KLD rows)
        return _num(raw["noise"])
    if metric in ACC_METRICS:
        _, _, n = ACC_METRICS[metric]
        if metric == "mrcr_auc_recovery_pct":
            return 0.02
        p = (baseline / 100 if baseline and baseline > 1 else baseline) if baseline else 0.9
        p = min(max(p, 1e-3), 1 - 1e-3)
        return max(math.sqrt(2 * p * (1 - p) / n) / p, 1.0 / n)
    if metric in ("kld", "median_kld"):
        return KLD_FLOOR.get(r.src, KLD_FLOOR_DEFAULT)
    if value is not None and baseline:
        rd = math.hypot(_half_digit(raw["value"]), _half_digit(raw["baseline"])) / baseline
    elif raw["rel_change"]:
        rd = _half_digit(raw["rel_change"]) if len(raw["rel_change"].split(".")[-1]) <= 4 else 0.0
    else:
        rd = 0.0
    if metric in ("output_similarity_pct", "nmse_logits"):
        return rd
    return math.hypot(rd, PPL_NOISE_FLOOR)


def _noise(r: Row, metric, value, baseline, rel) -> float:
    if r.kind == "kld":  # the floor is the resolution: a reading within it says only "small"
        return max(r.kld_floor, KLD_FLOOR_DEFAULT)
    return _raw_noise(r, metric, value, baseline, rel)


# =====================================================================================================
# 5. Fit: robust (soft-L1) least squares on log(m + nu) - log(pred + nu), each source weighted 1/sqrt(rows)
# =====================================================================================================


def predict(model: Model, r: Row) -> float:
    if r.kind == "ctx_growth":
        return (1 + model.kv_loss(r.cfg) * model.weights_factor(r.cfg.bpw)) / (
            1 + model.kv_loss(r.base) * model.weights_factor(r.base.bpw)) - 1
    if r.base is not None:  # a quantized baseline taken as near-lossless
        return (1 + model.row(r.cfg)) / (1 + model.row(r.base)) - 1
    return model.row(r.cfg)


def theta_to_params(theta: np.ndarray) -> dict[str, float]:
    return {p.name: (math.exp(x) if p.log else float(x)) for p, x in zip(PARAMS, theta)}


def params_to_theta(p: dict[str, float]) -> np.ndarray:
    return np.array([math.log(p[q.name]) if q.log else p[q.name] for q in PARAMS])


def theta0() -> np.ndarray:
    return params_to_theta({p.name: p.init for p in PARAMS})


NATS_KINDS = ("ppl", "ctx_growth", "kld", "nll")


def nats(r: Row, measured: float) -> float:
    """A measured loss in the unit of the model's L_kv: ln(PPL_Q / PPL_base), the KLD-equivalent (second order:
    1/2 d^T F d, docs/priors.md 1), for the perplexity-class rows: equal to the relative change below ~10 %, and it
    does not explode when a model breaks (PPL x540 and x10,400 are 6.3 and 9.3 nats). Accuracy drops as they are.
    Negative figures count as 0."""
    x = max(measured, 0.0)
    return math.log1p(x) if r.kind in NATS_KINDS else x


def miss_ratio(r: Row, pred: float) -> float:
    """measured / predicted with the row's noise floor, in the model's unit (docs/priors.md 5): a measurement
    within its noise matches any prediction within it; tests/unit/prior_test.cpp requires 1/10 <= ratio <= 10."""
    return (nats(r, r.m) + r.nu) / (max(pred, 0.0) + r.nu)


def residual(model: Model, r: Row) -> float:
    d = -math.log(miss_ratio(r, predict(model, r)))
    if r.upper_bound:
        d = max(d, 0.0)
    return d


MISS_LIMIT = 10.0  # the largest measured / predicted ratio (either way) any fitted row may have
BARRIER = 30.0  # weight of the barrier per log unit beyond 0.95 * ln MISS_LIMIT


# A leave-one-source-out fold starts at the full fit's optimum. Some folds then crawl along a flat direction without
# meeting xtol (beellama: 4,000 evaluations, 500 s) while their cost has settled to 1e-8 and their predictions to 4
# digits within 50 evaluations: the folds are capped instead.
LOSO_MAX_NFEV = 300


def fit(rows: list[Row], eq, start: np.ndarray | None = None, max_nfev: int = 4000) -> Model:
    fitted = [r for r in rows if r.kind != "excluded"]
    counts: dict[str, int] = {}
    for r in fitted:
        counts[r.src] = counts.get(r.src, 0) + 1
    w = np.array([1.0 / math.sqrt(counts[r.src]) for r in fitted])
    t0 = theta0()
    sd = np.array([p.sd for p in PARAMS])
    lo = np.array([math.log(p.lo) if p.log else p.lo for p in PARAMS])
    hi = np.array([math.log(p.hi) if p.log else p.hi for p in PARAMS])

    def f(theta):
        m = Model(published(theta_to_params(theta)), eq)
        raw = np.array([residual(m, r) for r in fitted])  # once per evaluation: the fit's inner loop
        data = raw * w
        # soft-L1 on the data (scale 0.5 in log units), quadratic regularisation toward the 2.3 values
        rho = 2 * (np.sqrt(1 + (data / 0.5) ** 2) - 1) * 0.5 ** 2
        # a barrier (unweighted): no row may be mispredicted by more than MISS_LIMIT (docs/priors.md 5)
        over = np.maximum(np.abs(raw) - math.log(MISS_LIMIT) * 0.95, 0.0) * BARRIER
        return np.concatenate([np.sqrt(rho), over, (theta - t0) / sd])

    x0 = np.clip(t0 if start is None else start, lo + 1e-9, hi - 1e-9)
    res = optimize.least_squares(f, x0, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=max_nfev, xtol=1e-10, ftol=1e-10)
    return Model(published(theta_to_params(res.x)), eq)


# =====================================================================================================
# 6. Acceptance
# =====================================================================================================


def ordering(rows: list[Row], preds: dict[str, float]) -> dict:
    """Within each group -- (source, model, weights, metric, ctx as stated, baseline value) -- the pairs whose
    measured gap exceeds the noise. Model and weights are the model file; rows that share a baseline value were
    measured against the same reference run (rows on other hardware, e.g. HIP vs Metal, have their own)."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        if math.isnan(r.loss_raw) or r.cfg is None:
            continue
        key = (r.source, r.raw["model"], r.raw["weights"], r.raw["metric"], r.raw["ctx"], r.raw["baseline"])
        groups.setdefault(key, []).append(r)
    agree, disagree, ties = [], [], []
    for key, g in groups.items():
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                a, b = g[i], g[j]
                gap = a.loss_raw - b.loss_raw
                if abs(gap) <= math.hypot(a.noise_raw, b.noise_raw):
                    continue
                pa, pb = preds[a.id], preds[b.id]
                if abs(pa - pb) <= 1e-12 * max(abs(pa), abs(pb), 1e-30):
                    ties.append((a, b))
                elif (pa - pb) * gap > 0:
                    agree.append((a, b))
                else:
                    disagree.append((a, b))
    n = len(agree) + len(disagree) + len(ties)
    return {"agree": agree, "disagree": disagree, "ties": ties, "pairs": n,
            "share": len(agree) / n if n else float("nan"),
            "share_untied": len(agree) / (len(agree) + len(disagree)) if agree or disagree else float("nan")}


def spearman(x, y) -> float:
    return float(stats.spearmanr(x, y).statistic)


def loso(rows: list[Row], eq, full: Model) -> dict[str, float]:
    """Leave-one-source-out predictions for every fitted row."""
    out: dict[str, float] = {}
    start = params_to_theta(full.free)
    for src in sorted({r.src for r in rows if r.kind != "excluded"}):
        sub = [r if r.src != src else _excluded_copy(r) for r in rows]
        m = fit(sub, eq, start, max_nfev=LOSO_MAX_NFEV)
        for r in rows:
            if r.src == src and r.kind != "excluded":
                out[r.id] = predict(m, r)
    return out


def _excluded_copy(r: Row) -> Row:
    c = Row(r.id, r.src, r.source, r.raw)
    c.kind = "excluded"
    return c


# =====================================================================================================
# 7. Outputs
# =====================================================================================================


def fmt(x: float) -> str:
    if abs(x) < 1e-6:  # a parameter at its bound of 0
        return "0"
    return f"{x:.4g}"


def rounded(p: dict[str, float]) -> dict[str, float]:
    """The fitted values as written to prior.yaml (4 significant digits; values at a bound of 0 become 0).
    Predictions and residuals are computed with these, so C++ (which reads the yaml) reproduces them."""
    return {k: 0.0 if abs(v) < 1e-6 else float(fmt(v)) for k, v in p.items()}


def analog_entries(rows: list[Row], model: Model) -> list[dict]:
    """The fitted rows in the prior's own unit, for the analog bands (prior.cpp evidence_bounds.cpp): `predicted` is
    the row's L_kv and `loss` / `predicted` the row's noise-floored measured / predicted ratio (miss_ratio(), the
    ratio of the 10x check), so a row measured within its noise says "small", not "x13" (loss = predicted x ratio)."""
    out = []
    for r in rows:
        if r.kind == "excluded" or r.cfg is None:
            continue
        c = r.cfg
        kv = model.kv_loss(c)
        loss = -1.0 if r.kind == "ctx_growth" else kv * miss_ratio(r, predict(model, r))
        rot_k = TYPE[c.k_type].bits < 16 and rotated(c.k_type, c.rotation, c.builtin_off)
        out.append({"id": r.id, "family": c.family or "other", "params_b": c.params_b, "k": c.k_type, "v": c.v_type,
                    "rot_k": "true" if rot_k else "false", "ctx": attended_context(c), "loss": loss,
                    "predicted": kv,
                    "upper": "true" if r.upper_bound else "false"})
    return out


def write_yaml(model: Model, eq_bits: dict[str, tuple[float, float]], interval: tuple[float, float], metrics: dict,
               evidence_rows: list[dict], analog_rows: list[dict]) -> str:
    p = model.p
    old = PRIOR_YAML.read_text()
    tail = old[old.index(EVIDENCE_MARKER):] if EVIDENCE_MARKER in old else _legacy_evidence(old)
    pc = {q.name: q for q in PARAMS}

    def line(key: str, value: float, comment: str) -> str:
        return f"  {key}: {fmt(value)}" + (f"   # {comment}" if comment else "")

    out = io.StringIO()
    w = out.write
    w("# The KV-cache quality prior, FITTED by tools/fit_priors.py to data/priors/measurements.csv.\n")
    w("# Everything above the evidence marker is generated: edit the script (types, parameters, row mapping),\n")
    w("# not this file, and re-run `.venv/bin/python tools/fit_priors.py`. docs/priors.md documents the model;\n")
    w("# data/priors/fit_report.md has the acceptance figures and every disagreement; fit_residuals.csv every row.\n")
    w("#\n")
    w("#   e_x   = eq_bits_x - bits_ref\n")
    w("#   a_K   = a_k * exp(-beta_k * e_K) * (1 + r_norot * exp(-beta_norot * e_K) * S_R(N)   if K is not rotated)\n")
    w("#   a_V   = a_v * exp(-beta_v * e_V)\n")
    w("#   S_x(N) = min(max(size_knee_b / N, 1)^size_exponent_x, size_clamp_high)      (x = K, V, R = norot; N in billions)\n")
    w("#   g(ctx, alpha) = (max(ctx, ctx_floor) / ctx_floor)^alpha;  alpha_K = min(alpha_k * (size_ref_b / N)^alpha_k_size, alpha_k_max)\n")
    w("#   L_kv  = F_all * (F_K * S_K(N) * a_K * g(ctx, alpha_K) + S_V(N) * a_V * g(ctx, alpha_V))\n")
    w("#   L     = L_weights * S_w(N) + T_task(ctx) * W(bpw) * L_kv;  80% interval: L_w/2 + T*W*L_kv*interval_low .. L_w*2 + T*W*L_kv*interval_high\n")
    w("#\n")
    w(f"# Fit: {metrics['n_fit']} rows from {metrics['n_sources']} sources; ordering within groups "
      f"{metrics['order_agree']}/{metrics['order_pairs']} pairs ({metrics['order_share']:.1%}); leave-one-source-out "
      f"Spearman on relative-PPL rows {metrics['loso_rho']:.3f} ({metrics['loso_n']} rows).\n")
    w("prior:\n")
    w('  source: "tools/fit_priors.py fit to data/priors/measurements.csv (docs/priors.md); starting point the hand-set prior of model version 1 (data/priors/prior.yaml at 1d7ccd2)"\n')
    w("  model_version: 3\n")
    w("  # reference point and fixed choices (not fitted)\n")
    w(line("bits_ref", FIXED["bits_ref"], "eq_bits where e = 0 (q4_0)") + "\n")
    w(line("size_ref_b", FIXED["size_ref_b"], "alpha_K(N) = alpha_k at 7B") + "\n")
    w(line("size_clamp_high", FIXED["size_clamp_high"], "cap of S(N): keeps extrapolation below the smallest measured model (0.35B) finite") + "\n")
    w(line("low_bits", FIXED["low_bits"], "context growth applies at or below this many equivalent bits (4-bit class)") + "\n")
    w(line("alpha_k_max", FIXED["alpha_k_max"], "cap of alpha_K for very small models") + "\n")
    w(line("weight_bpw_high", FIXED["weight_bpw_high"], "W bands (as in the hand-set prior v1)") + "\n")
    w(line("weight_bpw_mid", FIXED["weight_bpw_mid"], "") + "\n")
    w(line("w_high", FIXED["w_high"], "reference: weights at >= 6 bpw") + "\n")
    w(line("weight_loss_ref_b", FIXED["weight_loss_ref_b"], "weight losses are measured on LLaMA-3-8B (PR #6936)") + "\n")
    w(line("band_free", FIXED["band_free"], "risk bands (kvplan's choice, as in the hand-set prior v1): free < 0.5%, mild < 2%, noticeable < 10%, avoid beyond") + "\n")
    w(line("band_mild", FIXED["band_mild"], "") + "\n")
    w(line("band_noticeable", FIXED["band_noticeable"], "") + "\n")
    w(line("beta_k", FIXED["beta_k"], "ln 4, fixed: to second order the loss is proportional to the rounding error's variance, "
           "which falls 4x per equivalent bit (docs/priors.md 1)") + "\n")
    w(line("beta_v", FIXED["beta_k"], "= beta_k") + "\n")
    w("  # fitted (each comment names the rows that calibrate it; ids are measurements.csv ids)\n")
    derived_from = {"a_v": "v_over_k", "size_exponent_v": "size_v_over_k", "w_low": "w_low_ratio"}
    for key, comment in PUBLISHED:
        q = pc.get(key)
        src = pc[derived_from.get(key, key)].rows
        comment = f"{comment}; {src}" if comment else src
        at_bound = q is not None and (abs(p[key] - q.lo) < 1e-6 * max(1, abs(q.lo)) or abs(p[key] - q.hi) < 1e-6 * abs(q.hi))
        w(line(key, p[key], comment + (" (at its bound)" if at_bound else "")) + "\n")
    w(line("interval_low", interval[0], "10th percentile of measured/predicted over the leave-one-source-out predictions of the fitted rows") + "\n")
    w(line("interval_high", interval[1], "90th percentile of the same") + "\n")
    w("\n  # Cache types. bits: storage bits per element (scales included); k_bits / v_bits: Gaussian-equivalent bits\n")
    w("  # (tools/fit_priors.py equivalent_bits(): the q4_0-style block-32 format with the same rms rounding error;\n")
    w("  # 'nominal' = storage bits, quantizer not reproduced). rotation: engine | builtin (see docs/priors.md 1.2).\n")
    w("  types:\n")
    for t in TYPES:
        kb, vb = eq_bits[t.name]
        how = "unquantized" if not t.quantizer and not t.k_of else ("nominal" if t.quantizer not in QUANTIZERS and not t.k_of else "simulated")
        w(f"    - {{type: {t.name}, engine: \"{t.engine}\", bits: {fmt(t.bits)}, k_bits: {fmt(kb)}, v_bits: {fmt(vb)}, "
          f"rotation: {t.rotation}, codebook: {t.codebook}, group: {t.group}, planned: {'true' if t.planned else 'false'}"
          + (", defective: true" if t.defective else "") + "}"
          + (f"   # {how}; {t.source}" if t.source else f"   # {how}") + "\n")
    w("\n  # F_family: F_K multiplies the K term when K has at most k_low_bits_max equivalent bits (rotated / unrotated);\n")
    w("  # all_bits multiplies the whole cache loss whenever a cache is quantized. Families without an entry: 1.\n")
    w("  # k_codebooks: the K codebooks the family's own rows measured; F_K applies to those only.\n")
    w("  families:\n")
    for fam, (kp, ap, kmax, why) in FAMILIES.items():
        kr = p[kp[0]] if kp[0] else 1.0
        kn = p[kp[1]] if kp[1] else 1.0
        ab = p[ap] if ap else 1.0
        rows = "; ".join(pc[x].rows for x in {kp[0], ap} if x)
        books = ", ".join(sorted(FAMILY_CODEBOOKS.get(fam, ()))) if kp[0] else ""
        w(f"    - {{family: {fam}, k_low_bits_max: {fmt(kmax)}, k_low_bits_rot: {fmt(kr)}, k_low_bits_norot: {fmt(kn)}, "
          f"all_bits: {fmt(ab)}, k_codebooks: [{books}],\n       source: \"{why}; fitted to {rows}\"}}\n")
    w("\n  # Measured evidence the explanations cite: for each planned cache pair with a clean measurement, the closest\n")
    w("  # row (generated). kvplan cites the entry that best matches an option's K type, V type, rotation and family.\n")
    w("  measured:\n")
    for e in evidence_rows:
        w(f"    - {{id: {e['id']}, k_type: {e['k']}, v_type: {e['v']}, rotation: \"{e['rot']}\", family: {e['family']}, "
          f"params_b: {fmt(e['params_b'])}, kind: {e['kind']},\n       text: \"{e['text']}\", source: \"{e['source']}\"}}\n")
    w("\n  # Every fitted row as evidence bounds (generated; prior.cpp evidence_bounds, docs/priors.md 1.4): the cells it\n")
    w("  # covers (family, K type and rotation, V type), the fitted prior's L_kv for it (predicted) and loss = predicted x\n")
    w("  # the row's noise-floored measured / predicted ratio (tools/fit_priors.py miss_ratio; loss -1: a context-growth\n")
    w("  # row, coverage only).\n")
    w("  analogs:\n")
    for a in analog_rows:
        w(f"    - {{id: {a['id']}, family: {a['family']}, params_b: {fmt(a['params_b'])}, k_type: {a['k']}, v_type: {a['v']}, "
          f"rot_k: {a['rot_k']}, ctx: {int(a['ctx'])}, loss: {fmt(a['loss'])}, predicted: {fmt(a['predicted'])}, "
          f"upper: {a['upper']}}}\n")
    w("\n")
    w(tail if tail.endswith("\n") else tail + "\n")
    return out.getvalue()


def _legacy_evidence(old: str) -> str:
    i = old.index("  # Evidence the explanations cite")
    return EVIDENCE_MARKER + "\n" + old[i:]


def evidence_entries(rows: list[Row], preds: dict[str, float], eq) -> list[dict]:
    """One entry per measured (K type, V type, rotation) among planned types: the cleanest row."""
    best: dict[tuple, Row] = {}
    order = {"ppl": 0, "kld": 1, "nll": 2, "acc": 3, "ctx_growth": 9}
    for r in rows:
        if r.kind in ("excluded", "ctx_growth") or r.cfg is None:
            continue
        k, v = r.cfg.k_type, r.cfg.v_type
        if not (TYPE[k].planned and TYPE[v].planned) or (TYPE[k].bits >= 16 and TYPE[v].bits >= 16):
            continue
        if "MLA" in r.raw["notes"]:  # an MLA latent cache: not a proxy for separate K and V caches
            continue
        rot = "any" if TYPE[k].rotation == "robust" or TYPE[k].bits >= 16 else ("yes" if rotated(k, r.cfg.rotation, r.cfg.builtin_off) else "no")
        key = (k, v, rot, r.cfg.family)
        cur = best.get(key)
        rank = (order[r.kind], r.base is not None, abs(math.log(r.cfg.params_b / 8)))
        if cur is None or rank < (order[cur.kind], cur.base is not None, abs(math.log(cur.cfg.params_b / 8))):
            best[key] = r
    out = []
    for (k, v, rot, fam), r in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        out.append({"id": r.id, "k": k, "v": v, "rot": rot, "family": fam, "params_b": r.cfg.params_b, "kind": r.kind,
                    "text": _evidence_text(r), "source": _short_source(r.source)})
    return out


def _evidence_text(r: Row) -> str:
    raw = r.raw
    cfg = f"K={r.cfg.k_type} V={r.cfg.v_type}" if raw["v_type"] else f"K={r.cfg.k_type} (V not stated)"
    if "MLA" in raw["notes"] and not raw["v_type"]:
        cfg = f"MLA latent cache {r.cfg.k_type}"
    rot = {"yes": ", rotated", "no": ", unrotated"}.get(raw["rotation"], "")
    w = f", {raw['weights']} weights" if raw["weights"] and raw["weights"] not in ("f16", "bf16") else ""
    ctx = f", {int(float(raw['ctx']))} tokens" if raw["ctx"] else ""
    if r.kind == "ppl":
        fig = f"{float(raw['rel_change']) * 100:+.2f}% perplexity"
    elif r.kind == "kld":
        fig = f"KLD {raw['value']}"
    elif r.kind == "nll":
        fig = f"{float(raw['rel_change']):+.4f} NLL"
    else:
        name = raw["metric"].replace("_pct", "").replace("_acc", "").replace("_min", "").replace("_", " ")
        fig = f"{name} {float(raw['rel_change']) * 100:+.1f}% (relative)"
    noise = ", within its noise" if r.kind != "excluded" and abs(r.m) <= r.nu else ""
    return f"{cfg}: {fig} ({raw['model']}{w}{ctx}{rot}{noise})".replace('"', "'")


def _short_source(s: str) -> str:
    return re.sub(r"\s+", " ", s).replace('"', "'")


def write_residuals(rows: list[Row], model: Model, preds: dict[str, float], loso_preds: dict[str, float], interval,
                    eq_bits) -> str:
    out = io.StringIO()
    cols = ["id", "kind", "reason", "params_b", "family", "k_type", "v_type", "rotation", "builtin_off", "ctx", "swa", "bpw",
            "task_factor", "saturate", "base_k_type", "base_v_type", "base_rotation", "base_ctx", "measured", "noise", "kv_loss",
            "predicted", "log_residual", "loso_predicted", "within_interval", "assumptions"]
    wr = csv.writer(out, lineterminator="\n")
    wr.writerow(cols)
    for r in rows:
        c = r.cfg
        if c is None:
            wr.writerow([r.id, r.kind, r.reason] + [""] * (len(cols) - 3))
            continue
        pred = preds[r.id]
        kv = model.kv_loss(c)
        if r.kind != "excluded":
            res = residual(model, r)
            ratio = miss_ratio(r, pred)
            within = "yes" if interval[0] <= ratio <= interval[1] or (r.upper_bound and ratio >= interval[0]) else "no"
        else:
            res, within = float("nan"), ""
        b = r.base
        wr.writerow([r.id, r.kind, r.reason, repr(c.params_b), c.family, c.k_type, c.v_type, "yes" if c.rotation else "no",
                     "yes" if c.builtin_off else "no", f"{c.ctx:.0f}", "/".join(map(str, c.swa)) if c.swa else "", repr(c.bpw), repr(c.task_factor), "yes" if c.saturate else "no",
                     b.k_type if b else "", b.v_type if b else "", ("yes" if b.rotation else "no") if b else "",
                     f"{b.ctx:.0f}" if b else "",
                     "" if math.isnan(r.m) else f"{r.m:.6g}", f"{r.nu:.3g}" if r.kind != "excluded" else "",
                     f"{kv:.10g}", f"{pred:.10g}", "" if math.isnan(res) else f"{res:.4f}",
                     f"{loso_preds[r.id]:.6g}" if r.id in loso_preds else "", within,
                     "; ".join(r.assumptions)])
    return out.getvalue()


# =====================================================================================================
# main
# =====================================================================================================


def kld_rule_check() -> list[tuple[str, float, float, float]]:
    data = yaml.safe_load(GGUF_QUALITY.read_text())
    out = []
    for f in data["formats"]:
        for kld_key, rel_key in (("kld", "rel_loss"), ("kld_imatrix", "rel_loss_imatrix")):
            if f.get(kld_key) and f.get(rel_key):
                if kld_key == "kld" and f.get("imatrix_only"):
                    continue
                out.append((f["id"] + (" (imatrix)" if "imatrix" in kld_key else ""), f[kld_key], f[rel_key],
                            math.log1p(f[rel_key]) / f[kld_key]))
    return out


def run(check: bool) -> int:
    eq = equivalent_bits()
    eq_bits = type_eq_bits(eq)
    rows = map_rows()
    FAMILY_CODEBOOKS.clear()
    FAMILY_CODEBOOKS.update(family_codebooks(rows, eq_bits))
    model = fit(rows, eq_bits)
    lp = loso(rows, eq_bits, model)
    model = Model(rounded(model.p), eq_bits)
    ppl_rows_all = [r for r in rows if r.kind == "ppl" and r.id in lp]
    rho = spearman([lp[r.id] for r in ppl_rows_all], [r.m for r in ppl_rows_all])
    preds = {r.id: predict(model, r) for r in rows if r.cfg is not None}
    fitted = [r for r in rows if r.kind != "excluded"]
    ppl_rows = [r for r in fitted if r.kind == "ppl"]
    # interval from the leave-one-source-out ratios measured/predicted (noise-floored) of all fitted rows
    ratios = np.array([miss_ratio(r, lp[r.id]) for r in fitted if not r.upper_bound])
    interval = (float(np.quantile(ratios, 0.10)), float(np.quantile(ratios, 0.90)))
    order = ordering(rows, preds)
    order_loso = ordering(rows, {**preds, **lp})
    insample_rho = spearman([preds[r.id] for r in ppl_rows], [r.m for r in ppl_rows])
    metrics = {
        "n_fit": len(fitted), "n_sources": len({r.src for r in fitted}),
        "order_agree": len(order["agree"]), "order_pairs": order["pairs"], "order_share": order["share"],
        "loso_rho": rho, "loso_n": len(ppl_rows),
    }
    ev = evidence_entries(rows, preds, eq_bits)
    new_yaml = write_yaml(model, eq_bits, interval, metrics, ev, analog_entries(rows, model))
    new_res = write_residuals(rows, model, preds, lp, interval, eq_bits)
    new_rep = report(rows, model, preds, lp, interval, order, order_loso, rho, insample_rho, eq, eq_bits)
    if check:
        bad = [p.name for p, new in ((PRIOR_YAML, new_yaml), (RESIDUALS, new_res), (REPORT, new_rep))
               if not p.exists() or p.read_text() != new]
        if bad:
            print("out of date (re-run tools/fit_priors.py):", ", ".join(bad))
            return 1
        print("prior.yaml, fit_residuals.csv and fit_report.md are up to date")
        return 0
    PRIOR_YAML.write_text(new_yaml)
    RESIDUALS.write_text(new_res)
    REPORT.write_text(new_rep)
    print(new_rep)
    return 0


def report(rows, model, preds, lp, interval, order, order_loso, rho, insample_rho, eq, eq_bits) -> str:
    out = io.StringIO()
    w = out.write
    fitted = [r for r in rows if r.kind != "excluded"]
    w("# Fit report (generated by tools/fit_priors.py; docs/priors.md explains it)\n\n")
    w(f"Rows: {len(rows)} in measurements.csv, {len(fitted)} fitted from {len({r.src for r in fitted})} sources, "
      f"{len(rows) - len(fitted)} excluded (reasons in fit_residuals.csv).\n\n")
    kinds: dict[str, int] = {}
    for r in fitted:
        kinds[r.kind] = kinds.get(r.kind, 0) + 1
    w("Fitted rows by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ".\n\n")
    w("## Acceptance\n\n")
    w("| figure | target | result |\n|---|---|---|\n")
    w(f"| pairs ordered like the measurements within groups (source, model, weights, metric, context, baseline), gap > noise | >= 90% | "
      f"**{len(order['agree'])}/{order['pairs']} = {order['share']:.1%}** ({len(order['ties'])} tied predictions counted as misses; "
      f"{order['share_untied']:.1%} of untied pairs) |\n")
    w(f"| the same with each source's rows predicted by the fit without that source | (honesty check) | "
      f"{len(order_loso['agree'])}/{order_loso['pairs']} = {order_loso['share']:.1%} |\n")
    n_ppl = sum(1 for r in fitted if r.kind == "ppl")
    w(f"| leave-one-source-out Spearman, relative-perplexity rows | >= 0.8 | **{rho:.3f}** ({n_ppl} rows) |\n")
    w(f"| in-sample Spearman, same rows | | {insample_rho:.3f} |\n\n")
    ppl = [r for r in fitted if r.kind == "ppl"]
    beyond = [r for r in ppl if abs(r.m) > r.nu]
    lcpp = [r for r in ppl if r.raw["engine"] in ("llama.cpp", "ik_llama.cpp")]
    no_exl = [r for r in ppl if r.src != "exl2doc"]
    w("Leave-one-source-out Spearman on subsets of the relative-perplexity rows (the headline figure is the first):\n\n")
    w("| rows | n | rho |\n|---|---|---|\n")
    for name, sub in (("all", ppl), ("measured change beyond the row's noise", beyond), ("llama.cpp and ik_llama.cpp engines", lcpp),
                      ("without exllamav2 doc/qcache_eval.md", no_exl)):
        w(f"| {name} | {len(sub)} | {spearman([lp[r.id] for r in sub], [r.m for r in sub]):.3f} |\n")
    from scipy.stats import rankdata
    dr = rankdata([lp[r.id] for r in ppl]) - rankdata([r.m for r in ppl])
    tot = float((dr ** 2).sum())
    share: dict[str, float] = {}
    for r, d in zip(ppl, dr):
        share[r.src] = share.get(r.src, 0.0) + d * d / tot
    w("\nShare of the squared rank differences (1 - rho is proportional to their sum), by source: "
      + ", ".join(f"{k} {v:.0%}" for k, v in sorted(share.items(), key=lambda kv: -kv[1]) if v >= 0.01) + ".\n\n")
    w(f"80% interval factors (10th/90th percentile of measured/predicted, leave-one-source-out): "
      f"{interval[0]:.3g} .. {interval[1]:.3g}.\n\n")
    w("## Parameters\n\nFree parameters (fitted; start = the regularisation centre, from the hand-set prior of model version 1 (data/priors/prior.yaml at 1d7ccd2) where it has one):\n\n")
    w("| parameter | start | fitted | calibrated by |\n|---|---|---|---|\n")
    for p in PARAMS:
        w(f"| `{p.name}` | {fmt(p.init)} | {fmt(model.p[p.name])} | {p.rows} |\n")
    w("\nPublished in prior.yaml (derived): " + ", ".join(f"`{k}` = {fmt(model.p[k])}" for k in ("a_v", "size_exponent_v", "w_low")) + ".\n")
    w(f"\nFixed, not fitted: `beta_k` = `beta_v` = {fmt(FIXED['beta_k'])} (ln 4: loss proportional to the rounding error's variance).\n")
    w("\n")
    w("## Equivalent bits of the cache types\n\n| type | engine | storage bits | K eq. bits | V eq. bits | rotation |\n|---|---|---|---|---|---|\n")
    for t in TYPES:
        kb, vb = eq_bits[t.name]
        w(f"| {t.name} | {t.engine} | {fmt(t.bits)} | {fmt(kb)} | {fmt(vb)} | {t.rotation} |\n")
    w("\n## KLD mapping check (PR #6936 weight formats, LLaMA-3-8B): ln(1 + rel PPL) / KLD\n\n")
    chk = kld_rule_check()
    ratios = [c[3] for c in chk]
    w(f"{len(chk)} pairs, median {np.median(ratios):.3f}, range {min(ratios):.3f} .. {max(ratios):.3f}; "
      f"below KLD 0.01: " + ", ".join(f"{c[0]} {c[3]:.2f}" for c in chk if c[1] < 0.01) + ".\n\n")
    # disagreements
    w("## Disagreements: fitted rows whose measured/predicted ratio lies outside the 80% interval\n\n")
    w("| row | config | measured | predicted | ratio | LOSO pred. |\n|---|---|---|---|---|---|\n")
    for r in fitted:
        ratio = miss_ratio(r, preds[r.id])
        if interval[0] <= ratio <= interval[1] or (r.upper_bound and ratio >= interval[0]):
            continue
        c = r.cfg
        w(f"| {r.id} | {r.raw['model']} {c.k_type}/{c.v_type} {'rot' if c.rotation else 'norot'} ctx {c.ctx:g} {r.kind} | "
          f"{r.m:.4g} | {preds[r.id]:.4g} | {ratio:.2f} | {lp.get(r.id, float('nan')):.4g} |\n")
    w(f"\n## Rows mispredicted by more than {MISS_LIMIT:g}x (noise-floored, in the model's unit)\n\n")
    beyond = [r for r in fitted if not 1 / MISS_LIMIT <= miss_ratio(r, preds[r.id]) <= MISS_LIMIT]
    w(f"{len(beyond)} of {len(fitted)} fitted rows" + (":\n\n" if beyond else ".\n"))
    for r in beyond:
        w(f"- {r.id}: ratio {miss_ratio(r, preds[r.id]):.2f} (tests/unit/prior_test.cpp fails)\n")
    w("\n## Ordering disagreements (pairs)\n\n| group | worse by measurement | better by measurement | measured | predicted |\n|---|---|---|---|---|\n")
    for a, b in order["disagree"] + order["ties"]:
        if a.loss_raw < b.loss_raw:
            a, b = b, a
        w(f"| {a.src} {a.raw['model']} {a.raw['metric']} {a.raw['ctx']} | {a.id} {a.raw['k_type']}/{a.raw['v_type']} {a.raw['rotation']} | "
          f"{b.id} {b.raw['k_type']}/{b.raw['v_type']} {b.raw['rotation']} | {a.loss_raw:.4g} vs {b.loss_raw:.4g} | "
          f"{preds[a.id]:.4g} vs {preds[b.id]:.4g} |\n")
    w("\n## Sign checks: rows whose baseline is another quantized cache (excluded from the fit)\n\n")
    w("| row | config vs baseline | measured | predicted (1+L)/(1+L_base)-1 | same sign |\n|---|---|---|---|---|\n")
    for r, base, pred in baseline_checks(rows, model):
        agree = (pred > 0) == (r.loss_raw > 0)
        w(f"| {r.id} | {r.cfg.k_type}/{r.cfg.v_type} vs {base} | {r.loss_raw:+.4g} | {pred:+.4g} | {'yes' if agree else '**no**'} |\n")
    w("\n## Excluded rows\n\n| row | reason |\n|---|---|\n")
    for r in rows:
        if r.kind == "excluded":
            w(f"| {r.id} | {r.reason} |\n")
    return out.getvalue()


BASELINES = {  # row id -> (K, V, rotation) of its quantized baseline, as the row's notes state
    "hariri-01": ("hqq_4", "hqq_2", False), "hariri-02": ("hqq_4", "hqq_2", False), "hariri-03": ("hqq_4", "hqq_2", False),
    "hariri-04": ("hqq_4", "hqq_2", False), "freetoken-01": ("q6_0", "q6_0", False),
    "tqasymx-09": ("q8_0", "turbo3", True), "tq88-01": ("q8_0", "turbo4", False),
}


def baseline_checks(rows: list[Row], model: Model):
    """Predicted sign of rows measured against another quantized cache (K2V4 vs K4V2, rotation on vs off, ...)."""
    out = []
    for r in rows:
        if r.id not in BASELINES or r.cfg is None or math.isnan(r.loss_raw):
            continue
        k, v, rot = BASELINES[r.id]
        base = Config(**{**r.cfg.__dict__, "k_type": k, "v_type": v, "rotation": rot, "saturate": False})
        cfg = Config(**{**r.cfg.__dict__, "saturate": False})
        pred = (1 + model.row(cfg)) / (1 + model.row(base)) - 1
        out.append((r, f"{k}/{v}{' rotated' if rot else ''}", pred))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed outputs instead of writing them")
    args = ap.parse_args()
    return run(args.check)


if __name__ == "__main__":
    sys.exit(main())
