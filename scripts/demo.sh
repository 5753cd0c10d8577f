#!/usr/bin/env bash
# fawn's main job on its embedded defaults: run commands in a thread's
# sandbox. Usage: scripts/demo.sh PATH_TO_FAWN
set -euo pipefail
fawn=$1
export FAWN_HOME=${FAWN_HOME:-$PWD/.fawn}

run() {
  echo "\$ fawn sandbox exec --user demo --thread hello $*"
  "$fawn" sandbox exec --user demo --thread hello "$@"
}

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
