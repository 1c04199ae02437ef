/* kernels/x86.h — what the AVX2 and AVX-512 translation units share: the
 * target attributes of the two families and the fixed-order horizontal sum
 * both integer reductions end in. Internal to kernels/. */
#ifndef COLI_KERNELS_X86_H
#define COLI_KERNELS_X86_H

#include <immintrin.h>

#include "impl.h"

#define MM_TGT_AVX2 __attribute__((target("avx2,fma")))
#define MM_TGT_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl")))

/* Fixed-order float sum of 8 lanes. */
static MM_AI MM_TGT_AVX2 float mm256_hsum(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

#endif
