/* test_batch.c — several sequences in one forward (forward.h's fwd_rows
 * over model.h's KV slots) on the committed fixtures, one with the DSA
 * indexer and an MTP layer (tiny-glm5-mtp, index_topk 5), one without an
 * indexer (tiny-dsv3, deepseek_v3), deepseek_v32's (tiny-dsv32) and one
 * quantized (tiny-q8, the integer path): batched forwards whose rows mix prefill chunks and single decode
 * rows of up to four sequences in any slot order, at positions well past
 * index_topk, give bit for bit the logits, hidden rows and KV rows (latent,
 * rope key, indexer key of every layer) of one-row forwards of each
 * sequence alone in slot 0, for THREADS=1 and 3 on either side, absorbed,
 * reconstructed and automatic MLA; only the wanted rows' logits come back,
 * in order; a sequence decoded alone in slot k (main model and MTP layer)
 * equals its decoding in slot 0; a slot saved to a KV file loads into
 * another slot and continues exactly; bad batches are refused by name.
 * Built with the GPU (build/cuda-host's stand-in, build/cuda): slot 0's
 * passes on the GPU's latent cache and mixed passes on the CPU agree. */
#define COLI_NO_MAIN
#include "../colibri.c"

#include "check.h"

#define NSEQ 4
#define LEN 23 /* positions per sequence: past every fixture's index_topk (5, 6) */

static coli_opts opts(int threads, int absorb, int slots, int ubatch) {
    coli_opts o;
    memset(&o, 0, sizeof o);
    o.ctx = 64, o.ubatch = ubatch, o.absorb = absorb, o.mtp = 1, o.threads = threads, o.slots = slots;
    o.pin = PIN_OFF, o.pin_gb = -1, o.quiet = 1, o.idot = 1, o.simd = -1;
    o.io.mode = IO_SYNC, o.io.workers = 2, o.io.weight[0] = 1;
    return o;
}

static int load(coli_model *m, const char *dir, coli_opts o) {
    if (model_open(m, dir) || model_setup(m, &o, NULL)) {
        fprintf(stderr, "load %s: %s\n", dir, m->err);
        return -1;
    }
    return 0;
}

/* Token i of sequence q: distinct sequences over the vocabulary. */
static int tok_of(const coli_model *m, int q, int i) { return (i * (17 + 6 * q) + 5 * q + 3) % m->c.vocab; }

/* The same with the KV cache's rows in kvq.h's formats. */
static coli_opts opts_kv(coli_opts o, int bits, int ibits) {
    o.kv_bits = bits, o.kv_index_bits = ibits;
    return o;
}

/* One-row forwards of each sequence alone in slot 0: the logits and
 * hidden rows of every position, and the KV rows of every main layer, in
 * the cache's formats (lat, rope: [NSEQ][layers][LEN] rows; ikey:
 * [NSEQ][layers][LEN] rows). */
typedef struct {
    float *logits, *hid;
    uint8_t *lat, *rope, *ikey;
} one_run;

static size_t ref_lat(const coli_model *m, int q, int l) { return (((size_t)q * m->c.n_layers + l) * LEN) * m->kv.lrb; }
static size_t ref_rope(const coli_model *m, int q, int l) { return (((size_t)q * m->c.n_layers + l) * LEN) * m->kv.rrb; }
static size_t ref_ikey(const coli_model *m, int q, int l) { return (((size_t)q * m->c.n_layers + l) * LEN) * m->kv.irb; }

