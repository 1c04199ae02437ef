/* test_kv.c — conversations saved and resumed (kv_persist.h): a state
 * saved after a first turn and loaded into a fresh model continues with the
 * same logits, caches and tokens bit for bit as the process that never
 * stopped, with plain decoding and with MTP drafts (whose queued rows and
 * cache are part of the state); a small state file truncated at every byte,
 * with any one byte changed, from another model or another version, or not
 * a regular file, is refused with a message naming the file; turns in one
 * process (conv_turn, as CHAT runs them) continue from the cache, an
 * interrupted turn ends cleanly, a turn past CTX leaves the conversation
 * as it was; every writer (compat_write_atomic, kvp_save, st.h's writer,
 * the usage history) replaces only a regular file or a new name. */
#define COLI_NO_MAIN
#include "../colibri.c"

#include "check.h"

#ifndef _WIN32
#include <sys/socket.h>
#include <sys/un.h>
#endif
#ifdef __linux__
#include <sys/sysmacros.h>
#endif

static const char *FIX5 = "tests/fixtures/tiny-glm5", *FIXM = "tests/fixtures/tiny-glm5-mtp", *FIX52 = "tests/fixtures/tiny-glm52";

static int load(coli_model *m, const char *dir) {
    coli_opts o;
    memset(&o, 0, sizeof o);
    o.ctx = 256, o.ubatch = 512, o.absorb = -1, o.mtp = 1;
    o.pin = PIN_OFF, o.pin_gb = -1, o.quiet = 1;
    o.io.mode = IO_SYNC, o.io.workers = 2, o.io.weight[0] = 1;
    if (model_open(m, dir) || model_setup(m, &o, NULL)) {
        fprintf(stderr, "load %s: %s\n", dir, m->err);
        return -1;
    }
    return 0;
}

/* A scratch path: in memory (/dev/shm) where there is one, since the
 * hostile-file test writes a few thousand small files. */
static void tmpname(char *buf, size_t n, const char *what) {
    struct stat st;
    const char *d = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(buf, n, "%s/colibri-test-kv-%ld-%s", d, (long)getpid(), what);
}

/* The first turn: 12 prompt tokens, then 6 greedy tokens of which the
 * first 5 were fed (the last is left for the next turn, as a run that hit
 * NGEN leaves it). tok gets the 18 ids; returns the cached count (17). */
static int first_turn(coli_model *m, int *tok) {
    for (int i = 0; i < 12; i++) tok[i] = (i * 37 + 11) % m->c.vocab;
    if (fwd_tokens(m, tok, 12, 0, NULL)) return -1;
    for (int i = 0; i < 6; i++) {
        tok[12 + i] = argmax(m->sc.logits, m->c.vocab);
        if (i < 5 && fwd_tokens(m, &tok[12 + i], 1, 12 + i, NULL)) return -1;
    }
    return 17;
}

/* The second turn from cached count n_kv: feeds tok[n_kv..18) and 7 new
 * ids, then 8 greedy tokens into out; logits of the turn's last prompt
 * position to lg. */
static int second_turn(coli_model *m, int *tok, int n_kv, float *lg, int *out) {
    for (int i = 0; i < 7; i++) tok[18 + i] = (i * 53 + 5) % m->c.vocab;
    if (fwd_tokens(m, tok + n_kv, 25 - n_kv, n_kv, NULL)) return -1;
    memcpy(lg, m->sc.logits, (size_t)m->c.vocab * 4);
    for (int i = 0; i < 8; i++) {
        out[i] = argmax(m->sc.logits, m->c.vocab);
        if (fwd_tokens(m, &out[i], 1, 25 + i, NULL)) return -1;
    }
    return 0;
}

static void test_resume_plain(void) {
    static coli_model a, b;
    char path[256], err[600];
    tmpname(path, sizeof path, "plain");
    if (load(&a, FIX5) || load(&b, FIX5)) { CHECK(0); return; }
    int tok[64], tok2[64], outa[8], outb[8];
    float *la = malloc((size_t)a.c.vocab * 4), *lb = malloc((size_t)a.c.vocab * 4);
    uint64_t fp = kvp_fingerprint(&a, FIX5);
    CHECK(fp != 0 && fp == kvp_fingerprint(&b, FIX5));
    int n_kv = first_turn(&a, tok);
    CHECK(n_kv == 17 && kvp_save(&a, path, fp, tok, 18, n_kv, NULL, err, sizeof err) == 0);
    CHECK(second_turn(&a, tok, n_kv, la, outa) == 0);
    kvp_state st;
    CHECK(kvp_load(&b, path, fp, &st, err, sizeof err) == 0);
    CHECK(st.n_tok == 18 && st.n_kv == 17 && !st.has_mtp && !memcmp(st.tok, tok, 18 * sizeof(int)));
    memcpy(tok2, st.tok, 18 * sizeof(int));
    CHECK(second_turn(&b, tok2, st.n_kv, lb, outb) == 0);
    CHECK(!memcmp(la, lb, (size_t)a.c.vocab * 4)); /* bit for bit */
    CHECK(!memcmp(outa, outb, sizeof outa));
    kvp_state_free(&st);
    unlink(path);
    free(la), free(lb);
    model_free(&a), model_free(&b);
}

