/* test_tok.c — tok.h against Hugging Face tokenizers/transformers, with no
 * Python: every line of tests/fixtures/tokenizer/corpus.jsonl is encoded with
 * each tokenizer in vectors.json and compared id for id; decode, streaming
 * decode, the pre-tokenizer's cuts, the Unicode class tables (every code
 * point), the chat template, special-token lookup, invalid UTF-8 and hostile
 * tokenizer.json files are checked too; and Kimi K2's tiktoken.model against
 * tiktoken (tests/fixtures/tokenizer-kimi/vectors.json, tools/oracle_kimi.py):
 * ids, decode, pre-token splits, class tables, hostile files. Run from the
 * repository root. */
#include "../tok.h"
#include "../json.h"
#include "check.h"

#include <sys/stat.h>

#define FX "tests/fixtures/tokenizer/"
#define MAX_SHOWN 5

typedef struct { unsigned char *p; size_t n; } bytes;

static js_doc *load_json(const char *path, char **buf) {
    size_t len;
    char err[200];
    *buf = compat_read_file(path, (size_t)1 << 30, &len);
    if (!*buf) { fprintf(stderr, "%s: cannot read\n", path); return NULL; }
    js_doc *d = js_parse(*buf, len, err, sizeof err);
    if (!d) fprintf(stderr, "%s: %s\n", path, err);
    return d;
}

static int unhex(const char *h, size_t n, bytes *out) {
    out->n = n / 2;
    out->p = (unsigned char *)malloc(out->n + 1);
    if (!out->p || n % 2) return -1;
    for (size_t i = 0; i < out->n; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) return -1;
        out->p[i] = (unsigned char)v;
    }
    return 0;
}

/* corpus.jsonl: one JSON string of hex digits per line. */
static bytes *read_corpus(size_t *count) {
    size_t len, n = 0, cap = 0;
    char *buf = compat_read_file(FX "corpus.jsonl", (size_t)1 << 28, &len), err[200];
    bytes *lines = NULL;
    for (char *p = buf, *e; p && p < buf + len; p = e + 1) {
        e = memchr(p, '\n', (size_t)(buf + len - p));
        if (!e) e = buf + len;
        js_doc *d = js_parse(p, (size_t)(e - p), err, sizeof err);
        if (n == cap) lines = realloc(lines, (cap = cap ? 2 * cap : 1024) * sizeof *lines);
        if (!d || !js_str(d, d->root) || unhex(js_str(d, d->root), js_str_len(d, d->root), &lines[n])) {
            fprintf(stderr, "corpus.jsonl line %zu: %s\n", n + 1, d ? "not a hex string" : err);
            exit(1);
        }
        n++;
        js_free(d);
    }
    free(buf);
    *count = n;
    return lines;
}

/* Members of object obj whose keys are line numbers, as an array of texts. */
static bytes *hex_by_line(const js_doc *d, int obj, size_t n) {
    bytes *out = calloc(n, sizeof *out);
    for (int c = js_first(d, obj); c >= 0; c = js_next(d, c)) {
        size_t i = (size_t)strtoul(js_key(d, c), NULL, 10);
        if (i < n) unhex(js_str(d, c), js_str_len(d, c), &out[i]);
    }
    return out;
}

static void free_lines(bytes *b, size_t n) {
    for (size_t i = 0; b && i < n; i++) free(b[i].p);
    free(b);
}

static int ids_equal(const js_doc *d, int arr, const tok_ids *o, size_t *first_diff) {
    size_t k = 0;
    for (int c = js_first(d, arr); c >= 0; c = js_next(d, c), k++)
        if (k >= o->n || o->ids[k] != (int)js_int(d, c)) { *first_diff = k; return 0; }
    *first_diff = k;
    return k == o->n;
}

static int bytes_eq(const char *a, size_t an, const unsigned char *b, size_t bn) { return an == bn && !memcmp(a, b, an); }

/* ---------------------------------------------------------------- parity */

typedef struct { size_t lines, ids, decode, stream; } parity;

/* Streams ids one at a time; every chunk must be whole UTF-8 characters and
 * the chunks must add up to tok_decode's text. */
static int stream_ok(const tok *t, const tok_ids *o, const tok_str *whole) {
    tok_stream st = {{0}, 0, 0, 0, 0};
    tok_str acc = {0};
    int ok = 1;
    for (size_t i = 0; i < o->n && ok; i++) {
        size_t before = acc.n;
        if (tok_stream_put(t, &st, o->ids[i], &acc)) ok = 0;
        if (acc.n > before && js_utf8_prefix((unsigned char *)acc.s + before, acc.n - before) != acc.n - before) ok = 0;
    }
    if (tok_stream_flush(&st, 0, &acc)) ok = 0;
    ok = ok && acc.n == whole->n && (!acc.n || !memcmp(acc.s, whole->s, acc.n));
    tok_str_free(&acc);
    return ok;
}

static void parity_one(const js_doc *v, int tv, const char *name, const bytes *corpus, const bytes *texts, size_t n, parity *res) {
    char err[512];
    const char *path = js_str(v, js_get(v, tv, "path"));
    tok *t = path ? tok_load(path, err, sizeof err) : NULL;
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "%s: %s\n", name, path ? err : "no path"); return; }
    bytes *decoded = hex_by_line(v, js_get(v, tv, "decoded"), n);
    int ids = js_first(v, js_get(v, tv, "ids")), rt = js_first(v, js_get(v, tv, "roundtrip"));
    tok_ids o = {0};
    tok_str s = {0};
    size_t bad_ids = 0, bad_dec = 0, bad_stream = 0, i = 0;
    for (; i < n && ids >= 0; i++, ids = js_next(v, ids), rt = js_next(v, rt)) {
        o.n = 0;
        s.n = 0;
        size_t diff;
        if (tok_encode(t, (const char *)corpus[i].p, corpus[i].n, &o) || !ids_equal(v, ids, &o, &diff)) {
            if (bad_ids++ < MAX_SHOWN) fprintf(stderr, "%s line %zu: ids differ from tokenizers at token %zu\n", name, i + 1, diff);
            continue;
        }
        const bytes *want = js_int(v, rt) ? (texts[i].p ? &texts[i] : &corpus[i]) : &decoded[i];
        if (tok_decode(t, o.ids, o.n, &s) || !bytes_eq(s.s, s.n, want->p, want->n)) {
            if (bad_dec++ < MAX_SHOWN) fprintf(stderr, "%s line %zu: decode differs from tokenizers\n", name, i + 1);
        }
        if (!stream_ok(t, &o, &s) && bad_stream++ < MAX_SHOWN) fprintf(stderr, "%s line %zu: streaming decode differs\n", name, i + 1);
    }
    CHECK(i == n);
    CHECK(bad_ids == 0);
    CHECK(bad_dec == 0);
    CHECK(bad_stream == 0);
    res->lines += i;
    res->ids += i - bad_ids;
    res->decode += i - bad_ids - bad_dec;
    res->stream += i - bad_ids - bad_stream;
    tok_ids_free(&o);
    tok_str_free(&s);
    free_lines(decoded, n);
    tok_free(t);
}

