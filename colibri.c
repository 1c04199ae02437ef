/* colibri.c — GLM-5 (glm_moe_dsa) inference: config, weights, the forward
 * pass (MLA with a compressed KV cache, the DSA lightning indexer, dense MLP
 * and MoE with routed experts read from disk on demand), the run modes and
 * main.
 *
 * The math follows Hugging Face transformers' modeling_glm_moe_dsa.py
 * (float32 reference): see shared notes glm5-model.md §2. Mechanisms live in
 * the headers (st.h safetensors, quant.h kernels, env.h knobs, compat.h OS);
 * this file reads as the model it runs.
 *
 * Exit codes: 0 ok, 1 oracle mismatch, 2 bad input or configuration. */
#include "compat.h"
#include "env.h"
#include "io.h"
#include "json.h"
#include "kernels.h"
#include "quant.h"
#include "st.h"
#include "store.h"
#include "telemetry.h"
#include "tier.h"
#include "tok.h"
#include "sample.h"

#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define COLI_VERSION "0.1.0"
#define EXIT_MISMATCH 1
#define EXIT_INPUT 2
#define ORACLE_TOL 1e-3 /* max |Δlogit| against an f32 transformers reference */
#define MAX_EOS 16

static int coli_nthreads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int coli_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* ------------------------------------------------------------------ config */

typedef struct {
    int vocab, dim, n_layers, n_heads;
    int q_lora, kv_lora, qk_nope, qk_rope, qk_head, v_head;
    int inter, moe_inter, n_experts, topk, n_shared, n_group, topk_group, norm_topk;
    float route_scale, rms_eps;
    double rope_theta;
    int index_topk, index_heads, index_dim;
    int max_pos, tie_embed;
    unsigned char *moe;      /* [n_layers] 1 = MoE MLP, 0 = dense MLP        */
    unsigned char *idx_full; /* [n_layers] 1 = own indexer, 0 = shared       */
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
} cfg_reader;

static int cfg_fail(cfg_reader *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s: %s", r->path, msg);
    return -1;
}

