/* quant.h — weight tensor formats, the one quantizer, container format
 * detection, and the matmul kernels over every format for every CPU level.
 *
 * A qt_tensor is a row-major [O, I] matrix (O outputs, I inputs); y = x · Wᵀ.
 * Formats (ordinals as upstream; byte layouts in shared notes
 * upstream-container-and-oracle.md §1.3):
 *   QT_F32  4·I bytes/row, no scales
 *   QT_I8   I bytes/row, int8 two's complement, one f32 scale per row
 *   QT_I4   ceil(I/2) bytes/row, nibble = q+8, element 2k in the LOW nibble
 *           of byte k; one scale per row
 *   QT_I2   ceil(I/4) bytes/row, crumb = q+2, element 4k+j in bits 2j..2j+1
 *   QT_I4G  QT_I4 packing, one scale per group of gs inputs (gs multiple of
 *           16 in 16..256; the last group may be partial)
 *
 * Kernels: one table per CPU level (mm_kernels_of), chosen once by mm_init.
 * Levels: scalar (the plain C reference, compiled everywhere), avx2, avxvnni,
 * avx512, avx512vnni, neon, neon-dotprod, neon-i8mm; each is compiled with
 * a target attribute, so a portable (-march=x86-64 / armv8-a) build holds
 * every level of its architecture and dispatch picks by cpuid/getauxval.
 * Float kernels exist per vector width (AVX2, AVX-512, NEON). Integer
 * kernels are written once per width in the template sections at the end of
 * this file and instantiated per level by re-including the file with a dot
 * primitive (maddubs, vpdpbusd, smull, sdot); i8mm adds a 2×2 smmla kernel.
 *
 * Two arithmetic paths (mm_init's idot flag):
 *   float   y = Σ_i deq(W[o,i]) · x[i] in f32, deq = q·scale exactly as
 *           qt_dequant_row. Each level has one fixed summation order per
 *           (row, activation row): the same for every S, batch and thread
 *           count, but different between levels (rounding). f32 weights
 *           always take this path.
 *   integer (IDOT, int8/int4/int2/grouped int4) each activation row is
 *           quantized to int8 (xs = absmax/127, q = rne(x·(127/absmax)))
 *           and D = Σ q_w·q_x is an exact int32 sum (q_w = stored value: int8,
 *           nibble-8, crumb-2), so every level gives bit-identical y:
 *             per-row formats: y = ((float)D · s[o]) · xs
 *             grouped:         L[g mod 16] += (float)D_g · s[o,g] for g in
 *                              increasing order (mul then add, L starts at
 *                              +0, missing groups of the last 16 add 0·0),
 *                              T = ((L0+L8)+(L4+L12)) + ... as L[j]+=L[j+8],
 *                              L[j]+=L[j+4], L[j]+=L[j+2], L0+L1; y = T · xs
 *           It needs I ≤ 2^17 (and ≤ mm_init's max_cols); larger I take the
 *           float path. Activations are laid out per level so that the
 *           vector unpack of the weights needs no shuffles (mm_act_quant).
 * Bit-exactness relies on no FMA contraction of the reference's a*b+c
 * (-ffp-contract=off, the project default and ISO C mode's default).
 *
 * Prefix: qt_ (formats), mm_ (kernels). No globals, no getenv, no exit. */
#ifndef COLI_QUANT_H
#define COLI_QUANT_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__)
#define MM_X86 1
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__)
#define MM_ARM 1
#include <arm_neon.h>
#if defined(__linux__)
#include <sys/auxv.h>
#endif
#endif

/* ================================================================ formats */

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
    if (W->fmt == QT_I4G) return W->gs > 0 ? (W->I + W->gs - 1) / W->gs : 0;
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
    return qt_mul_u64((uint64_t)O, (uint64_t)((I + gs - 1) / gs), &r) ? 0 : r;
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

/* ============================================================ kernel core */

/* Tile loops have constant trip counts after inlining; -O2 does not unroll
 * them on its own, and unrolled they keep their accumulators in registers. */
#define MM_UNROLL _Pragma("GCC unroll 4")

/* CPU levels; a level's kernels exist on one architecture only. */
enum {
    MM_SCALAR = 0,
    MM_AVX2 = 1,       /* AVX2 + FMA, maddubs integer dots (256-bit)       */
    MM_AVXVNNI = 2,    /* AVX2 + AVX-VNNI vpdpbusd (256-bit)               */
    MM_AVX512 = 3,     /* AVX-512 F/BW/VL, maddubs integer dots (512-bit)  */
    MM_AVX512VNNI = 4, /* AVX-512 F/BW/VL + VNNI vpdpbusd (512-bit)        */
    MM_NEON = 5,       /* AdvSIMD, smull/sadalp integer dots               */
    MM_NEON_DOT = 6,   /* + dotprod sdot                                   */
    MM_NEON_I8MM = 7,  /* + i8mm smmla for 2 rows × 2 activations          */
    MM_NLEVELS = 8
};

#define MM_IDOT_MAX_I (INT64_C(1) << 17) /* |Σ int8·int8| < 2^31 below this */
#define MM_TILE 4                        /* activation rows per weight pass */

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

typedef struct {
    const char *name;
    int vb;           /* activation layout block: vector bytes (0: natural order) */
    mm_rows_fn frows; /* float path                                              */
    mm_rows_fn irows; /* integer path (int formats)                              */
    mm_mvt_fn mvt;
} mm_kernels;

struct mm_ctx {
    int level, idot, max_rows;
    int64_t max_cols;
    const mm_kernels *k;
    int8_t *qx;  /* [max_rows][ldq] */
    float *xs;   /* [max_rows]      */
    int32_t *xg; /* [max_rows][ldg] */
    int64_t ldq, ldg;
};
typedef struct mm_ctx mm_ctx;

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

/* Quantizes one activation row x[I] for weights of format f (group size gs)
 * into q in the layout of a level with vector bytes vb: int4 blocks of 2·vb
 * elements as [even elements | odd elements], int2 blocks of 4·vb as the four
 * phases i mod 4, int8 and every tail natural. *xs = absmax/127 (0, with
 * q = 0, when absmax < 1e-30; NaN if any x is not finite), q =
 * rne(x·127/absmax). xg gets
 * offset·Σq per group, zero-padded to a multiple of 16 groups (per-row
 * formats: xg[0] only). */
static inline void mm_act_quant(const float *x, int64_t I, qt_fmt f, int gs, int vb, int8_t *q, float *xs, int32_t *xg) {
    uint32_t mb = 0; /* max of |x| bit patterns: ordered like the floats, ≥ 0x7F800000 if not finite */
    MM_SIMD_MAX_MB
    for (int64_t i = 0; i < I; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        u &= 0x7FFFFFFFu;
        mb = u > mb ? u : mb;
    }
    float amax;
    memcpy(&amax, &mb, 4);
    const int64_t ng = f == QT_I4G ? (I + gs - 1) / gs : 1, ngp = f == QT_I4G ? (ng + 15) / 16 * 16 : 1;
    memset(xg, 0, (size_t)ngp * 4);
    if (mb >= 0x7F800000u || !(amax >= 1e-30f)) {
        memset(q, 0, (size_t)I);
        *xs = mb >= 0x7F800000u ? NAN : 0.0f;
        return;
    }
    *xs = amax / 127.0f;
    const float inv = 127.0f / amax;
    MM_SIMD
    for (int64_t i = 0; i < I; i++) {
        float r = qt_rne(x[i] * inv);
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        q[i] = (int8_t)(int)r;
    }
    const int off = mm_code_off(f);
    if (off) {
        const int64_t run = f == QT_I4G ? gs : I;
        for (int64_t g = 0; g < ng; g++) {
            int32_t sum = 0;
            const int64_t e = (g + 1) * run < I ? (g + 1) * run : I;
            MM_SIMD_SUM_SUM
            for (int64_t i = g * run; i < e; i++) sum += q[i];
            xg[g] = off * sum;
        }
    }
    if (!vb || f == QT_I8) return;
    const int64_t blk = mm_act_blk(f, vb), nb = I / blk;
    int8_t t[4 * 64];
    for (int64_t b = 0; b < nb; b++) {
        int8_t *p = q + b * blk;
        memcpy(t, p, (size_t)blk);
        if (f == QT_I2) {
            for (int ph = 0; ph < 4; ph++) {
                MM_SIMD
                for (int j = 0; j < vb; j++) p[ph * vb + j] = t[4 * j + ph];
            }
        } else {
            MM_SIMD
            for (int j = 0; j < vb; j++) {
                p[j] = t[2 * j];
                p[vb + j] = t[2 * j + 1];
            }
        }
    }
}

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

/* ------------------------------------------------------ scalar reference */

/* Reference float path: y = Σ deq·x with 4 accumulators by i mod 4. */
static inline void mm_frows_ref(const mm_args *a, int64_t o0, int64_t o1) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, O = W->O;
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        for (int s = 0; s < a->S; s++) {
            const float *x = a->x + (size_t)s * (size_t)I;
            float acc[4] = {0, 0, 0, 0};
            for (int64_t i = 0; i < I; i++) acc[i & 3] += mm_deq1(W, w, sr, i) * x[i];
            a->y[(size_t)s * (size_t)O + (size_t)o] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
    }
}

/* Reference integer path: the definition every level reproduces bit for bit. */
static inline void mm_irows_ref(const mm_args *a, int64_t o0, int64_t o1) {
    const qt_tensor *W = a->W;
    const qt_fmt f = W->fmt;
    const int64_t I = W->I, O = W->O, gs = W->gs, ng = qt_row_scales(W);
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        for (int s = 0; s < a->S; s++) {
            const int8_t *q = a->qx + (size_t)s * (size_t)a->ldq;
            const int32_t *xg = a->xg + (size_t)s * (size_t)a->ldg;
            float *y = a->y + (size_t)s * (size_t)O + (size_t)o;
            if (f != QT_I4G) {
                *y = mm_ifinish(mm_idot_tail(f, w, q, 0, I), xg[0], sr[0], a->xs[s]);
                continue;
            }
            float L[16] = {0}, sbuf[16];
            for (int64_t sb = 0; 16 * sb < ng; sb++) {
                int32_t G[16];
                for (int j = 0; j < 16; j++) {
                    int64_t g = 16 * sb + j, e1 = (g + 1) * gs < I ? (g + 1) * gs : I;
                    G[j] = g < ng ? mm_idot_tail(f, w, q, g * gs, e1) : 0;
                }
                mm_comb16(G, xg + 16 * sb, mm_sb_scales(sr, ng, sb, sbuf), L);
            }
            *y = mm_tree16(L) * a->xs[s];
        }
    }
}

