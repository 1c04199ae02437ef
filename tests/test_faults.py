#!/usr/bin/env python3
"""Fault loops, as SQLite tests itself (stdlib only). The fault builds
(colibri-fault, colibri-convert-fault beside $COLIBRI) route every
allocation, read and write through tests/fault.c, which fails the Nth one
as XFAULT says. For every N:

- allocations: the run ends with the right answer or a clean error (exit 2,
  a message), never a crash, a wrong answer or (under ASan) a leak;
- reads, on every expert I/O path: EIO gives a clean error naming the file;
  a short read and EINTR are retried and change nothing;
- reads in serve mode: a read that fails while requests decode together
  ends those requests with 500 and stops the server (exit 2), saying why;
- writes of .coli_usage: a failed write leaves the old history, whole; a
  kill at any write step leaves the old history or the complete new one;
- the converter: a failed write or a kill at any write step never leaves a
  file under its final name that differs from a clean conversion, and a
  rerun completes with byte-identical output.
"""
import concurrent.futures
import filecmp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN, FIXTURES, copy_fixture, env_base  # noqa: E402

HERE = os.path.dirname(BIN) or "."
FAULT = os.path.join(HERE, "colibri-fault")
CONVERT = os.path.join(HERE, "colibri-convert-fault")
TINY = os.path.join(FIXTURES, "tiny-glm5")
JOBS = max(2, os.cpu_count() or 2)
SANITIZED = "asan" in HERE


