#!/usr/bin/env python3
"""colibri benchmark harness (`make bench`): machine limits, engine workloads, peer comparison.

  python3 bench/run.py [--quick] [--only SECTION,...] [--skip SECTION,...] [--repeats N]
                       [--out bench/results.json] [--no-peer] [--omp-default | --omp-spin]

Sections, in order: limits (memory and O_DIRECT disk bandwidth), kernels
(bench_quant), resident, streaming, history, iopaths, spec, serve, batch, grammar,
kvcache (attention over the KV cache's row formats), quality (formats and speculation on the trained fixture),
cuda (GPU; skipped without one), tokenizer, convert,
llamacpp; the limits are probed again at the end. Every figure is paired with
the limit it is judged against, measured in the same run; llama.cpp runs are
interleaved run by run with the colibri runs they are compared with (inside
the resident and streaming sections when those run). A row is marked
disturbed when other processes took more than 15% of the CPUs during one of
its runs or when the start and end probes of its limit differ by more than
15%. See bench/README.md for what each workload measures and the schema of
results.json. Standard library only; the llama.cpp peer (and the
Hugging Face tokenizer) are used when installed and skipped with a message
otherwise.

Environment: COLI_BENCH_CACHE (models, GGUFs, logs; default bench/cache),
COLI_BENCH_VENV (python venv with gguf; default $COLI_BENCH_CACHE/venv),
COLI_BENCH_LLAMA (llama.cpp build dir; default $COLI_BENCH_CACHE/llama.cpp/build),
COLI_BENCH_HF_PYTHON (a python that imports tokenizers), COLI_BENCH_MEMCG
(auto | 0: run streaming workloads in a memory cgroup when one can be made).
The synthetic models have random weights: generated text is noise in both
engines, only speed is compared.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import struct
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from ab import END_RE  # noqa: E402  (the end-of-run line, parsed as tools/ab.py does)

PROF_RE = re.compile(r"^prof: (.*) \| total ([\d.]+) s = wall ([\d.]+) s \| expert reads (?:busy|in flight) ([\d.]+) s, ([\d.]+) s of it hidden behind compute", re.M)
STAGE_RE = re.compile(r"([a-zA-Z/ ]+?) ([\d.]+) s \((\d+)%\)")
RECALL_RE = re.compile(r"prefetch: recall ([\d.]+)% \((\d+) of (\d+) routed experts were predicted; (\d+) predictions\), (\d+) read ahead, ([\d.]+) MB of them evicted unused")
PLAN_RE = re.compile(r"plan: budget ([\d.]+ [KMG]B) \| resident: dense ([\d.]+ [KMG]B), KV ([\d.]+ [KMG]B)(?: \([^)]*\))?, working set ([\d.]+ [KMG]B) \| "
                     r"experts ([\d.]+ [KMG]B) each: (\d+) pinned \(([\d.]+ [KMG]B)\), LRU (\d+) slots/layer")
READS_RE = re.compile(r"expert reads: (.*)")
STOP_RE = re.compile(r"stopped: (.*)")
DISKWAIT_RE = re.compile(r"disk wait (\d+)% of wall")
QPPL_RE = re.compile(r"^perplexity: (\S+) \u00b1 (\S+) over (\d+) tokens$", re.M)
QKLD_RE = re.compile(r"^kld: mean (\S+) \u00b1 (\S+), 99th percentile (\S+), top-1 agreement (\S+)%, mean delta-p (\S+)% over \d+ tokens$", re.M)
QSPEC_RE = re.compile(r"speculation: (\d+) drafted, (\d+) accepted \([\d.]+%\), ([\d.]+) tokens per forward")

# libgomp waiting: colibri runs inherit the user's environment (the engine's
# per-token path has its own thread team, team.h, and no OpenMP); these are
# the two settings the resident section compares, interleaved.
SPIN_ENV = {"GOMP_SPINCOUNT": "300000", "OMP_WAIT_POLICY": None}
DEFAULT_WAIT_ENV = {"GOMP_SPINCOUNT": None, "OMP_WAIT_POLICY": None}
OMP_VARS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")
BUSY_FRAC = 0.15    # a run during which other processes took more of the CPUs than this is disturbed
PROBE_DRIFT = 0.15  # start and end probes of a limit further apart than this disturb the rows judged against it
FUZZ_JSON = os.path.join(ROOT, "bench", "fuzz.json")

SYNTH_TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "tokenizer.json")
GLM5_EXPERT_INT4 = 3 * 2048 * 6144 // 2  # one GLM-5 routed expert's int4 weights (gate, up, down), bytes

# Synthetic models. Shapes are GLM-5's per expert (hidden 6144, moe_intermediate
# 2048: an int4 expert is 18.9 MB of weights + 2.4 MB of g64 scales) with fewer
# layers and experts; one dense layer first, as GLM-5 has three.
MODELS = {
    #          layers size-GB bits  role
    "small":  (2, 1.0, 4, "resident, fits easily"),
    "medium": (4, 4.0, 4, "resident, a few GB"),
    "large":  (4, 10.0, 4, "streaming: larger than the RAM budget given to the engine"),
    "small8": (2, 1.0, 8, "int8 experts (llama.cpp Q8_0 side by side)"),
}
QUICK_MODELS = {
    "small":  (2, 0.4, 4, "resident, fits easily"),
    "medium": (2, 0.8, 4, "resident"),
    "large":  (2, 2.0, 4, "streaming: larger than the RAM budget given to the engine"),
    "small8": (2, 0.4, 8, "int8 experts"),
}


def now_iso():
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt_bytes_gb(s):
    v, u = s.split()
    return float(v) * {"KB": 1e3, "MB": 1e6, "GB": 1e9}[u]


class Bench:
    def __init__(self, a):
        self.a = a
        self.cache = os.path.abspath(os.environ.get("COLI_BENCH_CACHE") or os.path.join(ROOT, "bench", "cache"))
        self.venv = os.environ.get("COLI_BENCH_VENV") or os.path.join(self.cache, "venv")
        self.llama = os.environ.get("COLI_BENCH_LLAMA") or os.path.join(self.cache, "llama.cpp", "build")
        self.colibri = os.path.join(ROOT, "colibri")
        self.models = QUICK_MODELS if a.quick else MODELS
        self.tag = "quick-" if a.quick else ""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.logdir = os.path.join(self.cache, "logs", stamp)
        os.makedirs(self.logdir, exist_ok=True)
        self.nlog = 0
        self.t0 = time.time()
        self.R = {"schema": "colibri-bench/1", "started": now_iso(), "quick": bool(a.quick), "logs": self.logdir,
                  "note": "Synthetic models have random weights: generated tokens are noise in every engine; compare speed only.",
                  "machine": {}, "build": {}, "limits": {}, "models": {}, "kernels": None, "workloads": [], "history": [],
                  "io_paths": [], "tokenizer": None, "convert": None, "llamacpp": None, "skipped": []}
        self.prompts = {}
        self.memcg = None
        self.last_others = None
        self.last_log = None
        self.peer_state = None  # None: not set up yet; True: llama-bench ready; False: skipped
        self.peer_extra = []    # llama-bench flags every later run gets (--repack 0 after an abort)
        self.paired = set()     # sections whose side-by-side rows are done
        # Engine runs (colibri and llama.cpp alike) get the user's environment:
        # colibri's per-token path runs on its own thread team (team.h: spins
        # 0.3 ms at barriers, then sleeps) and needs no GOMP_SPINCOUNT any more.
        # --omp-default removes GOMP_SPINCOUNT/OMP_WAIT_POLICY even where the
        # user set them; --omp-spin adds GOMP_SPINCOUNT=300000 (the old default).
        # The resident section compares default and spin waiting, interleaved.
        self.omp_user = {k: os.environ[k] for k in OMP_VARS if k in os.environ}
        if a.omp_default:
            self.omp_env = dict(DEFAULT_WAIT_ENV)
        elif a.omp_spin:
            self.omp_env = dict(SPIN_ENV)
        else:
            self.omp_env = {}
        # bench_quant's mm_matmul runs an OpenMP team per call: it gets
        # GOMP_SPINCOUNT=300000 (unless the user set libgomp's waiting, or
        # --omp-default), so its S=1 figures are the kernels' with threads
        # kept awake, as the engine's team keeps them; kernel.*.omp-default
        # shows the kernels with libgomp's default waiting
        if a.omp_default:
            self.kernel_env = dict(DEFAULT_WAIT_ENV)
        elif any(k in os.environ for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")):
            self.kernel_env = {}
        else:
            self.kernel_env = {"GOMP_SPINCOUNT": "300000"}
        self.R["omp_env"] = self.omp_env
        self.R["omp_env_user"] = self.omp_user
        self.R["kernels_env"] = self.kernel_env

    # ------------------------------------------------------------ helpers
    def say(self, msg):
        print("bench: " + msg, file=sys.stderr, flush=True)

    def skip(self, what, why):
        self.say("skipping %s: %s" % (what, why))
        self.R["skipped"].append({"what": what, "why": why})

    def log(self, name, cmd, env, out, err, rc, wall):
        self.nlog += 1
        p = os.path.join(self.logdir, "%03d-%s.log" % (self.nlog, re.sub(r"[^A-Za-z0-9_.-]+", "_", name)))
        with open(p, "w", encoding="utf-8") as f:
            f.write("# %s\n# env: %s\n# rc %s, wall %.2f s\n" % (" ".join(cmd), " ".join("%s=%s" % kv for kv in sorted(env.items()) if kv[0] != "PROMPT"), rc, wall))
            if "PROMPT" in env:
                f.write("# PROMPT (%d chars): %r\n" % (len(env["PROMPT"]), env["PROMPT"][:200]))
            f.write("## stderr\n%s\n## stdout (first 4000 chars)\n%s\n" % (err, out[:4000]))
        return p

    def run(self, name, cmd, env=None, timeout=1800, cgroup=None, check=True):
        """Runs cmd; returns (stdout, stderr, rc, wall seconds, peak RSS bytes, log path)."""
        full = dict(os.environ)
        for k, v in (env or {}).items():  # None removes a variable
            if v is None:
                full.pop(k, None)
            else:
                full[k] = v
        t = time.time()
        busy0 = cpu_busy_s()
        pre = None
        if cgroup:
            def pre(cg=cgroup):
                with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
        try:
            p = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=pre, cwd=ROOT)
        except OSError as e:
            if check:
                raise SystemExit("bench: cannot run %s: %s" % (cmd[0], e))
            return "", str(e), 127, 0.0, 0, None
        # read both pipes in threads and reap the child ourselves (os.wait4), for its peak RSS
        bufs = {}

        def drain(k, f):
            bufs[k] = f.read()
        th = [threading.Thread(target=drain, args=(k, f)) for k, f in (("out", p.stdout), ("err", p.stderr))]
        for x in th:
            x.start()
        status, ru, killed = None, None, False
        while status is None:
            pid, st, r = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status, ru = st, r
                break
            if time.time() - t > timeout and not killed:
                p.kill()
                killed = True
            time.sleep(0.05)
        for x in th:
            x.join()
        p.stdout.close()
        p.stderr.close()
        p.returncode = os.waitstatus_to_exitcode(status)
        rc = p.returncode
        wall = time.time() - t
        busy1 = cpu_busy_s()
        self.last_others = None
        if busy0 is not None and busy1 is not None and ru is not None:
            # CPU time other processes took while this command ran (its own user+sys subtracted)
            o = max(0.0, busy1 - busy0 - ru.ru_utime - ru.ru_stime)
            self.last_others = {"others_cpu_s": round(o, 2), "others_cpu_frac": round(o / (wall * (os.cpu_count() or 1)), 3) if wall > 0 else None}
        out, err = bufs.get("out", b""), bufs.get("err", b"")
        if killed:
            err += b"\nbench: killed after %d s\n" % timeout
        out, err = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        lp = self.log(name, cmd, env or {}, out, err, rc, wall)
        self.last_log = lp
        if rc != 0 and check:
            raise SystemExit("bench: %s failed (exit %d), log %s:\n%s" % (name, rc, lp, err[-3000:]))
        return out, err, rc, wall, ru.ru_maxrss * 1024 if ru else 0, lp

    # ------------------------------------------------------------ machine
    def machine(self):
        m = {"cpu": "?", "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        m["cpu"] = line.split(":", 1)[1].strip()
                        break
            with open("/proc/meminfo") as f:
                mi = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in f}
            m["mem_total_gb"] = round(mi["MemTotal"] / 1e9, 2)
            m["mem_available_gb"] = round(mi["MemAvailable"] / 1e9, 2)
            m["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
        except OSError:
            pass
        for idx in range(8):
            base = "/sys/devices/system/cpu/cpu0/cache/index%d/" % idx
            try:
                if open(base + "level").read().strip() == "3":
                    m["llc"] = open(base + "size").read().strip()
            except OSError:
                break
        st = os.statvfs(self.cache)
        m["cache_dir"] = self.cache
        m["cache_free_gb"] = round(st.f_bavail * st.f_frsize / 1e9, 1)
        try:
            dev = os.stat(self.cache).st_dev
            m["cache_device"] = "%d:%d" % (os.major(dev), os.minor(dev))
            best = ""
            with open("/proc/mounts") as f:
                for line in f:
                    src, mnt = line.split()[:2]
                    if self.cache.startswith(mnt) and len(mnt) > len(best):
                        best, m["cache_fs"] = mnt, "%s on %s (%s)" % (src, mnt, line.split()[2])
        except OSError:
            pass
        self.R["machine"] = m
        b = {}
        out, _, rc, _, _, _ = self.run("git", ["git", "rev-parse", "HEAD"], check=False)
        b["commit"] = out.strip() if rc == 0 else None
        out, _, rc, _, _, _ = self.run("git-status", ["git", "status", "--porcelain", "--untracked-files=no"], check=False)
        b["dirty"] = bool(out.strip()) if rc == 0 else None
        out, _, _, _, _, _ = self.run("colibri-help", [self.colibri, "--help"], check=False)
        b["colibri"] = out.splitlines()[0] if out else None
        out, _, _, _, _, _ = self.run("cc", [os.environ.get("CC", "cc"), "--version"], check=False)
        b["cc"] = out.splitlines()[0] if out else None
        self.R["build"] = b
        self.say("machine: %s, %s cores, %.1f GB (%.1f available), load %s" % (m["cpu"], m["cores"], m.get("mem_total_gb", 0),
                                                                            m.get("mem_available_gb", 0), " ".join(m.get("loadavg_start", []))))

    # ------------------------------------------------------------ models
    def model_dir(self, name):
        layers, size, bits, _ = self.models[name]
        return os.path.join(self.cache, "models", "%ssynth-%s-L%d-%gGB-int%d%s" % (self.tag, name, layers, size, bits, "-g64" if bits == 4 else ""))

    def ensure_model(self, name):
        d = self.model_dir(name)
        layers, size, bits, role = self.models[name]
        args = ["--size-gb", str(size), "--layers", str(layers), "--expert-bits", str(bits), "--tokenizer", SYNTH_TOKENIZER]
        if bits == 4:
            args += ["--group-size", "64"]
        if not os.path.exists(os.path.join(d, ".bench-complete")):
            need = size * 1.1 + 1.2
            free = os.statvfs(self.cache).f_bavail * os.statvfs(self.cache).f_frsize / 1e9
            if free < need + 2:
                raise SystemExit("bench: %.1f GB free in %s, model %s needs %.1f GB" % (free, self.cache, name, need))
            self.say("generating synthetic model %s (%s, %g GB of experts)" % (name, role, size))
            tmp = d + ".tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            t = time.time()
            self.run("synth-" + name, [os.path.join(ROOT, "colibri-synth"), tmp] + args, timeout=3600)
            with open(os.path.join(tmp, ".bench-complete"), "w") as f:
                f.write(" ".join(args) + "\n")
            shutil.rmtree(d, ignore_errors=True)
            os.rename(tmp, d)
            self.say("  %s written in %.0f s" % (d, time.time() - t))
        if name not in self.R["models"]:
            facts = model_facts(d)
            facts.update(path=d, role=role, synth_args=" ".join(args[:-2] if "--tokenizer" in args else args))
            self.R["models"][name] = facts
        return d

    def shards(self, d):
        return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors") or f.endswith(".gguf"))

    def drop_cache(self, paths):
        """Evicts the files from the page cache (fsync + POSIX_FADV_DONTNEED); returns bytes still cached (fincore) or None."""
        for p in paths:
            try:
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
            except OSError:
                pass
        if shutil.which("fincore"):
            try:
                out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES"] + list(paths), capture_output=True, text=True, timeout=60).stdout
                return sum(int(x) for x in out.split() if x.isdigit())
            except (OSError, subprocess.SubprocessError, ValueError):
                return None
        return None

    # ------------------------------------------------------------ memory cgroup
    def memcg_setup(self):
        """Finds a place to make memory cgroups (v2 with the memory controller, else v1) below our own cgroup."""
        if os.environ.get("COLI_BENCH_MEMCG", "auto") == "0":
            self.memcg = None
            self.R["limits"]["memcg"] = {"available": False, "why": "COLI_BENCH_MEMCG=0"}
            return
        why = []
        cands = []
        try:
            with open("/proc/self/cgroup") as f:
                lines = f.read().splitlines()
            mounts = [l.split() for l in open("/proc/mounts")]
        except OSError as e:
            self.R["limits"]["memcg"] = {"available": False, "why": str(e)}
            return
        for l in lines:
            hid, ctrl, path = l.split(":", 2)
            if hid == "0" and ctrl == "":
                for m in mounts:
                    if m[2] == "cgroup2":
                        base = m[1] + path
                        try:
                            if "memory" in open(os.path.join(base, "cgroup.controllers")).read().split():
                                cands.append(("v2", base))
                            else:
                                why.append("cgroup v2 at %s has no memory controller" % base)
                        except OSError as e:
                            why.append("cgroup v2 at %s: %s" % (base, e.strerror))
            elif "memory" in ctrl.split(","):
                for m in mounts:
                    if m[2] == "cgroup" and "memory" in m[3].split(","):
                        cands.append(("v1", m[1] + path))
        for kind, base in cands:
            probe = os.path.join(base, "colibri-bench-probe-%d" % os.getpid())
            try:
                os.mkdir(probe)
                knob = "memory.max" if kind == "v2" else "memory.limit_in_bytes"
                with open(os.path.join(probe, knob), "w") as f:
                    f.write(str(1 << 30))
                os.rmdir(probe)
                self.memcg = (kind, base)
                self.R["limits"]["memcg"] = {"available": True, "kind": "cgroup " + kind, "parent": base}
                self.say("memory cgroups: %s below %s (streaming runs of both engines get the same memory limit, page cache included)" % (kind, base))
                return
            except OSError as e:
                why.append("cgroup %s at %s: %s" % (kind, base, e.strerror))
                try:
                    os.rmdir(probe)
                except OSError:
                    pass
        self.memcg = None
        self.R["limits"]["memcg"] = {"available": False, "why": "; ".join(why) or "no memory cgroup hierarchy"}
        self.say("no memory cgroup: %s; streaming runs are not memory-limited beyond RAM_GB (see results.json)" % self.R["limits"]["memcg"]["why"])

    def cg_make(self, limit_bytes):
        if not self.memcg:
            return None
        kind, base = self.memcg
        self.ncg = getattr(self, "ncg", 0) + 1  # several at once (one per MPI rank)
        p = os.path.join(base, "colibri-bench-%d-%d-%d" % (os.getpid(), int(time.time() * 1000) % 10 ** 9, self.ncg))
        os.mkdir(p)
        with open(os.path.join(p, "memory.max" if kind == "v2" else "memory.limit_in_bytes"), "w") as f:
            f.write(str(int(limit_bytes)))
        if kind == "v2":
            try:
                with open(os.path.join(p, "memory.swap.max"), "w") as f:
                    f.write("0")
            except OSError:
                pass
        return p

    def cg_join(self, p):
        """A preexec_fn that moves the child into memory cgroup p (None: none)."""
        if not p:
            return None

        def pre():
            with open(os.path.join(p, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        return pre

    def cg_done(self, p):
        """Peak memory charged to the cgroup (bytes), then removes it."""
        if not p:
            return None
        kind = self.memcg[0]
        peak = None
        try:
            with open(os.path.join(p, "memory.peak" if kind == "v2" else "memory.max_usage_in_bytes")) as f:
                peak = int(f.read().split()[0])
        except (OSError, ValueError):
            pass
        if kind == "v1":
            try:
                with open(os.path.join(p, "memory.force_empty"), "w") as f:
                    f.write("0")
            except OSError:
                pass
        for _ in range(50):
            try:
                os.rmdir(p)
                break
            except OSError:
                time.sleep(0.1)
        return peak

    # ------------------------------------------------------------ prompts
    def prompt(self, model, n, offset=0):
        """A text of exactly n tokens (CHAT_TEMPLATE=0): words of tools/tok_train.txt from word `offset` on
        (repeated as needed), then " the" fillers (one token each) to make up the count."""
        key = (n, offset)
        if key in self.prompts:
            return self.prompts[key]
        with open(os.path.join(ROOT, "tools", "tok_train.txt"), encoding="utf-8") as f:
            words = f.read().split()
        o = offset % len(words)
        words = words[o:] + words[:o]
        tw = words * (n // len(words) + 2)

        def count(k):
            return self.tok_counts(model, [" ".join(tw[:k])])[0] if k else 0
        lo, hi = 0, min(len(tw), n)  # every word is at least one token
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(mid) <= n:
                lo = mid
            else:
                hi = mid - 1
        text = " ".join(tw[:lo])
        f = n - count(lo)
        for _ in range(16):
            txt = (text + " the" * f) if text else ("the" + " the" * (f - 1))
            c = self.tok_counts(model, [txt])[0]
            if c == n:
                self.prompts[key] = txt
                return txt
            f += n - c
            if f < 1:
                break
        raise SystemExit("bench: could not build a prompt of exactly %d tokens" % n)

    def tok_counts(self, model, texts):
        inp = "".join(json.dumps(t) + "\n" for t in texts).encode()
        p = subprocess.run([self.colibri, "--tokenize", "--jsonl", model], input=inp, capture_output=True, timeout=300)
        if p.returncode:
            raise SystemExit("bench: colibri --tokenize failed: %s" % p.stderr.decode()[-500:])
        return [len(l.split()) for l in p.stdout.decode().splitlines()]

    def usage_all(self, model):
        """A .coli_usage naming every routed expert once, for PIN=<file> PIN_GB=all (everything resident)."""
        c = self.R["models"][self.name_of(model)]["config"]
        L, E, nd = c["num_hidden_layers"], c["n_routed_experts"], c.get("first_k_dense_replace", 0)
        h = 2166136261
        for ch in b"glm_moe_dsa":
            h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
        lines = ["# colibri expert usage (bench: every expert once)", "-1 %d %d" % (L, E), "-2 1 %d" % h]
        n = 0
        for l in range(nd, L):
            for e in range(E):
                lines.append("%d %d 1" % (l, e))
                n += 1
        lines.append("-3 %d %d" % (n, n))
        p = os.path.join(self.cache, "%susage-all-%s" % (self.tag, os.path.basename(model)))
        with open(p, "w") as f:
            f.write("\n".join(lines) + "\n")
        return p

    def name_of(self, d):
        for k, v in self.R["models"].items():
            if v["path"] == d:
                return k
        raise KeyError(d)

    # ------------------------------------------------------------ colibri runs
    def crun(self, label, model, env, prompt_n, ngen, cold=False, cg_limit=None, timeout=3600, offset=0):
        """One colibri run in the user's environment + omp_env + env (None removes a variable); its parsed record."""
        e = dict(self.omp_env)
        e.update({"SEED": "1", "TEMP": "0", "USAGE_SAVE": "0", "CHAT_TEMPLATE": "0", "PIN": "0", "NGEN": str(ngen)})
        e.update(env)
        e["PROMPT"] = self.prompt(model, prompt_n, offset)
        cached = self.drop_cache(self.shards(model)) if cold else None
        cg = self.cg_make(cg_limit) if cg_limit else None
        try:
            out, err, rc, wall, rss, lp = self.run(label, [self.colibri, model], e, timeout=timeout, cgroup=cg, check=False)
        finally:
            peak = self.cg_done(cg)
        r = parse_colibri(err)
        r.update(label=label, rc=rc, wall_s=round(wall, 3), peak_rss=rss, log=lp, cgroup_peak=peak, cache_left_after_drop=cached,
                 env={k: v for k, v in e.items() if k != "PROMPT"}, **(self.last_others or {}))
        if rc != 0 or "decode_tps" not in r:
            self.say("  %s: colibri failed (exit %s), see %s" % (label, rc, lp))
            r["failed"] = True
        return r

    def workload(self, wid, engine, model, what, runs, value_key, unit, limit=None, extra=None):
        vals = [r.get(value_key) for r in runs if not r.get("failed")]
        w = {"id": wid, "engine": engine, "model": model, "what": what, "unit": unit, "n": len(vals),
             "value": median(vals), "min": min(vals) if vals else None, "max": max(vals) if vals else None}
        if limit:
            w.update(limit)
        if extra:
            w.update(extra)
        w["runs"] = [{k: v for k, v in r.items() if k not in ("env",)} for r in runs]
        if runs:
            w["env"] = runs[0].get("env")
        self.R["workloads"].append(w)
        return w

    # ------------------------------------------------------------ sections
    def others(self):
        """The CPU share other processes took during the last command, with its log, as a run record."""
        o = dict(self.last_others or {})
        o["log"] = self.last_log
        return o

    def mem_probe(self, when):
        """Memory read bandwidth, probed twice with bench_mem and once with bench_quant --probe (best of 2
        inside); every probe goes to limits.mem_probes with the CPU share others took meanwhile."""
        L = self.R["limits"]
        mib = "1024" if self.a.quick else "4096"
        for i in range(2):
            mo, _, _, _, _, _ = self.run("bench_mem-%s-%d" % (when, i), [os.path.join(ROOT, "build", "rel", "bench_mem"), "--json", "--mib", mib],
                                         timeout=600)
            o = self.others()
            got = json.loads(mo)
            L.setdefault("mem_bw_probes", []).append(dict(got, when=when, **o))
            res = got["results"]
            L.setdefault("mem_probes", []).append({"probe": "bench_mem", "when": when, "mib": got.get("mib"), "threads": res[-1]["threads"],
                                                   "gbs": {"1": res[0]["gbs"], "all": res[-1]["gbs"]},
                                                   "trusted": (o.get("others_cpu_frac") or 0) <= BUSY_FRAC, **o})
        bq = os.path.join(ROOT, "build", "rel", "bench_quant")
        qo, _, _, _, _, _ = self.run("bench_quant-probe-%s" % when, [bq, "--json", "--probe", "--mem", "512" if self.a.quick else "1536"],
                                     env=self.kernel_env, timeout=600)
        o = self.others()
        q = json.loads(qo)
        L["mem_probes"].append({"probe": "bench_quant", "when": when, "mib": q.get("probe_mib"), "threads": q.get("threads"),
                                "gbs": {"1": q["probe_gbs"]["1"], "all": q["probe_gbs"]["all"]},
                                "trusted": (o.get("others_cpu_frac") or 0) <= BUSY_FRAC, **o})
        got = [p for p in L["mem_probes"] if p["when"] == when]
        self.say("memory read bandwidth (%s): %s" % (when, ", ".join("%s %.1f GB/s (1 thread) %.1f GB/s (%s threads)%s" % (
            p["probe"], p["gbs"]["1"], p["gbs"]["all"], p["threads"], "" if p["trusted"] else " [others took %.0f%% of the CPUs]" %
            (100 * p["others_cpu_frac"])) for p in got)))

    def set_mem_limit(self):
        """limits.mem_bw_gbs: the best trustworthy probe of the run so far (any probe where none is trustworthy).
        A probe can only under-read the machine (other load, a waiting thread), so the highest undisturbed
        reading is the best estimate of what the memory system delivers."""
        L = self.R["limits"]
        ps = L.get("mem_probes") or []
        good = [p for p in ps if p["trusted"]] or ps
        out = dict(L.get("mem_bw_gbs") or {})
        src = {}
        for k in ("1", "all"):
            b = max(good, key=lambda p: p["gbs"][k])
            out[k] = b["gbs"][k]
            src[k] = "%s (%s)" % (b["probe"], b["when"])
        out["threads"] = max(p["threads"] or 1 for p in ps)
        out["source"] = src
        out["trusted"] = any(p["trusted"] for p in ps)
        out["how"] = ("best undisturbed probe of the run (others took <= %d%% of the CPUs): bench_mem (pthreads, 64-byte loads) twice and "
                      "bench_quant --probe (OpenMP, best of 2) once, at the start and at the end, and the probes of the bench_quant kernels run "
                      "(bench_quant-kernels)" % (100 * BUSY_FRAC))
        L["mem_bw_gbs"] = out
        return out

    def disk_probe_end(self):
        """The O_DIRECT probe again at the end: the expert size at the best queue depth of the start."""
        L = self.R["limits"]
        if not L.get("disk_best_qd"):
            return
        large = self.model_dir("large")
        cmd = [os.path.join(ROOT, "build", "rel", "bench_io"), "--json", "--time", "1" if self.a.quick else "2", "--size", str(L["disk_best_size"]),
               "--qd", str(L["disk_best_qd"])] + self.shards(large)
        out, _, _, _, _, _ = self.run("bench_io-end", cmd, timeout=600)
        o = self.others()
        x = json.loads(out)["results"][0]
        L["disk_probes"].append(dict(x, when="end", trusted=(o.get("others_cpu_frac") or 0) <= BUSY_FRAC, **o))
        self.say("disk (end): O_DIRECT %.1f MB reads at queue depth %d: %.2f GB/s" % (x["size"] / 1e6, x["qd"], x["gbs"]))

    def set_disk_limit(self):
        L = self.R["limits"]
        ps = [p for p in L.get("disk_probes") or [] if p["size"] == L.get("disk_best_size") and p["qd"] == L.get("disk_best_qd")]
        if not ps:
            return
        good = [p for p in ps if p["trusted"]] or ps
        b = max(good, key=lambda p: p["gbs"])
        L["disk_best_gbs"] = b["gbs"]
        L["disk_best_source"] = b["when"]
        L["disk_limit_name"] = "O_DIRECT %.1f MB reads at qd %d (best qd of %s)" % (
            L["disk_best_size"] / 1e6, L["disk_best_qd"], ",".join(str(q) for q in L.get("disk_qds", [])))

    def limits(self):
        L = self.R["limits"]
        bq = os.path.join(ROOT, "build", "rel", "bench_quant")
        mib = "512" if self.a.quick else "1536"
        args = ["--json", "--time", "0.15" if self.a.quick else "0.2", "--mem", mib]
        self.mem_probe("start")
        self.set_mem_limit()
        if not self.a.quick:
            # the same probe over a buffer the size of bench_quant's matrix sets: how much a large LLC adds
            mo, _, _, _, _, _ = self.run("bench_mem-1536", [os.path.join(ROOT, "build", "rel", "bench_mem"), "--json", "--mib", "1536"], timeout=600)
            L["mem_bw_gbs_1536mib"] = {str(x["threads"]): x["gbs"] for x in json.loads(mo)["results"]}
        if self.section_on("kernels"):
            self.say("kernels: bench_quant (matvec and batches per format)%s" % (" with " + env_str(self.kernel_env) if self.kernel_env else ""))
            out, err, _, _, _, _ = self.run("bench_quant", [bq] + args, env=self.kernel_env, timeout=1800)
            kq = self.others()
            q = json.loads(out)
            # the same probe, run before every format and at the end of the kernels: a candidate for the limit too
            L["mem_probes"].append({"probe": "bench_quant-kernels", "when": "start", "mib": q.get("set_mib"), "threads": q.get("threads"),
                                    "gbs": {"1": q["probe_gbs"]["1"], "all": q["probe_gbs"]["all"]},
                                    "trusted": (kq.get("others_cpu_frac") or 0) <= BUSY_FRAC, **kq})
            self.set_mem_limit()
            L["mem_bw_gbs"]["bench_quant_probe"] = q.get("bandwidth_gbs", q.get("probe_gbs"))
            if self.kernel_env.get("GOMP_SPINCOUNT"):
                # the same kernel with libgomp's defaults: what the OpenMP wake-up costs here
                self.say("kernels: int4 g64 again with the default OpenMP environment")
                o2, _, _, _, _, _ = self.run("bench_quant-omp-default", [bq, "--json", "--time", "0.1", "--mem", "256", "--only", "int4-grouped"],
                                             env=DEFAULT_WAIT_ENV, timeout=900)
                ko = self.others()
                q2 = json.loads(o2)
                L["mem_bw_gbs_omp_default"] = q2.get("bandwidth_gbs", q2.get("probe_gbs"))
                for k in q2["kernels"]:
                    if k["S"] == 1 and k["idot"] == 1:
                        mk = "1" if k["threads"] == 1 else "all"
                        self.R["workloads"].append({
                            "id": "kernel.%s-g%d.%dx%d.idot1.t%d.omp-default" % (k["fmt"], k["gs"], k["O"], k["I"], k["threads"]),
                            "engine": "colibri", "model": None, "what": "matvec S=1 with libgomp's default waiting (no GOMP_SPINCOUNT)", "unit": "GB/s",
                            "value": k["gbs"], "n": 1, "limit_name": "memory read bandwidth (%s)" % ("1 thread" if k["threads"] == 1 else "all threads"),
                            "limit_kind": "mem_bw_" + mk, "achieved_gbs": k["gbs"], "limit": L["mem_bw_gbs"][mk],
                            "ratio": k["gbs"] / L["mem_bw_gbs"][mk], "runs": [dict(ko, label="bench_quant-omp-default")]})
            self.R["kernels"] = q
            for k in q["kernels"]:
                if k["S"] == 1:
                    mk = "1" if k["threads"] == 1 else "all"
                    self.R["workloads"].append({
                        "id": "kernel.%s%s.%dx%d.idot%d.t%d" % (k["fmt"], "-g%d" % k["gs"] if k["gs"] else "", k["O"], k["I"], k["idot"], k["threads"]),
                        "engine": "colibri", "model": None, "what": "matvec (decode, S=1) over a set of matrices (bench_quant --mem)", "unit": "GB/s",
                        "value": k["gbs"], "n": 1, "limit_name": "memory read bandwidth (%s thread%s)" % (k["threads"], "s" if k["threads"] > 1 else ""),
                        "limit_kind": "mem_bw_" + mk, "achieved_gbs": k["gbs"], "limit": L["mem_bw_gbs"][mk],
                        "ratio": k["gbs"] / L["mem_bw_gbs"][mk], "runs": [dict(kq, label="bench_quant")]})
            peak = max((k["gflops"] for k in q["kernels"] if k["threads"] == q["threads"] and k["idot"] == 1), default=None)
            L["kernel_peak_gflops"] = peak
            L["kernel_peaks"] = kernel_peaks(q)
            for fk, v in sorted(L["kernel_peaks"].items()):
                self.R["workloads"].append({"id": "limit.kernel_peak.%s" % fk, "engine": None, "model": None, "unit": "GFLOP/s", "n": 1, "value": v["gflops"],
                                            "what": "bench_quant GFLOP/s at S=%d, %d threads, %s (best of the two expert shapes)" % (
                                                v["S"], v["threads"], "float path" if v["idot"] == 0 else "IDOT on"),
                                            "runs": [dict(kq, label="bench_quant")]})
        else:
            self.skip("kernel peaks", "kernels section off: prefill rows have no compute limit")
        self.instr_peak()
        # O_DIRECT on the disk that holds the models: the streaming model's shards
        large = self.ensure_model("large")
        sizes = [GLM5_EXPERT_INT4]
        syn = self.R["models"]["large"]["expert_weight_bytes"]
        if syn not in sizes:
            sizes.append(syn)
        if not self.a.quick:
            sizes.append(2 * GLM5_EXPERT_INT4)  # a GLM-5 int8 expert
        qds = (1, 4, 8, 16, 32)  # the best is often above 8 on cloud disks
        cmd = [os.path.join(ROOT, "build", "rel", "bench_io"), "--json", "--time", "1" if self.a.quick else "2"]
        for s in sizes:
            cmd += ["--size", str(s)]
        for qd in qds:
            cmd += ["--qd", str(qd)]
        self.say("disk: O_DIRECT reads of %s MB at queue depths %s on %s" % (", ".join("%.1f" % (s / 1e6) for s in sizes), ", ".join(map(str, qds)), large))
        out, _, _, _, _, _ = self.run("bench_io", cmd + self.shards(large), timeout=600)
        o = self.others()
        L["disk_others_cpu"] = self.last_others
        d = json.loads(out)["results"]
        L["disk"] = d
        L["disk_qds"] = list(qds)
        best = max((x for x in d if x["size"] == GLM5_EXPERT_INT4), key=lambda x: x["gbs"])
        L["disk_best_size"], L["disk_best_qd"] = best["size"], best["qd"]
        L["disk_probes"] = [dict(best, when="start", trusted=(o.get("others_cpu_frac") or 0) <= BUSY_FRAC, **o)]
        self.set_disk_limit()
        L["disk_qd1_gbs"] = next(x["gbs"] for x in d if x["size"] == GLM5_EXPERT_INT4 and x["qd"] == 1)
        self.say("disk: best queue depth at %.1f MB is %d (%.2f GB/s)" % (best["size"] / 1e6, best["qd"], best["gbs"]))
        for x in d:
            self.R["workloads"].append({"id": "limit.disk.odirect.%dMB.qd%d" % (round(x["size"] / 1e6), x["qd"]), "engine": None, "model": None,
                                        "what": "O_DIRECT random reads of %.2f MB at queue depth %d" % (x["size"] / 1e6, x["qd"]),
                                        "unit": "GB/s", "value": x["gbs"], "n": 1, "runs": [dict(o, label="bench_io")]})
        for k, v in (("1", "1 thread"), ("all", "all threads")):
            self.R["workloads"].append({"id": "limit.mem_bw.%s" % k, "engine": None, "model": None, "what": "memory read bandwidth, " + v,
                                        "unit": "GB/s", "value": L["mem_bw_gbs"][k], "n": 1, "limit_kind": "mem_probe_" + k})

    def end_probes(self):
        """The limits again after the last section: bench_mem, bench_quant --probe and the O_DIRECT probe."""
        self.say("limits again at the end of the run")
        self.mem_probe("end")
        if self.R["limits"].get("disk_probes"):
            self.disk_probe_end()

    def decode_limit(self, r, model, mode):
        """Adds bytes/token, achieved bytes/s and the ratio to the limit for one decode run."""
        f = self.R["models"][model]
        L = self.R["limits"]
        touched = f["dense_bytes_per_token"] + f["expert_bytes_per_token"]
        r["weight_bytes_per_token"] = touched
        if r.get("decode_tps"):
            r["achieved_weight_gbs"] = touched * r["decode_tps"] / 1e9
            r["mem_ratio"] = r["achieved_weight_gbs"] / L["mem_bw_gbs"]["all"]
            P, G = r["prompt_tokens"], r["gen_tokens"]
            t = (P / r["prefill_tps"] if r["prefill_tps"] else 0) + (G / r["decode_tps"])
            r["disk_bytes"] = r["mb_per_tok"] * 1e6 * (P + G)
            r["disk_gbs"] = r["disk_bytes"] / t / 1e9 if t else None
            r["disk_ratio"] = r["disk_gbs"] / L["disk_best_gbs"] if r["disk_gbs"] is not None else None
        return r

    def instr_peak(self):
        """The processor's multiply-add peak by instruction throughput (bench_peak: register-resident loops of the integer dot
        step of each kernel level this CPU runs, and of the f32 FMA), one thread and all threads. The engine's level gives the
        integer peak prefill rows are also judged against (model MACs / instruction MACs), beside the kernel peak."""
        L = self.R["limits"]
        out, _, rc, _, _, _ = self.run("bench_peak", [os.path.join(ROOT, "build", "rel", "bench_peak"), "--json",
                                                      "--time", "0.15" if self.a.quick else "0.3"], env=self.kernel_env, timeout=600)
        kp = self.others()
        if rc != 0:
            self.skip("instruction peak", "bench_peak failed (exit %d)" % rc)
            return
        q = json.loads(out)
        lv = q["best_level"]
        ints = [x for x in q["loops"] if not x["float"]]
        floats = [x for x in q["loops"] if x["float"]]
        mine = next((x for x in ints if x["level"] == lv), max(ints, key=lambda x: x["gmacs_all"], default=None))
        fl = max(floats, key=lambda x: x["gmacs_all"], default=None)
        L["instr_peak"] = {"threads": q["threads"], "level": lv, "int": mine, "float": fl, "loops": q["loops"], **kp}
        for x in q["loops"]:
            self.R["workloads"].append({"id": "limit.instr_peak.%s.%s" % (x["level"], "f32" if x["float"] else "int8"), "engine": None, "model": None,
                                        "unit": "GMAC/s", "n": 1, "value": x["gmacs_all"],
                                        "what": "%s in a register-resident loop, %d threads (1 thread: %.1f GMAC/s)" % (
                                            x["instruction"], q["threads"], x["gmacs_1"]), "runs": [dict(kp, label="bench_peak")]})
        if mine:
            for k in (L.get("kernel_peaks") or {}).values():
                ref = fl if k.get("idot") == 0 and fl else mine
                k["instr_ratio"] = k["gflops"] / (2 * ref["gmacs_all"])

    def instr_ratio(self, gflops, float_path=False):
        """Achieved GFLOP/s over the instruction peak's (2 x GMAC/s) of the engine's level, or None."""
        ip = self.R["limits"].get("instr_peak") or {}
        ref = ip.get("float") if float_path else ip.get("int")
        return gflops / (2 * ref["gmacs_all"]) if gflops and ref else None

    def prefill_peak(self, name, P):
        """The kernel peak on a model's own mix for a P-token prompt: per token, sum over its matrix groups of
        2 x MACs / the peak GFLOP/s of the group's format (bench_quant, largest S, all threads, IDOT on; f32 on
        the float path), i.e. the MAC-weighted harmonic mean of the format peaks. A prefill computes the logits
        of the last position only, so lm_head counts 1/P of its multiply-adds per token. None without peaks."""
        f = self.R["models"][name]
        key = str(P)
        if (f.get("prefill_peak") or {}).get(key):
            return f["prefill_peak"][key]
        pk = self.R["limits"].get("kernel_peaks")
        if not pk:
            return None
        groups, t, missing = [], 0.0, []
        for g in f["mac_groups"]:
            macs = g["macs"] / P if g["group"] == "lm_head" else g["macs"]
            p = pk.get(g["format"])
            if not p:
                missing.append(g["format"])
                continue
            s = 2 * macs / (p["gflops"] * 1e9)
            groups.append(dict(g, macs=macs, peak_gflops=p["gflops"], S=p["S"], s_per_token=s))
            t += s
        if missing:
            res = {"gflops": None, "missing_formats": sorted(set(missing)), "groups": groups}
        else:
            res = {"gflops": 2 * prefill_macs(f, P) / t / 1e9, "s_per_token": t, "tok_s": 1 / t, "macs_per_token": prefill_macs(f, P),
                   "S": max(g["S"] for g in groups), "groups": groups}
        f.setdefault("prefill_peak", {})[key] = res
        self.R["limits"].setdefault("prefill_peak_gflops", {}).setdefault(name, {})[key] = res["gflops"]
        return res

    def prefill_limit(self, r, model):
        f = self.R["models"][model]
        if r.get("prefill_tps"):
            P = r["prompt_tokens"]
            r["prefill_macs_per_token"] = prefill_macs(f, P)
            r["prefill_gflops"] = 2 * r["prefill_macs_per_token"] * r["prefill_tps"] / 1e9
            pk = (self.prefill_peak(model, P) or {}).get("gflops")
            r["compute_ratio"] = r["prefill_gflops"] / pk if pk else None
            r["instr_ratio"] = self.instr_ratio(r["prefill_gflops"], float_path=all(g["format"] == "f32" for g in f["mac_groups"]))
        return r

    def prefill_row_limit(self, model, runs):
        P = next((r["prompt_tokens"] for r in runs if r.get("prompt_tokens")), None)
        pp = (self.prefill_peak(model, P) if P else None) or {}
        ir = median([r.get("instr_ratio") for r in runs])
        name = "kernel peak on the model's mix (S=%s)" % pp.get("S", "?") if pp.get("gflops") else "kernel peak not measured"
        if ir is not None:  # the table keeps 44 characters of it
            name = ("kernel peak of mix S=%s" % pp.get("S", "?") if pp.get("gflops") else "no kernel peak") + " | %.0f%% of instr peak" % (100 * ir)
        return {"limit_name": name,
                "limit_kind": "kernel_peak", "limit": pp.get("gflops"), "ratio": median([r.get("compute_ratio") for r in runs]),
                "achieved_gflops": median([r.get("prefill_gflops") for r in runs]), "ceiling_tok_s": pp.get("tok_s"),
                "prefill_macs_per_token": pp.get("macs_per_token"), "instr_ratio": ir,
                "instr_peak_gflops": 2 * ((self.R["limits"].get("instr_peak") or {}).get("int") or {}).get("gmacs_all", 0) or None}

    def mem_row_limit(self, runs, f=None):
        L = self.R["limits"]
        x = {"limit_name": "memory read bandwidth (all threads)", "limit_kind": "mem_bw_all", "limit": L["mem_bw_gbs"]["all"],
             "ratio": median([r.get("mem_ratio") for r in runs]), "achieved_gbs": median([r.get("achieved_weight_gbs") for r in runs])}
        if runs and runs[0].get("weight_bytes_per_token"):
            x["weight_bytes_per_token"] = runs[0]["weight_bytes_per_token"]
            x["ceiling_tok_s"] = L["mem_bw_gbs"]["all"] * 1e9 / runs[0]["weight_bytes_per_token"]
        return x

    def wait_env(self):
        """GOMP_SPINCOUNT / OMP_WAIT_POLICY as colibri runs get them (the user's, with omp_env applied)."""
        e = {k: os.environ[k] for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY") if k in os.environ}
        for k, v in self.omp_env.items():
            if k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
                if v is None:
                    e.pop(k, None)
                else:
                    e[k] = v
        return e

    def resident(self):
        name = "medium"
        d = self.ensure_model(name)
        pin = self.usage_all(d)
        env = {"PIN": pin, "PIN_GB": "all"}
        n = self.a.repeats
        P, G, PL = (32, 32, 128) if self.a.quick else (128, 128, 1024)
        peer = self.peer_wanted() and self.peer()
        g = self.gguf_of(name) if peer else None
        if g:
            subprocess.run(["cat", g], stdout=subprocess.DEVNULL)  # the GGUF in page cache, as colibri's shards are after its first run
        separate_default = bool(self.wait_env())  # colibri's own runs are not libgomp's default: run the default too
        self.say("resident: medium model, every expert pinned at startup (PIN=<all experts> PIN_GB=all); %d x (colibri%s, colibri %s%s)" % (
            n, ", llama.cpp pp%d + tg%d" % (P, G) if peer else "", env_str(SPIN_ENV),
            ", llama.cpp tg%d with the same" % G if peer else ""))
        runs, spin, dflt, lpp, ltg, lspin = [], [], [], [], [], []
        for i in range(n):
            r = self.decode_limit(self.crun("resident-decode-%d" % i, d, env, P, G), name, "resident")
            runs.append(r)
            msg = "  run %d: prefill %s tok/s, decode %s tok/s, hit %s%%" % (i + 1, r.get("prefill_tps"), r.get("decode_tps"), r.get("hit"))
            if peer:
                lpp.append(self.lbench("llama-resident-pp%d-%d" % (P, i), g, "pp", P))
                ltg.append(self.lbench("llama-resident-tg%d-%d" % (G, i), g, "tg", G, depth=P))
                msg += " | llama.cpp pp %s, tg %s" % (fnum(lpp[-1].get("tok_s")), fnum(ltg[-1].get("tok_s")))
            if separate_default:
                dflt.append(self.decode_limit(self.crun("resident-decode-omp-default-%d" % i, d, dict(env, **DEFAULT_WAIT_ENV), P, G), name, "resident"))
                msg += " | default waiting %s" % dflt[-1].get("decode_tps")
            spin.append(self.decode_limit(self.crun("resident-decode-omp-spin-%d" % i, d, dict(env, **SPIN_ENV), P, G), name, "resident"))
            msg += " | spin %s" % spin[-1].get("decode_tps")
            if peer:
                lspin.append(self.lbench("llama-resident-tg%d-spin-%d" % (G, i), g, "tg", G, depth=P, env=SPIN_ENV))
                msg += " | llama.cpp spin tg %s" % fnum(lspin[-1].get("tok_s"))
            self.say(msg)
        self.workload("resident.decode%d" % G, "colibri", name, "decode tok/s over %d tokens after a %d-token prompt, all experts resident" % (G, P),
                      runs, "decode_tps", "tok/s", self.mem_row_limit(runs))
        pre = [self.prefill_limit(dict(r), name) for r in runs]
        self.workload("resident.prefill%d" % P, "colibri", name, "prefill tok/s of a %d-token prompt, all experts resident" % P, pre, "prefill_tps", "tok/s",
                      self.prefill_row_limit(name, pre))
        base = dflt if separate_default else runs
        if separate_default:
            self.workload("resident.decode%d.omp-default" % G, "colibri", name, "decode tok/s, all resident, libgomp's default waiting (%s unset)" %
                          "/".join(sorted(self.wait_env())), dflt, "decode_tps", "tok/s", self.mem_row_limit(dflt))
        pairs = [b["decode_tps"] / s["decode_tps"] for b, s in zip(base, spin) if b.get("decode_tps") and s.get("decode_tps")]
        x = {"limit_name": "colibri default waiting: default/spin", "limit_kind": "omp_pair",
             "limit": median([b.get("decode_tps") for b in base if not b.get("failed")]), "ratio": median(pairs),
             "ratio_min": min(pairs, default=None), "ratio_max": max(pairs, default=None), "pair_ratios": pairs, "goal": 0.95,
             "paired_with": "resident.decode%d%s" % (G, ".omp-default" if separate_default else ""),
             "mem_ratio": median([s.get("mem_ratio") for s in spin])}
        self.workload("resident.decode%d.omp-spin" % G, "colibri", name,
                      "decode tok/s, all resident, %s (libgomp spins); ratio = default / spin per interleaved pair" % env_str(SPIN_ENV),
                      spin, "decode_tps", "tok/s", x)
        self.say("  libgomp default / spin waiting: %s (pairs %s; goal >= 0.95)" % (fnum(median(pairs), "%.3f"), ", ".join("%.3f" % p for p in pairs)))
        fw = (G - 1) / G  # colibri's decode rate counts G tokens over G-1 forward passes; llama-bench's tg counts G passes
        if peer:
            self.side_row("resident.prefill%d" % P, "prefill %d tokens, resident" % P, name, runs, "prefill_tps", 1.0, lpp,
                          "resident.prefill%d (the same runs)" % P)
            self.side_row("resident.decode%d" % G, "decode %d tokens after %d, resident" % (G, P), name, runs, "decode_tps", fw, ltg,
                          "resident.decode%d runs x (G-1)/G" % G)
            lp = [a["tok_s"] / b["tok_s"] for a, b in zip(ltg, lspin) if a.get("tok_s") and b.get("tok_s")]
            self.side_row("resident.decode%d.omp-spin" % G, "decode %d after %d, resident, both engines with %s" % (G, P, env_str(SPIN_ENV)), name,
                          spin, "decode_tps", fw, lspin, "resident.decode%d.omp-spin runs x (G-1)/G" % G,
                          extra={"env": SPIN_ENV, "llamacpp_default_over_spin": median(lp), "llamacpp_default_over_spin_min": min(lp, default=None),
                                 "llamacpp_default_over_spin_max": max(lp, default=None)})
        npl = n if peer else max(1, n // 2)
        runs, lpl = [], []
        for i in range(npl):
            runs.append(self.prefill_limit(self.crun("resident-prefill%d-%d" % (PL, i), d, env, PL, 1), name))
            msg = "  prefill %d: %s tok/s" % (PL, runs[-1].get("prefill_tps"))
            if peer:
                lpl.append(self.lbench("llama-resident-pp%d-%d" % (PL, i), g, "pp", PL))
                msg += " | llama.cpp %s" % fnum(lpl[-1].get("tok_s"))
            self.say(msg)
        self.workload("resident.prefill%d" % PL, "colibri", name, "prefill tok/s of a %d-token prompt, all experts resident" % PL, runs, "prefill_tps", "tok/s",
                      self.prefill_row_limit(name, runs))
        if peer:
            self.side_row("resident.prefill%d" % PL, "prefill %d tokens, resident" % PL, name, runs, "prefill_tps", 1.0, lpl,
                          "resident.prefill%d (the same runs)" % PL)
            self.paired.add("resident")

    def stream_budget(self):
        """RAM_GB for streaming runs: what the engine must keep resident (dense
        weights, KV, working set, 5% reserve) plus a tenth of the routed experts
        for its caches (pinned set and LRU); the rest streams from disk."""
        f = self.R["models"]["large"]
        ram = (f["dense_bytes"] + 0.35e9) / 0.95 + 0.10 * f["expert_bytes_total"]
        return float("%.1f" % (ram / 1e9 + 0.05))

    def streaming(self):
        name = "large"
        d = self.ensure_model(name)
        ram = self.stream_budget()
        self.R["limits"]["stream_ram_gb"] = ram
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        self.R["limits"]["stream_memcg_bytes"] = lim
        # quick: 16 generated tokens (llama.cpp streams slowly through its mmap)
        P, G, PL = (32, 16, 128) if self.a.quick else (128, 128, 1024)
        peer = self.peer_wanted() and self.peer()
        gl = self.gguf_of(name) if peer else None
        self.say("streaming: large model (%.1f GB), RAM_GB=%s, DIRECT=1, page cache dropped before each run%s%s" % (
            self.R["models"][name]["size_bytes"] / 1e9, ram, ", memory cgroup %.1f GB" % (lim / 1e9) if lim else "",
            "; interleaved with llama.cpp tg%d and pp%d, cold" % (G, P) if peer else ""))
        sargs = []
        if peer:
            PL_ = self.R["llamacpp"]
            if lim:
                how = "both engines in a memory cgroup of %.1f GB (page cache charged to it); colibri RAM_GB=%s DIRECT=1; llama.cpp mmap" % (lim / 1e9, ram)
            else:
                self.say("  no memory cgroup: llama.cpp's page cache is not limited (it may keep the model cached)")
                how = "no memory cgroup: llama.cpp's page cache is unlimited after a cold start (not equivalent); colibri RAM_GB=%s DIRECT=1" % ram
            PL_["streaming_method"] = how
            # repacked weights are copies in anonymous memory (the whole model), so a model larger than memory
            # only runs from the mmap'd file: --repack 0 for the streaming rows
            sargs = ([] if "--repack" in self.peer_extra else ["--repack", "0"]) + ["-lm", "mmap"]
            PL_["streaming_args"] = sargs
        # sampled, not greedy: greedy decoding of a synthetic model repeats one token, whose experts then
        # stay cached (90% hits), so the row would time the cache; llama-bench's tg feeds random tokens
        env = {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "0", "TEMP": "1"}
        runs, ltg, lpp = [], [], []
        for i in range(self.a.repeats):
            r = self.crun("stream-decode-%d" % i, d, env, P, G, cold=True, cg_limit=lim)
            runs.append(self.decode_limit(r, name, "stream"))
            msg = "  run %d: prefill %s tok/s, decode %s tok/s, hit %s%%, %s MB/tok from disk" % (
                i + 1, r.get("prefill_tps"), r.get("decode_tps"), r.get("hit"), r.get("mb_per_tok"))
            if peer:
                ltg.append(self.lbench("llama-stream-tg%d-%d" % (G, i), gl, "tg", G, depth=P, args=sargs, cg_limit=lim, cold=True, raw="stream_raw"))
                lpp.append(self.lbench("llama-stream-pp%d-%d" % (P, i), gl, "pp", P, args=sargs, cg_limit=lim, cold=True, raw="stream_raw"))
                msg += " | llama.cpp tg %s, pp %s" % (fnum(ltg[-1].get("tok_s")), fnum(lpp[-1].get("tok_s")))
            self.say(msg)
        L = self.R["limits"]
        self.workload("stream.decode%d" % G, "colibri", name, "decode tok/s over %d tokens after a %d-token prompt, cold, experts streamed with O_DIRECT" % (G, P),
                      runs, "decode_tps", "tok/s",
                      {"limit_name": L.get("disk_limit_name", "O_DIRECT disk bandwidth"), "limit_kind": "disk_best", "limit": L["disk_best_gbs"],
                       "ratio": median([r.get("disk_ratio") for r in runs]), "achieved_gbs": median([r.get("disk_gbs") for r in runs]),
                       "weight_bytes_per_token": runs[0].get("weight_bytes_per_token"),
                       "disk_mb_per_token": median([r.get("mb_per_tok") for r in runs]), "hit": median([r.get("hit") for r in runs]),
                       "ram_gb": ram})
        pre = [self.prefill_limit(dict(r), name) for r in runs]
        self.workload("stream.prefill%d" % P, "colibri", name, "prefill tok/s of a %d-token prompt, cold, streamed" % P, pre, "prefill_tps", "tok/s",
                      dict(self.prefill_row_limit(name, pre), ram_gb=ram))
        if peer:
            how = self.R["llamacpp"]["streaming_method"]
            self.R["llamacpp"]["stream_cgroup_peak"] = [x.get("cgroup_peak") for x in ltg + lpp]
            self.side_row("stream.decode%d" % G, "decode %d after %d, streamed, cold" % (G, P), name, runs, "decode_tps", (G - 1) / G, ltg,
                          "stream.decode%d runs x (G-1)/G" % G, extra={"method": how})
            self.side_row("stream.prefill%d" % P, "prefill %d tokens, streamed, cold" % P, name, runs, "prefill_tps", 1.0, lpp,
                          "stream.prefill%d (the same runs)" % P, extra={"method": how})
            self.paired.add("streaming")
        runs = []
        for i in range(max(1, self.a.repeats // 2)):
            r = self.crun("stream-prefill%d-%d" % (PL, i), d, env, PL, 1, cold=True, cg_limit=lim)
            runs.append(self.prefill_limit(r, name))
            self.say("  prefill %d: %s tok/s, %s MB/tok from disk" % (PL, r.get("prefill_tps"), r.get("mb_per_tok")))
        for r in runs:
            t = r["prompt_tokens"] / r["prefill_tps"] if r.get("prefill_tps") else None
            r["disk_gbs"] = r["mb_per_tok"] * 1e6 * (r["prompt_tokens"] + r["gen_tokens"]) / t / 1e9 if t else None
        self.workload("stream.prefill%d" % PL, "colibri", name, "prefill tok/s of a %d-token prompt, cold, streamed" % PL, runs, "prefill_tps", "tok/s",
                      dict(self.prefill_row_limit(name, runs), achieved_gbs_disk=median([r.get("disk_gbs") for r in runs]), ram_gb=ram))

    def history(self):
        name = "large"
        d = self.ensure_model(name)
        ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        usage = os.path.join(d, ".coli_usage")
        if os.path.exists(usage):
            os.remove(usage)
        H = 2 if self.a.quick else 4
        P, G = 32, (16 if self.a.quick else 32)
        self.say("history: %d runs on the large model with PIN=auto USAGE_SAVE=1 (the hit rate should climb), RAM_GB=%s, DIRECT=1" % (H, ram))
        env = {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "auto", "USAGE_SAVE": "1"}
        runs = []
        for i in range(H):
            # a different prompt each run (rotating), so warm runs are not the same routing replayed
            r = self.crun("history-%d" % i, d, env, P, G, cold=True, cg_limit=lim, offset=211 * i)
            self.decode_limit(r, name, "stream")
            r["run"] = i + 1
            runs.append(r)
            self.say("  run %d: hit %s%% (pin %s%% + LRU %s%%), %s pinned, decode %s tok/s" % (
                i + 1, r.get("hit"), r.get("hit_pin"), r.get("hit_lru"), r.get("pinned"), r.get("decode_tps")))
        os.remove(usage) if os.path.exists(usage) else None
        self.R["history"] = [{k: r.get(k) for k in ("run", "prompt_tokens", "gen_tokens", "decode_tps", "prefill_tps", "hit", "hit_pin", "hit_lru", "miss",
                                                    "mb_per_tok", "pinned", "pin_load_s", "disk_gbs", "log")} for r in runs]
        for r in runs:
            self.R["workloads"].append({"id": "history.run%d.hit" % r["run"], "engine": "colibri", "model": name, "unit": "%",
                                        "what": "expert hit rate, run %d of %d with usage history (PIN=auto)" % (r["run"], H), "value": r.get("hit"), "n": 1})
            self.R["workloads"].append({"id": "history.run%d.decode" % r["run"], "engine": "colibri", "model": name, "unit": "tok/s",
                                        "what": "decode tok/s, run %d of %d with usage history" % (r["run"], H), "value": r.get("decode_tps"), "n": 1,
                                        "limit_name": self.R["limits"].get("disk_limit_name", "O_DIRECT disk bandwidth"), "limit_kind": "disk_best",
                                        "limit": self.R["limits"]["disk_best_gbs"], "ratio": r.get("disk_ratio"),
                                        "runs": [{k: r.get(k) for k in ("label", "others_cpu_s", "others_cpu_frac", "log")}]})

    def iopaths(self):
        name = "large"
        d = self.ensure_model(name)
        ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        base = {"RAM_GB": str(ram), "PIN": "0", "PROF": "1", "TEMP": "1"}  # sampled: see streaming()
        cfgs = [("PIPE=0", {"PIPE": "0", "URING": "0"}), ("PIPE=1", {"PIPE": "1", "URING": "0"}), ("URING=1", {"URING": "1"}),
                ("DIRECT=1", {"DIRECT": "1"}), ("PILOT=1", {"PILOT": "1"}), ("PILOT_REAL=1", {"PILOT_REAL": "1"}),
                ("DIRECT=1 PILOT_REAL=1", {"DIRECT": "1", "PILOT_REAL": "1"})]
        n = max(1, self.a.repeats)
        P, G = 32, (16 if self.a.quick else 32)
        self.say("I/O paths: %d configurations x %d interleaved repeats, cold page cache each run, RAM_GB=%s, %d+%d tokens" % (len(cfgs), n, ram, P, G))
        res = {c[0]: [] for c in cfgs}
        for i in range(n):
            for label, env in cfgs:
                e = dict(base)
                e.update(env)
                r = self.crun("io-%s-%d" % (label.replace(" ", "+"), i), d, e, P, G, cold=True, cg_limit=lim)
                self.decode_limit(r, name, "stream")
                res[label].append(r)
                self.say("  %-22s run %d: decode %s tok/s, hit %s%%, %s MB/tok, I/O hidden %s, recall %s" % (
                    label, i + 1, r.get("decode_tps"), r.get("hit"), r.get("mb_per_tok"),
                    "%.0f%%" % (100 * r["io_hidden_frac"]) if r.get("io_hidden_frac") is not None else "-",
                    "%s%%" % r["recall"] if r.get("recall") is not None else "-"))
        out = []
        for label, env in cfgs:
            rs = [r for r in res[label] if not r.get("failed")]
            row = {"config": label, "env": env, "n": len(rs), "decode_tps": median([r.get("decode_tps") for r in rs]),
                   "decode_tps_min": min([r["decode_tps"] for r in rs], default=None), "decode_tps_max": max([r["decode_tps"] for r in rs], default=None),
                   "prefill_tps": median([r.get("prefill_tps") for r in rs]), "hit": median([r.get("hit") for r in rs]),
                   "mb_per_tok": median([r.get("mb_per_tok") for r in rs]), "disk_gbs": median([r.get("disk_gbs") for r in rs]),
                   "disk_ratio": median([r.get("disk_ratio") for r in rs]), "io_wait_frac": median([r.get("io_wait_frac") for r in rs]),
                   "io_busy_s": median([r.get("io_busy_s") for r in rs]), "io_hidden_s": median([r.get("io_hidden_s") for r in rs]),
                   "io_hidden_frac": median([r.get("io_hidden_frac") for r in rs]), "recall": median([r.get("recall") for r in rs]),
                   "reads": rs[0].get("reads") if rs else None, "logs": [r["log"] for r in res[label]]}
            out.append(row)
            self.R["workloads"].append({"id": "iopath.%s" % label.replace(" ", "+"), "engine": "colibri", "model": name, "unit": "tok/s",
                                        "what": "decode tok/s, %s, cold, streamed (median of %d interleaved runs)" % (label, len(rs)),
                                        "value": row["decode_tps"], "min": row["decode_tps_min"], "max": row["decode_tps_max"], "n": len(rs),
                                        "limit_name": self.R["limits"].get("disk_limit_name", "O_DIRECT disk bandwidth"), "limit_kind": "disk_best",
                                        "limit": self.R["limits"]["disk_best_gbs"], "ratio": row["disk_ratio"],
                                        "io_hidden_frac": row["io_hidden_frac"], "recall": row["recall"],
                                        "runs": [{k: r.get(k) for k in ("label", "decode_tps", "others_cpu_s", "others_cpu_frac", "log")} for r in res[label]]})
        self.R["io_paths"] = out

    def route_trace(self):
        """trained-glm5's routing of its held-out text (--perplexity with
        ROUTE_TRACE, PILOT_K=16 lookahead predictions per row), recorded
        once per bench run into the log directory: (path, route_stats
        summary)."""
        d = os.path.join(ROOT, "tests", "fixtures", "trained-glm5")
        path = os.path.join(self.logdir, "route-trained-glm5.bin")
        if not os.path.exists(path):
            self.run("route-trace", [self.colibri, "--perplexity", os.path.join(d, "heldout.txt"), d],
                     {"ROUTE_TRACE": path, "PILOT": "1", "PILOT_K": "16", "USAGE_SAVE": "0"})
        import route_stats
        return path, route_stats.summarize(route_stats.load(path))

    def rotated_trace(self, path, offset):
        """A copy of a routing trace starting at row `offset` (wrapping), so
        successive runs replay different text."""
        with open(path, "rb") as f:
            b = f.read()
        layers, topk, pred_k, _, rows = struct.unpack_from("<IIIIQ", b, 8)
        row = layers * (topk + pred_k) * 2
        k = offset % rows
        out = "%s.from%d" % (path, k)
        with open(out, "wb") as f:
            f.write(b[:32] + b[32 + k * row:] + b[32:32 + k * row])
        return out

    def replay(self):
        """Learned routing on the streaming model: trained-glm5's routing of
        real text (route_trace) replayed into the large synthetic model's
        expert reads (ROUTE_REPLAY, the first MoE layer from the trace's
        first, the others from its deeper layers, expert ids by rank of
        use), cold, under the streaming budget: decode with no prefetch and
        with PILOT_REAL at PILOT_K 8 and 16 (the trace's lookahead
        predictions), interleaved repeats, beside the synthetic router's
        own routing; then usage-history runs (PIN=auto USAGE_SAVE=1), each
        replaying a different stretch of the trace, for the hit-rate curve
        over runs. The trace's statistics (tools/route_stats.py) say what
        an LRU and the lookahead can do at best."""
        tr, stats = self.route_trace()
        name = "large"
        d = self.ensure_model(name)
        if self.R["models"][name]["experts_per_layer"] < stats["experts"]:  # --quick's large model has 47
            self.skip("replay", "the %s model has %d experts per layer, the trace routes among %d" % (name, self.R["models"][name]["experts_per_layer"],
                                                                                               stats["experts"]))
            return
        ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        P, G = 32, (16 if self.a.quick else 64)
        out = {"trace": {k: v for k, v in stats.items()}, "model": name, "ram_gb": ram, "P": P, "G": G, "configs": [], "history": []}
        for L in stats["per_layer"]:
            la = L.get("lookahead", {})
            self.say("  trace layer %d: %d experts cover 90%% of choices; a row reuses %.0f%% of the previous row's experts; lookahead top-8 recall %s, "
                     "top-16 recall %s" % (L["layer"], L["cover90"], 100 * L["reuse_prev1"],
                                           "%.0f%%" % (100 * la["8"]["recall"]) if "8" in la else "-", "%.0f%%" % (100 * la["16"]["recall"]) if "16" in la else "-"))
        base = {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "0", "TEMP": "1"}
        cfgs = [("synthetic router", {}), ("replayed", {"ROUTE_REPLAY": tr}), ("replayed PILOT_REAL=1 PILOT_K=8", {"ROUTE_REPLAY": tr, "PILOT_REAL": "1", "PILOT_K": "8"}),
                ("replayed PILOT_REAL=1 PILOT_K=16", {"ROUTE_REPLAY": tr, "PILOT_REAL": "1", "PILOT_K": "16"})]
        self.say("replay: learned routing (trained-glm5, %d rows) on the large model, RAM_GB=%s, DIRECT=1, cold, %d+%d tokens, %d interleaved repeats" % (
            stats["rows"], ram, P, G, max(1, self.a.repeats)))
        res = {c[0]: [] for c in cfgs}
        for i in range(max(1, self.a.repeats)):
            for label, env in cfgs:
                r = self.crun("replay-%s-%d" % (label.replace(" ", "+"), i), d, dict(base, **env), P, G, cold=True, cg_limit=lim)
                self.decode_limit(r, name, "stream")
                res[label].append(r)
                self.say("  %-34s run %d: decode %s tok/s, hit %s%%, %s MB/tok, recall %s, read ahead %s, %s MB of them unused" % (
                    label, i + 1, r.get("decode_tps"), r.get("hit"), r.get("mb_per_tok"), "%s%%" % r["recall"] if r.get("recall") is not None else "-",
                    r.get("read_ahead", "-"), r.get("wasted_mb", "-")))
        for label, env in cfgs:
            rs = [r for r in res[label] if not r.get("failed")]
            row = {"config": label, "env": {k: v for k, v in env.items() if k != "ROUTE_REPLAY"}, "replayed": "ROUTE_REPLAY" in env, "n": len(rs),
                   **{k: median([r.get(k) for r in rs]) for k in ("decode_tps", "hit", "mb_per_tok", "recall", "read_ahead", "wasted_mb", "disk_gbs", "disk_ratio")},
                   "decode_tps_min": min([r["decode_tps"] for r in rs], default=None), "decode_tps_max": max([r["decode_tps"] for r in rs], default=None),
                   "logs": [r["log"] for r in res[label]]}
            if row["read_ahead"] and row["mb_per_tok"]:  # wasted bytes against all bytes read
                row["wasted_frac"] = row["wasted_mb"] / (row["mb_per_tok"] * (P + G))
            out["configs"].append(row)
            self.R["workloads"].append({"id": "replay.%s" % label.replace(" ", "+"), "engine": "colibri", "model": name, "unit": "tok/s",
                                        "what": "decode tok/s, %s, cold, streamed (median of %d interleaved runs)" % (label, len(rs)),
                                        "value": row["decode_tps"], "min": row["decode_tps_min"], "max": row["decode_tps_max"], "n": len(rs),
                                        "limit_name": self.R["limits"].get("disk_limit_name", "O_DIRECT disk bandwidth"), "limit_kind": "disk_best",
                                        "limit": self.R["limits"].get("disk_best_gbs"), "ratio": row["disk_ratio"], "hit": row["hit"],
                                        "mb_per_tok": row["mb_per_tok"], "recall": row["recall"], "replayed": row["replayed"],
                                        "runs": [{k: r.get(k) for k in ("label", "decode_tps", "others_cpu_s", "others_cpu_frac", "log")} for r in res[label]]})
        usage = os.path.join(d, ".coli_usage")
        if os.path.exists(usage):
            os.remove(usage)
        H = 2 if self.a.quick else 4
        self.say("replay history: %d runs with PIN=auto USAGE_SAVE=1, each replaying another stretch of the trace" % H)
        try:
            for i in range(H):
                t = self.rotated_trace(tr, 1511 * i)
                r = self.crun("replay-history-%d" % i, d, {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "auto", "USAGE_SAVE": "1", "TEMP": "1", "ROUTE_REPLAY": t},
                              P, G, cold=True, cg_limit=lim)
                self.decode_limit(r, name, "stream")
                out["history"].append({k: r.get(k) for k in ("decode_tps", "hit", "hit_pin", "hit_lru", "mb_per_tok", "pinned", "log")})
                self.say("  run %d: hit %s%% (pin %s%% + LRU %s%%), %s pinned, decode %s tok/s, %s MB/tok" % (
                    i + 1, r.get("hit"), r.get("hit_pin"), r.get("hit_lru"), r.get("pinned"), r.get("decode_tps"), r.get("mb_per_tok")))
        finally:
            if os.path.exists(usage):
                os.remove(usage)
        self.R["replay"] = out

    def spec(self):
        """Speculative decoding's cost curve: a forward over S = 1..5 positions
        (what verifying S-1 drafts costs), measured as prefill of a 60-token
        prompt in chunks of UBATCH=S on the resident and the streaming model
        (cold cache, the streaming budget), and the decode tok/s it projects
        at 30%, 50% and 80% acceptance next to DRAFT=0. Synthetic models have
        no MTP head and random weights, so no real acceptance: the draft
        cost is modelled as one layer's share of a one-position forward."""
        N, A = 60, (0.3, 0.5, 0.8)
        out = {}
        for name, kind in (("medium", "resident"), ("large", "streaming")):
            d = self.ensure_model(name)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            L = cfg.get("num_hidden_layers", 1)
            if kind == "resident":
                env, lim = {"PIN": self.usage_all(d), "PIN_GB": "all"}, None
            else:
                ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
                env, lim = {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "0"}, (ram + 0.5) * 1e9 if self.memcg else None
            self.say("spec: %s model, forward cost at S = 1..5 (prefill of %d tokens with UBATCH=S%s)" % (name, N, ", cold" if lim or kind == "streaming" else ""))
            curve = []
            for S in range(1, 6):
                e = dict(env, UBATCH=str(S))
                rs = [self.crun("spec-%s-S%d-%d" % (kind, S, i), d, e, N, 1, cold=kind == "streaming", cg_limit=lim) for i in range(max(1, self.a.repeats))]
                ok = [r for r in rs if not r.get("failed") and r.get("prefill_tps")]
                if not ok:
                    continue
                fw = N / S
                sec = median([N / r["prefill_tps"] / fw for r in ok])
                mb = median([(r.get("mb_per_tok") or 0) * (r.get("prompt_tokens", N) + r.get("gen_tokens", 1)) / fw for r in ok])
                curve.append({"S": S, "s_per_forward": sec, "mb_per_forward": mb, "n": len(ok)})
                self.say("  S=%d: %.1f ms and %.1f MB per forward (%.2f of S=1's time)" % (S, 1e3 * sec, mb, sec / curve[0]["s_per_forward"]))
            if not curve or curve[0]["S"] != 1:
                continue
            c1, draft = curve[0]["s_per_forward"], curve[0]["s_per_forward"] / L
            base = 1.0 / c1
            proj = {}
            for a in A:
                best = None
                for row in curve[1:]:
                    k = row["S"] - 1
                    toks = (1 - a ** (k + 1)) / (1 - a)
                    tps = toks / (row["s_per_forward"] + k * draft)
                    if not best or tps > best["tok_s"]:
                        best = {"k": k, "tok_s": tps, "tokens_per_forward": toks}
                proj["%d%%" % int(a * 100)] = best
                self.R["workloads"].append({"id": "spec.%s.accept%d" % (kind, int(a * 100)), "engine": "colibri", "model": name, "unit": "tok/s",
                                            "what": "projected decode tok/s with MTP drafts at %d%% acceptance (best k=%d), from the measured S=1..5 cost" % (
                                                int(a * 100), best["k"]),
                                            "value": round(best["tok_s"], 3), "n": 1, "limit_name": "DRAFT=0 (one position per forward)",
                                            "limit": round(base, 3), "ratio": round(best["tok_s"] / base, 3)})
            out[kind] = {"model": name, "layers": L, "curve": curve, "draft_cost_model": "one layer's share of an S=1 forward", "projected": proj,
                         "draft0_tok_s": base}
            self.say("  DRAFT=0 %.2f tok/s; projected: %s" % (base, ", ".join("%s -> %.2f tok/s (k=%d, x%.2f)" % (
                a, p["tok_s"], p["k"], p["tok_s"] / base) for a, p in proj.items())))
        self.R["spec"] = out

    def serve_start(self, model, env, tag, cgroup=None):
        """A colibri --serve on a free port (stderr to a log), in the memory
        cgroup when given; (process, port, log path)."""
        full = dict(os.environ)
        full.update(self.omp_env)
        full.update({"COLI_PORT": "0", "USAGE_SAVE": "0", "SEED": "1"})
        full.update(env)
        full = {k: v for k, v in full.items() if v is not None}
        self.nlog += 1
        lp = os.path.join(self.logdir, "%03d-serve-%s.log" % (self.nlog, tag))
        lf = open(lp, "wb")
        p = subprocess.Popen([self.colibri, "--serve", model], env=full, stdout=subprocess.DEVNULL, stderr=lf, preexec_fn=self.cg_join(cgroup))
        port, t0 = None, time.time()
        while time.time() - t0 < 600 and p.poll() is None and not port:
            with open(lp, "rb") as f:
                m = re.search(rb"on http://[^:]+:(\d+) ", f.read())
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        lf.close()
        return p, port, lp

    def serve_stop(self, p):
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def serve_chat(self, port, messages, max_tokens):
        """Streams one chat request; (seconds to the first text, seconds in all, content, usage)."""
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        t0 = time.time()
        c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first, text, usage = None, [], None
        for ev in sse_events(r):
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                piece = ch.get("delta", {}).get("content")
                if piece:
                    if first is None:
                        first = time.time() - t0
                    text.append(piece)
        c.close()
        return first, time.time() - t0, "".join(text), usage

    def serve(self):
        """Serve mode: time to first token of a conversation's second turn with
        prefix reuse (only the new turn prefilled) against the same turn on a
        server where nothing matches (the whole conversation prefilled), on
        the streaming model; then requests per minute from concurrent
        clients on the resident model, each answer checked against the same
        request answered alone (nothing lost or mixed)."""
        d = self.ensure_model("large")
        ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
        env = {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "0", "CHAT_TEMPLATE": None}
        n = 60 if self.a.quick else 400
        doc = self.prompt(d, n)
        out = {}
        res = {}
        for mode in ("reuse", "no-reuse"):
            rows = []
            for i in range(max(1, self.a.repeats)):
                self.drop_cache(self.shards(d))
                p, port, lp = self.serve_start(d, env, "%s-%d" % (mode, i))
                if not port:
                    self.say("  serve: the server did not start, see %s" % lp)
                    return
                try:
                    sys1 = "You summarise documents."
                    first = [{"role": "system", "content": sys1}, {"role": "user", "content": doc}]
                    t1 = self.serve_chat(port, first, 8)
                    turn2 = first + [{"role": "assistant", "content": t1[2]}, {"role": "user", "content": "Now in one word?"}]
                    if mode == "no-reuse":  # the same length, nothing in common from the first token
                        turn2 = [{"role": "system", "content": "You summarize documents."}] + turn2[1:]
                    t2 = self.serve_chat(port, turn2, 8)
                finally:
                    self.serve_stop(p)
                rows.append({"ttft_s": t2[0], "prompt_tokens": t2[3]["prompt_tokens"], "cached_tokens": t2[3]["prompt_tokens_details"]["cached_tokens"],
                             "turn1_ttft_s": t1[0], "log": lp})
                self.say("  serve %s #%d: turn 2 of %d tokens (%d cached): first token after %.2f s (turn 1: %.2f s)" % (
                    mode, i, rows[-1]["prompt_tokens"], rows[-1]["cached_tokens"], t2[0], t1[0]))
            res[mode] = rows
        a, b = median([r["ttft_s"] for r in res["reuse"]]), median([r["ttft_s"] for r in res["no-reuse"]])
        out["ttft_turn2"] = {"model": "large", "reuse_s": a, "no_reuse_s": b, "speedup": b / a if a else None, "runs": res}
        self.R["workloads"].append({"id": "serve.ttft_turn2", "engine": "colibri", "model": "large", "unit": "s", "n": len(res["reuse"]),
                                    "what": "time to first token of a second turn (%d-token document) with prefix reuse, streaming model" % n,
                                    "value": round(a, 3), "limit_name": "the same turn with nothing reusable", "limit": round(b, 3),
                                    "ratio": round(b / a, 3) if a else None})
        # requests per minute: 4 clients x 3 requests, resident model
        dm = self.ensure_model("medium")
        renv = {"PIN": self.usage_all(dm), "PIN_GB": "all", "CHAT_TEMPLATE": None}
        p, port, lp = self.serve_start(dm, renv, "load")
        if not port:
            self.say("  serve: the server did not start, see %s" % lp)
            self.R["serve"] = out
            return
        import threading
        clients, per, ntok = 4, 3, 16
        asks = [[{"role": "user", "content": "client %d question %d: %s" % (c, q, self.prompt(dm, 20, 7 * c + q))}] for c in range(clients) for q in range(per)]
        try:
            alone = [self.serve_chat(port, m, ntok)[2] for m in asks]
            got, errs = {}, []

            def client(c):
                for q in range(per):
                    try:
                        got[c * per + q] = self.serve_chat(port, asks[c * per + q], ntok)[2]
                    except Exception as e:  # noqa: BLE001
                        errs.append(str(e))
            t0 = time.time()
            ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.time() - t0
        finally:
            self.serve_stop(p)
        same = sum(1 for i in range(len(asks)) if got.get(i) == alone[i])
        rpm = 60.0 * len(got) / wall
        out["load"] = {"model": "medium", "clients": clients, "requests": len(asks), "answered": len(got), "identical_to_alone": same,
                       "errors": errs, "wall_s": wall, "rpm": rpm, "max_tokens": ntok, "log": lp}
        self.say("  serve load: %d clients x %d requests (%d tokens each): %.1f requests/min, %d/%d answers identical to the request alone, %d errors" % (
            clients, per, ntok, rpm, same, len(asks), len(errs)))
        self.R["workloads"].append({"id": "serve.rpm", "engine": "colibri", "model": "medium", "unit": "requests/min", "n": 1, "value": round(rpm, 2),
                                    "what": "%d concurrent clients x %d chat requests of %d tokens, resident model; %d/%d identical to alone" % (
                                        clients, per, ntok, same, len(asks))})
        self.R["serve"] = out

    def metrics(self, port):
        """serve's /metrics counters as {name: value} (unlabelled series only)."""
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode("utf-8", "replace")
        c.close()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-z_]+) ([0-9.eE+-]+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def complete_stream(self, port, prompt, max_tokens, extra=None):
        """Streams one /v1/completions request (either engine); (seconds to
        the first text, seconds in all, completion tokens)."""
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        body.update(extra or {})
        t0 = time.time()
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first, chunks, usage = None, 0, None
        for ev in sse_events(r):
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    chunks += 1
                    if first is None:
                        first = time.time() - t0
        c.close()
        return first, time.time() - t0, (usage or {}).get("completion_tokens") or chunks

    def batch_round(self, port, prompts, G, extra=None):
        """len(prompts) clients at once, one request each; (aggregate
        generated tok/s over the round, TTFT p50, TTFT p95, tokens, errors,
        aggregate decode tok/s). The decode rate is the sum over clients of
        (tokens - 1) / (end - first token): while the clients decode
        together, the rate they are served at, prefill left out."""
        import threading
        res, errs = [None] * len(prompts), []

        def client(i):
            try:
                res[i] = self.complete_stream(port, prompts[i], G, extra)
            except Exception as e:  # noqa: BLE001
                errs.append(str(e))
        t0 = time.time()
        ts = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.time() - t0
        ok = [r for r in res if r]
        toks = sum(r[2] for r in ok)
        tt = sorted(r[0] for r in ok if r[0] is not None)
        pct = (lambda q: tt[min(len(tt) - 1, int(round(q * (len(tt) - 1))))] if tt else None)
        dec = sum((r[2] - 1) / (r[1] - r[0]) for r in ok if r[0] is not None and r[2] > 1 and r[1] > r[0])
        return (toks / wall if wall else 0.0), pct(0.5), pct(0.95), toks, errs, dec

    def batch_run(self, port, prompts, G):
        """One colibri round (batch_round) with its /metrics deltas: disk
        bytes and forwards per generated token, sequences per forward."""
        m0 = self.metrics(port)
        tps, t50, t95, toks, errs, dec = self.batch_round(port, prompts, G)
        m1 = self.metrics(port)
        dd = lambda k: m1.get(k, 0) - m0.get(k, 0)  # noqa: E731
        fw, sq = dd("colibri_decode_forwards_total"), dd("colibri_decode_sequences_total")
        return {"tok_s": tps, "decode_tok_s": dec, "ttft_p50_s": t50, "ttft_p95_s": t95, "tokens": toks, "errors": errs,
                "disk_bytes_per_token": dd("colibri_disk_read_bytes_total") / toks if toks else None,
                "forwards_per_token": fw / toks if toks else None, "sequences_per_forward": sq / fw if fw else None}

    def llama_server_start(self, gguf, parallel, ctx, tag, cgroup=None, args=()):
        """llama-server of the pinned llama.cpp on a free port with
        --parallel slots (continuous batching on), in the memory cgroup when
        given; (process, port, log)."""
        import socket
        ls = os.path.join(self.llama, "bin", "llama-server")
        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            port = so.getsockname()[1]
        self.nlog += 1
        lp = os.path.join(self.logdir, "%03d-llama-server-%s.log" % (self.nlog, tag))
        lf = open(lp, "wb")
        env = dict(os.environ)
        env.update(self.omp_env)
        p = subprocess.Popen([ls, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-t", str(os.cpu_count()), "--parallel", str(parallel),
                              "-c", str(ctx * parallel), "--cont-batching", "--no-webui"] + self.peer_extra + list(args), env=env, stdout=lf, stderr=lf,
                             preexec_fn=self.cg_join(cgroup))
        import http.client
        t0 = time.time()
        while time.time() - t0 < 600 and p.poll() is None:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    lf.close()
                    return p, port, lp
            except OSError:
                pass
            time.sleep(0.2)
        lf.close()
        return p, None, lp

    def batch(self):
        """Concurrent clients (1, 2, 4, 8), one /v1/completions request each
        of G tokens after a distinct prompt, on the resident and the
        streaming synthetic models: aggregate generated tok/s (all clients'
        tokens over the wall time of the round), TTFT p50/p95, disk bytes
        and forwards per generated token from /metrics (sequences per
        forward shows how many conversations each forward advanced); the
        same rounds against llama-server --parallel N (continuous batching)
        of the pinned llama.cpp on the model's GGUF export where it is
        installed. Rounds of the two engines alternate, repeats times."""
        P, G = (32, 16) if self.a.quick else (64, 64)
        Ns = (1, 2, 4, 8)
        out = {"P": P, "G": G, "models": {}}
        peer = self.peer_wanted() and self.peer() and os.access(os.path.join(self.llama, "bin", "llama-server"), os.X_OK)
        if self.peer_wanted() and not peer:
            self.skip("batch: llama-server side by side", "llama-server not built (make llamacpp)")
        stream = {"DIRECT": "1", "PIN": "0"}
        tr, stats = self.route_trace()
        for key, name, env in (("medium", "medium", None), ("large", "large", stream), ("large-replayed", "large", dict(stream, ROUTE_REPLAY=tr))):
            d = self.ensure_model(name)
            if env and "ROUTE_REPLAY" in env and self.R["models"][name]["experts_per_layer"] < stats["experts"]:
                self.skip("batch " + key, "the %s model has %d experts per layer, the trace routes among %d" % (
                    name, self.R["models"][name]["experts_per_layer"], stats["experts"]))
                continue
            e = dict(env) if env else {"PIN": self.usage_all(d), "PIN_GB": "all"}
            lim, largs = None, []
            if env:  # streaming: both engines in a memory cgroup of the budget (page cache charged), llama.cpp on its mmap
                e["RAM_GB"] = str(self.R["limits"].get("stream_ram_gb") or self.stream_budget())
                lim = (float(e["RAM_GB"]) + 0.5) * 1e9 if self.memcg else None
                largs = ([] if "--repack" in self.peer_extra else ["--no-repack"]) + ["-lm", "mmap"]
            e["CHAT_TEMPLATE"] = None
            e["SERVE_SLOTS"] = str(max(Ns))  # every client decodes at once, whatever the plan would choose
            cg = self.cg_make(lim) if lim else None
            p, port, lp = self.serve_start(d, e, "batch-" + key, cg)
            if not port:
                self.say("  batch: the server did not start, see %s" % lp)
                self.serve_stop(p)
                self.cg_done(cg)
                continue
            rows = {}
            gp = self.gguf_of(name) if peer and "ROUTE_REPLAY" not in e else None  # llama-server routes by its own router
            try:
                self.complete_stream(port, self.prompt(d, P, 999), 4)  # warm-up
                for N in Ns:
                    runs = []
                    lproc, lport, lcg = None, None, None
                    if gp:
                        lcg = self.cg_make(lim) if lim else None
                        lproc, lport, llp = self.llama_server_start(gp, N, P + G + 16, "%s-%d" % (name, N), lcg, largs)
                        if not lport:
                            self.say("  batch: llama-server did not start, see %s" % llp)
                    try:
                        for rep in range(max(1, self.a.repeats)):
                            prompts = [self.prompt(d, P, 31 * N + 7 * i + rep) for i in range(N)]
                            runs.append(self.batch_run(port, prompts, G))
                            if lport:  # interleaved: the peer's round of the same prompts right after
                                ltps, l50, l95, _, lerrs, ldec = self.batch_round(lport, prompts, G, {"ignore_eos": True})
                                runs[-1].update(llama_tok_s=ltps, llama_decode_tok_s=ldec, llama_ttft_p50_s=l50, llama_ttft_p95_s=l95, llama_errors=lerrs)
                    finally:
                        if lproc is not None:
                            self.serve_stop(lproc)
                        self.cg_done(lcg)
                    med = lambda k: median([r[k] for r in runs if r.get(k) is not None]) if any(r.get(k) is not None for r in runs) else None  # noqa: E731
                    rows[N] = {"runs": runs, **{k: med(k) for k in ("tok_s", "decode_tok_s", "ttft_p50_s", "ttft_p95_s", "disk_bytes_per_token",
                                                                      "forwards_per_token", "sequences_per_forward", "llama_tok_s", "llama_decode_tok_s",
                                                                      "llama_ttft_p50_s", "llama_ttft_p95_s")}}
                    r = rows[N]
                    self.say("  batch %s, %d clients: decode %.2f tok/s aggregate (%.2fx one client's), %.2f tok/s over the round with prefill, "
                             "TTFT p50 %.2f s p95 %.2f s, %.2f sequences per forward, %.1f MB disk per token%s" % (
                                 key, N, r["decode_tok_s"] or 0, (r["decode_tok_s"] or 0) / (rows[1]["decode_tok_s"] or 1), r["tok_s"] or 0,
                                 r["ttft_p50_s"] or 0, r["ttft_p95_s"] or 0, r["sequences_per_forward"] or 0, (r["disk_bytes_per_token"] or 0) / 1e6,
                                 "; llama-server --parallel %d: decode %.2f tok/s, %.2f over the round, TTFT p95 %.2f s" % (
                                     N, r["llama_decode_tok_s"] or 0, r["llama_tok_s"], r["llama_ttft_p95_s"] or 0) if r.get("llama_tok_s") else ""))
            finally:
                self.serve_stop(p)
                self.cg_done(cg)
            out["models"][key] = {"rows": rows, "log": lp, "memcg_bytes": lim, "llama_args": largs, "replayed": "ROUTE_REPLAY" in e}
            one, eight = rows.get(1, {}).get("decode_tok_s"), rows.get(8, {}).get("decode_tok_s")
            b1, b4 = rows.get(1, {}).get("disk_bytes_per_token"), rows.get(4, {}).get("disk_bytes_per_token")
            if env and b1 and b4:
                out["models"][key]["disk_bytes_4_over_1"] = b4 / b1
                self.say("  batch %s: disk bytes per token at 4 clients = %.2fx one client's" % (key, b4 / b1))
            if one and eight:
                self.R["workloads"].append({"id": "batch.%s.tok_s_8" % key, "engine": "colibri", "model": name, "unit": "tok/s", "n": self.a.repeats,
                                            "what": "aggregate decode tok/s, 8 concurrent clients x %d tokens" % G, "value": round(eight, 2),
                                            "limit_name": "one client's decode tok/s", "limit": round(one, 2), "ratio": round(eight / one, 3)})
        self.R["batch"] = out

    def grammar(self):
        """Grammar masks: bench_grammar's cost per mask over a 150k-token
        vocabulary on four random walks (a JSON schema, a free JSON object,
        a tool call, a 10,000-value enum), each walked three times in one
        run: token tables built as the walk goes (a grammar's first
        request), the tables kept (a grammar seen before), and the whole
        trie walked at every step (the peer: masks before the tables). Then
        a JSON-schema workload on the resident model, forced tokens batched
        (GRAMMAR_BATCH=1) against one forward each, with the forwards saved."""
        out, _, _, _, _, lp = self.run("bench_grammar", [os.path.join(ROOT, "build", "rel", "bench_grammar"), os.path.join(ROOT, "tests", "fixtures", "tokenizer", "tokenizer.json"),
                                                         "150000", "100" if self.a.quick else "400"], timeout=1800)
        g = {"log": lp}
        pc = r"p50 ([\d.]+), p99 ([\d.]+), max ([\d.]+)"
        for line in out.splitlines():
            m = re.match(r"grammar (\S+): compiled in ([\d.]+) ms \| first walk " + pc + r" us \((\d+) token tables built\) \| again " + pc +
                         r" us \| whole trie " + pc + r" us \| mean ([\d.]+) / ([\d.]+) / ([\d.]+) us over (\d+) tokens \| (\d+) allowed on average \| ([\d.]+)% of steps forced", line)
            if not m:
                continue
            v = [float(x) for x in m.groups()[1:]]
            name = m.group(1)
            row = {"compile_ms": v[0], "first": {"p50_us": v[1], "p99_us": v[2], "max_us": v[3], "mean_us": v[11]}, "tables": int(v[4]),
                   "again": {"p50_us": v[5], "p99_us": v[6], "max_us": v[7], "mean_us": v[12]},
                   "whole_trie": {"p50_us": v[8], "p99_us": v[9], "max_us": v[10], "mean_us": v[13]},
                   "vocab": int(v[14]), "allowed": int(v[15]), "forced_pct": v[16]}
            g[name] = row
            self.R["workloads"].append({"id": "grammar.mask.%s" % name, "engine": "colibri", "model": None, "unit": "us/token", "n": 1,
                                        "value": row["again"]["p50_us"], "what": "grammar mask over %d tokens, median of a random walk with the token "
                                        "tables kept (%s); p99 %.1f us; first walk p50 %.1f / p99 %.1f us" % (row["vocab"], name, row["again"]["p99_us"],
                                                                                                         row["first"]["p50_us"], row["first"]["p99_us"]),
                                        "limit_name": "whole-trie walk, median", "limit": row["whole_trie"]["p50_us"],
                                        "ratio": round(row["whole_trie"]["p50_us"] / row["again"]["p50_us"], 1) if row["again"]["p50_us"] else None})
            self.say("  grammar %s: compiled in %.2f ms; masks p50/p99 %.1f/%.1f us (tables kept), %.1f/%.1f us (first walk, %d tables), "
                     "%.1f/%.1f us (whole trie) over %d tokens; %.1f%% of steps forced" % (
                         name, row["compile_ms"], row["again"]["p50_us"], row["again"]["p99_us"], row["first"]["p50_us"], row["first"]["p99_us"],
                         row["tables"], row["whole_trie"]["p50_us"], row["whole_trie"]["p99_us"], row["vocab"], row["forced_pct"]))
        d = self.ensure_model("medium")
        schema = os.path.join(self.logdir, "bench-schema.json")
        with open(schema, "w") as f:
            json.dump({"type": "object", "properties": {"id": {"type": "integer"}, "label": {"type": "string", "maxLength": 12},
                                                        "flags": {"type": "array", "items": {"enum": ["alpha", "beta"]}, "maxItems": 3},
                                                        "ok": {"type": "boolean"}}, "required": ["id", "label", "flags", "ok"]}, f)
        env = {"PIN": self.usage_all(d), "PIN_GB": "all", "JSON_SCHEMA": schema, "TEMP": "0.8"}
        rows = {}
        for b in ("1", "0"):
            rs = [self.crun("grammar-batch%s-%d" % (b, i), d, dict(env, GRAMMAR_BATCH=b, SEED=str(i + 1)), 16, 96) for i in range(max(1, self.a.repeats))]
            saved, forced, toks = 0, 0, 0
            for r in rs:
                try:
                    with open(r["log"]) as f:
                        m = re.search(r"(\d+) tokens forced, (\d+) forwards saved", f.read())
                    if m:
                        forced += int(m.group(1))
                        saved += int(m.group(2))
                except OSError:
                    pass
                toks += r.get("gen_tokens") or 0
            ok = [r for r in rs if not r.get("failed")]
            rows[b] = {"decode_s": sum(r.get("gen_tokens", 0) / r["decode_tps"] for r in ok if r.get("decode_tps")), "gen_tokens": toks,
                       "forced": forced, "saved": saved, "runs": len(ok)}
        g["workload"] = rows
        if rows["1"]["decode_s"] and rows["0"]["decode_s"]:
            ratio = rows["0"]["decode_s"] / rows["1"]["decode_s"]
            self.R["workloads"].append({"id": "grammar.batch", "engine": "colibri", "model": "medium", "unit": "x", "n": rows["1"]["runs"],
                                        "value": round(ratio, 3), "what": "decode time with forced tokens one forward each / batched, JSON-schema answers "
                                        "(%d of %d tokens forced, %d forwards saved)" % (rows["1"]["forced"], rows["1"]["gen_tokens"], rows["1"]["saved"])})
            self.say("  grammar workload: %d of %d tokens forced, %d forwards saved; decode %.2f s batched vs %.2f s one forward each (x%.2f)" % (
                rows["1"]["forced"], rows["1"]["gen_tokens"], rows["1"]["saved"], rows["1"]["decode_s"], rows["0"]["decode_s"], ratio))
        self.R["grammar"] = g

    def kvcache(self):
        """The KV cache's row formats (KV_BITS, kvq.h): bench_kv times one
        absorbed head's pass over a 128k-token GLM-5 latent cache (32k with
        --quick) on one thread, scores then the weighted sum, per format;
        the peer is the f32 cache, the ratio its time over the format's."""
        keys = "32768" if self.a.quick else "131072"
        out, _, _, _, _, lp = self.run("bench_kv", [os.path.join(ROOT, "build", "rel", "bench_kv"), keys, "1.0"], timeout=600)
        rows = {"log": lp}
        for line in out.splitlines():
            m = re.match(r"kv (\d+): (\d+) keys \| ([\d.]+) ns/key \| ([\d.]+) GB/s \| ([\d.]+) x f32's time", line)
            if not m:
                continue
            bits, n, ns, gbs, rel = m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5))
            rows[bits] = {"keys": n, "ns_per_key": ns, "gbs": gbs, "time_vs_f32": rel}
            self.R["workloads"].append({"id": "kvcache.attention.%s" % bits, "engine": "colibri", "model": None, "unit": "ns/key", "n": 1, "value": ns,
                                        "what": "one absorbed head over %d cached GLM-5 positions (kv_lora 512, rope 64), KV_BITS=%s, one thread; "
                                        "%.2f GB/s of cache read" % (n, bits, gbs),
                                        "limit_name": "the f32 cache's ns/key", "limit": ns / rel if rel else None,
                                        "ratio": round(1 / rel, 2) if rel else None})
            self.say("  KV_BITS=%s: %.3f ns/key over %d keys, %.2f GB/s read, %.2fx the f32 cache's speed" % (bits, ns, n, gbs, 1 / rel if rel else 0))
        self.R["kvcache"] = rows

    def mpi(self):
        """Routed experts over MPI ranks (docs/mpi.md) on this host, the TCP
        transport forced: the medium model with every rank's memory limited
        (its own memory cgroup and RAM_GB: the dense part, the working set
        and about 40% of the experts), so the experts fit in 3 ranks' memory
        together but not in one. Decode tok/s of 2, 3 and 4 ranks against
        the single process under one rank's limit, interleaved, each run
        with its page cache dropped and its experts pinned from a usage
        history recorded once; the bytes a forward row moved against the
        plan. Added loopback latency (tc netem) where the kernel has it."""
        mpirun, binary = shutil.which("mpirun"), os.path.join(ROOT, "build", "rel-mpi", "colibri")
        if not mpirun or not os.path.exists(binary):
            self.say("mpi: skipped (%s)" % ("no mpirun" if not mpirun else "build/rel-mpi/colibri not built: make bench builds it where mpicc is"))
            self.R["mpi"] = {"skipped": True}
            return
        name = "medium"
        d = self.ensure_model(name)
        f = self.R["models"][name]
        ram = float("%.1f" % (((f["dense_bytes"] + 0.35e9) / 0.95 + 0.40 * f["expert_bytes_total"]) / 1e9 + 0.05))
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        base = {"RAM_GB": str(ram), "PIN": "auto", "USAGE_SAVE": "0", "THREADS": str(max(1, (os.cpu_count() or 2) // 2)),
                "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        usage = os.path.join(d, ".coli_usage")
        if not os.path.exists(usage):  # the history every rank count pins from: one sampled run
            self.run("mpi-history", [self.colibri, d], {"USAGE_SAVE": "1", "PIN": "0", "TEMP": "1", "NGEN": "64", "CHAT_TEMPLATE": "0",
                                                       "PROMPT": self.prompt(d, 64)}, timeout=3600)
        netem = subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "100us"], capture_output=True, text=True) \
            if shutil.which("tc") else None
        if netem is not None and netem.returncode == 0:
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
        why_no_netem = "no tc" if netem is None else (netem.stderr.strip() or "tc failed") if netem.returncode else None
        delays = [0] + ([100, 500] if not why_no_netem else [])
        n, P, G = max(1, self.a.repeats), 32, (16 if self.a.quick else 32)
        ranks = (1, 2, 3, 4)
        self.say("MPI: %s, RAM_GB=%s and a %s memory cgroup per rank, %d+%d tokens, ranks %s, %d interleaved repeats; added latency %s" % (
            name, ram, "%.1f GB" % (lim / 1e9) if lim else "no", P, G, ranks, n,
            ", ".join("%d us" % x for x in delays) if not why_no_netem else "none (netem: %s)" % why_no_netem))
        res = {}
        for i in range(n):
            for delay in delays:
                if delay:
                    subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "%dus" % delay], capture_output=True)
                try:
                    for k in ranks:
                        r = self.mpi_run("mpi-%d-%dus-%d" % (k, delay, i), mpirun, binary, d, k, dict(base), P, G, lim)
                        res.setdefault((k, delay), []).append(r)
                        self.say("  %d rank%s, +%d us: decode %s tok/s, hit %s%%, %s MB/tok from disk, others took %s CPU-s%s" % (
                            k, "s" if k > 1 else "", delay, r.get("decode_tps"), r.get("hit"), r.get("mb_per_tok"), r.get("others_cpu_s"),
                            ", %s KB a row moved (plan %s KB), rank 0 waited %s ms a row" % (r.get("net_kb_row"), r.get("plan_kb_row"), r.get("wait_ms_row"))
                            if k > 1 else ""))
                finally:
                    if delay:
                        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
        one = median([r.get("decode_tps") for r in res.get((1, 0), []) if not r.get("failed")])
        rows = []
        for (k, delay), rs in sorted(res.items()):
            ok = [r for r in rs if not r.get("failed")]
            v = median([r.get("decode_tps") for r in ok])
            row = {"ranks": k, "delay_us": delay, "n": len(ok), "decode_tps": v, "min": min([r["decode_tps"] for r in ok], default=None),
                   "max": max([r["decode_tps"] for r in ok], default=None), "hit": median([r.get("hit") for r in ok]),
                   "mb_per_tok": median([r.get("mb_per_tok") for r in ok]), "net_kb_row": median([r.get("net_kb_row") for r in ok]),
                   "plan_kb_row": median([r.get("plan_kb_row") for r in ok]), "wait_ms_row": median([r.get("wait_ms_row") for r in ok]),
                   "logs": [r["log"] for r in rs]}
            rows.append(row)
            if k > 1:
                self.R["workloads"].append({"id": "mpi.%dranks.%dus" % (k, delay), "engine": "colibri", "model": name, "unit": "tok/s", "n": len(ok),
                                            "value": v, "min": row["min"], "max": row["max"],
                                            "what": "decode tok/s, experts over %d MPI ranks on this host (TCP, +%d us loopback), each rank "
                                                    "RAM_GB=%s in its own memory cgroup, experts pinned from the usage history" % (k, delay, ram),
                                            "limit_name": "one process under one rank's memory limit", "limit": one,
                                            "ratio": round(v / one, 2) if v and one else None})
        self.R["mpi"] = {"ram_gb": ram, "memcg_bytes": lim, "netem": why_no_netem or "available", "rows": rows}

    def mpi_run(self, label, mpirun, binary, d, k, env, P, G, lim):
        """One run of k ranks (k = 1: the single process), each rank in its
        own memory cgroup of lim bytes; its parsed record."""
        env.update({"SEED": "1", "TEMP": "0", "CHAT_TEMPLATE": "0", "NGEN": str(G), "PROMPT": self.prompt(d, P)})
        cached = self.drop_cache(self.shards(d))
        cgs = [self.cg_make(lim) if lim else None for _ in range(k)]
        try:
            if k == 1:
                out, err, rc, wall, rss, lp = self.run(label, [self.colibri, d], env, timeout=3600, cgroup=cgs[0], check=False)
            else:
                cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "tcp,self"]
                for j, cg in enumerate(cgs):
                    join = ("echo $$ > %s/cgroup.procs && " % cg) if cg else ""
                    cmd += ([":"] if j else []) + ["-np", "1", "sh", "-c", join + 'exec "$0" "$1"', binary, d]
                out, err, rc, wall, rss, lp = self.run(label, cmd, env, timeout=3600, check=False)
        finally:
            for cg in cgs:
                self.cg_done(cg)
        r = parse_colibri(err)
        m = re.search(r"MPI: \d+ ranks, \d+ forward rows: ([\d.]+ [KMG]?B) a row moved \(plan ([\d.]+ [KMG]?B)\), rank 0 waited ([\d.]+) ms", err)
        if m:
            r.update(net_kb_row=round(fmt_bytes_gb(m.group(1)) / 1e3, 1), plan_kb_row=round(fmt_bytes_gb(m.group(2)) / 1e3, 1), wait_ms_row=float(m.group(3)))
        r.update(label=label, rc=rc, wall_s=round(wall, 3), log=lp, cache_left_after_drop=cached, **(self.last_others or {}))
        if rc != 0 or "decode_tps" not in r:
            self.say("  %s: failed (exit %s), see %s" % (label, rc, lp))
            r["failed"] = True
        return r

    def quality(self):
        """What load-time formats and speculation are worth on a model that
        learned (tests/fixtures/trained-glm5, docs/training.md): the f32 run
        of its held-out text kept as a base (--kld-base), each format
        compared with it (--kld: perplexity, mean and p99 KL divergence,
        top-1 agreement), and greedy MTP speculation on held-out code per
        DRAFT (drafts accepted, tokens per forward, decode tok/s against
        DRAFT=0). Deterministic but for the timings."""
        d = os.path.join(ROOT, "tests", "fixtures", "trained-glm5")
        text = os.path.join(d, "heldout.txt")
        if self.a.quick:  # the first 100 lines: 5 windows
            text = os.path.join(self.logdir, "heldout-head.txt")
            with open(os.path.join(d, "heldout.txt"), "rb") as f, open(text, "wb") as g:
                g.write(b"".join(f.readlines()[:100]))
        base = os.path.join(self.logdir, "trained-glm5.kld")
        env = {"USAGE_SAVE": "0"}
        out, _, _, _, _, _ = self.run("quality-base", [os.path.join(ROOT, "colibri"), "--perplexity", text, "--kld-base", base, d], env)
        m = QPPL_RE.search(out)
        q = {"model": "trained-glm5", "text": os.path.relpath(text, ROOT), "base": {"perplexity": float(m.group(1)), "stderr": float(m.group(2)),
                                                                                    "tokens": int(m.group(3))}, "formats": [], "spec": []}
        self.say("quality: f32 perplexity %s +/- %s over %s tokens" % m.groups())
        formats = [{"EXPERT_BITS": "8"}, {"EXPERT_BITS": "8", "IDOT": "0"}, {"EXPERT_BITS": "4"}, {"EXPERT_BITS": "4", "IDOT": "0"},
                   {"EXPERT_BITS": "4", "GROUP_SIZE": "32"}, {"EXPERT_BITS": "4", "GROUP_SIZE": "64"}, {"EXPERT_BITS": "2"}, {"DENSE_BITS": "8"},
                   {"DENSE_BITS": "4"}, {"DENSE_BITS": "8", "EXPERT_BITS": "4"}, {"DENSE_BITS": "4", "EXPERT_BITS": "4", "GROUP_SIZE": "32"}]
        for f in formats[:4] if self.a.quick else formats:
            out, err, rc, _, _, _ = self.run("quality-" + "-".join("%s%s" % kv for kv in sorted(f.items())), [os.path.join(ROOT, "colibri"), "--kld", base, d],
                                             dict(env, **f), check=False)
            m, k = QPPL_RE.search(out), QKLD_RE.search(out)
            if rc or not (m and k):
                self.skip("quality " + env_str(f), "exit %d: %s" % (rc, err.strip().splitlines()[-1:] or "no result line"))
                continue
            row = {"knobs": f, "perplexity": float(m.group(1)), "kld_mean": float(k.group(1)), "kld_stderr": float(k.group(2)),
                   "kld_p99": float(k.group(3)), "top1_pct": float(k.group(4)), "delta_p_pct": float(k.group(5))}
            q["formats"].append(row)
            self.say("  %-40s perplexity %.4f, KLD %.6f (p99 %.6f), top-1 %.2f%%" % (env_str(f), row["perplexity"], row["kld_mean"], row["kld_p99"],
                                                                                   row["top1_pct"]))
        conv = os.path.join(ROOT, "colibri-convert")
        convs = [["--expert-bits", "8", "--dense-bits", "32"], ["--expert-bits", "4", "--dense-bits", "32"],
                 ["--expert-bits", "4", "--group-size", "32", "--dense-bits", "32"], ["--expert-bits", "4", "--down-bits", "8", "--dense-bits", "32"],
                 ["--expert-bits", "2", "--down-bits", "4", "--dense-bits", "32"], ["--expert-bits", "4", "--group-size", "64", "--dense-bits", "8"]]
        if not os.access(conv, os.X_OK):
            self.skip("quality: converted containers", "colibri-convert is not built")
            convs = []
        q["converted"] = []
        for args in convs[:2] if self.a.quick else convs:  # the converter's containers of the bf16 fixture, against the same base
            out_dir = os.path.join(self.logdir, "trained-glm5" + "".join(a.replace("--", "-") for a in args))
            _, err, rc, _, _, _ = self.run("quality-convert" + "".join(a.replace("--", "-") for a in args), [conv, d, out_dir] + args, check=False)
            out, err2, rc2, _, _, _ = self.run("quality-kld" + "".join(a.replace("--", "-") for a in args), [os.path.join(ROOT, "colibri"), "--kld", base, out_dir],
                                               env, check=False) if not rc else ("", err, rc, 0, 0, 0)
            m, k = QPPL_RE.search(out), QKLD_RE.search(out)
            if rc or rc2 or not (m and k):
                self.skip("quality colibri-convert " + " ".join(args), "exit %d/%d: %s" % (rc, rc2, (err + err2).strip().splitlines()[-1:]))
                continue
            row = {"convert": args, "perplexity": float(m.group(1)), "kld_mean": float(k.group(1)), "kld_stderr": float(k.group(2)),
                   "kld_p99": float(k.group(3)), "top1_pct": float(k.group(4)), "delta_p_pct": float(k.group(5))}
            q["converted"].append(row)
            self.say("  colibri-convert %-36s perplexity %.4f, KLD %.6f (p99 %.6f), top-1 %.2f%%" % (" ".join(args), row["perplexity"], row["kld_mean"],
                                                                                                row["kld_p99"], row["top1_pct"]))
        with open(os.path.join(d, "heldout.txt")) as f:
            lines = f.readlines()
        prompts = ["".join(lines[s:s + 11]) for s in (99, 299, 499, 699, 899, 1099)][: 2 if self.a.quick else 6]
        for k, temp in [(k, "0") for k in ("0", "1", "2", "3", "4", "-1")] + [(k, "0.7") for k in ("0", "1", "2", "3", "-1")]:
            drafted = accepted = toks = 0
            secs, tpf, busy = 0.0, [], 0.0
            for i, p in enumerate(prompts):
                out, err, rc, _, _, _ = self.run("quality-spec-k%s-t%s-%d" % (k, temp, i), [os.path.join(ROOT, "colibri"), d],
                                                 dict(env, PROMPT=p, CHAT_TEMPLATE="0", NGEN="100", TEMP=temp, SEED=str(7 + i), DRAFT=k), check=False)
                busy = max(busy, (self.last_others or {}).get("others_cpu_frac") or 0.0)
                e = END_RE.search(err)
                s = QSPEC_RE.search(err)
                if rc or not e:
                    continue
                n, tps = int(e.group(3)), float(e.group(4))  # generated tokens, their tok/s
                toks += n
                secs += n / tps if tps else 0
                if s:
                    drafted, accepted = drafted + int(s.group(1)), accepted + int(s.group(2))
                    tpf.append(float(s.group(3)))
            row = {"draft": int(k), "temp": float(temp), "drafted": drafted, "accepted": accepted, "tokens_per_forward": tpf, "gen_tokens": toks,
                   "decode_tok_s": round(toks / secs, 2) if secs else None, "disturbed": busy > BUSY_FRAC}
            q["spec"].append(row)
            self.say("  DRAFT=%s TEMP=%s: %d of %d drafts accepted, tokens per forward %s, decode %s tok/s" % (
                k, temp, accepted, drafted, " ".join("%.2f" % x for x in tpf) or "-", row["decode_tok_s"]))
        q["auto"] = self.draft_auto_pairs(d, env, prompts)
        self.R["quality"] = q

    def draft_auto_pairs(self, d, env, prompts):
        """DRAFT=-1 against DRAFT=0, interleaved in pairs (each prompt, each
        temperature, several rounds): decode tok/s and prefill + decode time
        ratios per pair, whether the tokens were the same (they must be), and
        how DRAFT=-1 ended (forwards by drafts, why it stopped)."""
        rounds = 2 if self.a.quick else 5
        out = []
        for temp in ("0", "0.7"):
            dec, tot, same, stops, busy = [], [], True, [], 0.0
            for r in range(rounds):
                for i, p in enumerate(prompts):
                    got = {}
                    for k in ("0", "-1"):
                        o, err, rc, _, _, _ = self.run("quality-auto-k%s-t%s-%d-%d" % (k, temp, r, i), [os.path.join(ROOT, "colibri"), d],
                                                       dict(env, PROMPT=p, CHAT_TEMPLATE="0", NGEN="100", TEMP=temp, SEED=str(7 + r), DRAFT=k, TOKENS="1"),
                                                       check=False)
                        busy = max(busy, (self.last_others or {}).get("others_cpu_frac") or 0.0)
                        e = END_RE.search(err)
                        g = re.search(r"generated tokens: (.*)", err)
                        if rc or not e:
                            break
                        got[k] = (float(e.group(4)), int(e.group(1)) / float(e.group(2)) + int(e.group(3)) / float(e.group(4)), g.group(1) if g else None)
                        if k == "-1":
                            m = re.search(r"(forwards by drafts [\d: ]+)?(; drafting stopped: .*)?$", err.split("speculation:")[-1].splitlines()[0])
                            stops.append(((m.group(1) or "") + (m.group(2) or "")).strip("; ") if m else "")
                    if len(got) == 2:
                        dec.append(got["-1"][0] / got["0"][0])
                        tot.append(got["0"][1] / got["-1"][1])
                        same &= got["-1"][2] == got["0"][2]
            if not dec:
                self.skip("quality DRAFT=-1 pairs TEMP=%s" % temp, "no pair of runs finished")
                continue
            row = {"temp": float(temp), "pairs": len(dec), "decode_ratio_median": round(statistics.median(dec), 3),
                   "decode_ratio_range": [round(min(dec), 3), round(max(dec), 3)], "total_ratio_median": round(statistics.median(tot), 3),
                   "total_ratio_range": [round(min(tot), 3), round(max(tot), 3)], "same_tokens": same, "ends": stops[:3],
                   "others_cpu_frac_max": round(busy, 3), "disturbed": busy > BUSY_FRAC}
            out.append(row)
            self.say("  DRAFT=-1 / DRAFT=0 at TEMP=%s over %d interleaved pairs: decode %.3f (%.3f-%.3f), prefill + decode time %.3f (%.3f-%.3f), "
                     "tokens %s; other processes took at most %.0f%% of the CPUs; e.g. %s" % (
                         temp, len(dec), row["decode_ratio_median"], min(dec), max(dec), row["total_ratio_median"], min(tot), max(tot),
                         "the same" if same else "DIFFERENT", 100 * busy, stops[0] if stops else "-"))
        return out

    def cuda(self):
        """The GPU (CUDA builds, build/rel-cuda): bench_cuda's decode matmul
        at GLM-5 dense shapes against the device's copy bandwidth; then
        decode on the resident model with the dense matmuls and the GPU
        expert tier (the history names every expert: the tier takes what
        fits, the pinned set the rest) on the GPU (CUDA=1) against the CPU alone
        (CUDA=0), tokens compared, and that decode's weight bytes per token
        times tok/s against the device's copy bandwidth. Skipped
        with the reason without nvcc or a GPU."""
        bc, cb = os.path.join(ROOT, "build", "rel-cuda", "bench_cuda"), os.path.join(ROOT, "build", "rel-cuda", "colibri")
        if not (os.path.exists(bc) and os.path.exists(cb)):
            self.skip("GPU rows", "no CUDA build (make bench builds build/rel-cuda where nvcc is installed)")
            return
        out, _, _, _, _, lp = self.run("bench_cuda", [bc, "--json"], timeout=900)
        j = json.loads((out.strip().splitlines() or ["{}"])[-1])
        if "rows" not in j:
            self.skip("GPU rows", "no usable GPU (%s)" % j.get("skipped", "bench_cuda said nothing"))
            return
        g = {"device": j["device"], "copy_gbps": j["copy_gbps"], "rows": j["rows"], "log": lp}
        self.say("  GPU: %s, device-to-device copy %.0f GB/s (read + write)" % (j["device"], j["copy_gbps"]))
        for r in j["rows"]:
            self.R["workloads"].append({"id": "cuda.matmul.%s.%s.S%d" % (r["shape"], r["format"], r["rows"]), "engine": "colibri", "model": None,
                                        "unit": "GB/s", "n": 1, "value": r["kernel_gbps"], "limit_name": "device copy bandwidth", "limit": j["copy_gbps"],
                                        "ratio": r["kernel_vs_copy"], "what": "GPU matmul kernel, %dx%d %s, %d row(s); per call with transfers %.0f GB/s" % (
                                            r["O"], r["I"], r["format"], r["rows"], r["call_gbps"])})
            self.say("  GPU %s %dx%d %s S=%d: kernel %.0f GB/s (%.0f%% of copy), per call %.0f GB/s (%.1f us)" % (
                r["shape"], r["O"], r["I"], r["format"], r["rows"], r["kernel_gbps"], 100 * r["kernel_vs_copy"], r["call_gbps"], r["call_us"]))
        for r in j.get("attention", []):
            self.R["workloads"].append({"id": "cuda.attention.T%d" % r["keys"], "engine": "colibri", "model": None, "unit": "GB/s", "n": 1,
                                        "value": r["kernel_gbps"], "limit_name": "device copy bandwidth", "limit": j["copy_gbps"],
                                        "ratio": r["kernel_vs_copy"], "what": "absorbed MLA decode, GLM-5 layer shape, %d keys: kernels %.1f us, per call %.1f us" % (
                                            r["keys"], r["kernel_us"], r["call_us"])})
            self.say("  GPU attention %d keys: kernels %.1f us (%.0f GB/s, %.0f%% of copy), per call %.1f us" % (
                r["keys"], r["kernel_us"], r["kernel_gbps"], 100 * r["kernel_vs_copy"], r["call_us"]))
        d = self.ensure_model("medium")
        env = {"PIN": self.usage_all(d), "PIN_GB": "all", "TOKENS": "1"}
        keep, self.colibri = self.colibri, cb
        try:
            rows = {c: [self.crun("cuda%s-%d" % (c, i), d, dict(env, CUDA=c), 64, 64) for i in range(max(1, self.a.repeats))] for c in ("0", "1")}
        finally:
            self.colibri = keep
        toks = set()
        for c in rows:
            for r in rows[c]:
                try:
                    with open(r["log"]) as f:
                        m = re.search(r"colibri: generated tokens:([\d ]+)", f.read())
                    toks.add(m.group(1) if m else None)
                except OSError:
                    toks.add(None)
        a = median([r["decode_tps"] for r in rows["1"] if not r.get("failed")])
        b = median([r["decode_tps"] for r in rows["0"] if not r.get("failed")])
        g["decode"] = {"model": "medium", "gpu_tps": a, "cpu_tps": b, "tokens_identical": len(toks) == 1 and None not in toks}
        if a and b:
            self.R["workloads"].append({"id": "cuda.decode", "engine": "colibri", "model": "medium", "unit": "tok/s", "n": len(rows["1"]), "value": a,
                                        "limit_name": "the same decode on the CPU alone", "limit": b, "ratio": round(a / b, 3),
                                        "what": "decode with the dense matmuls and the GPU expert tier on the GPU; tokens %s" % (
                                            "identical" if g["decode"]["tokens_identical"] else "DIFFERENT")})
            self.say("  GPU decode (medium, dense matrices and the expert tier on the GPU): %.2f tok/s vs %.2f on the CPU alone (x%.2f); tokens %s" % (
                a, b, a / b, "identical" if g["decode"]["tokens_identical"] else "DIFFERENT"))
        f = self.R["models"].get("medium", {})
        wb = (f.get("dense_bytes_per_token") or 0) + (f.get("expert_bytes_per_token") or 0)
        if a and wb and j.get("copy_gbps"):  # #16's measure: weight bytes a token touches x tok/s against the device's bandwidth
            gbs = wb * a / 1e9
            g["decode"].update(weight_bytes_per_token=wb, weight_gbs=gbs, weight_vs_copy=gbs / j["copy_gbps"])
            self.R["workloads"].append({"id": "cuda.decode.weights", "engine": "colibri", "model": "medium", "unit": "GB/s", "n": len(rows["1"]),
                                        "value": round(gbs, 2), "limit_name": "device copy bandwidth", "limit": j["copy_gbps"],
                                        "ratio": round(gbs / j["copy_gbps"], 3),
                                        "what": "weight bytes per token x GPU decode tok/s (norms, the indexer's top-k and the router still on the CPU)"})
            self.say("  GPU decode weights: %.1f MB/token x %.2f tok/s = %.1f GB/s, %.0f%% of the device's copy bandwidth" % (
                wb / 1e6, a, gbs, 100 * gbs / j["copy_gbps"]))
        self.R["cuda"] = g

    def tokenizer(self):
        out, _, _, _, _, _ = self.run("bench_tok", [os.path.join(ROOT, "build", "rel", "bench_tok")], timeout=600)
        tr = [dict(self.others(), label="bench_tok")]
        t = {}
        for line in out.splitlines():
            m = re.match(r"tok\.h (lines|text):\s+([\d.]+) MB/s", line)
            if m:
                t["colibri_" + m.group(1)] = float(m.group(2))
        hp = self.hf_python()
        if hp:
            out, err, rc, _, _, _ = self.run("bench_tok_hf", [hp, os.path.join(ROOT, "bench", "bench_tok_hf.py")], timeout=600, check=False)
            for line in out.splitlines():
                m = re.match(r"tokenizers (lines|text|batch):\s+([\d.]+) MB/s", line)
                if m:
                    t["hf_" + m.group(1)] = float(m.group(2))
            t["hf_python"] = hp
        else:
            self.skip("Hugging Face tokenizers", "no python that imports tokenizers (set COLI_BENCH_HF_PYTHON; tools/requirements-oracle.txt)")
        self.R["tokenizer"] = t
        for k in ("lines", "text"):
            if "colibri_" + k in t:
                w = {"id": "tokenizer.%s" % k, "engine": "colibri", "model": None, "unit": "MB/s", "n": 1, "value": t["colibri_" + k],
                     "what": "tok.h encode, one thread, corpus %s" % ("line by line" if k == "lines" else "as one text"), "runs": tr}
                if "hf_" + k in t:
                    w.update(limit_name="Hugging Face tokenizers, same input", limit=t["hf_" + k], ratio=t["colibri_" + k] / t["hf_" + k])
                self.R["workloads"].append(w)
        for k in ("lines", "text", "batch"):
            if "hf_" + k in t:
                self.R["workloads"].append({"id": "tokenizer.hf.%s" % k, "engine": "hf-tokenizers", "model": None, "unit": "MB/s", "n": 1,
                                            "value": t["hf_" + k], "what": "tokenizers encode (%s)" % k})

    def hf_python(self):
        cands = [os.environ.get("COLI_BENCH_HF_PYTHON"), os.path.join(self.venv, "bin", "python"),
                 os.path.join(os.path.dirname(ROOT), "venv-oracle", "bin", "python"), sys.executable]
        for c in cands:
            if c and os.path.exists(c):
                try:
                    if subprocess.run([c, "-c", "import tokenizers"], capture_output=True, timeout=60).returncode == 0:
                        return c
                except (OSError, subprocess.SubprocessError):
                    pass
        return None

    def convert(self):
        cv = os.path.join(ROOT, "colibri-convert")
        if not os.access(cv, os.X_OK):
            self.skip("converter throughput", "./colibri-convert is not built in this tree")
            self.R["convert"] = {"skipped": "./colibri-convert not built"}
            return
        src = os.path.join(self.cache, "models", "%sconvert-src-bf16" % self.tag)
        if not os.path.exists(os.path.join(src, ".bench-complete")):
            self.say("convert: writing a bf16 GLM-5-shaped source checkpoint")
            make_bf16_source(src, self.ensure_model("small"), experts=8)
        dst = os.path.join(self.cache, "%sconvert-out" % self.tag)
        shutil.rmtree(dst, ignore_errors=True)
        srcb = sum(os.path.getsize(p) for p in self.shards(src))
        self.drop_cache(self.shards(src))
        out, err, rc, wall, rss, lp = self.run("convert", [cv, src, dst, "--expert-bits", "4", "--dense-bits", "8", "--group-size", "64"],
                                               env=self.omp_env, timeout=3600, check=False)
        r = {"source_bytes": srcb, "wall_s": wall, "rc": rc, "log": lp, "peak_rss": rss, "source_mbs": srcb / wall / 1e6 if rc == 0 else None,
             **(self.last_others or {})}
        m = re.search(r"source (\d+) MB/s", err)
        if m:
            r["reported_source_mbs"] = float(m.group(1))
        shutil.rmtree(dst, ignore_errors=True)
        self.R["convert"] = r
        if rc == 0:
            self.R["workloads"].append({"id": "convert.bf16_to_int4", "engine": "colibri-convert", "model": None, "unit": "MB/s", "n": 1,
                                        "value": r["source_mbs"], "what": "bf16 source MB/s converted to int4 g64 experts / int8 dense (cold cache)",
                                        "limit_name": "O_DIRECT disk bandwidth (qd1)", "limit_kind": "disk_qd1", "limit": self.R["limits"].get("disk_qd1_gbs", 0) * 1e3,
                                        "runs": [{"label": "convert", "others_cpu_s": r.get("others_cpu_s"), "others_cpu_frac": r.get("others_cpu_frac"), "log": lp}],
                                        "ratio": r["source_mbs"] / (self.R["limits"]["disk_qd1_gbs"] * 1e3) if self.R["limits"].get("disk_qd1_gbs") else None})
        else:
            self.skip("converter throughput", "colibri-convert exited %d (log %s)" % (rc, lp))

    # ------------------------------------------------------------ llama.cpp
    def peer_wanted(self):
        """llama.cpp side by side: its own section, or the batch section's llama-server rounds."""
        return not self.a.no_peer and (self.section_on("llamacpp") or self.section_on("batch"))

    def peer(self):
        """Sets the llama.cpp peer up once (llama-bench, the gguf venv, R["llamacpp"]); False when not installed."""
        if self.peer_state is not None:
            return self.peer_state
        self.peer_state = False
        lb = os.path.join(self.llama, "bin", "llama-bench")
        py = os.path.join(self.venv, "bin", "python")
        if not os.access(lb, os.X_OK):
            self.skip("llama.cpp side by side", "%s not found (install: make llamacpp)" % lb)
            self.R["llamacpp"] = {"skipped": "llama-bench not installed (make llamacpp)"}
            return False
        if not os.path.exists(py) or subprocess.run([py, "-c", "import gguf, numpy"], capture_output=True).returncode:
            self.skip("llama.cpp side by side", "no venv with gguf at %s (make llamacpp)" % self.venv)
            self.R["llamacpp"] = {"skipped": "gguf venv missing (make llamacpp)"}
            return False
        pin = ""
        pf = os.path.join(self.llama, "..", ".colibri-pin")
        if os.path.exists(pf):
            pin = "llama.cpp vendored by llama-cpp-python " + open(pf).read().strip()
        out, err, _, _, _, _ = self.run("llama-bench-version", [lb, "--version"], check=False)
        ver = (out + err).strip().splitlines()
        L = {"version": (pin + ("; " + ver[0] if ver else "")).strip(), "threads": os.cpu_count(), "rows": [], "runs": [],
             "interleaved": True, "repeats": self.a.repeats, "env": self.omp_env, "spin_env": SPIN_ENV,
             "resident_raw": [], "stream_raw": [],
             "note": "same synthetic model exported by tools/export_gguf.py (Q4_0 experts from int4 g64 by repacking, Q8_0 from int8); "
                     "random weights: tokens are noise in both engines, speed only. llama-bench pp = prompt of N random ids, "
                     "tg = N decoded tokens after a context of the given depth. Each row alternates a colibri run and a llama-bench -r 1 "
                     "run, repeats times; the ratio is the median of the per-pair ratios."}
        isa = os.path.join(self.llama, "..", "build-isa.txt")
        if os.path.exists(isa):
            L["build_isa"] = open(isa).read().strip()
        self.R["llamacpp"] = L
        self.peer_state = True
        return True

    def gguf_of(self, name):
        d = self.ensure_model(name)
        g = d + ".gguf"
        if not os.path.exists(g) or os.path.getmtime(g) < os.path.getmtime(os.path.join(d, ".bench-complete")):
            self.say("llama.cpp: exporting %s to GGUF" % name)
            self.run("export-" + name, [os.path.join(self.venv, "bin", "python"), os.path.join(ROOT, "tools", "export_gguf.py"), d, g], timeout=3600)
        return g

    def lbench(self, label, g, kind, n, depth=0, args=(), env=None, cg_limit=None, cold=False, raw="resident_raw"):
        """One llama-bench run (-r 1) of one test: kind "pp" (prompt of n) or "tg" (n tokens after depth).
        Returns its run record, with tok_s (None when it failed)."""
        L = self.R["llamacpp"]
        lb = os.path.join(self.llama, "bin", "llama-bench")
        shape = ["-p", str(n), "-n", "0"] if kind == "pp" else ["-p", "0", "-n", str(n), "-d", str(depth)]
        e = dict(self.omp_env)
        e.update(env or {})
        if cold:
            self.drop_cache([g])
        cg = self.cg_make(cg_limit) if cg_limit else None
        try:
            out, err, rc, wall, rss, lp = self.run(label, [lb, "-m", g, "-t", str(os.cpu_count()), "-o", "json", "-r", "1"] + self.peer_extra + list(args) + shape,
                                                   env=e, timeout=3600, cgroup=cg, check=False)
        finally:
            peak = self.cg_done(cg)
        rec = {"label": label, "rc": rc, "wall_s": round(wall, 2), "peak_rss": rss, "cgroup_peak": peak, "log": lp, "env": e, **(self.last_others or {})}
        L["runs"].append(rec)
        if rc != 0 and "--repack" not in self.peer_extra and "--repack" not in args and "GGML_ASSERT" in err:
            self.say("  %s: llama-bench aborted (log %s); retrying with --repack 0 for every llama.cpp run" % (label, lp))
            self.peer_extra += ["--repack", "0"]
            L["repack"] = False
            L["repack_why"] = "llama-bench aborted with repacked weights (log %s)" % lp
            return self.lbench(label + "-norepack", g, kind, n, depth, args, env, cg_limit, cold, raw)
        rec["tok_s"] = None
        if rc != 0:
            self.say("  %s: llama-bench exited %d%s (log %s)" % (label, rc, " (killed: the memory cgroup's OOM killer?)" if rc == -9 and cg else "", lp))
            return rec
        try:
            rows = json.loads(out[out.index("["):])
        except ValueError:
            self.say("  %s: no JSON from llama-bench (log %s)" % (label, lp))
            return rec
        L[raw].extend(rows)
        mine = [r for r in rows if (r.get("n_prompt") == n and r.get("n_gen") == 0 if kind == "pp" else
                                    r.get("n_gen") == n and r.get("n_prompt") == 0 and r.get("n_depth", 0) == depth)]
        rec["tok_s"] = mine[0].get("avg_ts") if mine else None
        return rec

    def side_row(self, wid, what, model, cruns, ckey, cscale, lrecs, col_from, extra=None):
        """A side-by-side row from interleaved runs: colibri run i and llama-bench run i form pair i."""
        L = self.R["llamacpp"]
        cv = [r[ckey] * cscale if r.get(ckey) and not r.get("failed") else None for r in cruns]
        lv = [x.get("tok_s") for x in lrecs]
        pairs = [c / v for c, v in zip(cv, lv) if c and v]
        cg, lg = [c for c in cv if c], [v for v in lv if v]
        x = {"id": wid, "what": what, "model": model, "colibri_tok_s": median(cg), "colibri_min": min(cg, default=None), "colibri_max": max(cg, default=None),
             "colibri_n": len(cg), "colibri_from": col_from, "llamacpp_tok_s": median(lg), "llamacpp_min": min(lg, default=None),
             "llamacpp_max": max(lg, default=None), "llamacpp_n": len(lg), "llamacpp_stddev": statistics.stdev(lg) if len(lg) > 1 else None,
             "ratio_colibri_over_llamacpp": median(pairs), "ratio_min": min(pairs, default=None), "ratio_max": max(pairs, default=None),
             "pair_ratios": pairs, "pairs": len(pairs), "interleaved": True,
             "colibri_runs": [r.get("label") for r in cruns], "llamacpp_runs": [r.get("label") for r in lrecs]}
        if extra:
            x.update(extra)
        L["rows"].append(x)
        self.R["workloads"].append({"id": "llamacpp." + wid, "engine": "llama.cpp", "model": model, "unit": "tok/s", "n": len(lg), "what": what,
                                    "value": x["llamacpp_tok_s"], "min": x["llamacpp_min"], "max": x["llamacpp_max"],
                                    "limit": x["colibri_tok_s"], "limit_min": x["colibri_min"], "limit_max": x["colibri_max"],
                                    "ratio": x["ratio_colibri_over_llamacpp"], "ratio_min": x["ratio_min"], "ratio_max": x["ratio_max"],
                                    "pairs": len(pairs), "limit_name": "colibri; ratio colibri/llama.cpp by pair", "limit_kind": "peer",
                                    "runs": [{k: r.get(k) for k in ("label", "tok_s", "rc", "wall_s", "others_cpu_s", "others_cpu_frac", "log")} for r in lrecs],
                                    "colibri_runs": [{"label": r.get("label"), "value": c, "others_cpu_s": r.get("others_cpu_s"),
                                                      "others_cpu_frac": r.get("others_cpu_frac"), "log": r.get("log")} for r, c in zip(cruns, cv)]})
        self.say("  %-28s colibri %s, llama.cpp %s tok/s, colibri/llama.cpp %s [%s-%s] over %d pairs" % (
            wid, fnum(x["colibri_tok_s"]), fnum(x["llamacpp_tok_s"]), fnum(x["ratio_colibri_over_llamacpp"], "%.2f"), fnum(x["ratio_min"], "%.2f"),
            fnum(x["ratio_max"], "%.2f"), len(pairs)))

    def resident8(self):
        """int8 experts: small8 (Q8_0 for llama.cpp), all resident, decode, interleaved."""
        P, G = (32, 32) if self.a.quick else (128, 128)
        d8 = self.ensure_model("small8")
        g8 = self.gguf_of("small8")
        subprocess.run(["cat", g8], stdout=subprocess.DEVNULL)
        self.say("llama.cpp: resident, int8 experts (Q8_0), small8 model, %d interleaved pairs" % self.a.repeats)
        pin = self.usage_all(d8)
        cr, lr = [], []
        for i in range(self.a.repeats):
            cr.append(self.decode_limit(self.crun("resident8-decode-%d" % i, d8, {"PIN": pin, "PIN_GB": "all"}, P, G), "small8", "resident"))
            lr.append(self.lbench("llama-resident8-tg%d-%d" % (G, i), g8, "tg", G, depth=P))
            self.say("  run %d: colibri decode %s tok/s | llama.cpp tg %s" % (i + 1, cr[-1].get("decode_tps"), fnum(lr[-1].get("tok_s"))))
        self.workload("resident8.decode%d" % G, "colibri", "small8", "decode tok/s, int8 experts, all resident", cr, "decode_tps", "tok/s",
                      self.mem_row_limit(cr))
        self.side_row("resident8.decode%d" % G, "decode %d after %d, int8/Q8_0 experts, resident" % (G, P), "small8", cr, "decode_tps", (G - 1) / G, lr,
                      "resident8.decode%d runs x (G-1)/G" % G)

    def llamacpp(self):
        """Side-by-side rows not measured yet: resident and streaming pairs are run inside those sections
        when they run with the peer; the int8 row is always measured here."""
        if not self.peer():
            return
        if "resident" not in self.paired:
            self.say("llama.cpp: resident rows (not run by the resident section)")
            self.resident()
        self.resident8()
        if "streaming" not in self.paired:
            self.say("llama.cpp: streaming rows (not run by the streaming section)")
            self.streaming()

    # ------------------------------------------------------------ driver
    def section_on(self, s):
        if self.a.only:
            return s in self.a.only
        return s not in (self.a.skip or [])

    def main(self):
        prev = None
        if os.path.exists(self.a.out):
            try:
                with open(self.a.out) as f:
                    prev = json.load(f)
            except (OSError, ValueError):
                prev = None
        self.machine()
        self.memcg_setup()
        steps = [("limits", self.limits), ("resident", self.resident), ("streaming", self.streaming), ("history", self.history),
                 ("iopaths", self.iopaths), ("replay", self.replay), ("spec", self.spec), ("serve", self.serve), ("batch", self.batch), ("grammar", self.grammar), ("kvcache", self.kvcache), ("mpi", self.mpi), ("quality", self.quality), ("cuda", self.cuda), ("tokenizer", self.tokenizer), ("convert", self.convert), ("llamacpp", self.llamacpp)]
        timing = {}
        for name, fn in steps:
            if name != "limits" and not self.section_on(name):
                continue
            if name == "llamacpp" and self.a.no_peer:
                self.skip("llama.cpp side by side", "--no-peer")
                continue
            t = time.time()
            fn()
            timing[name] = round(time.time() - t, 1)
            self.save(prev)
        t = time.time()
        self.end_probes()
        timing["limits_end"] = round(time.time() - t, 1)
        self.finalize()
        self.fuzz()
        try:
            self.R["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        except OSError:
            pass
        self.R["section_seconds"] = timing
        self.R["duration_s"] = round(time.time() - self.t0, 1)
        self.save(prev)
        print_table(self.R, prev)
        self.say("wrote %s (%.0f s); raw logs in %s" % (self.a.out, self.R["duration_s"], self.logdir))

    def finalize(self):
        """After the end probes: the limits become the best trustworthy probes of the whole run (ratios
        rescaled where that moved them), start/end drift is measured, and rows are marked disturbed."""
        L = self.R["limits"]
        old_m = dict(L["mem_bw_gbs"])
        old_d = L.get("disk_best_gbs")
        new_m = self.set_mem_limit()
        self.set_disk_limit()
        new_d = L.get("disk_best_gbs")
        f = {"mem_bw_1": old_m["1"] / new_m["1"], "mem_bw_all": old_m["all"] / new_m["all"],
             "disk_best": old_d / new_d if old_d and new_d else 1.0}
        for w in self.R["workloads"]:
            k = w.get("limit_kind")
            if k in f and f[k] != 1.0:
                w["limit"] = new_m["1"] if k == "mem_bw_1" else new_m["all"] if k == "mem_bw_all" else new_d
                for rk in ("ratio", "ratio_min", "ratio_max", "mem_ratio"):
                    if isinstance(w.get(rk), (int, float)):
                        w[rk] *= f[k]
                if isinstance(w.get("ceiling_tok_s"), (int, float)):
                    w["ceiling_tok_s"] /= f[k]
            if k == "omp_pair" and isinstance(w.get("mem_ratio"), (int, float)):
                w["mem_ratio"] *= f["mem_bw_all"]
            if k in ("mem_probe_1", "mem_probe_all"):
                w["value"] = new_m[k[-1] if k.endswith("1") else "all"]
                w["what"] = "memory read bandwidth, %s: %s" % ("1 thread" if k.endswith("1") else "all threads",
                                                               new_m["source"]["1" if k.endswith("1") else "all"])
            for r in w.get("runs") or []:
                if isinstance(r.get("mem_ratio"), (int, float)):
                    r["mem_ratio"] *= f["mem_bw_all"]
                if isinstance(r.get("disk_ratio"), (int, float)):
                    r["disk_ratio"] *= f["disk_best"]
        for row in self.R.get("io_paths") or []:
            if isinstance(row.get("disk_ratio"), (int, float)):
                row["disk_ratio"] *= f["disk_best"]
        L["limits_rescaled"] = {k: round(1 / v, 4) for k, v in f.items() if v != 1.0}
        # start/end drift, per probe and thread count, over undisturbed probes; the rows judged against a
        # memory limit are disturbed by the drift of the probe that gives that limit (the other probe's is
        # recorded: bench_mem's all-threads figure is erratic where its waiting main thread shares a CPU)
        drift, dist = {}, {"mem_bw_1": [], "mem_bw_all": [], "disk": []}
        rows = []
        for probe in ("bench_mem", "bench_quant"):
            for k in ("1", "all"):
                got = {}
                for when in ("start", "end"):
                    ps = [p for p in L.get("mem_probes") or [] if p["probe"] == probe and p["when"] == when]
                    good = [p for p in ps if p["trusted"]]
                    got[when] = max((p["gbs"][k] for p in good), default=None)
                    if ps and k == "all":
                        rows.append({"id": "limit.probe.%s.%s" % (probe, when), "engine": None, "model": None, "unit": "GB/s", "n": len(ps),
                                     "what": "memory read bandwidth, all threads, %s at the %s (best of %d%s)" % (
                                         probe, when, len(ps), "" if len(good) == len(ps) else ", %d disturbed" % (len(ps) - len(good))),
                                     "value": max(p["gbs"]["all"] for p in ps),
                                     "runs": [dict({x: p.get(x) for x in ("others_cpu_s", "others_cpu_frac", "log")}, label="%s-%s" % (probe, when))
                                              for p in ps]})
                    if ps and not good and new_m["source"][k].startswith(probe):
                        dist["mem_bw_" + k].append("no undisturbed %s probe at the %s" % (probe, when))
                if got.get("start") and got.get("end"):
                    d = drift["mem.%s.%s" % (probe, k)] = got["end"] / got["start"] - 1
                    if k == "all":
                        rows[-1].update(limit=got["start"], ratio=got["end"] / got["start"], limit_name="the same probe at the start", limit_kind="drift")
                    if abs(d) > PROBE_DRIFT and new_m["source"][k].startswith(probe):
                        dist["mem_bw_" + k].append("%s probe (%s) %.1f GB/s at the start, %.1f at the end (%+.0f%%)" % (
                            probe, "1 thread" if k == "1" else "all threads", got["start"], got["end"], 100 * d))
        dps = [p for p in L.get("disk_probes") or []]
        got = {}
        for when in ("start", "end"):
            ps = [p for p in dps if p["when"] == when]
            good = [p for p in ps if p["trusted"]]
            got[when] = max((p["gbs"] for p in good), default=None)
            if ps:
                rows.append({"id": "limit.probe.disk.%s" % when, "engine": None, "model": None, "unit": "GB/s", "n": 1,
                             "what": "O_DIRECT %.1f MB reads at qd %d, at the %s" % (ps[0]["size"] / 1e6, ps[0]["qd"], when), "value": ps[0]["gbs"],
                             "runs": [dict({k: p.get(k) for k in ("others_cpu_s", "others_cpu_frac", "log")}, label="bench_io-" + when) for p in ps]})
            if ps and not good:
                dist["disk"].append("O_DIRECT probe at the %s disturbed" % when)
        if got.get("start") and got.get("end"):
            drift["disk"] = got["end"] / got["start"] - 1
            rows[-1].update(limit=got["start"], ratio=got["end"] / got["start"], limit_name="the same probe at the start", limit_kind="drift")
            if abs(drift["disk"]) > PROBE_DRIFT:
                dist["disk"].append("O_DIRECT probe %.2f GB/s at the start, %.2f at the end (%+.0f%%)" % (got["start"], got["end"], 100 * drift["disk"]))
        elif dps and not got.get("end"):
            dist["disk"].append("no undisturbed O_DIRECT probe at the end")
        L["probe_drift"] = drift
        L["probe_drift_max"] = PROBE_DRIFT
        L["disturbed"] = {k: v or None for k, v in dist.items()}
        L["mem_limit_probe"] = {k: new_m["source"][k].split()[0] for k in ("1", "all")}
        # the probe rows right after limit.mem_bw.all
        at = next((i + 1 for i, w in enumerate(self.R["workloads"]) if w["id"] == "limit.mem_bw.all"), len(self.R["workloads"]))
        self.R["workloads"][at:at] = rows
        # rows: disturbed by a busy run, or by the drift of their limit
        kinds = {"mem_bw_1": "mem_bw_1", "mem_bw_all": "mem_bw_all", "mem_probe_1": "mem_bw_1", "mem_probe_all": "mem_bw_all", "omp_pair": None,
                 "disk_best": "disk", "disk_qd1": "disk"}
        peer_rows = {r["id"]: r for r in (self.R.get("llamacpp") or {}).get("rows") or []} if isinstance(self.R.get("llamacpp"), dict) else {}
        for w in self.R["workloads"]:
            why = []
            for r in (w.get("runs") or []) + (w.get("colibri_runs") or []):
                if (r.get("others_cpu_frac") or 0) > BUSY_FRAC:
                    why.append("%s: other processes took %.0f%% of the CPUs" % (r.get("label"), 100 * r["others_cpu_frac"]))
            lk = kinds.get(w.get("limit_kind"))
            if lk and dist[lk]:
                why += ["limit: " + x for x in dist[lk]]
            w["disturbed"] = bool(why)
            if why:
                w["disturbed_why"] = why
            pr = peer_rows.get(w["id"][len("llamacpp."):]) if w["id"].startswith("llamacpp.") else None
            if pr is not None:
                pr["disturbed"] = w["disturbed"]
                if why:
                    pr["disturbed_why"] = why

    def fuzz(self):
        """bench/fuzz.json (make fuzz-long), copied as is under "fuzz"."""
        if not os.path.exists(FUZZ_JSON):
            return
        try:
            with open(FUZZ_JSON) as f:
                self.R["fuzz"] = json.load(f)
            self.R["fuzz_file"] = {"path": FUZZ_JSON, "modified": datetime.datetime.fromtimestamp(os.path.getmtime(FUZZ_JSON)).astimezone().isoformat(
                timespec="seconds")}
        except (OSError, ValueError) as e:
            self.skip("fuzz summary", "%s: %s" % (FUZZ_JSON, e))

    def save(self, prev):
        if prev:
            self.R["previous"] = {"started": prev.get("started"), "commit": (prev.get("build") or {}).get("commit"),
                                  "figures": {w["id"]: w.get("value") for w in prev.get("workloads", [])}}
        tmp = self.a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.R, f, indent=1, sort_keys=False)
            f.write("\n")
        os.replace(tmp, self.a.out)


