/* test_store.c — the expert store alone, over temporary shard files: every
 * read path (on the compute thread, reader pool, io_uring, O_DIRECT, mmap)
 * brings each expert's exact bytes, whatever the layout on disk (the three
 * weights back to back, apart, each followed by its .qs, mixed U8/I8, bf16
 * converted on read); the LRU hits and evicts as tier.h says; pins, re-pins
 * and shrinking keep every expert reachable; failed reads, truncated shards
 * and non-finite values are refused by name; prefetches count their
 * recall. */
#include "store.h"

#include "check.h"

enum { NL = 2, NE = 6, DIM = 40, INTER = 24 }; /* odd sizes: no accidental alignment */

static char dir[256];
static const int64_t SO[3] = {INTER, INTER, DIM}, SI[3] = {DIM, DIM, INTER};
static const char *const PROJ[3] = {"gate_proj", "up_proj", "down_proj"};

/* Shard layouts the converter and other tools write. */
enum {
    LAY_F32_SPAN,   /* f32 gate|up|down back to back: one read */
    LAY_Q8_SPAN,    /* int8 weights back to back, scales after all weights */
    LAY_Q4_APART,   /* int4, each weight followed by its .qs: six reads */
    LAY_Q8_MIXED,   /* int8, gate stored as I8, up and down as U8 */
    LAY_BF16,       /* bf16: converted on read */
    LAY_N
};
static const char *const LAY_NAME[LAY_N] = {"f32 span", "int8 span", "int4 apart", "int8 mixed dtypes", "bf16"};

/* Value of element i of matrix p of expert e of layer k (exact in bf16). */
static float val(int k, int e, int p, int64_t i) { return (float)((k * 7 + e * 5 + p * 3 + (int)(i % 13)) % 17 - 8) * 0.125f; }
static uint8_t qbyte(int k, int e, int p, int64_t i) { return (uint8_t)(k * 31 + e * 17 + p * 7 + i * 3); }
static float qscale(int k, int e, int p, int64_t i) { return 0.01f * (float)(1 + (k + e + p + i) % 9); }

static qt_fmt lay_fmt(int lay) { return lay == LAY_Q4_APART ? QT_I4 : lay == LAY_F32_SPAN || lay == LAY_BF16 ? QT_F32 : QT_I8; }

typedef struct {
    char name[128];
    st_dtype dt;
    int64_t shape[2];
    int ndim;
    int k, e, p, scales;
} wt;

/* dst = name + ".qs" */
static void qs_name(char *dst, const char *name) {
    size_t l = strlen(name);
    memmove(dst, name, l);
    memcpy(dst + l, ".qs", 4);
}

/* The tensors of one layout in file order. */
static int lay_tensors(int lay, wt *t) {
    int n = 0;
    qt_fmt f = lay_fmt(lay);
    for (int k = 0; k < NL; k++)
        for (int e = 0; e < NE; e++) {
            int first = n;
            for (int p = 0; p < 3; p++) {
                wt *w = &t[n++];
                snprintf(w->name, sizeof w->name, "model.layers.%d.mlp.experts.%d.%s.weight", k + 1, e, PROJ[p]);
                w->k = k, w->e = e, w->p = p, w->scales = 0, w->ndim = 2;
                w->shape[0] = SO[p], w->shape[1] = SI[p];
                w->dt = lay == LAY_BF16 ? ST_BF16 : ST_F32;
                if (f != QT_F32) {
                    w->dt = lay == LAY_Q8_MIXED && p == 0 ? ST_I8 : ST_U8;
                    w->ndim = 1, w->shape[0] = (int64_t)qt_weight_bytes(f, SO[p], SI[p], 0);
                }
                if (lay == LAY_Q4_APART) {
                    wt *s = &t[n++];
                    qs_name(s->name, w->name);
                    s->k = k, s->e = e, s->p = p, s->scales = 1, s->dt = ST_F32, s->ndim = 1, s->shape[0] = SO[p];
                }
            }
            if (f != QT_F32 && lay != LAY_Q4_APART)
                for (int p = 0; p < 3; p++) {
                    wt *s = &t[n++];
                    qs_name(s->name, t[first + p].name);
                    s->k = k, s->e = e, s->p = p, s->scales = 1, s->dt = ST_F32, s->ndim = 1, s->shape[0] = SO[p];
                }
        }
    return n;
}

