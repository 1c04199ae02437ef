#!/usr/bin/env python3
"""Trains tests/fixtures/trained-glm5 (a small GLM-5-layout model: transformers'
GlmMoeDsaForCausalLM plus an MTP layer) or, with --name trained-dsv3, a
DeepSeek-V3-layout one (DeepseekV3ForCausalLM, group-limited routing, no
indexer) on real text, so that oracle checks and perplexity run on models
whose outputs mean something.

Corpus: the Python sources of CPython's standard library as Debian's python3.11
ships them (/usr/lib/python3.11, without site-/dist-packages), split by module:
a file is held out when the first 32 bits of SHA-256 of its path (relative to
the library root) are 0 mod 100 .. 2 mod 100 (~3%). heldout.txt is the held-out
files in sorted order, whole, as many as fit in 60 KB.

Tokenizer: a byte-level BPE trained on the training split with
tools/oracle_tokenizer.py's GLM-5 pipeline and GLM-5's special tokens
(trained-dsv3 takes trained-glm5's, so their perplexities compare).

Training (docs/training.md has the figures): next-token loss plus 0.3 x the MTP
layer's loss for token t+2 (make_oracle.MTP_CONVENTION); the DSA indexers
learn by DeepSeek-V3.2's KL objective (their inputs detached) with dense
attention for the first steps, the configured top-k after; routers balance by
DeepSeek-V3's auxiliary-loss-free bias update. AdamW, cosine schedule, fixed
seeds, f32 on the CPU. The weights are saved in bf16 (the routers' correction
bias in f32) and make_oracle.build_trained writes ref.json from them.

Like tools/make_oracle.py, and unlike the rest of tools/, this needs the stack
pinned in tools/requirements-oracle.txt (torch, transformers, tokenizers).

Usage: tools/train_tiny.py [--name trained-glm5|trained-dsv3] [--out tests/fixtures] [--steps N] [--bench N] [--threads N] [--ref-only]
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_oracle as mo  # noqa: E402  (tools/ is not a package)
import oracle_tokenizer as ot  # noqa: E402

STDLIB = "/usr/lib/python3.11"
SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "lib-dynload"}
HELDOUT_PCT = 3
HELDOUT_CAP = 60 * 1024
SEED = 35
BATCH = 16
LR, LR_MIN, WARMUP, WD = 3e-3, 3e-4, 40, 0.1
MTP_WEIGHT = 0.3
BIAS_RATE = 1e-3  # DeepSeek-V3's bias update speed
DENSE_FRAC = 0.1  # indexer warm-up with dense attention, as DeepSeek-V3.2


def corpus(root=STDLIB):
    """[(path relative to root, text)] of every UTF-8 .py file, sorted."""
    out = []
    for dp, dns, fns in os.walk(root):
        dns[:] = sorted(d for d in dns if d not in SKIP_DIRS and not d.startswith("config-"))
        for fn in sorted(fns):
            if fn.endswith(".py"):
                rel = os.path.relpath(os.path.join(dp, fn), root)
                with open(os.path.join(dp, fn), "rb") as f:
                    raw = f.read()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if text.strip():
                    out.append((rel, text))
    return sorted(out)


def held_out(rel):
    return int(hashlib.sha256(rel.encode("utf-8")).hexdigest()[:8], 16) % 100 < HELDOUT_PCT


def split(files):
    train = [(r, t) for r, t in files if not held_out(r)]
    held = [(r, t) for r, t in files if held_out(r)]
    chosen, size = [], 0
    for r, t in held:
        n = len(t.encode("utf-8"))
        if size + n <= HELDOUT_CAP:
            chosen.append((r, t))
            size += n
    return train, held, chosen


class Dsa:
    """Per step: the indexers' KL loss against their layer's attention
    (heads averaged, over the keys the indexer selected, inputs detached, as
    DeepSeek-V3.2 trains its lightning indexer) and each router's expert loads."""

    def __init__(self, modules):
        self.kl, self.loads, self.pending = [], {}, {}
        for mod in modules:
            for m in mod.modules():
                if isinstance(m, mo.mdl.GlmMoeDsaAttention) and m.indexer is not None:
                    m.indexer.register_forward_hook(self.on_indexer)
                    m.register_forward_hook(self.on_attn)
                elif isinstance(m, (mo.mdl.GlmMoeDsaTopkRouter, mo.mdl_v3.DeepseekV3TopkRouter)):
                    m.register_forward_hook(self.on_router)

    def on_indexer(self, m, args, out):
        if not torch.is_grad_enabled():
            return
        hs, q_resid, (cos, sin) = args[0].detach(), args[1].detach(), args[2]
        b, s, _ = hs.shape
        q = m.wq_b(q_resid).view(b, s, m.n_heads, m.head_dim)
        q_rot, q_pass = torch.split(q, [m.qk_rope_head_dim, m.head_dim - m.qk_rope_head_dim], dim=-1)
        k = m.k_norm(m.wk(hs)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [m.qk_rope_head_dim, m.head_dim - m.qk_rope_head_dim], dim=-1)
        q_rot, k_rot = mo.mdl.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        sc = F.relu(torch.matmul(q, k.transpose(-1, -2).unsqueeze(1)) * m.softmax_scale)
        w = m.weights_proj(hs) * (m.n_heads ** -0.5)
        self.pending[id(m)] = torch.matmul(w.unsqueeze(-2), sc).squeeze(-2)  # [B, S, T]

    def on_attn(self, m, args, out):
        sc = self.pending.pop(id(m.indexer), None)
        if sc is None:
            return
        _, w, topk = out
        p = w.detach().float().mean(1)  # [B, S, T]
        s, t = p.shape[1], p.shape[2]
        sel = torch.zeros_like(p, dtype=torch.bool).scatter_(-1, topk.long(), True)
        sel &= torch.ones(s, t, dtype=torch.bool).tril()
        logq = torch.log_softmax(sc.masked_fill(~sel, -1e30), dim=-1)
        self.kl.append((p * (torch.log(p.clamp_min(1e-30)) - logq)).masked_fill(~sel, 0).sum(-1).mean())

    def on_router(self, m, args, out):
        if torch.is_grad_enabled():
            c = torch.bincount(out[2].reshape(-1), minlength=m.num_experts).float()
            self.loads[id(m)] = (m, self.loads.get(id(m), (m, 0))[1] + c)

    def take(self):
        kl, self.kl = self.kl, []
        return torch.stack(kl).sum() if kl else torch.zeros(())

    def balance(self):
        """e_score_correction_bias += u * sign(mean load - load), no gradient."""
        with torch.no_grad():
            for m, c in self.loads.values():
                m.e_score_correction_bias.add_(BIAS_RATE * torch.sign(c.mean() - c))
        self.loads = {}


