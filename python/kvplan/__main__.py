"""`python -m kvplan ARGS`: the `kvplan` program (`kvplan serve` and `kvplan mcp` run the servers; anything else
runs the CLI's own code in this process, as `kvplan ARGS` would)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("serve", "mcp"):
        try:
            if argv[0] == "serve":
                from .serve import main as serve
                return serve(argv[1:])
            from .mcp_server import main as mcp
            return mcp(argv[1:])
        except ImportError as e:
            print(f"kvplan {argv[0]} needs {e.name}: pip install -r requirements-dev.txt, or pip install 'kvplan[serve]' "
                  "(scripts/setup.sh installs it)", file=sys.stderr)
            return 2
    from ._cli import run
    answer = run(argv)
    sys.stdout.buffer.write(answer.out)
    sys.stderr.buffer.write(answer.err)
    return answer.code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
