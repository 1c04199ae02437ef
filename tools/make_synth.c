/* make_synth.c — writes a synthetic GLM-5-shaped container (the tensor names
 * and layout of a converted glm_moe_dsa model, random weights) of about a
 * requested size, fast: quantized weights are random packed bytes with
 * scales that keep activations O(1), written straight to the shards. It
 * stands in for the 744B model in tier, I/O and speed tests.
 *
 *   colibri-synth DST [--size-gb G] [--layers L] [--experts E] [--topk K]
 *                 [--hidden D] [--moe-inter I] [--heads H] [--vocab V]
 *                 [--expert-bits 4|8] [--dense-bits 8|32] [--group-size G]
 *                 [--dense-layers N] [--ctx C] [--seed S] [--tokenizer PATH]
 *
 * With --size-gb, the number of experts per layer is chosen so the routed
 * experts take about that much space. Routing is skewed on purpose (a
 * Zipf-like router bias), so some experts are hot, as in real models.
 * Every routed expert's three weights are adjacent in its shard (one pread).
 * Exit codes: 0 ok, 2 bad arguments or I/O error. */
#include "compat.h"
#include "st.h"

#include <math.h>
#include <sys/stat.h>

typedef struct {
    double size_gb;
    int layers, dense_layers, experts, topk, hidden, moe_inter, heads, vocab, ctx;
    int expert_bits, dense_bits, gs;
    uint64_t seed;
    const char *tokenizer, *dst;
} synth_opts;

/* xorshift64*: fast deterministic bytes. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void fill_random(uint8_t *p, size_t n, uint64_t *s) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = rng_next(s);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)rng_next(s);
}

/* Packed bytes and scale count of an [O, I] matrix at `bits` (8, 4, or 4
 * with groups of gs), as the container formats lay them out. */
static uint64_t packed_bytes(int bits, int64_t O, int64_t I) { return bits == 8 ? (uint64_t)O * I : (uint64_t)O * (uint64_t)((I + 1) / 2); }
static uint64_t scale_count(int bits, int gs, int64_t O, int64_t I) { return bits == 4 && gs ? (uint64_t)O * (uint64_t)((I + gs - 1) / gs) : (uint64_t)O; }

typedef struct {
    st_writer w;
    uint64_t seed;
    char err[512];
    uint8_t *buf;
    size_t cap;
} shard;

static int need(shard *s, size_t n) {
    if (n <= s->cap) return 0;
    free(s->buf);
    s->buf = (uint8_t *)malloc(n);
    s->cap = s->buf ? n : 0;
    return s->buf ? 0 : -1;
}

/* Declares a quantized matrix (U8 weights + F32 .qs) or an f32 one. */
static int declare_mat(shard *s, const char *name, int bits, int64_t O, int64_t I) {
    if (bits >= 16) {
        int64_t sh[2] = {O, I};
        return st_writer_add(&s->w, name, ST_F32, 2, sh);
    }
    int64_t nb = (int64_t)packed_bytes(bits, O, I);
    return st_writer_add(&s->w, name, ST_U8, 1, &nb);
}

static int declare_scales(shard *s, const char *name, int bits, int gs, int64_t O, int64_t I) {
    if (bits >= 16) return 0;
    char n[300];
    snprintf(n, sizeof n, "%s.qs", name);
    int64_t ns = (int64_t)scale_count(bits, gs, O, I);
    return st_writer_add(&s->w, n, ST_F32, 1, &ns);
}

/* Writes the bytes of a matrix declared with declare_mat: random packed
 * values, or f32 values ~ U(-1, 1)/sqrt(I). */
static int write_mat(shard *s, int bits, int64_t O, int64_t I) {
    if (bits >= 16) {
        size_t n = (size_t)O * (size_t)I;
        if (need(s, n * 4)) return -1;
        float *f = (float *)s->buf;
        float a = 1.0f / sqrtf((float)I);
        for (size_t i = 0; i < n; i++) f[i] = a * ((float)(rng_next(&s->seed) >> 40) / 8388608.0f - 1.0f);
        return st_writer_data(&s->w, f, n * 4, s->err, sizeof s->err);
    }
    size_t n = (size_t)packed_bytes(bits, O, I);
    if (need(s, n)) return -1;
    fill_random(s->buf, n, &s->seed);
    return st_writer_data(&s->w, s->buf, n, s->err, sizeof s->err);
}

