/* colibri.c — the program: the run modes over a model (the oracle
 * self-test against a transformers reference, generation from PROMPT,
 * --chat, --serve with its kept conversations, --perplexity and --kld, --tokenize) over sessions
 * (session.h), the environment resolved once into plain options, the
 * startup, per-turn and end-of-run lines, the usage history, and main.
 *
 * What lives where: config.h (config.json), model.h (weights, memory plan,
 * loading), forward.h (the per-token math), store.h / tier.h / io.h (routed
 * experts: residency, policy, reads), kernels.h (matmuls), session.h (a
 * conversation and its decoding), tok.h, chat.h, sample.h, telemetry.h,
 * env.h. README.md has the map and the per-token path.
 *
 * Exit codes: 0 ok, 1 oracle mismatch, 2 bad input or configuration.
 * Must not: hold model math or mechanisms (they live in the headers). */
#include "compat.h"
#include "env.h"
#include "forward.h"
#include "gpu.h"
#include "grammar.h"
#include "chat.h"
#include "http.h"
#include "json.h"
#include "kv_persist.h"
#include "model.h"
#include "openai.h"
#include "quality.h"
#include "sample.h"
#include "session.h"
#include "spec.h"
#include "telemetry.h"
#include "tok.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>

#define COLI_VERSION "0.1.0"
#define EXIT_MISMATCH 1
#define EXIT_INPUT 2
#define ORACLE_TOL 1e-3 /* max |Δlogit| against an f32 transformers reference */
/* IDOT on integer weights: the most the mean KL(reference || engine) of the
 * best 90% of teacher-forced rows may be. Twice what int8 activations cost
 * trained-glm5 per token (the same statistic over its held-out text, IDOT
 * against IDOT=0 on the same weights: 3.5e-4 to 4.0e-4 with integer dense
 * matrices, 4e-6 with integer experts alone; docs/quality.md). The worst
 * row in ten is left out because a random model's router can flip on
 * int8 rounding and move that row's logits by O(1). */
#define ORACLE_KLD 8e-4

/* ----------------------------------------------------------------- oracle */

typedef struct {
    int *prompt, np;
    int *argmax;
    int *greedy, ng;
    float *logits;        /* [np][vocab] */
    float *greedy_logits; /* [ng][vocab] */
    /* "mtp" (fixtures with an MTP layer): the MTP head's logits at prompt
     * positions 0..np-2 (teacher forced), and a chain of drafts from the
     * prompt's end (docs/oracle.md) */
    int has_mtp, nchain;
    int *mtp_argmax, *chain;
    float *mtp_logits, *chain_logits;
} coli_ref;

static void ref_free(coli_ref *r) {
    free(r->prompt);
    free(r->argmax);
    free(r->greedy);
    free(r->logits);
    free(r->greedy_logits);
    free(r->mtp_argmax), free(r->chain), free(r->mtp_logits), free(r->chain_logits);
    memset(r, 0, sizeof *r);
}

static int ref_ids(const js_doc *d, int node, const char *key, int vocab, int **out, int *n, const char *path, char *err, size_t errlen) {
    int a = js_get(d, node, key);
    if (js_typeof(d, a) != JS_ARR || js_count(d, a) < 1) return snprintf(err, errlen, "%s: '%s' must be a non-empty list of token ids", path, key), -1;
    *n = js_count(d, a);
    *out = (int *)malloc((size_t)*n * sizeof(int));
    if (!*out) return snprintf(err, errlen, "out of memory"), -1;
    int i = 0;
    for (int c = js_first(d, a); c >= 0; c = js_next(d, c), i++) {
        if (!js_is_int(d, c) || js_int(d, c) < 0 || js_int(d, c) >= vocab)
            return snprintf(err, errlen, "%s: %s[%d] is not a token id below vocab_size %d", path, key, i, vocab), -1;
        (*out)[i] = (int)js_int(d, c);
    }
    return 0;
}

static int ref_rows(const js_doc *d, int node, const char *key, int rows, int vocab, float **out, const char *path, char *err, size_t errlen) {
    int a = js_get(d, node, key);
    if (js_typeof(d, a) != JS_ARR || js_count(d, a) != rows) return snprintf(err, errlen, "%s: '%s' must hold %d rows", path, key, rows), -1;
    *out = (float *)malloc((size_t)rows * vocab * 4);
    if (!*out) return snprintf(err, errlen, "out of memory"), -1;
    int r = 0;
    for (int row = js_first(d, a); row >= 0; row = js_next(d, row), r++) {
        if (js_typeof(d, row) != JS_ARR || js_count(d, row) != vocab)
            return snprintf(err, errlen, "%s: %s[%d] must hold %d numbers", path, key, r, vocab), -1;
        int i = 0;
        for (int x = js_first(d, row); x >= 0; x = js_next(d, x), i++) {
            if (!js_is_num(d, x)) return snprintf(err, errlen, "%s: %s[%d][%d] is not a number", path, key, r, i), -1;
            (*out)[(size_t)r * vocab + i] = (float)js_num(d, x);
        }
    }
    return 0;
}

/* Loads and validates <dir>/ref.json against the model's vocabulary. */
static int ref_load(coli_ref *r, const char *dir, int vocab, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    char path[4096];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    js_doc *d = js_load_object(path, 256u << 20, err, errlen);
    if (!d && errno == ENOENT) {
        size_t l = strlen(err);
        snprintf(err + l, errlen - l, " (no PROMPT given, so this is the oracle self-test, which needs the reference file)");
    }
    if (!d) return -1;
    int n, rc = ref_ids(d, d->root, "prompt_ids", vocab, &r->prompt, &r->np, path, err, errlen);
    if (!rc) rc = ref_ids(d, d->root, "argmax", vocab, &r->argmax, &n, path, err, errlen);
    if (!rc && n != r->np) rc = (snprintf(err, errlen, "%s: 'argmax' has %d entries for %d prompt ids", path, n, r->np), -1);
    if (!rc) rc = ref_ids(d, d->root, "greedy_ids", vocab, &r->greedy, &r->ng, path, err, errlen);
    if (!rc) rc = ref_rows(d, d->root, "logits", r->np, vocab, &r->logits, path, err, errlen);
    if (!rc) rc = ref_rows(d, d->root, "greedy_logits", r->ng, vocab, &r->greedy_logits, path, err, errlen);
    int mtp = js_get(d, d->root, "mtp"), chain = js_get(d, mtp, "chain");
    if (!rc && mtp >= 0 && r->np < 2) rc = (snprintf(err, errlen, "%s: 'mtp' needs a prompt of 2 or more ids", path), -1);
    if (!rc && mtp >= 0) {
        r->has_mtp = 1;
        rc = ref_ids(d, mtp, "argmax", vocab, &r->mtp_argmax, &n, path, err, errlen);
        if (!rc && n != r->np - 1) rc = (snprintf(err, errlen, "%s: mtp.argmax has %d entries for %d prompt ids (expected one fewer)", path, n, r->np), -1);
        if (!rc) rc = ref_rows(d, mtp, "logits", r->np - 1, vocab, &r->mtp_logits, path, err, errlen);
        if (!rc && chain < 0) rc = (snprintf(err, errlen, "%s: 'mtp' has no 'chain'", path), -1);
        if (!rc) rc = ref_ids(d, chain, "ids", vocab, &r->chain, &r->nchain, path, err, errlen);
        if (!rc) rc = ref_rows(d, chain, "logits", r->nchain, vocab, &r->chain_logits, path, err, errlen);
    }
    js_free(d);
    if (rc) ref_free(r);
    return rc;
}

/* Largest |a - b| over n values; +inf if any value of a is not finite. */
static double max_abs_diff(const float *a, const float *b, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        if (d > mx) mx = d;
    }
    return mx;
}

typedef struct {
    int tf_ok, tf_n, greedy_ok, greedy_n, first_bad_tf, first_bad_greedy;
    double tf_diff, greedy_diff;
    double tf_kld, tf_kld_max, tf_kld_best; /* KL(reference || engine) over the teacher-forced positions: mean, largest,
                                              * mean of the best 90% (kld_trimmed) */
    int mtp_ok, mtp_n, chain_ok, chain_n; /* the MTP head, when ref.json and the model have one */
    double mtp_diff, chain_diff;
} coli_oracle_result;

/* The MTP head against ref.json's "mtp": every prompt position's logits
 * (position p pairs the main model's final-normed hidden row p with token
 * p+1), then the chain of drafts from the prompt's end, each step pairing
 * the previous step's output row with its draft. 0 or -1 (m->err). */
static int oracle_mtp(coli_model *m, const coli_ref *r, coli_oracle_result *res) {
    int V = m->c.vocab, D = m->c.dim, np = r->np;
    float *hid = (float *)malloc((size_t)(np + 1) * D * 4), *lg = (float *)malloc((size_t)V * 4);
    int rc = hid && lg ? 0 : model_fail(m, "out of memory");
    for (int done = 0; !rc && done < np;) { /* the main model's hidden rows */
        int S = np - done < m->sc.max_s ? np - done : m->sc.max_s;
        rc = fwd_verify(m, r->prompt + done, S, done, NULL, hid + (size_t)done * D);
        done += S;
    }
    int tok = rc ? 0 : argmax(m->sc.logits, V);
    res->mtp_n = np - 1, res->chain_n = r->nchain;
    for (int p = 0; !rc && p < np; p++) { /* p = np-1: the chain's first step */
        int t = p + 1 < np ? r->prompt[p + 1] : tok;
        rc = fwd_mtp(m, &t, hid + (size_t)p * D, 1, p, hid + (size_t)np * D, lg);
        if (rc || p + 1 == np) break;
        double d = max_abs_diff(lg, r->mtp_logits + (size_t)p * V, (size_t)V);
        res->mtp_diff = d > res->mtp_diff ? d : res->mtp_diff;
        res->mtp_ok += argmax(lg, V) == r->mtp_argmax[p];
    }
    for (int j = 0; !rc && j < r->nchain; j++) {
        if (j) {
            tok = argmax(lg, V);
            rc = fwd_mtp(m, &tok, hid + (size_t)np * D, 1, np - 1 + j, hid + (size_t)np * D, lg);
        }
        if (rc) break;
        double d = max_abs_diff(lg, r->chain_logits + (size_t)j * V, (size_t)V);
        res->chain_diff = d > res->chain_diff ? d : res->chain_diff;
        res->chain_ok += tok == r->chain[j] && (j + 1 == r->nchain || argmax(lg, V) == r->chain[j + 1]);
    }
    free(hid), free(lg);
    return rc;
}

/* Teacher-forced forward over the reference prompt, then a greedy
 * continuation through the KV cache, both compared with the reference. */
static int oracle_run(coli_model *m, const coli_ref *r, coli_oracle_result *res) {
    int V = m->c.vocab;
    memset(res, 0, sizeof *res);
    res->first_bad_tf = res->first_bad_greedy = -1;
    if (r->np + r->ng > m->kv.ctx) return model_fail(m, "ref.json needs %d positions but CTX is %d", r->np + r->ng, m->kv.ctx);
    float *all = (float *)compat_aligned_alloc(64, (size_t)r->np * V * 4);
    double *kl = (double *)malloc((size_t)r->np * sizeof *kl);
    if (!all || !kl) return compat_aligned_free(all), free(kl), model_fail(m, "out of memory");
    double t0 = compat_now();
    if (fwd_tokens(m, r->prompt, r->np, 0, all)) return compat_aligned_free(all), free(kl), -1;
    m->tel.t_prefill = m->tel.ttft = compat_now() - t0;
    m->tel.prompt_tokens = r->np;
    res->tf_n = r->np;
    res->tf_diff = max_abs_diff(all, r->logits, (size_t)r->np * V);
    for (int i = 0; i < r->np; i++) {
        kl[i] = kld_logits(r->logits + (size_t)i * V, all + (size_t)i * V, V);
        res->tf_kld += kl[i] / r->np;
        res->tf_kld_max = kl[i] > res->tf_kld_max ? kl[i] : res->tf_kld_max;
        int ok = argmax(all + (size_t)i * V, V) == r->argmax[i];
        res->tf_ok += ok;
        if (!ok && res->first_bad_tf < 0) res->first_bad_tf = i;
    }
    res->tf_kld_best = kld_trimmed(kl, r->np, 0.9);
    compat_aligned_free(all);
    free(kl);
    res->greedy_n = r->ng;
    t0 = compat_now();
    for (int i = 0; i < r->ng; i++) {
        const float *lg = m->sc.logits;
        double d = max_abs_diff(lg, r->greedy_logits + (size_t)i * V, (size_t)V);
        if (d > res->greedy_diff) res->greedy_diff = d;
        int tok = argmax(lg, V), ok = tok == r->greedy[i];
        res->greedy_ok += ok;
        if (!ok && res->first_bad_greedy < 0) res->first_bad_greedy = i;
        tel_lap(&m->tel, TEL_SAMPLE);
        if (model_safe_point(m, i + 1)) return -1;
        tel_lap(&m->tel, TEL_OTHER);
        if (i + 1 < r->ng && fwd_tokens(m, &tok, 1, r->np + i, NULL)) return -1;
    }
    m->tel.t_decode = compat_now() - t0;
    m->tel.gen_tokens = r->ng;
    return 0;
}

/* Exact mode (float arithmetic): every argmax equal, logits within
 * ORACLE_TOL, the greedy continuation identical, for the MTP head too. With
 * IDOT on integer weights the activations are rounded to int8, so the
 * teacher-forced distributions must stay within ORACLE_KLD of the
 * reference's (the best 90% of rows); argmax agreement, the greedy
 * continuation and the MTP head are then reported, not judged (a flip at a
 * near-tie of a random model's logits says nothing), beyond finite
 * logits. */
static int oracle_pass(const coli_oracle_result *o, int approximate) {
    if (approximate) return o->tf_kld_best <= ORACLE_KLD && isfinite(o->tf_diff) && isfinite(o->mtp_diff) && isfinite(o->chain_diff);
    return o->tf_ok == o->tf_n && o->greedy_ok == o->greedy_n && o->tf_diff <= ORACLE_TOL && o->greedy_diff <= ORACLE_TOL &&
           o->mtp_ok == o->mtp_n && o->chain_ok == o->chain_n && o->mtp_diff <= ORACLE_TOL && o->chain_diff <= ORACLE_TOL;
}

/* ------------------------------------------------------------------- main */

typedef struct {
    env_val v[ENV_COUNT];
} coli_env;

static const env_val *env_v(const coli_env *e, env_id id) { return &e->v[id]; }
static long long env_i(const coli_env *e, env_id id) { return e->v[id].i; }
static double env_f(const coli_env *e, env_id id) { return e->v[id].f; }

/* Resolves every knob from the environment; warns about likely typos.
 * Returns 0 or -1 with err naming the variable. */
static int coli_env_load(coli_env *e, char *err, size_t errlen) {
    extern char **environ;
    for (int i = 0; i < ENV_COUNT; i++)
        if (env_parse(&env_knobs[i], compat_env_user(env_knobs[i].name, getenv(env_knobs[i].name)), &e->v[i], err, errlen)) return -1;
    static const char *const system_vars[] = {"TERM", "HOME", "PATH", "USER", "SHELL", "LANG", "PWD", "OLDPWD", "LOGNAME",
                                              "HOST", "TMPDIR", "MAIL", "EDITOR", "PAGER", "DISPLAY", "TZ", NULL};
    for (char **p = environ; p && *p; p++) {
        char name[128];
        const char *eq = strchr(*p, '=');
        size_t l = eq ? (size_t)(eq - *p) : strlen(*p);
        if (l >= sizeof name) continue;
        memcpy(name, *p, l);
        name[l] = 0;
        int sys = 0;
        for (int k = 0; system_vars[k]; k++) sys |= !strcmp(name, system_vars[k]);
        if (!compat_env_user(name, eq ? eq + 1 : "")) sys = 1;
        const char *hint = sys ? NULL : env_suggest(name);
        if (hint) fprintf(stderr, "colibri: warning: %s is not a colibri variable -- did you mean %s?\n", name, hint);
        else if (!strncmp(name, "COLI_", 5) && env_index(name) < 0 && strncmp(name, "COLI_BENCH_", 11) && strcmp(name, "COLI_REQUIRE")) /* the harnesses' own */
            fprintf(stderr, "colibri: warning: unknown variable %s (see ./colibri --help)\n", name);
    }
    return 0;
}

/* Parses COLI_DISK_WEIGHTS: exactly n positive numbers, comma-separated. */
static int parse_weights(const char *v, int n, double *w) {
    const char *p = v;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        w[i] = strtod(p, &end);
        if (errno || end == p || !(w[i] > 0) || !isfinite(w[i])) return -1;
        p = end;
        if (i + 1 < n && *p++ != ',') return -1;
    }
    return *p ? -1 : 0;
}

/* Plain options from the resolved knobs; incompatible combinations are
 * refused. Returns 0, or -1 with err naming the variables. */
