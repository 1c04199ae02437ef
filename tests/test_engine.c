/* test_engine.c — the engine compiled in (COLI_NO_MAIN): evaluation paths
 * agree (batch vs one token at a time, absorbed vs reconstructed), expert
 * placement and thread count never change a bit of the logits, the
 * indexer's top-k and the router's choice follow their rules, config errors
 * are refused by name, and a shard truncated under a running engine gives a
 * clear error. Runs from the repository root on the committed fixtures. */
#define COLI_NO_MAIN
#include "../colibri.c"

#include "check.h"

static const char *FIX5 = "tests/fixtures/tiny-glm5";

static int model_load(coli_model *m, const char *dir, const coli_opts *o, const uint64_t *hist) {
    return model_open(m, dir) || model_setup(m, o, hist) ? -1 : 0;
}

/* Options as the defaults give them, with an explicit cap/ubatch/absorb. */
static coli_opts opts(int cap, int ubatch, int absorb) {
    coli_opts o;
    memset(&o, 0, sizeof o);
    o.cap = cap, o.ctx = 256, o.ubatch = ubatch, o.absorb = absorb;
    o.pin = PIN_OFF, o.pin_gb = -1, o.quiet = 1;
    o.io.mode = IO_SYNC, o.io.workers = 2, o.io.weight[0] = 1;
    return o;
}
static const char *FIX52 = "tests/fixtures/tiny-glm52";

/* Teacher-forced logits of the fixture's prompt followed by its greedy
 * tokens, under the given options. Returns a malloc'd [n][vocab] array. */
static float *run_logits(const char *dir, coli_opts o, int *n_out, int *vocab) {
    static coli_model m;
    coli_ref r;
    if (model_load(&m, dir, &o, NULL)) {
        fprintf(stderr, "load: %s\n", m.err);
        model_free(&m);
        return NULL;
    }
    if (ref_load(&r, dir, m.c.vocab, m.err, sizeof m.err)) {
        fprintf(stderr, "ref: %s\n", m.err);
        model_free(&m);
        return NULL;
    }
    int n = r.np + r.ng;
    int *ids = (int *)malloc((size_t)n * sizeof(int));
    memcpy(ids, r.prompt, (size_t)r.np * sizeof(int));
    memcpy(ids + r.np, r.greedy, (size_t)r.ng * sizeof(int));
    float *all = (float *)malloc((size_t)n * m.c.vocab * 4);
    if (fwd_tokens(&m, ids, n, 0, all)) {
        fprintf(stderr, "forward: %s\n", m.err);
        free(all);
        all = NULL;
    }
    *n_out = n;
    *vocab = m.c.vocab;
    free(ids);
    ref_free(&r);
    model_free(&m);
    return all;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)a[i] - b[i]));
    return mx;
}

static void test_paths_agree(const char *dir) {
    int n, v, n2, v2;
    coli_opts base = opts(0, 512, -1);
    float *ref = run_logits(dir, base, &n, &v);
    CHECK(ref != NULL);
    if (!ref) return;
    struct { const char *what; coli_opts o; } alt[] = {
        {"one token at a time", opts(0, 1, -1)},
        {"batches of 7", opts(0, 7, -1)},
        {"absorbed", opts(0, 512, 1)},
        {"reconstructed", opts(0, 512, 0)},
        {"reconstructed, batches of 5", opts(0, 5, 0)},
    };
    for (size_t i = 0; i < sizeof alt / sizeof alt[0]; i++) {
        float *x = run_logits(dir, alt[i].o, &n2, &v2);
        CHECK(x && n2 == n && v2 == v);
        if (!x) continue;
        double d = max_diff(ref, x, (size_t)n * v);
        printf("  %s: %s vs one batch: max |dlogit| %.2e\n", dir, alt[i].what, d);
        CHECK(d <= 1e-4);
        free(x);
    }
    free(ref);
}

