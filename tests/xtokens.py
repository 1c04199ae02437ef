#!/usr/bin/env python3
"""Token identity across machines (stdlib only): the same fixture, prompt,
seed and kernel level class give the same token ids on this x86-64 build
($COLIBRI_HOST, default build/test/colibri) and on a foreign build run
through an emulator ($COLIBRI, e.g. build/arm/qemu/colibri, the aarch64
build under qemu-user). tests/run.py runs it in the aarch64 part.

Two classes of kernel level, where the design promises equal bytes:
- scalar: SIMD=scalar on both sides, f32 weights (float sums in the same
  order everywhere, -ffp-contract=off), plain and with MTP drafts (DRAFT=3);
- IDOT: integer weights (quantized containers and load-time quantization)
  with IDOT=1, every level of both machines (x86: scalar and the best this
  CPU has; aarch64: neon, neon-dotprod, neon-i8mm): exact integer sums.
Each case runs greedy and sampled (TEMP/TOP_P with a fixed SEED) and
compares the `generated tokens` lines (TOKENS=1).

Run from the repository root:
    COLIBRI=build/arm/qemu/colibri tests/xtokens.py -v
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN, FIXTURES, env_base  # noqa: E402

HOST = os.environ.get("COLIBRI_HOST", "build/test/colibri")
FOREIGN_LEVELS = os.environ.get("XTOKENS_LEVELS", "neon,neon-dotprod,neon-i8mm").split(",")
PROMPT = "Tokens must not depend on the machine"
MODES = {"greedy": {"TEMP": "0"}, "sampled": {"TEMP": "0.9", "TOP_P": "0.9", "SEED": "8"}}  # a seed no fixture's draw stops before 8 tokens


def tokens(binary, fixture, env):
    """The generated token ids of one run (a failed run fails the test)."""
    e = {"PROMPT": PROMPT, "NGEN": "16", "TOKENS": "1", "USAGE_SAVE": "0"}
    e.update(env)
    p = subprocess.run([binary, os.path.join(FIXTURES, fixture)], env=env_base(e), capture_output=True, timeout=600)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise AssertionError("%s %s %s: exit %d: %s" % (binary, fixture, env, p.returncode, err))
    lines = [l for l in err.splitlines() if l.startswith("colibri: generated tokens:")]
    if len(lines) != 1:
        raise AssertionError("%s %s %s: no generated tokens line: %s" % (binary, fixture, env, err))
    return [int(x) for x in lines[0].split(":", 2)[2].split()]


class Tokens(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(HOST):
            raise unittest.SkipTest("xtokens: no host build at %s (make build/test/colibri)" % HOST)
        if os.path.realpath(BIN) == os.path.realpath(HOST) or not os.path.exists(BIN):
            raise unittest.SkipTest("xtokens: set COLIBRI to the foreign build's wrapper (now %s)" % BIN)

    def same(self, fixture, host_envs, foreign_envs, extra=None):
        """Every host and foreign run of fixture gives the tokens of the
        first host run, in both modes."""
        for mode, menv in MODES.items():
            runs = [("host", HOST, e) for e in host_envs] + [("foreign", BIN, e) for e in foreign_envs]
            want = None
            for side, binary, env in runs:
                e = dict(menv, **(extra or {}))
                e.update(env)
                ids = tokens(binary, fixture, e)
                if want is None:
                    want = ids
                    self.assertGreaterEqual(len(ids), 8, (fixture, mode, ids))
                self.assertEqual(ids, want, "%s %s %s %s" % (fixture, mode, side, e))
            print("xtokens: %s %s: %d runs, tokens %s" % (fixture, mode, len(runs), " ".join(map(str, want))), flush=True)

    # the scalar class: f32 weights, the plain C kernels on both machines
    def test_scalar_f32(self):
        self.same("tiny-glm5", [{"SIMD": "scalar"}], [{"SIMD": "scalar"}])

    def test_scalar_f32_deepseek_v3(self):
        self.same("tiny-dsv3", [{"SIMD": "scalar"}], [{"SIMD": "scalar"}])

    def test_scalar_f32_mtp_drafts(self):
        # sampled drafts give plain sampling's tokens: DRAFT=0 on this machine, DRAFT=3 and -1 on both
        self.same("tiny-glm5-mtp", [{"SIMD": "scalar", "DRAFT": "0"}, {"SIMD": "scalar", "DRAFT": "3"}],
                  [{"SIMD": "scalar", "DRAFT": "3"}, {"SIMD": "scalar", "DRAFT": "-1"}])

    # the IDOT class: integer weights, every kernel level of both machines
    def idot(self, fixture, extra=None):
        self.same(fixture, [{"SIMD": "scalar", "IDOT": "1"}, {"SIMD": "auto", "IDOT": "1"}],
                  [{"SIMD": l, "IDOT": "1"} for l in FOREIGN_LEVELS], extra)

    def test_idot_int4_grouped(self):
        self.idot("tiny-q4g32")

    def test_idot_int8(self):
        self.idot("tiny-q8")

    def test_idot_deepseek_v3_int4(self):
        self.idot("tiny-dsv3-q4")

    def test_idot_load_time_quantization(self):
        self.idot("tiny-glm5", {"EXPERT_BITS": "4", "GROUP_SIZE": "16", "DENSE_BITS": "8"})


if __name__ == "__main__":
    unittest.main()