/* Scales that make a random quantized row's dot product with a unit vector
 * O(1): the quantized values are ~uniform in [-q, q], so 1/(q·sqrt(I)). */
static int write_scales(shard *s, int bits, int gs, int64_t O, int64_t I) {
    if (bits >= 16) return 0;
    size_t n = (size_t)scale_count(bits, gs, O, I);
    if (need(s, n * 4)) return -1;
    float *f = (float *)s->buf, q = bits == 8 ? 73.0f : 4.6f;
    for (size_t i = 0; i < n; i++) f[i] = (0.8f + 0.4f * (float)(rng_next(&s->seed) >> 40) / 16777216.0f) / (q * sqrtf((float)I));
    return st_writer_data(&s->w, f, n * 4, s->err, sizeof s->err);
}

/* The router's correction bias: expert of rank r (a random permutation)
 * gets -0.05·ln(1 + r), so routing prefers a few experts, as real traffic
 * does, and pinning from history has something to learn. */
static int write_zipf(shard *s, int64_t n) {
    if (need(s, (size_t)n * 8)) return -1;
    float *f = (float *)s->buf;
    int *perm = (int *)(s->buf + (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) perm[i] = (int)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&s->seed) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < n; i++) f[perm[i]] = -0.05f * logf(1.0f + (float)i);
    return st_writer_data(&s->w, f, (size_t)n * 4, s->err, sizeof s->err);
}

static int write_vec(shard *s, int64_t n, float base, float jitter) {
    if (need(s, (size_t)n * 4)) return -1;
    float *f = (float *)s->buf;
    for (int64_t i = 0; i < n; i++) f[i] = base + jitter * ((float)(rng_next(&s->seed) >> 40) / 8388608.0f - 1.0f);
    return st_writer_data(&s->w, f, (size_t)n * 4, s->err, sizeof s->err);
}

typedef struct {
    char name[200];
    int kind; /* 0 matrix, 1 vector, 2 Zipf-like router bias */
    int bits;
    int64_t O, I;
    float base, jitter;
} item;

/* One shard: its items declared in order (each matrix's weights, then all
 * scales after the weights of the same group), then written. */
static int write_shard(const synth_opts *o, const char *path, const item *it, int n, uint64_t seed) {
    shard s;
    memset(&s, 0, sizeof s);
    st_writer_init(&s.w);
    s.seed = seed | 1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int64_t one = it[i].O;
        rc = it[i].kind ? st_writer_add(&s.w, it[i].name, ST_F32, 1, &one) : declare_mat(&s, it[i].name, it[i].bits, it[i].O, it[i].I);
    }
    for (int i = 0; i < n && !rc; i++)
        if (!it[i].kind) rc = declare_scales(&s, it[i].name, it[i].bits, o->gs, it[i].O, it[i].I);
    const char *meta[] = {"format", "colibri-synth", NULL};
    if (!rc) rc = st_writer_begin(&s.w, path, meta, s.err, sizeof s.err);
    for (int i = 0; i < n && !rc; i++)
        rc = it[i].kind == 2 ? write_zipf(&s, it[i].O) : it[i].kind ? write_vec(&s, it[i].O, it[i].base, it[i].jitter) : write_mat(&s, it[i].bits, it[i].O, it[i].I);
    for (int i = 0; i < n && !rc; i++)
        if (!it[i].kind) rc = write_scales(&s, it[i].bits, o->gs, it[i].O, it[i].I);
    if (!rc) rc = st_writer_finish(&s.w, s.err, sizeof s.err);
    if (rc) fprintf(stderr, "colibri-synth: %s\n", s.err[0] ? s.err : "out of memory");
    st_writer_free(&s.w);
    free(s.buf);
    return rc;
}

static item mat(const char *name, int bits, int64_t O, int64_t I) {
    item x;
    memset(&x, 0, sizeof x);
    snprintf(x.name, sizeof x.name, "%s", name);
    x.bits = bits, x.O = O, x.I = I;
    return x;
}

static item vec(const char *name, int64_t n, float base, float jitter) {
    item x = mat(name, 32, n, 1);
    x.kind = 1, x.base = base, x.jitter = jitter;
    return x;
}

/* Dense tensors of model layer l (attention, indexer, norms, MLP or router
 * + shared expert). */
