"""`kvplan serve`: a local web page and JSON API over the same call as `kvplan --json` (starlette on uvicorn).

    kvplan serve                       # http://127.0.0.1:8765/ (loopback only)
    kvplan serve --port 9000
    kvplan serve --host 0.0.0.0 --allow-remote [--allowed-host planner.lan]

GET /plan, /explain, /what-fits, /models, /gpus, /engines take the CLI's flags as query parameters
(`/plan?gpu=rtx4090&model=qwen3-32b&task=coding&ctx-size=32k`; a switch as `kv-unified` or `kv-unified=true`; a
repeated `gpu` for several GPUs) and answer with exactly what `kvplan [explain|models|gpus|engines] ... --json`
prints: 200 for a plan (nothing fitting included: its verdict says so), 400 with the CLI's JSON error object for bad
input. /tasks lists the task profiles for the page's menu. / is the page (python/kvplan/web/), which uses nothing but
this API and its own files.

Safety: the Host header must name this server (a DNS-rebinding page cannot), no CORS headers are sent, and a
server bound to a network address refuses parameters that read the server's files (--data, --priors, --mmproj,
a --model path or URL).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from ._cli import COMMANDS, Answer, arguments, error_json, refuse, run
from ._errors import InputError

if TYPE_CHECKING:  # starlette is imported when the server starts: `import kvplan` does not need it
    from starlette.responses import Response

DEFAULT_PORT = 8765
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ASSETS = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
# The page runs only its own script and styles, and talks only to this server.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_Asgi = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8765" -> "::1")."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def host_allowed(header: str, bound: str, extra: Sequence[str]) -> bool:
    """DNS rebinding defence: a page on another site can point its own name at this address, but cannot make the
    browser send anything but that name in Host. Accepted: the loopback names, the bound address, names given
    with --allowed-host, and, when bound to every interface, any IP address literal (which no rebinding changes)."""
    name = _host_name(header.strip()).lower()
    if name in LOOPBACK_NAMES or name == bound.lower() or name in (e.lower() for e in extra):
        return True
    if bound in ("0.0.0.0", "::"):
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return False
    return False


def status_of(answer: Answer) -> int:
    """0 a plan, 1 nothing fits (still an answer) -> 200; 2 bad input -> 400; anything else -> 500."""
    return {0: 200, 1: 200, 2: 400}.get(answer.code, 500)


def _json_response(body: bytes, status: int) -> Response:
    from starlette.responses import Response
    return Response(body, status_code=status, media_type="application/json",
                    headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})


def _host_guard(app: _Asgi, bound: str, allowed_hosts: Sequence[str]) -> _Asgi:
    """The application behind the Host check: a request for another name gets 403 and the error object."""
    async def guarded(scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            host = headers.get("host", "")
            if not host_allowed(host, bound, allowed_hosts):
                error = refuse("Host", host, "is not a name of this server (a DNS-rebinding defence); "
                               "use http://127.0.0.1, or start it with --allowed-host NAME")
                await _json_response(error_json(error), 403)(scope, receive, send)
                return
        await app(scope, receive, send)
    return guarded


def create_app(bound: str = "127.0.0.1", allowed_hosts: Sequence[str] = (), files_allowed: bool | None = None) -> _Asgi:
    """The ASGI application. files_allowed defaults to whether `bound` is a loopback address."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    files = is_loopback(bound) if files_allowed is None else files_allowed

    def endpoint(command: str) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            try:
                args = arguments(command, request.query_params.multi_items(), files)
            except InputError as e:
                return _json_response(error_json(e), 400)
            result = await run_in_threadpool(run, args)  # the GIL is released while it plans
            if result.code not in (0, 1, 2):
                problem = result.err.decode("utf-8", "replace").strip() or "kvplan failed"
                return _json_response(error_json(refuse("internal", "", problem)), 500)
            return _json_response(result.out, status_of(result))
        return answer

    async def tasks(request: Request) -> Response:
        from ._catalog import tasks as catalog_tasks
        items = [{"id": t.id, "name": t.name, "ctx_target": t.ctx_target} for t in catalog_tasks()]
        return _json_response((json.dumps({"tasks": items}, indent=2) + "\n").encode(), 200)

    async def asset(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        if name not in ASSETS:
            return Response("not found\n", status_code=404, media_type="text/plain")
        body = resources.files("kvplan").joinpath("web", name).read_bytes()
        return Response(body, media_type=ASSETS[name], headers=PAGE_HEADERS)

    routes = [Route("/" + name, endpoint(name), methods=["GET"]) for name in COMMANDS]
    routes += [Route("/tasks", tasks, methods=["GET"]), Route("/", asset, methods=["GET"]),
               Route("/{name:str}", asset, methods=["GET"])]
    return _host_guard(Starlette(routes=routes), bound, allowed_hosts)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvplan serve", description="kvplan's web page and JSON API (see kvplan.serve)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="required to bind anything but loopback: every machine that reaches the address may ask")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a name clients use for this server in the Host header (repeatable)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not is_loopback(args.host) and not args.allow_remote:
        print(f"kvplan serve: --host {args.host} is reachable from other machines; add --allow-remote to mean it "
              "(files and URLs on this machine stay out of reach of its clients)", file=sys.stderr)
        return 2
    try:
        import uvicorn
    except ImportError:
        print("kvplan serve needs starlette and uvicorn: pip install 'kvplan[serve]' (scripts/setup.sh installs them)",
              file=sys.stderr)
        return 2
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        print(f"kvplan serve: cannot listen on {args.host}:{args.port}: {e.strerror}", file=sys.stderr)
        return 2
    sock.listen(128)  # from here a client may connect: requests wait until the server runs
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    print(f"kvplan serve: http://{shown}:{port}/", file=sys.stderr, flush=True)
    config = uvicorn.Config(create_app(args.host, args.allowed_host), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
