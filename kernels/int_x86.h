/* kernels/int_x86.h — the x86 integer path written once for both vector
 * widths (MMV = 32 or 64 bytes, chosen by MMT_X86_256 / MMT_X86_512) and
 * instantiated per level with MMT_SFX, MMT_TGT and the dot primitive MMT_DP
 * (see kernels/impl.h). Exact int32 dots, then the canonical finish of
 * kernels.h, so every level matches the scalar reference bit for bit. */
#ifdef MMT_X86_256
#define MMV 32
#define MMT_R 2 /* weight rows of the int4 tile */
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
#define MMT_R 4
#define MMT_I __m512i
#define MMT_LD(p) _mm512_loadu_si512((const void *)(p))
#define MMT_ST(p, v) _mm512_storeu_si512((void *)(p), (v))
#define MMT_ZERO _mm512_setzero_si512()
#define MMT_AND _mm512_and_si512
#define MMT_XOR _mm512_xor_si512
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

/* Plain int4, MMT_R weight rows × T activation rows (4 at 512 bits, whose
 * 32 registers hold the 16 accumulators; 2 at 256 bits, 16 registers):
 * each unpacked weight vector feeds T dots and each activation vector
 * MMT_R, where itile loads every activation vector once per weight row (at
 * S ≥ 32 the activations stream from L2 and bound itile). The same exact
 * int32 dots, so the same results. */
static MM_AI MMT_TGT void MMT_N(i4tileR)(const mm_args *a, int64_t o, int s0, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, blk = 2 * MMV, nb = I / blk;
    const uint8_t *w[MMT_R];
    const int8_t *q[MM_TILE];
    MMT_I acc[MMT_R][MM_TILE];
    MM_UNROLL
    for (int r = 0; r < MMT_R; r++) w[r] = mm_wrow(W, o + r);
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        q[t] = a->qx + (size_t)(s0 + t) * (size_t)a->ldq;
        MM_UNROLL
        for (int r = 0; r < MMT_R; r++) acc[r][t] = MMT_ZERO;
    }
    const MMT_I m4 = MMT_SET8(15);
    for (int64_t b = 0; b < nb; b++) {
        MMT_I lo[MMT_R], hi[MMT_R];
        MM_UNROLL
        for (int r = 0; r < MMT_R; r++) {
            MM_PREFETCH(w[r] + MMV * b + MM_PF_DIST);
            const MMT_I wv = MMT_LD(w[r] + MMV * b);
            lo[r] = MMT_AND(wv, m4), hi[r] = MMT_AND(MMT_SRL16(wv, 4), m4);
        }
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            const MMT_I xl = MMT_LD(q[t] + blk * b), xh = MMT_LD(q[t] + blk * b + MMV);
            MM_UNROLL
            for (int r = 0; r < MMT_R; r++) acc[r][t] = MMT_DP(MMT_DP(acc[r][t], lo[r], xl), hi[r], xh);
        }
    }
    MM_UNROLL
    for (int r = 0; r < MMT_R; r++) {
        const float so = mm_srow(W, o + r)[0];
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            int32_t D = MMT_HSUM(acc[r][t]) + mm_idot_tail(QT_I4, w[r], q[t], nb * blk, I);
            a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)(o + r)] = mm_ifinish(D, a->xg[(size_t)(s0 + t) * (size_t)a->ldg], so, a->xs[s0 + t]);
        }
    }
}

#if MMV == 64 && defined(MMT_DP_WIDE)
/* Σ w over the vector part (nb blocks) of int8 row o, mod 2^32. */
static MM_AI MMT_TGT uint32_t MMT_N(i8sum)(const qt_tensor *W, int64_t o, int64_t nb) {
    const uint8_t *w = mm_wrow(W, o);
    const MMT_I one = MMT_SET8(1);
    MMT_I s = MMT_ZERO;
    for (int64_t b = 0; b < nb; b++) s = MMT_DP(s, one, MMT_LD(w + MMV * b));
    return (uint32_t)MMT_HSUM(s);
}

/* int8, 4 weight rows × T activation rows, on a level whose dot has no
 * 16-bit intermediate (vpdpbusd): the activations take the unsigned side
 * biased by 128 (x ^ 0x80), the weights the signed side, and 128·Σw of
 * the row (ws, from i8sum) comes off. itile moves each weight's sign onto
 * x instead, one more operation per dot; both are exact mod 2^32, and the
 * true sum fits in int32 (MM_IDOT_MAX_I), so the results are the same. */