/* Integer field `key` in [lo, hi]; `def` < lo means required. */
static int cfg_int(cfg_reader *r, const char *key, long long lo, long long hi, long long def, int *out) {
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

static int cfg_num(cfg_reader *r, const js_doc *d, int obj, const char *key, double lo, double hi, double def, double *out) {
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

static int cfg_bool(cfg_reader *r, const char *key, int def, int *out) {
    int n = js_get(r->d, r->root, key);
    if (n < 0 || js_typeof(r->d, n) == JS_NULL) { *out = def; return 0; }
    if (!js_is_bool(r->d, n)) return cfg_fail(r, "field '%s' must be true or false", key);
    *out = js_typeof(r->d, n) == JS_TRUE;
    return 0;
}

/* Reads a per-layer list of two words (e.g. "full"/"shared") into flags. */
static int cfg_layer_words(cfg_reader *r, int node, const char *key, const char *one, const char *zero, int n, unsigned char *out) {
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
static int cfg_eos(cfg_reader *r, const js_doc *d, int obj, coli_config *c) {
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

static int cfg_dims(cfg_reader *r, coli_config *c) {
    const int B = 1 << 20;
    if (cfg_int(r, "vocab_size", 1, 1 << 24, -1, &c->vocab) || cfg_int(r, "hidden_size", 1, B, -1, &c->dim) ||
        cfg_int(r, "num_hidden_layers", 1, 1024, -1, &c->n_layers) ||
        cfg_int(r, "num_attention_heads", 1, 1024, -1, &c->n_heads) || cfg_int(r, "q_lora_rank", 1, B, -1, &c->q_lora) ||
        cfg_int(r, "kv_lora_rank", 1, B, -1, &c->kv_lora) || cfg_int(r, "qk_nope_head_dim", 1, 65536, -1, &c->qk_nope) ||
        cfg_int(r, "qk_rope_head_dim", 2, 65536, -1, &c->qk_rope) || cfg_int(r, "v_head_dim", 1, 65536, -1, &c->v_head) ||
        cfg_int(r, "intermediate_size", 1, B, -1, &c->inter) ||
        cfg_int(r, "moe_intermediate_size", 1, B, -1, &c->moe_inter) ||
        cfg_int(r, "n_routed_experts", 1, 65536, -1, &c->n_experts) ||
        cfg_int(r, "num_experts_per_tok", 1, 1024, -1, &c->topk) ||
        cfg_int(r, "n_shared_experts", 0, 64, 1, &c->n_shared) || cfg_int(r, "n_group", 1, 65536, 1, &c->n_group) ||
        cfg_int(r, "topk_group", 1, 65536, 1, &c->topk_group) ||
        cfg_int(r, "index_topk", 1, 1 << 24, 2048, &c->index_topk) ||
        cfg_int(r, "index_n_heads", 1, 1024, 32, &c->index_heads) ||
        cfg_int(r, "index_head_dim", 1, 65536, 128, &c->index_dim) ||
        cfg_int(r, "max_position_embeddings", 1, 1 << 30, 202752, &c->max_pos))
        return -1;
    int kvh;
    if (cfg_int(r, "num_key_value_heads", 1, 1024, c->n_heads, &kvh)) return -1;
    if (kvh != c->n_heads) return cfg_fail(r, "num_key_value_heads=%d must equal num_attention_heads=%d (MLA)", kvh, c->n_heads);
    c->qk_head = c->qk_nope + c->qk_rope;
    if (c->qk_rope % 2) return cfg_fail(r, "qk_rope_head_dim=%d must be even", c->qk_rope);
    if (c->index_dim < c->qk_rope) return cfg_fail(r, "index_head_dim=%d is smaller than qk_rope_head_dim=%d", c->index_dim, c->qk_rope);
    if (c->topk > c->n_experts) return cfg_fail(r, "num_experts_per_tok=%d exceeds n_routed_experts=%d", c->topk, c->n_experts);
    if (c->n_experts % c->n_group) return cfg_fail(r, "n_routed_experts=%d is not a multiple of n_group=%d", c->n_experts, c->n_group);
    if (c->topk_group > c->n_group) return cfg_fail(r, "topk_group=%d exceeds n_group=%d", c->topk_group, c->n_group);
    if (c->n_group > 1 && c->n_experts / c->n_group < 2)
        return cfg_fail(r, "n_group=%d leaves fewer than 2 experts per group", c->n_group);
    if (c->topk > c->topk_group * (c->n_experts / c->n_group))
        return cfg_fail(r, "num_experts_per_tok=%d exceeds the experts in topk_group=%d groups", c->topk, c->topk_group);
    return 0;
}

static int cfg_floats(cfg_reader *r, coli_config *c) {
    double v;
    if (cfg_num(r, r->d, r->root, "routed_scaling_factor", 0, 1e6, 2.5, &v)) return -1;
    c->route_scale = (float)v;
    if (cfg_num(r, r->d, r->root, "rms_norm_eps", 1e-12, 1, 1e-5, &v)) return -1;
    c->rms_eps = (float)v;
    if (cfg_bool(r, "norm_topk_prob", 1, &c->norm_topk) || cfg_bool(r, "tie_word_embeddings", 0, &c->tie_embed)) return -1;
    int rp = js_get(r->d, r->root, "rope_parameters");
    if (rp >= 0 && js_typeof(r->d, rp) != JS_NULL) {
        if (js_typeof(r->d, rp) != JS_OBJ) return cfg_fail(r, "field 'rope_parameters' must be an object");
        int rt = js_get(r->d, rp, "rope_type");
        if (rt >= 0 && (!js_str(r->d, rt) || strcmp(js_str(r->d, rt), "default")))
            return cfg_fail(r, "rope_parameters.rope_type '%s' is not supported (only \"default\")", js_str(r->d, rt) ? js_str(r->d, rt) : "?");
        if (cfg_num(r, r->d, rp, "rope_theta", 1, 1e12, -1, &c->rope_theta)) return -1;
    } else {
        int rs = js_get(r->d, r->root, "rope_scaling");
        if (rs >= 0 && js_typeof(r->d, rs) != JS_NULL) return cfg_fail(r, "rope_scaling is not supported");
        if (cfg_num(r, r->d, r->root, "rope_theta", 1, 1e12, -1, &c->rope_theta)) return -1;
    }
    return 0;
}

static int cfg_strings(cfg_reader *r) {
    int mt = js_get(r->d, r->root, "model_type");
    if (!js_str(r->d, mt)) return cfg_fail(r, "missing field 'model_type'");
    if (strcmp(js_str(r->d, mt), "glm_moe_dsa")) return cfg_fail(r, "model_type '%s' is not supported (expected glm_moe_dsa)", js_str(r->d, mt));
    int act = js_get(r->d, r->root, "hidden_act");
    if (act >= 0 && (!js_str(r->d, act) || strcmp(js_str(r->d, act), "silu")))
        return cfg_fail(r, "hidden_act must be \"silu\"");
    int ab = 0;
    if (cfg_bool(r, "attention_bias", 0, &ab)) return -1;
    if (ab) return cfg_fail(r, "attention_bias=true is not supported");
    return 0;
}

/* Per-layer MLP kind and indexer kind, as transformers derives them:
 * mlp_layer_types or first_k_dense_replace; indexer_types, or
 * index_topk_pattern, or the index_topk_freq / index_skip_topk_offset rule
 * (layer i is full iff max(i - offset + 1, 0) % freq == 0). */
static int cfg_layer_kinds(cfg_reader *r, coli_config *c) {
    int L = c->n_layers;
    c->moe = (unsigned char *)calloc((size_t)L, 1);
    c->idx_full = (unsigned char *)calloc((size_t)L, 1);
    if (!c->moe || !c->idx_full) return cfg_fail(r, "out of memory");
    int mlt = js_get(r->d, r->root, "mlp_layer_types");
    if (mlt >= 0 && js_typeof(r->d, mlt) != JS_NULL) {
        if (cfg_layer_words(r, mlt, "mlp_layer_types", "sparse", "dense", L, c->moe)) return -1;
    } else {
        int fk;
        if (cfg_int(r, "first_k_dense_replace", 0, L, 3 < L ? 3 : L, &fk)) return -1;
        for (int i = fk; i < L; i++) c->moe[i] = 1;
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

static void coli_config_free(coli_config *c) {
    free(c->moe);
    free(c->idx_full);
    c->moe = c->idx_full = NULL;
}

/* Sampling defaults of generation_config.json: do_sample, temperature,
 * top_p, top_k, min_p (transformers' defaults when absent). */
static int cfg_sampling(cfg_reader *r, coli_config *c) {
    double t, p, mp;
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
static int coli_config_load(coli_config *c, const char *dir, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->gen_temp = 1.0f, c->gen_top_p = 1.0f, c->gen_top_k = 50;
    char path[4096], gpath[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    js_doc *d = js_load_object(path, 16u << 20, err, errlen);
    if (!d) return -1;
    cfg_reader r = {d, d->root, path, err, errlen};
    int rc = cfg_strings(&r);
    if (!rc) rc = cfg_dims(&r, c);
    if (!rc) rc = cfg_floats(&r, c);
    if (!rc) rc = cfg_layer_kinds(&r, c);
    if (!rc) rc = cfg_eos(&r, d, d->root, c);
    js_free(d);
    if (rc) return rc;
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir);
    if (!(d = js_load_object(gpath, 1u << 20, err, errlen))) return errno == ENOENT ? 0 : -1;
    cfg_reader g = {d, d->root, gpath, err, errlen};
    rc = cfg_eos(&g, d, d->root, c);
    if (!rc) rc = cfg_sampling(&g, c);
    js_free(d);
    return rc;
}

/* ----------------------------------------------------------------- weights */

typedef struct {
    float *in_norm, *post_norm;          /* [dim]                             */
    qt_tensor q_a, q_b, kv_a, kv_b, o;   /* MLA projections                   */
    float *q_a_norm, *kv_a_norm;         /* [q_lora], [kv_lora]               */
    qt_tensor iq, ik, iw;                /* indexer wq_b, wk, weights_proj    */
    float *ik_norm_w, *ik_norm_b;        /* [index_dim] LayerNorm             */
    qt_tensor gate, up, down;            /* dense MLP or shared experts       */
    float *router, *router_bias;         /* [n_experts][dim], [n_experts]     */
} coli_layer;

typedef struct {
    float *lat;   /* [n_layers][ctx][kv_lora] normalized latent */
    float *rope;  /* [n_layers][ctx][qk_rope] roped shared key  */
    float *ikey;  /* [n_full][ctx][index_dim] indexer keys      */
    int *full_slot; /* [n_layers] index into ikey, -1 for shared layers */
    int ctx;
} coli_kv;

/* Scratch for a forward of up to max_s positions, allocated once. */
typedef struct {
    int max_s;
    float *x, *a, *qlat, *q, *ckv, *attn, *tmp, *mlp_g, *mlp_u, *moe_acc;
    float *qi, *iw, *rlogit, *xs, *ys, *eg, *eu;
    float *logits;
    int *sel, *nsel;           /* [max_s][index_topk] chosen keys, count (-1 = all) */
    int *route_e, *rows;       /* [max_s][topk] chosen experts; row lists */
    float *route_w, *route_tmp;
    float *yk;                 /* [max_s][topk][dim] each routed expert's output rows */
    float *hlat, *hout, *hkv;  /* attention: [heads][max_s][kv_lora] latents, [max_s][v_head], [ctx][nope + v_head] */
    int *uniq;                 /* [n_experts] distinct experts of a batch */
    uint8_t *used;             /* [n_experts] */
    float *cos, *sin;          /* [ctx][qk_rope/2] */
    float **thr;               /* per-thread attention/indexer scratch */
    size_t thr_floats;
} coli_scratch;

typedef struct {
    coli_config c;
    st_index st;
    coli_layer *L;
    qt_tensor embed;            /* [vocab][dim] */
    float *final_norm;          /* [dim] */
    qt_tensor lm_head;
    xs_store xs;                /* routed experts: pinned set + LRU */
    io_ctx io;                  /* expert reads */
    int pilot, pilot_real, pilot_k; /* router lookahead: hints / real loads, predictions per row */
    int *pred;                  /* [max_s * pilot_k] predicted experts scratch */
    uint8_t *pinned;            /* [n_moe][n_experts] pinned flags (for re-pinning) */
    coli_kv kv;
    coli_scratch sc;
    tel_stats tel;
    int absorb;                 /* -1 auto, 0 reconstruct, 1 absorbed */
    int ubatch;
    int measure;                /* sizing pass: validate and count bytes, allocate nothing */
    int dense_bits, expert_bits, group_size; /* load-time quantization of float weights (0 = keep) */
    int any_int;                /* some weight is in an integer format */
    mm_ctx mm;                  /* matmul kernels (CPU level, IDOT) */
    int numa;                   /* interleave large resident allocations */
    uint64_t dense_bytes, work_bytes, kv_bytes;
    tier_plan plan;
    uint64_t budget;            /* resolved RAM budget */
    int repin;                  /* re-pin every N generated tokens (0 = off) */
    int repinned;
    uint64_t rss_limit;         /* RSS guard (0 = off) */
    tier_swap *swaps;           /* [n_moe] re-pin candidates */
    int *shrunk;                /* [lru slots] slots given back by the guard */
    char err[1024];
} coli_model;

static int model_fail(coli_model *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *tensor_path(const coli_model *m, const st_tensor *t) { return m->st.files[t->file].path; }

/* Finds a float tensor `name` with exactly the given shape (ndim 1 or 2). */
static const st_tensor *model_tensor(coli_model *m, const char *name, int64_t d0, int64_t d1) {
    const st_tensor *t = st_find(&m->st, name);
    if (!t) { model_fail(m, "tensor '%s' not found in the model's safetensors files", name); return NULL; }
    int nd = d1 ? 2 : 1;
    if (!st_is_float(t->dtype)) {
        model_fail(m, "%s: tensor '%s': dtype %s is not F32/F16/BF16", tensor_path(m, t), name, st_dtype_names[t->dtype]);
        return NULL;
    }
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1)) {
        char got[96] = "";
        for (int i = 0, o = 0; i < t->ndim && o < 80; i++) o += snprintf(got + o, sizeof got - (size_t)o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
        if (nd == 2) model_fail(m, "%s: tensor '%s' has shape [%s], expected [%lld, %lld]", tensor_path(m, t), name, got, (long long)d0, (long long)d1);
        else model_fail(m, "%s: tensor '%s' has shape [%s], expected [%lld]", tensor_path(m, t), name, got, (long long)d0);
        return NULL;
    }
    return t;
}

/* A resident allocation, 64-byte aligned; with COLI_NUMA, pages of large
 * ones are interleaved across nodes before their first touch. */
static void *model_resident(coli_model *m, size_t bytes) {
    void *p = compat_aligned_alloc(64, bytes ? bytes : 4);
    if (p && m->numa && bytes >= ((size_t)1 << 20)) io_numa_interleave(p, bytes);
    return p;
}

static float measure_dummy[1]; /* what loaders return in the sizing pass */

static float *model_load_f32(coli_model *m, const char *name, int64_t d0, int64_t d1) {
    const st_tensor *t = model_tensor(m, name, d0, d1);
    if (!t) return NULL;
    if (m->measure) {
        m->dense_bytes += (uint64_t)t->numel * 4;
        return measure_dummy;
    }
    float *p = (float *)model_resident(m, (size_t)t->numel * 4);
    if (!p) { model_fail(m, "out of memory loading '%s' (%llu bytes)", name, (unsigned long long)t->numel * 4); return NULL; }
    if (st_read_f32(&m->st, t, p, m->err, sizeof m->err)) { free(p); return NULL; }
    return p;
}

/* The in-memory format for a float matrix loaded at `bits` (0 = as
 * stored, i.e. f32; 16/32 = f32; 8 int8; 4 int4, grouped when gs > 0;
 * 2 int2). */
static qt_fmt bits_fmt(int bits, int gs) {
    return bits == 8 ? QT_I8 : bits == 4 ? (gs ? QT_I4G : QT_I4) : bits == 2 ? QT_I2 : QT_F32;
}

/* Quantizes rows [0, O) of src into W's packed weights and scales with the
 * one quantizer (qt_quantize), blocks of rows in parallel; the result does
 * not depend on the thread count. Returns the count of non-finite inputs. */
static int64_t quantize_rows(const float *src, const qt_tensor *W, int64_t r0, int64_t n) {
    int64_t bad = 0, rb = (int64_t)qt_row_bytes(W), ns = qt_row_scales(W), blk = 64;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n * W->I > 65536)
    for (int64_t b = 0; b < n; b += blk) {
        int64_t rows = n - b < blk ? n - b : blk;
        bad += qt_quantize(src + (size_t)b * (size_t)W->I, rows, W->I, W->fmt, W->gs, (uint8_t *)W->w + (size_t)(r0 + b) * (size_t)rb,
                           (float *)W->s + (size_t)(r0 + b) * (size_t)ns);
    }
    return bad;
}

/* Allocates W's weights and scales as one resident block. */
static int mat_alloc(coli_model *m, qt_tensor *W, const char *name) {
    uint64_t wb = qt_weight_bytes(W->fmt, W->O, W->I, W->gs), sc = qt_scale_count(W->fmt, W->O, W->I, W->gs);
    size_t off = (size_t)(wb + 63) / 64 * 64;
    if (m->measure) {
        m->dense_bytes += off + sc * 4;
        W->w = measure_dummy, W->s = NULL;
        return 0;
    }
    uint8_t *p = (uint8_t *)model_resident(m, off + (size_t)sc * 4);
    if (!p) return model_fail(m, "out of memory loading '%s' (%llu bytes)", name, (unsigned long long)(off + sc * 4));
    W->w = p;
    W->s = sc ? (const float *)(p + off) : NULL;
    return 0;
}

/* Loads matrix `name` [O, I]: a quantized container tensor (U8 weights and
 * an F32 `<name>.qs`, format told by their byte counts), or a float tensor
 * kept as f32 or quantized at load time to `bits` (see bits_fmt, group size
 * gs). In the sizing pass only validated and counted. */
static int model_load_qmat(coli_model *m, qt_tensor *W, const char *name, int64_t O, int64_t I, int bits, int gs) {
    char qn[300], why[300];
    snprintf(qn, sizeof qn, "%s.qs", name);
    const st_tensor *t = st_find(&m->st, name), *q = st_find(&m->st, qn);
    memset(W, 0, sizeof *W);
    W->O = O, W->I = I;
    if (t && q) {
        if (t->dtype != ST_U8 && t->dtype != ST_I8) return model_fail(m, "%s: tensor '%s' has a .qs companion but dtype %s (expected U8)", tensor_path(m, t), name, st_dtype_names[t->dtype]);
        if (q->dtype != ST_F32) return model_fail(m, "%s: tensor '%s' is %s, expected F32 scales", tensor_path(m, q), qn, st_dtype_names[q->dtype]);
        if (qt_resolve(O, I, t->nbytes, q->nbytes, &W->fmt, &W->gs, why, sizeof why)) return model_fail(m, "%s: tensor '%s': %s", tensor_path(m, t), name, why);
        if (mat_alloc(m, W, name) || m->measure) return m->measure ? 0 : -1;
        if (st_read_raw(&m->st, t, (void *)W->w, m->err, sizeof m->err) || st_read_raw(&m->st, q, (void *)W->s, m->err, sizeof m->err)) return -1;
        m->any_int = 1;
        return 0;
    }
    if (!(t = model_tensor(m, name, O, I))) return -1;
    W->fmt = bits_fmt(bits, gs), W->gs = W->fmt == QT_I4G ? gs : 0;
    if (mat_alloc(m, W, name) || m->measure) return m->measure ? 0 : -1;
    if (W->fmt == QT_F32) return st_read_f32(&m->st, t, (float *)W->w, m->err, sizeof m->err);
    m->any_int = 1;
    int64_t chunk = (16 << 20) / I > 0 ? (16 << 20) / I : 1; /* rows per 64 MB of f32 */
    float *tmp = (float *)malloc((size_t)(chunk < O ? chunk : O) * (size_t)I * 4);
    if (!tmp) return model_fail(m, "out of memory quantizing '%s'", name);
    for (int64_t r = 0; r < O; r += chunk) {
        int64_t n = O - r < chunk ? O - r : chunk;
        if (st_read_f32_range(&m->st, t, (uint64_t)r * (uint64_t)I, (size_t)(n * I), tmp, m->err, sizeof m->err)) { free(tmp); return -1; }
        int64_t bad = quantize_rows(tmp, W, r, n);
        if (bad) { free(tmp); return model_fail(m, "%s: tensor '%s' has %lld non-finite values", tensor_path(m, t), name, (long long)bad); }
    }
    free(tmp);
    return 0;
}

/* A dense matrix at the DENSE_BITS of this run. */
static int model_load_mat(coli_model *m, qt_tensor *W, const char *name, int64_t O, int64_t I) {
    return model_load_qmat(m, W, name, O, I, m->dense_bits, m->group_size);
}

/* A matrix that always stays f32 (router, indexer head weights). */
static int model_load_f32mat(coli_model *m, qt_tensor *W, const char *name, int64_t O, int64_t I) {
    return model_load_qmat(m, W, name, O, I, 0, 0);
}

static int model_load_layer(coli_model *m, int l) {
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    char n[256];
#define NM(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    if (!(L->in_norm = model_load_f32(m, NM("input_layernorm.weight"), c->dim, 0)) ||
        !(L->post_norm = model_load_f32(m, NM("post_attention_layernorm.weight"), c->dim, 0)) ||
        model_load_mat(m, &L->q_a, NM("self_attn.q_a_proj.weight"), c->q_lora, c->dim) ||
        !(L->q_a_norm = model_load_f32(m, NM("self_attn.q_a_layernorm.weight"), c->q_lora, 0)) ||
        model_load_mat(m, &L->q_b, NM("self_attn.q_b_proj.weight"), (int64_t)c->n_heads * c->qk_head, c->q_lora) ||
        model_load_mat(m, &L->kv_a, NM("self_attn.kv_a_proj_with_mqa.weight"), c->kv_lora + c->qk_rope, c->dim) ||
        !(L->kv_a_norm = model_load_f32(m, NM("self_attn.kv_a_layernorm.weight"), c->kv_lora, 0)) ||
        model_load_mat(m, &L->kv_b, NM("self_attn.kv_b_proj.weight"), (int64_t)c->n_heads * (c->qk_nope + c->v_head), c->kv_lora) ||
        model_load_mat(m, &L->o, NM("self_attn.o_proj.weight"), c->dim, (int64_t)c->n_heads * c->v_head))
        return -1;
    if (c->idx_full[l] &&
        (model_load_mat(m, &L->iq, NM("self_attn.indexer.wq_b.weight"), (int64_t)c->index_heads * c->index_dim, c->q_lora) ||
         model_load_mat(m, &L->ik, NM("self_attn.indexer.wk.weight"), c->index_dim, c->dim) ||
         model_load_f32mat(m, &L->iw, NM("self_attn.indexer.weights_proj.weight"), c->index_heads, c->dim) ||
         !(L->ik_norm_w = model_load_f32(m, NM("self_attn.indexer.k_norm.weight"), c->index_dim, 0)) ||
         !(L->ik_norm_b = model_load_f32(m, NM("self_attn.indexer.k_norm.bias"), c->index_dim, 0))))
        return -1;
    if (!c->moe[l])
        return model_load_mat(m, &L->gate, NM("mlp.gate_proj.weight"), c->inter, c->dim) ||
               model_load_mat(m, &L->up, NM("mlp.up_proj.weight"), c->inter, c->dim) ||
               model_load_mat(m, &L->down, NM("mlp.down_proj.weight"), c->dim, c->inter) ? -1 : 0;
    int si = c->moe_inter * c->n_shared;
    if (!(L->router = model_load_f32(m, NM("mlp.gate.weight"), c->n_experts, c->dim)) ||
        !(L->router_bias = model_load_f32(m, NM("mlp.gate.e_score_correction_bias"), c->n_experts, 0)))
        return -1;
    if (si && (model_load_mat(m, &L->gate, NM("mlp.shared_experts.gate_proj.weight"), si, c->dim) ||
               model_load_mat(m, &L->up, NM("mlp.shared_experts.up_proj.weight"), si, c->dim) ||
               model_load_mat(m, &L->down, NM("mlp.shared_experts.down_proj.weight"), c->dim, si)))
        return -1;
#undef NM
    return 0;
}

/* ------------------------------------------------------------ expert store */

static int moe_index(const coli_config *c, int layer) {
    int k = 0;
    for (int i = 0; i < layer; i++) k += c->moe[i];
    return k;
}

static int n_moe_layers(const coli_config *c) { return moe_index(c, c->n_layers); }

/* Model layer of MoE layer k. */
static int moe_layer(const coli_config *c, int k) {
    for (int l = 0; l < c->n_layers; l++)
        if (c->moe[l] && k-- == 0) return l;
    return -1;
}

/* Converts an expert's float matrices (f32/bf16/f16 on disk) to the
 * layer's memory format: f32, or quantized at load time with the one
 * quantizer. `f` is a per-thread f32 buffer of the largest matrix. */
static void expert_convert(void *ud, int k, int e, const uint8_t *raw[3], const st_tensor *const w[3], uint8_t *mem, float *f) {
    const xs_store *x = (const xs_store *)ud;
    const xs_layout *L = &x->lay[k];
    (void)e;
    for (int p = 0; p < 3; p++) {
        if (L->fmt[p] == QT_F32) {
            st_convert_f32_(w[p]->dtype, raw[p], (float *)(mem + L->fixed[p]), (size_t)w[p]->numel);
            continue;
        }
        st_convert_f32_(w[p]->dtype, raw[p], f, (size_t)w[p]->numel);
        qt_quantize(f, L->O[p], L->I[p], L->fmt[p], L->gs[p], mem + L->fixed[p], (float *)(mem + L->s_off[p]));
    }
}

/* Finds and validates every routed expert's tensors (headers only) and
 * fixes each layer's in-memory layout. A quantized container (weights with
 * .qs scales) is used as stored, its format told by byte counts and the
 * same for every expert of a layer; float experts become f32, or are
 * quantized on read at EXPERT_BITS. */
static int experts_locate(coli_model *m, int direct) {
    coli_config *c = &m->c;
    xs_store *x = &m->xs;
    static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
    x->convert = expert_convert;
    x->convert_ud = x;
    for (int k = 0; k < x->n_layers; k++) {
        int l = moe_layer(c, k);
        xs_layout *L = &x->lay[k];
        int64_t O[3] = {c->moe_inter, c->moe_inter, c->dim}, I[3] = {c->dim, c->dim, c->moe_inter};
        int quantized = -1;
        for (int e = 0; e < c->n_experts; e++) {
            const st_tensor *w[3], *sc[3];
            for (int p = 0; p < 3; p++) {
                char n[256], qn[260], why[300];
                snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[p]);
                snprintf(qn, sizeof qn, "%s.qs", n);
                sc[p] = st_find(&m->st, qn);
                if (quantized < 0) quantized = sc[p] != NULL;
                if (quantized != (sc[p] != NULL))
                    return model_fail(m, "tensor '%s' %s a .qs scale companion, unlike the other experts of layer %d", n, sc[p] ? "has" : "lacks", l);
                if (!quantized) {
                    if (!(w[p] = model_tensor(m, n, O[p], I[p]))) return -1;
                    if (e == 0) L->O[p] = O[p], L->I[p] = I[p], L->fmt[p] = bits_fmt(m->expert_bits, m->group_size), L->gs[p] = L->fmt[p] == QT_I4G ? m->group_size : 0;
                    if (e == 0 && p == 0) L->raw = L->fmt[0] == QT_F32;
                    if (w[p]->dtype != ST_F32 || L->fmt[p] != QT_F32) L->raw = 0; /* converted on read */
                    continue;
                }
                if (!(w[p] = st_find(&m->st, n))) return model_fail(m, "tensor '%s' not found in the model's safetensors files", n);
                if ((w[p]->dtype != ST_U8 && w[p]->dtype != ST_I8) || sc[p]->dtype != ST_F32)
                    return model_fail(m, "%s: tensor '%s': quantized weights must be U8 with F32 .qs scales", tensor_path(m, w[p]), n);
                qt_fmt f;
                int gs;
                if (qt_resolve(O[p], I[p], w[p]->nbytes, sc[p]->nbytes, &f, &gs, why, sizeof why))
                    return model_fail(m, "%s: tensor '%s': %s", tensor_path(m, w[p]), n, why);
                if (e == 0) L->O[p] = O[p], L->I[p] = I[p], L->fmt[p] = f, L->gs[p] = gs, L->raw = 1;
                else if (f != L->fmt[p] || gs != L->gs[p])
                    return model_fail(m, "%s: tensor '%s' is %s but expert 0 of layer %d is %s", tensor_path(m, w[p]), n, qt_fmt_name(f), l, qt_fmt_name(L->fmt[p]));
            }
            xs_locate(x, k, e, w, quantized ? sc : NULL);
        }
        if (quantized || L->fmt[0] != QT_F32) m->any_int |= L->fmt[0] != QT_F32 || L->fmt[1] != QT_F32 || L->fmt[2] != QT_F32;
        xs_set_layout(x, k, direct);
    }
    return 0;
}

/* ------------------------------------------------------------ model setup */

/* Allocates n floats, 64-byte aligned. */
static float *falloc(size_t n) { return (float *)compat_aligned_alloc(64, (n ? n : 1) * 4); }

/* Allocates bytes (resident), or in the sizing pass only counts them into
 * *account and returns a dummy. */
static void *model_alloc(coli_model *m, size_t bytes, uint64_t *account) {
    if (!m->measure) return model_resident(m, bytes);
    *account += bytes;
    return measure_dummy;
}

static int kv_init(coli_model *m, int ctx) {
    coli_config *c = &m->c;
    coli_kv *kv = &m->kv;
    kv->ctx = ctx;
    int nf = 0;
    for (int l = 0; l < c->n_layers; l++) nf += c->idx_full[l];
    kv->lat = (float *)model_alloc(m, (size_t)c->n_layers * ctx * c->kv_lora * 4, &m->kv_bytes);
    kv->rope = (float *)model_alloc(m, (size_t)c->n_layers * ctx * c->qk_rope * 4, &m->kv_bytes);
    kv->ikey = (float *)model_alloc(m, (size_t)nf * ctx * c->index_dim * 4, &m->kv_bytes);
    if (m->measure) { kv->lat = kv->rope = kv->ikey = NULL; return 0; }
    kv->full_slot = (int *)malloc((size_t)c->n_layers * sizeof(int));
    if (!kv->lat || !kv->rope || !kv->ikey || !kv->full_slot)
        return model_fail(m, "out of memory for the KV cache (CTX=%d; lower CTX)", ctx);
    for (int l = 0, f = 0; l < c->n_layers; l++) kv->full_slot[l] = c->idx_full[l] ? f++ : -1;
    return 0;
}

static int scratch_init(coli_model *m, int max_s) {
    coli_config *c = &m->c;
    coli_scratch *s = &m->sc;
    int ctx = m->kv.ctx, half = c->qk_rope / 2, nt = coli_nthreads();
    size_t S = (size_t)max_s, mi = (size_t)(c->inter > c->moe_inter * c->n_shared ? c->inter : c->moe_inter * c->n_shared);
    uint64_t *w = &m->work_bytes;
    if (mi < (size_t)c->moe_inter) mi = (size_t)c->moe_inter;
#define F(n) (float *)model_alloc(m, (size_t)(n) * 4, w)
#define I(n) (int *)model_alloc(m, (size_t)(n) * sizeof(int), w)
    s->max_s = max_s;
    s->x = F(S * c->dim);
    s->a = F(S * c->dim);
    s->qlat = F(S * c->q_lora);
    s->q = F(S * c->n_heads * c->qk_head);
    s->ckv = F(S * (c->kv_lora + c->qk_rope));
    s->attn = F(S * c->n_heads * c->v_head);
    s->tmp = F(S * (size_t)(c->dim > c->index_dim ? c->dim : c->index_dim));
    s->mlp_g = F(S * mi);
    s->mlp_u = F(S * mi);
    s->moe_acc = F(S * c->dim);
    s->qi = F(S * c->index_heads * c->index_dim);
    s->iw = F(S * c->index_heads);
    s->rlogit = F(S * c->n_experts);
    s->xs = F(S * c->dim);
    s->ys = F(S * c->dim);
    s->eg = F(S * c->moe_inter);
    s->eu = F(S * c->moe_inter);
    s->logits = F(c->vocab);
    s->sel = I(S * c->index_topk);
    s->nsel = I(S);
    s->route_e = I(S * c->topk);
    s->route_w = F(S * c->topk);
    s->route_tmp = F(2 * (size_t)c->n_experts + c->n_group);
    s->rows = I(S * c->topk);
    s->yk = F(S * c->topk * c->dim);
    s->hlat = F((size_t)c->n_heads * S * c->kv_lora);
    s->hout = F(S * c->v_head);
    s->hkv = F((size_t)ctx * ((size_t)c->qk_nope + c->v_head));
    s->uniq = I(c->n_experts);
    s->used = (uint8_t *)model_alloc(m, (size_t)c->n_experts, w);
    s->cos = F((size_t)ctx * half);
    s->sin = F((size_t)ctx * half);
    /* per thread: key scores (and a quickselect copy for the indexer) and
     * an absorbed query */
    s->thr_floats = 2 * (size_t)ctx + (size_t)c->kv_lora + 16;
    if (m->measure) *w += (uint64_t)nt * s->thr_floats * 4;
#undef F
#undef I
    if (m->measure) {
        memset(s, 0, sizeof *s);
        return 0;
    }
    s->thr = (float **)calloc((size_t)nt, sizeof(float *));
    if (!s->x || !s->a || !s->qlat || !s->q || !s->ckv || !s->attn || !s->tmp || !s->mlp_g || !s->mlp_u || !s->moe_acc ||
        !s->qi || !s->iw || !s->rlogit || !s->xs || !s->ys || !s->eg || !s->eu || !s->logits || !s->sel || !s->nsel ||
        !s->route_e || !s->route_w || !s->route_tmp || !s->rows || !s->yk || !s->uniq || !s->used || !s->cos || !s->sin || !s->thr ||
        !s->hlat || !s->hout || !s->hkv)
        return model_fail(m, "out of memory for activations (UBATCH=%d)", max_s);
    for (int t = 0; t < nt; t++)
        if (!(s->thr[t] = falloc(s->thr_floats))) return model_fail(m, "out of memory for thread scratch");
    /* RoPE tables in f32 exactly as transformers builds them */
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf((float)c->rope_theta, (float)(2 * i) / (float)c->qk_rope);
        for (int p = 0; p < ctx; p++) {
            float ang = (float)p * inv;
            s->cos[(size_t)p * half + i] = cosf(ang);
            s->sin[(size_t)p * half + i] = sinf(ang);
        }
    }
    return 0;
}

static void scratch_free(coli_scratch *s) {
    float *f[] = {s->x, s->a, s->qlat, s->q, s->ckv, s->attn, s->tmp, s->mlp_g, s->mlp_u, s->moe_acc, s->qi, s->iw,
                  s->rlogit, s->xs, s->ys, s->eg, s->eu, s->logits, s->route_w, s->route_tmp, s->cos, s->sin};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    free(s->sel);
    free(s->nsel);
    free(s->route_e);
    free(s->rows);
    free(s->yk);
    free(s->hlat);
    free(s->hout);
    free(s->hkv);
    free(s->uniq);
    free(s->used);
    if (s->thr)
        for (int t = 0; t < coli_nthreads(); t++) free(s->thr[t]);
    free(s->thr);
    memset(s, 0, sizeof *s);
}

enum { PIN_OFF, PIN_AUTO, PIN_FILE };

typedef struct {
    int cap, ctx, ubatch, absorb;
    double ram_gb;          /* 0 = derived from MemAvailable at start */
    int overcommit;         /* start even when the plan does not fit */
    int pin;                /* PIN_OFF / PIN_AUTO / PIN_FILE */
    const char *pin_file;
    double pin_gb;          /* < 0: unset; PIN_GB_ALL: everything the budget allows */
    int quiet;              /* no progress bar */
    io_opts io;             /* expert I/O path */
    char *mirrors[IO_MAX_DRIVES];
    int nmirrors;
    int pilot, pilot_real, pilot_k;
    int mlock, numa;
    int weights_given;      /* COLI_DISK_WEIGHTS set */
    int simd, idot;         /* kernel level (-1 = best), integer dot products */
    int dense_bits, expert_bits, group_size; /* load-time quantization (0 = keep) */
} coli_opts;

#define PIN_GB_ALL (-2.0)
#define GB 1e9

static void model_free(coli_model *m) {
    if (m->L && !m->measure)
        for (int l = 0; l < m->c.n_layers; l++) {
            coli_layer *L = &m->L[l];
            void *p[] = {L->in_norm, L->post_norm, (void *)L->q_a.w, (void *)L->q_b.w, (void *)L->kv_a.w, (void *)L->kv_b.w,
                         (void *)L->o.w, L->q_a_norm, L->kv_a_norm, (void *)L->iq.w, (void *)L->ik.w, (void *)L->iw.w,
                         L->ik_norm_w, L->ik_norm_b, (void *)L->gate.w, (void *)L->up.w, (void *)L->down.w, L->router,
                         L->router_bias};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
                if (p[i] != (void *)measure_dummy) free(p[i]);
        }
    free(m->L);
    if (m->embed.w != (const void *)measure_dummy) free((void *)m->embed.w);
    if (m->final_norm != measure_dummy) free(m->final_norm);
    if (!m->c.tie_embed && m->lm_head.w != (const void *)measure_dummy) free((void *)m->lm_head.w);
    xs_free(&m->xs);
    io_close(&m->io);
    mm_free(&m->mm);
    free(m->pred);
    free(m->pinned);
    free(m->swaps);
    free(m->shrunk);
    free(m->kv.lat);
    free(m->kv.rope);
    free(m->kv.ikey);
    free(m->kv.full_slot);
    scratch_free(&m->sc);
    st_close(&m->st);
    coli_config_free(&m->c);
}

/* Dense weights (embedding, norms, attention, indexer, dense MLPs, routers,
 * shared experts, lm_head): validated by name and shape; in the sizing
 * pass only counted. */
static int model_load_dense(coli_model *m) {
    coli_config *c = &m->c;
    /* embedding and lm_head follow DENSE_BITS only below 8 bits */
    int io_bits = m->dense_bits && m->dense_bits < 8 ? m->dense_bits : 0;
    if (model_load_qmat(m, &m->embed, "model.embed_tokens.weight", c->vocab, c->dim, io_bits, m->group_size) ||
        !(m->final_norm = model_load_f32(m, "model.norm.weight", c->dim, 0)))
        return -1;
    if (c->tie_embed) m->lm_head = m->embed;
    else if (model_load_qmat(m, &m->lm_head, "lm_head.weight", c->vocab, c->dim, io_bits, m->group_size)) return -1;
    for (int l = 0; l < c->n_layers; l++)
        if (model_load_layer(m, l)) return -1;
    return 0;
}

/* Usage history in model-layer rows → counts per MoE layer [n_moe][E]. */
static void usage_to_moe(const coli_config *c, const uint64_t *rows, uint64_t *moe) {
    for (int k = 0, n = n_moe_layers(c); k < n; k++)
        memcpy(moe + (size_t)k * c->n_experts, rows + (size_t)moe_layer(c, k) * c->n_experts, (size_t)c->n_experts * 8);
}

static void print_progress(void *ud, uint64_t done, uint64_t total) {
    double *t0 = (double *)ud, el = compat_now() - t0[0];
    if (el < 0.5 && done < total) return;
    if (done < total && el - t0[1] < 0.25) return;
    t0[1] = el;
    double rate = done / (el > 1e-9 ? el : 1e-9), eta = rate > 0 ? (total - done) / rate : 0;
    int w = 30, fill = total ? (int)(w * (double)done / total) : w;
    fprintf(stderr, "\rcolibri: pinning experts [%.*s%*s] %5.1f%% %.2f/%.2f GB, %.0f MB/s, ETA %.0f s%s", fill,
            "==============================", w - fill, "", total ? 100.0 * done / total : 100.0, done / GB, total / GB, rate / 1e6, eta,
            done >= total ? "\n" : "");
}

/* Chooses and loads the pinned set from the usage history `hist`
 * ([n_layers][E] rows, or NULL) within the plan's pin budget. */
static int model_pin(coli_model *m, const uint64_t *hist, int quiet) {
    coli_config *c = &m->c;
    xs_store *x = &m->xs;
    int L = x->n_layers, E = c->n_experts;
    if (!L || !m->plan.pin_bytes || !hist) return 0;
    uint64_t *counts = (uint64_t *)calloc((size_t)L * E, 8), *bytes = (uint64_t *)malloc((size_t)L * 8);
    tier_rank *order = (tier_rank *)malloc((size_t)L * E * sizeof(tier_rank));
    if (!counts || !bytes || !order) { free(counts); free(bytes); free(order); return model_fail(m, "out of memory"); }
    usage_to_moe(c, hist, counts);
    for (int k = 0; k < L; k++) bytes[k] = xs_expert_bytes(x, k);
    tier_pick_pins(counts, L, E, bytes, m->plan.pin_bytes, m->pinned, order);
    free(counts);
    free(bytes);
    free(order);
    double t0[2] = {compat_now(), 0};
    if (xs_load_pins(x, m->pinned, quiet ? NULL : print_progress, t0)) return model_fail(m, "%s", x->err);
    return 0;
}

/* Bytes as "12.3 GB" / "4.5 MB" / "678 KB" (decimal units). */
static const char *fmt_bytes(char *buf, size_t n, double b) {
    if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.1f MB", b / 1e6);
    else snprintf(buf, n, "%.0f KB", b / 1e3);
    return buf;
}

/* Budget plan (before anything is loaded): the resident part must fit in
 * the RAM budget or the run is refused, naming the knobs. */
static int model_plan(coli_model *m, const coli_opts *o, uint64_t pin_want) {
    coli_config *c = &m->c;
    uint64_t avail = compat_mem_available();
    m->budget = o->ram_gb > 0 ? (uint64_t)(o->ram_gb * GB) : (uint64_t)(0.9 * (double)avail);
    int convert = 0;
    for (int k = 0; k < m->xs.n_layers; k++) convert |= !m->xs.lay[k].raw;
    size_t staging = 0;
    if (convert) {
        size_t mat = (size_t)c->moe_inter * (size_t)c->dim * 4;
        staging = xs_staging_bytes(&m->xs) + mat;
    }
    tier_budget b = {.ram = m->budget, .dense = m->dense_bytes, .kv = m->kv_bytes,
                     .work = m->work_bytes + (uint64_t)staging * coli_nthreads(), .reserve = m->budget / 20,
                     .expert = xs_max_expert_bytes(&m->xs), .moe_layers = m->xs.n_layers, .n_experts = c->n_experts,
                     .topk = c->topk, .cap = o->cap};
    if (o->pin != PIN_OFF) {
        if (o->pin_gb == PIN_GB_ALL) b.pin_mode = TIER_PIN_ALL;
        else if (o->pin_gb >= 0) b.pin_mode = TIER_PIN_BYTES, b.pin_bytes = (uint64_t)(o->pin_gb * GB);
        else b.pin_mode = TIER_PIN_AUTO, b.pin_bytes = pin_want;
    }
    if (tier_plan_make(&b, &m->plan) == 0) {
        if (m->plan.cap_lowered)
            fprintf(stderr, "colibri: CAP=%d does not fit the %.2f GB budget; using %d slots per layer\n", o->cap, m->budget / GB, m->plan.lru_slots);
        return 0;
    }
    char why[700], f[8][32];
    snprintf(why, sizeof why,
             "the resident part needs %s (dense weights %s + KV cache %s for CTX=%d + working set %s + reserve %s "
             "+ one expert slot per MoE layer %s) but the RAM budget is %s (%s); short by %s. Raise RAM_GB, "
             "lower CTX or UBATCH, or set COLI_RAM_OVERCOMMIT=1",
             fmt_bytes(f[0], 32, (double)m->plan.peak), fmt_bytes(f[1], 32, (double)b.dense), fmt_bytes(f[2], 32, (double)b.kv), m->kv.ctx,
             fmt_bytes(f[3], 32, (double)b.work), fmt_bytes(f[4], 32, (double)b.reserve), fmt_bytes(f[5], 32, (double)b.expert * b.moe_layers),
             fmt_bytes(f[6], 32, (double)m->budget), o->ram_gb > 0 ? "RAM_GB" : "90% of MemAvailable", fmt_bytes(f[7], 32, (double)m->plan.short_by));
    if (!o->overcommit) return model_fail(m, "%s", why);
    fprintf(stderr, "colibri: warning (COLI_RAM_OVERCOMMIT=1): %s\n", why);
    m->plan.lru_slots = 1;
    m->plan.pin_bytes = 0;
    m->plan.lru_bytes = b.expert * (uint64_t)b.moe_layers;
    return 0;
}

/* Opens the shards for expert reads (mirrors, O_DIRECT twins, maps, the
 * reader pool or io_uring). A refused io_uring falls back to the pool and
 * a refused O_DIRECT to buffered reads, with a message. */
static int model_io_open(coli_model *m, const coli_opts *o) {
    char **paths = (char **)malloc((size_t)m->st.nfiles * sizeof(char *) + 1);
    if (!paths) return model_fail(m, "out of memory");
    for (int i = 0; i < m->st.nfiles; i++) paths[i] = m->st.files[i].path;
    io_opts io = o->io;
    int rc = io_open(&m->io, &io, paths, m->st.nfiles, (char *const *)o->mirrors, o->nmirrors);
    if (rc && io.mode == IO_URING) {
        fprintf(stderr, "colibri: %s; using %d reader threads instead\n", m->io.err, io.workers);
        io_close(&m->io);
        io.mode = IO_POOL;
        rc = io_open(&m->io, &io, paths, m->st.nfiles, (char *const *)o->mirrors, o->nmirrors);
    }
    free(paths);
    if (rc) return model_fail(m, "%s", m->io.err);
    if (m->io.direct_refused) fprintf(stderr, "colibri: DIRECT=1: O_DIRECT is refused on this file system; expert reads stay buffered\n");
    if (o->nmirrors && m->io.o.weight[1] <= 0) { /* no COLI_DISK_WEIGHTS: measure each drive on the largest shard */
        int big = 0;
        for (int i = 1; i < m->st.nfiles; i++) big = m->st.files[i].size > m->st.files[big].size ? i : big;
        for (int d = 0; d < m->io.ndrives; d++) {
            double bw = io_probe(&m->io, big, d, (uint64_t)64 << 20);
            m->io.o.weight[d] = bw > 0 ? bw : (d ? 0 : 1);
        }
    }
    if (o->nmirrors) {
        double tot = 0;
        for (int d = 0; d < m->io.ndrives; d++) tot += m->io.o.weight[d];
        fprintf(stderr, "colibri: mirror: %d drives, expert reads split", m->io.ndrives);
        for (int d = 0; d < m->io.ndrives; d++) fprintf(stderr, "%s %.0f%%", d ? " /" : "", 100.0 * m->io.o.weight[d] / tot);
        fprintf(stderr, " (%s)\n", o->weights_given ? "COLI_DISK_WEIGHTS" : "measured");
    }
    for (int i = 0; o->nmirrors && i < m->st.nfiles; i++)
        if (io_file_drives(&m->io, i) < 1 + o->nmirrors)
            fprintf(stderr, "colibri: mirror: %s is missing or differs on a mirror; read from the primary only\n", m->st.files[i].path);
    m->xs.mmap = o->io.mmap;
    return 0;
}

/* Reads config.json and indexes the shards of model directory `dir`.
 * Returns 0, or -1 with m->err naming the file and field/tensor. */
static int model_open(coli_model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    if (coli_config_load(&m->c, dir, m->err, sizeof m->err)) return -1;
    return st_open_dir(&m->st, dir, m->err, sizeof m->err);
}

/* After model_open: a sizing pass (headers only) and the budget plan, then
 * the dense weights, the KV cache, the expert cache and the pinned set.
 * `hist` is the usage history rows ([n_layers][n_experts]) or NULL.
 * Returns 0, or -1 with m->err naming the file and field/tensor, or the
 * shortfall of the budget. */
/* COLI_NUMA: whether interleaving can work here; says why not. */
static int numa_usable(void) {
    if (!io_have_numa()) {
        fprintf(stderr, "colibri: COLI_NUMA=1: this build has no libnuma; ignored\n");
        return 0;
    }
    if (io_numa_nodes() < 2) {
        fprintf(stderr, "colibri: COLI_NUMA=1: single NUMA node, nothing to interleave; ignored\n");
        return 0;
    }
    void *probe = compat_aligned_alloc(4096, 1 << 20);
    int rc = io_numa_interleave(probe, 1 << 20);
    free(probe);
    if (rc) fprintf(stderr, "colibri: COLI_NUMA=1: mbind refused (%s); ignored\n", strerror(-rc));
    return rc == 0;
}

static int model_setup(coli_model *m, const coli_opts *o, const uint64_t *hist) {
    coli_config *c = &m->c;
    m->numa = o->numa && numa_usable();
    m->dense_bits = o->dense_bits, m->expert_bits = o->expert_bits, m->group_size = o->group_size;
    int ctx = o->ctx < c->max_pos ? o->ctx : c->max_pos;
    m->absorb = o->absorb;
    m->ubatch = o->ubatch;
    if (!(m->L = (coli_layer *)calloc((size_t)c->n_layers, sizeof(coli_layer)))) return model_fail(m, "out of memory");
    if (xs_init(&m->xs, &m->st, n_moe_layers(c), c->n_experts, coli_nthreads())) return model_fail(m, "%s", m->xs.err);
    if (!(m->pinned = (uint8_t *)calloc((size_t)m->xs.n_layers * c->n_experts + 1, 1))) return model_fail(m, "out of memory");
    m->measure = 1;
    if (model_load_dense(m) || experts_locate(m, o->io.direct) || kv_init(m, ctx) || scratch_init(m, o->ubatch)) return -1;
    uint64_t pin_want = 0;
    if (hist)
        for (int l = 0; l < c->n_layers; l++)
            for (int e = 0; c->moe[l] && e < c->n_experts; e++)
                if (hist[(size_t)l * c->n_experts + e]) pin_want += xs_expert_bytes(&m->xs, moe_index(c, l));
    if (model_plan(m, o, pin_want)) return -1;
    m->measure = 0;
    memset(m->L, 0, (size_t)c->n_layers * sizeof(coli_layer));
    m->final_norm = NULL;
    memset(&m->embed, 0, sizeof m->embed), memset(&m->lm_head, 0, sizeof m->lm_head);
    int64_t cols = c->dim;
    int64_t dims[] = {c->q_lora, c->kv_lora, (int64_t)c->n_heads * c->v_head, c->inter, (int64_t)c->moe_inter * c->n_shared};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) cols = dims[i] > cols ? dims[i] : cols;
    char err[300];
    if (mm_init(&m->mm, o->simd, o->idot, o->ubatch, cols, err, sizeof err)) return model_fail(m, "SIMD: %s", err);
    if (model_load_dense(m) || kv_init(m, ctx) || scratch_init(m, o->ubatch)) return -1;
    if (model_io_open(m, o)) return -1;
    if (xs_alloc_cache(&m->xs, &m->io, m->plan.lru_slots)) return model_fail(m, "%s", m->xs.err);
    m->pilot = o->pilot || o->pilot_real;
    m->pilot_real = o->pilot_real;
    m->pilot_k = o->pilot_k > 0 ? (o->pilot_k < c->n_experts ? o->pilot_k : c->n_experts) : c->topk;
    if (m->pilot && !(m->pred = (int *)malloc((size_t)o->ubatch * m->pilot_k * sizeof(int) + sizeof(int)))) return model_fail(m, "out of memory");
    m->xs.numa = m->numa;
    if (!(m->swaps = (tier_swap *)malloc((size_t)(m->xs.n_layers + 1) * sizeof(tier_swap))) ||
        !(m->shrunk = (int *)malloc((size_t)(m->plan.lru_slots + 1) * sizeof(int))))
        return model_fail(m, "out of memory");
    if (model_pin(m, hist, o->quiet)) return -1;
    int pinned = 0;
    for (int k = 0; k < m->xs.n_layers; k++) pinned += m->xs.n_pinned[k];
    if (o->mlock && !pinned) fprintf(stderr, "colibri: MLOCK=1: no pinned experts to lock\n");
    else if (o->mlock) {
        int rc = xs_lock_pins(&m->xs);
        if (rc) fprintf(stderr, "colibri: MLOCK=1: mlock failed (%s); raise the locked-memory limit (ulimit -l)\n", strerror(-rc));
        else fprintf(stderr, "colibri: MLOCK=1: %d pinned experts locked in memory\n", pinned);
    }
    return 0;
}

/* ------------------------------------------------------------ safe points */

/* One re-pin pass: the hottest unpinned experts of this session replace
 * clearly colder pinned ones (at most 16 per pass), then heat decays. */
static int model_repin(coli_model *m) {
    xs_store *x = &m->xs;
    int n = tier_repin_pass(x->heat, x->last, m->pinned, x->n_layers, x->n_experts, x->tick, 16, m->swaps);
    for (int i = 0; i < n; i++) {
        const tier_swap *w = &m->swaps[i];
        if (xs_repin(x, w->layer, w->admit, w->evict)) return model_fail(m, "%s", x->err);
        m->pinned[(size_t)w->layer * x->n_experts + w->evict] = 0;
        m->pinned[(size_t)w->layer * x->n_experts + w->admit] = 1;
    }
    tier_decay(x->heat, (size_t)x->n_layers * x->n_experts);
    m->repinned += n;
    return 0;
}

/* Frees least-used LRU slots while the resident set is above the guard,
 * lowering the capacity so the cache cannot grow back. */
static void model_rss_guard(coli_model *m) {
    xs_store *x = &m->xs;
    uint64_t rss = compat_rss(), start = rss;
    if (!m->rss_limit || rss <= m->rss_limit + m->rss_limit / 50) return;
    int freed = 0;
    for (int pass = 0; pass < 8 && rss > m->rss_limit; pass++) {
        int got = 0;
        for (int k = 0; k < x->n_layers; k++) {
            int want = x->lru[k].cap / 4 > 1 ? x->lru[k].cap / 4 : 1;
            int n = tier_lru_shrink(&x->lru[k], want, 1, m->shrunk);
            xs_release_slots(x, k, m->shrunk, n);
            got += n;
        }
        freed += got;
        if (!got) break;
        rss = compat_rss();
    }
    fprintf(stderr, "colibri: RSS %.2f GB over the %.2f GB guard: freed %d cached experts, LRU now %d slots/layer (RSS %.2f GB)\n",
            start / GB, m->rss_limit / GB, freed, x->n_layers ? x->lru[0].cap : 0, rss / GB);
}

/* Called between tokens, where no expert is in use: re-pin every REPIN
 * generated tokens, check RSS every 16. */
static int model_safe_point(coli_model *m, int generated) {
    if (m->repin > 0 && generated % m->repin == 0 && model_repin(m)) return -1;
    if (generated % 16 == 0) model_rss_guard(m);
    return 0;
}

/* ------------------------------------------------------------------- math */

/* y = w ⊙ x / sqrt(mean(x²) + eps) over n elements. */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

/* LayerNorm with weight and bias (biased variance). */
static void layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps) {
    double mu = 0, var = 0;
    for (int i = 0; i < n; i++) mu += x[i];
    mu /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mu) * (x[i] - mu);
    float r = 1.0f / sqrtf((float)(var / n) + eps);
    for (int i = 0; i < n; i++) y[i] = (float)(x[i] - mu) * r * w[i] + b[i];
}