/* Reference transposed product: y[i] = Σ_o x[o]·deq(W[o,i]), in increasing o,
 * each step y = y + x[o]·deq (mul then add), so every level matches it. */
static inline void mm_mvt_ref(const qt_tensor *W, const float *x, float *y) {
    memset(y, 0, (size_t)W->I * 4);
    for (int64_t o = 0; o < W->O; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        for (int64_t i = 0; i < W->I; i++) y[i] = y[i] + x[o] * mm_deq1(W, w, sr, i);
    }
}

/* Template plumbing: integer kernels are written once per vector width at the
 * end of this file and instantiated per level by re-including it with
 * MMT_SFX (name suffix), MMT_TGT (target attribute) and MMT_DP(acc, u, s)
 * (acc + Σ of 4 adjacent u8·s8 products per int32 lane) defined. */
#define MMT_CAT_(a, b) a##_##b
#define MMT_CAT(a, b) MMT_CAT_(a, b)
#define MMT_F(name) MMT_CAT(name, MMT_SFX)
#define MM_AI inline __attribute__((always_inline))

/* ===================================================================== x86 */
#ifdef MM_X86
#define MM_TGT_AVX2 __attribute__((target("avx2,fma")))
#define MM_TGT_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl")))

/* ---------------------------------------------------------- AVX2 family */

/* Elements [i, i+16) of row w (i a multiple of 16) dequantized: q·sc. */
static MM_AI MM_TGT_AVX2 void mm256_deq16(qt_fmt f, const uint8_t *w, int64_t i, float sc, __m256 *lo, __m256 *hi) {
    const __m256 vs = _mm256_set1_ps(sc);
    __m256i a, b;
    if (f == QT_F32) {
        *lo = _mm256_loadu_ps((const float *)w + i);
        *hi = _mm256_loadu_ps((const float *)w + i + 8);
        return;
    }
    if (f == QT_I8) {
        __m128i v = _mm_loadu_si128((const __m128i *)(w + i));
        a = _mm256_cvtepi8_epi32(v);
        b = _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8));
    } else if (f == QT_I2) {
        uint32_t u;
        memcpy(&u, w + i / 4, 4);
        const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), m = _mm256_set1_epi32(3), two = _mm256_set1_epi32(2);
        __m256i v = _mm256_set1_epi32((int)u);
        a = _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(v, sh), m), two);
        b = _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_srli_epi32(v, 16), sh), m), two);
    } else {
        uint32_t u[2];
        memcpy(u, w + i / 2, 8);
        const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), m = _mm256_set1_epi32(15), e = _mm256_set1_epi32(8);
        a = _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)u[0]), sh), m), e);
        b = _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)u[1]), sh), m), e);
    }
    *lo = _mm256_mul_ps(_mm256_cvtepi32_ps(a), vs);
    *hi = _mm256_mul_ps(_mm256_cvtepi32_ps(b), vs);
}

/* Fixed-order float sum of 8 lanes. */
static MM_AI MM_TGT_AVX2 float mm256_hsum(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* Integer sum of 8 lanes. */
static MM_AI MM_TGT_AVX2 int32_t mm256_hsum_i32(__m256i v) {
    __m128i b = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0x4E));
    b = _mm_add_epi32(b, _mm_shuffle_epi32(b, 0xB1));
    return _mm_cvtsi128_si32(b);
}

/* Order-preserving pairwise add over [a | b]: [a0+a1, .., a6+a7, b0+b1, .., b6+b7]. */
static MM_AI MM_TGT_AVX2 __m256i mm256_pairs(__m256i a, __m256i b) {
    a = _mm256_add_epi32(a, _mm256_srli_epi64(a, 32));
    b = _mm256_add_epi32(b, _mm256_srli_epi64(b, 32));
    __m256i c = _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0x88)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_permute4x64_epi64(c, 0xD8);
}

/* The canonical lane step from 16 group sums g0 (groups 0-7), g1 (8-15). */
static MM_AI MM_TGT_AVX2 void mm256_fstep(__m256i g0, __m256i g1, const int32_t *xg, const float *s, __m256 *L) {
    g0 = _mm256_sub_epi32(g0, _mm256_loadu_si256((const __m256i *)xg));
    g1 = _mm256_sub_epi32(g1, _mm256_loadu_si256((const __m256i *)(xg + 8)));
    L[0] = _mm256_add_ps(L[0], _mm256_mul_ps(_mm256_cvtepi32_ps(g0), _mm256_loadu_ps(s)));
    L[1] = _mm256_add_ps(L[1], _mm256_mul_ps(_mm256_cvtepi32_ps(g1), _mm256_loadu_ps(s + 8)));
}

/* Grouped stage 2: group sums of one super-block from its chunk sums c16,
 * then the canonical lane step into L (lanes 0-7 in L[0], 8-15 in L[1]). */
static MM_AI MM_TGT_AVX2 void mm256_stage2(const int32_t *c16, int n16, const int32_t *xg, const float *s, __m256 *L) {
    __m256i g0, g1;
    if (!(n16 & (n16 - 1))) {
        __m256i v[32];
        for (int k = 0; k < 2 * n16; k++) v[k] = _mm256_loadu_si256((const __m256i *)(c16 + 8 * k));
        for (int n = 2 * n16; n > 2; n >>= 1)
            for (int k = 0; k < n / 2; k++) v[k] = mm256_pairs(v[2 * k], v[2 * k + 1]);
        g0 = v[0];
        g1 = v[1];
    } else {
        int32_t g[16];
        mm_gsum16(c16, n16, g);
        g0 = _mm256_loadu_si256((const __m256i *)g);
        g1 = _mm256_loadu_si256((const __m256i *)(g + 8));
    }
    mm256_fstep(g0, g1, xg, s, L);
}

/* The canonical 16-lane reduction (mm_tree16) over L[0] (lanes 0-7), L[1]. */
static MM_AI MM_TGT_AVX2 float mm256_tree16(const __m256 *L) { return mm256_hsum(_mm256_add_ps(L[0], L[1])); }

/* Float path, one row × T activation rows: per pair two 8-lane FMA chains
 * over 16-element steps, then the shared tail. */
static MM_AI MM_TGT_AVX2 void mm256_ftile(const mm_args *a, int64_t o, int s0, const qt_fmt f, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    const uint8_t *w = mm_wrow(W, o);
    const float *sr = mm_srow(W, o);
    const float *x[MM_TILE];
    __m256 acc[MM_TILE][2];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        x[t] = a->x + (size_t)(s0 + t) * (size_t)I;
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    }
    mm_gcursor gc = mm_gcursor_init(sr, gk);
    for (int64_t k = 0; k < n16; k++) {
        __m256 w0, w1;
        mm256_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f), &w0, &w1);
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            acc[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + 16 * k), acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + 16 * k + 8), acc[t][1]);
        }
    }
    MM_UNROLL
    for (int t = 0; t < T; t++)
        a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] =
            mm256_hsum(_mm256_add_ps(acc[t][0], acc[t][1])) + mm_ftail(W, w, sr, x[t], 16 * n16, I);
}

static MM_AI MM_TGT_AVX2 void mm256_frows_f(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    for (int64_t o = o0; o < o1; o++)
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) switch (a->S - s0) {
            case 1: mm256_ftile(a, o, s0, f, 1); break;
            case 2: mm256_ftile(a, o, s0, f, 2); break;
            case 3: mm256_ftile(a, o, s0, f, 3); break;
            default: mm256_ftile(a, o, s0, f, 4); break;
            }
}

static inline MM_TGT_AVX2 void mm256_frows(const mm_args *a, int64_t o0, int64_t o1) {
    switch (a->W->fmt) {
    case QT_F32: mm256_frows_f(a, o0, o1, QT_F32); break;
    case QT_I8: mm256_frows_f(a, o0, o1, QT_I8); break;
    case QT_I4: mm256_frows_f(a, o0, o1, QT_I4); break;
    case QT_I2: mm256_frows_f(a, o0, o1, QT_I2); break;
    case QT_I4G: mm256_frows_f(a, o0, o1, QT_I4G); break;
    }
}

static MM_AI MM_TGT_AVX2 void mm256_mvt_f(const qt_tensor *W, const float *x, float *y, const qt_fmt f) {
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    memset(y, 0, (size_t)I * 4);
    for (int64_t o = 0; o < W->O; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        const __m256 av = _mm256_set1_ps(x[o]);
        mm_gcursor gc = mm_gcursor_init(sr, gk);
        for (int64_t k = 0; k < n16; k++) {
            __m256 w0, w1;
            mm256_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f), &w0, &w1);
            _mm256_storeu_ps(y + 16 * k, _mm256_add_ps(_mm256_loadu_ps(y + 16 * k), _mm256_mul_ps(av, w0)));
            _mm256_storeu_ps(y + 16 * k + 8, _mm256_add_ps(_mm256_loadu_ps(y + 16 * k + 8), _mm256_mul_ps(av, w1)));
        }
        for (int64_t i = 16 * n16; i < I; i++) y[i] = y[i] + x[o] * mm_deq1(W, w, sr, i);
    }
}

static inline MM_TGT_AVX2 void mm256_mvt(const qt_tensor *W, const float *x, float *y) {
    switch (W->fmt) {
    case QT_F32: mm256_mvt_f(W, x, y, QT_F32); break;
    case QT_I8: mm256_mvt_f(W, x, y, QT_I8); break;
    case QT_I4: mm256_mvt_f(W, x, y, QT_I4); break;
    case QT_I2: mm256_mvt_f(W, x, y, QT_I2); break;
    case QT_I4G: mm256_mvt_f(W, x, y, QT_I4G); break;
    }
}

#define MMT_X86_256 1
#define MMT_SFX avx2
#define MMT_TGT MM_TGT_AVX2
#define MMT_DP(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "quant.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#define MMT_SFX avxvnni
#define MMT_TGT __attribute__((target("avx2,fma,avxvnni")))
#define MMT_DP(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#include "quant.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#undef MMT_X86_256

