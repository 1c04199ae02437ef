/* kvq.h -- rows of the KV cache in fewer bits (KV_BITS for the MLA
 * latents and rope keys, KV_INDEX_BITS for the DSA indexer's keys).
 *
 * A row of n floats is cut into groups of KVQ_G = 32 (the last one may be
 * shorter) with one f32 scale each, symmetric around 0:
 *   32 bits  the floats themselves, n·4 bytes: what f32 attention reads
 *   8 bits   q = rne(x·127/absmax) in [-127, 127], a byte each
 *   4 bits   q = rne(x·7/absmax) in [-7, 7], stored q + 8: byte j of a
 *            group holds element j (low nibble) and element j + 16
 * A quantized row is its scales f32[ng] and then ng groups of 32 (8 bits)
 * or 16 (4 bits) bytes, so every row's size is a multiple of 4 and a
 * group's values start at a fixed offset. A group whose absmax is 0 (or
 * below 1e-30) stores scale 0; one that holds a NaN or an infinity stores
 * a NaN scale, so the damage shows in every score as it would in f32.
 * For GLM-5's 512 latents and 64 rope dimensions a position takes 648
 * bytes in 8 bits and 360 in 4 against 2,304 in f32.
 *
 * kvq_dot and kvq_axpy read the rows directly (no dequantized copy) in one
 * order on every CPU: 16 lanes, lane j of a group adding a[j]·q[j] +
 * a[j+16]·q[j+16] (mul, mul, add), then acc[j] + that·scale; the lanes
 * pairwise at the end as mm_dot_f32 does. Plain C that the compiler turns
 * into vector code without reordering. Plain values: no I/O, no state. */
#ifndef COLI_KVQ_H
#define COLI_KVQ_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define KVQ_G 32

/* Groups of a row of n values. */
static inline int kvq_groups(int n) { return (n + KVQ_G - 1) / KVQ_G; }

/* Bytes of a row of n values in `bits` (32, 8 or 4). */
static inline size_t kvq_row_bytes(int bits, int n) {
    size_t ng = (size_t)kvq_groups(n);
    return bits == 32 ? (size_t)n * 4 : bits == 8 ? ng * (4 + KVQ_G) : ng * (4 + KVQ_G / 2);
}

/* The scale of a group of len values and the factor that maps them to
 * [-qmax, qmax] (0 when the scale is 0 or NaN: every q is then 0). */
static inline float kvq_scale_(const float *x, int len, int qmax, float *inv) {
    float mx = 0;
    int nan = 0;
    for (int j = 0; j < len; j++) {
        float v = fabsf(x[j]);
        nan |= v != v;
        if (v > mx) mx = v;
    }
    if (nan || mx > 3.4028235e38f) return *inv = 0, NAN;
    if (mx < 1e-30f) return *inv = 0, 0.0f;
    *inv = (float)qmax / mx;
    return mx / (float)qmax;
}

/* Stores x[n] as a row of `bits` at row (kvq_row_bytes of it). */
static inline void kvq_store(int bits, uint8_t *row, const float *x, int n) {
    if (bits == 32) {
        memcpy(row, x, (size_t)n * 4);
        return;
    }
    int ng = kvq_groups(n);
    float *scale = (float *)(void *)row;
    uint8_t *q = row + (size_t)ng * 4;
    for (int g = 0; g < ng; g++) {
        const float *xg = x + (size_t)g * KVQ_G;
        int len = n - g * KVQ_G < KVQ_G ? n - g * KVQ_G : KVQ_G;
        float inv;
        scale[g] = kvq_scale_(xg, len, bits == 8 ? 127 : 7, &inv);
        if (bits == 8) {
            int8_t *qg = (int8_t *)(q + (size_t)g * KVQ_G);
            memset(qg, 0, KVQ_G);
            if (inv != 0)
                for (int j = 0; j < len; j++) qg[j] = (int8_t)lrintf(xg[j] * inv);
        } else {
            uint8_t *qg = q + (size_t)g * (KVQ_G / 2);
            memset(qg, 0x88, KVQ_G / 2);
            for (int j = 0; j < KVQ_G / 2 && inv != 0; j++) {
                int lo = j < len ? (int)lrintf(xg[j] * inv) : 0, hi = j + KVQ_G / 2 < len ? (int)lrintf(xg[j + KVQ_G / 2] * inv) : 0;
                qg[j] = (uint8_t)((lo + 8) | (hi + 8) << 4);
            }
        }
    }
}

/* x[n] = the values of a row of `bits` (tests, the reconstructed path's
 * tiles). */
static inline void kvq_load(int bits, const uint8_t *row, float *x, int n) {
    if (bits == 32) {
        memcpy(x, row, (size_t)n * 4);
        return;
    }
    int ng = kvq_groups(n);
    const float *scale = (const float *)(const void *)row;
    const uint8_t *q = row + (size_t)ng * 4;
    for (int i = 0; i < n; i++) {
        int g = i / KVQ_G, j = i % KVQ_G, v;
        if (bits == 8) v = ((const int8_t *)q)[(size_t)g * KVQ_G + j];
        else {
            uint8_t b = q[(size_t)g * (KVQ_G / 2) + j % (KVQ_G / 2)];
            v = (j < KVQ_G / 2 ? b & 15 : b >> 4) - 8;
        }
        x[i] = scale[g] * (float)v;
    }
}

