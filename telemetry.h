/* telemetry.h — run counters and timers, the end-of-run line, the PROF=1
 * stage breakdown, and the `.coli_usage` expert history (read strictly,
 * written atomically). Prefix: tel_. Must not: decide anything (it counts,
 * times and prints what the engine hands it). */
#ifndef COLI_TELEMETRY_H
#define COLI_TELEMETRY_H

#include <inttypes.h>
#include <stdarg.h>

#include "compat.h"

/* Stages of the per-token path. Time is charged by laps: each lap charges
 * the time since the previous lap to one stage, so the stages always add
 * up to the wall time between tel_start and the last lap. */
typedef enum {
    TEL_ATTN,       /* norms, MLA, indexer */
    TEL_ROUTER,     /* router logits, top-k */
    TEL_EXPERT_MM,  /* routed expert matmuls */
    TEL_EXPERT_IO,  /* waiting for expert reads */
    TEL_DENSE_MM,   /* dense MLP, shared experts, lm_head */
    TEL_SAMPLE,     /* sampling, detokenizing, output */
    TEL_OTHER,
    TEL_NSTAGE
} tel_stage;

static const char *const tel_stage_names[TEL_NSTAGE] = {"attention", "router", "expert matmul", "expert I/O wait",
                                                        "dense matmul", "sampling", "other"};

/* What every end line adds under ROUTE_REPLAY. */
#define TEL_REPLAYED " | routing replayed, not the model's"

typedef struct {
    int prof;                     /* stage laps on (PROF=1) */
    int replayed;                 /* ROUTE_REPLAY: the experts were a trace's (said on the end line) */
    double t0, last;
    double stage[TEL_NSTAGE];
    double io_busy;               /* wall seconds with expert reads in flight */
    uint64_t hit_vram, hit_pin, hit_lru, miss, bytes_read;
    int prompt_tokens, gen_tokens;
    double t_prefill, t_decode, ttft;
} tel_stats;

static inline void tel_start(tel_stats *t, int prof) {
    int replayed = t->replayed;
    memset(t, 0, sizeof *t);
    t->prof = prof, t->replayed = replayed;
    t->t0 = t->last = compat_now();
}

/* Charges the time since the previous lap to stage s (only with PROF). */
static inline void tel_lap(tel_stats *t, tel_stage s) {
    if (!t->prof) return;
    double now = compat_now();
    t->stage[s] += now - t->last;
    t->last = now;
}

static inline double tel_pct(double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; }

/* The end-of-run line: prompt and generated tokens with their rates, time
 * to first token, expert hits split pin / LRU (/ GPU tier) / miss, disk bytes per token
 * and the share of wall time spent waiting on the disk. */
static inline void tel_end_line(FILE *f, const tel_stats *t) {
    uint64_t tot = t->hit_vram + t->hit_pin + t->hit_lru + t->miss;
    int toks = t->prompt_tokens + t->gen_tokens;
    double wall = t->t_prefill + t->t_decode;
    fprintf(f, "colibri: prompt %d tok, %.1f tok/s | generated %d tok, %.2f tok/s | TTFT %.3f s | experts: hit %.1f%% (pin %.1f%% + LRU %.1f%%",
            t->prompt_tokens, t->t_prefill > 0 ? t->prompt_tokens / t->t_prefill : 0.0, t->gen_tokens,
            t->t_decode > 0 ? t->gen_tokens / t->t_decode : 0.0, t->ttft, tel_pct((double)(t->hit_vram + t->hit_pin + t->hit_lru), (double)tot),
            tel_pct((double)t->hit_pin, (double)tot), tel_pct((double)t->hit_lru, (double)tot));
    if (t->hit_vram) fprintf(f, " + GPU %.1f%%", tel_pct((double)t->hit_vram, (double)tot));
    fprintf(f, "), miss %.1f%% | %.2f MB/tok from disk", tel_pct((double)t->miss, (double)tot), toks ? t->bytes_read / 1e6 / toks : 0.0);
    if (t->prof) fprintf(f, ", disk wait %.0f%% of wall", tel_pct(t->stage[TEL_EXPERT_IO], wall));
    if (t->replayed) fputs(TEL_REPLAYED, f);
    fputc('\n', f);
}

/* PROF=1: seconds and share of each stage; the parts add up to the wall
 * time measured from tel_start to the last lap. */
static inline void tel_prof_line(FILE *f, const tel_stats *t) {
    double wall = t->last - t->t0, sum = 0;
    fprintf(f, "prof:");
    for (int s = 0; s < TEL_NSTAGE; s++) {
        fprintf(f, "%s %s %.3f s (%.0f%%)", s ? " |" : "", tel_stage_names[s], t->stage[s], tel_pct(t->stage[s], wall));
        sum += t->stage[s];
    }
    double hidden = t->io_busy - t->stage[TEL_EXPERT_IO];
    fprintf(f, " | total %.3f s = wall %.3f s | expert reads in flight %.3f s, %.3f s of it hidden behind compute\n", sum, wall,
            t->io_busy, hidden > 0 ? hidden : 0.0);
}

/* ------------------------------------------------------- .coli_usage */

