/* ranks.h — routed experts spread over the processes of an MPI job
 * (docs/mpi.md). Rank 0 runs everything a single process runs: the dense
 * part, attention and its KV cache, sampling, conversations and serve
 * mode. The other ranks ("followers") hold only routed experts: for each
 * MoE layer of a forward, rank 0 sends each follower the routes of the
 * forward's rows and the normed rows that chose one of its experts; the
 * follower computes its experts' output rows and sends them back; rank 0
 * computes its own experts meanwhile, then sums every row's experts in
 * the same order as one process does, so tokens do not depend on the
 * number of ranks or the placement. Which rank owns which expert is
 * decided once by rank 0 (rk_place) from its usage history.
 * Prefix: rk_. Contract: only the calling thread talks to MPI (thread 0 of
 * the team, or the main thread between forwards); every wait is bounded
 * by the timeout and says which rank it waited for. Built without MPI
 * (no COLI_MPI), every rank count is 1 and rk_active() is 0.
 * Must not: call exit or getenv; the caller ends the job (rk_abort). */
#ifndef COLI_RANKS_H
#define COLI_RANKS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"

#ifdef COLI_MPI
#include <mpi.h>
#include <time.h>
#endif

#define RK_MAX 256 /* ranks; the owner table holds one byte an expert */

/* Follower commands (the first int of each message from rank 0). */
enum { RK_CMD_MOE = 1, RK_CMD_STOP = 2 };

/* What a follower did, sent to rank 0 when it stops. */
typedef struct {
    double compute_s;       /* in its experts' matmuls and reads */
    double idle_s;          /* waiting for rank 0 */
    uint64_t calls, routes; /* MoE layers served, routes computed */
    uint64_t experts;       /* experts it owns */
    uint64_t expert_bytes;  /* their bytes */
    uint64_t read_bytes;    /* expert bytes it read from disk */
} rk_follower_stats;

typedef struct {
    int rank, size;         /* 0 and 1 when not under MPI */
    int layers, E, K, D;    /* MoE layers (the store's), experts, top-k, hidden size */
    uint8_t *owner;         /* [layers][E]: the rank that computes each expert */
    double timeout_s;       /* longest wait for another rank (0: no limit) */
    /* rank 0's buffers, per follower: what it sends and what comes back */
    uint8_t **sbuf, **rbuf;
    size_t *scap, *rcap;
    int *nret;              /* routes each follower computes in the layer in flight */
    int inflight;           /* a layer's messages are out (rk_post .. rk_collect) */
    int broken;             /* a wait timed out or MPI failed: the job can only be aborted */
    void (*fatal)(const char *msg); /* called (when set) with the message once broken: the caller ends the job */
    /* a follower's receive and answer buffers */
    uint8_t *fbuf, *abuf;
    size_t fcap, acap;
    /* rank 0's counters */
    uint64_t bytes_out, bytes_in, calls, rows;
    double wait_s;          /* waiting for followers after its own experts */
    double plan_bytes_row;  /* bytes a forward row is expected to move (rk_plan_bytes) */
    rk_follower_stats *fs;  /* [size], filled by rk_stop */
#ifdef COLI_MPI
    MPI_Request *req;       /* [2 * size]: sends, then receives */
#endif
} coli_ranks;

static inline int rk_active(const coli_ranks *r) { return r && r->size > 1; }

/* The rank that owns expert e of MoE layer k (0 when not spread). */
static inline int rk_owner(const coli_ranks *r, int k, int e) { return rk_active(r) ? r->owner[(size_t)k * r->E + e] : 0; }

/* Whether this process computes expert e of MoE layer k. */
static inline int rk_mine(const coli_ranks *r, int k, int e) { return !rk_active(r) || r->owner[(size_t)k * r->E + e] == r->rank; }

