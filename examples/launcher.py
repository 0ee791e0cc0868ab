#!/usr/bin/env python3
"""Start llama-server with the configuration kvplan recommends, or say why not.

    python examples/launcher.py --gpu 24GB --model qwen2.5-coder-32b --task agentic [--plan-json plan.json] [--exec]

Prints the llama-server command line (or runs it with --exec) and keeps the whole plan as JSON, byte-identical
to `kvplan --json`, for the logs. Exit codes are the CLI's: 0 a plan to run, 1 nothing fits or nothing acceptable, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

import kvplan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", default="general")
    parser.add_argument("--reserve", help="memory kept for other processes, e.g. 1GB")
    parser.add_argument("--plan-json", help="write the plan (kvplan --json) to this file")
    parser.add_argument("--exec", action="store_true", help="replace this process with llama-server")
    args = parser.parse_args(argv)

    try:
        plan = kvplan.plan(gpu=args.gpu, model=args.model, task=args.task, reserve=args.reserve)
    except kvplan.InputError as e:
        hint = f" (did you mean {e.suggestion!r}?)" if e.suggestion else ""
        print(f"launcher: bad {e.keyword or e.field} {e.value!r}{hint}: {e.problem}", file=sys.stderr)
        return 2
    if args.plan_json:
        with open(args.plan_json, "w", encoding="utf-8") as f:
            f.write(plan.to_json())
    if plan.recommended is None:
        why = plan.nothing_acceptable if plan.verdict == "nothing_acceptable" else plan.nothing_fits
        print(f"launcher: {plan.verdict.replace('_', ' ')}: {why}", file=sys.stderr)
        for s in plan.suggestions:
            print(f"launcher:   {s.summary}\n              kvplan {' '.join(s.args)}", file=sys.stderr)
        return 1
    launch = plan.recommended.launch_line
    print(launch)
    if args.exec:
        command = shlex.split(launch)
        os.execvp(command[0], command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
