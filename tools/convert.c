/* convert.c — colibri-convert: a Hugging Face GLM-5 or DeepSeek-V3 / Kimi K2 directory (glm_moe_dsa,
 * deepseek_v3, deepseek_v32, kimi_k2, kimi_k25; bf16/f16/f32 safetensors, the FP8 e4m3 release with
 * 128×128 `weight_scale_inv` blocks, or compressed-tensors' int4 pack) into a colibri container.
 *
 *   colibri-convert SRC DST --expert-bits N --dense-bits N [--group-size G]
 *                   [--gate-bits N] [--up-bits N] [--down-bits N]
 *                   [--mtp-bits N] [--threads N] [--chunk-mb X]
 *
 * Bits: 32 = F32, 16 = BF16 (exact for bf16 sources), 8 = int8 per row,
 * 4 = int4 per row (grouped with --group-size), 2 = int2 per row; packed
 * weights are U8 `<name>` plus F32 `<name>.qs`, quantized by qt_quantize, the
 * engine's own load-time quantizer, so a converted tensor and a load-time
 * quantized one are the same bytes.
 * Classes (by tensor name):
 *   routed experts  mlp.experts.E.{gate,up,down}_proj   --expert-bits, per
 *                   projection --gate/up/down-bits
 *   dense           attention q_a/q_b (or q_proj)/kv_a/kv_b/o, indexer wq_b/wk, dense MLP,
 *                   shared experts                      --dense-bits
 *   embed, lm_head  --dense-bits below 8; at 8 and above copied in the
 *                   source dtype (lossless; BF16 for the real releases), as
 *                   the engine's load-time rule keeps them full precision
 *   MTP layer       layer num_hidden_layers: its 2-D tensors at --mtp-bits
 *   F32             norms, k_norm bias, router mlp.gate.weight,
 *                   e_score_correction_bias, indexer weights_proj, any
 *                   other 1-D tensor
 * Anything else (fused experts, unknown 2-D names) is refused by name.
 * FP8: w = e4m3(q) · scale_inv[i/128][j/128] in f32, then as above.
 * Pack-quantized int4 (compressed-tensors, Kimi K2.5's experts):
 * <base>.weight_packed / _scale / _shape, w = q · scale[i][j/gs]; written
 * as they are (nibbles and scales) when the output is int4 with the same
 * group size, else decoded to f32 and quantized as above. kimi_k25's
 * vision tower is left out.
 *
 * Output: out-00000.safetensors holds the globals, out-{l+1} model layer l
 * (the MTP layer too); each expert's gate, up, down weights are declared
 * back to back, then their scales, so the engine reads an expert with one
 * pread. Shards are written as <name>.tmp and renamed when complete.
 * Each source tensor is read once, by the threads in parallel (units of
 * rows, batches of whole experts); rows are independent, so neither
 * --threads nor --chunk-mb changes a byte.
 * DST/colibri-convert.json records the parameters that shape the output
 * and each finished shard with its size and cvh1 checksum (computed as the
 * shard is written); a rerun reads each finished shard back, keeps those
 * that match and converts the others again (saying why; shards an older
 * manifest lists without a checksum count as unverified), and refuses
 * (exit 2) different parameters. DST/.colibri-convert.lock (flock) keeps
 * two converters apart. Every output file is written under a temporary
 * name and renamed. Inputs are opened with compat_open_regular and names
 * written in DST are checked with lstat, so a FIFO, symbolic link or other
 * non-regular file is refused by name, never waited on or written through.
 * Each flag is given at most once. Exit codes: 0 ok, 2 bad arguments, bad
 * input or I/O error, each with a message naming the flag, file or tensor. */
#include "compat.h"
#include "json.h"
#include "quant.h"
#include "st.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>

#define CV_MANIFEST "colibri-convert.json"
#define CV_LOCK ".colibri-convert.lock"
#define CV_VERSION "colibri-convert/1"
#define CV_SUB ((size_t)256 << 10) /* source bytes per parallel work unit */
#define CV_FP8_BLOCK 128

/* ================================================================ options */

typedef struct {
    const char *src, *dst;
    int proj_bits[3];   /* routed experts: gate, up, down */
    int expert_bits, dense_bits, mtp_bits, gs, threads;
    size_t chunk;       /* source bytes converted per parallel batch */
} cv_opts;

typedef struct {
    const char *flag, *arg, *def, *help;
    const char *accepts; /* the values it takes, in words, for error messages */
} cv_flag;

#define CV_BITS_OK "one of 2, 4, 8, 16, 32"
enum { F_EXPERT, F_DENSE, F_GS, F_GATE, F_UP, F_DOWN, F_MTP, F_THREADS, F_CHUNK, F_HELP, F_N };
static const cv_flag cv_flags[F_N] = {
    {"--expert-bits", "N", "required", "routed experts: 2, 4, 8 (int), 16 (BF16) or 32 (F32)", CV_BITS_OK},
    {"--dense-bits", "N", "required", "attention, indexer, dense MLP, shared experts; embed/lm_head below 8 (else copied losslessly)",
     CV_BITS_OK},
    {"--group-size", "G", "0", "4-bit tensors: one scale per G inputs (16..256, multiple of 16); 0 = per row",
     "0 or a multiple of 16 from 16 to 256"},
    {"--gate-bits", "N", "expert bits", "routed experts' gate_proj", CV_BITS_OK},
    {"--up-bits", "N", "expert bits", "routed experts' up_proj", CV_BITS_OK},
    {"--down-bits", "N", "expert bits", "routed experts' down_proj", CV_BITS_OK},
    {"--mtp-bits", "N", "8", "2-D tensors of the MTP layer (model.layers.<num_hidden_layers>)", CV_BITS_OK},
    {"--threads", "N", "0", "OpenMP threads; 0 = one per CPU", "an integer from 0 (one per CPU) to 4096"},
    {"--chunk-mb", "X", "64", "source MB converted per parallel batch (memory ~ 2X); larger tensors stream in chunks of X",
     "a number of MB from 0.001 to 65536"},
    {"--help", NULL, NULL, "this text", NULL},
};
static const char *const cv_proj[3] = {"gate", "up", "down"};

/* Prints "colibri-convert: <message>" on stderr; returns -1 for the caller to pass on. */
static int cv_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int cv_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("colibri-convert: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

static void cv_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cv_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("colibri-convert: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* "12.3 MB": bytes in decimal units. */
static const char *cv_human(uint64_t b, char *buf, size_t n) {
    if (b >= 1000000000ull) snprintf(buf, n, "%.2f GB", b / 1e9);
    else if (b >= 1000000ull) snprintf(buf, n, "%.1f MB", b / 1e6);
    else snprintf(buf, n, "%.1f kB", b / 1e3);
    return buf;
}

static void cv_usage(FILE *f) {
    fprintf(f, "usage: colibri-convert SRC DST --expert-bits N --dense-bits N [options]\n"
               "  SRC  Hugging Face glm_moe_dsa / deepseek_v3 / deepseek_v32 / kimi_k2 / kimi_k25 directory (bf16/f16/f32, FP8 e4m3 +\n"
               "       weight_scale_inv, or compressed-tensors pack-quantized int4)\n"
               "  DST  container directory (created; a rerun resumes)\n");
    for (int i = 0; i < F_N; i++) {
        const cv_flag *g = &cv_flags[i];
        fprintf(f, "  %-14s %-2s %s", g->flag, g->arg ? g->arg : "", g->help);
        if (g->def) fprintf(f, strcmp(g->def, "required") ? " (default: %s)\n" : " (%s)\n", g->def);
        else fputc('\n', f);
    }
    fprintf(f, "Writes out-NNNNN.safetensors (globals, then one per layer), the metadata files and %s (resume\n"
               "manifest). Exit codes: 0 ok, 2 bad arguments, bad input or I/O error.\n", CV_MANIFEST);
}

/* A command-line value as shown in a message: as given when it is short
 * and plain, else quoted with non-printing bytes as '?' and cut at 40
 * bytes, so a hostile argument cannot garble the terminal and an empty one
 * is visible. */
static const char *cv_shown(const char *v, char *buf, size_t n) {
    size_t k = 0, i = 0;
    int plain = v && *v && strlen(v) <= 40;
    if (!v) return snprintf(buf, n, "(missing)"), buf;
    for (const char *c = v; plain && *c; c++) plain = isgraph((unsigned char)*c);
    if (plain) return snprintf(buf, n, "%s", v), buf;
    buf[k++] = '\'';
    for (; v[i] && i < 40 && k + 6 < n; i++) buf[k++] = isprint((unsigned char)v[i]) ? v[i] : '?';
    if (v[i]) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
    buf[k++] = '\'';
    buf[k] = 0;
    return buf;
}

/* Parses a plain decimal integer (digits only: no sign, space or base
 * prefix) into *x. 0, or -1 when v is not one or exceeds INT_MAX. */
static int cv_dec(const char *v, int *x) {
    long r = 0;
    if (!isdigit((unsigned char)*v)) return -1;
    for (; isdigit((unsigned char)*v); v++)
        if ((r = r * 10 + (*v - '0')) > INT_MAX) return -1;
    if (*v) return -1;
    *x = (int)r;
    return 0;
}

/* Parses a plain decimal number ("64", "0.5", ".25"; no sign, exponent,
 * hex, inf or nan) into *x. 0 or -1. */
static int cv_decimal(const char *v, double *x) {
    size_t digits = strspn(v, "0123456789"), frac = v[digits] == '.' ? strspn(v + digits + 1, "0123456789") : 0;
    if (!digits && !frac) return -1;
    if (v[digits + (v[digits] == '.' ? 1 + frac : 0)]) return -1;
    *x = strtod(v, NULL);
    return 0;
}

static int cv_bits_ok(int b) { return b == 2 || b == 4 || b == 8 || b == 16 || b == 32; }

/* Stores flag f's value v into o. 0, or -1 with a message naming the flag,
 * the value given and the values it accepts. */
static int cv_set_flag(cv_opts *o, int f, const char *v) {
    const cv_flag *g = &cv_flags[f];
    char sv[64];
    int x = 0, ok;
    double mb = 0;
    if (!v || !strncmp(v, "--", 2)) /* the next flag is not this one's value */
        return v ? cv_fail("%s: value missing before %s (expected %s)", g->flag, cv_shown(v, sv, sizeof sv), g->accepts)
                 : cv_fail("%s: value missing (expected %s)", g->flag, g->accepts);
    if (f == F_CHUNK) ok = !cv_decimal(v, &mb) && mb >= 0.001 && mb <= 65536;
    else if (f == F_GS) ok = !cv_dec(v, &x) && (!x || qt_gs_ok(x));
    else if (f == F_THREADS) ok = !cv_dec(v, &x) && x <= 4096;
    else ok = !cv_dec(v, &x) && cv_bits_ok(x);
    if (!ok) return cv_fail("%s %s: expected %s", g->flag, cv_shown(v, sv, sizeof sv), g->accepts);
    switch (f) {
    case F_CHUNK: o->chunk = (size_t)(mb * 1048576.0); break;
    case F_GS: o->gs = x; break;
    case F_THREADS: o->threads = x; break;
    case F_EXPERT: o->expert_bits = x; break;
    case F_DENSE: o->dense_bits = x; break;
    case F_MTP: o->mtp_bits = x; break;
    default: o->proj_bits[f - F_GATE] = x;
    }
    return 0;
}

/* Fills o from argv. Returns 0, 1 for --help, or -1 after a message. Each
 * flag may be given once: a second value would silently override the
 * first, which is how a typo in a long command line goes unnoticed. */
static int cv_parse_args(int argc, char **argv, cv_opts *o) {
    const char *given[F_N] = {0};
    memset(o, 0, sizeof *o);
    o->expert_bits = o->dense_bits = -1;
    o->proj_bits[0] = o->proj_bits[1] = o->proj_bits[2] = -1;
    o->mtp_bits = 8;
    o->chunk = (size_t)64 << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            if (!o->src) o->src = a;
            else if (!o->dst) o->dst = a;
            else return cv_fail("unexpected argument '%s' (SRC and DST already given)", a);
            continue;
        }
        int f = 0;
        while (f < F_N && strcmp(a, cv_flags[f].flag)) f++;
        if (f == F_N) return cv_fail("unknown option '%s' (see --help)", a);
        if (f == F_HELP) return 1;
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (given[f]) {
            char s0[64], s1[64];
            return cv_fail("%s given twice (%s, then %s); give it once", a, cv_shown(given[f], s0, sizeof s0), cv_shown(v, s1, sizeof s1));
        }
        given[f] = v;
        if (cv_set_flag(o, f, v)) return -1;
    }
    if (!o->src || !o->dst) return cv_fail("SRC and DST directories are required (see --help)");
    if (o->expert_bits < 0) return cv_fail("--expert-bits is required");
    if (o->dense_bits < 0) return cv_fail("--dense-bits is required");
    for (int p = 0; p < 3; p++)
        if (o->proj_bits[p] < 0) o->proj_bits[p] = o->expert_bits;
    for (int p = 1; p < 3; p++)
        if ((o->proj_bits[p] >= 16) != (o->proj_bits[0] >= 16))
            return cv_fail("--%s-bits %d with --%s-bits %d: an expert's three projections must be all quantized "
                           "(2/4/8) or all float (16/32)", cv_proj[0], o->proj_bits[0], cv_proj[p], o->proj_bits[p]);
    int any4 = o->dense_bits == 4 || o->mtp_bits == 4;
    for (int p = 0; p < 3; p++) any4 |= o->proj_bits[p] == 4;
    if (o->gs && !any4) {
        cv_warn("--group-size %d has no effect: no class is at 4 bits", o->gs);
        o->gs = 0;
    }
    if (o->mtp_bits == 2 || (o->mtp_bits == 4 && !o->gs))
        cv_warn("--mtp-bits %d per row: eh_proj's embedding half is much smaller than its hidden half and underflows to zero at "
                "this width (8, or 4 with --group-size, keeps it)", o->mtp_bits);
    return 0;
}

