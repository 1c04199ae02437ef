/* cuda_host.c — backend_cuda.h's ABI in host memory, for machines without
 * a GPU: a stand-in for backend_cuda.cu whose "device" is malloc'd memory
 * and whose matmul is kernels.h's reference integer path (mm_idot_ref).
 * make test links it into build/cuda-host, so the engine's side of the
 * backend runs in every CI run: the dense and expert uploads and their
 * budget, the GPU tier in the forward pass, a failing call's fallback
 * (COLI_CUDA_FAULT), the counters of the end line, and test_cuda's
 * harness. It checks what backend_cuda.cu checks and fails as it does; it
 * says nothing about the GPU's kernels, which test_cuda checks against
 * the same reference on a real device (build/cuda).
 *
 * The device: number 0 only, compute capability 7.5, HOST_MEM bytes of
 * which matrices take their size. With XGPU_KEYS_OOM set in the
 * environment, a latent cache with indexer keys does not fit (the
 * engine's retry without them is tested through it). */
#include "backend_cuda.h"
#include "fmath.h"
#include "kernels.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOST_MEM ((uint64_t)4 << 30)

struct cu_mat {
    qt_tensor W; /* over w and s */
    void *w;     /* copies of the weights and scales */
    float *s;
    uint64_t bytes;
};

struct cu_kv {
    int nl, kvl, rd, nf, id;
    int64_t ctx;
    float *lat, *rope, *ikey; /* [nl][ctx][kvl], [nl][ctx][rd], [nf][ctx][id] */
    uint64_t bytes;
};

static struct {
    int on;
    uint64_t kv_mem; /* bytes of latent caches held */
    cu_stats stats;
} H;

static double host_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cu_init(int device, cu_info *info, char *err, size_t n) {
    if (H.on) cu_shutdown();
    if (device != 0) return snprintf(err, n, "device %d asked for, but 1 found (0..0)", device), -1;
    memset(&H, 0, sizeof H);
    H.on = 1;
    if (info) {
        memset(info, 0, sizeof *info);
        snprintf(info->name, sizeof info->name, "host stand-in for a GPU (tests/cuda_host.c)");
        info->cc_major = 7, info->cc_minor = 5, info->sms = 1;
        info->mem_total = info->mem_free = HOST_MEM;
    }
    return 0;
}

void cu_shutdown(void) {
    memset(&H, 0, sizeof H);
}

cu_mat *cu_mat_alloc(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), (cu_mat *)NULL;
    const int64_t epb = fmt == CU_I8 ? 1 : fmt == CU_I2 ? 4 : 2;
    if (fmt < CU_I8 || fmt > CU_I4G || O < 1 || I < 1 || I > (INT64_C(1) << 17) || row_bytes != (I + epb - 1) / epb ||
        (fmt == CU_I4G && (gs < 16 || gs > 256 || gs % 16)))
        return snprintf(err, n, "CUDA: cannot hold a matrix of format %d, %lld x %lld, group size %d", fmt, (long long)O, (long long)I, gs),
               (cu_mat *)NULL;
    const int64_t ng = fmt == CU_I4G ? (I + gs - 1) / gs : 1;
    const size_t wb = (size_t)(O * row_bytes), sb = (size_t)(O * ng) * sizeof(float);
    if (H.stats.weight_bytes + H.kv_mem + wb + sb > HOST_MEM) return snprintf(err, n, "CUDA: allocating a matrix: out of memory"), (cu_mat *)NULL;
    cu_mat *m = (cu_mat *)calloc(1, sizeof *m);
    void *dw = malloc(wb);
    float *ds = (float *)malloc(sb);
    if (!m || !dw || !ds) {
        free(m), free(dw), free(ds);
        return snprintf(err, n, "out of memory"), (cu_mat *)NULL;
    }
    memset(dw, 0x5a, wb), memset(ds, 0x7f, sb); /* undefined until filled: NaN scales, so a read before a fill shows */
    m->w = dw, m->s = ds;
    m->W = (qt_tensor){(qt_fmt)fmt, O, I, dw, ds, fmt == CU_I4G ? gs : 0};
    m->bytes = wb + sb;
    H.stats.weight_bytes += m->bytes;
    return m;
}

