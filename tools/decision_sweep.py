#!/usr/bin/env python3
"""Decision sweep: what a user acts on, over the catalog's models x GPUs x tasks (issue 13's closing figures).

    tools/decision_sweep.py --kvplan build/kvplan [--jobs 2] [--quick] [--json out.json]

Counts, from the CLI's own JSON and exit codes (so any kvplan build can be measured, old or new):
  * avoid_exit0:       plans that exit 0 while the recommended option rates "avoid";
  * max_ctx_below:     max-context answers (--weights Q4_K_M -ctk f16 -ctv f16, context free) shorter than the
                       brute force: the largest -c (a multiple of 256) that fits with flash attention on or off,
                       every layer on the GPU (-ngl 99), found by bisection over single-configuration plans;
  * suggestions:       suggestions a plan prints, re-run as asked; failing ones do not give a recommendation
                       (newer builds: JSON suggestions' args; older builds: the "-ngl N" and "-c N" advice of a
                       nothing-fits text, re-run with that option's weights, context and cache types).
Runs with KVPLAN_RAM=unknown so the figures do not depend on this machine's RAM.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
from typing import Any

GPUS = ["8GB", "rtx3060-12gb", "rtx4060ti-16gb", "rtx4090", "24GB", "m4max-128gb", "h100-sxm"]
TASKS = ["general", "agentic", "coding", "rag", "chat", "summarization", "creative", "reasoning"]


class Runner:
    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.env = {k: v for k, v in os.environ.items() if k != "KVPLAN_DATA"}
        self.env.update({"LC_ALL": "C", "KVPLAN_RAM": "unknown"})

    def json(self, args: list[str]) -> tuple[int, dict[str, Any] | None]:
        p = subprocess.run([self.exe, *args, "--json"], capture_output=True, text=True, env=self.env, timeout=120)
        try:
            return p.returncode, json.loads(p.stdout) if p.stdout.strip() else None
        except json.JSONDecodeError:
            return p.returncode, None


def models(r: Runner) -> list[str]:
    p = subprocess.run([r.exe, "models"], capture_output=True, text=True, env=r.env)
    out = []
    for line in p.stdout.splitlines()[1:]:
        tok = line.split()
        if tok and not tok[0].startswith("-") and re.match(r"^[a-z0-9][a-z0-9.\-]*$", tok[0]):
            out.append(tok[0])
    return out


def recommended(d: dict[str, Any] | None) -> dict[str, Any] | None:
    if not d or not d.get("options"):
        return None
    rec = d.get("recommended")
    return d["options"][rec - 1] if isinstance(rec, int) else None


def plan_case(r: Runner, model: str, gpu: str, task: str) -> dict[str, Any]:
    rc, d = r.json(["--gpu", gpu, "--model", model, "--task", task])
    out: dict[str, Any] = {"case": f"{model} {gpu} {task}", "rc": rc, "avoid_exit0": False, "suggestions": 0, "failing": []}
    if rc == 2 or d is None:
        return out
    rec = recommended(d)
    out["avoid_exit0"] = rc == 0 and rec is not None and rec["quality"]["risk"] == "avoid"
    for s in d.get("suggestions") or []:  # newer builds: verified suggestions with their arguments
        out["suggestions"] += 1
        src, sd = r.json(list(s["args"]))
        srec = recommended(sd)
        same = srec is not None and all(srec.get(k) == s["option"].get(k) for k in ("weights", "ctx_size", "cache_type_k", "cache_type_v"))
        if src != 0 or not same or srec["quality"]["risk"] == "avoid":
            out["failing"].append(f"{out['case']}: {' '.join(s['args'])}")
    text = d.get("nothing_fits") or ""
    if rc == 1 and text and not d.get("suggestions"):  # older builds: advice in the nothing-fits text
        smallest = d["options"][0]
        base = ["--gpu", gpu, "--model", model, "--task", task, "--weights", smallest["weights"],
                "-ctk", smallest["cache_type_k"], "-ctv", smallest["cache_type_v"], "-fa", smallest["flash_attn"]]
        for flag, value in re.findall(r"(-ngl|-c) (\d+)", text):
            out["suggestions"] += 1
            args = base + (["-ngl", value, "-c", str(smallest["ctx_size"])] if flag == "-ngl" else ["-c", value, "-ngl", "99"])
            src, sd = r.json(args)
            srec = recommended(sd) or (sd["options"][0] if sd and sd.get("fits") and src == 0 else None)
            if src != 0 or srec is None:
                out["failing"].append(f"{out['case']}: {' '.join(args)}")
    return out


def fits(r: Runner, args: list[str]) -> bool:
    rc, d = r.json(args)
    return rc in (0, 1) and d is not None and bool(d.get("fits"))


def max_ctx_case(r: Runner, model: str, gpu: str) -> dict[str, Any]:
    pins = ["--gpu", gpu, "--model", model, "--weights", "Q4_K_M", "-ctk", "f16", "-ctv", "f16"]
    rc, d = r.json(pins)
    case = f"{model} {gpu}"
    if rc == 2 or d is None:
        return {"case": case, "skipped": True}
    native = int(d["model"].get("ctx_native") or d["model"].get("ctx_native_tokens") or 0) or 131072
    opts = d.get("options") or []
    answer = opts[0]["ctx_size"] if opts and opts[0].get("fits") else 0
    brute = 0
    for fa in ("on", "off"):
        lo, hi = 0, native // 256  # in steps of 256: lo fits (0 = none), hi + 1 does not
        if fits(r, pins + ["-fa", fa, "-ngl", "99", "-c", str(hi * 256)]):
            lo = hi
        else:
            hi -= 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if fits(r, pins + ["-fa", fa, "-ngl", "99", "-c", str(mid * 256)]):
                    lo = mid
                else:
                    hi = mid - 1
        brute = max(brute, lo * 256)
    return {"case": case, "answer": answer, "brute": brute, "below": answer < brute}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvplan", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="every third model, four GPUs, four tasks")
    ap.add_argument("--json", help="write the per-case results here")
    a = ap.parse_args()
    r = Runner(a.kvplan)
    ms, gpus, tasks = models(r), GPUS, TASKS
    if a.quick:
        ms, gpus, tasks = ms[::3], ["8GB", "rtx3060-12gb", "rtx4090", "m4max-128gb"], ["general", "agentic", "rag", "reasoning"]
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        plans = list(pool.map(lambda c: plan_case(r, *c), [(m, g, t) for m in ms for g in gpus for t in tasks]))
        maxes = list(pool.map(lambda c: max_ctx_case(r, *c), [(m, g) for m in ms for g in ("8GB", "rtx3060-12gb", "rtx4090", "m4max-128gb")]))
    maxes = [x for x in maxes if not x.get("skipped")]
    failing = [f for p in plans for f in p["failing"]]
    summary = {
        "plans": len(plans),
        "avoid_exit0": sum(p["avoid_exit0"] for p in plans),
        "exit_codes": {str(c): sum(p["rc"] == c for p in plans) for c in sorted({p["rc"] for p in plans})},
        "max_ctx_queries": len(maxes),
        "max_ctx_below_brute_force": sum(x["below"] for x in maxes),
        "suggestions": sum(p["suggestions"] for p in plans),
        "failing_suggestions": len(failing),
    }
    print(json.dumps(summary, indent=1))
    for x in maxes:
        if x["below"]:
            print(f"max-ctx below brute force: {x['case']}: {x['answer']} < {x['brute']}")
    for f in failing[:20]:
        print("failing suggestion:", f)
    for p in plans:
        if p["avoid_exit0"]:
            print("avoid with exit 0:", p["case"])
            break
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "plans": plans, "max_ctx": maxes}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
