/* compat.h — OS shims: full preads, aligned allocation, clocks, memory
 * figures (MemAvailable, RSS), CPU features the OS reports, atomic file
 * replacement (only ever over a regular file or a new name: the one rule,
 * compat_replace, every writer goes through); on Windows the POSIX calls the engine makes (open, pread,
 * mmap, mlock, flock, fsync, rename, stat, directories, signals, sysconf)
 * mapped onto the Win32 API with UTF-8 file names through the wide-char
 * calls; on macOS F_NOCACHE, F_RDADVISE, F_FULLFSYNC and Mach's memory
 * figures where Linux has O_DIRECT, fadvise and /proc. The only file that
 * knows about platform differences. Prefix: compat_ (compat_w_ for the
 * Windows mappings). Must not: know about models, tensors or the engine. */
#ifndef COLI_COMPAT_H
#define COLI_COMPAT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#if defined(_WIN32) && !defined(_FILE_OFFSET_BITS)
#define _FILE_OFFSET_BITS 64 /* 64-bit off_t, stat sizes and lseek */
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
#ifdef _WIN32
/* ---- Windows (MinGW-w64): the POSIX calls the engine makes, on Win32.
 * Every system header the code includes comes first, so the macros below
 * never rewrite a declaration. File names are UTF-8 throughout and go
 * through the wide-char API; descriptors are CRT descriptors over Win32
 * handles, always binary. */
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef PSAPI_VERSION
#define PSAPI_VERSION 2 /* GetProcessMemoryInfo from kernel32 */
#endif
#include <ctype.h>
#include <direct.h>
#include <io.h>
#include <limits.h>
#include <math.h>
#include <process.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#include <psapi.h>
#include <shellapi.h>
#undef far /* windows.h's 16-bit pointer qualifiers: ordinary names here */
#undef near

/* Flags the CRT lacks. O_DIRECT asks for FILE_FLAG_NO_BUFFERING (offsets,
 * lengths and buffer addresses sector-aligned: IO_ALIGN satisfies it). */
#define O_DIRECT 0x1000000
#define O_CLOEXEC _O_NOINHERIT
#define O_NOFOLLOW 0
#define O_NONBLOCK 0
#define LOCK_SH 1
#define LOCK_EX 2
#define LOCK_NB 4
#define LOCK_UN 8
#define PROT_READ 1
#define MAP_SHARED 1
#define MAP_PRIVATE 2
#define MAP_FAILED ((void *)-1)
#define _SC_NPROCESSORS_ONLN 84
#define _SC_PAGESIZE 30
#ifndef SIGBUS
#define SIGBUS 10 /* never raised: a mapped file's I/O error is an SEH exception */
#endif
#ifndef SIGPIPE
#define SIGPIPE 13 /* never raised: a write to a closed pipe fails with EPIPE */
#endif

/* errno for the last Win32 error. */
static inline int compat_w_errno(DWORD e) {
    switch (e) {
    case ERROR_FILE_NOT_FOUND: case ERROR_PATH_NOT_FOUND: case ERROR_INVALID_NAME: case ERROR_BAD_NETPATH: return ENOENT;
    case ERROR_ACCESS_DENIED: case ERROR_SHARING_VIOLATION: return EACCES;
    case ERROR_FILE_EXISTS: case ERROR_ALREADY_EXISTS: return EEXIST;
    case ERROR_LOCK_VIOLATION: case ERROR_IO_PENDING: return EWOULDBLOCK;
    case ERROR_NOT_ENOUGH_MEMORY: case ERROR_OUTOFMEMORY: case ERROR_WORKING_SET_QUOTA: return ENOMEM;
    case ERROR_DISK_FULL: case ERROR_HANDLE_DISK_FULL: return ENOSPC;
    case ERROR_INVALID_PARAMETER: return EINVAL;
    case ERROR_INVALID_HANDLE: return EBADF;
    case ERROR_DIR_NOT_EMPTY: return ENOTEMPTY;
    case ERROR_DIRECTORY: return ENOTDIR;
    case ERROR_FILENAME_EXCED_RANGE: return ENAMETOOLONG;
    default: return EIO;
    }
}

/* A UTF-8 string as a malloc'ed wide string, or NULL (errno EINVAL for
 * bytes that are not UTF-8, ENOMEM). */
static inline wchar_t *compat_w_wide(const char *s) {
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, NULL, 0);
    if (n <= 0) { errno = EINVAL; return NULL; }
    wchar_t *w = (wchar_t *)malloc((size_t)n * sizeof *w);
    if (!w) { errno = ENOMEM; return NULL; }
    MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s, -1, w, n);
    return w;
}

/* The handle under a CRT descriptor (INVALID_HANDLE_VALUE, errno EBADF). */
static inline HANDLE compat_w_handle(int fd) {
    HANDLE h = (HANDLE)_get_osfhandle(fd);
    if (h == INVALID_HANDLE_VALUE) errno = EBADF;
    return h;
}

/* open(2): CreateFileW, shared for reading, writing and deletion as POSIX
 * files are (a rename over an open file works), then a binary CRT
 * descriptor. Directories open read-only, so callers see them as
 * non-regular files rather than EACCES. */
