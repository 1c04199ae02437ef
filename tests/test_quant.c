/* test_quant.c — formats, quantizer, format detection and every kernel level
 * of quant.h against the plain C reference.
 *
 * Metrics: integer (IDOT) paths and mm_matvec_t must match the reference bit
 * for bit; float paths must be within FLOAT_TOL · Σ|deq(w)·x| of a double
 * sum (outputs are poisoned with NaN first, so unwritten ones fail). Weights
 * are random packed bytes (every code, pad nibbles included) as well as
 * quantizer output. Levels this CPU lacks are skipped with a message. */
#include "kernels.h"
#include "team.h"
#include "tests/check.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <math.h>

#define FLOAT_TOL 1e-5 /* × Σ|w·x|: f32 sums of ≤ 5000 terms stay ~1e-6 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float frand(void) { return (float)((double)(rng() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* A tensor with owned storage. */
typedef struct {
    qt_tensor t;
    uint8_t *w;
    float *s;
} owned;

/* Random tensor: raw random bytes (every code) or quantized from random floats. */
static owned make_tensor(qt_fmt f, int64_t O, int64_t I, int gs, int raw) {
    owned m;
    uint64_t nb = qt_weight_bytes(f, O, I, gs), ns = qt_scale_count(f, O, I, gs);
    m.w = malloc(nb ? nb : 1);
    m.s = ns ? malloc(ns * 4) : NULL;
    if (raw || f == QT_F32) {
        if (f == QT_F32)
            for (uint64_t i = 0; i < nb / 4; i++) ((float *)m.w)[i] = frand();
        else
            for (uint64_t i = 0; i < nb; i++) m.w[i] = (uint8_t)rng();
        for (uint64_t i = 0; i < ns; i++) m.s[i] = 0.001f + 0.01f * fabsf(frand());
    } else {
        float *src = malloc((size_t)(O * I) * 4);
        for (int64_t i = 0; i < O * I; i++) src[i] = frand() * (1.0f + (float)(i % 7));
        qt_quantize(src, O, I, f, gs, m.w, m.s);
        free(src);
    }
    m.t = (qt_tensor){f, O, I, m.w, m.s, f == QT_I4G ? gs : 0};
    return m;
}

static void free_tensor(owned *m) {
    free(m->w);
    free(m->s);
}

static float *randvec(int64_t n) {
    float *v = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) v[i] = frand() * 2.0f;
    return v;
}

static void poison(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = NAN;
}

/* ---------------------------------------------------------------- formats */

static void test_sizes(void) {
    CHECK(qt_weight_bytes(QT_F32, 3, 5, 0) == 60);
    CHECK(qt_weight_bytes(QT_I8, 3, 5, 0) == 15);
    CHECK(qt_weight_bytes(QT_I4, 3, 5, 0) == 9);
    CHECK(qt_weight_bytes(QT_I2, 3, 5, 0) == 6);
    CHECK(qt_weight_bytes(QT_I4G, 3, 5, 64) == 9);
    CHECK(qt_weight_bytes(QT_I4G, 3, 5, 40) == 0);  /* not a multiple of 16 */
    CHECK(qt_weight_bytes(QT_I4G, 3, 5, 512) == 0); /* above 256 */
    CHECK(qt_weight_bytes(QT_I8, INT64_MAX, INT64_MAX, 0) == 0);
    CHECK(qt_weight_bytes(QT_F32, 1, INT64_MAX, 0) == 0);
    CHECK(qt_weight_bytes(QT_I8, 0, 5, 0) == 0);
    CHECK(qt_scale_count(QT_F32, 3, 5, 0) == 0);
    CHECK(qt_scale_count(QT_I2, 3, 5, 0) == 3);
    CHECK(qt_scale_count(QT_I4G, 3, 100, 32) == 12);
    CHECK(qt_scale_count(QT_I4G, 3, 10, 64) == 3);
    CHECK(qt_scale_count(QT_I4G, INT64_MAX, 1000, 16) == 0);
    CHECK(!strcmp(qt_fmt_name(QT_I4G), "int4-grouped"));
}

