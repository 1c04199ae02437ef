/* model.h — a GLM-5 model's memory: which tensors it loads and how they are
 * held (the weight table), what everything costs before anything is
 * allocated (model_measure: config.json and the shard headers alone), the
 * budget plan that refuses a run that cannot fit, then one load of the
 * dense weights, the KV cache (a slot per sequence), the activation scratch, the expert store and
 * its pinned set; and the operations between tokens (re-pinning, the RSS
 * guard). Dense weights are validated by name, shape and dtype; a quantized
 * container's U8 + .qs tensors are used as stored (docs/container.md).
 * What the GPU holds is gpu.h's: model.h hands it the matrices and the
 * store at load (model_gpu_setup, gpu_experts) and frees it.
 * Prefix: model_. Must not: compute the forward pass (forward.h), read the
 * environment or print except for progress and the plan's warnings. */
#ifndef COLI_MODEL_H
#define COLI_MODEL_H

#include <math.h>
#include <stdarg.h>

#include "compat.h"
#include "config.h"
#include "gpu.h"
#include "io.h"
#include "kernels.h"
#include "kvq.h"
#include "quant.h"
#include "ranks.h"
#include "route_trace.h"
#include "st.h"
#include "store.h"
#include "team.h"
#include "telemetry.h"
#include "tier.h"

#define GB 1e9

/* Compute threads when THREADS is not given: OpenMP's choice
 * (OMP_NUM_THREADS, else one per CPU it may use), or one per CPU the
 * process may run on without OpenMP (compat_cpus). */
static inline int coli_nthreads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return compat_cpus();
#endif
}


/* ------------------------------------------------------------------ types */

typedef struct {
    float *in_norm, *post_norm;          /* [dim]                             */
    qt_tensor q_a, q_b, kv_a, kv_b, o;   /* MLA projections; q_b is q_proj when q_lora is 0 */
    float *q_a_norm, *kv_a_norm;         /* [q_lora], [kv_lora]               */
    qt_tensor iq, ik, iw;                /* indexer wq_b, wk, weights_proj    */
    float *ik_norm_w, *ik_norm_b;        /* [index_dim] LayerNorm             */
    qt_tensor gate, up, down;            /* dense MLP or shared experts       */
    float *router, *router_bias;         /* [n_experts][dim], [n_experts]     */
} coli_layer;

/* The KV cache of `slots` independent sequences (slot-major: slot s's
 * arrays follow slot s-1's, so slot 0 alone is the layout of a one-sequence
 * cache). Each position's row is in kvq.h's format of `bits` (latents and
 * rope keys) or `ibits` (indexer keys): f32 when 32. Read rows through
 * kv_lat / kv_rope / kv_ikey and the row strides. */
typedef struct {
    uint8_t *lat;   /* [slots][layers][ctx] rows of kv_lora: the normalized latent (layers: n_layers + the MTP layer when loaded) */
    uint8_t *rope;  /* [slots][layers][ctx] rows of qk_rope: the roped shared key */
    uint8_t *ikey;  /* [slots][n_full][ctx] rows of index_dim: the indexer keys */
    int *full_slot; /* [layers] index into ikey, -1 for shared layers */
    int ctx;
    int slots;      /* sequences held (coli_opts.slots) */
    int slot;       /* the sequence single-sequence forwards (fwd_run and everything under it) and kv_persist use;
                     * set with kv_select, 0 by default */
    int dl, dr, di; /* kv_lora, qk_rope, index_dim */
    int bits, ibits; /* KV_BITS, KV_INDEX_BITS: 32, 8 or 4 */
    size_t lrb, rrb, irb; /* bytes of one row of lat, rope, ikey */
    size_t lat_n, rope_n, ikey_n; /* bytes of one slot in lat, rope, ikey */
    uint64_t gen;   /* bumped whenever slot 0's rows are replaced other than by a forward (a KV file loaded): the GPU's
                     * latent cache is slot 0's (gpu.h) */
    void *block;    /* the one allocation the arrays live in */
} coli_kv;

/* Slot s's ctx latent rows of layer l (row t at + t·lrb). */
static inline uint8_t *kv_lat(const coli_kv *kv, int s, int l) { return kv->lat + (size_t)s * kv->lat_n + (size_t)l * kv->ctx * kv->lrb; }
/* Slot s's ctx rope key rows of layer l (row t at + t·rrb). */
static inline uint8_t *kv_rope(const coli_kv *kv, int s, int l) { return kv->rope + (size_t)s * kv->rope_n + (size_t)l * kv->ctx * kv->rrb; }
/* Slot s's ctx indexer key rows of layer l, a full indexer layer (row t at + t·irb). */
static inline uint8_t *kv_ikey(const coli_kv *kv, int s, int l) {
    return kv->ikey + (size_t)s * kv->ikey_n + (size_t)kv->full_slot[l] * kv->ctx * kv->irb;
}

/* Makes slot s the one single-sequence forwards and kv_persist work on.
 * 0, or -1 when s is not a slot (nothing changes). */
static inline int kv_select(coli_kv *kv, int s) {
    if (s < 0 || s >= kv->slots) return -1;
    kv->slot = s;
    return 0;
}

/* Scratch for a forward of up to max_s positions, one allocation. */
typedef struct {
    int max_s;
    float *x, *a, *qlat, *q, *ckv, *attn, *tmp, *mlp_g, *mlp_u, *moe_acc;
    float *qi, *iw, *rlogit, *xs, *ys, *eg, *eu;
    float *logits;
    int *sel, *nsel;           /* [max_s][index_topk] chosen keys, count (-1 = all) */
    int *route_e, *rows;       /* [max_s][topk] chosen experts; row lists */
    float *route_w;
    float *yk;                 /* [max_s][topk][dim] each routed expert's output rows */
    float *hlat, *hout, *hkv;  /* attention: [heads][max_s][kv_lora] latents, [threads][max_s][v_head], [ctx][nope + v_head] */
    int *uniq;                 /* [n_experts] distinct experts of a batch */
    uint8_t *used;             /* [n_experts] */
    float *cos, *sin;          /* [ctx][qk_rope/2] */
    float *cat;                /* [max_s][2 dim] the MTP layer's [embedding ; hidden] rows */
    float **thr;               /* [threads] per-thread scratch: attention, indexer, router */
    int *rtok, *rpos, *rslot;  /* [max_s] each row's token, position and KV slot (fwd_run / fwd_rows fill them) */
    int *wrow;                 /* [max_s] the rows whose logits fwd_rows wants */
    int *pred;                 /* [max_s][pilot_k] predicted experts (router lookahead) */
    int *rk_need;              /* [max_s] the rows another rank needs (ranks.h) */
    void *block;
} coli_scratch;

enum { PIN_OFF, PIN_AUTO, PIN_FILE };
#define SLOTS_AUTO (-1)
#define SLOTS_AUTO_MAX 8
#define PIN_GB_ALL (-2.0)

/* Everything model_setup needs to know, as plain values (the run modes fill
 * it from the environment). */
typedef struct {
    int cap, ctx, ubatch, absorb;
    int slots;              /* sequences the KV cache holds (fwd_rows); 0 = 1; SLOTS_AUTO: model_auto_slots chooses */
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
    int threads;            /* compute threads (0 = coli_nthreads()) */
    int dense_bits, expert_bits, group_size; /* load-time quantization (0 = keep) */
    int mtp;                /* load the MTP layer when the checkpoint has one */
    int cuda, cuda_device;  /* GPU: -1 auto, 0 off, 1 required; which device */
    double cuda_expert_gb;  /* GPU memory for routed experts; < 0: what is left */
    double cuda_fill_mb;    /* most MB a forward copies into the GPU expert tier */
    int cuda_attn;          /* attention and its latent cache on the GPU when it holds kv_b */
    int kv_bits, kv_index_bits; /* the KV cache's rows (kvq.h): 32 (0 = unset), 8 or 4 */
    int64_t cuda_fault;     /* testing: the Nth GPU matmul fails (0: never) */
    int experts_only;       /* an MPI follower rank (ranks.h): the routed experts only, no dense weights or KV cache in memory */
} coli_opts;