/* ------------------------------------------------------- AVX-512 family */

/* Elements [i, i+16) of row w (i a multiple of 16) dequantized: q·sc. */
static MM_AI MM_TGT_AVX512 __m512 mm512_deq16(qt_fmt f, const uint8_t *w, int64_t i, float sc) {
    __m512i v;
    if (f == QT_F32) return _mm512_loadu_ps((const float *)w + i);
    if (f == QT_I8) v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + i)));
    else if (f == QT_I2) {
        uint32_t u;
        memcpy(&u, w + i / 4, 4);
        const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        v = _mm512_sub_epi32(_mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)u), sh), _mm512_set1_epi32(3)), _mm512_set1_epi32(2));
    } else {
        uint64_t u;
        memcpy(&u, w + i / 2, 8);
        const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i d = _mm512_inserti64x4(_mm512_set1_epi32((int)(uint32_t)u), _mm256_set1_epi32((int)(uint32_t)(u >> 32)), 1);
        v = _mm512_sub_epi32(_mm512_and_si512(_mm512_srlv_epi32(d, sh), _mm512_set1_epi32(15)), _mm512_set1_epi32(8));
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(sc));
}

/* The canonical 16-lane reduction (mm_tree16) of one vector. */
static MM_AI MM_TGT_AVX512 float mm512_tree16(__m512 L) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(L), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(L), 1)));
    return mm256_hsum(a);
}

/* Order-preserving pairwise add over [a | b]: [a0+a1, .., a14+a15, b0+b1,
 * .., b14+b15], one cross-lane permute (octets → chunk sums, tree levels). */
static MM_AI MM_TGT_AVX512 __m512i mm512_pairs(__m512i a, __m512i b) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    a = _mm512_add_epi32(a, _mm512_srli_epi64(a, 32));
    b = _mm512_add_epi32(b, _mm512_srli_epi64(b, 32));
    return _mm512_permutex2var_epi32(a, ie, b);
}

/* The canonical lane step from 16 group sums g (see mm_comb16). */
static MM_AI MM_TGT_AVX512 __m512 mm512_fstep(__m512i g, const int32_t *xg, const float *s, __m512 L) {
    g = _mm512_sub_epi32(g, _mm512_loadu_si512(xg));
    return _mm512_add_ps(L, _mm512_mul_ps(_mm512_cvtepi32_ps(g), _mm512_loadu_ps(s)));
}

/* Grouped stage 2 (see mm256_stage2) into one 16-lane vector. */
static MM_AI MM_TGT_AVX512 __m512 mm512_stage2(const int32_t *c16, int n16, const int32_t *xg, const float *s, __m512 L) {
    __m512i g;
    if (!(n16 & (n16 - 1))) {
        __m512i v[16];
        for (int k = 0; k < n16; k++) v[k] = _mm512_loadu_si512(c16 + 16 * k);
        for (int n = n16; n > 1; n >>= 1)
            for (int k = 0; k < n / 2; k++) v[k] = mm512_pairs(v[2 * k], v[2 * k + 1]);
        g = v[0];
    } else {
        int32_t t[16];
        mm_gsum16(c16, n16, t);
        g = _mm512_loadu_si512(t);
    }
    return mm512_fstep(g, xg, s, L);
}

/* Float path, one row × T activation rows: per pair two 16-lane FMA chains
 * over alternate 16-element steps, then the shared tail. */
static MM_AI MM_TGT_AVX512 void mm512_ftile(const mm_args *a, int64_t o, int s0, const qt_fmt f, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    const uint8_t *w = mm_wrow(W, o);
    const float *sr = mm_srow(W, o);
    const float *x[MM_TILE];
    __m512 acc[MM_TILE][2];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        x[t] = a->x + (size_t)(s0 + t) * (size_t)I;
        acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    }
    mm_gcursor gc = mm_gcursor_init(sr, gk);
    int64_t k = 0;
    for (; k + 2 <= n16; k += 2) {
        MM_PREFETCH(w + mm_boff(f, 16 * k) + MM_PF_DIST);
        if (f == QT_F32) MM_PREFETCH(w + mm_boff(f, 16 * k) + MM_PF_DIST + 64);
        __m512 w0 = mm512_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f));
        __m512 w1 = mm512_deq16(f, w, 16 * k + 16, mm_gcursor_next(&gc, f));
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + 16 * k), acc[t][0]);
            acc[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + 16 * k + 16), acc[t][1]);
        }
    }
    if (k < n16) {
        __m512 w0 = mm512_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f));
        MM_UNROLL
        for (int t = 0; t < T; t++) acc[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + 16 * k), acc[t][0]);
    }
    MM_UNROLL
    for (int t = 0; t < T; t++)
        a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] =
            mm512_tree16(_mm512_add_ps(acc[t][0], acc[t][1])) + mm_ftail(W, w, sr, x[t], 16 * n16, I);
}

static MM_AI MM_TGT_AVX512 void mm512_frows_f(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    for (int64_t o = o0; o < o1; o++)
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) switch (a->S - s0) {
            case 1: mm512_ftile(a, o, s0, f, 1); break;
            case 2: mm512_ftile(a, o, s0, f, 2); break;
            case 3: mm512_ftile(a, o, s0, f, 3); break;
            default: mm512_ftile(a, o, s0, f, 4); break;
            }
}

static inline MM_TGT_AVX512 void mm512_frows(const mm_args *a, int64_t o0, int64_t o1) {
    switch (a->W->fmt) {
    case QT_F32: mm512_frows_f(a, o0, o1, QT_F32); break;
    case QT_I8: mm512_frows_f(a, o0, o1, QT_I8); break;
    case QT_I4: mm512_frows_f(a, o0, o1, QT_I4); break;
    case QT_I2: mm512_frows_f(a, o0, o1, QT_I2); break;
    case QT_I4G: mm512_frows_f(a, o0, o1, QT_I4G); break;
    }
}

static MM_AI MM_TGT_AVX512 void mm512_mvt_f(const qt_tensor *W, const float *x, float *y, const qt_fmt f) {
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    memset(y, 0, (size_t)I * 4);
    for (int64_t o = 0; o < W->O; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        const __m512 av = _mm512_set1_ps(x[o]);
        mm_gcursor gc = mm_gcursor_init(sr, gk);
        for (int64_t k = 0; k < n16; k++) {
            __m512 wv = mm512_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f));
            _mm512_storeu_ps(y + 16 * k, _mm512_add_ps(_mm512_loadu_ps(y + 16 * k), _mm512_mul_ps(av, wv)));
        }
        for (int64_t i = 16 * n16; i < I; i++) y[i] = y[i] + x[o] * mm_deq1(W, w, sr, i);
    }
}

static inline MM_TGT_AVX512 void mm512_mvt(const qt_tensor *W, const float *x, float *y) {
    switch (W->fmt) {
    case QT_F32: mm512_mvt_f(W, x, y, QT_F32); break;
    case QT_I8: mm512_mvt_f(W, x, y, QT_I8); break;
    case QT_I4: mm512_mvt_f(W, x, y, QT_I4); break;
    case QT_I2: mm512_mvt_f(W, x, y, QT_I2); break;
    case QT_I4G: mm512_mvt_f(W, x, y, QT_I4G); break;
    }
}

#define MMT_X86_512 1
#define MMT_SFX avx512
#define MMT_TGT MM_TGT_AVX512
#define MMT_DP(acc, u, s) _mm512_add_epi32((acc), _mm512_madd_epi16(_mm512_maddubs_epi16((u), (s)), _mm512_set1_epi16(1)))
#include "quant.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#define MMT_SFX avx512vnni
#define MMT_TGT __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))
#define MMT_DP(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#include "quant.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#undef MMT_X86_512

#endif /* MM_X86 */

/* ================================================================= aarch64 */
#ifdef MM_ARM
/* dotprod/i8mm intrinsics need armv8.2-a; a build that already has the
 * feature gets no attribute (so its own -march stays a superset). */
#ifdef __ARM_FEATURE_DOTPROD
#define MM_TGT_DOT
#ifdef __ARM_FEATURE_MATMUL_INT8
#define MM_TGT_I8MM
#else
#define MM_TGT_I8MM __attribute__((target("+i8mm")))
#endif
#else
#define MM_TGT_DOT __attribute__((target("arch=armv8.2-a+dotprod")))
#define MM_TGT_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif

/* Elements [i, i+16) of row w (i a multiple of 16) dequantized: q·sc. */
static MM_AI void mmn_deq16(qt_fmt f, const uint8_t *w, int64_t i, float sc, float32x4_t *v) {
    if (f == QT_F32) {
        MM_UNROLL
        for (int j = 0; j < 4; j++) v[j] = vld1q_f32((const float *)w + i + 4 * j);
        return;
    }
    int8x16_t q;
    if (f == QT_I8) q = vld1q_s8((const int8_t *)w + i);
    else if (f == QT_I2) {
        uint8x16_t b = vreinterpretq_u8_u32(vdupq_n_u32(0));
        uint32_t u;
        memcpy(&u, w + i / 4, 4);
        b = vreinterpretq_u8_u32(vsetq_lane_u32(u, vreinterpretq_u32_u8(b), 0));
        static const uint8_t ix[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
        static const int8_t sh[16] = {0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6};
        uint8x16_t c = vandq_u8(vshlq_u8(vqtbl1q_u8(b, vld1q_u8(ix)), vld1q_s8(sh)), vdupq_n_u8(3));
        q = vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(2));
    } else {
        uint8x8_t b = vld1_u8(w + i / 2);
        uint8x8x2_t z = vzip_u8(vand_u8(b, vdup_n_u8(15)), vshr_n_u8(b, 4));
        q = vsubq_s8(vreinterpretq_s8_u8(vcombine_u8(z.val[0], z.val[1])), vdupq_n_s8(8));
    }
    int16x8_t l = vmovl_s8(vget_low_s8(q)), h = vmovl_high_s8(q);
    const float32x4_t vs = vdupq_n_f32(sc);
    v[0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(l))), vs);
    v[1] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(l)), vs);
    v[2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vs);
    v[3] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(h)), vs);
}

