#!/usr/bin/env bash
# The suite on a loaded machine: clones this checkout's HEAD afresh, then
# runs the README's test command (make test) RUNS times in a row while HOGS
# CPU-bound processes run beside it. Stops at the first failing run; the
# last line says how many runs passed. Usage: scripts/soak.sh [RUNS] [HOGS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
hogs=${2:-2}
work=$(mktemp -d /tmp/fawn-soak-XXXXXX)
git clone -q "$PWD" "$work/fawn"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for _ in $(seq "$hogs"); do
  sh -c 'while :; do :; done' &
  pids+=($!)
done
passed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  if (cd "$work/fawn" && make test) >"$work/run-$i.log" 2>&1; then
    passed=$((passed + 1))
    echo "soak: run $i passed in $(($(date +%s) - start)) s: $(tail -n 1 "$work/run-$i.log")"
  else
    echo "soak: run $i FAILED after $(($(date +%s) - start)) s (log: $work/run-$i.log)"
    tail -n 60 "$work/run-$i.log"
    break
  fi
done
echo "soak: $passed of $runs runs passed with $hogs CPU-bound processes beside them"
[ "$passed" -eq "$runs" ]
