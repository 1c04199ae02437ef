/* test_io.c — the expert I/O engine: every mode (sync, pool, io_uring when
 * built with it) and O_DIRECT on/off return the same bytes, including
 * unaligned ranges and the unaligned tail of a file; mirrors are accepted
 * only when identical, share reads by weight, and a failing mirror falls
 * back to the primary; injected EIO, a truncated file and out-of-range
 * requests fail cleanly; offsets past 4 GiB read right. */
#include "io.h"

#include "check.h"

static char dir[128], mdir[128];
enum { NFILES = 2, FSIZE = 3 * 1024 * 1024 + 123 }; /* not a multiple of 4096 */

static uint8_t byte_at(int file, uint64_t off) { return (uint8_t)(off * 131 + (off >> 9) * 7 + (uint64_t)file * 29); }

/* Writes a file whose first 8 bytes look like a safetensors header length
 * of 16 and whose bytes are a known function of the offset. */
static void make_file(const char *path, int file) {
    uint8_t *b = malloc(FSIZE);
    for (uint64_t i = 0; i < FSIZE; i++) b[i] = byte_at(file, i);
    memset(b, 0, 8);
    b[0] = 16;
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, FSIZE, f);
    fclose(f);
    free(b);
}

static int check_bytes(const io_req *r) {
    for (size_t i = 0; i < r->len; i++) {
        uint64_t off = r->off + i;
        uint8_t want = off < 8 ? (off == 0 ? 16 : 0) : byte_at(r->file, off);
        if (r->data[i] != want) return 0;
    }
    return 1;
}

static char *paths[NFILES], *mirrors[1];

static void test_mode(int mode, int direct, int nmirror) {
    io_ctx c;
    io_opts o = {mode, 3, direct, 0, {1, 1}, 0, 0};
    int rc = io_open(&c, &o, paths, NFILES, mirrors, nmirror);
    if (mode == IO_URING && !io_have_uring()) {
        CHECK(rc == -1);
        CHECK_HAS(c.err, "no io_uring");
        io_close(&c);
        if (!direct && !nmirror) SKIP("io_uring", "reads through io_uring: this build has no liburing");
        return;
    }
    CHECK(rc == 0);
    if (rc) { fprintf(stderr, "%s\n", c.err); return; }
    enum { N = 24 };
    io_req req[N], *rp[N];
    uint8_t done[N] = {0};
    uint64_t offs[N];
    size_t lens[N];
    uint32_t seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        lens[i] = 1 + seed % 300000;
        seed = seed * 1103515245u + 12345u;
        offs[i] = seed % (FSIZE - lens[i]);
    }
    offs[0] = 0, lens[0] = 4096;               /* aligned */
    offs[1] = FSIZE - 77, lens[1] = 77;        /* the unaligned tail */
    offs[2] = 4095, lens[2] = 2;               /* straddles a page */
    for (int i = 0; i < N; i++) {
        size_t cap = lens[i] + IO_SLACK;
        req[i] = (io_req){.file = i % NFILES, .off = offs[i], .len = lens[i], .buf = compat_aligned_alloc(IO_ALIGN, cap), .cap = cap, .direct = 1};
        rp[i] = &req[i];
    }
    CHECK(io_submit(&c, rp, N) == 0);
    int seen = 0, ok = 1;
    for (;;) {
        int i = io_wait_any(&c, rp, done, N);
        if (i < 0) break;
        done[i] = 1;
        seen++;
        ok &= io_state(&req[i]) == 1 && check_bytes(&req[i]);
    }
    CHECK(seen == N && ok);
    if (!ok) fprintf(stderr, "mode %d direct %d mirrors %d: wrong bytes\n", mode, direct, nmirror);
    if (direct) CHECK(!c.direct_refused); /* ext4/xfs take O_DIRECT; tmpfs would refuse */
    uint64_t tot = 0;
    for (int d = 0; d < c.ndrives; d++) tot += c.reads[d];
    CHECK(tot == N);
    if (nmirror) CHECK(c.reads[0] > 0 && c.reads[1] > 0); /* both drives served */
    /* an immediate wait works too */
    io_req one = {.file = 1, .off = 12345, .len = 1000, .buf = req[0].buf, .cap = req[0].cap, .direct = 1};
    io_req *op = &one;
    CHECK(io_submit(&c, &op, 1) == 0 && io_wait(&c, &one) == 0 && check_bytes(&one));
    for (int i = 0; i < N; i++) compat_aligned_free(req[i].buf);
    io_close(&c);
}