def set_topk(modules, k):
    for mod in modules:
        for m in mod.modules():
            if isinstance(m, mo.mdl.GlmMoeDsaIndexer):
                m.index_topk = k


def losses(model, mtp, mcfg, x):
    """Main next-token loss and the MTP layer's t+2 loss on x [B, S]."""
    h = model.model(input_ids=x, use_cache=False).last_hidden_state
    logits = model.lm_head(h)
    v = logits.shape[-1]
    main = F.cross_entropy(logits[:, :-1].reshape(-1, v), x[:, 1:].reshape(-1))
    _, ml = mo.mtp_apply(model, mtp, mcfg, h[:, :-1], model.model.embed_tokens(x[:, 1:]))
    m = F.cross_entropy(ml[:, :-1].reshape(-1, v), x[:, 2:].reshape(-1))
    return main, m


def heldout_loss(model, mtp, mcfg, chunks):
    model.eval()
    mtp.eval()
    with torch.no_grad():
        a = b = 0.0
        for i in range(0, len(chunks), BATCH):
            x = chunks[i:i + BATCH]
            main, m = losses(model, mtp, mcfg, x)
            a += float(main) * len(x)
            b += float(m) * len(x)
    model.train()
    mtp.train()
    return a / len(chunks), b / len(chunks)


