/* gpu.h — the engine's GPU glue: the one owner of what the engine keeps in
 * GPU memory through backend_cuda.h and of what it counts there. It holds
 * the dense matrices (uploaded once at load, found by the address of the
 * model's qt_tensor), the expert tier (slots of one expert shape, filled
 * from the usage history at load and then with experts that get hot,
 * within a per-forward copy budget; the store keeps only the map,
 * xs_vram_*), the latent cache and the indexer's keys in GPU memory with
 * how many positions of each are known equal to the host's, the failure
 * after which the CPU computes everything (said once), the testing fault
 * (COLI_CUDA_FAULT's value), and the counters behind the end line's GPU
 * figures (gpu_figures_take).
 *
 * The GPU only takes what it computes bit for bit as the CPU does (the
 * integer path, backend_cuda.h), so nothing here changes a token: every
 * function that computes returns whether it did, and the caller computes on
 * the CPU otherwise.
 *
 * Life cycle: gpu_open → gpu_dense_begin, gpu_dense_add per matrix →
 * gpu_kv_open (the latent cache; says what the GPU holds) → gpu_experts
 * (the tier) → per forward gpu_forward_begin, then the compute calls →
 * gpu_figures_take at each end line → gpu_free.
 *
 * Threads: thread 0 of the team makes every call that changes the state
 * (they are the backend's calls, which are not reentrant); the team reads
 * the queries (gpu_find, gpu_failed, gpu_has_*) after a barrier.
 * Functions take the context and plain values (the model's tensors, the
 * config, host buffers); errors go to the caller's buffer.
 *
 * Prefix: gpu_. Must not: read the environment, know tensor names or the
 * model's layer struct, or print except the startup lines and the failure. */
#ifndef COLI_GPU_H
#define COLI_GPU_H

#include <math.h>

#include "backend_cuda.h"
#include "compat.h"
#include "config.h"
#include "io.h"
#include "kernels.h"
#include "quant.h"
#include "store.h"
#include "tier.h"

_Static_assert((int)CU_I8 == (int)QT_I8 && (int)CU_I4 == (int)QT_I4 && (int)CU_I2 == (int)QT_I2 && (int)CU_I4G == (int)QT_I4G,
               "backend_cuda.h's formats are quant.h's");

/* Counts of where the work ran (thread 0's). */
typedef struct {
    uint64_t dense_gpu, dense_cpu; /* dense matmuls on either side */
    uint64_t attn_gpu, attn_cpu;   /* layer passes of attention on either side (with the GPU on) */
    uint64_t idx_gpu, idx_cpu;     /* indexer passes that scored keys, on either side */
    uint64_t jobs, xjobs;          /* expert computations, of them from GPU memory */
    uint64_t fills;                /* experts copied into the tier during the run */
} gpu_counts;

/* The matrices the GPU holds: dense ones found by the address of the
 * model's qt_tensor (open addressing), and the expert tier: slots of one
 * shape that the store's map (xs_vram_*) assigns to (MoE layer, expert);
 * and what went through it. Callers never write its fields. */
typedef struct {
    int on;                 /* cu_init succeeded (cu_shutdown at gpu_free) */
    cu_info info;
    const qt_tensor **key;
    cu_mat **val;
    int cap, n;             /* the table's size; dense matrices held */
    int left;               /* dense matrices that did not fit */
    int64_t max_cols;       /* the widest input the CPU's quantization scratch takes (mm_ctx) */
    int failed;             /* a GPU call failed: the CPU from then on */
    int64_t calls, fault_at; /* GPU calls so far; testing: the one that fails (0: none) */
    uint64_t bytes;         /* weights and scales uploaded */
    xs_store *xs;           /* the store whose map the tier is (NULL: no tier) */
    cu_mat **xslot;         /* [nxslot][3] the expert tier's gate, up, down per slot */
    int nxslot, nx;         /* slots; of them filled at startup */
    uint8_t *xok;           /* [xs layers] 1: the layer's experts have the slots' shape */
    uint64_t xbytes, xslot_bytes; /* GPU memory of the slots; of one slot */
    uint64_t fill_cap, fill_left; /* bytes a forward may copy into slots; left in this one */
    cu_kv *kv;              /* the latent cache in GPU memory (absorbed attention there), or NULL */
    int nl;                 /* its layers (the MTP layer's included) */
    int64_t *kv_valid;      /* [nl] positions [0, v) of the GPU's cache equal the host's */
    int64_t *ikey_valid;    /* [indexer layers] the same for its copy of the indexer's keys (nf > 0) */
    int nf;                 /* indexer layers whose keys the GPU holds (their scores computed there) */
    uint64_t kv_gen, kv_bytes; /* the host cache's generation those were written under; the caches' size */
    gpu_counts cnt, cnt_last; /* cnt_last and last: at the previous gpu_figures_take */
    cu_stats last;
    char err[300];          /* the failure's message */
} gpu_ctx;