/* The canonical 16-lane reduction (mm_tree16) over L[0..3] (lanes 4j..4j+3). */
static MM_AI float mmn_tree16(const float32x4_t *L) {
    float32x4_t b = vaddq_f32(vaddq_f32(L[0], L[2]), vaddq_f32(L[1], L[3]));
    float32x2_t c = vadd_f32(vget_low_f32(b), vget_high_f32(b));
    return vget_lane_f32(c, 0) + vget_lane_f32(c, 1);
}

/* Grouped stage 2 (see mm256_stage2) into L[0..3]. */
static MM_AI void mmn_stage2(const int32_t *c16, int n16, const int32_t *xg, const float *s, float32x4_t *L) {
    int32x4_t g[4];
    if (!(n16 & (n16 - 1))) {
        int32x4_t v[64];
        for (int k = 0; k < 4 * n16; k++) v[k] = vld1q_s32(c16 + 4 * k);
        for (int n = 4 * n16; n > 4; n >>= 1)
            for (int k = 0; k < n / 2; k++) v[k] = vpaddq_s32(v[2 * k], v[2 * k + 1]);
        MM_UNROLL
        for (int j = 0; j < 4; j++) g[j] = v[j];
    } else {
        int32_t t[16];
        mm_gsum16(c16, n16, t);
        MM_UNROLL
        for (int j = 0; j < 4; j++) g[j] = vld1q_s32(t + 4 * j);
    }
    MM_UNROLL
    for (int j = 0; j < 4; j++)
        L[j] = vaddq_f32(L[j], vmulq_f32(vcvtq_f32_s32(vsubq_s32(g[j], vld1q_s32(xg + 4 * j))), vld1q_f32(s + 4 * j)));
}

/* Float path, one row × T activation rows: per pair four 4-lane FMA chains
 * over 16-element steps, then the shared tail. */
static MM_AI void mmn_ftile(const mm_args *a, int64_t o, int s0, const qt_fmt f, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    const uint8_t *w = mm_wrow(W, o);
    const float *sr = mm_srow(W, o);
    const float *x[MM_TILE];
    float32x4_t acc[MM_TILE][4];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        x[t] = a->x + (size_t)(s0 + t) * (size_t)I;
        MM_UNROLL
        for (int j = 0; j < 4; j++) acc[t][j] = vdupq_n_f32(0.0f);
    }
    mm_gcursor gc = mm_gcursor_init(sr, gk);
    for (int64_t k = 0; k < n16; k++) {
        MM_PREFETCH(w + mm_boff(f, 16 * k) + MM_PF_DIST);
        float32x4_t wv[4];
        mmn_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f), wv);
        MM_UNROLL
        for (int t = 0; t < T; t++)
            MM_UNROLL
            for (int j = 0; j < 4; j++) acc[t][j] = vfmaq_f32(acc[t][j], wv[j], vld1q_f32(x[t] + 16 * k + 4 * j));
    }
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        float32x4_t v = vaddq_f32(vaddq_f32(acc[t][0], acc[t][1]), vaddq_f32(acc[t][2], acc[t][3]));
        a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] = vaddvq_f32(v) + mm_ftail(W, w, sr, x[t], 16 * n16, I);
    }
}

static MM_AI void mmn_frows_f(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    for (int64_t o = o0; o < o1; o++)
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) switch (a->S - s0) {
            case 1: mmn_ftile(a, o, s0, f, 1); break;
            case 2: mmn_ftile(a, o, s0, f, 2); break;
            case 3: mmn_ftile(a, o, s0, f, 3); break;
            default: mmn_ftile(a, o, s0, f, 4); break;
            }
}

static inline void mmn_frows(const mm_args *a, int64_t o0, int64_t o1) {
    switch (a->W->fmt) {
    case QT_F32: mmn_frows_f(a, o0, o1, QT_F32); break;
    case QT_I8: mmn_frows_f(a, o0, o1, QT_I8); break;
    case QT_I4: mmn_frows_f(a, o0, o1, QT_I4); break;
    case QT_I2: mmn_frows_f(a, o0, o1, QT_I2); break;
    case QT_I4G: mmn_frows_f(a, o0, o1, QT_I4G); break;
    }
}

static MM_AI void mmn_mvt_f(const qt_tensor *W, const float *x, float *y, const qt_fmt f) {
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    memset(y, 0, (size_t)I * 4);
    for (int64_t o = 0; o < W->O; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        const float32x4_t av = vdupq_n_f32(x[o]);
        mm_gcursor gc = mm_gcursor_init(sr, gk);
        for (int64_t k = 0; k < n16; k++) {
            float32x4_t wv[4];
            mmn_deq16(f, w, 16 * k, mm_gcursor_next(&gc, f), wv);
            MM_UNROLL
            for (int j = 0; j < 4; j++) vst1q_f32(y + 16 * k + 4 * j, vaddq_f32(vld1q_f32(y + 16 * k + 4 * j), vmulq_f32(av, wv[j])));
        }
        for (int64_t i = 16 * n16; i < I; i++) y[i] = y[i] + x[o] * mm_deq1(W, w, sr, i);
    }
}

static inline void mmn_mvt(const qt_tensor *W, const float *x, float *y) {
    switch (W->fmt) {
    case QT_F32: mmn_mvt_f(W, x, y, QT_F32); break;
    case QT_I8: mmn_mvt_f(W, x, y, QT_I8); break;
    case QT_I4: mmn_mvt_f(W, x, y, QT_I4); break;
    case QT_I2: mmn_mvt_f(W, x, y, QT_I2); break;
    case QT_I4G: mmn_mvt_f(W, x, y, QT_I4G); break;
    }
}

/* Nibble planes of 16 packed bytes: lo = even elements, hi = odd. */
static MM_AI void mmn_nib(const uint8_t *p, int8x16_t *lo, int8x16_t *hi) {
    uint8x16_t b = vld1q_u8(p);
    *lo = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(15)));
    *hi = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
}

/* Crumb planes of 16 packed bytes: c[p] = elements 4j+p. */
static MM_AI void mmn_crumb(const uint8_t *p, int8x16_t *c) {
    uint8x16_t b = vld1q_u8(p);
    const uint8x16_t m = vdupq_n_u8(3);
    c[0] = vreinterpretq_s8_u8(vandq_u8(b, m));
    c[1] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(b, 2), m));
    c[2] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(b, 4), m));
    c[3] = vreinterpretq_s8_u8(vshrq_n_u8(b, 6));
}

/* smull/sadalp dot: acc + products of u·s pairwise into int32 lanes. */
static MM_AI int32x4_t mmn_dp_base(int32x4_t acc, int8x16_t u, int8x16_t s) {
    return vpadalq_s16(vpadalq_s16(acc, vmull_s8(vget_low_s8(u), vget_low_s8(s))), vmull_high_s8(u, s));
}

/* 32-element int4 block: lanes (0,1) sum to elements 0..15, (2,3) to 16..31. */
static MM_AI int32x4_t mmn_oct_base(int8x16_t lo, int8x16_t xe, int8x16_t hi, int8x16_t xo) {
    int16x8_t p = vmlal_s8(vmull_s8(vget_low_s8(lo), vget_low_s8(xe)), vget_low_s8(hi), vget_low_s8(xo));
    int16x8_t q = vmlal_high_s8(vmull_high_s8(lo, xe), hi, xo);
    return vpaddlq_s16(vpaddq_s16(p, q));
}

#define MMT_NEON 1
#define MMT_SFX neon
#define MMT_TGT
#define MMT_DP(acc, u, s) mmn_dp_base((acc), (u), (s))
#define MMT_OCT(lo, xe, hi, xo) mmn_oct_base((lo), (xe), (hi), (xo))
#include "quant.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#undef MMT_OCT
#define MMT_SFX dotprod
#define MMT_TGT MM_TGT_DOT
#define MMT_DP(acc, u, s) vdotq_s32((acc), (u), (s))
#define MMT_OCT(lo, xe, hi, xo) vdotq_s32(vdotq_s32(vdupq_n_s32(0), (lo), (xe)), (hi), (xo))
#include "quant.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#undef MMT_OCT
#undef MMT_NEON

/* i8mm: acc[r0s0, r0s1, r1s0, r1s1] += 16-byte code vectors u0 (row 0), u1
 * (row 1) against activation vectors v0 (s 0), v1 (s 1), via two smmla. */
static MM_AI MM_TGT_I8MM int32x4_t mmn_mmla16(int32x4_t acc, int8x16_t u0, int8x16_t u1, int8x16_t v0, int8x16_t v1) {
    int64x2_t a0 = vreinterpretq_s64_s8(u0), a1 = vreinterpretq_s64_s8(u1), b0 = vreinterpretq_s64_s8(v0), b1 = vreinterpretq_s64_s8(v1);
    acc = vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip1q_s64(a0, a1)), vreinterpretq_s8_s64(vzip1q_s64(b0, b1)));
    return vmmlaq_s32(acc, vreinterpretq_s8_s64(vzip2q_s64(a0, a1)), vreinterpretq_s8_s64(vzip2q_s64(b0, b1)));
}