/* Bytes of tensor w as written. */
static size_t wt_bytes(const wt *w) { return (size_t)w->shape[0] * (size_t)(w->ndim == 2 ? w->shape[1] : 1) * (size_t)st_dtype_bytes[w->dt]; }

static void wt_fill(const wt *w, uint8_t *buf) {
    size_t nb = wt_bytes(w);
    if (w->scales) {
        for (int64_t i = 0; i < w->shape[0]; i++) {
            float v = qscale(w->k, w->e, w->p, i);
            memcpy(buf + 4 * i, &v, 4);
        }
    } else if (w->dt == ST_F32) {
        for (size_t i = 0; i < nb / 4; i++) {
            float v = val(w->k, w->e, w->p, (int64_t)i);
            memcpy(buf + 4 * i, &v, 4);
        }
    } else if (w->dt == ST_BF16) {
        for (size_t i = 0; i < nb / 2; i++) {
            float v = val(w->k, w->e, w->p, (int64_t)i);
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(buf + 2 * i, &h, 2);
        }
    } else
        for (size_t i = 0; i < nb; i++) buf[i] = qbyte(w->k, w->e, w->p, (int64_t)i);
}

/* Writes dir/experts.safetensors in layout lay; `poison` sets one value
 * of expert (1, 3)'s down matrix (or its scale) to NaN. */
static void write_shard(int lay, int poison) {
    static wt t[NL * NE * 6];
    int n = lay_tensors(lay, t);
    st_writer w;
    st_writer_init(&w);
    for (int i = 0; i < n; i++) CHECK(st_writer_add(&w, t[i].name, t[i].dt, t[i].ndim, t[i].shape) == 0);
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/experts.safetensors", dir);
    CHECK(st_writer_begin(&w, path, NULL, err, sizeof err) == 0);
    for (int i = 0; i < n; i++) {
        size_t nb = wt_bytes(&t[i]);
        uint8_t *buf = malloc(nb);
        wt_fill(&t[i], buf);
        if (poison && t[i].k == 1 && t[i].e == 3 && t[i].p == 2 && (t[i].scales || lay_fmt(lay) == QT_F32)) {
            float nan = NAN;
            if (t[i].dt == ST_BF16) {
                uint16_t h = 0x7FC0;
                memcpy(buf + 2, &h, 2);
            } else memcpy(buf + 4, &nan, 4);
        }
        CHECK(st_writer_data(&w, buf, nb, err, sizeof err) == 0);
        free(buf);
    }
    CHECK(st_writer_finish(&w, err, sizeof err) == 0);
    st_writer_free(&w);
}

typedef struct {
    st_index st;
    io_ctx io;
    xs_store x;
} fixture;

/* Opens the shard and a store over it: the read path, cache slots, and
 * the bits float experts are held at. Returns 0 or -1 (skip). */
