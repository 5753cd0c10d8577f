#!/usr/bin/env bash
# Builds the root filesystem of the container provider's image as a tar,
# with no network: the fawn binary, the shell tools agents' commands use
# (bash, coreutils, grep, sed, find, ...), the shared libraries of each
# (as ldd lists them) and a minimal /etc. Import it into the engine with
#   podman import --change 'ENTRYPOINT ["/usr/bin/fawn"]' OUT.tar fawn-box:latest
# (or `docker import`); sandbox.container.image names it (docs/container.md).
# Usage: scripts/build-box-image.sh FAWN_BIN OUT.tar [EXTRA_PROGRAM...]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 FAWN_BIN OUT.tar [EXTRA_PROGRAM...]" >&2; exit 2; }
fawn_bin=$(realpath "$1")
out=$2
shift 2

# What a command in the sandbox can run besides what it brings in its
# workspace: a POSIX shell and the usual text tools.
tools=(bash sh cat ls cp mv rm mkdir rmdir ln touch chmod echo printf test head tail wc
  sort uniq cut tr tee env id pwd date sleep true false basename dirname readlink realpath
  stat du df find xargs grep sed awk diff cmp od base64 sha256sum md5sum tar gzip
  uname whoami seq expr yes timeout mktemp "$@")

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

# Copies a file to the same path under root, following symlinks.
place() {
  local src=$1 dst=$root$1
  mkdir -p "$(dirname "$dst")"
  [ -e "$dst" ] || cp -L "$src" "$dst"
}

# A program and the libraries ldd says it loads (the loader included).
place_program() {
  local prog=$1 dst=$2
  mkdir -p "$(dirname "$root$dst")"
  cp -L "$prog" "$root$dst"
  ldd "$prog" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do place "$lib"; done
}

mkdir -p "$root"/{usr/bin,etc,proc,dev,sys,tmp,run/fawn,mnt/user-data,mnt/skills}
# Debian's merged /usr: /bin, /lib and /lib64 lead into /usr.
for d in bin lib lib64 sbin; do [ -e "$root/$d" ] || ln -s "usr/$d" "$root/$d"; done
mkdir -p "$root"/usr/{lib,lib64,sbin}
place_program "$fawn_bin" /usr/bin/fawn
for t in "${tools[@]}"; do
  p=$(command -v "$t" 2>/dev/null || true)
  case $p in /*) place_program "$p" "/usr/bin/$t" ;; esac
done

cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
P
cat >"$root/etc/group" <<'G'
root:x:0:
nogroup:x:65534:
G
echo 'hosts: files' >"$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
chmod 755 "$root"
chmod 1777 "$root/tmp"

tar --numeric-owner --owner=0 --group=0 -C "$root" -cf "$out" .
echo "$out"
