/* kernels/int_neon.h — the NEON integer path, instantiated per level
 * (neon: smull/sadalp, neon-dotprod: sdot) with MMT_SFX, MMT_TGT, MMT_DP and
 * MMT_OCT (see kernels/arm_neon.c). Exact int32 dots, then the canonical
 * finish of kernels.h, so every level matches the scalar reference bit for
 * bit. */

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