/* ================================================================ config */

typedef struct {
    int vocab, dim, n_layers, n_mtp, n_heads, q_lora, kv_lora, qk_nope, qk_rope, v_head;
    int inter, moe_inter, n_experts, n_shared, index_heads, index_dim;
    const char *strip; /* kimi_k25: its language model's name prefix, read without it (static), else NULL */
} cv_config;

/* Reads integer field key of the config into [lo, hi]; def < lo = required. */
static int cv_cfg_int(const js_doc *d, const char *path, const char *key, int lo, int hi, int def, int *out) {
    int n = js_get(d, d->root, key);
    if (n < 0 || js_typeof(d, n) == JS_NULL) {
        if (def < lo) return cv_fail("%s: missing field '%s'", path, key);
        *out = def;
        return 0;
    }
    if (!js_is_int(d, n) || js_int(d, n) < lo || js_int(d, n) > hi)
        return cv_fail("%s: field '%s' must be an integer in [%d, %d]", path, key, lo, hi);
    *out = (int)js_int(d, n);
    return 0;
}

/* q_lora_rank: an integer, or null (q_lora 0: one q_proj, as
 * Moonlight-16B-A3B ships) in the families without an indexer, which
 * reads the query latent. mt: the model_type node, -1 for deepseek_v3. */
static int cv_cfg_q_lora(const js_doc *d, const char *path, int mt, int *out) {
    int n = js_get(d, d->root, "q_lora_rank");
    if (n < 0 || js_typeof(d, n) != JS_NULL) return cv_cfg_int(d, path, "q_lora_rank", 1, 1 << 20, -1, out);
    const char *t = mt >= 0 ? js_str(d, mt) : NULL;
    if (t && (!strcmp(t, "glm_moe_dsa") || !strcmp(t, "deepseek_v32")))
        return cv_fail("%s: q_lora_rank is null (one q_proj), but %s's indexer reads the query latent: it needs a q_lora_rank", path, t);
    *out = 0;
    return 0;
}

/* Kimi K2.5 (kimi_k25): the text model's config is text_config (a
 * deepseek_v3 / kimi_k2 one; deepseek_v3 when it names none), read as the
 * root from here on; its tensors are named under "language_model.". *mt
 * becomes text_config's model_type node, or -1. 0 or -1. */
static int cv_config_unwrap(js_doc *d, const char *path, cv_config *c, int *mt) {
    int tc = js_get(d, d->root, "text_config");
    if (js_typeof(d, tc) != JS_OBJ) return cv_fail("%s: kimi_k25: missing object 'text_config'", path);
    d->root = tc, c->strip = "language_model.";
    *mt = js_get(d, tc, "model_type");
    if (*mt >= 0 && js_typeof(d, *mt) == JS_NULL) *mt = -1;
    if (*mt >= 0 && (!js_str(d, *mt) || (strcmp(js_str(d, *mt), "deepseek_v3") && strcmp(js_str(d, *mt), "kimi_k2"))))
        return cv_fail("%s: text_config: model_type must be deepseek_v3 or kimi_k2", path);
    return 0;
}

/* Loads the dimensions that fix every tensor's expected shape from
 * SRC/config.json (the text is kept in *text for the copy). 0 or -1. */
static int cv_config_load(const char *src, cv_config *c, char **text, size_t *len) {
    char path[PATH_MAX], jerr[160];
    snprintf(path, sizeof path, "%s/config.json", src);
    memset(c, 0, sizeof *c);
    *text = compat_read_file(path, 16u << 20, len);
    if (!*text) return cv_fail("%s: %s", path, compat_strerror(errno));
    js_doc *d = js_parse(*text, *len, jerr, sizeof jerr);
    if (!d) return cv_fail("%s: not valid JSON: %s", path, jerr);
    int rc = 0, mt = js_get(d, d->root, "model_type");
    const int B = 1 << 20;
    if (js_typeof(d, d->root) != JS_OBJ) rc = cv_fail("%s: not a JSON object", path);
    else if (js_str(d, mt) && !strcmp(js_str(d, mt), "kimi_k25")) rc = cv_config_unwrap(d, path, c, &mt);
    else if (!js_str(d, mt)) rc = cv_fail("%s: missing field 'model_type'", path);
    else if (strcmp(js_str(d, mt), "glm_moe_dsa") && strcmp(js_str(d, mt), "deepseek_v3") && strcmp(js_str(d, mt), "deepseek_v32") &&
             strcmp(js_str(d, mt), "kimi_k2"))
        rc = cv_fail("%s: model_type '%s' is not supported (glm_moe_dsa, deepseek_v3, deepseek_v32, kimi_k2, kimi_k25)", path,
                     js_str(d, mt));
    int ih_def = !rc && mt >= 0 && !strcmp(js_str(d, mt), "deepseek_v32") ? 64 : 32; /* transformers' index_n_heads default by family */
    if (!rc)
        rc = cv_cfg_int(d, path, "vocab_size", 1, 1 << 24, -1, &c->vocab) || cv_cfg_int(d, path, "hidden_size", 1, B, -1, &c->dim) ||
             cv_cfg_int(d, path, "num_hidden_layers", 1, 1024, -1, &c->n_layers) ||
             cv_cfg_int(d, path, "num_nextn_predict_layers", 0, 16, 1, &c->n_mtp) ||
             cv_cfg_int(d, path, "num_attention_heads", 1, 1024, -1, &c->n_heads) ||
             cv_cfg_q_lora(d, path, mt, &c->q_lora) || cv_cfg_int(d, path, "kv_lora_rank", 1, B, -1, &c->kv_lora) ||
             cv_cfg_int(d, path, "qk_nope_head_dim", 1, 65536, -1, &c->qk_nope) ||
             cv_cfg_int(d, path, "qk_rope_head_dim", 1, 65536, -1, &c->qk_rope) ||
             cv_cfg_int(d, path, "v_head_dim", 1, 65536, -1, &c->v_head) || cv_cfg_int(d, path, "intermediate_size", 1, B, -1, &c->inter) ||
             cv_cfg_int(d, path, "moe_intermediate_size", 1, B, -1, &c->moe_inter) ||
             cv_cfg_int(d, path, "n_routed_experts", 1, 65536, -1, &c->n_experts) ||
             cv_cfg_int(d, path, "n_shared_experts", 0, 64, 1, &c->n_shared) ||
             cv_cfg_int(d, path, "index_n_heads", 1, 1024, ih_def, &c->index_heads) ||
             cv_cfg_int(d, path, "index_head_dim", 1, 65536, 128, &c->index_dim) ? -1 : 0;
    js_free(d);
    return rc;
}

/* ================================================================ plan */

typedef enum { CL_KEEP, CL_DENSE, CL_EXPERT, CL_IO } cv_class; /* KEEP = stays F32 */
typedef enum { OUT_F32, OUT_BF16, OUT_COPY, OUT_QUANT } cv_out;

/* One source tensor and what it becomes. */
typedef struct {
    const st_tensor *t, *scale; /* source; FP8 block scales, int4 group scales or NULL */
    char *pname;                /* a pack-quantized weight's output name (<base>.weight), else NULL */
    int pgs;                    /* its group size along the input          */
    int copy4;                  /* its nibbles and scales are the output's as they are */
    cv_class cls;
    int layer, expert, proj;    /* -1 outside a layer / not a routed expert  */
    int bits;                   /* 2/4/8 quantized, 16, 32; 0 = source dtype */
    cv_out out;
    qt_fmt fmt;
    int gs;
    int64_t O, I;               /* matrix view; 1-D tensors: O = 1           */
    st_dtype odt;               /* dtype of the written weight tensor        */
} cv_item;

typedef struct {
    char file[32];   /* out-NNNNN.safetensors */
    int layer;       /* -1: globals            */
    cv_item *it;
    int n, cap;
    uint64_t src_bytes, out_bytes; /* tensor data read / written */
    uint64_t file_bytes;           /* size of the finished file   */
    uint64_t file_hash;            /* its cvh1 checksum           */
    int ntensors;                  /* tensors written (weights + scales) */
} cv_shard;

typedef struct {
    const cv_config *c;
    const cv_opts *o;
    const st_index *ix;
    cv_shard *sh;    /* [0] globals, [1 + l] layer l (MTP layers last) */
    int nsh;
    int n_other;     /* kimi_k25's tensors outside its language model: not converted */
} cv_plan;

static const char *cv_path(const st_index *ix, const st_tensor *t) { return ix->files[t->file].path; }

/* The name a source item is written under. */
static const char *cv_name(const cv_item *it) { return it->pname ? it->pname : it->t->name; }

/* 1 if `name` ends with `suffix`. */
static int cv_ends(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

/* Parses a decimal index without sign or leading zeros at *s, advancing
 * past it and a following '.'. Returns the index or -1. */
static int cv_index(const char **s) {
    const char *p = *s;
    long v = 0;
    if (!isdigit((unsigned char)*p) || (p[0] == '0' && isdigit((unsigned char)p[1]))) return -1;
    while (isdigit((unsigned char)*p) && v < 1 << 24) v = v * 10 + (*p++ - '0');
    if (*p != '.') return -1;
    *s = p + 1;
    return (int)v;
}

enum { SZ_0, SZ_D, SZ_2D, SZ_QL, SZ_KVL, SZ_KVA, SZ_HQK, SZ_HQK0, SZ_HKV, SZ_HV, SZ_IHD, SZ_ID, SZ_IH, SZ_INTER, SZ_E, SZ_SI, SZ_VOCAB };

static int64_t cv_size(const cv_config *c, int k) {
    switch (k) {
    case SZ_D: return c->dim;
    case SZ_2D: return 2 * (int64_t)c->dim;
    case SZ_QL: return c->q_lora;
    case SZ_KVL: return c->kv_lora;
    case SZ_KVA: return (int64_t)c->kv_lora + c->qk_rope;
    case SZ_HQK: return (int64_t)c->n_heads * (c->qk_nope + c->qk_rope);
    case SZ_HQK0: return c->q_lora ? 0 : (int64_t)c->n_heads * (c->qk_nope + c->qk_rope); /* q_proj: only without a q_lora */
    case SZ_HKV: return (int64_t)c->n_heads * (c->qk_nope + c->v_head);
    case SZ_HV: return (int64_t)c->n_heads * c->v_head;
    case SZ_IHD: return (int64_t)c->index_heads * c->index_dim;
    case SZ_ID: return c->index_dim;
    case SZ_IH: return c->index_heads;
    case SZ_INTER: return c->inter;
    case SZ_E: return c->n_experts;
    case SZ_SI: return (int64_t)c->moe_inter * c->n_shared;
    case SZ_VOCAB: return c->vocab;
    }
    return 0;
}

typedef struct {
    const char *name;
    cv_class cls;
    int d0, d1;   /* SZ_*; d1 = SZ_0 for 1-D */
    int mtp_only;
} cv_known;

/* Every per-layer tensor name of glm_moe_dsa (after "model.layers.L.");
 * deepseek_v3 / kimi_k2 use the same names without the indexer's. */
static const cv_known cv_layer_names[] = {
    {"input_layernorm.weight", CL_KEEP, SZ_D, SZ_0, 0},
    {"post_attention_layernorm.weight", CL_KEEP, SZ_D, SZ_0, 0},
    {"self_attn.q_a_proj.weight", CL_DENSE, SZ_QL, SZ_D, 0},
    {"self_attn.q_a_layernorm.weight", CL_KEEP, SZ_QL, SZ_0, 0},
    {"self_attn.q_b_proj.weight", CL_DENSE, SZ_HQK, SZ_QL, 0},
    {"self_attn.q_proj.weight", CL_DENSE, SZ_HQK0, SZ_D, 0},
    {"self_attn.kv_a_proj_with_mqa.weight", CL_DENSE, SZ_KVA, SZ_D, 0},
    {"self_attn.kv_a_layernorm.weight", CL_KEEP, SZ_KVL, SZ_0, 0},
    {"self_attn.kv_b_proj.weight", CL_DENSE, SZ_HKV, SZ_KVL, 0},
    {"self_attn.o_proj.weight", CL_DENSE, SZ_D, SZ_HV, 0},
    {"self_attn.indexer.wq_b.weight", CL_DENSE, SZ_IHD, SZ_QL, 0},
    {"self_attn.indexer.wk.weight", CL_DENSE, SZ_ID, SZ_D, 0},
    {"self_attn.indexer.k_norm.weight", CL_KEEP, SZ_ID, SZ_0, 0},
    {"self_attn.indexer.k_norm.bias", CL_KEEP, SZ_ID, SZ_0, 0},
    {"self_attn.indexer.weights_proj.weight", CL_KEEP, SZ_IH, SZ_D, 0},
    {"mlp.gate_proj.weight", CL_DENSE, SZ_INTER, SZ_D, 0},
    {"mlp.up_proj.weight", CL_DENSE, SZ_INTER, SZ_D, 0},
    {"mlp.down_proj.weight", CL_DENSE, SZ_D, SZ_INTER, 0},
    {"mlp.gate.weight", CL_KEEP, SZ_E, SZ_D, 0},
    {"mlp.gate.e_score_correction_bias", CL_KEEP, SZ_E, SZ_0, 0},
    {"mlp.shared_experts.gate_proj.weight", CL_DENSE, SZ_SI, SZ_D, 0},
    {"mlp.shared_experts.up_proj.weight", CL_DENSE, SZ_SI, SZ_D, 0},
    {"mlp.shared_experts.down_proj.weight", CL_DENSE, SZ_D, SZ_SI, 0},
    {"eh_proj.weight", CL_DENSE, SZ_D, SZ_2D, 1},
    {"enorm.weight", CL_KEEP, SZ_D, SZ_0, 1},
    {"hnorm.weight", CL_KEEP, SZ_D, SZ_0, 1},
    {"shared_head.norm.weight", CL_KEEP, SZ_D, SZ_0, 1},
    {"shared_head.head.weight", CL_DENSE, SZ_VOCAB, SZ_D, 1},
    {"embed_tokens.weight", CL_DENSE, SZ_VOCAB, SZ_D, 1},
};

static const cv_known cv_global_names[] = {
    {"model.embed_tokens.weight", CL_IO, SZ_VOCAB, SZ_D, 0},
    {"lm_head.weight", CL_IO, SZ_VOCAB, SZ_D, 0},
    {"model.norm.weight", CL_KEEP, SZ_D, SZ_0, 0},
};

static const cv_known *cv_lookup(const cv_known *k, size_t n, const char *name, int mtp) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k[i].name, name) && (mtp || !k[i].mtp_only)) return &k[i];
    return NULL;
}

