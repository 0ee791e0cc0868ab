"""Keyword arguments → kvplan::Request, and the catalog the request is planned against. Parsing only."""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import operator
import os
import reprlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypedDict, TypeVar, Union, cast

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
    # Serving at scale (vLLM, SGLang; docs/engines.md "Serving at scale"): the names of the JSON request
    pipeline_parallel_size: int | None  # --pipeline-parallel-size: stages, each holding a share of the layers
    data_parallel: int | None  # --data-parallel-size: replicas of the model
    expert_parallel: bool | None  # --enable-expert-parallel: MoE experts split over the GPUs instead of sharded
    nodes: int | None  # machines the tp x pp x dp GPUs are spread over, in equal shares
    interconnect: str | None  # the link between nodes (data/interconnects.yaml id; default ib-ndr)
    max_num_seqs: int | None  # vLLM --max-num-seqs / SGLang --max-running-requests (default: n_parallel, else the engine's)
    concurrency: int | None  # full-length conversations the KV pool must hold at once (default 1)
    max_batched_tokens: int | None  # vLLM --max-num-batched-tokens / SGLang --chunked-prefill-size
    rpc_servers: str | Sequence[str] | None  # llama.cpp --rpc: "host:port=DEVICE" each (a list, or the CLI's comma list)
    fit_placement: bool | None  # --fit on: llama-server's fit places the layers, with kvplan's --fit-target
    fit_target_mib: int | None  # --fit-target: MiB llama-server's fit keeps free (needs fit_placement)
    n_outputs_max: int | None  # logits rows per batch (llama-server: n_parallel; a library context: n_batch)
    program: str | None  # llama-server (default) or llama-cli: the program whose logits rows and launch line the plan follows
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
    ctx_size: int | str | None
    cache_type_k: str | None
    cache_type_v: str | None
    max_ctx: bool | None  # --max-ctx: the largest context, every setting not pinned free (mode "max_context")


# The CLI's flag for each keyword: InputError.field names the flag, InputError.keyword the keyword.
FLAG_OF_KEYWORD: Mapping[str, str] = {
    "gpu": "--gpu", "model": "--model", "task": "--task", "weights": "--weights", "ctx_size": "--ctx-size",
    "cache_type_k": "--cache-type-k", "cache_type_v": "--cache-type-v", "flash_attn": "--flash-attn",
    "n_parallel": "--parallel", "tensor_parallel": "--tensor-parallel-size", "fit_placement": "--fit",
    "fit_target_mib": "--fit-target", "kv_unified": "--kv-unified", "n_ubatch": "--ubatch-size",
    "n_batch": "--batch-size", "n_outputs_max": "--n-outputs-max", "program": "--program", "model_draft": "--model-draft",
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
    "pipeline_parallel_size": "--pipeline-parallel-size", "data_parallel": "--data-parallel-size",
    "expert_parallel": "--enable-expert-parallel", "nodes": "--nodes", "interconnect": "--interconnect",
    "max_num_seqs": "--max-num-seqs", "concurrency": "--concurrency", "max_batched_tokens": "--max-num-batched-tokens",
    "rpc_servers": "--rpc",
}
# ... and the fields the library spells otherwise (the CLI's second name of a flag, a request field's own name)
KEYWORD_OF_FLAG: Mapping[str, str] = {**{flag: keyword for keyword, flag in FLAG_OF_KEYWORD.items()},
                                      "--draft-max": "draft_max", "backend": "backend"}

# The validation boundary: every keyword of the Python API is checked here, before anything reaches the library,
# and refused with kvplan.InputError naming the keyword's flag, the value, what is accepted and, where one is
# close, a suggestion. Text is bounded before anything matches it against the catalog (edit distance is
# quadratic in the length).
MAX_NAME = 256  # characters in a name: model, GPU, task, engine, cache type, weight format, ...
MAX_PATH = 4096  # characters in a path (Linux PATH_MAX)
MAX_PATTERN = 1024  # characters in one --override-tensor PATTERN=DEVICE
MAX_DEVICES = 16  # GPUs of one plan (as the library's 2x24GB)
MAX_ITEMS = 256  # entries of a list keyword (override_tensors, data)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1  # the library's int
MAX_BYTES = 1 << 60  # 1 EiB: a size beyond this is not memory