/* ------------------------------------------------------------- queries */

/* Whether a GPU call failed (everything on the CPU since). */
static inline int gpu_failed(const gpu_ctx *g) { return g->failed; }
/* Whether the GPU holds the indexer's keys (its scores computed there). */
static inline int gpu_has_keys(const gpu_ctx *g) { return g->nf > 0; }
/* Whether the latent cache is in GPU memory (absorbed attention there). */
static inline int gpu_has_kv(const gpu_ctx *g) { return g->kv != NULL; }
/* Whether the expert tier has slots. */
static inline int gpu_has_tier(const gpu_ctx *g) { return g->nxslot > 0; }

/* W's first slot in the table of dense matrices. */
static inline uint32_t gpu_slot_(const gpu_ctx *g, const qt_tensor *W) {
    return (uint32_t)(((uintptr_t)W >> 4) * 0x9E3779B1u) & (uint32_t)(g->cap - 1);
}

/* The GPU's copy of W, or NULL (not uploaded, or the GPU failed). */
static inline cu_mat *gpu_find(const gpu_ctx *g, const qt_tensor *W) {
    if (!g->n || g->failed) return NULL;
    for (uint32_t i = gpu_slot_(g, W);; i = (i + 1) & (uint32_t)(g->cap - 1)) {
        if (!g->key[i]) return NULL;
        if (g->key[i] == W) return g->val[i];
    }
}

/* Bytes a matrix's weights and scales take in GPU memory. */
static inline uint64_t gpu_bytes_(const qt_tensor *v) { return qt_weight_bytes(v->fmt, v->O, v->I, v->gs) + 4 * qt_scale_count(v->fmt, v->O, v->I, v->gs); }

/* Whether the GPU computes a matrix of format fmt and I inputs: the
 * integer path, within the CPU's quantization scratch and the int32 sums'
 * limit (so it is bit for bit the CPU's). */
static inline int gpu_takes_(const gpu_ctx *g, qt_fmt fmt, int64_t I) { return fmt != QT_F32 && I <= g->max_cols && I <= MM_IDOT_MAX_I; }

/* ------------------------------------------------------------ counters
 * Work on the GPU is always counted; work on the CPU only while the GPU
 * holds dense matrices (g->n), which is when the end line says where the
 * work ran. Thread 0. */

static inline void gpu_count_dense(gpu_ctx *g, int on_gpu) {
    if (g->n) on_gpu ? g->cnt.dense_gpu++ : g->cnt.dense_cpu++;
}
static inline void gpu_count_attn(gpu_ctx *g, int on_gpu) {
    if (on_gpu) g->cnt.attn_gpu++;
    else if (g->n) g->cnt.attn_cpu++;
}
static inline void gpu_count_index(gpu_ctx *g, int on_gpu) {
    if (on_gpu) g->cnt.idx_gpu++;
    else if (g->n) g->cnt.idx_cpu++;
}
/* An expert computation, from the tier's memory or on the CPU. */
static inline void gpu_count_job(gpu_ctx *g, int on_gpu) {
    if (on_gpu) g->cnt.jobs++, g->cnt.xjobs++;
    else if (g->n) g->cnt.jobs++;
}

/* ------------------------------------------------------------- failure */

/* A GPU call failed (g->err says why): said once; the CPU computes
 * everything from now on, and the store forgets the tier's map, so the
 * experts only the tier held are read like any other. */
static inline void gpu_fail_(gpu_ctx *g) {
    if (g->failed) return;
    fprintf(stderr, "colibri: %s; the CPU computes everything from here on\n", g->err);
    g->failed = 1;
    if (g->xs) xs_vram_close(g->xs);
}

