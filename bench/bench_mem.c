/* bench_mem.c — memory read bandwidth, the limit resident decode is judged
 * against: every thread streams its slice of one large buffer with 64-byte
 * vector loads into four accumulators, best of R passes.
 *
 *   make build/rel/bench_mem
 *   build/rel/bench_mem [--json] [--mib N] [--reps R] [--threads T]...
 *
 * Defaults: 4096 MiB, 5 passes, 1 thread and one per online CPU. The buffer
 * must be much larger than the last-level cache (some server parts show
 * hundreds of MB of L3 to a VM), else the figure is partly cache. The
 * caller reads one slice and T-1 workers, created once, spin on a shared
 * pass counter between passes (no sleeping), so the figure does not include
 * the time a sleeping thread takes to be woken, which on some virtual
 * machines is a scheduler tick. GB = 1e9
 * bytes. Exit codes: 0 ok, 2 bad arguments or no memory. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef uint64_t v64 __attribute__((vector_size(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const uint8_t *buf;
static size_t per;                  /* bytes per thread, multiple of 256 */
static atomic_int pass, done, quit; /* pass: number of the pass to run; done: threads finished it */
static uint64_t sinks[256];

/* Streams thread id's slice once. */
static void read_slice(int id) {
    const uint8_t *b = buf + per * (size_t)id;
    v64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = 0; i < per; i += 256) {
        v64 x0, x1, x2, x3;
        memcpy(&x0, b + i, 64);
        memcpy(&x1, b + i + 64, 64);
        memcpy(&x2, b + i + 128, 64);
        memcpy(&x3, b + i + 192, 64);
        a0 += x0, a1 += x1, a2 += x2, a3 += x3;
    }
    v64 s = a0 + a1 + a2 + a3;
    for (int j = 0; j < 8; j++) sinks[id] ^= s[j];
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg, seen = 0;
    for (;;) {
        int p;
        while ((p = atomic_load_explicit(&pass, memory_order_acquire)) == seen)
            if (atomic_load_explicit(&quit, memory_order_relaxed)) return NULL;
        seen = p;
        read_slice(id);
        atomic_fetch_add_explicit(&done, 1, memory_order_acq_rel);
    }
}

/* Best-of-reps GB/s with nt threads over the first nt*per bytes. The
 * calling thread reads slice 0 itself: a main thread that only waited
 * would spin beside the workers, one spinning thread more than CPUs, and
 * the figure came out about a third low on a 2-CPU VM. */
static double measure(int nt, size_t total, int reps) {
    per = total / (size_t)nt / 256 * 256;
    pthread_t th[256];
    atomic_store(&pass, 0);
    atomic_store(&quit, 0);
    for (int t = 1; t < nt; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    double best = 0;
    for (int r = 1; r <= reps + 1; r++) { /* pass 1 warms up (page tables, caches) */
        atomic_store(&done, 0);
        double t0 = now();
        atomic_store_explicit(&pass, r, memory_order_release);
        read_slice(0);
        while (atomic_load_explicit(&done, memory_order_acquire) < nt - 1) {
        }
        double g = (double)(per * (size_t)nt) / (now() - t0) / 1e9;
        if (r > 1 && g > best) best = g;
    }
    atomic_store(&quit, 1);
    for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
    return best;
}

int main(int argc, char **argv) {
    int json = 0, reps = 5, nts[16], nn = 0;
    size_t mib = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc) mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc && nn < 16) nts[nn++] = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--json] [--mib N] [--reps R] [--threads T]...\n", argv[0]);
            return 2;
        }
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (!nn) {
        nts[nn++] = 1;
        if (ncpu > 1) nts[nn++] = (int)ncpu;
    }
    if (mib < 64 || reps < 1) return fprintf(stderr, "bench_mem: --mib >= 64 and --reps >= 1\n"), 2;
    size_t total = mib << 20;
    uint8_t *p = NULL;
    if (posix_memalign((void **)&p, (size_t)2 << 20, total)) return fprintf(stderr, "bench_mem: out of memory\n"), 2;
    madvise(p, total, MADV_HUGEPAGE);
    for (size_t i = 0; i < total; i += 4096) memset(p + i, (int)(i >> 12), 4096);
    buf = p;
    if (json) printf("{\"mib\": %zu, \"reps\": %d, \"results\": [", mib, reps);
    for (int k = 0; k < nn; k++) {
        int nt = nts[k] < 1 ? 1 : nts[k] > 256 ? 256 : nts[k];
        double g = measure(nt, total, reps);
        if (json) printf("%s{\"threads\": %d, \"gbs\": %.3f}", k ? ", " : "", nt, g);
        else printf("read bandwidth, %d thread%s: %.2f GB/s\n", nt, nt > 1 ? "s" : "", g);
    }
    if (json) printf("]}\n");
    uint64_t x = 0;
    for (int i = 0; i < 256; i++) x ^= sinks[i];
    if (x == 42) fprintf(stderr, " ");
    free(p);
    return 0;
}
