#!/bin/sh
# tests/bare_machine.sh — README's two commands on a bare machine: a minimal
# Debian chroot with only gcc, make and python3 (what `apt-get install gcc
# make python3` brings, Recommends included: libc6-dev), the committed tree
# copied in (git archive: no build/, no untracked files), then `make test`
# and the README run command. Every optional part (liburing, libnuma,
# libmicrohttpd, wine, qemu, clang, a browser, nvcc, the Python client
# packages) must say SKIP there; a failure is a hidden install step.
#
#   sudo sh tests/bare_machine.sh [ROOT]     (ROOT: the chroot, default /var/tmp/colibri-bare)
#
# Needs root, debootstrap and a Debian mirror; never part of `make test`.
# The chroot is kept and reused (debootstrap runs once); the tree in it is
# replaced each run. Environment:
#   SUITE=bookworm  MIRROR=http://deb.debian.org/debian  COMMIT=HEAD
#   INSTALL="libmicrohttpd-dev ..."  extra packages for this run (a partly
#                   equipped machine); purged again afterwards
#   TARGET="test"   the make target (e.g. "test" or "sanitize")
# Logs: ROOT/root/make-test.log, ROOT/root/run.log. Exit status 0 when both
# commands passed. Nothing stays mounted afterwards.
# shellcheck disable=SC2016,SC2086  # $t expands in the chroot's shell; $ENV is words
set -eu
ROOT=${1:-/var/tmp/colibri-bare}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
COMMIT=${COMMIT:-HEAD}
INSTALL=${INSTALL:-}
TARGET=${TARGET:-test}
REPO=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "bare_machine.sh: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "bare_machine.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
command -v git >/dev/null || { echo "bare_machine.sh: needs git" >&2; exit 2; }

if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    echo "== debootstrap --variant=minbase $SUITE $ROOT $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR"
fi

MOUNTED=""
cleanup() {
    for m in $MOUNTED; do umount "$m" || umount -l "$m"; done  # innermost first
    MOUNTED=""
    if [ -n "$INSTALL" ]; then
        chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
            "apt-get -o Dpkg::Use-Pty=0 purge -y -qq $INSTALL >/dev/null && apt-get -o Dpkg::Use-Pty=0 autoremove --purge -y -qq >/dev/null" || true
        INSTALL=""
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for m in proc dev dev/shm; do
    mkdir -p "$ROOT/$m"
    if ! mountpoint -q "$ROOT/$m"; then
        if [ "$m" = proc ]; then mount -t proc proc "$ROOT/proc"; else mount --bind "/$m" "$ROOT/$m"; fi
        MOUNTED="$ROOT/$m $MOUNTED"
    fi
done
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true

echo "== apt-get install gcc make python3 $INSTALL"
chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    "apt-get update -qq && apt-get -o Dpkg::Use-Pty=0 install -y -qq gcc make python3 $INSTALL >/dev/null"
# bare means bare: none of the optional tools or headers (unless INSTALL asked)
chroot "$ROOT" /bin/sh -c 'for t in clang clang-16 nvcc wine qemu-aarch64 aarch64-linux-gnu-gcc x86_64-w64-mingw32-gcc chromium chromedriver pip3; do
    command -v $t >/dev/null && echo "note: $t is installed in the chroot"; done
    for h in liburing.h numa.h microhttpd.h; do [ -e /usr/include/$h ] && echo "note: /usr/include/$h is installed in the chroot"; done
    python3 -c "import openai" 2>/dev/null && echo "note: the openai package is installed in the chroot"; true'

echo "== the tree at $COMMIT into $ROOT/root/colibri"
rm -rf "$ROOT/root/colibri"
mkdir -p "$ROOT/root/colibri"
git -C "$REPO" archive "$COMMIT" | tar -x -C "$ROOT/root/colibri"

ENV="/usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
echo "== make $TARGET (log: $ROOT/root/make-test.log)"
start=$(date +%s)
set +e
chroot "$ROOT" $ENV /bin/sh -c "cd /root/colibri && make $TARGET" >"$ROOT/root/make-test.log" 2>&1
rc=$?
set -e
echo "make $TARGET: exit status $rc in $(( $(date +%s) - start )) s"
sed -n '/^== summary/,$p' "$ROOT/root/make-test.log"
[ $rc = 0 ] || grep -E "^== .* FAILED|^(FAIL|ERROR):|error:" "$ROOT/root/make-test.log" | head -40

echo "== README's run command (log: $ROOT/root/run.log)"
set +e
chroot "$ROOT" $ENV /bin/sh -c 'cd /root/colibri && make && PROMPT="Write a haiku about disks" ./colibri tests/fixtures/tiny-glm5' >"$ROOT/root/run.log" 2>&1
rrc=$?
set -e
tail -n 12 "$ROOT/root/run.log"
echo "run command: exit status $rrc"
[ $rc = 0 ] && [ $rrc = 0 ]
