/* test_session.c — the session module (session.h) on the committed
 * fixtures: a turn's steps give the transformers reference's greedy tokens
 * (ref.json) with each proposer that can run greedy — plain, MTP drafts at
 * k = 1, 2 and auto — on models with and without an indexer; sess_sync
 * keeps exactly the shared cached prefix and what follows is bit for bit
 * what a session computing everything computes, with MTP drafts too (the
 * MTP cache follows the rewind); several sessions drafting with the MTP
 * head and decoded together in one forward per step (sess_plan, fwd_rows,
 * sess_absorb) give each, greedy and sampled, the tokens it gives alone;
 * a state saved and loaded
 * through the session continues as the session that never stopped; forced
 * grammar tokens batched into one forward give the tokens of masking them
 * one by one; the model's scratch logits are never left masked; a turn
 * refused at sess_begin leaves the conversation as it was. */
#define COLI_NO_MAIN
#include "../colibri.c"

#include "check.h"

static const char *FIX5 = "tests/fixtures/tiny-glm5", *FIXM = "tests/fixtures/tiny-glm5-mtp", *FIXD = "tests/fixtures/tiny-dsv3";

static int load_slots(coli_model *m, const char *dir, int slots) {
    coli_opts o;
    memset(&o, 0, sizeof o);
    o.ctx = 256, o.ubatch = 16, o.absorb = -1, o.mtp = 1, o.slots = slots;
    o.pin = PIN_OFF, o.pin_gb = -1, o.quiet = 1;
    o.io.mode = IO_SYNC, o.io.workers = 2, o.io.weight[0] = 1;
    if (model_open(m, dir) || model_setup(m, &o, NULL)) {
        fprintf(stderr, "load %s: %s\n", dir, m->err);
        return -1;
    }
    m->c.n_eos = 0; /* the reference's greedy run does not stop at them either */
    return 0;
}

static int load(coli_model *m, const char *dir) { return load_slots(m, dir, 1); }

/* m loaded from dir with its tokenizer in *t. 0, or -1 (a failed check;
 * nothing is left to free). */
static int open_fixture(coli_model *m, const char *dir, tok **t) {
    char err[600];
    *t = NULL;
    if (load(m, dir)) { CHECK(0); return -1; }
    *t = load_tokenizer(dir, err, sizeof err);
    CHECK(*t != NULL);
    if (!*t) { model_free(m); return -1; }
    return 0;
}

static sess_params greedy(int ngen) {
    sess_params p;
    memset(&p, 0, sizeof p);
    p.sp.top_p = 1, p.seed = 1, p.ngen = ngen;
    return p;
}

/* Runs a turn on s whose prompt is ids[before..]: *lg gets the logits
 * after the prefill (when lg is given), out the generated ids. Returns
 * how many, or -1 (the turn failed). */
static int turn(sess *s, size_t before, float *lg, int *out, int max) {
    sess_io io;
    memset(&io, 0, sizeof io);
    io.max_new = max;
    if (sess_begin(s, before, &io) || sess_prefill(s)) {
        fprintf(stderr, "turn: %s\n", io.err);
        sess_abort(s);
        return -1;
    }
    if (lg) memcpy(lg, s->lg, (size_t)s->m->c.vocab * sizeof(float));
    int r;
    while (!(r = sess_step(s))) {}
    if (r < 0 || sess_finish(s)) {
        fprintf(stderr, "turn: %s\n", io.err);
        sess_abort(s);
        return -1;
    }
    int n = io.generated;
    memcpy(out, s->u.gen, (size_t)n * sizeof(int));
    return n;
}

