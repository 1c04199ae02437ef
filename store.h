/* store.h — routed experts in memory. Knows where each expert's three
 * matrices (and their .qs scales) lie in the shards, how an expert sits in
 * memory, and which experts are resident: a pinned set per layer (one arena
 * each) and a per-layer LRU of slots (policy from tier.h). Reads a miss with
 * one pread when the three weights are adjacent in their shard, converting
 * float sources to the in-memory format. Counts hits (pin / LRU), misses,
 * bytes read and routing counts. Never computes. Prefix: xs_.
 *
 * "Layer" here means MoE layer k (0 .. n_layers-1), not the model layer. */
#ifndef COLI_STORE_H
#define COLI_STORE_H

#include <stdarg.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "compat.h"
#include "quant.h"
#include "st.h"
#include "tier.h"

enum { XS_GATE, XS_UP, XS_DOWN };

/* Where one expert lives on disk. */
typedef struct {
    const st_tensor *w[3];   /* gate, up, down weights */
    uint32_t rel[3];         /* adjacent weights: each one's offset within the span */
    uint8_t adjacent;        /* all three back to back in one file, same dtype */
    uint64_t span_off, span_len;
} xs_loc;

/* How every expert of one layer sits in memory: gate | up | down weights
 * (at rel offsets for raw span copies, at fixed offsets after conversion). */
typedef struct {
    int64_t O[3], I[3];
    size_t w_bytes[3];       /* per matrix, in memory */
    size_t fixed[3];         /* offsets used when converting */
    size_t bytes;            /* one expert in memory */
    int raw;                 /* memory format == disk format: one pread, no conversion */
} xs_layout;

typedef struct {
    int n_layers, n_experts;
    const st_index *st;
    xs_layout *lay;          /* [n_layers] */
    xs_loc *loc;             /* [n_layers][n_experts] */
    tier_lru *lru;           /* [n_layers] */
    uint8_t **slot;          /* [n_layers][max_slots] memory, allocated on first use */
    int max_slots;
    int *pin;                /* [n_layers][n_experts] index in the layer's arena, or -1 */
    uint8_t **arena;         /* [n_layers] pinned experts, contiguous */
    int *n_pinned;           /* [n_layers] */
    uint64_t *count;         /* [n_layers][n_experts] routing counts of this run */
    uint64_t *heat, *last;   /* [n_layers][n_experts] session heat and last use, for re-pinning */
    uint64_t tick;
    uint8_t **staging;       /* per thread: raw bytes of one expert span */
    size_t staging_len;
    int n_staging;
    uint64_t hit_pin, hit_lru, miss, bytes_read;
    double read_s;
    char err[512];
} xs_store;

