#!/bin/sh
# run_arm.sh — builds the aarch64 flavour (make arm-build: build/arm, portable
# armv8-a without the optional libraries, so dispatch must reach dotprod and
# i8mm through target attributes) and runs under qemu-user with every CPU
# feature on: the kernel tests, then the oracle self-test on every fixture at
# the neon, neon-dotprod and neon-i8mm levels (the trained fixtures at
# neon-i8mm), IDOT on and off, and MTP drafting. tests/run.py then runs the other C tests, end-to-end tests and
# tests/xtokens.py on the same build. Run from the repository root.
# Needs: apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
set -e
CC=${ARM_CC:-aarch64-linux-gnu-gcc}
QEMU=${ARM_QEMU:-qemu-aarch64}
SYSROOT=${ARM_SYSROOT:-/usr/aarch64-linux-gnu}
if ! command -v "$CC" >/dev/null 2>&1 || ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "SKIP aarch64: no cross compiler ($CC) or no $QEMU (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)"
    exit 0
fi
checks=0
make --no-print-directory -j"$(nproc 2>/dev/null || echo 2)" arm-build ARM_CC="$CC"
FLAGS="-std=c11 -fopenmp -ffp-contract=off -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -I."
# the kernels must also build where the compiler already has the features
"$CC" $FLAGS -O2 -march=armv8.2-a+dotprod -c -o build/arm/neon_dot.o kernels/arm_neon.c
"$CC" $FLAGS -O2 -march=armv8.6-a+i8mm -c -o build/arm/neon_i8mm.o kernels/arm_neon.c
out=$("$QEMU" -cpu max -L "$SYSROOT" build/arm/test_quant) || { echo "$out"; exit 1; }
echo "$out"
for l in neon neon-dotprod neon-i8mm; do
    echo "$out" | grep -q "^level $l *ok" || { echo "run_arm.sh: level $l was not exercised"; exit 1; }
    checks=$((checks + 1))
done
echo "run_arm.sh: neon, neon-dotprod, neon-i8mm ok under qemu"

for fx in tests/fixtures/*/ref.json; do
    dir=$(dirname "$fx")
    levels="neon neon-dotprod neon-i8mm"
    # the trained fixtures (4-5 s a run here) repeat tiny-glm5's and tiny-dsv3's
    # architectures, which run at every level: their learned weights at one
    case "$dir" in */trained-*) levels="neon-i8mm" ;; esac
    for level in $levels; do
        for idot in 1 0; do
            out=$(SIMD=$level IDOT=$idot USAGE_SAVE=0 THREADS=2 "$QEMU" -cpu max -L "$SYSROOT" build/arm/colibri "$dir" 2>/dev/null) || {
                echo "run_arm.sh: $dir SIMD=$level IDOT=$idot failed: $out"; exit 1; }
            case "$out" in *"-- PASS"*) ;; *) echo "run_arm.sh: $dir SIMD=$level IDOT=$idot: $out"; exit 1 ;; esac
            checks=$((checks + 1))
        done
    done
    echo "run_arm.sh: $dir passes the oracle at $(echo $levels | sed 's/ /, /g') (IDOT on and off) under qemu"
done
# speculative decoding: greedy tokens with MTP drafts equal plain decoding's
ids() { PROMPT="drafts under qemu" TEMP=0 NGEN=24 TOKENS=1 USAGE_SAVE=0 THREADS=2 SIMD=neon-i8mm DRAFT=$1 \
        "$QEMU" -cpu max -L "$SYSROOT" build/arm/colibri tests/fixtures/tiny-glm5-mtp 2>&1 >/dev/null | grep "generated tokens"; }
plain=$(ids 0) && spec=$(ids 3) || { echo "run_arm.sh: speculative run failed"; exit 1; }
[ -n "$plain" ] && [ "$plain" = "$spec" ] || { echo "run_arm.sh: DRAFT=3 gave other tokens than DRAFT=0: $plain / $spec"; exit 1; }
checks=$((checks + 1))
echo "run_arm.sh: DRAFT=3 greedy tokens equal DRAFT=0's under qemu"

echo "run_arm.sh: $checks checks passed, 0 skipped"
