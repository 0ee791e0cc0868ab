"""`kvplan mcp`: kvplan as an MCP server on stdio (the official MCP Python SDK), for agents.

Tools: plan, explain, what_fits, list_models, list_gpus. Each runs the CLI's own code (kvplan._cli.run) with its
arguments as the CLI's flags, and its text content is exactly what `kvplan ... --json` prints: the plan, the
listing, or on bad input the JSON error object (then the result is marked isError).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

from mcp.server import MCPServer  # the SDK's types are resolved from this module's names when tools register
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from ._cli import arguments, error_json, run
from ._errors import InputError

_Gpus = Annotated[list[str], Field(description="GPU names or sizes as `kvplan --gpu` takes them, one per GPU: "
                                  "rtx4090, \"RTX 3090\", h100-sxm, m4max-128gb, 24GB; [\"auto\"] for this machine's")]
_Model = Annotated[str, Field(description="catalog id or alias (qwen3-32b), Hugging Face repo (Qwen/Qwen3-32B-GGUF:Q4_K_M), "
                                         "Ollama tag (qwen3:30b), or a GGUF / config.json path on this machine")]
_Task = Annotated[str, Field(description="general, agentic, coding, rag, chat, summarization, creative or reasoning")]
_Engine = Annotated[str, Field(description="llama.cpp (default), ollama, vllm, sglang, exllamav2, exllamav3, mlx")]
_Options = Annotated[dict[str, str] | None, Field(
    description="any other `kvplan` flag by its name without dashes, e.g. {\"ctx-size\": \"32k\", \"cache-type-k\": "
                "\"q8_0\", \"parallel\": \"4\", \"free\": \"20GB\", \"max-ctx\": \"\"} (an empty value: a switch)")]


def _params(gpu: list[str] | None, given: dict[str, Any], options: dict[str, str] | None) -> list[tuple[str, str]]:
    """Tool arguments as the CLI's (name, value) pairs: one `gpu` per GPU, then the others in order."""
    pairs = [("gpu", g) for g in gpu or []]
    pairs += [(name, str(value)) for name, value in given.items() if value is not None]
    return pairs + list((options or {}).items())


def _answer(command: str, params: list[tuple[str, str]]) -> CallToolResult:
    try:
        result = run(arguments(command, params, files_allowed=True))
        text, failed = result.text, result.code not in (0, 1)
        if result.code not in (0, 1, 2):
            text = result.err.decode("utf-8", "replace")
    except InputError as e:
        text, failed = error_json(e).decode(), True
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=failed)


def create_server() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("kvplan", instructions=(
        "kvplan sizes LLM inference to a GPU the way llama.cpp allocates memory: which weights, context length and "
        "K/V cache types fit, ranked by expected quality loss for the task, with the launch command. Every result is "
        "the JSON of `kvplan --json` (schema/plan.schema.json)."))

    @server.tool(structured_output=False)
    def plan(gpu: _Gpus, model: _Model, task: _Task = "general", engine: _Engine = "llama.cpp", options: _Options = None,
             ) -> CallToolResult:
        """Ranked (weights, context, K type, V type) options that fit the GPU(s) for the task, the recommended one's
        launch line, the memory breakdown and the evidence: `kvplan --gpu ... --model ... --task ... --json`."""
        return _answer("plan", _params(gpu, {"model": model, "task": task, "engine": engine}, options))

    @server.tool(structured_output=False)
    def explain(gpu: _Gpus, model: _Model, task: _Task = "general", engine: _Engine = "llama.cpp",
                rank: Annotated[int, Field(ge=1, description="which ranked option (1: the recommended)")] = 1,
                options: _Options = None) -> CallToolResult:
        """One ranked option in full (every buffer, the quality model's terms, the evidence):
        `kvplan explain --rank N ... --json`."""
        return _answer("explain", _params(gpu, {"model": model, "task": task, "engine": engine, "rank": rank}, options))

    @server.tool(structured_output=False)
    def what_fits(gpu: _Gpus, task: _Task = "general", engine: _Engine = "llama.cpp", options: _Options = None,
                  ) -> CallToolResult:
        """The catalog's models ranked for the GPU(s) and task, each with its recommended plan:
        `kvplan --gpu ... --task ... --json` without --model."""
        return _answer("what-fits", _params(gpu, {"task": task, "engine": engine}, options))

    @server.tool(structured_output=False)
    def list_models(filter: Annotated[str | None, Field(  # noqa: A002  (the CLI's name for it)
            description="only models whose id, name, family or architecture contains this; or moe, dense")] = None,
            options: _Options = None) -> CallToolResult:
        """The catalog's models (id, architecture, size, context, aliases): `kvplan models [FILTER] --json`."""
        return _answer("models", _params(None, {"filter": filter}, options))

    @server.tool(structured_output=False)
    def list_gpus(options: _Options = None) -> CallToolResult:
        """The catalog's GPUs (id, name, backend, memory, bandwidth, aliases): `kvplan gpus --json`."""
        return _answer("gpus", _params(None, {}, options))

    return server


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        print(f"kvplan mcp: takes no arguments (got {' '.join(args)}); it speaks MCP on stdin and stdout",
              file=sys.stderr)
        return 2
    create_server().run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