/* The pre-tokenizer's cuts equal the Split regexes' pieces (byte lengths):
 * vectors' `key` against tokenizer file `path`'s pre-tokenizer. */
static size_t pretok_parity(const js_doc *v, const char *key, const char *path, const bytes *corpus, const bytes *texts, size_t n) {
    char err[512];
    tok *t = tok_load(path, err, sizeof err);
    CHECK(t != NULL);
    if (!t) { fprintf(stderr, "%s\n", err); return 0; }
    size_t good = 0, i = 0;
    for (int l = js_first(v, js_get(v, v->root, key)); l >= 0 && i < n; l = js_next(v, l), i++) {
        const bytes *x = texts[i].p ? &texts[i] : &corpus[i];
        int c = js_first(v, l), ok = 1;
        tok_pre_st st = {0, 0};
        for (size_t p = 0; p < x->n && ok; c = js_next(v, c)) {
            size_t e = tok_pretok(t, (const char *)x->p, p, x->n, &st);
            ok = c >= 0 && (int64_t)(e - p) == js_int(v, c);
            p = e;
        }
        ok = ok && c < 0;
        if (!ok && i - good < MAX_SHOWN) fprintf(stderr, "%s: pre-tokens of line %zu differ from the Split regexes\n", key, i + 1);
        good += (size_t)ok;
    }
    CHECK(i == n);
    CHECK(good == n);
    tok_free(t);
    return good;
}

/* tok_unicode.h against the classes dumped from tokenizers' regex engine. */
static size_t unicode_parity(const js_doc *v) {
    /* first table classes 1..3, second table classes as 4 + TOK_UNI2_* */
    static const char *const names[] = {"L", "N", "S", "M", "P", "Sym"};
    static const int cls[] = {TOK_UNI_L, TOK_UNI_N, TOK_UNI_S, 4 + TOK_UNI2_M, 4 + TOK_UNI2_P, 4 + TOK_UNI2_SYM};
    uint8_t *want = calloc(0x110000, 1);
    int u = js_get(v, v->root, "unicode");
    for (int k = 0; k < 6; k++)
        for (int r = js_first(v, js_get(v, u, names[k])); r >= 0; r = js_next(v, r)) {
            int64_t a = js_int(v, js_first(v, r)), b = js_int(v, js_next(v, js_first(v, r)));
            for (int64_t cp = a; cp <= b && cp < 0x110000; cp++) want[cp] = (uint8_t)cls[k];
        }
    size_t good = 0, bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        int got = tok_uni_class(cp), got2 = tok_uni2_class(cp);
        if (cp < 256 && (tok_uni_latin1[cp] != got || tok_uni2_latin1[cp] != got2)) got = -1;
        if (got == TOK_UNI_OTHER && got2 != TOK_UNI2_NONE) got = 4 + got2;
        else if (got2 != TOK_UNI2_NONE) got = -2; /* M, P and S are OTHER in the first table */
        if (got == want[cp]) good++;
        else if (bad++ < MAX_SHOWN) fprintf(stderr, "U+%04X: class %d, tokenizers' regex says %d\n", cp, got, want[cp]);
    }
    free(want);
    CHECK(bad == 0);
    return good;
}

/* ---------------------------------------------------------------- chat, lookup */

static size_t chat_parity(const js_doc *v) {
    char err[512];
    size_t good = 0;
    int chat = js_get(v, v->root, "chat");
    for (int tc = js_first(v, chat); tc >= 0; tc = js_next(v, tc)) {
        const char *path = !strcmp(js_key(v, tc), "tiny-glm5") ? "tests/fixtures/tiny-glm5/tokenizer.json" : FX "tokenizer.json";
        tok *t = tok_load(path, err, sizeof err);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(tok_chat_check(t, err, sizeof err) == 0);
        for (int c = js_first(v, tc); c >= 0; c = js_next(v, c)) {
            const char *sys = js_str(v, js_get(v, c, "system")), *user = js_str(v, js_get(v, c, "user"));
            const char *text = js_str(v, js_get(v, c, "text"));
            int think = js_typeof(v, js_get(v, c, "think")) == JS_TRUE;
            char buf[1024];
            size_t n = tok_chat_text(sys, user, think, buf, sizeof buf), diff;
            tok_ids o = {0};
            int ok = n == strlen(text) && !strcmp(buf, text);
            CHECK(ok);
            CHECK(tok_chat(t, sys, user, think, &o) == 0);
            ok = ok && ids_equal(v, js_get(v, c, "ids"), &o, &diff);
            CHECK(ok);
            if (!ok) fprintf(stderr, "%s: chat case \"%s\" differs from transformers\n", path, user);
            good += (size_t)ok;
            tok_ids_free(&o);
        }
        tok_free(t);
    }
    return good;
}

/* tok_find/tok_is_special against the file's own added_tokens list. */
static void lookup_checks(void) {
    char err[512], *buf;
    tok *t = tok_load(FX "tokenizer.json", err, sizeof err);
    js_doc *d = load_json(FX "tokenizer.json", &buf);
    CHECK(t && d);
    if (!t || !d) return;
    int n = 0;
    for (int a = js_first(d, js_get(d, d->root, "added_tokens")); a >= 0; a = js_next(d, a), n++) {
        int id = tok_find(t, js_str(d, js_get(d, a, "content")));
        CHECK(id == (int)js_int(d, js_get(d, a, "id")));
        CHECK(tok_is_special(t, id) == (js_typeof(d, js_get(d, a, "special")) == JS_TRUE));
    }
    CHECK(n == 36);
    static const char *const need[] = {"[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|system|>", "<think>", "</think>", "<|endoftext|>", "<|observation|>"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) CHECK(tok_is_special(t, tok_find(t, need[i])));
    CHECK(tok_find(t, "<|nonexistent|>") == -1);
    CHECK(tok_find(t, "") == -1);
    int a = tok_find(t, "a"), sp = tok_find(t, "\xc4\xa0"); /* "Ġ" is the byte-alphabet space */
    CHECK(a >= 0 && !tok_is_special(t, a));
    size_t len;
    const char *p = tok_piece(t, sp, &len);
    CHECK(p && len == 1 && p[0] == ' ');
    CHECK(tok_piece(t, -1, &len) == NULL && tok_piece(t, tok_n_ids(t), &len) == NULL);
    CHECK(tok_n_ids(t) == 32000);
    js_free(d);
    free(buf);
    tok_free(t);

    t = tok_load(FX "flags.json", err, sizeof err);
    CHECK(t != NULL);
    if (!t) return;
    int b = tok_find(t, "<b>"), l = tok_find(t, "<L>");
    CHECK(b >= 0 && !tok_is_special(t, b) && tok_is_special(t, l));
    CHECK(tok_find(t, "he") < 352); /* content already in the vocabulary keeps its id */
    tok_free(t);
}

