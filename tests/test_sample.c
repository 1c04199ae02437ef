/* test_sample.c — sampling: determinism per seed, greedy rules, each filter
 * against a brute-force model of the distribution (smp_sample's draws),
 * smp_pick's key (determinism, the race's skip, the coupling of two
 * distributions under one key), and the widening top-p path on a
 * full-size vocabulary. */
#include "sample.h"

#include <stdio.h>

#include "check.h"

/* Brute-force expected distribution: sort everything, apply the filters in
 * order, renormalize. prob[i] for each id. */
static const float *cmp_logits;
static int cmp_best_first(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (cmp_logits[x] != cmp_logits[y]) return cmp_logits[x] > cmp_logits[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static void expected(const smp_params *sp, const float *lg, int n, double *prob) {
    int *ord = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) ord[i] = i;
    cmp_logits = lg;
    qsort(ord, (size_t)n, sizeof(int), cmp_best_first);
    int k = sp->top_k > 0 && sp->top_k < n ? sp->top_k : n;
    double z = 0, mx = lg[ord[0]] / sp->temp;
    for (int i = 0; i < k; i++) z += exp(lg[ord[i]] / sp->temp - mx);
    int keep = k;
    double cum = 0;
    for (int i = 0; i < k && sp->top_p < 1; i++) {
        cum += exp(lg[ord[i]] / sp->temp - mx) / z;
        if (cum >= sp->top_p) { keep = i + 1; break; }
    }
    double s = 0;
    for (int i = 0; i < n; i++) prob[i] = 0;
    for (int i = 0; i < keep; i++) {
        double p = exp(lg[ord[i]] / sp->temp - mx) / z;
        if (p >= sp->min_p * (1.0 / z)) prob[ord[i]] = p, s += p;
    }
    for (int i = 0; i < n; i++) prob[i] /= s;
    free(ord);
}

static void test_rng(void) {
    smp_rng a, b, c;
    smp_seed(&a, 42);
    smp_seed(&b, 42);
    smp_seed(&c, 43);
    int same = 1, differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = smp_next(&a), y = smp_next(&b), z = smp_next(&c);
        same &= x == y;
        differ |= x != z;
    }
    CHECK(same && differ);
    double lo = 1, hi = 0, mean = 0;
    for (int i = 0; i < 100000; i++) {
        double u = smp_uniform(&a);
        lo = u < lo ? u : lo, hi = u > hi ? u : hi, mean += u;
    }
    CHECK(lo >= 0 && hi < 1 && fabs(mean / 100000 - 0.5) < 0.01);
}

static void test_greedy(void) {
    float lg[6] = {1, 3, NAN, 3, -INFINITY, 2};
    smp_params g = {0, 0, 1, 0};
    smp_rng r;
    smp_seed(&r, 1);
    smp_work w;
    smp_work_alloc(&w, 6);
    CHECK(smp_sample(&g, lg, 6, &r, &w) == 1); /* tie 1 vs 3: lower id */
    float bad[3] = {NAN, INFINITY, -INFINITY};
    smp_params t = {1, 0, 1, 0};
    CHECK(smp_sample(&g, bad, 3, &r, &w) == -1);
    CHECK(smp_sample(&t, bad, 3, &r, &w) == -1);
    for (int i = 0; i < 200; i++) {
        int id = smp_sample(&t, lg, 6, &r, &w);
        CHECK(id != 2 && id != 4); /* non-finite never drawn */
    }
    smp_params k1 = {1.5f, 1, 1, 0}, p0 = {1.5f, 0, 1e-6f, 0}, m1 = {1.5f, 0, 1, 1.0f};
    for (int i = 0; i < 50; i++) {
        CHECK(smp_sample(&k1, lg, 6, &r, &w) == 1);
        CHECK(smp_sample(&p0, lg, 6, &r, &w) == 1);
        int id = smp_sample(&m1, lg, 6, &r, &w);
        CHECK(id == 1 || id == 3); /* both hold the top probability */
    }
    int stops[3] = {7, 9, 11};
    CHECK(smp_is_stop(stops, 3, 9) && !smp_is_stop(stops, 3, 8));
    smp_work_free(&w);
}

