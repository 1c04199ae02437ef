/* io.h — expert I/O: byte ranges of shard files read into memory by
 * buffered pread, O_DIRECT, io_uring (liburing, when built with it) or a
 * pool of reader threads; each read routed to the primary drive or a
 * byte-identical mirror; page-cache hints; mmap'd shards; NUMA interleave.
 * An injectable failure (the Nth read returns EIO) serves fault tests.
 * Only the thread that owns an io_ctx submits and waits; the pool's workers
 * only read. Prefix: io_. Must not: exit, read the environment, or know
 * what the bytes are (experts, layouts: store.h). */
#ifndef COLI_IO_H
#define COLI_IO_H

#include <pthread.h>
#include <stdarg.h>

#include "compat.h"

#ifdef COLI_HAVE_URING
#include <liburing.h>
#endif
#ifdef COLI_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

#define IO_ALIGN 4096u         /* O_DIRECT offset/length/buffer alignment */
#define IO_SLACK (2 * IO_ALIGN) /* extra bytes a direct-read buffer needs */
#define IO_MAX_DRIVES 8        /* primary + mirrors */
#define IO_QUEUE 1024          /* in-flight requests (pool queue, ring depth) */

enum { IO_SYNC, IO_POOL, IO_URING };

typedef struct {
    int fd[IO_MAX_DRIVES];     /* buffered, per drive (-1 = not on that drive) */
    int dfd[IO_MAX_DRIVES];    /* O_DIRECT twin or -1 */
    uint64_t size;
    const uint8_t *map;        /* COLI_MMAP: the whole file, read-only */
    char *path;
} io_file;

/* One read: `len` bytes at `off` of file `file` into buf (cap bytes). For
 * O_DIRECT, buf must be IO_ALIGN-aligned with cap ≥ len + IO_SLACK; the
 * bytes then start at `data` = buf + (off mod IO_ALIGN). */
typedef struct {
    int file;
    uint64_t off;
    size_t len;
    uint8_t *buf;
    size_t cap;
    int direct;                /* may use O_DIRECT (weights yes, small scale arrays no) */
    uint8_t *data;             /* out */
    int state;                 /* out: 0 pending, 1 done, -errno failed (atomic) */
    double t_sub, t_done;      /* when it was submitted, when it finished */
    int drive;                 /* out: which drive served it */
    uint64_t aoff;             /* internal: aligned offset actually read */
    size_t alen, got;
} io_req;

typedef struct {
    int mode;                  /* IO_SYNC / IO_POOL / IO_URING */
    int workers;               /* pool threads */
    int direct;                /* open O_DIRECT twins and use them for direct-capable reads */
    int mmap;                  /* map every shard */
    double weight[IO_MAX_DRIVES]; /* read share per drive (primary first); 0 = not used */
    long long fail_at;         /* > 0: the fail_at-th read fails with EIO (fault tests) */
    int refuse_waits;          /* > 0: that many ring waits fail with EBUSY first (fault tests) */
} io_opts;

typedef struct {
    io_opts o;
    io_file *f;
    int nf, ndrives;
    char err[600];
    /* statistics */
    uint64_t bytes[IO_MAX_DRIVES], reads[IO_MAX_DRIVES];
    uint64_t busy_ns;          /* thread-nanoseconds inside reads */
    long long nread;           /* reads started (fault injection counter) */
    int mirror_failed[IO_MAX_DRIVES], direct_refused;
    /* pool */
    pthread_t thr[64];
    int nthr, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    io_req *queue[IO_QUEUE];
    int qhead, qtail;
#ifdef COLI_HAVE_URING
    struct io_uring ring;
    int ring_on, inflight;
#endif
} io_ctx;

