#!/bin/sh
# run_arm.sh — cross-compiles tests/test_quant.c for aarch64 (portable
# armv8-a, so dispatch must reach dotprod and i8mm through target attributes)
# and runs it under qemu-user with every CPU feature on, exercising the neon,
# neon-dotprod and neon-i8mm levels. Run from the repository root.
# Needs: apt-get install -y gcc-aarch64-linux-gnu qemu-user
set -e
CC=${ARM_CC:-aarch64-linux-gnu-gcc}
QEMU=${ARM_QEMU:-qemu-aarch64}
SYSROOT=${ARM_SYSROOT:-/usr/aarch64-linux-gnu}
if ! command -v "$CC" >/dev/null 2>&1 || ! command -v "$QEMU" >/dev/null 2>&1; then
    echo "run_arm.sh: skipped: no cross compiler ($CC) or $QEMU"
    exit 0
fi
mkdir -p build/arm
FLAGS="-std=c11 -fopenmp -ffp-contract=off -Wall -Wextra -Werror -Wno-format-truncation -D_GNU_SOURCE -I."
# the header must also build where the compiler already has the features
"$CC" $FLAGS -O2 -march=armv8.2-a+dotprod -c -o build/arm/quant_dot.o tests/test_quant.c
"$CC" $FLAGS -O2 -march=armv8.6-a+i8mm -c -o build/arm/quant_i8mm.o tests/test_quant.c
"$CC" $FLAGS -O2 -march=armv8-a -o build/arm/test_quant tests/test_quant.c -lm
out=$("$QEMU" -cpu max -L "$SYSROOT" build/arm/test_quant) || { echo "$out"; exit 1; }
echo "$out"
for l in neon neon-dotprod neon-i8mm; do
    echo "$out" | grep -q "^level $l *ok" || { echo "run_arm.sh: level $l was not exercised"; exit 1; }
done
echo "run_arm.sh: neon, neon-dotprod, neon-i8mm ok under qemu"
