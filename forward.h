/* forward.h — the per-token math of GLM-5 (glm_moe_dsa) and DeepSeek-V3
 * (deepseek_v3, kimi_k2) over a loaded coli_model: RMSNorm, RoPE
 * (interleaved or half-split, YaRN tables), MLA attention on the compressed
 * KV cache (absorbed or reconstructed), the DSA lightning indexer, the
 * sigmoid router with its correction bias and group-limited choice, the
 * MoE with routed experts from the store, dense MLPs, the final norm and
 * lm_head. A pass's rows each carry a position and a KV slot: one
 * sequence's consecutive positions (fwd_run and its wrappers, on kv.slot),
 * or rows of several sequences (fwd_rows), every row computing exactly
 * what it computes alone. It follows Hugging Face transformers' modeling_glm_moe_dsa.py in
 * float32; docs/model.md gives the equations and the traps, by section.
 * What runs on the GPU goes through gpu.h's calls (thread 0), whose
 * per-layer answers reach the team in fwd_shared.
 * Prefix: fwd_ (and the small math helpers). Must not: load weights, plan
 * memory, read files or the environment, sample, or write the GPU's state
 * other than through gpu.h. */
#ifndef COLI_FORWARD_H
#define COLI_FORWARD_H

#include "fmath.h"
#include "model.h"

/* ------------------------------------------------------------------- math */

/* y = w ⊙ x / sqrt(mean(x²) + eps) over n elements (docs/model.md §2). */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

/* LayerNorm with weight and bias (biased variance; the indexer's, §2). */
static void layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps) {
    double mu = 0, var = 0;
    for (int i = 0; i < n; i++) mu += x[i];
    mu /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mu) * (x[i] - mu);
    float r = 1.0f / sqrtf((float)(var / n) + eps);
    for (int i = 0; i < n; i++) y[i] = (float)(x[i] - mu) * r * w[i] + b[i];
}

/* Interleaved RoPE on d values at position p: pair (2i, 2i+1) rotates by
 * angle i; the result is written de-interleaved [evens' | odds'] exactly as
 * transformers' apply_rotary_pos_emb_interleave returns it (docs/model.md §3). */
static void rope_apply(float *v, int d, const float *cs, const float *sn) {
    float tmp[512];
    int h = d / 2;
    for (int i = 0; i < h; i++) {
        float a = v[2 * i], b = v[2 * i + 1];
        tmp[i] = a * cs[i] - b * sn[i];
        tmp[h + i] = b * cs[i] + a * sn[i];
    }
    memcpy(v, tmp, (size_t)d * 4);
}

/* Half-split RoPE (rope_interleave false): pair (i, i + d/2) rotates by
 * angle i in place, as transformers' apply_rotary_pos_emb with rotate_half. */
static void rope_apply_half(float *v, int d, const float *cs, const float *sn) {
    int h = d / 2;
    for (int i = 0; i < h; i++) {
        float a = v[i], b = v[h + i];
        v[i] = a * cs[i] - b * sn[i];
        v[h + i] = b * cs[i] + a * sn[i];
    }
}

/* The attention's RoPE in the layout config.json names. */
static inline void rope_attn(const coli_config *c, float *v, const float *cs, const float *sn) {
    (c->rope_interleave ? rope_apply : rope_apply_half)(v, c->qk_rope, cs, sn);
}

/* In-place softmax of n scores. */
static void softmax(float *x, int n) {
    float mx = x[0], sum = 0;
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) sum += (x[i] = fm_expf(x[i] - mx));
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* k-th largest (k ≥ 1) of n values; reorders v. */
static float kth_largest(float *v, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float piv = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] > piv) i++;
            while (v[j] < piv) j--;
            if (i <= j) { float t = v[i]; v[i] = v[j]; v[j] = t; i++; j--; }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

/* Keys kept by the indexer among n scored keys: the k largest scores, ties
 * at the threshold broken toward earlier positions; written ascending to
 * out. `tmp` holds n floats. Returns k. */
static int topk_select(const float *score, int n, int k, float *tmp, int *out) {
    memcpy(tmp, score, (size_t)n * 4);
    float thr = kth_largest(tmp, n, k);
    int above = 0;
    for (int t = 0; t < n; t++) above += score[t] > thr;
    int ties = k - above, c = 0;
    for (int t = 0; t < n && c < k; t++)
        if (score[t] > thr || (score[t] == thr && ties-- > 0)) out[c++] = t;
    return c;
}

/* ---------------------------------------------------------------- forward
 *
 * A forward pass runs on the model's thread team (team.h): every function
 * below taking an fwd_t is called by every thread of the team, tid 0 to
 * nth-1, with the same arguments. Row-wise steps give each thread a
 * contiguous block of rows (fwd_rows), always the same block for the same
 * S, so a row written by one step is read by the next row-wise step on the
 * same thread without a barrier; everything else meets at fwd_sync. What
 * one thread must decide alone (the store's I/O, top-k choices) runs on
 * tid 0 and is published before a barrier. No result depends on nth. */

typedef struct {
    coli_model *m;
    int tid, nth;
} fwd_t;

/* What tid 0 publishes to the team during a forward pass. */
typedef struct {
    coli_model *m;
    int S, pos;        /* rows (their tokens, positions, slots: sc->rtok, rpos, rslot); pos: the first row's position (a one-sequence pass, seq0) */
    int seq0;          /* the rows are one sequence in slot 0 at pos..pos+S-1: the GPU's latent cache and keys (slot 0's) serve it */
    int w0;            /* the first position of slot 0 the pass writes (kv.ctx: none): the GPU's copies are stale from there */
    int nwant;         /* out: the logits of every row (-1) or of rows sc->wrow[0..nwant) */
    float *out;
    float *hid;        /* NULL, or [S][dim]: the final-normed hidden rows (main) / the MTP layer's output rows (MTP) */
    const float *hin;  /* MTP: [S][dim] the hidden rows paired with tok */
    float *last;       /* MTP: [vocab] the last row's logits (sc->logits keeps the main model's) */
    int s1;            /* every row exactly as a one-row forward (fwd_attention) */
    int rc;            /* -1: failed, m->err set */
    int job, n;        /* the expert job to compute, and its row count (a GPU batch: all its rows) */
    int bn;            /* a GPU batch: its entries, job bj with rows [b0, b0 + bc) of sc->rows */
    int bj[CU_MAX_EXPERTS], b0[CU_MAX_EXPERTS], bc[CU_MAX_EXPERTS], bend[CU_MAX_EXPERTS]; /* bend: the job's last rows */
    int attn_gpu, idx_gpu; /* thread 0 to the team: this layer's attention / this chunk of indexer scores came from the GPU */
} fwd_shared;

static void fwd_sync_cb(void *arg) { team_sync((team *)arg); }
static inline void fwd_sync(const fwd_t *f) { team_sync(&f->m->team); }

/* This thread's block [*a, *b) of n items. */
static inline void fwd_share(const fwd_t *f, int64_t n, int64_t *a, int64_t *b) {
    int64_t per = (n + f->nth - 1) / f->nth;
    *a = per * f->tid < n ? per * f->tid : n;
    *b = *a + per < n ? *a + per : n;
}

/* y[i] = x·W[i]ᵀ for nw ≤ CU_MAX_GROUP matrices of one input x; d[i] is
 * the GPU's copy of W[i] or NULL. In one GPU round trip when the GPU holds
 * them all and they share format and group size; else each on its own, on
 * the GPU or the CPU. A failed GPU call is said once and the CPU computes
 * it and everything after. */
static void fwd_matmul_group_on(const fwd_t *f, const qt_tensor *const *W, const cu_mat *const *d, int nw, const float *x, int S, float *const *y) {
    coli_model *m = f->m;
    int together = 1;
    for (int i = 0; i < nw; i++) together &= d[i] && W[i]->fmt == W[0]->fmt && W[i]->gs == W[0]->gs && W[i]->I == W[0]->I;
    if (nw > 1 && !together) {
        for (int i = 0; i < nw; i++) fwd_matmul_group_on(f, W + i, d + i, 1, x, S, y + i);
        return;
    }
    if (together && !gpu_failed(&m->gpu)) {
        fwd_sync(f); /* x complete */
        if (f->tid == 0) gpu_matmul(&m->gpu, &m->mm, d, W, nw, x, S, y); /* thread 0 works, the others wait */
        fwd_sync(f);
        if (!gpu_failed(&m->gpu)) return;
    }
    for (int i = 0; i < nw; i++) mm_matmul_team(&m->mm, W[i], x, S, y[i], f->tid, f->nth, fwd_sync_cb, &m->team);
}

