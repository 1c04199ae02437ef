"""Helpers shared by the end-to-end tests (stdlib only): the binary under
test ($COLIBRI), a clean environment for it, the fixtures, small file
helpers."""
import json
import os
import re
import shutil
import struct
import subprocess
import time

BIN = os.environ.get("COLIBRI", "./colibri")
FIXTURES = "tests/fixtures"
# Fixture directories with an oracle reference; ORACLES[0] is tiny-glm5,
# the GLM-5 fixture the single-fixture tests edit and run.
ORACLES = sorted((d for d in os.listdir(FIXTURES) if os.path.exists(os.path.join(FIXTURES, d, "ref.json"))),
                 key=lambda d: (d != "tiny-glm5", d))
# The other families' f32 fixtures (DeepSeek-V3, DeepSeek-V3.2, Kimi K2).
FAMILY_ORACLES = [d for d in ORACLES if d.startswith(("tiny-dsv3", "tiny-kimi")) and not d.endswith("-q4")]


def env_base(extra=None):
    """Only what the runs need from the caller's environment (sanitizer
    options; wine's prefix when the binary is the Windows build under
    wine), so stray knobs never leak into a test."""
    e = {k: v for k, v in os.environ.items() if k in ("PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "WINEPREFIX", "WINEDEBUG")}
    e.update(extra or {})
    if os.environ.get("COLI_WINE"):  # the Windows build under wine (tests/run_windows.py)
        e["LANG"] = "C.UTF-8"  # wine decodes arguments and environment in the Unix locale's encoding
        if "TEMP" in e:  # wine sets TEMP to its temporary directory: the knob's other name
            e["TEMPERATURE"] = e.pop("TEMP")
    return e


def run(model, env=None, args=None, timeout=120):
    """(exit status, stdout, stderr) of colibri on model (or on args)."""
    p = subprocess.run([BIN] + (args if args is not None else [model]), env=env_base(env), capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def serve_port(p, log, timeout=60):
    """The port a starting `colibri --serve` process p says it listens on,
    from its stderr so far (log()); None when it exits first or timeout
    seconds pass."""
    t0 = time.time()
    while time.time() - t0 < timeout and p.poll() is None:
        m = re.search(r"on http://[^:]+:(\d+) ", log())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    return None


def read_st(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def load_json(path):
    with open(path) as f:
        return json.load(f)


def save_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f)


def copy_fixture(name, dst):
    """Copies a fixture's files (not its run history) into dst."""
    src = os.path.join(FIXTURES, name)
    for f in os.listdir(src):
        if not f.startswith("."):
            shutil.copy(os.path.join(src, f), dst)