# ---------------------------------------------------------------- parsing

def sse_events(r):
    """The JSON events of a streamed HTTP response (its "data: " lines,
    [DONE] left out); a status other than 200 raises."""
    if r.status != 200:
        raise RuntimeError("serve: HTTP %d: %s" % (r.status, r.read()[:200]))
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def parse_colibri(err):
    r = {}
    m = END_RE.search(err)
    if m:
        g = [float(x) for x in m.groups()]
        r.update(prompt_tokens=int(g[0]), prefill_tps=g[1], gen_tokens=int(g[2]), decode_tps=g[3], ttft=g[4], hit=g[5], hit_pin=g[6],
                 hit_lru=g[7], miss=g[8], mb_per_tok=g[9])
    m = DISKWAIT_RE.search(err)
    if m:
        r["disk_wait_pct"] = int(m.group(1))
    m = PROF_RE.search(err)
    if m:
        stages = {s.strip(): float(v) for s, v, _ in STAGE_RE.findall(m.group(1))}
        r["prof"] = stages
        wall, busy, hidden = float(m.group(3)), float(m.group(4)), float(m.group(5))
        r["prof_wall_s"] = wall
        r["io_busy_s"], r["io_hidden_s"] = busy, hidden
        r["io_wait_s"] = stages.get("expert I/O wait")
        r["io_wait_frac"] = r["io_wait_s"] / wall if wall and r["io_wait_s"] is not None else None
        # share of expert read time that overlapped compute, as the engine reports it
        r["io_hidden_frac"] = hidden / busy if busy > 0 else None
    m = RECALL_RE.search(err)
    if m:
        r["recall"] = float(m.group(1))
        r["read_ahead"], r["wasted_mb"] = int(m.group(5)), float(m.group(6))
    r["replayed"] = "routing replayed, not the model's" in err
    m = PLAN_RE.search(err)
    if m:
        r["budget"] = fmt_bytes_gb(m.group(1))
        r["pinned"] = int(m.group(6))
        r["lru_slots"] = int(m.group(8))
    m = re.search(r"pinned (\d+) experts from the usage history: ([\d.]+ [KMG]B) read in ([\d.]+) s", err)
    if m:
        r["pin_load_s"] = float(m.group(3))
    m = READS_RE.search(err)
    if m:
        r["reads"] = m.group(1).strip()
    m = STOP_RE.search(err)
    if m:
        r["stopped"] = m.group(1).strip()
    return r