/* Interleaved RoPE on d values at position p: pair (2i, 2i+1) rotates by
 * angle i; the result is written de-interleaved [evens' | odds'] exactly as
 * transformers' apply_rotary_pos_emb_interleave returns it. */
static void rope_apply(float *v, int d, const float *cs, const float *sn) {
    float tmp[512];
    int h = d / 2;
    for (int i = 0; i < h; i++) {
        float a = v[2 * i], b = v[2 * i + 1];
        tmp[i] = a * cs[i] - b * sn[i];
        tmp[h + i] = b * cs[i] + a * sn[i];
    }
    memcpy(v, tmp, (size_t)d * 4);
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* In-place softmax of n scores. */
static void softmax(float *x, int n) {
    float mx = x[0], sum = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += (x[i] = expf(x[i] - mx));
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* k-th largest (k ≥ 1) of n values; reorders v. */
static float kth_largest(float *v, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float piv = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] > piv) i++;
            while (v[j] < piv) j--;
            if (i <= j) { float t = v[i]; v[i] = v[j]; v[j] = t; i++; j--; }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

/* Keys kept by the indexer among n scored keys: the k largest scores, ties
 * at the threshold broken toward earlier positions; written ascending to
 * out. `tmp` holds n floats. Returns k. */
static int topk_select(const float *score, int n, int k, float *tmp, int *out) {
    memcpy(tmp, score, (size_t)n * 4);
    float thr = kth_largest(tmp, n, k);
    int above = 0;
    for (int t = 0; t < n; t++) above += score[t] > thr;
    int ties = k - above, c = 0;
    for (int t = 0; t < n && c < k; t++)
        if (score[t] > thr || (score[t] == thr && ties-- > 0)) out[c++] = t;
    return c;
}

/* ---------------------------------------------------------------- forward */

/* DSA indexer of full layer l for rows [0, S) at positions pos..pos+S-1:
 * caches their keys and writes each row's kept keys to sc->sel/nsel
 * (nsel = -1: every causal key is kept). */
static void fwd_indexer(coli_model *m, int l, int S, int pos) {
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    coli_scratch *sc = &m->sc;
    int ih = c->index_heads, id = c->index_dim, half = c->qk_rope / 2, k = c->index_topk;
    float *kc = m->kv.ikey + (size_t)m->kv.full_slot[l] * m->kv.ctx * id;
    mm_matmul(&m->mm, &L->iq, sc->qlat, S, sc->qi);
    mm_matmul(&m->mm, &L->ik, sc->a, S, sc->tmp); /* tmp: [S][id] raw keys */
    mm_matmul(&m->mm, &L->iw, sc->a, S, sc->iw);
    float wscale = 1.0f / sqrtf((float)ih), sscale = 1.0f / sqrtf((float)id);
    for (int s = 0; s < S; s++) {
        int p = pos + s;
        const float *cs = sc->cos + (size_t)p * half, *sn = sc->sin + (size_t)p * half;
        float *key = kc + (size_t)p * id;
        layernorm(key, sc->tmp + (size_t)s * id, L->ik_norm_w, L->ik_norm_b, id, 1e-6f);
        rope_apply(key, c->qk_rope, cs, sn);
        for (int h = 0; h < ih; h++) rope_apply(sc->qi + ((size_t)s * ih + h) * id, c->qk_rope, cs, sn);
        for (int h = 0; h < ih; h++) sc->iw[(size_t)s * ih + h] *= wscale;
    }
    for (int s = 0; s < S; s++) {
        int T = pos + s + 1;
        if (T <= k) { sc->nsel[s] = -1; continue; }
        float *score = sc->thr[0], *tmp = sc->thr[0] + m->kv.ctx;
        const float *qs = sc->qi + (size_t)s * ih * id, *w = sc->iw + (size_t)s * ih;
#pragma omp parallel for schedule(static) if (T * ih * id > 65536)
        for (int t = 0; t < T; t++) {
            const float *key = kc + (size_t)t * id;
            float acc = 0;
            for (int h = 0; h < ih; h++) {
                float d = mm_dot_f32(qs + (size_t)h * id, key, id) * sscale;
                acc += w[h] * (d > 0 ? d : 0);
            }
            score[t] = acc;
        }
        sc->nsel[s] = topk_select(score, T, k, tmp, sc->sel + (size_t)s * k);
    }
}

/* Absorbed attention of head h for query row s over the kept keys: the
 * query is pulled into the latent space (q_nope · W_UK, a transposed
 * product over kv_b's rows), scored against the cached latents, and the
 * weighted latent is written to out[kv_lora]; the caller expands it by W_UV.
 * Reentrant: per-thread scratch thr. */
static void attn_head_latent(coli_model *m, int l, int s, int pos, int h, float *thr, float *out) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    const coli_layer *L = &m->L[l];
    int T = pos + s + 1, kvl = c->kv_lora, nope = c->qk_nope, rd = c->qk_rope, kvw = nope + c->v_head;
    const float *lat = m->kv.lat + (size_t)l * m->kv.ctx * kvl, *kr = m->kv.rope + (size_t)l * m->kv.ctx * rd;
    const float *q = sc->q + ((size_t)s * c->n_heads + h) * c->qk_head;
    int n = sc->nsel[s] < 0 ? T : sc->nsel[s];
    const int *sel = sc->nsel[s] < 0 ? NULL : sc->sel + (size_t)s * c->index_topk;
    float *score = thr, *qa = thr + m->kv.ctx;
    qt_tensor uk = qt_rows(&L->kv_b, (int64_t)h * kvw, nope);
    mm_matvec_t(&m->mm, &uk, q, qa);
    float scale = 1.0f / sqrtf((float)c->qk_head);
    for (int i = 0; i < n; i++) {
        int t = sel ? sel[i] : i;
        score[i] = (mm_dot_f32(qa, lat + (size_t)t * kvl, kvl) + mm_dot_f32(q + nope, kr + (size_t)t * rd, rd)) * scale;
    }
    softmax(score, n);
    memset(out, 0, (size_t)kvl * 4);
    for (int i = 0; i < n; i++) {
        const float *lt = lat + (size_t)(sel ? sel[i] : i) * kvl;
        float p = score[i];
        for (int j = 0; j < kvl; j++) out[j] += p * lt[j];
    }
}

