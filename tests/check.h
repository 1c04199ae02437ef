/* check.h — minimal assertions for the C tests: each failed check prints its
 * location and is counted; a part that cannot run here says SKIP with the
 * reason (tests/run.py collects those lines); check_report() prints the
 * counts and returns the exit status. */
#ifndef COLI_CHECK_H
#define COLI_CHECK_H

#include <stdio.h>
#include <string.h>

#include "compat.h"

static int check_failures, check_count, check_skips;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        check_count++;                                                                \
        if (!(cond)) {                                                                \
            check_failures++;                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                             \
    } while (0)

/* Checks that text contains every needle. */
#define CHECK_HAS(text, needle)                                                                            \
    do {                                                                                                   \
        check_count++;                                                                                     \
        const char *t_ = (text);                                                                           \
        if (!t_ || !strstr(t_, (needle))) {                                                                \
            check_failures++;                                                                              \
            fprintf(stderr, "%s:%d: expected \"%s\" in: %s\n", __FILE__, __LINE__, (needle), t_ ? t_ : "(null)"); \
        }                                                                                                  \
    } while (0)

/* A part of the test that cannot run here, and why: one line on stdout,
 * "SKIP <part>: <reason>". */
#define SKIP(part, ...)                  \
    do {                                 \
        check_skips++;                   \
        printf("SKIP %s: ", (part));     \
        printf(__VA_ARGS__);             \
        printf("\n");                    \
        fflush(stdout);                  \
    } while (0)

/* Scratch-directory helpers in C rather than through a shell (cp, rm -rf),
 * so the tests run the same on Windows. check_copy: 0 or -1. */
static inline int check_copy(const char *src, const char *dst) {
    size_t n;
    char *b = compat_read_file(src, (size_t)1 << 30, &n);
    if (!b) return -1;
    FILE *f = fopen(dst, "wb");
    int rc = f && fwrite(b, 1, n, f) == n ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(b);
    return rc;
}

/* Removes dir and everything under it; 0 or -1. */
static inline int check_rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!stat(p, &st) && S_ISDIR(st.st_mode)) rc |= check_rm_tree(p);
        else rc |= unlink(p);
    }
    closedir(d);
    return rc | rmdir(dir);
}

static inline int check_report(const char *name) {
    if (check_failures) fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
    else printf("%s: %d checks passed, %d skipped\n", name, check_count, check_skips);
    return check_failures ? 1 : 0;
}

#endif
