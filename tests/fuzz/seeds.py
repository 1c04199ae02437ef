#!/usr/bin/env python3
"""seeds.py — builds the fuzz targets' seed corpora from the committed
fixtures (tests/fixtures) into OUTDIR/<target>/ (default build/fuzz/seeds).

Nothing big is copied: safetensors seeds are small shards rebuilt from a
few tensors of the fixture shards, ref.json is cut down to a few elements
per list, the 1.2 MB tokenizer is trimmed to its first ids. Each corpus
stays well under 2 MB. Standard library only; deterministic output.

    python3 tests/fuzz/seeds.py [OUTDIR]
"""
import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
SEP = b"\n@@colibri-fuzz-part@@\n"  # fuzz_common.h FUZZ_SEP
TARGETS = ("json", "safetensors", "tokenizer", "config", "usage", "format", "openai", "kv", "grammar", "anthropic", "responses", "route")
MAX_SEED = 256 * 1024
MAX_CORPUS = 2 * 1024 * 1024

out_dir = None
written = {}


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_SEED:
        return
    if written.get(target, 0) + len(data) > MAX_CORPUS:
        return
    written[target] = written.get(target, 0) + len(data)
    with open(os.path.join(out_dir, target, name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(FIX, *parts), "rb") as f:
        return f.read()


def fixture_dirs():
    return sorted(d for d in os.listdir(FIX) if os.path.isfile(os.path.join(FIX, d, "config.json")))


def dumps(obj, indent=None):
    return json.dumps(obj, indent=indent, ensure_ascii=False).encode()


# ---------------------------------------------------------------- safetensors

DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
               "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    return header, raw[8 + hl:]


def st_make(tensors, metadata=None, align=True):
    """tensors: list of (name, dtype, shape, bytes) -> a safetensors file."""
    header, off, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    if align:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_tensors(path, limit_bytes=6000, count=6):
    """A few small tensors of a fixture shard, with .qs companions kept together."""
    header, data = st_read(path)
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    by_name = dict(items)
    items.sort(key=lambda kv: (kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0], kv[0]))
    chosen, seen = [], set()
    for name, v in items:
        if len(chosen) >= count:
            break
        group = [name]
        if name.endswith(".qs") and name[:-3] in by_name:
            group.insert(0, name[:-3])
        elif name + ".qs" in by_name:
            group.append(name + ".qs")
        size = sum(by_name[g]["data_offsets"][1] - by_name[g]["data_offsets"][0] for g in group)
        if size > limit_bytes or any(g in seen for g in group):
            continue
        for g in group:
            b, e = by_name[g]["data_offsets"]
            chosen.append((g, by_name[g]["dtype"], by_name[g]["shape"], data[b:e]))
            seen.add(g)
    return chosen, header.get("__metadata__")


def seeds_safetensors():
    n = 0
    for d in fixture_dirs():
        shards = sorted(f for f in os.listdir(os.path.join(FIX, d)) if f.endswith(".safetensors"))
        for s in shards[:2]:
            ts, meta = st_tensors(os.path.join(FIX, d, s))
            if not ts:
                continue
            one = st_make(ts, meta)
            put("safetensors", "%s-%s-small" % (d, s[:-12]), one)
            put("json", "%s-%s-header.json" % (d, s[:-12]), one[8:8 + struct.unpack("<Q", one[:8])[0]].rstrip(b" "))
            # the same tensors in two shards with an index
            half = max(1, len(ts) // 2)
            a, b = st_make(ts[:half], meta), st_make(ts[half:], None)
            names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
            wm = {t[0]: names[0] for t in ts[:half]}
            wm.update({t[0]: names[1] for t in ts[half:]})
            index = dumps({"metadata": {"total_size": sum(len(t[3]) for t in ts)}, "weight_map": wm}, indent=2)
            if ts[half:]:
                put("safetensors", "%s-%s-two-shards" % (d, s[:-12]), a + SEP + b + SEP + index)
            else:
                put("safetensors", "%s-%s-indexed" % (d, s[:-12]), a + SEP + index)
            put("json", "%s-%s-index.json" % (d, s[:-12]), index)
            n += 1
    # one real shard as written by colibri-convert (46 KB)
    real = os.path.join(FIX, "tiny-q4g32", "out-00001.safetensors")
    if os.path.exists(real):
        put("safetensors", "tiny-q4g32-out-00001-whole", open(real, "rb").read())

    # every dtype, special float values, odd shapes
    f16 = struct.pack("<6H", 0x3e00, 0x0001, 0x03ff, 0x7c00, 0xfc00, 0x7e01)
    bf16 = struct.pack("<4H", 0x3fc0, 0x0001, 0x7f80, 0xffc1)
    f32 = struct.pack("<4f", 1.5, -0.0, float("inf"), 1e-45) + struct.pack("<I", 0x7fc00001)
    ts = [("a.f16", "F16", [2, 3], f16), ("b.bf16", "BF16", [4], bf16), ("c.f32", "F32", [5], f32),
          ("d.scalar", "F32", [], struct.pack("<f", 2.0)), ("e.empty", "F16", [0], b""), ("f.zero2", "BF16", [2, 0, 3], b""),
          ("g.rank8", "U8", [1] * 8, b"\x07")]
    for dt, size in sorted(DTYPE_BYTES.items()):
        ts.append(("h." + dt.lower(), dt, [2], bytes(range(1, 2 * size + 1))))
    put("safetensors", "synthetic-all-dtypes", st_make(ts, {"format": "pt"}))
    put("safetensors", "synthetic-empty-header", st_make([]))
    put("safetensors", "synthetic-unaligned", st_make(ts[:3], None, align=False))
    put("safetensors", "synthetic-unicode-names", st_make([("\u00e9\u4e2d.w", "F32", [1], struct.pack("<f", 3.0)),
                                                        ("x" * 200, "U8", [3], b"abc")]))
    put("safetensors", "synthetic-huge-dim-no-elements", st_make([("big", "F32", [(1 << 63) - 1, 0], b""),
                                                               ("x", "F16", [1], b"\x00\x3c")]))
    # refused shapes of files, for the error paths
    good = st_make(ts[:2])
    put("safetensors", "bad-header-length", struct.pack("<Q", 100000001) + good[8:])
    put("safetensors", "bad-header-past-end", struct.pack("<Q", len(good)) + good[8:])
    put("safetensors", "bad-trailing-bytes", good + b"\0\0\0\0")
    hdr = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    put("safetensors", "bad-gap", struct.pack("<Q", len(hdr)) + hdr + b"xy")
    hdr = b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}'
    put("safetensors", "bad-overlap", struct.pack("<Q", len(hdr)) + hdr + b"xyz")
    put("safetensors", "bad-index", good + SEP + b'{"weight_map":{"a.f16":"../model-00001-of-00001.safetensors"}}')
    put("safetensors", "short-file", b"\x02\0\0\0")
    return n