static inline int io_fail(io_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Whether this build has io_uring / libnuma. */
static inline int io_have_uring(void) {
#ifdef COLI_HAVE_URING
    return 1;
#else
    return 0;
#endif
}

static inline int io_have_numa(void) {
#ifdef COLI_HAVE_NUMA
    return 1;
#else
    return 0;
#endif
}

/* Deterministic drive for a read at (file, off): a hash into [0,1) cut by
 * the drives' weights among those holding the file. The same range always
 * goes to the same drive, so nothing is cached twice. */
static inline int io_pick_drive(const io_ctx *c, int file, uint64_t off) {
    const io_file *f = &c->f[file];
    double tot = 0;
    for (int d = 0; d < c->ndrives; d++)
        if (f->fd[d] >= 0 && !c->mirror_failed[d]) tot += c->o.weight[d];
    if (tot <= 0) return 0;
    uint64_t h = (uint64_t)file * 0x9e3779b97f4a7c15ull ^ (off / IO_ALIGN) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    double u = (double)(h >> 11) / 9007199254740992.0 * tot, acc = 0;
    for (int d = 0; d < c->ndrives; d++) {
        if (f->fd[d] < 0 || c->mirror_failed[d]) continue;
        acc += c->o.weight[d];
        if (u < acc) return d;
    }
    return 0;
}

/* Reads at least `need` bytes (up to len) at off into buf, looping over
 * short reads and EINTR; an O_DIRECT read may stop at end of file once the
 * needed bytes are in. Returns 0 or -errno (-EIO when the file ends first). */
static inline int io_pread_min_(int fd, uint8_t *buf, size_t len, uint64_t off, size_t need) {
    size_t got = 0;
    while (got < need) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;
        got += (size_t)n;
    }
    return 0;
}

/* Geometry of request r on drive d: O_DIRECT when asked, possible and the
 * buffer allows it; the aligned range then covers [off, off + len). */
static inline void io_plan_(const io_ctx *c, io_req *r, int d) {
    const io_file *f = &c->f[r->file];
    int dir = r->direct && c->o.direct && f->dfd[d] >= 0 && ((uintptr_t)r->buf % IO_ALIGN) == 0 && r->cap >= r->len + IO_SLACK;
    r->direct = dir;
    r->drive = d;
    r->aoff = dir ? r->off / IO_ALIGN * IO_ALIGN : r->off;
    r->alen = dir ? (size_t)((r->off + r->len - r->aoff + IO_ALIGN - 1) / IO_ALIGN * IO_ALIGN) : r->len;
    r->got = 0;
}

static inline void io_account_(io_ctx *c, io_req *r) {
    r->data = r->buf + (r->off - r->aoff);
    __atomic_add_fetch(&c->bytes[r->drive], (uint64_t)r->len, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->reads[r->drive], 1, __ATOMIC_RELAXED);
}

/* One attempt on drive d; an O_DIRECT read the file system refuses
 * (EINVAL) is repeated buffered, and O_DIRECT is off from then on. */
static inline int io_read_drive_(io_ctx *c, io_req *r, int d) {
    for (;;) {
        io_plan_(c, r, d);
        const io_file *f = &c->f[r->file];
        int rc = io_pread_min_(r->direct ? f->dfd[d] : f->fd[d], r->buf, r->alen, r->aoff, (size_t)(r->off + r->len - r->aoff));
        if (!rc) {
            io_account_(c, r);
            return 0;
        }
        if (!(r->direct && rc == -EINVAL)) return rc;
        __atomic_store_n(&c->direct_refused, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&c->o.direct, 0, __ATOMIC_RELAXED);
    }
}

/* Whether this read is the one fault injection fails. */
static inline int io_fault_(io_ctx *c) {
    long long n = __atomic_add_fetch(&c->nread, 1, __ATOMIC_RELAXED);
    return c->o.fail_at > 0 && n == c->o.fail_at;
}

static inline void io_add_busy_(io_ctx *c, double t0) {
    __atomic_add_fetch(&c->busy_ns, (uint64_t)((compat_now() - t0) * 1e9), __ATOMIC_RELAXED);
}

static inline int io_state(const io_req *r) { return __atomic_load_n(&r->state, __ATOMIC_ACQUIRE); }
static inline void io_set_state_(io_req *r, int v) {
    if (v) r->t_done = compat_now();
    __atomic_store_n(&r->state, v, __ATOMIC_RELEASE);
}

/* Performs one read on the calling thread: routed drive, O_DIRECT when
 * asked and possible, a failing mirror replaced by the primary (and not
 * used again). Sets r->data (not r->state: the caller publishes it);
 * returns 0 or -errno. Safe from several threads for distinct requests. */