/* Resident bytes by part (model_measure). */
typedef struct {
    uint64_t dense;    /* weights that stay in memory */
    uint64_t kv;       /* KV cache for the context */
    uint64_t work;     /* activations, per-thread scratch, conversion staging */
} model_mem;

struct w_spec;

typedef struct {
    coli_config c;
    st_index st;
    coli_layer *L;
    struct w_spec *specs;       /* the dense weight table (model_specs) */
    int nspecs;
    qt_tensor embed;            /* [vocab][dim] */
    float *final_norm;          /* [dim] */
    qt_tensor lm_head;
    /* The MTP layer (docs/model.md §3): layer index c.n_layers of L[], KV and
     * the store when mtp = 1; the head's own output layer when the
     * checkpoint has shared_head.head, else mtp_head = lm_head. */
    int mtp;
    int mtp_unread, mtp_skipped; /* tensors of the loaded MTP layer left unread (its own embed_tokens copy) and of
                                  * MTP layers not loaded (model_check_tensors), for the startup line */
    float *mtp_enorm, *mtp_hnorm, *mtp_norm; /* [dim] */
    qt_tensor mtp_eh, mtp_head;              /* eh_proj [dim][2 dim]; output layer */
    xs_store xs;                /* routed experts: pinned set + LRU */
    io_ctx io;                  /* expert reads */
    int pilot, pilot_real, pilot_k; /* router lookahead: hints / real loads, predictions per row */
    coli_kv kv;
    coli_scratch sc;
    tel_stats tel;
    int absorb;                 /* -1 auto, 0 reconstruct, 1 absorbed */
    int ubatch;
    int nth;                    /* compute threads: the team, scratch slots, staging buffers */
    int dense_bits, group_size; /* load-time quantization of float dense weights (0 = keep) */
    int any_int;                /* some weight is in an integer format */
    mm_ctx mm;                  /* matmul kernels (CPU level, IDOT) */
    team team;                  /* the threads a forward pass runs on */
    int numa;                   /* interleave large resident allocations */
    model_mem mem;
    tier_plan plan;
    tier_budget plan_in;        /* what the plan was made from (pin_mode NONE after an overcommitted plan) */
    uint64_t budget;            /* resolved RAM budget */
    int nslots;                 /* sequences the KV cache holds: coli_opts.slots, or model_auto_slots's choice */
    int repin;                  /* re-pin every N generated tokens (0 = off) */
    uint64_t rss_limit;         /* RSS guard (0 = off) */
    gpu_ctx gpu;                /* what the GPU holds and counts (gpu.h) */
    rt_trace *rec, *rep;        /* routing traces recorded (ROUTE_TRACE) and replayed (ROUTE_REPLAY); NULL = off */
    coli_ranks *rk;             /* the MPI job the experts are spread over (NULL: this process computes every expert) */
    char err[1024];
} coli_model;

