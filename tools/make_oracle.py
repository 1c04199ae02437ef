#!/usr/bin/env python3
"""Builds colibri's oracle fixtures with Hugging Face transformers (float32, eager).

Each fixture directory under tests/fixtures/ holds a tiny random-weight
glm_moe_dsa model (config.json, generation_config.json, model.safetensors with
per-expert tensor names as in the real checkpoints), its tokenizer (built by
tools/oracle_tokenizer.py with Hugging Face tokenizers, which also writes the
tokenizer parity fixtures in tests/fixtures/tokenizer/) and ref.json: the
prompt ids, transformers' logits at every prompt position (teacher forcing,
no cache), their argmax, a greedy continuation computed through the KV cache
with the logits of every step, and transformers' greedy generate() for a
chat-templated prompt. Stop ids in the configs are the tokenizer's
<|endoftext|>, <|user|> and <|observation|>, as in GLM-5.

The weights are redrawn with scales that keep activations O(1), and what the
default init leaves trivial (RMSNorm weights, indexer k_norm, the router's
e_score_correction_bias) is randomized so that layout and bias bugs show. A
seed is accepted only if the reference has no near-ties where an
implementation could legitimately differ: the indexer's k-th/k+1-th score,
the router's k-th/k+1-th expert (and group) choice, and the top-2 logits.

tiny-glm5-mtp adds a multi-token-prediction (MTP) layer, model.layers.N with
N = num_hidden_layers, and its reference under "mtp" in ref.json. transformers
has no MTP code for glm_moe_dsa; the reference composes transformers' own
modules (GlmMoeDsaDecoderLayer, RMSNorm, rotary embedding, causal mask) with
the convention of DeepSeek-V3 and vLLM / SGLang (see MTP_CONVENTION).

trained-glm5 is not drawn here but trained by tools/train_tiny.py; this
script rebuilds its ref.json from the committed weights (bf16): the oracle
reference on the first held-out prompt without near-ties and the perplexity
of heldout.txt (see perplexity()), keeping the unigram baseline already in
ref.json. Its indexer breaks ties toward the earlier key, as colibri does
(trained ReLU scores are often exactly 0 at the k-th key).

Usage: tools/make_oracle.py [--out tests/fixtures] [--only NAME] [--check]
  --check regenerates into a temporary directory and compares byte for byte.
Needs the stack pinned in tools/requirements-oracle.txt. Runs on CPU.
"""
import argparse
import copy
import filecmp
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers
from safetensors.torch import save_file
from torch import nn
from transformers import (AutoTokenizer, DeepseekV32Config, DeepseekV32ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          GlmMoeDsaConfig, GlmMoeDsaForCausalLM, Kimi_K25Config, Kimi_K25ForConditionalGeneration)
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mdl_v3
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as mdl_v32
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as mdl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_tokenizer  # noqa: E402  (tools/ is not a package)

# The model families: transformers' config and model classes, its modeling
# module and class-name prefix, and the architectures entry of config.json.
FAMILIES = {
    "glm_moe_dsa": dict(config=GlmMoeDsaConfig, model=GlmMoeDsaForCausalLM, mdl=mdl, prefix="GlmMoeDsa",
                        arch="GlmMoeDsaForCausalLM"),
    "deepseek_v3": dict(config=DeepseekV3Config, model=DeepseekV3ForCausalLM, mdl=mdl_v3, prefix="DeepseekV3",
                        arch="DeepseekV3ForCausalLM"),
    "deepseek_v32": dict(config=DeepseekV32Config, model=DeepseekV32ForCausalLM, mdl=mdl_v32, prefix="DeepseekV32",
                         arch="DeepseekV32ForCausalLM"),
    # Kimi K2.5: a deepseek_v3 text model under text_config beside a vision tower.
    "kimi_k25": dict(config=Kimi_K25Config, model=Kimi_K25ForConditionalGeneration, mdl=mdl_v3, prefix="DeepseekV3",
                     arch="KimiK25ForConditionalGeneration"),
}

# Kimi K2.5's tensors as its checkpoint names them (transformers 5.23's
# conversion mapping for kimi_k25, reversed): the language model under
# "language_model.", the vision tower and projector at the top level.
K25_NAMES = [("model.language_model.", "language_model.model."), ("lm_head.", "language_model.lm_head."),
             ("model.vision_tower.", "vision_tower."), ("model.mm_projector.", "mm_projector.")]
K25_VISION = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48)


def family(spec):
    return FAMILIES[spec.get("family", "glm_moe_dsa")]


def fam_class(spec, name):
    f = family(spec)
    return getattr(f["mdl"], f["prefix"] + name)


# Margins below which a seed is rejected. Implementations in f32 agree to
# ~1e-6 on these quantities; the margins leave two orders of magnitude.
MIN_INDEX_GAP = 1e-4
MIN_ROUTER_GAP = 1e-4
MIN_LOGIT_GAP = 1e-3
# The quantized fixtures are also run with IDOT (int8 activations, ~1%
# relative error per matmul), whose teacher-forced distributions must stay
# close to the reference's (docs/oracle.md): their router choices must
# survive that, so they need wider router margins (a flipped expert moves
# the logits by O(1) in a random model).
MIN_ROUTER_GAP_Q = 5e-3
LATENT_SCALE = 0.004

FIXTURES = {
    # GLM-5 layout: every layer runs its own indexer, one expert group.
    # Every dimension distinct; index_topk far below the prompt length.
    "tiny-glm5": dict(
        config=dict(
            vocab_size=352, hidden_size=64, intermediate_size=88, moe_intermediate_size=36,
            num_hidden_layers=4, first_k_dense_replace=1, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=40, qk_nope_head_dim=24,
            qk_rope_head_dim=8, v_head_dim=20, n_routed_experts=8, num_experts_per_tok=3,
            n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, index_n_heads=12, index_head_dim=16, index_topk=5,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
            hidden_act="silu", attention_bias=False, bos_token_id=0,
        ),
        # config.json lists <|endoftext|> and <|user|>, generation_config.json
        # adds <|observation|>: the stop set is their union.
        config_eos=["<|endoftext|>", "<|user|>"],
        generation=dict(eos=["<|endoftext|>", "<|user|>", "<|observation|>"], do_sample=True, temperature=1.0, top_p=0.95),
        chat=dict(system="You are a terse assistant.", user="Name three prime numbers.", think=False, max_new=24),
        prompt_len=40, greedy_len=20, seed=1000,
    ),
    # GLM-5.2 layout: shared-indexer layers from index_topk_freq/offset (the
    # config carries no explicit indexer_types), group-limited routing with
    # topk_group < n_group, two shared experts, no top-k normalization.
    "tiny-glm52": dict(
        config=dict(
            vocab_size=300, hidden_size=72, intermediate_size=100, moe_intermediate_size=28,
            num_hidden_layers=5, first_k_dense_replace=2, num_attention_heads=3,
            num_key_value_heads=3, q_lora_rank=44, kv_lora_rank=36, qk_nope_head_dim=20,
            qk_rope_head_dim=12, v_head_dim=26, n_routed_experts=9, num_experts_per_tok=3,
            n_shared_experts=2, n_group=3, topk_group=2, routed_scaling_factor=1.75,
            norm_topk_prob=False, index_n_heads=9, index_head_dim=18, index_topk=6,
            rope_parameters={"rope_type": "default", "rope_theta": 8000000.0},
            rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
            hidden_act="silu", attention_bias=False, bos_token_id=0,
        ),
        indexer_schedule=dict(index_topk_freq=2, index_skip_topk_offset=2),
        config_eos="<|endoftext|>",  # a single id, not a list
        generation=dict(eos=["<|user|>", "<|observation|>"], do_sample=True, temperature=0.6, top_k=20, min_p=0.05),
        chat=dict(system=None, user="Write one line about disks: \u00e9t\u00e9 \U0001f600", think=True, max_new=20),
        prompt_len=36, greedy_len=16, seed=2000,
    ),
}


# tiny-glm5 plus one MTP layer (model.layers.4.*): same config, its own seed.
FIXTURES["tiny-glm5-mtp"] = dict(copy.deepcopy(FIXTURES["tiny-glm5"]), tokenizer="tiny-glm5", mtp=True, seed=5000)
FIXTURES["tiny-glm5-mtp"]["config"]["num_nextn_predict_layers"] = 1

# The MTP layer's convention (DeepSeek-V3 report §2.2, vLLM deepseek_mtp.py and
# its EAGLE proposer, SGLang NextN), stated in ref.json.
MTP_CONVENTION = (
    "entry p: h_p = main model's final-normed last hidden state at position p (after model.norm); "
    "u_p = eh_proj(concat[enorm(embed(x_{p+1})), hnorm(h_p)]) (embedding half first); "
    "o_p = decoder layer model.layers.{N} (index num_hidden_layers) on u_p at rope position p, causal over the "
    "MTP layer's own entries 0..p (own KV and indexer keys); mtp_logits_p = lm_head(shared_head.norm(o_p)) "
    "predicts x_{p+2}; embed and lm_head are the main model's; enorm, hnorm, shared_head.norm and the layer's "
    "input/post-attention norms use rms_norm_eps (its q/kv latent norms 1e-6, as in the main layers); "
    "a chained draft feeds the previous step's o (before shared_head.norm) as h")


