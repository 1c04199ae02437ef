/* kernels/core.c — the level-independent part of kernels.h: the plain C
 * reference of both arithmetic paths (level "scalar", the definition every
 * other level is tested against), activation quantization, CPU detection
 * and dispatch, and the mm_matmul driver that splits output rows over
 * threads. Must not: contain instruction-set specific code (that lives in
 * x86_avx2.c, x86_avx512.c and arm_neon.c). */
#include "impl.h"

#include "../compat.h"
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(MM_X86)
#include <cpuid.h>
#endif

/* See kernels.h. */
void mm_act_quant(const float *x, int64_t I, qt_fmt f, int gs, int vb, int8_t *q, float *xs, int32_t *xg) {
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
    int8_t t[1024];
    int64_t b = 0;
    const int gt = mm_gt(f, gs, vb), nu = gt / 8; /* units per group */
    if (gt)
        for (; b + gt / 4 <= nb; b += gt / 4) { /* full super-blocks: 16 groups, gs/4 blocks of 64 */
            int8_t *p = q + b * blk;
            memcpy(t, p, (size_t)(16 * gt));
            for (int H = 0; H < 2; H++)
                for (int u = 0; u < nu; u++)
                    for (int h = 0; h < 2; h++)
                        for (int l = 0; l < 8; l++)
                            for (int k = 0; k < 4; k++)
                                p[64 * (nu * H + u) + 32 * h + 4 * l + k] = t[gt * mm_gt_grp(gt, H, l) + 8 * u + 2 * k + h];
        }
    for (; b < nb; b++) {
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

/* Reference float path: y = Σ deq·x with 4 accumulators by i mod 4. */
static void mm_frows_ref(const mm_args *a, int64_t o0, int64_t o1) {
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
static void mm_irows_ref(const mm_args *a, int64_t o0, int64_t o1) {
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

int mm_idot_ref(const qt_tensor *W, const int8_t *q, int64_t ldq, const float *xs, int S, float *y) {
    if (W->fmt == QT_F32 || (W->fmt == QT_I4G && !qt_gs_ok(W->gs))) return -1;
    if (S < 1) return 0;
    const int64_t ng = qt_row_scales(W), ldg = (ng + 15) / 16 * 16, run = W->fmt == QT_I4G ? W->gs : W->I;
    const int off = mm_code_off(W->fmt);
    int32_t *xg = (int32_t *)calloc((size_t)S * (size_t)ldg, 4);
    if (!xg) return -1;
    for (int s = 0; off && s < S; s++)
        for (int64_t g = 0; g < ng; g++) { /* offset·Σq per group, as mm_act_quant */
            const int64_t e = (g + 1) * run < W->I ? (g + 1) * run : W->I;
            int32_t sum = 0;
            for (int64_t i = g * run; i < e; i++) sum += q[(size_t)s * (size_t)ldq + (size_t)i];
            xg[(size_t)s * (size_t)ldg + (size_t)g] = off * sum;
        }
    mm_args a = {.W = W, .y = y, .S = S, .qx = q, .xs = xs, .xg = xg, .ldq = ldq, .ldg = ldg};
    mm_irows_ref(&a, 0, W->O);
    free(xg);
    return 0;
}

/* Reference transposed product: y[i] = Σ_o x[o]·deq(W[o,i]), in increasing o,
 * each step y = y + x[o]·deq (mul then add), so every level matches it. */
static void mm_mvt_ref(const qt_tensor *W, const float *x, float *y) {
    memset(y, 0, (size_t)W->I * 4);
    for (int64_t o = 0; o < W->O; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        for (int64_t i = 0; i < W->I; i++) y[i] = y[i] + x[o] * mm_deq1(W, w, sr, i);
    }
}

/* ---- dispatch */


const char *mm_level_name(int level) {
    static const char *const n[MM_NLEVELS] = {"scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "neon", "neon-dotprod", "neon-i8mm"};
    return level >= 0 && level < MM_NLEVELS ? n[level] : "?";
}

int mm_level_parse(const char *name) {
    for (int l = 0; l < MM_NLEVELS; l++)
        if (name && !strcmp(name, mm_level_name(l))) return l;
    return -1;
}

const char *mm_level_needs(int level) {
    static const char *const n[MM_NLEVELS] = {"nothing", "x86-64 with AVX2 and FMA", "AVX2 and AVX-VNNI", "AVX-512 F/BW/VL with OS support",
                                              "AVX-512 F/BW/VL and AVX512-VNNI", "aarch64", "aarch64 with dotprod", "aarch64 with dotprod and i8mm"};
    return level >= 0 && level < MM_NLEVELS ? n[level] : "?";
}

#ifdef MM_X86
/* XCR0: which register states the OS saves. */
static uint64_t mm_xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

int mm_level_ok(int level) {
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
    const int avx2 = (b7 >> 5) & 1, avx512 = ((b7 >> 16) & 1) && ((b7 >> 30) & 1) && ((b7 >> 31) & 1) && compat_os_avx512(xcr0);
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
    const int f = compat_arm_features(), dot = !!(f & COMPAT_ARM_DOT), i8mm = !!(f & COMPAT_ARM_I8MM);
    return level == MM_NEON_DOT ? dot : dot && i8mm;
#else
    return 0;
#endif
}

int mm_best_level(void) {
    static const int pref[] = {MM_NEON_I8MM, MM_NEON_DOT, MM_NEON, MM_AVX512VNNI, MM_AVX512, MM_AVXVNNI, MM_AVX2};
    for (size_t i = 0; i < sizeof pref / sizeof pref[0]; i++)
        if (mm_level_ok(pref[i])) return pref[i];
    return MM_SCALAR;
}

static const mm_kernels mm_kernels_scalar = {"scalar", 0, mm_frows_ref, mm_irows_ref, mm_mvt_ref};

/* The kernel table of a level (the caller has checked mm_level_ok). */
static const mm_kernels *mm_kernels_of(int level) {
    switch (level) {
#ifdef MM_X86
    case MM_AVX2: return &mm_kernels_avx2;
    case MM_AVXVNNI: return &mm_kernels_avxvnni;
    case MM_AVX512: return &mm_kernels_avx512;
    case MM_AVX512VNNI: return &mm_kernels_avx512vnni;
#endif
#ifdef MM_ARM
    case MM_NEON: return &mm_kernels_neon;
    case MM_NEON_DOT: return &mm_kernels_dotprod;
    case MM_NEON_I8MM: return &mm_kernels_i8mm;
#endif
    default: return &mm_kernels_scalar;
    }
}

void mm_free(mm_ctx *c) {
    compat_aligned_free(c->qx);
    free(c->xs);
    compat_aligned_free(c->xg);
    memset(c, 0, sizeof *c);
}

int mm_init(mm_ctx *c, int level, int idot, int max_rows, int64_t max_cols, int slots, char *err, size_t n) {
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
    if (max_rows < 1 || max_cols < 1 || slots < 1) {
        snprintf(err, n, "bad kernel scratch size: %d slots of %d rows of %lld columns", slots, max_rows, (long long)max_cols);
        return -1;
    }
    c->level = level;
    c->idot = idot != 0;
    c->k = mm_kernels_of(level);
    c->max_rows = max_rows;
    c->slots = slots;
    c->max_cols = max_cols < MM_IDOT_MAX_I ? max_cols : MM_IDOT_MAX_I;
    if (!c->idot) return 0;
    c->ldq = (c->max_cols + 255) / 256 * 256;
    c->ldg = ((c->max_cols + 15) / 16 + 15) / 16 * 16;
    size_t rows = (size_t)max_rows * (size_t)slots;
    c->qx = (int8_t *)compat_aligned_alloc(64, rows * (size_t)c->ldq);
    c->xs = (float *)malloc(rows * sizeof(float));
    c->xg = (int32_t *)compat_aligned_alloc(64, rows * (size_t)c->ldg * 4);
    if (!c->qx || !c->xs || !c->xg) {
        mm_free(c);
        snprintf(err, n, "out of memory for kernel scratch (%d slots of %d rows of %lld columns)", slots, max_rows, (long long)max_cols);
        return -1;
    }
    return 0;
}

/* Activation bytes a block of rows may take: about half an L2. */
#ifndef MM_BLOCK_BYTES
#define MM_BLOCK_BYTES (256 * 1024)
#endif

/* One thread's share of a matmul: quantize its activation rows (integer
 * path), meet the team (sync, when nth > 1), compute its contiguous block
 * of output rows (even-sized, so i8mm's row pairs never straddle two
 * threads). */
static void mm_part(const mm_ctx *c, const mm_args *a, int use_i, int tid, int nth, mm_sync_fn sync, void *arg) {
    const qt_tensor *W = a->W;
    if (use_i) {
        for (int s = tid; s < a->S; s += nth)
            mm_act_quant(a->x + (size_t)s * (size_t)W->I, W->I, W->fmt, W->gs, c->k->vb, (int8_t *)a->qx + (size_t)s * (size_t)a->ldq,
                         (float *)a->xs + s, (int32_t *)a->xg + (size_t)s * (size_t)a->ldg);
        if (nth > 1) sync(arg);
    }
    int64_t per = (W->O + nth - 1) / nth;
    per += per & 1;
    const int64_t r0 = (int64_t)tid * per < W->O ? (int64_t)tid * per : W->O, r1 = r0 + per < W->O ? r0 + per : W->O;
    if (r0 >= r1) return;
    /* Activation rows in blocks that stay in L2 (MM_BLOCK_BYTES): each
     * weight row is read once per block and each block once per weight row
     * of the range, instead of every activation row streaming past every
     * weight row. A row's result does not depend on its block. */
    const int64_t row_bytes = use_i ? a->ldq : W->I * 4;
    int sb = (int)(MM_BLOCK_BYTES / (row_bytes > 0 ? row_bytes : 1)) & ~3;
    if (sb < MM_TILE) sb = MM_TILE;
    const mm_rows_fn k = use_i ? c->k->irows : c->k->frows;
    for (int s0 = 0; s0 < a->S; s0 += sb) {
        mm_args b = *a;
        b.S = a->S - s0 < sb ? a->S - s0 : sb;
        b.x += (size_t)s0 * (size_t)W->I;
        b.y += (size_t)s0 * (size_t)W->O;
        if (use_i) b.qx += (size_t)s0 * (size_t)a->ldq, b.xs += s0, b.xg += (size_t)s0 * (size_t)a->ldg;
        k(&b, r0, r1);
    }
}

/* Below this many multiply-adds a call stays on one thread: a team costs
 * more than it saves. */
#define MM_PAR_MIN 131072.0

/* The argument block of rows [s0, s0 + n) with scratch slot `slot`. */
static mm_args mm_args_of(const mm_ctx *c, const qt_tensor *W, const float *x, int s0, int n, float *y, int slot) {
    const size_t base = (size_t)slot * (size_t)c->max_rows;
    mm_args a = {W, x + (size_t)s0 * (size_t)W->I, y + (size_t)s0 * (size_t)W->O, n, c->qx ? c->qx + base * (size_t)c->ldq : NULL,
                 c->xs ? c->xs + base : NULL, c->xg ? c->xg + base * (size_t)c->ldg : NULL, c->ldq, c->ldg};
    return a;
}

static int mm_use_i(const mm_ctx *c, const qt_tensor *W) { return c->idot && W->fmt != QT_F32 && W->I <= c->max_cols; }
static int mm_par(const qt_tensor *W, int n) { return (double)W->O * (double)W->I * n > MM_PAR_MIN && W->O > 1; }

#ifdef _OPENMP
static void mm_omp_barrier(void *arg) {
    (void)arg;
#pragma omp barrier
}
#endif

void mm_matmul(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y) {
    if (S <= 0 || W->O <= 0) return;
    const int use_i = mm_use_i(c, W), chunk = use_i ? c->max_rows : S;
    for (int s0 = 0; s0 < S; s0 += chunk) {
        const int n = S - s0 < chunk ? S - s0 : chunk;
        const mm_args a = mm_args_of(c, W, x, s0, n, y, 0);
#ifdef _OPENMP
#pragma omp parallel if (mm_par(W, n))
        mm_part(c, &a, use_i, omp_get_thread_num(), omp_get_num_threads(), mm_omp_barrier, NULL);
#else
        mm_part(c, &a, use_i, 0, 1, NULL, NULL);
#endif
    }
}

void mm_matmul_team(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y, int tid, int nth, mm_sync_fn sync, void *arg) {
    if (S <= 0 || W->O <= 0) return;
    const int use_i = mm_use_i(c, W), chunk = use_i ? c->max_rows : S;
    for (int s0 = 0; s0 < S; s0 += chunk) {
        const int n = S - s0 < chunk ? S - s0 : chunk;
        const mm_args a = mm_args_of(c, W, x, s0, n, y, 0);
        if (nth > 1 && mm_par(W, n)) mm_part(c, &a, use_i, tid, nth, sync, arg);
        else if (tid == 0) mm_part(c, &a, use_i, 0, 1, NULL, NULL);
        if (nth > 1) sync(arg);
    }
}

void mm_matmul_slot(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y, int slot) {
    if (S <= 0 || W->O <= 0) return;
    const int use_i = mm_use_i(c, W), chunk = use_i ? c->max_rows : S;
    for (int s0 = 0; s0 < S; s0 += chunk) {
        const int n = S - s0 < chunk ? S - s0 : chunk;
        const mm_args a = mm_args_of(c, W, x, s0, n, y, slot);
        mm_part(c, &a, use_i, 0, 1, NULL, NULL);
    }
}

void mm_matvec_t(const mm_ctx *c, const qt_tensor *W, const float *x, float *y) { c->k->mvt(W, x, y); }
