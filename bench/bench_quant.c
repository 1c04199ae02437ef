/* bench_quant.c — kernels.h speed against the memory system, in one run:
 *   1. streaming-read bandwidth (≥ 1 GiB buffer), one thread and all threads;
 *   2. decode matvec (S = 1) for int8, int4, grouped int4 (g64) and f32 at the
 *      GLM-5 expert shapes 2048×6144 and 6144×2048, over a set of matrices
 *      larger than the last-level cache (so weights stream from DRAM): GB/s of
 *      weight+scale bytes, one thread and all threads, IDOT on and off, and the
 *      ratio to the best streaming read seen in the run (probe or kernel);
 *   3. batches S = 8 and 32 (IDOT on and off) and S = 64 and 128 (the
 *      engine's arithmetic only: IDOT on, f32 on the float path), all
 *      threads: GFLOP/s and time per activation row relative to S = 1. The
 *      largest S is the kernel peak a prefill is judged against (bench/run.py
 *      weighs each format's peak by the model's multiply-adds). Calls of up
 *      to 128 rows are not chunked (mm_init's max_rows; the engine's UBATCH
 *      is 512).
 * Build: make build/rel/bench_quant (links the kernels)
 * Usage: build/rel/bench_quant [--json] [--level NAME] [--mem MiB] [--time SEC]
 *        [--only FORMAT] [--hugepages] [--probe]
 *   --only: one format by qt_fmt_name (int8, int4, int4-grouped, f32);
 *   --hugepages: back the probe buffer and the matrices with 2 MiB pages;
 *   --probe: the read bandwidth probe alone (1 thread and all threads), no
 *            kernels (bench/run.py probes at the start and end of a run). */
#include "kernels.h"

#include <omp.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n bytes, 2 MiB aligned; with huge set, backed by transparent huge pages
 * (madvise) so TLB misses do not count against the kernels or the probe. */
static void *big_alloc(size_t n, int huge) {
    size_t a = (size_t)2 << 20, m = (n + a - 1) / a * a;
    void *p = aligned_alloc(a, m);
    if (p && huge) madvise(p, m, MADV_HUGEPAGE);
    return p;
}

typedef uint64_t v64 __attribute__((vector_size(64)));

#define MAX_S 128 /* largest batch (activation rows per call) */

/* Best-of-8 read bandwidth (GB/s) of buf[n] with nt threads, each reading a
 * contiguous slice with four 64-byte accumulators, with and without a
 * software prefetch 1 KiB ahead (which helps depends on machine and code). */
static double read_bw(const uint8_t *buf, size_t n, int nt) {
    double best = 0;
    uint64_t sink = 0;
    for (int rep = 0; rep < 8; rep++) {
        const int pf = rep & 1;
        double t = now();
#pragma omp parallel num_threads(nt) reduction(^ : sink)
        {
            int tid = omp_get_thread_num(), k = omp_get_num_threads();
            size_t per = n / (size_t)k / 256 * 256, b = per * (size_t)tid, e = b + per;
            v64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (size_t i = b; i < e; i += 256) {
                if (pf)
                    for (int l = 0; l < 4; l++) __builtin_prefetch(buf + i + 1024 + 64 * l, 0, 3);
                v64 x0, x1, x2, x3;
                memcpy(&x0, buf + i, 64);
                memcpy(&x1, buf + i + 64, 64);
                memcpy(&x2, buf + i + 128, 64);
                memcpy(&x3, buf + i + 192, 64);
                a0 += x0, a1 += x1, a2 += x2, a3 += x3;
            }
            v64 s = a0 + a1 + a2 + a3;
            for (int j = 0; j < 8; j++) sink ^= s[j];
        }
        t = now() - t;
        double g = (double)(n / (size_t)nt / 256 * 256 * (size_t)nt) / t / 1e9;
        best = g > best ? g : best;
    }
    if (sink == 42) fprintf(stderr, " ");
    return best;
}