static inline int rk_fail_(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Per layer, the placement: experts in decreasing use (ties by id) dealt
 * to the ranks in snake order (0..N-1, N-1..0, ...), so every rank holds
 * E/N experts (±1) and about a 1/N share of the routes the history saw;
 * without a history, experts in id order. counts: [layers][E] or NULL.
 * Fills owner[layers][E]. */
static inline void rk_place(int layers, int E, int N, const uint64_t *counts, uint8_t *owner) {
    int *ord = (int *)malloc((size_t)E * sizeof(int));
    for (int k = 0; k < layers; k++) {
        const uint64_t *c = counts ? counts + (size_t)k * E : NULL;
        for (int e = 0; e < E; e++) ord[e] = e;
        for (int i = 1; c && i < E; i++) { /* insertion sort: stable, E ≤ a few hundred */
            int v = ord[i], j = i;
            while (j > 0 && c[ord[j - 1]] < c[v]) ord[j] = ord[j - 1], j--;
            ord[j] = v;
        }
        for (int j = 0; j < E; j++) {
            int round = j / N, i = j % N;
            owner[(size_t)k * E + ord[j]] = (uint8_t)(round % 2 ? N - 1 - i : i);
        }
    }
    free(ord);
}

/* What one forward row is expected to move between the ranks, in bytes,
 * from the placement and per-expert route shares share[layers][E] (each
 * layer's sum 1; NULL = uniform): per layer, to each follower the
 * message (a header, the row's route ids and its normed row) when it owns
 * one of the row's K routes, and back its routes' output rows. */
static inline double rk_plan_bytes(const coli_ranks *r, const double *share) {
    double b = 0;
    for (int k = 0; k < r->layers; k++)
        for (int f = 1; f < r->size; f++) {
            double p = 0;
            for (int e = 0; e < r->E; e++)
                if (r->owner[(size_t)k * r->E + e] == f) p += share ? share[(size_t)k * r->E + e] : 1.0 / r->E;
            double none = 1;
            for (int i = 0; i < r->K; i++) none *= 1 - p;
            b += (1 - none) * (16.0 + 4.0 * r->K + 4.0 * r->D + 8.0) + p * r->K * 4.0 * r->D;
        }
    return b;
}

/* The rows of a forward's S rows that follower f needs (some route owned
 * by f), into need[] (row indices, increasing); returns their count and
 * the routes f computes in *nret. */
static inline int rk_rows_for(const coli_ranks *r, int k, int f, const int *route_e, int S, int *need, int *nret) {
    int n = 0, nr = 0;
    for (int s = 0; s < S; s++) {
        int any = 0;
        for (int j = 0; j < r->K; j++) {
            int mine = r->owner[(size_t)k * r->E + route_e[(size_t)s * r->K + j]] == f;
            any |= mine, nr += mine;
        }
        if (any) need[n++] = s;
    }
    *nret = nr;
    return n;
}

static inline int rk_grow_(uint8_t **p, size_t *cap, size_t want) {
    if (*cap >= want) return 0;
    uint8_t *q = (uint8_t *)realloc(*p, want);
    if (!q) return -1;
    *p = q, *cap = want;
    return 0;
}

#ifdef COLI_MPI

/* A failed MPI call's text. */
static inline int rk_mpi_fail_(char *err, size_t n, const char *what, int code) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", code);
    return rk_fail_(err, n, "MPI: %s: %s", what, s);
}

/* Joins the MPI job (errors returned, not fatal). 0 or -1 (err). */
static inline int rk_init(coli_ranks *r, int *argc, char ***argv, double timeout_s, char *err, size_t n) {
    int prov = 0, rc;
    memset(r, 0, sizeof *r);
    r->size = 1, r->timeout_s = timeout_s;
    if ((rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &prov)) != MPI_SUCCESS) return rk_mpi_fail_(err, n, "MPI_Init_thread", rc);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->size);
    if (prov < MPI_THREAD_FUNNELED) return rk_fail_(err, n, "MPI: the library gives no thread support (MPI_THREAD_FUNNELED is needed)");
    if (r->size > RK_MAX) return rk_fail_(err, n, "MPI: %d ranks; at most %d are supported", r->size, RK_MAX);
    return 0;
}

