"""kvplan.plots: render to PNG with the Agg backend; numbers come from the library."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

import kvplan  # noqa: E402
from kvplan import plots  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def test_memory_vs_context_renders(tmp_path: Path) -> None:
    fig = plots.memory_vs_context(gpu="l40s", model="llama-3.3-70b", weights="IQ4_XS",
                                  pairs=[("f16", "f16"), ("q8_0", "q8_0")])
    out = tmp_path / "memory.png"
    fig.savefig(out, dpi=80)
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 20_000
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    best = kvplan.max_context(gpu="l40s", model="llama-3.3-70b", weights="IQ4_XS", cache_type_k="f16",
                              cache_type_v="f16", flash_attn="on").recommended
    assert best is not None
    assert labels[0] == f"K=f16 V=f16: fits up to {best.ctx_per_slot:,} tokens"
    assert labels[-1].startswith("budget ") and "GiB device" in labels[-1]
    assert "GiB" in ax.get_ylabel() and "tokens" in ax.get_xlabel()
    # the f16 curve is kvplan.breakdown() at each context, in GiB
    xs, ys = ax.get_lines()[0].get_data()
    o = kvplan.breakdown(gpu="l40s", model="llama-3.3-70b", weights="IQ4_XS", ctx_size=int(xs[3]),
                         cache_type_k="f16", cache_type_v="f16", flash_attn="on")
    assert ys[3] == o.pools[0].allocations_high_bytes / 2**30


def test_memory_vs_context_default_weights_and_contexts(tmp_path: Path) -> None:
    fig = plots.memory_vs_context(gpu="24GB", model="qwen3-8b", pairs=[("q8_0", "q8_0")], contexts=[4096, 8192])
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [4096, 8192]
    fig.savefig(tmp_path / "m.png")


def test_risk_frontier_renders(tmp_path: Path) -> None:
    p = kvplan.plan(gpu="l40s", model="llama-3.3-70b", task="agentic", top=10)
    fig = plots.risk_frontier(p)
    out = tmp_path / "risk.png"
    fig.savefig(out, dpi=80)
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 20_000
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == len(p.options) and texts[0].startswith("#")
    assert ax.get_yscale() == "log" and "%" in ax.get_ylabel()
    assert any(t.get_text().startswith("recommended: ") for t in ax.get_legend().get_texts())


def test_errors_and_missing_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(kvplan.InputError, match=r"pairs '0 pairs': needs 1\.\.16"):
        plots.memory_vs_context(gpu="24GB", model="qwen3-8b", pairs=[], weights="Q4_K_M")
    with pytest.raises(kvplan.InputError, match="nothing fits") as nothing:
        plots.memory_vs_context(gpu="8GB", model="llama-3.1-70b")
    assert nothing.value.keyword == "weights"
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="needs matplotlib"):
        plots.risk_frontier(kvplan.plan(gpu="24GB", model="qwen3-8b"))


def test_risk_frontier_readable(tmp_path: Path) -> None:
    """Labels never overlap and the y axis spans the expected losses, not a 1000 % interval end (issue 14)."""
    from matplotlib.text import Text
    p = kvplan.plan(gpu="8GB", model="phi-4", top=25)  # 25 options in a few context columns
    fig = plots.risk_frontier(p)
    fig.savefig(tmp_path / "risk.png")
    fig.canvas.draw()  # measured as drawn at the figure's own dpi
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    boxes = [Text.get_window_extent(t, renderer) for t in ax.texts if t.get_text()]  # the text, not its leader line
    assert len(boxes) == len(p.options)
    overlaps = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if a.overlaps(b)]
    assert not overlaps
    lo, hi = ax.get_ylim()
    expected = [o.quality.expected_loss * 100 for o in p.options]
    assert hi <= 3.01 * max(expected) and lo >= min(expected) / 3.01
    clipped = sum(o.quality.high * 100 > hi for o in p.options)
    arrows = sum(1 for t in ax.texts if not t.get_text())
    assert arrows == clipped