static inline int model_fail(coli_model *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* A resident allocation, 64-byte aligned; with COLI_NUMA, pages of large
 * ones are interleaved across nodes before their first touch. */
static inline void *model_resident(const coli_model *m, size_t bytes) {
    void *p = compat_aligned_alloc(64, bytes ? bytes : 4);
    if (p && m->numa && bytes >= ((size_t)1 << 20)) io_numa_interleave(p, bytes);
    return p;
}

/* ------------------------------------------------------------ the weights */

/* How a dense tensor is held: a plain f32 array ([O] or [O, I]: norms,
 * router), a matrix at DENSE_BITS, a matrix kept f32 (the indexer's head
 * weights), the embedding / lm_head (DENSE_BITS only below 8 bits), or the
 * MTP eh_proj (DENSE_BITS, but 8 where that would be ≤ 4 bits per row: its
 * embedding half is 20-30x smaller than its hidden half and per-row int4
 * rounds it to zero). */
typedef enum { W_ARR, W_MAT, W_MAT_F32, W_MAT_IO, W_MAT_EH } w_kind;

/* One dense tensor the model loads and where it goes. */
typedef struct w_spec {
    char name[112];
    int64_t O, I;     /* I = 0: a vector */
    w_kind kind;
    float **arr;      /* W_ARR */
    qt_tensor *mat;   /* matrices */
} w_spec;

/* What a spec becomes: the tensors read (t, and q for a .qs companion),
 * the in-memory format and bytes. */
typedef struct {
    const st_tensor *t, *q;
    qt_fmt fmt;
    int gs;
    uint64_t wbytes, sbytes; /* weights (64-aligned) and scales */
} w_plan;

static inline int model_nspecs(const coli_config *c) { return 4 + 19 * (c->n_layers + 1) + 6; }

static inline void w_add_(w_spec *s, int *n, w_kind kind, int64_t O, int64_t I, float **arr, qt_tensor *mat, const char *fmt, int l) {
    w_spec *w = &s[(*n)++];
    snprintf(w->name, sizeof w->name, fmt, l);
    w->O = O, w->I = I, w->kind = kind, w->arr = arr, w->mat = mat;
}

/* The dense weight table of the configured model: every tensor it loads
 * besides the routed experts, with its shape and destination in m. Writes
 * at most model_nspecs(c) entries and returns the count. */
static inline int model_specs(coli_model *m, w_spec *s) {
    const coli_config *c = &m->c;
    int n = 0;
    int64_t H = c->n_heads;
    w_add_(s, &n, W_MAT_IO, c->vocab, c->dim, NULL, &m->embed, "model.embed_tokens.weight", 0);
    w_add_(s, &n, W_ARR, c->dim, 0, &m->final_norm, NULL, "model.norm.weight", 0);
    if (!c->tie_embed) w_add_(s, &n, W_MAT_IO, c->vocab, c->dim, NULL, &m->lm_head, "lm_head.weight", 0);
    int NL = c->n_layers;
    if (m->mtp) {
        w_add_(s, &n, W_ARR, c->dim, 0, &m->mtp_enorm, NULL, "model.layers.%d.enorm.weight", NL);
        w_add_(s, &n, W_ARR, c->dim, 0, &m->mtp_hnorm, NULL, "model.layers.%d.hnorm.weight", NL);
        w_add_(s, &n, W_MAT_EH, c->dim, 2 * (int64_t)c->dim, NULL, &m->mtp_eh, "model.layers.%d.eh_proj.weight", NL);
        w_add_(s, &n, W_ARR, c->dim, 0, &m->mtp_norm, NULL, "model.layers.%d.shared_head.norm.weight", NL);
        char hn[112];
        snprintf(hn, sizeof hn, "model.layers.%d.shared_head.head.weight", NL);
        if (st_find(&m->st, hn)) w_add_(s, &n, W_MAT_IO, c->vocab, c->dim, NULL, &m->mtp_head, "model.layers.%d.shared_head.head.weight", NL);
    }
    for (int l = 0; l < NL + m->mtp; l++) {
        coli_layer *L = &m->L[l];
        w_add_(s, &n, W_ARR, c->dim, 0, &L->in_norm, NULL, "model.layers.%d.input_layernorm.weight", l);
        w_add_(s, &n, W_ARR, c->dim, 0, &L->post_norm, NULL, "model.layers.%d.post_attention_layernorm.weight", l);
        if (c->q_lora) {
            w_add_(s, &n, W_MAT, c->q_lora, c->dim, NULL, &L->q_a, "model.layers.%d.self_attn.q_a_proj.weight", l);
            w_add_(s, &n, W_ARR, c->q_lora, 0, &L->q_a_norm, NULL, "model.layers.%d.self_attn.q_a_layernorm.weight", l);
            w_add_(s, &n, W_MAT, H * c->qk_head, c->q_lora, NULL, &L->q_b, "model.layers.%d.self_attn.q_b_proj.weight", l);
        } else
            w_add_(s, &n, W_MAT, H * c->qk_head, c->dim, NULL, &L->q_b, "model.layers.%d.self_attn.q_proj.weight", l);
        w_add_(s, &n, W_MAT, c->kv_lora + c->qk_rope, c->dim, NULL, &L->kv_a, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", l);
        w_add_(s, &n, W_ARR, c->kv_lora, 0, &L->kv_a_norm, NULL, "model.layers.%d.self_attn.kv_a_layernorm.weight", l);
        w_add_(s, &n, W_MAT, H * (c->qk_nope + c->v_head), c->kv_lora, NULL, &L->kv_b, "model.layers.%d.self_attn.kv_b_proj.weight", l);
        w_add_(s, &n, W_MAT, c->dim, H * c->v_head, NULL, &L->o, "model.layers.%d.self_attn.o_proj.weight", l);
        if (c->idx_full[l]) {
            w_add_(s, &n, W_MAT, (int64_t)c->index_heads * c->index_dim, c->q_lora, NULL, &L->iq, "model.layers.%d.self_attn.indexer.wq_b.weight", l);
            w_add_(s, &n, W_MAT, c->index_dim, c->dim, NULL, &L->ik, "model.layers.%d.self_attn.indexer.wk.weight", l);
            w_add_(s, &n, W_MAT_F32, c->index_heads, c->dim, NULL, &L->iw, "model.layers.%d.self_attn.indexer.weights_proj.weight", l);
            w_add_(s, &n, W_ARR, c->index_dim, 0, &L->ik_norm_w, NULL, "model.layers.%d.self_attn.indexer.k_norm.weight", l);
            w_add_(s, &n, W_ARR, c->index_dim, 0, &L->ik_norm_b, NULL, "model.layers.%d.self_attn.indexer.k_norm.bias", l);
        }
        if (!c->moe[l]) {
            w_add_(s, &n, W_MAT, c->inter, c->dim, NULL, &L->gate, "model.layers.%d.mlp.gate_proj.weight", l);
            w_add_(s, &n, W_MAT, c->inter, c->dim, NULL, &L->up, "model.layers.%d.mlp.up_proj.weight", l);
            w_add_(s, &n, W_MAT, c->dim, c->inter, NULL, &L->down, "model.layers.%d.mlp.down_proj.weight", l);
            continue;
        }
        w_add_(s, &n, W_ARR, c->n_experts, c->dim, &L->router, NULL, "model.layers.%d.mlp.gate.weight", l);
        w_add_(s, &n, W_ARR, c->n_experts, 0, &L->router_bias, NULL, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
        int64_t si = (int64_t)c->moe_inter * c->n_shared;
        if (!si) continue;
        w_add_(s, &n, W_MAT, si, c->dim, NULL, &L->gate, "model.layers.%d.mlp.shared_experts.gate_proj.weight", l);
        w_add_(s, &n, W_MAT, si, c->dim, NULL, &L->up, "model.layers.%d.mlp.shared_experts.up_proj.weight", l);
        w_add_(s, &n, W_MAT, c->dim, si, NULL, &L->down, "model.layers.%d.mlp.shared_experts.down_proj.weight", l);
    }
    return n;
}

/* The in-memory format for a float matrix loaded at `bits` (0, 16, 32 =
 * f32; 8 int8; 4 int4, grouped when gs > 0; 2 int2). */
static inline qt_fmt bits_fmt(int bits, int gs) { return xs_bits_fmt(bits == 16 || bits == 32 ? 0 : bits, gs); }

static inline const char *tensor_path(const coli_model *m, const st_tensor *t) { return m->st.files[t->file].path; }

/* Resolves spec s against the shards: the tensors exist with the right
 * dtype and shape (a quantized container's bytes match a format), and the
 * format and bytes it takes in memory. Reads headers only. 0 or -1 with
 * m->err naming the file and tensor. */
static inline int model_spec_plan(coli_model *m, const w_spec *s, w_plan *p) {
    char qn[128], why[300];
    memset(p, 0, sizeof *p);
    if (!(p->t = st_find(&m->st, s->name))) return model_fail(m, "tensor '%s' not found in the model's safetensors files", s->name);
    snprintf(qn, sizeof qn, "%s.qs", s->name);
    p->q = s->kind == W_ARR ? NULL : st_find(&m->st, qn);
    if (p->q) {
        if (p->t->dtype != ST_U8 && p->t->dtype != ST_I8)
            return model_fail(m, "%s: tensor '%s' has a .qs companion but dtype %s (expected U8)", tensor_path(m, p->t), s->name, st_dtype_names[p->t->dtype]);
        if (p->q->dtype != ST_F32) return model_fail(m, "%s: tensor '%s' is %s, expected F32 scales", tensor_path(m, p->q), qn, st_dtype_names[p->q->dtype]);
        if (qt_resolve(s->O, s->I, p->t->nbytes, p->q->nbytes, &p->fmt, &p->gs, why, sizeof why))
            return model_fail(m, "%s: tensor '%s': %s", tensor_path(m, p->t), s->name, why);
    } else {
        if (st_check_float(&m->st, p->t, s->O, s->I, m->err, sizeof m->err)) return -1;
        int bits = s->kind == W_MAT ? m->dense_bits : s->kind == W_MAT_IO && m->dense_bits && m->dense_bits < 8 ? m->dense_bits : 0;
        if (s->kind == W_MAT_EH) bits = m->dense_bits && m->dense_bits <= 4 && !m->group_size ? 8 : m->dense_bits;
        p->fmt = s->kind == W_ARR ? QT_F32 : bits_fmt(bits, m->group_size);
        p->gs = p->fmt == QT_I4G ? m->group_size : 0;
    }
    if (s->kind == W_ARR) p->wbytes = xs_align_up((size_t)p->t->numel * 4, 64);
    else {
        p->wbytes = xs_align_up((size_t)qt_weight_bytes(p->fmt, s->O, s->I, p->gs), 64);
        p->sbytes = qt_scale_count(p->fmt, s->O, s->I, p->gs) * 4;
    }
    return 0;
}

/* Quantizes rows [0, n) of src into W's rows [r0, r0 + n) with the one
 * quantizer, blocks of rows in parallel (the result does not depend on the
 * thread count). Returns the count of non-finite inputs. */
static inline int64_t quantize_rows(const float *src, const qt_tensor *W, int64_t r0, int64_t n) {
    int64_t bad = 0, rb = (int64_t)qt_row_bytes(W), ns = qt_row_scales(W), blk = 64;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n * W->I > 65536)
    for (int64_t b = 0; b < n; b += blk) {
        int64_t rows = n - b < blk ? n - b : blk;
        bad += qt_quantize(src + (size_t)b * (size_t)W->I, rows, W->I, W->fmt, W->gs, (uint8_t *)W->w + (size_t)(r0 + b) * (size_t)rb,
                           (float *)W->s + (size_t)(r0 + b) * (size_t)ns);
    }
    return bad;
}

/* Reads a float tensor as f32 into dst and refuses non-finite values. */
static inline int model_read_f32(coli_model *m, const st_tensor *t, float *dst) {
    if (st_read_f32(&m->st, t, dst, m->err, sizeof m->err)) return -1;
    int64_t at = xs_nonfinite_(dst, (size_t)t->numel);
    if (at >= 0) return model_fail(m, "%s: tensor '%s': value %lld is not finite (NaN or infinity)", tensor_path(m, t), t->name, (long long)at);
    return 0;
}

/* Float tensor t quantized into W by chunks of rows (at most 64 MB of f32
 * at a time). */
static inline int model_quantize_tensor(coli_model *m, const st_tensor *t, qt_tensor *W) {
    int64_t O = W->O, I = W->I, chunk = (16 << 20) / I > 0 ? (16 << 20) / I : 1;
    float *tmp = (float *)malloc((size_t)(chunk < O ? chunk : O) * (size_t)I * 4);
    if (!tmp) return model_fail(m, "out of memory quantizing '%s'", t->name);
    for (int64_t r = 0; r < O; r += chunk) {
        int64_t n = O - r < chunk ? O - r : chunk;
        if (st_read_f32_range(&m->st, t, (uint64_t)r * (uint64_t)I, (size_t)(n * I), tmp, m->err, sizeof m->err)) { free(tmp); return -1; }
        int64_t bad = quantize_rows(tmp, W, r, n);
        if (bad) { free(tmp); return model_fail(m, "%s: tensor '%s' has %lld non-finite values", tensor_path(m, t), t->name, (long long)bad); }
    }
    free(tmp);
    return 0;
}

/* Allocates and reads spec s as planned by model_spec_plan. 0 or -1. */
static inline int model_spec_load(coli_model *m, const w_spec *s, const w_plan *p) {
    uint8_t *mem = (uint8_t *)model_resident(m, (size_t)(p->wbytes + p->sbytes));
    if (!mem) return model_fail(m, "out of memory loading '%s' (%llu bytes)", s->name, (unsigned long long)(p->wbytes + p->sbytes));
    if (s->kind == W_ARR) {
        *s->arr = (float *)mem;
        return model_read_f32(m, p->t, (float *)mem);
    }
    qt_tensor *W = s->mat;
    *W = (qt_tensor){p->fmt, s->O, s->I, mem, p->sbytes ? (const float *)(mem + p->wbytes) : NULL, p->gs};
    if (p->fmt != QT_F32) m->any_int = 1;
    if (p->q) {
        if (st_read_raw(&m->st, p->t, mem, m->err, sizeof m->err) || st_read_raw(&m->st, p->q, mem + p->wbytes, m->err, sizeof m->err)) return -1;
        int64_t at = xs_nonfinite_(W->s, (size_t)(p->sbytes / 4));
        if (at >= 0) return model_fail(m, "%s: tensor '%s.qs': scale %lld is not finite (NaN or infinity)", tensor_path(m, p->q), s->name, (long long)at);
        return 0;
    }
    if (p->fmt == QT_F32) return model_read_f32(m, p->t, (float *)mem);
    return model_quantize_tensor(m, p->t, W);
}

/* Walks the weight table (m->specs): with load = 0 checks every tensor and
 * adds up the bytes (marking in used[] the tensors it reads, when used is
 * given); with load = 1 allocates and reads them. 0 or -1 (m->err). */
static inline int model_weights(coli_model *m, int load, uint64_t *bytes, uint8_t *used) {
    int rc = 0;
    *bytes = 0;
    for (int i = 0; i < m->nspecs && !rc; i++) {
        w_plan p;
        rc = model_spec_plan(m, &m->specs[i], &p);
        if (!rc) *bytes += p.wbytes + p.sbytes;
        if (!rc && used) {
            used[p.t - m->st.t] = 1;
            if (p.q) used[p.q - m->st.t] = 1;
        }
        if (!rc && load) rc = model_spec_load(m, &m->specs[i], &p);
    }
    if (!rc && load && m->c.tie_embed) m->lm_head = m->embed;
    if (!rc && load && m->mtp && !m->mtp_head.w) m->mtp_head = m->lm_head;
    return rc;
}

/* Builds the weight table (m->L must exist). 0 or -1. */
static inline int model_table(coli_model *m) {
    if (!(m->specs = (w_spec *)malloc((size_t)model_nspecs(&m->c) * sizeof *m->specs))) return model_fail(m, "out of memory");
    m->nspecs = model_specs(m, m->specs);
    return 0;
}

/* Frees the dense weights model_weights loaded, and the table. */
static inline void model_weights_free(coli_model *m) {
    for (int i = 0; m->specs && i < m->nspecs; i++) compat_aligned_free(m->specs[i].kind == W_ARR ? (void *)*m->specs[i].arr : (void *)m->specs[i].mat->w);
    free(m->specs);
    m->specs = NULL;
}

/* ------------------------------------------------------- routed experts */

/* Finds every routed expert's tensors (by name, headers only) and hands
 * them to the store, which validates them and fixes each layer's layout. */
static inline int model_locate_experts(coli_model *m) {
    const coli_config *c = &m->c;
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int k = 0; k < m->xs.n_layers; k++) {
        int l = moe_layer(c, k);
        int64_t O[3] = {c->moe_inter, c->moe_inter, c->dim}, I[3] = {c->dim, c->dim, c->moe_inter};
        xs_layer_begin(&m->xs, k, O, I);
        for (int e = 0; e < c->n_experts; e++) {
            const st_tensor *w[3], *sc[3];
            for (int p = 0; p < 3; p++) {
                char n[160], qn[168];
                snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[p]);
                snprintf(qn, sizeof qn, "%s.qs", n);
                if (!(w[p] = st_find(&m->st, n))) return model_fail(m, "tensor '%s' not found in the model's safetensors files", n);
                sc[p] = st_find(&m->st, qn);
            }
            if (xs_locate(&m->xs, k, e, w, sc)) return model_fail(m, "%s", m->xs.err);
        }
        xs_layer_end(&m->xs, k);
        const xs_layout *L = xs_layout_of(&m->xs, k);
        for (int p = 0; p < 3; p++) m->any_int |= L->fmt[p] != QT_F32;
    }
    return 0;
}

