/* store.h — the routed experts in memory, behind an API that owns its state.
 *
 * Knows where each expert's three matrices (and their .qs scales) lie in the
 * shards, how an expert sits in memory (as stored, or converted on read:
 * float experts to f32 or to EXPERT_BITS with quant.h's quantizer), and
 * which experts are resident: a GPU tier (experts whose bytes the engine
 * keeps in GPU slots, checked first; the store only keeps the map), a
 * pinned set per layer (one arena each) and a per-layer LRU of slots
 * (policy from tier.h). A layer's misses are read
 * through io.h while resident experts compute (jobs: xs_begin / xs_next /
 * xs_done), predicted experts of the next layer can be prefetched, and in
 * mmap mode experts are used in place. Re-pinning, shrinking under memory
 * pressure and statistics are store operations; callers never write its
 * fields. Every expert read is checked: a failed or short read, or a
 * non-finite weight or scale, is an error naming the file and the tensor.
 *
 * Life cycle: xs_init (options) → per MoE layer xs_layer_begin, xs_locate
 * for every expert, xs_layer_end → [xs_open_io (the I/O context), reads and
 * the GPU tier's map] → xs_open_cache (slots) → xs_pin → per forward, per layer: xs_begin, xs_next/xs_done until done →
 * xs_free. "Layer" means MoE layer k (0 .. n_layers-1), not the model
 * layer. One thread drives a store (OpenMP is used inside for pinning).
 *
 * Prefix: xs_. Must not: compute, read the environment, or know tensor
 * names (the engine finds the tensors and hands them over). */
#ifndef COLI_STORE_H
#define COLI_STORE_H

#include <stdarg.h>

#include "compat.h"
#include "io.h"
#include "quant.h"
#include "st.h"
#include "tier.h"

enum { XS_GATE, XS_UP, XS_DOWN };
#define XS_MAX_REQ 6 /* reads per expert: 3 weight ranges (or one span) + 3 scale arrays */

/* How the store reads and keeps experts. */
typedef struct {
    int direct;              /* O_DIRECT reads: buffers keep alignment slack */
    int mmap;                /* use experts in place in the mapped shards */
    int numa;                /* interleave arenas and slots across NUMA nodes */
    int expert_bits;         /* float experts: 0 = f32, 8/4/2 = quantized on read */
    int group_size;          /* 4 bits: 0 = per row, else grouped */
    int threads;             /* staging buffers (pins load in parallel) */
} xs_opts;

/* Counters of a run (xs_stats_get / xs_stats_reset). */
typedef struct {
    uint64_t hit_vram, hit_pin, hit_lru, miss, mapped; /* per distinct expert of a layer's batch */
    uint64_t bytes_read;                      /* from disk, pins included until a reset */
    uint64_t routed, pred_total, pred_used;   /* prefetch recall: predicted ∩ routed / routed */
    double read_s;                            /* reads on the calling thread (conversions, pins) */
    double busy_wall;                         /* wall time with at least one read in flight */
    double first_wait_s;                      /* routing (xs_begin) to the first miss landing, summed */
    uint64_t first_waits;                     /* layers that had a miss */
    uint64_t pred_loaded, pred_wasted_bytes;  /* experts read ahead; bytes of those evicted unused */
    int repinned;                             /* experts swapped into the pinned set */
} xs_stats;

/* Where one expert lives on disk. */
typedef struct {
    const st_tensor *w[3];   /* gate, up, down weights */
    const st_tensor *s[3];   /* their .qs scales, or NULL for float weights */
    uint32_t rel[3];         /* adjacent weights: each one's offset within the span */
    uint8_t adjacent;        /* the three weights back to back in one file, same dtype */
    uint8_t checked;         /* mmap mode: its mapped values were found finite */
    uint64_t span_off, span_len;
} xs_loc;

/* How every expert of one layer sits in memory: the weights area (a span
 * copy, or gate | up | down at fixed offsets), then the scales. */
typedef struct {
    int64_t O[3], I[3];
    qt_fmt fmt[3];           /* in-memory format of each matrix */
    int gs[3];
    int quantized;           /* the container holds .qs scales (-1: not known yet) */
    size_t w_bytes[3];       /* weights of each matrix in memory */
    size_t s_count[3];       /* scales of each matrix */
    size_t fixed[3];         /* weight offsets when not a span copy */
    size_t s_off[3];         /* scale offsets */
    size_t w_area;           /* bytes reserved for weights (with O_DIRECT slack) */
    size_t bytes;            /* one expert in memory */
    int raw;                 /* disk bytes are the memory format (no conversion) */
} xs_layout;

/* An LRU slot: memory, the views of its expert, its reads in flight. */
typedef struct {
    uint8_t *mem;
    qt_tensor view[3];
    io_req req[XS_MAX_REQ];
    int nreq;
    int loading;             /* reads in flight */
    int pilot;               /* loaded on a prediction and still holding its busy mark */
    int unused;              /* loaded on a prediction and not used since */
} xs_slot;

enum { XS_QUEUED, XS_LOADING, XS_READY, XS_DONE };

/* One distinct expert a layer's batch needs. */
typedef struct {
    int e, state, slot;      /* slot: LRU slot or -1 (pinned / mapped) */
    int vram;                /* its GPU tier slot (views: shapes, no bytes), or -1 */
    qt_tensor view[3];
} xs_job;

typedef struct {
    int n_layers, n_experts;
    xs_opts o;
    const st_index *st;
    io_ctx *io;
    xs_layout *lay;          /* [n_layers] */
    xs_loc *loc;             /* [n_layers][n_experts] */
    tier_lru *lru;           /* [n_layers] */
    xs_slot *slot;           /* [n_layers][max_slots] */
    int max_slots;
    int *pin;                /* [n_layers][n_experts] index in the layer's arena, or -1 */
    uint8_t *pinned;         /* [n_layers][n_experts] 1 = pinned */
    qt_tensor *pin_view;     /* [n_layers][n_experts][3] */
    uint8_t **arena;         /* [n_layers] pinned experts, stride = layout bytes */
    int *n_pinned;           /* [n_layers] */
    uint8_t *predicted;      /* [n_layers][n_experts] named by the last prediction */
    int *vram;               /* [n_layers][n_experts] GPU tier slot, or -1; NULL: no GPU tier */
    int *vowner;             /* [n_vram] layer * n_experts + expert held by each GPU slot, or -1 */
    uint8_t *vbusy;          /* [n_vram] a job of the current layer not done yet computes from the slot */
    int n_vram;
    uint64_t *count;         /* [n_layers][n_experts] routing counts of this run */
    uint64_t *heat, *last;   /* [n_layers][n_experts] session heat and last use, for re-pinning */
    uint64_t tick;
    tier_swap *swaps;        /* [n_layers] re-pin scratch */
    int *freed;              /* [max_slots] shrink scratch */
    xs_job *jobs;            /* [n_experts] the current layer's work */
    int njobs;
    io_req **pending;        /* scratch for waits */
    uint8_t *pending_done;
    uint8_t **staging;       /* per thread: raw bytes of one expert, for conversions */
    float **fbuf;            /* per thread: one matrix in f32, for quantizing on read */
    size_t staging_len, fbuf_len;
    int n_staging;
    xs_stats stats;
    int inflight;            /* slots with reads in flight */
    double busy_t0, busy_end;
    double t_begin;          /* the current layer's xs_begin, while its first miss is awaited (0: none) */
    char err[600];
} xs_store;

