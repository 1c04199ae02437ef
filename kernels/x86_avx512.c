/* kernels/x86_avx512.c — the 512-bit x86 levels: avx512 (maddubs integer
 * dots) and avx512vnni (vpdpbusd), sharing one float path. Compiled with
 * target attributes like x86_avx2.c. Must not: be called except through
 * the tables it defines. */
#include "impl.h"

#ifdef MM_X86
#include "x86.h"

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

/* ---- float path (kernels/float_tile.h): two 16-lane chains per row */
#define MMT_SFX avx512
#define MMT_TGT MM_TGT_AVX512
#define MMF_V __m512
#define MMF_W 16
#define MMF_NV 1
#define MMF_STEP 2
#define MMF_ZERO() _mm512_setzero_ps()
#define MMF_LOAD(p) _mm512_loadu_ps(p)
#define MMF_STORE(p, v) _mm512_storeu_ps((p), (v))
#define MMF_SET1(s) _mm512_set1_ps(s)
#define MMF_ADD(a, b) _mm512_add_ps((a), (b))
#define MMF_MUL(a, b) _mm512_mul_ps((a), (b))
#define MMF_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define MMF_DEQ16(f, w, i, sc, v) ((v)[0] = mm512_deq16((f), (w), (i), (sc)))
#define MMF_HSUM16(v) mm512_tree16((v)[0])
#include "float_tile.h"
#undef MMT_SFX
#undef MMT_TGT

/* ---- integer path (kernels/int_x86.h) */
#define MMT_X86_512 1
#define MMT_SFX avx512
#define MMT_TGT MM_TGT_AVX512
#define MMT_DP(acc, u, s) _mm512_add_epi32((acc), _mm512_madd_epi16(_mm512_maddubs_epi16((u), (s)), _mm512_set1_epi16(1)))
#include "int_x86.h"
#undef MMT_SFX
#undef MMT_TGT
#undef MMT_DP
#define MMT_SFX avx512vnni
#define MMT_TGT __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))
#define MMT_DP(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#define MMT_DP_WIDE 1 /* u8·s8 quadruples summed into int32, no 16-bit step */
#include "int_x86.h"
#undef MMT_DP_WIDE

const mm_kernels mm_kernels_avx512 = {"avx512", 64, mmf_rows_avx512, mm512_irows_avx512, mmf_mvt_avx512};
const mm_kernels mm_kernels_avx512vnni = {"avx512vnni", 64, mmf_rows_avx512, mm512_irows_avx512vnni, mmf_mvt_avx512};
#endif
