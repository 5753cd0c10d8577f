#!/usr/bin/env bash
# Installs the Debian packages fawn needs to build, test and benchmark.
# Idempotent: does nothing (and prints nothing) when all are present.
set -euo pipefail

PACKAGES=(
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev clang-format-14
  libjansson-dev libyaml-dev libseccomp-dev libsodium-dev libpcre2-dev
  libcmocka-dev libsqlite3-dev libpq-dev postgresql libmicrohttpd-dev libcurl4-openssl-dev libarchive-dev libgumbo-dev libwebsockets-dev
  bubblewrap python3 curl openssl util-linux iproute2 procps strace
  btrfs-progs xfsprogs e2fsprogs
  libjs-marked node-dompurify chromium tzdata
  libssl-dev
  podman runc
)
# strace: tests/e2e/read_path.test.mjs sees artifacts leave through sendfile.
# libpq-dev: the store's PostgreSQL backend; postgresql: the server the
# tests start in a temporary directory (scripts/pg-test-server.sh).
# libssl-dev: libcrypto's AES for decrypting Feishu/Lark event callbacks.
# podman and runc: the container provider's tests run a Docker-compatible
# engine (podman system service) with the runc runtime.
# tzdata: the time zones scheduled tasks run in (src/schedule reads its
# TZif files).
# btrfs-progs, xfsprogs and e2fsprogs make the filesystems the disk quota
# tests mount (tests/quota_fs.h).
# The end-to-end tests run on Node.js (20 or later preferred) with npm;
# an already installed Node (e.g. from NodeSource, which bundles npm) is kept.
command -v node >/dev/null && command -v npm >/dev/null || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
