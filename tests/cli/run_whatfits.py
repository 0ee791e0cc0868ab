#!/usr/bin/env python3
"""What fits and needs through the CLI (docs/ranking.md §9, §10): properties, not text.

    run_whatfits.py --kvplan build/kvplan --schema schema/what_fits.schema.json
"""
import argparse
import json
import subprocess
import sys

import jsonschema


def run(kvplan, *args):
    p = subprocess.run([kvplan, *args], capture_output=True, text=True, timeout=120, env={"KVPLAN_RAM": "64GB", "PATH": "/usr/bin:/bin"})
    return p.returncode, p.stdout, p.stderr


def tier(r):
    return (not r["reaches_task_min"], not r["meets_speed_floor"])


def check_list(kvplan, schema, args, failures):
    rc, out, err = run(kvplan, *args, "--json")
    if rc != 0:
        failures.append(f"{args}: exit {rc}: {err}")
        return None
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    rows = doc["rows"]
    for r in rows:
        if r["option"]["headroom_bytes"] < 0:
            failures.append(f"{args}: {r['model']} does not fit")
        if abs(r["score"] - r["quality"]["value"] * r["plan_factor"]) > 0.2:
            failures.append(f"{args}: {r['model']} score is not quality x plan factor")
    for a, b in zip(rows, rows[1:]):  # tiers first, then the score, larger first
        if tier(a) > tier(b) or (tier(a) == tier(b) and a["score"] < b["score"]):
            failures.append(f"{args}: {a['model']} ranks before {b['model']} against the rule")
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvplan", required=True)
    ap.add_argument("--schema", required=True)
    a = ap.parse_args()
    schema = json.load(open(a.schema, encoding="utf-8"))
    failures = []
    for gpu, task in (("rtx4090", "agentic"), ("rtx3060-12gb", "chat"), ("m4max-128gb", "coding")):
        doc = check_list(a.kvplan, schema, ["--gpu", gpu, "--task", task], failures)
        if doc is not None and len(doc["rows"]) < 10:
            failures.append(f"{gpu} {task}: {len(doc['rows'])} models listed, fewer than 10")
    doc = check_list(a.kvplan, schema, ["--gpu", "rtx4090", "--task", "agentic", "--min-ctx", "32k", "--min-tps", "30", "--moe", "--top", "50"], failures)
    for r in (doc or {"rows": []})["rows"]:
        if r["option"]["ctx_per_slot"] < 32768 or (r["option"]["decode_tokens_per_s"] or 0) < 30 or not r["moe"]:
            failures.append(f"filters: {r['model']} breaks --min-ctx 32k --min-tps 30 --moe")
    doc = check_list(a.kvplan, schema, ["--gpu", "rtx4090", "--task", "chat", "--family", "qwen3", "--dense", "--top", "3"], failures)
    if doc is not None and (len(doc["rows"]) > 3 or any(r["family"] != "qwen3" or r["moe"] for r in doc["rows"])):
        failures.append("filters: --family qwen3 --dense --top 3")
    doc = check_list(a.kvplan, schema, ["--gpu", "rtx4090", "--task", "agentic", "--license", "apache-2.0,mit", "--top", "50"], failures)
    if doc is not None and (not doc["rows"] or any(r["license"] not in ("apache-2.0", "mit") for r in doc["rows"])):
        failures.append(f"--license apache-2.0,mit: {[(r['model'], r['license']) for r in doc['rows']]}")
    rc, out, _ = run(a.kvplan, "models", "--license", "open", "--json")
    listed = json.loads(out).get("models", []) if rc == 0 else []
    if rc != 0 or not listed or any(m["license"] not in ("apache-2.0", "mit") for m in listed):
        failures.append(f"kvplan models --license open: exit {rc}, {[(m['id'], m['license']) for m in listed]}")
    doc = check_list(a.kvplan, schema, ["--gpu", "rtx4090", "--task", "coding", "--models", "qwen2.5-coder-32b,qwen3-8b,Qwen3-14B-Q4_K_M.gguf"], failures)
    if doc is not None and sorted(r["model"] for r in doc["rows"]) != ["qwen2.5-coder-32b-instruct", "qwen3-14b", "qwen3-8b"]:
        failures.append(f"--models: {[r['model'] for r in doc['rows']]}")
    rc, out, _ = run(a.kvplan, "needs", "--model", "qwen2.5-coder-32b", "--task", "agentic", "--max-gpus", "2", "--json")
    if rc != 0:
        failures.append(f"needs: exit {rc}")
    else:
        n = json.loads(out)
        jsonschema.validate(n, schema)
        o = n["smallest_gpu"]["option"]
        if o["ctx_per_slot"] < 32768 or o["cache_type_k"] not in ("f16", "q8_0") or o["decode_tokens_per_s"] < 10:
            failures.append(f"needs: the smallest GPU's option misses the requirement: {o}")
    for bad in (["--gpu", "rtx4090", "--arch-kind", "mixture"], ["--gpu", "rtx4090", "--family", "qwen9"],
                ["--gpu", "rtx4090", "--models", "no-such-model"], ["needs", "--task", "agentic"],
                ["--gpu", "rtx4090", "--model", "qwen3-8b", "--min-tps", "5"], ["--gpu", "rtx4090", "--license", "apache2"],
                ["models", "--license", "gpl"], ["--gpu", "rtx4090", "--license", "mit,"]):
        rc, out, err = run(a.kvplan, *bad, "--json")
        if rc != 2 or "error" not in json.loads(out or "{}"):
            failures.append(f"bad input {bad}: exit {rc}, {err.strip()}")
    rc, out, _ = run(a.kvplan, "models", "qwen3")
    lines = out.splitlines()[1:]
    if rc != 0 or not lines or any("qwen3" not in line.lower() for line in lines):
        failures.append("kvplan models qwen3 lists a model that does not match")
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
