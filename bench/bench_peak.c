/* bench_peak.c — the processor's multiply-add peak by instruction
 * throughput, the ceiling a prefill is judged against beside colibri's own
 * best GEMM (bench_quant): for every kernel level this CPU runs
 * (kernels.h), the integer dot step that level's kernels are built on, and
 * the float FMA of its vector width, each in a loop of PEAK_ACC independent
 * register accumulators with loop-invariant operands (no memory traffic),
 * timed on one thread and on every thread at once:
 *
 *   avx2        vpmaddubsw + vpmaddwd + vpaddd, 256-bit   32 int8 MACs
 *   avxvnni     vpdpbusd, 256-bit (VEX)                   32
 *   avx512      vpmaddubsw + vpmaddwd + vpaddd, 512-bit   64
 *   avx512vnni  vpdpbusd, 512-bit                         64
 *   neon        smull + sadalp                             8
 *   neon-dotprod  sdot                                    16
 *   neon-i8mm   smmla                                     32
 *   float: vfmadd 256-bit 8, 512-bit 16, NEON fmla 4 f32 MACs
 *
 * MACs per second = threads × iterations × PEAK_ACC × MACs per step / s.
 * The operands are runtime values, so no compiler folds a step away; each
 * loop returns the sum over its lanes of what the steps added, which
 * --check (and tests/test_peak.c) compares with iterations × PEAK_ACC ×
 * MACs per step × a × b: the MAC count each row claims is what the
 * instructions computed.
 *
 * Build: make build/rel/bench_peak
 * Usage: build/rel/bench_peak [--json] [--time SEC] [--check]
 *   --time: seconds per measurement (default 0.3; best of 5)
 *   --check: the arithmetic check alone, exit 1 on a mismatch. */
#ifndef BENCH_PEAK_NO_MAIN
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#endif
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PEAK_X86 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define PEAK_ARM 1
#endif

/* 12 chains: vpdpbusd's latency (4-5 cycles) times its throughput (up to 2
 * a cycle) needs 10 in flight; 12 + the operands fit AVX2's 16 registers. */
#define PEAK_ACC 12

/* One loop: n steps on each of PEAK_ACC accumulators of operands a (the
 * unsigned / first operand) and b; returns the sum over lanes of what the
 * steps added (float loops: the sum, exact while below 2^24 per lane). */
typedef int64_t (*peak_fn)(int64_t n, int a, int b);

typedef struct {
    const char *name;  /* the instruction sequence                */
    int level;         /* kernels.h level whose kernels use it     */
    int is_float;      /* f32 FMA (the float path) or int8 dots    */
    int macs;          /* multiply-adds per step                   */
    peak_fn fn;
} peak_loop;

/* v through an empty asm that claims to change it: a step whose product
 * does not depend on its accumulator (maddubs, smull) is then computed at
 * every step instead of once before the loop, at no instruction's cost. */
#if defined(__x86_64__) || defined(__i386__)
static __attribute__((target("avx2"), always_inline)) inline __m256i peak_opaque256(__m256i v) {
    __asm__ volatile("" : "+v"(v));
    return v;
}
static __attribute__((target("avx512f"), always_inline)) inline __m512i peak_opaque512(__m512i v) {
    __asm__ volatile("" : "+v"(v));
    return v;
}
#elif defined(__aarch64__)
static inline __attribute__((always_inline)) int8x8_t peak_opaque64(int8x8_t v) {
    __asm__ volatile("" : "+w"(v));
    return v;
}
#endif

/* The loop body: acc[i] = STEP(acc[i]) for every accumulator, n times,
 * then SUM(acc[i]) over lanes into s. */
#define PEAK_BODY(VT, INIT, STEP, SUM)                                    \
    VT acc[PEAK_ACC];                                                     \
    for (int i = 0; i < PEAK_ACC; i++) acc[i] = INIT;                     \
    for (int64_t k = 0; k < n; k++) {                                     \
        _Pragma("GCC unroll 12") for (int i = 0; i < PEAK_ACC; i++)       \
            acc[i] = STEP(acc[i]);                                        \
    }                                                                     \
    int64_t s = 0;                                                        \
    for (int i = 0; i < PEAK_ACC; i++) s += SUM(acc[i]);                  \
    return s;

