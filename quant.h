/* quant.h — weight tensor formats, the one quantizer and container format
 * detection. Pure functions over caller-owned memory: no allocation, no
 * globals, no I/O, no CPU-specific code. The converter and the engine share
 * it, so a tensor quantized offline and one quantized at load time are the
 * same bytes. The matmul kernels over these formats live in kernels.h.
 *
 * A qt_tensor is a row-major [O, I] matrix (O outputs, I inputs); y = x · Wᵀ.
 * Formats (ordinals as upstream; byte layouts in docs/container.md §3):
 *   QT_F32  4·I bytes/row, no scales
 *   QT_I8   I bytes/row, int8 two's complement, one f32 scale per row
 *   QT_I4   ceil(I/2) bytes/row, nibble = q+8, element 2k in the LOW nibble
 *           of byte k; one scale per row
 *   QT_I2   ceil(I/4) bytes/row, crumb = q+2, element 4k+j in bits 2j..2j+1
 *   QT_I4G  QT_I4 packing, one scale per group of gs inputs (gs multiple of
 *           16 in 16..256; the last group may be partial)
 * Dequantization is (float)q · scale, exactly; every kernel and every
 * reference reproduces it.
 *
 * Prefix: qt_. Must not: allocate, read files, look at the CPU. */
#ifndef COLI_QUANT_H
#define COLI_QUANT_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { QT_F32 = 0, QT_I8 = 1, QT_I4 = 2, QT_I2 = 3, QT_I4G = 4 } qt_fmt;
#define QT_NFMT 5
#define QT_GS_MIN 16
#define QT_GS_MAX 256

/* gs is last so positional initializers {fmt, O, I, w, s} stay valid. */
typedef struct {
    qt_fmt fmt;
    int64_t O, I;   /* rows (outputs), columns (inputs)                   */
    const void *w;  /* packed weights, row-major, qt_row_bytes per row    */
    const float *s; /* scales: NULL (f32), [O] (per row), [O][ceil(I/gs)] */
    int gs;         /* group size, QT_I4G only                            */
} qt_tensor;

/* Short name of a format ("f32", "int8", "int4", "int2", "int4-grouped"), "?" if invalid. */
static inline const char *qt_fmt_name(qt_fmt f) {
    static const char *const n[QT_NFMT] = {"f32", "int8", "int4", "int2", "int4-grouped"};
    return (unsigned)f < QT_NFMT ? n[f] : "?";
}

/* 1 if gs is a valid group size (multiple of 16 in 16..256), else 0. */
static inline int qt_gs_ok(int gs) { return gs >= QT_GS_MIN && gs <= QT_GS_MAX && gs % 16 == 0; }

/* Packed bytes of one row of I inputs in format f; 0 if invalid or overflowing. */
static inline uint64_t qt_row_bytes_of(qt_fmt f, int64_t I) {
    if (I < 1) return 0;
    uint64_t u = (uint64_t)I;
    switch (f) {
    case QT_F32: return u > UINT64_MAX / 4 ? 0 : u * 4;
    case QT_I8: return u;
    case QT_I4:
    case QT_I4G: return u / 2 + (u & 1);
    case QT_I2: return u / 4 + ((u & 3) != 0);
    }
    return 0;
}

/* Packed bytes per row of W. */
static inline size_t qt_row_bytes(const qt_tensor *W) { return (size_t)qt_row_bytes_of(W->fmt, W->I); }

/* Scales per row: 0 (f32), 1 (per-row formats), ceil(I/gs) (grouped). */
static inline int64_t qt_row_scales(const qt_tensor *W) {
    if (W->fmt == QT_F32) return 0;
    if (W->fmt == QT_I4G) return W->gs > 0 ? W->I / W->gs + (W->I % W->gs != 0) : 0;
    return 1;
}

/* a·b into *r; 0 on success, -1 on overflow. */
static inline int qt_mul_u64(uint64_t a, uint64_t b, uint64_t *r) {
    if (a && b > UINT64_MAX / a) return -1;
    *r = a * b;
    return 0;
}

