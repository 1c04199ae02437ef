/* kernels/arm_neon.c — the aarch64 levels: neon (smull/sadalp integer
 * dots), neon-dotprod (sdot) and neon-i8mm (smmla on 2 rows × 2 activation
 * rows), sharing one float path. dotprod and i8mm functions carry target
 * attributes, so a portable armv8-a build holds every level and dispatch
 * (kernels/core.c) picks by what the OS reports (compat_arm_features).
 * Must not: be called except through the tables it defines. */
#include "impl.h"

#ifdef MM_ARM
#include <arm_neon.h>

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
#include "int_neon.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#undef MMT_OCT
#define MMT_SFX dotprod
#define MMT_TGT MM_TGT_DOT
#define MMT_DP(acc, u, s) vdotq_s32((acc), (u), (s))
#define MMT_OCT(lo, xe, hi, xo) vdotq_s32(vdotq_s32(vdupq_n_s32(0), (lo), (xe)), (hi), (xo))
#include "int_neon.h"
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

/* ---- float path (kernels/float_tile.h): four 4-lane chains per row */
#define MMT_SFX neon
#define MMT_TGT
#define MMF_V float32x4_t
#define MMF_W 4
#define MMF_NV 4
#define MMF_STEP 1
#define MMF_ZERO() vdupq_n_f32(0.0f)
#define MMF_LOAD(p) vld1q_f32(p)
#define MMF_STORE(p, v) vst1q_f32((p), (v))
#define MMF_SET1(s) vdupq_n_f32(s)
#define MMF_ADD(a, b) vaddq_f32((a), (b))
#define MMF_MUL(a, b) vmulq_f32((a), (b))
#define MMF_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define MMF_DEQ16(f, w, i, sc, v) mmn_deq16((f), (w), (i), (sc), (v))
#define MMF_HSUM16(v) vaddvq_f32(vaddq_f32(vaddq_f32((v)[0], (v)[1]), vaddq_f32((v)[2], (v)[3])))
#include "float_tile.h"
#undef MMT_SFX
#undef MMT_TGT

const mm_kernels mm_kernels_neon = {"neon", 16, mmf_rows_neon, mmn_irows_neon, mmf_mvt_neon};
const mm_kernels mm_kernels_dotprod = {"neon-dotprod", 16, mmf_rows_neon, mmn_irows_dotprod, mmf_mvt_neon};
const mm_kernels mm_kernels_i8mm = {"neon-i8mm", 16, mmf_rows_neon, mmn_irows_i8mm, mmf_mvt_neon};
#endif