static inline int xs_fail(xs_store *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, sizeof x->err, fmt, ap);
    va_end(ap);
    return -1;
}

static inline size_t xs_align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
static inline xs_loc *xs_loc_at(const xs_store *x, int k, int e) { return &x->loc[(size_t)k * x->n_experts + e]; }
static inline const char *xs_path(const xs_store *x, const st_tensor *t) { return x->st->files[t->file].path; }

/* The in-memory format for float experts at `bits` (0 = f32). */
static inline qt_fmt xs_bits_fmt(int bits, int gs) {
    return bits == 8 ? QT_I8 : bits == 4 ? (gs ? QT_I4G : QT_I4) : bits == 2 ? QT_I2 : QT_F32;
}

/* Sets up an empty store for n_layers MoE layers of n_experts experts.
 * Returns 0 or -1 with x->err. */
static inline int xs_init(xs_store *x, const st_index *st, int n_layers, int n_experts, const xs_opts *o) {
    memset(x, 0, sizeof *x);
    x->st = st;
    x->o = *o;
    x->n_layers = n_layers;
    x->n_experts = n_experts;
    size_t ne = (size_t)n_layers * n_experts + 1, nl = (size_t)n_layers + 1;
    x->lay = (xs_layout *)calloc(nl, sizeof *x->lay);
    x->loc = (xs_loc *)calloc(ne, sizeof *x->loc);
    x->pin = (int *)malloc(ne * sizeof(int));
    x->pinned = (uint8_t *)calloc(ne, 1);
    x->pin_view = (qt_tensor *)calloc(ne * 3, sizeof(qt_tensor));
    x->predicted = (uint8_t *)calloc(ne, 1);
    x->count = (uint64_t *)calloc(ne, sizeof(uint64_t));
    x->heat = (uint64_t *)calloc(ne, sizeof(uint64_t));
    x->last = (uint64_t *)calloc(ne, sizeof(uint64_t));
    x->arena = (uint8_t **)calloc(nl, sizeof(uint8_t *));
    x->n_pinned = (int *)calloc(nl, sizeof(int));
    x->swaps = (tier_swap *)calloc(nl, sizeof(tier_swap));
    x->jobs = (xs_job *)calloc((size_t)n_experts + 1, sizeof(xs_job));
    x->pending = (io_req **)calloc((size_t)n_experts * XS_MAX_REQ + 1, sizeof(io_req *));
    x->pending_done = (uint8_t *)calloc((size_t)n_experts * XS_MAX_REQ + 1, 1);
    x->n_staging = o->threads < 1 ? 1 : o->threads;
    x->staging = (uint8_t **)calloc((size_t)x->n_staging, sizeof(uint8_t *));
    x->fbuf = (float **)calloc((size_t)x->n_staging, sizeof(float *));
    if (!x->lay || !x->loc || !x->pin || !x->pinned || !x->pin_view || !x->predicted || !x->count || !x->heat || !x->last || !x->arena ||
        !x->n_pinned || !x->swaps || !x->jobs || !x->pending || !x->pending_done || !x->staging || !x->fbuf)
        return xs_fail(x, "out of memory for the expert store");
    for (size_t i = 0; i < ne; i++) x->pin[i] = -1;
    for (int k = 0; k < n_layers; k++) x->lay[k].quantized = -1;
    return 0;
}

/* ---- where experts are ---- */

/* Starts MoE layer k: the shape [O, I] of its gate, up and down matrices. */
static inline void xs_layer_begin(xs_store *x, int k, const int64_t O[3], const int64_t I[3]) {
    xs_layout *L = &x->lay[k];
    for (int p = 0; p < 3; p++) L->O[p] = O[p], L->I[p] = I[p];
    L->quantized = -1;
}

/* Expert e of layer k: its weights w (gate, up, down) and their scales s
 * (NULL entries for float weights). Quantized weights (U8/I8 with an F32
 * .qs) are used as stored, their format told by the byte counts and the
 * same for every expert of the layer; float weights must have the layer's
 * shape and become f32 or opts.expert_bits. Returns 0, or -1 with x->err
 * naming the file and tensor. */
static inline int xs_locate(xs_store *x, int k, int e, const st_tensor *const w[3], const st_tensor *const s[3]) {
    xs_layout *L = &x->lay[k];
    xs_loc *l = xs_loc_at(x, k, e);
    for (int p = 0; p < 3; p++) {
        const st_tensor *t = w[p], *q = s ? s[p] : NULL;
        int quant = q != NULL;
        if (L->quantized < 0) L->quantized = quant;
        if (quant != L->quantized)
            return xs_fail(x, "%s: tensor '%s' %s a .qs scale companion, unlike the other experts of MoE layer %d", xs_path(x, t), t->name,
                           quant ? "has" : "lacks", k);
        if (!quant) {
            if (st_check_float(x->st, t, L->O[p], L->I[p], x->err, sizeof x->err)) return -1;
            qt_fmt f = xs_bits_fmt(x->o.expert_bits, x->o.group_size);
            if (e == 0 && p == 0) L->raw = 1;
            if (e == 0) L->fmt[p] = f, L->gs[p] = f == QT_I4G ? x->o.group_size : 0;
            if (t->dtype != ST_F32 || f != QT_F32) L->raw = 0; /* converted on read */
            continue;
        }
        if ((t->dtype != ST_U8 && t->dtype != ST_I8) || q->dtype != ST_F32)
            return xs_fail(x, "%s: tensor '%s': quantized weights must be U8 with F32 .qs scales (got %s and %s)", xs_path(x, t), t->name,
                           st_dtype_names[t->dtype], st_dtype_names[q->dtype]);
        qt_fmt f;
        int gs;
        char why[300];
        if (qt_resolve(L->O[p], L->I[p], t->nbytes, q->nbytes, &f, &gs, why, sizeof why))
            return xs_fail(x, "%s: tensor '%s': %s", xs_path(x, t), t->name, why);
        if (e == 0) L->fmt[p] = f, L->gs[p] = gs, L->raw = 1;
        else if (f != L->fmt[p] || gs != L->gs[p])
            return xs_fail(x, "%s: tensor '%s' is %s but expert 0 of MoE layer %d is %s", xs_path(x, t), t->name, qt_fmt_name(f), k,
                           qt_fmt_name(L->fmt[p]));
    }
    const st_tensor *o[3] = {w[0], w[1], w[2]};
    for (int p = 0; p < 3; p++) l->w[p] = w[p], l->s[p] = s ? s[p] : NULL;
    for (int i = 0; i < 3; i++) /* order by offset */
        for (int j = i + 1; j < 3; j++)
            if (o[j]->off < o[i]->off) { const st_tensor *t = o[i]; o[i] = o[j]; o[j] = t; }
    l->adjacent = o[0]->file == o[1]->file && o[1]->file == o[2]->file && o[0]->dtype == o[1]->dtype &&
                  o[1]->dtype == o[2]->dtype && o[0]->off + o[0]->nbytes == o[1]->off && o[1]->off + o[1]->nbytes == o[2]->off &&
                  o[2]->off + o[2]->nbytes - o[0]->off <= UINT32_MAX;
    l->span_off = o[0]->off;
    l->span_len = o[2]->off + o[2]->nbytes - o[0]->off;
    for (int p = 0; p < 3; p++) l->rel[p] = l->adjacent ? (uint32_t)(w[p]->off - l->span_off) : 0;
    return 0;
}

