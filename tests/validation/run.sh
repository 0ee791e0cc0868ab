#!/usr/bin/env bash
# Validates kvplan against real llama.cpp: the build llama-cpp-python 0.3.35 vendors (b10454, 4df29be4f).
#
#   tests/validation/run.sh [--subset|--full] [--install-only] [--measure-only] [--models a,b]
#                           [--no-fail-on compute,fits] [--results DIR] [--merge]
#
# --subset (the default) is the fixed CI subset; --full is the whole sweep (see docs/accuracy.md for
# its wall time). Steps:
#   1. the virtual environment .venv-validation/ (KVPLAN_VALIDATION_VENV overrides) with the pinned
#      packages of requirements.txt; llama-cpp-python is an sdist and builds llama.cpp from source
#      (CPU backend, portable flags): 16 minutes on two cores, once;
#   2. the probe library (probe.cpp) against that sdist's headers;
#   3. the synthetic GGUF models (make_models.py) in tests/validation/models/;
#   4. the measurements (measure.py) in tests/validation/out/;
#   5. the comparison with build/kvplan (compare.py): results/compare-MODE.csv and summary-MODE.json
#      (--results DIR writes them elsewhere: ctest does, so a test run leaves the committed results alone;
#      --merge with --models re-runs those families only and keeps the other families' rows of the results).
# Exit status: compare.py's (1 when a target is missed), or 2 on a setup error.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${KVPLAN_VALIDATION_VENV:-$root/.venv-validation}"
kvplan="${KVPLAN:-$root/build/kvplan}"
mode=subset
install_only=0
measure_only=0
models=""
no_fail_on=""
results="$here/results"
merge=()
while [ $# -gt 0 ]; do
  case "$1" in
    --subset) mode=subset ;;
    --full) mode=full ;;
    --install-only) install_only=1 ;;
    --measure-only) measure_only=1 ;;
    --models) models="$2"; shift ;;
    --no-fail-on) no_fail_on="$2"; shift ;;
    --results) results="$2"; shift ;;
    --merge) merge=(--merge) ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

lcp_version=0.3.35
py="$venv/bin/python"
src="$venv/src/llama_cpp_python-$lcp_version"
stamp() { date +%s; }

# 1. packages
if [ ! -x "$py" ]; then
  python3 -m venv "$venv"
fi
if [ ! -d "$src/vendor/llama.cpp/src" ]; then
  mkdir -p "$venv/src"
  "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$lcp_version" -d "$venv/src"
  tar -xzf "$venv/src/llama_cpp_python-$lcp_version.tar.gz" -C "$venv/src"
fi
if ! "$py" -c "import llama_cpp, gguf, sys; sys.exit(0 if llama_cpp.__version__ == '$lcp_version' else 1)" 2>/dev/null; then
  echo "run.sh: installing the pinned packages into $venv (llama-cpp-python builds llama.cpp from source)"
  t=$(stamp)
  # CPU only; portable flags (no -march=native); no multimodal library and no common library (not used here).
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$here/no_common.cmake}" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$py" -m pip install -q --disable-pip-version-check \
      "$venv/src/llama_cpp_python-$lcp_version.tar.gz" \
      $(grep -v -e '^#' -e '^llama-cpp-python' -e '^$' "$here/requirements.txt")
  "$py" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"  # checks the pins
  echo "run.sh: packages installed in $(( $(stamp) - t )) s"
fi
if [ "$install_only" = 1 ]; then exit 0; fi

# 2. probe library
lib="$("$py" -c 'import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))')"
mkdir -p "$here/models" "$here/out"
probe="$here/models/libkvprobe.so"
if [ ! -f "$probe" ] || [ "$here/probe.cpp" -nt "$probe" ]; then
  llsrc="$src/vendor/llama.cpp"
  g++ -std=c++17 -O1 -shared -fPIC "$here/probe.cpp" -o "$probe" \
    -I"$llsrc/include" -I"$llsrc/src" -I"$llsrc/ggml/include" \
    -L"$lib" -lggml-base -ldl -Wl,-rpath,"$lib"
fi

# 3. models
cd "$here"
t=$(stamp)
only=()
if [ -n "$models" ]; then only=(--only "$models"); fi
"$py" make_models.py --out models "${only[@]}"
echo "run.sh: models ready in $(( $(stamp) - t )) s"

# 4. measure
mods=()
if [ -n "$models" ]; then mods=(--models "$models"); fi
t=$(stamp)
"$py" measure.py --"$mode" --probe "$probe" "${mods[@]}"
echo "run.sh: measured in $(( $(stamp) - t )) s"
if [ "$measure_only" = 1 ]; then exit 0; fi

# 5. compare
if [ ! -x "$kvplan" ]; then
  echo "run.sh: $kvplan not found: build kvplan first (cmake --build build)" >&2
  exit 2
fi
mkdir -p "$results"
"$py" compare.py --"$mode" --kvplan "$kvplan" --no-fail-on "$no_fail_on" --results "$results" "${merge[@]}"