# DeepSeek-V3 layout (deepseek_v3): no indexer, group-limited routing with
# topk_group < n_group, YaRN in the checkpoint's own form (rope_scaling beside
# a top-level rope_theta, mscale = mscale_all_dim = 1: the softmax scale grows
# by mscale(40)^2 = 1.87, cos/sin stay unscaled), a correction range that
# blends interpolated and extrapolated frequencies (original context 64,
# rotary dim 16), an MTP layer as in the released checkpoint.
FIXTURES["tiny-dsv3"] = dict(
    family="deepseek_v3", tokenizer="tiny-glm5", mtp=True,
    config=dict(
        vocab_size=352, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=40, kv_lora_rank=32, qk_nope_head_dim=20,
        qk_rope_head_dim=16, v_head_dim=18, n_routed_experts=16, num_experts_per_tok=4,
        n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        norm_topk_prob=True, num_nextn_predict_layers=1,
        rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32,
                      "beta_slow": 1, "original_max_position_embeddings": 64},
        rope_theta=10000.0, rms_norm_eps=1e-6, max_position_embeddings=2560, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, bos_token_id=0,
    ),
    legacy_rope=True,
    config_eos=["<|endoftext|>", "<|user|>"],
    generation=dict(eos=["<|endoftext|>", "<|user|>", "<|observation|>"], do_sample=True, temperature=0.6, top_p=0.95),
    chat=dict(system="You are a terse assistant.", user="Name three prime numbers.", think=False, max_new=20),
    prompt_len=40, greedy_len=16, seed=6000,
)
# Kimi K2 layout (model_type kimi_k2, read as deepseek_v3): one expert group,
# an expert count that is not a power of two (384 scaled down to 12), Kimi's
# routed_scaling_factor, YaRN in rope_parameters form with mscale != 
# mscale_all_dim (cos/sin scaled by attention_factor 0.96...), and
# rope_interleave false (half-split RoPE, which converted checkpoints use).
FIXTURES["tiny-kimi-k2"] = dict(
    family="deepseek_v3", tokenizer="tiny-glm5", model_type="kimi_k2",
    config=dict(
        vocab_size=352, hidden_size=72, intermediate_size=80, moe_intermediate_size=20,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=3,
        num_key_value_heads=3, q_lora_rank=36, kv_lora_rank=28, qk_nope_head_dim=16,
        qk_rope_head_dim=12, v_head_dim=22, n_routed_experts=12, num_experts_per_tok=4,
        n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=2.827,
        norm_topk_prob=True, rope_interleave=False, num_nextn_predict_layers=0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0, "mscale": 0.707,
                         "mscale_all_dim": 1.0, "beta_fast": 1, "beta_slow": 1, "original_max_position_embeddings": 48},
        rms_norm_eps=1e-6, max_position_embeddings=1536, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, bos_token_id=0,
    ),
    config_eos="<|endoftext|>",
    generation=dict(eos=["<|endoftext|>", "<|user|>"], do_sample=False),
    chat=dict(system=None, user="Write one line about disks.", think=True, max_new=16),
    prompt_len=36, greedy_len=16, seed=7000,
)

# Moonlight-16B-A3B layout (deepseek_v3 with q_lora_rank null): one
# uncompressed q_proj per layer instead of q_a_proj / q_a_layernorm /
# q_b_proj, one expert group, two shared experts, top-6, rms_norm_eps 1e-5,
# rope_theta 50000 beside rope_scaling null as the release writes them.
FIXTURES["tiny-moonlight"] = dict(
    family="deepseek_v3", tokenizer="tiny-glm5",
    config=dict(
        vocab_size=352, hidden_size=64, intermediate_size=88, moe_intermediate_size=20,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=24, qk_nope_head_dim=16,
        qk_rope_head_dim=12, v_head_dim=14, n_routed_experts=16, num_experts_per_tok=6,
        n_shared_experts=2, n_group=1, topk_group=1, routed_scaling_factor=2.446,
        norm_topk_prob=True, num_nextn_predict_layers=0,
        rope_theta=50000.0, rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, bos_token_id=0,
    ),
    legacy_rope="null",
    config_eos="<|endoftext|>",
    generation=dict(eos=["<|endoftext|>", "<|user|>"], do_sample=False),
    chat=dict(system="You are a terse assistant.", user="Name a color.", think=False, max_new=16),
    prompt_len=36, greedy_len=16, seed=7500,
)

# DeepSeek-V3.2 layout (deepseek_v32): GLM-5's indexer on every layer but
# rotating halves (i, i + d/2) where the attention rotates interleaved
# pairs, index_topk far below the prompt length, group-limited routing,
# YaRN with mscale = mscale_all_dim as in the release, an MTP layer with its
# own indexer.
FIXTURES["tiny-dsv32"] = dict(
    family="deepseek_v32", tokenizer="tiny-glm5", mtp=True,
    config=dict(
        vocab_size=352, hidden_size=64, intermediate_size=92, moe_intermediate_size=26,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=44, kv_lora_rank=36, qk_nope_head_dim=22,
        qk_rope_head_dim=12, v_head_dim=18, n_routed_experts=12, num_experts_per_tok=3,
        n_shared_experts=1, n_group=3, topk_group=2, routed_scaling_factor=2.5,
        norm_topk_prob=True, num_nextn_predict_layers=1, index_n_heads=10, index_head_dim=20, index_topk=6,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 64},
        rms_norm_eps=1e-6, max_position_embeddings=2560, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, bos_token_id=0,
    ),
    config_eos=["<|endoftext|>", "<|user|>"],
    generation=dict(eos=["<|endoftext|>", "<|user|>", "<|observation|>"], do_sample=True, temperature=0.6, top_p=0.95),
    chat=dict(system=None, user="Name three prime numbers.", think=True, max_new=20),
    prompt_len=40, greedy_len=16, seed=9000,
)

# Kimi K2.5 layout (kimi_k25): the text model under text_config (written as
# deepseek_v3, as transformers normalizes kimi_k2) beside a one-layer vision
# tower; tensors under "language_model." as in the release; the top-level
# tie_word_embeddings (false here, true by default) decides the output layer.
FIXTURES["tiny-kimi-k25"] = dict(
    family="kimi_k25", tokenizer="tiny-glm5",
    config=dict(
        vocab_size=352, hidden_size=64, intermediate_size=84, moe_intermediate_size=22,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=40, kv_lora_rank=30, qk_nope_head_dim=18,
        qk_rope_head_dim=10, v_head_dim=20, n_routed_experts=12, num_experts_per_tok=4,
        n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=2.827,
        norm_topk_prob=True, num_nextn_predict_layers=0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 64.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 64},
        rms_norm_eps=1e-5, max_position_embeddings=4096, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, bos_token_id=0,
    ),
    config_eos="<|endoftext|>",
    generation=dict(eos=["<|endoftext|>", "<|user|>"], do_sample=True, temperature=1.0, top_p=0.95),
    chat=dict(system="You are Kimi.", user="Write one line about disks.", think=False, max_new=16),
    prompt_len=36, greedy_len=16, seed=9500,
)


# Quantized fixtures: one tiny model (hidden 80 is not a multiple of the
# group size 32; moe_intermediate 45 makes the down projections' inner
# dimension odd) converted by colibri-convert at several formats; each
# reference is computed by transformers from the container's weights,
# dequantized here independently of the C code.
QBASE = dict(
    config=dict(
        vocab_size=352, hidden_size=80, intermediate_size=88, moe_intermediate_size=45,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
        num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=40, qk_nope_head_dim=24,
        qk_rope_head_dim=8, v_head_dim=20, n_routed_experts=8, num_experts_per_tok=3,
        n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, index_n_heads=12, index_head_dim=16, index_topk=64,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
        hidden_act="silu", attention_bias=False, bos_token_id=0,
    ),
    config_eos=["<|endoftext|>", "<|user|>"],
    generation=dict(eos=["<|endoftext|>", "<|user|>", "<|observation|>"], do_sample=False),
    tokenizer="tiny-glm5",
    prompt_len=32, greedy_len=16,
)
# DeepSeek-V3 quantized: tiny-dsv3's features (YaRN, group routing) without
# the MTP layer, hidden 80 as QBASE, two expert groups of which one is kept
# (four groups rarely leave the group choice 5e-3 clear of a tie).
QBASE_V3 = copy.deepcopy(FIXTURES["tiny-dsv3"])
QBASE_V3["config"].update(hidden_size=80, num_nextn_predict_layers=0, n_group=2, topk_group=1)
QBASE_V3.update(mtp=False, prompt_len=32, greedy_len=16)
QFIXTURES = {
    "tiny-dsv3-q4": dict(base=QBASE_V3, dense_bits=8, expert_bits=4, group_size=32, seed=8000),
    "tiny-q8": dict(dense_bits=8, expert_bits=8, group_size=0, seed=3000),
    "tiny-q4": dict(dense_bits=8, expert_bits=4, group_size=0, seed=3100),
    "tiny-q4g32": dict(dense_bits=4, expert_bits=4, group_size=32, seed=3200),
    "tiny-q2": dict(dense_bits=8, expert_bits=2, group_size=0, seed=3300),
}