/* ------------------------------------------- the checkpoint as a whole */

/* Layer number of a "model.layers.<l>." tensor name, or -1. */
static inline int model_name_layer(const char *name) {
    const char *p = "model.layers.";
    if (strncmp(name, p, strlen(p))) return -1;
    char *end;
    long l = strtol(name + strlen(p), &end, 10);
    return end != name + strlen(p) && *end == '.' && l >= 0 && l < (1L << 20) ? (int)l : -1;
}

/* Which config field a tensor of the model's own layers that it does not
 * use points at. */
static inline const char *model_unused_hint(const char *name) {
    if (strstr(name, ".shared_experts.")) return "n_shared_experts";
    if (strstr(name, ".mlp.experts.")) return "n_routed_experts or the MoE layer kinds (mlp_layer_types, first_k_dense_replace)";
    if (strstr(name, ".indexer.")) return "indexer_types (shared layers have no indexer)";
    if (strstr(name, ".mlp.")) return "the MLP layer kinds (mlp_layer_types, first_k_dense_replace)";
    return "the layer's shape fields";
}

/* Every tensor of the checkpoint is read by the configured model, or
 * belongs to its MTP layers (counted in m->mtp_unread: the loaded MTP
 * layer's own embed_tokens copy, the model's embedding serving it; and
 * m->mtp_skipped: MTP layers not loaded, for the startup line), or is
 * refused when it shows that
 * config.json does not describe this checkpoint (an unused tensor of the
 * model's own layers, lm_head.weight with tie_word_embeddings, a layer past
 * the MTP layers); anything else unused is listed as a warning. Headers
 * only. 0 or -1 (m->err). */
static inline int model_check_tensors(coli_model *m) {
    const coli_config *c = &m->c;
    uint8_t *used = (uint8_t *)calloc((size_t)m->st.nt + 1, 1);
    if (!used) return model_fail(m, "out of memory");
    uint64_t dummy;
    int rc = model_weights(m, 0, &dummy, used), other = 0;
    m->mtp_unread = m->mtp_skipped = 0;
    for (int k = 0; !rc && k < m->xs.n_layers; k++)
        for (int e = 0; e < m->xs.n_experts; e++) {
            const st_tensor *w[3], *s[3];
            xs_expert_tensors(&m->xs, k, e, w, s);
            for (int p = 0; p < 3; p++) {
                used[w[p] - m->st.t] = 1;
                if (s[p]) used[s[p] - m->st.t] = 1;
            }
        }
    const char *first_other = NULL;
    int n_mtp = c->n_mtp > 0 ? c->n_mtp : 1, modal = 0;
    for (int i = 0; !rc && i < m->st.nt; i++) {
        if (used[i]) continue;
        if (m->mtp && model_name_layer(m->st.t[i].name) == c->n_layers && !strstr(m->st.t[i].name, ".embed_tokens."))
            rc = model_fail(m, "%s: tensor '%s' of the MTP layer is not used: check the MTP layer's shape (its experts, indexer, shared experts)",
                            tensor_path(m, &m->st.t[i]), m->st.t[i].name);
    }
    for (int i = 0; !rc && i < m->st.nt; i++) {
        if (used[i]) continue;
        const st_tensor *t = &m->st.t[i];
        int l = model_name_layer(t->name);
        if (l >= c->n_layers && l < c->n_layers + n_mtp) ++*(m->mtp && l == c->n_layers ? &m->mtp_unread : &m->mtp_skipped);
        else if (l >= 0 && l < c->n_layers)
            rc = model_fail(m, "%s: tensor '%s' is not used by the model config.json describes: check %s", tensor_path(m, t), t->name,
                            model_unused_hint(t->name));
        else if (l >= 0)
            rc = model_fail(m, "%s: tensor '%s' belongs to layer %d, past num_hidden_layers (%d) and num_nextn_predict_layers (%d)", tensor_path(m, t),
                            t->name, l, c->n_layers, c->n_mtp);
        else if (!strcmp(t->name, "lm_head.weight") || !strcmp(t->name, "lm_head.weight.qs"))
            rc = model_fail(m, "%s: tensor '%s' exists but config.json sets tie_word_embeddings=true (the output layer would be the embedding)",
                            tensor_path(m, t), t->name);
        else if (*c->wprefix && strncmp(t->name, "model.", 6) && strncmp(t->name, "lm_head.", 8)) modal++; /* outside the language model */
        else if (!other++) first_other = t->name;
    }
    free(used);
    if (rc) return -1;
    if (modal) fprintf(stderr, "colibri: %s: the %d tensors outside %s (the vision tower) are not loaded: colibri runs the text model\n",
                       c->model_type, modal, c->wprefix);
    if (other) fprintf(stderr, "colibri: warning: %d tensor%s not used by the model, e.g. '%s'\n", other, other > 1 ? "s are" : " is", first_other);
    return 0;
}