static void cv_shape_str(const st_tensor *t, char *buf, size_t n) {
    int o = snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && o < (int)n; i++) o += snprintf(buf + o, n - (size_t)o, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (o < (int)n) snprintf(buf + o, n - (size_t)o, "]");
}

/* Checks t against the expected shape [d0] or [d0, d1]. 0 or -1 with a message. */
static int cv_check_shape(const cv_plan *p, const st_tensor *t, int64_t d0, int64_t d1) {
    int nd = d1 ? 2 : 1;
    if (t->ndim == nd && t->shape[0] == d0 && (nd == 1 || t->shape[1] == d1)) return 0;
    char got[128];
    cv_shape_str(t, got, sizeof got);
    if (nd == 2)
        return cv_fail("%s: tensor '%s' has shape %s, config.json implies [%lld, %lld]", cv_path(p->ix, t), t->name, got, (long long)d0,
                       (long long)d1);
    return cv_fail("%s: tensor '%s' has shape %s, config.json implies [%lld]", cv_path(p->ix, t), t->name, got, (long long)d0);
}

static int cv_shard_add(cv_shard *s, const cv_item *it) {
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 64;
        cv_item *ni = (cv_item *)realloc(s->it, (size_t)nc * sizeof *ni);
        if (!ni) return cv_fail("out of memory");
        s->it = ni;
        s->cap = nc;
    }
    s->it[s->n++] = *it;
    return 0;
}

/* The bits a tensor of class cls is written at (0 = source dtype). */
static int cv_bits_for(const cv_opts *o, const cv_item *it, int mtp) {
    if (it->cls == CL_KEEP) return 32;
    if (mtp) return o->mtp_bits;
    if (it->cls == CL_EXPERT) return o->proj_bits[it->proj];
    if (it->cls == CL_IO) return o->dense_bits < 8 ? o->dense_bits : 0;
    return o->dense_bits;
}

/* Checks that the engine reads a quantized tensor back in the format it was
 * written in (the format is told by byte counts only: some group sizes give
 * the same scale count as a smaller candidate for some widths). */
static int cv_check_resolve(const cv_plan *p, const cv_item *it) {
    qt_fmt f;
    int gs;
    char why[300];
    uint64_t wb = qt_weight_bytes(it->fmt, it->O, it->I, it->gs), sb = 4 * qt_scale_count(it->fmt, it->O, it->I, it->gs);
    if (!wb || !sb) return cv_fail("tensor '%s': shape [%lld, %lld] too large", cv_name(it), (long long)it->O, (long long)it->I);
    if (qt_resolve(it->O, it->I, wb, sb, &f, &gs, why, sizeof why))
        return cv_fail("%s: tensor '%s' at %d bits: the engine could not read it back: %s", cv_path(p->ix, it->t),
                       cv_name(it), it->bits, why);
    int single = it->fmt == QT_I4G && (it->I + it->gs - 1) / it->gs == 1; /* one group = per row */
    if ((f == it->fmt && gs == it->gs) || (single && f == QT_I4)) return 0;
    if (it->fmt == QT_I4G)
        return cv_fail("%s: tensor '%s' [%lld, %lld]: with --group-size %d its %lld scales per row would be read back "
                       "as group size %d; choose another --group-size", cv_path(p->ix, it->t), cv_name(it), (long long)it->O,
                       (long long)it->I, it->gs, (long long)((it->I + it->gs - 1) / it->gs), gs);
    return cv_fail("%s: tensor '%s' [%lld, %lld] at %d bits would be read back as %s", cv_path(p->ix, it->t),
                   cv_name(it), (long long)it->O, (long long)it->I, it->bits, qt_fmt_name(f));
}

/* Fixes an item's output format from its class and the options, and checks
 * its source dtype and FP8 scales. 0 or -1 with a message. */
static int cv_item_finish(cv_plan *p, cv_item *it, int mtp) {
    const st_tensor *t = it->t;
    if (it->pname) { /* pack-quantized int4: no source dtype to copy; its own int4 groups are kept when the output has them */
        it->bits = cv_bits_for(p->o, it, mtp);
        it->fmt = QT_F32, it->gs = 0;
        if (it->bits == 32 || it->bits == 0) it->out = OUT_F32, it->odt = ST_F32;
        else if (it->bits == 16) it->out = OUT_BF16, it->odt = ST_BF16;
        else {
            it->out = OUT_QUANT, it->odt = ST_U8;
            it->fmt = it->bits == 8 ? QT_I8 : it->bits == 2 ? QT_I2 : p->o->gs ? QT_I4G : QT_I4;
            it->gs = it->fmt == QT_I4G ? p->o->gs : 0;
            it->copy4 = (it->fmt == QT_I4G && it->gs == it->pgs) || (it->fmt == QT_I4 && it->pgs == it->I);
            return cv_check_resolve(p, it);
        }
        return 0;
    }
    char sn[ST_MAX_NAME + 16];
    snprintf(sn, sizeof sn, "%s_scale_inv", t->name);
    it->scale = st_find(p->ix, sn);
    it->O = t->ndim == 2 ? t->shape[0] : 1;
    it->I = t->ndim == 2 ? t->shape[1] : (int64_t)t->numel;
    if (t->dtype == ST_F8_E4M3) {
        if (t->ndim != 2) return cv_fail("%s: FP8 tensor '%s' is not 2-D", cv_path(p->ix, t), t->name);
        if (!it->scale) return cv_fail("%s: FP8 tensor '%s' has no '%s'", cv_path(p->ix, t), t->name, sn);
        int64_t b0 = (it->O + CV_FP8_BLOCK - 1) / CV_FP8_BLOCK, b1 = (it->I + CV_FP8_BLOCK - 1) / CV_FP8_BLOCK;
        const st_tensor *s = it->scale;
        if (!st_is_float(s->dtype) || s->ndim != 2 || s->shape[0] != b0 || s->shape[1] != b1) {
            char got[128];
            cv_shape_str(s, got, sizeof got);
            return cv_fail("%s: tensor '%s' is %s %s, expected a float [%lld, %lld] (128x128 blocks of '%s')",
                           cv_path(p->ix, s), sn, st_dtype_names[s->dtype], got, (long long)b0, (long long)b1, t->name);
        }
    } else if (!st_is_float(t->dtype)) {
        return cv_fail("%s: tensor '%s': dtype %s is not F32/F16/BF16/F8_E4M3", cv_path(p->ix, t), t->name,
                       st_dtype_names[t->dtype]);
    } else if (it->scale) {
        return cv_fail("%s: tensor '%s' is %s but has a '%s' (only F8_E4M3 weights have block scales)",
                       cv_path(p->ix, t), t->name, st_dtype_names[t->dtype], sn);
    }
    if (!it->O || !it->I) return cv_fail("%s: tensor '%s' is empty", cv_path(p->ix, t), t->name);
    it->bits = cv_bits_for(p->o, it, mtp);
    it->fmt = QT_F32;
    it->gs = 0;
    if (it->bits == 32 || (it->bits == 0 && t->dtype == ST_F8_E4M3)) it->out = OUT_F32, it->odt = ST_F32;
    else if (it->bits == 16) it->out = OUT_BF16, it->odt = ST_BF16;
    else if (it->bits == 0) it->out = OUT_COPY, it->odt = t->dtype;
    else {
        it->out = OUT_QUANT, it->odt = ST_U8;
        it->fmt = it->bits == 8 ? QT_I8 : it->bits == 2 ? QT_I2 : p->o->gs ? QT_I4G : QT_I4;
        it->gs = it->fmt == QT_I4G ? p->o->gs : 0;
        return cv_check_resolve(p, it);
    }
    return 0;
}

/* Sorts a shard: other tensors by name, then routed experts by index and
 * projection (gate, up, down adjacent). */
static int cv_item_cmp(const void *a, const void *b) {
    const cv_item *x = (const cv_item *)a, *y = (const cv_item *)b;
    if (x->expert != y->expert) return x->expert < y->expert ? -1 : 1;
    if (x->proj != y->proj) return x->proj < y->proj ? -1 : 1;
    return strcmp(cv_name(x), cv_name(y));
}

/* A compressed-tensors pack-quantized weight (Kimi K2.5's routed experts):
 * <base>.weight_packed I32 [O, ceil(I/8)] holds int4 q + 8 eight to a
 * word, element i at bits 4(i mod 8) of word i/8 (so, little-endian, byte
 * i/2's low nibble for even i: QT_I4's layout), <base>.weight_shape I32 [2]
 * = [O, I], <base>.weight_scale float [O, I/gs]; w = q · scale, symmetric
 * (a weight_zero_point is refused by the caller). Checks them against the
 * shape config.json implies ([d0, d1]) and sets the item's view. 0 or -1. */
static int cv_packed_plan(cv_plan *p, cv_item *it, int64_t d0, int64_t d1) {
    const st_tensor *t = it->t;
    char sn[ST_MAX_NAME + 16], hn[ST_MAX_NAME + 16];
    size_t bl = strlen(t->name) - strlen("_packed");
    snprintf(sn, sizeof sn, "%.*s_scale", (int)bl, t->name);
    snprintf(hn, sizeof hn, "%.*s_shape", (int)bl, t->name);
    const st_tensor *sc = st_find(p->ix, sn), *sh = st_find(p->ix, hn);
    int32_t dims[2];
    if (!sc || !sh) return cv_fail("%s: packed tensor '%s' has no '%s'", cv_path(p->ix, t), t->name, sc ? hn : sn);
    if (sh->dtype != ST_I32 || sh->numel != 2) return cv_fail("%s: tensor '%s' must be I32 [2]", cv_path(p->ix, sh), hn);
    if (compat_pread_full(p->ix->files[sh->file].fd, dims, 8, sh->off))
        return cv_fail("%s: tensor '%s': read failed: %s", cv_path(p->ix, sh), hn, strerror(errno ? errno : EIO));
    if (dims[0] != d0 || dims[1] != d1)
        return cv_fail("%s: tensor '%s' says [%d, %d], config.json implies [%lld, %lld]", cv_path(p->ix, sh), hn, (int)dims[0], (int)dims[1],
                       (long long)d0, (long long)d1);
    if (t->dtype != ST_I32 || t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != (d1 + 7) / 8) {
        char got[128];
        cv_shape_str(t, got, sizeof got);
        return cv_fail("%s: tensor '%s' is %s %s, expected I32 [%lld, %lld] (int4, eight to a word; other widths are not supported)",
                       cv_path(p->ix, t), t->name, st_dtype_names[t->dtype], got, (long long)d0, (long long)((d1 + 7) / 8));
    }
    int64_t ng = sc->ndim == 2 ? sc->shape[1] : 0;
    if (!st_is_float(sc->dtype) || sc->ndim != 2 || sc->shape[0] != d0 || ng < 1 || d1 % ng) {
        char got[128];
        cv_shape_str(sc, got, sizeof got);
        return cv_fail("%s: tensor '%s' is %s %s, expected a float [%lld, I/group size] with I = %lld", cv_path(p->ix, sc), sn,
                       st_dtype_names[sc->dtype], got, (long long)d0, (long long)d1);
    }
    it->scale = sc, it->pgs = (int)(d1 / ng), it->O = d0, it->I = d1;
    return 0;
}

