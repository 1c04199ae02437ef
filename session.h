/* session.h — a conversation on a model, between the run modes and the
 * forward pass: every id so far, the positions whose KV is cached, the
 * MTP drafting state, the sampler, the grammar that constrains answers,
 * and one turn's decoding.
 *
 * A turn: sess_begin (the new ids checked against the vocabulary and the
 * context, the limit fixed), sess_prefill (the ids not yet cached), then
 * sess_step until it reports the turn done, then sess_finish (the
 * generated ids join the conversation) or, on failure, sess_abort (the
 * turn leaves nothing behind). Every sess_step is one propose → verify →
 * accept round with at most one forward of the main model: the token
 * chosen from the session's logits goes first, then the proposals of one
 * of three proposers — MTP drafts (spec.h), grammar drafts (the text the
 * grammar forces, tokenized), forced grammar tokens (kept without
 * verification) — and what the forward's rows agree with is accepted.
 * The round is two halves around the forward, sess_plan (the rows wanted)
 * and sess_absorb (their logits, and with MTP drafts their hidden rows,
 * accepted), so that a caller may compute several sessions' rows in one
 * forward; the MTP head's own forwards run inside sess_plan. Each
 * accepted token goes through sess_emit_: stop tokens, the stop flag, the
 * text to the sink, the limits.
 *
 * The session keeps its own copy of the next token's logits (s->lg);
 * the model's scratch logits are never filtered in place.
 *
 * Prefix: sess_. Must not: read the environment, print (what it has to
 * say goes to the turn's io or s->note), or exit. */
#ifndef COLI_SESSION_H
#define COLI_SESSION_H

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "compat.h"
#include "forward.h"
#include "grammar.h"
#include "kv_persist.h"
#include "chat.h"
#include "sample.h"
#include "spec.h"
#include "tok.h"

/* How a turn's text leaves, and what happened: a flag that stops it at
 * the next token; its limit; the tokens, why it stopped, or why it failed
 * and whether the model itself failed (then nothing more can run) or only
 * this turn did. */
typedef struct {
    atomic_int *stop;
    int (*sink)(void *ud, const char *s, size_t n); /* the text as it is decoded; nonzero stops (a stop string) */
    void *ud;
    int max_new; /* 0: the session's ngen */
    /* each emitted token before its text goes to the sink (logprobs):
     * logits are the distribution it was drawn from before the sampling
     * filters (grammar mask applied), NULL for a token the grammar forced */
    void (*on_token)(void *ud, int id, const float *logits);
    /* out */
    int generated, cached;
    long forwards; /* decoding forwards of the main model */
    const char *why; /* "stop token", "NGEN", "CTX", "stop string", "interrupted", "grammar..." */
    int failed;    /* err says why */
    int fatal;     /* ... the model failed (a read error): nothing more can run */
    int client;    /* ... what the request asked for cannot be done (a grammar too ambiguous to follow) */
    char err[600];
} sess_io;

/* A turn's decoding settings, as plain values. */
typedef struct {
    smp_params sp;
    uint64_t seed;
    int ngen;          /* tokens per turn unless io->max_new says fewer */
    int grammar_batch; /* forced grammar tokens join the forward of the token before them */
    int grammar_draft; /* the grammar drafts, never masks */
} sess_params;

#define SESS_MAX_TAGS 24 /* tool-call tag tokens of every chat format (sess_tag_ids) */

/* The turn in progress (sess_begin .. sess_finish). */
typedef struct {
    size_t before;   /* ids [before..] are the turn's prompt */
    int np, ngen;    /* prompt length (the whole conversation so far); the turn's limit */
    int *gen, n;     /* generated ids */
    int fed;         /* generated tokens fed back (plain decoding) */
    int pf;          /* sess_prefill_rows: the next prompt position to compute */
    int pending;     /* a token sampled while verifying drafts, emitted next (-1: none) */
    int drafting;    /* grammar drafts */
    int mtp_follow;  /* the MTP part is ready for the prompt (spec_ready): its rows are queued as it is computed */
    int mtp_draft;   /* ... and the turn drafts with it (no grammar) */
    int mtp_started; /* spec_start ran */
    int *batch;      /* [ubatch] the rows of one forward */
    float *rows;     /* [ubatch][vocab] their logits (grammar drafts) */
    const float *lg; /* the next emitted token's distribution (on_token), NULL when forced */
    tok_stream st;
    tok_str out;
    sess_io *io;
    double t0, t1;   /* the turn's start; decoding's start */
    double ttft;     /* seconds from the turn's start to its first token */
} sess_turn;