/* Empirical frequencies against the brute-force distribution. */
static void test_distribution(void) {
    enum { N = 12, DRAWS = 200000 };
    float lg[N] = {2.0f, 1.5f, 1.5f, 0.2f, -1.0f, 3.0f, 0.9f, -0.5f, 1.1f, 2.6f, -3.0f, 0.0f};
    smp_params cases[] = {{1.0f, 0, 1, 0}, {0.7f, 0, 1, 0}, {1.3f, 4, 1, 0}, {1.0f, 0, 0.8f, 0}, {1.0f, 0, 1, 0.2f}, {0.8f, 6, 0.9f, 0.05f}};
    smp_work w;
    smp_work_alloc(&w, N);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double want[N];
        int count[N] = {0};
        expected(&cases[c], lg, N, want);
        smp_rng r;
        smp_seed(&r, 1000 + c);
        for (int i = 0; i < DRAWS; i++) count[smp_sample(&cases[c], lg, N, &r, &w)]++;
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double f = (double)count[i] / DRAWS, sd = sqrt(want[i] * (1 - want[i]) / DRAWS) + 1e-12;
            if (want[i] == 0) CHECK(count[i] == 0);
            else worst = fmax(worst, fabs(f - want[i]) / sd);
        }
        CHECK(worst < 5.0); /* five standard deviations */
    }
    smp_work_free(&w);
}

/* The exponential race with every candidate's logarithm taken, for
 * smp_pick's skip to be checked against: the least -ln(u_i) / p_i over the
 * kept set (P[i] > 0), p_i computed as smp_pick does up to a common
 * factor, so only a tie within an ulp could tell them apart. */
static int race_full(const smp_params *sp, const float *lg, const double *P, int n, uint64_t key) {
    int pick = -1;
    double win = INFINITY, inv_t = 1.0 / sp->temp, mx = -INFINITY;
    for (int i = 0; i < n; i++) /* not fmax: gcc 12 for aarch64 fails to vectorize that reduction (an internal compiler error) */
        if (lg[i] * inv_t > mx) mx = lg[i] * inv_t;
    for (int i = 0; i < n; i++) {
        if (!(P[i] > 0)) continue;
        double v = -log(smp_unit_(key, i)) / exp(lg[i] * inv_t - mx);
        if (v < win) win = v, pick = i;
    }
    return pick;
}

/* smp_pick: a function of the key (the same key, the same token), equal
 * to the race over every candidate (the skip loses nothing), and coupled:
 * two distributions p and q under one key agree with probability
 * sum_i 1 / sum_j max(p_j / p_i, q_j / q_i) (the race's closed form: i
 * wins both when every E_j exceeds E_i times that ratio). Independent
 * keys agree only sum_i p_i q_i of the time: the agreement test can fail. */
static void test_pick(void) {
    enum { N = 12 };
    const int KEYS = getenv("COLI_EMULATED") ? 10000 : 100000; /* 3 s here, about 50 s under qemu at the full count */
    float lp[N] = {2.0f, 1.5f, 1.5f, 0.2f, -1.0f, 3.0f, 0.9f, -0.5f, 1.1f, 2.6f, -3.0f, 0.0f};
    float lq[N] = {2.3f, 1.2f, 1.6f, 0.0f, -0.8f, 2.7f, 1.2f, -0.5f, 0.8f, 2.9f, -2.0f, 0.3f};
    smp_params cases[] = {{1.0f, 0, 1, 0}, {0.7f, 0, 1, 0}, {1.3f, 4, 1, 0}, {1.0f, 0, 0.8f, 0}, {1.0f, 0, 1, 0.2f}, {0.8f, 6, 0.9f, 0.05f}};
    smp_work w;
    smp_work_alloc(&w, N);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double P[N], Q[N], want = 0, indep = 0;
        expected(&cases[c], lp, N, P);
        expected(&cases[c], lq, N, Q);
        for (int i = 0; i < N; i++) {
            indep += P[i] * Q[i];
            if (!(P[i] > 0) || !(Q[i] > 0)) continue;
            double d = 0;
            for (int j = 0; j < N; j++) d += fmax(P[j] / P[i], Q[j] / Q[i]);
            want += 1 / d;
        }
        int agree = 0, same = 1, full = 1, other = 0;
        smp_rng r;
        smp_seed(&r, 300 + c);
        for (int i = 0; i < KEYS; i++) {
            uint64_t key = smp_next(&r), key2 = smp_next(&r);
            int a = smp_pick(&cases[c], lp, N, key, &w), b = smp_pick(&cases[c], lq, N, key, &w);
            same &= smp_pick(&cases[c], lp, N, key, &w) == a;
            full &= race_full(&cases[c], lp, P, N, key) == a;
            agree += a == b;
            other += a == smp_pick(&cases[c], lq, N, key2, &w);
        }
        double f = (double)agree / KEYS, sd = sqrt(want * (1 - want) / KEYS), g = (double)other / KEYS;
        CHECK(same && full);
        CHECK(fabs(f - want) < 5 * sd);
        CHECK(fabs(g - want) > 5 * sd && fabs(g - indep) < 5 * sqrt(indep * (1 - indep) / KEYS));
        if (!c) printf("smp_pick: agreement under one key %.4f (closed form %.4f), independent keys %.4f\n", f, want, g);
    }
    smp_params greedy = {0, 0, 1, 0};
    CHECK(smp_pick(&greedy, lp, N, 1, &w) == 5);
    float bad[3] = {NAN, INFINITY, -INFINITY};
    CHECK(smp_pick(&cases[0], bad, 3, 1, &w) == -1);
    smp_work_free(&w);
}

