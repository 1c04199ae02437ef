/* quality.h -- what a model's output is worth, measured over a text:
 * perplexity in windows, as llama.cpp's perplexity tool computes it, and
 * the KL divergence of a run's distributions from a base run's.
 *
 * The window plan (tools/make_oracle.py computes the reference the same
 * way, tests/test_cli.py compares): the text's tokens are cut into
 * non-overlapping chunks of W tokens (a last partial chunk is dropped),
 * each evaluated from an empty cache; in a chunk the positions W/2 .. W-2
 * are scored, position j by -log p(token j+1 | tokens 0..j). The first
 * half gives every scored token at least W/2 tokens of context.
 *
 * Plain values only: no I/O, no model. */
#ifndef COLI_QUALITY_H
#define COLI_QUALITY_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The first scored position of a chunk of w tokens, and how many a chunk
 * scores (w >= 2). */
static inline int ppl_first(int w) { return w / 2; }
static inline int ppl_scored(int w) { return w - 1 - ppl_first(w); }

/* log(sum(exp(logits))) in double, taken about the row's maximum so no
 * logit overflows however large. */
static inline double ppl_lse(const float *logits, int vocab) {
    double mx = logits[0], s = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    for (int i = 0; i < vocab; i++) s += exp((double)logits[i] - mx);
    return mx + log(s);
}

/* -log softmax(logits)[target], in double. */
static inline double ppl_nll(const float *logits, int vocab, int target) { return ppl_lse(logits, vocab) - (double)logits[target]; }

/* The running sums of the scored tokens' negative log-likelihoods. */
typedef struct {
    double sum, sum2;
    long n;
} ppl_acc;

static inline void ppl_add(ppl_acc *a, double nll) { a->sum += nll, a->sum2 += nll * nll, a->n++; }

static inline double ppl_mean(const ppl_acc *a) { return a->n ? a->sum / (double)a->n : 0.0; }

/* The standard error of the mean (sample variance over n - 1). */
static inline double ppl_mean_err(const ppl_acc *a) {
    if (a->n < 2) return 0.0;
    double mean = ppl_mean(a), var = a->sum2 / (double)a->n - mean * mean;
    return var > 0 ? sqrt(var / (double)(a->n - 1)) : 0.0;
}

static inline double ppl_value(const ppl_acc *a) { return a->n ? exp(ppl_mean(a)) : 0.0; }

/* The standard error of the perplexity: the mean NLL's carried through
 * exp, as llama.cpp reports it. */
static inline double ppl_stderr(const ppl_acc *a) { return ppl_value(a) * ppl_mean_err(a); }

/* ------------------------------------------------ KL divergence to a base
 *
 * A base run (--kld-base) keeps, per scored position, its log-probabilities
 * over the vocabulary as 16-bit steps between the row's least and greatest
 * (a step is at most 1/65535 of the row's range: ~6e-4 nats over a 40-nat
 * range, so a kept probability is within 0.03% of the true one and the
 * divergence's floor from the packing is ~1e-7). A later run (--kld)
 * compares its own distributions with them. */

/* The row's log-probabilities in double: logits minus their log-sum-exp. */
static inline void kld_log_softmax(const float *logits, int vocab, double *lp) {
    double lse = ppl_lse(logits, vocab);
    for (int i = 0; i < vocab; i++) lp[i] = (double)logits[i] - lse;
}

/* Packs a row of log-probabilities (kld_log_softmax): q[i] =
 * round((lp[i] - lo) / step). */
static inline void kld_pack(const double *lp, int vocab, uint16_t *q, float *lo, float *step) {
    double a = lp[0], b = lp[0];
    for (int i = 1; i < vocab; i++) a = lp[i] < a ? lp[i] : a, b = lp[i] > b ? lp[i] : b;
    double st = b > a ? (b - a) / 65535.0 : 1.0;
    *lo = (float)a, *step = (float)st;
    for (int i = 0; i < vocab; i++) {
        double v = (lp[i] - (double)*lo) / (double)*step + 0.5;
        q[i] = (uint16_t)(v < 0 ? 0 : v > 65535 ? 65535 : v);
    }
}

/* A packed row back to log-probabilities, renormalized so they sum to 1.
 * 0, or -1 when lo or step is not a finite number (a damaged file). */
