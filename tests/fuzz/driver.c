/* driver.c — a plain main() for the fuzz targets, for builds without
 * libFuzzer (gcc, or AFL-style tools that feed one file per run).
 *
 *   fuzz_<name> [options] [FILE|DIR]...
 *
 * Runs every FILE, and every regular file of every DIR (sorted by name),
 * through LLVMFuzzerTestOneInput; with no FILE or DIR, standard input once
 * (AFL without @@). Each input is copied into a buffer of exactly its size,
 * as libFuzzer does, so the sanitizers see reads past its end. Options:
 *   --mutate=N      also run N deterministic mutations of each input
 *                   (bit flips, interesting bytes and integers, deleted,
 *                   duplicated and inserted ranges, splices with other
 *                   inputs, truncation)
 *   --seed=S        seed of those mutations (default 1)
 *   --max-time=SEC  stop starting new inputs after SEC seconds
 *   --max-len=N     inputs (and mutants) are cut to N bytes (default 1 MiB)
 * Other arguments starting with '-' are ignored (libFuzzer flags), so the
 * same command line works with either build.
 *
 * An input that crashes (sanitizer report, FUZZ_CHECK abort, signal) is
 * written to <FUZZ_ARTIFACT_PREFIX>crash-<fnv64 hex> (prefix default "./")
 * before the process dies, like libFuzzer's artifacts. The last line on
 * stdout is "<program>: N execs, 0 crashes" when everything passed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
__attribute__((weak)) void __sanitizer_set_death_callback(void (*cb)(void));

typedef struct { uint8_t *p; size_t n; char *name; } drv_input;

static const uint8_t *drv_cur;
static size_t drv_cur_n;
static volatile sig_atomic_t drv_dumped;

/* Writes the input being run to <prefix>crash-<hash> (async-signal-safe). */
static void drv_dump(void) {
    if (drv_dumped || !drv_cur) return;
    drv_dumped = 1;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < drv_cur_n; i++) h = (h ^ drv_cur[i]) * 0x100000001b3ull;
    const char *pre = getenv("FUZZ_ARTIFACT_PREFIX");
    if (!pre) pre = "./";
    char path[4096];
    size_t o = 0;
    for (const char *s = pre; *s && o < sizeof path - 40; s++) path[o++] = *s;
    const char *tag = "crash-";
    for (const char *s = tag; *s; s++) path[o++] = *s;
    for (int i = 60; i >= 0; i -= 4) path[o++] = "0123456789abcdef"[(h >> i) & 15];
    path[o] = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        const uint8_t *p = drv_cur;
        size_t n = drv_cur_n;
        while (n) {
            ssize_t w = write(fd, p, n);
            if (w <= 0) break;
            p += w;
            n -= (size_t)w;
        }
        close(fd);
        static const char msg[] = "\ndriver: crashing input written to ";
        if (write(2, msg, sizeof msg - 1) < 0 || write(2, path, o) < 0 || write(2, "\n", 1) < 0) return;
    }
}

