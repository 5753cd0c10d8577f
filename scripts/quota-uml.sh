#!/usr/bin/env bash
# Runs the ext4 and XFS project quota tests (tests/unit/test_quota.c and
# tests/escape/test_escape_quota.c) under Debian's user-mode-linux kernel, for
# hosts whose own kernel cannot mount those filesystems with project quotas
# (built without CONFIG_QFMT_V2 or CONFIG_XFS_QUOTA), where `make test` skips
# them. The UML kernel has both; it boots with this host's root filesystem
# read-only (hostfs) and a fresh /tmp, so the tests make their filesystems as
# they do on a host.
#
#   scripts/quota-uml.sh [BUILD_DIR]     default BUILD_DIR: build-uml
#
# Needs root and the user-mode-linux and kmod packages (installed when
# missing). BUILD_DIR is a build without sanitizers (AddressSanitizer cannot
# place its shadow memory in a UML process); it is set up when missing.
# Exits 0 when every test passed.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$src/build-uml}")
# UML's own memory: the tests' filesystems (up to 320 MiB each) live in its /tmp.
UML_MEM=3G
# A hung guest is killed after this long.
UML_TIMEOUT_S=1800

[ "$(id -u)" -eq 0 ] || { echo "quota-uml: needs root" >&2; exit 2; }
missing=()
for p in user-mode-linux kmod; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -d "$build" ] || meson setup "$build" "$src" -Db_sanitize=none >/dev/null
# A failed build shows why (ninja prints its errors on stdout).
ninja -C "$build" fawn tests/test_quota tests/test_escape_quota tests/escape_probe | tail -n 40

work=$(mktemp -d /tmp/fawn-quota-uml-XXXXXX)
trap 'rm -rf "$work"' EXIT
modules=$(ls -d /usr/lib/uml/modules/*/kernel | head -1)

cat >"$work/init" <<EOF
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs run /run
mkdir /run/build /run/work
mount --bind "$build" /run/build
mount -t hostfs -o "$work" work /run/work
mount -t tmpfs tmp /tmp
for m in fs/quota/quota_tree fs/quota/quota_v2 drivers/block/loop; do insmod "$modules/\$m.ko"; done
export FAWN_BIN=/run/build/fawn FAWN_ESCAPE_PROBE=/run/build/tests/escape_probe
cd "$src"
failed=0
for kind in ext4 xfs; do
  for t in test_quota test_escape_quota; do
    echo "== \$t \$kind"
    /run/build/tests/\$t \$kind || failed=1
  done
done >/run/work/log 2>&1
echo \$failed >/run/work/failed
poweroff -f
EOF
chmod 0755 "$work/init"

echo 1 >"$work/failed"
timeout "$UML_TIMEOUT_S" linux.uml mem="$UML_MEM" root=/dev/root rootfstype=hostfs rootflags=/ ro \
  init="$work/init" con0=null,fd:1 con=null >"$work/console" 2>&1 || true
cat "$work/log" 2>/dev/null || tail -40 "$work/console"
# Under UML every kind can be made: a skip is a failure here.
if [ "$(cat "$work/failed")" != 0 ] || grep -q '# SKIP' "$work/log"; then
  echo "quota-uml: FAILED" >&2
  exit 1
fi
echo "quota-uml: ext4 and XFS project quota tests passed under $(basename "$(dirname "$modules")") (UML)"