/* Completes layer k after every expert was located: sizes and offsets of
 * its in-memory layout (with room for O_DIRECT alignment). */
static inline void xs_layer_end(xs_store *x, int k) {
    xs_layout *L = &x->lay[k];
    size_t off = 0, span = 0;
    for (int p = 0; p < 3; p++) {
        L->w_bytes[p] = (size_t)qt_weight_bytes(L->fmt[p], L->O[p], L->I[p], L->gs[p]);
        L->s_count[p] = L->fmt[p] == QT_F32 ? 0 : (size_t)qt_scale_count(L->fmt[p], L->O[p], L->I[p], L->gs[p]);
        L->fixed[p] = off;
        off = xs_align_up(off + L->w_bytes[p], 64);
    }
    for (int e = 0; L->raw && e < x->n_experts; e++) {
        const xs_loc *l = xs_loc_at(x, k, e);
        if (l->adjacent && l->span_len > span) span = (size_t)l->span_len;
    }
    L->w_area = xs_align_up((span > off ? span : off) + (x->o.direct ? IO_SLACK : 0), 64);
    off = L->w_area;
    for (int p = 0; p < 3; p++) {
        L->s_off[p] = off;
        off = xs_align_up(off + L->s_count[p] * 4, 64);
    }
    L->bytes = xs_align_up(off, x->o.direct ? IO_ALIGN : 64);
}

/* The tensors expert e of layer k was located at (s[p] NULL for float). */
static inline void xs_expert_tensors(const xs_store *x, int k, int e, const st_tensor *w[3], const st_tensor *s[3]) {
    const xs_loc *l = xs_loc_at(x, k, e);
    for (int p = 0; p < 3; p++) w[p] = l->w[p], s[p] = l->s[p];
}

/* In-memory bytes of one expert of layer k; of the largest of any layer. */
static inline size_t xs_expert_bytes(const xs_store *x, int k) { return x->lay[k].bytes; }
static inline size_t xs_max_expert_bytes(const xs_store *x) {
    size_t b = 0;
    for (int k = 0; k < x->n_layers; k++) b = x->lay[k].bytes > b ? x->lay[k].bytes : b;
    return b;
}

/* The layout of layer k (format of each matrix, for the startup line). */
static inline const xs_layout *xs_layout_of(const xs_store *x, int k) { return &x->lay[k]; }

/* Bytes of expert e of layer k on disk (weights and scales). */
static inline uint64_t xs_disk_bytes(const xs_store *x, int k, int e) {
    const xs_loc *l = xs_loc_at(x, k, e);
    uint64_t b = 0;
    for (int p = 0; p < 3; p++) b += l->w[p]->nbytes + (l->s[p] ? l->s[p]->nbytes : 0);
    return b;
}

/* Whether any layer converts on read (float experts not kept as raw f32). */
static inline int xs_converts(const xs_store *x) {
    for (int k = 0; k < x->n_layers; k++)
        if (!x->lay[k].raw) return 1;
    return 0;
}

/* Raw bytes of the largest expert's three matrices (a conversion's staging). */
static inline size_t xs_raw_bytes_(const xs_store *x) {
    size_t s = 0;
    for (size_t i = 0; i < (size_t)x->n_layers * x->n_experts; i++) {
        size_t need = 0;
        for (int p = 0; p < 3; p++) need += xs_align_up((size_t)x->loc[i].w[p]->nbytes, 64);
        s = need > s ? need : s;
    }
    return s;
}

/* Elements of the largest matrix (a conversion's f32 buffer). */
static inline size_t xs_max_matrix_(const xs_store *x) {
    size_t n = 0;
    for (int k = 0; k < x->n_layers; k++)
        for (int p = 0; p < 3; p++) {
            size_t m = (size_t)x->lay[k].O[p] * (size_t)x->lay[k].I[p];
            n = m > n ? m : n;
        }
    return n;
}

/* Memory a store needs per thread for conversions (0 when nothing
 * converts), for the budget plan. */
static inline size_t xs_staging_bytes(const xs_store *x) {
    return xs_converts(x) ? xs_raw_bytes_(x) + IO_SLACK + xs_max_matrix_(x) * 4 : 0;
}

/* ---- reading one expert ---- */

/* Views of an expert whose weights start at w (a span copy when span is
 * set, else fixed offsets) and whose scales are at s[3]. */
static inline void xs_make_views(const xs_store *x, int k, int e, const uint8_t *w, int span, const float *const s[3], qt_tensor out[3]) {
    const xs_layout *L = &x->lay[k];
    const xs_loc *l = xs_loc_at(x, k, e);
    for (int p = 0; p < 3; p++)
        out[p] = (qt_tensor){L->fmt[p], L->O[p], L->I[p], w + (span ? l->rel[p] : L->fixed[p]), s[p], L->gs[p]};
}

/* The reads that bring expert e of layer k into mem (raw layouts): the
 * weights span with one request (O_DIRECT-capable) or one per matrix, and
 * one small buffered request per scale array: at most XS_MAX_REQ. Returns
 * the count. */
static inline int xs_plan_reads(const xs_store *x, int k, int e, uint8_t *mem, io_req r[XS_MAX_REQ]) {
    const xs_layout *L = &x->lay[k];
    const xs_loc *l = xs_loc_at(x, k, e);
    int n = 0;
    if (l->adjacent)
        r[n++] = (io_req){.file = l->w[0]->file, .off = l->span_off, .len = (size_t)l->span_len, .buf = mem, .cap = L->w_area, .direct = 1};
    else
        for (int p = 0; p < 3; p++)
            r[n++] = (io_req){.file = l->w[p]->file, .off = l->w[p]->off, .len = (size_t)l->w[p]->nbytes, .buf = mem + L->fixed[p],
                              .cap = (size_t)l->w[p]->nbytes};
    for (int p = 0; p < 3; p++)
        if (l->s[p])
            r[n++] = (io_req){.file = l->s[p]->file, .off = l->s[p]->off, .len = (size_t)l->s[p]->nbytes, .buf = mem + L->s_off[p],
                              .cap = (size_t)l->s[p]->nbytes};
    return n;
}

/* Scales at their place in an expert's memory, or NULLs for f32. */
static inline void xs_scales_in(const xs_store *x, int k, const uint8_t *mem, const float *s[3]) {
    const xs_layout *L = &x->lay[k];
    for (int p = 0; p < 3; p++) s[p] = L->s_count[p] ? (const float *)(mem + L->s_off[p]) : NULL;
}

/* Views after the reads planned by xs_plan_reads completed. */
static inline void xs_views_after(const xs_store *x, int k, int e, uint8_t *mem, const io_req *r, qt_tensor out[3]) {
    const float *s[3];
    xs_scales_in(x, k, mem, s);
    xs_make_views(x, k, e, xs_loc_at(x, k, e)->adjacent ? r[0].data : mem, xs_loc_at(x, k, e)->adjacent, s, out);
}

