"""examples/: the notebook runs (nbclient) and shows what it says; the launcher keeps the CLI's exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_cli

import kvplan

NOTEBOOK = REPO / "examples" / "notebook.ipynb"
LAUNCHER = REPO / "examples" / "launcher.py"
L40S = {"gpu": "l40s", "model": "llama-3.3-70b", "task": "agentic"}


def text_of(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def data_of(cell: Any) -> list[dict[str, Any]]:
    return [o["data"] for o in cell.outputs if o.output_type in ("execute_result", "display_data")]


def kvplan_env() -> dict[str, str]:
    """This environment, with PYTHONPATH finding the kvplan under test (a build tree's two folders or site-packages)."""
    folders = [str(Path(p).parent) for p in kvplan.__path__]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def executed() -> list[Any]:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {k: v for k, v in kvplan_env().items() if k != "MPLBACKEND"}  # the inline backend draws into the notebook
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute(env=env)
    return [c for c in nb.cells if c.cell_type == "code"]


def test_notebook_runs_without_errors(executed: list[Any]) -> None:
    for cell in executed:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
        assert cell.outputs, f"no output from: {cell.source}"


def test_notebook_lists_the_48gb_cards(executed: list[Any]) -> None:
    lines = text_of(executed[0]).splitlines()
    assert {line.split()[0] for line in lines} >= {"rtxa6000", "rtx6000ada", "l40s"}


def test_notebook_shows_the_plan_and_its_launch_line(executed: list[Any], in_repo: Path) -> None:
    html = data_of(executed[1])[0]["text/html"]
    assert "<table>" in html and "Recommended" in html
    launch = text_of(executed[2]).strip()
    assert launch == kvplan.plan(**L40S).recommended.launch_line  # type: ignore[union-attr]
    proc = run_cli(["--gpu", "l40s", "--model", "llama-3.3-70b", "--task", "agentic"])
    assert f"\n{launch}\n" in proc.stdout.decode()  # the CLI recommends the same command


def test_notebook_answers_the_f16_question(executed: list[Any]) -> None:
    rows = text_of(executed[3]).splitlines()
    assert [r.split()[:2] for r in rows] == [["K=q8_0", "V=q8_0"], ["K=f16", "V=f16"], ["K=f16", "V=q8_0"]]
    weights = kvplan.plan(**L40S).recommended.weights  # type: ignore[union-attr]
    f16 = kvplan.max_context(**L40S, weights=weights, cache_type_k="f16", cache_type_v="f16").recommended
    assert f16 is not None and f"{f16.ctx_per_slot:,} tokens" in rows[1]


def test_notebook_tables_and_plots(executed: list[Any]) -> None:
    for cell in executed[4:7]:
        assert "text/html" in data_of(cell)[-1]
    assert text_of(executed[6]).startswith("<kvplan.Option #1: ")
    images = [d for cell in executed[7:9] for d in data_of(cell) if "image/png" in d]
    assert len(images) == 2
    assert text_of(executed[9]).strip() == "cache_type_k = 'q4_k' -> q4_0"


def launcher(*args: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, env=kvplan_env(),
                          cwd=tmp, timeout=60)


def test_launcher_prints_the_launch_line_and_keeps_the_json(tmp_path: Path, in_repo: Path) -> None:
    out = tmp_path / "plan.json"
    proc = launcher("--gpu", "24GB", "--model", "qwen2.5-coder-32b", "--task", "agentic", "--plan-json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("llama-server -m Qwen2.5-Coder-32B-Instruct-")
    cli = run_cli(["--gpu", "24GB", "--model", "qwen2.5-coder-32b", "--task", "agentic", "--json"])
    assert out.read_bytes() == cli.stdout


def test_launcher_exit_codes() -> None:
    nothing = launcher("--gpu", "8GB", "--model", "kimi-k2-instruct")  # too big even with layers in RAM
    assert nothing.returncode == 1 and "nothing fits" in nothing.stderr
    bad = launcher("--gpu", "24GB", "--model", "qwen2.5-coder-32b-instrct")
    assert bad.returncode == 2 and "did you mean 'qwen2.5-coder-32b-instruct'" in bad.stderr