/* Counts a GPU call (a matmul, an attention pass or an expert copy): 0, or
 * -1 for the one COLI_CUDA_FAULT names, with g->err as a CUDA error would
 * set it. */
static inline int gpu_call_(gpu_ctx *g) {
    if (++g->calls != g->fault_at) return 0;
    snprintf(g->err, sizeof g->err, "CUDA: call %lld failed (COLI_CUDA_FAULT)", (long long)g->calls);
    return -1;
}

/* --------------------------------------------------------------- setup */

/* Opens GPU `device` for the engine. cuda: -1 auto, 0 off, 1 required;
 * fault_at: testing, the Nth GPU call fails (0: never); idot: the CPU's
 * integer path is on, the only one the GPU computes. 1 when the GPU takes
 * matrices (gpu_dense_begin next); 0 when everything stays on the CPU (off;
 * with auto, no GPU or driver, said once; IDOT=0, said); -1 with err for
 * CUDA=1 without a usable GPU. */
static inline int gpu_open(gpu_ctx *g, int cuda, int device, int64_t fault_at, int idot, char *err, size_t n) {
    if (!cuda) return 0;
    char why[300];
    if (cu_init(device, &g->info, why, sizeof why)) {
        if (cuda == 1) return snprintf(err, n, "CUDA=1: %s", why), -1;
#ifdef COLI_HAVE_CUDA
        fprintf(stderr, "colibri: CUDA: %s; running on the CPU\n", why);
#endif
        return 0;
    }
    g->on = 1, g->fault_at = fault_at;
    if (!idot) {
        fprintf(stderr, "colibri: CUDA: %s is open but IDOT=0: the GPU computes only the integer path, so every matmul stays on the CPU\n", g->info.name);
        return 0;
    }
    return 1;
}

/* The table for up to n dense matrices; max_cols as mm_ctx's (the widest
 * input the CPU quantizes, which the GPU's activations come from). 0, or
 * -1 out of memory. */
static inline int gpu_dense_begin(gpu_ctx *g, int n, int64_t max_cols) {
    g->cap = 16;
    while (g->cap < 2 * n) g->cap *= 2;
    g->max_cols = max_cols;
    g->key = (const qt_tensor **)calloc((size_t)g->cap, sizeof *g->key);
    g->val = (cu_mat **)calloc((size_t)g->cap, sizeof *g->val);
    return g->key && g->val ? 0 : -1;
}

/* GPU memory the uploads may still take: what was free at gpu_open less a
 * 1 GiB reserve and what went up. */
static inline uint64_t gpu_room_(const gpu_ctx *g) {
    uint64_t room = g->info.mem_free > ((uint64_t)1 << 30) ? g->info.mem_free - ((uint64_t)1 << 30) : 0;
    return room > g->bytes ? room - g->bytes : 0;
}

/* Offers dense matrix W (in the model's order, at most gpu_dense_begin's
 * n): uploaded when the GPU computes it (gpu_takes_) and it fits beside
 * the reserve; one that does not fit is counted for the startup line. The
 * caller leaves out what is looked up rather than multiplied (the
 * embedding). */
static inline void gpu_dense_add(gpu_ctx *g, const qt_tensor *W) {
    if (!gpu_takes_(g, W->fmt, W->I)) return;
    char err[300];
    uint64_t need = gpu_bytes_(W);
    cu_mat *d = need <= gpu_room_(g) ? cu_mat_upload((int)W->fmt, W->O, W->I, W->gs, (int64_t)qt_row_bytes(W), W->w, W->s, err, sizeof err) : NULL;
    if (!d) {
        g->left++;
        return;
    }
    g->bytes += need;
    uint32_t k = gpu_slot_(g, W);
    while (g->key[k]) k = (k + 1) & (uint32_t)(g->cap - 1);
    g->key[k] = W, g->val[k] = d, g->n++;
}

/* The latent cache in GPU memory for nl attention layers of ctx positions
 * (shape from c; gen: the host cache's generation now) when wanted
 * (CUDA_ATTN; -1: the host cache is in fewer bits, which the GPU does not
 * read), the GPU holds some layer's kv_b (held) and the cache fits in what
 * is left; the indexer's keys beside it when they are f32 (keys_f32) and
 * fit too. Returns where attention runs, for the startup line. */
