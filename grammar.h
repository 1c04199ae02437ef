/* grammar.h — output that follows a grammar: GBNF (the subset llama.cpp
 * documents) parsed into rules, a recognizer over Unicode code points that
 * keeps every way the text so far can continue (a set of stacks, as
 * llama.cpp's), the vocabulary mask of the tokens whose bytes can continue
 * a valid parse (a byte trie walked with the recognizer, pruned where no
 * stack survives), a JSON-schema subset written as GBNF, and forced tool
 * calls written as GBNF in a chat format's syntax (gr_tool_syntax, which
 * chat.h's table holds per format).
 *
 * GBNF: rules `name ::= alternatives`, `|`, grouping `( )`, `* + ?`,
 * `{m}`, `{m,}`, `{m,n}`, "literals" and [classes] (ranges, ^negation)
 * with escapes \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH, `.` (any
 * character), `#` comments. A rule goes on after `::=`, `|` and inside
 * parentheses across lines; otherwise a newline ends it. Refused with line
 * and column: syntax errors, undefined rules, a missing root, left
 * recursion (a rule that can reach itself before consuming a character),
 * a rule that matches no text, a class that matches no character, groups
 * nested deeper than GR_MAX_NEST. Parsing is linear in the text.
 * A repeated item that can match the empty string is repeated without its
 * empty match (the same language, one way per text, see gr_finish_reps_).
 * The recognizer follows at most GR_MAX_STACKS ways; more is reported
 * (-2), never taken for a dead end.
 *
 * Prefix: gr_. Pure: no I/O, no model, no environment. */
#ifndef COLI_GRAMMAR_H
#define COLI_GRAMMAR_H

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

enum { GR_END, GR_ALT, GR_REF, GR_CHAR, GR_CHAR_NOT, GR_RNG, GR_CHAR_ALT, GR_ANY };

typedef struct {
    uint8_t type;
    uint32_t v; /* code point, or rule id for GR_REF */
} gr_el;

typedef struct {
    char *name;
    gr_el *el; /* alternatives separated by GR_ALT, closed by GR_END */
    int n, cap;
    int defined, line, col; /* where first referenced (undefined-rule messages) */
    int base; /* the named rule a generated rule was made for (itself when named) */
} gr_rule_;

typedef struct {
    gr_el *el; /* every rule's elements, one after another */
    int n_el;
    int *start; /* [n_rules] */
    char **names;
    int n_rules, root;
} gr_grammar;

static inline void gr_free(gr_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names), free(g->start), free(g->el), free(g);
}

/* 1 when the class starting at el[pos] admits some code point in [lo, hi]. */
static inline int gr_class_admits_(const gr_el *el, uint32_t pos, uint32_t lo, uint32_t hi) {
    if (el[pos].type == GR_ANY) return 1;
    int positive = el[pos].type == GR_CHAR;
    if (!positive) { /* some code point of [lo, hi] outside every excluded range */
        uint32_t c = lo;
        for (int moved = 1; moved && c <= hi;) {
            moved = 0;
            uint32_t p = pos;
            do {
                uint32_t a = el[p].v, b = el[p + 1].type == GR_RNG ? el[p + 1].v : a;
                p += el[p + 1].type == GR_RNG ? 2 : 1;
                if (a <= c && c <= b) c = b + 1, moved = 1;
            } while (el[p].type == GR_CHAR_ALT);
        }
        return c <= hi;
    }
    do {
        uint32_t a = el[pos].v, b = el[pos + 1].type == GR_RNG ? el[pos + 1].v : a;
        pos += el[pos + 1].type == GR_RNG ? 2 : 1;
        if (a <= hi && lo <= b) return 1;
    } while (el[pos].type == GR_CHAR_ALT);
    return 0;
}

/* ------------------------------------------------------------ parsing */

/* A repetition of a rule, desugared after parsing, when it is known
 * whether the rule can match the empty string. */
typedef struct {
    int rule, item, min, max; /* rule ::= item{min,max} (max < 0: unbounded) */
} gr_rep_;

#define GR_MAX_ELEMENTS (1 << 22) /* a grammar's size after desugaring (16 MiB of elements) */
#define GR_MAX_NEST 1024          /* nested groups: the parser recurses once per level */

typedef struct {
    const char *s, *p, *end;
    gr_rule_ *r;
    int n, cap;
    char *err;
    size_t errlen;
    int failed, gen; /* gen: generated rule counter */
    gr_rep_ *rep;
    int nrep, caprep;
    long total; /* elements put so far, against GR_MAX_ELEMENTS */
    int *ht, htcap; /* named rules by name hash: rule id + 1, 0 empty; at most half full */
    const char *lc_at; /* line and column of lc_at, so positions are counted once */
    int lc_line, lc_col, nest;
} gr_parser_;

/* The line and column of at: counted on from the last position asked
 * (they are asked in text order), from the start when at is before it. */
static inline void gr_linecol_(gr_parser_ *ps, const char *at, int *line, int *col) {
    if (!ps->lc_at || at < ps->lc_at) ps->lc_at = ps->s, ps->lc_line = 1, ps->lc_col = 1;
    for (const char *q = ps->lc_at; q < at && q < ps->end; q++) {
        if (*q == '\n') ps->lc_line++, ps->lc_col = 1;
        else ps->lc_col++;
    }
    if (at > ps->lc_at) ps->lc_at = at < ps->end ? at : ps->end;
    *line = ps->lc_line, *col = ps->lc_col;
}

static inline int gr_fail_(gr_parser_ *ps, const char *at, const char *fmt, ...) {
    if (ps->failed) return -1;
    ps->failed = 1;
    int line, col;
    gr_linecol_(ps, at, &line, &col);
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->err && ps->errlen) snprintf(ps->err, ps->errlen, "line %d, column %d: %s", line, col, msg);
    return -1;
}

static inline uint32_t gr_name_hash_(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Puts rule id into the name index, doubling it past half full. 0 or -1. */
static inline int gr_name_put_(gr_parser_ *ps, int id) {
    if (2 * (ps->n + 1) > ps->htcap) {
        int cap = ps->htcap ? ps->htcap * 2 : 64;
        int *h = (int *)calloc((size_t)cap, sizeof(int));
        if (!h) return -1;
        for (int i = 0; i < ps->htcap; i++)
            if (ps->ht[i]) {
                const char *nm = ps->r[ps->ht[i] - 1].name;
                uint32_t sl = gr_name_hash_(nm, strlen(nm)) & (uint32_t)(cap - 1);
                while (h[sl]) sl = (sl + 1) & (uint32_t)(cap - 1);
                h[sl] = ps->ht[i];
            }
        free(ps->ht);
        ps->ht = h, ps->htcap = cap;
    }
    const char *nm = ps->r[id].name;
    uint32_t sl = gr_name_hash_(nm, strlen(nm)) & (uint32_t)(ps->htcap - 1);
    while (ps->ht[sl]) sl = (sl + 1) & (uint32_t)(ps->htcap - 1);
    ps->ht[sl] = id + 1;
    return 0;
}

/* A new rule named name[0..n) (copied), undefined; its position is where
 * `at` is. Generated rules are not put in the name index: a name the
 * grammar writes never finds one. -1 on OOM. */
static inline int gr_rule_new_(gr_parser_ *ps, const char *name, size_t n, const char *at) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 16;
        gr_rule_ *nr = (gr_rule_ *)realloc(ps->r, (size_t)cap * sizeof *nr);
        if (!nr) return gr_fail_(ps, at, "out of memory");
        ps->r = nr, ps->cap = cap;
    }
    gr_rule_ *r = &ps->r[ps->n];
    memset(r, 0, sizeof *r);
    if (!(r->name = strndup(name, n))) return gr_fail_(ps, at, "out of memory");
    gr_linecol_(ps, at, &r->line, &r->col);
    r->base = ps->n;
    return ps->n++;
}

/* The id of the named rule name[0..n), created undefined when new. -1 on OOM. */
static inline int gr_rule_id_(gr_parser_ *ps, const char *name, size_t n, const char *at) {
    if (ps->htcap) {
        uint32_t mask = (uint32_t)ps->htcap - 1;
        for (uint32_t sl = gr_name_hash_(name, n) & mask; ps->ht[sl]; sl = (sl + 1) & mask) {
            const char *nm = ps->r[ps->ht[sl] - 1].name;
            if (!strncmp(nm, name, n) && !nm[n]) return ps->ht[sl] - 1;
        }
    }
    int id = gr_rule_new_(ps, name, n, at);
    if (id >= 0 && gr_name_put_(ps, id)) return gr_fail_(ps, at, "out of memory");
    return id;
}

static inline int gr_put_(gr_parser_ *ps, int rule, int type, uint32_t v) {
    if (++ps->total > GR_MAX_ELEMENTS) return gr_fail_(ps, ps->p, "grammar too large: more than %d elements once repetitions are expanded", GR_MAX_ELEMENTS);
    gr_rule_ *r = &ps->r[rule];
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 16;
        gr_el *ne = (gr_el *)realloc(r->el, (size_t)cap * sizeof *ne);
        if (!ne) return gr_fail_(ps, ps->p, "out of memory");
        r->el = ne, r->cap = cap;
    }
    r->el[r->n].type = (uint8_t)type, r->el[r->n].v = v;
    r->n++;
    return 0;
}

static inline int gr_is_word_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

/* Skips blanks and comments; newlines too when nested. */
static inline void gr_space_(gr_parser_ *ps, int nested) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r' || (nested && c == '\n')) ps->p++;
        else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else
            break;
    }
}

static inline int gr_hex_(gr_parser_ *ps, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        if (ps->p >= ps->end) return gr_fail_(ps, ps->p, "expected %d hex digits", digits);
        char c = *ps->p++;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return gr_fail_(ps, ps->p - 1, "expected a hex digit");
        v = v << 4 | (uint32_t)d;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return gr_fail_(ps, ps->p, "escape U+%X is not a Unicode scalar value", v);
    *out = v;
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static inline int gr_char_(gr_parser_ *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return gr_fail_(ps, ps->p, "unexpected end of grammar");
    const unsigned char *u = (const unsigned char *)ps->p;
    if (*u == '\\') {
        ps->p++;
        if (ps->p >= ps->end) return gr_fail_(ps, ps->p, "unexpected end after \\");
        char c = *ps->p++;
        switch (c) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': *cp = (uint32_t)c; return 0;
        case 'x': return gr_hex_(ps, 2, cp);
        case 'u': return gr_hex_(ps, 4, cp);
        case 'U': return gr_hex_(ps, 8, cp);
        default: return gr_fail_(ps, ps->p - 2, "unknown escape \\%c", c);
        }
    }
    int k = js_utf8_valid_len(u, (const unsigned char *)ps->end);
    if (!k) return gr_fail_(ps, ps->p, "invalid UTF-8");
    uint32_t v = k == 1 ? u[0] : k == 2 ? (u[0] & 0x1Fu) : k == 3 ? (u[0] & 0x0Fu) : (u[0] & 0x07u);
    for (int i = 1; i < k; i++) v = v << 6 | (u[i] & 0x3Fu);
    ps->p += k;
    *cp = v;
    return 0;
}

static inline int gr_alternatives_(gr_parser_ *ps, int rule, int nested);

/* A new generated rule, named after the named rule `of` is part of
 * (name_k: a name of any length, never one of the grammar's own). */
static inline int gr_gen_rule_(gr_parser_ *ps, int of) {
    const char *nm = ps->r[ps->r[of].base].name;
    size_t n = strlen(nm);
    char *name = (char *)malloc(n + 16);
    if (!name) return gr_fail_(ps, ps->p, "out of memory");
    int len = snprintf(name, n + 16, "%s_%d", nm, ++ps->gen);
    int id = gr_rule_new_(ps, name, (size_t)len, ps->p);
    free(name);
    if (id >= 0) ps->r[id].defined = 1, ps->r[id].base = ps->r[of].base;
    return id;
}

/* Appends item[0..len) repeated per {min, max} (max < 0: unbounded) to
 * rule `rule`, as llama.cpp desugars repetition: copies for the minimum,
 * then nested optional rules or one recursive rule. The item must not
 * match the empty string: `rest ::= item rest | ε` would be left recursive
 * and nested optionals of a nullable item ambiguous in as many ways as
 * there are copies. whole: `rule` is the repetition alone (empty so far),
 * so with min 0 it becomes the first optional (or the recursive) rule
 * itself, a level less for the recognizer to expand. */
static inline int gr_repeat_into_(gr_parser_ *ps, int rule, const gr_el *item, int len, int min, int max, int whole) {
    int rc = 0;
    for (int i = 0; i < min && !rc; i++)
        for (int j = 0; j < len && !rc; j++) rc = gr_put_(ps, rule, item[j].type, item[j].v);
    if (!rc && (max < 0 || max > min)) {
        /* rest ::= item rest | ε (unbounded), or opt_k ::= item opt_{k+1} | ε */
        int opt = max < 0 ? 1 : max - min, first = -1, prev = -1;
        for (int k = 0; k < opt && !rc; k++) {
            int id = k == 0 && whole && min == 0 ? rule : gr_gen_rule_(ps, rule);
            if (id < 0) { rc = -1; break; }
            if (first < 0) first = id;
            if (prev >= 0) rc = gr_put_(ps, prev, GR_REF, (uint32_t)id) || gr_put_(ps, prev, GR_ALT, 0) || gr_put_(ps, prev, GR_END, 0);
            for (int j = 0; j < len && !rc; j++) rc = gr_put_(ps, id, item[j].type, item[j].v);
            if (max < 0 && !rc) rc = gr_put_(ps, id, GR_REF, (uint32_t)id) || gr_put_(ps, id, GR_ALT, 0) || gr_put_(ps, id, GR_END, 0);
            prev = id;
        }
        if (!rc && max >= 0 && prev >= 0) rc = gr_put_(ps, prev, GR_ALT, 0) || gr_put_(ps, prev, GR_END, 0);
        if (!rc && first != rule) rc = gr_put_(ps, rule, GR_REF, (uint32_t)first);
    }
    return rc;
}

/* The repetition {min, max} of the item that starts at element `last` of
 * rule `rule` and runs to its end. A literal or a class never matches the
 * empty string and is desugared in place; a rule reference becomes a
 * reference to a new rule whose body, until gr_finish_reps_, is `item` or
 * `item | ε` (what nullability and the left-recursion check need). */
static inline int gr_repeat_(gr_parser_ *ps, int rule, int last, int min, int max) {
    gr_rule_ *r = &ps->r[rule];
    int len = r->n - last;
    if (len == 1 && r->el[last].type == GR_REF) {
        int item = (int)r->el[last].v, id = gr_gen_rule_(ps, rule);
        if (id < 0) return -1;
        if (ps->nrep == ps->caprep) {
            int cap = ps->caprep ? ps->caprep * 2 : 8;
            gr_rep_ *nr = (gr_rep_ *)realloc(ps->rep, (size_t)cap * sizeof *nr);
            if (!nr) return gr_fail_(ps, ps->p, "out of memory");
            ps->rep = nr, ps->caprep = cap;
        }
        ps->rep[ps->nrep++] = (gr_rep_){id, item, min, max};
        ps->r[rule].el[last].v = (uint32_t)id;
        if (max != 0 && gr_put_(ps, id, GR_REF, (uint32_t)item)) return -1;
        if (min == 0 && max != 0 && gr_put_(ps, id, GR_ALT, 0)) return -1;
        return gr_put_(ps, id, GR_END, 0);
    }
    gr_el *item = (gr_el *)malloc((size_t)len * sizeof *item);
    if (!item) return gr_fail_(ps, ps->p, "out of memory");
    memcpy(item, r->el + last, (size_t)len * sizeof *item);
    r->n = last;
    int rc = gr_repeat_into_(ps, rule, item, len, min, max, 0);
    free(item);
    return rc;
}

static inline int gr_int_(gr_parser_ *ps, int *out) {
    const char *q = ps->p;
    long v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9' && v < 100000) v = v * 10 + (*ps->p++ - '0');
    if (ps->p == q) return gr_fail_(ps, q, "expected a number");
    if (v > 10000) return gr_fail_(ps, q, "repetition count above 10000");
    *out = (int)v;
    return 0;
}

/* A sequence of items into rule `rule`, until | ) newline (not nested) or end. */
static inline int gr_sequence_(gr_parser_ *ps, int rule, int nested) {
    int last = -1; /* start of the last item, for a repetition operator */
    while (ps->p < ps->end && !ps->failed) {
        char c = *ps->p;
        const char *at = ps->p;
        if (c == '"') {
            ps->p++;
            last = ps->r[rule].n;
            while (ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                if (gr_char_(ps, &cp) || gr_put_(ps, rule, GR_CHAR, cp)) return -1;
            }
            if (ps->p >= ps->end) return gr_fail_(ps, at, "unterminated string literal");
            ps->p++;
            if (ps->r[rule].n == last) last = -1; /* "" matches nothing: no item to repeat */
        } else if (c == '[') {
            ps->p++;
            last = ps->r[rule].n;
            int neg = ps->p < ps->end && *ps->p == '^';
            if (neg) ps->p++;
            int type = neg ? GR_CHAR_NOT : GR_CHAR;
            while (ps->p < ps->end && *ps->p != ']') {
                uint32_t lo, hi;
                if (gr_char_(ps, &lo) || gr_put_(ps, rule, type, lo)) return -1;
                type = GR_CHAR_ALT;
                if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
                    ps->p++;
                    if (gr_char_(ps, &hi)) return -1;
                    if (hi < lo) return gr_fail_(ps, ps->p, "range end below its start");
                    if (gr_put_(ps, rule, GR_RNG, hi)) return -1;
                }
            }
            if (ps->p >= ps->end) return gr_fail_(ps, at, "unterminated character class");
            if (ps->r[rule].n == last) return gr_fail_(ps, at, "empty character class");
            if (neg && gr_put_(ps, rule, GR_END, 0)) return -1; /* a sentinel for the check below, taken back */
            if (neg) ps->r[rule].n--, ps->total--;
            if (neg && !gr_class_admits_(ps->r[rule].el, (uint32_t)last, 0, 0xD7FF) && !gr_class_admits_(ps->r[rule].el, (uint32_t)last, 0xE000, 0x10FFFF))
                return gr_fail_(ps, at, "the character class matches no character");
            ps->p++;
        } else if (c == '.') {
            ps->p++;
            last = ps->r[rule].n;
            if (gr_put_(ps, rule, GR_ANY, 0)) return -1;
        } else if (gr_is_word_(c)) {
            const char *b = ps->p;
            while (ps->p < ps->end && gr_is_word_(*ps->p)) ps->p++;
            int id = gr_rule_id_(ps, b, (size_t)(ps->p - b), b);
            if (id < 0) return -1;
            last = ps->r[rule].n;
            if (gr_put_(ps, rule, GR_REF, (uint32_t)id)) return -1;
        } else if (c == '(') {
            if (ps->nest >= GR_MAX_NEST) return gr_fail_(ps, at, "groups nested deeper than %d", GR_MAX_NEST);
            ps->p++;
            int id = gr_gen_rule_(ps, rule);
            if (id < 0) return -1;
            gr_space_(ps, 1);
            ps->nest++;
            if (gr_alternatives_(ps, id, 1)) return -1;
            ps->nest--;
            if (ps->p >= ps->end || *ps->p != ')') return gr_fail_(ps, at, "unclosed (");
            ps->p++;
            last = ps->r[rule].n;
            if (gr_put_(ps, rule, GR_REF, (uint32_t)id)) return -1;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return gr_fail_(ps, at, "'%c' without an item before it", c);
            ps->p++;
            int min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            if (c == '{') {
                gr_space_(ps, 1);
                if (gr_int_(ps, &min)) return -1;
                gr_space_(ps, 1);
                max = min;
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    gr_space_(ps, 1);
                    max = -1;
                    if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9' && gr_int_(ps, &max)) return -1;
                    gr_space_(ps, 1);
                }
                if (ps->p >= ps->end || *ps->p != '}') return gr_fail_(ps, at, "expected } closing the repetition");
                ps->p++;
                if (max >= 0 && max < min) return gr_fail_(ps, at, "repetition {%d,%d}: the maximum is below the minimum", min, max);
            }
            if (gr_repeat_(ps, rule, last, min, max)) return -1;
            last = -1;
        } else
            break;
        gr_space_(ps, nested);
    }
    return ps->failed ? -1 : 0;
}

static inline int gr_alternatives_(gr_parser_ *ps, int rule, int nested) {
    if (gr_sequence_(ps, rule, nested)) return -1;
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        if (gr_put_(ps, rule, GR_ALT, 0)) return -1;
        gr_space_(ps, 1);
        if (gr_sequence_(ps, rule, nested)) return -1;
    }
    return gr_put_(ps, rule, GR_END, 0);
}

/* The rules that can finish: nullable (match the empty string; a class
 * never does) or, with classes, productive (match some text; every class
 * left is known to admit a character). A worklist, so linear in the
 * grammar: each alternative counts its elements not yet known to finish,
 * and a rule that finishes lowers the count of each alternative using it.
 * 0, or -1 out of memory. */
static inline int gr_finishing_(const gr_rule_ *r, int n, int classes, unsigned char *out) {
    memset(out, 0, (size_t)n);
    int nalt = 0, nuse = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n; k++) {
            nalt += r[i].el[k].type == GR_ALT || r[i].el[k].type == GR_END;
            nuse += r[i].el[k].type == GR_REF;
        }
    int *left = (int *)malloc(((size_t)nalt + 1) * sizeof(int)), *alt_rule = (int *)malloc(((size_t)nalt + 1) * sizeof(int));
    int *ustart = (int *)calloc((size_t)n + 1, sizeof(int)), *use = (int *)malloc(((size_t)nuse + 1) * sizeof(int));
    int *work = (int *)malloc(((size_t)n + 1) * sizeof(int)), nw = 0, rc = -1;
    if (!left || !alt_rule || !ustart || !use || !work) goto out;
    /* uses of each rule, by alternative: counted, then placed */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r[i].n; k++)
            if (r[i].el[k].type == GR_REF) ustart[r[i].el[k].v + 1]++;
    for (int i = 0; i < n; i++) ustart[i + 1] += ustart[i];
    int a = 0;
    for (int i = 0; i < n; i++) {
        int cnt = 0, dead = 0;
        for (int k = 0; k < r[i].n; k++) {
            gr_el e = r[i].el[k];
            if (e.type == GR_ALT || e.type == GR_END) {
                left[a] = dead ? -1 : cnt, alt_rule[a] = i;
                if (!dead && !cnt && !out[i]) out[i] = 1, work[nw++] = i;
                a++, cnt = 0, dead = 0;
            } else if (e.type == GR_REF) {
                cnt++;
                use[ustart[e.v]++] = a;
            } else if (e.type != GR_RNG && e.type != GR_CHAR_ALT && !classes)
                dead = 1;
        }
    }
    for (int i = n; i > 0; i--) ustart[i] = ustart[i - 1]; /* the fill moved each start to the next one's */
    ustart[0] = 0;
    while (nw) {
        int x = work[--nw];
        for (int u = ustart[x]; u < ustart[x + 1]; u++) {
            int al = use[u];
            if (left[al] > 0 && !--left[al] && !out[alt_rule[al]]) out[alt_rule[al]] = 1, work[nw++] = alt_rule[al];
        }
    }
    rc = 0;
out:
    free(left), free(alt_rule), free(ustart), free(use), free(work);
    return rc;
}

/* A rule that can reach itself from rule i before consuming a character
 * (left recursion), or -1. Depth first with an explicit stack fr of
 * frames (rule, element position, whether that position is at the start
 * of an alternative; 3 * n ints), path marking the rules on it, so a chain
 * of a million rules costs memory, not the C stack. */
static inline int gr_left_rec_(const gr_rule_ *r, const unsigned char *nul, int i, unsigned char *path, unsigned char *done, int *fr) {
    if (done[i]) return -1;
    int top = 0, bad = -1;
    fr[0] = i, fr[1] = 0, fr[2] = 1, path[i] = 1;
    while (top >= 0 && bad < 0) {
        int *f = fr + 3 * top, x = f[0], k = f[1], at_start = f[2], next = -1;
        for (; k < r[x].n; k++) {
            gr_el e = r[x].el[k];
            if (e.type == GR_ALT || e.type == GR_END) at_start = 1;
            else if (!at_start) continue;
            else if (e.type == GR_REF) {
                next = (int)e.v, at_start = nul[e.v], k++;
                break;
            } else if (e.type != GR_RNG && e.type != GR_CHAR_ALT)
                at_start = 0;
        }
        f[1] = k, f[2] = at_start;
        if (next < 0) { path[x] = 0, done[x] = 1, top--; continue; }
        if (path[next]) bad = next;
        else if (!done[next]) top++, f += 3, f[0] = next, f[1] = 0, f[2] = 1, path[next] = 1;
    }
    return bad;
}

/* Refuses left recursion over rules 0..n of ps. 0 or -1 (err set). */
static inline int gr_check_left_(gr_parser_ *ps) {
    unsigned char *nul = (unsigned char *)calloc((size_t)ps->n * 3 + 1, 1);
    int *fr = (int *)malloc(((size_t)ps->n * 3 + 3) * sizeof(int));
    if (!nul || !fr || gr_finishing_(ps->r, ps->n, 0, nul)) { free(nul), free(fr); return gr_fail_(ps, ps->p, "out of memory"); }
    for (int i = 0; i < ps->n && !ps->failed; i++) {
        int bad = gr_left_rec_(ps->r, nul, i, nul + ps->n, nul + 2 * ps->n, fr);
        if (bad >= 0) {
            if (ps->err && ps->errlen)
                snprintf(ps->err, ps->errlen, "line %d, column %d: rule %s is left recursive (it can reach itself before matching a character)",
                         ps->r[bad].line, ps->r[bad].col, ps->r[bad].name);
            ps->failed = 1;
        }
    }
    free(nul), free(fr);
    return ps->failed ? -1 : 0;
}

/* Refuses a rule that matches no text at all (`a ::= "x" a`: every way
 * through it needs itself again): the recognizer could follow it forever
 * and never end, and with it in root the grammar's language is empty. Run
 * on the grammar as written, whose classes each admit a character. */
static inline int gr_check_finite_(gr_parser_ *ps) {
    unsigned char *prod = (unsigned char *)malloc((size_t)ps->n + 1);
    if (!prod || gr_finishing_(ps->r, ps->n, 1, prod)) { free(prod); return gr_fail_(ps, ps->p, "out of memory"); }
    for (int i = 0; i < ps->n && !ps->failed; i++)
        if (!prod[i]) {
            const gr_rule_ *b = &ps->r[ps->r[i].base];
            if (ps->err && ps->errlen)
                snprintf(ps->err, ps->errlen, "line %d, column %d: rule %s%s matches no text: every way through it goes on forever",
                         b->line, b->col, b->name, b == &ps->r[i] ? "" : " (a group in it)");
            ps->failed = 1;
        }
    free(prod);
    return ps->failed ? -1 : 0;
}

/* The rule matching what rule x matches except the empty string: x itself
 * when x is not nullable, else a new rule (ne[x], its body written later
 * by gr_fill_nonempty_; queued in q). -1 on failure. */
static inline int gr_nonempty_id_(gr_parser_ *ps, const unsigned char *nul, int *ne, int *q, int *qn, int x) {
    if (!nul[x]) return x;
    if (ne[x] < 0) {
        if ((ne[x] = gr_gen_rule_(ps, x)) < 0) return -1;
        q[(*qn)++] = x;
    }
    return ne[x];
}

/* Writes the body of ne[x] (x nullable): for each alternative e1..ek of x
 * and each i whose e1..e(i-1) can all be empty, nonempty(ei) e(i+1)..ek.
 * The union is x's language less the empty string. A rule that matches
 * only the empty string gets a class that admits nothing. */
static inline int gr_fill_nonempty_(gr_parser_ *ps, const unsigned char *nul, int *ne, int *q, int *qn, int x) {
    int dst = ne[x], a = 0;
    while (a < ps->r[x].n) {
        int b = a;
        while (ps->r[x].el[b].type != GR_ALT && ps->r[x].el[b].type != GR_END) b++;
        for (int k = a; k < b;) {
            gr_el e = ps->r[x].el[k];
            int kend = k + 1, skip = e.type == GR_REF && nul[e.v];
            while (kend < b && (ps->r[x].el[kend].type == GR_RNG || ps->r[x].el[kend].type == GR_CHAR_ALT)) kend++;
            if (ps->r[dst].n && gr_put_(ps, dst, GR_ALT, 0)) return -1;
            if (skip) {
                int id = gr_nonempty_id_(ps, nul, ne, q, qn, (int)e.v);
                if (id < 0 || gr_put_(ps, dst, GR_REF, (uint32_t)id)) return -1;
            } else
                for (int j = k; j < kend; j++)
                    if (gr_put_(ps, dst, ps->r[x].el[j].type, ps->r[x].el[j].v)) return -1;
            for (int j = kend; j < b; j++)
                if (gr_put_(ps, dst, ps->r[x].el[j].type, ps->r[x].el[j].v)) return -1;
            if (!skip) break;
            k = kend;
        }
        a = b + 1;
    }
    if (!ps->r[dst].n && (gr_put_(ps, dst, GR_CHAR_NOT, 0) || gr_put_(ps, dst, GR_RNG, 0x10FFFF))) return -1;
    return gr_put_(ps, dst, GR_END, 0);
}

/* Gives each repetition of a rule its body. X{m,n} of an X that cannot
 * match the empty string is desugared as literals are; of a nullable X it
 * is X'{0,n} with X' = X less the empty string (the same language: the
 * empty copies can be dropped, or added back up to m), which keeps the
 * recognizer to one way per text instead of one per copy, and X* from
 * being left recursive. */
