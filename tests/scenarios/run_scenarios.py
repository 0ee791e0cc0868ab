#!/usr/bin/env python3
"""Realistic kvplan requests, checked for the properties an expert who runs the answer demands.

    run_scenarios.py --kvplan build/kvplan [--only NAME ...] [--jobs N] [--verbose]

Reads scenarios.yaml next to this script. Each scenario is one request a real user makes (a persona,
the arguments, one line of what an expert expects, and per-scenario expectations). The runner runs it
with --json from the repository root and applies

  * the generic checker (every scenario; README.md says what each assertion means and why):
      exit         exit code as expected, and consistent with the verdict (0 ok; 1 nothing fits or
                   nothing acceptable; 2 bad input); exit 0 has a fitting recommendation
      schema       the contract's --json fields (schema_version 4, verdict, ctx_per_slot, placement,
                   decode, speed_floor, suggestions, resolved.mode)
      no-avoid     (1) no "avoid" recommendation with exit 0 unless --accept-risk was given
      context      (2) ctx_per_slot >= min(task ctx_min, model window) whenever an acceptable option
                   reaching it exists (re-run with --ctx-size)
      k8           (3) K at 8 bits or more whenever an 8-bit-K option reaches that minimum (re-run with
                   -ctk q8_0 -ctv q8_0 / q4_0 and --ctx-size)
      speed        (4) below the task's decode floor only when no other returned option with at least
                   the same context and K bits meets it
      launch       (5) the launch line starts what was planned (file, -c, -np, -fa, -ctk, -ctv, -ngl,
                   --n-cpu-moe; the Ollama, vLLM, SGLang and MLX lines likewise)
      feedback     (5) the llama-server line fed back reproduces weights, context and types
      suggestions  (6) every suggestion's args re-plan to exactly the suggested option
      max-ctx      (7) a max-context answer is the largest: +256 tokens per slot fails with FA on and
                   off, and neither FA setting alone reaches more
  * the scenario's own expectations (expect.*).

Prints one line per scenario, PASS or FAIL with every failed assertion and the actual values, a tally
of failures by assertion, and the final line 'N passed, N failed'; exits 1 if any scenario failed.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCENARIOS = HERE / "scenarios.yaml"
CALL_TIMEOUT_S = 30
SCHEMA_VERSION = 4

RISKS = ("free", "mild", "noticeable", "avoid")
VERDICTS = ("ok", "nothing_acceptable", "nothing_fits")
MODES = ("rank", "max_context", "best_types", "single")
LOW_K_LLAMA = {"q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}

# Flags that take a value (kvplan's own and the llama.cpp names it accepts); the rest are switches.
CTX_FLAGS = {"-c", "--ctx-size", "--ctx"}
CTK_FLAGS = {"-ctk", "--ctk", "--cache-type-k"}
CTV_FLAGS = {"-ctv", "--ctv", "--cache-type-v"}
FA_FLAGS = {"-fa", "--fa", "--flash-attn"}
FA_VALUES = {"on", "off", "auto", "1", "0", "true", "false"}
# What a re-run of a launch line carries over from the original request: the device, the budget and
# the data, none of which a launch line says.
CARRIED_VALUE_FLAGS = {"--gpu", "--reserve", "--free", "--build", "--backend", "--data", "--ram",
                       "--ram-bandwidth", "--split-mode"}
CARRIED_SWITCHES = {"--allow-slow", "--accept-risk"}


# ---------------------------------------------------------------------------------------------
# running kvplan


@dataclass
class Run:
    args: list[str]
    rc: int
    out: str
    err: str
    data: dict[str, Any] | None = None

    @property
    def cmd(self) -> str:
        return "kvplan " + shlex.join(self.args)


class Kvplan:
    """Runs the binary with a timeout, memoised per argument list. A binary being rebuilt under us
    (missing, busy, half written, killed by a signal) is retried a few times before it counts."""

    def __init__(self, exe: str, timeout: int, verbose: bool) -> None:
        self.exe = exe
        self.timeout = timeout
        self.verbose = verbose
        self.cache: dict[tuple[str, ...], Run] = {}
        self.lock = threading.Lock()
        self.env = {k: v for k, v in os.environ.items() if k != "KVPLAN_DATA"}
        self.env.update({"LC_ALL": "C", "NO_COLOR": "1", "COLUMNS": "120", "KVPLAN_RAM": "unknown"})
        self.calls = 0

    def __call__(self, args: list[str]) -> Run:
        key = tuple(args)
        with self.lock:
            if key in self.cache:
                return self.cache[key]
        run = self._run(list(args))
        with self.lock:
            self.cache[key] = run
            self.calls += 1
        if self.verbose:
            print(f"  [{run.rc}] {run.cmd}", file=sys.stderr)
        return run

    def _run(self, args: list[str]) -> Run:
        last = "no attempt"
        for attempt in range(5):
            if attempt:
                time.sleep((0.5, 1.0, 2.0, 3.0)[attempt - 1])
            try:
                p = subprocess.run([self.exe, *args], cwd=REPO, env=self.env, capture_output=True,
                                   text=True, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                return Run(args, 124, "", f"timed out after {self.timeout} s")
            except OSError as e:  # being rebuilt: missing, busy or not yet an executable
                last = f"{e.__class__.__name__}: {e}"
                if e.errno in (errno.ENOENT, errno.ETXTBSY, errno.ENOEXEC, errno.EACCES):
                    continue
                return Run(args, 127, "", last)
            if p.returncode < 0 or p.returncode in (126, 127):
                last = f"exit {p.returncode}: {p.stderr.strip()[:200]}"
                continue
            run = Run(args, p.returncode, p.stdout, p.stderr)
            if "--json" in args and p.returncode in (0, 1):
                try:
                    run.data = json.loads(p.stdout)
                except json.JSONDecodeError:
                    if attempt < 2:  # a half-built binary can print anything once
                        continue
            return run
        return Run(args, 127, "", f"could not run {self.exe}: {last}")


# ---------------------------------------------------------------------------------------------
# argument surgery


def strip_flags(args: list[str], value_flags: set[str], switches: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """args without the given flags (and their values)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if name in value_flags:
            if "=" in a:
                i += 1
            elif name in FA_FLAGS and (i + 1 >= len(args) or args[i + 1].lower() not in FA_VALUES):
                i += 1  # a bare -fa (old llama.cpp spelling) has no value
            else:
                i += 2
            continue
        if a in switches:
            i += 1
            continue
        out.append(a)
        i += 1
    return out


