/* tests/fault.c — fault injection for the fault loops (tests/test_faults.py),
 * linked into the fault-test builds of colibri and colibri-convert with
 * -Wl,--wrap for the calls below, so every allocation, read and write the
 * engine makes passes through here (libraries' own calls do not). What
 * fails is set by the XFAULT variable (not a colibri knob: the engine never
 * sees it as one):
 *   XFAULT=count                 at exit, print "xfault: alloc A read R write W step S"
 *   XFAULT=alloc:N               the Nth allocation returns NULL (ENOMEM)
 *   XFAULT=read:N:eio|short|eintr  the Nth read fails with EIO, returns half
 *                                of what was asked, or fails once with EINTR
 *   XFAULT=write:N:enospc|eio    the Nth write (or fsync) fails
 *   XFAULT=kill:N                SIGKILL at the Nth write step (write,
 *                                fsync, rename): a crash in mid-write
 * Counters are atomic: reader threads read concurrently. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t);
void *__real_calloc(size_t, size_t);
void *__real_realloc(void *, size_t);
int __real_posix_memalign(void **, size_t, size_t);
void *__real_aligned_alloc(size_t, size_t);
char *__real_strdup(const char *);
char *__real_strndup(const char *, size_t);
ssize_t __real_pread(int, void *, size_t, off_t);
ssize_t __real_write(int, const void *, size_t);
int __real_fsync(int);
int __real_rename(const char *, const char *);

enum { F_NONE, F_COUNT, F_ALLOC, F_READ, F_WRITE, F_KILL };
static int mode = -1, kind; /* kind: 0 eio / enospc, 1 short / eio, 2 eintr */
static long at;
static long n_alloc, n_read, n_write, n_step;

static void report(void) {
    char b[160];
    int n = snprintf(b, sizeof b, "xfault: alloc %ld read %ld write %ld step %ld\n", n_alloc, n_read, n_write, n_step);
    if (__real_write(2, b, (size_t)n) < 0) _exit(3);
}

/* Reads XFAULT once (the first call comes before main's threads start). */
static void setup(void) {
    if (mode >= 0) return;
    mode = F_NONE;
    const char *v = getenv("XFAULT");
    if (!v) return;
    char what[16] = "", how[16] = "";
    if (!strcmp(v, "count")) {
        mode = F_COUNT;
        atexit(report);
        return;
    }
    if (sscanf(v, "%15[a-z]:%ld:%15[a-z]", what, &at, how) < 2 || at < 1) {
        fprintf(stderr, "xfault: bad XFAULT=%s\n", v);
        _exit(99);
    }
    mode = !strcmp(what, "alloc") ? F_ALLOC : !strcmp(what, "read") ? F_READ : !strcmp(what, "write") ? F_WRITE : !strcmp(what, "kill") ? F_KILL : -2;
    kind = !strcmp(how, "short") || (mode == F_WRITE && !strcmp(how, "eio")) ? 1 : !strcmp(how, "eintr") ? 2 : 0;
    if (mode == -2) {
        fprintf(stderr, "xfault: bad XFAULT=%s\n", v);
        _exit(99);
    }
}

static int hit(int m, long *counter) {
    setup();
    long n = __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
    return mode == m && n == at;
}

static int alloc_fails(void) {
    if (!hit(F_ALLOC, &n_alloc)) return 0;
    errno = ENOMEM;
    return 1;
}

void *__wrap_malloc(size_t n) { return alloc_fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { return alloc_fails() ? NULL : __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { return alloc_fails() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return alloc_fails() ? ENOMEM : __real_posix_memalign(p, a, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return alloc_fails() ? NULL : __real_aligned_alloc(a, n); }
char *__wrap_strdup(const char *s) { return alloc_fails() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return alloc_fails() ? NULL : __real_strndup(s, n); }

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off) {
    if (hit(F_READ, &n_read)) {
        if (kind == 1 && n > 1) return __real_pread(fd, buf, n / 2, off);
        errno = kind == 2 ? EINTR : EIO;
        return -1;
    }
    return __real_pread(fd, buf, n, off);
}

/* A write step: the kill loop's crash point, counted for write faults. */
static int step(void) {
    setup();
    long n = __atomic_add_fetch(&n_step, 1, __ATOMIC_RELAXED);
    if (mode == F_KILL && n == at) raise(SIGKILL);
    return 0;
}

ssize_t __wrap_write(int fd, const void *buf, size_t n) {
    if (fd > 2) step();
    if (fd > 2 && hit(F_WRITE, &n_write)) {
        errno = kind == 1 ? EIO : ENOSPC;
        return -1;
    }
    return __real_write(fd, buf, n);
}

int __wrap_fsync(int fd) {
    step();
    if (hit(F_WRITE, &n_write)) {
        errno = kind == 1 ? EIO : ENOSPC;
        return -1;
    }
    return __real_fsync(fd);
}

int __wrap_rename(const char *a, const char *b) {
    step();
    return __real_rename(a, b);
}