static inline int gr_finish_reps_(gr_parser_ *ps) {
    if (!ps->nrep) return 0;
    int n0 = ps->n, qn = 0, rc = -1;
    unsigned char *nul = (unsigned char *)malloc((size_t)n0);
    int *ne = (int *)malloc((size_t)n0 * sizeof(int)), *q = (int *)malloc((size_t)n0 * sizeof(int));
    if (!nul || !ne || !q) { gr_fail_(ps, ps->p, "out of memory"); goto out; }
    if (gr_finishing_(ps->r, n0, 0, nul)) { gr_fail_(ps, ps->p, "out of memory"); goto out; }
    for (int i = 0; i < n0; i++) ne[i] = -1;
    for (int k = 0; k < ps->nrep; k++) {
        gr_rep_ rp = ps->rep[k];
        int min = nul[rp.item] ? 0 : rp.min, item = gr_nonempty_id_(ps, nul, ne, q, &qn, rp.item);
        if (item < 0) goto out;
        gr_el el = {GR_REF, (uint32_t)item};
        ps->r[rp.rule].n = 0;
        if (gr_repeat_into_(ps, rp.rule, &el, 1, min, rp.max, 1)) goto out;
        gr_rule_ *r = &ps->r[rp.rule];
        if ((!r->n || r->el[r->n - 1].type != GR_END) && gr_put_(ps, rp.rule, GR_END, 0)) goto out; /* not closed as its own first rule */
    }
    { /* nullability again over every rule: the repetitions' new rules are
       * read now (the nonempty rules made so far have no body yet: not
       * nullable, which they are not); rules made from here on are
       * nonempty rules, never read nor queued */
        int n1 = ps->n;
        unsigned char *nn = (unsigned char *)realloc(nul, (size_t)n1);
        if (nn) nul = nn;
        int *ne2 = nn ? (int *)realloc(ne, (size_t)n1 * sizeof(int)) : NULL;
        if (ne2) ne = ne2;
        int *q2 = ne2 ? (int *)realloc(q, (size_t)n1 * sizeof(int)) : NULL;
        if (!q2) { gr_fail_(ps, ps->p, "out of memory"); goto out; }
        q = q2;
        if (gr_finishing_(ps->r, n1, 0, nul)) { gr_fail_(ps, ps->p, "out of memory"); goto out; }
        for (int i = n0; i < n1; i++) ne[i] = -1;
    }
    for (int i = 0; i < qn; i++)
        if (gr_fill_nonempty_(ps, nul, ne, q, &qn, q[i])) goto out;
    rc = 0;
out:
    free(nul), free(ne), free(q);
    return rc;
}

/* Parses GBNF text; root names the start rule ("root"). NULL with err as
 * "line L, column C: why". */
static inline gr_grammar *gr_parse(const char *text, size_t len, const char *root, char *err, size_t errlen) {
    gr_parser_ ps = {.s = text, .p = text, .end = text + len, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = 0;
    gr_grammar *g = NULL;
    for (;;) {
        gr_space_(&ps, 1);
        if (ps.p >= ps.end) break;
        const char *at = ps.p;
        if (!gr_is_word_(*ps.p)) { gr_fail_(&ps, at, "expected a rule name"); goto out; }
        while (ps.p < ps.end && gr_is_word_(*ps.p)) ps.p++;
        int id = gr_rule_id_(&ps, at, (size_t)(ps.p - at), at);
        if (id < 0) goto out;
        if (ps.r[id].defined) { gr_fail_(&ps, at, "rule %s is defined twice", ps.r[id].name); goto out; }
        ps.r[id].defined = 1;
        gr_space_(&ps, 0);
        if (ps.end - ps.p < 3 || memcmp(ps.p, "::=", 3)) { gr_fail_(&ps, ps.p, "expected ::= after %s", ps.r[id].name); goto out; }
        ps.p += 3;
        gr_space_(&ps, 1);
        if (gr_alternatives_(&ps, id, 0)) goto out;
        if (ps.p < ps.end && *ps.p != '\n') { gr_fail_(&ps, ps.p, "unexpected '%c'", *ps.p); goto out; }
    }
    int rid = -1;
    for (int i = 0; i < ps.n; i++) {
        if (!ps.r[i].defined) {
            snprintf(err, errlen, "line %d, column %d: rule %s is used but not defined", ps.r[i].line, ps.r[i].col, ps.r[i].name);
            ps.failed = 1;
            goto out;
        }
        if (!strcmp(ps.r[i].name, root)) rid = i;
    }
    if (rid < 0) { gr_fail_(&ps, ps.end, "no rule named %s", root); goto out; }
    /* left recursion in the grammar as written (named in its own rules),
     * then, as a check of the desugaring, in what is recognized */
    if (gr_check_left_(&ps) || gr_check_finite_(&ps) || gr_finish_reps_(&ps) || gr_check_left_(&ps)) goto out;
    g = (gr_grammar *)calloc(1, sizeof *g);
    int total = 0;
    for (int i = 0; i < ps.n; i++) total += ps.r[i].n;
    if (!g || !(g->el = (gr_el *)malloc((size_t)total * sizeof(gr_el) + sizeof(gr_el))) || !(g->start = (int *)malloc((size_t)ps.n * sizeof(int))) ||
        !(g->names = (char **)calloc((size_t)ps.n, sizeof(char *)))) {
        gr_free(g);
        g = NULL;
        gr_fail_(&ps, ps.p, "out of memory");
        goto out;
    }
    for (int i = 0; i < ps.n; i++) {
        g->start[i] = g->n_el;
        memcpy(g->el + g->n_el, ps.r[i].el, (size_t)ps.r[i].n * sizeof(gr_el));
        g->n_el += ps.r[i].n;
        g->names[i] = ps.r[i].name, ps.r[i].name = NULL;
    }
    g->n_rules = ps.n, g->root = rid;
out:
    for (int i = 0; i < ps.n; i++) free(ps.r[i].name), free(ps.r[i].el);
    free(ps.r), free(ps.rep), free(ps.ht);
    return g;
}

/* ------------------------------------------------------------ recognizing */

/* A set of stacks of element positions (the top is the last), stored one
 * after another; past GR_HASHED_FROM stacks, a hash index finds the
 * duplicates (a scan would make each step quadratic in the ways). */
typedef struct {
    uint32_t *d;
    size_t dn, dcap;
    int *off, *len;
    int n, cap;
    int oom;      /* a stack was lost: out of memory, or the limit below */
    int limit;    /* ... and it was GR_MAX_STACKS or GR_MAX_DEPTH */
    int *hidx;    /* [hcap] stack index + 1, 0 empty; at most half full */
    int hcap;
    int hashed;   /* hidx indexes this set */
} gr_stacks;

#define GR_MAX_STACKS 4096 /* ways the text may continue; beyond it the grammar is too ambiguous to follow */
#define GR_MAX_DEPTH 4096
#define GR_HASHED_FROM 32

static inline void gr_stacks_free(gr_stacks *s) {
    free(s->d), free(s->off), free(s->len), free(s->hidx);
    memset(s, 0, sizeof *s);
}

static inline void gr_stacks_clear_(gr_stacks *s) { s->n = 0, s->dn = 0, s->oom = 0, s->limit = 0, s->hashed = 0; }

static inline uint32_t gr_stack_hash_(const uint32_t *st, int n) {
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (int i = 0; i < n; i++) h = (h ^ st[i]) * 16777619u;
    return h;
}

static inline int gr_stack_is_(const gr_stacks *s, int i, const uint32_t *st, int n) {
    return s->len[i] == n && (!n || !memcmp(s->d + s->off[i], st, (size_t)n * 4));
}

static inline void gr_hash_put_(gr_stacks *s, int i) {
    uint32_t mask = (uint32_t)s->hcap - 1, slot = gr_stack_hash_(s->d + s->off[i], s->len[i]) & mask;
    while (s->hidx[slot]) slot = (slot + 1) & mask;
    s->hidx[slot] = i + 1;
}

/* Indexes the set's stacks in a table of at least 4 slots per stack (so
 * clearing it costs what the set does); 0, or -1 without memory (the
 * scans go on). */
static inline int gr_hash_build_(gr_stacks *s) {
    int cap = 64;
    while (cap < 4 * s->n) cap *= 2;
    if (cap > s->hcap) {
        int *h = (int *)realloc(s->hidx, (size_t)cap * sizeof(int));
        if (!h) return s->hashed = 0, -1;
        s->hidx = h, s->hcap = cap;
    }
    memset(s->hidx, 0, (size_t)s->hcap * sizeof(int));
    for (int i = 0; i < s->n; i++) gr_hash_put_(s, i);
    s->hashed = 1;
    return 0;
}

/* 1 when stack st is in s. */
static inline int gr_stacks_has_(gr_stacks *s, const uint32_t *st, int n) {
    if (s->hashed) {
        uint32_t mask = (uint32_t)s->hcap - 1;
        for (uint32_t slot = gr_stack_hash_(st, n) & mask; s->hidx[slot]; slot = (slot + 1) & mask)
            if (gr_stack_is_(s, s->hidx[slot] - 1, st, n)) return 1;
        return 0;
    }
    for (int i = 0; i < s->n; i++)
        if (gr_stack_is_(s, i, st, n)) return 1;
    if (s->n >= GR_HASHED_FROM) gr_hash_build_(s);
    return 0;
}

static inline void gr_stacks_add_(gr_stacks *s, const uint32_t *st, int n) {
    if (gr_stacks_has_(s, st, n)) return;
    if (s->n >= GR_MAX_STACKS || n > GR_MAX_DEPTH) { s->oom = s->limit = 1; return; }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        int *no = (int *)realloc(s->off, (size_t)cap * sizeof(int)), *nl = no ? (int *)realloc(s->len, (size_t)cap * sizeof(int)) : NULL;
        if (no) s->off = no;
        if (!no || !nl) { s->oom = 1; return; }
        s->len = nl, s->cap = cap;
    }
    if (s->dn + (size_t)n > s->dcap) {
        size_t cap = s->dcap ? s->dcap * 2 : 64;
        while (cap < s->dn + (size_t)n) cap *= 2;
        uint32_t *nd = (uint32_t *)realloc(s->d, cap * 4);
        if (!nd) { s->oom = 1; return; }
        s->d = nd, s->dcap = cap;
    }
    if (n) memcpy(s->d + s->dn, st, (size_t)n * 4);
    s->off[s->n] = (int)s->dn, s->len[s->n] = n;
    s->dn += (size_t)n, s->n++;
    if (s->hashed && (2 * s->n <= s->hcap ? (gr_hash_put_(s, s->n - 1), 0) : gr_hash_build_(s))) s->hashed = 0;
}

static inline int gr_is_char_(int t) { return t == GR_CHAR || t == GR_CHAR_NOT || t == GR_ANY; }

/* Position after the character class starting at pos. */
static inline uint32_t gr_after_class_(const gr_grammar *g, uint32_t pos) {
    if (g->el[pos].type == GR_ANY) return pos + 1;
    pos++;
    while (g->el[pos].type == GR_RNG || g->el[pos].type == GR_CHAR_ALT) pos++;
    return pos;
}

/* Expands a stack until its top is a character class (or it is empty),
 * adding each result to out. buf has room for GR_MAX_DEPTH + 2. */
static inline void gr_expand_(const gr_grammar *g, uint32_t *buf, int n, gr_stacks *out, int depth) {
    if (out->oom) return;
    if (!n) { gr_stacks_add_(out, buf, 0); return; }
    uint32_t pos = buf[n - 1];
    gr_el e = g->el[pos];
    if (e.type != GR_REF) { gr_stacks_add_(out, buf, n); return; }
    if (depth > GR_MAX_DEPTH || n > GR_MAX_DEPTH) { out->oom = out->limit = 1; return; }
    uint32_t next = pos + 1;
    int keep_next = g->el[next].type != GR_END && g->el[next].type != GR_ALT;
    for (uint32_t a = (uint32_t)g->start[e.v];;) {
        int m = n - 1;
        if (keep_next) buf[m++] = next;
        if (g->el[a].type != GR_END && g->el[a].type != GR_ALT) buf[m++] = a;
        gr_expand_(g, buf, m, out, depth + 1);
        buf[n - 1] = pos; /* restore what the expansion overwrote */
        while (g->el[a].type != GR_END && g->el[a].type != GR_ALT) a++;
        if (g->el[a].type == GR_END) break;
        a++;
    }
}

/* 1 when the class at pos admits code point cp. */
static inline int gr_match_(const gr_grammar *g, uint32_t pos, uint32_t cp) {
    if (g->el[pos].type == GR_ANY) return 1;
    int positive = g->el[pos].type == GR_CHAR, found = 0;
    do {
        if (g->el[pos + 1].type == GR_RNG) found |= g->el[pos].v <= cp && cp <= g->el[pos + 1].v, pos += 2;
        else found |= g->el[pos].v == cp, pos++;
    } while (g->el[pos].type == GR_CHAR_ALT);
    return found == positive;
}

/* 1 when the class at pos admits some code point in [lo, hi]. */
static inline int gr_match_range_(const gr_grammar *g, uint32_t pos, uint32_t lo, uint32_t hi) { return gr_class_admits_(g->el, pos, lo, hi); }

/* What the recognizer holds: the stacks, and the bytes of a code point
 * whose first bytes arrived (partial UTF-8). */
typedef struct {
    gr_stacks st;
    uint32_t pv; /* the partial code point's bits so far */
    int prem;    /* its bytes still to come (0: none pending) */
    int plen;    /* its bytes so far */
    uint32_t *buf; /* scratch of GR_MAX_DEPTH + 2 */
    gr_stacks alt[2]; /* gr_accept's work sets */
} gr_state;

static inline void gr_state_free(gr_state *s) {
    gr_stacks_free(&s->st), gr_stacks_free(&s->alt[0]), gr_stacks_free(&s->alt[1]);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* dst becomes a copy of src (dst zeroed or a state). 0 or -1 (out of memory). */
static inline int gr_state_copy(gr_state *dst, const gr_state *src) {
    if (!dst->buf && !(dst->buf = (uint32_t *)malloc((GR_MAX_DEPTH + 2) * sizeof(uint32_t)))) return -1;
    gr_stacks_clear_(&dst->st);
    for (int i = 0; i < src->st.n; i++) gr_stacks_add_(&dst->st, src->st.len[i] ? src->st.d + src->st.off[i] : NULL, src->st.len[i]);
    dst->pv = src->pv, dst->prem = src->prem, dst->plen = src->plen;
    return dst->st.oom ? -1 : 0;
}

/* Adds to out the stacks of entering rule r alone: each alternative
 * expanded until a character class is on top. buf: GR_MAX_DEPTH + 2. */
static inline void gr_enter_(const gr_grammar *g, int r, uint32_t *buf, gr_stacks *out) {
    for (uint32_t a = (uint32_t)g->start[r];;) {
        int m = 0;
        if (g->el[a].type != GR_END && g->el[a].type != GR_ALT) buf[m++] = a;
        gr_expand_(g, buf, m, out, 0);
        while (g->el[a].type != GR_END && g->el[a].type != GR_ALT) a++;
        if (g->el[a].type == GR_END) break;
        a++;
    }
}

/* The start state. 0, -1 (out of memory) or -2 (more ways to start than
 * GR_MAX_STACKS, or deeper than GR_MAX_DEPTH: too ambiguous to follow). */
static inline int gr_init(const gr_grammar *g, gr_state *s) {
    memset(s, 0, sizeof *s);
    if (!(s->buf = (uint32_t *)malloc((GR_MAX_DEPTH + 2) * sizeof(uint32_t)))) return -1;
    gr_enter_(g, g->root, s->buf, &s->st);
    return s->st.limit ? -2 : s->st.oom ? -1 : 0;
}

/* Whether the recognizer can follow g, checked before any text: the start
 * state, and the ways the text spreads into at every rule reference (the
 * referenced rule's alternatives, and what follows when it can be empty,
 * all at once), so an enum of more than GR_MAX_STACKS values is refused
 * here rather than failing mid-answer when the text reaches it. 0, -1 (out
 * of memory), or -2 with *rule the rule holding the first reference that
 * takes more than GR_MAX_STACKS ways (or nests deeper than GR_MAX_DEPTH),
 * -1 when it is the start; why[whylen] says which, for the caller to
 * prefix with what the grammar was written for. Ways that only add up
 * across references (two alternatives each reaching a large enum) still
 * reach gr_accept / gr_mask's -2 at run time. */
static inline int gr_check(const gr_grammar *g, int *rule, char *why, size_t whylen) {
    gr_state s;
    int rc = gr_init(g, &s);
    *rule = -1;
    for (int r = 0; r < g->n_rules && !rc; r++)
        for (uint32_t p = (uint32_t)g->start[r]; g->el[p].type != GR_END && !rc; p++) {
            if (g->el[p].type != GR_REF) continue;
            gr_stacks_clear_(&s.st);
            s.buf[0] = p;
            gr_expand_(g, s.buf, 1, &s.st, 0);
            rc = s.st.limit ? -2 : s.st.oom ? -1 : 0;
            if (rc == -2) *rule = r;
        }
    gr_state_free(&s);
    if (rc == -1) snprintf(why, whylen, "out of memory checking the grammar");
    else if (rc == -2)
        snprintf(why, whylen, "the grammar is too ambiguous to follow: %s%s%s the text can continue in more than %d ways at once (an enum or anyOf of "
                 "that many values, say)", *rule >= 0 ? "in its rule \"" : "at its start", *rule >= 0 ? g->names[*rule] : "", *rule >= 0 ? "\"" : "",
                 GR_MAX_STACKS);
    return rc;
}

/* Advances stacks `in` by code point cp into `out` (cleared first). */
static inline void gr_step_(const gr_grammar *g, const gr_stacks *in, uint32_t cp, gr_stacks *out, uint32_t *buf) {
    gr_stacks_clear_(out);
    for (int i = 0; i < in->n; i++) {
        int n = in->len[i];
        if (!n) continue;
        const uint32_t *st = in->d + in->off[i];
        uint32_t top = st[n - 1];
        if (!gr_is_char_(g->el[top].type) || !gr_match_(g, top, cp)) continue;
        memcpy(buf, st, (size_t)(n - 1) * 4);
        int m = n - 1;
        uint32_t nx = gr_after_class_(g, top);
        if (g->el[nx].type != GR_END && g->el[nx].type != GR_ALT) buf[m++] = nx;
        gr_expand_(g, buf, m, out, 0);
    }
}

/* 1 when some stack's top admits a scalar value in [lo, hi] (the
 * surrogates U+D800..U+DFFF are no characters: a sequence heading there
 * can never complete). */
static inline int gr_admits_range_(const gr_grammar *g, const gr_stacks *s, uint32_t lo, uint32_t hi) {
    uint32_t part[2][2] = {{lo, hi < 0xD7FF ? hi : 0xD7FF}, {lo > 0xE000 ? lo : 0xE000, hi}};
    for (int k = 0; k < 2; k++) {
        if (part[k][0] > part[k][1]) continue;
        for (int i = 0; i < s->n; i++) {
            int n = s->len[i];
            if (n && gr_is_char_(g->el[s->d[s->off[i] + n - 1]].type) && gr_match_range_(g, s->d[s->off[i] + n - 1], part[k][0], part[k][1]))
                return 1;
        }
    }
    return 0;
}

/* Feeds one byte through the UTF-8 decoder state (pv, prem, plen): 1 a
 * code point completed (*cp), 0 more bytes needed, -1 invalid. */
static inline int gr_utf8_(uint32_t *pv, int *prem, int *plen, unsigned char b, uint32_t *cp) {
    if (!*prem) {
        if (b < 0x80) { *cp = b; return 1; }
        if (b >= 0xC2 && b <= 0xDF) *pv = b & 0x1Fu, *prem = 1;
        else if (b >= 0xE0 && b <= 0xEF) *pv = b & 0x0Fu, *prem = 2;
        else if (b >= 0xF0 && b <= 0xF4) *pv = b & 0x07u, *prem = 3;
        else return -1;
        *plen = 1;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    *pv = *pv << 6 | (b & 0x3Fu), (*prem)--, (*plen)++;
    if (*prem) return 0;
    uint32_t v = *pv;
    int min = *plen == 2 ? 0x80 : *plen == 3 ? 0x800 : 0x10000;
    if ((int)v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *cp = v;
    return 1;
}

/* The code points a partial sequence (plen bytes in, prem to come) can
 * still become, overlong forms and values past U+10FFFF excluded. 0 when
 * none. */
static inline int gr_partial_range_(uint32_t pv, int prem, int plen, uint32_t *lo, uint32_t *hi) {
    int len = plen + prem;
    uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    *lo = pv << (6 * prem), *hi = *lo | ((1u << (6 * prem)) - 1);
    if (*lo < min) *lo = min;
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
    return *lo <= *hi;
}

/* Feeds bytes. 0, or -1 when the grammar cannot continue with them, -2
 * when following them takes more than GR_MAX_STACKS ways (the state is
 * then unchanged). */
static inline int gr_accept(const gr_grammar *g, gr_state *s, const uint8_t *b, size_t n) {
    const gr_stacks *cur = &s->st;
    int which = 0; /* the alt set the next step writes */
    uint32_t pv = s->pv;
    int prem = s->prem, plen = s->plen;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int r = gr_utf8_(&pv, &prem, &plen, b[i], &cp);
        if (r < 0) return -1;
        if (r == 0) continue;
        gr_step_(g, cur, cp, &s->alt[which], s->buf);
        if (s->alt[which].oom || !s->alt[which].n) return s->alt[which].limit ? -2 : -1;
        cur = &s->alt[which];
        which ^= 1;
    }
    if (prem) {
        uint32_t lo, hi;
        if (!gr_partial_range_(pv, prem, plen, &lo, &hi) || !gr_admits_range_(g, cur, lo, hi)) return -1;
    }
    if (cur != &s->st) { /* the result becomes the state; the old state's buffers become scratch */
        gr_stacks t = s->st;
        s->st = *cur;
        s->alt[which ^ 1] = t;
    }
    s->pv = pv, s->prem = prem, s->plen = plen;
    return 0;
}

/* The text the grammar forces from s: while every way to continue takes
 * one and the same code point next (a single-character class on every
 * stack, none complete), that code point. Writes at most cap bytes of
 * UTF-8 to out and returns the length (0: nothing forced). s is advanced
 * past what is returned. */
static inline size_t gr_forced_text(const gr_grammar *g, gr_state *s, char *out, size_t cap) {
    size_t n = 0;
    while (!s->prem && s->st.n && n + 4 <= cap) {
        uint32_t cp = 0;
        int one = 1;
        for (int i = 0; i < s->st.n && one; i++) {
            int len = s->st.len[i];
            if (!len) { one = 0; break; } /* the grammar may end here */
            uint32_t pos = s->st.d[s->st.off[i] + len - 1];
            gr_el e = g->el[pos];
            if (e.type != GR_CHAR || g->el[pos + 1].type == GR_RNG || g->el[pos + 1].type == GR_CHAR_ALT) one = 0;
            else if (i && e.v != cp) one = 0;
            else cp = e.v;
        }
        if (!one) break;
        unsigned char b[4];
        int k = js_utf8_encode_(cp, b);
        if (gr_accept(g, s, b, (size_t)k)) break;
        memcpy(out + n, b, (size_t)k), n += (size_t)k;
    }
    return n;
}

/* 1 when the text so far is a complete sentence of the grammar. */
static inline int gr_can_end(const gr_state *s) {
    if (s->prem) return 0;
    for (int i = 0; i < s->st.n; i++)
        if (!s->st.len[i]) return 1;
    return 0;
}

/* 1 when text[0..n) is a whole sentence of g (a fresh recognizer). */
static inline int gr_sentence_(const gr_grammar *g, const char *text, size_t n) {
    gr_state st;
    int ok = gr_init(g, &st) == 0 && gr_accept(g, &st, (const uint8_t *)text, n) == 0 && gr_can_end(&st);
    gr_state_free(&st);
    return ok;
}

/* ------------------------------------------------------------ vocabulary */

/* The tokens' bytes as a trie: node 0 is the root; children by byte.
 * Once built, the nodes are renumbered in depth-first order (children by
 * byte), so a walk is one pass over arrays and a subtree is a range
 * [i, end[i]) skipped in one step. */
typedef struct {
    int *child, *sib, *tok; /* first child, next sibling, first token ending here (-1) */
    unsigned char *byte;
    int *tok_next;          /* [n_tokens] next token with the same bytes */
    int n, cap, n_tokens, max_len;
    int *end, *dep, *par;   /* [n] after building: subtree end, depth (bytes), parent */
} gr_vocab;

static inline void gr_vocab_free(gr_vocab *v) {
    free(v->child), free(v->sib), free(v->tok), free(v->byte), free(v->tok_next);
    free(v->end), free(v->dep), free(v->par);
    memset(v, 0, sizeof *v);
}

static inline int gr_vocab_node_(gr_vocab *v, unsigned char b) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 1024;
        int *c = (int *)realloc(v->child, (size_t)cap * sizeof(int));
        if (c) v->child = c;
        int *s = c ? (int *)realloc(v->sib, (size_t)cap * sizeof(int)) : NULL;
        if (s) v->sib = s;
        int *t = s ? (int *)realloc(v->tok, (size_t)cap * sizeof(int)) : NULL;
        if (t) v->tok = t;
        unsigned char *by = t ? (unsigned char *)realloc(v->byte, (size_t)cap) : NULL;
        if (!by) return -1;
        v->byte = by, v->cap = cap;
    }
    v->child[v->n] = v->sib[v->n] = v->tok[v->n] = -1, v->byte[v->n] = b;
    return v->n++;
}

/* Renumbers the trie's nodes depth first (the root stays 0): byte, tok,
 * end, dep and par indexed by the new numbers; child and sib are freed
 * (nothing walks by links after this). 0 or -1. */
static inline int gr_vocab_order_(gr_vocab *v) {
    int n = v->n, nx = 1, d = 0;
    int *tok = (int *)malloc((size_t)n * sizeof(int)), *end = (int *)malloc((size_t)n * sizeof(int));
    int *dep = (int *)malloc((size_t)n * sizeof(int)), *par = (int *)malloc((size_t)n * sizeof(int));
    int *open = (int *)malloc((size_t)(v->max_len + 2) * sizeof(int)), *next = (int *)malloc((size_t)(v->max_len + 2) * sizeof(int));
    unsigned char *byte = (unsigned char *)malloc((size_t)n);
    if (!tok || !end || !dep || !par || !open || !next || !byte) {
        free(tok), free(end), free(dep), free(par), free(open), free(next), free(byte);
        return -1;
    }
    tok[0] = v->tok[0], dep[0] = 0, par[0] = -1, byte[0] = 0;
    open[0] = 0, next[0] = v->child[0];
    while (d >= 0) { /* open[k]: the new number of the node at depth k; next[k]: its next child to number */
        int c = next[d];
        if (c < 0) { end[open[d]] = nx, d--; continue; }
        next[d] = v->sib[c];
        int i = nx++;
        tok[i] = v->tok[c], byte[i] = v->byte[c], dep[i] = d + 1, par[i] = open[d];
        d++, open[d] = i, next[d] = v->child[c];
    }
    free(v->child), free(v->sib), free(v->tok), free(v->byte), free(open), free(next);
    v->child = v->sib = NULL;
    v->tok = tok, v->byte = byte, v->end = end, v->dep = dep, v->par = par;
    return 0;
}

/* Builds the trie of n tokens; bytes[i] NULL (or len 0) leaves token i out
 * (special tokens: never allowed by a grammar). 0 or -1. */
static inline int gr_vocab_build(gr_vocab *v, int n, const char *const *bytes, const size_t *lens) {
    memset(v, 0, sizeof *v);
    v->n_tokens = n;
    if (!(v->tok_next = (int *)malloc((size_t)n * sizeof(int) + sizeof(int))) || gr_vocab_node_(v, 0) < 0) return gr_vocab_free(v), -1;
    for (int i = 0; i < n; i++) {
        v->tok_next[i] = -1;
        if (!bytes[i] || !lens[i]) continue;
        int node = 0;
        for (size_t k = 0; k < lens[i]; k++) {
            unsigned char b = (unsigned char)bytes[i][k];
            int c = v->child[node], prev = -1;
            while (c >= 0 && v->byte[c] < b) prev = c, c = v->sib[c];
            if (c < 0 || v->byte[c] != b) {
                int nn = gr_vocab_node_(v, b);
                if (nn < 0) return gr_vocab_free(v), -1;
                v->sib[nn] = c;
                if (prev < 0) v->child[node] = nn;
                else v->sib[prev] = nn;
                c = nn;
            }
            node = c;
        }
        v->tok_next[i] = v->tok[node], v->tok[node] = i;
        if ((int)lens[i] > v->max_len) v->max_len = (int)lens[i];
    }
    return gr_vocab_order_(v) ? (gr_vocab_free(v), -1) : 0;
}

/* The walk's memory: stack sets interned (an id per distinct set) and the
 * transitions between them by code point (ASCII ones in a table per set),
 * so that a state met at many trie nodes (inside a JSON string almost
 * every character leads back to the same set) is stepped once per code
 * point, then looked up. Kept across masks of the same grammar; cleared
 * when it grows past GR_CACHE_SETS sets.
 *
 * And the token tables (XGrammar's idea, written for these stacks): what
 * a token does from a stack depends mostly on the stack's top frames. For
 * each distinct top of at most GR_KEY_DEPTH frames met, one walk of the
 * trie from those frames alone sorts every token into accepted (some way
 * consumes all its bytes without leaving the frames: accepted whatever
 * lies below), rejected (every way dies inside them), or uncertain (a way
 * leaves the frames with bytes still to go: only those depend on the rest
 * of the stack). A mask is then the union of its stacks' accepted bits
 * plus the uncertain tokens checked against the whole state; a stack of
 * at most GR_KEY_DEPTH frames is its own key and leaves nothing uncertain.
 * The tables outlive the set cache; they are dropped past GR_TAB_BYTES. */
#define GR_CACHE_SETS 16384
#define GR_KEY_DEPTH 4
#define GR_TAB_BYTES ((size_t)32 << 20)
typedef struct {
    uint32_t key[GR_KEY_DEPTH];
    int klen, whole; /* frames; whole: the stack itself, nothing below */
    uint64_t *acc;   /* [words] tokens accepted from these frames */
    int *unc, nunc;  /* uncertain subtrees as trie ranges [unc[2k], unc[2k+1]) */
    int lmax, smax;  /* the longest stack and the most stacks the walk met */
} gr_tab_;

/* The tables of one grammar over one vocabulary; they can move from one
 * context to another (gr_mask_give / gr_mask_take) to serve the next
 * request with the same grammar. */