/* Nibble 0 → -8, 15 → +7; crumb 0 → -2, 3 → +1; int8 0x80 → -128. */
static void test_extremes(void) {
    uint8_t w4[2] = {0xF0, 0x0F}; /* elements: 0, 15, 15, 0 */
    float s = 0.5f, out[4];
    qt_tensor W = {QT_I4, 1, 3, w4, &s, 0};
    qt_dequant_row(&W, 0, out);
    CHECK(out[0] == -4.0f && out[1] == 3.5f && out[2] == 3.5f);
    uint8_t w2 = 0xC0 | 0x0C; /* crumbs 0, 3, 0, 3 */
    qt_tensor W2 = {QT_I2, 1, 4, &w2, &s, 0};
    qt_dequant_row(&W2, 0, out);
    CHECK(out[0] == -1.0f && out[1] == 0.5f && out[2] == -1.0f && out[3] == 0.5f);
    uint8_t w8[2] = {0x80, 0x7F};
    qt_tensor W8 = {QT_I8, 1, 2, w8, &s, 0};
    qt_dequant_row(&W8, 0, out);
    CHECK(out[0] == -64.0f && out[1] == 63.5f);
}

/* qt_rne equals rintf; the quantizer rounds half to even, floors the scale,
 * pads, counts non-finite inputs and round-trips within scale/2. */
static void test_quantizer(void) {
    int bad_rne = 0;
    for (int i = 0; i < 100000; i++) {
        float v = frand() * 300.0f;
        if (i < 1000) v = (float)(i - 500) * 0.5f;
        bad_rne += qt_rne(v) != rintf(v);
    }
    CHECK(bad_rne == 0);

    float src[6] = {7.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f};
    uint8_t w[8];
    float s;
    qt_quantize(src, 1, 6, QT_I4, 0, w, &s);
    CHECK(s == 1.0f);
    CHECK(qt_nib(w, 0) == 15 && qt_nib(w, 1) == 8 && qt_nib(w, 2) == 10 && qt_nib(w, 3) == 10 && qt_nib(w, 4) == 8 && qt_nib(w, 5) == 6);
    float odd[3] = {1, 2, 3};
    uint8_t w3[2];
    qt_quantize(odd, 1, 3, QT_I4, 0, w3, &s);
    CHECK((w3[1] >> 4) == 8); /* padding nibble */
    uint8_t w1;
    qt_quantize(odd, 1, 3, QT_I2, 0, &w1, &s);
    CHECK((w1 >> 6) == 2); /* padding crumb */
    float zero[4] = {0, 0, 0, 0};
    qt_quantize(zero, 1, 4, QT_I8, 0, w, &s);
    CHECK(s == 1e-8f);
    float nf[4] = {1.0f, NAN, INFINITY, -2.0f};
    uint8_t w8[4];
    CHECK(qt_quantize(nf, 1, 4, QT_I8, 0, w8, &s) == 2);
    CHECK(s == 2.0f / 127.0f && w8[1] == 0 && w8[2] == 0 && (int8_t)w8[3] == -127);

    const qt_fmt fm[4] = {QT_I8, QT_I4, QT_I2, QT_I4G};
    const int64_t Is[4] = {1, 33, 100, 257};
    for (int fi = 0; fi < 4; fi++)
        for (int ii = 0; ii < 4; ii++) {
            const int gs = fm[fi] == QT_I4G ? 16 << (ii % 3) : 0;
            const int64_t O = 3, I = Is[ii], ng = fm[fi] == QT_I4G ? (I + gs - 1) / gs : 1;
            float *x = randvec(O * I), *d = malloc((size_t)I * 4);
            uint8_t *pw = malloc(qt_weight_bytes(fm[fi], O, I, gs));
            float *ps = malloc(qt_scale_count(fm[fi], O, I, gs) * 4);
            qt_quantize(x, O, I, fm[fi], gs, pw, ps);
            qt_tensor W = {fm[fi], O, I, pw, ps, gs};
            int bad = 0;
            for (int64_t o = 0; o < O; o++) {
                qt_dequant_row(&W, o, d);
                for (int64_t i = 0; i < I; i++) {
                    float sc = ps[o * ng + (fm[fi] == QT_I4G ? i / gs : 0)];
                    bad += !(fabsf(d[i] - x[o * I + i]) <= sc * 0.5f * (1 + 1e-6f));
                }
            }
            CHECK(bad == 0);
            free(x), free(d), free(pw), free(ps);
        }
}