_ITEMS_SHOWN = reprlib.Repr()
_ITEMS_SHOWN.maxstring = _ITEMS_SHOWN.maxother = 60
_ITEMS_SHOWN.maxlist = _ITEMS_SHOWN.maxtuple = _ITEMS_SHOWN.maxdict = _ITEMS_SHOWN.maxset = 4
_ITEMS_SHOWN.maxlong = 40


def flag(keyword: str) -> str:
    """The CLI's flag for a keyword (InputError.field), or the keyword itself when the CLI has none."""
    return FLAG_OF_KEYWORD.get(keyword, keyword)


def shown(value: object) -> str:
    """A value as an error message shows it: text as given (escaped when not printable), other values as repr,
    either cut to 80 characters with the full length said."""
    if isinstance(value, str):
        text = value if len(value) <= 80 else value[:80]
        if not text.isprintable():
            text = text.encode("unicode_escape", "backslashreplace").decode("ascii")
        return text if len(value) <= 80 else f"{text}… ({len(value):,} characters)"
    try:
        text = _ITEMS_SHOWN.repr(value)
    except Exception:  # noqa: BLE001  (a value whose repr fails is still named by its type)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:80] + "…"


def fail(field: str, value: str, problem: str, accepted: Sequence[str] = (), suggestion: str = "") -> NoReturn:
    """Raise kvplan.InputError through the library, so the message is composed as the CLI's are."""
    _core.raise_input_error(field, value, problem, list(accepted), suggestion)
    raise AssertionError("unreachable")  # raise_input_error always raises


def closest(wanted: str, candidates: Sequence[str]) -> str:
    """The library's did-you-mean: the closest candidate by edit distance, or "" (wanted is bounded first)."""
    return _core.closest_match(wanted, list(candidates)) if len(wanted) <= MAX_NAME else ""


def _type(value: object) -> str:
    return type(value).__name__


def _text(field: str, value: str, limit: int, what: str) -> str:
    if len(value) > limit:
        fail(field, shown(value), f"is {len(value):,} characters long; {what} has at most {limit:,}")
    if "\0" in value:
        fail(field, shown(value), "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fail(field, shown(value), "is not valid Unicode text (it holds a lone surrogate)")
    return value


def text(keyword: str, value: object, what: str = "a name", *, field: str | None = None, limit: int = MAX_NAME) -> str:
    """A name-like keyword: a str of at most `limit` characters, without NUL or lone surrogates."""
    f = field or flag(keyword)
    if not isinstance(value, str):
        fail(f, shown(value), f"must be a string ({what}), not {_type(value)}")
    return _text(f, value, limit, what)


def _fspath(f: str, value: object) -> object:
    """os.fspath of a path-like object; one whose __fspath__ returns something else is bad input, not a TypeError."""
    if not isinstance(value, os.PathLike):
        return value
    try:
        return os.fspath(value)
    except TypeError as e:
        fail(f, shown(value), f"is a path-like object whose __fspath__ does not give a str ({e})")
    raise AssertionError("unreachable")  # fail() raises


def path(keyword: str, value: object, what: str = "a path", *, field: str | None = None) -> str:
    """A path keyword: str or os.PathLike (of str), at most MAX_PATH characters."""
    f = field or flag(keyword)
    value = _fspath(f, value)
    if not isinstance(value, str):
        fail(f, shown(value), f"must be {what} (str or os.PathLike), not {_type(value)}")
    return _text(f, value, MAX_PATH, what)


def integer(keyword: str, value: object, lo: int = INT_MIN, hi: int = INT_MAX, *, field: str | None = None) -> int:
    """A whole number (int, or anything with __index__ such as numpy's integers; not bool, not float)."""
    f = field or flag(keyword)
    if isinstance(value, bool):
        fail(f, shown(value), "must be a whole number (int), not a bool")
    try:
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        fail(f, shown(value), f"must be a whole number (int), not {_type(value)}")
    if not lo <= n <= hi:
        fail(f, shown(value), f"is out of range: must be {lo}..{hi}")
    return n


def boolean(keyword: str, value: object) -> bool:
    """True or False (numpy's bool_ too); not 0/1, not a string."""
    if isinstance(value, bool):
        return value
    if type(value).__name__ == "bool_" and type(value).__module__ == "numpy":
        return bool(value)
    fail(flag(keyword), shown(value), f"must be True or False, not {_type(value)}", ["True", "False"])


def number(keyword: str, value: object, *, field: str | None = None) -> float:
    """A finite real number (int or float; not bool, not a string)."""
    f = field or flag(keyword)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f, shown(value), f"must be a number, not {_type(value)}")
    try:
        x = float(value)
    except OverflowError:
        fail(f, shown(value), "is too large for a number")
    if not math.isfinite(x):
        fail(f, shown(value), "must be a finite number")
    return x