static void test_faults(int mode) {
    if (mode == IO_URING && !io_have_uring()) {
        SKIP("io_uring", "injected faults through io_uring: this build has no liburing");
        return;
    }
    io_ctx c;
    io_opts o = {mode, 2, 1, 0, {1, 0}, 3, 0}; /* the third read fails */
    CHECK(io_open(&c, &o, paths, NFILES, NULL, 0) == 0);
    uint8_t *buf = compat_aligned_alloc(IO_ALIGN, 65536 + IO_SLACK);
    int fails = 0;
    for (int i = 0; i < 5; i++) {
        io_req r = {.file = 0, .off = (uint64_t)i * 1000, .len = 65536, .buf = buf, .cap = 65536 + IO_SLACK, .direct = 1}, *rp = &r;
        io_submit(&c, &rp, 1);
        int rc = io_wait(&c, &r);
        if (rc) {
            CHECK(rc == -EIO && i == 2);
            fails++;
        } else CHECK(check_bytes(&r));
    }
    CHECK(fails == 1);
    /* a range past the end of the file */
    io_req r = {.file = 0, .off = FSIZE - 10, .len = 20, .buf = buf, .cap = 65536 + IO_SLACK, .direct = 1}, *rp = &r;
    io_submit(&c, &rp, 1);
    CHECK(io_wait(&c, &r) == -EIO);
    io_close(&c);
    compat_aligned_free(buf);
}

#ifdef COLI_HAVE_URING
/* Reads left on the ring unsubmitted, as a failed io_uring_submit (EAGAIN,
 * EBUSY) leaves them: io_wait and io_wait_any submit them, not wait
 * forever (an alarm turns a hang into a failure). `refusals` waits are
 * refused with EBUSY first: a few are retried; past 1,000 (1 s) the wait
 * fails with EBUSY. */
static void test_uring_unsubmitted(int refusals) {
    io_ctx c;
    io_opts o = {IO_URING, 2, 0, 0, {1, 0}, 0, refusals};
    CHECK(io_open(&c, &o, paths, NFILES, NULL, 0) == 0);
    enum { N = 3 };
    io_req req[N], *rp[N];
    uint8_t done[N] = {0};
    for (int i = 0; i < N; i++) {
        req[i] = (io_req){.file = i % NFILES, .off = 1000 + 70000 * (uint64_t)i, .len = 5000, .buf = compat_aligned_alloc(IO_ALIGN, 5000 + IO_SLACK),
                          .cap = 5000 + IO_SLACK, .direct = 1};
        rp[i] = &req[i];
        io_set_state_(&req[i], 0);
        io_plan_(&c, &req[i], 0);
        CHECK(io_uring_queue_(&c, &req[i]) == 0); /* queued, never submitted */
    }
    alarm(20);
    if (refusals >= 2000) { /* refused past the 1,000 tries a wait allows, twice: both waits fail with the reads they waited for */
        CHECK(io_wait(&c, &req[1]) == -EBUSY);
        done[1] = 1;
        CHECK(io_wait_any(&c, rp, done, N) >= 0);
        for (int k = 0; k < N; k++) CHECK(io_state(&req[k]) == -EBUSY);
    } else {
        CHECK(io_wait(&c, &req[1]) == 0 && check_bytes(&req[1]));
        done[1] = 1;
        int seen = 1, i;
        while ((i = io_wait_any(&c, rp, done, N)) >= 0) {
            done[i] = 1, seen++;
            CHECK(io_state(&req[i]) == 1 && check_bytes(&req[i]));
        }
        CHECK(seen == N);
        CHECK(c.o.refuse_waits == 0); /* every refusal was met and retried */
    }
    alarm(0);
    for (int k = 0; k < N; k++) compat_aligned_free(req[k].buf);
    io_close(&c);
}
#endif

