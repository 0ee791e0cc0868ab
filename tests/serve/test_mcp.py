"""`kvplan mcp` through the official MCP SDK's client over stdio, as an agent's host runs it: the five tools with
their JSON schemas, and each result's text exactly what `kvplan ... --json` prints."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from conftest import KVPLAN, cli
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

TOOLS = {"plan", "explain", "what_fits", "list_models", "list_gpus"}


def with_session(body: Callable[[ClientSession], Awaitable[None]]) -> None:
    """Start `kvplan mcp` as a client does (a command on stdio) and run body against it."""
    params = StdioServerParameters(command=KVPLAN, args=["mcp"], env={**os.environ, "KVPLAN_RAM": "unknown"})

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await body(session)

    anyio.run(main)


def text_of(result: Any) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return str(result.content[0].text)


def test_tools_and_their_schemas() -> None:
    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        plan = tools["plan"].input_schema
        assert plan["required"] == ["gpu", "model"]
        assert plan["properties"]["gpu"]["type"] == "array" and plan["properties"]["gpu"]["items"]["type"] == "string"
        assert tools["explain"].input_schema["properties"]["rank"]["minimum"] == 1
        assert "model" not in tools["what_fits"].input_schema["properties"]
        for tool in tools.values():
            assert tool.description and tool.input_schema["type"] == "object"
    with_session(body)


CASES = [  # (tool, arguments, the same request on the command line)
    ("plan", {"gpu": ["24GB"], "model": "qwen2.5-coder-32b", "task": "agentic"},
     ["--gpu", "24GB", "--model", "qwen2.5-coder-32b", "--task", "agentic"]),
    ("plan", {"gpu": ["rtx3090", "rtx3090"], "model": "llama-3.3-70b", "options": {"ctx-size": "16k", "cache-type-v": "q8_0"}},
     ["--gpu", "rtx3090", "--gpu", "rtx3090", "--model", "llama-3.3-70b", "-c", "16k", "-ctv", "q8_0"]),
    ("explain", {"gpu": ["rtx4090"], "model": "gemma-3-27b", "task": "rag", "rank": 2},
     ["explain", "--gpu", "rtx4090", "--model", "gemma-3-27b", "--task", "rag", "--rank", "2"]),
    ("list_models", {}, ["models"]),
    ("list_gpus", {}, ["gpus"]),
]


def test_results_are_the_cli_json() -> None:
    async def body(session: ClientSession) -> None:
        for tool, arguments, args in CASES:
            result = await session.call_tool(tool, arguments)
            expected = cli([*args, "--json"])
            assert expected.returncode in (0, 1)
            assert not result.is_error
            assert text_of(result) == expected.stdout.decode(), tool
    with_session(body)


def test_bad_input_is_the_cli_error_object() -> None:
    async def body(session: ClientSession) -> None:
        result = await session.call_tool("plan", {"gpu": ["24GB"], "model": "qwen3-8b", "task": "agentik"})
        expected = cli(["--gpu", "24GB", "--model", "qwen3-8b", "--task", "agentik", "--json"])
        assert result.is_error and expected.returncode == 2
        assert text_of(result) == expected.stdout.decode()
        refused = await session.call_tool("plan", {"gpu": ["24GB"], "model": "qwen3-8b", "options": {"emit": "vllm"}})
        assert refused.is_error and json.loads(text_of(refused))["error"]["field"] == "--emit"
        invalid = await session.call_tool("explain", {"gpu": ["24GB"], "model": "qwen3-8b", "rank": 0})
        assert invalid.is_error  # the schema's minimum, checked by the SDK before kvplan runs
    with_session(body)


def test_what_fits() -> None:
    expected = cli(["--gpu", "rtx4090", "--task", "agentic", "--json"])
    if expected.returncode == 2 and json.loads(expected.stdout)["error"]["field"] == "--model":
        pytest.skip("this kvplan has no what-fits yet (`kvplan --gpu G --task T` without --model: issue 19)")

    async def body(session: ClientSession) -> None:
        result = await session.call_tool("what_fits", {"gpu": ["rtx4090"], "task": "agentic"})
        assert text_of(result) == expected.stdout.decode()
    with_session(body)