static inline int compat_w_open(const char *path, int flags, ...) {
    wchar_t *w = compat_w_wide(path);
    if (!w) return -1;
    int acc = flags & (_O_RDONLY | _O_WRONLY | _O_RDWR);
    DWORD access = acc == _O_RDONLY ? GENERIC_READ : acc == _O_WRONLY ? GENERIC_WRITE : GENERIC_READ | GENERIC_WRITE;
    DWORD disp = (flags & _O_CREAT) && (flags & _O_EXCL) ? CREATE_NEW
                 : (flags & _O_CREAT) && (flags & _O_TRUNC) ? CREATE_ALWAYS
                 : (flags & _O_CREAT) ? OPEN_ALWAYS
                 : (flags & _O_TRUNC) ? TRUNCATE_EXISTING : OPEN_EXISTING;
    DWORD attr = FILE_ATTRIBUTE_NORMAL | ((flags & O_DIRECT) ? FILE_FLAG_NO_BUFFERING : 0) | (acc == _O_RDONLY ? FILE_FLAG_BACKUP_SEMANTICS : 0);
    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, (flags & _O_NOINHERIT) ? FALSE : TRUE};
    HANDLE h = CreateFileW(w, access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, &sa, disp, attr, NULL);
    free(w);
    if (h == INVALID_HANDLE_VALUE) { errno = compat_w_errno(GetLastError()); return -1; }
    int fd = _open_osfhandle((intptr_t)h, (acc == _O_RDONLY ? _O_RDONLY : 0) | (flags & _O_APPEND));
    if (fd < 0) { CloseHandle(h); errno = EMFILE; return -1; }
    return fd;
}

/* pread(2): ReadFile at an explicit 64-bit offset (OVERLAPPED); 0 at the
 * end of the file. The file position is not used by anyone else. */
static inline ssize_t compat_w_pread(int fd, void *buf, size_t n, uint64_t off) {
    HANDLE h = compat_w_handle(fd);
    if (h == INVALID_HANDLE_VALUE) return -1;
    OVERLAPPED ov;
    memset(&ov, 0, sizeof ov);
    ov.Offset = (DWORD)off, ov.OffsetHigh = (DWORD)(off >> 32);
    DWORD got = 0, want = n > ((size_t)1 << 30) ? (DWORD)1 << 30 : (DWORD)n;
    if (!ReadFile(h, buf, want, &got, &ov)) {
        DWORD e = GetLastError();
        if (e == ERROR_HANDLE_EOF) return 0;
        errno = compat_w_errno(e);
        return -1;
    }
    return (ssize_t)got;
}

/* write(2) in pieces the CRT's unsigned count can take. */
static inline ssize_t compat_w_write(int fd, const void *buf, size_t n) {
    return _write(fd, buf, n > ((size_t)1 << 30) ? 1u << 30 : (unsigned)n);
}

/* fsync(2): FlushFileBuffers. */
static inline int compat_w_fsync(int fd) {
    HANDLE h = compat_w_handle(fd);
    if (h == INVALID_HANDLE_VALUE) return -1;
    if (FlushFileBuffers(h)) return 0;
    errno = compat_w_errno(GetLastError());
    return -1;
}

/* rename(2): MoveFileExW replacing the target, as POSIX rename does
 * (the CRT's rename refuses an existing target). */
static inline int compat_w_rename(const char *from, const char *to) {
    wchar_t *a = compat_w_wide(from), *b = a ? compat_w_wide(to) : NULL;
    int ok = a && b && MoveFileExW(a, b, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH);
    if (a && b && !ok) errno = compat_w_errno(GetLastError());
    free(a), free(b);
    return ok ? 0 : -1;
}

/* unlink(2), mkdir(2) (the mode is POSIX only), access(2). */
static inline int compat_w_unlink(const char *path) {
    wchar_t *w = compat_w_wide(path);
    int r = w ? _wunlink(w) : -1;
    free(w);
    return r;
}
static inline int compat_w_mkdir(const char *path) {
    wchar_t *w = compat_w_wide(path);
    int r = w ? _wmkdir(w) : -1;
    free(w);
    return r;
}
static inline int compat_w_access(const char *path, int mode) {
    wchar_t *w = compat_w_wide(path);
    int r = w ? _waccess(w, mode & 6) : -1; /* no execute bit on Windows */
    free(w);
    return r;
}

/* stat(2) and lstat(2) through _wstat64, with trailing separators dropped
 * (the CRT refuses "dir\\"). */
static inline int compat_w_stat(const char *path, struct _stat64 *st) {
    wchar_t *w = compat_w_wide(path);
    if (!w) return -1;
    size_t n = wcslen(w);
    while (n > 1 && (w[n - 1] == L'/' || w[n - 1] == L'\\') && !(n == 3 && w[1] == L':')) w[--n] = 0;
    int r = _wstat64(w, st);
    free(w);
    return r;
}

/* fopen(3) through _wfopen, always binary (bytes written are the bytes
 * Linux writes). */