/* Total packed weight bytes of an [O, I] tensor; 0 on overflow or invalid shape/gs. */
static inline uint64_t qt_weight_bytes(qt_fmt f, int64_t O, int64_t I, int gs) {
    uint64_t rb = qt_row_bytes_of(f, I), r;
    if (O < 1 || !rb || (f == QT_I4G && !qt_gs_ok(gs))) return 0;
    return qt_mul_u64((uint64_t)O, rb, &r) ? 0 : r;
}

/* Number of f32 scales of an [O, I] tensor (0 for f32); 0 on overflow or invalid. */
static inline uint64_t qt_scale_count(qt_fmt f, int64_t O, int64_t I, int gs) {
    uint64_t r;
    if (O < 1 || I < 1 || (unsigned)f >= QT_NFMT) return 0;
    if (f == QT_F32) return 0;
    if (f != QT_I4G) return (uint64_t)O;
    if (!qt_gs_ok(gs)) return 0;
    return qt_mul_u64((uint64_t)O, (uint64_t)(I / gs + (I % gs != 0)), &r) ? 0 : r;
}

/* View of rows [r0, r0+n) of W, weights and scales (grouped: s + r0·ceil(I/gs)). */
static inline qt_tensor qt_rows(const qt_tensor *W, int64_t r0, int64_t n) {
    qt_tensor v = *W;
    v.O = n;
    v.w = (const uint8_t *)W->w + (size_t)r0 * qt_row_bytes(W);
    if (W->s) v.s = W->s + (size_t)r0 * (size_t)qt_row_scales(W);
    return v;
}

/* Nibble (0..15) / crumb (0..3) code of element i of a packed row. */
static inline int qt_nib(const uint8_t *row, int64_t i) { return (row[i >> 1] >> ((i & 1) * 4)) & 15; }
static inline int qt_crumb(const uint8_t *row, int64_t i) { return (row[i >> 2] >> ((i & 3) * 2)) & 3; }

/* Signed integer value of element i of a packed row (int formats). */
static inline int qt_qval(qt_fmt f, const uint8_t *row, int64_t i) {
    if (f == QT_I8) return (int8_t)row[i];
    if (f == QT_I2) return qt_crumb(row, i) - 2;
    return qt_nib(row, i) - 8;
}

/* Row r of W as f32 into out[I]: (float)q · scale, or the f32 value. */
static inline void qt_dequant_row(const qt_tensor *W, int64_t r, float *out) {
    const int64_t I = W->I;
    const uint8_t *row = (const uint8_t *)W->w + (size_t)r * qt_row_bytes(W);
    if (W->fmt == QT_F32) {
        memcpy(out, row, (size_t)I * 4);
        return;
    }
    const float *s = W->s + (size_t)r * (size_t)qt_row_scales(W);
    for (int64_t i = 0; i < I; i++) out[i] = (float)qt_qval(W->fmt, row, i) * s[W->fmt == QT_I4G ? i / W->gs : 0];
}

/* Round half to even for |v| < 2^22 in the default rounding mode; the same
 * bits as rintf, cheap and vectorizable. */
static inline float qt_rne(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* Scale of one run of n values for a format with largest code qmax:
 * absmax/qmax over the finite values, floored at 1e-8. */
static inline float qt_scale_of(const float *x, int64_t n, int qmax) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a <= FLT_MAX && a > amax) amax = a;
    }
    float sc = amax / (float)qmax;
    return sc >= 1e-8f ? sc : 1e-8f;
}

/* round-half-to-even(v/sc) clamped to [-qmax-1, qmax]; non-finite v → 0. */
static inline int qt_q1(float v, float sc, int qmax) {
    if (!(fabsf(v) <= FLT_MAX)) return 0;
    float r = qt_rne(v / sc);
    return r > (float)qmax ? qmax : r < (float)(-qmax - 1) ? -qmax - 1 : (int)r;
}