static int layer_dense(const synth_opts *o, int l, int moe, item *it) {
    int n = 0, D = o->hidden, H = o->heads, db = o->dense_bits;
    int q_lora = D / 3 > 64 ? D / 3 / 64 * 64 : 64, kv_lora = 512 < D ? 512 : D / 2, nope = 192, rope = 64, vh = 256;
    int ih = 8, id = 128;
    char p[200];
#define NAME(fmt) (snprintf(p, sizeof p, "model.layers.%d." fmt, l), p)
    it[n++] = vec(NAME("input_layernorm.weight"), D, 1, 0.1f);
    it[n++] = vec(NAME("post_attention_layernorm.weight"), D, 1, 0.1f);
    it[n++] = mat(NAME("self_attn.q_a_proj.weight"), db, q_lora, D);
    it[n++] = vec(NAME("self_attn.q_a_layernorm.weight"), q_lora, 1, 0.1f);
    it[n++] = mat(NAME("self_attn.q_b_proj.weight"), db, (int64_t)H * (nope + rope), q_lora);
    it[n++] = mat(NAME("self_attn.kv_a_proj_with_mqa.weight"), db, kv_lora + rope, D);
    it[n++] = vec(NAME("self_attn.kv_a_layernorm.weight"), kv_lora, 1, 0.1f);
    it[n++] = mat(NAME("self_attn.kv_b_proj.weight"), db, (int64_t)H * (nope + vh), kv_lora);
    it[n++] = mat(NAME("self_attn.o_proj.weight"), db, D, (int64_t)H * vh);
    it[n++] = mat(NAME("self_attn.indexer.wq_b.weight"), db, ih * id, q_lora);
    it[n++] = mat(NAME("self_attn.indexer.wk.weight"), db, id, D);
    it[n++] = vec(NAME("self_attn.indexer.k_norm.weight"), id, 1, 0.1f);
    it[n++] = vec(NAME("self_attn.indexer.k_norm.bias"), id, 0, 0.1f);
    it[n++] = mat(NAME("self_attn.indexer.weights_proj.weight"), 32, ih, D);
    if (!moe) {
        int inter = 4 * o->moe_inter;
        it[n++] = mat(NAME("mlp.gate_proj.weight"), db, inter, D);
        it[n++] = mat(NAME("mlp.up_proj.weight"), db, inter, D);
        it[n++] = mat(NAME("mlp.down_proj.weight"), db, D, inter);
        return n;
    }
    it[n++] = mat(NAME("mlp.gate.weight"), 32, o->experts, D);
    it[n] = vec(NAME("mlp.gate.e_score_correction_bias"), o->experts, 0, 0);
    it[n++].kind = 2;
    it[n++] = mat(NAME("mlp.shared_experts.gate_proj.weight"), db, o->moe_inter, D);
    it[n++] = mat(NAME("mlp.shared_experts.up_proj.weight"), db, o->moe_inter, D);
    it[n++] = mat(NAME("mlp.shared_experts.down_proj.weight"), db, D, o->moe_inter);
#undef NAME
    return n;
}

