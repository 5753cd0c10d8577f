#!/usr/bin/env bash
# Builds fawn with AddressSanitizer and UndefinedBehaviorSanitizer and runs
# every test: the format check, a short run of each fuzzer, then the unit,
# integration and escape suites and the end-to-end tests. The last line
# counts every test case.
# Usage: scripts/run-tests.sh [BUILD_DIR] [FUZZ_BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-asan}
fuzz_build=${2:-build-fuzz}

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
bash scripts/fuzz.sh "$fuzz_build" "${FAWN_FUZZ_SECONDS:-8}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
meson test -C "$build" --print-errorlogs || status=$?

# This kernel may lack ext4/XFS project quotas (their quota tests then skip:
# the mount fails): run those under Debian's user-mode-linux kernel, which
# has them.
if grep -qE '^1\.\.0 # SKIP (ext4|xfs) with project quotas: mount' "$build/meson-logs/testlog.txt"; then
  if bash scripts/quota-uml.sh build-uml >"$build/quota-uml.txt" 2>&1; then
    tail -n 1 "$build/quota-uml.txt"
  else
    status=1
    tail -n 60 "$build/quota-uml.txt"
  fi
fi

# End-to-end: `fawn serve` (the sanitized build) driven by real clients.
npm ci --prefix tests/e2e --no-audit --no-fund --loglevel=error
e2e_log="$build/e2e-tap.txt"
# A test or hook that hangs fails with its own name after 5 minutes
# (tests/e2e/lib/test.mjs), showing the logs of the fawn processes still
# running. Node 20 applies --test-timeout to each file as a whole, ending it
# under the file's name only: it is the backstop for a file that never ends.
FAWN_BIN="$PWD/$build/fawn" node --test --test-timeout=1800000 --test-reporter=tap tests/e2e/*.test.mjs >"$e2e_log" 2>&1 ||
  { status=1; grep -B2 -A25 '^ *not ok' "$e2e_log" | head -n 200; }

# Every test case of every program, from their TAP output.
log="$build/meson-logs/testlog.txt"
passed=$(grep -cE '^ok [0-9]+ ' "$log" || true)
failed=$(grep -cE '^not ok [0-9]+ ' "$log" || true)
e2e_passed=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$e2e_log" | tail -n 1)
e2e_failed=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$e2e_log" | tail -n 1)
passed=$((passed + ${e2e_passed:-0}))
failed=$((failed + ${e2e_failed:-0}))
echo "$passed passed, $failed failed"
exit "$status"
