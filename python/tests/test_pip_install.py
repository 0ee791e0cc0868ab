"""`pip install .` builds the package (scikit-build-core + pybind11) and it plans as this build does.

This builds libplanner a second time (about 3 minutes on two cores), so it runs only with KVPLAN_TEST_PIP=1:
    KVPLAN_TEST_PIP=1 ctest --test-dir build -R python --output-on-failure
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest
from conftest import REPO

import kvplan

SCRIPT = "import kvplan; print(kvplan.plan(gpu='24GB', model='qwen2.5-coder-32b', task='agentic').to_json(), end='')"


@pytest.mark.skipif(os.environ.get("KVPLAN_TEST_PIP") != "1",
                    reason="builds the package again with `pip install .` (~3 min); set KVPLAN_TEST_PIP=1")
def test_pip_install(tmp_path: Path) -> None:
    venv.create(tmp_path / "venv", with_pip=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVPLAN_DATA")}
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)], env=env,
                   check=True, timeout=1800)
    out = subprocess.run([python, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, check=True, timeout=60)
    assert out.stdout.decode() == kvplan.plan(gpu="24GB", model="qwen2.5-coder-32b", task="agentic").to_json()
    files = subprocess.run([python, "-m", "pip", "show", "-f", "kvplan"], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert "kvplan/py.typed" in files and "kvplan/_core.pyi" in files
    assert "kvplan/web/index.html" in files and "kvplan/web/app.js" in files  # kvplan serve's page ships in the wheel
