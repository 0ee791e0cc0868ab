#!/usr/bin/env bash
# The sanitizer check (ctest 'sanitize'): the unit tests and the hostile-input corpus (tests/hostile/) under a
# clang build with ASan + UBSan, -fno-sanitize-recover=all and halt_on_error=1, so any report (a
# use-after-free, a signed overflow, a NaN or huge double converted to an integer, a division by zero) fails
# the test. The unit tests tagged [slow] (the decision sweeps and the property sweeps over the whole catalog,
# two thirds of the unit run's time in Release) are left to the Release run: under ASan they would take
# minutes and go through the same arithmetic as the cases kept.
#   tests/sanitize/run.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${1:-python3}"
tests/sanitize/build.sh kvplan_tests kvplan
build=build/sanitize
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export KVPLAN_RAM=unknown
export TMPDIR="$PWD/$build/tmp"  # apart from ctest unit's run of the same tests (fixtures by fixed names)
mkdir -p "$TMPDIR"
echo "sanitize: unit tests (all but [slow])"
"$build/tests/kvplan_tests" "~[slow]"
echo "sanitize: hostile-input corpus"
"$python" tests/hostile/run_hostile.py --kvplan "$build/kvplan" --sanitized
