#!/usr/bin/env python3
"""Golden CLI tests for kvplan.

    run_golden.py --kvplan build/kvplan --schema schema/plan.schema.json [--only NAME ...]

Reads cases.txt next to this script, one case per line:

    name | expected_exit_code | args...

(args split with shlex; '#' comments and blank lines ignored). Each case runs the binary from the
repository root with LC_ALL=C, COLUMNS=120, NO_COLOR=1, KVPLAN_RAM=unknown and KVPLAN_DATA unset, and its stdout,
stderr and exit code are compared byte for byte with expected/<name>.out:

    <stdout>
    --- stderr ---
    <stderr>
    --- exit N ---

(a stream that does not end in a newline is followed by the line '\\ no newline at end').

Checks besides the golden comparison:
  * every case whose args contain --json: stdout validates against the JSON Schema (Draft 2020-12):
    a plan (exit 0 or 1) or an input error (exit 2: the error object, $defs/error);
  * every case named feedback_*: the first option's llama.cpp launch line, fed back to kvplan with
    the same --gpu and --task, reproduces the option (weights, ctx_size, cache types, flash
    attention, memory, quality);
  * the case named 'mission': the recommended K and V are the same type.

KVPLAN_UPDATE_GOLDEN=1 writes the expected files instead of comparing them (the only way to
rewrite them; CI only checks). Prints one final line 'N passed, N failed'; exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CASES = HERE / "cases.txt"
EXPECTED = HERE / "expected"
TIMEOUT_S = 120

# Flags that shape the budget or the catalog but are not part of a launch line: a feedback run
# carries them over from the original case so that it plans against the same device and data.
CARRIED_FLAGS = {"--reserve", "--free", "--build", "--data", "--engine"}
CARRIED_SWITCHES = {"--allow-slow"}
# What a fed-back plan must reproduce of the first option.
FEEDBACK_KEYS = ("weights", "ctx_size", "cache_type_k", "cache_type_v", "flash_attn", "memory", "quality")


class Case:
    def __init__(self, name: str, exit_code: int, args: list[str], line: int):
        self.name, self.exit_code, self.args, self.line = name, exit_code, args, line


class Tally:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []

    def ok(self) -> None:
        self.passed += 1

    def fail(self, what: str, detail: str = "") -> None:
        self.failed += 1
        self.failures.append(what)
        print(f"FAIL {what}")
        if detail:
            print(detail.rstrip("\n"))


def parse_cases(path: Path) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise SystemExit(f"{path}:{n}: expected 'name | exit_code | args...'")
        name, code, rest = (p.strip() for p in parts)
        if not name or not all(c.isalnum() or c in "_-." for c in name):
            raise SystemExit(f"{path}:{n}: bad case name {name!r}")
        if name in seen:
            raise SystemExit(f"{path}:{n}: duplicate case name {name!r}")
        seen.add(name)
        try:
            exit_code = int(code)
        except ValueError:
            raise SystemExit(f"{path}:{n}: exit code {code!r} is not an integer") from None
        try:
            args = shlex.split(rest, comments=True)
        except ValueError as e:
            raise SystemExit(f"{path}:{n}: {e}") from None
        cases.append(Case(name, exit_code, args, n))
    return cases


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KVPLAN_DATA", None)
    env.pop("KVPLAN_UPDATE_GOLDEN", None)
    env["LC_ALL"] = "C"
    env["COLUMNS"] = "120"
    env["NO_COLOR"] = "1"
    env["KVPLAN_RAM"] = "unknown"  # not this machine's RAM: outputs must not depend on where the tests run
    return env


def run(kvplan: str, args: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([kvplan, *args], cwd=REPO, env=child_env(), capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
        err = (e.stderr or b"") + f"\n[run_golden: timed out after {TIMEOUT_S}s]\n".encode()
        return subprocess.CompletedProcess([kvplan, *args], -9, out, err)


def stream_block(data: bytes) -> bytes:
    if data and not data.endswith(b"\n"):
        return data + b"\n\\ no newline at end\n"
    return data


def render(proc: subprocess.CompletedProcess) -> bytes:
    return (stream_block(proc.stdout) + b"--- stderr ---\n" + stream_block(proc.stderr) +
            f"--- exit {proc.returncode} ---\n".encode())


def text(b: bytes) -> list[str]:
    return b.decode("utf-8", errors="replace").splitlines(keepends=True)


def unified_diff(expected: bytes, actual: bytes, name: str) -> str:
    lines = difflib.unified_diff(text(expected), text(actual), fromfile=f"expected/{name}.out", tofile=f"actual/{name}.out")
    out = ""
    for line in lines:
        out += line if line.endswith("\n") else line + "\n\\ no newline at end of line\n"
    return out or "(the files differ only in bytes that do not decode as UTF-8)\n"


def load_json(proc: subprocess.CompletedProcess, what: str, tally: Tally):
    try:
        return json.loads(proc.stdout.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        tally.fail(what, f"  stdout is not JSON: {e}\n  stderr: {proc.stderr.decode('utf-8', 'replace')}")
        return None


def validate(validator, doc, what: str, tally: Tally) -> None:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        tally.ok()
        return
    detail = ""
    for e in errors[:10]:
        path = "/".join(str(p) for p in e.absolute_path) or "(root)"
        detail += f"  at {path}: {e.message}\n"
    if len(errors) > 10:
        detail += f"  ... and {len(errors) - 10} more\n"
    tally.fail(what, detail)


def option_value(doc, key: str) -> str:
    try:
        return doc["options"][0][key]
    except (KeyError, IndexError, TypeError):
        return None


def carried_args(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        flag, eq, value = a.partition("=")
        if flag in CARRIED_SWITCHES:
            out.append(a)
        elif flag in CARRIED_FLAGS:
            if eq:
                out.append(a)
            elif i + 1 < len(args):
                out += [a, args[i + 1]]
                i += 1
        i += 1
    return out


def with_json(args: list[str]) -> list[str]:
    return args if "--json" in args else [*args, "--json"]


def differences(path: str, a, b) -> list[str]:
    """Where two JSON values differ, one line per differing leaf."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(f"{path}.{k}", a.get(k), b.get(k))
        return out
    if a != b:
        return [f"  {path}: first {json.dumps(a)}, fed back {json.dumps(b)}"]
    return []


