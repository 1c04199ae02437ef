#!/usr/bin/env python3
"""run_windows.py — the Windows build under wine.

    tests/run_windows.py [LINUX_BUILD_DIR]     (default build/test)

Cross-compiles with MinGW-w64 (make CC=x86_64-w64-mingw32-gcc
win-test-build: colibri.exe, colibri-convert.exe, colibri-synth.exe and the
C tests in build/win/test) and runs under wine:
- every C test but the CUDA one (I/O engine, store, tiers, JSON, tokenizer,
  safetensors, engine, KV files, ...);
- the oracle on every fixture, each x86 kernel level, a wrong reference,
  greedy generation against transformers' generate() and seeded sampling
  (tests/test_cli.py's Oracle and Generate tests, through a wrapper that
  runs the .exe under wine);
- Windows paths: the oracle through a relative path with backslashes, an
  absolute one with a drive letter, and a UTF-8 directory name;
- conversion: colibri-convert.exe writes the same bytes as the Linux build
  (f32 and int4/int8), into a UTF-8 named directory given as a Windows path,
  and the f32 result passes the oracle; colibri-synth.exe writes the same
  bytes as the Linux build;
- tokens: greedy and seeded sampled generations are token-identical to the
  Linux x86-64 build's (LINUX_BUILD_DIR/colibri), for every fixture, at the
  scalar level with IDOT off and the best level with IDOT on.

Without the cross compiler or wine it prints one line, `SKIP windows:
<why>`, and passes. Skips of the tests it runs are reported with their tag
prefixed by `windows/` (io_uring, for one, does not exist on Windows).
Needs: apt-get install gcc-mingw-w64-x86-64 wine wine64. Standard library
only; run from the repository root.
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = os.environ.get("WIN_CC", "x86_64-w64-mingw32-gcc")
WINE = os.environ.get("WINE", "wine")
WINESERVER = os.environ.get("WINESERVER", "wineserver")
WB = "build/win/test"
FIXTURES = "tests/fixtures"
ORACLES = sorted((d for d in os.listdir(os.path.join(ROOT, FIXTURES)) if os.path.exists(os.path.join(ROOT, FIXTURES, d, "ref.json"))),
                 key=lambda d: (d != "tiny-glm5", d))
# test_cli.py tests that run under wine: the oracle and generation. Not
# the ones that need POSIX signals, FIFOs, io_uring or fault injection.
CLI_TESTS = ["Oracle.test_every_fixture_passes", "Oracle.test_every_kernel_level", "Oracle.test_wrong_reference_fails",
             "Generate.test_greedy_equals_transformers_generate", "Generate.test_seeded_sampling_is_reproducible",
             "Generate.test_tokenize_matches_tokenizers"]

checks, failures, skips = 0, [], 0


def check(ok, what):
    global checks
    if ok:
        checks += 1
    else:
        failures.append(what)
        print("run_windows: FAILED: " + what, flush=True)


# wine's output goes to files, never to pipes of ours: the wineserver a run
# starts inherits the run's stdout and stderr, so reading a pipe to its end
# waits until that server exits (2.6 s a run against 0.06 s to a file).
# The wrappers test_cli.py runs: the .exe under wine, its output through
# unlinked files (so nothing is left behind), and wine killed with the
# wrapper (PR_SET_PDEATHSIG), as a timeout kills only the wrapper. Output
# arrives when the program ends: not for tests that talk to it as it runs.
WRAPPER = """#!%s
import ctypes, os, subprocess, sys, tempfile
def die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "%%s.exe")
with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e:
    rc = subprocess.call([%%r, exe] + sys.argv[1:], stdout=o, stderr=e, preexec_fn=die_with_parent)
    o.seek(0), e.seek(0)
    sys.stdout.buffer.write(o.read()), sys.stderr.buffer.write(e.read())
sys.exit(rc if rc >= 0 else 128 - rc)
""" % sys.executable


def relay(cmd, env=None, timeout=900):
    """Runs cmd, printing its output with skip tags marked windows/; the
    exit status. A .exe's output is printed when it ends (through a file)."""
    global skips
    wine = cmd[0] == WINE
    out = tempfile.TemporaryFile() if wine else subprocess.PIPE
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    t0 = time.time()
    if wine:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        out.seek(0)
    for raw in (out if wine else p.stdout):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.startswith("SKIP "):
            line = "SKIP windows/" + line[5:]
            skips += 1
        line = line.replace("... skipped '", "... skipped 'windows/")
        print(line, flush=True)
        if time.time() - t0 > timeout:
            p.kill()
    return p.wait()