static inline int io_do_read(io_ctx *c, io_req *r) {
    double t0 = compat_now();
    const io_file *f = &c->f[r->file];
    int rc;
    if (io_fault_(c) || r->off > f->size || r->len > f->size - r->off) rc = -EIO;
    else {
        int d = io_pick_drive(c, r->file, r->off);
        rc = io_read_drive_(c, r, d);
        if (rc && d != 0) {
            __atomic_store_n(&c->mirror_failed[d], 1, __ATOMIC_RELAXED);
            rc = io_read_drive_(c, r, 0);
        }
    }
    io_add_busy_(c, t0);
    return rc;
}

/* ---- pool ---- */

static void *io_worker_(void *arg) {
    io_ctx *c = (io_ctx *)arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->qhead == c->qtail) pthread_cond_wait(&c->cv_work, &c->mu);
        if (c->stop) break;
        io_req *r = c->queue[c->qhead % IO_QUEUE];
        c->qhead++;
        pthread_mutex_unlock(&c->mu);
        int rc = io_do_read(c, r);
        pthread_mutex_lock(&c->mu);
        io_set_state_(r, rc ? rc : 1);
        pthread_cond_broadcast(&c->cv_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- setup ---- */

/* Opens the n shard files (paths) on the primary drive and, for each
 * mirror directory, the same-named file if it is byte-identical in size and
 * safetensors header (else that shard stays on the primary). With direct,
 * O_DIRECT twins are opened (a file system that refuses them is reported
 * in c->direct_refused and read buffered). Starts the pool or the ring.
 * Returns 0, or -1 with c->err naming the file. */
static inline int io_open(io_ctx *c, const io_opts *o, char *const *paths, int n, char *const *mirrors, int nmirrors) {
    memset(c, 0, sizeof *c);
    c->o = *o;
    c->nf = n;
    c->ndrives = 1 + nmirrors;
    if (c->ndrives > IO_MAX_DRIVES) return io_fail(c, "at most %d mirror directories", IO_MAX_DRIVES - 1);
    if (!(c->f = (io_file *)calloc((size_t)(n ? n : 1), sizeof(io_file)))) return io_fail(c, "out of memory");
    for (int i = 0; i < n; i++) {
        io_file *f = &c->f[i];
        for (int d = 0; d < IO_MAX_DRIVES; d++) f->fd[d] = f->dfd[d] = -1;
        if (!(f->path = strdup(paths[i]))) return io_fail(c, "out of memory");
        if ((f->fd[0] = compat_open_regular(paths[i], 0)) < 0) return io_fail(c, "%s: %s", paths[i], compat_strerror(errno));
        f->size = (uint64_t)compat_file_size(f->fd[0]);
        if (o->direct) {
            f->dfd[0] = compat_open_regular(paths[i], O_DIRECT);
            if (f->dfd[0] < 0) c->direct_refused = 1;
        }
        if (o->mmap) {
            void *p = f->size ? mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd[0], 0) : NULL;
            if (p == MAP_FAILED) return io_fail(c, "%s: mmap: %s", paths[i], strerror(errno));
            f->map = (const uint8_t *)p;
        }
        const char *base = strrchr(paths[i], '/');
        base = base ? base + 1 : paths[i];
        for (int m = 0; m < nmirrors; m++) {
            char mp[4096];
            snprintf(mp, sizeof mp, "%s/%s", mirrors[m], base);
            int fd = compat_open_regular(mp, 0);
            if (fd < 0) continue;
            int same = (uint64_t)compat_file_size(fd) == f->size;
            uint8_t h1[8], h2[8];
            uint64_t hl = 0;
            if (same && f->size >= 8 && !compat_pread_full(f->fd[0], h1, 8, 0) && !compat_pread_full(fd, h2, 8, 0) && !memcmp(h1, h2, 8)) {
                for (int k = 7; k >= 0; k--) hl = (hl << 8) | h1[k];
                size_t want = hl + 8 <= f->size && hl < ((uint64_t)100 << 20) ? (size_t)hl + 8 : 0;
                uint8_t *a = want ? (uint8_t *)malloc(want) : NULL, *b = want ? (uint8_t *)malloc(want) : NULL;
                same = a && b && !compat_pread_full(f->fd[0], a, want, 0) && !compat_pread_full(fd, b, want, 0) && !memcmp(a, b, want);
                free(a);
                free(b);
            } else same = 0;
            if (!same) {
                close(fd);
                continue;
            }
            f->fd[1 + m] = fd;
            if (o->direct) f->dfd[1 + m] = compat_open_regular(mp, O_DIRECT);
        }
    }
    if (o->mode == IO_POOL) {
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cv_work, NULL);
        pthread_cond_init(&c->cv_done, NULL);
        int w = o->workers < 1 ? 1 : o->workers > 64 ? 64 : o->workers;
        for (; c->nthr < w; c->nthr++)
            if (pthread_create(&c->thr[c->nthr], NULL, io_worker_, c)) return io_fail(c, "cannot start I/O worker threads");
    }
