/* fuzz_config.c — coli_config_load (config.h) on a hostile config.json
 * (and generation_config.json), then the sizing passes of model.h.
 *
 * Input: config.json [FUZZ_SEP generation_config.json], written into a
 * per-process scratch directory (the second file only when present).
 *
 * On an accepted config: every field within the bounds config.h promises,
 * the per-layer kinds 0/1 with layer 0 running its own indexer, the eos
 * ids distinct and below vocab_size, moe_index / moe_layer inverse of each
 * other. Then kv_layout and scratch_layout with base = NULL (they only add
 * up byte counts; nothing is allocated in proportion to the config) over
 * the contexts, batch sizes, thread counts and pilot_k values the
 * environment allows (env.h: CTX 16..1048576, UBATCH 1..65536, THREADS up
 * to 4096, PILOT_K up to 1024): the sizes must not wrap around (each is at
 * least its largest single array, computed exactly in 128 bits) and must
 * grow with the context. coli_config_free is always called (callers do,
 * after a failure too). */
#include "config.h"
#include "model.h"

#include "fuzz_common.h"

__extension__ typedef unsigned __int128 u128;

/* Bytes of the largest arrays kv_layout carves, exactly. */
static u128 fz_kv_floor(const coli_config *c, int ctx) {
    u128 L = (u128)c->n_layers, x = (u128)ctx;
    u128 a = L * x * (u128)c->kv_lora * 4, b = L * x * (u128)c->qk_rope * 4;
    return a > b ? a : b;
}

/* Bytes of a few of the largest arrays scratch_layout carves, exactly. */
static u128 fz_scratch_floor(const coli_config *c, int S, int ctx, int nt, int pk) {
    u128 s = (u128)S, m = 0, v[8];
    v[0] = s * (u128)c->n_heads * (u128)c->qk_head * 4;            /* q    */
    v[1] = (u128)c->n_heads * s * (u128)c->kv_lora * 4;             /* hlat */
    v[2] = s * (u128)c->topk * (u128)c->dim * 4;                    /* yk   */
    v[3] = s * (u128)c->index_topk * 4;                             /* sel  */
    v[4] = (u128)ctx * ((u128)c->qk_nope + (u128)c->v_head) * 4;   /* hkv  */
    v[5] = (u128)nt * (2 * (u128)ctx + (u128)c->kv_lora + 16) * 4;  /* thr  */
    v[6] = s * (u128)(pk > 0 ? pk : 1) * 4;                         /* pred */
    v[7] = (u128)c->vocab * 4;                                      /* logits */
    for (int i = 0; i < 8; i++)
        if (v[i] > m) m = v[i];
    return m;
}

