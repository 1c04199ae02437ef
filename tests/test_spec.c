/* test_spec.c — speculative decoding with the MTP head (spec.h) on the
 * committed MTP fixture: greedy output is token-identical to plain decoding
 * for every draft count, with drafts that the test forces to agree or not
 * (so every acceptance length and rollback occurs); after a generation full
 * of rejections, the KV caches (main and MTP) and the next logits equal a
 * fresh one-token-at-a-time recomputation of the same sequence bit for bit;
 * sampled output equals plain sampling's token for token (seeds, k and
 * filters), and the same test fails when every draft is kept; the
 * acceptance guard pauses and re-arms; DRAFT=-1 follows the costs a seam
 * gives it (stops, drafts 4, measures again). */
#define COLI_NO_MAIN
#include "../colibri.c"

#include "check.h"

static const char *FIXM = "tests/fixtures/tiny-glm5-mtp";

static coli_opts opts(int ubatch, int absorb) {
    coli_opts o;
    memset(&o, 0, sizeof o);
    o.ctx = 256, o.ubatch = ubatch, o.absorb = absorb, o.mtp = 1;
    o.pin = PIN_OFF, o.pin_gb = -1, o.quiet = 1;
    o.io.mode = IO_SYNC, o.io.workers = 2, o.io.weight[0] = 1;
    return o;
}

static int load(coli_model *m, coli_opts o) {
    if (model_open(m, FIXM) || model_setup(m, &o, NULL)) {
        fprintf(stderr, "load: %s\n", m->err);
        return -1;
    }
    return 0;
}

/* Prompt of the fixture's reference. */
static int prompt(const coli_model *m, int *ids, int max) {
    coli_ref r;
    char err[300];
    if (ref_load(&r, FIXM, m->c.vocab, err, sizeof err)) return fprintf(stderr, "ref: %s\n", err), -1;
    int n = r.np < max ? r.np : max;
    memcpy(ids, r.prompt, (size_t)n * sizeof(int));
    ref_free(&r);
    return n;
}

typedef struct {
    int *tok, n, max;
} sink;

static int sink_put(void *ud, int t, const float *logits) {
    (void)logits;
    sink *s = (sink *)ud;
    s->tok[s->n++] = t;
    return s->n >= s->max;
}

/* Plain greedy/sampled decoding of n tokens after prompt ids[0..np). */
static int plain_gen(coli_model *m, const int *ids, int np, int n, const smp_params *sp, uint64_t seed, int *out) {
    smp_work w;
    smp_rng r;
    smp_work_alloc(&w, m->c.vocab);
    smp_seed(&r, seed);
    int rc = fwd_tokens(m, ids, np, 0, NULL);
    for (int i = 0; !rc && i < n; i++) {
        out[i] = smp_sample(sp, m->sc.logits, m->c.vocab, &r, &w);
        if (i + 1 < n) rc = fwd_tokens(m, &out[i], 1, np + i, NULL);
    }
    smp_work_free(&w);
    return rc;
}

/* Speculative decoding of up to n tokens (the first from the prefill's
 * logits), the sink stopping it after `stop` (<= n) as a stop token
 * would; the generator's state after it to *after when given. */
static int spec_gen_stop(spec_ctx *s, const int *ids, int np, int n, int stop, const smp_params *sp, uint64_t seed, int *out, smp_rng *after) {
    smp_work w;
    smp_rng r;
    smp_work_alloc(&w, s->m->c.vocab);
    smp_seed(&r, seed);
    sink k = {out, 0, stop};
    int rc = spec_prefill(s, ids, np, 0);
    if (!rc) {
        int x = smp_sample(sp, s->m->sc.logits, s->m->c.vocab, &r, &w);
        if (!sink_put(&k, x, NULL)) rc = spec_decode(s, x, np, n - 1, sp, &r, &w, sink_put, &k);
    }
    smp_work_free(&w);
    if (after) *after = r;
    return rc ? rc : k.n == stop ? 0 : -1;
}

/* Speculative decoding of n tokens. */
static int spec_gen(spec_ctx *s, const int *ids, int np, int n, const smp_params *sp, uint64_t seed, int *out) {
    return spec_gen_stop(s, ids, np, n, n, sp, seed, out, NULL);
}

/* ---------------------------------------------------- greedy identity */

static const int *hook_ref; /* the plain greedy continuation, indexed from the prompt's end */
static int hook_np;

