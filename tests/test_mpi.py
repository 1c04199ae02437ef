#!/usr/bin/env python3
"""Routed experts spread over MPI ranks (ranks.h, docs/mpi.md), end to end:
build/mpi/colibri under mpirun on one host with the TCP transport forced,
against the single-process build ($COLIBRI). Tokens must not depend on the
rank count or the placement, in one-shot runs, with MTP drafts, seeded
sampling and serve mode; a dead, stopped or mismatched rank must end the job
with a message, never a hang. Without mpicc and mpirun (make test builds
build/mpi where both exist) every test says "SKIP mpi"."""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN, FIXTURES, ORACLES, copy_fixture, env_base, run, serve_port  # noqa: E402

MPI_BIN = os.environ.get("COLIBRI_MPI", "build/mpi/colibri")
MPIRUN = shutil.which("mpirun")
TRAINED = os.path.join(FIXTURES, "trained-glm5")  # 64 experts, top-8, with its MTP layer
PROMPT = "def parse_args(argv):\n    "
GEN = re.compile(r"generated tokens:([ 0-9]*)")


def why_skip():
    if not MPIRUN:
        return "mpi: no mpirun on PATH (.ci/run installs Open MPI)"
    if not os.path.exists(MPI_BIN):
        return "mpi: %s is not built (make test builds it where mpicc and mpirun are found)" % MPI_BIN
    return None


def open_mpi():
    p = subprocess.run([MPIRUN, "--version"], capture_output=True, timeout=30)
    return b"Open MPI" in p.stdout + p.stderr


def mpi_cmd(n, args, binary=None):
    """mpirun of n ranks of binary (MPI_BIN) with args, on this host, the
    TCP transport forced, no core binding (a test lane's CPUs are the
    ranks' to share), root allowed (CI runs as root)."""
    cmd = [MPIRUN, "-np", str(n)]
    if open_mpi():
        cmd += ["--oversubscribe", "--bind-to", "none", "--mca", "btl", "tcp,self"]
    return cmd + [binary or MPI_BIN] + args