static int open_fixture(fixture *f, int mode, int direct, int mmap, int slots, int bits) {
    char err[600];
    memset(f, 0, sizeof *f);
    if (st_open_dir(&f->st, dir, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        CHECK(0);
        return -1;
    }
    xs_opts o = {.direct = direct, .mmap = mmap, .expert_bits = bits, .threads = 2};
    CHECK(xs_init(&f->x, &f->st, NL, NE, &o) == 0);
    for (int k = 0; k < NL; k++) {
        xs_layer_begin(&f->x, k, SO, SI);
        for (int e = 0; e < NE; e++) {
            const st_tensor *w[3], *s[3];
            for (int p = 0; p < 3; p++) {
                char n[160], qn[168];
                snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", k + 1, e, PROJ[p]);
                snprintf(qn, sizeof qn, "%s.qs", n);
                w[p] = st_find(&f->st, n);
                s[p] = st_find(&f->st, qn);
                CHECK(w[p] != NULL);
            }
            int rc = xs_locate(&f->x, k, e, w, s);
            CHECK(rc == 0);
            if (rc) fprintf(stderr, "locate: %s\n", f->x.err);
        }
        xs_layer_end(&f->x, k);
    }
    char *paths[1] = {f->st.files[0].path};
    io_opts io = {.mode = mode, .workers = 3, .direct = direct, .mmap = mmap, .weight = {1}};
    if (io_open(&f->io, &io, paths, 1, NULL, 0)) {
        fprintf(stderr, "io: %s\n", f->io.err);
        CHECK(0);
        return -1;
    }
    CHECK(xs_open_cache(&f->x, &f->io, slots) == 0);
    return 0;
}

static void close_fixture(fixture *f) {
    xs_free(&f->x);
    io_close(&f->io);
    st_close(&f->st);
}

/* The job's views hold expert (k, e)'s values in the layout's format. */
static int view_ok(int lay, int bits, int k, int e, const qt_tensor v[3]) {
    for (int p = 0; p < 3; p++) {
        if (v[p].O != SO[p] || v[p].I != SI[p]) return 0;
        if (lay == LAY_BF16 && bits) { /* quantized on read: dequantizes near the value */
            float *row = malloc((size_t)SI[p] * 4);
            int ok = v[p].fmt == xs_bits_fmt(bits, 0);
            const float tol = 0.5f / (bits == 8 ? 127 : bits == 4 ? 7 : 1) + 1e-6f; /* half a step; |values| ≤ 1 */
            for (int64_t o = 0; o < SO[p] && ok; o++) {
                qt_dequant_row(&v[p], o, row);
                for (int64_t i = 0; i < SI[p]; i++) ok &= fabsf(row[i] - val(k, e, p, o * SI[p] + i)) <= tol;
            }
            free(row);
            if (!ok) return 0;
            continue;
        }
        if (lay_fmt(lay) == QT_F32) {
            if (v[p].fmt != QT_F32) return 0;
            for (int64_t i = 0; i < SO[p] * SI[p]; i++)
                if (((const float *)v[p].w)[i] != val(k, e, p, i)) return 0;
            continue;
        }
        if (v[p].fmt != lay_fmt(lay)) return 0;
        uint64_t nb = qt_weight_bytes(v[p].fmt, SO[p], SI[p], 0);
        for (uint64_t i = 0; i < nb; i++)
            if (((const uint8_t *)v[p].w)[i] != qbyte(k, e, p, (int64_t)i)) return 0;
        for (int64_t i = 0; i < SO[p]; i++)
            if (v[p].s[i] != qscale(k, e, p, i)) return 0;
    }
    return 1;
}

/* Runs one layer's batch of distinct experts through begin/next/done and
 * checks every view. Returns the jobs seen, or -1 on an error (x->err). */
static int run_batch(fixture *f, int lay, int bits, int k, const int *ex, int n) {
    if (xs_begin(&f->x, k, ex, n)) return -1;
    int seen = 0, bad = 0;
    for (;;) {
        int j = xs_next(&f->x, k);
        if (j == -2) return -1;
        if (j < 0) break;
        const xs_job *jb = xs_job_get(&f->x, j);
        if (!view_ok(lay, bits, k, jb->e, jb->view)) bad++, fprintf(stderr, "  bad view: %s bits %d layer %d expert %d\n", LAY_NAME[lay], bits, k, jb->e);
        xs_done(&f->x, k, j);
        seen++;
    }
    CHECK(bad == 0);
    return seen;
}

/* Every path and layout: exact bytes, LRU hits and misses as tier.h rules. */
static void test_paths(void) {
    static const struct { int mode, direct, mmap; const char *name; } paths[] = {
        {IO_SYNC, 0, 0, "sync"},    {IO_POOL, 0, 0, "pool"},    {IO_URING, 0, 0, "io_uring"},
        {IO_SYNC, 1, 0, "sync+direct"}, {IO_POOL, 1, 0, "pool+direct"}, {IO_URING, 1, 0, "io_uring+direct"},
        {IO_SYNC, 0, 1, "mmap"},
    };
    for (int lay = 0; lay < LAY_N; lay++) {
        write_shard(lay, 0);
        for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
            if (paths[pi].mode == IO_URING && !io_have_uring()) {
                if (lay == 0 && !paths[pi].direct) SKIP("io_uring", "store reads through io_uring: this build has no liburing");
                continue;
            }
            for (int bits = 0; bits <= (lay == LAY_BF16 ? 8 : 0); bits += 8) {
                fixture f;
                if (open_fixture(&f, paths[pi].mode, paths[pi].direct, paths[pi].mmap, 2, bits)) continue;
                /* [0] [1] [0] [2] [1]: 0 and 1 miss, 0 hits, 2 evicts 1 (least recent), 1 misses again */
                static const int seq[5] = {0, 1, 0, 2, 1};
                int errs = 0;
                for (int i = 0; i < 5; i++) errs += run_batch(&f, lay, bits, 1, &seq[i], 1) != 1;
                /* a batch wider than the cache still completes: reads wait for done slots */
                static const int wide[5] = {0, 1, 3, 4, 5};
                errs += run_batch(&f, lay, bits, 0, wide, 5) != 5;
                CHECK(errs == 0);
                if (errs) fprintf(stderr, "  %s, %s, bits %d: %s\n", LAY_NAME[lay], paths[pi].name, bits, f.x.err);
                xs_stats s;
                xs_stats_get(&f.x, &s);
                int mapped = paths[pi].mmap && lay_fmt(lay) == QT_F32 && lay != LAY_BF16 ? 1 : paths[pi].mmap && lay == LAY_Q8_SPAN;
                if (mapped) CHECK(s.mapped == 10 && s.miss == 0);
                else CHECK(s.miss == 9 && s.hit_lru == 1 && s.hit_pin == 0);
                CHECK(s.routed == 10 && s.bytes_read > 0);
                close_fixture(&f);
            }
        }
    }
}