static inline FILE *compat_w_fopen(const char *path, const char *mode) {
    wchar_t wm[16];
    size_t k = 0;
    for (const char *m = mode; *m && k < 13; m++)
        if (*m != 'b' && *m != 't') wm[k++] = (wchar_t)*m;
    wm[k++] = L'b', wm[k] = 0;
    wchar_t *w = compat_w_wide(path);
    FILE *f = w ? _wfopen(w, wm) : NULL;
    free(w);
    return f;
}

/* Directories through FindFirstFileW, names back in UTF-8. */
struct compat_w_dirent {
    char d_name[MAX_PATH * 4];
};
typedef struct {
    HANDLE h;
    int first; /* fd holds an entry not yet returned */
    WIN32_FIND_DATAW fd;
    struct compat_w_dirent ent;
    char *path; /* as opened, for fstatat */
} compat_w_DIR;
static inline compat_w_DIR *compat_w_opendir(const char *path) {
    size_t n = strlen(path);
    char *pat = (char *)malloc(n + 3);
    if (!pat) { errno = ENOMEM; return NULL; }
    memcpy(pat, path, n);
    if (n && path[n - 1] != '/' && path[n - 1] != '\\') pat[n++] = '\\';
    pat[n++] = '*', pat[n] = 0;
    wchar_t *w = compat_w_wide(pat);
    free(pat);
    if (!w) return NULL;
    compat_w_DIR *d = (compat_w_DIR *)calloc(1, sizeof *d);
    if (!d) { free(w); errno = ENOMEM; return NULL; }
    d->h = FindFirstFileW(w, &d->fd);
    free(w);
    if (d->h == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        free(d);
        errno = e == ERROR_FILE_NOT_FOUND ? ENOENT : compat_w_errno(e);
        return NULL;
    }
    d->first = 1;
    if (!(d->path = strdup(path))) {
        FindClose(d->h);
        free(d);
        errno = ENOMEM;
        return NULL;
    }
    return d;
}
static inline struct compat_w_dirent *compat_w_readdir(compat_w_DIR *d) {
    if (!d->first && !FindNextFileW(d->h, &d->fd)) return NULL;
    d->first = 0;
    if (!WideCharToMultiByte(CP_UTF8, 0, d->fd.cFileName, -1, d->ent.d_name, (int)sizeof d->ent.d_name, NULL, NULL)) d->ent.d_name[0] = 0;
    return &d->ent;
}
static inline int compat_w_closedir(compat_w_DIR *d) {
    FindClose(d->h);
    free(d->path);
    free(d);
    return 0;
}

/* fstatat(dirfd(d), name, st, AT_SYMLINK_NOFOLLOW): a stat of the entry
 * by its path under the directory d was opened on. */
static inline int compat_w_fstatat(compat_w_DIR *d, const char *name, struct _stat64 *st) {
    char *p = (char *)malloc(strlen(d->path) + strlen(name) + 2);
    if (!p) { errno = ENOMEM; return -1; }
    sprintf(p, "%s\\%s", d->path, name);
    int r = compat_w_stat(p, st);
    free(p);
    return r;
}

/* mmap(2) of a file, read-only: a file mapping and a view of it; the view
 * keeps the mapping alive. munmap(2): UnmapViewOfFile. */
static inline void *compat_w_mmap(void *addr, size_t len, int prot, int flags, int fd, uint64_t off) {
    (void)addr, (void)prot;
    HANDLE h = compat_w_handle(fd);
    if (h == INVALID_HANDLE_VALUE) return MAP_FAILED;
    HANDLE map = CreateFileMappingW(h, NULL, PAGE_READONLY, 0, 0, NULL);
    if (!map) { errno = compat_w_errno(GetLastError()); return MAP_FAILED; }
    void *p = MapViewOfFile(map, (flags & MAP_PRIVATE) ? FILE_MAP_COPY : FILE_MAP_READ, (DWORD)(off >> 32), (DWORD)off, len);
    DWORD e = GetLastError();
    CloseHandle(map);
    if (!p) { errno = compat_w_errno(e); return MAP_FAILED; }
    return p;
}
static inline int compat_w_munmap(void *p, size_t len) {
    (void)len;
    return UnmapViewOfFile(p) ? 0 : -1;
}

/* mlock(2): VirtualLock, first raising the working-set minimum by len
 * (Windows locks pages only within the working set). */
static inline int compat_w_mlock(const void *p, size_t len) {
    SIZE_T lo = 0, hi = 0;
    HANDLE self = GetCurrentProcess();
    if (GetProcessWorkingSetSize(self, &lo, &hi)) SetProcessWorkingSetSize(self, lo + len, (hi > lo + len ? hi : lo + len) + len);
    if (VirtualLock((LPVOID)p, len)) return 0;
    errno = compat_w_errno(GetLastError());
    return -1;
}

/* flock(2) with LockFileEx. Windows locks are mandatory for the bytes they
 * cover, so the lock covers one byte far past any data: the file stays
 * readable and writable by everyone, as with an advisory lock. */
