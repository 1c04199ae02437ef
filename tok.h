/* tok.h — GLM-5 and DeepSeek-V3 tokenizers: byte-level BPE read from a
 * Hugging Face tokenizer.json, id-exact against tokenizers 0.23.3
 * (tests/test_tok.c); and Kimi K2's (K2.5's) tiktoken.model with
 * tokenizer_config.json, id-exact against tiktoken 0.14 as the model's
 * tokenization_kimi.py drives it (tok_load_tiktoken, tok_load_dir; its
 * split is tok_pretok_kimi_).
 *
 * The pipelines accepted (anything else is refused at load, by field):
 *   added tokens   cut out first, leftmost-longest, in tokenizers' two passes:
 *                  normalized=false tokens over the whole text, then
 *                  normalized=true tokens inside the gaps; lstrip/rstrip
 *                  honoured; single_word refused
 *   normalizer     none (null, or an empty Sequence)
 *   pre-tokenizer  Split with the GLM-4/GLM-5 regex (hand-coded below,
 *                  tok_pretok_next), or DeepSeek-V3's three Splits (digits
 *                  by threes, CJK runs, then its regex; tok_pretok_ds_),
 *                  then ByteLevel without its own regex
 *   model          BPE over GPT-2's byte alphabet: lowest merge rank first,
 *                  leftmost on ties (a scan for short pre-tokens, a heap for
 *                  long ones); ignore_merges honoured
 *   decoder        ByteLevel: alphabet back to bytes, then lossy UTF-8
 * Input that is not valid UTF-8 is first repaired like Python's
 * bytes.decode("utf-8", "replace") (U+FFFD per maximal invalid subpart),
 * since that is the text a tokenizers user would pass.
 * tok_encode(text) == tokenizer.encode(text, add_special_tokens=False).ids;
 * the post_processor only adds template tokens and offsets, so it is ignored.
 *
 * A tok is immutable after load and may be shared between threads; each
 * caller owns its tok_ids (ids + reusable scratch) and tok_str buffers.
 * Prefix tok_. No globals, no exit, no getenv; errors name file and field. */
#ifndef COLI_TOK_H
#define COLI_TOK_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "json.h"
#include "tok_unicode.h"

#define TOK_MAX_FILE ((size_t)1 << 30) /* tokenizer.json bytes (GLM-5's: ~20 MB)           */
#define TOK_MAX_IDS (1 << 22)          /* model vocab + added tokens (GLM-5: ~154,856)     */
#define TOK_MAX_MERGES (1 << 22)       /* GLM-5: 321,649                                   */
#define TOK_MAX_PIECE 65536            /* bytes of one vocab key or added token            */
#define TOK_MAX_TEXT ((size_t)1 << 30) /* bytes of one tok_encode input                    */
#define TOK_BPE_SHORT 16               /* pre-tokens up to this many bytes skip the heap   */

/* The split regex accepted in pre_tokenizer (GLM-4, GLM-4.5, GLM-5). */
#define TOK_GLM_REGEX                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}" \
    "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* DeepSeek-V3's (and R1's, V3.1's) three Split regexes, in order. */
#define TOK_DS_REGEX_DIGITS "\\p{N}{1,3}"
#define TOK_DS_REGEX_CJK "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
#define TOK_DS_REGEX                                                                                          \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|" \
    "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

/* Kimi K2's (and K2.5's) split pattern: tokenization_kimi.py's pat_str, run by
 * tiktoken; the alternatives are joined by '|' there. */
#define TOK_KIMI_REGEX                                                                                  \
    "[\\p{Han}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"                 \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?"       \
    "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"        \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

enum { TOK_PRE_GLM, TOK_PRE_DEEPSEEK3, TOK_PRE_KIMI };

enum { TOK_F_ADDED = 1, TOK_F_SPECIAL = 2 };

typedef struct { uint64_t key; uint32_t rank, id; } tok_merge_;   /* key = a << 32 | b */
typedef struct { int id, lstrip, rstrip; uint32_t off, len; } tok_added_;

/* Byte trie over added-token contents. Node k: byte[k], first child
 * child[k], next sibling sib[k], term[k] = added index ending here or -1. */
typedef struct {
    int root[256];
    int *child, *sib, *term;
    unsigned char *byte;
    int n, cap;
} tok_trie_;

typedef struct tok {
    char name[256];           /* file name for messages                           */
    int n_vocab, n_ids;       /* model ids are 0..n_vocab-1, added ones up to n_ids */
    uint32_t *off, *len;      /* [n_ids] decoded bytes of each id in bytes          */
    uint8_t *flags;           /* [n_ids] TOK_F_*                                    */
    char *bytes;              /* decoded bytes of every id, added-token contents    */
    size_t nbytes, bytes_cap;
    uint32_t *vmap;           /* [vmask+1] id+1 of vocab keys by their byte form    */
    uint32_t vmask;
    uint32_t *umap;           /* [umask+1] id+1 of keys outside the byte alphabet   */
    uint32_t umask;
    uint8_t *mapped;          /* [n_vocab] key is made of byte-alphabet chars       */
    tok_merge_ *merges;       /* [mmask+1] open addressing; rank UINT32_MAX = empty */
    uint32_t mmask;
    int byte_id[256];         /* id of the one-byte token                           */
    int ignore_merges;
    int pre;                  /* TOK_PRE_*: the pre-tokenizer                       */
    tok_added_ *added;        /* [n_added]                                          */
    int n_added;
    tok_trie_ trie[2];        /* [0] normalized=false tokens, [1] normalized=true   */
} tok;

typedef struct { int id, prev, next; } tok_sym_;

/* Encode output plus scratch reused across calls. Zero-initialise; free with
 * tok_ids_free. tok_encode appends to ids[0..n); set n = 0 to reuse. */
typedef struct {
    int *ids;
    size_t n, cap;
    unsigned char *fix;       /* input with invalid UTF-8 replaced */
    size_t fix_cap;
    tok_sym_ *sym;            /* BPE symbols of one pre-token      */
    size_t sym_cap;
    uint64_t *heap;           /* BPE merge candidates: rank << 32 | position */
    size_t heap_cap;
} tok_ids;

/* Growable byte string, NUL-terminated after the first append. Zero-initialise. */
typedef struct { char *s; size_t n, cap; } tok_str;

/* Streaming decode state: bytes of an incomplete UTF-8 character. Zero-initialise. */
typedef struct { unsigned char b[4]; int n, need; unsigned char lo, hi; } tok_stream;

/* ------------------------------------------------------------ small helpers */

__attribute__((format(printf, 3, 4))) static inline void tok_errf_(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Printable excerpt of n bytes of a hostile string (at most ~40 shown). */
static inline const char *tok_quote_(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 40) { o += (size_t)snprintf(buf + o, cap - o, "..."); break; }
        if (c >= 0x20 && c != 0x7f && c != '"' && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}

/* Grows *p (elements of esz bytes) to hold need; returns 0 or -1. */
static inline int tok_grow_(void **p, size_t *cap, size_t need, size_t esz) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / esz) return -1;
        nc *= 2;
    }
    void *q = realloc(*p, nc * esz);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static inline int tok_str_put(tok_str *o, const void *b, size_t n) {
    if (n > SIZE_MAX - o->n - 1 || tok_grow_((void **)&o->s, &o->cap, o->n + n + 1, 1)) return -1;
    memcpy(o->s + o->n, b, n);
    o->n += n;
    o->s[o->n] = 0;
    return 0;
}

static inline void tok_str_free(tok_str *o) {
    free(o->s);
    memset(o, 0, sizeof *o);
}

static inline void tok_ids_free(tok_ids *x) {
    free(x->ids);
    free(x->fix);
    free(x->sym);
    free(x->heap);
    memset(x, 0, sizeof *x);
}

static inline uint64_t tok_hash_(const void *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static inline uint32_t tok_mix_(uint64_t k) {
    k *= 0x9e3779b97f4a7c15ull;
    return (uint32_t)(k >> 32) ^ (uint32_t)k;
}

/* ------------------------------------------------------------ UTF-8 */

/* GPT-2 byte alphabet: byte b is code point b for printable Latin-1
 * (33..126, 161..172, 174..255), else 256 + its rank among the others. */
static inline uint32_t tok_byte_cp_(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) n++;
    return 256u + (uint32_t)n;
}

/* Byte for an alphabet code point, or -1 (alphabet code points are < 324). */
static inline int tok_cp_byte_(uint32_t cp) {
    if (cp < 256) return ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174) ? (int)cp : -1;
    if (cp >= 324) return -1;
    int n = (int)(cp - 256);
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) && n-- == 0) return b;
    return -1;
}

/* Decodes the character at s (valid UTF-8 of at least *len bytes assumed);
 * returns its code point and stores its length. */
static inline uint32_t tok_dec_(const unsigned char *s, int *len) {
    unsigned c = s[0];
    if (c < 0x80) { *len = 1; return c; }
    if (c < 0xE0) { *len = 2; return (c & 0x1Fu) << 6 | (s[1] & 0x3Fu); }
    if (c < 0xF0) { *len = 3; return (c & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu); }
    *len = 4;
    return (c & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
}

/* One byte into the incremental decoder st. Writes to out (≥ 8 bytes) the
 * complete characters it finishes, and U+FFFD for each maximal invalid
 * subpart (the rule of CPython's "replace" and Rust's from_utf8_lossy).
 * Returns the number of bytes written. */
static inline int tok_u8_feed_(tok_stream *st, unsigned char c, unsigned char *out) {
    int o = 0;
    if (st->n) {
        if (c >= st->lo && c <= st->hi) {
            st->b[st->n++] = c;
            st->lo = 0x80;
            st->hi = 0xBF;
            if (--st->need) return 0;
            memcpy(out, st->b, (size_t)st->n);
            o = st->n;
            st->n = 0;
            return o;
        }
        memcpy(out, "\xEF\xBF\xBD", 3);
        o = 3;
        st->n = 0;
    }
    if (c < 0x80) { out[o] = c; return o + 1; }
    st->lo = 0x80;
    st->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) st->need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        st->need = 2;
        if (c == 0xE0) st->lo = 0xA0;
        if (c == 0xED) st->hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        st->need = 3;
        if (c == 0xF0) st->lo = 0x90;
        if (c == 0xF4) st->hi = 0x8F;
    } else {
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        return o + 3;
    }
    st->b[0] = c;
    st->n = 1;
    return o;
}

/* Copies s[0..n) to out replacing invalid UTF-8 like Python's
 * bytes.decode("utf-8", "replace"); out needs 3 * n bytes. Returns the length. */
static inline size_t tok_utf8_fix(const char *s, size_t n, char *out) {
    tok_stream st = {{0}, 0, 0, 0, 0};
    size_t o = 0;
    unsigned char tmp[8];
    for (size_t i = 0; i < n; i++) {
        int k = tok_u8_feed_(&st, (unsigned char)s[i], tmp);
        memcpy(out + o, tmp, (size_t)k);
        o += (size_t)k;
    }
    if (st.n) {
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
    }
    return o;
}

/* ------------------------------------------------------------ pre-tokenizer */

typedef struct { uint32_t cp; int len, cls; } tok_ch_;

