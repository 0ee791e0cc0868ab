#!/usr/bin/env bash
# Fuzz the GGUF reader with libFuzzer (clang, ASan, UBSan).
#   tests/fuzz/run.sh --smoke      the CI run: 60 seconds from the committed seeds and crash repros
#   tests/fuzz/run.sh [SECONDS]    a longer run (default 3600); new crashes land in tests/fuzz/crashes/
# Any crash it finds is a bug: fix it, keep the input in tests/fuzz/crashes/ (the unit tests replay it).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=3600
if [ "${1:-}" = "--smoke" ]; then seconds=60; elif [ -n "${1:-}" ]; then seconds="$1"; fi
command -v clang++ >/dev/null || { echo "fuzz: clang++ is needed (apt-get install clang libclang-rt-14-dev)"; exit 1; }
build=build/fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DKVPLAN_FUZZ=ON -DKVPLAN_BUILD_TESTS=OFF -DKVPLAN_BUILD_BENCH=OFF -DKVPLAN_BUILD_CLI=OFF -DKVPLAN_BUILD_PYTHON=OFF >/dev/null
cmake --build "$build" --target kvplan_gguf_fuzz
work="$build/corpus"
mkdir -p tests/fuzz/crashes
mkdir -p "$work"
cp tests/fuzz/seeds/* tests/fuzz/crashes/* "$work"/ 2>/dev/null || true
"$build/tests/fuzz/kvplan_gguf_fuzz" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=tests/fuzz/crashes/ -print_final_stats=1 "$work"