# ---------------------------------------------------------------- json

def trim(obj, n=6):
    if isinstance(obj, list):
        return [trim(x, n) for x in obj[:n]]
    if isinstance(obj, dict):
        return {k: trim(v, n) for k, v in obj.items()}
    return obj


def seeds_json():
    for d in fixture_dirs():
        for f in ("config.json", "generation_config.json"):
            p = os.path.join(FIX, d, f)
            if os.path.exists(p):
                put("json", "%s-%s" % (d, f), read(d, f))
    put("json", "tokenizer_config.json", read("tiny-glm5", "tokenizer_config.json"))
    put("json", "tiny-glm5-tokenizer.json", read("tiny-glm5", "tokenizer.json"))
    put("json", "flags-tokenizer.json", read("tokenizer", "flags.json"))
    for d in ("tiny-glm5", "tiny-q4g32"):
        ref = json.loads(read(d, "ref.json"))
        put("json", "%s-ref-trimmed.json" % d, dumps(trim(ref), indent=1))
    edge = {
        "empty-object": "{}", "empty-array": "[]", "scalar-num": "-0", "scalar-str": '"\\u00e9\\ud83d\\ude00\\u0000"',
        "numbers": "[0,-0,1,-1,1.5,-1.5e-3,1E+2,9223372036854775807,9223372036854775808,-9223372036854775808,"
                   "-9223372036854775809,18446744073709551615,18446744073709551616,1e308,4.9e-324,123456789012345678901234567890]",
        "escapes": '["\\"\\\\\\/\\b\\f\\n\\r\\t","\\u0001\\u001f\\u007f\\u0080\\u07ff\\u0800\\uffff","\\ud800\\udc00","\\udbff\\udfff"]',
        "utf8": '["\u00e9", "\u4e2d\u6587", "\U0001f600", "\u2028\u2029"]',
        "nested-63": "[" * 63 + "]" * 63,
        "nested-64": "[" * 64 + "]" * 64,
        "nested-obj": '{"a":' * 40 + "1" + "}" * 40,
        "keys": '{"a":1,"b":{"a":2,"c":[1,{"d":null}]},"":true,"\\u0000":false,"aa":"x"}',
        "whitespace": ' \t\r\n{ "a" : [ 1 , 2 ] } \n',
        "bad-dup": '{"a":1,"a":2}',
        "bad-trailing": "{} x",
        "bad-leading-zero": "[01]",
        "bad-surrogate": '"\\ud800x"',
        "bad-control": '"a\x01b"',
        "bad-utf8": b'"\xc3\x28"',
        "bad-overlong": b'"\xc0\xaf"',
        "bad-inf": "[1e400]",
        "bad-nested-65": "[" * 65 + "]" * 65,
    }
    for k, v in edge.items():
        put("json", "edge-" + k, v)
    big_obj = "{" + ",".join('"k%d":%d' % (i, i) for i in range(300)) + "}"
    put("json", "edge-large-object", big_obj)


# ---------------------------------------------------------------- tokenizer