/* Dense matmuls of one input x: on the GPU for the matrices it holds. */
static void fwd_matmul_group(const fwd_t *f, const qt_tensor *const *W, int nw, const float *x, int S, float *const *y) {
    coli_model *m = f->m;
    const cu_mat *d[CU_MAX_GROUP];
    for (int i = 0; i < nw; i++) {
        d[i] = gpu_find(&m->gpu, W[i]);
        if (f->tid == 0) gpu_count_dense(&m->gpu, d[i] != NULL);
    }
    fwd_matmul_group_on(f, W, d, nw, x, S, y);
}

/* A dense matmul: on the GPU when it holds W. */
static inline void fwd_matmul(const fwd_t *f, const qt_tensor *W, const float *x, int S, float *y) { fwd_matmul_group(f, &W, 1, x, S, &y); }

/* RMSNorm of this thread's rows of x[S][n] into y. */
static void fwd_rmsnorm_rows(const fwd_t *f, float *y, const float *x, const float *w, int S, int n, float eps) {
    int64_t a, b;
    fwd_share(f, S, &a, &b);
    for (int64_t s = a; s < b; s++) rmsnorm(y + (size_t)s * n, x + (size_t)s * n, w, n, eps);
}

/* x += y over this thread's rows of [S][n]. */
static void fwd_add_rows(const fwd_t *f, float *x, const float *y, int S, int n) {
    int64_t a, b;
    fwd_share(f, S, &a, &b);
    for (size_t i = (size_t)a * n; i < (size_t)b * n; i++) x[i] += y[i];
}

/* Index scores of query row s against the cached keys kc, [t0, t1), into
 * score[]. */
static void fwd_index_scores(coli_model *m, const uint8_t *kc, int s, int64_t t0, int64_t t1, float *score) {
    const coli_config *c = &m->c;
    const coli_scratch *sc = &m->sc;
    int ih = c->index_heads, id = c->index_dim, bits = m->kv.ibits;
    size_t rb = m->kv.irb;
    float sscale = 1.0f / sqrtf((float)id);
    const float *qs = sc->qi + (size_t)s * ih * id, *w = sc->iw + (size_t)s * ih;
    for (int64_t t = t0; t < t1; t++) {
        const uint8_t *key = kc + (size_t)t * rb;
        float acc = 0;
        for (int h = 0; h < ih; h++) {
            float d = kvq_dot(bits, qs + (size_t)h * id, key, id) * sscale;
            acc += w[h] * (d > 0 ? d : 0);
        }
        score[t] = acc;
    }
}

/* The kept keys of rows [0, S) at pos of full layer l of a slot-0
 * sequence (sh->seq0; their keys and queries ready, gpu_keys_written done)
 * from scores the GPU computes (gpu_index_scores), a
 * row per thread at a time, each thread then choosing its row's top k in
 * its own scratch; the GPU holds the indexer's keys. 1 when every row's
 * nsel/sel is set; 0 when the CPU must score them all (after a failure,
 * said once). */
static int fwd_indexer_gpu(const fwd_t *f, fwd_shared *sh, int l) {
    coli_model *m = f->m;
    coli_scratch *sc = &m->sc;
    int S = sh->S, pos = sh->pos, fs = m->kv.full_slot[l], ih = m->c.index_heads, id = m->c.index_dim;
    int k = m->c.index_topk, s0 = k - pos <= 0 ? 0 : k - pos < S ? k - pos : S; /* rows [0, s0) keep every key */
    if (f->tid == 0)
        for (int s = 0; s < s0; s++) sc->nsel[s] = -1;
    const float *keys = (const float *)(const void *)kv_ikey(&m->kv, 0, l); /* f32 where the GPU holds them */
    for (int r = s0; r < S; r += f->nth) {
        int n = S - r < f->nth ? S - r : f->nth;
        if (f->tid == 0)
            sh->idx_gpu = gpu_index_scores(&m->gpu, &m->c, fs, keys, S, pos, r, n, sc->qi + (size_t)r * ih * id, sc->iw + (size_t)r * ih, sc->thr);
        fwd_sync(f);
        if (!sh->idx_gpu) return 0;
        if (f->tid < n) {
            int s = r + f->tid;
            float *score = sc->thr[f->tid];
            sc->nsel[s] = topk_select(score, pos + s + 1, k, score + m->kv.ctx, sc->sel + (size_t)s * k);
        }
        fwd_sync(f); /* the scratch is the next chunk's */
    }
    if (f->tid == 0 && s0 < S) gpu_count_index(&m->gpu, 1);
    fwd_sync(f); /* tid 0's nsel = -1 of rows with every key kept */
    return 1;
}

/* DSA indexer (docs/model.md §5) of full layer l for rows [0, S), row s at
 * position sc->rpos[s] of slot sc->rslot[s]: caches their keys and writes
 * each row's kept keys among its own slot's keys to sc->sel/nsel (nsel =
 * -1: every causal key is kept). Batches give each thread whole rows; a
 * single row splits its keys over the team. A row's scores and choice are
 * the same either way (each key's score is computed alone). */
static void fwd_indexer(const fwd_t *f, fwd_shared *sh, int l) {
    coli_model *m = f->m;
    int S = sh->S;
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    coli_scratch *sc = &m->sc;
    int ih = c->index_heads, id = c->index_dim, half = c->qk_rope / 2, k = c->index_topk;
    fwd_matmul(f, &L->iq, sc->qlat, S, sc->qi);
    fwd_matmul_group(f, (const qt_tensor *[]){&L->ik, &L->iw}, 2, sc->a, S, (float *[]){sc->tmp, sc->iw}); /* tmp: [S][id] raw keys */
    float wscale = 1.0f / sqrtf((float)ih);
    int64_t a, b;
    fwd_share(f, S, &a, &b);
    for (int64_t s = a; s < b; s++) {
        int p = sc->rpos[s];
        const float *cs = sc->cos + (size_t)p * half, *sn = sc->sin + (size_t)p * half;
        float *key = sc->thr[f->tid];
        layernorm(key, sc->tmp + (size_t)s * id, L->ik_norm_w, L->ik_norm_b, id, 1e-6f);
        void (*rope)(float *, int, const float *, const float *) = c->index_rope_interleave ? rope_apply : rope_apply_half;
        rope(key, c->qk_rope, cs, sn);
        kvq_store(m->kv.ibits, kv_ikey(&m->kv, sc->rslot[s], l) + (size_t)p * m->kv.irb, key, id);
        for (int h = 0; h < ih; h++) rope(sc->qi + ((size_t)s * ih + h) * id, c->qk_rope, cs, sn);
        for (int h = 0; h < ih; h++) sc->iw[(size_t)s * ih + h] *= wscale;
    }
    fwd_sync(f); /* every key of the batch is cached */
    if (gpu_has_keys(&m->gpu) && f->tid == 0 && sh->w0 < m->kv.ctx) gpu_keys_written(&m->gpu, m->kv.full_slot[l], sh->w0, m->kv.gen);
    if (gpu_has_keys(&m->gpu) && sh->seq0 && fwd_indexer_gpu(f, sh, l)) return; /* the GPU holds slot 0's indexer keys */
    if (f->tid == 0) {
        int any = 0; /* some row chooses among more than k keys */
        for (int s = 0; s < S; s++) any |= sc->rpos[s] + 1 > k;
        if (any) gpu_count_index(&m->gpu, 0);
    }
    if (S >= f->nth) {
        for (int64_t s = a; s < b; s++) {
            int T = sc->rpos[s] + 1;
            if (T <= k) { sc->nsel[s] = -1; continue; }
            float *score = sc->thr[f->tid], *tmp = score + m->kv.ctx;
            fwd_index_scores(m, kv_ikey(&m->kv, sc->rslot[s], l), (int)s, 0, T, score);
            sc->nsel[s] = topk_select(score, T, k, tmp, sc->sel + (size_t)s * k);
        }
        fwd_sync(f);
        return;
    }
    for (int s = 0; s < S; s++) {
        int T = sc->rpos[s] + 1;
        if (T <= k) {
            if (f->tid == 0) sc->nsel[s] = -1;
            continue;
        }
        float *score = sc->thr[0], *tmp = score + m->kv.ctx;
        int64_t t0, t1;
        fwd_share(f, T, &t0, &t1);
        fwd_index_scores(m, kv_ikey(&m->kv, sc->rslot[s], l), s, t0, t1, score);
        fwd_sync(f);
        if (f->tid == 0) sc->nsel[s] = topk_select(score, T, k, tmp, sc->sel + (size_t)s * k);
        fwd_sync(f);
    }
    fwd_sync(f); /* tid 0's nsel = -1 of rows with every key kept */
}

