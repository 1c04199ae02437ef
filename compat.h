/* compat.h — OS shims: full preads, aligned allocation, clocks, memory
 * figures (MemAvailable, RSS), atomic file replacement. The only file that
 * knows about platform differences. Prefix: compat_. Must not: know about
 * models, tensors or the engine. */
#ifndef COLI_COMPAT_H
#define COLI_COMPAT_H

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
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Reads exactly len bytes at off, looping over short reads and EINTR.
 * Returns 0 on success, -1 with errno set on error, and -1 with errno = EIO
 * when the file ends early (a truncated file is an error, never zeros). */
static inline int compat_pread_full(int fd, void *buf, size_t len, uint64_t off) {
    char *p = (char *)buf;
    while (len) {
        size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Writes all len bytes, looping over short writes and EINTR; 0 or -1. */
static inline int compat_write_full(int fd, const void *buf, size_t len) {
    const char *p = (const char *)buf;
    while (len) {
        ssize_t r = write(fd, p, len);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Allocation aligned to `align` (a power of two ≥ sizeof(void*)); free with
 * free(). Returns NULL on failure or size 0. */
static inline void *compat_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (!size || posix_memalign(&p, align, size)) return NULL;
    return p;
}

/* Monotonic seconds. */
static inline double compat_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Bytes of memory available for new allocations without swapping
 * (/proc/meminfo MemAvailable), or 0 if unknown. */
static inline uint64_t compat_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* Resident set size of this process in bytes, or 0 if unknown. */
static inline uint64_t compat_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long pages = 0, rss = 0;
    int ok = fscanf(f, "%llu %llu", &pages, &rss) == 2;
    fclose(f);
    return ok ? (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Size of an open file, or -1. */
static inline int64_t compat_file_size(int fd) {
    struct stat st;
    if (fstat(fd, &st)) return -1;
    return (int64_t)st.st_size;
}

/* errno for "not a regular file" (a FIFO, socket, device or directory),
 * which has no errno of its own; compat_strerror names it. */
#define COMPAT_ENOTREG 4095

/* strerror that also knows COMPAT_ENOTREG. */
static inline const char *compat_strerror(int e) {
    if (e == ENOMEM) return "out of memory";
    return e == COMPAT_ENOTREG ? "not a regular file (FIFOs, devices, sockets and directories are refused)" : strerror(e);
}

/* Opens an existing regular file read-only (flags may add O_DIRECT)
 * without ever blocking: a FIFO would otherwise wait forever for a writer.
 * Returns the descriptor, or -1 with errno (COMPAT_ENOTREG for anything but
 * a regular file). */
static inline int compat_open_regular(const char *path, int flags) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        int e = S_ISREG(st.st_mode) ? errno : COMPAT_ENOTREG;
        close(fd);
        errno = e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* Reads a whole small file (≤ cap bytes) into a NUL-terminated buffer.
 * Returns the buffer (caller frees) and its length in *len, or NULL with
 * errno set (EFBIG when larger than cap, COMPAT_ENOTREG when not a regular
 * file). */
static inline char *compat_read_file(const char *path, size_t cap, size_t *len) {
    int fd = compat_open_regular(path, 0);
    if (fd < 0) return NULL;
    int64_t sz = compat_file_size(fd);
    if (sz < 0) { int e = errno; close(fd); errno = e; return NULL; }
    if ((uint64_t)sz > cap) { close(fd); errno = EFBIG; return NULL; }
    char *buf = (char *)malloc((size_t)sz + 1);
    if (!buf) { close(fd); errno = ENOMEM; return NULL; }
    if (compat_pread_full(fd, buf, (size_t)sz, 0)) { int e = errno; free(buf); close(fd); errno = e; return NULL; }
    close(fd);
    buf[sz] = 0;
    *len = (size_t)sz;
    return buf;
}

/* Removes <path>.tmp.* files: the temporaries a writer killed mid-write
 * left beside path (compat_write_atomic's names, <path>.tmp.<pid>). With
 * dead_only, a temporary whose pid is still running (or is this process)
 * is left alone, for writers that hold no lock. */
static inline void compat_sweep_temps(const char *path, int dead_only) {
    const char *slash = strrchr(path, '/');
    char dir[4096], prefix[512];
    if (slash == path) snprintf(dir, sizeof dir, "/"); /* a file in the root directory */
    else snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(prefix, sizeof prefix, "%s.tmp.", slash ? slash + 1 : path);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        if (dead_only) {
            char *end;
            long pid = strtol(e->d_name + strlen(prefix), &end, 10);
            if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        }
        char full[4700];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        unlink(full);
    }
    closedir(d);
}

/* Writes len bytes to path atomically: a temporary file in the same
 * directory, fsync, rename over path. A crash leaves either the old file or
 * the complete new one. Returns 0 or -1 with errno set. */
static inline int compat_write_atomic(const char *path, const void *data, size_t len) {
    size_t pl = strlen(path);
    char *tmp = (char *)malloc(pl + 32);
    if (!tmp) { errno = ENOMEM; return -1; }
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp); /* a dead writer's, or anything else squatting the name: never written through */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) { int e = errno; free(tmp); errno = e; return -1; }
    if (compat_write_full(fd, data, len) || fsync(fd)) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        errno = e;
        return -1;
    }
    if (close(fd) || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        errno = e;
        return -1;
    }
    free(tmp);
    return 0;
}

#endif
