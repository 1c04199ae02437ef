#!/usr/bin/env python3
"""Export a colibri container (e.g. one made by colibri-synth) to GGUF for llama.cpp.

  tools/export_gguf.py MODEL_DIR OUT.gguf [--experts auto|q4_0|q8_0] [--dense auto|q8_0|f32]
                       [--arch auto|glm-dsa|deepseek2]

Used by `make bench` for the llama.cpp side-by-side: the same model, shapes and
random weights in both engines. Needs numpy and the `gguf` package (a
virtualenv outside git, see tools/install_llamacpp.sh); colibri itself never
imports it.

Weights are carried over, not re-drawn:
  * int4 (per-row, or grouped with a group size that is a multiple of 32) ->
    Q4_0 by repacking: colibri's nibble q+8 is Q4_0's nibble, the group scale
    becomes each 32-block's fp16 d. Exact but for the fp16 rounding of scales.
  * int8 per row -> Q8_0 the same way (every block of a row gets the row scale).
  * anything else asked for (f32 -> Q8_0, int8 -> Q4_0, int4 g16 -> Q4_0,
    kv_b_proj, which llama.cpp wants split into k_b/v_b with k_b transposed)
    is dequantized to f32 and quantized with gguf's own quantizer.
  * f32 tensors that stay f32 in colibri (embeddings, norms, router, indexer
    head weights) stay F32.
--experts auto: Q4_0 for int4 experts, Q8_0 for int8 ones. --dense auto: Q8_0
for int8/int4 dense matrices, F32 for f32 ones.
--arch auto: glm-dsa (llama.cpp's GLM-5 architecture, with the DSA indexer)
when the installed gguf knows it, else deepseek2 (MLA + MoE, no indexer: the
same attention while the context is at most index_topk tokens).

The output is written to OUT.gguf.tmp and renamed when complete. Exit codes:
0 ok, 2 bad input (message names the file and tensor), 3 gguf/numpy missing.
"""
import argparse
import json
import os
import re
import struct
import sys
import time

try:
    import numpy as np
    import gguf
except ImportError as e:  # pragma: no cover - depends on the venv
    sys.stderr.write("export_gguf: %s (install with tools/install_llamacpp.sh, run with its venv's python)\n" % e)
    sys.exit(3)


class BadInput(Exception):
    pass


# ------------------------------------------------------------ safetensors

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "I8": np.int8, "BF16": np.uint16}


class Shards:
    """Every tensor of MODEL_DIR/*.safetensors, as read-only memory maps."""

    def __init__(self, d):
        self.t = {}
        files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        if not files:
            raise BadInput("%s: no .safetensors files" % d)
        for f in files:
            p = os.path.join(d, f)
            size = os.path.getsize(p)
            with open(p, "rb") as fh:
                raw = fh.read(8)
                if len(raw) != 8:
                    raise BadInput("%s: truncated header" % p)
                n = struct.unpack("<Q", raw)[0]
                if n > min(size - 8, 1 << 27):
                    raise BadInput("%s: header length %d is impossible" % (p, n))
                hdr = json.loads(fh.read(n))
            base = 8 + n
            mm = np.memmap(p, dtype=np.uint8, mode="r")
            for name, v in hdr.items():
                if name == "__metadata__":
                    continue
                dt = ST_DTYPES.get(v.get("dtype"))
                b, e = v["data_offsets"]
                if dt is None or not (0 <= b <= e <= size - base):
                    raise BadInput("%s: tensor %s: bad dtype or offsets" % (p, name))
                count = 1
                for s in v["shape"]:
                    count *= s
                if count * np.dtype(dt).itemsize != e - b:
                    raise BadInput("%s: tensor %s: shape %s does not match %d bytes" % (p, name, v["shape"], e - b))
                arr = mm[base + b: base + e].view(dt).reshape(v["shape"])
                if v["dtype"] == "BF16":
                    arr = (arr.astype(np.uint32) << 16).view(np.float32)
                self.t[name] = arr

    def get(self, name):
        if name not in self.t:
            raise BadInput("tensor %s is missing" % name)
        return self.t[name]

    def has(self, name):
        return name in self.t