static inline int xs_fail(xs_store *x, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, sizeof x->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sets up the store for n_layers MoE layers of n_experts experts; the
 * caller then fills lay[] and loc[] and calls xs_finish_layout. */
static inline int xs_init(xs_store *x, const st_index *st, int n_layers, int n_experts, int threads) {
    memset(x, 0, sizeof *x);
    x->st = st;
    x->n_layers = n_layers;
    x->n_experts = n_experts;
    size_t ne = (size_t)n_layers * n_experts;
    x->lay = (xs_layout *)calloc((size_t)(n_layers ? n_layers : 1), sizeof *x->lay);
    x->loc = (xs_loc *)calloc(ne ? ne : 1, sizeof *x->loc);
    x->pin = (int *)malloc((ne ? ne : 1) * sizeof(int));
    x->count = (uint64_t *)calloc(ne ? ne : 1, sizeof(uint64_t));
    x->heat = (uint64_t *)calloc(ne ? ne : 1, sizeof(uint64_t));
    x->last = (uint64_t *)calloc(ne ? ne : 1, sizeof(uint64_t));
    x->arena = (uint8_t **)calloc((size_t)(n_layers ? n_layers : 1), sizeof(uint8_t *));
    x->n_pinned = (int *)calloc((size_t)(n_layers ? n_layers : 1), sizeof(int));
    x->n_staging = threads < 1 ? 1 : threads;
    x->staging = (uint8_t **)calloc((size_t)x->n_staging, sizeof(uint8_t *));
    if (!x->lay || !x->loc || !x->pin || !x->count || !x->heat || !x->last || !x->arena || !x->n_pinned || !x->staging)
        return xs_fail(x, "out of memory for the expert store");
    for (size_t i = 0; i < ne; i++) x->pin[i] = -1;
    return 0;
}

/* Records where expert e of layer k lives (weights gate, up, down) and
 * checks the three against the layer's layout. Returns 0 or -1. */
static inline int xs_locate(xs_store *x, int k, int e, const st_tensor *const w[3]) {
    xs_loc *l = &x->loc[(size_t)k * x->n_experts + e];
    const st_tensor *s[3] = {w[0], w[1], w[2]};
    for (int p = 0; p < 3; p++) l->w[p] = w[p];
    for (int i = 0; i < 3; i++) /* order by offset */
        for (int j = i + 1; j < 3; j++)
            if (s[j]->off < s[i]->off) { const st_tensor *t = s[i]; s[i] = s[j]; s[j] = t; }
    l->adjacent = s[0]->file == s[1]->file && s[1]->file == s[2]->file && s[0]->dtype == s[1]->dtype &&
                  s[1]->dtype == s[2]->dtype && s[0]->off + s[0]->nbytes == s[1]->off && s[1]->off + s[1]->nbytes == s[2]->off;
    l->span_off = s[0]->off;
    l->span_len = s[2]->off + s[2]->nbytes - s[0]->off;
    for (int p = 0; p < 3; p++) l->rel[p] = (uint32_t)(w[p]->off - l->span_off);
    return 0;
}

/* Bytes one expert of layer k occupies in memory. */
static inline size_t xs_expert_bytes(const xs_store *x, int k) { return x->lay[k].bytes; }

/* The largest expert of any layer (what a budget plans per slot). */
static inline size_t xs_max_expert_bytes(const xs_store *x) {
    size_t b = 0;
    for (int k = 0; k < x->n_layers; k++) b = x->lay[k].bytes > b ? x->lay[k].bytes : b;
    return b;
}

/* Allocates the LRU bookkeeping (slots per layer) and the per-thread
 * staging buffers (large enough for any span). */
static inline int xs_alloc_cache(xs_store *x, int slots) {
    x->max_slots = slots;
    x->lru = (tier_lru *)calloc((size_t)(x->n_layers ? x->n_layers : 1), sizeof(tier_lru));
    x->slot = (uint8_t **)calloc((size_t)x->n_layers * (size_t)slots + 1, sizeof(uint8_t *));
    if (!x->lru || !x->slot) return xs_fail(x, "out of memory for the expert cache");
    for (int k = 0; k < x->n_layers; k++)
        if (tier_lru_init(&x->lru[k], x->n_experts, slots)) return xs_fail(x, "out of memory for the expert cache");
    size_t span = 0;
    for (size_t i = 0; i < (size_t)x->n_layers * x->n_experts; i++) {
        const xs_loc *l = &x->loc[i];
        size_t need = l->adjacent ? l->span_len : 0;
        span = need > span ? need : span;
    }
    x->staging_len = span;
    for (int t = 0; t < x->n_staging && span; t++)
        if (!(x->staging[t] = (uint8_t *)compat_aligned_alloc(4096, span))) return xs_fail(x, "out of memory for expert staging");
    return 0;
}

/* Views of expert e (layer k) whose bytes are at mem. */
static inline void xs_view(const xs_store *x, int k, int e, const uint8_t *mem, qt_tensor out[3]) {
    const xs_layout *L = &x->lay[k];
    const xs_loc *l = &x->loc[(size_t)k * x->n_experts + e];
    for (int p = 0; p < 3; p++) {
        size_t off = L->raw && l->adjacent ? l->rel[p] : L->fixed[p];
        out[p] = (qt_tensor){QT_F32, L->O[p], L->I[p], mem + off, NULL};
    }
}

static inline const char *xs_path(const xs_store *x, const st_tensor *t) { return x->st->files[t->file].path; }

/* Reads expert e of layer k into mem (xs_expert_bytes bytes), using
 * staging buffer `thread`. Returns 0, or -1 with x->err naming the file and
 * tensor (a truncated shard, an I/O error). Thread-safe across distinct
 * staging buffers, except for the shared counters (callers add them). */
static inline int xs_read(xs_store *x, int k, int e, uint8_t *mem, int thread, char *err, size_t errlen, uint64_t *bytes) {
    const xs_layout *L = &x->lay[k];
    const xs_loc *l = &x->loc[(size_t)k * x->n_experts + e];
    const st_index *st = x->st;
    *bytes = 0;
    if (l->adjacent) {
        uint8_t *dst = L->raw ? mem : x->staging[thread];
        if (compat_pread_full(st->files[l->w[0]->file].fd, dst, (size_t)l->span_len, l->span_off)) {
            snprintf(err, errlen, "%s: expert tensors from '%s': read failed: %s", xs_path(x, l->w[0]), l->w[0]->name,
                     errno == EIO ? "file truncated or I/O error" : strerror(errno));
            return -1;
        }
        if (!L->raw)
            for (int p = 0; p < 3; p++)
                st_convert_f32_(l->w[p]->dtype, dst + l->rel[p], (float *)(mem + L->fixed[p]), (size_t)l->w[p]->numel);
        *bytes = l->span_len;
        return 0;
    }
    for (int p = 0; p < 3; p++) {
        if (st_read_f32(st, l->w[p], (float *)(mem + L->fixed[p]), err, errlen)) return -1;
        *bytes += l->w[p]->nbytes;
    }
    return 0;
}

/* Memory of expert e of layer k if resident (pinned or cached; the LRU
 * stamp refreshed), else NULL. Counts the hit. */
static inline const uint8_t *xs_lookup(xs_store *x, int k, int e) {
    size_t i = (size_t)k * x->n_experts + e;
    x->tick++;
    if (x->pin[i] >= 0) {
        x->hit_pin++;
        return x->arena[k] + (size_t)x->pin[i] * x->lay[k].bytes;
    }
    int s = tier_lru_lookup(&x->lru[k], e, x->tick);
    if (s < 0) return NULL;
    x->hit_lru++;
    return x->slot[(size_t)k * x->max_slots + s];
}

/* Reads a missing expert into the LRU victim slot; returns its memory, or
 * NULL with x->err set (I/O error, out of memory, or every slot busy). */
static inline const uint8_t *xs_fetch(xs_store *x, int k, int e) {
    tier_lru *lru = &x->lru[k];
    int s = tier_lru_victim(lru);
    if (s < 0) { xs_fail(x, "expert cache of MoE layer %d: every slot is busy", k); return NULL; }
    uint8_t **mem = &x->slot[(size_t)k * x->max_slots + s];
    if (!*mem && !(*mem = (uint8_t *)compat_aligned_alloc(4096, x->lay[k].bytes))) {
        xs_fail(x, "out of memory for an expert slot (%zu bytes)", x->lay[k].bytes);
        return NULL;
    }
    tier_lru_evict(lru, s);
    double t0 = compat_now();
    uint64_t b;
    if (xs_read(x, k, e, *mem, 0, x->err, sizeof x->err, &b)) return NULL;
    x->read_s += compat_now() - t0;
    x->bytes_read += b;
    x->miss++;
    tier_lru_install(lru, s, e, x->tick);
    return *mem;
}

/* Notes that the router chose expert e of layer k (usage history, heat). */
static inline void xs_note_use(xs_store *x, int k, int e) {
    size_t i = (size_t)k * x->n_experts + e;
    x->count[i]++;
    x->heat[i]++;
    x->last[i] = x->tick;
}

/* Loads the experts flagged in pinned[L][E] into one arena per layer, in
 * parallel (OpenMP, one staging buffer per thread). progress(done, total)
 * is called from one thread now and then. Returns 0 or -1 with x->err. */
static inline int xs_load_pins(xs_store *x, const uint8_t *pinned, void (*progress)(void *, uint64_t, uint64_t), void *ud) {
    size_t ne = (size_t)x->n_layers * x->n_experts;
    int *list = (int *)malloc((ne ? ne : 1) * sizeof(int)), n = 0;
    if (!list) return xs_fail(x, "out of memory");
    uint64_t total = 0;
    for (int k = 0; k < x->n_layers; k++) {
        int c = 0;
        for (int e = 0; e < x->n_experts; e++)
            if (pinned[(size_t)k * x->n_experts + e]) x->pin[(size_t)k * x->n_experts + e] = c++, list[n++] = k * x->n_experts + e;
        x->n_pinned[k] = c;
        total += (uint64_t)c * x->lay[k].bytes;
        if (c && !(x->arena[k] = (uint8_t *)compat_aligned_alloc(4096, (size_t)c * x->lay[k].bytes))) {
            free(list);
            return xs_fail(x, "out of memory for %d pinned experts of MoE layer %d", c, k);
        }
    }
    int failed = 0;
    uint64_t done = 0, bytes = 0;
    double t0 = compat_now();
#pragma omp parallel for schedule(dynamic) num_threads(x->n_staging)
    for (int i = 0; i < n; i++) {
        if (failed) continue;
        int k = list[i] / x->n_experts, e = list[i] % x->n_experts, th = 0;
#ifdef _OPENMP
        th = omp_get_thread_num();
#endif
        char err[512];
        uint64_t b;
        uint8_t *mem = x->arena[k] + (size_t)x->pin[list[i]] * x->lay[k].bytes;
        if (xs_read(x, k, e, mem, th, err, sizeof err, &b)) {
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
    x->bytes_read += bytes;
    x->read_s += compat_now() - t0;
    if (progress && !failed) progress(ud, total, total);
    return failed ? -1 : 0;
}

/* Re-pin at a safe point: expert `admit` of layer k takes the arena place
 * of pinned expert `evict`. Returns 0 or -1 (x->err); on failure the
 * evicted expert is gone from the pinned set, never half-loaded. */
static inline int xs_repin(xs_store *x, int k, int admit, int evict) {
    size_t ia = (size_t)k * x->n_experts + admit, iv = (size_t)k * x->n_experts + evict;
    int place = x->pin[iv];
    x->pin[iv] = -1;
    uint8_t *mem = x->arena[k] + (size_t)place * x->lay[k].bytes;
    uint64_t b;
    double t0 = compat_now();
    if (xs_read(x, k, admit, mem, 0, x->err, sizeof x->err, &b)) return -1;
    x->read_s += compat_now() - t0;
    x->bytes_read += b;
    int s = x->lru[k].where[admit]; /* a cached copy is no longer needed */
    if (s >= 0) tier_lru_evict(&x->lru[k], s);
    x->pin[ia] = place;
    return 0;
}

/* Gives memory back: frees the slots tier_lru_shrink disabled. */
static inline void xs_release_slots(xs_store *x, int k, const int *slots, int n) {
    for (int i = 0; i < n; i++) {
        uint8_t **mem = &x->slot[(size_t)k * x->max_slots + slots[i]];
        free(*mem);
        *mem = NULL;
    }
}

static inline void xs_free(xs_store *x) {
    if (x->lru)
        for (int k = 0; k < x->n_layers; k++) tier_lru_free(&x->lru[k]);
    if (x->slot)
        for (size_t i = 0; i < (size_t)x->n_layers * x->max_slots; i++) free(x->slot[i]);
    if (x->arena)
        for (int k = 0; k < x->n_layers; k++) free(x->arena[k]);
    if (x->staging)
        for (int t = 0; t < x->n_staging; t++) free(x->staging[t]);
    free(x->lru);
    free(x->slot);
    free(x->arena);
    free(x->staging);
    free(x->n_pinned);
    free(x->lay);
    free(x->loc);
    free(x->pin);
    free(x->count);
    free(x->heat);
    free(x->last);
    memset(x, 0, sizeof *x);
}

#endif