/* Classifies one source tensor into its shard. 0, or -1 with a message. */
static int cv_classify(cv_plan *p, const st_tensor *t) {
    const cv_config *c = p->c;
    cv_item it;
    memset(&it, 0, sizeof it);
    it.t = t;
    it.layer = it.expert = it.proj = -1;
    const char *rest = t->name;
    int mtp = 0, shard = 0, packed = cv_ends(t->name, ".weight_packed");
    char lname[ST_MAX_NAME + 1];
    if (packed) { /* classified, checked and written as <base>.weight */
        snprintf(lname, sizeof lname, "%.*s.weight", (int)(strlen(t->name) - strlen(".weight_packed")), t->name);
        rest = lname;
    }
    const cv_known *k = NULL;
    int64_t d0 = 0, d1 = 0;
    if (c->strip && strncmp(rest, "model.", 6) && strncmp(rest, "lm_head.", 8)) { /* the vision tower: colibri runs text */
        p->n_other++;
        return 0;
    }
    if (!strncmp(rest, "model.layers.", 13)) {
        rest += 13;
        int l = cv_index(&rest);
        if (l < 0) return cv_fail("%s: tensor '%s': malformed layer index", cv_path(p->ix, t), t->name);
        if (l >= c->n_layers + c->n_mtp)
            return cv_fail("%s: tensor '%s': layer %d is beyond num_hidden_layers %d + %d MTP layer(s)",
                           cv_path(p->ix, t), t->name, l, c->n_layers, c->n_mtp);
        mtp = l >= c->n_layers;
        it.layer = l;
        shard = 1 + l;
        if (!strncmp(rest, "mlp.experts.", 12)) {
            const char *e = rest + 12;
            int ei = cv_index(&e), pj = -1;
            for (int q = 0; q < 3 && ei >= 0; q++) {
                char want[32];
                snprintf(want, sizeof want, "%s_proj.weight", cv_proj[q]);
                if (!strcmp(e, want)) pj = q;
            }
            if (pj < 0)
                return cv_fail("%s: tensor '%s': unknown or fused expert layout (per-expert "
                               "mlp.experts.E.{gate,up,down}_proj.weight tensors are required)", cv_path(p->ix, t), t->name);
            if (ei >= c->n_experts)
                return cv_fail("%s: tensor '%s': expert %d, but n_routed_experts is %d", cv_path(p->ix, t), t->name,
                               ei, c->n_experts);
            it.cls = CL_EXPERT, it.expert = ei, it.proj = pj;
            d0 = pj == 2 ? c->dim : c->moe_inter, d1 = pj == 2 ? c->moe_inter : c->dim;
        } else if ((k = cv_lookup(cv_layer_names, sizeof cv_layer_names / sizeof *cv_layer_names, rest, mtp))) {
            it.cls = k->cls, d0 = cv_size(c, k->d0), d1 = cv_size(c, k->d1);
        }
    } else if ((k = cv_lookup(cv_global_names, sizeof cv_global_names / sizeof *cv_global_names, rest, 0))) {
        it.cls = k->cls, d0 = cv_size(c, k->d0), d1 = cv_size(c, k->d1);
    }
    if (packed) {
        if (!d0) return cv_fail("%s: tensor '%s' is packed but '%s' is not a weight this converter knows", cv_path(p->ix, t), t->name, lname);
        if (!(it.pname = strdup(lname))) return cv_fail("out of memory");
        if (cv_packed_plan(p, &it, d0, d1) || cv_item_finish(p, &it, mtp) || cv_shard_add(&p->sh[shard], &it)) {
            free(it.pname);
            return -1;
        }
        return 0;
    }
    if (!d0) { /* not a known name: 1-D stays F32, anything else is refused */
        if (t->ndim != 1) {
            char got[128];
            cv_shape_str(t, got, sizeof got);
            return cv_fail("%s: tensor '%s' %s is not a tensor this converter knows; refusing an "
                           "unknown layout", cv_path(p->ix, t), t->name, got);
        }
        it.cls = CL_KEEP;
    } else if (cv_check_shape(p, t, d0, d1)) {
        return -1;
    }
    if (cv_item_finish(p, &it, mtp)) return -1;
    return cv_shard_add(&p->sh[shard], &it);
}

/* Checks every MoE layer holds all experts with all three projections. */
static int cv_check_experts(const cv_plan *p, const cv_shard *s) {
    int E = p->c->n_experts, n = 0;
    for (int i = 0; i < s->n; i++) n += s->it[i].expert >= 0;
    if (!n) return 0;
    for (int e = 0, i = 0; e < E; e++)
        for (int q = 0; q < 3; q++) {
            while (i < s->n && s->it[i].expert < 0) i++;
            if (i < s->n && s->it[i].expert == e && s->it[i].proj == q) { i++; continue; }
            return cv_fail("%s: missing tensor 'model.layers.%d.mlp.experts.%d.%s_proj.weight' (layer %d has routed "
                           "experts, so all %d need gate, up and down)", p->o->src, s->layer, e, cv_proj[q], s->layer, E);
        }
    return 0;
}

static void cv_plan_free(cv_plan *p) {
    for (int i = 0; i < p->nsh; i++) {
        for (int k = 0; k < p->sh[i].n; k++) free(p->sh[i].it[k].pname);
        free(p->sh[i].it);
    }
    free(p->sh);
    memset(p, 0, sizeof *p);
}

static uint64_t cv_out_row(const cv_item *it) {
    switch (it->out) {
    case OUT_F32: return (uint64_t)it->I * 4;
    case OUT_BF16: return (uint64_t)it->I * 2;
    case OUT_COPY: return (uint64_t)it->I * (uint64_t)st_dtype_bytes[it->t->dtype];
    case OUT_QUANT: return qt_row_bytes_of(it->fmt, it->I);
    }
    return 0;
}

/* Builds the plan: every source tensor into a shard, validated; shard
 * sizes computed. 0 or -1 with a message. */
static int cv_plan_build(cv_plan *p, const cv_config *c, const cv_opts *o, const st_index *ix) {
    memset(p, 0, sizeof *p);
    p->c = c, p->o = o, p->ix = ix;
    p->nsh = 1 + c->n_layers + c->n_mtp;
    p->sh = (cv_shard *)calloc((size_t)p->nsh, sizeof *p->sh);
    if (!p->sh) return cv_fail("out of memory");
    for (int i = 0; i < p->nsh; i++) {
        snprintf(p->sh[i].file, sizeof p->sh[i].file, "out-%05d.safetensors", i);
        p->sh[i].layer = i - 1;
    }
    for (int i = 0; i < ix->nt; i++) {
        const st_tensor *t = &ix->t[i];
        size_t nl = strlen(t->name);
        if (nl > 10 && !strcmp(t->name + nl - 10, "_scale_inv")) {
            char base[ST_MAX_NAME + 1];
            snprintf(base, sizeof base, "%.*s", (int)(nl - 10), t->name);
            const st_tensor *b = st_find(ix, base);
            if (!b || b->dtype != ST_F8_E4M3)
                return cv_fail("%s: tensor '%s' scales '%s', which is %s", cv_path(ix, t), t->name, base,
                               b ? "not F8_E4M3" : "not in the source");
            continue; /* read with its weight */
        }
        if (cv_ends(t->name, ".weight_scale") || cv_ends(t->name, ".weight_shape") || cv_ends(t->name, ".weight_zero_point")) {
            char base[ST_MAX_NAME + 16];
            snprintf(base, sizeof base, "%.*s.weight_packed", (int)(strrchr(t->name, '.') - t->name), t->name);
            if (st_find(ix, base) && cv_ends(t->name, "_zero_point"))
                return cv_fail("%s: tensor '%s': asymmetric int4 (a zero point) is not supported; symmetric pack-quantized only",
                               cv_path(ix, t), t->name);
            if (st_find(ix, base)) continue; /* read with its packed weight */
        }
        if (cv_classify(p, t)) return -1;
    }
    for (int i = 0; i < p->nsh; i++) {
        cv_shard *s = &p->sh[i];
        if (!s->n && s->layer >= 0 && s->layer < c->n_layers)
            return cv_fail("%s: no tensors for layer %d (num_hidden_layers is %d)", o->src, s->layer, c->n_layers);
        if (s->n) qsort(s->it, (size_t)s->n, sizeof *s->it, cv_item_cmp);
        if (cv_check_experts(p, s)) return -1;
        for (int k = 0; k < s->n; k++) {
            const cv_item *it = &s->it[k];
            s->src_bytes += it->t->nbytes + (it->scale ? it->scale->nbytes : 0);
            s->out_bytes += (uint64_t)it->O * cv_out_row(it) + 4 * qt_scale_count(it->fmt, it->O, it->I, it->gs);
            s->ntensors += 1 + (it->out == OUT_QUANT);
        }
    }
    return 0;
}

/* ================================================================ DST files */

/* Checks that DST/name is absent or a regular file, by lstat: a FIFO
 * would block the open that writes it and a symbolic link would send the
 * bytes elsewhere. Called before every file written in DST (st.h and
 * compat.h open their temporaries without O_NOFOLLOW), as well as on the
 * whole directory up front. 0, or -1 with a message naming the file. */
static int cv_dst_regular(const char *dst, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, name);
    if (lstat(path, &st)) return errno == ENOENT ? 0 : cv_fail("%s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) return 0;
    return cv_fail("%s is %s, not a regular file; colibri-convert writes or reads this name: remove it", path, compat_kind(st.st_mode));
}

/* compat_write_atomic into DST/name, after checking the name and the
 * temporary it uses (name.tmp.PID). 0 or -1 with a message. */
static int cv_write_file(const char *dst, const char *name, const void *data, size_t n) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dst, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", name, (long)getpid());
    if (cv_dst_regular(dst, tmp) || cv_dst_regular(dst, name)) return -1;
    if (compat_write_atomic(path, data, n)) return cv_fail("%s: %s", path, compat_strerror(errno));
    return 0;
}

/* ================================================================ manifest */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} cv_buf;

static void cv_printf(cv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cv_printf(cv_buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = b->oom ? 0 : vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (b->oom || k < 0) { b->oom = 1; return; }
        if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + (size_t)k + 1) nc *= 2;
        char *ns = (char *)realloc(b->s, nc);
        if (!ns) { b->oom = 1; return; }
        b->s = ns, b->cap = nc;
    }
}

/* Appends s as a JSON string literal. */
static void cv_json_str(cv_buf *b, const char *s) {
    cv_printf(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') cv_printf(b, "\\%c", ch);
        else if (ch < 0x20) cv_printf(b, "\\u%04x", ch);
        else cv_printf(b, "%c", ch);
    }
    cv_printf(b, "\"");
}

static uint64_t cv_fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
#define CV_FNV0 14695981039346656037ull

/* cvh1, the content checksum of a finished shard: 64 bits, computed while
 * the shard is written and again when a rerun reads it back, so it must
 * keep up with the disk. Eight lanes over little-endian 8-byte words (lane
 * i takes words i, i+8, ...; per word: xor, multiply by an odd constant,
 * xorshift), independent so their multiplies overlap (or vectorize):
 * ~10-16 GB/s on one core against ~5-8 for one multiply chain. Then the
 * byte count, the lanes, the 0..63 tail bytes (whole words, then the rest
 * zero-padded) are folded in one chain and a xorshift-multiply finalizer
 * spreads every bit. Each step is a bijection of the state for a given
 * word, so a change confined to one word (a flipped bit) always changes
 * the value. Any split of the bytes into cv_hash_update calls gives the
 * same value. It catches corruption, not forgery. tests/test_convert.py
 * has a reference implementation. */
#define CV_CK_NAME "cvh1"
#define CV_K1 0x9E3779B185EBCA87ull
#define CV_K2 0xC2B2AE3D27D4EB4Full
#define CV_K3 0x165667B19E3779F9ull
#define CV_LANES 8

typedef struct {
    uint64_t v[CV_LANES], n;   /* lanes; bytes hashed */
    uint8_t buf[8 * CV_LANES]; /* a partial block */
    size_t nb;
} cv_hash;

