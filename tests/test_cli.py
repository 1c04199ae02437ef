#!/usr/bin/env python3
"""End-to-end tests of the colibri binary (stdlib only).

The oracle self-test passes on every fixture; a wrong reference fails it
(exit 1); hostile model directories and bad knob values are refused with
exit 2 and a message naming the file, tensor or variable; the output is
byte-identical across placement and thread settings.

The binary is $COLIBRI (default ./colibri); run from the repository root.
"""
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN, FAMILY_ORACLES, FIXTURES, ORACLES, copy_fixture, env_base, load_json, read_st, run, save_json  # noqa: E402


def write_st(path, header, data):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


class Oracle(unittest.TestCase):
    def test_every_fixture_passes(self):
        self.assertTrue(ORACLES)
        for name in ORACLES:
            rc, out, err = run(os.path.join(FIXTURES, name), {"USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, name + ": " + out + err)
            self.assertRegex(out, r"^oracle: teacher-forced \d+/\d+ argmax, max \|dlogit\| \S+, KLD \S+ \(best 90% \S+, max \S+\); "
                                  r"greedy \d+/\d+, max \|dlogit\| \S+.* -- PASS\n"
                                  r"(oracle: MTP head: teacher-forced (\d+)/\2 argmax, max \|dlogit\| \S+; chain (\d+)/\3, max \|dlogit\| \S+\n)?$")
            self.assertEqual("oracle: MTP head" in out, "mtp" in load_json(os.path.join(FIXTURES, name, "ref.json")), name)
            self.assertIn("experts: hit", err)

    def test_placement_and_threads_do_not_change_output(self):
        for name in ORACLES:
            d = os.path.join(FIXTURES, name)
            outs = set()
            for env in ({"CAP": "1", "THREADS": "1"}, {"CAP": "2"}, {"CAP": "64", "THREADS": "2"}, {"THREADS": "3", "UBATCH": "512"}):
                env["USAGE_SAVE"] = "0"
                rc, out, err = run(d, env)
                self.assertEqual(rc, 0, err)
                outs.add(out)
            self.assertEqual(len(outs), 1, outs)

    def test_quantized_fixtures_exact_without_idot(self):
        """Quantized containers against transformers run on their dequantized
        weights: with IDOT=0 the full exact criteria (every argmax, logits
        within 1e-3, greedy identical) at every kernel level this CPU has."""
        q = [n for n in ORACLES if n.startswith("tiny-q")]
        self.assertEqual(len(q), 4)
        for name in q:
            for level in ("scalar", "avx2", "avx512vnni", "auto"):
                rc, out, err = run(os.path.join(FIXTURES, name), {"IDOT": "0", "SIMD": level, "USAGE_SAVE": "0"})
                if rc == 2 and "this CPU lacks" in err:
                    continue
                self.assertEqual(rc, 0, name + " " + level + ": " + out + err)
                self.assertNotIn("IDOT on integer weights", out)
                self.assertIn("-- PASS", out)

    def test_every_kernel_level(self):
        """Each x86 level this CPU has passes the oracle; with integer weights
        and IDOT every level gives the same bytes (integer dot products)."""
        d = os.path.join(FIXTURES, ORACLES[0])
        outs, ran = set(), []
        for level in ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni"):
            rc, out, err = run(d, {"SIMD": level, "USAGE_SAVE": "0"})
            if rc == 2 and "this CPU lacks" in err:
                continue
            self.assertEqual(rc, 0, level + ": " + err)
            self.assertIn("PASS", out)
            for name in FAMILY_ORACLES:  # DeepSeek-V3 / Kimi K2: half-split RoPE, YaRN, group routing at this level
                rc, fout, ferr = run(os.path.join(FIXTURES, name), {"SIMD": level, "USAGE_SAVE": "0"})
                self.assertEqual(rc, 0, "%s %s: %s" % (level, name, fout + ferr))
                self.assertIn("PASS", fout, name)
            ran.append(level)
            rc, out, err = run(d, {"SIMD": level, "USAGE_SAVE": "0", "EXPERT_BITS": "4", "GROUP_SIZE": "16", "DENSE_BITS": "8",
                                   "PROMPT": "hello", "TEMP": "0", "NGEN": "12", "TOKENS": "1"})
            self.assertEqual(rc, 0, err)
            outs.add(tuple(ids_line(err, "generated tokens")))
        self.assertIn("scalar", ran)
        self.assertEqual(len(outs), 1, outs)

    def test_wrong_reference_fails(self):
        with tempfile.TemporaryDirectory() as t:
            src = os.path.join(FIXTURES, ORACLES[0])
            for f in os.listdir(src):
                shutil.copy(os.path.join(src, f), t)
            ref = load_json(os.path.join(t, "ref.json"))
            ref["greedy_ids"][3] = (ref["greedy_ids"][3] + 1) % len(ref["logits"][0])
            save_json(ref, os.path.join(t, "ref.json"))
            rc, out, err = run(t)
            self.assertEqual(rc, 1, out + err)
            self.assertIn("FAIL", out)
            self.assertIn("greedy mismatch at step 3", err)
            ref["logits"][5][7] += 0.01  # within argmax, beyond tolerance
            save_json(ref, os.path.join(t, "ref.json"))
            rc, out, err = run(t)
            self.assertEqual(rc, 1)
            self.assertIn("logits differ", err)


def smallest_budget(test, d, env=None):
    """Bisects RAM_GB for the smallest budget the plan accepts (the refusal
    happens before loading, so each probe is quick)."""
    lo, hi = 0.0, 1.0
    for _ in range(22):  # 1.0 / 2^22 GB: a quarter of a kilobyte
        mid = (lo + hi) / 2
        e = {"RAM_GB": "%.9f" % mid, "USAGE_SAVE": "0", "PIN": "0"}
        e.update(env or {})
        rc, out, err = run(d, e)
        if rc == 2:
            test.assertIn("short by", err)
            lo = mid
        else:
            hi = mid
    return hi


class Tiers(unittest.TestCase):
    """Placement never changes the output: the invariance matrix over CAP,
    PIN, PIN_GB, RAM_GB, REPIN, RSS guard and threads; plus the budget
    refusal and the usage history's life cycle."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        copy_fixture(ORACLES[0], self.dir)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def smallest_budget(self):
        return smallest_budget(self, self.dir)

    def test_budget_refusal(self):
        rc, out, err = run(self.dir, {"RAM_GB": "0.000001"})
        self.assertEqual(rc, 2)
        self.assertIn("RAM budget", err)
        self.assertIn("Raise RAM_GB", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".coli_usage")))  # refused before running
        rc, out, err = run(self.dir, {"RAM_GB": "0.000001", "COLI_RAM_OVERCOMMIT": "1", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("COLI_RAM_OVERCOMMIT", err)

    def test_invariance_matrix(self):
        self.invariance_matrix()

    def test_invariance_matrix_deepseek_v3(self):
        """The same matrix on tiny-dsv3: no indexer, YaRN, group routing, an MTP layer."""
        self.family_matrix("tiny-dsv3")

    def test_invariance_matrix_deepseek_v32(self):
        """The same matrix on tiny-dsv32: an indexer rotating halves on every layer, YaRN, group routing, MTP."""
        self.family_matrix("tiny-dsv32")

    def family_matrix(self, name):
        self.assertIn(name, FAMILY_ORACLES)
        shutil.rmtree(self.dir)
        self.dir = tempfile.mkdtemp()
        copy_fixture(name, self.dir)
        self.invariance_matrix()

    def invariance_matrix(self):
        rc, base, err = run(self.dir, {"PIN": "0"})  # also writes the first history
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(os.path.join(self.dir, ".coli_usage")))
        tight = "%.9f" % (self.smallest_budget() * 1.001)
        cases = [
            {"CAP": "1", "PIN": "0", "THREADS": "1"},
            {"CAP": "2", "PIN": "auto", "THREADS": "2"},
            {"CAP": "64", "PIN": "auto", "PIN_GB": "all"},
            {"PIN": "0", "RAM_GB": tight},
            {"PIN": "auto", "RAM_GB": tight, "THREADS": "1"},
            {"PIN": "auto", "PIN_GB": "all", "RAM_GB": tight},
            {"PIN": "auto", "PIN_GB": "0.00004", "REPIN": "1", "CAP": "2"},
            {"PIN": "auto", "PIN_GB": "0.00004", "REPIN": "3", "THREADS": "3"},
            {"CAP": "3", "RSS_GUARD_GB": "0.001", "PIN": "0"},
            {"PIN": "auto", "RAM_GB": "1000", "UBATCH": "1"},
            # the I/O paths
            {"PIN": "0", "CAP": "1", "PIPE": "0", "URING": "0"},
            {"PIN": "0", "CAP": "2", "PIPE": "1", "URING": "0", "PIPE_WORKERS": "3"},
            {"PIN": "0", "CAP": "1", "URING": "1"},
            {"PIN": "0", "CAP": "2", "DIRECT": "1"},
            {"PIN": "0", "CAP": "1", "DIRECT": "1", "URING": "0", "PILOT_REAL": "1"},
            {"PIN": "0", "CAP": "3", "PILOT": "1", "PILOT_K": "5"},
            {"PIN": "0", "CAP": "2", "PILOT_REAL": "1", "URING": "1", "THREADS": "1"},
            {"PIN": "0", "COLI_MMAP": "1"},
            {"PIN": "auto", "COLI_MMAP": "1", "MLOCK": "1"},
            {"PIN": "auto", "PIN_GB": "0.00004", "MLOCK": "1", "CAP": "1"},
            {"PIN": "0", "CAP": "1", "COLI_NUMA": "1"},
        ]
        qbase = None
        for env in ({"CAP": "1", "PIN": "0"}, {"CAP": "8", "URING": "1", "DIRECT": "1"}, {"PIPE": "0", "PILOT_REAL": "1", "CAP": "2"},
                    {"COLI_MMAP": "1", "THREADS": "1"}, {"PIN": "auto", "PIN_GB": "all"}):
            env.update({"EXPERT_BITS": "4", "DENSE_BITS": "8", "PROMPT": "placement", "TEMP": "0", "NGEN": "10", "TOKENS": "1"})
            rc, out, err = run(self.dir, env)
            self.assertEqual(rc, 0, "%s: %s" % (env, err))
            ids = ids_line(err, "generated tokens")
            qbase = qbase or ids
            self.assertEqual(ids, qbase, env)
        slots = set()
        for env in cases:
            rc, out, err = run(self.dir, env)
            self.assertEqual(rc, 0, "%s: %s" % (env, err))
            self.assertEqual(out, base, env)
            slots.add(int(err.split("LRU ")[1].split(" slots")[0]))
            if "RSS_GUARD_GB" in env:
                self.assertIn("over the", err)
        self.assertIn(1, slots)  # the tight budget really squeezed the cache

    def test_history_grows_hits(self):
        env = {"CAP": "1"}
        rc, out, first = run(self.dir, dict(env, PIN="0"))
        self.assertEqual(rc, 0, first)
        rc, out, second = run(self.dir, env)
        self.assertEqual(rc, 0, second)
        self.assertIn("pinned", second)
        hit = lambda err: float(err.split("experts: hit ")[1].split("%")[0])
        self.assertGreater(hit(second), hit(first))

    def test_bad_history_is_ignored(self):
        path = os.path.join(self.dir, ".coli_usage")
        rc, out, err = run(self.dir, {})
        self.assertEqual(rc, 0, err)
        with open(path) as f:
            text = f.read()
        for bad in (text[: len(text) // 2], text.replace("-1 4 8", "-1 5 8"), "garbage\n"):
            with open(path, "w") as f:
                f.write(bad)
            rc, out, err = run(self.dir, {"USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, err)
            self.assertIn("ignoring", err)
            self.assertIn(".coli_usage", err)
        rc, out, err = run(self.dir, {"PIN": os.path.join(self.dir, "missing")})
        self.assertEqual(rc, 2)
        self.assertIn("PIN=", err)

    def test_usage_save_off_keeps_history(self):
        rc, out, err = run(self.dir, {"USAGE_SAVE": "0"})
        self.assertFalse(os.path.exists(os.path.join(self.dir, ".coli_usage")))
        rc, out, err = run(self.dir, {})
        with open(os.path.join(self.dir, ".coli_usage")) as f:
            before = f.read()
        rc, out, err = run(self.dir, {"USAGE_SAVE": "0"})
        with open(os.path.join(self.dir, ".coli_usage")) as f:
            self.assertEqual(f.read(), before)


def usage_counts(path):
    """{(layer, expert): count} of a .coli_usage file."""
    out = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if line.startswith("#") or int(p[0]) < 0:
                continue
            out[(int(p[0]), int(p[1]))] = int(p[2])
    return out


class History(unittest.TestCase):
    """The usage history only ever grows by each run's counts: PIN=0 and
    PIN=<file> runs add theirs, concurrent runs both count, an unusable
    file is kept aside, a FIFO never blocks a run."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        copy_fixture(ORACLES[0], self.dir)
        self.path = os.path.join(self.dir, ".coli_usage")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def one_run(self):
        """The counts one oracle run adds (the runs are deterministic)."""
        rc, out, err = run(self.dir, {"PIN": "0"})
        self.assertEqual(rc, 0, err)
        c = usage_counts(self.path)
        os.unlink(self.path)
        return c

    def test_pin0_and_pin_file_add_to_history(self):
        c = self.one_run()
        self.assertTrue(c)
        for env in ({"PIN": "0"}, {"PIN": "0"}, {"PIN": os.path.join(self.dir, "other")}):
            if "other" in env["PIN"]:
                shutil.copy(self.path, env["PIN"])
            rc, out, err = run(self.dir, env)
            self.assertEqual(rc, 0, err)
        self.assertEqual(usage_counts(self.path), {k: 3 * v for k, v in c.items()})

    def test_concurrent_runs_both_count(self):
        c = self.one_run()
        procs = [subprocess.Popen([BIN, self.dir], env=env_base({"PIN": "0"}), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(4)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(usage_counts(self.path), {k: 4 * v for k, v in c.items()})

    def test_unusable_history_kept_aside(self):
        c = self.one_run()
        with open(self.path, "w") as f:
            f.write("# colibri expert usage\n-1 99 8\n")
        rc, out, err = run(self.dir, {})
        self.assertEqual(rc, 0, err)
        self.assertIn("unusable", err)
        with open(self.path + ".unusable") as f:
            self.assertIn("-1 99 8", f.read())
        self.assertEqual(usage_counts(self.path), c)

    def test_fifo_history_never_blocks(self):
        os.mkfifo(self.path)
        rc, out, err = run(self.dir, {}, timeout=30)
        self.assertEqual(rc, 0, err)
        self.assertIn("not a regular file", err)
        self.assertTrue(os.path.isfile(self.path))


class Synthetic(unittest.TestCase):
    """The invariance matrix on a synthetic GLM-5-shaped container (int4
    grouped experts, int8 dense, skewed routing) built by colibri-synth: 32
    experts per layer, so tight budgets, pinning and re-pinning really move
    experts around."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        synth = os.path.join(os.path.dirname(BIN) or ".", "colibri-synth")
        p = subprocess.run([synth, cls.dir, "--layers", "3", "--dense-layers", "1", "--experts", "32", "--topk", "4", "--hidden", "256",
                            "--moe-inter", "128", "--heads", "4", "--vocab", "352", "--group-size", "32", "--tokenizer",
                            os.path.join(FIXTURES, ORACLES[0], "tokenizer.json")], capture_output=True, timeout=120)
        if p.returncode:
            raise AssertionError(p.stderr.decode())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def gen(self, env):
        e = {"PROMPT": "the quick brown fox jumps over", "TEMP": "0", "NGEN": "24", "TOKENS": "1"}
        e.update(env)
        rc, out, err = run(self.dir, e)
        self.assertEqual(rc, 0, "%s: %s" % (env, err))
        return ids_line(err, "generated tokens"), err

    def test_matrix(self):
        base, err = self.gen({"PIN": "0", "USAGE_SAVE": "1"})  # also starts the history
        self.assertIn("int4-grouped", err)
        for env in ({"CAP": "1", "PIN": "0", "THREADS": "1"}, {"CAP": "5", "PIN": "auto"}, {"PIN": "auto", "PIN_GB": "all", "CAP": "4"},
                    {"PIN": "auto", "PIN_GB": "0.0005", "REPIN": "2", "CAP": "2"},
                    {"RAM_GB": "%.9f" % (smallest_budget(self, self.dir, {"PROMPT": "x"}) * 1.002), "PIN": "auto"},
                    {"URING": "1", "DIRECT": "1", "CAP": "3", "PIN": "0"}, {"PIPE": "1", "URING": "0", "PILOT_REAL": "1", "CAP": "6", "PIN": "0"},
                    {"COLI_MMAP": "1", "PIN": "auto"}, {"IDOT": "1", "SIMD": "scalar", "CAP": "2"}, {"RSS_GUARD_GB": "0.001", "CAP": "8"}):
            env.setdefault("USAGE_SAVE", "0")
            ids, err = self.gen(env)
            self.assertEqual(ids, base, env)

    def test_history_raises_hit_rate(self):
        d = tempfile.mkdtemp()
        try:
            for f in os.listdir(self.dir):
                if not f.startswith("."):
                    shutil.copy(os.path.join(self.dir, f), d)
            hits = []
            for i in range(3):
                rc, out, err = run(d, {"PROMPT": "the quick brown fox", "TEMP": "0", "NGEN": "16", "CAP": "4"})
                self.assertEqual(rc, 0, err)
                hits.append(float(err.split("experts: hit ")[1].split("%")[0]))
            self.assertGreater(hits[1], hits[0])
            self.assertGreaterEqual(hits[2], hits[1])
        finally:
            shutil.rmtree(d)


class IOFaults(unittest.TestCase):
    """Mirrors and I/O failures: a clean fallback or a clear error, never a
    crash or different tokens."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.mirror = tempfile.mkdtemp()
        copy_fixture(ORACLES[0], self.dir)
        shutil.copy(os.path.join(self.dir, "model.safetensors"), self.mirror)
        rc, self.base, err = run(self.dir, {"USAGE_SAVE": "0", "PIN": "0"})
        self.assertEqual(rc, 0, err)

    def tearDown(self):
        shutil.rmtree(self.dir)
        shutil.rmtree(self.mirror)

    def test_mirror_spreads_reads(self):
        for env in ({"COLI_DISK_WEIGHTS": "1,1"}, {}, {"COLI_DISK_WEIGHTS": "1,3", "DIRECT": "1"}):
            env.update({"COLI_MODEL_MIRROR": self.mirror, "PIN": "0", "CAP": "1", "USAGE_SAVE": "0"})
            rc, out, err = run(self.dir, env)
            self.assertEqual(rc, 0, err)
            self.assertEqual(out, self.base)
            line = [l for l in err.splitlines() if l.startswith("colibri: drives:")][0]
            reads = [int(x.split(" reads")[0].split("(")[-1]) for x in line.split("|")]
            self.assertTrue(reads[0] > 0 and reads[1] > 0, line)

    def test_mirror_that_differs_is_not_used(self):
        with open(os.path.join(self.mirror, "model.safetensors"), "r+b") as f:
            f.seek(100)
            f.write(b"X")
        rc, out, err = run(self.dir, {"COLI_MODEL_MIRROR": self.mirror, "COLI_DISK_WEIGHTS": "1,1", "PIN": "0", "CAP": "1", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, self.base)
        self.assertIn("missing or differs on a mirror", err)
        os.remove(os.path.join(self.mirror, "model.safetensors"))
        rc, out, err = run(self.dir, {"COLI_MODEL_MIRROR": self.mirror, "COLI_DISK_WEIGHTS": "1,1", "PIN": "0", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, self.base)

    def test_bad_mirror_settings(self):
        rc, out, err = run(self.dir, {"COLI_MODEL_MIRROR": "/nonexistent/mirror"})
        self.assertEqual(rc, 2)
        self.assertIn("COLI_MODEL_MIRROR: /nonexistent/mirror is not a directory", err)
        rc, out, err = run(self.dir, {"COLI_MODEL_MIRROR": self.mirror, "COLI_DISK_WEIGHTS": "1"})
        self.assertEqual(rc, 2)
        self.assertIn("COLI_DISK_WEIGHTS=1 is invalid", err)

    def test_injected_read_error(self):
        for env in ({"PIPE": "0"}, {"PIPE": "1", "URING": "0"}, {"URING": "1"}, {"DIRECT": "1"}):
            env.update({"PIN": "0", "CAP": "1", "USAGE_SAVE": "0", "COLI_IO_FAULT": "5"})
            rc, out, err = run(self.dir, env)
            self.assertEqual(rc, 2, "%s: %s" % (env, err))
            self.assertIn("model.safetensors: expert", err)
            self.assertIn("read failed: file truncated or I/O error", err)
            self.assertEqual(out, "")
        # a failing pinned-set load at startup is reported the same way
        run(self.dir, {"PIN": "0"})
        rc, out, err = run(self.dir, {"COLI_IO_FAULT": "2", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 2, err)
        self.assertIn("read failed", err)

    def test_mmap_refuses_combinations(self):
        for extra in ({"URING": "1"}, {"DIRECT": "1"}, {"PILOT_REAL": "1"}):
            env = dict(extra, COLI_MMAP="1")
            rc, out, err = run(self.dir, env)
            self.assertEqual(rc, 2)
            self.assertIn("COLI_MMAP=1 uses experts in place", err)


class NoLibs(unittest.TestCase):
    """Knobs that need an optional library explain themselves on a build
    without it, and the run continues on the other path (make test runs
    this against the build without liburing and libnuma)."""

    def test_optional_libraries(self):
        d = os.path.join(FIXTURES, ORACLES[0])
        rc, base, err = run(d, {"USAGE_SAVE": "0", "PIN": "0"})
        self.assertEqual(rc, 0, err)
        rc, out, err = run(d, {"USAGE_SAVE": "0", "PIN": "0", "URING": "1", "COLI_NUMA": "1"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, base)
        # each knob says what became of it, whichever of the two libraries
        # the build found (a machine may have libnuma-dev and not liburing-dev)
        if "URING=1: this build has no io_uring" not in err:
            self.assertIn("by io_uring batches", err)
        self.assertRegex(err, r"COLI_NUMA=1: (this build has no libnuma|single NUMA node|mbind refused)|, NUMA interleaved")
        if os.environ.get("COLI_EXPECT_NOLIBS") == "1":  # build/nolibs (tests/run.py) has neither
            self.assertIn("URING=1: this build has no io_uring", err)
            self.assertIn("COLI_NUMA=1: this build has no libnuma", err)
        # serve mode without libmicrohttpd is refused with the reason (an
        # unusable COLI_HOST makes a build with it fail fast too); which
        # one a build says depends on libmicrohttpd alone, not on io_uring
        rc, out, err = run(d, {"USAGE_SAVE": "0", "PIN": "0", "COLI_HOST": "256.0.0.1"}, args=["--serve", d], timeout=60)
        self.assertEqual(rc, 2, err)
        self.assertTrue("built without libmicrohttpd" in err or "COLI_HOST=256.0.0.1" in err, err)


class Cuda(unittest.TestCase):
    """The GPU (backend_cuda.h; tests/run.py runs this against build/cuda,
    the CUDA build, and build/cuda-host, whose "GPU" is tests/cuda_host.c's
    stand-in in host memory). With a GPU: every fixture's oracle passes with the
    dense matmuls on it, and the tokens equal the CPU's (CUDA=0), greedy and
    sampled, prefill and decode, for every dense format (int8, int4, int2,
    grouped int4 through DENSE_BITS), with copies of the pinned experts on
    the GPU (CUDA_EXPERT_GB unset) and without (0). Without one, or on a build without
    CUDA: CUDA=auto runs on the CPU (a CUDA build says so once), CUDA=1
    exits 2 with the reason."""

    @classmethod
    def setUpClass(cls):
        rc, out, err = run(os.path.join(FIXTURES, "tiny-q4"), {"CUDA": "1", "PROMPT": "x", "NGEN": "1", "USAGE_SAVE": "0"})
        cls.gpu = rc == 0
        cls.why = (err.strip().splitlines() or ["?"])[-1]

    def need_gpu(self):
        if not self.gpu:
            if os.environ.get("COLI_EXPECT_GPU") == "1":  # build/cuda-host always has its stand-in
                self.fail("CUDA=1 failed where a (stand-in) GPU is expected: " + self.why)
            self.skipTest("cuda: no GPU for this build: " + self.why)

    def test_without_a_gpu(self):
        if self.gpu:
            self.skipTest("gpu-absent: this machine has a GPU (the CPU fallback is tested where there is none)")
        d = os.path.join(FIXTURES, "tiny-q4")
        rc, out, err = run(d, {"CUDA": "1", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 2, err)
        self.assertRegex(err, r"colibri: CUDA=1: (this colibri was built without CUDA|no usable NVIDIA GPU or driver|no NVIDIA GPU)")
        rc, base, err0 = run(d, {"CUDA": "0", "USAGE_SAVE": "0"})
        rc2, out, err = run(d, {"USAGE_SAVE": "0"})
        self.assertEqual((rc, rc2), (0, 0), err)
        self.assertEqual(out, base)
        self.assertNotIn("CUDA", err0)
        self.assertLessEqual(err.count("colibri: CUDA:"), 1)
        if "built without CUDA" not in self.why:
            self.assertRegex(err, r"colibri: CUDA: (no usable NVIDIA GPU or driver|no NVIDIA GPU found)")
            self.assertIn("running on the CPU", err)

    def test_every_fixture_passes_on_the_gpu(self):
        self.need_gpu()
        for name in ORACLES:
            rc, out, err = run(os.path.join(FIXTURES, name), {"CUDA": "1", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, name + ": " + out + err)
            self.assertIn("-- PASS", out, name)
            self.assertRegex(err, r"colibri: CUDA: .*: \d+ dense matrices \(")
            if name.startswith("tiny-q"):  # quantized dense weights: they went through the GPU
                self.assertRegex(err, r"colibri: GPU: [1-9]\d* matmuls in [1-9]\d* calls \([1-9]\d*% of the dense ones", name)

    def test_tokens_equal_the_cpu(self):
        self.need_gpu()
        d = os.path.join(FIXTURES, "tiny-glm5")
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        for fx, extra in (("tiny-q4", {}), ("tiny-q4g32", {}), ("tiny-q8", {}), ("tiny-q2", {}), ("tiny-glm5", {"DENSE_BITS": "8"}),
                          ("tiny-glm5", {"DENSE_BITS": "4", "GROUP_SIZE": "16"}), ("tiny-glm5", {"DENSE_BITS": "2"}),
                          ("tiny-glm5-mtp", {"DENSE_BITS": "8"}), ("tiny-dsv3-q4", {})):
            d = os.path.join(FIXTURES, fx)
            pins = usage_all(d, os.path.join(tmp, fx + "-" + "-".join(extra.values()) + ".usage"))  # every expert pinned, so the GPU tier holds them
            for samp in ({"TEMP": "0"}, {"TEMP": "0.9", "SEED": "11"}):
                env = dict(PROMPT="The GPU and the CPU agree on", NGEN="24", TOKENS="1", USAGE_SAVE="0", UBATCH="5", PIN=pins, PIN_GB="all", **samp, **extra)
                runs = [run(d, dict(env, **c)) for c in ({"CUDA": "0"}, {"CUDA": "1"}, {"CUDA": "1", "CUDA_EXPERT_GB": "0"})]
                for rc, out, err in runs:
                    self.assertEqual(rc, 0, err)
                for r in runs[1:]:
                    self.assertEqual(ids_line(runs[0][2], "generated tokens"), ids_line(r[2], "generated tokens"), (fx, extra, samp))
                    self.assertEqual(runs[0][1], r[1])
                    self.assertRegex(r[2], r"colibri: GPU: [1-9]\d* matmuls")
                    self.assertIn("; attention 100%;", r[2])  # quantized kv_b: absorbed attention on the GPU
                self.assertIn("routed experts 0.0% from GPU memory", runs[2][2])
                if not extra.get("DENSE_BITS") and fx != "tiny-glm5-mtp":  # integer experts: all of them computed on the GPU
                    self.assertRegex(runs[1][2], r"colibri: CUDA: an expert tier of [1-9]\d* slots \([\d.]+ GB\) in GPU memory, [1-9]\d* of them filled")
                    self.assertRegex(runs[1][2], r"routed experts [1-9][\d.]*% from GPU memory")


    def test_attention_on_the_gpu(self):
        """Absorbed attention runs on the GPU with its latent cache when the
        GPU holds kv_b: over every causal key and over the indexer's choice
        (a prompt longer than index_topk), in prefill batches and decode,
        greedy and sampled, the tokens are CUDA=0's. Reconstructed attention
        (ABSORB=0) and f32 weights stay on the CPU and say so."""
        self.need_gpu()
        words = "the small engine ran the large model on a small machine and kept every token exact while the experts streamed from disk"
        prompt = words + ", " + words  # over 64 tokens: the indexer keeps 64 of them
        for fx, dense in (("tiny-q4", {}), ("tiny-q4g32", {}), ("tiny-dsv3-q4", {}), ("tiny-dsv32", {"DENSE_BITS": "8"})):
            d = os.path.join(FIXTURES, fx)
            indexer = fx != "tiny-dsv3-q4"  # DeepSeek-V3 has none; DeepSeek-V3.2 one on every layer (index_topk 6)
            for extra in ({"TEMP": "0"}, {"TEMP": "0.9", "SEED": "5", "UBATCH": "7"}, {"TEMP": "0", "ABSORB": "1", "UBATCH": "64", "THREADS": "3"}):
                env = dict(PROMPT=prompt, NGEN="20", TOKENS="1", USAGE_SAVE="0", **dense, **extra)
                rc0, out0, err0 = run(d, dict(env, CUDA="0"))
                rc1, out1, err1 = run(d, dict(env, CUDA="1"))
                self.assertEqual((rc0, rc1), (0, 0), err1)
                self.assertIn("attention, the indexer's scores and their caches (" if indexer else "attention and its latent cache (", err1)
                if indexer:  # every pass that scores keys, on the GPU
                    self.assertIn("; indexer 100%;", err1, (fx, extra))
                else:
                    self.assertNotIn("indexer", err1.split("colibri: GPU:")[1])
                # a long prefill batch takes the reconstructed path, on the CPU; ABSORB=1 and decode do not
                self.assertRegex(err1, r"; attention %s%%;" % ("100" if extra.get("ABSORB") else r"[1-9]\d*"), (fx, extra))
                self.assertEqual(ids_line(err0, "generated tokens"), ids_line(err1, "generated tokens"), (fx, extra))
                self.assertEqual(out0, out1)
        d = os.path.join(FIXTURES, "tiny-q4")
        env = dict(PROMPT=prompt, NGEN="8", TOKENS="1", USAGE_SAVE="0")
        runs = [run(d, dict(env, **c)) for c in ({"CUDA": "0"}, {"CUDA": "1", "CUDA_ATTN": "0"}, {"CUDA": "0", "ABSORB": "0"}, {"CUDA": "1", "ABSORB": "0"})]
        for base, r in ((runs[0], runs[1]), (runs[2], runs[3])):
            self.assertIn("; attention 0%;", r[2])
            self.assertEqual(ids_line(base[2], "generated tokens"), ids_line(r[2], "generated tokens"))
        self.assertIn("attention (CUDA_ATTN=0), norms and the router on the CPU", runs[1][2])
        rc, out, err = run(os.path.join(FIXTURES, "tiny-glm5"), {"CUDA": "1", "PROMPT": "x", "NGEN": "2", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("attention, norms and the router on the CPU", err)
        if "stand-in" in err:  # its XGPU_KEYS_OOM: the indexer's keys do not fit beside the latents, which still go
            env = dict(PROMPT=prompt, NGEN="8", TOKENS="1", USAGE_SAVE="0")
            rc0, out0, err0 = run(d, dict(env, CUDA="0"))
            rc1, out1, err1 = run(d, dict(env, CUDA="1", XGPU_KEYS_OOM="1"))
            self.assertEqual((rc0, rc1), (0, 0), err1)
            self.assertIn("attention and its latent cache (0.00 GB) too (the indexer's keys did not fit: its scores on the CPU)", err1)
            self.assertRegex(err1, r"; attention [1-9]\d*%; indexer 0%;")
            self.assertEqual(ids_line(err0, "generated tokens"), ids_line(err1, "generated tokens"))
        # a cache in fewer bits (KV_BITS, KV_INDEX_BITS) stays on the CPU, which reads it as stored: CUDA=0's tokens
        env = dict(PROMPT=prompt, NGEN="8", TOKENS="1", USAGE_SAVE="0")
        for q, says in (({"KV_BITS": "8"}, "attention (the KV cache in fewer bits, KV_BITS), norms and the router on the CPU"),
                        ({"KV_INDEX_BITS": "4"}, "too (the indexer's keys in fewer bits, KV_INDEX_BITS: its scores on the CPU)")):
            rc0, out0, err0 = run(d, dict(env, CUDA="0", **q))
            rc1, out1, err1 = run(d, dict(env, CUDA="1", **q))
            self.assertEqual((rc0, rc1), (0, 0), err1)
            self.assertIn(says, err1)
            self.assertRegex(err1, r"; indexer 0%;")
            self.assertEqual(ids_line(err0, "generated tokens"), ids_line(err1, "generated tokens"), q)

    def test_attention_cache_follows_the_host(self):
        """Serve mode's prefix cache replaces the host's KV rows with a stored
        conversation's (a KV image): the GPU's latent cache must follow, or
        the third answer below would attend to the second conversation's
        latents. Every answer equals a CUDA=0 server's."""
        self.need_gpu()
        from test_serve import Server, mhd_missing  # noqa: E402
        if mhd_missing():
            self.skipTest("mhd: this colibri was built without libmicrohttpd (serve mode)")
        words = "the small engine ran the large model on a small machine and kept every token exact "
        # both past index_topk (64): the indexer's key cache must follow too
        a = [{"role": "system", "content": "alpha " + words}, {"role": "user", "content": "Tell me about the engine"}]
        b = [{"role": "system", "content": "beta, a much longer system prompt than the first one has, so that its cache runs further " + words * 2},
             {"role": "user", "content": "And now something else entirely, with more words than before"}]
        answers = []
        for cuda in ("0", "1"):
            srv = Server({"CUDA": cuda, "CTX": "256", "USAGE_SAVE": "0"}, model=os.path.join(FIXTURES, "tiny-q4"))
            try:
                got = []
                for msgs in (a, b, a + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "more"}]):
                    st, body = srv.chat(msgs, max_tokens=6, temperature=0)
                    self.assertEqual(st, 200, body)
                    got.append((body["choices"][0]["message"]["content"], body["usage"]["prompt_tokens_details"]["cached_tokens"]))
            finally:
                srv.stop()
            self.assertGreater(got[2][1], 0, srv.log())  # the third request reused the first one's cache
            if cuda == "1":
                self.assertIn("attention, the indexer's scores and their caches (", srv.log())
            answers.append(got)
        self.assertEqual(answers[0], answers[1])

    def test_a_partial_expert_tier_and_idot_off(self):
        """CUDA_EXPERT_GB below what the used experts take puts some of
        them (the most used first) in GPU memory and leaves the rest on the
        CPU; IDOT=0 (the float path, which the GPU does not compute) keeps
        every matmul on the CPU and says so. Tokens are CUDA=0's."""
        self.need_gpu()
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        d = os.path.join(FIXTURES, "tiny-q4")
        pins = usage_all(d, os.path.join(tmp, "q4.usage"))
        env = dict(PROMPT="only some experts fit", NGEN="12", TOKENS="1", USAGE_SAVE="0", PIN=pins, PIN_GB="all", TEMP="0")
        rc, base, err0 = run(d, dict(env, CUDA="0"))
        self.assertEqual(rc, 0, err0)
        # 2 MoE layers of 8 experts of about 6 KB each (int4, 80 x 45): 50 KB holds some, not all
        rc, out, err = run(d, dict(env, CUDA="1", CUDA_EXPERT_GB="0.00005"))
        self.assertEqual(rc, 0, err)
        held = int(re.search(r"colibri: CUDA: an expert tier of (\d+) slots \([\d.]+ GB\) in GPU memory, \1 of them filled", err).group(1))
        self.assertTrue(0 < held < 16, err)
        share = float(re.search(r"routed experts ([\d.]+)% from GPU memory", err).group(1))
        self.assertTrue(0 < share < 100, err)
        self.assertEqual(ids_line(err, "generated tokens"), ids_line(err0, "generated tokens"))
        self.assertEqual(out, base)
        rc, base, err0 = run(d, dict(env, CUDA="0", IDOT="0"))
        rc2, out, err = run(d, dict(env, CUDA="1", IDOT="0"))
        self.assertEqual((rc, rc2), (0, 0), err)
        self.assertIn("IDOT=0: the GPU computes only the integer path, so every matmul stays on the CPU", err)
        self.assertNotIn("colibri: GPU:", err)
        self.assertEqual(ids_line(err, "generated tokens"), ids_line(err0, "generated tokens"))
        self.assertEqual(out, base)

    def test_a_failing_gpu_call_falls_back_to_the_cpu(self):
        """A GPU call that fails (COLI_CUDA_FAULT, as a CUDA error would)
        is said once; the CPU redoes it and computes the rest: the tokens
        are the CPU's, greedy and sampled, for a copy into the expert tier
        at startup and for dense and expert matmuls after it (experts only
        the tier held are then read from disk)."""
        self.need_gpu()
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        for fx in ("tiny-q4", "tiny-dsv3-q4"):
            d = os.path.join(FIXTURES, fx)
            pins = usage_all(d, os.path.join(tmp, fx + ".usage"))
            for samp in ({"TEMP": "0"}, {"TEMP": "0.9", "SEED": "5"}):
                env = dict(PROMPT="a GPU call fails midway", NGEN="16", TOKENS="1", USAGE_SAVE="0", UBATCH="3", PIN=pins, PIN_GB="all", **samp)
                rc, base, err0 = run(d, dict(env, CUDA="0"))
                self.assertEqual(rc, 0, err0)
                rc, out, err = run(d, dict(env, CUDA="1"))
                self.assertEqual(rc, 0, err)
                start = 3 * int(re.search(r"in GPU memory, (\d+) of them filled", err).group(1))  # the start's copies: calls 1..start
                for at in map(str, (1, start + 1, start + 7, start + 40)):
                    rc, out, err = run(d, dict(env, CUDA="1", COLI_CUDA_FAULT=at))
                    self.assertEqual(rc, 0, err)
                    self.assertEqual(ids_line(err, "generated tokens"), ids_line(err0, "generated tokens"), (fx, samp, at))
                    self.assertEqual(out, base)
                    self.assertEqual(err.count("(COLI_CUDA_FAULT); the CPU computes everything from here on"), 1, err)

    def test_the_expert_tier_fills_as_experts_run(self):
        """The GPU expert tier starts with the usage history's experts and
        takes experts that ran on the CPU as slots are empty or clearly
        colder; the pinned set skips what it holds. Tokens are CUDA=0's
        with copies in flight, with CUDA_FILL_MB=0 (no copies), and when
        the Nth GPU call fails at any point (a matmul, an expert copy, an
        expert only the GPU held, which is then read from disk)."""
        self.need_gpu()
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        d = os.path.join(FIXTURES, "tiny-q4")
        two = usage_all(d, os.path.join(tmp, "two.usage"), only={(1, 0), (1, 3)})  # layer 0 is dense
        for samp in ({"TEMP": "0"}, {"TEMP": "0.9", "SEED": "3"}):
            env = dict(PROMPT="experts move to the GPU as they run", NGEN="20", TOKENS="1", USAGE_SAVE="0", UBATCH="3", PIN=two, PIN_GB="all",
                       CUDA_EXPERT_GB="0.00004", **samp)  # 6 slots of 16 experts (about 6 KB each)
            rc, base, err0 = run(d, dict(env, CUDA="0"))
            self.assertEqual(rc, 0, err0)
            want = ids_line(err0, "generated tokens")
            rc, out, err = run(d, dict(env, CUDA="1"))
            self.assertEqual(rc, 0, err)
            self.assertIn("colibri: CUDA: an expert tier of 6 slots (0.00 GB) in GPU memory, 2 of them filled with the most used experts", err)
            self.assertRegex(err, r"experts \d+ KB each: 0 pinned \(0 KB\)")  # the history's two experts are the GPU's, not pinned too
            moved = int(re.search(r"colibri: GPU expert tier: (\d+) experts copied in during the run", err).group(1))
            self.assertGreaterEqual(moved, 4, err)  # the 4 empty slots at least
            self.assertRegex(err, r"\+ GPU [1-9][\d.]*%\), miss")
            self.assertEqual((ids_line(err, "generated tokens"), out), (want, base))
            rc, out, err = run(d, dict(env, CUDA="1", CUDA_FILL_MB="0"))
            self.assertEqual(rc, 0, err)
            self.assertIn("colibri: GPU expert tier: 0 experts copied in during the run", err)
            rc, _, err1 = run(d, dict(env, CUDA="1", CUDA_FILL_MB="0", PIN=usage_all(d, os.path.join(tmp, "all.usage")), PROMPT="x", NGEN="1"))
            self.assertEqual(rc, 0, err1)
            self.assertIn("6 of them filled", err1)
            self.assertIn("colibri: GPU expert tier: 0 experts copied in during the run, 0.00 MB/tok", err1)  # the start's copies are not the run's
            self.assertEqual((ids_line(err, "generated tokens"), out), (want, base))
            calls = int(re.search(r"colibri: GPU: \d+ matmuls in (\d+) calls", run(d, dict(env, CUDA="1", PIN_GB="0"))[2]).group(1))
            # 1-6: the startup copies; then every call of about one forward mid-run (each matmul and copy of a
            # GPU-held expert, whose job every thread must see fail before it is handed out again)
            for at in sorted({1, 5, 6, 7, 9, 30, 77, calls - 1} | set(range(calls // 2, calls // 2 + 40))):
                rc, out, err = run(d, dict(env, CUDA="1", PIN_GB="0", COLI_CUDA_FAULT=str(at)))
                self.assertEqual(rc, 0, err)
                self.assertEqual(err.count("(COLI_CUDA_FAULT); the CPU computes everything from here on"), 1, (at, err))
                self.assertEqual((ids_line(err, "generated tokens"), out), (want, base), (samp, at))

    def test_pin_auto_leaves_the_gpu_tiers_experts_to_the_lru(self):
        """PIN=auto asks only for the history's experts the GPU tier did not
        take: under a tight RAM budget the RAM they would have been pinned in
        goes to LRU slots, and the tokens stay CUDA=0's."""
        self.need_gpu()
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        d = os.path.join(FIXTURES, "tiny-q4")
        two = usage_all(d, os.path.join(tmp, "two.usage"), only={(1, 0), (1, 3)})
        # 800 KB: the fixed part (dense, KV, UBATCH=3's working set, reserve) leaves room for a few 13 KB slot rows
        env = dict(PROMPT="the pinned set skips the GPU's experts", NGEN="12", TOKENS="1", USAGE_SAVE="0", UBATCH="3", PIN=two, RAM_GB="0.0008",
                   CUDA_EXPERT_GB="0.00004", TEMP="0")
        plan = r"experts \d+ KB each: (\d+) pinned \(\d+ KB\), LRU (\d+) slots/layer"
        rc, base, err0 = run(d, dict(env, CUDA="0"))
        self.assertEqual(rc, 0, err0)
        pinned0, slots0 = map(int, re.search(plan, err0).groups())
        self.assertEqual(pinned0, 2, err0)  # without the GPU tier the history's two experts are pinned
        rc, out, err = run(d, dict(env, CUDA="1"))
        self.assertEqual(rc, 0, err)
        self.assertIn("2 of them filled with the most used experts", err)
        pinned, slots = map(int, re.search(plan, err).groups())
        self.assertEqual(pinned, 0, err)
        self.assertGreater(slots, slots0, (err0, err))
        self.assertEqual((ids_line(err, "generated tokens"), out), (ids_line(err0, "generated tokens"), base))


def usage_all(model, path, only=None):
    """A usage file naming every routed expert of model once (PIN=path PIN_GB=all pins them all), or those (layer, expert) in `only`."""
    c = load_json(os.path.join(model, "config.json"))
    L, E, nd = c["num_hidden_layers"], c["n_routed_experts"], c.get("first_k_dense_replace", 0)
    h = 2166136261
    for ch in c["model_type"].encode():  # the engine id: FNV-1a of the model type
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    rows = ["%d %d 1" % (l, e) for l in range(nd, L) for e in range(E) if only is None or (l, e) in only]
    with open(path, "w") as f:
        f.write("# colibri expert usage\n-1 %d %d\n-2 1 %d\n%s\n-3 %d %d\n" % (L, E, h, "\n".join(rows), len(rows), len(rows)))
    return path


def level_ok(level):
    """Whether this CPU (and build) runs kernel level `level`."""
    rc, out, err = run(os.path.join(FIXTURES, ORACLES[0]), {"SIMD": level, "PROMPT": "x", "NGEN": "1", "USAGE_SAVE": "0"})
    return not (rc == 2 and "this CPU lacks" in err)


def ids_line(err, what):
    line = [l for l in err.splitlines() if l.startswith("colibri: %s:" % what)][0]
    return [int(x) for x in line.split(":", 2)[2].split()]


class Generate(unittest.TestCase):
    """PROMPT mode against transformers: the chat template's ids and greedy
    generate() token for token; sampling reproducible per seed; NGEN, stop
    tokens and generation_config defaults honored; --tokenize."""

    def chat_run(self, name, extra=None):
        ref = load_json(os.path.join(FIXTURES, name, "ref.json"))["chat"]
        env = {"PROMPT": ref["user"], "THINK": "1" if ref["think"] else "0", "TEMP": "0", "TOKENS": "1",
               "NGEN": str(len(ref["generated_ids"])), "USAGE_SAVE": "0"}
        if ref["system"]:
            env["SYSTEM"] = ref["system"]
        env.update(extra or {})
        rc, out, err = run(os.path.join(FIXTURES, name), env)
        self.assertEqual(rc, 0, err)
        return ref, out, err

    def test_greedy_equals_transformers_generate(self):
        for name in [n for n in ORACLES if "chat" in load_json(os.path.join(FIXTURES, n, "ref.json"))]:
            for extra in ({}, {"CAP": "1", "PIN": "0", "UBATCH": "3"}):
                ref, out, err = self.chat_run(name, extra)
                self.assertEqual(ids_line(err, "prompt tokens"), ref["prompt_ids"], name)
                gen = ids_line(err, "generated tokens")
                want = ref["generated_ids"]
                cfg = load_json(os.path.join(FIXTURES, name, "generation_config.json"))
                if want and want[-1] in cfg["eos_token_id"]:  # transformers keeps the stop token, colibri stops before it
                    want = want[:-1]
                    self.assertIn("stopped: stop token", err)
                self.assertEqual(gen, want, name)
                if len(want) == len(ref["generated_ids"]):
                    self.assertEqual(out, ref["generated_text"])

    def test_seeded_sampling_is_reproducible(self):
        d = os.path.join(FIXTURES, ORACLES[0])
        env = {"PROMPT": "Hello", "TEMP": "0.9", "TOP_P": "0.9", "NGEN": "40", "USAGE_SAVE": "0"}
        outs = [run(d, dict(env, SEED=s))[1] for s in ("7", "7", "8")]
        self.assertEqual(outs[0], outs[1])
        self.assertNotEqual(outs[0], outs[2])
        rc, out, err = run(d, dict(env, CAP="1", PIN="0", THREADS="1", SEED="7"))
        self.assertEqual(out, outs[0])  # placement never changes sampled text either
        rc, out, err = run(d, {"PROMPT": "Hello", "TEMP": "0.9", "NGEN": "3", "USAGE_SAVE": "0"})
        self.assertRegex(err, r"seed \d+")

    def test_temperature_is_temp(self):
        """TEMPERATURE is TEMP under a name Windows does not take, and wins
        over it."""
        d = os.path.join(FIXTURES, ORACLES[0])
        base = {"PROMPT": "Hello", "NGEN": "12", "TOKENS": "1", "SEED": "3", "USAGE_SAVE": "0"}

        def gen(**kw):
            rc, out, err = run(d, dict(base, **kw))
            self.assertEqual(rc, 0, err)
            return out, ids_line(err, "generated tokens"), "| greedy" in err

        greedy, sampled = gen(TEMP="0"), gen(TEMP="0.9")
        self.assertTrue(greedy[2])
        self.assertFalse(sampled[2])
        self.assertEqual(gen(TEMPERATURE="0"), greedy)
        self.assertEqual(gen(TEMPERATURE="0.9"), sampled)
        self.assertEqual(gen(TEMP="0.9", TEMPERATURE="0"), greedy)
        rc, out, err = run(d, dict(base, TEMPERATURE="hot"))
        self.assertEqual(rc, 2)
        self.assertIn("TEMPERATURE=hot is invalid", err)

    def test_ngen_and_defaults(self):
        d = os.path.join(FIXTURES, ORACLES[0])
        rc, out, err = run(d, {"PROMPT": "Hi", "NGEN": "5", "TOKENS": "1", "USAGE_SAVE": "0", "SEED": "2"})  # a seed whose draw does not stop first
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(ids_line(err, "generated tokens")), 5)
        self.assertIn("temperature 1, top-k 50, top-p 0.95, min-p 0", err)  # tiny-glm5's generation_config
        if "tiny-glm52" in ORACLES:
            rc, out, err = run(os.path.join(FIXTURES, "tiny-glm52"), {"PROMPT": "Hi", "NGEN": "2", "USAGE_SAVE": "0"})
            self.assertIn("temperature 0.6, top-k 20, top-p 1, min-p 0.05", err)
        rc, out, err = run(d, {"PROMPT": "Hi", "NGEN": "2", "TEMP": "0", "USAGE_SAVE": "0"})
        self.assertIn("greedy", err)

    def test_stop_token(self):
        with tempfile.TemporaryDirectory() as t:
            copy_fixture(ORACLES[0], t)
            ref, out, err = self.chat_run(ORACLES[0])
            gen = ids_line(err, "generated tokens")
            cfg = load_json(os.path.join(t, "generation_config.json"))
            stop = gen[2]
            cfg["eos_token_id"] = cfg["eos_token_id"] + [stop]
            save_json(cfg, os.path.join(t, "generation_config.json"))
            env = {"PROMPT": ref["user"], "THINK": "1" if ref["think"] else "0", "TEMP": "0", "TOKENS": "1", "USAGE_SAVE": "0"}
            if ref["system"]:
                env["SYSTEM"] = ref["system"]
            rc, out, err = run(t, env)
            self.assertEqual(rc, 0, err)
            self.assertEqual(ids_line(err, "generated tokens"), gen[: gen.index(stop)])
            self.assertIn("stopped: stop token", err)

    def test_tokenizer_refusals(self):
        with tempfile.TemporaryDirectory() as t:
            copy_fixture(ORACLES[0], t)
            os.remove(os.path.join(t, "tokenizer.json"))
            rc, out, err = run(t, {"PROMPT": "Hi"})
            self.assertEqual(rc, 2)
            self.assertIn("tokenizer.json", err)
            with open(os.path.join(t, "tokenizer.json"), "w") as f:
                f.write('{"model": {"type": "BPE", "vocab": 5}}')
            rc, out, err = run(t, {"PROMPT": "Hi"})
            self.assertEqual(rc, 2)
            self.assertIn("tokenizer.json: pre_tokenizer", err)
            self.assertNotIn("plan:", err)  # refused before loading the model

    def test_tokenize_matches_tokenizers(self):
        vec = load_json(os.path.join(FIXTURES, "tokenizer", "vectors.json"))
        lines = []
        with open(os.path.join(FIXTURES, "tokenizer", "corpus.jsonl")) as f:
            for i, l in enumerate(f):
                raw = bytes.fromhex(json.loads(l))
                text = bytes.fromhex(vec["texts"][str(i)]).decode() if str(i) in vec["texts"] else raw.decode("utf-8")
                lines.append((i, text))
        for name in ("tiny-glm5", "glm-32k"):
            d = os.path.dirname(os.path.join(FIXTURES if name != "glm-32k" else ".", vec["tokenizers"][name]["path"])) if name == "glm-32k" else os.path.join(FIXTURES, name)
            stdin = "".join(json.dumps(t) + "\n" for i, t in lines[:400])
            p = subprocess.run([BIN, "--tokenize", "--jsonl", d], input=stdin.encode(), capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = [[int(x) for x in l.split()] for l in p.stdout.decode().splitlines()]
            self.assertEqual(got, [vec["tokenizers"][name]["ids"][i] for i, t in lines[:400]], name)
        with open(os.path.join(FIXTURES, "tokenizer", "corpus.jsonl")) as f:
            raw = bytes.fromhex(json.loads(f.readline()))
        p = subprocess.run([BIN, "--tokenize", os.path.join(FIXTURES, "tiny-glm5")], input=raw, capture_output=True, timeout=60)
        self.assertEqual([int(x) for x in p.stdout.split()], vec["tokenizers"]["tiny-glm5"]["ids"][0])
        p = subprocess.run([BIN, "--tokenize", "--jsonl", os.path.join(FIXTURES, "tiny-glm5")], input=b"not json\n", capture_output=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"stdin line 1 is not a JSON string", p.stderr)

    def test_kimi_tokenizer_end_to_end(self):
        """A model directory with Kimi K2's tiktoken.model and tokenizer_config.json and no
        tokenizer.json: --tokenize equals tiktoken on the corpus' last 300 lines and the
        Kimi lines (tests/fixtures/tokenizer-kimi/vectors.json); a raw prompt generates; a
        broken tiktoken.model is refused before the model loads, naming file and line."""
        kdir = os.path.join(FIXTURES, "tokenizer-kimi")
        vec = load_json(os.path.join(kdir, "vectors.json"))
        d = tempfile.mkdtemp()
        try:
            synth = os.path.join(os.path.dirname(BIN) or ".", "colibri-synth")
            p = subprocess.run([synth, d, "--layers", "2", "--dense-layers", "1", "--experts", "8", "--topk", "2", "--hidden", "128",
                                "--moe-inter", "64", "--heads", "2", "--vocab", "4218", "--group-size", "32"], capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            for f in ("tiktoken.model", "tokenizer_config.json"):
                shutil.copy(os.path.join(kdir, f), d)
            self.assertFalse(os.path.exists(os.path.join(d, "tokenizer.json")))
            lines = []
            with open(os.path.join(FIXTURES, "tokenizer", "corpus.jsonl")) as f:
                for l in f:
                    lines.append(bytes.fromhex(json.loads(l)).decode("utf-8", "replace"))
            lines += [bytes.fromhex(h).decode("utf-8") for h in vec["extra"]]
            first = vec["n_corpus"] - 300
            stdin = "".join(json.dumps(t) + "\n" for t in lines[first:])
            p = subprocess.run([BIN, "--tokenize", "--jsonl", d], input=stdin.encode(), capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = [[int(x) for x in l.split()] for l in p.stdout.decode().splitlines()]
            self.assertEqual(got, vec["ids"][first:])
            rc, out, err = run(d, {"PROMPT": "<|im_user|>user<|im_middle|>\u4e2d\u6587 HELLOworld<|im_end|>", "CHAT_TEMPLATE": "0",
                                   "NGEN": "4", "TEMP": "0", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, err)
            small = d + "-small"  # a model vocabulary below the tokenizer's ids: [PAD] (4215) is refused
            p = subprocess.run([synth, small, "--layers", "2", "--dense-layers", "1", "--experts", "8", "--topk", "2", "--hidden", "128",
                                "--moe-inter", "64", "--heads", "2", "--vocab", "4000", "--group-size", "32"], capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            for f in ("tiktoken.model", "tokenizer_config.json"):
                shutil.copy(os.path.join(kdir, f), small)
            rc, out, err = run(small, {"PROMPT": "hi[PAD]", "CHAT_TEMPLATE": "0", "NGEN": "1", "USAGE_SAVE": "0"})
            shutil.rmtree(small, ignore_errors=True)
            self.assertEqual(rc, 2, err)
            self.assertIn("tiktoken.model: token id 4215 is outside the model's vocabulary (4000)", err)
            with open(os.path.join(d, "tiktoken.model"), "a") as f:
                f.write("not-base64! 3960\n")
            rc, out, err = run(d, {"PROMPT": "hi", "CHAT_TEMPLATE": "0", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 2, err)
            self.assertIn("tiktoken.model: line 3961: the token is not base64", err)
            self.assertNotIn("plan:", err)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_deepseek_tokenizer_end_to_end(self):
        """A model directory with DeepSeek-V3's tokenizer pipeline: --tokenize
        equals tokenizers on the corpus' last 600 lines (DeepSeek's own cases
        among them); a raw prompt generates; without a template the special
        tokens choose DeepSeek-V3's chat format; a template colibri does
        not render is refused, saying so."""
        vec = load_json(os.path.join(FIXTURES, "tokenizer", "vectors.json"))
        d = tempfile.mkdtemp()
        try:
            synth = os.path.join(os.path.dirname(BIN) or ".", "colibri-synth")
            p = subprocess.run([synth, d, "--layers", "2", "--dense-layers", "1", "--experts", "8", "--topk", "2", "--hidden", "128",
                                "--moe-inter", "64", "--heads", "2", "--vocab", "4000", "--group-size", "32", "--tokenizer",
                                os.path.join(FIXTURES, "tokenizer", "deepseek.json")], capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = []
            with open(os.path.join(FIXTURES, "tokenizer", "corpus.jsonl")) as f:
                for i, l in enumerate(f):
                    raw = bytes.fromhex(json.loads(l))
                    lines.append(bytes.fromhex(vec["texts"][str(i)]).decode() if str(i) in vec["texts"] else raw.decode("utf-8"))
            first = len(lines) - 600
            stdin = "".join(json.dumps(t) + "\n" for t in lines[first:])
            p = subprocess.run([BIN, "--tokenize", "--jsonl", d], input=stdin.encode(), capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = [[int(x) for x in l.split()] for l in p.stdout.decode().splitlines()]
            self.assertEqual(got, vec["tokenizers"]["deepseek-v3"]["ids"][first:])
            rc, out, err = run(d, {"PROMPT": "Price 12345\u5186, www.example.com", "CHAT_TEMPLATE": "0", "NGEN": "4", "TEMP": "0",
                                   "USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, err)
            # no template shipped: DeepSeek's special tokens choose DeepSeek-V3's format
            rc, out, err = run(d, {"PROMPT": "Hello", "SYSTEM": "Be brief.", "NGEN": "2", "TEMP": "0", "TOKENS": "1", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, err)
            chat = [c for c in load_json(os.path.join(FIXTURES, "chat_templates.json"))["prompt"]
                    if c["format"] == "deepseek3" and c["system"] == "Be brief." and c["user"] == "Hello"][0]
            self.assertIn("prompt tokens: " + " ".join(map(str, chat["ids"])) + "\n", err)
            # --chat: the follow-up turn is the template's rendering of the second turn (closing the first
            # reply with <｜end▁of▁sentence｜>), id for id
            e = env_base({"NGEN": "3", "TEMP": "0", "TOKENS": "1", "USAGE_SAVE": "0"})
            p = subprocess.run([BIN, "--chat", d], input="Hi\nTell me a joke.\n".encode(), env=e, capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            turn = [c for c in load_json(os.path.join(FIXTURES, "chat_templates.json"))["turn"]
                    if c["format"] == "deepseek3" and c["user"] == "Tell me a joke."][0]
            lines = [l for l in p.stderr.decode().splitlines() if l.startswith("colibri: prompt tokens:")]
            self.assertEqual(len(lines), 2, p.stderr)
            self.assertTrue(lines[1].endswith(" " + " ".join(map(str, turn["ids"]))), (lines[1], turn["ids"]))
            # a template colibri does not render: refused, naming the way out
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"chat_template": "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"}, f)
            rc, out, err = run(d, {"PROMPT": "hi", "NGEN": "2", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 2, err)
            self.assertIn("the chat template that ships with the model is none colibri renders", err)
            self.assertIn("CHAT_TEMPLATE=0", err)
            rc, out, err = run(d, {"SERVE": "1", "COLI_PORT": "0", "CHAT_TEMPLATE": "0", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 2, err)
            self.assertIn("serve mode renders every request with it", err)
            rc, out, err = run(d, {"PROMPT": "hi", "CHAT_TEMPLATE": "0", "NGEN": "2", "USAGE_SAVE": "0"})
            self.assertEqual(rc, 0, err)
        finally:
            shutil.rmtree(d)


class Speculation(unittest.TestCase):
    """Speculative decoding with the MTP head (tiny-glm5-mtp): greedy output
    is token-identical to DRAFT=0 for every draft count, kernel level,
    expert placement, I/O path and quantized container; MTP=0 loads the main
    model alone; the end line reports the drafts."""
    FIX = os.path.join(FIXTURES, "tiny-glm5-mtp")

    def setUp(self):
        if not os.path.isdir(self.FIX):
            self.skipTest("mtp: %s is missing" % self.FIX)
        self.dir = tempfile.mkdtemp()
        copy_fixture("tiny-glm5-mtp", self.dir)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def gen(self, d, env):
        e = {"PROMPT": "Speculate on disks and experts", "TEMP": "0", "NGEN": "40", "TOKENS": "1", "USAGE_SAVE": "0"}
        e.update(env)
        rc, out, err = run(d, e)
        self.assertEqual(rc, 0, "%s: %s" % (env, err))
        return ids_line(err, "generated tokens"), err

    def test_deepseek_v3_mtp_greedy_identical(self):
        """DeepSeek-V3's MTP layer (tiny-dsv3: no indexer, YaRN) drafts too;
        greedy output is the same for every draft count."""
        d = os.path.join(FIXTURES, "tiny-dsv3")
        base, err = self.gen(d, {"DRAFT": "0"})
        self.assertEqual(len(base), 40)
        for env in ({"DRAFT": "1"}, {"DRAFT": "3"}, {"DRAFT": "-1", "THREADS": "1"}, {"DRAFT": "2", "CAP": "1", "PIN": "0"}):
            ids, err = self.gen(d, env)
            self.assertEqual(ids, base, env)
            self.assertRegex(err, r"speculation: \d+ drafted, \d+ accepted", env)

    def test_deepseek_v32_mtp_greedy_identical(self):
        """DeepSeek-V3.2's MTP layer runs its own indexer (tiny-dsv32); greedy
        output is the same for every draft count."""
        d = os.path.join(FIXTURES, "tiny-dsv32")
        base, err = self.gen(d, {"DRAFT": "0"})
        self.assertGreaterEqual(len(base), 16)  # this random model reaches a stop token after 20
        for env in ({"DRAFT": "1"}, {"DRAFT": "3", "THREADS": "1"}, {"DRAFT": "2", "CAP": "1", "PIN": "0"}):
            ids, err = self.gen(d, env)
            self.assertEqual(ids, base, env)
            self.assertRegex(err, r"speculation: \d+ drafted, \d+ accepted", env)

    def test_greedy_identical_everywhere(self):
        base, err = self.gen(self.dir, {"DRAFT": "0"})
        self.assertEqual(len(base), 40)
        self.assertNotIn("speculation:", err)
        levels = [l for l in ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni") if level_ok(l)]
        cases = [{"DRAFT": str(k)} for k in (1, 2, 3, 4, -1)]
        cases += [{"DRAFT": "3", "SIMD": l} for l in levels]
        cases += [
            {"DRAFT": "2", "CAP": "1", "PIN": "0", "THREADS": "1"},
            {"DRAFT": "3", "CAP": "2", "URING": "1", "DIRECT": "1"},
            {"DRAFT": "4", "PIN": "auto", "PIN_GB": "all"},
            {"DRAFT": "2", "COLI_MMAP": "1", "THREADS": "3"},
            {"DRAFT": "2", "PILOT_REAL": "1", "PIPE": "0", "CAP": "1"},
            {"DRAFT": "4", "UBATCH": "3"},  # k is capped below UBATCH
            {"DRAFT": "2", "UBATCH": "2"},
            {"DRAFT": "2", "UBATCH": "5", "NGEN": "40"},
            {"DRAFT": "3", "ABSORB": "0"},
            {"DRAFT": "1", "DRAFT_GUARD_PCT": "100", "DRAFT_WINDOW": "2", "DRAFT_PAUSE": "3"},
            {"MTP": "0"},
        ]
        for env in cases:
            ids, err = self.gen(self.dir, env)
            self.assertEqual(ids, base, env)
            if env.get("MTP") == "0":
                self.assertNotIn("speculation:", err)
                self.assertIn("MTP layer", err)
            else:
                self.assertRegex(err, r"speculation: \d+ drafted, \d+ accepted \([0-9.]+%\), [0-9.]+ tokens per forward", env)
        # integer weights: load-time quantization with IDOT, and converted containers
        qbase, _ = self.gen(self.dir, {"DRAFT": "0", "EXPERT_BITS": "4", "DENSE_BITS": "8"})
        for k in ("1", "3"):
            ids, _ = self.gen(self.dir, {"DRAFT": k, "EXPERT_BITS": "4", "DENSE_BITS": "8"})
            self.assertEqual(ids, qbase, k)
        conv = os.path.join(os.path.dirname(BIN) or ".", "colibri-convert")
        for flags in (["--expert-bits", "4", "--dense-bits", "8"], ["--expert-bits", "8", "--dense-bits", "4", "--group-size", "32"]):
            q = tempfile.mkdtemp()
            try:
                p = subprocess.run([conv, self.FIX, q] + flags, env=env_base(), capture_output=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                for f in ("tokenizer.json", "tokenizer_config.json"):
                    shutil.copy(os.path.join(self.FIX, f), q)
                qb, _ = self.gen(q, {"DRAFT": "0"})
                for env in ({"DRAFT": "2"}, {"DRAFT": "4", "CAP": "1", "PIN": "0"}, {"DRAFT": "3", "IDOT": "0"}):
                    ids, err = self.gen(q, env)
                    ref = qb if env.get("IDOT") != "0" else self.gen(q, {"DRAFT": "0", "IDOT": "0"})[0]
                    self.assertEqual(ids, ref, (flags, env))
            finally:
                shutil.rmtree(q)

    def test_ubatch_1_leaves_no_room(self):
        base, _ = self.gen(self.dir, {"DRAFT": "0"})
        ids, err = self.gen(self.dir, {"DRAFT": "2", "UBATCH": "1"})
        self.assertIn("UBATCH=1 leaves no room for drafts", err)
        self.assertNotIn("speculation:", err)
        self.assertEqual(ids, base)

    def test_sampling_runs_and_reports(self):
        """Sampled output with drafts is sampling's without them, token for
        token (sample.h's keyed race; spec.h), for fixed and automatic
        draft counts, and with top-k / top-p / min-p."""
        for extra, ks in (({"TEMP": "1"}, ("2", "-1")), ({"TEMP": "0.8", "TOP_K": "20", "TOP_P": "0.9", "MIN_P": "0.02"}, ("3",))):
            base, _ = self.gen(self.dir, dict(extra, SEED="7", DRAFT="0"))
            self.assertGreaterEqual(len(base), 12)  # 40, and 15 (a stop token) with the filters
            for k in ks:  # test_spec.c compares 12 seeds x 4 k; this runs under qemu too
                ids, err = self.gen(self.dir, dict(extra, SEED="7", DRAFT=k))
                self.assertIn("speculation:", err)
                self.assertEqual(ids, base, (extra, k))

    def test_per_row_int4_eh_proj_is_flagged(self):
        """eh_proj's embedding half underflows at per-row int4: the converter
        and the engine both say so; greedy output still matches DRAFT=0."""
        conv = os.path.join(os.path.dirname(BIN) or ".", "colibri-convert")
        q = tempfile.mkdtemp()
        try:
            p = subprocess.run([conv, self.FIX, q, "--expert-bits", "8", "--dense-bits", "8", "--mtp-bits", "4"], env=env_base(), capture_output=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"eh_proj", p.stderr)
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(self.FIX, f), q)
            base, _ = self.gen(q, {"DRAFT": "0"})
            ids, err = self.gen(q, {"DRAFT": "2"})
            self.assertIn("WARNING: the MTP layer's eh_proj", err)
            self.assertEqual(ids, base)
        finally:
            shutil.rmtree(q)

    def test_startup_line_says_what_the_mtp_layer_does(self):
        """Issue #32: the startup line said "not loaded (MTP=0)" while the
        head was loaded and drafting, when the MTP layer carries its own
        embed_tokens copy or config.json declares 2 MTP layers. Variants of
        tiny-glm5-mtp: the line says loaded (and what is not read), or not
        loaded and why; the drafts and tokens are the fixture's."""
        base, plain = self.gen(self.dir, {"DRAFT": "2"})
        _, off = self.gen(self.dir, {"MTP": "0"})
        st = os.path.join(self.dir, "model.safetensors")
        hdr, data = read_st(st)
        a, z = hdr["model.embed_tokens.weight"]["data_offsets"]
        hdr["model.layers.4.embed_tokens.weight"] = dict(hdr["model.embed_tokens.weight"], data_offsets=[len(data), len(data) + z - a])
        write_st(st, hdr, data + data[a:z])  # the layer's own copy of the embedding, as DeepSeek-V3's release ships
        ids, err = self.gen(self.dir, {"DRAFT": "2"})
        self.assertNotIn("not loaded", err)  # it said "not loaded (MTP=0)" here
        self.assertIn("MTP layer (model.layers.4) is loaded for speculative decoding; its own copy of embed_tokens is not read", err)
        self.assertRegex(err, r"speculation: [1-9]\d* drafted")
        self.assertEqual(ids, base)
        _, err = self.gen(self.dir, {"MTP": "0"})
        self.assertIn("MTP layer (model.layers.4, 48 tensors) is not loaded (MTP=0)", err)
        cfg = load_json(os.path.join(self.dir, "config.json"))
        cfg["num_nextn_predict_layers"] = 0
        save_json(cfg, os.path.join(self.dir, "config.json"))
        _, err = self.gen(self.dir, {})
        self.assertIn("MTP layer (model.layers.4, 48 tensors) is not loaded (config.json sets no num_nextn_predict_layers)", err)
        # num_nextn_predict_layers 2: a second MTP layer (layer 4's tensors again, as layer 5)
        hdr, data = read_st(st)
        for k in [k for k in hdr if k.startswith("model.layers.4.")]:
            a, z = hdr[k]["data_offsets"]
            hdr["model.layers.5." + k[len("model.layers.4."):]] = dict(hdr[k], data_offsets=[len(data), len(data) + z - a])
            data += data[a:z]
        write_st(st, hdr, data)
        cfg["num_nextn_predict_layers"] = 2
        save_json(cfg, os.path.join(self.dir, "config.json"))
        ids, err = self.gen(self.dir, {"DRAFT": "2"})
        self.assertIn("MTP layer (model.layers.4) is loaded for speculative decoding; its own copy of embed_tokens is not read "
                      "(the MTP layer embeds with model.embed_tokens); config.json declares 2 MTP layers, colibri drafts with the first "
                      "(chained): the other 1 (48 tensors) not loaded", err)
        self.assertNotIn("MTP=0", err)
        self.assertRegex(err, r"speculation: [1-9]\d* drafted")
        self.assertEqual(ids, base)
        _, err = self.gen(self.dir, {"MTP": "0"})
        self.assertIn("MTP layers (model.layers.4..5, 96 tensors) are not loaded (MTP=0)", err)
        self.assertIn("MTP: the checkpoint's MTP layer (model.layers.4) is loaded for speculative decoding\n", plain)
        self.assertIn("the checkpoint's MTP layer (model.layers.4, 47 tensors) is not loaded (MTP=0)", off)
        self.assertNotIn("is loaded", off)
        _, err = self.gen(os.path.join(FIXTURES, "tiny-glm5"), {})
        self.assertNotIn("MTP", err)  # no MTP layer: nothing to say

    def test_checkpoint_without_mtp_layer(self):
        """config.json declares the layer but the shards lack it: said once,
        no speculation, the same tokens as the main model alone."""
        base, _ = self.gen(self.dir, {"MTP": "0"})
        hdr, data = read_st(os.path.join(self.dir, "model.safetensors"))
        keep, out = {}, b""
        for k, v in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
            if k == "__metadata__" or k.startswith("model.layers.4."):
                continue
            a, z = v["data_offsets"]
            keep[k] = dict(v, data_offsets=[len(out), len(out) + z - a])
            out += data[a:z]
        write_st(os.path.join(self.dir, "model.safetensors"), keep, out)
        ids, err = self.gen(self.dir, {"DRAFT": "2"})
        self.assertEqual(ids, base)
        self.assertIn("declares an MTP layer but the checkpoint has none", err)
        self.assertIn("DRAFT=2: no MTP layer is loaded", err)
        self.assertNotIn("speculation:", err)
        ids, err = self.gen(os.path.join(FIXTURES, "tiny-glm5"), {"DRAFT": "3"})
        self.assertIn("DRAFT=3: no MTP layer is loaded (config.json declares none)", err)


class Session(unittest.TestCase):
    """Conversations across runs (KV_SAVE, KV_LOAD, SESSION; kv_persist.h):
    a resumed run prefills only the new turn; a speculating run's state
    resumes with or without drafts to the same tokens; a missing, damaged
    or foreign state file stops the run with exit 2 and is never
    overwritten. (tests/test_kv.c checks the bit-exactness of resuming.)"""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        copy_fixture("tiny-glm5-mtp", self.dir)
        self.kv = os.path.join(self.dir, "chat.coli_kv")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def gen(self, env, d=None, rc_want=0):
        e = {"TEMP": "0", "NGEN": "10", "TOKENS": "1", "USAGE_SAVE": "0", "DRAFT": "0"}
        e.update(env)
        rc, out, err = run(d or self.dir, e)
        self.assertEqual(rc, rc_want, "%s: %s" % (env, err))
        return (ids_line(err, "generated tokens") if rc == 0 else None), err

    def test_session_resumes_the_new_turn_only(self):
        _, err = self.gen({"PROMPT": "First question.", "SESSION": self.kv})
        self.assertIn("no such file yet", err)
        self.assertRegex(err, r"session: \d+ tokens saved to .*chat.coli_kv \(\d+ cached\)")
        self.assertEqual([f for f in os.listdir(self.dir) if ".tmp." in f], [])
        first = int(err.split("session: ")[1].split(" tokens")[0])
        ids, err = self.gen({"PROMPT": "Second.", "SESSION": self.kv})
        self.assertIn("session: resumed %d tokens" % first, err)
        new = int(re.search(r"\| \d+ cached, (\d+) to prefill", err).group(1))
        prompt = [l for l in err.splitlines() if l.startswith("colibri: prompt ") and " tok, " in l][0]
        self.assertEqual(int(prompt.split("prompt ")[1].split(" tok")[0]), new)  # only the new turn was prefilled
        self.assertLess(new, first)
        self.assertEqual(len(ids), 10)
        whole = int(err.split("colibri: prompt ")[1].split(" tokens |")[0])  # the conversation so far
        self.assertIn("session: %d tokens saved" % (whole + len(ids)), err)

    def test_speculating_state_resumes_either_way(self):
        self.gen({"PROMPT": "Draft along.", "KV_SAVE": self.kv, "DRAFT": "2"})
        plain, _ = self.gen({"PROMPT": "More.", "KV_LOAD": self.kv, "DRAFT": "0"})
        spec, err = self.gen({"PROMPT": "More.", "KV_LOAD": self.kv, "DRAFT": "3"})
        self.assertIn("speculation:", err)
        self.assertEqual(plain, spec)
        self.gen({"PROMPT": "Draft along.", "KV_SAVE": self.kv, "DRAFT": "0"})
        spec, err = self.gen({"PROMPT": "More.", "KV_LOAD": self.kv, "DRAFT": "2"})
        self.assertIn("holds no MTP drafting state", err)
        self.assertEqual(plain, spec)

    def test_long_mtp_queue_resumes_with_a_small_ubatch(self):
        """Drafting paused by the guard leaves many rows queued for the MTP
        layer; a run with a smaller UBATCH grows its queue to resume them and
        drafts at once, with the same tokens as without drafts."""
        _, err = self.gen({"PROMPT": "Queue up.", "KV_SAVE": self.kv, "DRAFT": "1", "DRAFT_GUARD_PCT": "100", "DRAFT_WINDOW": "1",
                           "DRAFT_PAUSE": "500", "NGEN": "40"})
        self.assertIn("with the MTP head's state", err)
        plain, _ = self.gen({"PROMPT": "More.", "KV_LOAD": self.kv, "DRAFT": "0"})
        spec, err = self.gen({"PROMPT": "More.", "KV_LOAD": self.kv, "DRAFT": "1", "UBATCH": "2"})
        self.assertEqual(plain, spec)
        self.assertRegex(err, r"speculation: [1-9]\d* drafted")

    def test_a_cache_in_fewer_bits_resumes_in_its_own_format_only(self):
        """KV_BITS / KV_INDEX_BITS (kvq.h): the file holds the rows as the
        cache does (its header's formats field says which), a run with the
        same formats resumes it with or without drafts to the same tokens,
        and a run whose cache has other formats refuses it by name (exit 2,
        the file kept)."""
        q = {"KV_BITS": "8", "KV_INDEX_BITS": "4"}
        _, err = self.gen(dict(q, PROMPT="Draft along.", KV_SAVE=self.kv, DRAFT="2"))
        self.assertIn("KV_BITS=8, KV_INDEX_BITS=4", err)  # the plan line
        with open(self.kv, "rb") as f:
            small = f.read()
        self.assertEqual(struct.unpack_from("<I", small, 68)[0], 8 | 4 << 8)
        self.gen({"PROMPT": "Draft along.", "KV_SAVE": self.kv, "DRAFT": "2"})
        self.assertLess(len(small), os.path.getsize(self.kv))  # the f32 state of the same turn
        with open(self.kv, "wb") as f:
            f.write(small)
        plain, _ = self.gen(dict(q, PROMPT="More.", KV_LOAD=self.kv, DRAFT="0"))
        spec, err = self.gen(dict(q, PROMPT="More.", KV_LOAD=self.kv, DRAFT="3"))
        self.assertIn("speculation:", err)
        self.assertEqual(plain, spec)
        for env, says in (({}, "KV_BITS=32 KV_INDEX_BITS=32"), ({"KV_BITS": "8"}, "KV_BITS=8 KV_INDEX_BITS=32")):
            _, err = self.gen(dict(env, PROMPT="More.", KV_LOAD=self.kv), rc_want=2)
            self.assertIn("saved with KV_BITS=8 KV_INDEX_BITS=4; this run keeps its cache in " + says, err)
            self.assertIn(self.kv, err)
        with open(self.kv, "rb") as f:
            self.assertEqual(f.read(), small)

    def test_bad_state_files_stop_the_run_and_are_kept(self):
        _, err = self.gen({"PROMPT": "x", "KV_LOAD": self.kv}, rc_want=2)
        self.assertIn("KV_LOAD=%s: no such file" % self.kv, err)
        self.gen({"PROMPT": "Keep me.", "SESSION": self.kv})
        with open(self.kv, "rb") as f:
            good = f.read()
        for name, data in (("truncated", good[:-9]), ("flipped", good[:100] + bytes([good[100] ^ 1]) + good[101:]), ("empty", b"")):
            with open(self.kv, "wb") as f:
                f.write(data)
            _, err = self.gen({"PROMPT": "Next.", "SESSION": self.kv}, rc_want=2)
            self.assertIn(self.kv, err, name)
            with open(self.kv, "rb") as f:
                self.assertEqual(f.read(), data, name)  # never overwritten
        with open(self.kv, "wb") as f:
            f.write(good)
        other = tempfile.mkdtemp()
        try:
            copy_fixture("tiny-glm5", other)
            _, err = self.gen({"PROMPT": "Next.", "KV_LOAD": self.kv}, d=other, rc_want=2)
            self.assertIn("saved by another model", err)
        finally:
            shutil.rmtree(other)
        _, err = self.gen({"PROMPT": "x", "KV_SAVE": os.path.join(self.dir, "no", "such", "dir.kv")}, rc_want=2)
        self.assertIn("cannot create", err)

    def test_only_a_regular_file_is_replaced(self):
        """Issue #32: KV_SAVE naming a device node replaced it with a
        regular file. A FIFO, directory, symbolic link, socket or device
        under KV_SAVE or SESSION is refused at startup (before the model is
        loaded: no plan line), naming the knob, the file and what it is, and
        left as it was; so is one that /save names in a chat."""
        target = os.path.join(self.dir, "target")
        with open(target, "w") as f:
            f.write("keep")
        makers = {"a FIFO": os.mkfifo, "a directory": os.mkdir, "a symbolic link": lambda p: os.symlink(target, p)}
        if hasattr(os, "mknod") and os.geteuid() == 0:
            makers["a character device"] = lambda p: os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        sock = socket.socket(socket.AF_UNIX)
        try:
            makers["a socket"] = lambda p: sock.bind(p)
            for what, make in makers.items():
                node = os.path.join(self.dir, what.split()[-1])
                make(node)
                before = os.lstat(node)
                for knob in ("KV_SAVE", "SESSION"):
                    _, err = self.gen({"PROMPT": "Hello.", knob: node}, rc_want=2)
                    self.assertIn("%s: %s: %s, not a regular file" % (knob, node, what), err)
                    self.assertNotIn("plan:", err)  # refused before anything was loaded
                    after = os.lstat(node)
                    self.assertEqual((stat.S_IFMT(after.st_mode), after.st_ino), (stat.S_IFMT(before.st_mode), before.st_ino), what)
                p = subprocess.run([BIN, "--chat", self.dir], input=("Hi.\n/save %s\n" % node).encode(), capture_output=True, timeout=120,
                                   env=env_base({"TEMP": "0", "NGEN": "2", "USAGE_SAVE": "0"}))
                self.assertEqual(p.returncode, 0)
                self.assertIn("%s: %s, not a regular file" % (node, what), p.stderr.decode())
                self.assertEqual(stat.S_IFMT(os.lstat(node).st_mode), stat.S_IFMT(before.st_mode), what)
        finally:
            sock.close()
        with open(target) as f:
            self.assertEqual(f.read(), "keep")  # never written through the link
        self.assertEqual([f for f in os.listdir(self.dir) if ".tmp." in f], [])


class Chat(unittest.TestCase):
    """--chat / CHAT=1: one user turn per line of stdin with the KV cache
    kept between turns: a later turn answers as a resumed one-shot run does
    (with and without MTP drafts); /save, /load, /reset; Ctrl-C at the
    prompt ends the chat cleanly."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        copy_fixture("tiny-glm5-mtp", self.dir)
        self.kv = os.path.join(self.dir, "c.coli_kv")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def chat(self, lines, env=None, args=None):
        e = env_base({"TEMP": "0", "NGEN": "8", "TOKENS": "1", "USAGE_SAVE": "0"})
        e.update(env or {})
        p = subprocess.run([BIN] + (args or ["--chat", self.dir]), input="".join(l + "\n" for l in lines).encode(), env=e,
                           capture_output=True, timeout=120)
        err = p.stderr.decode("utf-8", "replace")
        turns = [[int(x) for x in l.split("generated tokens:", 1)[1].split()] for l in err.splitlines() if l.startswith("colibri: generated tokens:")]
        return p.returncode, turns, err

    def one_shot(self, prompt, env):
        e = {"PROMPT": prompt, "TEMP": "0", "NGEN": "8", "TOKENS": "1", "USAGE_SAVE": "0"}
        e.update(env)
        rc, out, err = run(self.dir, e)
        self.assertEqual(rc, 0, err)
        return ids_line(err, "generated tokens")

    def test_a_refused_turn_does_not_end_the_chat(self):
        """A turn too long for CTX is refused with its reason and the chat
        answers the next line (it used to exit 2 with a stale loading error
        about model.safetensors.index.json)."""
        rc, turns, err = self.chat(["hi", "word " * 400, "hello"])
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(turns), 2, err)
        self.assertIn("but CTX is 256; raise CTX", err)
        self.assertNotIn("index.json", err)

    def test_turns_match_resumed_one_shot_runs(self):
        for draft in ("0", "2"):
            rc, turns, err = self.chat(["First turn.", "Second turn.", "Third."], {"DRAFT": draft})
            self.assertEqual(rc, 0, err)
            self.assertEqual(len(turns), 3, err)
            if os.path.exists(self.kv):
                os.unlink(self.kv)
            want = [self.one_shot(p, {"DRAFT": draft, "SESSION": self.kv}) for p in ("First turn.", "Second turn.", "Third.")]
            self.assertEqual(turns, want, draft)
            self.assertRegex(err, r"\| \d+ cached, \d+ to prefill")

    def test_commands(self):
        rc, turns, err = self.chat(["Hello.", "/save " + self.kv, "/reset", "Hello.", "/load " + self.kv, "Again.", "/bogus", "/quit", "Never."])
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(turns), 3, err)
        self.assertEqual(turns[0], turns[1])  # /reset: a fresh conversation
        self.assertIn("unknown command /bogus", err)
        self.assertEqual(turns[2], self.one_shot("Again.", {"KV_LOAD": self.kv}))  # /load continued the saved one
        rc, turns, err = self.chat(["/load " + os.path.join(self.dir, "none")])
        self.assertEqual(rc, 0, err)
        self.assertIn("no such file", err)
        rc, _, err = run(self.dir, {"CHAT": "1", "PROMPT": "x"})
        self.assertEqual(rc, 2)
        self.assertIn("unset PROMPT", err)

    def test_session_and_kv_save(self):
        rc, turns, err = self.chat(["One.", "Two."], {"SESSION": self.kv})
        self.assertEqual(rc, 0, err)
        self.assertEqual(err.count("tokens saved to"), 2)  # after every turn
        rc, more, err = self.chat(["Three."], {"SESSION": self.kv})
        self.assertIn("session: resumed", err)
        other = os.path.join(self.dir, "other.kv")
        rc, _, err = self.chat(["One."], {"KV_SAVE": other})
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(other))

    def test_ctrl_c_at_the_prompt_ends_the_chat(self):
        e = env_base({"TEMP": "0", "NGEN": "4", "USAGE_SAVE": "0", "KV_SAVE": self.kv})
        p = subprocess.Popen([BIN, "--chat", self.dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(l.decode("utf-8", "replace") for l in p.stderr))
        reader.start()
        p.stdin.write(b"Hello.\n")
        p.stdin.flush()
        deadline = time.time() + 60
        while not any(l.startswith("colibri: stopped:") for l in lines) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)  # the first answer is done: the chat waits at its prompt
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        reader.join()
        for f in (p.stdin, p.stdout, p.stderr):
            f.close()
        self.assertEqual(p.returncode, 0, "".join(lines))
        self.assertTrue(os.path.exists(self.kv))  # KV_SAVE at the end of the chat


class Refusals(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        src = os.path.join(FIXTURES, ORACLES[0])
        for f in os.listdir(src):
            shutil.copy(os.path.join(src, f), self.dir)
        self.st = os.path.join(self.dir, "model.safetensors")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def refused(self, *needles, env=None, args=None):
        rc, out, err = run(self.dir, env, args)
        self.assertEqual(rc, 2, out + err)
        for n in needles:
            self.assertIn(n, err)
        return err

    def edit(self, fn):
        h, data = read_st(self.st)
        data = fn(h, data)
        write_st(self.st, h, data)

    def test_missing_directory(self):
        self.refused("/nonexistent/model", "config.json", args=["/nonexistent/model"])

    def test_missing_config(self):
        os.remove(os.path.join(self.dir, "config.json"))
        self.refused("config.json", "No such file")

    def test_missing_reference(self):
        os.remove(os.path.join(self.dir, "ref.json"))
        self.refused("ref.json", "oracle self-test")

    def test_malformed_reference(self):
        ref = load_json(os.path.join(self.dir, "ref.json"))
        ref["prompt_ids"][0] = 10 ** 6
        save_json(ref, os.path.join(self.dir, "ref.json"))
        self.refused("ref.json", "prompt_ids[0]")

    def test_missing_tensor(self):
        def drop(h, data):
            h["model.norm.weight_renamed"] = h.pop("model.norm.weight")
            return data
        self.edit(drop)
        self.refused("tensor 'model.norm.weight' not found")

    def test_wrong_shape(self):
        def reshape(h, data):
            t = h["model.layers.0.self_attn.q_a_proj.weight"]
            t["shape"] = [t["shape"][1], t["shape"][0]]
            return data
        self.edit(reshape)
        self.refused("model.safetensors", "'model.layers.0.self_attn.q_a_proj.weight' has shape", "expected [48, 64]")

    def test_wrong_dtype(self):
        def to_u8(h, data):
            t = h["model.layers.1.mlp.experts.3.down_proj.weight"]
            t["dtype"] = "U8"
            n = 1
            for s in t["shape"]:
                n *= s
            t["shape"] = [n * 4]
            return data
        self.edit(to_u8)
        self.refused("'model.layers.1.mlp.experts.3.down_proj.weight'", "dtype U8")

    def quantize_tensor(self, name, wbytes, sbytes):
        """Replaces float tensor `name` by a U8 weight tensor of wbytes and an
        F32 .qs of sbytes (contents irrelevant: refused before use)."""
        h, data = read_st(self.st)
        tensors = sorted(((k, v) for k, v in h.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
        out, nh, off = b"", {"__metadata__": h.get("__metadata__", {})}, 0
        for k, v in tensors:
            b, e = v["data_offsets"]
            if k == name + ".qs":
                continue
            if k == name:
                parts = [(k, "U8", [wbytes], b"\x88" * wbytes), (k + ".qs", "F32", [sbytes // 4], b"\0" * sbytes)]
            else:
                parts = [(k, v["dtype"], v["shape"], data[b:e])]
            for pk, dt, shape, blob in parts:
                nh[pk] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
                out += blob
                off += len(blob)
        write_st(self.st, nh, out)

    def test_hostile_quantized_tensors(self):
        q = "model.layers.0.self_attn.q_a_proj.weight"  # [48, 64]
        self.quantize_tensor(q, 48 * 64, 4 * 47)  # int8 bytes, one scale short
        self.refused("'%s'" % q, "int8 weights [48, 64] need 192 scale bytes")
        self.quantize_tensor(q, 48 * 64 + 1, 4 * 48)  # weight bytes of no format
        self.refused("'%s'" % q, "match no format")
        self.quantize_tensor(q, 48 * 32, 4 * 48 * 5)  # int4 with 5 scales per row: no group size gives ceil(64/gs) = 5
        self.refused("'%s'" % q, "int4 weights [48, 64] need 192 scale bytes")

    def test_mixed_expert_formats(self):
        e = "model.layers.2.mlp.experts.5.up_proj.weight"  # [36, 64]
        self.quantize_tensor(e, 36 * 64, 4 * 36)
        self.refused("'%s'" % e, "unlike the other experts")

    def test_truncated_shard(self):
        with open(self.st, "r+b") as f:
            f.truncate(os.path.getsize(self.st) - 100)
        self.refused("model.safetensors", "past end of file")

    def config_edit(self, **kv):
        path = os.path.join(self.dir, "config.json")
        c = load_json(path)
        for k, v in kv.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        save_json(c, path)

    def test_config_disagreeing_with_itself(self):
        self.config_edit(head_dim=16)
        self.refused("config.json", "head_dim=16 disagrees with qk_rope_head_dim=8")
        self.config_edit(head_dim=8, qk_head_dim=31)
        self.refused("config.json", "qk_head_dim=31")
        self.config_edit(qk_head_dim=None, model_type="glm_moe_dsa\u0000x")
        self.refused("config.json", "model_type")
        self.config_edit(model_type="glm_moe_dsa", scoring_func="softmax")
        self.refused("config.json", "scoring_func")
        self.config_edit(scoring_func="sigmoid", mlp_bias=True)
        self.refused("config.json", "mlp_bias=true")
        self.config_edit(mlp_bias=None, rope_interleave=False)
        self.refused("config.json", "rope_interleave=false")

    def test_config_disagreeing_with_tensors(self):
        self.config_edit(n_shared_experts=0)
        self.refused("model.safetensors", "shared_experts", "n_shared_experts")
        self.config_edit(n_shared_experts=1, tie_word_embeddings=True)
        self.refused("lm_head.weight", "tie_word_embeddings")
        self.config_edit(tie_word_embeddings=False, n_routed_experts=4, num_experts_per_tok=2)
        self.refused("mlp.gate.weight", "expected [4, 64]")  # the router's shape tells first

    def test_mtp_layer_noted_other_tensors_listed(self):
        def add(h, data):
            for name in ("model.layers.4.eh_proj.weight", "model.layers.4.enorm.weight", "rotary_emb.inv_freq"):
                h[name] = {"dtype": "F32", "shape": [4], "data_offsets": [len(data), len(data) + 16]}
                data += b"\0" * 16
            return data
        self.edit(add)
        rc, out, err = run(self.dir, {"USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("MTP layer (model.layers.4, 2 tensors) is not loaded (config.json sets no num_nextn_predict_layers)", err)
        self.assertIn("1 tensor is not used by the model, e.g. 'rotary_emb.inv_freq'", err)
        def far(h, data):
            h["model.layers.7.enorm.weight"] = {"dtype": "F32", "shape": [4], "data_offsets": [len(data), len(data) + 16]}
            return data + b"\0" * 16
        self.edit(far)
        self.refused("model.layers.7.enorm.weight", "past num_hidden_layers")

    def test_nonfinite_weights(self):
        def poison(name, at):
            def f(h, data):
                b = h[name]["data_offsets"][0] + 4 * at
                return data[:b] + struct.pack("<f", float("inf")) + data[b + 4:]
            return f
        self.edit(poison("model.layers.2.mlp.experts.5.up_proj.weight", 7))
        self.refused("experts.5.up_proj.weight", "not finite", env={"EXPERT_BITS": "8"})
        self.refused("experts.5.up_proj.weight", "not finite", env={"PIN": "0"})
        shutil.copy(os.path.join(FIXTURES, ORACLES[0], "model.safetensors"), self.st)
        self.edit(poison("model.layers.0.self_attn.q_b_proj.weight", 3))
        self.refused("q_b_proj.weight", "not finite")
        self.refused("q_b_proj.weight", "non-finite", env={"DENSE_BITS": "8"})

    def test_fifo_inputs(self):
        for name in ("config.json", "model.safetensors"):
            p = os.path.join(self.dir, name)
            keep = p + ".keep"
            os.rename(p, keep)
            os.mkfifo(p)
            rc, out, err = run(self.dir, {"USAGE_SAVE": "0"}, timeout=30)
            self.assertEqual(rc, 2, err)
            self.assertIn(name + ": not a regular file", err)
            os.unlink(p)
            os.rename(keep, p)
        os.mkfifo(os.path.join(self.dir, "tokenizer.json.fifo"))
        os.rename(os.path.join(self.dir, "tokenizer.json.fifo"), os.path.join(self.dir, "tokenizer.json"))
        rc, out, err = run(self.dir, {"PROMPT": "hi", "USAGE_SAVE": "0"}, timeout=30)
        self.assertEqual(rc, 2, err)
        self.assertIn("tokenizer.json", err)
        self.assertIn("not a regular file", err)

    def test_bad_knob(self):
        self.refused("CAP=many", "integer", env={"CAP": "many"})
        self.refused("ABSORB=2", "one of auto, 0, 1", env={"ABSORB": "2"})

    def test_typo_warns(self):
        rc, out, err = run(os.path.join(FIXTURES, ORACLES[0]), {"UBACH": "4", "COLI_CAPP": "1", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("UBACH is not a colibri variable -- did you mean UBATCH?", err)
        self.assertIn("COLI_CAPP is not a colibri variable -- did you mean CAP?", err)

    def test_knob_hints(self):
        rc, out, err = run(os.path.join(FIXTURES, ORACLES[0]), {"COLI_FOO": "1", "cap": "2", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("unknown variable COLI_FOO", err)
        self.assertNotIn("COLI_FOO is not a colibri variable", err)
        self.assertIn("cap is not a colibri variable -- did you mean CAP?", err)
        rc, out, err = run(os.path.join(FIXTURES, ORACLES[0]), {"CAP": "1000", "USAGE_SAVE": "0"})
        self.assertEqual(rc, 0, err)
        self.assertIn("CAP=1000 exceeds the 8 routed experts", err)
        self.assertNotIn("does not fit", err)

    def test_tokenizer_without_chat_tokens_refused_before_loading(self):
        tj = os.path.join(self.dir, "tokenizer.json")
        t = load_json(tj)
        for a in t["added_tokens"]:
            if a["content"] == "<|user|>":
                a["content"] = "<|usr|>"
        save_json(t, tj)
        os.remove(self.st)  # would fail later: the refusal must come first
        err = self.refused("tokenizer.json", "<|user|>", "CHAT_TEMPLATE=0", env={"PROMPT": "hi"})
        self.assertEqual(err.count("tokenizer.json"), 1, err)

    def test_help_lists_registry(self):
        rc, out, err = run(None, args=["--help"])
        self.assertEqual(rc, 0)
        for k in ("CAP", "CTX", "THREADS", "ABSORB", "UBATCH"):
            self.assertIn(k, out)
        rc, out, err = run(None, args=[])
        self.assertEqual(rc, 2)


if __name__ == "__main__":
    unittest.main(verbosity=1)