typedef struct {
    coli_model *m;
    tok *t;
    sess_params p;
    tok_ids ids;
    int slot;    /* the KV slot its cache is in (model.h kv_select), 0 unless sess_use_slot says */
    int n_kv;    /* positions [0, n_kv) cached; ids beyond are fed next */
    int started; /* the first turn was rendered (or a state resumed): later turns are follow-ups */
    int spec;    /* drafting with the MTP head */
    spec_ctx sc;
    smp_work w;
    smp_rng rng;
    float *lg;   /* [vocab] the next token's logits (masked here, never in the model's scratch) */
    int max_rows; /* rows one step may ask a forward for (drafts, forced tokens): UBATCH unless sess_set_max_rows lowers it */
    /* grammar-constrained output: each turn's answer is one sentence of gram */
    const gr_grammar *gram;
    const gr_vocab *gv;
    int g_tools;                        /* gram is tool_choice's: the tool-call tag tokens may be sampled */
    int g_tag[SESS_MAX_TAGS], g_ntag;   /* the tag tokens in gv (special tokens), dropped from other grammars' masks */
    gr_state gst;
    gr_mask_ctx gcx;
    gr_tabcache *gtc;               /* where the tables of finished grammars wait for the next request with the same (serve), or NULL */
    uint8_t *allowed;
    long g_steps, g_forced, g_saved;
    double g_mask_s;
    int g_valid, g_n, g_end, g_one; /* the last mask, while the state is unchanged */
    int g_alive;                    /* drafting: the text so far is still a prefix of the grammar */
    int g_oom;                      /* a mask failed: 1 out of memory, 2 too ambiguous (gr_mask's -2) */
    gr_state gdraft;                /* drafting: the state the drafts are walked on */
    long d_proposed, d_accepted, d_verifies;
    sess_turn u;
    char note[300]; /* what the last call has to say (speculation turned off, ...), "" when nothing */
} sess;

/* Records why a turn failed. Returns -1. */
static inline int sess_fail(sess_io *io, int fatal, int client, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(io->err, sizeof io->err, fmt, ap);
    va_end(ap);
    io->failed = 1, io->fatal = fatal, io->client = client;
    return -1;
}

/* ------------------------------------------------------------ grammar */

/* The ids (below vocab) of the tool-call tags of every chat format (chat.h
 * chat_tool_tags) that are special tokens of t: a tool_choice grammar produces them and no
 * other grammar may. Writes at most SESS_MAX_TAGS to ids; returns the
 * count. */
static inline int sess_tag_ids(const tok *t, int vocab, int *ids) {
    const char *tags[SESS_MAX_TAGS];
    int nt = chat_tool_tags(-1, tags, SESS_MAX_TAGS), n = 0;
    for (int k = 0; k < nt && k < SESS_MAX_TAGS; k++) {
        int id = tok_find(t, tags[k]);
        if (id >= 0 && id < vocab && tok_is_special(t, id)) ids[n++] = id;
    }
    return n;
}

/* The vocabulary as a byte trie for grammar masks: every id below the
 * model's vocabulary with its tokenizer piece, special tokens left out
 * (a grammar never produces them; stop tokens are allowed separately)
 * except the tool-call tags (sess_mask_of_ drops them for other
 * grammars). 0, or -1 (out of memory). */
static inline int sess_vocab(const tok *t, int vocab, gr_vocab *v) {
    const char **b = (const char **)calloc((size_t)vocab, sizeof *b);
    size_t *l = (size_t *)calloc((size_t)vocab, sizeof *l);
    int rc = -1;
    if (b && l) {
        int tag[SESS_MAX_TAGS], nt = sess_tag_ids(t, vocab, tag);
        for (int i = 0; i < vocab && i < tok_n_ids(t); i++)
            if (!tok_is_special(t, i)) b[i] = tok_piece(t, i, &l[i]);
        for (int k = 0; k < nt; k++) b[tag[k]] = tok_piece(t, tag[k], &l[tag[k]]);
        rc = gr_vocab_build(v, vocab, b, l);
    }
    free(b), free(l);
    return rc;
}

/* Decodes without MTP drafts from now on. Returns whether they were on. */
static inline int sess_drafts_off(sess *s) {
    int on = s->spec;
    if (on) spec_free(&s->sc), s->spec = 0;
    return on;
}

/* The MTP part of the state for kv_persist into *k: k, or NULL without
 * drafts. */
static inline const kvp_mtp *sess_mtp_state(const sess *s, kvp_mtp *k) {
    *k = (kvp_mtp){s->sc.mtp_pos, s->sc.nq, s->sc.hq, s->sc.tq, s->sc.h_last};
    return s->spec ? k : NULL;
}

/* Uses gram (with the trie gv) for the answers from now on; tools: it is
 * tool_choice's grammar, which alone may produce the tool-call tags. NULL
 * stops constraining. Its turns decode without MTP drafts (they would need
 * masking too, and grammar drafts take the verifying forward; s->note
 * says so); the MTP cache still follows their prompts, and their decoded
 * rows where the forward gives hidden rows. 0, or -1 (out of memory). */