/* With MTP drafts: the state after a speculative first turn (spec_state),
 * restored through the file, continues exactly as restoring it in memory,
 * and gives plain greedy decoding's tokens. */
typedef struct {
    int *t, n, max;
} kv_sink_t;

static int kv_sink(void *ud, int tok, const float *logits) {
    (void)logits;
    kv_sink_t *k = (kv_sink_t *)ud;
    k->t[k->n++] = tok;
    return k->n >= k->max;
}

static int spec_turn(spec_ctx *s, const int *ids, int n, int start, int ngen, int *out) {
    smp_params greedy = {0, 0, 1, 0};
    smp_work w;
    smp_rng r;
    smp_work_alloc(&w, s->m->c.vocab);
    smp_seed(&r, 1);
    int rc = spec_prefill(s, ids, n, start);
    kv_sink_t k = {out, 0, ngen};
    if (!rc) {
        out[k.n++] = smp_sample(&greedy, s->m->sc.logits, s->m->c.vocab, &r, &w);
        rc = spec_decode(s, out[0], n, ngen - 1, &greedy, &r, &w, kv_sink, &k);
    }
    smp_work_free(&w);
    return rc;
}

static void test_resume_spec(void) {
    static coli_model a, b, p;
    char path[256], err[600];
    tmpname(path, sizeof path, "spec");
    if (load(&a, FIXM) || load(&b, FIXM) || load(&p, FIXM)) { CHECK(0); return; }
    CHECK(a.mtp == 1);
    uint64_t fp = kvp_fingerprint(&a, FIXM);
    spec_ctx sa, sb;
    spec_opts so = {3, 0, 24, 256};
    CHECK(spec_init(&sa, &a, &so) == 0 && spec_init(&sb, &b, &so) == 0);
    int ids[128], ids_b[128], t1[10], t2a[12], t2b[12], plain[32];
    for (int i = 0; i < 14; i++) ids[i] = (i * 29 + 3) % a.c.vocab;
    CHECK(spec_turn(&sa, ids, 14, 0, 10, t1) == 0);
    memcpy(ids + 14, t1, sizeof t1);
    int n1 = 24, pos = sa.pos;
    CHECK(pos >= 14 && pos <= n1);
    kvp_mtp k = spec_state(&sa);
    CHECK(k.nq >= 0);
    CHECK(kvp_save(&a, path, fp, ids, n1, pos, &k, err, sizeof err) == 0);
    /* in memory: what a resumed run restores */
    kvp_state mem = {0};
    mem.mtp_pos = k.mtp_pos, mem.nq = k.nq, mem.n_kv = pos;
    mem.hq = malloc((size_t)(k.nq + 1) * a.c.dim * 4), mem.tq = malloc((size_t)(k.nq + 1) * sizeof(int)), mem.h_last = malloc((size_t)a.c.dim * 4);
    memcpy(mem.hq, k.hq, (size_t)k.nq * a.c.dim * 4), memcpy(mem.tq, k.tq, (size_t)k.nq * sizeof(int)), memcpy(mem.h_last, k.h_last, (size_t)a.c.dim * 4);
    CHECK(spec_resume(&sa, &mem) == 0);
    for (int i = 0; i < 6; i++) ids[n1 + i] = (i * 41 + 7) % a.c.vocab;
    CHECK(spec_turn(&sa, ids, n1 + 6, pos, 12, t2a) == 0);
    /* through the file, into a fresh model */
    kvp_state st;
    CHECK(kvp_load(&b, path, fp, &st, err, sizeof err) == 0);
    CHECK(st.has_mtp && st.n_kv == pos && st.n_tok == n1 && st.mtp_pos == k.mtp_pos && st.nq == k.nq);
    memcpy(ids_b, st.tok, (size_t)n1 * sizeof(int));
    memcpy(ids_b + n1, ids + n1, 6 * sizeof(int));
    CHECK(spec_resume(&sb, &st) == 0);
    CHECK(spec_turn(&sb, ids_b, n1 + 6, st.n_kv, 12, t2b) == 0);
    CHECK(!memcmp(t2a, t2b, sizeof t2a));
    CHECK(!memcmp(a.sc.logits, b.sc.logits, (size_t)a.c.vocab * 4));
    CHECK(sa.mtp_pos == sb.mtp_pos && sa.nq == sb.nq);
    for (int l = 0; l <= a.c.n_layers; l++) {
        int n = l < a.c.n_layers ? sb.pos : sb.mtp_pos;
        CHECK(!memcmp(kv_lat(&a.kv, 0, l), kv_lat(&b.kv, 0, l), (size_t)n * a.c.kv_lora * 4));
        CHECK(!memcmp(kv_rope(&a.kv, 0, l), kv_rope(&b.kv, 0, l), (size_t)n * a.c.qk_rope * 4));
    }
    /* and plain greedy decoding of the whole conversation agrees */
    CHECK(fwd_tokens(&p, ids, n1 + 6, 0, NULL) == 0);
    for (int i = 0; i < 12; i++) {
        plain[i] = argmax(p.sc.logits, p.c.vocab);
        CHECK(fwd_tokens(&p, &plain[i], 1, n1 + 6 + i, NULL) == 0);
    }
    CHECK(!memcmp(plain, t2a, sizeof t2a));
    st.nq += 1; /* a queue out of step with the cached positions is refused */
    CHECK(spec_resume(&sb, &st) == -1);
    /* a model that does not load the MTP head reads the file and ignores that part */
    kvp_state_free(&st);
    kvp_state_free(&mem);
    spec_free(&sa), spec_free(&sb);
    unlink(path);
    model_free(&a), model_free(&b), model_free(&p);
}