static inline int xs_read_error(xs_store *x, int k, int e, int rc, char *err, size_t n) {
    const xs_loc *l = xs_loc_at(x, k, e);
    snprintf(err, n, "%s: expert %d of MoE layer %d ('%s'): read failed: %s", xs_path(x, l->w[0]), e, k, l->w[0]->name,
             rc == -EIO ? "file truncated or I/O error" : strerror(-rc));
    return -1;
}

/* Index of the first non-finite of n floats, or -1. */
static inline int64_t xs_nonfinite_(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(v[i]) <= FLT_MAX)) return (int64_t)i;
    return -1;
}

/* Every f32 weight and every scale of an expert's views is finite, else an
 * error naming the tensor: a NaN or infinity in a model file never reaches
 * the output silently. */
static inline int xs_check_finite(const xs_store *x, int k, int e, const qt_tensor v[3], char *err, size_t n) {
    const xs_loc *l = xs_loc_at(x, k, e);
    for (int p = 0; p < 3; p++) {
        int64_t at = -1;
        const char *what = "weight";
        if (v[p].fmt == QT_F32) at = xs_nonfinite_((const float *)v[p].w, (size_t)(v[p].O * v[p].I));
        else if ((at = xs_nonfinite_(v[p].s, (size_t)qt_scale_count(v[p].fmt, v[p].O, v[p].I, v[p].gs))) >= 0) what = "scale";
        if (at >= 0) {
            snprintf(err, n, "%s: tensor '%s': %s %lld is not finite (NaN or infinity)", xs_path(x, l->w[p]), l->w[p]->name, what, (long long)at);
            return -1;
        }
    }
    return 0;
}

/* Converts an expert's raw float matrices into mem in the layer's format
 * (f32, or quantized with the one quantizer); f is an f32 buffer of the
 * largest matrix. Returns the first matrix with non-finite inputs, or -1
 * (f32 results are checked afterwards, with their views). */
static inline int xs_convert_(const xs_store *x, int k, const uint8_t *raw[3], const st_tensor *const w[3], uint8_t *mem, float *f) {
    const xs_layout *L = &x->lay[k];
    int bad = -1;
    for (int p = 0; p < 3; p++) {
        if (L->fmt[p] == QT_F32) {
            st_convert_f32_(w[p]->dtype, raw[p], (float *)(mem + L->fixed[p]), (size_t)w[p]->numel);
            continue;
        }
        st_convert_f32_(w[p]->dtype, raw[p], f, (size_t)w[p]->numel);
        if (qt_quantize(f, L->O[p], L->I[p], L->fmt[p], L->gs[p], mem + L->fixed[p], (float *)(mem + L->s_off[p])) && bad < 0) bad = p;
    }
    return bad;
}

/* Reads expert e of layer k into mem synchronously on the calling thread
 * (staging buffer `thread` for conversions), checks it and fills its
 * views. Returns 0 or -1 with err naming the file and tensor. Safe from
 * several threads with distinct `thread`. */
static inline int xs_read_sync(xs_store *x, int k, int e, uint8_t *mem, int thread, qt_tensor view[3], uint64_t *bytes, char *err, size_t errlen) {
    const xs_layout *L = &x->lay[k];
    const xs_loc *l = xs_loc_at(x, k, e);
    io_req r[XS_MAX_REQ];
    *bytes = 0;
    if (L->raw) {
        int n = xs_plan_reads(x, k, e, mem, r);
        for (int i = 0; i < n; i++) {
            int rc = io_do_read(x->io, &r[i]);
            if (rc) return xs_read_error(x, k, e, rc, err, errlen);
            *bytes += r[i].len;
        }
        xs_views_after(x, k, e, mem, r, view);
        return xs_check_finite(x, k, e, view, err, errlen);
    }
    const uint8_t *raw[3];
    uint8_t *st = x->staging[thread];
    size_t off = 0;
    for (int p = 0; p < 3; p++) { /* each matrix's bytes into staging, then convert */
        io_req q = {.file = l->w[p]->file, .off = l->w[p]->off, .len = (size_t)l->w[p]->nbytes, .buf = st + off, .cap = (size_t)l->w[p]->nbytes};
        int rc = io_do_read(x->io, &q);
        if (rc) return xs_read_error(x, k, e, rc, err, errlen);
        raw[p] = q.data;
        *bytes += q.len;
        off = xs_align_up(off + (size_t)l->w[p]->nbytes, 64);
    }
    int bad = xs_convert_(x, k, raw, l->w, mem, x->fbuf[thread]);
    const float *s[3];
    xs_scales_in(x, k, mem, s);
    xs_make_views(x, k, e, mem, 0, s, view);
    if (bad >= 0) {
        snprintf(err, errlen, "%s: tensor '%s': weights are not finite (NaN or infinity)", xs_path(x, l->w[bad]), l->w[bad]->name);
        return -1;
    }
    return xs_check_finite(x, k, e, view, err, errlen);
}

/* mmap mode: views straight into the mapped shards, or 0 if this expert
 * cannot be used in place (converted layout, misaligned floats, a shard
 * that shrank, non-finite values: those are then read like any other). */
static inline int xs_map_views(xs_store *x, int k, int e, qt_tensor view[3]) {
    const xs_layout *L = &x->lay[k];
    xs_loc *l = xs_loc_at(x, k, e);
    if (!L->raw || !l->adjacent) return 0;
    const uint8_t *w = io_mapped(x->io, l->w[0]->file, l->span_off, (size_t)l->span_len);
    const float *s[3] = {NULL, NULL, NULL};
    if (!w) return 0;
    for (int p = 0; p < 3; p++) {
        if (L->fmt[p] == QT_F32 && (uintptr_t)(w + l->rel[p]) % 4) return 0;
        if (!l->s[p]) continue;
        s[p] = (const float *)io_mapped(x->io, l->s[p]->file, l->s[p]->off, (size_t)l->s[p]->nbytes);
        if (!s[p] || (uintptr_t)s[p] % 4) return 0;
    }
    xs_make_views(x, k, e, w, 1, s, view);
    if (!l->checked) {
        char err[8];
        if (xs_check_finite(x, k, e, view, err, sizeof err)) return 0;
        l->checked = 1;
    }
    return 1;
}

/* ---- the cache ---- */

static inline xs_slot *xs_slot_at(xs_store *x, int k, int s) { return &x->slot[(size_t)k * x->max_slots + s]; }

/* Reads through io, with per-thread staging for conversions: enough for
 * xs_read_sync. The first call's io stays. 0 or -1. */
static inline int xs_open_io(xs_store *x, io_ctx *io) {
    if (x->io) return 0;
    x->io = io;
    if (xs_converts(x)) {
        x->staging_len = xs_raw_bytes_(x);
        x->fbuf_len = xs_max_matrix_(x);
    }
    for (int t = 0; t < x->n_staging && x->staging_len; t++)
        if (!(x->staging[t] = (uint8_t *)compat_aligned_alloc(IO_ALIGN, x->staging_len + IO_SLACK)) ||
            !(x->fbuf[t] = (float *)compat_aligned_alloc(64, x->fbuf_len * 4)))
            return xs_fail(x, "out of memory for expert staging");
    return 0;
}