static inline int sess_grammar(sess *s, const gr_grammar *gram, const gr_vocab *gv, int tools) {
    if (s->gtc && s->gram) {
        gr_tables t = gr_mask_give(&s->gcx);
        gr_tabcache_put(s->gtc, &t);
    }
    gr_mask_ctx_free(&s->gcx);
    free(s->allowed), s->allowed = NULL;
    s->gram = gram, s->gv = gv, s->g_tools = tools;
    s->note[0] = 0;
    if (!gram) return 0;
    s->g_ntag = sess_tag_ids(s->t, gv->n_tokens, s->g_tag);
    if (s->spec) snprintf(s->note, sizeof s->note, "grammar-constrained output decodes without MTP drafts");
    if (!(s->allowed = (uint8_t *)malloc((size_t)gv->n_tokens + 1)) || gr_mask_ctx_init(&s->gcx, gv)) return -1;
    gr_tables t;
    if (s->gtc && gr_tabcache_take(s->gtc, gr_grammar_id(gram), &t)) gr_mask_take(&s->gcx, &t);
    return 0;
}

/* The mask of grammar state st into s->allowed: the count allowed, *end
 * whether the grammar may end, *one the token when exactly one is allowed. */
static inline int sess_mask_of_(sess *s, const gr_state *st, int *end, int *one) {
    double t0 = compat_now();
    int n = gr_mask(s->gram, st, s->gv, &s->gcx, s->allowed);
    if (n < 0) s->g_oom = n == -2 ? 2 : 1, n = 0; /* nothing allowed: the turn ends, saying why */
    for (int k = 0; k < s->g_ntag && !s->g_tools; k++) /* the tags are tool_choice's alone */
        if (s->allowed[s->g_tag[k]]) s->allowed[s->g_tag[k]] = 0, n--;
    *end = gr_can_end(st), *one = -1;
    for (int i = 0; i < s->gv->n_tokens && n == 1; i++)
        if (s->allowed[i]) *one = i;
    s->g_mask_s += compat_now() - t0, s->g_steps++;
    return n;
}

/* Masks s->lg by the grammar: tokens that cannot continue a valid parse
 * to -inf, stop tokens allowed only where the grammar may end. Returns the
 * number allowed; *forced is the one token when exactly one non-stop
 * token is allowed and the grammar may not end (else -1). */
static inline int sess_mask_(sess *s, int *forced) {
    const coli_config *c = &s->m->c;
    if (!s->g_valid) { /* the mask of this grammar state (kept until the next token is accepted) */
        s->g_n = sess_mask_of_(s, &s->gst, &s->g_end, &s->g_one);
        s->g_valid = 1;
    }
    for (int i = 0; i < c->vocab; i++)
        if (smp_is_stop(c->eos, c->n_eos, i) ? !s->g_end : !s->allowed[i]) s->lg[i] = -INFINITY;
    *forced = s->g_n == 1 && !s->g_end ? s->g_one : -1;
    return s->g_n + (s->g_end ? c->n_eos : 0);
}

/* Accepts token id's bytes into the grammar state. 0, or -1 when they
 * cannot continue it. */
static inline int sess_accept_(sess *s, int id) {
    size_t len;
    const char *pc = tok_piece(s->t, id, &len);
    s->g_valid = 0;
    return gr_accept(s->gram, &s->gst, (const uint8_t *)pc, pc ? len : 0);
}

/* ------------------------------------------------------------ lifetime */

static inline void sess_turn_free_(sess *s) {
    free(s->u.gen), free(s->u.batch), free(s->u.rows);
    tok_str_free(&s->u.out);
    memset(&s->u, 0, sizeof s->u);
}

static inline void sess_close(sess *s) {
    sess_grammar(s, NULL, NULL, 0);
    sess_turn_free_(s);
    gr_state_free(&s->gst);
    gr_state_free(&s->gdraft);
    spec_free(&s->sc);
    tok_ids_free(&s->ids);
    smp_work_free(&s->w);
    free(s->lg);
    memset(s, 0, sizeof *s);
}

/* Sets the decoding settings and reseeds the sampler. */
static inline void sess_set_params(sess *s, const sess_params *p) {
    s->p = *p;
    smp_seed(&s->rng, p->seed);
}

/* At most n (>= 1) rows per step from now on: a caller computing several
 * sessions in one forward bounds the logits it holds. Tokens do not
 * change: fewer grammar drafts are verified or forced tokens batched per
 * forward. */
static inline void sess_set_max_rows(sess *s, int n) {
    s->max_rows = n < 1 ? 1 : n < s->m->ubatch ? n : s->m->ubatch;
    if (s->spec) spec_cap_k(&s->sc, s->max_rows - 1);
}

/* Keeps the conversation's cache in KV slot `slot` from now on (its
 * cached positions are those of that slot: the caller moves or drops
 * them). 0, or -1 when the model has no such slot. */
static inline int sess_use_slot(sess *s, int slot) {
    if (slot < 0 || slot >= s->m->kv.slots) return -1;
    s->slot = slot;
    return 0;
}

/* The session's slot becomes the one single-sequence forwards and
 * kv_persist use. */