typedef struct {
    gr_tab_ *tab;
    int n, cap, *idx, icap; /* idx: open addressing over the keys, table + 1 */
    size_t bytes;
    uint64_t gid; /* gr_grammar_id of the grammar they are for; 0 none */
    int words;
} gr_tables;

typedef struct {
    const gr_grammar *g;
    gr_stacks *sets;
    uint64_t *shash;
    int *smax_len;     /* [cap] the longest stack of each set */
    unsigned char *sempty; /* [cap] the set holds the empty stack */
    int **asc;         /* [cap] next set by ASCII code point (-3 not known yet), or NULL */
    int n, cap;
    int *sidx; /* open addressing over set hashes: set id + 1, 0 empty */
    int scap;
    uint64_t *tkey; /* (set id << 32 | code point) + 1, 0 empty */
    int *tval;      /* next set id, -1 dead */
    int tn, tcap;
    gr_stacks tmp;
    uint32_t *buf;
    int limit; /* a step of this mask hit GR_MAX_STACKS or GR_MAX_DEPTH */
    /* the walk: per trie depth, the set, the partial code point, whether
     * a way left the table's frames, the node the depth was stepped for */
    int *wsid, *wprem, *wplen, *wu, *wnode;
    uint32_t *wpv;
    int words; /* 64-bit words of a token bitmap */
    uint64_t *bits;
    gr_tables tb;
    int *use; /* [GR_MAX_STACKS] the tables of one mask */
    int whole_walk; /* tests: always walk the whole trie from the state */
    int built;      /* tables built since the context was made (for measurements) */
    uint64_t spread[256]; /* byte b -> eight bytes, byte k = bit k of b */
} gr_mask_ctx;

static inline void gr_cache_clear_(gr_mask_ctx *c) {
    for (int i = 0; i < c->n; i++) gr_stacks_free(&c->sets[i]), free(c->asc[i]), c->asc[i] = NULL;
    c->n = 0, c->tn = 0;
    if (c->sidx) memset(c->sidx, 0, (size_t)c->scap * sizeof(int));
    if (c->tkey) memset(c->tkey, 0, (size_t)c->tcap * sizeof(uint64_t));
}

static inline void gr_tables_clear_(gr_tables *t) {
    for (int i = 0; i < t->n; i++) free(t->tab[i].acc), free(t->tab[i].unc);
    t->n = 0, t->bytes = 0;
    if (t->idx) memset(t->idx, 0, (size_t)t->icap * sizeof(int));
}

static inline void gr_tables_free(gr_tables *t) {
    gr_tables_clear_(t);
    free(t->tab), free(t->idx);
    memset(t, 0, sizeof *t);
}

static inline void gr_tabs_clear_(gr_mask_ctx *c) { gr_tables_clear_(&c->tb); }

/* A hash of g's rules (two grammars parsed from the same text have the
 * same), never 0. */
static inline uint64_t gr_grammar_id(const gr_grammar *g) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)g->n_el ^ (uint64_t)g->root << 40;
    for (int i = 0; i < g->n_el; i++) h = (h ^ (g->el[i].type | (uint64_t)g->el[i].v << 8)) * 0x100000001b3ull;
    for (int r = 0; r < g->n_rules; r++) h = (h ^ (uint64_t)g->start[r]) * 0x100000001b3ull;
    return h ? h : 1;
}

/* Moves the context's tables out (for the next request with the same
 * grammar); the context keeps none. */
static inline gr_tables gr_mask_give(gr_mask_ctx *c) {
    gr_tables t = c->tb;
    memset(&c->tb, 0, sizeof c->tb);
    c->tb.words = c->words, c->g = NULL;
    return t;
}

/* Gives the context tables made by another (*t is emptied); they are kept
 * when they are for the grammar of the next mask over a vocabulary of
 * the same size, dropped otherwise. */
static inline void gr_mask_take(gr_mask_ctx *c, gr_tables *t) {
    gr_tables_free(&c->tb);
    c->tb = *t;
    memset(t, 0, sizeof *t);
    if (c->tb.words != c->words) gr_tables_free(&c->tb), c->tb.words = c->words;
    c->g = NULL; /* the next mask compares the grammar's id with the tables' */
}

static inline void gr_mask_ctx_free(gr_mask_ctx *c) {
    if (c->sets) gr_cache_clear_(c);
    gr_tables_free(&c->tb);
    free(c->sets), free(c->shash), free(c->smax_len), free(c->sempty), free(c->asc), free(c->sidx), free(c->tkey), free(c->tval), free(c->buf);
    free(c->wsid), free(c->wprem), free(c->wplen), free(c->wu), free(c->wnode), free(c->wpv), free(c->bits);
    free(c->use);
    gr_stacks_free(&c->tmp);
    memset(c, 0, sizeof *c);
}

static inline int gr_mask_ctx_init(gr_mask_ctx *c, const gr_vocab *v) {
    memset(c, 0, sizeof *c);
    c->scap = 2 * GR_CACHE_SETS, c->tcap = 1 << 16, c->cap = GR_CACHE_SETS;
    c->sets = (gr_stacks *)calloc((size_t)c->cap, sizeof(gr_stacks));
    c->shash = (uint64_t *)malloc((size_t)c->cap * sizeof(uint64_t));
    c->smax_len = (int *)malloc((size_t)c->cap * sizeof(int));
    c->sempty = (unsigned char *)malloc((size_t)c->cap);
    c->asc = (int **)calloc((size_t)c->cap, sizeof(int *));
    c->sidx = (int *)calloc((size_t)c->scap, sizeof(int));
    c->tkey = (uint64_t *)calloc((size_t)c->tcap, sizeof(uint64_t));
    c->tval = (int *)malloc((size_t)c->tcap * sizeof(int));
    c->buf = (uint32_t *)malloc((GR_MAX_DEPTH + 2) * sizeof(uint32_t));
    size_t dn = (size_t)v->max_len + 2;
    c->wsid = (int *)malloc(dn * sizeof(int)), c->wprem = (int *)malloc(dn * sizeof(int)), c->wplen = (int *)malloc(dn * sizeof(int));
    c->wu = (int *)malloc(dn * sizeof(int)), c->wnode = (int *)malloc(dn * sizeof(int)), c->wpv = (uint32_t *)malloc(dn * sizeof(uint32_t));
    c->words = c->tb.words = (v->n_tokens + 63) / 64;
    c->bits = (uint64_t *)malloc(((size_t)c->words + 1) * sizeof(uint64_t));
    c->use = (int *)malloc(GR_MAX_STACKS * sizeof(int));
    for (int b = 0; b < 256; b++) {
        uint8_t e[8];
        for (int k = 0; k < 8; k++) e[k] = (uint8_t)(b >> k & 1);
        memcpy(&c->spread[b], e, 8);
    }
    return c->sets && c->shash && c->smax_len && c->sempty && c->asc && c->sidx && c->tkey && c->tval && c->buf && c->wsid && c->wprem &&
                   c->wplen && c->wu && c->wnode && c->wpv && c->bits && c->use
               ? 0
               : -1;
}

static inline uint64_t gr_set_hash_(const gr_stacks *s) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->n; i++) {
        h = (h ^ (uint64_t)s->len[i]) * 0x100000001b3ull;
        for (int k = 0; k < s->len[i]; k++) h = (h ^ s->d[s->off[i] + k]) * 0x100000001b3ull;
    }
    return h;
}

static inline int gr_set_eq_(const gr_stacks *a, const gr_stacks *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->len[i] != b->len[i] || (a->len[i] && memcmp(a->d + a->off[i], b->d + b->off[i], (size_t)a->len[i] * 4))) return 0;
    return 1;
}

/* The id of set s (copied in when new), or -1 when the cache is full or
 * out of memory. */
static inline int gr_intern_(gr_mask_ctx *c, const gr_stacks *s) {
    uint64_t h = gr_set_hash_(s);
    int mask = c->scap - 1;
    for (int i = (int)(h & (uint64_t)mask);; i = (i + 1) & mask) {
        int id = c->sidx[i] - 1;
        if (id < 0) {
            if (c->n >= c->cap) return -1;
            gr_stacks *d = &c->sets[c->n];
            memset(d, 0, sizeof *d);
            int longest = 0, empty = 0;
            for (int k = 0; k < s->n; k++) {
                gr_stacks_add_(d, s->len[k] ? s->d + s->off[k] : NULL, s->len[k]);
                if (s->len[k] > longest) longest = s->len[k];
                empty |= !s->len[k];
            }
            if (d->oom) { gr_stacks_free(d); return -1; }
            c->shash[c->n] = h, c->smax_len[c->n] = longest, c->sempty[c->n] = (unsigned char)empty;
            c->sidx[i] = c->n + 1;
            return c->n++;
        }
        if (c->shash[id] == h && gr_set_eq_(&c->sets[id], s)) return id;
    }
}

/* The set reached from set id by code point cp: its id, -1 when no stack
 * survives, -2 when the cache cannot hold it (the caller clears it) or a
 * stack was lost (out of memory; c->limit set when to the limits). */
static inline int gr_next_(gr_mask_ctx *c, int id, uint32_t cp) {
    int *asc = cp < 128 ? c->asc[id] : NULL;
    if (asc && asc[cp] != -3) return asc[cp];
    uint64_t key = ((uint64_t)id << 32 | cp) + 1;
    int mask = c->tcap - 1, slot = (int)((key * 0x9E3779B97F4A7C15ull) >> 40) & mask;
    for (;; slot = (slot + 1) & mask) {
        if (!c->tkey[slot]) break;
        if (c->tkey[slot] == key) return c->tval[slot];
    }
    gr_step_(c->g, &c->sets[id], cp, &c->tmp, c->buf);
    if (c->tmp.oom) { c->limit |= c->tmp.limit; return -2; }
    int r = !c->tmp.n ? -1 : gr_intern_(c, &c->tmp);
    if (r == -1 && c->tmp.n) return -2;
    if (cp < 128) { /* ASCII: a table of the set's own */
        if (!asc && (asc = c->asc[id] = (int *)malloc(128 * sizeof(int))))
            for (int k = 0; k < 128; k++) asc[k] = -3;
        if (asc) { asc[cp] = r; return r; }
    }
    if (c->tn * 2 >= c->tcap) { /* grow the transition table */
        int ncap = c->tcap * 2;
        uint64_t *nk = (uint64_t *)calloc((size_t)ncap, sizeof(uint64_t));
        int *nv = nk ? (int *)malloc((size_t)ncap * sizeof(int)) : NULL;
        if (!nv) { free(nk); return r; } /* not remembered; still correct */
        for (int i = 0; i < c->tcap; i++)
            if (c->tkey[i]) {
                int s2 = (int)((c->tkey[i] * 0x9E3779B97F4A7C15ull) >> 40) & (ncap - 1);
                while (nk[s2]) s2 = (s2 + 1) & (ncap - 1);
                nk[s2] = c->tkey[i], nv[s2] = c->tval[i];
            }
        free(c->tkey), free(c->tval);
        c->tkey = nk, c->tval = nv, c->tcap = ncap, mask = ncap - 1;
        slot = (int)((key * 0x9E3779B97F4A7C15ull) >> 40) & mask;
        while (c->tkey[slot]) slot = (slot + 1) & mask;
    }
    c->tkey[slot] = key, c->tval[slot] = r, c->tn++;
    return r;
}

/* Steps trie node i (depth d) from the walk's state at depth d - 1 into
 * depth d: 1 some way goes on, 0 none (its subtree is dead), -2 the cache
 * is full or a limit was hit (gr_next_). */
static inline int gr_walk_step_(const gr_vocab *v, gr_mask_ctx *c, int i, int d) {
    uint32_t pv = c->wpv[d - 1], cp;
    int prem = c->wprem[d - 1], plen = c->wplen[d - 1], sid = c->wsid[d - 1];
    int r = gr_utf8_(&pv, &prem, &plen, v->byte[i], &cp);
    if (r < 0) return 0;
    if (r == 1) {
        if ((sid = gr_next_(c, sid, cp)) < 0) return sid == -2 ? -2 : 0;
    } else {
        uint32_t lo, hi;
        if (!gr_partial_range_(pv, prem, plen, &lo, &hi) || !gr_admits_range_(c->g, &c->sets[sid], lo, hi)) return 0;
    }
    c->wsid[d] = sid, c->wpv[d] = pv, c->wprem[d] = prem, c->wplen[d] = plen;
    return 1;
}

static inline void gr_bits_tokens_(const gr_vocab *v, int i, uint64_t *bits) {
    for (int t = v->tok[i]; t >= 0; t = v->tok_next[t]) bits[t >> 6] |= 1ull << (t & 63);
}

/* Sets in bits the tokens of trie nodes [lo, hi) (a run of whole subtrees
 * whose parent's state is at depth dep[lo] - 1) that the walk's state lets
 * through. 0 or -2 (gr_next_). */
static inline int gr_walk_(const gr_vocab *v, gr_mask_ctx *c, int lo, int hi, uint64_t *bits) {
    for (int i = lo; i < hi;) {
        int r = gr_walk_step_(v, c, i, v->dep[i]);
        if (r < 0) return r;
        if (!r) { i = v->end[i]; continue; }
        gr_bits_tokens_(v, i, bits);
        i++;
    }
    return 0;
}

/* The table of frames st[0..n) (whole: the stack itself) from the set
 * sid holding that one stack: one walk of the trie. 0 or -2 (gr_next_). */
static inline int gr_tab_fill_(const gr_vocab *v, gr_mask_ctx *c, gr_tab_ *t, int sid) {
    int cap = 0;
    memset(t->acc, 0, (size_t)c->words * sizeof(uint64_t));
    t->nunc = 0, t->lmax = c->smax_len[sid], t->smax = c->sets[sid].n;
    c->wsid[0] = sid, c->wpv[0] = 0, c->wprem[0] = c->wplen[0] = 0, c->wu[0] = 0;
    for (int i = 1; i < v->n;) {
        int d = v->dep[i];
        /* a way that left the frames at or before the parent's last code point */
        int u = c->wu[d - 1] || (!t->whole && c->sempty[c->wsid[d - 1]]);
        int r = gr_walk_step_(v, c, i, d);
        if (r < 0) return r;
        if (!r) {
            uint32_t pv = c->wpv[d - 1], cp;
            int prem = c->wprem[d - 1], plen = c->wplen[d - 1];
            if (u && gr_utf8_(&pv, &prem, &plen, v->byte[i], &cp) >= 0) { /* uncertain subtree (invalid UTF-8 never is) */
                if (t->nunc && t->unc[2 * t->nunc - 1] == i) t->unc[2 * t->nunc - 1] = v->end[i];
                else {
                    if (t->nunc == cap) {
                        int nc = cap ? cap * 2 : 64, *nu = (int *)realloc(t->unc, (size_t)nc * 2 * sizeof(int));
                        if (!nu) return -2;
                        t->unc = nu, cap = nc;
                    }
                    t->unc[2 * t->nunc] = i, t->unc[2 * t->nunc + 1] = v->end[i], t->nunc++;
                }
            }
            i = v->end[i];
            continue;
        }
        int s = c->wsid[d];
        if (c->smax_len[s] > t->lmax) t->lmax = c->smax_len[s];
        if (c->sets[s].n > t->smax) t->smax = c->sets[s].n;
        c->wu[d] = u;
        gr_bits_tokens_(v, i, t->acc);
        i++;
    }
    return 0;
}

static inline uint32_t gr_key_hash_(const uint32_t *k, int n, int whole) {
    uint32_t h = gr_stack_hash_(k, n) ^ (uint32_t)whole * 0x9E3779B9u;
    return h ? h : 1;
}

/* The table of the stack st[0..n): its index, built when new; -2 as
 * gr_next_ (the cache is full, or a limit: c->limit), -1 out of memory. */
static inline int gr_tab_of_(const gr_vocab *v, gr_mask_ctx *c, const uint32_t *st, int n) {
    int k = n < GR_KEY_DEPTH ? n : GR_KEY_DEPTH, whole = n <= GR_KEY_DEPTH;
    const uint32_t *key = st + n - k;
    uint32_t h = gr_key_hash_(key, k, whole);
    if (c->tb.icap) {
        for (int s = (int)(h & (uint32_t)(c->tb.icap - 1));; s = (s + 1) & (c->tb.icap - 1)) {
            int id = c->tb.idx[s] - 1;
            if (id < 0) break;
            gr_tab_ *t = &c->tb.tab[id];
            if (t->klen == k && t->whole == whole && !memcmp(t->key, key, (size_t)k * 4)) return id;
        }
    }
    size_t tb = (size_t)c->words * sizeof(uint64_t);
    if (c->tb.bytes + tb > GR_TAB_BYTES) gr_tabs_clear_(c);
    if (c->tb.n == c->tb.cap) {
        int nc = c->tb.cap ? c->tb.cap * 2 : 64;
        gr_tab_ *nt = (gr_tab_ *)realloc(c->tb.tab, (size_t)nc * sizeof *nt);
        if (!nt) return -1;
        c->tb.tab = nt, c->tb.cap = nc;
    }
    if (4 * (c->tb.n + 1) > 3 * c->tb.icap) { /* the index at most 3/4 full */
        int nc = c->tb.icap ? c->tb.icap * 2 : 256, *ni = (int *)calloc((size_t)nc, sizeof(int));
        if (!ni) return -1;
        for (int i = 0; i < c->tb.n; i++) {
            gr_tab_ *t = &c->tb.tab[i];
            int s = (int)(gr_key_hash_(t->key, t->klen, t->whole) & (uint32_t)(nc - 1));
            while (ni[s]) s = (s + 1) & (nc - 1);
            ni[s] = i + 1;
        }
        free(c->tb.idx), c->tb.idx = ni, c->tb.icap = nc;
    }
    gr_tab_ *t = &c->tb.tab[c->tb.n];
    memset(t, 0, sizeof *t);
    memcpy(t->key, key, (size_t)k * 4), t->klen = k, t->whole = whole;
    if (!(t->acc = (uint64_t *)malloc(tb))) return -1;
    gr_stacks_clear_(&c->tmp);
    gr_stacks_add_(&c->tmp, key, k);
    int sid = c->tmp.oom ? -1 : gr_intern_(c, &c->tmp), rc = sid < 0 ? -2 : gr_tab_fill_(v, c, t, sid);
    if (rc) { free(t->acc), free(t->unc); return rc; }
    int s = (int)(h & (uint32_t)(c->tb.icap - 1));
    while (c->tb.idx[s]) s = (s + 1) & (c->tb.icap - 1);
    c->tb.idx[s] = c->tb.n + 1, c->tb.bytes += tb + (size_t)t->nunc * 2 * sizeof(int), c->built++;
    return c->tb.n++;
}

/* The uncertain subtrees of table t checked from the whole state (set
 * sid, no partial code point) into c->bits. 0 or -2 (gr_next_). */
static inline int gr_tab_check_(const gr_vocab *v, gr_mask_ctx *c, const gr_tab_ *t, int sid) {
    int path = 0; /* depths 1..path hold the states of wnode[1..path] */
    c->wsid[0] = sid, c->wpv[0] = 0, c->wprem[0] = c->wplen[0] = 0;
    for (int k = 0; k < t->nunc; k++) {
        int lo = t->unc[2 * k], hi = t->unc[2 * k + 1], d = v->dep[lo], alive = 1, e = d - 1;
        for (int x = v->par[lo]; e >= 1 && !(e <= path && c->wnode[e] == x); x = v->par[x], e--) c->wnode[e] = x; /* up to the known part */
        for (int f = e + 1; f < d; f++) { /* the ancestors below it, stepped */
            int r = gr_walk_step_(v, c, c->wnode[f], f);
            if (r < 0) return r;
            if (!r) { alive = 0, path = f - 1; break; }
        }
        if (!alive) continue;
        path = d - 1;
        int r = gr_walk_(v, c, lo, hi, c->bits);
        if (r < 0) return r;
    }
    return 0;
}

/* The mask of state s by the tables of its stacks' tops into c->bits: 0,
 * 1 when the tables cannot decide it (a partial code point pending, or a
 * stack so deep or a state so wide that a limit could bind: the caller
 * walks the whole trie), -2 as gr_next_, -1 out of memory. */
static inline int gr_mask_tabs_(const gr_vocab *v, gr_mask_ctx *c, const gr_state *s, int sid) {
    if (s->prem || c->whole_walk) return 1;
    int nuse = 0, ways = 0;
    for (int i = 0; i < s->st.n; i++) {
        int n = s->st.len[i];
        if (!n) continue;
        int id = gr_tab_of_(v, c, s->st.d + s->st.off[i], n);
        if (id < 0) return id;
        const gr_tab_ *t = &c->tb.tab[id];
        if (n - t->klen + t->lmax > GR_MAX_DEPTH - 2 || (ways += t->smax) > GR_MAX_STACKS) return 1;
        int seen = 0;
        for (int k = 0; k < nuse && !seen; k++) seen = c->use[k] == id;
        if (!seen) c->use[nuse++] = id;
    }
    memset(c->bits, 0, (size_t)c->words * sizeof(uint64_t));
    for (int k = 0; k < nuse; k++) {
        const uint64_t *a = c->tb.tab[c->use[k]].acc;
        for (int w = 0; w < c->words; w++) c->bits[w] |= a[w];
    }
    for (int k = 0; k < nuse; k++) {
        int r = gr_tab_check_(v, c, &c->tb.tab[c->use[k]], sid);
        if (r) return r;
    }
    return 0;
}

/* Tables of recent grammars, for the next request with the same one (a
 * client sends the same tools and schema request after request): at most
 * GR_TABCACHE_N grammars and GR_TABCACHE_BYTES, the least recently kept
 * dropped first. */
#define GR_TABCACHE_N 8
#define GR_TABCACHE_BYTES ((size_t)128 << 20)
typedef struct {
    gr_tables t[GR_TABCACHE_N];
    uint64_t when[GR_TABCACHE_N], clock;
} gr_tabcache;

static inline void gr_tabcache_free(gr_tabcache *k) {
    for (int i = 0; i < GR_TABCACHE_N; i++) gr_tables_free(&k->t[i]);
    memset(k, 0, sizeof *k);
}

/* Keeps *t (emptied): it replaces the entry of the same grammar when it
 * holds more tables, else the oldest; tables of no grammar are freed. */
static inline void gr_tabcache_put(gr_tabcache *k, gr_tables *t) {
    int at = -1;
    for (int i = 0; i < GR_TABCACHE_N && at < 0; i++)
        if (k->t[i].gid == t->gid) at = i;
    if (!t->gid || !t->n || (at >= 0 && k->t[at].n >= t->n)) { gr_tables_free(t); return; }
    for (int i = 0; i < GR_TABCACHE_N && at < 0; i++)
        if (!k->t[i].n) at = i;
    if (at < 0) /* the least recently kept */
        for (int i = at = 0; i < GR_TABCACHE_N; i++)
            if (k->when[i] < k->when[at]) at = i;
    gr_tables_free(&k->t[at]);
    k->t[at] = *t, k->when[at] = ++k->clock;
    memset(t, 0, sizeof *t);
    for (;;) { /* within the bytes, the oldest others dropped */
        size_t all = 0;
        int old = -1;
        for (int i = 0; i < GR_TABCACHE_N; i++) {
            all += k->t[i].bytes;
            if (i != at && k->t[i].n && (old < 0 || k->when[i] < k->when[old])) old = i;
        }
        if (all <= GR_TABCACHE_BYTES || old < 0) break;
        gr_tables_free(&k->t[old]);
    }
}

/* Moves the tables of grammar id gid into *out: 1, or 0 when none are kept. */
static inline int gr_tabcache_take(gr_tabcache *k, uint64_t gid, gr_tables *out) {
    for (int i = 0; i < GR_TABCACHE_N; i++)
        if (k->t[i].gid == gid && k->t[i].n) {
            *out = k->t[i];
            memset(&k->t[i], 0, sizeof k->t[i]);
            return 1;
        }
    return 0;
}

/* Bits set in x. */
static inline int gr_popcount_(uint64_t x) {
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (int)((x * 0x0101010101010101ull) >> 56);
}

/* Sets allowed[t] = 1 for each token whose bytes can continue the text
 * (0 for the others, and for tokens left out of the trie); returns how
 * many are allowed, -1 (out of memory) or -2 (some token's bytes take
 * more than GR_MAX_STACKS ways to follow: too ambiguous to decide).
 * Whether the grammar may end here is gr_can_end. */
static inline int gr_mask(const gr_grammar *g, const gr_state *s, const gr_vocab *v, gr_mask_ctx *cx, uint8_t *allowed) {
    int rc = -1;
    for (int attempt = 0; attempt < 2 && rc == -1; attempt++) {
        if (cx->g != g) {
            uint64_t id = gr_grammar_id(g);
            gr_cache_clear_(cx), cx->g = g;
            if (cx->tb.gid != id) gr_tabs_clear_(cx), cx->tb.gid = id;
        }
        else if (attempt) gr_cache_clear_(cx);
        cx->limit = 0;
        int sid = gr_intern_(cx, &s->st);
        if (sid < 0) continue;
        int r = gr_mask_tabs_(v, cx, s, sid);
        if (r == 1) {
            memset(cx->bits, 0, (size_t)cx->words * sizeof(uint64_t));
            cx->wsid[0] = sid, cx->wpv[0] = s->pv, cx->wprem[0] = s->prem, cx->wplen[0] = s->plen;
            r = gr_walk_(v, cx, 1, v->n, cx->bits);
        }
        if (cx->limit) return -2;
        if (!r) rc = 0;
    }
    if (rc) return rc;
    int n = 0, full = v->n_tokens / 64;
    for (int w = 0; w < cx->words; w++) {
        uint64_t x = cx->bits[w];
        n += gr_popcount_(x);
        if (w < full) /* eight tokens a store: the bits of a byte spread to one byte each */
            for (int k = 0; k < 8; k++) {
                memcpy(allowed + w * 64 + 8 * k, &cx->spread[x >> (8 * k) & 0xFF], 8);
            }
        else
            for (int k = 0; k < v->n_tokens - w * 64; k++) allowed[w * 64 + k] = (uint8_t)(x >> k & 1);
    }
    return n;
}

/* ------------------------------------------------------------ JSON schema */

typedef struct {
    jw out;   /* the grammar text */
    int n;    /* rules made */
    char *err;
    size_t errlen;
    int failed;
    const js_doc *d;
    int root;            /* the node "#" of a $ref names */
    int *memo;           /* [d->n] a compiled node's rule; 0 not yet, -2 matches nothing */
    unsigned char *busy; /* [d->n] 1 while compiled, 2 once referred to meanwhile */
    int legacy;          /* $schema is draft 7 or older: the siblings of $ref are ignored */
    int has_ref;         /* the document holds a $ref: a nested $id would change what it points at */
    int exact;           /* the schema's whole language; 0 (generation): an object that lists its properties and says
                          * nothing of additionalProperties writes no other keys, as peers' structured output does */
    jw fmt;              /* the rules of the formats used (fmt-<name>, fmtraw-<name>), appended to out at the end */
    unsigned fmt_done, fmt_raw_done; /* bit f: gr_formats_[f] is in fmt */
    int leap_done;       /* fmt-leap is in fmt */
    uint64_t *mkey;      /* schemas compiled for some types only (beside a "type"): node * 128 + types + 1, 0 empty */
    int *mrule, mcap, mn; /* their rules (-2: no value), open addressing */
    unsigned char *mbusy;
    int alone;           /* compiling one branch for gr_js_oneof_'s membership checks: no further such checks */
} gr_js_;

#define GR_JS_MAX_DEPTH 256   /* nested schemas, $ref hops counted */
#define GR_JS_MAX_COUNT 10000 /* minLength, maxItems, ...: the grammar's repetition limit */
#define GR_JS_MAX_KEY 1000    /* code points of a property name beside additionalProperties */

/* JSON types as bits; a number is integral (1, 1.0) or not (1.5). */
enum { GR_T_NULL = 1, GR_T_BOOL = 2, GR_T_OBJ = 4, GR_T_ARR = 8, GR_T_STR = 16, GR_T_FRAC = 32, GR_T_INT = 64, GR_T_ALL = 127 };

static inline int gr_js_fail_(gr_js_ *c, const char *fmt, ...) {
    if (!c->failed && c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    c->failed = 1;
    return -1;
}

/* A GBNF string literal for s[0..n). */
static inline void gr_js_lit_(jw *w, const char *s, size_t n) {
    jw_lit(w, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, jw_raw(w, e, 2);
        else if (c < 0x20 || c == 0x7f) snprintf(e, sizeof e, "\\x%02x", c), jw_lit(w, e);
        else jw_raw(w, (const char *)&c, 1);
    }
    jw_lit(w, "\"");
}

/* A list of texts (enum values as written) to be one alternation. */
typedef struct {
    char *s;
    size_t len;
} gr_js_text_;
typedef struct {
    gr_js_text_ *t;
    int n, cap;
} gr_js_alts_;

static inline void gr_js_alts_free_(gr_js_alts_ *a) {
    for (int i = 0; i < a->n; i++) free(a->t[i].s);
    free(a->t);
    memset(a, 0, sizeof *a);
}

/* Adds a copy of s[0..n). 0 or -1 (out of memory). */
static inline int gr_js_alts_add_(gr_js_alts_ *a, const char *s, size_t n) {
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 16;
        gr_js_text_ *nt = (gr_js_text_ *)realloc(a->t, (size_t)nc * sizeof *nt);
        if (!nt) return -1;
        a->t = nt, a->cap = nc;
    }
    char *c = (char *)malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n), c[n] = 0;
    a->t[a->n].s = c, a->t[a->n++].len = n;
    return 0;
}

static inline int gr_js_text_cmp_(const void *x, const void *y) {
    const gr_js_text_ *a = (const gr_js_text_ *)x, *b = (const gr_js_text_ *)y;
    int r = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
    return r ? r : a->len < b->len ? -1 : a->len > b->len;
}

#define GR_JS_TRIE_NEST 256 /* nested groups of an alternation's trie; deeper, the rest is written flat */

/* Texts t[lo..hi) (sorted, distinct, sharing their first `off` bytes)
 * from byte off on, as GBNF: their common prefix, then one group whose
 * alternatives start with different characters (and `?` when a text ends
 * there). A character is never split between a literal and a group. */