static inline uint64_t cv_le64(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

static inline uint64_t cv_mix(uint64_t a, uint64_t w) {
    a = (a ^ w) * CV_K1;
    return a ^ a >> 29;
}

static void cv_hash_init(cv_hash *h) {
    memset(h, 0, sizeof *h);
    for (int i = 0; i < CV_LANES; i++) h->v[i] = (uint64_t)(i + 1) * CV_K3;
}

/* Mixes whole blocks of 8 * CV_LANES bytes into the lanes; returns the bytes used. */
static size_t cv_hash_blocks(uint64_t *restrict v, const uint8_t *p, size_t n) {
    size_t used = 0;
    for (; n - used >= 8 * CV_LANES; used += 8 * CV_LANES)
        for (int i = 0; i < CV_LANES; i++) v[i] = cv_mix(v[i], cv_le64(p + used + 8 * i));
    return used;
}

static void cv_hash_update(cv_hash *h, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    const size_t blk = 8 * CV_LANES;
    h->n += n;
    if (h->nb) { /* complete the partial block first */
        size_t k = blk - h->nb < n ? blk - h->nb : n;
        memcpy(h->buf + h->nb, p, k);
        h->nb += k, p += k, n -= k;
        if (h->nb < blk) return;
        cv_hash_blocks(h->v, h->buf, blk);
        h->nb = 0;
    }
    uint64_t v[CV_LANES]; /* a local copy the compiler keeps in registers */
    memcpy(v, h->v, sizeof v);
    size_t used = cv_hash_blocks(v, p, n);
    memcpy(h->v, v, sizeof v);
    memcpy(h->buf, p + used, n - used);
    h->nb = n - used;
}

static uint64_t cv_hash_final(const cv_hash *h) {
    uint64_t x = h->n;
    for (int i = 0; i < CV_LANES; i++) x = cv_mix(x, h->v[i]);
    size_t k = 0;
    for (; k + 8 <= h->nb; k += 8) x = cv_mix(x, cv_le64(h->buf + k));
    if (k < h->nb) {
        uint8_t w[8] = {0};
        memcpy(w, h->buf + k, h->nb - k);
        x = cv_mix(x, cv_le64(w));
    }
    x ^= x >> 33, x *= CV_K2, x ^= x >> 29, x *= CV_K3, x ^= x >> 32;
    return x;
}

/* cvh1 of the whole regular file at path, read back in 8 MB pieces; its
 * size in *bytes. Opens with compat_open_regular, so a FIFO is refused, not
 * waited on. 0, or -1 with errno. */
static int cv_file_hash(const char *path, uint64_t *out, uint64_t *bytes) {
    const size_t piece = (size_t)8 << 20;
    int fd = compat_open_regular(path, 0);
    if (fd < 0) return -1;
    int64_t size = compat_file_size(fd);
    uint8_t *b = size < 0 ? NULL : (uint8_t *)malloc(piece);
    int rc = 0, e = size < 0 ? errno : ENOMEM;
    cv_hash h;
    cv_hash_init(&h);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    if (!b) rc = -1;
    for (uint64_t off = 0; !rc && off < (uint64_t)size; off += piece) {
        size_t n = (uint64_t)size - off < piece ? (size_t)((uint64_t)size - off) : piece;
        if (compat_pread_full(fd, b, n, off)) rc = -1, e = errno;
        else cv_hash_update(&h, b, n);
    }
#ifdef POSIX_FADV_DONTNEED
    if (!rc) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* read once; keep the cache for the source */
#endif
    free(b);
    close(fd);
    if (rc) return errno = e, -1;
    *out = cv_hash_final(&h), *bytes = (uint64_t)size;
    return 0;
}

/* The parameters that shape the output, in manifest order. */
typedef struct {
    const char *key, *what, *flag;
    int val;
} cv_param;

enum { P_GATE, P_UP, P_DOWN, P_DENSE, P_MTP, P_GS, P_LAYERS, P_N };

static void cv_params(const cv_opts *o, const cv_config *c, cv_param *pr) {
    const cv_param v[P_N] = {
        {"gate_bits", "gate bits", "--gate-bits", o->proj_bits[0]},  {"up_bits", "up bits", "--up-bits", o->proj_bits[1]},
        {"down_bits", "down bits", "--down-bits", o->proj_bits[2]},  {"dense_bits", "dense bits", "--dense-bits", o->dense_bits},
        {"mtp_bits", "MTP bits", "--mtp-bits", o->mtp_bits},          {"group_size", "group size", "--group-size", o->gs},
        {"layers", "layer count", "num_hidden_layers in config.json", c->n_layers},
    };
    memcpy(pr, v, sizeof v);
}

/* Source identity: config.json and each shard's name, size and header hash. */
typedef struct {
    uint64_t config_hash;
    int n;
    char **name;
    uint64_t *size, *hash;
} cv_source;

static void cv_source_free(cv_source *s) {
    for (int i = 0; i < s->n; i++) free(s->name[i]);
    free(s->name);
    free(s->size);
    free(s->hash);
    memset(s, 0, sizeof *s);
}

static int cv_source_id(const st_index *ix, const char *cfg, size_t cfg_len, cv_source *s) {
    memset(s, 0, sizeof *s);
    s->config_hash = cv_fnv(CV_FNV0, cfg, cfg_len);
    s->name = (char **)calloc((size_t)ix->nfiles, sizeof *s->name);
    s->size = (uint64_t *)calloc((size_t)ix->nfiles, 8);
    s->hash = (uint64_t *)calloc((size_t)ix->nfiles, 8);
    if (!s->name || !s->size || !s->hash) return cv_fail("out of memory");
    for (int i = 0; i < ix->nfiles; i++, s->n++) {
        const st_file *f = &ix->files[i];
        const char *base = strrchr(f->path, '/');
        uint8_t lb[8];
        uint64_t hl = 0;
        if (!(s->name[i] = strdup(base ? base + 1 : f->path))) return cv_fail("out of memory");
        s->size[i] = f->size;
        if (compat_pread_full(f->fd, lb, 8, 0)) return cv_fail("%s: %s", f->path, strerror(errno));
        for (int k = 7; k >= 0; k--) hl = hl << 8 | lb[k];
        char *h = (char *)malloc(hl + 1); /* st.h capped and checked hl */
        if (!h) return cv_fail("out of memory");
        if (compat_pread_full(f->fd, h, hl, 8)) { free(h); return cv_fail("%s: %s", f->path, strerror(errno)); }
        s->hash[i] = cv_fnv(cv_fnv(CV_FNV0, lb, 8), h, hl);
        free(h);
    }
    return 0;
}

/* Renders the manifest: parameters, source identity and finished shards
 * (done[i] != 0) with their sizes and checksums. Caller frees b->s. */
static void cv_manifest_text(cv_buf *b, const cv_param *pr, const cv_source *src, const cv_plan *p, const uint8_t *done) {
    cv_printf(b, "{\n  \"converter\": \"%s\",\n  \"params\": {\n", CV_VERSION);
    for (int i = 0; i < P_N; i++) cv_printf(b, "    \"%s\": %d,\n", pr[i].key, pr[i].val);
    cv_printf(b, "    \"config_fnv1a64\": \"%016llx\",\n    \"source\": [", (unsigned long long)src->config_hash);
    for (int i = 0; i < src->n; i++) {
        cv_printf(b, "%s\n      {\"file\": ", i ? "," : "");
        cv_json_str(b, src->name[i]);
        cv_printf(b, ", \"bytes\": %llu, \"header_fnv1a64\": \"%016llx\"}", (unsigned long long)src->size[i], (unsigned long long)src->hash[i]);
    }
    cv_printf(b, "\n    ]\n  },\n  \"shards\": [");
    int k = 0;
    for (int i = 0; i < p->nsh; i++)
        if (done[i])
            cv_printf(b, "%s\n    {\"file\": \"%s\", \"bytes\": %llu, \"checksum\": \"%s:%016llx\"}", k++ ? "," : "", p->sh[i].file,
                      (unsigned long long)p->sh[i].file_bytes, CV_CK_NAME, (unsigned long long)p->sh[i].file_hash);
    cv_printf(b, "\n  ]\n}\n");
}

static int cv_manifest_write(const char *dst, const cv_param *pr, const cv_source *src, const cv_plan *p, const uint8_t *done) {
    cv_buf b = {0};
    cv_manifest_text(&b, pr, src, p, done);
    int rc = b.oom ? cv_fail("out of memory") : cv_write_file(dst, CV_MANIFEST, b.s, b.n);
    free(b.s);
    return rc;
}

/* Compares the recorded source identity with this run's; prints each
 * difference. Returns the number of differences. */
static int cv_source_diff(const js_doc *d, int srcarr, const cv_source *src, const char *path) {
    int diffs = 0, n = js_count(d, srcarr), i = 0;
    if (js_typeof(d, srcarr) != JS_ARR) return cv_fail("%s: 'source' is not a list", path), 1;
    if (n != src->n) return cv_fail("%s: source differs: DST was converted from %d shard file(s), SRC has %d", path, n, src->n), 1;
    for (int e = js_first(d, srcarr); e >= 0; e = js_next(d, e), i++) {
        const char *f = js_str(d, js_get(d, e, "file")), *h = js_str(d, js_get(d, e, "header_fnv1a64"));
        int by = js_get(d, e, "bytes");
        char want[20];
        snprintf(want, sizeof want, "%016llx", (unsigned long long)src->hash[i]);
        if (!f || strcmp(f, src->name[i]))
            diffs++, cv_fail("%s: source differs: shard %d was '%s', now '%s'", path, i, f ? f : "?", src->name[i]);
        else if (!js_is_int(d, by) || (uint64_t)js_int(d, by) != src->size[i])
            diffs++, cv_fail("%s: source differs: %s was %lld bytes, now %llu", path, f, (long long)js_int(d, by), (unsigned long long)src->size[i]);
        else if (!h || strcmp(h, want))
            diffs++, cv_fail("%s: source differs: the header of %s changed", path, f);
    }
    return diffs;
}

/* Says why a shard listed as finished is converted again. */
static void cv_redo(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cv_redo(const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "colibri-convert: %s: ", path);
    vfprintf(stderr, fmt, ap);
    fputs("; converting it again\n", stderr);
    va_end(ap);
}

/* Parses a manifest checksum "cvh1:<16 hex digits>". 0 or -1. */
static int cv_ck_parse(const char *ck, uint64_t *h) {
    size_t nl = strlen(CV_CK_NAME);
    if (strncmp(ck, CV_CK_NAME, nl) || ck[nl] != ':' || strlen(ck + nl + 1) != 16 || strspn(ck + nl + 1, "0123456789abcdefABCDEF") != 16)
        return -1;
    *h = strtoull(ck + nl + 1, NULL, 16);
    return 0;
}

/* Shards read back to verify them, for the summary line. */
typedef struct {
    int n, unrecorded; /* read back; listed without a checksum */
    uint64_t bytes;
    double secs;
} cv_vstat;

/* Decides whether shard sh, listed as finished by manifest entry e, is
 * kept: it must exist with its recorded size and read back to its recorded
 * checksum, since a size check alone keeps a flipped bit forever. A kept
 * shard is only read. When it cannot be kept, says why (it is converted
 * again). 1 keep, 0 convert again, -1 out of memory (with a message). */
static int cv_finished_ok(const char *dst, cv_shard *sh, const js_doc *d, int e, cv_vstat *vs) {
    char sp[PATH_MAX];
    struct stat st;
    int by = js_get(d, e, "bytes");
    const char *ck = js_str(d, js_get(d, e, "checksum"));
    long long want = js_is_int(d, by) ? (long long)js_int(d, by) : -1;
    uint64_t want_h, got_h, got_n;
    snprintf(sp, sizeof sp, "%s/%s", dst, sh->file);
    if (stat(sp, &st))
        return cv_redo(sp, "recorded as finished with %lld bytes but %s", want, errno == ENOENT ? "it is missing" : strerror(errno)), 0;
    if (want < 0 || (uint64_t)st.st_size != (uint64_t)want)
        return cv_redo(sp, "recorded as finished with %lld bytes but it has %lld", want, (long long)st.st_size), 0;
    if (!ck) return vs->unrecorded++, 0; /* an older converter's manifest: said once, by cv_manifest_load */
    if (cv_ck_parse(ck, &want_h))
        return cv_redo(sp, "recorded checksum is not %s:<16 hex digits>, so it cannot be verified", CV_CK_NAME), 0;
    double t0 = compat_now();
    if (cv_file_hash(sp, &got_h, &got_n)) {
        if (errno == ENOMEM) return cv_fail("out of memory");
        return cv_redo(sp, "could not be read back to verify it: %s", compat_strerror(errno)), 0;
    }
    vs->n++, vs->bytes += got_n, vs->secs += compat_now() - t0;
    if (got_n != (uint64_t)want || got_h != want_h)
        return cv_redo(sp, "content differs from the checksum recorded when it was written (%s:%016llx, now %016llx): "
                           "changed on disk since", CV_CK_NAME, (unsigned long long)want_h, (unsigned long long)got_h), 0;
    sh->file_bytes = got_n, sh->file_hash = got_h;
    return 1;
}

/* Reads an existing manifest: refuses (-1) when any parameter or the
 * source differs, naming each; otherwise marks in done[] the shards it
 * lists that still exist and read back to their recorded size and
 * checksum (cv_finished_ok). Returns 0 (no manifest: nothing done), 0
 * (compatible) or -1. */
static int cv_manifest_load(const char *dst, const cv_param *pr, const cv_source *src, cv_plan *p, uint8_t *done) {
    char path[PATH_MAX], jerr[160];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dst, CV_MANIFEST);
    char *text = compat_read_file(path, 64u << 20, &len);
    if (!text) return errno == ENOENT ? 0 : cv_fail("%s: %s", path, compat_strerror(errno));
    js_doc *d = js_parse(text, len, jerr, sizeof jerr);
    free(text);
    if (!d) return cv_fail("%s: not valid JSON: %s (remove it with the shards, or use a new DST)", path, jerr);
    int params = js_get(d, d->root, "params"), shards = js_get(d, d->root, "shards");
    const char *ver = js_str(d, js_get(d, d->root, "converter"));
    if (!ver || strcmp(ver, CV_VERSION) || js_typeof(d, params) != JS_OBJ || js_typeof(d, shards) != JS_ARR) {
        cv_fail("%s: not a %s manifest", path, CV_VERSION);
        js_free(d);
        return -1;
    }
    int diffs = 0;
    for (int i = 0; i < P_N; i++) {
        int v = js_get(d, params, pr[i].key);
        if (js_is_int(d, v) && js_int(d, v) == pr[i].val) continue;
        diffs++;
        cv_fail("%s: %s differ: DST was converted with %s %lld, this run asks for %d (%s)", path, pr[i].what, pr[i].what,
                (long long)js_int(d, v), pr[i].val, pr[i].flag);
    }
    const char *ch = js_str(d, js_get(d, params, "config_fnv1a64"));
    char want[20];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)src->config_hash);
    if (!ch || strcmp(ch, want)) diffs++, cv_fail("%s: source differs: SRC/config.json changed", path);
    diffs += cv_source_diff(d, js_get(d, params, "source"), src, path);
    if (diffs) {
        cv_fail("refusing to mix formats in one container: rerun with the recorded parameters, or convert into a new directory");
        js_free(d);
        return -1;
    }
    cv_vstat vs = {0, 0, 0, 0};
    int rc = 0;
    for (int e = js_first(d, shards); e >= 0 && !rc; e = js_next(d, e)) {
        const char *f = js_str(d, js_get(d, e, "file"));
        for (int i = 0; f && i < p->nsh && !rc; i++) {
            if (strcmp(f, p->sh[i].file)) continue;
            int k = cv_finished_ok(dst, &p->sh[i], d, e, &vs);
            if (k < 0) rc = -1;
            done[i] = k > 0;
        }
    }
    char hb[32];
    if (vs.unrecorded)
        fprintf(stderr, "colibri-convert: %s lists %d finished shard(s) without a content checksum (written by an older "
                        "colibri-convert), so they cannot be verified; converting them again\n", path, vs.unrecorded);
    if (vs.n)
        fprintf(stderr, "colibri-convert: read back %d finished shard(s), %s, to check their checksums in %.2f s\n", vs.n,
                cv_human(vs.bytes, hb, sizeof hb), vs.secs);
    js_free(d);
    return rc;
}