/* ---------------------------------------------------------------- UTF-8, streaming */

static void utf8_checks(const bytes *corpus, const bytes *texts, size_t n) {
    static const struct { const char *in, *out; } cases[] = {
        {"\x80", "\xEF\xBF\xBD"},
        {"\xC0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE0\xA0", "\xEF\xBF\xBD"},
        {"\xE0\xA0x", "\xEF\xBF\xBDx"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"a\xFF" "b", "a\xEF\xBF\xBD" "b"},
        {"\xC3\xA9\xA9", "\xC3\xA9\xEF\xBF\xBD"},
        {"\xE4\xB8\xAD", "\xE4\xB8\xAD"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t k = tok_utf8_fix(cases[i].in, strlen(cases[i].in), out);
        CHECK(k == strlen(cases[i].out) && !memcmp(out, cases[i].out, k));
    }
    /* Every invalid corpus line repairs to the text Python's "replace" gave. */
    size_t bad = 0, seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (!texts[i].p) continue;
        seen++;
        char *fix = malloc(3 * corpus[i].n + 1);
        size_t k = tok_utf8_fix((const char *)corpus[i].p, corpus[i].n, fix);
        bad += !bytes_eq(fix, k, texts[i].p, texts[i].n);
        free(fix);
    }
    CHECK(seen >= 100);
    CHECK(bad == 0);
}

static void stream_checks(void) {
    char err[512];
    tok *t = tok_load("tests/fixtures/tiny-glm5/tokenizer.json", err, sizeof err);
    CHECK(t != NULL);
    if (!t) return;
    /* "中" (E4 B8 AD) fed as three one-byte tokens: nothing until complete. */
    int ids[3] = {t->byte_id[0xE4], t->byte_id[0xB8], t->byte_id[0xAD]};
    tok_stream st = {{0}, 0, 0, 0, 0};
    tok_str o = {0};
    CHECK(tok_stream_put(t, &st, ids[0], &o) == 0 && o.n == 0);
    CHECK(tok_stream_put(t, &st, ids[1], &o) == 0 && o.n == 0);
    CHECK(tok_stream_put(t, &st, ids[2], &o) == 0 && o.n == 3 && !memcmp(o.s, "\xE4\xB8\xAD", 3));
    /* An incomplete tail: flush raw gives the bytes, flush lossy one U+FFFD. */
    o.n = 0;
    tok_stream_put(t, &st, ids[0], &o);
    tok_stream_put(t, &st, ids[1], &o);
    CHECK(o.n == 0 && tok_stream_flush(&st, 1, &o) == 0 && o.n == 2 && !memcmp(o.s, "\xE4\xB8", 2));
    o.n = 0;
    tok_stream_put(t, &st, ids[0], &o);
    CHECK(tok_stream_flush(&st, 0, &o) == 0 && o.n == 3 && !memcmp(o.s, "\xEF\xBF\xBD", 3));
    CHECK(tok_stream_flush(&st, 0, &o) == 0 && o.n == 3);
    /* A broken sequence is replaced as soon as it is known to be broken. */
    o.n = 0;
    tok_stream_put(t, &st, ids[0], &o);
    tok_stream_put(t, &st, t->byte_id['x'], &o);
    CHECK(o.n == 4 && !memcmp(o.s, "\xEF\xBF\xBDx", 4));
    /* Special tokens decode to their content; unknown ids are skipped. */
    int sp[4] = {tok_find(t, "<|user|>"), -5, 1 << 30, tok_find(t, "</think>")};
    o.n = 0;
    CHECK(tok_decode(t, sp, 4, &o) == 0 && !strcmp(o.s, "<|user|></think>"));
    /* Encode edge cases. */
    tok_ids x = {0};
    CHECK(tok_encode(t, "", 0, &x) == 0 && x.n == 0);
    CHECK(tok_encode(t, "a\0b", 3, &x) == 0 && x.n == 3 && x.ids[1] == t->byte_id[0]);
    CHECK(tok_encode(t, "x", TOK_MAX_TEXT + 1, &x) == -1);
    char buf[64];
    CHECK(tok_chat_text(NULL, NULL, 0, buf, sizeof buf) == 41 && !strcmp(buf, "[gMASK]<sop><|user|><|assistant|></think>"));
    CHECK(tok_chat_text("s", "u", 1, buf, 8) == 52 && !strcmp(buf, "[gMASK]"));
    tok_ids_free(&x);
    tok_str_free(&o);
    tok_free(t);
}

/* ---------------------------------------------------------------- hostile files */

/* A minimal valid tokenizer.json: the 256 byte tokens (ids 0..255), "ab"
 * 256, "abc" 257, merges a+b and ab+c, and the added token <|user|> 258. */
typedef struct { const char *merges, *added; int skip_byte, dup_id, big_id; } spec;

static char *make_json(const spec *s) {
    tok_str o = {0};
    char tmp[1024];
    snprintf(tmp, sizeof tmp,
             "{\"version\":\"1.0\",\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
             "\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}"
             "\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},\"post_processor\":null,"
             "\"decoder\":{\"type\":\"ByteLevel\"},\"added_tokens\":%s,\"model\":{\"type\":\"BPE\",\"vocab\":{",
             s->added ? s->added
                      : "[{\"id\":258,\"content\":\"<|user|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                        "\"normalized\":false,\"special\":true}]");
    tok_str_put(&o, tmp, strlen(tmp));
    int id = 0;
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        int l = js_utf8_encode_(tok_byte_cp_(b), u);
        if (b == s->skip_byte) continue;
        if (b == '"' || b == '\\') snprintf(tmp, sizeof tmp, "\"\\%c\":%d,", b, id);
        else snprintf(tmp, sizeof tmp, "\"%.*s\":%d,", l, (const char *)u, id);
        tok_str_put(&o, tmp, strlen(tmp));
        id++;
    }
    if (s->skip_byte >= 0) {
        snprintf(tmp, sizeof tmp, "\"zz\":%d,", id++);
        tok_str_put(&o, tmp, strlen(tmp));
    }
    snprintf(tmp, sizeof tmp, "\"ab\":%d,\"abc\":%d},\"merges\":%s}}", s->dup_id ? 5 : id, s->big_id ? (1 << 30) : id + 1,
             s->merges ? s->merges : "[[\"a\",\"b\"],[\"ab\",\"c\"]]");
    tok_str_put(&o, tmp, strlen(tmp));
    return o.s;
}