# trained-glm5: GLM-5's layout at a learnable size (64 routed experts, top-8,
# a shared expert, DSA indexer keeping 32 of up to 256 keys, an MTP layer),
# trained on CPython's standard library by tools/train_tiny.py (see
# docs/training.md). Its weights are bf16 (the router's correction bias f32);
# the reference is computed in f32 from them. It cannot be reseeded, so the
# prompt is the first run of held-out lines without near-ties.
TRAINED = {
    "trained-glm5": dict(
        config=dict(
            vocab_size=2048, hidden_size=128, intermediate_size=384, moe_intermediate_size=24,
            num_hidden_layers=4, first_k_dense_replace=1, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=32,
            qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=64, num_experts_per_tok=8,
            n_shared_experts=1, n_group=1, topk_group=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, index_n_heads=4, index_head_dim=32, index_topk=32,
            num_nextn_predict_layers=1,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
            hidden_act="silu", attention_bias=False, bos_token_id=0,
        ),
        mtp=True,
        config_eos=["<|endoftext|>", "<|user|>"],
        generation=dict(eos=["<|endoftext|>", "<|user|>", "<|observation|>"], do_sample=True, temperature=1.0, top_p=0.95),
        chat=dict(system="You write Python.", user="def fibonacci(n):", think=False, max_new=24),
        prompt_len=48, greedy_len=16,
    ),
}
# trained-dsv3: DeepSeek-V3's layout at the same size, trained the same way
# on the same text with trained-glm5's tokenizer: dense MLA attention (no
# indexer), group-limited routing (8 groups of 8 experts, the best 4
# groups kept, as DeepSeek-V3's 256 experts in 8 groups), one MTP layer.
TRAINED["trained-dsv3"] = dict(
    copy.deepcopy(TRAINED["trained-glm5"]), family="deepseek_v3", tokenizer="trained-glm5",
    config=dict({k: v for k, v in TRAINED["trained-glm5"]["config"].items() if not k.startswith("index_")}, n_group=8, topk_group=4))


def check_modeling_file():
    """Refuses a transformers whose glm_moe_dsa or deepseek_v3 predates the
    modern math."""
    idx = inspect.getsource(mdl.GlmMoeDsaIndexer.forward)
    att = inspect.getsource(mdl.GlmMoeDsaAttention.forward)
    problems = []
    if "apply_rotary_pos_emb_interleave" not in idx:
        problems.append("indexer does not use interleaved RoPE")
    if "F.relu" not in idx:
        problems.append("indexer scores are not passed through ReLU")
    if "apply_rotary_pos_emb_interleave" not in att:
        problems.append("MLA attention does not use interleaved RoPE")
    v3 = inspect.getsource(mdl_v3.DeepseekV3Attention)
    if "yarn_apply_mscale" not in v3 or "rope_interleave" not in v3:
        problems.append("deepseek_v3 attention lacks YaRN's mscale or the rope_interleave switch")
    v32 = inspect.getsource(mdl_v32.DeepseekV32Indexer.forward)
    if "apply_rotary_pos_emb(" not in v32 or "F.relu" not in v32:
        problems.append("deepseek_v32's indexer does not rotate halves or lacks the ReLU")
    if problems:
        sys.exit("transformers %s is too old for the oracle: %s" % (transformers.__version__, "; ".join(problems)))


def special_ids(tokdir, spec):
    """Stop and pad ids from the fixture's tokenizer, never hard-coded."""
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    tid = lambda s: t.token_to_id(s)
    ce = spec["config_eos"]
    return dict(eos=tid(ce) if isinstance(ce, str) else [tid(x) for x in ce], pad=tid("<|endoftext|>"),
                gen_eos=[tid(x) for x in spec["generation"]["eos"]])


def make_config(spec, ids):
    kw = dict(spec["config"])
    kw.update(spec.get("indexer_schedule", {}))
    kw.update(eos_token_id=ids["eos"], pad_token_id=ids["pad"])
    if family(spec)["config"] is Kimi_K25Config:  # the text model's fields go under text_config
        tie = kw.pop("tie_word_embeddings")
        kw = dict(text_config=dict(kw, model_type="kimi_k2", tie_word_embeddings=tie), vision_config=dict(K25_VISION),
                  tie_word_embeddings=tie, eos_token_id=ids["eos"], pad_token_id=ids["pad"])
    cfg = family(spec)["config"](**kw)
    for c in (cfg, getattr(cfg, "text_config", None)):
        if c is not None:
            c._attn_implementation = "eager"
            c._experts_implementation = "eager"
    return cfg


def text_config(cfg):
    return getattr(cfg, "text_config", cfg)


def config_json(spec, cfg):
    """config.json as transformers writes it; with an indexer schedule the
    explicit indexer_types list is replaced by the freq/offset keys, and a
    reload must give the same per-layer types."""
    d = cfg.to_dict()
    for k in list(d):
        if k.startswith("_"):
            del d[k]
    sched = spec.get("indexer_schedule")
    if sched:
        del d["indexer_types"]
        d.update(sched)
        again = GlmMoeDsaConfig(**{k: v for k, v in d.items() if k not in ("transformers_version", "model_type", "architectures")})
        assert again.indexer_types == cfg.indexer_types, (again.indexer_types, cfg.indexer_types)
    if spec.get("legacy_rope"):  # as DeepSeek-V3's config.json: rope_scaling {type} + rope_theta
        rp = dict(d.pop("rope_parameters"))
        d["rope_theta"] = rp.pop("rope_theta")
        rp["type"] = rp.pop("rope_type")
        d["rope_scaling"] = None if spec["legacy_rope"] == "null" and rp == {"type": "default"} else rp
        again = family(spec)["config"](rope_scaling=copy.deepcopy(d["rope_scaling"]), rope_theta=d["rope_theta"],
                                       max_position_embeddings=d["max_position_embeddings"])
        assert again.rope_parameters == cfg.rope_parameters, (again.rope_parameters, cfg.rope_parameters)
    if spec.get("model_type"):
        d["model_type"] = spec["model_type"]
    d["architectures"] = [family(spec)["arch"]]
    d.pop("transformers_version", None)
    return d


def randomize(model, seed):
    """Redraws every parameter: matrices N(0, 1/fan_in), embeddings N(0, 1),
    norm weights U(0.6, 1.4), the indexer LayerNorm bias N(0, 0.1), and the
    router correction bias U(-0.15, 0.15); q_a_proj and the latent rows of
    kv_a_proj_with_mqa are then scaled by LATENT_SCALE. Returns the generator,
    which goes on to draw an MTP layer."""
    g = torch.Generator().manual_seed(seed)
    redraw(model, g, text_config(model.config).kv_lora_rank)
    return g