def trim_tokenizer(tk, keep):
    """The tokenizer restricted to its first `keep` ids (plus the 256 byte
    tokens), renumbered, with the merges that stay inside the kept vocab."""
    vocab = tk["model"]["vocab"]
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    byte_chars = set()
    for b in list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256)):
        byte_chars.add(chr(b))
    n = 0
    for b in range(256):
        if chr(b) not in byte_chars:
            byte_chars.add(chr(256 + n))
            n += 1
    kept = [k for k, i in by_id if i < keep or k in byte_chars]
    new_vocab = {k: i for i, k in enumerate(kept)}
    merges = []
    for m in tk["model"]["merges"]:
        a, b = (m.split(" ") if isinstance(m, str) else m)
        if a in new_vocab and b in new_vocab and a + b in new_vocab:
            merges.append(m)
    out = dict(tk)
    out["model"] = dict(tk["model"], vocab=new_vocab, merges=merges)
    added, nxt = [], len(new_vocab)
    for t in tk.get("added_tokens") or []:
        t = dict(t)
        if t["content"] in new_vocab:
            t["id"] = new_vocab[t["content"]]
        else:
            t["id"] = nxt
            nxt += 1
        added.append(t)
    out["added_tokens"] = added
    return out


def texts():
    out = []
    with open(os.path.join(FIX, "tokenizer", "corpus.jsonl"), "rb") as f:
        lines = [json.loads(x) for x in f.read().splitlines() if x.strip()]
    step = max(1, len(lines) // 12)
    for i in range(0, len(lines), step):
        try:
            b = bytes.fromhex(lines[i])
        except (ValueError, TypeError):
            continue
        if 0 < len(b) <= 300:
            out.append(b)
        if len(out) >= 12:
            break
    out += [b"Hello world! It's 2024, isn't it?\n\n  spaces\t\ttabs",
            "[gMASK]<sop><|user|>\u4f60\u597d<|assistant|><think>".encode(),
            b"\xff\xfe\xc3 broken \xed\xa0\x80 utf8"]
    return out


def seeds_tokenizer():
    tx = texts()
    for d, name in (("tiny-glm5", "tiny-glm5"), ("tiny-glm52", "tiny-glm52"), ("tokenizer", "flags")):
        raw = read(d, "tokenizer.json" if d != "tokenizer" else "flags.json")
        put("tokenizer", name, raw)
        for i, t in enumerate(tx[:6]):
            put("tokenizer", "%s-text%d" % (name, i), raw + SEP + t)
    tk = json.loads(read("tiny-glm5", "tokenizer.json"))
    # legacy "a b" merges, ignore_merges on, lstrip/rstrip added tokens
    m = tk["model"]["merges"]
    if all(isinstance(x, list) and " " not in x[0] + x[1] for x in m):
        v = json.loads(json.dumps(tk))
        v["model"]["merges"] = ["#version: 0.2"] + [a + " " + b for a, b in m]
        put("tokenizer", "tiny-glm5-legacy-merges", dumps(v) + SEP + tx[-2])
    v = json.loads(json.dumps(tk))
    v["model"]["ignore_merges"] = not v["model"].get("ignore_merges", False)
    put("tokenizer", "tiny-glm5-ignore-merges", dumps(v) + SEP + tx[0])
    v = json.loads(json.dumps(tk))
    for i, t in enumerate(v["added_tokens"]):
        t["lstrip"], t["rstrip"], t["normalized"] = bool(i % 2), bool(i % 3 == 0), bool(i % 4 == 1)
    put("tokenizer", "tiny-glm5-strip", dumps(v) + SEP + b"  <|user|>  hi  <|assistant|>\n<think>  x")
    big = json.loads(read("tokenizer", "tokenizer.json"))
    small = trim_tokenizer(big, 1200)
    put("tokenizer", "glm5-trimmed", dumps(small))
    for i, t in enumerate(tx[6:10]):
        put("tokenizer", "glm5-trimmed-text%d" % i, dumps(small) + SEP + t)
    # Kimi K2's tiktoken.model + tokenizer_config.json, the model cut to its first 600 ranks
    kimi = os.path.join(FIX, "tokenizer-kimi")
    with open(os.path.join(kimi, "tiktoken.model"), "rb") as f:
        model = b"".join(f.readlines()[:600])
    with open(os.path.join(kimi, "tokenizer_config.json"), "rb") as f:
        cfg = json.loads(f.read())
    cfg["added_tokens_decoder"] = {str(600 + int(k) - 3960): v for k, v in cfg["added_tokens_decoder"].items()}
    put("tokenizer", "kimi-trimmed", model + SEP + dumps(cfg))
    for i, t in enumerate(tx[10:14]):
        put("tokenizer", "kimi-trimmed-text%d" % i, model + SEP + dumps(cfg) + SEP + t)
    put("tokenizer", "kimi-specials", model + SEP + dumps(cfg) + SEP +
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>HELLOworld 中文〇 한A<|im_end|>".encode())
    # DeepSeek-V3's pipeline (three Splits, an empty normalizer Sequence)
    ds = dumps(trim_tokenizer(json.loads(read("tokenizer", "deepseek.json")), 600))
    mixed = "Price 12345\u5186 \u30ab\u30bf\u30a0\u30fb www.x.com e\u0301 $+100 \U0001f642\n\n  end  ".encode("utf-8")
    put("tokenizer", "deepseek", ds + SEP + mixed)
    for i, t in enumerate(tx[:3]):
        put("tokenizer", "deepseek-text%d" % i, ds + SEP + t)


# ---------------------------------------------------------------- config

def seeds_config():
    for d in fixture_dirs():
        cfg = read(d, "config.json")
        put("config", d, cfg)
        g = os.path.join(FIX, d, "generation_config.json")
        if os.path.exists(g):
            put("config", d + "-gen", cfg + SEP + read(d, "generation_config.json"))
    base = json.loads(read("tiny-glm5", "config.json"))
    gen = read("tiny-glm5", "generation_config.json")

    def variant(name, edit, with_gen=True):
        c = json.loads(json.dumps(base))
        edit(c)
        put("config", "variant-" + name, dumps(c, indent=1) + (SEP + gen if with_gen else b""))

    def pattern(c):
        del c["indexer_types"]
        c["index_topk_pattern"] = "FSFS"

    def freq(c):
        del c["indexer_types"], c["mlp_layer_types"]
        c.update(index_topk_freq=2, index_skip_topk_offset=1, first_k_dense_replace=2)

    def root_theta(c):
        del c["rope_parameters"]
        c["rope_theta"] = 10000.0

    def huge(c):
        for k in ("indexer_types", "mlp_layer_types", "layer_types", "eos_token_id", "pad_token_id"):
            c.pop(k, None)
        c.update(vocab_size=1 << 24, hidden_size=1 << 20, num_hidden_layers=1024, num_attention_heads=1024,
                 num_key_value_heads=1024, q_lora_rank=1 << 20, kv_lora_rank=1 << 20, qk_nope_head_dim=65536,
                 qk_rope_head_dim=65536, head_dim=65536, qk_head_dim=131072, v_head_dim=65536, intermediate_size=1 << 20,
                 moe_intermediate_size=1 << 20, n_routed_experts=65536, num_experts_per_tok=1024, n_shared_experts=64,
                 n_group=1, topk_group=1, index_topk=1 << 24, index_n_heads=1024, index_head_dim=65536,
                 max_position_embeddings=1 << 30, first_k_dense_replace=0, num_nextn_predict_layers=16)

    def glm5(c):  # GLM-5's published dimensions
        for k in ("indexer_types", "mlp_layer_types", "layer_types"):
            c.pop(k, None)
        c.update(vocab_size=154880, hidden_size=6144, num_hidden_layers=78, num_attention_heads=64, num_key_value_heads=64,
                 q_lora_rank=2048, kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, head_dim=64, qk_head_dim=256,
                 v_head_dim=256, intermediate_size=12288, moe_intermediate_size=2048, n_routed_experts=256,
                 num_experts_per_tok=8, n_group=1, topk_group=1, index_topk=2048, index_n_heads=32, index_head_dim=128,
                 max_position_embeddings=202752, first_k_dense_replace=3, num_nextn_predict_layers=1)

    variant("pattern", pattern)
    variant("freq", freq)
    variant("root-theta", root_theta, with_gen=False)
    variant("huge", huge)
    variant("glm5", glm5)
    variant("nulls", lambda c: c.update(n_shared_experts=None, index_topk=None, rope_scaling=None, eos_token_id=None))
    variant("groups", lambda c: c.update(n_group=4, topk_group=2, num_experts_per_tok=3))
    variant("bad-type", lambda c: c.update(model_type="glm_moe_dsa\u0000x"))
    put("config", "gen-only-fields", dumps(base) + SEP + b'{"do_sample":false,"top_k":0,"min_p":0.05,"temperature":0,'
                                                         b'"top_p":1,"eos_token_id":351}')


# ---------------------------------------------------------------- usage

def fnv1a(s):
    h = 2166136261
    for ch in s:
        h = ((h ^ ch) * 16777619) % (1 << 32)
    return h


def usage(L, E, recs, engine=None, end=True, version=1):
    engine = fnv1a(b"glm_moe_dsa") if engine is None else engine
    t = "# colibri expert usage\n-1 %d %d\n-2 %d %d\n" % (L, E, version, engine)
    for l, e, c in recs:
        t += "%d %d %d\n" % (l, e, c)
    if end:
        t += "-3 %d %d\n" % (len(recs), sum(c for _, _, c in recs))
    return t


def seeds_usage():
    put("usage", "tiny-3x8", usage(3, 8, [(0, 1, 5), (1, 7, 2), (2, 0, 1)]))
    put("usage", "tiny-4x8", usage(4, 8, [(l, e, 1 + l * 8 + e) for l in range(4) for e in range(0, 8, 3)]))
    put("usage", "one-empty", usage(1, 1, []))
    put("usage", "glm5-75x256", usage(75, 256, [(74, 255, 1000000), (0, 0, 7), (37, 128, 12345678901)]))
    put("usage", "odd-shape-2x3", usage(2, 3, [(1, 2, 9)]))
    put("usage", "at-cap", usage(1, 2, [(0, 0, 1 << 62), (0, 1, (1 << 62) - 1)]))
    put("usage", "truncated", usage(3, 8, [(0, 1, 5)], end=False))
    put("usage", "other-engine", usage(3, 8, [(0, 1, 5)], engine=12345))
    put("usage", "other-version", usage(3, 8, [(0, 1, 5)], version=2))
    put("usage", "comments", "# colibri expert usage\n# another comment\n" + usage(4, 8, [(3, 3, 3)])[23:])
    put("usage", "dup-record", usage(3, 8, [(0, 1, 5), (0, 1, 5)]))
    put("usage", "no-newline", usage(3, 8, [(0, 1, 5)]).rstrip("\n"))


# ---------------------------------------------------------------- format

def row_bytes(f, I):
    return [4 * I, I, (I + 1) // 2, (I + 3) // 4, (I + 1) // 2][f]


def rec(mode, O, I, wb, sb, floats=b""):
    m = (1 << 64) - 1
    return bytes([mode]) + struct.pack("<QQQQ", O & m, I & m, wb & m, sb & m) + floats


def seeds_format():
    fl = struct.pack("<16f", 0.5, -1.25, 3.0, 0.0, -0.0, 1e-20, -7.5, 100.0, 2.5, -2.5, 0.125, 64.0, -64.0, 1.0, -1.0, 0.75)
    shapes = [(1, 1), (2, 3), (4, 16), (3, 33), (8, 8), (80, 88), (352, 64), (1, 256), (7, 48)]
    for O, I in shapes:
        for f in range(5):
            gss = [16, 32, 48, 64] if f == 4 else [0]
            for gs in gss:
                if f == 4 and gs > I:
                    continue
                wb = O * row_bytes(f, I)
                sb = 0 if f == 0 else 4 * O * ((I + gs - 1) // gs if f == 4 else 1)
                put("format", "ok-f%d-%dx%d-g%d" % (f, O, I, gs), rec(0, O, I, wb, sb, fl * 2))
    put("format", "e8", rec(0, 3, 512, 3 * 2 * 98, 4))
    put("format", "int3", rec(0, 2, 128, 2 * 2 * 24, 8))
    put("format", "fp8-blocks", rec(0, 256, 256, 256 * 256, 4 * 2 * 2))
    put("format", "huge", rec(0, 1 << 40, 1 << 40, (1 << 64) - 1, 1 << 42))
    put("format", "negative", rec(0, -5, 7, 35, 20))
    put("format", "zero", rec(0, 0, 0, 0, 0))
    for i in range(8):
        put("format", "mode1-%d" % i, rec(1, 17 * i + 1, 33 * i + 7, 40 * i, 12 * i, fl))
        put("format", "mode2-%d" % i, rec(2 | (i << 2), i * 37, i * 91, i, i << 8, fl))
        put("format", "mode3-%d" % i, rec(3 | (i << 2), i * 3, i * 5 + 1, i * 7 + 2, i * 11 + 3))


# ---------------------------------------------------------------- openai

def seeds_openai():
    sysu = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    reqs = {
        "chat-min": {"messages": [{"role": "user", "content": "hi"}]},
        "chat-sampling": {"model": "m", "messages": sysu, "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
                          "min_p": 0.05, "seed": 42, "stop": ["\n\n", "END"], "stream": True,
                          "stream_options": {"include_usage": True}, "n": 1, "presence_penalty": 0},
        "chat-tools": {"messages": sysu + [
            {"role": "assistant", "content": None, "reasoning_content": "need data",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": [1, 2]}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C"}, {"role": "tool", "content": "sunny"}],
            "tools": tools, "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": True}},
        "chat-parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "\u00e9"}]}]},
        "chat-history": {"messages": sysu + [{"role": "assistant", "content": "  Hi there \n"}, {"role": "user", "content": "More"}]},
        "chat-refused": {"messages": sysu, "response_format": {"type": "json_object"}, "logprobs": True},
        "chat-tool-required": {"messages": sysu, "parallel_tool_calls": False, "tool_choice": "required", "tools": tools + [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["n"], "properties": {
                "n": {"type": "integer"}, "e": {"type": "string", "enum": ["a", "b"]}, "s": {"type": "string", "maxLength": 4},
                "o": {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "number"}}}}}}}}]},
        "chat-tool-named": {"messages": sysu, "tools": tools, "chat_template_kwargs": {"enable_thinking": True},
                            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    }
    for name, r in reqs.items():
        put("openai", name, b"\x00" + dumps(r))
    for name, r in {"comp-min": {"prompt": "Once upon"}, "comp-list": {"prompt": ["x"], "max_tokens": 3, "stop": "y", "echo": False}}.items():
        put("openai", name, b"\x01" + dumps(r))
    outs = {
        "out-think": "plan</think>The answer is 4.",
        "out-stop": "</think>one two STOP three",
        "out-utf8-stop": "</think>caf\u00e9 \u00e9\u00e9 x",
        "out-tool": "</think>ok<tool_call>f<arg_key>s</arg_key><arg_value>text</arg_value><arg_key>n</arg_key>"
                    "<arg_value>12</arg_value></tool_call>\n<tool_call>f</tool_call>",
        "out-bad-tool": "</think><tool_call>f<arg_key>s</arg_key>",
    }
    for name, t in outs.items():
        put("openai", name, b"\x02" + bytes([3, 1, 7, 2, 5, 1, 1, 9]) + t.encode("utf-8"))