/* ------------------------------------------------------------ hostile files */

static char *slurp(const char *path, size_t *n) { return compat_read_file(path, 1 << 24, n); }

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_hostile(void) {
    static coli_model m, o;
    char path[256], bad[256], err[600];
    tmpname(path, sizeof path, "good"), tmpname(bad, sizeof bad, "bad");
    if (load(&m, FIX5) || load(&o, FIX52)) { CHECK(0); return; }
    uint64_t fp = kvp_fingerprint(&m, FIX5);
    int tok[32];
    int n_kv = first_turn(&m, tok);
    CHECK(kvp_save(&m, path, fp, tok, 18, n_kv, NULL, err, sizeof err) == 0);
    size_t n;
    char *good = slurp(path, &n);
    CHECK(good && n > 1000);
    if (!good) return;
    kvp_state st;
    int refused = 0, cut = 0;
    for (size_t len = 0; len < n; len++) { /* truncated at every byte */
        spit(bad, good, len);
        err[0] = 0;
        int rc = kvp_load(&m, bad, fp, &st, err, sizeof err);
        refused += rc == -1 && strstr(err, bad) != NULL;
        cut++;
    }
    CHECK(refused == cut);
    refused = 0;
    for (size_t i = 0; i < n; i++) { /* every byte changed */
        good[i] ^= 0x20;
        spit(bad, good, n);
        good[i] ^= 0x20;
        err[0] = 0;
        refused += kvp_load(&m, bad, fp, &st, err, sizeof err) == -1 && err[0];
    }
    CHECK(refused == (int)n);
    spit(bad, good, n); /* the untouched copy loads */
    CHECK(kvp_load(&m, bad, fp, &st, err, sizeof err) == 0 && st.n_tok == 18);
    kvp_state_free(&st);
    CHECK(kvp_load(&o, bad, kvp_fingerprint(&o, FIX52), &st, err, sizeof err) == -1);
    CHECK_HAS(err, "saved by another model");
    good[8] = 2; /* another version, its checksum redone */
    uint64_t h = kvp_fnv_(KVP_FNV0, good, n - 8);
    memcpy(good + n - 8, &h, 8);
    spit(bad, good, n);
    CHECK(kvp_load(&m, bad, fp, &st, err, sizeof err) == -1);
    CHECK_HAS(err, "format version 2");
    spit(bad, good, n + 0); /* a longer file of the right header is refused by size */
    FILE *f = fopen(bad, "ab");
    fputc(0, f);
    fclose(f);
    CHECK(kvp_load(&m, bad, fp, &st, err, sizeof err) == -1);
    unlink(bad);
    CHECK(kvp_load(&m, bad, fp, &st, err, sizeof err) == 1); /* no such file */
    if (mkfifo(bad, 0600) == 0) {
        CHECK(kvp_load(&m, bad, fp, &st, err, sizeof err) == -1); /* never blocks on a FIFO */
        CHECK_HAS(err, "not a regular file");
        unlink(bad);
    } else {
        SKIP("fifo", "a FIFO as a KV file: mkfifo: %s (Windows has no FIFOs)", strerror(errno));
    }
    /* a save that cannot be written leaves the old file whole */
    char dir[300];
    snprintf(dir, sizeof dir, "%s.d/state", path);
    CHECK(kvp_save(&m, dir, fp, tok, 18, n_kv, NULL, err, sizeof err) == -1);
    CHECK_HAS(err, "cannot create");
    free(good);
    unlink(path);
    model_free(&m), model_free(&o);
}