/* Pins serve hits; a re-pin swaps a hot expert in; shrinking frees slots
 * and every expert stays reachable. */
static void test_pins_repin_shrink(void) {
    write_shard(LAY_Q8_SPAN, 0);
    fixture f;
    if (open_fixture(&f, IO_POOL, 0, 0, 4, 0)) return;
    uint8_t pin[NL * NE] = {0};
    pin[0 * NE + 2] = pin[1 * NE + 4] = 1;
    CHECK(xs_pin(&f.x, pin, NULL, NULL) == 0);
    CHECK(xs_pinned_count(&f.x) == 2 && xs_pinned_bytes(&f.x) == 2 * xs_expert_bytes(&f.x, 0));
    int all[NE] = {0, 1, 2, 3, 4, 5};
    CHECK(run_batch(&f, LAY_Q8_SPAN, 0, 1, &all[1], 4) == 4); /* 1..4: 4 is pinned in layer 1 */
    xs_stats s;
    xs_stats_get(&f.x, &s);
    CHECK(s.hit_pin == 1 && s.miss == 3);
    /* expert 5 of layer 1 becomes hot, pinned 4 is never used again */
    for (int i = 0; i < 40; i++) {
        xs_note_use(&f.x, 1, 5);
        CHECK(run_batch(&f, LAY_Q8_SPAN, 0, 1, &all[5], 1) == 1);
    }
    CHECK(xs_repin(&f.x, 16) == 1);
    CHECK(f.x.pinned[1 * NE + 5] == 1 && f.x.pinned[1 * NE + 4] == 0);
    xs_stats_reset(&f.x);
    CHECK(run_batch(&f, LAY_Q8_SPAN, 0, 1, &all[4], 2) == 2); /* 4 now misses, 5 is pinned */
    xs_stats_get(&f.x, &s);
    CHECK(s.hit_pin == 1 && s.miss == 1 && s.repinned == 0);
    /* shrink: a quarter of 4 slots per layer goes, at least one stays */
    CHECK(xs_lru_slots(&f.x, 0) == 4);
    CHECK(xs_shrink(&f.x) == 2 && xs_lru_slots(&f.x, 0) == 3 && xs_lru_slots(&f.x, 1) == 3);
    for (int i = 0; i < 3; i++) xs_shrink(&f.x);
    CHECK(xs_lru_slots(&f.x, 0) == 1);
    CHECK(xs_shrink(&f.x) == 0);
    CHECK(run_batch(&f, LAY_Q8_SPAN, 0, 0, all, NE) == NE);
    CHECK(run_batch(&f, LAY_Q8_SPAN, 0, 1, all, NE) == NE);
    close_fixture(&f);
}