/* ------------------------------------------------- KV cache and scratch */

/* Carves `count` elements of `type` for `field` out of base at *off (a
 * sizing pass when base is NULL: only *off advances). */
#define MODEL_CARVE(obj, field, type, count, base, off)                            \
    do {                                                                           \
        (obj)->field = (base) ? (type *)(void *)((uint8_t *)(base) + *(off)) : NULL; \
        *(off) += xs_align_up((size_t)(count) * sizeof(type), 64);                 \
    } while (0)

/* Lays the KV cache of `slots` sequences of ctx positions, its rows in
 * `bits` and indexer keys in `ibits` (kvq.h), out in base (NULL: sizing
 * only) and sets its shape; returns its bytes. */
static inline size_t kv_layout(const coli_config *c, int nl, int ctx, int slots, int bits, int ibits, coli_kv *kv, void *base) {
    size_t off = 0;
    int nf = 0;
    for (int l = 0; l < nl; l++) nf += c->idx_full[l];
    kv->ctx = ctx, kv->slots = slots, kv->dl = c->kv_lora, kv->dr = c->qk_rope, kv->di = c->index_dim;
    kv->bits = bits == 8 || bits == 4 ? bits : 32, kv->ibits = ibits == 8 || ibits == 4 ? ibits : 32; /* 0: an unset option, f32 */
    bits = kv->bits, ibits = kv->ibits;
    kv->lrb = kvq_row_bytes(bits, c->kv_lora), kv->rrb = kvq_row_bytes(bits, c->qk_rope), kv->irb = kvq_row_bytes(ibits, c->index_dim);
    kv->lat_n = (size_t)nl * ctx * kv->lrb, kv->rope_n = (size_t)nl * ctx * kv->rrb, kv->ikey_n = (size_t)nf * ctx * kv->irb;
    MODEL_CARVE(kv, lat, uint8_t, (size_t)slots * kv->lat_n, base, &off);
    MODEL_CARVE(kv, rope, uint8_t, (size_t)slots * kv->rope_n, base, &off);
    MODEL_CARVE(kv, ikey, uint8_t, (size_t)slots * kv->ikey_n, base, &off);
    MODEL_CARVE(kv, full_slot, int, nl, base, &off);
    return off;
}

/* KV slots asked for: SLOTS, at least 1 (SLOTS_AUTO: 1 until model_auto_slots). */
static inline int model_slots(const coli_opts *o) { return o->slots > 1 ? o->slots : 1; }

/* Lays the activation scratch for batches of max_s positions, a context
 * of ctx, nt threads and pilot_k predictions per position out in base
 * (NULL: sizing only); returns its bytes. */
static inline size_t scratch_layout(const coli_config *c, int max_s, int ctx, int nt, int pilot_k, coli_scratch *s, void *base) {
    size_t off = 0, S = (size_t)max_s, half = (size_t)c->qk_rope / 2;
    size_t mi = (size_t)c->moe_inter * c->n_shared;
    if (mi < (size_t)c->inter) mi = (size_t)c->inter;
    if (mi < (size_t)c->moe_inter) mi = (size_t)c->moe_inter;
    /* per thread: key scores (and a quickselect copy for the indexer) and an
     * absorbed query, or a router row's choice scores; at the start of the
     * attention and the indexer, the rows one position stores in the cache */
    size_t thr = 2 * (size_t)ctx + (size_t)c->kv_lora + 16, rt = 2 * (size_t)c->n_experts + (size_t)c->n_group + 16;
    if (thr < rt) thr = rt;
    if (thr < (size_t)c->kv_lora + c->qk_rope + c->index_dim + 16) thr = (size_t)c->kv_lora + c->qk_rope + c->index_dim + 16;
#define F(field, n) MODEL_CARVE(s, field, float, (n), base, &off)
#define I(field, n) MODEL_CARVE(s, field, int, (n), base, &off)
    F(x, S * c->dim); F(a, S * c->dim); F(qlat, S * c->q_lora); F(q, S * c->n_heads * c->qk_head);
    F(ckv, S * (c->kv_lora + c->qk_rope)); F(attn, S * c->n_heads * c->v_head);
    F(tmp, S * (size_t)(c->dim > c->index_dim ? c->dim : c->index_dim)); F(mlp_g, S * mi); F(mlp_u, S * mi); F(moe_acc, S * c->dim);
    F(qi, S * c->index_heads * c->index_dim); F(iw, S * c->index_heads); F(rlogit, S * c->n_experts);
    F(xs, S * c->dim); F(ys, S * c->dim); F(eg, S * c->moe_inter); F(eu, S * c->moe_inter); F(logits, c->vocab);
    I(sel, S * c->index_topk); I(nsel, S); I(route_e, S * c->topk); F(route_w, S * c->topk);
    I(rows, S * c->topk); F(yk, S * c->topk * c->dim);
    F(hlat, (size_t)c->n_heads * S * c->kv_lora); F(hout, (size_t)nt * S * c->v_head); F(hkv, (size_t)ctx * ((size_t)c->qk_nope + c->v_head));
    I(rtok, S); I(rpos, S); I(rslot, S); I(wrow, S);
    I(rk_need, S); I(uniq, c->n_experts); MODEL_CARVE(s, used, uint8_t, c->n_experts, base, &off);
    F(cos, (size_t)ctx * half); F(sin, (size_t)ctx * half); F(cat, S * 2 * c->dim); I(pred, S * (size_t)(pilot_k > 0 ? pilot_k : 1));
    MODEL_CARVE(s, thr, float *, nt, base, &off);
    for (int t = 0; t < nt; t++) {
        if (base) s->thr[t] = (float *)(void *)((uint8_t *)base + off);
        off += xs_align_up(thr * 4, 64);
    }
#undef F
#undef I
    s->max_s = max_s;
    return off;
}

/* The inverse frequency of rotary pair i, in f32 as transformers computes
 * it: theta^(-2i/d), and under YaRN the blend of that (extrapolation) and
 * it divided by factor (interpolation) by a linear ramp between the
 * correction dimensions of beta_fast and beta_slow rotations over
 * original_max_position_embeddings (floored/ceiled when truncate). */
static inline float rope_inv_freq(const coli_config *c, int i) {
    int d = c->qk_rope;
    float pos = powf((float)c->rope_theta, (float)(2 * i) / (float)d);
    if (!c->rope_yarn) return 1.0f / pos;
    double lo = cfg_yarn_dim_(c->rope_beta_fast, d, c->rope_theta, c->rope_orig_max);
    double hi = cfg_yarn_dim_(c->rope_beta_slow, d, c->rope_theta, c->rope_orig_max);
    if (c->rope_truncate) lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0, hi = hi < d - 1 ? hi : d - 1;
    if (lo == hi) hi += 0.001;
    float ramp = ((float)i - (float)lo) / (float)(hi - lo);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    float extra = 1.0f - ramp, inter = 1.0f / ((float)c->rope_factor * pos);
    return inter * (1.0f - extra) + (1.0f / pos) * extra;
}

