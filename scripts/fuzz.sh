#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS on a
# scratch copy of its seed corpus, one per core at a time (FAWN_FUZZ_JOBS).
# Usage: scripts/fuzz.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}

targets="fuzz_http_head fuzz_box_request fuzz_vpath fuzz_config fuzz_jwt fuzz_multipart fuzz_range
  fuzz_form fuzz_sse fuzz_run_input fuzz_box_reply fuzz_model_stream fuzz_remote_output
  fuzz_thread_search fuzz_gateway_headers fuzz_upload_names
  fuzz_tool_replies fuzz_box_files fuzz_web_headers fuzz_thread_view fuzz_skill_front_matter
  fuzz_replay fuzz_memory_facts fuzz_skill_archive fuzz_html_text fuzz_search_reply
  fuzz_egress_request fuzz_egress_sni fuzz_cron fuzz_tzif fuzz_mcp_message fuzz_mcp_sse_endpoint
  fuzz_kube_reply fuzz_attest_request fuzz_broker_request
  fuzz_dingtalk_frame fuzz_dingtalk_message fuzz_channel_stored
  fuzz_feishu_callback fuzz_feishu_replies fuzz_container_reply"
if [ ! -f "$build/build.ninja" ]; then
  # The whole library gets coverage instrumentation, so the fuzzers see into
  # the parsers they drive, not only into their own entry points.
  CC=clang meson setup "$build" -Dfuzz=true -Db_lundef=false --buildtype=debugoptimized \
    -Db_sanitize=address,undefined -Dc_args=-fsanitize=fuzzer-no-link >/dev/null
fi
ninja -C "$build" $(for t in $targets; do echo "tests/fuzz/$t"; done)

# Undefined behaviour is a crash, as memory errors are.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs one fuzzer on a scratch copy of its seeds; its output goes to
# $work/NAME.log. Answers the fuzzer's status.
fuzz_one() {
  local name=$1 target="$build/tests/fuzz/$1" seeds="tests/fuzz/corpus/${1#fuzz_}"
  mkdir -p "$work/$name"
  if [ -d "$seeds" ]; then cp -r "$seeds"/. "$work/$name"/; fi
  "$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/$name-" "$work/$name" >"$work/$name.log" 2>&1 || return 1
  grep -E '^Done [0-9]+ runs' "$work/$name.log" | sed "s/^/fuzz: $name: /"
}

# FAWN_FUZZ_JOBS fuzzers at a time (one per core by default). After a
# failure no other starts; those running finish, then every failed one is
# named with the end of its log.
jobs=${FAWN_FUZZ_JOBS:-$(nproc)}
running=0
failed=0
for name in $targets; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  [ "$failed" = 0 ] || break
  echo "fuzz: $name for ${seconds}s"
  { fuzz_one "$name" || { touch "$work/$name.failed"; exit 1; }; } &
  running=$((running + 1))
done
wait
for flag in "$work"/*.failed; do
  [ -e "$flag" ] || continue
  name=$(basename "$flag" .failed)
  tail -n 40 "$work/$name.log"
  echo "fuzz: $name FAILED" >&2
  failed=1
done
exit "$failed"