static int one_make(coli_model *m, one_run *r) {
    const coli_config *c = &m->c;
    size_t nl = (size_t)c->n_layers;
    r->logits = malloc((size_t)NSEQ * LEN * c->vocab * 4), r->hid = malloc((size_t)NSEQ * LEN * c->dim * 4);
    r->lat = malloc(NSEQ * nl * LEN * m->kv.lrb), r->rope = malloc(NSEQ * nl * LEN * m->kv.rrb);
    r->ikey = calloc(NSEQ * nl * LEN * (m->kv.irb ? m->kv.irb : 1), 1);
    for (int q = 0; q < NSEQ; q++) {
        for (int i = 0; i < LEN; i++) {
            int t = tok_of(m, q, i);
            if (fwd_run(m, &t, 1, i, r->logits + ((size_t)q * LEN + i) * c->vocab, r->hid + ((size_t)q * LEN + i) * c->dim, 0)) return -1;
        }
        for (int l = 0; l < c->n_layers; l++) {
            memcpy(r->lat + ref_lat(m, q, l), kv_lat(&m->kv, 0, l), (size_t)LEN * m->kv.lrb);
            memcpy(r->rope + ref_rope(m, q, l), kv_rope(&m->kv, 0, l), (size_t)LEN * m->kv.rrb);
            if (c->idx_full[l]) memcpy(r->ikey + ref_ikey(m, q, l), kv_ikey(&m->kv, 0, l), (size_t)LEN * m->kv.irb);
        }
    }
    return 0;
}

static void one_free(one_run *r) { free(r->logits), free(r->hid), free(r->lat), free(r->rope), free(r->ikey); }

/* Sequence q's KV rows [0, n) in slot s of m equal the reference's. */
static int kv_equal(const coli_model *m, const one_run *r, int q, int s, int n) {
    const coli_config *c = &m->c;
    int ok = 1;
    for (int l = 0; l < c->n_layers; l++) {
        ok &= !memcmp(kv_lat(&m->kv, s, l), r->lat + ref_lat(m, q, l), (size_t)n * m->kv.lrb);
        ok &= !memcmp(kv_rope(&m->kv, s, l), r->rope + ref_rope(m, q, l), (size_t)n * m->kv.rrb);
        if (c->idx_full[l]) ok &= !memcmp(kv_ikey(&m->kv, s, l), r->ikey + ref_ikey(m, q, l), (size_t)n * m->kv.irb);
    }
    return ok;
}

