#!/usr/bin/env python3
"""CLI test of --gpu auto / --free auto through the real exec path: build/kvplan runs with PATH pointing at the
stand-in programs of tests/cli/standins, which print recorded outputs of nvidia-smi, rocm-smi and sysctl
(tests/unit/recorded/gpu/README.md names their sources). NVML and sysfs depend on the machine, so
KVPLAN_DETECT_SOURCES leaves them out here (NVML stays untested; sysfs has a unit test).

    run_gpu_auto.py --kvplan build/kvplan --schema schema/plan.schema.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RECORDED = REPO / "tests" / "unit" / "recorded" / "gpu"
SOURCES = "nvidia-smi,rocm-smi,sysctl"


def run(kvplan: str, args: list[str], env: dict[str, str]) -> tuple[int, str, str, float]:
    base = {"LC_ALL": "C", "KVPLAN_RAM": "unknown", "PATH": str(HERE / "standins"), "KVPLAN_DETECT_SOURCES": SOURCES}
    start = time.monotonic()
    p = subprocess.run([kvplan, *args], capture_output=True, text=True, env={**base, **env}, timeout=60, cwd=REPO)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def mac_dir(tmp: Path, memsize: Path, wired: Path, brand: Path) -> str:
    d = tmp / "sysctl"
    d.mkdir(exist_ok=True)
    for key, src in (("hw.memsize", memsize), ("iogpu.wired_limit_mb", wired), ("machdep.cpu.brand_string", brand)):
        shutil.copyfile(src, d / key)
    return str(d)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvplan", required=True)
    ap.add_argument("--schema", required=True)
    a = ap.parse_args()
    import jsonschema  # the project's dev requirements

    schema = json.loads(Path(a.schema).read_text())
    failures: list[str] = []
    checks = 0

    def check(name: str, ok: bool, detail: str = "") -> None:
        nonlocal checks
        checks += 1
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
        if not ok:
            failures.append(name)

    def plan_json(args: list[str], env: dict[str, str]) -> dict:
        code, out, err, _ = run(a.kvplan, [*args, "--json"], env)
        if code not in (0, 1):
            raise AssertionError(f"exit {code}: {err}")
        doc = json.loads(out)
        jsonschema.validate(doc, schema)
        return doc

    one = {"STANDIN_NVIDIA_SMI": str(RECORDED / "nvidia_smi_rtx4080super_595.71.05.txt")}
    code, out, err, _ = run(a.kvplan, ["--gpu", "auto", "--model", "qwen3-8b"], one)
    line = next((l for l in out.splitlines() if l.startswith("Device ")), "")
    check("nvidia-smi: the Device line says what was found and how", code == 0 and line ==
          "Device   NVIDIA GeForce RTX 4080 SUPER = 15.99 GiB (detected: NVIDIA GeForce RTX 4080 SUPER via nvidia-smi)",
          f"exit {code}, {line!r}, {err}")

    doc = plan_json(["--gpu", "auto", "--model", "qwen3-8b", "--free", "auto"], one)
    pool = doc["pools"][0]
    check("nvidia-smi --free auto: the pool is what is free now, with its catalog bandwidth",
          pool["capacity_bytes"] == 15348 * 2**20 and pool["detected"] == "NVIDIA GeForce RTX 4080 SUPER via nvidia-smi"
          and doc["request"]["gpu"] == "rtx4080super" and doc["request"]["free_bytes"] == 15348 * 2**20, json.dumps(pool)[:300])

    two = {"STANDIN_NVIDIA_SMI": str(RECORDED / "nvidia_smi_two_gpus_rtx4080super_rtx2080super.txt")}
    doc = plan_json(["--gpu", "auto", "--model", "qwen3-8b", "--free", "auto"], two)
    gpus = [p for p in doc["pools"] if p["kind"] == "gpu"]
    check("two GPUs: two devices, each labelled, each with its own free memory",
          len(gpus) == 2 and [p["capacity_bytes"] for p in gpus] == [15348 * 2**20, 7571 * 2**20]
          and "not in kvplan's catalog" in gpus[1]["detected"] and doc["request"]["extra_gpus"] == ["8192MiB"],
          json.dumps(gpus)[:400])

    amd = {"STANDIN_ROCM_SMI": str(RECORDED / "rocm_smi_csv_rx7900xt.txt")}
    doc = plan_json(["--gpu", "auto", "--model", "qwen3-8b"], amd)
    check("rocm-smi: an RX 7900 XT is the catalog's entry",
          doc["resolved"]["backend"] == "rocm" and doc["pools"][0]["device"] == "AMD Radeon RX 7900 XT"
          and doc["pools"][0]["detected"].startswith("Radeon RX 7900 XT via rocm-smi"),
          json.dumps(doc["pools"][0])[:300])
    navi = {"STANDIN_ROCM_SMI": str(RECORDED / "rocm_smi_csv_rx6800_raphael.txt")}
    doc = plan_json(["--gpu", "auto", "--model", "qwen3-8b"], navi)
    check("rocm-smi: a card outside the catalog is a ROCm device of its size (the 64 MiB iGPU skipped)",
          doc["resolved"]["backend"] == "rocm" and doc["pools"][0]["capacity_bytes"] == 17163091968
          and "not in kvplan's catalog" in doc["pools"][0]["detected"],
          json.dumps(doc["pools"][0])[:300])

    with tempfile.TemporaryDirectory() as t:
        mac = {"STANDIN_SYSCTL": mac_dir(Path(t), RECORDED.parent / "sysctl_hw_memsize_m4max_128g.txt",
                                         RECORDED / "sysctl_n_wired_limit_default.txt", RECORDED / "sysctl_n_brand_m4max.txt")}
        doc = plan_json(["--gpu", "auto", "--model", "qwen3-8b", "--engine", "mlx"], mac)
        check("sysctl: an M4 Max 128 GB is the catalog's entry, one unified pool",
              doc["request"]["gpu"] == "m4max-128gb" and doc["pools"][0]["kind"] == "unified"
              and doc["pools"][0]["capacity_bytes"] == 110100 * 2**20 and doc["pools"][0]["detected"].startswith("Apple M4 Max via sysctl"),
              json.dumps(doc["pools"][0])[:300])
        code, _, err, _ = run(a.kvplan, ["--gpu", "auto", "--model", "qwen3-8b", "--free", "auto"], mac)
        check("sysctl --free auto: no free figure, exit 2 saying so", code == 2 and "no free-memory figure" in err, f"exit {code}: {err}")

    code, _, err, _ = run(a.kvplan, ["--gpu", "auto", "--model", "qwen3-8b"], {})
    check("nothing found: exit 2 naming what was tried and what to pass",
          code == 2 and "found no GPU" in err and "nvidia-smi: exit status 9" in err and "rocm-smi: exit status 9" in err
          and "sysctl: exit status 1" in err and "--gpu 24GB" in err, f"exit {code}: {err}")
    code, _, err, _ = run(a.kvplan, ["--gpu", "auto", "--model", "qwen3-8b"], {"PATH": "/nonexistent"})
    check("no tools on PATH: each one 'not on PATH'", code == 2 and err.count("not on PATH") == 3, f"exit {code}: {err}")

    code, _, err, took = run(a.kvplan, ["--gpu", "auto", "--model", "qwen3-8b"], {"STANDIN_HANG": "1", "KVPLAN_DETECT_TIMEOUT_MS": "300"})
    check("a hung nvidia-smi is cut at the time limit", code == 2 and "nvidia-smi: no answer within 300 ms" in err and took < 10,
          f"exit {code} after {took:.1f} s: {err}")

    code, _, err, _ = run(a.kvplan, ["--model", "qwen3-8b"], {})
    check("--gpu missing: the error offers --gpu auto", code == 2 and "--gpu auto to detect this machine's GPU" in err, err)
    code, _, err, _ = run(a.kvplan, ["--gpu", "auto", "--gpu", "rtx4090", "--model", "qwen3-8b"], one)
    check("--gpu auto with another --gpu: exit 2", code == 2 and "give it alone" in err, err)
    code, _, err, _ = run(a.kvplan, ["--gpu", "auto", "--model", "qwen3-8b"], {**one, "KVPLAN_DETECT_SOURCES": "nvidia"})
    check("an unknown detection source: exit 2 with did you mean", code == 2 and "did you mean 'nvidia-smi'" in err, err)

    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