def feedback_check(kvplan: str, case: Case, tally: Tally) -> None:
    what = f"{case.name} [feedback: launch line reproduces the plan]"
    first_proc = run(kvplan, with_json(case.args))
    if first_proc.returncode != 0:
        tally.fail(what, f"  first run exited {first_proc.returncode}; a feedback case needs a plan that fits\n"
                         f"  stderr: {first_proc.stderr.decode('utf-8', 'replace')}")
        return
    first = load_json(first_proc, what, tally)
    if first is None:
        return
    launch = None
    try:
        launch = first["options"][0]["launch"]["llama-server"]
    except (KeyError, IndexError, TypeError):
        pass
    if not isinstance(launch, str):
        tally.fail(what, "  first plan has no options[0].launch[\"llama-server\"]")
        return
    # The launch line goes first: kvplan drops a leading 'llama-server' (a pasted command line).
    gpus = [a for g in first["request"].get("extra_gpus", []) for a in ("--gpu", g)]  # several GPUs: each again
    args = [*shlex.split(launch), "--gpu", first["request"]["gpu"], *gpus, "--task", first["request"]["task"], "--json",
            *carried_args(case.args)]
    second_proc = run(kvplan, args)
    cmd = "kvplan " + shlex.join(args)
    if second_proc.returncode != 0:
        tally.fail(what, f"  {cmd}\n  exited {second_proc.returncode}: {second_proc.stderr.decode('utf-8', 'replace')}")
        return
    second = load_json(second_proc, what, tally)
    if second is None:
        return
    diffs = []
    for key in FEEDBACK_KEYS:
        diffs += differences(key, option_value(first, key), option_value(second, key))
    if diffs:
        tally.fail(what, f"  {cmd}\n" + "\n".join(diffs))
    else:
        tally.ok()