#define COMPAT_W_LOCK_AT 0x7fffffff00000000ull
static inline int compat_w_flock(int fd, int op) {
    HANDLE h = compat_w_handle(fd);
    if (h == INVALID_HANDLE_VALUE) return -1;
    OVERLAPPED ov;
    memset(&ov, 0, sizeof ov);
    ov.Offset = (DWORD)COMPAT_W_LOCK_AT, ov.OffsetHigh = (DWORD)(COMPAT_W_LOCK_AT >> 32);
    BOOL ok = (op & LOCK_UN) ? UnlockFileEx(h, 0, 1, 0, &ov)
                             : LockFileEx(h, ((op & LOCK_EX) ? LOCKFILE_EXCLUSIVE_LOCK : 0) | ((op & LOCK_NB) ? LOCKFILE_FAIL_IMMEDIATELY : 0), 0, 1, 0, &ov);
    if (ok) return 0;
    errno = compat_w_errno(GetLastError());
    return -1;
}

/* kill(pid, 0): whether a process is running (ESRCH when not). Other
 * signals are not sent on Windows. */
static inline int compat_w_kill(long pid, int sig) {
    if (sig) { errno = EINVAL; return -1; }
    HANDLE p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!p) {
        DWORD e = GetLastError();
        errno = e == ERROR_ACCESS_DENIED ? EPERM : ESRCH;
        return -1;
    }
    DWORD code = 0;
    BOOL alive = GetExitCodeProcess(p, &code) && code == STILL_ACTIVE;
    CloseHandle(p);
    if (alive) return 0;
    errno = ESRCH;
    return -1;
}

/* sysconf(3) for the two names the engine asks. */
static inline long compat_w_sysconf(int name) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    if (name == _SC_NPROCESSORS_ONLN) return (long)GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    if (name == _SC_PAGESIZE) return (long)si.dwPageSize;
    errno = EINVAL;
    return -1;
}

/* sigaction(2) for SIGINT and SIGTERM: console control events. Ctrl-C is
 * SIGINT; Ctrl-Break, closing the console, logoff and shutdown are SIGTERM.
 * The handler runs on the console's control thread, so it must only set
 * atomic flags (as the engine's handlers do). Other signals go to the CRT's
 * signal(), which ignores the ones Windows never raises (SIGPIPE, SIGBUS). */
struct sigaction {
    void (*sa_handler)(int);
    int sa_mask;
    int sa_flags;
};
static void (*volatile compat_w_on_int)(int), (*volatile compat_w_on_term)(int);
static inline BOOL WINAPI compat_w_ctrl(DWORD ev) {
    void (*f)(int) = ev == CTRL_C_EVENT ? compat_w_on_int : compat_w_on_term;
    if (!f || f == SIG_DFL) return FALSE; /* the default: the process ends */
    if (f != SIG_IGN) f(ev == CTRL_C_EVENT ? SIGINT : SIGTERM);
    return TRUE;
}
static inline int compat_w_sigaction(int sig, const struct sigaction *sa, struct sigaction *old) {
    if (old) memset(old, 0, sizeof *old);
    if (sig != SIGINT && sig != SIGTERM) return signal(sig, sa->sa_handler) == SIG_ERR ? -1 : 0;
    static int installed;
    if (sig == SIGINT) compat_w_on_int = sa->sa_handler;
    else compat_w_on_term = sa->sa_handler;
    if (!installed) installed = SetConsoleCtrlHandler(compat_w_ctrl, TRUE);
    return 0;
}
static inline void (*compat_w_signal(int sig, void (*f)(int)))(int) {
    if (sig != SIGINT && sig != SIGTERM) return signal(sig, f);
    struct sigaction sa = {f, 0, 0};
    compat_w_sigaction(sig, &sa, NULL);
    return SIG_DFL;
}

/* mkdtemp(3): the trailing XXXXXX replaced until a new directory is made.
 * mkfifo(3): Windows has no FIFOs (ENOSYS). */
static inline char *compat_w_mkdtemp(char *tmpl) {
    size_t n = strlen(tmpl);
    if (n < 6 || strcmp(tmpl + n - 6, "XXXXXX")) { errno = EINVAL; return NULL; }
    static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    LARGE_INTEGER c;
    QueryPerformanceCounter(&c);
    uint64_t x = (uint64_t)c.QuadPart ^ ((uint64_t)GetCurrentProcessId() << 32);
    for (int tries = 0; tries < 1000; tries++) {
        for (int i = 0; i < 6; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            tmpl[n - 6 + i] = digits[(x >> 33) % 36];
        }
        if (!compat_w_mkdir(tmpl)) return tmpl;
        if (errno != EEXIST) return NULL;
    }
    return NULL;
}
static inline int compat_w_mkfifo(const char *path, int mode) {
    (void)path, (void)mode;
    errno = ENOSYS;
    return -1;
}

/* posix_fadvise(2): Windows takes no read-ahead hints; a no-op. */
static inline int compat_w_fadvise(int fd, uint64_t off, uint64_t len, int advice) {
    (void)fd, (void)off, (void)len, (void)advice;
    return 0;
}

/* strndup(3) and getline(3), which the CRT lacks. */
static inline char *compat_w_strndup(const char *s, size_t n) {
    size_t l = 0;
    while (l < n && s[l]) l++;
    char *d = (char *)malloc(l + 1);
    if (!d) { errno = ENOMEM; return NULL; }
    memcpy(d, s, l);
    d[l] = 0;
    return d;
}
static inline ssize_t compat_w_getline(char **line, size_t *cap, FILE *f) {
    size_t n = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 128;
            char *p = (char *)realloc(*line, nc);
            if (!p) { errno = ENOMEM; return -1; }
            *line = p, *cap = nc;
        }
        (*line)[n++] = (char)c;
        if (c == '\n') break;
    }
    if (!n) return -1;
    (*line)[n] = 0;
    return (ssize_t)n;
}

