"""Plots of plans (matplotlib, optional): memory against context, the risk of the ranked options, and the quality
against speed of the models that fit (quality_vs_speed).

Every number plotted comes from the library (kvplan.breakdown, kvplan.max_context, kvplan.plan); this module
only converts bytes to GiB for the axes and draws. Each function returns the matplotlib Figure; pass `ax` to
draw into an existing Axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._plan import RISKS, Plan, breakdown, gib, loss_text, max_context, plan
from ._request import Options, fail, integer, shown, signature_checked, text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from typing_extensions import Unpack

    from ._request import PathLike
    from ._whatfits import WhatFits

GiB = 1 << 30
DEFAULT_PAIRS = (("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"))
RISK_COLORS = {"free": "#2a9d8f", "mild": "#8ab17d", "noticeable": "#e9c46a", "avoid": "#e76f51"}


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("kvplan.plots needs matplotlib, which is not installed: `pip install matplotlib`") from None
    return plt


def _axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.get_figure(), ax  # type: ignore[return-value]
    fig, new_ax = _pyplot().subplots(figsize=size, layout="constrained")
    return fig, new_ax


def _token_axis(ax: Axes) -> None:
    """x ticks at power-of-two multiples of 1024 tokens, labelled 16k, 32k, ... (call after plotting)."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator
    base = 1024
    while ax.get_xlim()[1] / base > 8:
        base *= 2
    ax.xaxis.set_major_locator(MultipleLocator(base))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1024:g}k"))


def _text_box(label: Any, renderer: Any) -> Any:
    """The text's own box, where it will be drawn (an annotation's extent includes its leader line)."""
    from matplotlib.text import Text
    label.update_positions(renderer)
    return Text.get_window_extent(label, renderer)


def _label_points(ax: Axes, points: list[tuple[float, float, str]], fontsize: float = 8) -> None:
    """Label each point to its right without overlaps: labels are placed from the top down, each drawn, measured
    and moved below any label already placed that it covers, with a leader line when moved. Call it last: it
    measures the axes as they are drawn."""
    fig = ax.get_figure()
    renderer = fig.canvas.get_renderer()  # type: ignore[union-attr]
    to_points = 72 / fig.dpi  # type: ignore[union-attr]
    y_lo, y_hi = ax.get_ylim()
    placed: list[Any] = []  # bounding boxes (display units) of the labels so far
    for x, y, text in sorted(points, key=lambda p: -p[1]):
        if not y_lo <= y <= y_hi:
            continue  # outside the clipped axis: the point is not drawn either
        offset = -3.0
        label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(10, offset), fontsize=fontsize)
        for _ in range(len(placed) + 1):
            box = _text_box(label, renderer)
            hit = next((b for b in placed if box.overlaps(b)), None)
            if hit is None:
                break
            offset -= (box.y1 - hit.y0) * to_points + 1
            label.set_position((10, offset))
        if offset < -4:
            label.remove()
            label = ax.annotate(text, (x, y), textcoords="offset points", xytext=(10, offset), fontsize=fontsize,
                                arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.6})
        placed.append(_text_box(label, renderer))