/* Absorbed attention of head h for query row s (at sc->rpos[s] of slot
 * sc->rslot[s]) over the kept keys of its slot: the
 * query is pulled into the latent space (q_nope · W_UK, a transposed
 * product over kv_b's rows), scored against the cached latents, and the
 * weighted latent is written to out[kv_lora]; the caller expands it by W_UV.
 * Reentrant: per-thread scratch thr. */
static void attn_head_latent(coli_model *m, int l, int s, int h, float *thr, float *out) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    const coli_layer *L = &m->L[l];
    int T = sc->rpos[s] + 1, kvl = c->kv_lora, nope = c->qk_nope, rd = c->qk_rope, kvw = nope + c->v_head, bits = m->kv.bits;
    const uint8_t *lat = kv_lat(&m->kv, sc->rslot[s], l), *kr = kv_rope(&m->kv, sc->rslot[s], l);
    size_t lrb = m->kv.lrb, rrb = m->kv.rrb;
    const float *q = sc->q + ((size_t)s * c->n_heads + h) * c->qk_head;
    int n = sc->nsel[s] < 0 ? T : sc->nsel[s];
    const int *sel = sc->nsel[s] < 0 ? NULL : sc->sel + (size_t)s * c->index_topk;
    float *score = thr, *qa = thr + m->kv.ctx;
    qt_tensor uk = qt_rows(&L->kv_b, (int64_t)h * kvw, nope);
    mm_matvec_t(&m->mm, &uk, q, qa);
    float scale = c->attn_scale;
    for (int i = 0; i < n; i++) {
        int t = sel ? sel[i] : i;
        score[i] = (kvq_dot(bits, qa, lat + (size_t)t * lrb, kvl) + kvq_dot(bits, q + nope, kr + (size_t)t * rrb, rd)) * scale;
    }
    softmax(score, n);
    memset(out, 0, (size_t)kvl * 4);
    for (int i = 0; i < n; i++) kvq_axpy(bits, out, score[i], lat + (size_t)(sel ? sel[i] : i) * lrb, kvl);
}

/* Ordinary attention of head h for query row s over the kept keys of its
 * slot, with K_nope | V of every key of the slot already expanded in
 * kv[t][nope + v]. */
static void attn_head_rows(coli_model *m, int l, int s, int h, const float *kv, float *score) {
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int nope = c->qk_nope, rd = c->qk_rope, kvw = nope + c->v_head, vh = c->v_head;
    const uint8_t *kr = kv_rope(&m->kv, sc->rslot[s], l);
    const float *q = sc->q + ((size_t)s * c->n_heads + h) * c->qk_head;
    int Ts = sc->rpos[s] + 1, n = sc->nsel[s] < 0 ? Ts : sc->nsel[s];
    const int *sel = sc->nsel[s] < 0 ? NULL : sc->sel + (size_t)s * c->index_topk;
    float scale = c->attn_scale;
    for (int i = 0; i < n; i++) {
        int t = sel ? sel[i] : i;
        score[i] = (mm_dot_f32(q, kv + (size_t)t * kvw, nope) + kvq_dot(m->kv.bits, q + nope, kr + (size_t)t * m->kv.rrb, rd)) * scale;
    }
    softmax(score, n);
    float *o = sc->attn + ((size_t)s * c->n_heads + h) * vh;
    memset(o, 0, (size_t)vh * 4);
    for (int i = 0; i < n; i++) mm_axpy_f32(o, score[i], kv + (size_t)(sel ? sel[i] : i) * kvw + nope, vh);
}

/* hkv[t] = w · latent row t for t < T (team-wide). Rows in fewer bits go
 * through f32 tiles of n_heads·max_s rows in sc->hlat, which this path
 * does not otherwise use: a matmul row depends only on its own input row,
 * so the tiles give what one product over every row would. */
static void fwd_expand_keys(const fwd_t *f, const qt_tensor *w, const uint8_t *lat, int T, float *hkv) {
    coli_model *m = f->m;
    const coli_kv *kv = &m->kv;
    if (kv->bits == 32) {
        fwd_matmul(f, w, (const float *)(const void *)lat, T, hkv);
        return;
    }
    int tile = m->c.n_heads * m->sc.max_s, kvl = kv->dl, kvw = (int)w->O;
    for (int t0 = 0; t0 < T; t0 += tile) {
        int n = T - t0 < tile ? T - t0 : tile;
        int64_t a, b;
        fwd_share(f, n, &a, &b);
        for (int64_t t = a; t < b; t++) kvq_load(kv->bits, lat + (size_t)(t0 + t) * kv->lrb, m->sc.hlat + (size_t)t * kvl, kvl);
        fwd_sync(f);
        fwd_matmul(f, w, m->sc.hlat, n, hkv + (size_t)t0 * kvw);
        fwd_sync(f); /* the tile is the next one's */
    }
}

/* Whether absorbed MLA costs less than reconstruction for a batch of S
 * queries. Per head and key, absorbed scores and accumulates in the latent
 * space (S·(2·kv_lora + rope) multiply-adds), reconstruction expands every
 * key once (kv_lora·(nope + v)) and then attends in head space
 * (S·(nope + rope + v)). For GLM-5 the crossover is S ≈ 400. */
static int absorb_is_cheaper(const coli_config *c, int S) {
    double absorbed = (double)S * (2.0 * c->kv_lora + c->qk_rope);
    double rebuilt = (double)c->kv_lora * (c->qk_nope + c->v_head) + (double)S * (c->qk_nope + c->qk_rope + c->v_head);
    return absorbed <= rebuilt;
}

/* MLA attention (docs/model.md §4) of layer l on normed rows sc->a, row s
 * at sc->rpos[s] of slot sc->rslot[s] over its own slot's keys; result
 * in sc->tmp. s1: choose the path a single row would take, so that every
 * row computes exactly what a one-row forward computes (verification of
 * drafts, fwd_rows; every other step is per row by construction).
 * The GPU's latent cache is slot 0's: only a one-sequence pass of slot 0
 * (sh->seq0) attends there; every pass that writes slot 0 lowers what the
 * GPU's copy is known to equal. Absorbed: (head, row) pairs spread over the team, each head's
 * W_UV expansion on one thread with its own scratch; reconstructed: each
 * head's keys expanded by the team, its rows spread. */
