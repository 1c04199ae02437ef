/* json.h — a strict, bounded JSON reader for hostile files (config.json,
 * safetensors headers, tokenizer.json, ref.json).
 *
 * The whole text is parsed into a flat node array; strings are unescaped into
 * one buffer owned by the document. Limits: nesting depth JS_MAX_DEPTH,
 * document size < 2^31 bytes. Rejected: invalid UTF-8, lone surrogates,
 * trailing bytes other than whitespace, duplicate keys in one object, control
 * characters inside strings, leading zeros, non-finite numbers.
 *
 * Nodes are addressed by index (int); -1 means "absent". Children of an array
 * or object are linked first-child / next-sibling in document order. Object
 * members are the value nodes; their key is stored on the value node.
 * Prefix: js_. No globals, no exit, no getenv. */
#ifndef COLI_JSON_H
#define COLI_JSON_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"

#define JS_MAX_DEPTH 64

typedef enum { JS_NULL, JS_FALSE, JS_TRUE, JS_NUM, JS_STR, JS_ARR, JS_OBJ } js_type;

typedef struct {
    js_type type;
    int first, next;     /* first child, next sibling (-1 = none)                */
    int count;           /* children of an array/object                          */
    uint32_t key, klen;  /* key of an object member: offset/length in doc->str   */
    uint32_t s, slen;    /* string value: offset/length in doc->str              */
    double num;          /* every number                                         */
    int is_int;          /* integer literal (no '.', no exponent) that fits i64  */
    int64_t ival;
} js_node;

typedef struct {
    js_node *nodes;
    int n, cap;
    char *str;           /* unescaped strings, each NUL-terminated */
    size_t slen, scap;
    int root;
} js_doc;

typedef struct {
    const unsigned char *p, *end, *start;
    js_doc *d;
    char *err;
    size_t errlen;
} js_parser_;

static inline int js_fail_(js_parser_ *ps, const char *what) {
    if (ps->err && ps->errlen)
        snprintf(ps->err, ps->errlen, "%s at byte %zu", what, (size_t)(ps->p - ps->start));
    return -1;
}

static inline int js_new_node_(js_parser_ *ps, js_type t) {
    js_doc *d = ps->d;
    if (d->n == d->cap) {
        int nc = d->cap ? d->cap * 2 : 64;
        if (nc < d->cap || (size_t)nc > SIZE_MAX / sizeof(js_node)) return js_fail_(ps, "too many JSON values");
        js_node *nn = (js_node *)realloc(d->nodes, (size_t)nc * sizeof(js_node));
        if (!nn) return js_fail_(ps, "out of memory parsing JSON");
        d->nodes = nn;
        d->cap = nc;
    }
    js_node *x = &d->nodes[d->n];
    memset(x, 0, sizeof *x);
    x->type = t;
    x->first = x->next = -1;
    return d->n++;
}

static inline int js_put_bytes_(js_parser_ *ps, const void *src, size_t len) {
    js_doc *d = ps->d;
    if (d->slen + len + 1 > d->scap) {
        size_t nc = d->scap ? d->scap : 256;
        while (nc < d->slen + len + 1) nc *= 2;
        if (nc > 0x7fffffffu) return js_fail_(ps, "JSON strings too large");
        char *ns = (char *)realloc(d->str, nc);
        if (!ns) return js_fail_(ps, "out of memory parsing JSON");
        d->str = ns;
        d->scap = nc;
    }
    memcpy(d->str + d->slen, src, len);
    d->slen += len;
    return 0;
}