#ifdef COLI_HAVE_URING
    if (o->mode == IO_URING) {
        int rc = io_uring_queue_init(IO_QUEUE, &c->ring, 0);
        if (rc < 0) return io_fail(c, "io_uring setup failed: %s", strerror(-rc));
        c->ring_on = 1;
    }
#else
    if (o->mode == IO_URING) return io_fail(c, "this build has no io_uring (liburing was not found at build time)");
#endif
    return 0;
}

/* Drives (primary first) on which file i is readable. */
static inline int io_file_drives(const io_ctx *c, int i) {
    int n = 0;
    for (int d = 0; d < c->ndrives; d++) n += c->f[i].fd[d] >= 0;
    return n;
}

static inline void io_close(io_ctx *c) {
    if (c->nthr) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv_work);
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < c->nthr; i++) pthread_join(c->thr[i], NULL);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv_work);
        pthread_cond_destroy(&c->cv_done);
    }
#ifdef COLI_HAVE_URING
    if (c->ring_on) io_uring_queue_exit(&c->ring);
#endif
    for (int i = 0; c->f && i < c->nf; i++) {
        io_file *f = &c->f[i];
        for (int d = 0; d < IO_MAX_DRIVES; d++) {
            if (f->fd[d] >= 0) close(f->fd[d]);
            if (f->dfd[d] >= 0) close(f->dfd[d]);
        }
        if (f->map) munmap((void *)f->map, (size_t)f->size);
        free(f->path);
    }
    free(c->f);
    memset(c, 0, sizeof *c);
}

/* ---- submit / wait ---- */

#ifdef COLI_HAVE_URING
/* Queues the (remaining part of the) read on the ring. */
static inline int io_uring_queue_(io_ctx *c, io_req *r) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
    if (!sqe) {
        io_uring_submit(&c->ring);
        if (!(sqe = io_uring_get_sqe(&c->ring))) return -EAGAIN;
    }
    const io_file *f = &c->f[r->file];
    int d = r->drive;
    int fd = r->direct && f->dfd[d] >= 0 ? f->dfd[d] : f->fd[d];
    io_uring_prep_read(sqe, fd, r->buf + r->got, (unsigned)(r->alen - r->got), r->aoff + r->got);
    io_uring_sqe_set_data(sqe, r);
    c->inflight++;
    return 0;
}
#endif

/* Starts n reads. Synchronous mode performs them now; the pool and the
 * ring run them in the background (io_wait collects). Returns 0, or -1 if a
 * request could not be queued (it is then marked failed). */
static inline int io_submit(io_ctx *c, io_req *const *reqs, int n) {
    double now = compat_now();
    for (int i = 0; i < n; i++) io_set_state_(reqs[i], 0), reqs[i]->t_sub = now;
    if (c->o.mode == IO_POOL) {
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < n; i++) {
            if (c->qtail - c->qhead >= IO_QUEUE) {
                pthread_mutex_unlock(&c->mu);
                for (int j = i; j < n; j++) io_set_state_(reqs[j], -EAGAIN);
                return io_fail(c, "I/O queue full");
            }
            c->queue[c->qtail++ % IO_QUEUE] = reqs[i];
        }
        pthread_cond_broadcast(&c->cv_work);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
#ifdef COLI_HAVE_URING
    if (c->o.mode == IO_URING) {
        for (int i = 0; i < n; i++) {
            io_req *r = reqs[i];
            const io_file *f = &c->f[r->file];
            if (io_fault_(c) || r->off > f->size || r->len > f->size - r->off) {
                io_set_state_(r, -EIO);
                continue;
            }
            io_plan_(c, r, io_pick_drive(c, r->file, r->off));
            if (io_uring_queue_(c, r)) io_set_state_(r, -EAGAIN);
        }
        io_uring_submit(&c->ring);
        return 0;
    }
#endif
    for (int i = 0; i < n; i++) {
        int rc = io_do_read(c, reqs[i]);
        io_set_state_(reqs[i], rc ? rc : 1);
    }
    return 0;
}