static void fwd_attention(const fwd_t *f, fwd_shared *sh, int l) {
    coli_model *m = f->m;
    int S = sh->S, pos = sh->pos, s1 = sh->s1;
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    coli_scratch *sc = &m->sc;
    int half = c->qk_rope / 2, kvl = c->kv_lora, rd = c->qk_rope, H = c->n_heads;
    if (c->q_lora) {
        fwd_matmul_group(f, (const qt_tensor *[]){&L->q_a, &L->kv_a}, 2, sc->a, S, (float *[]){sc->qlat, sc->ckv});
        fwd_rmsnorm_rows(f, sc->qlat, sc->qlat, L->q_a_norm, S, c->q_lora, 1e-6f);
        fwd_sync(f);
        fwd_matmul(f, &L->q_b, sc->qlat, S, sc->q);
    } else /* one q_proj beside kv_a, both of the normed rows */
        fwd_matmul_group(f, (const qt_tensor *[]){&L->q_b, &L->kv_a}, 2, sc->a, S, (float *[]){sc->q, sc->ckv});
    int64_t a, b;
    fwd_share(f, S, &a, &b);
    for (int64_t s = a; s < b; s++) {
        int p = sc->rpos[s], slot = sc->rslot[s];
        const float *cs = sc->cos + (size_t)p * half, *sn = sc->sin + (size_t)p * half;
        const float *ckv = sc->ckv + (size_t)s * (kvl + rd);
        float *row = sc->thr[f->tid], *kr = row + kvl;
        rmsnorm(row, ckv, L->kv_a_norm, kvl, 1e-6f);
        memcpy(kr, ckv + kvl, (size_t)rd * 4);
        rope_attn(c, kr, cs, sn);
        kvq_store(m->kv.bits, kv_lat(&m->kv, slot, l) + (size_t)p * m->kv.lrb, row, kvl);
        kvq_store(m->kv.bits, kv_rope(&m->kv, slot, l) + (size_t)p * m->kv.rrb, kr, rd);
        for (int h = 0; h < H; h++) rope_attn(c, sc->q + ((size_t)s * H + h) * c->qk_head + c->qk_nope, cs, sn);
    }
    fwd_sync(f); /* queries roped, the batch's keys cached */
    if (c->idx_full[l]) fwd_indexer(f, sh, l); /* shared layers keep the last full layer's choice */
    else if (!c->has_indexer || l == c->n_layers) { /* no indexer (deepseek_v3, an MTP layer without one): every causal key */
        if (f->tid == 0)
            for (int s = 0; s < S; s++) sc->nsel[s] = -1;
        fwd_sync(f);
    }
    int absorbed = m->absorb < 0 ? absorb_is_cheaper(c, s1 ? 1 : S) : m->absorb;
    int vh = c->v_head, kvw = c->qk_nope + vh;
    if (gpu_has_kv(&m->gpu) && f->tid == 0 && sh->w0 < m->kv.ctx) gpu_kv_written(&m->gpu, l, sh->w0, m->kv.gen); /* slot 0's latents were just written */
    if (gpu_has_kv(&m->gpu) && absorbed && sh->seq0) { /* on the GPU when it holds the layer's kv_b (its cache is slot 0's) */
        if (f->tid == 0)
            sh->attn_gpu = gpu_attention(&m->gpu, c, l, &L->kv_b, (const float *)(const void *)kv_lat(&m->kv, 0, l),
                                         (const float *)(const void *)kv_rope(&m->kv, 0, l), S, pos, sc->q, sc->nsel, sc->sel, sc->attn); /* f32 there */
        fwd_sync(f);
        if (sh->attn_gpu) absorbed = -1;
    } else if (f->tid == 0)
        gpu_count_attn(&m->gpu, 0);
    if (absorbed > 0) {
        for (int i = f->tid; i < H * S; i += f->nth)
            attn_head_latent(m, l, i % S, i / S, sc->thr[f->tid], sc->hlat + (size_t)i * kvl);
        fwd_sync(f);
        float *hout = sc->hout + (size_t)f->tid * S * vh;
        for (int h = f->tid; h < H; h += f->nth) { /* expand each head's latents by W_UV */
            qt_tensor uv = qt_rows(&L->kv_b, (int64_t)h * kvw + c->qk_nope, vh);
            mm_matmul_slot(&m->mm, &uv, sc->hlat + (size_t)h * S * kvl, S, hout, f->tid);
            for (int s = 0; s < S; s++) memcpy(sc->attn + ((size_t)s * H + h) * vh, hout + (size_t)s * vh, (size_t)vh * 4);
        }
        fwd_sync(f);
    } else if (!absorbed) {
        for (int r0 = 0, r1; r0 < S; r0 = r1) { /* each slot's run of rows over its own keys */
            for (r1 = r0 + 1; r1 < S && sc->rslot[r1] == sc->rslot[r0];) r1++;
            const uint8_t *lat = kv_lat(&m->kv, sc->rslot[r0], l);
            for (int h = 0; h < H; h++) {
                qt_tensor w = qt_rows(&L->kv_b, (int64_t)h * kvw, kvw);
                fwd_expand_keys(f, &w, lat, sc->rpos[r1 - 1] + 1, sc->hkv); /* hkv[t] = [k_nope | v] for every key */
                for (int s = r0 + f->tid; s < r1; s += f->nth) attn_head_rows(m, l, s, h, sc->hkv, sc->thr[f->tid]);
                fwd_sync(f);
            }
        }
    }
    fwd_matmul(f, &L->o, sc->attn, S, sc->tmp);
}

/* g = silu(g)·u over this thread's share of n values. */
static void fwd_swiglu(const fwd_t *f, float *g, const float *u, int64_t n) {
    int64_t a, b;
    fwd_share(f, n, &a, &b);
    for (int64_t i = a; i < b; i++) g[i] = fm_silu(g[i]) * u[i];
}

/* SwiGLU MLP on rows x[S][dim] → y[S][dim] with gate/up/down: dense
 * weights (cpu 0: on the GPU where it holds them), or a routed expert's
 * host copy (cpu 1). */
static void fwd_mlp(const fwd_t *f, const qt_tensor *gate, const qt_tensor *up, const qt_tensor *down, int cpu, const float *x, int S, float *g,
                    float *u, float *y) {
    static const cu_mat *const none[2] = {NULL, NULL};
    const qt_tensor *gu[2] = {gate, up};
    float *gu_y[2] = {g, u};
    if (cpu) fwd_matmul_group_on(f, gu, none, 2, x, S, gu_y);
    else fwd_matmul_group(f, gu, 2, x, S, gu_y);
    fwd_swiglu(f, g, u, (int64_t)S * gate->O);
    fwd_sync(f);
    if (cpu) fwd_matmul_group_on(f, &down, none, 1, g, S, &y);
    else fwd_matmul(f, down, g, S, y);
}

/* Router for one row (docs/model.md §6): sigmoid scores, correction bias for the choice only,
 * group-limited selection (group score = sum of its top-2 choice scores),
 * top-k (ties to the lower index), optional normalization, scaling.
 * tmp holds 2·n_experts + n_group floats. */
static void route_row(const coli_config *c, const float *logit, const float *bias, int *ex, float *w, float *tmp) {
    int E = c->n_experts, per = E / c->n_group;
    float *prob = tmp, *choice = tmp + E, *gs = tmp + 2 * E;
    for (int e = 0; e < E; e++) {
        prob[e] = fm_sigmoid(logit[e]);
        choice[e] = prob[e] + bias[e];
    }
    if (c->n_group > 1) {
        for (int g = 0; g < c->n_group; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (choice[e] > b1) { b2 = b1; b1 = choice[e]; }
                else if (choice[e] > b2) b2 = choice[e];
            }
            gs[g] = b1 + b2;
        }
        for (int k = 0; k < c->topk_group; k++) { /* mark kept groups with NaN-free +inf */
            int best = -1;
            for (int g = 0; g < c->n_group; g++)
                if (gs[g] != INFINITY && (best < 0 || gs[g] > gs[best])) best = g;
            gs[best] = INFINITY;
        }
        for (int e = 0; e < E; e++)
            if (gs[e / per] != INFINITY) choice[e] = -INFINITY;
    }
    float sum = 0;
    for (int k = 0; k < c->topk; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (choice[e] != -INFINITY && (best < 0 || choice[e] > choice[best])) best = e;
        ex[k] = best;
        w[k] = prob[best];
        choice[best] = -INFINITY;
        sum += w[k];
    }
    for (int k = 0; k < c->topk; k++) w[k] = (c->norm_topk ? w[k] / (sum + 1e-20f) : w[k]) * c->route_scale;
}

/* Router logits of rows [0, S) of x for a MoE layer's router (spread over
 * the team), then each row's choice (rows spread, per-thread scratch):
 * sc->route_e / sc->route_w. Ends at a barrier. */
static void fwd_route(const fwd_t *f, const coli_layer *L, const float *x, int S) {
    coli_model *m = f->m;
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int D = c->dim, K = c->topk, E = c->n_experts;
    int64_t a, b;
    fwd_share(f, (int64_t)S * E, &a, &b);
    for (int64_t i = a; i < b; i++) sc->rlogit[i] = mm_dot_f32(L->router + (size_t)(i % E) * D, x + (size_t)(i / E) * D, D);
    fwd_sync(f);
    fwd_share(f, S, &a, &b);
    for (int64_t s = a; s < b; s++)
        route_row(c, sc->rlogit + (size_t)s * E, L->router_bias, sc->route_e + (size_t)s * K, sc->route_w + (size_t)s * K, sc->thr[f->tid]);
    fwd_sync(f);
}

/* Rows [a, b) of an expert's batch: the normed input rows their routes
 * (sc->rows: index s·topk + k) came from, into sc->xs. */
static void fwd_moe_gather(const fwd_t *f, int64_t a, int64_t b) {
    coli_scratch *sc = &f->m->sc;
    int D = f->m->c.dim, K = f->m->c.topk;
    for (int64_t r = a; r < b; r++) memcpy(sc->xs + (size_t)r * D, sc->a + (size_t)(sc->rows[r] / K) * D, (size_t)D * 4);
}

