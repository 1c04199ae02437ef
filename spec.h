/* spec.h — speculative decoding with the model's MTP layer: the MTP head
 * drafts k tokens, one forward of the main model over k+1 positions
 * verifies them, the longest agreeing prefix is kept plus one token of the
 * main model's own (docs/model.md §3 gives the MTP math and the
 * convention). Greedy (TEMP=0) output is token-identical to decoding
 * without drafts: the verifying forward computes every row exactly as a
 * one-row forward (fwd_verify), and every emitted token is the main
 * model's argmax. Sampled output is token-identical to sampling without
 * drafts too: the token at each position is smp_pick's draw under the key
 * plain sampling would take from the generator for it (one number per
 * token, in order), the drafts are drawn by the MTP head under the same
 * keys (a coupling: the same noise on two nearby distributions mostly
 * picks the same token), a draft is kept when it equals the main model's
 * draw, and the generator advances by the tokens emitted.
 *
 * Caches: the main model's KV is indexed by position, so rejected rows are
 * simply overwritten by the next verify. The MTP layer's cache entry at
 * position t pairs the main model's final-normed hidden row h_t with the
 * token at t+1; drafts beyond the first write provisional entries (paired
 * with the MTP's own output) that the next catch-up overwrites with the
 * verified hidden rows. Rows waiting for the MTP layer are queued and run
 * as one batch before the next draft (or every UBATCH rows while drafting
 * is paused).
 *
 * Acceptance guard: per window of `window` drafts, drafting pauses for
 * `pause` tokens when under `guard_pct` percent were accepted, then re-arms
 * on a fresh window. With k = -1 (auto) the window also picks the next k,
 * 0 included, from measured costs: each round's time by its drafts, the
 * acceptance per draft, and the k that makes the most tokens per second
 * (spec_decide_). Since no choice of k changes a token, the choice may
 * follow the clock.
 *
 * Prefix: spec_. Must not: read the environment, print, or sample outside
 * the rules above. */
#ifndef COLI_SPEC_H
#define COLI_SPEC_H

#include "forward.h"
#include "kv_persist.h"
#include "sample.h"

#define SPEC_MAX_K MODEL_SPEC_MAX_K /* model.h counts the buffers spec_init allocates (model_seq_bytes) */

typedef struct {
    int k;          /* drafts per verify; -1 = auto (0..4 by measured cost and acceptance) */
    int guard_pct;  /* pause below this acceptance (percent); 0 = never */
    int window;     /* drafts per acceptance window */
    int pause;      /* tokens decoded without drafts after a trip */
} spec_opts;

typedef struct {
    long drafted, accepted;   /* draft tokens proposed / kept */
    long verifies;            /* main-model forwards while decoding */
    long mtp_forwards;        /* MTP layer forwards (catch-up batches and chain steps) */
    long pauses;              /* guard trips */
    long hist[SPEC_MAX_K + 1]; /* verifies by drafts accepted */
    long by_k[SPEC_MAX_K + 1]; /* verifies by drafts proposed */
    int stop_k;               /* k = -1 stopped drafting, drafts having been stop_k a round (0: it did not) */
    double stop_cost;         /* such a round's cost over a round without drafts (medians) */
    double stop_alpha;        /* the acceptance that cost was weighed at */
} spec_stats;

#define SPEC_AUTO_MAX 4  /* k = -1 chooses among 0..4 */
#define SPEC_TIMES 8     /* round times kept per k; their median is the cost */
#define SPEC_PROBE 4     /* rounds without drafts that measure their cost */
#define SPEC_BLIND 4     /* rounds with a blind draft (no MTP step) that measure a 2-row verify's cost, alternating with the probe's */
#define SPEC_WARM 2      /* a turn's first rounds, not timed: they run slower (caches, the team waking) */
#define SPEC_REPROBE 256 /* rounds drafting before rounds without are measured again; doubles while confirmed, up to 16x */

/* Called for each generated token in order, with the verifying row's
 * logits it was chosen against; returns nonzero to stop. */
typedef int (*spec_emit_fn)(void *ud, int tok, const float *logits);