/* RoPE tables in f32 exactly as transformers builds them (cos and sin
 * times YaRN's attention factor, 1 otherwise). */
static inline void rope_tables(const coli_config *c, int ctx, float *cs, float *sn) {
    int half = c->qk_rope / 2;
    float af = (float)c->rope_attn_factor;
    for (int i = 0; i < half; i++) {
        float inv = rope_inv_freq(c, i);
        for (int p = 0; p < ctx; p++) {
            float ang = (float)p * inv;
            cs[(size_t)p * half + i] = c->rope_yarn ? cosf(ang) * af : cosf(ang);
            sn[(size_t)p * half + i] = c->rope_yarn ? sinf(ang) * af : sinf(ang);
        }
    }
}

/* ------------------------------------------------------------- the plan */

/* Context the KV cache holds: CTX capped at max_position_embeddings. */
static inline int model_ctx(const coli_config *c, const coli_opts *o) { return o->ctx < c->max_pos ? o->ctx : c->max_pos; }

#define MODEL_SPEC_MAX_K 16 /* spec.h's SPEC_MAX_K: drafts a verifying forward may hold */

/* What one sequence's decoding state holds besides its KV cache
 * (session.h sess_open): the sampler's work and a logits row (three vocab
 * rows), and with the MTP layer spec.h's buffers (spec_init): logits and
 * hidden rows of MODEL_SPEC_MAX_K + 1 verify rows, MODEL_SPEC_MAX_K draft
 * distributions, two vocab rows, one hidden row, and the MTP queue's
 * hidden and output rows and tokens for max_s + MODEL_SPEC_MAX_K + 2
 * entries. GLM-5 at UBATCH=512 with its MTP layer: about 48 MB. */
static inline uint64_t model_seq_bytes(const coli_config *c, int max_s, int mtp) {
    uint64_t V = (uint64_t)c->vocab, D = (uint64_t)c->dim, K = MODEL_SPEC_MAX_K, cap = (uint64_t)max_s + K + 2, b = 3 * V * 4;
    if (mtp) b += ((K + 1) * V + (K + 1) * D + V + D + 2 * cap * D) * 4 + cap * sizeof(int);
    return b;
}

/* Resident bytes by part, from config.json, the shard headers and the
 * located experts alone: nothing is allocated or read. The working set
 * counts each sequence's decoding state (model_seq_bytes). 0 or -1
 * (m->err). */
static inline int model_measure(coli_model *m, const coli_opts *o, model_mem *mem) {
    const coli_config *c = &m->c;
    coli_kv kv;
    coli_scratch sc;
    memset(mem, 0, sizeof *mem);
    if (model_weights(m, 0, &mem->dense, NULL)) return -1;
    if (o->experts_only) mem->dense = 0; /* checked, never loaded */
    int ctx = model_ctx(c, o), nt = o->threads > 0 ? o->threads : coli_nthreads(), pk = o->pilot_k > 0 ? o->pilot_k : c->topk;
    mem->kv = kv_layout(c, c->n_layers + m->mtp, ctx, m->nslots, o->kv_bits, o->kv_index_bits, &kv, NULL); /* every slot's */
    mem->work = scratch_layout(c, o->ubatch, ctx, nt, pk, &sc, NULL) + (uint64_t)xs_staging_bytes(&m->xs) * (uint64_t)nt +
                model_seq_bytes(c, o->ubatch, m->mtp) * (uint64_t)m->nslots;
    return 0;
}

/* Bytes as "12.3 GB" / "4.5 MB" / "678 KB" (decimal units). */
static inline const char *fmt_bytes(char *buf, size_t n, double b) {
    if (b >= 1e9) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, n, "%.1f MB", b / 1e6);
    else snprintf(buf, n, "%.0f KB", b / 1e3);
    return buf;
}

/* The RAM budget: RAM_GB, else 90% of MemAvailable now. */
static inline uint64_t model_budget(const coli_opts *o) {
    return o->ram_gb > 0 ? (uint64_t)(o->ram_gb * GB) : (uint64_t)(0.9 * (double)compat_mem_available());
}

/* SLOTS_AUTO (serve mode's default): the most sequences, up to
 * SLOTS_AUTO_MAX, whose KV caches and decoding states together take at
 * most a quarter of what the budget leaves after the dense weights, the
 * rest of the working set and the reserve, so that most of it stays for
 * experts; at least 1. Sets m->nslots, m->mem.kv and m->mem.work
 * (measured for one sequence). */
static inline void model_auto_slots(coli_model *m, const coli_opts *o) {
    const coli_config *c = &m->c;
    uint64_t seq = model_seq_bytes(c, o->ubatch, m->mtp), base = m->mem.work - seq;
    uint64_t budget = model_budget(o), fixed = m->mem.dense + base + budget / 20, one = m->mem.kv + seq;
    uint64_t quarter = budget > fixed ? (budget - fixed) / 4 : 0, n = quarter / one;
    m->nslots = n < 1 ? 1 : n > SLOTS_AUTO_MAX ? SLOTS_AUTO_MAX : (int)n;
    coli_kv kv;
    m->mem.kv = kv_layout(c, c->n_layers + m->mtp, model_ctx(c, o), m->nslots, o->kv_bits, o->kv_index_bits, &kv, NULL);
    m->mem.work = base + seq * (uint64_t)m->nslots;
}

/* The budget plan, before anything is loaded: the resident part must fit
 * in the RAM budget or the run is refused, naming the knobs. pin_want is
 * what the usage history asks to pin. 0 or -1 (m->err). */
static inline int model_plan(coli_model *m, const coli_opts *o, uint64_t pin_want) {
    const coli_config *c = &m->c;
    m->budget = model_budget(o);
    int cap = o->cap;
    if (cap > c->n_experts) {
        fprintf(stderr, "colibri: CAP=%d exceeds the %d routed experts of a MoE layer; using %d\n", cap, c->n_experts, c->n_experts);
        cap = c->n_experts;
    }
    tier_budget b = {.ram = m->budget, .dense = m->mem.dense, .kv = m->mem.kv, .work = m->mem.work, .reserve = m->budget / 20,
                     .expert = xs_max_expert_bytes(&m->xs), .moe_layers = m->xs.n_layers, .n_experts = c->n_experts,
                     .topk = c->topk, .cap = cap};
    if (o->pin != PIN_OFF) {
        if (o->pin_gb == PIN_GB_ALL) b.pin_mode = TIER_PIN_ALL;
        else if (o->pin_gb >= 0) b.pin_mode = TIER_PIN_BYTES, b.pin_bytes = (uint64_t)(o->pin_gb * GB);
        else b.pin_mode = TIER_PIN_AUTO, b.pin_bytes = pin_want;
    }
    if (tier_plan_make(&b, &m->plan) == 0) {
        m->plan_in = b;
        if (m->plan.cap_lowered)
            fprintf(stderr, "colibri: CAP=%d does not fit the %.2f GB budget; using %d slots per layer\n", cap, m->budget / GB, m->plan.lru_slots);
        return 0;
    }
    char why[700], f[8][32], sl[32] = "";
    if (m->nslots > 1) snprintf(sl, sizeof sl, " x %d sequences", m->nslots);
    snprintf(why, sizeof why,
             "the resident part needs %s (dense weights %s + KV cache %s for CTX=%d%s + working set %s + reserve %s "
             "+ one expert slot per MoE layer %s) but the RAM budget is %s (%s); short by %s. Raise RAM_GB, "
             "lower CTX or UBATCH, or set COLI_RAM_OVERCOMMIT=1",
             fmt_bytes(f[0], 32, (double)m->plan.peak), fmt_bytes(f[1], 32, (double)b.dense), fmt_bytes(f[2], 32, (double)b.kv), model_ctx(c, o), sl,
             fmt_bytes(f[3], 32, (double)b.work), fmt_bytes(f[4], 32, (double)b.reserve), fmt_bytes(f[5], 32, (double)b.expert * b.moe_layers),
             fmt_bytes(f[6], 32, (double)m->budget), o->ram_gb > 0 ? "RAM_GB" : "90% of MemAvailable", fmt_bytes(f[7], 32, (double)m->plan.short_by));
    if (!o->overcommit) return model_fail(m, "%s", why);
    fprintf(stderr, "colibri: warning (COLI_RAM_OVERCOMMIT=1): %s\n", why);
    m->plan.lru_slots = 1;
    m->plan.pin_bytes = 0;
    m->plan.lru_bytes = b.expert * (uint64_t)b.moe_layers;
    return 0;
}

