/* config.h — a model directory's config.json (and generation_config.json)
 * read strictly into coli_config: every dimension bounded, every field that
 * changes the math either honoured or refused by name, the per-layer MLP
 * and indexer kinds derived as transformers derives them (docs/model.md
 * §1). Errors name the file and the field. Prefix: cfg_, coli_config_.
 * Must not: read tensors or the environment, or allocate in proportion to
 * anything but the layer count. */
#ifndef COLI_CONFIG_H
#define COLI_CONFIG_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>

#include "json.h"

#define MAX_EOS 16

/* The model families one forward pass serves; each difference between them
 * is a property below, set once here from config.json. */
typedef enum { ARCH_GLM_MOE_DSA, ARCH_DEEPSEEK_V3, ARCH_DEEPSEEK_V32 } coli_arch;

typedef struct {
    coli_arch arch;
    const char *model_type; /* config.json's model_type (static) */
    int has_indexer;        /* DSA lightning indexer on the layers idx_full marks (glm_moe_dsa, deepseek_v32) */
    int rope_interleave;    /* RoPE rotates pairs (2i, 2i+1) (and de-interleaves), else halves (i, i + d/2) */
    int index_rope_interleave; /* the indexer's RoPE: pairs (glm_moe_dsa) or halves (deepseek_v32) */
    float attn_scale;       /* softmax scale: qk_head^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN */
    /* RoPE: rope_theta, and YaRN when rope_yarn (docs/model.md §3) */
    int rope_yarn, rope_orig_max, rope_truncate;
    double rope_factor, rope_beta_fast, rope_beta_slow, rope_attn_factor;
    int vocab, dim, n_layers, n_heads;
    int q_lora, kv_lora, qk_nope, qk_rope, qk_head, v_head; /* q_lora 0: no query latent, one q_proj */
    int inter, moe_inter, n_experts, topk, n_shared, n_group, topk_group, norm_topk;
    float route_scale, rms_eps;
    double rope_theta;
    int index_topk, index_heads, index_dim;
    int max_pos, tie_embed;
    const char *wprefix;     /* tensor names' prefix in the checkpoint (static): "" or kimi_k25's "language_model." */
    int n_mtp;               /* num_nextn_predict_layers: MTP layers after the last one */
    unsigned char *moe;      /* [n_layers + 1] 1 = MoE MLP, 0 = dense MLP; [n_layers]: the MTP layer */
    unsigned char *idx_full; /* [n_layers + 1] 1 = own indexer, 0 = shared   */
    int eos[MAX_EOS], n_eos;
    /* sampling defaults from generation_config.json (gen_sample = do_sample) */
    int gen_sample, gen_top_k;
    float gen_temp, gen_top_p, gen_min_p;
} coli_config;

typedef struct {
    const js_doc *d;
    int root;
    const char *path;
    char *err;
    size_t errlen;
    const char *wrapper; /* the multimodal model_type whose text_config root is (static), or NULL */
} cfg_reader;

static inline int cfg_fail(cfg_reader *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s: %s%s", r->path, r->wrapper ? "text_config: " : "", msg);
    return -1;
}

/* Integer field `key` in [lo, hi]; `def` < lo means required. */
static inline int cfg_int(cfg_reader *r, const char *key, long long lo, long long hi, long long def, int *out) {
    int n = js_get(r->d, r->root, key);
    if (n < 0 || js_typeof(r->d, n) == JS_NULL) {
        if (def < lo) return cfg_fail(r, "missing field '%s'", key);
        *out = (int)def;
        return 0;
    }
    if (!js_is_int(r->d, n)) return cfg_fail(r, "field '%s' must be an integer", key);
    long long v = js_int(r->d, n);
    if (v < lo || v > hi) return cfg_fail(r, "field '%s'=%lld is outside [%lld, %lld]", key, v, lo, hi);
    *out = (int)v;
    return 0;
}