static int coli_opts_from_env(const coli_env *e, coli_opts *o, char *err, size_t errlen) {
    static const int absorb_map[] = {-1, 0, 1}; /* auto|0|1 */
    memset(o, 0, sizeof *o);
    o->cap = (int)env_i(e, ENV_CAP), o->ctx = (int)env_i(e, ENV_CTX), o->ubatch = (int)env_i(e, ENV_UBATCH);
    o->absorb = absorb_map[env_i(e, ENV_ABSORB)];
    o->ram_gb = env_f(e, ENV_RAM_GB), o->overcommit = (int)env_i(e, ENV_COLI_RAM_OVERCOMMIT);
    o->pin = PIN_AUTO, o->pin_gb = -1, o->quiet = !isatty(2);
    const char *pin = env_v(e, ENV_PIN)->s;
    if (!strcmp(pin, "0")) o->pin = PIN_OFF;
    else if (strcmp(pin, "auto")) o->pin = PIN_FILE, o->pin_file = pin;
    const env_val *pg = env_v(e, ENV_PIN_GB);
    if (pg->s) o->pin_gb = pg->i ? PIN_GB_ALL : pg->f;
    int pipe = (int)env_i(e, ENV_PIPE), uring = (int)env_i(e, ENV_URING); /* 0 auto, 1 off, 2 on */
    o->io.mmap = (int)env_i(e, ENV_COLI_MMAP), o->io.direct = (int)env_i(e, ENV_DIRECT);
    o->io.workers = (int)env_i(e, ENV_PIPE_WORKERS), o->io.fail_at = env_i(e, ENV_COLI_IO_FAULT);
    o->pilot = (int)env_i(e, ENV_PILOT), o->pilot_real = (int)env_i(e, ENV_PILOT_REAL), o->pilot_k = (int)env_i(e, ENV_PILOT_K);
    o->mlock = (int)env_i(e, ENV_MLOCK), o->numa = (int)env_i(e, ENV_COLI_NUMA);
    o->threads = (int)env_i(e, ENV_THREADS), o->mtp = (int)env_i(e, ENV_MTP);
    static const int bits[] = {2, 4, 8, 0}; /* choices 2|4|8|16; 16 keeps floats as f32 */
    o->dense_bits = bits[env_i(e, ENV_DENSE_BITS)], o->expert_bits = bits[env_i(e, ENV_EXPERT_BITS)];
    o->group_size = (int)env_i(e, ENV_GROUP_SIZE);
    if (o->group_size && (o->group_size % 16 || o->group_size < 16))
        return snprintf(err, errlen, "GROUP_SIZE=%d is invalid: expected 0 (per row) or a multiple of 16 in [16, 256]", o->group_size), -1;
    static const int kv_bits[] = {4, 8, 32}; /* choices 4|8|32 */
    o->kv_bits = kv_bits[env_i(e, ENV_KV_BITS)], o->kv_index_bits = kv_bits[env_i(e, ENV_KV_INDEX_BITS)];
    o->idot = (int)env_i(e, ENV_IDOT);
    static const int cuda[] = {-1, 0, 1}; /* auto|0|1 */
    o->cuda = cuda[env_i(e, ENV_CUDA)], o->cuda_device = (int)env_i(e, ENV_CUDA_DEVICE);
    o->cuda_expert_gb = env_v(e, ENV_CUDA_EXPERT_GB)->s ? env_v(e, ENV_CUDA_EXPERT_GB)->f : -1;
    o->cuda_fill_mb = env_v(e, ENV_CUDA_FILL_MB)->f;
    o->cuda_attn = (int)env_i(e, ENV_CUDA_ATTN);
    o->cuda_fault = env_i(e, ENV_COLI_CUDA_FAULT);
    const char *simd = env_v(e, ENV_SIMD)->s;
    o->simd = strcmp(simd, "auto") ? mm_level_parse(simd) : -1;
    if (o->simd >= 0 && !mm_level_ok(o->simd))
        return snprintf(err, errlen, "SIMD=%s: this CPU lacks %s (best here: %s)", simd, mm_level_needs(o->simd), mm_level_name(mm_best_level())), -1;
    if (o->io.mmap && (uring == 2 || o->io.direct || o->pilot_real))
        return snprintf(err, errlen, "COLI_MMAP=1 uses experts in place, so it cannot be combined with %s", uring == 2 ? "URING=1" : o->io.direct ? "DIRECT=1" : "PILOT_REAL=1"), -1;
    if (uring == 2 && !io_have_uring())
        fprintf(stderr, "colibri: URING=1: this build has no io_uring (liburing was not found at build time); using reader threads\n");
    if (o->io.mmap) o->io.mode = IO_SYNC;
    else if (io_have_uring() && (uring == 2 || (uring == 0 && pipe != 1))) o->io.mode = IO_URING;
    else o->io.mode = pipe == 1 ? IO_SYNC : IO_POOL;
    const char *mir = env_v(e, ENV_COLI_MODEL_MIRROR)->s;
    for (const char *p = mir; p && *p;) {
        size_t l = strcspn(p, ",;");
        if (l) {
            if (o->nmirrors == IO_MAX_DRIVES - 1) return snprintf(err, errlen, "COLI_MODEL_MIRROR: at most %d directories", IO_MAX_DRIVES - 1), -1;
            char *d = strndup(p, l);
            struct stat st;
            if (!d) return snprintf(err, errlen, "out of memory"), -1;
            if (stat(d, &st) || !S_ISDIR(st.st_mode)) {
                snprintf(err, errlen, "COLI_MODEL_MIRROR: %s is not a directory", d);
                free(d);
                return -1;
            }
            o->mirrors[o->nmirrors++] = d;
        }
        p += l + (p[l] != 0);
    }
    o->io.weight[0] = 1;
    const char *wv = env_v(e, ENV_COLI_DISK_WEIGHTS)->s;
    if (wv && parse_weights(wv, 1 + o->nmirrors, o->io.weight))
        return snprintf(err, errlen, "COLI_DISK_WEIGHTS=%s is invalid: expected %d positive numbers separated by commas (primary first, then each mirror)", wv, 1 + o->nmirrors), -1;
    o->weights_given = wv != NULL;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "colibri " COLI_VERSION " -- GLM-5 and DeepSeek-V3 / Kimi K2 inference with routed experts streamed from disk\n\n"
            "usage: PROMPT=\"...\" ./colibri MODEL_DIR   generate text (stdout), statistics on stderr\n"
            "       ./colibri MODEL_DIR                oracle self-test against MODEL_DIR/ref.json\n"
            "       ./colibri --chat MODEL_DIR         chat: one user turn per line of stdin, the KV cache kept between turns\n"
            "       ./colibri --tokenize [--jsonl] MODEL_DIR   token ids of stdin (--jsonl: per line, each a JSON string)\n"
            "       ./colibri --perplexity FILE [--kld-base OUT] MODEL_DIR   FILE's perplexity in windows of CTX tokens (the second half of\n"
            "                                          each scored); --kld-base keeps each scored position's distribution in OUT\n"
            "       ./colibri --kld BASE MODEL_DIR     perplexity of BASE's text, and the KL divergence of this run's distributions from BASE's\n"
            "       ./colibri --help                   this text\n"
            "       ./colibri --env-table          the environment registry as a markdown table\n\n"
            "Exit codes: 0 ok, 1 oracle mismatch, 2 bad input or configuration.\n\n"
            "Environment:\n");
    for (int i = 0; i < ENV_COUNT; i++)
        fprintf(f, "  %-20s default %-6s %s\n", env_knobs[i].name, env_knobs[i].def ? env_knobs[i].def : "unset", env_knobs[i].doc);
}

/* The startup line about the checkpoint's MTP layers (model.h
 * model_find_mtp, model_check_tensors), when it has one: loaded for
 * drafting (with what of it is not read), or not loaded and why. */
static void print_mtp(const coli_model *m) {
    const coli_config *c = &m->c;
    int NL = c->n_layers;
    if (m->mtp) {
        fprintf(stderr, "colibri: MTP: the checkpoint's MTP layer (model.layers.%d) is loaded for speculative decoding", NL);
        if (m->mtp_unread) fprintf(stderr, "; its own copy of embed_tokens is not read (the MTP layer embeds with model.embed_tokens)");
        if (m->mtp_skipped)
            fprintf(stderr, "; config.json declares %d MTP layers, colibri drafts with the first (chained): the other %d (%d tensors) not loaded", c->n_mtp,
                    c->n_mtp - 1, m->mtp_skipped);
        fputc('\n', stderr);
        return;
    }
    if (!m->mtp_skipped) return;
    char eh[96];
    snprintf(eh, sizeof eh, "model.layers.%d.eh_proj.weight", NL);
    int n = c->n_mtp > 1 ? c->n_mtp : 1;
    char which[48] = "";
    if (n > 1) snprintf(which, sizeof which, "..%d", NL + n - 1);
    fprintf(stderr, "colibri: the checkpoint's MTP layer%s (model.layers.%d%s, %d tensors) %s not loaded (%s)\n", n > 1 ? "s" : "", NL, which,
            m->mtp_skipped, n > 1 ? "are" : "is",
            !c->n_mtp ? "config.json sets no num_nextn_predict_layers" : !st_find(&m->st, eh) ? "the checkpoint has no eh_proj for it" : "MTP=0");
}

static void print_startup(const coli_model *m, const char *dir) {
    const coli_config *c = &m->c;
    const xs_store *x = &m->xs;
    int nd = 0, nf = 0, pinned = xs_pinned_count(x);
    for (int l = 0; l < c->n_layers; l++) nd += !c->moe[l], nf += c->idx_full[l];
    char ef[64] = "none";
    if (x->n_layers) {
        const xs_layout *L0 = xs_layout_of(x, 0);
        snprintf(ef, sizeof ef, "%s%s%.0d", qt_fmt_name(L0->fmt[0]), L0->gs[0] ? " g" : "", L0->gs[0]);
    }
    fprintf(stderr,
            "colibri: %s | %s, %d layers (%d dense, %d MoE; %d full indexers) | %d experts, top-%d | attention %s, experts %s | "
            "ctx %d | kernel %s, IDOT %s | %d threads\n",
            dir, c->model_type, c->n_layers, nd, c->n_layers - nd, nf, c->n_experts, c->topk, qt_fmt_name(m->L[0].kv_a.fmt), ef, m->kv.ctx,
            mm_level_name(m->mm.level), m->mm.idot ? "on" : "off", m->team.n);
    char b[8][32], seqs[80] = "", fmt[48] = "";
    if (m->kv.bits != 32 || m->kv.ibits != 32) snprintf(fmt, sizeof fmt, "KV_BITS=%d, KV_INDEX_BITS=%d", m->kv.bits, m->kv.ibits);
    if (m->kv.slots > 1) snprintf(seqs, sizeof seqs, " (%d sequences%s%s)", m->kv.slots, *fmt ? "; " : "", fmt);
    else if (*fmt) snprintf(seqs, sizeof seqs, " (%s)", fmt);
    fprintf(stderr,
            "colibri: plan: budget %s | resident: dense %s, KV %s%s, working set %s | experts %s each: %d pinned (%s), "
            "LRU %d slots/layer (up to %s) | projected peak %s\n",
            fmt_bytes(b[0], 32, (double)m->budget), fmt_bytes(b[1], 32, (double)m->mem.dense), fmt_bytes(b[2], 32, (double)m->mem.kv), seqs,
            fmt_bytes(b[3], 32, (double)m->mem.work), fmt_bytes(b[4], 32, (double)xs_max_expert_bytes(x)), pinned,
            fmt_bytes(b[5], 32, (double)xs_pinned_bytes(x)), m->plan.lru_slots, fmt_bytes(b[6], 32, (double)m->plan.lru_bytes),
            fmt_bytes(b[7], 32, (double)m->plan.peak));
    xs_stats st;
    xs_stats_get(x, &st);
    if (pinned)
        fprintf(stderr, "colibri: pinned %d experts from the usage history: %s read in %.2f s\n", pinned, fmt_bytes(b[0], 32, (double)st.bytes_read),
                st.read_s);
    const io_ctx *io = &m->io;
    static const char *const mode[] = {"on the compute thread", "by a pool of reader threads", "by io_uring batches"};
    fprintf(stderr, "colibri: expert reads: %s", x->o.mmap ? "in place from mapped shards (COLI_MMAP)" : mode[io->o.mode]);
    if (io->o.mode == IO_POOL) fprintf(stderr, " (%d)", io->nthr);
    fprintf(stderr, ", %s, prefetch %s", io->o.direct ? "O_DIRECT" : "buffered", m->pilot_real ? "real loads" : m->pilot ? "kernel hints" : "off");
    if (m->pilot) fprintf(stderr, " (%d per position)", m->pilot_k);
    if (io->ndrives > 1) fprintf(stderr, ", %d drives", io->ndrives);
    if (m->numa) fprintf(stderr, ", NUMA interleaved");
    fputc('\n', stderr);
    print_mtp(m);
}

/* The end-of-run lines (counters from the expert store). */
static void print_end(coli_model *m) {
    tel_stats *t = &m->tel;
    xs_stats x;
    xs_stats_get(&m->xs, &x);
    t->hit_vram = x.hit_vram, t->hit_pin = x.hit_pin, t->hit_lru = x.hit_lru, t->miss = x.miss + x.mapped, t->bytes_read = x.bytes_read;
    tel_lap(t, TEL_OTHER);
    t->io_busy = x.read_s + x.busy_wall; /* wall time with reads in flight, not a sum over parallel reads */
    tel_end_line(stderr, t);
    if (t->prof) tel_prof_line(stderr, t);
    gpu_figures gf;
    if (gpu_figures_take(&m->gpu, &gf)) { /* what went through the GPU since the previous end line */
        const gpu_counts *n = &gf.n;
        char idx[48] = "";
        if (n->idx_gpu + n->idx_cpu) snprintf(idx, sizeof idx, "; indexer %.0f%%", tel_pct((double)n->idx_gpu, (double)(n->idx_gpu + n->idx_cpu)));
        int toks = t->prompt_tokens + t->gen_tokens;
        fprintf(stderr, "colibri: GPU: %llu matmuls in %llu calls (%.0f%% of the dense ones; attention %.0f%%%s; routed experts %.1f%% from GPU memory), "
                        "%.3f s in GPU calls, %.2f MB/tok up and %.2f MB/tok down%s\n",
                (unsigned long long)gf.mats, (unsigned long long)gf.calls, tel_pct((double)n->dense_gpu, (double)(n->dense_gpu + n->dense_cpu)),
                tel_pct((double)n->attn_gpu, (double)(n->attn_gpu + n->attn_cpu)), idx, tel_pct((double)n->xjobs, (double)n->jobs), gf.seconds,
                toks ? gf.up / 1e6 / toks : 0.0, toks ? gf.down / 1e6 / toks : 0.0, gf.failed ? "; a GPU call failed, the CPU took over" : "");
        if (gf.tier)
            fprintf(stderr, "colibri: GPU expert tier: %llu experts copied in during the run, %.2f MB/tok\n", (unsigned long long)n->fills,
                    toks ? gf.fill_bytes / 1e6 / toks : 0.0);
    }
    if (x.repinned) fprintf(stderr, "colibri: re-pinned %d experts during the run\n", x.repinned);
    if (m->pilot)
        fprintf(stderr, "colibri: prefetch: recall %.1f%% (%llu of %llu routed experts were predicted; %llu predictions), %llu read ahead, %.1f MB of them evicted unused%s\n",
                tel_pct((double)x.pred_used, (double)x.routed), (unsigned long long)x.pred_used, (unsigned long long)x.routed,
                (unsigned long long)x.pred_total, (unsigned long long)x.pred_loaded, x.pred_wasted_bytes / 1e6,
                t->replayed ? TEL_REPLAYED : "");
    if (t->prof && x.first_waits)
        fprintf(stderr, "colibri: reads: a layer's first miss lands %.2f ms after routing (mean of %llu layers with misses); disk idle %.3f s of %.3f s\n",
                1e3 * x.first_wait_s / (double)x.first_waits, (unsigned long long)x.first_waits,
                t->last - t->t0 - t->io_busy > 0 ? t->last - t->t0 - t->io_busy : 0.0, t->last - t->t0);
    if (m->io.ndrives > 1) {
        char b[32];
        fprintf(stderr, "colibri: drives:");
        for (int d = 0; d < m->io.ndrives; d++)
            fprintf(stderr, "%s %s %s (%llu reads)", d ? " |" : "", d ? "mirror" : "primary", fmt_bytes(b, sizeof b, (double)m->io.bytes[d]),
                    (unsigned long long)m->io.reads[d]);
        for (int d = 1; d < m->io.ndrives; d++)
            if (m->io.mirror_failed[d]) fprintf(stderr, " | mirror %d failed a read and was dropped", d);
        fputc('\n', stderr);
    }
}

static int run_oracle(coli_model *m, const char *dir) {
    coli_ref r;
    if (ref_load(&r, dir, m->c.vocab, m->err, sizeof m->err)) {
        fprintf(stderr, "colibri: %s\n", m->err);
        return EXIT_INPUT;
    }
    coli_oracle_result o;
    if (oracle_run(m, &r, &o) || (r.has_mtp && m->mtp && oracle_mtp(m, &r, &o))) {
        fprintf(stderr, "colibri: %s\n", m->err);
        ref_free(&r);
        return EXIT_INPUT;
    }
    print_end(m);
    int approx = m->mm.idot && m->any_int, pass = oracle_pass(&o, approx);
    char need[96] = "";
    if (approx) snprintf(need, sizeof need, " (IDOT on integer weights: needs KLD of the best 90%% of rows <= %.0e)", ORACLE_KLD);
    printf("oracle: teacher-forced %d/%d argmax, max |dlogit| %.1e, KLD %.2e (best 90%% %.2e, max %.2e); greedy %d/%d, max |dlogit| %.1e%s -- %s\n",
           o.tf_ok, o.tf_n, o.tf_diff, o.tf_kld, o.tf_kld_best, o.tf_kld_max, o.greedy_ok, o.greedy_n, o.greedy_diff, need, pass ? "PASS" : "FAIL");
    if (r.has_mtp && m->mtp)
        printf("oracle: MTP head: teacher-forced %d/%d argmax, max |dlogit| %.1e; chain %d/%d, max |dlogit| %.1e%s\n", o.mtp_ok, o.mtp_n, o.mtp_diff,
               o.chain_ok, o.chain_n, o.chain_diff, approx ? " (IDOT on integer weights: reported, not judged)" : "");
    else if (r.has_mtp)
        printf("oracle: MTP head not loaded (MTP=0): its reference is not checked\n");
    if (!pass) {
        if (o.first_bad_tf >= 0) fprintf(stderr, "colibri: first teacher-forced mismatch at position %d\n", o.first_bad_tf);
        if (o.first_bad_greedy >= 0) fprintf(stderr, "colibri: first greedy mismatch at step %d (expected token %d)\n", o.first_bad_greedy, r.greedy[o.first_bad_greedy]);
        if (!approx && (o.tf_diff > ORACLE_TOL || o.greedy_diff > ORACLE_TOL)) fprintf(stderr, "colibri: logits differ by more than %.0e\n", ORACLE_TOL);
        if (approx && !(o.tf_kld_best <= ORACLE_KLD))
            fprintf(stderr, "colibri: the teacher-forced distributions diverge from the reference's by %.2e (best 90%% of rows), more than %.0e\n",
                    o.tf_kld_best, ORACLE_KLD);
    }
    ref_free(&r);
    return pass ? 0 : EXIT_MISMATCH;
}

/* ------------------------------------------------------------- generation */