static inline void sess_select_(sess *s) { kv_select(&s->m->kv, s->slot); }

/* An empty conversation on m; drafts with the MTP head when mtp is on and
 * the model has one (spec). 0, or -1 (out of memory). s->note says why
 * drafting is off when it was asked for. */
static inline int sess_open(sess *s, coli_model *m, tok *t, const sess_params *p, int mtp, const spec_opts *spec) {
    memset(s, 0, sizeof *s);
    s->m = m, s->t = t, s->max_rows = m->ubatch;
    sess_set_params(s, p);
    s->spec = m->mtp && mtp;
    if (smp_work_alloc(&s->w, m->c.vocab) || !(s->lg = (float *)malloc((size_t)m->c.vocab * sizeof(float))) || (s->spec && spec_init(&s->sc, m, spec))) {
        sess_close(s);
        return -1;
    }
    if (s->spec && s->sc.k == 0) { /* UBATCH=1: a verifying forward has room for no draft */
        snprintf(s->note, sizeof s->note, "UBATCH=%d leaves no room for drafts (a verifying forward holds k+1 positions); decoding without speculation",
                 m->ubatch);
        sess_drafts_off(s);
    }
    return 0;
}

/* Replaces the conversation by a saved state (kv_persist.h) already
 * loaded into the model's cache: its ids, cached positions and MTP part.
 * 0, or -1 (out of memory). s->note says why drafting stopped, if it did. */
static inline int sess_resume(sess *s, const kvp_state *ks, const char *path) {
    s->note[0] = 0;
    s->ids.n = 0;
    if (tok_ids_append(&s->ids, ks->tok, (size_t)ks->n_tok)) return -1;
    s->n_kv = ks->n_kv, s->started = 1;
    if (s->spec && !ks->has_mtp) { /* the MTP part covers nothing: its turns decode without drafts (sess_sync may give up some positions) */
        snprintf(s->note, sizeof s->note, "%s holds no MTP drafting state (saved without drafts): decoding without speculation", path);
        spec_rewind(&s->sc, 0, 0);
    } else if (s->spec && spec_resume(&s->sc, ks)) {
        snprintf(s->note, sizeof s->note, "%s: out of memory restoring its MTP state (%d queued rows): decoding without speculation", path, ks->nq);
        sess_drafts_off(s);
    }
    return 0;
}

/* Replaces the conversation by the state saved at path. 0, 1 (no such
 * file), or -1 (refused, err says why; the cache may hold part of the
 * file, so the caller ends). */
static inline int sess_load(sess *s, const char *path, uint64_t fp, char *err, size_t errlen) {
    kvp_state ks;
    sess_select_(s);
    int r = kvp_load(s->m, path, fp, &ks, err, errlen);
    if (r) return r;
    r = sess_resume(s, &ks, path);
    kvp_state_free(&ks);
    if (r) snprintf(err, errlen, "out of memory");
    return r;
}

/* Saves the conversation (its ids, the cached positions, the MTP state)
 * to path. 0, or -1 (err says why). */
static inline int sess_save(sess *s, const char *path, uint64_t fp, char *err, size_t errlen) {
    kvp_mtp k;
    const kvp_mtp *mk = sess_mtp_state(s, &k);
    sess_select_(s);
    return kvp_save(s->m, path, fp, s->ids.ids, (int)s->ids.n, s->n_kv, mk, err, errlen);
}

/* Makes the conversation ids[0..n) (n > 0), keeping the cached positions
 * it shares with the current one, at most n-1 (the last id is fed again
 * for its logits). With MTP drafts, the MTP part keeps what it covers of
 * them; when that is fewer (a turn decoded without drafts: a grammar's,
 * or one resumed from a state saved without them), at most UBATCH
 * positions are given up so that the next turn drafts, else the turn
 * keeps them and decodes without drafts. Returns the positions reused,
 * or -1 (out of memory: the conversation is then empty). */
static inline int sess_sync(sess *s, const int *ids, int n) {
    int L = 0;
    s->note[0] = 0;
    while (L < (int)s->ids.n && L < n && s->ids.ids[L] == ids[L]) L++; /* the tokens shared */
    int p = L < s->n_kv ? L : s->n_kv;
    if (p > n - 1) p = n - 1;
    if (s->spec) {
        int keep = spec_rewind(&s->sc, p, L);
        if (p - keep <= s->m->ubatch && !s->sc.hopeless) p = keep; /* hopeless: DRAFT=-1 stopped drafting here, nothing to win back */
    }
    s->ids.n = 0;
    s->started = 1;
    if (tok_ids_append(&s->ids, ids, (size_t)n)) return s->n_kv = 0, -1;
    return s->n_kv = p;
}

/* ------------------------------------------------------------ a turn */

/* One generated token: a stop token ends the turn, anything else is
 * streamed; then the limits, and the safe point before the next forward.
 * Returns nonzero to stop (u->io->why, or failed). */