static void test_resolve(void) {
    qt_fmt f;
    int gs;
    char why[256];
    const int64_t O = 4, I = 100;
    CHECK(qt_resolve(O, I, 4 * O * I, 0, &f, &gs, why, sizeof why) == 0 && f == QT_F32);
    /* byte counts no file can have never match an overflowing product (found by the fuzzer) */
    CHECK(qt_resolve(INT64_C(1) << 40, INT64_C(1) << 40, UINT64_MAX, (uint64_t)1 << 42, &f, &gs, why, sizeof why) == -1);
    CHECK(qt_scale_count(QT_I4G, 1, INT64_MAX, 16) == (uint64_t)(INT64_MAX / 16 + 1)); /* no signed overflow */
    CHECK(qt_resolve(O, I, O * I, 4 * O, &f, &gs, why, sizeof why) == 0 && f == QT_I8);
    CHECK(qt_resolve(O, I, O * 50, 4 * O, &f, &gs, why, sizeof why) == 0 && f == QT_I4);
    CHECK(qt_resolve(O, I, O * 25, 4 * O, &f, &gs, why, sizeof why) == 0 && f == QT_I2);
    /* every candidate, where unambiguous (I = 768: ceil(I/gs) differ) */
    const int cand[8] = {16, 32, 48, 64, 96, 128, 192, 256};
    for (int k = 0; k < 8; k++) {
        int64_t I2 = 768, ng = (I2 + cand[k] - 1) / cand[k];
        CHECK(qt_resolve(O, I2, O * 384, 4 * O * ng, &f, &gs, why, sizeof why) == 0 && f == QT_I4G && gs == cand[k]);
    }
    /* I not a multiple of gs: I = 100, 4 scales per row → first match gs 32 */
    CHECK(qt_resolve(O, I, O * 50, 4 * O * 4, &f, &gs, why, sizeof why) == 0 && f == QT_I4G && gs == 32);
    /* ambiguity: I = 64, 2 scales/row fits gs 32 and 48 → smallest wins */
    CHECK(qt_resolve(O, 64, O * 32, 4 * O * 2, &f, &gs, why, sizeof why) == 0 && gs == 32);
    /* collisions at I = 1: int8 is checked first */
    CHECK(qt_resolve(O, 1, O, 4 * O, &f, &gs, why, sizeof why) == 0 && f == QT_I8);
    /* I = 2: int4 before int2 */
    CHECK(qt_resolve(O, 2, O, 4 * O, &f, &gs, why, sizeof why) == 0 && f == QT_I4);
    /* hostile counts */
    CHECK(qt_resolve(O, I, O * I + 1, 4 * O, &f, &gs, why, sizeof why) == -1);
    CHECK_HAS(why, "match no format");
    CHECK(qt_resolve(O, I, O * I, 4 * O + 4, &f, &gs, why, sizeof why) == -1);
    CHECK_HAS(why, "scale bytes");
    CHECK(qt_resolve(O, I, O * 50, 4 * O * 5, &f, &gs, why, sizeof why) == -1); /* 5 groups: no gs */
    CHECK_HAS(why, "group size");
    CHECK(qt_resolve(O, I, O * 50, 4 * O - 4, &f, &gs, why, sizeof why) == -1);
    CHECK_HAS(why, "int4");
    CHECK(qt_resolve(O, I, O * I, 4 * O + 2, &f, &gs, why, sizeof why) == -1);
    CHECK_HAS(why, "multiple of 4");
    CHECK(qt_resolve(O, I, 4 * O * I + 4, 0, &f, &gs, why, sizeof why) == -1);
    CHECK_HAS(why, "float tensor");
    CHECK(qt_resolve(O, 128, O * 2 * 24, 4 * O * 2, &f, &gs, why, sizeof why) == -1); /* int3-g64 bytes */
    CHECK_HAS(why, "int3");
    CHECK(qt_resolve(O, 512, O * 2 * 98, 4, &f, &gs, why, sizeof why) == -1); /* E8 lattice */
    CHECK_HAS(why, "E8");
    CHECK(qt_resolve(256, 256, 256 * 256, 4 * 4, &f, &gs, why, sizeof why) == -1); /* FP8 block scales */
    CHECK_HAS(why, "FP8");
    CHECK(qt_resolve(0, I, 0, 0, &f, &gs, why, sizeof why) == -1);
    CHECK_HAS(why, "bad shape");
    CHECK(qt_resolve(INT64_C(1) << 40, INT64_C(1) << 40, UINT64_MAX, 4, &f, &gs, why, sizeof why) == -1);
}