/* Synchronous here: the contract (w and s reusable on return, later calls
 * see the new contents) holds trivially. */
int cu_mat_fill(cu_mat *m, const void *w, const float *s, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!m || !w || !s) return snprintf(err, n, "CUDA: filling a matrix: no matrix or no source"), -1;
    const int64_t ng = m->W.fmt == QT_I4G ? (m->W.I + m->W.gs - 1) / m->W.gs : 1;
    const size_t sb = (size_t)(m->W.O * ng) * sizeof(float);
    memcpy(m->w, w, m->bytes - sb), memcpy(m->s, s, sb);
    H.stats.fills++, H.stats.fill_bytes += m->bytes;
    return 0;
}

cu_mat *cu_mat_upload(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, const void *w, const float *s, char *err, size_t n) {
    if (H.on && (!w || !s)) return snprintf(err, n, "CUDA: uploading a matrix: no source"), (cu_mat *)NULL;
    cu_mat *m = cu_mat_alloc(fmt, O, I, gs, row_bytes, err, n);
    if (!m) return NULL;
    const int64_t ng = fmt == CU_I4G ? (I + gs - 1) / gs : 1;
    memcpy(m->w, w, (size_t)(O * row_bytes)), memcpy(m->s, s, (size_t)(O * ng) * sizeof(float));
    return m;
}

void cu_mat_free(cu_mat *m) {
    if (!m) return;
    if (H.on) H.stats.weight_bytes -= m->bytes;
    free(m->w), free(m->s), free(m);
}

int cu_mats_idot_rows(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int R, const int *r0, const int *nr,
                      float *const *y, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (nm < 1 || nm > CU_MAX_BATCH) return snprintf(err, n, "CUDA: %d matrices in one call (1..%d)", nm, (int)CU_MAX_BATCH), -1;
    uint64_t outs = 0;
    for (int i = 0; i < nm; i++) {
        if (m[i]->W.I != m[0]->W.I)
            return snprintf(err, n, "CUDA: matrices of %lld and %lld inputs in one call", (long long)m[0]->W.I, (long long)m[i]->W.I), -1;
        if (r0[i] < 0 || nr[i] < 0 || r0[i] > R - nr[i]) return snprintf(err, n, "CUDA: rows %d+%d of %d", r0[i], nr[i], R), -1;
        outs += (uint64_t)nr[i] * (uint64_t)m[i]->W.O;
    }
    if (R < 1 || !outs) return 0;
    double t0 = host_now();
    for (int i = 0; i < nm; i++)
        if (nr[i] && mm_idot_ref(&m[i]->W, q + (size_t)r0[i] * (size_t)ldq, ldq, xs + r0[i], nr[i], y[i]))
            return snprintf(err, n, "CUDA: running the matmul: out of memory"), -1;
    H.stats.calls++, H.stats.mats += (uint64_t)nm, H.stats.rows += (uint64_t)R;
    H.stats.bytes_in += (uint64_t)(R * m[0]->W.I) + (uint64_t)R * 4, H.stats.bytes_out += outs * 4;
    double dt = host_now() - t0;
    H.stats.seconds += dt, H.stats.kernel_seconds += dt;
    return 0;
}

int cu_mats_idot(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int S, float *const *y, char *err, size_t n) {
    if (nm < 1 || nm > CU_MAX_GROUP) return snprintf(err, n, "CUDA: %d matrices in one call (1..%d)", nm, (int)CU_MAX_GROUP), -1;
    int r0[CU_MAX_GROUP] = {0}, nr[CU_MAX_GROUP];
    for (int i = 0; i < nm; i++) nr[i] = S > 0 ? S : 0;
    return cu_mats_idot_rows(m, nm, q, ldq, xs, S, r0, nr, y, err, n);
}