def tokens(keyword: str, value: object) -> int:
    """A token count: a whole number, or text the library parses as the CLI does ("32k", "128K", "8192")."""
    if isinstance(value, str):
        f = flag(keyword)
        return _core.parse_token_count(_text(f, value, 64, "a token count"), f)
    return integer(keyword, value)


def size(keyword: str, value: object) -> int:
    """A size: text the library parses ("1.5GB", binary units) or a whole number of bytes, 0 .. 1 EiB."""
    f = flag(keyword)
    if isinstance(value, str):
        return _core.parse_size(_text(f, value, 64, "a size"), f)
    accepted = ["24GB", "1.5GB", "512MiB", "a whole number of bytes"]
    if isinstance(value, bool) or isinstance(value, float) or not hasattr(value, "__index__"):
        fail(f, shown(value), f"must be a size such as '1.5GB' or a whole number of bytes, not {_type(value)}", accepted)
    n = operator.index(value)
    if n < 0:
        fail(f, shown(value), "must not be negative", accepted)
    if n > MAX_BYTES:
        fail(f, shown(value), "is more than 1 EiB", accepted)
    return n


def looks_like_path(value: str) -> bool:
    """What the CLI reads as a path, not a name (cli/args.cpp looks_like_path): a catalog name never looks so."""
    return (value.startswith(("/", "./", "../", "~")) or value.endswith(".json")
            or (value.endswith(".gguf") and "/" in value))


def model_name_or_file(keyword: str, value: object) -> str:
    """model / model_draft: a catalog name (at most MAX_NAME characters) or the path of an existing file or folder."""
    f = flag(keyword)
    value = _fspath(f, value)
    if not isinstance(value, str):
        fail(f, shown(value), f"must be a model name or a path (str or os.PathLike), not {_type(value)}")
    if not value and keyword == "model_draft":  # "" is not "no draft" (leave the keyword out for that)
        fail(f, "", "is empty: give a draft model (a catalog name, GGUF file name or path), or leave it out")
    if len(value) > MAX_PATH:
        fail(f, shown(value), f"is {len(value):,} characters long; a model name has at most {MAX_NAME} characters "
                              f"and a path {MAX_PATH:,}")
    _text(f, value, MAX_PATH, "a path")
    if value and os.path.exists(value):
        return value
    if keyword == "model" and _core.is_remote_model(value):  # a Hub repo, GGUF URL or Ollama tag (kvplan/remote.hpp)
        return value
    if looks_like_path(value) or (os.sep != "/" and os.sep in value):
        fail(f, value, "no such file")
    if len(value) > MAX_NAME:
        fail(f, shown(value), f"is {len(value):,} characters long; a model name has at most {MAX_NAME} (and no file "
                              "of that name exists)")
    return value


def gpus(value: object) -> list[str]:
    """gpu: a name or size, or a list of them (several GPUs, as --gpu repeated)."""
    if isinstance(value, str):
        return [text("gpu", value, "a GPU name or a size such as 24GB")]
    if not isinstance(value, (list, tuple)):
        fail("--gpu", shown(value), f"must be a GPU name or a size such as '24GB' (str), or a list of them, not {_type(value)}")
    if not value:
        fail("--gpu", "", "is required (a GPU name such as rtx4090, or a size such as 24GB; or --gpu auto to detect this machine's GPU)")
    if len(value) > MAX_DEVICES:
        fail("--gpu", f"{len(value)} GPUs", f"a plan has at most {MAX_DEVICES} devices")
    return [text("gpu", g, "a GPU name or a size such as 24GB") for g in value]