static inline const char *gpu_kv_setup_(gpu_ctx *g, const coli_config *c, int nl, int ctx, uint64_t gen, int held, int want, int keys_f32) {
    if (!held) return "attention, norms and the router on the CPU";
    if (!want) return "attention (CUDA_ATTN=0), norms and the router on the CPU";
    if (want < 0) return "attention (the KV cache in fewer bits, KV_BITS), norms and the router on the CPU";
    char err[300];
    uint64_t room = gpu_room_(g);
    int nf = 0;
    for (int l = 0; l < nl; l++) nf += c->idx_full[l] != 0;
    const int has_keys = nf > 0;
    uint64_t lat = (uint64_t)ctx * (uint64_t)nl * (uint64_t)(c->kv_lora + c->qk_rope) * 4, keys = 0;
    if (nf && keys_f32 && c->index_dim <= 4096) keys = (uint64_t)ctx * (uint64_t)nf * (uint64_t)c->index_dim * 4;
    if (!keys || lat + keys > room) nf = 0, keys = 0; /* keys that do not fit leave the indexer's scores on the CPU, not attention */
    if (lat > room || !(g->kv_valid = (int64_t *)calloc((size_t)nl, sizeof *g->kv_valid)) ||
        !(g->ikey_valid = (int64_t *)calloc((size_t)nl + 1, sizeof *g->ikey_valid)))
        g->kv = NULL;
    else if (!(g->kv = cu_kv_alloc(nl, ctx, c->kv_lora, c->qk_rope, nf, nf ? c->index_dim : 0, err, sizeof err)) && nf)
        nf = 0, keys = 0, g->kv = cu_kv_alloc(nl, ctx, c->kv_lora, c->qk_rope, 0, 0, err, sizeof err);
    if (!g->kv) {
        free(g->kv_valid), free(g->ikey_valid), g->kv_valid = g->ikey_valid = NULL;
        return "the latent cache did not fit: attention, norms and the router on the CPU";
    }
    g->nl = nl, g->kv_bytes = lat + keys, g->kv_gen = gen, g->nf = nf;
    static char line[160];
    snprintf(line, sizeof line, "attention%s and %s (%.2f GB) too%s; norms and the router on the CPU", nf ? ", the indexer's scores" : "",
             nf ? "their caches" : "its latent cache", g->kv_bytes / 1e9, has_keys && !nf ? keys_f32 ? " (the indexer's keys did not fit: its scores on the CPU)" : " (the indexer's keys in fewer bits, KV_INDEX_BITS: its scores on the CPU)" : "");
    return line;
}

/* Ends the dense setup: the latent cache (gpu_kv_setup_'s arguments), the
 * backend's counts from here on, and the startup line saying what the GPU
 * holds. */
static inline void gpu_kv_open(gpu_ctx *g, const coli_config *c, int nl, int ctx, uint64_t gen, int held, int want, int keys_f32) {
    const char *attn = gpu_kv_setup_(g, c, nl, ctx, gen, held, want, keys_f32);
    cu_stats_get(&g->last);
    fprintf(stderr, "colibri: CUDA: %s (compute %d.%d, %.1f GB): %d dense matrices (%.2f GB) in GPU memory%s; %s\n", g->info.name, g->info.cc_major,
            g->info.cc_minor, g->info.mem_total / 1e9, g->n, g->bytes / 1e9, g->left ? ", the rest did not fit" : "", attn);
}

/* ----------------------------------------------------- the expert tier */

/* Copies expert e of MoE layer k (views v, in host memory) into slot s,
 * which the store then maps to it. 0, or -1 after a GPU failure. */
static inline int gpu_fill_(gpu_ctx *g, int s, int k, int e, const qt_tensor *v) {
    xs_vram_place(g->xs, s, k, -1); /* half-filled: nobody's */
    for (int t = 0; t < 3; t++)
        if (gpu_call_(g) || cu_mat_fill(g->xslot[(size_t)s * 3 + t], v[t].w, v[t].s, g->err, sizeof g->err)) return gpu_fail_(g), -1;
    xs_vram_place(g->xs, s, k, e);
    return 0;
}