static inline int cfg_num(cfg_reader *r, const js_doc *d, int obj, const char *key, double lo, double hi, double def, double *out) {
    int n = js_get(d, obj, key);
    if (n < 0 || js_typeof(d, n) == JS_NULL) {
        if (def < lo) return cfg_fail(r, "missing field '%s'", key);
        *out = def;
        return 0;
    }
    if (!js_is_num(d, n)) return cfg_fail(r, "field '%s' must be a number", key);
    double v = js_num(d, n);
    if (!(v >= lo && v <= hi)) return cfg_fail(r, "field '%s'=%g is outside [%g, %g]", key, v, lo, hi);
    *out = v;
    return 0;
}

static inline int cfg_bool(cfg_reader *r, const char *key, int def, int *out) {
    int n = js_get(r->d, r->root, key);
    if (n < 0 || js_typeof(r->d, n) == JS_NULL) { *out = def; return 0; }
    if (!js_is_bool(r->d, n)) return cfg_fail(r, "field '%s' must be true or false", key);
    *out = js_typeof(r->d, n) == JS_TRUE;
    return 0;
}

/* Reads a per-layer list of two words (e.g. "full"/"shared") into flags. */
static inline int cfg_layer_words(cfg_reader *r, int node, const char *key, const char *one, const char *zero, int n, unsigned char *out) {
    if (js_typeof(r->d, node) != JS_ARR || js_count(r->d, node) != n)
        return cfg_fail(r, "field '%s' must be a list of %d strings", key, n);
    int i = 0;
    for (int c = js_first(r->d, node); c >= 0; c = js_next(r->d, c), i++) {
        const char *s = js_str(r->d, c);
        if (s && !strcmp(s, one)) out[i] = 1;
        else if (s && !strcmp(s, zero)) out[i] = 0;
        else return cfg_fail(r, "%s[%d] must be \"%s\" or \"%s\"", key, i, one, zero);
    }
    return 0;
}

/* Adds the ids of an eos_token_id field (int or list) to the stop set. */
static inline int cfg_eos(cfg_reader *r, const js_doc *d, int obj, coli_config *c) {
    int n = js_get(d, obj, "eos_token_id");
    if (n < 0 || js_typeof(d, n) == JS_NULL) return 0;
    int single = js_typeof(d, n) != JS_ARR;
    for (int e = single ? n : js_first(d, n); e >= 0; e = single ? -1 : js_next(d, e)) {
        if (!js_is_int(d, e) || js_int(d, e) < 0 || js_int(d, e) >= c->vocab)
            return cfg_fail(r, "eos_token_id entries must be token ids below vocab_size %d", c->vocab);
        int id = (int)js_int(d, e), dup = 0;
        for (int k = 0; k < c->n_eos; k++) dup |= c->eos[k] == id;
        if (dup) continue;
        if (c->n_eos == MAX_EOS) return cfg_fail(r, "more than %d eos_token_id entries", MAX_EOS);
        c->eos[c->n_eos++] = id;
    }
    return 0;
}

/* q_lora_rank: an integer, or null for one uncompressed q_proj (as
 * Moonlight-16B-A3B ships; transformers' deepseek_v3 builds q_proj then),
 * read as q_lora = 0. The indexer reads the query latent, so its families
 * need one. Absent stays an error: transformers' default (1536) is no
 * checkpoint's fact. */
static inline int cfg_q_lora(cfg_reader *r, coli_config *c) {
    int n = js_get(r->d, r->root, "q_lora_rank");
    if (n < 0 || js_typeof(r->d, n) != JS_NULL) return cfg_int(r, "q_lora_rank", 1, 1 << 20, -1, &c->q_lora);
    if (c->has_indexer) return cfg_fail(r, "q_lora_rank is null (one q_proj), but %s's indexer reads the query latent: it needs a q_lora_rank", c->model_type);
    c->q_lora = 0;
    return 0;
}