static inline tok_ch_ tok_ch_at_(const unsigned char *s) {
    tok_ch_ c;
    if (s[0] < 0x80) {
        c.cp = s[0];
        c.len = 1;
        c.cls = tok_uni_latin1[s[0]];
        return c;
    }
    c.cp = tok_dec_(s, &c.len);
    c.cls = c.cp < 256 ? tok_uni_latin1[c.cp] : tok_uni_class(c.cp);
    return c;
}

/* End of the run of class cls starting at i. */
static inline size_t tok_run_(const unsigned char *s, size_t i, size_t n, int cls) {
    while (i < n) {
        if (s[i] < 0x80) {
            if (tok_uni_latin1[s[i]] != cls) break;
            i++;
            continue;
        }
        tok_ch_ c = tok_ch_at_(s + i);
        if (c.cls != cls) break;
        i += (size_t)c.len;
    }
    return i;
}

static inline int tok_lower_(unsigned char c) {
    return (c < 0x80 && (unsigned)((c | 0x20) - 'a') < 26) ? (c | 0x20) : 0;
}

/* End of \p{N}{1,3} after a digit that ends at j: up to two more digits. */
static inline size_t tok_digits3_(const unsigned char *s, size_t j, size_t n) {
    for (int k = 1; k < 3 && j < n; k++) {
        tok_ch_ d = tok_ch_at_(s + j);
        if (d.cls != TOK_UNI_N) break;
        j += (size_t)d.len;
    }
    return j;
}

/* The whitespace alternatives \s*[\r\n]+ | \s+(?!\S) | \s+ at i (< n, a
 * whitespace character), s[0..n) being the whole string: through the run's
 * last CR/LF; else the run, less its last character unless the run ends
 * the string or is one character long. */
static inline size_t tok_ws_alts_(const unsigned char *s, size_t i, size_t n) {
    size_t e = i, last = i, nl = 0;
    int has_nl = 0;
    while (e < n) {
        tok_ch_ d = tok_ch_at_(s + e);
        if (d.cls != TOK_UNI_S) break;
        if (d.cp == '\r' || d.cp == '\n') { nl = e; has_nl = 1; }
        last = e;
        e += (size_t)d.len;
    }
    if (has_nl) return nl + 1;
    if (e == n || last == i) return e;
    return last;
}

/* End of the pre-token that starts at i (< n) of the valid UTF-8 text
 * s[0..n): the match of TOK_GLM_REGEX at i with Oniguruma's leftmost-first
 * alternation. The regex matches at every position, so pre-tokens tile the
 * text. Alternatives in order:
 *   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)   ('ſ U+017F folds to 's' and counts)
 *   2 [^\r\n\p{L}\p{N}]?\p{L}+       3 \p{N}{1,3}
 *   4 ' '?[^\s\p{L}\p{N}]+[\r\n]*   5 \s*[\r\n]+ (ends after the run's last newline)
 *   6 \s+(?!\S) (the run, less its last char unless at the end)   7 \s+ */
static inline size_t tok_pretok_next(const char *text, size_t i, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    tok_ch_ c = tok_ch_at_(s + i);
    size_t j = i + (size_t)c.len;
    if (c.cp == '\'' && j < n) {
        int a = tok_lower_(s[j]);
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return j + 1;
        if (s[j] == 0xC5 && j + 1 < n && s[j + 1] == 0xBF) return j + 2;
        if (j + 1 < n) {
            int b = tok_lower_(s[j + 1]);
            if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return j + 2;
        }
    }
    if (c.cls == TOK_UNI_L) return tok_run_(s, j, n, TOK_UNI_L);
    if (c.cls != TOK_UNI_N && c.cp != '\r' && c.cp != '\n' && j < n && tok_ch_at_(s + j).cls == TOK_UNI_L)
        return tok_run_(s, j, n, TOK_UNI_L);
    if (c.cls == TOK_UNI_N) return tok_digits3_(s, j, n);
    if (c.cls == TOK_UNI_OTHER || (c.cp == ' ' && j < n && tok_ch_at_(s + j).cls == TOK_UNI_OTHER)) {
        size_t k = tok_run_(s, c.cls == TOK_UNI_OTHER ? i : j, n, TOK_UNI_OTHER);
        while (k < n && (s[k] == '\r' || s[k] == '\n')) k++;
        return k;
    }
    return tok_ws_alts_(s, i, n); /* whitespace: alternatives 5, 6, 7 */
}

/* ---------------------------------------------- DeepSeek-V3 pre-tokenizer
 *
 * tokenizers applies the Sequence's Splits one after another, each to every
 * piece the previous one left (matches and the text between them alike,
 * behavior Isolated): \p{N}{1,3} cuts digit runs into threes, the CJK
 * class then isolates runs of U+4E00..9FA5, U+3040..30FF, and the last
 * regex splits every piece again — a CJK run too (U+30A0 and U+30FB are
 * punctuation); a digit piece never matches it and stays whole. The last
 * regex sees one piece at a time, so its end is the end of the string for
 * (?!\S). */

/* Where the current pieces end: g1, the digit-free span; g2, the CJK run
 * or the span without CJK inside it (0: not known yet). Zero it for each
 * text. */
typedef struct { size_t g1, g2; } tok_pre_st;

static inline int tok_ds_cjk_(uint32_t cp) { return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF); }

/* Second class (TOK_UNI2_*) of a character whose first class is c.cls. */
static inline int tok_ds_cls2_(tok_ch_ c) {
    if (c.cls != TOK_UNI_OTHER) return TOK_UNI2_NONE;
    return c.cp < 256 ? tok_uni2_latin1[c.cp] : tok_uni2_class(c.cp);
}

static inline int tok_ds_lm_(tok_ch_ c) { return c.cls == TOK_UNI_L || tok_ds_cls2_(c) == TOK_UNI2_M; }
static inline int tok_ds_ps_(tok_ch_ c) {
    int k = tok_ds_cls2_(c);
    return k == TOK_UNI2_P || k == TOK_UNI2_SYM;
}
static inline int tok_ds_alpha_(unsigned char b) { return (unsigned)((b | 0x20) - 'a') < 26; }

/* End of the run of characters with property f starting at i (< end). */
static inline size_t tok_ds_run_(const unsigned char *s, size_t i, size_t end, int (*f)(tok_ch_)) {
    while (i < end) {
        tok_ch_ c = tok_ch_at_(s + i);
        if (!f(c)) break;
        i += (size_t)c.len;
    }
    return i;
}

/* End of TOK_DS_REGEX's match at i within s[0..end), or 0 when none starts
 * there. Alternatives in order (Oniguruma, leftmost-first):
 *   1 ASCII punctuation then ASCII letters
 *   2 [^\r\n\p{L}\p{P}\p{S}]? [\p{L}\p{M}]+
 *   3 ' '? [\p{P}\p{S}]+ [\r\n]*
 *   4 \s*[\r\n]+   5 \s+(?!\S)   6 \s+   (as in the GLM regex) */
static inline size_t tok_ds_match_(const unsigned char *s, size_t i, size_t end) {
    tok_ch_ c = tok_ch_at_(s + i);
    size_t j = i + (size_t)c.len;
    int more = j < end;
    tok_ch_ d = more ? tok_ch_at_(s + j) : c;
    if (c.cp < 128 && c.cp > 32 && c.cp != 127 && !tok_ds_alpha_((unsigned char)c.cp) && !(c.cp >= '0' && c.cp <= '9') && more &&
        d.cp < 128 && tok_ds_alpha_((unsigned char)d.cp)) {
        while (j < end && tok_ds_alpha_(s[j])) j++;
        return j;
    }
    int cr = c.cp == '\r' || c.cp == '\n';
    if (!cr && c.cls != TOK_UNI_L && !tok_ds_ps_(c) && more && tok_ds_lm_(d)) return tok_ds_run_(s, j, end, tok_ds_lm_);
    if (tok_ds_lm_(c)) return tok_ds_run_(s, i, end, tok_ds_lm_);
    if ((c.cp == ' ' && more && tok_ds_ps_(d)) || tok_ds_ps_(c)) {
        size_t k = tok_ds_run_(s, tok_ds_ps_(c) ? i : j, end, tok_ds_ps_);
        while (k < end && (s[k] == '\r' || s[k] == '\n')) k++;
        return k;
    }
    return c.cls == TOK_UNI_S ? tok_ws_alts_(s, i, end) : 0;
}

/* End of the DeepSeek-V3 pre-token that starts at i (< n). */
static inline size_t tok_pretok_ds_(const char *text, size_t i, size_t n, tok_pre_st *st) {
    const unsigned char *s = (const unsigned char *)text;
    tok_ch_ c = tok_ch_at_(s + i);
    size_t j = i + (size_t)c.len;
    if (c.cls == TOK_UNI_N) return tok_digits3_(s, j, n);
    if (st->g1 <= i) { /* the digit-free span from i */
        size_t e = i;
        while (e < n) {
            tok_ch_ d = tok_ch_at_(s + e);
            if (d.cls == TOK_UNI_N) break;
            e += (size_t)d.len;
        }
        st->g1 = e, st->g2 = 0;
    }
    if (st->g2 <= i) { /* the CJK run, or the span without CJK, from i inside the digit-free span */
        int cjk = tok_ds_cjk_(c.cp);
        size_t e = j;
        while (e < st->g1) {
            tok_ch_ d = tok_ch_at_(s + e);
            if (tok_ds_cjk_(d.cp) != cjk) break;
            e += (size_t)d.len;
        }
        st->g2 = e;
    }
    size_t e = tok_ds_match_(s, i, st->g2);
    if (e) return e;
    for (size_t q = j; q < st->g2; q += (size_t)tok_ch_at_(s + q).len) /* text no match starts in: one piece */
        if (tok_ds_match_(s, q, st->g2)) return q;
    return st->g2;
}

/* ---------------------------------------------- Kimi K2 pre-tokenizer
 *
 * TOK_KIMI_REGEX, as tiktoken runs it (fancy-regex: backtracking,
 * leftmost-first alternation). With U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
 * W = [\p{Ll}\p{Lm}\p{Lo}\p{M}], both less \p{Han}, P = [^\r\n\p{L}\p{N}]
 * and C = (?i:'s|'t|'re|'ve|'m|'ll|'d), the alternatives are
 *   1 [\p{Han}]+   2 P? U* W+ C?   3 P? U+ W* C?   4 \p{N}{1,3}
 *   5 ' '?[^\s\p{L}\p{N}]+[\r\n]*   6 \s*[\r\n]+   7 \s+(?!\S)   8 \s+
 * Every character starts a match, so the pieces tile the text. */

typedef struct { int han, u, w; } tok_kimi_ch_;

/* Kimi's view of c: Han script, in U, in W. */
static inline tok_kimi_ch_ tok_kimi_of_(tok_ch_ c) {
    tok_kimi_ch_ k = {0, 0, 0};
    if (c.cp >= 0x2e80 && (k.han = tok_uni_han(c.cp))) return k;
    if (c.cls == TOK_UNI_L) {
        int kind = c.cp < 256 ? tok_uni3_latin1[c.cp] : tok_uni3_class(c.cp);
        k.u = kind != TOK_UNI3_LOWER;
        k.w = kind != TOK_UNI3_UPPER;
    } else if (c.cls == TOK_UNI_OTHER && tok_ds_cls2_(c) == TOK_UNI2_M) {
        k.u = k.w = 1;
    }
    return k;
}