/* Predicted experts are read ahead into slots and counted in the recall. */
static void test_prefetch(void) {
    write_shard(LAY_F32_SPAN, 0);
    fixture f;
    if (open_fixture(&f, IO_POOL, 0, 0, 3, 0)) return;
    int pred[2] = {1, 3}, use[2] = {1, 4};
    xs_prefetch(&f.x, 0, pred, 2, 1);
    CHECK(run_batch(&f, LAY_F32_SPAN, 0, 0, use, 2) == 2);
    xs_stats s;
    xs_stats_get(&f.x, &s);
    CHECK(s.pred_total == 2 && s.pred_used == 1 && s.routed == 2);
    CHECK(s.hit_lru == 1 && s.miss == 1); /* 1 was in flight or landed: a hit */
    close_fixture(&f);
}

/* The only slot holds a prefetch whose read lands between xs_begin (which
 * found it in flight) and xs_next: the queued expert gets the slot once the
 * prefetch is settled, not a "every slot is busy" error. */
static void test_prefetch_landed(void) {
    write_shard(LAY_F32_SPAN, 0);
    fixture f;
    int pred[1] = {2}, use[1] = {5}, in_flight = 0;
    for (int tries = 0; tries < 50 && !in_flight; tries++) { /* the read must still be in flight at xs_begin */
        if (tries) close_fixture(&f);
        if (open_fixture(&f, IO_POOL, 0, 0, 1, 0)) return;
        xs_prefetch(&f.x, 0, pred, 1, 1);
        CHECK(xs_begin(&f.x, 0, use, 1) == 0);
        for (int s = 0; s < f.x.max_slots; s++) in_flight |= xs_slot_at(&f.x, 0, s)->loading && xs_slot_at(&f.x, 0, s)->pilot;
    }
    CHECK(in_flight);
    for (int s = 0; s < f.x.max_slots; s++) { /* let the prefetch's reads land */
        xs_slot *sl = xs_slot_at(&f.x, 0, s);
        for (int i = 0; sl->loading && i < sl->nreq; i++) io_wait(&f.io, &sl->req[i]);
    }
    int j = xs_next(&f.x, 0);
    CHECK(j == 0);
    if (j != 0) fprintf(stderr, "  prefetch landed: %s\n", f.x.err);
    else {
        CHECK(view_ok(LAY_F32_SPAN, 0, 0, 5, xs_job_get(&f.x, j)->view));
        xs_done(&f.x, 0, j);
        CHECK(xs_next(&f.x, 0) == -1);
    }
    close_fixture(&f);
}

/* A caller that starts a layer's next batch with a job of the last one
 * not done (xs_done) holds its slot: with no other slot the queued expert
 * can never load, and xs_next says so instead of waiting forever. */
static void test_slot_never_freed(void) {
    write_shard(LAY_F32_SPAN, 0);
    fixture f;
    if (open_fixture(&f, IO_POOL, 0, 0, 1, 0)) return;
    int a[1] = {2}, b[1] = {5};
    CHECK(xs_begin(&f.x, 0, a, 1) == 0);
    CHECK(xs_next(&f.x, 0) == 0); /* expert 2 ready, never done */
    CHECK(xs_begin(&f.x, 0, b, 1) == 0);
    CHECK(xs_next(&f.x, 0) == -2);
    CHECK_HAS(f.x.err, "every slot is busy");
    CHECK_HAS(f.x.err, "MoE layer 0");
    close_fixture(&f);
}

/* A shard truncated under the store and an injected EIO: the read fails
 * with the file named, never zeros. */
