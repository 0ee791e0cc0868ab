"""Keyword arguments → kvplan::Request, and the catalog the request is planned against. Parsing only."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, Union

from . import _core

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

PathLike: TypeAlias = Union[str, "os.PathLike[str]"]
Size: TypeAlias = Union[str, int]  # "24GB" (binary units, as the CLI reads them) or bytes
FlashAttn: TypeAlias = Union[Literal["on", "off", "auto"], bool]
GpuLayers: TypeAlias = Union[int, Literal["all", "auto"]]


class Options(TypedDict, total=False):
    """The keywords of kvplan.plan() that breakdown(), max_context() and the plots pass on to it unchanged."""

    task: str | None
    flash_attn: FlashAttn | None
    n_parallel: int | None
    tensor_parallel: int | None  # vLLM/SGLang: GPUs of the kind gpu= names to split the model over
    fit_placement: bool | None  # --fit on: llama-server's fit places the layers, with kvplan's --fit-target
    fit_target_mib: int | None  # --fit-target: MiB llama-server's fit keeps free (needs fit_placement)
    n_outputs_max: int | None  # logits rows per batch (llama-server: n_parallel; a library context: n_batch)
    tensor_split: Sequence[float] | None  # several GPUs: each one's share of the layers (default: by free memory)
    split_mode: str | None  # several GPUs: layer (default) or none
    host_bandwidth_gbs: float | None  # host memory bandwidth for the speed estimate (default 60 GB/s)
    override_tensors: Sequence[str] | None  # llama.cpp -ot: "PATTERN=DEVICE" each (CPU, CUDA0, …)
    model_draft: PathLike | None  # speculative decoding: a draft model (catalog name, GGUF file name or path)
    weights_draft: str | None  # the draft's GGUF format when it is a catalog model (default Q8_0)
    cache_type_k_draft: str | None  # -ctkd
    cache_type_v_draft: str | None  # -ctvd
    n_gpu_layers_draft: int | None  # -ngld
    draft_max: int | None  # tokens drafted per step (default 3)
    mmproj: PathLike | None  # a vision projector GGUF (--mmproj)
    mmproj_offload: bool | None  # False keeps the projector in RAM (--no-mmproj-offload)
    kv_unified: bool | None
    n_ubatch: int | None
    n_batch: int | None
    swa_full: bool | None
    n_gpu_layers: GpuLayers | None
    cpu_moe: bool | None
    n_cpu_moe: int | None
    rope_scaling: str | None
    rope_scale: float | None
    yarn_orig_ctx: int | None
    engine: str | None
    backend: str | None
    build: str | None
    allow_slow: bool | None
    reserve: Size | None
    free: Size | None
    host_ram: Size | None  # --ram: host RAM for layers or experts kept there (default: the planner's stated assumption)
    top: int | None
    accept_risk: bool | None  # --accept-risk: recommend the least bad option even when every one rates "avoid"
    data: PathLike | Sequence[PathLike] | None


class PlanOptions(Options, total=False):
    """Every keyword of kvplan.plan() but gpu and model; None (or leaving one out) keeps the library's default."""

    weights: str | None
    ctx_size: int | None
    cache_type_k: str | None
    cache_type_v: str | None
    max_ctx: bool | None  # --max-ctx: the largest context, every setting not pinned free (mode "max_context")


# The CLI's flag for each keyword: InputError.field names the flag, InputError.keyword the keyword.
FLAG_OF_KEYWORD: Mapping[str, str] = {
    "gpu": "--gpu", "model": "--model", "task": "--task", "weights": "--weights", "ctx_size": "--ctx-size",
    "cache_type_k": "--cache-type-k", "cache_type_v": "--cache-type-v", "flash_attn": "--flash-attn",
    "n_parallel": "--parallel", "tensor_parallel": "--tensor-parallel-size", "fit_placement": "--fit",
    "fit_target_mib": "--fit-target", "kv_unified": "--kv-unified", "n_ubatch": "--ubatch-size",
    "n_batch": "--batch-size", "n_outputs_max": "--n-outputs-max", "model_draft": "--model-draft",
    "weights_draft": "--weights-draft", "cache_type_k_draft": "--cache-type-k-draft",
    "cache_type_v_draft": "--cache-type-v-draft", "n_gpu_layers_draft": "--n-gpu-layers-draft",
    "draft_max": "--spec-draft-n-max", "mmproj": "--mmproj", "mmproj_offload": "--no-mmproj-offload",
    "tensor_split": "--tensor-split", "split_mode": "--split-mode", "host_bandwidth_gbs": "--ram-bandwidth",
    "override_tensors": "--override-tensor",
    "swa_full": "--swa-full", "n_gpu_layers": "--n-gpu-layers", "cpu_moe": "--cpu-moe", "n_cpu_moe": "--n-cpu-moe",
    "rope_scaling": "--rope-scaling", "rope_scale": "--rope-scale", "yarn_orig_ctx": "--yarn-orig-ctx",
    "engine": "--engine", "backend": "--backend", "build": "--build", "allow_slow": "--allow-slow",
    "reserve": "--reserve", "free": "--free", "host_ram": "--ram", "top": "--top", "data": "--data",
    "max_ctx": "--max-ctx", "accept_risk": "--accept-risk",
}
KEYWORD_OF_FLAG: Mapping[str, str] = {flag: keyword for keyword, flag in FLAG_OF_KEYWORD.items()}