# ---------------------------------------------------------------- anthropic, responses

# generated texts for the fronts' output modes: thinking, a stop string, GLM-5 and DeepSeek tool calls
FRONT_OUTS = {
    "think": "plan</think>The answer is 4.",
    "stop": "</think>one two STOP three",
    "utf8": "caf\u00e9 \U0001F642</think>\u00e9 \u00e9\u00e9 x",
    "tool": "</think>ok<tool_call>f<arg_key>s</arg_key><arg_value>text</arg_value><arg_key>n</arg_key>"
            "<arg_value>12</arg_value></tool_call>\n<tool_call>f</tool_call>",
    "bad-tool": "</think><tool_call>f<arg_key>s</arg_key>",
}
DS_CALL = ("<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>f\n"
           "```json\n{\"s\": \"x\", \"n\": 2}\n```<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>")
FRONT_OUTS["ds-tool"] = "</think>calling" + DS_CALL


def seeds_anthropic():
    tools = [{"name": "get_weather", "description": "Weather", "cache_control": {"type": "ephemeral"},
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]
    turns = [{"role": "user", "content": [{"type": "text", "text": "Weather in "}, {"type": "text", "text": "Paris?"}]},
             {"role": "assistant", "content": [{"type": "thinking", "thinking": "need data", "signature": "sig"},
                                               {"type": "redacted_thinking", "data": "x"}, {"type": "text", "text": "Checking."},
                                               {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": 2}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}],
                                           "is_error": False}, {"type": "text", "text": "and tomorrow?"}]}]
    base = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    bodies = {
        "min": base,
        "sampling": dict(base, system="Be brief.", temperature=0.5, top_p=0.9, top_k=40, stop_sequences=["END", "\n\n"], stream=True,
                         metadata={"user_id": "u"}, service_tier="auto", speed="standard"),
        "agent": {"model": "m", "max_tokens": 256, "system": [{"type": "text", "text": "You code.", "cache_control": {"type": "ephemeral"}}],
                  "tools": tools, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
                  "thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": turns},
        "any": dict(base, tools=tools, tool_choice={"type": "any"}, thinking={"type": "adaptive", "display": "omitted"}),
        "named": dict(base, tools=tools, tool_choice={"type": "tool", "name": "get_weather"}, thinking={"type": "disabled"}),
        "format": dict(base, output_config={"effort": "low", "format": {"type": "json_schema", "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}),
        "system-role": dict(base, messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]),
        "image": dict(base, messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                                                  "data": "AA=="}}]}]),
        "server-tool": dict(base, tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]),
        "prefill": dict(base, messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "Sure, "}]),
    }
    for name, b in bodies.items():
        put("anthropic", "msg-" + name, b"\x00" + dumps(b))
    count = {"model": "m", "system": "S", "tools": tools, "messages": turns, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    put("anthropic", "count", b"\x01" + dumps(count))
    put("anthropic", "msg-agent-deepseek", bytes([3]) + dumps(bodies["agent"]))
    for name, t in FRONT_OUTS.items():
        fmt = 1 if name == "ds-tool" else 0
        put("anthropic", "out-" + name, bytes([2 + 3 * fmt]) + bytes([3, 1, 7, 2, 5, 1, 1, 9]) + t.encode("utf-8"))
    put("anthropic", "out-omitted-error", bytes([2 + 18]) + bytes([3, 1, 7, 2, 5, 1, 1, 9]) + FRONT_OUTS["think"].encode("utf-8"))


def seeds_responses():
    tools = [{"type": "function", "name": "get_weather", "description": "Weather", "strict": True,
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}]
    items = [{"role": "developer", "content": "Use tools."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
             {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "sum"}],
              "content": [{"type": "reasoning_text", "text": "need data"}], "encrypted_content": None},
             {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
             {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
             {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "18C"}]},
             {"role": "user", "content": "Thanks"}]
    bodies = {
        "min": {"input": "hi"},
        "options": {"model": "m", "instructions": "Be brief.", "input": "Hello", "max_output_tokens": 50, "temperature": 0.2, "top_p": 0.8,
                    "stream": True, "store": False, "metadata": {"k": "v"}, "user": "u", "prompt_cache_key": "p", "truncation": "auto",
                    "include": ["reasoning.encrypted_content"], "service_tier": "auto", "safety_identifier": "s", "top_logprobs": 0,
                    "stream_options": {"include_obfuscation": False}},
        "agent": {"model": "m", "instructions": "You are Codex.", "input": items, "tools": tools, "tool_choice": "auto", "parallel_tool_calls": True,
                  "reasoning": {"effort": "medium", "summary": "auto"}, "text": {"format": {"type": "text"}, "verbosity": "low"}},
        "previous": {"previous_response_id": "resp_seed", "instructions": "I2", "tools": tools,
                     "input": [{"type": "function_call_output", "call_id": "call_seed_0", "output": "ok"}]},
        "previous-missing": {"previous_response_id": "resp_gone", "input": "x"},
        "required": {"input": "hi", "tools": tools, "tool_choice": {"type": "function", "name": "get_weather"}, "reasoning": {"effort": "minimal"}},
        "schema": {"input": "hi", "text": {"format": {"type": "json_schema", "name": "out", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}},
        "image": {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]},
        "builtin": {"input": "x", "tools": [{"type": "web_search"}]},
        "reference": {"input": [{"type": "item_reference", "id": "msg_1"}]},
    }
    for name, b in bodies.items():
        put("responses", "req-" + name, b"\x00" + dumps(b))
    put("responses", "req-agent-kimi", bytes([2 * 4]) + dumps(bodies["agent"]))
    for name, t in FRONT_OUTS.items():
        fmt = 1 if name == "ds-tool" else 0
        put("responses", "out-" + name, bytes([1 + 2 * fmt]) + bytes([3, 1, 7, 2, 5, 1, 1, 9]) + t.encode("utf-8"))
    put("responses", "out-error", b"\x01" + bytes([7, 1, 7, 2, 5, 1, 1, 10]) + FRONT_OUTS["tool"].encode("utf-8"))