typedef struct {
    const char *prompt, *system;
    int chat, think, ngen, tokens;
    int fmt; /* the chat format (chat.h CHAT_*), when chat is on or serving */
    smp_params sp;
    uint64_t seed;
    spec_opts spec;
    int draft_set; /* DRAFT was given */
    const char *kv_load, *kv_save, *session;
    int chat_mode; /* CHAT: turns from stdin */
    const char *grammar, *json_schema; /* GRAMMAR, JSON_SCHEMA files */
    int grammar_batch;                 /* GRAMMAR_BATCH */
    int grammar_draft;                 /* GRAMMAR_DRAFT: the grammar drafts, never masks */
} coli_gen;

/* Sampling settings: each knob, or generation_config.json's value when the
 * knob is unset (greedy when generation_config.json does not sample). */
static void gen_from_env(const coli_env *e, const coli_config *c, coli_gen *g) {
    memset(g, 0, sizeof *g);
    g->prompt = env_v(e, ENV_PROMPT)->s, g->system = env_v(e, ENV_SYSTEM)->s;
    g->chat = (int)env_i(e, ENV_CHAT_TEMPLATE), g->think = (int)env_i(e, ENV_THINK), g->ngen = (int)env_i(e, ENV_NGEN);
    g->tokens = (int)env_i(e, ENV_TOKENS);
    g->spec.k = (int)env_i(e, ENV_DRAFT), g->spec.guard_pct = (int)env_i(e, ENV_DRAFT_GUARD_PCT);
    g->spec.window = (int)env_i(e, ENV_DRAFT_WINDOW), g->spec.pause = (int)env_i(e, ENV_DRAFT_PAUSE);
    g->draft_set = env_v(e, ENV_DRAFT)->set;
    g->kv_load = env_v(e, ENV_KV_LOAD)->s, g->kv_save = env_v(e, ENV_KV_SAVE)->s, g->session = env_v(e, ENV_SESSION)->s;
    g->chat_mode = (int)env_i(e, ENV_CHAT);
    g->grammar = env_v(e, ENV_GRAMMAR)->s, g->json_schema = env_v(e, ENV_JSON_SCHEMA)->s;
    g->grammar_batch = (int)env_i(e, ENV_GRAMMAR_BATCH);
    g->grammar_draft = (int)env_i(e, ENV_GRAMMAR_DRAFT);
    const env_val *t = env_v(e, env_v(e, ENV_TEMPERATURE)->set ? ENV_TEMPERATURE : ENV_TEMP), *k = env_v(e, ENV_TOP_K), *p = env_v(e, ENV_TOP_P), *mp = env_v(e, ENV_MIN_P), *sd = env_v(e, ENV_SEED);
    g->sp.temp = t->s ? (float)t->f : c->gen_sample ? c->gen_temp : 0.0f;
    g->sp.top_k = k->s ? (int)k->i : c->gen_sample ? c->gen_top_k : 0;
    g->sp.top_p = p->s ? (float)p->f : c->gen_sample ? c->gen_top_p : 1.0f;
    g->sp.min_p = mp->s ? (float)mp->f : c->gen_sample ? c->gen_min_p : 0.0f;
    if (sd->s) g->seed = (uint64_t)sd->i;
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g->seed = ((uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 20) & ((1ull << 53) - 1);
    }
}

static void print_ids(const char *what, const int *ids, size_t n) {
    fprintf(stderr, "colibri: %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* The chat format's end-of-turn token joins the stop tokens when the
 * model's config does not list it (DeepSeek's <｜end▁of▁sentence｜>, Kimi's
 * <|im_end|>): a rendered conversation must end a reply there. 0, or
 * EXIT_INPUT (said) when the stop set is full. */
static int add_chat_stop(coli_config *c, const tok *t, int fmt) {
    int id = chat_stop_id(t, fmt);
    if (id < 0 || id >= c->vocab || smp_is_stop(c->eos, c->n_eos, id)) return 0;
    if (c->n_eos == MAX_EOS) return fprintf(stderr, "colibri: %d stop tokens already; no room for the chat template's %s\n", MAX_EOS, chat_info(fmt)->stop), EXIT_INPUT;
    c->eos[c->n_eos++] = id;
    return 0;
}

/* Loads <dir>/tokenizer.json (or, without one, Kimi's tiktoken.model and
 * tokenizer_config.json), or says why not. */
static tok *load_tokenizer(const char *dir, char *err, size_t errlen) { return tok_load_dir(dir, err, errlen); }

/* The speculation summary (DRAFT) of one turn, after "id: " when id is
 * given (a serve request): drafts, acceptance, tokens per forward of the
 * main model, disk bytes per generated token while decoding (left out when
 * decode_bytes < 0: requests decoded together share their reads). */
static void print_spec(const char *id, const spec_stats *st, int generated, double decode_bytes) {
    char mb[64] = "", ks[160] = "", stop[160] = "";
    if (decode_bytes >= 0) snprintf(mb, sizeof mb, ", %.1f MB read per generated token", generated ? decode_bytes / 1e6 / generated : 0.0);
    int used = 0;
    for (int k = 0; k <= SPEC_MAX_K; k++) used += st->by_k[k] > 0;
    for (int k = 0, n = 0; used > 1 && k <= SPEC_MAX_K; k++) /* several draft counts (DRAFT=-1, the guard): how many forwards each */
        if (st->by_k[k]) n += snprintf(ks + n, sizeof ks - (size_t)n, "%s%d:%ld", n ? " " : ", forwards by drafts ", k, st->by_k[k]);
    if (st->stop_k) /* DRAFT=-1 stopped drafting (spec.h: for the run at 90%, else for the conversation) */
        snprintf(stop, sizeof stop, "; drafting stopped: a forward with %d draft%s costs %.2f without, more than %.0f%% acceptance repays%s", st->stop_k,
                 st->stop_k > 1 ? "s" : "", st->stop_cost, 100 * st->stop_alpha, st->stop_alpha >= SPEC_HIGH_ACCEPT ? " (for the run)" : "");
    fprintf(stderr, "colibri: %s%sspeculation: %ld drafted, %ld accepted (%.1f%%), %.2f tokens per forward (%ld verifying forwards, %ld MTP forwards)%s, "
            "%ld pauses%s%s\n", id ? id : "", id ? ": " : "", st->drafted, st->accepted, tel_pct((double)st->accepted, (double)st->drafted),
            st->verifies ? (double)(generated > 0 ? generated - 1 : 0) / (double)st->verifies : 0.0, st->verifies, st->mtp_forwards, mb, st->pauses, ks, stop);
}

/* A conversation in this process (session.h) and the run's knobs beside
 * it: the rendering settings, and the fingerprint saved states carry.
 * One-shot PROMPT runs have one turn; CHAT runs one per line of stdin. */
typedef struct {
    sess s;
    const coli_gen *g;
    uint64_t fp;        /* kvp_fingerprint, when states are saved or loaded */
    char live_file[64]; /* serve: its conversation's file in KV_CACHE_DIR ("" = none yet) */
} conv;

static sess_params conv_params(const coli_gen *g) { return (sess_params){g->sp, g->seed, g->ngen, g->grammar_batch, g->grammar_draft}; }

/* What the session had to say about its last call (s.note). */
static void conv_note(const conv *cv) {
    if (cv->s.note[0]) fprintf(stderr, "colibri: %s\n", cv->s.note);
}

static void conv_close(conv *cv) {
    sess_close(&cv->s);
    memset(cv, 0, sizeof *cv);
}

/* 0, or -1 (said). */
static int conv_open(conv *cv, coli_model *m, const coli_gen *g, tok *t, const char *dir) {
    memset(cv, 0, sizeof *cv);
    cv->g = g;
    cv->fp = g->kv_load || g->kv_save || g->session || g->chat_mode ? kvp_fingerprint(m, dir) : 0;
    sess_params p = conv_params(g);
    if (sess_open(&cv->s, m, t, &p, g->spec.k != 0, &g->spec)) return fprintf(stderr, "colibri: out of memory\n"), -1;
    conv_note(cv);
    if (!m->mtp && g->draft_set && g->spec.k)
        fprintf(stderr, "colibri: DRAFT=%d: no MTP layer is loaded (%s); decoding without speculation\n", g->spec.k,
                !m->c.n_mtp ? "config.json declares none" : "MTP=0 or the checkpoint lacks it");
    return 0;
}

/* Uses gram for the answers from now on (NULL: unconstrained). 0, or -1
 * (out of memory). */
static int conv_grammar(conv *cv, const gr_grammar *gram, const gr_vocab *gv, int tools) {
    int rc = sess_grammar(&cv->s, gram, gv, tools);
    conv_note(cv);
    return rc;
}

/* Replaces the conversation by the state saved at path. 0, 1 (no such
 * file), or -1 (refused; said, the conversation unchanged only in its ids:
 * the cache may hold part of the file, so the caller ends). */
static int conv_load(conv *cv, const char *path) {
    char err[600];
    int r = sess_load(&cv->s, path, cv->fp, err, sizeof err);
    if (r < 0) fprintf(stderr, "colibri: %s\n", err);
    if (r) return r;
    conv_note(cv);
    fprintf(stderr, "colibri: session: resumed %zu tokens from %s (%d cached)\n", cv->s.ids.n, path, cv->s.n_kv);
    return 0;
}

/* Saves the conversation (its ids, the cached positions, the MTP state).
 * 0, or -1 (said). */
static int conv_save(conv *cv, const char *path) {
    char err[600];
    int rc = sess_save(&cv->s, path, cv->fp, err, sizeof err);
    if (rc) fprintf(stderr, "colibri: %s\n", err);
    else
        fprintf(stderr, "colibri: session: %zu tokens saved to %s (%d cached%s)\n", cv->s.ids.n, path, cv->s.n_kv,
                cv->s.spec ? ", with the MTP head's state" : "");
    return rc;
}

/* One-shot and CHAT's sink: the text to stdout as it comes. */
static int stdout_sink(void *ud, const char *s, size_t n) {
    (void)ud;
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    return 0;
}

/* The turn's first line: the prompt, the limit, the sampler, drafting,
 * what the cache holds. */
static void print_turn(const conv *cv) {
    const sess *s = &cv->s;
    const smp_params *sp = &s->p.sp;
    int n = s->u.np, start = s->n_kv;
    if (sp->temp > 0)
        fprintf(stderr, "colibri: prompt %d tokens | up to %d new | temperature %g, top-k %d, top-p %g, min-p %g, seed %llu", n, s->u.ngen, sp->temp,
                sp->top_k, sp->top_p, sp->min_p, (unsigned long long)s->p.seed);
    else fprintf(stderr, "colibri: prompt %d tokens | up to %d new | greedy", n, s->u.ngen);
    if (s->spec) fprintf(stderr, cv->g->spec.k < 0 ? " | MTP drafts, k auto" : " | MTP drafts, k = %d", s->sc.k);
    else if (s->m->mtp) fprintf(stderr, " | DRAFT=0");
    if (start) fprintf(stderr, " | %d cached, %d to prefill", start, n - start);
    fputc('\n', stderr);
}

/* Runs a turn whose prompt is cv's ids [before..] (session.h: begin,
 * prefill, steps, finish) and prints its lines: the prompt line, the end
 * line, the speculation and grammar summaries. The generated ids join
 * the conversation. Returns 0, or EXIT_INPUT (said, and io says why and
 * whether the model failed; the turn is not part of the conversation). */
static int conv_generate(conv *cv, size_t before, sess_io *io) {
    sess *s = &cv->s;
    coli_model *m = s->m;
    const coli_gen *g = cv->g;
    if (sess_begin(s, before, io)) goto fail;
    print_turn(cv);
    if (g->tokens) print_ids("prompt tokens", s->ids.ids, s->ids.n);
    if (sess_prefill(s)) goto fail;
    xs_stats x0, x1;
    xs_stats_get(&m->xs, &x0);
    int r;
    while (!(r = sess_step(s))) {}
    int spec_on = s->u.mtp_draft;
    spec_stats sst = s->sc.st;
    if (r < 0 || sess_finish(s)) goto fail;
    if (io->sink == stdout_sink) {
        if (isatty(1) || g->chat_mode) fputc('\n', stdout);
        fflush(stdout);
    }
    if (g->tokens) print_ids("generated tokens", s->u.gen, (size_t)s->u.n);
    fprintf(stderr, "colibri: stopped: %s\n", io->why);
    print_end(m);
    if (spec_on) {
        xs_stats_get(&m->xs, &x1);
        print_spec(NULL, &sst, s->u.n, (double)(x1.bytes_read - x0.bytes_read));
    }
    if (s->gram && g->grammar_draft)
        fprintf(stderr, "colibri: grammar drafts: %ld proposed, %ld accepted (%.1f%%) in %ld verifying forwards; %ld masks (%.2f ms each)\n",
                s->d_proposed, s->d_accepted, tel_pct((double)s->d_accepted, (double)s->d_proposed), s->d_verifies, s->g_steps,
                s->g_steps ? 1e3 * s->g_mask_s / s->g_steps : 0.0);
    else if (s->gram)
        fprintf(stderr, "colibri: grammar: %ld masks (%.2f ms each over %d tokens), %ld tokens forced, %ld forwards saved by batching them\n",
                s->g_steps, s->g_steps ? 1e3 * s->g_mask_s / s->g_steps : 0.0, s->gv->n_tokens, s->g_forced, s->g_saved);
    return 0;
fail:
    fprintf(stderr, "colibri: %s\n", io->err);
    sess_abort(s);
    return EXIT_INPUT;
}

/* One turn: the prompt rendered (the whole chat template on the first
 * turn, a follow-up user turn later; raw with CHAT_TEMPLATE=0) after the
 * ids so far, then conv_generate to stdout. Returns 0, or EXIT_INPUT
 * (said; *fatal set when the model failed and nothing more can run). */
static int conv_turn(conv *cv, const char *prompt, atomic_int *stop_flag, int *fatal) {
    const coli_gen *g = cv->g;
    sess *s = &cv->s;
    char err[600];
    size_t before = s->ids.n;
    int r = !g->chat ? tok_encode(s->t, prompt, strlen(prompt), &s->ids)
            : s->started ? chat_encode_turn(s->t, g->fmt, prompt, g->think, &s->ids) : chat_encode(s->t, g->fmt, g->system, prompt, g->think, &s->ids);
    if (r == -2) return chat_check(s->t, g->fmt, err, sizeof err), fprintf(stderr, "colibri: %s (set CHAT_TEMPLATE=0 to send the prompt raw)\n", err), EXIT_INPUT;
    if (r) return s->ids.n = before, fprintf(stderr, "colibri: out of memory encoding the prompt\n"), EXIT_INPUT;
    sess_io io = {.stop = stop_flag, .sink = stdout_sink};
    int rc = conv_generate(cv, before, &io);
    if (fatal) *fatal = io.fatal;
    return rc;
}

/* The grammar GRAMMAR (GBNF file) or JSON_SCHEMA (JSON schema file) asks
 * for, or NULL when neither is set (*bad set, said, when one is refused). */
static gr_grammar *gram_from_files(const char *gpath, const char *spath, int *bad) {
    char err[600];
    size_t len;
    *bad = 0;
    if (!gpath && !spath) return NULL;
    if (gpath && spath) return fprintf(stderr, "colibri: GRAMMAR and JSON_SCHEMA exclude each other\n"), *bad = 1, NULL;
    const char *path = gpath ? gpath : spath;
    char *text = compat_read_file(path, 4u << 20, &len), *gbnf = NULL;
    if (!text) return fprintf(stderr, "colibri: %s: %s\n", path, errno == EFBIG ? "larger than 4 MB" : compat_strerror(errno)), *bad = 1, NULL;
    gr_grammar *g = NULL;
    if (spath) {
        js_doc *d = js_parse(text, len, err, sizeof err);
        if (!d) fprintf(stderr, "colibri: JSON_SCHEMA=%s: not valid JSON: %s\n", path, err);
        else if (!(gbnf = gr_json_schema(d, d->root, err, sizeof err))) fprintf(stderr, "colibri: JSON_SCHEMA=%s: %s\n", path, err);
        js_free(d);
        if (gbnf && !(g = gr_parse(gbnf, strlen(gbnf), "root", err, sizeof err)))
            fprintf(stderr, "colibri: JSON_SCHEMA=%s: the grammar written for it is refused (%s)\n", path, err);
    } else if (!(g = gr_parse(text, len, "root", err, sizeof err)))
        fprintf(stderr, "colibri: GRAMMAR=%s: %s\n", path, err);
    free(text), free(gbnf);
    int rule;
    if (g && gr_check(g, &rule, err, sizeof err)) { /* refused now, not mid-answer */
        fprintf(stderr, "colibri: %s=%s: %s\n", gpath ? "GRAMMAR" : "JSON_SCHEMA", path, err);
        gr_free(g), g = NULL;
    }
    if (!g) *bad = 1;
    return g;
}

/* Constrains cv's answers by the knobs' grammar; 0, or EXIT_INPUT (said). */
static int conv_grammar_from_env(conv *cv, const coli_gen *g, gr_grammar **gram, gr_vocab *gv) {
    int bad;
    *gram = gram_from_files(g->grammar, g->json_schema, &bad);
    if (bad) return EXIT_INPUT;
    if (!*gram) return 0;
    if (sess_vocab(cv->s.t, cv->s.m->c.vocab, gv) || conv_grammar(cv, *gram, gv, 0)) return fprintf(stderr, "colibri: out of memory building the grammar's vocabulary\n"), EXIT_INPUT;
    return 0;
}

/* PROMPT mode: one turn, resumed from KV_LOAD / SESSION and saved to
 * KV_SAVE / SESSION when given. Returns the exit status. */
static int run_generate(coli_model *m, const char *dir, const coli_gen *g, tok *t) {
    conv cv;
    const char *load = g->kv_load ? g->kv_load : g->session, *save = g->kv_save ? g->kv_save : g->session;
    int rc = EXIT_INPUT, r;
    gr_grammar *gram = NULL;
    gr_vocab gv;
    memset(&gv, 0, sizeof gv);
    if (conv_open(&cv, m, g, t, dir)) goto done;
    if (conv_grammar_from_env(&cv, g, &gram, &gv)) goto done;
    if (load && (r = conv_load(&cv, load))) {
        if (r < 0) goto done;
        if (g->kv_load) { fprintf(stderr, "colibri: KV_LOAD=%s: no such file\n", load); goto done; }
        fprintf(stderr, "colibri: SESSION=%s: no such file yet; starting the conversation\n", load);
    }
    rc = conv_turn(&cv, g->prompt, NULL, NULL);
    if (!rc && save && conv_save(&cv, save)) rc = EXIT_INPUT;
done:
    conv_close(&cv);
    gr_vocab_free(&gv);
    gr_free(gram);
    return rc;
}

static atomic_int chat_interrupt;
static void on_sigint(int sig) {
    (void)sig;
    atomic_store(&chat_interrupt, 1);
}

/* CHAT mode (--chat or CHAT=1): each line of stdin is a user turn, answered
 * on stdout with the conversation's KV cache kept between turns. Ctrl-C
 * stops the current answer (at the prompt: ends the chat). Lines starting
 * with / are commands: /save PATH, /load PATH, /reset, /quit. SESSION
 * resumes at the start and saves after every turn. Returns the exit
 * status. */
static int run_chat(coli_model *m, const char *dir, const coli_gen *g, tok *t) {
    conv cv;
    int rc = EXIT_INPUT, tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a Ctrl-C at the prompt ends the read */
    sigaction(SIGINT, &sa, NULL);
    gr_grammar *gram = NULL;
    gr_vocab gv;
    memset(&gv, 0, sizeof gv);
    if (conv_open(&cv, m, g, t, dir)) goto done;
    if (conv_grammar_from_env(&cv, g, &gram, &gv)) goto done;
    const char *load = g->kv_load ? g->kv_load : g->session;
    int r = load ? conv_load(&cv, load) : 0;
    if (r < 0 || (r > 0 && g->kv_load)) {
        if (r > 0) fprintf(stderr, "colibri: KV_LOAD=%s: no such file\n", load);
        goto done;
    }
    if (tty) fprintf(stderr, "colibri: chat: one line per turn; Ctrl-C stops an answer; /save PATH, /load PATH, /reset, /quit\n");
    for (;;) {
        if (tty) fputs("> ", stderr);
        atomic_store(&chat_interrupt, 0);
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0 || atomic_load(&chat_interrupt)) break;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (!strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            conv_close(&cv);
            if (conv_open(&cv, m, g, t, dir) || (gram && conv_grammar(&cv, gram, &gv, 0))) goto done;
            continue;
        }
        if (!strncmp(line, "/save ", 6)) { conv_save(&cv, line + 6); continue; }
        if (!strncmp(line, "/load ", 6)) {
            int r = conv_load(&cv, line + 6);
            if (r > 0) fprintf(stderr, "colibri: %s: no such file\n", line + 6);
            if (r < 0) goto done; /* the cache may hold part of the file */
            continue;
        }
        if (line[0] == '/') { fprintf(stderr, "colibri: unknown command %s (/save PATH, /load PATH, /reset, /quit)\n", line); continue; }
        int fatal = 0;
        if (conv_turn(&cv, line, &chat_interrupt, &fatal)) {
            if (fatal) goto done; /* a read failure: the model cannot go on */
            continue;             /* this turn was refused; the conversation goes on */
        }
        if (g->session && conv_save(&cv, g->session)) goto done;
    }
    rc = g->kv_save && conv_save(&cv, g->kv_save) ? EXIT_INPUT : 0;
done:
    free(line);
    conv_close(&cv);
    gr_vocab_free(&gv);
    gr_free(gram);
    signal(SIGINT, SIG_DFL);
    return rc;
}

