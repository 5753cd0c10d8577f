#!/usr/bin/env bash
# fawn's main job on its embedded defaults: a thread's sandbox, then the
# gateway (fawn serve) on 127.0.0.1:8001 with a short walk through its API
# and an agent run (the built-in demo model) watched with `fawn chat`, left
# running until Ctrl-C with the web UI's address and the admin's password
# printed. Usage: scripts/demo.sh PATH_TO_FAWN
set -euo pipefail
fawn=$1
export FAWN_HOME=${FAWN_HOME:-$PWD/.fawn}
api=http://127.0.0.1:8001

run() {
  echo "\$ fawn sandbox exec --user demo --thread hello $*"
  "$fawn" sandbox exec --user demo --thread hello "$@"
}

sandbox_demo() {
  run -- 'echo "hello from $(hostname), running as $(id -un) with no capabilities:"; grep Cap[EP] /proc/self/status'
  run -- 'ps ax; ls /mnt/user-data'
  run --session demo -- 'cd /tmp && export GREETING="state persists in a session"'
  run --session demo -- 'echo "$GREETING (cwd: $PWD)"'
  run -- 'echo "a file from inside the sandbox" > /mnt/user-data/outputs/hello.txt'
  run -- 'cat /etc/shadow || echo "(the host is out of reach)"'
  echo
  echo "The thread's files are on the host under $FAWN_HOME/users/demo/threads/hello/user-data:"
  cat "$FAWN_HOME/users/demo/threads/hello/user-data/outputs/hello.txt"
  "$fawn" sandbox stop --user demo --thread hello
}

show() {
  echo "\$ curl $*"
  curl -sS --fail-with-body -b "$jar" -c "$jar" "$@"
  echo
}

# Signs in as the demo admin, creating it (with a password kept in
# $FAWN_HOME/demo-admin.password, mode 0600) on the first run.
sign_in() {
  local password_file=$FAWN_HOME/demo-admin.password
  if [ ! -f "$password_file" ]; then
    (umask 077 && head -c 18 /dev/urandom | base64 >"$password_file")
    show -X POST "$api/api/v1/auth/initialize" -H 'Content-Type: application/json' \
      -d "{\"username\":\"admin\",\"password\":\"$(cat "$password_file")\"}"
  else
    show -X POST "$api/api/v1/auth/login/local" --data-urlencode username=admin \
      --data-urlencode "password=$(cat "$password_file")"
  fi
  csrf=$(awk '$6 == "csrf_token" { print $7 }' "$jar")
}

gateway_demo() {
  show "$api/api/v1/auth/setup-status"
  sign_in
  show -X POST "$api/api/threads" -H "X-CSRF-Token: $csrf" -d '{"thread_id":"hello-api"}'
  echo "hello from an upload" >"$work/notes.txt"
  show -X POST "$api/api/threads/hello-api/uploads" -H "X-CSRF-Token: $csrf" -F "files=@$work/notes.txt"
  show "$api/api/threads/hello-api/artifacts/mnt/user-data/uploads/notes.txt"
  echo "\$ curl $api/api/threads/hello-api/artifacts/mnt/user-data/%2e%2e/%2e%2e/etc/passwd"
  curl -sS -b "$jar" --path-as-is "$api/api/threads/hello-api/artifacts/mnt/user-data/%2e%2e/%2e%2e/etc/passwd"
  echo
}

# An API token for `fawn chat`, kept in $FAWN_HOME/demo-chat.token (0600)
# and made again when the gateway no longer knows it.
chat_token() {
  local token_file=$FAWN_HOME/demo-chat.token
  if [ ! -s "$token_file" ] ||
    ! curl -sf -H "Authorization: Bearer $(cat "$token_file")" "$api/api/v1/auth/me" >/dev/null; then
    (umask 077 && curl -sS --fail-with-body -b "$jar" -X POST "$api/api/v1/auth/tokens" \
      -H "X-CSRF-Token: $csrf" -H 'Content-Type: application/json' -d '{"name":"demo-chat"}' |
      sed -n 's/.*"token":"\(fawn_[0-9a-f]*\)".*/\1/p' >"$token_file")
  fi
  cat "$token_file"
}

chat_demo() {
  export FAWN_API_TOKEN
  FAWN_API_TOKEN=$(chat_token)
  echo "\$ fawn chat --thread hello-api 'What did I upload?'"
  "$fawn" chat --thread hello-api 'What did I upload?'
}

sandbox_demo
echo
work=$(mktemp -d)
jar=$work/cookies
"$fawn" serve &
serve=$!
trap 'kill $serve 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf "$api/health" >/dev/null && break; sleep 0.1; done
gateway_demo
echo
chat_demo
echo
echo "fawn serve is listening on $api (docs/http-api.md)."
echo "Open the web UI at $api/ and sign in as admin with the password"
echo "  $(cat "$FAWN_HOME/demo-admin.password")"
echo "(kept in $FAWN_HOME/demo-admin.password). Talk to the agent from another terminal:"
echo "  FAWN_API_TOKEN=\$(cat $FAWN_HOME/demo-chat.token) $fawn chat 'your message'"
echo "(the built-in demo model plays a fixed script; configure models: in config.yaml"
echo "for a real one). Ctrl-C stops it."
wait "$serve"