def mtp_acceptance(model, mtp, mcfg, chunks):
    """Fraction of positions where the MTP head's argmax for t+2 equals the
    main model's greedy token at t+2 given the true t+1 (teacher forced)."""
    hit = n = 0
    with torch.no_grad():
        for i in range(0, len(chunks), BATCH):
            x = chunks[i:i + BATCH]
            h = model.model(input_ids=x, use_cache=False).last_hidden_state
            g = model.lm_head(h).argmax(-1)  # g[:, p+1] is the greedy token for position p+2
            _, ml = mo.mtp_apply(model, mtp, mcfg, h[:, :-1], model.model.embed_tokens(x[:, 1:]))
            d = ml.argmax(-1)  # d[:, p] drafts position p+2
            hit += int((d[:, :-1] == g[:, 1:-1]).sum())
            n += d[:, :-1].numel()
    return hit / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="trained-glm5", choices=sorted(mo.TRAINED), help="which trained fixture")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--bench", type=int, default=0, help="time this many steps and stop")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (two on a busy two-core machine stall in OpenMP barriers)")
    ap.add_argument("--experts", default="grouped_mm", help="transformers' experts implementation for training")
    ap.add_argument("--log", default=None, help="write the training log (JSON lines) here")
    ap.add_argument("--ckpt", default=None, help="save the weights here at each evaluation")
    ap.add_argument("--ref-only", action="store_true",
                    help="no training: ref.json from the committed weights, the unigram baseline from the corpus")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(SEED)
    mo.check_modeling_file()
    spec = mo.TRAINED[a.name]
    t0 = time.time()

    files = corpus()
    train, held, chosen = split(files)
    print("corpus: %d files (%d bytes); train %d, held out %d, heldout.txt %d files %d bytes"
          % (len(files), sum(len(t.encode()) for _, t in files), len(train), len(held), len(chosen),
             sum(len(t.encode()) for _, t in chosen)), flush=True)
    d = os.path.join(a.out, a.name)
    os.makedirs(d, exist_ok=True)
    heldout = "".join(t for _, t in chosen)
    if not a.ref_only:
        if spec.get("tokenizer"):  # another trained fixture's tokenizer and held-out text
            for fn in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(a.out, spec["tokenizer"], fn), d)
        else:
            ot.build_tokenizer(spec["config"]["vocab_size"], os.path.join(d, "tokenizer.json"), specials=ot.GLM_SPECIALS,
                               texts=[t for _, t in train])
        with open(os.path.join(d, "heldout.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(heldout)
    with open(os.path.join(d, "heldout.txt"), encoding="utf-8", newline="") as f:
        assert f.read() == heldout, "heldout.txt is not this corpus's held-out text"
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    ids = []
    for e in tok.encode_batch([t for _, t in train], add_special_tokens=False):
        ids.extend(e.ids)
    data = torch.tensor(ids)
    counts = torch.bincount(data, minlength=spec["config"]["vocab_size"]).tolist()
    hids = tok.encode(heldout, add_special_tokens=False).ids
    W = spec["config"]["max_position_embeddings"]
    hchunks = torch.tensor(hids[: len(hids) // W * W]).view(-1, W)
    print("tokens: train %d (%.2f bytes/token), heldout %d (%d chunks); %.0f s"
          % (len(ids), sum(len(t.encode()) for _, t in train) / len(ids), len(hids), len(hchunks), time.time() - t0), flush=True)

    if a.ref_only:
        finish(a, spec, counts, hchunks, dict(train_files=len(train), train_tokens=len(ids)))
        return
    sid = mo.special_ids(d, spec)
    cfg = mo.make_config(spec, sid)
    mcfg = mo.mtp_config(spec, sid, cfg)
    for c in (cfg, mcfg):
        c._experts_implementation = a.experts
    model = mo.family(spec)["model"](cfg)
    mtp = mo.make_mtp(spec, mcfg)
    mtp.apply(model._init_weights)  # make_mtp's experts are uninitialized
    for name, p in mtp.named_parameters():
        if name.endswith("norm.weight"):
            torch.nn.init.ones_(p)
    model.train()
    mtp.train()
    dsa = Dsa([model, mtp])
    params = list(model.parameters()) + list(mtp.parameters())
    decay = [p for p in params if p.dim() >= 2]
    keep = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": keep, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    n_params = sum(p.numel() for p in params)
    print("parameters: %d (%d with the MTP layer)" % (sum(p.numel() for p in model.parameters()), n_params), flush=True)

    steps = a.bench or a.steps
    dense_steps = int(DENSE_FRAC * steps)
    g = torch.Generator().manual_seed(SEED)
    log = []
    logf = open(a.log, "w") if a.log else None
    run = dict(main=0.0, mtp=0.0, kl=0.0, n=0)
    eval_every = max(1, steps // 10)
    tt = time.time()
    for step in range(1, steps + 1):
        set_topk([model, mtp], W if step <= dense_steps else spec["config"].get("index_topk"))
        lr = LR * step / WARMUP if step <= WARMUP else \
            LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * (step - WARMUP) / max(1, steps - WARMUP)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        off = torch.randint(0, len(data) - W, (BATCH,), generator=g)
        x = torch.stack([data[o:o + W] for o in off.tolist()])
        main_l, mtp_l = losses(model, mtp, mcfg, x)
        kl = dsa.take()
        loss = main_l + MTP_WEIGHT * mtp_l + kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        dsa.balance()
        run["main"] += float(main_l.detach())
        run["mtp"] += float(mtp_l.detach())
        run["kl"] += float(kl.detach())
        run["n"] += 1
        if a.bench:
            print("step %d: loss %.3f mtp %.3f kl %.3f; %.2f s/step" % (step, float(main_l), float(mtp_l), float(kl),
                                                                     (time.time() - tt) / step), flush=True)
            continue
        if step % eval_every == 0 or step == steps or step == 1:
            hl, hm = heldout_loss(model, mtp, mcfg, hchunks)
            row = dict(step=step, lr=lr, train=run["main"] / run["n"], train_mtp=run["mtp"] / run["n"],
                       kl=run["kl"] / run["n"], heldout=hl, heldout_mtp=hm, seconds=round(time.time() - tt, 1))
            log.append(row)
            print(json.dumps(row), flush=True)
            if logf:
                logf.write(json.dumps(row) + "\n")
                logf.flush()
            run = dict(main=0.0, mtp=0.0, kl=0.0, n=0)
            if a.ckpt:
                torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "step": step, "counts": counts}, a.ckpt)
    if a.bench:
        return

    cfg._experts_implementation = mcfg._experts_implementation = "eager"
    set_topk([model, mtp], spec["config"].get("index_topk"))
    model.eval()
    mtp.eval()
    tensors = mo.checkpoint_tensors(model, cfg)
    tensors.update(mo.checkpoint_tensors(mtp, cfg, "model.layers.%d." % cfg.num_hidden_layers))
    tensors = {k: v if k.endswith("e_score_correction_bias") else v.to(torch.bfloat16) for k, v in tensors.items()}
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    mo.write_configs(d, spec, cfg, sid)
    finish(a, spec, counts, hchunks, dict(log=log, train_seconds=round(time.time() - tt), steps=steps,
                                          parameters=n_params, heldout_files=[r for r, _ in chosen],
                                          heldout_modules=[r for r, _ in held], train_files=len(train),
                                          train_tokens=len(ids)))


def finish(a, spec, counts, hchunks, summary):
    """ref.json from the saved weights, the MTP head's acceptance, the hashes."""
    torch.set_num_threads(1)  # the reference as make_oracle computes it
    model, mtp, mcfg = mo.build_trained(a.name, spec, a.out, unigram_counts=counts)
    summary["mtp_acceptance"] = mtp_acceptance(model, mtp, mcfg, hchunks)
    mo.write_hashes(a.out, mo.all_names(a.out))
    print(json.dumps({k: v for k, v in summary.items() if k not in ("log", "heldout_modules")}), flush=True)
    if a.log:
        with open(a.log + ".summary.json", "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