/* Opens the caches: `slots` LRU slots per layer (memory on first use),
 * and xs_open_io if not done. 0 or -1. */
static inline int xs_open_cache(xs_store *x, io_ctx *io, int slots) {
    if (xs_open_io(x, io)) return -1;
    x->max_slots = slots;
    x->lru = (tier_lru *)calloc((size_t)x->n_layers + 1, sizeof(tier_lru));
    x->slot = (xs_slot *)calloc((size_t)x->n_layers * (size_t)slots + 1, sizeof(xs_slot));
    x->freed = (int *)calloc((size_t)slots + 1, sizeof(int));
    if (!x->lru || !x->slot || !x->freed) return xs_fail(x, "out of memory for the expert cache");
    for (int k = 0; k < x->n_layers; k++)
        if (tier_lru_init(&x->lru[k], x->n_experts, slots)) return xs_fail(x, "out of memory for the expert cache");
    return 0;
}

/* Enabled LRU slots of layer k (lowered by xs_shrink). */
static inline int xs_lru_slots(const xs_store *x, int k) { return x->lru ? x->lru[k].cap : 0; }

/* Whether every read of slot s has finished; a failure sets *failed. */
static inline int xs_slot_poll(xs_store *x, int k, int s, int *failed) {
    xs_slot *sl = xs_slot_at(x, k, s);
    *failed = 0;
    for (int i = 0; i < sl->nreq; i++) {
        int st = io_state(&sl->req[i]);
        if (!st) return 0;
        if (st < 0 && !*failed) *failed = st;
    }
    return 1;
}

/* One slot's reads are over: the union of in-flight intervals grows. */
static inline void xs_busy_end(xs_store *x, const xs_slot *sl) {
    for (int i = 0; i < sl->nreq; i++)
        if (sl->req[i].t_done > x->busy_end) x->busy_end = sl->req[i].t_done;
    if (--x->inflight == 0) x->stats.busy_wall += x->busy_end - x->busy_t0;
}

/* Finishes slot s after its reads: views, checks, counters; a failed read
 * or a non-finite value empties the slot. Returns 0 or -1 with x->err. */
static inline int xs_slot_finish(xs_store *x, int k, int s, int failed) {
    xs_slot *sl = xs_slot_at(x, k, s);
    tier_lru *lru = &x->lru[k];
    int e = lru->expert[s];
    sl->loading = 0;
    xs_busy_end(x, sl);
    if (sl->pilot) sl->pilot = 0, lru->busy[s]--;
    if (failed) {
        tier_lru_evict(lru, s);
        return xs_read_error(x, k, e, failed, x->err, sizeof x->err);
    }
    for (int i = 0; i < sl->nreq; i++) x->stats.bytes_read += sl->req[i].len;
    if (x->t_begin > 0 && !sl->unused) { /* the layer's first miss landed */
        double done = 0;
        for (int i = 0; i < sl->nreq; i++) done = sl->req[i].t_done > done ? sl->req[i].t_done : done;
        x->stats.first_wait_s += done - x->t_begin;
        x->stats.first_waits++;
        x->t_begin = 0;
    }
    xs_views_after(x, k, e, sl->mem, sl->req, sl->view);
    if (xs_check_finite(x, k, e, sl->view, x->err, sizeof x->err)) {
        tier_lru_evict(lru, s);
        return -1;
    }
    return 0;
}

/* Starts reading expert e into a free LRU slot of layer k (the victim, or
 * tier.h's choice when victim < 0), busy while in flight. Returns the
 * slot, -1 if every slot is busy, -2 on error. */
static inline int xs_slot_load(xs_store *x, int k, int e, int victim) {
    tier_lru *lru = &x->lru[k];
    int s = victim >= 0 ? victim : tier_lru_victim(lru);
    if (s < 0) return -1;
    xs_slot *sl = xs_slot_at(x, k, s);
    if (!sl->mem) {
        if (!(sl->mem = (uint8_t *)compat_aligned_alloc(IO_ALIGN, x->lay[k].bytes))) {
            xs_fail(x, "out of memory for an expert slot (%zu bytes)", x->lay[k].bytes);
            return -2;
        }
        if (x->o.numa) io_numa_interleave(sl->mem, x->lay[k].bytes);
    }
    if (sl->unused) x->stats.pred_wasted_bytes += x->lay[k].bytes, sl->unused = 0;
    tier_lru_install(lru, s, e, x->tick);
    lru->busy[s]++;
    if (!x->lay[k].raw) { /* conversions are synchronous */
        uint64_t b;
        double t0 = compat_now();
        int rc = xs_read_sync(x, k, e, sl->mem, 0, sl->view, &b, x->err, sizeof x->err);
        x->stats.read_s += compat_now() - t0;
        if (rc) {
            tier_lru_evict(lru, s);
            lru->busy[s]--;
            return -2;
        }
        x->stats.bytes_read += b;
        sl->nreq = 0;
        sl->loading = 0;
        return s;
    }
    sl->nreq = xs_plan_reads(x, k, e, sl->mem, sl->req);
    sl->loading = 1;
    if (x->inflight++ == 0) x->busy_t0 = x->busy_end = compat_now();
    io_req *rp[XS_MAX_REQ];
    for (int i = 0; i < sl->nreq; i++) rp[i] = &sl->req[i];
    io_submit(x->io, rp, sl->nreq);
    return s;
}

/* Settles finished prefetches of layer k (releases their busy marks). */
static inline int xs_settle(xs_store *x, int k) {
    for (int s = 0; s < x->max_slots; s++) {
        xs_slot *sl = xs_slot_at(x, k, s);
        int failed;
        if (sl->loading && sl->pilot && xs_slot_poll(x, k, s, &failed)) {
            if (failed) { /* a failed speculative read never stops the run */
                sl->loading = 0;
                xs_busy_end(x, sl);
                sl->pilot = 0;
                x->lru[k].busy[s]--;
                tier_lru_evict(&x->lru[k], s);
            } else if (xs_slot_finish(x, k, s, 0)) return -1;
        }
    }
    return 0;
}

/* ---- a layer's jobs ---- */

/* Job j of layer k is expert e: in the GPU tier (with `vram`), pinned,
 * mapped or cached, ready at once; else a queued miss. Counts which. */
static inline void xs_classify_(xs_store *x, int k, int j, int e, int vram) {
    size_t i = (size_t)k * x->n_experts + e;
    xs_job *jb = &x->jobs[j];
    jb->e = e, jb->slot = -1, jb->vram = -1, jb->state = XS_QUEUED;
    if (vram && x->vram[i] >= 0) {
        x->stats.hit_vram++;
        x->vbusy[x->vram[i]] = 1;
        for (int t = 0; t < 3; t++) /* shapes only: the bytes are the GPU's */
            jb->view[t] = (qt_tensor){x->lay[k].fmt[t], x->lay[k].O[t], x->lay[k].I[t], NULL, NULL, x->lay[k].gs[t]};
        jb->vram = x->vram[i];
        jb->state = XS_READY;
        return;
    }
    if (x->pin[i] >= 0) {
        x->stats.hit_pin++;
        memcpy(jb->view, &x->pin_view[i * 3], sizeof jb->view);
        jb->state = XS_READY;
        return;
    }
    if (x->o.mmap && xs_map_views(x, k, e, jb->view)) {
        x->stats.mapped++;
        x->stats.bytes_read += xs_disk_bytes(x, k, e);
        jb->state = XS_READY;
        return;
    }
    int s = tier_lru_lookup(&x->lru[k], e, x->tick);
    if (s >= 0) {
        x->stats.hit_lru++;
        x->lru[k].busy[s]++;
        xs_slot_at(x, k, s)->unused = 0;
        jb->slot = s;
        jb->state = xs_slot_at(x, k, s)->loading ? XS_LOADING : XS_READY;
        if (jb->state == XS_READY) memcpy(jb->view, xs_slot_at(x, k, s)->view, sizeof jb->view);
    } else x->stats.miss++;
}