/* Opens the expert tier of store x: slots of the first MoE layer's expert
 * shape the GPU computes (layers of another shape stay off it) within
 * expert_gb GB (< 0: what is free after the dense matrices and the latent
 * cache, less 1 GiB; 0: no tier), filled with the most used experts of the
 * usage history hist ([n_layers][n_experts] rows of config c, or NULL;
 * tier_pick_hot) read from disk. fill_mb: the most MB a forward copies in
 * later (gpu_admit). Runs before pinning, which skips what the tier holds.
 * 0, or -1 with err (out of memory, a read error, the store's map). */
static inline int gpu_experts(gpu_ctx *g, xs_store *x, const coli_config *c, const uint64_t *hist, double expert_gb, double fill_mb, char *err,
                              size_t errlen) {
    int L = x->n_layers, E = x->n_experts, ref = -1;
    if (!g->key || g->failed || !expert_gb || !L) return 0;
    if (!(g->xok = (uint8_t *)calloc((size_t)L, 1))) return snprintf(err, errlen, "out of memory"), -1;
    for (int k = 0; k < L; k++) {
        const xs_layout *l = xs_layout_of(x, k), *r = ref >= 0 ? xs_layout_of(x, ref) : l;
        int ok = 1;
        for (int t = 0; t < 3; t++)
            ok &= gpu_takes_(g, l->fmt[t], l->I[t]) && l->fmt[t] == r->fmt[t] && l->O[t] == r->O[t] && l->I[t] == r->I[t] && l->gs[t] == r->gs[t];
        ok &= l->fmt[XS_GATE] == l->fmt[XS_UP] && l->gs[XS_GATE] == l->gs[XS_UP]; /* one quantization of the rows serves both */
        if (ok && ref < 0) ref = k;
        g->xok[k] = (uint8_t)ok;
    }
    if (ref < 0) return 0;
    const xs_layout *rl = xs_layout_of(x, ref);
    qt_tensor shape[3];
    for (int t = 0; t < 3; t++) {
        shape[t] = (qt_tensor){rl->fmt[t], rl->O[t], rl->I[t], NULL, NULL, rl->gs[t]};
        g->xslot_bytes += gpu_bytes_(&shape[t]);
    }
    uint64_t reserve = (uint64_t)1 << 30, taken = g->bytes + g->kv_bytes + reserve; /* dense matrices, the latent cache */
    uint64_t free_now = g->info.mem_free > taken ? g->info.mem_free - taken : 0;
    uint64_t budget = expert_gb > 0 ? (uint64_t)(expert_gb * 1e9) : free_now;
    if (budget > free_now) budget = free_now;
    int nok = 0;
    for (int k = 0; k < L; k++) nok += g->xok[k];
    uint64_t want = budget / g->xslot_bytes;
    int n = want < (uint64_t)nok * E ? (int)want : nok * E;
    if (!n) return 0;
    if (!(g->xslot = (cu_mat **)calloc((size_t)n * 3, sizeof *g->xslot))) return snprintf(err, errlen, "out of memory"), -1;
    char why[300];
    uint64_t free0 = cu_mem_free();
    for (g->nxslot = 0; g->nxslot < n; g->nxslot++) { /* as many as the device gives */
        uint64_t now = cu_mem_free(), used = free0 >= now ? free0 - now : 0;
        if (used + g->xslot_bytes > budget) break; /* what the driver's allocator takes (large blocks in 2 MiB pages), not what the slots hold */
        cu_mat **d = g->xslot + (size_t)g->nxslot * 3;
        int t = 0;
        while (t < 3 && (d[t] = cu_mat_alloc((int)shape[t].fmt, shape[t].O, shape[t].I, shape[t].gs, (int64_t)qt_row_bytes(&shape[t]), why, sizeof why))) t++;
        if (t < 3) {
            for (int i = 0; i < t; i++) cu_mat_free(d[i]), d[i] = NULL;
            break;
        }
    }
    g->xbytes = (uint64_t)g->nxslot * g->xslot_bytes;
    g->fill_cap = (uint64_t)(fill_mb * 1e6);
    if (!g->nxslot) return 0;
    if (xs_vram_open(x, g->nxslot)) return snprintf(err, errlen, "%s", x->err), -1;
    g->xs = x;
    uint64_t *counts = (uint64_t *)calloc((size_t)L * E + 1, 8), *bytes = (uint64_t *)calloc((size_t)L + 1, 8);
    uint8_t *sel = (uint8_t *)malloc((size_t)L * E + 1);
    tier_rank *order = (tier_rank *)malloc(((size_t)L * E + 1) * sizeof *order);
    uint8_t *buf = (uint8_t *)compat_aligned_alloc(IO_ALIGN, xs_max_expert_bytes(x) + IO_SLACK);
    int rc = 0;
    if (!counts || !bytes || !sel || !order || !buf) rc = -1, snprintf(err, errlen, "out of memory");
    else if (hist) {
        usage_to_moe(c, hist, counts);
        for (int k = 0; k < L; k++) bytes[k] = g->xok[k] ? g->xslot_bytes : 0;
        tier_pick_hot(counts, L, E, bytes, g->xbytes, sel, order);
        for (int at = 0; at < L * E && !rc && !g->failed; at++) {
            if (!sel[at]) continue;
            qt_tensor v[3];
            uint64_t b;
            if (xs_read_sync(x, at / E, at % E, buf, 0, v, &b, err, errlen)) rc = -1;
            else if (!gpu_fill_(g, g->nx, at / E, at % E, v)) g->nx++;
        }
    }
    free(counts), free(bytes), free(sel), free(order), compat_aligned_free(buf);
    cu_stats_get(&g->last); /* the end line's copies are the run's, not the start's */
    if (rc || g->failed) return rc;
    fprintf(stderr, "colibri: CUDA: an expert tier of %d slots (%.2f GB) in GPU memory, %d of them filled with the most used experts; experts move in as they get hot",
            g->nxslot, g->xbytes / 1e9, g->nx);
    if (g->fill_cap) fprintf(stderr, " (at most %.0f MB a forward)\n", g->fill_cap / 1e6);
    else fprintf(stderr, " (no: CUDA_FILL_MB=0)\n");
    return 0;
}

