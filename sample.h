/* sample.h — next-token choice: a seeded generator, greedy argmax, and
 * temperature / top-k / top-p / min-p sampling over a logit vector; the stop
 * set. Filters apply in transformers' order: temperature, top-k, top-p,
 * min-p. Pure functions over caller-owned buffers. Prefix: smp_. Must not:
 * read the environment or keep state outside what the caller passes. */
#ifndef COLI_SAMPLE_H
#define COLI_SAMPLE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* xoshiro256** seeded through splitmix64: fast, 2^256 period, and the same
 * sequence on every platform for a given seed. */
typedef struct {
    uint64_t s[4];
} smp_rng;

static inline uint64_t smp_splitmix_(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void smp_seed(smp_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = smp_splitmix_(&seed);
}

static inline uint64_t smp_rotl_(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t smp_next(smp_rng *r) {
    uint64_t *s = r->s, out = smp_rotl_(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = smp_rotl_(s[3], 45);
    return out;
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double smp_uniform(smp_rng *r) { return (double)(smp_next(r) >> 11) * (1.0 / 9007199254740992.0); }

typedef struct {
    float temp;   /* 0 = greedy */
    int top_k;    /* 0 = off */
    float top_p;  /* 1 = off */
    float min_p;  /* 0 = off */
} smp_params;

/* Per-call work space for a vocabulary of n: allocate once with
 * smp_work_alloc, never in the decode loop. */
typedef struct {
    int n;
    int *idx;
    float *p;
} smp_work;

static inline int smp_work_alloc(smp_work *w, int n) {
    w->n = n;
    w->idx = (int *)malloc((size_t)n * sizeof(int));
    w->p = (float *)malloc((size_t)n * sizeof(float));
    return w->idx && w->p ? 0 : -1;
}

static inline void smp_work_free(smp_work *w) {
    free(w->idx);
    free(w->p);
    memset(w, 0, sizeof *w);
}

/* Index of the largest finite logit (ties to the lowest id), or -1 if none
 * is finite. */
static inline int smp_argmax(const float *x, int n) {
    int b = -1;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i]) && (b < 0 || x[i] > x[b])) b = i;
    return b;
}

/* Orders candidate ids by logit, descending, ties to the lower id. */
static inline int smp_before_(const float *x, int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); }

/* Moves the k best of idx[0..n) (by smp_before_) to the front, unordered. */
static inline void smp_select_(const float *x, int *idx, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int piv = idx[lo + (hi - lo) / 2], i = lo, j = hi;
        while (i <= j) {
            while (smp_before_(x, idx[i], piv)) i++;
            while (smp_before_(x, piv, idx[j])) j--;
            if (i <= j) { int t = idx[i]; idx[i] = idx[j]; idx[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

/* Sorts idx[0..n) best first by smp_before_ (heap sort: no recursion, no
 * allocation, O(n log n)). The heap keeps the worst candidate at its root. */
static inline void smp_sift_(const float *x, int *idx, int root, int n) {
    for (;;) {
        int c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && smp_before_(x, idx[c], idx[c + 1])) c++;
        if (!smp_before_(x, idx[root], idx[c])) return;
        int t = idx[root];
        idx[root] = idx[c];
        idx[c] = t;
        root = c;
    }
}

static inline void smp_sort_(const float *x, int *idx, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) smp_sift_(x, idx, i, n);
    for (int end = n - 1; end > 0; end--) {
        int t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        smp_sift_(x, idx, 0, end);
    }
}

/* The candidates the filters keep, in w->idx[0..keep): logits / temp, the
 * top_k best, then the smallest best-first prefix whose probability reaches
 * top_p (best-first order only when top_p < 1). *z is the softmax
 * normalizer over the top-k set and *mx the best scaled logit. best is the
 * argmax, temp > 0. Returns keep. */
static inline int smp_keep_(const smp_params *sp, const float *logits, int n, int best, smp_work *w, double *z, double *mx) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(logits[i])) w->idx[m++] = i;
    int k = sp->top_k > 0 && sp->top_k < m ? sp->top_k : m;
    if (k < m) smp_select_(logits, w->idx, m, k);
    double inv_t = 1.0 / sp->temp;
    *mx = logits[best] * inv_t, *z = 0;
    for (int i = 0; i < k; i++) *z += exp(logits[w->idx[i]] * inv_t - *mx);
    if (sp->top_p >= 1) return k;
    /* sorting the whole vocabulary per token is wasteful: sort a head of
     * the candidates and widen it only while top-p needs more mass */
    for (int head = k < 1024 ? k : 1024;; head = head * 8 < k ? head * 8 : k) {
        if (head < k) smp_select_(logits, w->idx, k, head);
        smp_sort_(logits, w->idx, head);
        double cum = 0;
        for (int i = 0; i < head; i++) {
            cum += exp(logits[w->idx[i]] * inv_t - *mx) / *z;
            if (cum >= sp->top_p) return i + 1;
        }
        if (head == k) return k;
    }
}

/* A uniform in (0, 1) for candidate id under key: counter-based (one
 * splitmix64 round of key and id), so a token's noise depends on its key
 * alone and the same key gives the same draw wherever it is evaluated. */