/* Rows [a, b) of an expert's output sc->ys to their routes' rows of sc->yk. */
static void fwd_moe_scatter(const fwd_t *f, int64_t a, int64_t b) {
    coli_scratch *sc = &f->m->sc;
    int D = f->m->c.dim;
    for (int64_t r = a; r < b; r++) memcpy(sc->yk + (size_t)sc->rows[r] * D, sc->ys + (size_t)r * D, (size_t)D * 4);
}

/* Thread 0: the batch's experts in one GPU call (gpu_expert_rows) from
 * their rows of sc->xs into sc->ys; a failure is said once and leaves
 * gpu_failed set. */
static void fwd_moe_gpu_call(coli_model *m, const fwd_shared *sh, int mk) {
    int slot[CU_MAX_EXPERTS];
    for (int i = 0; i < sh->bn; i++) slot[i] = xs_job_get(&m->xs, sh->bj[i])->vram;
    gpu_expert_rows(&m->gpu, &m->mm, xs_layout_of(&m->xs, mk), m->sc.xs, sh->n, slot, sh->b0, sh->bc, sh->bn, m->sc.ys);
}

/* Thread 0: the batch of GPU-held experts of MoE layer mk that starts at
 * job *cj, its rows from *crow on: up to CU_MAX_EXPERTS entries and
 * `cap` rows in all (an expert with more rows is split over batches), its
 * rows' route indices into sc->rows; advances the cursor. After a GPU
 * failure every GPU-held job not done yet is requeued instead (read from
 * RAM or disk like any other) and the batch is empty. */
static void fwd_moe_gpu_batch(coli_model *m, fwd_shared *sh, int mk, int S, int cap, int *cj, int *crow) {
    coli_scratch *sc = &m->sc;
    xs_store *x = &m->xs;
    int K = m->c.topk, R = 0;
    sh->bn = 0;
    if (gpu_failed(&m->gpu)) {
        for (int j = 0; j < xs_job_count(x); j++)
            if (xs_job_get(x, j)->vram >= 0 && xs_job_get(x, j)->state == XS_READY) xs_requeue(x, mk, j);
        sh->n = 0;
        return;
    }
    while (*cj < xs_job_count(x) && sh->bn < CU_MAX_EXPERTS && R < cap) {
        const xs_job *jb = xs_job_get(x, *cj);
        if (jb->vram < 0 || jb->state != XS_READY) {
            ++*cj, *crow = 0;
            continue;
        }
        int n = 0, seen = 0, take;
        for (int i = 0; i < S * K; i++) n += sc->route_e[i] == jb->e;
        take = n - *crow < cap - R ? n - *crow : cap - R;
        for (int i = 0; i < S * K && seen < *crow + take; i++)
            if (sc->route_e[i] == jb->e && seen++ >= *crow) sc->rows[R + seen - 1 - *crow] = i;
        sh->bj[sh->bn] = *cj, sh->b0[sh->bn] = R, sh->bc[sh->bn] = take, sh->bend[sh->bn] = *crow + take == n;
        sh->bn++, R += take;
        if (*crow + take == n) ++*cj, *crow = 0;
        else *crow += take;
    }
    sh->n = R;
}

/* The experts of MoE layer mk that the GPU tier holds, in batches
 * (fwd_moe_gpu_batch), one round trip a batch (gate and up, SwiGLU and
 * down on the device), outputs scattered to sc->yk. Each output row is
 * what the expert's own computation on the CPU gives, so batching and
 * placement change no bit. A failed call is said once; the jobs left are
 * then requeued. */
static void fwd_moe_gpu(const fwd_t *f, fwd_shared *sh, int mk, int S) {
    coli_model *m = f->m;
    coli_scratch *sc = &m->sc;
    xs_store *x = &m->xs;
    int cj = 0, crow = 0; /* the cursor: thread 0's */
    int cap = m->mm.max_rows < sc->max_s ? m->mm.max_rows : sc->max_s;
    for (;;) {
        if (f->tid == 0) fwd_moe_gpu_batch(m, sh, mk, S, cap, &cj, &crow);
        fwd_sync(f);
        if (!sh->bn) return;
        int64_t a, b;
        fwd_share(f, sh->n, &a, &b);
        fwd_moe_gather(f, a, b);
        fwd_sync(f);
        if (f->tid == 0) fwd_moe_gpu_call(m, sh, mk);
        fwd_sync(f);
        if (gpu_failed(&m->gpu)) {
            fwd_sync(f); /* every thread has read the failure before thread 0 requeues the jobs (next batch) */
            continue;
        }
        fwd_moe_scatter(f, a, b);
        fwd_sync(f); /* the scatter read sc->rows, which thread 0 refills next */
        if (f->tid == 0) {
            for (int i = 0; i < sh->bn; i++)
                if (sh->bend[i]) xs_done(x, mk, sh->bj[i]), gpu_count_job(&m->gpu, 1);
            tel_lap(&m->tel, TEL_EXPERT_MM);
        }
    }
}

/* ROUTE_REPLAY and ROUTE_TRACE on thread 0, right after main layer mk's
 * routing (before anything reads sc->route_e): replay replaces each row's
 * choices with the trace's (route_w stays the model's, in the order of
 * the replaced ids), then recording keeps what the rows route to. */
static void fwd_route_trace(coli_model *m, int mk, int S) {
    coli_scratch *sc = &m->sc;
    int K = m->c.topk;
    for (int s = 0; s < S; s++) {
        int *e = sc->route_e + (size_t)s * K;
        if (m->rep) {
            const uint16_t *p = rt_replay_row(m->rep, s, mk);
            for (int k = 0; k < K; k++) e[k] = rt_map(m->rep, mk, p[k]);
        }
        if (m->rec && !m->rec->full) {
            uint16_t *p = rt_at(m->rec, m->rec->rows + (uint64_t)s, (uint32_t)mk);
            for (int k = 0; k < K; k++) p[k] = (uint16_t)e[k];
        }
    }
}

/* The routed experts of MoE layer mk that this process computes (all of
 * them, or its own under MPI: ranks.h) for the routes sc->route_e of rows
 * [0, S) of sc->a, each output row into its route's row of sc->yk. Each
 * distinct expert is fetched once and applied to every row that chose it.
 * Experts compute in whatever order their bytes arrive (the GPU tier's
 * first, in batches, then resident ones, then misses as their reads
 * land), each into its own output rows. The store is driven by tid 0
 * alone. 0 or -1 (sh->rc, m->err) on a read error, on every thread. */
static int fwd_moe_local(const fwd_t *f, fwd_shared *sh, int mk, int S) {
    coli_model *m = f->m;
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    xs_store *x = &m->xs;
    int K = c->topk, nu = 0;
    if (f->tid == 0 && !sh->rc) {
        memset(sc->used, 0, (size_t)c->n_experts);
        for (int i = 0; i < S * K; i++) sc->used[sc->route_e[i]] = 1;
        for (int e = 0; e < c->n_experts; e++)
            if (sc->used[e] && rk_mine(m->rk, mk, e)) sc->uniq[nu++] = e;
        if (xs_begin(x, mk, sc->uniq, nu)) sh->rc = model_fail(m, "%s", x->err);
    }
    if (gpu_has_tier(&m->gpu)) { /* the GPU tier's experts first; then sc->rows and the jobs are the CPU loop's */
        fwd_sync(f);
        if (sh->rc) return -1;
        fwd_moe_gpu(f, sh, mk, S);
    }
    for (;;) {
        if (f->tid == 0 && !sh->rc) {
            int j = xs_next(x, mk);
            tel_lap(&m->tel, TEL_EXPERT_IO);
            if (j == -2) sh->rc = model_fail(m, "%s", x->err);
            sh->job = j;
            if (j >= 0) {
                int n = 0, e = xs_job_get(x, j)->e;
                for (int i = 0; i < S * K; i++)
                    if (sc->route_e[i] == e) sc->rows[n++] = i;
                sh->n = n;
            }
        }
        fwd_sync(f);
        if (sh->rc) return -1;
        if (sh->job < 0) return 0;
        const xs_job *jb = xs_job_get(x, sh->job);
        int n = sh->n;
        int64_t a, b;
        fwd_share(f, n, &a, &b);
        fwd_moe_gather(f, a, b);
        fwd_sync(f);
        fwd_mlp(f, &jb->view[XS_GATE], &jb->view[XS_UP], &jb->view[XS_DOWN], 1, sc->xs, n, sc->eg, sc->eu, sc->ys);
        fwd_moe_scatter(f, a, b);
        fwd_sync(f); /* the scatter read sc->rows, which tid 0 refills next */
        if (f->tid == 0) {
            gpu_count_job(&m->gpu, 0);
            gpu_admit(&m->gpu, mk, jb->e, jb->view); /* its bytes are valid until xs_done */
            xs_done(x, mk, sh->job); /* every thread is past the weights: the last matmul ended at a barrier */
            tel_lap(&m->tel, TEL_EXPERT_MM);
        }
    }
}