class Mat:
    """An [O, I] weight in one of colibri's formats: f32, int8, int4, int4 grouped."""

    def __init__(self, sh, name, O, I):
        self.name, self.O, self.I = name, O, I
        w = sh.get(name)
        if w.dtype == np.float32 or w.dtype == np.float16:
            if w.size != O * I:
                raise BadInput("%s: %d values, expected %dx%d" % (name, w.size, O, I))
            self.fmt, self.w, self.s, self.gs = "f32", np.asarray(w, dtype=np.float32).reshape(O, I), None, 0
            return
        s = sh.get(name + ".qs").reshape(-1)
        nb, ns = w.size, s.size
        i4row = (I + 1) // 2
        if nb == O * I and ns == O:
            self.fmt, self.gs = "int8", 0
            self.w = w.reshape(-1).view(np.int8).reshape(O, I)
        elif nb == O * i4row and ns == O:
            self.fmt, self.gs = "int4", 0
            self.w = w.reshape(O, i4row)
        elif nb == O * i4row and ns % O == 0 and ns > O:
            ng = ns // O
            gs = -(-I // ng)
            if gs % 16 or -(-I // gs) != ng:
                raise BadInput("%s: %d scales do not fit a group size for %dx%d" % (name, ns, O, I))
            self.fmt, self.gs = "int4", gs
            self.w = w.reshape(O, i4row)
        else:
            raise BadInput("%s: %d bytes and %d scales fit no format for %dx%d" % (name, nb, ns, O, I))
        self.s = s.reshape(O, -1)

    def nibbles(self):
        lo, hi = self.w & 15, self.w >> 4
        return np.stack([lo, hi], axis=-1).reshape(self.O, -1)[:, :self.I]

    def dequant(self):
        if self.fmt == "f32":
            return self.w
        if self.fmt == "int8":
            return self.w.astype(np.float32) * self.s
        q = self.nibbles().astype(np.float32) - 8.0
        if self.gs:
            return (q.reshape(self.O, -1, self.gs) * self.s[:, :, None]).reshape(self.O, self.I) if self.I % self.gs == 0 \
                else q * np.repeat(self.s, self.gs, axis=1)[:, :self.I]
        return q * self.s

    def to(self, qtype):
        """Bytes [O, row bytes] of this matrix in GGML type qtype (F32, Q8_0, Q4_0)."""
        Q = gguf.GGMLQuantizationType
        if qtype == Q.F32:
            return self.dequant().astype(np.float32)
        if qtype == Q.F16:
            return self.dequant().astype(np.float16)
        O, I = self.O, self.I
        if I % 32:
            raise BadInput("%s: %d inputs are not a multiple of 32 (GGML blocks)" % (self.name, I))
        nb = I // 32
        if qtype == Q.Q4_0 and self.fmt == "int4" and (self.gs == 0 or self.gs % 32 == 0):
            e = self.nibbles().reshape(O, nb, 32)
            qs = (e[:, :, :16] | (e[:, :, 16:] << 4)).astype(np.uint8)
            d = np.repeat(self.s, self.gs // 32, axis=1) if self.gs else np.repeat(self.s, nb, axis=1)
            d = d.astype(np.float16).view(np.uint8).reshape(O, nb, 2)
            return np.concatenate([d, qs], axis=2).reshape(O, nb * 18)
        if qtype == Q.Q8_0 and self.fmt == "int8":
            d = np.repeat(self.s, nb, axis=1).astype(np.float16).view(np.uint8).reshape(O, nb, 2)
            return np.concatenate([d, self.w.view(np.uint8).reshape(O, nb, 32)], axis=2).reshape(O, nb * 34)
        return gguf.quants.quantize(self.dequant(), qtype)


# ------------------------------------------------------------ export

def encode(x, qt):
    """f32 values x (any shape, last axis = rows) as GGML type qt bytes/values."""
    Q = gguf.GGMLQuantizationType
    x = np.ascontiguousarray(x, dtype=np.float32)
    if qt == Q.F32:
        return x
    if qt == Q.F16:
        return x.astype(np.float16)
    return gguf.quants.quantize(x, qt)


def qtype_of(name):
    Q = gguf.GGMLQuantizationType
    return {"q4_0": Q.Q4_0, "q8_0": Q.Q8_0, "f16": Q.F16, "f32": Q.F32}[name]


def load_tokenizer(d, vocab):
    """(tokens, types, merges, added ids) from tokenizer.json, padded to the model's vocabulary."""
    p = os.path.join(d, "tokenizer.json")
    with open(p, encoding="utf-8") as f:
        t = json.load(f)
    m = t.get("model") or {}
    if m.get("type") != "BPE" or not isinstance(m.get("vocab"), dict):
        raise BadInput("%s: not a BPE tokenizer" % p)
    toks = [None] * vocab
    for s, i in m["vocab"].items():
        if 0 <= i < vocab:
            toks[i] = s
    special = set()
    for a in t.get("added_tokens", []):
        if 0 <= a["id"] < vocab:
            toks[a["id"]] = a["content"]
            if a.get("special"):
                special.add(a["id"])
    types = []
    for i in range(vocab):
        if toks[i] is None:
            toks[i] = "[PAD%d]" % i
            types.append(gguf.TokenType.UNUSED)
        else:
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
    merges = [" ".join(x) if isinstance(x, list) else x for x in m.get("merges", [])]
    return toks, types, merges


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--experts", default="auto", choices=["auto", "q4_0", "q8_0"])
    ap.add_argument("--dense", default="auto", choices=["auto", "q8_0", "f32"])
    ap.add_argument("--arch", default="auto", choices=["auto", "glm-dsa", "deepseek2"])
    ap.add_argument("--kvb", default="auto", choices=["auto", "q8_0", "f16", "f32"],
                    help="type of attn_k_b/attn_v_b (kv_b_proj split); auto = f16")
    ap.add_argument("--override", action="append", default=[], metavar="REGEX=TYPE",
                    help="GGUF tensors whose name matches REGEX get TYPE (f32, f16, q8_0, q4_0); repeatable")
    a = ap.parse_args()
    try:
        export(a)
    except BadInput as e:
        sys.stderr.write("export_gguf: %s\n" % e)
        sys.exit(2)


def export(a):
    t0 = time.time()
    with open(os.path.join(a.model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    if c.get("model_type") != "glm_moe_dsa":
        raise BadInput("%s/config.json: model_type %r, expected glm_moe_dsa" % (a.model, c.get("model_type")))
    sh = Shards(a.model)
    Q = gguf.GGMLQuantizationType
    has_dsa = hasattr(gguf.MODEL_ARCH, "GLM_DSA")
    arch = a.arch if a.arch != "auto" else ("glm-dsa" if has_dsa else "deepseek2")
    if arch == "glm-dsa" and not has_dsa:
        raise BadInput("the installed gguf %s has no glm-dsa architecture" % getattr(gguf, "__version__", "?"))
    dsa = arch == "glm-dsa"
    D, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    H, E, K = c["num_attention_heads"], c["n_routed_experts"], c["num_experts_per_tok"]
    qr, kvr = c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, vh = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    fi, mi, nd = c["intermediate_size"], c["moe_intermediate_size"], c.get("first_k_dense_replace", 0)
    nsh = c.get("n_shared_experts", 1)
    ih, idim = c.get("index_n_heads", 0), c.get("index_head_dim", 0)
    theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 10000.0))
    eos = c.get("eos_token_id", 0)
    eos = eos[0] if isinstance(eos, list) else eos

    def tn(kind, l=None, suffix="weight"):
        base = gguf.TENSOR_NAMES[getattr(gguf.MODEL_TENSOR, kind)]
        return (base.format(bid=l) if l is not None else base) + "." + suffix

    def dense_q(m):
        if a.dense == "f32" or m.fmt == "f32":
            return Q.F32
        return Q.Q8_0

    # Plan: (gguf name, numpy shape of the logical tensor, GGML type, producer). A
    # producer yields, in order, Mats (converted with Mat.to) or f32 arrays
    # (encoded with encode()), which together make the tensor.
    plan = []

    def add_mat(gname, hf, O, I, qt=None):
        m = Mat(sh, hf, O, I)
        qt = qt if qt is not None else dense_q(m)
        plan.append((gname, (O, I), qt, lambda m=m: [m]))

    def add_vec(gname, hf, n):
        v = sh.get(hf).reshape(-1)
        if v.size != n:
            raise BadInput("%s: %d values, expected %d" % (hf, v.size, n))
        plan.append((gname, (n,), Q.F32, lambda v=v: [np.asarray(v, dtype=np.float32)]))

    emb = sh.get("model.embed_tokens.weight")
    plan.append((tn("TOKEN_EMBD"), (V, D), Q.F32, lambda: [emb.reshape(V, D)]))
    add_vec(tn("OUTPUT_NORM"), "model.norm.weight", D)
    add_mat(tn("OUTPUT"), "lm_head.weight", V, D)
    exp_kind = None
    for l in range(L):
        p = "model.layers.%d." % l
        add_vec(tn("ATTN_NORM", l), p + "input_layernorm.weight", D)
        add_vec(tn("FFN_NORM", l), p + "post_attention_layernorm.weight", D)
        add_mat(tn("ATTN_Q_A", l), p + "self_attn.q_a_proj.weight", qr, D)
        add_vec(tn("ATTN_Q_A_NORM", l), p + "self_attn.q_a_layernorm.weight", qr)
        add_mat(tn("ATTN_Q_B", l), p + "self_attn.q_b_proj.weight", H * (nope + rope), qr)
        add_mat(tn("ATTN_KV_A_MQA", l), p + "self_attn.kv_a_proj_with_mqa.weight", kvr + rope, D)
        add_vec(tn("ATTN_KV_A_NORM", l), p + "self_attn.kv_a_layernorm.weight", kvr)
        kvb = Mat(sh, p + "self_attn.kv_b_proj.weight", H * (nope + vh), kvr)
        kq = qtype_of("f16" if a.kvb == "auto" else a.kvb)

        def kb(kvb=kvb):
            return [kvb.dequant().reshape(H, nope + vh, kvr)[:, :nope, :].transpose(0, 2, 1).reshape(H * kvr, nope)]

        def vb(kvb=kvb):
            return [kvb.dequant().reshape(H, nope + vh, kvr)[:, nope:, :].reshape(H * vh, kvr)]

        plan.append((tn("ATTN_K_B", l), (H, kvr, nope), kq, kb))
        plan.append((tn("ATTN_V_B", l), (H, vh, kvr), kq, vb))
        add_mat(tn("ATTN_OUT", l), p + "self_attn.o_proj.weight", D, H * vh)
        if dsa and sh.has(p + "self_attn.indexer.wq_b.weight"):
            add_mat(tn("INDEXER_ATTN_Q_B", l), p + "self_attn.indexer.wq_b.weight", ih * idim, qr)
            add_mat(tn("INDEXER_ATTN_K", l), p + "self_attn.indexer.wk.weight", idim, D)
            add_vec(tn("INDEXER_K_NORM", l), p + "self_attn.indexer.k_norm.weight", idim)
            add_vec(tn("INDEXER_K_NORM", l, "bias"), p + "self_attn.indexer.k_norm.bias", idim)
            add_mat(tn("INDEXER_PROJ", l), p + "self_attn.indexer.weights_proj.weight", ih, D, Q.F32)
        if l < nd:
            add_mat(tn("FFN_GATE", l), p + "mlp.gate_proj.weight", fi, D)
            add_mat(tn("FFN_UP", l), p + "mlp.up_proj.weight", fi, D)
            add_mat(tn("FFN_DOWN", l), p + "mlp.down_proj.weight", D, fi)
            continue
        add_mat(tn("FFN_GATE_INP", l), p + "mlp.gate.weight", E, D, Q.F32)
        add_vec(tn("FFN_EXP_PROBS_B", l, "bias"), p + "mlp.gate.e_score_correction_bias", E)
        add_mat(tn("FFN_GATE_SHEXP", l), p + "mlp.shared_experts.gate_proj.weight", mi * nsh, D)
        add_mat(tn("FFN_UP_SHEXP", l), p + "mlp.shared_experts.up_proj.weight", mi * nsh, D)
        add_mat(tn("FFN_DOWN_SHEXP", l), p + "mlp.shared_experts.down_proj.weight", D, mi * nsh)
        for proj, kind, O, I in (("gate_proj", "FFN_GATE_EXP", mi, D), ("up_proj", "FFN_UP_EXP", mi, D), ("down_proj", "FFN_DOWN_EXP", D, mi)):
            mats = [Mat(sh, p + "mlp.experts.%d.%s.weight" % (e, proj), O, I) for e in range(E)]
            if exp_kind is None:
                exp_kind = mats[0].fmt + ("-g%d" % mats[0].gs if mats[0].gs else "")
            if a.experts == "auto":
                qt = Q.Q4_0 if mats[0].fmt == "int4" else Q.Q8_0
            else:
                qt = qtype_of(a.experts)
            plan.append((tn(kind, l), (E, O, I), qt, lambda mats=mats: mats))

    for ov in a.override:
        rx, _, ty = ov.rpartition("=")
        if not rx or ty not in ("f32", "f16", "q8_0", "q4_0"):
            raise BadInput("--override %r: expected REGEX=f32|f16|q8_0|q4_0" % ov)
        for i, (name, shape, qt, produce) in enumerate(plan):
            if re.search(rx, name):
                plan[i] = (name, shape, qtype_of(ty), produce)
    tmp = a.out + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    w.add_name("colibri-synth export of %s" % os.path.basename(os.path.abspath(a.model)))
    w.add_context_length(c.get("max_position_embeddings", 4096))
    w.add_embedding_length(D)
    w.add_feed_forward_length(fi)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_head_count_kv(1)  # MLA is stored as MQA over the latent
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-5)))
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_shared_count(nsh)
    w.add_expert_feed_forward_length(mi)
    w.add_leading_dense_block_count(nd)
    w.add_vocab_size(V)
    w.add_q_lora_rank(qr)
    w.add_kv_lora_rank(kvr)
    w.add_key_length(kvr + rope)
    w.add_value_length(kvr)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(vh)
    w.add_rope_dimension_count(rope)
    w.add_expert_weights_scale(float(c.get("routed_scaling_factor", 1.0)))
    w.add_expert_weights_norm(bool(c.get("norm_topk_prob", True)))
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if c.get("n_group", 1) > 1:
        w.add_expert_group_count(c["n_group"])
        w.add_expert_group_used_count(c["topk_group"])
    if dsa:
        w.add_indexer_head_count(ih)
        w.add_indexer_key_length(idim)
        w.add_indexer_top_k(c.get("index_topk", 2048))
    toks, types, merges = load_tokenizer(a.model, V)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(int(eos))
    w.add_add_bos_token(False)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if any(p[2] == Q.Q4_0 for p in plan) else gguf.LlamaFileType.MOSTLY_Q8_0)

    def nbytes(shape, qt):
        n = 1
        for s in shape:
            n *= s
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        return n // bs * ts

    for name, shape, qt, _ in plan:
        if qt in (Q.F32, Q.F16):
            w.add_tensor_info(name, shape, np.dtype(np.float32 if qt == Q.F32 else np.float16), nbytes(shape, qt))
        else:
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            byte_shape = list(shape[:-1]) + [shape[-1] // bs * ts]
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes(shape, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    # Tensor data: each tensor at the next multiple of the alignment, in plan
    # order (the offsets write_ti_data_to_file recorded), streamed in chunks.
    fout = w.fout[0]
    align = w.data_alignment
    total = 0

    def pad():
        n = fout.tell()
        if n % align:
            fout.write(b"\0" * (align - n % align))

    for name, shape, qt, produce in plan:
        pad()
        want, got = nbytes(shape, qt), 0
        for item in produce():
            b = np.ascontiguousarray(item.to(qt) if isinstance(item, Mat) else encode(item, qt))
            got += b.nbytes
            b.tofile(fout)
        if got != want:
            raise BadInput("%s: wrote %d bytes, expected %d" % (name, got, want))
        total += got
    pad()
    fout.flush()
    os.fsync(fout.fileno())
    w.close()
    os.replace(tmp, a.out)
    dt = time.time() - t0
    sys.stderr.write("export_gguf: %s: %s, %d layers, %d experts/layer (%s -> %s), %.2f GB in %.1f s\n" % (
        a.out, arch, L, E, exp_kind, a.experts if a.experts != "auto" else ("q4_0" if exp_kind and exp_kind.startswith("int4") else "q8_0"),
        total / 1e9, dt))


if __name__ == "__main__":
    main()