static void test_rows(void) {
    owned m = make_tensor(QT_I4G, 6, 100, 32, 1);
    qt_tensor v = qt_rows(&m.t, 2, 3);
    float a[100], b[100];
    CHECK(v.O == 3 && v.w == m.w + 2 * 50 && v.s == m.s + 2 * 4);
    qt_dequant_row(&m.t, 3, a);
    qt_dequant_row(&v, 1, b);
    CHECK(!memcmp(a, b, sizeof a));
    owned p = make_tensor(QT_I8, 6, 7, 0, 1);
    qt_tensor u = qt_rows(&p.t, 5, 1);
    CHECK(u.s == p.s + 5 && u.w == p.w + 35);
    free_tensor(&m);
    free_tensor(&p);
}

/* Activation quantization rounds half to even and flags non-finite rows. */
static void test_act_quant(void) {
    float x[5] = {127.0f, 0.5f, 1.5f, -0.5f, -2.5f};
    int8_t q[5];
    float xs;
    int32_t xg[16];
    mm_act_quant(x, 5, QT_I4, 0, 0, q, &xs, xg);
    CHECK(xs == 1.0f && q[0] == 127 && q[1] == 0 && q[2] == 2 && q[3] == 0 && q[4] == -2);
    CHECK(xg[0] == 8 * (127 + 2 - 2));
    x[2] = INFINITY;
    mm_act_quant(x, 5, QT_I8, 0, 0, q, &xs, xg);
    CHECK(isnan(xs) && q[2] == 0);
}

/* ---------------------------------------------------------------- kernels */

typedef struct {
    qt_fmt f;
    int64_t O, I;
    int gs;
} shape;

static int levels_tested;

/* Σ|deq·x| and the double sum of one output. */
static void ref_double(const qt_tensor *W, int64_t o, const float *x, double *sum, double *mag) {
    float *d = malloc((size_t)W->I * 4);
    qt_dequant_row(W, o, d);
    *sum = *mag = 0;
    for (int64_t i = 0; i < W->I; i++) {
        *sum += (double)d[i] * x[i];
        *mag += fabs((double)d[i] * x[i]);
    }
    free(d);
}