/* Placement and threads must not change a single bit. */
static void test_bit_invariance(const char *dir) {
    int n, v, n2, v2;
    coli_opts base = opts(8, 512, -1);
    float *ref = run_logits(dir, base, &n, &v);
    CHECK(ref != NULL);
    if (!ref) return;
    int threads[] = {1, 2, 3, 5};
    int caps[] = {1, 2, 8};
    for (size_t t = 0; t < 4; t++)
        for (size_t c = 0; c < 3; c++) {
            for (int ub = 1; ub <= 512; ub += 511) { /* one token at a time, and whole batches */
                coli_opts o = opts(caps[c], ub, -1);
                o.threads = threads[t];
                float *x = run_logits(dir, o, &n2, &v2);
                int same = x && n2 == n && !memcmp(x, ref, (size_t)n * v * 4);
                if (ub == 512) CHECK(same);
                else CHECK(x && n2 == n && max_diff(x, ref, (size_t)n * v) <= 1e-4); /* batching may round differently */
                if (!same && ub == 512) fprintf(stderr, "  %s: threads %d cap %d differ\n", dir, threads[t], caps[c]);
                free(x);
            }
        }
    free(ref);
}

static void test_topk_select(void) {
    float score[200], tmp[200];
    int out[200];
    uint32_t seed = 12345;
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + trial % 199, k = 1 + (trial * 7) % n;
        for (int i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            score[i] = (float)((seed >> 8) % 16) - 8.0f; /* many ties */
        }
        CHECK(topk_select(score, n, k, tmp, out) == k);
        /* brute force: rank by (score desc, position asc), take k, sort by position */
        int chosen[200] = {0};
        for (int c = 0; c < k; c++) {
            int best = -1;
            for (int i = 0; i < n; i++)
                if (!chosen[i] && (best < 0 || score[i] > score[best])) best = i;
            chosen[best] = 1;
        }
        int j = 0, ok = 1;
        for (int i = 0; i < n; i++)
            if (chosen[i]) ok &= j < k && out[j++] == i;
        CHECK(ok && j == k);
    }
}

static void test_router(void) {
    coli_config c;
    memset(&c, 0, sizeof c);
    c.n_experts = 12, c.topk = 3, c.n_group = 3, c.topk_group = 2, c.norm_topk = 1, c.route_scale = 2.0f;
    float logit[12], bias[12] = {0}, tmp[64], w[3];
    int ex[3];
    /* logits chosen so sigmoid order is obvious; group sums (top-2):
     * g0 = {0,1,2,3}, g1 = {4..7}, g2 = {8..11}. g1 has the single best
     * expert but g0 and g2 have the better top-2 sums. */
    float l[12] = {1.0f, 0.9f, -3, -3, 3.0f, -5, -5, -5, 0.8f, 0.7f, -3, -3};
    memcpy(logit, l, sizeof l);
    route_row(&c, logit, bias, ex, w, tmp);
    CHECK(ex[0] == 0 && ex[1] == 1 && ex[2] == 8);
    float s = w[0] + w[1] + w[2];
    CHECK(fabsf(s - 2.0f) < 1e-6f);
    /* the bias moves the choice but not the weight */
    bias[9] = 0.5f;
    route_row(&c, logit, bias, ex, w, tmp);
    CHECK(ex[0] == 9 && ex[1] == 0 && ex[2] == 1);
    float p9 = 1.0f / (1.0f + expf(-0.7f)), p0 = 1.0f / (1.0f + expf(-1.0f)), p1 = 1.0f / (1.0f + expf(-0.9f));
    CHECK(fabsf(w[0] - 2.0f * p9 / (p9 + p0 + p1 + 1e-20f)) < 1e-6f);
    /* equal choices go to the lower expert id; no normalization */
    c.n_group = 1, c.topk_group = 1, c.norm_topk = 0, c.route_scale = 1.0f;
    for (int e = 0; e < 12; e++) logit[e] = 0.25f, bias[e] = 0;
    route_row(&c, logit, bias, ex, w, tmp);
    CHECK(ex[0] == 0 && ex[1] == 1 && ex[2] == 2);
    CHECK(fabsf(w[0] - 1.0f / (1.0f + expf(-0.25f))) < 1e-7f);
}

/* ---- config.json refusals ---- */

static char tmpdir[256];