/* A small deterministic generator for the batch schedules. */
static uint32_t rnd(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

/* Runs the NSEQ sequences through batched forwards in model b (sequence q
 * in slot slot_of[q]): a first step of `first` positions of every
 * sequence when first > 0 (NSEQ·first rows: past the tiny fixtures'
 * absorbed/reconstructed crossover of about 48 rows, so a batch choosing
 * its path by its size would differ), then each step takes a random subset of the unfinished
 * sequences in a random order, each with a chunk of 1 to 6 positions (so
 * prefill chunks and single decode rows share forwards), every row's
 * logits and hidden row wanted but those of rows the step's mask drops.
 * Checks every returned row against the reference; *steps counts forwards. */
static void batched(coli_model *b, const one_run *r, const int *slot_of, uint32_t seed, int first, int *steps) {
    const coli_config *c = &b->c;
    int done[NSEQ] = {0}, left = NSEQ;
    fwd_row rows[NSEQ * LEN];
    int qof[NSEQ * LEN];
    float *out = malloc((size_t)NSEQ * LEN * c->vocab * 4), *hid = malloc((size_t)NSEQ * LEN * c->dim * 4);
    uint32_t st = seed;
    int bad_logits = 0, bad_hid = 0;
    *steps = 0;
    while (left) {
        int order[NSEQ], n = 0;
        for (int q = 0; q < NSEQ; q++) order[q] = q;
        for (int q = NSEQ - 1; q > 0; q--) {
            int j = (int)(rnd(&st) % (uint32_t)(q + 1)), t = order[q];
            order[q] = order[j], order[j] = t;
        }
        for (int k = 0; k < NSEQ; k++) {
            int q = order[k];
            int all = first > 0 && !*steps;
            if (done[q] >= LEN || (!all && rnd(&st) % 4 == 0 && n)) continue; /* some sequences sit a step out */
            int len = all ? first : 1 + (int)(rnd(&st) % 6);
            if (len > LEN - done[q]) len = LEN - done[q];
            for (int i = 0; i < len; i++, n++) {
                rows[n] = (fwd_row){tok_of(b, q, done[q] + i), slot_of[q], done[q] + i, rnd(&st) % 5 != 0};
                qof[n] = q;
            }
            done[q] += len;
            left -= done[q] == LEN;
        }
        if (fwd_rows(b, rows, n, out, hid)) {
            fprintf(stderr, "fwd_rows: %s\n", b->err);
            CHECK(0);
            break;
        }
        ++*steps;
        for (int i = 0, w = 0; i < n; i++) {
            size_t at = (size_t)qof[i] * LEN + rows[i].pos;
            bad_hid += memcmp(hid + (size_t)i * c->dim, r->hid + at * c->dim, (size_t)c->dim * 4) != 0;
            if (rows[i].logits) bad_logits += memcmp(out + (size_t)w++ * c->vocab, r->logits + at * c->vocab, (size_t)c->vocab * 4) != 0;
        }
    }
    CHECK(bad_logits == 0);
    CHECK(bad_hid == 0);
    for (int q = 0; q < NSEQ; q++) CHECK(kv_equal(b, r, q, slot_of[q], LEN));
    free(out), free(hid);
}

/* Batched forwards against one-row forwards on fixture dir, over thread
 * counts, attention paths and KV formats (the last two: 8- and 4-bit rows;
 * the reconstructed path at UBATCH=5 expands the keys in tiles of
 * n_heads·5 rows, fewer than LEN, where the reference takes them in one). */
static void test_batched(const char *dir) {
    static const int slot_of[][NSEQ] = {{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 0, 3, 1}};
    struct { int ref_threads, threads, absorb, ubatch, first, bits, ibits; } cfg[] = {
        {1, 3, -1, 64, 16, 32, 32}, {3, 1, -1, 7, 0, 32, 32}, {2, 1, 0, 64, 3, 32, 32}, {1, 2, 1, 5, 0, 32, 32},
        {1, 2, -1, 64, 16, 8, 4},   {2, 1, 0, 5, 0, 4, 8}};
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        coli_model a, b;
        one_run r;
        if (load(&a, dir, opts_kv(opts(cfg[k].ref_threads, cfg[k].absorb, 1, 64), cfg[k].bits, cfg[k].ibits))) { CHECK(0); return; }
        if (load(&b, dir, opts_kv(opts(cfg[k].threads, cfg[k].absorb, NSEQ, cfg[k].ubatch), cfg[k].bits, cfg[k].ibits))) {
            CHECK(0);
            model_free(&a);
            return;
        }
        CHECK(a.kv.bits == cfg[k].bits && a.kv.ibits == cfg[k].ibits);
        CHECK(one_make(&a, &r) == 0);
        int steps = 0;
        batched(&b, &r, slot_of[k % 3], 7u + 31u * (uint32_t)k, cfg[k].first, &steps);
        CHECK(steps >= 4 && steps < LEN); /* sequences shared forwards */
        one_free(&r);
        model_free(&a), model_free(&b);
    }
}

/* A sequence decoded alone in slot k (prefill chunk, then one row at a
 * time with fwd_tokens) equals slot 0's decoding bit for bit, logits and
 * KV; the MTP layer in slot k equals it in slot 0. */