static inline double smp_unit_(uint64_t key, int id) {
    uint64_t x = key ^ ((uint64_t)(unsigned)id * 0xd1b54a32d192ed03ull);
    return ((double)(smp_splitmix_(&x) >> 12) + 0.5) * (1.0 / 4503599627370496.0); /* 52 bits: 1 - 2^-53 at most, exactly */
}

/* Chooses the next token from logits[n] with the noise of key. Greedy
 * (argmax, ties to the lowest id) when temp == 0. Otherwise, as
 * transformers orders its filters: logits / temp; keep the top_k best;
 * keep the smallest best-first prefix whose probability reaches top_p;
 * drop candidates below min_p × the best probability; then the exponential
 * race over what is left: each candidate i draws E_i = -ln u_i (u_i from
 * smp_unit_(key, i)) and the least E_i / p_i wins, which is a draw from
 * p renormalized over the kept set (the Gumbel-max trick). A draw is a
 * function of (key, p) alone, so a speculative verifier that evaluates
 * the same key on the same distribution gets the same token, and a draft
 * made with that key from a nearby distribution agrees with it as often as
 * a coupling can (spec.h). Non-finite logits are never chosen. Returns the
 * id, or -1 if no logit is finite. */
static inline int smp_pick(const smp_params *sp, const float *logits, int n, uint64_t key, smp_work *w) {
    int best = smp_argmax(logits, n);
    if (best < 0 || sp->temp <= 0) return best;
    double z, mx, inv_t = 1.0 / sp->temp;
    int keep = smp_keep_(sp, logits, n, best, w, &z, &mx);
    double floor_p = sp->min_p > 0 ? sp->min_p / z : 0, win = INFINITY; /* the best has probability 1/z */
    int pick = best;
    for (int i = 0; i < keep; i++) {
        int id = w->idx[i];
        double p = exp(logits[id] * inv_t - mx) / z;
        if (!(p > 0) || p < floor_p) continue;
        double u = smp_unit_(key, id);
        /* -ln u >= 1 - u: a candidate with 1 - u >= win·p cannot win, and
         * its logarithm is left out (most of a large vocabulary); the
         * margin keeps the skip on the safe side of rounding */
        if (1.0 - u > win * p * (1.0 + 1e-9)) continue;
        double v = -log(u) / p;
        if (v < win || (v == win && id < pick)) win = v, pick = id;
    }
    return pick;
}

/* smp_pick with the generator's next number as the key: one number per
 * token, whatever the filters keep. */
static inline int smp_sample(const smp_params *sp, const float *logits, int n, smp_rng *r, smp_work *w) {
    if (sp->temp <= 0) return smp_argmax(logits, n);
    return smp_pick(sp, logits, n, smp_next(r), w);
}

/* Log-probabilities for reporting (an API's logprobs): of the distribution
 * smp_sample draws from when temp > 0 (logits / temp, top-k, top-p, min-p,
 * renormalized; a filtered token is -inf), and greedy (temp 0) of the
 * model's own softmax at temperature 1, since greedy's one-hot says
 * nothing. *lp is id's; top_id/top_lp[0..ntop) the most likely tokens of
 * finite log-probability, best first, ties to the lower id. Returns how
 * many tops were written, or -1 when no logit is finite. O(n) plus
 * sorting ntop. */
static inline int smp_logprobs(const smp_params *sp, const float *logits, int n, int id, int ntop, smp_work *w, float *lp, int *top_id, float *top_lp) {
    int best = smp_argmax(logits, n), keep = 0;
    *lp = -INFINITY;
    if (best < 0) return -1;
    double inv_t = sp->temp > 0 ? 1.0 / sp->temp : 1.0, z = 0, mx = logits[best] * inv_t, s = 1;
    if (sp->temp <= 0) {
        for (int i = 0; i < n; i++)
            if (isfinite(logits[i])) w->idx[keep++] = i, z += exp(logits[i] - mx);
    } else {
        keep = smp_keep_(sp, logits, n, best, w, &z, &mx);
        double floor_p = sp->min_p > 0 ? sp->min_p / z : 0;
        int k = 0;
        s = 0;
        for (int i = 0; i < keep; i++) { /* min-p: drop, and renormalize over what is left */
            double p = exp(logits[w->idx[i]] * inv_t - mx) / z;
            if (p >= floor_p) w->idx[k++] = w->idx[i], s += p;
        }
        keep = k;
    }
    double lz = log(z) + log(s); /* log p_i = l_i / t - mx - lz */
    for (int i = 0; i < keep; i++)
        if (w->idx[i] == id) *lp = (float)(logits[id] * inv_t - mx - lz);
    int k = ntop < keep ? ntop : keep;
    if (k > 0 && k < keep) smp_select_(logits, w->idx, keep, k);
    smp_sort_(logits, w->idx, k);
    for (int i = 0; i < k; i++) top_id[i] = w->idx[i], top_lp[i] = (float)(logits[w->idx[i]] * inv_t - mx - lz);
    return k;
}

/* Whether id is in the stop set. */
static inline int smp_is_stop(const int *stops, int n, int id) {
    for (int i = 0; i < n; i++)
        if (stops[i] == id) return 1;
    return 0;
}

#endif