/* Ordinary attention of head h for query row s over the kept keys, with
 * K_nope | V of every key already expanded in kv[t][nope + v]. */
static void attn_head_rows(coli_model *m, int l, int s, int pos, int h, const float *kv, float *score) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int nope = c->qk_nope, rd = c->qk_rope, kvw = nope + c->v_head, vh = c->v_head;
    const float *kr = m->kv.rope + (size_t)l * m->kv.ctx * rd;
    const float *q = sc->q + ((size_t)s * c->n_heads + h) * c->qk_head;
    int Ts = pos + s + 1, n = sc->nsel[s] < 0 ? Ts : sc->nsel[s];
    const int *sel = sc->nsel[s] < 0 ? NULL : sc->sel + (size_t)s * c->index_topk;
    float scale = 1.0f / sqrtf((float)c->qk_head);
    for (int i = 0; i < n; i++) {
        int t = sel ? sel[i] : i;
        score[i] = (mm_dot_f32(q, kv + (size_t)t * kvw, nope) + mm_dot_f32(q + nope, kr + (size_t)t * rd, rd)) * scale;
    }
    softmax(score, n);
    float *o = sc->attn + ((size_t)s * c->n_heads + h) * vh;
    memset(o, 0, (size_t)vh * 4);
    for (int i = 0; i < n; i++) {
        const float *v = kv + (size_t)(sel ? sel[i] : i) * kvw + nope;
        float p = score[i];
        for (int j = 0; j < vh; j++) o[j] += p * v[j];
    }
}