static inline int cfg_dims(cfg_reader *r, coli_config *c) {
    const int B = 1 << 20, ds = c->arch != ARCH_GLM_MOE_DSA; /* transformers' defaults differ by family */
    const int max_pos = c->arch == ARCH_DEEPSEEK_V3 ? 4096 : c->arch == ARCH_DEEPSEEK_V32 ? 163840 : 202752;
    if (cfg_int(r, "vocab_size", 1, 1 << 24, -1, &c->vocab) || cfg_int(r, "hidden_size", 1, B, -1, &c->dim) ||
        cfg_int(r, "num_hidden_layers", 1, 1024, -1, &c->n_layers) ||
        cfg_int(r, "num_attention_heads", 1, 1024, -1, &c->n_heads) || cfg_q_lora(r, c) ||
        cfg_int(r, "kv_lora_rank", 1, B, -1, &c->kv_lora) || cfg_int(r, "qk_nope_head_dim", 1, 65536, -1, &c->qk_nope) ||
        cfg_int(r, "qk_rope_head_dim", 2, 65536, -1, &c->qk_rope) || cfg_int(r, "v_head_dim", 1, 65536, -1, &c->v_head) ||
        cfg_int(r, "intermediate_size", 1, B, -1, &c->inter) ||
        cfg_int(r, "moe_intermediate_size", 1, B, -1, &c->moe_inter) ||
        cfg_int(r, "n_routed_experts", 1, 65536, -1, &c->n_experts) ||
        cfg_int(r, "num_experts_per_tok", 1, 1024, -1, &c->topk) ||
        cfg_int(r, "n_shared_experts", 0, 64, 1, &c->n_shared) || cfg_int(r, "n_group", 1, 65536, ds ? 8 : 1, &c->n_group) ||
        cfg_int(r, "topk_group", 1, 65536, ds ? 4 : 1, &c->topk_group) ||
        cfg_int(r, "max_position_embeddings", 1, 1 << 30, max_pos, &c->max_pos))
        return -1;
    if (c->has_indexer &&
        (cfg_int(r, "index_topk", 1, 1 << 24, 2048, &c->index_topk) || cfg_int(r, "index_n_heads", 1, 1024, ds ? 64 : 32, &c->index_heads) ||
         cfg_int(r, "index_head_dim", 1, 65536, 128, &c->index_dim)))
        return -1;
    int kvh;
    if (cfg_int(r, "num_key_value_heads", 1, 1024, c->n_heads, &kvh)) return -1;
    if (kvh != c->n_heads) return cfg_fail(r, "num_key_value_heads=%d must equal num_attention_heads=%d (MLA)", kvh, c->n_heads);
    c->qk_head = c->qk_nope + c->qk_rope;
    if (c->qk_rope % 2) return cfg_fail(r, "qk_rope_head_dim=%d must be even", c->qk_rope);
    if (c->has_indexer && c->index_dim < c->qk_rope) return cfg_fail(r, "index_head_dim=%d is smaller than qk_rope_head_dim=%d", c->index_dim, c->qk_rope);
    if (c->topk > c->n_experts) return cfg_fail(r, "num_experts_per_tok=%d exceeds n_routed_experts=%d", c->topk, c->n_experts);
    if (c->n_experts % c->n_group) return cfg_fail(r, "n_routed_experts=%d is not a multiple of n_group=%d", c->n_experts, c->n_group);
    if (c->topk_group > c->n_group) return cfg_fail(r, "topk_group=%d exceeds n_group=%d", c->topk_group, c->n_group);
    if (c->n_group > 1 && c->n_experts / c->n_group < 2)
        return cfg_fail(r, "n_group=%d leaves fewer than 2 experts per group", c->n_group);
    if (c->topk > c->topk_group * (c->n_experts / c->n_group))
        return cfg_fail(r, "num_experts_per_tok=%d exceeds the experts in topk_group=%d groups", c->topk, c->topk_group);
    return 0;
}