/* One shape on one level against the reference, both paths, several S. */
static void check_shape(mm_ctx *lv, mm_ctx *lvf, mm_ctx *ref, const shape *sh, int raw, const int *Ss, int nS) {
    owned m = make_tensor(sh->f, sh->O, sh->I, sh->gs, raw);
    const int64_t O = sh->O, I = sh->I;
    const int Smax = Ss[nS - 1];
    float *x = randvec((int64_t)Smax * I), *y = malloc((size_t)Smax * O * 4), *yr = malloc((size_t)Smax * O * 4);
    float *y1 = malloc((size_t)O * 4);
    if (I > 3) x[3] = 0.0f; /* a zero, and a row with mixed magnitudes */
    for (int k = 0; k < nS; k++) {
        const int S = Ss[k];
        /* integer path: bit-exact */
        if (sh->f != QT_F32) {
            poison(y, S * O);
            poison(yr, S * O);
            mm_matmul(lv, &m.t, x, S, y);
            mm_matmul(ref, &m.t, x, S, yr);
            int diff = memcmp(y, yr, (size_t)S * O * 4) != 0;
            CHECK(!diff);
            if (diff)
                fprintf(stderr, "  idot %s %s O=%lld I=%lld gs=%d S=%d raw=%d\n", mm_level_name(lv->level), qt_fmt_name(sh->f), (long long)O,
                        (long long)I, sh->gs, S, raw);
            /* integer result is within activation-quantization error of exact */
            int far = 0;
            for (int s = 0; s < S; s++) {
                float amax = 0;
                for (int64_t i = 0; i < I; i++) amax = fmaxf(amax, fabsf(x[s * I + i]));
                for (int64_t o = 0; o < O; o++) {
                    double sum, mag, wabs = 0;
                    ref_double(&m.t, o, x + s * I, &sum, &mag);
                    float *d = malloc((size_t)I * 4);
                    qt_dequant_row(&m.t, o, d);
                    for (int64_t i = 0; i < I; i++) wabs += fabs(d[i]);
                    free(d);
                    far += !(fabs(yr[s * O + o] - sum) <= wabs * amax / 254.0 * 1.0001 + 1e-5 * mag + 1e-30);
                }
            }
            CHECK(far == 0);
            /* S independence: row s of a batch equals a call with S = 1 */
            int s1 = S - 1;
            poison(y1, O);
            mm_matmul(lv, &m.t, x + (size_t)s1 * I, 1, y1);
            CHECK(!memcmp(y1, y + (size_t)s1 * O, (size_t)O * 4));
        }
        /* float path: bounded by Σ|w·x| */
        poison(y, S * O);
        mm_matmul(lvf, &m.t, x, S, y);
        int bad = 0;
        for (int s = 0; s < S; s++)
            for (int64_t o = 0; o < O; o++) {
                double sum, mag;
                ref_double(&m.t, o, x + s * I, &sum, &mag);
                bad += !(fabs(y[s * O + o] - sum) <= FLOAT_TOL * mag + 1e-30);
            }
        CHECK(bad == 0);
        if (bad)
            fprintf(stderr, "  float %s %s O=%lld I=%lld gs=%d S=%d: %d bad\n", mm_level_name(lv->level), qt_fmt_name(sh->f), (long long)O,
                    (long long)I, sh->gs, S, bad);
        int s1 = S / 2;
        poison(y1, O);
        mm_matmul(lvf, &m.t, x + (size_t)s1 * I, 1, y1);
        CHECK(!memcmp(y1, y + (size_t)s1 * O, (size_t)O * 4));
    }
    /* transposed product: bit-exact with the reference */
    float *xt = randvec(O), *yt = malloc((size_t)I * 4), *ytr = malloc((size_t)I * 4);
    poison(yt, I);
    mm_matvec_t(lv, &m.t, xt, yt);
    mm_matvec_t(ref, &m.t, xt, ytr);
    CHECK(!memcmp(yt, ytr, (size_t)I * 4));
    free(xt), free(yt), free(ytr);
    free(x), free(y), free(yr), free(y1);
    free_tensor(&m);
}

/* mm_matmul_team over a thread team, and mm_matmul_slot on each thread's
 * own slot, give mm_matmul's bits. */
typedef struct {
    team *t;
    mm_ctx *c;
    const qt_tensor *W;
    const float *x;
    float *y, *ys[4];
    int S;
} team_job;