int cu_mat_idot(const cu_mat *m, const int8_t *q, int64_t ldq, const float *xs, int S, float *y, char *err, size_t n) {
    return cu_mats_idot(&m, 1, q, ldq, xs, S, &y, err, n);
}

/* The same checks as backend_cuda.cu's; then each expert as the CPU's
 * fwd_mlp computes it on the integer path. */
int cu_experts_rows(const cu_mat *const *gate, const cu_mat *const *up, const cu_mat *const *down, int ne, const int8_t *q, int64_t ldq,
                    const float *xs, int R, const int *r0, const int *nr, float *const *y, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (ne < 1 || ne > CU_MAX_EXPERTS) return snprintf(err, n, "CUDA: %d experts in one call (1..%d)", ne, (int)CU_MAX_EXPERTS), -1;
    uint64_t outs = 0, hmax = 0;
    for (int i = 0; i < ne; i++) {
        const qt_tensor *g = &gate[i]->W, *u = &up[i]->W, *d = &down[i]->W;
        if (g->I != gate[0]->W.I || u->I != g->I)
            return snprintf(err, n, "CUDA: matrices of %lld and %lld inputs in one call", (long long)gate[0]->W.I, (long long)(g->I != gate[0]->W.I ? g->I : u->I)), -1;
        if (u->O != g->O || d->I != g->O)
            return snprintf(err, n, "CUDA: expert %d: gate of %lld rows, up of %lld and down of %lld inputs do not chain", i, (long long)g->O, (long long)u->O,
                            (long long)d->I), -1;
        if (r0[i] < 0 || nr[i] < 0 || r0[i] > R - nr[i]) return snprintf(err, n, "CUDA: rows %d+%d of %d", r0[i], nr[i], R), -1;
        outs += (uint64_t)nr[i] * (uint64_t)d->O;
        hmax = (uint64_t)nr[i] * (uint64_t)g->O > hmax ? (uint64_t)nr[i] * (uint64_t)g->O : hmax;
    }
    if (R < 1 || !outs) return 0;
    double t0 = host_now();
    float *hg = (float *)malloc(hmax * 4), *hu = (float *)malloc(hmax * 4), *hx = (float *)malloc((size_t)R * 4);
    int8_t *hq = (int8_t *)malloc(hmax);
    int32_t *xg = (int32_t *)malloc(((size_t)(1 << 17) / 16 + 16) * 4); /* groups of ≥ 16 of at most 2^17 inputs */
    int rc = hg && hu && hx && hq && xg ? 0 : -1;
    for (int i = 0; i < ne && !rc; i++) {
        const qt_tensor *d = &down[i]->W;
        int64_t I = d->I;
        if (!nr[i]) continue;
        rc = mm_idot_ref(&gate[i]->W, q + (size_t)r0[i] * (size_t)ldq, ldq, xs + r0[i], nr[i], hg) ||
             mm_idot_ref(&up[i]->W, q + (size_t)r0[i] * (size_t)ldq, ldq, xs + r0[i], nr[i], hu) ? -1 : 0;
        for (int64_t k = 0; !rc && k < nr[i] * I; k++) hg[k] = fm_silu(hg[k]) * hu[k];
        for (int r = 0; !rc && r < nr[i]; r++) mm_act_quant(hg + (size_t)r * (size_t)I, I, d->fmt, d->gs, 0, hq + (size_t)r * (size_t)I, hx + r, xg);
        if (!rc) rc = mm_idot_ref(d, hq, I, hx, nr[i], y[i]);
    }
    free(hg), free(hu), free(hx), free(hq), free(xg);
    if (rc) return snprintf(err, n, "CUDA: running the experts: out of memory"), -1;
    H.stats.calls++, H.stats.mats += 3 * (uint64_t)ne, H.stats.rows += (uint64_t)R;
    H.stats.bytes_in += (uint64_t)(R * gate[0]->W.I) + (uint64_t)R * 4, H.stats.bytes_out += outs * 4;
    double dt = host_now() - t0;
    H.stats.seconds += dt, H.stats.kernel_seconds += dt;
    return 0;
}