static MM_AI MMT_TGT void MMT_N(i8tile4)(const mm_args *a, int64_t o, int s0, const int T, const uint32_t *ws) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, nb = I / MMV;
    const uint8_t *w[4];
    const int8_t *q[MM_TILE];
    MMT_I acc[4][MM_TILE];
    MM_UNROLL
    for (int r = 0; r < 4; r++) w[r] = mm_wrow(W, o + r);
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        q[t] = a->qx + (size_t)(s0 + t) * (size_t)a->ldq;
        MM_UNROLL
        for (int r = 0; r < 4; r++) acc[r][t] = MMT_ZERO;
    }
    const MMT_I bias = MMT_SET8((char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        MMT_I wv[4];
        MM_UNROLL
        for (int r = 0; r < 4; r++) {
            MM_PREFETCH(w[r] + MMV * b + MM_PF_DIST);
            wv[r] = MMT_LD(w[r] + MMV * b);
        }
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            const MMT_I xu = MMT_XOR(MMT_LD(q[t] + MMV * b), bias);
            MM_UNROLL
            for (int r = 0; r < 4; r++) acc[r][t] = MMT_DP(acc[r][t], xu, wv[r]);
        }
    }
    MM_UNROLL
    for (int r = 0; r < 4; r++) {
        const float so = mm_srow(W, o + r)[0];
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            const uint32_t u = (uint32_t)MMT_HSUM(acc[r][t]) - 128u * ws[r] + (uint32_t)mm_idot_tail(QT_I8, w[r], q[t], nb * MMV, I);
            a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)(o + r)] = mm_ifinish((int32_t)u, a->xg[(size_t)(s0 + t) * (size_t)a->ldg], so, a->xs[s0 + t]);
        }
    }
}
#endif

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

#if MMV == 32
/* Grouped int4 at gs 64, one full super-block (16 groups, 16 weight
 * vectors, one group each) of one row × T activation rows in mm_gt's
 * layout. The weights' dwords are transposed in registers, 8 vectors at a
 * time (48 shuffles per row, shared by the T rows), so vector 8H + u holds
 * unit u (8 bytes of 16 elements) of groups 8H .. 8H + 7, one per lane:
 * the dots then sum each group in its own lane, where gsb reduces 16
 * vectors of chunk sums pairwise (14 pairs) per activation row. Without
 * vpdpbusd, the 16-bit products of 4 units add up before one widening
 * (|sum| ≤ 8 · 15 · 127 · 2 < 2^15, no saturation). The same integers, so
 * the same bits as the reference. */
static MM_AI MMT_TGT void MMT_N(g64sb)(const uint8_t *w, const int8_t *const *q, const int T, const int32_t *const *xg, const float *sc,
                                        mmt_L (*L)[2]) {
    __attribute__((aligned(32))) uint8_t V[16][32];
    MM_UNROLL
    for (int H = 0; H < 2; H++) {
        MMT_I W[8], s[8];
        MM_UNROLL
        for (int v = 0; v < 8; v++) {
            MM_PREFETCH(w + 32 * (8 * H + v) + MM_PF_DIST);
            W[v] = MMT_LD(w + 32 * (8 * H + v));
        }
        MM_UNROLL
        for (int k = 0; k < 8; k += 4) { /* 4x4 within each 128-bit lane */
            const MMT_I t0 = _mm256_unpacklo_epi32(W[k], W[k + 1]), t1 = _mm256_unpackhi_epi32(W[k], W[k + 1]);
            const MMT_I t2 = _mm256_unpacklo_epi32(W[k + 2], W[k + 3]), t3 = _mm256_unpackhi_epi32(W[k + 2], W[k + 3]);
            s[k] = _mm256_unpacklo_epi64(t0, t2), s[k + 1] = _mm256_unpackhi_epi64(t0, t2);
            s[k + 2] = _mm256_unpacklo_epi64(t1, t3), s[k + 3] = _mm256_unpackhi_epi64(t1, t3);
        }
        MM_UNROLL
        for (int j = 0; j < 4; j++) { /* low lanes: units 0..3, high lanes: 4..7 */
            MMT_ST(V[8 * H + j], _mm256_permute2x128_si256(s[j], s[4 + j], 0x20));
            MMT_ST(V[8 * H + 4 + j], _mm256_permute2x128_si256(s[j], s[4 + j], 0x31));
        }
    }
    const MMT_I m4 = MMT_SET8(15);
    MM_UNROLL
    for (int H = 0; H < 2; H++) {
        MMT_I acc[MM_TILE];
        MM_UNROLL
        for (int t = 0; t < T; t++) acc[t] = MMT_ZERO;
#ifdef MMT_DP_WIDE
        MM_UNROLL
        for (int u = 0; u < 8; u++) {
            const MMT_I v = MMT_LD(V[8 * H + u]), lo = MMT_AND(v, m4), hi = MMT_AND(MMT_SRL16(v, 4), m4);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + 512 * H + 64 * u;
                acc[t] = MMT_DP(MMT_DP(acc[t], lo, MMT_LD(x)), hi, MMT_LD(x + 32));
            }
        }
#else
        const MMT_I one = _mm256_set1_epi16(1);
        MM_UNROLL
        for (int u0 = 0; u0 < 8; u0 += 4) {
            MMT_I a16[MM_TILE];
            MM_UNROLL
            for (int t = 0; t < T; t++) a16[t] = MMT_ZERO;
            MM_UNROLL
            for (int u = u0; u < u0 + 4; u++) {
                const MMT_I v = MMT_LD(V[8 * H + u]), lo = MMT_AND(v, m4), hi = MMT_AND(MMT_SRL16(v, 4), m4);
                MM_UNROLL
                for (int t = 0; t < T; t++) {
                    const int8_t *x = q[t] + 512 * H + 64 * u;
                    a16[t] = _mm256_add_epi16(a16[t], _mm256_add_epi16(_mm256_maddubs_epi16(lo, MMT_LD(x)), _mm256_maddubs_epi16(hi, MMT_LD(x + 32))));
                }
            }
            MM_UNROLL
            for (int t = 0; t < T; t++) acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(a16[t], one));
        }
