#!/usr/bin/env python3
"""Runs kvplan on the crafted inputs of tests/hostile/cases.txt, each under a time and memory limit.

Every case must end the way its line says: exit 2 with a message that names the field (the text after the
second '|' must appear in stderr; under --json stdout is also the JSON error object), or exit 0/1 with sane numbers (with --json: every byte figure finite and
not negative). A crash, a sanitizer report, an exit 3 (internal error), a time-out or a memory blow-up fails
the case. The inputs are written by make_inputs.py into a scratch directory.

  run_hostile.py --kvplan build/kvplan [--sanitized] [--only NAME]
"""
import argparse
import concurrent.futures
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_inputs  # noqa: E402

TIME_LIMIT_S = 20
MEMORY_LIMIT = 2 << 30  # address space (RLIMIT_AS, ulimit -v); a sanitized build gets ASan's RSS limit instead


def parse_cases(path):
    cases = []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, exits, needle, args = (p.strip() for p in line.split("|", 3))
        cases.append((n, name, {int(e) for e in exits.split(",")}, needle, args))
    return cases


def expand(args, inputs):
    out = []
    for a in shlex.split(args.replace("{in}", inputs)):
        if a.startswith("@"):  # @file: the file's contents as one argument
            with open(os.path.join(inputs, a[1:]), encoding="utf-8") as f:
                a = f.read()
        out.append(a)
    return out


def sane_numbers(node, path="$"):
    """Every number of a plan's JSON finite; sizes and figures not negative (headroom may be)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if v != v or v in (float("inf"), float("-inf")):
                    return f"{path}.{k} = {v}"
                if v < 0 and "headroom" not in k and k not in ("n_gpu_layers", "n_cpu_moe", "delta", "rank_delta"):
                    if any(w in k for w in ("bytes", "size", "ctx", "total", "typical", "high", "mib", "gib", "allocations")):
                        return f"{path}.{k} = {v}"
            bad = sane_numbers(v, f"{path}.{k}")
            if bad:
                return bad
    elif isinstance(node, list):
        for i, v in enumerate(node):
            bad = sane_numbers(v, f"{path}[{i}]")
            if bad:
                return bad
    return None


def run_case(kvplan, argv, sanitized):
    env = dict(os.environ, LC_ALL="C", KVPLAN_RAM="unknown")
    env.pop("KVPLAN_DATA", None)
    limit = None
    if sanitized:
        # a report aborts (a signal: no exit code a case accepts) and is also caught by its text below
        env["ASAN_OPTIONS"] = "halt_on_error=1:abort_on_error=1:detect_leaks=1:hard_rss_limit_mb=2048"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:abort_on_error=1:print_stacktrace=1"
    else:
        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    start = time.monotonic()
    try:
        p = subprocess.run([kvplan] + argv, capture_output=True, text=True, errors="replace", env=env,
                           timeout=TIME_LIMIT_S * (4 if sanitized else 1), preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return None, "", "", time.monotonic() - start
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def json_error_problem(out, err):
    """Exit 2 under --json: stdout is one error object (schema/plan.schema.json $defs/error) whose message is
    the first line of stderr's, after 'kvplan: '. None when it is."""
    try:
        doc = json.loads(out)
    except ValueError as e:
        return f"stdout is not a JSON error object: {e}"
    error = doc.get("error") if isinstance(doc, dict) else None
    keys = {"field", "value", "problem", "accepted", "suggestion", "message"}
    if not isinstance(error, dict) or set(error) != keys or set(doc) != {"schema_version", "error"}:
        return f"stdout is not the error object: {out[:200]}"
    if not err.startswith("kvplan: " + error["message"]):
        return "the JSON error's message is not stderr's"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvplan", required=True)
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.txt"))
    ap.add_argument("--sanitized", action="store_true", help="the binary is an ASan/UBSan build (no RLIMIT_AS)")
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="cases run at once (default: the CPUs)")
    a = ap.parse_args()
    cases = [c for c in parse_cases(a.cases) if not a.only or a.only in c[1]]
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="kvplan-hostile-") as inputs:
        make_inputs.main(inputs)
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            results = list(pool.map(lambda c: run_case(a.kvplan, expand(c[4], inputs), a.sanitized), cases))
        for (n, name, exits, needle, args), (code, out, err, took) in zip(cases, results):
            argv = expand(args, inputs)
            problem = None
            if code is None:
                problem = f"timed out after {took:.0f} s"
            elif code not in exits:
                problem = f"exit {code}, expected {'/'.join(map(str, sorted(exits)))}"
            elif code == 2 and needle != "-" and needle not in err:
                problem = f"the message does not name '{needle}'"
            elif code == 2 and "--json" in argv:
                problem = json_error_problem(out, err)
            elif code in (0, 1) and "--json" in argv and code == 0:
                try:
                    bad = sane_numbers(json.loads(out))
                except ValueError as e:
                    bad = f"not JSON: {e}"
                if bad:
                    problem = f"insane number: {bad}"
            if "runtime error:" in err or "AddressSanitizer" in err:
                problem = "sanitizer report"
            shown = err.strip().splitlines()[-1][:160] if err.strip() else ""
            if problem:
                failed += 1
                print(f"FAIL {name} (cases.txt:{n}): {problem} [{took:.2f} s]\n     stderr: {err.strip()[-2000:]}")
            else:
                passed += 1
                print(f"ok   {name} (exit {code}, {took:.2f} s) {shown}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
