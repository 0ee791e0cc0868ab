#!/usr/bin/env bash
# MLX's KV cache measured for real against kvplan --engine mlx (tests/validation/mlx_cache.py).
#
#   tests/validation/mlx_cache.sh [--install-only]
#
# Installs the pinned wheels of requirements-mlx.txt and mlx-lm (--no-deps) into .venv-mlx/
# (KVPLAN_MLX_VENV overrides) once, about 30 s; the check itself takes about 6 s. Exit 77 (skipped) when
# the environment cannot be installed here (no wheel for this platform, no network).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${KVPLAN_MLX_VENV:-$root/.venv-mlx}"
py="$venv/bin/python"
if ! "$py" -c "import mlx.core, importlib.util, sys; sys.exit(importlib.util.find_spec('mlx_lm') is None)" 2>/dev/null; then
  { python3 -m venv "$venv" &&
    "$py" -m pip install -q --disable-pip-version-check -r "$here/requirements-mlx.txt" &&
    "$py" -m pip install -q --disable-pip-version-check --no-deps "mlx-lm==0.32.2"; } >"$venv.log" 2>&1 || {
    echo "mlx_cache: skipped, could not install mlx into $venv (see $venv.log)"
    exit 77
  }
fi
if [ "${1:-}" = "--install-only" ]; then exit 0; fi
exec "$py" "$here/mlx_cache.py" --kvplan "${KVPLAN:-$root/build/kvplan}" --out "${KVPLAN_MLX_OUT:-$root/build/mlx-cache.csv}"