/* Whether absorbed MLA costs less than reconstruction for a batch of S
 * queries. Per head and key, absorbed scores and accumulates in the latent
 * space (S·(2·kv_lora + rope) multiply-adds), reconstruction expands every
 * key once (kv_lora·(nope + v)) and then attends in head space
 * (S·(nope + rope + v)). For GLM-5 the crossover is S ≈ 400. */
static int absorb_is_cheaper(const coli_config *c, int S) {
    double absorbed = (double)S * (2.0 * c->kv_lora + c->qk_rope);
    double rebuilt = (double)c->kv_lora * (c->qk_nope + c->v_head) + (double)S * (c->qk_nope + c->qk_rope + c->v_head);
    return absorbed <= rebuilt;
}

/* MLA attention of layer l on normed rows sc->a; result in sc->tmp. */
static void fwd_attention(coli_model *m, int l, int S, int pos) {
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    coli_scratch *sc = &m->sc;
    int half = c->qk_rope / 2, kvl = c->kv_lora, rd = c->qk_rope, H = c->n_heads;
    mm_matmul(&m->mm, &L->q_a, sc->a, S, sc->qlat);
    for (int s = 0; s < S; s++) rmsnorm(sc->qlat + (size_t)s * c->q_lora, sc->qlat + (size_t)s * c->q_lora, L->q_a_norm, c->q_lora, 1e-6f);
    mm_matmul(&m->mm, &L->q_b, sc->qlat, S, sc->q);
    mm_matmul(&m->mm, &L->kv_a, sc->a, S, sc->ckv);
    for (int s = 0; s < S; s++) {
        int p = pos + s;
        const float *cs = sc->cos + (size_t)p * half, *sn = sc->sin + (size_t)p * half;
        const float *ckv = sc->ckv + (size_t)s * (kvl + rd);
        rmsnorm(m->kv.lat + ((size_t)l * m->kv.ctx + p) * kvl, ckv, L->kv_a_norm, kvl, 1e-6f);
        float *kr = m->kv.rope + ((size_t)l * m->kv.ctx + p) * rd;
        memcpy(kr, ckv + kvl, (size_t)rd * 4);
        rope_apply(kr, rd, cs, sn);
        for (int h = 0; h < H; h++) rope_apply(sc->q + ((size_t)s * H + h) * c->qk_head + c->qk_nope, rd, cs, sn);
    }
    if (c->idx_full[l]) fwd_indexer(m, l, S, pos); /* shared layers keep the last full layer's choice */
    int absorbed = m->absorb < 0 ? absorb_is_cheaper(c, S) : m->absorb;
    /* Matmuls (which may use the shared IDOT scratch) run outside parallel
     * regions; small problems stay on one thread, where a parallel region
     * costs more than it saves. */
    double work = (double)S * H * (pos + S) * (kvl + rd);
    int vh = c->v_head, kvw = c->qk_nope + vh;
    if (absorbed) {
#pragma omp parallel for schedule(dynamic) collapse(2) if (work > 2e5)
        for (int h = 0; h < H; h++)
            for (int s = 0; s < S; s++) attn_head_latent(m, l, s, pos, h, sc->thr[coli_thread_id()], sc->hlat + ((size_t)h * S + s) * kvl);
        for (int h = 0; h < H; h++) { /* expand each head's latents by W_UV */
            qt_tensor uv = qt_rows(&L->kv_b, (int64_t)h * kvw + c->qk_nope, vh);
            mm_matmul(&m->mm, &uv, sc->hlat + (size_t)h * S * kvl, S, sc->hout);
            for (int s = 0; s < S; s++) memcpy(sc->attn + ((size_t)s * H + h) * vh, sc->hout + (size_t)s * vh, (size_t)vh * 4);
        }
    } else {
        const float *lat = m->kv.lat + (size_t)l * m->kv.ctx * kvl;
        for (int h = 0; h < H; h++) {
            qt_tensor w = qt_rows(&L->kv_b, (int64_t)h * kvw, kvw);
            mm_matmul(&m->mm, &w, lat, pos + S, sc->hkv); /* hkv[t] = [k_nope | v] for every key */
#pragma omp parallel for schedule(dynamic) if (work > 2e5 * H)
            for (int s = 0; s < S; s++) attn_head_rows(m, l, s, pos, h, sc->hkv, sc->thr[coli_thread_id()]);
        }
    }
    mm_matmul(&m->mm, &L->o, sc->attn, S, sc->tmp);
}

/* SwiGLU MLP on rows x[S][dim] → y[S][dim] with gate/up/down. */
static void mlp(mm_ctx *mc, const qt_tensor *gate, const qt_tensor *up, const qt_tensor *down, const float *x, int S, float *g, float *u, float *y) {
    int64_t I = gate->O;
    mm_matmul(mc, gate, x, S, g);
    mm_matmul(mc, up, x, S, u);
    for (int64_t i = 0; i < (int64_t)S * I; i++) g[i] = silu(g[i]) * u[i];
    mm_matmul(mc, down, g, S, y);
}

/* Router for one row: sigmoid scores, correction bias for the choice only,
 * group-limited selection (group score = sum of its top-2 choice scores),
 * top-k (ties to the lower index), optional normalization, scaling.
 * tmp holds 2·n_experts + n_group floats. */
static void route_row(const coli_config *c, const float *logit, const float *bias, int *ex, float *w, float *tmp) {
    int E = c->n_experts, per = E / c->n_group;
    float *prob = tmp, *choice = tmp + E, *gs = tmp + 2 * E;
    for (int e = 0; e < E; e++) {
        prob[e] = 1.0f / (1.0f + expf(-logit[e]));
        choice[e] = prob[e] + bias[e];
    }
    if (c->n_group > 1) {
        for (int g = 0; g < c->n_group; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (choice[e] > b1) { b2 = b1; b1 = choice[e]; }
                else if (choice[e] > b2) b2 = choice[e];
            }
            gs[g] = b1 + b2;
        }
        for (int k = 0; k < c->topk_group; k++) { /* mark kept groups with NaN-free +inf */
            int best = -1;
            for (int g = 0; g < c->n_group; g++)
                if (gs[g] != INFINITY && (best < 0 || gs[g] > gs[best])) best = g;
            gs[best] = INFINITY;
        }
        for (int e = 0; e < E; e++)
            if (gs[e / per] != INFINITY) choice[e] = -INFINITY;
    }
    float sum = 0;
    for (int k = 0; k < c->topk; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (choice[e] != -INFINITY && (best < 0 || choice[e] > choice[best])) best = e;
        ex[k] = best;
        w[k] = prob[best];
        choice[best] = -INFINITY;
        sum += w[k];
    }
    for (int k = 0; k < c->topk; k++) w[k] = (c->norm_topk ? w[k] / (sum + 1e-20f) : w[k]) * c->route_scale;
}

/* Routes rows [0, S) of sc->a for MoE layer l: chosen experts and weights
 * in sc->route_e / sc->route_w. */
static void moe_route(coli_model *m, const coli_layer *L, const float *x, int S) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int D = c->dim, K = c->topk;
#pragma omp parallel for schedule(static) if (S * c->n_experts * D > 65536)
    for (int s = 0; s < S; s++)
        for (int e = 0; e < c->n_experts; e++)
            sc->rlogit[(size_t)s * c->n_experts + e] = mm_dot_f32(L->router + (size_t)e * D, x + (size_t)s * D, D);
    for (int s = 0; s < S; s++)
        route_row(c, sc->rlogit + (size_t)s * c->n_experts, L->router_bias, sc->route_e + (size_t)s * K, sc->route_w + (size_t)s * K,
                  sc->route_tmp);
}