/* ------------------------------------------------------------------ serve */

/* A conversation kept aside for prefix reuse (serve mode): its state as a
 * .coli_kv image (kv_persist.h) and its ids (n_tok: the whole conversation;
 * [0, n_kv) cached); file names its copy in KV_CACHE_DIR ("" when not
 * persisted). */
typedef struct {
    uint8_t *img;
    size_t len;
    int *ids, n_tok, n_kv;
    uint64_t used; /* LRU clock */
    char file[64];
} kvc_entry;

/* The conversations serve mode keeps: the live one (in the model's cache,
 * conv), the ones kept aside in memory within budget bytes, and their
 * files in dir when persisted. Saved state is the users' data: the server
 * writes a conversation's file only for that conversation or one that
 * continues it (its ids begin with all of the file's), and never deletes
 * one; memory is what the budget bounds. */
typedef struct {
    kvc_entry *e;
    int n, cap;
    size_t bytes, budget;
    const char *dir;
    uint64_t clock, fp, names;
    const gr_vocab *gv; /* the vocabulary trie for response_format grammars */
} kv_cache;

/* Forgets kept conversation i from memory. Its file in KV_CACHE_DIR, if
 * any, stays: nothing in serve mode deletes saved state. */
static void kvc_drop(kv_cache *kc, int i) {
    kvc_entry *x = &kc->e[i];
    kc->bytes -= x->len;
    free(x->img), free(x->ids);
    kc->e[i] = kc->e[--kc->n];
}

/* Evicts the least recently used conversations from memory until the kept
 * ones fit the budget; their files stay on disk (a server started later
 * finds them). */
static void kvc_fit(kv_cache *kc) {
    while (kc->n && kc->bytes > kc->budget) {
        int lru = 0;
        for (int i = 1; i < kc->n; i++)
            if (kc->e[i].used < kc->e[lru].used) lru = i;
        fprintf(stderr, "colibri: serve: evicted a kept conversation of %d tokens (%.1f MB; KV_CACHE_GB) from memory%s%s%s\n", kc->e[lru].n_kv,
                kc->e[lru].len / 1e6, kc->e[lru].file[0] ? "; its file " : "", kc->e[lru].file, kc->e[lru].file[0] ? " stays in KV_CACHE_DIR" : "");
        kvc_drop(kc, lru);
    }
}

/* Keeps img (taken over) with ids[0..n_tok) as a kept conversation. 0, or
 * -1 (out of memory; img not taken). */
static int kvc_add(kv_cache *kc, uint8_t *img, size_t len, const int *ids, int n_tok, int n_kv, const char *file, uint64_t used) {
    if (kc->n == kc->cap) {
        int cap = kc->cap ? kc->cap * 2 : 8;
        kvc_entry *ne = (kvc_entry *)realloc(kc->e, (size_t)cap * sizeof *ne);
        if (!ne) return -1;
        kc->e = ne, kc->cap = cap;
    }
    kvc_entry *x = &kc->e[kc->n];
    memset(x, 0, sizeof *x);
    if (!(x->ids = (int *)malloc((size_t)n_tok * sizeof(int) + sizeof(int)))) return -1;
    memcpy(x->ids, ids, (size_t)n_tok * sizeof(int));
    x->img = img, x->len = len, x->n_tok = n_tok, x->n_kv = n_kv, x->used = used;
    snprintf(x->file, sizeof x->file, "%s", file ? file : "");
    kc->n++, kc->bytes += len;
    return 0;
}

