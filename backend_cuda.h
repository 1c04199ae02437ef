/* backend_cuda.h — the CUDA backend's C ABI (backend_cuda.cu): plain C
 * values only, no CUDA types, so the engine calls it without #ifdef. Built
 * with COLI_HAVE_CUDA (make CUDA=1; make test builds it where nvcc is);
 * otherwise every call below is a stub that fails with the reason and the
 * engine stays on the CPU.
 *
 * What runs on the GPU: kernels.h's integer (IDOT) path, y[S][O] = x·Wᵀ
 * for weights in int8, int4, int2 and grouped int4, from activations the
 * caller quantized with mm_act_quant (natural order). The GPU forms the
 * same exact int32 sums and the same float steps in the same order as
 * mm_irows_ref (mul and add rounded separately, never fused), so its y is
 * bit for bit the CPU's: placement never changes the tokens. Routed
 * experts also run whole (cu_experts_rows): SwiGLU through fmath.h and the
 * intermediate rows' quantization, both as the CPU does them; and so does
 * absorbed MLA attention over a latent cache in device memory (cu_mla),
 * step for step in the CPU's order.
 *
 * One process, one device; calls are synchronous (cu_mat_fill's copy
 * excepted) and not reentrant (the engine makes them from one thread).
 * Every call returns 0 or -1 with err set; after a failure the caller
 * takes the CPU path.
 *
 * Prefix: cu_. Must not: know about models, files or the environment. */
#ifndef COLI_BACKEND_CUDA_H
#define COLI_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The device cu_init chose. */
typedef struct {
    char name[128];
    int device, cc_major, cc_minor, sms;
    uint64_t mem_total, mem_free; /* bytes, at cu_init */
} cu_info;

typedef struct cu_mat cu_mat; /* a matrix in device memory */
typedef struct cu_kv cu_kv;   /* the attention's latent cache in device memory */

/* One attention layer's shape for cu_mla: H heads; per head a query of
 * nope + rd values (no-RoPE part, then RoPE part), a value of vh; the
 * latent of kvl values and the roped shared key of rd; kv_b is
 * [H·(nope + vh)][kvl] (per head nope rows W_UK, then vh rows W_UV);
 * selected keys rows of sel_stride ints. */
typedef struct {
    int H, nope, rd, vh, kvl, sel_stride;
    float scale; /* the score's factor */
} cu_mla_shape;

/* The formats cu_mat_upload takes: quant.h's qt_fmt values (model.h checks
 * that they agree). */
enum { CU_I8 = 1, CU_I4 = 2, CU_I2 = 3, CU_I4G = 4 };

/* At most this many matrices share one cu_mats_idot call, and one
 * cu_mats_idot_rows call; at most this many experts one cu_experts_rows
 * call. */
enum { CU_MAX_GROUP = 4, CU_MAX_BATCH = 64, CU_MAX_EXPERTS = 32 };

/* Byte and call counts since cu_init (cu_stats). */
typedef struct {
    uint64_t calls, mats;      /* round trips (cu_mat_idot, cu_mats_idot, cu_mats_idot_rows, cu_experts_rows calls); matrices multiplied */
    uint64_t rows;             /* activation rows sent */
    uint64_t bytes_in, bytes_out; /* host to device (activations), device to host (y) */
    uint64_t weight_bytes;     /* weights and scales resident now */
    uint64_t fills, fill_bytes; /* cu_mat_fill calls, and the bytes they copied */
    uint64_t attn_calls, kv_bytes; /* cu_mla and cu_index_scores calls (also in calls); bytes cu_kv_write(_keys) copied up */
    double seconds;            /* wall time inside cu_mat_idot */
    double kernel_seconds;     /* of it, in the matmul kernels (CUDA events) */
} cu_stats;

/* cu_mla's argument checks, shared by backend_cuda.cu and its host
 * stand-in (tests/cuda_host.c) so both refuse the same calls: the cache
 * (have_c: one was given; nl layers of ctx positions of kvl + rd), layer
 * l, the shape, kv_b's O x I (have_w: one was given), the rows and the
 * kept keys. 0 with *nkmax (the most keys a row attends to, at least 1)
 * and *any (some row keeps the indexer's choice), or -1 with err. */