/* End of the run of W characters from q (q <= n). */
static inline size_t tok_kimi_wrun_(const unsigned char *s, size_t q, size_t n) {
    while (q < n) {
        tok_ch_ c = tok_ch_at_(s + q);
        if (!tok_kimi_of_(c).w) break;
        q += (size_t)c.len;
    }
    return q;
}

/* End of U* W+ (upper = 0) or U+ W* (upper = 1) at q, or 0 when it does not
 * match. The greedy U* gives characters back until W+ can start: at the
 * first non-U character if that is in W (then W+ runs on), else at the last
 * character of the U run that is also in W (then W+ is that one character,
 * the next being outside W). */
static inline size_t tok_kimi_word_(const unsigned char *s, size_t q, size_t n, int upper) {
    size_t e = q, last_w = 0;
    while (e < n) {
        tok_ch_ c = tok_ch_at_(s + e);
        tok_kimi_ch_ k = tok_kimi_of_(c);
        if (!k.u) break;
        e += (size_t)c.len;
        if (k.w) last_w = e;
    }
    if (upper) return e > q ? tok_kimi_wrun_(s, e, n) : 0;
    if (e < n && tok_kimi_of_(tok_ch_at_(s + e)).w) return tok_kimi_wrun_(s, e, n);
    return last_w;
}

/* End of the optional contraction C at e ('ſ U+017F folds to 's'). */
static inline size_t tok_kimi_contraction_(const unsigned char *s, size_t e, size_t n) {
    if (e + 1 >= n || s[e] != '\'') return e;
    int a = tok_lower_(s[e + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return e + 2;
    if (s[e + 1] == 0xC5 && e + 2 < n && s[e + 2] == 0xBF) return e + 3;
    if (e + 2 < n) {
        int b = tok_lower_(s[e + 2]);
        if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return e + 3;
    }
    return e;
}

/* End of the Kimi K2 pre-token that starts at i (< n). */
static inline size_t tok_pretok_kimi_(const char *text, size_t i, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    tok_ch_ c = tok_ch_at_(s + i);
    size_t j = i + (size_t)c.len;
    if (tok_kimi_of_(c).han) {
        while (j < n) {
            tok_ch_ d = tok_ch_at_(s + j);
            if (d.cp < 0x2e80 || !tok_uni_han(d.cp)) break;
            j += (size_t)d.len;
        }
        return j;
    }
    int p = c.cls != TOK_UNI_L && c.cls != TOK_UNI_N && c.cp != '\r' && c.cp != '\n';
    for (int upper = 0; upper < 2; upper++) { /* alternatives 2 and 3, each with P first */
        size_t e = p ? tok_kimi_word_(s, j, n, upper) : 0;
        if (!e) e = tok_kimi_word_(s, i, n, upper);
        if (e) return tok_kimi_contraction_(s, e, n);
    }
    if (c.cls == TOK_UNI_N) return tok_digits3_(s, j, n);
    if (c.cls == TOK_UNI_OTHER || (c.cp == ' ' && j < n && tok_ch_at_(s + j).cls == TOK_UNI_OTHER)) {
        size_t k = tok_run_(s, c.cls == TOK_UNI_OTHER ? i : j, n, TOK_UNI_OTHER);
        while (k < n && (s[k] == '\r' || s[k] == '\n')) k++;
        return k;
    }
    return tok_ws_alts_(s, i, n); /* whitespace: alternatives 6, 7, 8 */
}

/* End of the pre-token of t's pre-tokenizer that starts at i (< n) of the
 * valid UTF-8 text[0..n); st zeroed before the first call on a text. */
static inline size_t tok_pretok(const tok *t, const char *text, size_t i, size_t n, tok_pre_st *st) {
    if (t->pre == TOK_PRE_KIMI) return tok_pretok_kimi_(text, i, n);
    return t->pre == TOK_PRE_DEEPSEEK3 ? tok_pretok_ds_(text, i, n, st) : tok_pretok_next(text, i, n);
}

/* ------------------------------------------------------------ lookups */

/* Id of the vocabulary key whose byte-alphabet form is p[0..n), or -1. */
static inline int tok_vocab_bytes_(const tok *t, const void *p, size_t n) {
    for (uint32_t h = (uint32_t)tok_hash_(p, n) & t->vmask;; h = (h + 1) & t->vmask) {
        uint32_t v = t->vmap[h];
        if (!v) return -1;
        int id = (int)v - 1;
        if (t->len[id] == n && !memcmp(t->bytes + t->off[id], p, n)) return id;
    }
}

/* Id of a key that is not made of byte-alphabet chars (raw bytes p[0..n)), or -1. */
static inline int tok_vocab_raw_(const tok *t, const void *p, size_t n) {
    for (uint32_t h = (uint32_t)tok_hash_(p, n) & t->umask;; h = (h + 1) & t->umask) {
        uint32_t v = t->umap[h];
        if (!v) return -1;
        int id = (int)v - 1;
        if (t->len[id] == n && !memcmp(t->bytes + t->off[id], p, n)) return id;
    }
}

/* Byte-alphabet form of UTF-8 string s[0..n) into out (≥ n bytes); returns
 * its length, or -1 when s has a char outside the alphabet. */
static inline long tok_to_bytes_(const char *s, size_t n, unsigned char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int l = js_utf8_valid_len(u + i, u + n);
        if (!l) return -1;
        int tmp;
        int b = tok_cp_byte_(tok_dec_(u + i, &tmp));
        if (b < 0) return -1;
        out[o++] = (unsigned char)b;
        i += (size_t)l;
    }
    return (long)o;
}

/* Model-vocabulary id of key s[0..n) (as written in tokenizer.json), or -1. */
static inline int tok_vocab_key_(const tok *t, const char *s, size_t n) {
    unsigned char small[256], *buf = n <= sizeof small ? small : (unsigned char *)malloc(n ? n : 1);
    if (!buf) return -1;
    long m = tok_to_bytes_(s, n, buf);
    int id = m >= 0 ? tok_vocab_bytes_(t, buf, (size_t)m) : tok_vocab_raw_(t, s, n);
    if (buf != small) free(buf);
    return id;
}

static inline const tok_merge_ *tok_merge_get_(const tok *t, int a, int b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t h = tok_mix_(key) & t->mmask;; h = (h + 1) & t->mmask) {
        const tok_merge_ *m = &t->merges[h];
        if (m->rank == UINT32_MAX) return NULL;
        if (m->key == key) return m;
    }
}

/* ------------------------------------------------------------ public queries */

/* One past the largest id (model vocabulary + added tokens). */
static inline int tok_n_ids(const tok *t) { return t->n_ids; }

/* Id whose content is the NUL-terminated string (added tokens first, then
 * the model vocabulary, as tokenizers' token_to_id), or -1. */
static inline int tok_find(const tok *t, const char *content) {
    size_t n = strlen(content);
    for (int i = 0; i < t->n_added; i++) {
        const tok_added_ *a = &t->added[i];
        if (a->len == n && !memcmp(t->bytes + a->off, content, n)) return a->id;
    }
    return tok_vocab_key_(t, content, n);
}

/* 1 if id is an added token marked special, else 0. */
static inline int tok_is_special(const tok *t, int id) {
    return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_F_SPECIAL);
}

/* The bytes id decodes to (not NUL-terminated; may be a partial UTF-8
 * character) and their count in *len, or NULL for an unknown id. */
static inline const char *tok_piece(const tok *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_ids) return NULL;
    *len = t->len[id];
    return t->bytes + t->off[id];
}

/* ------------------------------------------------------------ encode */

static inline int tok_emit_(tok_ids *o, int id) {
    if (o->n == o->cap && tok_grow_((void **)&o->ids, &o->cap, o->n + 1, sizeof(int))) return -1;
    o->ids[o->n++] = id;
    return 0;
}

static inline void tok_heap_push_(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) >> 1;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline uint64_t tok_heap_pop_(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

/* Pushes the merge candidate starting at symbol pos, if its pair merges. */
static inline void tok_push_pair_(const tok *t, tok_ids *o, size_t *nh, int pos) {
    int nx = o->sym[pos].next;
    if (nx < 0) return;
    const tok_merge_ *m = tok_merge_get_(t, o->sym[pos].id, o->sym[nx].id);
    if (m) tok_heap_push_(o->heap, nh, (uint64_t)m->rank << 32 | (uint32_t)pos);
}

/* Rank of the pair (a, b) and its merged id in *id, or UINT32_MAX. */
static inline uint32_t tok_pair_rank_(const tok *t, int a, int b, int *id) {
    const tok_merge_ *m = tok_merge_get_(t, a, b);
    if (!m) return UINT32_MAX;
    *id = (int)m->id;
    return m->rank;
}

/* Short pre-tokens (the common case): the pair ranks in an array, the
 * lowest found by a scan (strictly lower wins, so the leftmost of equal
 * ranks). Same merges as the heap, cheaper below ~16 symbols. */
static inline int tok_bpe_short_(const tok *t, const unsigned char *p, size_t m, tok_ids *o) {
    int id[TOK_BPE_SHORT], nid[TOK_BPE_SHORT];
    uint32_t rank[TOK_BPE_SHORT];
    int n = (int)m;
    for (int i = 0; i < n; i++) id[i] = t->byte_id[p[i]];
    for (int i = 0; i + 1 < n; i++) rank[i] = tok_pair_rank_(t, id[i], id[i + 1], &nid[i]);
    for (;;) {
        int best = -1;
        uint32_t br = UINT32_MAX;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] < br) { br = rank[i]; best = i; }
        if (best < 0) break;
        id[best] = nid[best];
        for (int i = best + 1; i + 1 < n; i++) {
            id[i] = id[i + 1];
            rank[i] = rank[i + 1];
            nid[i] = nid[i + 1];
        }
        n--;
        if (best > 0) rank[best - 1] = tok_pair_rank_(t, id[best - 1], id[best], &nid[best - 1]);
        if (best + 1 < n) rank[best] = tok_pair_rank_(t, id[best], id[best + 1], &nid[best]);
    }
    for (int i = 0; i < n; i++)
        if (tok_emit_(o, id[i])) return -1;
    return 0;
}

/* BPE of one pre-token p[0..m) (raw bytes): repeatedly merges the adjacent
 * pair of lowest rank, leftmost first, as tokenizers' Word::merge_all; a
 * heap keeps long pre-tokens O(m log m). */
