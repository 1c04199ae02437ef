/* quant.h — weight tensor formats and the matmul kernels over them.
 *
 * A qt_tensor is a row-major [O, I] matrix (O outputs, I inputs) in one of
 * the container formats; y = x · Wᵀ. This file owns the formats, the
 * quantizer and the kernels; it knows nothing of models. Prefix: qt_, mm_. */
#ifndef COLI_QUANT_H
#define COLI_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { QT_F32 = 0 } qt_fmt;

typedef struct {
    qt_fmt fmt;
    int64_t O, I;       /* rows (outputs), columns (inputs) */
    const void *w;      /* packed weights, row-major */
    const float *s;     /* scales, NULL for f32 */
    int gs;             /* group size (grouped formats) */
} qt_tensor;

/* Packed weight bytes of an [O, I] matrix, and its scale count. */
static inline uint64_t qt_weight_bytes(qt_fmt f, int64_t O, int64_t I, int gs) {
    (void)f, (void)gs;
    return (uint64_t)O * (uint64_t)I * 4;
}
static inline uint64_t qt_scale_count(qt_fmt f, int64_t O, int64_t I, int gs) {
    (void)f, (void)O, (void)I, (void)gs;
    return 0;
}

/* Bytes of one packed row. */
static inline size_t qt_row_bytes(const qt_tensor *W) { return (size_t)W->I * 4; }

/* View of rows [r0, r0 + n) of W. */
static inline qt_tensor qt_rows(const qt_tensor *W, int64_t r0, int64_t n) {
    qt_tensor v = *W;
    v.O = n;
    v.w = (const uint8_t *)W->w + (size_t)r0 * qt_row_bytes(W);
    return v;
}

/* Row r of W as f32 into out[I]. */
static inline void qt_dequant_row(const qt_tensor *W, int64_t r, float *out) {
    memcpy(out, (const float *)W->w + (size_t)r * (size_t)W->I, (size_t)W->I * 4);
}

/* Dot product of n floats with four independent accumulators. */
static inline float mm_dot_f32(const float *a, const float *b, int64_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* y[S][O] = x[S][I] · Wᵀ. Parallel over output rows, so each weight row is
 * read once for all S inputs. */
static inline void mm_matmul(const qt_tensor *W, const float *x, int S, float *y) {
    const int64_t O = W->O, I = W->I;
    const float *w = (const float *)W->w;
#pragma omp parallel for schedule(static) if (O * I * S > 32768)
    for (int64_t o = 0; o < O; o++)
        for (int s = 0; s < S; s++) y[(size_t)s * O + o] = mm_dot_f32(w + (size_t)o * I, x + (size_t)s * I, I);
}

#endif
