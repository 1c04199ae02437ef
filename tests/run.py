#!/usr/bin/env python3
"""Runs every test part of one build flavour and says what ran.

    tests/run.py [--sanitize | --tsan] BUILD_DIR

Parts: each C test program BUILD_DIR/test_*, each Python test with
COLIBRI=BUILD_DIR/colibri, and (not with --sanitize) the portable build's
oracle at every kernel level, the build without liburing and libnuma,
the aarch64 run under qemu (tests/run_arm.sh), the Windows build under wine
(tests/run_windows.py), and the CUDA build's
backend test and GPU engine tests (build/cuda, skipped without a GPU). --tsan runs the threaded
paths only (the I/O engine, the store, the engine, the invariance matrix
and the I/O tests of the CLI). Each part's output is shown
as it runs; at the end a table gives per part the checks passed and the
parts of it skipped, with their reasons.

A part that cannot run here says so on its own line, `SKIP <tag>: <reason>`
(C tests through check.h's SKIP, Python tests through skipTest("<tag>:
...")), with a tag such as io_uring, aarch64 or a kernel level. Listing
tags in COLI_REQUIRE (comma-separated) makes a skip with one of those tags
a failure: CI sets it for the tools it installs. Exit status 0 only when
every part passed and nothing required was skipped. Standard library only.
"""
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_REPORT = re.compile(r"^(\S+): (\d+) checks passed, (\d+) skipped$")
SKIP_LINE = re.compile(r"^SKIP (\S+?): (.*)$")
PY_SKIP = re.compile(r"\.\.\. skipped '(\S+?): (.*)'$")
PY_RAN = re.compile(r"^Ran (\d+) tests? in")


class Part:
    def __init__(self, name, cmd, env=None):
        self.name, self.cmd, self.env = name, cmd, env or {}
        self.passed = self.checks = 0
        self.skips = []  # (tag, reason)
        self.ok = False
        self.seconds = 0.0


def run_part(p):
    print("== %s" % p.name, flush=True)
    env = dict(os.environ)
    env.update(p.env)
    t0 = time.time()
    proc = subprocess.Popen(p.cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ran = skipped_py = 0
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        print(line, flush=True)
        m = SKIP_LINE.match(line)
        if m:
            p.skips.append((m.group(1), m.group(2)))
            continue
        m = PY_SKIP.search(line)
        if m:
            p.skips.append((m.group(1), m.group(2)))
            skipped_py += 1
            continue
        m = C_REPORT.match(line)
        if m:
            p.checks += int(m.group(2))
            continue
        m = PY_RAN.match(line)
        if m:
            ran += int(m.group(1))
    rc = proc.wait()
    p.seconds = time.time() - t0
    if ran:
        p.checks += ran - skipped_py
    p.ok = rc == 0
    if not p.ok:
        print("== %s FAILED (exit status %d)" % (p.name, rc), flush=True)
    return p


def parts_for(build, sanitize, tsan):
    colibri = {"COLIBRI": os.path.join(build, "colibri")}
    if tsan:
        out = [Part(os.path.join(build, t), [os.path.join(build, t)]) for t in ("test_team", "test_io", "test_store", "test_engine")]
        out.append(Part("tests/test_cli.py (threaded paths)", [sys.executable, "tests/test_cli.py", "-v", "Tiers.test_invariance_matrix", "IOFaults"],
                        colibri))
        out.append(Part("tests/test_serve.py (HTTP threads and the compute thread)", [sys.executable, "tests/test_serve.py", "-v", "Protocol", "Lifecycle"],
                        colibri))
        return out
    tests = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_") and f.endswith(".c"))
    pys = sorted(f for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_") and f.endswith(".py"))
    out = [Part(os.path.join(build, t), [os.path.join(build, t)]) for t in tests]
    out += [Part("tests/" + f, [sys.executable, "tests/" + f, "-v"], colibri) for f in pys]
    if sanitize:
        return out
    out.append(Part("build/portable (ARCH=portable: kernels chosen at run time)",
                    [sys.executable, "tests/test_cli.py", "-v", "Oracle.test_every_fixture_passes", "Oracle.test_every_kernel_level"],
                    {"COLIBRI": "build/portable/colibri"}))
    out.append(Part("build/nolibs/test_io (without liburing and libnuma)", ["build/nolibs/test_io"]))
    out.append(Part("build/nolibs/colibri (without liburing and libnuma)", [sys.executable, "tests/test_cli.py", "-v", "NoLibs"],
                    {"COLIBRI": "build/nolibs/colibri"}))
    out.append(Part("aarch64 under qemu (NEON, dotprod, i8mm)", ["sh", "tests/run_arm.sh"]))
    out.append(Part("Windows (MinGW-w64) under wine: C tests, oracle, paths, conversion, tokens vs Linux", [sys.executable, "tests/run_windows.py", build]))
    if os.path.exists(os.path.join(ROOT, "build/cuda/test_cuda")):
        out.append(Part("build/cuda/test_cuda (the GPU's integer matmul against the CPU reference)", ["build/cuda/test_cuda"]))
        out.append(Part("build/cuda/colibri (CUDA build: oracle and tokens with the GPU on)", [sys.executable, "tests/test_cli.py", "-v", "Cuda"],
                        {"COLIBRI": "build/cuda/colibri"}))
    else:
        out.append(Part("CUDA build", [sys.executable, "-c", "print('SKIP cuda-build: nvcc not found (make test builds build/cuda where it is)')"]))
    return out


def main():
    args = sys.argv[1:]
    sanitize, tsan = "--sanitize" in args, "--tsan" in args
    args = [a for a in args if a not in ("--sanitize", "--tsan")]
    if len(args) != 1:
        sys.exit(__doc__)
    build = args[0]
    require = {t.strip() for t in os.environ.get("COLI_REQUIRE", "").split(",") if t.strip()}
    t0 = time.time()
    parts = [run_part(p) for p in parts_for(build, sanitize, tsan)]
    # tags that builds without the library skip by design are not owed by them
    by_design = {"io_uring", "mhd"}
    print("\n== summary (%s)" % build)
    w = max(len(p.name) for p in parts)
    bad_req = []
    for p in parts:
        tags = sorted({t for t, _ in p.skips})
        print("%-*s  %6d passed  %3d skipped  %5.1f s  %s%s" % (w, p.name, p.checks, len(p.skips), p.seconds,
                                                                 "ok" if p.ok else "FAILED", ("  (" + ", ".join(tags) + ")") if tags else ""))
        for t, why in p.skips:
            if t in require and not ("nolibs" in p.name and t in by_design):
                bad_req.append("%s: %s: %s" % (p.name, t, why))
    failed = [p.name for p in parts if not p.ok]
    total = sum(p.checks for p in parts)
    nskip = sum(len(p.skips) for p in parts)
    print("%d checks passed in %d parts, %d skipped, %.0f s" % (total, len(parts), nskip, time.time() - t0))
    for b in bad_req:
        print("required but skipped (COLI_REQUIRE): %s" % b)
    if failed:
        print("FAILED: " + ", ".join(failed))
    if failed or bad_req:
        sys.exit(1)
    print("all tests passed (%s)" % build)


if __name__ == "__main__":
    main()