def run(args, env, timeout=120):
    p = subprocess.run(args, env=env_base(env), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def counts(args, env):
    """The injector's counts for a fault-free run: {alloc, read, write, step}."""
    rc, out, err = run(args, dict(env, XFAULT="count"))
    line = [l for l in err.splitlines() if l.startswith("xfault: ")][-1].split()
    return rc, out, {line[i]: int(line[i + 1]) for i in range(1, len(line), 2)}


def every(n, fn):
    """fn(i) for i in 1..n on JOBS threads; the failures, in order."""
    with concurrent.futures.ThreadPoolExecutor(JOBS) as ex:
        return [r for r in ex.map(fn, range(1, n + 1)) if r]


def usage(path):
    with open(path) as f:
        return f.read()


class Engine(unittest.TestCase):
    PATHS = [("sync", {"PIPE": "0", "URING": "0"}), ("pool", {"PIPE": "1", "URING": "0"}), ("mmap", {"COLI_MMAP": "1"})]

    def setUp(self):
        self.base_env = {"PIN": "0", "USAGE_SAVE": "0", "CAP": "2", "THREADS": "1"}
        rc, self.want, _ = run([FAULT, TINY], self.base_env)
        self.assertEqual(rc, 0)
        self.assertTrue(self.want.endswith("PASS\n"), self.want)

    def test_every_allocation(self):
        rc, out, c = counts([FAULT, TINY], self.base_env)
        self.assertEqual(out, self.want)
        self.assertGreater(c["alloc"], 100)

        def one(n):
            rc, out, err = run([FAULT, TINY], dict(self.base_env, XFAULT="alloc:%d" % n))
            if rc == 0 and out == self.want:
                return None
            if rc == 2 and err.startswith("colibri: ") and "out of memory" in err and not out:
                return None
            return "allocation %d: exit %d, out %r, err %r" % (n, rc, out[-200:], err[-400:])
        bad = every(c["alloc"], one)
        self.assertEqual(bad, [], "%d of %d allocations mishandled; first: %s" % (len(bad), c["alloc"], bad[:1]))

    def test_every_allocation_and_read_while_speculating(self):
        """Generation with MTP drafts (tiny-glm5-mtp): each allocation and
        each read failing gives the same text or a clear error after a
        prefix of it."""
        mtp = os.path.join(FIXTURES, "tiny-glm5-mtp")
        env = dict(self.base_env, PROMPT="faults while drafting", TEMP="0", NGEN="12", DRAFT="2")
        rc, want, err = run([FAULT, mtp], env)
        self.assertEqual(rc, 0, err)
        self.assertIn("speculation:", err)
        rc, out, c = counts([FAULT, mtp], env)
        self.assertEqual(out, want)

        def one(what):
            def f(n):
                rc, out, err = run([FAULT, mtp], dict(env, XFAULT="%s:%d" % (what, n)))
                if rc == 0 and out == want:
                    return None
                if rc == 2 and want.startswith(out) and ("out of memory" in err or ".safetensors" in err or ".json" in err):
                    return None
                return "%s %d: exit %d, out %r, err %r" % (what, n, rc, out[-200:], err[-400:])
            return f
        for what in ("alloc", "read"):
            bad = every(c[what], one(what))
            self.assertEqual(bad, [], "%d of %d %ss mishandled; first: %s" % (len(bad), c[what], what, bad[:1]))

    def test_every_read_on_every_path(self):
        """Each read failing short, interrupted and with EIO, on each read
        path. Under the sanitizers (about 10x slower: 104 of this file's
        150 s) the first path takes every read and the others every 4th:
        the error handling they share is checked by the first, and make
        test runs every read of every path."""
        for pi, (name, env) in enumerate(self.PATHS):
            env = dict(self.base_env, **env)
            rc, out, c = counts([FAULT, TINY], env)
            self.assertEqual(out, self.want, name)
            stride = 4 if SANITIZED and pi else 1

            def one(n):
                if (n - 1) % stride:
                    return None
                for kind in ("short", "eintr", "eio"):
                    rc, out, err = run([FAULT, TINY], dict(env, XFAULT="read:%d:%s" % (n, kind)))
                    if kind != "eio" and (rc != 0 or out != self.want):
                        return "%s read %d %s: exit %d %r" % (name, n, kind, rc, err[-300:])
                    if kind == "eio" and not (rc == 0 and out == self.want) and not (
                            rc == 2 and not out and (".safetensors" in err or ".json" in err)):
                        return "%s read %d eio: exit %d %r" % (name, n, rc, err[-300:])
                return None
            bad = every(c["read"], one)
            self.assertEqual(bad, [], "%s: %d of %d reads mishandled; first: %s" % (name, len(bad), c["read"], bad[:1]))

    def serve(self, env):
        """colibri-fault --serve on a free port: (process, port, stderr file)."""
        import re
        import time
        log = tempfile.TemporaryFile()
        p = subprocess.Popen([FAULT, "--serve", TINY], env=env_base(dict(env, COLI_PORT="0", CTX="256")), stdout=subprocess.DEVNULL, stderr=log)
        t0, port = time.time(), None
        while not port and p.poll() is None and time.time() - t0 < 60:
            log.seek(0)
            m = re.search(rb"on http://[^:]+:(\d+) ", log.read())
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        return p, port, log

    def test_a_read_failure_while_serving_stops_the_server(self):
        """A read that fails while requests decode together (EIO on the
        first expert read after startup) ends each request in flight with
        500 naming the file (one still queued gets 503); the server then
        stops, exit 2, saying why."""
        import http.client
        import json
        import threading
        if "without libmicrohttpd" in run([FAULT, "--serve", TINY], {"COLI_PORT": "0", "COLI_HOST": "256.0.0.1"})[2]:
            self.skipTest("mhd: this colibri was built without libmicrohttpd")
        base = dict(self.base_env, PIPE="0", URING="0")  # preads, which the injector sees
        p, port, log = self.serve(dict(base, XFAULT="count"))
        self.assertTrue(port)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=60), 0)
        log.seek(0)
        line = [l for l in log.read().decode().splitlines() if l.startswith("xfault: ")][-1].split()
        log.close()
        startup = dict((line[i], int(line[i + 1])) for i in range(1, len(line), 2))["read"]
        p, port, log = self.serve(dict(base, XFAULT="read:%d:eio" % (startup + 1)))
        self.assertTrue(port)
        got = []

        def ask(i):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                c.request("POST", "/v1/completions", body=json.dumps({"prompt": "question %d" % i, "max_tokens": 4}),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                got.append((r.status, json.loads(r.read())))
                c.close()
            except OSError as e:  # the server stopped before answering this one
                got.append((None, repr(e)))
        ts = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        log.seek(0)
        err = log.read().decode("utf-8", "replace")
        log.close()
        self.assertEqual(rc, 2, (got, err[-2000:]))
        self.assertIn("stopping the server", err)
        self.assertIn(".safetensors", err.split("stopping the server")[1])
        self.assertIn(500, [st for st, _ in got], got)
        for st, b in got:  # in flight: 500 naming the file; still queued when the server stopped: 503
            if st == 500:
                self.assertIn(".safetensors", b["error"]["message"])
            elif st is not None:
                self.assertEqual((st, b["error"]["message"]), (503, "the server is shutting down"))

    def test_io_uring_read_errors(self):
        env = dict(self.base_env, URING="1")
        rc, out, err = run([FAULT, TINY], env)
        if "by io_uring batches" not in err:
            self.skipTest("io_uring: not used by this build or kernel")
        for n in range(1, 40):
            rc, out, err = run([FAULT, TINY], dict(env, COLI_IO_FAULT=str(n)))
            if rc == 0:
                self.assertEqual(out, self.want)
                continue
            self.assertEqual(rc, 2, err)
            self.assertIn("model.safetensors", err)
            self.assertIn("read failed", err)


class History(unittest.TestCase):
    """.coli_usage under write faults and kills: the old history, whole, or
    the complete new one; never a mix, never a leftover temporary."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        copy_fixture("tiny-glm5", self.dir)
        self.path = os.path.join(self.dir, ".coli_usage")
        self.env = {"PIN": "0", "THREADS": "1"}
        rc, _, err = run([FAULT, self.dir], self.env)
        self.assertEqual(rc, 0, err)
        self.old = usage(self.path)
        rc, _, err = run([FAULT, self.dir], self.env)
        self.new = usage(self.path)
        shutil.copy(self.path, self.path + ".saved")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def restore(self):
        shutil.copy(self.path + ".saved", self.path)
        return usage(self.path)

    def leftovers(self):
        return [f for f in os.listdir(self.dir) if ".tmp." in f]

    def test_write_faults_keep_history(self):
        before = self.restore()
        rc, out, c = counts([FAULT, self.dir], self.env)
        after = usage(self.path)
        self.restore()
        self.assertGreater(c["write"], 0)
        for n in range(1, c["write"] + 1):
            for kind in ("enospc", "eio"):
                rc, out, err = run([FAULT, self.dir], dict(self.env, XFAULT="write:%d:%s" % (n, kind)))
                self.assertEqual(rc, 0, err)
                self.assertIn("could not save expert usage", err)
                self.assertEqual(usage(self.path), before, "write %d %s" % (n, kind))
                self.assertEqual(self.leftovers(), [])
        self.assertNotEqual(after, before)

    def test_kill_at_every_write_step(self):
        before = self.restore()
        rc, out, c = counts([FAULT, self.dir], self.env)
        after = usage(self.path)
        self.restore()
        self.assertNotEqual(after, before)
        for n in range(1, c["step"] + 1):
            rc, out, err = run([FAULT, self.dir], dict(self.env, XFAULT="kill:%d" % n))
            self.assertEqual(rc, -signal.SIGKILL, err)
            self.assertIn(usage(self.path), (before, after), "kill at step %d" % n)
            self.restore()
        rc, out, err = run([FAULT, self.dir], self.env)  # a later run sweeps the dead writer's temporary
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.leftovers(), [])


class RouteTrace(unittest.TestCase):
    """ROUTE_TRACE on tiny-glm5's oracle run: an allocation that fails gives
    the right answer or a clean error, and a trace buffer that cannot grow
    stops the recording with a message, never the run; a failed write
    leaves no trace and says so; a kill at any write step leaves no trace
    or the complete one, and a later run sweeps the temporary."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "route.bin")
        self.env = {"PIN": "0", "USAGE_SAVE": "0", "CAP": "2", "THREADS": "1", "ROUTE_TRACE": self.path}
        rc, self.want, err = run([FAULT, TINY], self.env)
        self.assertEqual(rc, 0, err)
        with open(self.path, "rb") as f:
            self.good = f.read()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def trace(self):
        """The trace's bytes, or None; removed either way."""
        if not os.path.exists(self.path):
            return None
        with open(self.path, "rb") as f:
            b = f.read()
        os.remove(self.path)
        return b

    def test_every_allocation(self):
        os.remove(self.path)
        rc, out, c = counts([FAULT, TINY], self.env)
        self.assertEqual((rc, out), (0, self.want))
        self.trace()
        stopped = 0
        for n in range(1, c["alloc"] + 1):
            rc, out, err = run([FAULT, TINY], dict(self.env, XFAULT="alloc:%d" % n))
            b = self.trace()
            if rc == 2 and err.startswith("colibri: ") and "out of memory" in err and not out:
                continue
            if rc == 2 and "colibri: ROUTE_TRACE: " in err and ("out of memory" in err or os.strerror(12) in err):  # the answer given, the file not written
                self.assertEqual((out, b), (self.want, None), "allocation %d" % n)
                continue
            self.assertEqual((rc, out), (0, self.want), "allocation %d: %s" % (n, err[-400:]))
            if "the routing trace stops at" in err:
                stopped += 1
                self.assertTrue(b is None or (b[:24] == self.good[:24] and len(b) < len(self.good)), "allocation %d" % n)
            else:
                self.assertEqual(b, self.good, "allocation %d: %s" % (n, err[-400:]))
        self.assertGreater(stopped, 0, "no allocation failure reached the trace buffer")

    def test_write_faults_and_kills(self):
        os.remove(self.path)
        rc, out, c = counts([FAULT, TINY], self.env)
        self.assertEqual(self.trace(), self.good)
        for n in range(1, c["write"] + 1):
            rc, out, err = run([FAULT, TINY], dict(self.env, XFAULT="write:%d:eio" % n))
            b = self.trace()
            if rc == 2:
                self.assertIn("cannot write the routing trace", err)
                self.assertIsNone(b, "write %d" % n)
            else:
                self.assertEqual(b, self.good, "write %d: %s" % (n, err[-300:]))
            self.assertEqual([f for f in os.listdir(self.dir) if ".tmp." in f], [], "write %d" % n)
        for n in range(1, c["step"] + 1):
            rc, out, err = run([FAULT, TINY], dict(self.env, XFAULT="kill:%d" % n))
            self.assertEqual(rc, -signal.SIGKILL, err)
            self.assertIn(self.trace(), (None, self.good), "kill at step %d" % n)
        rc, out, err = run([FAULT, TINY], self.env)
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.trace(), self.good)
        self.assertEqual([f for f in os.listdir(self.dir) if ".tmp." in f], [])