/* Text, one record per line, sparse:
 *   # colibri expert usage
 *   -1 <layers> <experts>          binds the file to the model's shape
 *   -2 <version> <engine id>       format version 1; FNV-1a of "glm_moe_dsa"
 *   <layer> <expert> <count>       count > 0, each (layer, expert) once
 *   -3 <records> <sum of counts>   last line (the sum saturates at INT64_MAX): a
 *                                  truncated file lacks it */
#define TEL_USAGE_VERSION 1
#define TEL_USAGE_MAX_COUNT ((uint64_t)1 << 62)
#define TEL_USAGE_MAX_SUM ((uint64_t)INT64_MAX) /* the end record's sum saturates here */

/* a + b, saturating at TEL_USAGE_MAX_SUM (a ≤ it, b ≤ TEL_USAGE_MAX_COUNT). */
static inline uint64_t tel_sum_add_(uint64_t a, uint64_t b) { return a > TEL_USAGE_MAX_SUM - b ? TEL_USAGE_MAX_SUM : a + b; }

static inline uint32_t tel_engine_id(const char *name) {
    uint32_t h = 2166136261u;
    while (*name) h = (h ^ (unsigned char)*name++) * 16777619u;
    return h;
}

static inline int tel_fail_(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Parses three integers "a b c" (a may be negative) filling one line. */
static inline int tel_line3_(const char *s, const char *end, int64_t *a, uint64_t *b, uint64_t *c) {
    int64_t v[3];
    for (int k = 0; k < 3; k++) {
        if (k && (s >= end || *s++ != ' ')) return -1;
        int neg = s < end && *s == '-' && k == 0;
        if (neg) s++;
        if (s >= end || *s < '0' || *s > '9') return -1;
        uint64_t x = 0;
        while (s < end && *s >= '0' && *s <= '9') {
            if (x > (UINT64_MAX - 9) / 10) return -1;
            x = x * 10 + (uint64_t)(*s++ - '0');
        }
        if (x > (uint64_t)INT64_MAX) return -1;
        v[k] = neg ? -(int64_t)x : (int64_t)x;
    }
    if (s != end || v[1] < 0 || v[2] < 0) return -1;
    *a = v[0], *b = (uint64_t)v[1], *c = (uint64_t)v[2];
    return 0;
}

/* Parses a usage file's text into counts[L][E] (zeroed first). Returns 0,
 * or -1 with err saying what is wrong (another model, a corrupt or a
 * truncated file); counts are then all zero. */
static inline int tel_usage_parse(const char *text, size_t len, int L, int E, uint32_t engine, uint64_t *counts, char *err,
                                  size_t errlen) {
    memset(counts, 0, (size_t)L * E * sizeof *counts);
    const char *p = text, *end = text + len;
    int line = 0, have_shape = 0, have_ver = 0, done = 0;
    uint64_t recs = 0, sum = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) { memset(counts, 0, (size_t)L * E * sizeof *counts); return tel_fail_(err, errlen, "truncated (last line has no newline)"); }
        line++;
        if (done) goto corrupt;
        if (*p == '#') { p = nl + 1; continue; }
        int64_t a;
        uint64_t b, c;
        if (tel_line3_(p, nl, &a, &b, &c)) goto corrupt;
        if (a == -1) {
            if (have_shape || b != (uint64_t)L || c != (uint64_t)E) {
                memset(counts, 0, (size_t)L * E * sizeof *counts);
                return have_shape ? tel_fail_(err, errlen, "corrupt (line %d: shape given twice)", line)
                                  : tel_fail_(err, errlen, "history is for %" PRIu64 " layers x %" PRIu64 " experts, this model has %d x %d", b, c, L, E);
            }
            have_shape = 1;
        } else if (a == -2) {
            if (b != TEL_USAGE_VERSION || c != engine) {
                memset(counts, 0, (size_t)L * E * sizeof *counts);
                return tel_fail_(err, errlen, "format version %" PRIu64 " / engine %" PRIu64 " is not this engine's (version %d)", b, c, TEL_USAGE_VERSION);
            }
            have_ver = 1;
        } else if (a == -3) {
            if (b != recs || c != sum) goto corrupt;
            done = 1;
        } else if (a >= 0 && a < L && b < (uint64_t)E && c > 0 && c <= TEL_USAGE_MAX_COUNT && have_shape && have_ver) {
            uint64_t *slot = &counts[(size_t)a * E + b];
            if (*slot) goto corrupt;
            *slot = c;
            recs++;
            sum = tel_sum_add_(sum, c);
        } else goto corrupt;
        p = nl + 1;
    }
    if (!done) { memset(counts, 0, (size_t)L * E * sizeof *counts); return tel_fail_(err, errlen, "truncated (no end record)"); }
    return 0;
corrupt:
    memset(counts, 0, (size_t)L * E * sizeof *counts);
    return tel_fail_(err, errlen, "corrupt at line %d", line);
}

/* Formats counts[L][E] as a usage file; returns a malloc'd text and its
 * length in *len, or NULL. */