static inline int tok_bpe_(const tok *t, const unsigned char *p, size_t m, tok_ids *o) {
    if (m == 1) return tok_emit_(o, t->byte_id[p[0]]);
    if (t->ignore_merges) {
        int id = tok_vocab_bytes_(t, p, m);
        if (id >= 0) return tok_emit_(o, id);
    }
    if (m <= TOK_BPE_SHORT) return tok_bpe_short_(t, p, m, o);
    if (tok_grow_((void **)&o->sym, &o->sym_cap, m, sizeof(tok_sym_)) ||
        tok_grow_((void **)&o->heap, &o->heap_cap, 3 * m, sizeof(uint64_t)))
        return -1;
    tok_sym_ *sy = o->sym;
    for (size_t i = 0; i < m; i++) {
        sy[i].id = t->byte_id[p[i]];
        sy[i].prev = (int)i - 1;
        sy[i].next = i + 1 < m ? (int)i + 1 : -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < m; i++) tok_push_pair_(t, o, &nh, (int)i);
    while (nh) {
        uint64_t top = tok_heap_pop_(o->heap, &nh);
        int pos = (int)(uint32_t)top, nx = sy[pos].next;
        if (sy[pos].id < 0 || nx < 0) continue;
        const tok_merge_ *mg = tok_merge_get_(t, sy[pos].id, sy[nx].id);
        if (!mg || mg->rank != (uint32_t)(top >> 32)) continue; /* stale candidate */
        sy[pos].id = (int)mg->id;
        sy[pos].next = sy[nx].next;
        if (sy[nx].next >= 0) sy[sy[nx].next].prev = pos;
        sy[nx].id = -1;
        if (sy[pos].prev >= 0) tok_push_pair_(t, o, &nh, sy[pos].prev);
        tok_push_pair_(t, o, &nh, pos);
    }
    for (int i = 0; i >= 0; i = sy[i].next)
        if (tok_emit_(o, sy[i].id)) return -1;
    return 0;
}

/* Pre-tokenizes and BPE-encodes text with no added tokens in it. */
static inline int tok_encode_plain_(const tok *t, const unsigned char *s, size_t n, tok_ids *o) {
    tok_pre_st st = {0, 0};
    for (size_t i = 0; i < n;) {
        size_t e = tok_pretok(t, (const char *)s, i, n, &st);
        if (tok_bpe_(t, s + i, e - i, o)) return -1;
        i = e;
    }
    return 0;
}

/* Longest added token of trie tr starting at s[p] (s[0..n)): its index and
 * end in *end, or -1. */
static inline int tok_trie_match_(const tok_trie_ *tr, const unsigned char *s, size_t p, size_t n, size_t *end) {
    int node = tr->root[s[p]], best = -1;
    for (size_t q = p; node >= 0;) {
        if (tr->term[node] >= 0) { best = tr->term[node]; *end = q + 1; }
        if (++q >= n) break;
        int c = tr->child[node];
        while (c >= 0 && tr->byte[c] != s[q]) c = tr->sib[c];
        node = c;
    }
    return best;
}

static inline int tok_is_space_cp_(uint32_t cp) { return (cp < 256 ? tok_uni_latin1[cp] : tok_uni_class(cp)) == TOK_UNI_S; }

/* Start of the whitespace run that ends at s[k] (the regex \s*$ on s[0..k)). */
static inline size_t tok_ws_before_(const unsigned char *s, size_t k) {
    while (k > 0) {
        size_t b = k - 1;
        while (b > 0 && (s[b] & 0xC0) == 0x80) b--;
        int l;
        if (!tok_is_space_cp_(tok_dec_(s + b, &l))) break;
        k = b;
    }
    return k;
}

/* End of the whitespace run that starts at s[k] (^\s* on s[k..n)). */
static inline size_t tok_ws_after_(const unsigned char *s, size_t k, size_t n) {
    while (k < n) {
        int l;
        if (!tok_is_space_cp_(tok_dec_(s + k, &l))) break;
        k += (size_t)l;
    }
    return k;
}

/* Splits s[0..n) on the added tokens of pass `pass` (tokenizers'
 * AddedVocabulary::find_matches: leftmost-longest, scanning on from each
 * match's end, lstrip/rstrip widening the cut) and encodes the gaps with the
 * next pass, or plain BPE after the last. */
static inline int tok_encode_pass_(const tok *t, const unsigned char *s, size_t n, int pass, tok_ids *o) {
    if (pass == 2) return tok_encode_plain_(t, s, n, o);
    const tok_trie_ *tr = &t->trie[pass];
    if (!tr->n) return tok_encode_pass_(t, s, n, pass + 1, o);
    size_t done = 0;
    for (size_t p = 0; p < n;) {
        size_t stop;
        int k = tr->root[s[p]] >= 0 ? tok_trie_match_(tr, s, p, n, &stop) : -1;
        if (k < 0) { p++; continue; }
        const tok_added_ *a = &t->added[k];
        size_t start = p;
        p = stop;
        if (a->lstrip) {
            size_t ns = tok_ws_before_(s, start);
            start = ns > done ? ns : done;
        }
        if (a->rstrip) stop = tok_ws_after_(s, stop, n);
        if (done < start && tok_encode_pass_(t, s + done, start - done, pass + 1, o)) return -1;
        if (tok_emit_(o, a->id)) return -1;
        done = stop;
    }
    if (done < n) return tok_encode_pass_(t, s + done, n - done, pass + 1, o);
    return 0;
}

/* Python's str.isspace() (bidirectional class WS, B or S, or category Zs):
 * \s plus U+001C..U+001F. */