/* Per-row formats, 2 rows × 2 activation rows through smmla. */
static MM_AI MM_TGT_I8MM void mmn_i8mm_quad(const mm_args *a, int64_t o, int s, const qt_fmt f) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, blk = mm_act_blk(f, 16), nb = I / blk;
    const uint8_t *w0 = mm_wrow(W, o), *w1 = mm_wrow(W, o + 1);
    const int8_t *q0 = a->qx + (size_t)s * (size_t)a->ldq, *q1 = q0 + a->ldq;
    int32x4_t acc0 = vdupq_n_s32(0), acc1 = vdupq_n_s32(0);
    for (int64_t b = 0; b < nb; b++) {
        if (!(b & 3)) {
            MM_PREFETCH(w0 + 16 * b + MM_PF_DIST);
            MM_PREFETCH(w1 + 16 * b + MM_PF_DIST);
        }
        if (f == QT_I8) {
            acc0 = mmn_mmla16(acc0, vld1q_s8((const int8_t *)w0 + 16 * b), vld1q_s8((const int8_t *)w1 + 16 * b), vld1q_s8(q0 + 16 * b),
                              vld1q_s8(q1 + 16 * b));
        } else if (f == QT_I4) {
            int8x16_t l0, h0, l1, h1;
            mmn_nib(w0 + 16 * b, &l0, &h0);
            mmn_nib(w1 + 16 * b, &l1, &h1);
            acc0 = mmn_mmla16(acc0, l0, l1, vld1q_s8(q0 + 32 * b), vld1q_s8(q1 + 32 * b));
            acc1 = mmn_mmla16(acc1, h0, h1, vld1q_s8(q0 + 32 * b + 16), vld1q_s8(q1 + 32 * b + 16));
        } else {
            int8x16_t c0[4], c1[4];
            mmn_crumb(w0 + 16 * b, c0);
            mmn_crumb(w1 + 16 * b, c1);
            for (int p = 0; p < 4; p += 2) {
                acc0 = mmn_mmla16(acc0, c0[p], c1[p], vld1q_s8(q0 + 64 * b + 16 * p), vld1q_s8(q1 + 64 * b + 16 * p));
                acc1 = mmn_mmla16(acc1, c0[p + 1], c1[p + 1], vld1q_s8(q0 + 64 * b + 16 * p + 16), vld1q_s8(q1 + 64 * b + 16 * p + 16));
            }
        }
    }
    int32_t d[4];
    vst1q_s32(d, vaddq_s32(acc0, acc1));
    MM_UNROLL
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < 2; t++) {
            const int8_t *q = t ? q1 : q0;
            int32_t D = d[2 * r + t] + mm_idot_tail(f, r ? w1 : w0, q, nb * blk, I);
            a->y[(size_t)(s + t) * (size_t)W->O + (size_t)(o + r)] =
                mm_ifinish(D, a->xg[(size_t)(s + t) * (size_t)a->ldg], mm_srow(W, o + r)[0], a->xs[s + t]);
        }
}

/* Grouped int4, 2 rows × 2 activation rows through smmla: each 32-element
 * block gives the two chunk sums of all four pairs. */
static MM_AI MM_TGT_I8MM void mmn_i8mm_gquad(const mm_args *a, int64_t o, int s) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, gs = W->gs, ng = qt_row_scales(W), n16 = gs / 16, sbl = 16 * gs, nbt = I / 32;
    const uint8_t *w[2] = {mm_wrow(W, o), mm_wrow(W, o + 1)};
    const int8_t *q[2] = {a->qx + (size_t)s * (size_t)a->ldq, a->qx + (size_t)(s + 1) * (size_t)a->ldq};
    __attribute__((aligned(64))) int32_t c16[4][QT_GS_MAX];
    float32x4_t L[4][4];
    MM_UNROLL
    for (int p = 0; p < 4; p++)
        MM_UNROLL
        for (int j = 0; j < 4; j++) L[p][j] = vdupq_n_f32(0.0f);
    float sbuf[2][16];
    for (int64_t sb = 0; 16 * sb < ng; sb++) {
        const int64_t e0 = sb * sbl, e1 = e0 + sbl < I ? e0 + sbl : I, bA = e0 / 32, bB = e1 / 32 < nbt ? e1 / 32 : nbt;
        for (int64_t b = bA; b < bB; b++) {
            if (!(b & 3)) {
                MM_PREFETCH(w[0] + 16 * b + MM_PF_DIST);
                MM_PREFETCH(w[1] + 16 * b + MM_PF_DIST);
            }
            int8x16_t l0, h0, l1, h1;
            mmn_nib(w[0] + 16 * b, &l0, &h0);
            mmn_nib(w[1] + 16 * b, &l1, &h1);
            int64x2_t xe0 = vreinterpretq_s64_s8(vld1q_s8(q[0] + 32 * b)), xo0 = vreinterpretq_s64_s8(vld1q_s8(q[0] + 32 * b + 16));
            int64x2_t xe1 = vreinterpretq_s64_s8(vld1q_s8(q[1] + 32 * b)), xo1 = vreinterpretq_s64_s8(vld1q_s8(q[1] + 32 * b + 16));
            int64x2_t L0 = vreinterpretq_s64_s8(l0), L1 = vreinterpretq_s64_s8(l1), H0 = vreinterpretq_s64_s8(h0), H1 = vreinterpretq_s64_s8(h1);
#define MMN_Z(fn, a, b) vreinterpretq_s8_s64(fn(a, b))
            int32x4_t c0 = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), MMN_Z(vzip1q_s64, L0, L1), MMN_Z(vzip1q_s64, xe0, xe1)), MMN_Z(vzip1q_s64, H0, H1),
                                      MMN_Z(vzip1q_s64, xo0, xo1));
            int32x4_t c1 = vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), MMN_Z(vzip2q_s64, L0, L1), MMN_Z(vzip2q_s64, xe0, xe1)), MMN_Z(vzip2q_s64, H0, H1),
                                      MMN_Z(vzip2q_s64, xo0, xo1));
#undef MMN_Z
            int32x4_t z0 = vzip1q_s32(c0, c1), z1 = vzip2q_s32(c0, c1);
            const int64_t k = 2 * (b - bA);
            vst1_s32(c16[0] + k, vget_low_s32(z0));
            vst1_s32(c16[1] + k, vget_high_s32(z0));
            vst1_s32(c16[2] + k, vget_low_s32(z1));
            vst1_s32(c16[3] + k, vget_high_s32(z1));
        }
        const int64_t it = 32 * bB > e0 ? 32 * bB : e0, nv = (e1 - e0 + 15) / 16;
        MM_UNROLL
        for (int p = 0; p < 4; p++) {
            if (it < e1) mm_c16_tail(w[p >> 1], q[p & 1], e0, it, e1, c16[p]);
            memset(c16[p] + nv, 0, (size_t)(16 * n16 - nv) * 4);
        }
        const float *sc[2] = {mm_sb_scales(mm_srow(W, o), ng, sb, sbuf[0]), mm_sb_scales(mm_srow(W, o + 1), ng, sb, sbuf[1])};
        MM_UNROLL
        for (int p = 0; p < 4; p++) mmn_stage2(c16[p], (int)n16, a->xg + (size_t)(s + (p & 1)) * (size_t)a->ldg + 16 * sb, sc[p >> 1], L[p]);
    }
    MM_UNROLL
    for (int p = 0; p < 4; p++) a->y[(size_t)(s + (p & 1)) * (size_t)W->O + (size_t)(o + (p >> 1))] = mmn_tree16(L[p]) * a->xs[s + (p & 1)];
}

/* i8mm level: row pairs × activation pairs through smmla; odd leftovers and
 * S = 1 through the dotprod kernels (exact integers, so identical results). */
static inline MM_TGT_I8MM void mmn_irows_i8mm(const mm_args *a, int64_t o0, int64_t o1) {
    const qt_fmt f = a->W->fmt;
    if (a->S < 2) {
        mmn_irows_dotprod(a, o0, o1);
        return;
    }
    int64_t o = o0;
    for (; o + 2 <= o1; o += 2) {
        int s = 0;
        for (; s + 2 <= a->S; s += 2) switch (f) {
            case QT_I8: mmn_i8mm_quad(a, o, s, QT_I8); break;
            case QT_I4: mmn_i8mm_quad(a, o, s, QT_I4); break;
            case QT_I2: mmn_i8mm_quad(a, o, s, QT_I2); break;
            case QT_I4G: mmn_i8mm_gquad(a, o, s); break;
            default: break;
            }
        if (s < a->S) {
            mmn_itile1_dotprod(a, o, s);
            mmn_itile1_dotprod(a, o + 1, s);
        }
    }
    if (o < o1) mmn_irows_dotprod(a, o, o1);
}
#endif /* MM_ARM */

/* ================================================================ dispatch */

/* Name of a level for logs and flags ("scalar", "avx2", "avxvnni", "avx512",
 * "avx512vnni", "neon", "neon-dotprod", "neon-i8mm"); "?" if out of range. */