def _contexts(max_ctx: int, points: int) -> list[int]:
    """About `points` context sizes up to max_ctx, multiples of 256 (the engine's padding), for the x axis."""
    step = max(256, max_ctx // points // 256 * 256)
    return list(range(step, max_ctx + 1, step))


MAX_PAIRS = 16
MAX_CONTEXTS = 1000  # points per line: each is one kvplan.breakdown()


def _pairs(pairs: object) -> list[tuple[str, str]]:
    """pairs: (cache_type_k, cache_type_v) tuples, at least one."""
    if isinstance(pairs, str) or not isinstance(pairs, Sequence):
        fail("pairs", shown(pairs), "must be a list of (cache_type_k, cache_type_v) pairs such as [('q8_0', 'q8_0')]")
    if not 1 <= len(pairs) <= MAX_PAIRS:
        fail("pairs", f"{len(pairs)} pairs", f"needs 1..{MAX_PAIRS} (cache_type_k, cache_type_v) pairs")
    out = []
    for pair in pairs:
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            fail("pairs", shown(pair), "each pair must be (cache_type_k, cache_type_v), such as ('q8_0', 'q8_0')")
        out.append((text("cache_type_k", pair[0], "a cache type"), text("cache_type_v", pair[1], "a cache type")))
    return out


def _context_list(contexts: object) -> list[int]:
    """contexts: the x values, whole numbers of tokens (at most MAX_CONTEXTS)."""
    if isinstance(contexts, str) or not isinstance(contexts, Sequence):
        fail("contexts", shown(contexts), "must be a list of context sizes in tokens, such as [4096, 8192]")
    if not 1 <= len(contexts) <= MAX_CONTEXTS:
        fail("contexts", f"{len(contexts):,} contexts" + (f" up to {contexts[-1]}" if contexts else ""),
             f"takes 1..{MAX_CONTEXTS} context sizes (each is one breakdown)")
    return [integer("ctx_size", x) for x in contexts]


@signature_checked("kvplan.plots.memory_vs_context()", Options.__optional_keys__)
def memory_vs_context(gpu: str, model: PathLike, pairs: Sequence[tuple[str, str]] = DEFAULT_PAIRS, *,
                      weights: str | None = None, contexts: Sequence[int] | None = None, ax: Axes | None = None,
                      **options: Unpack[Options]) -> Figure:
    """GPU memory against context for each (K, V) cache-type pair, against the device's budget.

    Each point is kvplan.breakdown() at that context: the plan's buffers (weights, K/V cache, compute) at their
    upper bounds, which the fit check compares with the budget (device memory less reserve, runtime overhead and
    margin). Each pair's largest fitting context (kvplan.max_context) is marked on the budget line. weights: a
    GGUF format; by default the one kvplan.plan() recommends for the task. contexts: the x values (default: up
    to the model's longest context). flash_attn defaults to "on" (quantized V needs it), the placement to every
    layer on the GPU (n_gpu_layers="all", unless n_gpu_layers, n_cpu_moe or cpu_moe is given); other keywords
    are kvplan.plan()'s.
    """
    pairs = _pairs(pairs)
    if contexts is not None:
        contexts = _context_list(contexts)
    options.setdefault("flash_attn", "on")
    if all(options.get(k) is None for k in ("n_gpu_layers", "n_cpu_moe", "cpu_moe")):
        options["n_gpu_layers"] = "all"  # GPU memory against context: no layers moved to RAM
    if weights is None:
        best = plan(gpu, model, **options)
        if best.recommended is None:
            why = f"nothing fits ({best.nothing_fits})" if best.verdict == "nothing_fits" else \
                f"nothing acceptable ({best.nothing_acceptable})"
            fail("--weights", "", f"is needed to plot {best.model.name} on {best.device.device}: {why}; "
                                  "pass weights= to plot anyway")
        weights = best.recommended.weights
    fig, ax = _axes(ax, (9, 5.5))
    device, name = None, str(model)
    for k, v in pairs:
        # the inverse query first: its plan gives the device, the model and the largest fitting context
        inverse = max_context(gpu, model, cache_type_k=k, cache_type_v=v, weights=weights, **options)
        scaling = inverse.model.rope_scaling
        if scaling is not None and options.get("rope_scaling") is None:
            # search up to the model's longest documented context, as the x axis goes
            scaled = options.copy()
            scaled["rope_scaling"] = scaling.type
            inverse = max_context(gpu, model, cache_type_k=k, cache_type_v=v, weights=weights, **scaled)
        device, name = inverse.device, inverse.model.name
        xs = list(contexts) if contexts is not None else _contexts(inverse.model.max_ctx, 48)
        points = [breakdown(gpu, model, weights=weights, ctx_size=x, cache_type_k=k, cache_type_v=v, **options)
                  for x in xs]
        ys = [p.pools[0].allocations_high_bytes / GiB for p in points]
        best_fit = inverse.options[0] if inverse.fits else None  # the largest fitting context, whatever its risk
        label = f"K={k} V={v}: " + (f"fits up to {best_fit.ctx_per_slot:,} tokens" if best_fit else "does not fit")
        if best_fit is not None and best_fit.beyond_native:
            label += f" (rope-scaled beyond the native {inverse.model.ctx_native:,})"
        (line,) = ax.plot([p.ctx_size for p in points], ys, marker=".", markersize=4, linewidth=2, label=label)
        if best_fit is not None:
            y = best_fit.pools[0].allocations_high_bytes / GiB
            ax.plot([best_fit.ctx_size], [y], marker="o", markersize=9, markerfacecolor="white",
                    markeredgewidth=2, color=line.get_color(), zorder=5)
            right = best_fit.ctx_size > 0.8 * xs[-1]
            ax.annotate(f"{best_fit.ctx_per_slot:,}", (best_fit.ctx_size, y), textcoords="offset points",
                        xytext=(-8 if right else 8, -14), ha="right" if right else "left", fontsize=9,
                        color=line.get_color(), fontweight="bold")
    assert device is not None
    if device.budget_bytes is not None:
        budget = device.budget_bytes / GiB
        ax.axhline(budget, color="#c0392b", linewidth=2, linestyle="--",
                   label=f"budget {gib(device.budget_bytes)} GiB = {gib(device.capacity_bytes)} GiB device"
                         f" − reserve {gib(device.reserve_bytes)} − overhead {gib(device.overhead_high_bytes)}"
                         f" − margin {gib(device.margin_bytes)}")
    ax.set_xlabel("context (tokens, -c)")
    ax.set_ylabel("GPU memory for weights + K/V cache + compute (GiB, upper bound)")
    ax.set_title(f"{name} ({weights} weights) on {device.device}: memory vs context")
    _token_axis(ax)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    return fig


@signature_checked("kvplan.plots.risk_frontier()")
def risk_frontier(p: Plan, *, ax: Axes | None = None) -> Figure:
    """Expected quality loss against context per conversation for the plan's ranked options.

    Each option is a point at its expected loss, with its 80 % interval, coloured by risk band; the
    recommendation is a star. The task's target and minimum context are dashed lines. Plan with a larger
    top= to see more of the frontier.
    """
    if not isinstance(p, Plan):
        fail("plan", shown(p), f"must be a kvplan.Plan (what kvplan.plan() returns), not {type(p).__name__}")
    fig, ax = _axes(ax, (9, 5.5))
    # The axis spans the expected losses, not every interval: bands are clipped at the edges (an arrow marks a band
    # that goes on), so one extrapolated option's 1000 % upper end does not flatten the rest.
    expected = [max(o.quality.expected_loss * 100, 1e-3) for o in p.options] or [1.0]
    y_lo, y_hi = min(expected) / 3, max(expected) * 3
    for risk in RISKS:
        group = [o for o in p.options if o.quality.risk == risk]
        if not group:
            continue
        xs = [o.ctx_per_slot for o in group]
        ys = [max(o.quality.expected_loss * 100, 1e-3) for o in group]
        lows = [max(o.quality.low * 100, y_lo) for o in group]
        highs = [min(o.quality.high * 100, y_hi) for o in group]
        err = [[max(y - lo, 0.0) for y, lo in zip(ys, lows)], [max(hi - y, 0.0) for y, hi in zip(ys, highs)]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", color=RISK_COLORS[risk], ecolor=RISK_COLORS[risk], elinewidth=1,
                    capsize=3, markersize=8, alpha=0.9, label=f"{risk} risk")
        for o, x in zip(group, xs):
            if o.quality.high * 100 > y_hi:
                ax.annotate("", (x, y_hi), xytext=(x, y_hi / 1.25), arrowprops={"arrowstyle": "->", "color": RISK_COLORS[risk]})
    ax.set_yscale("log")
    ax.set_ylim(y_lo, y_hi)
    rec = p.recommended
    if rec is not None:
        ax.plot([rec.ctx_per_slot], [rec.quality.expected_loss * 100], marker="*", markersize=20, color="#264653",
                linestyle="none", label=f"recommended: {loss_text(rec.quality)}", zorder=5)
    ax.axvline(p.task.ctx_target, color="#555555", linestyle="--", linewidth=1.2,
               label=f"{p.task.id} target {p.task.ctx_target:,} tokens")
    ax.axvline(p.task.ctx_min, color="#999999", linestyle=":", linewidth=1.2,
               label=f"{p.task.id} minimum {p.task.ctx_min:,} tokens")
    ax.set_xlabel("context per conversation (tokens)")
    ax.set_ylabel("expected quality loss (% perplexity increase, log scale)")
    ax.yaxis.set_major_formatter(_pyplot().FuncFormatter(lambda y, _: f"{y:g}%"))
    _token_axis(ax)
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo, hi * (hi / lo) ** 0.35 if ax.get_xscale() == "log" else hi + 0.35 * (hi - lo))  # room for labels
    ax.set_title(f"{p.model.name} on {p.device.device}, task {p.task.id}: risk vs context of the ranked options")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    _label_points(ax, [(o.ctx_per_slot, max(o.quality.expected_loss * 100, 1e-3),
                        f"#{o.rank} {o.weights} {o.cache_type_k}/{o.cache_type_v}" + ("" if o.fits else " (no fit)"))
                       for o in p.options])
    return fig