static inline int tok_py_isspace_(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

#define TOK_KIMI_CHUNK 400000 /* characters tokenization_kimi.py hands tiktoken at most   */
#define TOK_KIMI_RUN 25000    /* longest run of str.isspace() or other characters it keeps */

/* Kimi's encode() as tokenization_kimi.py does it: the text cut into chunks
 * of TOK_KIMI_CHUNK characters, each cut again before the character that
 * would make a run of more than TOK_KIMI_RUN consecutive space or non-space
 * characters; every piece is encoded on its own (pre-tokens and special
 * tokens never span a cut). s[0..n) is valid UTF-8. */
static inline int tok_encode_kimi_(const tok *t, const unsigned char *s, size_t n, tok_ids *o) {
    if (n <= TOK_KIMI_RUN) return tok_encode_pass_(t, s, n, 0, o); /* too few characters for a cut */
    size_t start = 0, chars = 0, run = 0;
    int space = 0;
    for (size_t i = 0; i < n;) {
        int l;
        int sp = tok_py_isspace_(tok_dec_(s + i, &l));
        if (chars % TOK_KIMI_CHUNK == 0) { /* a new chunk: its first character starts a run */
            if (i > start && tok_encode_pass_(t, s + start, i - start, 0, o)) return -1;
            start = i, run = 0, space = sp;
        }
        if (sp != space) run = 1, space = sp;
        else if (++run > TOK_KIMI_RUN) {
            if (tok_encode_pass_(t, s + start, i - start, 0, o)) return -1;
            start = i, run = 1;
        }
        i += (size_t)l, chars++;
    }
    return tok_encode_pass_(t, s + start, n - start, 0, o);
}

/* Appends the ids of text[0..len) to out->ids (any bytes; invalid UTF-8 is
 * replaced first). Same ids as tokenizers' encode(text,
 * add_special_tokens=False): special-token text inside it becomes the
 * special token. Returns 0, or -1 when out of memory or len > TOK_MAX_TEXT
 * (out->n is then unspecified but the buffers stay valid). */
static inline int tok_encode(const tok *t, const char *text, size_t len, tok_ids *out) {
    if (len > TOK_MAX_TEXT) return -1;
    const unsigned char *s = (const unsigned char *)text;
    size_t ok = js_utf8_prefix(s, len);
    if (ok < len) {
        if (tok_grow_((void **)&out->fix, &out->fix_cap, 3 * len, 1)) return -1;
        memcpy(out->fix, s, ok);
        len = ok + tok_utf8_fix(text + ok, len - ok, (char *)out->fix + ok);
        s = out->fix;
    }
    if (t->pre == TOK_PRE_KIMI) return tok_encode_kimi_(t, s, len, out);
    return len ? tok_encode_pass_(t, s, len, 0, out) : 0;
}

/* ------------------------------------------------------------ decode */

/* Appends the text of id to out, holding back the bytes of a UTF-8
 * character until it is complete, so out never ends inside a character;
 * an invalid sequence becomes U+FFFD as in tok_decode. Unknown ids are
 * skipped, as tokenizers' decode does. Returns 0 or -1 (out of memory). */
static inline int tok_stream_put(const tok *t, tok_stream *st, int id, tok_str *out) {
    size_t n;
    const char *p = tok_piece(t, id, &n);
    if (!p) return 0;
    unsigned char tmp[8];
    for (size_t i = 0; i < n; i++) {
        int k = tok_u8_feed_(st, (unsigned char)p[i], tmp);
        if (k && tok_str_put(out, tmp, (size_t)k)) return -1;
    }
    return 0;
}

/* Ends a stream: the held bytes of an incomplete character are appended as
 * they are when raw is nonzero, else as one U+FFFD (what tok_decode gives).
 * Resets st. Returns 0 or -1. */
static inline int tok_stream_flush(tok_stream *st, int raw, tok_str *out) {
    int n = st->n;
    st->n = 0;
    if (!n) return 0;
    return raw ? tok_str_put(out, st->b, (size_t)n) : tok_str_put(out, "\xEF\xBF\xBD", 3);
}

/* Appends the text of ids[0..n) to out: tokenizers' decode(ids,
 * skip_special_tokens=False) (ByteLevel decoder, lossy UTF-8). Returns 0 or -1. */
static inline int tok_decode(const tok *t, const int *ids, size_t n, tok_str *out) {
    tok_stream st = {{0}, 0, 0, 0, 0};
    if (tok_str_put(out, "", 0)) return -1;
    for (size_t i = 0; i < n; i++)
        if (tok_stream_put(t, &st, ids[i], out)) return -1;
    return tok_stream_flush(&st, 0, out);
}

/* ------------------------------------------------------------ chat template */

/* GLM-5's prompt for one optional system turn and one user turn, with the
 * generation prompt: "[gMASK]<sop>" ["<|system|>" system] "<|user|>" user
 * "<|assistant|>" then "<think>" (think != 0) or "</think>" (as the template
 * renders enable_thinking=false). No newline after role tokens; a NULL
 * user counts as "".
 * Writes at most cap bytes including a NUL (like snprintf) and returns the
 * full length. */
static inline size_t tok_chat_text(const char *system, const char *user, int think, char *buf, size_t cap) {
    const char *part[7] = {"[gMASK]<sop>", system ? "<|system|>" : "", system ? system : "", "<|user|>", user ? user : "",
                           "<|assistant|>", think ? "<think>" : "</think>"};
    size_t o = 0;
    for (int i = 0; i < 7; i++) {
        size_t l = strlen(part[i]);
        if (cap && o < cap - 1) memcpy(buf + o, part[i], l < cap - 1 - o ? l : cap - 1 - o);
        o += l;
    }
    if (cap) buf[o < cap - 1 ? o : cap - 1] = 0;
    return o;
}

static const char *const tok_chat_tokens_[] = {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<think>", "</think>"};

/* Checks that the tokenizer has the added tokens GLM-5's chat template
 * uses (chat.h chooses the format and checks each one's tokens). Returns 0,
 * or -1 with the missing token named in err. */
static inline int tok_chat_check(const tok *t, char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof tok_chat_tokens_ / sizeof *tok_chat_tokens_; i++) {
        int id = tok_find(t, tok_chat_tokens_[i]);
        if (id < 0 || !(t->flags[id] & TOK_F_ADDED)) {
            tok_errf_(err, errlen, "%s: added_tokens: no \"%s\" (the GLM-5 chat template needs it)", t->name,
                      tok_chat_tokens_[i]);
            return -1;
        }
    }
    return 0;
}

/* Appends the ids of tok_chat_text(system, user, think): the rendered text
 * encoded, exactly as transformers' apply_chat_template(tokenize=True).
 * system may be NULL (no system turn). Returns 0, -1 (out of memory) or -2
 * (a chat token is not an added token; see tok_chat_check). */
static inline int tok_chat(const tok *t, const char *system, const char *user, int think, tok_ids *out) {
    if (tok_chat_check(t, NULL, 0)) return -2;
    size_t n = tok_chat_text(system, user, think, NULL, 0);
    char *buf = (char *)malloc(n + 1);
    if (!buf) return -1;
    tok_chat_text(system, user, think, buf, n + 1);
    int rc = tok_encode(t, buf, n, out);
    free(buf);
    return rc;
}

/* Appends ids[0..n) to out. 0 or -1 (out of memory). */
static inline int tok_ids_append(tok_ids *out, const int *ids, size_t n) {
    if (n > SIZE_MAX / sizeof(int) - out->n || tok_grow_((void **)&out->ids, &out->cap, out->n + n, sizeof(int))) return -1;
    memcpy(out->ids + out->n, ids, n * sizeof(int));
    out->n += n;
    return 0;
}

/* Appends the ids of a follow-up user turn of a conversation whose earlier
 * turns are already tokenized: "<|user|>" user "<|assistant|>" then
 * "<think>" or "</think>", as the template renders a later turn (the
 * previous reply ended where generation stopped: at <|user|>, a stop token
 * that is never kept, or at the token limit). Returns as tok_chat. */
static inline int tok_chat_turn(const tok *t, const char *user, int think, tok_ids *out) {
    if (tok_chat_check(t, NULL, 0)) return -2;
    size_t n = strlen("<|user|>") + strlen(user ? user : "") + strlen("<|assistant|></think>") + 1;
    char *buf = (char *)malloc(n);
    if (!buf) return -1;
    snprintf(buf, n, "<|user|>%s<|assistant|>%s", user ? user : "", think ? "<think>" : "</think>");
    int rc = tok_encode(t, buf, strlen(buf), out);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------ load */

static inline void tok_trie_free_(tok_trie_ *tr) {
    free(tr->child);
    free(tr->sib);
    free(tr->term);
    free(tr->byte);
}

static inline void tok_free(tok *t) {
    if (!t) return;
    free(t->off);
    free(t->len);
    free(t->flags);
    free(t->bytes);
    free(t->vmap);
    free(t->umap);
    free(t->mapped);
    free(t->merges);
    free(t->added);
    tok_trie_free_(&t->trie[0]);
    tok_trie_free_(&t->trie[1]);
    free(t);
}

static inline int tok_trie_node_(tok_trie_ *tr, unsigned char b) {
    if (tr->n == tr->cap) {
        int nc = tr->cap ? tr->cap * 2 : 64;
        int *c = (int *)realloc(tr->child, (size_t)nc * sizeof(int));
        if (c) tr->child = c;
        int *s = (int *)realloc(tr->sib, (size_t)nc * sizeof(int));
        if (s) tr->sib = s;
        int *m = (int *)realloc(tr->term, (size_t)nc * sizeof(int));
        if (m) tr->term = m;
        unsigned char *y = (unsigned char *)realloc(tr->byte, (size_t)nc);
        if (y) tr->byte = y;
        if (!c || !s || !m || !y) return -1;
        tr->cap = nc;
    }
    int k = tr->n++;
    tr->child[k] = tr->sib[k] = tr->term[k] = -1;
    tr->byte[k] = b;
    return k;
}

/* Adds content p[0..n) (n ≥ 1) ending in added index idx. Returns 0 or -1. */
static inline int tok_trie_add_(tok_trie_ *tr, const unsigned char *p, size_t n, int idx) {
    int node = tr->root[p[0]];
    if (node < 0) {
        if ((node = tok_trie_node_(tr, p[0])) < 0) return -1;
        tr->root[p[0]] = node;
    }
    for (size_t i = 1; i < n; i++) {
        int c = tr->child[node];
        while (c >= 0 && tr->byte[c] != p[i]) c = tr->sib[c];
        if (c < 0) {
            if ((c = tok_trie_node_(tr, p[i])) < 0) return -1;
            tr->sib[c] = tr->child[node];
            tr->child[node] = c;
        }
        node = c;
    }
    tr->term[node] = idx;
    return 0;
}

/* Decoded form of a token string as tokenizers' ByteLevel decoder makes it:
 * the byte-alphabet bytes when every char is in the alphabet, else the
 * string's own UTF-8. Appends to t->bytes; sets off/len of id. */
static inline int tok_store_piece_(tok *t, int id, const char *s, size_t n, int *mapped) {
    if (tok_grow_((void **)&t->bytes, &t->bytes_cap, t->nbytes + n + 1, 1)) return -1;
    long m = tok_to_bytes_(s, n, (unsigned char *)t->bytes + t->nbytes);
    *mapped = m >= 0;
    if (m < 0) {
        memcpy(t->bytes + t->nbytes, s, n);
        m = (long)n;
    }
    t->off[id] = (uint32_t)t->nbytes;
    t->len[id] = (uint32_t)m;
    t->nbytes += (size_t)m;
    return 0;
}

static inline uint32_t tok_table_size_(size_t n) {
    uint32_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

static inline void tok_map_put_(uint32_t *map, uint32_t mask, const void *p, size_t n, int id) {
    uint32_t h = (uint32_t)tok_hash_(p, n) & mask;
    while (map[h]) h = (h + 1) & mask;
    map[h] = (uint32_t)id + 1;
}

/* Reads model.vocab: ids must be exactly 0..count-1; keys non-empty, at most
 * TOK_MAX_PIECE bytes; the 256 one-byte tokens must exist. */
static inline int tok_load_vocab_(tok *t, const js_doc *d, int vocab, char *err, size_t errlen) {
    char q[200];
    int n = js_count(d, vocab);
    if (js_typeof(d, vocab) != JS_OBJ || n < 256 || n > TOK_MAX_IDS) {
        tok_errf_(err, errlen, "%s: model.vocab: must be an object of 256..%d tokens (has %d)", t->name, TOK_MAX_IDS,
                  js_typeof(d, vocab) == JS_OBJ ? n : -1);
        return -1;
    }
    t->n_vocab = n;
    t->off = (uint32_t *)calloc((size_t)n, sizeof(uint32_t));
    t->len = (uint32_t *)calloc((size_t)n, sizeof(uint32_t));
    t->mapped = (uint8_t *)calloc((size_t)n, 1);
    uint8_t *seen = (uint8_t *)calloc((size_t)n, 1);
    int rc = -1;
    if (!t->off || !t->len || !t->mapped || !seen) { tok_errf_(err, errlen, "%s: out of memory", t->name); goto out; }
    for (int c = js_first(d, vocab); c >= 0; c = js_next(d, c)) {
        const char *key = js_key(d, c);
        size_t kl = js_key_len(d, c);
        int64_t id = js_int(d, c);
        if (!js_is_int(d, c) || id < 0 || id >= n) {
            tok_errf_(err, errlen, "%s: model.vocab[\"%s\"]: id must be an integer in 0..%d", t->name,
                      tok_quote_(key, kl, q, sizeof q), n - 1);
            goto out;
        }
        if (seen[id]) {
            tok_errf_(err, errlen, "%s: model.vocab[\"%s\"]: duplicate id %d", t->name, tok_quote_(key, kl, q, sizeof q), (int)id);
            goto out;
        }
        if (!kl || kl > TOK_MAX_PIECE) {
            tok_errf_(err, errlen, "%s: model.vocab: id %d has a key of %zu bytes (1..%d allowed)", t->name, (int)id, kl, TOK_MAX_PIECE);
            goto out;
        }
        seen[id] = 1;
        int mapped;
        if (tok_store_piece_(t, (int)id, key, kl, &mapped)) { tok_errf_(err, errlen, "%s: out of memory", t->name); goto out; }
        t->mapped[id] = (uint8_t)mapped;
    }
    t->vmask = tok_table_size_((size_t)n) - 1;
    int nu = 0;
    for (int i = 0; i < n; i++) nu += !t->mapped[i];
    t->umask = tok_table_size_((size_t)nu) - 1;
    t->vmap = (uint32_t *)calloc((size_t)t->vmask + 1, sizeof(uint32_t));
    t->umap = (uint32_t *)calloc((size_t)t->umask + 1, sizeof(uint32_t));
    if (!t->vmap || !t->umap) { tok_errf_(err, errlen, "%s: out of memory", t->name); goto out; }
    for (int i = 0; i < n; i++)
        tok_map_put_(t->mapped[i] ? t->vmap : t->umap, t->mapped[i] ? t->vmask : t->umask, t->bytes + t->off[i], t->len[i], i);
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        if ((t->byte_id[b] = tok_vocab_bytes_(t, &byte, 1)) < 0) {
            unsigned char u[4];
            int l = js_utf8_encode_(tok_byte_cp_(b), u);
            tok_errf_(err, errlen, "%s: model.vocab: no token \"%s\" for byte 0x%02x (byte-level BPE needs all 256)", t->name,
                      tok_quote_((const char *)u, (size_t)l, q, sizeof q), b);
            goto out;
        }
    }
    rc = 0;
out:
    free(seen);
    return rc;
}

/* One merge "a b" or ["a","b"] at index i: its two parts. Returns 1 for a
 * merge, 0 for a skipped "#version" line, -1 on error. */
static inline int tok_merge_parts_(const tok *t, const js_doc *d, int e, int i, int legacy, const char **a, size_t *al,
                                   const char **b, size_t *bl, char *err, size_t errlen) {
    if (legacy) {
        const char *s = js_str(d, e);
        size_t n = js_str_len(d, e);
        if (n >= 8 && !memcmp(s, "#version", 8)) return 0;
        const char *sp = (const char *)memchr(s, ' ', n);
        if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
            tok_errf_(err, errlen, "%s: model.merges[%d]: \"a b\" must have exactly one space", t->name, i);
            return -1;
        }
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = n - *al - 1;
        return 1;
    }
    int x = js_first(d, e), y = js_next(d, x);
    if (js_typeof(d, e) != JS_ARR || js_count(d, e) != 2 || js_typeof(d, x) != JS_STR || js_typeof(d, y) != JS_STR) {
        tok_errf_(err, errlen, "%s: model.merges[%d]: must be a pair of strings like the others", t->name, i);
        return -1;
    }
    *a = js_str(d, x);
    *al = js_str_len(d, x);
    *b = js_str(d, y);
    *bl = js_str_len(d, y);
    return 1;
}

/* Reads model.merges (rank = index, "#version" lines excluded; a repeated
 * pair keeps its last rank, as tokenizers' hash map does). */
static inline int tok_load_merges_(tok *t, const js_doc *d, int merges, char *err, size_t errlen) {
    char q[200];
    int n = js_count(d, merges);
    if (js_typeof(d, merges) != JS_ARR || n > TOK_MAX_MERGES) {
        tok_errf_(err, errlen, "%s: model.merges: must be an array of at most %d merges", t->name, TOK_MAX_MERGES);
        return -1;
    }
    int legacy = n > 0 && js_typeof(d, js_first(d, merges)) == JS_STR;
    t->mmask = tok_table_size_((size_t)n) - 1;
    t->merges = (tok_merge_ *)malloc(((size_t)t->mmask + 1) * sizeof(tok_merge_));
    char *cat = (char *)malloc(2 * TOK_MAX_PIECE);
    int rc = -1, i = 0, rank = 0;
    if (!t->merges || !cat) { tok_errf_(err, errlen, "%s: out of memory", t->name); goto out; }
    for (uint32_t k = 0; k <= t->mmask; k++) t->merges[k].rank = UINT32_MAX;
    for (int e = js_first(d, merges); e >= 0; e = js_next(d, e), i++) {
        const char *a, *b;
        size_t al, bl;
        if (legacy && js_typeof(d, e) != JS_STR) {
            tok_errf_(err, errlen, "%s: model.merges[%d]: mixes \"a b\" strings and pairs", t->name, i);
            goto out;
        }
        int r = tok_merge_parts_(t, d, e, i, legacy, &a, &al, &b, &bl, err, errlen);
        if (r < 0) goto out;
        if (!r) continue;
        int ia = al <= TOK_MAX_PIECE ? tok_vocab_key_(t, a, al) : -1, ib = bl <= TOK_MAX_PIECE ? tok_vocab_key_(t, b, bl) : -1;
        int ic = -1;
        if (ia >= 0 && ib >= 0) {
            memcpy(cat, a, al);
            memcpy(cat + al, b, bl);
            ic = tok_vocab_key_(t, cat, al + bl);
        }
        if (ic < 0) {
            tok_errf_(err, errlen, "%s: model.merges[%d]: \"%s\" is not in model.vocab", t->name, i,
                      ia < 0 ? tok_quote_(a, al, q, sizeof q) : ib < 0 ? tok_quote_(b, bl, q, sizeof q) : tok_quote_(cat, al + bl, q, sizeof q));
            goto out;
        }
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        uint32_t h = tok_mix_(key) & t->mmask;
        while (t->merges[h].rank != UINT32_MAX && t->merges[h].key != key) h = (h + 1) & t->mmask;
        t->merges[h].key = key;
        t->merges[h].rank = (uint32_t)rank++;
        t->merges[h].id = (uint32_t)ic;
    }
    rc = 0;
out:
    free(cat);
    return rc;
}

static inline int tok_bool_(const js_doc *d, int obj, const char *key, int dflt, int *out) {
    int v = js_get(d, obj, key);
    if (v < 0 || js_typeof(d, v) == JS_NULL) { *out = dflt; return 0; }
    if (!js_is_bool(d, v)) return -1;
    *out = js_typeof(d, v) == JS_TRUE;
    return 0;
}

/* Reads added_tokens. tokenizers ignores the stored ids and assigns them
 * (the vocab id when the content is a vocab key, else the next id after
 * the vocabulary), so a file whose ids disagree is refused. */
static inline int tok_load_added_(tok *t, const js_doc *d, int arr, char *err, size_t errlen) {
    char q[200];
    int n = arr < 0 || js_typeof(d, arr) == JS_NULL ? 0 : js_count(d, arr);
    if (arr >= 0 && js_typeof(d, arr) != JS_NULL && (js_typeof(d, arr) != JS_ARR || n > TOK_MAX_IDS - t->n_vocab)) {
        tok_errf_(err, errlen, "%s: added_tokens: must be an array of at most %d tokens", t->name, TOK_MAX_IDS - t->n_vocab);
        return -1;
    }
    int n_ids = t->n_vocab + n;
    uint32_t *off = (uint32_t *)realloc(t->off, (size_t)n_ids * sizeof(uint32_t));
    if (off) t->off = off;
    uint32_t *len = (uint32_t *)realloc(t->len, (size_t)n_ids * sizeof(uint32_t));
    if (len) t->len = len;
    t->flags = (uint8_t *)calloc((size_t)n_ids, 1);
    t->added = (tok_added_ *)calloc((size_t)(n ? n : 1), sizeof(tok_added_));
    if (!off || !len || !t->flags || !t->added) { tok_errf_(err, errlen, "%s: out of memory", t->name); return -1; }
    int next = t->n_vocab, i = 0;
    for (int e = js_first(d, arr); e >= 0; e = js_next(d, e), i++) {
        int c = js_get(d, e, "content"), idn = js_get(d, e, "id");
        const char *s = js_str(d, c);
        size_t sl = js_str_len(d, c);
        int sw, ls, rs, nm, sp;
        if (js_typeof(d, e) != JS_OBJ || !s || !sl || sl > TOK_MAX_PIECE || !js_is_int(d, idn)) {
            tok_errf_(err, errlen, "%s: added_tokens[%d]: needs an integer \"id\" and a content string of 1..%d bytes", t->name, i, TOK_MAX_PIECE);
            return -1;
        }
        if (tok_bool_(d, e, "single_word", 0, &sw) || tok_bool_(d, e, "lstrip", 0, &ls) || tok_bool_(d, e, "rstrip", 0, &rs) ||
            tok_bool_(d, e, "normalized", 1, &nm) || tok_bool_(d, e, "special", 0, &sp)) {
            tok_errf_(err, errlen, "%s: added_tokens[%d]: single_word/lstrip/rstrip/normalized/special must be booleans", t->name, i);
            return -1;
        }
        if (sw) {
            tok_errf_(err, errlen, "%s: added_tokens[%d] (\"%s\"): single_word=true is not supported", t->name, i, tok_quote_(s, sl, q, sizeof q));
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (t->added[k].len == sl && !memcmp(t->bytes + t->added[k].off, s, sl)) {
                tok_errf_(err, errlen, "%s: added_tokens[%d]: \"%s\" is listed twice", t->name, i, tok_quote_(s, sl, q, sizeof q));
                return -1;
            }
        int want = tok_vocab_key_(t, s, sl);
        if (want < 0) want = next++;
        if (js_int(d, idn) != want) {
            tok_errf_(err, errlen, "%s: added_tokens[%d] (\"%s\"): id %lld, but tokenizers assigns %d", t->name, i,
                      tok_quote_(s, sl, q, sizeof q), (long long)js_int(d, idn), want);
            return -1;
        }
        tok_added_ *a = &t->added[i];
        a->id = want;
        a->lstrip = ls;
        a->rstrip = rs;
        if (tok_grow_((void **)&t->bytes, &t->bytes_cap, t->nbytes + sl + 1, 1)) { tok_errf_(err, errlen, "%s: out of memory", t->name); return -1; }
        a->off = (uint32_t)t->nbytes;
        a->len = (uint32_t)sl;
        memcpy(t->bytes + t->nbytes, s, sl);
        t->nbytes += sl;
        if (want >= t->n_vocab) {
            int mapped;
            if (tok_store_piece_(t, want, s, sl, &mapped)) { tok_errf_(err, errlen, "%s: out of memory", t->name); return -1; }
        }
        t->flags[want] |= (uint8_t)(TOK_F_ADDED | (sp ? TOK_F_SPECIAL : 0));
        if (tok_trie_add_(&t->trie[nm ? 1 : 0], (const unsigned char *)t->bytes + a->off, sl, i)) {
            tok_errf_(err, errlen, "%s: out of memory", t->name);
            return -1;
        }
        t->n_added = i + 1;
    }
    t->n_ids = next;
    return 0;
}

static inline int tok_type_is_(const js_doc *d, int obj, const char *type) {
    const char *s = js_str(d, js_get(d, obj, "type"));
    return s && !strcmp(s, type);
}

static inline const char *tok_type_(const js_doc *d, int obj) {
    const char *s = js_str(d, js_get(d, obj, "type"));
    return s ? s : "(none)";
}

/* DeepSeek-V3's pre_tokenizer: Sequence[Split(TOK_DS_REGEX_DIGITS),
 * Split(TOK_DS_REGEX_CJK), Split(TOK_DS_REGEX), each Isolated without
 * invert, ByteLevel(add_prefix_space=false, use_regex=false)]. */
static inline int tok_check_pretok_ds_(const tok *t, const js_doc *d, int seq, char *err, size_t errlen) {
    static const char *const want[] = {TOK_DS_REGEX_DIGITS, TOK_DS_REGEX_CJK, TOK_DS_REGEX};
    int sp = js_first(d, seq);
    for (int k = 0; k < 3; k++, sp = js_next(d, sp)) {
        const char *re = js_str(d, js_get(d, js_get(d, sp, "pattern"), "Regex")), *beh = js_str(d, js_get(d, sp, "behavior"));
        if (!re || strcmp(re, want[k])) {
            char q[200];
            tok_errf_(err, errlen, "%s: pre_tokenizer.pretokenizers[%d].pattern: split regex \"%s\" is not DeepSeek-V3's", t->name, k,
                      re ? tok_quote_(re, strlen(re), q, sizeof q) : "(not a Regex)");
            return -1;
        }
        if (!beh || strcmp(beh, "Isolated") || js_typeof(d, js_get(d, sp, "invert")) == JS_TRUE) {
            tok_errf_(err, errlen, "%s: pre_tokenizer.pretokenizers[%d]: only behavior Isolated without invert is supported", t->name, k);
            return -1;
        }
    }
    return 0;
}

/* pre_tokenizer: Sequence[Split(TOK_GLM_REGEX, Isolated | Removed+invert),
 * ByteLevel(add_prefix_space=false, use_regex=false)], or DeepSeek-V3's
 * (tok_check_pretok_ds_). Sets t->pre. */
static inline int tok_check_pretok_(tok *t, const js_doc *d, int pt, char *err, size_t errlen) {
    int seq = js_get(d, pt, "pretokenizers"), n = js_count(d, seq);
    int sp = js_first(d, seq), bl = sp;
    for (int k = 1; k < n; k++) bl = js_next(d, bl);
    int ds = n == 4 && tok_type_is_(d, js_next(d, sp), "Split") && tok_type_is_(d, js_next(d, js_next(d, sp)), "Split");
    if (!tok_type_is_(d, pt, "Sequence") || (n != 2 && !ds) || !tok_type_is_(d, sp, "Split") || !tok_type_is_(d, bl, "ByteLevel")) {
        tok_errf_(err, errlen, "%s: pre_tokenizer: only Sequence[Split, ByteLevel] with the GLM regex or DeepSeek-V3's "
                  "Sequence[Split x3, ByteLevel] is supported (found %s)", t->name, tok_type_(d, pt));
        return -1;
    }
    if (ds) {
        if (tok_check_pretok_ds_(t, d, seq, err, errlen)) return -1;
        t->pre = TOK_PRE_DEEPSEEK3;
        goto bytelevel;
    }
    int pat = js_get(d, sp, "pattern");
    const char *re = js_str(d, js_get(d, pat, "Regex"));
    if (!re || strcmp(re, TOK_GLM_REGEX)) {
        char q[200];
        tok_errf_(err, errlen, "%s: pre_tokenizer.pretokenizers[0].pattern: unknown split regex \"%s\" (only GLM-4/GLM-5's is implemented)",
                  t->name, re ? tok_quote_(re, strlen(re), q, sizeof q) : "(not a Regex)");
        return -1;
    }
    const char *beh = js_str(d, js_get(d, sp, "behavior"));
    int inv = js_typeof(d, js_get(d, sp, "invert")) == JS_TRUE;
    if (!beh || !(!strcmp(beh, "Isolated") || (!strcmp(beh, "Removed") && inv))) {
        tok_errf_(err, errlen, "%s: pre_tokenizer.pretokenizers[0]: behavior %s with invert=%s is not supported", t->name,
                  beh ? beh : "(none)", inv ? "true" : "false");
        return -1;
    }
    t->pre = TOK_PRE_GLM;
bytelevel:
    if (js_typeof(d, js_get(d, bl, "add_prefix_space")) != JS_FALSE || js_typeof(d, js_get(d, bl, "use_regex")) != JS_FALSE) {
        tok_errf_(err, errlen, "%s: pre_tokenizer.pretokenizers[%d]: ByteLevel needs add_prefix_space=false, use_regex=false "
                  "(both default to true)", t->name, n - 1);
        return -1;
    }
    return 0;
}

/* Everything but the model and added tokens: version, truncation, padding,
 * normalizer, pre_tokenizer, post_processor, decoder. */
static inline int tok_check_pipeline_(tok *t, const js_doc *d, int root, char *err, size_t errlen) {
    const char *ver = js_str(d, js_get(d, root, "version"));
    if (js_get(d, root, "version") >= 0 && (!ver || strcmp(ver, "1.0"))) {
        tok_errf_(err, errlen, "%s: version: only \"1.0\" is known", t->name);
        return -1;
    }
    static const char *const nulls[] = {"truncation", "padding", "normalizer"};
    for (int i = 0; i < 3; i++) {
        int v = js_get(d, root, nulls[i]);
        if (i == 2 && tok_type_is_(d, v, "Sequence") && js_typeof(d, js_get(d, v, "normalizers")) == JS_ARR &&
            !js_count(d, js_get(d, v, "normalizers")))
            continue; /* DeepSeek-V3's: a Sequence of no normalizers */
        if (v >= 0 && js_typeof(d, v) != JS_NULL) {
            tok_errf_(err, errlen, "%s: %s: must be null (found %s)", t->name, nulls[i], tok_type_(d, v));
            return -1;
        }
    }
    if (tok_check_pretok_(t, d, js_get(d, root, "pre_tokenizer"), err, errlen)) return -1;
    int pp = js_get(d, root, "post_processor");
    if (pp >= 0 && js_typeof(d, pp) != JS_NULL && !tok_type_is_(d, pp, "ByteLevel") && !tok_type_is_(d, pp, "TemplateProcessing") &&
        !tok_type_is_(d, pp, "Sequence")) {
        tok_errf_(err, errlen, "%s: post_processor: type %s is not supported", t->name, tok_type_(d, pp));
        return -1;
    }
    if (!tok_type_is_(d, js_get(d, root, "decoder"), "ByteLevel")) {
        tok_errf_(err, errlen, "%s: decoder: only ByteLevel is supported (found %s)", t->name, tok_type_(d, js_get(d, root, "decoder")));
        return -1;
    }
    return 0;
}

/* model: BPE without dropout, subword prefix or word suffix. */
static inline int tok_check_model_(tok *t, const js_doc *d, int m, char *err, size_t errlen) {
    if (js_typeof(d, m) != JS_OBJ || !tok_type_is_(d, m, "BPE")) {
        tok_errf_(err, errlen, "%s: model: only type BPE is supported (found %s)", t->name, m >= 0 ? tok_type_(d, m) : "no model");
        return -1;
    }
    static const char *const empty[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 3; i++) {
        int v = js_get(d, m, empty[i]);
        if (v >= 0 && js_typeof(d, v) != JS_NULL && !(js_typeof(d, v) == JS_STR && !js_str_len(d, v))) {
            tok_errf_(err, errlen, "%s: model.%s: must be null", t->name, empty[i]);
            return -1;
        }
    }
    if (tok_bool_(d, m, "ignore_merges", 0, &t->ignore_merges)) {
        tok_errf_(err, errlen, "%s: model.ignore_merges: must be a boolean", t->name);
        return -1;
    }
    if (js_get(d, m, "merges") < 0) {
        tok_errf_(err, errlen, "%s: model.merges: missing", t->name);
        return -1;
    }
    return 0;
}

/* Builds a tokenizer from the tokenizer.json text json[0..len); name is
 * used in messages. Returns it (free with tok_free) or NULL with a message
 * "name: field: problem" in err. */
static inline tok *tok_load_mem(const char *json, size_t len, const char *name, char *err, size_t errlen) {
    char jerr[160];
    tok *t = (tok *)calloc(1, sizeof *t);
    if (!t) { tok_errf_(err, errlen, "%s: out of memory", name); return NULL; }
    snprintf(t->name, sizeof t->name, "%s", name);
    memset(t->trie[0].root, 0xff, sizeof t->trie[0].root);
    memset(t->trie[1].root, 0xff, sizeof t->trie[1].root);
    js_doc *d = js_parse(json, len, jerr, sizeof jerr);
    if (!d) {
        tok_errf_(err, errlen, "%s: not valid JSON: %s", name, jerr);
        tok_free(t);
        return NULL;
    }
    int root = d->root, m = js_get(d, root, "model");
    int ok = js_typeof(d, root) == JS_OBJ;
    if (!ok) tok_errf_(err, errlen, "%s: top level must be an object", name);
    ok = ok && !tok_check_pipeline_(t, d, root, err, errlen) && !tok_check_model_(t, d, m, err, errlen);
    ok = ok && !tok_load_vocab_(t, d, js_get(d, m, "vocab"), err, errlen);
    ok = ok && !tok_load_merges_(t, d, js_get(d, m, "merges"), err, errlen);
    ok = ok && !tok_load_added_(t, d, js_get(d, root, "added_tokens"), err, errlen);
    js_free(d);
    if (!ok) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* Loads tokenizer.json from path. Returns the tokenizer or NULL with a
 * message naming the file and field in err. */
static inline tok *tok_load(const char *path, char *err, size_t errlen) {
    size_t len;
    char *buf = compat_read_file(path, TOK_MAX_FILE, &len);
    if (!buf) {
        tok_errf_(err, errlen, "%s: cannot read: %s", path, errno == EFBIG ? "larger than 1 GiB" : compat_strerror(errno));
        return NULL;
    }
    tok *t = tok_load_mem(buf, len, path, err, errlen);
    free(buf);
    return t;
}

/* ------------------------------------------------------------ tiktoken (Kimi K2) */

#define TOK_KIMI_SPECIALS (256 + 2) /* tokenization_kimi.py: num_reserved_special_tokens + 2 */

/* Decodes standard base64 (padded) s[0..n) into out (≥ 3n/4 bytes); returns
 * the length, or -1 when s is not base64. */
static inline long tok_b64_(const char *s, size_t n, unsigned char *out) {
    if (n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            int x = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
                    : c == '+' ? 62 : c == '/' ? 63 : -1;
            if (c == '=' && i + 4 == n && k >= 2) { pad++, x = 0; }
            else if (x < 0 || pad) return -1;
            v = v << 6 | (uint32_t)x;
        }
        out[o++] = (unsigned char)(v >> 16);
        if (pad < 2) out[o++] = (unsigned char)(v >> 8);
        if (pad < 1) out[o++] = (unsigned char)v;
    }
    return (long)o;
}

/* One line "<base64 bytes> <rank>" of tiktoken.model (line number ln, the
 * token's expected rank id): appends the bytes to t->bytes as id. */
static inline int tok_tt_line_(tok *t, const char *p, size_t n, size_t ln, int id, char *err, size_t errlen) {
    const char *sp = (const char *)memchr(p, ' ', n);
    size_t bl = sp ? (size_t)(sp - p) : 0, rl = sp ? n - bl - 1 : 0;
    int64_t rank = rl && rl <= 9 ? 0 : -1;
    for (size_t k = 0; rank >= 0 && k < rl; k++) rank = sp[1 + k] >= '0' && sp[1 + k] <= '9' ? rank * 10 + (sp[1 + k] - '0') : -1;
    if (!bl || rank < 0) {
        tok_errf_(err, errlen, "%s: line %zu: expected \"<base64 bytes> <rank>\"", t->name, ln);
        return -1;
    }
    if (rank != id) {
        tok_errf_(err, errlen, "%s: line %zu: rank %lld, expected %d (ranks must run 0, 1, 2, ... in file order)", t->name, ln,
                  (long long)rank, id);
        return -1;
    }
    if (bl > TOK_MAX_PIECE / 3 * 4 + 4) {
        tok_errf_(err, errlen, "%s: line %zu: token longer than %d bytes", t->name, ln, TOK_MAX_PIECE);
        return -1;
    }
    if (tok_grow_((void **)&t->bytes, &t->bytes_cap, t->nbytes + bl, 1)) {
        tok_errf_(err, errlen, "%s: out of memory", t->name);
        return -1;
    }
    long m = tok_b64_(p, bl, (unsigned char *)t->bytes + t->nbytes);
    if (m < 0 || m > TOK_MAX_PIECE) { /* (bl > 0 decodes to at least one byte) */
        if (m < 0) tok_errf_(err, errlen, "%s: line %zu: the token is not base64", t->name, ln);
        else tok_errf_(err, errlen, "%s: line %zu: token longer than %d bytes", t->name, ln, TOK_MAX_PIECE);
        return -1;
    }
    int dup = tok_vocab_bytes_(t, t->bytes + t->nbytes, (size_t)m);
    if (dup >= 0) {
        tok_errf_(err, errlen, "%s: line %zu: the same bytes as rank %d", t->name, ln, dup);
        return -1;
    }
    t->off[id] = (uint32_t)t->nbytes;
    t->len[id] = (uint32_t)m;
    t->nbytes += (size_t)m;
    tok_map_put_(t->vmap, t->vmask, t->bytes + t->off[id], (size_t)m, id);
    return 0;
}

/* tiktoken's BPE as merges: the pair (a, b) merges into c, with c's rank,
 * whenever the bytes of a then b are token c; the lowest rank merges first
 * (leftmost on ties), exactly tiktoken's byte_pair_merge. Every split of
 * every token is a candidate; fails past TOK_MAX_MERGES pairs. */
static inline int tok_tt_merges_(tok *t, char *err, size_t errlen) {
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < t->n_vocab; c++) {
            const char *p = t->bytes + t->off[c];
            for (uint32_t k = 1; k < t->len[c]; k++) {
                int a = tok_vocab_bytes_(t, p, k), b = a >= 0 ? tok_vocab_bytes_(t, p + k, t->len[c] - k) : -1;
                if (b < 0) continue;
                if (!pass) {
                    if (++count > TOK_MAX_MERGES) {
                        tok_errf_(err, errlen, "%s: more than %d mergeable pairs", t->name, TOK_MAX_MERGES);
                        return -1;
                    }
                    continue;
                }
                uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
                uint32_t h = tok_mix_(key) & t->mmask;
                while (t->merges[h].rank != UINT32_MAX) h = (h + 1) & t->mmask;
                t->merges[h].key = key;
                t->merges[h].rank = (uint32_t)c;
                t->merges[h].id = (uint32_t)c;
            }
        }
        if (!pass) {
            t->mmask = tok_table_size_(count) - 1;
            t->merges = (tok_merge_ *)malloc(((size_t)t->mmask + 1) * sizeof(tok_merge_));
            if (!t->merges) { tok_errf_(err, errlen, "%s: out of memory", t->name); return -1; }
            for (uint32_t k = 0; k <= t->mmask; k++) t->merges[k].rank = UINT32_MAX;
        }
    }
    return 0;
}

