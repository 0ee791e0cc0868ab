"""to_dataframe(): shape and dtypes, and the message without pandas."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

import kvplan


def test_plan_dataframe_shape_and_dtypes() -> None:
    p = kvplan.plan(gpu="24GB", model="qwen2.5-coder-32b", task="agentic", top=7)
    df = p.to_dataframe()
    assert df.shape == (len(p.options), 32)
    assert df.index.name == "rank" and list(df.index) == [o.rank for o in p.options]
    assert df.index.dtype == "int64"
    ints = ["ctx_size", "ctx_per_slot", *[c for c in df.columns if c.endswith("_bytes")]]
    assert len(ints) == 18
    for column in ints:
        assert df[column].dtype == "int64", column
    for column in ("n_gpu_layers", "n_cpu_moe"):  # kvplan's placement: <NA> when every layer is on the GPU
        assert str(df[column].dtype) == "Int64" and df[column].isna().all(), column
    for column in ("expected_loss", "loss_low", "loss_high", "score"):
        assert df[column].dtype == "float64", column
    for column in ("flash_attn", "fits"):
        assert df[column].dtype == "bool", column
    for column in ("weights", "cache_type_k", "cache_type_v", "reason", "launch_line"):
        assert pd.api.types.is_string_dtype(df[column]), column
    assert isinstance(df["risk"].dtype, pd.CategoricalDtype) and df["risk"].cat.ordered
    assert list(df["risk"].cat.categories) == ["free", "mild", "noticeable", "avoid"]
    first = p.options[0]
    row = df.loc[1]
    assert row["k_cache_bytes"] == first.memory.k_cache_bytes and row["launch_line"] == first.launch_line
    assert df["fits"].all()


def test_option_dataframe_is_the_allocations() -> None:
    o = kvplan.breakdown(gpu="rtx4090", model="gemma-3-27b", weights="Q4_K_M", ctx_size=16384, cache_type_k="q8_0",
                         cache_type_v="q8_0")
    df = o.to_dataframe()
    assert list(df.columns) == ["component", "what", "pool", "bytes", "unpadded_bytes", "high_bytes", "accuracy"]
    assert len(df) == len(o.allocations) and {"swa_k_cache", "swa_v_cache"} <= set(df["what"])
    assert all(df[c].dtype == "int64" for c in ("bytes", "unpadded_bytes", "high_bytes"))
    assert list(df["bytes"]) == [a.bytes for a in o.allocations]


def test_without_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    p = kvplan.plan(gpu="24GB", model="qwen3-8b")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"to_dataframe\(\) needs pandas.*pip install pandas"):
        p.to_dataframe()
    with pytest.raises(ImportError, match="needs pandas"):
        p.options[0].to_dataframe()
    assert p.to_dict()["fits"] is True  # the rest works without it