def flag_values(args: list[str], flags: set[str]) -> list[str]:
    vals: list[str] = []
    for i, a in enumerate(args):
        name = a.split("=", 1)[0]
        if name in flags:
            if "=" in a:
                vals.append(a.split("=", 1)[1])
            elif i + 1 < len(args):
                vals.append(args[i + 1])
    return vals


def carried(args: list[str]) -> list[str]:
    out: list[str] = []
    for i, a in enumerate(args):
        name = a.split("=", 1)[0]
        if name in CARRIED_VALUE_FLAGS:
            out += [a] if "=" in a else args[i:i + 2]
        elif a in CARRIED_SWITCHES:
            out.append(a)
    return out


def with_json(args: list[str]) -> list[str]:
    args = strip_flags(args, {"--emit"}, {"--json"})
    return args + ["--json"]


# ---------------------------------------------------------------------------------------------
# reading a plan


def k_bits(t: Any) -> float:
    """Bits per element of a cache type, across the engines' spellings (K side)."""
    s = str(t).strip().lower()
    table = {"f32": 32, "fp32": 32, "f16": 16, "fp16": 16, "bf16": 16, "auto": 16, "q8_0": 8, "q8": 8,
             "fp8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "q6": 8,  # ExLlamaV2 Q6: K 8-bit, V 4-bit
             "q5_1": 5, "q5_0": 5, "q4_1": 4, "q4_0": 4, "iq4_nl": 4, "q4": 4, "fp4_e2m1": 4}
    if s in table:
        return table[s]
    try:
        return float(s)
    except ValueError:
        return 0.0


class Plan:
    """One --json answer with the fallbacks the pre-contract schema needs (noted, not hidden: the
    schema assertion reports every missing contract field)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.d: dict[str, Any] = run.data or {}
        self.options: list[dict[str, Any]] = [o for o in self.d.get("options") or [] if isinstance(o, dict)]
        req = self.d.get("request") or {}
        res = self.d.get("resolved") or {}
        self.engine = str(res.get("engine_id") or req.get("engine") or "llama.cpp")
        self.np = int(res.get("n_parallel") or req.get("n_parallel") or 1)
        self.kvu = bool(res.get("kv_unified") or req.get("kv_unified"))
        self.tp = int(res.get("tensor_parallel") or req.get("tensor_parallel") or 1)
        self.mode = res.get("mode")
        self.req = req

    @property
    def rec(self) -> dict[str, Any] | None:
        r = self.d.get("recommended")
        if isinstance(r, int) and 1 <= r <= len(self.options):
            return self.options[r - 1]
        return None

    @property
    def verdict(self) -> str | None:
        v = self.d.get("verdict")
        return v if isinstance(v, str) else None

    def slots(self, o: dict[str, Any] | None = None) -> int:
        if o and isinstance(o.get("ctx_per_slot"), int) and o["ctx_per_slot"] > 0 and o.get("ctx_size"):
            return max(1, int(o["ctx_size"]) // int(o["ctx_per_slot"]))
        if self.engine in ("llama.cpp", "ollama") and not self.kvu:
            return self.np
        return 1

    def per_slot(self, o: dict[str, Any]) -> int:
        if isinstance(o.get("ctx_per_slot"), int):
            return int(o["ctx_per_slot"])
        return int(o.get("ctx_size") or 0) // self.slots(o)

    @property
    def model(self) -> dict[str, Any]:
        return self.d.get("model") or {}

    @property
    def window(self) -> int | None:
        m = self.model
        for k in ("ctx_native_tokens", "ctx_native", "native_ctx", "context_native_tokens"):
            if isinstance(m.get(k), int) and m[k] > 0:
                return int(m[k])
        return None

    @property
    def layers(self) -> int | None:
        v = self.model.get("layers")
        return int(v) if isinstance(v, int) else None

    def task_field(self, *names: str) -> int | None:
        t = self.d.get("task") or {}
        for k in names:
            if isinstance(t.get(k), int):
                return int(t[k])
        return None

    @property
    def ctx_min(self) -> int | None:
        return self.task_field("ctx_min_tokens", "ctx_min")

    @property
    def task_id(self) -> str:
        return str((self.d.get("task") or {}).get("id") or "general")

    def needed_ctx(self) -> int | None:
        """min(task ctx_min, model window): the context the task cannot do without."""
        cm, w = self.ctx_min, self.window
        if cm is None:
            return None
        return min(cm, w) if w else cm


def risk(o: dict[str, Any] | None) -> str | None:
    if not o:
        return None
    return (o.get("quality") or {}).get("risk")


def brief(o: dict[str, Any] | None, plan: Plan | None = None) -> str:
    if not o:
        return "none"
    per = f" ({plan.per_slot(o)}/slot)" if plan and plan.slots(o) > 1 else ""
    pl = o.get("placement") if isinstance(o.get("placement"), dict) else {}
    where = "".join(f" {label} {pl[k]}" for k, label in (("n_gpu_layers", "-ngl"), ("n_cpu_moe", "--n-cpu-moe"))
                    if pl.get(k) is not None)
    return (f"{o.get('weights')} ctx {o.get('ctx_size')}{per} K={o.get('cache_type_k')} V={o.get('cache_type_v')} "
            f"FA {o.get('flash_attn')}{where} {risk(o)}")


def acceptable(run: Run, accept_risk: bool) -> tuple[bool, Plan]:
    """Did this run give a recommendation one can run, at a risk one accepts?"""
    p = Plan(run)
    r = p.rec
    ok = (run.rc == 0 and r is not None and r.get("fits", True) is not False
          and (accept_risk or risk(r) != "avoid"))
    return ok, p


# ---------------------------------------------------------------------------------------------
# launch lines


def parse_llama_line(line: str) -> dict[str, Any]:
    toks = shlex.split(line)
    out: dict[str, Any] = {"prog": toks[0] if toks else None, "flags": set()}
    names = {"-m": "m", "--model": "m", "-c": "c", "--ctx-size": "c", "-np": "np", "--parallel": "np",
             "-fa": "fa", "--flash-attn": "fa", "-ctk": "ctk", "--cache-type-k": "ctk", "-ctv": "ctv",
             "--cache-type-v": "ctv", "-ngl": "ngl", "--n-gpu-layers": "ngl", "--gpu-layers": "ngl",
             "--n-cpu-moe": "ncmoe", "-ncmoe": "ncmoe"}
    i = 1
    while i < len(toks):
        t = toks[i]
        if t in names and i + 1 < len(toks):
            out[names[t]] = toks[i + 1]
            i += 2
            continue
        out["flags"].add(t)
        i += 1
    return out


def option_placement(plan: Plan, o: dict[str, Any]) -> tuple[Any, Any, str]:
    """(n_gpu_layers, n_cpu_moe, source): the contract's option.placement, else what the request pinned."""
    pl = o.get("placement")
    if isinstance(pl, dict):
        return pl.get("n_gpu_layers"), pl.get("n_cpu_moe"), "placement"
    res = plan.d.get("resolved") or {}
    return res.get("n_gpu_layers"), res.get("n_cpu_moe"), "resolved (no option.placement)"