/* MoE of layer l on normed rows sc->a → sc->tmp. Each distinct expert is
 * fetched once and applied to every row that chose it. Experts compute in
 * whatever order their bytes arrive (resident first, misses as their reads
 * land), each into its own output rows; the weighted sum then runs in
 * increasing expert order, as transformers accumulates, so the result never
 * depends on what was resident. Returns 0 or -1 on a read error. */
static int fwd_moe(coli_model *m, int l, int S) {
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    coli_scratch *sc = &m->sc;
    xs_store *x = &m->xs;
    int D = c->dim, K = c->topk, mk = moe_index(c, l), nu = 0;
    moe_route(m, L, sc->a, S);
    memset(sc->used, 0, (size_t)c->n_experts);
    for (int i = 0; i < S * K; i++) {
        sc->used[sc->route_e[i]] = 1;
        xs_note_use(x, mk, sc->route_e[i]);
    }
    for (int e = 0; e < c->n_experts; e++)
        if (sc->used[e]) sc->uniq[nu++] = e;
    tel_lap(&m->tel, TEL_ROUTER);
    if (xs_begin(x, mk, sc->uniq, nu)) return model_fail(m, "%s", x->err);
    for (;;) {
        int j = xs_next(x, mk);
        tel_lap(&m->tel, TEL_EXPERT_IO);
        if (j == -2) return model_fail(m, "%s", x->err);
        if (j < 0) break;
        const xs_job *jb = &x->jobs[j];
        int n = 0;
        for (int i = 0; i < S * K; i++)
            if (sc->route_e[i] == jb->e) sc->rows[n++] = i;
        for (int r = 0; r < n; r++) memcpy(sc->xs + (size_t)r * D, sc->a + (size_t)(sc->rows[r] / K) * D, (size_t)D * 4);
        mlp(&m->mm, &jb->view[XS_GATE], &jb->view[XS_UP], &jb->view[XS_DOWN], sc->xs, n, sc->eg, sc->eu, sc->ys);
        for (int r = 0; r < n; r++) memcpy(sc->yk + (size_t)sc->rows[r] * D, sc->ys + (size_t)r * D, (size_t)D * 4);
        xs_done(x, mk, j);
        tel_lap(&m->tel, TEL_EXPERT_MM);
    }
    memset(sc->moe_acc, 0, (size_t)S * D * 4);
    for (int u = 0; u < nu; u++)
        for (int i = 0; i < S * K; i++) {
            if (sc->route_e[i] != sc->uniq[u]) continue;
            float wt = sc->route_w[i], *acc = sc->moe_acc + (size_t)(i / K) * D;
            const float *y = sc->yk + (size_t)i * D;
            for (int d = 0; d < D; d++) acc[d] += wt * y[d];
        }
    if (c->n_shared) {
        mlp(&m->mm, &L->gate, &L->up, &L->down, sc->a, S, sc->mlp_g, sc->mlp_u, sc->tmp);
        for (size_t i = 0; i < (size_t)S * D; i++) sc->tmp[i] = sc->moe_acc[i] + sc->tmp[i];
    } else memcpy(sc->tmp, sc->moe_acc, (size_t)S * D * 4);
    tel_lap(&m->tel, TEL_DENSE_MM);
    return 0;
}

/* Router lookahead: after layer l's attention, the next MoE layer's router
 * runs on the current residual (normed with that layer's weights) and its
 * top pilot_k experts per row are prefetched (PILOT_REAL) or hinted to the
 * kernel (PILOT). Prediction only: never changes what is computed. */
static void fwd_pilot(coli_model *m, int l, int S) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int next = l + 1;
    while (next < c->n_layers && !c->moe[next]) next++;
    if (next >= c->n_layers) return;
    const coli_layer *N = &m->L[next];
    int D = c->dim, E = c->n_experts, n = 0;
    for (int s = 0; s < S; s++) rmsnorm(sc->xs + (size_t)s * D, sc->x + (size_t)s * D, N->post_norm, D, c->rms_eps);
    moe_route(m, N, sc->xs, S); /* route_e/route_w are free until this layer's MoE routes */
    for (int s = 0; s < S; s++) {
        const float *lg = sc->rlogit + (size_t)s * E;
        for (int k = 0; k < m->pilot_k; k++) { /* top pilot_k by biased score */
            int best = -1;
            float bv = 0;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = n - k; j < n; j++) taken |= m->pred[j] == e;
                float v = 1.0f / (1.0f + expf(-lg[e])) + N->router_bias[e];
                if (!taken && (best < 0 || v > bv)) best = e, bv = v;
            }
            m->pred[n++] = best;
        }
    }
    xs_prefetch(&m->xs, moe_index(c, next), m->pred, n, m->pilot_real);
}

/* One forward over S ≤ max_s tokens at positions pos..pos+S-1. Writes the
 * logits of every row to out[S][vocab], or (out = NULL) of the last row to
 * sc->logits. Returns 0, or -1 with m->err set (expert read failure). */
static int fwd_batch(coli_model *m, const int *tok, int S, int pos, float *out) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int D = c->dim;
    for (int s = 0; s < S; s++) qt_dequant_row(&m->embed, tok[s], sc->x + (size_t)s * D);
    for (int l = 0; l < c->n_layers; l++) {
        coli_layer *L = &m->L[l];
        for (int s = 0; s < S; s++) rmsnorm(sc->a + (size_t)s * D, sc->x + (size_t)s * D, L->in_norm, D, c->rms_eps);
        fwd_attention(m, l, S, pos);
        for (size_t i = 0; i < (size_t)S * D; i++) sc->x[i] += sc->tmp[i];
        tel_lap(&m->tel, TEL_ATTN);
        if (m->pilot && S <= 8) {
            fwd_pilot(m, l, S);
            tel_lap(&m->tel, TEL_ROUTER);
        }
        for (int s = 0; s < S; s++) rmsnorm(sc->a + (size_t)s * D, sc->x + (size_t)s * D, L->post_norm, D, c->rms_eps);
        if (c->moe[l]) {
            if (fwd_moe(m, l, S)) return -1;
        } else {
            mlp(&m->mm, &L->gate, &L->up, &L->down, sc->a, S, sc->mlp_g, sc->mlp_u, sc->tmp);
            tel_lap(&m->tel, TEL_DENSE_MM);
        }
        for (size_t i = 0; i < (size_t)S * D; i++) sc->x[i] += sc->tmp[i];
    }
    int r0 = out ? 0 : S - 1, n = out ? S : 1;
    for (int s = 0; s < n; s++) rmsnorm(sc->a + (size_t)s * D, sc->x + (size_t)(r0 + s) * D, m->final_norm, D, c->rms_eps);
    mm_matmul(&m->mm, &m->lm_head, sc->a, n, out ? out : sc->logits);
    tel_lap(&m->tel, TEL_DENSE_MM);
    return 0;
}

/* Runs n tokens at positions pos.. in chunks of UBATCH. With all_out set,
 * the logits of every position go to all_out[n][vocab]; otherwise the last
 * position's logits are left in sc->logits. */
static int fwd_tokens(coli_model *m, const int *tok, int n, int pos, float *all_out) {
    coli_config *c = &m->c;
    if (pos + n > m->kv.ctx) return model_fail(m, "context of %d tokens exceeds CTX=%d", pos + n, m->kv.ctx);
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= c->vocab) return model_fail(m, "token id %d is outside the vocabulary (%d)", tok[i], c->vocab);
    for (int done = 0; done < n;) {
        int S = n - done < m->ubatch ? n - done : m->ubatch;
        if (fwd_batch(m, tok + done, S, pos + done, all_out ? all_out + (size_t)done * c->vocab : NULL)) return -1;
        done += S;
    }
    if (all_out) memcpy(m->sc.logits, all_out + (size_t)(n - 1) * c->vocab, (size_t)c->vocab * 4);
    return 0;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* ----------------------------------------------------------------- oracle */

typedef struct {
    int *prompt, np;
    int *argmax;
    int *greedy, ng;
    float *logits;        /* [np][vocab] */
    float *greedy_logits; /* [ng][vocab] */
} coli_ref;

static void ref_free(coli_ref *r) {
    free(r->prompt);
    free(r->argmax);
    free(r->greedy);
    free(r->logits);
    free(r->greedy_logits);
    memset(r, 0, sizeof *r);
}

static int ref_ids(const js_doc *d, int node, const char *key, int vocab, int **out, int *n, const char *path, char *err, size_t errlen) {
    int a = js_get(d, node, key);
    if (js_typeof(d, a) != JS_ARR || js_count(d, a) < 1) return snprintf(err, errlen, "%s: '%s' must be a non-empty list of token ids", path, key), -1;
    *n = js_count(d, a);
    *out = (int *)malloc((size_t)*n * sizeof(int));
    if (!*out) return snprintf(err, errlen, "out of memory"), -1;
    int i = 0;
    for (int c = js_first(d, a); c >= 0; c = js_next(d, c), i++) {
        if (!js_is_int(d, c) || js_int(d, c) < 0 || js_int(d, c) >= vocab)
            return snprintf(err, errlen, "%s: %s[%d] is not a token id below vocab_size %d", path, key, i, vocab), -1;
        (*out)[i] = (int)js_int(d, c);
    }
    return 0;
}

static int ref_rows(const js_doc *d, int node, const char *key, int rows, int vocab, float **out, const char *path, char *err, size_t errlen) {
    int a = js_get(d, node, key);
    if (js_typeof(d, a) != JS_ARR || js_count(d, a) != rows) return snprintf(err, errlen, "%s: '%s' must hold %d rows", path, key, rows), -1;
    *out = (float *)malloc((size_t)rows * vocab * 4);
    if (!*out) return snprintf(err, errlen, "out of memory"), -1;
    int r = 0;
    for (int row = js_first(d, a); row >= 0; row = js_next(d, row), r++) {
        if (js_typeof(d, row) != JS_ARR || js_count(d, row) != vocab)
            return snprintf(err, errlen, "%s: %s[%d] must hold %d numbers", path, key, r, vocab), -1;
        int i = 0;
        for (int x = js_first(d, row); x >= 0; x = js_next(d, x), i++) {
            if (!js_is_num(d, x)) return snprintf(err, errlen, "%s: %s[%d][%d] is not a number", path, key, r, i), -1;
            (*out)[(size_t)r * vocab + i] = (float)js_num(d, x);
        }
    }
    return 0;
}

/* Loads and validates <dir>/ref.json against the model's vocabulary. */
static int ref_load(coli_ref *r, const char *dir, int vocab, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    char path[4096];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    js_doc *d = js_load_object(path, 256u << 20, err, errlen);
    if (!d && errno == ENOENT) {
        size_t l = strlen(err);
        snprintf(err + l, errlen - l, " (no PROMPT given, so this is the oracle self-test, which needs the reference file)");
    }
    if (!d) return -1;
    int n, rc = ref_ids(d, d->root, "prompt_ids", vocab, &r->prompt, &r->np, path, err, errlen);
    if (!rc) rc = ref_ids(d, d->root, "argmax", vocab, &r->argmax, &n, path, err, errlen);
    if (!rc && n != r->np) rc = (snprintf(err, errlen, "%s: 'argmax' has %d entries for %d prompt ids", path, n, r->np), -1);
    if (!rc) rc = ref_ids(d, d->root, "greedy_ids", vocab, &r->greedy, &r->ng, path, err, errlen);
    if (!rc) rc = ref_rows(d, d->root, "logits", r->np, vocab, &r->logits, path, err, errlen);
    if (!rc) rc = ref_rows(d, d->root, "greedy_logits", r->ng, vocab, &r->greedy_logits, path, err, errlen);
    js_free(d);
    if (rc) ref_free(r);
    return rc;
}

/* Largest |a - b| over n values; +inf if any value of a is not finite. */
static double max_abs_diff(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        if (d > mx) mx = d;
    }
    return mx;
}

typedef struct {
    int tf_ok, tf_n, greedy_ok, greedy_n, first_bad_tf, first_bad_greedy;
    double tf_diff, greedy_diff;
} coli_oracle_result;

/* Teacher-forced forward over the reference prompt, then a greedy
 * continuation through the KV cache, both compared with the reference. */
static int oracle_run(coli_model *m, const coli_ref *r, coli_oracle_result *res) {
    int V = m->c.vocab;
    memset(res, 0, sizeof *res);
    res->first_bad_tf = res->first_bad_greedy = -1;
    if (r->np + r->ng > m->kv.ctx) return model_fail(m, "ref.json needs %d positions but CTX is %d", r->np + r->ng, m->kv.ctx);
    float *all = falloc((size_t)r->np * V);
    if (!all) return model_fail(m, "out of memory");
    double t0 = compat_now();
    if (fwd_tokens(m, r->prompt, r->np, 0, all)) { free(all); return -1; }
    m->tel.t_prefill = m->tel.ttft = compat_now() - t0;
    m->tel.prompt_tokens = r->np;
    res->tf_n = r->np;
    res->tf_diff = max_abs_diff(all, r->logits, (size_t)r->np * V);
    for (int i = 0; i < r->np; i++) {
        int ok = argmax(all + (size_t)i * V, V) == r->argmax[i];
        res->tf_ok += ok;
        if (!ok && res->first_bad_tf < 0) res->first_bad_tf = i;
    }
    free(all);
    res->greedy_n = r->ng;
    t0 = compat_now();
    for (int i = 0; i < r->ng; i++) {
        const float *lg = m->sc.logits;
        double d = max_abs_diff(lg, r->greedy_logits + (size_t)i * V, (size_t)V);
        if (d > res->greedy_diff) res->greedy_diff = d;
        int tok = argmax(lg, V), ok = tok == r->greedy[i];
        res->greedy_ok += ok;
        if (!ok && res->first_bad_greedy < 0) res->first_bad_greedy = i;
        tel_lap(&m->tel, TEL_SAMPLE);
        if (model_safe_point(m, i + 1)) return -1;
        tel_lap(&m->tel, TEL_OTHER);
        if (i + 1 < r->ng && fwd_tokens(m, &tok, 1, r->np + i, NULL)) return -1;
    }
    m->tel.t_decode = compat_now() - t0;
    m->tel.gen_tokens = r->ng;
    return 0;
}

/* Exact mode (float arithmetic): every argmax equal, logits within
 * ORACLE_TOL, the greedy continuation identical. With IDOT on integer
 * weights the activations are rounded to int8, so only agreement of the
 * teacher-forced argmax is required: at least 90%. */
static int oracle_pass(const coli_oracle_result *o, int approximate) {
    if (approximate) return o->tf_ok * 10 >= o->tf_n * 9 && isfinite(o->tf_diff);
    return o->tf_ok == o->tf_n && o->greedy_ok == o->greedy_n && o->tf_diff <= ORACLE_TOL && o->greedy_diff <= ORACLE_TOL;
}