static void test_slot_alone(const char *dir) {
    coli_model a, b;
    one_run r;
    if (load(&a, dir, opts(2, -1, 1, 64))) { CHECK(0); return; }
    if (load(&b, dir, opts(2, -1, 3, 64))) { CHECK(0); model_free(&a); return; }
    const coli_config *c = &a.c;
    CHECK(one_make(&a, &r) == 0);
    CHECK(kv_select(&b.kv, 3) == -1 && kv_select(&b.kv, -1) == -1 && b.kv.slot == 0);
    for (int s = 1; s < 3; s++) {
        int q = s, ids[LEN];
        for (int i = 0; i < LEN; i++) ids[i] = tok_of(&b, q, i);
        CHECK(kv_select(&b.kv, s) == 0);
        CHECK(fwd_tokens(&b, ids, 1, 0, NULL) == 0); /* positions one at a time, as the reference */
        int bad = memcmp(b.sc.logits, r.logits + (size_t)q * LEN * c->vocab, (size_t)c->vocab * 4) != 0;
        for (int i = 1; i < LEN; i++) {
            CHECK(fwd_tokens(&b, ids + i, 1, i, NULL) == 0);
            bad += memcmp(b.sc.logits, r.logits + ((size_t)q * LEN + i) * c->vocab, (size_t)c->vocab * 4) != 0;
        }
        CHECK(bad == 0);
        CHECK(kv_equal(&b, &r, q, s, LEN));
    }
    if (a.mtp && b.mtp) { /* the MTP layer over sequence 1's hidden rows, in slot 0 of a and slot 2 of b */
        int n = 9, ids[9];
        float *ha = malloc((size_t)n * c->dim * 4), *hb = malloc((size_t)n * c->dim * 4), *la = malloc((size_t)c->vocab * 4),
              *lb = malloc((size_t)c->vocab * 4);
        for (int i = 0; i < n; i++) ids[i] = tok_of(&a, 1, i + 1);
        CHECK(kv_select(&b.kv, 2) == 0);
        CHECK(fwd_mtp(&a, ids, r.hid + (size_t)1 * LEN * c->dim, 4, 0, ha, la) == 0);
        CHECK(fwd_mtp(&a, ids + 4, r.hid + ((size_t)1 * LEN + 4) * c->dim, n - 4, 4, ha + (size_t)4 * c->dim, la) == 0);
        CHECK(fwd_mtp(&b, ids, r.hid + (size_t)1 * LEN * c->dim, 4, 0, hb, lb) == 0);
        CHECK(fwd_mtp(&b, ids + 4, r.hid + ((size_t)1 * LEN + 4) * c->dim, n - 4, 4, hb + (size_t)4 * c->dim, lb) == 0);
        CHECK(!memcmp(ha, hb, (size_t)n * c->dim * 4) && !memcmp(la, lb, (size_t)c->vocab * 4));
        int L = c->n_layers;
        CHECK(!memcmp(kv_lat(&a.kv, 0, L), kv_lat(&b.kv, 2, L), (size_t)n * c->kv_lora * 4));
        CHECK(!memcmp(kv_rope(&a.kv, 0, L), kv_rope(&b.kv, 2, L), (size_t)n * c->qk_rope * 4));
        if (c->idx_full[L]) CHECK(!memcmp(kv_ikey(&a.kv, 0, L), kv_ikey(&b.kv, 2, L), (size_t)n * c->index_dim * 4));
        free(ha), free(hb), free(la), free(lb);
    }
    one_free(&r);
    model_free(&a), model_free(&b);
}

/* Slot 1's sequence saved to a KV file loads into slot 2 (of the same
 * model) with the same rows, and decoding continues there exactly as the
 * reference; slot 0 is untouched by either. The cache in `bits` and
 * `ibits` (kvq.h); a model whose cache has other formats refuses the
 * file, naming both. */