def paths(keyword: str, value: object, what: str) -> list[str]:
    """One path or a list of them (data)."""
    if isinstance(value, (str, os.PathLike)):
        return [path(keyword, value, what)]
    if not isinstance(value, (list, tuple)):
        fail(flag(keyword), shown(value), f"must be {what} (str or os.PathLike) or a list of them, not {_type(value)}")
    if len(value) > MAX_ITEMS:
        fail(flag(keyword), f"{len(value)} entries", f"takes at most {MAX_ITEMS}")
    return [path(keyword, v, what) for v in value]


def tensor_split(value: object) -> list[float]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        fail("--tensor-split", shown(value), f"must be a list of numbers such as [3, 1], not {_type(value)}")
    if len(value) > MAX_DEVICES:
        fail("--tensor-split", f"{len(value)} values", f"needs one value per GPU (at most {MAX_DEVICES})")
    shares = [number("tensor_split", x) for x in value]
    for x in shares:
        if x < 0:
            fail("--tensor-split", shown(x), "needs non-negative proportions, not all zero")
    return shares


def override_tensors(value: object) -> list[str]:
    if isinstance(value, str):
        given = value
        value = [o for o in value.split(",") if o]
        if not value:  # "" or ",": not "no overrides" (leave the keyword out for that)
            fail("--override-tensor", shown(given), "needs PATTERN=DEVICE, e.g. exps=CPU")
    if not isinstance(value, (list, tuple)):
        fail("--override-tensor", shown(value), f"must be 'PATTERN=DEVICE' (str) or a list of them, not {_type(value)}")
    if len(value) > MAX_ITEMS:
        fail("--override-tensor", f"{len(value)} overrides", f"takes at most {MAX_ITEMS}")
    return [text("override_tensors", o, "a PATTERN=DEVICE override", limit=MAX_PATTERN) for o in value]


def rpc_servers(value: object) -> list[str]:
    """rpc_servers: "host:port=DEVICE" entries, a list or the CLI's comma-separated --rpc text. As the CLI reads
    it, an empty entry is kept for the library to refuse by name."""
    if isinstance(value, str):
        value = _text("--rpc", value, MAX_PATTERN * 4, "host:port=DEVICE entries").split(",") if value else []
    if not isinstance(value, (list, tuple)):
        fail("--rpc", shown(value), f"must be 'host:port=DEVICE' (str) or a list of them, not {_type(value)}")
    if len(value) > MAX_DEVICES:
        fail("--rpc", f"{len(value)} hosts", f"takes at most {MAX_DEVICES}")
    return [text("rpc_servers", h, "a host:port=DEVICE entry", limit=MAX_PATTERN) for h in value]


def gpu_layers(value: object) -> int:
    """n_gpu_layers: an int, or "all" / "auto" as the CLI reads -ngl all / auto."""
    accepted = ["99", "all", "auto", "-1"]
    if isinstance(value, str):
        if value in ("all", "auto"):
            return -1
        word = text("n_gpu_layers", value)
        fail("--n-gpu-layers", word, "not a layer count", accepted, closest(word, ["all", "auto"]))
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        fail("--n-gpu-layers", shown(value), f"not a layer count: an int, 'all' or 'auto', not {_type(value)}", accepted)
    return integer("n_gpu_layers", value)


