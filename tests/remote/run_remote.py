#!/usr/bin/env python3
"""Remote models, offline (issue 16 items 1-2): a loopback server (tests/remote/server.py) serves Hub-shaped and
registry-shaped responses and small real GGUF files with Range; kvplan reads them header only.

Checks: the plan of a remote repo, URL or Ollama tag equals the plan of the same local file but for model.source,
model.files, the model's spelling and the launch lines; only the header was read (bytes the server sent); the
launch line names the remote model (-hf repo:quant, -mu URL, Modelfile FROM tag); a second plan works with
HF_HUB_OFFLINE=1 from the cache; 404, 401/403, a redirect loop, a timeout, a truncated header, a truncated reply,
a server that ignores Range, garbage JSON, a file that is not a GGUF and a missing quant each exit 2 naming the
model and the cause. The server's Hub shape is checked with huggingface_hub (PyPI) through HF_ENDPOINT.

usage: run_remote.py --kvplan build/kvplan [--pythonpath build/python:python]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import gguf_split  # noqa: E402
import server  # noqa: E402

PAD = 4 << 20          # tensor data appended to each tiny header: what a header-only reader must not read
FIRST_CHUNK = 256 << 10  # net/src/remote_model.cpp kFirstChunk
OLLAMA_IDS = ("tiny-1b", "small-Q4_K_M")  # an Ollama model's id is MODEL-TAG (its blob has no file name)
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def seed(name: str) -> bytes:
    return (ROOT / "tests" / "fuzz" / "seeds" / name).read_bytes() + b"\0" * PAD


def safetensors(tensors: dict[str, tuple[str, list[int]]]) -> tuple[bytes, int]:
    """A safetensors file: 8-byte header length, JSON header, data (zeros). Returns the file and its data size."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in tensors.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}  # type: ignore[assignment]
        offset += n
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"\0" * offset, offset


class Env:
    def __init__(self, kvplan: str, base: str, tmp: Path) -> None:
        self.kvplan, self.base, self.tmp = kvplan, base, tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "KVPLAN_OLLAMA_REGISTRY"}
        self.env.update({"HF_ENDPOINT": base, "KVPLAN_OLLAMA_REGISTRY": base, "XDG_CACHE_HOME": str(tmp / "cache"),
                         "KVPLAN_RAM": "unknown", "LC_ALL": "C", "KVPLAN_HTTP_TIMEOUT": "20"})

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, **extra)
        for k in [k for k, v in extra.items() if v == ""]:
            env.pop(k)
        return subprocess.run([self.kvplan, *args], capture_output=True, text=True, env=env, timeout=120)


def normalized(out: str, spellings: list[str]) -> object:
    """The plan JSON without what names where the model came from: model.source/files/id, launch lines, spellings."""
    for s in filter(None, spellings):
        out = out.replace(json.dumps(s)[1:-1], "<MODEL>")
    plan = json.loads(out)
    for key in ("source", "files", "id", "hf_id"):
        plan["model"].pop(key, None)

    def drop(x: object) -> object:
        if isinstance(x, dict):
            return {k: drop(v) for k, v in x.items() if k != "launch"}
        if isinstance(x, list):
            return [drop(v) for v in x]
        return x
    return drop(plan)


