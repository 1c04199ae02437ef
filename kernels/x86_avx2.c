/* kernels/x86_avx2.c — the 256-bit x86 levels: avx2 (maddubs integer dots)
 * and avxvnni (vpdpbusd), sharing one float path. Every function carries a
 * target attribute, so a portable build holds these levels and dispatch
 * (kernels/core.c) uses them only where cpuid allows. Must not: be called
 * except through the tables it defines. */
#include "impl.h"

#ifdef MM_X86
#include "x86.h"

/* ---------------------------------------------------------- AVX2 family */

/* Elements [i, i+16) of row w (i a multiple of 16) dequantized: q·sc. */
static MM_AI MM_TGT_AVX2 void mm256_deq16(qt_fmt f, const uint8_t *w, int64_t i, float sc, __m256 *v) {
    const __m256 vs = _mm256_set1_ps(sc);
    __m256i a, b;
    if (f == QT_F32) {
        v[0] = _mm256_loadu_ps((const float *)w + i);
        v[1] = _mm256_loadu_ps((const float *)w + i + 8);
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
    v[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(a), vs);
    v[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(b), vs);
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

/* ---- float path (kernels/float_tile.h): two 8-lane chains per row */
#define MMT_SFX avx2
#define MMT_TGT MM_TGT_AVX2
#define MMF_V __m256
#define MMF_W 8
#define MMF_NV 2
#define MMF_STEP 1
#define MMF_ZERO() _mm256_setzero_ps()
#define MMF_LOAD(p) _mm256_loadu_ps(p)
#define MMF_STORE(p, v) _mm256_storeu_ps((p), (v))
#define MMF_SET1(s) _mm256_set1_ps(s)
#define MMF_ADD(a, b) _mm256_add_ps((a), (b))
#define MMF_MUL(a, b) _mm256_mul_ps((a), (b))
#define MMF_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define MMF_DEQ16(f, w, i, sc, v) mm256_deq16((f), (w), (i), (sc), (v))
#define MMF_HSUM16(v) mm256_hsum(_mm256_add_ps((v)[0], (v)[1]))
#include "float_tile.h"
#undef MMT_SFX
#undef MMT_TGT

/* ---- integer path (kernels/int_x86.h) */
#define MMT_X86_256 1
#define MMT_SFX avx2
#define MMT_TGT MM_TGT_AVX2
#define MMT_DP(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#include "int_x86.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#define MMT_SFX avxvnni
#define MMT_TGT __attribute__((target("avx2,fma,avxvnni")))
#define MMT_DP(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define MMT_DP_WIDE 1 /* u8·s8 quadruples summed into int32, no 16-bit step */
#include "int_x86.h"
#undef MMT_DP_WIDE

const mm_kernels mm_kernels_avx2 = {"avx2", 32, mmf_rows_avx2, mm256_irows_avx2, mmf_mvt_avx2};
const mm_kernels mm_kernels_avxvnni = {"avxvnni", 32, mmf_rows_avx2, mm256_irows_avxvnni, mmf_mvt_avx2};
#endif