/* YaRN's correction dimension for num_rot rotations (transformers'
 * find_correction_dim, in double as there). */
static inline double cfg_yarn_dim_(double num_rot, int dim, double base, int orig_max) {
    return (dim * log(orig_max / (num_rot * 2 * M_PI))) / (2 * log(base));
}

/* RoPE: rope_parameters {rope_type, rope_theta, ...}, or the older
 * rope_scaling {type, ...} beside a top-level rope_theta, as transformers
 * standardizes them. "default" and "yarn" are supported; YaRN reads factor
 * (required), attention_factor, mscale, mscale_all_dim, beta_fast (0 or
 * absent: 32), beta_slow (0 or absent: 1), original_max_position_embeddings
 * (a top-level field wins, else max_position_embeddings) and truncate. */
static inline int cfg_rope(cfg_reader *r, coli_config *c) {
    const js_doc *d = r->d;
    int rp = js_get(d, r->root, "rope_parameters"), legacy = 0;
    if (rp < 0 || js_typeof(d, rp) == JS_NULL) rp = js_get(d, r->root, "rope_scaling"), legacy = 1;
    if (rp >= 0 && js_typeof(d, rp) == JS_NULL) rp = -1;
    if (rp >= 0 && js_typeof(d, rp) != JS_OBJ) return cfg_fail(r, "field '%s' must be an object", legacy ? "rope_scaling" : "rope_parameters");
    const char *type = "default";
    if (rp >= 0) {
        int t = js_get(d, rp, "rope_type");
        if (t < 0) t = js_get(d, rp, "type");
        if (t >= 0 && !js_str(d, t)) return cfg_fail(r, "rope_type must be a string");
        if (t >= 0) type = js_str(d, t);
    }
    c->rope_yarn = !strcmp(type, "yarn");
    if (!c->rope_yarn && strcmp(type, "default")) return cfg_fail(r, "rope_type '%s' is not supported (\"default\" or \"yarn\")", type);
    int th = rp >= 0 ? js_get(d, rp, "rope_theta") : -1;
    if (cfg_num(r, d, th >= 0 && js_typeof(d, th) != JS_NULL ? rp : r->root, "rope_theta", 1, 1e12, c->arch != ARCH_GLM_MOE_DSA ? 10000 : -1,
                &c->rope_theta))
        return -1;
    double prf = 1;
    if (rp >= 0 && cfg_num(r, d, rp, "partial_rotary_factor", 0, 1, 1, &prf)) return -1;
    if (rp >= 0 && prf != 1) return cfg_fail(r, "partial_rotary_factor=%g is not supported", prf);
    double scale = 1.0 / sqrt((double)c->qk_head);
    c->rope_attn_factor = 1;
    if (c->rope_yarn) {
        double ms = 0, msa = 0, om = 0;
        if (cfg_num(r, d, rp, "factor", 1e-6, 1e6, -1, &c->rope_factor) || cfg_num(r, d, rp, "mscale", 0, 1e6, 0, &ms) ||
            cfg_num(r, d, rp, "mscale_all_dim", 0, 1e6, 0, &msa) || cfg_num(r, d, rp, "beta_fast", 0, 1e6, 32, &c->rope_beta_fast) ||
            cfg_num(r, d, rp, "beta_slow", 0, 1e6, 1, &c->rope_beta_slow) ||
            cfg_num(r, d, rp, "attention_factor", 0, 1e6, 0, &c->rope_attn_factor))
            return -1;
        int af = js_get(d, rp, "attention_factor");
        if (af >= 0 && js_typeof(d, af) != JS_NULL && c->rope_attn_factor <= 0) return cfg_fail(r, "attention_factor must be positive");
        if (c->rope_beta_fast == 0) c->rope_beta_fast = 32;
        if (c->rope_beta_slow == 0) c->rope_beta_slow = 1;
        int top = js_get(d, r->root, "original_max_position_embeddings");
        if (cfg_num(r, d, top >= 0 && js_typeof(d, top) != JS_NULL ? r->root : rp, "original_max_position_embeddings", 1, 1 << 30, c->max_pos, &om))
            return -1;
        c->rope_orig_max = (int)om;
        int tr = js_get(d, rp, "truncate");
        if (tr >= 0 && !js_is_bool(d, tr)) return cfg_fail(r, "truncate must be true or false");
        c->rope_truncate = tr < 0 || js_typeof(d, tr) == JS_TRUE;
        double f = c->rope_factor;
#define COLI_MSCALE(m) (f <= 1 ? 1.0 : 0.1 * (m) * log(f) + 1.0)
        if (c->rope_attn_factor == 0) c->rope_attn_factor = ms != 0 && msa != 0 ? COLI_MSCALE(ms) / COLI_MSCALE(msa) : COLI_MSCALE(1);
        if (msa != 0) scale *= COLI_MSCALE(msa) * COLI_MSCALE(msa);
#undef COLI_MSCALE
    }
    c->attn_scale = (float)scale;
    return 0;
}