static inline int cu_mla_check_(int have_c, int nl, int64_t ctx, int kvl, int rd, int l, int have_w, int64_t wO, int64_t wI, const cu_mla_shape *sh,
                                int S, int64_t pos, const int *nsel, const int *sel, int64_t *nkmax, int *any, char *err, size_t n) {
    if (!have_c || l < 0 || l >= nl || sh->kvl != kvl || sh->rd != rd || sh->H < 1 || sh->nope < 1 || sh->vh < 1 || !have_w ||
        wO != (int64_t)sh->H * (sh->nope + sh->vh) || wI != sh->kvl)
        return snprintf(err, n, "CUDA: attention: the latent cache, the shape and kv_b do not agree"), -1;
    if (S < 1 || pos < 0 || pos > ctx - S) return snprintf(err, n, "CUDA: attention: rows %lld+%d of a cache of %lld", (long long)pos, S, (long long)ctx), -1;
    *nkmax = 1, *any = 0;
    for (int s = 0; s < S; s++) {
        const int *ks = sel + (size_t)s * (size_t)sh->sel_stride;
        if (nsel[s] > sh->sel_stride) return snprintf(err, n, "CUDA: attention: row %d keeps %d keys, more than %d", s, nsel[s], sh->sel_stride), -1;
        for (int i = 0; i < nsel[s]; i++)
            if (ks[i] < 0 || ks[i] > pos + s) return snprintf(err, n, "CUDA: attention: row %d keeps key %d, not causal", s, ks[i]), -1;
        const int64_t nk = nsel[s] < 0 ? pos + s + 1 : nsel[s];
        *nkmax = nk > *nkmax ? nk : *nkmax, *any |= nsel[s] >= 0;
    }
    return 0;
}

#ifdef COLI_HAVE_CUDA

/* Opens device `device` (0 first). 0 and *info, or -1: no driver, no
 * device of that number, or a device older than compute capability 7.5. */
int cu_init(int device, cu_info *info, char *err, size_t n);
/* Releases the device (free its matrices with cu_mat_free first); cu_init
 * may follow. */
void cu_shutdown(void);
/* A copy in device memory of a packed matrix in quant.h's layout: fmt a
 * qt_fmt other than QT_F32, O rows of I inputs, group size gs (grouped
 * int4), row_bytes per row, scales [O] or [O][ceil(I/gs)]. NULL with err
 * (format, sizes, device memory). */
cu_mat *cu_mat_upload(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, const void *w, const float *s, char *err, size_t n);
/* Device memory for such a matrix, contents undefined until cu_mat_fill
 * (an expert slot: the store refills it with other experts of one shape).
 * NULL with err. */
cu_mat *cu_mat_alloc(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, char *err, size_t n);
/* Replaces m's weights and scales with w and s (m's shape). Returns once w
 * and s may be reused (they are copied into pinned staging memory); the
 * copy to the device may still be running (a copy stream of its own), and
 * every later call that reads m waits for it on the device, not on the
 * host. */
int cu_mat_fill(cu_mat *m, const void *w, const float *s, char *err, size_t n);
void cu_mat_free(cu_mat *m);
/* y[S][O] (row stride O) from activation rows q[S][ldq] (int8, natural
 * order, as mm_act_quant with vb 0) and their scales xs[S]. I ≤ 2^17. */
int cu_mat_idot(const cu_mat *m, const int8_t *q, int64_t ldq, const float *xs, int S, float *y, char *err, size_t n);
/* The same for nm matrices (1 ≤ nm ≤ CU_MAX_GROUP) of one input width I
 * and the same activation rows, in one round trip: the rows go up once,
 * y[i][S][m[i]->O] come back, each bit for bit cu_mat_idot's. One call
 * instead of nm saves a synchronisation and a copy each (20–30 µs a call
 * on an H200): gate with up, q_a with kv_a. */
int cu_mats_idot(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int S, float *const *y, char *err, size_t n);
/* Matrix i (1 ≤ nm ≤ CU_MAX_BATCH, one input width) multiplies only rows
 * [r0[i], r0[i] + nr[i]) of the R rows q[R][ldq] (scales xs[R]) into
 * y[i][nr[i]][m[i]->O], in one round trip: a layer's experts, each with
 * the rows of the tokens that chose it. Each y bit for bit cu_mat_idot's
 * on those rows. 0 ≤ r0[i], 0 ≤ nr[i], r0[i] + nr[i] ≤ R. */
int cu_mats_idot_rows(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int R, const int *r0, const int *nr,
                      float *const *y, char *err, size_t n);
