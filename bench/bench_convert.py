#!/usr/bin/env python3
"""colibri-convert throughput against the disk, in one run (stdlib only).

1. Writes a synthetic GLM-5-shaped bf16 model of about --size-gb (routed
   experts dominate, as in the real model) into --dir, syncs it and drops it
   from the page cache (posix_fadvise DONTNEED on clean pages).
2. Disk read bandwidth: dd iflag=direct (O_DIRECT, so the page cache never
   serves it) over the same files, 16 MiB requests.
3. Converts the cold source at --expert-bits 4 --group-size 64 --dense-bits 8
   (the usual GLM-5 setting) and reports source bytes/s from the converter's
   own summary, and its ratio to the disk's bandwidth.
4. The same conversion from /dev/shm (when there is room): the compute-bound
   rate, with no disk read in the way.

Usage: bench/bench_convert.py [--converter ./colibri-convert] [--size-gb 1.5]
       [--dir bench/cache/convert] [--threads N] [--keep] [--json]
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time


def write_st(path, tensors, pool):
    """tensors: [(name, dtype, shape)]; data: finite bf16/f32 slices of pool."""
    header, off, sizes = {}, 0, []
    for name, dt, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        b = n * (2 if dt == "BF16" else 4)
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + b]}
        off += b
        sizes.append((dt, b))
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        pos = 0
        for dt, b in sizes:
            if dt == "F32":
                f.write(struct.pack("<f", 1.0) * (b // 4))
                continue
            while b:
                k = min(b, len(pool) - pos)
                f.write(pool[pos:pos + k])
                b -= k
                pos = (pos + k) % (len(pool) - 4096)
        f.flush()
        os.fsync(f.fileno())
    return 8 + len(h) + off


def make_pool(n):
    """n random bytes as bf16 values in (-2, 2): the exponent's top bit
    cleared, so every value is finite."""
    raw = bytearray(os.urandom(n))
    raw[1::2] = raw[1::2].translate(bytes(b & 0xBF for b in range(256)))
    return bytes(raw)


def make_model(d, size_gb):
    D, MI, V, L, H = 2048, 768, 32000, 4, 16
    cfg = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "vocab_size": V, "hidden_size": D,
           "intermediate_size": 4096, "moe_intermediate_size": MI, "num_hidden_layers": L, "first_k_dense_replace": 1,
           "num_attention_heads": H, "num_key_value_heads": H, "q_lora_rank": 512, "kv_lora_rank": 256,
           "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64, "n_shared_experts": 1, "num_experts_per_tok": 4,
           "index_n_heads": 8, "index_head_dim": 64, "num_nextn_predict_layers": 0, "rms_norm_eps": 1e-5,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "tie_word_embeddings": False}
    expert = 3 * MI * D * 2
    fixed = 2 * V * D * 2 + 3 * 4096 * D * 2 + L * 8e6  # embed, lm_head, dense MLP, attention
    E = max(8, int((size_gb * 1e9 - fixed) / (expert * (L - 1))))
    cfg["n_routed_experts"] = E
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    pool = make_pool(64 << 20)
    nope, rope, vh, ql, kl, ih, idim = 64, 32, 64, 512, 256, 8, 64
    total = 0
    glob = [("model.embed_tokens.weight", "BF16", (V, D)), ("lm_head.weight", "BF16", (V, D)), ("model.norm.weight", "F32", (D,))]
    total += write_st(os.path.join(d, "model-00000.safetensors"), glob, pool)
    for l in range(L):
        p = "model.layers.%d." % l
        t = [(p + "input_layernorm.weight", "F32", (D,)), (p + "post_attention_layernorm.weight", "F32", (D,)),
             (p + "self_attn.q_a_proj.weight", "BF16", (ql, D)), (p + "self_attn.q_a_layernorm.weight", "F32", (ql,)),
             (p + "self_attn.q_b_proj.weight", "BF16", (H * (nope + rope), ql)),
             (p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", (kl + rope, D)), (p + "self_attn.kv_a_layernorm.weight", "F32", (kl,)),
             (p + "self_attn.kv_b_proj.weight", "BF16", (H * (nope + vh), kl)), (p + "self_attn.o_proj.weight", "BF16", (D, H * vh)),
             (p + "self_attn.indexer.wq_b.weight", "BF16", (ih * idim, ql)), (p + "self_attn.indexer.wk.weight", "BF16", (idim, D)),
             (p + "self_attn.indexer.k_norm.weight", "F32", (idim,)), (p + "self_attn.indexer.k_norm.bias", "F32", (idim,)),
             (p + "self_attn.indexer.weights_proj.weight", "BF16", (ih, D))]
        if l == 0:
            t += [(p + "mlp.gate_proj.weight", "BF16", (4096, D)), (p + "mlp.up_proj.weight", "BF16", (4096, D)),
                  (p + "mlp.down_proj.weight", "BF16", (D, 4096))]
        else:
            t += [(p + "mlp.gate.weight", "BF16", (E, D)), (p + "mlp.gate.e_score_correction_bias", "F32", (E,)),
                  (p + "mlp.shared_experts.gate_proj.weight", "BF16", (MI, D)), (p + "mlp.shared_experts.up_proj.weight", "BF16", (MI, D)),
                  (p + "mlp.shared_experts.down_proj.weight", "BF16", (D, MI))]
            for e in range(E):
                t += [(p + "mlp.experts.%d.gate_proj.weight" % e, "BF16", (MI, D)), (p + "mlp.experts.%d.up_proj.weight" % e, "BF16", (MI, D)),
                      (p + "mlp.experts.%d.down_proj.weight" % e, "BF16", (D, MI))]
        total += write_st(os.path.join(d, "model-%05d.safetensors" % (l + 1)), t, pool)
    return total, E


def shards(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))


def drop_cache(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_read_bw(files):
    """Bytes/s of O_DIRECT sequential reads over files (dd, 16 MiB blocks)."""
    total, t0 = 0, time.monotonic()
    for f in files:
        p = subprocess.run(["dd", "if=" + f, "of=/dev/null", "bs=16M", "iflag=direct"], capture_output=True)
        if p.returncode:
            raise RuntimeError("dd iflag=direct failed on %s: %s" % (f, p.stderr.decode().strip()))
        total += os.path.getsize(f)
    return total / (time.monotonic() - t0)


def run_convert(conv, src, dst, threads):
    shutil.rmtree(dst, ignore_errors=True)
    cmd = [conv, src, dst, "--expert-bits", "4", "--group-size", "64", "--dense-bits", "8"]
    if threads:
        cmd += ["--threads", str(threads)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True)
    wall = time.monotonic() - t0
    err = p.stderr.decode()
    if p.returncode:
        raise RuntimeError("colibri-convert failed:\n" + err)
    m = re.search(r"read (\d+) bytes .* in ([\d.]+) s; source (\d+) MB/s", err)
    read, secs = int(m.group(1)), float(m.group(2))
    out = sum(os.path.getsize(f) for f in shards(dst))
    return {"read_bytes": read, "seconds": secs, "wall": wall, "bytes_per_s": read / secs, "out_bytes": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--converter", default="./colibri-convert")
    ap.add_argument("--size-gb", type=float, default=1.5)
    ap.add_argument("--dir", default="bench/cache/convert")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the synthetic model for the next run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    src, dst = os.path.join(a.dir, "src"), os.path.join(a.dir, "dst")
    stamp = os.path.join(src, ".size")
    if not (os.path.exists(stamp) and open(stamp).read() == str(a.size_gb)):
        shutil.rmtree(src, ignore_errors=True)
        t0 = time.monotonic()
        size, E = make_model(src, a.size_gb)
        with open(stamp, "w") as f:
            f.write(str(a.size_gb))
        print("bench_convert: wrote a %.2f GB bf16 model (%d experts x 3 MoE layers) in %.1f s" % (size / 1e9, E, time.monotonic() - t0),
              file=sys.stderr)
    files = shards(src)
    drop_cache(files)
    disk = disk_read_bw(files)
    drop_cache(files)
    cold = run_convert(a.converter, src, dst, a.threads)
    res = {"source_bytes": cold["read_bytes"], "disk_read_bytes_per_s": disk, "convert_cold": cold, "threads": a.threads or os.cpu_count()}
    shm = "/dev/shm/colibri-bench-convert"
    st = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    if st and st.f_bavail * st.f_frsize > 3 * cold["read_bytes"]:
        try:
            shutil.copytree(src, shm + "/src")
            res["convert_from_ram"] = run_convert(a.converter, shm + "/src", dst, a.threads)
        finally:
            shutil.rmtree(shm, ignore_errors=True)
    shutil.rmtree(dst, ignore_errors=True)
    if not a.keep:
        shutil.rmtree(src, ignore_errors=True)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print("convert (bf16 -> experts int4-g64, dense int8), %d threads, %.2f GB of source:" % (res["threads"], cold["read_bytes"] / 1e9))
    print("  disk read (O_DIRECT, dd 16 MiB): %7.0f MB/s" % (disk / 1e6))
    print("  converter, cold source:          %7.0f MB/s of source  (%.2f of disk bandwidth; %.1f s, %.2f GB written)" % (
        cold["bytes_per_s"] / 1e6, cold["bytes_per_s"] / disk, cold["seconds"], cold["out_bytes"] / 1e9))
    if "convert_from_ram" in res:
        r = res["convert_from_ram"]
        print("  converter, source in /dev/shm:   %7.0f MB/s of source  (compute-bound; %.1f s)" % (r["bytes_per_s"] / 1e6, r["seconds"]))


if __name__ == "__main__":
    main()
