"""What fits a GPU for a task, and what a model needs (docs/ranking.md §9, §10): the C++ ranking, as records."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _core
from ._plan import _pandas
from ._request import PathLike, Size, catalog, request, signature_checked

if TYPE_CHECKING:
    import pandas as _pd


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """One what-fits row as a flat record: the model, its quality, the plan's figures, the score."""
    o, q = row["option"], row["quality"]
    return {"rank": row["rank"], "model": row["model"], "name": row["name"], "family": row["family"],
            "license": row["license"], "params": row["params"], "moe": row["moe"], "quality": q["value"], "quality_mean": q["mean"], "quality_sd": q["sd"],
            "quality_estimated": q["estimated"],
            "quality_basis": q["basis"], "weights": o["weights"], "ctx_per_slot": o["ctx_per_slot"],
            "cache_type_k": o["cache_type_k"], "cache_type_v": o["cache_type_v"],
            "decode_tokens_per_s": o["decode_tokens_per_s"], "host_bytes": o["host_bytes"],
            "device_bytes": o["device_bytes"], "expected_loss": o["expected_loss"], "risk": o["risk"],
            "reaches_task_min": row["reaches_task_min"], "meets_speed_floor": row["meets_speed_floor"],
            "plan_factor": row["plan_factor"], "score": row["score"], "launch_line": o["launch"]}


@dataclass(frozen=True)
class WhatFits:
    """Models ranked for a GPU and a task; each row is that model's recommended plan (kvplan --gpu G --task T)."""
    data: dict[str, Any]

    @property
    def records(self) -> list[dict[str, Any]]:
        """One flat dict per ranked model, best first (DataFrame-ready)."""
        return [_flat(r) for r in self.data["rows"]]

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.data, indent=indent, ensure_ascii=False) + "\n"

    def to_dataframe(self) -> _pd.DataFrame:
        """One row per ranked model: the columns of `records`."""
        pd = _pandas()
        columns = list(_flat({"rank": 0, "model": "", "name": "", "family": "", "license": None, "params": 0, "moe": False,
                              "quality": {"value": 0, "mean": 0, "sd": 0, "estimated": False, "basis": ""}, "reaches_task_min": True,
                              "meets_speed_floor": True, "plan_factor": 1, "score": 0,
                              "option": {k: None for k in ("weights", "ctx_per_slot", "cache_type_k", "cache_type_v",
                                                           "decode_tokens_per_s", "host_bytes", "device_bytes",
                                                           "expected_loss", "risk", "launch")}}))
        return pd.DataFrame(self.records, columns=columns)

    def __repr__(self) -> str:
        names = ", ".join(r["model"] for r in self.data["rows"][:5])
        return f"<kvplan.WhatFits {self.data['task']['id']} on {'+'.join(self.data['request']['gpu'])}: {len(self.data['rows'])} models ({names}, ...)>"


@dataclass(frozen=True)
class Needs:
    """The hardware a model needs for a task (kvplan needs --model M --task T)."""
    data: dict[str, Any]

    @property
    def found(self) -> bool:
        return bool(self.data["found"])

    @property
    def records(self) -> list[dict[str, Any]]:
        """One flat dict per device that suffices: the smallest GPU, the smallest memory, each kind's count, each Mac."""
        out = []
        for kind, devices in (("smallest_gpu", [self.data["smallest_gpu"]]), ("smallest_memory", [self.data["smallest_memory"]]),
                              ("multi_gpu", self.data["multi_gpu"]), ("apple", self.data["apple"])):
            for d in devices:
                if d:
                    o = d["option"]
                    out.append({"kind": kind, "gpu": d["gpu"], "name": d["name"], "count": d["count"],
                                "memory_bytes": d["memory_bytes"], "weights": o["weights"], "ctx_per_slot": o["ctx_per_slot"],
                                "cache_type_k": o["cache_type_k"], "cache_type_v": o["cache_type_v"],
                                "decode_tokens_per_s": o["decode_tokens_per_s"]})
        return out

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.data, indent=indent, ensure_ascii=False) + "\n"

    def to_dataframe(self) -> _pd.DataFrame:
        return _pandas().DataFrame(self.records)


@signature_checked("kvplan.what_fits()")
def what_fits(gpu: str | Sequence[str], task: str | None = None, *, models: Sequence[str] | None = None,
              min_ctx: int | str | None = None, min_tps: float | None = None, family: str | None = None,
              arch_kind: str | None = None, license: str | Sequence[str] | None = None, top: int = 20,
              engine: str | None = None, host_ram: Size | None = None, reserve: Size | None = None,
              n_parallel: int | None = None, data: PathLike | Sequence[PathLike] | None = None) -> WhatFits:
    """Rank the catalog's models (or `models`: catalog names, GGUF file names) for a GPU and a task: each model's
    recommended plan, ordered by its task quality times what the plan keeps of it (docs/ranking.md §9).
    min_ctx, min_tps, family, arch_kind ("moe" | "dense") and license (a license id of data/licenses.yaml, "open" for
    OSI-approved, "other" for a custom license, or a list: any of them) filter; top keeps the first N. Raises InputError."""
    cat = catalog(data)
    req = request(cat, gpu=gpu, task=task, engine=engine, host_ram=host_ram, reserve=reserve, n_parallel=n_parallel)
    ctx = _core.parse_token_count(str(min_ctx), "min_ctx") if isinstance(min_ctx, str) else min_ctx
    licenses = [license] if isinstance(license, str) else list(license or [])
    text = _core.what_fits_json(cat, req, list(models or []), ctx, min_tps, family or "", arch_kind or "", top, licenses)
    return WhatFits(json.loads(text))


@signature_checked("kvplan.needs()")
def needs(model: PathLike, task: str | None = None, *, engine: str | None = None, max_gpus: int = 8,
          data: PathLike | Sequence[PathLike] | None = None) -> Needs:
    """The smallest catalog GPU, memory size, GPU count per kind and Mac per chip on which `model` reaches the
    task's target context with K at 8 bits or more, on the device alone, at the task's speed floor (§10)."""
    cat = catalog(data)
    req = request(cat, gpu="24GB", model=model, task=task, engine=engine)
    return Needs(json.loads(_core.needs_json(cat, req, max_gpus)))