static void fz_check_config(const coli_config *c) {
    FUZZ_CHECK(c->vocab >= 1 && c->vocab <= (1 << 24) && c->dim >= 1 && c->dim <= (1 << 20));
    FUZZ_CHECK(c->n_layers >= 1 && c->n_layers <= 1024 && c->n_heads >= 1 && c->n_heads <= 1024);
    FUZZ_CHECK(c->qk_rope >= 2 && c->qk_rope % 2 == 0 && c->qk_head == c->qk_nope + c->qk_rope);
    FUZZ_CHECK(c->topk >= 1 && c->topk <= c->n_experts && c->n_experts % c->n_group == 0 && c->topk_group <= c->n_group);
    /* an indexer (glm_moe_dsa, deepseek_v32) has its dimensions and runs on layer 0; without one (deepseek_v3) none is read */
    FUZZ_CHECK(c->has_indexer == (c->arch != ARCH_DEEPSEEK_V3) && c->max_pos >= 1);
    FUZZ_CHECK(c->index_rope_interleave == (c->arch == ARCH_GLM_MOE_DSA));
    FUZZ_CHECK(c->has_indexer ? c->index_dim >= c->qk_rope && c->index_topk >= 1 : !c->index_dim && !c->index_heads && !c->index_topk);
    FUZZ_CHECK(c->n_mtp >= 0 && c->n_mtp <= 16);
    FUZZ_CHECK(c->rms_eps > 0 && c->rope_theta >= 1 && c->route_scale >= 0);
    FUZZ_CHECK(isfinite(c->attn_scale) && c->attn_scale > 0 && c->rope_attn_factor > 0 && isfinite(c->rope_attn_factor));
    FUZZ_CHECK(!c->rope_yarn || (c->rope_factor > 0 && c->rope_orig_max >= 1 && c->rope_beta_fast > 0 && c->rope_beta_slow > 0));
    FUZZ_CHECK(c->rope_interleave || c->arch == ARCH_DEEPSEEK_V3);
    FUZZ_CHECK(c->moe && c->idx_full && c->idx_full[0] == c->has_indexer);
    for (int l = 0; l < c->n_layers; l++)
        FUZZ_CHECK(c->moe[l] <= 1 && c->idx_full[l] <= (c->has_indexer ? 1 : 0) && (c->arch != ARCH_DEEPSEEK_V32 || c->idx_full[l]));
    FUZZ_CHECK(c->n_eos >= 0 && c->n_eos <= MAX_EOS);
    for (int i = 0; i < c->n_eos; i++) {
        FUZZ_CHECK(c->eos[i] >= 0 && c->eos[i] < c->vocab);
        for (int j = 0; j < i; j++) FUZZ_CHECK(c->eos[i] != c->eos[j]);
    }
    FUZZ_CHECK(c->gen_temp >= 0 && c->gen_temp <= 100 && c->gen_top_p >= 0 && c->gen_top_p <= 1);
    FUZZ_CHECK(c->gen_min_p >= 0 && c->gen_min_p <= 1 && c->gen_top_k >= 0);
    int nm = n_moe_layers(c);
    FUZZ_CHECK(nm >= 0 && nm <= c->n_layers);
    for (int k = 0; k < nm; k++) {
        int l = moe_layer(c, k);
        FUZZ_CHECK(l >= 0 && c->moe[l] && moe_index(c, l) == k);
    }
    FUZZ_CHECK(moe_layer(c, nm) == -1);
}

static void fz_sizes(const coli_config *c) {
    const int ctxs[] = {16, 4096, 1048576};
    const int batches[] = {1, 512, 65536};
    const int threads[] = {1, 4096};
    const int pks[] = {0, 1024};
    size_t prev_kv = 0;
    for (size_t i = 0; i < sizeof ctxs / sizeof *ctxs; i++) {
        int ctx = ctxs[i] < c->max_pos ? ctxs[i] : c->max_pos; /* model_ctx */
        coli_kv kv;
        memset(&kv, 0xa5, sizeof kv);
        size_t kb = kv_layout(c, c->n_layers, ctx, 1, 32, 32, &kv, NULL);
        FUZZ_CHECK(kv.lat == NULL && kv.rope == NULL && kv.ikey == NULL && kv.full_slot == NULL);
        FUZZ_CHECK((u128)kb >= fz_kv_floor(c, ctx) && kb % 64 == 0 && kb >= prev_kv);
        prev_kv = kb;
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++)
            for (size_t t = 0; t < sizeof threads / sizeof *threads; t++)
                for (size_t p = 0; p < sizeof pks / sizeof *pks; p++) {
                    coli_scratch sc;
                    memset(&sc, 0, sizeof sc);
                    size_t sb = scratch_layout(c, batches[b], ctx, threads[t], pks[p], &sc, NULL);
                    FUZZ_CHECK(sc.x == NULL && sc.thr == NULL && sc.max_s == batches[b]);
                    FUZZ_CHECK((u128)sb >= fz_scratch_floor(c, batches[b], ctx, threads[t], pks[p]) && sb % 64 == 0);
                }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_parts pp;
    fuzz_split(data, size, 2, &pp);
    const char *dir = fuzz_dir();
    fuzz_write("config.json", pp.p[0], pp.n[0]);
    if (pp.count > 1) fuzz_write("generation_config.json", pp.p[1], pp.n[1]);
    coli_config c;
    char err[512];
    memset(err, 'x', sizeof err);
    int rc = coli_config_load(&c, dir, err, sizeof err);
    if (rc) {
        FUZZ_CHECK(rc == -1 && fuzz_terminated(err, sizeof err) && err[0]);
    } else {
        fz_check_config(&c);
        fz_sizes(&c);
    }
    coli_config_free(&c);
    FUZZ_CHECK(c.moe == NULL && c.idx_full == NULL);
    return 0;
}