/* At the start of every forward: the copy budget of gpu_admit refills. */
static inline void gpu_forward_begin(gpu_ctx *g) { g->fill_left = g->fill_cap; }

/* Thread 0, after expert e of MoE layer k ran on the CPU from views v
 * (before the store's xs_done, while v is valid): copies it into the tier
 * when the store's policy admits it (xs_vram_victim) and this forward's
 * copy budget allows. */
static inline void gpu_admit(gpu_ctx *g, int k, int e, const qt_tensor *v) {
    if (!g->nxslot || g->failed || !g->xok[k] || g->fill_left < g->xslot_bytes) return;
    int s = xs_vram_victim(g->xs, k, e);
    if (s < 0 || gpu_fill_(g, s, k, e, v)) return;
    g->fill_left -= g->xslot_bytes;
    g->cnt.fills++;
}

/* ------------------------------------------------------------- compute */

/* Thread 0: y[i] = x·W[i]ᵀ for nw ≤ CU_MAX_GROUP matrices of one input
 * width, format and group size (one quantization of x serves them all),
 * which the GPU holds as d[i]. The activations are quantized with mm's
 * scratch as the CPU's integer path does, in chunks of its rows, one round
 * trip per chunk. 0, or -1 after a failure (said once; the caller computes
 * y on the CPU). */
static inline int gpu_matmul(gpu_ctx *g, mm_ctx *mm, const cu_mat *const *d, const qt_tensor *const *W, int nw, const float *x, int S, float *const *y) {
    const qt_tensor *W0 = W[0];
    for (int s0 = 0; s0 < S; s0 += mm->max_rows) {
        int n = S - s0 < mm->max_rows ? S - s0 : mm->max_rows;
        for (int r = 0; r < n; r++)
            mm_act_quant(x + (size_t)(s0 + r) * W0->I, W0->I, W0->fmt, W0->gs, 0, mm->qx + (size_t)r * mm->ldq, mm->xs + r, mm->xg);
        if (gpu_call_(g)) return gpu_fail_(g), -1; /* COLI_CUDA_FAULT: testing the fallback */
        float *ys[CU_MAX_GROUP];
        for (int i = 0; i < nw; i++) ys[i] = y[i] + (size_t)s0 * W[i]->O;
        if (cu_mats_idot(d, nw, mm->qx, mm->ldq, mm->xs, n, ys, g->err, sizeof g->err)) return gpu_fail_(g), -1;
    }
    return 0;
}