/* getenv(3) in UTF-8 (the CRT's is in the ANSI code page): each name's
 * value is converted once and kept for the life of the process, as the
 * CRT's own strings are; a changed value gets a new copy. */
static inline char *compat_w_getenv(const char *name) {
    static struct { char *name, *val; } cache[256];
    wchar_t *wn = compat_w_wide(name);
    const wchar_t *wv = wn ? _wgetenv(wn) : NULL;
    free(wn);
    if (!wv) return NULL;
    int n = WideCharToMultiByte(CP_UTF8, 0, wv, -1, NULL, 0, NULL, NULL);
    char *v = n > 0 ? (char *)malloc((size_t)n) : NULL;
    if (!v) return NULL;
    WideCharToMultiByte(CP_UTF8, 0, wv, -1, v, n, NULL, NULL);
    for (int i = 0; i < 256; i++) {
        if (cache[i].name && strcmp(cache[i].name, name)) continue;
        if (cache[i].name && !strcmp(cache[i].val, v)) { free(v); return cache[i].val; }
        if (!cache[i].name && !(cache[i].name = strdup(name))) break;
        cache[i].val = v; /* an older value stays allocated: a caller may hold it */
        return v;
    }
    return v; /* more than 256 names: not cached */
}

/* Standard streams in binary mode (output bytes equal Linux's: "\n", not
 * "\r\n"), every later CRT open binary, and the console in UTF-8. Each
 * translation unit has its copy; running it twice is harmless. */
__attribute__((constructor)) static void compat_w_init(void) {
    _fmode = _O_BINARY;
    _setmode(0, _O_BINARY), _setmode(1, _O_BINARY), _setmode(2, _O_BINARY);
    SetConsoleOutputCP(CP_UTF8), SetConsoleCP(CP_UTF8);
}

#undef open
#undef pread
#undef write
#undef fsync
#undef rename
#undef unlink
#undef mkdir
#undef access
#undef fopen
#undef mmap
#undef munmap
#undef mlock
#undef flock
#undef kill
#undef sysconf
#undef sigaction
#undef signal
#undef strndup
#undef getline
#undef lstat
#undef _stat64
#undef DIR
#undef dirent
#undef opendir
#undef readdir
#undef closedir
#define open compat_w_open
#define pread(fd, buf, n, off) compat_w_pread(fd, buf, n, (uint64_t)(off))
#define write compat_w_write
#define fsync compat_w_fsync
#define rename compat_w_rename
#define unlink compat_w_unlink
#define mkdir(path, mode) compat_w_mkdir(path)
#define access compat_w_access
#define fopen compat_w_fopen
#define mmap(a, l, p, f, fd, o) compat_w_mmap(a, l, p, f, fd, (uint64_t)(o))
#define munmap compat_w_munmap
#define mlock compat_w_mlock
#define flock compat_w_flock
#define kill(pid, sig) compat_w_kill((long)(pid), sig)
#define sysconf compat_w_sysconf
#define sigaction(s, a, o) compat_w_sigaction(s, a, o)
#define sigemptyset(m) (*(m) = 0)
#define signal compat_w_signal
#define strndup compat_w_strndup
#define getline compat_w_getline
#define getenv compat_w_getenv
#define _stat64(p, st) compat_w_stat(p, st) /* stat() is _stat64() with 64-bit offsets */
#define lstat(p, st) compat_w_stat(p, st)
#define DIR compat_w_DIR
#define dirent compat_w_dirent
#define opendir compat_w_opendir
#define readdir compat_w_readdir
#define closedir compat_w_closedir
#define posix_fadvise compat_w_fadvise
#define mkdtemp compat_w_mkdtemp
#define mkfifo compat_w_mkfifo
#define POSIX_FADV_WILLNEED 3
#define POSIX_FADV_SEQUENTIAL 2
#define POSIX_FADV_DONTNEED 4
#define S_ISLNK(m) ((void)(m), 0) /* stat follows links; there are no sockets */
#define S_ISSOCK(m) ((void)(m), 0)
#define dirfd(d) (d)
#define fstatat(d, name, st, flags) compat_w_fstatat(d, name, st)
#elif defined(__APPLE__)
/* ---- macOS: POSIX, less what Linux adds. The engine's O_DIRECT becomes
 * F_NOCACHE on the descriptor (compat_open_regular), posix_fadvise's
 * WILLNEED becomes F_RDADVISE, fsync becomes F_FULLFSYNC (fsync alone
 * leaves the data in the drive's cache), and the memory figures come from
 * Mach. Nothing else differs for the engine. */
#include <limits.h>
#include <mach/mach.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sysctl.h>

/* Our flag, never passed to open(): any bit works, as compat_open_regular
 * takes it off and sets F_NOCACHE instead. */