# ---------------------------------------------------------------- kv

def kv_state(n_tok, n_kv, mtp=None, fp=0x1234567890abcdef, version=1):
    """A .coli_kv image for fuzz_kv's stand-in model (kv_persist.h layout):
    3 layers, kv_lora 4, qk_rope 2, index_dim 2 on layers 0 and 2, dim 4;
    mtp = (mtp_pos, nq) adds an MTP part with its own indexer."""
    L, lora, rope, idim, dim = 3, 4, 2, 2, 4
    flags = 1 if mtp else 0
    mp, nq = mtp or (0, 0)
    h = b"COLIKV\r\n" + struct.pack("<IIQ", version, flags, fp)
    h += struct.pack("<12I", n_tok, n_kv, L, lora, rope, idim, 2, dim, mp, nq, 1 if mtp else 0, 0)
    body = struct.pack("<%di" % n_tok, *[(7 * i + 3) % 64 for i in range(n_tok)])
    val = [0.0]

    def floats(n):
        out = []
        for _ in range(n):
            val[0] += 0.25
            out.append(val[0])
        return struct.pack("<%df" % n, *out)
    for _ in range(L):
        body += floats(n_kv * lora) + floats(n_kv * rope)
    body += floats(n_kv * idim) + floats(n_kv * idim)
    if mtp:
        body += floats(mp * lora) + floats(mp * rope) + floats(mp * idim)
        body += floats(nq * dim) + struct.pack("<%di" % nq, *range(nq)) + floats(dim)
    data = h + body
    hsh = 0xcbf29ce484222325
    for b in data:
        hsh = ((hsh ^ b) * 0x100000001b3) & ((1 << 64) - 1)
    return data + struct.pack("<Q", hsh)