/* src with its first `from` replaced by `to` (malloc'd). */
static char *replace1(const char *src, const char *from, const char *to) {
    const char *p = strstr(src, from);
    if (!p) { fprintf(stderr, "replace1: \"%s\" not found\n", from); exit(1); }
    size_t a = (size_t)(p - src), fl = strlen(from), tl = strlen(to), n = strlen(src);
    char *o = malloc(n - fl + tl + 1);
    memcpy(o, src, a);
    memcpy(o + a, to, tl);
    memcpy(o + a + tl, p + fl, n - a - fl + 1);
    return o;
}

/* Writes json to dir/caseK.json; tok_load must refuse it naming the file
 * and containing `field` in its message. Returns 1 if so. */
static int expect_refused(const char *dir, int k, const char *json, const char *field) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/case%02d.json", dir, k);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(json, 1, strlen(json), f);
    fclose(f);
    tok *t = tok_load(path, err, sizeof err);
    int ok = t == NULL && strstr(err, path) && strstr(err, field);
    if (!ok) fprintf(stderr, "hostile case %d (%s): %s\n", k, field, t ? "accepted" : err);
    CHECK(ok);
    tok_free(t);
    remove(path);
    return ok;
}

static size_t hostile_checks(size_t *total) {
    char dir[] = "/tmp/test_tok_XXXXXX", err[512];
    if (!mkdtemp(dir)) { CHECK(0); return 0; }
    spec base = {NULL, NULL, -1, 0, 0};
    char *good = make_json(&base);
    tok *t = tok_load_mem(good, strlen(good), "base", err, sizeof err);
    CHECK(t != NULL);
    if (!t) fprintf(stderr, "base: %s\n", err);
    tok_ids o = {0};
    if (t) {
        CHECK(tok_encode(t, "abc<|user|>ab", 13, &o) == 0 && o.n == 3 && o.ids[0] == 257 && o.ids[1] == 258 && o.ids[2] == 256);
        CHECK(tok_chat(t, NULL, "x", 1, &o) == -2 && tok_chat_check(t, err, sizeof err) == -1);
        CHECK_HAS(err, "[gMASK]");
    }
    tok_ids_free(&o);
    tok_free(t);

    static const struct { const char *from, *to, *field; } sub[] = {
        {"{\"version\":\"1.0\",", "{\"version\":\"2.0\",", "version: only \"1.0\""},
        {"{\"version\":\"1.0\",", "{\"version\":\"1.0\",\"truncation\":{\"max_length\":8},", "truncation: must be null"},
        {"{\"version\":\"1.0\",", "{\"version\":\"1.0\",\"padding\":{},", "padding: must be null"},
        {"\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}", "normalizer: must be null (found NFC)"},
        {"\"type\":\"Sequence\"", "\"type\":\"Seq\"", "pre_tokenizer: only Sequence[Split, ByteLevel] with the GLM regex or DeepSeek-V3"},
        {"\\\\p{N}{1,3}", "\\\\p{N}", "pre_tokenizer.pretokenizers[0].pattern: unknown split regex"},
        {"\"behavior\":\"Isolated\"", "\"behavior\":\"MergedWithPrevious\"", "pretokenizers[0]: behavior MergedWithPrevious"},
        {"\"behavior\":\"Isolated\"", "\"behavior\":\"Removed\"", "pretokenizers[0]: behavior Removed with invert=false"},
        {"\"add_prefix_space\":false", "\"add_prefix_space\":true", "pretokenizers[1]: ByteLevel needs add_prefix_space=false"},
        {",\"use_regex\":false", "", "pretokenizers[1]: ByteLevel needs"},
        {"\"post_processor\":null", "\"post_processor\":{\"type\":\"BertProcessing\"}", "post_processor: type BertProcessing"},
        {"\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":null", "decoder: only ByteLevel"},
        {"\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":\"WordPiece\"}", "decoder: only ByteLevel is supported (found WordPiece)"},
        {"\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "model: only type BPE is supported (found WordPiece)"},
        {"\"model\":{", "\"modelx\":{", "model: only type BPE is supported (found no model)"},
        {"\"type\":\"BPE\",", "\"type\":\"BPE\",\"dropout\":0.1,", "model.dropout: must be null"},
        {"\"type\":\"BPE\",", "\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\",", "model.continuing_subword_prefix"},
        {"\"type\":\"BPE\",", "\"type\":\"BPE\",\"end_of_word_suffix\":\"</w>\",", "model.end_of_word_suffix"},
        {"\"type\":\"BPE\",", "\"type\":\"BPE\",\"ignore_merges\":\"yes\",", "model.ignore_merges: must be a boolean"},
        {"\"vocab\":{", "\"vocab_\":{", "model.vocab: must be an object"},
        {"\"merges\":", "\"merges_\":", "model.merges: missing"},
        {"\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"]]", "\"merges\":{}", "model.merges: must be an array"},
        {"\"ab\":256", "\"ab\":-1", "model.vocab[\"ab\"]: id must be an integer in 0..257"},
        {"\"ab\":256", "\"ab\":256.5", "model.vocab[\"ab\"]: id must be an integer"},
        {"\"ab\":256", "\"ab\":\"256\"", "model.vocab[\"ab\"]: id must be an integer"},
        {"\"ab\":256", "\"ab\":1099511627776", "model.vocab[\"ab\"]: id must be an integer"},
        {"\"ab\":256", "\"\":256", "model.vocab: id 256 has a key of 0 bytes"},
        {"\"added_tokens\":[", "\"added_tokens\":7,\"x\":[", "added_tokens: must be an array"},
        {"\"id\":258", "\"id\":300", "added_tokens[0] (\"<|user|>\"): id 300, but tokenizers assigns 258"},
        {"\"single_word\":false", "\"single_word\":true", "added_tokens[0] (\"<|user|>\"): single_word=true is not supported"},
        {"\"lstrip\":false", "\"lstrip\":1", "added_tokens[0]: single_word/lstrip/rstrip/normalized/special must be booleans"},
        {"\"content\":\"<|user|>\"", "\"content\":\"\"", "added_tokens[0]: needs an integer \"id\" and a content string"},
        {"\"id\":258,", "", "added_tokens[0]: needs an integer \"id\""},
    };
    size_t good_n = 0, k = 0;
    for (; k < sizeof sub / sizeof *sub; k++) {
        char *j = replace1(good, sub[k].from, sub[k].to);
        good_n += (size_t)expect_refused(dir, (int)k, j, sub[k].field);
        free(j);
    }
    static const struct { spec s; const char *field; } built[] = {
        {{NULL, NULL, 'q', 0, 0}, "model.vocab: no token \"q\" for byte 0x71"},
        {{NULL, NULL, 0x20, 0, 0}, "model.vocab: no token \"\xc4\xa0\" for byte 0x20"},
        {{NULL, NULL, -1, 1, 0}, "model.vocab[\"ab\"]: duplicate id 5"},
        {{NULL, NULL, -1, 0, 1}, "model.vocab[\"abc\"]: id must be an integer in 0..257"},
        {{"[[\"a\",\"x\"],[\"ab\",\"c\"]]", NULL, -1, 0, 0}, "model.merges[0]: \"ax\" is not in model.vocab"},
        {{"[[\"a\",\"\xe4\xb8\xad\"]]", NULL, -1, 0, 0}, "model.merges[0]: \"\xe4\xb8\xad\" is not in model.vocab"},
        {{"[[\"b\",\"c\"]]", NULL, -1, 0, 0}, "model.merges[0]: \"bc\" is not in model.vocab"},
        {{"[[\"a\"]]", NULL, -1, 0, 0}, "model.merges[0]: must be a pair of strings"},
        {{"[[\"a\",\"b\",\"c\"]]", NULL, -1, 0, 0}, "model.merges[0]: must be a pair of strings"},
        {{"[\"a b c\"]", NULL, -1, 0, 0}, "model.merges[0]: \"a b\" must have exactly one space"},
        {{"[\"ab\"]", NULL, -1, 0, 0}, "model.merges[0]: \"a b\" must have exactly one space"},
        {{"[\"a b\",[\"ab\",\"c\"]]", NULL, -1, 0, 0}, "model.merges[1]: mixes \"a b\" strings and pairs"},
        {{NULL, "[{\"id\":258,\"content\":\"<u>\"},{\"id\":259,\"content\":\"<u>\"}]", -1, 0, 0}, "added_tokens[1]: \"<u>\" is listed twice"},
        {{NULL, "[{\"id\":258,\"content\":\"ab\"}]", -1, 0, 0}, "added_tokens[0] (\"ab\"): id 258, but tokenizers assigns 256"},
    };
    for (size_t i = 0; i < sizeof built / sizeof *built; i++, k++) {
        char *j = make_json(&built[i].s);
        good_n += (size_t)expect_refused(dir, (int)k, j, built[i].field);
        free(j);
    }
    static const struct { const char *json, *field; } raw[] = {
        {"", "not valid JSON: unexpected end"},
        {"{\"model\":", "not valid JSON: unexpected end"},
        {"[1,2]", "top level must be an object"},
        {"{\"a\":1e999}", "not valid JSON: number out of range"},
        {"{\"a\":\"\xff\"}", "not valid JSON: invalid UTF-8"},
        {"{\"a\":1,\"a\":2}", "not valid JSON: duplicate key"},
    };
    for (size_t i = 0; i < sizeof raw / sizeof *raw; i++, k++) good_n += (size_t)expect_refused(dir, (int)k, raw[i].json, raw[i].field);
    {   /* GPT-2's plain ByteLevel pre-tokenizer; no pre-tokenizer at all */
        static const char *const pts[] = {"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", "null"};
        const char *a = strstr(good, "\"pre_tokenizer\":") + 16, *b = strstr(good, ",\"post_processor\"");
        for (int i = 0; i < 2; i++) {
            tok_str j = {0};
            tok_str_put(&j, good, (size_t)(a - good));
            tok_str_put(&j, pts[i], strlen(pts[i]));
            tok_str_put(&j, b, strlen(b));
            good_n += (size_t)expect_refused(dir, (int)k++, j.s, i ? "pre_tokenizer: only Sequence" : "(found ByteLevel)");
            tok_str_free(&j);
        }
    }
    {   /* a vocabulary key longer than TOK_MAX_PIECE */
        char *key = malloc(TOK_MAX_PIECE + 16);
        memset(key, 'x', TOK_MAX_PIECE + 2);
        strcpy(key + TOK_MAX_PIECE + 2, "\":256");
        key[0] = '"';
        char *j = replace1(good, "\"ab\":256", key);
        good_n += (size_t)expect_refused(dir, (int)k++, j, "model.vocab: id 256 has a key of 65537 bytes");
        free(j);
        free(key);
    }
    {   /* nesting deeper than json.h allows */
        char deep[400];
        memset(deep, '[', 300);
        deep[300] = 0;
        good_n += (size_t)expect_refused(dir, (int)k++, deep, "not valid JSON: JSON nested too deeply");
    }
    {
        char path[600];
        snprintf(path, sizeof path, "%s/absent.json", dir);
        t = tok_load(path, err, sizeof err);
        CHECK(t == NULL);
        CHECK_HAS(err, path);
        CHECK_HAS(err, "cannot read: No such file");
        good_n += t == NULL && strstr(err, "cannot read");
        k++;
    }
    free(good);
    rmdir(dir);
    *total = k;
    return good_n;
}

