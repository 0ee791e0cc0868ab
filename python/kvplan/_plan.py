"""kvplan.plan() and its result objects. Every number comes from libplanner; this module converts and renders."""

from __future__ import annotations

import dataclasses
import html
import json
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _core
from ._catalog import Model, Task, convert
from ._request import (FLAG_OF_KEYWORD, FlashAttn, GpuLayers, Options, PathLike, Size, catalog, fail, integer, request,
                       signature_checked)

if TYPE_CHECKING:
    import pandas as _pd
    from typing_extensions import Unpack

# The allocation kinds of one option's memory (without "_bytes"): those the JSON's options[].memory counts in
# the device pool, then those that are host memory wherever they are.
DEVICE_KINDS = ("weights", "k_cache", "v_cache", "swa_k_cache", "swa_v_cache", "state", "compute")
MEMORY_KINDS = (*DEVICE_KINDS, "weights_host", "compute_host", "output")
RISKS = ("free", "mild", "noticeable", "avoid")


def json_indent(indent: object) -> int:
    """to_json()'s indent: 0..16 spaces per level, or -1 for one line (the library's dump)."""
    return integer("indent", indent, -1, 16, field="indent")


def gib(n: int) -> str:
    """Bytes as GiB with two decimals, formatted by the library ("18.08")."""
    return _core.format_gib(n)


def loss_text(q: Quality) -> str:
    """'mild (~1.9%)', as the CLI's table writes the risk and the expected loss."""
    pct = q.expected_loss * 100
    if pct < 0.05:
        return f"{q.risk} (<0.1%)"
    return f"{q.risk} (~{pct:.1f}%)" if pct < 10 else f"{q.risk} (~{pct:.0f}%)"


KIND_TITLES = {"k_cache": "K cache", "v_cache": "V cache", "swa_k_cache": "SWA K cache", "swa_v_cache": "SWA V cache"}


def html_table(titles: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[int] = (),
               styles: Sequence[str] = ()) -> str:
    """An HTML table of text cells (escaped); columns in `left` align left, the others right (numbers)."""
    def cell(tag: str, i: int, text: str) -> str:
        return f"<{tag} style='text-align:{'left' if i in left else 'right'}'>{html.escape(text)}</{tag}>"
    head = "".join(cell("th", i, t) for i, t in enumerate(titles))
    body = "".join(f"<tr{styles[r] if r < len(styles) else ''}>" + "".join(cell("td", i, c) for i, c in enumerate(row))
                   + "</tr>" for r, row in enumerate(rows))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("to_dataframe() needs pandas, which is not installed: `pip install pandas` "
                          "(kvplan itself does not depend on it; to_dict() and to_json() work without it)") from None
    return pandas


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One buffer the engine allocates: what, in which pool, its bytes (unpadded; the upper bound of an estimate)."""

    component: str  # "main"
    what: str       # weights | k_cache | v_cache | swa_k_cache | swa_v_cache | state | compute | weights_host | ...
    pool: str       # "gpu0", "host", "unified"
    bytes: int
    unpadded_bytes: int
    high_bytes: int
    accuracy: str   # exact | estimate


@dataclasses.dataclass(frozen=True)
class PoolUsage:
    """One option's use of one pool. headroom_bytes < 0: it does not fit."""

    pool: str
    allocations_bytes: int
    allocations_high_bytes: int
    total_bytes: int       # allocations + runtime overhead, typical: what the device will hold
    total_high_bytes: int  # the same at every upper bound: what the fit check uses
    headroom_bytes: int    # capacity - reserve - margin - total_high (0 for an unbounded pool)


@dataclasses.dataclass(frozen=True)
class Memory:
    """One option's memory in bytes, as the JSON's options[].memory: the device's buffers by kind (weights ..
    compute; with partial offload the layers in RAM are in `allocations`), the host-only buffers, and the device
    pool's overhead, margin and totals."""

    weights_bytes: int
    k_cache_bytes: int
    v_cache_bytes: int
    swa_k_cache_bytes: int
    swa_v_cache_bytes: int
    state_bytes: int
    compute_bytes: int
    weights_host_bytes: int
    compute_host_bytes: int
    output_bytes: int
    overhead_bytes: int       # runtime overhead of the device, typical
    overhead_high_bytes: int  # and its upper bound
    margin_bytes: int
    total_bytes: int
    total_high_bytes: int
    headroom_bytes: int

    @property
    def kv_total_bytes(self) -> int:
        """The cache's bytes on the device: K, V, their sliding-window parts and recurrent state (the JSON's)."""
        return (self.k_cache_bytes + self.v_cache_bytes + self.swa_k_cache_bytes + self.swa_v_cache_bytes
                + self.state_bytes)