static int kvc_lcp(const int *a, int na, const int *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Whether a request of ids[0..n) continues the conversation conv[0..nc):
 * begins with all of its ids. Only such a request may take the
 * conversation's file over; any other is another conversation. */
static int kvc_continues(const int *ids, int n, const int *conv, int nc) { return n >= nc && kvc_lcp(conv, nc, ids, n) == nc; }

/* Keeps the live conversation aside (its whole token list, its cached
 * positions, its file) before another one takes the model's cache; the
 * live conversation then has no file (kvc_persist gives it a new one). The
 * caller fits the budget (kvc_fit) once it has what it needs. */
static void kvc_stash(kv_cache *kc, conv *cv) {
    sess_select_(&cv->s); /* kv_persist works on the session's slot */
    int n_tok = (int)cv->s.ids.n < cv->s.m->kv.ctx ? (int)cv->s.ids.n : cv->s.m->kv.ctx - 1; /* what a load accepts: room to continue */
    int n_kv = cv->s.n_kv < n_tok ? cv->s.n_kv : n_tok;
    if (n_kv < 1 || !kc->budget) { cv->live_file[0] = 0; return; }
    char err[600];
    uint8_t *img;
    size_t len;
    kvp_mtp mk;
    if (len = 0, kvp_image(cv->s.m, kc->fp, cv->s.ids.ids, n_tok, n_kv, sess_mtp_state(&cv->s, &mk), &img, &len, err, sizeof err) ||
        kvc_add(kc, img, len, cv->s.ids.ids, n_tok, n_kv, cv->live_file, ++kc->clock)) {
        if (len) free(img);
        fprintf(stderr, "colibri: serve: cannot keep the conversation aside in memory: out of memory%s\n",
                cv->live_file[0] ? " (its file stays in KV_CACHE_DIR)" : "");
    }
    cv->live_file[0] = 0;
}

/* Loads kept conversation i into the model's cache as the live one. take
 * (the request continues it): the live conversation goes on in its file
 * and it leaves the kept list; otherwise it stays kept, in memory and in
 * its file, and the live conversation, a copy that will diverge from it,
 * gets a file of its own. 0, or -1 (said; the live conversation is then
 * empty). */
static int kvc_restore(kv_cache *kc, conv *cv, int i, int take) {
    sess_select_(&cv->s); /* kv_persist works on the session's slot */
    char err[600];
    kvp_state st;
    kvc_entry *x = &kc->e[i];
    int rc = kvp_load_image(cv->s.m, x->file[0] ? x->file : "a kept conversation", x->img, x->len, kc->fp, &st, 1, err, sizeof err);
    cv->s.ids.n = 0, cv->s.n_kv = 0;
    cv->live_file[0] = 0;
    if (rc) { /* its image cannot be used: forgotten from memory, its file left as it is */
        fprintf(stderr, "colibri: serve: %s; dropped from memory\n", err);
        kvc_drop(kc, i);
        return -1;
    }
    rc = sess_resume(&cv->s, &st, x->file[0] ? x->file : "a kept conversation");
    kvp_state_free(&st);
    if (rc) return fprintf(stderr, "colibri: serve: out of memory restoring a kept conversation\n"), -1;
    if (take) {
        snprintf(cv->live_file, sizeof cv->live_file, "%s", x->file);
        kvc_drop(kc, i);
    } else
        x->used = ++kc->clock;
    return 0;
}

/* One *.coli_kv file of KV_CACHE_DIR at startup. */
typedef struct {
    char name[64];
    time_t mtime;
    uint64_t size;
} kvc_file;

/* Newest first (then by name, for a fixed order). */
static int kvc_file_cmp(const void *a, const void *b) {
    const kvc_file *x = (const kvc_file *)a, *y = (const kvc_file *)b;
    if (x->mtime != y->mtime) return x->mtime > y->mtime ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* At startup: the conversations persisted in KV_CACHE_DIR become kept
 * ones, newest first while they fit KV_CACHE_GB. The rest, files of
 * another model and damaged ones are left on disk untouched and said on
 * stderr; none is read beyond the budget, none is deleted. */
static void kvc_load_dir(kv_cache *kc, coli_model *m) {
    DIR *d = opendir(kc->dir);
    if (!d) { fprintf(stderr, "colibri: KV_CACHE_DIR=%s: %s\n", kc->dir, strerror(errno)); return; }
    kvc_file *f = NULL;
    int nf = 0, capf = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l < 9 || strcmp(de->d_name + l - 8, ".coli_kv")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", kc->dir, de->d_name);
        struct stat sb;
        if (lstat(path, &sb)) continue;
        if (!S_ISREG(sb.st_mode) || l >= sizeof f->name) {
            fprintf(stderr, "colibri: KV_CACHE_DIR: %s is %s; left alone\n", path, !S_ISREG(sb.st_mode) ? compat_kind(sb.st_mode) : "a name too long to track");
            continue;
        }
        if (nf == capf) {
            kvc_file *nfp = (kvc_file *)realloc(f, (size_t)(capf = capf ? 2 * capf : 64) * sizeof *f);
            if (!nfp) { fprintf(stderr, "colibri: KV_CACHE_DIR: out of memory listing %s; the rest left alone\n", kc->dir); break; }
            f = nfp;
        }
        snprintf(f[nf].name, sizeof f[nf].name, "%s", de->d_name);
        f[nf].mtime = sb.st_mtime, f[nf].size = (uint64_t)sb.st_size;
        nf++;
    }
    closedir(d);
    if (nf) qsort(f, (size_t)nf, sizeof *f, kvc_file_cmp);
    int loaded = 0, beyond = 0;
    uint64_t beyond_bytes = 0;
    for (int k = 0; k < nf; k++) {
        char path[4096], err[600];
        snprintf(path, sizeof path, "%s/%s", kc->dir, f[k].name);
        if (f[k].size > kc->budget - kc->bytes) { beyond++, beyond_bytes += f[k].size; continue; }
        size_t len;
        uint8_t *img = (uint8_t *)compat_read_file(path, kc->budget - kc->bytes, &len);
        kvp_state st;
        if (!img) { fprintf(stderr, "colibri: KV_CACHE_DIR: %s: %s; left alone\n", path, compat_strerror(errno)); continue; }
        if (kvp_load_image(m, path, img, len, kc->fp, &st, 0, err, sizeof err)) {
            fprintf(stderr, "colibri: KV_CACHE_DIR: %s; left alone\n", err);
            free(img);
            continue;
        }
        if (kvc_add(kc, img, len, st.tok, st.n_tok, st.n_kv, f[k].name, 0)) free(img);
        else loaded++;
        kvp_state_free(&st);
    }
    free(f);
    for (int i = 0; i < kc->n; i++) kc->e[i].used = kc->clock + (uint64_t)(kc->n - i); /* added newest first: the newest file last used */
    kc->clock += (uint64_t)kc->n;
    if (loaded) fprintf(stderr, "colibri: KV_CACHE_DIR: %d conversations resumed from %s (%.1f MB)\n", kc->n, kc->dir, kc->bytes / 1e6);
    if (beyond)
        fprintf(stderr, "colibri: KV_CACHE_DIR: %d older conversations (%.1f MB) beyond KV_CACHE_GB left on disk, not loaded (files are never deleted)\n", beyond,
                beyond_bytes / 1e6);
}

/* Saves the live conversation to its file in KV_CACHE_DIR; a conversation
 * without one gets a name no file has yet (a restarted server, whose pid
 * may repeat, never writes over an earlier server's file). */
static void kvc_persist(kv_cache *kc, conv *cv) {
    sess_select_(&cv->s); /* kv_persist works on the session's slot */
    if (!kc->dir || cv->s.n_kv < 1) return;
    char path[4096], err[600];
    struct stat sb;
    for (int tries = 0; !cv->live_file[0] && tries < 1000; tries++) {
        snprintf(cv->live_file, sizeof cv->live_file, "conv-%lx-%llu.coli_kv", (long)getpid(), (unsigned long long)++kc->names);
        snprintf(path, sizeof path, "%s/%s", kc->dir, cv->live_file);
        if (!lstat(path, &sb) || errno != ENOENT) cv->live_file[0] = 0; /* taken (or cannot tell): the next name */
    }
    if (!cv->live_file[0]) { fprintf(stderr, "colibri: serve: no free file name in KV_CACHE_DIR=%s; the conversation is not saved\n", kc->dir); return; }
    snprintf(path, sizeof path, "%s/%s", kc->dir, cv->live_file);
    kvp_mtp mk;
    if (kvp_save(cv->s.m, path, kc->fp, cv->s.ids.ids, (int)cv->s.ids.n, cv->s.n_kv, sess_mtp_state(&cv->s, &mk), err, sizeof err))
        fprintf(stderr, "colibri: serve: %s\n", err);
}

/* Chooses where a request of ids[0..n) starts: the live conversation or a
 * kept one, whichever shares the longest cached prefix. A request that does
 * not continue the live conversation (kvc_continues) is another one: the
 * live one is kept aside first, file and all. A kept one that shares more
 * is loaded; the request takes it over (and its file) only when it
 * continues it, else it works on a copy and the kept one stays. Then the
 * live conversation becomes ids (sess_sync). Returns the positions reused
 * (the longest shared cached prefix, at most n-1), or -1 (out of memory:
 * the live conversation is empty). */
static int kvc_select(kv_cache *kc, conv *cv, const int *ids, int n) {
    int best = -1, p_best = kvc_lcp(cv->s.ids.ids, cv->s.n_kv, ids, n);
    for (int i = 0; i < kc->n; i++) {
        int p = kvc_lcp(kc->e[i].ids, kc->e[i].n_kv, ids, n);
        if (p > p_best) best = i, p_best = p;
    }
    if (best >= 0 || !kvc_continues(ids, n, cv->s.ids.ids, (int)cv->s.ids.n)) {
        int take = best >= 0 && kvc_continues(ids, n, kc->e[best].ids, kc->e[best].n_tok);
        kvc_stash(kc, cv); /* appends: best's index holds */
        if (best >= 0) kvc_restore(kc, cv, best, take); /* a failure leaves the live conversation empty */
        /* else a new conversation: the live cache's common prefix (a shared
         * system prompt) stays in use; what follows it is overwritten */
        kvc_fit(kc); /* after the restore, so the one chosen is not evicted first */
    }
    int p = sess_sync(&cv->s, ids, n);
    conv_note(cv);
    return p;
}

static atomic_int serve_stop;
static void on_serve_signal(int sig) {
    (void)sig;
    atomic_store(&serve_stop, 1);
}

/* One request's response as it is generated: the text routed by oai_out,
 * with logprobs the entries of the tokens so far (lp_sent of them
 * streamed), and the Messages or Responses stream's state. */
typedef struct {
    srv_job *j;
    const tok *t;
    const smp_params *sp;
    smp_work *w;
    oai_out o;
    oai_meta meta;
    oai_reply y; /* the Messages and Responses writers' view of the reply */
    int first; /* no chunk sent yet */
    oai_lp *lp;
    int nlp, caplp, lp_sent;
    size_t lp_offset; /* completions' text_offset of the next entry streamed */
    ant_stream as;
    resp_stream rs;
} serve_req;

/* sess_io.on_token: the token's log-probability and its alternatives. */
static void serve_on_token(void *ud, int id, const float *logits) {
    serve_req *q = (serve_req *)ud;
    if (!q->j->req.logprobs) return;
    if (q->nlp == q->caplp) {
        int cap = q->caplp ? q->caplp * 2 : 64;
        oai_lp *n = (oai_lp *)realloc(q->lp, (size_t)cap * sizeof *n);
        if (!n) return; /* the entries stop; the answer goes on */
        q->lp = n, q->caplp = cap;
    }
    oai_lp *e = &q->lp[q->nlp++];
    int top[OAI_MAX_TOP_LOGPROBS];
    float tlp[OAI_MAX_TOP_LOGPROBS];
    memset(e, 0, sizeof *e);
    e->t.s = tok_piece(q->t, id, &e->t.n);
    if (!logits) { /* forced by the grammar: the only token it allowed */
        e->n_top = q->j->req.top_logprobs ? 1 : 0;
        e->top[0] = e->t;
        return;
    }
    int k = smp_logprobs(q->sp, logits, q->w->n, id, q->j->req.top_logprobs, q->w, &e->t.lp, top, tlp);
    for (int i = 0; i < k; i++) e->top[i].s = tok_piece(q->t, top[i], &e->top[i].n), e->top[i].lp = tlp[i];
    e->n_top = k > 0 ? k : 0;
}

/* A chat.completion.chunk (or text_completion chunk) with the text routed
 * since the last one and the log-probabilities not yet streamed. */
static void serve_chunk(serve_req *q, const char *rs, size_t rn, const char *cs, size_t cn, const oai_call *calls, int ncalls) {
    jw w = {0};
    int k = q->nlp - q->lp_sent;
    oai_chunk_sse(&w, &q->j->req, &q->meta, q->first, rs, rn, cs, cn, calls, ncalls, 0, q->lp + q->lp_sent, k, q->lp_offset);
    for (int i = q->lp_sent; i < q->nlp; i++) q->lp_offset += q->lp[i].t.n;
    q->lp_sent = q->nlp;
    q->first = 0;
    if (!w.oom) srv_emit(q->j, w.s, w.n);
    jw_free(&w);
}

/* Streams the text routed since the last call in the request's protocol. */
static void serve_delta(serve_req *q) {
    const char *rs, *cs;
    size_t rn, cn;
    oai_out_delta(&q->o, &rs, &rn, &cs, &cn);
    if (!rn && !cn) return;
    jw w = {0};
    if (q->j->api == SRV_MESSAGES) ant_stream_delta(&q->as, &w, rs, rn, cs, cn);
    else if (q->j->api == SRV_RESPONSES) resp_stream_delta(&q->rs, &w, rs, rn, cs, cn);
    else serve_chunk(q, rs, rn, cs, cn, NULL, 0);
    if (w.n && !w.oom) srv_emit(q->j, w.s, w.n);
    jw_free(&w);
}

static int serve_sink(void *ud, const char *s, size_t n) {
    serve_req *q = (serve_req *)ud;
    int stop = oai_out_put(&q->o, s, n);
    if (atomic_load(&serve_stop)) atomic_store(&q->j->cancel, 1); /* SIGTERM: the answer ends at the next token */
    if (q->j->req.stream) serve_delta(q);
    return stop;
}

/* The first events of a Messages or Responses stream (message_start;
 * response.created and response.in_progress), sent before compute. */
static void serve_start(serve_req *q) {
    if (!q->j->req.stream || (q->j->api != SRV_MESSAGES && q->j->api != SRV_RESPONSES)) return;
    jw w = {0};
    if (q->j->api == SRV_MESSAGES) ant_stream_start(&q->as, &w, &q->j->ant, &q->y);
    else resp_stream_start(&q->rs, &w, &q->j->rr, &q->y);
    if (!w.oom) srv_emit(q->j, w.s, w.n);
    jw_free(&w);
    q->first = 0;
}

/* Ends the request with an error in its protocol's shape: before anything
 * was sent, srv_fail's document or events; a Messages or Responses stream
 * already begun ends with its error events. */
static void serve_fail(serve_req *q, int status, const char *msg, const char *type, const char *param) {
    srv_job *j = q->j;
    if (q->first || !j->req.stream || (j->api != SRV_MESSAGES && j->api != SRV_RESPONSES)) {
        srv_fail(j, q->meta.model, status, msg, type, param);
        return;
    }
    jw w = {0};
    if (j->api == SRV_MESSAGES) ant_stream_error(&w, ant_error_type(status), msg);
    else resp_stream_error(&q->rs, &w, &j->rr, &q->y, msg);
    srv_finish(j, status, &w);
    jw_free(&w);
}

/* The finished answer in the request's protocol: the last events of a
 * stream, or the whole document. */
static void serve_answer(serve_req *q, jw *w, const oai_call *calls, int ncalls) {
    srv_job *j = q->j;
    const oai_req *r = &j->req;
    if (j->api == SRV_MESSAGES || j->api == SRV_RESPONSES) {
        if (r->stream) serve_delta(q); /* what the end of generation released */
        if (j->api == SRV_MESSAGES) r->stream ? ant_stream_finish(&q->as, w, &q->y) : ant_message_json(w, &j->ant, &q->y);
        else r->stream ? resp_stream_finish(&q->rs, w, &j->rr, &q->y) : resp_response_json(w, &j->rr, &q->y);
        return;
    }
    if (r->stream) {
        const char *rs, *cs;
        size_t rn, cn;
        oai_out_delta(&q->o, &rs, &rn, &cs, &cn);
        const char *finish = q->meta.finish;
        q->meta.finish = NULL;
        if (rn || cn || ncalls > 0 || q->first || q->lp_sent < q->nlp) serve_chunk(q, rs, rn, cs, cn, calls, ncalls > 0 ? ncalls : 0);
        q->meta.finish = finish;
        oai_chunk_sse(w, r, &q->meta, 0, NULL, 0, NULL, 0, NULL, 0, 0, NULL, 0, 0);
        if (r->include_usage) oai_chunk_sse(w, r, &q->meta, 0, NULL, 0, NULL, 0, NULL, 0, 1, NULL, 0, 0);
        jw_lit(w, "data: [DONE]\n\n");
    } else
        oai_response_json(w, r, &q->meta, &q->o, calls, ncalls, q->lp, q->nlp);
}

/* The request's sampling settings over the engine's (g0). */
static coli_gen serve_gen(const coli_gen *g0, const oai_req *r, uint64_t clock) {
    coli_gen g = *g0;
    if (r->has_temp) g.sp.temp = (float)r->temp;
    if (r->has_top_p) g.sp.top_p = (float)r->top_p;
    if (r->has_top_k) g.sp.top_k = r->top_k;
    if (r->has_min_p) g.sp.min_p = (float)r->min_p;
    g.seed = r->has_seed ? r->seed : (g0->seed ^ (uint64_t)compat_now() * 1000003ull ^ clock << 32) & ((1ull << 53) - 1);
    g.tokens = 0;
    return g;
}

/* The finished answer: the parsed calls (a cut generation keeps only the
 * calls it completed, never their markup as text), the finish reason, and
 * the fronts' view of it (q->y). */
static int serve_calls(serve_req *q, const sess_io *io, oai_call *calls) {
    int cut = !strcmp(io->why, "NGEN") || !strcmp(io->why, "CTX") || !strcmp(io->why, "interrupted");
    int ncalls = q->o.tool.n ? oai_parse_calls(&q->o, calls, OAI_MAX_TOOL_CALLS, cut) : 0;
    if (ncalls < 0) jw_raw(&q->o.content, q->o.tool.s, q->o.tool.n); /* a finished text that is not a call is text */
    oai_reply y = oai_reply_of(&q->o, calls, ncalls, cut);
    q->meta.finish = strcmp(y.finish, "stop_string") ? y.finish : "stop"; /* OpenAI's reasons: a stop string is "stop" */
    y.id = q->y.id, y.model = q->y.model, y.created = q->y.created;
    y.prompt_tokens = q->meta.prompt_tokens, y.cached_tokens = io->cached, y.completion_tokens = io->generated;
    q->y = y;
    return ncalls;
}

#define SERVE_STEP_ROWS 8 /* rows one request's step may add to a forward (grammar drafts, forced tokens) */

/* A request in a KV slot (serve mode decodes up to SERVE_SLOTS at once):
 * its job, its sampling settings, its response as it is written, its
 * turn's io, and where it is: prefilling its prompt, or decoding. */
enum { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE };

typedef struct {
    conv cv;
    int phase;
    srv_job *j;
    coli_gen g;      /* the request's settings over the engine's (cv.g points here) */
    serve_req q;
    sess_io io;
    srv_gen_stats st;
    sess_rows r;     /* the step planned for this forward (decoding) */
    int nrows, nwant; /* rows it put in this forward; of them, logits wanted */
    int row_at;       /* its first row in the forward (hidden rows) */
    int want_at;      /* its first wanted row among the forward's wanted rows */
    uint64_t order;  /* admission order: prefill is first come, first served */
} serve_slot;

/* Serve mode's compute side: the slots, the kept conversations, the
 * server, and one forward's rows and logits. */
typedef struct {
    coli_model *m;
    srv *s;
    kv_cache *kc;
    serve_slot *sl;
    int nsl, active;
    int fatal;       /* a request ended because the model failed: the server stops */
    uint64_t admitted;
    const coli_gen *g0;
    int ngen_cap, prefill_cap;
    const char *model, *fps;
    fwd_row *rows;   /* [cap] */
    float *out;      /* [cap][vocab] the wanted rows' logits */
    float *hid;      /* [cap][dim] every row's final-normed hidden row (MTP drafts) */
    int cap;
    gr_tabcache gtc; /* grammar masks' token tables between requests */
} serve_ctx;

/* Ends slot k's request: its answer (or, failed, its error: 503 when the
 * server is stopping, else as io says) and its figures; the slot is free
 * again, its conversation kept for prefix reuse when the request
 * succeeded. */
static void serve_end(serve_ctx *x, serve_slot *k, int failed) {
    conv *cv = &k->cv;
    srv_job *j = k->j;
    serve_req *q = &k->q;
    sess_io *io = &k->io;
    if (!failed && sess_finish(&cv->s)) failed = 1;
    k->st.cached_tokens = io->cached, k->st.generated_tokens = io->generated;
    k->st.ttft_s = io->generated ? cv->s.u.ttft : -1, k->st.decode_s = compat_now() - cv->s.u.t1;
    srv_note(x->s, &k->st);
    jw w = {0};
    if (failed) {
        fprintf(stderr, "colibri: %s\n", io->err);
        sess_abort(&cv->s);
        const oai_req *r = &j->req;
        int status = atomic_load(&serve_stop) && !io->fatal ? 503 : io->fatal || !io->client ? 500 : 400;
        serve_fail(q, status, io->err, io->client && !io->fatal && status != 503 ? "invalid_request_error" : "server_error",
                   io->client && r->gram && status != 503 ? (r->gram_tools ? "tools" : "response_format") : NULL);
        cv->s.n_kv = 0, cv->s.ids.n = 0, cv->live_file[0] = 0;
    } else {
        fprintf(stderr, "colibri: stopped: %s | %s: prompt %d tokens (%d cached), %d generated, TTFT %.3f s, %.2f tok/s decoding%s\n", io->why, j->id,
                k->st.prompt_tokens, io->cached, io->generated, k->st.ttft_s > 0 ? k->st.ttft_s : 0.0,
                io->generated > 1 && k->st.decode_s > 0 ? (io->generated - 1) / k->st.decode_s : 0.0,
                x->m->tel.replayed ? TEL_REPLAYED : "");
        if (cv->s.u.mtp_draft) print_spec(j->id, &cv->s.sc.st, io->generated, -1);
        oai_out_finish(&q->o);
        oai_call calls[OAI_MAX_TOOL_CALLS];
        q->meta.prompt_tokens = k->st.prompt_tokens, q->meta.completion_tokens = io->generated, q->meta.cached_tokens = io->cached;
        int ncalls = serve_calls(q, io, calls);
        serve_answer(q, &w, calls, ncalls);
        if (j->api == SRV_RESPONSES && j->rr.store && x->s->rs_ok && resp_store_reply(&x->s->rs, &j->rr, &q->y))
            fprintf(stderr, "colibri: serve: response %s not kept for previous_response_id (larger than the store, or out of memory)\n", j->id);
        if (ncalls > 0) oai_calls_free(calls, ncalls);
        if (w.oom) jw_free(&w), serve_fail(q, 500, "out of memory", "server_error", NULL);
        else srv_finish(j, 200, &w);
        kvc_persist(x->kc, cv);
    }
    jw_free(&w);
    conv_grammar(cv, NULL, NULL, 0);
    oai_out_free(&q->o);
    resp_stream_free(&q->rs);
    free(q->lp);
    srv_release(x->s, j);
    k->j = NULL, k->phase = SLOT_FREE, x->active--;
    if (io->fatal) x->fatal = 1; /* its message (m->err) is the server's last word */
    else x->m->err[0] = 0;      /* handled */
}

/* The free slot for a request of ids[0..n): the one whose conversation
 * shares the longest cached prefix with it, else the one used least
 * recently. */
static serve_slot *serve_pick(serve_ctx *x, const int *ids, int n) {
    serve_slot *best = NULL;
    int bp = -1;
    for (int i = 0; i < x->nsl; i++) {
        serve_slot *k = &x->sl[i];
        if (k->phase != SLOT_FREE) continue;
        int p = kvc_lcp(k->cv.s.ids.ids, k->cv.s.n_kv, ids, n);
        if (p > bp || (p == bp && k->order < best->order)) best = k, bp = p;
    }
    return best;
}

/* Starts request j in a free slot: its settings, the conversation it
 * continues (kvc_select), its grammar, the turn checked. A request that
 * cannot start is answered now. */
static void serve_admit(serve_ctx *x, srv_job *j) {
    serve_slot *k = serve_pick(x, j->ids.ids, (int)j->ids.n);
    conv *cv = &k->cv;
    const oai_req *r = &j->req;
    k->j = j, k->g = serve_gen(x->g0, r, x->kc->clock);
    cv->g = &k->g;
    sess_params sp = conv_params(&k->g);
    sess_set_params(&cv->s, &sp);
    int n = (int)j->ids.n;
    int p = kvc_select(x->kc, cv, j->ids.ids, n);
    k->q = (serve_req){.j = j, .t = cv->s.t, .sp = &k->g.sp, .w = &cv->s.w, .first = 1};
    k->q.meta = (oai_meta){j->id, x->model, x->fps, j->created, n, 0, 0, NULL};
    k->q.y.id = j->id, k->q.y.model = x->model, k->q.y.created = j->created, k->q.y.prompt_tokens = n, k->q.y.cached_tokens = p > 0 ? p : 0;
    k->st = (srv_gen_stats){.prompt_tokens = n, .ttft_s = -1};
    int limit = x->ngen_cap && j->max_new > x->ngen_cap ? x->ngen_cap : j->max_new;
    k->io = (sess_io){.stop = &j->cancel, .sink = serve_sink, .ud = &k->q, .max_new = limit, .on_token = serve_on_token};
    k->order = ++x->admitted, k->phase = SLOT_PREFILL, x->active++;
    oai_out_init(&k->q.o, r);
    if (p < 0 || (r->gram && conv_grammar(cv, r->gram, x->kc->gv, r->gram_tools))) {
        snprintf(k->io.err, sizeof k->io.err, "out of memory");
        serve_end(x, k, 1);
        return;
    }
    serve_start(&k->q);
    if (sess_begin(&cv->s, (size_t)p, &k->io)) { serve_end(x, k, 1); return; }
    print_turn(cv);
}

/* One forward's rows: every decoding slot's planned step (a slot whose
 * turn ends without rows is answered now), then prompt rows of the
 * prefilling slots, first come first served, at most prefill_cap in all.
 * Returns the rows. */
static int serve_gather(serve_ctx *x) {
    int n = 0, wanted = 0;
    for (int i = 0; i < x->nsl; i++) {
        serve_slot *k = &x->sl[i];
        k->nrows = k->nwant = 0;
        if (k->phase != SLOT_DECODE) continue;
        if (sess_plan(&k->cv.s, &k->r)) { serve_end(x, k, 1); continue; }
        if (!k->r.k) {
            if (k->r.done) serve_end(x, k, 0);
            continue;
        }
        sess_plan_rows(&k->cv.s, &k->r, x->rows + n);
        k->nrows = k->r.k, k->nwant = k->r.all ? k->r.k : 1, k->row_at = n, k->want_at = wanted, n += k->r.k, wanted += k->nwant;
    }
    int budget = x->prefill_cap;
    for (int done = 0; !done && budget > 0;) { /* the earliest admitted prefilling slot first */
        serve_slot *first = NULL;
        for (int i = 0; i < x->nsl; i++) {
            serve_slot *k = &x->sl[i];
            if (k->phase == SLOT_PREFILL && !k->nrows && (!first || k->order < first->order)) first = k;
        }
        if (!first) break;
        if (atomic_load(&first->j->cancel)) { /* the client left before its first token */
            snprintf(first->io.err, sizeof first->io.err, "the client went away");
            serve_end(x, first, 1);
            continue;
        }
        int t = sess_prefill_rows(&first->cv.s, budget, x->rows + n);
        first->nrows = t, first->nwant = first->cv.s.u.pf == first->cv.s.u.np, first->row_at = n, first->want_at = wanted;
        n += t, budget -= t, wanted += first->nwant;
        done = t == 0;
    }
    return n;
}

/* The forward's logits back to their slots (each slot's wanted rows from
 * want_at, its hidden rows from row_at: rows are gathered decoding slots
 * first, then prompts in admission order): a prefilling slot takes its
 * chunk and starts decoding once its prompt is complete; a decoding slot
 * accepts its rows. */
static void serve_scatter(serve_ctx *x) {
    size_t V = (size_t)x->m->c.vocab, D = (size_t)x->m->c.dim;
    int seqs = 0;
    for (int i = 0; i < x->nsl; i++) {
        serve_slot *k = &x->sl[i];
        if (!k->nrows) continue;
        const float *lg = x->out + (size_t)k->want_at * V, *hid = x->hid + (size_t)k->row_at * D;
        if (k->phase == SLOT_PREFILL) {
            if (sess_prefilled(&k->cv.s, k->nrows, hid, k->nwant ? lg : NULL)) serve_end(x, k, 1);
            else if (k->nwant) k->phase = SLOT_DECODE;
        } else {
            seqs++;
            int r = sess_absorb(&k->cv.s, &k->r, lg, hid);
            if (r) serve_end(x, k, r < 0);
        }
    }
    srv_note_forward(x->s, seqs);
}

/* Serve mode's compute loop: requests join free slots between forwards,
 * every forward advances every slot (a decode step, or a prompt chunk),
 * a request that finishes leaves its slot at once. Returns 0 when asked
 * to stop, -1 when the model failed (a read error). */
static int serve_loop(serve_ctx *x) {
    while (!atomic_load(&serve_stop)) {
        srv_job *j;
        while (x->active < x->nsl && (j = srv_next(x->s, x->active ? 0 : 200))) serve_admit(x, j);
        if (!x->active) continue;
        xs_stats x0, x1;
        xs_stats_get(&x->m->xs, &x0);
        int n = serve_gather(x);
        if (x->fatal) break;
        if (!n) continue;
        if (fwd_rows(x->m, x->rows, n, x->out, x->hid)) {
            for (int i = 0; i < x->nsl; i++)
                if (x->sl[i].phase != SLOT_FREE) {
                    sess_fail(&x->sl[i].io, 1, 0, "%s", x->m->err);
                    serve_end(x, &x->sl[i], 1);
                }
            return -1;
        }
        serve_scatter(x);
        if (x->fatal) break;
        xs_stats_get(&x->m->xs, &x1);
        srv_gen_stats d = {.hit_gpu = x1.hit_vram - x0.hit_vram, .hit_pin = x1.hit_pin - x0.hit_pin, .hit_lru = x1.hit_lru - x0.hit_lru,
                           .miss = x1.miss - x0.miss, .disk_bytes = x1.bytes_read - x0.bytes_read};
        srv_note_engine(x->s, &d);
    }
    for (int i = 0; i < x->nsl; i++) { /* stopping: an answer being decoded ends as interrupted, one still prefilling gets 503; after a model failure, 500 */
        serve_slot *k = &x->sl[i];
        if (k->phase != SLOT_FREE && x->fatal) sess_fail(&k->io, 1, 0, "%s", x->m->err), serve_end(x, k, 1); /* the model failed */
        else if (k->phase == SLOT_DECODE) k->io.why = "interrupted", serve_end(x, k, 0);
        else if (k->phase == SLOT_PREFILL) sess_fail(&k->io, 0, 0, "the server is shutting down"), serve_end(x, k, 1);
    }
    return x->fatal ? -1 : 0;
}

/* The slots' sessions (slot i's conversation in KV slot i) and one
 * forward's rows, logits and hidden rows. 0, or -1 (said). */
static int serve_slots_open(serve_ctx *x, coli_model *m, const coli_gen *g, tok *t, const char *dir) {
    x->m = m, x->nsl = m->kv.slots;
    int max_rows = SERVE_STEP_ROWS < m->ubatch ? SERVE_STEP_ROWS : m->ubatch;
    x->prefill_cap = m->ubatch;
    x->cap = x->nsl * max_rows + m->ubatch;
    x->sl = (serve_slot *)calloc((size_t)x->nsl, sizeof *x->sl);
    x->rows = (fwd_row *)malloc((size_t)x->cap * sizeof *x->rows);
    x->out = (float *)malloc((size_t)(x->nsl * max_rows + x->nsl) * m->c.vocab * sizeof(float));
    x->hid = (float *)malloc((size_t)x->cap * m->c.dim * sizeof(float));
    if (!x->sl || !x->rows || !x->out || !x->hid)
        return fprintf(stderr, "colibri: out of memory for %d serve slots\n", x->nsl), free(x->sl), free(x->rows), free(x->out), free(x->hid), -1;
    for (int i = 0; i < x->nsl; i++) {
        conv *cv = &x->sl[i].cv;
        if (conv_open(cv, m, g, t, dir)) {
            while (i--) conv_close(&x->sl[i].cv);
            free(x->sl), free(x->rows), free(x->out), free(x->hid);
            return -1;
        }
        sess_use_slot(&cv->s, i);
        sess_set_max_rows(&cv->s, max_rows);
        cv->s.gtc = &x->gtc;
    }
    return 0;
}

static void serve_slots_close(serve_ctx *x) {
    for (int i = 0; i < x->nsl && x->sl; i++) conv_close(&x->sl[i].cv);
    free(x->sl), free(x->rows), free(x->out), free(x->hid);
    x->sl = NULL, x->rows = NULL, x->out = NULL, x->hid = NULL;
    gr_tabcache_free(&x->gtc);
}

/* The model's name for /v1/models: SERVE_MODEL, or the directory's last
 * component. */
static void serve_name(const coli_env *e, const char *dir, char *name, size_t cap) {
    const char *sm = env_v(e, ENV_SERVE_MODEL)->s;
    if (sm) { snprintf(name, cap, "%s", sm); return; }
    size_t l = strlen(dir);
    while (l > 1 && (dir[l - 1] == '/' || dir[l - 1] == '\\')) l--;
    size_t b = l;
    while (b && dir[b - 1] != '/' && dir[b - 1] != '\\') b--;
    snprintf(name, cap, "%.*s", (int)(l - b), dir + b);
}

/* Serve mode's API keys: COLI_API_KEY (comma-separated) and the lines of
 * COLI_API_KEY_FILE. keys[] point into *buf. Returns the count, or -1
 * (said). */
#define SERVE_MAX_KEYS 256
static int serve_keys(const coli_env *e, char **buf, const char **keys) {
    const char *env = env_v(e, ENV_COLI_API_KEY)->s, *path = env_v(e, ENV_COLI_API_KEY_FILE)->s;
    size_t fl = 0, el = env ? strlen(env) : 0;
    char *file = NULL;
    if (path) {
        struct stat sb;
        if (stat(path, &sb)) return fprintf(stderr, "colibri: COLI_API_KEY_FILE=%s: %s\n", path, compat_strerror(errno)), -1;
        if (!S_ISREG(sb.st_mode)) return fprintf(stderr, "colibri: COLI_API_KEY_FILE=%s: not a regular file\n", path), -1;
        if (!(file = compat_read_file(path, 1u << 20, &fl)))
            return fprintf(stderr, "colibri: COLI_API_KEY_FILE=%s: %s\n", path, errno == EFBIG ? "larger than 1 MB" : compat_strerror(errno)), -1;
    }
    if (!(*buf = (char *)malloc(el + fl + 2))) return free(file), fprintf(stderr, "colibri: out of memory\n"), -1;
    memcpy(*buf, env ? env : "", el), (*buf)[el] = '\n';
    memcpy(*buf + el + 1, file ? file : "", fl), (*buf)[el + 1 + fl] = 0;
    free(file);
    int n = 0;
    for (char *p = *buf, *end = *buf + el + 1 + fl; p < end;) {
        int from_file = p > *buf + el;
        char *e2 = p;
        while (e2 < end && *e2 != '\n' && (from_file || *e2 != ',')) e2++;
        char *s = p, *t = e2;
        p = e2 + 1;
        while (s < t && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
        while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r')) t--;
        if (s == t || (from_file && *s == '#')) continue;
        for (char *c = s; c < t; c++)
            if ((unsigned char)*c < 0x21 || (unsigned char)*c > 0x7e)
                return fprintf(stderr, "colibri: %s: an API key must be printable ASCII without spaces (key %d)\n", from_file ? path : "COLI_API_KEY", n + 1), -1;
        if (n == SERVE_MAX_KEYS) return fprintf(stderr, "colibri: more than %d API keys\n", SERVE_MAX_KEYS), -1;
        *t = 0, keys[n++] = s;
    }
    if ((env || path) && !n) return fprintf(stderr, "colibri: %s holds no API key\n", path ? "COLI_API_KEY_FILE" : "COLI_API_KEY"), -1;
    return n;
}

/* 1 when host names only loopback (127.0.0.0/8, ::1, localhost). */
static int serve_loopback(const char *host) {
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "[::1]");
}

/* GET /props: the model, the context and the knobs in force. */
static char *serve_props(const coli_model *m, const coli_gen *g, const char *dir, const char *name, int n_keys, const srv_opts *so) {
    jw w = {0};
    jw_lit(&w, "{\"model_alias\":"), jw_str(&w, name);
    jw_lit(&w, ",\"model_path\":"), jw_str(&w, dir);
    jw_lit(&w, ",\"model_type\":"), jw_str(&w, m->c.model_type);
    jw_lit(&w, ",\"chat_format\":"), jw_str(&w, chat_info(g->fmt)->name);
    jw_lit(&w, ",\"n_ctx\":"), jw_int(&w, m->kv.ctx);
    jw_lit(&w, ",\"vocab_size\":"), jw_int(&w, m->c.vocab);
    jw_lit(&w, ",\"total_slots\":"), jw_int(&w, m->kv.slots);
    jw_lit(&w, ",\"default_generation_settings\":{\"temperature\":"), jw_num(&w, g->sp.temp);
    jw_lit(&w, ",\"top_k\":"), jw_int(&w, g->sp.top_k);
    jw_lit(&w, ",\"top_p\":"), jw_num(&w, g->sp.top_p);
    jw_lit(&w, ",\"min_p\":"), jw_num(&w, g->sp.min_p);
    jw_lit(&w, ",\"thinking\":"), jw_lit(&w, g->think ? "true" : "false");
    jw_lit(&w, "},\"limits\":{\"queue\":"), jw_int(&w, so->max_queue);
    jw_lit(&w, ",\"connections\":"), jw_int(&w, so->max_conns);
    jw_lit(&w, ",\"connections_per_ip\":"), jw_int(&w, so->max_conns_ip);
    jw_lit(&w, ",\"timeout_s\":"), jw_int(&w, so->timeout_s);
    jw_lit(&w, ",\"max_body\":"), jw_int(&w, (long long)so->max_body);
    jw_lit(&w, ",\"max_messages\":"), jw_int(&w, so->max_messages);
    jw_lit(&w, "},\"api_key_required\":"), jw_lit(&w, n_keys ? "true" : "false");
    jw_lit(&w, ",\"build_info\":\"colibri " COLI_VERSION "\"}");
    if (w.oom) jw_free(&w);
    return w.s;
}

/* SERVE mode (--serve or SERVE=1): the OpenAI-compatible HTTP API until
 * SIGTERM or Ctrl-C. Returns the exit status. */
static int run_serve(coli_model *m, const char *dir, const coli_gen *g, tok *t, const coli_env *e) {
    kv_cache kc;
    serve_ctx x;
    srv s;
    char err[600], fps[32], name[256], *keybuf = NULL, *props = NULL;
    const char *keys[SERVE_MAX_KEYS];
    memset(&kc, 0, sizeof kc);
    memset(&x, 0, sizeof x);
    int n_keys = serve_keys(e, &keybuf, keys);
    if (n_keys < 0) return free(keybuf), EXIT_INPUT;
    const char *host = env_v(e, ENV_COLI_HOST)->s;
    if (env_v(e, ENV_HOST)->set && !env_v(e, ENV_COLI_HOST)->set)
        fprintf(stderr, "colibri: HOST=%s is not read: serve mode listens on COLI_HOST (%s)\n", env_v(e, ENV_HOST)->s ? env_v(e, ENV_HOST)->s : "", host);
    if (env_v(e, ENV_PORT)->set && !env_v(e, ENV_COLI_PORT)->set)
        fprintf(stderr, "colibri: PORT=%s is not read: serve mode listens on COLI_PORT (%lld)\n", env_v(e, ENV_PORT)->s ? env_v(e, ENV_PORT)->s : "",
                env_i(e, ENV_COLI_PORT));
    if (serve_slots_open(&x, m, g, t, dir)) return free(keybuf), EXIT_INPUT;
    kc.fp = kvp_fingerprint(m, dir);
    for (int i = 0; i < x.nsl; i++) x.sl[i].cv.fp = kc.fp;
    snprintf(fps, sizeof fps, "colibri-%016llx", (unsigned long long)kc.fp);
    serve_name(e, dir, name, sizeof name);
    gr_vocab gv;
    if (sess_vocab(t, m->c.vocab, &gv)) {
        fprintf(stderr, "colibri: out of memory building the vocabulary trie\n");
        serve_slots_close(&x);
        return free(keybuf), EXIT_INPUT;
    }
    kc.gv = &gv;
    kc.budget = (size_t)(env_f(e, ENV_KV_CACHE_GB) * GB);
    kc.dir = env_v(e, ENV_KV_CACHE_DIR)->s;
    if (kc.dir) kvc_load_dir(&kc, m);
    int conns = (int)env_i(e, ENV_SERVE_CONNS), per_ip = (int)env_i(e, ENV_SERVE_CONNS_PER_IP);
    srv_opts so = {host, (int)env_i(e, ENV_COLI_PORT), conns, per_ip < conns ? per_ip : conns, (int)env_i(e, ENV_SERVE_QUEUE),
                   (int)env_i(e, ENV_SERVE_TIMEOUT), (int)env_i(e, ENV_SERVE_MAX_MESSAGES), (size_t)env_i(e, ENV_SERVE_MAX_BODY), m->kv.ctx, name, fps,
                   g->fmt, keys, n_keys, env_v(e, ENV_COLI_CORS)->s, NULL};
    so.props = props = serve_props(m, g, dir, name, n_keys, &so);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_serve_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = 0;
    if (srv_start(&s, &so, t, err, sizeof err)) {
        fprintf(stderr, "colibri: %s\n", err);
        rc = EXIT_INPUT;
        goto out;
    }
    fprintf(stderr, "colibri: serving %s on http://%s:%d (CTX %d, %d slots%s, queue %d, KV_CACHE_GB %g%s%s): POST /v1/chat/completions, /v1/completions, "
            "/v1/messages, /v1/responses, /tokenize, /detokenize; GET /v1/models, /health, /props, /metrics, / (chat page)\n", name, so.host, s.port, m->kv.ctx, x.nsl,
            env_i(e, ENV_SERVE_SLOTS) ? "" : " from the memory plan", so.max_queue,
            env_f(e, ENV_KV_CACHE_GB), n_keys ? ", API key required" : "", so.cors ? ", CORS on" : "");
    if (!serve_loopback(host) && !n_keys)
        fprintf(stderr, "colibri: warning: COLI_HOST=%s listens beyond this machine and no API key is set (COLI_API_KEY): anyone who can reach it can use it\n", host);
    x.s = &s, x.kc = &kc, x.g0 = g, x.model = name, x.fps = fps;
    x.ngen_cap = env_v(e, ENV_NGEN)->set ? (int)env_i(e, ENV_NGEN) : 0;
    if (serve_loop(&x)) {
        fprintf(stderr, "colibri: stopping the server: %s\n", m->err);
        rc = EXIT_INPUT;
    }
    srv_stop(&s);
    fprintf(stderr, "colibri: server stopped: %lld requests answered, %lld refused with 429 (queue full)\n", (long long)atomic_load(&s.served),
            (long long)atomic_load(&s.refused_busy));
out:
    while (kc.n) kvc_drop(&kc, kc.n - 1);
    free(kc.e);
    serve_slots_close(&x);
    gr_vocab_free(&gv);
    free(keybuf), free(props);
    signal(SIGTERM, SIG_DFL), signal(SIGINT, SIG_DFL);
    return rc;
}

/* --tokenize: token ids of stdin's text (one line of ids), or with --jsonl
 * of each stdin line, a JSON string (one line of ids per line). */
static int run_tokenize(const char *dir, int jsonl) {
    char err[600];
    tok *t = load_tokenizer(dir, err, sizeof err);
    if (!t) return fprintf(stderr, "colibri: %s\n", err), EXIT_INPUT;
    size_t cap = 1 << 16, len = 0;
    char *buf = (char *)malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len, stdin)) > 0;) {
        len += r;
        if (len == cap) {
            char *nb = (char *)realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    if (!buf) return tok_free(t), fprintf(stderr, "colibri: out of memory\n"), EXIT_INPUT;
    tok_ids ids = {0};
    int rc = 0, line = 0;
    for (size_t p = 0; p < len || (!jsonl && p == 0);) {
        size_t e = jsonl ? p : len;
        while (jsonl && e < len && buf[e] != '\n') e++;
        const char *text = buf + p;
        size_t n = e - p;
        js_doc *d = NULL;
        line++;
        if (jsonl) {
            d = js_parse(text, n, err, sizeof err);
            if (!d || !js_str(d, d->root)) {
                fprintf(stderr, "colibri: stdin line %d is not a JSON string%s%s\n", line, d ? "" : ": ", d ? "" : err);
                js_free(d);
                rc = EXIT_INPUT;
                break;
            }
            text = js_str(d, d->root), n = js_str_len(d, d->root);
        }
        ids.n = 0;
        if (tok_encode(t, text, n, &ids)) { rc = EXIT_INPUT; js_free(d); break; }
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        putchar('\n');
        js_free(d);
        p = e + 1;
        if (!jsonl) break;
    }
    tok_ids_free(&ids);
    free(buf);
    tok_free(t);
    return rc;
}

/* The bytes --perplexity reads at most (1 GiB: tok_encode's input limit). */
#define PPL_MAX_FILE ((size_t)1 << 30)
/* Scored positions per forward with their logits kept: as many as UBATCH
 * allows while the logits stay under 64 MiB (a 154,880-token vocabulary
 * gets 108 per forward). */
#define PPL_LOGITS_BYTES ((size_t)64 << 20)

/* What --perplexity, --kld-base and --kld ask for. */
typedef struct {
    const char *text;     /* --perplexity FILE: the text */
    const char *base_out; /* --kld-base OUT: keep this run's distributions */
    const char *base_in;  /* --kld BASE: compare with a kept run (its text too) */
} quality_args;

/* A run's text as whole windows: tokens[chunks * w]. */
typedef struct {
    int *tokens;
    size_t chunks;
    int w;
} quality_text;

/* The base file of --kld-base / --kld: a safetensors file holding
 * "window" (I32 [1]), "tokens" (I32 [chunks * window]), "logprobs" (U16
 * [rows, vocab], quality.h's packing; rows = chunks * ppl_scored(window)),
 * "lp_lo" and "lp_step" (F32 [rows]). */
typedef struct {
    st_index ix;
    const st_tensor *lp;
    float *lo, *step;
} kld_base;

/* FILE's tokens in whole windows of the model's context. 0, or EXIT_INPUT (said). */
static int quality_read_text(coli_model *m, tok *t, const char *path, quality_text *q) {
    size_t len;
    char *text = compat_read_file(path, PPL_MAX_FILE, &len);
    if (!text) return fprintf(stderr, "colibri: --perplexity %s: %s\n", path, errno == EFBIG ? "larger than 1 GiB" : compat_strerror(errno)), EXIT_INPUT;
    tok_ids ids = {0};
    int rc = tok_encode(t, text, len, &ids);
    free(text);
    if (rc) return tok_ids_free(&ids), fprintf(stderr, "colibri: --perplexity %s: could not be tokenized (out of memory)\n", path), EXIT_INPUT;
    q->w = m->kv.ctx, q->chunks = ids.n / (size_t)q->w;
    if (!q->chunks) {
        fprintf(stderr, "colibri: --perplexity %s: %zu tokens, fewer than one window of %d (CTX, capped at the model's context)\n", path, ids.n, q->w);
        return tok_ids_free(&ids), EXIT_INPUT;
    }
    q->tokens = ids.ids, ids.ids = NULL; /* the run owns them now */
    tok_ids_free(&ids);
    return 0;
}

/* The named tensor of the base file with the dtype and shape asked for
 * (a dimension < 0: any). NULL when it is not so (said). */
static const st_tensor *kld_tensor(const kld_base *b, const char *path, const char *name, st_dtype dt, int ndim, int64_t d0, int64_t d1) {
    const st_tensor *x = st_find(&b->ix, name);
    if (!x) return fprintf(stderr, "colibri: --kld %s: no tensor '%s' (not a file --kld-base wrote)\n", path, name), NULL;
    if (x->dtype != dt || x->ndim != ndim || (d0 >= 0 && x->shape[0] != d0) || (ndim > 1 && d1 >= 0 && x->shape[1] != d1))
        return fprintf(stderr, "colibri: --kld %s: tensor '%s' has another dtype or shape than --kld-base writes\n", path, name), NULL;
    return x;
}

/* Opens a base file for this model: its window, text and packed rows,
 * every field checked. 0, or EXIT_INPUT (said). */
static int kld_open(coli_model *m, const char *path, kld_base *b, quality_text *q) {
    char err[700];
    memset(b, 0, sizeof *b);
    if (st_add_file(&b->ix, path, err, sizeof err)) return fprintf(stderr, "colibri: --kld %s\n", err), EXIT_INPUT;
    const st_tensor *win = kld_tensor(b, path, "window", ST_I32, 1, 1, 0), *tk = win ? kld_tensor(b, path, "tokens", ST_I32, 1, -1, 0) : NULL;
    int32_t w32 = 0;
    if (!tk) return EXIT_INPUT;
    if (st_read_raw(&b->ix, win, &w32, err, sizeof err)) return fprintf(stderr, "colibri: --kld %s\n", err), EXIT_INPUT;
    if (w32 < 3 || w32 > m->kv.ctx || tk->shape[0] % w32 || !tk->shape[0])
        return fprintf(stderr, "colibri: --kld %s: windows of %d tokens over %lld tokens do not fit this run (context %d: CTX, capped at the model's)\n", path, (int)w32,
                       (long long)tk->shape[0], m->kv.ctx), EXIT_INPUT;
    q->w = w32, q->chunks = (size_t)(tk->shape[0] / w32);
    size_t rows = q->chunks * (size_t)ppl_scored(q->w);
    if (!(b->lp = kld_tensor(b, path, "logprobs", ST_U16, 2, (int64_t)rows, m->c.vocab))) return EXIT_INPUT;
    const st_tensor *lo = kld_tensor(b, path, "lp_lo", ST_F32, 1, (int64_t)rows, 0), *st = lo ? kld_tensor(b, path, "lp_step", ST_F32, 1, (int64_t)rows, 0) : NULL;
    if (!st) return EXIT_INPUT;
    q->tokens = (int *)malloc((size_t)tk->nbytes);
    b->lo = (float *)malloc(rows * sizeof(float)), b->step = (float *)malloc(rows * sizeof(float));
    if (!q->tokens || !b->lo || !b->step) return fprintf(stderr, "colibri: out of memory\n"), EXIT_INPUT;
    if (st_read_raw(&b->ix, tk, q->tokens, err, sizeof err) || st_read_raw(&b->ix, lo, b->lo, err, sizeof err) || st_read_raw(&b->ix, st, b->step, err, sizeof err))
        return fprintf(stderr, "colibri: --kld %s\n", err), EXIT_INPUT;
    for (size_t i = 0; i < q->chunks * (size_t)q->w; i++)
        if (q->tokens[i] < 0 || q->tokens[i] >= m->c.vocab)
            return fprintf(stderr, "colibri: --kld %s: tensor 'tokens': id %d at %zu is outside the vocabulary (%d)\n", path, q->tokens[i], i, m->c.vocab), EXIT_INPUT;
    return 0;
}

static void kld_close(kld_base *b) {
    st_close(&b->ix);
    free(b->lo), free(b->step);
}

/* Starts the base file OUT: its tensors declared, the window and the text
 * written. 0, or EXIT_INPUT (said). */
static int kld_begin(st_writer *wr, const char *path, const quality_text *q, int vocab) {
    char err[700];
    int64_t rows = (int64_t)q->chunks * ppl_scored(q->w), n = (int64_t)q->chunks * q->w, one = 1, shape[2] = {rows, vocab};
    int32_t w32 = q->w;
    st_writer_init(wr);
    if (st_writer_add(wr, "window", ST_I32, 1, &one) || st_writer_add(wr, "tokens", ST_I32, 1, &n) || st_writer_add(wr, "logprobs", ST_U16, 2, shape) ||
        st_writer_add(wr, "lp_lo", ST_F32, 1, &rows) || st_writer_add(wr, "lp_step", ST_F32, 1, &rows))
        return fprintf(stderr, "colibri: --kld-base %s: out of memory\n", path), EXIT_INPUT;
    static const char *const meta[] = {"format", "colibri KL-divergence base 1", NULL};
    if (st_writer_begin(wr, path, meta, err, sizeof err) || st_writer_data(wr, &w32, sizeof w32, err, sizeof err) ||
        st_writer_data(wr, q->tokens, (size_t)n * sizeof(int32_t), err, sizeof err))
        return fprintf(stderr, "colibri: --kld-base %s\n", err), EXIT_INPUT;
    return 0;
}

/* The run over the text's windows (quality.h's plan): the perplexity, and
 * with a base file to write or to compare with, each scored position's
 * distribution packed or compared. */
typedef struct {
    coli_model *m;
    const quality_args *a;
    quality_text q;
    st_writer wr;
    kld_base b;
    ppl_acc ppl;
    kld_acc kld;
    float *lg, *lo, *step;   /* a forward's logits; the packed rows' ranges (--kld-base) */
    double *lp, *lr;         /* rows of vocab doubles: the base's and this run's log-probabilities */
    uint16_t *row;           /* one packed row */
    size_t at;               /* scored positions so far */
} quality_run;

/* Scores position j of chunk tk (its logits at lg). 0, or EXIT_INPUT (said). */
static int quality_score(quality_run *r, const int *tk, int j, const float *lg) {
    int V = r->m->c.vocab;
    char err[700];
    if (r->a->base_out || r->a->base_in) { /* the log-probabilities once, for the NLL and the base */
        kld_log_softmax(lg, V, r->lr);
        ppl_add(&r->ppl, -r->lr[tk[j + 1]]);
    } else
        ppl_add(&r->ppl, ppl_nll(lg, V, tk[j + 1]));
    if (r->a->base_out) {
        kld_pack(r->lr, V, r->row, &r->lo[r->at], &r->step[r->at]);
        if (st_writer_data(&r->wr, r->row, (size_t)V * sizeof(uint16_t), err, sizeof err))
            return fprintf(stderr, "colibri: --kld-base %s\n", err), EXIT_INPUT;
    }
    if (r->a->base_in) {
        const st_tensor *t = r->b.lp;
        size_t bytes = (size_t)V * sizeof(uint16_t);
        if (compat_pread_full(r->b.ix.files[t->file].fd, r->row, bytes, t->off + r->at * bytes))
            return fprintf(stderr, "colibri: --kld %s: read failed: %s\n", r->a->base_in, errno == EIO ? "file truncated or I/O error" : compat_strerror(errno)), EXIT_INPUT;
        if (kld_unpack(r->row, V, r->b.lo[r->at], r->b.step[r->at], r->lp))
            return fprintf(stderr, "colibri: --kld %s: row %zu's range (lp_lo, lp_step) is not finite and positive\n", r->a->base_in, r->at), EXIT_INPUT;
        if (kld_add(&r->kld, r->lp, r->lr, V, tk[j + 1])) return fprintf(stderr, "colibri: out of memory\n"), EXIT_INPUT;
    }
    r->at++;
    return 0;
}

/* Runs the windows, `per` scored positions a forward. 0, or EXIT_INPUT (said). */
static int quality_windows(quality_run *r, int per) {
    coli_model *m = r->m;
    int w = r->q.w, V = m->c.vocab;
    double t0 = compat_now(), said = t0;
    for (size_t c = 0; c < r->q.chunks; c++) {
        const int *tk = r->q.tokens + c * (size_t)w;
        int first = ppl_first(w);
        if (fwd_tokens(m, tk, first, 0, NULL)) return fprintf(stderr, "colibri: %s\n", m->err), EXIT_INPUT;
        for (int j = first; j < w - 1; j += per) {
            int n = w - 1 - j < per ? w - 1 - j : per;
            if (fwd_tokens(m, tk + j, n, j, r->lg)) return fprintf(stderr, "colibri: %s\n", m->err), EXIT_INPUT;
            for (int k = 0; k < n; k++)
                if (quality_score(r, tk, j + k, r->lg + (size_t)k * V)) return EXIT_INPUT;
        }
        if (c + 1 == r->q.chunks || compat_now() - said >= 1.0) { /* a running figure at most once a second */
            fprintf(stderr, "colibri: perplexity after %zu of %zu windows: %.4f\n", c + 1, r->q.chunks, ppl_value(&r->ppl));
            said = compat_now();
        }
    }
    m->tel.prompt_tokens = (int)(r->q.chunks * (size_t)(w - 1));
    m->tel.t_prefill = compat_now() - t0;
    return 0;
}

/* The closing lines: the base file finished (--kld-base), the perplexity,
 * the divergence (--kld). 0, or EXIT_INPUT (said). */
static int quality_report(quality_run *r) {
    char err[700];
    if (r->a->base_out) {
        size_t rows = r->at;
        if (st_writer_data(&r->wr, r->lo, rows * sizeof(float), err, sizeof err) || st_writer_data(&r->wr, r->step, rows * sizeof(float), err, sizeof err) ||
            st_writer_finish(&r->wr, err, sizeof err))
            return fprintf(stderr, "colibri: --kld-base %s\n", err), EXIT_INPUT;
        fprintf(stderr, "colibri: KLD base: %zu positions' distributions saved to %s (%.1f MB)\n", rows, r->a->base_out,
                (double)rows * r->m->c.vocab * sizeof(uint16_t) / 1e6);
    }
    print_end(r->m);
    printf("perplexity: %.4f \xc2\xb1 %.4f over %ld tokens\n", ppl_value(&r->ppl), ppl_stderr(&r->ppl), r->ppl.n);
    if (r->a->base_in) {
        long n = r->kld.kl.n;
        double p99 = kld_quantile(&r->kld, 0.99);
        printf("kld: mean %.6f \xc2\xb1 %.6f, 99th percentile %.6f, top-1 agreement %.2f%%, mean delta-p %+.4f%% over %ld tokens\n", ppl_mean(&r->kld.kl),
               ppl_mean_err(&r->kld.kl), p99,
               tel_pct((double)r->kld.top1, (double)n), n ? 100.0 * r->kld.dp_sum / (double)n : 0.0, n);
    }
    return 0;
}

/* --perplexity FILE [--kld-base OUT] / --kld BASE: the text's tokens in
 * windows of the context (quality.h gives the plan), a running figure on
 * stderr and, on stdout, "perplexity: P ± E over N tokens", then with --kld
 * the divergence line. Returns the exit status. */
static int run_quality(coli_model *m, const quality_args *a, tok *t, int ubatch) {
    quality_run r;
    memset(&r, 0, sizeof r);
    r.m = m, r.a = a;
    st_writer_init(&r.wr);
    int V = m->c.vocab, rc = a->base_in ? kld_open(m, a->base_in, &r.b, &r.q) : quality_read_text(m, t, a->text, &r.q);
    size_t rows = r.q.chunks * (size_t)ppl_scored(r.q.w);
    int per = (int)(PPL_LOGITS_BYTES / ((size_t)V * sizeof(float)));
    per = per < 1 ? 1 : per > ubatch ? ubatch : per;
    if (!rc) {
        r.lg = (float *)malloc((size_t)per * V * sizeof(float));
        r.lp = (double *)malloc((size_t)V * sizeof(double)), r.lr = (double *)malloc((size_t)V * sizeof(double));
        r.row = (uint16_t *)malloc((size_t)V * sizeof(uint16_t));
        if (a->base_out) r.lo = (float *)malloc(rows * sizeof(float)), r.step = (float *)malloc(rows * sizeof(float));
        if (!r.lg || !r.lp || !r.lr || !r.row || (a->base_out && (!r.lo || !r.step))) rc = (fprintf(stderr, "colibri: out of memory\n"), EXIT_INPUT);
    }
    if (!rc && a->base_out) rc = kld_begin(&r.wr, a->base_out, &r.q, V);
    if (!rc) {
        fprintf(stderr, "colibri: perplexity of %s: %zu tokens in %zu windows of %d, %d scored in each\n", a->base_in ? a->base_in : a->text,
                r.q.chunks * (size_t)r.q.w, r.q.chunks, r.q.w, ppl_scored(r.q.w));
        rc = quality_windows(&r, per);
    }
    if (!rc) rc = quality_report(&r);
    st_writer_free(&r.wr); /* removes an unfinished base file's temporary */
    kld_close(&r.b);
    kld_free(&r.kld);
    free(r.q.tokens), free(r.lg), free(r.lp), free(r.lr), free(r.row), free(r.lo), free(r.step);
    return rc;
}

/* Loads the expert usage history for PIN into rows[n_layers][E]. Returns
 * 0 (rows filled or all zero), or -1 for a PIN file that cannot be used. */
static int usage_history(const coli_model *m, const char *dir, const coli_opts *o, uint64_t *rows, int *have) {
    const coli_config *c = &m->c;
    char path[4096], err[300];
    *have = 0;
    if (o->pin == PIN_OFF) return 0;
    if (o->pin == PIN_FILE) snprintf(path, sizeof path, "%s", o->pin_file);
    else snprintf(path, sizeof path, "%s/.coli_usage", dir);
    int rc = tel_usage_load(path, c->n_layers, c->n_experts, tel_engine_id(c->model_type), rows, err, sizeof err);
    if (rc == 0) {
        *have = 1;
        return 0;
    }
    if (o->pin == PIN_FILE) {
        fprintf(stderr, "colibri: PIN=%s: %s\n", path, rc == 1 ? "no such file" : err);
        return -1;
    }
    if (rc < 0) fprintf(stderr, "colibri: ignoring %s: %s; running without usage history\n", path, err);
    return 0;
}

/* Adds this run's routing counts to <dir>/.coli_usage (merged under a lock
 * with whatever other runs added meanwhile, written atomically), whatever
 * PIN was; a failure is reported, never fatal. */
static void usage_save(const coli_model *m, const char *dir) {
    const coli_config *c = &m->c;
    uint64_t *rows = (uint64_t *)calloc((size_t)c->n_layers * c->n_experts + 1, sizeof(uint64_t));
    char path[4096], err[600];
    snprintf(path, sizeof path, "%s/.coli_usage", dir);
    if (!rows) { fprintf(stderr, "colibri: warning: could not save expert usage to %s: out of memory\n", path); return; }
    const uint64_t *count = xs_counts(&m->xs);
    for (int k = 0; k < n_moe_layers(c); k++) /* the MTP layer has no row in the history */
        for (int e = 0; e < c->n_experts; e++) rows[(size_t)moe_layer(c, k) * c->n_experts + e] = count[(size_t)k * c->n_experts + e];
    int moved;
    if (tel_usage_merge(path, c->n_layers, c->n_experts, tel_engine_id(c->model_type), rows, &moved, err, sizeof err))
        fprintf(stderr, "colibri: warning: could not save expert usage to %s: %s\n", path, err);
    else if (moved) fprintf(stderr, "colibri: %s could not be used; kept as %s.unusable and started afresh\n", path, path);
    free(rows);
}

/* A mapped shard truncated under the engine raises SIGBUS on access: say so
 * instead of dying silently. */
static void on_sigbus(int sig) {
    static const char msg[] = "colibri: SIGBUS reading a mapped model file (was a shard truncated or removed while running?)\n";
    (void)sig;
    if (write(2, msg, sizeof msg - 1) < 0) _exit(EXIT_INPUT);
    _exit(EXIT_INPUT);
}

/* The command line: returns the process exit status. */
/* KV_SAVE and SESSION name files written at the end of the run: one that
 * may not be replaced (kvp_check_target: a device, FIFO, socket, directory
 * or symbolic link there) is refused before anything is computed, not
 * after a long generation. A SESSION that does not exist yet is fine: the
 * conversation starts there. 0, or EXIT_INPUT (said). */
static int check_save_targets(const coli_env *e) {
    static const env_id knobs[] = {ENV_KV_SAVE, ENV_SESSION, ENV_ROUTE_TRACE};
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        const char *path = env_v(e, knobs[i])->s;
        char err[700];
        if (path && kvp_check_target(path, err, sizeof err))
            return fprintf(stderr, "colibri: %s: %s\n", env_knobs[knobs[i]].name, err), EXIT_INPUT;
    }
    return 0;
}