cu_kv *cu_kv_alloc(int nl, int64_t ctx, int kvl, int rd, int nf, int id, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), (cu_kv *)NULL;
    if (nl < 1 || ctx < 1 || kvl < 1 || rd < 0 || ctx > (INT64_C(1) << 24) || kvl > 4096 || rd > 4096 || nf < 0 || nf > nl || id < 0 || id > 4096 || (nf && !id))
        return snprintf(err, n, "CUDA: cannot hold a latent cache of %d layers x %lld positions x (%d + %d), %d x %d indexer keys", nl, (long long)ctx, kvl,
                        rd, nf, id), (cu_kv *)NULL;
    uint64_t bytes = (uint64_t)ctx * ((uint64_t)nl * (uint64_t)(kvl + rd) + (uint64_t)nf * (uint64_t)id) * 4;
    if (H.stats.weight_bytes + H.kv_mem + bytes > HOST_MEM || (nf && getenv("XGPU_KEYS_OOM"))) return snprintf(err, n, "CUDA: allocating the latent cache: out of memory"), (cu_kv *)NULL;
    cu_kv *c = (cu_kv *)calloc(1, sizeof *c);
    float *b = (float *)malloc((size_t)bytes);
    if (!c || !b) return free(c), free(b), snprintf(err, n, "out of memory"), (cu_kv *)NULL;
    memset(b, 0x7f, (size_t)bytes); /* undefined until written: NaN, so a read of an unwritten position shows */
    c->nl = nl, c->ctx = ctx, c->kvl = kvl, c->rd = rd, c->nf = nf, c->id = id, c->bytes = bytes;
    c->lat = b, c->rope = b + (size_t)nl * (size_t)ctx * (size_t)kvl, c->ikey = c->rope + (size_t)nl * (size_t)ctx * (size_t)rd;
    H.kv_mem += bytes;
    return c;
}

int cu_kv_write(cu_kv *c, int l, int64_t p0, int64_t np, const float *lat, const float *rope, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!c || l < 0 || l >= c->nl || p0 < 0 || np < 0 || p0 > c->ctx - np)
        return snprintf(err, n, "CUDA: writing positions %lld+%lld of layer %d to a latent cache of %lld", (long long)p0, (long long)np, l,
                        (long long)(c ? c->ctx : 0)), -1;
    memcpy(c->lat + ((size_t)l * (size_t)c->ctx + (size_t)p0) * (size_t)c->kvl, lat, (size_t)np * (size_t)c->kvl * 4);
    memcpy(c->rope + ((size_t)l * (size_t)c->ctx + (size_t)p0) * (size_t)c->rd, rope, (size_t)np * (size_t)c->rd * 4);
    H.stats.kv_bytes += (uint64_t)np * (uint64_t)(c->kvl + c->rd) * 4;
    return 0;
}

int cu_kv_write_keys(cu_kv *c, int f, int64_t p0, int64_t np, const float *key, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!c || f < 0 || f >= c->nf || p0 < 0 || np < 0 || p0 > c->ctx - np)
        return snprintf(err, n, "CUDA: writing positions %lld+%lld of indexer layer %d to a key cache of %lld", (long long)p0, (long long)np, f,
                        (long long)(c ? c->ctx : 0)), -1;
    memcpy(c->ikey + ((size_t)f * (size_t)c->ctx + (size_t)p0) * (size_t)c->id, key, (size_t)np * (size_t)c->id * 4);
    H.stats.kv_bytes += (uint64_t)np * (uint64_t)c->id * 4;
    return 0;
}