/* Each greedy proposer through sess_step gives the reference's tokens. */
static void test_reference(const char *dir, int mtp_k) {
    static coli_model m;
    char err[600];
    if (load(&m, dir)) { CHECK(0); return; }
    tok *t = load_tokenizer(dir, err, sizeof err);
    coli_ref r;
    CHECK(t && !ref_load(&r, dir, m.c.vocab, err, sizeof err));
    if (!t) { model_free(&m); return; }
    sess s;
    sess_params p = greedy(r.ng);
    spec_opts so = {mtp_k, 0, 16, 0};
    CHECK(sess_open(&s, &m, t, &p, mtp_k != 0, &so) == 0);
    CHECK(s.spec == (m.mtp && mtp_k != 0));
    CHECK(sess_sync(&s, r.prompt, r.np) == 0);
    int out[256];
    int n = turn(&s, 0, NULL, out, r.ng);
    CHECK(n == r.ng && !memcmp(out, r.greedy, (size_t)r.ng * sizeof(int)));
    if (s.spec) CHECK(s.sc.st.verifies > 0 && s.sc.st.verifies < r.ng); /* drafts were kept */
    CHECK((int)s.ids.n == r.np + r.ng && !memcmp(s.ids.ids + r.np, r.greedy, (size_t)r.ng * sizeof(int)));
    sess_close(&s);
    ref_free(&r);
    tok_free(t);
    model_free(&m);
}

/* sess_sync keeps the shared cached prefix; the turn after it equals a
 * session that computes the whole sequence, logits bit for bit. */