typedef struct {
    coli_model *m;
    spec_opts o;
    spec_stats st;
    int k, vocab, dim;
    int kmax;     /* drafts a verifying forward may hold: max_s - 1, or less (spec_cap_k) */
    float *vlog;  /* [SPEC_MAX_K + 1][vocab] verify logits */
    float *vhid;  /* [SPEC_MAX_K + 1][dim] verify hidden rows */
    float *dlog;  /* [vocab] a draft's logits */
    uint64_t keys[SPEC_MAX_K + 1]; /* sampling: the keys of the tokens at pos+1.. (the generator's next numbers) */
    float *hq;    /* [cap][dim] hidden rows queued for the MTP layer */
    int *tq;      /* [cap] their paired next tokens */
    float *hout;  /* [cap][dim] the MTP layer's output rows */
    int nq, cap;
    int mtp_pos;  /* MTP positions [0, mtp_pos) hold verified entries */
    int pos, x;   /* decoding: positions [0, pos) cached, x the next token to feed */
    int hpos;     /* the position whose hidden row s->vhid[0] holds between calls (-1: none) */
    float *h_last; /* [dim] the main model's hidden row of position pos-1 */
    int paused;   /* tokens left without drafts */
    long win_d, win_a, win_j; /* the current window: drafts, kept, judged (kept + the first rejected of each round) */
    /* k = -1: the measured costs (spec_decide_) */
    double t_k[SPEC_AUTO_MAX + 2][SPEC_TIMES]; /* the last round times (seconds) by drafts (SPEC_AUTO_MAX + 1: blind rounds), a ring */
    long t_n[SPEC_AUTO_MAX + 2];              /* rounds timed by drafts */
    double cost[SPEC_AUTO_MAX + 2];           /* their medians (spec_time_), 0 while fewer than 3 */
    double alpha;  /* acceptance per judged draft, the last window's (-1: none yet) */
    double t0;     /* the current round's start */
    int probe;     /* rounds left without drafts to measure their cost */
    int blind;     /* rounds left with a blind draft; the current round is one when blind_now */
    int blind_now;
    int warm;      /* rounds left before the first timed one */
    long since, every; /* rounds drafting since rounds without were last measured, and the interval */
    int explored;  /* the k a probe started from; -1 = none */
    int hopeless;  /* k = -1 stopped drafting: 1 for this conversation, 2 for the run (spec_settle_k_); the MTP part is left behind */
    /* test seams (tests/test_spec.c): replace greedy draft j at position
     * pos (the hook returns the token to propose); keep every draft (to
     * show the identity test can fail); a round's cost by its drafts
     * instead of the clock */
    int (*draft_hook)(void *ud, int pos, int j, int tok);
    void *hook_ud;
    int accept_all;
    double (*cost_hook)(void *ud, int k);
} spec_ctx;

static inline void spec_free(spec_ctx *s) {
    free(s->vlog), free(s->vhid), free(s->dlog), free(s->hq), free(s->tq), free(s->hout), free(s->h_last);
    memset(s, 0, sizeof *s);
}

/* DRAFT=-1's cost of a round with k drafts (SPEC_AUTO_MAX + 1: a blind
 * round): the median of its last SPEC_TIMES times, kept by spec_time_;
 * 0 while fewer than 3 were measured. */
static inline double spec_cost_(const spec_ctx *s, int k) { return s->cost[k]; }

/* A round of kind k took t seconds: into its ring, and its median again
 * (a cold round, an expert read on first use, does not move it). */