/* Proposes the right token except at a pseudo-random fifth of the
 * positions (never past the reference), so that no, some and all drafts of
 * a verify are kept. */
static int hook_mix(void *ud, int pos, int j, int tok) {
    (void)ud;
    int at = pos + j + 1 - hook_np; /* index in the continuation of draft j's token */
    if (at < 0 || at >= 60) return tok;
    return ((unsigned)(pos + j) * 2654435761u >> 11) % 5 == 0 ? (hook_ref[at] + 1) % 97 : hook_ref[at];
}

/* Always a wrong token. */
static int hook_wrong(void *ud, int pos, int j, int tok) {
    (void)ud;
    int at = pos + j + 1 - hook_np;
    return at >= 0 && at < 60 ? (hook_ref[at] + 1) % 97 : tok;
}

static void test_greedy_identity(void) {
    static coli_model m;
    if (load(&m, opts(512, -1))) { CHECK(0); return; }
    CHECK(m.mtp == 1);
    int ids[64], np = prompt(&m, ids, 64), ref[60], out[60];
    smp_params greedy = {0, 0, 1, 0};
    CHECK(np > 0 && plain_gen(&m, ids, np, 60, &greedy, 1, ref) == 0);
    hook_ref = ref, hook_np = np;
    for (int k = 1; k <= 4; k++)
        for (int hooked = 0; hooked < 2; hooked++) {
            spec_ctx s;
            spec_opts so = {k, 0, 24, 256};
            CHECK(spec_init(&s, &m, &so) == 0);
            if (k == 1 && !hooked) { /* the memory plan counts what spec_init holds (and a session's three vocab rows) */
                size_t V = (size_t)s.vocab, D = (size_t)s.dim, K1 = SPEC_MAX_K + 1, held = (K1 * V + K1 * D + V + D + 2 * (size_t)s.cap * D) * 4 +
                                                                                                (size_t)s.cap * sizeof(int);
                CHECK(model_seq_bytes(&m.c, m.sc.max_s, 1) == held + 3 * V * 4 && model_seq_bytes(&m.c, m.sc.max_s, 0) == 3 * V * 4);
            }
            if (hooked) s.draft_hook = hook_mix;
            CHECK(spec_gen(&s, ids, np, 60, &greedy, 1, out) == 0);
            CHECK(!memcmp(out, ref, sizeof ref));
            if (hooked) { /* forced agreement: drafts were kept, and some rejected */
                CHECK(s.st.accepted > 0 && s.st.accepted < s.st.drafted);
                int mid = 0;
                for (int a = 1; a < k; a++) mid += s.st.hist[a] > 0;
                CHECK(s.st.hist[0] > 0 && s.st.hist[k] > 0 && (k == 1 || mid > 0)); /* none, some and all kept */
            }
            spec_free(&s);
        }
    model_free(&m);
}

/* Small UBATCH: prompts of every length across chunk boundaries, so that
 * the MTP queue is flushed after the last prefill chunk too (the MTP head's
 * logits must never replace the main model's the first token is sampled
 * from). */
static void test_small_ubatch(void) {
    smp_params greedy = {0, 0, 1, 0};
    for (int u = 2; u <= 5; u += 3) {
        static coli_model m;
        if (load(&m, opts(u, -1))) { CHECK(0); return; }
        int ids[64], full = prompt(&m, ids, 64);
        for (int np = 1; np <= 13 && np <= full; np++) {
            int ref[8], out[8];
            spec_ctx s;
            spec_opts so = {u - 1, 0, 24, 256};
            CHECK(plain_gen(&m, ids, np, 8, &greedy, 1, ref) == 0);
            CHECK(spec_init(&s, &m, &so) == 0 && s.k == u - 1);
            CHECK(spec_gen(&s, ids, np, 8, &greedy, 1, out) == 0);
            if (memcmp(out, ref, sizeof ref)) fprintf(stderr, "UBATCH=%d, %d-token prompt: other tokens than plain decoding\n", u, np);
            CHECK(!memcmp(out, ref, sizeof ref));
            spec_free(&s);
        }
        model_free(&m);
    }
}

/* ------------------------------------------------------------ rollback */

