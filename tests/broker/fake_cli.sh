#!/bin/sh
# A stand-in for a CLI that acts with a user's credentials (lark-cli and the
# like): it prints what the credential broker gave it.
echo "args: $*"
echo "token=${FAKE_TOKEN:-none}"
echo "dir=${FAKE_DIR:-none}"
echo "cwd=$(pwd)"
echo "sandbox_env=${HOSTNAME:-unset}"
case "$1" in
echo) cat ;;
big) head -c 5000000 /dev/zero | tr '\0' a ;;
sleep) echo $$ >> "$FAKE_PIDFILE"; exec sleep 300 ;;
fail) echo "failing on purpose" >&2; exit 3 ;;
esac
