#!/usr/bin/env python3
"""End-to-end tests of colibri-convert (stdlib only).

The converter is $COLIBRI's sibling (build/test/colibri-convert when
COLIBRI=build/test/colibri); run from the repository root.

- A full-precision conversion of each committed fixture passes the engine's
  oracle; quantized conversions (int8; int4 grouped) give exactly the
  engine's output for the same bits quantized at load time: one quantizer.
- Resume: finished shards are skipped, a deleted one is rewritten byte for
  byte; changed bits or group size are refused by name; a failed shard
  leaves nothing under its name; the lock keeps a second converter out.
  Every finished shard's cvh1 checksum (cvh1() below, the reference) is in
  the manifest and a rerun reads each back: one flipped bit gets the shard
  rewritten, as do shards an older manifest lists without a checksum.
- FP8: a tiny GLM-5-shaped model written as FP8 e4m3 with 128x128 block
  scales (edge codes included, matrices crossing block edges in both dims)
  converts exactly (F32 output = e4m3 value x block scale, bit for bit) and,
  at int8, agrees with its bf16 twin within the bound derived in
  FP8.test_int8_matches_bf16_twin.
- Hostile input and bad flags are refused with exit 2, naming the culprit:
  a flag's message names the value given and the values accepted; a flag
  given twice is refused; a FIFO (or symbolic link) among the inputs or
  under a name written in DST is refused by name without hanging.
"""
import array
import bisect
import fcntl
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clitest import BIN, FIXTURES, copy_fixture, env_base, load_json, read_st, run  # noqa: E402

CONVERT = os.path.join(os.path.dirname(BIN) or ".", "colibri-convert")
TINY = os.path.join(FIXTURES, "tiny-glm5")
# The full-precision fixtures (the quantized ones are converter output already).
ORACLES = sorted(d for d in os.listdir(FIXTURES)
                 if os.path.exists(os.path.join(FIXTURES, d, "ref.json")) and os.path.exists(os.path.join(FIXTURES, d, "model.safetensors")))


def convert(src, dst, *flags, timeout=120):
    p = subprocess.run([CONVERT, src, dst] + list(flags), env=env_base(), capture_output=True, timeout=timeout)
    return p.returncode, p.stderr.decode("utf-8", "replace")


def engine(model, env=None, timeout=120):
    return run(model, dict({"USAGE_SAVE": "0"}, **(env or {})), timeout=timeout)


def write_st(path, tensors):
    """Writes [(name, dtype, shape, bytes)] as a safetensors file."""
    header, off = {}, 0
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t[3])


def container(d):
    """{name: (header entry, data bytes, file)} over every shard of d."""
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            h, data = read_st(os.path.join(d, f))
            for k, v in h.items():
                if k != "__metadata__":
                    out[k] = (v, data[v["data_offsets"][0]:v["data_offsets"][1]], f)
    return out