def redraw(model, g, kv_lora_rank):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = 1.0 if "embed_tokens" in name else p.shape[-1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif name.endswith("k_norm.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_((torch.rand(b.shape, generator=g) - 0.5) * 0.3)
        # Make the q/kv latents small (variance ~1e-5) so the 1e-6 eps of
        # q_a_layernorm / kv_a_layernorm matters: an engine using the model's
        # rms_norm_eps (1e-5) there fails the oracle.
        for name, p in model.named_parameters():
            if name.endswith("q_a_proj.weight"):
                p.mul_(LATENT_SCALE)
            elif name.endswith("kv_a_proj_with_mqa.weight"):
                p[:kv_lora_rank].mul_(LATENT_SCALE)


def checkpoint_tensors(model, cfg, prefix=""):
    """The state dict with experts un-fused into the per-expert names of the
    real checkpoints (gate = first I rows of gate_up_proj, up = the rest)."""
    out = {}
    inter = text_config(cfg).moe_intermediate_size
    for k, v in model.state_dict(prefix=prefix).items():
        for a, b in (K25_NAMES if isinstance(cfg, Kimi_K25Config) else []):
            if k.startswith(a):
                k = b + k[len(a):]
                break
        v = v.detach().to(torch.float32).contiguous()
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            for e in range(v.shape[0]):
                out["%s%d.gate_proj.weight" % (base, e)] = v[e, :inter].clone()
                out["%s%d.up_proj.weight" % (base, e)] = v[e, inter:].clone()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out["%s%d.down_proj.weight" % (base, e)] = v[e].clone()
        else:
            out[k] = v.clone()
    return out


def stable_topk(scores, k):
    """The k largest along the last axis, equal scores to the earlier
    position (as colibri's indexer; torch.topk leaves the order of ties to the
    kernel)."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]


@torch.no_grad()
def indexer_forward(self, hidden_states, q_resid, position_embeddings, attention_mask, position_ids,
                    past_key_values=None, select=stable_topk):
    """GlmMoeDsaIndexer.forward (transformers 5.23) with `select` for its
    topk. A trained indexer's ReLU scores are often exactly 0 for many keys, so
    the k-th score can be a tie that the reference must break as the engine
    does; check_indexer_copy shows that the rest is transformers' own."""
    batch_size, seq_len, _ = hidden_states.shape
    cos, sin = position_embeddings
    q = self.wq_b(q_resid).view(batch_size, seq_len, self.n_heads, self.head_dim)
    q_rot, q_pass = torch.split(q, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
    k = self.k_norm(self.wk(hidden_states)).unsqueeze(2)
    k_rot, k_pass = torch.split(k, [self.qk_rope_head_dim, self.head_dim - self.qk_rope_head_dim], dim=-1)
    q_rot, k_rot = mdl.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
    q = torch.cat([q_rot, q_pass], dim=-1)
    k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
    if past_key_values is not None:
        k = past_key_values.update_indexer(k, self.layer_idx)
    scores = torch.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * self.softmax_scale)
    weights = self.weights_proj(hidden_states.to(self.weights_proj.weight.dtype)).float() * (self.n_heads ** -0.5)
    index_scores = torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)
    if attention_mask.dtype == torch.bool:
        index_scores = index_scores.masked_fill(~attention_mask, float("-inf"))
    else:
        index_scores = index_scores + attention_mask
    return select(index_scores, min(self.index_topk, index_scores.shape[-1])).to(torch.int32)


def check_indexer_copy(model, ids):
    """indexer_forward with torch.topk gives transformers' indices exactly."""
    seen = []
    hooks = [m.register_forward_hook(lambda m, a, kw, o: seen.append((m, a, kw, o)), with_kwargs=True)
             for m in model.modules() if isinstance(m, mdl.GlmMoeDsaIndexer)]
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    for m, a, kw, o in seen:
        got = indexer_forward(m, *a, **kw, select=lambda sc, k: sc.topk(k, dim=-1).indices)
        assert torch.equal(got, o), "indexer_forward is not transformers' GlmMoeDsaIndexer.forward"
    assert seen


def use_stable_topk(*modules):
    import types
    for mod in modules:
        for m in mod.modules():
            if isinstance(m, mdl.GlmMoeDsaIndexer):
                m.forward = types.MethodType(indexer_forward, m)


class Probe:
    """Records the smallest decision margins of one forward pass by
    recomputing the indexer scores and router choices from the module inputs
    (the modules themselves return only indices)."""

    def __init__(self, model, cfg, exact_ties=False):
        self.cfg = cfg
        self.exact_ties = exact_ties
        self.index_gap = float("inf")
        self.router_gap = float("inf")
        self.group_gap = float("inf")
        self.hooks = []
        for m in model.modules():
            if isinstance(m, (mdl.GlmMoeDsaIndexer, mdl_v32.DeepseekV32Indexer)):
                self.hooks.append(m.register_forward_hook(self.on_indexer, with_kwargs=True))
            elif isinstance(m, (mdl.GlmMoeDsaTopkRouter, mdl_v3.DeepseekV3TopkRouter, mdl_v32.DeepseekV32TopkRouter)):
                self.hooks.append(m.register_forward_hook(self.on_router))

    def close(self):
        for h in self.hooks:
            h.remove()

    def on_indexer(self, m, args, kwargs, out):
        hs, q_resid, (cos, sin), mask = args[0], args[1], args[2], args[3]
        b, s, _ = hs.shape
        q = m.wq_b(q_resid).view(b, s, m.n_heads, m.head_dim)
        q_rot, q_pass = torch.split(q, [m.qk_rope_head_dim, m.head_dim - m.qk_rope_head_dim], dim=-1)
        k = m.k_norm(m.wk(hs)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [m.qk_rope_head_dim, m.head_dim - m.qk_rope_head_dim], dim=-1)
        rope = mdl.apply_rotary_pos_emb_interleave if isinstance(m, mdl.GlmMoeDsaIndexer) else mdl_v32.apply_rotary_pos_emb
        q_rot, k_rot = rope(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], dim=-1)
        k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
        sc = torch.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * m.softmax_scale)
        w = m.weights_proj(hs).float() * (m.n_heads ** -0.5)
        idx = torch.matmul(w.unsqueeze(-2), sc).squeeze(-2)[0]  # [S, T]
        kk = m.index_topk
        for i in range(s):
            valid = i + 1  # no cache: query i sees keys 0..i
            if valid <= kk:
                continue
            v = torch.sort(idx[i, :valid], descending=True).values
            if self.exact_ties:  # equal scores go to the earlier key, so only distinct values need a margin
                d = (v[v != v[kk - 1]] - v[kk - 1]).abs()
                gap = float(d.min()) if d.numel() else float("inf")
            else:
                gap = float(v[kk - 1] - v[kk])
            self.index_gap = min(self.index_gap, gap)
            if gap > 1e-6:
                chosen = set(out[0, i].tolist())
                want = stable_topk(idx[i, :valid], kk) if self.exact_ties else torch.topk(idx[i, :valid], kk).indices
                assert chosen == set(want.tolist()), "probe disagrees with the indexer"

    def on_router(self, m, args, out):
        x = args[0].reshape(-1, m.hidden_dim).float()
        p = torch.sigmoid(x @ m.weight.float().t())
        c = p + m.e_score_correction_bias
        ng, per = m.num_group, m.num_experts // m.num_group
        if ng > 1:
            gs = c.view(-1, ng, per).topk(2, dim=-1)[0].sum(-1)
            v = torch.sort(gs, dim=-1, descending=True).values
            self.group_gap = min(self.group_gap, float((v[:, m.topk_group - 1] - v[:, m.topk_group]).min()))
            keep = torch.zeros_like(gs).scatter_(1, gs.topk(m.topk_group, dim=-1)[1], 1)
            c = c.masked_fill(~keep.unsqueeze(-1).expand(-1, ng, per).reshape(-1, m.num_experts).bool(), float("-inf"))
        v = torch.sort(c, dim=-1, descending=True).values
        self.router_gap = min(self.router_gap, float((v[:, m.top_k - 1] - v[:, m.top_k]).min()))


def write_configs(d, spec, cfg, ids):
    """config.json and generation_config.json of a fixture into d."""
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(spec, cfg), f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {k: v for k, v in spec["generation"].items() if k != "eos"}
    gen.update(eos_token_id=ids["gen_eos"], pad_token_id=ids["pad"])
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
        f.write("\n")


def logit_gap(logits):
    v = torch.topk(logits, 2, dim=-1).values
    return float((v[..., 0] - v[..., 1]).min())


def reference(model, cfg, prompt, greedy_len):
    """Teacher-forced logits over the prompt (no cache) and a greedy
    continuation through the KV cache, with each step's logits."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        tf = model(input_ids=ids, use_cache=False).logits[0]
        out = model(input_ids=ids, use_cache=True)
        past, last = out.past_key_values, out.logits[0, -1]
        greedy, steps = [], []
        for _ in range(greedy_len):
            nxt = int(torch.argmax(last))
            greedy.append(nxt)
            steps.append(last)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past, last = out.past_key_values, out.logits[0, -1]
        gen = model.generate(ids, max_new_tokens=greedy_len, min_new_tokens=greedy_len, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        assert gen[0, len(prompt):].tolist() == greedy, "generate() disagrees with the manual greedy loop"
    return tf, torch.stack(steps), greedy


def margins(model, cfg, full_ids, tf, steps, exact_ties=False):
    probe = Probe(model, cfg, exact_ties)
    with torch.no_grad():
        model(input_ids=torch.tensor([full_ids]), use_cache=False)
    probe.close()
    return dict(index=probe.index_gap, router=probe.router_gap, group=probe.group_gap,
                logit=min(logit_gap(tf), logit_gap(steps)))


def mtp_config(spec, ids, cfg):
    """The main config with one more layer: the MTP layer (index
    num_hidden_layers) is an MoE layer that runs its own indexer (if the
    family has one)."""
    kw = dict(spec["config"])
    kw.update(spec.get("indexer_schedule", {}))
    kw.update(eos_token_id=ids["eos"], pad_token_id=ids["pad"], num_hidden_layers=cfg.num_hidden_layers + 1)
    if family(spec)["config"] is GlmMoeDsaConfig:
        kw.update(mlp_layer_types=list(cfg.mlp_layer_types) + ["sparse"], indexer_types=list(cfg.indexer_types) + ["full"],
                  layer_types=list(cfg.layer_types) + ["indexed_attention"])
    elif family(spec)["config"] is DeepseekV32Config:
        kw.update(mlp_layer_types=list(cfg.mlp_layer_types) + ["sparse"])
    mcfg = family(spec)["config"](**kw)
    mcfg._attn_implementation = "eager"
    mcfg._experts_implementation = "eager"
    return mcfg


def make_mtp(spec, mcfg):
    """transformers' own decoder layer at index num_hidden_layers, plus the
    MTP parts (enorm, hnorm, eh_proj, shared_head.norm) as attributes, so that
    its state dict carries the checkpoint's names under model.layers.N."""
    n, dim, eps = mcfg.num_hidden_layers - 1, mcfg.hidden_size, mcfg.rms_norm_eps
    norm = fam_class(spec, "RMSNorm")
    layer = fam_class(spec, "DecoderLayer")(mcfg, n)
    layer.enorm = norm(dim, eps)
    layer.hnorm = norm(dim, eps)
    layer.eh_proj = nn.Linear(2 * dim, dim, bias=False)
    layer.shared_head = nn.Module()
    layer.shared_head.norm = norm(dim, eps)
    return layer.eval()


def mtp_apply(model, mtp, mcfg, hidden, emb):
    """The MTP layer on a batch: hidden [B, S, D] (main model's final-normed
    states) paired with emb [B, S, D] (embeddings of the next tokens), entry p
    at rope position p, causal as in GlmMoeDsaModel.forward. Returns the
    outputs before shared_head.norm and the logits. Keeps gradients (the
    trainer uses it); mtp_forward calls it without."""
    u = mtp.eh_proj(torch.cat([mtp.enorm(emb), mtp.hnorm(hidden)], dim=-1))
    pos = torch.arange(u.shape[1]).unsqueeze(0)
    mask = mdl.create_causal_mask(config=mcfg, inputs_embeds=u, attention_mask=None, past_key_values=None,
                                  position_ids=pos, allow_is_causal_skip=False)
    pe = model.model.rotary_emb(u, position_ids=pos)
    if isinstance(mtp, mdl.GlmMoeDsaDecoderLayer):
        o, _ = mtp(u, attention_mask=mask, position_ids=pos, past_key_values=None, use_cache=False,
                   position_embeddings=pe, prev_topk_indices=None)
    else:
        o = mtp(u, attention_mask=mask, position_ids=pos, past_key_values=None, use_cache=False, position_embeddings=pe)
    return o, model.lm_head(mtp.shared_head.norm(o))


