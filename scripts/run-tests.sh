#!/usr/bin/env bash
# Builds fawn with AddressSanitizer and UndefinedBehaviorSanitizer and runs
# every test: the format check, a short run of each fuzzer, then the unit,
# integration and escape suites and the end-to-end tests; the tests that use
# a store, on SQLite and again on PostgreSQL (a throwaway server of
# scripts/pg-test-server.sh). The last line counts every test case.
# Usage: scripts/run-tests.sh [BUILD_DIR] [FUZZ_BUILD_DIR]
# FAWN_TEST_JOBS: how many test programs (fuzzers, unit programs, e2e files)
# run at a time; one per core by default (twice that for the unit and e2e
# tests, which wait on timers and sockets as much as they compute).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
fuzz_build=${2:-build-fuzz}
jobs=${FAWN_TEST_JOBS:-$(nproc)}

# Every C file as .clang-format says (make format rewrites them).
bash scripts/check-format.sh

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C "$build"
# The optimized build `make run` uses: -O3 without sanitizers warns of
# things the sanitized build does not (-Werror).
if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release -Db_ndebug=false >/dev/null
fi
ninja -C build fawn

# Each fuzzer for a short while on its seeds; a crash fails the run.
FAWN_FUZZ_JOBS=$jobs bash scripts/fuzz.sh "$fuzz_build" "${FAWN_FUZZ_SECONDS:-5}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
# Unit programs run side by side, the integration and escape programs (real
# sandboxes, mounts) one at a time; the *_pg programs on PostgreSQL.
meson test -C "$build" --print-errorlogs --num-processes "$((2 * jobs))" || status=$?

# This kernel may lack ext4/XFS project quotas (their quota tests then skip:
# the mount fails): run those under Debian's user-mode-linux kernel, which
# has them, meanwhile the end-to-end tests run (a guest of one CPU).
uml_pid=
if grep -qE '^1\.\.0 # SKIP (ext4|xfs) with project quotas: mount' "$build/meson-logs/testlog.txt"; then
  bash scripts/quota-uml.sh build-uml >"$build/quota-uml.txt" 2>&1 &
  uml_pid=$!
fi

# End-to-end: `fawn serve` (the sanitized build) driven by real clients,
# several files at a time (each owns its homes, ports and databases), once
# on SQLite and once on PostgreSQL (every gateway a database of its own:
# tests/e2e/lib/server.mjs).
npm ci --prefix tests/e2e --no-audit --no-fund --loglevel=error
# A test or hook that hangs fails with its own name after 5 minutes
# (tests/e2e/lib/test.mjs), showing the logs of the fawn processes still
# running. Node 20 applies --test-timeout to each file as a whole, ending it
# under the file's name only: it is the backstop for a file that never ends.
# Usage: e2e STORE FILES... runs FILES with FAWN_E2E_STORE=STORE (on
# PostgreSQL under scripts/pg-test-server.sh), into $build/e2e-STORE-tap.txt.
e2e() {
  local store=$1 log="$build/e2e-$1-tap.txt" server=()
  shift
  [ "$store" = postgres ] && server=(bash scripts/pg-test-server.sh run)
  "${server[@]}" env FAWN_E2E_STORE="$store" FAWN_BIN="$PWD/$build/fawn" node --test \
    --test-concurrency="$((2 * jobs))" --test-timeout=1800000 --test-reporter=tap \
    "$@" >"$log" 2>&1 ||
    { status=1; echo "e2e on $store:"; grep -B2 -A25 '^ *not ok' "$log" | head -n 200; }
}
# Files that start PostgreSQL databases of their own (several gateways on
# one store: tests/e2e/lib/pg.mjs) are the same on either pass: they run on
# the PostgreSQL pass only.
mapfile -t sqlite_files < <(grep -L "from './lib/pg.mjs'" tests/e2e/*.test.mjs)
e2e sqlite "${sqlite_files[@]}"
e2e postgres tests/e2e/*.test.mjs

if [ -n "$uml_pid" ]; then
  if wait "$uml_pid"; then
    tail -n 1 "$build/quota-uml.txt"
  else
    status=1
    tail -n 60 "$build/quota-uml.txt"
  fi
fi

# Every test case of every program, from their TAP output.
log="$build/meson-logs/testlog.txt"
passed=$(grep -cE '^ok [0-9]+ ' "$log" || true)
failed=$(grep -cE '^not ok [0-9]+ ' "$log" || true)
for store in sqlite postgres; do
  e2e_log="$build/e2e-$store-tap.txt"
  e2e_passed=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$e2e_log" | tail -n 1)
  e2e_failed=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$e2e_log" | tail -n 1)
  passed=$((passed + ${e2e_passed:-0}))
  failed=$((failed + ${e2e_failed:-0}))
done
echo "$passed passed, $failed failed"
exit "$status"