def wine_env(extra=None):
    e = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "WINEPREFIX", "WINEDEBUG", "USER")}
    e["LANG"] = "C.UTF-8"  # wine decodes arguments and environment in the Unix locale's encoding
    e.update(extra or {})
    return e


def run(argv, extra=None, timeout=300):
    """(exit status, stdout, stderr) of argv (a Linux binary or a .exe under
    wine) with only the given knobs set."""
    cmd = ([WINE] if argv[0].endswith(".exe") else []) + argv
    with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e:  # files, not pipes (WRAPPER)
        p = subprocess.run(cmd, cwd=ROOT, env=wine_env(extra), stdin=subprocess.DEVNULL, stdout=o, stderr=e, timeout=timeout)
        o.seek(0), e.seek(0)
        return p.returncode, o.read().decode("utf-8", "replace"), e.read().decode("utf-8", "replace")


def winpath(path):
    """An absolute Windows path for a Unix one: wine's Z: drive is /."""
    return "Z:" + os.path.abspath(path).replace("/", "\\")


def tokens(err):
    m = re.search(r"generated tokens:([ \d]*)", err)
    return m.group(1).split() if m else None


def digest(d):
    """{file name: sha256} of the regular files in d, lock and temporaries aside."""
    out = {}
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if os.path.isfile(p) and not f.startswith(".") and ".tmp." not in f:
            with open(p, "rb") as fh:
                out[f] = hashlib.sha256(fh.read()).hexdigest()
    return out


def part_paths(tmp):
    exe = WB + "/colibri.exe"
    base = {"USAGE_SAVE": "0"}
    uni = os.path.join(tmp, "模型 ünïcødé")
    shutil.copytree(os.path.join(ROOT, FIXTURES, "tiny-glm5"), uni, ignore=shutil.ignore_patterns(".*"))
    for label, path in (("relative path with backslashes", "tests\\fixtures\\tiny-glm5"),
                        ("absolute path with a drive letter", winpath(os.path.join(FIXTURES, "tiny-glm5")) + "\\"),
                        ("UTF-8 directory name", uni), ("UTF-8 directory name as a Windows path", winpath(uni))):
        rc, out, err = run([exe, path], base)
        check(rc == 0 and "-- PASS" in out, "oracle through a %s (%s): %s%s" % (label, path, out, err[-400:]))
    # the usage history: written under the lock beside the model (LockFileEx, MoveFileExW), read back by the next run
    for i in range(2):
        rc, out, err = run([exe, winpath(uni)], {"USAGE_SAVE": "1"})
        check(rc == 0 and "-- PASS" in out, "oracle with USAGE_SAVE=1: " + err[-400:])
    check(os.path.isfile(os.path.join(uni, ".coli_usage")) and "from the usage history" in err,
          "the usage history was not written or not read back: " + err[-400:])
    print("run_windows: the oracle passes through Windows paths (backslashes, drive letter, UTF-8 names); the usage history is kept", flush=True)
    # what Windows lacks degrades with one message
    rc, out, err = run([exe, "--serve", os.path.join(FIXTURES, "tiny-glm5")], base)
    check(rc == 2 and "serve mode is not available on Windows" in err, "--serve on Windows: %d %s" % (rc, err[-400:]))
    rc, out, err = run([exe, os.path.join(FIXTURES, "tiny-glm5")], dict(base, URING="1"))
    check(rc == 0 and "-- PASS" in out and "URING=1: this build has no io_uring" in err, "URING=1 on Windows: " + err[-400:])
    rc, out, err = run([exe, os.path.join(FIXTURES, "tiny-glm5")], dict(base, COLI_NUMA="1"))
    check(rc == 0 and "-- PASS" in out and "COLI_NUMA=1: this build has no libnuma" in err, "COLI_NUMA=1 on Windows: " + err[-400:])
    for knob in ({"DIRECT": "1"}, {"COLI_MMAP": "1"}, {"MLOCK": "1", "PIN": "auto"}):  # on the copy with a history: experts get pinned
        rc, out, err = run([exe, uni], dict(base, **knob))
        check(rc == 0 and "-- PASS" in out and "failed" not in err and "refused" not in err and "no pinned experts" not in err,
              "%s on Windows: %s" % (knob, err[-400:]))
    print("run_windows: serve, io_uring and NUMA say they are absent; DIRECT, COLI_MMAP and MLOCK pass the oracle", flush=True)