#define O_DIRECT 0x10000000
#ifndef POSIX_FADV_WILLNEED
#define POSIX_FADV_SEQUENTIAL 2
#define POSIX_FADV_WILLNEED 3
#define POSIX_FADV_DONTNEED 4
#endif

/* posix_fadvise: WILLNEED starts the read-ahead of [off, off+len) (len 0
 * means none here); the others have no macOS equivalent and succeed. */
static inline int compat_m_fadvise(int fd, off_t off, off_t len, int advice) {
    if (advice != POSIX_FADV_WILLNEED || len <= 0) return 0;
    struct radvisory ra;
    ra.ra_offset = off;
    ra.ra_count = len > INT_MAX ? INT_MAX : (int)len;
    return fcntl(fd, F_RDADVISE, &ra) == -1 ? errno : 0;
}

/* fsync that reaches the medium: F_FULLFSYNC, or fsync where the file
 * system refuses it (network and FAT volumes). */
static inline int compat_m_fsync(int fd) {
    return fcntl(fd, F_FULLFSYNC) == -1 ? fsync(fd) : 0;
}

/* Whether sysctl `name` (an int flag such as hw.optional.arm.FEAT_I8MM)
 * exists and is non-zero. */
static inline int compat_m_sysctl_flag(const char *name) {
    int v = 0;
    size_t n = sizeof v;
    return !sysctlbyname(name, &v, &n, NULL, 0) && v;
}
#define posix_fadvise compat_m_fadvise
#define fsync(fd) compat_m_fsync(fd)
#else
#include <sys/file.h>
#include <sys/mman.h>
#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#endif

/* OpenMP's thread count and thread number, for the loops that load,
 * pin and convert in parallel. A build without OpenMP (macOS without
 * Homebrew's libomp, make OPENMP=0) ignores their pragmas and runs those
 * loops on the calling thread; the forward pass has its own threads
 * (team.h) either way. */
#ifdef _OPENMP
#include <omp.h>
static inline int compat_omp_max_threads(void) { return omp_get_max_threads(); }
static inline int compat_omp_thread(void) { return omp_get_thread_num(); }
static inline void compat_omp_set_threads(int n) { omp_set_num_threads(n); }
#else
static inline int compat_omp_max_threads(void) { return 1; }
static inline int compat_omp_thread(void) { return 0; }
static inline void compat_omp_set_threads(int n) { (void)n; }
#endif

/* The CPUs this process may run on: its affinity mask on Linux (taskset,
 * cgroup cpusets, a test runner's lane) and Windows (start /affinity; one
 * processor group), elsewhere every online CPU; at least 1. */
#if defined(__linux__)
#include <sched.h>
#endif
static inline int compat_cpus(void) {
#if defined(__linux__)
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#elif defined(_WIN32)
    DWORD_PTR mine = 0, sys = 0;
    int bits = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &sys))
        for (; mine; mine &= mine - 1) bits++;
    if (bits > 0 && GetActiveProcessorGroupCount() == 1) return bits;
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* What to do about a build without libmicrohttpd (serve mode), for its
 * message: there is none to install for the Windows build. */
#ifdef _WIN32
#define COMPAT_MHD_HINT "serve mode is not available on Windows: the Windows build has no HTTP server library"
#else
#define COMPAT_MHD_HINT "install libmicrohttpd-dev and rebuild"
#endif

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
 * compat_aligned_free(). Returns NULL on failure or size 0. */
static inline void *compat_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
#ifdef _WIN32
    if (!size || !(p = _aligned_malloc(size, align))) return NULL;
#else
    if (!size || posix_memalign(&p, align, size)) return NULL;
#endif
    return p;
}

/* Frees what compat_aligned_alloc returned (Windows keeps such blocks
 * apart from malloc's: free() would corrupt its heap). */
static inline void compat_aligned_free(void *p) {
#ifdef _WIN32
    _aligned_free(p);
#else
    free(p);
#endif
}

/* Monotonic seconds (Windows: QueryPerformanceCounter). */
static inline double compat_now(void) {
#ifdef _WIN32
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f), QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

/* Bytes of memory available for new allocations without swapping
 * (/proc/meminfo MemAvailable; Windows: available physical memory; macOS,
 * which has no such figure: free, inactive, speculative and purgeable
 * pages), or 0 if unknown. */
static inline uint64_t compat_mem_available(void) {
#if defined(_WIN32)
    MEMORYSTATUSEX ms;
    ms.dwLength = sizeof ms;
    return GlobalMemoryStatusEx(&ms) ? (uint64_t)ms.ullAvailPhys : 0;
#elif defined(__APPLE__)
    mach_port_t host = mach_host_self();
    vm_statistics64_data_t vm;
    mach_msg_type_number_t n = HOST_VM_INFO64_COUNT;
    vm_size_t page = 0; /* the kernel's page (16 KiB on Apple silicon), which the counts are in */
    int ok = host_page_size(host, &page) == KERN_SUCCESS &&
             host_statistics64(host, HOST_VM_INFO64, (host_info64_t)&vm, &n) == KERN_SUCCESS;
    mach_port_deallocate(mach_task_self(), host);
    if (!ok) return 0;
    return ((uint64_t)vm.free_count + vm.inactive_count + vm.speculative_count + vm.purgeable_count) * (uint64_t)page;
#else
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kb) == 1) break;
    fclose(f);
    return kb * 1024;