class SessionFile(unittest.TestCase):
    """A conversation's state (KV_SAVE) under write faults and kills: the
    old file whole, or the complete new one; never a mix, and a later run
    sweeps a dead writer's temporary."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        copy_fixture("tiny-glm5", self.dir)
        self.path = os.path.join(self.dir, "chat.coli_kv")
        self.env = {"PIN": "0", "THREADS": "1", "USAGE_SAVE": "0", "TEMP": "0", "NGEN": "4", "KV_SAVE": self.path}
        rc, _, err = run([FAULT, self.dir], dict(self.env, PROMPT="old"))
        self.assertEqual(rc, 0, err)
        self.old = self.read()
        self.env["PROMPT"] = "new"

    def tearDown(self):
        shutil.rmtree(self.dir)

    def read(self):
        with open(self.path, "rb") as f:
            return f.read()

    def restore(self):
        with open(self.path, "wb") as f:
            f.write(self.old)

    def leftovers(self):
        return [f for f in os.listdir(self.dir) if ".tmp." in f]

    def test_write_faults_keep_the_old_state(self):
        rc, out, c = counts([FAULT, self.dir], self.env)
        new = self.read()
        self.assertNotEqual(new, self.old)
        self.assertGreater(c["write"], 0)
        for n in range(1, c["write"] + 1):
            self.restore()
            rc, out, err = run([FAULT, self.dir], dict(self.env, XFAULT="write:%d:eio" % n))
            if rc == 0:  # a write before the save (the text on stdout)
                self.assertEqual(self.read(), new, n)
                continue
            self.assertEqual(rc, 2, err)
            self.assertIn("cannot write", err)
            self.assertEqual(self.read(), self.old, "write %d" % n)
            self.assertEqual(self.leftovers(), [])

    def test_kill_at_every_step(self):
        self.restore()
        rc, out, c = counts([FAULT, self.dir], self.env)
        new = self.read()
        for n in range(1, c["step"] + 1):
            self.restore()
            rc, out, err = run([FAULT, self.dir], dict(self.env, XFAULT="kill:%d" % n))
            self.assertEqual(rc, -signal.SIGKILL, err)
            self.assertIn(self.read(), (self.old, new), "kill at step %d" % n)
        rc, out, err = run([FAULT, self.dir], self.env)  # sweeps what the killed writers left
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.leftovers(), [])


class Converter(unittest.TestCase):
    """colibri-convert under write faults and kills: nothing under a final
    name ever differs from a clean conversion; a rerun finishes the job."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.clean = os.path.join(self.tmp, "clean")
        rc, out, err = run([CONVERT, TINY, self.clean, "--expert-bits", "4", "--dense-bits", "8"], {})
        self.assertEqual(rc, 0, err)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    FLAGS = ["--expert-bits", "4", "--dense-bits", "8"]

    def final_names_wrong(self, dst, what):
        """Files under their final names that differ from the clean
        conversion's (the resume manifest and the lock change as it goes)."""
        bad = []
        for f in os.listdir(dst):
            if ".tmp" in f or f.startswith(".") or f == "colibri-convert.json":
                continue
            if not filecmp.cmp(os.path.join(dst, f), os.path.join(self.clean, f), shallow=False):
                bad.append("%s: %s differs" % (what, f))
        return bad

    def finish_wrong(self, dst, what):
        """A rerun without faults must finish with the clean bytes."""
        rc, out, err = run([CONVERT.replace("-fault", ""), TINY, dst] + self.FLAGS, {})
        if rc != 0:
            return ["%s, rerun: exit %d %s" % (what, rc, err[-300:])]
        return ["%s: %s differs after the rerun" % (what, f) for f in os.listdir(self.clean)
                if not filecmp.cmp(os.path.join(dst, f), os.path.join(self.clean, f), shallow=False)]

    def counts(self):
        dst = os.path.join(self.tmp, "count")
        rc, out, c = counts([CONVERT, TINY, dst] + self.FLAGS, {})
        self.assertEqual(rc, 0)
        shutil.rmtree(dst)
        return c

    def loop(self, n, xfault, want_rc, what):
        """Every point 1..n (every 8th under the sanitizers, which are ~10x
        slower): the faulty run, the names it left, the rerun."""
        stride = 8 if SANITIZED else 1

        def one(i):
            if (i - 1) % stride:
                return None
            dst = os.path.join(self.tmp, "%s%d" % (what, i))
            rc, out, err = run([CONVERT, TINY, dst] + self.FLAGS, {"XFAULT": xfault % i})
            bad = [] if rc == want_rc else ["%s %d: exit %d %s" % (what, i, rc, err[-300:])]
            bad += self.final_names_wrong(dst, "%s %d" % (what, i)) + self.finish_wrong(dst, "%s %d" % (what, i))
            shutil.rmtree(dst)
            return "; ".join(bad) or None
        bad = every(n, one)
        self.assertEqual(bad, [], "%d of %d %s points mishandled; first: %s" % (len(bad), n, what, bad[:1]))

    def test_write_faults(self):
        self.loop(self.counts()["write"], "write:%d:enospc", 2, "write")

    def test_kill_at_every_write_step(self):
        self.loop(self.counts()["step"], "kill:%d", -signal.SIGKILL, "kill")

if __name__ == "__main__":
    unittest.main()