/* The 16 lanes' sum, pairwise (j + 8, j + 4, j + 2, j + 1). */
static inline float kvq_lanes_(float *s) {
    for (int w = 8; w > 0; w >>= 1)
        for (int j = 0; j < w; j++) s[j] = s[j] + s[j + w];
    return s[0];
}

/* Σ a[i]·x[i] over a row x of 8 bits (the order in the header comment). */
static inline float kvq_dot8(const float *a, const uint8_t *row, int n) {
    int ng = kvq_groups(n), full = n / KVQ_G;
    const float *scale = (const float *)(const void *)row;
    const int8_t *q = (const int8_t *)(row + (size_t)ng * 4);
    float acc[16] = {0};
    for (int g = 0; g < full; g++) {
        const float *ag = a + (size_t)g * KVQ_G;
        const int8_t *qg = q + (size_t)g * KVQ_G;
        float s = scale[g], v[KVQ_G];
        for (int j = 0; j < KVQ_G; j++) v[j] = (float)qg[j]; /* converted apart: the compiler vectorizes both loops cleanly */
        for (int j = 0; j < 16; j++) acc[j] = acc[j] + (ag[j] * v[j] + ag[j + 16] * v[j + 16]) * s;
    }
    if (full < ng) { /* the short last group: its missing values count as 0 */
        int len = n - full * KVQ_G;
        const float *ag = a + (size_t)full * KVQ_G;
        const int8_t *qg = q + (size_t)full * KVQ_G;
        for (int j = 0; j < 16; j++) {
            float p0 = j < len ? ag[j] * (float)qg[j] : 0.0f, p1 = j + 16 < len ? ag[j + 16] * (float)qg[j + 16] : 0.0f;
            acc[j] = acc[j] + (p0 + p1) * scale[full];
        }
    }
    return kvq_lanes_(acc);
}

/* Σ a[i]·x[i] over a row x of 4 bits (the order in the header comment). */
static inline float kvq_dot4(const float *a, const uint8_t *row, int n) {
    int ng = kvq_groups(n), full = n / KVQ_G;
    const float *scale = (const float *)(const void *)row;
    const uint8_t *q = row + (size_t)ng * 4;
    float acc[16] = {0};
    for (int g = 0; g < full; g++) {
        const float *ag = a + (size_t)g * KVQ_G;
        const uint8_t *qg = q + (size_t)g * (KVQ_G / 2);
        float s = scale[g];
        for (int j = 0; j < 16; j++)
            acc[j] = acc[j] + (ag[j] * (float)((qg[j] & 15) - 8) + ag[j + 16] * (float)((qg[j] >> 4) - 8)) * s;
    }
    if (full < ng) {
        int len = n - full * KVQ_G;
        const float *ag = a + (size_t)full * KVQ_G;
        const uint8_t *qg = q + (size_t)full * (KVQ_G / 2);
        for (int j = 0; j < 16; j++) {
            float p0 = j < len ? ag[j] * (float)((qg[j] & 15) - 8) : 0.0f;
            float p1 = j + 16 < len ? ag[j + 16] * (float)((qg[j] >> 4) - 8) : 0.0f;
            acc[j] = acc[j] + (p0 + p1) * scale[full];
        }
    }
    return kvq_lanes_(acc);
}

/* y[i] = y[i] + (w·scale)·q[i] over a quantized row (8 or 4 bits): each
 * element on its own, so any vector width gives the same bits. */
static inline void kvq_axpy_q(int bits, float *restrict y, float w, const uint8_t *restrict row, int n) {
    int ng = kvq_groups(n);
    const float *scale = (const float *)(const void *)row;
    const uint8_t *q = row + (size_t)ng * 4;
    for (int g = 0; g < ng; g++) {
        float ws = w * scale[g];
        float *yg = y + (size_t)g * KVQ_G;
        int len = n - g * KVQ_G < KVQ_G ? n - g * KVQ_G : KVQ_G;
        if (bits == 8) {
            const int8_t *qg = (const int8_t *)q + (size_t)g * KVQ_G;
            if (len == KVQ_G)
                for (int j = 0; j < KVQ_G; j++) yg[j] = yg[j] + ws * (float)qg[j];
            else
                for (int j = 0; j < len; j++) yg[j] = yg[j] + ws * (float)qg[j];
        } else {
            const uint8_t *qg = q + (size_t)g * (KVQ_G / 2);
            if (len == KVQ_G)
                for (int j = 0; j < KVQ_G / 2; j++) {
                    yg[j] = yg[j] + ws * (float)((qg[j] & 15) - 8);
                    yg[j + 16] = yg[j + 16] + ws * (float)((qg[j] >> 4) - 8);
                }
            else
                for (int j = 0; j < len; j++) yg[j] = yg[j] + ws * (float)((j < 16 ? qg[j] & 15 : qg[j - 16] >> 4) - 8);
        }
    }
}

/* a · a cached row x[n] of `bits`, whatever its format (f32: mm_dot_f32). */
static inline float kvq_dot(int bits, const float *a, const uint8_t *x, int n) {
    return bits == 32 ? mm_dot_f32(a, (const float *)(const void *)x, n) : bits == 8 ? kvq_dot8(a, x, n) : kvq_dot4(a, x, n);
}

/* y += w · a cached row x[n] of `bits` (f32: mm_axpy_f32). */
static inline void kvq_axpy(int bits, float *y, float w, const uint8_t *x, int n) {
    if (bits == 32) mm_axpy_f32(y, w, (const float *)(const void *)x, n);
    else kvq_axpy_q(bits, y, w, x, n);
}

#endif
