/* test_cuda.c — backend_cuda.h: the GPU's integer matmul against the CPU
 * reference (kernels.h's scalar level, IDOT), bit for bit, for every
 * quantized format, group sizes 16..256 with a partial last group, rows
 * whose bytes are and are not a multiple of 4 (the word and byte paths),
 * 1..9 activation rows, zero and non-finite rows, and I up to 2^17;
 * several matrices of one input in one call, each as its own call, also
 * each on its own range of the rows (a layer's experts); batches of
 * experts with SwiGLU on the device against the CPU's fwd_mlp; absorbed
 * MLA attention over a latent cache and the DSA indexer's scores over
 * its key cache against the CPU's steps; and
 * slots refilled with other matrices (cu_mat_fill), their sources
 * overwritten the moment the call returns. And gpu.h, the engine's glue
 * over it: the dense table, its matmul, the latent cache's validity, a
 * failing call's fallback and the end line's figures. Without
 * a CUDA build or a GPU, one SKIP line says which. */
#include "backend_cuda.h"
#include "fmath.h"
#include "gpu.h"
#include "kernels.h"
#include "quant.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* One shape: W [O][I] quantized to f (group size gs), S activation rows.
 * 1 when the GPU's y equals the scalar reference's bit for bit. */
static int same_as_cpu(mm_ctx *ref, qt_fmt f, int64_t O, int64_t I, int gs, int S, int special) {
    float *src = (float *)malloc((size_t)(O * I) * 4), *x = (float *)malloc((size_t)(S * I) * 4);
    uint8_t *w = (uint8_t *)malloc(qt_weight_bytes(f, O, I, gs) + 1);
    float *s = (float *)malloc(qt_scale_count(f, O, I, gs) * 4 + 4), *y0 = (float *)malloc((size_t)(S * O) * 4),
          *y1 = (float *)malloc((size_t)(S * O) * 4), *xs = (float *)malloc((size_t)S * 4);
    int64_t ng = f == QT_I4G ? (I + gs - 1) / gs : 1, ldq = (I + 63) / 64 * 64;
    int8_t *q = (int8_t *)malloc((size_t)(S * ldq));
    int32_t *xg = (int32_t *)malloc((size_t)(ng + 16) * 4);
    int ok = 0;
    if (!src || !x || !w || !s || !y0 || !y1 || !xs || !q || !xg) goto out;
    for (int64_t i = 0; i < O * I; i++) src[i] = frand() * (1.0f + (float)(i % 7));
    for (int64_t i = 0; i < S * I; i++) x[i] = frand() * 3.0f;
    if (special && S > 2) {
        for (int64_t i = 0; i < I; i++) x[I + i] = 0.0f; /* row 1 all zero */
        x[2 * I + I / 2] = NAN;                          /* row 2 not finite */
    }
    qt_quantize(src, O, I, f, gs, w, s);
    qt_tensor W = {f, O, I, w, s, gs};
    mm_matmul(ref, &W, x, S, y0);
    for (int r = 0; r < S; r++) mm_act_quant(x + r * I, I, f, gs, 0, q + r * ldq, xs + r, xg);
    char err[300];
    cu_mat *d = cu_mat_upload((int)f, O, I, gs, (int64_t)qt_row_bytes(&W), w, s, err, sizeof err);
    if (!d) {
        fprintf(stderr, "upload: %s\n", err);
        goto out;
    }
    if (cu_mat_idot(d, q, ldq, xs, S, y1, err, sizeof err)) fprintf(stderr, "matmul: %s\n", err);
    else {
        ok = 1;
        for (int64_t i = 0; i < S * O && ok; i++)
            if (memcmp(y0 + i, y1 + i, 4) && !(isnan(y0[i]) && isnan(y1[i]))) { /* NaN payloads differ (the GPU's is canonical) */
                ok = 0;
                fprintf(stderr, "%s O=%lld I=%lld gs=%d S=%d: y[%lld] GPU %.9g, CPU %.9g\n", qt_fmt_name(f), (long long)O, (long long)I, gs, S,
                        (long long)i, y1[i], y0[i]);
            }
    }
    cu_mat_free(d);
out:
    free(src), free(x), free(w), free(s), free(y0), free(y1), free(xs), free(q), free(xg);
    return ok;
}

/* nm matrices of one input width I in formats f[] (group size gs for
 * grouped int4) times S rows in one cu_mats_idot call: each y bit for bit
 * its own cu_mat_idot's (which same_as_cpu holds to the CPU reference), one
 * round trip counted. 1 when all agree. */
static int group_same_as_single(const qt_fmt *f, int nm, const int64_t *O, int64_t I, int gs, int S) {
    cu_mat *d[CU_MAX_GROUP] = {0};
    float *y1[CU_MAX_GROUP] = {0}, *yg[CU_MAX_GROUP] = {0};
    int64_t ldq = I + 5; /* a row stride that is not the width */
    int8_t *q = (int8_t *)malloc((size_t)(S * ldq));
    float *xs = (float *)malloc((size_t)S * 4);
    char err[300];
    int ok = q && xs;
    for (int64_t i = 0; ok && i < S * ldq; i++) q[i] = i % ldq < I ? (int8_t)(frand() * 127.0f) : 0; /* zero past I, as mm_act_quant leaves it */
    for (int r = 0; ok && r < S; r++) xs[r] = 0.01f + 0.001f * (float)r;
    for (int i = 0; i < nm && ok; i++) {
        float *src = (float *)malloc((size_t)(O[i] * I) * 4), *s = (float *)malloc(qt_scale_count(f[i], O[i], I, gs) * 4 + 4);
        uint8_t *w = (uint8_t *)malloc(qt_weight_bytes(f[i], O[i], I, gs) + 1);
        y1[i] = (float *)malloc((size_t)(S * O[i]) * 4), yg[i] = (float *)malloc((size_t)(S * O[i]) * 4);
        ok = src && s && w && y1[i] && yg[i];
        if (ok) {
            for (int64_t k = 0; k < O[i] * I; k++) src[k] = frand();
            qt_quantize(src, O[i], I, f[i], gs, w, s);
            qt_tensor W = {f[i], O[i], I, w, s, gs};
            ok = (d[i] = cu_mat_upload((int)f[i], O[i], I, gs, (int64_t)qt_row_bytes(&W), w, s, err, sizeof err)) != NULL &&
                 cu_mat_idot(d[i], q, ldq, xs, S, y1[i], err, sizeof err) == 0;
        }
        free(src), free(s), free(w);
    }
    cu_stats a, b;
    cu_stats_get(&a);
    if (ok && cu_mats_idot((const cu_mat *const *)d, nm, q, ldq, xs, S, yg, err, sizeof err)) ok = 0;
    cu_stats_get(&b);
    if (!ok) fprintf(stderr, "group of %d: %s\n", nm, err);
    for (int i = 0; i < nm && ok; i++)
        if (memcmp(y1[i], yg[i], (size_t)(S * O[i]) * 4)) ok = 0, fprintf(stderr, "group of %d, I=%lld: matrix %d differs from its own call\n", nm, (long long)I, i);
    ok &= b.calls == a.calls + 1 && b.mats == a.mats + (uint64_t)nm;
    for (int i = 0; i < nm; i++) cu_mat_free(d[i]), free(y1[i]), free(yg[i]);
    free(q), free(xs);
    return ok;
}