#ifdef PEAK_X86
#define PEAK_T256 __attribute__((target("avx2,fma"), noinline))
#define PEAK_TVNNI256 __attribute__((target("avx2,fma,avxvnni"), noinline))
#define PEAK_T512 __attribute__((target("avx2,fma,avx512f,avx512bw"), noinline))
#define PEAK_TVNNI512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vnni"), noinline))

static PEAK_T256 int64_t peak_sum256(__m256i v) {
    int32_t l[8];
    _mm256_storeu_si256((__m256i *)l, v);
    int64_t s = 0;
    for (int i = 0; i < 8; i++) s += l[i];
    return s;
}
static PEAK_T512 int64_t peak_sum512(__m512i v) {
    int32_t l[16];
    _mm512_storeu_si512(l, v);
    int64_t s = 0;
    for (int i = 0; i < 16; i++) s += l[i];
    return s;
}
static PEAK_T256 int64_t peak_sum256f(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    double s = 0;
    for (int i = 0; i < 8; i++) s += l[i];
    return (int64_t)s;
}
static PEAK_T512 int64_t peak_sum512f(__m512 v) {
    float l[16];
    _mm512_storeu_ps(l, v);
    double s = 0;
    for (int i = 0; i < 16; i++) s += l[i];
    return (int64_t)s;
}

static PEAK_T256 int64_t peak_avx2(int64_t n, int a, int b) {
    __m256i va = _mm256_set1_epi8((char)a);
    const __m256i vb = _mm256_set1_epi8((char)b), one = _mm256_set1_epi16(1);
#define STEP(x) _mm256_add_epi32((x), _mm256_madd_epi16(_mm256_maddubs_epi16(peak_opaque256(va), vb), one))
    PEAK_BODY(__m256i, _mm256_setzero_si256(), STEP, peak_sum256)
#undef STEP
}
static PEAK_TVNNI256 int64_t peak_avxvnni(int64_t n, int a, int b) {
    const __m256i va = _mm256_set1_epi8((char)a), vb = _mm256_set1_epi8((char)b);
#define STEP(x) _mm256_dpbusd_avx_epi32((x), va, vb)
    PEAK_BODY(__m256i, _mm256_setzero_si256(), STEP, peak_sum256)
#undef STEP
}
static PEAK_T512 int64_t peak_avx512(int64_t n, int a, int b) {
    __m512i va = _mm512_set1_epi8((char)a);
    const __m512i vb = _mm512_set1_epi8((char)b), one = _mm512_set1_epi16(1);
#define STEP(x) _mm512_add_epi32((x), _mm512_madd_epi16(_mm512_maddubs_epi16(peak_opaque512(va), vb), one))
    PEAK_BODY(__m512i, _mm512_setzero_si512(), STEP, peak_sum512)
#undef STEP
}
static PEAK_TVNNI512 int64_t peak_avx512vnni(int64_t n, int a, int b) {
    const __m512i va = _mm512_set1_epi8((char)a), vb = _mm512_set1_epi8((char)b);
#define STEP(x) _mm512_dpbusd_epi32((x), va, vb)
    PEAK_BODY(__m512i, _mm512_setzero_si512(), STEP, peak_sum512)
#undef STEP
}
static PEAK_T256 int64_t peak_fma256(int64_t n, int a, int b) {
    const __m256 va = _mm256_set1_ps((float)a), vb = _mm256_set1_ps((float)b);
#define STEP(x) _mm256_fmadd_ps(va, vb, (x))
    PEAK_BODY(__m256, _mm256_setzero_ps(), STEP, peak_sum256f)
#undef STEP
}
static PEAK_T512 int64_t peak_fma512(int64_t n, int a, int b) {
    const __m512 va = _mm512_set1_ps((float)a), vb = _mm512_set1_ps((float)b);
#define STEP(x) _mm512_fmadd_ps(va, vb, (x))
    PEAK_BODY(__m512, _mm512_setzero_ps(), STEP, peak_sum512f)
#undef STEP
}

