"""Fixtures for the tests of `kvplan serve` and `kvplan mcp` (tests/serve/): the real programs, started as a user
starts them (`build/kvplan serve`, `build/kvplan mcp`), and the CLI they must agree with byte for byte."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KVPLAN = os.environ.get("KVPLAN_CLI", str(ROOT / "build" / "kvplan"))
# Plans must not depend on this machine's free RAM at the moment (the CLI reads MemAvailable otherwise).
os.environ["KVPLAN_RAM"] = "unknown"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def cli(args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    """`kvplan ARGS` as a user runs it."""
    return subprocess.run([KVPLAN, *args], capture_output=True, timeout=60, check=False)


def get(base: str, path: str, params: Sequence[tuple[str, str]] = (), headers: dict[str, str] | None = None,
        method: str = "GET") -> Reply:
    url = base + path + ("?" + urllib.parse.urlencode(list(params)) if params else "")
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def start_server(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """`kvplan serve --port 0 EXTRA`; returns the process and its base URL (from the line it prints)."""
    proc = subprocess.Popen([KVPLAN, "serve", "--port", "0", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    found = re.search(r"(http://\S+?)/?$", line.strip())
    if not found:
        proc.kill()
        pytest.fail(f"kvplan serve printed {line!r}, not its address; stderr: {proc.stderr.read().decode()[:2000]}")
    return proc, found.group(1)


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    proc, base = start_server()
    try:
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable
