#!/bin/sh
# run_arm_engine.sh — cross-compiles the engine for aarch64 (portable
# armv8-a, without the optional libraries) and runs the oracle self-test on
# every fixture under qemu-user at each NEON kernel level, with IDOT on and
# off. Run from the repository root.
# Needs: apt-get install -y gcc-aarch64-linux-gnu qemu-user
set -e
CC=${ARM_CC:-aarch64-linux-gnu-gcc}
QEMU=${ARM_QEMU:-qemu-aarch64}
SYSROOT=${ARM_SYSROOT:-/usr/aarch64-linux-gnu}
if ! command -v "$CC" >/dev/null 2>&1 || ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "run_arm_engine.sh: skipped: no cross compiler ($CC) or $QEMU"
    exit 0
fi
mkdir -p build/arm
"$CC" -std=c11 -O2 -fopenmp -ffp-contract=off -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -march=armv8-a \
    -o build/arm/colibri colibri.c -lm -lpthread
for fx in tests/fixtures/*/ref.json; do
    dir=$(dirname "$fx")
    for level in neon neon-dotprod neon-i8mm; do
        for idot in 1 0; do
            out=$(SIMD=$level IDOT=$idot USAGE_SAVE=0 THREADS=2 "$QEMU" -cpu max -L "$SYSROOT" build/arm/colibri "$dir" 2>/dev/null) || {
                echo "run_arm_engine.sh: $dir SIMD=$level IDOT=$idot failed: $out"; exit 1; }
            case "$out" in *PASS) ;; *) echo "run_arm_engine.sh: $dir SIMD=$level IDOT=$idot: $out"; exit 1 ;; esac
        done
    done
    echo "run_arm_engine.sh: $dir passes the oracle at neon, neon-dotprod, neon-i8mm (IDOT on and off) under qemu"
done
