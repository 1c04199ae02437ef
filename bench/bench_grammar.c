/* bench_grammar.c — the cost of a grammar mask over a large vocabulary.
 *
 *   make build/rel/bench_grammar
 *   build/rel/bench_grammar [tokenizer.json] [vocabulary size] [steps] [seed]
 * Defaults: tests/fixtures/tokenizer/tokenizer.json (32k ids), 150000, 200, 1.
 * The vocabulary is the tokenizer's pieces plus pieces made by joining two
 * random ones (up to 16 bytes) until it has the size asked for, as a
 * 150k-token BPE vocabulary has. Random walks through three grammars (a
 * JSON schema of an object with a string, a number, an enum array and a
 * boolean; any JSON object; one GLM-5 tool call with a free string, an
 * integer and an enum argument) pick a random allowed token per step. Per
 * grammar: milliseconds per mask (median, mean, 90th percentile), tokens
 * allowed on average, and the share of steps with exactly one token
 * allowed (forced, no sampling, batched into the previous forward). */
#include "../chat.h"
#include "../grammar.h"
#include "../tok.h"

#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char **bg_bytes; /* every token's bytes (NULL: left out) */
static size_t *bg_lens;
static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One random walk of `steps` masks through g from a fresh state with
 * context cx: the milliseconds of each mask into ms, the tokens allowed
 * and the steps forced into *allowed and *forced. */
static void walk(const gr_grammar *g, const gr_vocab *v, gr_mask_ctx *cx, int steps, double *ms, double *allowed_sum, int *forced) {
    uint8_t *allowed = (uint8_t *)malloc((size_t)v->n_tokens);
    gr_state s;
    if (!allowed || gr_init(g, &s)) { fprintf(stderr, "out of memory\n"); exit(1); }
    *allowed_sum = 0, *forced = 0;
    for (int i = 0; i < steps; i++) {
        double t0 = now_s();
        int n = gr_mask(g, &s, v, cx, allowed);
        ms[i] = 1e3 * (now_s() - t0);
        if (n < 0) { fprintf(stderr, "mask failed: %d\n", n); exit(1); }
        *allowed_sum += n;
        int end = gr_can_end(&s);
        *forced += n == 1 && !end;
        if (!n || (end && rnd() % 4 == 0)) { /* a whole sentence: start another */
            gr_state_free(&s);
            if (gr_init(g, &s)) exit(1);
            continue;
        }
        int pick = (int)(rnd() % (uint32_t)n), id = 0;
        for (; id < v->n_tokens; id++)
            if (allowed[id] && pick-- == 0) break;
        if (gr_accept(g, &s, (const uint8_t *)bg_bytes[id], bg_lens[id])) { fprintf(stderr, "a masked token was refused\n"); exit(1); }
    }
    gr_state_free(&s);
    free(allowed);
}

/* "p50 X, p99 Y, max Z" of ms[0..n) in microseconds (sorts ms). */
static void pct(char *out, size_t cap, double *ms, int n) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_d);
    snprintf(out, cap, "p50 %.1f, p99 %.1f, max %.1f", 1e3 * ms[n / 2], 1e3 * ms[(n * 99) / 100 < n - 1 ? (n * 99) / 100 : n - 1], 1e3 * ms[n - 1]);
}

/* The same walk three times: with the token tables from nothing (the
 * first request of a grammar), with the tables the first walk left (a
 * grammar seen before), and walking the whole trie at every step (what
 * every mask cost before the tables). compile_ms: the grammar's text
 * parsed and checked. */
static void run(const char *name, const gr_grammar *g, const gr_vocab *v, int steps, double compile_ms) {
    double *ms = (double *)malloc((size_t)steps * sizeof(double)), sum_allowed = 0, mean[3] = {0};
    char p[3][96];
    int forced = 0, tables = 0;
    uint64_t seed = rs;
    gr_mask_ctx cx, whole;
    if (!ms || gr_mask_ctx_init(&cx, v) || gr_mask_ctx_init(&whole, v)) { fprintf(stderr, "out of memory\n"); exit(1); }
    whole.whole_walk = 1;
    for (int k = 0; k < 3; k++) {
        rs = seed; /* the same walk each time */
        walk(g, v, k < 2 ? &cx : &whole, steps, ms, &sum_allowed, &forced);
        if (!k) tables = cx.built;
        for (int i = 0; i < steps; i++) mean[k] += ms[i] / steps;
        pct(p[k], sizeof p[k], ms, steps);
    }
    printf("grammar %s: compiled in %.2f ms | first walk %s us (%d token tables built) | again %s us | whole trie %s us | mean %.1f / %.1f / %.1f us "
           "over %d tokens | %.0f allowed on average | %.1f%% of steps forced\n",
           name, compile_ms, p[0], tables, p[1], p[2], 1e3 * mean[0], 1e3 * mean[1], 1e3 * mean[2], v->n_tokens, sum_allowed / steps,
           100.0 * forced / steps);
    gr_mask_ctx_free(&cx), gr_mask_ctx_free(&whole);
    free(ms);
}