def placement_kind(plan: Plan, o: dict[str, Any]) -> str:
    """gpu | cpu_moe | layers | cpu_moe+layers, from option.placement or else the launch line."""
    ngl, ncm, src = option_placement(plan, o)
    launch = o.get("launch") or {}
    if src != "placement":
        line = launch.get("llama-server") or launch.get("llama-cli")
        if line:
            p = parse_llama_line(line)
            ncm = p.get("ncmoe") or ("all" if "--cpu-moe" in p["flags"] else None)
            ngl = int(p["ngl"]) if p.get("ngl", "").lstrip("-").isdigit() else None
            if ngl is not None and plan.layers is not None and ngl > plan.layers:
                ngl = None
        mf = launch.get("modelfile") or ""
        for ln in mf.splitlines():
            parts = ln.split()
            if len(parts) == 3 and parts[:2] == ["PARAMETER", "num_gpu"]:
                ngl = int(parts[2])
    kinds = []
    if ncm not in (None, 0):
        kinds.append("cpu_moe")
    if ngl is not None and (plan.layers is None or int(ngl) <= plan.layers):
        kinds.append("layers")
    return "+".join(kinds) or "gpu"


def check_llama_line(plan: Plan, o: dict[str, Any], line: str, user_file: str | None) -> list[str]:
    p = parse_llama_line(line)
    bad: list[str] = []
    m = p.get("m")
    if not m:
        bad.append("no -m")
    elif user_file:
        if not (os.path.exists(REPO / m) or os.path.exists(m)) or not os.path.samefile(
                REPO / m if not os.path.isabs(m) else m, REPO / user_file if not os.path.isabs(user_file) else user_file):
            bad.append(f"-m {m} is not the file the user has ({user_file})")
    elif str(o.get("weights", "")).lower() not in os.path.basename(m).lower():
        bad.append(f"-m {m} does not name weights {o.get('weights')}")
    # llama-server's -c is every slot's context together; llama-cli runs one conversation
    want_c = o.get("ctx_size") if p["prog"] != "llama-cli" else plan.per_slot(o)
    if p.get("c") != str(want_c):
        bad.append(f"-c {p.get('c')} != {'ctx_size' if p['prog'] != 'llama-cli' else 'ctx_per_slot'} {want_c}")
    if p["prog"] == "llama-server" and p.get("np") != str(plan.np):
        bad.append(f"-np {p.get('np')} != {plan.np} slots")
    if p.get("fa") != o.get("flash_attn"):
        bad.append(f"-fa {p.get('fa')} != flash_attn {o.get('flash_attn')}")
    for flag, key in (("ctk", "cache_type_k"), ("ctv", "cache_type_v")):
        if p.get(flag) != o.get(key):
            bad.append(f"-{flag} {p.get(flag)} != {o.get(key)}")
    if ("-kvu" in p["flags"] or "--kv-unified" in p["flags"]) != plan.kvu:
        bad.append(f"-kvu on the line is {not plan.kvu}, planned kv_unified {plan.kvu}")
    ngl, ncm, src = option_placement(plan, o)
    line_ngl = p.get("ngl")
    if ngl is None:
        if line_ngl is not None and plan.layers is not None and int(line_ngl) <= plan.layers:
            bad.append(f"-ngl {line_ngl} puts layers in RAM but {src} says all on the GPU")
    elif str(ngl) != str(line_ngl):
        bad.append(f"-ngl {line_ngl} != n_gpu_layers {ngl} ({src})")
    line_ncm = p.get("ncmoe")
    cpu_moe = "--cpu-moe" in p["flags"]
    if ncm in (None, 0):
        if line_ncm or cpu_moe:
            bad.append(f"line keeps experts in RAM ({line_ncm or '--cpu-moe'}) but {src} n_cpu_moe is {ncm}")
    elif not ((line_ncm is not None and str(line_ncm) == str(ncm))
              or (cpu_moe and (ncm == -1 or (plan.layers is not None and int(ncm) >= plan.layers)))):
        bad.append(f"--n-cpu-moe {line_ncm}{' --cpu-moe' if cpu_moe else ''} != n_cpu_moe {ncm} ({src})")
    return bad