/* Stores signed value q as element e of a packed int row. */
static inline void qt_put(qt_fmt f, uint8_t *row, int64_t e, int q) {
    if (f == QT_I8) row[e] = (uint8_t)(int8_t)q;
    else if (f == QT_I2) row[e >> 2] = (uint8_t)((row[e >> 2] & ~(3 << ((e & 3) * 2))) | ((q + 2) << ((e & 3) * 2)));
    else row[e >> 1] = (uint8_t)((row[e >> 1] & ~(15 << ((e & 1) * 4))) | ((q + 8) << ((e & 1) * 4)));
}

/* THE quantizer (converter and load-time quantization both call it): src
 * [O][I] f32 into packed weights w (qt_weight_bytes) and scales s
 * (qt_scale_count). Symmetric absmax per row (per group for QT_I4G), scale =
 * absmax/qmax floored at 1e-8, q = round-half-to-even(x/scale) clamped to
 * [-qmax-1, qmax]; odd-I padding nibble 8, int2 padding crumb 2 (decode to 0).
 * QT_F32 copies. Returns the number of non-finite inputs (quantized as 0 and
 * left out of absmax; copied as is for f32) so callers can refuse them. */
static inline int64_t qt_quantize(const float *src, int64_t O, int64_t I, qt_fmt f, int gs, uint8_t *w, float *s) {
    int64_t bad = 0;
    for (int64_t i = 0; i < O * I; i++) bad += !(fabsf(src[i]) <= FLT_MAX);
    if (f == QT_F32) {
        memcpy(w, src, (size_t)O * (size_t)I * 4);
        return bad;
    }
    const int qmax = f == QT_I8 ? 127 : f == QT_I2 ? 1 : 7;
    const int64_t rb = (int64_t)qt_row_bytes_of(f, I), run = f == QT_I4G ? gs : I, nrun = (I + run - 1) / run;
    for (int64_t o = 0; o < O; o++) {
        const float *x = src + (size_t)o * (size_t)I;
        uint8_t *row = w + (size_t)o * (size_t)rb;
        memset(row, f == QT_I2 ? 0xAA : f == QT_I8 ? 0 : 0x88, (size_t)rb);
        for (int64_t g = 0; g < nrun; g++) {
            int64_t i0 = g * run, n = I - i0 < run ? I - i0 : run;
            float sc = qt_scale_of(x + i0, n, qmax);
            s[(size_t)o * (size_t)nrun + (size_t)g] = sc;
            for (int64_t i = i0; i < i0 + n; i++) qt_put(f, row, i, qt_q1(x[i], sc, qmax));
        }
    }
    return bad;
}

/* Candidate group sizes, probed in this order (upstream detect_group_size). */
static inline const int *qt_gs_candidates(int *n) {
    static const int c[] = {16, 32, 48, 64, 96, 128, 192, 256};
    *n = (int)(sizeof c / sizeof c[0]);
    return c;
}

/* O·per_row into *r; 0 ok, -1 on overflow (then *r = UINT64_MAX, matching nothing real). */
static inline int qt_bytes_per(int64_t O, uint64_t per_row, uint64_t *r) {
    if (!qt_mul_u64((uint64_t)O, per_row, r)) return 0;
    *r = UINT64_MAX;
    return -1;
}

/* Detects the format of an [O, I] tensor from its weight byte count and its
 * `.qs` scale byte count (sbytes = 0: no .qs companion, i.e. f32 data whose
 * byte count is 4·O·I after float conversion), exactly as upstream: family by
 * weight bytes in the order int8, int4, int2 (int3-g64, E8 and FP8 layouts
 * are recognised and refused), then int4 with more than O scales is grouped
 * with the first candidate gs ≤ I whose ceil(I/gs)·O scales match, then the
 * scale count must match. 0 ok (*fmt, *gs set; gs 0 unless grouped), -1 with
 * the reason in why. */