/* ------------------------------------------------------------ setting up */

/* Opens the shards for expert reads (mirrors, O_DIRECT twins, maps, the
 * reader pool or io_uring). A refused io_uring falls back to the pool and
 * a refused O_DIRECT to buffered reads, with a message; mirrors without
 * given weights are measured. */
static inline int model_io_open(coli_model *m, const coli_opts *o) {
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
    if (o->nmirrors && !o->weights_given) { /* measure each drive on the largest shard */
        int big = 0;
        for (int i = 1; i < m->st.nfiles; i++) big = m->st.files[i].size > m->st.files[big].size ? i : big;
        io_measure_weights(&m->io, big, (uint64_t)64 << 20);
    }
    if (o->nmirrors) {
        double w[IO_MAX_DRIVES], tot = 0;
        int nd = io_weights(&m->io, w);
        for (int d = 0; d < nd; d++) tot += w[d];
        fprintf(stderr, "colibri: mirror: %d drives, expert reads split", nd);
        for (int d = 0; d < nd; d++) fprintf(stderr, "%s %.0f%%", d ? " /" : "", 100.0 * w[d] / tot);
        fprintf(stderr, " (%s)\n", o->weights_given ? "COLI_DISK_WEIGHTS" : "measured");
    }
    for (int i = 0; o->nmirrors && i < m->st.nfiles; i++)
        if (io_file_drives(&m->io, i) < 1 + o->nmirrors)
            fprintf(stderr, "colibri: mirror: %s is missing or differs on a mirror; read from the primary only\n", m->st.files[i].path);
    return 0;
}

/* Reads config.json and indexes the shards of model directory `dir`;
 * checks the config's sizes against the checkpoint before anything is
 * allocated in proportion to them. Returns 0, or -1 with m->err naming the
 * file and field/tensor. */
static inline int model_check_counts(coli_model *m);
static inline int model_open(coli_model *m, const char *dir) {
    memset(m, 0, sizeof *m);
    if (coli_config_load(&m->c, dir, m->err, sizeof m->err)) return -1;
    if (st_open_dir_as(&m->st, dir, *m->c.wprefix ? m->c.wprefix : NULL, m->err, sizeof m->err)) return -1;
    return model_check_counts(m);
}

/* COLI_NUMA: whether interleaving can work here; says why not. */
static inline int numa_usable(void) {
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
    compat_aligned_free(probe);
    if (rc) fprintf(stderr, "colibri: COLI_NUMA=1: mbind refused (%s); ignored\n", strerror(-rc));
    return rc == 0;
}

