/* route_trace.h — routing traces: the experts each MoE layer chose for each
 * row a forward computed, and the ones the router lookahead predicted for it,
 * recorded from one model (ROUTE_TRACE) and replayed into another model's
 * expert reads (ROUTE_REPLAY). Replay is a bench instrument: it drives a
 * synthetic model's reads with a trained model's routing, which replaces the
 * router's choices and so changes what is computed. Prefix: rt_. Must not:
 * read the environment, or decide anything about compute (the forward asks
 * it for ids).
 *
 * File, little-endian, written atomically:
 *   "COLIRTR1"                              magic, format 1
 *   u32 layers, topk, pred_k, experts       MoE layers recorded, ids per row
 *                                           chosen and predicted (0: none)
 *   u64 rows
 *   rows × layers × (topk + pred_k) u16     per row and MoE layer: the chosen
 *                                           ids, then the predicted ones
 *                                           (RT_NONE where nothing predicted)
 * Rows are in the order forwards computed them. */
#ifndef COLI_ROUTE_TRACE_H
#define COLI_ROUTE_TRACE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"

#define RT_MAGIC "COLIRTR1"
#define RT_HEADER 32
#define RT_NONE 0xFFFFu
#define RT_MAX_FILE ((size_t)1 << 30)
#define RT_MAX_K 1024 /* ids per row and layer, chosen or predicted (PILOT_K's bound) */

typedef struct {
    uint32_t layers, topk, pred_k, experts;
    uint64_t rows, cap;  /* rows held; rows allocated (recording) */
    int full;            /* recording: the file limit is reached, later rows are not kept */
    uint16_t *id;        /* [rows][layers][topk + pred_k] */
    uint16_t *rank;      /* replay: [layers][experts] trace id → its rank of use in its layer (0 = most used) */
    uint64_t pos;        /* replay: the trace row the next forward row takes */
    uint64_t taken;      /* replay: rows replayed so far */
} rt_trace;

static inline size_t rt_stride(const rt_trace *t) { return (size_t)t->layers * (t->topk + t->pred_k); }

/* The ids of row r, MoE layer j: topk chosen, then pred_k predicted. */
static inline uint16_t *rt_at(const rt_trace *t, uint64_t r, uint32_t j) {
    return t->id + r * rt_stride(t) + (size_t)j * (t->topk + t->pred_k);
}

static inline void rt_free(rt_trace *t) {
    free(t->id);
    free(t->rank);
    memset(t, 0, sizeof *t);
}

/* An empty trace for recording a model with `layers` MoE layers, topk
 * chosen and pred_k predicted experts per row, of `experts`. 0, or -1
 * when the shape cannot be stored in the format. */
static inline int rt_record_init(rt_trace *t, int layers, int topk, int pred_k, int experts) {
    memset(t, 0, sizeof *t);
    if (layers < 1 || layers > 4096 || topk < 1 || topk > experts || topk > RT_MAX_K || pred_k < 0 || pred_k > experts || pred_k > RT_MAX_K ||
        experts < 1 || experts >= (int)RT_NONE)
        return -1;
    t->layers = (uint32_t)layers, t->topk = (uint32_t)topk, t->pred_k = (uint32_t)pred_k, t->experts = (uint32_t)experts;
    return 0;
}

/* Room for n more rows, predictions RT_NONE until written. 0, or -1
 * (out of memory, or past the format's file size: rt_load reads at most
 * RT_MAX_FILE bytes, header included). */
static inline int rt_reserve(rt_trace *t, int n) {
    uint64_t need = t->rows + (uint64_t)n;
    if (RT_HEADER + need * rt_stride(t) * 2 > RT_MAX_FILE) return -1;
    if (need > t->cap) {
        uint64_t cap = t->cap ? t->cap : 1024;
        while (cap < need) cap *= 2;
        uint16_t *p = (uint16_t *)realloc(t->id, (size_t)cap * rt_stride(t) * 2);
        if (!p) return -1;
        t->id = p, t->cap = cap;
    }
    for (uint64_t i = t->rows * rt_stride(t); i < need * rt_stride(t); i++) t->id[i] = (uint16_t)RT_NONE;
    return 0;
}

static inline void rt_put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}