static inline int sess_emit_(void *ud, int next) {
    sess *s = (sess *)ud;
    sess_turn *u = &s->u;
    sess_io *io = u->io;
    coli_model *m = s->m;
    if (smp_is_stop(m->c.eos, m->c.n_eos, next)) { io->why = "stop token"; return 1; }
    if (io->stop && atomic_load(io->stop)) { io->why = "interrupted"; return 1; }
    u->gen[u->n++] = next;
    u->out.n = 0;
    if (io->on_token) io->on_token(io->ud, next, u->lg);
    u->lg = NULL;
    if (tok_stream_put(s->t, &u->st, next, &u->out)) return sess_fail(io, 0, 0, "out of memory decoding the text"), 1;
    if (u->out.n && io->sink && io->sink(io->ud, u->out.s, u->out.n)) { io->why = "stop string"; return 1; }
    tel_lap(&m->tel, TEL_SAMPLE);
    if (u->n >= u->ngen) { io->why = u->n == m->kv.ctx - u->np ? "CTX" : "NGEN"; return 1; }
    if (model_safe_point(m, u->n)) return sess_fail(io, 1, 0, "%s", m->err), 1;
    return 0;
}

/* Leaves the conversation as it was before the turn (a second call, or
 * one without a turn, changes nothing). */
static inline void sess_abort(sess *s) {
    if (s->u.io) s->ids.n = s->u.before;
    if (s->spec) spec_rewind(&s->sc, s->n_kv, (int)s->ids.n); /* what the turn queued after its own tokens goes */
    sess_turn_free_(s);
}

/* Starts a turn whose prompt is ids [before..] (ids before it were
 * already in the conversation): checks them against the vocabulary and
 * the context, fixes the limit (io->max_new, else the session's ngen, and
 * the context's room). Nothing is computed yet. 0, or -1 (io says why;
 * the conversation is as it was). */
static inline int sess_begin(sess *s, size_t before, sess_io *io) {
    coli_model *m = s->m;
    const coli_config *c = &m->c;
    sess_turn_free_(s);
    sess_turn *u = &s->u;
    u->before = before, u->io = io, u->pending = -1, u->pf = s->n_kv, u->t0 = compat_now();
    io->failed = io->fatal = io->client = 0, io->err[0] = 0, io->forwards = 0;
    io->generated = 0, io->cached = s->n_kv, io->why = NULL;
    m->err[0] = 0; /* model_fail's message, from here on, is this turn's */
    if (s->ids.n == before) return sess_abort(s), sess_fail(io, 0, 1, "the prompt is empty");
    for (size_t i = before; i < s->ids.n; i++)
        if (s->ids.ids[i] < 0 || s->ids.ids[i] >= c->vocab) {
            int bad = s->ids.ids[i];
            sess_abort(s);
            return sess_fail(io, 0, 1, "%s: token id %d is outside the model's vocabulary (%d)", s->t->name, bad, c->vocab);
        }
    int n = (int)s->ids.n;
    if (n >= m->kv.ctx) {
        int started = s->started;
        sess_abort(s);
        return sess_fail(io, 0, 1, "the %s has %d tokens but CTX is %d; raise CTX", started ? "conversation" : "prompt", n, m->kv.ctx);
    }
    s->started = 1;
    int limit = io->max_new > 0 ? io->max_new : s->p.ngen;
    u->ngen = limit < m->kv.ctx - n ? limit : m->kv.ctx - n;
    u->np = n;
    u->drafting = s->gram && s->p.grammar_draft; /* the grammar drafts; the model's tokens are kept as they are */
    if (s->spec && s->sc.hopeless == 2) sess_drafts_off(s); /* DRAFT=-1 found drafting cannot pay here: the MTP part's buffers go */
    u->mtp_follow = s->spec && spec_ready(&s->sc, u->pf);
    u->mtp_draft = u->mtp_follow && !s->gram;
    if (s->spec) spec_rearm(&s->sc), memset(&s->sc.st, 0, sizeof s->sc.st); /* the turn's own figures */
    if (!(u->gen = (int *)malloc((size_t)u->ngen * sizeof(int) + sizeof(int))) || !(u->batch = (int *)malloc((size_t)m->ubatch * sizeof(int))) ||
        (u->drafting && !(u->rows = (float *)malloc((size_t)s->max_rows * c->vocab * sizeof(float)))))
        return sess_abort(s), sess_fail(io, 0, 0, "out of memory");
    return 0;
}

/* After the prompt is computed: decoding starts (its clock) and the
 * grammar with it. 0, or -1 (io says why). */
static inline int sess_start_decoding_(sess *s) {
    sess_turn *u = &s->u;
    u->t1 = compat_now();
    if (!s->gram) return 0;
    gr_state_free(&s->gst);
    int gi = gr_init(s->gram, &s->gst);
    if (gi == -2) return sess_fail(u->io, 0, 1, "the grammar is too ambiguous to follow: it can start in more than %d ways", GR_MAX_STACKS);
    if (gi) return sess_fail(u->io, 0, 0, "out of memory starting the grammar");
    s->g_steps = s->g_forced = s->g_saved = 0, s->g_mask_s = 0, s->g_valid = 0, s->g_alive = 1, s->g_oom = 0;
    s->d_proposed = s->d_accepted = s->d_verifies = 0;
    return 0;
}