/* DeepSeek-V3's pipeline refused when any part differs, naming the field. */
static void deepseek_refusals(void) {
    size_t len;
    char *good = compat_read_file(FX "deepseek.json", (size_t)1 << 28, &len), err[512];
    CHECK(good != NULL);
    if (!good) return;
    static const struct { const char *from, *to, *field; } sub[] = {
        {"\u9fa5", "\u9fa6", "pretokenizers[1].pattern: split regex"},
        {"[A-Za-z]+", "[A-Z]+", "pretokenizers[2].pattern: split regex"},
        {"\"normalizers\":[]", "\"normalizers\":[{\"type\":\"NFC\"}]", "normalizer: must be null (found Sequence)"},
        {"\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\"", "\"behavior\":\"Removed\",\"invert\":false},{\"type\":\"ByteLevel\"",
         "pretokenizers[2]: only behavior Isolated"},
    };
    for (size_t k = 0; k < sizeof sub / sizeof *sub; k++) {
        const char *at = strstr(good, sub[k].from);
        CHECK(at != NULL);
        if (!at) { fprintf(stderr, "deepseek.json has no %s\n", sub[k].from); continue; }
        size_t a = (size_t)(at - good), fl = strlen(sub[k].from), tl = strlen(sub[k].to);
        char *bad = malloc(len - fl + tl + 1);
        memcpy(bad, good, a), memcpy(bad + a, sub[k].to, tl), memcpy(bad + a + tl, at + fl, len - a - fl + 1);
        tok *t = tok_load_mem(bad, len - fl + tl, "deepseek.json", err, sizeof err);
        CHECK(t == NULL && strstr(err, sub[k].field));
        if (t || !strstr(err, sub[k].field)) fprintf(stderr, "deepseek case %zu: %s\n", k, t ? "accepted" : err);
        tok_free(t), free(bad);
    }
    free(good);
}