static void drv_on_signal(int sig) {
    drv_dump();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- deterministic mutations */

static uint64_t drv_rng = 1;
static uint64_t drv_next(void) {
    drv_rng ^= drv_rng >> 12;
    drv_rng ^= drv_rng << 25;
    drv_rng ^= drv_rng >> 27;
    return drv_rng * 0x2545f4914f6cdd1dull;
}
static size_t drv_below(size_t n) { return n ? (size_t)(drv_next() % n) : 0; }

static const char *const drv_tokens[] = {
    "\\u", "\\ud800", "\\udc00\\u", "\\u0000", "1e999", "-0", "0.0e-400", "null", "true", "\"", "{", "}", "[", "]", ",", ":",
    "99999999999999999999", "-9223372036854775808", "18446744073709551616", "4611686018427387904", "\xc3", "\xed\xa0\x80",
    "\xf4\x90\x80\x80", "\xef\xbb\xbf", "\n@@colibri-fuzz-part@@\n", "\"dtype\":\"F16\"", "\"shape\":[0]",
    "\"data_offsets\":[0,0]", "\"__metadata__\":{}", "-1 ", "-2 1 3815245270\n", "-3 0 0\n", "#", "<|user|>", "'s",
    "\r\n", "\t", " ", "\xc2\xa0", "\xe3\x80\x80"};
static const uint64_t drv_ints[] = {0, 1, 2, 7, 8, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0xffff, 0x7fffffff, 0x80000000ull,
                                    0xffffffffull, 100000000, 100000001, 0x7fffffffffffffffull, 0x8000000000000000ull,
                                    0xffffffffffffffffull};

/* Applies 1-4 random edits to buf (capacity cap) of *n bytes. */
static void drv_mutate(uint8_t *buf, size_t *n, size_t cap, const drv_input *all, size_t nall) {
    int edits = 1 + (int)drv_below(4);
    for (int e = 0; e < edits; e++) {
        size_t len = *n, at = drv_below(len + 1);
        switch (drv_below(9)) {
        case 0: /* bit flip */
            if (len) buf[drv_below(len)] ^= (uint8_t)(1u << drv_below(8));
            break;
        case 1: { /* interesting byte */
            static const uint8_t b[] = {0, 0xff, 0x7f, 0x80, '"', '\\', '{', '[', ',', ':', '0', '9', '-', '\n', ' ', 'e', '.'};
            if (len) buf[drv_below(len)] = b[drv_below(sizeof b)];
            break;
        }
        case 2: { /* delete a range */
            size_t k = 1 + drv_below(16);
            if (at + k > len) k = len - at;
            memmove(buf + at, buf + at + k, len - at - k);
            *n -= k;
            break;
        }
        case 3: { /* duplicate a range */
            if (!len) break;
            size_t from = drv_below(len), k = 1 + drv_below(32);
            if (from + k > len) k = len - from;
            if (len + k > cap) break;
            uint8_t tmp[32];
            memcpy(tmp, buf + from, k);
            memmove(buf + at + k, buf + at, len - at);
            memcpy(buf + at, tmp, k);
            *n += k;
            break;
        }
        case 4: { /* insert a token */
            const char *t = drv_tokens[drv_below(sizeof drv_tokens / sizeof *drv_tokens)];
            size_t k = strlen(t);
            if (len + k > cap) break;
            memmove(buf + at + k, buf + at, len - at);
            memcpy(buf + at, t, k);
            *n += k;
            break;
        }
        case 5: /* truncate */
            *n = drv_below(len + 1);
            break;
        case 6: { /* an interesting little-endian integer (the first 8 bytes more often) */
            uint64_t v = drv_ints[drv_below(sizeof drv_ints / sizeof *drv_ints)];
            size_t w = (size_t)1 << drv_below(4), pos = drv_below(2) ? 0 : drv_below(len + 1);
            for (size_t i = 0; i < w && pos + i < len; i++) buf[pos + i] = (uint8_t)(v >> (8 * i));
            break;
        }
        case 7: { /* splice: a piece of another input */
            const drv_input *o = &all[drv_below(nall)];
            if (!o->n) break;
            size_t from = drv_below(o->n), k = 1 + drv_below(256);
            if (from + k > o->n) k = o->n - from;
            if (len + k > cap) break;
            memmove(buf + at + k, buf + at, len - at);
            memcpy(buf + at, o->p + from, k);
            *n += k;
            break;
        }
        default: { /* a decimal number made huge, negative or zero */
            size_t i = at;
            while (i < len && !(buf[i] >= '0' && buf[i] <= '9')) i++;
            if (i >= len) break;
            size_t j = i;
            while (j < len && buf[j] >= '0' && buf[j] <= '9') j++;
            static const char *const r[] = {"18446744073709551615", "9223372036854775807", "2147483648", "0", "-1", "1048577", "65537"};
            const char *t = r[drv_below(sizeof r / sizeof *r)];
            size_t k = strlen(t);
            if (len - (j - i) + k > cap) break;
            memmove(buf + i + k, buf + j, len - j);
            memcpy(buf + i, t, k);
            *n = len - (j - i) + k;
            break;
        }
        }
    }
}

/* ---- inputs */

static int drv_add(drv_input **v, size_t *n, size_t *cap, const char *path, size_t max_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, bcap = 0;
    for (;;) {
        if (len == bcap) {
            bcap = bcap ? 2 * bcap : 4096;
            uint8_t *nb = (uint8_t *)realloc(buf, bcap);
            if (!nb) abort();
            buf = nb;
        }
        size_t r = fread(buf + len, 1, bcap - len, f);
        if (!r) break;
        len += r;
    }
    fclose(f);
    if (len > max_len) len = max_len;
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        drv_input *nv = (drv_input *)realloc(*v, *cap * sizeof **v);
        if (!nv) abort();
        *v = nv;
    }
    (*v)[*n].p = buf;
    (*v)[*n].n = len;
    (*v)[(*n)++].name = strdup(path);
    return 0;
}