/* ROUTE_REPLAY and ROUTE_TRACE (route_trace.h): the replayed trace read,
 * checked and fitted to this model, recording set up; said on stderr.
 * Both at once record what replay routed. 0 or EXIT_INPUT (said). */
static int route_setup(coli_model *m, const coli_env *e) {
    const char *rec = env_v(e, ENV_ROUTE_TRACE)->s, *rep = env_v(e, ENV_ROUTE_REPLAY)->s;
    const coli_config *c = &m->c;
    int pk = m->pilot ? m->pilot_k : 0;
    char err[1200];
    if ((rec && !(m->rec = (rt_trace *)calloc(1, sizeof *m->rec))) || (rep && !(m->rep = (rt_trace *)calloc(1, sizeof *m->rep))))
        return fprintf(stderr, "colibri: out of memory for a routing trace\n"), EXIT_INPUT;
    if (rep) {
        if (rt_load(m->rep, rep, err, sizeof err)) return fprintf(stderr, "colibri: ROUTE_REPLAY: %s\n", err), EXIT_INPUT;
        if (rt_replay_init(m->rep, c->topk, c->n_experts, pk, err, sizeof err)) return fprintf(stderr, "colibri: ROUTE_REPLAY: %s: %s\n", rep, err), EXIT_INPUT;
        m->tel.replayed = 1;
        const rt_trace *t = m->rep;
        fprintf(stderr, "colibri: routing replayed from %s: %llu rows of %u MoE layers (top-%u of %u experts, mapped by rank of use)%s; "
                        "a bench instrument: what is computed is not this model's%s\n",
                rep, (unsigned long long)t->rows, t->layers, t->topk, t->experts, pk ? ", PILOT's predictions from the trace" : "",
                env_i(e, ENV_USAGE_SAVE) ? ", and USAGE_SAVE=1 keeps the replayed routing as this model's usage history" : "");
    }
    if (rec) {
        if (rt_record_init(m->rec, n_moe_layers(c), c->topk, pk, c->n_experts))
            return fprintf(stderr, "colibri: ROUTE_TRACE: a routing trace holds 1 or more MoE layers of fewer than %u experts; this model has %d of %d\n",
                           RT_NONE, n_moe_layers(c), c->n_experts), EXIT_INPUT;
        fprintf(stderr, "colibri: routing trace: each forward row's experts%s, written to %s at the end\n", pk ? " and PILOT's predictions" : "", rec);
    }
    return 0;
}