def mpi_env(extra=None):
    e = {"THREADS": "1", "USAGE_SAVE": "0", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
         "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    for k in ("HOME", "TMPDIR"):
        if k in os.environ:
            e[k] = os.environ[k]
    if "tsan" in MPI_BIN:  # Open MPI's own threads, which TSan cannot see into (tests/tsan_mpi.supp)
        e["TSAN_OPTIONS"] = "halt_on_error=1:exitcode=66:suppressions=" + os.path.abspath("tests/tsan_mpi.supp")
    e.update(extra or {})
    return env_base(e)


def mpirun(n, args, env=None, timeout=120, binary=None):
    p = subprocess.run(mpi_cmd(n, args, binary), env=mpi_env(env), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def tokens(err):
    m = GEN.search(err)
    return m.group(1).split() if m else None


class Base(unittest.TestCase):
    def setUp(self):
        why = why_skip()
        if why:
            self.skipTest(why)


class Oracle(Base):
    def test_every_fixture_passes_with_two_and_three_ranks(self):
        """The oracle (teacher-forced and greedy, MTP chains where the
        fixture has them) on every fixture, the experts spread over 2 and 3
        ranks; rank 0 says each rank's share and the job's traffic."""
        for fx in ORACLES:
            for n in (2, 3):
                with self.subTest(fixture=fx, ranks=n):
                    rc, out, err = mpirun(n, [os.path.join(FIXTURES, fx)])
                    self.assertEqual(rc, 0, err[-3000:])
                    self.assertRegex(out, r"-- PASS")
                    self.assertNotIn("FAIL", out)
                    self.assertIn("colibri: MPI: %d ranks;" % n, err)
                    for r in range(n):
                        self.assertRegex(err, r"colibri: MPI: rank %d: \d+ experts" % r)
                    self.assertRegex(err, r"colibri: MPI: %d ranks, \d+ forward rows: .* a row moved \(plan .*\)" % n)


class Tokens(Base):
    CONFIGS = (
        {"TEMP": "0", "DRAFT": "0"},
        {"TEMP": "0", "DRAFT": "-1"},
        {"TEMP": "0.8", "SEED": "11", "DRAFT": "-1"},
        {"TEMP": "0.8", "SEED": "11", "DRAFT": "0", "UBATCH": "3"},  # prefill in chunks of 3 rows
        {"TEMP": "0", "DRAFT": "0", "EXPERT_BITS": "4", "GROUP_SIZE": "32"},  # the integer path
        {"TEMP": "0", "DRAFT": "2", "PIN": "0"},  # no usage history: experts placed in id order
        {"TEMP": "0", "DRAFT": "0", "REPIN": "3"},  # re-pinning by each rank's own heat between tokens
    )

    def test_tokens_equal_one_process_for_one_to_four_ranks(self):
        for cfg in self.CONFIGS:
            env = dict(cfg, PROMPT=PROMPT, NGEN="24", TOKENS="1", THREADS="1", USAGE_SAVE="0")
            rc, _, err = run(TRAINED, env)
            self.assertEqual(rc, 0, err)
            want = tokens(err)
            self.assertTrue(want, err)
            for n in (1, 2, 3, 4):
                with self.subTest(cfg=cfg, ranks=n):
                    rc, _, merr = mpirun(n, [TRAINED], env)
                    self.assertEqual(rc, 0, merr[-3000:])
                    self.assertEqual(tokens(merr), want)
                    if n > 1 and cfg["DRAFT"] != "0":
                        self.assertRegex(merr, r"speculation: \d+ drafted")

    def test_rank_zero_keeps_the_whole_usage_history(self):
        """USAGE_SAVE: rank 0 sees every route, so the history it writes is
        the one a single process writes, whoever computed the experts."""
        dirs = [tempfile.mkdtemp(), tempfile.mkdtemp()]
        try:
            for d in dirs:
                copy_fixture("trained-glm5", d)
            env = {"PROMPT": PROMPT, "NGEN": "12", "TEMP": "0", "USAGE_SAVE": "1", "PIN": "0"}
            self.assertEqual(run(dirs[0], env)[0], 0)
            rc, _, err = mpirun(3, [dirs[1]], env)
            self.assertEqual(rc, 0, err[-3000:])
            with open(os.path.join(dirs[0], ".coli_usage"), "rb") as a, open(os.path.join(dirs[1], ".coli_usage"), "rb") as b:
                self.assertEqual(a.read(), b.read())
        finally:
            for d in dirs:
                shutil.rmtree(d, True)


class Job:
    """A colibri --serve process (cmd) on a free port; .log() is its
    stderr (every rank's, under mpirun)."""

    def __init__(self, cmd, env):
        self.logf = tempfile.TemporaryFile()
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=self.logf, start_new_session=True)
        self.port = serve_port(self.p, self.log)
        if self.port is None and "cannot serve HTTP" in self.log():
            self.stop()
            raise unittest.SkipTest("mhd: serve mode is not built in (no libmicrohttpd)")

    @classmethod
    def ranks(cls, n, env=None, model=TRAINED):
        e = {"COLI_PORT": "0", "SERVE_TIMEOUT": "30"}
        e.update(env or {})
        return cls(mpi_cmd(n, ["--serve", model]), mpi_env(e))

    def log(self):
        self.logf.seek(0)
        return self.logf.read().decode("utf-8", "replace")

    def pids(self):
        """{rank: pid} of the colibri processes of this job (each one's
        OMPI_COMM_WORLD_RANK or PMI_RANK)."""
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % d, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
            except OSError:
                continue
            if os.path.basename(argv0) != b"colibri" or os.getsid(int(d)) != self.p.pid:
                continue
            rank = env.get(b"OMPI_COMM_WORLD_RANK", env.get(b"PMI_RANK"))
            if rank is not None:
                out[int(rank)] = int(d)
        return out

    def complete(self, body, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        return r.status, json.loads(text)

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        self.logf.close()


class Serve(Base):
    def test_answers_equal_one_process(self):
        """Greedy and seeded requests, one after another and one continuing
        the first's prompt (prefix reuse), answered by 3 ranks exactly as by
        one process."""
        bodies = [{"prompt": PROMPT, "max_tokens": 20, "temperature": 0},
                  {"prompt": PROMPT, "max_tokens": 20, "temperature": 0.8, "seed": 5},
                  {"prompt": PROMPT + "return", "max_tokens": 16, "temperature": 0}]
        answers = []
        for job in (lambda: Job([BIN, "--serve", TRAINED], env_base({"COLI_PORT": "0", "THREADS": "1", "USAGE_SAVE": "0"})),
                    lambda: Job.ranks(3)):
            job = job()
            try:
                self.assertIsNotNone(job.port, job.log())
                got = []
                for b in bodies:
                    st, ans = job.complete(b)
                    self.assertEqual(st, 200, ans)
                    got.append(ans["choices"][0]["text"])
                answers.append(got)
            finally:
                job.stop()
        self.assertEqual(answers[0], answers[1])


class Failures(Base):
    def test_a_killed_rank_ends_the_job_within_ten_seconds(self):
        job = Job.ranks(3)
        try:
            self.assertIsNotNone(job.port, job.log())
            pids = job.pids()
            self.assertEqual(sorted(pids), [0, 1, 2], job.log())
            os.kill(pids[2], signal.SIGKILL)
            t0 = time.time()
            rc = job.p.wait(timeout=30)
            self.assertLess(time.time() - t0, 10)
            self.assertNotEqual(rc, 0)
            self.assertRegex(job.log(), r"rank 2\b")
        finally:
            job.stop()

    def test_a_stopped_rank_is_named_after_the_timeout(self):
        """A rank that stops answering (SIGSTOP: alive, so the launcher sees
        nothing) ends the job once MPI_TIMEOUT passes inside a forward."""
        job = Job.ranks(3, {"MPI_TIMEOUT": "2"})
        pids = {}
        try:
            self.assertIsNotNone(job.port, job.log())
            pids = job.pids()
            self.assertEqual(sorted(pids), [0, 1, 2], job.log())
            os.kill(pids[1], signal.SIGSTOP)
            t0 = time.time()
            try:
                job.complete({"prompt": PROMPT, "max_tokens": 8, "temperature": 0}, timeout=30)
            except (ConnectionError, http.client.HTTPException, OSError):
                pass  # the job ends under the request
            rc = job.p.wait(timeout=30)
            self.assertLess(time.time() - t0, 10)
            self.assertEqual(rc, 2)
            self.assertIn("MPI: rank 1 did not answer MoE layer", job.log())
        finally:
            for pid in pids.values():
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            job.stop()

    def test_ranks_that_opened_different_models_refuse_to_start(self):
        cmd = mpi_cmd(1, [os.path.join(FIXTURES, "tiny-glm5")]) + [":", "-np", "1", MPI_BIN, os.path.join(FIXTURES, "tiny-glm52")]
        p = subprocess.run(cmd, env=mpi_env(), capture_output=True, timeout=120)
        err = p.stderr.decode("utf-8", "replace")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("rank 1 opened another model than rank 0", err)
        self.assertNotIn("PASS", p.stdout.decode())

    def test_a_build_without_mpi_refuses_to_run_under_mpirun(self):
        rc, out, err = mpirun(2, [os.path.join(FIXTURES, "tiny-glm5")], binary=BIN)
        self.assertNotEqual(rc, 0)
        self.assertIn("this colibri is built without MPI", err)
        self.assertNotIn("PASS", out)


if __name__ == "__main__":
    unittest.main()