static inline int cfg_floats(cfg_reader *r, coli_config *c) {
    double v = 0;
    if (cfg_num(r, r->d, r->root, "routed_scaling_factor", 0, 1e6, 2.5, &v)) return -1;
    c->route_scale = (float)v;
    if (cfg_num(r, r->d, r->root, "rms_norm_eps", 1e-12, 1, c->arch != ARCH_GLM_MOE_DSA ? 1e-6 : 1e-5, &v)) return -1;
    c->rms_eps = (float)v;
    if (cfg_bool(r, "norm_topk_prob", 1, &c->norm_topk) || cfg_bool(r, "tie_word_embeddings", 0, &c->tie_embed)) return -1;
    return cfg_rope(r, c);
}

/* 1 if string field `key` is absent or null, or exactly `want` (no embedded
 * NUL); 0 otherwise. */
static inline int cfg_str_is(cfg_reader *r, const char *key, const char *want) {
    int n = js_get(r->d, r->root, key);
    if (n < 0 || js_typeof(r->d, n) == JS_NULL) return 1;
    return js_str(r->d, n) && js_str_len(r->d, n) == strlen(want) && !strcmp(js_str(r->d, n), want);
}

/* The families by model_type. kimi_k2 is DeepSeek-V3's architecture under
 * Moonshot's name (its config.json maps to DeepseekV3Config); deepseek_v32
 * is GLM-5's layout with an indexer on every layer that rotates halves. */
static inline int cfg_family(cfg_reader *r, coli_config *c) {
    static const struct {
        const char *type;
        coli_arch arch;
    } fam[] = {{"glm_moe_dsa", ARCH_GLM_MOE_DSA}, {"deepseek_v3", ARCH_DEEPSEEK_V3}, {"kimi_k2", ARCH_DEEPSEEK_V3}, {"deepseek_v32", ARCH_DEEPSEEK_V32}};
    int mt = js_get(r->d, r->root, "model_type");
    size_t nf = sizeof fam / sizeof fam[0];
    if (r->wrapper && (mt < 0 || js_typeof(r->d, mt) == JS_NULL)) { /* transformers' default text model */
        c->arch = ARCH_DEEPSEEK_V3, c->model_type = r->wrapper;
        return 0;
    }
    if (!js_str(r->d, mt)) return cfg_fail(r, "missing field 'model_type'");
    for (size_t i = 0; i < nf; i++)
        if (cfg_str_is(r, "model_type", fam[i].type) && (!r->wrapper || fam[i].arch == ARCH_DEEPSEEK_V3)) {
            c->arch = fam[i].arch, c->model_type = r->wrapper ? r->wrapper : fam[i].type;
            c->has_indexer = c->arch != ARCH_DEEPSEEK_V3;
            c->index_rope_interleave = c->arch == ARCH_GLM_MOE_DSA;
            return 0;
        }
    if (r->wrapper) return cfg_fail(r, "model_type '%s' is not supported here (deepseek_v3, kimi_k2)", js_str(r->d, mt));
    return cfg_fail(r, "model_type '%s' is not supported (glm_moe_dsa, deepseek_v3, deepseek_v32, kimi_k2, kimi_k25)",
                    js_str(r->d, mt));
}

