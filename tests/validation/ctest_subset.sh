#!/usr/bin/env bash
# The ctest entry of the validation subset: skipped (77) when the validation environment with the
# pinned llama-cpp-python is not installed (tests/validation/run.sh --install-only builds it, about
# 16 minutes on two cores, once). Every target must hold: exact figures, refusals, the compute buffer
# within 10 % (it is exact on every measured context, docs/accuracy.md) and never fitting where llama.cpp
# needs more. Results go to the directory given as $1 (the build tree), not to the committed results/.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${KVPLAN_VALIDATION_VENV:-$root/.venv-validation}"
if ! "$venv/bin/python" -c "import llama_cpp, gguf" 2>/dev/null; then
  echo "validation_subset: skipped, no $venv with llama-cpp-python (run tests/validation/run.sh --install-only)"
  exit 77
fi
exec "$root/tests/validation/run.sh" --subset --results "${1:-$root/build/validation-results}"