def mtp_forward(model, mtp, mcfg, hidden, tokens):
    """The MTP layer over entries 0..S-1 at once, without a cache: entry p
    pairs hidden[p] with embed(tokens[p]) at rope position p, causal as in
    GlmMoeDsaModel.forward. Returns the outputs before shared_head.norm [S, D]
    and the logits [S, V]."""
    with torch.no_grad():
        emb = model.model.embed_tokens(torch.tensor([tokens]))
        o, logits = mtp_apply(model, mtp, mcfg, hidden.unsqueeze(0), emb)
    return o[0], logits[0]


def mtp_reference(model, mtp, mcfg, prompt, tf, g1, steps=3, exact_ties=False):
    """Teacher-forced MTP logits over the prompt (entry p pairs h_p with
    prompt[p+1], p = 0..n-2) and a chain of drafts after the prompt: step 1
    pairs h_{n-1} with g1, step k > 1 the previous step's output o with its
    draft. Each step recomputes the whole MTP sequence. Also returns the
    margins of the MTP layer's decisions over all these passes."""
    probe = Probe(mtp, mcfg, exact_ties)
    with torch.no_grad():
        h = model.model(input_ids=torch.tensor([prompt]), use_cache=False).last_hidden_state[0]
        assert torch.equal(model.lm_head(h), tf), "last_hidden_state does not give the teacher-forced logits"
    n = len(prompt)
    _, logits = mtp_forward(model, mtp, mcfg, h[: n - 1], prompt[1:])
    hs, toks, ids, chain = h, prompt[1:] + [g1], [g1], []
    for k in range(steps):
        o, lg = mtp_forward(model, mtp, mcfg, hs, toks)
        chain.append(lg[-1])
        d = int(torch.argmax(lg[-1]))
        if k + 1 < steps:
            ids.append(d)
        hs, toks = torch.cat([hs, o[-1:]]), toks + [d]
    probe.close()
    chain = torch.stack(chain)
    m = dict(index=probe.index_gap, router=probe.router_gap, group=probe.group_gap,
             logit=min(logit_gap(logits), logit_gap(chain)))
    return dict(logits=logits, chain_ids=ids, chain_logits=chain, margins=m)


def chat_reference(model, tokdir, chat, eos):
    """transformers' rendering of the chat template and its greedy generate()."""
    tok = AutoTokenizer.from_pretrained(tokdir)
    msgs = ([{"role": "system", "content": chat["system"]}] if chat["system"] else []) + [{"role": "user", "content": chat["user"]}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=chat["think"], tokenize=False)
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=chat["think"], tokenize=True, return_dict=False)
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    assert ids == tok.encode(text, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=chat["max_new"], do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[0])
    gen = out[0, len(ids):].tolist()
    return dict(system=chat["system"], user=chat["user"], think=chat["think"], text=text, prompt_ids=ids,
                generated_ids=gen, generated_text=tok.decode(gen, skip_special_tokens=False))


def fmt_row(row):
    return "[" + ",".join("%.9g" % float(x) for x in row.tolist()) + "]"


def write_ref(path, prompt, tf, greedy, steps, m, chat, mtp=None, extra=None):
    lines = ["{"]
    lines.append('  "format": "colibri-oracle-1",')
    lines.append('  "transformers": "%s",' % transformers.__version__)
    lines.append('  "torch": "%s",' % torch.__version__)
    lines.append('  "margins": {%s},' % ", ".join('"%s": %.6g' % (k, v if v != float("inf") else -1) for k, v in sorted(m.items())))
    lines.append('  "prompt_ids": %s,' % json.dumps(prompt))
    lines.append('  "argmax": %s,' % json.dumps(torch.argmax(tf, dim=-1).tolist()))
    lines.append('  "greedy_ids": %s,' % json.dumps(greedy))
    if chat:
        lines.append('  "chat": %s,' % json.dumps(chat, ensure_ascii=True, sort_keys=True))
    for k, v in sorted((extra or {}).items()):
        lines.append('  "%s": %s,' % (k, json.dumps(v, sort_keys=True)))
    lines.append('  "logits": [\n' + ",\n".join("    " + fmt_row(r) for r in tf) + "\n  ],")
    lines.append('  "greedy_logits": [\n' + ",\n".join("    " + fmt_row(r) for r in steps) + "\n  ]" + ("," if mtp else ""))
    if mtp:
        lines.append('  "mtp": {')
        lines.append('    "convention": %s,' % json.dumps(mtp["convention"]))
        lines.append('    "margins": {%s},' % ", ".join('"%s": %.6g' % (k, v if v != float("inf") else -1) for k, v in sorted(mtp["margins"].items())))
        lines.append('    "argmax": %s,' % json.dumps(torch.argmax(mtp["logits"], dim=-1).tolist()))
        lines.append('    "chain": {')
        lines.append('      "ids": %s,' % json.dumps(mtp["chain_ids"]))
        lines.append('      "logits": [\n' + ",\n".join("        " + fmt_row(r) for r in mtp["chain_logits"]) + "\n      ]")
        lines.append('    },')
        lines.append('    "logits": [\n' + ",\n".join("      " + fmt_row(r) for r in mtp["logits"]) + "\n    ]")
        lines.append('  }')
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def margins_ok(m):
    return m["index"] >= MIN_INDEX_GAP and m["router"] >= MIN_ROUTER_GAP and m["group"] >= MIN_ROUTER_GAP \
        and m["logit"] >= MIN_LOGIT_GAP


def build(name, spec, outdir):
    d = os.path.join(outdir, name)
    if spec.get("tokenizer"):  # shares another fixture's tokenizer files
        os.makedirs(d, exist_ok=True)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(outdir, spec["tokenizer"], fn), d)
    ids = special_ids(d, spec)
    cfg = make_config(spec, ids)
    mcfg = mtp_config(spec, ids, cfg) if spec.get("mtp") else None
    vocab = text_config(cfg).vocab_size
    mtp = mref = None
    for attempt in range(200):
        seed = spec["seed"] + attempt
        torch.manual_seed(seed)
        model = family(spec)["model"](cfg).eval()
        gw = randomize(model, seed)
        if mcfg:  # the MTP layer's weights continue the main model's stream
            mtp = make_mtp(spec, mcfg)
            redraw(mtp, gw, cfg.kv_lora_rank)
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(5, vocab, (spec["prompt_len"],), generator=g).tolist()
        tf, steps, greedy = reference(model, cfg, prompt, spec["greedy_len"])
        m = margins(model, cfg, prompt + greedy, tf, steps)
        ok = margins_ok(m)
        msg = "%s: seed %d margins %s" % (name, seed, {k: "%.2g" % v for k, v in m.items()})
        if mcfg:
            mref = mtp_reference(model, mtp, mcfg, prompt, tf, greedy[0])
            assert mref["chain_ids"][0] == int(torch.argmax(tf[-1])), "g_1 is not the last prompt row's argmax"
            ok = ok and margins_ok(mref["margins"])
            msg += " mtp %s" % {k: "%.2g" % v for k, v in mref["margins"].items()}
        print(msg + ("" if ok else " (rejected)"))
        if ok:
            break
    else:
        sys.exit("%s: no seed without near-ties" % name)
    os.makedirs(d, exist_ok=True)
    write_configs(d, spec, cfg, ids)
    tensors = checkpoint_tensors(model, cfg)
    if mcfg:
        extra = checkpoint_tensors(mtp, cfg, "model.layers.%d." % cfg.num_hidden_layers)
        assert not set(extra) & set(tensors)
        tensors.update(extra)
        mref["convention"] = MTP_CONVENTION.replace("{N}", str(cfg.num_hidden_layers))
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    if isinstance(cfg, Kimi_K25Config):  # transformers reads the release's names back into the same model
        again, info = family(spec)["model"].from_pretrained(d, output_loading_info=True, dtype=torch.float32,
                                                            attn_implementation="eager", experts_implementation="eager")
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
        with torch.no_grad():
            diff = float((again(input_ids=torch.tensor([prompt])).logits[0] - tf).abs().max())
        assert diff < 1e-4, "reloaded kimi_k25 differs by %g" % diff
    stop = sorted(set(([ids["eos"]] if isinstance(ids["eos"], int) else ids["eos"]) + ids["gen_eos"]))
    chat = chat_reference(model, d, spec["chat"], stop)
    write_ref(os.path.join(d, "ref.json"), prompt, tf, greedy, steps, m, chat, mref)