def first_difference(a: object, b: object, at: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{at}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{at}[{i}]")
    return f"{at}: {str(a)[:150]} != {str(b)[:150]}"


def same_plan(e: Env, remote: str, local: str, what: str, *flags: str, ids: tuple[str, str] = ("", ""),
              **extra: str) -> subprocess.CompletedProcess[str]:
    a = e.run("--gpu", "24GB", "--model", remote, "--json", *flags, **extra)
    b = e.run("--gpu", "24GB", "--model", local, "--json", *flags)
    check(a.returncode == b.returncode and a.returncode in (0, 1), f"{what}: plans (exit {a.returncode}; {a.stderr.strip()[:300]})")
    if a.returncode in (0, 1) and b.returncode in (0, 1):
        na, nb = normalized(a.stdout, [remote, *ids[:1]]), normalized(b.stdout, [local, *ids[1:]])
        check(na == nb, f"{what}: the plan equals the local file's{'' if na == nb else ': ' + first_difference(na, nb)}")
    return a


def served(content: server.Content, prefix: str) -> int:
    return sum(n for p, n in content.sent.items() if p.startswith(prefix))


def fails(e: Env, model: str, cause: str, what: str, **extra: str) -> None:
    r = e.run("--gpu", "24GB", "--model", model, **extra)
    named = f"--model '{model}'" in r.stderr
    check(r.returncode == 2 and named and cause in r.stderr,
          f"{what}: exit 2 naming the model and '{cause}' (exit {r.returncode}: {r.stderr.strip()[:300]})")


def build(tmp: Path) -> server.Content:
    c = server.Content()
    small, other = gguf_split.with_file_type(seed("llama-small.gguf"), 15), seed("qwen3next-hybrid.gguf")  # 15: Q4_K_M
    parts = gguf_split.split(gguf_split.with_file_type(seed("llama-small.gguf"), 18))  # 18: Q6_K (llama.h llama_ftype)
    local = tmp / "local"
    local.mkdir()
    (local / "small-Q4_K_M.gguf").write_bytes(small)
    for i, p in enumerate(parts):
        (local / f"small-Q6_K-{i + 1:05d}-of-{len(parts):05d}.gguf").write_bytes(p)
    c.repos["test/small-GGUF"] = {"README.md": b"# test", "mmproj-small-Q4_K_M.gguf": b"not a model", "small-Q8_0.gguf": other,
                                  "small-Q4_K_M.gguf": small}
    big = gguf_split.with_strings(small, "test.tokens", 150_000, 16)  # a 3.6 MB header, as a 150k-token vocabulary's
    (local / "big-Q4_K_M.gguf").write_bytes(big)
    c.repos["test/big-GGUF"] = {"big-Q4_K_M.gguf": big}
    c.repos["test/split-GGUF"] = {f"Q6_K/small-Q6_K-{i + 1:05d}-of-{len(parts):05d}.gguf": p for i, p in enumerate(parts)}
    c.repos["test/gated"] = {"small-Q4_K_M.gguf": small}
    c.gated.add("test/gated")
    golden = ROOT / "tests" / "golden" / "models" / "qwen2.5-coder-32b"
    cfg = {p.name: p.read_bytes() for p in golden.iterdir() if p.suffix == ".json"}
    c.repos["test/config"] = cfg
    shutil.copytree(golden, local / "config")
    # a config with one safetensors file and no index: the parameter count from the safetensors header
    st, size = safetensors({"model.embed_tokens.weight": ("BF16", [1024, 64]), "lm_head.weight": ("BF16", [1024, 64])})
    c.repos["test/config-st"] = {"config.json": cfg["config.json"], "model.safetensors": st + b"\0" * PAD}
    (local / "config-st").mkdir()
    (local / "config-st" / "config.json").write_bytes(cfg["config.json"])
    (local / "config-st" / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": size}}))
    c.ollama["library/tiny:1b"] = small
    c.files["/files/small-Q4_K_M.gguf"] = small
    c.files["/files/trunc.gguf"] = small[:300]
    c.files["/files/notgguf.gguf"] = b"PK\3\4" + b"\0" * 4096
    return c


def hub_client(base: str, tmp: Path, content: server.Content) -> None:
    """The server's Hub shape, as huggingface_hub reads it through HF_ENDPOINT."""
    os.environ["HF_ENDPOINT"] = base
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    try:
        import huggingface_hub as hh
    except ImportError:
        check(False, "huggingface_hub is importable (pip install -r requirements-dev.txt)")
        return
    api = hh.HfApi(endpoint=base)
    info = api.model_info("test/small-GGUF")
    check(sorted(s.rfilename for s in info.siblings or []) == sorted(content.repos["test/small-GGUF"]), "huggingface_hub model_info lists the files")
    tree = [f.path for f in api.list_repo_tree("test/split-GGUF", recursive=True) if isinstance(f, hh.hf_api.RepoFile)]
    check(sorted(tree) == sorted(content.repos["test/split-GGUF"]), "huggingface_hub list_repo_tree lists the files")
    got = hh.hf_hub_download("test/config", "config.json", cache_dir=str(tmp / "hfcache"), endpoint=base)
    check(Path(got).read_bytes() == content.repos["test/config"]["config.json"], "huggingface_hub hf_hub_download fetches config.json")
    meta = hh.get_hf_file_metadata(hh.hf_hub_url("test/small-GGUF", "small-Q4_K_M.gguf", endpoint=base))
    check(meta.size == len(content.repos["test/small-GGUF"]["small-Q4_K_M.gguf"]) and meta.commit_hash == server.COMMIT,
          "huggingface_hub get_hf_file_metadata follows the resolve redirect (size, commit)")


def plans(e: Env, c: server.Content) -> None:
    local = e.tmp / "local"
    c.reset()
    r = same_plan(e, "test/small-GGUF:Q4_K_M", str(local / "small-Q4_K_M.gguf"), "hub GGUF repo:quant")
    file_size = len(c.repos["test/small-GGUF"]["small-Q4_K_M.gguf"])
    gguf_bytes = served(c, "/cdn/test/small-GGUF/small-Q4_K_M.gguf")
    print(f"      header bytes read: {gguf_bytes} of a {file_size}-byte file; listing {served(c, '/api/')} bytes")
    check(0 < gguf_bytes <= FIRST_CHUNK and gguf_bytes < file_size, "hub GGUF: only the header was read")
    check(served(c, "/cdn/test/small-GGUF/small-Q8_0.gguf") == 0 and served(c, "/cdn/test/small-GGUF/mmproj") == 0,
          "hub GGUF: no other file of the repo was read")
    check(r.returncode in (0, 1) and "llama-server -hf test/small-GGUF:Q4_K_M -c" in r.stdout, "hub GGUF: launch line is llama-server -hf repo:quant")
    c.reset()
    same_plan(e, "test/big-GGUF:Q4_K_M", str(local / "big-Q4_K_M.gguf"), "hub GGUF with a 3.6 MB header")
    big = c.repos["test/big-GGUF"]["big-Q4_K_M.gguf"]
    header = 150_000 * 24  # the added strings alone (8-byte length + 16 bytes each): the header is a little more
    got, requests = served(c, "/cdn/test/big-GGUF/"), sum("big-Q4_K_M.gguf" in r and "/cdn/" in r for r in c.requests)
    print(f"      large header: {got} bytes read in {requests} range requests of a {len(big)}-byte file (header ~{header} bytes)")
    check(header < got <= 2 * header + FIRST_CHUNK and got < len(big), "hub GGUF with a large header: the header and no more than twice it was read")
    i = e.run("inspect", "test/small-GGUF:Q4_K_M", "--json")
    check(i.returncode == 0 and json.loads(i.stdout or "{}").get("source") == "hub", f"inspect reads a Hub repo ({i.stderr.strip()[:200]})")
    try:
        import jsonschema
        jsonschema.validate(json.loads(r.stdout), json.loads((ROOT / "schema" / "plan.schema.json").read_text()))
        check(True, "a remote plan's JSON validates against schema/plan.schema.json")
    except ImportError:
        print("skip  jsonschema is not installed")
    except jsonschema.ValidationError as err:
        check(False, f"a remote plan's JSON validates against schema/plan.schema.json: {err.message}")
    same_plan(e, "test/small-GGUF", str(local / "small-Q4_K_M.gguf"), "hub GGUF repo without a quant (llama.cpp's default Q4_K_M)")
    same_plan(e, "hf.co/test/small-GGUF:Q4_K_M", str(local / "small-Q4_K_M.gguf"), "hf.co/ spelling")
    p = e.run("--gpu", "24GB", "-hf", "test/small-GGUF:Q4_K_M", "--emit", "llama-server", "--accept-risk")
    check(p.returncode == 0 and p.stdout.startswith("llama-server -hf test/small-GGUF:Q4_K_M "), f"-hf pasted from llama.cpp: {p.stdout.strip()[:120]}")
    m = e.run("--gpu", "24GB", "--model", "test/small-GGUF:Q4_K_M", "--engine", "ollama", "--emit", "modelfile", "--accept-risk")
    check(m.returncode == 0 and m.stdout.startswith("FROM hf.co/test/small-GGUF:Q4_K_M\n"), f"hub GGUF: Modelfile FROM hf.co/repo:quant ({m.stdout[:60]!r})")
    c.reset()
    first = local / "small-Q6_K-00001-of-00002.gguf"
    same_plan(e, "test/split-GGUF:Q6_K", str(first), "hub GGUF split files")
    check(served(c, "/cdn/test/split-GGUF/Q6_K/small-Q6_K-00002-of-00002.gguf") > 0, "hub GGUF split: every split's header was read")
    c.reset()
    url = e.base + "/files/small-Q4_K_M.gguf"
    u = same_plan(e, url, str(local / "small-Q4_K_M.gguf"), "GGUF by URL")
    check(served(c, "/files/") <= FIRST_CHUNK, f"GGUF by URL: only the header was read ({served(c, '/files/')} bytes)")
    check(f"llama-server -mu {url} -c" in u.stdout, "GGUF by URL: launch line is llama-server -mu URL")
    c.reset()
    same_plan(e, "tiny:1b", str(local / "small-Q4_K_M.gguf"), "Ollama tag", ids=OLLAMA_IDS)
    check(0 < served(c, "/v2/library/tiny/blobs/") <= FIRST_CHUNK, f"Ollama tag: only the blob's header was read ({served(c, '/v2/library/tiny/blobs/')} bytes)")
    o = e.run("--gpu", "24GB", "--model", "tiny:1b", "--engine", "ollama", "--emit", "modelfile", "--accept-risk")
    check(o.returncode == 0 and o.stdout.startswith("FROM tiny:1b\n"), f"Ollama tag: Modelfile FROM the tag ({o.stdout[:40]!r}{o.stderr[:200]})")
    # a typo of a catalog name that the registry does not have either: the catalog's suggestion comes with the 404
    fails(e, "qwen3:29b", "did you mean 'qwen3-30b-a3b'", "Ollama tag the registry lacks, near a catalog name")
    c.reset()
    same_plan(e, "test/config", str(local / "config"), "hub config.json + safetensors index")
    same_plan(e, "test/config-st", str(local / "config-st"), "hub config.json + safetensors header (no index)")
    check(served(c, "/cdn/test/config-st/model.safetensors") < 4096, f"safetensors: only the header was read ({served(c, '/cdn/test/config-st/')} bytes)")


def offline(e: Env, c: server.Content) -> None:
    local = e.tmp / "local"
    c.reset()
    same_plan(e, "test/small-GGUF:Q4_K_M", str(local / "small-Q4_K_M.gguf"), "HF_HUB_OFFLINE=1 after one online plan", HF_HUB_OFFLINE="1")
    same_plan(e, "tiny:1b", str(local / "small-Q4_K_M.gguf"), "Ollama tag offline from the cache", ids=OLLAMA_IDS, HF_HUB_OFFLINE="1")
    check(sum(c.sent.values()) == 0, "offline: the server was not asked")
    fails(e, "test/split-GGUF:Q8_0", "HF_HUB_OFFLINE", "offline without a cached copy", HF_HUB_OFFLINE="1",
          XDG_CACHE_HOME=str(e.tmp / "empty-cache"))


def errors(e: Env) -> None:
    b = e.base
    fails(e, "test/missing:Q4_K_M", "HTTP 404", "a repo that does not exist")
    fails(e, "test/gated:Q4_K_M", "HTTP 401", "a gated repo without HF_TOKEN")
    fails(e, "test/gated:Q4_K_M", "HF_TOKEN", "a gated repo says what to do")
    fails(e, "test/gated:Q4_K_M", "HTTP 403", "a gated repo with a token that has no access", HF_TOKEN="hf_bad")
    r = e.run("--gpu", "24GB", "--model", "test/gated:Q4_K_M", "--json", HF_TOKEN=server.GOOD_TOKEN)
    check(r.returncode in (0, 1), f"a gated repo with a token that has access plans ({r.stderr.strip()[:200]})")
    token_files(e)
    fails(e, "test/small-GGUF:IQ1_S", "no GGUF for the quant", "a quant the repo does not have")
    fails(e, b + "/loop/x.gguf", "redirects", "a redirect loop")
    fails(e, b + "/slow/small-Q4_K_M.gguf", "timed out after 1 s", "a server that does not answer in time", KVPLAN_HTTP_TIMEOUT="1")
    fails(e, b + "/files/trunc.gguf", "truncated", "a GGUF whose header is cut short")
    fails(e, b + "/short/small-Q4_K_M.gguf", "partial", "a reply shorter than it announced")
    fails(e, b + "/norange/small-Q4_K_M.gguf", "ignored Range", "a server that ignores Range")
    fails(e, b + "/files/notgguf.gguf", "not a valid GGUF", "a file that is not a GGUF")
    fails(e, b + "/files/none.gguf", "HTTP 404", "a URL that does not exist")
    fails(e, "test/garbage", "not a JSON array", "garbage JSON from the Hub")
    fails(e, "garbage:latest", "not JSON", "garbage JSON from the registry")
    fails(e, "test/badtypes", "neither a GGUF nor a config.json", "a listing of the wrong JSON types (and a name with an escape)")
    fails(e, "baddigest:latest", "names no model layer", "a registry manifest whose digest is not sha256 hex")
    fails(e, "nosuchmodel:7b", "HTTP 404", "an Ollama tag the registry does not have")
    fails(e, "bad owner/x", "not a Hugging Face repo id", "a malformed repo id (no request made)")


def python_api(e: Env, pythonpath: str) -> None:
    code = ("import json, kvplan\n"
            "assert kvplan.read_model('tiny:1b').name == 'tiny-1b'\n"
            "p = kvplan.plan(gpu='24GB', model='test/small-GGUF:Q4_K_M')\n"
            "print(p.to_json() if hasattr(p, 'to_json') else json.dumps(p.json))\n")
    env = dict(e.env, PYTHONPATH=pythonpath)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    c = e.run("--gpu", "24GB", "--model", "test/small-GGUF:Q4_K_M", "--json")
    ok = r.returncode == 0
    if ok:
        try:
            ok = normalized(r.stdout, ["test/small-GGUF:Q4_K_M"]) == normalized(c.stdout, ["test/small-GGUF:Q4_K_M"])
        except (ValueError, KeyError):
            ok = False
    check(ok, f"Python kvplan.plan(model='test/small-GGUF:Q4_K_M') plans as the CLI does ({r.stderr.strip()[-300:]})")


def hub_token_of(e: Env, **extra: str) -> str | None:
    """The token huggingface_hub (PyPI) finds in this environment: the rule kvplan must follow."""
    env = dict(e.env, **extra)
    for k in [k for k, v in extra.items() if v == ""]:
        env.pop(k)
    code = "import huggingface_hub as h; print(repr(h.get_token()))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    return eval(r.stdout.strip()) if r.returncode == 0 else "<huggingface_hub failed: " + r.stderr.strip()[-200:] + ">"


def token_files(e: Env) -> None:
    """The token file, read as huggingface_hub reads it: $HF_TOKEN first, then $HF_TOKEN_PATH, then $HF_HOME/token,
    then $XDG_CACHE_HOME/huggingface/token; CR/LF and surrounding spaces removed; each case also asked of
    huggingface_hub.get_token() in the same environment."""
    d = e.tmp / "tokens"
    (d / "home").mkdir(parents=True, exist_ok=True)
    (d / "path-token").write_text("  " + server.GOOD_TOKEN + "\r\n")
    (d / "home" / "token").write_text(server.GOOD_TOKEN + "\n")
    (d / "empty-token").write_text("\n")
    default = Path(e.env["XDG_CACHE_HOME"]) / "huggingface" / "token"
    cases = [  # (what, env, token huggingface_hub and kvplan should send)
        ("HF_TOKEN_PATH names the token file", {"HF_TOKEN_PATH": str(d / "path-token")}, server.GOOD_TOKEN),
        ("$HF_HOME/token", {"HF_HOME": str(d / "home")}, server.GOOD_TOKEN),
        ("HF_TOKEN_PATH wins over $HF_HOME/token", {"HF_TOKEN_PATH": str(d / "empty-token"), "HF_HOME": str(d / "home")}, None),
        ("HF_TOKEN wins over the token file", {"HF_TOKEN": "hf_bad", "HF_TOKEN_PATH": str(d / "path-token")}, "hf_bad"),
        ("an empty token file is no token", {"HF_TOKEN_PATH": str(d / "empty-token")}, None),
        ("$XDG_CACHE_HOME/huggingface/token by default", {}, server.GOOD_TOKEN),
    ]
    try:
        default.parent.mkdir(parents=True, exist_ok=True)
        default.write_text(server.GOOD_TOKEN)
        for what, extra, token in cases:
            check(hub_token_of(e, **extra) == token, f"token file: huggingface_hub agrees that {what} gives {token!r}")
            r = e.run("--gpu", "24GB", "--model", "test/gated:Q4_K_M", "--json", **extra)
            if token == server.GOOD_TOKEN:
                check(r.returncode in (0, 1), f"token file: {what}: the gated repo plans ({r.stderr.strip()[:200]})")
            else:
                cause = "HTTP 403" if token else "HTTP 401"
                check(r.returncode == 2 and cause in r.stderr, f"token file: {what}: {cause} ({r.stderr.strip()[:200]})")
    finally:
        default.unlink()
    r = e.run("--gpu", "24GB", "--model", "test/gated:Q4_K_M", HF_TOKEN_PATH=str(d))
    check(r.returncode == 2 and "token file" in r.stderr and str(d) in r.stderr,
          f"token file: a folder as HF_TOKEN_PATH exits 2 naming it ({r.stderr.strip()[:200]})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvplan", required=True)
    ap.add_argument("--pythonpath", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        content = build(tmp)
        srv, base = server.start(content)
        try:
            e = Env(args.kvplan, base, tmp)
            plans(e, content)
            offline(e, content)
            errors(e)
            if args.pythonpath:
                python_api(e, args.pythonpath)
            hub_client(base, tmp, content)
        finally:
            srv.shutdown()
    print(f"{len(failures)} failure(s)" if failures else "all remote checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
