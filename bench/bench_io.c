/* bench_io.c — O_DIRECT read bandwidth of the disk holding a model, at the
 * engine's access pattern: requests of one expert's size at random 4 KiB-
 * aligned offsets of the given files, with 1..N requests in flight (one
 * thread per request, each a blocking pread, as colibri's PIPE pool does).
 *
 *   make build/rel/bench_io
 *   build/rel/bench_io [--json] [--size BYTES]... [--qd N]... [--time SEC] FILE...
 *
 * Defaults: --size 18874368 (a GLM-5 int4 expert's weights, 3 x 2048 x 6144
 * / 2), --qd 1 --qd 4, --time 2. Sizes are rounded up to 4 KiB. For each
 * (size, qd): GB/s (1e9 bytes/s) over all bytes read, reads done, and the
 * median and worst per-request latency. Files smaller than one request are
 * skipped. O_DIRECT bypasses the page cache, so a previous read of the same
 * bytes does not inflate the figure (the device may still cache).
 * Exit codes: 0 ok, 2 bad arguments or no usable file or O_DIRECT refused. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ALIGN 4096
#define MAXF 256
#define MAXQ 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    int fd;
    uint64_t size;
} file;

static file files[MAXF];
static int nfiles;

typedef struct {
    uint64_t req, seed, bytes, reads;
    double until, *lat;
    size_t nlat, caplat;
    int err;
} worker;

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void *run(void *arg) {
    worker *w = (worker *)arg;
    void *buf = NULL;
    if (posix_memalign(&buf, ALIGN, w->req)) { w->err = ENOMEM; return NULL; }
    while (now() < w->until) {
        const file *f = &files[rnd(&w->seed) % (uint64_t)nfiles];
        uint64_t slots = (f->size - w->req) / ALIGN + 1, off = rnd(&w->seed) % slots * ALIGN;
        double t0 = now();
        uint64_t done = 0;
        while (done < w->req) {
            ssize_t r = pread(f->fd, (char *)buf + done, w->req - done, (off_t)(off + done));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { w->err = r < 0 ? errno : EIO; free(buf); return NULL; }
            done += (uint64_t)r;
        }
        if (w->nlat == w->caplat) {
            w->caplat = w->caplat ? 2 * w->caplat : 256;
            w->lat = realloc(w->lat, w->caplat * sizeof *w->lat);
        }
        w->lat[w->nlat++] = now() - t0;
        w->bytes += done, w->reads++;
    }
    free(buf);
    return NULL;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    uint64_t sizes[16];
    int qds[16], ns = 0, nq = 0, json = 0;
    double secs = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--size") && v && ns < 16) sizes[ns++] = (strtoull(v, NULL, 10) + ALIGN - 1) / ALIGN * ALIGN, i++;
        else if (!strcmp(a, "--qd") && v && nq < 16) qds[nq++] = atoi(v), i++;
        else if (!strcmp(a, "--time") && v) secs = atof(v), i++;
        else if (a[0] == '-') {
            fprintf(stderr, "usage: %s [--json] [--size BYTES]... [--qd N]... [--time SEC] FILE...\n", argv[0]);
            return 2;
        } else if (nfiles < MAXF) {
            int fd = open(a, O_RDONLY | O_DIRECT);
            if (fd < 0) {
                fprintf(stderr, "bench_io: %s: %s\n", a, strerror(errno));
                return 2;
            }
            struct stat st;
            fstat(fd, &st);
            files[nfiles++] = (file){fd, (uint64_t)st.st_size};
        }
    }
    if (!ns) sizes[ns++] = 18874368;
    if (!nq) qds[nq++] = 1, qds[nq++] = 4;
    if (!nfiles || secs <= 0) {
        fprintf(stderr, "bench_io: no files given (or --time not positive)\n");
        return 2;
    }
    if (json) printf("{\"files\": %d, \"results\": [", nfiles);
    int first = 1;
    for (int si = 0; si < ns; si++) {
        /* only files that hold at least one request */
        file all[MAXF];
        int na = nfiles, k = 0;
        memcpy(all, files, sizeof all);
        for (int f = 0; f < na; f++)
            if (all[f].size >= sizes[si]) files[k++] = all[f];
        nfiles = k;
        for (int qi = 0; qi < nq && nfiles; qi++) {
            int q = qds[qi] < 1 ? 1 : qds[qi] > MAXQ ? MAXQ : qds[qi];
            worker w[MAXQ];
            pthread_t th[MAXQ];
            double t0 = now();
            for (int t = 0; t < q; t++) {
                memset(&w[t], 0, sizeof w[t]);
                w[t].req = sizes[si], w[t].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1 + 97 * qi + 7919 * si), w[t].until = t0 + secs;
                pthread_create(&th[t], NULL, run, &w[t]);
            }
            uint64_t bytes = 0, reads = 0;
            size_t nl = 0;
            int err = 0;
            for (int t = 0; t < q; t++) pthread_join(th[t], NULL);
            double dt = now() - t0;
            for (int t = 0; t < q; t++) bytes += w[t].bytes, reads += w[t].reads, nl += w[t].nlat, err = err ? err : w[t].err;
            if (err) {
                fprintf(stderr, "bench_io: read failed: %s%s\n", strerror(err), err == EINVAL ? " (O_DIRECT refused by this file system?)" : "");
                return 2;
            }
            double *lat = malloc((nl ? nl : 1) * sizeof *lat);
            size_t o = 0;
            for (int t = 0; t < q; t++) memcpy(lat + o, w[t].lat, w[t].nlat * sizeof *lat), o += w[t].nlat, free(w[t].lat);
            qsort(lat, nl, sizeof *lat, cmpd);
            double gbs = (double)bytes / dt / 1e9, med = nl ? lat[nl / 2] : 0, worst = nl ? lat[nl - 1] : 0;
            if (json)
                printf("%s\n  {\"size\": %llu, \"qd\": %d, \"gbs\": %.4f, \"reads\": %llu, \"seconds\": %.3f, \"lat_median_ms\": %.3f, \"lat_max_ms\": %.3f}",
                       first ? "" : ",", (unsigned long long)sizes[si], q, gbs, (unsigned long long)reads, dt, med * 1e3, worst * 1e3);
            else
                printf("O_DIRECT %8.2f MB x qd %2d: %7.3f GB/s, %llu reads, latency median %.1f ms, max %.1f ms\n", sizes[si] / 1e6, q, gbs,
                       (unsigned long long)reads, med * 1e3, worst * 1e3);
            first = 0;
            free(lat);
        }
        memcpy(files, all, sizeof all);
        nfiles = na;
    }
    if (json) printf("\n]}\n");
    return 0;
}