static void test_sync(void) {
    static coli_model m;
    tok *t;
    if (open_fixture(&m, FIX5, &t)) return;
    int V = m.c.vocab, a[40], b[40], out[16], outa[16], outb[16];
    CHECK(V <= 4096);
    for (int i = 0; i < 40; i++) a[i] = (i * 37 + 11) % V, b[i] = i < 23 ? a[i] : (i * 61 + 3) % V;
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
    sess s;
    sess_params p = greedy(8);
    CHECK(sess_open(&s, &m, t, &p, 0, &(spec_opts){0}) == 0);
    CHECK(sess_sync(&s, a, 30) == 0 && turn(&s, 0, NULL, out, 8) == 8);
    CHECK(s.n_kv == 37); /* 30 + 8 generated, the last not fed */
    CHECK(sess_sync(&s, b, 40) == 23);               /* the shared prefix */
    CHECK(turn(&s, 23, la, outa, 8) == 8);
    CHECK(sess_sync(&s, s.ids.ids, (int)s.ids.n) == (int)s.ids.n - 1); /* the same ids: all but the last */
    sess_close(&s);
    CHECK(sess_open(&s, &m, t, &p, 0, &(spec_opts){0}) == 0);
    CHECK(sess_sync(&s, b, 40) == 0 && turn(&s, 0, lb, outb, 8) == 8); /* everything computed */
    CHECK(!memcmp(la, lb, (size_t)V * 4) && !memcmp(outa, outb, 8 * sizeof(int)));
    sess_close(&s);
    /* MTP drafting follows a rewind: sync keeps what the MTP cache covers,
     * and the sampled turn after it, drafts and all, is a fresh session's */
    static coli_model mm;
    if (load(&mm, FIXM)) { CHECK(0); }
    else {
        spec_opts so = {2, 0, 16, 0};
        sess_params ps = greedy(12);
        ps.sp.temp = 0.8f, ps.seed = 5;
        CHECK(sess_open(&s, &mm, t, &ps, 1, &so) == 0 && s.spec);
        CHECK(sess_sync(&s, a, 30) == 0 && turn(&s, 0, NULL, out, 8) == 8 && s.spec);
        int n = (int)s.ids.n;
        memcpy(b, s.ids.ids, (size_t)n * sizeof(int));
        CHECK(sess_sync(&s, b, n) == s.n_kv && s.spec && !s.note[0]); /* continuing: nothing rewinds */
        for (int i = 20; i < 30; i++) b[i] = (i * 53 + 9) % V;
        int kept = sess_sync(&s, b, 30);
        CHECK(kept > 10 && kept <= 20 && s.spec && !s.note[0]);
        sess_set_params(&s, &ps);
        CHECK(turn(&s, (size_t)kept, la, outa, 12) == 12 && s.sc.st.drafted > 0);
        int ms = s.sc.mtp_pos;
        size_t mb = (size_t)ms * mm.c.kv_lora * 4;
        float *snap = malloc(mb + 4);
        memcpy(snap, kv_lat(&mm.kv, 0, mm.c.n_layers), mb); /* the MTP layer's cache: no entry may pair a row with the old conversation's token */
        sess f;
        CHECK(sess_open(&f, &mm, t, &ps, 1, &so) == 0 && sess_sync(&f, b, 30) == 0 && turn(&f, 0, lb, outb, 12) == 12);
        CHECK(!memcmp(la, lb, (size_t)mm.c.vocab * 4) && !memcmp(outa, outb, 12 * sizeof(int)));
        CHECK(f.sc.st.drafted == s.sc.st.drafted && f.sc.st.accepted == s.sc.st.accepted);
        CHECK(f.sc.mtp_pos == ms && !memcmp(snap, kv_lat(&mm.kv, 0, mm.c.n_layers), mb));
        free(snap);
        sess_close(&f);
        /* a grammar's turn decodes without drafts, the MTP part following
         * its prompt alone; the next turn gives up the positions it lacks
         * (fewer than UBATCH) and drafts, as a fresh session does */
        char gerr[300];
        const char *gtext = "root ::= [a-z ]+\n";
        gr_grammar *g = gr_parse(gtext, strlen(gtext), "root", gerr, sizeof gerr);
        gr_vocab gv;
        memset(&gv, 0, sizeof gv);
        CHECK(g && sess_vocab(t, mm.c.vocab, &gv) == 0 && sess_grammar(&s, g, &gv, 0) == 0);
        size_t before = s.ids.n;
        int np = (int)before + 4, c[64];
        for (int i = 0; i < 4; i++) tok_ids_append(&s.ids, &(int){(i * 71 + 5) % V}, 1);
        CHECK(turn(&s, before, NULL, out, 6) > 0 && !s.u.mtp_draft && s.sc.st.drafted == 0);
        sess_grammar(&s, NULL, NULL, 0);
        int nc = (int)s.ids.n + 3;
        memcpy(c, s.ids.ids, s.ids.n * sizeof(int));
        for (int i = (int)s.ids.n; i < nc; i++) c[i] = (i * 19 + 2) % V;
        CHECK(sess_sync(&s, c, nc) == np); /* the grammar's prompt: its last hidden row is at hand */
        sess_set_params(&s, &ps);
        CHECK(turn(&s, (size_t)np, la, outa, 12) == 12 && s.u.mtp_draft && s.sc.st.drafted > 0);
        CHECK(sess_open(&f, &mm, t, &ps, 1, &so) == 0 && sess_sync(&f, c, nc) == 0 && turn(&f, 0, lb, outb, 12) == 12);
        CHECK(!memcmp(la, lb, (size_t)mm.c.vocab * 4) && !memcmp(outa, outb, 12 * sizeof(int)));
        sess_close(&f);
        sess_close(&s);
        gr_vocab_free(&gv);
        gr_free(g);
        model_free(&mm);
    }
    free(la), free(lb);
    tok_free(t);
    model_free(&m);
}

/* A state saved by one session and loaded by another (a second model)
 * continues bit for bit, with MTP drafts. */
