/* fuzz_json.c — js_parse (json.h) on arbitrary bytes.
 *
 * Properties checked on every accepted document:
 *   - every node is reachable from the root exactly once, counts match the
 *     children, depth stays within JS_MAX_DEPTH;
 *   - strings are valid UTF-8, NUL-terminated at their length; keys of one
 *     object are distinct and js_get finds each (NUL-free) key's own node;
 *     js_at(arr, k) is the k-th child;
 *   - numbers are finite; an integer node's ival equals its double value;
 *   - the document printed back as JSON parses to the same tree (strings,
 *     keys and numbers bit-exact).
 * On refusal: the message is non-empty and says "at byte N" with N within
 * the input. Parsing with no message buffer must behave the same. */
#include "json.h"

#include "fuzz_common.h"

typedef struct { char *s; size_t n, cap; } fz_buf;

static void fz_put(fz_buf *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = (char *)realloc(b->s, nc);
        FUZZ_CHECK(q);
        b->s = q;
        b->cap = nc;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void fz_str(fz_buf *b, const char *s, uint32_t n) {
    fz_put(b, "\"", 1);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\', e[1] = (char)c;
            fz_put(b, e, 2);
        } else if (c < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", c);
            fz_put(b, e, 6);
        } else {
            fz_put(b, &s[i], 1);
        }
    }
    fz_put(b, "\"", 1);
}

/* Prints node i as JSON. */
static void fz_print(const js_doc *d, int i, fz_buf *b) {
    const js_node *x = &d->nodes[i];
    char num[64];
    switch (x->type) {
    case JS_NULL: fz_put(b, "null", 4); break;
    case JS_TRUE: fz_put(b, "true", 4); break;
    case JS_FALSE: fz_put(b, "false", 5); break;
    case JS_NUM:
        if (x->is_int) snprintf(num, sizeof num, "%lld", (long long)x->ival);
        else snprintf(num, sizeof num, "%.17g", x->num);
        fz_put(b, num, strlen(num));
        break;
    case JS_STR: fz_str(b, js_str(d, i), js_str_len(d, i)); break;
    case JS_ARR:
    case JS_OBJ:
        fz_put(b, x->type == JS_ARR ? "[" : "{", 1);
        for (int c = x->first, k = 0; c >= 0; c = d->nodes[c].next, k++) {
            if (k) fz_put(b, ",", 1);
            if (x->type == JS_OBJ) {
                fz_str(b, js_key(d, c), js_key_len(d, c));
                fz_put(b, ":", 1);
            }
            fz_print(d, c, b);
        }
        fz_put(b, x->type == JS_ARR ? "]" : "}", 1);
        break;
    }
}

/* Walks node i (depth = its container depth); counts visits in seen[]. */
static void fz_walk(const js_doc *d, int i, int depth, unsigned char *seen) {
    FUZZ_CHECK(i >= 0 && i < d->n);
    FUZZ_CHECK(!seen[i]);
    seen[i] = 1;
    const js_node *x = &d->nodes[i];
    FUZZ_CHECK(x->type >= JS_NULL && x->type <= JS_OBJ);
    FUZZ_CHECK(js_typeof(d, i) == x->type);
    if (x->type == JS_STR) {
        const char *s = js_str(d, i);
        uint32_t n = js_str_len(d, i);
        FUZZ_CHECK(s && (size_t)x->s + n < d->slen + 1 && s[n] == 0);
        FUZZ_CHECK(fuzz_utf8_ok(s, n));
    } else {
        FUZZ_CHECK(js_str(d, i) == NULL && js_str_len(d, i) == 0);
    }
    if (x->type == JS_NUM) {
        FUZZ_CHECK(x->num - x->num == 0); /* finite */
        FUZZ_CHECK(js_is_num(d, i) && js_num(d, i) == x->num);
        if (x->is_int) FUZZ_CHECK((double)x->ival == x->num && js_int(d, i) == x->ival);
    } else {
        FUZZ_CHECK(!js_is_num(d, i) && !js_is_int(d, i) && js_num(d, i) == 0.0 && js_int(d, i) == 0);
    }
    FUZZ_CHECK(js_is_bool(d, i) == (x->type == JS_TRUE || x->type == JS_FALSE));
    if (x->type != JS_ARR && x->type != JS_OBJ) {
        FUZZ_CHECK(x->first == -1 && x->count == 0);
        return;
    }
    FUZZ_CHECK(depth < JS_MAX_DEPTH);
    int k = 0;
    for (int c = js_first(d, i); c >= 0; c = js_next(d, c), k++) {
        FUZZ_CHECK(k < x->count);
        if (x->type == JS_OBJ) {
            const char *key = js_key(d, c);
            uint32_t kl = js_key_len(d, c);
            FUZZ_CHECK((size_t)d->nodes[c].key + kl < d->slen + 1 && key[kl] == 0);
            FUZZ_CHECK(fuzz_utf8_ok(key, kl));
            if (!memchr(key, 0, kl)) FUZZ_CHECK(js_get(d, i, key) == c);
            FUZZ_CHECK(js_at(d, i, k) == -1);
        } else {
            if (k < 64) FUZZ_CHECK(js_at(d, i, k) == c);
        }
        fz_walk(d, c, depth + 1, seen);
    }
    FUZZ_CHECK(k == x->count && js_count(d, i) == k);
    if (x->type == JS_ARR) {
        FUZZ_CHECK(js_at(d, i, x->count) == -1 && js_at(d, i, -1) == -1);
        FUZZ_CHECK(js_get(d, i, "") == -1);
    }
    /* keys distinct (pairwise for small objects; the parser sorts large ones) */
    if (x->type == JS_OBJ && x->count <= 32)
        for (int a = x->first; a >= 0; a = d->nodes[a].next)
            for (int b = d->nodes[a].next; b >= 0; b = d->nodes[b].next)
                FUZZ_CHECK(d->nodes[a].klen != d->nodes[b].klen || memcmp(js_key(d, a), js_key(d, b), d->nodes[a].klen));
}