/* Reads tiktoken.model text buf[0..len): one token a line, ranks 0.. in
 * order (blank lines skipped, CRLF accepted), all 256 single bytes present. */
static inline int tok_tt_ranks_(tok *t, const char *buf, size_t len, char *err, size_t errlen) {
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    if (lines > (size_t)(TOK_MAX_IDS - TOK_KIMI_SPECIALS)) lines = (size_t)(TOK_MAX_IDS - TOK_KIMI_SPECIALS) + 1;
    size_t cap = lines + TOK_KIMI_SPECIALS;
    t->off = (uint32_t *)calloc(cap, sizeof(uint32_t));
    t->len = (uint32_t *)calloc(cap, sizeof(uint32_t));
    t->vmask = tok_table_size_(lines) - 1;
    t->vmap = (uint32_t *)calloc((size_t)t->vmask + 1, sizeof(uint32_t));
    t->umask = 15;
    t->umap = (uint32_t *)calloc(16, sizeof(uint32_t));
    if (!t->off || !t->len || !t->vmap || !t->umap) { tok_errf_(err, errlen, "%s: out of memory", t->name); return -1; }
    int n = 0;
    size_t ln = 0;
    for (const char *p = buf, *e; p < buf + len; p = e + 1) {
        e = (const char *)memchr(p, '\n', (size_t)(buf + len - p));
        if (!e) e = buf + len;
        size_t l = (size_t)(e - p);
        ln++;
        if (l && p[l - 1] == '\r') l--;
        if (!l) continue;
        if (n >= TOK_MAX_IDS - TOK_KIMI_SPECIALS) {
            tok_errf_(err, errlen, "%s: line %zu: more than %d tokens", t->name, ln, TOK_MAX_IDS - TOK_KIMI_SPECIALS);
            return -1;
        }
        if (tok_tt_line_(t, p, l, ln, n, err, errlen)) return -1;
        n++;
    }
    t->n_vocab = n;
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        if ((t->byte_id[b] = tok_vocab_bytes_(t, &byte, 1)) < 0) {
            tok_errf_(err, errlen, "%s: no token for the byte 0x%02x (tiktoken needs all 256)", t->name, b);
            return -1;
        }
    }
    return 0;
}