def kv_pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in shlex.split(text):
        if "=" in tok and not tok.startswith("-"):
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def check_other_lines(plan: Plan, o: dict[str, Any]) -> list[str]:
    launch = o.get("launch") or {}
    bad: list[str] = []
    per = plan.per_slot(o)
    if plan.engine == "ollama":
        env = kv_pairs(launch.get("ollama-env", ""))
        if not env:
            bad.append("no ollama-env line")
        else:
            if env.get("OLLAMA_KV_CACHE_TYPE") != o.get("cache_type_k") or o.get("cache_type_k") != o.get("cache_type_v"):
                bad.append(f"OLLAMA_KV_CACHE_TYPE={env.get('OLLAMA_KV_CACHE_TYPE')} vs K={o.get('cache_type_k')} V={o.get('cache_type_v')}")
            if env.get("OLLAMA_NUM_PARALLEL") != str(plan.np):
                bad.append(f"OLLAMA_NUM_PARALLEL={env.get('OLLAMA_NUM_PARALLEL')} != {plan.np}")
            if o.get("cache_type_k") != "f16" and env.get("OLLAMA_FLASH_ATTENTION") != "1":
                bad.append("a quantized cache without OLLAMA_FLASH_ATTENTION=1")
        mf = launch.get("modelfile", "")
        params = {}
        for ln in mf.splitlines():
            parts = ln.split()
            if len(parts) >= 3 and parts[0] == "PARAMETER":
                params[parts[1]] = parts[2]
            if parts[:1] == ["FROM"] and str(o.get("weights")).lower() not in ln.lower():
                bad.append(f"modelfile {ln!r} does not name weights {o.get('weights')}")
        if params.get("num_ctx") != str(per):
            bad.append(f"num_ctx {params.get('num_ctx')} != {per} per conversation")
        ngl, _, src = option_placement(plan, o)
        if ngl is not None and params.get("num_gpu") != str(ngl):
            bad.append(f"num_gpu {params.get('num_gpu')} != n_gpu_layers {ngl} ({src})")
        if ngl is None and "num_gpu" in params and src == "placement":
            bad.append(f"num_gpu {params['num_gpu']} but placement says all layers on the GPU")
    elif plan.engine in ("vllm", "sglang"):
        line = launch.get(plan.engine)
        if not line:
            return [f"no {plan.engine} line"]
        toks = shlex.split(line)

        def val(*flags: str) -> str | None:
            for i, t in enumerate(toks[:-1]):
                if t in flags:
                    return toks[i + 1]
            return None

        ctx_flag = ("--max-model-len",) if plan.engine == "vllm" else ("--context-length",)
        seqs_flag = ("--max-num-seqs",) if plan.engine == "vllm" else ("--max-running-requests",)
        tp_flag = ("--tensor-parallel-size", "-tp") if plan.engine == "vllm" else ("--tp", "--tp-size")
        if val(*ctx_flag) != str(o.get("ctx_size")):
            bad.append(f"{ctx_flag[0]} {val(*ctx_flag)} != ctx_size {o.get('ctx_size')}")
        if val("--kv-cache-dtype") != o.get("cache_type_k"):
            bad.append(f"--kv-cache-dtype {val('--kv-cache-dtype')} != {o.get('cache_type_k')}")
        # the sequences admitted: resolved.serving.max_num_seqs (--parallel, --max-num-seqs or the engine's default;
        # None: SGLang derives it, and the line must leave the flag out)
        serving = (plan.d.get("resolved") or {}).get("serving") or {}
        seqs = serving.get("max_num_seqs", plan.np)
        if val(*seqs_flag) != (None if seqs is None else str(seqs)):
            bad.append(f"{seqs_flag[0]} {val(*seqs_flag)} != {seqs}")
        if plan.tp > 1 and val(*tp_flag) != str(plan.tp):
            bad.append(f"{tp_flag[0]} {val(*tp_flag)} != {plan.tp}")
    elif plan.engine == "mlx":
        line = launch.get("mlx-generate") or launch.get("mlx-server")
        if not line:
            return ["no mlx line"]
        toks = shlex.split(line)
        kv = toks[toks.index("--kv-bits") + 1] if "--kv-bits" in toks[:-1] else None
        k = str(o.get("cache_type_k"))
        if (k.isdigit() and kv != k) or (not k.isdigit() and kv is not None):
            bad.append(f"--kv-bits {kv} vs K={k}")
        model = toks[toks.index("--model") + 1] if "--model" in toks[:-1] else ""
        if str(o.get("weights")).lower() not in model.lower():
            bad.append(f"--model {model} does not name weights {o.get('weights')}")
    return bad


# ---------------------------------------------------------------------------------------------
# the scenario


@dataclass
class Scenario:
    name: str
    persona: str
    args: list[str]
    expert: str
    expect: dict[str, Any]
    reported: bool = False


@dataclass
class Result:
    scenario: Scenario
    failures: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, assertion: str, msg: str) -> None:
        self.failures.append((assertion, msg))


def load(path: Path) -> list[Scenario]:
    doc = yaml.safe_load(path.read_text())
    out: list[Scenario] = []
    seen: set[str] = set()
    for i, s in enumerate(doc["scenarios"]):
        for key in ("name", "persona", "args", "expert"):
            if key not in s:
                raise SystemExit(f"{path}: scenario #{i + 1} has no {key!r}")
        if s["name"] in seen:
            raise SystemExit(f"{path}: duplicate scenario name {s['name']!r}")
        seen.add(s["name"])
        args = shlex.split(s["args"]) if isinstance(s["args"], str) else [str(a) for a in s["args"]]
        out.append(Scenario(s["name"], s["persona"], args, s["expert"], dict(s.get("expect") or {}),
                            bool(s.get("reported", False))))
    return out