/* Puts a non-regular file of the given kind at path (target: what a
 * symbolic link points to). 0, or -1 where this system or user cannot
 * make one (Windows: only directories; a device needs root). */
static int make_node(const char *kind, const char *path, const char *target) {
    if (!strcmp(kind, "a directory")) return mkdir(path, 0700);
    if (!strcmp(kind, "a FIFO")) return mkfifo(path, 0600);
#ifndef _WIN32
    if (!strcmp(kind, "a symbolic link")) return symlink(target, path);
    if (!strcmp(kind, "a socket")) {
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        if (strlen(path) >= sizeof a.sun_path) return -1;
        memcpy(a.sun_path, path, strlen(path));
        int fd = socket(AF_UNIX, SOCK_STREAM, 0), rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&a, sizeof a);
        if (fd >= 0) close(fd); /* the name stays */
        return rc;
    }
#endif
#ifdef __linux__
    if (!strcmp(kind, "a character device")) return mknod(path, S_IFCHR | 0600, makedev(1, 3)); /* /dev/null's */
#endif
    (void)target;
    errno = ENOSYS;
    return -1;
}

/* Issue #32: KV_SAVE naming a device node replaced it. Every writer now
 * goes through compat_replace's rule: a FIFO, directory, symbolic link,
 * socket or device under the name is refused, naming the file and what it
 * is, and stays exactly as it was (a link's target too); nothing is left
 * beside it. A regular file and a new name are still written, and a name
 * taken while a writer was at work is refused at the rename. */
static void test_replace_rule(void) {
    static coli_model m;
    char dir[256], target[300], path[300], err[600];
    tmpname(dir, sizeof dir, "nodes");
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(target, sizeof target, "%s/target", dir);
    spit(target, "keep", 4);
    if (load(&m, FIX5)) { CHECK(0); return; }
    uint64_t fp = kvp_fingerprint(&m, FIX5);
    int tok[32];
    int n_kv = first_turn(&m, tok);
    uint64_t counts[2] = {1, 2};
    int64_t shape[1] = {2};
    static const char *const kinds[] = {"a FIFO", "a directory", "a symbolic link", "a socket", "a character device"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        snprintf(path, sizeof path, "%s/node%zu", dir, k);
        if (make_node(kinds[k], path, target)) {
            SKIP("replace", "%s cannot be made here (%s)", kinds[k], strerror(errno));
            continue;
        }
        struct stat before, after;
        CHECK(lstat(path, &before) == 0);
        const char *what = compat_unreplaceable(path);
        CHECK(what && !strcmp(what, kinds[k]));
        errno = 0;
        CHECK(compat_write_atomic(path, "x", 1) == -1 && errno == COMPAT_ENOTREG);
        CHECK(kvp_check_target(path, err, sizeof err) == -1);
        CHECK_HAS(err, path);
        CHECK_HAS(err, kinds[k]);
        err[0] = 0;
        CHECK(kvp_save(&m, path, fp, tok, 18, n_kv, NULL, err, sizeof err) == -1);
        CHECK_HAS(err, path);
        CHECK_HAS(err, kinds[k]);
        st_writer w;
        st_writer_init(&w);
        CHECK(st_writer_add(&w, "x", ST_F32, 1, shape) == 0);
        err[0] = 0;
        CHECK(st_writer_begin(&w, path, NULL, err, sizeof err) == -1);
        CHECK_HAS(err, path);
        CHECK_HAS(err, kinds[k]);
        st_writer_free(&w);
        err[0] = 0;
        CHECK(tel_usage_save(path, 1, 2, 0, counts, err, sizeof err) == -1);
        CHECK_HAS(err, path);
        CHECK_HAS(err, kinds[k]);
        CHECK(lstat(path, &after) == 0 && (after.st_mode & S_IFMT) == (before.st_mode & S_IFMT) && after.st_ino == before.st_ino);
        if ((before.st_mode & S_IFMT) == S_IFDIR) CHECK(rmdir(path) == 0);
        else CHECK(unlink(path) == 0);
    }
    size_t n;
    char *t = slurp(target, &n);
    CHECK(t && n == 4 && !memcmp(t, "keep", 4)); /* never written through a link */
    free(t);
    /* taken while the writer was at work: refused at the rename */
    snprintf(path, sizeof path, "%s/late", dir);
    st_writer w;
    st_writer_init(&w);
    CHECK(st_writer_add(&w, "x", ST_F32, 1, shape) == 0);
    CHECK(st_writer_begin(&w, path, NULL, err, sizeof err) == 0);
    float two[2] = {1, 2};
    CHECK(st_writer_data(&w, two, sizeof two, err, sizeof err) == 0);
    if (mkdir(path, 0700) == 0) {
        err[0] = 0;
        CHECK(st_writer_finish(&w, err, sizeof err) == -1);
        CHECK_HAS(err, path);
        CHECK_HAS(err, "a directory");
        struct stat st;
        CHECK(lstat(path, &st) == 0 && S_ISDIR(st.st_mode));
        CHECK(rmdir(path) == 0);
    }
    st_writer_free(&w);
    /* a regular file and a new name are written as before */
    snprintf(path, sizeof path, "%s/state", dir);
    CHECK(kvp_save(&m, path, fp, tok, 18, n_kv, NULL, err, sizeof err) == 0);
    CHECK(kvp_save(&m, path, fp, tok, 18, n_kv, NULL, err, sizeof err) == 0);
    CHECK(compat_write_atomic(target, "new", 3) == 0);
    CHECK(unlink(path) == 0 && unlink(target) == 0);
    DIR *d = opendir(dir); /* nothing left behind: no temporaries */
    int left = 0;
    for (struct dirent *e; d && (e = readdir(d));) left += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK(left == 0);
    rmdir(dir);
    model_free(&m);
}