#endif
        MM_UNROLL
        for (int t = 0; t < T; t++) {
            const MMT_I g = _mm256_sub_epi32(acc[t], MMT_LD(xg[t] + 8 * H));
            L[t][H] = _mm256_add_ps(L[t][H], _mm256_mul_ps(_mm256_cvtepi32_ps(g), _mm256_loadu_ps(sc + 8 * H)));
        }
    }
}

/* Grouped int4 at gs 32, as g64sb: 8 weight vectors, each two groups of
 * 4 units, whose 4x4 transposes within 128-bit lanes (16 shuffles per
 * row) leave unit u of 8 groups in vector 4H + u, lane p holding group
 * mm_gt_grp(32, H, p); one permute per half puts the sums in group order.
 * 8 products of 16 bits per lane add up before the widening. */
static MM_AI MMT_TGT void MMT_N(g32sb)(const uint8_t *w, const int8_t *const *q, const int T, const int32_t *const *xg, const float *sc,
                                        mmt_L (*L)[2]) {
    const MMT_I m4 = MMT_SET8(15), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); /* lane of group 8H + g */
    MM_UNROLL
    for (int H = 0; H < 2; H++) {
        MMT_I W[4], V[4];
        MM_UNROLL
        for (int v = 0; v < 4; v++) {
            MM_PREFETCH(w + 32 * (4 * H + v) + MM_PF_DIST);
            W[v] = MMT_LD(w + 32 * (4 * H + v));
        }
        const MMT_I t0 = _mm256_unpacklo_epi32(W[0], W[1]), t1 = _mm256_unpackhi_epi32(W[0], W[1]);
        const MMT_I t2 = _mm256_unpacklo_epi32(W[2], W[3]), t3 = _mm256_unpackhi_epi32(W[2], W[3]);
        V[0] = _mm256_unpacklo_epi64(t0, t2), V[1] = _mm256_unpackhi_epi64(t0, t2);
        V[2] = _mm256_unpacklo_epi64(t1, t3), V[3] = _mm256_unpackhi_epi64(t1, t3);
        MMT_I acc[MM_TILE];
        MM_UNROLL
        for (int t = 0; t < T; t++) acc[t] = MMT_ZERO;
        MM_UNROLL
        for (int u = 0; u < 4; u++) {
            const MMT_I lo = MMT_AND(V[u], m4), hi = MMT_AND(MMT_SRL16(V[u], 4), m4);
            MM_UNROLL
            for (int t = 0; t < T; t++) {
                const int8_t *x = q[t] + 256 * H + 64 * u;
#ifdef MMT_DP_WIDE
                acc[t] = MMT_DP(MMT_DP(acc[t], lo, MMT_LD(x)), hi, MMT_LD(x + 32));
#else
                acc[t] = _mm256_add_epi16(acc[t], _mm256_add_epi16(_mm256_maddubs_epi16(lo, MMT_LD(x)), _mm256_maddubs_epi16(hi, MMT_LD(x + 32))));
#endif
            }
        }
        MM_UNROLL
        for (int t = 0; t < T; t++) {
#ifndef MMT_DP_WIDE
            acc[t] = _mm256_madd_epi16(acc[t], _mm256_set1_epi16(1));
#endif
            const MMT_I g = _mm256_sub_epi32(_mm256_permutevar8x32_epi32(acc[t], order), MMT_LD(xg[t] + 8 * H));
            L[t][H] = _mm256_add_ps(L[t][H], _mm256_mul_ps(_mm256_cvtepi32_ps(g), _mm256_loadu_ps(sc + 8 * H)));
        }
    }
}
#endif

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
#if MMV == 32
            if (N16 <= 4) { /* gs 64 or 32: mm_gt's layout */
                const int8_t *qs[MM_TILE];
                const int32_t *gs_[MM_TILE];
                MM_UNROLL
                for (int t = 0; t < T; t++) qs[t] = q[t] + e0, gs_[t] = a->xg + (size_t)(s0 + t) * (size_t)a->ldg + 16 * sb;
                if (N16 == 4) MMT_N(g64sb)(w + e0 / 2, qs, T, gs_, sr + 16 * sb, L);
                else MMT_N(g32sb)(w + e0 / 2, qs, T, gs_, sr + 16 * sb, L);
                continue;
            }
