#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS on a
# scratch copy of its seed corpus. Usage: scripts/fuzz.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}

if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" -Dfuzz=true -Db_lundef=false --buildtype=debugoptimized >/dev/null
fi
ninja -C "$build"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for target in "$build"/tests/fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  mkdir -p "$work/$name"
  seeds="tests/fuzz/corpus/${name#fuzz_}"
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work/$name"/
  echo "fuzz: $name for ${seconds}s"
  "$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/" "$work/$name" >"$work/$name.log" 2>&1 || {
    tail -n 40 "$work/$name.log"
    echo "fuzz: $name FAILED" >&2
    exit 1
  }
  grep -E '^Done [0-9]+ runs' "$work/$name.log" | sed "s/^/fuzz: $name: /"
done