/* Thread 0: ne ≤ CU_MAX_EXPERTS experts of one MoE layer (layout l) in one
 * round trip (cu_experts_rows: gate and up, SwiGLU, down): entry i is the
 * expert in tier slot slot[i] on rows [r0[i], r0[i] + nr[i]) of xs[R][I],
 * its output rows to ys + r0[i]·O. The rows are quantized once with mm's
 * scratch, as the CPU's integer path does. 0, or -1 after a failure (said
 * once; the caller requeues the jobs for the CPU). */
static inline int gpu_expert_rows(gpu_ctx *g, mm_ctx *mm, const xs_layout *l, const float *xs, int R, const int *slot, const int *r0, const int *nr,
                                  int ne, float *ys) {
    int64_t I = l->I[XS_GATE];
    for (int r = 0; r < R; r++) mm_act_quant(xs + (size_t)r * I, I, l->fmt[XS_GATE], l->gs[XS_GATE], 0, mm->qx + (size_t)r * mm->ldq, mm->xs + r, mm->xg);
    if (gpu_call_(g)) return gpu_fail_(g), -1; /* COLI_CUDA_FAULT: testing the fallback */
    const cu_mat *gt[CU_MAX_EXPERTS], *up[CU_MAX_EXPERTS], *dn[CU_MAX_EXPERTS];
    float *y[CU_MAX_EXPERTS];
    for (int i = 0; i < ne; i++) {
        cu_mat *const *s = g->xslot + (size_t)slot[i] * 3;
        gt[i] = s[XS_GATE], up[i] = s[XS_UP], dn[i] = s[XS_DOWN];
        y[i] = ys + (size_t)r0[i] * l->O[XS_DOWN];
    }
    if (cu_experts_rows(gt, up, dn, ne, mm->qx, mm->ldq, mm->xs, R, r0, nr, y, g->err, sizeof g->err)) return gpu_fail_(g), -1;
    return 0;
}

/* The GPU's caches hold nothing known equal to the host's once the host's
 * rows were replaced other than by a forward (a KV file or kept
 * conversation loaded: its generation gen moved on). */
static inline void gpu_kv_fresh_(gpu_ctx *g, uint64_t gen) {
    if (!g->kv || g->kv_gen == gen) return;
    memset(g->kv_valid, 0, (size_t)g->nl * sizeof *g->kv_valid);
    memset(g->ikey_valid, 0, (size_t)g->nf * sizeof *g->ikey_valid);
    g->kv_gen = gen;
}

/* Thread 0, at every pass that writes the host's latent rows of layer l
 * from pos on (host cache generation gen): the GPU's copy is known equal
 * below pos at most. Needs the latent cache (gpu_has_kv). */
static inline void gpu_kv_written(gpu_ctx *g, int l, int pos, uint64_t gen) {
    gpu_kv_fresh_(g, gen);
    if (g->kv_valid[l] > pos) g->kv_valid[l] = pos;
}

/* The same for the keys of indexer layer f (gpu_has_keys). */
static inline void gpu_keys_written(gpu_ctx *g, int f, int pos, uint64_t gen) {
    gpu_kv_fresh_(g, gen);
    if (g->ikey_valid[f] > pos) g->ikey_valid[f] = pos;
}

/* Thread 0: the indexer scores of rows [r, r + n) of a pass of S rows at
 * pos of indexer layer f (shape from c) on the GPU into out[0..n), from
 * their roped queries qi[n][heads][dim] and scaled weights iw[n][heads],
 * after the host's keys keys[ctx][dim] of the layer that the GPU lacks
 * went up (gpu_keys_written done). 1, or 0 when the CPU must score (after
 * a failure: said once). */
static inline int gpu_index_scores(gpu_ctx *g, const coli_config *c, int f, const float *keys, int S, int pos, int r, int n, const float *qi,
                                   const float *iw, float *const *out) {
    int ih = c->index_heads, id = c->index_dim;
    if (g->failed) return 0;
    int64_t from = g->ikey_valid[f];
    if (gpu_call_(g) || cu_kv_write_keys(g->kv, f, from, pos + S - from, keys + (size_t)from * id, g->err, sizeof g->err) ||
        cu_index_scores(g->kv, f, qi, iw, n, pos + r, ih, 1.0f / sqrtf((float)id), out, g->err, sizeof g->err)) {
        gpu_fail_(g);
        return 0;
    }
    g->ikey_valid[f] = pos + S;
    return 1;
}