/* The recorded routing trace to ROUTE_TRACE. 0 or EXIT_INPUT (said). */
static int route_finish(const coli_model *m, const coli_env *e) {
    const char *path = env_v(e, ENV_ROUTE_TRACE)->s;
    char err[1200];
    if (!m->rec) return 0;
    if (!m->rec->rows) return fprintf(stderr, "colibri: ROUTE_TRACE: no forward ran, so %s is not written\n", path), 0; /* nothing to replay */
    if (rt_save(m->rec, path, err, sizeof err)) return fprintf(stderr, "colibri: ROUTE_TRACE: %s\n", err), EXIT_INPUT;
    fprintf(stderr, "colibri: routing trace: %llu rows written to %s\n", (unsigned long long)m->rec->rows, path);
    return 0;
}

/* ---- experts spread over MPI ranks (ranks.h, docs/mpi.md) ---- */

#ifndef COLI_MPI
/* Whether an MPI launcher started this process as one of several: what
 * mpirun / mpiexec (Open MPI, MPICH, Slurm's PMI) put in the environment.
 * Not knobs: a build without MPI reads them only to refuse to run as a
 * lone copy among several. */
static int launched_ranks(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1) return atoi(v);
    }
    return 1;
}
#endif

#ifdef COLI_MPI
static coli_ranks ranks;

