#!/usr/bin/env python3
"""Runs every test part of one build flavour and says what ran.

    tests/run.py [-j N] [--sanitize | --tsan | --arm] BUILD_DIR [[--sanitize | --tsan | --arm] BUILD_DIR ...]

With several BUILD_DIRs, the parts of each run in one table.

-j N (or COLI_TEST_JOBS=N) runs N parts at once; the default is 2 where
the machine has 2 CPUs or more. One part on its own leaves about 40% of
2 cores idle (make test: 1,028 CPU-seconds in 878 s), mostly in the
emulated parts (qemu, wine), which are also the longest: they start first
so that the short ones fill in beside them. Each of the N lanes runs on
its own share of the CPUs (Linux: sched_setaffinity), so the engine sizes
its thread team to that share: two teams spinning at barriers on the same
cores would each wait for threads the other has descheduled. A few parts
run alone at the end, on every CPU (ALONE: their checks need two threads
running at once, or a browser beside the server within a deadline). With
N > 1 each part's output is shown whole when it ends (a line says when it
starts), so parts never interleave.

Parts: each C test program BUILD_DIR/test_*, each Python test with
COLIBRI=BUILD_DIR/colibri, and (not with --sanitize) the portable build's
oracle at every kernel level, the build without the optional libraries and OpenMP,
the aarch64 build under qemu (tests/run_arm.sh, then build/arm's C tests,
the end-to-end tests and tests/xtokens.py), the macOS checks (clang's type
check of the macOS paths, the aarch64 build as Apple clang makes it under
qemu), the Windows build
under wine (tests/run_windows.py), the engine's GPU paths against the
host stand-in for the backend (build/cuda-host, tests/cuda_host.c), and the
CUDA build's backend test and GPU engine tests (build/cuda, skipped without
a GPU). --tsan runs the threaded
paths only (the I/O engine, the store, the engine, the Responses store, the invariance matrix,
the I/O tests of the CLI, and the GPU tier's tests on the host stand-in,
build/tsan-cuda-host). --arm runs the aarch64 parts only (BUILD_DIR
is then the x86-64 build the tokens are compared with). Each part's output is shown
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
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_REPORT = re.compile(r"^(\S+): (\d+) checks passed, (\d+) skipped$")
SKIP_LINE = re.compile(r"^SKIP (\S+?): (.*)$")
PY_SKIP = re.compile(r"\.\.\. skipped '(\S+?): (.*)'$")
PY_RAN = re.compile(r"^Ran (\d+) tests? in")


# Parts that run alone (with -j N > 1): test_store catches a prefetch's
# read in flight, which a reader thread sharing one CPU with the test may
# finish first; test_webui drives chromium against a server with 10 s
# deadlines.
ALONE = ("test_store", "test_webui.py")


class Part:
    def __init__(self, name, cmd, env=None, by_design=(), long=False, after=None):
        self.name, self.cmd, self.env = name, cmd, env or {}
        self.alone = any(os.path.basename(c) in ALONE for c in cmd)
        self.by_design = set(by_design)  # skip tags a build without the optional libraries owes nobody
        self.long = long  # emulated (qemu, wine): started before the native parts
        self.after = after  # a part that must have ended first (it builds what this one runs)
        self.passed = self.checks = 0
        self.skips = []  # (tag, reason)
        self.ok = False
        self.seconds = self.cpu = 0.0


OUT_LOCK = threading.Lock()


def say(text):
    with OUT_LOCK:
        print(text, flush=True)


def run_part(p, buffered=False, cpus=None):
    """Runs one part (on the CPUs cpus, or any); its output goes out as it
    comes, or whole at the end."""
    kept = []
    emit = kept.append if buffered else say
    if buffered:
        say("== started: %s" % p.name)
    emit("== %s" % p.name)
    env = dict(os.environ)
    env.update(p.env)
    t0 = time.time()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    try:
        proc = subprocess.Popen(p.cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pin)
    except OSError as e:  # a part that cannot start fails like one that exits non-zero (and never leaves a lane waiting)
        emit("== %s FAILED (cannot start %s: %s)" % (p.name, p.cmd[0], e))
        if buffered:
            say("\n".join(kept))
        return p
    ran = skipped_py = 0
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        emit(line)
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
    # wait4: this part's own CPU time (its waited-for descendants included),
    # which RUSAGE_CHILDREN cannot separate while parts run side by side
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    p.seconds = time.time() - t0
    p.cpu = usage.ru_utime + usage.ru_stime
    if ran:
        p.checks += ran - skipped_py
    p.ok = rc == 0
    if not p.ok:
        emit("== %s FAILED (exit status %d)" % (p.name, rc))
    if buffered:
        say("\n".join(kept))
    return p


def run_parts(parts, jobs):
    """Runs every part, jobs at a time: the long ones first, each in the
    order given once the part it comes after has ended."""
    if jobs <= 1:
        for p in parts:
            run_part(p)
        return
    queue = [p for p in parts if p.long and not p.alone] + [p for p in parts if not p.long and not p.alone]
    done, cond = set(), threading.Condition()
    mine = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    lanes = [set(mine[i::jobs]) for i in range(jobs)] if len(mine) >= jobs else [None] * jobs

    def worker(cpus):
        while True:
            with cond:
                while True:
                    if not queue:
                        return
                    ready = [p for p in queue if p.after is None or p.after in done]
                    if ready:
                        p = ready[0]
                        queue.remove(p)
                        break
                    cond.wait()
            run_part(p, buffered=True, cpus=cpus)
            with cond:
                done.add(p)
                cond.notify_all()

    threads = [threading.Thread(target=worker, args=(lanes[i],)) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in parts:
        if p.alone:
            run_part(p)


# The aarch64 build (build/arm, cross-compiled without the optional
# libraries) under qemu-user: tests/run_arm.sh builds it and runs the kernel
# tests and every fixture's oracle at every NEON level (or says SKIP aarch64
# where the cross tools are missing); then every other C test, the
# end-to-end tests that finish in reasonable time under emulation (ARM_PY;
# README gives their timings) through the qemu wrapper
# build/arm/qemu/colibri, and tokens compared with this machine's build.
ARM_CC = os.environ.get("ARM_CC", "aarch64-linux-gnu-gcc")
ARM_QEMU = os.environ.get("ARM_QEMU", "qemu-aarch64")
ARM_SYSROOT = os.environ.get("ARM_SYSROOT", "/usr/aarch64-linux-gnu")
# Left out under qemu: tests/test_faults.py (its loops over every
# allocation, read and write take minutes there and exercise the injector,
# not the architecture), tests/test_serve.py (this build has no
# libmicrohttpd), and test_cli.py's residency and I/O groups (Tiers,
# History, Synthetic, IOFaults: half of its time, ~100 s under qemu, for
# policy code with nothing per architecture; qemu-user runs the guest's
# threads with the host's memory order, so they would not find ordering
# bugs either, and build/arm's test_store, test_io and test_engine run
# there). An empty list runs the whole file.
ARM_PY = [
    ("tests/test_cli.py", ["Oracle", "Generate", "Speculation", "Session", "Chat", "Refusals"]),
    ("tests/test_convert.py", []),
    ("tests/test_grammar.py", ["Grammar.test_json_schema_outputs_validate"]),
]
NOLIBS = ("io_uring", "mhd")


def arm_parts(build):
    first = Part("aarch64 under qemu (NEON, dotprod, i8mm)", ["sh", "tests/run_arm.sh"], long=True)
    if not (shutil.which(ARM_CC) and shutil.which(ARM_QEMU)):
        return [first]  # run_arm.sh says SKIP aarch64
    qemu = [ARM_QEMU, "-cpu", "max", "-L", ARM_SYSROOT]
    tests = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_") and f.endswith(".c"))
    wrapped = {"COLIBRI": "build/arm/qemu/colibri"}
    # the end-to-end tests first: test_cli.py's groups are the longest part under qemu
    out = [first]
    for f, classes in ARM_PY:
        what = "(%d named groups and tests)" % len(classes) if classes else "(all)"
        out.append(Part("%s %s (aarch64, qemu)" % (f, what), [sys.executable, f, "-v"] + classes, wrapped, NOLIBS, True, first))
    # COLI_EMULATED: a test may leave out what is the same C on every
    # architecture and slow under emulation (test_spec's sampling statistics)
    out += [Part("build/arm/%s (aarch64, qemu)" % t, qemu + ["build/arm/" + t], {"COLI_EMULATED": "1"}, NOLIBS, True, first)
            for t in tests if t != "test_quant"]
    out.append(Part("tests/xtokens.py (x86-64 and aarch64 give the same tokens)", [sys.executable, "tests/xtokens.py", "-v"],
                    dict(wrapped, COLIBRI_HOST=os.path.join(build, "colibri")), long=True, after=first))
    return out


# macOS, which no build machine has: its code paths type-checked by clang
# against the POSIX headers (tests/check_macos.py), and the aarch64 build
# as Apple clang makes it (clang 16, -mcpu=apple-m1, no OpenMP; Makefile
# build/arm-clang) under qemu: the kernel tests, every fixture's oracle at
# every level, and tokens equal to this machine's build.
ARM_CLANG = os.environ.get("ARM_CLANG", "clang-16")


def macos_parts(build):
    out = [Part("macOS code paths type-checked by clang (tests/check_macos.py)", [sys.executable, "tests/check_macos.py"])]
    if not os.path.exists(os.path.join(ROOT, "build/arm-clang/colibri")):
        why = "SKIP macos: no %s, %s or %s to build and run aarch64 as Apple clang does" % (ARM_CLANG, ARM_CC, ARM_QEMU)
        out.append(Part("aarch64 built by clang as for Apple silicon", [sys.executable, "-c", "print(%r)" % why]))
        return out
    qemu = [ARM_QEMU, "-cpu", "max", "-L", ARM_SYSROOT]
    wrapped = {"COLIBRI": "build/arm-clang/qemu/colibri"}
    out.append(Part("build/arm-clang/test_quant (clang, -mcpu=apple-m1, qemu)", qemu + ["build/arm-clang/test_quant"], long=True))
    out.append(Part("build/arm-clang/colibri: every oracle at every level (qemu)",
                    [sys.executable, "tests/test_cli.py", "-v", "Oracle.test_every_fixture_passes", "Oracle.test_every_kernel_level"], wrapped,
                    long=True))
    out.append(Part("tests/xtokens.py (clang's aarch64 build gives x86-64's tokens)", [sys.executable, "tests/xtokens.py", "-v"],
                    dict(wrapped, COLIBRI_HOST=os.path.join(build, "colibri")), long=True))
    return out


def parts_for(build, sanitize, tsan):
    colibri = {"COLIBRI": os.path.join(build, "colibri")}
    if tsan:
        out = [Part(os.path.join(build, t), [os.path.join(build, t)]) for t in ("test_team", "test_io", "test_store", "test_engine", "test_fronts")]
        out.append(Part("tests/test_cli.py (threaded paths)", [sys.executable, "tests/test_cli.py", "-v", "Tiers.test_invariance_matrix", "IOFaults"],
                        colibri))
        out.append(Part("tests/test_serve.py (HTTP threads, the request watchdog, the metrics and the compute thread)",
                        [sys.executable, "tests/test_serve.py", "-v", "Protocol", "Lifecycle", "Hostile.test_slow_senders_are_cut_off",
                         "KeysAndOrigins.test_introspection"], colibri))
        out.append(Part("tests/test_cli.py Cuda (the GPU tier's copies, attention, the indexer and the fallback on the team's threads, host stand-in)",
                        [sys.executable, "tests/test_cli.py", "-v", "Cuda.test_the_expert_tier_fills_as_experts_run",
                         "Cuda.test_a_failing_gpu_call_falls_back_to_the_cpu", "Cuda.test_attention_on_the_gpu"],
                        {"COLIBRI": "build/tsan-cuda-host/colibri", "COLI_EXPECT_GPU": "1"}))
        if os.path.exists(os.path.join(ROOT, "build/tsan-mpi/colibri")):  # make sanitize builds it where mpicc and mpirun are
            out.append(Part("tests/test_mpi.py (3 ranks serving and generating: rank 0's messages on the team's thread 0 while the others compute)",
                            [sys.executable, "tests/test_mpi.py", "-v", "Serve", "Tokens.test_rank_zero_keeps_the_whole_usage_history"],
                            dict(colibri, COLIBRI_MPI="build/tsan-mpi/colibri")))
        else:
            out.append(Part("tests/test_mpi.py under TSan", [sys.executable, "-c", "print('SKIP mpi: no mpicc or mpirun, so no build/tsan-mpi')"]))
        for p in out:  # the end-to-end parts and test_engine: 20-110 s each under TSan, the C tests a few
            p.long = p.cmd[0] == sys.executable or p.cmd[0].endswith("test_engine")
        return out
    tests = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_") and f.endswith(".c"))
    # under ASan the end-to-end tests are the long parts, test_faults.py
    # and test_serve.py (about 250 and 170 s in a lane) the longest: first
    # (test_mpi.py drives build/mpi, which has no sanitizer build: make test's part)
    pys = sorted((f for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_") and f.endswith(".py")
                  and not (sanitize and f == "test_mpi.py")),
                 key=lambda f: (not sanitize or f not in ("test_faults.py", "test_serve.py"), f))
    out = [Part(os.path.join(build, t), [os.path.join(build, t)]) for t in tests]
    out += [Part("tests/" + f, [sys.executable, "tests/" + f, "-v"], colibri, long=sanitize) for f in pys]
    if sanitize:
        return out
    out.append(Part("build/portable (ARCH=portable: kernels chosen at run time)",
                    [sys.executable, "tests/test_cli.py", "-v", "Oracle.test_every_fixture_passes", "Oracle.test_every_kernel_level"],
                    {"COLIBRI": "build/portable/colibri"}))
    # build/nolibs: no liburing, libnuma, libmicrohttpd or OpenMP (what
    # macOS builds without Homebrew's libomp)
    nolibs = {"COLIBRI": "build/nolibs/colibri", "COLI_EXPECT_NOLIBS": "1"}
    out.append(Part("build/nolibs/test_io (no optional library, no OpenMP)", ["build/nolibs/test_io"], by_design=NOLIBS))
    out.append(Part("build/nolibs/colibri (no optional library, no OpenMP): every oracle", [sys.executable, "tests/test_cli.py", "-v", "NoLibs",
                    "Oracle.test_every_fixture_passes"], nolibs, NOLIBS))
    out.append(Part("build/nolibs/colibri-convert (no OpenMP)", [sys.executable, "tests/test_convert.py", "-v", "Engine"], nolibs, NOLIBS))
    # the Windows part first: among the longest, with the qemu parts
    out.append(Part("Windows (MinGW-w64) under wine: C tests, oracle, paths, conversion, tokens vs Linux", [sys.executable, "tests/run_windows.py", build],
                    long=True))
    out += arm_parts(build)
    out += macos_parts(build)
    host = {"COLIBRI": "build/cuda-host/colibri", "COLI_EXPECT_GPU": "1"}
    out.append(Part("build/cuda-host/test_cuda (test_cuda against the host stand-in for backend_cuda.cu)", ["build/cuda-host/test_cuda"]))
    out.append(Part("build/cuda-host/test_batch (batched forwards with slot 0 on the GPU's latent cache, host stand-in)", ["build/cuda-host/test_batch"]))
    out.append(Part("build/cuda-host/colibri (the engine's GPU paths on the host stand-in: placement, fallback, tokens)",
                    [sys.executable, "tests/test_cli.py", "-v", "Cuda"], host))
    out.append(Part("build/cuda-host/colibri serving several requests in one forward (slot 0's attention on the GPU stand-in, the others' beside it)",
                    [sys.executable, "tests/test_serve.py", "-v", "Batching"], host))
    if os.path.exists(os.path.join(ROOT, "build/cuda/test_cuda")):
        out.append(Part("build/cuda/test_cuda (the GPU's integer matmul against the CPU reference)", ["build/cuda/test_cuda"]))
        out.append(Part("build/cuda/test_batch (batched forwards with slot 0 on the GPU's latent cache)", ["build/cuda/test_batch"]))
        out.append(Part("build/cuda/colibri (CUDA build: oracle and tokens with the GPU on)", [sys.executable, "tests/test_cli.py", "-v", "Cuda"],
                        {"COLIBRI": "build/cuda/colibri"}))
    else:
        out.append(Part("CUDA build", [sys.executable, "-c", "print('SKIP cuda-build: nvcc not found (make test builds build/cuda where it is)')"]))
    return out


def main():
    groups, flag, jobs_arg = [], None, None  # (flag, build) for each BUILD_DIR, in order
    args = iter(sys.argv[1:])
    for a in args:
        if a in ("--sanitize", "--tsan", "--arm") and flag is None:
            flag = a
        elif a.startswith("-j") and flag is None and jobs_arg is None:
            jobs_arg = a[2:] or next(args, "")
        elif not a.startswith("-"):
            groups.append((flag, a))
            flag = None
        else:
            sys.exit(__doc__)
    if not groups or flag is not None:
        sys.exit(__doc__)
    jobs_arg = jobs_arg if jobs_arg is not None else os.environ.get("COLI_TEST_JOBS", "2" if (os.cpu_count() or 1) >= 2 else "1")
    if not jobs_arg.isdigit() or not 1 <= int(jobs_arg) <= 64:
        sys.exit("tests/run.py: -j / COLI_TEST_JOBS must be a whole number of parts from 1 to 64, not %r" % jobs_arg)
    require = {t.strip() for t in os.environ.get("COLI_REQUIRE", "").split(",") if t.strip()}
    t0 = time.time()
    parts = []
    for flag, build in groups:
        parts += arm_parts(build) if flag == "--arm" else parts_for(build, flag == "--sanitize", flag == "--tsan")
    run_parts(parts, int(jobs_arg))
    print("\n== summary (%s)" % ", ".join(b for _, b in groups))
    w = max(len(p.name) for p in parts)
    bad_req = []
    for p in parts:
        tags = sorted({t for t, _ in p.skips})
        print("%-*s  %6d passed  %3d skipped  %5.1f s  cpu %5.1f s  %s%s" % (w, p.name, p.checks, len(p.skips), p.seconds, p.cpu,
                                                                 "ok" if p.ok else "FAILED", ("  (" + ", ".join(tags) + ")") if tags else ""))
        for t, why in p.skips:
            if t in require and t not in p.by_design:
                bad_req.append("%s: %s: %s" % (p.name, t, why))
    failed = [p.name for p in parts if not p.ok]
    total = sum(p.checks for p in parts)
    nskip = sum(len(p.skips) for p in parts)
    print("%d checks passed in %d parts, %d skipped, %.0f s (%.0f CPU-seconds, %d at once)" % (total, len(parts), nskip, time.time() - t0,
                                                                                          sum(p.cpu for p in parts), int(jobs_arg)))
    for b in bad_req:
        print("required but skipped (COLI_REQUIRE): %s" % b)
    if failed:
        print("FAILED: " + ", ".join(failed))
    if failed or bad_req:
        sys.exit(1)
    print("all tests passed (%s)" % ", ".join(b for _, b in groups))


if __name__ == "__main__":
    main()