/* Every rank checks that all opened the same model the same way: the
 * fingerprint (kv_persist.h) and what the placement depends on. desc: a
 * few words naming this rank's model (its directory). 0 or -1 (err names
 * the first rank that differs). */
static inline int rk_hello(coli_ranks *r, uint64_t fingerprint, int layers, int E, int K, int D, int ubatch, const char *desc, char *err, size_t n) {
    uint64_t mine[6] = {fingerprint, (uint64_t)layers, (uint64_t)E, (uint64_t)K, (uint64_t)D, (uint64_t)ubatch};
    uint64_t *all = (uint64_t *)malloc((size_t)r->size * sizeof mine);
    if (!all) return rk_fail_(err, n, "out of memory");
    int rc = MPI_Allgather(mine, 6, MPI_UINT64_T, all, 6, MPI_UINT64_T, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return free(all), rk_mpi_fail_(err, n, "exchanging the model's fingerprint", rc);
    for (int i = 1; i < r->size; i++)
        if (memcmp(all, all + 6 * (size_t)i, sizeof mine)) {
            int f = all[6 * (size_t)i] != all[0];
            free(all);
            return rk_fail_(err, n, "MPI: rank %d opened %s than rank 0 (this rank, %d, opened %s): every rank must open the same model with the same "
                                    "MTP setting", i, f ? "another model" : "a different number of MoE layers or experts, or another UBATCH", r->rank, desc);
        }
    free(all);
    r->layers = layers, r->E = E, r->K = K, r->D = D;
    return 0;
}

/* Rank 0's placement from its counts ([layers][E] or NULL), sent to every
 * rank; each rank's owner table filled, and rank 0's buffers allocated.
 * 0 or -1 (err). */
static inline int rk_share_plan(coli_ranks *r, const uint64_t *counts, char *err, size_t n) {
    size_t ne = (size_t)r->layers * r->E;
    if (!(r->owner = (uint8_t *)malloc(ne + 1))) return rk_fail_(err, n, "out of memory");
    if (r->rank == 0) rk_place(r->layers, r->E, r->size, counts, r->owner);
    int rc = MPI_Bcast(r->owner, (int)ne, MPI_UINT8_T, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return rk_mpi_fail_(err, n, "sending the placement", rc);
    r->sbuf = (uint8_t **)calloc((size_t)r->size, sizeof *r->sbuf), r->rbuf = (uint8_t **)calloc((size_t)r->size, sizeof *r->rbuf);
    r->scap = (size_t *)calloc((size_t)r->size, sizeof(size_t)), r->rcap = (size_t *)calloc((size_t)r->size, sizeof(size_t));
    r->nret = (int *)calloc((size_t)r->size, sizeof(int));
    r->req = (MPI_Request *)malloc(2 * (size_t)r->size * sizeof(MPI_Request));
    r->fs = (rk_follower_stats *)calloc((size_t)r->size, sizeof *r->fs);
    if (!r->sbuf || !r->rbuf || !r->scap || !r->rcap || !r->nret || !r->req || !r->fs) return rk_fail_(err, n, "out of memory");
    for (int i = 0; i < 2 * r->size; i++) r->req[i] = MPI_REQUEST_NULL;
    return 0;
}

/* Rank 0's n values v[] to every rank. 0 or -1 (err). */
static inline int rk_bcast_u64(uint64_t *v, size_t cnt, char *err, size_t n) {
    for (size_t i = 0; i < cnt;) { /* counts are ints */
        int part = cnt - i > (1u << 26) ? 1 << 26 : (int)(cnt - i), rc = MPI_Bcast(v + i, part, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return rk_mpi_fail_(err, n, "sending rank 0's usage history", rc);
        i += (size_t)part;
    }
    return 0;
}

/* Gathers cnt doubles v[] of every rank at rank 0 (out[size][cnt]
 * there). 0 or -1. */
static inline int rk_gather(const double *v, int cnt, double *out, char *err, size_t n) {
    int rc = MPI_Gather(v, cnt, MPI_DOUBLE, out, cnt, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : rk_mpi_fail_(err, n, "gathering the ranks' plans", rc);
}

static inline void rk_nap_(int us) {
    struct timespec t = {0, (long)us * 1000};
    nanosleep(&t, NULL);
}

/* Waits for requests req[0..cnt) (MPI_REQUEST_NULL ones are done) within
 * the timeout, polling with growing sleeps so that a waiting rank leaves
 * its CPU to the ones computing. On timeout, *late is the index of the
 * first request still pending. 0, 1 (timeout) or -1 (MPI error, err). */
static inline int rk_wait_(coli_ranks *r, MPI_Request *req, int cnt, int *late, char *err, size_t n) {
    double t0 = compat_now();
    for (int spin = 0;; spin++) {
        int pending = -1;
        for (int i = 0; i < cnt; i++) {
            if (req[i] == MPI_REQUEST_NULL) continue;
            int done = 0, rc = MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return *late = i, rk_mpi_fail_(err, n, "waiting for a message", rc);
            if (!done && pending < 0) pending = i;
        }
        if (pending < 0) return 0;
        if (r->timeout_s > 0 && compat_now() - t0 > r->timeout_s) return *late = pending, 1;
        if (spin > 200) rk_nap_(spin > 2000 ? 100 : 20); /* spinning first (a decode layer's answer), then naps of at most 0.1 ms: the delay a wait adds */
    }
}

/* Rank 0, after a MoE layer's routing: for each follower that owns one of
 * the routes of rows [0, S), the message (command, layer, S, row count;
 * the route ids; the normed rows it needs, from a[S][D]) and a receive
 * for its output rows. need: scratch of S ints. 0 or -1 (err). */
static inline int rk_post(coli_ranks *r, int k, int S, const int *route_e, const float *a, int *need, char *err, size_t n) {
    size_t D = (size_t)r->D, K = (size_t)r->K;
    for (int f = 1; f < r->size; f++) {
        int nr, rows = rk_rows_for(r, k, f, route_e, S, need, &nr);
        r->nret[f] = nr;
        if (!rows) continue;
        size_t sb = 16 + (size_t)S * K * 4 + (size_t)rows * D * 4, rb = 8 + ((size_t)nr * D * 4 > 1024 ? (size_t)nr * D * 4 : 1024);
        if (rk_grow_(&r->sbuf[f], &r->scap[f], sb) || rk_grow_(&r->rbuf[f], &r->rcap[f], rb)) return rk_fail_(err, n, "out of memory");
        int32_t h[4] = {RK_CMD_MOE, k, S, rows};
        uint8_t *p = r->sbuf[f];
        memcpy(p, h, 16), memcpy(p + 16, route_e, (size_t)S * K * 4);
        float *rowp = (float *)(p + 16 + (size_t)S * K * 4);
        for (int i = 0; i < rows; i++) memcpy(rowp + (size_t)i * D, a + (size_t)need[i] * D, D * 4);
        int rc = MPI_Irecv(r->rbuf[f], (int)rb, MPI_BYTE, f, 2, MPI_COMM_WORLD, &r->req[r->size + f]);
        if (rc == MPI_SUCCESS) rc = MPI_Isend(p, (int)sb, MPI_BYTE, f, 1, MPI_COMM_WORLD, &r->req[f]);
        if (rc != MPI_SUCCESS) {
            char what[64];
            r->broken = 1;
            snprintf(what, sizeof what, "sending MoE layer %d to rank %d", k, f);
            rk_mpi_fail_(err, n, what, rc);
            if (r->fatal) r->fatal(err);
            return -1;
        }
        r->bytes_out += sb;
    }
    r->inflight = 1;
    r->calls++, r->rows += (uint64_t)S;
    return 0;
}

/* Rank 0, after its own experts: waits for every follower's output rows
 * and puts each route's row at yk[i] (route index i = s·K + j), in the
 * order both sides enumerate the follower's routes. 0 or -1 (err: the
 * rank that failed, or that did not answer within the timeout). */
static inline int rk_collect(coli_ranks *r, int k, int S, const int *route_e, float *yk, char *err, size_t n) {
    size_t D = (size_t)r->D;
    int late = -1, w;
    double t0 = compat_now();
    r->inflight = 0;
    w = rk_wait_(r, r->req, 2 * r->size, &late, err, n);
    r->wait_s += compat_now() - t0;
    r->broken |= w != 0;
    if (w == 1)
        rk_fail_(err, n, "MPI: rank %d did not %s MoE layer %d within %.0f s (MPI_TIMEOUT); is it running?", late % r->size,
                 late < r->size ? "take" : "answer", k, r->timeout_s);
    if (w && r->fatal) r->fatal(err);
    if (w) return -1;
    for (int f = 1; f < r->size; f++) {
        int nr = r->nret[f]; /* a follower with no route got no message */
        if (!nr) continue;
        int32_t h[2];
        memcpy(h, r->rbuf[f], 8);
        if (h[0]) {
            r->rbuf[f][r->rcap[f] - 1] = 0;
            return rk_fail_(err, n, "rank %d: %s", f, (const char *)r->rbuf[f] + 8);
        }
        if (h[1] != nr) return rk_fail_(err, n, "MPI: rank %d answered MoE layer %d with %d rows, not %d", f, k, h[1], nr);
        const float *src = (const float *)(r->rbuf[f] + 8);
        for (int i = 0, j = 0; i < S * r->K; i++)
            if (r->owner[(size_t)k * r->E + route_e[i]] == f) memcpy(yk + (size_t)i * D, src + (size_t)j++ * D, D * 4);
        r->bytes_in += 8 + (size_t)nr * D * 4;
    }
    return 0;
}

/* A follower: waits (as long as it takes: rank 0 may be idle between
 * requests) for rank 0's next message. Returns the command, with the
 * layer, S and the routes/rows pointers into the receive buffer set for
 * RK_CMD_MOE; -1 (err) on an MPI error. */
static inline int rk_next(coli_ranks *r, int *k, int *S, int *rows, const int **route_e, const float **a, double *idle, char *err, size_t n) {
    MPI_Status st;
    int flag = 0, len = 0, rc;
    double t0 = compat_now();
    for (int spin = 0; !flag; spin++) {
        if ((rc = MPI_Iprobe(0, 1, MPI_COMM_WORLD, &flag, &st)) != MPI_SUCCESS) return rk_mpi_fail_(err, n, "waiting for rank 0", rc);
        if (!flag && spin > 200) rk_nap_(spin > 2000 ? 100 : 20);
    }
    *idle += compat_now() - t0;
    MPI_Get_count(&st, MPI_BYTE, &len);
    if (len < 16 || rk_grow_(&r->fbuf, &r->fcap, (size_t)len)) return rk_fail_(err, n, "MPI: a message of %d bytes from rank 0 (out of memory?)", len);
    if ((rc = MPI_Recv(r->fbuf, len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return rk_mpi_fail_(err, n, "receiving from rank 0", rc);
    int32_t h[4];
    memcpy(h, r->fbuf, 16);
    if (h[0] != RK_CMD_MOE) return h[0];
    *k = h[1], *S = h[2], *rows = h[3];
    if (*k < 0 || *k >= r->layers || *S < 1 || *rows < 1 || *rows > *S || (size_t)len != 16 + (size_t)*S * r->K * 4 + (size_t)*rows * r->D * 4)
        return rk_fail_(err, n, "MPI: a malformed message from rank 0 (%d bytes)", len);
    *route_e = (const int *)(r->fbuf + 16);
    *a = (const float *)(r->fbuf + 16 + (size_t)*S * r->K * 4);
    return RK_CMD_MOE;
}

/* A follower's answer to a MoE message: its nret output rows (out, in
 * route order), or (status ≠ 0) the error text msg. 0 or -1 (err). */
static inline int rk_answer(coli_ranks *r, int status, const char *msg, const float *out, int nret, char *err, size_t n) {
    size_t bytes = status ? 8 + strlen(msg) + 1 : 8 + (size_t)nret * r->D * 4;
    if (rk_grow_(&r->abuf, &r->acap, bytes)) return rk_fail_(err, n, "out of memory");
    uint8_t *b = r->abuf; /* kept: an answer goes out for every layer */
    int32_t h[2] = {status, status ? 0 : nret};
    memcpy(b, h, 8);
    if (status) memcpy(b + 8, msg, strlen(msg) + 1);
    else if (nret) memcpy(b + 8, out, (size_t)nret * r->D * 4);
    MPI_Request q;
    int rc = MPI_Isend(b, (int)bytes, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &q), late;
    if (rc != MPI_SUCCESS) return rk_mpi_fail_(err, n, "answering rank 0", rc);
    int w = rk_wait_(r, &q, 1, &late, err, n);
    if (w == 1) return rk_fail_(err, n, "MPI: rank 0 did not take an answer within %.0f s (MPI_TIMEOUT)", r->timeout_s);
    return w;
}

/* Rank 0 at the end: tells every follower to stop and gathers what each
 * did (r->fs[f]); a follower sends its figures (mine) back. 0 or -1. */
static inline int rk_stop(coli_ranks *r, const rk_follower_stats *mine, char *err, size_t n) {
    if (r->rank == 0) {
        int32_t h[4] = {RK_CMD_STOP, 0, 0, 0};
        for (int f = 1; f < r->size; f++) {
            int rc = MPI_Send(h, 16, MPI_BYTE, f, 1, MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS) return rk_mpi_fail_(err, n, "stopping the other ranks", rc);
        }
    }
    rk_follower_stats z = {0};
    int rc = MPI_Gather(r->rank ? mine : &z, (int)sizeof z, MPI_BYTE, r->fs, (int)sizeof z, MPI_BYTE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : rk_mpi_fail_(err, n, "gathering the ranks' figures", rc);
}

/* Ends the whole job with status code (a rank failed): every rank exits. */
static inline void rk_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static inline void rk_finalize(coli_ranks *r) {
    free(r->owner), free(r->fbuf), free(r->abuf), free(r->nret), free(r->req), free(r->fs), free(r->scap), free(r->rcap);
    for (int f = 0; r->sbuf && f < r->size; f++) free(r->sbuf[f]);
    for (int f = 0; r->rbuf && f < r->size; f++) free(r->rbuf[f]);
    free(r->sbuf), free(r->rbuf);
    MPI_Finalize();
}

#else /* without MPI: one rank */

static inline int rk_init(coli_ranks *r, int *argc, char ***argv, double timeout_s, char *err, size_t n) {
    (void)argc, (void)argv, (void)err, (void)n;
    memset(r, 0, sizeof *r);
    r->size = 1, r->timeout_s = timeout_s;
    return 0;
}
static inline int rk_post(coli_ranks *r, int k, int S, const int *route_e, const float *a, int *need, char *err, size_t n) {
    (void)r, (void)k, (void)S, (void)route_e, (void)a, (void)need, (void)err, (void)n;
    return 0;
}
static inline int rk_collect(coli_ranks *r, int k, int S, const int *route_e, float *yk, char *err, size_t n) {
    (void)r, (void)k, (void)S, (void)route_e, (void)yk, (void)err, (void)n;
    return 0;
}
static inline void rk_finalize(coli_ranks *r) { (void)r; }

#endif /* COLI_MPI */

#endif