def prefill_macs(f, P):
    """Multiply-adds per prompt token of a P-token prefill: the decode count with lm_head once per prompt."""
    lm = sum(g["macs"] for g in f["mac_groups"] if g["group"] == "lm_head")
    return f["active_macs_per_token"] - lm + lm / P


def env_str(env):
    return " ".join(("%s=%s" % (k, v)) if v is not None else ("%s unset" % k) for k, v in sorted(env.items()))


def fnum(x, f="%.2f"):
    return f % x if isinstance(x, (int, float)) else "-"


def fmt_key(fmt, gs):
    return fmt + ("-g%d" % gs if gs else "")


def kernel_peaks(q):
    """Per format: the best GFLOP/s at the largest S bench_quant measured, all threads, IDOT on (f32: the float path)."""
    ks = [k for k in q.get("kernels", []) if k["threads"] == q["threads"] and (k["idot"] == 1 or k["fmt"] == "f32")]
    out = {}
    for fk in sorted({fmt_key(k["fmt"], k["gs"]) for k in ks}):
        mine = [k for k in ks if fmt_key(k["fmt"], k["gs"]) == fk]
        smax = max(k["S"] for k in mine)
        b = max((k for k in mine if k["S"] == smax), key=lambda k: k["gflops"])
        out[fk] = {"gflops": b["gflops"], "S": smax, "O": b["O"], "I": b["I"], "idot": b["idot"], "threads": b["threads"],
                   "by_shape": {"%dx%d" % (k["O"], k["I"]): k["gflops"] for k in mine if k["S"] == smax}}
    return out