static inline void print_progress(void *ud, uint64_t done, uint64_t total) {
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

/* Pins the most used experts of the history `hist` ([n_layers][E] rows, or
 * NULL) within the plan's pin budget. */
static inline int model_pin(coli_model *m, const uint64_t *hist, int quiet) {
    const coli_config *c = &m->c;
    int L = m->xs.n_layers, E = c->n_experts;
    if (!L || !m->plan.pin_bytes || !hist) return 0;
    uint64_t *counts = (uint64_t *)calloc((size_t)L * E, 8);
    if (!counts) return model_fail(m, "out of memory");
    usage_to_moe(c, hist, counts);
    for (size_t i = 0; i < (size_t)L * E; i++) /* what the GPU tier holds needs no RAM copy */
        if (xs_vram_slot(&m->xs, (int)(i / E), (int)(i % E)) >= 0) counts[i] = 0;
    double t0[2] = {compat_now(), 0};
    int rc = xs_pin_by_usage(&m->xs, counts, m->plan.pin_bytes, quiet ? NULL : print_progress, t0);
    free(counts);
    return rc ? model_fail(m, "%s", m->xs.err) : 0;
}

/* Bytes of every expert the history has seen and the GPU tier does not
 * hold: what PIN=auto asks for. */
static inline uint64_t model_pin_want(const coli_model *m, const uint64_t *hist) {
    const coli_config *c = &m->c;
    uint64_t want = 0;
    for (int l = 0; hist && l < c->n_layers; l++)
        for (int e = 0; c->moe[l] && e < c->n_experts; e++)
            if (hist[(size_t)l * c->n_experts + e] && xs_vram_slot(&m->xs, moe_index(c, l), e) < 0)
                want += xs_expert_bytes(&m->xs, moe_index(c, l));
    return want;
}

/* PIN=auto once the GPU tier has taken its experts from the history: the
 * pinned set asks only for the rest, and the RAM it no longer needs goes to
 * the LRU (before the cache opens). The fixed part is unchanged, so the
 * plan still fits. */
static inline void model_replan_pins(coli_model *m, const uint64_t *hist) {
    if (m->plan_in.pin_mode != TIER_PIN_AUTO || !m->xs.n_vram) return;
    tier_budget b = m->plan_in;
    b.pin_bytes = model_pin_want(m, hist);
    tier_plan_make(&b, &m->plan);
}

/* Allocates the KV cache and the scratch as measured, and fills the RoPE
 * tables. 0 or -1. */
static inline int model_alloc_state(coli_model *m, const coli_opts *o) {
    const coli_config *c = &m->c;
    int ctx = model_ctx(c, o);
    int nl = c->n_layers + m->mtp;
    size_t kb = kv_layout(c, nl, ctx, m->nslots, o->kv_bits, o->kv_index_bits, &m->kv, NULL), sb = scratch_layout(c, o->ubatch, ctx, m->nth, m->pilot_k, &m->sc, NULL);
    if (!(m->kv.block = model_resident(m, kb))) return model_fail(m, "out of memory for the KV cache (CTX=%d; lower CTX)", ctx);
    if (!(m->sc.block = model_resident(m, sb))) return model_fail(m, "out of memory for activations (UBATCH=%d)", o->ubatch);
    kv_layout(c, nl, ctx, m->nslots, o->kv_bits, o->kv_index_bits, &m->kv, m->kv.block);
    scratch_layout(c, o->ubatch, ctx, m->nth, m->pilot_k, &m->sc, m->sc.block);
    m->kv.slot = 0;
    for (int l = 0, f = 0; l < nl; l++) m->kv.full_slot[l] = c->idx_full[l] ? f++ : -1;
    rope_tables(c, ctx, m->sc.cos, m->sc.sin);
    return 0;
}

/* Checks the config's sizes against the checkpoint before anything is
 * allocated in proportion to them: every routed expert needs three tensors. */
static inline int model_check_counts(coli_model *m) {
    const coli_config *c = &m->c;
    uint64_t need = (uint64_t)n_moe_layers(c) * (uint64_t)c->n_experts * 3;
    if (need > (uint64_t)m->st.nt)
        return model_fail(m, "config.json asks for %d MoE layers x %d routed experts (%llu expert tensors) but the safetensors files hold only %d tensors",
                          n_moe_layers(c), c->n_experts, (unsigned long long)need, m->st.nt);
    return 0;
}

/* Whether to load the MTP layer (model.layers.<n_layers>): asked for (MTP),
 * declared (num_nextn_predict_layers ≥ 1) and present (its eh_proj). Its
 * MLP kind and indexer kind follow from its tensors, so a checkpoint whose
 * MTP layer is dense or ships no indexer loads as it is; without an
 * indexer its attention keeps every causal key. Says once why not. */
static inline void model_find_mtp(coli_model *m, const coli_opts *o) {
    coli_config *c = &m->c;
    int NL = c->n_layers;
    char n[128];
    snprintf(n, sizeof n, "model.layers.%d.eh_proj.weight", NL);
    int present = st_find(&m->st, n) != NULL;
    m->mtp = o->mtp && c->n_mtp >= 1 && present;
    if (c->n_mtp >= 1 && !present)
        fprintf(stderr, "colibri: config.json declares an MTP layer but the checkpoint has none (no %s): no speculative decoding\n", n);
    if (!m->mtp) return;
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.0.gate_proj.weight", NL);
    c->moe[NL] = st_find(&m->st, n) != NULL;
    snprintf(n, sizeof n, "model.layers.%d.self_attn.indexer.wk.weight", NL);
    c->idx_full[NL] = st_find(&m->st, n) != NULL;
}

/* Puts the dense matrices the integer path multiplies (every quantized
 * one but the embedding, which is looked up, not multiplied) in GPU
 * memory while they fit beside a 1 GiB reserve, in the model's order, and
 * the latent cache beside them when CUDA_ATTN wants it (gpu.h decides
 * what fits and says what it holds). With CUDA auto, a missing GPU or
 * driver is said once and the CPU runs everything; with CUDA=1 it is an
 * error. The float path (f32 weights, IDOT=0) stays on the CPU: the GPU
 * only takes what it computes bit for bit as the CPU does. */
static inline int model_gpu_setup(coli_model *m, const coli_opts *o) {
    gpu_ctx *g = &m->gpu;
    int rc = gpu_open(g, o->cuda, o->cuda_device, o->cuda_fault, m->mm.idot, m->err, sizeof m->err);
    if (rc <= 0) return rc;
    if (gpu_dense_begin(g, m->nspecs, m->mm.max_cols)) return model_fail(m, "out of memory");
    for (int i = 0; i < m->nspecs && !o->experts_only; i++) {
        const w_spec *sp = &m->specs[i];
        if (sp->kind != W_ARR && sp->mat && sp->mat != &m->embed) gpu_dense_add(g, sp->mat);
    }
    int nl = m->c.n_layers + m->mtp, held = 0;
    for (int l = 0; l < nl; l++) held |= gpu_find(g, &m->L[l].kv_b) != NULL;
    gpu_kv_open(g, &m->c, nl, m->kv.ctx, m->kv.gen, held, m->kv.bits != 32 ? -1 : o->cuda_attn, m->kv.ibits == 32);
    return 0;
}

/* After model_open: measure (headers only), plan against the budget, then
 * load the dense weights, the KV cache, the scratch, the expert store and
 * the pinned set. `hist` is the usage history rows ([n_layers][n_experts])
 * or NULL. Returns 0, or -1 with m->err naming the file and field/tensor,
 * or the shortfall of the budget. */
static inline int model_setup(coli_model *m, const coli_opts *o, const uint64_t *hist) {
    const coli_config *c = &m->c;
    m->numa = o->numa && numa_usable();
    m->dense_bits = o->dense_bits, m->group_size = o->group_size;
    m->absorb = o->absorb;
    m->ubatch = o->ubatch;
    m->nth = o->threads > 0 ? o->threads : coli_nthreads();
    m->pilot = o->pilot || o->pilot_real;
    m->pilot_real = o->pilot_real;
    m->pilot_k = o->pilot_k > 0 ? (o->pilot_k < c->n_experts ? o->pilot_k : c->n_experts) : c->topk;
    model_find_mtp(m, o);
    if (!(m->L = (coli_layer *)calloc((size_t)c->n_layers + 1, sizeof(coli_layer)))) return model_fail(m, "out of memory");
    if (model_table(m)) return -1;
    xs_opts xo = {.direct = o->io.direct, .mmap = o->io.mmap, .numa = m->numa, .expert_bits = o->expert_bits,
                  .group_size = o->group_size, .threads = m->nth};
    if (xs_init(&m->xs, &m->st, n_moe_layers(c) + (m->mtp && c->moe[c->n_layers]), c->n_experts, &xo)) return model_fail(m, "%s", m->xs.err);
    m->nslots = model_slots(o);
    if (model_locate_experts(m) || model_check_tensors(m) || model_measure(m, o, &m->mem)) return -1;
    if (o->slots == SLOTS_AUTO) model_auto_slots(m, o);
    if (model_plan(m, o, model_pin_want(m, hist))) return -1;
    int64_t cols = c->dim;
    int64_t dims[] = {c->q_lora, c->kv_lora, (int64_t)c->n_heads * c->v_head, c->inter, (int64_t)c->moe_inter * c->n_shared};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) cols = dims[i] > cols ? dims[i] : cols;
    char err[300];
    if (mm_init(&m->mm, o->simd, o->idot, o->ubatch, cols, m->nth, err, sizeof err)) return model_fail(m, "SIMD: %s", err);
    if (team_start(&m->team, m->nth)) fprintf(stderr, "colibri: could only start %d of %d compute threads\n", m->team.n, m->nth);
    uint64_t loaded;
    if ((!o->experts_only && model_weights(m, 1, &loaded, NULL)) || model_alloc_state(m, o) || model_io_open(m, o) || model_gpu_setup(m, o)) return -1;
    if (m->mtp && (m->mtp_eh.fmt == QT_I4 || m->mtp_eh.fmt == QT_I2))
        fprintf(stderr, "colibri: WARNING: the MTP layer's eh_proj is stored at %d bits with one scale per row: its embedding half is 20-30x "
                        "smaller than its hidden half and rounds to zero, so drafts will rarely be accepted (convert with --mtp-bits 8, or 4 "
                        "with --group-size)\n", m->mtp_eh.fmt == QT_I4 ? 4 : 2);
    if (xs_open_io(&m->xs, &m->io)) return model_fail(m, "%s", m->xs.err);
    if (gpu_experts(&m->gpu, &m->xs, c, hist, o->cuda_expert_gb, o->cuda_fill_mb, m->err, sizeof m->err)) return -1;
    model_replan_pins(m, hist);
    if (xs_open_cache(&m->xs, &m->io, m->plan.lru_slots)) return model_fail(m, "%s", m->xs.err);
    if (model_pin(m, hist, o->quiet)) return -1;
    int pinned = xs_pinned_count(&m->xs);
    if (o->mlock && !pinned) fprintf(stderr, "colibri: MLOCK=1: no pinned experts to lock\n");
    else if (o->mlock) {
        int rc = xs_lock_pins(&m->xs);
        if (rc) fprintf(stderr, "colibri: MLOCK=1: mlock failed (%s); raise the locked-memory limit (ulimit -l)\n", strerror(-rc));
        else fprintf(stderr, "colibri: MLOCK=1: %d pinned experts locked in memory\n", pinned);
    }
    return 0;
}

static inline void model_free(coli_model *m) {
    if (m->rec) rt_free(m->rec), free(m->rec);
    if (m->rep) rt_free(m->rep), free(m->rep);
    gpu_free(&m->gpu);
    team_stop(&m->team);
    model_weights_free(m);
    free(m->L);
    xs_free(&m->xs);
    io_close(&m->io);
    mm_free(&m->mm);
    compat_aligned_free(m->kv.block);
    compat_aligned_free(m->sc.block);
    st_close(&m->st);
    coli_config_free(&m->c);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------- between tokens */

/* Frees least-used LRU slots while the resident set is above the guard,
 * lowering the capacity so the cache cannot grow back. */
static inline void model_rss_guard(coli_model *m) {
    uint64_t rss = compat_rss(), start = rss;
    if (!m->rss_limit || rss <= m->rss_limit + m->rss_limit / 50) return;
    int freed = 0;
    for (int pass = 0; pass < 8 && rss > m->rss_limit; pass++) {
        int got = xs_shrink(&m->xs);
        freed += got;
        if (!got) break;
        rss = compat_rss();
    }
    fprintf(stderr, "colibri: RSS %.2f GB over the %.2f GB guard: freed %d cached experts, LRU now %d slots/layer (RSS %.2f GB)\n",
            start / GB, m->rss_limit / GB, freed, xs_lru_slots(&m->xs, 0), rss / GB);
}

/* Called between tokens, where no expert is in use: re-pin every REPIN
 * generated tokens (at most 16 swaps per pass), check RSS every 16. */
static inline int model_safe_point(coli_model *m, int generated) {
    if (m->repin > 0 && generated % m->repin == 0 && xs_repin(&m->xs, 16) < 0) return model_fail(m, "%s", m->xs.err);
    if (generated % 16 == 0) model_rss_guard(m);
    return 0;
}

#endif