def flash_attn(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if not isinstance(value, str):
        fail("--flash-attn", shown(value), f"must be 'on', 'off', 'auto' or a bool, not {_type(value)}", ["on", "off", "auto"])
    return text("flash_attn", value)


_NAMES = {"task": "a task name", "weights": "a weight format", "cache_type_k": "a cache type",
          "cache_type_v": "a cache type", "split_mode": "a split mode", "rope_scaling": "a rope scaling type",
          "engine": "an engine name", "program": "a program name", "backend": "a backend name", "build": "a build name",
          "weights_draft": "a weight format", "cache_type_k_draft": "a cache type", "cache_type_v_draft": "a cache type",
          "interconnect": "an interconnect id"}
_TOKENS = ("ctx_size",)
_INTS = ("n_parallel", "tensor_parallel", "fit_target_mib", "n_outputs_max", "n_gpu_layers_draft",
         "draft_max", "n_ubatch", "n_batch", "yarn_orig_ctx", "top", "n_cpu_moe", "pipeline_parallel_size",
         "data_parallel", "nodes", "max_num_seqs", "concurrency", "max_batched_tokens")
_FLOATS = ("host_bandwidth_gbs", "rope_scale")
_BOOLS = ("fit_placement", "mmproj_offload", "kv_unified", "swa_full", "allow_slow", "max_ctx", "accept_risk", "cpu_moe",
          "expert_parallel")
_SIZES = ("reserve", "free", "host_ram")


def checked(given: dict[str, object]) -> dict[str, object]:
    """Each keyword of kvplan.plan() (but data) checked and converted to what kvplan::Request holds; None dropped."""
    out: dict[str, object] = {}
    for keyword, value in given.items():
        if value is None:
            continue
        if keyword in _NAMES:
            out[keyword] = text(keyword, value, _NAMES[keyword])
        elif keyword in _TOKENS:
            out[keyword] = tokens(keyword, value)
        elif keyword in _INTS:
            out[keyword] = integer(keyword, value)
        elif keyword in _FLOATS:
            out[keyword] = number(keyword, value)
        elif keyword in _BOOLS:
            out[keyword] = boolean(keyword, value)
        elif keyword in _SIZES:
            out[keyword] = size(keyword, value)
        elif keyword in ("model", "model_draft"):
            out[keyword] = model_name_or_file(keyword, value)
        elif keyword == "mmproj":
            out[keyword] = path(keyword, value, "the path of a vision projector GGUF")
        elif keyword == "gpu":
            out[keyword] = gpus(value)
        elif keyword == "tensor_split":
            out[keyword] = tensor_split(value)
        elif keyword == "override_tensors":
            out[keyword] = override_tensors(value)
        elif keyword == "rpc_servers":
            out[keyword] = rpc_servers(value)
        elif keyword == "n_gpu_layers":
            out[keyword] = gpu_layers(value)
        elif keyword == "flash_attn":
            out[keyword] = flash_attn(value)
        else:
            raise RuntimeError(f"kvplan internal error: no check for keyword {keyword}")  # a new keyword needs one
    if out.get("cpu_moe") and "n_cpu_moe" in out:  # as the CLI reads --cpu-moe and --n-cpu-moe N
        fail("--cpu-moe", "", "give either --cpu-moe or --n-cpu-moe N, not both")
    n_cpu_moe = out.get("n_cpu_moe")
    if isinstance(n_cpu_moe, int) and n_cpu_moe < 0:
        fail("--n-cpu-moe", str(n_cpu_moe), "must be a layer count")
    if out.pop("cpu_moe", False):
        out["n_cpu_moe"] = -1
    if out.get("mmproj_offload") is False and "mmproj" not in out:
        fail("--no-mmproj-offload", "", "needs --mmproj FILE")
    return out


def data_dirs(data: object) -> list[str]:
    """KVPLAN_DATA (colon-separated) first, then `data`, as the CLI orders KVPLAN_DATA and --data."""
    dirs = [path("data", d, "a data directory", field="KVPLAN_DATA")
            for d in os.environ.get("KVPLAN_DATA", "").split(":") if d]
    return dirs if data is None else dirs + paths("data", data, "a data directory")


def catalog(data: object = None) -> _core.Catalog:
    """The built-in catalog, merged with the data directories when there are any."""
    dirs = data_dirs(data)
    return _core.load_catalog(dirs) if dirs else _core.builtin_catalog()


def arch_engine(cat: _core.Catalog, engine: str) -> str:
    """The engine whose architecture table reads model files: llama.cpp's for every engine but a llama.cpp build."""
    return "llama.cpp" if cat.runtime(engine, "--engine") is not None else engine


def request(cat: _core.Catalog, **given: object) -> _core.Request:
    """A kvplan::Request with each given keyword set; None leaves the library's default.

    A model that names an existing file or folder (GGUF, config.json, a snapshot folder) is read as the CLI
    reads --model PATH.
    """
    free_auto = given.get("free") == "auto"  # --free auto: what is free now on this machine's GPUs
    if free_auto:
        given = {**given, "free": None}
    values = checked(given)
    gpu_auto = values.get("gpu") == ["auto"]  # --gpu auto: this machine's GPUs (cli/gpu_detect.hpp)
    if "auto" in values.get("gpu", []) and not gpu_auto:  # type: ignore[operator]
        fail("--gpu", "auto", "detects every GPU of this machine; give it alone, not with other --gpu values")
    if free_auto and "gpu" not in values:
        fail("--free", "auto", "needs --gpu (auto, or the GPU's name) to know which devices it applies to")
    req = _core.Request()
    files = arch_engine(cat, str(values.get("engine", req.engine)))
    model = values.get("model")
    if isinstance(model, str) and model and os.path.exists(model):
        req.model_spec = _core.load_model_file(model, cat, files)
    elif isinstance(model, str) and model:
        req.model_spec = _core.load_remote_model(model, cat, files)  # None: a catalog name
    draft = values.pop("model_draft", None)
    if isinstance(draft, str):
        if draft and os.path.exists(draft):
            req.model_draft_spec = _core.load_model_file(draft, cat, files, "--model-draft")
        req.model_draft = draft
    projector = values.pop("mmproj", None)
    if isinstance(projector, str):
        req.mmproj = _core.load_projector_file(projector, cat)
    devices = values.pop("gpu", None)
    if isinstance(devices, list):
        values["gpu"] = devices[0]
        req.extra_gpus = devices[1:]
    # vLLM/SGLang admit n_parallel sequences: an explicit 1 is kept (max_num_seqs 1), as the CLI keeps --parallel 1
    if values.get("n_parallel") == 1 and "max_num_seqs" not in values and values.get("engine") in ("vllm", "sglang"):
        values["max_num_seqs"] = 1
    if "host_ram" in values:  # where it came from, as the plan says (the CLI's flag)
        req.host_ram_source = FLAG_OF_KEYWORD["host_ram"]
    for keyword, value in values.items():
        try:
            setattr(req, keyword, value)
        except TypeError as e:  # checked() converts every keyword: this is kvplan's own mistake
            raise RuntimeError(f"kvplan internal error: {keyword}={shown(value)} was checked but not accepted ({e})") from None
    if gpu_auto or free_auto:
        req = _core.apply_gpu_detection(cat, req, gpu_auto, free_auto)
    return req


# ---- the signature check of every public function: unknown keywords and wrong argument counts are InputErrors

F = TypeVar("F", bound=Callable[..., Any])


def signature_checked(name: str, extra: Collection[str] = ()) -> Callable[[F], F]:
    """Check a call's arguments against the function's signature before it runs: an unknown keyword (with the
    closest one as suggestion), too many positional arguments, a keyword given twice or a required one missing
    raise InputError instead of TypeError. `extra`: the keywords a **options parameter takes."""
    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters
        method = next(iter(params), "") == "self"
        named = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        positional = [n for n, p in params.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [n for n, p in params.items() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        accepted = [n for n in named if n != "self"] + [k for k in extra if k not in named]
        shown_positional = [n for n in positional if n != "self"]

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) > len(positional):
                fail(name, f"{len(args) - method} positional arguments",
                     f"takes at most {len(shown_positional)} ({', '.join(shown_positional) or 'none'}); give the others as keywords")
            for keyword in kwargs:
                if keyword not in accepted:
                    near = difflib.get_close_matches(keyword, accepted, 1) if len(keyword) <= MAX_NAME else []
                    fail(name, shown(keyword), "unknown keyword argument", accepted, near[0] if near else "")
                if keyword in positional[:len(args)]:
                    fail(flag(keyword), shown(kwargs[keyword]), f"is given twice to {name}: as an argument and as {keyword}=")
            for keyword in required[len(args):]:
                if keyword not in kwargs:
                    fail(flag(keyword), "", f"is required by {name}")
            return fn(*args, **kwargs)
        return cast(F, call)
    return decorate