static void team_sync_cb(void *arg) { team_sync((team *)arg); }

static void team_matmul(void *arg, int tid, int n) {
    team_job *j = (team_job *)arg;
    mm_matmul_team(j->c, j->W, j->x, j->S, j->y, tid, n, team_sync_cb, j->t);
    mm_matmul_slot(j->c, j->W, j->x, j->S, j->ys[tid], tid); /* each thread the whole product, concurrently */
}

static void check_team(int level, int idot) {
    char err[256];
    owned m = make_tensor(QT_I4G, 301, 700, 64, 1);
    const int S = 11;
    float *x = randvec(S * 700), *y = malloc(S * 301 * 4), *yt = malloc(S * 301 * 4), *ys[4];
    for (int i = 0; i < 4; i++) ys[i] = malloc(S * 301 * 4);
    for (int nth = 1; nth <= 3; nth++) {
        mm_ctx c;
        CHECK(mm_init(&c, level, idot, 4, 4096, nth, err, sizeof err) == 0); /* 4 rows: S is chunked */
        mm_matmul(&c, &m.t, x, S, y);
        team t;
        CHECK(team_start(&t, nth) == 0);
        team_job j = {&t, &c, &m.t, x, yt, {ys[0], ys[1], ys[2], ys[3]}, S};
        poison(yt, S * 301);
        team_run(&t, team_matmul, &j);
        CHECK(!memcmp(y, yt, S * 301 * 4));
        for (int i = 0; i < nth; i++) CHECK(!memcmp(y, ys[i], S * 301 * 4));
        team_stop(&t);
        mm_free(&c);
    }
    free(x), free(y), free(yt);
    for (int i = 0; i < 4; i++) free(ys[i]);
    free_tensor(&m);
}

/* Row slices, thread counts, chunked S, oversized I and non-finite rows. */
static void check_misc(mm_ctx *lv, mm_ctx *lvf) {
    owned m = make_tensor(QT_I4G, 37, 300, 64, 1);
    const int S = 9;
    float *x = randvec(S * 300), *y = malloc(S * 37 * 4), *ys = malloc(S * 37 * 4);
    mm_ctx *cs[2] = {lv, lvf};
    for (int p = 0; p < 2; p++) {
        mm_matmul(cs[p], &m.t, x, S, y);
        qt_tensor v = qt_rows(&m.t, 5, 20);
        poison(ys, S * 20);
        mm_matmul(cs[p], &v, x, S, ys);
        int same = 1;
        for (int s = 0; s < S; s++) same &= !memcmp(ys + s * 20, y + s * 37 + 5, 20 * 4);
        CHECK(same);
#ifdef _OPENMP
        int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        poison(ys, S * 37);
        mm_matmul(cs[p], &m.t, x, S, ys);
        omp_set_num_threads(3);
        CHECK(!memcmp(ys, y, S * 37 * 4));
        poison(ys, S * 37);
        mm_matmul(cs[p], &m.t, x, S, ys);
        omp_set_num_threads(nt);
        CHECK(!memcmp(ys, y, S * 37 * 4));
#endif
    }
    /* many rows: S splits into cache blocks, each row as if alone */
    {
        owned b = make_tensor(QT_I4G, 7, 3000, 64, 1);
        const int SB = 150;
        float *xb = randvec((int64_t)SB * 3000), *yb = malloc((size_t)SB * 7 * 4), *y1 = malloc(7 * 4);
        for (int p = 0; p < 2; p++) {
            poison(yb, SB * 7);
            mm_matmul(cs[p], &b.t, xb, SB, yb);
            int same = 1;
            for (int r = 0; r < SB; r += 37) {
                mm_matmul(cs[p], &b.t, xb + (size_t)r * 3000, 1, y1);
                same &= !memcmp(y1, yb + (size_t)r * 7, 7 * 4);
            }
            CHECK(same);
        }
        free(xb), free(yb), free(y1);
        free_tensor(&b);
    }
    /* non-finite activation row: integer path gives NaN for that row only */
    x[300 + 7] = INFINITY;
    poison(y, S * 37);
    mm_matmul(lv, &m.t, x, S, y);
    int nan_row = 1, fin_rows = 1;
    for (int o = 0; o < 37; o++) {
        nan_row &= isnan(y[37 + o]);
        fin_rows &= isfinite(y[o]) && isfinite(y[2 * 37 + o]);
    }
    CHECK(nan_row && fin_rows);
    free(x), free(y), free(ys);
    free_tensor(&m);
}