static void test_persist(const char *dir, int bits, int ibits) {
    coli_model a, b;
    one_run r;
    char path[256], err[600];
    struct stat sst;
    const char *d = stat("/dev/shm", &sst) == 0 && S_ISDIR(sst.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/colibri-test-batch-%ld.coli_kv", d, (long)getpid());
    if (load(&a, dir, opts_kv(opts(1, -1, 1, 64), bits, ibits))) { CHECK(0); return; }
    if (load(&b, dir, opts_kv(opts(2, -1, 3, 64), bits, ibits))) { CHECK(0); model_free(&a); return; }
    const coli_config *c = &a.c;
    CHECK(one_make(&a, &r) == 0);
    int q = 3, n = 15, ids[LEN];
    for (int i = 0; i < LEN; i++) ids[i] = tok_of(&b, q, i);
    fwd_row rows[LEN];
    for (int i = 0; i < n; i++) rows[i] = (fwd_row){ids[i], 1, i, 0};
    rows[n - 1].logits = 1;
    float *lg = malloc((size_t)c->vocab * 4);
    CHECK(fwd_rows(&b, rows, n, lg, NULL) == 0);
    CHECK(!memcmp(lg, r.logits + ((size_t)q * LEN + n - 1) * c->vocab, (size_t)c->vocab * 4));
    uint64_t fp = kvp_fingerprint(&b, dir);
    CHECK(kv_select(&b.kv, 1) == 0);
    CHECK(kvp_save(&b, path, fp, ids, n + 1, n, NULL, err, sizeof err) == 0);
    CHECK(kv_select(&b.kv, 2) == 0);
    uint64_t gen = b.kv.gen;
    kvp_state st;
    CHECK(kvp_load(&b, path, fp, &st, err, sizeof err) == 0);
    CHECK(st.n_kv == n && st.n_tok == n + 1 && !memcmp(st.tok, ids, (size_t)(n + 1) * sizeof(int)));
    CHECK(b.kv.gen == gen); /* slot 0's generation (the GPU's copy) only moves with slot 0's rows */
    kvp_state_free(&st);
    CHECK(kv_equal(&b, &r, q, 2, n));
    int bad = 0;
    for (int i = n; i < LEN; i++) {
        CHECK(fwd_tokens(&b, ids + i, 1, i, NULL) == 0);
        bad += memcmp(b.sc.logits, r.logits + ((size_t)q * LEN + i) * c->vocab, (size_t)c->vocab * 4) != 0;
    }
    CHECK(bad == 0);
    CHECK(kv_equal(&b, &r, q, 2, LEN));
    coli_model o;
    if (load(&o, dir, opts_kv(opts(1, -1, 1, 64), bits == 32 ? 8 : 32, ibits))) CHECK(0);
    else {
        CHECK(kvp_load(&o, path, fp, &st, err, sizeof err) == -1);
        char want[96];
        snprintf(want, sizeof want, "saved with KV_BITS=%d KV_INDEX_BITS=%d; this run keeps its cache in KV_BITS=%d", bits, ibits, bits == 32 ? 8 : 32);
        CHECK_HAS(err, want);
        model_free(&o);
    }
    unlink(path);
    free(lg);
    one_free(&r);
    model_free(&a), model_free(&b);
}

#ifdef COLI_HAVE_CUDA
/* With the GPU (the host stand-in in build/cuda-host, a device in
 * build/cuda) holding the dense matrices (IDOT, int8 at load) and slot 0's
 * latent cache and indexer keys: a scripted schedule where slot 0 runs
 * alone (attention and indexer on the GPU), then rewinds beside slot 1
 * (on the CPU, rewriting rows the GPU holds), then runs alone again (the
 * GPU must take the rewritten rows) gives bit for bit what one-row
 * forwards on the CPU give (model a, the same slots), and the GPU did
 * attend. */
static void test_gpu(const char *dir) {
    coli_opts oa = opts(1, 1, 2, 64), ob = opts(2, 1, 2, 64);
    oa.dense_bits = ob.dense_bits = 8;
    ob.cuda = -1, ob.cuda_attn = 1, ob.cuda_expert_gb = -1, ob.cuda_fill_mb = 64;
    coli_model a, b;
    if (load(&a, dir, oa)) { CHECK(0); return; }
    if (load(&b, dir, ob)) { CHECK(0); model_free(&a); return; }
    if (!gpu_has_kv(&b.gpu) || !gpu_has_keys(&b.gpu)) {
        SKIP("gpu", "no GPU here, or it holds no latent cache with indexer keys");
        model_free(&a), model_free(&b);
        return;
    }
    const coli_config *c = &a.c;
    /* per step, per slot: first position, count, token variant */
    static const int script[][2][3] = {{{0, 10, 0}, {0, 0, 0}}, {{6, 3, 1}, {0, 7, 0}}, {{9, 4, 1}, {0, 0, 0}},
                                       {{0, 0, 0}, {7, 5, 0}},  {{13, 1, 1}, {12, 2, 0}}, {{14, 6, 1}, {0, 0, 0}}};
    int bad = 0, end[2] = {0, 0};
    fwd_row rows[32];
    float *out = malloc((size_t)32 * c->vocab * 4), *one = malloc((size_t)c->vocab * 4);
    uint64_t attn0 = b.gpu.cnt.attn_gpu;
    for (size_t k = 0; k < sizeof script / sizeof script[0]; k++) {
        int n = 0;
        for (int q = 0; q < 2; q++) {
            const int *st = script[k][q];
            for (int i = 0; i < st[1]; i++, n++) rows[n] = (fwd_row){tok_of(&b, q + 2 * st[2], st[0] + i), q, st[0] + i, 1};
            if (st[1]) end[q] = st[0] + st[1];
        }
        CHECK(fwd_rows(&b, rows, n, out, NULL) == 0);
        for (int i = 0; i < n; i++) {
            CHECK(kv_select(&a.kv, rows[i].slot) == 0 && fwd_run(&a, &rows[i].tok, 1, rows[i].pos, one, NULL, 0) == 0);
            bad += memcmp(out + (size_t)i * c->vocab, one, (size_t)c->vocab * 4) != 0;
        }
    }
    CHECK(bad == 0);
    for (int q = 0; q < 2; q++)
        for (int l = 0; l < c->n_layers; l++) {
            CHECK(!memcmp(kv_lat(&a.kv, q, l), kv_lat(&b.kv, q, l), (size_t)end[q] * c->kv_lora * 4));
            CHECK(!memcmp(kv_rope(&a.kv, q, l), kv_rope(&b.kv, q, l), (size_t)end[q] * c->qk_rope * 4));
            if (c->idx_full[l]) CHECK(!memcmp(kv_ikey(&a.kv, q, l), kv_ikey(&b.kv, q, l), (size_t)end[q] * c->index_dim * 4));
        }
    CHECK(b.gpu.cnt.attn_gpu > attn0 && b.gpu.cnt.idx_gpu > 0 && !gpu_failed(&b.gpu));
    free(out), free(one);
    model_free(&a), model_free(&b);
}
#endif

/* Batches fwd_rows refuses, each by name. */
static void test_refusals(const char *dir) {
    coli_model b;
    if (load(&b, dir, opts(1, -1, 2, 64))) { CHECK(0); return; }
    float *out = malloc((size_t)4 * b.c.vocab * 4);
    fwd_row split[] = {{1, 0, 0, 1}, {2, 1, 0, 1}, {3, 0, 1, 1}};
    CHECK(fwd_rows(&b, split, 3, out, NULL) == -1);
    CHECK_HAS(b.err, "not adjacent");
    fwd_row gap[] = {{1, 0, 0, 1}, {2, 0, 2, 1}};
    CHECK(fwd_rows(&b, gap, 2, out, NULL) == -1);
    CHECK_HAS(b.err, "does not follow");
    fwd_row slot[] = {{1, 2, 0, 1}};
    CHECK(fwd_rows(&b, slot, 1, out, NULL) == -1);
    CHECK_HAS(b.err, "KV slot 2");
    fwd_row tok[] = {{b.c.vocab, 0, 0, 1}};
    CHECK(fwd_rows(&b, tok, 1, out, NULL) == -1);
    CHECK_HAS(b.err, "vocabulary");
    fwd_row far[] = {{1, 1, b.kv.ctx, 1}};
    CHECK(fwd_rows(&b, far, 1, out, NULL) == -1);
    CHECK_HAS(b.err, "CTX");
    free(out);
    model_free(&b);
}

int main(void) {
    (void)coli_main;
    static const char *fix[] = {"tests/fixtures/tiny-glm5-mtp", "tests/fixtures/tiny-dsv32", "tests/fixtures/tiny-dsv3", "tests/fixtures/tiny-q8"};
    struct stat st;
    for (size_t i = 0; i < sizeof fix / sizeof fix[0]; i++) {
        if (stat(fix[i], &st)) {
            SKIP("fixture", "%s is missing", fix[i]);
            continue;
        }
        double t0 = compat_now();
        test_batched(fix[i]);
        test_slot_alone(fix[i]);
        if (i == 0) test_persist(fix[i], 32, 32), test_persist(fix[i], 8, 4), test_persist(fix[i], 4, 32), test_refusals(fix[i]);
#ifdef COLI_HAVE_CUDA
        if (i == 0) test_gpu(fix[i]);
#endif
        printf("%s: %.1f s\n", fix[i], compat_now() - t0);
    }
    return check_report("test_batch");
}