/* Starts layer k's work: the distinct experts it needs (ascending). Those
 * in the GPU tier need no bytes (job.vram ≥ 0, views without bytes); pinned
 * and cached experts are ready at once (cached slots held busy), mapped
 * ones too in mmap mode; misses are read into free slots as far as slots
 * allow. Counts hits, misses and prefetch recall. Returns 0 or -1. */
static inline int xs_begin(xs_store *x, int k, const int *experts, int n) {
    if (xs_settle(x, k)) return -1;
    x->njobs = n;
    if (x->vbusy) memset(x->vbusy, 0, (size_t)x->n_vram); /* the last layer's jobs are over, done or not */
    for (int j = 0; j < n; j++) {
        size_t i = (size_t)k * x->n_experts + experts[j];
        x->tick++;
        x->stats.routed++;
        x->stats.pred_used += x->predicted[i];
        xs_classify_(x, k, j, experts[j], x->vram != NULL);
    }
    memset(x->predicted + (size_t)k * x->n_experts, 0, (size_t)x->n_experts);
    x->t_begin = 0;
    for (int j = 0; j < n; j++) {
        xs_job *jb = &x->jobs[j];
        if (jb->state != XS_QUEUED) continue;
        if (x->t_begin == 0 && x->lay[k].raw) x->t_begin = compat_now();
        int s = xs_slot_load(x, k, jb->e, -1);
        if (s == -2) return -1;
        if (s < 0) break;
        jb->slot = s;
        jb->state = XS_LOADING;
    }
    return 0;
}

/* Adds the unfinished requests of slot s to the wait list. */
static inline int xs_pending_add_(xs_store *x, xs_slot *sl, int np) {
    for (int i = 0; i < sl->nreq; i++)
        if (!io_state(&sl->req[i])) x->pending[np] = &sl->req[i], x->pending_done[np++] = 0;
    return np;
}

/* The next job of layer k that can be computed: a ready one, else it
 * waits for a read to land (and starts queued reads as slots free up).
 * Returns the job index, -1 when all are done, -2 on a read error. */
static inline int xs_next(xs_store *x, int k) {
    for (;;) {
        int loading = 0, queued = 0;
        for (int j = 0; j < x->njobs; j++) {
            xs_job *jb = &x->jobs[j];
            if (jb->state == XS_READY) return j;
            if (jb->state == XS_LOADING) {
                int failed;
                if (xs_slot_poll(x, k, jb->slot, &failed)) {
                    xs_slot *sl = xs_slot_at(x, k, jb->slot);
                    if (sl->loading && xs_slot_finish(x, k, jb->slot, failed)) return -2;
                    memcpy(jb->view, sl->view, sizeof jb->view);
                    jb->state = XS_READY;
                    return j;
                }
                loading++;
            }
            queued += jb->state == XS_QUEUED;
        }
        for (int j = 0; queued && j < x->njobs; j++) { /* slots freed by finished jobs */
            xs_job *jb = &x->jobs[j];
            if (jb->state != XS_QUEUED) continue;
            int s = xs_slot_load(x, k, jb->e, -1);
            if (s == -2) return -2;
            if (s < 0) break;
            jb->slot = s;
            jb->state = XS_LOADING;
            loading++;
            queued--;
        }
        if (!loading && !queued) return -1;
        int np = 0;
        if (!loading) { /* slots held by prefetches: wait for those in flight, settle those landed */
            int held = 0;
            for (int s = 0; s < x->max_slots; s++) {
                xs_slot *sl = xs_slot_at(x, k, s);
                if (sl->loading && sl->pilot) held = 1, np = xs_pending_add_(x, sl, np);
            }
            if (!held) return xs_fail(x, "expert cache of MoE layer %d: every slot is busy", k), -2;
            if (np) io_wait_any(x->io, x->pending, x->pending_done, np);
            if (xs_settle(x, k)) return -2;
            continue;
        }
        for (int j = 0; j < x->njobs; j++)
            if (x->jobs[j].state == XS_LOADING) np = xs_pending_add_(x, xs_slot_at(x, k, x->jobs[j].slot), np);
        if (np) io_wait_any(x->io, x->pending, x->pending_done, np);
    }
}

/* Jobs of the current layer (xs_begin's experts). */
static inline int xs_job_count(const xs_store *x) { return x->njobs; }

/* Job j of the current layer (valid until the next xs_begin). */
static inline const xs_job *xs_job_get(const xs_store *x, int j) { return &x->jobs[j]; }

/* Job j of layer k, a GPU tier one whose GPU computation failed, becomes
 * an expert the CPU computes: pinned, mapped, cached or read like any
 * other (xs_next hands it out again). */
static inline void xs_requeue(xs_store *x, int k, int j) {
    if (x->jobs[j].vram >= 0) {
        x->stats.hit_vram--; /* counted again as what serves it now */
        if (x->vbusy) x->vbusy[x->jobs[j].vram] = 0;
    }
    xs_classify_(x, k, j, x->jobs[j].e, 0);
}

/* Job j of layer k is computed: its slot may be evicted again. */
static inline void xs_done(xs_store *x, int k, int j) {
    xs_job *jb = &x->jobs[j];
    jb->state = XS_DONE;
    if (jb->slot >= 0) x->lru[k].busy[jb->slot]--;
    if (jb->vram >= 0 && x->vbusy) x->vbusy[jb->vram] = 0;
}

/* Router lookahead for layer k: marks the predicted experts (for recall);
 * with `real`, reads those not resident into LRU slots, never evicting an
 * expert clearly hotter than the prediction (hysteresis of tier.h), else
 * only asks the kernel to read them ahead. */
static inline void xs_prefetch(xs_store *x, int k, const int *experts, int n, int real) {
    for (int j = 0; j < n; j++) {
        int e = experts[j];
        size_t i = (size_t)k * x->n_experts + e;
        if (x->predicted[i]) continue;
        x->predicted[i] = 1;
        x->stats.pred_total++;
        if (x->pin[i] >= 0 || x->lru[k].where[e] >= 0 || x->o.mmap || (x->vram && x->vram[i] >= 0)) continue;
        const xs_loc *l = &x->loc[i];
        if (!real || !x->lay[k].raw) {
            for (int p = 0; p < 3; p++) {
                io_hint(x->io, l->w[p]->file, l->w[p]->off, (size_t)l->w[p]->nbytes, 1);
                if (l->s[p]) io_hint(x->io, l->s[p]->file, l->s[p]->off, (size_t)l->s[p]->nbytes, 0);
            }
            continue;
        }
        int v = tier_lru_victim(&x->lru[k]);
        if (v < 0) continue;
        int old = x->lru[k].expert[v];
        if (old >= 0) {
            size_t io = (size_t)k * x->n_experts + old;
            uint64_t hv = tier_score(x->heat[io], x->tick - x->last[io]), hp = tier_score(x->heat[i], x->tick - x->last[i]);
            if (x->heat[io] >= 2 && tier_should_swap(hv, hp)) continue;
        }
        int s = xs_slot_load(x, k, e, v);
        if (s >= 0) { /* keeps the busy mark until settled */
            xs_slot_at(x, k, s)->pilot = 1;
            xs_slot_at(x, k, s)->unused = 1;
            x->stats.pred_loaded++;
        }
    }
}