/* A level with small scratch: S beyond max_rows is chunked, I beyond max_cols
 * takes the float path; both equal the unconstrained results. */
static void check_limits(int level) {
    char err[256];
    mm_ctx small, big, fl;
    CHECK(mm_init(&small, level, 1, 3, 64, 1, err, sizeof err) == 0);
    CHECK(mm_init(&big, level, 1, 64, 4096, 1, err, sizeof err) == 0);
    CHECK(mm_init(&fl, level, 0, 1, 1, 1, err, sizeof err) == 0);
    owned m = make_tensor(QT_I8, 5, 60, 0, 1);
    float *x = randvec(10 * 200), *y = malloc(10 * 5 * 4), *yb = malloc(10 * 5 * 4);
    mm_matmul(&small, &m.t, x, 10, y);
    mm_matmul(&big, &m.t, x, 10, yb);
    CHECK(!memcmp(y, yb, 10 * 5 * 4));
    owned n = make_tensor(QT_I4, 5, 200, 0, 1);
    mm_matmul(&small, &n.t, x, 10, y);
    mm_matmul(&fl, &n.t, x, 10, yb);
    CHECK(!memcmp(y, yb, 10 * 5 * 4));
    free(x), free(y), free(yb);
    free_tensor(&m);
    free_tensor(&n);
    mm_free(&small);
    mm_free(&big);
    mm_free(&fl);
}

