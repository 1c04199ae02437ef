/* fuzz_common.h — helpers shared by the fuzz targets (tests/fuzz/fuzz_*.c):
 * a per-process scratch directory (created once, emptied per input,
 * removed at exit), writing one file into it, splitting an input on the
 * part separator, and FUZZ_CHECK, which aborts (a crash for libFuzzer and
 * for the plain driver) when a property of the code under test fails.
 *
 * Input layout used by the multi-file targets: parts separated by
 * FUZZ_SEP (a line no JSON or safetensors file is likely to hold). */
#ifndef COLI_FUZZ_COMMON_H
#define COLI_FUZZ_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_SEP "\n@@colibri-fuzz-part@@\n"
#define FUZZ_SEP_LEN (sizeof FUZZ_SEP - 1)
#define FUZZ_MAX_PARTS 8

/* A failed property: print where and what, then abort so that libFuzzer
 * (and the plain driver's sanitizer/exit status) report a crash. */
#define FUZZ_CHECK(cond)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

typedef struct {
    const uint8_t *p[FUZZ_MAX_PARTS];
    size_t n[FUZZ_MAX_PARTS];
    int count;
} fuzz_parts;

/* Splits data[0..size) on FUZZ_SEP into at most `max` parts (the last part
 * keeps any further separators). */
static inline void fuzz_split(const uint8_t *data, size_t size, int max, fuzz_parts *out) {
    out->count = 0;
    const uint8_t *p = data, *end = data + size;
    if (max > FUZZ_MAX_PARTS) max = FUZZ_MAX_PARTS;
    while (out->count < max - 1) {
        const uint8_t *s = (size_t)(end - p) >= FUZZ_SEP_LEN ? (const uint8_t *)memmem(p, (size_t)(end - p), FUZZ_SEP, FUZZ_SEP_LEN) : NULL;
        if (!s) break;
        out->p[out->count] = p;
        out->n[out->count++] = (size_t)(s - p);
        p = s + FUZZ_SEP_LEN;
    }
    out->p[out->count] = p;
    out->n[out->count++] = (size_t)(end - p);
}

static char fuzz_dir_[4096];

static inline void fuzz_empty_dir_(void) {
    DIR *d = opendir(fuzz_dir_);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", fuzz_dir_, e->d_name);
        unlink(p);
    }
    closedir(d);
}

static inline void fuzz_remove_dir_(void) {
    if (!fuzz_dir_[0]) return;
    fuzz_empty_dir_();
    rmdir(fuzz_dir_);
    fuzz_dir_[0] = 0;
}

/* The scratch directory of this process, emptied: created on first use
 * under $TMPDIR (default /tmp), removed at exit. Aborts if it cannot be
 * made (the harness, not the code under test, is broken then). */
static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/colibri-fuzz-%ld-XXXXXX", t && *t ? t : "/tmp", (long)getpid());
        if (!mkdtemp(fuzz_dir_)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_remove_dir_);
    } else {
        fuzz_empty_dir_();
    }
    return fuzz_dir_;
}

/* Writes n bytes to <fuzz_dir_>/<name>; aborts on a harness failure. */
static inline void fuzz_write(const char *name, const void *buf, size_t n) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir_, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char *p = (const char *)buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            perror(path);
            abort();
        }
        p += w;
        n -= (size_t)w;
    }
    close(fd);
}

/* Little-endian integer of up to 8 bytes at *p (fewer when the input ends),
 * advancing *p. */
static inline uint64_t fuzz_take_u64(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    for (int i = 0; i < 8 && *p < end; i++) v |= (uint64_t)*(*p)++ << (8 * i);
    return v;
}

/* A message buffer filled by the code under test must be NUL-terminated
 * within its size. */
static inline int fuzz_terminated(const char *s, size_t cap) { return memchr(s, 0, cap) != NULL; }

#ifdef COLI_JSON_H
/* Whether s[0..n) is valid UTF-8, by json.h's decoder (targets that
 * include json.h before this header). */
static inline int fuzz_utf8_ok(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        int l = js_utf8_valid_len(p, end);
        if (!l) return 0;
        p += l;
    }
    return 1;
}
#endif

/* One server-sent event "event: NAME\ndata: DATA\n\n" at *p (the protocol
 * fronts' streams): 1 with name (NUL-terminated, truncated to nn) and data,
 * 0 at the end, -1 when malformed (a data line holding a line break would
 * end the event early). */
static inline int fuzz_sse_next(const char **p, const char *end, char *name, size_t nn, const char **data, size_t *dn) {
    if (*p == end) return 0;
    const char *s = *p, *nl = (const char *)memchr(s, '\n', (size_t)(end - s));
    if ((size_t)(end - s) < 7 || memcmp(s, "event: ", 7) || !nl) return -1;
    snprintf(name, nn, "%.*s", (int)(nl - s - 7), s + 7);
    s = nl + 1;
    if ((size_t)(end - s) < 6 || memcmp(s, "data: ", 6)) return -1;
    s += 6;
    nl = (const char *)memchr(s, '\n', (size_t)(end - s));
    if (!nl || nl + 1 >= end || nl[1] != '\n') return -1;
    *data = s, *dn = (size_t)(nl - s);
    *p = nl + 2;
    return 1;
}

#endif