/* ================================================================ DST */

/* The metadata files copied from SRC besides config.json (read up front,
 * so a bad one is refused before hours of converting). */
static const char *const cv_extra[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json"};
#define CV_NEXTRA 3

/* Opens and locks DST's lock file (flock) into *lock. O_NOFOLLOW and
 * O_NONBLOCK, then fstat: a symbolic link, FIFO or other non-regular file
 * there is refused by name, never followed or waited on. 0 or -1. */
static int cv_dst_lock(const char *dst, int *lock) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dst, CV_LOCK);
    *lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (*lock < 0)
        return cv_fail("%s: %s", path, errno == ELOOP ? "a symbolic link; remove it (the lock file must be a regular file)" : strerror(errno));
    if (fstat(*lock, &st)) return cv_fail("%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return cv_fail("%s is %s, not a regular file; remove it", path, compat_kind(st.st_mode));
    if (flock(*lock, LOCK_EX | LOCK_NB))
        return cv_fail("%s: %s", path,
                       errno == EWOULDBLOCK ? "another colibri-convert is writing this DST (lock held)" : strerror(errno));
    return 0;
}

/* What a name in DST is to the converter. */
enum { DN_OTHER, DN_OURS, DN_TMP, DN_FOREIGN };

static int cv_dst_name(const cv_plan *p, const char *name) {
    size_t l = strlen(name);
    for (int i = 0; i < p->nsh; i++) {
        size_t fl = strlen(p->sh[i].file);
        if (!strncmp(name, p->sh[i].file, fl))
            return !name[fl] ? DN_OURS : !strcmp(name + fl, ".tmp") ? DN_TMP : DN_OTHER; /* st_writer's shard.tmp */
    }
    const char *meta[2 + CV_NEXTRA] = {CV_MANIFEST, "config.json", cv_extra[0], cv_extra[1], cv_extra[2]};
    for (int i = 0; i < 2 + CV_NEXTRA; i++) {
        size_t ml = strlen(meta[i]);
        if (!strncmp(name, meta[i], ml) && (!name[ml] || !strncmp(name + ml, ".tmp.", 5))) /* compat_write_atomic's name.tmp.PID */
            return name[ml] ? DN_TMP : DN_OURS;
    }
    if (!strcmp(name, CV_LOCK) || !strcmp(name, "model.safetensors.index.json")) return DN_OURS; /* locked; read by the engine */
    return l >= 12 && !strcmp(name + l - 12, ".safetensors") ? DN_FOREIGN : DN_OTHER;
}

/* Creates DST if needed, takes the lock (fd in *lock), refuses SRC == DST,
 * foreign *.safetensors files and anything but a regular file under a name
 * the converter writes or the engine reads, and removes our stale
 * temporaries. */
static int cv_dst_prepare(const cv_opts *o, const cv_plan *p, int *lock) {
    struct stat ds, st;
    if (mkdir(o->dst, 0755) && errno != EEXIST) return cv_fail("%s: %s", o->dst, strerror(errno));
    if (stat(o->dst, &ds) || !S_ISDIR(ds.st_mode)) return cv_fail("%s: not a directory", o->dst);
    if (compat_same_file(o->src, o->dst))
        return cv_fail("DST %s is SRC; convert into another directory", o->dst);
    if (cv_dst_lock(o->dst, lock)) return -1;
    DIR *dp = opendir(o->dst);
    if (!dp) return cv_fail("%s: %s", o->dst, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(dp))) {
        int kind = cv_dst_name(p, de->d_name);
        if (kind == DN_OTHER) continue;
        if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
            if (errno != ENOENT) rc = cv_fail("%s/%s: %s", o->dst, de->d_name, strerror(errno));
        } else if (kind == DN_FOREIGN) {
            rc = cv_fail("%s/%s: not a shard of this conversion (the engine would index it); use an empty DST", o->dst, de->d_name);
        } else if (!S_ISREG(st.st_mode)) { /* we never make one: someone else's, so not ours to remove */
            rc = cv_fail("%s/%s is %s, not a regular file; colibri-convert writes or reads this name: remove it", o->dst, de->d_name,
                         compat_kind(st.st_mode));
        } else if (kind == DN_TMP) { /* left by an earlier run that did not finish; we hold the lock */
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", o->dst, de->d_name);
            unlink(path);
        }
    }
    closedir(dp);
    return rc;
}

/* Refuses shards of ours in DST when there is no manifest saying how they
 * were made. */
static int cv_dst_orphans(const cv_opts *o, const cv_plan *p) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", o->dst, CV_MANIFEST);
    if (!stat(path, &st)) return 0;
    for (int i = 0; i < p->nsh; i++) {
        snprintf(path, sizeof path, "%s/%s", o->dst, p->sh[i].file);
        if (!stat(path, &st))
            return cv_fail("%s exists but %s/%s does not say how it was made; remove it or use an empty DST", path,
                           o->dst, CV_MANIFEST);
    }
    return 0;
}

/* Cuts the top-level member "quantization_config" out of a JSON object
 * text (already validated), keeping every other byte. Returns a new buffer. */
static char *cv_strip_qconfig(const char *t, size_t n, size_t *out_len) {
    size_t i = 0, prev_end = 0, cut0 = 0, cut1 = 0;
    int depth = 0, found = 0, first = 1;
    while (i < n && t[i] != '{') i++;
    i++;
    prev_end = i;
    while (i < n && !found) {
        while (i < n && (isspace((unsigned char)t[i]) || t[i] == ',')) i++;
        if (i >= n || t[i] == '}') break;
        size_t k0 = i++;
        while (i < n && t[i] != '"') i += t[i] == '\\' ? 2 : 1;
        int is_q = i - k0 - 1 == 19 && !memcmp(t + k0 + 1, "quantization_config", 19);
        i++;
        while (i < n && t[i] != ':') i++;
        i++;
        depth = 0; /* skip the value */
        while (i < n) {
            char ch = t[i];
            if (ch == '"') {
                i++;
                while (i < n && t[i] != '"') i += t[i] == '\\' ? 2 : 1;
            } else if (ch == '{' || ch == '[') depth++;
            else if (ch == '}' || ch == ']') { if (depth-- == 0) break; }
            else if (ch == ',' && depth == 0) break;
            i++;
        }
        size_t v1 = i; /* at ',' or the closing '}' */
        if (is_q) {
            found = 1;
            if (t[v1] == ',') cut0 = k0, cut1 = v1 + 1;             /* "q": v,  → drop through the comma */
            else if (!first) cut0 = prev_end, cut1 = v1;            /* , "q": v } → drop the comma before */
            else cut0 = k0, cut1 = v1;
        }
        prev_end = v1;
        first = 0;
    }
    char *o = (char *)malloc(n + 1);
    if (!o) return NULL;
    if (!found) cut0 = cut1 = 0;
    memcpy(o, t, cut0);
    memcpy(o + cut0, t + cut1, n - cut1);
    *out_len = n - (cut1 - cut0);
    o[*out_len] = 0;
    return o;
}

/* Reads the generation and tokenizer files present in SRC into text[] (NULL
 * when absent), before any converting, so that a bad one is refused up
 * front. 0 or -1 with a message naming the file. */
static int cv_extra_load(const char *src, char **text, size_t *len) {
    char path[PATH_MAX];
    for (int i = 0; i < CV_NEXTRA; i++) {
        snprintf(path, sizeof path, "%s/%s", src, cv_extra[i]);
        if (!(text[i] = compat_read_file(path, 1u << 30, &len[i])) && errno != ENOENT)
            return cv_fail("%s: %s", path, errno == EFBIG ? "larger than 1 GB" : compat_strerror(errno));
    }
    return 0;
}

/* Writes config.json (without quantization_config) and the extra files
 * read from SRC into DST, each atomically. */
static int cv_copy_meta(const cv_opts *o, const char *cfg, size_t cfg_len, char *const *text, const size_t *len) {
    char jerr[160];
    size_t n;
    char *c = cv_strip_qconfig(cfg, cfg_len, &n);
    if (!c) return cv_fail("out of memory");
    js_doc *d = js_parse(c, n, jerr, sizeof jerr);
    int bad = !d || js_get(d, d->root, "quantization_config") >= 0;
    js_free(d);
    if (bad) { free(c); return cv_fail("%s/config.json: could not remove quantization_config", o->src); }
    int rc = cv_write_file(o->dst, "config.json", c, n);
    free(c);
    for (int i = 0; i < CV_NEXTRA && !rc; i++)
        if (text[i]) rc = cv_write_file(o->dst, cv_extra[i], text[i], len[i]);
    return rc;
}

/* ================================================================ convert */

/* One unit of parallel work: rows [r0, r0 + rows) of an item, converted into
 * out (their packed rows) and s (the item's whole scale array). */
typedef struct {
    const cv_item *it;
    const float *fsc;   /* FP8 block scales of the item, or NULL */
    int64_t r0, rows;
    uint8_t *out;
    float *s;
    int64_t bad;        /* non-finite values met */
    int err;            /* errno of a failed read or allocation, or 0 */
} cv_unit;

/* Per-thread scratch: a unit's source bytes and their f32 values. */
typedef struct {
    void *raw, *f;
    size_t raw_cap, f_cap;
} cv_scratch;

typedef struct {
    const cv_opts *o;
    const st_index *ix;
    float e4m3[256];
    double t0, last;
    uint64_t todo, done, read, written;
    int tty, c_layers, nthreads;
    cv_scratch *scr;    /* [nthreads]                          */
    uint8_t *out;       /* converted weight bytes of one batch */
    size_t out_cap;
    cv_unit *u;         /* units of one batch                  */
    int nu, ucap;
} cv_run;

/* e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
 * subnormal (m/8 · 2^-6); 0x7f/0xff are NaN; no infinities; max 448. */
static void cv_e4m3_table(float *lut) {
    for (int c = 0; c < 256; c++) {
        int e = (c >> 3) & 15, m = c & 7;
        float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
        lut[c] = c & 128 ? -v : v;
    }
}

static inline uint16_t cv_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static int cv_grow(void **p, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    free(*p);
    *p = malloc(n);
    *cap = *p ? n : 0;
    return *p ? 0 : -1;
}

static void cv_progress(cv_run *r) {
    double now = compat_now(), el = now - r->t0;
    if (!r->tty || now - r->last < 0.25) return;
    r->last = now;
    double rate = r->done / (el > 1e-9 ? el : 1e-9), eta = rate > 0 ? (r->todo - r->done) / rate : 0;
    int w = 30, fill = r->todo ? (int)(w * (double)r->done / r->todo) : w;
    fprintf(stderr, "\rcolibri-convert: [%.*s%*s] %5.1f%% %.2f/%.2f GB, %.0f MB/s, ETA %.0f s  ", fill, "##############################",
            w - fill, "", r->todo ? 100.0 * r->done / r->todo : 100.0, r->done / 1e9, r->todo / 1e9, rate / 1e6, eta);
}

/* Source rows (raw bytes of `it`, first row r0) as f32 into f. */
/* Source bytes of one row of an item. */
static size_t cv_in_row(const cv_item *it) {
    return it->pname ? (size_t)it->t->shape[1] * 4 : (size_t)it->I * (size_t)st_dtype_bytes[it->t->dtype];
}