/* Computes the turn's ids not yet cached and starts the grammar. 0, or
 * -1 (io says why; the caller aborts). */
static inline int sess_prefill(sess *s) {
    coli_model *m = s->m;
    sess_turn *u = &s->u;
    tel_start(&m->tel, m->tel.prof); /* each turn's end line counts that turn */
    xs_stats_reset(&m->xs);
    io_stats_reset(&m->io);
    u->t0 = compat_now();
    sess_select_(s);
    int n = u->np, start = s->n_kv;
    if (u->mtp_follow ? spec_prefill(&s->sc, s->ids.ids, n, start) : fwd_tokens(m, s->ids.ids + start, n - start, start, NULL))
        return sess_fail(u->io, 1, 0, "%s", m->err);
    memcpy(s->lg, m->sc.logits, (size_t)m->c.vocab * sizeof(float));
    m->tel.t_prefill = compat_now() - u->t0;
    m->tel.prompt_tokens = n - start;
    return sess_start_decoding_(s);
}

/* In place of sess_prefill, for a caller that computes several sessions'
 * rows in one forward (fwd_rows): the next at most max rows of the turn's
 * prompt not yet computed, written to rows (the last prompt position's
 * logits wanted). Returns how many; after the forward, sess_prefilled. */
static inline int sess_prefill_rows(sess *s, int max, fwd_row *rows) {
    sess_turn *u = &s->u;
    int k = 0;
    for (; k < max && u->pf + k < u->np; k++) {
        int p = u->pf + k;
        rows[k] = (fwd_row){s->ids.ids[p], s->slot, p, p == u->np - 1};
    }
    u->pf += k;
    return k;
}

/* The last k rows sess_prefill_rows gave are computed: hid[k][dim] their
 * final-normed hidden rows (read with MTP drafts: the MTP head's rows are
 * queued), logits the last prompt position's when they end the prompt
 * (else NULL: more rows follow). Decoding starts after the last. 0, or -1
 * (io says why; the caller aborts). */
static inline int sess_prefilled(sess *s, int k, const float *hid, const float *logits) {
    sess_turn *u = &s->u;
    int p0 = u->pf - k;
    if (u->mtp_follow) {
        sess_select_(s); /* a full queue runs through the MTP layer of this slot */
        if (spec_rows(&s->sc, s->ids.ids + p0, u->np - p0, p0, k, hid)) return sess_fail(u->io, 1, 0, "%s", s->m->err);
    }
    if (!logits) return 0;
    memcpy(s->lg, logits, (size_t)s->m->c.vocab * sizeof(float));
    return sess_start_decoding_(s);
}

/* The next token from the session's logits: the grammar's forced one,
 * else a draw from them masked by the grammar. >= 0, or -1 when the
 * grammar allows nothing (io->why, or failed), -2 when the logits are not
 * finite. */
static inline int sess_choose_(sess *s) {
    sess_turn *u = &s->u;
    int forced = -1;
    if (s->gram && !u->drafting && !sess_mask_(s, &forced)) {
        u->io->why = gr_can_end(&s->gst) ? "grammar" : "grammar (no token can continue it)"; /* complete: nothing may follow */
        if (s->g_oom == 2)
            sess_fail(u->io, 0, 1, "the grammar is too ambiguous to follow: after %d tokens the text can continue in more than %d ways", u->n,
                      GR_MAX_STACKS);
        else if (s->g_oom)
            sess_fail(u->io, 0, 0, "out of memory computing the grammar's mask");
        return -1;
    }
    if (forced >= 0) return s->g_forced++, forced;
    u->lg = s->lg;
    int t = smp_sample(&s->p.sp, s->lg, s->m->c.vocab, &s->rng, &s->w);
    return t < 0 ? -2 : t;
}

/* Grammar drafts' proposal after next (already in batch[0]): the text the
 * grammar forces from here, tokenized as the tokenizer would. Returns the
 * rows in batch. */
static inline int sess_propose_grammar_(sess *s, int next) {
    sess_turn *u = &s->u;
    coli_model *m = s->m;
    int k = 0;
    u->batch[k++] = next;
    if (s->g_alive && sess_accept_(s, next)) s->g_alive = 0; /* the model left the grammar: no more drafts */
    if (!s->g_alive || gr_state_copy(&s->gdraft, &s->gst)) return k;
    char text[256];
    size_t tn = gr_forced_text(s->gram, &s->gdraft, text, sizeof text);
    tok_ids d = {0};
    if (tn && !tok_encode(s->t, text, tn, &d))
        for (size_t i = 0; i < d.n && k < s->max_rows && u->n + k - 1 < u->ngen; i++) {
            if (d.ids[i] < 0 || d.ids[i] >= m->c.vocab) break;
            u->batch[k++] = d.ids[i];
        }
    tok_ids_free(&d);
    return k;
}