typedef struct {
    qt_fmt f;
    int gs;
    int64_t O, I;
    int S, idot, threads;
    double us, gbs, pct, gflops, rel; /* per call; rel = (t/S) / t(S=1) */
} result;

/* A set of n matrices of one format/shape sharing one allocation. */
typedef struct {
    qt_tensor *t;
    int n;
    uint8_t *mem;
    uint64_t bytes; /* weights + scales of one matrix */
} mset;

static mset make_set(qt_fmt f, int gs, int64_t O, int64_t I, uint64_t budget, int huge) {
    mset m;
    uint64_t wb = qt_weight_bytes(f, O, I, gs), sb = qt_scale_count(f, O, I, gs) * 4, one = (wb + sb + 4095) / 4096 * 4096;
    m.bytes = wb + sb;
    m.n = (int)(budget / one);
    if (m.n < 2) m.n = 2;
    m.mem = big_alloc(one * (uint64_t)m.n, huge);
    m.t = calloc((size_t)m.n, sizeof *m.t);
    if (!m.mem || !m.t) {
        fprintf(stderr, "out of memory for %d matrices of %llu bytes\n", m.n, (unsigned long long)one);
        exit(1);
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < m.n; k++) {
        uint8_t *p = m.mem + one * (uint64_t)k;
        uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 1);
        for (uint64_t i = 0; i < wb; i += 8) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            uint64_t v = f == QT_F32 ? (r & 0x807FFFFF807FFFFFull) | 0x3F0000003F000000ull : r; /* normal floats, |v| in [0.5, 1) */
            memcpy(p + i, &v, wb - i < 8 ? wb - i : 8);
        }
        float *s = (float *)(p + (wb + 3) / 4 * 4);
        for (uint64_t i = 0; i < sb / 4; i++) s[i] = 0.01f;
        m.t[k] = (qt_tensor){f, O, I, p, sb ? s : NULL, f == QT_I4G ? gs : 0};
    }
    return m;
}

static void free_set(mset *m) {
    free(m->mem);
    free(m->t);
}

/* Seconds per mm_matmul call. Calls cycle through the whole set (so weights
 * come from DRAM); the time is the best window of MM_WIN consecutive calls,
 * repeated for ≥ secs and ≥ 2 cycles over the set. A short window is what
 * survives other processes sharing the cores; it reads slightly optimistic.
 * From S = 64 on a call is compute-bound (tens of ms; where the weights come
 * from hardly matters): ≥ secs and ≥ 2 windows, not 2 cycles over the set. */
#define MM_WIN 16
#define MM_BIG_S 64
static double time_calls(mm_ctx *c, const mset *m, const float *x, int S, float *y, double secs) {
    const long need = S >= MM_BIG_S ? 2L * MM_WIN : 2L * m->n;
    for (int k = 0; k < m->n && k < 4; k++) mm_matmul(c, &m->t[k], x, S, y); /* warm code, not data */
    double best = 1e30, t0 = now();
    long calls = 0;
    int k = 4 % m->n;
    do {
        double t = now();
        for (int j = 0; j < MM_WIN; j++, k = (k + 1) % m->n) mm_matmul(c, &m->t[k], x, S, y);
        t = (now() - t) / MM_WIN;
        best = t < best ? t : best;
        calls += MM_WIN;
    } while (now() - t0 < secs || calls < need);
    return best;
}