/* Notes that the router chose expert e of layer k (usage history, heat). */
static inline void xs_note_use(xs_store *x, int k, int e) {
    size_t i = (size_t)k * x->n_experts + e;
    x->count[i]++;
    x->heat[i]++;
    x->last[i] = x->tick;
}

/* Notes that the router chose expert e of layer k for another process to
 * compute (MPI, ranks.h): the usage history counts it; the heat that
 * re-pinning and eviction read does not. */
static inline void xs_note_route(xs_store *x, int k, int e) { x->count[(size_t)k * x->n_experts + e]++; }

/* This run's routing counts, [n_layers][n_experts]. */
static inline const uint64_t *xs_counts(const xs_store *x) { return x->count; }

/* ---- the GPU tier's map (the engine owns the GPU copies) ---- */

/* A GPU tier of n slots, all empty. 0 or -1 (x->err). */
static inline int xs_vram_open(xs_store *x, int n) {
    size_t ne = (size_t)x->n_layers * x->n_experts;
    free(x->vram), free(x->vowner), free(x->vbusy);
    x->vram = (int *)malloc((ne + 1) * sizeof *x->vram);
    x->vowner = (int *)malloc(((size_t)n + 1) * sizeof *x->vowner);
    x->vbusy = (uint8_t *)calloc((size_t)n + 1, 1);
    if (!x->vram || !x->vowner || !x->vbusy) return xs_fail(x, "out of memory");
    for (size_t i = 0; i < ne; i++) x->vram[i] = -1;
    for (int s = 0; s < n; s++) x->vowner[s] = -1;
    x->n_vram = n;
    return 0;
}

/* The GPU slot holding expert e of layer k, or -1. */
static inline int xs_vram_slot(const xs_store *x, int k, int e) { return x->vram ? x->vram[(size_t)k * x->n_experts + e] : -1; }

/* The GPU slot expert e of layer k should be copied into now that it ran
 * on the CPU (tier_vram_victim), or -1. Changes nothing. */
static inline int xs_vram_victim(const xs_store *x, int k, int e) {
    if (!x->vram || xs_vram_slot(x, k, e) >= 0) return -1;
    return tier_vram_victim(x->vowner, x->vbusy, x->n_vram, x->heat, x->last, x->tick, (size_t)k * x->n_experts + e);
}

/* GPU slot s holds expert e of layer k from now on (e < 0: nothing, after
 * a failed copy); its previous expert is out of the tier. */
static inline void xs_vram_place(xs_store *x, int s, int k, int e) {
    if (x->vowner[s] >= 0) x->vram[x->vowner[s]] = -1;
    x->vowner[s] = -1;
    if (e < 0) return;
    size_t i = (size_t)k * x->n_experts + e;
    x->vram[i] = s, x->vowner[s] = (int)i;
}

/* No GPU tier from now on (the GPU failed): every expert comes from RAM
 * or disk. */
static inline void xs_vram_close(xs_store *x) {
    free(x->vram), free(x->vowner), free(x->vbusy);
    x->vram = NULL, x->vowner = NULL, x->vbusy = NULL, x->n_vram = 0;
}

/* ---- the pinned set ---- */

/* Pins the experts flagged in pinned[L][E]: one arena per layer, filled in
 * parallel (OpenMP, one staging buffer per thread); in mmap mode raw
 * experts are used in place instead. progress(ud, done, total) is called
 * from one thread now and then. Returns 0 or -1 with x->err. */
static inline int xs_pin(xs_store *x, const uint8_t *pinned, void (*progress)(void *, uint64_t, uint64_t), void *ud) {
    size_t ne = (size_t)x->n_layers * x->n_experts;
    int *list = (int *)malloc((ne ? ne : 1) * sizeof(int)), n = 0;
    if (!list) return xs_fail(x, "out of memory");
    uint64_t total = 0;
    memcpy(x->pinned, pinned, ne);
    for (int k = 0; k < x->n_layers; k++) {
        int c = 0;
        for (int e = 0; e < x->n_experts; e++)
            if (pinned[(size_t)k * x->n_experts + e]) x->pin[(size_t)k * x->n_experts + e] = c++, list[n++] = k * x->n_experts + e;
        x->n_pinned[k] = c;
        total += (uint64_t)c * x->lay[k].bytes;
        if (c && !(x->o.mmap && x->lay[k].raw)) {
            if (!(x->arena[k] = (uint8_t *)compat_aligned_alloc(IO_ALIGN, (size_t)c * x->lay[k].bytes))) {
                free(list);
                return xs_fail(x, "out of memory for %d pinned experts of MoE layer %d", c, k);
            }
            if (x->o.numa) io_numa_interleave(x->arena[k], (size_t)c * x->lay[k].bytes);
        }
    }
    int failed = 0;
    uint64_t done = 0, bytes = 0;
    double t0 = compat_now();
#pragma omp parallel for schedule(dynamic) num_threads(x->n_staging)
    for (int i = 0; i < n; i++) {
        if (failed) continue;
        int k = list[i] / x->n_experts, e = list[i] % x->n_experts, th = compat_omp_thread();
        char err[600];
        uint64_t b = 0;
        qt_tensor *view = &x->pin_view[(size_t)list[i] * 3];
        int rc = 0;
        if (!(x->o.mmap && xs_map_views(x, k, e, view))) {
            if (!x->arena[k])
                rc = -1, snprintf(err, sizeof err, "%s: expert %d of MoE layer %d cannot be used in place (COLI_MMAP): its weights are not one complete, aligned, finite range",
                                  xs_path(x, xs_loc_at(x, k, e)->w[0]), e, k);
            else rc = xs_read_sync(x, k, e, x->arena[k] + (size_t)x->pin[list[i]] * x->lay[k].bytes, th, view, &b, err, sizeof err);
        }
        if (rc) {
#pragma omp critical(xs_pin_err)
            if (!failed) failed = 1, snprintf(x->err, sizeof x->err, "%s", err);
            continue;
        }
#pragma omp atomic
        bytes += b;
#pragma omp atomic
        done += x->lay[k].bytes;
        if (progress && th == 0) progress(ud, done, total);
    }
    free(list);
    x->stats.bytes_read += bytes;
    x->stats.read_s += compat_now() - t0;
    if (progress && !failed) progress(ud, total, total);
    return failed ? -1 : 0;
}

/* Pins the most used experts by counts[L][E] within `budget` bytes (see
 * tier_pick_hot). Returns 0 or -1 with x->err. */