def quality_vs_speed(w: WhatFits, *, ax: Axes | None = None) -> Figure:
    """The fitting models of kvplan.what_fits(): task quality (its common scale) against decode speed, one point per
    model, colored by the plan's risk; hollow points are estimated qualities, the dashed line is the task's speed floor."""
    from ._whatfits import WhatFits as _WhatFits
    if not isinstance(w, _WhatFits):
        fail("w", shown(w), "must be a kvplan.WhatFits (from kvplan.what_fits)")
    fig, ax = _axes(ax, (8, 5))
    points: list[tuple[float, float, str]] = []
    for r in w.records:
        tps = r["decode_tokens_per_s"]
        if not tps:
            continue  # speed unknown (a bare size): nothing to place on this axis
        color = RISK_COLORS.get(r["risk"], "#888888")
        ax.scatter([tps], [r["quality"]], s=20 + r["params"] / 1e9, facecolors="none" if r["quality_estimated"] else color,
                   edgecolors=color)
        points.append((tps, r["quality"], f"{r['model']} {r['weights']}"))
    ax.set_xscale("log")
    ax.axvline(w.data["task"]["decode_floor_tps"], linestyle="--", color="#888888", linewidth=1)
    _label_points(ax, points)
    ax.set_xlabel("decode tokens/s at the planned context (log scale)")
    ax.set_ylabel(f"{w.data['task']['id']} quality ({w.data['task']['quality_reference']} scale)")
    ax.set_title(f"What fits on {' + '.join(w.data['request']['gpu'])} for {w.data['task']['id']}")
    return fig