/* Thread 0, an absorbed attention pass of layer l (shape from c; rows
 * [0, S) at pos, their latents already in the host's cache lat[ctx][kv_lora]
 * and rope[ctx][qk_rope] of the layer, gpu_kv_written done): when the GPU
 * holds the layer's kv_b, the attention on the GPU (cu_mla) into
 * attn[S][H][v_head] from the roped queries q and the kept keys (nsel,
 * sel), after the cache rows the GPU lacks went up. 1 when attn is
 * complete; 0 when the CPU computes it (after a failure: said once).
 * Counts the pass on its side. */
static inline int gpu_attention(gpu_ctx *g, const coli_config *c, int l, const qt_tensor *kv_b, const float *lat, const float *rope, int S, int pos,
                                const float *q, const int *nsel, const int *sel, float *attn) {
    int64_t from = g->kv_valid[l];
    cu_mat *kvb = !g->failed ? gpu_find(g, kv_b) : NULL;
    if (!kvb) {
        gpu_count_attn(g, 0);
        return 0;
    }
    cu_mla_shape sh = {c->n_heads, c->qk_nope, c->qk_rope, c->v_head, c->kv_lora, c->index_topk, c->attn_scale};
    if (gpu_call_(g) || cu_kv_write(g->kv, l, from, pos + S - from, lat + (size_t)from * c->kv_lora, rope + (size_t)from * c->qk_rope, g->err, sizeof g->err) ||
        cu_mla(g->kv, l, kvb, &sh, q, S, pos, nsel, sel, attn, g->err, sizeof g->err)) {
        gpu_fail_(g);
        gpu_count_attn(g, 0);
        return 0;
    }
    g->kv_valid[l] = pos + S;
    gpu_count_attn(g, 1);
    return 1;
}

/* ------------------------------------------------------------- figures */

/* What went through the GPU between two end lines. */
typedef struct {
    uint64_t calls, mats;        /* the backend's round trips; matrices multiplied */
    gpu_counts n;                /* where the work ran */
    double seconds;              /* in GPU calls */
    uint64_t up, down;           /* bytes to the GPU (activations and cache rows), from it */
    uint64_t fill_bytes;         /* bytes copied into the tier */
    int failed, tier;            /* a GPU call failed; the tier has slots */
} gpu_figures;

/* The figures since the previous call (or the end of setup) into *f, and
 * the next call's start. 0 and nothing written when the GPU holds no
 * dense matrix (no GPU figures to print). */
static inline int gpu_figures_take(gpu_ctx *g, gpu_figures *f) {
    if (!g->n) return 0;
    cu_stats s;
    cu_stats_get(&s);
    const gpu_counts *a = &g->cnt, *b = &g->cnt_last;
    f->calls = s.calls - g->last.calls, f->mats = s.mats - g->last.mats;
    f->n = (gpu_counts){a->dense_gpu - b->dense_gpu, a->dense_cpu - b->dense_cpu, a->attn_gpu - b->attn_gpu, a->attn_cpu - b->attn_cpu,
                        a->idx_gpu - b->idx_gpu,     a->idx_cpu - b->idx_cpu,     a->jobs - b->jobs,         a->xjobs - b->xjobs,
                        a->fills - b->fills};
    f->seconds = s.seconds - g->last.seconds;
    f->up = s.bytes_in - g->last.bytes_in + s.kv_bytes - g->last.kv_bytes;
    f->down = s.bytes_out - g->last.bytes_out;
    f->fill_bytes = s.fill_bytes - g->last.fill_bytes;
    f->failed = g->failed, f->tier = g->nxslot > 0;
    g->last = s, g->cnt_last = g->cnt;
    return 1;
}

/* ------------------------------------------------------------ teardown */

/* Frees what the GPU holds and releases the device; g is zeroed (a later
 * gpu_open may follow). The store's map is the store's to free. */
static inline void gpu_free(gpu_ctx *g) {
    for (int i = 0; g->val && i < g->cap; i++) cu_mat_free(g->val[i]);
    for (size_t i = 0; g->xslot && i < (size_t)g->nxslot * 3; i++) cu_mat_free(g->xslot[i]);
    cu_kv_free(g->kv);
    free(g->key), free(g->val), free(g->xslot), free(g->xok), free(g->kv_valid), free(g->ikey_valid);
    if (g->on) cu_shutdown();
    memset(g, 0, sizeof *g);
}

#endif