static inline uint64_t rt_get(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The file's bytes for the recorded rows (RT_HEADER + rows × stride × 2),
 * malloc'ed; NULL when out of memory. */
static inline unsigned char *rt_format(const rt_trace *t, size_t *len) {
    size_t body = (size_t)t->rows * rt_stride(t) * 2;
    unsigned char *buf = (unsigned char *)malloc(RT_HEADER + body);
    if (!buf) return NULL;
    memcpy(buf, RT_MAGIC, 8);
    rt_put_u32(buf + 8, t->layers), rt_put_u32(buf + 12, t->topk), rt_put_u32(buf + 16, t->pred_k), rt_put_u32(buf + 20, t->experts);
    rt_put_u32(buf + 24, (uint32_t)t->rows), rt_put_u32(buf + 28, (uint32_t)(t->rows >> 32));
    for (size_t i = 0; i < body / 2; i++) buf[RT_HEADER + 2 * i] = (unsigned char)t->id[i], buf[RT_HEADER + 2 * i + 1] = (unsigned char)(t->id[i] >> 8);
    *len = RT_HEADER + body;
    return buf;
}

/* Writes the recorded rows to path (temporary name, then rename). 0, or -1
 * with err. */
static inline int rt_save(const rt_trace *t, const char *path, char *err, size_t errlen) {
    size_t len;
    unsigned char *buf = rt_format(t, &len);
    if (!buf) return snprintf(err, errlen, "%s: out of memory for the routing trace", path), -1;
    compat_sweep_temps(path, 1); /* a killed writer's temporary (no lock: a live one's stays) */
    int rc = compat_write_atomic(path, buf, len);
    int e = errno;
    free(buf);
    if (rc) return snprintf(err, errlen, "%s: cannot write the routing trace: %s", path, e == COMPAT_ENOTREG ? "not a regular file" : strerror(e)), -1;
    return 0;
}

/* Parses a trace's bytes b[0..len) and checks them whole: the magic, a
 * shape the format allows, the size the header implies, every chosen id an
 * expert and distinct in its row and layer, every predicted id an expert
 * or RT_NONE. 0, or -1 with err (prefixed with `name`) saying what is
 * wrong; t is then empty. */
static inline int rt_parse(rt_trace *t, const unsigned char *b, size_t len, const char *name, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    const char *why = NULL;
    if (len < RT_HEADER || memcmp(b, RT_MAGIC, 8)) why = "not a routing trace (no COLIRTR1 header)";
    else {
        t->layers = (uint32_t)rt_get(b + 8, 4), t->topk = (uint32_t)rt_get(b + 12, 4), t->pred_k = (uint32_t)rt_get(b + 16, 4);
        t->experts = (uint32_t)rt_get(b + 20, 4), t->rows = rt_get(b + 24, 8);
        if (t->layers < 1 || t->layers > 4096) why = "layers outside 1..4096";
        else if (t->experts < 1 || t->experts >= RT_NONE) why = "experts outside 1..65534";
        else if (t->topk < 1 || t->topk > t->experts || t->topk > RT_MAX_K) why = "topk outside 1..min(experts, 1024)";
        else if (t->pred_k > t->experts || t->pred_k > RT_MAX_K) why = "pred_k larger than experts or 1024";
        else if (t->rows < 1 || t->rows > (RT_MAX_FILE - RT_HEADER) / (rt_stride(t) * 2)) why = "rows outside what the file can hold";
        else if (len != RT_HEADER + (size_t)t->rows * rt_stride(t) * 2) why = "its size is not what the header says (truncated or padded)";
    }
    if (why) {
        snprintf(err, errlen, "%s: %s", name, why);
        memset(t, 0, sizeof *t);
        return -1;
    }
    size_t n = (size_t)t->rows * rt_stride(t);
    uint64_t *seen = (uint64_t *)calloc(t->experts, sizeof *seen), stamp = 0; /* seen[e] == stamp: e chosen in this row and layer */
    if (!(t->id = (uint16_t *)malloc(n * 2)) || !seen) {
        free(seen);
        rt_free(t);
        return snprintf(err, errlen, "%s: out of memory", name), -1;
    }
    for (size_t i = 0; i < n; i++) t->id[i] = (uint16_t)rt_get(b + RT_HEADER + 2 * i, 2);
    t->cap = t->rows;
    for (uint64_t r = 0; r < t->rows && !why; r++)
        for (uint32_t j = 0; j < t->layers && !why; j++) {
            const uint16_t *p = rt_at(t, r, j);
            stamp++;
            for (uint32_t k = 0; k < t->topk + t->pred_k && !why; k++) {
                if (p[k] >= t->experts && (k < t->topk || p[k] != RT_NONE))
                    why = k < t->topk ? "a chosen expert id is not below the trace's expert count" : "a predicted expert id is not below the trace's expert count";
                else if (k < t->topk && seen[p[k]] == stamp) why = "an expert chosen twice";
                else if (k < t->topk) seen[p[k]] = stamp;
            }
            if (why) snprintf(err, errlen, "%s: row %llu, MoE layer %u: %s", name, (unsigned long long)r, j, why);
        }
    free(seen);
    if (why) {
        rt_free(t);
        return -1;
    }
    return 0;
}

/* Reads the trace at path (at most RT_MAX_FILE bytes) and parses it
 * (rt_parse). 0, or -1 with err naming the file. */
static inline int rt_load(rt_trace *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    size_t len;
    unsigned char *b = (unsigned char *)compat_read_file(path, RT_MAX_FILE, &len);
    if (!b) return snprintf(err, errlen, "%s: cannot read the routing trace: %s", path, errno == EFBIG ? "larger than 1 GiB" : strerror(errno)), -1;
    int rc = rt_parse(t, b, len, path, err, errlen);
    free(b);
    return rc;
}

static int rt_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Replay into a model routing topk of `experts`: each trace layer's ids are
 * ranked by how often they were chosen (ties: the lower id first) and a
 * trace id becomes the model expert of its rank, so the most used experts
 * of the trace are experts 0, 1, ... of every model layer that replays it.
 * pred_k: the predictions the model wants per row (0: none). 0, or -1 with
 * err. */
static inline int rt_replay_init(rt_trace *t, int topk, int experts, int pred_k, char *err, size_t errlen) {
    if ((uint32_t)topk != t->topk)
        return snprintf(err, errlen, "the routing trace chose %u experts per row; this model routes %d", t->topk, topk), -1;
    if ((uint32_t)experts < t->experts)
        return snprintf(err, errlen, "the routing trace routes among %u experts; this model has %d", t->experts, experts), -1;
    if ((uint32_t)pred_k > t->pred_k)
        return snprintf(err, errlen, "PILOT wants %d predictions per row; the routing trace recorded %u (record it with PILOT=1 PILOT_K=%d)", pred_k,
                        t->pred_k, pred_k), -1;
    uint64_t *key = (uint64_t *)malloc(t->experts * sizeof *key);
    if (!(t->rank = (uint16_t *)malloc((size_t)t->layers * t->experts * 2)) || !key) {
        free(key);
        return snprintf(err, errlen, "out of memory for the routing trace's ranks"), -1;
    }
    for (uint32_t j = 0; j < t->layers; j++) {
        uint64_t *cnt = key; /* counts first, then (UINT32_MAX - count) << 16 | id: ascending keys are the ranks */
        memset(cnt, 0, t->experts * sizeof *cnt);
        for (uint64_t r = 0; r < t->rows; r++)
            for (uint32_t k = 0; k < t->topk; k++) cnt[rt_at(t, r, j)[k]]++;
        for (uint32_t e = 0; e < t->experts; e++) key[e] = (uint64_t)(UINT32_MAX - (uint32_t)cnt[e]) << 16 | e;
        qsort(key, t->experts, sizeof *key, rt_cmp_u64);
        for (uint32_t r = 0; r < t->experts; r++) t->rank[(size_t)j * t->experts + (key[r] & 0xFFFF)] = (uint16_t)r;
    }
    free(key);
    t->pos = t->taken = 0;
    return 0;
}

/* Replay: the trace layer model MoE layer mk replays. The first MoE layer
 * replays the first (its lookahead starts from a dense layer's residual);
 * the others cycle over the rest, so a deep model's middle layers are the
 * trace's middle layers. */
static inline uint32_t rt_layer(const rt_trace *t, int mk) {
    return mk == 0 || t->layers == 1 ? 0 : 1 + (uint32_t)(mk - 1) % (t->layers - 1);
}

/* Replay: the model expert for trace id `id` of model MoE layer mk; -1
 * for RT_NONE. */
static inline int rt_map(const rt_trace *t, int mk, uint16_t id) {
    return id == RT_NONE ? -1 : t->rank[(size_t)rt_layer(t, mk) * t->experts + id];
}

/* Replay: the ids of forward row s (of the forward that starts at t->pos)
 * for model MoE layer mk. */
static inline const uint16_t *rt_replay_row(const rt_trace *t, int s, int mk) {
    return rt_at(t, (t->pos + (uint64_t)s) % t->rows, rt_layer(t, mk));
}

/* After a forward of S rows: recording keeps them, replay moves on. */
static inline void rt_commit(rt_trace *t, int replay, int S) {
    if (replay) t->pos = (t->pos + (uint64_t)S) % t->rows, t->taken += (uint64_t)S;
    else t->rows += (uint64_t)S;
}

#endif