static const peak_loop peak_loops[] = {
    {"vpmaddubsw+vpmaddwd+vpaddd 256-bit", MM_AVX2, 0, 32, peak_avx2},
    {"vpdpbusd 256-bit (AVX-VNNI)", MM_AVXVNNI, 0, 32, peak_avxvnni},
    {"vpmaddubsw+vpmaddwd+vpaddd 512-bit", MM_AVX512, 0, 64, peak_avx512},
    {"vpdpbusd 512-bit (AVX-512 VNNI)", MM_AVX512VNNI, 0, 64, peak_avx512vnni},
    {"vfmadd231ps 256-bit", MM_AVX2, 1, 8, peak_fma256},
    {"vfmadd231ps 512-bit", MM_AVX512, 1, 16, peak_fma512},
};
#endif

#ifdef PEAK_ARM
/* dotprod/i8mm need armv8.2-a; a compiler already targeting them gets no
 * attribute (its -march stays a superset), as kernels/arm_neon.c does. */
#ifdef __ARM_FEATURE_DOTPROD
#define PEAK_TDOT __attribute__((noinline))
#ifdef __ARM_FEATURE_MATMUL_INT8
#define PEAK_TI8MM __attribute__((noinline))
#else
#define PEAK_TI8MM __attribute__((target("+i8mm"), noinline))
#endif
#else
#define PEAK_TDOT __attribute__((target("arch=armv8.2-a+dotprod"), noinline))
#define PEAK_TI8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm"), noinline))
#endif
#define PEAK_SUMQ(x) ((int64_t)vaddlvq_s32(x))
#define PEAK_SUMF(x) ((int64_t)vaddvq_f32(x))

static __attribute__((noinline)) int64_t peak_neon(int64_t n, int a, int b) {
    int8x8_t va = vdup_n_s8((int8_t)a);
    const int8x8_t vb = vdup_n_s8((int8_t)b);
#define STEP(x) vpadalq_s16((x), vmull_s8(peak_opaque64(va), vb))
    PEAK_BODY(int32x4_t, vdupq_n_s32(0), STEP, PEAK_SUMQ)
#undef STEP
}
static PEAK_TDOT int64_t peak_sdot(int64_t n, int a, int b) {
    const int8x16_t va = vdupq_n_s8((int8_t)a), vb = vdupq_n_s8((int8_t)b);
#define STEP(x) vdotq_s32((x), va, vb)
    PEAK_BODY(int32x4_t, vdupq_n_s32(0), STEP, PEAK_SUMQ)
#undef STEP
}
static PEAK_TI8MM int64_t peak_smmla(int64_t n, int a, int b) {
    const int8x16_t va = vdupq_n_s8((int8_t)a), vb = vdupq_n_s8((int8_t)b);
#define STEP(x) vmmlaq_s32((x), va, vb)
    PEAK_BODY(int32x4_t, vdupq_n_s32(0), STEP, PEAK_SUMQ)
#undef STEP
}
static __attribute__((noinline)) int64_t peak_fmla(int64_t n, int a, int b) {
    const float32x4_t va = vdupq_n_f32((float)a), vb = vdupq_n_f32((float)b);
#define STEP(x) vfmaq_f32((x), va, vb)
    PEAK_BODY(float32x4_t, vdupq_n_f32(0), STEP, PEAK_SUMF)
#undef STEP
}

static const peak_loop peak_loops[] = {
    {"smull+sadalp", MM_NEON, 0, 8, peak_neon},
    {"sdot", MM_NEON_DOT, 0, 16, peak_sdot},
    {"smmla", MM_NEON_I8MM, 0, 32, peak_smmla},
    {"fmla 128-bit", MM_NEON, 1, 4, peak_fmla},
};
#endif

#if !defined(PEAK_X86) && !defined(PEAK_ARM)
static const peak_loop peak_loops[1] = {{NULL, 0, 0, 0, NULL}};
#define PEAK_NLOOPS 0
#else
#define PEAK_NLOOPS ((int)(sizeof peak_loops / sizeof peak_loops[0]))
#endif