static void test_read_errors(void) {
    int modes[3] = {IO_SYNC, IO_POOL, IO_URING};
    for (int mi = 0; mi < 3; mi++) {
        if (modes[mi] == IO_URING && !io_have_uring()) continue;
        write_shard(LAY_Q4_APART, 0);
        fixture f;
        if (open_fixture(&f, modes[mi], 0, 0, 2, 0)) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/experts.safetensors", dir);
        CHECK(truncate(p, (off_t)f.st.files[0].size / 2) == 0);
        int ex[1] = {NE - 1};
        CHECK(run_batch(&f, LAY_Q4_APART, 0, 1, ex, 1) == -1);
        CHECK_HAS(f.x.err, "experts.safetensors");
        CHECK_HAS(f.x.err, "truncated");
        close_fixture(&f);
        write_shard(LAY_Q4_APART, 0);
        if (open_fixture(&f, modes[mi], 0, 0, 2, 0)) continue;
        f.io.o.fail_at = 2; /* the second read of the expert fails */
        CHECK(run_batch(&f, LAY_Q4_APART, 0, 0, ex, 1) == -1);
        CHECK_HAS(f.x.err, "read failed");
        close_fixture(&f);
    }
}

/* A NaN in an expert's weights or scales stops the run naming the tensor,
 * on every layout (raw, quantized, converted) and when pinning. */
static void test_nonfinite(void) {
    for (int lay = 0; lay < LAY_N; lay++) {
        if (lay == LAY_Q8_MIXED) continue;
        write_shard(lay, 1);
        for (int bits = 0; bits <= (lay == LAY_BF16 ? 4 : 0); bits += 4) {
            fixture f;
            if (open_fixture(&f, IO_POOL, 0, 0, 2, bits)) continue;
            int ex[1] = {3};
            CHECK(run_batch(&f, lay, bits, 1, ex, 1) == -1);
            CHECK_HAS(f.x.err, "experts.3.down_proj.weight");
            CHECK_HAS(f.x.err, "not finite");
            CHECK(run_batch(&f, lay, bits, 0, ex, 1) == 1); /* the same expert of layer 0 is fine */
            uint8_t pin[NL * NE] = {0};
            pin[1 * NE + 3] = 1;
            CHECK(xs_pin(&f.x, pin, NULL, NULL) == -1);
            CHECK_HAS(f.x.err, "not finite");
            close_fixture(&f);
        }
    }
}

/* Inconsistent experts within a layer are refused by name. */
static void test_refusals(void) {
    write_shard(LAY_Q8_SPAN, 0);
    char err[600];
    st_index st;
    CHECK(st_open_dir(&st, dir, err, sizeof err) == 0);
    xs_store x;
    xs_opts o = {.threads = 1};
    CHECK(xs_init(&x, &st, 1, 2, &o) == 0);
    xs_layer_begin(&x, 0, SO, SI);
    const st_tensor *w[3], *s[3], *none[3] = {NULL, NULL, NULL};
    for (int p = 0; p < 3; p++) {
        char n[160], qn[168];
        snprintf(n, sizeof n, "model.layers.1.mlp.experts.0.%s.weight", PROJ[p]);
        snprintf(qn, sizeof qn, "%s.qs", n);
        w[p] = st_find(&st, n), s[p] = st_find(&st, qn);
    }
    CHECK(xs_locate(&x, 0, 0, w, s) == 0);
    CHECK(xs_locate(&x, 0, 1, w, none) == -1);
    CHECK_HAS(x.err, "lacks a .qs scale companion");
    const st_tensor *sw[3] = {s[0], s[1], s[2]};
    CHECK(xs_locate(&x, 0, 1, sw, s) == -1); /* F32 where U8 weights belong */
    CHECK_HAS(x.err, "quantized weights must be U8");
    xs_free(&x);
    st_close(&st);
}

/* The GPU tier's map: experts it holds come out of xs_begin first with
 * shapes and no bytes, are never prefetched, and a requeued one (the GPU
 * failed) is read like any other; slots go to empty places first, then
 * to a clearly hotter expert (tier.h), and closing the tier unmaps all. */