class Checker:
    def __init__(self, kv: Kvplan, sc: Scenario) -> None:
        self.kv = kv
        self.sc = sc
        self.res = Result(sc)
        self.accept_risk = "--accept-risk" in sc.args

    # ---- helpers
    def user_file(self) -> str | None:
        for v in flag_values(self.sc.args, {"--model", "-m"}):
            path = v if os.path.isabs(v) else str(REPO / v)
            if os.path.isfile(path) and v.lower().endswith(".gguf"):
                return v
        return None

    def pinned(self, plan: Plan, key: str, flags: set[str]) -> Any:
        """What the request pinned: the JSON's echo of the request, else the scenario's own flags."""
        if key in plan.req:
            v = plan.req.get(key)
            return None if (key == "flash_attn" and v == "auto") else v
        vals = flag_values(self.sc.args, flags)
        return vals[-1] if vals else None

    def base_args(self, drop_ctx: bool = True, drop_types: bool = False, drop_fa: bool = False) -> list[str]:
        vflags = {"--top", "--emit"} | (CTX_FLAGS if drop_ctx else set())
        if drop_types:
            vflags |= CTK_FLAGS | CTV_FLAGS
        if drop_fa:
            vflags |= FA_FLAGS
        return strip_flags(self.sc.args, vflags, {"--json", "--max-ctx"})

    # ---- the run
    def check(self) -> Result:
        sc, exp = self.sc, self.sc.expect
        run = self.kv(with_json(sc.args))
        self.run = run
        want_rc = exp.get("exit", 0)
        want = want_rc if isinstance(want_rc, list) else [want_rc]
        if run.rc not in want:
            tail = (run.err.strip().splitlines() or [""])[-1][:240]
            self.res.fail("exit", f"exit {run.rc}, expected {'/'.join(map(str, want))}" + (f" ({tail})" if tail else ""))
        if run.rc == 2 or run.rc not in (0, 1):
            for s in exp.get("stderr_contains", []):
                if s.lower() not in run.err.lower():
                    self.res.fail("expect.stderr", f"stderr lacks {s!r}: {run.err.strip()[:200]!r}")
            return self.res
        if run.data is None:
            self.res.fail("exit", f"exit {run.rc} without JSON on stdout: {run.out[:120]!r} {run.err[:120]!r}")
            return self.res
        plan = Plan(run)
        self.plan = plan
        self.check_schema(plan)
        self.check_exit_verdict(plan)
        self.check_no_avoid(plan)
        self.check_context(plan)
        self.check_k8(plan)
        self.check_speed(plan)
        self.check_launch(plan)
        self.check_suggestions(plan)
        self.check_max_ctx(plan)
        self.check_expectations(plan)
        return self.res

    # ---- schema (the contract's fields)
    def check_schema(self, plan: Plan) -> None:
        d = plan.d
        bad: list[str] = []
        if d.get("schema_version") != SCHEMA_VERSION:
            bad.append(f"schema_version {d.get('schema_version')} != {SCHEMA_VERSION}")
        for k in ("verdict", "recommended", "fits", "options", "speed_floor", "suggestions"):
            if k not in d:
                bad.append(f"no {k}")
        if "verdict" in d and d["verdict"] not in VERDICTS:
            bad.append(f"verdict {d['verdict']!r}")
        if (d.get("resolved") or {}).get("mode") not in MODES:
            bad.append(f"resolved.mode {(d.get('resolved') or {}).get('mode')!r}")
        sf = d.get("speed_floor")
        if "speed_floor" in d and not (isinstance(sf, dict) and "decode_tokens_per_s" in sf and "time_to_first_token_s" in sf):
            bad.append(f"speed_floor {sf!r}")
        if plan.window is None:
            bad.append("model has no native context")
        if plan.ctx_min is None or plan.task_field("ctx_target_tokens", "ctx_target") is None:
            bad.append("task lacks ctx_target/ctx_min")
        missing: set[str] = set()
        for o in plan.options:
            for k in ("weights", "ctx_size", "ctx_per_slot", "cache_type_k", "cache_type_v", "flash_attn",
                      "decode", "placement", "launch"):
                if k not in o:
                    missing.add(k)
            q = o.get("quality") or {}
            if q.get("risk") not in RISKS or "expected_loss" not in q:
                missing.add("quality.risk/expected_loss")
            dec = o.get("decode")
            if isinstance(dec, dict):
                for k in ("tokens_per_s", "tokens_per_s_low", "prefill_tokens_per_s", "time_to_first_token_s"):
                    if k not in dec:
                        missing.add(f"decode.{k}")
            pl = o.get("placement")
            if isinstance(pl, dict):
                for k in ("n_gpu_layers", "n_cpu_moe", "host_bytes"):
                    if k not in pl:
                        missing.add(f"placement.{k}")
        if missing:
            bad.append("options lack " + ", ".join(sorted(missing)))
        for i, s in enumerate(d.get("suggestions") or []):
            if not (isinstance(s, dict) and isinstance(s.get("summary"), str) and isinstance(s.get("args"), list)
                    and isinstance(s.get("option"), dict)):
                bad.append(f"suggestions[{i}] is not {{summary, args, option}}")
                break
            lack = [k for k in ("weights", "ctx_size", "cache_type_k", "cache_type_v", "flash_attn", "risk",
                                "expected_loss") if k not in s["option"]]
            if lack:
                bad.append(f"suggestions[{i}].option lacks {', '.join(lack)}")
                break
        if bad:
            self.res.fail("schema", "; ".join(bad))

    # ---- exit code and verdict agree
    def check_exit_verdict(self, plan: Plan) -> None:
        rc, v, rec = self.run.rc, plan.verdict, plan.rec
        if rc == 0:
            if rec is None:
                self.res.fail("exit", "exit 0 without a recommended option")
            elif rec.get("fits") is False:
                self.res.fail("exit", f"exit 0 but the recommendation does not fit: {brief(rec, plan)}")
            if v is not None and v != "ok":
                self.res.fail("exit", f"exit 0 with verdict {v}")
            if plan.d.get("fits") is False:
                self.res.fail("exit", "exit 0 but fits is false")
        elif rc == 1:
            if v is not None and v == "ok":
                self.res.fail("exit", "exit 1 with verdict ok")
            if v == "nothing_fits" and plan.d.get("fits") is True:
                self.res.fail("exit", "verdict nothing_fits but fits is true")

    # ---- 1. no avoid with exit 0
    def check_no_avoid(self, plan: Plan) -> None:
        rec = plan.rec
        if self.run.rc == 0 and rec and risk(rec) == "avoid" and not self.accept_risk:
            loss = (rec.get("quality") or {}).get("expected_loss")
            self.res.fail("no-avoid", f"exit 0 recommending an 'avoid' option: {brief(rec, plan)}"
                          + (f" (~{loss * 100:.0f}% expected loss)" if isinstance(loss, (int, float)) else ""))

    # ---- 2. context
    def check_context(self, plan: Plan) -> None:
        if self.pinned(plan, "ctx_size", CTX_FLAGS) is not None:
            return
        need = plan.needed_ctx()
        if need is None:
            return
        rec = plan.rec
        have = plan.per_slot(rec) if (rec and self.run.rc == 0) else None
        if have is not None and have >= need:
            return
        slots = plan.slots(rec)
        rerun = self.kv(with_json(self.base_args() + ["--ctx-size", str(need * slots)]))
        ok, rp = acceptable(rerun, self.accept_risk)
        if ok and rp.rec and rp.per_slot(rp.rec) >= need:
            what = (f"recommended {brief(rec, plan)}, {have} tokens per conversation" if have is not None
                    else f"exit {self.run.rc} ({plan.verdict or 'no verdict'})")
            self.res.fail("context", f"{what} < min(task ctx_min {plan.ctx_min}, window {plan.window}) = {need}, "
                                     f"yet --ctx-size {need * slots} gives {brief(rp.rec, rp)}")

    # ---- 3. K at 8 bits or more
    def k8_pins(self, plan: Plan, v_pin: Any) -> list[tuple[str, str]]:
        e = plan.engine
        if e == "llama.cpp":
            pairs = [("q8_0", "q8_0"), ("q8_0", "q4_0")]
        elif e == "ollama":
            pairs = [("q8_0", "q8_0")]
        elif e == "mlx":
            pairs = [("8", "8")]
        elif e == "exllamav2":
            pairs = [("Q8", "Q8"), ("Q6", "Q6")]
        elif e == "exllamav3":
            pairs = [("8", "8"), ("8", "4")]
        else:
            pairs = []
        if v_pin is not None and e in ("llama.cpp", "exllamav3"):
            pairs = [(pairs[0][0], str(v_pin))]
        return pairs

    def check_k8(self, plan: Plan) -> None:
        rec = plan.rec
        if self.run.rc != 0 or rec is None:
            return
        if self.pinned(plan, "cache_type_k", CTK_FLAGS) is not None:
            return
        if k_bits(rec.get("cache_type_k")) >= 8:
            return
        pinned_ctx = self.pinned(plan, "ctx_size", CTX_FLAGS)
        need = plan.needed_ctx()
        if pinned_ctx is not None:
            ctx_total = int(pinned_ctx)
        elif need is not None:
            ctx_total = need * plan.slots(rec)
        else:
            return
        v_pin = self.pinned(plan, "cache_type_v", CTV_FLAGS)
        base = self.base_args(drop_types=True)
        for k, v in self.k8_pins(plan, v_pin):
            rerun = self.kv(with_json(base + ["-ctk", k, "-ctv", v, "--ctx-size", str(ctx_total)]))
            ok, rp = acceptable(rerun, self.accept_risk)
            if ok:
                self.res.fail("k8", f"recommended K={rec.get('cache_type_k')} ({brief(rec, plan)}) although "
                                    f"-ctk {k} -ctv {v} --ctx-size {ctx_total} gives {brief(rp.rec, rp)}")
                return

    # ---- 4. decode speed floor (and the time-to-first-token ceiling, by the same rule)
    def check_speed(self, plan: Plan) -> None:
        rec = plan.rec
        sf = plan.d.get("speed_floor")
        if self.run.rc != 0 or rec is None or not isinstance(sf, dict):
            return

        def num(o: dict[str, Any], key: str) -> float | None:
            dec = o.get("decode")
            v = dec.get(key) if isinstance(dec, dict) else None
            return float(v) if isinstance(v, (int, float)) else None

        kb, ctx = k_bits(rec.get("cache_type_k")), plan.per_slot(rec)
        # (speed_floor key, decode key, higher is better, verb, unit, what the limit is called)
        rules = (("decode_tokens_per_s", "tokens_per_s", True, "decodes", "tok/s", "floor"),
                 ("time_to_first_token_s", "time_to_first_token_s", False, "takes", "s to the first token", "ceiling"))
        for floor_key, key, higher, verb, unit, word in rules:

            def meets(v: float, f: float, higher: bool = higher) -> bool:
                return v >= f if higher else v <= f

            floor = sf.get(floor_key)
            mine = num(rec, key)
            if not isinstance(floor, (int, float)) or mine is None or meets(mine, floor):
                continue
            bands = ["free", "mild", "noticeable", "avoid"]
            for o in plan.options:
                if o is rec or o.get("fits") is False or (risk(o) == "avoid" and not self.accept_risk):
                    continue
                # a faster option in a worse quality band is a trade the objective may decline (docs/ranking.md §5)
                if risk(o) in bands and risk(rec) in bands and bands.index(risk(o)) > bands.index(risk(rec)):
                    continue
                theirs = num(o, key)
                if (theirs is not None and meets(theirs, floor) and plan.per_slot(o) >= ctx
                        and k_bits(o.get("cache_type_k")) >= kb):
                    self.res.fail("speed", f"recommended {brief(rec, plan)} {verb} {mine} {unit}, past the task's {word} "
                                           f"{floor}, while #{o.get('rank')} {brief(o, plan)} {verb} {theirs}")
                    break

    # ---- 5. the launch line starts what was planned, and reproduces it
    def check_launch(self, plan: Plan) -> None:
        rec = plan.rec
        if self.run.rc != 0 or rec is None:
            return
        launch = rec.get("launch") or {}
        if not isinstance(launch, dict) or not launch:
            self.res.fail("launch", "the recommendation has no launch lines")
            return
        bad: list[str] = []
        if plan.engine == "llama.cpp":
            line = launch.get("llama-server")
            if not line:
                self.res.fail("launch", f"no llama-server line (have {sorted(launch)})")
                return
            bad += check_llama_line(plan, rec, line, self.user_file())
            if launch.get("llama-cli"):
                bad += [f"llama-cli: {b}" for b in check_llama_line(plan, rec, launch["llama-cli"], self.user_file())]
        else:
            bad += check_other_lines(plan, rec)
        if bad:
            self.res.fail("launch", "; ".join(bad) + f"  [{next(iter(launch.values()))[:200]}]")
        if plan.engine == "llama.cpp" and launch.get("llama-server"):
            back = carried(self.sc.args) + ["--task", plan.task_id] + shlex.split(launch["llama-server"])
            fb = self.kv(with_json(back))
            fp = Plan(fb)
            got = fp.rec
            keys = ("weights", "ctx_size", "cache_type_k", "cache_type_v")
            if fb.rc != 0 or got is None:
                tail = (fb.err.strip().splitlines() or [""])[-1][:200]
                self.res.fail("feedback", f"the llama-server line fed back exits {fb.rc}: {tail or fp.verdict}  [{fb.cmd[:220]}]")
            elif any(got.get(k) != rec.get(k) for k in keys):
                self.res.fail("feedback", f"the llama-server line fed back plans {brief(got, fp)}, not {brief(rec, plan)}")

    # ---- 6. every suggestion re-runs
    def check_suggestions(self, plan: Plan) -> None:
        sugg = plan.d.get("suggestions")
        if not isinstance(sugg, list):
            return
        for i, s in enumerate(sugg[:8]):
            if not isinstance(s, dict) or not isinstance(s.get("args"), list):
                continue
            args = [str(a) for a in s["args"]]
            if args and os.path.basename(args[0]) == "kvplan":
                args = args[1:]
            rerun = self.kv(with_json(args))
            want = s.get("option") or {}
            rp = Plan(rerun)
            got = rp.rec
            label = f"suggestion {i + 1} ({str(s.get('summary'))[:80]!r})"
            if rerun.rc != 0 or got is None:
                tail = (rerun.err.strip().splitlines() or [""])[-1][:160]
                self.res.fail("suggestions", f"{label}: `{rerun.cmd[:200]}` exits {rerun.rc} {tail}")
                continue
            diff = [f"{k} {got.get(k)} != {want.get(k)}" for k in ("weights", "ctx_size", "cache_type_k", "cache_type_v")
                    if got.get(k) != want.get(k)]
            if diff:
                self.res.fail("suggestions", f"{label} re-plans to {brief(got, rp)}: " + ", ".join(diff))

    # ---- 7. max-context answers are the largest
    def check_max_ctx(self, plan: Plan) -> None:
        asked = "--max-ctx" in self.sc.args or (
            self.pinned(plan, "cache_type_k", CTK_FLAGS) is not None
            and self.pinned(plan, "cache_type_v", CTV_FLAGS) is not None
            and self.pinned(plan, "ctx_size", CTX_FLAGS) is None)
        if not asked and plan.mode != "max_context":
            return
        if asked and plan.mode != "max_context":
            self.res.fail("max-ctx", f"resolved.mode is {plan.mode!r}, not max_context")
        rec = plan.rec
        if self.run.rc != 0 or rec is None:
            return
        answer = int(rec.get("ctx_size") or 0)
        slots = plan.slots(rec)
        fa_pin = self.pinned(plan, "flash_attn", FA_FLAGS)
        base = self.base_args(drop_fa=True)
        if "--max-ctx" in self.sc.args:
            base = base + ["--max-ctx"]
        fa_values = [fa_pin] if fa_pin in ("on", "off") else ["on", "off"]
        for fa in fa_values:
            r = self.kv(with_json(base + ["--fa", fa]))
            ok, rp = acceptable(r, self.accept_risk)
            if ok and rp.rec and int(rp.rec.get("ctx_size") or 0) > answer:
                self.res.fail("max-ctx", f"answer {brief(rec, plan)} but --fa {fa} reaches {brief(rp.rec, rp)}")
        window = plan.window
        if window and plan.per_slot(rec) + 256 > window and "--rope-scaling" not in self.sc.args:
            return  # at the native window: more needs rope flags, which max-context does not add
        bigger = answer + 256 * slots
        base = self.base_args(drop_fa=True)  # --ctx-size pinned: not a --max-ctx request any more
        # the answer is the largest for the placement it states (kvplan keeps layers or experts in RAM only when
        # nothing acceptable reaches the task minimum on the GPU): one step more is asked with that placement
        pl = rec.get("placement") or {}
        if not any(f in self.sc.args for f in ("-ngl", "--n-gpu-layers", "--n-cpu-moe", "--cpu-moe", "-ot", "--override-tensor")):
            if pl.get("n_cpu_moe") is not None:
                base = base + ["--n-cpu-moe", str(pl["n_cpu_moe"])]
            else:
                base = base + ["-ngl", str(pl["n_gpu_layers"]) if pl.get("n_gpu_layers") is not None else "99"]
        bands = ["free", "mild", "noticeable", "avoid"]

        def worse_band(o: dict[str, Any] | None) -> bool:  # max-context ranks mild-or-better answers first
            return (o is not None and risk(o) in bands and risk(rec) in bands
                    and bands.index(risk(rec)) <= 1 < bands.index(risk(o)))

        for fa in fa_values:
            r = self.kv(with_json(base + ["--ctx-size", str(bigger), "--fa", fa]))
            ok, rp = acceptable(r, self.accept_risk)
            if ok and not worse_band(rp.rec):
                self.res.fail("max-ctx", f"answer {answer} is not the largest: --ctx-size {bigger} --fa {fa} "
                                         f"gives {brief(rp.rec, rp)}")

    # ---- per-scenario expectations
    def check_expectations(self, plan: Plan) -> None:
        exp, rec = self.sc.expect, plan.rec
        if "verdict" in exp and plan.verdict != exp["verdict"]:
            self.res.fail("expect.verdict", f"verdict {plan.verdict!r}, expected {exp['verdict']!r}")
        if "mode" in exp and plan.mode != exp["mode"]:
            self.res.fail("expect.mode", f"resolved.mode {plan.mode!r}, expected {exp['mode']!r}")
        if "suggestion_contains" in exp or "suggestion_k_bits_min" in exp or "suggestion_lacks" in exp:
            sugg = [s for s in plan.d.get("suggestions") or [] if isinstance(s, dict)]
            texts = [(str(s.get("summary", "")) + " " + " ".join(map(str, s.get("args") or []))).lower() for s in sugg]
            for sub in exp.get("suggestion_contains", []):
                if not any(sub.lower() in t for t in texts):
                    self.res.fail("expect.suggestion", f"no suggestion mentions {sub!r} "
                                                       f"({len(sugg)} suggestions: {[s.get('summary') for s in sugg][:3]})")
            for sub in exp.get("suggestion_lacks", []):
                if any(sub.lower() in t for t in texts):
                    self.res.fail("expect.suggestion", f"a suggestion mentions {sub!r}, which the expert rules out")
            if "suggestion_k_bits_min" in exp:
                ks = [k_bits((s.get("option") or {}).get("cache_type_k")) for s in sugg]
                if not any(k >= exp["suggestion_k_bits_min"] for k in ks):
                    self.res.fail("expect.suggestion", f"no suggestion keeps K at {exp['suggestion_k_bits_min']} bits "
                                                       f"or more ({len(sugg)} suggestions)")
        if exp.get("llamacpp_fallback") and plan.engine != "llama.cpp" and self.run.rc == 1:
            # The engine cannot offload (MLX): a suggestion says so when llama.cpp has a plan one can run.
            alt = self.kv(with_json(strip_flags(self.sc.args, {"--engine", "--top", "--emit"}, {"--json"})))
            ok, ap = acceptable(alt, self.accept_risk)
            sugg = [s for s in plan.d.get("suggestions") or [] if isinstance(s, dict)]
            named = [s for s in sugg if "llama.cpp" in str(s.get("summary", "")).lower()
                     or "--engine" not in [str(a) for a in s.get("args") or []]]
            if ok and not named:
                self.res.fail("expect.fallback", f"llama.cpp runs this ({brief(ap.rec, ap)}) but no suggestion says so "
                                                 f"({[s.get('summary') for s in sugg][:3]})")
        if self.run.rc != 0 or rec is None:
            return
        per = plan.per_slot(rec)
        if "min_ctx" in exp and per < exp["min_ctx"]:
            self.res.fail("expect.min_ctx", f"{per} tokens per conversation < {exp['min_ctx']} ({brief(rec, plan)})")
        if "ctx" in exp and rec.get("ctx_size") != exp["ctx"]:
            self.res.fail("expect.ctx", f"ctx_size {rec.get('ctx_size')} != {exp['ctx']}")
        if "k_bits_min" in exp and k_bits(rec.get("cache_type_k")) < exp["k_bits_min"]:
            self.res.fail("expect.k_bits", f"K={rec.get('cache_type_k')} below {exp['k_bits_min']} bits ({brief(rec, plan)})")
        if "weights" in exp and rec.get("weights") != exp["weights"]:
            self.res.fail("expect.weights", f"weights {rec.get('weights')} != {exp['weights']}")
        if "weights_not" in exp and rec.get("weights") in exp["weights_not"]:
            self.res.fail("expect.weights", f"weights {rec.get('weights')} (one of {exp['weights_not']}): {brief(rec, plan)}, "
                                            f"placement {placement_kind(plan, rec)}")
        if "types" in exp and [rec.get("cache_type_k"), rec.get("cache_type_v")] != list(exp["types"]):
            self.res.fail("expect.types", f"K={rec.get('cache_type_k')} V={rec.get('cache_type_v')} != {exp['types']}")
        if "placement" in exp:
            kind = placement_kind(plan, rec)
            want = exp["placement"]
            ok = (kind == want or (want == "offload" and kind != "gpu")
                  or (want in ("cpu_moe", "layers") and want in kind.split("+")))
            if not ok:
                self.res.fail("expect.placement", f"placement {kind}, expected {want} ({brief(rec, plan)})")
        for name, subs in (exp.get("launch_contains") or {}).items():
            line = (rec.get("launch") or {}).get(name)
            for sub in subs if isinstance(subs, list) else [subs]:
                if line is None or sub not in line:
                    self.res.fail("expect.launch", f"{name} line lacks {sub!r}: {line!r}")
        for name, subs in (exp.get("launch_lacks") or {}).items():
            line = (rec.get("launch") or {}).get(name) or ""
            for sub in subs if isinstance(subs, list) else [subs]:
                if sub in line:
                    self.res.fail("expect.launch", f"{name} line has {sub!r}: {line!r}")
        if "decode_known" in exp and exp["decode_known"] and not isinstance(rec.get("decode"), dict):
            self.res.fail("expect.decode", "decode speed is null for a catalog GPU with a known bandwidth")
        said = " ".join(plan.d.get("warnings") or []) + " " + " ".join(rec.get("warnings") or [])
        for sub in exp.get("warning_contains", []):
            if sub not in said:
                self.res.fail("expect.warning", f"no warning says {sub!r}: {said.strip()!r}")


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvplan", required=True, help="the kvplan binary")
    ap.add_argument("--scenarios", default=str(SCENARIOS))
    ap.add_argument("--only", action="append", default=[], help="run only these scenarios (repeatable; substring)")
    ap.add_argument("--jobs", type=int, default=max(2, min(8, os.cpu_count() or 2)))
    ap.add_argument("--timeout", type=int, default=CALL_TIMEOUT_S, help="seconds per kvplan call")
    ap.add_argument("--verbose", action="store_true", help="print every kvplan call to stderr")
    a = ap.parse_args()

    exe = a.kvplan if os.path.isabs(a.kvplan) else str(Path.cwd() / a.kvplan)
    for _ in range(60):  # a binary being relinked is back within seconds; a missing one is an error
        if os.access(exe, os.X_OK):
            break
        time.sleep(1)
    else:
        print(f"run_scenarios: {exe} is not an executable", file=sys.stderr)
        return 2
    scenarios = load(Path(a.scenarios))
    if a.only:
        scenarios = [s for s in scenarios if any(o in s.name for o in a.only)]
    kv = Kvplan(exe, a.timeout, a.verbose)
    start = time.monotonic()

    def one(sc: Scenario) -> Result:
        try:
            return Checker(kv, sc).check()
        except Exception as e:  # a checker bug must show, not hide the other scenarios
            r = Result(sc)
            r.fail("runner", f"{e.__class__.__name__}: {e}")
            return r

    passed = failed = 0
    tally: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for r in pool.map(one, scenarios):
            if r.failures:
                failed += 1
                for assertion in sorted({f[0] for f in r.failures}):
                    tally[assertion] = tally.get(assertion, 0) + 1
                detail = " | ".join(f"[{k}] {m}" for k, m in r.failures)
                print(f"FAIL {r.scenario.name}: {detail}", flush=True)
            else:
                passed += 1
                print(f"PASS {r.scenario.name}", flush=True)
    took = time.monotonic() - start
    if tally:
        print("failed assertions: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items(), key=lambda kv_: (-kv_[1], kv_[0]))))
    print(f"({len(scenarios)} scenarios, {kv.calls} kvplan calls, {took:.1f} s)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