#ifdef COLI_HAVE_URING
/* Reads request r synchronously on drive d after a failed ring attempt. */
static inline void io_retry_(io_ctx *c, io_req *r, int d) {
    int rc = io_read_drive_(c, r, d);
    io_set_state_(r, rc ? rc : 1);
}

/* The next completion, submitting first what the ring holds unsubmitted:
 * io_uring_submit can fail (EAGAIN, EBUSY) and leave reads queued that a
 * plain wait would wait for forever. A kernel that keeps refusing for 1 s
 * (1,000 tries, 1 ms apart) fails the wait with its error; with nothing
 * queued or in flight there is nothing to wait for (-EIO). */
static inline int io_uring_next_cqe_(io_ctx *c, struct io_uring_cqe **cqe) {
    for (int tries = 0;;) {
        if (io_uring_peek_cqe(&c->ring, cqe) == 0) return 0;
        if (!c->inflight) return -EIO;
        int rc = c->o.refuse_waits > 0 ? (c->o.refuse_waits--, -EBUSY) : io_uring_submit_and_wait(&c->ring, 1);
        if (rc >= 0 || rc == -EINTR) continue;
        if ((rc != -EAGAIN && rc != -EBUSY) || ++tries >= 1000) return rc;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* Reaps one completion: finishes its request, queues the rest of a short
 * read, or retries synchronously (an O_DIRECT read the file system
 * refused, buffered; a failed mirror read, on the primary). Returns 0 or
 * -errno from the wait itself. */
static inline int io_uring_reap_(io_ctx *c) {
    struct io_uring_cqe *cqe;
    int rc = io_uring_next_cqe_(c, &cqe);
    if (rc < 0) return rc;
    io_req *r = (io_req *)io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&c->ring, cqe);
    c->inflight--;
    size_t need = (size_t)(r->off + r->len - r->aoff);
    if (res == -EINVAL && r->direct) {
        c->direct_refused = 1;
        c->o.direct = 0;
        io_retry_(c, r, r->drive);
    } else if (res < 0 && r->drive != 0) {
        c->mirror_failed[r->drive] = 1;
        io_retry_(c, r, 0);
    } else if (res < 0) io_set_state_(r, res);
    else if (res == 0 && r->got < need) io_set_state_(r, -EIO); /* end of file first: the shard shrank */
    else {
        r->got += (size_t)res;
        if (r->got < need && res > 0) { /* short read: queue the rest */
            if (io_uring_queue_(c, r)) io_set_state_(r, -EAGAIN);
            else io_uring_submit(&c->ring);
        } else {
            io_account_(c, r);
            c->busy_ns += (uint64_t)((compat_now() - r->t_sub) * 1e9);
            io_set_state_(r, 1);
        }
    }
    return 0;
}
#endif

/* Waits until request r is finished; returns 0 or -errno (its state). */
static inline int io_wait(io_ctx *c, io_req *r) {
    if (c->o.mode == IO_POOL && !io_state(r)) {
        pthread_mutex_lock(&c->mu);
        while (!io_state(r)) pthread_cond_wait(&c->cv_done, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
#ifdef COLI_HAVE_URING
    while (c->o.mode == IO_URING && !io_state(r)) {
        int rc = io_uring_reap_(c);
        if (rc < 0) io_set_state_(r, rc);
    }
#endif
    int st = io_state(r);
    return st < 0 ? st : 0;
}

/* Index among reqs[0..n) of a finished request whose done[i] is 0, waiting
 * for one if none has finished; -1 if all are done already. */
static inline int io_wait_any(io_ctx *c, io_req *const *reqs, const uint8_t *done, int n) {
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            if (io_state(reqs[i])) return i;
            pending = 1;
        }
        if (!pending) return -1;
        if (c->o.mode == IO_POOL) {
            pthread_mutex_lock(&c->mu);
            int any = 0;
            for (int i = 0; i < n && !any; i++) any = !done[i] && io_state(reqs[i]);
            if (!any) pthread_cond_wait(&c->cv_done, &c->mu);
            pthread_mutex_unlock(&c->mu);
        }
#ifdef COLI_HAVE_URING
        else if (c->o.mode == IO_URING) {
            int rc = io_uring_reap_(c);
            if (rc < 0)
                for (int i = 0; i < n; i++)
                    if (!done[i] && !io_state(reqs[i])) io_set_state_(reqs[i], rc);
        }
#endif
    }
}

/* Read bandwidth of drive d (bytes/s) measured on file i: up to `bytes`
 * in 4 MiB requests, with O_DIRECT when the drive has it (so the page cache
 * does not flatter). Returns 0 if nothing could be read. */
static inline double io_probe(io_ctx *c, int i, int d, uint64_t bytes) {
    const io_file *f = &c->f[i];
    int fd = f->dfd[d] >= 0 ? f->dfd[d] : f->fd[d];
    if (fd < 0) return 0;
    size_t chunk = 4u << 20;
    uint8_t *buf = (uint8_t *)compat_aligned_alloc(IO_ALIGN, chunk);
    if (!buf) return 0;
    uint64_t done = 0, end = f->size / IO_ALIGN * IO_ALIGN;
    if (bytes > end) bytes = end;
    double t0 = compat_now();
    while (done < bytes) {
        size_t n = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
        if (io_pread_min_(fd, buf, n, done, n)) break;
        done += n;
    }
    double dt = compat_now() - t0;
    compat_aligned_free(buf);
    return done && dt > 0 ? done / dt : 0;
}

/* Sets each drive's read share to its bandwidth measured on file i (up to
 * `bytes`; a drive that reads nothing keeps a token share on the primary,
 * none elsewhere). */
static inline void io_measure_weights(io_ctx *c, int i, uint64_t bytes) {
    for (int d = 0; d < c->ndrives; d++) {
        double bw = io_probe(c, i, d, bytes);
        c->o.weight[d] = bw > 0 ? bw : (d ? 0 : 1);
    }
}

/* The drives' read shares (primary first) into w; returns the drive count. */
static inline int io_weights(const io_ctx *c, double *w) {
    for (int d = 0; d < c->ndrives; d++) w[d] = c->o.weight[d];
    return c->ndrives;
}

/* Starts the statistics afresh (bytes and reads per drive, busy time). */
static inline void io_stats_reset(io_ctx *c) {
    memset(c->bytes, 0, sizeof c->bytes);
    memset(c->reads, 0, sizeof c->reads);
    c->busy_ns = 0;
}

/* ---- hints, maps, placement ---- */

/* Asks the kernel to start reading a range into the page cache (a no-op for
 * O_DIRECT reads, which bypass it). */
static inline void io_hint(io_ctx *c, int file, uint64_t off, size_t len, int direct) {
    if (direct && c->o.direct && !c->direct_refused) return;
    int d = io_pick_drive(c, file, off);
#ifdef POSIX_FADV_WILLNEED
    posix_fadvise(c->f[file].fd[d], (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
#endif
}

/* COLI_MMAP: pointer to [off, off+len) of file i, or NULL if the file has
 * shrunk since it was mapped (touching it would raise SIGBUS). */
static inline const uint8_t *io_mapped(io_ctx *c, int i, uint64_t off, size_t len) {
    io_file *f = &c->f[i];
    if (!f->map || off > f->size || len > f->size - off) return NULL;
    int64_t now = compat_file_size(f->fd[0]);
    if (now < 0 || (uint64_t)now < off + len) return NULL;
    return f->map + off;
}

/* NUMA: number of configured nodes (1 without libnuma or when unavailable). */
static inline int io_numa_nodes(void) {
#ifdef COLI_HAVE_NUMA
    if (numa_available() < 0) return 1;
    return numa_num_configured_nodes();
#else
    return 1;
#endif
}

/* Interleaves the pages of a fresh (untouched) allocation across all NUMA
 * nodes. Returns 0, or -errno (EPERM in containers that forbid mbind). */
static inline int io_numa_interleave(void *p, size_t len) {
#ifdef COLI_HAVE_NUMA
    if (!p || !len) return 0;
    uintptr_t a = (uintptr_t)p / 4096 * 4096;
    len += (uintptr_t)p - a;
    struct bitmask *all = numa_all_nodes_ptr;
    if (mbind((void *)a, len, MPOL_INTERLEAVE, all->maskp, all->size + 1, 0)) return -errno;
    return 0;
#else
    (void)p;
    (void)len;
    return -ENOSYS;
#endif
}

#endif