static void test_levels(void) {
    char err[256];
    mm_ctx ref, reff;
    CHECK(mm_init(&ref, MM_SCALAR, 1, 64, 8192, 1, err, sizeof err) == 0);
    CHECK(mm_init(&reff, MM_SCALAR, 0, 64, 8192, 1, err, sizeof err) == 0);
    CHECK(mm_level_parse("avx512vnni") == MM_AVX512VNNI && mm_level_parse("neon-i8mm") == MM_NEON_I8MM && mm_level_parse("sse9") == -1);
    for (int l = 0; l < MM_NLEVELS; l++) CHECK(mm_level_parse(mm_level_name(l)) == l);
    CHECK(mm_level_ok(mm_best_level()));
    mm_ctx bad;
    CHECK(mm_init(&bad, MM_NLEVELS, 1, 1, 1, 1, err, sizeof err) == -1);
    CHECK_HAS(err, "unknown");
    CHECK(mm_init(&bad, MM_SCALAR, 1, 0, 1, 1, err, sizeof err) == -1);
    printf("best level here: %s\n", mm_level_name(mm_best_level()));

    static const shape shapes[] = {
        {QT_F32, 1, 1, 0},    {QT_F32, 5, 33, 0},    {QT_F32, 17, 1000, 0}, {QT_I8, 1, 1, 0},     {QT_I8, 3, 63, 0},
        {QT_I8, 5, 64, 0},    {QT_I8, 17, 257, 0},   {QT_I8, 4, 1000, 0},   {QT_I4, 1, 1, 0},     {QT_I4, 3, 7, 0},
        {QT_I4, 5, 127, 0},   {QT_I4, 9, 256, 0},    {QT_I4, 17, 1001, 0},  {QT_I2, 1, 3, 0},     {QT_I2, 3, 255, 0},
        {QT_I2, 5, 256, 0},   {QT_I2, 7, 1027, 0},   {QT_I4G, 1, 7, 16},    {QT_I4G, 3, 100, 128}, {QT_I4G, 2, 16, 16},
        {QT_I4G, 5, 257, 16}, {QT_I4G, 3, 512, 32},  {QT_I4G, 3, 300, 48},  {QT_I4G, 4, 1000, 64}, {QT_I4G, 3, 640, 96},
        {QT_I4G, 3, 129, 128}, {QT_I4G, 2, 700, 192}, {QT_I4G, 3, 4200, 256}, {QT_I4G, 5, 4096, 256}, {QT_I4G, 3, 385, 64},
        {QT_I4G, 3, 2100, 64}, {QT_I4G, 2, 4096, 128}, {QT_I4G, 3, 2049, 128}, {QT_I4G, 4, 1024, 64}, {QT_I4G, 5, 2500, 64}, {QT_I4G, 5, 1300, 32},
    };
    const int nsh = (int)(sizeof shapes / sizeof shapes[0]);
    static const int Sall[6] = {1, 2, 3, 7, 8, 33};
    for (int l = 0; l < MM_NLEVELS; l++) {
        mm_ctx lv, lvf;
        if (!mm_level_ok(l)) {
            CHECK(mm_init(&lv, l, 1, 8, 64, 1, err, sizeof err) == -1);
            CHECK_HAS(err, mm_level_name(l));
            SKIP(mm_level_name(l), "kernel level not supported by this CPU");
            continue;
        }
        CHECK(mm_init(&lv, l, 1, 64, 8192, 1, err, sizeof err) == 0);
        CHECK(mm_init(&lvf, l, 0, 64, 8192, 1, err, sizeof err) == 0);
        int before = check_failures;
        for (int k = 0; k < nsh; k++) {
            int Ss[2] = {Sall[k % 6], 33};
            int raw = k & 1;
            check_shape(&lv, &lvf, &ref, &shapes[k], raw, Ss, Sall[k % 6] == 33 ? 1 : 2);
            check_shape(&lv, &lvf, &ref, &shapes[k], !raw, Ss, 1);
        }
        /* every S on one mid-sized shape per format */
        static const shape mid[] = {{QT_I8, 6, 200, 0}, {QT_I4, 6, 301, 0}, {QT_I2, 6, 390, 0}, {QT_I4G, 6, 1100, 64}};
        for (int k = 0; k < 4; k++) check_shape(&lv, &lvf, &ref, &mid[k], 1, Sall, 6);
        /* plain int4 in tiles of 4 rows (512-bit) or 2 (256-bit) and int8 in
         * 4-row tiles (vpdpbusd, 512-bit), at S >= 16: each tail of
         * activation rows, 7 rows (tiles and rows alone per thread), an odd
         * width, 67 rows in chunks of 64 + 3; 37 rows: blocks of MM_GOB
         * weight rows and what is left of them */
        static const int S4[4] = {17, 18, 19, 67};
        static const shape r4[] = {{QT_I4, 7, 301, 0}, {QT_I8, 7, 301, 0}, {QT_I8, 9, 4096, 0},
                                   {QT_I4, 37, 301, 0}, {QT_I8, 37, 512, 0}, {QT_I4G, 37, 1100, 64}, {QT_I4G, 37, 600, 32}};
        for (int k = 0; k < 7; k++) check_shape(&lv, &lvf, &ref, &r4[k], 1, S4, 4);
        check_misc(&lv, &lvf);
        check_limits(l);
        check_team(l, 1);
        check_team(l, 0);
        printf("level %-12s %s\n", mm_level_name(l), check_failures == before ? "ok (integer bit-exact, float within bound)" : "FAILED");
        levels_tested++;
        mm_free(&lv);
        mm_free(&lvf);
    }
    mm_free(&ref);
    mm_free(&reff);
}

int main(void) {
    test_sizes();
    test_extremes();
    test_quantizer();
    test_resolve();
    test_rows();
    test_act_quant();
    test_levels();
    CHECK(levels_tested >= 2);
    return check_report("test_quant");
}