static inline const char *mm_level_name(int level) {
    static const char *const n[MM_NLEVELS] = {"scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "neon-dotprod", "neon-i8mm"};
    return level >= 0 && level < MM_NLEVELS ? n[level] : "?";
}

/* Level from its name (as mm_level_name), or -1 if unknown. */
static inline int mm_level_parse(const char *name) {
    for (int l = 0; l < MM_NLEVELS; l++)
        if (name && !strcmp(name, mm_level_name(l))) return l;
    return -1;
}

/* What a level needs from the CPU, for refusals. */
static inline const char *mm_level_needs(int level) {
    static const char *const n[MM_NLEVELS] = {"nothing", "x86-64 with AVX2 and FMA", "AVX2 and AVX-VNNI", "AVX-512 F/BW/VL with OS support",
                                              "AVX-512 F/BW/VL and AVX512-VNNI", "aarch64", "aarch64 with dotprod", "aarch64 with dotprod and i8mm"};
    return level >= 0 && level < MM_NLEVELS ? n[level] : "?";
}

#ifdef MM_X86
/* XCR0: which register states the OS saves. */
static inline uint64_t mm_xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

/* 1 if this build has the level and this CPU (and OS) can run it. */
static inline int mm_level_ok(int level) {
    if (level == MM_SCALAR) return 1;
#ifdef MM_X86
    unsigned a, b, c, d, b7 = 0, c7 = 0, a71 = 0;
    if (level > MM_AVX512VNNI || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx || !fma) return 0;
    const uint64_t xcr0 = mm_xgetbv0();
    if ((xcr0 & 6) != 6) return 0;
    if (__get_cpuid_count(7, 0, &a, &b7, &c7, &d)) {
        unsigned x;
        if (a >= 1) __get_cpuid_count(7, 1, &a71, &x, &x, &x);
    }
    const int avx2 = (b7 >> 5) & 1, avx512 = ((b7 >> 16) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1) && (xcr0 & 0xE6) == 0xE6;
    switch (level) {
    case MM_AVX2: return avx2;
    case MM_AVXVNNI: return avx2 && ((a71 >> 4) & 1);
    case MM_AVX512: return avx2 && avx512;
    case MM_AVX512VNNI: return avx2 && avx512 && ((c7 >> 11) & 1);
    }
    return 0;
#elif defined(MM_ARM)
    if (level < MM_NEON) return 0;
    if (level == MM_NEON) return 1;
#if defined(__linux__)
    const unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    const int dot = (h1 >> 20) & 1, i8mm = (h2 >> 13) & 1; /* HWCAP_ASIMDDP, HWCAP2_I8MM */
#else
    int dot = 0, i8mm = 0;
#ifdef __ARM_FEATURE_DOTPROD
    dot = 1;
#endif
#ifdef __ARM_FEATURE_MATMUL_INT8
    i8mm = 1;
#endif
#endif
    return level == MM_NEON_DOT ? dot : dot && i8mm;
#else
    return 0;
#endif
}

/* The best level this CPU supports. */
static inline int mm_best_level(void) {
    static const int pref[] = {MM_NEON_I8MM, MM_NEON_DOT, MM_NEON, MM_AVX512VNNI, MM_AVX512, MM_AVXVNNI, MM_AVX2};
    for (size_t i = 0; i < sizeof pref / sizeof pref[0]; i++)
        if (mm_level_ok(pref[i])) return pref[i];
    return MM_SCALAR;
}

/* The kernel table of a level (the caller has checked mm_level_ok). */
static inline const mm_kernels *mm_kernels_of(int level) {
    static const mm_kernels t[MM_NLEVELS] = {
        [MM_SCALAR] = {"scalar", 0, mm_frows_ref, mm_irows_ref, mm_mvt_ref},
#ifdef MM_X86
        [MM_AVX2] = {"avx2", 32, mm256_frows, mm256_irows_avx2, mm256_mvt},
        [MM_AVXVNNI] = {"avxvnni", 32, mm256_frows, mm256_irows_avxvnni, mm256_mvt},
        [MM_AVX512] = {"avx512", 64, mm512_frows, mm512_irows_avx512, mm512_mvt},
        [MM_AVX512VNNI] = {"avx512vnni", 64, mm512_frows, mm512_irows_avx512vnni, mm512_mvt},
#endif
#ifdef MM_ARM
        [MM_NEON] = {"neon", 16, mmn_frows, mmn_irows_neon, mmn_mvt},
        [MM_NEON_DOT] = {"neon-dotprod", 16, mmn_frows, mmn_irows_dotprod, mmn_mvt},
        [MM_NEON_I8MM] = {"neon-i8mm", 16, mmn_frows, mmn_irows_i8mm, mmn_mvt},
#endif
    };
    return &t[level];
}

/* Frees c's scratch; c may then be re-initialised. */
static inline void mm_free(mm_ctx *c) {
    free(c->qx);
    free(c->xs);
    free(c->xg);
    memset(c, 0, sizeof *c);
}

/* Sets up c for one level (-1 = mm_best_level()), idot on/off, and calls of
 * at most max_rows activation rows of at most max_cols inputs (larger calls
 * still work: S is chunked, I beyond max_cols takes the float path). 0 ok,
 * -1 with err set (level unknown or not supported by this CPU, bad sizes,
 * out of memory). */
static inline int mm_init(mm_ctx *c, int level, int idot, int max_rows, int64_t max_cols, char *err, size_t n) {
    memset(c, 0, sizeof *c);
    if (level < 0) level = mm_best_level();
    if (level >= MM_NLEVELS) {
        snprintf(err, n, "unknown kernel level %d", level);
        return -1;
    }
    if (!mm_level_ok(level)) {
        snprintf(err, n, "kernel level %s is not supported here (needs %s)", mm_level_name(level), mm_level_needs(level));
        return -1;
    }
    if (max_rows < 1 || max_cols < 1) {
        snprintf(err, n, "bad kernel scratch size: %d rows of %lld columns", max_rows, (long long)max_cols);
        return -1;
    }
    c->level = level;
    c->idot = idot != 0;
    c->k = mm_kernels_of(level);
    c->max_rows = max_rows;
    c->max_cols = max_cols < MM_IDOT_MAX_I ? max_cols : MM_IDOT_MAX_I;
    if (!c->idot) return 0;
    c->ldq = (c->max_cols + 255) / 256 * 256;
    c->ldg = ((c->max_cols + 15) / 16 + 15) / 16 * 16;
    c->qx = (int8_t *)aligned_alloc(64, (size_t)max_rows * (size_t)c->ldq);
    c->xs = (float *)malloc((size_t)max_rows * sizeof(float));
    c->xg = (int32_t *)aligned_alloc(64, (size_t)max_rows * (size_t)c->ldg * 4);
    if (!c->qx || !c->xs || !c->xg) {
        mm_free(c);
        snprintf(err, n, "out of memory for kernel scratch (%d rows of %lld columns)", max_rows, (long long)max_cols);
        return -1;
    }
    return 0;
}

/* One thread's share of mm_matmul: quantize its activation rows (integer
 * path), wait for all, compute its contiguous block of output rows. */
static inline void mm_matmul_part(const mm_ctx *c, const mm_args *a, int use_i, int tid, int nth) {
    const qt_tensor *W = a->W;
    if (use_i) {
        for (int s = tid; s < a->S; s += nth)
            mm_act_quant(a->x + (size_t)s * (size_t)W->I, W->I, W->fmt, W->gs, c->k->vb, c->qx + (size_t)s * (size_t)c->ldq, c->xs + s,
                         c->xg + (size_t)s * (size_t)c->ldg);
#ifdef _OPENMP
#pragma omp barrier
#endif
    }
    int64_t per = (W->O + nth - 1) / nth;
    per += per & 1;
    const int64_t r0 = (int64_t)tid * per < W->O ? (int64_t)tid * per : W->O, r1 = r0 + per < W->O ? r0 + per : W->O;
    if (r0 < r1) (use_i ? c->k->irows : c->k->frows)(a, r0, r1);
}

/* y[S][O] = x[S][I] · Wᵀ with c's level; OpenMP-parallel over output rows
 * inside; uses c's scratch, so never call it concurrently on one c; no
 * allocation. y[s][o] depends only on W row o and x row s (not on S, other
 * rows or the thread count). */
static inline void mm_matmul(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y) {
    if (S <= 0 || W->O <= 0) return;
    const int use_i = c->idot && W->fmt != QT_F32 && W->I <= c->max_cols;
    const int chunk = use_i ? c->max_rows : S;
    for (int s0 = 0; s0 < S; s0 += chunk) {
        const int n = S - s0 < chunk ? S - s0 : chunk;
        const mm_args a = {W, x + (size_t)s0 * (size_t)W->I, y + (size_t)s0 * (size_t)W->O, n, c->qx, c->xs, c->xg, c->ldq, c->ldg};
#ifdef _OPENMP
        const int par = (double)W->O * (double)W->I * n > 131072.0 && W->O > 1;
#pragma omp parallel if (par)
        mm_matmul_part(c, &a, use_i, omp_get_thread_num(), omp_get_num_threads());
#else
        mm_matmul_part(c, &a, use_i, 0, 1);
#endif
    }
}

/* y[I] = Σ_o x[o]·deq(W[o,:]) (the transposed product, for absorbed MLA):
 * in increasing o, each step y + x[o]·deq, so bit-identical on every level;
 * single-threaded and reentrant (reads c only). */
static inline void mm_matvec_t(const mm_ctx *c, const qt_tensor *W, const float *x, float *y) { c->k->mvt(W, x, y); }

/* Dot product of n floats with four independent accumulators (plain C). */
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

#elif defined(MMT_X86_256) || defined(MMT_X86_512)
/* ============================================= template: x86 integer kernels
 * One file section for both widths: MMV is the vector width in bytes. */
#ifdef MMT_X86_256
#define MMV 32
#define MMT_I __m256i
#define MMT_LD(p) _mm256_loadu_si256((const __m256i *)(p))
#define MMT_ST(p, v) _mm256_storeu_si256((__m256i *)(p), (v))
#define MMT_ZERO _mm256_setzero_si256()
#define MMT_AND _mm256_and_si256
#define MMT_SRL16 _mm256_srli_epi16
#define MMT_SET8 _mm256_set1_epi8
#define MMT_ADD32 _mm256_add_epi32
#define MMT_PAIRS mm256_pairs
#define MMT_HSUM mm256_hsum_i32
#define MMT_PRE mm256
/* |w| and x·sign(w) for signed int8 weights */
#define MMT_ABS8(w) _mm256_abs_epi8(w)
#define MMT_SIGNX(x, w, neg) _mm256_sign_epi8((x), (w))
#define MMT_NEGMASK(w) 0
#define mmt_L __m256
#define MMT_LZERO(L)                       \
    do {                                   \
        (L)[0] = _mm256_setzero_ps();      \
        (L)[1] = _mm256_setzero_ps();      \
    } while (0)
#define MMT_STAGE2(c16, n16, xg, s, L) mm256_stage2((c16), (n16), (xg), (s), (L))
#define MMT_FSTEP(g, xg, s, L) mm256_fstep((g)[0], (g)[1], (xg), (s), (L))
#define MMT_TREE(L) mm256_tree16(L)
#else
#define MMV 64
#define MMT_I __m512i
#define MMT_LD(p) _mm512_loadu_si512((const void *)(p))
#define MMT_ST(p, v) _mm512_storeu_si512((void *)(p), (v))
#define MMT_ZERO _mm512_setzero_si512()
#define MMT_AND _mm512_and_si512
#define MMT_SRL16 _mm512_srli_epi16
#define MMT_SET8 _mm512_set1_epi8
#define MMT_ADD32 _mm512_add_epi32
#define MMT_PAIRS mm512_pairs
#define MMT_HSUM _mm512_reduce_add_epi32
#define MMT_PRE mm512
#define MMT_ABS8(w) _mm512_abs_epi8(w)
#define MMT_NEGMASK(w) _mm512_movepi8_mask(w)
#define MMT_SIGNX(x, w, neg) _mm512_mask_sub_epi8((x), (neg), _mm512_setzero_si512(), (x))
#define mmt_L __m512
#define MMT_LZERO(L) ((L)[0] = _mm512_setzero_ps())
#define MMT_STAGE2(c16, n16, xg, s, L) ((L)[0] = mm512_stage2((c16), (n16), (xg), (s), (L)[0]))
#define MMT_FSTEP(g, xg, s, L) ((L)[0] = mm512_fstep((g)[0], (xg), (s), (L)[0]))
#define MMT_TREE(L) mm512_tree16((L)[0])
#endif
#define MMT_N(name) MMT_F(MMT_CAT(MMT_PRE, name))

/* Per-row formats, one row × T activation rows: exact int32 dots, two
 * accumulators per pair, then the shared scalar tail. */
static MM_AI MMT_TGT void MMT_N(itile)(const mm_args *a, int64_t o, int s0, const qt_fmt f, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, blk = mm_act_blk(f, MMV), nb = I / blk;
    const uint8_t *w = mm_wrow(W, o);
    const int8_t *q[MM_TILE];
    MMT_I acc[MM_TILE][2];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        q[t] = a->qx + (size_t)(s0 + t) * (size_t)a->ldq;
        acc[t][0] = acc[t][1] = MMT_ZERO;
    }
    const MMT_I m4 = MMT_SET8(15), m2 = MMT_SET8(3);
    int64_t b = 0;
    if (f == QT_I8) /* two blocks per step: two chains per pair */
        for (; b + 2 <= nb; b += 2) {
            MM_PREFETCH(w + MMV * b + MM_PF_DIST);
            if (MMV == 64) MM_PREFETCH(w + MMV * b + MM_PF_DIST + 64);
            const MMT_I w0 = MMT_LD(w + MMV * b), w1 = MMT_LD(w + MMV * (b + 1)), a0 = MMT_ABS8(w0), a1 = MMT_ABS8(w1);
            const uint64_t n0 = MMT_NEGMASK(w0), n1 = MMT_NEGMASK(w1);
            (void)n0, (void)n1;
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                acc[t][0] = MMT_DP(acc[t][0], a0, MMT_SIGNX(MMT_LD(q[t] + MMV * b), w0, n0));
                acc[t][1] = MMT_DP(acc[t][1], a1, MMT_SIGNX(MMT_LD(q[t] + MMV * (b + 1)), w1, n1));
            }
        }
    for (; b < nb; b++) {
        MM_PREFETCH(w + MMV * b + MM_PF_DIST);
        const MMT_I wv = MMT_LD(w + MMV * b);
        if (f == QT_I8) {
            const MMT_I aw = MMT_ABS8(wv);
            const uint64_t neg = MMT_NEGMASK(wv);
            (void)neg;
            MM_UNROLL
            for (int t = 0; t < T; t++) acc[t][0] = MMT_DP(acc[t][0], aw, MMT_SIGNX(MMT_LD(q[t] + MMV * b), wv, neg));
        } else if (f == QT_I4) {
            const MMT_I lo = MMT_AND(wv, m4), hi = MMT_AND(MMT_SRL16(wv, 4), m4);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                acc[t][0] = MMT_DP(acc[t][0], lo, MMT_LD(q[t] + blk * b));
                acc[t][1] = MMT_DP(acc[t][1], hi, MMT_LD(q[t] + blk * b + MMV));
            }
        } else {
            const MMT_I c0 = MMT_AND(wv, m2), c1 = MMT_AND(MMT_SRL16(wv, 2), m2), c2 = MMT_AND(MMT_SRL16(wv, 4), m2),
                        c3 = MMT_AND(MMT_SRL16(wv, 6), m2);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + blk * b;
                acc[t][0] = MMT_DP(MMT_DP(acc[t][0], c0, MMT_LD(x)), c2, MMT_LD(x + 2 * MMV));
                acc[t][1] = MMT_DP(MMT_DP(acc[t][1], c1, MMT_LD(x + MMV)), c3, MMT_LD(x + 3 * MMV));
            }
        }
    }
    const float so = mm_srow(W, o)[0];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        int32_t D = MMT_HSUM(MMT_ADD32(acc[t][0], acc[t][1])) + mm_idot_tail(f, w, q[t], nb * blk, I);
        a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] = mm_ifinish(D, a->xg[(size_t)(s0 + t) * (size_t)a->ldg], so, a->xs[s0 + t]);
    }
}