static inline void gr_js_trie_(jw *w, const gr_js_text_ *t, int lo, int hi, size_t off, int nest) {
    const char *f = t[lo].s, *l = t[hi - 1].s;
    size_t fl = t[lo].len, ll = t[hi - 1].len, p = off;
    while (p < fl && p < ll && f[p] == l[p]) p++; /* sorted: the first and last share what all share */
    while (p > off && ((p < fl && (f[p] & 0xC0) == 0x80) || (p < ll && (l[p] & 0xC0) == 0x80))) p--;
    if (p > off) gr_js_lit_(w, f + off, p - off);
    if (hi - lo == 1) {
        if (p == off && fl == off) jw_lit(w, "\"\"");
        return;
    }
    int ends = fl == p, groups = 0;
    if (p > off) jw_lit(w, " ");
    jw_lit(w, "(");
    for (int i = lo + ends; i < hi;) {
        unsigned char b = (unsigned char)t[i].s[p];
        size_t cl = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        int j = i + 1;
        if (nest < GR_JS_TRIE_NEST)
            while (j < hi && t[j].len >= p + cl && !memcmp(t[j].s + p, t[i].s + p, cl)) j++;
        if (groups++) jw_lit(w, " | ");
        gr_js_trie_(w, t, i, j, p, nest + 1);
        i = j;
    }
    jw_lit(w, ends ? ")?" : ")");
}

/* The texts of a as one GBNF alternation into w, duplicates dropped, as a
 * trie (gr_js_trie_); a is sorted. */
static inline void gr_js_alts_write_(jw *w, gr_js_alts_ *a) {
    int m = 0;
    qsort(a->t, (size_t)a->n, sizeof *a->t, gr_js_text_cmp_);
    for (int i = 0; i < a->n; i++) {
        if (m && !gr_js_text_cmp_(&a->t[m - 1], &a->t[i])) { free(a->t[i].s); continue; }
        a->t[m++] = a->t[i];
    }
    a->n = m;
    if (m) gr_js_trie_(w, a->t, 0, m, 0, 0);
}

/* jkey/kchar: an object key as JSON writes it (json.dumps, jw_strn): one
 * spelling per string (escapes only where JSON requires them), so keys
 * the schema names can be told apart from the others exactly. jcharb: a
 * character of a length-bounded string (no escaped surrogate halves, so
 * that each counts as one code point). */
static const char gr_js_prims_[] =
    "ws ::= [ \\t\\n]{0,4}\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jchar ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "jcharb ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n"
    "kchar ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" kesc\n"
    "kesc ::= [\"\\\\bfnrt] | \"u00\" (\"0\" [0-7bef] | \"1\" [0-9a-f])\n"
    "jkey ::= \"\\\"\" kchar* \"\\\"\"\n"
    "jint ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n"
    "jnumber ::= jint (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "jbool ::= \"true\" | \"false\"\n"
    "jnull ::= \"null\"\n"
    "jvalue ::= jobject | jarray | jstring | jnumber | jbool | jnull\n"
    "jobject ::= \"{\" ws (jstring ws \":\" ws jvalue ws (\",\" ws jstring ws \":\" ws jvalue ws)*)? \"}\"\n"
    "jarray ::= \"[\" ws (jvalue ws (\",\" ws jvalue ws)*)? \"]\"\n";

static inline int gr_js_schema_(gr_js_ *c, const js_doc *d, int s, int depth);

/* Frees what compiling took besides the text and the format rules. */
static inline void gr_js_done_(gr_js_ *c) { free(c->memo), free(c->busy), free(c->mkey), free(c->mrule), free(c->mbusy); }
static inline int gr_js_schema_m_(gr_js_ *c, const js_doc *d, int s, int depth, int mask);
static inline void gr_js_start_(gr_js_ *c, const js_doc *d, int root);
static inline int gr_js_equal_(const js_doc *d, int a, int b, int depth);
static inline int gr_js_deref_(gr_js_ *c, const js_doc *d, int b);
static inline int gr_js_obj_apart_(gr_js_ *c, const js_doc *d, int a, int b);
static inline void gr_js_short_(double x, char *out, size_t cap);
static inline gr_grammar *gr_js_alone_(gr_js_ *c, const js_doc *d, int b);
static inline int gr_js_pattern_keys_(gr_js_ *c, const js_doc *d, int pp, int depth, jw *key, int *val);
static inline int gr_js_key_matches_(gr_js_ *c, const js_doc *d, int pp, const char *key, size_t n);

/* A new rule name r<k>; writes "r<k> ::= " and returns k. */
static inline int gr_js_rule_(gr_js_ *c) {
    char b[32];
    int k = ++c->n;
    snprintf(b, sizeof b, "r%d ::= ", k);
    jw_lit(&c->out, b);
    return k;
}

static inline void gr_js_ref_(jw *w, int k) {
    char b[32];
    snprintf(b, sizeof b, "r%d", k);
    jw_lit(w, b);
}

/* Writes rule k ::= body (a line). */
static inline void gr_js_def_(gr_js_ *c, int k, const jw *body) {
    char b[32];
    snprintf(b, sizeof b, "r%d ::= ", k);
    jw_lit(&c->out, b), jw_raw(&c->out, body->s ? body->s : "\"\"", body->s ? body->n : 2), jw_lit(&c->out, "\n");
}

/* 1 when property p's key is listed in the `required` array req. */
static inline int gr_js_required_(const js_doc *d, int req, int p) {
    for (int r = js_first(d, req); r >= 0; r = js_next(d, r))
        if (js_typeof(d, r) == JS_STR && js_str_len(d, r) == js_key_len(d, p) && !memcmp(js_str(d, r), js_key(d, p), js_key_len(d, p)))
            return 1;
    return 0;
}

/* A count keyword of s (minLength, maxItems, ...): *out = its value, or
 * def when absent. A count must be a non-negative integer (2.0 is one);
 * above GR_JS_MAX_COUNT it is refused by name. 0 or -1. */
static inline int gr_js_count_(gr_js_ *c, const js_doc *d, int s, const char *key, int def, int *out) {
    int i = js_get(d, s, key);
    *out = def;
    if (i < 0) return 0;
    double v = js_num(d, i);
    if (!js_is_num(d, i) || v < 0 || v != (double)(int64_t)v) return gr_js_fail_(c, "\"%s\" must be a non-negative integer", key);
    if (v > GR_JS_MAX_COUNT) {
        if (!c->exact && !strncmp(key, "max", 3)) v = GR_JS_MAX_COUNT; /* generation: at most the limit, a valid subset */
        else return gr_js_fail_(c, "\"%s\" above %d is not supported%s", key, GR_JS_MAX_COUNT, strncmp(key, "max", 3) ? "" : " (as the whole language)");
    }
    *out = (int)v;
    return 0;
}

/* The type bits of a JSON value (1.0 is an integer, as JSON Schema says). */
static inline int gr_js_value_type_(const js_doc *d, int v) {
    switch (js_typeof(d, v)) {
    case JS_NULL: return GR_T_NULL;
    case JS_TRUE: case JS_FALSE: return GR_T_BOOL;
    case JS_STR: return GR_T_STR;
    case JS_ARR: return GR_T_ARR;
    case JS_OBJ: return GR_T_OBJ;
    default: return d->nodes[v].is_int || js_num(d, v) == floor(js_num(d, v)) ? GR_T_INT : GR_T_FRAC;
    }
}

/* A value as the engine writes JSON, one spelling per value: compact,
 * strings as jw_strn, integral numbers below 1e16 as integers, others
 * in the shortest round-trip form. An object of two or more keys is
 * refused (its keys could come in any order). 0 or -1. */
static inline int gr_js_canon_(gr_js_ *c, jw *w, const js_doc *d, int v) {
    switch (js_typeof(d, v)) {
    case JS_NUM: {
        double x = js_num(d, v);
        if (d->nodes[v].is_int) jw_int(w, (long long)d->nodes[v].ival);
        else if (x == floor(x) && fabs(x) < 1e16) jw_int(w, (long long)x);
        else jw_num(w, x);
        return 0;
    }
    case JS_ARR:
    case JS_OBJ: {
        int obj = js_typeof(d, v) == JS_OBJ;
        if (obj && js_count(d, v) > 1) return gr_js_fail_(c, "%s", "an enum or const value that is an object of several keys is not supported (its keys may come in any order)");
        jw_raw(w, obj ? "{" : "[", 1);
        for (int k = js_first(d, v); k >= 0; k = js_next(d, k)) {
            if (k != js_first(d, v)) jw_raw(w, ",", 1);
            if (obj) jw_strn(w, js_key(d, k), js_key_len(d, k)), jw_raw(w, ":", 1);
            if (gr_js_canon_(c, w, d, k)) return -1;
        }
        jw_raw(w, obj ? "}" : "]", 1);
        return 0;
    }
    default: jw_node(w, d, v, 0); return 0;
    }
}

/* The member of object o named key[0..n), or -1 (keys may hold any byte). */
static inline int gr_js_member_(const js_doc *d, int o, const char *key, size_t n) {
    if (js_typeof(d, o) != JS_OBJ) return -1;
    for (int m = js_first(d, o); m >= 0; m = js_next(d, m))
        if (js_key_len(d, m) == n && !memcmp(js_key(d, m), key, n)) return m;
    return -1;
}

/* The node a $ref names: "#" or a JSON pointer "#/a/b" (~0 ~1 and %XX
 * unescaped) within the document. Another document, an $id or an $anchor
 * name is refused by name. -1 with the failure set. */
/* The schema under node i named by name[0..n): "$anchor": name, or an
 * "$id" / "id" of "#name" (draft 7 and older); -1 when none. */
static inline int gr_js_anchor_(const js_doc *d, int i, const char *name, size_t n, int depth) {
    if (depth > 256) return -1;
    if (js_typeof(d, i) == JS_OBJ) {
        int a = js_get(d, i, "$anchor"), id = js_get(d, i, "$id") >= 0 ? js_get(d, i, "$id") : js_get(d, i, "id");
        if (a >= 0 && js_str_len(d, a) == n && js_str(d, a) && !memcmp(js_str(d, a), name, n)) return i;
        if (id >= 0 && js_str_len(d, id) == n + 1 && js_str(d, id) && js_str(d, id)[0] == '#' && !memcmp(js_str(d, id) + 1, name, n)) return i;
    }
    for (int k = js_first(d, i); k >= 0; k = js_next(d, k)) {
        if (js_typeof(d, i) == JS_OBJ && (js_key_len(d, k) == 4 && !memcmp(js_key(d, k), "enum", 4))) continue; /* values, not schemas */
        if (js_typeof(d, i) == JS_OBJ && (js_key_len(d, k) == 5 && !memcmp(js_key(d, k), "const", 5))) continue;
        int r = gr_js_anchor_(d, k, name, n, depth + 1);
        if (r >= 0) return r;
    }
    return -1;
}

static inline int gr_js_resolve_(gr_js_ *c, const js_doc *d, int ref) {
    const char *r = js_str(d, ref);
    if (!r) return gr_js_fail_(c, "%s", "\"$ref\" must be a string");
    size_t n = js_str_len(d, ref);
    if (n > 1 && r[0] == '#' && r[1] != '/') { /* a plain name: $anchor, or a fragment $id */
        int at = gr_js_anchor_(d, c->root, r + 1, n - 1, 0);
        if (at < 0) return gr_js_fail_(c, "\"$ref\": \"%.200s\" names no \"$anchor\" in the schema", r);
        return at;
    }
    if (!n || r[0] != '#')
        return gr_js_fail_(c, "\"$ref\" to \"%.200s\" is not supported (only \"#\", JSON pointers \"#/...\" and anchors \"#name\" within the schema)", r);
    int at = c->root;
    char *tok = (char *)malloc(n + 1);
    if (!tok) return gr_js_fail_(c, "%s", "out of memory");
    for (size_t i = 2; i <= n && at >= 0 && n > 1;) {
        size_t t = 0;
        for (; i < n && r[i] != '/'; i++) {
            char ch = r[i];
            if (ch == '~' && i + 1 < n && (r[i + 1] == '0' || r[i + 1] == '1')) ch = r[++i] == '0' ? '~' : '/';
            else if (ch == '%' && i + 2 < n && isxdigit((unsigned char)r[i + 1]) && isxdigit((unsigned char)r[i + 2])) {
                char hx[3] = {r[i + 1], r[i + 2], 0};
                ch = (char)strtol(hx, NULL, 16), i += 2;
            }
            tok[t++] = ch;
        }
        i++;
        if (js_typeof(d, at) == JS_ARR) {
            int k = 0, ok = t > 0 && t < 9;
            for (size_t j = 0; j < t && ok; j++) ok = tok[j] >= '0' && tok[j] <= '9', k = k * 10 + (tok[j] - '0');
            at = ok ? js_at(d, at, k) : -1;
        } else
            at = gr_js_member_(d, at, tok, t);
    }
    free(tok);
    if (at < 0) return gr_js_fail_(c, "\"$ref\": \"%.200s\" points at nothing in the schema", r);
    return at;
}

/* What the compiler does with a keyword. */
enum { GR_KW_ANNOT, GR_KW_OWN, GR_KW_REFUSED };

/* The class of keyword k, and for a refused one the types it is about
 * (*types: it matters only where the schema admits one of them). */
static inline int gr_js_keyword_(const char *k, int *types) {
    static const char *const own[] = {"type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "properties", "required",
                                      "additionalProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength",
                                      "maxLength", "uniqueItems", "$id", "id", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                      "pattern", "format", "patternProperties", "minProperties", "maxProperties", "multipleOf", "propertyNames", NULL};
    static const struct { const char *k; int t; } refused[] = {
        {"contentSchema", 0},
 
        {"dependencies", GR_T_OBJ}, {"dependentRequired", GR_T_OBJ}, {"dependentSchemas", GR_T_OBJ}, {"unevaluatedProperties", GR_T_OBJ},
        {"contains", GR_T_ARR}, {"minContains", GR_T_ARR}, {"maxContains", GR_T_ARR}, {"unevaluatedItems", GR_T_ARR},
        {"if", GR_T_ALL}, {"then", GR_T_ALL}, {"else", GR_T_ALL}, {"not", GR_T_ALL}, {"$dynamicRef", GR_T_ALL}, {"$dynamicAnchor", GR_T_ALL},
        {"$recursiveRef", GR_T_ALL}, {"$recursiveAnchor", GR_T_ALL}, {NULL, 0}};
    *types = 0;
    for (int i = 0; own[i]; i++)
        if (!strcmp(k, own[i])) return GR_KW_OWN;
    for (int i = 0; refused[i].k; i++)
        if (!strcmp(k, refused[i].k)) return *types = refused[i].t, GR_KW_REFUSED;
    return GR_KW_ANNOT; /* title, description, default, examples, $comment, $defs, unknown keywords, ... */
}

/* The types `type` admits (GR_T_ALL when absent); -1 refused (not a type
 * name, not a string or a list of them). */
static inline int gr_js_type_kw_(gr_js_ *c, const js_doc *d, int s) {
    static const char *const names[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    static const int bits[] = {GR_T_NULL, GR_T_BOOL, GR_T_OBJ, GR_T_ARR, GR_T_STR, GR_T_INT | GR_T_FRAC, GR_T_INT};
    int t = js_get(d, s, "type");
    if (t < 0) return GR_T_ALL;
    if (js_typeof(d, t) != JS_STR && (js_typeof(d, t) != JS_ARR || !js_count(d, t)))
        return gr_js_fail_(c, "%s", "\"type\" must be a type name or a non-empty list of them");
    int m = 0;
    for (int a = js_typeof(d, t) == JS_STR ? t : js_first(d, t); a >= 0; a = js_typeof(d, t) == JS_STR ? -1 : js_next(d, a)) {
        const char *ty = js_str(d, a);
        int k = 0;
        while (k < 7 && (!ty || strcmp(ty, names[k]))) k++;
        if (k == 7) return gr_js_fail_(c, "type \"%.100s\" is not one of string, number, integer, boolean, null, object, array", ty ? ty : "(not a string)");
        m |= bits[k];
    }
    return m;
}

/* The types schema s can match, over-approximated (GR_T_ALL when not
 * known); for oneOf, whose branches must exclude one another. */
static inline int gr_js_types_(gr_js_ *c, const js_doc *d, int s, int depth) {
    if (js_typeof(d, s) == JS_FALSE) return 0;
    if (js_typeof(d, s) != JS_OBJ || depth > GR_JS_MAX_DEPTH) return GR_T_ALL;
    int m = GR_T_ALL, t = js_get(d, s, "type");
    if (t >= 0) {
        gr_js_ quiet = *c; /* a bad type is reported when the schema is compiled */
        quiet.err = NULL, quiet.failed = 0;
        int tm = gr_js_type_kw_(&quiet, d, s);
        if (tm >= 0) m &= tm;
    }
    int e = js_get(d, s, "enum"), k = js_get(d, s, "const");
    if (k >= 0) m &= gr_js_value_type_(d, k);
    if (js_typeof(d, e) == JS_ARR) {
        int u = 0;
        for (int v = js_first(d, e); v >= 0; v = js_next(d, v)) u |= gr_js_value_type_(d, v);
        m &= u;
    }
    int r = js_get(d, s, "$ref");
    if (r >= 0) {
        gr_js_ quiet = *c;
        quiet.err = NULL, quiet.failed = 0;
        int to = gr_js_resolve_(&quiet, d, r);
        m &= to >= 0 ? gr_js_types_(c, d, to, depth + 1) : GR_T_ALL;
    }
    const char *un[2] = {"anyOf", "oneOf"};
    for (int i = 0; i < 2; i++) {
        int a = js_get(d, s, un[i]), u = 0;
        if (js_typeof(d, a) != JS_ARR) continue;
        for (int b = js_first(d, a); b >= 0; b = js_next(d, b)) u |= gr_js_types_(c, d, b, depth + 1);
        m &= u;
    }
    int all = js_get(d, s, "allOf");
    for (int b = js_first(d, js_typeof(d, all) == JS_ARR ? all : -1); b >= 0; b = js_next(d, b)) m &= gr_js_types_(c, d, b, depth + 1);
    return m;
}

/* 1 when schema s asserts something (has a keyword other than
 * annotations, $defs and $id), or is false. */
static inline int gr_js_asserts_(const js_doc *d, int s, const char *except) {
    if (js_typeof(d, s) == JS_FALSE) return 1;
    for (int f = js_first(d, js_typeof(d, s) == JS_OBJ ? s : -1); f >= 0; f = js_next(d, f)) {
        int t;
        const char *k = js_key(d, f);
        if (gr_js_keyword_(k, &t) != GR_KW_ANNOT && strcmp(k, "$id") && strcmp(k, "id") && (!except || strcmp(k, except))) return 1;
    }
    return 0;
}

/* The first keyword of s beside `self` and `type` that asserts, or NULL. */
static inline const char *gr_js_other_(const js_doc *d, int s, const char *self, int allow_type) {
    for (int f = js_first(d, s); f >= 0; f = js_next(d, f)) {
        int t;
        const char *k = js_key(d, f);
        if (gr_js_keyword_(k, &t) == GR_KW_ANNOT || !strcmp(k, "$id") || !strcmp(k, "id") || !strcmp(k, self)) continue;
        if (allow_type && !strcmp(k, "type")) continue;
        return k;
    }
    return NULL;
}

/* A name of an object's keys, for sorting and lookup. */
typedef struct {
    const char *s;
    uint32_t n;
    int i;
} gr_js_name_;

static inline int gr_js_name_cmp_(const void *a, const void *b) {
    const gr_js_name_ *x = (const gr_js_name_ *)a, *y = (const gr_js_name_ *)b;
    int r = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return r ? r : (x->n > y->n) - (x->n < y->n);
}

/* Index of name s[0..n) in the sorted list, or -1. */
static inline int gr_js_find_(const gr_js_name_ *l, int cnt, const char *s, uint32_t n) {
    gr_js_name_ key = {s, n, 0};
    const gr_js_name_ *f = (const gr_js_name_ *)bsearch(&key, l, (size_t)cnt, sizeof *l, gr_js_name_cmp_);
    return f ? (int)(f - l) : -1;
}

/* The rule of a key that is none of names[lo..hi) (sorted, each as code
 * points, all sharing their first `at` code points, which are read):
 * a trie, where at each node the key may end (unless a name ends there),
 * go on with a character no name has next, go on with an escape (the
 * names have none), or follow a name. Returns the rule, or -1. */
static inline int gr_js_other_key_(gr_js_ *c, uint32_t **cp, const int *len, int lo, int hi, int at) {
    int k = ++c->n;
    jw body = {0};
    int ends = lo < hi && len[lo] == at;
    if (ends) lo++;
    else jw_lit(&body, "\"\\\"\" | ");
    jw_lit(&body, "\"\\\\\" kesc kchar* \"\\\"\" | [^\"\\\\\\x00-\\x1f");
    for (int i = lo; i < hi; i++)
        if (i == lo || cp[i][at] != cp[i - 1][at]) {
            char e[16];
            snprintf(e, sizeof e, "\\U%08X", cp[i][at]);
            jw_lit(&body, e);
        }
    jw_lit(&body, "] kchar* \"\\\"\"");
    for (int i = lo; i < hi && !c->failed;) {
        int j = i;
        while (j < hi && cp[j][at] == cp[i][at]) j++;
        int sub = gr_js_other_key_(c, cp, len, i, j, at + 1);
        char e[48];
        snprintf(e, sizeof e, " | \"\\U%08X\" r%d", cp[i][at], sub);
        jw_lit(&body, e);
        i = j;
    }
    gr_js_def_(c, k, &body);
    jw_free(&body);
    return c->failed ? -1 : k;
}

/* The object of schema s: its properties in schema order (the required
 * ones always, the others optional), a required name that properties does
 * not list as a property of the additionalProperties schema, then any
 * other keys additionalProperties admits (keys as JSON writes them, none
 * of the named ones). Commas are placed by two chains of rules (a
 * property written before this one / not yet). body gets the rule's
 * text; 1, 0 (no object matches), -1. */
/* 1 when the key k[0..n) is a sentence of g (a JSON string text, as JSON
 * writes it); g NULL: none is (propertyNames false). */
static inline int gr_js_name_ok_(const gr_grammar *g, const char *k, size_t n) {
    if (!g) return 0;
    jw w = {0};
    jw_strn(&w, k, n);
    int ok = !w.oom && gr_sentence_(g, w.s, w.n);
    jw_free(&w);
    return ok;
}

/* 1 when schema x asserts nothing (true, {} or annotations only). */
static inline int gr_js_trivial_(const js_doc *d, int x) { return js_typeof(d, x) == JS_TRUE || (js_typeof(d, x) == JS_OBJ && !gr_js_asserts_(d, x, NULL)); }

static inline int gr_js_object_n_(gr_js_ *c, const js_doc *d, const int *ns, int nn, int depth, jw *body);

static inline int gr_js_object_(gr_js_ *c, const js_doc *d, int s, int depth, jw *body) { return gr_js_object_n_(c, d, &s, 1, depth, body); }

/* The object of schemas ns[0..nn) together (allOf's branches merged: the
 * properties of all, a name in several with one schema that asserts, the
 * required names of all, the tightest property counts; with nn > 1 no
 * branch may have additionalProperties or patternProperties). */
static inline int gr_js_object_n_(gr_js_ *c, const js_doc *d, const int *ns, int nn, int depth, jw *body) {
    int s = ns[0], ap = nn == 1 ? js_get(d, s, "additionalProperties") : -1;
    int pp = nn == 1 ? js_get(d, s, "patternProperties") : -1, pval = 0, has_pp = 0;
    jw pkey = {0};
    unsigned char *viable = NULL; /* the member chain's states that can still end in a valid object */
    gr_grammar *kg = NULL;        /* propertyNames' grammar */
    int np = 0, nr = 0, nd = 0, rc = -1, apk = 1;
    for (int q = 0; q < nn; q++) {
        int props = js_get(d, ns[q], "properties"), req = js_get(d, ns[q], "required");
        if (props >= 0 && js_typeof(d, props) != JS_OBJ) return gr_js_fail_(c, "%s", "\"properties\" must be an object");
        if (req >= 0 && js_typeof(d, req) != JS_ARR) return gr_js_fail_(c, "%s", "\"required\" must be an array of names");
        np += js_count(d, props), nr += js_count(d, req);
    }
    gr_js_name_ *pn = (gr_js_name_ *)malloc(((size_t)np + 1) * sizeof *pn), *rn = (gr_js_name_ *)malloc(((size_t)nr + 1) * sizeof *rn);
    gr_js_name_ *po = (gr_js_name_ *)malloc(((size_t)np + 1) * sizeof *po), *ro = (gr_js_name_ *)malloc(((size_t)nr + 1) * sizeof *ro); /* in order */
    int *val = (int *)malloc(((size_t)np + nr + 1) * sizeof(int)), *reqd = (int *)malloc(((size_t)np + nr + 1) * sizeof(int));
    gr_js_name_ *dn = (gr_js_name_ *)malloc(((size_t)np + nr + 1) * sizeof *dn); /* the named keys, in order */
    uint32_t **cp = NULL;
    int *cpl = NULL;
    if (!pn || !rn || !po || !ro || !val || !reqd || !dn) { gr_js_fail_(c, "%s", "out of memory"); goto out; }
    np = nr = 0;
    for (int q = 0; q < nn; q++) {
        int props = js_get(d, ns[q], "properties"), req = js_get(d, ns[q], "required");
        for (int p = js_first(d, props); p >= 0; p = js_next(d, p)) {
            int at = -1; /* the same name from an earlier branch: one of the two must assert nothing */
            for (int j = 0; j < np && at < 0 && nn > 1; j++)
                if (po[j].n == js_key_len(d, p) && !memcmp(po[j].s, js_key(d, p), po[j].n)) at = j;
            if (at < 0) { po[np++] = (gr_js_name_){js_key(d, p), js_key_len(d, p), p}; continue; }
            if (gr_js_trivial_(d, p) || gr_js_equal_(d, p, po[at].i, 0)) continue;
            if (!gr_js_trivial_(d, po[at].i)) { gr_js_fail_(c, "%s", "\"allOf\" whose branches give one property two schemas is not supported"); goto out; }
            po[at].i = p;
        }
        for (int r = js_first(d, req); r >= 0; r = js_next(d, r)) {
            if (js_typeof(d, r) != JS_STR) { gr_js_fail_(c, "%s", "\"required\" must be an array of names"); goto out; }
            ro[nr++] = (gr_js_name_){js_str(d, r), js_str_len(d, r), r};
        }
    }
    memcpy(pn, po, (size_t)np * sizeof *pn), memcpy(rn, ro, (size_t)nr * sizeof *rn);
    qsort(pn, (size_t)np, sizeof *pn, gr_js_name_cmp_);
    qsort(rn, (size_t)nr, sizeof *rn, gr_js_name_cmp_);
    int ap_any = ap < 0 || js_typeof(d, ap) == JS_TRUE;
    if (pp >= 0) { /* keys its patterns match take its schema; named keys must match none; other keys: only where additionalProperties is false */
        int r = gr_js_pattern_keys_(c, d, pp, depth, &pkey, &pval);
        if (r < 0) goto out;
        has_pp = r > 0;
        for (int j = 0; j < np && has_pp; j++) {
            int m = gr_js_key_matches_(c, d, pp, pn[j].s, pn[j].n);
            if (m < 0) goto out;
            if (m) { gr_js_fail_(c, "%s", "a property in \"properties\" whose name a \"patternProperties\" pattern matches is not supported"); goto out; }
        }
        if (has_pp && c->exact && !(ap >= 0 && js_typeof(d, ap) == JS_FALSE)) {
            gr_js_fail_(c, "%s", "\"patternProperties\" beside additionalProperties other than false is not supported (keys no pattern matches)");
            goto out;
        }
    }
    if (!ap_any && (apk = gr_js_schema_(c, d, ap, depth + 1)) < 0) goto out;
    if (ap_any) { /* absent or true: any value */
        char b[40];
        snprintf(b, sizeof b, "r%d ::= jvalue\n", apk = ++c->n);
        jw_lit(&c->out, b);
    }
    int empty = 0, pnm = nn == 1 ? js_get(d, s, "propertyNames") : -1, pnk = 0;
    if (pnm >= 0 && c->alone) { gr_js_fail_(c, "%s", "\"propertyNames\" inside a schema compiled to check another is not supported"); goto out; }
    if (pnm >= 0 && !(kg = gr_js_alone_(c, d, pnm)) && js_typeof(d, pnm) != JS_FALSE) { /* the names' schema, to check the named keys */
        gr_js_fail_(c, "%s", "\"propertyNames\" whose schema is refused is not supported");
        goto out;
    }
    for (int j = 0; j < np && !empty; j++) {
        int p = po[j].i, v = gr_js_schema_(c, d, p, depth + 1), r = gr_js_find_(rn, nr, po[j].s, po[j].n) >= 0;
        if (v < 0) goto out;
        if (pnm >= 0 && !gr_js_name_ok_(kg, po[j].s, po[j].n)) v = 0; /* a name propertyNames refuses: never present */
        if (!v && r) empty = 1;
        else if (v) val[nd] = v, reqd[nd] = r, dn[nd++] = (gr_js_name_){po[j].s, po[j].n, p};
    }
    for (int q = 0; q < nr && !empty; q++) {
        int r = ro[q].i;
        if (gr_js_find_(pn, np, js_str(d, r), js_str_len(d, r)) >= 0) continue;
        int dup = 0; /* a name required twice is one property */
        for (int j = 0; j < nd && !dup; j++) dup = dn[j].i < 0 && dn[j].n == js_str_len(d, r) && !memcmp(dn[j].s, js_str(d, r), dn[j].n);
        if (dup) continue;
        int m = has_pp ? gr_js_key_matches_(c, d, pp, js_str(d, r), js_str_len(d, r)) : 0, v = m ? pval : apk;
        if (m < 0) goto out;
        if (pnm >= 0 && !gr_js_name_ok_(kg, js_str(d, r), js_str_len(d, r))) v = 0;
        if (!v) empty = 1;
        else val[nd] = v, reqd[nd] = 1, dn[nd++] = (gr_js_name_){js_str(d, r), js_str_len(d, r), -1};
    }
    if (empty) { rc = 0; goto out; }
    int counted = 0;
    for (int q = 0; q < nn; q++) counted |= js_get(d, ns[q], "minProperties") >= 0 || js_get(d, ns[q], "maxProperties") >= 0;
    if (!np && !nd && ap_any && !has_pp && !counted && pnm < 0) {
        jw_lit(body, "jobject");
        rc = 1;
        goto out;
    }
    /* the other keys: a trie that leaves out the properties' names (all of them, present or not); when
     * generating, none unless additionalProperties admits them in so many words (or nothing is listed) */
    int others = has_pp ? pval > 0 : apk && (c->exact || ap >= 0 || !np), key = 0;
    if (pnm >= 0 && others) { /* other keys: the strings propertyNames allows, where no name is listed */
        if (np || has_pp) {
            if (!c->exact && ap < 0) others = 0; /* generating: the listed keys only */
            else { gr_js_fail_(c, "%s", "\"propertyNames\" beside properties and other keys is not supported (the names would have to be left out)"); goto out; }
        } else if ((pnk = gr_js_schema_m_(c, d, pnm, depth + 1, GR_T_STR)) < 0) goto out;
        else if (!pnk) others = 0;
    }
    /* R(j, rest, k): the members from the j-th named one on, after k members (capped at cap) and a comma
     * before the next (rest); R(nd, rest, k): the other keys, as many as minProperties / maxProperties leave */
    int minp = 0, maxp = -1;
    for (int q = 0; q < nn; q++) { /* the tightest of the branches' */
        int a, b;
        if (gr_js_count_(c, d, ns[q], "minProperties", 0, &a) || gr_js_count_(c, d, ns[q], "maxProperties", -1, &b)) goto out;
        if (a > minp) minp = a;
        if (b >= 0 && (maxp < 0 || b < maxp)) maxp = b;
    }
    if (maxp >= 0 && maxp < minp) { gr_js_fail_(c, "maxProperties %d is below minProperties %d", maxp, minp); goto out; }
    int cap = maxp >= 0 ? maxp : minp, states = (nd + 1) * 2 * (cap + 1);
    if ((long)(nd + 1) * 2 * (cap + 1) > 200000) { gr_js_fail_(c, "%s", "minProperties/maxProperties this large beside this many properties is not supported"); goto out; }
    viable = (unsigned char *)malloc((size_t)states);
    if (!viable) { gr_js_fail_(c, "%s", "out of memory"); goto out; }
#define GR_JS_ST(j, rest, k) ((((j) * 2 + (rest)) * (cap + 1)) + (k))
    for (int again = 0; again < 2; again++) { /* generating: other keys too when the named ones alone cannot reach minProperties */
        for (int rest = 0; rest < 2; rest++)
            for (int k = 0; k <= cap; k++) {
                int lo = minp - k > 0 ? minp - k : 0;
                viable[GR_JS_ST(nd, rest, k)] = (unsigned char)(others || lo == 0);
            }
        for (int j = nd - 1; j >= 0; j--)
            for (int rest = 0; rest < 2; rest++)
                for (int k = 0; k <= cap; k++) {
                    int k1 = k + 1 > cap ? cap : k + 1, take = (maxp < 0 || k + 1 <= maxp) && viable[GR_JS_ST(j + 1, 1, k1)];
                    viable[GR_JS_ST(j, rest, k)] = (unsigned char)(take || (!reqd[j] && viable[GR_JS_ST(j + 1, rest, k)]));
                }
        if (viable[GR_JS_ST(0, 0, 0)] || others || !apk || c->exact || has_pp || again) break;
        others = 1; /* the named keys alone cannot reach minProperties: the other keys additionalProperties allows */
    }
    if (!viable[GR_JS_ST(0, 0, 0)]) { rc = 0; goto out; }
    if (has_pp && others) { /* the keys the patterns match (no named key among them), with the patterns' schema */
        char b[40];
        snprintf(b, sizeof b, "r%d ::= ", key = ++c->n);
        jw_lit(&c->out, b), jw_raw(&c->out, pkey.s, pkey.n), jw_lit(&c->out, "\n");
        apk = pval;
    } else if (others) {
        if (!np) key = -1; /* jkey */
        else {
            cp = (uint32_t **)calloc((size_t)np, sizeof *cp), cpl = (int *)malloc((size_t)np * sizeof(int));
            if (!cp || !cpl) { gr_js_fail_(c, "%s", "out of memory"); goto out; }
            for (int j = 0; j < np; j++) {
                const unsigned char *u = (const unsigned char *)pn[j].s, *e = u + pn[j].n;
                if (!(cp[j] = (uint32_t *)malloc(((size_t)pn[j].n + 1) * sizeof(uint32_t)))) { gr_js_fail_(c, "%s", "out of memory"); goto out; }
                int m = 0;
                while (u < e) {
                    int l = js_utf8_valid_len(u, e);
                    if (!l || *u < 0x20 || *u == '"' || *u == '\\') {
                        gr_js_fail_(c, "%s", "a property name with a quote, backslash or control character beside additionalProperties is not supported");
                        goto out;
                    }
                    uint32_t v = l == 1 ? u[0] : l == 2 ? (u[0] & 0x1Fu) : l == 3 ? (u[0] & 0x0Fu) : (u[0] & 0x07u);
                    for (int q = 1; q < l; q++) v = v << 6 | (u[q] & 0x3Fu);
                    cp[j][m++] = v, u += l;
                }
                if (m > GR_JS_MAX_KEY) { gr_js_fail_(c, "a property name longer than %d characters beside additionalProperties is not supported", GR_JS_MAX_KEY); goto out; }
                cpl[j] = m;
            }
            /* pn is sorted by bytes: UTF-8 order is code point order, so the trie's groups are runs */
            if ((key = gr_js_other_key_(c, cp, cpl, 0, np, 0)) < 0) goto out;
        }
    }
    int base = c->n;
    c->n += states + 1;
    char b[200], kb[32];
    if (pnk > 0) snprintf(kb, sizeof kb, "r%d", pnk);
    else if (key < 0) snprintf(kb, sizeof kb, "jkey");
    else if (has_pp) snprintf(kb, sizeof kb, "r%d", key);
    else snprintf(kb, sizeof kb, "\"\\\"\" r%d", key);
    for (int j = 0; j < nd; j++)
        for (int rest = 0; rest < 2; rest++)
            for (int k = 0; k <= cap; k++) {
                if (!viable[GR_JS_ST(j, rest, k)]) continue;
                int k1 = k + 1 > cap ? cap : k + 1, alts = 0;
                snprintf(b, sizeof b, "r%d ::= ", base + 1 + GR_JS_ST(j, rest, k));
                jw_lit(&c->out, b);
                if ((maxp < 0 || k + 1 <= maxp) && viable[GR_JS_ST(j + 1, 1, k1)]) {
                    jw_lit(&c->out, rest ? "\",\" ws " : "");
                    jw kj = {0};
                    jw_strn(&kj, dn[j].s, dn[j].n);
                    gr_js_lit_(&c->out, kj.s, kj.n);
                    jw_free(&kj);
                    snprintf(b, sizeof b, " ws \":\" ws r%d ws r%d", val[j], base + 1 + GR_JS_ST(j + 1, 1, k1));
                    jw_lit(&c->out, b), alts++;
                }
                if (!reqd[j] && viable[GR_JS_ST(j + 1, rest, k)])
                    snprintf(b, sizeof b, "%sr%d", alts ? " | " : "", base + 1 + GR_JS_ST(j + 1, rest, k)), jw_lit(&c->out, b);
                jw_lit(&c->out, "\n");
            }
    int add = base + 1 + states; /* one other member */
    if (others) snprintf(b, sizeof b, "r%d ::= %s ws \":\" ws r%d ws\n", add, kb, apk), jw_lit(&c->out, b);
    for (int rest = 0; rest < 2; rest++)
        for (int k = 0; k <= cap; k++) {
            if (!viable[GR_JS_ST(nd, rest, k)]) continue;
            int lo = minp - k > 0 ? minp - k : 0, hi = maxp >= 0 ? maxp - k : -1;
            snprintf(b, sizeof b, "r%d ::= ", base + 1 + GR_JS_ST(nd, rest, k));
            jw_lit(&c->out, b);
            char rep[48];
            if (!others || hi == 0) jw_lit(&c->out, "\"\"");
            else if (rest) {
                if (hi < 0) snprintf(rep, sizeof rep, lo ? "{%d,}" : "*", lo);
                else snprintf(rep, sizeof rep, "{%d,%d}", lo, hi);
                snprintf(b, sizeof b, "(\",\" ws r%d)%s", add, rep), jw_lit(&c->out, b);
            } else {
                int l1 = lo ? lo - 1 : 0;
                if (hi < 0) snprintf(rep, sizeof rep, l1 ? "{%d,}" : "*", l1);
                else snprintf(rep, sizeof rep, "{%d,%d}", l1, hi - 1);
                snprintf(b, sizeof b, "%sr%d (\",\" ws r%d)%s", lo ? "" : "\"\" | ", add, add, rep), jw_lit(&c->out, b);
            }
            jw_lit(&c->out, "\n");
        }
#undef GR_JS_ST
    snprintf(b, sizeof b, "\"{\" ws r%d \"}\"", base + 1);
    jw_lit(body, b);
    rc = 1;
out:
    if (cp)
        for (int j = 0; j < np; j++) free(cp[j]);
    free(cp), free(cpl), free(pn), free(rn), free(po), free(ro), free(val), free(reqd), free(dn), free(viable);
    gr_free(kg);
    jw_free(&pkey);
    return c->failed ? -1 : rc;
}

/* The array of schema s: prefixItems (or items as a list, draft 7) for
 * the first elements, items (or additionalItems) for the rest, between
 * minItems and maxItems. A chain of rules, one per prefix position (its
 * element, then the next, or the end where the count allows it), then
 * the rest as a repetition. 1, 0 (no array matches), -1. */
static inline int gr_js_array_(gr_js_ *c, const js_doc *d, int s, int depth, jw *body) {
    int mn, mx, pre = c->legacy ? -1 : js_get(d, s, "prefixItems"), items = js_get(d, s, "items"), rest = -1; /* draft 7 has no prefixItems */
    if (gr_js_count_(c, d, s, "minItems", 0, &mn) || gr_js_count_(c, d, s, "maxItems", -1, &mx)) return -1;
    if (mx >= 0 && mx < mn) return gr_js_fail_(c, "maxItems %d is below minItems %d", mx, mn);
    int ui = js_get(d, s, "uniqueItems");
    if (ui >= 0 && js_typeof(d, ui) != JS_FALSE) return gr_js_fail_(c, "%s", "the schema keyword \"uniqueItems\" is not supported");
    if (pre >= 0 && js_typeof(d, pre) != JS_ARR) return gr_js_fail_(c, "%s", "\"prefixItems\" must be an array of schemas");
    if (pre < 0 && js_typeof(d, items) == JS_ARR) pre = items, rest = js_get(d, s, "additionalItems");
    else rest = items;
    int k = js_count(d, pre), *p = (int *)malloc(((size_t)k + 1) * sizeof(int)), i = 0, rk = 1;
    if (!p) return gr_js_fail_(c, "%s", "out of memory");
    for (int e = js_first(d, pre); e >= 0; e = js_next(d, e), i++)
        if ((p[i] = gr_js_schema_(c, d, e, depth + 1)) < 0) { free(p); return -1; }
    if (rest >= 0 && js_typeof(d, rest) != JS_TRUE && (rk = gr_js_schema_(c, d, rest, depth + 1)) < 0) { free(p); return -1; }
    int top = mx; /* the most elements any array can have */
    for (i = 0; i < k; i++)
        if (!p[i] && (top < 0 || top > i)) top = i;
    if (!rk && (top < 0 || top > k)) top = k;
    if (top >= 0 && mn > top) { free(p); return 0; }
    char b[200];
    int base = c->n, last = top >= 0 && top < k ? top : k;
    c->n += last + 1;
    for (i = 0; i <= last; i++) { /* A_i: i elements written */
        snprintf(b, sizeof b, "r%d ::= ", base + 1 + i);
        jw_lit(&c->out, b);
        if (i < last) {
            snprintf(b, sizeof b, "%s r%d ws r%d%s\n", i ? "\",\" ws" : "", p[i], base + 2 + i, i >= mn ? " | \"\"" : "");
            jw_lit(&c->out, b);
        } else if (i == top) /* no more */
            jw_lit(&c->out, "\"\"\n");
        else { /* the rest: from max(mn - k, 0) to top - k more */
            char it[32];
            rk == 1 && (rest < 0 || js_typeof(d, rest) == JS_TRUE) ? snprintf(it, sizeof it, "jvalue") : snprintf(it, sizeof it, "r%d", rk);
            int lo = mn > k ? mn - k : 0, hi = top < 0 ? -1 : top - k;
            char rep[40];
            if (k == 0) { /* the first element has no comma before it */
                if (hi < 0) snprintf(rep, sizeof rep, "{%d,}", lo > 1 ? lo - 1 : 0);
                else snprintf(rep, sizeof rep, "{%d,%d}", lo > 1 ? lo - 1 : 0, hi - 1);
                snprintf(b, sizeof b, "%s ws (\",\" ws %s ws)%s%s\n", it, it, rep, lo ? "" : " | \"\"");
            } else {
                if (hi < 0) snprintf(rep, sizeof rep, "{%d,}", lo);
                else snprintf(rep, sizeof rep, "{%d,%d}", lo, hi);
                snprintf(b, sizeof b, "(\",\" ws %s ws)%s\n", it, rep);
            }
            jw_lit(&c->out, b);
        }
    }
    free(p);
    snprintf(b, sizeof b, "\"[\" ws r%d \"]\"", base + 1);
    jw_lit(body, b);
    return 1;
}

/* ------------------------------------------------------------ pattern and format */

/* `pattern` (an ECMAScript regular expression, matched anywhere in the
 * string unless anchored) compiled to GBNF over the JSON text of the
 * string's characters, each in the one spelling the engine writes (kchar:
 * escapes only for `"`, `\` and control characters). Code points, as with
 * the `u` flag. Supported: literals, `.`, classes with ranges and
 * negation, \d \D \w \W \s \S, character escapes (\t \n \v \f \r \0 \cX
 * \xHH \uHHHH \u{H...}, escaped syntax characters), groups (capturing,
 * named, non-capturing), alternation, * + ? {n} {n,} {n,m} (lazy or not:
 * the same language), ^ at the start and $ at the end of a top-level
 * alternative. Refused by name: lookaround, backreferences, word
 * boundaries, Unicode property escapes, anchors elsewhere. */
#define GR_RE_NEST 64
typedef struct {
    uint32_t (*r)[2];
    int n, cap, oom;
} gr_rs_; /* a set of code points as ranges */

static inline void gr_rs_add_(gr_rs_ *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        uint32_t(*nr)[2] = (uint32_t(*)[2])realloc(s->r, (size_t)nc * sizeof *nr);
        if (!nr) { s->oom = 1; return; }
        s->r = nr, s->cap = nc;
    }
    s->r[s->n][0] = lo, s->r[s->n][1] = hi, s->n++;
}

