#!/usr/bin/env bash
# Fuzz kvplan with libFuzzer (clang, ASan, UBSan fatal: any report stops the run and fails it).
#   tests/fuzz/run.sh --smoke      the CI run: 30 seconds per target from the committed seeds and crash repros
#   tests/fuzz/run.sh [SECONDS]    a longer run per target (default 3600); new crashes land in tests/fuzz/crashes/
# Targets: kvplan_gguf_fuzz (the GGUF reader and the KV cache of what it reads) and kvplan_plan_fuzz (a GGUF
# header or a config.json through plan(): the planner's size arithmetic on the file's numbers).
# Any crash it finds is a bug: fix it, keep the input in tests/fuzz/crashes/ (the unit tests replay GGUF ones).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=3600
if [ "${1:-}" = "--smoke" ]; then seconds=30; elif [ -n "${1:-}" ]; then seconds="$1"; fi
tests/sanitize/build.sh kvplan_gguf_fuzz kvplan_plan_fuzz
build=build/sanitize
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
mkdir -p tests/fuzz/crashes
run() {  # target, artifact prefix, seed directories...
  local target="$1" prefix="$2"; shift 2
  local work="$build/corpus-$target"
  mkdir -p "$work"
  for d in "$@"; do cp "$d"/* "$work"/ 2>/dev/null || true; done
  echo "fuzz: $target for ${seconds}s"
  "$build/tests/fuzz/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$prefix" -print_final_stats=1 "$work"
}
run kvplan_gguf_fuzz tests/fuzz/crashes/ tests/fuzz/seeds tests/fuzz/crashes
run kvplan_plan_fuzz tests/fuzz/crashes/plan- tests/fuzz/seeds_plan