static void write_file(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static char *fixture_config(void) {
    size_t len;
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", FIX5);
    return compat_read_file(p, 1 << 20, &len);
}

/* Writes the fixture's config.json with `from` replaced by `to`, loads it,
 * and expects the error to contain `needle`. */
static void config_refused(const char *from, const char *to, const char *needle) {
    char *cfg = fixture_config(), *at = strstr(cfg, from);
    CHECK(at != NULL);
    if (!at) { free(cfg); return; }
    size_t n = strlen(cfg) + strlen(to) + 1;
    char *out = (char *)malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - cfg), cfg, to, at + strlen(from));
    write_file("config.json", out);
    coli_config c;
    char err[512] = "";
    CHECK(coli_config_load(&c, tmpdir, err, sizeof err) == -1);
    CHECK_HAS(err, "config.json");
    CHECK_HAS(err, needle);
    coli_config_free(&c);
    free(out);
    free(cfg);
}

/* Loads tiny-kimi-k25's config.json with `from` replaced by `to` (the
 * first occurrence; `from` NULL: as is). 0 or -1 as coli_config_load. */
static int k25_load(coli_config *c, const char *from, const char *to, char *err, size_t errlen) {
    size_t len;
    char *cfg = compat_read_file("tests/fixtures/tiny-kimi-k25/config.json", 1 << 20, &len), *at = from && cfg ? strstr(cfg, from) : NULL;
    CHECK(cfg && (!from || at));
    if (!cfg || (from && !at)) { free(cfg); return -2; }
    size_t n = strlen(cfg) + (to ? strlen(to) : 0) + 1;
    char *out = (char *)malloc(n);
    if (at) snprintf(out, n, "%.*s%s%s", (int)(at - cfg), cfg, to, at + strlen(from));
    else snprintf(out, n, "%s", cfg);
    write_file("config.json", out);
    free(out);
    free(cfg);
    return coli_config_load(c, tmpdir, err, errlen);
}

/* kimi_k25 wraps a deepseek_v3 text_config: its fields, the language
 * model's tensor prefix, the top-level tie_word_embeddings (default true in
 * transformers 5.23, whatever text_config says). */
static void test_config_kimi_k25(void) {
    coli_config c;
    char err[512] = "";
    CHECK(k25_load(&c, NULL, NULL, err, sizeof err) == 0);
    CHECK(c.arch == ARCH_DEEPSEEK_V3 && !strcmp(c.model_type, "kimi_k25") && !strcmp(c.wprefix, "language_model."));
    CHECK(c.dim == 64 && c.n_experts == 12 && !c.tie_embed && !c.has_indexer && c.rope_yarn);
    coli_config_free(&c);
    CHECK(k25_load(&c, "  \"tie_word_embeddings\": false,\n  \"video_token_id\"", "  \"video_token_id\"", err, sizeof err) == 0);
    CHECK(c.tie_embed == 1);
    coli_config_free(&c);
    CHECK(k25_load(&c, "\"model_type\": \"deepseek_v3\"", "\"model_type\": \"glm_moe_dsa\"", err, sizeof err) == -1);
    CHECK_HAS(err, "text_config: model_type 'glm_moe_dsa' is not supported here");
    coli_config_free(&c);
    CHECK(k25_load(&c, "\"hidden_size\": 64", "\"hidden_size\": -64", err, sizeof err) == -1);
    CHECK_HAS(err, "text_config: field 'hidden_size'=-64");
    coli_config_free(&c);
    CHECK(k25_load(&c, "\"q_lora_rank\": 40", "\"q_lora_rank\": null", err, sizeof err) == 0); /* Moonlight's one q_proj */
    CHECK(c.q_lora == 0);
    coli_config_free(&c);
    CHECK(k25_load(&c, "\"text_config\"", "\"text_config_\"", err, sizeof err) == -1);
    CHECK_HAS(err, "kimi_k25: missing object 'text_config'");
    coli_config_free(&c);
}