#endif
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

/* Constant T (1..MM_TILE) for each tile, so its loops unroll. */
#define MMT_BY_T(T, call)                                                                                                                  \
    switch (T) {                                                                                                                           \
    case 1: call(1); break;                                                                                                                \
    case 2: call(2); break;                                                                                                                \
    case 3: call(3); break;                                                                                                                \
    default: call(4); break;                                                                                                               \
    }

#define MMT_CALL(t) MMT_N(gtile)(a, o, s0, t, N16)
static MM_AI MMT_TGT void MMT_N(gtile_t)(const mm_args *a, int64_t o, int s0, int T, const int N16) { MMT_BY_T(T, MMT_CALL) }
#undef MMT_CALL

/* Rows [o0, o1) in blocks of MM_GOB weight rows (16: 48 KiB at 6144
 * columns of int4, which stay in L2), each block against every tile of
 * activation rows in turn: the tile stays in L1 for the whole block, where
 * a loop over single weight rows brings every tile back from L2 for each
 * row (grouped int4 at avx2, S = 128, one thread: 1.5x). Within a block,
 * the multi-row tiles while rows last, then rows one at a time. */
static MM_AI MMT_TGT void MMT_N(irows_f)(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    const int gs = a->W->gs, r4 = f == QT_I4 && a->S >= 16; /* below 16 activation rows itile is as fast */
#if MMV == 64 && defined(MMT_DP_WIDE)
    const int r8 = f == QT_I8 && a->S >= 16;
#endif
    for (int64_t ob = o0; ob < o1; ob += MM_GOB) {
        const int64_t oe = ob + MM_GOB < o1 ? ob + MM_GOB : o1;
#if MMV == 64 && defined(MMT_DP_WIDE)
        uint32_t ws[MM_GOB];
        if (r8)
            for (int64_t o = ob; o < oe; o++) ws[o - ob] = MMT_N(i8sum)(a->W, o, a->W->I / MMV);
#endif
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) {
            const int T = a->S - s0 < MM_TILE ? a->S - s0 : MM_TILE;
            int64_t o = ob;
#define MMT_CALL(t) MMT_N(i4tileR)(a, o, s0, t)
            if (r4)
                for (; o + MMT_R <= oe; o += MMT_R) MMT_BY_T(T, MMT_CALL)
#undef MMT_CALL
#if MMV == 64 && defined(MMT_DP_WIDE)
#define MMT_CALL(t) MMT_N(i8tile4)(a, o, s0, t, ws + (o - ob))
            if (r8)
                for (; o + 4 <= oe; o += 4) MMT_BY_T(T, MMT_CALL)
#undef MMT_CALL
#endif
            for (; o < oe; o++) {
                if (f == QT_I4G) {
                    if (gs == 64) MMT_N(gtile_t)(a, o, s0, T, 4); /* N16 constant: gsb's registers */
                    else if (gs == 128) MMT_N(gtile_t)(a, o, s0, T, 8);
                    else if (gs == 32 && MMV == 32) MMT_N(gtile_t)(a, o, s0, T, 2);
                    else MMT_N(gtile_t)(a, o, s0, T, 0);
                    continue;
                }
#define MMT_CALL(t) MMT_N(itile)(a, o, s0, f, t)
                MMT_BY_T(T, MMT_CALL)
#undef MMT_CALL
            }
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
#undef MMT_R
#undef MMT_I
#undef MMT_LD
#undef MMT_ST
#undef MMT_ZERO
#undef MMT_AND
#undef MMT_XOR
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
#undef MMT_BY_T
#undef mmt_L