/* Before model_setup on every rank: the same model everywhere (rk_hello),
 * rank 0's usage history and placement sent to all (rk_share_plan), and
 * this rank's history masked to the experts it owns so that it pins and
 * plans for those alone; a follower keeps no dense weights and only a
 * token-sized KV cache. Bytes a row should move, from the history's route
 * shares, to ranks.plan_bytes_row. 0 or -1 (m->err). */
static int mpi_prepare(coli_model *m, coli_opts *o, const char *dir, uint64_t *rows, int *have) {
    coli_ranks *r = &ranks;
    coli_config *c = &m->c;
    int E = c->n_experts, NL = c->n_layers;
    model_find_mtp(m, o);
    int layers = n_moe_layers(c) + (m->mtp && c->moe[NL]);
    if (rk_hello(r, kvp_fingerprint(m, dir), layers, E, c->topk, c->dim, o->ubatch, dir, m->err, sizeof m->err)) return -1;
    uint64_t h = (uint64_t)*have;
    if (rk_bcast_u64(&h, 1, m->err, sizeof m->err) || rk_bcast_u64(rows, (size_t)NL * E, m->err, sizeof m->err)) return -1;
    *have = (int)h;
    uint64_t *counts = (uint64_t *)calloc((size_t)layers * E + 1, 8);
    double *share = (double *)calloc((size_t)layers * E + 1, sizeof(double));
    if (!counts || !share) return free(counts), free(share), model_fail(m, "out of memory");
    usage_to_moe(c, rows, counts);
    int rc = rk_share_plan(r, *have ? counts : NULL, m->err, sizeof m->err);
    for (int k = 0; k < layers; k++) {
        uint64_t tot = 0;
        for (int e = 0; e < E; e++) tot += counts[(size_t)k * E + e];
        for (int e = 0; e < E; e++) share[(size_t)k * E + e] = *have && tot ? (double)counts[(size_t)k * E + e] / (double)tot : 1.0 / E;
    }
    if (!rc) r->plan_bytes_row = rk_plan_bytes(r, share);
    free(counts), free(share);
    if (rc) return -1;
    for (int l = 0; l < NL; l++)
        for (int e = 0; c->moe[l] && e < E; e++)
            if (!rk_mine(r, moe_index(c, l), e)) rows[(size_t)l * E + e] = 0;
    if (r->rank) {
        o->experts_only = 1, o->slots = 1, o->cuda_attn = 0;
        o->ctx = o->ctx < 16 ? o->ctx : 16; /* attention never runs here */
    }
    return 0;
}

/* After model_setup: every rank's share of the experts and its memory, at
 * rank 0 and said there in one line. 0 or -1 (m->err). */
static int mpi_report_plan(coli_model *m, int have) {
    coli_ranks *r = &ranks;
    const xs_store *x = &m->xs;
    double own = 0, bytes = 0, v[5], *all = (double *)calloc(5 * (size_t)r->size, sizeof(double)); /* [size][5] */
    if (!all) return model_fail(m, "out of memory");
    for (int k = 0; k < r->layers; k++)
        for (int e = 0; e < r->E; e++)
            if (rk_mine(r, k, e)) own++, bytes += (double)xs_expert_bytes(x, k);
    v[0] = own, v[1] = bytes, v[2] = (double)xs_pinned_bytes(x), v[3] = (double)m->plan.lru_bytes, v[4] = (double)m->budget;
    int rc = rk_gather(v, 5, all, m->err, sizeof m->err);
    if (!rc && r->rank == 0) {
        char b[4][32];
        fprintf(stderr, "colibri: MPI: %d ranks; rank 0 runs the dense part, attention and sampling; experts placed %s\n", r->size,
                have ? "by rank 0's usage history (most used dealt round in snake order)" : "in id order (no usage history)");
        for (int f = 0; f < r->size; f++) {
            const double *a = all + 5 * (size_t)f;
            fprintf(stderr, "colibri: MPI: rank %d: %.0f experts (%s), pinned %s, LRU up to %s, budget %s\n", f, a[0], fmt_bytes(b[0], 32, a[1]),
                    fmt_bytes(b[1], 32, a[2]), fmt_bytes(b[2], 32, a[3]), fmt_bytes(b[3], 32, a[4]));
        }
        fprintf(stderr, "colibri: MPI: a forward row moves about %s between the ranks (plan)\n", fmt_bytes(b[0], 32, r->plan_bytes_row));
    }
    free(all);
    return rc;
}

/* Rank 0 when a rank stopped answering inside a forward: whatever mode
 * runs (a server would go on to the next request), the job ends here. */
static void mpi_fatal(const char *msg) {
    fprintf(stderr, "colibri: %s\n", msg);
    fflush(stderr);
    rk_abort(EXIT_INPUT);
}

/* A follower rank's life after setup: experts on request until rank 0
 * stops it, then its figures to rank 0. The process exit status. */
static int mpi_follow(coli_model *m) {
    coli_ranks *r = &ranks;
    rk_follower_stats st = {0};
    m->rk = r;
    if (fwd_follow(m, &st)) {
        fprintf(stderr, "colibri: rank %d: %s\n", r->rank, m->err);
        rk_abort(EXIT_INPUT);
    }
    xs_stats xst;
    xs_stats_get(&m->xs, &xst);
    for (int k = 0; k < r->layers; k++)
        for (int e = 0; e < r->E; e++)
            if (rk_mine(r, k, e)) st.experts++, st.expert_bytes += xs_expert_bytes(&m->xs, k);
    st.read_bytes = xst.bytes_read;
    if (rk_stop(r, &st, m->err, sizeof m->err)) {
        fprintf(stderr, "colibri: rank %d: %s\n", r->rank, m->err);
        rk_abort(EXIT_INPUT);
    }
    return 0;
}

/* Rank 0 at the end of a run that left MPI usable: the followers stopped
 * and the job's figures said: bytes and waiting per forward row, each
 * rank's experts' time, the slowest rank. */
static void mpi_end(coli_model *m) {
    coli_ranks *r = &ranks;
    if (rk_stop(r, NULL, m->err, sizeof m->err)) {
        fprintf(stderr, "colibri: %s\n", m->err);
        rk_abort(EXIT_INPUT);
    }
    xs_stats xst;
    xs_stats_get(&m->xs, &xst);
    double rows = r->layers ? (double)r->rows / r->layers : 0, per = rows > 0 ? 1 / rows : 0;
    char b[3][32];
    int slow = 1;
    for (int f = 1; f < r->size; f++)
        if (r->fs[f].compute_s > r->fs[slow].compute_s) slow = f;
    fprintf(stderr, "colibri: MPI: %d ranks, %.0f forward rows: %s a row moved (plan %s), rank 0 waited %.2f ms a row for the others; slowest rank %d: "
                    "%.2f s in its experts\n", r->size, rows, fmt_bytes(b[0], 32, (double)(r->bytes_out + r->bytes_in) * per),
            fmt_bytes(b[1], 32, r->plan_bytes_row), 1e3 * r->wait_s * per, slow, r->fs[slow].compute_s);
    for (int f = 1; f < r->size; f++) {
        const rk_follower_stats *s = &r->fs[f];
        fprintf(stderr, "colibri: MPI: rank %d: %llu experts (%s), %llu routes in %llu layer calls, %.2f s computing, %.2f s idle, %s read\n", f,
                (unsigned long long)s->experts, fmt_bytes(b[0], 32, (double)s->expert_bytes), (unsigned long long)s->routes, (unsigned long long)s->calls,
                s->compute_s, s->idle_s, fmt_bytes(b[2], 32, (double)s->read_bytes));
    }
}
#endif

/* --perplexity FILE, --kld-base OUT and --kld BASE, each at most once, in
 * any order before MODEL_DIR, with exactly one of FILE and BASE (the
 * text). 1 when argv is such a command line (q filled), 0 when it names
 * none of them, -1 when it is wrong. */
static int quality_argv(int argc, char **argv, quality_args *q) {
    memset(q, 0, sizeof *q);
    if (argc < 2 || (strcmp(argv[1], "--perplexity") && strcmp(argv[1], "--kld-base") && strcmp(argv[1], "--kld"))) return 0;
    if (argc % 2) return -1; /* flag-value pairs, then the model */
    for (int i = 1; i + 1 < argc; i += 2) {
        const char **v = !strcmp(argv[i], "--perplexity") ? &q->text : !strcmp(argv[i], "--kld-base") ? &q->base_out : !strcmp(argv[i], "--kld") ? &q->base_in : NULL;
        if (!v || *v) return -1;
        *v = argv[i + 1];
    }
    return !q->text != !q->base_in ? 1 : -1;
}

static int coli_main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { usage(stdout); return 0; }
    if (argc == 2 && !strcmp(argv[1], "--env-table")) { env_write_table(stdout); return 0; }
    if (argc >= 3 && !strcmp(argv[1], "--tokenize")) {
        int jsonl = argc == 4 && !strcmp(argv[2], "--jsonl");
        if (argc == 4 && !jsonl) { usage(stderr); return EXIT_INPUT; }
        return run_tokenize(argv[argc - 1], jsonl);
    }
    int chat_flag = argc == 3 && !strcmp(argv[1], "--chat"), serve_flag = argc == 3 && !strcmp(argv[1], "--serve");
    quality_args qa;
    int quality = quality_argv(argc, argv, &qa);
    if (quality < 0 || (!chat_flag && !serve_flag && !quality && (argc != 2 || argv[1][0] == '-'))) { usage(stderr); return EXIT_INPUT; }
    const char *dir = argv[argc - 1];
    char err[512];
    coli_env e;
    if (coli_env_load(&e, err, sizeof err)) { fprintf(stderr, "colibri: %s\n", err); return EXIT_INPUT; }
#ifdef COLI_MPI
    if (rk_init(&ranks, &argc, &argv, env_f(&e, ENV_MPI_TIMEOUT), err, sizeof err)) { fprintf(stderr, "colibri: %s\n", err); return EXIT_INPUT; }
    int rank = ranks.rank, spread = rk_active(&ranks), mpi_ready = 0;
#else
    if (launched_ranks() > 1) {
        fprintf(stderr, "colibri: started by mpirun as one of %d ranks, but this colibri is built without MPI: build it with make MPI=1 "
                        "(docs/mpi.md), or run it without mpirun\n", launched_ranks());
        return EXIT_INPUT;
    }
    int rank = 0;
#endif
    if (env_i(&e, ENV_THREADS) > 0) compat_omp_set_threads((int)env_i(&e, ENV_THREADS)); /* loading, pinning */
    static coli_opts o;
    if (coli_opts_from_env(&e, &o, err, sizeof err)) { fprintf(stderr, "colibri: %s\n", err); return EXIT_INPUT; }
    if (o.io.mmap) signal(SIGBUS, on_sigbus);
    static coli_model m;
    uint64_t *rows = NULL;
    int have = 0, rc = EXIT_INPUT;
    tok *t = NULL;
    int chat = chat_flag || env_i(&e, ENV_CHAT), serve = serve_flag || env_i(&e, ENV_SERVE);
    if (quality && (chat || serve || env_v(&e, ENV_PROMPT)->s)) { fprintf(stderr, "colibri: --perplexity and --kld read their text from a file; unset PROMPT, CHAT and SERVE\n"); return EXIT_INPUT; }
    if (chat && env_v(&e, ENV_PROMPT)->s) { fprintf(stderr, "colibri: CHAT reads its turns from stdin; unset PROMPT\n"); return EXIT_INPUT; }
    if (serve && (chat || env_v(&e, ENV_PROMPT)->s)) { fprintf(stderr, "colibri: SERVE takes its prompts over HTTP; unset PROMPT and CHAT\n"); return EXIT_INPUT; }
    if (check_save_targets(&e)) return EXIT_INPUT;
    int fmt = -1; /* the chat format, chosen once from what the model ships */
    if (rank == 0 && (env_v(&e, ENV_PROMPT)->s || chat || serve || qa.text)) { /* the tokenizer, and the chat format and its tokens, before any weight is read */
        char cerr[1200];
        if (!(t = load_tokenizer(dir, m.err, sizeof m.err))) goto fail;
        if (!quality && (env_i(&e, ENV_CHAT_TEMPLATE) || serve) && chat_select(dir, t, &fmt, cerr, sizeof cerr)) {
            fprintf(stderr, "colibri: %s (%s)\n", cerr, serve ? "serve mode renders every request with it" : "set CHAT_TEMPLATE=0 to send the prompt raw");
            goto out;
        }
    }
    if (model_open(&m, dir)) goto fail;
    if (fmt >= 0 && add_chat_stop(&m.c, t, fmt)) goto out;
    if (!(rows = (uint64_t *)calloc((size_t)m.c.n_layers * m.c.n_experts, sizeof(uint64_t)))) { model_fail(&m, "out of memory"); goto fail; }
    if (usage_history(&m, dir, &o, rows, &have)) goto out;
    if (serve) o.slots = env_i(&e, ENV_SERVE_SLOTS) ? (int)env_i(&e, ENV_SERVE_SLOTS) : SLOTS_AUTO; /* each slot's KV cache counts in the memory plan */
#ifdef COLI_MPI
    if (spread && mpi_prepare(&m, &o, dir, rows, &have)) goto fail;
#endif
    if (model_setup(&m, &o, have ? rows : NULL)) goto fail;
#ifdef COLI_MPI
    if (spread && mpi_report_plan(&m, have)) goto fail;
    if (spread && rank > 0) {
        xs_stats_reset(&m.xs);
        rc = mpi_follow(&m);
        goto out;
    }
    if (spread) m.rk = &ranks, ranks.fatal = mpi_fatal, mpi_ready = 1;
#endif
    m.repin = (int)env_i(&e, ENV_REPIN);
    m.rss_limit = env_f(&e, ENV_RSS_GUARD_GB) > 0 ? (uint64_t)(env_f(&e, ENV_RSS_GUARD_GB) * GB) : m.budget;
    print_startup(&m, dir);
    if (route_setup(&m, &e)) goto out;
    xs_stats_reset(&m.xs); /* the run's counters start after pinning */
    io_stats_reset(&m.io);
    tel_start(&m.tel, (int)env_i(&e, ENV_PROF));
    coli_gen g;
    gen_from_env(&e, &m.c, &g);
    g.chat_mode = chat, g.fmt = fmt;
    rc = quality ? run_quality(&m, &qa, t, o.ubatch) : serve ? run_serve(&m, dir, &g, t, &e) : chat ? run_chat(&m, dir, &g, t) : g.prompt ? run_generate(&m, dir, &g, t) : run_oracle(&m, dir);
    if (rc != EXIT_INPUT && env_i(&e, ENV_USAGE_SAVE)) usage_save(&m, dir);
    if (rc != EXIT_INPUT && route_finish(&m, &e)) rc = EXIT_INPUT;
    goto out;
fail:
    fprintf(stderr, "colibri: %s\n", m.err);
out:
#ifdef COLI_MPI
    if (spread && mpi_ready && !ranks.broken) mpi_end(&m);
    else if (spread && (rc || ranks.broken)) { /* the others wait for this rank, or it for them: end them all */
        fflush(stderr);
        rk_abort(rc ? rc : EXIT_INPUT);
    }
#endif
    free(rows);
    tok_free(t);
    model_free(&m);
    for (int i = 0; i < o.nmirrors; i++) free(o.mirrors[i]);
#ifdef COLI_MPI
    rk_finalize(&ranks);
#endif
    return rc;
}

#ifndef COLI_NO_MAIN
int main(int argc, char **argv) {
    compat_args_utf8(&argc, &argv);
    return coli_main(argc, argv);
}
#endif