def floats(entry, data):
    dt = entry["dtype"]
    if dt == "F32":
        return list(struct.unpack("<%df" % (len(data) // 4), data))
    if dt == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack("<%dH" % (len(data) // 2), data)]
    raise ValueError(dt)


def dequant(c, name, rows):
    """A converted tensor as a list of f64 values (int8 + .qs, or float)."""
    e, data, _ = c[name]
    if name + ".qs" not in c:
        return floats(e, data)
    s = floats(*c[name + ".qs"][:2])
    assert len(data) % rows == 0 and len(s) == rows, name
    cols = len(data) // rows
    q = struct.unpack("<%db" % len(data), data)
    return [q[o * cols + j] * s[o] for o in range(rows) for j in range(cols)]


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


M64 = (1 << 64) - 1
K1, K2, K3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def cvh1(data):
    """Reference of the converter's shard checksum (tools/convert.c, cvh1):
    eight lanes over little-endian 8-byte words, each word xored in,
    multiplied and xorshifted; then length, lanes and tail folded in one
    chain, and a finalizer."""
    def mix(a, w):
        a = (a ^ w) * K1 & M64
        return a ^ (a >> 29)
    v = [(i + 1) * K3 & M64 for i in range(8)]
    nb = len(data) // 64
    words = struct.unpack_from("<%dQ" % (8 * nb), data)
    for b in range(nb):
        for i in range(8):
            v[i] = mix(v[i], words[8 * b + i])
    x = len(data)
    for i in range(8):
        x = mix(x, v[i])
    tail = data[64 * nb:]
    for k in range(0, len(tail), 8):
        x = mix(x, struct.unpack("<Q", tail[k:k + 8].ljust(8, b"\0"))[0])
    x ^= x >> 33
    x = x * K2 & M64
    x ^= x >> 29
    x = x * K3 & M64
    return x ^ (x >> 32)


def mtimes(d):
    return {f: os.stat(os.path.join(d, f)).st_mtime_ns for f in os.listdir(d) if f.endswith(".safetensors")}


class Engine(unittest.TestCase):
    """Converted containers load in the engine; quantized ones are the
    engine's own load-time quantization, byte for byte in effect."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_f32_container_passes_oracle(self):
        for name in ORACLES:
            dst = os.path.join(self.tmp, name)
            rc, err = convert(os.path.join(FIXTURES, name), dst, "--expert-bits", "32", "--dense-bits", "32", "--mtp-bits", "32")
            self.assertEqual(rc, 0, err)
            shutil.copy(os.path.join(FIXTURES, name, "ref.json"), dst)
            rc, out, err = engine(dst)
            self.assertEqual(rc, 0, name + ": " + out + err)
            self.assertRegex(out, r"-- PASS\n(oracle: MTP head: teacher-forced (\d+)/\2 argmax.*; chain (\d+)/\3, .*\n)?$")
            for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
                with open(os.path.join(FIXTURES, name, f), "rb") as a, open(os.path.join(dst, f), "rb") as b:
                    self.assertEqual(a.read(), b.read(), f)

    def test_expert_slabs_are_adjacent(self):
        rc, err = convert(TINY, self.tmp, "--expert-bits", "4", "--dense-bits", "8", "--group-size", "32")
        self.assertEqual(rc, 0, err)
        c = container(self.tmp)
        cfg = load_json(os.path.join(TINY, "config.json"))
        for l, kind in enumerate(cfg["mlp_layer_types"]):
            if kind != "sparse":
                continue
            for e in range(cfg["n_routed_experts"]):
                names = ["model.layers.%d.mlp.experts.%d.%s_proj.weight" % (l, e, p) for p in ("gate", "up", "down")]
                ents = [c[n][0] for n in names]
                self.assertEqual({c[n][2] for n in names}, {"out-%05d.safetensors" % (l + 1)})
                self.assertEqual(ents[0]["data_offsets"][1], ents[1]["data_offsets"][0], names)
                self.assertEqual(ents[1]["data_offsets"][1], ents[2]["data_offsets"][0], names)
                for n in names:
                    self.assertEqual(c[n][0]["dtype"], "U8")
                    self.assertEqual(c[n + ".qs"][0]["dtype"], "F32")
        self.assertEqual(c["model.embed_tokens.weight"][0]["dtype"], "F32")  # source dtype at dense >= 8
        self.assertEqual(c["model.layers.1.mlp.gate.weight"][0]["dtype"], "F32")
        self.assertNotIn("model.layers.1.self_attn.indexer.weights_proj.weight.qs", c)
        self.assertIn("model.layers.1.self_attn.indexer.wk.weight.qs", c)
        self.assertEqual(c["model.norm.weight"][2], "out-00000.safetensors")

    def test_one_quantizer(self):
        """Converted at (expert, dense, group) bits vs the f32 fixture
        quantized by the engine at load time: same oracle line, same greedy
        tokens."""
        prompt = {"PROMPT": "Hello there", "TEMP": "0", "TOKENS": "1", "NGEN": "12"}
        for eb, db, gs in (("8", "8", "0"), ("4", "4", "32"), ("2", "8", "0")):
            dst = os.path.join(self.tmp, "%s-%s-%s" % (eb, db, gs))
            rc, err = convert(TINY, dst, "--expert-bits", eb, "--dense-bits", db, "--group-size", gs)
            self.assertEqual(rc, 0, err)
            self.assertIn("model.layers.1.mlp.experts.0.up_proj.weight.qs", container(dst))
            shutil.copy(os.path.join(TINY, "ref.json"), dst)
            load = {"EXPERT_BITS": eb, "DENSE_BITS": db, "GROUP_SIZE": gs}
            a, b = engine(dst), engine(TINY, load)
            self.assertEqual(a[:2], b[:2], (eb, db, gs))
            self.assertIn("oracle:", a[1])
            a, b = engine(dst, prompt), engine(TINY, dict(prompt, **load))
            self.assertEqual(a[0], 0, a[2])
            ids = [[l for l in x[2].splitlines() if "tokens:" in l] for x in (a, b)]
            self.assertEqual(len(ids[0]), 2, a[2])
            self.assertEqual(ids[0], ids[1], (eb, db, gs))
            self.assertEqual(a[1], b[1])


class Resume(unittest.TestCase):
    FLAGS = ["--expert-bits", "4", "--dense-bits", "8", "--group-size", "32"]

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.dst = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_rerun_skips_and_refuses(self):
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        h, data = read_st(os.path.join(TINY, "model.safetensors"))
        self.assertIn("read %d bytes" % len(data), err)  # every source tensor read once
        first = {f: slurp(os.path.join(self.dst, f)) for f in mtimes(self.dst)}
        man = load_json(os.path.join(self.dst, "colibri-convert.json"))
        self.assertEqual({s["file"]: s["bytes"] for s in man["shards"]}, {f: len(b) for f, b in first.items()})
        self.assertEqual(man["params"]["down_bits"], 4)
        self.assertEqual(man["params"]["group_size"], 32)
        m0 = mtimes(self.dst)
        os.remove(os.path.join(self.dst, "out-00002.safetensors"))
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"out-00002.safetensors: layer 1, .* converted")
        layer1 = sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items() if k.startswith("model.layers.1."))
        self.assertIn("read %d bytes" % layer1, err)
        self.assertEqual(err.count("finished before, skipped"), 4, err)
        m1 = mtimes(self.dst)
        for f in m0:
            if f != "out-00002.safetensors":
                self.assertEqual(m0[f], m1[f], f)
        self.assertEqual(slurp(os.path.join(self.dst, "out-00002.safetensors")), first["out-00002.safetensors"])
        for flags, flag, want in ((self.FLAGS + ["--down-bits", "8"], "--down-bits", "down bits"),
                                  (self.FLAGS[:-1] + ["16"], "--group-size", "group size")):
            rc, err = convert(TINY, self.dst, *flags)
            self.assertEqual(rc, 2, err)
            self.assertIn(want, err)
            self.assertIn(flag, err)
            self.assertEqual(mtimes(self.dst), m1)
        rc, err = convert(TINY, self.dst, "--expert-bits", "4", "--dense-bits", "8", "--group-size", "32", "--mtp-bits", "4")
        self.assertEqual(rc, 2, err)
        self.assertIn("MTP bits", err)

    def test_threads_and_chunks_do_not_change_bytes(self):
        """Thread count and batch size (down to streaming every tensor in
        4 kB chunks) leave the bytes unchanged."""
        outs = []
        for n, mb in (("1", "64"), ("2", "0.004"), ("3", "0.1")):
            d = os.path.join(self.tmp, "t" + n)
            rc, err = convert(TINY, d, "--threads", n, "--chunk-mb", mb, *self.FLAGS)
            self.assertEqual(rc, 0, err)
            outs.append({f: slurp(os.path.join(d, f)) for f in mtimes(d)})
        self.assertEqual(outs[0], outs[1])
        self.assertEqual(outs[0], outs[2])

    def test_failed_shard_leaves_nothing_and_resumes(self):
        src = os.path.join(self.tmp, "src")
        os.mkdir(src)
        copy_fixture("tiny-glm5", src)
        st = os.path.join(src, "model.safetensors")
        h, data = read_st(st)
        name = "model.layers.2.mlp.experts.3.up_proj.weight"
        off = os.path.getsize(st) - len(data) + h[name]["data_offsets"][0] + 4 * 17
        with open(st, "r+b") as f:
            f.seek(off)
            good = f.read(4)
            f.seek(off)
            f.write(struct.pack("<f", float("nan")))
        rc, err = convert(src, self.dst, *self.FLAGS)
        self.assertEqual(rc, 2, err)
        self.assertIn(name, err)
        self.assertIn("non-finite", err)
        left = sorted(os.listdir(self.dst))
        self.assertNotIn("out-00003.safetensors", left)
        self.assertFalse([f for f in left if ".tmp" in f], left)
        man = load_json(os.path.join(self.dst, "colibri-convert.json"))
        self.assertEqual([s["file"] for s in man["shards"]], ["out-%05d.safetensors" % i for i in range(3)])
        with open(st, "r+b") as f:
            f.seek(off)
            f.write(good)
        rc, err = convert(src, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err.count("finished before, skipped"), 3, err)

    def test_manifest_checksums(self):
        """Each finished shard is recorded with the cvh1 checksum of its
        bytes, whatever the write pattern (one batch or 4 kB streams)."""
        for mb in ("64", "0.004"):
            d = os.path.join(self.tmp, "ck" + mb)
            rc, err = convert(TINY, d, "--chunk-mb", mb, *self.FLAGS)
            self.assertEqual(rc, 0, err)
            man = load_json(os.path.join(d, "colibri-convert.json"))
            self.assertEqual(len(man["shards"]), 5)
            for s in man["shards"]:
                data = slurp(os.path.join(d, s["file"]))
                self.assertEqual(s["checksum"], "cvh1:%016x" % cvh1(data), (mb, s["file"]))

    def test_changed_shard_rewritten(self):
        """A finished shard with one flipped bit (same size) is found by its
        checksum and rewritten; the matching ones are only read."""
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        shard = os.path.join(self.dst, "out-00002.safetensors")
        good = slurp(shard)
        for off in (len(good) // 2, 3):  # in the data, and in the header's length word
            with open(shard, "r+b") as f:
                f.seek(off)
                f.write(bytes([good[off] ^ 0x10]))
            self.assertEqual(os.path.getsize(shard), len(good))
            m0 = mtimes(self.dst)
            rc, err = convert(TINY, self.dst, *self.FLAGS)
            self.assertEqual(rc, 0, err)
            self.assertRegex(err, r"out-00002.safetensors: content differs from the checksum recorded when it was written .*"
                                  r"converting it again")
            self.assertIn("read back 5 finished shard(s)", err)
            self.assertEqual(err.count("finished before, skipped"), 4, err)
            self.assertEqual(slurp(shard), good)
            m1 = mtimes(self.dst)
            for f in m0:
                if f != "out-00002.safetensors":
                    self.assertEqual(m0[f], m1[f], f)
        rc, err = convert(TINY, self.dst, *self.FLAGS)  # all verified: nothing rewritten
        self.assertEqual(rc, 0, err)
        self.assertEqual(err.count("finished before, skipped"), 5, err)
        self.assertEqual(mtimes(self.dst), m1)

    def test_old_manifest_without_checksums(self):
        """Shards an older converter's manifest lists without checksums
        cannot be verified: rewritten (same bytes), saying why, and the
        manifest then carries their checksums."""
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        first = {f: slurp(os.path.join(self.dst, f)) for f in mtimes(self.dst)}
        mp = os.path.join(self.dst, "colibri-convert.json")
        man = load_json(mp)
        for s in man["shards"]:
            del s["checksum"]
        man["shards"][1]["checksum"] = "md5:0123"  # unknown algorithm: unverifiable too
        with open(mp, "w") as f:
            json.dump(man, f)
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        self.assertIn("lists 4 finished shard(s) without a content checksum", err)
        self.assertIn("out-00001.safetensors: recorded checksum is not cvh1:<16 hex digits>", err)
        self.assertEqual(err.count("converted ["), 5, err)
        self.assertEqual({f: slurp(os.path.join(self.dst, f)) for f in mtimes(self.dst)}, first)
        for s in load_json(mp)["shards"]:
            self.assertEqual(s["checksum"], "cvh1:%016x" % cvh1(first[s["file"]]))

    def test_stale_temporaries_removed(self):
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        os.remove(os.path.join(self.dst, "out-00003.safetensors"))
        for f in ("out-00003.safetensors.tmp", "colibri-convert.json.tmp.12345", "config.json.tmp.99"):
            with open(os.path.join(self.dst, f), "wb") as g:
                g.write(b"partial")
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)
        self.assertFalse([f for f in os.listdir(self.dst) if ".tmp" in f])

    def test_quantization_config_stripped_anywhere(self):
        with open(os.path.join(TINY, "config.json")) as f:
            text = f.read()
        want = json.loads(text)
        q = '"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "note": "a } and a , in a string"}'
        for i, edited in enumerate((text.replace("{", "{" + q + ",", 1), text.rstrip()[:-1] + "," + q + "}\n")):
            src, dst = os.path.join(self.tmp, "q%d" % i), os.path.join(self.tmp, "q%d-out" % i)
            os.mkdir(src)
            copy_fixture("tiny-glm5", src)
            with open(os.path.join(src, "config.json"), "w") as f:
                f.write(edited)
            rc, err = convert(src, dst, "--expert-bits", "32", "--dense-bits", "32")
            self.assertEqual(rc, 0, err)
            with open(os.path.join(dst, "config.json")) as f:
                out = f.read()
            self.assertNotIn("quantization_config", out)
            self.assertEqual(json.loads(out), want)

    def test_lock(self):
        os.mkdir(self.dst)
        with open(os.path.join(self.dst, ".colibri-convert.lock"), "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 2, err)
        self.assertIn("another colibri-convert", err)
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 0, err)

    def test_foreign_files_refused(self):
        os.mkdir(self.dst)
        shutil.copy(os.path.join(TINY, "model.safetensors"), self.dst)
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 2, err)
        self.assertIn("model.safetensors: not a shard of this conversion", err)
        os.remove(os.path.join(self.dst, "model.safetensors"))
        shutil.copy(os.path.join(TINY, "model.safetensors"), os.path.join(self.dst, "out-00001.safetensors"))
        rc, err = convert(TINY, self.dst, *self.FLAGS)
        self.assertEqual(rc, 2, err)
        self.assertIn("colibri-convert.json does not say how it was made", err)


# ---- FP8 --------------------------------------------------------------------

def e4m3_value(c):
    e, m = (c >> 3) & 15, c & 7
    if e == 15 and m == 7:
        return float("nan")
    v = m * 2.0 ** -9 if e == 0 else (8 + m) * 2.0 ** (e - 10)
    return -v if c & 128 else v


E4M3_POS = [e4m3_value(c) for c in range(0x7F)]  # 0x00..0x7e, increasing


def e4m3_encode(v):
    """Round to nearest e4m3 (ties to even code), saturating at 448."""
    a = abs(v)
    k = bisect.bisect_left(E4M3_POS, a)
    if k >= len(E4M3_POS):
        c = 0x7E
    elif k == 0 or E4M3_POS[k] == a:
        c = k
    else:
        lo, hi = E4M3_POS[k - 1], E4M3_POS[k]
        c = k - 1 if a - lo < hi - a or (a - lo == hi - a and (k - 1) % 2 == 0) else k
    return c | (0x80 if v < 0 or (v == 0 and math.copysign(1, v) < 0) else 0)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bytes(vals):
    u = array.array("I", array.array("f", vals).tobytes())
    return array.array("H", [((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u]).tobytes()


FP8_CFG = {
    "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "vocab_size": 48, "hidden_size": 136,
    "intermediate_size": 144, "moe_intermediate_size": 24, "num_hidden_layers": 2, "first_k_dense_replace": 1,
    "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "index_n_heads": 2, "index_head_dim": 16, "index_topk": 4, "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": False,
}
QCFG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head", "model.embed_tokens"]}
# Edge codes: subnormals (min, max), min normal, +-448, -0, +0, NaN-free.
EDGES = [0x01, 0x07, 0x08, 0x7E, 0xFE, 0x80, 0x00, 0x86]


def fp8_tensors(cfg):
    """[(name, shape, fp8?)] of a tiny glm_moe_dsa with an MTP layer, in the
    FP8 release's split: projections FP8, the rest bf16."""
    D, V, H = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    ql, kl, nope, rope, vh = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    ih, idim, mi, E = cfg["index_n_heads"], cfg["index_head_dim"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    t = [("model.embed_tokens.weight", (V, D), 0), ("lm_head.weight", (V, D), 0), ("model.norm.weight", (D,), 0)]
    L = cfg["num_hidden_layers"]
    for l in range(L + 1):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", (D,), 0), (p + "post_attention_layernorm.weight", (D,), 0),
              (p + "self_attn.q_a_proj.weight", (ql, D), 1), (p + "self_attn.q_a_layernorm.weight", (ql,), 0),
              (p + "self_attn.q_b_proj.weight", (H * (nope + rope), ql), 1),
              (p + "self_attn.kv_a_proj_with_mqa.weight", (kl + rope, D), 1), (p + "self_attn.kv_a_layernorm.weight", (kl,), 0),
              (p + "self_attn.kv_b_proj.weight", (H * (nope + vh), kl), 1), (p + "self_attn.o_proj.weight", (D, H * vh), 1),
              (p + "self_attn.indexer.wq_b.weight", (ih * idim, ql), 1), (p + "self_attn.indexer.wk.weight", (idim, D), 1),
              (p + "self_attn.indexer.k_norm.weight", (idim,), 0), (p + "self_attn.indexer.k_norm.bias", (idim,), 0),
              (p + "self_attn.indexer.weights_proj.weight", (ih, D), 0)]
        if l < cfg["first_k_dense_replace"]:
            I = cfg["intermediate_size"]
            t += [(p + "mlp.gate_proj.weight", (I, D), 1), (p + "mlp.up_proj.weight", (I, D), 1), (p + "mlp.down_proj.weight", (D, I), 1)]
            continue
        t += [(p + "mlp.gate.weight", (E, D), 0), (p + "mlp.gate.e_score_correction_bias", (E,), 0)]
        for q in ("gate", "up"):
            t.append((p + "mlp.shared_experts.%s_proj.weight" % q, (mi, D), 1))
        t.append((p + "mlp.shared_experts.down_proj.weight", (D, mi), 1))
        for e in range(E):
            t += [(p + "mlp.experts.%d.gate_proj.weight" % e, (mi, D), 1), (p + "mlp.experts.%d.up_proj.weight" % e, (mi, D), 1),
                  (p + "mlp.experts.%d.down_proj.weight" % e, (D, mi), 1)]
        if l == L:
            t += [(p + "eh_proj.weight", (D, 2 * D), 0), (p + "enorm.weight", (D,), 0), (p + "hnorm.weight", (D,), 0),
                  (p + "shared_head.norm.weight", (D,), 0)]
    return t


def make_fp8_pair(root, seed=7):
    """Writes root/bf16 (the twin) and root/fp8. Returns {name: (W f32 list,
    codes, scales, shape)} for the FP8 tensors, W being the twin's values
    before bf16 rounding."""
    rng = random.Random(seed)
    out = {}
    bf, fp = [], []
    for name, shape, is_fp8 in fp8_tensors(FP8_CFG):
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        if not is_fp8:
            w = [rng.uniform(0.5, 1.5) if len(shape) == 1 else rng.gauss(0, 0.05) for _ in range(n)]
            b = bf16_bytes(w)
            bf.append((name, "BF16", shape, b))
            fp.append((name, "BF16", shape, b))
            continue
        O, I = shape
        nb0, nb1 = (O + 127) // 128, (I + 127) // 128
        # block-dependent magnitudes, so a wrong block index shows
        w = [f32(rng.gauss(0, 1) * 2.0 ** ((o // 128) * 3 - (j // 128) * 2 - 4)) for o in range(O) for j in range(I)]
        sc = []
        for bo in range(nb0):
            for bj in range(nb1):
                amax = max(abs(w[o * I + j]) for o in range(bo * 128, min(O, bo * 128 + 128)) for j in range(bj * 128, min(I, bj * 128 + 128)))
                sc.append(f32(amax / 448.0))
        codes = bytearray(e4m3_encode(w[o * I + j] / sc[(o // 128) * nb1 + j // 128]) for o in range(O) for j in range(I))
        if O > 128 and I > 128:  # edge codes around the block corner
            spots = [(127, 127), (127, 128), (128, 127), (128, 128), (0, 0), (O - 1, I - 1), (129, 3), (5, 130)]
            for (o, j), c in zip(spots, EDGES):
                codes[o * I + j] = c
                w[o * I + j] = f32(e4m3_value(c) * sc[(o // 128) * nb1 + j // 128])
        out[name] = (w, codes, sc, shape)
        bf.append((name, "BF16", shape, bf16_bytes(w)))
        fp.append((name, "F8_E4M3", shape, bytes(codes)))
        fp.append((name + "_scale_inv", "F32", (nb0, nb1), array.array("f", sc).tobytes()))
    for sub, tensors, cfg in (("bf16", bf, FP8_CFG), ("fp8", fp, None)):
        d = os.path.join(root, sub)
        os.mkdir(d)
        half = len(tensors) // 2  # two shards, as real releases have many
        write_st(os.path.join(d, "model-00001-of-00002.safetensors"), tensors[:half])
        write_st(os.path.join(d, "model-00002-of-00002.safetensors"), tensors[half:])
        if cfg is None:
            items = list(FP8_CFG.items())
            cfg = dict(items[:5] + [("quantization_config", QCFG)] + items[5:])
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    return out


class FP8(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.ref = make_fp8_pair(cls.tmp)
        cls.src = {k: os.path.join(cls.tmp, k) for k in ("bf16", "fp8")}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_exact_dequantization(self):
        """At 32 bits every FP8 weight becomes f32(e4m3(q) * scale_inv[i/128][j/128])."""
        dst = os.path.join(self.tmp, "fp8-f32")
        rc, err = convert(self.src["fp8"], dst, "--expert-bits", "32", "--dense-bits", "32", "--mtp-bits", "32")
        self.assertEqual(rc, 0, err)
        c = container(dst)
        self.assertFalse([k for k in c if k.endswith("_scale_inv")])
        for name, (w, codes, sc, (O, I)) in self.ref.items():
            e, data, _ = c[name]
            self.assertEqual((e["dtype"], e["shape"]), ("F32", [O, I]), name)
            got = array.array("f", data)
            nb1 = (I + 127) // 128
            for o in range(O):
                for j in range(I):
                    want = f32(e4m3_value(codes[o * I + j]) * sc[(o // 128) * nb1 + j // 128])
                    if got[o * I + j] != want or math.copysign(1, got[o * I + j]) != math.copysign(1, want):
                        self.fail("%s[%d,%d]: %r, want %r (code 0x%02x)" % (name, o, j, got[o * I + j], want, codes[o * I + j]))
        gate, sc = c["model.layers.0.mlp.gate_proj.weight"][1], self.ref["model.layers.0.mlp.gate_proj.weight"][2]
        self.assertEqual(struct.unpack_from("<f", gate, 4 * (128 * 136 + 128))[0], f32(448 * sc[3]))  # 0x7e in block (1, 1)
        self.assertEqual(struct.unpack_from("<I", gate, 4 * (143 * 136 + 135))[0], 0x80000000)  # 0x80 = -0
        cfg = load_json(os.path.join(dst, "config.json"))
        self.assertNotIn("quantization_config", cfg)
        self.assertEqual(cfg, FP8_CFG)

    def test_int8_matches_bf16_twin(self):
        """Both converted at int8. For element (o, j) with original value W:
          |A - B| <= sA/2 + sB/2 + max(2^-4 |W|, 2^-10 s) + 2^-8 |W|  (+ f32 slack)
        where sA, sB are the two int8 row scales (absmax/127; round to
        nearest costs at most half a step), e4m3 keeps 3 mantissa bits
        (half-ulp 2^-4 relative for normals; subnormal steps are 2^-9 s, so
        2^-10 s absolute, s = the block's scale_inv) and bf16 keeps 7
        (half-ulp 2^-8 relative). Tensors that are bf16 in both sources
        convert to identical bytes."""
        dst = {}
        for k in ("bf16", "fp8"):
            dst[k] = os.path.join(self.tmp, k + "-int8")
            rc, err = convert(self.src[k], dst[k], "--expert-bits", "8", "--dense-bits", "8")
            self.assertEqual(rc, 0, err)
            if k == "fp8":
                self.assertIn("FP8 e4m3", err)
        A, B = container(dst["fp8"]), container(dst["bf16"])
        self.assertEqual(sorted(A), sorted(B))
        for name in A:
            base = name[:-3] if name.endswith(".qs") else name
            if base not in self.ref:
                self.assertEqual(A[name][:2], B[name][:2], name)
        self.assertEqual(A["model.layers.2.eh_proj.weight"][0]["dtype"], "U8")  # MTP at --mtp-bits 8
        self.assertEqual(A["model.layers.2.enorm.weight"][0]["dtype"], "F32")
        self.assertEqual(A["model.embed_tokens.weight"][0]["dtype"], "BF16")  # source dtype at dense >= 8
        worst = 0.0
        for name, (w, codes, sc, (O, I)) in self.ref.items():
            a, b = dequant(A, name, O), dequant(B, name, O)
            sa, sb = floats(*A[name + ".qs"][:2]), floats(*B[name + ".qs"][:2])
            nb1 = (I + 127) // 128
            for o in range(O):
                for j in range(I):
                    k, W = o * I + j, abs(w[o * I + j])
                    bound = sa[o] / 2 + sb[o] / 2 + max(W / 16, sc[(o // 128) * nb1 + j // 128] / 1024) + W / 256
                    bound = bound * (1 + 1e-5) + 1e-30
                    d = abs(a[k] - b[k])
                    worst = max(worst, d / bound)
                    if d > bound:
                        self.fail("%s[%d,%d]: fp8 %r vs bf16 %r, bound %r" % (name, o, j, a[k], b[k], bound))
        self.assertGreater(worst, 0.05)  # the bound is not vacuous

    def test_bf16_at_16_bits_is_exact(self):
        """--*-bits 16 copies bf16 sources bit for bit; F32 classes widen them exactly."""
        dst = os.path.join(self.tmp, "bf16-16")
        rc, err = convert(self.src["bf16"], dst, "--expert-bits", "16", "--dense-bits", "16", "--mtp-bits", "16")
        self.assertEqual(rc, 0, err)
        c, src = container(dst), container(self.src["bf16"])
        self.assertEqual(sorted(c), sorted(src))
        for name, (e, data, _) in src.items():
            if c[name][0]["dtype"] == "BF16":
                self.assertEqual(c[name][1], data, name)
            else:
                self.assertEqual(c[name][0]["dtype"], "F32", name)
                self.assertEqual(floats(*c[name][:2]), floats(e, data), name)
        self.assertEqual(c["model.layers.1.mlp.gate.weight"][0]["dtype"], "F32")
        self.assertEqual(c["model.layers.1.mlp.experts.0.up_proj.weight"][0]["dtype"], "BF16")

    def test_missing_or_misshaped_scale(self):
        for case in ("missing", "shape"):
            d = os.path.join(self.tmp, "bad-" + case)
            shutil.copytree(self.src["fp8"], d)
            st = os.path.join(d, "model-00002-of-00002.safetensors")
            h, data = read_st(st)
            name = "model.layers.1.mlp.experts.2.down_proj.weight_scale_inv"
            ts = []
            for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
                if k == "__metadata__":
                    continue
                b = data[v["data_offsets"][0]:v["data_offsets"][1]]
                if k == name:
                    if case == "missing":
                        continue
                    ts.append((k, "F32", [1, 2], b))  # [2, 1] expected
                    continue
                ts.append((k, v["dtype"], v["shape"], b))
            write_st(st, ts)
            rc, err = convert(d, d + "-out", "--expert-bits", "8", "--dense-bits", "8")
            self.assertEqual(rc, 2, err)
            self.assertIn(name, err)
            self.assertFalse(os.path.exists(os.path.join(d + "-out", "out-00000.safetensors")))


# ---- hostile input and bad flags --------------------------------------------

class PackedInt4(unittest.TestCase):
    """Kimi K2.5's routed experts in compressed-tensors' pack-quantized int4
    (sources/kimi-k25-int4, packed by compressed_tensors; its ref.json is
    transformers on the exact dequantized weights): converted at 4 bits with
    the source's group size, the nibbles and scales are the source's and the
    container passes the oracle; at 32 bits it is decoded exactly."""
    SRC = os.path.join(FIXTURES, "sources", "kimi-k25-int4")

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.dst = os.path.join(self.tmp, "dst")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def oracle(self, *flags):
        rc, err = convert(self.SRC, self.dst, "--dense-bits", "32", *flags)
        self.assertEqual(rc, 0, err)
        self.assertIn("the 27 tensors outside language_model. (the vision tower) are not converted", err)
        shutil.copy(os.path.join(self.SRC, "ref.json"), self.dst)
        rc, out, err = engine(self.dst, {"IDOT": "0"})
        self.assertEqual(rc, 0, out + err)
        self.assertRegex(out, r"teacher-forced (\d+)/\1 argmax.*greedy (\d+)/\2, .* -- PASS\n$")

    def test_int4_kept_exactly(self):
        self.oracle("--expert-bits", "4", "--group-size", "32")
        h, data = read_st(os.path.join(self.SRC, "model.safetensors"))
        c = container(self.dst)
        n = 0
        for k, v in h.items():
            if not k.endswith(".weight_packed"):
                continue
            base = k[len("language_model."):-len("_packed")]
            rows, words = v["shape"]
            src = data[v["data_offsets"][0]:v["data_offsets"][1]]
            out = c[base][1]
            self.assertEqual(len(out), rows * words * 4, base)  # I is a multiple of 8 here: the same bytes
            self.assertEqual(out, src, base)
            sv = h[k[:-len("packed")] + "scale"]
            self.assertEqual(floats(*c[base + ".qs"][:2]), floats(sv, data[sv["data_offsets"][0]:sv["data_offsets"][1]]), base)
            n += 1
        self.assertEqual(n, 2 * 12 * 3)

    def test_int4_decoded_to_f32(self):
        self.oracle("--expert-bits", "32")

    def edited(self, fn):
        """A copy of the source with fn applied to its [(name, dtype, shape, bytes)]."""
        src = os.path.join(tempfile.mkdtemp(dir=self.tmp), "src")
        shutil.copytree(self.SRC, src)
        st = os.path.join(src, "model.safetensors")
        h, data = read_st(st)
        ts = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"]
        write_st(st, fn(ts))
        return src

    def refused(self, fn, *needles):
        rc, err = convert(self.edited(fn), os.path.join(tempfile.mkdtemp(dir=self.tmp), "dst"), "--expert-bits", "4", "--group-size", "32",
                          "--dense-bits", "8")
        self.assertEqual(rc, 2, err)
        for n in needles:
            self.assertIn(n, err)

    def test_hostile(self):
        e = "language_model.model.layers.1.mlp.experts.3.up_proj."
        m = e[len("language_model."):]  # messages name the tensors as the language model's
        self.refused(lambda ts: ts + [(e + "weight_zero_point", "I32", [4, 32], b"\0" * 512)], m + "weight_zero_point", "asymmetric")
        self.refused(lambda ts: [t for t in ts if t[0] != e + "weight_scale"], "packed tensor '%sweight_packed' has no '%sweight_scale'" % (m, m))
        self.refused(lambda ts: [t if t[0] != e + "weight_shape" else (t[0], "I32", [2], struct.pack("<2i", 32, 96)) for t in ts],
                     m + "weight_shape' says [32, 96], config.json implies [32, 64]")
        self.refused(lambda ts: [t if t[0] != e + "weight_shape" else (t[0], "I64", [2], struct.pack("<2q", 32, 64)) for t in ts],
                     m + "weight_shape' must be I32 [2]")
        self.refused(lambda ts: [t if t[0] != e + "weight_packed" else (t[0], "I32", [32, 16], t[3] * 2) for t in ts],
                     "expected I32 [32, 8] (int4, eight to a word")
        self.refused(lambda ts: [t if t[0] != e + "weight_scale" else (t[0], "BF16", [32, 3], t[3] + b"\0" * 64) for t in ts],
                     m + "weight_scale' is BF16 [32, 3], expected a float [32, I/group size] with I = 64")
        self.refused(lambda ts: [t if t[0] != e + "weight_scale" else (t[0], "BF16", t[2], b"\x80\x7f" + t[3][2:]) for t in ts],
                     "non-finite")


class Refusals(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.src = os.path.join(self.tmp, "src")
        os.mkdir(self.src)
        copy_fixture("tiny-glm5", self.src)
        self.st = os.path.join(self.src, "model.safetensors")
        self.dst = os.path.join(self.tmp, "dst")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def refused(self, *needles, flags=("--expert-bits", "8", "--dense-bits", "8"), src=None, dst=None):
        rc, err = convert(src or self.src, dst or self.dst, *flags)
        self.assertEqual(rc, 2, err)
        for n in needles:
            self.assertIn(n, err)
        if os.path.isdir(self.dst):
            self.assertFalse([f for f in os.listdir(self.dst) if f.endswith(".safetensors")])
        return err

    def edit(self, fn):
        h, data = read_st(self.st)
        ts = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"]
        write_st(self.st, fn(ts))

    def test_bad_flags(self):
        f = ("--expert-bits", "8", "--dense-bits", "8")
        self.refused("--expert-bits 5", "2, 4, 8, 16, 32", flags=("--expert-bits", "5", "--dense-bits", "8"))
        self.refused("--down-bits x", flags=f + ("--down-bits", "x"))
        self.refused("--group-size 24", flags=f + ("--group-size", "24"))
        self.refused("--group-size 512", flags=f + ("--group-size", "512"))
        self.refused("--threads -1", flags=f + ("--threads", "-1"))
        self.refused("--chunk-mb 0", flags=f + ("--chunk-mb", "0"))
        self.refused("--mtp-bits: value missing (expected one of 2, 4, 8, 16, 32)", flags=f + ("--mtp-bits",))
        self.refused("unknown option '--bits'", flags=f + ("--bits", "4"))
        self.refused("--dense-bits is required", flags=("--expert-bits", "8"))
        self.refused("--gate-bits 16 with --up-bits 4", flags=("--expert-bits", "4", "--dense-bits", "8", "--gate-bits", "16"))
        self.refused("unexpected argument 'extra'", flags=f + ("extra",))
        p = subprocess.run([CONVERT, "--help"], capture_output=True, env=env_base())
        self.assertEqual(p.returncode, 0)
        for flag in ("--expert-bits", "--dense-bits", "--group-size", "--gate-bits", "--up-bits", "--down-bits", "--mtp-bits", "--threads",
                     "--chunk-mb"):
            self.assertIn(flag, p.stdout.decode())

    def test_flag_values_named(self):
        """Every flag given a non-number, a number out of range or a
        hostile string: the message names the flag, the value and what it
        accepts."""
        f = ("--expert-bits", "8", "--dense-bits", "8")
        bits = "expected one of 2, 4, 8, 16, 32"
        accepts = {"--group-size": "expected 0 or a multiple of 16 from 16 to 256",
                   "--threads": "expected an integer from 0 (one per CPU) to 4096",
                   "--chunk-mb": "expected a number of MB from 0.001 to 65536"}
        for flag in ("--expert-bits", "--dense-bits", "--gate-bits", "--up-bits", "--down-bits", "--mtp-bits", "--group-size",
                     "--threads", "--chunk-mb"):
            want = accepts.get(flag, bits)
            base = () if flag in ("--expert-bits", "--dense-bits") else f
            other = ("--dense-bits", "8") if flag == "--expert-bits" else ("--expert-bits", "8") if flag == "--dense-bits" else ()
            for v in ("abc", "99999999999999999999", "-4", "+8", "0x10", "1e3", "nan", " 8"):
                err = self.refused(flags=base + other + (flag, v))
                shown = "' 8'" if v == " 8" else v
                self.assertIn("%s %s: %s" % (flag, shown, want), err)
                self.assertEqual(err.count("\n"), 1, err)
            err = self.refused(flags=base + other + (flag,))
            self.assertIn("%s: value missing (%s)" % (flag, want), err)
            err = self.refused(flags=base + (flag, "--threads", "2") + other)
            self.assertIn("%s: value missing before --threads (%s)" % (flag, want), err)
        err = self.refused(flags=f + ("--threads", "x\x1b[2J" + "9" * 60))
        self.assertIn("--threads 'x?[2J" + "9" * 35 + "...': expected an integer", err)
        self.assertNotIn("\x1b", err)
        self.refused("--expert-bits 64: " + bits, flags=("--expert-bits", "64", "--dense-bits", "8"))
        self.refused("--group-size 272: " + accepts["--group-size"], flags=f + ("--group-size", "272"))
        self.refused("--threads 4097: " + accepts["--threads"], flags=f + ("--threads", "4097"))
        self.refused("--chunk-mb 65537: " + accepts["--chunk-mb"], flags=f + ("--chunk-mb", "65537"))

    def test_repeated_flags(self):
        """A flag given twice is refused by name, whatever the values."""
        f = ("--expert-bits", "8", "--dense-bits", "8")
        self.refused("--expert-bits given twice (4, then 8)", flags=("--expert-bits", "4", "--dense-bits", "8", "--expert-bits", "8"))
        for flag, v in (("--dense-bits", "8"), ("--gate-bits", "8"), ("--up-bits", "8"), ("--down-bits", "8"), ("--mtp-bits", "8"),
                        ("--group-size", "0"), ("--threads", "1"), ("--chunk-mb", "64")):
            self.refused("%s given twice (%s, then %s)" % (flag, v, v), flags=f + (flag, v, flag, v) if flag != "--dense-bits"
                         else ("--expert-bits", "8", flag, v, flag, v))
        self.refused("--mtp-bits given twice (8, then (missing))", flags=f + ("--mtp-bits", "8", "--mtp-bits"))

    def test_config(self):
        cfg_path = os.path.join(self.src, "config.json")
        cfg = load_json(cfg_path)
        cfg["model_type"] = "deepseek_v2"
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        self.refused("config.json", "model_type 'deepseek_v2'")
        cfg["model_type"] = "glm_moe_dsa"
        cfg["q_lora_rank"] = None  # one q_proj: only without an indexer (tiny-moonlight converts)
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        self.refused("config.json", "q_lora_rank is null", "glm_moe_dsa's indexer reads the query latent")
        os.remove(cfg_path)
        self.refused("config.json", "No such file")

    def test_truncated_shard(self):
        with open(self.st, "r+b") as f:
            f.truncate(os.path.getsize(self.st) - 100)
        self.refused("model.safetensors", "past end of file")

    def test_wrong_shape(self):
        def swap(ts):
            return [(k, dt, sh[::-1] if k == "model.layers.0.self_attn.q_a_proj.weight" else sh, b) for k, dt, sh, b in ts]
        self.edit(swap)
        self.refused("'model.layers.0.self_attn.q_a_proj.weight' has shape [64, 48]", "[48, 64]")

    def test_unknown_and_fused_tensors(self):
        self.edit(lambda ts: ts + [("model.layers.1.self_attn.mystery.weight", "F32", [2, 2], b"\0" * 16)])
        self.refused("'model.layers.1.self_attn.mystery.weight'", "unknown layout")
        copy_fixture("tiny-glm5", self.src)  # q_proj belongs to a model without q_lora_rank
        self.edit(lambda ts: ts + [("model.layers.1.self_attn.q_proj.weight", "F32", [2, 64], b"\0" * 512)])
        self.refused("'model.layers.1.self_attn.q_proj.weight'", "unknown layout")
        copy_fixture("tiny-glm5", self.src)
        self.edit(lambda ts: ts + [("model.layers.1.mlp.experts.gate_up_proj", "F32", [8, 72, 64], b"\0" * (8 * 72 * 64 * 4))])
        self.refused("'model.layers.1.mlp.experts.gate_up_proj'", "fused")
        copy_fixture("tiny-glm5", self.src)
        self.edit(lambda ts: [t for t in ts if t[0] != "model.layers.3.mlp.experts.5.down_proj.weight"])
        self.refused("model.layers.3.mlp.experts.5.down_proj.weight")
        copy_fixture("tiny-glm5", self.src)
        self.edit(lambda ts: ts + [("model.layers.9.input_layernorm.weight", "F32", [64], b"\0" * 256)])
        self.refused("'model.layers.9.input_layernorm.weight'", "beyond num_hidden_layers")
        copy_fixture("tiny-glm5", self.src)
        self.edit(lambda ts: [(k, "I32" if k == "model.norm.weight" else dt, sh, b) for k, dt, sh, b in ts])
        self.refused("'model.norm.weight'", "dtype I32")

    def test_group_size_the_engine_cannot_tell(self):
        # down_proj [64, 88] at g64 has ceil(88/64) = 2 scales a row, which
        # the engine's byte-count detection reads as g48 (ceil(88/48) = 2).
        self.refused("'model.layers.0.mlp.down_proj.weight' [64, 88]", "--group-size 64", "group size 48",
                     flags=("--expert-bits", "8", "--dense-bits", "4", "--group-size", "64"))

    def test_same_directory(self):
        self.refused("is SRC", dst=self.src)

    def no_hang(self, *needles, dst=None, flags=("--expert-bits", "8", "--dense-bits", "8")):
        """Runs the converter with a timeout: a FIFO must be refused by name
        (exit 2), never opened and waited on."""
        try:
            rc, err = convert(self.src, dst or self.dst, *flags, timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("colibri-convert hung (a FIFO opened and waited on?): %s" % (needles,))
        self.assertEqual(rc, 2, err)
        for n in needles:
            self.assertIn(n, err)
        return err

    def test_fifo_inputs_refused(self):
        """config.json, a source shard, the index json and the copied
        metadata files as FIFOs: refused by name, before any shard is written."""
        for name in ("config.json", "extra.safetensors", "model.safetensors.index.json", "tokenizer.json",
                     "generation_config.json", "tokenizer_config.json"):
            path = os.path.join(self.src, name)
            keep = path + ".keep"
            if os.path.exists(path):
                os.rename(path, keep)
            os.mkfifo(path)
            self.no_hang(path + ": not a regular file")
            self.assertFalse(os.path.isdir(self.dst) and [f for f in os.listdir(self.dst) if f.endswith(".safetensors")], name)
            os.remove(path)
            if os.path.exists(keep):
                os.rename(keep, path)

    def test_fifo_in_dst_refused(self):
        """A FIFO, symbolic link or directory under any name the converter
        writes or reads in DST (shards and their temporaries, the manifest,
        the lock, the metadata files and their temporaries, the index json)
        is refused by name; nothing is written through a link."""
        flags = ("--expert-bits", "8", "--dense-bits", "8")
        outside = os.path.join(self.tmp, "outside")
        with open(outside, "wb") as f:
            f.write(b"untouched")
        names = ("out-00001.safetensors", "out-00001.safetensors.tmp", "colibri-convert.json", "colibri-convert.json.tmp.7",
                 ".colibri-convert.lock", "config.json", "config.json.tmp.99", "tokenizer.json", "model.safetensors.index.json")
        for name in names:
            for kind in ("fifo", "symlink", "dir"):
                shutil.rmtree(self.dst, ignore_errors=True)
                os.mkdir(self.dst)
                path = os.path.join(self.dst, name)
                {"fifo": os.mkfifo, "dir": os.mkdir, "symlink": lambda p: os.symlink(outside, p)}[kind](path)
                what = {"fifo": "a FIFO", "symlink": "a symbolic link", "dir": "a directory"}[kind]
                self.no_hang(path, what, dst=self.dst, flags=flags)
                self.assertFalse([f for f in os.listdir(self.dst) if f.endswith(".safetensors") and f != name], (name, kind))
                self.assertEqual(slurp(outside), b"untouched")
        # a finished conversion whose shard became a FIFO: refused on the rerun
        shutil.rmtree(self.dst)
        rc, err = convert(self.src, self.dst, *flags)
        self.assertEqual(rc, 0, err)
        shard = os.path.join(self.dst, "out-00002.safetensors")
        os.remove(shard)
        os.mkfifo(shard)
        self.no_hang(shard + " is a FIFO", dst=self.dst, flags=flags)


if __name__ == "__main__":
    unittest.main()