/* A batch of routed experts in one round trip, SwiGLU on the device.
 * Expert i (1 ≤ ne ≤ CU_MAX_EXPERTS) takes rows [r0[i], r0[i] + nr[i]) of
 * q[R][ldq] (scales xs[R], as for cu_mats_idot_rows) and computes
 *   g = rows·gate[i]ᵀ, u = rows·up[i]ᵀ        (cu_mat_idot's bits)
 *   h = fm_silu(g)·u                           (fmath.h, one rounded ×)
 *   h quantized per row as mm_act_quant does   (natural order, vb 0)
 *   y[i][nr[i]][down[i]->O] = h·down[i]ᵀ
 * so each y is bit for bit what those steps give on the CPU (the engine's
 * fwd_mlp with the integer path). Every gate and up has one input width;
 * up[i] has gate[i]'s rows and down[i] takes that many inputs. */
int cu_experts_rows(const cu_mat *const *gate, const cu_mat *const *up, const cu_mat *const *down, int ne, const int8_t *q, int64_t ldq,
                    const float *xs, int R, const int *r0, const int *nr, float *const *y, char *err, size_t n);
/* The latent cache of nl layers of ctx positions, kvl latent and rd rope
 * floats a position, and the DSA indexer's key cache of nf layers, id
 * floats a position (nf 0: none), in device memory (contents undefined
 * until written). NULL with err. */
cu_kv *cu_kv_alloc(int nl, int64_t ctx, int kvl, int rd, int nf, int id, char *err, size_t n);
/* Positions [p0, p0 + np) of layer l from lat[np][kvl] and rope[np][rd]
 * (host memory, free on return). */
int cu_kv_write(cu_kv *c, int l, int64_t p0, int64_t np, const float *lat, const float *rope, char *err, size_t n);
/* Positions [p0, p0 + np) of indexer layer f from key[np][id], as
 * cu_kv_write. */
int cu_kv_write_keys(cu_kv *c, int f, int64_t p0, int64_t np, const float *key, char *err, size_t n);
void cu_kv_free(cu_kv *c);
/* The DSA indexer's scores of S query rows at positions pos..pos+S-1
 * against indexer layer f's cached keys, in one round trip, bit for bit
 * forward.h's fwd_index_scores: for row s and every key t ≤ pos + s,
 *   score[s][t] = Σ_h w[s][h]·max(dot(qi[s][h], key[t])·sscale, 0)
 * over heads h in increasing order (acc + w·relu, relu as d > 0 ? d : 0;
 * dot as kernels.h's mm_dot_f32). qi is [S][ih][id], w [S][ih]; score[s]
 * has room for pos + s + 1 floats. */
int cu_index_scores(const cu_kv *c, int f, const float *qi, const float *w, int S, int64_t pos, int ih, float sscale, float *const *score, char *err,
                    size_t n);
/* Absorbed MLA attention of layer l of c for S query rows at positions
 * pos..pos+S-1, in one round trip, bit for bit the CPU's (forward.h's
 * attn_head_latent, then W_UV on the integer path): for row s and head h,
 * over the kept keys t (every t ≤ pos + s when nsel[s] < 0, else
 * sel[s·sel_stride + i] for i < nsel[s]):
 *   qa    = Σ_o q_nope[o]·deq(kv_b[h·(nope+vh) + o]) in increasing o, each
 *           step y + x·deq (mm_matvec_t)
 *   score = (dot(qa, lat[t]) + dot(q_rope, rope[t])) · scale, dot as
 *           kernels.h's mm_dot_f32 (16 running sums, tail, pairwise)
 *   p     = softmax(score): max, e = fm_expf(score − max), their sum in
 *           increasing i, e·(1/sum)
 *   o     = Σ_i p_i·lat[t_i] in increasing i (mm_axpy_f32)
 *   attn[s][h][vh] = o quantized (mm_act_quant) times the vh W_UV rows
 * q is [S][H][nope + rd]; kv_b an integer matrix in device memory; the
 * cache must hold every position read. */
int cu_mla(const cu_kv *c, int l, const cu_mat *kv_b, const cu_mla_shape *sh, const float *q, int S, int64_t pos, const int *nsel, const int *sel,
           float *attn, char *err, size_t n);
void cu_stats_get(cu_stats *st);
/* Device memory free now, as the driver counts it (allocations rounded to
 * its pages); 0 when unknown. */
uint64_t cu_mem_free(void);
/* Device memory bandwidth: a device-to-device copy of `bytes`, best of
 * `reps`, as bytes read plus written per second. */
int cu_copy_bandwidth(uint64_t bytes, int reps, double *bytes_per_s, char *err, size_t n);

#else