static inline void js_skip_ws_(js_parser_ *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static inline int js_hex4_(js_parser_ *ps, unsigned *out) {
    if (ps->end - ps->p < 4) return js_fail_(ps, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = ps->p[i], h;
        if (c >= '0' && c <= '9') h = c - '0';
        else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
        else return js_fail_(ps, "bad hex digit in \\u escape");
        v = v * 16 + h;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

/* Encodes code point cp (already validated) as UTF-8 into b; returns length. */
static inline int js_utf8_encode_(unsigned cp, unsigned char *b) {
    if (cp < 0x80) { b[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | (cp >> 6)); b[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12)); b[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        b[2] = (unsigned char)(0x80 | (cp & 63)); return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18)); b[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 63)); b[3] = (unsigned char)(0x80 | (cp & 63)); return 4;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid (overlong,
 * surrogate, > U+10FFFF, truncated). */
static inline int js_utf8_valid_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int n;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* Length of the valid UTF-8 prefix of s[0..n) (n: all of it is whole UTF-8);
 * ASCII runs checked eight bytes at a time. */
static inline size_t js_utf8_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            while (i + 8 <= n) {
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            while (i < n && s[i] < 0x80) i++;
            continue;
        }
        int l = js_utf8_valid_len(s + i, s + n);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

/* Parses a string at ps->p (which points at '"'); stores offset/length. */
static inline int js_string_(js_parser_ *ps, uint32_t *off, uint32_t *len) {
    ps->p++;
    size_t start = ps->d->slen;
    for (;;) {
        const unsigned char *run = ps->p;
        while (ps->p < ps->end && *ps->p != '"' && *ps->p != '\\' && *ps->p >= 0x20 && *ps->p < 0x80) ps->p++;
        if (ps->p > run && js_put_bytes_(ps, run, (size_t)(ps->p - run))) return -1;
        if (ps->p >= ps->end) return js_fail_(ps, "unterminated string");
        unsigned c = *ps->p;
        if (c == '"') { ps->p++; break; }
        if (c < 0x20) return js_fail_(ps, "control character in string");
        if (c >= 0x80) {
            int n = js_utf8_valid_len(ps->p, ps->end);
            if (!n) return js_fail_(ps, "invalid UTF-8 in string");
            if (js_put_bytes_(ps, ps->p, (size_t)n)) return -1;
            ps->p += n;
            continue;
        }
        /* backslash escape */
        ps->p++;
        if (ps->p >= ps->end) return js_fail_(ps, "unterminated escape");
        unsigned char e = *ps->p++, out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
            unsigned cp = 0, lo = 0;
            if (js_hex4_(ps, &cp)) return -1;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return js_fail_(ps, "lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') return js_fail_(ps, "lone high surrogate");
                ps->p += 2;
                if (js_hex4_(ps, &lo)) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return js_fail_(ps, "bad surrogate pair");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            unsigned char b[4];
            int n = js_utf8_encode_(cp, b);
            if (js_put_bytes_(ps, b, (size_t)n)) return -1;
            continue;
        }
        default: return js_fail_(ps, "bad escape in string");
        }
        if (js_put_bytes_(ps, &out, 1)) return -1;
    }
    size_t l = ps->d->slen - start;
    char nul = 0;
    if (js_put_bytes_(ps, &nul, 1)) return -1;
    *off = (uint32_t)start;
    *len = (uint32_t)l;
    return 0;
}

static inline int js_number_(js_parser_ *ps, int node) {
    const unsigned char *s = ps->p;
    int neg = 0, is_int = 1;
    if (ps->p < ps->end && *ps->p == '-') { neg = 1; ps->p++; }
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return js_fail_(ps, "bad number");
    if (*ps->p == '0' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9') return js_fail_(ps, "leading zero in number");
    uint64_t mag = 0;
    int ovf = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned dgt = (unsigned)(*ps->p - '0');
        if (mag > (UINT64_MAX - dgt) / 10) ovf = 1;
        else mag = mag * 10 + dgt;
        ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        is_int = 0;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return js_fail_(ps, "bad fraction");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        is_int = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return js_fail_(ps, "bad exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    char buf[64];
    size_t n = (size_t)(ps->p - s);
    double v;
    if (n < sizeof buf) {
        memcpy(buf, s, n);
        buf[n] = 0;
        v = strtod(buf, NULL);
    } else {
        char *tmp = (char *)malloc(n + 1);
        if (!tmp) return js_fail_(ps, "out of memory parsing JSON");
        memcpy(tmp, s, n);
        tmp[n] = 0;
        v = strtod(tmp, NULL);
        free(tmp);
    }
    if (!(v - v == 0)) return js_fail_(ps, "number out of range");
    js_node *x = &ps->d->nodes[node];
    x->num = v;
    if (is_int && !ovf && (neg ? mag <= (uint64_t)INT64_MAX + 1 : mag <= (uint64_t)INT64_MAX)) {
        x->is_int = 1;
        x->ival = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    return 0;
}

static inline int js_value_(js_parser_ *ps, int depth);

typedef struct { const char *p; uint32_t n; } js_keyref_;

static inline int js_keyref_cmp_(const void *a, const void *b) {
    const js_keyref_ *x = (const js_keyref_ *)a, *y = (const js_keyref_ *)b;
    int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Rejects a duplicate key among the members of object `obj`: pairwise for
 * small objects, sorted otherwise (tokenizer vocabularies have ~150k keys). */
static inline int js_check_dups_(js_parser_ *ps, int obj) {
    js_doc *d = ps->d;
    int cnt = d->nodes[obj].count;
    if (cnt < 2) return 0;
    js_keyref_ small[8], *ix = cnt <= 8 ? small : (js_keyref_ *)malloc((size_t)cnt * sizeof *ix);
    if (!ix) return js_fail_(ps, "out of memory parsing JSON");
    int k = 0;
    for (int a = d->nodes[obj].first; a >= 0; a = d->nodes[a].next) {
        ix[k].p = d->str + d->nodes[a].key;
        ix[k++].n = d->nodes[a].klen;
    }
    qsort(ix, (size_t)cnt, sizeof *ix, js_keyref_cmp_);
    int dup = 0;
    for (int i = 1; i < cnt && !dup; i++) dup = js_keyref_cmp_(&ix[i - 1], &ix[i]) == 0;
    if (ix != small) free(ix);
    return dup ? js_fail_(ps, "duplicate key in object") : 0;
}

static inline int js_container_(js_parser_ *ps, int depth, int is_obj) {
    if (depth >= JS_MAX_DEPTH) return js_fail_(ps, "JSON nested too deeply");
    int node = js_new_node_(ps, is_obj ? JS_OBJ : JS_ARR);
    if (node < 0) return -1;
    ps->p++;
    js_skip_ws_(ps);
    int last = -1;
    char close = is_obj ? '}' : ']';
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return node; }
    for (;;) {
        uint32_t koff = 0, klen = 0;
        if (is_obj) {
            js_skip_ws_(ps);
            if (ps->p >= ps->end || *ps->p != '"') return js_fail_(ps, "expected string key");
            if (js_string_(ps, &koff, &klen)) return -1;
            js_skip_ws_(ps);
            if (ps->p >= ps->end || *ps->p != ':') return js_fail_(ps, "expected ':'");
            ps->p++;
        }
        int v = js_value_(ps, depth + 1);
        if (v < 0) return -1;
        js_node *vn = &ps->d->nodes[v];
        vn->key = koff;
        vn->klen = klen;
        if (last < 0) ps->d->nodes[node].first = v;
        else ps->d->nodes[last].next = v;
        last = v;
        if (++ps->d->nodes[node].count < 0) return js_fail_(ps, "too many members");
        js_skip_ws_(ps);
        if (ps->p >= ps->end) return js_fail_(ps, is_obj ? "unterminated object" : "unterminated array");
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; break; }
        return js_fail_(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    if (is_obj && js_check_dups_(ps, node)) return -1;
    return node;
}

static inline int js_lit_(js_parser_ *ps, const char *lit, js_type t) {
    size_t n = strlen(lit);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n)) return js_fail_(ps, "invalid literal");
    ps->p += n;
    return js_new_node_(ps, t);
}

static inline int js_value_(js_parser_ *ps, int depth) {
    js_skip_ws_(ps);
    if (ps->p >= ps->end) return js_fail_(ps, "unexpected end of JSON");
    switch (*ps->p) {
    case '{': return js_container_(ps, depth, 1);
    case '[': return js_container_(ps, depth, 0);
    case '"': {
        uint32_t off, len;
        if (js_string_(ps, &off, &len)) return -1;
        int n = js_new_node_(ps, JS_STR);
        if (n < 0) return -1;
        ps->d->nodes[n].s = off;
        ps->d->nodes[n].slen = len;
        return n;
    }
    case 't': return js_lit_(ps, "true", JS_TRUE);
    case 'f': return js_lit_(ps, "false", JS_FALSE);
    case 'n': return js_lit_(ps, "null", JS_NULL);
    default: {
        int n = js_new_node_(ps, JS_NUM);
        if (n < 0) return -1;
        if (js_number_(ps, n)) return -1;
        return n;
    }
    }
}

static inline void js_free(js_doc *d) {
    if (!d) return;
    free(d->nodes);
    free(d->str);
    free(d);
}

/* Parses len bytes at buf. Returns a document (free with js_free) or NULL with
 * a message in err ("what at byte N"). */
static inline js_doc *js_parse(const char *buf, size_t len, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (len > 0x7fffffffu) {
        if (err && errlen) snprintf(err, errlen, "JSON text too large (%zu bytes)", len);
        return NULL;
    }
    js_doc *d = (js_doc *)calloc(1, sizeof *d);
    if (!d) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NULL;
    }
    js_parser_ ps = {(const unsigned char *)buf, (const unsigned char *)buf + len, (const unsigned char *)buf, d, err, errlen};
    d->root = js_value_(&ps, 0);
    if (d->root >= 0) {
        js_skip_ws_(&ps);
        if (ps.p != ps.end) d->root = js_fail_(&ps, "trailing bytes after JSON value");
    }
    if (d->root < 0) {
        js_free(d);
        return NULL;
    }
    return d;
}

/* ---- accessors (all tolerate i < 0 and return "absent") ---- */

static inline js_type js_typeof(const js_doc *d, int i) { return i < 0 ? JS_NULL : d->nodes[i].type; }
static inline int js_count(const js_doc *d, int i) { return i < 0 ? 0 : d->nodes[i].count; }
static inline int js_first(const js_doc *d, int i) { return i < 0 ? -1 : d->nodes[i].first; }
static inline int js_next(const js_doc *d, int i) { return i < 0 ? -1 : d->nodes[i].next; }
static inline const char *js_key(const js_doc *d, int i) { return d->str + d->nodes[i].key; }
static inline uint32_t js_key_len(const js_doc *d, int i) { return d->nodes[i].klen; }
/* String value (NUL-terminated; may contain NUL, see js_str_len) or NULL. */
static inline const char *js_str(const js_doc *d, int i) {
    return (i >= 0 && d->nodes[i].type == JS_STR) ? d->str + d->nodes[i].s : NULL;
}
static inline uint32_t js_str_len(const js_doc *d, int i) { return (i >= 0 && d->nodes[i].type == JS_STR) ? d->nodes[i].slen : 0; }

/* Member of object `obj` named `key`, or -1. Linear; fine for small objects. */
static inline int js_get(const js_doc *d, int obj, const char *key) {
    if (obj < 0 || d->nodes[obj].type != JS_OBJ) return -1;
    size_t kl = strlen(key);
    for (int c = d->nodes[obj].first; c >= 0; c = d->nodes[c].next)
        if (d->nodes[c].klen == kl && !memcmp(d->str + d->nodes[c].key, key, kl)) return c;
    return -1;
}

/* Element k of array `arr`, or -1. Linear in k. */
static inline int js_at(const js_doc *d, int arr, int k) {
    if (arr < 0 || d->nodes[arr].type != JS_ARR || k < 0) return -1;
    int c = d->nodes[arr].first;
    while (c >= 0 && k--) c = d->nodes[c].next;
    return c;
}

static inline int js_is_num(const js_doc *d, int i) { return i >= 0 && d->nodes[i].type == JS_NUM; }
static inline int js_is_int(const js_doc *d, int i) { return js_is_num(d, i) && d->nodes[i].is_int; }
static inline double js_num(const js_doc *d, int i) { return js_is_num(d, i) ? d->nodes[i].num : 0.0; }
static inline int64_t js_int(const js_doc *d, int i) { return js_is_int(d, i) ? d->nodes[i].ival : 0; }
static inline int js_is_bool(const js_doc *d, int i) { return i >= 0 && (d->nodes[i].type == JS_TRUE || d->nodes[i].type == JS_FALSE); }

/* Reads and parses the file at path (at most cap bytes), which must hold a
 * JSON object. Returns the document, or NULL with err as "path: why"
 * (errno is ENOENT when the file does not exist, else 0 for content errors). */
static inline js_doc *js_load_object(const char *path, size_t cap, char *err, size_t errlen) {
    size_t len;
    char jerr[160];
    char *buf = compat_read_file(path, cap, &len);
    if (!buf) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, e == EFBIG ? "file too large" : compat_strerror(e));
        errno = e;
        return NULL;
    }
    js_doc *d = js_parse(buf, len, jerr, sizeof jerr);
    free(buf);
    errno = 0;
    if (!d) snprintf(err, errlen, strncmp(jerr, "out of memory", 13) ? "%s: not valid JSON: %s" : "%s: %s", path, jerr);
    else if (js_typeof(d, d->root) != JS_OBJ) {
        snprintf(err, errlen, "%s: not a JSON object", path);
        js_free(d);
        d = NULL;
    }
    return d;
}