def load_checkpoint(module, tensors, cfg, prefix=""):
    """Loads checkpoint_tensors' layout (per-expert names, any float dtype)
    into module as f32; returns the names it used."""
    inter = text_config(cfg).moe_intermediate_size
    new, used = {}, set()

    def get(name):
        used.add(name)
        return tensors[name].to(torch.float32)

    for k, v in module.state_dict().items():
        n = prefix + k
        if k.endswith("mlp.experts.gate_up_proj"):
            base = n[: -len("gate_up_proj")]
            new[k] = torch.stack([torch.cat([get("%s%d.gate_proj.weight" % (base, e)), get("%s%d.up_proj.weight" % (base, e))])
                                  for e in range(v.shape[0])])
        elif k.endswith("mlp.experts.down_proj"):
            base = n[: -len("down_proj")]
            new[k] = torch.stack([get("%s%d.down_proj.weight" % (base, e)) for e in range(v.shape[0])])
        else:
            new[k] = get(n)
    module.load_state_dict(new, strict=True)
    return used


def perplexity(model, ids, window):
    """Perplexity as llama.cpp's perplexity tool and colibri --perplexity
    compute it: non-overlapping chunks of `window` tokens (a last partial
    chunk dropped), each from a fresh cache; in each chunk the positions
    window/2 .. window-2 predict their next token, nll in float64 from the
    f32 logits. Returns the perplexity, its standard error, the chunk and
    token counts, and the scored target ids."""
    nll, targets = [], []
    chunks = len(ids) // window
    with torch.no_grad():
        for c in range(chunks):
            x = ids[c * window:(c + 1) * window]
            lp = torch.log_softmax(model(input_ids=torch.tensor([x]), use_cache=False).logits[0].double(), dim=-1)
            for j in range(window // 2, window - 1):
                nll.append(-float(lp[j, x[j + 1]]))
                targets.append(x[j + 1])
    return perplexity_stats(nll) + (chunks, targets)


def perplexity_stats(nll):
    import math
    n = len(nll)
    mean = sum(nll) / n
    var = sum(v * v for v in nll) / n - mean * mean
    p = math.exp(mean)
    return p, p * math.sqrt(max(var, 0.0) / (n - 1)), n


def unigram_perplexity(counts, targets):
    """Add-one smoothed unigram model of the training split's token counts."""
    import math
    total, v = sum(counts), len(counts)
    return math.exp(sum(-math.log((counts[t] + 1) / (total + v)) for t in targets) / len(targets))


def heldout_head(text, tok, window, chunks=5):
    """The fewest first lines of text (each with its newline) whose tokens
    fill `chunks` windows."""
    lines = text.split("\n")
    for n in range(1, len(lines) + 1):
        head = "\n".join(lines[:n]) + "\n"
        if len(tok.encode(head, add_special_tokens=False).ids) >= chunks * window:
            return n, head
    raise SystemExit("heldout.txt is shorter than %d windows" % chunks)


def prompt_candidates(text, tok, lo, hi):
    """Runs of whole held-out lines, each start line in order, whose tokens
    number lo..hi: (first line, ids, the run's text)."""
    lines = text.split("\n")
    for i in range(len(lines)):
        if not lines[i].strip():
            continue
        for j in range(i + 1, len(lines) + 1):
            run = "\n".join(lines[i:j]) + "\n"
            ids = tok.encode(run, add_special_tokens=False).ids
            if len(ids) >= lo:
                if len(ids) <= hi:
                    yield i, ids, run
                break


SPEC_NGEN = 40  # tokens of the speculation reference


def spec_reference(model, cfg, mtp, mcfg, prompt, ngen=SPEC_NGEN):
    """Greedy decoding with one MTP draft per verifying forward (DRAFT=1),
    as spec.h runs it: after the prefill the first token is the main
    model's; each round at position pos (token x there, the main model's
    hidden row h_{pos-1} before it) drafts d = argmax MTP(h_{pos-1}, x),
    keeps it when it is the main model's greedy token at pos+1 (then the
    bonus token after it too) and moves on 2 positions, else 1; a round
    with one token left drafts nothing. Greedy output never depends on the
    drafts, so the MTP logits are the teacher-forced ones over the greedy
    sequence. Returns the greedy ids, the accept flag of each draft, and
    the margins of every decision (main and MTP)."""
    try:
        tf, steps, greedy = reference(model, cfg, prompt, ngen + 1)
    except AssertionError:  # generate() and the cached loop part at a near-tie: not this prompt
        return None, {"logit": 0.0}, {}
    full = prompt + greedy
    m = margins(model, cfg, full, tf, steps, exact_ties=True)
    probe = Probe(mtp, mcfg, True)
    with torch.no_grad():
        h = model.model(input_ids=torch.tensor([full]), use_cache=False).last_hidden_state[0]
    n = len(prompt)
    _, lg = mtp_forward(model, mtp, mcfg, h[: len(full) - 1], full[1:])
    probe.close()
    used = lg[n - 1:]
    d = [int(x) for x in torch.argmax(lg, dim=-1)]
    pos, left, accept = n, ngen - 1, []
    while left > 0:
        if left >= 2:
            ok = d[pos - 1] == full[pos + 1]
            accept.append(ok)
            pos, left = pos + (2 if ok else 1), left - (2 if ok else 1)
        else:
            pos, left = pos + 1, left - 1
    mm = dict(index=probe.index_gap, router=probe.router_gap, group=probe.group_gap, logit=logit_gap(used))
    return dict(greedy_ids=greedy[:ngen], accept=accept, drafted=len(accept), accepted=sum(accept)), m, mm


def router_choices(model, ids):
    """Each MoE layer's chosen experts at each position of a teacher-forced
    forward over ids, ascending: [MoE layer][position][topk] (transformers'
    top-k does not sort them)."""
    got = []
    hook = lambda m, args, out: got.append([sorted(r) for r in out[2].tolist()])
    hooks = [m.register_forward_hook(hook) for m in model.modules()
             if isinstance(m, (mdl.GlmMoeDsaTopkRouter, mdl_v3.DeepseekV3TopkRouter, mdl_v32.DeepseekV32TopkRouter))]
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    return got


SPEC_CHAINS = (2, 3, 4)  # drafts per verifying forward of the chained references


def spec_chain_reference(model, cfg, mtp, mcfg, prompt, k, ngen=SPEC_NGEN):
    """Greedy decoding with up to k chained MTP drafts per verifying
    forward (DRAFT=k, the guard off), as spec.h runs it: a round at
    position pos (token x there) drafts d1 = argmax MTP(h_{pos-1}, x) over
    the teacher-forced entries 0..pos-1, then d_{j+1} = argmax of the entry
    pairing the previous entry's output row with d_j, attending over the
    teacher-forced entries and the chain's own; k is cut to the tokens
    left minus one. The main model keeps the longest prefix of drafts equal
    to its greedy tokens, emits it and its own next token, and moves on.
    Returns (dict(rounds: drafts kept per round, drafted, accepted,
    verifies), the MTP decisions' margins); None when generate() and the
    cached greedy loop disagree."""
    try:
        tf, steps, greedy = reference(model, cfg, prompt, ngen + 1)
    except AssertionError:
        return None, {"logit": 0.0}
    full = prompt + greedy
    probe = Probe(mtp, mcfg, True)
    with torch.no_grad():
        h = model.model(input_ids=torch.tensor([full]), use_cache=False).last_hidden_state[0]
    o_tf, lg_tf = mtp_forward(model, mtp, mcfg, h[: len(full) - 1], full[1:])
    pos, left, rounds, used, drafted, verifies = len(prompt), ngen - 1, [], [], 0, 0
    while left > 0:
        kk = min(k, left - 1)
        a = 0
        verifies += 1
        drafted += kk
        if kk > 0:
            d, o_last, drafts = int(torch.argmax(lg_tf[pos - 1])), o_tf[pos - 1], []
            used.append(lg_tf[pos - 1])
            hs, toks = h[:pos], full[1:pos + 1]
            for j in range(kk):
                drafts.append(d)
                if j + 1 == kk:
                    break
                hs, toks = torch.cat([hs, o_last.unsqueeze(0)]), toks + [d]
                o, lg = mtp_forward(model, mtp, mcfg, hs, toks)
                o_last, d = o[-1], int(torch.argmax(lg[-1]))
                used.append(lg[-1])
            while a < kk and drafts[a] == full[pos + 1 + a]:
                a += 1
            rounds.append(a)
        pos, left = pos + a + 1, left - a - 1
    probe.close()
    mm = dict(index=probe.index_gap, router=probe.router_gap, group=probe.group_gap, logit=logit_gap(torch.stack(used)))
    return dict(rounds=rounds, drafted=drafted, accepted=sum(rounds), verifies=verifies), mm


def build_trained(name, spec, outdir, src=None, unigram_counts=None):
    """ref.json of a trained fixture from its committed weights (src, by
    default the fixture itself): the oracle reference on the first held-out
    prompt without near-ties, the MTP reference and the held-out perplexity.
    The unigram baseline needs the training split's token counts; without
    them the figure already in ref.json is kept."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    d = os.path.join(outdir, name)
    src = src or d
    if os.path.abspath(src) != os.path.abspath(d):
        os.makedirs(d, exist_ok=True)
        for fn in os.listdir(src):
            if fn != "ref.json" and not fn.startswith("."):
                shutil.copy(os.path.join(src, fn), d)
    unigram = None
    if unigram_counts is None:
        with open(os.path.join(src, "ref.json")) as f:
            unigram = json.load(f)["perplexity_detail"]["unigram"]
    ids = special_ids(d, spec)
    cfg = make_config(spec, ids)
    mcfg = mtp_config(spec, ids, cfg)
    torch.manual_seed(0)
    model = family(spec)["model"](cfg).eval()
    mtp = make_mtp(spec, mcfg)
    t = load_file(os.path.join(d, "model.safetensors"))
    used = load_checkpoint(model, t, cfg) | load_checkpoint(mtp, t, cfg, "model.layers.%d." % cfg.num_hidden_layers)
    assert used == set(t), "unused tensors: %s" % sorted(set(t) - used)[:5]
    if getattr(cfg, "index_topk", None):
        check_indexer_copy(model, torch.randint(0, cfg.vocab_size, (1, 4 * cfg.index_topk), generator=torch.Generator().manual_seed(0)))
    use_stable_topk(model, mtp)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "heldout.txt"), encoding="utf-8") as f:
        text = f.read()
    for line, prompt, _ in prompt_candidates(text, tok, spec["prompt_len"], spec["prompt_len"] + 16):
        tf, steps, greedy = reference(model, cfg, prompt, spec["greedy_len"])
        m = margins(model, cfg, prompt + greedy, tf, steps, exact_ties=True)
        mref = mtp_reference(model, mtp, mcfg, prompt, tf, greedy[0], exact_ties=True)
        ok = margins_ok(m) and margins_ok(mref["margins"])
        print("%s: held-out line %d margins %s mtp %s%s" % (name, line + 1, {k: "%.2g" % v for k, v in m.items()},
              {k: "%.2g" % v for k, v in mref["margins"].items()}, "" if ok else " (rejected)"))
        if ok:
            break
    else:
        sys.exit("%s: no held-out prompt without near-ties" % name)
    mref["convention"] = MTP_CONVENTION.replace("{N}", str(cfg.num_hidden_layers))
    routes = router_choices(model, prompt)
    W = cfg.max_position_embeddings
    ppl, err, n, chunks, targets = perplexity(model, tok.encode(text, add_special_tokens=False).ids, W)
    if unigram_counts is not None:
        unigram = unigram_perplexity(unigram_counts, targets)
    lines, head = heldout_head(text, tok, W)
    hppl, herr, hn, _, _ = perplexity(model, tok.encode(head, add_special_tokens=False).ids, W)
    print("%s: perplexity %.4f +/- %.4f over %d tokens (%d chunks of %d); unigram %.2f; first %d lines %.4f +/- %.4f"
          % (name, ppl, err, n, chunks, W, unigram, lines, hppl, herr))
    extra = {"routes": {"what": "the experts each MoE layer chose at each position of prompt_ids, teacher-forced, ascending ids", "experts": routes},
             "perplexity": ppl,
             "perplexity_detail": {"window": W, "chunks": chunks, "tokens": n, "stderr": err, "unigram": unigram},
             "perplexity_head": {"lines": lines, "bytes": len(head.encode("utf-8")), "perplexity": hppl, "stderr": herr,
                                 "tokens": hn}}
    for line, sprompt, run in prompt_candidates(text, tok, spec["prompt_len"], spec["prompt_len"] + 16):
        sref, m1, m2 = spec_reference(model, cfg, mtp, mcfg, sprompt)
        ok = sref is not None and margins_ok(m1) and margins_ok(m2)
        print("%s: speculation on held-out line %d: %s%s" % (name, line + 1, "%d of %d drafts kept" % (sref["accepted"], sref["drafted"]) if sref else
              "generate() and the cached greedy loop differ", "" if ok else " (rejected: margins %s mtp %s)" % (
                  {k: "%.2g" % v for k, v in m1.items()}, {k: "%.2g" % v for k, v in m2.items()})))
        if ok:
            extra["spec"] = dict(sref, text=run, prompt_ids=sprompt, ngen=SPEC_NGEN, draft=1)
            break
    else:
        sys.exit("%s: no held-out prompt without near-ties for the speculation reference" % name)
    chains = {}
    for k in SPEC_CHAINS:  # the same prompt with chained drafts, kept where every decision is clear
        cref, mm = spec_chain_reference(model, cfg, mtp, mcfg, extra["spec"]["prompt_ids"], k)
        ok = cref is not None and margins_ok(mm)
        print("%s: DRAFT=%d on the speculation prompt: %s%s" % (name, k, "%d of %d drafts kept in %d verifying forwards" % (
            cref["accepted"], cref["drafted"], cref["verifies"]) if cref else "-", "" if ok else " (not kept: margins %s)" % (
            {kk: "%.2g" % v for kk, v in mm.items()})))
        if ok:
            chains[str(k)] = cref
    if chains:
        extra["spec"]["chains"] = chains
    stop = sorted(set(ids["eos"] + ids["gen_eos"]))
    chat = chat_reference(model, d, spec["chat"], stop)
    write_ref(os.path.join(d, "ref.json"), prompt, tf, greedy, steps, m, chat, mref, extra)
    return model, mtp, mcfg


def dequantize(w, s, O, I):
    """An independent reading of the container formats: the format from the
    byte counts (int8 O·I, int4 O·ceil(I/2), int2 O·ceil(I/4); int4 with more
    than O scales is grouped with the first candidate gs whose O·ceil(I/gs)
    scales match), nibbles offset-binary low-first, crumbs offset-binary
    from the low bits."""
    import numpy as np
    w, s = w.reshape(-1), s.reshape(-1).astype(np.float32)
    nb, ns = w.size, s.size
    if nb == O * I:
        q = w.view(np.int8).reshape(O, I).astype(np.float32)
    elif nb == O * ((I + 1) // 2):
        b = w.reshape(O, (I + 1) // 2)
        q = np.stack([b & 15, b >> 4], axis=2).reshape(O, -1)[:, :I].astype(np.float32) - 8
    elif nb == O * ((I + 3) // 4):
        b = w.reshape(O, (I + 3) // 4)
        q = np.stack([(b >> (2 * j)) & 3 for j in range(4)], axis=2).reshape(O, -1)[:, :I].astype(np.float32) - 2
    else:
        raise SystemExit("dequantize: %d bytes match no format for [%d, %d]" % (nb, O, I))
    if ns == O:
        return q * s[:, None]
    for gs in (16, 32, 48, 64, 96, 128, 192, 256):
        if gs <= I and ns == O * ((I + gs - 1) // gs):
            return q * np.repeat(s.reshape(O, -1), gs, axis=1)[:, :I]
    raise SystemExit("dequantize: %d scales match no group size for [%d, %d]" % (ns, O, I))


def load_container(model, d):
    """Loads a colibri container's weights (dequantized) into model."""
    import numpy as np
    from safetensors.numpy import load_file
    t = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            t.update(load_file(os.path.join(d, fn)))
    inter = model.config.moe_intermediate_size
    sd = model.state_dict()
    new = {}

    def weight(name, shape):
        if name + ".qs" in t:
            return dequantize(t[name], t[name + ".qs"], shape[0], shape[1])
        return t[name].astype(np.float32).reshape(shape)

    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            E, O2, I = v.shape
            parts = []
            for e in range(E):
                parts.append(np.concatenate([weight("%s%d.gate_proj.weight" % (base, e), (inter, I)),
                                             weight("%s%d.up_proj.weight" % (base, e), (inter, I))]))
            new[k] = torch.from_numpy(np.stack(parts))
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            E, O, I = v.shape
            new[k] = torch.from_numpy(np.stack([weight("%s%d.down_proj.weight" % (base, e), (O, I)) for e in range(E)]))
        elif v.dim() == 2:
            new[k] = torch.from_numpy(np.ascontiguousarray(weight(k, tuple(v.shape))))
        else:
            new[k] = torch.from_numpy(t[k].astype(np.float32).reshape(tuple(v.shape)))
    model.load_state_dict(new, strict=True)


def build_quantized(name, q, outdir, converter):
    """Seeds until the quantized model has no near-ties: base f32 model →
    checkpoint → colibri-convert → dequantized into transformers → ref."""
    import subprocess
    spec = dict(q.get("base", QBASE), seed=q["seed"])
    d = os.path.join(outdir, name)
    tokdir = os.path.join(outdir, spec["tokenizer"])
    ids = special_ids(tokdir, spec)
    cfg = make_config(spec, ids)
    for attempt in range(400):
        seed = q["seed"] + attempt
        torch.manual_seed(seed)
        model = family(spec)["model"](cfg).eval()
        randomize(model, seed)
        src = tempfile.mkdtemp()
        try:
            write_configs(src, spec, cfg, ids)
            for fn in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(tokdir, fn), src)
            save_file(checkpoint_tensors(model, cfg), os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
            if os.path.exists(d):
                shutil.rmtree(d)
            args = [converter, src, d, "--dense-bits", str(q["dense_bits"]), "--expert-bits", str(q["expert_bits"]), "--threads", "1"]
            if q["group_size"]:
                args += ["--group-size", str(q["group_size"])]
            p = subprocess.run(args, capture_output=True, text=True)
            if p.returncode:
                sys.exit("%s: colibri-convert failed:\n%s" % (name, p.stderr))
        finally:
            shutil.rmtree(src)
        load_container(model, d)
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(5, cfg.vocab_size, (spec["prompt_len"],), generator=g).tolist()
        tf, steps, greedy = reference(model, cfg, prompt, spec["greedy_len"])
        m = margins(model, cfg, prompt + greedy, tf, steps)
        ok = m["index"] >= MIN_INDEX_GAP and m["router"] >= MIN_ROUTER_GAP_Q and m["group"] >= MIN_ROUTER_GAP_Q \
            and m["logit"] >= MIN_LOGIT_GAP
        print("%s: seed %d margins %s%s" % (name, seed, {k: "%.2g" % v for k, v in m.items()}, "" if ok else " (rejected)"))
        if ok:
            break
    else:
        sys.exit("%s: no seed without near-ties" % name)
    for fn in os.listdir(d):  # the converter's resume manifest and lock are not fixture files
        if not fn.endswith((".json", ".safetensors")) or fn.startswith("colibri-convert"):
            os.remove(os.path.join(d, fn))
    write_ref(os.path.join(d, "ref.json"), prompt, tf, greedy, steps, m, None)


# Source fixtures: Hugging Face checkpoints colibri-convert reads (not
# loadable by the engine as they are), each with the reference of the model
# transformers loads from them. sources/kimi-k25-int4: tiny-kimi-k25's shape
# with dimensions that are multiples of the group size, its routed experts in
# compressed-tensors' pack-quantized int4 (symmetric, groups of 32 along the
# input, bf16 scales) as Kimi K2.5 ships them; packed by compressed_tensors'
# own pack_to_int32 and read back by transformers' compressed-tensors loader.
SOURCES = {
    "sources/kimi-k25-int4": dict(copy.deepcopy(FIXTURES["tiny-kimi-k25"]), seed=9700, group_size=32),
}
SOURCES["sources/kimi-k25-int4"]["config"].update(moe_intermediate_size=32, intermediate_size=96)


def pack_int4_experts(tensors, gs):
    """Replaces each routed expert's weight by weight_packed / weight_scale /
    weight_shape: q = clamp(round(w / s), -8, 7) with s = absmax / 7.5 per
    group, as compressed_tensors stores a symmetric int4 group scheme."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    out = {}
    for k, v in tensors.items():
        if ".mlp.experts." not in k or not k.endswith("_proj.weight"):
            out[k] = v
            continue
        O, I = v.shape
        assert I % gs == 0, (k, I)
        s = (v.view(O, I // gs, gs).abs().amax(-1) / 7.5).clamp(min=1e-8).to(torch.bfloat16)
        q = torch.clamp(torch.round(v.view(O, I // gs, gs) / s.float().unsqueeze(-1)), -8, 7).view(O, I).to(torch.int8)
        base = k[: -len("weight")]
        out[base + "weight_packed"] = pack_to_int32(q, 4)
        out[base + "weight_scale"] = s
        out[base + "weight_shape"] = torch.tensor([O, I], dtype=torch.int32)
    return out


def dequantize_experts(model, packed, gs):
    """Sets the model's routed experts to the packed checkpoint's exact
    values in f32, w = q * s, q unpacked by compressed_tensors'
    unpack_from_int32 (transformers' loader rounds the products to the bf16
    of the scales; the checkpoint means the exact products)."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    def w(base):
        shape = torch.Size(packed[base + "weight_shape"].tolist())
        q = unpack_from_int32(packed[base + "weight_packed"], 4, shape)
        return q.float() * packed[base + "weight_scale"].float().repeat_interleave(gs, dim=1)

    with torch.no_grad():
        for li, layer in enumerate(model.model.language_model.layers):
            if not hasattr(layer.mlp, "experts"):
                continue
            ex = layer.mlp.experts
            for e in range(ex.gate_up_proj.shape[0]):
                base = "language_model.model.layers.%d.mlp.experts.%d." % (li, e)
                ex.gate_up_proj[e] = torch.cat([w(base + "gate_proj."), w(base + "up_proj.")])
                ex.down_proj[e] = w(base + "down_proj.")


def build_source_int4(name, spec, outdir):
    """A pack-quantized Kimi K2.5 checkpoint and transformers' reference of
    it, seeded until the loaded model has no near-ties."""
    d = os.path.join(outdir, name)
    tokdir = os.path.join(outdir, spec["tokenizer"])
    ids = special_ids(tokdir, spec)
    cfg = make_config(spec, ids)
    gs = spec["group_size"]
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
          "config_groups": {"group_0": {"targets": [r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$"], "format": "pack-quantized",
                                        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                                                    "group_size": gs, "dynamic": False}}},
          "ignore": ["lm_head"]}
    for attempt in range(200):
        seed = spec["seed"] + attempt
        torch.manual_seed(seed)
        model = family(spec)["model"](cfg).eval()
        randomize(model, seed)
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        conf = config_json(spec, cfg)
        conf["text_config"]["quantization_config"] = qc
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(conf, f, indent=2, sort_keys=True)
            f.write("\n")
        gen = {k: v for k, v in spec["generation"].items() if k != "eos"}
        gen.update(eos_token_id=ids["gen_eos"], pad_token_id=ids["pad"])
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(gen, f, indent=2, sort_keys=True)
            f.write("\n")
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokdir, fn), d)
        packed = pack_int4_experts(checkpoint_tensors(model, cfg), gs)
        save_file(packed, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        dequantize_experts(model, packed, gs)
        loaded, info = family(spec)["model"].from_pretrained(d, output_loading_info=True, dtype=torch.float32,
                                                             attn_implementation="eager", experts_implementation="eager")
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
        for a, b in zip(model.model.language_model.layers, loaded.model.language_model.layers):
            if hasattr(a.mlp, "experts"):  # transformers' loader gives the same weights, rounded to the scales' bf16
                for n in ("gate_up_proj", "down_proj"):
                    x, y = getattr(a.mlp.experts, n), getattr(b.mlp.experts, n)
                    assert torch.equal(x.detach().to(y.dtype), y.detach()), "transformers reads the packed experts otherwise"
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(5, text_config(cfg).vocab_size, (spec["prompt_len"],), generator=g).tolist()
        tf, steps, greedy = reference(model, text_config(cfg), prompt, spec["greedy_len"])
        m = margins(model, text_config(cfg), prompt + greedy, tf, steps)
        ok = margins_ok(m)
        print("%s: seed %d margins %s%s" % (name, seed, {k: "%.2g" % v for k, v in m.items()}, "" if ok else " (rejected)"))
        if ok:
            break
    else:
        sys.exit("%s: no seed without near-ties" % name)
    write_ref(os.path.join(d, "ref.json"), prompt, tf, greedy, steps, m, None)


def all_names(outdir):
    """Every fixture SHA256SUMS lists; a trained one once it has been trained."""
    return sorted(FIXTURES) + sorted(QFIXTURES) + sorted(SOURCES) + \
        sorted(n for n in TRAINED if os.path.exists(os.path.join(outdir, n, "model.safetensors")))


def write_hashes(outdir, names):
    lines = []
    for name in sorted(names) + ["tokenizer"]:
        d = os.path.join(outdir, name)
        for fn in sorted(os.listdir(d)):
            if fn.startswith("."):  # a run's .coli_usage is not a fixture
                continue
            with open(os.path.join(d, fn), "rb") as f:
                lines.append("%s  %s/%s" % (hashlib.sha256(f.read()).hexdigest(), name, fn))
    with open(os.path.join(outdir, "SHA256SUMS"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    ap.add_argument("--only", action="append", help="build only this fixture (repeatable)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare with --out")
    ap.add_argument("--converter", default=os.path.join(os.path.dirname(__file__), "..", "colibri-convert"),
                    help="colibri-convert binary (make builds it) for the quantized fixtures")
    a = ap.parse_args()
    check_modeling_file()
    torch.set_num_threads(1)  # fixed reduction order, so reruns are byte-identical
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    names = a.only or sorted(FIXTURES) + sorted(QFIXTURES) + sorted(SOURCES) + \
        [n for n in sorted(TRAINED) if os.path.exists(os.path.join(a.out, n, "model.safetensors"))]
    root = tempfile.mkdtemp() if a.check else None
    target = os.path.join(root, "tests", "fixtures") if root else a.out
    for d in ("tiny-glm5", "tiny-glm52", "tokenizer"):
        os.makedirs(os.path.join(target, d), exist_ok=True)
    oracle_tokenizer.write_all(os.path.normpath(os.path.join(target, "..", "..")))
    for n in names:
        if n in QFIXTURES:
            build_quantized(n, QFIXTURES[n], target, os.path.abspath(a.converter))
        elif n in SOURCES:
            build_source_int4(n, SOURCES[n], target)
        elif n in TRAINED:  # from the committed weights (tools/train_tiny.py trains them)
            build_trained(n, TRAINED[n], target, src=os.path.join(a.out, n))
        else:
            build(n, FIXTURES[n], target)
    if not a.check:
        write_hashes(a.out, all_names(a.out))
        return
    bad = []
    for n in names + ["tokenizer"]:
        cmp = filecmp.dircmp(os.path.join(target, n), os.path.join(a.out, n))
        bad += ["%s/%s" % (n, f) for f in cmp.diff_files + cmp.left_only + cmp.right_only if not f.startswith(".")]
        bad += ["%s/%s" % (n, f) for f in cmp.common_files if not filecmp.cmp(os.path.join(target, n, f), os.path.join(a.out, n, f), shallow=False)]
    shutil.rmtree(root)
    if bad:
        sys.exit("regenerated fixtures differ: " + ", ".join(sorted(set(bad))))
    print("fixtures reproduce byte for byte")


if __name__ == "__main__":
    main()