static int write_config(const synth_opts *o) {
    char path[4096], buf[8192];
    int q_lora = o->hidden / 3 > 64 ? o->hidden / 3 / 64 * 64 : 64, kv_lora = 512 < o->hidden ? 512 : o->hidden / 2;
    int L = o->dense_layers + o->layers;
    snprintf(buf, sizeof buf,
             "{\n  \"architectures\": [\"GlmMoeDsaForCausalLM\"],\n  \"model_type\": \"glm_moe_dsa\",\n"
             "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"moe_intermediate_size\": %d,\n"
             "  \"num_hidden_layers\": %d,\n  \"first_k_dense_replace\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n"
             "  \"q_lora_rank\": %d,\n  \"kv_lora_rank\": %d,\n  \"qk_nope_head_dim\": 192,\n  \"qk_rope_head_dim\": 64,\n  \"v_head_dim\": 256,\n"
             "  \"n_routed_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"n_shared_experts\": 1,\n  \"n_group\": 1,\n  \"topk_group\": 1,\n"
             "  \"routed_scaling_factor\": 2.5,\n  \"norm_topk_prob\": true,\n  \"index_n_heads\": 8,\n  \"index_head_dim\": 128,\n"
             "  \"index_topk\": 2048,\n  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0},\n"
             "  \"rms_norm_eps\": 1e-05,\n  \"max_position_embeddings\": %d,\n  \"tie_word_embeddings\": false,\n  \"hidden_act\": \"silu\",\n"
             "  \"eos_token_id\": [0]\n}\n",
             o->vocab, o->hidden, 4 * o->moe_inter, o->moe_inter, L, o->dense_layers, o->heads, o->heads, q_lora, kv_lora, o->experts,
             o->topk, o->ctx);
    snprintf(path, sizeof path, "%s/config.json", o->dst);
    if (compat_write_atomic(path, buf, strlen(buf))) return fprintf(stderr, "colibri-synth: %s: %s\n", path, strerror(errno)), -1;
    snprintf(buf, sizeof buf, "{\n  \"do_sample\": false\n}\n");
    snprintf(path, sizeof path, "%s/generation_config.json", o->dst);
    if (compat_write_atomic(path, buf, strlen(buf))) return fprintf(stderr, "colibri-synth: %s: %s\n", path, strerror(errno)), -1;
    if (o->tokenizer) {
        size_t len;
        char *t = compat_read_file(o->tokenizer, 64u << 20, &len);
        if (!t) return fprintf(stderr, "colibri-synth: %s: %s\n", o->tokenizer, strerror(errno)), -1;
        snprintf(path, sizeof path, "%s/tokenizer.json", o->dst);
        int rc = compat_write_atomic(path, t, len);
        free(t);
        if (rc) return fprintf(stderr, "colibri-synth: %s: %s\n", path, strerror(errno)), -1;
    }
    return 0;
}

