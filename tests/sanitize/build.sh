#!/usr/bin/env bash
# The sanitizer build shared by tests/sanitize/run.sh and tests/fuzz/run.sh: clang, ASan + UBSan with
# -fno-sanitize-recover=all over everything (KVPLAN_SANITIZE), the libFuzzer targets (KVPLAN_FUZZ), in
# build/sanitize. -O1 with line tables keeps the build short on two cores; reports still name file:line.
#   tests/sanitize/build.sh TARGET...
set -euo pipefail
cd "$(dirname "$0")/../.."
# Under ctest the build is the test sanitize_build, which fuzz_smoke and sanitize require: they must not run a
# second ninja in the same tree beside each other.
if [ "${KVPLAN_SANITIZE_BUILT:-0}" = 1 ]; then exit 0; fi
command -v clang++ >/dev/null || { echo "sanitize: clang++ is needed (apt-get install clang libclang-rt-14-dev)"; exit 1; }
build=build/sanitize
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DKVPLAN_SANITIZE=ON -DKVPLAN_FUZZ=ON -DKVPLAN_BUILD_TESTS=ON -DKVPLAN_BUILD_BENCH=OFF -DKVPLAN_BUILD_CLI=ON \
    -DKVPLAN_BUILD_PYTHON=OFF >/dev/null
fi
cmake --build "$build" --target "$@"