/* ---------------------------------------------------------------- Kimi K2 (tiktoken) */

#define KX "tests/fixtures/tokenizer-kimi/"

/* Class tables of Kimi's split against tiktoken's own dump: each code point
 * in `name`'s ranges iff pred says so. Returns the code points that agree. */
static size_t kimi_class(const js_doc *v, const char *name, int (*pred)(uint32_t)) {
    uint8_t *want = calloc(0x110000, 1);
    for (int r = js_first(v, js_get(v, js_get(v, v->root, "classes"), name)); r >= 0; r = js_next(v, r))
        for (int64_t cp = js_int(v, js_first(v, r)); cp <= js_int(v, js_next(v, js_first(v, r))) && cp < 0x110000; cp++) want[cp] = 1;
    size_t good = 0, bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (pred(cp) == want[cp]) good++;
        else if (bad++ < MAX_SHOWN) fprintf(stderr, "kimi class %s: U+%04X is %d here, %d in tiktoken\n", name, cp, pred(cp), want[cp]);
    }
    free(want);
    CHECK(bad == 0);
    return good;
}

static int kind_of(uint32_t cp) { return cp < 256 ? tok_uni3_latin1[cp] : tok_uni3_class(cp); }
static int is_upper(uint32_t cp) { return kind_of(cp) == TOK_UNI3_UPPER; }
static int is_lower(uint32_t cp) { return kind_of(cp) == TOK_UNI3_LOWER; }
static int is_otherl(uint32_t cp) { return kind_of(cp) == TOK_UNI3_OTHERL; }
static int is_han(uint32_t cp) { return tok_uni_han(cp); }
static int is_pyspace(uint32_t cp) { return tok_py_isspace_(cp); }

/* Every corpus line and Kimi extra line encoded and decoded as tiktoken did. */
static void kimi_parity(const bytes *corpus, const bytes *texts, size_t n, char *summary, size_t cap) {
    char err[512], *vbuf;
    js_doc *v = load_json(KX "vectors.json", &vbuf);
    tok *t = tok_load_dir("tests/fixtures/tokenizer-kimi", err, sizeof err);
    CHECK(v && t);
    if (!t) fprintf(stderr, "kimi: %s\n", err);
    if (!v || !t) { tok_free(t); return; }
    CHECK(!strcmp(js_str(v, js_get(v, v->root, "pattern")), TOK_KIMI_REGEX));
    CHECK((size_t)js_int(v, js_get(v, v->root, "n_corpus")) == n);
    size_t n_extra = (size_t)js_count(v, js_get(v, v->root, "extra")), total = n + n_extra;
    bytes *extra = calloc(n_extra + 1, sizeof *extra), *decoded = hex_by_line(v, js_get(v, v->root, "decoded"), total);
    size_t k = 0;
    for (int e = js_first(v, js_get(v, v->root, "extra")); e >= 0; e = js_next(v, e), k++) unhex(js_str(v, e), js_str_len(v, e), &extra[k]);
    tok_ids o = {0};
    tok_str s = {0};
    size_t i = 0, bad_ids = 0, bad_dec = 0, bad_stream = 0, diff;
    for (int ids = js_first(v, js_get(v, v->root, "ids")); ids >= 0 && i < total; ids = js_next(v, ids), i++) {
        const bytes *in = i < n ? &corpus[i] : &extra[i - n];
        const bytes *text = i < n && texts[i].p ? &texts[i] : in, *want = decoded[i].p ? &decoded[i] : text;
        o.n = s.n = 0;
        if (tok_encode(t, (const char *)in->p, in->n, &o) || !ids_equal(v, ids, &o, &diff)) {
            if (bad_ids++ < MAX_SHOWN) fprintf(stderr, "kimi line %zu: ids differ from tiktoken at token %zu\n", i + 1, diff);
            continue;
        }
        if ((tok_decode(t, o.ids, o.n, &s) || !bytes_eq(s.s, s.n, want->p, want->n)) && bad_dec++ < MAX_SHOWN)
            fprintf(stderr, "kimi line %zu: decode differs from tiktoken\n", i + 1);
        if (!stream_ok(t, &o, &s) && bad_stream++ < MAX_SHOWN) fprintf(stderr, "kimi line %zu: streaming decode differs\n", i + 1);
    }
    CHECK(i == total && n_extra >= 400);
    CHECK(bad_ids == 0 && bad_dec == 0 && bad_stream == 0);
    size_t pre = 0, l = 0;
    for (int pl = js_first(v, js_get(v, v->root, "pretokens")); pl >= 0 && l < total; pl = js_next(v, pl), l++) {
        const bytes *x = l < n ? (texts[l].p ? &texts[l] : &corpus[l]) : &extra[l - n];
        int c = js_first(v, pl), ok = 1;
        tok_pre_st st = {0, 0};
        for (size_t q = 0; q < x->n && ok; c = js_next(v, c)) {
            size_t e = tok_pretok(t, (const char *)x->p, q, x->n, &st);
            ok = c >= 0 && (int64_t)(e - q) == js_int(v, c);
            q = e;
        }
        ok = ok && c < 0;
        if (!ok && l - pre < MAX_SHOWN) fprintf(stderr, "kimi: pre-tokens of line %zu differ from tiktoken's split\n", l + 1);
        pre += (size_t)ok;
    }
    CHECK(l == total && pre == total);
    /* past the 400,000-character chunk: the ids' count and FNV-1a hash */
    size_t long_ok = 0, n_long = (size_t)js_count(v, js_get(v, v->root, "long"));
    for (int lg = js_first(v, js_get(v, v->root, "long")); lg >= 0; lg = js_next(v, lg)) {
        const char *unit = js_str(v, js_get(v, lg, "unit"));
        size_t ul = js_str_len(v, js_get(v, lg, "unit")), times = (size_t)js_int(v, js_get(v, lg, "times"));
        tok_str text = {0};
        for (size_t r = 0; r < times; r++) tok_str_put(&text, unit, ul);
        o.n = 0;
        uint64_t h = 0xcbf29ce484222325ull;
        CHECK(tok_encode(t, text.s, text.n, &o) == 0);
        for (size_t q = 0; q < o.n; q++) h = (h ^ (uint64_t)(uint32_t)o.ids[q]) * 0x100000001b3ull;
        char hex[20];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
        int ok = (int64_t)o.n == js_int(v, js_get(v, lg, "n_ids")) && !strcmp(hex, js_str(v, js_get(v, lg, "fnv")));
        if (!ok) fprintf(stderr, "kimi long text \"%s\" x %zu: %zu ids, hash %s, tiktoken's differ\n", unit, times, o.n, hex);
        long_ok += (size_t)ok;
        tok_str_free(&text);
    }
    CHECK(n_long == 2 && long_ok == n_long);
    size_t cls = kimi_class(v, "Han", is_han) + kimi_class(v, "Upper", is_upper) + kimi_class(v, "Lower", is_lower) +
                 kimi_class(v, "OtherL", is_otherl) + kimi_class(v, "isspace", is_pyspace);
    /* the special tokens: ids after the ranks, all special, reserved ones named by id */
    int nb = t->n_vocab;
    CHECK(nb == 3960 && tok_n_ids(t) == nb + 258);
    CHECK(tok_find(t, "[BOS]") == nb && tok_find(t, "<|im_end|>") == nb + 2 && tok_find(t, "<|im_middle|>") == nb + 17);
    CHECK(tok_find(t, "<|reserved_token_3965|>") == nb + 5 && tok_find(t, "<|reserved_token_4217|>") == nb + 257);
    CHECK(tok_find(t, "<|reserved_token_3960|>") == -1 && tok_find(t, "<|reserved_token_4218|>") == -1);
    CHECK(tok_is_special(t, nb + 3) && tok_is_special(t, nb + 257) && !tok_is_special(t, nb - 1));
    size_t len;
    const char *p = tok_piece(t, tok_find(t, "\xc4\xa0"), &len); /* byte-level spelling of " ", as converters see the vocabulary */
    CHECK(p && len == 1 && p[0] == ' ');
    snprintf(summary, cap, "Kimi (tiktoken) %zu/%zu lines, decode and stream too, pre-tokens %zu/%zu, 400k-character texts %zu/%zu; "
             "Kimi classes %zu code points", i - bad_ids, total, pre, total, long_ok, n_long, cls);
    tok_ids_free(&o);
    tok_str_free(&s);
    free_lines(extra, n_extra);
    free_lines(decoded, total);
    tok_free(t);
    js_free(v);
    free(vbuf);
}