/* ------------------------------------------------------------------- main */

typedef struct {
    env_val v[ENV_COUNT];
} coli_env;

static const env_val *env_v(const coli_env *e, env_id id) { return &e->v[id]; }
static long long env_i(const coli_env *e, env_id id) { return e->v[id].i; }
static double env_f(const coli_env *e, env_id id) { return e->v[id].f; }

/* Resolves every knob from the environment; warns about likely typos.
 * Returns 0 or -1 with err naming the variable. */
static int coli_env_load(coli_env *e, char *err, size_t errlen) {
    extern char **environ;
    for (int i = 0; i < ENV_COUNT; i++)
        if (env_parse(&env_knobs[i], getenv(env_knobs[i].name), &e->v[i], err, errlen)) return -1;
    static const char *const system_vars[] = {"TERM", "HOME", "PATH", "USER", "SHELL", "LANG", "PWD", "OLDPWD", "LOGNAME",
                                              "HOST", "TMPDIR", "MAIL", "EDITOR", "PAGER", "DISPLAY", "TZ", NULL};
    for (char **p = environ; p && *p; p++) {
        char name[128];
        const char *eq = strchr(*p, '=');
        size_t l = eq ? (size_t)(eq - *p) : strlen(*p);
        if (l >= sizeof name) continue;
        memcpy(name, *p, l);
        name[l] = 0;
        int sys = 0;
        for (int k = 0; system_vars[k]; k++) sys |= !strcmp(name, system_vars[k]);
        const char *hint = sys ? NULL : env_suggest(name);
        if (hint) fprintf(stderr, "colibri: warning: %s is not a colibri variable -- did you mean %s?\n", name, hint);
        else if (!strncmp(name, "COLI_", 5) && env_index(name) < 0)
            fprintf(stderr, "colibri: warning: unknown variable %s (see ./colibri --help)\n", name);
    }
    return 0;
}

/* Parses COLI_DISK_WEIGHTS: exactly n positive numbers, comma-separated. */
static int parse_weights(const char *v, int n, double *w) {
    const char *p = v;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        w[i] = strtod(p, &end);
        if (errno || end == p || !(w[i] > 0) || !isfinite(w[i])) return -1;
        p = end;
        if (i + 1 < n && *p++ != ',') return -1;
    }
    return *p ? -1 : 0;
}

/* Plain options from the resolved knobs; incompatible combinations are
 * refused. Returns 0, or -1 with err naming the variables. */
static int coli_opts_from_env(const coli_env *e, coli_opts *o, char *err, size_t errlen) {
    static const int absorb_map[] = {-1, 0, 1}; /* auto|0|1 */
    memset(o, 0, sizeof *o);
    o->cap = (int)env_i(e, ENV_CAP), o->ctx = (int)env_i(e, ENV_CTX), o->ubatch = (int)env_i(e, ENV_UBATCH);
    o->absorb = absorb_map[env_i(e, ENV_ABSORB)];
    o->ram_gb = env_f(e, ENV_RAM_GB), o->overcommit = (int)env_i(e, ENV_COLI_RAM_OVERCOMMIT);
    o->pin = PIN_AUTO, o->pin_gb = -1, o->quiet = !isatty(2);
    const char *pin = env_v(e, ENV_PIN)->s;
    if (!strcmp(pin, "0")) o->pin = PIN_OFF;
    else if (strcmp(pin, "auto")) o->pin = PIN_FILE, o->pin_file = pin;
    const env_val *pg = env_v(e, ENV_PIN_GB);
    if (pg->s) o->pin_gb = pg->i ? PIN_GB_ALL : pg->f;
    int pipe = (int)env_i(e, ENV_PIPE), uring = (int)env_i(e, ENV_URING); /* 0 auto, 1 off, 2 on */
    o->io.mmap = (int)env_i(e, ENV_COLI_MMAP), o->io.direct = (int)env_i(e, ENV_DIRECT);
    o->io.workers = (int)env_i(e, ENV_PIPE_WORKERS), o->io.fail_at = env_i(e, ENV_COLI_IO_FAULT);
    o->pilot = (int)env_i(e, ENV_PILOT), o->pilot_real = (int)env_i(e, ENV_PILOT_REAL), o->pilot_k = (int)env_i(e, ENV_PILOT_K);
    o->mlock = (int)env_i(e, ENV_MLOCK), o->numa = (int)env_i(e, ENV_COLI_NUMA);
    static const int bits[] = {2, 4, 8, 0}; /* choices 2|4|8|16; 16 keeps floats as f32 */
    o->dense_bits = bits[env_i(e, ENV_DENSE_BITS)], o->expert_bits = bits[env_i(e, ENV_EXPERT_BITS)];
    o->group_size = (int)env_i(e, ENV_GROUP_SIZE);
    if (o->group_size && (o->group_size % 16 || o->group_size < 16))
        return snprintf(err, errlen, "GROUP_SIZE=%d is invalid: expected 0 (per row) or a multiple of 16 in [16, 256]", o->group_size), -1;
    o->idot = (int)env_i(e, ENV_IDOT);
    const char *simd = env_v(e, ENV_SIMD)->s;
    o->simd = strcmp(simd, "auto") ? mm_level_parse(simd) : -1;
    if (o->simd >= 0 && !mm_level_ok(o->simd))
        return snprintf(err, errlen, "SIMD=%s: this CPU lacks %s (best here: %s)", simd, mm_level_needs(o->simd), mm_level_name(mm_best_level())), -1;
    if (o->io.mmap && (uring == 2 || o->io.direct || o->pilot_real))
        return snprintf(err, errlen, "COLI_MMAP=1 uses experts in place, so it cannot be combined with %s", uring == 2 ? "URING=1" : o->io.direct ? "DIRECT=1" : "PILOT_REAL=1"), -1;
    if (uring == 2 && !io_have_uring())
        fprintf(stderr, "colibri: URING=1: this build has no io_uring (liburing was not found at build time); using reader threads\n");
    if (o->io.mmap) o->io.mode = IO_SYNC;
    else if (io_have_uring() && (uring == 2 || (uring == 0 && pipe != 1))) o->io.mode = IO_URING;
    else o->io.mode = pipe == 1 ? IO_SYNC : IO_POOL;
    const char *mir = env_v(e, ENV_COLI_MODEL_MIRROR)->s;
    for (const char *p = mir; p && *p;) {
        size_t l = strcspn(p, ",;");
        if (l) {
            if (o->nmirrors == IO_MAX_DRIVES - 1) return snprintf(err, errlen, "COLI_MODEL_MIRROR: at most %d directories", IO_MAX_DRIVES - 1), -1;
            char *d = strndup(p, l);
            struct stat st;
            if (stat(d, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "COLI_MODEL_MIRROR: %s is not a directory", d);
                free(d);
                return -1;
            }
            o->mirrors[o->nmirrors++] = d;
        }
        p += l + (p[l] != 0);
    }
    o->io.weight[0] = 1;
    const char *wv = env_v(e, ENV_COLI_DISK_WEIGHTS)->s;
    if (wv && parse_weights(wv, 1 + o->nmirrors, o->io.weight))
        return snprintf(err, errlen, "COLI_DISK_WEIGHTS=%s is invalid: expected %d positive numbers separated by commas (primary first, then each mirror)", wv, 1 + o->nmirrors), -1;
    o->weights_given = wv != NULL;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "colibri " COLI_VERSION " -- GLM-5 (glm_moe_dsa) inference with routed experts streamed from disk\n\n"
            "usage: PROMPT=\"...\" ./colibri MODEL_DIR   generate text (stdout), statistics on stderr\n"
            "       ./colibri MODEL_DIR                oracle self-test against MODEL_DIR/ref.json\n"
            "       ./colibri --tokenize [--jsonl] MODEL_DIR   token ids of stdin (--jsonl: per line, each a JSON string)\n"
            "       ./colibri --help                   this text\n"
            "       ./colibri --env-table          the environment registry as a markdown table\n\n"
            "Exit codes: 0 ok, 1 oracle mismatch, 2 bad input or configuration.\n\n"
            "Environment:\n");
    for (int i = 0; i < ENV_COUNT; i++)
        fprintf(f, "  %-20s default %-6s %s\n", env_knobs[i].name, env_knobs[i].def ? env_knobs[i].def : "unset", env_knobs[i].doc);
}

static void print_startup(const coli_model *m, const char *dir) {
    const coli_config *c = &m->c;
    const xs_store *x = &m->xs;
    int nd = 0, nf = 0, pinned = 0;
    for (int l = 0; l < c->n_layers; l++) nd += !c->moe[l], nf += c->idx_full[l];
    for (int k = 0; k < x->n_layers; k++) pinned += x->n_pinned[k];
    const xs_layout *L0 = x->n_layers ? &x->lay[0] : NULL;
    char ef[64] = "none";
    if (L0) snprintf(ef, sizeof ef, "%s%s%.0d", qt_fmt_name(L0->fmt[0]), L0->gs[0] ? " g" : "", L0->gs[0]);
    fprintf(stderr,
            "colibri: %s | glm_moe_dsa, %d layers (%d dense, %d MoE; %d full indexers) | %d experts, top-%d | attention %s, experts %s | "
            "ctx %d | kernel %s, IDOT %s | %d threads\n",
            dir, c->n_layers, nd, c->n_layers - nd, nf, c->n_experts, c->topk, qt_fmt_name(m->L[0].q_a.fmt), ef, m->kv.ctx,
            mm_level_name(m->mm.level), m->mm.idot ? "on" : "off", coli_nthreads());
    char b[8][32];
    uint64_t pin_bytes = 0;
    for (int k = 0; k < x->n_layers; k++) pin_bytes += (uint64_t)x->n_pinned[k] * xs_expert_bytes(x, k);
    fprintf(stderr,
            "colibri: plan: budget %s | resident: dense %s, KV %s, working set %s | experts %s each: %d pinned (%s), "
            "LRU %d slots/layer (up to %s) | projected peak %s\n",
            fmt_bytes(b[0], 32, (double)m->budget), fmt_bytes(b[1], 32, (double)m->dense_bytes), fmt_bytes(b[2], 32, (double)m->kv_bytes),
            fmt_bytes(b[3], 32, (double)m->work_bytes), fmt_bytes(b[4], 32, (double)xs_max_expert_bytes(x)), pinned,
            fmt_bytes(b[5], 32, (double)pin_bytes), m->plan.lru_slots, fmt_bytes(b[6], 32, (double)m->plan.lru_bytes),
            fmt_bytes(b[7], 32, (double)m->plan.peak));
    if (pinned)
        fprintf(stderr, "colibri: pinned %d experts from the usage history: %s read in %.2f s\n", pinned,
                fmt_bytes(b[0], 32, (double)x->bytes_read), x->read_s);
    const io_ctx *io = &m->io;
    static const char *const mode[] = {"on the compute thread", "by a pool of reader threads", "by io_uring batches"};
    fprintf(stderr, "colibri: expert reads: %s", x->mmap ? "in place from mapped shards (COLI_MMAP)" : mode[io->o.mode]);
    if (io->o.mode == IO_POOL) fprintf(stderr, " (%d)", io->nthr);
    fprintf(stderr, ", %s, prefetch %s", io->o.direct ? "O_DIRECT" : "buffered",
            m->pilot_real ? "real loads" : m->pilot ? "kernel hints" : "off");
    if (m->pilot) fprintf(stderr, " (%d per position)", m->pilot_k);
    if (io->ndrives > 1) fprintf(stderr, ", %d drives", io->ndrives);
    if (m->numa) fprintf(stderr, ", NUMA interleaved");
    fputc('\n', stderr);
}

/* The end-of-run lines (counters from the expert store). */
static void print_end(coli_model *m) {
    tel_stats *t = &m->tel;
    t->hit_pin = m->xs.hit_pin, t->hit_lru = m->xs.hit_lru, t->miss = m->xs.miss + m->xs.mapped, t->bytes_read = m->xs.bytes_read;
    tel_lap(t, TEL_OTHER);
    t->io_busy = m->xs.read_s + m->xs.busy_wall; /* wall time with reads in flight, not a sum over parallel reads */
    tel_end_line(stderr, t);
    if (t->prof) tel_prof_line(stderr, t);
    if (m->repinned) fprintf(stderr, "colibri: re-pinned %d experts during the run\n", m->repinned);
    const xs_store *x = &m->xs;
    if (m->pilot)
        fprintf(stderr, "colibri: prefetch: recall %.1f%% (%llu of %llu routed experts were predicted; %llu predictions)\n",
                tel_pct((double)x->pred_used, (double)x->routed), (unsigned long long)x->pred_used, (unsigned long long)x->routed,
                (unsigned long long)x->pred_total);
    if (m->io.ndrives > 1) {
        char b[32];
        fprintf(stderr, "colibri: drives:");
        for (int d = 0; d < m->io.ndrives; d++)
            fprintf(stderr, "%s %s %s (%llu reads)", d ? " |" : "", d ? "mirror" : "primary", fmt_bytes(b, sizeof b, (double)m->io.bytes[d]),
                    (unsigned long long)m->io.reads[d]);
        for (int d = 1; d < m->io.ndrives; d++)
            if (m->io.mirror_failed[d]) fprintf(stderr, " | mirror %d failed a read and was dropped", d);
        fputc('\n', stderr);
    }
}

static int run_oracle(coli_model *m, const char *dir) {
    coli_ref r;
    if (ref_load(&r, dir, m->c.vocab, m->err, sizeof m->err)) {
        fprintf(stderr, "colibri: %s\n", m->err);
        return EXIT_INPUT;
    }
    coli_oracle_result o;
    if (oracle_run(m, &r, &o)) {
        fprintf(stderr, "colibri: %s\n", m->err);
        ref_free(&r);
        return EXIT_INPUT;
    }
    print_end(m);
    int approx = m->mm.idot && m->any_int, pass = oracle_pass(&o, approx);
    printf("oracle: teacher-forced %d/%d argmax, max |dlogit| %.1e; greedy %d/%d, max |dlogit| %.1e%s -- %s\n", o.tf_ok, o.tf_n,
           o.tf_diff, o.greedy_ok, o.greedy_n, o.greedy_diff, approx ? " (IDOT on integer weights: needs 90% argmax)" : "",
           pass ? "PASS" : "FAIL");
    if (!pass) {
        if (o.first_bad_tf >= 0) fprintf(stderr, "colibri: first teacher-forced mismatch at position %d\n", o.first_bad_tf);
        if (o.first_bad_greedy >= 0) fprintf(stderr, "colibri: first greedy mismatch at step %d (expected token %d)\n", o.first_bad_greedy, r.greedy[o.first_bad_greedy]);
        if (!approx && (o.tf_diff > ORACLE_TOL || o.greedy_diff > ORACLE_TOL)) fprintf(stderr, "colibri: logits differ by more than %.0e\n", ORACLE_TOL);
    }
    ref_free(&r);
    return pass ? 0 : EXIT_MISMATCH;
}