/* text parsed and checked as a grammar, timed into *ms. */
static gr_grammar *compile(const char *what, const char *text, double t0, double *ms) {
    char err[300];
    int rule;
    gr_grammar *g = gr_parse(text, strlen(text), "root", err, sizeof err);
    if (!g || gr_check(g, &rule, err, sizeof err)) { fprintf(stderr, "%s: %s\n", what, err); exit(1); }
    *ms = 1e3 * (now_s() - t0);
    return g;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tests/fixtures/tokenizer/tokenizer.json";
    int want = argc > 2 ? atoi(argv[2]) : 150000, steps = argc > 3 ? atoi(argv[3]) : 200;
    if (argc > 4) rs ^= (uint64_t)atoll(argv[4]) * 0x100000001b3ull;
    char err[300];
    tok *t = tok_load(path, err, sizeof err);
    if (!t) { fprintf(stderr, "%s\n", err); return 1; }
    int base = tok_n_ids(t), n = want > base ? want : base;
    bg_bytes = (const char **)calloc((size_t)n, sizeof *bg_bytes);
    bg_lens = (size_t *)calloc((size_t)n, sizeof *bg_lens);
    char *pool = (char *)malloc((size_t)(n - base + 1) * 16);
    if (!bg_bytes || !bg_lens || !pool) return 1;
    for (int i = 0; i < base; i++)
        if (!tok_is_special(t, i)) bg_bytes[i] = tok_piece(t, i, &bg_lens[i]);
    for (int i = base; i < n; i++) { /* two random pieces joined */
        char *p = pool + (size_t)(i - base) * 16;
        size_t l = 0;
        for (int k = 0; k < 2; k++) {
            int a = (int)(rnd() % (uint32_t)base);
            if (!bg_bytes[a]) continue;
            size_t m = bg_lens[a] < 16 - l ? bg_lens[a] : 16 - l;
            memcpy(p + l, bg_bytes[a], m), l += m;
        }
        bg_bytes[i] = l ? p : NULL, bg_lens[i] = l;
    }
    gr_vocab v;
    double t0 = now_s();
    if (gr_vocab_build(&v, n, bg_bytes, bg_lens)) return 1;
    printf("vocabulary: %d tokens (%d from %s), trie of %d nodes built in %.1f ms\n", n, base, path, v.n, 1e3 * (now_s() - t0));
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},\"score\":{\"type\":\"number\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"alpha\",\"beta\",\"gamma\"]},\"maxItems\":4},\"active\":{\"type\":\"boolean\"}},"
        "\"required\":[\"name\",\"score\",\"tags\",\"active\"]}";
    double c1, c2, c3, c4;
    double t1 = now_s();
    js_doc *d = js_parse(schema, strlen(schema), err, sizeof err);
    char *gs = d ? gr_json_schema(d, d->root, err, sizeof err) : NULL;
    if (!gs) { fprintf(stderr, "schema: %s\n", err); return 1; }
    gr_grammar *g1 = compile("schema", gs, t1, &c1);
    size_t pl = strlen(gr_js_prims_) + 40;
    char *jo = (char *)malloc(pl);
    double t2 = now_s();
    snprintf(jo, pl, "%sroot ::= ws jobject ws\n", gr_js_prims_);
    gr_grammar *g2 = compile("json", jo, t2, &c2);
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]}},"
        "\"required\":[\"city\",\"days\"]}}}]";
    double t3 = now_s();
    js_doc *td = js_parse(tools, strlen(tools), err, sizeof err);
    char *ts = td ? gr_tool_calls(td, td->root, &chat_info(CHAT_GLM5)->calls, NULL, 0, NULL, err, sizeof err) : NULL;
    if (!ts) { fprintf(stderr, "tool call: %s\n", err); return 1; }
    gr_grammar *g3 = compile("tool call", ts, t3, &c3);
    /* an enum of 10,000 strings: pieces of the vocabulary joined, 3 to 24 bytes */
    jw ej = {0};
    jw_lit(&ej, "{\"enum\":[");
    for (int i = 0; i < 10000; i++) {
        char w[64];
        size_t l = 0;
        while (l < 3) {
            int a = (int)(rnd() % (uint32_t)base);
            size_t m = bg_bytes[a] && bg_lens[a] <= 8 ? bg_lens[a] : 0;
            for (size_t k = 0; k < m; k++) /* printable ASCII pieces only: the values are JSON text */
                if ((unsigned char)bg_bytes[a][k] < 0x20 || (unsigned char)bg_bytes[a][k] >= 0x7f || bg_bytes[a][k] == '"' || bg_bytes[a][k] == '\\') m = 0;
            memcpy(w + l, bg_bytes[a], m), l += m;
        }
        if (i) jw_lit(&ej, ",");
        jw_strn(&ej, w, l);
    }
    jw_lit(&ej, "]}");
    double t4 = now_s();
    js_doc *ed = js_parse(ej.s, ej.n, err, sizeof err);
    char *es = ed ? gr_json_schema(ed, ed->root, err, sizeof err) : NULL;
    if (!es) { fprintf(stderr, "enum: %s\n", err); return 1; }
    gr_grammar *g4 = compile("enum", es, t4, &c4);
    run("json-schema", g1, &v, steps, c1);
    run("json-object", g2, &v, steps, c2);
    run("tool-call", g3, &v, steps, c3);
    run("enum-10000", g4, &v, steps, c4);
    gr_free(g4), free(es), js_free(ed), jw_free(&ej);
    gr_free(g1), gr_free(g2), gr_free(g3), free(gs), free(jo), free(ts), js_free(d), js_free(td);
    gr_vocab_free(&v);
    free(bg_bytes), free(bg_lens), free(pool);
    tok_free(t);
    return 0;
}