/* A GLM-sized vocabulary with a flat head: top-p needs thousands of
 * candidates, so the head widens; every draw must lie in the nucleus. */
/* smp_logprobs against the brute-force distribution: log of each
 * probability (ids the filters drop: -inf), the tops best first; greedy
 * reports the plain softmax. */
static void test_logprobs(void) {
    enum { N = 12 };
    float lg[N] = {2.0f, 1.5f, 1.5f, 0.2f, -1.0f, 3.0f, 0.9f, -0.5f, 1.1f, 2.6f, -INFINITY, 0.0f};
    smp_params cases[] = {{1.0f, 0, 1, 0}, {0.7f, 0, 1, 0}, {1.3f, 4, 1, 0}, {1.0f, 0, 0.8f, 0}, {1.0f, 0, 1, 0.2f}, {0.8f, 6, 0.9f, 0.05f}, {0, 0, 1, 0}};
    smp_work w;
    smp_work_alloc(&w, N);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double prob[N];
        if (cases[c].temp > 0) {
            float fin[N];
            for (int i = 0; i < N; i++) fin[i] = isfinite(lg[i]) ? lg[i] : -1e30f; /* expected() has no -inf */
            expected(&cases[c], fin, N, prob);
        } else {
            double z = 0;
            for (int i = 0; i < N; i++) z += isfinite(lg[i]) ? exp((double)lg[i] - 3.0) : 0;
            for (int i = 0; i < N; i++) prob[i] = isfinite(lg[i]) ? exp((double)lg[i] - 3.0) / z : 0;
        }
        for (int id = 0; id < N; id++) {
            float lp, tl[5];
            int ti[5];
            int k = smp_logprobs(&cases[c], lg, N, id, 5, &w, &lp, ti, tl);
            CHECK(prob[id] > 0 ? fabs(lp - log(prob[id])) < 1e-5 : isinf(lp) && lp < 0);
            int live = 0;
            for (int i = 0; i < N; i++) live += prob[i] > 0;
            CHECK(k == (live < 5 ? live : 5));
            for (int i = 0; i < k; i++) {
                CHECK(prob[ti[i]] > 0 && fabs(tl[i] - log(prob[ti[i]])) < 1e-5);
                if (i) CHECK(tl[i] < tl[i - 1] || (tl[i] == tl[i - 1] && ti[i] > ti[i - 1]));
                for (int j = 0; j < N; j++) /* nothing left out is likelier */
                    if (prob[j] > prob[ti[i]] + 1e-12) {
                        int in = 0;
                        for (int q = 0; q < i; q++) in |= ti[q] == j;
                        CHECK(in);
                    }
            }
        }
    }
    float none[2] = {NAN, -INFINITY}, lp, tl[1];
    int ti[1];
    CHECK(smp_logprobs(&cases[0], none, 2, 0, 1, &w, &lp, ti, tl) == -1);
    smp_work_free(&w);
}

static void test_large_vocab(void) {
    enum { N = 154880 };
    float *lg = malloc(N * sizeof(float));
    smp_rng r;
    smp_seed(&r, 7);
    for (int i = 0; i < N; i++) lg[i] = (float)(smp_uniform(&r) * 0.01) + (i % 50 == 0 ? 2.0f : 0.0f);
    smp_params sp = {1.0f, 0, 0.95f, 0};
    double *want = malloc(N * sizeof(double));
    expected(&sp, lg, N, want);
    int nucleus = 0;
    for (int i = 0; i < N; i++) nucleus += want[i] > 0;
    CHECK(nucleus > 8192); /* more than the first widened head */
    smp_work w;
    smp_work_alloc(&w, N);
    int ok = 1;
    for (int i = 0; i < 20; i++) ok &= want[smp_sample(&sp, lg, N, &r, &w)] > 0;
    CHECK(ok);
    smp_params topk = {1.0f, 40, 1, 0};
    ok = 1;
    for (int i = 0; i < 50; i++) ok &= smp_sample(&topk, lg, N, &r, &w) % 50 == 0;
    CHECK(ok);
    smp_work_free(&w);
    free(want);
    free(lg);
}

int main(void) {
    test_rng();
    test_greedy();
    test_distribution();
    test_logprobs();
    test_pick();
    test_large_vocab();
    return check_report("test_sample");
}