def mission_check(kvplan: str, case: Case, tally: Tally) -> None:
    what = f"{case.name} [recommended K and V are the same type]"
    proc = run(kvplan, with_json(case.args))
    doc = load_json(proc, what, tally)
    if doc is None:
        return
    k, v = option_value(doc, "cache_type_k"), option_value(doc, "cache_type_v")
    if doc.get("recommended") != 1 or k is None:
        tally.fail(what, "  the mission has no recommendation")
    elif k != v:
        tally.fail(what, f"  recommended K={k} V={v}: a mixed pair has no flash-attention kernel on a default CUDA build")
    else:
        tally.ok()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvplan", required=True, help="path to the kvplan binary")
    ap.add_argument("--schema", required=True, help="path to schema/plan.schema.json")
    ap.add_argument("--only", action="append", default=[], help="run only this case (repeatable)")
    opts = ap.parse_args()

    try:
        from jsonschema import Draft202012Validator
    except ImportError:
        print("run_golden.py needs the 'jsonschema' package (python3 -m venv .venv && .venv/bin/pip install jsonschema)")
        print("0 passed, 1 failed")
        return 1

    kvplan = str(Path(opts.kvplan).resolve())
    update = os.environ.get("KVPLAN_UPDATE_GOLDEN") == "1"
    tally = Tally()

    schema = json.loads(Path(opts.schema).read_text(encoding="utf-8"))
    try:
        Draft202012Validator.check_schema(schema)
        tally.ok()
    except Exception as e:  # jsonschema.SchemaError
        tally.fail("schema [is a valid Draft 2020-12 schema]", f"  {e}")
    validator = Draft202012Validator(schema)
    # `kvplan inspect --json` prints one model object: the plan schema's $defs/model. A plan (exit 0, 1) and an
    # input error (exit 2) are each checked against their own part too, for errors that name the key at fault.
    model_validator, plan_validator, error_validator = (
        Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{part}"}) for part in ("model", "plan", "error"))

    cases = parse_cases(CASES)
    if opts.only:
        unknown = set(opts.only) - {c.name for c in cases}
        if unknown:
            raise SystemExit(f"no such case: {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c.name in opts.only]
    if update:
        EXPECTED.mkdir(parents=True, exist_ok=True)

    for case in cases:
        proc = run(kvplan, case.args)
        actual = render(proc)
        path = EXPECTED / f"{case.name}.out"
        label = f"{case.name} (cases.txt:{case.line})"
        # The declared exit code is checked in both modes: a wrong exit code is never blessed.
        if proc.returncode != case.exit_code:
            tally.fail(f"{label} [exit code]",
                       f"  kvplan {shlex.join(case.args)}\n  exited {proc.returncode}, cases.txt says {case.exit_code}\n"
                       f"  stderr: {proc.stderr.decode('utf-8', 'replace')}")
        if update:
            if not path.exists() or path.read_bytes() != actual:
                path.write_bytes(actual)
                print(f"wrote {path.relative_to(REPO)}")
            tally.ok()
        elif not path.exists():
            tally.fail(f"{label} [golden]", f"  missing {path.relative_to(REPO)} (generate with KVPLAN_UPDATE_GOLDEN=1)")
        else:
            expected = path.read_bytes()
            if expected == actual:
                tally.ok()
            else:
                tally.fail(f"{label} [golden]", f"  kvplan {shlex.join(case.args)}\n" + unified_diff(expected, actual, case.name))

        if "--json" in case.args and proc.returncode == case.exit_code:
            doc = load_json(proc, f"{case.name} [schema]", tally)
            if doc is not None:
                chosen = (model_validator if case.args and case.args[0] == "inspect" else
                          error_validator if case.exit_code == 2 else plan_validator)
                validate(chosen, doc, f"{case.name} [schema]", tally)
                if chosen is not model_validator:
                    validate(validator, doc, f"{case.name} [schema: the whole, as a launcher checks it]", tally)
        if case.name.startswith("feedback_"):
            feedback_check(kvplan, case, tally)
        if case.name == "mission":
            mission_check(kvplan, case, tally)

    if update:
        names = {f"{c.name}.out" for c in parse_cases(CASES)}
        for stale in sorted(EXPECTED.glob("*.out")):
            if stale.name not in names:
                print(f"note: {stale.relative_to(REPO)} belongs to no case (delete it)")
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