/* Same tree: types, counts, keys, strings, numbers (bit-exact). */
static void fz_same(const js_doc *a, int i, const js_doc *b, int j) {
    const js_node *x = &a->nodes[i], *y = &b->nodes[j];
    FUZZ_CHECK(x->type == y->type && x->count == y->count);
    if (x->type == JS_STR) FUZZ_CHECK(x->slen == y->slen && !memcmp(js_str(a, i), js_str(b, j), x->slen));
    if (x->type == JS_NUM) {
        FUZZ_CHECK(!memcmp(&x->num, &y->num, sizeof x->num) || (x->num == 0 && y->num == 0));
        if (x->is_int) FUZZ_CHECK(y->is_int && x->ival == y->ival);
    }
    for (int c = x->first, e = y->first; c >= 0 || e >= 0; c = a->nodes[c].next, e = b->nodes[e].next) {
        FUZZ_CHECK(c >= 0 && e >= 0);
        if (x->type == JS_OBJ)
            FUZZ_CHECK(a->nodes[c].klen == b->nodes[e].klen && !memcmp(js_key(a, c), js_key(b, e), a->nodes[c].klen));
        fz_same(a, c, b, e);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[160];
    memset(err, 'x', sizeof err);
    js_doc *d = js_parse((const char *)data, size, err, sizeof err);
    js_doc *d2 = js_parse((const char *)data, size, NULL, 0);
    FUZZ_CHECK(!d == !d2);
    js_free(d2);
    if (!d) {
        FUZZ_CHECK(fuzz_terminated(err, sizeof err) && err[0]);
        const char *at = strstr(err, " at byte ");
        if (at) FUZZ_CHECK(strtoull(at + 9, NULL, 10) <= size);
        else FUZZ_CHECK(!strncmp(err, "out of memory", 13) || strstr(err, "too large"));
        return 0;
    }
    FUZZ_CHECK(err[0] == 0);
    FUZZ_CHECK(d->root >= 0 && d->root < d->n && d->n <= d->cap);
    unsigned char *seen = (unsigned char *)calloc((size_t)d->n, 1);
    FUZZ_CHECK(seen);
    fz_walk(d, d->root, 0, seen);
    for (int i = 0; i < d->n; i++) FUZZ_CHECK(seen[i]);
    free(seen);
    /* print back and parse again */
    fz_buf b = {0};
    fz_print(d, d->root, &b);
    js_doc *r = js_parse(b.s, b.n, err, sizeof err);
    if (!r) fprintf(stderr, "reprint refused: %s\n", err);
    FUZZ_CHECK(r);
    FUZZ_CHECK(r->n == d->n);
    fz_same(d, d->root, r, r->root);
    js_free(r);
    free(b.s);
    js_free(d);
    return 0;
}