static double kv_diff(const coli_model *a, const coli_model *b, int layer, int n) {
    const coli_config *c = &a->c;
    double mx = 0;
    const float *la = (const float *)(void *)kv_lat(&a->kv, 0, layer), *lb = (const float *)(void *)kv_lat(&b->kv, 0, layer); /* f32 caches */
    const float *ra = (const float *)(void *)kv_rope(&a->kv, 0, layer), *rb = (const float *)(void *)kv_rope(&b->kv, 0, layer);
    for (size_t i = 0; i < (size_t)n * c->kv_lora; i++) mx = fmax(mx, fabs(la[i] - lb[i]));
    for (size_t i = 0; i < (size_t)n * c->qk_rope; i++) mx = fmax(mx, fabs(ra[i] - rb[i]));
    if (c->idx_full[layer]) {
        const float *ia = (const float *)(void *)kv_ikey(&a->kv, 0, layer), *ib = (const float *)(void *)kv_ikey(&b->kv, 0, layer);
        for (size_t i = 0; i < (size_t)n * c->index_dim; i++) mx = fmax(mx, fabs(ia[i] - ib[i]));
    }
    return mx;
}

static void test_rollback(void) {
    static coli_model a, b;
    if (load(&a, opts(512, 1)) || load(&b, opts(1, 1))) { CHECK(0); return; }
    int ids[256], np = prompt(&a, ids, 64), ref[60], out[60];
    smp_params greedy = {0, 0, 1, 0};
    CHECK(plain_gen(&a, ids, np, 60, &greedy, 1, ref) == 0);
    hook_ref = ref, hook_np = np;
    spec_ctx s, t;
    spec_opts so = {4, 0, 24, 256};
    CHECK(spec_init(&s, &a, &so) == 0 && spec_init(&t, &b, &so) == 0);
    s.draft_hook = hook_mix;
    CHECK(spec_gen(&s, ids, np, 60, &greedy, 1, out) == 0);
    CHECK(spec_flush(&s) == 0);
    int L = np + 60 - 1; /* positions in a's main cache: the last token was never fed */
    memcpy(ids + np, out, 59 * sizeof(int));
    CHECK(spec_prefill(&t, ids, L, 0) == 0 && spec_flush(&t) == 0);
    for (int l = 0; l < a.c.n_layers; l++) CHECK(kv_diff(&a, &b, l, L) == 0);
    int nm = s.mtp_pos < t.mtp_pos ? s.mtp_pos : t.mtp_pos;
    CHECK(nm >= L - 2);
    CHECK(kv_diff(&a, &b, a.c.n_layers, nm) == 0); /* the MTP layer's verified entries */
    int last = out[59];
    CHECK(fwd_tokens(&a, &last, 1, L, NULL) == 0 && fwd_tokens(&b, &last, 1, L, NULL) == 0);
    CHECK(!memcmp(a.sc.logits, b.sc.logits, (size_t)a.c.vocab * 4));
    spec_free(&s);
    spec_free(&t);
    model_free(&a);
    model_free(&b);
}

/* ----------------------------------------------------- sampled identity */

/* Sampled output with drafts equals sampling without them, token for
 * token, for each seed, k and filter: the main model's token at each
 * position is drawn under the key plain sampling takes for it, and the
 * drafts under the same keys (the coupling keeps some and rejects some);
 * a run its sink stops partway leaves the generator where plain sampling
 * of as many tokens leaves it.
 * Keeping every draft instead (the accept_all seam) gives other tokens:
 * the comparison can fail. */
