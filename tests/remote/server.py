"""A loopback server shaped like the Hugging Face Hub, the Ollama registry and a plain file host, for the remote
model tests (tests/remote/run_remote.py). Offline and deterministic: it serves what it is given, honours Range
(bytes=a-b), counts the body bytes it sends per path, and misbehaves on purpose on the paths listed in BEHAVIOURS.

Hub shapes (huggingface_hub hf_api.py, file_download.py): GET /api/models/{repo} (model_info),
GET /api/models/{repo}/tree/{rev}[?recursive=...] (list_repo_tree), GET|HEAD /{repo}/resolve/{rev}/{file} with
X-Repo-Commit, ETag and Content-Length. Registry shapes (ollama server/images.go): GET /v2/{ns}/{model}/manifests/{tag},
GET /v2/{ns}/{model}/blobs/{digest}.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GOOD_TOKEN = "hf_good"


class Content:
    """What the server holds: Hub repos (repo -> {path: bytes}), registry models and plain files."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.ollama: dict[str, bytes] = {}          # "library/model:tag" -> GGUF bytes
        self.files: dict[str, bytes] = {}           # "/files/name.gguf" -> bytes
        self.gated: set[str] = set()                # repos that need "Authorization: Bearer hf_good"
        self.sent: dict[str, int] = {}              # path (no query) -> body bytes sent
        self.requests: list[str] = []
        self.lock = threading.Lock()

    def count(self, path: str, n: int) -> None:
        with self.lock:
            self.sent[path] = self.sent.get(path, 0) + n

    def reset(self) -> None:
        with self.lock:
            self.sent.clear()
            self.requests.clear()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_handler(content: Content) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        # ---- replies ----
        def send_json(self, obj: object, status: int = 200) -> None:
            self.send_bytes(json.dumps(obj).encode(), "application/json", status)

        def send_bytes(self, body: bytes, ctype: str, status: int = 200, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                try:
                    self.wfile.write(body)
                except (ConnectionResetError, BrokenPipeError):  # a client that stops reading (Range ignored)
                    self.close_connection = True
                    return
                content.count(urllib.parse.urlsplit(self.path).path, len(body))

        def send_error_status(self, status: int, message: str) -> None:
            self.send_json({"error": message}, status)

        def send_file(self, data: bytes, ignore_range: bool = False, truncate: bool = False) -> None:
            """A file with Range (bytes=a-b or a-), as the Hub's CDN and a registry serve blobs."""
            etag = '"' + hashlib.sha256(data).hexdigest() + '"'
            headers = {"Accept-Ranges": "bytes", "ETag": etag, "X-Repo-Commit": COMMIT}
            rng = self.headers.get("Range")
            if not rng or ignore_range:
                self.send_bytes(data, "application/octet-stream", 200, headers)
                return
            spec = rng.removeprefix("bytes=")
            first_s, _, last_s = spec.partition("-")
            first = int(first_s)
            last = min(int(last_s) if last_s else len(data) - 1, len(data) - 1)
            if first >= len(data):
                self.send_bytes(b"", "application/octet-stream", 416, {"Content-Range": f"bytes */{len(data)}"})
                return
            body = data[first:last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
            if truncate:  # announce the range, send half of it, and hang up
                self.send_response(206)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                content.count(urllib.parse.urlsplit(self.path).path, len(body) // 2)
                self.close_connection = True
                return
            self.send_bytes(body, "application/octet-stream", 206, headers)

        # ---- routes ----
        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            path = urllib.parse.unquote(url.path)
            with content.lock:
                content.requests.append(self.command + " " + self.path)
            if path.startswith("/slow/"):
                time.sleep(5)
            if path.startswith("/loop/"):
                self.send_bytes(b"", "text/plain", 302, {"Location": self.path})
                return
            if path.startswith("/files/") or path.startswith("/slow/") or path.startswith("/norange/") or path.startswith("/short/"):
                name = "/files/" + path.split("/", 2)[2]
                if name not in content.files:
                    self.send_error_status(404, "no such file")
                    return
                self.send_file(content.files[name], ignore_range=path.startswith("/norange/"), truncate=path.startswith("/short/"))
                return
            if path.startswith("/cdn/"):  # where the Hub's resolve redirects LFS files
                repo_file = path[len("/cdn/"):]
                owner, name, rest = repo_file.split("/", 2)
                data = content.repos.get(owner + "/" + name, {}).get(rest)
                if data is None:
                    self.send_error_status(404, "no such file")
                else:
                    self.send_file(data)
                return
            if path.startswith("/v2/"):
                self.registry(path)
                return
            if path.startswith("/api/models/"):
                self.api(path[len("/api/models/"):])
                return
            self.resolve(path.lstrip("/"))

        def denied(self, repo: str) -> bool:
            if repo not in content.gated:
                return False
            auth = self.headers.get("Authorization", "")
            if auth == "Bearer " + GOOD_TOKEN:
                return False
            self.send_error_status(401 if not auth else 403, "Access to model " + repo + " is restricted.")
            return True

        def repo_of(self, rest: str) -> tuple[str, str] | None:
            parts = rest.split("/", 2)
            if len(parts) < 2:
                return None
            return parts[0] + "/" + parts[1], parts[2] if len(parts) > 2 else ""

        def api(self, rest: str) -> None:
            got = self.repo_of(rest)
            if not got:
                self.send_error_status(404, "not found")
                return
            repo, tail = got
            if repo == "test/garbage":
                self.send_bytes(b"{not json", "application/json")
                return
            if repo == "test/badtypes":  # JSON of the wrong shape: numbers where strings belong
                self.send_json([{"type": 5, "path": 3}, {"type": "file", "path": ["x.gguf"]}, {"type": "file", "path": "a\x1b[2Jb.gguf"}])
                return
            if repo not in content.repos:
                self.send_error_status(404, "Repository not found")
                return
            if self.denied(repo):
                return
            files = content.repos[repo]
            if not tail:  # model_info
                self.send_json({"_id": repo, "id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                                "gated": repo in content.gated, "disabled": False, "downloads": 0, "likes": 0,
                                "tags": ["gguf"] if any(p.endswith(".gguf") for p in files) else [],
                                "lastModified": "2025-01-01T00:00:00.000Z", "createdAt": "2025-01-01T00:00:00.000Z",
                                "siblings": [{"rfilename": p} for p in files]})
                return
            if tail.startswith("tree/"):
                dirs = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
                entries: list[dict[str, object]] = [{"type": "directory", "oid": COMMIT, "size": 0, "path": d} for d in dirs]
                for p, data in files.items():
                    entries.append({"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": p})
                self.send_json(entries)
                return
            self.send_error_status(404, "not found")

        def resolve(self, rest: str) -> None:
            got = self.repo_of(rest)
            if not got or not got[1].startswith("resolve/"):
                self.send_error_status(404, "not found")
                return
            repo, tail = got
            if repo not in content.repos:
                self.send_error_status(404, "Repository not found")
                return
            if self.denied(repo):
                return
            file = tail.split("/", 2)[2] if tail.count("/") >= 2 else ""
            data = content.repos[repo].get(file)
            if data is None:
                self.send_error_status(404, "Entry not found")
                return
            if file.endswith(".gguf") or file.endswith(".safetensors"):  # LFS: the Hub redirects to its CDN
                self.send_bytes(b"", "text/plain", 302, {"Location": f"/cdn/{repo}/{file}", "X-Repo-Commit": COMMIT,
                                                        "X-Linked-Etag": '"' + hashlib.sha256(data).hexdigest() + '"',
                                                        "X-Linked-Size": str(len(data)), "ETag": '"x"'})
                return
            self.send_file(data)

        def registry(self, path: str) -> None:
            parts = path.split("/")  # "", "v2", ns, model, "manifests"|"blobs", ref
            if len(parts) != 6:
                self.send_error_status(404, "not found")
                return
            _, _, ns, model, kind, ref = parts
            if kind == "manifests":
                if model == "garbage":
                    self.send_bytes(b"<html>not json", "application/json")
                    return
                if model == "baddigest":  # a digest that would walk out of the blob store
                    self.send_json({"schemaVersion": 2, "layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                                    "digest": "sha256:../../etc/passwd", "size": 1}]})
                    return
                data = content.ollama.get(f"{ns}/{model}:{ref}")
                if data is None:
                    self.send_error_status(404, "manifest unknown")
                    return
                self.send_json({"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                           "digest": digest_of(b"{}"), "size": 2},
                                "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": digest_of(data),
                                            "size": len(data)},
                                           {"mediaType": "application/vnd.ollama.image.template", "digest": digest_of(b"t"),
                                            "size": 1}]})
                return
            if kind == "blobs":
                for data in content.ollama.values():
                    if digest_of(data) == ref:
                        self.send_file(data)
                        return
            self.send_error_status(404, "blob unknown")

    return Handler


def start(content: Content) -> tuple[ThreadingHTTPServer, str]:
    """Serve `content` on 127.0.0.1 at a free port from a daemon thread; returns the server and its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(content))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