/* Hostile tiktoken.model / tokenizer_config.json: refused naming file and field. */
static size_t kimi_hostile(size_t *total) {
    char model[64 * 256], err[512];
    size_t o = 0;
    for (int b = 0; b < 256; b++) {
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        o += (size_t)snprintf(model + o, sizeof model - o, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    }
    o += (size_t)snprintf(model + o, sizeof model - o, "YWI= 256\nYWJj 257\n"); /* "ab", "abc" */
    const char *cfg = "{\"added_tokens_decoder\":{\"258\":{\"content\":\"[BOS]\"},\"260\":{\"content\":\"<|im_end|>\"}}}";
    tok *t = tok_load_tiktoken_mem(model, o, "m", cfg, strlen(cfg), "c", err, sizeof err);
    CHECK(t != NULL);
    if (!t) fprintf(stderr, "kimi base: %s\n", err);
    tok_ids ids = {0};
    if (t) {
        CHECK(tok_encode(t, "abc<|im_end|>ab<|reserved_token_259|>", 37, &ids) == 0 && ids.n == 4 && ids.ids[0] == 257 &&
              ids.ids[1] == 260 && ids.ids[2] == 256 && ids.ids[3] == 259);
        CHECK(tok_n_ids(t) == 258 + 258 && t->pre == TOK_PRE_KIMI);
    }
    tok_ids_free(&ids);
    tok_free(t);
    static const struct { const char *from, *to, *cfg, *field; } sub[] = {
        {"YWI= 256", "YWI=  256", NULL, "m: line 257: expected \"<base64 bytes> <rank>\""},
        {"YWI= 256", "YWI=", NULL, "m: line 257: expected"},
        {"YWI= 256", "YWI= 25x", NULL, "m: line 257: expected"},
        {"YWI= 256", "YWI= 1234567890", NULL, "m: line 257: expected"},
        {"YWI= 256", "YWI= 300", NULL, "m: line 257: rank 300, expected 256"},
        {"YWI= 256", "Y*I= 256", NULL, "m: line 257: the token is not base64"},
        {"YWI= 256", "YW= 256", NULL, "m: line 257: the token is not base64"},
        {"YWI= 256", "Y=I= 256", NULL, "m: line 257: the token is not base64"},
        {"YWI= 256", "YQ== 256", NULL, "m: line 257: the same bytes as rank 97"},
        {"YQ== 97\n", "", NULL, "m: line 98: rank 98, expected 97"},
        {"YWJj 257\n", "YWJj 257\n\r\n\nYWJjZA== 258\n", "{\"added_tokens_decoder\":{\"259\":{\"content\":\"[BOS]\"}}}", NULL}, /* blank lines skipped */
        {"YQ== 97\n", "YQ== 97\r\n", NULL, NULL},
        {NULL, NULL, "[1]", "c: added_tokens_decoder: must be an object"},
        {NULL, NULL, "{}", "c: added_tokens_decoder: must be an object"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"257\":{\"content\":\"x\"}}}", "c: added_tokens_decoder[\"257\"]: ids must be 258..515"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"516\":{\"content\":\"x\"}}}", "c: added_tokens_decoder[\"516\"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300x\":{\"content\":\"x\"}}}", "c: added_tokens_decoder[\"300x\"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"-1\":{\"content\":\"x\"}}}", "c: added_tokens_decoder[\"-1\"]: ids must be"},
        /* issue #32: "0300" and "300" were both id 300, one dropped silently; ids are canonical decimal */
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"a\"},\"0300\":{\"content\":\"b\"}}}",
         "c: added_tokens_decoder[\"0300\"]: ids must be 258..515 in plain decimal"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"0300\":{\"content\":\"b\"}}}", "c: added_tokens_decoder[\"0300\"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"+300\":{\"content\":\"b\"}}}", "c: added_tokens_decoder[\"+300\"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\" 300\":{\"content\":\"b\"}}}", "c: added_tokens_decoder[\" 300\"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300 \":{\"content\":\"b\"}}}", "c: added_tokens_decoder[\"300 \"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"\\n300\":{\"content\":\"b\"}}}", "ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"\":{\"content\":\"b\"}}}", "c: added_tokens_decoder[\"\"]: ids must be"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"a\"},\"300\":{\"content\":\"b\"}}}", "c: not valid JSON"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"258\":{\"content\":\"[BOS]\"},\"515\":{\"content\":\"[EOS]\"}}}", NULL}, /* the ends of the range */
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300\":\"x\"}}", "c: added_tokens_decoder[\"300\"]: needs a \"content\" string"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"\"}}}", "c: added_tokens_decoder[\"300\"]: needs a \"content\""},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"a\"},\"301\":{\"content\":\"a\"}}}",
         "c: added_tokens_decoder: \"a\" names ids 300 and 301"},
        {NULL, NULL, "{\"added_tokens_decoder\":{\"300\":{\"content\":\"<|reserved_token_301|>\"}}}",
         "c: added_tokens_decoder: \"<|reserved_token_301|>\" names ids 300 and 301"},
        {NULL, NULL, "{\"added_tokens_decoder\":", "c: not valid JSON"},
    };
    size_t good = 0, k = 0;
    for (; k < sizeof sub / sizeof *sub; k++) {
        char *m = sub[k].from ? replace1(model, sub[k].from, sub[k].to) : strdup(model);
        const char *c = sub[k].cfg ? sub[k].cfg : cfg;
        t = tok_load_tiktoken_mem(m, strlen(m), "m", c, strlen(c), "c", err, sizeof err);
        int ok = sub[k].field ? t == NULL && strstr(err, sub[k].field) != NULL : t != NULL;
        if (!ok) fprintf(stderr, "kimi hostile case %zu: %s\n", k, t ? "accepted" : err);
        CHECK(ok);
        good += (size_t)ok;
        tok_free(t);
        free(m);
    }
    {   /* a line dropped, a byte missing, a token too long */
        char *m = replace1(model, "YQ== 97\n", "");
        t = tok_load_tiktoken_mem(m, strlen(m), "m", cfg, strlen(cfg), "c", err, sizeof err);
        CHECK(t == NULL);
        good += t == NULL && strstr(err, "m: line 98: rank 98, expected 97");
        free(m), tok_free(t), k++;
        m = replace1(model, "/w== 255", "//8= 255"); /* rank 255 is "\xff\xff": no "\xff" */
        t = tok_load_tiktoken_mem(m, strlen(m), "m", cfg, strlen(cfg), "c", err, sizeof err);
        CHECK(t == NULL && strstr(err, "m: no token for the byte 0xff"));
        good += t == NULL && strstr(err, "no token for the byte 0xff");
        free(m), tok_free(t), k++;
        tok_str big = {0};
        tok_str_put(&big, model, o);
        for (int i = 0; i < TOK_MAX_PIECE / 3 + 2; i++) tok_str_put(&big, "YWJj", 4);
        tok_str_put(&big, " 258\n", 5);
        t = tok_load_tiktoken_mem(big.s, big.n, "m", cfg, strlen(cfg), "c", err, sizeof err);
        CHECK(t == NULL && strstr(err, "m: line 259: token longer than 65536 bytes"));
        good += t == NULL && strstr(err, "token longer");
        tok_str_free(&big), tok_free(t), k++;
        tok_str_put(&big, model, o); /* base64 short enough, its bytes one too many */
        for (int i = 0; i < TOK_MAX_PIECE / 3; i++) tok_str_put(&big, "YWFh", 4);
        tok_str_put(&big, "YWE= 258\n", 9);
        t = tok_load_tiktoken_mem(big.s, big.n, "m", cfg, strlen(cfg), "c", err, sizeof err);
        CHECK(t == NULL && strstr(err, "m: line 259: token longer than 65536 bytes"));
        good += t == NULL && strstr(err, "token longer");
        tok_str_free(&big), tok_free(t), k++;
    }
    {   /* files: absent tokenizer_config.json, absent directory, a directory with neither file */
        char dir[] = "/tmp/test_tok_kimi_XXXXXX", path[600];
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/tiktoken.model", dir);
        FILE *f = fopen(path, "wb");
        if (f) fwrite(model, 1, o, f), fclose(f);
        t = tok_load_dir(dir, err, sizeof err);
        CHECK(t == NULL && strstr(err, "tokenizer_config.json: cannot read: No such file"));
        good += t == NULL && strstr(err, "tokenizer_config.json: cannot read"), k++;
        remove(path);
        t = tok_load_dir(dir, err, sizeof err);
        CHECK(t == NULL && strstr(err, "tokenizer.json: cannot read: No such file"));
        good += t == NULL && strstr(err, "tokenizer.json: cannot read"), k++;
        snprintf(path, sizeof path, "%s/tiktoken.model", dir);
        t = tok_load_tiktoken(path, path, err, sizeof err);
        CHECK(t == NULL && strstr(err, "tiktoken.model: cannot read"));
        good += t == NULL && strstr(err, "tiktoken.model: cannot read"), k++;
        rmdir(dir);
    }
    *total = k;
    return good;
}