/* One full super-block of one activation row with N16 (chunks per group, a
 * power of two) known at compile time: chunk sums and the reduction tree
 * stay in registers. Same integers as the generic path. */
static MM_AI MMT_TGT void MMT_N(gsb)(const uint8_t *w, const int8_t *q, int64_t b0, const int N16, const int32_t *xg, const float *sc,
                                      mmt_L *L) {
    enum { NCV = 256 * 16 / (2 * MMV) / 2 }; /* chunk vectors of a super-block at N16 = 16 */
    const int64_t blk = 2 * MMV;
    const int ncv = 256 * N16 / blk / 2, ng = 64 / MMV; /* chunk vectors, group-sum vectors */
    const MMT_I m4 = MMT_SET8(15);
    MMT_I cv[NCV];
    _Pragma("GCC unroll 32") for (int k = 0; k < ncv; k++) {
        const int64_t b = b0 + 2 * k;
        MM_PREFETCH(w + MMV * b + MM_PF_DIST);
        if (MMV == 64) MM_PREFETCH(w + MMV * b + MM_PF_DIST + 64);
        const MMT_I w0 = MMT_LD(w + MMV * b), w1 = MMT_LD(w + MMV * (b + 1));
        const int8_t *x = q + blk * b;
        MMT_I p0 = MMT_DP(MMT_DP(MMT_ZERO, MMT_AND(w0, m4), MMT_LD(x)), MMT_AND(MMT_SRL16(w0, 4), m4), MMT_LD(x + MMV));
        MMT_I p1 = MMT_DP(MMT_DP(MMT_ZERO, MMT_AND(w1, m4), MMT_LD(x + blk)), MMT_AND(MMT_SRL16(w1, 4), m4), MMT_LD(x + blk + MMV));
        cv[k] = MMT_PAIRS(p0, p1);
    }
    _Pragma("GCC unroll 8") for (int n = ncv; n > ng; n >>= 1) {
        _Pragma("GCC unroll 16") for (int k = 0; k < n / 2; k++) cv[k] = MMT_PAIRS(cv[2 * k], cv[2 * k + 1]);
    }
    MMT_FSTEP(cv, xg, sc, L);
}

/* Grouped int4, one row × T activation rows: per super-block of 16 groups,
 * chunk sums (16 elements) from pairs of blocks, then stage 2. N16 is gs/16
 * when a register fast path exists for it, else 0. */
static MM_AI MMT_TGT void MMT_N(gtile)(const mm_args *a, int64_t o, int s0, const int T, const int N16) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, gs = W->gs, ng = qt_row_scales(W), n16 = gs / 16, sbl = 16 * gs, blk = 2 * MMV, nbt = I / blk;
    const uint8_t *w = mm_wrow(W, o);
    const float *sr = mm_srow(W, o);
    const int8_t *q[MM_TILE];
    mmt_L L[MM_TILE][2];
    __attribute__((aligned(64))) int32_t c16[MM_TILE][QT_GS_MAX + 16];
    float sbuf[16];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        q[t] = a->qx + (size_t)(s0 + t) * (size_t)a->ldq;
        MMT_LZERO(L[t]);
    }
    const MMT_I m4 = MMT_SET8(15);
    for (int64_t sb = 0; 16 * sb < ng; sb++) {
        const int64_t e0 = sb * sbl, e1 = e0 + sbl < I ? e0 + sbl : I, bA = e0 / blk, bB = e1 / blk < nbt ? e1 / blk : nbt;
        if (N16 && e0 + sbl <= blk * nbt) {
            MM_PREFETCH(sr + 16 * sb + MM_PF_SCALES * ng);
            MM_UNROLL
            for (int t = 0; t < T; t++) MMT_N(gsb)(w, q[t], bA, N16, a->xg + (size_t)(s0 + t) * (size_t)a->ldg + 16 * sb, sr + 16 * sb, L[t]);
            continue;
        }
        int64_t b = bA;
        for (; b + 2 <= bB; b += 2) {
            MM_PREFETCH(w + MMV * b + MM_PF_DIST);
            if (MMV == 64) MM_PREFETCH(w + MMV * b + MM_PF_DIST + 64);
            const MMT_I w0 = MMT_LD(w + MMV * b), w1 = MMT_LD(w + MMV * (b + 1));
            const MMT_I l0 = MMT_AND(w0, m4), h0 = MMT_AND(MMT_SRL16(w0, 4), m4), l1 = MMT_AND(w1, m4), h1 = MMT_AND(MMT_SRL16(w1, 4), m4);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + blk * b;
                MMT_I p0 = MMT_DP(MMT_DP(MMT_ZERO, l0, MMT_LD(x)), h0, MMT_LD(x + MMV));
                MMT_I p1 = MMT_DP(MMT_DP(MMT_ZERO, l1, MMT_LD(x + blk)), h1, MMT_LD(x + blk + MMV));
                MMT_ST(c16[t] + blk / 16 * (b - bA), MMT_PAIRS(p0, p1));
            }
        }
        if (b < bB) {
            const MMT_I w0 = MMT_LD(w + MMV * b), l0 = MMT_AND(w0, m4), h0 = MMT_AND(MMT_SRL16(w0, 4), m4);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + blk * b;
                MMT_ST(c16[t] + blk / 16 * (b - bA), MMT_PAIRS(MMT_DP(MMT_DP(MMT_ZERO, l0, MMT_LD(x)), h0, MMT_LD(x + MMV)), MMT_ZERO));
            }
        }
        const int64_t it = blk * bB > e0 ? blk * bB : e0, nv = (e1 - e0 + 15) / 16;
        const float *sc = mm_sb_scales(sr, ng, sb, sbuf);
        MM_PREFETCH(sr + 16 * sb + MM_PF_SCALES * ng); /* the same super-block some rows ahead */
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            if (it < e1) mm_c16_tail(w, q[t], e0, it, e1, c16[t]);
            if (nv < 16 * n16) memset(c16[t] + nv, 0, (size_t)(16 * n16 - nv) * 4);
            MMT_STAGE2(c16[t], (int)n16, a->xg + (size_t)(s0 + t) * (size_t)a->ldg + 16 * sb, sc, L[t]);
        }
    }
    MM_UNROLL
    for (int t = 0; t < T; t++) a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] = MMT_TREE(L[t]) * a->xs[s0 + t];
}

static MM_AI MMT_TGT void MMT_N(gtile_t)(const mm_args *a, int64_t o, int s0, int T, const int N16) {
    switch (T) {
    case 1: MMT_N(gtile)(a, o, s0, 1, N16); break;
    case 2: MMT_N(gtile)(a, o, s0, 2, N16); break;
    case 3: MMT_N(gtile)(a, o, s0, 3, N16); break;
    default: MMT_N(gtile)(a, o, s0, 4, N16); break;
    }
}