static inline void spec_time_(spec_ctx *s, int k, double t) {
    s->t_k[k][s->t_n[k]++ % SPEC_TIMES] = t;
    int n = s->t_n[k] < SPEC_TIMES ? (int)s->t_n[k] : SPEC_TIMES;
    if (n < 3) return;
    double v[SPEC_TIMES];
    for (int i = 0; i < n; i++) {
        double x = s->t_k[k][i];
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
    s->cost[k] = n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A fresh start of the guard and of the window (a new turn); the
 * automatic k starts again at 1, after SPEC_PROBE rounds without drafts
 * and SPEC_BLIND with a blind one while those costs are not measured
 * (spec_propose). The measured costs stay, and the verdicts: they belong
 * to the machine and the model (spec_rewind ends a conversation's). */
static inline void spec_rearm(spec_ctx *s) {
    s->k = s->o.k < 0 ? !s->hopeless : s->o.k;
    if (s->k > s->kmax) s->k = s->kmax;
    s->paused = 0, s->win_d = s->win_a = s->win_j = 0;
    /* the costs not measured yet first (a turn may have ended before) */
    s->probe = s->o.k < 0 && !(spec_cost_(s, 0) > 0) ? SPEC_PROBE : 0;
    s->blind = s->o.k < 0 && !(spec_cost_(s, SPEC_AUTO_MAX + 1) > 0) ? SPEC_BLIND : 0;
    s->warm = s->probe ? SPEC_WARM : 0;
}

/* 0, or -1 (out of memory). m must have its MTP layer loaded. */
static inline int spec_init(spec_ctx *s, coli_model *m, const spec_opts *o) {
    memset(s, 0, sizeof *s);
    s->m = m, s->o = *o, s->hpos = -1, s->alpha = -1, s->every = SPEC_REPROBE, s->explored = -1;
    s->vocab = m->c.vocab, s->dim = m->c.dim;
    s->kmax = m->sc.max_s - 1 < SPEC_MAX_K ? m->sc.max_s - 1 : SPEC_MAX_K;
    spec_rearm(s);
    s->cap = m->sc.max_s + SPEC_MAX_K + 2;
    size_t V = (size_t)s->vocab, D = (size_t)s->dim, K1 = SPEC_MAX_K + 1;
    s->vlog = (float *)malloc(K1 * V * 4), s->vhid = (float *)malloc(K1 * D * 4);
    s->dlog = (float *)malloc(V * 4);
    s->hq = (float *)malloc((size_t)s->cap * D * 4), s->tq = (int *)malloc((size_t)s->cap * sizeof(int)), s->hout = (float *)malloc((size_t)s->cap * D * 4);
    s->h_last = (float *)malloc(D * 4);
    if (!s->vlog || !s->vhid || !s->dlog || !s->hq || !s->tq || !s->hout || !s->h_last) {
        spec_free(s);
        return -1;
    }
    return 0;
}

/* Queues the MTP row (hidden h, next token t). */
static inline void spec_queue(spec_ctx *s, const float *h, int t) {
    memcpy(s->hq + (size_t)s->nq * s->dim, h, (size_t)s->dim * 4);
    s->tq[s->nq++] = t;
}

/* Runs the queued rows through the MTP layer at positions mtp_pos.., in
 * batches of at most max_s; the last row's logits go to s->dlog and its
 * output row to s->hout[0]. 0 or -1 (m->err). */
static inline int spec_flush(spec_ctx *s) {
    coli_model *m = s->m;
    int done = 0, last = 0;
    while (done < s->nq) {
        int S = s->nq - done < m->sc.max_s ? s->nq - done : m->sc.max_s;
        if (fwd_mtp(m, s->tq + done, s->hq + (size_t)done * s->dim, S, s->mtp_pos, s->hout, s->dlog)) return -1;
        s->st.mtp_forwards++;
        s->mtp_pos += S, done += S, last = S - 1;
    }
    if (done && last) memmove(s->hout, s->hout + (size_t)last * s->dim, (size_t)s->dim * 4);
    s->nq = 0;
    return 0;
}

/* The main model computed positions p0..p0+S-1 (S <= max_s; final-normed
 * hidden rows h[S][dim]); tok[i] is the token at position p0+i, ntok of
 * them known (ntok <= S+1). Each position's MTP row is queued as soon as
 * its next token is known, the row of position p0-1 (kept in s->vhid[0])
 * first when it still waits for tok[0]; the last row is left in
 * s->vhid[0] and s->h_last. The queue runs through the MTP layer in the
 * selected slot when it fills. The MTP part must be ready for p0
 * (spec_ready). 0 or -1 (m->err). */
static inline int spec_rows(spec_ctx *s, const int *tok, int ntok, int p0, int S, const float *h) {
    size_t D = (size_t)s->dim;
    int cover = s->mtp_pos + s->nq;
    if (cover != p0 && !(cover == p0 - 1 && s->hpos == p0 - 1))
        return model_fail(s->m, "the MTP rows are out of step (%d positions covered, rows from %d)", cover, p0);
    if (s->nq + S + 1 > s->cap && spec_flush(s)) return -1;
    if (cover == p0 - 1) spec_queue(s, s->vhid, tok[0]);
    for (int j = 0; j < S && j + 1 < ntok; j++) spec_queue(s, h + (size_t)j * D, tok[j + 1]);
    memcpy(s->vhid, h + (size_t)(S - 1) * D, D * 4);
    memcpy(s->h_last, s->vhid, D * 4);
    s->pos = p0 + S, s->hpos = s->pos - 1;
    if (s->nq >= s->m->sc.max_s && spec_flush(s)) return -1;
    return 0;
}

/* Prefill of ids[start..n) at positions start.. in chunks of max_s (the
 * same chunks as fwd_tokens, so the main model's state and logits equal a
 * plain prefill's), queueing the MTP rows (spec_rows); the last hidden row
 * is left in s->vhid[0] and s->h_last, the last logits in m->sc.logits.
 * start > 0 continues a state that is ready for it (spec_ready: after a
 * turn, spec_resume or spec_rewind). 0 or -1 (m->err). */
static inline int spec_prefill(spec_ctx *s, const int *ids, int n, int start) {
    coli_model *m = s->m;
    for (int done = start; done < n;) {
        int S = n - done < m->ubatch ? n - done : m->ubatch;
        if (S > m->sc.max_s) S = m->sc.max_s;
        float *h = s->hout; /* [S][dim]: spec_rows flushes before it reads them, so the flush's output cannot overwrite them */
        if (s->nq + S + 1 > s->cap && spec_flush(s)) return -1;
        if (fwd_run(m, ids + done, S, done, NULL, h, 0)) return -1;
        if (spec_rows(s, ids + done, n - done, done, S, h)) return -1;
        done += S;
    }
    s->pos = n; /* a turn that ends before decoding (a stop token first, NGEN=1) is saved from here */
    memcpy(s->h_last, s->vhid, (size_t)s->dim * 4);
    return 0;
}

/* The MTP part of a saved state (kv_persist.h) as plain values: the
 * verified cache [0, mtp_pos) and the rows queued for positions up to
 * pos-2; the row of position pos-1 is implied by h_last and the token at
 * pos, which a resumed run feeds again. */
static inline kvp_mtp spec_state(const spec_ctx *s) {
    kvp_mtp k;
    k.mtp_pos = s->mtp_pos < s->pos - 1 ? s->mtp_pos : s->pos - 1;
    k.nq = s->pos - 1 - k.mtp_pos;
    if (k.nq > s->nq) k.nq = -1; /* not in step: kvp_save leaves it out */
    k.hq = s->hq, k.tq = s->tq, k.h_last = s->h_last;
    return k;
}

/* The main model's cache keeps positions [0, p) of this conversation, and
 * its tokens [0, L) are those the MTP part was computed with (a rewind, a
 * conversation started again, a turn taken back): the MTP cache keeps its
 * verified entries and queued rows while they stay valid, entry t pairing
 * h_t with the token at t+1 (so t < p and t+1 < L), the rest is dropped;
 * the hidden row at hand stays when its position is below p and L.
 * Returns the most positions, at most p, the MTP part is then ready for
 * (spec_ready): spec_prefill(..., start = that) or spec_rows from it
 * computes the rest. */
static inline int spec_rewind(spec_ctx *s, int p, int L) {
    int keep = s->mtp_pos + s->nq;
    if (keep > p) keep = p;
    if (keep > L - 1) keep = L - 1;
    if (keep < 0) keep = 0;
    if (keep < s->mtp_pos) s->mtp_pos = keep;
    s->nq = keep - s->mtp_pos;
    s->pos = keep;
    if (s->hpos >= p || s->hpos >= L) s->hpos = -1; /* its position is not in the kept prefix */
    int ready = keep < p && s->hpos == keep ? keep + 1 : keep; /* the row of `keep` at hand: it is queued with the next token */
    if (ready == p && s->hopeless == 1) s->hopeless = 0; /* in step again: another continuation, which may draft */
    return ready;
}

/* Whether the MTP part can follow a computation of positions p.. (its
 * rows cover exactly [0, p), or [0, p-1) with the hidden row of p-1 at
 * hand); else spec_rewind first. */
static inline int spec_ready(const spec_ctx *s, int p) {
    int cover = s->mtp_pos + s->nq;
    return cover == p || (cover == p - 1 && s->hpos == p - 1);
}

/* A drafting turn ends with positions [0, pos) cached: the MTP part is
 * cut back to them (spec_state) and the hidden row of pos-1 kept for the
 * next turn's first prompt row. 0, or -1 when it cannot be (the caller
 * stops drafting). */
static inline int spec_end_turn(spec_ctx *s) {
    kvp_mtp k = spec_state(s);
    if (k.nq < 0) return -1;
    s->mtp_pos = k.mtp_pos, s->nq = k.nq;
    memcpy(s->vhid, s->h_last, (size_t)s->dim * 4);
    s->hpos = s->pos - 1;
    return 0;
}

/* Restores a saved MTP part before spec_prefill(..., start = n_kv); the
 * queue grows to hold a longer saved one (a state saved with a larger
 * UBATCH: spec_flush runs it in batches). 0, or -1 (out of memory, or an
 * inconsistent state: nothing is restored). */
static inline int spec_resume(spec_ctx *s, const kvp_state *st) {
    if (st->nq < 0 || st->mtp_pos < 0 || st->mtp_pos + st->nq != st->n_kv - 1) return -1;
    int need = st->nq + s->m->sc.max_s + SPEC_MAX_K + 2;
    if (need > s->cap) {
        float *hq = (float *)realloc(s->hq, (size_t)need * s->dim * 4);
        if (hq) s->hq = hq;
        int *tq = (int *)realloc(s->tq, (size_t)need * sizeof(int));
        if (tq) s->tq = tq;
        if (!hq || !tq) return -1;
        s->cap = need;
    }
    s->mtp_pos = st->mtp_pos, s->nq = st->nq, s->pos = st->n_kv;
    memcpy(s->h_last, st->h_last, (size_t)s->dim * 4);
    memcpy(s->hq, st->hq, (size_t)st->nq * s->dim * 4);
    memcpy(s->tq, st->tq, (size_t)st->nq * sizeof(int));
    memcpy(s->vhid, st->h_last, (size_t)s->dim * 4);
    s->hpos = st->n_kv - 1;
    return 0;
}

/* Chooses draft j's token from s->dlog: the argmax when greedy, else
 * smp_pick's draw under the key of the position it proposes for. */
static inline int spec_draft_pick(spec_ctx *s, const smp_params *sp, int j, smp_work *w) {
    if (sp->temp <= 0) return smp_argmax(s->dlog, s->vocab);
    return smp_pick(sp, s->dlog, s->vocab, s->keys[j], w);
}

/* The main model's token at verify row j (logits lg, that row's): the
 * argmax when greedy, else smp_pick's draw under the row's key, exactly
 * what sampling without drafts draws there. -2 when the row's logits are
 * not finite. */
static inline int spec_target(const spec_ctx *s, const smp_params *sp, int j, const float *lg, smp_work *w) {
    int t = sp->temp <= 0 ? smp_argmax(lg, s->vocab) : smp_pick(sp, lg, s->vocab, s->keys[j], w);
    return t < 0 ? -2 : t;
}

/* Expected tokens per second with k drafts each kept with probability a
 * once the one before was (1 + a + ... + a^k tokens a round); a k not
 * measured is costed on the line through the cost without drafts and the
 * measured k nearest it (a verifying forward's rows and the MTP steps
 * grow about linearly). 0 when that cannot be told yet. */
static inline double spec_rate_(const spec_ctx *s, int k, double a) {
    double t0 = spec_cost_(s, 0), t = spec_cost_(s, k), e = 1, p = 1;
    if (k == 0) return t0 > 0 ? 1.0 / t0 : 0;
    if (!(t > 0)) {
        int near = 0;
        for (int j = 1; j <= SPEC_AUTO_MAX; j++)
            if (spec_cost_(s, j) > 0 && (!near || abs(j - k) < abs(near - k))) near = j;
        if (!near || !(t0 > 0)) return 0;
        double c = spec_cost_(s, near), lo = c < t0 ? c : t0;
        t = t0 + (c - t0) * k / near;
        if (t < lo) t = lo; /* a line falling (noise: drafting measured cheaper than not) stays above its points */
    }
    for (int i = 0; i < k; i++) e += (p *= a);
    return t > 0 && a >= 0 ? e / t : 0;
}

/* The k in [lo, min(4, kmax)] with the most expected tokens per second at
 * acceptance a (lo, or the current k, while a cost is not measured). */
static inline int spec_decide_(const spec_ctx *s, int lo, double a) {
    int top = s->kmax < SPEC_AUTO_MAX ? s->kmax : SPEC_AUTO_MAX, best = -1;
    double rate = 0;
    for (int k = lo; k <= top; k++) {
        double r = spec_rate_(s, k, a);
        if (!(r > 0)) return lo > 0 ? (lo <= top ? lo : top) : s->k; /* a cost not measured yet */
        if (r > rate) rate = r, best = k;
    }
    return best >= 0 ? best : s->k;
}

#define SPEC_HIGH_ACCEPT 0.9 /* an acceptance few texts exceed: drafting that would not pay even at it never will here */

/* k = -1 settles on k after a decision. k = 0 stops drafting and leaves
 * the MTP part behind (keeping it in step costs a layer's forward per
 * token, a fifth of a small model's): for the rest of the conversation,
 * or for the rest of the run when even SPEC_HIGH_ACCEPT could not pay
 * (hopeless 2: later turns do not run the MTP layer at all). A probe that
 * confirms k > 0 doubles the interval to the next (up to 16x). */
static inline void spec_settle_k_(spec_ctx *s, int k, int cause_k, int for_run) {
    if (k == 0) {
        s->hopeless = for_run ? 2 : 1;
        s->hpos = -1; /* the rows verified from here are not queued: vhid[0] is no longer the row kept */
        s->st.stop_k = cause_k > SPEC_AUTO_MAX ? 1 : cause_k;
        s->st.stop_cost = spec_cost_(s, cause_k) / spec_cost_(s, 0);
        s->st.stop_alpha = s->hopeless == 2 ? SPEC_HIGH_ACCEPT : s->alpha;
    } else if (s->explored > 0)
        s->every = s->every * 2 < 16 * SPEC_REPROBE ? s->every * 2 : 16 * SPEC_REPROBE;
    s->explored = -1, s->k = k;
    s->win_d = s->win_a = s->win_j = 0;
}

/* After a window closes: the guard, and the automatic k. */
static inline void spec_window(spec_ctx *s) {
    if (s->win_d < s->o.window) return;
    double acc = (double)s->win_a / (double)s->win_d;
    if (s->o.guard_pct > 0 && acc * 100.0 < s->o.guard_pct) {
        s->paused = s->o.pause;
        s->st.pauses++;
    } else if (s->o.k < 0) {
        s->alpha = s->win_j ? (double)s->win_a / (double)s->win_j : 0;
        int k = spec_decide_(s, 0, s->alpha);
        if (k != s->k) s->since = 0;
        spec_settle_k_(s, k, s->k, spec_decide_(s, 0, SPEC_HIGH_ACCEPT) == 0);
    }
    s->win_d = s->win_a = s->win_j = 0;
}

/* k = -1, after a round with k drafts that took t seconds: its time is
 * kept; a probe without drafts ends in a decision; the blind rounds end
 * drafting before the MTP layer ever runs when a 2-row verify and the
 * least an MTP step costs come to 1 + SPEC_HIGH_ACCEPT forwards (the
 * prompt's rows then never go through it); drafting stops at once
 * when no k > 0 could pay even at SPEC_HIGH_ACCEPT (a small, compute-bound
 * model finds this in three rounds: k + 1 rows cost about as much as
 * k + 1 forwards); while drafting, rounds without drafts are measured
 * again every so often. */
static inline void spec_auto_round_(spec_ctx *s, int k, double t) {
    if (s->warm > 0) {
        s->warm--;
        return;
    }
    int at = s->blind_now ? SPEC_AUTO_MAX + 1 : k;
    if (at <= SPEC_AUTO_MAX + 1 && t > 0) spec_time_(s, at, t);
    if (s->probe > 0 && k == 0) {
        if (--s->probe == 0 && s->alpha >= 0) spec_settle_k_(s, spec_decide_(s, 0, s->alpha), s->k, spec_decide_(s, 0, SPEC_HIGH_ACCEPT) == 0);
        return;
    }
    if (s->blind_now) {
        double t0 = spec_cost_(s, 0), tb = spec_cost_(s, SPEC_AUTO_MAX + 1), mtp = t0 / (s->m->c.n_layers > 0 ? s->m->c.n_layers : 1);
        /* the verify and the MTP step, at least a decoder layer's share of
         * a forward, cost 1.9 forwards: no k can pay (a cost linear in k
         * against 1 + a + a^2 ...) */
        if (!s->blind && t0 > 0 && tb + mtp >= (1 + SPEC_HIGH_ACCEPT) * t0) spec_settle_k_(s, 0, SPEC_AUTO_MAX + 1, 1);
        return;
    }
    if (k > 0 && s->k > 0 && spec_decide_(s, 0, SPEC_HIGH_ACCEPT) == 0) {
        spec_settle_k_(s, 0, k, 1);
        return;
    }
    if (k > 0 && ++s->since >= s->every) s->since = 0, s->explored = s->k, s->probe = SPEC_PROBE;
}

/* Starts decoding after a prefill by spec_prefill: x is the first sampled
 * token (already emitted), at position pos (= the prompt length). */
static inline void spec_start(spec_ctx *s, int x, int pos) {
    memcpy(s->h_last, s->vhid, (size_t)s->dim * 4);
    s->pos = pos, s->x = x;
}

/* At most kmax (>= 0) drafts per verifying forward from now on: a caller
 * computing several sequences in one forward bounds the rows it holds.
 * Greedy tokens do not change. */
static inline void spec_cap_k(spec_ctx *s, int kmax) {
    if (kmax < s->kmax) s->kmax = kmax < 0 ? 0 : kmax;
    if (s->k > s->kmax) s->k = s->kmax;
}

/* The first half of a round from s->x at s->pos, in the selected slot:
 * the MTP row of position pos-1 (h_{pos-1}, x) queued, and with drafts the
 * queue run and up to k drafts chained by the MTP head. toks[0..*k] are the
 * rows to verify at positions pos..; at most `left` tokens may follow.
 * *done when nothing may be generated (left ran out, or the context is
 * full): then nothing is queued. 0, or -1 with m->err set. */
static inline int spec_propose(spec_ctx *s, int left, const smp_params *sp, smp_rng *r, smp_work *w, int *toks, int *kk, int *done) {
    coli_model *m = s->m;
    int pos = s->pos, x = s->x;
    *done = 0, *kk = 0;
    if (left <= 0 || pos >= m->kv.ctx) return *done = 1, 0;
    /* the first measurement alternates rounds without drafts and blind
     * ones (x again as the draft: the cost of verifying 2 rows, without
     * the MTP layer's), so both are timed under the same conditions */
    int blind = s->blind > 0 && !s->warm && s->probe < s->blind && s->k > 0;
    int k = s->paused > 0 || s->hopeless || s->warm ? 0 : blind ? 1 : s->probe > 0 ? 0 : s->k;
    if (k > left - 1) k = left - 1;
    if (k > m->kv.ctx - pos - 1) k = m->kv.ctx - pos - 1;
    if (k < 0) k = 0;
    s->blind_now = k > 0 && blind;
    if (s->blind_now) s->blind--;
    if (!s->hopeless) {
        if (s->nq == s->cap && spec_flush(s)) return -1;
        spec_queue(s, s->h_last, x);
    }
    toks[0] = x;
    if (sp->temp > 0) { /* the keys plain sampling would take for positions pos+1..pos+k+1 */
        smp_rng ahead = *r;
        for (int j = 0; j <= k; j++) s->keys[j] = smp_next(&ahead);
    }
    if (s->o.k < 0 && !s->cost_hook) s->t0 = compat_now();
    if (s->blind_now)
        toks[1] = x;
    else if (k > 0) {
        if (spec_flush(s)) return -1;
        for (int j = 0; j < k; j++) {
            if (j) {
                if (fwd_mtp(m, &toks[j], s->hout, 1, pos + j - 1, s->hout, s->dlog)) return -1;
                s->st.mtp_forwards++;
            }
            if ((toks[j + 1] = spec_draft_pick(s, sp, j, w)) < 0) return model_fail(m, "the MTP head's logits are not finite");
            if (s->draft_hook) toks[j + 1] = s->draft_hook(s->hook_ud, pos, j, toks[j + 1]);
        }
    } else if (!s->hopeless && s->nq >= m->sc.max_s && spec_flush(s))
        return -1;
    *kk = k;
    return 0;
}

/* The second half: the verifying forward over toks[0..k] gave each row's
 * logits vlog[k+1][vocab] and final-normed hidden row vhid[k+1][dim]. The
 * longest agreeing prefix of the drafts and then the main model's own
 * token are emitted in order (at most `left`), the verified positions'
 * MTP rows queued. *done is set when emit asked to stop or `left` ran out.
 * Returns the tokens emitted (>= 1), or -1 with m->err set. */
static inline int spec_settle(spec_ctx *s, const int *toks, int k, const float *vlog, const float *vhid, int left, const smp_params *sp, smp_rng *r,
                              smp_work *w, spec_emit_fn emit, void *ud, int *done) {
    int V = s->vocab, D = s->dim;
    s->st.verifies++;
    int a = 0, y = -1;
    for (; (y = spec_target(s, sp, a, vlog + (size_t)a * V, w)) >= 0 && a < k; a++) /* row a's token; the drafts it equals are kept */
        if (y != toks[a + 1] && !s->accept_all) break;
    if (y < 0) return model_fail(s->m, "the logits are not finite (NaN or infinity)");
    s->st.by_k[k]++;
    if (!s->blind_now) { /* a blind round's draft is no MTP draft: it counts in no figure of theirs */
        s->st.drafted += k, s->st.accepted += a, s->st.hist[a]++;
        s->win_d += k, s->win_a += a, s->win_j += a + (a < k);
    }
    if (k && !s->blind_now) spec_window(s);
    else if (s->paused > 0) s->paused--;
    if (s->o.k < 0 && !s->paused && !s->hopeless) spec_auto_round_(s, k, s->cost_hook ? s->cost_hook(s->hook_ud, k) : compat_now() - s->t0);
    int emitted = 0;
    *done = 0;
    for (int j = 0; j <= a && !*done; j++) {
        int t = j < a ? toks[j + 1] : y;
        emitted++;
        *done = emit(ud, t, vlog + (size_t)j * V) || emitted >= left;
    }
    if (sp->temp > 0)
        for (int j = 0; j < emitted; j++) smp_next(r); /* one number per token, as sampling without drafts */
    if (*done) return emitted;
    if (!s->hopeless)
        for (int j = 0; j < a; j++) spec_queue(s, vhid + (size_t)j * D, toks[j + 1]);
    memcpy(s->h_last, vhid + (size_t)a * D, (size_t)D * 4);
    s->x = y, s->pos += a + 1;
    return emitted;
}

/* One round from s->x at s->pos: spec_propose, one verifying forward of
 * the main model over its rows, spec_settle. *done as there (or when
 * nothing may be generated). Returns the tokens emitted (>= 0), or -1 with
 * m->err set. */
static inline int spec_step(spec_ctx *s, int left, const smp_params *sp, smp_rng *r, smp_work *w, spec_emit_fn emit, void *ud, int *done) {
    int toks[SPEC_MAX_K + 1], k;
    if (spec_propose(s, left, sp, r, w, toks, &k, done)) return -1;
    if (*done) return 0;
    if (fwd_verify(s->m, toks, k + 1, s->pos, s->vlog, s->vhid)) return -1;
    return spec_settle(s, toks, k, s->vlog, s->vhid, left, sp, r, w, emit, ud, done);
}

/* Generates after a prefill by spec_prefill: spec_start, then spec_step
 * until done; at most `left` more tokens are emitted. Returns 0, or -1
 * with m->err set. */
static inline int spec_decode(spec_ctx *s, int x, int pos, int left, const smp_params *sp, smp_rng *r, smp_work *w, spec_emit_fn emit,
                              void *ud) {
    spec_start(s, x, pos);
    for (int done = 0; !done;) {
        int e = spec_step(s, left, sp, r, w, emit, ud, &done);
        if (e < 0) return -1;
        left -= e;
    }
    return 0;
}

#endif