def part_convert(tmp, linux):
    conv_w, conv_l = WB + "/colibri-convert.exe", os.path.join(linux, "colibri-convert")
    have_linux = os.path.exists(os.path.join(ROOT, conv_l))
    for flags in (["--expert-bits", "32", "--dense-bits", "32", "--mtp-bits", "32"], ["--expert-bits", "4", "--dense-bits", "8", "--group-size", "32"]):
        tag = "-".join(flags[1::2])
        dw, dl = os.path.join(tmp, "转换 " + tag), os.path.join(tmp, "linux-" + tag)
        rc, out, err = run([conv_w, "tests\\fixtures\\tiny-glm5", winpath(dw)] + flags)
        check(rc == 0, "colibri-convert.exe %s: %s" % (" ".join(flags), err[-600:]))
        if have_linux:
            rc, out, err = run([conv_l, os.path.join(FIXTURES, "tiny-glm5"), dl] + flags)
            check(rc == 0, "Linux colibri-convert %s: %s" % (" ".join(flags), err[-600:]))
            a, b = digest(os.path.join(ROOT, dw)), digest(os.path.join(ROOT, dl))
            check(a and a == b, "colibri-convert.exe %s wrote other bytes than Linux's: %s / %s" % (" ".join(flags), a, b))
        if tag.startswith("32"):
            shutil.copy(os.path.join(ROOT, FIXTURES, "tiny-glm5", "ref.json"), dw)
            rc, out, err = run([WB + "/colibri.exe", winpath(dw)], {"USAGE_SAVE": "0"})
            check(rc == 0 and "-- PASS" in out, "the f32 conversion fails the oracle: " + out + err[-400:])
        rc, out, err = run([conv_w, "tests\\fixtures\\tiny-glm5", winpath(dw)] + flags)
        check(rc == 0 and "skip" in (out + err).lower(), "a rerun of colibri-convert.exe skips finished shards: " + out + err[-400:])
    if not have_linux:
        print("SKIP windows/linux-build: %s missing: conversion bytes not compared with Linux's" % conv_l, flush=True)
        global skips
        skips += 1
    # colibri-synth: the same bytes as Linux's, and the same tokens on it
    sw, sl = os.path.join(tmp, "synth-win"), os.path.join(tmp, "synth-linux")
    args = ["--layers", "3", "--dense-layers", "1", "--experts", "16", "--topk", "4", "--hidden", "256", "--moe-inter", "128", "--heads", "4",
            "--vocab", "352", "--group-size", "32", "--tokenizer", os.path.join(FIXTURES, "tiny-glm5", "tokenizer.json")]
    rc, out, err = run([WB + "/colibri-synth.exe", sw] + args)
    check(rc == 0, "colibri-synth.exe: " + err[-400:])
    gen = {"PROMPT": "the quick brown fox", "TEMPERATURE": "0", "NGEN": "16", "TOKENS": "1", "USAGE_SAVE": "0"}
    rc, out, err = run([WB + "/colibri.exe", sw], gen)
    tw = tokens(err)
    check(rc == 0 and tw, "generation on the synthetic model under wine: " + err[-400:])
    if os.path.exists(os.path.join(ROOT, linux, "colibri-synth")):
        rc, out, err = run([os.path.join(linux, "colibri-synth"), sl] + args)
        check(rc == 0 and digest(os.path.join(ROOT, sw)) == digest(os.path.join(ROOT, sl)), "colibri-synth.exe wrote other bytes than Linux's")
        gen_l = dict(gen, TEMP="0")
        del gen_l["TEMPERATURE"]
        rc, out, err = run([os.path.join(linux, "colibri"), sl], gen_l)
        check(tokens(err) == tw, "synthetic model: tokens differ from Linux's: %s / %s" % (tw, tokens(err)))
    print("run_windows: colibri-convert.exe and colibri-synth.exe write Linux's bytes; the converted model passes the oracle", flush=True)