/* The special tokens, ids n_vocab .. n_vocab + TOK_KIMI_SPECIALS - 1, as
 * tokenization_kimi.py names them: the content added_tokens_decoder gives
 * the id in tokenizer_config.json cfg[0..len) (file name cname; its keys
 * are ids in canonical decimal, each once), else "<|reserved_token_<id>|>".
 * All are special and matched in text. */
static inline int tok_tt_specials_(tok *t, const char *cfg, size_t len, const char *cname, char *err, size_t errlen) {
    char jerr[160], q[200];
    js_doc *d = js_parse(cfg, len, jerr, sizeof jerr);
    if (!d) { tok_errf_(err, errlen, "%s: not valid JSON: %s", cname, jerr); return -1; }
    int rc = -1, dec = js_get(d, d->root, "added_tokens_decoder"), nv = t->n_vocab;
    int name[TOK_KIMI_SPECIALS]; /* the content node of each id */
    for (int i = 0; i < TOK_KIMI_SPECIALS; i++) name[i] = -1;
    if (js_typeof(d, d->root) != JS_OBJ || js_typeof(d, dec) != JS_OBJ) {
        tok_errf_(err, errlen, "%s: added_tokens_decoder: must be an object (the special tokens by id)", cname);
        goto out;
    }
    for (int c = js_first(d, dec); c >= 0; c = js_next(d, c)) {
        const char *key = js_key(d, c);
        size_t kl = js_key_len(d, c);
        /* an id in canonical decimal: digits, no leading zero, sign or
         * space, so that one id has one key ("03970" and "3970" would both
         * be 3970, and one would silently win) */
        long id = kl >= 1 && kl <= 9 && strspn(key, "0123456789") == kl && (key[0] != '0' || kl == 1) ? strtol(key, NULL, 10) : -1;
        int cont = js_get(d, c, "content");
        if (id < nv || id >= nv + TOK_KIMI_SPECIALS) {
            tok_errf_(err, errlen, "%s: added_tokens_decoder[\"%s\"]: ids must be %d..%d in plain decimal (the special tokens after tiktoken.model's %d)",
                      cname, tok_quote_(key, kl, q, sizeof q), nv, nv + TOK_KIMI_SPECIALS - 1, nv);
            goto out;
        }
        if (name[id - nv] >= 0) { /* canonical keys and json.h's refusal of duplicate keys leave none; the rule stands anyway */
            tok_errf_(err, errlen, "%s: added_tokens_decoder[\"%s\"]: id %ld is given twice", cname, tok_quote_(key, kl, q, sizeof q), id);
            goto out;
        }
        if (js_typeof(d, c) != JS_OBJ || js_typeof(d, cont) != JS_STR || !js_str_len(d, cont) || js_str_len(d, cont) > TOK_MAX_PIECE) {
            tok_errf_(err, errlen, "%s: added_tokens_decoder[\"%ld\"]: needs a \"content\" string of 1..%d bytes", cname, id, TOK_MAX_PIECE);
            goto out;
        }
        name[id - nv] = cont;
    }
    t->n_ids = nv + TOK_KIMI_SPECIALS;
    t->flags = (uint8_t *)calloc((size_t)t->n_ids, 1);
    t->added = (tok_added_ *)calloc(TOK_KIMI_SPECIALS, sizeof(tok_added_));
    if (!t->flags || !t->added) { tok_errf_(err, errlen, "%s: out of memory", t->name); goto out; }
    for (int i = 0; i < TOK_KIMI_SPECIALS; i++) {
        char rsv[48];
        size_t sl = name[i] >= 0 ? js_str_len(d, name[i]) : (size_t)snprintf(rsv, sizeof rsv, "<|reserved_token_%d|>", nv + i);
        const char *sc = name[i] >= 0 ? js_str(d, name[i]) : rsv;
        for (int k = 0; k < i; k++)
            if (t->added[k].len == sl && !memcmp(t->bytes + t->added[k].off, sc, sl)) {
                tok_errf_(err, errlen, "%s: added_tokens_decoder: \"%s\" names ids %d and %d", cname, tok_quote_(sc, sl, q, sizeof q),
                          nv + k, nv + i);
                goto out;
            }
        if (tok_grow_((void **)&t->bytes, &t->bytes_cap, t->nbytes + sl, 1)) { tok_errf_(err, errlen, "%s: out of memory", t->name); goto out; }
        tok_added_ *a = &t->added[i];
        a->id = nv + i;
        a->off = t->off[a->id] = (uint32_t)t->nbytes;
        a->len = t->len[a->id] = (uint32_t)sl;
        memcpy(t->bytes + t->nbytes, sc, sl);
        t->nbytes += sl;
        t->flags[a->id] = TOK_F_ADDED | TOK_F_SPECIAL;
        if (tok_trie_add_(&t->trie[0], (const unsigned char *)t->bytes + a->off, sl, i)) {
            tok_errf_(err, errlen, "%s: out of memory", t->name);
            goto out;
        }
        t->n_added = i + 1;
    }
    rc = 0;
out:
    js_free(d);
    return rc;
}