def cpu_busy_s():
    """Seconds of non-idle CPU time of the whole machine so far (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return (sum(v[:8]) - idle) / hz
    except (OSError, ValueError, IndexError):
        return None


def read_st_header(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def model_facts(d):
    """Bytes and multiply-adds per token of a container, from config.json and the safetensors headers."""
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    exp_re = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight(\.qs)?$")
    per_expert, per_expert_w, dense, emb, total = {}, {}, 0, 0, 0
    tensors = {}  # name -> (dtype, bytes)
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        for name, v in read_st_header(os.path.join(d, fn)).items():
            if name == "__metadata__":
                continue
            nb = v["data_offsets"][1] - v["data_offsets"][0]
            tensors[name] = (v.get("dtype"), nb)
            total += nb
            m = exp_re.match(name)
            if m:
                k = (int(m.group(1)), int(m.group(2)))
                per_expert[k] = per_expert.get(k, 0) + nb
                if not m.group(4):
                    per_expert_w[k] = per_expert_w.get(k, 0) + nb
            elif name == "model.embed_tokens.weight":
                emb = nb
            else:
                dense += nb
    D, V, L, K = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"], c["num_experts_per_tok"]
    nd, E = c.get("first_k_dense_replace", 0), c["n_routed_experts"]
    H, qr, kvr = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, vh = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    fi, mi, ns = c["intermediate_size"], c["moe_intermediate_size"], c.get("n_shared_experts", 1)
    ih, idim = c.get("index_n_heads", 0), c.get("index_head_dim", 0)
    qproj = H * (nope + rope) * (qr or D) + (qr or 0) * D  # q_lora_rank null: one q_proj [H·qk, D]
    attn = qproj + (kvr + rope) * D + H * (nope + vh) * kvr + D * H * vh + ih * idim * (qr or 0) + idim * D + ih * D
    moe_layers = L - nd
    macs = L * attn + nd * 3 * fi * D + moe_layers * (E * D + 3 * mi * ns * D + K * 3 * mi * D) + V * D
    eb = max(per_expert.values()) if per_expert else 0
    # multiply-adds per token by matrix group, each with its storage format (bench_quant's names)
    lay = lambda l, t: "model.layers.%d.%s" % (l, t)  # noqa: E731
    ex = next((k for k in sorted(per_expert)), None)
    groups = [("attention", L * (attn - ih * D), [(lay(0, "self_attn.q_a_proj.weight" if qr else "self_attn.q_proj.weight"), qr or H * (nope + rope), D)]),
              ("indexer_weights_proj", L * ih * D, [(lay(0, "self_attn.indexer.weights_proj.weight"), ih, D)]),
              ("dense_mlp", nd * 3 * fi * D, [(lay(0, "mlp.gate_proj.weight"), fi, D)]),
              ("router", moe_layers * E * D, [(lay(nd, "mlp.gate.weight"), E, D)]),
              ("shared_experts", moe_layers * 3 * mi * ns * D, [(lay(nd, "mlp.shared_experts.gate_proj.weight"), mi, D)]),
              ("experts", moe_layers * K * 3 * mi * D,
               [(lay(ex[0], "mlp.experts.%d.%s_proj.weight" % (ex[1], p)), o, i) for p, o, i in (("gate", mi, D), ("up", mi, D), ("down", D, mi))] if ex else []),
              ("lm_head", V * D, [("lm_head.weight", V, D)])]
    mac_groups = [{"group": g, "macs": m, "format": tensor_format(tensors, reps)} for g, m, reps in groups if m]
    assert sum(g["macs"] for g in mac_groups) == macs
    return {"config": {k: c[k] for k in ("hidden_size", "vocab_size", "num_hidden_layers", "first_k_dense_replace", "n_routed_experts",
                                          "num_experts_per_tok", "moe_intermediate_size", "num_attention_heads") if k in c},
            "size_bytes": total, "expert_bytes_total": sum(per_expert.values()), "dense_bytes": dense + emb,
            "expert_bytes": eb, "expert_weight_bytes": max(per_expert_w.values()) if per_expert_w else 0,
            "moe_layers": moe_layers, "experts_per_layer": E, "topk": K,
            "dense_bytes_per_token": dense + D * (emb // (V * D) if V * D else 4),
            "expert_bytes_per_token": K * moe_layers * eb,
            "active_macs_per_token": macs, "mac_groups": mac_groups}


def tensor_format(tensors, reps):
    """bench_quant's name for the format of matrices [(name, O, I)] stored as colibri-synth / colibri-convert
    write them: F32 -> f32; U8/I8 weights with an F32 .qs -> int8 (O*I bytes), int4 (O*ceil(I/2)) with one
    scale per row, or int4-grouped-g<G> with O*ceil(I/G) scales. None when unknown."""
    if not reps or reps[0][0] not in tensors:
        return None
    dt = tensors[reps[0][0]][0]
    if dt in ("F32", "BF16", "F16"):
        return {"F32": "f32"}.get(dt, dt.lower())
    wb = sum(tensors.get(n, (None, 0))[1] for n, _, _ in reps)
    sb = sum(tensors.get(n + ".qs", (None, 0))[1] for n, _, _ in reps)
    if wb == sum(o * i for _, o, i in reps):
        return "int8" if sb == 4 * sum(o for _, o, _ in reps) else None
    if wb == sum(o * ((i + 1) // 2) for _, o, i in reps):
        if sb == 4 * sum(o for _, o, _ in reps):
            return "int4"
        for gs in range(16, 257, 16):
            if sb == 4 * sum(o * ((i + gs - 1) // gs) for _, o, i in reps):
                return "int4-grouped-g%d" % gs
    return None


def make_bf16_source(dst, like, experts=8):
    """A bf16 Hugging Face-style glm_moe_dsa checkpoint (the shapes of `like`, `experts` routed experts per layer) for the converter."""
    import random
    with open(os.path.join(like, "config.json")) as f:
        c = json.load(f)
    c["n_routed_experts"] = experts
    c["num_experts_per_tok"] = min(c["num_experts_per_tok"], experts)
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for fn in ("tokenizer.json", "generation_config.json"):
        shutil.copy(os.path.join(like, fn), os.path.join(tmp, fn))
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    D, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    H, qr, kvr = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, vh = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    fi, mi, nd, ih, idim = c["intermediate_size"], c["moe_intermediate_size"], c.get("first_k_dense_replace", 0), c["index_n_heads"], c["index_head_dim"]
    rnd = random.Random(1)
    # a 1 MiB block of finite bf16 values ~ U(-0.03, 0.03), rotated per tensor
    block = bytearray()
    for _ in range(1 << 19):
        v = struct.pack("<f", rnd.uniform(-0.03, 0.03))
        block += v[2:4]
    block = bytes(block)

    def tensors_of(l):
        p = "model.layers.%d." % l
        t = [(p + "input_layernorm.weight", [D]), (p + "post_attention_layernorm.weight", [D]),
             (p + "self_attn.q_a_proj.weight", [qr, D]), (p + "self_attn.q_a_layernorm.weight", [qr]),
             (p + "self_attn.q_b_proj.weight", [H * (nope + rope), qr]), (p + "self_attn.kv_a_proj_with_mqa.weight", [kvr + rope, D]),
             (p + "self_attn.kv_a_layernorm.weight", [kvr]), (p + "self_attn.kv_b_proj.weight", [H * (nope + vh), kvr]),
             (p + "self_attn.o_proj.weight", [D, H * vh]), (p + "self_attn.indexer.wq_b.weight", [ih * idim, qr]),
             (p + "self_attn.indexer.wk.weight", [idim, D]), (p + "self_attn.indexer.k_norm.weight", [idim]),
             (p + "self_attn.indexer.k_norm.bias", [idim]), (p + "self_attn.indexer.weights_proj.weight", [ih, D])]
        if l < nd:
            t += [(p + "mlp.gate_proj.weight", [fi, D]), (p + "mlp.up_proj.weight", [fi, D]), (p + "mlp.down_proj.weight", [D, fi])]
        else:
            t += [(p + "mlp.gate.weight", [experts, D]), (p + "mlp.gate.e_score_correction_bias", [experts]),
                  (p + "mlp.shared_experts.gate_proj.weight", [mi, D]), (p + "mlp.shared_experts.up_proj.weight", [mi, D]),
                  (p + "mlp.shared_experts.down_proj.weight", [D, mi])]
            for e in range(experts):
                t += [(p + "mlp.experts.%d.gate_proj.weight" % e, [mi, D]), (p + "mlp.experts.%d.up_proj.weight" % e, [mi, D]),
                      (p + "mlp.experts.%d.down_proj.weight" % e, [D, mi])]
        return t

    files = [[("model.embed_tokens.weight", [V, D]), ("model.norm.weight", [D]), ("lm_head.weight", [V, D])]] + [tensors_of(l) for l in range(L)]
    for i, ts in enumerate(files):
        hdr, off = {}, 0
        for name, shape in ts:
            n = 2
            for s in shape:
                n *= s
            hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            off += n
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(tmp, "model-%05d-of-%05d.safetensors" % (i + 1, len(files))), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for k, (name, shape) in enumerate(ts):
                n = hdr[name]["data_offsets"][1] - hdr[name]["data_offsets"][0]
                if name.endswith("norm.weight"):
                    f.write(struct.pack("<H", 0x3F80) * (n // 2))  # 1.0
                    continue
                rot = (k * 4099 * 2) % len(block)
                src = block[rot:] + block[:rot]
                while n > 0:
                    w = min(n, len(src))
                    f.write(src[:w])
                    n -= w
    with open(os.path.join(tmp, ".bench-complete"), "w") as f:
        f.write("bf16 source\n")
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)


# ---------------------------------------------------------------- table

def print_table(R, prev):
    pf = (prev or {}).get("workloads") or []
    pv = {w["id"]: w.get("value") for w in pf}
    print()
    print("colibri bench %s  (%s, %s cores, load %s -> %s)%s" % (R["started"], R["machine"].get("cpu"), R["machine"].get("cores"),
                                                              " ".join(R["machine"].get("loadavg_start", [])), " ".join(R["machine"].get("loadavg_end", [])),
                                                              "  previous: " + prev.get("started", "?") if prev else ""))
    print("random-weight synthetic models: tokens are noise, speed only; engine runs: %s" % (
        "the user's environment" + (" (%s)" % env_str(R.get("omp_env_user") or {}) if R.get("omp_env_user") else "") +
        (" + " + env_str(R["omp_env"]) if R.get("omp_env") else "")))
    print("ratio marked ! = disturbed (others took > %d%% of the CPUs during a run, or the limit's start/end probes differ by > %d%%): see below" % (
        100 * BUSY_FRAC, 100 * PROBE_DRIFT))
    hdr = "%-48s %-9s %11s %-7s %9s %8s  %-44s" % ("workload", "engine", "value", "unit", "limit", "ratio", "limit is")
    if prev:
        hdr += " %11s %7s" % ("previous", "change")
    print(hdr)
    print("-" * len(hdr))
    for w in R["workloads"]:
        v = w.get("value")
        lim = w.get("limit")
        ratio = w.get("ratio")
        rs = ("%.1f%%" % (100 * ratio) if isinstance(ratio, (int, float)) else "-") + ("!" if w.get("disturbed") else " ")
        line = "%-48s %-9s %11s %-7s %9s %8s  %-44s" % (
            w["id"][:48], (w.get("engine") or "-")[:9], "%.3f" % v if isinstance(v, (int, float)) else "-", w.get("unit", ""),
            "%.2f" % lim if isinstance(lim, (int, float)) else "-", rs, (w.get("limit_name") or "")[:44])
        if prev:
            p = pv.get(w["id"])
            line += " %11s %7s" % ("%.3f" % p if isinstance(p, (int, float)) else "-",
                                   "%+.1f%%" % (100 * (v / p - 1)) if isinstance(p, (int, float)) and p and isinstance(v, (int, float)) else "")
        print(line)
    L = R.get("limits") or {}
    if L.get("mem_bw_gbs"):
        m = L["mem_bw_gbs"]
        print("\nlimits: memory %.1f GB/s all threads (%s), %.1f GB/s 1 thread (%s); disk %s GB/s, %s (%s probe)" % (
            m["all"], m["source"]["all"], m["1"], m["source"]["1"], fnum(L.get("disk_best_gbs")), L.get("disk_limit_name", "-"),
            L.get("disk_best_source", "-")))
        if L.get("probe_drift"):
            print("  start -> end: " + ", ".join("%s %+.1f%%" % (k, 100 * v) for k, v in sorted(L["probe_drift"].items())))
        if L.get("limits_rescaled"):
            print("  the end probes raised limits (ratios rescaled): " + ", ".join("%s x%.3f" % kv for kv in sorted(L["limits_rescaled"].items())))
        pp = ["%s/P%s %.1f" % (m, p, v) for m, d in sorted((L.get("prefill_peak_gflops") or {}).items()) for p, v in sorted(d.items(), key=lambda x: int(x[0]))
              if v]
        if L.get("kernel_peaks"):
            print("  kernel peaks (GFLOP/s, largest S, all threads): " + ", ".join("%s %.1f" % (k, v["gflops"]) for k, v in sorted(L["kernel_peaks"].items())) +
                  ("; prefill limit on each model's mix: " + ", ".join(pp) if pp else ""))
    ip = L.get("instr_peak")
    if ip and ip.get("int"):
        print("  instruction peak (bench_peak, %d threads): %s %.1f GMAC/s (%.1f a core)%s; kernel peaks at %s of it" % (
            ip["threads"], ip["int"]["instruction"], ip["int"]["gmacs_all"], ip["int"]["gmacs_per_core"],
            ", f32 %s %.1f GMAC/s" % (ip["float"]["instruction"], ip["float"]["gmacs_all"]) if ip.get("float") else "",
            ", ".join("%s %.0f%%" % (k, 100 * v["instr_ratio"]) for k, v in sorted((L.get("kernel_peaks") or {}).items()) if v.get("instr_ratio")) or "-"))
    if R.get("io_paths"):
        print("\nI/O paths (streaming decode, medians of interleaved runs):")
        print("%-22s %9s %7s %9s %8s %9s %9s %8s" % ("config", "tok/s", "hit %", "MB/tok", "disk GB/s", "I/O wait", "hidden", "recall"))
        for r in R["io_paths"]:
            f = lambda x, s="%.2f": s % x if isinstance(x, (int, float)) else "-"  # noqa: E731
            print("%-22s %9s %7s %9s %8s %9s %9s %8s" % (r["config"], f(r["decode_tps"], "%.3f"), f(r["hit"], "%.1f"), f(r["mb_per_tok"], "%.1f"),
                                                         f(r["disk_gbs"]), f(100 * r["io_wait_frac"] if r["io_wait_frac"] is not None else None, "%.0f%%"),
                                                         f(100 * r["io_hidden_frac"] if r["io_hidden_frac"] is not None else None, "%.0f%%"),
                                                         f(r["recall"], "%.1f%%")))
    if R.get("replay"):
        X = R["replay"]
        print("\nlearned routing replayed (trained-glm5's trace, %d rows) on the %s model, RAM_GB=%s (medians of interleaved runs):" % (
            X["trace"]["rows"], X["model"], X["ram_gb"]))
        print("%-34s %9s %7s %9s %8s %11s %9s" % ("config", "tok/s", "hit %", "MB/tok", "recall", "read ahead", "unused"))
        for r in X["configs"]:
            f = lambda x, s="%.2f": s % x if isinstance(x, (int, float)) else "-"  # noqa: E731
            print("%-34s %9s %7s %9s %8s %11s %9s" % (r["config"], f(r["decode_tps"], "%.3f"), f(r["hit"], "%.1f"), f(r["mb_per_tok"], "%.1f"),
                                                      f(r["recall"], "%.1f%%"), f(r["read_ahead"], "%d"),
                                                      f(100 * r["wasted_frac"] if r.get("wasted_frac") is not None else None, "%.0f%%")))
        for i, h in enumerate(X["history"]):
            print("  history run %d: hit %s%% (pin %s%% + LRU %s%%), %s pinned, decode %s tok/s" % (i + 1, h["hit"], h["hit_pin"], h["hit_lru"], h["pinned"],
                                                                                                 h["decode_tps"]))
    if R.get("history"):
        print("\nusage history (PIN=auto, USAGE_SAVE=1, rotating prompts):")
        for h in R["history"]:
            print("  run %d: hit %s%% (pin %s%% + LRU %s%%), %s experts pinned, decode %s tok/s" % (h["run"], h["hit"], h["hit_pin"], h["hit_lru"],
                                                                                               h["pinned"], h["decode_tps"]))
    if isinstance(R.get("llamacpp"), dict) and R["llamacpp"].get("rows"):
        P = R["llamacpp"]
        print("\nllama.cpp side by side (%s; runs interleaved colibri, llama-bench -r 1, ...; median [min-max]; ratio = median of per-pair colibri/llama.cpp)" %
              P.get("version"))
        if P.get("streaming_method"):
            print("  streaming: " + P["streaming_method"])
        print("%-28s %-7s %22s %22s %20s %5s" % ("workload", "model", "colibri tok/s", "llama.cpp tok/s", "ratio", "pairs"))
        for r in P["rows"]:
            def mm(v, a, b, f="%.3f"):
                return "-" if not isinstance(v, (int, float)) else (f % v) + " [" + (f % a) + "-" + (f % b) + "]"
            print("%-28s %-7s %22s %22s %20s %5s" % (r["id"][:28], r["model"], mm(r.get("colibri_tok_s"), r.get("colibri_min"), r.get("colibri_max"), "%.2f"),
                                                     mm(r.get("llamacpp_tok_s"), r.get("llamacpp_min"), r.get("llamacpp_max"), "%.2f"),
                                                     mm(r.get("ratio_colibri_over_llamacpp"), r.get("ratio_min"), r.get("ratio_max"), "%.2f") +
                                                     ("!" if r.get("disturbed") else " "), r.get("pairs", "")))
            if r.get("llamacpp_default_over_spin") is not None:
                print("%-28s llama.cpp default/spin %.3f [%.3f-%.3f]" % ("", r["llamacpp_default_over_spin"], r["llamacpp_default_over_spin_min"],
                                                                        r["llamacpp_default_over_spin_max"]))
    if R.get("quality"):
        Q = R["quality"]
        b = Q["base"]
        print("\nquality on %s over %s (f32 perplexity %.4f +/- %.4f over %d tokens; KLD against the f32 run):" % (Q["model"], Q["text"], b["perplexity"],
                                                                                                         b["stderr"], b["tokens"]))
        print("  %-44s %11s %10s %10s %8s" % ("knobs", "perplexity", "KLD mean", "KLD p99", "top-1"))
        for r in Q["formats"]:
            print("  %-44s %11.4f %10.6f %10.6f %7.2f%%" % (env_str(r["knobs"]), r["perplexity"], r["kld_mean"], r["kld_p99"], r["top1_pct"]))
        for r in Q.get("converted", []):
            print("  %-44s %11.4f %10.6f %10.6f %7.2f%%" % ("convert " + " ".join(r["convert"]), r["perplexity"], r["kld_mean"], r["kld_p99"], r["top1_pct"]))
        for r in Q["spec"]:
            print("  DRAFT=%-3d TEMP=%-3s %4d of %4d drafts accepted, tokens per forward %s, decode %s tok/s%s" % (
                r["draft"], r.get("temp", 0), r["accepted"], r["drafted"], " ".join("%.2f" % x for x in r["tokens_per_forward"]) or "-", r["decode_tok_s"],
                " ! (other processes took more than %d%% of the CPUs)" % (100 * BUSY_FRAC) if r.get("disturbed") else ""))
        for r in Q.get("auto", []):
            print("  DRAFT=-1 / DRAFT=0 TEMP=%-3s decode %.3f (%.3f-%.3f), prefill + decode %.3f (%.3f-%.3f) over %d interleaved pairs, tokens %s%s" % (
                r["temp"], r["decode_ratio_median"], r["decode_ratio_range"][0], r["decode_ratio_range"][1], r["total_ratio_median"],
                r["total_ratio_range"][0], r["total_ratio_range"][1], r["pairs"], "the same" if r["same_tokens"] else "DIFFERENT",
                " ! (other processes took more than %d%% of the CPUs)" % (100 * BUSY_FRAC) if r.get("disturbed") else ""))
    if R.get("fuzz"):
        print("\nfuzz (bench/fuzz.json, %s):" % (R.get("fuzz_file") or {}).get("modified", "?"))
        for t in R["fuzz"] if isinstance(R["fuzz"], list) else []:
            print("  %-20s %12s execs %10s execs/s  cov %-8s crashes %s" % (t.get("target"), t.get("execs"), t.get("execs_per_s"),
                                                                            t.get("cov") if t.get("cov") is not None else "-", t.get("crashes")))
    by_why = {}  # reason -> rows, in table order
    for w in R["workloads"]:
        for why in w.get("disturbed_why") or [] if w.get("disturbed") else []:
            by_why.setdefault(why, []).append(w["id"])
    if by_why:
        print("\n! disturbed rows (ratios printed, not to be trusted):")
        for why, ids in by_why.items():
            kern = [i for i in ids if i.startswith("kernel.")]
            rest = [i for i in ids if not i.startswith("kernel.")]
            names = (["%d kernel rows" % len(kern)] if len(kern) > 2 else kern) + rest
            print("  %s: %s" % (why, ", ".join(names)))
    busy, seen = [], set()
    peer = R.get("llamacpp") if isinstance(R.get("llamacpp"), dict) else {}
    for w in R["workloads"] + [{"runs": peer.get("runs") or []}]:
        for r in w.get("runs") or []:
            if (r.get("others_cpu_frac") or 0) > BUSY_FRAC and r.get("label") not in seen:
                seen.add(r.get("label"))
                busy.append("%s %.0f%%" % (r.get("label"), 100 * r["others_cpu_frac"]))
    if busy:
        print("\nother processes took more than %d%% of the CPUs during: %s (figures of those runs are depressed)" % (100 * BUSY_FRAC, ", ".join(busy)))
    if R.get("skipped"):
        print("\nskipped: " + "; ".join("%s (%s)" % (s["what"], s["why"]) for s in R["skipped"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="small models and few tokens (checks the harness; figures not comparable)")
    ap.add_argument("--only", type=lambda s: s.split(","), help="comma-separated sections")
    ap.add_argument("--skip", type=lambda s: s.split(","), help="comma-separated sections to leave out")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measured configuration (medians reported)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results.json"))
    ap.add_argument("--no-peer", action="store_true", help="leave out llama.cpp")
    ap.add_argument("--omp-default", action="store_true",
                    help="remove GOMP_SPINCOUNT and OMP_WAIT_POLICY from every engine run even where set (default: the user's environment)")
    ap.add_argument("--omp-spin", action="store_true", help="add GOMP_SPINCOUNT=300000 to every engine run (the harness's old default)")
    a = ap.parse_args()
    if a.omp_default and a.omp_spin:
        raise SystemExit("bench: --omp-default and --omp-spin exclude each other")
    if a.repeats < 1:
        raise SystemExit("bench: --repeats must be at least 1")
    for b in ("colibri", "colibri-synth", "build/rel/bench_quant", "build/rel/bench_io", "build/rel/bench_mem", "build/rel/bench_tok", "build/rel/bench_grammar", "build/rel/bench_kv"):
        if not os.access(os.path.join(ROOT, b), os.X_OK):
            raise SystemExit("bench: %s is not built (run `make bench`)" % b)
    Bench(a).main()


if __name__ == "__main__":
    main()