/* What loop l must return for n steps of operands a, b. */
static inline int64_t peak_expected(const peak_loop *l, int64_t n, int a, int b) {
    return n * PEAK_ACC * l->macs * (int64_t)a * b;
}

#ifndef BENCH_PEAK_NO_MAIN
static volatile int peak_operand = 3; /* read at run time: nothing folds */
static volatile int64_t peak_sink;    /* keeps the timed sums alive (they wrap there) */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int peak_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Seconds for nth threads each running n steps of l (the slowest). */
static double peak_time(const peak_loop *l, int64_t n, int nth) {
    int a = peak_operand, b = peak_operand - 1;
    double t0 = now();
#ifdef _OPENMP
#pragma omp parallel num_threads(nth)
#endif
    peak_sink = l->fn(n, a, b);
    (void)nth;
    return now() - t0;
}

/* MACs per second of l on nth threads: steps grown until a run lasts
 * `secs`, then the best of 5 runs (a VM's vCPU is sometimes taken). */
static double peak_rate(const peak_loop *l, int nth, double secs) {
    int64_t n = 1 << 12;
    while (peak_time(l, n, 1) < secs / 4 && n < ((int64_t)1 << 40)) n *= 2;
    n *= 4;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = peak_time(l, n, nth);
        best = t < best ? t : best;
    }
    return (double)nth * (double)n * PEAK_ACC * l->macs / best;
}

/* Every runnable loop's sum against its MAC count, said on out. 0 or 1. */
static int peak_check(FILE *out) {
    int bad = 0, ran = 0;
    for (int i = 0; i < PEAK_NLOOPS; i++) {
        const peak_loop *l = &peak_loops[i];
        if (!mm_level_ok(l->level)) continue;
        for (int64_t n = 1; n <= 1000; n *= 10) {
            int64_t got = l->fn(n, peak_operand, peak_operand - 1), want = peak_expected(l, n, peak_operand, peak_operand - 1);
            if (got != want) fprintf(stderr, "bench_peak: %s: %lld steps gave %lld, want %lld\n", l->name, (long long)n, (long long)got, (long long)want);
            bad |= got != want;
        }
        ran++;
    }
    fprintf(out, "bench_peak: %d loops' sums equal their MAC counts%s\n", ran, bad ? " -- FAILED" : "");
    return bad;
}

int main(int argc, char **argv) {
    int json = 0, check = 0;
    double secs = 0.3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--time") && i + 1 < argc && (secs = atof(argv[++i])) > 0) {
        } else {
            fprintf(stderr, "usage: %s [--json] [--time SEC] [--check]\n", argv[0]);
            return 2;
        }
    }
    if (check) return peak_check(stdout);
    if (peak_check(stderr)) return 1; /* stdout stays the table or the JSON */
    int nth = peak_threads(), best = mm_best_level();
    if (json) printf("{\"threads\": %d, \"best_level\": \"%s\", \"acc\": %d, \"loops\": [", nth, mm_level_name(best), PEAK_ACC);
    else printf("%-40s %-12s %5s %14s %14s %14s\n", "instruction", "level", "MACs", "GMAC/s 1 thr", "GMAC/s all", "per core");
    for (int i = 0, k = 0; i < PEAK_NLOOPS; i++) {
        const peak_loop *l = &peak_loops[i];
        if (!mm_level_ok(l->level)) continue;
        double one = peak_rate(l, 1, secs), all = peak_rate(l, nth, secs);
        if (json)
            printf("%s\n  {\"instruction\": \"%s\", \"level\": \"%s\", \"float\": %d, \"macs_per_step\": %d, \"gmacs_1\": %.2f, \"gmacs_all\": %.2f, "
                   "\"gmacs_per_core\": %.2f}",
                   k++ ? "," : "", l->name, mm_level_name(l->level), l->is_float, l->macs, one / 1e9, all / 1e9, all / nth / 1e9);
        else
            printf("%-40s %-12s %5d %14.1f %14.1f %14.1f\n", l->name, mm_level_name(l->level), l->macs, one / 1e9, all / 1e9, all / nth / 1e9);
    }
    if (json) printf("\n]}\n");
    return 0;
}
#endif