/* MoE (docs/model.md §6) of layer l on normed rows sc->a → sc->tmp: the
 * routed experts (fwd_moe_local; under MPI the other ranks compute theirs
 * meanwhile and their rows join sc->yk after), then the weighted sum in
 * increasing expert order, as transformers accumulates, so the result
 * never depends on what was resident or on which rank computed what.
 * Returns 0 or -1 (sh->rc, m->err) on a read error. */
static int fwd_moe(const fwd_t *f, fwd_shared *sh, int l, int S) {
    coli_model *m = f->m;
    coli_config *c = &m->c;
    coli_layer *L = &m->L[l];
    coli_scratch *sc = &m->sc;
    int D = c->dim, K = c->topk, mk = moe_index(c, l);
    fwd_route(f, L, sc->a, S);
    if (f->tid == 0 && (m->rep || m->rec) && l < c->n_layers) fwd_route_trace(m, mk, S);
    if (f->tid == 0) {
        for (int i = 0; i < S * K; i++) /* every route counted: rank 0 keeps the whole usage history; only its own heat */
            if (rk_mine(m->rk, mk, sc->route_e[i])) xs_note_use(&m->xs, mk, sc->route_e[i]);
            else xs_note_route(&m->xs, mk, sc->route_e[i]);
        tel_lap(&m->tel, TEL_ROUTER);
        if (rk_active(m->rk) && rk_post(m->rk, mk, S, sc->route_e, sc->a, sc->rk_need, m->err, sizeof m->err)) sh->rc = -1;
    }
    int rc = fwd_moe_local(f, sh, mk, S);
    if (rk_active(m->rk)) { /* collected even after a failure here, so that no answer is left in flight */
        if (f->tid == 0 && m->rk->inflight) {
            char err[sizeof m->err];
            if (rk_collect(m->rk, mk, S, sc->route_e, sc->yk, err, sizeof err) && !sh->rc) sh->rc = model_fail(m, "%s", err);
            tel_lap(&m->tel, TEL_EXPERT_IO);
        }
        fwd_sync(f);
        rc = sh->rc ? -1 : 0;
    }
    if (rc) return -1;
    int64_t a, b;
    fwd_share(f, S, &a, &b);
    for (int64_t s = a; s < b; s++) { /* experts in increasing id */
        float *acc = sc->moe_acc + (size_t)s * D;
        memset(acc, 0, (size_t)D * 4);
        for (int e = 0; e < c->n_experts; e++)
            for (int k = 0; k < K; k++) {
                int i = (int)s * K + k;
                if (sc->route_e[i] != e) continue;
                mm_axpy_f32(acc, sc->route_w[i], sc->yk + (size_t)i * D, D);
            }
    }
    if (c->n_shared) {
        fwd_mlp(f, &L->gate, &L->up, &L->down, 0, sc->a, S, sc->mlp_g, sc->mlp_u, sc->tmp);
        for (size_t i = (size_t)a * D; i < (size_t)b * D; i++) sc->tmp[i] = sc->moe_acc[i] + sc->tmp[i];
    } else
        for (size_t i = (size_t)a * D; i < (size_t)b * D; i++) sc->tmp[i] = sc->moe_acc[i];
    if (f->tid == 0) tel_lap(&m->tel, TEL_DENSE_MM);
    return 0;
}

/* The predictions pred[0..n) of MoE layer mk that this process computes
 * (under MPI, another rank's experts are that rank's to read), moved to
 * the front; returns their count. */
static int fwd_pred_mine(const coli_model *m, int mk, int *pred, int n) {
    if (!rk_active(m->rk)) return n;
    int j = 0;
    for (int i = 0; i < n; i++)
        if (pred[i] >= 0 && rk_mine(m->rk, mk, pred[i])) pred[j++] = pred[i];
    return j;
}

/* Router lookahead: after layer l's attention, the next MoE layer's router
 * runs on the current residual (normed with that layer's weights) and its
 * top pilot_k experts per row are prefetched (PILOT_REAL) or hinted to the
 * kernel (PILOT) by tid 0. Prediction only: never changes what is
 * computed. */
static void fwd_pilot(const fwd_t *f, int l, int S) {
    coli_model *m = f->m;
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int next = l + 1;
    while (next < c->n_layers && !c->moe[next]) next++;
    if (next >= c->n_layers) return;
    const coli_layer *N = &m->L[next];
    int D = c->dim, E = c->n_experts, n = 0, mk = moe_index(c, next);
    if (m->rep) { /* the trace's predictions stand in for the lookahead */
        if (f->tid) return;
        for (int s = 0; s < S; s++) {
            const uint16_t *p = rt_replay_row(m->rep, s, mk) + m->rep->topk;
            for (int k = 0; k < m->pilot_k; k++) {
                int e = rt_map(m->rep, mk, p[k]);
                if (e >= 0) sc->pred[n++] = e;
                if (m->rec && !m->rec->full)
                    rt_at(m->rec, m->rec->rows + (uint64_t)s, (uint32_t)mk)[m->rec->topk + k] = e >= 0 ? (uint16_t)e : (uint16_t)RT_NONE;
            }
        }
        xs_prefetch(&m->xs, mk, sc->pred, fwd_pred_mine(m, mk, sc->pred, n), m->pilot_real);
        return;
    }
    fwd_rmsnorm_rows(f, sc->xs, sc->x, N->post_norm, S, D, c->rms_eps);
    fwd_sync(f);
    fwd_route(f, N, sc->xs, S); /* route_e/route_w are free until this layer's MoE routes */
    if (f->tid) return;
    for (int s = 0; s < S; s++) {
        const float *lg = sc->rlogit + (size_t)s * E;
        for (int k = 0; k < m->pilot_k; k++) { /* top pilot_k by biased score */
            int best = -1;
            float bv = 0;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = n - k; j < n; j++) taken |= sc->pred[j] == e;
                float v = fm_sigmoid(lg[e]) + N->router_bias[e];
                if (!taken && (best < 0 || v > bv)) best = e, bv = v;
            }
            sc->pred[n++] = best;
        }
        if (m->rec && !m->rec->full) {
            uint16_t *p = rt_at(m->rec, m->rec->rows + (uint64_t)s, (uint32_t)mk) + m->rec->topk;
            for (int k = 0; k < m->pilot_k; k++) p[k] = (uint16_t)sc->pred[n - m->pilot_k + k];
        }
    }
    xs_prefetch(&m->xs, mk, sc->pred, fwd_pred_mine(m, mk, sc->pred, n), m->pilot_real);
}

/* Decoder layer l (attention, then the MoE or dense MLP, each with its
 * residual) on the rows sc->x. 0, or -1 after a read error (sh->rc). */
static int fwd_layer(const fwd_t *f, fwd_shared *sh, int l) {
    coli_model *m = f->m;
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    coli_layer *L = &m->L[l];
    int D = c->dim, S = sh->S;
    fwd_rmsnorm_rows(f, sc->a, sc->x, L->in_norm, S, D, c->rms_eps);
    fwd_sync(f);
    fwd_attention(f, sh, l);
    fwd_add_rows(f, sc->x, sc->tmp, S, D);
    if (f->tid == 0) tel_lap(&m->tel, TEL_ATTN);
    if (m->pilot && (S <= 8 || m->rec) && l < c->n_layers) { /* a trace records every row's prediction */
        fwd_pilot(f, l, S);
        if (f->tid == 0) tel_lap(&m->tel, TEL_ROUTER);
    }
    fwd_rmsnorm_rows(f, sc->a, sc->x, L->post_norm, S, D, c->rms_eps);
    fwd_sync(f);
    if (c->moe[l]) {
        if (fwd_moe(f, sh, l, S)) return -1;
    } else {
        fwd_mlp(f, &L->gate, &L->up, &L->down, 0, sc->a, S, sc->mlp_g, sc->mlp_u, sc->tmp);
        if (f->tid == 0) tel_lap(&m->tel, TEL_DENSE_MM);
    }
    fwd_add_rows(f, sc->x, sc->tmp, S, D);
    return 0;
}