def seeds_kv():
    put("kv", "one", b"\x00" + kv_state(1, 1))
    put("kv", "five-three", b"\x00" + kv_state(5, 3))
    put("kv", "full", b"\x00" + kv_state(15, 15))
    put("kv", "uncached-tail", b"\x00" + kv_state(6, 5))
    put("kv", "mtp", b"\x01" + kv_state(6, 5, mtp=(2, 2)))
    put("kv", "mtp-unused", b"\x00" + kv_state(6, 5, mtp=(4, 0)))
    put("kv", "other-model", b"\x00" + kv_state(3, 3, fp=7))
    put("kv", "other-version", b"\x00" + kv_state(3, 3, version=2))
    put("kv", "too-long", b"\x00" + kv_state(16, 16))
    put("kv", "truncated", b"\x00" + kv_state(5, 3)[:-9])


# ---------------------------------------------------------------- grammar

def seeds_grammar():
    gs = {
        "json": ('root ::= ws value ws\nvalue ::= object | array | string | number | "true" | "false" | "null"\n'
                 'object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"\nmember ::= string ws ":" ws value\n'
                 'array ::=\n  "[" ws (\n    value (ws "," ws value)*\n  )? ws "]"\n'
                 'string ::= "\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""\n'
                 'number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\nws ::= [ \\t\\n\\r]*\n',
                 '{"a": [1, -2.5e3, true, null, "x\\u00e9"], "b": {}}'),
        "arith": ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
                  'factor ::= number | "(" expr ")" | "-" factor\nnumber ::= [0-9]+\n', "1+2*(3-4)/-5"),
        "chess": ('root ::= move (" " move){0,3}\nmove ::= piece? file rank capture? | "O-O" "-O"?\npiece ::= [KQRBN]\n'
                  'file ::= [a-h]\nrank ::= [1-8]\ncapture ::= "x" [a-h] [1-8]\n', "e4 Nf3 O-O-O Bb5xc6"),
        "unicode": ('root ::= ([^\\n"] | "\\u00e9" | "\\U0001F642"){1,8} "."  # any\n', "caf\u00e9 \U0001F642."),
        "any": ('root ::= . . [^a-z]? "x"{2,3}\n', "\u4e2d!Zxx"),
        "left-rec": ('root ::= root "a" | "b"\n', "baa"),
        "bad-escape": ('root ::= "\\q"\n', "q"),
    }
    for name, (g, text) in gs.items():
        put("grammar", name, g.encode("utf-8") + SEP + text.encode("utf-8"))
    schemas = {
        "schema-object": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}, "age": {"type": "integer"},
                                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
                          "required": ["name"]},
        "schema-anyof": {"anyOf": [{"type": "number"}, {"type": "null"}, {"const": "x"}]},
        "schema-types": {"type": ["string", "boolean"]},
        # issue #34: recursion through $ref, a $ref cycle that writes nothing, other keys beside named ones, integer ranges
        "schema-recursive": {"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer", "minimum": -5, "maximum": 120},
                                                                               "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}},
                                             "required": ["v"], "additionalProperties": {"type": "string", "maxLength": 2}}},
                             "$ref": "#/$defs/n"},
        "schema-ref-cycle": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"},
        "schema-tuple": {"prefixItems": [{"const": 1}, {"type": "string"}], "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3},
        "schema-oneof": {"oneOf": [{"const": "a"}, {"enum": ["b", 2]}, {"type": "object"}]},
        # patterns, formats, an enum written as a trie
        "schema-pattern": {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]{2}(?:-[0-9]+)*\\.?$"},
                                                            "q": {"type": "string", "pattern": "a\"|[^\\x00-\\x1f]{2}\\\\"}}},
        "schema-format": {"type": "array", "items": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "string", "format": "ipv6"},
                                                               {"type": "string", "format": "email"}, {"type": "string", "format": "uri"}]}},
        "schema-enum-trie": {"enum": ["a", "ab", "abc", "b\u00e9", "\u4e2d\u6587", "", 7, None, "a b"]},
    }
    texts = {"schema-object": '{"name": "bo", "tags": ["a"]}', "schema-anyof": "-1.5e3", "schema-types": "true",
             "schema-recursive": '{"v":7,"next":{"v":-5},"ab":"x"}', "schema-ref-cycle": "null", "schema-tuple": '[1,"x",true]',
             "schema-oneof": '"b"', "schema-pattern": '{"id":"ab-12.","q":"xa\\""}',
             "schema-format": '["1998-12-31T15:59:60.123-08:00","::ffff:1.2.3.4","\\"a b\\"@[IPv6:::1]","http://x/?y#z"]',
             "schema-enum-trie": '"abc"'}
    for name, sc in schemas.items():
        put("grammar", name, dumps(sc) + SEP + texts[name].encode())


