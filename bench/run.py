#!/usr/bin/env python3
"""colibri benchmark harness (`make bench`): machine limits, engine workloads, peer comparison.

  python3 bench/run.py [--quick] [--only SECTION,...] [--skip SECTION,...] [--repeats N]
                       [--out bench/results.json] [--no-peer]

Sections, in order: limits (memory and O_DIRECT disk bandwidth), kernels
(bench_quant), resident, streaming, history, iopaths, tokenizer, convert,
llamacpp. Every figure is paired with the limit it is judged against, measured
in the same run; see bench/README.md for what each workload measures and the
schema of results.json. Standard library only; the llama.cpp peer (and the
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
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from ab import END_RE  # noqa: E402  (the end-of-run line, parsed as tools/ab.py does)

PROF_RE = re.compile(r"^prof: (.*) \| total ([\d.]+) s = wall ([\d.]+) s \| expert reads (?:busy|in flight) ([\d.]+) s, ([\d.]+) s of it hidden behind compute", re.M)
STAGE_RE = re.compile(r"([a-zA-Z/ ]+?) ([\d.]+) s \((\d+)%\)")
RECALL_RE = re.compile(r"prefetch: recall ([\d.]+)% \((\d+) of (\d+) routed experts were predicted; (\d+) predictions\)")
PLAN_RE = re.compile(r"plan: budget ([\d.]+ [KMG]B) \| resident: dense ([\d.]+ [KMG]B), KV ([\d.]+ [KMG]B), working set ([\d.]+ [KMG]B) \| "
                     r"experts ([\d.]+ [KMG]B) each: (\d+) pinned \(([\d.]+ [KMG]B)\), LRU (\d+) slots/layer")
READS_RE = re.compile(r"expert reads: (.*)")
STOP_RE = re.compile(r"stopped: (.*)")
DISKWAIT_RE = re.compile(r"disk wait (\d+)% of wall")

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
        # OpenMP workers that sleep between parallel regions can take a scheduler
        # tick (~10 ms) to wake on a VM; any explicit GOMP_SPINCOUNT keeps libgomp
        # spinning briefly instead. Applied to every engine run (colibri and
        # llama.cpp alike) unless --omp-default; the resident section also
        # measures the default to show what it costs.
        if a.omp_default:
            self.omp_env = {}
        else:
            self.omp_env = {k: os.environ[k] for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY") if k in os.environ} or {"GOMP_SPINCOUNT": "300000"}
        self.R["omp_env"] = self.omp_env

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
        self.nlog += 0
        p = os.path.join(base, "colibri-bench-%d-%d" % (os.getpid(), int(time.time() * 1000) % 10 ** 9))
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
    def crun(self, label, model, env, prompt_n, ngen, cold=False, cg_limit=None, timeout=3600, offset=0, omp=True):
        e = dict(self.omp_env) if omp else {}
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
                 env={k: v for k, v in e.items() if k != "PROMPT" and v is not None}, **(self.last_others or {}))
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
    def limits(self):
        L = self.R["limits"]
        bq = os.path.join(ROOT, "build", "rel", "bench_quant")
        args = ["--json", "--time", "0.15" if self.a.quick else "0.2", "--mem", "512" if self.a.quick else "1536"]
        if self.section_on("kernels"):
            self.say("kernels: bench_quant (memory bandwidth, matvec per format)%s" % (" with " + self.omp_env_str() if self.omp_env else ""))
            out, err, _, _, _, _ = self.run("bench_quant", [bq] + args, env=self.omp_env, timeout=1800)
        else:
            self.say("memory bandwidth: bench_quant --only f32 (kernels section off)")
            out, err, _, _, _, _ = self.run("bench_quant-bw", [bq] + args + ["--only", "f32"], env=self.omp_env, timeout=1800)
        q = json.loads(out)
        # twice, best of both: one probe can land while other processes hold a CPU
        mb = None
        for i in range(2):
            mo, _, _, _, _, _ = self.run("bench_mem", [os.path.join(ROOT, "build", "rel", "bench_mem"), "--json", "--mib", "1024" if self.a.quick else "4096"],
                                         timeout=600)
            L.setdefault("mem_bw_probes", []).append(dict(json.loads(mo), **(self.last_others or {})))
            got = json.loads(mo)["results"]
            mb = got if mb is None else [a if a["gbs"] >= b["gbs"] else b for a, b in zip(mb, got)]
        L["mem_bw_gbs"] = {"1": mb[0]["gbs"], "all": mb[-1]["gbs"], "threads": mb[-1]["threads"],
                           "how": "bench_mem, run twice: best of 5 passes over a 4 GiB buffer (far above the LLC), 64-byte vector loads, spinning pthreads",
                           "bench_quant_probe": q.get("bandwidth_gbs", q.get("probe_gbs"))}
        self.say("memory read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)" % (mb[0]["gbs"], mb[-1]["gbs"], mb[-1]["threads"]))
        if not self.a.quick:
            # the same probe over a buffer the size of bench_quant's matrix sets: how much a large LLC adds
            mo, _, _, _, _, _ = self.run("bench_mem-1536", [os.path.join(ROOT, "build", "rel", "bench_mem"), "--json", "--mib", "1536"], timeout=600)
            L["mem_bw_gbs_1536mib"] = {str(x["threads"]): x["gbs"] for x in json.loads(mo)["results"]}
        if self.omp_env and self.section_on("kernels"):
            # the same kernel with libgomp's defaults: what the OpenMP wake-up costs here
            self.say("kernels: int4 g64 again with the default OpenMP environment")
            o2, _, _, _, _, _ = self.run("bench_quant-omp-default", [bq, "--json", "--time", "0.1", "--mem", "256", "--only", "int4-grouped"],
                                         env={"GOMP_SPINCOUNT": None, "OMP_WAIT_POLICY": None}, timeout=900)
            q2 = json.loads(o2)
            L["mem_bw_gbs_omp_default"] = q2.get("bandwidth_gbs", q2.get("probe_gbs"))
            for k in q2["kernels"]:
                if k["S"] == 1 and k["idot"] == 1:
                    self.R["workloads"].append({
                        "id": "kernel.%s-g%d.%dx%d.idot1.t%d.omp-default" % (k["fmt"], k["gs"], k["O"], k["I"], k["threads"]),
                        "engine": "colibri", "model": None, "what": "matvec S=1 with libgomp's default waiting (no GOMP_SPINCOUNT)", "unit": "GB/s",
                        "value": k["gbs"], "n": 1, "limit_name": "memory read bandwidth (%s)" % ("1 thread" if k["threads"] == 1 else "all threads"),
                        "limit": L["mem_bw_gbs"]["1" if k["threads"] == 1 else "all"],
                        "ratio": k["gbs"] / L["mem_bw_gbs"]["1" if k["threads"] == 1 else "all"]})
        if self.section_on("kernels"):
            self.R["kernels"] = q
            for k in q["kernels"]:
                if k["S"] == 1:
                    self.R["workloads"].append({
                        "id": "kernel.%s%s.%dx%d.idot%d.t%d" % (k["fmt"], "-g%d" % k["gs"] if k["gs"] else "", k["O"], k["I"], k["idot"], k["threads"]),
                        "engine": "colibri", "model": None, "what": "matvec (decode, S=1) over a set of matrices (bench_quant --mem)", "unit": "GB/s",
                        "value": k["gbs"], "n": 1, "limit_name": "memory read bandwidth (%s thread%s)" % (k["threads"], "s" if k["threads"] > 1 else ""),
                        "limit": L["mem_bw_gbs"]["1" if k["threads"] == 1 else "all"],
                        "ratio": k["gbs"] / L["mem_bw_gbs"]["1" if k["threads"] == 1 else "all"]})
            peak = max((k["gflops"] for k in q["kernels"] if k["threads"] == q["threads"] and k["idot"] == 1), default=None)
            L["kernel_peak_gflops"] = peak
        # O_DIRECT on the disk that holds the models: the streaming model's shards
        large = self.ensure_model("large")
        sizes = [GLM5_EXPERT_INT4]
        syn = self.R["models"]["large"]["expert_weight_bytes"]
        if syn not in sizes:
            sizes.append(syn)
        if not self.a.quick:
            sizes.append(2 * GLM5_EXPERT_INT4)  # a GLM-5 int8 expert
        cmd = [os.path.join(ROOT, "build", "rel", "bench_io"), "--json", "--time", "1" if self.a.quick else "2"]
        for s in sizes:
            cmd += ["--size", str(s)]
        for qd in (1, 4, 8):
            cmd += ["--qd", str(qd)]
        self.say("disk: O_DIRECT reads of %s MB at queue depths 1, 4, 8 on %s" % (", ".join("%.1f" % (s / 1e6) for s in sizes), large))
        out, _, _, _, _, _ = self.run("bench_io", cmd + self.shards(large), timeout=600)
        L["disk_others_cpu"] = self.last_others
        d = json.loads(out)["results"]
        L["disk"] = d
        L["disk_best_gbs"] = max(x["gbs"] for x in d if x["size"] == GLM5_EXPERT_INT4)
        L["disk_qd1_gbs"] = next(x["gbs"] for x in d if x["size"] == GLM5_EXPERT_INT4 and x["qd"] == 1)
        for x in d:
            self.R["workloads"].append({"id": "limit.disk.odirect.%dMB.qd%d" % (round(x["size"] / 1e6), x["qd"]), "engine": None, "model": None,
                                        "what": "O_DIRECT random reads of %.2f MB at queue depth %d" % (x["size"] / 1e6, x["qd"]),
                                        "unit": "GB/s", "value": x["gbs"], "n": 1})
        for k, v in (("1", "1 thread"), ("all", "all threads")):
            self.R["workloads"].append({"id": "limit.mem_bw.%s" % k, "engine": None, "model": None, "what": "memory read bandwidth, " + v,
                                        "unit": "GB/s", "value": L["mem_bw_gbs"][k], "n": 1})

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

    def prefill_limit(self, r, model):
        f = self.R["models"][model]
        if r.get("prefill_tps"):
            r["prefill_gflops"] = 2 * f["active_macs_per_token"] * r["prefill_tps"] / 1e9
            pk = self.R["limits"].get("kernel_peak_gflops")
            r["compute_ratio"] = r["prefill_gflops"] / pk if pk else None
        return r

    def resident(self):
        self.say("resident: medium model, every expert pinned at startup (PIN=<all experts> PIN_GB=all)")
        name = "medium"
        d = self.ensure_model(name)
        pin = self.usage_all(d)
        env = {"PIN": pin, "PIN_GB": "all"}
        n = self.a.repeats
        P, G, PL = (32, 32, 128) if self.a.quick else (128, 128, 1024)
        runs = []
        for i in range(n):
            r = self.crun("resident-decode-%d" % i, d, env, P, G)
            runs.append(self.decode_limit(r, name, "resident"))
            self.say("  run %d: prefill %s tok/s, decode %s tok/s, hit %s%%" % (i + 1, r.get("prefill_tps"), r.get("decode_tps"), r.get("hit")))
        L = self.R["limits"]
        self.workload("resident.decode%d" % G, "colibri", name, "decode tok/s over %d tokens after a %d-token prompt, all experts resident" % (G, P),
                      runs, "decode_tps", "tok/s",
                      {"limit_name": "memory read bandwidth (all threads)", "limit": L["mem_bw_gbs"]["all"],
                       "ratio": median([r.get("mem_ratio") for r in runs]),
                       "weight_bytes_per_token": runs[0].get("weight_bytes_per_token"),
                       "achieved_gbs": median([r.get("achieved_weight_gbs") for r in runs]),
                       "ceiling_tok_s": L["mem_bw_gbs"]["all"] * 1e9 / runs[0]["weight_bytes_per_token"]})
        pre = [self.prefill_limit(dict(r), name) for r in runs]
        self.workload("resident.prefill%d" % P, "colibri", name, "prefill tok/s of a %d-token prompt, all experts resident" % P, pre, "prefill_tps", "tok/s",
                      {"limit_name": "kernel peak GFLOP/s (bench_quant, all threads, S<=32)", "limit": L.get("kernel_peak_gflops"),
                       "ratio": median([r.get("compute_ratio") for r in pre]), "achieved_gflops": median([r.get("prefill_gflops") for r in pre])})
        if self.omp_env:
            r = self.decode_limit(self.crun("resident-decode16-omp-default", d, dict(env, GOMP_SPINCOUNT=None, OMP_WAIT_POLICY=None), 32, 16, omp=False),
                                  name, "resident")
            self.say("  default OpenMP environment (no %s): decode %s tok/s" % (self.omp_env_str(), r.get("decode_tps")))
            self.workload("resident.decode16.omp-default", "colibri", name,
                          "decode tok/s over 16 tokens after 32, all resident, libgomp's default waiting (as users run it)", [r], "decode_tps",
                          "tok/s", {"limit_name": "memory read bandwidth (all threads)", "limit": L["mem_bw_gbs"]["all"], "ratio": r.get("mem_ratio")})
        runs = [self.prefill_limit(self.crun("resident-prefill%d-%d" % (PL, i), d, env, PL, 1), name) for i in range(max(1, n // 2))]
        self.say("  prefill %d: %s tok/s" % (PL, runs[0].get("prefill_tps")))
        self.workload("resident.prefill%d" % PL, "colibri", name, "prefill tok/s of a %d-token prompt, all experts resident" % PL, runs, "prefill_tps", "tok/s",
                      {"limit_name": "kernel peak GFLOP/s (bench_quant, all threads, S<=32)", "limit": L.get("kernel_peak_gflops"),
                       "ratio": median([r.get("compute_ratio") for r in runs]), "achieved_gflops": median([r.get("prefill_gflops") for r in runs])})

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
        self.say("streaming: large model (%.1f GB), RAM_GB=%s, DIRECT=1, page cache dropped before each run%s" % (
            self.R["models"][name]["size_bytes"] / 1e9, ram, ", memory cgroup %.1f GB" % (lim / 1e9) if lim else ""))
        env = {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "0"}
        P, G, PL = (32, 32, 128) if self.a.quick else (128, 128, 1024)
        runs = []
        for i in range(self.a.repeats):
            r = self.crun("stream-decode-%d" % i, d, env, P, G, cold=True, cg_limit=lim)
            runs.append(self.decode_limit(r, name, "stream"))
            self.say("  run %d: prefill %s tok/s, decode %s tok/s, hit %s%%, %s MB/tok from disk" % (
                i + 1, r.get("prefill_tps"), r.get("decode_tps"), r.get("hit"), r.get("mb_per_tok")))
        L = self.R["limits"]
        self.workload("stream.decode%d" % G, "colibri", name, "decode tok/s over %d tokens after a %d-token prompt, cold, experts streamed with O_DIRECT" % (G, P),
                      runs, "decode_tps", "tok/s",
                      {"limit_name": "O_DIRECT disk read bandwidth at expert size (best queue depth)", "limit": L["disk_best_gbs"],
                       "ratio": median([r.get("disk_ratio") for r in runs]), "achieved_gbs": median([r.get("disk_gbs") for r in runs]),
                       "weight_bytes_per_token": runs[0].get("weight_bytes_per_token"),
                       "disk_mb_per_token": median([r.get("mb_per_tok") for r in runs]), "hit": median([r.get("hit") for r in runs]),
                       "ram_gb": ram})
        pre = [self.prefill_limit(dict(r), name) for r in runs]
        self.workload("stream.prefill%d" % P, "colibri", name, "prefill tok/s of a %d-token prompt, cold, streamed" % P, pre, "prefill_tps", "tok/s",
                      {"limit_name": "kernel peak GFLOP/s", "limit": L.get("kernel_peak_gflops"),
                       "ratio": median([r.get("compute_ratio") for r in pre]), "ram_gb": ram})
        runs = []
        for i in range(max(1, self.a.repeats // 2)):
            r = self.crun("stream-prefill%d-%d" % (PL, i), d, env, PL, 1, cold=True, cg_limit=lim)
            runs.append(self.prefill_limit(r, name))
            self.say("  prefill %d: %s tok/s, %s MB/tok from disk" % (PL, r.get("prefill_tps"), r.get("mb_per_tok")))
        for r in runs:
            t = r["prompt_tokens"] / r["prefill_tps"] if r.get("prefill_tps") else None
            r["disk_gbs"] = r["mb_per_tok"] * 1e6 * (r["prompt_tokens"] + r["gen_tokens"]) / t / 1e9 if t else None
        self.workload("stream.prefill%d" % PL, "colibri", name, "prefill tok/s of a %d-token prompt, cold, streamed" % PL, runs, "prefill_tps", "tok/s",
                      {"limit_name": "kernel peak GFLOP/s", "limit": L.get("kernel_peak_gflops"),
                       "ratio": median([r.get("compute_ratio") for r in runs]), "achieved_gbs_disk": median([r.get("disk_gbs") for r in runs]),
                       "ram_gb": ram})

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
                                        "limit_name": "O_DIRECT disk bandwidth", "limit": self.R["limits"]["disk_best_gbs"], "ratio": r.get("disk_ratio")})

    def iopaths(self):
        name = "large"
        d = self.ensure_model(name)
        ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        base = {"RAM_GB": str(ram), "PIN": "0", "PROF": "1"}
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
                                        "limit_name": "O_DIRECT disk bandwidth", "limit": self.R["limits"]["disk_best_gbs"], "ratio": row["disk_ratio"],
                                        "io_hidden_frac": row["io_hidden_frac"], "recall": row["recall"]})
        self.R["io_paths"] = out

    def tokenizer(self):
        out, _, _, _, _, _ = self.run("bench_tok", [os.path.join(ROOT, "build", "rel", "bench_tok")], timeout=600)
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
                     "what": "tok.h encode, one thread, corpus %s" % ("line by line" if k == "lines" else "as one text")}
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
        r = {"source_bytes": srcb, "wall_s": wall, "rc": rc, "log": lp, "peak_rss": rss, "source_mbs": srcb / wall / 1e6 if rc == 0 else None}
        m = re.search(r"source (\d+) MB/s", err)
        if m:
            r["reported_source_mbs"] = float(m.group(1))
        shutil.rmtree(dst, ignore_errors=True)
        self.R["convert"] = r
        if rc == 0:
            self.R["workloads"].append({"id": "convert.bf16_to_int4", "engine": "colibri-convert", "model": None, "unit": "MB/s", "n": 1,
                                        "value": r["source_mbs"], "what": "bf16 source MB/s converted to int4 g64 experts / int8 dense (cold cache)",
                                        "limit_name": "O_DIRECT disk bandwidth (qd1)", "limit": self.R["limits"].get("disk_qd1_gbs", 0) * 1e3,
                                        "ratio": r["source_mbs"] / (self.R["limits"]["disk_qd1_gbs"] * 1e3) if self.R["limits"].get("disk_qd1_gbs") else None})
        else:
            self.skip("converter throughput", "colibri-convert exited %d (log %s)" % (rc, lp))

    # ------------------------------------------------------------ llama.cpp
    def llamacpp(self):
        lb = os.path.join(self.llama, "bin", "llama-bench")
        py = os.path.join(self.venv, "bin", "python")
        if not os.access(lb, os.X_OK):
            self.skip("llama.cpp side by side", "%s not found (install: make llamacpp)" % lb)
            self.R["llamacpp"] = {"skipped": "llama-bench not installed (make llamacpp)"}
            return
        if not os.path.exists(py) or subprocess.run([py, "-c", "import gguf, numpy"], capture_output=True).returncode:
            self.skip("llama.cpp side by side", "no venv with gguf at %s (make llamacpp)" % self.venv)
            self.R["llamacpp"] = {"skipped": "gguf venv missing (make llamacpp)"}
            return
        pin = ""
        pf = os.path.join(self.llama, "..", ".colibri-pin")
        if os.path.exists(pf):
            pin = "llama.cpp vendored by llama-cpp-python " + open(pf).read().strip()
        out, err, _, _, _, _ = self.run("llama-bench-version", [lb, "--version"], check=False)
        ver = (out + err).strip().splitlines()
        L = {"version": (pin + ("; " + ver[0] if ver else "")).strip(), "threads": os.cpu_count(), "rows": [],
             "note": "same synthetic model exported by tools/export_gguf.py (Q4_0 experts from int4 g64 by repacking, Q8_0 from int8); "
                     "random weights: tokens are noise in both engines, speed only. llama-bench pp = prompt of N random ids, "
                     "tg = N decoded tokens after a context of the given depth."}
        self.R["llamacpp"] = L
        T = os.cpu_count()
        reps = max(1, self.a.repeats)
        extra_args = []
        isa = os.path.join(self.llama, "..", "build-isa.txt")
        if os.path.exists(isa):
            L["build_isa"] = open(isa).read().strip()
        P, G, PL = (32, 32, 128) if self.a.quick else (128, 128, 1024)

        def gguf_of(name):
            d = self.ensure_model(name)
            g = d + ".gguf"
            if not os.path.exists(g) or os.path.getmtime(g) < os.path.getmtime(os.path.join(d, ".bench-complete")):
                self.say("llama.cpp: exporting %s to GGUF" % name)
                self.run("export-" + name, [py, os.path.join(ROOT, "tools", "export_gguf.py"), d, g], timeout=3600)
            return g

        def lbench(label, g, args, cg_limit=None, cold=False):
            if cold:
                self.drop_cache([g])
            cg = self.cg_make(cg_limit) if cg_limit else None
            try:
                out, err, rc, wall, rss, lp = self.run(label, [lb, "-m", g, "-t", str(T), "-o", "json"] + extra_args + args, env=self.omp_env,
                                                       timeout=3600, cgroup=cg, check=False)
            finally:
                peak = self.cg_done(cg)
            L.setdefault("runs", []).append({"label": label, "rc": rc, "wall_s": round(wall, 2), "peak_rss": rss, "cgroup_peak": peak, "log": lp,
                                             **(self.last_others or {})})
            if rc != 0 and not extra_args and "GGML_ASSERT" in err:
                self.say("  %s: llama-bench aborted (log %s); retrying with --repack 0 for every llama.cpp run" % (label, lp))
                extra_args.append("--repack")
                extra_args.append("0")
                L["repack"] = False
                L["repack_why"] = "llama-bench aborted with repacked weights (log %s)" % lp
                return lbench(label + "-norepack", g, args, cg_limit, cold)
            if rc != 0:
                self.say("  %s: llama-bench exited %d%s (log %s)" % (label, rc, " (killed: the memory cgroup's OOM killer?)" if rc == -9 and cg else "", lp))
                return [], peak, lp
            try:
                rows = json.loads(out[out.index("["):])
            except ValueError:
                self.say("  %s: no JSON from llama-bench (log %s)" % (label, lp))
                return [], peak, lp
            return rows, peak, lp

        def row(wid, what, model, engine_val, col_ids, rows, kind, n, depth=0, extra=None):
            mine = [r for r in rows if (r.get("n_prompt") if kind == "pp" else r.get("n_gen")) == n and r.get("n_depth", 0) == depth
                    and ((r.get("n_gen") == 0) if kind == "pp" else (r.get("n_prompt") == 0))]
            ts = mine[0].get("avg_ts") if mine else None
            x = {"id": wid, "what": what, "model": model, "llamacpp_tok_s": ts, "llamacpp_stddev": mine[0].get("stddev_ts") if mine else None,
                 "colibri_tok_s": engine_val, "colibri_from": col_ids, "ratio_colibri_over_llamacpp": engine_val / ts if ts and engine_val else None}
            if extra:
                x.update(extra)
            L["rows"].append(x)
            self.R["workloads"].append({"id": "llamacpp." + wid, "engine": "llama.cpp", "model": model, "unit": "tok/s", "n": reps,
                                        "what": what, "value": ts, "limit": engine_val,
                                        "ratio": x["ratio_colibri_over_llamacpp"], "limit_name": "limit=colibri, ratio=colibri/llama.cpp"})
            self.say("  %-28s llama.cpp %s tok/s, colibri %s tok/s" % (wid, "%.2f" % ts if ts else "-", "%.2f" % engine_val if engine_val else "-"))

        def wval(wid):
            for w in self.R["workloads"]:
                if w["id"] == wid:
                    return w.get("value")
            return None

        # resident: medium (int4 -> Q4_0), page cache warm (file read once before)
        g = gguf_of("medium")
        self.say("llama.cpp: resident, medium model (Q4_0 experts), %d threads, %d repeats" % (T, reps))
        subprocess.run(["cat", g], stdout=subprocess.DEVNULL)
        rows, _, lp1 = lbench("llama-resident-pp", g, ["-p", "%d,%d" % (P, PL), "-n", "0", "-r", str(reps)])
        rows2, _, lp2 = lbench("llama-resident-tg", g, ["-p", "0", "-n", str(G), "-d", str(P), "-r", str(reps)])
        rows += rows2
        L["resident_raw"] = rows
        row("resident.prefill%d" % P, "prefill %d tokens, resident" % P, "medium", wval("resident.prefill%d" % P), "resident.prefill%d" % P, rows, "pp", P)
        row("resident.prefill%d" % PL, "prefill %d tokens, resident" % PL, "medium", wval("resident.prefill%d" % PL), "resident.prefill%d" % PL, rows, "pp", PL)
        fw = (G - 1) / G  # colibri's decode rate counts G tokens over G-1 forward passes; llama-bench's tg counts G passes
        row("resident.decode%d" % G, "decode %d tokens after %d, resident" % (G, P), "medium", (wval("resident.decode%d" % G) or 0) * fw or None,
            "resident.decode%d x (G-1)/G" % G, rows, "tg", G, depth=P)
        # int8 experts: small8 (Q8_0) vs colibri int8, resident, decode only
        g8 = gguf_of("small8")
        d8 = self.ensure_model("small8")
        subprocess.run(["cat", g8], stdout=subprocess.DEVNULL)
        self.say("llama.cpp: resident, int8 experts (Q8_0), small8 model")
        pin = self.usage_all(d8)
        cr = [self.crun("resident8-decode-%d" % i, d8, {"PIN": pin, "PIN_GB": "all"}, P, G) for i in range(reps)]
        for r in cr:
            self.decode_limit(r, "small8", "resident")
        self.workload("resident8.decode%d" % G, "colibri", "small8", "decode tok/s, int8 experts, all resident", cr, "decode_tps", "tok/s",
                      {"limit_name": "memory read bandwidth (all threads)", "limit": self.R["limits"]["mem_bw_gbs"]["all"],
                       "ratio": median([r.get("mem_ratio") for r in cr])})
        rows8, _, _ = lbench("llama-resident8-tg", g8, ["-p", "0", "-n", str(G), "-d", str(P), "-r", str(reps)])
        row("resident8.decode%d" % G, "decode %d after %d, int8/Q8_0 experts, resident" % (G, P), "small8", (wval("resident8.decode%d" % G) or 0) * fw or None,
            "resident8.decode%d x (G-1)/G" % G, rows8, "tg", G, depth=P)
        # streaming: large, same memory limit for both engines
        gl = gguf_of("large")
        ram = self.R["limits"].get("stream_ram_gb") or self.stream_budget()
        lim = (ram + 0.5) * 1e9 if self.memcg else None
        Gs = G if not self.a.quick else 16
        if lim:
            self.say("llama.cpp: streaming, large model in a %.1f GB memory cgroup (page cache counted), cold" % (lim / 1e9))
            how = "both engines in a memory cgroup of %.1f GB (page cache charged to it); colibri RAM_GB=%s DIRECT=1; llama.cpp mmap" % (lim / 1e9, ram)
        else:
            self.say("llama.cpp: streaming, large model, cold page cache but NO memory limit (no memory cgroup): llama.cpp may keep the model in page cache")
            how = "no memory cgroup: llama.cpp's page cache is unlimited after a cold start (not equivalent); colibri RAM_GB=%s DIRECT=1" % ram
        L["streaming_method"] = how
        # repacked weights are copies in anonymous memory (the whole model), so a model larger than memory
        # only runs from the mmap'd file: --repack 0 for the streaming rows
        sargs = [] if "--repack" in extra_args else ["--repack", "0"]
        L["streaming_args"] = sargs + ["-lm", "mmap"]
        rows, peak, _ = lbench("llama-stream-tg", gl, L["streaming_args"] + ["-p", "0", "-n", str(Gs), "-d", str(P), "-r", "1"], cg_limit=lim, cold=True)
        rowsp, peakp, _ = lbench("llama-stream-pp", gl, L["streaming_args"] + ["-p", str(P), "-n", "0", "-r", "1"], cg_limit=lim, cold=True)
        L["stream_raw"] = rows + rowsp
        L["stream_cgroup_peak"] = [peak, peakp]
        cs = self.crun("stream-cmp-decode", self.model_dir("large"), {"RAM_GB": str(ram), "DIRECT": "1", "PIN": "0"}, P, Gs, cold=True, cg_limit=lim) \
            if Gs != G else None
        cval = (cs.get("decode_tps") if cs else wval("stream.decode%d" % G) or 0) * (Gs - 1) / Gs or None
        row("stream.decode%d" % Gs, "decode %d after %d, streamed, cold" % (Gs, P), "large", cval, "stream.decode%d" % G if not cs else "stream-cmp-decode",
            rows, "tg", Gs, depth=P, extra={"method": how})
        row("stream.prefill%d" % P, "prefill %d tokens, streamed, cold" % P, "large", wval("stream.prefill%d" % P), "stream.prefill%d" % P,
            rowsp, "pp", P, extra={"method": how})

    # ------------------------------------------------------------ driver
    def omp_env_str(self):
        return " ".join("%s=%s" % kv for kv in sorted(self.omp_env.items()))

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
                 ("iopaths", self.iopaths), ("tokenizer", self.tokenizer), ("convert", self.convert), ("llamacpp", self.llamacpp)]
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
        try:
            self.R["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        except OSError:
            pass
        self.R["section_seconds"] = timing
        self.R["duration_s"] = round(time.time() - self.t0, 1)
        self.save(prev)
        print_table(self.R, prev)
        self.say("wrote %s (%.0f s); raw logs in %s" % (self.a.out, self.R["duration_s"], self.logdir))

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
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        for name, v in read_st_header(os.path.join(d, fn)).items():
            if name == "__metadata__":
                continue
            nb = v["data_offsets"][1] - v["data_offsets"][0]
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
    attn = qr * D + H * (nope + rope) * qr + (kvr + rope) * D + H * (nope + vh) * kvr + D * H * vh + ih * idim * qr + idim * D + ih * D
    moe_layers = L - nd
    macs = L * attn + nd * 3 * fi * D + moe_layers * (E * D + 3 * mi * ns * D + K * 3 * mi * D) + V * D
    eb = max(per_expert.values()) if per_expert else 0
    return {"config": {k: c[k] for k in ("hidden_size", "vocab_size", "num_hidden_layers", "first_k_dense_replace", "n_routed_experts",
                                          "num_experts_per_tok", "moe_intermediate_size", "num_attention_heads") if k in c},
            "size_bytes": total, "expert_bytes_total": sum(per_expert.values()), "dense_bytes": dense + emb,
            "expert_bytes": eb, "expert_weight_bytes": max(per_expert_w.values()) if per_expert_w else 0,
            "moe_layers": moe_layers, "experts_per_layer": E, "topk": K,
            "dense_bytes_per_token": dense + D * (emb // (V * D) if V * D else 4),
            "expert_bytes_per_token": K * moe_layers * eb,
            "active_macs_per_token": macs}


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
    print("random-weight synthetic models: tokens are noise, speed only")
    hdr = "%-56s %-9s %11s %-6s %9s %7s  %-34s" % ("workload", "engine", "value", "unit", "limit", "ratio", "limit is")
    if prev:
        hdr += " %11s %7s" % ("previous", "change")
    print(hdr)
    print("-" * len(hdr))
    for w in R["workloads"]:
        v = w.get("value")
        lim = w.get("limit")
        ratio = w.get("ratio")
        line = "%-56s %-9s %11s %-6s %9s %7s  %-34s" % (
            w["id"][:56], (w.get("engine") or "-")[:9], "%.3f" % v if isinstance(v, (int, float)) else "-", w.get("unit", ""),
            "%.2f" % lim if isinstance(lim, (int, float)) else "-", "%.1f%%" % (100 * ratio) if isinstance(ratio, (int, float)) else "-",
            (w.get("limit_name") or "")[:34])
        if prev:
            p = pv.get(w["id"])
            line += " %11s %7s" % ("%.3f" % p if isinstance(p, (int, float)) else "-",
                                   "%+.1f%%" % (100 * (v / p - 1)) if isinstance(p, (int, float)) and p and isinstance(v, (int, float)) else "")
        print(line)
    if R.get("io_paths"):
        print("\nI/O paths (streaming decode, medians of interleaved runs):")
        print("%-22s %9s %7s %9s %8s %9s %9s %8s" % ("config", "tok/s", "hit %", "MB/tok", "disk GB/s", "I/O wait", "hidden", "recall"))
        for r in R["io_paths"]:
            f = lambda x, s="%.2f": s % x if isinstance(x, (int, float)) else "-"  # noqa: E731
            print("%-22s %9s %7s %9s %8s %9s %9s %8s" % (r["config"], f(r["decode_tps"], "%.3f"), f(r["hit"], "%.1f"), f(r["mb_per_tok"], "%.1f"),
                                                         f(r["disk_gbs"]), f(100 * r["io_wait_frac"] if r["io_wait_frac"] is not None else None, "%.0f%%"),
                                                         f(100 * r["io_hidden_frac"] if r["io_hidden_frac"] is not None else None, "%.0f%%"),
                                                         f(r["recall"], "%.1f%%")))
    if R.get("history"):
        print("\nusage history (PIN=auto, USAGE_SAVE=1, rotating prompts):")
        for h in R["history"]:
            print("  run %d: hit %s%% (pin %s%% + LRU %s%%), %s experts pinned, decode %s tok/s" % (h["run"], h["hit"], h["hit_pin"], h["hit_lru"],
                                                                                               h["pinned"], h["decode_tps"]))
    if isinstance(R.get("llamacpp"), dict) and R["llamacpp"].get("rows"):
        print("\nllama.cpp side by side (%s; %s):" % (R["llamacpp"].get("version"), R["llamacpp"].get("streaming_method", "")))
        print("%-28s %-8s %12s %12s %8s" % ("workload", "model", "colibri", "llama.cpp", "ratio"))
        for r in R["llamacpp"]["rows"]:
            c, l, x = r.get("colibri_tok_s"), r.get("llamacpp_tok_s"), r.get("ratio_colibri_over_llamacpp")
            print("%-28s %-8s %12s %12s %8s" % (r["id"], r["model"], "%.3f" % c if c else "-", "%.3f" % l if l else "-", "%.2fx" % x if x else "-"))
    busy = []
    peer = R.get("llamacpp") if isinstance(R.get("llamacpp"), dict) else {}
    for w in R["workloads"] + [{"runs": peer.get("runs") or []}]:
        for r in w.get("runs") or []:
            if (r.get("others_cpu_frac") or 0) > 0.15:
                busy.append("%s %.0f%%" % (r.get("label"), 100 * r["others_cpu_frac"]))
    if busy:
        print("\nother processes took more than 15%% of the CPUs during: %s (figures of those runs are depressed)" % ", ".join(busy))
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
    ap.add_argument("--omp-default", action="store_true", help="run the engines with libgomp's default waiting (no GOMP_SPINCOUNT)")
    a = ap.parse_args()
    if a.repeats < 1:
        raise SystemExit("bench: --repeats must be at least 1")
    for b in ("colibri", "colibri-synth", "build/rel/bench_quant", "build/rel/bench_io", "build/rel/bench_mem", "build/rel/bench_tok"):
        if not os.access(os.path.join(ROOT, b), os.X_OK):
            raise SystemExit("bench: %s is not built (run `make bench`)" % b)
    Bench(a).main()


if __name__ == "__main__":
    main()