/* The output of rows sc->x: normed by `norm` (every row when hid or out is
 * wanted, else the last), the normed rows copied to hid (main) or the raw
 * rows (MTP, raw_hid), and the logits of every row (nwant < 0) or of rows
 * sc->wrow[0..nwant) to out, or (out NULL) of the last to last_out. */
static void fwd_head(const fwd_t *f, const fwd_shared *sh, const float *norm, const qt_tensor *head, int raw_hid, float *last_out) {
    coli_model *m = f->m;
    coli_scratch *sc = &m->sc;
    int D = m->c.dim, S = sh->S;
    int all = sh->out || (sh->hid && !raw_hid), r0 = all ? 0 : S - 1, n = all ? S : 1;
    int64_t a, b;
    fwd_sync(f); /* the last row may belong to another thread's block */
    if (sh->hid && raw_hid) {
        fwd_share(f, S, &a, &b);
        memcpy(sh->hid + (size_t)a * D, sc->x + (size_t)a * D, (size_t)(b - a) * D * 4);
    }
    fwd_rmsnorm_rows(f, sc->a, sc->x + (size_t)r0 * D, norm, n, D, m->c.rms_eps);
    if (sh->hid && !raw_hid) {
        fwd_share(f, n, &a, &b);
        memcpy(sh->hid + (size_t)a * D, sc->a + (size_t)a * D, (size_t)(b - a) * D * 4);
    }
    fwd_sync(f);
    if (sh->out && sh->nwant >= 0) { /* the wanted rows gathered into sc->xs, in order */
        fwd_share(f, sh->nwant, &a, &b);
        for (int64_t i = a; i < b; i++) memcpy(sc->xs + (size_t)i * D, sc->a + (size_t)sc->wrow[i] * D, (size_t)D * 4);
        fwd_sync(f);
        if (sh->nwant) fwd_matmul(f, head, sc->xs, sh->nwant, sh->out);
    } else if (sh->out) fwd_matmul(f, head, sc->a, n, sh->out);
    else fwd_matmul(f, head, sc->a + (size_t)(n - 1) * D, 1, last_out);
    if (f->tid == 0) tel_lap(&m->tel, TEL_DENSE_MM);
}

/* The forward pass on one thread of the team (see fwd_batch). */
static void fwd_worker(void *arg, int tid, int nth) {
    fwd_shared *sh = (fwd_shared *)arg;
    coli_model *m = sh->m;
    fwd_t f = {m, tid, nth};
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int D = c->dim, S = sh->S;
    int64_t a, b;
    fwd_share(&f, S, &a, &b);
    for (int64_t s = a; s < b; s++) qt_dequant_row(&m->embed, sc->rtok[s], sc->x + (size_t)s * D);
    for (int l = 0; l < c->n_layers; l++)
        if (fwd_layer(&f, sh, l)) return;
    fwd_head(&f, sh, m->final_norm, &m->lm_head, 0, sc->logits);
}

/* The MTP layer on one thread of the team (see fwd_mtp): each row pairs
 * the embedding of its token with a hidden row, u = eh_proj([enorm(e) ;
 * hnorm(h)]) (the embedding half first, as vLLM and llama.cpp order it),
 * then the decoder layer at index n_layers. */
static void fwd_mtp_worker(void *arg, int tid, int nth) {
    fwd_shared *sh = (fwd_shared *)arg;
    coli_model *m = sh->m;
    fwd_t f = {m, tid, nth};
    coli_config *c = &m->c;
    coli_scratch *sc = &m->sc;
    int D = c->dim, S = sh->S;
    int64_t a, b;
    fwd_share(&f, S, &a, &b);
    for (int64_t s = a; s < b; s++) {
        float *e = sc->x + (size_t)s * D, *cat = sc->cat + (size_t)s * 2 * D;
        qt_dequant_row(&m->embed, sc->rtok[s], e);
        rmsnorm(cat, e, m->mtp_enorm, D, c->rms_eps);
        rmsnorm(cat + D, sh->hin + (size_t)s * D, m->mtp_hnorm, D, c->rms_eps);
    }
    fwd_sync(&f);
    fwd_matmul(&f, &m->mtp_eh, sc->cat, S, sc->x);
    if (fwd_layer(&f, sh, c->n_layers)) return;
    fwd_head(&f, sh, m->mtp_norm, &m->mtp_head, 1, sh->last);
}

/* The rows of a one-sequence pass: S ≤ max_s tokens at positions pos.. of
 * the selected slot (kv.slot), into the scratch's row arrays and sh. */
static void fwd_seq_rows(coli_model *m, fwd_shared *sh, const int *tok, int S, int pos) {
    coli_scratch *sc = &m->sc;
    for (int s = 0; s < S; s++) sc->rtok[s] = tok[s], sc->rpos[s] = pos + s, sc->rslot[s] = m->kv.slot;
    sh->seq0 = m->kv.slot == 0;
    sh->w0 = m->kv.slot == 0 ? pos : m->kv.ctx;
}

/* Before a main-model forward of S rows: room for them in a trace being
 * recorded; when there is none, recording stops (a bench option never
 * fails a forward). */
static void fwd_route_begin(coli_model *m, int S) {
    if (m->rec && !m->rec->full && rt_reserve(m->rec, S)) {
        m->rec->full = 1;
        fprintf(stderr, "colibri: ROUTE_TRACE: the routing trace stops at %llu rows (its 1 GiB limit, or out of memory)\n",
                (unsigned long long)m->rec->rows);
    }
}

/* After a main-model forward of S rows: the recorded trace keeps them,
 * the replayed one moves on. */
static void fwd_route_end(coli_model *m, int S) {
    if (m->rec && !m->rec->full) rt_commit(m->rec, 0, S);
    if (m->rep) rt_commit(m->rep, 1, S);
}

/* The main model over S ≤ max_s tokens at positions pos.. of the selected
 * slot (kv.slot) on the team:
 * logits to out (every row) or sc->logits (the last), final-normed hidden
 * rows to hid when given, s1 as in fwd_attention. 0 or -1 (m->err). */
static int fwd_run(coli_model *m, const int *tok, int S, int pos, float *out, float *hid, int s1) {
    fwd_shared sh = {.m = m, .S = S, .pos = pos, .out = out, .hid = hid, .s1 = s1, .job = -1, .nwant = -1};
    fwd_seq_rows(m, &sh, tok, S, pos);
    fwd_route_begin(m, S);
    gpu_forward_begin(&m->gpu);
    team_run(&m->team, fwd_worker, &sh);
    if (!sh.rc) fwd_route_end(m, S);
    return sh.rc;
}

/* One forward over S ≤ max_s tokens at positions pos..pos+S-1 of the
 * selected slot (kv.slot), on the
 * model's team. Writes the logits of every row to out[S][vocab], or (out =
 * NULL) of the last row to sc->logits. Returns 0, or -1 with m->err set
 * (expert read failure). */
static int fwd_batch(coli_model *m, const int *tok, int S, int pos, float *out) { return fwd_run(m, tok, S, pos, out, NULL, 0); }

/* A forward over S ≤ max_s tokens at positions pos.. for speculation:
 * every row computed exactly as a one-row forward would (s1), the logits
 * of every row to out[S][vocab] (NULL: the last row's to sc->logits), the
 * final-normed hidden rows to hid[S][dim]. 0 or -1 (m->err). */
static int fwd_verify(coli_model *m, const int *tok, int S, int pos, float *out, float *hid) { return fwd_run(m, tok, S, pos, out, hid, 1); }

/* The MTP layer over S ≤ max_s rows at positions pos.. of the selected
 * slot (kv.slot; the MTP layer's cache is per slot too): row s pairs token
 * tok[s] with hidden row hin[s]; its output rows (before shared_head.norm)
 * go to hout[S][dim] and the logits of the last row to last[vocab] (not
 * NULL; the main model's sc->logits are left alone).
 * Positions must be filled in order: the layer attends over its own cache.
 * 0 or -1 (m->err). */
static int fwd_mtp(coli_model *m, const int *tok, const float *hin, int S, int pos, float *hout, float *last) {
    fwd_shared sh = {.m = m, .S = S, .pos = pos, .hid = hout, .hin = hin, .last = last, .s1 = 1, .job = -1, .nwant = -1};
    fwd_seq_rows(m, &sh, tok, S, pos);
    gpu_forward_begin(&m->gpu);
    team_run(&m->team, fwd_mtp_worker, &sh);
    return sh.rc;
}