static inline int qt_resolve(int64_t O, int64_t I, uint64_t wbytes, uint64_t sbytes, qt_fmt *fmt, int *gs, char *why, size_t n) {
    uint64_t b8, b4, b2, b3, bf, e8 = 0, rows4 = (uint64_t)O * 4;
    if (O < 1 || I < 1 || O > (INT64_C(1) << 40) || I > (INT64_C(1) << 40)) {
        snprintf(why, n, "bad shape [%lld, %lld]", (long long)O, (long long)I);
        return -1;
    }
    *gs = 0;
    if (wbytes == UINT64_MAX || sbytes == UINT64_MAX) { /* the overflow mark of qt_bytes_per must match nothing */
        snprintf(why, n, "byte counts out of range");
        return -1;
    }
    if (sbytes == 0) {
        if (qt_bytes_per(O, (uint64_t)I * 4, &bf) || wbytes != bf) {
            snprintf(why, n, "float tensor [%lld, %lld] has %llu bytes, expected %llu", (long long)O, (long long)I,
                     (unsigned long long)wbytes, (unsigned long long)bf);
            return -1;
        }
        *fmt = QT_F32;
        return 0;
    }
    if (sbytes % 4) {
        snprintf(why, n, "scale tensor has %llu bytes, not a multiple of 4", (unsigned long long)sbytes);
        return -1;
    }
    if (I % 256 == 0 && sbytes == 4 && !qt_bytes_per(O, (uint64_t)(I / 256) * 98, &e8) && wbytes == e8) {
        snprintf(why, n, "E8/IQ3 lattice layout (upstream format 6) is not supported");
        return -1;
    }
    qt_bytes_per(O, (uint64_t)I, &b8);
    qt_bytes_per(O, (uint64_t)(I + 1) / 2, &b4);
    qt_bytes_per(O, (uint64_t)(I + 3) / 4, &b2);
    qt_bytes_per(O, (uint64_t)((I + 63) / 64) * 24, &b3);
    qt_fmt f;
    if (wbytes == b8) f = QT_I8;
    else if (wbytes == b4) f = QT_I4;
    else if (wbytes == b2) f = QT_I2;
    else if (wbytes == b3) {
        snprintf(why, n, "%llu weight bytes match int3-g64 (upstream format 5), which is not supported", (unsigned long long)wbytes);
        return -1;
    } else {
        snprintf(why, n, "%llu weight bytes match no format for [%lld, %lld] (int8 %llu, int4 %llu, int2 %llu)", (unsigned long long)wbytes,
                 (long long)O, (long long)I, (unsigned long long)b8, (unsigned long long)b4, (unsigned long long)b2);
        return -1;
    }
    if (f == QT_I4 && sbytes > rows4) {
        int nc;
        const int *cand = qt_gs_candidates(&nc);
        for (int k = 0; k < nc && cand[k] <= I; k++) {
            uint64_t want;
            if (!qt_bytes_per(O, (uint64_t)((I + cand[k] - 1) / cand[k]) * 4, &want) && sbytes == want) {
                *fmt = QT_I4G;
                *gs = cand[k];
                return 0;
            }
        }
    }
    if (sbytes != rows4) {
        uint64_t fp8 = 4 * (uint64_t)((O + 127) / 128) * (uint64_t)((I + 127) / 128);
        if (f == QT_I8 && sbytes == fp8)
            snprintf(why, n, "scale geometry (%llu bytes) is FP8 block scales (upstream format 8), which is not supported",
                     (unsigned long long)sbytes);
        else
            snprintf(why, n, "%s weights [%lld, %lld] need %llu scale bytes%s, container has %llu", qt_fmt_name(f), (long long)O,
                     (long long)I, (unsigned long long)rows4, f == QT_I4 ? " (per row) or 4·O·ceil(I/gs) for a group size in 16..256" : "",
                     (unsigned long long)sbytes);
        return -1;
    }
    *fmt = f;
    return 0;
}

#endif
