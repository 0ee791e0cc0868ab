"""Shared helpers: the repository, the kvplan CLI, and the golden CLI cases read as kvplan.plan() keywords."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "golden" / "cases.txt"

# The CLI's spellings (cli/main.cpp, cli/args.cpp) of each kvplan.plan() keyword. Long names come from
# kvplan's own flag table; the short and llama.cpp spellings are listed here.
from kvplan._request import KEYWORD_OF_FLAG  # noqa: E402

ALIASES = {"-m": "--model", "-c": "--ctx-size", "--ctx": "--ctx-size", "-ctk": "--cache-type-k",
           "--ctk": "--cache-type-k", "-ctv": "--cache-type-v", "--ctv": "--cache-type-v", "-fa": "--flash-attn",
           "--fa": "--flash-attn", "-np": "--parallel", "--np": "--parallel", "-kvu": "--kv-unified",
           "-ub": "--ubatch-size", "--ub": "--ubatch-size", "-b": "--batch-size", "-ngl": "--n-gpu-layers",
           "--ngl": "--n-gpu-layers", "-ncmoe": "--n-cpu-moe", "-cmoe": "--cpu-moe",
           "--tp": "--tensor-parallel-size", "-md": "--model-draft", "-ctkd": "--cache-type-k-draft",
           "--ctkd": "--cache-type-k-draft", "-ctvd": "--cache-type-v-draft", "--ctvd": "--cache-type-v-draft",
           "-ngld": "--n-gpu-layers-draft", "--ngld": "--n-gpu-layers-draft", "--draft-max": "--spec-draft-n-max",
           "-mm": "--mmproj", "-ts": "--tensor-split", "-sm": "--split-mode", "-ot": "--override-tensor",
           "--pp": "--pipeline-parallel-size", "--dp": "--data-parallel-size", "--ep": "--enable-expert-parallel",
           "--max-running-requests": "--max-num-seqs", "--chunked-prefill-size": "--max-num-batched-tokens"}
SWITCHES = {"kv_unified", "swa_full", "allow_slow", "cpu_moe", "max_ctx", "accept_risk", "expert_parallel"}
INTS = {"ctx_size", "n_parallel", "tensor_parallel", "fit_target_mib", "n_outputs_max", "n_gpu_layers_draft", "draft_max", "n_ubatch", "n_batch", "top", "yarn_orig_ctx", "n_cpu_moe",
        "pipeline_parallel_size", "data_parallel", "nodes", "max_num_seqs", "concurrency", "max_batched_tokens"}
SUBCOMMANDS = {"models", "gpus", "engines", "explain", "--help", "--version"}


@dataclass
class Case:
    name: str
    exit_code: int
    args: list[str]


def golden_cases() -> list[Case]:
    cases = []
    for raw in CASES.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, code, rest = (p.strip() for p in line.split("|", 2))
        cases.append(Case(name, int(code), shlex.split(rest, comments=True)))
    return cases


class NotInPython(Exception):
    """The case uses something only the command line has (a subcommand, an unknown or unmodelled flag)."""


def keywords(args: list[str]) -> dict[str, Any]:
    """CLI arguments → kvplan.plan() keywords. Raises NotInPython for what the Python API does not take."""
    out: dict[str, Any] = {}
    args = [a for a in args if a not in ("llama-server", "llama-cli", "--json")]
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in SUBCOMMANDS:
            raise NotInPython(flag)
        if flag == "--spec-type":  # the draft model's type: draft-simple is the only one planned, the request is the same
            if not {"-md", "--model-draft"} & set(args):
                raise NotInPython(flag)  # the CLI's own check
            i += 2
            continue
        if flag == "--no-mmproj-offload":
            out["mmproj_offload"] = False
            i += 1
            continue
        if flag == "--fit":  # llama-server's placement switch: on hands placement to its fit
            out["fit_placement"] = args[i + 1].lower() == "on"
            i += 2
            continue
        keyword = KEYWORD_OF_FLAG.get(ALIASES.get(flag, flag))
        if keyword is None:
            raise NotInPython(flag)
        if keyword in SWITCHES:
            out[keyword] = True
            i += 1
            continue
        if flag == "-fa" and (i + 1 == len(args) or args[i + 1] not in ("on", "off", "auto")):
            value = "on"  # llama.cpp's bare -fa, as cli/args.cpp reads it
            i += 1
        else:
            value = args[i + 1]
            i += 2
        if keyword == "data":
            out.setdefault("data", []).append(value)
        elif keyword == "gpu" and "gpu" in out:  # --gpu repeated: several GPUs
            out["gpu"] = [*(out["gpu"] if isinstance(out["gpu"], list) else [out["gpu"]]), value]
        elif keyword == "override_tensors":
            out.setdefault(keyword, []).extend(o for o in value.split(",") if o)
        elif keyword == "tensor_split":
            out[keyword] = [float(x) for x in value.replace("/", ",").split(",")]
        elif keyword == "ctx_size":
            out[keyword] = value  # as typed: ctx_size takes the CLI's text ("32k") and refuses what the CLI refuses
        elif keyword in INTS:
            if not value.lstrip("-").isdigit():
                raise NotInPython(f"{flag} {value}")  # CLI11's own conversion error: Python refuses a str itself
            out[keyword] = int(value)
        elif keyword in ("rope_scale", "host_bandwidth_gbs"):
            out[keyword] = float(value)
        elif keyword == "n_gpu_layers":
            out[keyword] = value if value in ("all", "auto") else int(value)
        else:
            out[keyword] = value
    return out


def cli_path() -> Path | None:
    """The kvplan CLI of this build: $KVPLAN_CLI (ctest sets it), else build/kvplan, else None."""
    for candidate in (os.environ.get("KVPLAN_CLI"), REPO / "build" / "kvplan"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def run_cli(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    cli = cli_path()
    if cli is None:
        pytest.skip("the kvplan CLI is not built (set KVPLAN_CLI)")
    env = {k: v for k, v in os.environ.items() if k != "KVPLAN_DATA"}
    env["LC_ALL"] = "C"
    env["KVPLAN_RAM"] = "unknown"  # not this machine's RAM: kvplan.plan() never reads it
    return subprocess.run([str(cli), *args], cwd=REPO, env=env, capture_output=True, timeout=120)


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root with KVPLAN_DATA unset, as the golden cases do."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("KVPLAN_DATA", raising=False)
    return REPO