/* Runs n tokens at positions pos.. of the selected slot (kv.slot) in
 * chunks of UBATCH. With all_out set,
 * the logits of every position go to all_out[n][vocab]; otherwise the last
 * position's logits are left in sc->logits. */
static int fwd_tokens(coli_model *m, const int *tok, int n, int pos, float *all_out) {
    coli_config *c = &m->c;
    if (pos + n > m->kv.ctx) return model_fail(m, "context of %d tokens exceeds CTX=%d", pos + n, m->kv.ctx);
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= c->vocab) return model_fail(m, "token id %d is outside the vocabulary (%d)", tok[i], c->vocab);
    for (int done = 0; done < n;) {
        int S = n - done < m->ubatch ? n - done : m->ubatch;
        if (fwd_batch(m, tok + done, S, pos + done, all_out ? all_out + (size_t)done * c->vocab : NULL)) return -1;
        done += S;
    }
    if (all_out) memcpy(m->sc.logits, all_out + (size_t)(n - 1) * c->vocab, (size_t)c->vocab * 4);
    return 0;
}

/* One row of a batched forward (fwd_rows): its token, the KV slot of its
 * sequence and its position there, and whether its logits are wanted. */
typedef struct {
    int tok, slot, pos;
    int logits;
} fwd_row;

/* Checks rows r[0..n) for fwd_rows: tokens in the vocabulary, slots held,
 * positions in the context, each slot's rows adjacent in the batch at
 * consecutive positions (one run per slot). 0 or -1 (m->err). */
static inline int fwd_rows_check(coli_model *m, const fwd_row *r, int n) {
    if (n < 1) return model_fail(m, "a batched forward needs at least one row");
    for (int i = 0; i < n; i++) {
        if (r[i].tok < 0 || r[i].tok >= m->c.vocab) return model_fail(m, "row %d: token id %d is outside the vocabulary (%d)", i, r[i].tok, m->c.vocab);
        if (r[i].slot < 0 || r[i].slot >= m->kv.slots) return model_fail(m, "row %d: KV slot %d is not one of the %d slots", i, r[i].slot, m->kv.slots);
        if (r[i].pos < 0 || r[i].pos >= m->kv.ctx) return model_fail(m, "row %d: position %d exceeds CTX=%d", i, r[i].pos, m->kv.ctx);
        if (i == 0 || r[i].slot != r[i - 1].slot) {
            for (int j = 0; j < i; j++)
                if (r[j].slot == r[i].slot) return model_fail(m, "row %d: the rows of KV slot %d are not adjacent", i, r[i].slot);
        } else if (r[i].pos != r[i - 1].pos + 1)
            return model_fail(m, "row %d: position %d of KV slot %d does not follow %d", i, r[i].pos, r[i].slot, r[i - 1].pos);
    }
    return 0;
}

/* A batched forward over rows r[0..n) of one or more sequences, in chunks
 * of UBATCH rows: row i writes its KV (latent, rope key, indexer key) at
 * r[i].pos of slot r[i].slot and attends to that slot's positions
 * [0, r[i].pos] alone (the indexer choosing among them); the dense parts
 * and the MoE run once over all rows, each routed expert read once for
 * every row that chose it. Every row computes bit for bit what a one-row
 * forward (fwd_run, S = 1) of its own sequence at that slot and position
 * computes, whatever else is in the batch and on any thread count: the
 * path is chosen as for one row (s1) and every other step is per row.
 * A prefill chunk of one sequence and decode rows of others may share a
 * forward; a slot's earlier positions must already be cached. The logits
 * of the rows with `logits` set go to out[wanted][vocab] in row order (out
 * NULL: the last row's to sc->logits); the final-normed hidden row of
 * every row to hid[n][dim] when given (for MTP). 0 or -1 (m->err). */
static inline int fwd_rows(coli_model *m, const fwd_row *r, int n, float *out, float *hid) {
    coli_scratch *sc = &m->sc;
    if (fwd_rows_check(m, r, n)) return -1;
    for (int done = 0; done < n;) {
        int S = n - done < m->ubatch ? n - done : m->ubatch;
        fwd_shared sh = {.m = m, .S = S, .pos = r[done].pos, .out = out, .hid = hid ? hid + (size_t)done * m->c.dim : NULL, .s1 = 1, .job = -1,
                         .seq0 = 1, .w0 = m->kv.ctx};
        for (int s = 0; s < S; s++) {
            const fwd_row *w = &r[done + s];
            sc->rtok[s] = w->tok, sc->rpos[s] = w->pos, sc->rslot[s] = w->slot;
            if (w->logits) sc->wrow[sh.nwant++] = s;
            sh.seq0 &= w->slot == 0; /* one run of slot 0 (fwd_rows_check): one sequence at pos.. */
            if (w->slot == 0 && w->pos < sh.w0) sh.w0 = w->pos;
        }
        fwd_route_begin(m, S);
        gpu_forward_begin(&m->gpu);
        team_run(&m->team, fwd_worker, &sh);
        if (sh.rc) return -1;
        fwd_route_end(m, S);
        if (out) out += (size_t)sh.nwant * m->c.vocab;
        done += S;
    }
    return 0;
}

#ifdef COLI_MPI
/* A follower's part of one MoE message on one thread of the team: its
 * experts of layer sh->pos (the MoE layer index) for the routes in
 * sc->route_e of rows [0, S) (fwd_moe_local). */
static void fwd_follow_worker(void *arg, int tid, int nth) {
    fwd_shared *sh = (fwd_shared *)arg;
    fwd_t f = {sh->m, tid, nth};
    fwd_moe_local(&f, sh, sh->pos, sh->S);
}

/* An MPI follower rank (ranks.h) until rank 0 says stop: each message's
 * routes and normed rows in, its experts' output rows (in route order)
 * out. A read failure is answered with its message, and the rank goes on
 * serving. st counts what it did. 0 at the stop, -1 (m->err) when MPI
 * fails. */
static int fwd_follow(coli_model *m, rk_follower_stats *st) {
    coli_ranks *r = m->rk;
    coli_scratch *sc = &m->sc;
    int D = m->c.dim, K = m->c.topk;
    for (;;) {
        int k = 0, S = 0, rows = 0, nret = 0;
        const int *re = NULL;
        const float *a = NULL;
        int cmd = rk_next(r, &k, &S, &rows, &re, &a, &st->idle_s, m->err, sizeof m->err);
        if (cmd < 0) return -1;
        if (cmd == RK_CMD_STOP) return 0;
        if (cmd != RK_CMD_MOE) return model_fail(m, "MPI: unknown command %d from rank 0", cmd);
        int bad = S > sc->max_s;
        for (int i = 0; !bad && i < S * K; i++) bad = re[i] < 0 || re[i] >= m->c.n_experts;
        if (!bad) {
            memcpy(sc->route_e, re, (size_t)S * K * sizeof(int));
            bad = rk_rows_for(r, k, r->rank, sc->route_e, S, sc->rk_need, &nret) != rows;
        }
        if (bad) {
            char msg[200];
            snprintf(msg, sizeof msg, "a MoE message of %d rows (UBATCH here: %d) with an expert id out of range or rows this rank does not own: "
                                      "start every rank with the same settings", S, sc->max_s);
            if (rk_answer(r, 1, msg, NULL, 0, m->err, sizeof m->err)) return -1;
            continue;
        }
        for (int i = 0; i < rows; i++) memcpy(sc->a + (size_t)sc->rk_need[i] * D, a + (size_t)i * D, (size_t)D * 4);
        double t0 = compat_now();
        fwd_shared sh = {.m = m, .S = S, .pos = k, .job = -1, .nwant = -1};
        gpu_forward_begin(&m->gpu);
        team_run(&m->team, fwd_follow_worker, &sh);
        st->compute_s += compat_now() - t0;
        if (sh.rc) {
            if (rk_answer(r, 1, m->err, NULL, 0, m->err, sizeof m->err)) return -1;
            continue;
        }
        for (int i = 0, j = 0; i < S * K; i++) /* this rank's rows to the front of sc->yk, in route order */
            if (rk_owner(r, k, sc->route_e[i]) == r->rank && j++ != i) memcpy(sc->yk + (size_t)(j - 1) * D, sc->yk + (size_t)i * D, (size_t)D * 4);
        if (rk_answer(r, 0, NULL, sc->yk, nret, m->err, sizeof m->err)) return -1;
        st->calls++, st->routes += (uint64_t)nret;
    }
}
#endif

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

#endif
