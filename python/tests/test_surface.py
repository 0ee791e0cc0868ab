"""One surface: the Python result objects carry what `kvplan --json` carries, under the same names and shapes.

For every golden plan request (tests/golden/cases.txt, exit 0 or 1, what kvplan.plan() can express) the CLI's
--json and the objects of kvplan.plan() with the same request are walked side by side. A field whose name is a
key of the JSON object it stands for must hold the same value in the same shape (tuples as lists, None as null,
dataclasses as objects). The few fields that differ are listed below, each with the JSON path that carries it and
how its value reads there, or as carried by one side only, with the reason (docs/python.md "One surface").
A field or key that appears on one side and is in no list fails the test: a new field is added to both, or said.

Errors: under --json an input error is an object on stdout whose "error" is kvplan.InputError.to_dict()
(test_golden.py checks that on every golden error case).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Case, run_cli
from test_golden import PLAN_CASES

import kvplan


def c_round(x: float, scale: float) -> float:
    """std::round(x * scale) / scale, as libplanner/src/json.cpp rounds (halves away from zero)."""
    return math.copysign(math.floor(abs(x) * scale + 0.5), x) / scale


def on_off(x: bool) -> str:
    return "on" if x else "off"


def rounded(scale: float) -> Callable[[Any], Any]:
    return lambda x: None if x is None else c_round(x, scale)


# Python field -> (the JSON path relative to the object, how the Python value reads there). Paths may start with
# "../" (the parent object's key).
Renamed = dict[str, tuple[str, Callable[[Any], Any]]]
SAME: Callable[[Any], Any] = lambda x: x  # noqa: E731


@dataclasses.dataclass
class Pairing:
    renamed: Renamed = dataclasses.field(default_factory=dict)
    python_only: dict[str, str] = dataclasses.field(default_factory=dict)
    json_only: dict[str, str] = dataclasses.field(default_factory=dict)
    converted: Renamed = dataclasses.field(default_factory=dict)  # the same name, another shape


PAIRINGS: dict[type, Pairing] = {
    kvplan.Option: Pairing(
        converted={"flash_attn": ("flash_attn", on_off),  # a bool in Python, llama.cpp's -fa word in JSON
                   "score": ("score", rounded(1e6)),  # JSON: 6 decimals
                   "max_concurrency": ("max_concurrency", lambda x: None if x is None else math.floor(x * 100) / 100)},
        renamed={"decode_tps": ("decode/tokens_per_s", rounded(10)),
                 "decode_tps_low": ("decode/tokens_per_s_low", rounded(10)),
                 "decode_bound": ("decode/bound_by", SAME),
                 "prefill_tps": ("decode/prefill_tokens_per_s", rounded(1)),
                 "ttft_s": ("decode/time_to_first_token_s", rounded(10)),
                 "n_gpu_layers": ("placement/n_gpu_layers", SAME),
                 "n_cpu_moe": ("placement/n_cpu_moe", SAME),
                 "host_bytes": ("placement/host_bytes", SAME)},
        python_only={"decode_relative": "decode speed against the same bytes all in device memory: no JSON key yet",
                     "plan": "the Plan the option belongs to"},
        json_only={"kv_pool_tokens": "vLLM/SGLang pool in tokens (issue 18): not in Python yet",
                   "stages": "vLLM/SGLang pipeline stages (issue 18): not in Python yet"}),
    kvplan.Memory: Pairing(
        renamed={"overhead_high_bytes": ("high_bytes/overhead_bytes", SAME),
                 "total_high_bytes": ("high_bytes/total_bytes", SAME)},
        python_only={"compute_host_bytes": "a host buffer: the JSON counts it in allocations[] only",
                     "output_bytes": "a host buffer: the JSON counts it in allocations[] only"},
        json_only={"accuracy": "per kind, exact or estimate: Python has it per allocation (Allocation.accuracy)",
                   "high_bytes": "per kind: Python has it per allocation (Allocation.high_bytes); the totals above",
                   "unpadded_bytes": "per kind: Python has it per allocation (Allocation.unpadded_bytes)"}),
    kvplan.Quality: Pairing(python_only={"weights_factor": "the weights' factor of the loss: no JSON key yet"}),
    kvplan.Pool: Pairing(
        converted={"budget_bytes": ("budget_bytes", lambda x: 0 if x is None else x)},  # JSON: 0 when not bounded
        json_only={"breakdown": "the recommendation's allocations in this pool: Plan.recommended.allocations",
                   "headroom_bytes": "the recommendation's: Plan.recommended.pools[].headroom_bytes"}),
    kvplan.Resolved: Pairing(
        python_only={"gpu_size_only": "gpu= was a size, not a named card (the JSON's request.gpu says which)"},
        json_only={"serving": "vLLM/SGLang layout and admission (issue 18): not in Python yet",
                   "draft": "the draft model as planned: Plan.model_draft is not in Python yet",
                   "mmproj": "the vision projector as planned: not in Python yet",
                   "mode": "Plan.mode"}),
    kvplan.SuggestedOption: Pairing(
        converted={"flash_attn": ("flash_attn", on_off)},
        renamed={"decode_tps": ("decode_tokens_per_s", rounded(10))}),
    kvplan.Task: Pairing(
        renamed={"ctx_target": ("ctx_target_tokens", SAME), "ctx_min": ("ctx_min_tokens", SAME),
                 "decode_floor_tps": ("../speed_floor/decode_tokens_per_s", SAME),
                 "ttft_max_s": ("../speed_floor/time_to_first_token_s", SAME),
                 "speed_source": ("../speed_floor/source", SAME)},
        python_only={"aliases": "the catalog entry's (kvplan.tasks())", "metric": "the catalog entry's",
                     "source": "the catalog entry's", "summary": "the catalog entry's"}),
    kvplan.Plan: Pairing(
        renamed={"mode": ("resolved/mode", SAME)},
        converted={"recommended": ("recommended", lambda o: None if o is None else o.rank)},  # JSON: its rank
        python_only={"device": "pools[0]"},
        json_only={"schema_version": "kvplan.SCHEMA_VERSION",
                   "request": "the request as the CLI read it: the keywords of kvplan.plan()",
                   "speed_floor": "Plan.task (decode_floor_tps, ttft_max_s, speed_source)",
                   "components": "what the plan loads: the main model, a draft, a projector"}),
}
# Plan's fields (it is not a dataclass) and the properties that stand for a JSON key.
PLAN_FIELDS = [*kvplan.Plan.__annotations__, "recommended", "device"]
PROPERTIES = {kvplan.Option: ["host_bytes"], kvplan.Memory: ["kv_total_bytes"]}


def fields(obj: object) -> list[str]:
    if isinstance(obj, kvplan.Plan):
        return PLAN_FIELDS
    return [f.name for f in dataclasses.fields(obj)] + PROPERTIES.get(type(obj), [])  # type: ignore[arg-type]


def at(doc: dict[str, Any], parent: dict[str, Any] | None, path: str) -> Any:
    node: Any = doc
    if path.startswith("../"):
        node, path = parent, path[3:]
    for key in path.split("/"):
        if node is None:  # a null object (decode of an unknown speed): each of its values is absent
            return None
        node = node[key]
    return node


def differences(where: str, py: Any, js: Any, parent: dict[str, Any] | None = None) -> list[str]:
    """Where a Python value and the JSON value it stands for differ (one line each)."""
    if isinstance(py, kvplan.Model):  # the catalog's entry; the JSON's object is Model.to_json() (kvplan inspect --json)
        return [] if json.loads(py.to_json()) == js else [f"{where}: Model.to_json() is not the JSON's model"]
    if dataclasses.is_dataclass(py) or isinstance(py, kvplan.Plan):
        if not isinstance(js, dict):
            return [f"{where}: Python has an object, JSON {json.dumps(js)[:80]}"]
        return object_differences(where, py, js, parent)
    if isinstance(py, (tuple, list)):
        if not isinstance(js, list) or len(py) != len(js):
            return [f"{where}: Python {py!r:.80}, JSON {json.dumps(js)[:80]}"]
        return [d for i, (a, b) in enumerate(zip(py, js)) for d in differences(f"{where}[{i}]", a, b, parent)]
    if isinstance(py, dict):
        if not isinstance(js, dict) or list(py) != list(js):  # the same keys in the same order
            return [f"{where}: Python keys {list(py)}, JSON {json.dumps(js)[:120]}"]
        return [d for k in py for d in differences(f"{where}.{k}", py[k], js[k], parent)]
    if py != js or type(py) is not type(js) and not (isinstance(py, float) and isinstance(js, int)):
        return [f"{where}: Python {py!r:.80}, JSON {json.dumps(js)[:80]}"]
    return []


def object_differences(where: str, py: Any, js: dict[str, Any], parent: dict[str, Any] | None) -> list[str]:
    pairing = PAIRINGS.get(type(py), Pairing())
    out: list[str] = []
    carried: set[str] = set()
    for name in fields(py):
        value = getattr(py, name)
        if name in pairing.python_only:
            continue
        path, convert = pairing.renamed.get(name) or pairing.converted.get(name) or (name, SAME)
        try:
            expected = at(js, parent, path)
        except KeyError:
            out.append(f"{where}.{name}: Python only, and in no list of test_surface.py")
            continue
        carried.add(path.split("/")[0])
        if name in pairing.converted or name in pairing.renamed:
            value = convert(value)
            if value != expected:
                out.append(f"{where}.{name}: Python {value!r:.80} as JSON's {path}, JSON {json.dumps(expected)[:80]}")
            continue
        out += differences(f"{where}.{name}", value, expected, js)
    for key in js:
        if key not in carried and key not in pairing.json_only:
            out.append(f"{where}.{key}: JSON only, and in no list of test_surface.py")
    return out


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.name)
def test_python_carries_what_json_carries(case: Case, in_repo: Any) -> None:
    from conftest import keywords
    proc = run_cli([*case.args, "--json"] if "--json" not in case.args else case.args)
    assert proc.returncode == case.exit_code, proc.stderr.decode()
    doc = json.loads(proc.stdout)
    p = kvplan.plan(**keywords(case.args))
    diffs = differences("plan", p, doc)
    assert not diffs, "\n".join(diffs[:20])


def test_the_lists_are_not_stale() -> None:
    """Every field a list names exists on its Python type (a renamed or removed field leaves no stale entry)."""
    for cls, pairing in PAIRINGS.items():
        names = set(PLAN_FIELDS) if cls is kvplan.Plan else {f.name for f in dataclasses.fields(cls)} | set(PROPERTIES.get(cls, []))
        for name in (*pairing.renamed, *pairing.converted, *pairing.python_only):
            assert name in names, f"{cls.__name__}.{name}"


def test_the_comparison_can_fail(in_repo: Any) -> None:
    """A changed value, a dropped key and a field in no list are each reported."""
    p = kvplan.plan(gpu="24GB", model="qwen3-8b", top=1)
    doc = p.to_dict()
    assert differences("plan", p, doc) == []
    changed = json.loads(json.dumps(doc))
    changed["options"][0]["ctx_per_slot"] += 1
    changed["options"][0]["launch"]["extra"] = "x"
    del changed["options"][0]["memory"]["kv_total_bytes"]
    changed["options"][0]["new_key"] = 1
    found = "\n".join(differences("plan", p, changed))
    for what in ("plan.options[0].ctx_per_slot", "plan.options[0].launch", "plan.options[0].new_key: JSON only",
                 "plan.options[0].memory.kv_total_bytes: Python only"):
        assert what in found, found


def test_the_schema_states_its_version() -> None:
    """schema/plan.schema.json says the version it requires, for a plan and an error alike, and it is the module's."""
    from conftest import REPO
    schema = json.loads((REPO / "schema" / "plan.schema.json").read_text(encoding="utf-8"))
    version = kvplan.SCHEMA_VERSION
    assert f"schema_version {version}" in schema["description"]
    for part in ("plan", "error"):
        assert schema["$defs"][part]["properties"]["schema_version"]["const"] == version, part


def test_input_error_to_dict_is_the_schemas_error() -> None:
    from conftest import REPO
    schema = json.loads((REPO / "schema" / "plan.schema.json").read_text(encoding="utf-8"))
    error_keys = schema["$defs"]["error"]["properties"]["error"]["required"]
    with pytest.raises(kvplan.InputError) as raised:
        kvplan.plan(gpu="24GB", model="qwen3-8b", task="codng")
    d = raised.value.to_dict()
    assert list(d) == error_keys
    assert d["field"] == "--task" and d["value"] == "codng" and d["suggestion"] == "coding" and "coding" in d["accepted"]
    assert d["message"] == str(raised.value)
