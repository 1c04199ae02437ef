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

static void run(const char *name, const gr_grammar *g, const gr_vocab *v, int steps) {
    gr_mask_ctx cx;
    uint8_t *allowed = (uint8_t *)malloc((size_t)v->n_tokens);
    double *ms = (double *)malloc((size_t)steps * sizeof(double));
    if (!allowed || !ms || gr_mask_ctx_init(&cx, v)) { fprintf(stderr, "out of memory\n"); exit(1); }
    gr_state s;
    if (gr_init(g, &s)) { fprintf(stderr, "out of memory\n"); exit(1); }
    double sum_allowed = 0;
    int forced = 0, restarts = 0;
    for (int i = 0; i < steps; i++) {
        double t0 = now_s();
        int n = gr_mask(g, &s, v, &cx, allowed);
        ms[i] = 1e3 * (now_s() - t0);
        sum_allowed += n;
        int end = gr_can_end(&s);
        forced += n == 1 && !end;
        if (!n || (end && rnd() % 4 == 0)) { /* a whole sentence: start another */
            gr_state_free(&s);
            if (gr_init(g, &s)) exit(1);
            restarts++;
            continue;
        }
        int pick = (int)(rnd() % (uint32_t)n), id = 0;
        for (; id < v->n_tokens; id++)
            if (allowed[id] && pick-- == 0) break;
        if (gr_accept(g, &s, (const uint8_t *)bg_bytes[id], bg_lens[id])) { fprintf(stderr, "%s: a masked token was refused\n", name); exit(1); }
    }
    double mean = 0;
    for (int i = 0; i < steps; i++) mean += ms[i];
    mean /= steps;
    qsort(ms, (size_t)steps, sizeof *ms, cmp_d);
    printf("grammar %s: %.3f ms per mask (median), %.3f mean, %.3f p90 over %d tokens | %.0f allowed on average | %.1f%% of steps forced | %d sentences\n",
           name, ms[steps / 2], mean, ms[steps * 9 / 10], v->n_tokens, sum_allowed / steps, 100.0 * forced / steps, restarts);
    gr_state_free(&s);
    gr_mask_ctx_free(&cx);
    free(allowed), free(ms);
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
    js_doc *d = js_parse(schema, strlen(schema), err, sizeof err);
    char *gs = d ? gr_json_schema(d, d->root, err, sizeof err) : NULL;
    gr_grammar *g1 = gs ? gr_parse(gs, strlen(gs), "root", err, sizeof err) : NULL;
    if (!g1) { fprintf(stderr, "schema: %s\n", err); return 1; }
    size_t pl = strlen(gr_js_prims_) + 40;
    char *jo = (char *)malloc(pl);
    snprintf(jo, pl, "%sroot ::= ws jobject ws\n", gr_js_prims_);
    gr_grammar *g2 = gr_parse(jo, strlen(jo), "root", err, sizeof err);
    if (!g2) { fprintf(stderr, "json: %s\n", err); return 1; }
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]}},"
        "\"required\":[\"city\",\"days\"]}}}]";
    js_doc *td = js_parse(tools, strlen(tools), err, sizeof err);
    char *ts = td ? gr_tool_calls(td, td->root, &chat_info(CHAT_GLM5)->calls, NULL, 0, NULL, err, sizeof err) : NULL;
    gr_grammar *g3 = ts ? gr_parse(ts, strlen(ts), "root", err, sizeof err) : NULL;
    if (!g3) { fprintf(stderr, "tool call: %s\n", err); return 1; }
    run("json-schema", g1, &v, steps);
    run("json-object", g2, &v, steps);
    run("tool-call", g3, &v, steps);
    gr_free(g1), gr_free(g2), gr_free(g3), free(gs), free(jo), free(ts), js_free(d), js_free(td);
    gr_vocab_free(&v);
    free(bg_bytes), free(bg_lens), free(pool);
    tok_free(t);
    return 0;
}