_SIZES = ("reserve", "free", "host_ram")


def data_dirs(data: PathLike | Sequence[PathLike] | None) -> list[str]:
    """KVPLAN_DATA (colon-separated) first, then `data`, as the CLI orders KVPLAN_DATA and --data."""
    dirs = [d for d in os.environ.get("KVPLAN_DATA", "").split(":") if d]
    if data is None:
        return dirs
    given = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    return dirs + [os.fspath(d) for d in given]


def catalog(data: PathLike | Sequence[PathLike] | None = None) -> _core.Catalog:
    """The built-in catalog, merged with the data directories when there are any."""
    dirs = data_dirs(data)
    return _core.load_catalog(dirs) if dirs else _core.builtin_catalog()


def _size(keyword: str, value: Size) -> int:
    if isinstance(value, str):
        return _core.parse_size(value, FLAG_OF_KEYWORD[keyword])
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{keyword} must be a size such as '1GB' or a number of bytes, not {type(value).__name__}")
    return value


def _gpu_layers(value: GpuLayers) -> int:
    if value in ("all", "auto"):  # as the CLI reads -ngl all / auto
        return -1
    if isinstance(value, bool) or not isinstance(value, int):
        _core.raise_input_error("--n-gpu-layers", str(value), "not a layer count", ["99", "all", "-1"])
    return value


def _cpu_moe(cpu_moe: object, n_cpu_moe: object) -> object:
    """Request.n_cpu_moe from cpu_moe= and n_cpu_moe=, as the CLI reads --cpu-moe and --n-cpu-moe N."""
    if cpu_moe and n_cpu_moe is not None:
        _core.raise_input_error("--cpu-moe", "", "give either --cpu-moe or --n-cpu-moe N, not both")
    if cpu_moe:
        return -1
    if isinstance(n_cpu_moe, int) and not isinstance(n_cpu_moe, bool) and n_cpu_moe < 0:
        _core.raise_input_error("--n-cpu-moe", str(n_cpu_moe), "must be a layer count")
    return n_cpu_moe  # a wrong type is reported when it is set


def request(cat: _core.Catalog, **given: object) -> _core.Request:
    """A kvplan::Request with each given keyword set; None leaves the library's default.

    A model that names an existing file or folder (GGUF, config.json, a snapshot folder) is read as the CLI
    reads --model PATH.
    """
    req = _core.Request()
    model = given.get("model")
    if isinstance(model, os.PathLike):
        model = given["model"] = os.fspath(model)
    if isinstance(model, str) and model and os.path.exists(model):
        name = str(given.get("engine") or req.engine)
        # model files are read with llama.cpp's architecture table whatever the engine
        req.model_spec = _core.load_model_file(model, cat, "llama.cpp" if cat.runtime(name, "--engine") else name)
    arch_engine = str(given.get("engine") or req.engine)
    arch_engine = "llama.cpp" if cat.runtime(arch_engine, "--engine") else arch_engine
    draft = given.pop("model_draft", None)
    if draft is not None:
        draft = os.fspath(draft)  # type: ignore[call-overload]
        if os.path.exists(draft):
            req.model_draft_spec = _core.load_model_file(draft, cat, arch_engine)
        req.model_draft = draft
    projector = given.pop("mmproj", None)
    if projector is not None:
        req.mmproj = _core.load_projector_file(os.fspath(projector), cat)  # type: ignore[call-overload]
    gpu = given.get("gpu")
    if isinstance(gpu, (list, tuple)):  # several GPUs, as --gpu repeated
        if not gpu:
            _core.raise_input_error("--gpu", "", "is required (a GPU name such as rtx4090, or a size such as 24GB)")
        given["gpu"] = gpu[0]
        req.extra_gpus = [str(g) for g in gpu[1:]]
    overrides = given.get("override_tensors")
    if isinstance(overrides, str):
        given["override_tensors"] = [o for o in overrides.split(",") if o]
    elif isinstance(overrides, (list, tuple)):
        given["override_tensors"] = [str(o) for o in overrides]
    split = given.get("tensor_split")
    if isinstance(split, (list, tuple)):
        given["tensor_split"] = [float(x) for x in split]
    given["n_cpu_moe"] = _cpu_moe(given.pop("cpu_moe", None), given.get("n_cpu_moe"))
    for keyword, value in given.items():
        if value is None:
            continue
        if keyword in _SIZES:
            value = _size(keyword, value)  # type: ignore[arg-type]
            if keyword == "host_ram":  # where it came from, as the plan says (the CLI's flag)
                req.host_ram_source = FLAG_OF_KEYWORD[keyword]
        elif keyword == "flash_attn" and isinstance(value, bool):
            value = "on" if value else "off"
        elif keyword == "n_gpu_layers":
            value = _gpu_layers(value)  # type: ignore[arg-type]
        try:
            setattr(req, keyword, value)
        except TypeError:
            raise TypeError(f"{keyword}={value!r}: wrong type ({type(value).__name__})") from None
    return req