static inline int kld_unpack(const uint16_t *q, int vocab, float lo, float step, double *lp) {
    if (!isfinite(lo) || !isfinite(step) || step <= 0) return -1;
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < vocab; i++) lp[i] = (double)lo + (double)step * q[i], mx = lp[i] > mx ? lp[i] : mx;
    for (int i = 0; i < vocab; i++) s += exp(lp[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < vocab; i++) lp[i] -= lse;
    return 0;
}

/* What a run's distributions lost against the base's, over the scored
 * tokens: KL(base || run) per token (each kept for the percentile), how
 * often the two agree on the most likely token, and the mean change of
 * the probability given to the token that came. */
typedef struct {
    ppl_acc kl;      /* the per-token divergences' sums (mean, standard error) */
    double *each;    /* every token's divergence, for the percentile */
    size_t cap;
    long top1;       /* tokens whose most likely id is the same in both */
    double dp_sum;   /* sum of p_run(next) - p_base(next) */
} kld_acc;

/* Adds one position: lb the base's log-probabilities (kld_unpack), lr
 * the run's (kld_log_softmax), target the token that came. 0, or -1 out
 * of memory. */
static inline int kld_add(kld_acc *a, const double *lb, const double *lr, int vocab, int target) {
    double kl = 0;
    int ab = 0, ar = 0;
    for (int i = 0; i < vocab; i++) {
        kl += exp(lb[i]) * (lb[i] - lr[i]);
        if (lb[i] > lb[ab]) ab = i;
        if (lr[i] > lr[ar]) ar = i;
    }
    if ((size_t)a->kl.n == a->cap) {
        size_t nc = a->cap ? 2 * a->cap : 1024;
        double *ne = (double *)realloc(a->each, nc * sizeof(double));
        if (!ne) return -1;
        a->each = ne, a->cap = nc;
    }
    kl = kl > 0 ? kl : 0; /* rounding below zero where the two agree */
    a->each[a->kl.n] = kl;
    ppl_add(&a->kl, kl);
    a->top1 += ab == ar;
    a->dp_sum += exp(lr[target]) - exp(lb[target]);
    return 0;
}

static inline int kld_cmp_(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* The mean of the smallest ceil(keep * n) of v[0..n) (sorted in place;
 * v holds no NaN): +inf when one of those is +inf. A +inf among the
 * largest rows left out does not show here, so a caller judging with it
 * must also check that every row is finite (the oracle checks the
 * logits). */
static inline double kld_trimmed(double *v, int n, double keep) {
    int k = (int)ceil(keep * n - 1e-9), i;
    double s = 0;
    qsort(v, (size_t)n, sizeof *v, kld_cmp_);
    for (i = 0; i < k && i < n; i++) s += v[i];
    return i ? s / i : 0.0;
}

/* KL(ref || run) of two rows of logits, in double; +inf when a logit is
 * not finite (never NaN). Tokens the reference gives no probability add
 * nothing. */
static inline double kld_logits(const float *ref, const float *run, int vocab) {
    double lr = ppl_lse(ref, vocab), lx = ppl_lse(run, vocab), kl = 0;
    if (!isfinite(lr) || !isfinite(lx)) return INFINITY;
    for (int i = 0; i < vocab; i++) {
        if (!isfinite(run[i]) || !isfinite(ref[i])) return INFINITY;
        double a = (double)ref[i] - lr, pa = exp(a);
        if (pa > 0) kl += pa * (a - ((double)run[i] - lx));
    }
    return isnan(kl) ? INFINITY : kl > 0 ? kl : 0;
}

/* The q-quantile (0 < q <= 1) of the per-token divergences: the smallest
 * value at least a fraction q of them do not exceed. Sorts a->each. */
static inline double kld_quantile(kld_acc *a, double q) {
    if (!a->kl.n) return 0;
    qsort(a->each, (size_t)a->kl.n, sizeof(double), kld_cmp_);
    size_t k = (size_t)ceil(q * (double)a->kl.n);
    return a->each[k ? k - 1 : 0];
}

static inline void kld_free(kld_acc *a) { free(a->each), a->each = NULL, a->cap = 0; }

#endif