/* A file truncated after it was opened: the read fails, never zeros. */
static void test_truncated(int mode) {
    if (mode == IO_URING && !io_have_uring()) {
        SKIP("io_uring", "truncated file through io_uring: this build has no liburing");
        return;
    }
    char p[256];
    snprintf(p, sizeof p, "%s/t.bin", dir);
    make_file(p, 0);
    char *one[1] = {p};
    io_ctx c;
    io_opts o = {mode, 2, 1, 0, {1}, 0, 0};
    CHECK(io_open(&c, &o, one, 1, NULL, 0) == 0);
    CHECK(truncate(p, 100000) == 0);
    uint8_t *buf = compat_aligned_alloc(IO_ALIGN, 300000 + IO_SLACK);
    io_req r = {.file = 0, .off = 50000, .len = 200000, .buf = buf, .cap = 300000 + IO_SLACK, .direct = 1}, *rp = &r;
    io_submit(&c, &rp, 1);
    CHECK(io_wait(&c, &r) == -EIO);
    compat_aligned_free(buf);
    io_close(&c);
    unlink(p);
}

/* A mirror that differs is not used; one that fails later is dropped for
 * the primary, and the bytes are still right. */
static void test_mirror_fallback(void) {
    char mp[256];
    snprintf(mp, sizeof mp, "%s/f1.bin", mdir);
    FILE *f = fopen(mp, "r+b");
    fseek(f, 0, SEEK_SET);
    fputc(17, f); /* header length differs */
    fclose(f);
    io_ctx c;
    io_opts o = {IO_SYNC, 0, 0, 0, {1, 1}, 0, 0};
    CHECK(io_open(&c, &o, paths, NFILES, mirrors, 1) == 0);
    CHECK(io_file_drives(&c, 0) == 2 && io_file_drives(&c, 1) == 1);
    io_close(&c);
    make_file(mp, 1);
    CHECK(io_open(&c, &o, paths, NFILES, mirrors, 1) == 0);
    CHECK(io_file_drives(&c, 1) == 2);
    char m0[256];
    snprintf(m0, sizeof m0, "%s/f0.bin", mdir);
    CHECK(truncate(m0, 4096) == 0); /* the mirror goes bad under the engine */
    uint8_t *buf = compat_aligned_alloc(IO_ALIGN, 100000 + IO_SLACK);
    int ok = 1;
    for (int i = 0; i < 40; i++) {
        io_req r = {.file = 0, .off = 10000 + (uint64_t)i * 50000, .len = 100000, .buf = buf, .cap = 100000 + IO_SLACK}, *rp = &r;
        io_submit(&c, &rp, 1);
        ok &= io_wait(&c, &r) == 0 && check_bytes(&r);
    }
    CHECK(ok && c.mirror_failed[1]);
    compat_aligned_free(buf);
    io_close(&c);
    make_file(m0, 0);
}

static void test_weights(void) {
    io_ctx c;
    io_opts o = {IO_SYNC, 0, 0, 0, {3, 1}, 0, 0};
    CHECK(io_open(&c, &o, paths, NFILES, mirrors, 1) == 0);
    int n[2] = {0, 0};
    for (uint64_t off = 0; off < 4000 * (uint64_t)IO_ALIGN; off += IO_ALIGN) n[io_pick_drive(&c, 0, off)]++;
    CHECK(n[0] > 2800 && n[0] < 3200); /* 3:1 */
    CHECK(io_pick_drive(&c, 0, 777 * IO_ALIGN) == io_pick_drive(&c, 0, 777 * IO_ALIGN));
    io_close(&c);
}

/* Offsets past 4 GiB (32-bit offsets or a 32-bit long would wrap): a
 * sparse file of 4 GiB + 64 KiB + 123 bytes whose last 128 KiB hold the
 * pattern, read across the 4 GiB mark and at its unaligned tail, by every
 * mode, buffered, O_DIRECT and mapped, and by compat_pread_full. */