@dataclasses.dataclass(frozen=True)
class Quality:
    """The estimated quality cost: fractions of perplexity increase (0.019 = +1.9 %), with an 80 % interval."""

    expected_loss: float
    low: float
    high: float
    kv_loss: float       # the cache's part, before the task factor
    weights_loss: float  # the weights' part
    task_factor: float
    weights_factor: float
    risk: str            # free | mild | noticeable | avoid
    extrapolated: bool   # no measurement of this pair on this family: bounded by the analogs
    analogs: tuple[str, ...]
    evidence: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Pool:
    """A memory pool of the device: what the driver reports and what the plan may use."""

    id: str
    kind: str  # gpu | host | unified
    device: str
    detected: str | None  # gpu="auto": how the device was found ("NVIDIA GeForce RTX 4090 via nvidia-smi")
    backend: str
    bounded: bool
    capacity_bytes: int  # 0: not bounded
    reserve_bytes: int
    overhead_bytes: int
    overhead_high_bytes: int
    margin_bytes: int
    budget_bytes: int | None  # for the plan's own buffers: capacity - reserve - overhead (upper bound) - margin


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What the engine will do with the request, whatever option is chosen."""

    engine: str
    engine_build: str
    engine_id: str  # llama.cpp, ollama, vllm, sglang, exllamav2, exllamav3 or mlx
    memory_fraction: float | None  # vLLM --gpu-memory-utilization / SGLang --mem-fraction-static
    backend: str
    backend_verified: bool
    build: str
    n_parallel: int
    tensor_parallel: int  # GPUs the model is split over (pools then describe one of them)
    kv_unified: bool
    n_ubatch: int
    n_batch: int
    n_outputs_max: int  # logits rows of the reserved batch (llama-server: n_parallel · (1 + n_draft))
    program: str  # llama-server or llama-cli: which program's logits rows and launch line the plan follows
    tensor_split: tuple[float, ...]  # several GPUs: each one's share of the layers, as the launch line gives it
    pipeline_parallel: bool  # several GPUs with every layer offloaded
    swa_full: bool
    gpu_size_only: bool  # gpu= was a size, not a named card
    n_gpu_layers: int | None  # as the launch line gives it (None: all layers)
    n_cpu_moe: int | None     # layers whose experts stay in RAM (-1: all)
    placement: str            # "kvplan" (-ngl N --fit off) or "llama-server --fit"
    fit_target_mib: int | None  # the --fit-target given to llama-server's fit


@dataclasses.dataclass(frozen=True, repr=False)
class Option:
    """One configuration the engine will start: weights, context, K/V types, flash attention, and what it costs."""

    rank: int  # 1 = the recommendation (when the verdict is "ok")
    weights: str
    ctx_size: int      # what -c gets (all slots together)
    ctx_per_slot: int  # the longest one conversation can run
    cache_type_k: str
    cache_type_v: str
    flash_attn: bool
    beyond_native: bool
    below_task_min: bool
    fits: bool
    memory: Memory
    allocations: tuple[Allocation, ...]
    pools: tuple[PoolUsage, ...]
    quality: Quality
    needs: tuple[str, ...]
    warnings: tuple[str, ...]
    reason: str
    launch: dict[str, str]  # every launch line by name, the engine's main one first (the JSON's launch): llama-server,
    #                         llama-cli, ollama-env, modelfile, vllm, tabby-config, ... (launch_line: the main one)
    max_concurrency: float | None  # engines with a shared KV pool: conversations of ctx_size tokens it holds
    decode_tps: float | None  # decode tokens/s of one conversation at full context (bandwidth bound; None: unknown)
    decode_tps_low: float | None  # the same at low bandwidth efficiency
    decode_bound: str | None  # the pool that takes most of the time per token (None: decode_tps is unknown)
    prefill_tps: float | None  # prefill tokens/s of a prompt as long as the context (compute bound; None: unknown)
    ttft_s: float | None  # seconds to the first token of a prompt as long as ctx_per_slot (None: unknown)
    decode_relative: float  # decode speed relative to the same bytes all in device memory (1: nothing in RAM)
    n_gpu_layers: int | None  # kvplan's placement: layers on the GPU as -ngl gives them (None: all)
    n_cpu_moe: int | None  # experts of the first N layers kept in RAM (--n-cpu-moe N; -1: all; None: none)
    score: float  # the ranking objective (docs/ranking.md §5; higher is better)
    plan: Plan = dataclasses.field(compare=False)

    @classmethod
    def _from_core(cls, o: _core.Option, rank: int, plan: Plan, device: _core.Pool) -> Option:
        usage = o.usage(device.id)
        kinds = {f"{k}_bytes": o.sum(k, device.id if k in DEVICE_KINDS else "") for k in MEMORY_KINDS}
        memory = Memory(**kinds, overhead_bytes=device.overhead.bytes, overhead_high_bytes=device.overhead.high,
                        margin_bytes=device.margin, total_bytes=usage.total, total_high_bytes=usage.total_high,
                        headroom_bytes=usage.headroom)
        allocations = tuple(Allocation(a.component, a.what, a.pool, a.figure.bytes, a.figure.unpadded, a.figure.high,
                                       a.figure.accuracy.name) for a in o.allocations)
        pools = tuple(PoolUsage(u.pool, u.allocations, u.allocations_high, u.total, u.total_high, u.headroom)
                      for u in o.pools)
        quality = convert(Quality, o.quality, risk=o.quality.risk.name, analogs=tuple(o.quality.analogs),
                          evidence=tuple(o.quality.evidence))
        return convert(cls, o, rank=rank, fits=o.fits(), memory=memory, allocations=allocations, pools=pools,
                       quality=quality, plan=plan, launch={ln.name: ln.text for ln in o.launches},
                       decode_bound=(o.decode_bound or None) if o.decode_tps else None,  # as the JSON's decode
                       max_concurrency=o.max_concurrency or None, decode_tps=o.decode_tps or None,
                       decode_tps_low=o.decode_tps_low or None, prefill_tps=o.prefill_tps or None,
                       ttft_s=o.ttft_s or None)

    @property
    def launch_line(self) -> str:
        """The engine's main launch line (the first of launch: llama-server's for llama.cpp)."""
        return next(iter(self.launch.values()))

    @property
    def host_bytes(self) -> int:
        """Bytes of this option's allocations in host RAM (the JSON's placement.host_bytes)."""
        return sum(u.allocations_bytes for u in self.pools if u.pool == "host")

    @property
    def placement_text(self) -> str:
        """'--n-cpu-moe 31' or '-ngl 40' when layers or experts stay in RAM, else '' (every layer on the GPU)."""
        parts = []
        if self.n_gpu_layers is not None and 0 <= self.n_gpu_layers <= self.plan.model.layers:
            parts.append(f"-ngl {self.n_gpu_layers}")
        if self.n_cpu_moe is not None:
            parts.append("--cpu-moe" if self.n_cpu_moe < 0 else f"--n-cpu-moe {self.n_cpu_moe}")
        return " ".join(parts)

    @property
    def ctx_text(self) -> str:
        """'32768', or '65536=4x16384' when slots split the context, as the CLI's table writes it."""
        if self.ctx_per_slot == self.ctx_size:
            return str(self.ctx_size)
        return f"{self.ctx_size}={self.plan.resolved.n_parallel}x{self.ctx_per_slot}"

    def to_dict(self) -> dict[str, Any]:
        """This option as the JSON contract has it (an element of Plan.to_dict()["options"])."""
        option: dict[str, Any] = self.plan.to_dict()["options"][self.rank - 1]
        return option

    def to_dataframe(self) -> _pd.DataFrame:
        """One row per allocation: component, what, pool, bytes, unpadded_bytes, high_bytes, accuracy."""
        pd = _pandas()
        columns = [f.name for f in dataclasses.fields(Allocation)]
        df = pd.DataFrame([dataclasses.asdict(a) for a in self.allocations], columns=columns)
        return df.astype({"bytes": "int64", "unpadded_bytes": "int64", "high_bytes": "int64"})

    def __repr__(self) -> str:
        fits = "" if self.fits else ", DOES NOT FIT"
        placed = f", {self.placement_text}" if self.placement_text else ""
        return (f"<kvplan.Option #{self.rank}: {self.weights}, {self.ctx_text} tokens, K={self.cache_type_k} "
                f"V={self.cache_type_v}, FA {'on' if self.flash_attn else 'off'}{placed}, total "
                f"{gib(self.memory.total_bytes)} GiB, headroom {gib(self.memory.headroom_bytes)} GiB, "
                f"{loss_text(self.quality)}{fits}>")

    def _repr_html_(self) -> str:
        e = html.escape
        rows = [[a.what, a.pool, f"{a.bytes:,}", gib(a.bytes), gib(a.high_bytes), a.accuracy] for a in self.allocations]
        bounded = {p.id: p.bounded for p in self.plan.pools}
        rows += [[f"{u.pool} total", "", f"{u.total_bytes:,}", gib(u.total_bytes), gib(u.total_high_bytes),
                  f"headroom {gib(u.headroom_bytes)} GiB" if bounded[u.pool] else "not bounded"] for u in self.pools]
        table = html_table(["allocation", "pool", "bytes", "GiB", "upper GiB", "kind"], rows, left=(0, 1, 5),
                           styles=[""] * len(self.allocations) + [" style='font-weight:bold'"] * len(self.pools))
        q = self.quality
        notes = "".join(f"<li>{e(n)}</li>" for n in (*self.needs, *self.warnings, *q.evidence))
        placed = f", placement {e(self.placement_text)}" if self.placement_text else ""
        speed = [f"decode ~{self.decode_tps:.1f} tokens/s"] if self.decode_tps else []
        speed += [f"first token after ~{self.ttft_s:.1f} s"] if self.ttft_s else []
        return (f"<div><p><b>Option #{self.rank}</b>: {e(self.weights)} weights, {self.ctx_text} tokens, "
                f"K={e(self.cache_type_k)} V={e(self.cache_type_v)}, "
                f"flash attention {'on' if self.flash_attn else 'off'}{placed}"
                f" — {'fits' if self.fits else '<b>does not fit</b>'}; {e(self.reason)}</p>{table}"
                f"<p>Quality: {e(loss_text(q))}, 80% interval {q.low:.3%} .. {q.high:.3%}"
                f"{'; ' + ', '.join(speed) if speed else ''}</p>"
                f"{f'<ul>{notes}</ul>' if notes else ''}<pre>{e(self.launch_line)}</pre></div>")


