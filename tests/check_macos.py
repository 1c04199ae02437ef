#!/usr/bin/env python3
"""Type-checks the macOS code paths on Linux: no macOS machine or SDK is
available to the build machines, so this is as far as they can go.

    tests/check_macos.py

Runs clang -fsyntax-only (clang-16 where installed: Apple clang 15 is LLVM
16; otherwise clang) with the target macros of macOS (__APPLE__,
__MACH__; no __linux__) on every program's translation unit and every C
test, for x86-64 and for aarch64 with Apple clang's default CPU
(apple-m1), as `make` on macOS compiles them: warnings as errors, with and
without OpenMP's pragmas honoured. The headers are the host's POSIX ones
(glibc's), under tests/macos/: those shims declare the Darwin calls
compat.h makes (Mach memory figures, sysctlbyname, F_NOCACHE, F_RDADVISE,
F_FULLFSYNC) as Apple's SDK does, remove what macOS lacks (O_DIRECT,
posix_fadvise) and turn Linux-only headers into errors.

What this catches: a macOS branch that does not compile, a Linux-only call
or header reached without a guard, a type error against the declarations
above. What it cannot: a wrong transcription of Apple's headers, anything
at link or run time. Prints `SKIP macos: ...` where no clang (or, for
aarch64, no aarch64 C library headers) is installed. Standard library only.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARM_SYSROOT = os.environ.get("ARM_SYSROOT", "/usr/aarch64-linux-gnu")

# macOS's predefined macros instead of Linux's; _DARWIN_C_SOURCE as the
# Makefile adds it on macOS.
MACOS = ["-U__linux__", "-U__linux", "-Ulinux", "-U__gnu_linux__", "-U__unix__", "-U__unix", "-Uunix",
         "-D__APPLE__=1", "-D__MACH__=1", "-D_DARWIN_C_SOURCE"]
FLAGS = ["-fsyntax-only", "-std=c11", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
         "-I.", "-Itests/macos"]


def clang():
    for c in ("clang-16", "clang"):
        if shutil.which(c):
            return c
    return None


def omp_header():
    """A directory holding only an omp.h (Homebrew's libomp has LLVM's; the
    declarations are OpenMP's either way), or None. Only the file: the
    compiler's own include directory would shadow clang's headers."""
    cands = sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include/omp.h"))
    gcc = shutil.which("gcc")
    if gcc:
        path = subprocess.run([gcc, "-print-file-name=include/omp.h"], stdout=subprocess.PIPE).stdout.decode().strip()
        cands.append(path)
    for c in cands:
        if os.path.isfile(c):
            d = tempfile.mkdtemp(prefix="colibri-omp-")
            os.symlink(c, os.path.join(d, "omp.h"))
            return d
    return None


def units():
    progs = ["colibri.c", "tools/convert.c", "tools/make_synth.c"] + sorted(glob.glob("kernels/*.c"))
    tests = sorted(t for t in glob.glob("tests/test_*.c") if not t.endswith("test_cuda.c"))
    return progs, tests


def main():
    os.chdir(ROOT)
    cc = clang()
    if not cc:
        print("SKIP macos: clang not found (apt-get install clang-16)")
        print("macos-syntax: 0 checks passed, 1 skipped")
        return 0
    progs, tests = units()
    # (label, flags, files): x86-64 for the programs; aarch64 (Apple
    # silicon) for the programs and the tests; both OpenMP settings.
    configs = [("x86-64", ["-march=x86-64-v2"], progs)]
    arm_ok = os.path.isdir(os.path.join(ARM_SYSROOT, "include"))
    if arm_ok:
        configs.append(("arm64", ["--target=aarch64-linux-gnu", "-mcpu=apple-m1", "-isystem", os.path.join(ARM_SYSROOT, "include")],
                        progs + tests))
    omp_dir = omp_header()
    omps = [["-Wno-unknown-pragmas"]] + ([["-fopenmp", "-isystem", omp_dir]] if omp_dir else [])
    jobs = []
    for label, extra, files in configs:
        for omp in omps:
            for f in files:
                jobs.append(("%s %s %s" % (label, "openmp" if omp[0] == "-fopenmp" else "no-openmp", f),
                             [cc] + FLAGS + MACOS + extra + omp + [f]))

    def check(job):
        label, cmd = job
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return label, r.returncode, r.stdout.decode("utf-8", "replace")

    failed = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for label, rc, out in ex.map(check, jobs):
            if rc:
                failed += 1
                print("FAIL %s\n%s" % (label, out.rstrip()))
    print("%s: %d units type-checked as macOS (%s)" % (cc, len(jobs), ", ".join(c[0] for c in configs)))
    skipped = 0
    if omp_dir:
        shutil.rmtree(omp_dir, ignore_errors=True)
    else:
        print("SKIP macos: no omp.h found (clang's or gcc's); checked without OpenMP only")
        skipped += 1
    if not arm_ok:
        print("SKIP macos: no aarch64 C library headers in %s (apt-get install libc6-dev-arm64-cross)" % ARM_SYSROOT)
        skipped += 1
    print("macos-syntax: %d checks passed, %d skipped" % (len(jobs) - failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