/* Accepts against grammar drafts batch[1..k) with the forward's rows
 * (rows[i]: the logits after batch[i]): the model's own token at each row
 * is kept, the drafts it agrees with are emitted, the first it does not
 * becomes pending. Returns 1 when the turn is done, 0 to go on. */
static inline int sess_accept_drafts_(sess *s, int k, const float *rows) {
    sess_turn *u = &s->u;
    int V = s->m->c.vocab;
    s->d_proposed += k - 1, s->d_verifies++;
    u->fed++;
    for (int i = 0; i < k - 1; i++) {
        int t = smp_sample(&s->p.sp, rows + (size_t)i * V, V, &s->rng, &s->w);
        u->lg = rows + (size_t)i * V; /* the next token emitted is t, now or as pending */
        if (t != u->batch[i + 1]) { u->pending = t; return 0; }
        s->d_accepted++;
        if (sess_emit_(s, t)) return 1;
        u->fed++;
        if (s->g_alive && sess_accept_(s, t)) s->g_alive = 0;
    }
    memcpy(s->lg, rows + (size_t)(k - 1) * V, (size_t)V * sizeof(float));
    return 0;
}

/* Forced grammar tokens after next (GRAMMAR_BATCH): each is emitted now
 * and joins the forward of next. Returns the rows in batch (*stop set
 * when the turn ends after their forward), or -1 when next itself cannot
 * continue the grammar (io->why; no forward). */
static inline int sess_propose_forced_(sess *s, int next, int *stop) {
    sess_turn *u = &s->u;
    int k = 0, forced;
    *stop = 0;
    if (sess_accept_(s, next)) return u->io->why = "grammar (no token can continue it)", -1;
    u->batch[k++] = next;
    while (s->p.grammar_batch && k < s->max_rows && u->n < u->ngen) {
        if (!sess_mask_(s, &forced) || forced < 0) break;
        s->g_forced++;
        if ((*stop = sess_emit_(s, forced))) break;
        if (sess_accept_(s, forced)) { u->io->why = "grammar (no token can continue it)", *stop = 1; break; }
        u->batch[k++] = forced;
    }
    return k;
}

/* What a step asks the forward for: k rows (s->u.batch) at positions
 * p0.., of one sequence; all: every row's logits are wanted (drafts to
 * verify), else only the last row's; done: the turn ends after they are
 * computed (k may be 0: nothing to compute). */
typedef struct {
    int k, p0, all, done;
    int mtp; /* the rows verify MTP drafts: sess_absorb needs their hidden rows too */
} sess_rows;

/* sess_emit_ for spec.h: the verifying row's logits go with the token. */
static inline int sess_emit_row_(void *ud, int next, const float *logits) {
    ((sess *)ud)->u.lg = logits;
    return sess_emit_(ud, next);
}

/* An MTP round's first half (spec_propose in the session's slot): the
 * token to feed and its drafts become the rows. 0, or -1 (io says why). */
static inline int sess_plan_mtp_(sess *s, sess_rows *r) {
    sess_turn *u = &s->u;
    int k;
    sess_select_(s);
    if (spec_propose(&s->sc, u->ngen - u->n, &s->p.sp, &s->rng, &s->w, u->batch, &k, &r->done)) return sess_fail(u->io, 1, 0, "%s", s->m->err);
    if (r->done) return 0;
    r->k = k + 1, r->p0 = s->sc.pos, r->all = 1, r->mtp = 1;
    return 0;
}

/* The first half of a step: the next token (pending from the last
 * verification, forced, or drawn from s->lg) emitted, then the proposer's
 * rows after it (grammar drafts, forced grammar tokens); with MTP drafts,
 * after the turn's first token, the token to feed and its drafts.
 * 0 (compute r's rows, then sess_absorb), or -1 (failed: io says why). */
static inline int sess_plan(sess *s, sess_rows *r) {
    sess_turn *u = &s->u;
    sess_io *io = u->io;
    memset(r, 0, sizeof *r);
    if (u->mtp_started) return sess_plan_mtp_(s, r);
    int next = u->pending;
    u->pending = -1;
    if (next < 0) {
        next = sess_choose_(s);
        if (next == -1) return io->failed ? -1 : (r->done = 1, 0);
    }
    if (!u->n) s->m->tel.ttft = u->ttft = compat_now() - u->t0;
    if (next < 0) return sess_fail(io, 0, 0, "the logits are not finite (NaN or infinity); stopping");
    if (sess_emit_(s, next)) return io->failed ? -1 : (r->done = 1, 0);
    r->p0 = u->np + u->n - 1; /* the position of next */
    if (u->mtp_draft) { /* the first token is the plain draw; MTP rounds from here */
        spec_start(&s->sc, next, u->np);
        u->mtp_started = 1;
        return sess_plan_mtp_(s, r);
    }
    r->k = 1, u->batch[0] = next;
    if (u->drafting) r->k = sess_propose_grammar_(s, next), r->all = r->k > 1;
    else if (s->gram && (r->k = sess_propose_forced_(s, next, &r->done)) < 0) /* the rows run even when the turn ends: the cache covers what was emitted */
        return io->failed ? -1 : (r->k = 0, r->done = 1, 0);
    return io->failed ? -1 : 0;
}