static inline int gr_rs_cmp_(const void *a, const void *b) {
    uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* Sorted, merged, without the surrogates (no characters). */
static inline void gr_rs_norm_(gr_rs_ *s) {
    int n = s->n;
    for (int i = 0; i < n; i++) /* cut the surrogates out */
        if (s->r[i][0] <= 0xDFFF && s->r[i][1] >= 0xD800) {
            uint32_t lo = s->r[i][0], hi = s->r[i][1];
            s->r[i][0] = 1, s->r[i][1] = 0; /* empty */
            if (lo < 0xD800) gr_rs_add_(s, lo, 0xD7FF);
            if (hi > 0xDFFF) gr_rs_add_(s, 0xE000, hi);
        }
    if (s->n) qsort(s->r, (size_t)s->n, sizeof *s->r, gr_rs_cmp_);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i][0] > s->r[i][1]) continue;
        if (m && s->r[i][0] <= s->r[m - 1][1] + 1) {
            if (s->r[i][1] > s->r[m - 1][1]) s->r[m - 1][1] = s->r[i][1];
        } else s->r[m][0] = s->r[i][0], s->r[m][1] = s->r[i][1], m++;
    }
    s->n = m;
}

/* The complement of s (normalized) over the scalar values. */
static inline void gr_rs_neg_(gr_rs_ *s) {
    gr_rs_norm_(s);
    gr_rs_ o = {0};
    uint32_t at = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i][0] > at) gr_rs_add_(&o, at, s->r[i][0] - 1);
        at = s->r[i][1] + 1;
    }
    if (at <= 0x10FFFF) gr_rs_add_(&o, at, 0x10FFFF);
    o.oom |= s->oom;
    free(s->r);
    *s = o;
    gr_rs_norm_(s);
}

/* \d \w \s (lower case) into s; upper case: their complements. */
static inline void gr_rs_class_(gr_rs_ *s, uint32_t c) {
    gr_rs_ t = {0};
    uint32_t l = c | 0x20;
    if (l == 'd') gr_rs_add_(&t, '0', '9');
    else if (l == 'w') gr_rs_add_(&t, '0', '9'), gr_rs_add_(&t, 'A', 'Z'), gr_rs_add_(&t, 'a', 'z'), gr_rs_add_(&t, '_', '_');
    else {
        static const uint32_t sp[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                         {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) gr_rs_add_(&t, sp[i][0], sp[i][1]);
    }
    if (c != l) gr_rs_neg_(&t);
    for (int i = 0; i < t.n; i++) gr_rs_add_(s, t.r[i][0], t.r[i][1]);
    s->oom |= t.oom;
    free(t.r);
}

typedef struct {
    gr_js_ *c;
    const uint32_t *p; /* the pattern's code points */
    int n, at;
    int raw; /* characters as themselves, never '<' (a tool call's raw string argument) */
    int fit, alts;        /* fit the lengths fit_lo..fit_hi (gr_re_alt_); alternatives at the top so far */
    long fit_lo, fit_hi;
} gr_re_;

static inline int gr_re_fail_(gr_re_ *x, const char *what) {
    return gr_js_fail_(x->c, "\"pattern\": %s (at character %d) is not supported", what, x->at + 1);
}

/* One code point of a GBNF class. */
static inline void gr_re_cp_(jw *w, uint32_t v) {
    char b[16];
    if (v < 0x80 && v > 0x20 && v != '\\' && v != ']' && v != '[' && v != '-' && v != '^' && v != '"' && v != 0x7F) b[0] = (char)v, b[1] = 0;
    else if (v <= 0xFFFF) snprintf(b, sizeof b, "\\u%04X", (unsigned)v);
    else snprintf(b, sizeof b, "\\U%08X", (unsigned)v);
    jw_lit(w, b);
}

/* The characters of s (normalized, non-empty) as JSON text: a class of
 * those written as themselves, and the escapes of the others; as_raw:
 * all as themselves (the caller has taken '<' out). */
static inline void gr_re_set_(jw *w, const gr_rs_ *s, int as_raw) {
    gr_js_alts_ esc = {0};
    int raw = 0;
    jw cls = {0};
    jw_lit(&cls, "[");
    for (int i = 0; i < s->n && as_raw; i++) {
        gr_re_cp_(&cls, s->r[i][0]), raw = 1;
        if (s->r[i][1] > s->r[i][0]) jw_lit(&cls, "-"), gr_re_cp_(&cls, s->r[i][1]);
    }
    for (int i = 0; i < s->n && !as_raw; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        for (uint32_t v = lo; v <= hi && v < 0x20; v++) { /* control characters: escaped as JSON writes them */
            const char *named = v == '\n' ? "\\n" : v == '\r' ? "\\r" : v == '\t' ? "\\t" : v == '\b' ? "\\b" : v == '\f' ? "\\f" : NULL;
            char e[8];
            if (!named) snprintf(e, sizeof e, "\\u%04x", (unsigned)v), named = e;
            gr_js_alts_add_(&esc, named, strlen(named));
        }
        if (lo < 0x20) lo = 0x20;
        for (uint32_t cut = lo; lo <= hi;) { /* '"' and '\\' out of the raw ranges */
            while (cut <= hi && cut != '"' && cut != '\\') cut++;
            if (cut > lo) gr_re_cp_(&cls, lo), (cut - 1 > lo ? (jw_lit(&cls, "-"), gr_re_cp_(&cls, cut - 1)) : (void)0), raw = 1;
            if (cut > hi) break;
            gr_js_alts_add_(&esc, cut == '"' ? "\\\"" : "\\\\", 2);
            lo = ++cut;
        }
    }
    jw_lit(&cls, "]");
    int both = raw && esc.n;
    if (both) jw_lit(w, "(");
    if (raw) jw_raw(w, cls.s, cls.n);
    if (both) jw_lit(w, " | ");
    if (esc.n) gr_js_alts_write_(w, &esc);
    if (both) jw_lit(w, ")");
    jw_free(&cls), gr_js_alts_free_(&esc);
}

static inline int gr_re_hex_(gr_re_ *x, int digits, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < digits; i++) {
        if (x->at >= x->n) return -1;
        uint32_t c = x->p[x->at], d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 99;
        if (d > 15) return -1;
        *v = *v * 16 + d, x->at++;
    }
    return 0;
}

/* An escape after '\' (x->at past it) into s; in a class, \b is
 * backspace and \- a hyphen. 0 or -1 (refused). */