/* Groups: formats mixed and alike, 1..CU_MAX_GROUP matrices, odd widths
 * and row counts; and what a group may not be. */
static void test_groups(void) {
    const qt_fmt all[4] = {QT_I8, QT_I4, QT_I2, QT_I4G}, i4g[2] = {QT_I4G, QT_I4G}, i8[3] = {QT_I8, QT_I8, QT_I8};
    const int64_t O4[4] = {33, 7, 130, 64}, O2[2] = {96, 96}, O3[3] = {5, 250, 17};
    CHECK(group_same_as_single(all, 4, O4, 100, 32, 3));
    CHECK(group_same_as_single(all, 4, O4, 4097, 64, 9));
    CHECK(group_same_as_single(i4g, 2, O2, 200, 16, 1)); /* gate and up of an expert */
    CHECK(group_same_as_single(i8, 3, O3, 63, 0, 2));
    CHECK(group_same_as_single(all + 1, 1, O4, 17, 0, 4));
    char err[300];
    int8_t w[64] = {0}, q[64] = {0};
    float s[2] = {1, 1}, xs[1] = {1}, y0[2], y1[2], *ys[2] = {y0, y1};
    cu_mat *a = cu_mat_upload(QT_I8, 2, 32, 0, 32, w, s, err, sizeof err), *b = cu_mat_upload(QT_I8, 2, 31, 0, 31, w, s, err, sizeof err);
    CHECK(a && b);
    if (a && b) {
        const cu_mat *ab[2] = {a, b}, *aa[5] = {a, a, a, a, a};
        CHECK(cu_mats_idot(ab, 2, q, 32, xs, 1, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "matrices of 32 and 31 inputs in one call");
        CHECK(cu_mats_idot(aa, 5, q, 32, xs, 1, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "5 matrices in one call");
        CHECK(cu_mats_idot(aa, 0, q, 32, xs, 1, ys, err, sizeof err) == -1);
    }
    cu_mat_free(a), cu_mat_free(b);
}

/* A quantized random matrix [O][I] of format f: weights and scales in one
 * malloc'd block (*w, then *s). */
static void *rand_mat(qt_fmt f, int64_t O, int64_t I, int gs, uint8_t **w, float **s) {
    size_t wb = qt_weight_bytes(f, O, I, gs), sb = qt_scale_count(f, O, I, gs) * 4;
    float *src = (float *)malloc((size_t)(O * I) * 4);
    uint8_t *blk = (uint8_t *)malloc((wb + 15) / 16 * 16 + sb);
    if (!src || !blk) return free(src), free(blk), NULL;
    for (int64_t k = 0; k < O * I; k++) src[k] = frand();
    *w = blk, *s = (float *)(blk + (wb + 15) / 16 * 16);
    qt_quantize(src, O, I, f, gs, *w, *s);
    free(src);
    return blk;
}

/* A layer's experts in one cu_mats_idot_rows call: nm matrices of format
 * f (O alternating between two sizes, as gate/up and another shape),
 * matrix i taking rows [r0, r0 + nr) of R, ranges empty, overlapping and
 * at either end; each y bit for bit cu_mat_idot's on its rows, one round
 * trip. 1 when all agree. */
static int rows_same_as_single(qt_fmt f, int nm, int64_t I, int gs, int R) {
    cu_mat *d[CU_MAX_BATCH] = {0};
    float *y1[CU_MAX_BATCH] = {0}, *yb[CU_MAX_BATCH] = {0};
    int r0[CU_MAX_BATCH], nr[CU_MAX_BATCH];
    int64_t ldq = I + 3, O[CU_MAX_BATCH];
    int8_t *q = (int8_t *)malloc((size_t)(R * ldq));
    float *xs = (float *)malloc((size_t)R * 4);
    char err[300] = "";
    int ok = q && xs;
    for (int64_t i = 0; ok && i < R * ldq; i++) q[i] = i % ldq < I ? (int8_t)(frand() * 127.0f) : 0;
    for (int r = 0; ok && r < R; r++) xs[r] = 0.02f + 0.001f * (float)r;
    for (int i = 0; i < nm && ok; i++) {
        O[i] = i % 2 ? 24 : 40;
        r0[i] = (i * 5) % R, nr[i] = i % 7 == 3 ? 0 : 1 + (i * 3) % (R - r0[i]); /* r0 + nr ≤ R */
        uint8_t *w;
        float *s;
        void *blk = rand_mat(f, O[i], I, gs, &w, &s);
        y1[i] = (float *)malloc((size_t)(R * O[i]) * 4 + 4), yb[i] = (float *)malloc((size_t)(R * O[i]) * 4 + 4);
        ok = blk && y1[i] && yb[i];
        if (ok) {
            qt_tensor W = {f, O[i], I, w, s, gs};
            ok = (d[i] = cu_mat_upload((int)f, O[i], I, gs, (int64_t)qt_row_bytes(&W), w, s, err, sizeof err)) != NULL &&
                 (!nr[i] || cu_mat_idot(d[i], q + (size_t)r0[i] * (size_t)ldq, ldq, xs + r0[i], nr[i], y1[i], err, sizeof err) == 0);
        }
        free(blk);
    }
    cu_stats a, b;
    cu_stats_get(&a);
    if (ok && cu_mats_idot_rows((const cu_mat *const *)d, nm, q, ldq, xs, R, r0, nr, yb, err, sizeof err)) ok = 0;
    cu_stats_get(&b);
    if (!ok) fprintf(stderr, "rows of %d matrices: %s\n", nm, err);
    for (int i = 0; i < nm && ok; i++)
        if (memcmp(y1[i], yb[i], (size_t)(nr[i] * O[i]) * 4)) ok = 0, fprintf(stderr, "rows: matrix %d (rows %d+%d) differs from its own call\n", i, r0[i], nr[i]);
    ok &= b.calls == a.calls + 1 && b.mats == a.mats + (uint64_t)nm;
    for (int i = 0; i < nm; i++) cu_mat_free(d[i]), free(y1[i]), free(yb[i]);
    free(q), free(xs);
    return ok;
}

/* cu_mats_idot_rows: batches up to CU_MAX_BATCH, and what it refuses. */
static void test_rows(void) {
    CHECK(rows_same_as_single(QT_I4G, 16, 200, 32, 8)); /* gate and up of 8 experts, a token's 8 rows */
    CHECK(rows_same_as_single(QT_I4G, CU_MAX_BATCH, 96, 16, 21));
    CHECK(rows_same_as_single(QT_I8, 7, 4097, 0, 3));
    CHECK(rows_same_as_single(QT_I2, 2, 63, 0, 1));
    char err[300];
    int8_t w[64] = {0}, q[64] = {0};
    float s[2] = {1, 1}, xs[2] = {1, 1}, y0[4], *ys[CU_MAX_BATCH + 1];
    for (int i = 0; i <= CU_MAX_BATCH; i++) ys[i] = y0;
    cu_mat *a = cu_mat_upload(QT_I8, 2, 32, 0, 32, w, s, err, sizeof err);
    CHECK(a != NULL);
    if (a) {
        const cu_mat *aa[CU_MAX_BATCH + 1];
        int r0[CU_MAX_BATCH + 1] = {0}, nr[CU_MAX_BATCH + 1] = {0};
        for (int i = 0; i <= CU_MAX_BATCH; i++) aa[i] = a;
        r0[0] = 1, nr[0] = 2; /* rows 1..2 of 2 */
        CHECK(cu_mats_idot_rows(aa, 1, q, 32, xs, 2, r0, nr, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "rows 1+2 of 2");
        r0[0] = -1, nr[0] = 1;
        CHECK(cu_mats_idot_rows(aa, 1, q, 32, xs, 2, r0, nr, ys, err, sizeof err) == -1);
        r0[0] = 0, nr[0] = 0; /* nothing to do: no round trip */
        cu_stats st0, st1;
        cu_stats_get(&st0);
        CHECK(cu_mats_idot_rows(aa, 1, q, 32, xs, 2, r0, nr, ys, err, sizeof err) == 0);
        cu_stats_get(&st1);
        CHECK(st1.calls == st0.calls);
        CHECK(cu_mats_idot_rows(aa, CU_MAX_BATCH + 1, q, 32, xs, 2, r0, nr, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "65 matrices in one call");
    }
    cu_mat_free(a);
}

/* A batch of ne experts in one cu_experts_rows call: gate and up [H][D]
 * in format fg, down [D][H] in fd (group size gs), expert i on rows
 * [r0, r0 + nr) of R (empty, overlapping and at either end); row 1 of x
 * zero and row 2 not finite when R > 2. Each y is bit for bit the CPU's
 * fwd_mlp on the integer path: the scalar reference's gate and up,
 * fm_silu(g)·u, then its down (which quantizes h as mm_act_quant does).
 * One round trip and 3·ne matrices counted. 1 when all agree. */
static int experts_same_as_cpu(mm_ctx *ref, qt_fmt fg, qt_fmt fd, int ne, int64_t D, int64_t H, int gs, int R) {
    cu_mat *g[CU_MAX_EXPERTS] = {0}, *u[CU_MAX_EXPERTS] = {0}, *d[CU_MAX_EXPERTS] = {0};
    float *y0[CU_MAX_EXPERTS] = {0}, *y1[CU_MAX_EXPERTS] = {0};
    void *blk[3 * CU_MAX_EXPERTS] = {0};
    int r0[CU_MAX_EXPERTS], nr[CU_MAX_EXPERTS];
    int64_t ldq = D + 7;
    float *x = (float *)malloc((size_t)(R * D) * 4), *xs = (float *)malloc((size_t)R * 4), *hg = (float *)malloc((size_t)(R * H) * 4),
          *hu = (float *)malloc((size_t)(R * H) * 4);
    int8_t *q = (int8_t *)calloc((size_t)(R * ldq), 1);
    int32_t *xg = (int32_t *)malloc((size_t)(D + 16) * 4);
    char err[300] = "";
    int ok = x && xs && hg && hu && q && xg;
    for (int64_t k = 0; ok && k < R * D; k++) x[k] = frand() * 2.0f;
    if (ok && R > 2) {
        for (int64_t k = 0; k < D; k++) x[D + k] = 0.0f;
        x[2 * D + D / 3] = INFINITY;
    }
    for (int r = 0; ok && r < R; r++) mm_act_quant(x + (size_t)r * (size_t)D, D, fg, gs, 0, q + (size_t)r * (size_t)ldq, xs + r, xg);
    for (int i = 0; i < ne && ok; i++) {
        r0[i] = (i * 3) % R, nr[i] = i % 5 == 4 ? 0 : 1 + (i * 7) % (R - r0[i]);
        uint8_t *w[3];
        float *sc[3];
        const qt_fmt f3[3] = {fg, fg, fd};
        const int64_t O3[3] = {H, H, D}, I3[3] = {D, D, H};
        cu_mat **slot[3] = {&g[i], &u[i], &d[i]};
        qt_tensor W[3];
        for (int t = 0; t < 3 && ok; t++) {
            ok = (blk[3 * i + t] = rand_mat(f3[t], O3[t], I3[t], gs, &w[t], &sc[t])) != NULL;
            if (!ok) break;
            W[t] = (qt_tensor){f3[t], O3[t], I3[t], w[t], sc[t], gs};
            ok = (*slot[t] = cu_mat_upload((int)f3[t], O3[t], I3[t], gs, (int64_t)qt_row_bytes(&W[t]), w[t], sc[t], err, sizeof err)) != NULL;
        }
        y0[i] = (float *)malloc((size_t)(R * D) * 4 + 4), y1[i] = (float *)malloc((size_t)(R * D) * 4 + 4);
        ok = ok && y0[i] && y1[i];
        if (ok && nr[i]) { /* the CPU: fwd_mlp's three matmuls and SwiGLU */
            const float *xi = x + (size_t)r0[i] * (size_t)D;
            mm_matmul(ref, &W[0], xi, nr[i], hg), mm_matmul(ref, &W[1], xi, nr[i], hu);
            for (int64_t k = 0; k < nr[i] * H; k++) hg[k] = fm_silu(hg[k]) * hu[k];
            mm_matmul(ref, &W[2], hg, nr[i], y0[i]);
        }
    }
    cu_stats a, b;
    cu_stats_get(&a);
    if (ok && cu_experts_rows((const cu_mat *const *)g, (const cu_mat *const *)u, (const cu_mat *const *)d, ne, q, ldq, xs, R, r0, nr, y1, err,
                              sizeof err))
        ok = 0;
    cu_stats_get(&b);
    if (!ok) fprintf(stderr, "experts: %s\n", err);
    for (int i = 0; i < ne && ok; i++)
        for (int64_t k = 0; k < nr[i] * D && ok; k++)
            if (memcmp(y0[i] + k, y1[i] + k, 4) && !(isnan(y0[i][k]) && isnan(y1[i][k])))
                ok = 0, fprintf(stderr, "experts %s/%s D=%lld H=%lld: expert %d (rows %d+%d) y[%lld] GPU %.9g, CPU %.9g\n", qt_fmt_name(fg), qt_fmt_name(fd),
                                (long long)D, (long long)H, i, r0[i], nr[i], (long long)k, y1[i][k], y0[i][k]);
    ok &= b.calls == a.calls + 1 && b.mats == a.mats + 3 * (uint64_t)ne;
    for (int i = 0; i < ne; i++) cu_mat_free(g[i]), cu_mat_free(u[i]), cu_mat_free(d[i]), free(y0[i]), free(y1[i]);
    for (int i = 0; i < 3 * ne; i++) free(blk[i]);
    free(x), free(xs), free(hg), free(hu), free(q), free(xg);
    return ok;
}

/* cu_experts_rows: formats, a partial last group, up to CU_MAX_EXPERTS
 * experts, zero and non-finite rows; and what it refuses. */
static void test_experts(mm_ctx *ref) {
    CHECK(experts_same_as_cpu(ref, QT_I4G, QT_I4G, 8, 96, 80, 32, 8)); /* a GLM-5 decode step's shape: 8 experts, 8 rows */
    CHECK(experts_same_as_cpu(ref, QT_I4G, QT_I4G, CU_MAX_EXPERTS, 64, 200, 16, 21));
    CHECK(experts_same_as_cpu(ref, QT_I8, QT_I4, 3, 100, 37, 0, 5));
    CHECK(experts_same_as_cpu(ref, QT_I2, QT_I8, 2, 63, 130, 0, 1));
    CHECK(experts_same_as_cpu(ref, QT_I4, QT_I4G, 5, 4097, 64, 64, 3));
    char err[300];
    int8_t w[64 * 64] = {0}, q[64] = {0};
    float s[64], xs[1] = {1}, y0[64], *ys[CU_MAX_EXPERTS + 1];
    for (int i = 0; i < 64; i++) s[i] = 1;
    for (int i = 0; i <= CU_MAX_EXPERTS; i++) ys[i] = y0;
    cu_mat *gu = cu_mat_upload(QT_I8, 16, 32, 0, 32, w, s, err, sizeof err), *dn = cu_mat_upload(QT_I8, 32, 16, 0, 16, w, s, err, sizeof err),
           *bad = cu_mat_upload(QT_I8, 32, 15, 0, 15, w, s, err, sizeof err);
    CHECK(gu && dn && bad);
    if (gu && dn && bad) {
        const cu_mat *G[CU_MAX_EXPERTS + 1], *D[CU_MAX_EXPERTS + 1], *B[1] = {bad};
        int r0[CU_MAX_EXPERTS + 1] = {0}, nr[CU_MAX_EXPERTS + 1] = {0};
        for (int i = 0; i <= CU_MAX_EXPERTS; i++) G[i] = gu, D[i] = dn, nr[i] = 1;
        CHECK(cu_experts_rows(G, G, B, 1, q, 32, xs, 1, r0, nr, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "expert 0: gate of 16 rows, up of 16 and down of 15 inputs do not chain");
        CHECK(cu_experts_rows(G, G, D, CU_MAX_EXPERTS + 1, q, 32, xs, 1, r0, nr, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "33 experts in one call");
        CHECK(cu_experts_rows(G, G, D, 0, q, 32, xs, 1, r0, nr, ys, err, sizeof err) == -1);
        r0[0] = 1; /* row 1 of 1 */
        CHECK(cu_experts_rows(G, G, D, 1, q, 32, xs, 1, r0, nr, ys, err, sizeof err) == -1);
        CHECK_HAS(err, "rows 1+1 of 1");
        CHECK(cu_experts_rows(G, D, D, 1, q, 32, xs, 1, nr + 1, nr, ys, err, sizeof err) == -1); /* up of 16 inputs beside a gate of 32 */
        CHECK_HAS(err, "matrices of 32 and 16 inputs in one call");
    }
    cu_mat_free(gu), cu_mat_free(dn), cu_mat_free(bad);
}

/* Absorbed MLA by the CPU's steps (forward.h's attn_head_latent, then
 * W_UV on the integer path), as kernels.h's API gives them: row s, head
 * h of attn[S][H][vh]. */
static void mla_cpu(mm_ctx *ref, const qt_tensor *kv_b, const cu_mla_shape *sh, const float *lat, const float *kr, const float *q, int S,
                    int64_t pos, const int *nsel, const int *sel, float *attn) {
    int kvw = sh->nope + sh->vh, qk = sh->nope + sh->rd, kvl = sh->kvl;
    float *qa = (float *)malloc((size_t)kvl * 4), *score = (float *)malloc((size_t)(pos + S) * 4), *o = (float *)malloc((size_t)(S * kvl) * 4),
          *y = (float *)malloc((size_t)(S * sh->vh) * 4);
    for (int h = 0; h < sh->H; h++) {
        for (int s = 0; s < S; s++) {
            const float *qs = q + ((size_t)s * sh->H + h) * qk;
            int n = nsel[s] < 0 ? (int)pos + s + 1 : nsel[s];
            const int *ks = nsel[s] < 0 ? NULL : sel + (size_t)s * sh->sel_stride;
            qt_tensor uk = qt_rows(kv_b, (int64_t)h * kvw, sh->nope);
            mm_matvec_t(ref, &uk, qs, qa);
            for (int i = 0; i < n; i++) {
                int t = ks ? ks[i] : i;
                score[i] = (mm_dot_f32(qa, lat + (size_t)t * kvl, kvl) + mm_dot_f32(qs + sh->nope, kr + (size_t)t * sh->rd, sh->rd)) * sh->scale;
            }
            float mx = score[0], sum = 0;
            for (int i = 1; i < n; i++) mx = score[i] > mx ? score[i] : mx;
            for (int i = 0; i < n; i++) sum += (score[i] = fm_expf(score[i] - mx));
            float inv = 1.0f / sum;
            for (int i = 0; i < n; i++) score[i] *= inv;
            float *os = o + (size_t)s * kvl;
            memset(os, 0, (size_t)kvl * 4);
            for (int i = 0; i < n; i++) mm_axpy_f32(os, score[i], lat + (size_t)(ks ? ks[i] : i) * kvl, kvl);
        }
        qt_tensor uv = qt_rows(kv_b, (int64_t)h * kvw + sh->nope, sh->vh);
        mm_matmul(ref, &uv, o, S, y);
        for (int s = 0; s < S; s++) memcpy(attn + ((size_t)s * sh->H + h) * sh->vh, y + (size_t)s * sh->vh, (size_t)sh->vh * 4);
    }
    free(qa), free(score), free(o), free(y);
}

/* cu_mla on one shape: kv_b [H·(nope+vh)][kvl] in format f (group size
 * gs), a cache of ctx positions written in two pieces, S query rows at
 * pos, every causal key (sel 0) or a random subset of k in random order
 * for every other row; score factor `scale` (large: most e^x underflow).
 * 1 when attn equals mla_cpu's bit for bit (NaN payloads aside). */
static int mla_same_as_cpu(mm_ctx *ref, qt_fmt f, int gs, int H, int nope, int rd, int vh, int kvl, int S, int64_t pos, int k, float scale) {
    const int64_t ctx = pos + S + 5, kvw = nope + vh;
    cu_mla_shape sh = {H, nope, rd, vh, kvl, k > 0 ? k : 1, scale};
    uint8_t *w;
    float *s;
    void *blk = rand_mat(f, (int64_t)H * kvw, kvl, gs, &w, &s);
    float *lat = (float *)malloc((size_t)(ctx * kvl) * 4), *kr = (float *)malloc((size_t)(ctx * rd) * 4 + 4),
          *q = (float *)malloc((size_t)(S * H * (nope + rd)) * 4), *a0 = (float *)malloc((size_t)(S * H * vh) * 4),
          *a1 = (float *)malloc((size_t)(S * H * vh) * 4);
    int *nsel = (int *)malloc((size_t)S * 4), *sel = (int *)malloc((size_t)(S * sh.sel_stride) * 4), *perm = (int *)malloc((size_t)(pos + S) * 4);
    char err[300] = "";
    int ok = blk && lat && kr && q && a0 && a1 && nsel && sel && perm;
    for (int64_t i = 0; ok && i < ctx * kvl; i++) lat[i] = frand();
    for (int64_t i = 0; ok && i < ctx * rd; i++) kr[i] = frand() * 2.0f;
    for (int64_t i = 0; ok && i < (int64_t)S * H * (nope + rd); i++) q[i] = frand() * 1.5f;
    for (int r = 0; ok && r < S; r++) {
        int T = (int)pos + r + 1;
        nsel[r] = k > 0 && r % 2 == 1 && T > k ? k : -1;
        if (nsel[r] < 0) continue;
        for (int t = 0; t < T; t++) perm[t] = t;
        for (int t = 0; t < k; t++) { /* k distinct causal keys in random order */
            int u = t + (int)((frand() * 0.5f + 0.5f) * (float)(T - t)) % (T - t), x = perm[t];
            perm[t] = perm[u], perm[u] = x;
            sel[(size_t)r * sh.sel_stride + t] = perm[t];
        }
    }
    qt_tensor W = {f, (int64_t)H * kvw, kvl, w, s, gs};
    cu_mat *d = ok ? cu_mat_upload((int)f, W.O, W.I, gs, (int64_t)qt_row_bytes(&W), w, s, err, sizeof err) : NULL;
    cu_kv *c = d ? cu_kv_alloc(2, ctx, kvl, rd, 0, 0, err, sizeof err) : NULL;
    int64_t half = (pos + S) / 2, l = 1;
    ok = ok && c && cu_kv_write(c, (int)l, 0, half, lat, kr, err, sizeof err) == 0 &&
         cu_kv_write(c, (int)l, half, pos + S - half, lat + half * kvl, kr + half * rd, err, sizeof err) == 0;
    cu_stats a, b;
    cu_stats_get(&a);
    if (ok) {
        mla_cpu(ref, &W, &sh, lat, kr, q, S, pos, nsel, sel, a0);
        ok = cu_mla(c, (int)l, d, &sh, q, S, pos, nsel, sel, a1, err, sizeof err) == 0;
    }
    cu_stats_get(&b);
    if (!ok) fprintf(stderr, "attention: %s\n", err);
    for (int64_t i = 0; ok && i < (int64_t)S * H * vh; i++)
        if (memcmp(a0 + i, a1 + i, 4) && !(isnan(a0[i]) && isnan(a1[i])))
            ok = 0, fprintf(stderr, "attention %s H=%d kvl=%d S=%d pos=%lld k=%d: attn[%lld] GPU %.9g, CPU %.9g\n", qt_fmt_name(f), H, kvl, S, (long long)pos, k,
                            (long long)i, a1[i], a0[i]);
    ok &= b.attn_calls == a.attn_calls + 1 && b.calls == a.calls + 1;
    cu_kv_free(c), cu_mat_free(d);
    free(blk), free(lat), free(kr), free(q), free(a0), free(a1), free(nsel), free(sel), free(perm);
    return ok;
}

/* cu_mla: formats, GLM-5's head shape, every causal key and the indexer's
 * choice, decode and several rows; the cache's writes and what cu_mla
 * refuses. */
static void test_mla(mm_ctx *ref) {
    CHECK(mla_same_as_cpu(ref, QT_I8, 0, 4, 24, 8, 20, 40, 1, 0, 0, 0.17f));       /* the tiny fixtures' shape, the first token */
    CHECK(mla_same_as_cpu(ref, QT_I8, 0, 4, 24, 8, 20, 40, 5, 30, 16, 0.17f));     /* a batch, half its rows on 16 chosen keys */
    CHECK(mla_same_as_cpu(ref, QT_I4G, 32, 2, 192, 64, 256, 512, 1, 300, 0, 0.0723f)); /* GLM-5's head: decode over 301 keys */
    CHECK(mla_same_as_cpu(ref, QT_I4G, 64, 3, 40, 8, 24, 200, 4, 70, 33, 0.1f));   /* a partial last group of the latent */
    CHECK(mla_same_as_cpu(ref, QT_I4, 0, 2, 17, 5, 9, 33, 3, 9, 0, 0.2f));
    CHECK(mla_same_as_cpu(ref, QT_I2, 0, 2, 16, 4, 16, 64, 2, 40, 7, 0.25f));
    CHECK(mla_same_as_cpu(ref, QT_I8, 0, 2, 16, 4, 16, 64, 2, 100, 0, 40.0f));     /* most e^x underflow to 0 */
    char err[300];
    int8_t w[8 * 16] = {0};
    float s[8] = {1, 1, 1, 1, 1, 1, 1, 1}, lat[16] = {0}, kr[4] = {0}, q[8] = {0}, at[4];
    int nsel[2] = {1, -1}, sel[2] = {1, 0};
    cu_mat *d = cu_mat_upload(QT_I8, 8, 16, 0, 16, w, s, err, sizeof err); /* 2 heads of nope 2 + vh 2 rows over kvl 16 */
    cu_kv *c = cu_kv_alloc(1, 4, 16, 4, 0, 0, err, sizeof err);
    CHECK(d && c);
    if (d && c) {
        cu_mla_shape sh = {2, 2, 4, 2, 16, 1, 1.0f};
        CHECK(cu_kv_write(c, 0, 0, 1, lat, kr, err, sizeof err) == 0);
        CHECK(cu_kv_write(c, 0, 3, 2, lat, kr, err, sizeof err) == -1);
        CHECK_HAS(err, "writing positions 3+2 of layer 0 to a latent cache of 4");
        CHECK(cu_kv_write(c, 1, 0, 1, lat, kr, err, sizeof err) == -1);
        CHECK(cu_mla(c, 0, d, &sh, q, 1, 0, nsel, sel, at, err, sizeof err) == -1); /* key 1 at position 0 */
        CHECK_HAS(err, "row 0 keeps key 1, not causal");
        nsel[0] = 2;
        CHECK(cu_mla(c, 0, d, &sh, q, 1, 0, nsel, sel, at, err, sizeof err) == -1);
        CHECK_HAS(err, "row 0 keeps 2 keys, more than 1");
        nsel[0] = -1;
        CHECK(cu_mla(c, 0, d, &sh, q, 1, 4, nsel, sel, at, err, sizeof err) == -1);
        CHECK_HAS(err, "rows 4+1 of a cache of 4");
        sh.kvl = 8;
        CHECK(cu_mla(c, 0, d, &sh, q, 1, 0, nsel, sel, at, err, sizeof err) == -1);
        CHECK_HAS(err, "the latent cache, the shape and kv_b do not agree");
    }
    cu_kv_free(c), cu_mat_free(d);
}

/* cu_index_scores on one shape: ih heads of id, S rows at pos over a key
 * cache written in two pieces (indexer layer 1 of 2); keys with every
 * sign, so the ReLU both cuts and passes. 1 when every row's scores equal
 * fwd_index_scores' loop bit for bit. */
static int index_same_as_cpu(int ih, int id, int S, int64_t pos, float sscale) {
    const int64_t ctx = pos + S + 3;
    float *keys = (float *)malloc((size_t)(ctx * id) * 4), *qi = (float *)malloc((size_t)(S * ih * id) * 4), *w = (float *)malloc((size_t)(S * ih) * 4),
          *got = (float *)malloc((size_t)(S * ctx) * 4), *want = (float *)malloc((size_t)ctx * 4), *rows[64];
    char err[300] = "";
    int ok = keys && qi && w && got && want && S <= 64;
    for (int64_t i = 0; ok && i < ctx * id; i++) keys[i] = frand();
    for (int64_t i = 0; ok && i < (int64_t)S * ih * id; i++) qi[i] = frand() * 2.0f;
    for (int64_t i = 0; ok && i < (int64_t)S * ih; i++) w[i] = frand() * 0.3f;
    for (int s = 0; ok && s < S; s++) rows[s] = got + (size_t)s * ctx;
    cu_kv *c = ok ? cu_kv_alloc(3, ctx, 8, 2, 2, id, err, sizeof err) : NULL;
    int64_t half = (pos + S) / 3;
    ok = ok && c && cu_kv_write_keys(c, 1, 0, half, keys, err, sizeof err) == 0 &&
         cu_kv_write_keys(c, 1, half, pos + S - half, keys + half * id, err, sizeof err) == 0 &&
         cu_index_scores(c, 1, qi, w, S, pos, ih, sscale, rows, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "indexer: %s\n", err);
    for (int s = 0; ok && s < S; s++) {
        for (int64_t t = 0; t <= pos + s; t++) { /* forward.h's fwd_index_scores */
            float acc = 0;
            for (int h = 0; h < ih; h++) {
                float d = mm_dot_f32(qi + ((size_t)s * ih + h) * id, keys + (size_t)t * id, id) * sscale;
                acc += w[(size_t)s * ih + h] * (d > 0 ? d : 0);
            }
            want[t] = acc;
        }
        if (memcmp(want, rows[s], (size_t)(pos + s + 1) * 4)) ok = 0, fprintf(stderr, "indexer ih=%d id=%d S=%d pos=%lld: row %d differs\n", ih, id, S, (long long)pos, s);
    }
    cu_kv_free(c);
    free(keys), free(qi), free(w), free(got), free(want);
    return ok;
}

/* cu_index_scores: GLM-5's indexer shape, odd widths, batches; and what it
 * refuses. */
static void test_index(void) {
    CHECK(index_same_as_cpu(32, 128, 1, 300, 0.0883883f)); /* GLM-5 decode: 32 heads of 128 */
    CHECK(index_same_as_cpu(4, 16, 5, 70, 0.25f));        /* the tiny fixtures' shape, a prefill batch */
    CHECK(index_same_as_cpu(3, 37, 2, 9, 0.5f));           /* a tail past the 16 running sums */
    char err[300];
    float k[8] = {0}, q[8] = {0}, w[2] = {0}, out[8], *rows[1] = {out};
    cu_kv *c = cu_kv_alloc(1, 4, 8, 2, 1, 4, err, sizeof err), *none = cu_kv_alloc(1, 4, 8, 2, 0, 0, err, sizeof err);
    CHECK(c && none);
    if (c && none) {
        CHECK(cu_kv_write_keys(c, 0, 3, 2, k, err, sizeof err) == -1);
        CHECK_HAS(err, "writing positions 3+2 of indexer layer 0 to a key cache of 4");
        CHECK(cu_index_scores(c, 0, q, w, 1, 4, 2, 1.0f, rows, err, sizeof err) == -1);
        CHECK_HAS(err, "indexer: rows 4+1 of a cache of 4");
        CHECK(cu_index_scores(none, 0, q, w, 1, 0, 2, 1.0f, rows, err, sizeof err) == -1);
        CHECK_HAS(err, "no key cache for layer 0");
    }
    CHECK(cu_kv_alloc(1, 4, 8, 2, 2, 4, err, sizeof err) == NULL); /* more indexer layers than layers */
    cu_kv_free(c), cu_kv_free(none);
}

/* Expert slots: one cu_mat_alloc'd matrix refilled in turn with matrices A
 * and B from a buffer that is overwritten as soon as each fill returns;
 * each multiply right after a fill gives that matrix's bits (an upload of
 * it), 40 times over. Fills are counted; bad ones refused. */
static void test_fills(qt_fmt f, int64_t O, int64_t I, int gs, int S) {
    uint8_t *wa, *wb, *wt;
    float *sa, *sb, *st;
    void *A = rand_mat(f, O, I, gs, &wa, &sa), *B = rand_mat(f, O, I, gs, &wb, &sb), *T = rand_mat(f, O, I, gs, &wt, &st);
    size_t wn = qt_weight_bytes(f, O, I, gs), sn = qt_scale_count(f, O, I, gs) * 4;
    int64_t ldq = (I + 63) / 64 * 64;
    int8_t *q = (int8_t *)calloc((size_t)(S * ldq), 1);
    float *xs = (float *)malloc((size_t)S * 4), *ya = (float *)malloc((size_t)(S * O) * 4), *yb = (float *)malloc((size_t)(S * O) * 4),
          *y = (float *)malloc((size_t)(S * O) * 4);
    char err[300];
    CHECK(A && B && T && q && xs && ya && yb && y);
    if (!A || !B || !T || !q || !xs || !ya || !yb || !y) goto out;
    for (int64_t i = 0; i < S * ldq; i++) q[i] = i % ldq < I ? (int8_t)(frand() * 127.0f) : 0;
    for (int r = 0; r < S; r++) xs[r] = 0.02f + 0.001f * (float)r;
    qt_tensor W = {f, O, I, wa, sa, gs};
    int64_t rb = (int64_t)qt_row_bytes(&W);
    cu_mat *ua = cu_mat_upload((int)f, O, I, gs, rb, wa, sa, err, sizeof err), *ub = cu_mat_upload((int)f, O, I, gs, rb, wb, sb, err, sizeof err);
    cu_mat *slot = cu_mat_alloc((int)f, O, I, gs, rb, err, sizeof err);
    CHECK(ua && ub && slot);
    if (ua && ub && slot && !cu_mat_idot(ua, q, ldq, xs, S, ya, err, sizeof err) && !cu_mat_idot(ub, q, ldq, xs, S, yb, err, sizeof err)) {
        cu_stats a, b;
        cu_stats_get(&a);
        int bad = 0, failed = 0;
        for (int it = 0; it < 40 && !failed; it++) {
            int isb = it % 3 == 1; /* A, B, A, A, B, A, ... */
            memcpy(wt, isb ? wb : wa, wn), memcpy(st, isb ? sb : sa, sn);
            failed |= cu_mat_fill(slot, wt, st, err, sizeof err);
            memset(wt, 0x77, wn), memset(st, 0xff, sn); /* the source is free again: NaN scales if still read */
            failed |= cu_mat_idot(slot, q, ldq, xs, S, y, err, sizeof err);
            bad += !failed && memcmp(y, isb ? yb : ya, (size_t)(S * O) * 4) != 0;
        }
        cu_stats_get(&b);
        if (failed) fprintf(stderr, "fills %s O=%lld I=%lld: %s\n", qt_fmt_name(f), (long long)O, (long long)I, err);
        if (bad) fprintf(stderr, "fills %s O=%lld I=%lld: %d of 40 multiplies after a fill differ from the upload's\n", qt_fmt_name(f), (long long)O,
                         (long long)I, bad);
        CHECK(!failed && !bad);
        CHECK(b.fills == a.fills + 40 && b.fill_bytes == a.fill_bytes + 40 * (uint64_t)(wn + sn));
    }
    CHECK(cu_mat_fill(slot, NULL, sa, err, sizeof err) == -1);
    CHECK_HAS(err, "no matrix or no source");
    cu_mat_free(ua), cu_mat_free(ub), cu_mat_free(slot);
out:
    free(A), free(B), free(T), free(q), free(xs), free(ya), free(yb), free(y);
}

/* gpu.h over the backend: the dense table takes what the GPU computes
 * bit for bit (integer formats of at most max_cols inputs) and finds it by
 * address; gpu_matmul (rows in chunks of the scratch's) gives the CPU
 * reference's bits; the latent cache opens only when held and wanted, and
 * its validity falls to the rewritten position and resets with the host
 * cache's generation; COLI_CUDA_FAULT's call fails, leaves gpu_failed set
 * and the table unused; the figures are what happened between takes. */
static void test_glue(mm_ctx *ref) {
    char err[300] = "";
    gpu_ctx g;
    memset(&g, 0, sizeof g);
    CHECK(gpu_open(&g, 0, 0, 0, 1, err, sizeof err) == 0 && !g.on); /* CUDA=0: never touched */
    CHECK(gpu_open(&g, 1, 999, 0, 1, err, sizeof err) == -1);       /* CUDA=1 without the device */
    CHECK_HAS(err, "CUDA=1: ");
    CHECK(gpu_open(&g, 1, 0, 0, 0, err, sizeof err) == 0 && g.on); /* IDOT=0: open, but nothing goes up */
    gpu_figures f;
    CHECK(gpu_figures_take(&g, &f) == 0);
    gpu_free(&g);
    CHECK(!g.on);
    if (gpu_open(&g, 1, 0, 0, 1, err, sizeof err) != 1) {
        CHECK(!"gpu_open");
        return;
    }
    enum { S = 21, I = 100 }; /* S over the scratch's 16 rows: two round trips */
    uint8_t *w8, *w4, *ww;
    float *s8, *s4, *sw;
    void *m8 = rand_mat(QT_I8, 33, I, 0, &w8, &s8), *m4 = rand_mat(QT_I4, 7, I, 0, &w4, &s4), *mw = rand_mat(QT_I8, 3, 2000, 0, &ww, &sw);
    float *x = (float *)malloc((size_t)S * I * 4), *y0 = (float *)malloc((size_t)S * 33 * 4), *y1 = (float *)malloc((size_t)S * 33 * 4);
    float fw[5 * I];
    CHECK(m8 && m4 && mw && x && y0 && y1);
    if (!m8 || !m4 || !mw || !x || !y0 || !y1) goto out;
    for (int i = 0; i < S * I; i++) x[i] = frand() * 2.0f;
    for (int i = 0; i < 5 * I; i++) fw[i] = frand();
    qt_tensor A = {QT_I8, 33, I, w8, s8, 0}, B = {QT_I4, 7, I, w4, s4, 0}, F = {QT_F32, 5, I, fw, NULL, 0}, W = {QT_I8, 3, 2000, ww, sw, 0};
    CHECK(gpu_dense_begin(&g, 4, 1000) == 0);
    gpu_dense_add(&g, &A), gpu_dense_add(&g, &F), gpu_dense_add(&g, &B), gpu_dense_add(&g, &W);
    CHECK(g.n == 2 && g.left == 0 && g.bytes == gpu_bytes_(&A) + gpu_bytes_(&B));
    /* the latent cache: 2 layers (the first with its own indexer keys) of 16 positions */
    unsigned char idx_full[2] = {1, 0};
    coli_config c;
    memset(&c, 0, sizeof c);
    c.kv_lora = 4, c.qk_rope = 2, c.index_dim = 8, c.index_heads = 1, c.idx_full = idx_full;
    gpu_kv_open(&g, &c, 2, 16, 5, 1, 1, 1); /* ends the setup: the figures count from here */
    CHECK(gpu_has_kv(&g) && gpu_has_keys(&g) && g.kv_bytes == 16 * 2 * 6 * 4 + 16 * 8 * 4);
    CHECK(gpu_find(&g, &A) && gpu_find(&g, &B) && !gpu_find(&g, &F) && !gpu_find(&g, &W)); /* f32, and wider than max_cols: the CPU's */
    const cu_mat *d = gpu_find(&g, &A);
    const qt_tensor *pa = &A;
    mm_matmul(ref, &A, x, S, y0);
    CHECK(gpu_matmul(&g, ref, &d, &pa, 1, x, S, &y1) == 0);
    CHECK(memcmp(y0, y1, (size_t)S * 33 * 4) == 0);
    gpu_count_dense(&g, 1), gpu_count_dense(&g, 0);
    float keys[16 * 8], qi[3 * 8], iw[3] = {1, 0.5f, 0.25f}, sc[3][16];
    for (int i = 0; i < 16 * 8; i++) keys[i] = frand();
    for (int i = 0; i < 3 * 8; i++) qi[i] = frand();
    float *out[3] = {sc[0], sc[1], sc[2]};
    gpu_keys_written(&g, 0, 0, 5);
    CHECK(gpu_index_scores(&g, &c, 0, keys, 3, 0, 0, 3, qi, iw, out) == 1 && g.ikey_valid[0] == 3);
    gpu_count_index(&g, 1);
    gpu_keys_written(&g, 0, 5, 5); /* rows from 5 rewritten: 0..2 still equal */
    CHECK(g.ikey_valid[0] == 3);
    gpu_keys_written(&g, 0, 1, 5);
    CHECK(g.ikey_valid[0] == 1);
    gpu_keys_written(&g, 0, 9, 6); /* the host cache was replaced (a KV file loaded): nothing known equal */
    CHECK(g.ikey_valid[0] == 0 && g.kv_valid[0] == 0 && g.kv_valid[1] == 0);
    CHECK(gpu_figures_take(&g, &f) == 1);
    CHECK(f.calls == 3 && f.mats == 2 && f.n.dense_gpu == 1 && f.n.dense_cpu == 1 && f.n.idx_gpu == 1 && !f.failed && !f.tier);
    CHECK(gpu_figures_take(&g, &f) == 1 && f.calls == 0 && f.mats == 0 && f.n.dense_gpu == 0 && f.n.idx_gpu == 0);
    gpu_free(&g);
    CHECK(!g.on && !g.n && !g.kv);
    gpu_ctx h; /* the kv cache: not without kv_b on the GPU, nor with CUDA_ATTN=0 */
    memset(&h, 0, sizeof h);
    if (gpu_open(&h, 1, 0, 2, 1, err, sizeof err) == 1 && !gpu_dense_begin(&h, 1, 1000)) {
        gpu_dense_add(&h, &A);
        gpu_kv_open(&h, &c, 2, 16, 0, 0, 1, 1);
        CHECK(!gpu_has_kv(&h));
        gpu_kv_open(&h, &c, 2, 16, 0, 1, 0, 1);
        CHECK(!gpu_has_kv(&h));
        d = gpu_find(&h, &A);
        CHECK(d && gpu_matmul(&h, ref, &d, &pa, 1, x, 3, &y1) == 0); /* call 1 */
        CHECK(gpu_matmul(&h, ref, &d, &pa, 1, x, 3, &y1) == -1);     /* call 2: COLI_CUDA_FAULT=2 */
        CHECK(gpu_failed(&h) && !gpu_find(&h, &A));
        CHECK_HAS(h.err, "CUDA: call 2 failed (COLI_CUDA_FAULT)");
        CHECK(gpu_figures_take(&h, &f) == 1 && f.failed && f.calls == 1);
    } else
        CHECK(!"gpu_open with a fault");
    gpu_free(&h);
out:
    free(m8), free(m4), free(mw), free(x), free(y0), free(y1);
}

int main(void) {
    char err[300];
    cu_info info;
    if (cu_init(0, &info, err, sizeof err)) {
        SKIP("cuda", "%s", err);
        return check_report("test_cuda");
    }
    printf("device: %s (compute capability %d.%d, %d SMs, %.1f GB)\n", info.name, info.cc_major, info.cc_minor, info.sms,
           info.mem_total / 1e9);
    mm_ctx ref;
    if (mm_init(&ref, MM_SCALAR, 1, 16, INT64_C(1) << 17, 1, err, sizeof err)) {
        fprintf(stderr, "mm_init: %s\n", err);
        return 1;
    }
    static const int64_t Is[] = {1, 3, 17, 48, 64, 100, 255, 1000, 4097};
    static const int64_t Os[] = {1, 7, 33, 130};
    static const int Ss[] = {1, 3, 9};
    int shapes = 0, bad = 0;
    for (qt_fmt f = QT_I8; f <= QT_I2; f++)
        for (size_t a = 0; a < sizeof Is / sizeof *Is; a++)
            for (size_t b = 0; b < sizeof Os / sizeof *Os; b++) {
                int S = Ss[(a + b) % 3];
                shapes++, bad += !same_as_cpu(&ref, f, Os[b], Is[a], 0, S, (a + b) % 2);
            }
    static const int gss[] = {16, 32, 64, 128, 256};
    for (size_t g = 0; g < sizeof gss / sizeof *gss; g++)
        for (size_t a = 0; a < sizeof Is / sizeof *Is; a++) {
            int64_t I = Is[a] < gss[g] ? Is[a] + gss[g] + 6 : Is[a]; /* at least one whole group, a partial last */
            shapes++, bad += !same_as_cpu(&ref, QT_I4G, 33, I, gss[g], Ss[a % 3], a % 2);
            shapes++, bad += !same_as_cpu(&ref, QT_I4G, 5, 37 * gss[g], gss[g], 3, 0); /* 37 groups: two passes of 32 lanes */
        }
    /* the largest I the integer path takes, and a wide output */
    shapes++, bad += !same_as_cpu(&ref, QT_I4G, 3, INT64_C(1) << 17, 64, 2, 1);
    shapes++, bad += !same_as_cpu(&ref, QT_I8, 2, INT64_C(1) << 17, 0, 1, 0);
    shapes++, bad += !same_as_cpu(&ref, QT_I4, 5000, 96, 0, 4, 0);
    CHECK(bad == 0);
    printf("%d shapes, %d differ from the CPU reference\n", shapes, bad);
    cu_stats st;
    cu_stats_get(&st);
    CHECK(st.calls == (uint64_t)(shapes - bad) || bad);
    CHECK(st.mats == st.calls);
    test_groups();
    test_rows();
    test_experts(&ref);
    test_mla(&ref);
    test_index();
    test_fills(QT_I4G, 96, 200, 32, 3); /* an expert's gate: grouped int4, a partial last group */
    test_fills(QT_I4, 33, 4097, 0, 1);
    test_fills(QT_I8, 130, 100, 0, 9);
    test_fills(QT_I2, 7, 63, 0, 2);
    char e2[300];
    CHECK(cu_mat_alloc(QT_I4G, 4, 64, 8, 32, e2, sizeof e2) == NULL); /* group size below 16 */
    CHECK_HAS(e2, "cannot hold a matrix of format 4, 4 x 64, group size 8");
    CHECK(cu_mat_alloc(QT_I8, 4, 64, 0, 63, e2, sizeof e2) == NULL); /* row bytes that do not fit the width */
    uint64_t free0 = cu_mem_free();
    cu_mat *big = cu_mat_alloc(QT_I8, 1024, 4096, 0, 4096, e2, sizeof e2);
    CHECK(big != NULL && free0 >= cu_mem_free() + 1024 * 4096); /* the driver's count falls by at least the matrix */
    cu_mat_free(big);
    cu_stats_get(&st);
    CHECK(st.weight_bytes == 0); /* every matrix freed */
    double bw = 0;
    int bw_ok = cu_copy_bandwidth(UINT64_C(64) << 20, 3, &bw, err, sizeof err) == 0 && bw > 0;
    CHECK(bw_ok);
    if (bw_ok) printf("device copy bandwidth: %.1f GB/s (read + write, 64 MiB)\n", bw / 1e9);
    else fprintf(stderr, "copy bandwidth: %s\n", err);
    cu_shutdown();
    test_glue(&ref); /* opens the device again through gpu.h */
    mm_free(&ref);
    return check_report("test_cuda");
}