/* The string and flag fields: the choices transformers hard-codes for the
 * family (hidden_act silu, sigmoid scoring, noaux_tc top-k, no biases,
 * every layer from first_k_dense_replace on MoE; glm_moe_dsa and
 * deepseek_v32 always rotate interleaved pairs in the attention,
 * deepseek_v3 as rope_interleave says); a file asking for anything else
 * describes another model and is refused. */
static inline int cfg_strings(cfg_reader *r, coli_config *c) {
    if (cfg_family(r, c)) return -1;
    static const char *const want[][2] = {{"hidden_act", "silu"}, {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!cfg_str_is(r, want[i][0], want[i][1]))
            return cfg_fail(r, "field '%s' must be \"%s\" for %s", want[i][0], want[i][1], c->model_type);
    static const char *const off[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < 2; i++) {
        int v = 0;
        if (cfg_bool(r, off[i], 0, &v)) return -1;
        if (v) return cfg_fail(r, "%s=true is not supported", off[i]);
    }
    if (cfg_bool(r, "rope_interleave", 1, &c->rope_interleave)) return -1;
    if (c->arch != ARCH_DEEPSEEK_V3) {
        int v = c->index_rope_interleave;
        if (!c->rope_interleave) return cfg_fail(r, "rope_interleave=false is not supported (%s rotates interleaved pairs)", c->model_type);
        if (cfg_bool(r, "indexer_rope_interleave", v, &v)) return -1;
        if (v != c->index_rope_interleave)
            return cfg_fail(r, "indexer_rope_interleave=%s is not supported (%s's indexer rotates %s)", v ? "true" : "false",
                            c->model_type, c->index_rope_interleave ? "interleaved pairs" : "halves");
    } else {
        int f;
        if (cfg_int(r, "moe_layer_freq", 1, 1, 1, &f)) return -1; /* DeepSeek's own code: MoE iff l % freq == 0 */
    }
    return 0;
}

/* Fields transformers derives rather than reads (head_dim is the rotary
 * dimension, qk_head_dim = nope + rope): a file that states them must
 * agree, or it describes another model. */
static inline int cfg_derived(cfg_reader *r, coli_config *c) {
    int v;
    if (cfg_int(r, "head_dim", 1, 65536, c->qk_rope, &v)) return -1;
    if (v != c->qk_rope) return cfg_fail(r, "head_dim=%d disagrees with qk_rope_head_dim=%d (glm_moe_dsa's head_dim is the rotary dimension)", v, c->qk_rope);
    if (cfg_int(r, "qk_head_dim", 1, 1 << 17, c->qk_head, &v)) return -1;
    if (v != c->qk_head)
        return cfg_fail(r, "qk_head_dim=%d disagrees with qk_nope_head_dim + qk_rope_head_dim = %d", v, c->qk_head);
    return cfg_int(r, "num_nextn_predict_layers", 0, 16, 0, &c->n_mtp);
}

/* Per-layer MLP kind and indexer kind, as transformers derives them:
 * mlp_layer_types or first_k_dense_replace; every layer (deepseek_v32), or
 * indexer_types, or index_topk_pattern, or the index_topk_freq / index_skip_topk_offset rule
 * (layer i is full iff max(i - offset + 1, 0) % freq == 0). */
static inline int cfg_layer_kinds(cfg_reader *r, coli_config *c) {
    int L = c->n_layers;
    c->moe = (unsigned char *)calloc((size_t)L + 1, 1); /* + the MTP layer's, set by the loader */
    c->idx_full = (unsigned char *)calloc((size_t)L + 1, 1);
    if (!c->moe || !c->idx_full) return cfg_fail(r, "out of memory");
    if (!c->has_indexer) { /* every layer from first_k_dense_replace on is MoE */
        int fk;
        if (cfg_int(r, "first_k_dense_replace", 0, L, 3 < L ? 3 : L, &fk)) return -1;
        for (int i = fk; i < L; i++) c->moe[i] = 1;
        return 0;
    }
    int mlt = js_get(r->d, r->root, "mlp_layer_types");
    if (mlt >= 0 && js_typeof(r->d, mlt) != JS_NULL) {
        if (cfg_layer_words(r, mlt, "mlp_layer_types", "sparse", "dense", L, c->moe)) return -1;
    } else {
        int fk;
        if (cfg_int(r, "first_k_dense_replace", 0, L, 3 < L ? 3 : L, &fk)) return -1;
        for (int i = fk; i < L; i++) c->moe[i] = 1;
    }
    if (c->arch == ARCH_DEEPSEEK_V32) { /* every layer runs its own indexer; transformers reads no schedule */
        memset(c->idx_full, 1, (size_t)L);
        return 0;
    }
    int it = js_get(r->d, r->root, "indexer_types"), pat = js_get(r->d, r->root, "index_topk_pattern");
    if (it >= 0 && js_typeof(r->d, it) != JS_NULL) {
        if (cfg_layer_words(r, it, "indexer_types", "full", "shared", L, c->idx_full)) return -1;
    } else if (js_str(r->d, pat)) {
        const char *p = js_str(r->d, pat);
        if ((int)strlen(p) != L) return cfg_fail(r, "index_topk_pattern must have %d letters", L);
        for (int i = 0; i < L; i++) {
            if (p[i] != 'F' && p[i] != 'S') return cfg_fail(r, "index_topk_pattern[%d] must be 'F' or 'S'", i);
            c->idx_full[i] = p[i] == 'F';
        }
    } else if (pat >= 0 && js_typeof(r->d, pat) != JS_NULL) {
        if (cfg_layer_words(r, pat, "index_topk_pattern", "full", "shared", L, c->idx_full)) return -1;
    } else {
        int freq, off;
        if (cfg_int(r, "index_topk_freq", 0, 1 << 20, 1, &freq) || cfg_int(r, "index_skip_topk_offset", -(1 << 20), 1 << 20, 2, &off)) return -1;
        if (freq < 1) freq = 1;
        for (int i = 0; i < L; i++) {
            int v = i - off + 1;
            c->idx_full[i] = (v < 0 ? 0 : v) % freq == 0;
        }
    }
    if (!c->idx_full[0]) return cfg_fail(r, "layer 0 must run its own indexer (indexer type \"full\")");
    return 0;
}

static inline void coli_config_free(coli_config *c) {
    free(c->moe);
    free(c->idx_full);
    c->moe = c->idx_full = NULL;
}

/* kimi_k25 (Kimi K2.5) wraps its text model: config.json's text_config
 * (a deepseek_v3 / kimi_k2 config) is the root the other readers see, the
 * tensors sit under "language_model.", and the top-level
 * tie_word_embeddings (default true) decides the output layer, as
 * transformers 5.23's Kimi_K25Config and its weight renaming have it. The
 * vision tower is not read. */
static inline int cfg_wrapper(cfg_reader *r, coli_config *c) {
    if (!cfg_str_is(r, "model_type", "kimi_k25") || js_get(r->d, r->root, "model_type") < 0) return 0;
    int tc = js_get(r->d, r->root, "text_config");
    if (js_typeof(r->d, tc) != JS_OBJ) return cfg_fail(r, "kimi_k25: missing object 'text_config'");
    r->root = tc, r->wrapper = "kimi_k25";
    c->wprefix = "language_model.";
    return 0;
}

/* Sampling defaults of generation_config.json: do_sample, temperature,
 * top_p, top_k, min_p (transformers' defaults when absent). */
static inline int cfg_sampling(cfg_reader *r, coli_config *c) {
    double t = 0, p = 0, mp = 0;
    int k;
    if (cfg_bool(r, "do_sample", 0, &c->gen_sample) || cfg_num(r, r->d, r->root, "temperature", 0, 100, 1.0, &t) ||
        cfg_num(r, r->d, r->root, "top_p", 0, 1, 1.0, &p) || cfg_int(r, "top_k", 0, 1 << 24, 50, &k) ||
        cfg_num(r, r->d, r->root, "min_p", 0, 1, 0, &mp))
        return -1;
    c->gen_temp = (float)t, c->gen_top_p = (float)p, c->gen_top_k = k, c->gen_min_p = (float)mp;
    return 0;
}

/* Loads <dir>/config.json (+ generation_config.json for stop ids and
 * sampling defaults). */
static inline int coli_config_load(coli_config *c, const char *dir, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->gen_temp = 1.0f, c->gen_top_p = 1.0f, c->gen_top_k = 50;
    char path[4096], gpath[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    js_doc *d = js_load_object(path, 16u << 20, err, errlen);
    if (!d) return -1;
    cfg_reader r = {d, d->root, path, err, errlen, NULL};
    c->wprefix = "";
    cfg_reader top = r; /* the wrapper's own fields */
    int rc = cfg_wrapper(&r, c), tie = -1;
    if (!rc && r.wrapper && cfg_bool(&top, "tie_word_embeddings", 1, &tie)) rc = -1;
    if (!rc) rc = cfg_strings(&r, c);
    if (!rc) rc = cfg_dims(&r, c);
    if (!rc) rc = cfg_derived(&r, c);
    if (!rc) rc = cfg_floats(&r, c);
    if (!rc) rc = cfg_layer_kinds(&r, c);
    if (!rc) rc = cfg_eos(&r, d, r.root, c);
    if (!rc && r.wrapper) rc = cfg_eos(&top, d, d->root, c), c->tie_embed = tie;
    js_free(d);
    if (rc) return rc;
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir);
    if (!(d = js_load_object(gpath, 1u << 20, err, errlen))) return errno == ENOENT ? 0 : -1;
    cfg_reader g = {d, d->root, gpath, err, errlen, NULL};
    rc = cfg_eos(&g, d, d->root, c);
    if (!rc) rc = cfg_sampling(&g, c);
    js_free(d);
    return rc;
}

/* ---- MoE layers: model layer l ↔ MoE layer k (the store's numbering) */

/* MoE layer index of model layer `layer` (the count of MoE layers before it). */
static inline int moe_index(const coli_config *c, int layer) {
    int k = 0;
    for (int i = 0; i < layer; i++) k += c->moe[i];
    return k;
}

static inline int n_moe_layers(const coli_config *c) { return moe_index(c, c->n_layers); }

/* Model layer of MoE layer k (n_layers: the MTP layer, when the loader
 * marked it MoE). */
static inline int moe_layer(const coli_config *c, int k) {
    for (int l = 0; l <= c->n_layers; l++)
        if (c->moe[l] && k-- == 0) return l;
    return -1;
}

/* Usage history rows ([n_layers][E], model layers) → counts per MoE layer
 * ([n_moe_layers][E]). */
static inline void usage_to_moe(const coli_config *c, const uint64_t *rows, uint64_t *moe) {
    for (int k = 0, n = n_moe_layers(c); k < n; k++)
        memcpy(moe + (size_t)k * c->n_experts, rows + (size_t)moe_layer(c, k) * c->n_experts, (size_t)c->n_experts * 8);
}

#endif