#endif
}

/* Resident set size of this process in bytes (Windows: the working set),
 * or 0 if unknown. */
static inline uint64_t compat_rss(void) {
#if defined(_WIN32)
    PROCESS_MEMORY_COUNTERS pm;
    return GetProcessMemoryInfo(GetCurrentProcess(), &pm, sizeof pm) ? (uint64_t)pm.WorkingSetSize : 0;
#elif defined(__APPLE__)
    mach_task_basic_info_data_t ti;
    mach_msg_type_number_t n = MACH_TASK_BASIC_INFO_COUNT;
    return task_info(mach_task_self(), MACH_TASK_BASIC_INFO, (task_info_t)&ti, &n) == KERN_SUCCESS ? (uint64_t)ti.resident_size : 0;
#else
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long pages = 0, rss = 0;
    int ok = fscanf(f, "%llu %llu", &pages, &rss) == 2;
    fclose(f);
    return ok ? (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
#endif
}

/* Size of an open file, or -1. */
static inline int64_t compat_file_size(int fd) {
    struct stat st;
    if (fstat(fd, &st)) return -1;
    return (int64_t)st.st_size;
}

/* Whether paths a and b name the same file or directory (both exist and
 * have the same device and inode; on Windows the same volume and file
 * index, as st_ino is always 0 there). */
static inline int compat_same_file(const char *a, const char *b) {
#ifdef _WIN32
    BY_HANDLE_FILE_INFORMATION fi[2];
    const char *p[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        wchar_t *w = compat_w_wide(p[i]);
        HANDLE h = w ? CreateFileW(w, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL, OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL)
                     : INVALID_HANDLE_VALUE;
        free(w);
        if (h == INVALID_HANDLE_VALUE) return 0;
        BOOL ok = GetFileInformationByHandle(h, &fi[i]);
        CloseHandle(h);
        if (!ok) return 0;
    }
    return fi[0].dwVolumeSerialNumber == fi[1].dwVolumeSerialNumber && fi[0].nFileIndexHigh == fi[1].nFileIndexHigh &&
           fi[0].nFileIndexLow == fi[1].nFileIndexLow;
#else
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
#endif
}

/* value, or NULL when the variable `name` holds the operating system's
 * setting rather than the user's: Windows sets TEMP and TMP to the
 * temporary directory in every process, which is not a temperature, and
 * cmd.exe passes on PROMPT=$P$G, which is not a prompt; its own variables
 * (windir, ProgramFiles(x86), ...) are never typos of ours. */
static inline const char *compat_env_user(const char *name, const char *value) {
#ifdef _WIN32
    static const char *const os_vars[] = {"TEMP", "TMP", "OS", "PATHEXT", "ComSpec", "windir", "SystemRoot", "SystemDrive",
                                          "USERNAME", "USERPROFILE", "USERDOMAIN", "COMPUTERNAME", "HOMEDRIVE", "HOMEPATH", "PUBLIC",
                                          "APPDATA", "LOCALAPPDATA", "ProgramData", "ProgramFiles", "ProgramW6432", "LOGONSERVER",
                                          "SESSIONNAME", "CLIENTNAME", "ALLUSERSPROFILE", "winsysdir", NULL};
    int os = 0;
    for (int i = 0; os_vars[i]; i++) os |= !_stricmp(name, os_vars[i]);
    /* a TEMP the user set for us is a number; the system's is a directory */
    if (os && value && (!_stricmp(name, "TEMP") || !_stricmp(name, "TMP")) && !strpbrk(value, "\\/:")) return value;
    /* cmd.exe exports its own PROMPT ($P$G by default) to what it starts */
    if (!os && value && !_stricmp(name, "PROMPT") && !_stricmp(value, "$P$G")) return NULL;
    return os ? NULL : value;
#else
    (void)name;
    return value;
#endif
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
#if defined(_WIN32)
    int fd = open(path, O_RDONLY | O_CLOEXEC | flags); /* no FIFO can block CreateFileW */
#else
#if defined(__APPLE__)
    const int nocache = flags & O_DIRECT;
    flags &= ~O_DIRECT;
#endif
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
#endif
    if (fd < 0) return -1;
    struct stat st;
    int e = fstat(fd, &st) ? errno : !S_ISREG(st.st_mode) ? COMPAT_ENOTREG : 0;
#if !defined(_WIN32)
    int fl = e ? -1 : fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
#endif
#if defined(__APPLE__)
    if (!e && nocache && fcntl(fd, F_NOCACHE, 1) == -1) e = errno;
#endif
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Which optional aarch64 instructions the CPU and OS offer, as
 * COMPAT_ARM_* bits: the auxiliary vector on Linux (HWCAP_ASIMDDP,
 * HWCAP2_I8MM), sysctl hw.optional.arm.FEAT_* on macOS, and what the
 * compiler was told elsewhere. 0 off aarch64. */
#define COMPAT_ARM_DOT 1
#define COMPAT_ARM_I8MM 2
static inline int compat_arm_features(void) {
#if defined(__aarch64__) && defined(__APPLE__)
    return (compat_m_sysctl_flag("hw.optional.arm.FEAT_DotProd") ? COMPAT_ARM_DOT : 0) |
           (compat_m_sysctl_flag("hw.optional.arm.FEAT_I8MM") ? COMPAT_ARM_I8MM : 0);
#elif defined(__aarch64__) && defined(__linux__)
    const unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    return (((h1 >> 20) & 1) ? COMPAT_ARM_DOT : 0) | (((h2 >> 13) & 1) ? COMPAT_ARM_I8MM : 0);
#else
    int f = 0;
#ifdef __ARM_FEATURE_DOTPROD
    f |= COMPAT_ARM_DOT;
#endif
#ifdef __ARM_FEATURE_MATMUL_INT8
    f |= COMPAT_ARM_I8MM;
#endif
    return f;
#endif
}

/* Whether the OS keeps AVX-512 register state for this process, given
 * XCR0 (x86). macOS turns that state on at a thread's first AVX-512
 * instruction, so XCR0 says no until then; sysctl hw.optional.avx512f says
 * whether it will. */
static inline int compat_os_avx512(uint64_t xcr0) {
#if defined(__APPLE__)
    (void)xcr0;
    return compat_m_sysctl_flag("hw.optional.avx512f");
#else
    return (xcr0 & 0xE6) == 0xE6; /* SSE, AVX, opmask, ZMM0-15 upper halves, ZMM16-31 */
#endif
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

/* Replaces argv by the command line in UTF-8 where the C runtime gives it
 * in another encoding (Windows: the ANSI code page, which cannot hold most
 * file names); elsewhere does nothing. The strings live as long as the
 * process. */
static inline void compat_args_utf8(int *argc, char ***argv) {
#ifdef _WIN32
    int n = 0;
    wchar_t **w = CommandLineToArgvW(GetCommandLineW(), &n);
    char **a = w ? (char **)calloc((size_t)n + 1, sizeof *a) : NULL;
    for (int i = 0; a && i < n; i++) {
        int len = WideCharToMultiByte(CP_UTF8, 0, w[i], -1, NULL, 0, NULL, NULL);
        if (len <= 0 || !(a[i] = (char *)malloc((size_t)len))) { a = NULL; break; } /* keep the CRT's argv */
        WideCharToMultiByte(CP_UTF8, 0, w[i], -1, a[i], len, NULL, NULL);
    }
    if (w) LocalFree(w);
    if (a) *argc = n, *argv = a;
#else
    (void)argc, (void)argv;
#endif
}

/* The last path separator in path, or NULL: '/' (on Windows also '\\'
 * and a drive letter's ':'). */
static inline const char *compat_last_sep(const char *path) {
#ifdef _WIN32
    const char *s = NULL;
    for (const char *p = path; *p; p++)
        if (*p == '/' || *p == '\\' || (*p == ':' && p == path + 1)) s = p;
    return s;
#else
    return strrchr(path, '/');
#endif
}

/* Removes <path>.tmp.* files: the temporaries a writer killed mid-write
 * left beside path (compat_write_atomic's names, <path>.tmp.<pid>). With
 * dead_only, a temporary whose pid is still running (or is this process)
 * is left alone, for writers that hold no lock. */
static inline void compat_sweep_temps(const char *path, int dead_only) {
    const char *slash = compat_last_sep(path);
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

/* What a file that is not a regular one is, for messages: "a FIFO", "a
 * character device", ... */
static inline const char *compat_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

/* The rule for every file colibri and its tools write: a name is replaced
 * only when nothing is there yet or a regular file is, judged by lstat
 * (the name itself, not what a link points to). A device, FIFO, socket or
 * directory is someone else's (KV_SAVE=/dev/null must not replace
 * /dev/null), and a symbolic link is refused too: renaming over it would
 * replace the link, writing through it would write elsewhere. Returns NULL
 * when path may be replaced (or lstat cannot tell: the write then fails on
 * its own), else what is there, for the caller's message. */
static inline const char *compat_unreplaceable(const char *path) {
    struct stat st;
    if (lstat(path, &st) || S_ISREG(st.st_mode)) return NULL;
    return compat_kind(st.st_mode);
}

/* rename(tmp, path) under compat_unreplaceable's rule: every writer's last
 * step. 0, or -1 with errno (COMPAT_ENOTREG when path is not a regular
 * file; nothing renamed). */
static inline int compat_replace(const char *tmp, const char *path) {
    if (compat_unreplaceable(path)) { errno = COMPAT_ENOTREG; return -1; }
    return rename(tmp, path);
}

/* Writes len bytes to path atomically: a temporary file in the same
 * directory, fsync, rename over path (compat_replace: only a regular file
 * or a new name, checked before anything is written and again at the
 * rename). A crash leaves either the old file or the complete new one.
 * Returns 0 or -1 with errno set (COMPAT_ENOTREG: compat_unreplaceable
 * says what is there). */
static inline int compat_write_atomic(const char *path, const void *data, size_t len) {
    if (compat_unreplaceable(path)) { errno = COMPAT_ENOTREG; return -1; }
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
    if (close(fd) || compat_replace(tmp, path)) {
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
