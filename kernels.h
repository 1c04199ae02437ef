/* kernels.h — the matmul kernels over quant.h's formats: the public API of
 * the files in kernels/, one translation unit per instruction-set family,
 * compiled once and linked into every program that multiplies (engine,
 * tests, benches).
 *
 * y[S][O] = x[S][I] · Wᵀ for a qt_tensor W of any format, at one of the CPU
 * levels below, chosen once by mm_init (by cpuid and what the OS reports,
 * or forced).
 * Two arithmetic paths (mm_init's idot flag):
 *   float   y = Σ_i deq(W[o,i]) · x[i] in f32, deq = q·scale exactly as
 *           qt_dequant_row. Each level has one fixed summation order per
 *           (row, activation row): the same for every S, batch and thread
 *           count, but different between levels (rounding). f32 weights
 *           always take this path.
 *   integer (IDOT, int8/int4/int2/grouped int4) each activation row is
 *           quantized to int8 (xs = absmax/127, q = rne(x·(127/absmax)))
 *           and D = Σ q_w·q_x is an exact int32 sum (q_w = stored value:
 *           int8, nibble-8, crumb-2), so every level gives bit-identical y:
 *             per-row formats: y = ((float)D · s[o]) · xs
 *             grouped:         L[g mod 16] += (float)D_g · s[o,g] for g in
 *                              increasing order (mul then add, L starts at
 *                              +0, missing groups of the last 16 add 0·0),
 *                              T = ((L0+L8)+(L4+L12)) + ... as L[j]+=L[j+8],
 *                              L[j]+=L[j+4], L[j]+=L[j+2], L0+L1; y = T · xs
 *           It needs I ≤ 2^17 (and ≤ mm_init's max_cols); larger I take the
 *           float path.
 * The plain C reference (level "scalar") defines both paths; every other
 * level is tested against it (tests/test_quant.c): integer bit for bit,
 * float within a bound. Bit-exactness relies on no FMA contraction of the
 * reference's a*b+c (-ffp-contract=off, the project default).
 *
 * Threads: mm_matmul runs an OpenMP team of its own. mm_matmul_team splits
 * the work over a team the caller runs (the engine's, team.h): every
 * thread calls it and it returns when y is complete for all of them.
 * mm_matmul_slot runs on the calling thread alone with its own scratch
 * slot, so the threads of a team can each multiply something different.
 *
 * Prefix: mm_. Must not: know about models, files or the environment. */
#ifndef COLI_KERNELS_H
#define COLI_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

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

typedef struct mm_kernels mm_kernels; /* one level's kernel table (kernels/impl.h) */

/* A level, its arithmetic path and the scratch for activation
 * quantization: `slots` regions of max_rows rows each. */
typedef struct {
    int level, idot, max_rows, slots;
    int64_t max_cols;
    const mm_kernels *k;
    int8_t *qx;  /* [slots][max_rows][ldq] */
    float *xs;   /* [slots][max_rows]      */
    int32_t *xg; /* [slots][max_rows][ldg] */
    int64_t ldq, ldg;
} mm_ctx;

/* A barrier of the caller's team (mm_matmul_team). */
typedef void (*mm_sync_fn)(void *arg);

/* Name of a level ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni",
 * "neon", "neon-dotprod", "neon-i8mm"); "?" if out of range. */
const char *mm_level_name(int level);
/* Level from its name (as mm_level_name), or -1 if unknown. */
int mm_level_parse(const char *name);
/* What a level needs from the CPU, for refusals. */
const char *mm_level_needs(int level);
/* 1 if this build has the level and this CPU (and OS) can run it. */
int mm_level_ok(int level);
/* The best level this CPU supports. */
int mm_best_level(void);

/* Sets up c for one level (-1 = mm_best_level()), idot on/off, and calls of
 * at most max_rows activation rows of at most max_cols inputs (larger calls
 * still work: S is chunked, I beyond max_cols takes the float path), with
 * `slots` scratch slots for mm_matmul_slot (≥ 1; slot 0 also serves
 * mm_matmul and mm_matmul_team). 0 ok, -1 with err set (level unknown or
 * not supported by this CPU, bad sizes, out of memory). */
int mm_init(mm_ctx *c, int level, int idot, int max_rows, int64_t max_cols, int slots, char *err, size_t n);
/* Frees c's scratch; c may then be re-initialised. */
void mm_free(mm_ctx *c);

/* y[S][O] = x[S][I] · Wᵀ with c's level (see the header comment for
 * threads). Uses c's scratch, so never call it concurrently on one c from
 * unrelated threads; no allocation. y[s][o] depends only on W row o and x
 * row s (not on S, other rows or the thread count). */
void mm_matmul(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y);

/* mm_matmul over the caller's team: thread tid of nth, every thread with
 * the same arguments; sync(arg) is a barrier of the whole team. Returns
 * when y is complete for every thread. Same results as mm_matmul. */
void mm_matmul_team(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y, int tid, int nth, mm_sync_fn sync, void *arg);

/* mm_matmul on the calling thread alone, with scratch slot `slot` (< the
 * slots of mm_init): threads may run it concurrently on distinct slots.
 * Same results as mm_matmul. */
void mm_matmul_slot(mm_ctx *c, const qt_tensor *W, const float *x, int S, float *y, int slot);

/* y[I] = Σ_o x[o]·deq(W[o,:]) (the transposed product, for absorbed MLA):
 * in increasing o, each step y + x[o]·deq, so bit-identical on every level;
 * single-threaded and reentrant (reads c only). */
void mm_matvec_t(const mm_ctx *c, const qt_tensor *W, const float *x, float *y);

/* Quantizes one activation row x[I] for weights of format f (group size gs)
 * into q in the layout of a level with vector bytes vb (0 = natural order).
 * *xs = absmax/127 (0, with q = 0, when absmax < 1e-30; NaN if any x is not
 * finite), q = rne(x·127/absmax); xg gets offset·Σq per group, zero-padded
 * to a multiple of 16 groups (per-row formats: xg[0] only). */
void mm_act_quant(const float *x, int64_t I, qt_fmt f, int gs, int vb, int8_t *q, float *xs, int32_t *xg);

/* y[S][O] (row stride O) by the reference integer path, the definition
 * every level reproduces, from rows q[S][ldq] that mm_act_quant made in
 * natural order (vb 0) and their scales xs[S]: what a device backend must
 * compute bit for bit (backend_cuda.h). Single-threaded and reentrant;
 * 0, or -1 when W is not in an integer format (or its group size is
 * invalid) or its per-group sums cannot be allocated. */
int mm_idot_ref(const qt_tensor *W, const int8_t *q, int64_t ldq, const float *xs, int S, float *y);

/* Dot product of n floats in a fixed order on every CPU: 16 running sums
 * (lane i mod 16, mul then add), then the tail into lane 0, then the sums
 * pairwise (j + 8, j + 4, j + 2, j + 1). Plain C that the compiler turns
 * into vector code of any width without reordering; inline, since it sits
 * in attention's and the indexer's innermost loops. */
static inline float mm_dot_f32(const float *a, const float *b, int64_t n) {
    float s[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) s[j] = s[j] + a[i + j] * b[i + j];
    for (; i < n; i++) s[0] = s[0] + a[i] * b[i];
    for (int w = 8; w > 0; w >>= 1)
        for (int j = 0; j < w; j++) s[j] = s[j] + s[j + w];
    return s[0];
}

/* y[i] = y[i] + a·x[i] for i < n (mul then add; restrict lets the
 * compiler vectorize it without an aliasing check). */
static inline void mm_axpy_f32(float *restrict y, float a, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] + a * x[i];
}

#endif