# ---------------------------------------------------------------- route


def trace(layers, topk, pred_k, experts, rows):
    """A routing trace (route_trace.h) of rows[r][j] = chosen + predicted ids."""
    import struct
    ids = [x for r in rows for j in r for x in j]
    return b"COLIRTR1" + struct.pack("<IIIIQ", layers, topk, pred_k, experts, len(rows)) + struct.pack("<%dH" % len(ids), *ids)


def seeds_route():
    put("route", "one", trace(1, 1, 0, 1, [[[0]]]))
    put("route", "glm5-3x8of64", trace(3, 8, 0, 64, [[[(r * 5 + j * 11 + k * 7) % 64 for k in range(8)] for j in range(3)] for r in range(6)]))
    put("route", "pred-none", trace(2, 2, 3, 8, [[[j, 7 - j, 1, 0xFFFF, 6] for j in range(2)] for r in range(4)]))
    put("route", "dup", trace(1, 2, 0, 4, [[[1, 1]]]))
    put("route", "short", trace(1, 2, 0, 4, [[[1, 2]]])[:-1])
    put("route", "big-id", trace(1, 2, 1, 4, [[[1, 4, 0]]]))


def main():
    global out_dir
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "fuzz", "seeds")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    for t in TARGETS:
        os.makedirs(os.path.join(out_dir, t))
    seeds_json()
    seeds_safetensors()
    seeds_tokenizer()
    seeds_config()
    seeds_usage()
    seeds_format()
    seeds_openai()
    seeds_kv()
    seeds_grammar()
    seeds_anthropic()
    seeds_responses()
    seeds_route()
    for t in TARGETS:
        files = os.listdir(os.path.join(out_dir, t))
        print("seeds: %-12s %3d files, %7d bytes" % (t, len(files), written.get(t, 0)))


if __name__ == "__main__":
    main()