static inline int xs_pin_by_usage(xs_store *x, const uint64_t *counts, uint64_t budget, void (*progress)(void *, uint64_t, uint64_t), void *ud) {
    int L = x->n_layers, E = x->n_experts;
    uint64_t *bytes = (uint64_t *)malloc(((size_t)L + 1) * 8);
    tier_rank *order = (tier_rank *)malloc(((size_t)L * E + 1) * sizeof(tier_rank));
    uint8_t *want = (uint8_t *)calloc((size_t)L * E + 1, 1);
    int rc = -1;
    if (bytes && order && want) {
        for (int k = 0; k < L; k++) bytes[k] = xs_expert_bytes(x, k);
        tier_pick_hot(counts, L, E, bytes, budget, want, order);
        rc = xs_pin(x, want, progress, ud);
    } else xs_fail(x, "out of memory");
    free(bytes);
    free(order);
    free(want);
    return rc;
}

/* Pinned experts in all layers, and their bytes in memory. */
static inline int xs_pinned_count(const xs_store *x) {
    int n = 0;
    for (int k = 0; k < x->n_layers; k++) n += x->n_pinned[k];
    return n;
}
static inline uint64_t xs_pinned_bytes(const xs_store *x) {
    uint64_t b = 0;
    for (int k = 0; k < x->n_layers; k++) b += (uint64_t)x->n_pinned[k] * x->lay[k].bytes;
    return b;
}

/* Locks the pinned experts' memory (arenas, or their mapped ranges) so
 * they are never swapped out. Returns 0 or -errno of the first failure. */
static inline int xs_lock_pins(xs_store *x) {
    for (int k = 0; k < x->n_layers; k++) {
        if (!x->n_pinned[k]) continue;
        if (x->arena[k]) {
            if (mlock(x->arena[k], (size_t)x->n_pinned[k] * x->lay[k].bytes)) return -errno;
            continue;
        }
        for (int e = 0; e < x->n_experts; e++) {
            size_t i = (size_t)k * x->n_experts + e;
            if (x->pin[i] < 0) continue;
            const xs_loc *l = &x->loc[i];
            const qt_tensor *v = &x->pin_view[i * 3];
            uintptr_t a = (uintptr_t)v[0].w - l->rel[0];
            if (mlock((void *)(a / 4096 * 4096), (size_t)(a % 4096 + l->span_len))) return -errno;
        }
    }
    return 0;
}

/* Expert `admit` of layer k takes the arena place of pinned expert
 * `evict`. Returns 0 or -1 (x->err); on failure the evicted expert is gone
 * from the pinned set, never half-loaded. */
static inline int xs_swap_pin_(xs_store *x, int k, int admit, int evict) {
    size_t ia = (size_t)k * x->n_experts + admit, iv = (size_t)k * x->n_experts + evict;
    int place = x->pin[iv];
    x->pin[iv] = -1;
    x->pinned[iv] = 0;
    uint64_t b;
    double t0 = compat_now();
    if (!x->arena[k]) {
        if (!xs_map_views(x, k, admit, &x->pin_view[ia * 3])) return xs_fail(x, "expert %d of MoE layer %d cannot be used in place", admit, k);
    } else if (xs_read_sync(x, k, admit, x->arena[k] + (size_t)place * x->lay[k].bytes, 0, &x->pin_view[ia * 3], &b, x->err, sizeof x->err))
        return -1;
    else x->stats.bytes_read += b;
    x->stats.read_s += compat_now() - t0;
    int s = x->lru[k].where[admit]; /* a cached copy is no longer needed */
    if (s >= 0 && !x->lru[k].busy[s]) tier_lru_evict(&x->lru[k], s);
    x->pin[ia] = place;
    x->pinned[ia] = 1;
    return 0;
}

/* One re-pin pass, between forward passes: the hottest unpinned experts of
 * this session replace clearly colder pinned ones (tier_repin_pass, at most
 * `limit`), then heat decays. Returns the swaps made, or -1 (x->err). */
static inline int xs_repin(xs_store *x, int limit) {
    int n = tier_repin_pass(x->heat, x->last, x->pinned, x->vram, x->n_layers, x->n_experts, x->tick, limit, x->swaps);
    for (int i = 0; i < n; i++)
        if (xs_swap_pin_(x, x->swaps[i].layer, x->swaps[i].admit, x->swaps[i].evict)) return -1;
    tier_decay(x->heat, (size_t)x->n_layers * x->n_experts);
    x->stats.repinned += n;
    return n;
}

/* Gives memory back under pressure, between forward passes: each layer
 * frees a quarter of its enabled LRU slots (at least one, keeping one),
 * least recently used first, and its capacity drops so the cache cannot
 * grow back. Returns the slots freed. */
static inline int xs_shrink(xs_store *x) {
    int got = 0;
    for (int k = 0; x->lru && k < x->n_layers; k++) {
        int want = x->lru[k].cap / 4 > 1 ? x->lru[k].cap / 4 : 1;
        int n = tier_lru_shrink(&x->lru[k], want, 1, x->freed);
        for (int i = 0; i < n; i++) {
            xs_slot *sl = xs_slot_at(x, k, x->freed[i]);
            if (sl->unused) x->stats.pred_wasted_bytes += x->lay[k].bytes, sl->unused = 0;
            compat_aligned_free(sl->mem);
            sl->mem = NULL;
        }
        got += n;
    }
    return got;
}

/* ---- statistics ---- */

static inline void xs_stats_get(const xs_store *x, xs_stats *out) { *out = x->stats; }

/* Starts a run's counters afresh (after pinning); routing counts stay. */
static inline void xs_stats_reset(xs_store *x) { memset(&x->stats, 0, sizeof x->stats); }

/* ---- teardown ---- */

/* Waits for every read still in flight (before freeing their memory). */
static inline void xs_quiesce(xs_store *x) {
    for (int k = 0; x->slot && k < x->n_layers; k++)
        for (int s = 0; s < x->max_slots; s++) {
            xs_slot *sl = xs_slot_at(x, k, s);
            for (int i = 0; sl->loading && i < sl->nreq; i++) io_wait(x->io, &sl->req[i]);
        }
}

static inline void xs_free(xs_store *x) {
    if (x->io) xs_quiesce(x);
    if (x->lru)
        for (int k = 0; k < x->n_layers; k++) tier_lru_free(&x->lru[k]);
    if (x->slot)
        for (size_t i = 0; i < (size_t)x->n_layers * x->max_slots; i++) compat_aligned_free(x->slot[i].mem);
    if (x->arena)
        for (int k = 0; k < x->n_layers; k++) compat_aligned_free(x->arena[k]);
    if (x->staging)
        for (int t = 0; t < x->n_staging; t++) compat_aligned_free(x->staging[t]);
    if (x->fbuf)
        for (int t = 0; t < x->n_staging; t++) compat_aligned_free(x->fbuf[t]);
    void *p[] = {x->lru, x->slot, x->freed, x->arena, x->staging, x->fbuf, x->n_pinned, x->lay, x->loc, x->pin, x->pinned, x->pin_view,
                 x->predicted, x->count, x->heat, x->last, x->swaps, x->jobs, x->pending, x->pending_done, x->vram, x->vowner, x->vbusy};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    memset(x, 0, sizeof *x);
}

#endif