/* The second half: the rows of r computed (logits: [k][vocab] when
 * r->all, else the last row's [vocab]; hid: their final-normed hidden
 * rows [k][dim], read when r->mtp) are accepted. Returns 0 to go on, 1
 * when the turn is done (io->why), -1 when it failed. */
static inline int sess_absorb(sess *s, const sess_rows *r, const float *logits, const float *hid) {
    sess_turn *u = &s->u;
    u->io->forwards++;
    int done = r->done;
    if (r->mtp) {
        int e = spec_settle(&s->sc, u->batch, r->k - 1, logits, hid, u->ngen - u->n, &s->p.sp, &s->rng, &s->w, sess_emit_row_, s, &done);
        if (e < 0 && !u->io->failed) sess_fail(u->io, 1, 0, "%s", s->m->err);
        return u->io->failed ? -1 : done;
    }
    if (u->mtp_follow) { /* a turn without MTP drafts keeps the MTP part in step where the forward gave hidden rows */
        if (hid && !r->all) {
            sess_select_(s);
            if (spec_rows(&s->sc, u->batch, r->k, r->p0, r->k, hid)) return sess_fail(u->io, 1, 0, "%s", s->m->err);
        } else
            u->mtp_follow = 0;
    }
    if (r->all) done |= sess_accept_drafts_(s, r->k, logits);
    else {
        memcpy(s->lg, logits, (size_t)s->m->c.vocab * sizeof(float));
        u->fed += r->k, s->g_saved += r->k - 1;
    }
    return u->io->failed ? -1 : done;
}

/* The rows of a planned step (sess_plan) for fwd_rows, written to rows:
 * r->k of them in s's slot, logits wanted where sess_absorb reads them. */
static inline void sess_plan_rows(const sess *s, const sess_rows *r, fwd_row *rows) {
    for (int i = 0; i < r->k; i++) rows[i] = (fwd_row){s->u.batch[i], s->slot, r->p0 + i, r->all || i == r->k - 1};
}

/* One propose → verify → accept round: sess_plan, one forward of the
 * main model over its rows (with MTP drafts, a verifying forward: every
 * row as a one-row forward, hidden rows kept), sess_absorb. Returns 0 to
 * go on, 1 when the turn is done (io->why), -1 when it failed (io says
 * why; the caller aborts). */
static inline int sess_step(sess *s) {
    sess_turn *u = &s->u;
    sess_io *io = u->io;
    coli_model *m = s->m;
    sess_rows r;
    if (sess_plan(s, &r)) return -1;
    if (!r.k) return r.done;
    sess_select_(s);
    if (r.mtp) {
        if (fwd_verify(m, u->batch, r.k, r.p0, s->sc.vlog, s->sc.vhid)) return sess_fail(io, 1, 0, "%s", m->err);
        return sess_absorb(s, &r, s->sc.vlog, s->sc.vhid);
    }
    if (fwd_tokens(m, u->batch, r.k, r.p0, r.all ? u->rows : NULL)) return sess_fail(io, 1, 0, "%s", m->err);
    return sess_absorb(s, &r, r.all ? u->rows : m->sc.logits, NULL);
}

/* Ends a turn that did not fail: the text the decoder still held goes to
 * the sink, the generated ids join the conversation and the cache covers
 * what was fed. 0, or -1 (out of memory: io says so; the caller aborts). */
static inline int sess_finish(sess *s) {
    sess_turn *u = &s->u;
    sess_io *io = u->io;
    coli_model *m = s->m;
    if (!io->why) io->why = "NGEN";
    u->out.n = 0;
    tok_stream_flush(&u->st, 0, &u->out);
    if (u->out.n && io->sink) io->sink(io->ud, u->out.s, u->out.n);
    m->tel.t_decode = compat_now() - u->t1;
    m->tel.gen_tokens = u->n;
    if (tok_ids_append(&s->ids, u->gen, (size_t)u->n)) return sess_fail(io, 0, 0, "out of memory");
    if (u->mtp_draft) { /* drafted, or ended at the first token: the MTP part is in step */
        s->n_kv = s->sc.pos;
        if (spec_end_turn(&s->sc) && !s->sc.hopeless) sess_drafts_off(s); /* hopeless: the figures stay for the end line (sess_begin frees) */
    } else
        s->n_kv = u->np + u->fed;
    io->generated = u->n;
    return 0;
}

#endif
