#!/bin/sh
# qemu_arm.sh — runs the aarch64 program this link is named after, under
# qemu-user with every CPU feature on. make arm-build links build/arm/qemu/
# colibri, colibri-synth, colibri-convert, colibri-fault and
# colibri-convert-fault here, so the end-to-end tests take
# COLIBRI=build/arm/qemu/colibri and find its siblings beside it.
# ARM_QEMU and ARM_SYSROOT override the emulator and the target's libraries
# (the tests' clean environment keeps neither, so the defaults are Debian's).
here=$(cd "$(dirname "$0")" && pwd)
exec "${ARM_QEMU:-qemu-aarch64}" -cpu max -L "${ARM_SYSROOT:-/usr/aarch64-linux-gnu}" "$here/../$(basename "$0")" "$@"