@dataclasses.dataclass(frozen=True)
class SuggestedOption:
    """The option a suggestion's request gets, as the JSON's suggestions[].option has it."""

    weights: str
    ctx_size: int
    ctx_per_slot: int
    cache_type_k: str
    cache_type_v: str
    flash_attn: bool
    risk: str  # free | mild | noticeable | avoid
    expected_loss: float
    decode_tps: float | None  # None: unknown (a bare size names no bandwidth)
    n_gpu_layers: int | None
    n_cpu_moe: int | None
    launch: str


@dataclasses.dataclass(frozen=True, repr=False)
class Suggestion:
    """A verified alternative: a changed request that the library re-planned and found acceptable.

    ``args`` are kvplan's command-line arguments for it (``kvplan *args`` prints its plan); ``replan()`` plans it
    here, and its recommendation is ``option``.
    """

    summary: str  # one line: what changes and what it gives
    args: tuple[str, ...]  # kvplan's command-line arguments for the changed request
    option: SuggestedOption  # what that request recommends

    @classmethod
    def _from_core(cls, s: _core.Suggestion, index: int, plan: Plan) -> Suggestion:
        o = s.option
        option = SuggestedOption(o.weights, o.ctx_size, o.ctx_per_slot, o.cache_type_k, o.cache_type_v, o.flash_attn,
                                 o.quality.risk.name, o.quality.expected_loss, o.decode_tps or None, o.n_gpu_layers,
                                 o.n_cpu_moe, o.launch)
        out = cls(s.summary, tuple(s.args), option)
        object.__setattr__(out, "_core", s)  # not fields: the request to re-plan, and where the JSON has it
        object.__setattr__(out, "_at", (plan, index))
        return out

    def replan(self) -> Plan:
        """The suggested request planned again: the same plan as `kvplan *args` (its recommendation is `option`)."""
        core: _core.Suggestion = self.__dict__["_core"]
        plan: Plan = self.__dict__["_at"][0]
        return Plan(_core.plan(plan._catalog, core.request), plan._catalog)

    def to_dict(self) -> dict[str, Any]:
        """This suggestion as the JSON contract has it (an element of Plan.to_dict()["suggestions"])."""
        plan, index = self.__dict__["_at"]
        suggestion: dict[str, Any] = plan.to_dict()["suggestions"][index]
        return suggestion

    def __repr__(self) -> str:
        return f"<kvplan.Suggestion: {self.summary}>"