/* ------------------------------------------------------------- generation */

typedef struct {
    const char *prompt, *system;
    int chat, think, ngen, tokens;
    smp_params sp;
    uint64_t seed;
} coli_gen;

/* Sampling settings: each knob, or generation_config.json's value when the
 * knob is unset (greedy when generation_config.json does not sample). */
static void gen_from_env(const coli_env *e, const coli_config *c, coli_gen *g) {
    memset(g, 0, sizeof *g);
    g->prompt = env_v(e, ENV_PROMPT)->s, g->system = env_v(e, ENV_SYSTEM)->s;
    g->chat = (int)env_i(e, ENV_CHAT_TEMPLATE), g->think = (int)env_i(e, ENV_THINK), g->ngen = (int)env_i(e, ENV_NGEN);
    g->tokens = (int)env_i(e, ENV_TOKENS);
    const env_val *t = env_v(e, ENV_TEMP), *k = env_v(e, ENV_TOP_K), *p = env_v(e, ENV_TOP_P), *mp = env_v(e, ENV_MIN_P), *sd = env_v(e, ENV_SEED);
    g->sp.temp = t->s ? (float)t->f : c->gen_sample ? c->gen_temp : 0.0f;
    g->sp.top_k = k->s ? (int)k->i : c->gen_sample ? c->gen_top_k : 0;
    g->sp.top_p = p->s ? (float)p->f : c->gen_sample ? c->gen_top_p : 1.0f;
    g->sp.min_p = mp->s ? (float)mp->f : c->gen_sample ? c->gen_min_p : 0.0f;
    if (sd->s) g->seed = (uint64_t)sd->i;
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g->seed = ((uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 20) & ((1ull << 53) - 1);
    }
}

static void print_ids(const char *what, const int *ids, size_t n) {
    fprintf(stderr, "colibri: %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* Loads <dir>/tokenizer.json, or says why not. */
static tok *load_tokenizer(const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return tok_load(path, err, errlen);
}

/* PROMPT mode: encode (through the chat template unless CHAT_TEMPLATE=0),
 * prefill, then sample and stream text until a stop token, NGEN tokens or a
 * full context. Returns the exit status. */
static int run_generate(coli_model *m, const char *dir, const coli_gen *g, tok *t) {
    coli_config *c = &m->c;
    char err[600];
    int rc = EXIT_INPUT;
    tok_ids ids = {0};
    tok_str out = {0};
    tok_stream st = {0};
    smp_work w = {0};
    smp_rng rng;
    int r = g->chat ? tok_chat(t, g->system, g->prompt, g->think, &ids) : tok_encode(t, g->prompt, strlen(g->prompt), &ids);
    if (r == -2) { tok_chat_check(t, err, sizeof err); fprintf(stderr, "colibri: %s/tokenizer.json: %s (set CHAT_TEMPLATE=0 to send the prompt raw)\n", dir, err); goto done; }
    if (r) { fprintf(stderr, "colibri: out of memory encoding the prompt\n"); goto done; }
    if (!ids.n) { fprintf(stderr, "colibri: the prompt is empty\n"); goto done; }
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] >= c->vocab) { fprintf(stderr, "colibri: %s/tokenizer.json: token id %d is outside the model's vocabulary (%d)\n", dir, ids.ids[i], c->vocab); goto done; }
    if ((int)ids.n >= m->kv.ctx) { fprintf(stderr, "colibri: the prompt has %zu tokens but CTX is %d; raise CTX\n", ids.n, m->kv.ctx); goto done; }
    if (smp_work_alloc(&w, c->vocab)) { fprintf(stderr, "colibri: out of memory\n"); goto done; }
    smp_seed(&rng, g->seed);
    int ngen = g->ngen < m->kv.ctx - (int)ids.n ? g->ngen : m->kv.ctx - (int)ids.n;
    if (g->sp.temp > 0)
        fprintf(stderr, "colibri: prompt %zu tokens | up to %d new | temperature %g, top-k %d, top-p %g, min-p %g, seed %llu\n", ids.n, ngen,
                g->sp.temp, g->sp.top_k, g->sp.top_p, g->sp.min_p, (unsigned long long)g->seed);
    else fprintf(stderr, "colibri: prompt %zu tokens | up to %d new | greedy\n", ids.n, ngen);
    if (g->tokens) print_ids("prompt tokens", ids.ids, ids.n);
    int *gen = (int *)malloc((size_t)ngen * sizeof(int) + sizeof(int)), n = 0;
    if (!gen) { fprintf(stderr, "colibri: out of memory\n"); goto done; }
    double t0 = compat_now();
    if (fwd_tokens(m, ids.ids, (int)ids.n, 0, NULL)) { fprintf(stderr, "colibri: %s\n", m->err); free(gen); goto done; }
    m->tel.t_prefill = compat_now() - t0;
    m->tel.prompt_tokens = (int)ids.n;
    double t1 = compat_now();
    const char *why = "NGEN";
    for (;;) {
        int next = smp_sample(&g->sp, m->sc.logits, c->vocab, &rng, &w);
        if (!n) m->tel.ttft = compat_now() - t0;
        if (next < 0) { fprintf(stderr, "\ncolibri: the logits are not finite (NaN or infinity); stopping\n"); free(gen); goto done; }
        if (smp_is_stop(c->eos, c->n_eos, next)) { why = "stop token"; break; }
        gen[n++] = next;
        out.n = 0;
        if (tok_stream_put(t, &st, next, &out)) { fprintf(stderr, "colibri: out of memory\n"); free(gen); goto done; }
        if (out.n) fwrite(out.s, 1, out.n, stdout), fflush(stdout);
        tel_lap(&m->tel, TEL_SAMPLE);
        if (n >= ngen) { why = n == m->kv.ctx - (int)ids.n ? "CTX" : "NGEN"; break; }
        if (model_safe_point(m, n) || fwd_tokens(m, &next, 1, (int)ids.n + n - 1, NULL)) { fprintf(stderr, "\ncolibri: %s\n", m->err); free(gen); goto done; }
    }
    out.n = 0;
    tok_stream_flush(&st, 0, &out);
    if (out.n) fwrite(out.s, 1, out.n, stdout);
    if (isatty(1)) fputc('\n', stdout);
    fflush(stdout);
    m->tel.t_decode = compat_now() - t1;
    m->tel.gen_tokens = n;
    if (g->tokens) print_ids("generated tokens", gen, (size_t)n);
    fprintf(stderr, "colibri: stopped: %s\n", why);
    free(gen);
    print_end(m);
    rc = 0;
done:
    tok_ids_free(&ids);
    tok_str_free(&out);
    smp_work_free(&w);
    return rc;
}

/* --tokenize: token ids of stdin's text (one line of ids), or with --jsonl
 * of each stdin line, a JSON string (one line of ids per line). */
static int run_tokenize(const char *dir, int jsonl) {
    char err[600];
    tok *t = load_tokenizer(dir, err, sizeof err);
    if (!t) return fprintf(stderr, "colibri: %s\n", err), EXIT_INPUT;
    size_t cap = 1 << 16, len = 0;
    char *buf = (char *)malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len, stdin)) > 0;) {
        len += r;
        if (len == cap) {
            char *nb = (char *)realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    if (!buf) return tok_free(t), fprintf(stderr, "colibri: out of memory\n"), EXIT_INPUT;
    tok_ids ids = {0};
    int rc = 0, line = 0;
    for (size_t p = 0; p < len || (!jsonl && p == 0);) {
        size_t e = jsonl ? p : len;
        while (jsonl && e < len && buf[e] != '\n') e++;
        const char *text = buf + p;
        size_t n = e - p;
        js_doc *d = NULL;
        line++;
        if (jsonl) {
            d = js_parse(text, n, err, sizeof err);
            if (!d || !js_str(d, d->root)) {
                fprintf(stderr, "colibri: stdin line %d is not a JSON string%s%s\n", line, d ? "" : ": ", d ? "" : err);
                js_free(d);
                rc = EXIT_INPUT;
                break;
            }
            text = js_str(d, d->root), n = js_str_len(d, d->root);
        }
        ids.n = 0;
        if (tok_encode(t, text, n, &ids)) { rc = EXIT_INPUT; js_free(d); break; }
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        putchar('\n');
        js_free(d);
        p = e + 1;
        if (!jsonl) break;
    }
    tok_ids_free(&ids);
    free(buf);
    tok_free(t);
    return rc;
}

/* Loads the expert usage history for PIN into rows[n_layers][E]. Returns
 * 0 (rows filled or all zero), or -1 for a PIN file that cannot be used. */
static int usage_history(const coli_model *m, const char *dir, const coli_opts *o, uint64_t *rows, int *have) {
    const coli_config *c = &m->c;
    char path[4096], err[300];
    *have = 0;
    if (o->pin == PIN_OFF) return 0;
    if (o->pin == PIN_FILE) snprintf(path, sizeof path, "%s", o->pin_file);
    else snprintf(path, sizeof path, "%s/.coli_usage", dir);
    int rc = tel_usage_load(path, c->n_layers, c->n_experts, tel_engine_id("glm_moe_dsa"), rows, err, sizeof err);
    if (rc == 0) {
        *have = 1;
        return 0;
    }
    if (o->pin == PIN_FILE) {
        fprintf(stderr, "colibri: PIN=%s: %s\n", path, rc == 1 ? "no such file" : err);
        return -1;
    }
    if (rc < 0) fprintf(stderr, "colibri: ignoring %s: %s; running without usage history\n", path, err);
    return 0;
}

/* Adds this run's routing counts to the history and writes <dir>/.coli_usage
 * atomically; a failure is reported, never fatal. */
static void usage_save(const coli_model *m, const char *dir, uint64_t *rows) {
    const coli_config *c = &m->c;
    for (int k = 0; k < m->xs.n_layers; k++)
        for (int e = 0; e < c->n_experts; e++)
            rows[(size_t)moe_layer(c, k) * c->n_experts + e] += m->xs.count[(size_t)k * c->n_experts + e];
    char path[4096], err[300];
    snprintf(path, sizeof path, "%s/.coli_usage", dir);
    if (tel_usage_save(path, c->n_layers, c->n_experts, tel_engine_id("glm_moe_dsa"), rows, err, sizeof err))
        fprintf(stderr, "colibri: warning: could not save expert usage to %s: %s\n", path, err);
}

/* A mapped shard truncated under the engine raises SIGBUS on access: say so
 * instead of dying silently. */
static void on_sigbus(int sig) {
    static const char msg[] = "colibri: SIGBUS reading a mapped model file (was a shard truncated or removed while running?)\n";
    (void)sig;
    if (write(2, msg, sizeof msg - 1) < 0) _exit(EXIT_INPUT);
    _exit(EXIT_INPUT);
}

/* The command line: returns the process exit status. */
static int coli_main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { usage(stdout); return 0; }
    if (argc == 2 && !strcmp(argv[1], "--env-table")) { env_write_table(stdout); return 0; }
    if (argc >= 3 && !strcmp(argv[1], "--tokenize")) {
        int jsonl = argc == 4 && !strcmp(argv[2], "--jsonl");
        if (argc == 4 && !jsonl) { usage(stderr); return EXIT_INPUT; }
        return run_tokenize(argv[argc - 1], jsonl);
    }
    if (argc != 2 || argv[1][0] == '-') { usage(stderr); return EXIT_INPUT; }
    const char *dir = argv[1];
    char err[512];
    coli_env e;
    if (coli_env_load(&e, err, sizeof err)) { fprintf(stderr, "colibri: %s\n", err); return EXIT_INPUT; }
#ifdef _OPENMP
    if (env_i(&e, ENV_THREADS) > 0) omp_set_num_threads((int)env_i(&e, ENV_THREADS));
#endif
    static coli_opts o;
    if (coli_opts_from_env(&e, &o, err, sizeof err)) { fprintf(stderr, "colibri: %s\n", err); return EXIT_INPUT; }
    if (o.io.mmap) signal(SIGBUS, on_sigbus);
    static coli_model m;
    uint64_t *rows = NULL;
    int have = 0, rc = EXIT_INPUT;
    tok *t = NULL;
    if (env_v(&e, ENV_PROMPT)->s && !(t = load_tokenizer(dir, m.err, sizeof m.err))) goto fail; /* before any weight is read */
    if (model_open(&m, dir)) goto fail;
    if (!(rows = (uint64_t *)calloc((size_t)m.c.n_layers * m.c.n_experts, sizeof(uint64_t)))) { model_fail(&m, "out of memory"); goto fail; }
    if (usage_history(&m, dir, &o, rows, &have)) goto out;
    if (model_setup(&m, &o, have ? rows : NULL)) goto fail;
    m.repin = (int)env_i(&e, ENV_REPIN);
    m.rss_limit = env_f(&e, ENV_RSS_GUARD_GB) > 0 ? (uint64_t)(env_f(&e, ENV_RSS_GUARD_GB) * GB) : m.budget;
    print_startup(&m, dir);
    m.xs.bytes_read = 0, m.xs.read_s = 0, m.xs.busy_wall = 0, m.io.busy_ns = 0; /* the run's counters start after pinning */
    memset(m.io.bytes, 0, sizeof m.io.bytes), memset(m.io.reads, 0, sizeof m.io.reads);
    tel_start(&m.tel, (int)env_i(&e, ENV_PROF));
    coli_gen g;
    gen_from_env(&e, &m.c, &g);
    rc = g.prompt ? run_generate(&m, dir, &g, t) : run_oracle(&m, dir);
    if (rc != EXIT_INPUT && env_i(&e, ENV_USAGE_SAVE)) usage_save(&m, dir, rows);
    goto out;
fail:
    fprintf(stderr, "colibri: %s\n", m.err);
out:
    free(rows);
    tok_free(t);
    model_free(&m);
    for (int i = 0; i < o.nmirrors; i++) free(o.mirrors[i]);
    return rc;
}

#ifndef COLI_NO_MAIN
/* libgomp reads its wait policy before main. Left alone it may put idle
 * workers to sleep, and on some VMs waking them costs a scheduler tick per
 * parallel region: decode measured 0.6-1.3 tok/s instead of 18-20 on a
 * 2-vCPU machine. So unless the user chose a policy, the engine restarts
 * itself once with GOMP_SPINCOUNT set (libgomp's own default spin count,
 * which it otherwise throttles). */
static void omp_spin_reexec(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", "300000", 1)) return;
    execv("/proc/self/exe", argv); /* on failure: run as is */
}

int main(int argc, char **argv) {
    omp_spin_reexec(argv);
    return coli_main(argc, argv);
}
#endif
