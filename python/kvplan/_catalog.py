"""The catalog as Python values: models, GPUs, tasks, engines, cache types and weight formats."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _core
from ._request import PathLike, arch_engine, catalog, fail, integer, signature_checked, text
from ._request import path as checked_path

T = TypeVar("T")


def convert(cls: type[T], core: object, **given: Any) -> T:
    """cls (a dataclass) from the _core object whose attributes have the same names; lists become tuples."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in given:
            continue
        v = getattr(core, f.name)
        values[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**values, **given)


@dataclass(frozen=True)
class RopeScaling:
    type: str
    factor: float
    orig_ctx: int


@dataclass(frozen=True)
class SlidingWindow:
    window: int    # tokens (n_swa; the chunk size of chunked attention)
    pattern: int   # layer il is sliding iff il % pattern < pattern - 1
    chunked: bool  # chunked attention (Llama 4): the same cache size, another mask


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention: the cache holds the compressed latent and the rope part of K."""

    kv_lora_rank: int
    rope_dim: int
    legacy: bool  # a GGUF without MLA metadata: llama.cpp caches full K and V


@dataclass(frozen=True)
class Recurrent:
    """Recurrent state (f32 per sequence, independent of context): Mamba, RWKV, gated delta-net, LFM2."""

    kind: str
    d_conv: int
    d_inner: int
    d_state: int
    n_group: int
    head_size: int


@dataclass(frozen=True)
class Moe:
    experts: int
    experts_used: int
    expert_ff: int
    shared_ff: int


@dataclass(frozen=True)
class Model:
    """A model: a catalog entry (data/models/*.yaml) or one read from a file. Field names follow the C++ ModelSpec."""

    id: str
    name: str
    hf_id: str
    arch: str
    family: str
    params: int
    layers: int
    embd: int
    heads: int
    kv_heads: int
    head_dim_k: int
    head_dim_v: int
    ff: int
    vocab: int
    tied_embeddings: bool
    ctx_native: int
    ctx_extended: int  # 0: no documented rope-scaled maximum
    max_ctx: int
    rope_scaling: RopeScaling | None
    swa: SlidingWindow | None
    moe: Moe | None
    mla: Mla | None
    recurrent: Recurrent | None
    aliases: tuple[str, ...]
    source: str
    note: str
    license: str                     # an id of data/licenses.yaml (what what_fits(license=) filters by); "" read from a file
    license_source: str              # where the license is stated
    file_format: str | None          # read from a GGUF: its weight format
    file_paths: tuple[str, ...]      # read from a file: every file (GGUF splits), else empty
    fields_used: tuple[str, ...]     # read from config.json: the fields read
    fields_assumed: tuple[str, ...]  # and those assumed

    @classmethod
    def _from_core(cls, m: _core.ModelSpec) -> Model:
        model = convert(cls, m, max_ctx=m.max_ctx(), file_format=m.file_format or None,
                        rope_scaling=convert(RopeScaling, m.rope_scaling) if m.rope_scaling else None,
                        swa=convert(SlidingWindow, m.swa) if m.swa else None,
                        moe=convert(Moe, m.moe) if m.moe else None,
                        mla=convert(Mla, m.mla) if m.mla else None,
                        recurrent=convert(Recurrent, m.recurrent) if m.recurrent else None)
        object.__setattr__(model, "_spec", m)  # for to_json(); not a field
        return model

    @signature_checked("Model.to_json()")
    def to_json(self, indent: int = 2) -> str:
        """What kvplan knows of the model, written by the library: `kvplan inspect --json` (indent: 0..16; -1: one line)."""
        spec: _core.ModelSpec = self.__dict__["_spec"]
        return _core.model_to_json(spec, integer("indent", indent, -1, 16, field="indent"))


@dataclass(frozen=True)
class Gpu:
    """A catalog device (data/gpus.yaml): total_mib is what its driver reports."""

    id: str
    name: str
    vendor: str
    backend: str
    memory_kind: str  # dedicated | unified
    arch: str
    total_mib: int
    working_set_mib: int  # unified memory: the limit the backend enforces (0 otherwise)
    bandwidth_gbs: float
    aliases: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Task:
    """A task profile (data/tasks.yaml): the context it wants, how strictly it punishes loss, and the speed it needs."""

    id: str
    name: str
    metric: str
    summary: str
    ctx_target: int
    ctx_min: int
    aliases: tuple[str, ...]
    source: str
    decode_floor_tps: float  # decode tokens/s of one conversation below which the task is not usable
    ttft_max_s: float | None  # the longest time to the first token of a prompt as long as the context (None: no floor)
    speed_source: str  # why those floors

    @classmethod
    def _from_core(cls, t: _core.TaskProfile) -> Task:
        return convert(cls, t, ttft_max_s=t.ttft_max_s or None)


@dataclass(frozen=True)
class Engine:
    """An inference engine and what it accepts (data/engines/; `kvplan engines`)."""

    id: str
    name: str
    kind: str                             # llama.cpp, ollama, vllm, sglang, exllamav2, exllamav3, mlx
    version: str                          # the build or release kvplan's rules were read from
    cache_types: tuple[str, ...]          # what cache_type_k / cache_type_v accept
    cache_types_offered: tuple[str, ...]  # what the planner tries when nothing is pinned
    same_type_kv: bool                    # one cache type for K and V
    weight_formats: tuple[str, ...]       # the engine's own formats (empty: GGUF, as llama.cpp)
    rules: tuple[str, ...]

    @classmethod
    def _from_core(cls, e: _core.EngineSpec | _core.RuntimeProfile) -> Engine:
        if isinstance(e, _core.EngineSpec):
            return cls(e.id, e.name, "llama.cpp", f"{e.build_name}, as vendored by {e.vendored_by}", tuple(e.cache_types),
                       tuple(e.cache_types_offered), False, (), ())
        return cls(e.id, e.name, e.kind, e.version, tuple(t.id for t in e.cache_types),
                   tuple(t.id for t in e.cache_types if t.offered), e.same_type_kv, tuple(f.id for f in e.weight_formats),
                   tuple(e.rules))


@dataclass(frozen=True)
class WeightFormat:
    """A GGUF weight format (data/weights/): measured loss and size on the reference model."""

    id: str
    base_type: str
    rel_loss: float  # perplexity increase vs f16 on the reference model, as a fraction
    rel_loss_estimate: bool
    bpw_llama31_8b: float
    offered: bool  # enumerated when --weights is not given
    source: str
    quality_source: str


@signature_checked("kvplan.models()")
def models(data: PathLike | Sequence[PathLike] | None = None) -> list[Model]:
    """Every model in the catalog (`kvplan models`)."""
    return [Model._from_core(m) for m in catalog(data).models]


@signature_checked("kvplan.gpus()")
def gpus(data: PathLike | Sequence[PathLike] | None = None) -> list[Gpu]:
    """Every GPU in the catalog (`kvplan gpus`)."""
    return [convert(Gpu, g) for g in catalog(data).gpus]


@signature_checked("kvplan.tasks()")
def tasks(data: PathLike | Sequence[PathLike] | None = None) -> list[Task]:
    """Every task profile (the values of task=)."""
    return [Task._from_core(t) for t in catalog(data).tasks]


@signature_checked("kvplan.engines()")
def engines(data: PathLike | Sequence[PathLike] | None = None) -> list[Engine]:
    """Every engine kvplan plans for (`kvplan engines`): llama.cpp first, then Ollama, vLLM, SGLang, ExLlama, MLX."""
    cat = catalog(data)
    return [Engine._from_core(e) for e in cat.engines] + [Engine._from_core(e) for e in cat.runtimes]


def _lookup_name(field: str, name: object, required: str) -> str:
    """A name to look up in the catalog: checked and bounded before the library matches it (did-you-mean)."""
    value = text(field.lstrip("-").replace("-", "_"), name, field=field)
    if not value:
        fail(field, "", f"is required ({required})")
    return value


@signature_checked("kvplan.engine()")
def engine(name: str, data: PathLike | Sequence[PathLike] | None = None) -> Engine:
    """One engine by id or alias (engine= of kvplan.plan); InputError with a suggestion when unknown."""
    name = _lookup_name("--engine", name, "an engine such as llama.cpp, ollama or vllm")
    cat = catalog(data)
    runtime = cat.runtime(name, "--engine")
    return Engine._from_core(runtime if runtime is not None else cat.engine(name, "--engine"))


@signature_checked("kvplan.cache_types()")
def cache_types(engine: str = "llama.cpp", data: PathLike | Sequence[PathLike] | None = None) -> list[str]:
    """The K/V cache types the engine accepts (the values of cache_type_k and cache_type_v)."""
    engine = _lookup_name("--engine", engine, "an engine such as llama.cpp, ollama or vllm")
    cat = catalog(data)
    runtime = cat.runtime(engine, "--engine")
    return [t.id for t in runtime.cache_types] if runtime is not None else list(cat.engine(engine, "--engine").cache_types)


@signature_checked("kvplan.weight_formats()")
def weight_formats(data: PathLike | Sequence[PathLike] | None = None) -> list[WeightFormat]:
    """Every GGUF weight format the catalog knows (the values of weights=)."""
    return [convert(WeightFormat, f) for f in catalog(data).weight_formats]


@signature_checked("kvplan.model()")
def model(name: str, data: PathLike | Sequence[PathLike] | None = None) -> Model:
    """One model by id, alias, display name or Hugging Face id; InputError with a suggestion when unknown."""
    name = _lookup_name("--model", name, "a catalog name such as qwen2.5-coder-32b")
    return Model._from_core(catalog(data).model(name, "--model"))


@signature_checked("kvplan.read_model()")
def read_model(path: PathLike, engine: str | None = None, data: PathLike | Sequence[PathLike] | None = None) -> Model:
    """A model read from a GGUF file (split files followed), a config.json or a folder holding one: `kvplan inspect`.

    Only the header of a GGUF is read. kvplan.plan(model=path) plans for the same model. A Hub repo id
    ("owner/repo", "owner/repo-GGUF:Q4_K_M"), a GGUF URL or an Ollama tag is read over HTTP, header only
    (docs/remote.md).
    """
    name = _core.Request().engine if engine is None else \
        _lookup_name("--engine", engine, "an engine such as llama.cpp, ollama or vllm")
    if isinstance(path, str) and not os.path.exists(path) and _core.is_remote_model(path):
        cat = catalog(data)
        remote = _core.load_remote_model(path, cat, arch_engine(cat, name))
        if remote is not None:
            return Model._from_core(remote)
    file = checked_path("model", path, "the path of a GGUF file, config.json or model folder")
    cat = catalog(data)
    # model files are read with llama.cpp's architecture table whatever the engine
    return Model._from_core(_core.load_model_file(file, cat, arch_engine(cat, name)))


@signature_checked("kvplan.gpu()")
def gpu(name: str, data: PathLike | Sequence[PathLike] | None = None) -> Gpu:
    """One GPU by id, alias or name; InputError with a suggestion when unknown."""
    name = _lookup_name("--gpu", name, "a GPU name such as rtx4090")
    return convert(Gpu, catalog(data).gpu(name, "--gpu"))