static void test_vram(void) {
    write_shard(LAY_Q4_APART, 0);
    fixture f;
    if (open_fixture(&f, IO_POOL, 0, 0, 2, 0)) return;
    xs_store *x = &f.x;
    CHECK(xs_vram_slot(x, 0, 3) == -1 && xs_vram_victim(x, 0, 3) == -1); /* no tier yet */
    CHECK(xs_vram_open(x, 2) == 0);
    CHECK(xs_vram_victim(x, 0, 3) == 0);
    xs_vram_place(x, 0, 0, 3);
    CHECK(xs_vram_victim(x, 0, 3) == -1); /* already there */
    CHECK(xs_vram_victim(x, 1, 5) == 1);
    xs_vram_place(x, 1, 1, 5);
    CHECK(xs_vram_slot(x, 0, 3) == 0 && xs_vram_slot(x, 1, 5) == 1);
    int ex[2] = {1, 3};
    CHECK(xs_begin(x, 0, ex, 2) == 0);
    const xs_job *g = xs_job_get(x, 1);
    CHECK(g->e == 3 && g->vram == 0 && g->state == XS_READY && xs_job_get(x, 0)->vram == -1);
    for (int p = 0; p < 3; p++) CHECK(g->view[p].w == NULL && g->view[p].O == SO[p] && g->view[p].I == SI[p] && g->view[p].fmt == QT_I4);
    xs_stats st;
    xs_stats_get(x, &st);
    CHECK(st.hit_vram == 1 && st.miss == 1);
    for (int i = 0; i < 40; i++) xs_note_use(x, 0, 7);
    CHECK(xs_vram_victim(x, 0, 7) == 1); /* slot 0 comes first among equally cold owners, but its job is not done */
    xs_requeue(x, 0, 1); /* the GPU failed on expert 3: from disk instead */
    xs_stats_get(x, &st);
    CHECK(st.hit_vram == 0 && st.miss == 2); /* counted as what serves it now */
    CHECK(xs_vram_victim(x, 0, 7) == 0);     /* its slot is free to take */
    int seen = 0, bad = 0;
    for (int j; (j = xs_next(x, 0)) >= 0; xs_done(x, 0, j), seen++) bad += xs_job_get(x, j)->vram != -1 || !view_ok(LAY_Q4_APART, 0, 0, xs_job_get(x, j)->e, xs_job_get(x, j)->view);
    CHECK(seen == 2 && bad == 0);
    int five[1] = {5};
    xs_stats_get(x, &st);
    uint64_t loaded = st.pred_loaded;
    xs_prefetch(x, 1, five, 1, 1);
    xs_stats_get(x, &st);
    CHECK(st.pred_loaded == loaded); /* the GPU holds it: nothing to read ahead */
    for (int i = 0; i < 3; i++) xs_note_use(x, 0, 3);
    CHECK(xs_vram_victim(x, 0, 6) == -1); /* never used: stays out */
    for (int i = 0; i < 40; i++) xs_note_use(x, 0, 6);
    int v = xs_vram_victim(x, 0, 6);
    CHECK(v == 1); /* expert 5 of layer 1 (never used) is the coldest */
    xs_vram_place(x, v, 0, 6);
    CHECK(xs_vram_slot(x, 1, 5) == -1 && xs_vram_slot(x, 0, 6) == 1);
    xs_vram_place(x, 0, 0, -1); /* a failed copy: the slot is nobody's */
    CHECK(xs_vram_slot(x, 0, 3) == -1 && xs_vram_victim(x, 1, 2) == 0);
    xs_vram_close(x);
    CHECK(xs_vram_slot(x, 0, 6) == -1);
    CHECK(run_batch(&f, LAY_Q4_APART, 0, 0, ex, 2) == 2);
    close_fixture(&f);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/colibri-test-store-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_paths();
    test_pins_repin_shrink();
    test_prefetch();
    test_prefetch_landed();
    test_slot_never_freed();
    test_vram();
    test_read_errors();
    test_nonfinite();
    test_refusals();
    if (check_rm_tree(dir)) return 1;
    return check_report("test_store");
}