/* The checks backend_cuda.cu makes, then fwd_index_scores' loop. */
int cu_index_scores(const cu_kv *c, int f, const float *qi, const float *w, int S, int64_t pos, int ih, float sscale, float *const *score, char *err,
                    size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!c || f < 0 || f >= c->nf || ih < 1) return snprintf(err, n, "CUDA: indexer: no key cache for layer %d, or %d heads", f, ih), -1;
    if (S < 1 || pos < 0 || pos > c->ctx - S) return snprintf(err, n, "CUDA: indexer: rows %lld+%d of a cache of %lld", (long long)pos, S, (long long)c->ctx), -1;
    double t0 = host_now();
    const int id = c->id;
    const float *keys = c->ikey + (size_t)f * (size_t)c->ctx * (size_t)id;
    for (int s = 0; s < S; s++) {
        const float *qs = qi + (size_t)s * (size_t)ih * (size_t)id, *ws = w + (size_t)s * (size_t)ih;
        for (int64_t t = 0; t <= pos + s; t++) {
            float acc = 0;
            for (int h = 0; h < ih; h++) {
                float d = mm_dot_f32(qs + (size_t)h * (size_t)id, keys + (size_t)t * (size_t)id, id) * sscale;
                acc += ws[h] * (d > 0 ? d : 0);
            }
            score[s][t] = acc;
        }
    }
    H.stats.calls++, H.stats.attn_calls++, H.stats.rows += (uint64_t)S;
    H.stats.bytes_in += (uint64_t)S * (uint64_t)ih * (uint64_t)(id + 1) * 4;
    for (int s = 0; s < S; s++) H.stats.bytes_out += (uint64_t)(pos + s + 1) * 4;
    double dt = host_now() - t0;
    H.stats.seconds += dt, H.stats.kernel_seconds += dt;
    return 0;
}

void cu_kv_free(cu_kv *c) {
    if (!c) return;
    if (H.on) H.kv_mem -= c->bytes;
    free(c->lat), free(c);
}

/* The checks backend_cuda.cu makes, then each (row, head) as forward.h's
 * attn_head_latent and its W_UV product compute it on the CPU. */