/* ---------------------------------------------------------------- writing */

/* A JSON writer into a growing buffer that cannot emit invalid JSON: every
 * string is escaped, and bytes that are not valid UTF-8 become U+FFFD, so
 * text cut mid-character (a streamed token) never breaks the document.
 * Commas between members are the caller's (jw_sep). On out of memory the
 * buffer is marked failed and stays valid; check jw.oom at the end. */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} jw;

static inline void jw_free(jw *w) {
    free(w->s);
    memset(w, 0, sizeof *w);
}

static inline void jw_raw(jw *w, const char *p, size_t n) {
    if (w->oom) return;
    if (w->n + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + n + 1) cap *= 2;
        char *ns = (char *)realloc(w->s, cap);
        if (!ns) { w->oom = 1; return; }
        w->s = ns, w->cap = cap;
    }
    memcpy(w->s + w->n, p, n);
    w->n += n;
    w->s[w->n] = 0;
}

static inline void jw_lit(jw *w, const char *p) { jw_raw(w, p, strlen(p)); }

/* The JSON string of n bytes at p (quotes included). */
static inline void jw_strn(jw *w, const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p, *end = u + n;
    jw_raw(w, "\"", 1);
    while (u < end) {
        const unsigned char *run = u;
        while (u < end && *u >= 0x20 && *u < 0x80 && *u != '"' && *u != '\\') u++;
        jw_raw(w, (const char *)run, (size_t)(u - run));
        if (u >= end) break;
        char esc[8];
        if (*u == '"' || *u == '\\') esc[0] = '\\', esc[1] = (char)*u, jw_raw(w, esc, 2), u++;
        else if (*u < 0x20) {
            const char *named = *u == '\n' ? "\\n" : *u == '\r' ? "\\r" : *u == '\t' ? "\\t" : *u == '\b' ? "\\b" : *u == '\f' ? "\\f" : NULL;
            if (named) jw_raw(w, named, 2);
            else snprintf(esc, sizeof esc, "\\u%04x", *u), jw_raw(w, esc, 6);
            u++;
        } else {
            int k = js_utf8_valid_len(u, end);
            if (k) jw_raw(w, (const char *)u, (size_t)k), u += k;
            else jw_raw(w, "\xEF\xBF\xBD", 3), u++;
        }
    }
    jw_raw(w, "\"", 1);
}

