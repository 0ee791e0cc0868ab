"""kvplan: which weights, context length and K/V cache types fit your GPU, and what each choice costs in quality.

    >>> import kvplan
    >>> p = kvplan.plan(gpu="24GB", model="qwen2.5-coder-32b", task="agentic")
    >>> p.recommended.launch_line
    'llama-server -m Qwen2.5-Coder-32B-Instruct-Q4_K_M.gguf -c 32768 -np 1 -fa on -ctk q8_0 -ctv q8_0 -ngl 99 --fit off'

The same C++ planner as the `kvplan` command: ``p.to_json()`` is byte-identical to ``kvplan --json``.
kvplan.plots draws memory against context and the risk of the ranked options (matplotlib).
"""

# In a build tree the compiled module lies in <build>/python/kvplan/ (PYTHONPATH=<build>/python:python).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from ._errors import InputError  # noqa: E402  (first: the module's exception translator raises it)
from . import _core  # noqa: E402
from ._catalog import (  # noqa: E402
    Engine, Gpu, Mla, Model, Moe, Recurrent, RopeScaling, SlidingWindow, Task, WeightFormat, cache_types, engine, engines,
    gpu,
    gpus, model, models, read_model, tasks, weight_formats)
from ._plan import (  # noqa: E402
    Allocation, Memory, Option, Plan, Pool, PoolUsage, Quality, Resolved, SuggestedOption, Suggestion, breakdown,
    max_context, plan)
from ._request import Options, PlanOptions  # noqa: E402
from ._whatfits import Needs, WhatFits, needs, what_fits  # noqa: E402

__version__: str = _core.__version__
SCHEMA_VERSION: int = _core.SCHEMA_VERSION
WHAT_FITS_SCHEMA_VERSION: int = _core.WHAT_FITS_SCHEMA_VERSION  # schema/what_fits.schema.json  # the "schema_version" of to_json() (schema/plan.schema.json)

__all__ = [
    "Allocation", "Engine", "Gpu", "InputError", "Memory", "Mla", "Model", "Moe", "Option", "Options", "Plan",
    "PlanOptions", "Pool", "PoolUsage", "Quality", "Recurrent", "Resolved", "RopeScaling", "SCHEMA_VERSION",
    "SlidingWindow", "SuggestedOption", "WHAT_FITS_SCHEMA_VERSION", "Suggestion", "Task", "WeightFormat", "breakdown", "cache_types", "engine", "engines", "gpu", "gpus", "max_context",
    "model", "models", "Needs", "needs", "plan", "read_model", "tasks", "weight_formats", "WhatFits", "what_fits",
]
