"""The `kvplan` program as a function, and a web or MCP request turned into its arguments.

`kvplan serve` (serve.py) and `kvplan mcp` (mcp_server.py) answer through run(): the CLI's own parsing, planning and
JSON rendering (cli/run.hpp, in the compiled module), so each answer is byte for byte what `kvplan ... --json`
prints. This module only spells the request as arguments: a parameter `ctx-size=32k` (or `ctx_size`) becomes
`--ctx-size=32k`; it decides nothing about the plan.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from . import _core
from ._errors import InputError

# What each endpoint or tool runs, before its parameters: the arguments, and the one parameter it takes as the
# subcommand's own (explain --rank).
COMMANDS: dict[str, tuple[str, ...]] = {
    "plan": (), "explain": ("explain",), "what-fits": (), "models": ("models",), "gpus": ("gpus",),
    "engines": ("engines",),
}
# A parameter that is the command's positional argument rather than a flag: `kvplan models FILTER` (issue 19).
POSITIONAL = {"models": "filter"}
# Flags whose output is not the JSON document, or that the server adds itself.
NOT_OFFERED = {
    "json": "is added by the server: every answer is `--json`",
    "emit": "prints a launch line, not JSON; the JSON's options[].launch has every line",
    "help": "prints text; `kvplan --help` lists the flags, named as these parameters are",
    "version": "prints text",
}
# Flags that read a file on the server's machine: offered only when the server is bound to loopback, where the
# client is a user of this machine anyway.
FILE_FLAGS = ("data", "priors", "mmproj")
MODEL_FLAGS = ("model", "model-draft", "models")


@dataclass(frozen=True)
class Answer:
    """What `kvplan ARGS` did: its exit code (0 a plan, 1 nothing fits, 2 bad input, 3 internal) and output."""

    code: int
    out: bytes
    err: bytes

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")


def run(args: Sequence[str]) -> Answer:
    """Run `kvplan ARGS...` in this process (the GIL is released while it plans)."""
    code, out, err = _core.run_cli(list(args))
    return Answer(code, out, err)


def error_json(error: InputError) -> bytes:
    """The CLI's JSON error object (schema/plan.schema.json $defs/error) for a request refused before it runs."""
    doc = {"schema_version": _core.SCHEMA_VERSION, "error": error.to_dict()}
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def refuse(field: str, value: str, problem: str, accepted: Sequence[str] = ()) -> InputError:
    """An InputError worded as the CLI words its own (raised and caught: the module's translator builds it)."""
    try:
        _core.raise_input_error(field, value, problem, list(accepted))
    except InputError as e:
        return e
    raise AssertionError("raise_input_error returned")  # pragma: no cover


def _names_local_file(value: str) -> bool:
    """Whether the CLI would read the value from this machine's disk (a path, or a file that exists here), or
    fetch an arbitrary URL."""
    lowered = value.lower()
    return (_core.names_local_file(value) or os.path.exists(value) or lowered.startswith("http://")
            or lowered.startswith("https://"))


def _flag(name: str, value: str, files_allowed: bool) -> str:
    """One parameter as the CLI's `--name=value` (`--name` alone for an empty value: a switch such as
    kv-unified). Raises InputError for what the server does not take."""
    flag = name.replace("_", "-")
    if flag.startswith("-") or not flag:
        raise refuse(name, value, "parameters are named as the CLI's flags without the dashes (ctx-size=32k)")
    if flag in NOT_OFFERED:
        raise refuse("--" + flag, value, NOT_OFFERED[flag])
    if not files_allowed and (flag in FILE_FLAGS or (flag in MODEL_FLAGS and _names_local_file(value))):
        raise refuse("--" + flag, value, "names a file or URL read on the server's machine; this server is bound to "
                     "a network address, so it takes catalog names, Hub ids and Ollama tags only "
                     "(run `kvplan serve` on loopback to plan your own files)")
    return f"--{flag}={value}" if value != "" else f"--{flag}"


def arguments(command: str, params: Iterable[tuple[str, str]], files_allowed: bool) -> list[str]:
    """The `kvplan` arguments for one request: the command's own, each parameter as its flag, then --json.
    Raises InputError for a parameter the server does not take."""
    args = list(COMMANDS[command])
    pairs = list(params)
    if command == "what-fits" and any(name == "model" for name, _ in pairs):
        raise refuse("--model", dict(pairs)["model"], "is not asked of what-fits, which ranks the models for the "
                     "GPU and task (ask /plan for one model; --models a,b,c names the candidates)")
    positional = POSITIONAL.get(command)
    args += [value for name, value in pairs if name == positional]
    args += [_flag(name, value, files_allowed) for name, value in pairs if name != positional]
    return args + ["--json"]