static inline void jw_str(jw *w, const char *p) { jw_strn(w, p ? p : "", p ? strlen(p) : 0); }

/* "key": (the separator before it is the caller's). */
static inline void jw_key(jw *w, const char *k) {
    jw_str(w, k);
    jw_raw(w, ":", 1);
}

static inline void jw_int(jw *w, long long v) {
    char b[32];
    jw_raw(w, b, (size_t)snprintf(b, sizeof b, "%lld", v));
}

/* A finite number as the shortest round-trip decimal; non-finite as null
 * (JSON has no spelling for them). */
static inline void jw_num(jw *w, double v) {
    char b[40];
    if (!isfinite(v)) { jw_lit(w, "null"); return; }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    jw_lit(w, b);
}

/* Node i of d written back: compact (",", ":"), or spaced as Python's
 * json.dumps writes by default (", ", ": ") when py != 0; non-ASCII text
 * is kept as UTF-8 (ensure_ascii=False). Integers keep their digits. */
static inline void jw_node(jw *w, const js_doc *d, int i, int py) {
    switch (js_typeof(d, i)) {
    case JS_NULL: jw_lit(w, "null"); break;
    case JS_TRUE: jw_lit(w, "true"); break;
    case JS_FALSE: jw_lit(w, "false"); break;
    case JS_NUM:
        if (d->nodes[i].is_int) jw_int(w, (long long)d->nodes[i].ival);
        else jw_num(w, d->nodes[i].num);
        break;
    case JS_STR: jw_strn(w, js_str(d, i), js_str_len(d, i)); break;
    case JS_ARR:
    case JS_OBJ: {
        int obj = js_typeof(d, i) == JS_OBJ;
        jw_raw(w, obj ? "{" : "[", 1);
        for (int k = js_first(d, i), first = 1; k >= 0; k = js_next(d, k), first = 0) {
            if (!first) jw_lit(w, py ? ", " : ",");
            if (obj) jw_strn(w, js_key(d, k), js_key_len(d, k)), jw_lit(w, py ? ": " : ":");
            jw_node(w, d, k, py);
        }
        jw_raw(w, obj ? "}" : "]", 1);
        break;
    }
    }
}

#endif