static void test_sampling_identity(void) {
    static coli_model m;
    coli_opts o = opts(512, -1);
    o.threads = 1;
    if (load(&m, o)) { CHECK(0); return; }
    int ids[64], np = prompt(&m, ids, 12), ref[40], out[40];
    smp_params sps[] = {{1.0f, 0, 1.0f, 0.0f}, {0.7f, 40, 0.9f, 0.05f}};
    long drafted = 0, accepted = 0;
    int differs = 0, same = 1;
    for (int c = 0; c < 2; c++)
        for (int seed = 1; seed <= 6; seed++) {
            CHECK(plain_gen(&m, ids, np, 40, &sps[c], (uint64_t)seed, ref) == 0);
            for (int k = -1; k <= 3; k++) {
                if (!k) continue;
                spec_ctx s;
                spec_opts so = {k, 0, 8, 256};
                CHECK(spec_init(&s, &m, &so) == 0);
                CHECK(spec_gen(&s, ids, np, 40, &sps[c], (uint64_t)seed, out) == 0);
                same &= !memcmp(out, ref, sizeof ref);
                drafted += s.st.drafted, accepted += s.st.accepted;
                spec_free(&s);
            }
            spec_ctx s;
            spec_opts so = {2, 0, 8, 256};
            CHECK(spec_init(&s, &m, &so) == 0);
            /* stopped by the sink (a stop token) partway: the generator has
             * advanced by the tokens emitted, as plain sampling's has */
            int stop = 1 + (seed * 7) % 39;
            smp_rng after, want;
            smp_seed(&want, (uint64_t)seed);
            for (int i = 0; i < stop; i++) smp_next(&want);
            s.mtp_pos = 0, s.nq = 0, s.hpos = -1;
            CHECK(spec_gen_stop(&s, ids, np, 40, stop, &sps[c], (uint64_t)seed, out, &after) == 0);
            same &= !memcmp(out, ref, (size_t)stop * sizeof(int)) && !memcmp(&after, &want, sizeof want);
            s.mtp_pos = 0, s.nq = 0, s.hpos = -1;
            s.accept_all = 1;
            CHECK(spec_gen(&s, ids, np, 40, &sps[c], (uint64_t)seed, out) == 0);
            differs += memcmp(out, ref, sizeof ref) != 0;
            spec_free(&s);
        }
    printf("spec sampling: identical to plain sampling for 12 seeds x 4 k; %ld of %ld drafts kept; keeping every draft changed %d of 12\n",
           accepted, drafted, differs);
    CHECK(same);
    CHECK(accepted > 0 && accepted < drafted);
    CHECK(differs > 0);
    model_free(&m);
}

/* ------------------------------------------------------------ the guard */

/* Loads the fixture, its 64-token prompt and the plain greedy
 * continuation ref[60] the hooks read. 0, or -1 (checked). */
static int greedy_setup(coli_model *m, int *ids, int *np, int *ref) {
    if (load(m, opts(512, -1))) { CHECK(0); return -1; }
    smp_params greedy = {0, 0, 1, 0};
    *np = prompt(m, ids, 64);
    CHECK(plain_gen(m, ids, *np, 60, &greedy, 1, ref) == 0);
    hook_ref = ref, hook_np = *np;
    return 0;
}

static void test_guard(void) {
    static coli_model m;
    int ids[64], np, ref[60], out[60];
    smp_params greedy = {0, 0, 1, 0};
    if (greedy_setup(&m, ids, &np, ref)) return;
    spec_ctx s;
    spec_opts so = {2, 50, 4, 10}; /* 4-draft windows, pause 10 tokens below 50% */
    CHECK(spec_init(&s, &m, &so) == 0);
    s.draft_hook = hook_wrong;
    CHECK(spec_gen(&s, ids, np, 60, &greedy, 1, out) == 0);
    CHECK(!memcmp(out, ref, sizeof ref));
    CHECK(s.st.accepted == 0);
    /* each trip: 2 verifies of 2 drafts, then 10 tokens without: it re-armed every time */
    CHECK(s.st.pauses >= 3 && s.st.drafted >= 4 * s.st.pauses);
    CHECK(s.st.verifies == 59);
    spec_free(&s);
    /* DRAFT=-1: k follows the acceptance of each window */
    spec_opts au = {-1, 10, 4, 10};
    CHECK(spec_init(&s, &m, &au) == 0);
    CHECK(s.k == 1 && s.probe == SPEC_PROBE);
    s.draft_hook = hook_mix;
    CHECK(spec_gen(&s, ids, np, 60, &greedy, 1, out) == 0);
    CHECK(!memcmp(out, ref, sizeof ref));
    CHECK(s.k >= 0 && s.k <= 4); /* by the clock: test_auto_cost checks the choice */
    spec_free(&s);
    model_free(&m);
}

/* ------------------------------------------------- DRAFT=-1 by cost */

/* A round's cost through the seam: rows that cost as much as a forward
 * (a small model, compute-bound), and rows almost free (a large one whose
 * forward is its weight reads). */
static double cost_compute(void *ud, int k) { (void)ud; return 1.0 + 1.2 * k; }
static double cost_memory(void *ud, int k) { (void)ud; return 1.0 + 0.05 * k; }
static double cost_some(void *ud, int k) { (void)ud; return 1.0 + 0.3 * k; }