static int drv_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int drv_add_path(drv_input **v, size_t *n, size_t *cap, const char *path, size_t max_len) {
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return drv_add(v, n, cap, path, max_len);
    DIR *d = opendir(path);
    if (!d) return -1;
    char **names = NULL;
    size_t nn = 0, nc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (nn == nc) {
            nc = nc ? 2 * nc : 64;
            names = (char **)realloc(names, nc * sizeof *names);
            if (!names) abort();
        }
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[nn] = (char *)malloc(l);
        snprintf(names[nn++], l, "%s/%s", path, e->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, drv_cmp);
    int rc = 0;
    for (size_t i = 0; i < nn; i++) {
        if (!stat(names[i], &st) && S_ISREG(st.st_mode) && drv_add(v, n, cap, names[i], max_len)) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

static double drv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs data[0..n) in a buffer of exactly n bytes. */
static void drv_run(const uint8_t *data, size_t n) {
    uint8_t *copy = (uint8_t *)malloc(n ? n : 1);
    if (!copy) abort();
    memcpy(copy, data, n);
    drv_cur = copy;
    drv_cur_n = n;
    LLVMFuzzerTestOneInput(copy, n);
    drv_cur = NULL;
    free(copy);
}

int main(int argc, char **argv) {
    long mutate = 0;
    unsigned long long seed = 1;
    double max_time = 0;
    size_t max_len = (size_t)1 << 20;
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    /* under a sanitizer its report ends in the death callback (and its own
     * signal handlers stay in place); FUZZ_CHECK's abort() comes as SIGABRT */
    signal(SIGABRT, drv_on_signal);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(drv_dump);
    else {
        signal(SIGSEGV, drv_on_signal);
        signal(SIGBUS, drv_on_signal);
        signal(SIGFPE, drv_on_signal);
        signal(SIGILL, drv_on_signal);
    }

    drv_input *in = NULL;
    size_t nin = 0, cin = 0;
    int paths = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--mutate=", 9)) mutate = atol(a + 9);
        else if (!strncmp(a, "--seed=", 7)) seed = strtoull(a + 7, NULL, 10);
        else if (!strncmp(a, "--max-time=", 11)) max_time = atof(a + 11);
        else if (!strncmp(a, "--max-len=", 10)) max_len = (size_t)strtoull(a + 10, NULL, 10);
        else if (a[0] == '-') fprintf(stderr, "driver: ignoring option %s\n", a);
        else {
            paths++;
            if (drv_add_path(&in, &nin, &cin, a, max_len)) bad = 1;
        }
    }
    if (bad) return 2;
    if (!paths && drv_add(&in, &nin, &cin, "/dev/stdin", max_len)) return 2;

    double t0 = drv_now();
    unsigned long long execs = 0;
    int timed_out = 0;
    for (size_t i = 0; i < nin && !timed_out; i++) {
        drv_run(in[i].p, in[i].n);
        execs++;
    }
    if (mutate > 0 && nin) {
        size_t cap = 0;
        for (size_t i = 0; i < nin; i++)
            if (in[i].n > cap) cap = in[i].n;
        cap = cap + 4096 > max_len ? (max_len > cap ? max_len : cap) : cap + 4096;
        uint8_t *buf = (uint8_t *)malloc(cap ? cap : 1);
        if (!buf) abort();
        for (long m = 0; m < mutate && !timed_out; m++)
            for (size_t i = 0; i < nin && !timed_out; i++) {
                drv_rng = (seed * 0x9e3779b97f4a7c15ull) ^ ((unsigned long long)m << 20) ^ i ^ 0x5851f42d4c957f2dull;
                if (!drv_rng) drv_rng = 1;
                size_t n = in[i].n;
                memcpy(buf, in[i].p, n);
                drv_mutate(buf, &n, cap, in, nin);
                drv_run(buf, n);
                execs++;
                if (max_time > 0 && drv_now() - t0 > max_time) timed_out = 1;
            }
        free(buf);
    }
    double el = drv_now() - t0;
    for (size_t i = 0; i < nin; i++) {
        free(in[i].p);
        free(in[i].name);
    }
    free(in);
    fprintf(stderr, "driver: %llu execs in %.1f s (%.0f execs/s)%s\n", execs, el, el > 0 ? execs / el : 0.0,
            timed_out ? ", stopped at --max-time" : "");
    printf("%s: %llu execs, 0 crashes\n", prog, execs);
    return 0;
}