/* A conversation's turns in one process (conv_turn, as CHAT runs them):
 * an interrupted turn ends cleanly with what it had, and the next turn
 * continues from the cached positions; a turn's ids join the
 * conversation only when it succeeds. */
static void test_turns(void) {
    static coli_model m;
    char err[600];
    if (load(&m, FIX5)) { CHECK(0); return; }
    tok *t = load_tokenizer(FIX5, err, sizeof err);
    CHECK(t != NULL);
    if (!t) return;
    coli_gen g;
    memset(&g, 0, sizeof g);
    g.chat = 1, g.ngen = 5, g.sp.top_p = 1, g.seed = 1, g.chat_mode = 1;
    conv cv;
    fflush(stdout);
    int out = dup(1), null = open("/dev/null", O_WRONLY); /* the replies are not this test's output */
    dup2(null, 1);
    CHECK(conv_open(&cv, &m, &g, t, FIX5) == 0);
    atomic_int flag = 1;
    CHECK(conv_turn(&cv, "Hello.", &flag, NULL) == 0); /* interrupted before its first token */
    size_t n1 = cv.s.ids.n;
    CHECK(n1 > 5 && cv.s.n_kv == (int)n1);
    flag = 0;
    CHECK(conv_turn(&cv, "Again.", &flag, NULL) == 0);
    CHECK(cv.s.ids.n > n1 && cv.s.n_kv >= (int)n1);
    g.ngen = 20;
    for (int i = 0; i < 40 && cv.s.ids.n < 200; i++) CHECK(conv_turn(&cv, "More words here and there.", &flag, NULL) == 0);
    size_t n2 = cv.s.ids.n;
    char big[1200];
    memset(big, 'a', sizeof big - 1), big[sizeof big - 1] = 0;
    int fatal = -1;
    CHECK(conv_turn(&cv, big, &flag, &fatal) == EXIT_INPUT); /* past CTX: refused, the conversation unchanged */
    CHECK(cv.s.ids.n == n2 && fatal == 0 && !cv.s.m->err[0]); /* a turn refused is not the model failing: the chat goes on */
    CHECK(conv_turn(&cv, "Still here.", &flag, &fatal) == 0 && cv.s.ids.n > n2);
    conv_close(&cv);
    fflush(stdout);
    dup2(out, 1);
    close(out), close(null);
    tok_free(t);
    model_free(&m);
}

int main(void) {
    (void)coli_main;
    test_resume_plain();
    test_resume_spec();
    test_hostile();
    test_replace_rule();
    test_turns();
    return check_report("test_kv");
}
