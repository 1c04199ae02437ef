/* kernels/impl.h — internal to the kernel translation units in kernels/:
 * the argument block and table every level fills, the scalar helpers that
 * tails and references share, the canonical integer reduction, and the
 * plumbing of the per-level templates (float_tile.h, int_x86.h,
 * int_neon.h). Nothing outside kernels/ includes it; the API is kernels.h.
 * Must not: allocate, or depend on anything but quant.h and kernels.h. */
#ifndef COLI_KERNELS_IMPL_H
#define COLI_KERNELS_IMPL_H

#include <float.h>
#include <math.h>
#include <string.h>

#include "../kernels.h"

#if defined(__x86_64__)
#define MM_X86 1
#elif defined(__aarch64__)
#define MM_ARM 1
#endif

/* Tile loops have constant trip counts after inlining; -O2 does not unroll
 * them on its own, and unrolled they keep their accumulators in registers. */
#define MM_UNROLL _Pragma("GCC unroll 4")

#define MM_TILE 4                        /* activation rows per weight pass */
#define MM_GOB 16                        /* weight rows per pass over the activation tiles (x86 integer path) */

/* Everything a row kernel needs for one mm_matmul call. */
typedef struct {
    const qt_tensor *W;
    const float *x;    /* [S][I] f32 activations (float path)                     */
    float *y;          /* [S][O] outputs                                          */
    int S;
    const int8_t *qx;  /* [S][ldq] int8 activations in the level's layout        */
    const float *xs;   /* [S] activation scales (NaN if the row is not finite)  */
    const int32_t *xg; /* [S][ldg] offset·Σqx per group (per-row formats: [0])   */
    int64_t ldq, ldg;
} mm_args;

/* Computes y for output rows [o0, o1) and every activation row. */
typedef void (*mm_rows_fn)(const mm_args *a, int64_t o0, int64_t o1);
/* y[I] = Σ_o x[o]·deq(W[o,:]) (see mm_matvec_t). */
typedef void (*mm_mvt_fn)(const qt_tensor *W, const float *x, float *y);

struct mm_kernels {
    const char *name;
    int vb;           /* activation layout block: vector bytes (0: natural order) */
    mm_rows_fn frows; /* float path                                              */
    mm_rows_fn irows; /* integer path (int formats)                              */
    mm_mvt_fn mvt;
};


/* Weight rows stream from DRAM once per call; prefetching this many bytes
 * ahead of the block being unpacked keeps enough misses in flight for one
 * core to approach its bandwidth share (measured: bench/bench_quant.c). */
#ifndef MM_PF_DIST
#define MM_PF_DIST 2048
#endif
#ifndef MM_PF_SCALES
#define MM_PF_SCALES 2 /* rows ahead for group scales */
#endif
#define MM_PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)

/* Byte offset of element i (a multiple of 4) in a packed row. */
static inline int64_t mm_boff(qt_fmt f, int64_t i) { return f == QT_F32 ? 4 * i : f == QT_I8 ? i : f == QT_I2 ? i / 4 : i / 2; }

/* Offset subtracted from stored codes: nibble-8, crumb-2; int8 is signed. */
static inline int mm_code_off(qt_fmt f) { return f == QT_I8 ? 0 : f == QT_I2 ? 2 : 8; }

/* Elements per activation layout block for level vector bytes vb. */
static inline int64_t mm_act_blk(qt_fmt f, int vb) { return f == QT_I2 ? 4 * vb : f == QT_I8 ? vb : 2 * vb; }

/* Grouped int4 at group size 64 or 32 on a 32-byte level: each full
 * super-block (16 groups) of the activations is laid out for weights
 * transposed in registers (int_x86.h's g64sb, g32sb), so that a dot's 8
 * lanes belong to 8 groups and accumulate without a chunk reduction. Byte
 * 4·p + k of vector (8·H + u)·2 + h (gs 64) or (4·H + u)·2 + h (gs 32)
 * holds element gs·mm_gt_grp(gs, H, p) + 8u + 2k + h: half H of 2, unit u
 * (8 elements) of gs/8, nibble h, lane p of 8, byte k of 4. The rest of
 * the row keeps the per-block layout. Returns gs where this layout
 * applies, else 0. */
static inline int mm_gt(qt_fmt f, int gs, int vb) { return f == QT_I4G && (gs == 64 || gs == 32) && vb == 32 ? gs : 0; }
/* The group of lane p in half H: at gs 32 a 128-bit lane L = p/4 of weight
 * vector v = p%4 holds group 2v + L (the transpose stays within lanes). */
static inline int mm_gt_grp(int gs, int H, int p) { return 8 * H + (gs == 64 ? p : 2 * (p & 3) + (p >> 2)); }

/* Vectorize this loop (OpenMP SIMD; the -O2 cost model leaves it scalar). */
#ifdef _OPENMP
#define MM_SIMD _Pragma("omp simd")
#define MM_SIMD_MAX_MB _Pragma("omp simd reduction(max : mb)")
#define MM_SIMD_SUM_SUM _Pragma("omp simd reduction(+ : sum)")
#else
#define MM_SIMD
#define MM_SIMD_MAX_MB
#define MM_SIMD_SUM_SUM
#endif

/* Σ code_i·q_i over [i0, i1) of a packed row with natural-order activations
 * q (int8: signed value, int4: nibble 0..15, int2: crumb 0..3). Exact. */
static inline int32_t mm_idot_tail(qt_fmt f, const uint8_t *w, const int8_t *q, int64_t i0, int64_t i1) {
    int32_t d = 0;
    if (f == QT_I8)
        for (int64_t i = i0; i < i1; i++) d += (int8_t)w[i] * q[i];
    else if (f == QT_I2)
        for (int64_t i = i0; i < i1; i++) d += qt_crumb(w, i) * q[i];
    else
        for (int64_t i = i0; i < i1; i++) d += qt_nib(w, i) * q[i];
    return d;
}