/* With drafts right four times in five (hook_mix), DRAFT=-1 measures the
 * cost without drafts, then of a verify with a blind draft (x again), then
 * drafts one token a round: when rows cost a forward each it stops after
 * the blind rounds, before the MTP layer ran (no acceptance could pay:
 * for the run), when they are almost free it settles at 4 (or
 * near it) after its first window and measures the cost without drafts
 * again (every 6 rounds), when they cost a little and the drafts are
 * always wrong (hook_wrong) it stops for this conversation only (a rewind
 * to another continuation ends that); a first turn too short to measure
 * the costs leaves them to the next; the tokens are the same every time. */
static void test_auto_cost(void) {
    static coli_model m;
    int ids[64], np, ref[60], out[60];
    smp_params greedy = {0, 0, 1, 0};
    if (greedy_setup(&m, ids, &np, ref)) return;
    for (int c = 0; c < 6; c++) {
        spec_ctx s;
        spec_opts so = {-1, 0, 8, 256};
        CHECK(spec_init(&s, &m, &so) == 0);
        s.draft_hook = c == 4 ? hook_wrong : hook_mix;
        s.cost_hook = c == 4 ? cost_some : c & 1 ? cost_memory : cost_compute;
        if (c == 2 || c == 3) s.every = 6;
        if (c == 5) { /* a first turn that ends before its costs are measured: the next turn measures them */
            CHECK(spec_gen(&s, ids, np, 3, &greedy, 1, out) == 0);
            spec_rewind(&s, 0, 0);
            spec_rearm(&s);
            CHECK(s.probe == SPEC_PROBE && s.blind == SPEC_BLIND);
        }
        CHECK(spec_gen(&s, ids, np, 60, &greedy, 1, out) == 0);
        CHECK(!memcmp(out, ref, sizeof ref));
        printf("DRAFT=-1, case %d: k %d, stopped %d at the end; rounds by k: %ld %ld %ld %ld %ld\n", c, s.k, s.hopeless, s.st.by_k[0], s.st.by_k[1],
               s.st.by_k[2], s.st.by_k[3], s.st.by_k[4]);
        CHECK(s.st.by_k[0] >= SPEC_PROBE && s.st.by_k[1] > 0); /* the probe without drafts, then k = 1 */
        if (c == 0 || c == 2) /* the blind rounds' verify alone costs 2.2 forwards: stopped before the MTP layer ran */
            CHECK(s.k == 0 && s.hopeless == 2 && s.st.by_k[1] == SPEC_BLIND && !s.st.drafted && !s.st.mtp_forwards && !s.st.by_k[2] && !s.st.by_k[4]);
        if (c == 1 || c == 5) CHECK(s.k >= 3 && s.st.by_k[4] > 0 && !s.hopeless);
        if (c == 3) CHECK(s.k >= 3 && s.st.by_k[0] > SPEC_PROBE && s.st.by_k[4] > 0 && s.every >= 12 && !s.hopeless); /* measured again, confirmed */
        if (c == 4) { /* no draft kept: stopped after the first window, for this conversation */
            CHECK(s.k == 0 && s.hopeless == 1 && s.st.drafted == 8 && s.st.by_k[1] == SPEC_BLIND + 8 && s.st.stop_alpha == 0);
            CHECK(!spec_ready(&s, 60 + np));
            CHECK(spec_rewind(&s, np + 60, np + 61) < np + 60 && s.hopeless == 1); /* the same conversation, on: still stopped */
            spec_rearm(&s);
            CHECK(s.hopeless == 1 && s.k == 0);
            CHECK(spec_rewind(&s, np, np + 1) == np && !s.hopeless); /* back to the prompt (another answer): in step, drafting again */
            spec_rearm(&s);
            CHECK(s.k == 1);
        }
        spec_free(&s);
    }
    model_free(&m);
}

int main(void) {
    (void)coli_main;
    struct stat st;
    if (stat(FIXM, &st)) {
        SKIP("mtp", "%s is missing", FIXM);
        return check_report("test_spec");
    }
    double t0 = compat_now();
    test_greedy_identity();
    double t1 = compat_now();
    test_small_ubatch();
    test_rollback();
    double t2 = compat_now();
    if (getenv("COLI_EMULATED")) /* 60 sampled generations: tens of seconds under qemu */
        SKIP("emulated", "the sampled identity is the same C on every architecture (xtokens.py compares sampled tokens across them); the native build runs it");
    else
        test_sampling_identity();
    double t3 = compat_now();
    test_guard();
    test_auto_cost();
    printf("times: %.1f %.1f %.1f %.1f\n", t1 - t0, t2 - t1, t3 - t2, compat_now() - t3);
    return check_report("test_spec");
}