int main(int argc, char **argv) {
    int json = 0, level = -1, huge = 0, probe_only = 0;
    const char *only = NULL;
    double secs = 0.4;
    uint64_t mem = (uint64_t)1536 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--hugepages")) huge = 1;
        else if (!strcmp(argv[i], "--probe")) probe_only = 1;
        else if (!strcmp(argv[i], "--level") && i + 1 < argc) {
            if ((level = mm_level_parse(argv[++i])) < 0) {
                fprintf(stderr, "unknown level %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--mem") && i + 1 < argc) mem = (uint64_t)atoll(argv[++i]) << 20;
        else if (!strcmp(argv[i], "--time") && i + 1 < argc) secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--json] [--level NAME] [--mem MiB] [--time SEC] [--only FORMAT] [--hugepages] [--probe]\n", argv[0]);
            return 2;
        }
    }
    const int nall = omp_get_num_procs();
    char err[256];
    mm_ctx ci, cf;
    if (mm_init(&ci, level, 1, MAX_S, 16384, 1, err, sizeof err) || mm_init(&cf, level, 0, MAX_S, 16384, 1, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    FILE *o = json ? stderr : stdout;
    fprintf(o, "quant bench: level %s, %d threads, matrix set %llu MiB per format, %s pages\n", mm_level_name(ci.level), nall,
            (unsigned long long)(mem >> 20), huge ? "2 MiB (THP)" : "4 KiB");

    /* 1. bandwidth: probed before every format; the best reading of the run
     * is the reference (memory bandwidth here varies with other load) */
    size_t bn = mem > ((uint64_t)1 << 30) ? mem : ((uint64_t)1 << 30);
    uint8_t *buf = big_alloc(bn, huge);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bn; i += 4096) memset(buf + i, (int)(i >> 12), 4096);
    double bw1 = 0, bwn = 0;
    if (probe_only) {
        /* twice each, best: the probe alone, for the start and end of a bench run */
        for (int k = 0; k < 2; k++) {
            double b1 = read_bw(buf, bn, 1), bn_ = nall > 1 ? read_bw(buf, bn, nall) : b1;
            bw1 = b1 > bw1 ? b1 : bw1;
            bwn = bn_ > bwn ? bn_ : bwn;
        }
        free(buf);
        fprintf(o, "read bandwidth (%zu MiB probe): 1 thread %.1f GB/s, %d threads %.1f GB/s\n", bn >> 20, bw1, nall, bwn);
        if (json) printf("{\"threads\": %d, \"probe_mib\": %zu, \"hugepages\": %d, \"probe_gbs\": {\"1\": %.2f, \"all\": %.2f}}\n", nall, bn >> 20, huge, bw1, bwn);
        mm_free(&ci);
        mm_free(&cf);
        return 0;
    }

    /* 2 + 3. kernels */
    static const struct {
        qt_fmt f;
        int gs;
    } fmts[] = {{QT_I8, 0}, {QT_I4, 0}, {QT_I4G, 64}, {QT_F32, 0}};
    static const int64_t shapes[2][2] = {{2048, 6144}, {6144, 2048}};
    result res[256];
    int nres = 0;
    float *x = malloc((size_t)MAX_S * 6144 * 4), *y = malloc((size_t)MAX_S * 6144 * 4);
    for (int i = 0; i < MAX_S * 6144; i++) x[i] = (float)((int)((int64_t)i * 7919 % 2001) - 1000) * 1e-3f;
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
        if (only && strcmp(only, qt_fmt_name(fmts[fi].f))) continue;
        double b1 = read_bw(buf, bn, 1), bn_ = read_bw(buf, bn, nall);
        bw1 = b1 > bw1 ? b1 : bw1;
        bwn = bn_ > bwn ? bn_ : bwn;
        for (int si = 0; si < 2; si++) {
            mset m = make_set(fmts[fi].f, fmts[fi].gs, shapes[si][0], shapes[si][1], mem, huge);
            for (int idot = 1; idot >= 0; idot--) {
                if (fmts[fi].f == QT_F32 && idot) continue;
                mm_ctx *c = idot ? &ci : &cf;
                for (int ti = 0; ti < 2; ti++) {
                    int nt = ti ? nall : 1;
                    if (ti && nall == 1) break;
                    omp_set_num_threads(nt);
                    double t1 = 0;
                    static const int Ss[5] = {1, 8, 32, 64, MAX_S};
                    for (int k = 0; k < 5; k++) {
                        if (Ss[k] > 1 && nt == 1) break; /* batches: all threads only */
                        if (Ss[k] >= MM_BIG_S && !idot && fmts[fi].f != QT_F32) break; /* large batches: the engine's path only */
                        result *r = &res[nres++];
                        *r = (result){fmts[fi].f, fmts[fi].gs, shapes[si][0], shapes[si][1], Ss[k], idot, nt, 0, 0, 0, 0, 0};
                        double t = time_calls(c, &m, x, Ss[k], y, secs);
                        if (Ss[k] == 1) t1 = t;
                        r->us = t * 1e6;
                        r->gbs = (double)m.bytes / t / 1e9;
                        r->gflops = 2.0 * (double)r->O * (double)r->I * Ss[k] / t / 1e9;
                        r->rel = t / Ss[k] / t1;
                    }
                }
            }
            free_set(&m);
        }
    }
    double b1 = read_bw(buf, bn, 1), bn_ = read_bw(buf, bn, nall);
    bw1 = b1 > bw1 ? b1 : bw1;
    bwn = bn_ > bwn ? bn_ : bwn;
    free(buf);
    /* reference = best streaming read seen in the run: probes or any S = 1
     * kernel (a matvec is a streaming reader too), so %bw is conservative */
    double ref1 = bw1, refn = bwn;
    for (int i = 0; i < nres; i++)
        if (res[i].S == 1) {
            if (res[i].threads == 1) ref1 = res[i].gbs > ref1 ? res[i].gbs : ref1;
            else refn = res[i].gbs > refn ? res[i].gbs : refn;
        }
    fprintf(o, "read bandwidth (%zu MiB probe, best of the run): 1 thread %.1f GB/s, %d threads %.1f GB/s\n", bn >> 20, bw1, nall, bwn);
    fprintf(o, "reference for %%bw (best streaming read incl. kernels): 1 thread %.1f GB/s, %d threads %.1f GB/s\n\n", ref1, nall, refn);
    fprintf(o, "%-17s %-10s %4s %3s %4s %9s %8s %6s %9s %7s\n", "format", "O x I", "idot", "thr", "S", "us/call", "GB/s", "%bw", "GFLOP/s",
            "t/row");
    for (int i = 0; i < nres; i++) {
        result *r = &res[i];
        r->pct = 100.0 * r->gbs / (r->threads == 1 ? ref1 : refn);
        char name[32], shp[32];
        snprintf(name, sizeof name, "%s%s", qt_fmt_name(r->f), r->f == QT_I4G ? "(g64)" : "");
        snprintf(shp, sizeof shp, "%lldx%lld", (long long)r->O, (long long)r->I);
        fprintf(o, "%-17s %-10s %4s %3d %4d %9.1f %8.2f %5.0f%% %9.1f %7.3f\n", name, shp, r->f == QT_F32 ? "-" : r->idot ? "on" : "off", r->threads,
                r->S, r->us, r->gbs, r->pct, r->gflops, r->rel);
    }
    if (json) {
        printf("{\"level\": \"%s\", \"threads\": %d, \"set_mib\": %llu, \"hugepages\": %d,\n \"probe_gbs\": {\"1\": %.2f, \"all\": %.2f},"
               " \"reference_gbs\": {\"1\": %.2f, \"all\": %.2f},\n \"kernels\": [\n",
               mm_level_name(ci.level), nall, (unsigned long long)(mem >> 20), huge, bw1, bwn, ref1, refn);
        for (int i = 0; i < nres; i++) {
            const result *r = &res[i];
            printf("  {\"fmt\": \"%s\", \"gs\": %d, \"O\": %lld, \"I\": %lld, \"S\": %d, \"idot\": %d, \"threads\": %d, \"us\": %.2f, "
                   "\"gbs\": %.3f, \"pct_bw\": %.1f, \"gflops\": %.2f, \"rel_time_per_row\": %.4f}%s\n",
                   qt_fmt_name(r->f), r->gs, (long long)r->O, (long long)r->I, r->S, r->idot, r->threads, r->us, r->gbs, r->pct, r->gflops,
                   r->rel, i + 1 < nres ? "," : "");
        }
        printf(" ]}\n");
    }
    free(x);
    free(y);
    mm_free(&ci);
    mm_free(&cf);
    return 0;
}