/* 16-element chunk sums c16[k] of nibble·q over [e0 + 16k, ...) for the
 * chunks starting in [i0, i1) (i0 - e0 a multiple of 16); natural layout. */
static inline void mm_c16_tail(const uint8_t *w, const int8_t *q, int64_t e0, int64_t i0, int64_t i1, int32_t *c16) {
    for (int64_t c = i0; c < i1; c += 16) c16[(c - e0) / 16] = mm_idot_tail(QT_I4, w, q, c, c + 16 < i1 ? c + 16 : i1);
}

/* Group sums g[16] from chunk sums c16[16·n16] (n16 chunks per group). */
static inline void mm_gsum16(const int32_t *c16, int n16, int32_t *g) {
    for (int j = 0; j < 16; j++) {
        int32_t t = 0;
        for (int k = 0; k < n16; k++) t += c16[j * n16 + k];
        g[j] = t;
    }
}

/* The canonical lane step: L[j] += (float)(G[j] - xg[j]) · s[j]. */
static inline void mm_comb16(const int32_t *G, const int32_t *xg, const float *s, float *L) {
    for (int j = 0; j < 16; j++) L[j] = L[j] + (float)(G[j] - xg[j]) * s[j];
}

/* The canonical 16-lane reduction: L[j]+=L[j+8], +=L[j+4], +=L[j+2], L0+L1. */
static inline float mm_tree16(const float *L) {
    float a[8];
    for (int j = 0; j < 8; j++) a[j] = L[j] + L[j + 8];
    MM_UNROLL
    for (int j = 0; j < 4; j++) a[j] = a[j] + a[j + 4];
    for (int j = 0; j < 2; j++) a[j] = a[j] + a[j + 2];
    return a[0] + a[1];
}

/* Scales of super-block sb (groups 16·sb ..) of a row with ng groups: a
 * pointer into srow, or buf zero-padded for the last partial super-block. */
static inline const float *mm_sb_scales(const float *srow, int64_t ng, int64_t sb, float *buf) {
    if (16 * sb + 16 <= ng) return srow + 16 * sb;
    memset(buf, 0, 16 * sizeof(float));
    memcpy(buf, srow + 16 * sb, (size_t)(ng - 16 * sb) * sizeof(float));
    return buf;
}

/* Dequantized value of element i of a row (row pointer w, row scales srow). */
static inline float mm_deq1(const qt_tensor *W, const uint8_t *w, const float *srow, int64_t i) {
    if (W->fmt == QT_F32) {
        float v;
        memcpy(&v, w + 4 * i, 4);
        return v;
    }
    return (float)qt_qval(W->fmt, w, i) * srow[W->fmt == QT_I4G ? i / W->gs : 0];
}

/* The shared float tail: Σ deq(w_i)·x_i over [i0, i1), one accumulator. */
static inline float mm_ftail(const qt_tensor *W, const uint8_t *w, const float *srow, const float *x, int64_t i0, int64_t i1) {
    float t = 0.0f;
    for (int64_t i = i0; i < i1; i++) t += mm_deq1(W, w, srow, i) * x[i];
    return t;
}

/* Walks the scale of consecutive 16-element steps of a row: gk steps per
 * group (grouped), or the row scale (per-row formats; 1 for f32). */
typedef struct {
    const float *s;
    int64_t gk, c;
} mm_gcursor;
static inline mm_gcursor mm_gcursor_init(const float *srow, int64_t gk) {
    mm_gcursor g = {srow, gk, 0};
    return g;
}
static inline float mm_gcursor_next(mm_gcursor *g, qt_fmt f) {
    if (f == QT_F32) return 1.0f;
    if (f != QT_I4G) return g->s[0];
    float v = *g->s;
    if (++g->c == g->gk) {
        g->c = 0;
        g->s++;
    }
    return v;
}

/* Row o's packed weights and scales. */
static inline const uint8_t *mm_wrow(const qt_tensor *W, int64_t o) { return (const uint8_t *)W->w + (size_t)o * qt_row_bytes(W); }
static inline const float *mm_srow(const qt_tensor *W, int64_t o) { return W->s ? W->s + (size_t)o * (size_t)qt_row_scales(W) : NULL; }

/* Per-row integer result from the exact dot D. */
static inline float mm_ifinish(int32_t D, int32_t xg, float so, float xs) { return (float)(D - xg) * so * xs; }

/* Template plumbing: the tiles are written once per family in
 * kernels/float_tile.h (float path, any vector width), int_x86.h and
 * int_neon.h (integer path) and instantiated per level by including them
 * with MMT_SFX (name suffix), MMT_TGT (target attribute) and, for integer
 * tiles, MMT_DP(acc, u, s) (acc + Σ of 4 adjacent u8·s8 products per int32
 * lane) defined; MMT_F(name) gives name_<suffix>. */
#define MMT_CAT_(a, b) a##_##b
#define MMT_CAT(a, b) MMT_CAT_(a, b)
#define MMT_F(name) MMT_CAT(name, MMT_SFX)
#define MM_AI inline __attribute__((always_inline))

/* The kernel tables of each level, defined by the translation unit of its
 * instruction-set family (kernels/x86_avx2.c, x86_avx512.c, arm_neon.c). */
#ifdef MM_X86
extern const mm_kernels mm_kernels_avx2, mm_kernels_avxvnni, mm_kernels_avx512, mm_kernels_avx512vnni;
#endif
#ifdef MM_ARM
extern const mm_kernels mm_kernels_neon, mm_kernels_dotprod, mm_kernels_i8mm;
#endif

#endif