/* Builds Kimi K2's tokenizer from its tiktoken.model text model[0..mlen)
 * and tokenizer_config.json text cfg[0..clen) (file names mname, cname for
 * messages): tiktoken's rank BPE, Kimi's split (TOK_KIMI_REGEX), the
 * special tokens of tokenization_kimi.py, which it encodes with
 * allowed_special="all" (special-token text becomes the special token:
 * leftmost, and the longest where one name is a prefix of another, an order
 * tiktoken leaves to its hash map). Decoding joins the token bytes (lossy
 * UTF-8), as tiktoken's decode. Returns the tokenizer or NULL with err. */
static inline tok *tok_load_tiktoken_mem(const char *model, size_t mlen, const char *mname, const char *cfg, size_t clen,
                                         const char *cname, char *err, size_t errlen) {
    tok *t = (tok *)calloc(1, sizeof *t);
    if (!t) { tok_errf_(err, errlen, "%s: out of memory", mname); return NULL; }
    snprintf(t->name, sizeof t->name, "%s", mname);
    memset(t->trie[0].root, 0xff, sizeof t->trie[0].root);
    memset(t->trie[1].root, 0xff, sizeof t->trie[1].root);
    t->pre = TOK_PRE_KIMI;
    t->ignore_merges = 1; /* tiktoken takes a piece that is a whole token as it is */
    if (tok_tt_ranks_(t, model, mlen, err, errlen) || tok_tt_merges_(t, err, errlen) || tok_tt_specials_(t, cfg, clen, cname, err, errlen)) {
        tok_free(t);
        return NULL;
    }
    return t;
}

/* Loads tiktoken.model and tokenizer_config.json from their paths. */
static inline tok *tok_load_tiktoken(const char *model_path, const char *config_path, char *err, size_t errlen) {
    size_t ml, cl;
    char *m = compat_read_file(model_path, TOK_MAX_FILE, &ml);
    if (!m) {
        tok_errf_(err, errlen, "%s: cannot read: %s", model_path, errno == EFBIG ? "larger than 1 GiB" : compat_strerror(errno));
        return NULL;
    }
    char *c = compat_read_file(config_path, TOK_MAX_FILE, &cl);
    if (!c) {
        tok_errf_(err, errlen, "%s: cannot read: %s", config_path, errno == EFBIG ? "larger than 1 GiB" : compat_strerror(errno));
        free(m);
        return NULL;
    }
    tok *t = tok_load_tiktoken_mem(m, ml, model_path, c, cl, config_path, err, errlen);
    free(m);
    free(c);
    return t;
}

/* 1 if path does not exist (any other failure to read it counts as there). */
static inline int tok_absent_(const char *path) {
    size_t n;
    char *p = compat_read_file(path, 0, &n);
    int e = errno;
    free(p);
    return !p && e == ENOENT;
}

/* The tokenizer of model directory dir: tokenizer.json when there is one,
 * else tiktoken.model with tokenizer_config.json (Kimi K2 / K2.5). */
static inline tok *tok_load_dir(const char *dir, char *err, size_t errlen) {
    char path[4096], cfg[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cfg, sizeof cfg, "%s/tiktoken.model", dir);
    if (!tok_absent_(path) || tok_absent_(cfg)) return tok_load(path, err, errlen);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    return tok_load_tiktoken(cfg, path, err, errlen);
}

#endif