static void cv_decode(const cv_run *r, const cv_item *it, const void *raw, int64_t r0, int64_t rows, const float *fsc, float *f) {
    const int64_t I = it->I, nb1 = (I + CV_FP8_BLOCK - 1) / CV_FP8_BLOCK;
    const size_t cnt = (size_t)rows * (size_t)I;
    if (it->pname) { /* int4 q + 8, two to a byte, low nibble first; w = q · group scale */
        const int64_t ng = I / it->pgs;
        for (int64_t o = 0; o < rows; o++) {
            const uint8_t *q = (const uint8_t *)raw + (size_t)o * cv_in_row(it);
            const float *sr = fsc + (size_t)(r0 + o) * (size_t)ng;
            for (int64_t j = 0; j < I; j++) f[o * I + j] = (float)(((q[j >> 1] >> ((j & 1) * 4)) & 15) - 8) * sr[j / it->pgs];
        }
    } else if (it->t->dtype == ST_BF16) { /* the top half of an f32; memcpy keeps it vectorizable and alias-clean */
        const uint8_t *b = (const uint8_t *)raw;
#pragma omp simd
        for (size_t i = 0; i < cnt; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(f + i, &u, 4);
        }
    } else if (it->t->dtype == ST_F8_E4M3) {
        const uint8_t *q = (const uint8_t *)raw;
        for (int64_t o = 0; o < rows; o++) {
            const float *sr = fsc + (size_t)((r0 + o) / CV_FP8_BLOCK) * (size_t)nb1;
            for (int64_t j = 0; j < I; j++) f[o * I + j] = r->e4m3[q[o * I + j]] * sr[j / CV_FP8_BLOCK];
        }
    } else {
        st_convert_f32_(it->t->dtype, raw, f, cnt);
    }
}

/* Converts one unit with thread scratch sc: reads its rows, decodes them
 * to f32 and writes them in the item's output format. */
static void cv_unit_run(const cv_run *r, cv_unit *u, cv_scratch *sc) {
    const cv_item *it = u->it;
    const int64_t I = it->I, nrun = it->fmt == QT_I4G ? (I + it->gs - 1) / it->gs : 1;
    const size_t esz = (size_t)st_dtype_bytes[it->t->dtype], cnt = (size_t)u->rows * (size_t)I, in_row = cv_in_row(it);
    if (cv_grow(&sc->raw, &sc->raw_cap, (size_t)u->rows * in_row) || cv_grow(&sc->f, &sc->f_cap, cnt * 4)) {
        u->err = ENOMEM;
        return;
    }
    if (compat_pread_full(r->ix->files[it->t->file].fd, sc->raw, (size_t)u->rows * in_row, it->t->off + (uint64_t)u->r0 * in_row)) {
        u->err = errno ? errno : EIO;
        return;
    }
    if (it->copy4) { /* the source's int4 groups are the output's: nibbles and scales as they are */
        const size_t orow = (size_t)cv_out_row(it);
        for (int64_t o = 0; o < u->rows; o++) {
            uint8_t *dst = u->out + (size_t)o * orow;
            memcpy(dst, (const uint8_t *)sc->raw + (size_t)o * in_row, orow);
            if (I & 1) dst[orow - 1] = (uint8_t)((dst[orow - 1] & 15) | 0x80); /* the padding nibble decodes to 0 */
            memcpy(u->s + (size_t)(u->r0 + o) * (size_t)nrun, u->fsc + (size_t)(u->r0 + o) * (size_t)nrun, (size_t)nrun * 4);
        }
        u->bad = 0;
        return;
    }
    float *f = (float *)sc->f;
    cv_decode(r, it, sc->raw, u->r0, u->rows, u->fsc, f);
    if (it->out == OUT_QUANT) {
        u->bad = qt_quantize(f, u->rows, I, it->fmt, it->gs, u->out, u->s + (size_t)u->r0 * (size_t)nrun);
        return;
    }
    int64_t bad = 0;
    for (size_t i = 0; i < cnt; i++) bad += !(fabsf(f[i]) <= FLT_MAX);
    if (it->out == OUT_F32) memcpy(u->out, f, cnt * 4);
    else if (it->out == OUT_COPY) memcpy(u->out, sc->raw, cnt * esz);
    else
        for (size_t i = 0; i < cnt; i++) {
            uint16_t h = cv_bf16(f[i]);
            bad += (h & 0x7f80) == 0x7f80 && fabsf(f[i]) <= FLT_MAX; /* finite but beyond BF16 */
            memcpy(u->out + 2 * i, &h, 2);
        }
    u->bad = bad;
}

/* Queues rows [r0, r0 + n) of `it` (output at out) as units of about
 * CV_SUB source bytes. 0 or -1. */
static int cv_queue(cv_run *r, const cv_item *it, const float *fsc, int64_t r0, int64_t n, uint8_t *out, float *s) {
    const size_t in_row = cv_in_row(it), orow = (size_t)cv_out_row(it);
    const int64_t sub = in_row >= CV_SUB ? 1 : (int64_t)(CV_SUB / in_row);
    for (int64_t b = 0; b < n; b += sub) {
        if (r->nu == r->ucap) {
            int nc = r->ucap ? 2 * r->ucap : 256;
            cv_unit *nu = (cv_unit *)realloc(r->u, (size_t)nc * sizeof *nu);
            if (!nu) return cv_fail("out of memory");
            r->u = nu, r->ucap = nc;
        }
        cv_unit *u = &r->u[r->nu++];
        memset(u, 0, sizeof *u);
        u->it = it, u->fsc = fsc, u->r0 = r0 + b, u->rows = n - b < sub ? n - b : sub, u->out = out + (size_t)b * orow, u->s = s;
    }
    return 0;
}

/* Runs the queued units over the threads and empties the queue. Dynamic
 * scheduling, so a thread slowed by another process does not hold the
 * others; rows are converted independently, so the bytes do not depend on
 * the thread count. Returns 0 or -1 naming the file and tensor. */
static int cv_run_units(cv_run *r) {
    int n = r->nu;
    cv_unit *u = r->u;
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
    for (int i = 0; i < n; i++) cv_unit_run(r, &u[i], &r->scr[compat_omp_thread()]);
    r->nu = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = u[i].it->t;
        uint64_t bytes = (uint64_t)u[i].rows * (uint64_t)cv_in_row(u[i].it);
        r->read += bytes, r->done += bytes;
        if (u[i].err)
            return cv_fail("%s: tensor '%s': read failed: %s", cv_path(r->ix, t), t->name,
                           u[i].err == EIO ? "file truncated or I/O error" : strerror(u[i].err));
    }
    for (int i = 0; i < n;) { /* units of one item are consecutive */
        int64_t bad = 0;
        const cv_item *it = u[i].it;
        for (; i < n && u[i].it == it; i++) bad += u[i].bad;
        if (bad)
            return cv_fail("%s: tensor '%s' has %lld non-finite values%s", cv_path(r->ix, it->t), cv_name(it), (long long)bad,
                           it->out == OUT_BF16 ? " (or values beyond the BF16 range)" : "");
    }
    cv_progress(r);
    return 0;
}

/* Reads an FP8 item's block scales (NULL for other items). 0 or -1. */
static int cv_read_fsc(cv_run *r, const cv_item *it, float **fsc) {
    char err[600];
    *fsc = NULL;
    if (!it->scale) return 0;
    if (!(*fsc = (float *)malloc((size_t)it->scale->numel * 4))) return cv_fail("out of memory");
    if (st_read_f32(r->ix, it->scale, *fsc, err, sizeof err)) return cv_fail("%s", err);
    r->read += it->scale->nbytes, r->done += it->scale->nbytes;
    for (uint64_t i = 0; i < it->scale->numel; i++)
        if (!(fabsf((*fsc)[i]) <= FLT_MAX)) return cv_fail("%s: tensor '%s' has non-finite block scales", cv_path(r->ix, it->scale), it->scale->name);
    return 0;
}

static uint64_t cv_src_bytes(const cv_item *it) { return it->t->nbytes + (it->scale ? it->scale->nbytes : 0); }

/* End of the group starting at item g: one tensor, or an expert's gate, up
 * and down. */
static int cv_group_end(const cv_shard *sh, int g) {
    int e = g + 1;
    while (e < sh->n && sh->it[g].expert >= 0 && sh->it[e].expert == sh->it[g].expert) e++;
    return e;
}

/* A shard being written: st.h's writer and the running cvh1 checksum of
 * every byte that goes into the file. */
typedef struct {
    st_writer w;
    cv_hash h;
} cv_writer;

/* Appends tensor bytes to the shard and its checksum. 0 or -1 with a message. */
static int cv_put(cv_writer *cw, const void *buf, size_t n) {
    char err[600];
    if (st_writer_data(&cw->w, buf, n, err, sizeof err)) return cv_fail("%s", err);
    cv_hash_update(&cw->h, buf, n);
    return 0;
}

/* Starts the checksum with what st_writer_begin wrote to the temporary file
 * (the length word and the header), read back: st.h builds those bytes and
 * the checksum covers every byte of the file. 0 or -1 with a message. */
static int cv_hash_header(cv_writer *cw) {
    int fd = compat_open_regular(cw->w.tmp, 0);
    if (fd < 0) return cv_fail("%s: %s", cw->w.tmp, compat_strerror(errno));
    int64_t n = compat_file_size(fd);
    char *b = n < 8 ? NULL : (char *)malloc((size_t)n);
    int rc = n < 8 ? (errno = EIO, -1) : !b ? (errno = ENOMEM, -1) : compat_pread_full(fd, b, (size_t)n, 0);
    int e = errno;
    close(fd);
    if (!rc) cv_hash_update(&cw->h, b, (size_t)n);
    free(b);
    return rc ? cv_fail("%s: reading the header back: %s", cw->w.tmp, compat_strerror(e)) : 0;
}

/* Writes items [a, b)'s scales (quantized ones) in order. */
static int cv_write_scales(cv_writer *w, const cv_shard *sh, int a, int b, float *const *s) {
    for (int k = a; k < b; k++) {
        const cv_item *it = &sh->it[k];
        if (it->out == OUT_QUANT && cv_put(w, s[k - a], qt_scale_count(it->fmt, it->O, it->I, it->gs) * 4)) return -1;
    }
    return 0;
}

static void cv_done_reading(const cv_run *r, const cv_item *it) {
#ifdef POSIX_FADV_DONTNEED
    posix_fadvise(r->ix->files[it->t->file].fd, (off_t)it->t->off, (off_t)it->t->nbytes, POSIX_FADV_DONTNEED); /* read once */
#endif
}

/* Converts the whole groups of items [a, b) in one parallel run, then
 * writes each group's weights and scales. 0 or -1. */
static int cv_batch(cv_run *r, const cv_shard *sh, int a, int b, cv_writer *w) {
    int n = b - a, rc = 0;
    float **s = (float **)calloc((size_t)n, sizeof *s), **fsc = (float **)calloc((size_t)n, sizeof *fsc);
    size_t *off = (size_t *)calloc((size_t)n + 1, sizeof *off);
    if (!s || !fsc || !off) rc = cv_fail("out of memory");
    for (int k = 0; k < n && !rc; k++) {
        const cv_item *it = &sh->it[a + k];
        uint64_t ns = qt_scale_count(it->fmt, it->O, it->I, it->gs);
        off[k + 1] = off[k] + (size_t)it->O * (size_t)cv_out_row(it);
        if (ns && !(s[k] = (float *)malloc(ns * 4))) rc = cv_fail("out of memory");
        if (!rc) rc = cv_read_fsc(r, it, &fsc[k]);
    }
    if (!rc && cv_grow((void **)&r->out, &r->out_cap, off[n])) rc = cv_fail("out of memory");
    for (int k = 0; k < n && !rc; k++) rc = cv_queue(r, &sh->it[a + k], fsc[k], 0, sh->it[a + k].O, r->out + off[k], s[k]);
    if (!rc) rc = cv_run_units(r);
    for (int g = a, ge; g < b && !rc; g = ge) {
        ge = cv_group_end(sh, g);
        rc = cv_put(w, r->out + off[g - a], off[ge - a] - off[g - a]);
        if (!rc) rc = cv_write_scales(w, sh, g, ge, s + (g - a));
    }
    for (int k = 0; k < n; k++) {
        if (!rc) cv_done_reading(r, &sh->it[a + k]);
        if (s) free(s[k]);
        if (fsc) free(fsc[k]);
    }
    r->nu = 0;
    free(s);
    free(fsc);
    free(off);
    return rc;
}

/* Converts one group too large for a batch, streaming each item's weights
 * in chunks of about --chunk-mb of source, then the scales. 0 or -1. */
static int cv_stream(cv_run *r, const cv_shard *sh, int a, int b, cv_writer *w) {
    float *s[3] = {NULL, NULL, NULL};
    int rc = 0;
    for (int k = a; k < b && !rc; k++) {
        const cv_item *it = &sh->it[k];
        const size_t in_row = cv_in_row(it), orow = (size_t)cv_out_row(it);
        int64_t chunk = in_row >= r->o->chunk ? 1 : (int64_t)(r->o->chunk / in_row);
        if (chunk > it->O) chunk = it->O;
        uint64_t ns = qt_scale_count(it->fmt, it->O, it->I, it->gs);
        float *fsc = NULL;
        if (ns && !(s[k - a] = (float *)malloc(ns * 4))) rc = cv_fail("out of memory");
        if (!rc) rc = cv_read_fsc(r, it, &fsc);
        if (!rc && cv_grow((void **)&r->out, &r->out_cap, (size_t)chunk * orow)) rc = cv_fail("out of memory");
        for (int64_t r0 = 0; r0 < it->O && !rc; r0 += chunk) {
            int64_t n = it->O - r0 < chunk ? it->O - r0 : chunk;
            rc = cv_queue(r, it, fsc, r0, n, r->out, s[k - a]);
            if (!rc) rc = cv_run_units(r);
            if (!rc) rc = cv_put(w, r->out, (size_t)n * orow);
        }
        r->nu = 0;
        free(fsc);
        if (!rc) cv_done_reading(r, it);
    }
    if (!rc) rc = cv_write_scales(w, sh, a, b, s);
    for (int k = 0; k < 3; k++) free(s[k]);
    return rc;
}