static void test_save_load(void) {
    static coli_model a, b;
    char err[600], path[256];
    snprintf(path, sizeof path, "%s/colibri-test-session-%ld.coli_kv", access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm", (long)getpid());
    if (load(&a, FIXM) || load(&b, FIXM)) { CHECK(0); return; }
    tok *t = load_tokenizer(FIXM, err, sizeof err);
    CHECK(t != NULL);
    if (!t) { model_free(&a), model_free(&b); return; }
    int V = a.c.vocab, ids[64], outa[16], outb[16];
    for (int i = 0; i < 20; i++) ids[i] = (i * 29 + 7) % V;
    uint64_t fp = kvp_fingerprint(&a, FIXM);
    spec_opts so = {2, 0, 16, 0};
    sess_params p = greedy(10);
    sess sa, sb;
    CHECK(sess_open(&sa, &a, t, &p, 1, &so) == 0 && sess_open(&sb, &b, t, &p, 1, &so) == 0);
    CHECK(sess_sync(&sa, ids, 20) == 0 && turn(&sa, 0, NULL, outa, 10) == 10);
    CHECK(sess_save(&sa, path, fp, err, sizeof err) == 0);
    CHECK(sess_load(&sb, path, fp, err, sizeof err) == 0 && sb.spec && !sb.note[0]);
    CHECK(sb.ids.n == sa.ids.n && sb.n_kv == sa.n_kv && !memcmp(sb.ids.ids, sa.ids.ids, sa.ids.n * sizeof(int)));
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
    for (sess *s = &sa; s; s = s == &sa ? &sb : NULL) { /* the same follow-up on both */
        size_t before = s->ids.n;
        for (int i = 0; i < 6; i++) tok_ids_append(&s->ids, &(int){(i * 41 + 13) % V}, 1);
        CHECK(turn(s, before, s == &sa ? la : lb, s == &sa ? outa : outb, 10) == 10);
    }
    CHECK(!memcmp(la, lb, (size_t)V * 4) && !memcmp(outa, outb, 10 * sizeof(int)));
    /* a state saved without drafts: a drafting session resumes it without
     * drafts; sess_sync keeps its 29 positions rather than give up more
     * than UBATCH (16) of them, and gives up a short one's to draft */
    for (int len = 20; len >= 4; len -= 16) {
        sess plain;
        CHECK(sess_open(&plain, &a, t, &p, 0, &so) == 0 && !plain.spec && sess_sync(&plain, ids, len) == 0 && turn(&plain, 0, NULL, outa, 10) == 10);
        CHECK(sess_save(&plain, path, fp, err, sizeof err) == 0);
        int n = (int)plain.ids.n;
        memcpy(ids, plain.ids.ids, (size_t)n * sizeof(int));
        for (int i = 0; i < 3; i++) ids[n + i] = (i * 23 + 1) % V;
        CHECK(sess_sync(&plain, ids, n + 3) == plain.n_kv && turn(&plain, (size_t)plain.n_kv, NULL, outa, 6) == 6);
        CHECK(sess_load(&sb, path, fp, err, sizeof err) == 0 && sb.spec && strstr(sb.note, "holds no MTP"));
        int kept = sess_sync(&sb, ids, n + 3);
        CHECK(len == 20 ? kept == n - 1 : kept == 0);
        CHECK(turn(&sb, (size_t)kept, NULL, outb, 6) == 6 && sb.u.mtp_draft == (len != 20) && !memcmp(outa, outb, 6 * sizeof(int)));
        sess_close(&plain);
    }
    CHECK(sess_load(&sb, "/nonexistent/x.coli_kv", fp, err, sizeof err) == 1);
    unlink(path);
    free(la), free(lb);
    sess_close(&sa), sess_close(&sb);
    tok_free(t);
    model_free(&a), model_free(&b);
}

/* A grammar with forced runs: batching them into one forward
 * (grammar_batch) gives the tokens of masking them one at a time, sampled
 * with the same seed, in fewer forwards; the model's logits are never
 * left masked; a turn refused at sess_begin leaves the ids as they were. */
static void test_grammar(void) {
    static coli_model m;
    char err[600];
    tok *t;
    if (open_fixture(&m, FIX5, &t)) return;
    const char *text = "root ::= \"{\\\"name\\\": \\\"\" [a-z]+ \"\\\", \\\"kind\\\": \\\"\" (\"alpha\" | \"beta\") \"\\\"}\"\n";
    gr_grammar *g = gr_parse(text, strlen(text), "root", err, sizeof err);
    gr_vocab gv;
    memset(&gv, 0, sizeof gv);
    CHECK(g && sess_vocab(t, m.c.vocab, &gv) == 0);
    if (!g) { tok_free(t), model_free(&m); return; }
    int ids[8] = {5, 17, 29, 41, 53, 65, 77, 89}, out[2][64], n[2];
    long fw[2];
    for (int batch = 0; batch < 2; batch++) {
        sess s;
        sess_params p = greedy(48);
        p.sp.temp = 0.9f, p.seed = 2, p.grammar_batch = batch; /* a seed whose draws close the object within 48 tokens (about a third do) */
        CHECK(sess_open(&s, &m, t, &p, 0, &(spec_opts){0}) == 0 && sess_grammar(&s, g, &gv, 0) == 0);
        CHECK(sess_sync(&s, ids, 8) == 0);
        sess_io io;
        memset(&io, 0, sizeof io);
        CHECK(sess_begin(&s, 0, &io) == 0 && sess_prefill(&s) == 0);
        int r;
        while (!(r = sess_step(&s))) {}
        CHECK(r == 1 && sess_finish(&s) == 0 && !strcmp(io.why, "grammar"));
        n[batch] = io.generated, fw[batch] = io.forwards;
        memcpy(out[batch], s.u.gen, (size_t)io.generated * sizeof(int));
        int masked = 0;
        for (int i = 0; i < m.c.vocab; i++) masked += !isfinite(m.sc.logits[i]);
        CHECK(masked == 0);
        /* refused: past CTX; the conversation keeps its ids */
        size_t had = s.ids.n;
        for (int i = 0; i < 300; i++) tok_ids_append(&s.ids, &(int){7}, 1);
        CHECK(sess_begin(&s, had, &io) == -1 && io.client && s.ids.n == had);
        sess_close(&s);
    }
    CHECK(n[0] == n[1] && !memcmp(out[0], out[1], (size_t)n[0] * sizeof(int)));
    CHECK(fw[1] < fw[0]);
    gr_vocab_free(&gv);
    gr_free(g);
    tok_free(t);
    model_free(&m);
}

/* Sessions drafting with the MTP head, decoded together: each step one
 * fwd_rows over every session's planned rows (a prompt chunk of at most 7
 * rows, or a token and its drafts), as serve mode runs them; each session
 * gives exactly the tokens, drafting counts and cache of the same session
 * decoded alone with sess_step. Greedy and sampled with a seed. */
static void test_batched_drafts(void) {
    enum { NS = 3, NG = 14 };
    static coli_model m;
    tok *t;
    char err[600];
    if (load_slots(&m, FIXM, NS)) { CHECK(0); return; }
    if (!(t = load_tokenizer(FIXM, err, sizeof err))) { CHECK(0); model_free(&m); return; }
    m.absorb = 1; /* a prompt chunk alone (sess_prefill) takes the path its rows take in fwd_rows */
    int V = m.c.vocab, D = m.c.dim, ids[NS][40], len[NS] = {9, 23, 16}, alone[NS][NG], both[NS][NG];
    long acc[NS];
    spec_opts so = {2, 0, 8, 0}; /* a fixed k: DRAFT=-1's choice follows the clock, so its counts could differ */
    /* session 1 answers under a grammar: no drafts, the MTP part following its rows */
    char gerr[300];
    const char *gtext = "root ::= [a-z ]+\n";
    gr_grammar *g = gr_parse(gtext, strlen(gtext), "root", gerr, sizeof gerr);
    gr_vocab gv;
    memset(&gv, 0, sizeof gv);
    CHECK(g && sess_vocab(t, V, &gv) == 0);
    sess s[NS];
    sess_io io[NS];
    sess_params p[NS];
    for (int q = 0; q < NS; q++) {
        p[q] = greedy(NG);
        if (q != 1) p[q].sp.temp = 0.9f, p[q].seed = 40 + (uint64_t)q;
        for (int i = 0; i < len[q]; i++) ids[q][i] = (i * (13 + 4 * q) + 7 * q + 1) % V;
        CHECK(sess_open(&s[q], &m, t, &p[q], 1, &so) == 0 && sess_use_slot(&s[q], q) == 0);
        sess_set_max_rows(&s[q], 5);
        if (q == 1) CHECK(sess_grammar(&s[q], g, &gv, 0) == 0);
        CHECK(sess_sync(&s[q], ids[q], len[q]) == 0 && turn(&s[q], 0, NULL, alone[q], NG) == NG);
        acc[q] = s[q].sc.st.accepted;
        CHECK((s[q].sc.st.drafted > 0) == (q != 1));
        sess_close(&s[q]);
    }
    fwd_row rows[NS * 8];
    float *lg = malloc((size_t)NS * 8 * V * 4), *hid = malloc((size_t)NS * 8 * D * 4);
    sess_rows r[NS];
    int at[NS], wat[NS], nr[NS], phase[NS], live = NS;
    for (int q = 0; q < NS; q++) {
        memset(&io[q], 0, sizeof io[q]);
        io[q].max_new = NG;
        CHECK(sess_open(&s[q], &m, t, &p[q], 1, &so) == 0 && sess_use_slot(&s[q], q) == 0);
        sess_set_max_rows(&s[q], 5);
        if (q == 1) CHECK(sess_grammar(&s[q], g, &gv, 0) == 0);
        CHECK(sess_sync(&s[q], ids[q], len[q]) == 0 && sess_begin(&s[q], 0, &io[q]) == 0);
        phase[q] = 0; /* 0 prefill, 1 decode, 2 done */
    }
    for (int step = 0; live && step < 200; step++) {
        int n = 0, w = 0;
        for (int q = 0; q < NS; q++) {
            nr[q] = 0;
            if (phase[q] == 1) {
                CHECK(sess_plan(&s[q], &r[q]) == 0);
                if (!r[q].k) { phase[q] = 2, live--; continue; }
                sess_plan_rows(&s[q], &r[q], rows + n);
                nr[q] = r[q].k, at[q] = n, wat[q] = w, n += r[q].k, w += r[q].all ? r[q].k : 1;
            } else if (phase[q] == 0) {
                nr[q] = sess_prefill_rows(&s[q], 7, rows + n);
                at[q] = n, wat[q] = w, n += nr[q], w += s[q].u.pf == s[q].u.np;
            }
        }
        if (!n) continue;
        CHECK(fwd_rows(&m, rows, n, lg, hid) == 0);
        for (int q = 0; q < NS; q++) {
            if (!nr[q]) continue;
            const float *l = lg + (size_t)wat[q] * V, *h = hid + (size_t)at[q] * D;
            if (phase[q] == 0) {
                int last = s[q].u.pf == s[q].u.np;
                CHECK(sess_prefilled(&s[q], nr[q], h, last ? l : NULL) == 0);
                if (last) phase[q] = 1;
            } else {
                int e = sess_absorb(&s[q], &r[q], l, h);
                CHECK(e >= 0);
                if (e) phase[q] = 2, live--;
            }
        }
    }
    for (int q = 0; q < NS; q++) {
        CHECK(phase[q] == 2 && sess_finish(&s[q]) == 0 && io[q].generated == NG);
        memcpy(both[q], s[q].u.gen, sizeof both[q]);
        CHECK(!memcmp(both[q], alone[q], sizeof both[q]) && s[q].sc.st.accepted == acc[q]);
    }
    /* the grammar's turn left the MTP part in step, its cache as a fresh
     * session's prefill of the same tokens computes it, bit for bit */
    sess *gs = &s[1];
    int nk = gs->n_kv;
    CHECK(gs->sc.mtp_pos + gs->sc.nq == nk - 1 && gs->sc.hpos == nk - 1);
    sess_select_(gs);
    CHECK(spec_flush(&gs->sc) == 0 && gs->sc.mtp_pos == nk - 1);
    sess_close(&s[0]);
    sess f;
    sess_io fio;
    memset(&fio, 0, sizeof fio);
    CHECK(sess_open(&f, &m, t, &p[1], 1, &so) == 0 && sess_sync(&f, gs->ids.ids, nk) == 0 && sess_begin(&f, 0, &fio) == 0 && sess_prefill(&f) == 0);
    sess_select_(&f);
    CHECK(spec_flush(&f.sc) == 0 && f.sc.mtp_pos == nk - 1);
    CHECK(!memcmp(kv_lat(&m.kv, 0, m.c.n_layers), kv_lat(&m.kv, 1, m.c.n_layers), (size_t)(nk - 1) * m.c.kv_lora * 4));
    sess_abort(&f);
    sess_close(&f);
    for (int q = 1; q < NS; q++) sess_close(&s[q]);
    gr_vocab_free(&gv);
    gr_free(g);
    free(lg), free(hid);
    tok_free(t);
    model_free(&m);
}

/* A round's cost through spec.h's seam: each row a forward (a small,
 * compute-bound model), or a little. */
static double cost_rows(void *ud, int k) { (void)ud; return 1.0 + 1.2 * k; }
static double cost_little(void *ud, int k) { (void)ud; return 1.0 + 0.3 * k; }
static int draft_wrong(void *ud, int pos, int j, int tok) { (void)ud, (void)pos, (void)j; return tok ^ 1; }

/* DRAFT=-1 stopping: the next turn of the conversation reuses its whole
 * cache (no positions given up to bring the MTP part back in step), and
 * after a stop for the run the session decodes without the MTP part;
 * the tokens are those of a session without drafts. */
static void test_auto_stop(void) {
    static coli_model m;
    tok *t;
    if (open_fixture(&m, FIXM, &t)) return;
    int ids[60], out[2][24], want[2][24];
    for (int i = 0; i < 20; i++) ids[i] = (i * 11 + 3) % m.c.vocab;
    for (int c = 0; c < 2; c++) { /* 0: stopped for the run (rows cost a forward); 1: for the conversation (drafts always wrong) */
        sess s, plain;
        sess_params p = greedy(24);
        spec_opts au = {-1, 0, 8, 256};
        CHECK(sess_open(&s, &m, t, &p, 1, &au) == 0 && sess_open(&plain, &m, t, &p, 0, &(spec_opts){0}) == 0);
        s.sc.cost_hook = c ? cost_little : cost_rows;
        if (c) s.sc.draft_hook = draft_wrong;
        CHECK(sess_sync(&s, ids, 20) == 0 && turn(&s, 0, NULL, out[0], 24) == 24);
        CHECK(s.sc.hopeless == 2 - c && s.spec);
        int n = 20 + 24;
        memcpy(ids + 20, out[0], 24 * sizeof(int));
        for (int i = n; i < n + 4; i++) ids[i] = (i * 7 + 1) % m.c.vocab;
        int kept = s.n_kv;
        CHECK(kept > 20 && sess_sync(&s, ids, n + 4) == kept); /* all of it, though the MTP part covers less */
        CHECK(turn(&s, (size_t)n, NULL, out[1], 24) == 24);
        CHECK(s.spec == c); /* after a stop for the run, no MTP part */
        sess_select_(&plain);
        CHECK(sess_sync(&plain, ids, 20) == 0 && turn(&plain, 0, NULL, want[0], 24) == 24);
        CHECK(sess_sync(&plain, ids, n + 4) > 20 && turn(&plain, (size_t)n, NULL, want[1], 24) == 24);
        CHECK(!memcmp(out, want, sizeof out));
        sess_close(&s), sess_close(&plain);
    }
    tok_free(t);
    model_free(&m);
}

int main(void) {
    (void)coli_main;
    test_reference(FIX5, 0);
    test_reference(FIXD, 0);
    test_reference(FIXM, 0);
    test_reference(FIXM, 1);
    test_reference(FIXM, 2);
    test_reference(FIXM, -1);
    test_sync();
    test_batched_drafts();
    test_save_load();
    test_grammar();
    test_auto_stop();
    return check_report("test_session");
}