static inline int gr_re_escape_(gr_re_ *x, gr_rs_ *s, int in_class) {
    if (x->at >= x->n) return gr_re_fail_(x, "a '\\' at the end");
    uint32_t c = x->p[x->at++], v;
    if (strchr("dDwWsS", (int)c) && c < 0x80) { gr_rs_class_(s, c); return 0; }
    switch (c) {
    case 't': v = 9; break;
    case 'n': v = 10; break;
    case 'v': v = 11; break;
    case 'f': v = 12; break;
    case 'r': v = 13; break;
    case 'c':
        if (x->at >= x->n || !(((x->p[x->at] | 0x20) >= 'a') && ((x->p[x->at] | 0x20) <= 'z'))) return gr_re_fail_(x, "\\c without a letter");
        v = x->p[x->at++] % 32;
        break;
    case '0':
        if (x->at < x->n && x->p[x->at] >= '0' && x->p[x->at] <= '9') return gr_re_fail_(x, "an octal escape");
        v = 0;
        break;
    case 'x':
        if (gr_re_hex_(x, 2, &v)) return gr_re_fail_(x, "\\x without two hex digits");
        break;
    case 'u':
        if (x->at < x->n && x->p[x->at] == '{') {
            x->at++, v = 0;
            int k = 0;
            for (uint32_t d; x->at < x->n && x->p[x->at] != '}' && !gr_re_hex_(x, 1, &d); k++) v = v * 16 + d;
            if (x->at >= x->n || x->p[x->at] != '}' || !k || k > 6 || v > 0x10FFFF) return gr_re_fail_(x, "a malformed \\u{...}");
            x->at++;
        } else if (gr_re_hex_(x, 4, &v)) return gr_re_fail_(x, "\\u without four hex digits");
        else if (v >= 0xD800 && v <= 0xDBFF && x->at + 5 < x->n && x->p[x->at] == '\\' && x->p[x->at + 1] == 'u') { /* a surrogate pair */
            int back = x->at;
            uint32_t lo;
            x->at += 2;
            if (!gr_re_hex_(x, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            else x->at = back;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return gr_re_fail_(x, "a lone surrogate");
        break;
    case 'b':
        if (!in_class) return gr_re_fail_(x, "the word boundary \\b");
        v = 8;
        break;
    case 'B': return gr_re_fail_(x, "the word boundary \\B");
    case 'k': return gr_re_fail_(x, "a named backreference");
    case 'p': case 'P': return gr_re_fail_(x, "a Unicode property escape");
    default:
        if (c >= '1' && c <= '9') return gr_re_fail_(x, "a backreference");
        if (!strchr("^$\\.*+?()[]{}|/-", (int)c) || c >= 0x80 || !c) return gr_re_fail_(x, "this escape");
        v = c;
    }
    gr_rs_add_(s, v, v);
    return 0;
}

/* A class after '[' into s. 0 or -1. */
static inline int gr_re_class_(gr_re_ *x, gr_rs_ *s) {
    int neg = x->at < x->n && x->p[x->at] == '^';
    x->at += neg;
    for (;;) {
        if (x->at >= x->n) return gr_re_fail_(x, "a '[' never closed");
        if (x->p[x->at] == ']') { x->at++; break; }
        gr_rs_ a = {0};
        uint32_t lo, hi;
        int single = 1;
        if (x->p[x->at] == '\\') {
            x->at++;
            int before = a.n;
            if (gr_re_escape_(x, &a, 1)) return free(a.r), -1;
            single = a.n == before + 1 && a.r[before][0] == a.r[before][1] && !strchr("dDwWsS", (int)(x->p[x->at - 1] < 0x80 ? x->p[x->at - 1] : 'z'));
        } else gr_rs_add_(&a, x->p[x->at], x->p[x->at]), x->at++;
        lo = hi = a.n ? a.r[a.n - 1][0] : 0;
        if (x->at + 1 < x->n && x->p[x->at] == '-' && x->p[x->at + 1] != ']') { /* a range */
            x->at++;
            if (!single) return free(a.r), gr_re_fail_(x, "a range from a class escape");
            gr_rs_ b = {0};
            if (x->p[x->at] == '\\') {
                x->at++;
                if (gr_re_escape_(x, &b, 1)) return free(a.r), free(b.r), -1;
                if (b.n != 1 || b.r[0][0] != b.r[0][1] || strchr("dDwWsS", (int)(x->p[x->at - 1] < 0x80 ? x->p[x->at - 1] : 'z')))
                    return free(a.r), free(b.r), gr_re_fail_(x, "a range to a class escape");
                hi = b.r[0][0];
            } else hi = x->p[x->at++];
            free(b.r);
            if (hi < lo) return free(a.r), gr_re_fail_(x, "a range out of order");
            a.n = 0, gr_rs_add_(&a, lo, hi);
        }
        for (int i = 0; i < a.n; i++) gr_rs_add_(s, a.r[i][0], a.r[i][1]);
        s->oom |= a.oom;
        free(a.r);
    }
    if (neg) gr_rs_neg_(s);
    else gr_rs_norm_(s);
    return 0;
}

static inline int gr_re_disj_(gr_re_ *x, jw *w, int top, int depth, long *mn, long *mx);

/* The set s as an atom into w: 0, or -1 when it matches no character
 * (in raw mode once '<' is out). */
static inline int gr_re_emit_(gr_re_ *x, jw *w, gr_rs_ *s) {
    if (x->raw) { /* '<' out: no closing tag can start inside */
        gr_rs_ lt = {0};
        gr_rs_add_(&lt, '<', '<');
        gr_rs_neg_(&lt);
        gr_rs_ both = {0};
        for (int i = 0; i < s->n; i++)
            for (int j = 0; j < lt.n; j++) {
                uint32_t lo = s->r[i][0] > lt.r[j][0] ? s->r[i][0] : lt.r[j][0], hi = s->r[i][1] < lt.r[j][1] ? s->r[i][1] : lt.r[j][1];
                if (lo <= hi) gr_rs_add_(&both, lo, hi);
            }
        free(lt.r), free(s->r);
        *s = both;
        gr_rs_norm_(s);
        if (!s->n) return gr_re_fail_(x, "a character that is only '<' (a string argument is written raw, without '<')");
    }
    if (!s->n) return gr_re_fail_(x, "a class that matches no character");
    gr_re_set_(w, s, x->raw);
    return 0;
}

static inline int gr_re_set_1_(gr_re_ *x, jw *w, uint32_t v) {
    gr_rs_ s = {0};
    gr_rs_add_(&s, v, v);
    int r = gr_re_emit_(x, w, &s);
    free(s.r);
    return r;
}

/* An atom into w (its lengths in code points into mn, mx; -1 unbounded):
 * 1, 0 at the end of an alternative, -1 refused. */
static inline int gr_re_atom_(gr_re_ *x, jw *w, int depth, long *mn, long *mx) {
    if (x->at >= x->n) return 0;
    uint32_t c = x->p[x->at];
    if (c == '|' || c == ')') return 0;
    if (c == '^' || c == '$') return gr_re_fail_(x, "an anchor inside the pattern");
    if (c == '*' || c == '+' || c == '?') return gr_re_fail_(x, "a quantifier with nothing to repeat");
    if (c == '(') {
        x->at++;
        if (x->at < x->n && x->p[x->at] == '?') {
            if (x->at + 1 < x->n && x->p[x->at + 1] == ':') x->at += 2;
            else if (x->at + 2 < x->n && x->p[x->at + 1] == '<' && x->p[x->at + 2] != '=' && x->p[x->at + 2] != '!') { /* a named group */
                while (x->at < x->n && x->p[x->at] != '>') x->at++;
                if (x->at >= x->n) return gr_re_fail_(x, "a group name never closed");
                x->at++;
            } else return x->at--, gr_re_fail_(x, "lookaround"); /* at its '(' */
        }
        if (depth >= GR_RE_NEST) return gr_re_fail_(x, "groups nested this deep");
        jw_lit(w, "(");
        if (gr_re_disj_(x, w, 0, depth + 1, mn, mx)) return -1;
        if (x->at >= x->n || x->p[x->at] != ')') return gr_re_fail_(x, "a '(' never closed");
        x->at++;
        jw_lit(w, ")");
        return 1;
    }
    gr_rs_ s = {0};
    int rc = 0;
    if (c == '[') x->at++, rc = gr_re_class_(x, &s);
    else if (c == '\\') x->at++, rc = gr_re_escape_(x, &s, 0), gr_rs_norm_(&s);
    else if (c == '.') x->at++, gr_rs_add_(&s, '\n', '\n'), gr_rs_add_(&s, '\r', '\r'), gr_rs_add_(&s, 0x2028, 0x2029), gr_rs_neg_(&s);
    else x->at++, gr_rs_add_(&s, c, c);
    if (!rc && s.oom) rc = gr_js_fail_(x->c, "%s", "out of memory");
    if (!rc) rc = gr_re_emit_(x, w, &s);
    if (!rc) *mn = *mx = 1;
    free(s.r);
    return rc ? -1 : 1;
}

/* A decimal count of a quantifier; -1 when none. */
static inline long gr_re_int_(gr_re_ *x) {
    long v = -1;
    while (x->at < x->n && x->p[x->at] >= '0' && x->p[x->at] <= '9') v = (v < 0 ? 0 : v) * 10 + (long)(x->p[x->at++] - '0'), v = v > 1000000 ? 1000000 : v;
    return v;
}

/* An alternative: terms until | ) or the end. top: ^ may open it and $
 * close it; *open / *close say whether they did. */
/* One term's quantifier {lo, hi} (hi -1: unbounded) after "(atom" into w. */
static inline void gr_re_quant_(jw *w, long lo, long hi) {
    char b[48];
    if (lo == 1 && hi == 1) jw_lit(w, ")");
    else if (lo == 0 && hi == 1) jw_lit(w, ")?");
    else if (lo == 0 && hi < 0) jw_lit(w, ")*");
    else if (lo == 1 && hi < 0) jw_lit(w, ")+");
    else {
        if (hi < 0) snprintf(b, sizeof b, "){%ld,}", lo);
        else snprintf(b, sizeof b, "){%ld,%ld}", lo, hi);
        jw_lit(w, b);
    }
}

/* An alternative: terms until | ) or the end. top: ^ may open it and $
 * close it; *open / *close say whether they did. When it is the whole
 * pattern, anchored, and x->fit_lo/fit_hi ask for string lengths (the
 * schema's minLength/maxLength), a term that repeats one character is
 * given the count that makes the lengths fit, if all the other terms
 * have one length ("^[a-z][a-z0-9-]*$" with maxLength 63). */
static inline int gr_re_alt_(gr_re_ *x, jw *w, int top, int depth, long *mn, long *mx, int *open, int *close) {
    typedef struct { jw a; long lo, hi, amn, amx; } term;
    term *t = NULL;
    int nt = 0, cap = 0, rc = 0;
    *mn = 0, *mx = 0, *open = *close = 0;
    if (top && x->at < x->n && x->p[x->at] == '^') x->at++, *open = 1;
    for (;;) {
        if (top && x->at < x->n && x->p[x->at] == '$' && (x->at + 1 == x->n || x->p[x->at + 1] == '|')) { x->at++, *close = 1; break; }
        jw a = {0};
        long amn, amx;
        int r = gr_re_atom_(x, &a, depth, &amn, &amx);
        if (r <= 0) { jw_free(&a); if (r < 0) rc = -1; break; }
        long lo = 1, hi = 1; /* the quantifier */
        if (x->at < x->n && (x->p[x->at] == '*' || x->p[x->at] == '+' || x->p[x->at] == '?')) {
            uint32_t q = x->p[x->at++];
            lo = q == '+', hi = q == '?' ? 1 : -1;
        } else if (x->at < x->n && x->p[x->at] == '{') {
            int back = x->at;
            x->at++;
            long m = gr_re_int_(x), n = m;
            if (m >= 0 && x->at < x->n && x->p[x->at] == ',') x->at++, n = gr_re_int_(x);
            if (m >= 0 && x->at < x->n && x->p[x->at] == '}') {
                x->at++, lo = m, hi = n;
                if (hi >= 0 && hi < lo) { jw_free(&a), rc = gr_re_fail_(x, "a {n,m} with m below n"); break; }
                if (lo > GR_JS_MAX_COUNT || hi > GR_JS_MAX_COUNT) { jw_free(&a), rc = gr_re_fail_(x, "a repetition count above 10000"); break; }
            } else { /* a '{' that opens no quantifier is itself (Annex B) */
                x->at = back + 1, jw_free(&a), a = (jw){0}, amn = amx = 1;
                if (gr_re_set_1_(x, &a, '{')) { jw_free(&a), rc = -1; break; }
            }
        }
        if (x->at < x->n && x->p[x->at] == '?' && !(lo == 1 && hi == 1)) x->at++; /* lazy: the same language */
        if (nt == cap) {
            term *nt2 = (term *)realloc(t, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *t);
            if (!nt2) { jw_free(&a), rc = gr_js_fail_(x->c, "%s", "out of memory"); break; }
            t = nt2;
        }
        t[nt++] = (term){a, lo, hi, amn, amx};
    }
    if (!rc && top && x->fit && *open && *close && x->at == x->n && !x->alts) { /* fit the lengths asked for */
        long fixed = 0;
        int var = -1, ok = 1;
        for (int i = 0; i < nt && ok; i++) {
            if (t[i].lo == t[i].hi && t[i].amn == t[i].amx) fixed += t[i].lo * t[i].amn;
            else if (var < 0 && t[i].amn == 1 && t[i].amx == 1) var = i;
            else ok = 0;
        }
        if (ok && var >= 0) {
            long lo = x->fit_lo - fixed, hi = x->fit_hi < 0 ? -1 : x->fit_hi - fixed;
            if (lo < t[var].lo) lo = t[var].lo;
            if (t[var].hi >= 0 && (hi < 0 || hi > t[var].hi)) hi = t[var].hi;
            if (hi >= 0 && hi < lo) rc = gr_re_fail_(x, "a pattern no string of the lengths minLength/maxLength allow matches");
            else t[var].lo = lo, t[var].hi = hi;
        }
    }
    for (int i = 0; i < nt; i++) {
        if (!rc) {
            jw_lit(w, i ? " (" : "(");
            jw_raw(w, t[i].a.s ? t[i].a.s : "", t[i].a.n);
            gr_re_quant_(w, t[i].lo, t[i].hi);
            *mn += t[i].lo * t[i].amn;
            *mx = *mx < 0 || (t[i].hi < 0 && t[i].amx != 0) || t[i].amx < 0 ? -1 : *mx + t[i].hi * t[i].amx;
            if (*mn > 1000000) *mn = 1000000;
            if (*mx > 1000000) *mx = 1000000; /* beyond any count a schema may give */
        }
        jw_free(&t[i].a);
    }
    free(t);
    return rc;
}

/* Alternatives until ) or the end; top: the whole pattern, each
 * alternative found anywhere in the string unless anchored. */
static inline int gr_re_disj_(gr_re_ *x, jw *w, int top, int depth, long *mn, long *mx) {
    *mn = -1, *mx = 0;
    for (int k = 0;; k++) {
        long amn, amx;
        int open, close;
        jw a = {0};
        if (k) jw_lit(w, " | ");
        if (top) x->alts = k;
        if (gr_re_alt_(x, &a, top, depth, &amn, &amx, &open, &close)) return jw_free(&a), -1;
        if (top && !open) jw_lit(w, x->raw ? "[^<]* " : "kchar* "), amx = -1;
        jw_lit(w, a.n ? "(" : "\"\"");
        if (a.n) jw_raw(w, a.s, a.n), jw_lit(w, ")");
        if (top && !close) jw_lit(w, x->raw ? " [^<]*" : " kchar*"), amx = -1;
        jw_free(&a);
        *mn = *mn < 0 || amn < *mn ? amn : *mn;
        *mx = *mx < 0 || amx < 0 ? -1 : amx > *mx ? amx : *mx;
        if (x->at < x->n && x->p[x->at] == '|') { x->at++; continue; }
        return 0;
    }
}

/* The string content (no quotes) of strings that pattern text[0..len)
 * matches, as GBNF into w; *mn / *mx: the lengths in code points the
 * matches can have (-1: unbounded). 0 or -1 (refused: c->err). lo..hi
 * (hi -1: none; lo 0 and hi -1: no fitting): the lengths a schema asks
 * for, to which gr_re_alt_ fits a repeated character (gr_re_compile_:
 * none asked for). */
static inline int gr_re_compile_fit_(gr_js_ *c, const char *text, size_t len, int raw, long lo, long hi, jw *w, long *mn, long *mx) {
    uint32_t *cp = (uint32_t *)malloc((len + 1) * sizeof(uint32_t));
    if (!cp) return gr_js_fail_(c, "%s", "out of memory");
    int n = 0, prem = 0, plen = 0;
    uint32_t pv = 0, v;
    for (size_t i = 0; i < len; i++) {
        int r = gr_utf8_(&pv, &prem, &plen, (unsigned char)text[i], &v);
        if (r < 0) return free(cp), gr_js_fail_(c, "%s", "\"pattern\" is not valid UTF-8");
        if (r == 1) cp[n++] = v;
    }
    gr_re_ x = {c, cp, n, 0, raw, lo >= 0 && (lo > 0 || hi >= 0), 0, lo, hi};
    int rc = gr_re_disj_(&x, w, 1, 0, mn, mx);
    if (!rc && x.at < n) rc = gr_re_fail_(&x, "a ')' never opened");
    free(cp);
    return rc;
}

static inline int gr_re_compile_(gr_js_ *c, const char *text, size_t len, int raw, jw *w, long *mn, long *mx) {
    return gr_re_compile_fit_(c, text, len, raw, 0, -1, w, mn, mx);
}

/* The `format`s enforced, as anchored patterns over the string's
 * characters (RFC 3339 date, time and date-time with leap seconds where
 * the time is 23:59:60 UTC, RFC 3339 Appendix A durations, RFC 4122 UUIDs
 * in either case, dotted-quad IPv4 without leading zeros, RFC 4291 IPv6
 * text forms, RFC 1123 host names (labels of 1 to 63 characters; the
 * 253-character total is not bounded), e-mail addresses (RFC 5321: a
 * dot-atom or quoted local part, a host name or an address literal), RFC
 * 3986 URIs with a scheme). Each is written once per grammar as rule
 * fmt-<name>. */
#define GR_RE_IPV4 "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define GR_RE_H16 "[0-9A-Fa-f]{1,4}"
#define GR_RE_LS32 "(?:" GR_RE_H16 ":" GR_RE_H16 "|" GR_RE_IPV4 ")"
#define GR_RE_IPV6                                                                                                                             \
    "(?:(?:" GR_RE_H16 ":){6}" GR_RE_LS32 "|::(?:" GR_RE_H16 ":){5}" GR_RE_LS32 "|(?:" GR_RE_H16 ")?::(?:" GR_RE_H16 ":){4}" GR_RE_LS32        \
    "|(?:(?:" GR_RE_H16 ":){0,1}" GR_RE_H16 ")?::(?:" GR_RE_H16 ":){3}" GR_RE_LS32 "|(?:(?:" GR_RE_H16 ":){0,2}" GR_RE_H16 ")?::(?:" GR_RE_H16 \
    ":){2}" GR_RE_LS32 "|(?:(?:" GR_RE_H16 ":){0,3}" GR_RE_H16 ")?::" GR_RE_H16 ":" GR_RE_LS32 "|(?:(?:" GR_RE_H16 ":){0,4}" GR_RE_H16       \
    ")?::" GR_RE_LS32 "|(?:(?:" GR_RE_H16 ":){0,5}" GR_RE_H16 ")?::" GR_RE_H16 "|(?:(?:" GR_RE_H16 ":){0,6}" GR_RE_H16 ")?::)"
#define GR_RE_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define GR_RE_HOST GR_RE_LABEL "(?:\\." GR_RE_LABEL ")*"
#define GR_RE_DATE                                                                                                                             \
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"        \
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[048]|[2468][048]|[13579][26])00)-02-29)"
#define GR_RE_FRAC "(?:\\.[0-9]+)?"
#define GR_RE_TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" GR_RE_FRAC "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define GR_RE_PCT "%[0-9A-Fa-f]{2}"
#define GR_RE_PCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|" GR_RE_PCT ")"
#define GR_RE_URI                                                                                                                              \
    "[A-Za-z][A-Za-z0-9+.-]*:(?://(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|" GR_RE_PCT ")*@)?(?:\\[(?:" GR_RE_IPV6                                   \
    "|[vV][0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|" GR_RE_PCT ")*)(?::[0-9]*)?(?:/" GR_RE_PCHAR         \
    "*)*|/(?:" GR_RE_PCHAR "+(?:/" GR_RE_PCHAR "*)*)?|" GR_RE_PCHAR "+(?:/" GR_RE_PCHAR "*)*|)(?:\\?(?:" GR_RE_PCHAR "|[/?])*)?(?:#(?:"      \
    GR_RE_PCHAR "|[/?])*)?"
static const struct {
    const char *name, *re;
} gr_formats_[] = {
    {"date", GR_RE_DATE},
    {"time", GR_RE_TIME},
    {"date-time", NULL}, /* fmt-date [Tt] fmt-time */
    {"duration", "P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
                 "|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)"},
    {"uuid", "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"},
    {"ipv4", GR_RE_IPV4},
    {"ipv6", GR_RE_IPV6},
    {"hostname", GR_RE_HOST},
    {"email", "(?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*|\"(?:[ !#-\\[\\]-~]|\\\\[ -~])*\")@(?:" GR_RE_HOST
              "|\\[" GR_RE_IPV4 "\\]|\\[IPv6:" GR_RE_IPV6 "\\])"},
    {"uri", GR_RE_URI},
    {NULL, NULL}};

/* The rule of format name[0..n) (written into c->fmt when first used),
 * "" for a format the specification does not define (an annotation), or
 * NULL with the refusal in c->err (a format it defines that is not
 * written here); raw: as a tool call's raw string argument
 * (fmtraw-<name>: characters as themselves). */
static inline const char *gr_js_format_(gr_js_ *c, const char *name, size_t n, int raw) {
    int f = 0;
    while (gr_formats_[f].name && (strlen(gr_formats_[f].name) != n || memcmp(gr_formats_[f].name, name, n))) f++;
    if (!gr_formats_[f].name) {
        static const char *const spec[] = {"idn-email", "idn-hostname", "uri-reference", "iri", "iri-reference", "uri-template", "json-pointer",
                                           "relative-json-pointer", "regex", NULL};
        for (int i = 0; spec[i]; i++)
            if (strlen(spec[i]) == n && !memcmp(spec[i], name, n))
                return gr_js_fail_(c, "the format \"%.*s\" is not supported", (int)(n < 100 ? n : 100), name), NULL;
        return ""; /* a format the specification does not define: an annotation, as it says */
    }
    unsigned *done = raw ? &c->fmt_raw_done : &c->fmt_done;
    const char *pre = raw ? "fmtraw-" : "fmt-";
    if (!(*done >> f & 1)) {
        *done |= 1u << f;
        int time = !strcmp(gr_formats_[f].name, "time");
        if (!gr_formats_[f].re) { /* date-time */
            if (!gr_js_format_(c, "date", 4, raw) || !gr_js_format_(c, "time", 4, raw)) return NULL;
            jw_lit(&c->fmt, pre), jw_lit(&c->fmt, "date-time ::= "), jw_lit(&c->fmt, pre), jw_lit(&c->fmt, "date [Tt] ");
            jw_lit(&c->fmt, pre), jw_lit(&c->fmt, "time\n");
            return gr_formats_[f].name;
        }
        if (time && !c->leap_done) { /* a leap second: 23:59:60 UTC, as the local time of each offset */
            c->leap_done = 1;
            jw_lit(&c->fmt, "fmt-leap ::= ");
            for (int h = 0; h < 24; h++) {
                char b[64];
                snprintf(b, sizeof b, "%s\"%02d:\" (", h ? " | " : "", h);
                jw_lit(&c->fmt, b);
                for (int m = 0; m < 60; m++) {
                    int local = h * 60 + m, plus = (local - 1439 + 1440) % 1440, minus = (1439 - local + 1440) % 1440;
                    snprintf(b, sizeof b, "%s\"%02d:60\" (\".\" [0-9]+)? (", m ? " | " : "", m);
                    jw_lit(&c->fmt, b);
                    snprintf(b, sizeof b, "\"+%02d:%02d\" | \"-%02d:%02d\"%s)", plus / 60, plus % 60, minus / 60, minus % 60, local == 1439 ? " | [Zz]" : "");
                    jw_lit(&c->fmt, b);
                }
                jw_lit(&c->fmt, ")");
            }
            jw_lit(&c->fmt, "\n");
        }
        jw body = {0}, src = {0};
        long mn, mx;
        jw_lit(&src, "^(?:"), jw_lit(&src, gr_formats_[f].re), jw_lit(&src, ")$");
        int rc = gr_re_compile_(c, src.s, src.n, raw, &body, &mn, &mx);
        jw_free(&src);
        if (rc) return jw_free(&body), NULL;
        jw_lit(&c->fmt, pre), jw_lit(&c->fmt, gr_formats_[f].name), jw_lit(&c->fmt, " ::= ");
        jw_raw(&c->fmt, body.s, body.n), jw_lit(&c->fmt, time ? " | fmt-leap\n" : "\n");
        jw_free(&body);
    }
    return gr_formats_[f].name;
}

/* The characters of a string that `pattern` or `format` of schema s
 * allow, as GBNF into content (raw: a tool call's raw argument, else JSON
 * text); the lengths mn..mx (mx -1: none) must hold every such string
 * (they then say nothing more), else refused. 1, 0 when s has neither,
 * -1 refused. */
static inline int gr_js_pattern_(gr_js_ *c, const js_doc *d, int s, int raw, int mn, int mx, jw *content) {
    int pat = js_get(d, s, "pattern"), fmt = js_get(d, s, "format");
    if (pat >= 0 && js_typeof(d, pat) != JS_STR) return gr_js_fail_(c, "%s", "\"pattern\" must be a string");
    if (fmt >= 0 && js_typeof(d, fmt) != JS_STR) return gr_js_fail_(c, "%s", "\"format\" must be a string");
    const char *name = NULL;
    if (fmt >= 0) {
        if (!(name = gr_js_format_(c, js_str(d, fmt), js_str_len(d, fmt), raw))) return -1;
        if (!*name) fmt = -1; /* a format the specification does not define: as if absent */
    }
    if (pat < 0 && fmt < 0) return 0;
    if (pat >= 0 && fmt >= 0) return gr_js_fail_(c, "%s", "\"pattern\" beside \"format\" is not supported");
    long lo = 0, hi = -1;
    if (pat >= 0) {
        if (gr_re_compile_fit_(c, js_str(d, pat), js_str_len(d, pat), raw, mn, mx, content, &lo, &hi)) return -1;
    } else
        jw_lit(content, raw ? "fmtraw-" : "fmt-"), jw_lit(content, name);
    if ((mn > 0 && lo < mn) || (mx >= 0 && (hi < 0 || hi > mx)))
        return gr_js_fail_(c, "\"%s\" beside minLength/maxLength is not supported (unless every string it matches has a length within them)",
                           pat >= 0 ? "pattern" : "format");
    return 1;
}

/* 1 when JSON values a and b are equal (objects as sets of members,
 * numbers by value), 0 when not or nested past 64. */
static inline int gr_js_equal_(const js_doc *d, int a, int b, int depth) {
    js_type t = js_typeof(d, a);
    if (t != js_typeof(d, b) || depth > 64) return 0;
    if (t == JS_NUM) return js_num(d, a) == js_num(d, b);
    if (t == JS_STR) return js_str_len(d, a) == js_str_len(d, b) && !memcmp(js_str(d, a), js_str(d, b), js_str_len(d, a));
    if (t == JS_ARR || t == JS_OBJ) {
        if (js_count(d, a) != js_count(d, b)) return 0;
        for (int x = js_first(d, a), y = js_first(d, b); x >= 0; x = js_next(d, x), y = js_next(d, y)) {
            int z = t == JS_ARR ? y : gr_js_member_(d, b, js_key(d, x), js_key_len(d, x));
            if (z < 0 || !gr_js_equal_(d, x, z, depth + 1)) return 0;
        }
    }
    return 1;
}

/* 1 when pattern pat[0..pn) matches the string key[0..n), 0 when not,
 * -1 refused (c->err). The pattern is compiled as for a string and run
 * by the recognizer on the key as JSON writes it. */
static inline int gr_re_matches_(gr_js_ *c, const char *pat, size_t pn, const char *key, size_t n) {
    jw g = {0}, k = {0};
    long lo, hi;
    jw_lit(&g, gr_js_prims_), jw_lit(&g, "root ::= \"\\\"\" (");
    if (gr_re_compile_(c, pat, pn, 0, &g, &lo, &hi)) return jw_free(&g), -1;
    jw_lit(&g, ") \"\\\"\"\n");
    gr_grammar *gm = g.oom ? NULL : gr_parse(g.s, g.n, "root", NULL, 0);
    jw_free(&g);
    if (!gm) return gr_js_fail_(c, "%s", "\"patternProperties\": a pattern whose grammar is refused");
    jw_strn(&k, key, n);
    int r = !k.oom && gr_sentence_(gm, k.s, k.n);
    gr_free(gm), jw_free(&k);
    return r;
}

/* patternProperties of schema s (object pp): the keys any of its patterns
 * match as GBNF into *key (JSON text, quotes included) and their value's
 * rule into *val. Exact when the patterns share one schema (a key
 * matching two needs both); else refused. 1, 0 (none: an empty object),
 * -1. */
static inline int gr_js_pattern_keys_(gr_js_ *c, const js_doc *d, int pp, int depth, jw *key, int *val) {
    if (js_typeof(d, pp) != JS_OBJ) return gr_js_fail_(c, "%s", "\"patternProperties\" must be an object");
    int first = js_first(d, pp);
    if (first < 0) return 0;
    jw_lit(key, "\"\\\"\" (");
    for (int m = first; m >= 0; m = js_next(d, m)) {
        if (!gr_js_equal_(d, m, first, 0))
            return gr_js_fail_(c, "%s", "\"patternProperties\" whose patterns have different schemas is not supported (a key matching two needs both)");
        jw pat = {0};
        long lo, hi;
        jw_lit(key, m == first ? "(" : " | (");
        if (gr_re_compile_(c, js_key(d, m), js_key_len(d, m), 0, &pat, &lo, &hi)) return jw_free(&pat), -1; /* the member's key is the pattern */
        jw_raw(key, pat.s, pat.n), jw_lit(key, ")");
        jw_free(&pat);
    }
    jw_lit(key, ") \"\\\"\"");
    *val = gr_js_schema_(c, d, first, depth + 1);
    return *val < 0 ? -1 : 1;
}

/* 1 when some pattern of patternProperties pp matches key[0..n), 0 when
 * none, -1 refused. */
static inline int gr_js_key_matches_(gr_js_ *c, const js_doc *d, int pp, const char *key, size_t n) {
    for (int m = js_first(d, pp); m >= 0; m = js_next(d, m)) {
        int r = gr_re_matches_(c, js_key(d, m), js_key_len(d, m), key, n);
        if (r) return r;
    }
    return 0;
}

/* The string of schema s: minLength..maxLength code points. */
static inline int gr_js_string_(gr_js_ *c, const js_doc *d, int s, jw *body) {
    int mn, mx;
    if (gr_js_count_(c, d, s, "minLength", 0, &mn) || gr_js_count_(c, d, s, "maxLength", -1, &mx)) return -1;
    if (mx >= 0 && mx < mn) return gr_js_fail_(c, "maxLength %d is below minLength %d", mx, mn);
    jw content = {0};
    int r = gr_js_pattern_(c, d, s, 0, mn, mx, &content);
    if (r) {
        if (r > 0) jw_lit(body, "\"\\\"\" ("), jw_raw(body, content.s, content.n), jw_lit(body, ") \"\\\"\"");
        jw_free(&content);
        return r;
    }
    char b[96];
    if (!mn && mx < 0) snprintf(b, sizeof b, "jstring");
    else if (mx < 0) snprintf(b, sizeof b, "\"\\\"\" jcharb{%d,} \"\\\"\"", mn);
    else snprintf(b, sizeof b, "\"\\\"\" jcharb{%d,%d} \"\\\"\"", mn, mx);
    jw_lit(body, b);
    return 1;
}

/* Digits x..y (equal length L, as text) as GBNF into w: the common
 * first digit, or the first digit's three parts (x's own, those between,
 * y's own) each followed by what the rest may be. */
static inline void gr_js_digits_(jw *w, const char *x, const char *y, int L) {
    char b[64];
    if (L == 0) { jw_lit(w, "\"\""); return; }
    int zeros = 1, nines = 1;
    for (int i = 1; i < L; i++) zeros &= x[i] == '0', nines &= y[i] == '9';
    if (zeros && nines) { /* every tail: one class and a count */
        snprintf(b, sizeof b, "[%c-%c]", x[0], y[0]), jw_lit(w, b);
        if (L > 1) snprintf(b, sizeof b, " [0-9]{%d}", L - 1), jw_lit(w, b);
        return;
    }
    if (x[0] == y[0]) {
        snprintf(b, sizeof b, "\"%c\" (", x[0]), jw_lit(w, b);
        gr_js_digits_(w, x + 1, y + 1, L - 1);
        jw_lit(w, ")");
        return;
    }
    char nine[24], zero[24];
    memset(nine, '9', sizeof nine), memset(zero, '0', sizeof zero);
    snprintf(b, sizeof b, "\"%c\" (", x[0]), jw_lit(w, b);
    gr_js_digits_(w, x + 1, nine, L - 1);
    jw_lit(w, ")");
    if (y[0] - x[0] > 1) {
        snprintf(b, sizeof b, " | [%c-%c]", x[0] + 1, y[0] - 1), jw_lit(w, b);
        if (L > 1) snprintf(b, sizeof b, " [0-9]{%d}", L - 1), jw_lit(w, b);
    }
    snprintf(b, sizeof b, " | \"%c\" (", y[0]), jw_lit(w, b);
    gr_js_digits_(w, zero, y + 1, L - 1);
    jw_lit(w, ")");
}

/* The non-negative integers a..b (a <= b), without leading zeros, as
 * GBNF alternatives into w: one group per digit count. */
static inline void gr_js_uint_range_(jw *w, int64_t a, int64_t b) {
    int first = 1;
    int64_t lo = 0, hi = 9;
    for (int L = 1; L <= 18 && lo <= b; L++, lo = hi + 1, hi = hi * 10 + 9) {
        int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        if (x > y) continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%0*lld", L, (long long)x), snprintf(ys, sizeof ys, "%0*lld", L, (long long)y);
        if (!first) jw_lit(w, " | ");
        jw_lit(w, "("), gr_js_digits_(w, xs, ys, L), jw_lit(w, ")");
        first = 0;
    }
}

/* multipleOf m (node mo) of integers (integer) or numbers, written as
 * plain text: m a whole number up to 10^6, the integers whose decimal
 * digits leave remainder 0 (a state per remainder; a number also as
 * "n.000"); m a power of ten below 1 (0.01), the decimals with no more
 * fraction digits than it has (then every integer is one). Beside
 * minimum/maximum, and other m, refused by name. 1, or -1. */
static inline int gr_js_multiple_(gr_js_ *c, const js_doc *d, int s, int mo, int integer, jw *body) {
    static const char *const bk[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++)
        if (js_get(d, s, bk[i]) >= 0 && js_typeof(d, js_get(d, s, bk[i])) != JS_FALSE)
            return gr_js_fail_(c, "\"multipleOf\" beside \"%s\" is not supported", bk[i]);
    double m = js_num(d, mo);
    if (!js_is_num(d, mo) || !(m > 0)) return gr_js_fail_(c, "%s", "\"multipleOf\" must be a number above 0");
    if (m == floor(m) && m <= 1e6) {
        int64_t k = (int64_t)m;
        if (k == 1) { jw_lit(body, integer ? "jint" : "jint (\".\" \"0\"{1,16})?"); return 1; }
        int base = c->n;
        c->n += (int)k;
        char b[64];
        for (int64_t r = 0; r < k; r++) { /* R_r: the digits still to come after a prefix of remainder r */
            snprintf(b, sizeof b, "r%lld ::= %s", (long long)(base + 1 + r), r ? "" : "\"\" | ");
            jw_lit(&c->out, b);
            for (int dg = 0; dg < 10; dg++) {
                snprintf(b, sizeof b, "%s\"%d\" r%lld", dg ? " | " : "", dg, (long long)(base + 1 + (10 * r + dg) % k));
                jw_lit(&c->out, b);
            }
            jw_lit(&c->out, "\n");
        }
        jw_lit(body, "\"-\"? (\"0\"");
        for (int dg = 1; dg < 10; dg++) snprintf(b, sizeof b, " | \"%d\" r%lld", dg, (long long)(base + 1 + dg % k)), jw_lit(body, b);
        jw_lit(body, integer ? ")" : ") (\".\" \"0\"{1,16})?");
        return 1;
    }
    char t[40];
    gr_js_short_(m, t, sizeof t);
    int p = 0;
    if (!strncmp(t, "0.", 2)) { /* 0.0...01 */
        const char *q = t + 2;
        while (q[p] == '0') p++;
        p = !strcmp(q + p, "1") ? p + 1 : 0;
    } else if (!strncmp(t, "1e-", 3))
        p = atoi(t + 3);
    if (p < 1 || p > 16) return gr_js_fail_(c, "\"multipleOf\" %s is not supported (whole numbers up to 10^6 and powers of ten below 1 are)", t);
    if (integer) { jw_lit(body, "jint"); return 1; }
    char b[96];
    if (p == 16) snprintf(b, sizeof b, "jint (\".\" [0-9]{1,16})?");
    else snprintf(b, sizeof b, "jint (\".\" ([0-9]{1,%d} | [0-9]{%d} \"0\"{1,%d}))?", p, p, 16 - p);
    jw_lit(body, b);
    return 1;
}

/* The integers of schema s: jint, or with minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum (draft 4's boolean forms too) the
 * integers in the bounds exactly, as digit-range alternatives (-0 is not
 * written). 1, 0 (none), -1. */
static inline int gr_js_integer_(gr_js_ *c, const js_doc *d, int s, jw *body) {
    if (js_get(d, s, "multipleOf") >= 0) return gr_js_multiple_(c, d, s, js_get(d, s, "multipleOf"), 1, body);
    const double big = 1e16; /* jint's 16 digits */
    double lo = -big + 1, hi = big - 1;
    int mn = js_get(d, s, "minimum"), mx = js_get(d, s, "maximum"), emn = js_get(d, s, "exclusiveMinimum"), emx = js_get(d, s, "exclusiveMaximum");
    if (mn < 0 && mx < 0 && emn < 0 && emx < 0) { jw_lit(body, "jint"); return 1; }
    static const char *const names[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    int at[4] = {mn, mx, emn, emx};
    for (int i = 0; i < 4; i++)
        if (at[i] >= 0 && !js_is_num(d, at[i]) && !(i >= 2 && js_is_bool(d, at[i])))
            return gr_js_fail_(c, "\"%s\" must be a number", names[i]);
    int emn_b = js_typeof(d, emn) == JS_TRUE, emx_b = js_typeof(d, emx) == JS_TRUE; /* draft 4: the bound itself is out */
    if (mn >= 0) { double v = js_num(d, mn), f = emn_b ? floor(v) + 1 : ceil(v); if (f > lo) lo = f; }
    if (mx >= 0) { double v = js_num(d, mx), f = emx_b ? ceil(v) - 1 : floor(v); if (f < hi) hi = f; }
    if (js_is_num(d, emn)) { double f = floor(js_num(d, emn)) + 1; if (f > lo) lo = f; }
    if (js_is_num(d, emx)) { double f = ceil(js_num(d, emx)) - 1; if (f < hi) hi = f; }
    if (lo > hi) return 0;
    int64_t a = (int64_t)lo, b = (int64_t)hi;
    int any = 0;
    if (a < 0) { /* "-" and the magnitudes max(1, -b)..-a */
        jw_lit(body, "\"-\" (");
        gr_js_uint_range_(body, b < 0 ? -b : 1, -a);
        jw_lit(body, ")");
        any = 1;
    }
    if (b >= 0) {
        if (any) jw_lit(body, " | ");
        gr_js_uint_range_(body, a > 0 ? a : 0, b);
    }
    return 1;
}

/* ------------------------------------------------------------ bounded numbers
 * Numbers with bounds are written as plain decimals (no exponent): up to
 * 16 integer and 16 fraction digits, compared exactly as decimals. A
 * magnitude is a fixed string of 32 digits (16 integer, 16 fraction). */
#define GR_FIX 32

/* The shortest decimal that reads back as x ("%.17g" at most), as text. */
static inline void gr_js_short_(double x, char *out, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, x);
        if (strtod(out, NULL) == x) return;
    }
}

/* The magnitude of number node v (sign into *neg) as a fixed string,
 * rounded up (up) or down to 16 fraction digits and held below 10^16
 * (*big set when it was not). */
static inline void gr_js_fix_(const js_doc *d, int v, int up, int *neg, char *fix, int *big) {
    char t[64], dig[64];
    if (d->nodes[v].is_int) snprintf(t, sizeof t, "%lld", (long long)d->nodes[v].ival);
    else gr_js_short_(js_num(d, v), t, sizeof t);
    const char *p = t;
    *neg = *p == '-', p += *p == '-' || *p == '+';
    int nd = 0, point = -1, e = 0;
    for (; *p && *p != 'e' && *p != 'E'; p++)
        if (*p == '.') point = nd;
        else if (nd < 40) dig[nd++] = *p;
    if (*p) e = atoi(p + 1);
    if (point < 0) point = nd;
    point += e; /* the value is 0.dig * 10^point, digits dig[0..nd) */
    memset(fix, '0', GR_FIX), fix[GR_FIX] = 0, *big = 0;
    int rest = 0; /* a nonzero digit past the 16th fraction digit */
    for (int i = 0; i < nd; i++) {
        int at = 16 + i - point; /* dig[i] has weight 10^(point-1-i) */
        if (at < 0) { if (dig[i] != '0') *big = 1; continue; }
        if (at >= GR_FIX) { rest |= dig[i] != '0'; continue; }
        fix[at] = dig[i];
    }
    if (*big) { memset(fix, '9', GR_FIX); return; }
    if (rest && up) /* one unit of the last digit up */
        for (int i = GR_FIX - 1; i >= 0; i--) {
            if (fix[i] < '9') { fix[i]++; break; }
            fix[i] = '0';
            if (!i) { memset(fix, '9', GR_FIX), *big = 1; }
        }
}

/* fix one unit of the last digit up (dir 1) or down (-1); 0, or -1 when
 * it would leave 0..10^16 - 10^-16. */
static inline int gr_js_fix_step_(char *fix, int dir) {
    for (int i = GR_FIX - 1; i >= 0; i--) {
        if (dir > 0 ? fix[i] < '9' : fix[i] > '0') { fix[i] = (char)(fix[i] + dir); return 0; }
        fix[i] = dir > 0 ? '0' : '9';
    }
    return -1;
}

/* Digit strings s of 0..16-i digits after the fraction digits fixed so
 * far, such that those digits then s (padded with zeros) lie within x..y
 * (16 digits each); tl / th: the digits so far equal x's / y's. one: at
 * least one digit (the first after the point). */
static inline void gr_js_frac_(jw *w, const char *x, const char *y, int i, int tl, int th, int one) {
    int n = 0, end = !one;
    for (int k = i; tl && k < 16 && end; k++) end = x[k] == '0';
    char b[48];
    if (!tl && !th) {
        snprintf(b, sizeof b, "[0-9]{%d,%d}", one, 16 - i);
        jw_lit(w, b);
        return;
    }
    jw_lit(w, "(");
    if (end) jw_lit(w, "\"\""), n++;
    int lo = tl ? x[i] - '0' : 0, hi = th ? y[i] - '0' : 9;
    for (int dg = lo; dg <= hi;) {
        int ntl = tl && dg == lo, nth = th && dg == hi;
        if (ntl || nth) {
            snprintf(b, sizeof b, "%s\"%d\" ", n++ ? " | " : "", dg);
            jw_lit(w, b);
            if (i + 1 < 16) gr_js_frac_(w, x, y, i + 1, ntl, nth, 0);
            else jw_lit(w, "\"\"");
            dg++;
            continue;
        }
        int top = th ? hi - 1 : hi; /* the digits strictly inside: free after them */
        snprintf(b, sizeof b, "%s[%d-%d]", n++ ? " | " : "", dg, top);
        jw_lit(w, b);
        if (i + 1 < 16) snprintf(b, sizeof b, " [0-9]{0,%d}", 15 - i), jw_lit(w, b);
        dg = top + 1;
    }
    jw_lit(w, ")");
}

/* Texts I ("." F)? whose value lies within the fixed strings a..b (a <= b). */
static inline void gr_js_mag_(jw *w, const char *a, const char *b) {
    char ai[17], bi[17];
    memcpy(ai, a, 16), ai[16] = 0, memcpy(bi, b, 16), bi[16] = 0;
    int64_t x = strtoll(ai, NULL, 10), y = strtoll(bi, NULL, 10);
    static const char zeros[] = "0000000000000000", nines[] = "9999999999999999";
    char lit[24];
    int n = 0;
    for (int part = 0; part < 3; part++) {
        const char *fl = part == 0 ? a + 16 : zeros, *fh = part == 2 || x == y ? b + 16 : nines;
        if (part == 1 && y - x < 2) continue;
        if (part == 2 && x == y) break;
        jw_lit(w, n++ ? " | (" : "(");
        if (part == 1) gr_js_uint_range_(w, x + 1, y - 1), jw_lit(w, ") (\".\" [0-9]{1,16})?");
        else {
            snprintf(lit, sizeof lit, "\"%lld\"", (long long)(part == 0 ? x : y));
            jw_lit(w, lit);
            int zero_ok = !memcmp(fl, zeros, 16); /* no fraction: the value I itself */
            jw_lit(w, zero_ok ? " (\".\" " : " \".\" ");
            gr_js_frac_(w, fl, fh, 0, 1, 1, 1);
            jw_lit(w, zero_ok ? ")?)" : ")");
        }
    }
}

/* The numbers of schema s within minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (draft 4's boolean forms too), exactly, as plain
 * decimals. 1, 0 (none), -1. */
static inline int gr_js_number_(gr_js_ *c, const js_doc *d, int s, jw *body) {
    if (js_get(d, s, "multipleOf") >= 0) return gr_js_multiple_(c, d, s, js_get(d, s, "multipleOf"), 0, body);
    static const char *const names[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    int at[4];
    for (int i = 0; i < 4; i++) {
        at[i] = js_get(d, s, names[i]);
        if (at[i] >= 0 && !js_is_num(d, at[i]) && !(i >= 2 && js_is_bool(d, at[i]))) return gr_js_fail_(c, "\"%s\" must be a number", names[i]);
    }
    if (at[0] < 0 && at[1] < 0 && !js_is_num(d, at[2]) && !js_is_num(d, at[3])) { jw_lit(body, "jnumber"); return 1; }
    /* per sign, the magnitudes a..b (fixed strings): [0] the non-negative texts, [1] those with "-" */
    char a[2][GR_FIX + 1], b[2][GR_FIX + 1];
    int ok[2] = {1, 1};
    for (int k = 0; k < 2; k++) memset(a[k], '0', GR_FIX), a[k][GR_FIX] = 0, memset(b[k], '9', GR_FIX), b[k][GR_FIX] = 0;
    for (int i = 0; i < 4; i++) {
        int v = at[i];
        if (v < 0 || !js_is_num(d, v)) continue;
        int lower = i == 0 || i == 2, excl = i >= 2 || js_typeof(d, at[i + 2]) == JS_TRUE;
        double val = js_num(d, v);
        for (int k = 0; k < 2; k++) { /* k 0: x = m, k 1: x = -m (m >= 0) */
            /* the bound on m: x >= v is m >= v (k 0) or m <= -v (k 1); x <= v is m <= v or m >= -v */
            int m_lower = lower != k, neg, big;
            double mv = k ? -val : val; /* m compared with mv */
            char f[GR_FIX + 1];
            if (m_lower) {
                if (mv < 0 || (mv == 0 && !excl)) continue; /* m >= 0 always holds */
                gr_js_fix_(d, v, !excl, &neg, f, &big);
                if (big || (excl && gr_js_fix_step_(f, 1))) { ok[k] = 0; continue; }
                if (strcmp(f, a[k]) > 0) memcpy(a[k], f, GR_FIX);
            } else {
                if (mv < 0 || (mv == 0 && excl)) { ok[k] = 0; continue; } /* m <= negative: none */
                gr_js_fix_(d, v, excl, &neg, f, &big);
                if (big) continue;
                if (excl && gr_js_fix_step_(f, -1)) { ok[k] = 0; continue; }
                if (strcmp(f, b[k]) < 0) memcpy(b[k], f, GR_FIX);
            }
        }
    }
    int any = 0;
    for (int k = 0; k < 2; k++) {
        if (!ok[k] || strcmp(a[k], b[k]) > 0) continue;
        jw_lit(body, any++ ? " | " : "");
        jw_lit(body, k ? "\"-\" (" : "(");
        gr_js_mag_(body, a[k], b[k]);
        jw_lit(body, ")");
    }
    return any > 0;
}

/* 1 when schema x (after $ref) lists its values: enum or const, beside
 * nothing that asserts but type. */
static inline int gr_js_listed_(const js_doc *d, int x) {
    return js_typeof(d, x) == JS_OBJ && (js_get(d, x, "enum") >= 0 || js_get(d, x, "const") >= 0) &&
           !gr_js_other_(d, x, js_get(d, x, "enum") >= 0 ? "enum" : "const", 1);
}

/* 1 when no value, as the grammar writes values, is listed (enum/const,
 * of the branch's types and mask) by two branches of oneOf a: then at
 * most one branch matches any listed value. mixed 0: every branch must
 * be gr_js_listed_ (else 0); mixed 1: branches without enum/const are
 * passed over (gr_js_oneof_ checks them apart). */
static inline int gr_js_consts_apart_(gr_js_ *c, const js_doc *d, int a, int mask, int mixed) {
    enum { MAXV = 1024 };
    char **seen = (char **)calloc(MAXV, sizeof(char *));
    int n = 0, ok = seen != NULL;
    for (int b = js_first(d, a); b >= 0 && ok; b = js_next(d, b)) {
        int x = b;
        for (int hops = 0; hops < 16 && js_get(d, x, "$ref") >= 0; hops++) {
            gr_js_ quiet = *c;
            quiet.err = NULL, quiet.failed = 0;
            x = gr_js_resolve_(&quiet, d, js_get(d, x, "$ref"));
        }
        int e = js_get(d, x, "enum"), k = js_get(d, x, "const");
        if (mixed && (js_typeof(d, x) != JS_OBJ || (e < 0 && k < 0))) continue;
        if (!mixed && ((e < 0) == (k < 0) || !gr_js_listed_(d, x))) { ok = 0; break; }
        gr_js_ quiet = *c;
        quiet.err = NULL, quiet.failed = 0;
        int tm = gr_js_type_kw_(&quiet, d, x), first = n;
        for (int v = e >= 0 ? js_first(d, e) : k; v >= 0 && ok; v = e >= 0 ? js_next(d, v) : -1) {
            if (tm < 0 || !(gr_js_value_type_(d, v) & tm & mask)) continue;
            jw w = {0};
            if (gr_js_canon_(&quiet, &w, d, v) || w.oom || n == MAXV) { jw_free(&w); ok = 0; break; }
            for (int i = 0; i < first && ok; i++) ok = strcmp(seen[i], w.s) != 0; /* only across branches */
            seen[n++] = w.s;
        }
    }
    for (int i = 0; i < n; i++) free(seen[i]);
    free(seen);
    return ok;
}

/* The alternatives of a list of subschemas (anyOf, and oneOf whose
 * branches exclude one another) into body. 1, 0 (none matches), -1. */
static inline int gr_js_union_(gr_js_ *c, const js_doc *d, int a, int depth, jw *body, int mask) {
    int any = 0;
    for (int b = js_first(d, a); b >= 0; b = js_next(d, b)) {
        int k = gr_js_schema_m_(c, d, b, depth + 1, mask);
        if (k < 0) return -1;
        if (!k) continue;
        if (any++) jw_lit(body, " | ");
        gr_js_ref_(body, k);
    }
    return any > 0;
}

static inline int gr_js_distribute_(gr_js_ *c, const js_doc *d, int s, int a, int one, int depth, int tm, jw *body);
/* Any value of the types in mask (GR_T_ALL: jvalue) as GBNF into w. */
static inline void gr_js_any_(jw *w, int mask) {
    static const struct { int t; const char *r; } k[] = {{GR_T_NULL, "jnull"}, {GR_T_BOOL, "jbool"}, {GR_T_OBJ, "jobject"}, {GR_T_ARR, "jarray"},
                                                       {GR_T_STR, "jstring"}, {GR_T_FRAC, "jnumber"}, {GR_T_INT, "jint"}};
    if (mask == GR_T_ALL) { jw_lit(w, "jvalue"); return; }
    for (int i = 0, n = 0; i < 7; i++)
        if ((mask & k[i].t) && !(k[i].t == GR_T_INT && (mask & GR_T_FRAC))) jw_lit(w, n++ ? " | " : ""), jw_lit(w, k[i].r);
}

static inline int gr_js_object_n_(gr_js_ *c, const js_doc *d, const int *ns, int nn, int depth, jw *body);

/* allOf a of several asserting branches, merged where that is exact:
 * every branch (after $ref; a nested allOf flattened) only a type and
 * object keywords (properties, required, minProperties, maxProperties;
 * additionalProperties only true), so the object is gr_js_object_n_ of
 * them all and a value of another type any of the types all allow. */
/* 1 when member f of a schema can be merged by gr_js_merge_: an
 * annotation, type, an object keyword, additionalProperties true, or the
 * schema's allOf (flattened). */
static inline int gr_js_mergeable_(const js_doc *d, int f, int allof) {
    int t;
    const char *k = js_key(d, f);
    return gr_js_keyword_(k, &t) == GR_KW_ANNOT || !strcmp(k, "type") || !strcmp(k, "properties") || !strcmp(k, "required") ||
           !strcmp(k, "minProperties") || !strcmp(k, "maxProperties") || !strcmp(k, "$id") || !strcmp(k, "id") ||
           (!strcmp(k, "additionalProperties") && js_typeof(d, f) == JS_TRUE) || (f == allof && js_typeof(d, f) == JS_ARR);
}

/* The schemas start[0..n) together, merged (see gr_js_allof_); skip: a
 * member of start[0] left out (the anyOf/oneOf whose branch is start[1]). */
static inline int gr_js_merge_(gr_js_ *c, const js_doc *d, const int *start, int n, int skip, int depth, int tm, jw *body);

static inline int gr_js_allof_(gr_js_ *c, const js_doc *d, int a, int depth, int tm, jw *body) {
    enum { MAXB = 64 };
    int st[MAXB], n = 0;
    for (int b = js_first(d, a); b >= 0 && n < MAXB; b = js_next(d, b)) st[n++] = b;
    return gr_js_merge_(c, d, st, n, -1, depth, tm, body);
}

static inline int gr_js_merge_(gr_js_ *c, const js_doc *d, const int *start, int n, int skip, int depth, int tm, jw *body) {
    enum { MAXB = 64 };
    int ns[MAXB], nn = 0, todo[MAXB], nt = 0;
    for (int b = 0; b < n && nt < MAXB; b++) todo[nt++] = start[b];
    for (int i = 0; i < nt / 2; i++) { int t = todo[i]; todo[i] = todo[nt - 1 - i], todo[nt - 1 - i] = t; } /* popped in order */
    while (nt > 0) {
        int x = gr_js_deref_(c, d, todo[--nt]);
        if (x < 0 || js_typeof(d, x) == JS_FALSE) return x < 0 ? gr_js_fail_(c, "%s", "\"allOf\" of several schemas that assert something is not supported") : 0;
        if (js_typeof(d, x) == JS_TRUE) continue;
        int sub = js_get(d, x, "allOf");
        for (int f = js_first(d, x); f >= 0; f = js_next(d, f))
            if (f != skip && !gr_js_mergeable_(d, f, sub))
                return gr_js_fail_(c, "\"allOf\" of several schemas that assert something is not supported (a branch's \"%s\" would have to be merged)", js_key(d, f));
        int from = nt;
        for (int b = js_first(d, sub); b >= 0; b = js_next(d, b))
            if (nt < MAXB) todo[nt++] = b;
            else return gr_js_fail_(c, "%s", "\"allOf\" of more than 64 schemas is not supported");
        for (int i = 0; i < (nt - from) / 2; i++) { int t = todo[from + i]; todo[from + i] = todo[nt - 1 - i], todo[nt - 1 - i] = t; }
        gr_js_ quiet = *c;
        quiet.err = NULL, quiet.failed = 0;
        int t = gr_js_type_kw_(&quiet, d, x);
        if (t < 0) return gr_js_type_kw_(c, d, x);
        tm &= t;
        if (nn == MAXB) return gr_js_fail_(c, "%s", "\"allOf\" of more than 64 schemas is not supported");
        ns[nn++] = x;
    }
    if (!tm) return 0;
    int any = 0;
    if (tm & GR_T_OBJ) {
        if (!nn) jw_lit(body, "jobject"), any = 1;
        else {
            jw ob = {0};
            int r = gr_js_object_n_(c, d, ns, nn, depth, &ob);
            if (r < 0) return jw_free(&ob), -1;
            if (r > 0) jw_raw(body, ob.s, ob.n), any = 1;
            jw_free(&ob);
        }
    }
    if (tm & ~GR_T_OBJ) {
        if (any) jw_lit(body, " | ");
        gr_js_any_(body, tm & ~GR_T_OBJ), any = 1;
    }
    return any;
}

/* anyOf (one: oneOf) a beside object keywords of s: s merged with each
 * branch, the alternatives of all; for oneOf the branches must be apart
 * (types, or objects apart by a required name: gr_js_obj_apart_). */
static inline int gr_js_distribute_(gr_js_ *c, const js_doc *d, int s, int a, int one, int depth, int tm, jw *body) {
    int any = 0, skip = -1;
    for (int f = js_first(d, s); f >= 0; f = js_next(d, f))
        if (f == a) skip = f;
    if (one)
        for (int b = js_first(d, a); b >= 0; b = js_next(d, b))
            for (int e = js_first(d, a); e != b; e = js_next(d, e)) {
                int x = gr_js_deref_(c, d, b), z = gr_js_deref_(c, d, e);
                int shared = gr_js_types_(c, d, b, depth + 1) & gr_js_types_(c, d, e, depth + 1) & tm;
                if (x < 0 || z < 0 || (shared && (shared != GR_T_OBJ || js_typeof(d, x) != JS_OBJ || js_typeof(d, z) != JS_OBJ || !gr_js_obj_apart_(c, d, x, z))))
                    return gr_js_fail_(c, "%s", "\"oneOf\" beside object keywords whose branches may overlap is not supported");
            }
    for (int b = js_first(d, a); b >= 0; b = js_next(d, b)) {
        int st[2] = {s, b};
        jw part = {0};
        int r = gr_js_merge_(c, d, st, 2, skip, depth, tm, &part);
        if (r < 0) return jw_free(&part), -1;
        if (r > 0) jw_lit(body, any++ ? " | (" : "("), jw_raw(body, part.s, part.n), jw_lit(body, ")");
        jw_free(&part);
    }
    return any > 0;
}


/* Schema b after $ref hops within the document (up to 16), or -1. */
static inline int gr_js_deref_(gr_js_ *c, const js_doc *d, int b) {
    for (int hops = 0; hops < 16 && js_typeof(d, b) == JS_OBJ && js_get(d, b, "$ref") >= 0; hops++) {
        if (!c->legacy && gr_js_other_(d, b, "$ref", 0)) return -1;
        gr_js_ quiet = *c;
        quiet.err = NULL, quiet.failed = 0;
        b = gr_js_resolve_(&quiet, d, js_get(d, b, "$ref"));
        if (b < 0) return -1;
    }
    return js_typeof(d, b) == JS_OBJ && js_get(d, b, "$ref") >= 0 ? -1 : b;
}

/* The grammar of schema b alone (its $refs resolved in c's document),
 * the whole language, or NULL (refused or out of memory). */
static inline gr_grammar *gr_js_alone_(gr_js_ *c, const js_doc *d, int b) {
    gr_js_ sub = {.exact = 1, .alone = 1};
    gr_js_start_(&sub, d, c->root);
    jw_lit(&sub.out, gr_js_prims_);
    int k = gr_js_schema_(&sub, d, b, 0);
    gr_js_done_(&sub);
    if (sub.fmt.n) jw_raw(&sub.out, sub.fmt.s, sub.fmt.n);
    jw_free(&sub.fmt);
    gr_grammar *g = NULL;
    if (k > 0 && !sub.failed && !sub.out.oom) {
        char r[48];
        snprintf(r, sizeof r, "root ::= r%d\n", k);
        jw_lit(&sub.out, r);
        if (!sub.out.oom) g = gr_parse(sub.out.s, sub.out.n, "root", NULL, 0);
    }
    jw_free(&sub.out);
    return g;
}

/* 1 when schema x forbids key k[0..n) in an object: additionalProperties
 * false without k among its properties (and no patternProperties), or
 * the property's schema is false. */
static inline int gr_js_forbids_(const js_doc *d, int x, const char *k, size_t n) {
    int props = js_get(d, x, "properties"), ap = js_get(d, x, "additionalProperties");
    int p = js_typeof(d, props) == JS_OBJ ? gr_js_member_(d, props, k, n) : -1;
    if (p >= 0) return js_typeof(d, p) == JS_FALSE;
    return js_typeof(d, ap) == JS_FALSE && js_get(d, x, "patternProperties") < 0;
}

/* 1 when no object matches both schemas a and b (after $ref): a name one
 * requires that the other forbids, or a name both require whose values
 * are constants (const / enum) with none in common. */
static inline int gr_js_obj_apart_(gr_js_ *c, const js_doc *d, int a, int b) {
    for (int side = 0; side < 2; side++) {
        int x = side ? b : a, y = side ? a : b, req = js_get(d, x, "required");
        for (int r = js_first(d, js_typeof(d, req) == JS_ARR ? req : -1); r >= 0; r = js_next(d, r)) {
            if (js_typeof(d, r) != JS_STR) continue;
            if (gr_js_forbids_(d, y, js_str(d, r), js_str_len(d, r))) return 1;
            if (side) continue;
            int yreq = js_get(d, y, "required"), both = 0;
            for (int q = js_first(d, js_typeof(d, yreq) == JS_ARR ? yreq : -1); q >= 0 && !both; q = js_next(d, q))
                both = js_typeof(d, q) == JS_STR && js_str_len(d, q) == js_str_len(d, r) && !memcmp(js_str(d, q), js_str(d, r), js_str_len(d, r));
            if (!both) continue;
            int xp = js_get(d, x, "properties"), yp = js_get(d, y, "properties");
            int xs = js_typeof(d, xp) == JS_OBJ ? gr_js_member_(d, xp, js_str(d, r), js_str_len(d, r)) : -1;
            int ys = js_typeof(d, yp) == JS_OBJ ? gr_js_member_(d, yp, js_str(d, r), js_str_len(d, r)) : -1;
            if (xs < 0 || ys < 0 || (xs = gr_js_deref_(c, d, xs)) < 0 || (ys = gr_js_deref_(c, d, ys)) < 0) continue;
            int xl = js_get(d, xs, "enum") >= 0 ? js_get(d, xs, "enum") : js_get(d, xs, "const"), yl = js_get(d, ys, "enum") >= 0 ? js_get(d, ys, "enum") : js_get(d, ys, "const");
            if (xl < 0 || yl < 0) continue;
            int xe = js_get(d, xs, "enum") >= 0, ye = js_get(d, ys, "enum") >= 0, common = 0;
            for (int u = xe ? js_first(d, xl) : xl; u >= 0 && !common; u = xe ? js_next(d, u) : -1)
                for (int v = ye ? js_first(d, yl) : yl; v >= 0 && !common; v = ye ? js_next(d, v) : -1) common = gr_js_equal_(d, u, v, 0);
            if (!common) return 1;
        }
    }
    return 0;
}

/* oneOf a whose branches share types, exactly where that is decidable:
 * every branch only a type (then the types exactly one branch has), or
 * branches of different types beside enum/const branches none of whose
 * values another branch matches (checked by the branch's grammar) and no
 * value in two (then as anyOf). 1 / 0 written (body) or none matches, -1
 * refused, -3 neither shape. */
static inline int gr_js_oneof_(gr_js_ *c, const js_doc *d, int a, int depth, int tm, jw *body) {
    int count[7] = {0}, typed_only = 1, n = 0;
    for (int b = js_first(d, a); b >= 0; b = js_next(d, b), n++) {
        int x = gr_js_deref_(c, d, b);
        if (x < 0) return -3;
        if (js_typeof(d, x) == JS_OBJ && gr_js_asserts_(d, x, "type")) { typed_only = 0; continue; }
        gr_js_ quiet = *c;
        quiet.err = NULL, quiet.failed = 0;
        int t = js_typeof(d, x) == JS_FALSE ? 0 : js_typeof(d, x) == JS_TRUE ? GR_T_ALL : gr_js_type_kw_(&quiet, d, x);
        if (t < 0) return -3;
        for (int i = 0; i < 7; i++) count[i] += (t & tm) >> i & 1;
    }
    if (typed_only) { /* the types exactly one branch has */
        int allowed = 0;
        for (int i = 0; i < 7; i++) allowed |= (count[i] == 1) << i;
        if ((allowed & GR_T_FRAC) && !(allowed & GR_T_INT))
            return gr_js_fail_(c, "%s", "\"oneOf\" that leaves only the numbers that are not integers is not supported");
        if (!allowed) return 0;
        gr_js_any_(body, allowed);
        return 1;
    }
    if (c->alone) return -3; /* inside a branch compiled for such a check: one level only */
    /* enum/const branches beside branches of different types (objects: apart by a required name) */
    for (int b = js_first(d, a); b >= 0; b = js_next(d, b)) {
        int x = gr_js_deref_(c, d, b);
        if (gr_js_listed_(d, x)) continue;
        int t = gr_js_types_(c, d, b, depth + 1) & tm;
        for (int e = js_first(d, a); e != b; e = js_next(d, e)) {
            int z = gr_js_deref_(c, d, e);
            if (gr_js_listed_(d, z)) continue;
            int shared = t & gr_js_types_(c, d, e, depth + 1);
            if (shared && (shared != GR_T_OBJ || js_typeof(d, x) != JS_OBJ || js_typeof(d, z) != JS_OBJ || !gr_js_obj_apart_(c, d, x, z))) return -3;
        }
    }
    int ok = 1;
    for (int b = js_first(d, a); b >= 0 && ok; b = js_next(d, b)) { /* each other branch against every listed value */
        int x = gr_js_deref_(c, d, b);
        if (gr_js_listed_(d, x)) continue;
        gr_grammar *g = gr_js_alone_(c, d, b);
        if (!g) return -3;
        for (int v = js_first(d, a); v >= 0 && ok; v = js_next(d, v)) {
            int y = gr_js_deref_(c, d, v);
            if (y == x || !(js_typeof(d, y) == JS_OBJ && (js_get(d, y, "enum") >= 0 || js_get(d, y, "const") >= 0))) continue;
            int e = js_get(d, y, "enum"), k = js_get(d, y, "const");
            for (int u = e >= 0 ? js_first(d, e) : k; u >= 0 && ok; u = e >= 0 ? js_next(d, u) : -1) {
                jw w = {0};
                gr_js_ quiet = *c;
                quiet.err = NULL, quiet.failed = 0;
                if (gr_js_canon_(&quiet, &w, d, u) || w.oom) { jw_free(&w); ok = 0; break; }
                ok = !gr_sentence_(g, w.s, w.n);
                jw_free(&w);
            }
        }
        gr_free(g);
    }
    if (!ok || !gr_js_consts_apart_(c, d, a, tm, 1)) return -3; /* nor a listed value in two enum/const branches */
    return gr_js_union_(c, d, a, depth, body, tm);
}

/* The body of schema object s's rule, of the types in mask only (what a
 * "type" beside the keyword that led here allows). 1, 0 (no value
 * matches), -1. */
static inline int gr_js_body_(gr_js_ *c, const js_doc *d, int s, int depth, jw *body, int mask) {
    int tm = gr_js_type_kw_(c, d, s);
    if (tm < 0) return -1;
    if (!(tm &= mask)) return 0;
    for (int f = js_first(d, s); f >= 0; f = js_next(d, f)) {
        int types;
        const char *k = js_key(d, f);
        if (gr_js_keyword_(k, &types) == GR_KW_REFUSED && (types & tm)) return gr_js_fail_(c, "the schema keyword \"%s\" is not supported", k);
        if ((!strcmp(k, "$id") || !strcmp(k, "id")) && s != c->root && c->has_ref && js_typeof(d, f) == JS_STR && js_str(d, f)[0] != '#')
            return gr_js_fail_(c, "\"%s\" inside a schema is not supported (it changes what $ref points at)", k);
    }
    int ref = js_get(d, s, "$ref");
    if (ref >= 0) {
        const char *o = c->legacy ? NULL : gr_js_other_(d, s, "$ref", 1); /* beside "type": the target of those types */
        if (o) return gr_js_fail_(c, "\"$ref\" beside \"%s\" is not supported (the two would have to be merged)", o);
        int to = gr_js_resolve_(c, d, ref);
        int k = to < 0 ? -1 : gr_js_schema_m_(c, d, to, depth + 1, c->legacy ? mask : tm);
        if (k > 0) gr_js_ref_(body, k);
        return k < 0 ? -1 : k > 0;
    }
    static const char *const comb[] = {"anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 3; i++) {
        int a = js_get(d, s, comb[i]);
        if (a < 0) continue;
        if (js_typeof(d, a) != JS_ARR || !js_count(d, a)) return gr_js_fail_(c, "\"%s\" must be a non-empty array of schemas", comb[i]);
        const char *o = gr_js_other_(d, s, comb[i], 1); /* beside "type": each branch of those types */
        if (o) { /* beside object keywords: merged with each branch (allOf: with all) */
            int mergeable = 1;
            for (int f = js_first(d, s); f >= 0 && mergeable; f = js_next(d, f)) mergeable = f == a || gr_js_mergeable_(d, f, -1);
            if (!mergeable) return gr_js_fail_(c, "\"%s\" beside \"%s\" is not supported (the two would have to be merged)", comb[i], o);
            if (i == 2) return gr_js_merge_(c, d, &s, 1, -1, depth, tm, body);
            return gr_js_distribute_(c, d, s, a, i == 1, depth, tm, body);
        }
        if (i == 1) { /* oneOf: exactly one branch; as anyOf only when no two branches share a type */
            int seen = 0, apart = 1;
            for (int b = js_first(d, a); b >= 0 && apart; b = js_next(d, b)) {
                int t = gr_js_types_(c, d, b, depth + 1) & tm;
                apart = !(t & seen);
                seen |= t;
            }
            if (!apart && !gr_js_consts_apart_(c, d, a, GR_T_ALL, 0)) {
                int r = gr_js_oneof_(c, d, a, depth, tm, body);
                if (r != -3) return r;
                return gr_js_fail_(c, "%s", "\"oneOf\" whose branches may overlap is not supported (use anyOf, or branches of different types or different constants)");
            }
        }
        if (i < 2) return gr_js_union_(c, d, a, depth, body, tm);
        int only = -1, n = 0; /* allOf: exact when at most one branch asserts anything */
        for (int b = js_first(d, a); b >= 0; b = js_next(d, b)) {
            if (js_typeof(d, b) == JS_FALSE) return 0; /* one branch matches nothing: so does allOf */
            if (gr_js_asserts_(d, b, NULL)) only = b, n++;
        }
        if (n > 1) return gr_js_allof_(c, d, a, depth, tm, body);
        if (only < 0) { gr_js_any_(body, tm); return 1; }
        int k = gr_js_schema_m_(c, d, only, depth + 1, tm);
        if (k > 0) gr_js_ref_(body, k);
        return k < 0 ? -1 : k > 0;
    }
    int e = js_get(d, s, "enum"), cst = js_get(d, s, "const");
    if (e >= 0 || cst >= 0) {
        if (e >= 0 && cst >= 0) return gr_js_fail_(c, "%s", "\"enum\" beside \"const\" is not supported");
        if (e >= 0 && js_typeof(d, e) != JS_ARR) return gr_js_fail_(c, "%s", "\"enum\" must be a non-empty array");
        if (e >= 0 && !js_count(d, e)) return gr_js_fail_(c, "%s", "\"enum\" must be a non-empty array");
        const char *o = gr_js_other_(d, s, e >= 0 ? "enum" : "const", 1);
        if (o) return gr_js_fail_(c, "\"%s\" beside \"%s\" is not supported", e >= 0 ? "enum" : "const", o);
        gr_js_alts_ al = {0};
        int rc = 0;
        for (int v = e >= 0 ? js_first(d, e) : cst; v >= 0 && !rc; v = e >= 0 ? js_next(d, v) : -1) {
            if (!(gr_js_value_type_(d, v) & tm)) continue; /* ruled out by type */
            jw vj = {0};
            rc = gr_js_canon_(c, &vj, d, v) ? -1 : gr_js_alts_add_(&al, vj.s, vj.n) ? gr_js_fail_(c, "%s", "out of memory") : 0;
            jw_free(&vj);
        }
        if (!rc && al.n) gr_js_alts_write_(body, &al);
        int any = al.n;
        gr_js_alts_free_(&al);
        return rc ? -1 : any > 0;
    }
    int any = 0, r;
    jw part = {0};
    for (int t = 1; t < GR_T_ALL; t <<= 1) {
        if (!(tm & t) || (t == GR_T_INT && (tm & GR_T_FRAC))) continue;
        part.n = 0;
        switch (t) {
        case GR_T_NULL: jw_lit(&part, "jnull"), r = 1; break;
        case GR_T_BOOL: jw_lit(&part, "jbool"), r = 1; break;
        case GR_T_OBJ: r = gr_js_object_(c, d, s, depth, &part); break;
        case GR_T_ARR: r = gr_js_array_(c, d, s, depth, &part); break;
        case GR_T_STR: r = gr_js_string_(c, d, s, &part); break;
        case GR_T_FRAC: r = gr_js_number_(c, d, s, &part); break;
        default: r = gr_js_integer_(c, d, s, &part); break;
        }
        if (r < 0) { jw_free(&part); return -1; }
        if (!r) continue;
        if (any++) jw_lit(body, " | ");
        jw_raw(body, part.s, part.n);
    }
    jw_free(&part);
    return any > 0;
}

/* The rule of schema node s, compiled once (a $ref back to a schema being
 * compiled gets its rule: recursive schemas); 0 when no value matches it,
 * -1 refused. */
static inline int gr_js_schema_(gr_js_ *c, const js_doc *d, int s, int depth) {
    if (c->failed) return -1;
    if (depth > GR_JS_MAX_DEPTH) return gr_js_fail_(c, "the schema nests deeper than %d (counting $ref)", GR_JS_MAX_DEPTH);
    if (c->d != d || !c->memo) {
        free(c->memo), free(c->busy);
        c->d = d;
        c->memo = (int *)calloc((size_t)d->n + 1, sizeof(int)), c->busy = (unsigned char *)calloc((size_t)d->n + 1, 1);
        if (!c->memo || !c->busy) return gr_js_fail_(c, "%s", "out of memory");
    }
    if (js_typeof(d, s) == JS_FALSE) return 0;
    if (js_typeof(d, s) != JS_TRUE && js_typeof(d, s) != JS_OBJ) return gr_js_fail_(c, "%s", "a schema must be an object or a boolean");
    if (c->memo[s]) {
        if (c->busy[s]) c->busy[s] = 2;
        return c->memo[s] > 0 ? c->memo[s] : 0;
    }
    int k = ++c->n;
    c->memo[s] = k, c->busy[s] = 1;
    jw body = {0};
    int r = js_typeof(d, s) == JS_TRUE ? (jw_lit(&body, "jvalue"), 1) : gr_js_body_(c, d, s, depth, &body, GR_T_ALL);
    int back = c->busy[s] == 2;
    c->busy[s] = 0;
    if (r > 0) gr_js_def_(c, k, &body);
    jw_free(&body);
    if (r < 0) return -1;
    if (!r) {
        c->memo[s] = -2;
        if (back) return gr_js_fail_(c, "%s", "a schema that refers to itself matches no value");
        return 0;
    }
    return k;
}

/* The slot of key in the masked-schema table (grown to hold one more),
 * or -1 without memory. */
static inline int gr_js_mslot_(gr_js_ *c, uint64_t key) {
    if (2 * (c->mn + 1) > c->mcap) {
        int nc = c->mcap ? 2 * c->mcap : 64;
        uint64_t *nk = (uint64_t *)calloc((size_t)nc, sizeof *nk);
        int *nr = (int *)malloc((size_t)nc * sizeof *nr);
        unsigned char *nb = (unsigned char *)malloc((size_t)nc);
        if (!nk || !nr || !nb) return free(nk), free(nr), free(nb), -1;
        for (int i = 0; i < c->mcap; i++)
            if (c->mkey[i]) {
                int j = (int)((c->mkey[i] * 0x9E3779B97F4A7C15ull) >> 40) & (nc - 1);
                while (nk[j]) j = (j + 1) & (nc - 1);
                nk[j] = c->mkey[i], nr[j] = c->mrule[i], nb[j] = c->mbusy[i];
            }
        free(c->mkey), free(c->mrule), free(c->mbusy);
        c->mkey = nk, c->mrule = nr, c->mbusy = nb, c->mcap = nc;
    }
    int j = (int)((key * 0x9E3779B97F4A7C15ull) >> 40) & (c->mcap - 1);
    while (c->mkey[j] && c->mkey[j] != key) j = (j + 1) & (c->mcap - 1);
    return j;
}

/* The rule of schema node s restricted to the types in mask (a "type"
 * beside the $ref or combinator that led to it): compiled once per (s,
 * mask); gr_js_schema_ when mask is every type. */
static inline int gr_js_schema_m_(gr_js_ *c, const js_doc *d, int s, int depth, int mask) {
    if (mask == GR_T_ALL || c->failed) return c->failed ? -1 : gr_js_schema_(c, d, s, depth);
    if (depth > GR_JS_MAX_DEPTH) return gr_js_fail_(c, "the schema nests deeper than %d (counting $ref)", GR_JS_MAX_DEPTH);
    if (js_typeof(d, s) == JS_FALSE) return 0;
    if (js_typeof(d, s) != JS_TRUE && js_typeof(d, s) != JS_OBJ) return gr_js_fail_(c, "%s", "a schema must be an object or a boolean");
    uint64_t key = (uint64_t)s * 128 + (uint64_t)mask + 1;
    int j = gr_js_mslot_(c, key);
    if (j < 0) return gr_js_fail_(c, "%s", "out of memory");
    if (c->mkey[j]) {
        if (c->mbusy[j]) c->mbusy[j] = 2;
        return c->mrule[j] > 0 ? c->mrule[j] : 0;
    }
    int k = ++c->n;
    c->mkey[j] = key, c->mrule[j] = k, c->mbusy[j] = 1, c->mn++;
    jw body = {0};
    int r = js_typeof(d, s) == JS_TRUE ? (gr_js_any_(&body, mask), 1) : gr_js_body_(c, d, s, depth, &body, mask);
    j = gr_js_mslot_(c, key); /* the table may have grown meanwhile */
    int back = j >= 0 && c->mbusy[j] == 2;
    if (j >= 0) c->mbusy[j] = 0;
    if (r > 0) gr_js_def_(c, k, &body);
    jw_free(&body);
    if (r < 0 || j < 0) return j < 0 ? gr_js_fail_(c, "%s", "out of memory") : -1;
    if (!r) {
        c->mrule[j] = -2;
        if (back) return gr_js_fail_(c, "%s", "a schema that refers to itself matches no value");
        return 0;
    }
    return k;
}

/* 1 when a member named $ref is in the tree under node i. */
static inline int gr_js_has_ref_(const js_doc *d, int i) {
    for (int k = js_first(d, i); k >= 0; k = js_next(d, k))
        if ((js_typeof(d, i) == JS_OBJ && js_key_len(d, k) == 4 && !memcmp(js_key(d, k), "$ref", 4)) || gr_js_has_ref_(d, k)) return 1;
    return 0;
}

/* Sets up c to compile schemas of d whose "#" is root. */
static inline void gr_js_start_(gr_js_ *c, const js_doc *d, int root) {
    c->root = root;
    const char *v = js_str(d, js_get(d, root, "$schema"));
    c->legacy = v && (strstr(v, "draft-03") || strstr(v, "draft-04") || strstr(v, "draft-06") || strstr(v, "draft-07"));
    c->has_ref = gr_js_has_ref_(d, root);
}

/* GBNF text (malloc'd; root ::= the schema) for the JSON-schema subset
 * documented in docs/grammar.md; NULL with err saying what is not
 * supported (by keyword), or why no value would match. The text parses
 * (it is checked here, so that a refusal names the schema). exact: the
 * schema's whole language (gr_json_schema_exact); else what generation
 * writes (gr_json_schema), which leaves out keys an object does not list
 * unless its additionalProperties admits them. */
static inline char *gr_json_schema_mode_(const js_doc *d, int schema, int exact, char *err, size_t errlen) {
    gr_js_ c = {.err = err, .errlen = errlen, .exact = exact};
    if (err && errlen) err[0] = 0;
    gr_js_start_(&c, d, schema);
    jw_lit(&c.out, gr_js_prims_);
    const char *ms = js_str(d, js_get(d, schema, "$schema"));
    if (ms && strncmp(ms, "http://json-schema.org/", 23) && strncmp(ms, "https://json-schema.org/", 24))
        gr_js_fail_(&c, "\"$schema\" names a metaschema that is none of the specification's drafts (\"%.100s\"): its vocabularies could make keywords "
                        "annotations",
                    ms);
    int k = c.failed ? -1 : gr_js_schema_(&c, d, schema, 0);
    gr_js_done_(&c);
    if (!k && !c.failed) gr_js_fail_(&c, "%s", "the schema matches no JSON value");
    if (c.fmt.n) jw_raw(&c.out, c.fmt.s, c.fmt.n);
    int foom = c.fmt.oom;
    jw_free(&c.fmt);
    if (k <= 0 || c.failed || c.out.oom || foom) {
        if (!c.failed && err) snprintf(err, errlen, "out of memory");
        jw_free(&c.out);
        return NULL;
    }
    char b[48];
    snprintf(b, sizeof b, "root ::= ws r%d ws\n", k);
    jw_lit(&c.out, b);
    if (c.out.oom) { jw_free(&c.out); return NULL; }
    char why[256];
    gr_grammar *g = gr_parse(c.out.s, c.out.n, "root", why, sizeof why);
    if (!g) {
        if (err) snprintf(err, errlen, "the schema's grammar is refused (a schema that refers to itself before any value is written?): %s", why);
        jw_free(&c.out);
        return NULL;
    }
    gr_free(g);
    return c.out.s;
}

/* What generation constrained by the schema writes: every value valid,
 * the keys of an object that lists its properties among them unless
 * additionalProperties says other keys may follow. */
static inline char *gr_json_schema(const js_doc *d, int schema, char *err, size_t errlen) { return gr_json_schema_mode_(d, schema, 0, err, errlen); }

/* The schema's whole language: a text is accepted exactly when it is a
 * valid instance (the test suite's and the validator's view). */
static inline char *gr_json_schema_exact(const js_doc *d, int schema, char *err, size_t errlen) { return gr_json_schema_mode_(d, schema, 1, err, errlen); }

/* ------------------------------------------------------------ tool calls */

/* A chat format's tool-call syntax (chat.h's table holds one per format,
 * which openai.h also renders and parses calls with). A reply's calls are
 *   section_begin call (call_sep call)* section_end
 * or, without a section (section_begin NULL), calls standing alone with
 * whitespace around them. One call is, with key_begin set (arguments as
 * tags),
 *   call_begin NAME (key_begin KEY key_end value_begin VALUE value_end)* call_end
 * else (the arguments as one JSON object)
 *   call_begin [TYPE sep] name_prefix NAME [index_sep INDEX] [sep] args_begin ARGS args_end call_end
 * where sep follows the call's type when typed (a forced grammar writes
 * the type "function"), else the name. NULL is absent, "" empty. The
 * section and call tags, the key and value tags and sep are tags (special
 * tokens of the format's tokenizer); call_sep, name_prefix, index_sep and
 * args_begin/args_end are text. */
typedef struct {
    const char *section_begin, *section_end;
    const char *call_sep;
    const char *call_begin, *call_end;
    const char *key_begin, *key_end, *value_begin, *value_end;
    const char *sep;
    int typed;
    const char *name_prefix, *index_sep;
    const char *args_begin, *args_end;
} gr_tool_syntax;

/* Raw text inside argument tags (a string argument, a reasoning block):
 * any text without "</" or "<<" (so no closing tag can start inside it). */
static const char gr_tool_prims_[] =
    "tws ::= [ \\t\\n]{0,2}\n"
    "tchar ::= [^<] | \"<\" [^/<]\n"
    "traw ::= tchar*\n";

/* Writes one GBNF literal of the n parts joined (NULL parts left out):
 * line breaks as \n, quotes and backslashes escaped, other control bytes
 * as \xHH. */
static inline void gr_tool_lit_(jw *w, int n, const char *const *part) {
    jw_lit(w, "\"");
    for (int i = 0; i < n; i++)
        for (const unsigned char *p = (const unsigned char *)part[i]; p && *p; p++) {
            char e[8];
            if (*p == '"' || *p == '\\') e[0] = '\\', e[1] = (char)*p, jw_raw(w, e, 2);
            else if (*p == '\n') jw_lit(w, "\\n");
            else if (*p < 0x20 || *p == 0x7f) snprintf(e, sizeof e, "\\x%02x", *p), jw_lit(w, e);
            else jw_raw(w, (const char *)p, 1);
        }
    jw_lit(w, "\"");
}

/* gr_tool_lit_ of one or two strings, between the texts before and after. */
static inline void gr_tool_lit2_(jw *w, const char *before, const char *a, const char *b, const char *after) {
    const char *part[2] = {a, b};
    jw_lit(w, before), gr_tool_lit_(w, 2, part), jw_lit(w, after);
}

/* The value rule of one argument: a "string" property is written raw
 * (its enum as the literal alternatives; with maxLength, at most that many
 * characters and no '<'), anything else as the JSON its
 * schema allows — as the tool-call parser reads it back. Returns the rule
 * number, or -1. */
static inline int gr_tool_value_(gr_js_ *c, const js_doc *d, int prop) {
    const char *ty = js_str(d, js_get(d, prop, "type"));
    if (!ty || strcmp(ty, "string")) {
        int k = gr_js_schema_(c, d, prop, 1);
        return k ? k : gr_js_fail_(c, "the schema of argument \"%.100s\" matches no value", js_key(d, prop));
    }
    for (int f = js_first(d, prop); f >= 0; f = js_next(d, f)) { /* raw text enforces these only */
        int t;
        const char *kw = js_key(d, f);
        if (gr_js_keyword_(kw, &t) != GR_KW_ANNOT && strcmp(kw, "type") && strcmp(kw, "enum") && strcmp(kw, "minLength") && strcmp(kw, "maxLength") &&
            strcmp(kw, "pattern") && strcmp(kw, "format"))
            return gr_js_fail_(c, "the schema keyword \"%s\" is not supported (string argument \"%.100s\")", kw, js_key(d, prop));
    }
    int en = js_get(d, prop, "enum"), mn, mx;
    if (gr_js_count_(c, d, prop, "minLength", 0, &mn) || gr_js_count_(c, d, prop, "maxLength", -1, &mx)) return -1;
    if (mx >= 0 && mx < mn) return gr_js_fail_(c, "%s", "a string property's maxLength is below its minLength");
    if (en >= 0 && (js_typeof(d, en) != JS_ARR || !js_count(d, en))) return gr_js_fail_(c, "%s", "\"enum\" must be a non-empty array");
    if (en < 0) { /* a pattern or a format, written raw (no '<') */
        jw content = {0};
        int r = gr_js_pattern_(c, d, prop, 1, mn, mx, &content);
        if (r > 0) {
            int k = gr_js_rule_(c);
            jw_raw(&c->out, content.s, content.n), jw_lit(&c->out, "\n");
            jw_free(&content);
            return k;
        }
        jw_free(&content);
        if (r < 0) return -1;
    } else if (js_get(d, prop, "pattern") >= 0 || js_get(d, prop, "format") >= 0)
        return gr_js_fail_(c, "\"enum\" beside \"%s\" is not supported (string argument \"%.100s\")", js_get(d, prop, "pattern") >= 0 ? "pattern" : "format",
                           js_key(d, prop));
    int k = gr_js_rule_(c);
    if (en >= 0) {
        gr_js_alts_ al = {0};
        for (int e = js_first(d, en); e >= 0; e = js_next(d, e)) {
            if (js_typeof(d, e) != JS_STR) return gr_js_alts_free_(&al), gr_js_fail_(c, "%s", "a string property's enum lists a value that is not a string");
            int len = 0; /* in code points, against minLength/maxLength */
            for (uint32_t i = 0; i < js_str_len(d, e); i++) len += (js_str(d, e)[i] & 0xC0) != 0x80;
            if (len < mn || (mx >= 0 && len > mx)) continue;
            if (gr_js_alts_add_(&al, js_str(d, e), js_str_len(d, e))) return gr_js_alts_free_(&al), gr_js_fail_(c, "%s", "out of memory");
        }
        int none = !al.n;
        if (!none) gr_js_alts_write_(&c->out, &al);
        gr_js_alts_free_(&al);
        if (none) return gr_js_fail_(c, "the string argument \"%.100s\" matches no value", js_key(d, prop));
        jw_lit(&c->out, "\n");
    } else {
        char b[64];
        /* bounded: without '<', so that the bounds count characters exactly */
        if (mx >= 0) snprintf(b, sizeof b, "[^<]{%d,%d}\n", mn, mx);
        else if (mn) snprintf(b, sizeof b, "[^<]{%d,} traw\n", mn);
        else snprintf(b, sizeof b, "traw\n");
        jw_lit(&c->out, b);
    }
    return k;
}

/* The rule of one call to function f ({"name", "parameters"}) with its
 * arguments as tags: call_begin name, the properties in schema order as
 * key_begin key key_end value_begin value value_end (the required ones
 * always, the others optional), call_end. Returns the rule, or -1. */
static inline int gr_tool_call_tags_(gr_js_ *c, const js_doc *d, int f, const gr_tool_syntax *sx) {
    int name = js_get(d, f, "name"), params = js_get(d, f, "parameters");
    int props = js_get(d, params, "properties"), req = js_get(d, params, "required");
    int np = js_typeof(d, props) == JS_OBJ ? js_count(d, props) : 0;
    gr_js_start_(c, d, params);
    /* the arguments as tags write the listed properties only: what else the
     * parameters say is refused by name, never dropped */
    for (int k = js_first(d, js_typeof(d, params) == JS_OBJ ? params : -1); k >= 0; k = js_next(d, k)) {
        int t;
        const char *kw = js_key(d, k);
        if (gr_js_keyword_(kw, &t) != GR_KW_ANNOT && strcmp(kw, "type") && strcmp(kw, "properties") && strcmp(kw, "required") &&
            strcmp(kw, "additionalProperties") && strcmp(kw, "$id") && strcmp(kw, "id"))
            return gr_js_fail_(c, "the schema keyword \"%s\" is not supported (parameters of \"%.100s\")", kw, js_str(d, name) ? js_str(d, name) : "");
    }
    const char *pty = js_str(d, js_get(d, params, "type"));
    if (pty && strcmp(pty, "object")) return gr_js_fail_(c, "the parameters of \"%.100s\" must be an object schema", js_str(d, name) ? js_str(d, name) : "");
    for (int r = js_first(d, req); r >= 0; r = js_next(d, r))
        if (gr_js_member_(d, props, js_str(d, r) ? js_str(d, r) : "", js_str_len(d, r)) < 0)
            return gr_js_fail_(c, "\"required\" names \"%.100s\", which the parameters' properties do not list", js_str(d, r) ? js_str(d, r) : "(not a string)");
    int *val = (int *)malloc((size_t)(np + 1) * sizeof(int)), i = 0;
    if (!val) return gr_js_fail_(c, "%s", "out of memory");
    for (int p = np ? js_first(d, props) : -1; p >= 0; p = js_next(d, p), i++)
        if ((val[i] = gr_tool_value_(c, d, p)) < 0) { free(val); return -1; }
    int base = c->n; /* chain rules base+1 .. base+np+1: the arguments from property i on */
    c->n += np + 1;
    i = 0;
    char b[96];
    for (int p = np ? js_first(d, props) : -1; p >= 0; p = js_next(d, p), i++) {
        int required = gr_js_required_(d, req, p);
        snprintf(b, sizeof b, "r%d ::= tws ", base + 1 + i);
        gr_tool_lit2_(&c->out, b, sx->key_begin, NULL, " ");
        gr_js_lit_(&c->out, js_key(d, p), js_key_len(d, p));
        gr_tool_lit2_(&c->out, " ", sx->key_end, NULL, " tws ");
        snprintf(b, sizeof b, " r%d ", val[i]);
        gr_tool_lit2_(&c->out, "", sx->value_begin, NULL, b);
        snprintf(b, sizeof b, " r%d", base + 2 + i);
        gr_tool_lit2_(&c->out, "", sx->value_end, NULL, b);
        if (!required) snprintf(b, sizeof b, " | r%d", base + 2 + i), jw_lit(&c->out, b);
        jw_lit(&c->out, "\n");
    }
    free(val);
    snprintf(b, sizeof b, "r%d ::= \"\"\n", base + 1 + np);
    jw_lit(&c->out, b);
    int k = gr_js_rule_(c);
    gr_tool_lit2_(&c->out, "", sx->call_begin, NULL, " ");
    gr_js_lit_(&c->out, js_str(d, name), js_str_len(d, name));
    snprintf(b, sizeof b, " r%d tws ", base + 1);
    gr_tool_lit2_(&c->out, b, sx->call_end, NULL, "\n");
    return k;
}

/* The rule of one call to function f with its arguments as one JSON
 * object: the JSON its parameters schema allows (any object without one).
 * Returns the rule, or -1. */
static inline int gr_tool_call_json_(gr_js_ *c, const js_doc *d, int f, const gr_tool_syntax *sx) {
    int name = js_get(d, f, "name"), params = js_get(d, f, "parameters");
    gr_js_start_(c, d, params);
    int a = params >= 0 ? gr_js_schema_(c, d, params, 0) : -1;
    if (params >= 0 && a <= 0) return a ? -1 : gr_js_fail_(c, "the parameters of \"%.100s\" match no value", js_str(d, name) ? js_str(d, name) : "");
    int k = gr_js_rule_(c);
    const char *head[4] = {sx->call_begin, sx->typed ? "function" : NULL, sx->typed ? sx->sep : NULL, sx->name_prefix};
    gr_tool_lit_(&c->out, 4, head), jw_lit(&c->out, " ");
    gr_js_lit_(&c->out, js_str(d, name), js_str_len(d, name));
    jw_lit(&c->out, " ");
    if (sx->index_sep) gr_tool_lit2_(&c->out, "", sx->index_sep, NULL, " [0-9]{1,3} ");
    gr_tool_lit2_(&c->out, "", sx->typed ? NULL : sx->sep, sx->args_begin, " ");
    if (a >= 0) gr_js_ref_(&c->out, a);
    else jw_lit(&c->out, "jobject");
    gr_tool_lit2_(&c->out, " ", sx->args_end, sx->call_end, "\n");
    return k;
}

/* GBNF text (malloc'd; root ::= ...) for tool calls in the syntax sx to the
 * functions of an OpenAI `tools` array: one call to the function named
 * `only`, or (only NULL) one to max_calls calls to any of them (a forced
 * turn must end: the grammar is finite in calls, and complete after the
 * last); with think_end (not NULL), a reasoning block closed by it comes
 * first (the prompt opened one). NULL with err saying why. */
static inline char *gr_tool_calls(const js_doc *d, int tools, const gr_tool_syntax *sx, const char *only, int max_calls, const char *think_end,
                                  char *err, size_t errlen) {
    gr_js_ c = {.err = err, .errlen = errlen};
    jw_lit(&c.out, gr_js_prims_);
    jw_lit(&c.out, gr_tool_prims_);
    jw alts = {0};
    int n = 0;
    for (int t = js_first(d, tools); t >= 0 && !c.failed; t = js_next(d, t)) {
        int f = js_get(d, t, "function");
        const char *nm = js_str(d, js_get(d, f, "name"));
        if (!nm || (only && strcmp(nm, only))) continue;
        int k = sx->key_begin ? gr_tool_call_tags_(&c, d, f, sx) : gr_tool_call_json_(&c, d, f, sx);
        if (k < 0) break;
        if (n++) jw_lit(&alts, " | ");
        gr_js_ref_(&alts, k);
    }
    if (!c.failed && !n) gr_js_fail_(&c, only ? "tool_choice names the function \"%s\", which tools does not list" : "%s",
                                     only ? only : "tool_choice needs at least one function in tools");
    if (!c.failed) {
        jw_lit(&c.out, "tcall ::= ");
        jw_raw(&c.out, alts.s ? alts.s : "", alts.n);
        jw_lit(&c.out, "\nroot ::= ");
        if (think_end) gr_tool_lit2_(&c.out, "traw ", think_end, NULL, " ");
        int more = max_calls > 1 && !only;
        if (!sx->section_begin) { /* calls standing alone: whitespace around them */
            jw_lit(&c.out, "tws tcall");
            if (more) jw_lit(&c.out, " (tws tcall){0,"), jw_int(&c.out, max_calls - 1), jw_lit(&c.out, "}");
            jw_lit(&c.out, " tws\n");
        } else {
            gr_tool_lit2_(&c.out, "", sx->section_begin, NULL, " tcall");
            if (more && sx->call_sep && *sx->call_sep) gr_tool_lit2_(&c.out, " (", sx->call_sep, NULL, " tcall){0,");
            else if (more) jw_lit(&c.out, " tcall{0,");
            if (more) jw_int(&c.out, max_calls - 1), jw_lit(&c.out, "}");
            gr_tool_lit2_(&c.out, " ", sx->section_end, NULL, "\n");
        }
    }
    int oom = alts.oom || c.fmt.oom;
    jw_free(&alts);
    gr_js_done_(&c);
    if (c.fmt.n) jw_raw(&c.out, c.fmt.s, c.fmt.n);
    jw_free(&c.fmt);
    if (c.failed || c.out.oom || oom) {
        if (!c.failed && err) snprintf(err, errlen, "out of memory");
        jw_free(&c.out);
        return NULL;
    }
    return c.out.s;
}

#endif