def part_tokens(linux):
    lin = os.path.join(linux, "colibri")
    if not os.path.exists(os.path.join(ROOT, lin)):
        global skips
        skips += 1
        print("SKIP windows/linux-build: %s missing: tokens not compared with Linux's" % lin, flush=True)
        return
    n = 0
    for name in ORACLES:
        d = os.path.join(FIXTURES, name)
        for simd, idot in (("scalar", "0"), ("auto", "1")):  # the float path at the reference level; the integer path at the best
            for temp, seed in (("0", "1"), ("0.9", "7")):
                env = {"PROMPT": "Windows and Linux agree", "NGEN": "12", "TOKENS": "1", "SEED": seed, "SIMD": simd, "IDOT": idot,
                       "USAGE_SAVE": "0"}
                rc, out, err = run([lin, d], dict(env, TEMP=temp))
                want = tokens(err)
                check(rc == 0 and want, "Linux %s %s: %s" % (name, env, err[-300:]))
                rc, wout, werr = run([WB + "/colibri.exe", d], dict(env, TEMPERATURE=temp))
                check(rc == 0 and tokens(werr) == want and wout == out,
                      "%s SIMD=%s IDOT=%s TEMP=%s: Windows tokens %s (exit %s; stderr ends %r), Linux %s" % (
                          name, simd, idot, temp, tokens(werr), rc, werr[-400:], want))
                n += 1
    print("run_windows: %d generations token-identical to the Linux x86-64 build (%d fixtures; scalar level with IDOT off, best level "
          "with IDOT on; greedy and seeded sampling)" % (n, len(ORACLES)), flush=True)


def main():
    linux = sys.argv[1] if len(sys.argv) > 1 else "build/test"
    missing = [t for t in (CC, WINE, WINESERVER) if not shutil.which(t)]
    if missing:
        print("SKIP windows: %s not found (apt-get install gcc-mingw-w64-x86-64 wine wine64)" % " and ".join(missing))
        return 0
    os.environ.setdefault("WINEPREFIX", os.path.join(ROOT, "build/win/wineprefix"))
    os.environ.setdefault("WINEDEBUG", "-all")
    t0 = time.time()
    nproc = os.cpu_count() or 2
    if relay(["make", "--no-print-directory", "-j%d" % nproc, "CC=" + CC, "win-test-build"]):
        print("run_windows: the Windows build failed")
        return 1
    print("run_windows: built in %.0f s" % (time.time() - t0), flush=True)
    devnull = dict(cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([WINE, "cmd", "/c", "exit"], **devnull)  # creates the prefix once
    # One wineserver for every run below, kept until the end: Debian's starts
    # each with -p0, so it exits with its last client, and a run starting in
    # that moment fails ("wine client error: recvmsg: Connection reset").
    subprocess.run([WINESERVER, "-w"], **devnull)
    persistent = subprocess.run([WINESERVER, "-p"], **devnull).returncode == 0
    if not persistent:
        print("run_windows: %s -p failed: each run starts its own wineserver" % WINESERVER, flush=True)
    try:
        return run_all(linux, t0)
    finally:
        if persistent:
            subprocess.run([WINESERVER, "-k"], **devnull)


def run_all(linux, t0):
    # test_cli.py runs $COLIBRI and its siblings: wrappers that run the .exe under wine
    wrap = os.path.join(ROOT, "build/win/wine")
    os.makedirs(wrap, exist_ok=True)
    for p in ("colibri", "colibri-convert", "colibri-synth"):
        with open(os.path.join(wrap, p), "w") as f:
            f.write(WRAPPER % (p, WINE))
        os.chmod(os.path.join(wrap, p), 0o755)
    tests = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "tests")) if f.startswith("test_") and f.endswith(".c") and f != "test_cuda.c")
    for t in tests:
        t1 = time.time()
        rc = relay([WINE, "%s/%s.exe" % (WB, t)])
        if rc:
            failures.append("%s.exe under wine (exit status %d)" % (t, rc))
        print("run_windows: %s.exe %.1f s" % (t, time.time() - t1), flush=True)
    t1 = time.time()
    rc = relay([sys.executable, "tests/test_cli.py", "-v"] + CLI_TESTS, dict(os.environ, COLIBRI="build/win/wine/colibri", COLI_WINE="1"))
    if rc:
        failures.append("tests/test_cli.py under wine")
    print("run_windows: test_cli.py under wine %.1f s" % (time.time() - t1), flush=True)
    tmp = tempfile.mkdtemp(prefix="colibri-win-", dir=os.path.join(ROOT, "build/win"))
    try:
        for name, fn in (("paths", lambda: part_paths(tmp)), ("conversion", lambda: part_convert(tmp, linux)), ("tokens", lambda: part_tokens(linux))):
            t1 = time.time()
            fn()
            print("run_windows: %s %.1f s" % (name, time.time() - t1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("run_windows: %d checks passed, 0 skipped" % checks)
    print("run_windows: %.0f s in all" % (time.time() - t0))
    if failures:
        print("run_windows: %d failed: %s" % (len(failures), "; ".join(f[:200] for f in failures)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