class Plan:
    """The planner's answer: ranked options (best first), the device's pools, and why.

    ``to_json()`` is byte-identical to ``kvplan --json`` for the same request (schema/plan.schema.json).
    """

    model: Model
    task: Task
    resolved: Resolved
    pools: tuple[Pool, ...]
    options: tuple[Option, ...]
    mode: str  # rank | max_context | best_types | single
    warnings: tuple[str, ...]
    nothing_fits: str | None  # why nothing fits, and what would (None when an option fits)
    explanation: tuple[str, ...]
    fits: bool
    verdict: str  # ok | nothing_acceptable | nothing_fits
    nothing_acceptable: str | None  # options fit but every one rates "avoid": why (None otherwise)
    suggestions: tuple[Suggestion, ...]  # verified alternatives (nothing acceptable or fits; a pinned plan)

    def __init__(self, core: _core.Plan, catalog: _core.Catalog) -> None:
        self._core = core
        self._catalog = catalog
        self.model = Model._from_core(core.model)
        self.task = Task._from_core(core.task)
        self.resolved = convert(Resolved, core.resolved, memory_fraction=core.resolved.memory_fraction or None,
                                fit_target_mib=core.resolved.fit_target_mib or None)
        self.pools = tuple(convert(Pool, p, detected=p.detected or None, bounded=p.bounded(), capacity_bytes=p.capacity, reserve_bytes=p.reserve,
                                   overhead_bytes=p.overhead.bytes, overhead_high_bytes=p.overhead.high,
                                   margin_bytes=p.margin, budget_bytes=p.budget() if p.bounded() else None)
                           for p in core.pools)
        device = core.pools[0]
        self.options = tuple(Option._from_core(o, i + 1, self, device) for i, o in enumerate(core.options))
        self.mode = core.mode
        self.warnings = tuple(core.warnings)
        self.nothing_fits = core.nothing_fits or None
        self.explanation = tuple(core.explanation)
        self.fits = core.fits()
        self.verdict = core.verdict
        self.nothing_acceptable = core.nothing_acceptable or None
        self.suggestions = tuple(Suggestion._from_core(x, i, self) for i, x in enumerate(core.suggestions))

    @property
    def recommended(self) -> Option | None:
        """The first option when the verdict is "ok" (it fits and does not rate avoid), else None."""
        return self.options[0] if self.verdict == "ok" and self.fits else None

    @property
    def device(self) -> Pool:
        """The device's pool (the GPU, or the unified memory)."""
        return self.pools[0]

    @signature_checked("Plan.to_json()")
    def to_json(self, indent: int = 2) -> str:
        """The plan as JSON, written by the library: byte-identical to `kvplan --json` for the same request.

        indent: spaces per level, 0..16 (-1: one line)."""
        return _core.to_json(self._core, json_indent(indent))

    def to_dict(self) -> dict[str, Any]:
        """json.loads(to_json()): the JSON contract as Python values."""
        result: dict[str, Any] = json.loads(self.to_json())
        return result

    def to_dataframe(self) -> _pd.DataFrame:
        """One row per option (rank, types, context, memory in bytes, loss, risk, fits, reason, launch_line)."""
        pd = _pandas()
        rows = []
        for o in self.options:
            row: dict[str, Any] = {"rank": o.rank, "weights": o.weights, "ctx_size": o.ctx_size,
                                   "ctx_per_slot": o.ctx_per_slot, "cache_type_k": o.cache_type_k,
                                   "cache_type_v": o.cache_type_v, "flash_attn": o.flash_attn}
            row.update(dataclasses.asdict(o.memory))
            row.update(expected_loss=o.quality.expected_loss, loss_low=o.quality.low, loss_high=o.quality.high,
                       risk=o.quality.risk, fits=o.fits, n_gpu_layers=o.n_gpu_layers, n_cpu_moe=o.n_cpu_moe,
                       score=o.score, reason=o.reason, launch_line=o.launch_line)
            rows.append(row)
        columns = ["rank", "weights", "ctx_size", "ctx_per_slot", "cache_type_k", "cache_type_v", "flash_attn",
                   *(f.name for f in dataclasses.fields(Memory)), "expected_loss", "loss_low", "loss_high", "risk",
                   "fits", "n_gpu_layers", "n_cpu_moe", "score", "reason", "launch_line"]
        df = pd.DataFrame(rows, columns=columns)
        ints = {c: "int64" for c in ("rank", "ctx_size", "ctx_per_slot", *(f.name for f in dataclasses.fields(Memory)))}
        floats = {c: "float64" for c in ("expected_loss", "loss_low", "loss_high", "score")}
        df = df.astype({**ints, **floats, "flash_attn": "bool", "fits": "bool", "n_gpu_layers": "Int64", "n_cpu_moe": "Int64",
                        "risk": pd.CategoricalDtype(RISKS, ordered=True)})
        return df.set_index("rank")

    # ---- rendering ----
    def _header(self) -> list[tuple[str, str]]:
        m, d, t = self.model, self.device, self.task
        where = d.device if self.resolved.gpu_size_only else f"{d.device} = {gib(d.capacity_bytes)} GiB"
        return [("Model", f"{m.name} ({_core.model_shape(self._core.model)})"),
                ("Device", where),
                ("Budget", f"{gib(d.budget_bytes or 0)} GiB for the plan's buffers, after reserve "
                           f"{gib(d.reserve_bytes)}, runtime overhead up to {gib(d.overhead_high_bytes)} and margin "
                           f"{gib(d.margin_bytes)}"),
                ("Engine", f"{self.resolved.engine} {self.resolved.engine_build}, {self.resolved.backend} backend"),
                ("Task", f"{t.name}: wants {t.ctx_target} tokens (at least {t.ctx_min})")]

    def _device_kinds(self) -> list[str]:
        """Allocation kinds in the device pool of any option, in the library's order."""
        seen: list[str] = []
        for o in self.options:
            for a in o.allocations:
                if a.pool == self.device.id and a.what not in seen:
                    seen.append(a.what)
        return seen

    def __repr__(self) -> str:
        verdict = {"ok": "fits", "nothing_acceptable": "NOTHING ACCEPTABLE"}.get(self.verdict, "NOTHING FITS")
        lines = [f"<kvplan.Plan mode={self.mode}, {verdict}: {self.model.name} on "
                 f"{self.device.device}, task {self.task.id}"]
        cols = ("#", "weights", "ctx", "K", "V", "FA", "total GiB", "headroom", "risk (est. loss)")
        rows = [(str(o.rank), o.weights, o.ctx_text, o.cache_type_k, o.cache_type_v, "on" if o.flash_attn else "off",
                 gib(o.memory.total_bytes), gib(o.memory.headroom_bytes), loss_text(o.quality)) for o in self.options]
        widths = [max(len(r[i]) for r in (cols, *rows)) for i in range(len(cols))]
        left = {1, 3, 4, 5, 8}
        for r in (cols, *rows):
            lines.append("  " + "  ".join(c.ljust(w) if i in left else c.rjust(w)
                                          for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if self.recommended:
            lines.append("  " + self.recommended.launch_line)
        elif self.nothing_acceptable:
            lines.append("  nothing acceptable: " + self.nothing_acceptable)
        elif self.nothing_fits:
            lines.append("  nothing fits: " + self.nothing_fits)
        lines += [f"  suggestion: {x.summary}" for x in self.suggestions]
        return "\n".join(lines) + ">"

    def _repr_html_(self) -> str:
        e = html.escape
        kinds = self._device_kinds()
        head = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:left'>{e(v)}</td></tr>"
                       for k, v in self._header())
        titles = ["#", "weights", "ctx", "K", "V", "FA", *(KIND_TITLES.get(k, k) for k in kinds), "overhead", "total",
                  "headroom", "risk (est. loss)", "reason"]
        rows = [[str(o.rank), o.weights, o.ctx_text, o.cache_type_k, o.cache_type_v, "on" if o.flash_attn else "off",
                 *(gib(getattr(o.memory, f"{k}_bytes")) for k in kinds), gib(o.memory.overhead_bytes),
                 gib(o.memory.total_bytes), gib(o.memory.headroom_bytes), loss_text(o.quality), o.reason]
                for o in self.options]
        n = len(titles)
        table = html_table(titles, rows, left=(1, 3, 4, 5, n - 2, n - 1),
                           styles=["" if o.fits else " style='color:#b00'" for o in self.options])
        out = (f"<div><table>{head}</table>{table}"
               "<p style='font-size:smaller'>Sizes in GiB (2<sup>30</sup> bytes); total and headroom include the "
               "runtime overhead; headroom counts every estimate at its upper bound.</p>")
        rec = self.recommended
        if rec:
            out += (f"<p><b>Recommended</b> #1: {e(rec.weights)} weights, {rec.ctx_text} tokens, "
                    f"K={e(rec.cache_type_k)} V={e(rec.cache_type_v)}, {e(loss_text(rec.quality))}</p>"
                    f"<pre>{e(rec.launch_line)}</pre>")
            if self.explanation:
                out += "<p>Why</p><ul>" + "".join(f"<li>{e(x)}</li>" for x in self.explanation) + "</ul>"
        elif self.nothing_acceptable:
            out += f"<p><b>Nothing acceptable</b>: {e(self.nothing_acceptable)}.</p>"
        else:
            out += f"<p><b>Nothing fits</b>: {e(self.nothing_fits or '')}.</p>"
        if self.suggestions:
            out += "<p>Suggestions (each re-planned)</p><ul>" + "".join(
                f"<li>{e(x.summary)}<br><code>kvplan {e(shlex.join(x.args))}</code></li>" for x in self.suggestions) + "</ul>"
        out += "".join(f"<p>Warning: {e(w)}</p>" for w in (*(rec.warnings if rec else ()), *self.warnings))
        return out + "</div>"


@signature_checked("kvplan.plan()")
def plan(gpu: str | Sequence[str] | None = None, model: PathLike | None = None, task: str | None = None, *,
         weights: str | None = None, ctx_size: int | str | None = None, cache_type_k: str | None = None,
         cache_type_v: str | None = None, flash_attn: FlashAttn | None = None, n_parallel: int | None = None,
         tensor_parallel: int | None = None, fit_placement: bool | None = None,
         fit_target_mib: int | None = None, n_outputs_max: int | None = None,
         model_draft: PathLike | None = None, weights_draft: str | None = None,
         cache_type_k_draft: str | None = None, cache_type_v_draft: str | None = None,
         n_gpu_layers_draft: int | None = None, draft_max: int | None = None, mmproj: PathLike | None = None,
         mmproj_offload: bool | None = None, tensor_split: Sequence[float] | None = None,
         split_mode: str | None = None, host_bandwidth_gbs: float | None = None,
         override_tensors: Sequence[str] | None = None, kv_unified: bool | None = None, n_ubatch: int | None = None, n_batch: int | None = None,
         swa_full: bool | None = None, n_gpu_layers: GpuLayers | None = None, cpu_moe: bool | None = None,
         n_cpu_moe: int | None = None, rope_scaling: str | None = None,
         rope_scale: float | None = None, yarn_orig_ctx: int | None = None, engine: str | None = None,
         backend: str | None = None, build: str | None = None, allow_slow: bool | None = None,
         reserve: Size | None = None, free: Size | None = None, host_ram: Size | None = None,
         top: int | None = None, max_ctx: bool | None = None, accept_risk: bool | None = None,
         program: str | None = None, pipeline_parallel_size: int | None = None, data_parallel: int | None = None,
         expert_parallel: bool | None = None, nodes: int | None = None, interconnect: str | None = None,
         max_num_seqs: int | None = None, concurrency: int | None = None, max_batched_tokens: int | None = None,
         rpc_servers: str | Sequence[str] | None = None,
         data: PathLike | Sequence[PathLike] | None = None) -> Plan:
    """Plan weights, context and K/V cache types for a model on a GPU: what `kvplan` prints.

    gpu: a catalog name ("rtx4090", "RTX 3090") or a size ("24GB" = 24 GiB), or "auto" for this machine's GPUs
    (free="auto": what is free on them now; README "--gpu auto"). model: a catalog name, alias or
    Hugging Face id, a GGUF file name ("Qwen3-8B-Q6_K.gguf", model and weights), or the path of a GGUF file,
    config.json or model folder, read as the CLI reads it (see read_model), or a Hub repo id ("owner/repo",
    "owner/repo-GGUF:Q4_K_M"), an https://…/file.gguf URL or an Ollama tag ("qwen2.5-coder:32b"), read over
    HTTP header only (docs/remote.md). task: general (default), agentic,
    coding, rag, chat, summarization, creative, reasoning.

    The other keywords are the CLI's flags with llama.cpp's names (ctx_size is -c, cache_type_k -ctk,
    n_parallel -np (vLLM --max-num-seqs), tensor_parallel --tensor-parallel-size (vLLM, SGLang), kv_unified -kvu,
    n_ubatch -ub, n_batch -b, n_gpu_layers -ngl); flash_attn takes
    "on" | "off" | "auto" or a bool; reserve, free and host_ram take "1.5GB" (binary units) or bytes; data
    takes one directory or a list (after those in KVPLAN_DATA); host_ram is --ram, cpu_moe --cpu-moe. None keeps
    the CLI's default.

    Serving at scale (vLLM, SGLang; docs/engines.md "Serving at scale") takes the JSON request's names:
    pipeline_parallel_size, data_parallel, expert_parallel, nodes, interconnect, max_num_seqs, concurrency
    (full-length conversations the pool must hold) and max_batched_tokens; llama.cpp across machines takes
    rpc_servers (["host:port=rtx3090", ...], or the CLI's comma-separated --rpc text).

    Pinning cache_type_k and cache_type_v, or max_ctx=True (--max-ctx: every setting not pinned free), asks for
    the largest context (mode "max_context"); pinning ctx_size asks for the best types (mode "best_types");
    pinning everything sizes one configuration ("single"). When the model does not fit the GPU for the task,
    kvplan keeps layers or MoE experts in host RAM (host_ram: its size; Option.n_gpu_layers / n_cpu_moe).

    Plan.verdict is "ok" (recommended is the first option), "nothing_acceptable" (options fit but every one rates
    "avoid" for the task; accept_risk=True takes the least bad) or "nothing_fits"; either of the last two has
    recommended None and verified Plan.suggestions. Raises InputError (a ValueError) for bad input.
    """
    given = dict(locals())
    cat = catalog(given.pop("data"))
    return Plan(_core.plan(cat, request(cat, **given)), cat)


@signature_checked("kvplan.breakdown()", Options.__optional_keys__)
def breakdown(gpu: str, model: PathLike, *, weights: str, ctx_size: int | str, cache_type_k: str, cache_type_v: str,
              **options: Unpack[Options]) -> Option:
    """The memory breakdown and quality of one fully pinned configuration, whether it fits or not (see Option.fits).

    The placement is pinned too: every layer on the GPU (-ngl all) unless n_gpu_layers, n_cpu_moe or cpu_moe
    says otherwise, so a configuration too big for the device does not fit rather than moving layers to RAM.
    """
    for keyword, value in (("weights", weights), ("ctx_size", ctx_size), ("cache_type_k", cache_type_k),
                           ("cache_type_v", cache_type_v)):
        if value is None:  # a pinned configuration: None would leave it free
            fail(FLAG_OF_KEYWORD[keyword], "", "is required by kvplan.breakdown() (one pinned configuration; "
                 "kvplan.plan() ranks the free ones)")
    if all(options.get(k) is None for k in ("n_gpu_layers", "n_cpu_moe", "cpu_moe")):
        options["n_gpu_layers"] = "all"
    p = plan(gpu, model, weights=weights, ctx_size=ctx_size, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
             **options)
    return p.options[0]


@signature_checked("kvplan.max_context()", Options.__optional_keys__)
def max_context(gpu: str, model: PathLike, *, cache_type_k: str | None = None, cache_type_v: str | None = None,
                weights: str | None = None, **options: Unpack[Options]) -> Plan:
    """The inverse query: the largest context (mode "max_context"), as `kvplan --max-ctx`.

    Whatever is not pinned is free: with nothing pinned, the largest context over every weight format, cache
    type pair, flash attention setting and placement; with cache_type_k and cache_type_v (and weights), the
    largest context each option reaches with those. ``max_context(...).recommended.ctx_per_slot`` is the answer
    in tokens per conversation (recommended is None when nothing fits or every option rates "avoid"; the
    options are still there).
    """
    return plan(gpu, model, cache_type_k=cache_type_k, cache_type_v=cache_type_v, weights=weights, max_ctx=True,
                **options)
