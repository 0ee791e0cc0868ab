"""kvplan.plan(gpu="auto") and free="auto": the CLI's detection, with PATH at the stand-in programs of tests/cli/standins
(recorded nvidia-smi, rocm-smi and sysctl outputs; tests/unit/recorded/gpu/README.md names their sources)."""

from __future__ import annotations

import pytest
from conftest import REPO

import kvplan

RECORDED = REPO / "tests" / "unit" / "recorded" / "gpu"


@pytest.fixture()
def standins(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("PATH", str(REPO / "tests" / "cli" / "standins"))
    monkeypatch.setenv("KVPLAN_DETECT_SOURCES", "nvidia-smi,rocm-smi,sysctl")  # NVML and sysfs read the real machine
    for name in ("STANDIN_NVIDIA_SMI", "STANDIN_ROCM_SMI", "STANDIN_SYSCTL", "STANDIN_HANG"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_gpu_auto_nvidia_smi(standins: pytest.MonkeyPatch) -> None:
    standins.setenv("STANDIN_NVIDIA_SMI", str(RECORDED / "nvidia_smi_two_gpus_rtx4080super_rtx2080super.txt"))
    p = kvplan.plan("auto", "qwen3-8b", free="auto")
    gpus = [pool for pool in p.pools if pool.kind == "gpu"]
    assert [g.detected for g in gpus][0] == "NVIDIA GeForce RTX 4080 SUPER via nvidia-smi"
    assert gpus[1].detected is not None and "not in kvplan's catalog" in gpus[1].detected
    assert [g.capacity_bytes for g in gpus] == [15348 << 20, 7571 << 20]  # memory.free of each recording
    assert gpus[0].device == "NVIDIA GeForce RTX 4080 SUPER"
    assert kvplan.plan("rtx4080super", "qwen3-8b").pools[0].detected is None


def test_gpu_auto_rocm_smi_outside_the_catalog(standins: pytest.MonkeyPatch) -> None:
    standins.setenv("STANDIN_ROCM_SMI", str(RECORDED / "rocm_smi_csv_rx7900xt.txt"))
    p = kvplan.plan(gpu="auto", model="qwen3-8b")
    assert p.resolved.backend == "rocm" and p.pools[0].capacity_bytes == 21458059264


def test_nothing_found_is_an_input_error(standins: pytest.MonkeyPatch) -> None:
    with pytest.raises(kvplan.InputError) as e:
        kvplan.plan(gpu="auto", model="qwen3-8b")
    assert e.value.field == "--gpu" and "found no GPU" in str(e.value) and "--gpu 24GB" in str(e.value)
    with pytest.raises(kvplan.InputError, match="give it alone"):
        kvplan.plan(gpu=["auto", "rtx4090"], model="qwen3-8b")
    with pytest.raises(kvplan.InputError, match="is required.*--gpu auto"):
        kvplan.plan(gpu=None, model="qwen3-8b")