static void test_large_offsets(void) {
    const uint64_t G4 = (uint64_t)1 << 32, lo = G4 - 65536, size = G4 + 65536 + 123;
    char p[256];
    snprintf(p, sizeof p, "%s/big.bin", dir);
    uint8_t *b = malloc(size - lo);
    CHECK(b != NULL);
    if (!b) return;
    for (uint64_t i = lo; i < size; i++) b[i - lo] = byte_at(0, i);
    uint8_t head[8] = {16};
    FILE *f = fopen(p, "wb");
    int made = f && fwrite(head, 1, 8, f) == 8 && !fseeko(f, (off_t)lo, SEEK_SET) && fwrite(b, 1, size - lo, f) == size - lo;
    made &= f && !fclose(f);
    free(b);
    CHECK(made);
    if (!made) return;
    const uint64_t offs[3] = {G4 - 5000, size - 3000, lo + 17};
    const size_t lens[3] = {10000, 3000, 70000};
    uint8_t *buf = compat_aligned_alloc(IO_ALIGN, 80000 + IO_SLACK);
    int fd = compat_open_regular(p, 0), ok = fd >= 0;
    for (int i = 0; ok && i < 3; i++) {
        io_req r = {.file = 0, .off = offs[i], .len = lens[i], .data = buf};
        ok = !compat_pread_full(fd, buf, lens[i], offs[i]) && check_bytes(&r);
    }
    if (fd >= 0) close(fd);
    CHECK(ok);
    char *one[1] = {p};
    const int modes[3] = {IO_SYNC, IO_POOL, IO_URING};
    for (int k = 0; k < 3; k++)
        for (int how = 0; how < 3; how++) { /* buffered, O_DIRECT, mapped */
            if (modes[k] == IO_URING && !io_have_uring()) continue;
            io_ctx c;
            io_opts o = {modes[k], 2, how == 1, how == 2, {1}, 0, 0};
            CHECK(io_open(&c, &o, one, 1, NULL, 0) == 0);
            for (int i = 0; i < 3; i++) {
                io_req r = {.file = 0, .off = offs[i], .len = lens[i], .buf = buf, .cap = 80000 + IO_SLACK, .direct = 1}, *rp = &r;
                int good = io_submit(&c, &rp, 1) == 0 && io_wait(&c, &r) == 0 && check_bytes(&r);
                CHECK(good);
                if (!good) fprintf(stderr, "large offsets: mode %d how %d offset %llu: wrong bytes\n", modes[k], how, (unsigned long long)offs[i]);
            }
            io_close(&c);
        }
    compat_aligned_free(buf);
    unlink(p);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/colibri-test-io-XXXXXX");
    snprintf(mdir, sizeof mdir, "/tmp/colibri-test-io-mirror-XXXXXX");
    if (!mkdtemp(dir) || !mkdtemp(mdir)) return 1;
    char m[NFILES][256];
    for (int i = 0; i < NFILES; i++) {
        paths[i] = malloc(256);
        snprintf(paths[i], 256, "%s/f%d.bin", dir, i);
        make_file(paths[i], i);
        snprintf(m[i], sizeof m[i], "%s/f%d.bin", mdir, i);
        make_file(m[i], i);
    }
    mirrors[0] = mdir;
    int modes[3] = {IO_SYNC, IO_POOL, IO_URING};
    for (int k = 0; k < 3; k++)
        for (int direct = 0; direct < 2; direct++)
            for (int nm = 0; nm < 2; nm++) test_mode(modes[k], direct, nm);
    for (int k = 0; k < 3; k++) test_faults(modes[k]), test_truncated(modes[k]);
    test_weights();
    test_mirror_fallback();
    test_large_offsets();
#ifdef COLI_HAVE_URING
    if (io_have_uring())
        for (int r = 0; r < 3; r++) test_uring_unsubmitted((int[]){0, 7, 2100}[r]); /* none, a few retried, more than the wait allows */
#endif
    printf("test_io: io_uring %s in this build, %d NUMA node(s)\n", io_have_uring() ? "present" : "absent", io_numa_nodes());
    if (check_rm_tree(dir) || check_rm_tree(mdir)) return 1;
    for (int i = 0; i < NFILES; i++) free(paths[i]);
    return check_report("test_io");
}