/* Declares a shard's tensors: per group the weights back to back, then
 * their .qs scales. */
static int cv_declare(st_writer *w, const cv_shard *sh) {
    for (int g = 0, ge; g < sh->n; g = ge) {
        ge = cv_group_end(sh, g);
        for (int k = g; k < ge; k++) {
            const cv_item *it = &sh->it[k];
            int64_t shape[2] = {it->O, (int64_t)cv_out_row(it)};
            int64_t fshape[2] = {it->O, it->I};
            int rc = it->out == OUT_QUANT ? st_writer_add(w, cv_name(it), ST_U8, 2, shape)
                     : it->pname          ? st_writer_add(w, cv_name(it), it->odt, 2, fshape)
                                          : st_writer_add(w, it->t->name, it->odt, it->t->ndim, it->t->shape);
            if (rc) return -1;
        }
        for (int k = g; k < ge; k++) {
            const cv_item *it = &sh->it[k];
            if (it->out != OUT_QUANT) continue;
            char qn[ST_MAX_NAME + 8];
            int64_t shape[2] = {it->O, (int64_t)(qt_scale_count(it->fmt, it->O, it->I, it->gs) / (uint64_t)it->O)};
            snprintf(qn, sizeof qn, "%s.qs", cv_name(it));
            if (st_writer_add(w, qn, ST_F32, 2, shape)) return -1;
        }
    }
    return 0;
}

/* Writes one shard (tmp + rename): groups gathered into batches of about
 * --chunk-mb of source, larger groups streamed; its size and checksum go to
 * sh. 0 or -1 with a message; on failure no file is left under the shard's
 * name. */
static int cv_shard_run(cv_run *r, cv_shard *sh) {
    char path[PATH_MAX], tmp[PATH_MAX + 8], err[600];
    cv_writer cw;
    st_writer_init(&cw.w);
    cv_hash_init(&cw.h);
    snprintf(path, sizeof path, "%s/%s", r->o->dst, sh->file);
    snprintf(tmp, sizeof tmp, "%s.tmp", sh->file); /* st_writer_begin's temporary */
    const char *meta[] = {"format", "colibri", "writer", CV_VERSION, NULL};
    int rc = cv_dst_regular(r->o->dst, tmp) || cv_dst_regular(r->o->dst, sh->file) ? -1 : 0;
    if (!rc && cv_declare(&cw.w, sh)) rc = cv_fail("%s: out of memory declaring tensors", path);
    if (!rc && st_writer_begin(&cw.w, path, meta, err, sizeof err)) rc = cv_fail("%s", err);
    if (!rc) rc = cv_hash_header(&cw);
    for (int g = 0, ge; g < sh->n && !rc; g = ge) {
        uint64_t bytes = 0;
        ge = g;
        for (int e; ge < sh->n; ge = e) {
            uint64_t gb = 0;
            e = cv_group_end(sh, ge);
            for (int k = ge; k < e; k++) gb += cv_src_bytes(&sh->it[k]);
            if (ge > g && bytes + gb > r->o->chunk) break;
            bytes += gb;
            if (bytes > r->o->chunk) { ge = e; break; }
        }
        if (bytes > r->o->chunk) rc = cv_stream(r, sh, g, ge, &cw);
        else rc = cv_batch(r, sh, g, ge, &cw);
    }
    if (!rc && st_writer_finish(&cw.w, err, sizeof err)) rc = cv_fail("%s", err);
    struct stat st;
    if (!rc && stat(path, &st)) rc = cv_fail("%s: %s", path, strerror(errno));
    if (!rc && (uint64_t)st.st_size != cw.h.n) { /* the checksum must cover the file exactly */
        rc = cv_fail("%s: %lld bytes, but %llu checksummed while writing", path, (long long)st.st_size, (unsigned long long)cw.h.n);
        unlink(path);
    }
    if (!rc) sh->file_bytes = (uint64_t)st.st_size, sh->file_hash = cv_hash_final(&cw.h), r->written += sh->file_bytes;
    st_writer_free(&cw.w);
    return rc;
}

/* Opens DST as the engine will (every header, no duplicates) and checks
 * the tensor count. 0 or -1. */
static int cv_verify(const cv_opts *o, const cv_plan *p) {
    st_index ix;
    char err[600];
    if (st_open_dir(&ix, o->dst, err, sizeof err)) return cv_fail("verifying DST: %s", err);
    int want = 0;
    for (int i = 0; i < p->nsh; i++) want += p->sh[i].ntensors;
    int rc = ix.nt == want ? 0 : (cv_fail("verifying DST: %d tensors, expected %d", ix.nt, want));
    st_close(&ix);
    return rc;
}

static const char *cv_bits_name(int bits, int gs) {
    static char b[8][32];
    static int k;
    char *s = b[k++ & 7];
    if (bits == 32) snprintf(s, 32, "F32");
    else if (bits == 16) snprintf(s, 32, "BF16");
    else if (bits == 0) snprintf(s, 32, "source dtype");
    else if (bits == 4 && gs) snprintf(s, 32, "int4-g%d", gs);
    else snprintf(s, 32, "int%d", bits);
    return s;
}

static void cv_print_plan(const cv_opts *o, const cv_plan *p, uint64_t todo, int ndone, int nconv) {
    int io = o->dense_bits < 8 ? o->dense_bits : 0, fp8 = 0;
    for (int i = 0; i < p->ix->nt; i++) fp8 |= p->ix->t[i].dtype == ST_F8_E4M3;
    fprintf(stderr, "colibri-convert: %s -> %s: experts gate %s, up %s, down %s; dense %s; embed/lm_head %s; MTP %s; norms, router, "
                    "bias, weights_proj F32%s\n", o->src, o->dst, cv_bits_name(o->proj_bits[0], o->gs), cv_bits_name(o->proj_bits[1], o->gs),
            cv_bits_name(o->proj_bits[2], o->gs), cv_bits_name(o->dense_bits, o->gs), cv_bits_name(io, o->gs), cv_bits_name(o->mtp_bits, o->gs),
            fp8 ? "; FP8 e4m3 sources dequantized with their 128x128 block scales" : "");
    char tb[32];
    fprintf(stderr, "colibri-convert: %d shards: %d finished before, %d to convert (%s to read), %d threads\n", ndone + nconv, ndone, nconv,
            cv_human(todo, tb, sizeof tb), compat_omp_max_threads());
}

/* One line per shard: converted (with overall progress and ETA) or skipped. */
static void cv_shard_line(const cv_run *r, const cv_shard *sh, int converted) {
    double el = compat_now() - r->t0, rate = r->done / (el > 1e-9 ? el : 1e-9);
    char lay[32], sz[32], tot[32];
    if (sh->layer < 0) snprintf(lay, sizeof lay, "globals");
    else snprintf(lay, sizeof lay, "layer %d%s", sh->layer, sh->layer >= r->c_layers ? " (MTP)" : "");
    if (r->tty) fprintf(stderr, "\r%*s\r", 100, "");
    fprintf(stderr, "colibri-convert: %s: %s, %d tensors, %s, ", sh->file, lay, sh->ntensors, cv_human(sh->file_bytes, sz, sizeof sz));
    if (converted)
        fprintf(stderr, "converted [%.1f%% of %s, ETA %.0f s]\n", r->todo ? 100.0 * r->done / r->todo : 100.0,
                cv_human(r->todo, tot, sizeof tot), rate > 0 ? (r->todo - r->done) / rate : 0);
    else
        fprintf(stderr, "finished before, skipped\n");
}

/* Converts every unfinished shard, recording each in the manifest. */
static int cv_convert(cv_run *r, cv_plan *p, const cv_param *pr, const cv_source *src, uint8_t *done) {
    /* The manifest goes first: a kill between a shard's rename and the next
     * manifest write then leaves a shard the rerun converts again, not one
     * no manifest explains (refused by cv_dst_orphans). It also drops the
     * shards that failed verification. */
    if (r->todo && cv_manifest_write(r->o->dst, pr, src, p, done)) return -1;
    for (int i = 0; i < p->nsh; i++) {
        cv_shard *sh = &p->sh[i];
        if (!sh->n) continue;
        if (done[i]) { cv_shard_line(r, sh, 0); continue; }
        if (cv_shard_run(r, sh)) return -1;
        done[i] = 1;
        if (cv_manifest_write(r->o->dst, pr, src, p, done)) return -1;
        cv_shard_line(r, sh, 1);
    }
    return 0;
}

/* ================================================================ main */

/* Everything one run holds; released by cv_state_free. */
typedef struct {
    cv_opts o;
    cv_config c;
    char *cfg;          /* SRC/config.json text */
    size_t cfg_len;
    st_index ix;
    cv_plan p;
    cv_source src;
    cv_param pr[P_N];
    uint8_t *done;      /* [p.nsh] finished shards */
    char *extra[CV_NEXTRA]; /* SRC's cv_extra files, NULL when absent */
    size_t extra_len[CV_NEXTRA];
    int lock;
} cv_state;

static void cv_state_free(cv_state *s) {
    if (s->lock >= 0) close(s->lock);
    free(s->done);
    for (int i = 0; i < CV_NEXTRA; i++) free(s->extra[i]);
    cv_source_free(&s->src);
    cv_plan_free(&s->p);
    st_close(&s->ix);
    free(s->cfg);
}

/* Reads and validates SRC, plans every shard, takes DST and compares with
 * its manifest. 0 or -1 with a message. */
static int cv_prepare(cv_state *s) {
    char err[600];
    if (cv_config_load(s->o.src, &s->c, &s->cfg, &s->cfg_len)) return -1;
    if (st_open_dir_as(&s->ix, s->o.src, s->c.strip, err, sizeof err)) return cv_fail("%s", err);
    if (cv_extra_load(s->o.src, s->extra, s->extra_len)) return -1;
    if (cv_plan_build(&s->p, &s->c, &s->o, &s->ix) || cv_source_id(&s->ix, s->cfg, s->cfg_len, &s->src)) return -1;
    if (s->p.n_other)
        fprintf(stderr, "colibri-convert: kimi_k25: the %d tensors outside %s (the vision tower) are not converted: colibri runs the text model\n",
                s->p.n_other, s->c.strip);
    cv_params(&s->o, &s->c, s->pr);
    if (!(s->done = (uint8_t *)calloc((size_t)s->p.nsh, 1))) return cv_fail("out of memory");
    if (cv_dst_prepare(&s->o, &s->p, &s->lock) || cv_dst_orphans(&s->o, &s->p)) return -1;
    return cv_manifest_load(s->o.dst, s->pr, &s->src, &s->p, s->done);
}

/* Converts the unfinished shards, copies the metadata files, verifies DST
 * and prints the summary. 0 or -1. */
static int cv_execute(cv_state *s) {
    cv_run r;
    memset(&r, 0, sizeof r);
    r.o = &s->o, r.ix = &s->ix, r.tty = isatty(2), r.c_layers = s->c.n_layers, r.nthreads = compat_omp_max_threads();
    if (!(r.scr = (cv_scratch *)calloc((size_t)r.nthreads, sizeof *r.scr))) return cv_fail("out of memory");
    cv_e4m3_table(r.e4m3);
    int ndone = 0, nconv = 0;
    for (int i = 0; i < s->p.nsh; i++) {
        if (!s->p.sh[i].n) continue;
        if (s->done[i]) ndone++;
        else nconv++, r.todo += s->p.sh[i].src_bytes;
    }
    cv_print_plan(&s->o, &s->p, r.todo, ndone, nconv);
    r.t0 = r.last = compat_now();
    int rc = cv_convert(&r, &s->p, s->pr, &s->src, s->done);
    free(r.out);
    free(r.u);
    for (int i = 0; i < r.nthreads; i++) free(r.scr[i].raw), free(r.scr[i].f);
    free(r.scr);
    if (rc || cv_copy_meta(&s->o, s->cfg, s->cfg_len, s->extra, s->extra_len) || cv_verify(&s->o, &s->p)) return -1;
    double el = compat_now() - r.t0;
    if (r.read != r.todo) cv_warn("read %llu source bytes, planned %llu", (unsigned long long)r.read, (unsigned long long)r.todo);
    char ib[32], ob[32];
    fprintf(stderr, "colibri-convert: done: %d shards converted, %d skipped; read %llu bytes (%s), wrote %s in %.2f s; source %.0f MB/s\n", nconv,
            ndone, (unsigned long long)r.read, cv_human(r.read, ib, sizeof ib), cv_human(r.written, ob, sizeof ob), el,
            r.read / 1e6 / (el > 1e-9 ? el : 1e-9));
    return 0;
}

int main(int argc, char **argv) {
    compat_args_utf8(&argc, &argv);
    cv_state s;
    memset(&s, 0, sizeof s);
    s.lock = -1;
    int a = cv_parse_args(argc, argv, &s.o);
    if (a > 0) cv_usage(stdout);
    if (a) return a > 0 ? 0 : 2; /* errors were named; --help has the rest */
    if (s.o.threads) compat_omp_set_threads(s.o.threads);
    int rc = cv_prepare(&s) || cv_execute(&s) ? 2 : 0;
    cv_state_free(&s);
    return rc;
}