static void test_config(void) {
    coli_config c;
    char err[512] = "";
    char *cfg = fixture_config();
    write_file("config.json", cfg);
    CHECK(coli_config_load(&c, tmpdir, err, sizeof err) == 0);
    CHECK(c.n_layers == 4 && c.moe[0] == 0 && c.moe[1] == 1 && c.n_eos == 2);
    coli_config_free(&c);
    write_file("generation_config.json", "{\"eos_token_id\": [343, 345]}"); /* union: 336, 343, 345 */
    CHECK(coli_config_load(&c, tmpdir, err, sizeof err) == 0 && c.n_eos == 3);
    coli_config_free(&c);
    write_file("generation_config.json", "{\"eos_token_id\": [2, 99999]}");
    CHECK(coli_config_load(&c, tmpdir, err, sizeof err) == -1);
    CHECK_HAS(err, "generation_config.json");
    CHECK_HAS(err, "eos_token_id");
    coli_config_free(&c);
    char p[512];
    snprintf(p, sizeof p, "%s/generation_config.json", tmpdir);
    unlink(p);

    config_refused("\"model_type\": \"glm_moe_dsa\"", "\"model_type\": \"llama\"", "model_type 'llama' is not supported");
    config_refused("\"rope_type\": \"default\"", "\"rope_type\": \"linear\"", "rope_type 'linear' is not supported");
    config_refused("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "missing field 'factor'");
    config_refused("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\", \"factor\": 4, \"truncate\": 1", "truncate must be true or false");
    config_refused("\"model_type\": \"glm_moe_dsa\"", "\"model_type\": \"deepseek_v2\"", "model_type 'deepseek_v2' is not supported");
    config_refused("\"model_type\": \"glm_moe_dsa\"", "\"model_type\": \"deepseek_v32\", \"indexer_rope_interleave\": true",
                   "indexer_rope_interleave=true is not supported (deepseek_v32's indexer rotates halves)");
    config_refused("\"model_type\": \"glm_moe_dsa\"", "\"model_type\": \"deepseek_v32\", \"rope_interleave\": false",
                   "rope_interleave=false is not supported (deepseek_v32 rotates interleaved pairs)");
    config_refused("\"model_type\": \"glm_moe_dsa\"", "\"model_type\": \"deepseek_v3\", \"moe_layer_freq\": 2", "moe_layer_freq");
    config_refused("\"rope_theta\": 1000000.0,", "", "rope_theta");
    config_refused("\"hidden_size\": 64", "\"hidden_size\": -64", "hidden_size");
    config_refused("\"hidden_size\": 64", "\"hidden_size\": 64.5", "hidden_size' must be an integer");
    config_refused("\"hidden_size\": 64,", "", "missing field 'hidden_size'");
    config_refused("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 2", "num_key_value_heads");
    config_refused("\"q_lora_rank\": 48", "\"q_lora_rank\": null", "glm_moe_dsa's indexer reads the query latent: it needs a q_lora_rank");
    config_refused("\"q_lora_rank\": 48,", "", "missing field 'q_lora_rank'");
    config_refused("\"q_lora_rank\": 48", "\"q_lora_rank\": 0", "q_lora_rank'=0 is outside");
    config_refused("\"n_group\": 1", "\"n_group\": 3", "not a multiple of n_group");
    config_refused("\"num_experts_per_tok\": 3", "\"num_experts_per_tok\": 9", "num_experts_per_tok");
    config_refused("\"qk_rope_head_dim\": 8", "\"qk_rope_head_dim\": 7", "must be even");
    config_refused("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act");
    config_refused("\"attention_bias\": false", "\"attention_bias\": true", "attention_bias");
    config_refused("\"norm_topk_prob\": true", "\"norm_topk_prob\": 1", "true or false");
    config_refused("\"indexer_types\": [\n    \"full\",", "\"indexer_types\": [\n    \"shared\",", "layer 0 must run its own indexer");
    config_refused("\"indexer_types\": [\n    \"full\",", "\"indexer_types\": [", "list of 4 strings");
    config_refused("\"mlp_layer_types\": [\n    \"dense\",", "\"mlp_layer_types\": [\n    \"dense2\",", "mlp_layer_types[0]");
    config_refused("\"eos_token_id\": [\n    336,", "\"eos_token_id\": [\n    -1,", "eos_token_id");
    config_refused("\"vocab_size\": 352", "\"vocab_size\": 352, \"vocab_size\": 353", "duplicate key");
    config_refused("{", "[", "not valid JSON");

    /* GLM-5.2's schedule from index_topk_freq 4 / offset 3 over 78 layers:
     * full at 0, 1, 2, 6, 10, ..., 74 (21 layers) */
    char *s = strstr(cfg, "\"indexer_types\"");
    char *e = strchr(s, ']');
    char buf[8192];
    snprintf(buf, sizeof buf, "%.*s\"index_topk_freq\": 4, \"index_skip_topk_offset\": 3%s", (int)(s - cfg), cfg, e + 1);
    char *nl = strstr(buf, "\"num_hidden_layers\": 4");
    memcpy(nl, "\"num_hidden_layers\":78", 22);
    char *ml = strstr(buf, "\"mlp_layer_types\"");
    char *me = strchr(ml, ']');
    memmove(ml, me + 3, strlen(me + 3) + 1); /* drop the list and its ",\n " */
    write_file("config.json", buf);
    CHECK(coli_config_load(&c, tmpdir, err, sizeof err) == 0);
    if (c.idx_full) {
        int nf = 0, ok = c.idx_full[0] && c.idx_full[1] && c.idx_full[2] && !c.idx_full[3] && c.idx_full[6] && c.idx_full[74] && !c.idx_full[75];
        for (int i = 0; i < 78; i++) nf += c.idx_full[i];
        CHECK(ok && nf == 21);
        CHECK(!c.moe[0] && c.moe[1]); /* first_k_dense_replace 1 */
    } else fprintf(stderr, "%s\n", err);
    coli_config_free(&c);
    free(cfg);
}

/* A shard truncated after startup: the expert read fails with a message
 * naming the file, and the engine reports it instead of computing, on
 * every I/O path. */
static void test_truncated_shard(int mode, int mmap) {
    char src[512], dst[512];
    static const char *const files[] = {"config.json", "model.safetensors", "ref.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(src, sizeof src, "%s/%s", FIX5, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", tmpdir, files[i]);
        CHECK(check_copy(src, dst) == 0);
    }
    static coli_model m;
    coli_opts o = opts(1, 512, -1);
    o.io.mode = mode, o.io.mmap = mmap;
    if (mode == IO_URING && !io_have_uring()) {
        SKIP("io_uring", "engine on a truncated shard through io_uring: this build has no liburing");
        return;
    }
    CHECK(model_load(&m, tmpdir, &o, NULL) == 0);
    snprintf(src, sizeof src, "%s/model.safetensors", tmpdir);
    /* keep the header and dense tensors; cut before the first routed expert's data */
    uint64_t cut = UINT64_MAX;
    for (int i = 0; i < m.st.nt; i++)
        if (strstr(m.st.t[i].name, ".mlp.experts.") && m.st.t[i].off < cut) cut = m.st.t[i].off;
    int cut_rc = truncate(src, (off_t)cut + 8);
    if (cut_rc && mmap) { /* Windows refuses to cut a mapped file: nothing to report */
        SKIP("truncate-mapped", "a mapped shard truncated under the engine: truncate: %s (Windows keeps mapped files whole)", strerror(errno));
        model_free(&m);
        CHECK(check_rm_tree(tmpdir) == 0 && mkdir(tmpdir, 0700) == 0);
        return;
    }
    CHECK(cut_rc == 0);
    coli_ref r;
    coli_oracle_result res;
    CHECK(ref_load(&r, tmpdir, m.c.vocab, m.err, sizeof m.err) == 0);
    CHECK(oracle_run(&m, &r, &res) == -1);
    CHECK_HAS(m.err, "model.safetensors");
    CHECK_HAS(m.err, "truncated");
    ref_free(&r);
    model_free(&m);
    CHECK(check_rm_tree(tmpdir) == 0 && mkdir(tmpdir, 0700) == 0); /* emptied for the next path */
}

int main(void) {
    (void)coli_main;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/colibri-test-engine-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_topk_select();
    test_router();
    test_config();
    test_config_kimi_k25();
    test_paths_agree(FIX5);
    test_paths_agree(FIX52);
    test_bit_invariance(FIX5);
    test_bit_invariance(FIX52);
    test_truncated_shard(IO_SYNC, 0);
    test_truncated_shard(IO_POOL, 0);
    test_truncated_shard(IO_URING, 0);
    test_truncated_shard(IO_SYNC, 1);
    if (check_rm_tree(tmpdir)) return 1;
    return check_report("test_engine");
}