/* Parses an integer argument strictly. */
static int arg_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v ? v : "", &end, 10);
    if (!v || errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "colibri-synth: %s needs an integer in [%lld, %lld]\n", flag, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    compat_args_utf8(&argc, &argv);
    synth_opts o = {0, 4, 1, 0, 8, 6144, 2048, 8, 32000, 4096, 4, 8, 0, 1, NULL, NULL};
    int experts_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (a[0] != '-') {
            if (o.dst) return fprintf(stderr, "colibri-synth: one destination directory only\n"), 2;
            o.dst = a;
            continue;
        }
        i++;
        if (!strcmp(a, "--size-gb")) {
            char *end;
            o.size_gb = v ? strtod(v, &end) : -1;
            if (!v || *end || !(o.size_gb > 0 && o.size_gb < 1e5)) return fprintf(stderr, "colibri-synth: --size-gb needs a positive number\n"), 2;
        } else if (!strcmp(a, "--tokenizer")) o.tokenizer = v;
        else if (!strcmp(a, "--layers")) { if (arg_int(a, v, 1, 1024, &x)) return 2; o.layers = (int)x; }
        else if (!strcmp(a, "--dense-layers")) { if (arg_int(a, v, 0, 64, &x)) return 2; o.dense_layers = (int)x; }
        else if (!strcmp(a, "--experts")) { if (arg_int(a, v, 1, 4096, &x)) return 2; o.experts = (int)x, experts_set = 1; }
        else if (!strcmp(a, "--topk")) { if (arg_int(a, v, 1, 64, &x)) return 2; o.topk = (int)x; }
        else if (!strcmp(a, "--hidden")) { if (arg_int(a, v, 128, 1 << 16, &x)) return 2; o.hidden = (int)x; }
        else if (!strcmp(a, "--moe-inter")) { if (arg_int(a, v, 16, 1 << 16, &x)) return 2; o.moe_inter = (int)x; }
        else if (!strcmp(a, "--heads")) { if (arg_int(a, v, 1, 256, &x)) return 2; o.heads = (int)x; }
        else if (!strcmp(a, "--vocab")) { if (arg_int(a, v, 256, 1 << 20, &x)) return 2; o.vocab = (int)x; }
        else if (!strcmp(a, "--ctx")) { if (arg_int(a, v, 64, 1 << 20, &x)) return 2; o.ctx = (int)x; }
        else if (!strcmp(a, "--expert-bits")) { if (arg_int(a, v, 4, 8, &x) || (x != 4 && x != 8)) return fprintf(stderr, "colibri-synth: --expert-bits is 4 or 8\n"), 2; o.expert_bits = (int)x; }
        else if (!strcmp(a, "--dense-bits")) { if (arg_int(a, v, 8, 32, &x) || (x != 8 && x != 32)) return fprintf(stderr, "colibri-synth: --dense-bits is 8 or 32\n"), 2; o.dense_bits = (int)x; }
        else if (!strcmp(a, "--group-size")) { if (arg_int(a, v, 0, 256, &x) || (x && (x < 16 || x % 16))) return fprintf(stderr, "colibri-synth: --group-size is 0 or a multiple of 16 in 16..256\n"), 2; o.gs = (int)x; }
        else if (!strcmp(a, "--seed")) { if (arg_int(a, v, 0, (1LL << 62), &x)) return 2; o.seed = (uint64_t)x; }
        else return fprintf(stderr, "colibri-synth: unknown option %s\n", a), 2;
    }
    if (!o.dst) return fprintf(stderr, "usage: colibri-synth DST [--size-gb G] [--layers L] [--experts E] ... (see tools/make_synth.c)\n"), 2;
    if (o.expert_bits == 8) o.gs = 0;
    uint64_t per_expert = 0;
    int64_t shapes[3][2] = {{o.moe_inter, o.hidden}, {o.moe_inter, o.hidden}, {o.hidden, o.moe_inter}};
    for (int p = 0; p < 3; p++)
        per_expert += packed_bytes(o.expert_bits, shapes[p][0], shapes[p][1]) + 4 * scale_count(o.expert_bits, o.gs, shapes[p][0], shapes[p][1]);
    if (!experts_set) {
        double want = o.size_gb > 0 ? o.size_gb * 1e9 : 64.0 * o.layers * (double)per_expert;
        o.experts = (int)(want / ((double)per_expert * o.layers) + 0.5);
        if (o.experts < o.topk) o.experts = o.topk;
        if (o.experts > 4096) return fprintf(stderr, "colibri-synth: %.1f GB needs more than 4096 experts per layer; add --layers\n", o.size_gb), 2;
    }
    if (o.topk > o.experts) return fprintf(stderr, "colibri-synth: --topk exceeds the experts per layer\n"), 2;
    if (mkdir(o.dst, 0755) && errno != EEXIST) return fprintf(stderr, "colibri-synth: %s: %s\n", o.dst, strerror(errno)), 2;
    if (write_config(&o)) return 2;
    double t0 = compat_now();
    item *it = (item *)calloc((size_t)o.experts * 3 + 64, sizeof(item));
    if (!it) return fprintf(stderr, "colibri-synth: out of memory\n"), 2;
    char path[4096];
    /* shard 0: embeddings, final norm, lm_head */
    int n = 0;
    it[n++] = mat("model.embed_tokens.weight", 32, o.vocab, o.hidden);
    it[n++] = vec("model.norm.weight", o.hidden, 1, 0.1f);
    it[n++] = mat("lm_head.weight", o.dense_bits, o.vocab, o.hidden);
    snprintf(path, sizeof path, "%s/out-00000.safetensors", o.dst);
    if (write_shard(&o, path, it, n, o.seed * 1000 + 1)) return 2;
    uint64_t total = 0;
    int L = o.dense_layers + o.layers;
    for (int l = 0; l < L; l++) {
        int moe = l >= o.dense_layers;
        n = layer_dense(&o, l, moe, it);
        for (int e = 0; moe && e < o.experts; e++) {
            static const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int p = 0; p < 3; p++) {
                char name[200];
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[p]);
                it[n++] = mat(name, o.expert_bits, shapes[p][0], shapes[p][1]);
            }
        }
        snprintf(path, sizeof path, "%s/out-%05d.safetensors", o.dst, l + 1);
        if (write_shard(&o, path, it, n, o.seed * 1000 + 2 + (uint64_t)l)) return 2;
        total += moe ? per_expert * (uint64_t)o.experts : 0;
        fprintf(stderr, "\rcolibri-synth: layer %d/%d written (%.1f GB of experts, %.0f MB/s)", l + 1, L, total / 1e9,
                total / 1e6 / (compat_now() - t0 + 1e-9));
    }
    fprintf(stderr, "\ncolibri-synth: %s: %d layers (%d MoE x %d experts of %.1f MB, %d-bit%s), hidden %d, vocab %d, in %.1f s\n", o.dst, L,
            o.layers, o.experts, per_expert / 1e6, o.expert_bits, o.gs ? " grouped" : "", o.hidden, o.vocab, compat_now() - t0);
    free(it);
    return 0;
}
