/* bench_tok.c — tok_encode throughput on the parity corpus, one thread.
 *
 *   make build/rel/bench_tok
 *   build/rel/bench_tok [tokenizer.json | model directory] [corpus.jsonl] [runs]
 * Defaults: tests/fixtures/tokenizer/tokenizer.json (32k ids), its corpus.jsonl, 7 runs.
 * A directory is loaded as colibri loads a model's (tok_load_dir), e.g.
 * tests/fixtures/tokenizer-kimi for Kimi K2's tiktoken.model.
 * Two figures, each the median of the runs, in MB/s of input bytes (MB = 1e6):
 *   lines  every corpus line encoded by its own call (the way prompts arrive)
 *   text   the lines joined with "\n" and encoded by one call
 * bench/bench_tok_hf.py measures Hugging Face tokenizers on the same input. */
#include "../tok.h"

#define DEF_TOK "tests/fixtures/tokenizer/tokenizer.json"
#define DEF_CORPUS "tests/fixtures/tokenizer/corpus.jsonl"

typedef struct { char *p; size_t n; } line;

/* corpus.jsonl: one JSON string of hex digits per line. Returns the lines. */
static line *read_corpus(const char *path, size_t *count) {
    size_t len, n = 0, cap = 0;
    char *buf = compat_read_file(path, (size_t)1 << 28, &len), err[160];
    line *v = NULL;
    if (!buf) { fprintf(stderr, "%s: cannot read\n", path); exit(1); }
    for (char *p = buf, *e; p < buf + len; p = e + 1) {
        e = memchr(p, '\n', (size_t)(buf + len - p));
        if (!e) e = buf + len;
        js_doc *d = js_parse(p, (size_t)(e - p), err, sizeof err);
        const char *h = d ? js_str(d, d->root) : NULL;
        if (!h) { fprintf(stderr, "%s: line %zu: %s\n", path, n + 1, d ? "not a string" : err); exit(1); }
        if (n == cap) v = realloc(v, (cap = cap ? 2 * cap : 1024) * sizeof *v);
        size_t hl = js_str_len(d, d->root);
        v[n].n = hl / 2;
        v[n].p = malloc(v[n].n + 1);
        for (size_t i = 0; i < v[n].n; i++) {
            unsigned x;
            sscanf(h + 2 * i, "%2x", &x);
            v[n].p[i] = (char)x;
        }
        n++;
        js_free(d);
    }
    free(buf);
    *count = n;
    return v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds for `reps` passes over the lines, each line its own call. */
static double time_lines(const tok *t, const line *v, size_t n, int reps, tok_ids *o, size_t *ntok) {
    double t0 = compat_now();
    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i < n; i++) {
            o->n = 0;
            if (tok_encode(t, v[i].p, v[i].n, o)) { fprintf(stderr, "encode failed\n"); exit(1); }
            *ntok += o->n;
        }
    return compat_now() - t0;
}

static double time_text(const tok *t, const char *s, size_t n, int reps, tok_ids *o) {
    double t0 = compat_now();
    for (int r = 0; r < reps; r++) {
        o->n = 0;
        if (tok_encode(t, s, n, o)) { fprintf(stderr, "encode failed\n"); exit(1); }
    }
    return compat_now() - t0;
}

int main(int argc, char **argv) {
    const char *tp = argc > 1 ? argv[1] : DEF_TOK, *cp = argc > 2 ? argv[2] : DEF_CORPUS;
    int runs = argc > 3 ? atoi(argv[3]) : 7;
    if (runs < 1 || runs > 1000) { fprintf(stderr, "runs must be 1..1000\n"); return 2; }
    char err[512];
    double t0 = compat_now();
    size_t tl = strlen(tp);
    tok *t = tl > 5 && !strcmp(tp + tl - 5, ".json") ? tok_load(tp, err, sizeof err) : tok_load_dir(tp, err, sizeof err);
    if (!t) { fprintf(stderr, "%s\n", err); return 1; }
    double load = compat_now() - t0;
    size_t n, bytes = 0, ntok = 0;
    line *v = read_corpus(cp, &n);
    for (size_t i = 0; i < n; i++) bytes += v[i].n;
    char *all = malloc(bytes + n + 1);
    size_t an = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(all + an, v[i].p, v[i].n);
        an += v[i].n;
        all[an++] = '\n';
    }
    tok_ids o = {0};
    int reps = 1; /* passes per run: at least 0.2 s each */
    while (time_lines(t, v, n, reps, &o, &ntok) < 0.2 && reps < (1 << 20)) reps *= 2;
    double *lt = malloc((size_t)runs * sizeof *lt), *tt = malloc((size_t)runs * sizeof *tt);
    for (int r = 0; r < runs; r++) {
        ntok = 0;
        lt[r] = time_lines(t, v, n, reps, &o, &ntok);
        tt[r] = time_text(t, all, an, reps, &o);
    }
    qsort(lt, (size_t)runs, sizeof *lt, cmp_double);
    qsort(tt, (size_t)runs, sizeof *tt, cmp_double);
    double ml = lt[runs / 2], mt = tt[runs / 2];
    printf("bench_tok: %s, %zu lines, %zu bytes, %zu tokens/pass; load %.3f s; median of %d runs x %d passes\n", tp, n, bytes,
           ntok / (size_t)reps, load, runs, reps);
    printf("tok.h lines: %.2f MB/s\n", (double)bytes * reps / ml / 1e6);
    printf("tok.h text:  %.2f MB/s\n", (double)an * reps / mt / 1e6);
    for (size_t i = 0; i < n; i++) free(v[i].p);
    free(v);
    free(all);
    free(lt);
    free(tt);
    tok_ids_free(&o);
    tok_free(t);
    return 0;
}
