/* fmath.h — the model's exponentials (SiLU in SwiGLU, the router's
 * sigmoid, attention's softmax) as one fixed sequence of correctly rounded
 * float operations (+, −, ×, ÷, exact conversions), so that every CPU,
 * every libm and the GPU (backend_cuda.cu includes this header) give the
 * same bits. libm's expf is not that: glibc, MinGW's CRT, Apple's libm and
 * CUDA's expf each round some arguments differently, and one flipped bit
 * in a router score can change which expert a token takes.
 *
 * fm_expf is within 1 ulp of e^x for every float x (tests/test_fmath.c
 * sweeps the whole range against the double exp): e^x = 2^n · e^r, n the
 * nearest integer to x/ln 2, r = x − n·ln 2 in two exact-then-rounded
 * steps (Cody–Waite: the high part of ln 2 has 15 bits, so n·hi is exact
 * for |n| ≤ 2^8 and x − n·hi is exact by Sterbenz), e^r by its Taylor
 * series to r^7 (|r| ≤ 0.35: truncation under 0.1 ulp), and 2^n applied as
 * two exact powers of two so that a subnormal result is rounded once.
 *
 * On the CPU the project's -ffp-contract=off keeps every a·b + c two
 * roundings; on the device each step is an explicit __f*_rn intrinsic,
 * which nvcc never fuses.
 *
 * Prefix: fm_. Must not: call libm or depend on FMA contraction. */
#ifndef COLI_FMATH_H
#define COLI_FMATH_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FM_FN static __host__ __device__ __forceinline__
#else
#define FM_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define FM_ADD(a, b) __fadd_rn((a), (b))
#define FM_SUB(a, b) __fsub_rn((a), (b))
#define FM_MUL(a, b) __fmul_rn((a), (b))
#define FM_DIV(a, b) __fdiv_rn((a), (b))
#else
#define FM_ADD(a, b) ((a) + (b))
#define FM_SUB(a, b) ((a) - (b))
#define FM_MUL(a, b) ((a) * (b))
#define FM_DIV(a, b) ((a) / (b))
#endif

/* 2^k for -126 ≤ k ≤ 127, exactly. */
FM_FN float fm_pow2i(int k) {
    uint32_t u = (uint32_t)(k + 127) << 23;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* e^x within 1 ulp, the same bits everywhere; NaN for NaN, +inf above
 * about 88.72, +0 below about -103.97. Branch-free, so loops over it
 * vectorize. */
FM_FN float fm_expf(float x) {
    /* beyond these every result is inf or 0 anyway; NaN goes to -104 and is
     * put back at the end (converting NaN to int is undefined) */
    const float xc = x > 89.0f ? 89.0f : x >= -104.0f ? x : -104.0f;
    const float magic = 12582912.0f; /* 1.5·2^23: adding it rounds to an integer, ties to even */
    const float n = FM_SUB(FM_ADD(FM_MUL(xc, 1.44269502f), magic), magic);
    const float r = FM_SUB(FM_SUB(xc, FM_MUL(n, 0.693145751953125f)), FM_MUL(n, 1.42860677e-6f));
    float q = 1.0f / 5040.0f;
    q = FM_ADD(FM_MUL(q, r), 1.0f / 720.0f);
    q = FM_ADD(FM_MUL(q, r), 1.0f / 120.0f);
    q = FM_ADD(FM_MUL(q, r), 1.0f / 24.0f);
    q = FM_ADD(FM_MUL(q, r), 1.0f / 6.0f);
    q = FM_ADD(FM_MUL(q, r), 0.5f);
    const float p = FM_ADD(1.0f, FM_ADD(r, FM_MUL(FM_MUL(r, r), q))); /* e^r, in [0.7, 1.42] */
    const int k = (int)n, k1 = k / 2;                                 /* k in [-150, 128]: both halves in [-75, 64] */
    const float y = FM_MUL(FM_MUL(p, fm_pow2i(k1)), fm_pow2i(k - k1)); /* the first product is exact */
    return x == x ? y : x;
}

/* x·sigmoid(x) = x / (1 + e^-x): SwiGLU's SiLU. */
FM_FN float fm_silu(float x) { return FM_DIV(x, FM_ADD(1.0f, fm_expf(-x))); }

/* 1 / (1 + e^-x): the router's scores. */
FM_FN float fm_sigmoid(float x) { return FM_DIV(1.0f, FM_ADD(1.0f, fm_expf(-x))); }

#endif