static inline int cu_fail_(char *err, size_t n) {
    if (err && n) snprintf(err, n, "this colibri was built without CUDA (make CUDA=1 where nvcc is installed)");
    return -1;
}
static inline int cu_init(int device, cu_info *info, char *err, size_t n) { (void)device, (void)info; return cu_fail_(err, n); }
static inline void cu_shutdown(void) {}
static inline cu_mat *cu_mat_upload(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, const void *w, const float *s, char *err,
                                    size_t n) {
    (void)fmt, (void)O, (void)I, (void)gs, (void)row_bytes, (void)w, (void)s;
    cu_fail_(err, n);
    return NULL;
}
static inline cu_mat *cu_mat_alloc(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, char *err, size_t n) {
    (void)fmt, (void)O, (void)I, (void)gs, (void)row_bytes;
    cu_fail_(err, n);
    return NULL;
}
static inline int cu_mat_fill(cu_mat *m, const void *w, const float *s, char *err, size_t n) {
    (void)m, (void)w, (void)s;
    return cu_fail_(err, n);
}
static inline void cu_mat_free(cu_mat *m) { (void)m; }
static inline int cu_mat_idot(const cu_mat *m, const int8_t *q, int64_t ldq, const float *xs, int S, float *y, char *err, size_t n) {
    (void)m, (void)q, (void)ldq, (void)xs, (void)S, (void)y;
    return cu_fail_(err, n);
}
static inline int cu_mats_idot(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int S, float *const *y, char *err,
                               size_t n) {
    (void)m, (void)nm, (void)q, (void)ldq, (void)xs, (void)S, (void)y;
    return cu_fail_(err, n);
}
static inline int cu_mats_idot_rows(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int R, const int *r0,
                                    const int *nr, float *const *y, char *err, size_t n) {
    (void)m, (void)nm, (void)q, (void)ldq, (void)xs, (void)R, (void)r0, (void)nr, (void)y;
    return cu_fail_(err, n);
}
static inline int cu_experts_rows(const cu_mat *const *gate, const cu_mat *const *up, const cu_mat *const *down, int ne, const int8_t *q,
                                  int64_t ldq, const float *xs, int R, const int *r0, const int *nr, float *const *y, char *err, size_t n) {
    (void)gate, (void)up, (void)down, (void)ne, (void)q, (void)ldq, (void)xs, (void)R, (void)r0, (void)nr, (void)y;
    return cu_fail_(err, n);
}
static inline cu_kv *cu_kv_alloc(int nl, int64_t ctx, int kvl, int rd, int nf, int id, char *err, size_t n) {
    (void)nl, (void)ctx, (void)kvl, (void)rd, (void)nf, (void)id;
    cu_fail_(err, n);
    return NULL;
}
static inline int cu_kv_write(cu_kv *c, int l, int64_t p0, int64_t np, const float *lat, const float *rope, char *err, size_t n) {
    (void)c, (void)l, (void)p0, (void)np, (void)lat, (void)rope;
    return cu_fail_(err, n);
}
static inline int cu_kv_write_keys(cu_kv *c, int f, int64_t p0, int64_t np, const float *key, char *err, size_t n) {
    (void)c, (void)f, (void)p0, (void)np, (void)key;
    return cu_fail_(err, n);
}
static inline void cu_kv_free(cu_kv *c) { (void)c; }
static inline int cu_index_scores(const cu_kv *c, int f, const float *qi, const float *w, int S, int64_t pos, int ih, float sscale,
                                  float *const *score, char *err, size_t n) {
    (void)c, (void)f, (void)qi, (void)w, (void)S, (void)pos, (void)ih, (void)sscale, (void)score;
    return cu_fail_(err, n);
}
static inline int cu_mla(const cu_kv *c, int l, const cu_mat *kv_b, const cu_mla_shape *sh, const float *q, int S, int64_t pos, const int *nsel,
                         const int *sel, float *attn, char *err, size_t n) {
    (void)c, (void)l, (void)kv_b, (void)sh, (void)q, (void)S, (void)pos, (void)nsel, (void)sel, (void)attn;
    return cu_fail_(err, n);
}
static inline void cu_stats_get(cu_stats *st) {
    if (st) *st = (cu_stats){0};
}
static inline uint64_t cu_mem_free(void) { return 0; }
static inline int cu_copy_bandwidth(uint64_t bytes, int reps, double *bytes_per_s, char *err, size_t n) {
    (void)bytes, (void)reps, (void)bytes_per_s;
    return cu_fail_(err, n);
}

#endif

#ifdef __cplusplus
}
#endif

#endif
