#!/usr/bin/env bash
# Times the kvplan CLI end to end (process start, embedded catalog load, plan, table output):
# N runs of each command, wall time from $EPOCHREALTIME (else `date +%s%N`), reports mean / min / max in ms, and
# the peak RSS of one run when GNU time is installed (/usr/bin/time).
#   bench/cli_startup.sh [path/to/kvplan] [N]     (defaults: build/kvplan, 50)
# See docs/benchmarks.md.
set -euo pipefail

KVPLAN=${1:-build/kvplan}
N=${2:-50}
if [[ ! -x "$KVPLAN" ]]; then
  echo "error: $KVPLAN is not an executable (build it: cmake --build build --target kvplan)" >&2
  exit 2
fi

export LC_ALL=C

# Nanosecond wall clock. Bash 5's $EPOCHREALTIME needs no fork; `date +%s%N` adds ~1 ms of its own.
# Sets REPLY_NS (no command substitution, so no subshell either).
now_ns() {
  if [[ -n ${EPOCHREALTIME:-} ]]; then
    local t=${EPOCHREALTIME/[.,]/}   # microseconds
    REPLY_NS=$((10#$t * 1000))
  else
    REPLY_NS=$(date +%s%N)
  fi
}

time_cmd() {  # label, then the command; prints one row
  local label=$1; shift
  "$@" >/dev/null 2>&1 || { echo "error: '$*' failed" >&2; exit 1; }  # warm-up (page cache)
  local total=0 min= max=0 t0 t1 dt
  for ((i = 0; i < N; i++)); do
    now_ns; t0=$REPLY_NS
    "$@" >/dev/null 2>&1
    now_ns; t1=$REPLY_NS
    dt=$((t1 - t0))
    total=$((total + dt))
    if [[ -z $min || $dt -lt $min ]]; then min=$dt; fi
    if [[ $dt -gt $max ]]; then max=$dt; fi
  done
  LAST_MIN_NS=$min
  local rss="-"
  if [[ -x /usr/bin/time ]]; then  # peak RSS of one run, in KiB (GNU time %M)
    local f; f=$(mktemp)
    /usr/bin/time -f %M -o "$f" "$@" >/dev/null 2>&1
    rss=$(awk '{ k = $1 } END { printf "%.1f", k / 1024 }' "$f")
    rm -f "$f"
  fi
  awk -v l="$label" -v n="$N" -v t="$total" -v mn="$min" -v mx="$max" -v r="$rss" \
    'BEGIN { printf "%-58s %5d %9.2f %9.2f %9.2f %9s\n", l, n, t / n / 1e6, mn / 1e6, mx / 1e6, r }'
}

printf "%-58s %5s %9s %9s %9s %9s\n" "command" "runs" "mean ms" "min ms" "max ms" "RSS MiB"
time_cmd "kvplan --gpu 24GB --model qwen2.5-coder-32b --task agentic" \
  "$KVPLAN" --gpu 24GB --model qwen2.5-coder-32b --task agentic
MISSION_MIN_NS=$LAST_MIN_NS
time_cmd "  same, --json" \
  "$KVPLAN" --gpu 24GB --model qwen2.5-coder-32b --task agentic --json
time_cmd "  same, --backend cpu (reserve-graph compute model)" \
  "$KVPLAN" --gpu 24GB --model qwen2.5-coder-32b --task agentic --backend cpu
time_cmd "kvplan models" "$KVPLAN" models
time_cmd "kvplan --version (start-up: libraries, built-in catalog)" "$KVPLAN" --version
VERSION_MIN_NS=$LAST_MIN_NS
time_cmd "/bin/true (process spawn floor)" /bin/true
# Issue 20's start-up target: the mission within 5x of --version (fastest runs, the least disturbed on a shared machine).
awk -v m="$MISSION_MIN_NS" -v v="$VERSION_MIN_NS" 'BEGIN { printf "mission / --version (min): %.1fx\n", m / v }'