int main(void) {
    size_t n;
    bytes *corpus = read_corpus(&n);
    char *vbuf;
    js_doc *v = load_json(FX "vectors.json", &vbuf);
    if (!v) return 1;
    CHECK(n >= 2000 && (int64_t)n == js_int(v, js_get(v, v->root, "n_lines")));
    bytes *texts = hex_by_line(v, js_get(v, v->root, "texts"), n);

    parity p = {0, 0, 0, 0};
    int ntok = 0;
    for (int tv = js_first(v, js_get(v, v->root, "tokenizers")); tv >= 0; tv = js_next(v, tv), ntok++)
        parity_one(v, tv, js_key(v, tv), corpus, texts, n, &p);
    CHECK(ntok == 5);
    size_t pre = pretok_parity(v, "pretokens", "tests/fixtures/tiny-glm5/tokenizer.json", corpus, texts, n);
    size_t pre_ds = pretok_parity(v, "pretokens_deepseek", FX "deepseek.json", corpus, texts, n);
    size_t uni = unicode_parity(v);
    size_t chat = chat_parity(v);
    lookup_checks();
    deepseek_refusals();
    utf8_checks(corpus, texts, n);
    stream_checks();
    size_t hostile_total, hostile = hostile_checks(&hostile_total);
    char kimi[256] = "";
    kimi_parity(corpus, texts, n, kimi, sizeof kimi);
    size_t kimi_hostile_total, kimi_refused = kimi_hostile(&kimi_hostile_total);

    char summary[1024];
    snprintf(summary, sizeof summary,
             "%zu corpus lines x %d tokenizers: ids %zu/%zu, decode %zu/%zu, stream %zu/%zu; pre-tokens GLM %zu/%zu, DeepSeek %zu/%zu; "
             "unicode %zu code points; chat %zu/12; hostile %zu/%zu refused; %s; Kimi hostile %zu/%zu",
             n, ntok, p.ids, p.lines, p.decode, p.lines, p.stream, p.lines, pre, n, pre_ds, n, uni, chat, hostile, hostile_total, kimi,
             kimi_refused, kimi_hostile_total);
    free_lines(texts, n);
    free_lines(corpus, n);
    js_free(v);
    free(vbuf);
    printf("test_tok: %s\n", summary);
    return check_report("test_tok");
}