static inline char *tel_usage_format(int L, int E, uint32_t engine, const uint64_t *counts, size_t *len) {
    size_t cap = 128 + (size_t)L * E * 48, o = 0;
    char *buf = (char *)malloc(cap);
    if (!buf) return NULL;
    uint64_t recs = 0, sum = 0;
    o += (size_t)snprintf(buf + o, cap - o, "# colibri expert usage\n-1 %d %d\n-2 %d %" PRIu32 "\n", L, E, TEL_USAGE_VERSION, engine);
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++) {
            uint64_t c = counts[(size_t)l * E + e];
            if (!c) continue;
            if (c > TEL_USAGE_MAX_COUNT) c = TEL_USAGE_MAX_COUNT;
            o += (size_t)snprintf(buf + o, cap - o, "%d %d %" PRIu64 "\n", l, e, c);
            recs++;
            sum = tel_sum_add_(sum, c);
        }
    o += (size_t)snprintf(buf + o, cap - o, "-3 %" PRIu64 " %" PRIu64 "\n", recs, sum);
    *len = o;
    return buf;
}

/* Loads <path>: 1 if there is no file, 0 if loaded, -1 if refused (err). */
static inline int tel_usage_load(const char *path, int L, int E, uint32_t engine, uint64_t *counts, char *err, size_t errlen) {
    size_t len;
    char *text = compat_read_file(path, 64u << 20, &len);
    if (!text) {
        memset(counts, 0, (size_t)L * E * sizeof *counts);
        if (errno == ENOENT) return 1;
        return tel_fail_(err, errlen, "%s", compat_strerror(errno));
    }
    int rc = tel_usage_parse(text, len, L, E, engine, counts, err, errlen);
    free(text);
    return rc;
}

/* Writes counts to <path> atomically (temp file + rename). 0 or -1. */
static inline int tel_usage_save(const char *path, int L, int E, uint32_t engine, const uint64_t *counts, char *err, size_t errlen) {
    size_t len;
    char *text = tel_usage_format(L, E, engine, counts, &len);
    if (!text) return tel_fail_(err, errlen, "out of memory");
    int rc = compat_write_atomic(path, text, len);
    free(text);
    if (rc && errno == COMPAT_ENOTREG) { /* compat_replace's rule: left as it is */
        const char *what = compat_unreplaceable(path);
        return tel_fail_(err, errlen, "%s is %s, not a regular file; not replaced", path, what ? what : "not a regular file");
    }
    return rc ? tel_fail_(err, errlen, "%s", strerror(errno)) : 0;
}

/* Adds this run's counts to the history at <path> under an exclusive lock
 * (<path>.lock, flock), re-reading the file first, so concurrent runs each
 * add their counts and no run replaces the history with its own (and the
 * temporaries of a writer that died are removed). A file
 * that cannot be used (another model, corrupt, not a regular file) is kept
 * as <path>.unusable, never silently overwritten: *moved is set. Returns 0
 * or -1 with err. */
static inline int tel_usage_merge(const char *path, int L, int E, uint32_t engine, const uint64_t *add, int *moved, char *err, size_t errlen) {
    size_t pl = strlen(path);
    char *lock = (char *)malloc(pl + 16), *aside = (char *)malloc(pl + 16);
    uint64_t *cur = (uint64_t *)calloc((size_t)L * E + 1, sizeof(uint64_t));
    int rc = -1, fd = -1;
    *moved = 0;
    if (!lock || !aside || !cur) { tel_fail_(err, errlen, "out of memory"); goto out; }
    snprintf(lock, pl + 16, "%s.lock", path);
    snprintf(aside, pl + 16, "%s.unusable", path);
    fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        tel_fail_(err, errlen, "%s: %s", lock, fd < 0 ? strerror(errno) : compat_strerror(COMPAT_ENOTREG));
        goto out;
    }
    while (flock(fd, LOCK_EX))
        if (errno != EINTR) { tel_fail_(err, errlen, "%s: lock: %s", lock, strerror(errno)); goto out; }
    compat_sweep_temps(path, 0); /* under the lock no writer is at work */
    char why[300];
    int lr = tel_usage_load(path, L, E, engine, cur, why, sizeof why);
    if (lr < 0) { /* keep what was there; start a new history */
        if (compat_replace(path, aside)) { /* never over a non-regular <path>.unusable */
            tel_fail_(err, errlen, "%s is unusable (%s) and cannot be moved aside: %s", path, why,
                      errno == COMPAT_ENOTREG ? "the .unusable name is taken by something not a regular file" : strerror(errno));
            goto out;
        }
        *moved = 1;
        memset(cur, 0, (size_t)L * E * sizeof *cur);
    }
    for (size_t i = 0; i < (size_t)L * E; i++) {
        uint64_t room = TEL_USAGE_MAX_COUNT - (cur[i] < TEL_USAGE_MAX_COUNT ? cur[i] : TEL_USAGE_MAX_COUNT);
        cur[i] += add[i] < room ? add[i] : room;
    }
    rc = tel_usage_save(path, L, E, engine, cur, err, errlen);
out:
    if (fd >= 0) close(fd); /* releases the lock */
    free(lock);
    free(aside);
    free(cur);
    return rc;
}

#endif