static MM_AI MMT_TGT void MMT_N(irows_f)(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    for (int64_t o = o0; o < o1; o++)
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) {
            const int T = a->S - s0 < MM_TILE ? a->S - s0 : MM_TILE;
            if (f == QT_I4G) {
                const int gs = a->W->gs;
                if (gs == 64) MMT_N(gtile_t)(a, o, s0, T, 4);
                else if (gs == 128) MMT_N(gtile_t)(a, o, s0, T, 8);
                else MMT_N(gtile_t)(a, o, s0, T, 0);
            }
            else switch (T) {
                case 1: MMT_N(itile)(a, o, s0, f, 1); break;
                case 2: MMT_N(itile)(a, o, s0, f, 2); break;
                case 3: MMT_N(itile)(a, o, s0, f, 3); break;
                default: MMT_N(itile)(a, o, s0, f, 4); break;
                }
        }
}

/* Integer path of this level for rows [o0, o1). */
static inline MMT_TGT void MMT_N(irows)(const mm_args *a, int64_t o0, int64_t o1) {
    switch (a->W->fmt) {
    case QT_I8: MMT_N(irows_f)(a, o0, o1, QT_I8); break;
    case QT_I4: MMT_N(irows_f)(a, o0, o1, QT_I4); break;
    case QT_I2: MMT_N(irows_f)(a, o0, o1, QT_I2); break;
    case QT_I4G: MMT_N(irows_f)(a, o0, o1, QT_I4G); break;
    default: break;
    }
}

#undef MMV
#undef MMT_I
#undef MMT_LD
#undef MMT_ST
#undef MMT_ZERO
#undef MMT_AND
#undef MMT_SRL16
#undef MMT_SET8
#undef MMT_ADD32
#undef MMT_PAIRS
#undef MMT_HSUM
#undef MMT_PRE
#undef MMT_ABS8
#undef MMT_SIGNX
#undef MMT_NEGMASK
#undef MMT_LZERO
#undef MMT_STAGE2
#undef MMT_FSTEP
#undef MMT_TREE
#undef MMT_N
#undef mmt_L

#elif defined(MMT_NEON)
/* ============================================ template: NEON integer kernels */

/* Per-row formats, one row × T activation rows (see the x86 itile). */
static MM_AI MMT_TGT void MMT_F(mmn_itile)(const mm_args *a, int64_t o, int s0, const qt_fmt f, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, blk = mm_act_blk(f, 16), nb = I / blk;
    const uint8_t *w = mm_wrow(W, o);
    const int8_t *q[MM_TILE];
    int32x4_t acc[MM_TILE][2];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        q[t] = a->qx + (size_t)(s0 + t) * (size_t)a->ldq;
        acc[t][0] = acc[t][1] = vdupq_n_s32(0);
    }
    int64_t b = 0;
    if (f == QT_I8) /* two blocks per step: two chains per pair */
        for (; b + 2 <= nb; b += 2) {
            if (!(b & 3)) MM_PREFETCH(w + 16 * b + MM_PF_DIST);
            const int8x16_t w0 = vld1q_s8((const int8_t *)w + 16 * b), w1 = vld1q_s8((const int8_t *)w + 16 * b + 16);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                acc[t][0] = MMT_DP(acc[t][0], w0, vld1q_s8(q[t] + 16 * b));
                acc[t][1] = MMT_DP(acc[t][1], w1, vld1q_s8(q[t] + 16 * b + 16));
            }
        }
    for (; b < nb; b++) {
        if (!(b & 3)) MM_PREFETCH(w + 16 * b + MM_PF_DIST);
        if (f == QT_I8) {
            const int8x16_t wv = vld1q_s8((const int8_t *)w + 16 * b);
            MM_UNROLL
            for (int t = 0; t < T; t++) acc[t][0] = MMT_DP(acc[t][0], wv, vld1q_s8(q[t] + 16 * b));
        } else if (f == QT_I4) {
            int8x16_t lo, hi;
            mmn_nib(w + 16 * b, &lo, &hi);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                acc[t][0] = MMT_DP(acc[t][0], lo, vld1q_s8(q[t] + 32 * b));
                acc[t][1] = MMT_DP(acc[t][1], hi, vld1q_s8(q[t] + 32 * b + 16));
            }
        } else {
            int8x16_t c[4];
            mmn_crumb(w + 16 * b, c);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + 64 * b;
                acc[t][0] = MMT_DP(MMT_DP(acc[t][0], c[0], vld1q_s8(x)), c[2], vld1q_s8(x + 32));
                acc[t][1] = MMT_DP(MMT_DP(acc[t][1], c[1], vld1q_s8(x + 16)), c[3], vld1q_s8(x + 48));
            }
        }
    }
    const float so = mm_srow(W, o)[0];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        int32_t D = vaddvq_s32(vaddq_s32(acc[t][0], acc[t][1])) + mm_idot_tail(f, w, q[t], nb * blk, I);
        a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] = mm_ifinish(D, a->xg[(size_t)(s0 + t) * (size_t)a->ldg], so, a->xs[s0 + t]);
    }
}

/* Grouped int4, one row × T activation rows (see the x86 gtile). */
static MM_AI MMT_TGT void MMT_F(mmn_gtile)(const mm_args *a, int64_t o, int s0, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, gs = W->gs, ng = qt_row_scales(W), n16 = gs / 16, sbl = 16 * gs, nbt = I / 32;
    const uint8_t *w = mm_wrow(W, o);
    const float *sr = mm_srow(W, o);
    const int8_t *q[MM_TILE];
    float32x4_t L[MM_TILE][4];
    __attribute__((aligned(64))) int32_t c16[MM_TILE][QT_GS_MAX + 16];
    float sbuf[16];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        q[t] = a->qx + (size_t)(s0 + t) * (size_t)a->ldq;
        MM_UNROLL
        for (int j = 0; j < 4; j++) L[t][j] = vdupq_n_f32(0.0f);
    }
    for (int64_t sb = 0; 16 * sb < ng; sb++) {
        const int64_t e0 = sb * sbl, e1 = e0 + sbl < I ? e0 + sbl : I, bA = e0 / 32, bB = e1 / 32 < nbt ? e1 / 32 : nbt;
        int64_t b = bA;
        for (; b + 2 <= bB; b += 2) {
            if (!(b & 3)) MM_PREFETCH(w + 16 * b + MM_PF_DIST);
            int8x16_t l0, h0, l1, h1;
            mmn_nib(w + 16 * b, &l0, &h0);
            mmn_nib(w + 16 * b + 16, &l1, &h1);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + 32 * b;
                int32x4_t p0 = MMT_OCT(l0, vld1q_s8(x), h0, vld1q_s8(x + 16)), p1 = MMT_OCT(l1, vld1q_s8(x + 32), h1, vld1q_s8(x + 48));
                vst1q_s32(c16[t] + 2 * (b - bA), vpaddq_s32(p0, p1));
            }
        }
        if (b < bB) {
            int8x16_t l0, h0;
            mmn_nib(w + 16 * b, &l0, &h0);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + 32 * b;
                vst1q_s32(c16[t] + 2 * (b - bA), vpaddq_s32(MMT_OCT(l0, vld1q_s8(x), h0, vld1q_s8(x + 16)), vdupq_n_s32(0)));
            }
        }
        const int64_t it = 32 * bB > e0 ? 32 * bB : e0, nv = (e1 - e0 + 15) / 16;
        const float *sc = mm_sb_scales(sr, ng, sb, sbuf);
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            if (it < e1) mm_c16_tail(w, q[t], e0, it, e1, c16[t]);
            if (nv < 16 * n16) memset(c16[t] + nv, 0, (size_t)(16 * n16 - nv) * 4);
            mmn_stage2(c16[t], (int)n16, a->xg + (size_t)(s0 + t) * (size_t)a->ldg + 16 * sb, sc, L[t]);
        }
    }
    MM_UNROLL
    for (int t = 0; t < T; t++) a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] = mmn_tree16(L[t]) * a->xs[s0 + t];
}

static MM_AI MMT_TGT void MMT_F(mmn_irows_f)(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    for (int64_t o = o0; o < o1; o++)
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) {
            const int T = a->S - s0 < MM_TILE ? a->S - s0 : MM_TILE;
            if (f == QT_I4G) switch (T) {
                case 1: MMT_F(mmn_gtile)(a, o, s0, 1); break;
                case 2: MMT_F(mmn_gtile)(a, o, s0, 2); break;
                case 3: MMT_F(mmn_gtile)(a, o, s0, 3); break;
                default: MMT_F(mmn_gtile)(a, o, s0, 4); break;
                }
            else switch (T) {
                case 1: MMT_F(mmn_itile)(a, o, s0, f, 1); break;
                case 2: MMT_F(mmn_itile)(a, o, s0, f, 2); break;
                case 3: MMT_F(mmn_itile)(a, o, s0, f, 3); break;
                default: MMT_F(mmn_itile)(a, o, s0, f, 4); break;
                }
        }
}

/* Integer path of this level for rows [o0, o1). */
static inline MMT_TGT void MMT_F(mmn_irows)(const mm_args *a, int64_t o0, int64_t o1) {
    switch (a->W->fmt) {
    case QT_I8: MMT_F(mmn_irows_f)(a, o0, o1, QT_I8); break;
    case QT_I4: MMT_F(mmn_irows_f)(a, o0, o1, QT_I4); break;
    case QT_I2: MMT_F(mmn_irows_f)(a, o0, o1, QT_I2); break;
    case QT_I4G: MMT_F(mmn_irows_f)(a, o0, o1, QT_I4G); break;
    default: break;
    }
}

/* One (row, activation row) pair; an out-of-line entry for other levels. */
static __attribute__((noinline, unused)) MMT_TGT void MMT_F(mmn_itile1)(const mm_args *a, int64_t o, int s) {
    const qt_fmt f = a->W->fmt;
    if (f == QT_I4G) MMT_F(mmn_gtile)(a, o, s, 1);
    else if (f == QT_I8) MMT_F(mmn_itile)(a, o, s, QT_I8, 1);
    else if (f == QT_I4) MMT_F(mmn_itile)(a, o, s, QT_I4, 1);
    else if (f == QT_I2) MMT_F(mmn_itile)(a, o, s, QT_I2, 1);
}

#endif /* COLI_QUANT_H / templates */