int cu_mla(const cu_kv *c, int l, const cu_mat *kv_b, const cu_mla_shape *sh, const float *q, int S, int64_t pos, const int *nsel, const int *sel,
           float *attn, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    const int kvw = sh->nope + sh->vh, qk = sh->nope + sh->rd;
    int64_t nkmax;
    int any;
    if (cu_mla_check_(c != NULL, c ? c->nl : 0, c ? c->ctx : 0, c ? c->kvl : 0, c ? c->rd : 0, l, kv_b != NULL, kv_b ? kv_b->W.O : 0, kv_b ? kv_b->W.I : 0,
                      sh, S, pos, nsel, sel, &nkmax, &any, err, n))
        return -1;
    double t0 = host_now();
    const int kvl = sh->kvl, rd = sh->rd;
    const float *lat = c->lat + (size_t)l * (size_t)c->ctx * (size_t)kvl, *kr = c->rope + (size_t)l * (size_t)c->ctx * (size_t)rd;
    float *qa = (float *)malloc((size_t)kvl * 4), *o = (float *)malloc((size_t)kvl * 4), *d = (float *)malloc((size_t)kvl * 4),
          *score = (float *)malloc((size_t)(pos + S) * 4), xs;
    int8_t *hq = (int8_t *)malloc((size_t)kvl);
    int32_t *xg = (int32_t *)malloc((size_t)(kvl + 16) * 4);
    int rc = qa && o && d && score && hq && xg ? 0 : -1;
    for (int h = 0; h < sh->H && !rc; h++)
        for (int s = 0; s < S && !rc; s++) {
            const float *qs = q + ((size_t)s * (size_t)sh->H + (size_t)h) * (size_t)qk;
            const int *ks = nsel[s] < 0 ? NULL : sel + (size_t)s * (size_t)sh->sel_stride;
            int nk = nsel[s] < 0 ? (int)pos + s + 1 : nsel[s];
            memset(qa, 0, (size_t)kvl * 4); /* mm_matvec_t over the head's W_UK rows */
            for (int r = 0; r < sh->nope; r++) {
                qt_dequant_row(&kv_b->W, (int64_t)h * kvw + r, d);
                for (int j = 0; j < kvl; j++) qa[j] = qa[j] + qs[r] * d[j];
            }
            for (int i = 0; i < nk; i++) {
                int t = ks ? ks[i] : i;
                score[i] = (mm_dot_f32(qa, lat + (size_t)t * (size_t)kvl, kvl) + mm_dot_f32(qs + sh->nope, kr + (size_t)t * (size_t)rd, rd)) * sh->scale;
            }
            float mx = score[0], sum = 0;
            for (int i = 1; i < nk; i++) mx = score[i] > mx ? score[i] : mx;
            for (int i = 0; i < nk; i++) sum += (score[i] = fm_expf(score[i] - mx));
            float inv = 1.0f / sum;
            for (int i = 0; i < nk; i++) score[i] *= inv;
            memset(o, 0, (size_t)kvl * 4);
            for (int i = 0; i < nk; i++) mm_axpy_f32(o, score[i], lat + (size_t)(ks ? ks[i] : i) * (size_t)kvl, kvl);
            mm_act_quant(o, kvl, kv_b->W.fmt, kv_b->W.gs, 0, hq, &xs, xg);
            qt_tensor uv = qt_rows(&kv_b->W, (int64_t)h * kvw + sh->nope, sh->vh);
            if (mm_idot_ref(&uv, hq, kvl, &xs, 1, attn + ((size_t)s * (size_t)sh->H + (size_t)h) * (size_t)sh->vh)) rc = -1;
        }
    free(qa), free(o), free(d), free(score), free(hq), free(xg);
    if (rc) return snprintf(err, n, "CUDA: attention: out of memory"), -1;
    H.stats.calls++, H.stats.attn_calls++, H.stats.mats += 1, H.stats.rows += (uint64_t)S;
    H.stats.bytes_in += (uint64_t)S * (uint64_t)sh->H * (uint64_t)qk * 4, H.stats.bytes_out += (uint64_t)S * (uint64_t)sh->H * (uint64_t)sh->vh * 4;
    double dt = host_now() - t0;
    H.stats.seconds += dt, H.stats.kernel_seconds += dt;
    return 0;
}

void cu_stats_get(cu_stats *st) {
    if (st) *st = H.stats;
}

uint64_t cu_mem_free(void) { return H.on ? HOST_MEM - H.stats.weight_bytes - H.kv_mem : 0; }

int cu_copy_bandwidth(uint64_t bytes, int reps, double *bytes_per_s, char *err, size_t n) {
    if (!H.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    char *a = (char *)malloc(bytes ? bytes : 1), *b = (char *)malloc(bytes ? bytes : 1);
    if (!a || !b) {
        free(a), free(b);
        return snprintf(err, n, "CUDA: allocating the copy buffers: out of memory"), -1;
    }
    memset(a, 1, bytes);
    double best = 0;
    volatile char sink = 0;
    for (int r = 0; r <= reps; r++) { /* the first is a warm-up */
        double t0 = host_now();
        memcpy(b, a, bytes);
        sink ^= b[bytes ? bytes - 1 : 0]; /* the copy is used: not elided */
        double dt = host_now() - t0;
        if (r && (best == 0 || dt < best)) best = dt;
    }
    (void)sink;
    *bytes_per_s = best > 0 ? 2.0 * (double)bytes / best : 0;
    free(a), free(b);
    return 0;
}
