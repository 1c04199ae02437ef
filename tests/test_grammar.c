/* test_grammar.c — grammar.h: GBNF parsing (a corpus in the syntax
 * llama.cpp documents, refusals with positions), the recognizer on
 * strings in and out of each language (membership decided from the
 * grammars' definitions), the vocabulary mask against a brute force over
 * the tiny fixture's tokenizer at every step of random walks, and the
 * JSON-schema subset. */
#include "chat.h"
#include "grammar.h"
#include "tok.h"

#include "check.h"

static const char *G_JSON =
    "# JSON values\n"
    "root   ::= ws value ws\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* )? ws \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "    value (ws \",\" ws value)*\n"
    "  )? ws \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= [ \\t\\n\\r]*\n";

static const char *G_ARITH =
    "root   ::= expr\n"
    "expr   ::= term ((\"+\" | \"-\") term)*\n"
    "term   ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= number | \"(\" expr \")\" | \"-\" factor\n"
    "number ::= [0-9]+\n";

static const char *G_LIST = "root ::= item{1,5}\nitem ::= \"- \" [^\\n]+ \"\\n\"   # one line per item\n";

static const char *G_CHESS =
    "root    ::= move (\" \" move){0,3}\n"
    "move    ::= piece? file rank capture? | \"O-O\" \"-O\"?\n"
    "piece   ::= [KQRBN]\n"
    "file    ::= [a-h]\n"
    "rank    ::= [1-8]\n"
    "capture ::= \"x\" [a-h] [1-8]\n";

static const char *G_C =
    "root        ::= ws declaration*\n"
    "declaration ::= type ws ident ws \"(\" ws \")\" ws \"{\" ws statement* \"}\" ws\n"
    "type        ::= \"int\" | \"void\"\n"
    "ident       ::= [a-zA-Z_] [a-zA-Z_0-9]*\n"
    "statement   ::= \"return\" ws [0-9]+ ws \";\" ws\n"
    "ws          ::= ([ \\t\\n] | \"//\" [^\\n]* \"\\n\")*\n";

static gr_grammar *parse(const char *text) {
    char err[300];
    gr_grammar *g = gr_parse(text, strlen(text), "root", err, sizeof err);
    if (!g) fprintf(stderr, "refused: %s\n", err);
    return g;
}

/* 1 when text is a sentence of g. */
static int in_lang(const gr_grammar *g, const char *text) {
    gr_state s;
    if (gr_init(g, &s)) return -1;
    int ok = gr_accept(g, &s, (const uint8_t *)text, strlen(text)) == 0 && gr_can_end(&s);
    gr_state_free(&s);
    return ok;
}

/* 1 when text is a prefix of some sentence of g. */
static int prefix_ok(const gr_grammar *g, const char *text, size_t n) {
    gr_state s;
    if (gr_init(g, &s)) return -1;
    int ok = gr_accept(g, &s, (const uint8_t *)text, n) == 0;
    gr_state_free(&s);
    return ok;
}

static int refused(const char *text, const char *want) {
    char err[300];
    gr_grammar *g = gr_parse(text, strlen(text), "root", err, sizeof err);
    if (g) { gr_free(g); fprintf(stderr, "accepted: %s\n", text); return 0; }
    if (!strstr(err, want)) { fprintf(stderr, "for %s: expected '%s' in '%s'\n", text, want, err); return 0; }
    return 1;
}

static void test_languages(void) {
    gr_grammar *j = parse(G_JSON), *a = parse(G_ARITH), *l = parse(G_LIST), *c = parse(G_CHESS), *cc = parse(G_C);
    CHECK(j && a && l && c && cc);
    if (!(j && a && l && c && cc)) return;
    const char *jin[] = {"{}", " [ ] ", "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\n\"], \"b\": {\"c\": 0}}", "\"caf\xc3\xa9 \xf0\x9f\x99\x82\"", "-0.5E+2"};
    const char *jout[] = {"{\"a\" 1}", "[1,]", "01", "{\"a\":}", "\"\\x\"", "\"tab\there\"", "[1 2]", "nul", "\"\xff\""};
    for (size_t i = 0; i < sizeof jin / sizeof *jin; i++) CHECK(in_lang(j, jin[i]) == 1);
    for (size_t i = 0; i < sizeof jout / sizeof *jout; i++) CHECK(in_lang(j, jout[i]) == 0);
    CHECK(prefix_ok(j, "{\"a\": [1, ", 10) == 1 && in_lang(j, "{\"a\": [1, ") == 0);
    CHECK(prefix_ok(j, "\"\xc3", 2) == 1);  /* half a character, inside a string: may go on */
    CHECK(prefix_ok(j, "\"\xe0\x80", 3) == 0); /* an overlong form can never complete */
    CHECK(prefix_ok(j, "\"\xed\xa0", 3) == 0 && prefix_ok(j, "\"\xed\x9f", 3) == 1); /* nor a surrogate; U+D7C0.. can */
    CHECK(prefix_ok(j, "\"\xf4\x90", 3) == 0 && prefix_ok(j, "\"\xf4\x8f", 3) == 1); /* nor past U+10FFFF */
    CHECK(prefix_ok(j, "{\xc3", 2) == 0);   /* no class after { takes a non-ASCII character */
    const char *ain[] = {"1+2*(3-4)", "-(5)", "7", "((1))/2-3"};
    const char *aout[] = {"1+", "(1", "+1", "1**2", ""};
    for (size_t i = 0; i < 4; i++) CHECK(in_lang(a, ain[i]) == 1);
    for (size_t i = 0; i < 5; i++) CHECK(in_lang(a, aout[i]) == 0);
    CHECK(in_lang(l, "- a\n- b c\n") == 1 && in_lang(l, "") == 0 && in_lang(l, "- \n") == 0);
    CHECK(in_lang(l, "- 1\n- 2\n- 3\n- 4\n- 5\n") == 1 && in_lang(l, "- 1\n- 2\n- 3\n- 4\n- 5\n- 6\n") == 0);
    CHECK(in_lang(c, "e4 Nf3 O-O Bb5xc6") == 1 && in_lang(c, "O-O-O") == 1);
    CHECK(in_lang(c, "e9") == 0 && in_lang(c, "e4 e5 e6 e7 e8") == 0 && in_lang(c, "Ke") == 0);
    CHECK(in_lang(cc, "int main() { return 0; }\n// done\nvoid f(){}") == 1);
    CHECK(in_lang(cc, "int 9x() {}") == 0 && in_lang(cc, "int f() { return; }") == 0);
    gr_free(j), gr_free(a), gr_free(l), gr_free(c), gr_free(cc);
}

static void test_refusals(void) {
    CHECK(refused("root ::= \"abc", "line 1, column 10: unterminated string literal"));
    CHECK(refused("root ::= a\n", "line 1, column 10: rule a is used but not defined"));
    CHECK(refused("root ::= root \"x\" | \"y\"\n", "left recursive"));
    CHECK(refused("root ::= a\na ::= b? a \"x\"\nb ::= \"b\"\n", "rule a is left recursive"));
    CHECK(refused("start ::= \"x\"\n", "no rule named root"));
    CHECK(refused("root ::= \"\\q\"", "unknown escape \\q"));
    CHECK(refused("root ::= []", "empty character class"));
    CHECK(refused("root ::= \"a\"{3,1}", "maximum is below the minimum"));
    CHECK(refused("root ::= * \"a\"", "without an item"));
    CHECK(refused("root := \"a\"", "expected ::="));
    CHECK(refused("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule root is defined twice"));
    CHECK(refused("root ::= (\"a\"", "unclosed ("));
    CHECK(refused("root ::= [a-", "unterminated"));
    CHECK(refused("root ::= [z-a]", "range end below"));
    CHECK(refused("root ::= \"\\uD800\"", "not a Unicode scalar value"));
    CHECK(refused("root ::= \"a\" )", "unexpected ')'"));
    CHECK(refused("root ::= \"a\"{99999}", "above 10000"));
    CHECK(refused("root ::= \"a\" root\n", "rule root matches no text"));
    CHECK(refused("root ::= \"b\" | \"a\" x\nx ::= \"c\" x\n", "rule x matches no text"));
    CHECK(refused("root ::= \"a\" (\"b\" root)\n", "matches no text"));
    CHECK(refused("root ::= [^\\x00-\\U0010FFFF]\n", "matches no character"));
    CHECK(refused("root ::= \"x\" | [^\\x00-\\uD7FF\\uE000-\\U0010FFFF]\n", "matches no character"));
}

/* The hostile probe of issue #34: nesting bounded by name, never the
 * stack; generated rule names of any length, distinct from the grammar's
 * own; chains of rules far longer than any recursion could follow. */
static void test_hostile(void) {
    jw w = {0};
    jw_lit(&w, "root ::= ");
    for (int i = 0; i < 60000; i++) jw_lit(&w, "(");
    jw_lit(&w, "\"a\"");
    for (int i = 0; i < 60000; i++) jw_lit(&w, ")");
    CHECK(refused(w.s, "groups nested deeper than 1024"));
    jw_free(&w);
    jw_lit(&w, "root ::= ");
    for (int i = 0; i < 200; i++) jw_lit(&w, "(");
    jw_lit(&w, "\"a\"");
    for (int i = 0; i < 200; i++) jw_lit(&w, ")");
    gr_grammar *g = parse(w.s);
    CHECK(g && in_lang(g, "a") == 1 && in_lang(g, "aa") == 0);
    gr_free(g), jw_free(&w);
    char name[299];
    memset(name, 'R', 298), name[298] = 0;
    jw_lit(&w, "root ::= "), jw_lit(&w, name), jw_lit(&w, "\n"), jw_lit(&w, name), jw_lit(&w, " ::= (\"a\") (\"b\")\n");
    g = parse(w.s);
    CHECK(g && in_lang(g, "ab") == 1 && in_lang(g, "aa") == 0 && in_lang(g, "bb") == 0);
    gr_free(g), jw_free(&w);
    g = parse("root ::= (\"a\") root_1 root_2\nroot_1 ::= \"b\"\nroot_2 ::= (\"c\")\n"); /* names the generated rules would have */
    CHECK(g && in_lang(g, "abc") == 1 && in_lang(g, "aac") == 0 && in_lang(g, "abb") == 0);
    gr_free(g);
    /* 100k chained rules, each both ways: a character first, and nullable to the end */
    for (int nullable = 0; nullable < 2; nullable++) {
        jw_lit(&w, nullable ? "root ::= r0 \"x\"\n" : "root ::= r0\n");
        char b[64];
        for (int i = 0; i < 100000; i++) snprintf(b, sizeof b, nullable ? "r%d ::= r%d\n" : "r%d ::= \"x\" r%d\n", i, i + 1), jw_lit(&w, b);
        snprintf(b, sizeof b, nullable ? "r100000 ::= \"\"\n" : "r100000 ::= \"x\"\n"), jw_lit(&w, b);
        g = parse(w.s);
        CHECK(g != NULL);
        gr_state st; /* the nullable chain is deeper than the recognizer follows: reported, not cut */
        CHECK(g && (nullable ? gr_init(g, &st) == -2 : in_lang(g, "x") == 0));
        if (g && nullable) gr_state_free(&st);
        gr_free(g), jw_free(&w);
    }
    jw_lit(&w, "root ::= r0\n");
    for (int i = 0; i < 100000; i++) { /* a left-recursive cycle 100k rules long */
        char b[48];
        snprintf(b, sizeof b, "r%d ::= r%d \"x\" | \"y\"\n", i, (i + 1) % 100000);
        jw_lit(&w, b);
    }
    CHECK(refused(w.s, "left recursive"));
    jw_free(&w);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* 1 when s splits into j pieces of the set P (which may hold "") for some
 * j in [min, max] (max < 0: any): the definition of P{min,max}, decided by
 * dynamic programming over (length read, pieces used). */
static int in_pieces(const char *s, const char *const *p, int np, int min, int max) {
    enum { L = 16, J = 24 };
    size_t n = strlen(s);
    unsigned char reach[L + 1][J + 1] = {{0}};
    reach[0][0] = 1;
    int cap = max < 0 ? J : max;
    for (int j = 0; j < cap; j++)
        for (size_t i = 0; i <= n; i++) {
            if (!reach[i][j]) continue;
            for (int k = 0; k < np; k++) {
                size_t m = strlen(p[k]);
                if (i + m <= n && !memcmp(s + i, p[k], m)) reach[i + m][j + 1] = 1;
            }
        }
    for (int j = min; j <= cap; j++)
        if (reach[n][j]) return 1;
    return 0;
}

/* Repetitions of items that can match the empty string: each grammar's
 * language equals its definition on every string over {a, b} up to length
 * 8, and the recognizer keeps a bounded number of ways per text (one per
 * copy would be hundreds for {0,500}, and `x*` of a nullable x was refused
 * as left recursive). */
static void test_nullable_repeats(void) {
    static const char *const pool[] = {"", "a", "b", "ab", "ba", "aa", "bab"};
    int mism = 0, grammars = 0;
    for (int trial = 0; trial < 60; trial++) {
        const char *p[4];
        int np = 1 + (int)(next_rand() % 4), min = (int)(next_rand() % 4), max = next_rand() % 3 ? min + (int)(next_rand() % 4) : -1;
        /* the pieces as a group, or as a named rule (every third) */
        char text[300], *w = text, alts[200], *a = alts;
        for (int k = 0; k < np; k++) {
            p[k] = pool[next_rand() % 7];
            a += sprintf(a, "%s\"%s\" ", k ? "| " : "", p[k]);
        }
        w += trial % 3 ? sprintf(w, "root ::= (%s)", alts) : sprintf(w, "root ::= x");
        w += max < 0 ? sprintf(w, "{%d,}\n", min) : sprintf(w, "{%d,%d}\n", min, max);
        if (trial % 3 == 0) sprintf(w, "x ::= %s\n", alts);
        gr_grammar *g = parse(text);
        CHECK(g != NULL);
        if (!g) continue;
        grammars++;
        for (int len = 0; len <= 8; len++)
            for (int bits = 0; bits < 1 << len; bits++) {
                char s[16];
                for (int i = 0; i < len; i++) s[i] = bits >> i & 1 ? 'b' : 'a';
                s[len] = 0;
                if (in_lang(g, s) != in_pieces(s, p, np, min, max)) {
                    if (mism++ < 5) fprintf(stderr, "%s: \"%s\" recognized %d, by definition %d\n", text, s, in_lang(g, s), in_pieces(s, p, np, min, max));
                }
            }
        gr_free(g);
    }
    CHECK(grammars == 60 && mism == 0);

    /* named rules, nesting, a rule matching only "" */
    struct { const char *g, *in[4], *out[3]; } fixed[] = {
        {"root ::= (\"a\"?)*\n", {"", "a", "aaaaaa", NULL}, {"b", "ab", NULL}},
        {"root ::= x* \"c\"\nx ::= y | \"bb\"\ny ::= \"a\"?\n", {"c", "abbac", "bbbbc", NULL}, {"bc", "", "ca"}},
        {"root ::= ((\"a\"?)* \"b\"?){2,}\n", {"", "ab", "bab", "bbbb"}, {"c", NULL, NULL}},
        {"root ::= (\"\" | )* \"x\"\n", {"x", NULL, NULL, NULL}, {"", "xx", NULL}},
        {"root ::= x{1,3}\nx ::= \"a\" x | \"b\"\n", {"b", "abb", "aabbab", NULL}, {"", "bbbb", "a"}},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        gr_grammar *g = parse(fixed[i].g);
        CHECK(g != NULL);
        if (!g) continue;
        for (int k = 0; k < 4 && fixed[i].in[k]; k++) CHECK(in_lang(g, fixed[i].in[k]) == 1);
        for (int k = 0; k < 3 && fixed[i].out[k]; k++) CHECK(in_lang(g, fixed[i].out[k]) == 0);
        gr_free(g);
    }
    CHECK(refused("root ::= root* \"a\"\n", "rule root is left recursive"));

    /* a few ways at each point, not one per copy */
    const char *wide[] = {"root ::= (\"a\"?){0,500}\n", "root ::= ([^\\n\"] | | \"ab\"){138}\n"};
    for (int i = 0; i < 2; i++) {
        gr_grammar *g = parse(wide[i]);
        CHECK(g != NULL);
        if (!g) continue;
        gr_state s;
        CHECK(gr_init(g, &s) == 0);
        int most = s.st.n, ok = 1;
        for (int k = 0; k < 120 && ok; k++) {
            ok = gr_accept(g, &s, (const uint8_t *)"a", 1) == 0;
            if (s.st.n > most) most = s.st.n;
        }
        CHECK(ok && gr_can_end(&s) && most <= 4);
        gr_state_free(&s);
        gr_free(g);
    }
}

/* Random walks through the grammar with the tiny fixture's vocabulary: at
 * every step the mask equals a brute force (each token's bytes appended
 * to the text so far, recognized from the start). */
static void walk(const gr_grammar *g, const tok *t, const gr_vocab *v, int walks, int steps) {
    gr_mask_ctx cx;
    CHECK(gr_mask_ctx_init(&cx, v) == 0);
    uint8_t *allowed = (uint8_t *)malloc((size_t)v->n_tokens);
    char *text = (char *)malloc(8192);
    int mism = 0, dead = 0, total = 0;
    for (int w = 0; w < walks; w++) {
        gr_state s;
        CHECK(gr_init(g, &s) == 0);
        size_t tn = 0;
        for (int st = 0; st < steps; st++) {
            int n = gr_mask(g, &s, v, &cx, allowed), brute_n = 0;
            CHECK(n >= 0);
            for (int id = 0; id < v->n_tokens; id++) {
                size_t len = 0;
                const char *p = tok_is_special(t, id) ? NULL : tok_piece(t, id, &len);
                int ok = 0;
                if (p && len && tn + len < 8192) {
                    memcpy(text + tn, p, len);
                    ok = prefix_ok(g, text, tn + len);
                }
                brute_n += ok;
                mism += ok != allowed[id];
            }
            total++;
            mism += brute_n != n;
            if (!n) { dead += !gr_can_end(&s); break; }
            if (gr_can_end(&s) && next_rand() % 8 == 0) break;
            int pick = (int)(next_rand() % (uint32_t)n), id = 0;
            for (; id < v->n_tokens; id++)
                if (allowed[id] && pick-- == 0) break;
            size_t len = 0;
            const char *p = tok_piece(t, id, &len);
            if (!p || gr_accept(g, &s, (const uint8_t *)p, len)) { mism++; break; }
            memcpy(text + tn, p, len), tn += len;
        }
        gr_state_free(&s);
    }
    CHECK(mism == 0);
    CHECK(dead == 0); /* a masked walk never reaches a state nothing can continue */
    CHECK(total > walks);
    free(allowed), free(text);
    gr_mask_ctx_free(&cx);
}

/* A grammar with more ways to continue than GR_MAX_STACKS is reported as
 * such (-2) by gr_init, gr_accept and gr_mask, never taken as a dead end. */
static void test_too_ambiguous(const tok *t, const gr_vocab *v) {
    enum { N = GR_MAX_STACKS + 8 };
    char *text = (char *)malloc(16 + 3 * N + 64);
    CHECK(text != NULL);
    if (!text) return;
    for (int lead = 0; lead < 2; lead++) {
        char *w = text + sprintf(text, "root ::= %s", lead ? "\"b\" " : "");
        for (int i = 0; i < N; i++) w += sprintf(w, "x ");
        sprintf(w, "\nx ::= \"a\" | \"\"\n");
        gr_grammar *g = parse(text);
        CHECK(g != NULL);
        if (!g) continue;
        gr_state s;
        int r = gr_init(g, &s);
        CHECK(r == (lead ? 0 : -2));
        if (lead && !r) {
            CHECK(gr_accept(g, &s, (const uint8_t *)"b", 1) == -2);
            CHECK(s.st.n == 1); /* unchanged */
            if (t && v) {
                gr_mask_ctx cx;
                uint8_t *allowed = (uint8_t *)malloc((size_t)v->n_tokens);
                CHECK(allowed && !gr_mask_ctx_init(&cx, v));
                if (allowed) CHECK(gr_mask(g, &s, v, &cx, allowed) == -2);
                gr_mask_ctx_free(&cx);
                free(allowed);
            }
        }
        gr_state_free(&s);
        gr_free(g);
    }
    free(text);
}

/* The token tables against the whole walk: random walks over a 32k BPE
 * vocabulary (byte tokens that end inside a character included), a
 * mask from the tables and one walking the whole trie at every step,
 * equal token for token. Half the picks go to the shortest allowed
 * tokens, so walks reach nesting deeper than a table's frames. Returns
 * the steps compared. */
static int tables_walk_ctx(const gr_grammar *g, const tok *t, const gr_vocab *v, gr_mask_ctx *ap, int walks, int steps) {
    gr_mask_ctx b, *a = ap;
    CHECK(gr_mask_ctx_init(&b, v) == 0);
    b.whole_walk = 1;
    uint8_t *ma = (uint8_t *)malloc((size_t)v->n_tokens), *mb = (uint8_t *)malloc((size_t)v->n_tokens);
    int mism = 0, compared = 0;
    for (int w = 0; w < walks; w++) {
        gr_state s;
        CHECK(gr_init(g, &s) == 0);
        for (int st = 0; st < steps; st++) {
            int na = gr_mask(g, &s, v, a, ma), nb = gr_mask(g, &s, v, &b, mb);
            compared++;
            if (na != nb || memcmp(ma, mb, (size_t)v->n_tokens)) {
                mism++;
                fprintf(stderr, "tables: step %d of walk %d: %d allowed, the whole walk %d\n", st, w, na, nb);
                break;
            }
            if (na <= 0 || (gr_can_end(&s) && next_rand() % 16 == 0)) break;
            int id = -1;
            if (next_rand() % 2) { /* the shortest allowed, a random one of them */
                size_t best = (size_t)-1;
                int ties = 0;
                for (int i = 0; i < v->n_tokens; i++) {
                    size_t len = 0;
                    if (!ma[i]) continue;
                    tok_piece(t, i, &len);
                    if (len < best) best = len, ties = 0;
                    if (len == best && next_rand() % (uint32_t)++ties == 0) id = i;
                }
            } else {
                int pick = (int)(next_rand() % (uint32_t)na);
                for (id = 0; id < v->n_tokens; id++)
                    if (ma[id] && pick-- == 0) break;
            }
            size_t len = 0;
            const char *p = tok_piece(t, id, &len);
            if (!p || gr_accept(g, &s, (const uint8_t *)p, len)) { mism++; break; }
        }
        gr_state_free(&s);
    }
    CHECK(mism == 0);
    free(ma), free(mb);
    gr_mask_ctx_free(&b);
    return compared;
}

static int tables_walk(const gr_grammar *g, const tok *t, const gr_vocab *v, int walks, int steps) {
    gr_mask_ctx a;
    CHECK(gr_mask_ctx_init(&a, v) == 0);
    int n = tables_walk_ctx(g, t, v, &a, walks, steps);
    gr_mask_ctx_free(&a);
    return n;
}

static void test_tables_move(const tok *t, const gr_vocab *v);

/* The tokenizer at path and the trie of its pieces (special tokens left
 * out) into v; NULL (a failed check) when it cannot be loaded. */
static tok *load_vocab(const char *path, gr_vocab *v) {
    char err[300];
    tok *t = tok_load(path, err, sizeof err);
    CHECK(t != NULL);
    if (!t) return NULL;
    int n = tok_n_ids(t);
    const char **b = (const char **)calloc((size_t)n, sizeof *b);
    size_t *l = (size_t *)calloc((size_t)n, sizeof *l);
    for (int i = 0; i < n; i++)
        if (!tok_is_special(t, i)) b[i] = tok_piece(t, i, &l[i]);
    CHECK(gr_vocab_build(v, n, b, l) == 0);
    free(b), free(l);
    return t;
}

static void test_tables(void) {
    char err[300];
    gr_vocab v;
    tok *t = load_vocab("tests/fixtures/tokenizer/tokenizer.json", &v);
    if (!t) return;
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},\"n\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"alpha\",\"beta\",\"\\u00e9t\\u00e9\",7,null]},\"maxItems\":3},"
        "\"kid\":{\"$ref\":\"#\"},\"x\":{\"type\":\"number\"}},\"required\":[\"name\"]}";
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
                        "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]}},"
                        "\"required\":[\"city\",\"days\"]}}}]";
    js_doc *sd = js_parse(schema, strlen(schema), err, sizeof err), *td = js_parse(tools, strlen(tools), err, sizeof err);
    char *st = sd ? gr_json_schema(sd, sd->root, err, sizeof err) : NULL;
    char *tt = td ? gr_tool_calls(td, td->root, &chat_info(CHAT_GLM5)->calls, NULL, 0, NULL, err, sizeof err) : NULL;
    CHECK(st && tt);
    const char *texts[] = {
        G_JSON, G_ARITH, G_C, st ? st : "root ::= \"x\"", tt ? tt : "root ::= \"x\"",
        "root ::= \"(\" root \")\" | \"[\" root \"]\" | x\nx ::= [a-z\\u00e0-\\u00ff]{0,3}\n",  /* nesting far past the frames */
        "root ::= ([^\\x00-\\x7f] | [a-c])* \"\\u4e2d\" [\\u4e00-\\u9fff]{1,2} \".\"\n", /* characters of several bytes */
        "root ::= (\"ab\" | \"a\")* (\"b\" \"c\"?)+ \"!\"\n",                              /* ambiguity across tokens */
    };
    int compared = 0;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        gr_grammar *g = parse(texts[i]);
        CHECK(g != NULL);
        if (g) compared += tables_walk(g, t, &v, 6, 40);
        gr_free(g);
    }
    CHECK(compared > 600);
    test_tables_move(t, &v);
    free(st), free(tt), js_free(sd), js_free(td);
    gr_vocab_free(&v);
    tok_free(t);
}

/* Tables made by one context serve another (serve's next request with
 * the same grammar): masks equal to the whole walk; the cache keeps them
 * by grammar, gives them to that grammar only, and drops the oldest. */
static void test_tables_move(const tok *t, const gr_vocab *v) {
    gr_grammar *g = parse(G_JSON), *h = parse(G_ARITH);
    CHECK(g && h);
    if (!g || !h) { gr_free(g), gr_free(h); return; }
    gr_tabcache k;
    memset(&k, 0, sizeof k);
    gr_mask_ctx a;
    CHECK(gr_mask_ctx_init(&a, v) == 0);
    tables_walk_ctx(g, t, v, &a, 3, 30);
    int made = a.tb.n;
    CHECK(made > 0);
    gr_tables out = gr_mask_give(&a);
    CHECK(a.tb.n == 0 && out.n == made && out.gid == gr_grammar_id(g));
    gr_tabcache_put(&k, &out);
    gr_tables in;
    CHECK(gr_tabcache_take(&k, gr_grammar_id(h), &in) == 0); /* another grammar's: not given */
    CHECK(gr_tabcache_take(&k, gr_grammar_id(g), &in) == 1 && in.n == made);
    gr_mask_ctx b;
    CHECK(gr_mask_ctx_init(&b, v) == 0);
    gr_mask_take(&b, &in);
    int before = b.built;
    tables_walk_ctx(g, t, v, &b, 3, 30); /* the same walks: nothing to build, masks still exact */
    CHECK(b.built == before && b.tb.n == made);
    gr_mask_ctx_free(&b);
    b.built = 0;
    CHECK(gr_mask_ctx_init(&b, v) == 0);
    in = gr_mask_give(&a); /* empty */
    gr_mask_take(&b, &in);
    tables_walk_ctx(h, t, v, &b, 2, 20); /* another grammar's tables in a context: dropped at its first mask */
    gr_tables hh = gr_mask_give(&b);
    CHECK(hh.gid == gr_grammar_id(h) && hh.n > 0);
    for (int i = 0; i < GR_TABCACHE_N + 2; i++) { /* full: the oldest goes */
        gr_tables x = {0};
        x.gid = 1000 + (uint64_t)i, x.n = 1, x.words = hh.words;
        x.tab = (gr_tab_ *)calloc(1, sizeof *x.tab), x.cap = 1;
        gr_tabcache_put(&k, &x);
    }
    gr_tables y;
    CHECK(gr_tabcache_take(&k, 1000, &y) == 0 && gr_tabcache_take(&k, 1001, &y) == 0);
    CHECK(gr_tabcache_take(&k, 1000 + GR_TABCACHE_N + 1, &y) == 1);
    gr_tables_free(&y);
    gr_tables_free(&hh);
    gr_tabcache_free(&k);
    gr_mask_ctx_free(&a), gr_mask_ctx_free(&b);
    gr_free(g), gr_free(h);
}

/* Enums as tries: 100,000 strings (values that are prefixes of others,
 * characters of several bytes) compile, are followed one way at a time
 * (the 4,096-ways limit is not reached), and hold exactly their values;
 * a tool's string argument with a large enum too. */
static void test_enum_trie(void) {
    enum { N = 100000 };
    jw w = {0};
    jw_lit(&w, "{\"enum\":[");
    uint64_t r = 7;
    char (*val)[16] = (char (*)[16])malloc((size_t)N * 16);
    CHECK(val != NULL);
    if (!val) return;
    static const char *const alpha[] = {"a", "b", "c", "\xc3\xa9", "\xe4\xb8\xad", "z", "0", " "};
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int len = 1 + (int)(r >> 60) % 6;
        val[i][0] = 0;
        for (int k = 0; k < len; k++) strcat(val[i], alpha[(r >> (8 + 3 * k)) & 7]);
        if (i) jw_lit(&w, ",");
        jw_str(&w, val[i]);
    }
    jw_lit(&w, ",\"a\",\"ab\",\"abc\",\"\",7,null]}");
    char err[300];
    js_doc *d = js_parse(w.s, w.n, err, sizeof err);
    char *text = d ? gr_json_schema(d, d->root, err, sizeof err) : NULL;
    CHECK(text != NULL);
    gr_grammar *g = text ? parse(text) : NULL;
    CHECK(g != NULL);
    if (g) {
        int rule;
        CHECK(gr_check(g, &rule, err, sizeof err) == 0);
        int bad = 0;
        for (int i = 0; i < N; i += 97) {
            char q[40];
            snprintf(q, sizeof q, "\"%s\"", val[i]);
            bad += in_lang(g, q) != 1;
        }
        CHECK(bad == 0);
        CHECK(in_lang(g, "\"a\"") == 1 && in_lang(g, "\"ab\"") == 1 && in_lang(g, "\"abc\"") == 1 && in_lang(g, "\"\"") == 1);
        CHECK(in_lang(g, "7") == 1 && in_lang(g, "null") == 1 && in_lang(g, "8") == 0 && in_lang(g, "\"abcabcabcabcabcabcabc\"") == 0);
        gr_state s;
        CHECK(gr_init(g, &s) == 0);
        CHECK(gr_accept(g, &s, (const uint8_t *)"\"", 1) == 0 && s.st.n <= 16); /* one way per next character, not one per value */
        gr_state_free(&s);
    }
    gr_free(g), free(text), js_free(d), jw_free(&w);
    /* a tool's string argument */
    jw tw = {0};
    jw_lit(&tw, "[{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"parameters\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"string\",\"enum\":[");
    for (int i = 0; i < 20000; i++) {
        if (i) jw_lit(&tw, ",");
        jw_str(&tw, val[i]);
    }
    jw_lit(&tw, "]}},\"required\":[\"v\"]}}}]");
    js_doc *td = js_parse(tw.s, tw.n, err, sizeof err);
    char *tt = td ? gr_tool_calls(td, td->root, &chat_info(CHAT_GLM5)->calls, NULL, 0, NULL, err, sizeof err) : NULL;
    gr_grammar *tg = tt ? parse(tt) : NULL;
    int rule;
    CHECK(tg && gr_check(tg, &rule, err, sizeof err) == 0);
    gr_free(tg), free(tt), js_free(td), jw_free(&tw);
    free(val);
}

static void test_mask(void) {
    gr_vocab v;
    tok *t = load_vocab("tests/fixtures/tiny-glm5/tokenizer.json", &v);
    if (!t) return;
    gr_grammar *j = parse(G_JSON), *a = parse(G_ARITH), *c = parse(G_CHESS);
    if (j) walk(j, t, &v, 12, 30);
    if (a) walk(a, t, &v, 12, 30);
    if (c) walk(c, t, &v, 12, 20);
    gr_free(j), gr_free(a), gr_free(c);
    test_too_ambiguous(t, &v);
    gr_vocab_free(&v);
    tok_free(t);
}

static void test_schema(void) {
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},\"age\":{\"type\":\"integer\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"minItems\":1,\"maxItems\":2},\"kind\":{\"const\":\"x\"},"
        "\"n\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}]},\"flag\":{\"type\":[\"boolean\",\"null\"]}},"
        "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
    char err[300];
    js_doc *d = js_parse(schema, strlen(schema), err, sizeof err);
    CHECK(d != NULL);
    if (!d) return;
    char *text = gr_json_schema(d, d->root, err, sizeof err);
    CHECK(text != NULL);
    gr_grammar *g = text ? parse(text) : NULL;
    CHECK(g != NULL);
    if (g) {
        const char *yes[] = {"{\"name\": \"bob\", \"age\": 3}", "{\"name\":\"b\",\"age\":-4,\"tags\":[\"a\",\"b\"],\"kind\":\"x\",\"n\":2.5,\"flag\":null}",
                             " {\"name\":\"\\u00e9\",\"age\":0,\"flag\":true} ", "{\"name\":\"abcd\",\"age\":1,\"n\":null}"};
        const char *no[] = {"{\"age\": 3}", "{\"name\":\"abcde\",\"age\":1}", "{\"name\":\"\",\"age\":1}", "{\"name\":\"b\",\"age\":1.5}",
                            "{\"name\":\"b\",\"age\":1,\"tags\":[]}", "{\"name\":\"b\",\"age\":1,\"tags\":[\"c\"]}",
                            "{\"name\":\"b\",\"age\":1,\"other\":1}", "{\"age\":1,\"name\":\"b\"}", "{\"name\":\"b\",\"age\":1,\"kind\":\"y\"}",
                            "{\"name\":\"b\",\"age\":1,\"tags\":[\"a\",\"b\",\"a\"]}"};
        for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
            int r = in_lang(g, yes[i]);
            CHECK(r == 1);
            if (r != 1) fprintf(stderr, "rejected %s\n", yes[i]);
        }
        for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
            int r = in_lang(g, no[i]);
            CHECK(r == 0);
            if (r != 0) fprintf(stderr, "accepted %s\n", no[i]);
        }
    }
    gr_free(g), free(text), js_free(d);
    const char *bad[][2] = {{"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "\"pattern\": a backreference"},
                            {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "maxLength 2 is below minLength 5"},
                            {"{\"type\":\"thing\"}", "type \"thing\""},
                            {"{\"enum\":[]}", "non-empty"},
                            {"[1]", "must be an object"},
                            {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "below minItems"}};
    for (int i = 0; i < 6; i++) {
        js_doc *x = js_parse(bad[i][0], strlen(bad[i][0]), NULL, 0);
        char *gt = x ? gr_json_schema(x, x->root, err, sizeof err) : NULL;
        CHECK(x && !gt && strstr(err, bad[i][1]));
        if (gt || !x || !strstr(err, bad[i][1])) fprintf(stderr, "schema %s: %s\n", bad[i][0], gt ? "accepted" : err);
        free(gt), js_free(x);
    }
}

/* Compiles schema (JSON text) to its whole language (gr_json_schema_exact;
 * generation's with gen); NULL with err when refused. */
static gr_grammar *schema_grammar_mode(const char *schema, int gen, char *err, size_t errlen) {
    js_doc *d = js_parse(schema, strlen(schema), err, errlen);
    char *text = d ? (gen ? gr_json_schema : gr_json_schema_exact)(d, d->root, err, errlen) : NULL;
    gr_grammar *g = text ? gr_parse(text, strlen(text), "root", err, errlen) : NULL;
    free(text), js_free(d);
    return g;
}

static gr_grammar *schema_grammar(const char *schema, char *err, size_t errlen) { return schema_grammar_mode(schema, 0, err, errlen); }

/* What generation writes: an object that lists its properties gets no
 * other keys unless additionalProperties admits them in so many words;
 * one that lists none, any; every text it accepts is a valid instance
 * (the exact grammar accepts it too). */
static void test_schema_generation(void) {
    static const struct {
        const char *schema, *text;
        int gen, exact;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\":1}", 1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{}", 1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\":1,\"b\":2}", 0, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}", "{\"a\":1,\"b\":2}", 1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
         "{\"a\":1,\"b\":\"x\"}", 1, 1},
        /* the named keys alone cannot reach minProperties: generation writes other keys too */
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":2}", "{\"a\":1,\"b\":2}", 1, 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":1}", "{\"b\":2}", 0, 1},
        {"{\"type\":\"object\"}", "{\"b\":2}", 1, 1},
        {"{\"type\":\"object\",\"required\":[\"z\"],\"properties\":{\"a\":{}}}", "{\"z\":[1]}", 1, 1},
        /* a maximum count above the grammar's limit: generation writes at most the limit; the whole language is refused (-1) */
        {"{\"type\":\"string\",\"maxLength\":65535}", "\"abc\"", 1, -1},
        {"{\"type\":\"array\",\"maxItems\":1000000}", "[1,2]", 1, -1},
        /* patternProperties beside additionalProperties other than false: generation writes named and pattern keys only */
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{\"type\":\"integer\"}}}", "{\"xa\":1}", 1, -1},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{\"type\":\"integer\"}}}", "{\"y\":1}", 0, -1},
    };
    char err[300];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int gen = 0; gen < 2; gen++) {
            gr_grammar *g = schema_grammar_mode(cases[i].schema, gen, err, sizeof err);
            int r = g ? in_lang(g, cases[i].text) : -1, want = gen ? cases[i].gen : cases[i].exact;
            CHECK(r == want);
            if (r != want) fprintf(stderr, "%s %s: %s gives %d (%s)\n", gen ? "generation" : "exact", cases[i].schema, cases[i].text, r, g ? "" : err);
            gr_free(g);
        }
}

/* The wrong answers and the nonsense of issue #34, and the keywords real
 * clients send: each schema with texts it must accept (before the tab)
 * and refuse (after it), or a refusal it must give. */
static void test_schema_exact(void) {
    static const struct {
        const char *schema, *yes[4], *no[5], *refusal;
    } cases[] = {
        {"{\"items\":{\"type\":\"string\"},\"minItems\":3}", {"[\"a\",\"b\",\"c\"]", "\"x\"", "{}"}, {"[1, 2]", "[\"a\",\"b\"]", "[1,2,3]"}, NULL},
        {"{\"type\":[\"array\",\"null\"],\"items\":{\"type\":\"string\"}}", {"null", "[\"a\"]", "[]"}, {"[123]", "\"a\"", "{}"}, NULL},
        {"{\"type\":\"object\",\"additionalProperties\":false}", {"{}"}, {"{\"a\": 1}", "[]"}, NULL},
        {"{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
         {"{\"a\":1,\"b\":\"x\"}", "{\"ab\":\"x\"}", "{\"b\":\"x\",\"c\":\"y\"}", "7"},
         {"{\"a\":\"x\"}", "{\"b\":1}", "{\"a\":1,\"a\":2}", "{\"b\":\"x\",\"a\":1}", "{\"\\u0062\":\"x\"}"}, NULL},
        {"{\"type\":\"object\",\"required\":[\"x\"]}", {"{\"x\":1}", "{\"x\":1,\"y\":[]}"}, {"{}", "{\"y\":1}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"b\"]}", {"{\"b\":1}", "{\"b\":1,\"c\":2}"}, {"{\"a\":1,\"b\":1}", "{\"b\":1,\"a\":1}"}, NULL},
        /* pydantic's nested and recursive models, Optional as anyOf with null */
        {"{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/Node\"},"
         "{\"type\":\"null\"}],\"default\":null}},\"required\":[\"v\"],\"title\":\"Node\",\"additionalProperties\":false}},\"$ref\":\"#/$defs/Node\"}",
         {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}"}, {"{\"v\":1,\"next\":{}}", "{\"next\":null}", "{\"v\":1,\"w\":2}"}, NULL},
        {"{\"definitions\":{\"a~b/c\":{\"const\":3}},\"$ref\":\"#/definitions/a~0b~1c\"}", {"3"}, {"4", "\"a\""}, NULL},
        {"{\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}", {"[]", "[1]", "[1,\"a\"]"}, {"[1,\"a\",2]", "[\"a\"]"}, NULL},
        {"{\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"null\"},\"$schema\":\"http://json-schema.org/draft-07/schema#\"}",
         {"[1,null,null]", "[]"}, {"[1,2]", "[null]"}, NULL},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"$schema\":\"http://json-schema.org/draft-07/schema#\"}", {"[\"a\"]", "[]"}, {"{}"}, NULL},
        {"{\"enum\":[1,\"a\",null,[1,2.5],{\"k\":true}],\"type\":[\"integer\",\"string\",\"array\",\"object\"]}", {"1", "\"a\"", "[1,2.5]", "{\"k\":true}"},
         {"null", "2", "1.0"}, NULL},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {"1", "\"a\""}, {"\"ab\"", "1.5"}, NULL},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", {"\"ab\"", "\"\\u00e9x\"", "\"\\n\\t\""}, {"\"a\"", "\"abc\"", "\"\\ud83d\\ude00\""}, NULL},
        {"{\"allOf\":[{\"type\":\"boolean\"},{\"description\":\"d\"}],\"title\":\"t\",\"x-vendor\":1}", {"true"}, {"1"}, NULL},
        {"{\"type\":123}", {NULL}, {NULL}, "\"type\" must be"},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", {NULL}, {NULL}, "maxLength 2 is below minLength 5"},
        {"{\"type\":\"array\",\"maxItems\":-1}", {NULL}, {NULL}, "\"maxItems\" must be a non-negative integer"},
        {"{\"type\":\"array\",\"maxItems\":2.5}", {NULL}, {NULL}, "\"maxItems\" must be a non-negative integer"},
        {"{\"type\":\"string\",\"maxLength\":100000}", {NULL}, {NULL}, "above 10000"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", {NULL}, {NULL}, "only the numbers that are not integers"},
        /* oneOf of types only: the types exactly one branch has; enum/const branches none of whose values another branch matches */
        {"{\"oneOf\":[{\"type\":[\"string\",\"null\"]},{\"type\":\"string\",\"title\":\"t\"},{\"type\":\"integer\"}]}", {"null", "3"}, {"\"a\"", "1.5", "[]"}, NULL},
        {"{\"oneOf\":[{\"enum\":[\"auto\",\"none\"]},{\"type\":\"string\",\"pattern\":\"^[0-9]+px$\"},{\"type\":\"integer\"}]}",
         {"\"auto\"", "\"12px\"", "7"}, {"\"px\"", "\"other\"", "1.5"}, NULL},
        {"{\"oneOf\":[{\"enum\":[\"auto\",\"12px\"]},{\"type\":\"string\",\"pattern\":\"^[0-9]+px$\"}]}", {NULL}, {NULL}, "may overlap"},
        {"{\"oneOf\":[{\"const\":\"a\"},{\"enum\":[\"a\",1]},{\"type\":\"boolean\"}]}", {NULL}, {NULL}, "may overlap"},
        /* a pattern beside minLength/maxLength: its one repeated character counted to fit */
        {"{\"type\":\"string\",\"pattern\":\"^[a-z][a-z0-9-]*$\",\"maxLength\":4}", {"\"a\"", "\"ab-1\""}, {"\"abcde\"", "\"1ab\"", "\"\""}, NULL},
        {"{\"type\":\"string\",\"pattern\":\"^x[0-9]{2,}y$\",\"minLength\":5,\"maxLength\":6}", {"\"x123y\"", "\"x1234y\""}, {"\"x12y\"", "\"x12345y\""}, NULL},
        {"{\"type\":\"string\",\"pattern\":\"^(ab)+$\",\"maxLength\":4}", {NULL}, {NULL}, "\"pattern\" beside minLength/maxLength"},
        /* objects apart: a discriminator both require with different constants, a name one requires and the other forbids */
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},\"required\":[\"kind\"]},"
         "{\"$ref\":\"#/$defs/b\"},{\"type\":\"string\"}],\"$defs\":{\"b\":{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"b\",\"c\"]}},\"required\":[\"kind\"]}}}",
         {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"c\",\"y\":\"s\"}", "\"s\""}, {"{\"kind\":\"d\"}", "{\"x\":1}", "{\"kind\":\"a\",\"x\":\"s\"}"}, NULL},
        {"{\"oneOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"],\"additionalProperties\":false},{\"properties\":{\"b\":{}},\"required\":[\"b\"],"
         "\"additionalProperties\":false}],\"type\":\"object\"}",
         {"{\"a\":1}", "{\"b\":[]}"}, {"{\"a\":1,\"b\":2}", "{}", "{\"c\":1}"}, NULL},
        {"{\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}],\"type\":\"object\"}", {NULL}, {NULL}, "may overlap"},
        {"{\"oneOf\":[{\"const\":1},{\"const\":1.0}]}", {NULL}, {NULL}, "\"oneOf\" whose branches may overlap"},
        {"{\"oneOf\":[{\"const\":\"a\",\"title\":\"A\"},{\"enum\":[\"b\",2]},{\"$ref\":\"#/$defs/c\"}],\"$defs\":{\"c\":{\"const\":[1]}}}",
         {"\"a\"", "\"b\"", "2", "[1]"}, {"\"c\"", "1", "[2]"}, NULL},
        {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":3}]}", {NULL}, {NULL}, "\"allOf\" of several"},
        /* anyOf / oneOf / allOf beside object keywords: merged with each branch (allOf: with all) */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{}},\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
         {"{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":2}"}, {"{}", "{\"a\":\"x\"}", "{\"c\":1}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":true,\"oneOf\":[{\"required\":[\"a\"],\"properties\":{\"b\":false}},"
         "{\"required\":[\"b\"],\"properties\":{\"a\":false}}]}",
         {"{\"a\":1}", "{\"b\":2}"}, {"{}", "{\"a\":1,\"b\":2}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", {NULL}, {NULL}, "may overlap"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"allOf\":[{\"required\":[\"a\"]}],\"minProperties\":2}", {"{\"a\":1,\"b\":2}"}, {"{\"a\":1}", "{\"b\":1,\"c\":2}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false,\"anyOf\":[{\"required\":[\"a\"]}]}", {NULL}, {NULL},
         "\"anyOf\" beside \"properties\" is not supported"},
        /* allOf of object schemas: merged (properties, required, counts) */
        {"{\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"b\":{\"type\":\"string\"},\"a\":{}},\"required\":[\"b\"]}],"
         "\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"maxProperties\":3}}}",
         {"{\"a\":1,\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\",\"c\":null}"}, {"{\"a\":1}", "{\"b\":\"x\"}", "{\"a\":\"1\",\"b\":\"x\"}", "7"}, NULL},
        {"{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}},{\"properties\":{\"a\":{\"type\":\"string\"}}}]}", {NULL}, {NULL}, "one property two schemas"},
        {"{\"allOf\":[{\"required\":[\"a\"]},{\"type\":[\"object\",\"string\"],\"minProperties\":2}]}", {"{\"a\":1,\"b\":2}", "\"s\""}, {"{\"a\":1}", "{\"b\":1,\"c\":2}", "1"}, NULL},
        /* minProperties / maxProperties: named members counted with the others */
        {"{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":1,\"maxProperties\":2,\"additionalProperties\":false}",
         {"{\"a\":1}", "{\"b\":1,\"c\":2}", "{\"a\":1,\"c\":[]}"}, {"{}", "{\"a\":1,\"b\":2,\"c\":3}", "{\"d\":1}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"a\"],\"minProperties\":3}", {"{\"a\":1,\"b\":2,\"c\":3}"},
         {"{\"a\":1,\"b\":2}", "{\"b\":2,\"c\":3,\"d\":4}", "[]"}, NULL},
        {"{\"maxProperties\":1}", {"{}", "{\"x\":[1,2]}", "3"}, {"{\"x\":1,\"y\":2}"}, NULL},
        {"{\"type\":\"object\",\"minProperties\":3,\"maxProperties\":2}", {NULL}, {NULL}, "maxProperties 2 is below minProperties 3"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"a\"],\"maxProperties\":0}", {NULL}, {NULL}, "matches no JSON value"},
        /* propertyNames: the named keys checked, the other keys from its strings */
        {"{\"type\":\"object\",\"propertyNames\":{\"maxLength\":2,\"pattern\":\"^[a-z]+$\"}}", {"{}", "{\"ab\":1,\"c\":[]}"}, {"{\"abc\":1}", "{\"A\":1}", "{\"\":1}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"ok\":{},\"toolong\":{}},\"propertyNames\":{\"maxLength\":4},\"additionalProperties\":false}",
         {"{\"ok\":1}", "{}"}, {"{\"toolong\":1}", "{\"x\":1}"}, NULL},
        {"{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"a\",\"b\"]}}", {"{\"a\":1,\"b\":2}"}, {"{\"c\":1}"}, NULL},
        {"{\"type\":\"object\",\"propertyNames\":false}", {"{}"}, {"{\"a\":1}"}, NULL},
        {"{\"type\":\"object\",\"properties\":{\"x\":{}},\"propertyNames\":{\"maxLength\":4}}", {NULL}, {NULL}, "\"propertyNames\" beside properties and other keys"},
        {"{\"$defs\":{\"n\":{\"$anchor\":\"name\",\"type\":\"string\"}},\"properties\":{\"a\":{\"$ref\":\"#name\"}},\"type\":\"object\"}",
         {"{\"a\":\"x\"}"}, {"{\"a\":1}"}, NULL},
        {"{\"$ref\":\"#nowhere\"}", {NULL}, {NULL}, "names no \"$anchor\""},
        /* multipleOf: remainders digit by digit; powers of ten below 1 as fraction digits */
        {"{\"type\":\"integer\",\"multipleOf\":7}", {"0", "-14", "700000007", "7"}, {"1", "-15", "700000008", "7.0"}, NULL},
        {"{\"type\":\"number\",\"multipleOf\":3}", {"9", "9.00", "-3"}, {"9.5", "10", "1e1"}, NULL},
        {"{\"type\":\"number\",\"multipleOf\":0.01}", {"1", "1.5", "-2.25", "3.250"}, {"1.005", "0.001", "2.2501"}, NULL},
        {"{\"type\":\"number\",\"multipleOf\":2.5}", {NULL}, {NULL}, "\"multipleOf\" 2.5 is not supported"},
        {"{\"type\":\"integer\",\"multipleOf\":2,\"minimum\":1}", {NULL}, {NULL}, "\"multipleOf\" beside \"minimum\""},
        /* bounds on numbers: plain decimals, compared exactly */
        {"{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":3}", {"-1.5", "0", "-0.0", "2.9999999999999999"}, {"-1.5000001", "3", "3.0", "1e0", "-2"}, NULL},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1e-3}", {"0.001", "0.0000000000000001", "0.00099"}, {"0", "-0", "0.0010000000000001", "-0.0001"}, NULL},
        {"{\"type\":\"number\",\"minimum\":2,\"exclusiveMinimum\":true,\"$schema\":\"http://json-schema.org/draft-04/schema#\"}", {"2.01", "3"}, {"2", "2.0000"}, NULL},
        {"{\"type\":\"number\",\"minimum\":5,\"maximum\":4.99}", {NULL}, {NULL}, "matches no JSON value"},
        {"{\"type\":\"integer\",\"minimum\":-12,\"exclusiveMaximum\":130.5}", {"-12", "0", "99", "130"}, {"-13", "131", "-0", "1.5", "200"}, NULL},
        {"{\"type\":[\"integer\",\"string\"],\"minimum\":1e3,\"maximum\":12345}", {"1000", "12345", "\"a\"", "9999"}, {"999", "12346", "100000", "0"}, NULL},
        {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true,\"$schema\":\"http://json-schema.org/draft-04/schema#\"}", {"6"}, {"5"}, NULL},
        {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":2.5}", {NULL}, {NULL}, "matches no JSON value"},
        /* patternProperties: one schema for the keys the patterns match; other keys only where additionalProperties is false */
        {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"patternProperties\":{\"^x-\":{\"type\":\"string\"},\"^[0-9]+$\":{\"type\":\"string\"}},"
         "\"additionalProperties\":false,\"required\":[\"x-a\"]}",
         {"{\"x-a\":\"v\"}", "{\"id\":1,\"x-a\":\"v\",\"12\":\"w\"}", "{\"x-a\":\"v\",\"x-\\\"\":\"q\"}"},
         {"{\"id\":1}", "{\"x-a\":1}", "{\"x-a\":\"v\",\"y\":\"w\"}", "{\"x-a\":\"v\",\"1a\":\"w\"}"}, NULL},
        {"{\"type\":\"object\",\"patternProperties\":{}}", {"{}", "{\"a\":[1]}"}, {"[]"}, NULL},
        {"{\"type\":\"object\",\"patternProperties\":{\"a\":{}}}", {NULL}, {NULL}, "beside additionalProperties other than false"},
        {"{\"type\":\"object\",\"patternProperties\":{\"a\":{},\"b\":{\"type\":\"string\"}},\"additionalProperties\":false}", {NULL}, {NULL},
         "different schemas"},
        {"{\"type\":\"object\",\"properties\":{\"ab\":{}},\"patternProperties\":{\"a\":{}},\"additionalProperties\":false}", {NULL}, {NULL},
         "whose name a \"patternProperties\" pattern matches"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", {NULL}, {NULL}, "\"uniqueItems\" is not supported"},
        {"{\"$ref\":\"other.json#/a\"}", {NULL}, {NULL}, "\"$ref\" to \"other.json#/a\" is not supported"},
        {"{\"$ref\":\"#/$defs/none\"}", {NULL}, {NULL}, "points at nothing"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", {NULL}, {NULL}, "refused"},
        {"{\"type\":\"string\",\"$ref\":\"#\"}", {NULL}, {NULL}, "refers to itself"},
        {"{\"type\":\"string\",\"minLength\":1,\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{}}}", {NULL}, {NULL}, "\"$ref\" beside \"minLength\""},
        /* a combinator or $ref beside "type": each branch of those types */
        {"{\"type\":\"object\",\"anyOf\":[{\"required\":[\"a\"]},{\"type\":[\"string\",\"object\"],\"properties\":{\"b\":{\"type\":\"integer\"}}}]}",
         {"{\"a\":1}", "{\"b\":2}", "{}"}, {"\"x\"", "{\"b\":\"x\"}", "1"}, NULL},
        {"{\"type\":[\"integer\",\"null\"],\"oneOf\":[{\"type\":\"number\"},{\"type\":\"string\"},{}]}", {"null"}, {"1", "\"a\""}, NULL},
        {"{\"type\":\"integer\",\"oneOf\":[{\"type\":\"number\"},{\"type\":\"string\"}]}", {"1", "-7"}, {"1.5", "\"a\"", "null"}, NULL},
        {"{\"type\":\"string\",\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"anyOf\":[{\"const\":\"x\"},{\"const\":1},{\"maxLength\":1}]}}}",
         {"\"x\"", "\"\"", "\"q\""}, {"1", "\"qq\"", "[]"}, NULL},
        {"{\"type\":\"boolean\",\"allOf\":[{\"title\":\"t\"}]}", {"true"}, {"1", "null"}, NULL},
        {"{\"enum\":[{\"a\":1,\"b\":2}]}", {NULL}, {NULL}, "object of several keys"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}},\"required\":[\"x\"]}",
         {NULL}, {NULL}, "matches no JSON value"},
        {"false", {NULL}, {NULL}, "matches no JSON value"},
    };
    char err[300];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gr_grammar *g = schema_grammar(cases[i].schema, err, sizeof err);
        if (cases[i].refusal) {
            int ok = !g && strstr(err, cases[i].refusal);
            CHECK(ok);
            if (!ok) fprintf(stderr, "schema %s: %s\n", cases[i].schema, g ? "accepted" : err);
            gr_free(g);
            continue;
        }
        CHECK(g != NULL);
        if (!g) { fprintf(stderr, "schema %s refused: %s\n", cases[i].schema, err); continue; }
        for (int k = 0; k < 4 && cases[i].yes[k]; k++) {
            int r = in_lang(g, cases[i].yes[k]);
            CHECK(r == 1);
            if (r != 1) fprintf(stderr, "schema %s rejected %s\n", cases[i].schema, cases[i].yes[k]);
        }
        for (int k = 0; k < 5 && cases[i].no[k]; k++) {
            int r = in_lang(g, cases[i].no[k]);
            CHECK(r == 0);
            if (r != 0) fprintf(stderr, "schema %s accepted %s\n", cases[i].schema, cases[i].no[k]);
        }
        gr_free(g);
    }
    /* a chain of 1000 $refs is refused by name, not by the stack; 20,000
     * required properties compile (linear: this took over a minute) */
    jw w = {0};
    jw_lit(&w, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 1000; i++) {
        char b[64];
        snprintf(b, sizeof b, "%s\"d%d\":{\"$ref\":\"#/$defs/d%d\"}", i ? "," : "", i, i + 1);
        jw_lit(&w, b);
    }
    jw_lit(&w, ",\"d1000\":{\"type\":\"null\"}}}");
    gr_grammar *g = schema_grammar(w.s, err, sizeof err);
    CHECK(!g && strstr(err, "nests deeper than"));
    gr_free(g), jw_free(&w);
    jw_lit(&w, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 20000; i++) {
        char b[64];
        snprintf(b, sizeof b, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
        jw_lit(&w, b);
    }
    jw_lit(&w, "},\"required\":[");
    for (int i = 0; i < 20000; i++) {
        char b[32];
        snprintf(b, sizeof b, "%s\"p%d\"", i ? "," : "", i);
        jw_lit(&w, b);
    }
    jw_lit(&w, "]}");
    g = schema_grammar(w.s, err, sizeof err);
    CHECK(g != NULL);
    gr_free(g), jw_free(&w);
}

/* GLM-5 tool calls under tool_choice: the syntax the tool-call parser
 * reads back, argument values as their schemas allow. */
static void test_tools(void) {
    const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]},"
        "\"tag\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":3}},"
        "\"required\":[\"city\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";
    const chat_fmt_info *glm = chat_info(CHAT_GLM5);
    char err[300];
    js_doc *d = js_parse(tools, strlen(tools), err, sizeof err);
    CHECK(d != NULL);
    if (!d) return;
    static const char W[] = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>";
    struct {
        const char *only;
        int max_calls, think; /* parallel_tool_calls false: 1 */
        const char *text;
        int want;
    } cases[] = {
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>", 1},
        {NULL, 3, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>a < b</arg_value>\n<arg_key>days</arg_key>"
                     "<arg_value>3</arg_value><arg_key>unit</arg_key><arg_value>F</arg_value>\n</tool_call>", 1},
        {NULL, 3, 0, "<tool_call>now</tool_call>\n<tool_call>now</tool_call>", 1},
        {NULL, 1, 0, "<tool_call>now</tool_call>\n<tool_call>now</tool_call>", 0},  /* parallel_tool_calls false */
        {NULL, 3, 0, "<tool_call>now</tool_call><tool_call>now</tool_call> <tool_call>now</tool_call>", 1},
        {NULL, 3, 0, "<tool_call>now</tool_call><tool_call>now</tool_call><tool_call>now</tool_call><tool_call>now</tool_call>", 0}, /* at most 3 */
        {NULL, 3, 0, "<tool_call>get_weather</tool_call>", 0},                      /* city is required */
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>", 0},
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>days</arg_key>"
                     "<arg_value>3.5</arg_value></tool_call>", 0},                  /* days is an integer */
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>unit</arg_key>"
                     "<arg_value>K</arg_value></tool_call>", 0},                    /* unit's enum */
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>a</b</arg_value></tool_call>", 0},
        {NULL, 3, 0, "<tool_call>other</tool_call>", 0},
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>tag</arg_key><arg_value>abc</arg_value></tool_call>", 1},
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>tag</arg_key><arg_value>abcd</arg_value></tool_call>", 0},
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>tag</arg_key><arg_value></arg_value></tool_call>", 0},
        {NULL, 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value><arg_key>tag</arg_key><arg_value>a<b</arg_value></tool_call>", 0},
        {NULL, 3, 0, "Sure! <tool_call>now</tool_call>", 0},
        {"now", 3, 0, "<tool_call>now</tool_call>", 1},
        {"now", 3, 0, "<tool_call>now</tool_call><tool_call>now</tool_call>", 0},
        {"now", 3, 0, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>P</arg_value></tool_call>", 0},
        {NULL, 3, 1, "I should look it up.</think>\n<tool_call>now</tool_call>", 1},
        {NULL, 3, 1, "<tool_call>now</tool_call>", 0}, /* the reasoning block is closed first */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *text = gr_tool_calls(d, d->root, &glm->calls, cases[i].only, cases[i].max_calls, cases[i].think ? glm->think_end : NULL, err, sizeof err);
        gr_grammar *g = text ? parse(text) : NULL;
        CHECK(g != NULL);
        int r = g ? in_lang(g, cases[i].text) : -1;
        CHECK(r == cases[i].want);
        if (r != cases[i].want) fprintf(stderr, "tool case %zu (%s): got %d for %s\n", i, text ? "" : err, r, cases[i].text);
        /* every prefix of an accepted call is a prefix of the grammar: the mask can reach it */
        if (g && cases[i].want) CHECK(prefix_ok(g, W, strlen(W)) == (cases[i].only == NULL && !cases[i].think));
        gr_free(g), free(text);
    }
    char *t = gr_tool_calls(d, d->root, &glm->calls, "missing", 1, NULL, err, sizeof err);
    CHECK(!t && strstr(err, "\"missing\""));
    free(t);
    js_doc *e = js_parse("[]", 2, NULL, 0);
    t = e ? gr_tool_calls(e, e->root, &glm->calls, NULL, 1, NULL, err, sizeof err) : NULL;
    CHECK(e && !t && strstr(err, "at least one function"));
    free(t), js_free(e), js_free(d);
    /* GLM-5's raw string arguments enforce type, enum, minLength,
     * maxLength, pattern and format: anything else is refused by name,
     * never dropped; raw text has no '<' */
    static const char *const bad[][2] = {
        {"{\"city\":{\"type\":\"string\",\"pattern\":\"^<\"}}", "a character that is only '<'"},
        {"{\"city\":{\"type\":\"string\",\"enum\":[\"a\"],\"format\":\"date\"}}", "\"enum\" beside \"format\" is not supported (string argument \"city\")"},
        {"{\"city\":{\"type\":\"string\",\"uniqueItems\":true}}", "\"uniqueItems\" is not supported (string argument \"city\")"},
        {"{\"city\":{\"type\":\"string\",\"maxLength\":-1}}", "\"maxLength\" must be a non-negative integer"},
        {"{\"city\":{\"type\":\"string\",\"enum\":[\"abc\"],\"maxLength\":2}}", "matches no value"},
        {"{\"city\":{\"type\":\"string\"}},\"required\":[\"town\"]", "\"required\" names \"town\""},
        {"{\"city\":{\"type\":\"string\"}},\"minProperties\":1", "\"minProperties\" is not supported"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char tj[512];
        snprintf(tj, sizeof tj, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":%s}}}]", bad[i][0]);
        js_doc *x = js_parse(tj, strlen(tj), err, sizeof err);
        t = x ? gr_tool_calls(x, x->root, &glm->calls, NULL, 1, NULL, err, sizeof err) : NULL;
        CHECK(x && !t && strstr(err, bad[i][1]));
        if (!x || t || !strstr(err, bad[i][1])) fprintf(stderr, "tools %s: %s\n", tj, t ? "accepted" : err);
        free(t), js_free(x);
    }
    /* an enum filtered by maxLength: only the short value is left */
    const char *tj = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                     "{\"u\":{\"type\":\"string\",\"enum\":[\"C\",\"Fahrenheit\"],\"maxLength\":1}},\"required\":[\"u\"]}}}]";
    js_doc *x = js_parse(tj, strlen(tj), err, sizeof err);
    t = x ? gr_tool_calls(x, x->root, &glm->calls, NULL, 1, NULL, err, sizeof err) : NULL;
    gr_grammar *g = t ? parse(t) : NULL;
    CHECK(g && in_lang(g, "<tool_call>f<arg_key>u</arg_key><arg_value>C</arg_value></tool_call>") == 1 &&
          in_lang(g, "<tool_call>f<arg_key>u</arg_key><arg_value>Fahrenheit</arg_value></tool_call>") == 0);
    gr_free(g), free(t), js_free(x);
    /* a pattern and formats on raw arguments: characters as themselves (a quote, a backslash), the format's rule once */
    tj = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
         "{\"p\":{\"type\":\"string\",\"pattern\":\"^[a-c\\\"\\\\\\\\]{1,3}$\"},\"d\":{\"type\":\"string\",\"format\":\"date-time\"},"
         "\"e\":{\"type\":\"string\",\"format\":\"email\"}},\"required\":[\"p\",\"d\",\"e\"]}}}]";
    x = js_parse(tj, strlen(tj), err, sizeof err);
    t = x ? gr_tool_calls(x, x->root, &glm->calls, NULL, 1, NULL, err, sizeof err) : NULL;
    g = t ? parse(t) : NULL;
    CHECK(g != NULL);
    if (!g) fprintf(stderr, "raw pattern/format: %s\n", t ? t : err);
    const char *head = "<tool_call>f<arg_key>p</arg_key><arg_value>";
    char call[512];
    static const struct { const char *p, *d, *e; int ok; } raw[] = {
        {"a\"\\", "1998-12-31T15:59:60.5-08:00", "\"joe bloggs\"@example.com", 1},
        {"abcd", "1998-12-31T15:59:60.5-08:00", "a@b.c", 0},
        {"ab", "1998-12-31T23:59:61Z", "a@b.c", 0},
        {"ab", "2020-02-29t08:30:06z", "te..st@b.c", 0},
        {"ab", "2020-02-29t08:30:06z", "joe@[IPv6:::1]", 1},
    };
    for (size_t i = 0; g && i < sizeof raw / sizeof *raw; i++) {
        snprintf(call, sizeof call, "%s%s</arg_value><arg_key>d</arg_key><arg_value>%s</arg_value><arg_key>e</arg_key><arg_value>%s</arg_value></tool_call>",
                 head, raw[i].p, raw[i].d, raw[i].e);
        CHECK(in_lang(g, call) == raw[i].ok);
        if (in_lang(g, call) != raw[i].ok) fprintf(stderr, "raw arguments: %s: want %d\n", call, raw[i].ok);
    }
    CHECK(t && strstr(t, "fmtraw-date-time ::=") && strstr(strstr(t, "fmtraw-date ::=") + 1, "fmtraw-date ::=") == NULL);
    gr_free(g), free(t), js_free(x);
}

/* gr_check: a reference whose rule the recognizer cannot follow at once
 * (more than GR_MAX_STACKS ways) is found before any text, in the rule
 * holding it; at the start it is rule -1. The boundary is exact (GR_MAX_STACKS
 * ways are followed), and an optional item before the reference counts
 * (ws below: its space, or the enum at once). */
static void test_check(void) {
    static const char *const heads[] = {"root ::= \"{\" v \"}\"\n", "root ::= v\n", "root ::= \"{\" ws v \"}\"\nws ::= [ ]?\n"};
    for (int where = 0; where < 3; where++)
        for (int n = GR_MAX_STACKS - 2; n <= GR_MAX_STACKS + 1; n++) {
            jw w = {0};
            jw_lit(&w, heads[where]);
            jw_lit(&w, "v ::= ");
            for (int i = 0; i < n; i++) {
                char b[32];
                snprintf(b, sizeof b, "%s\"%d\"", i ? " | " : "", i);
                jw_lit(&w, b);
            }
            jw_lit(&w, "\n");
            char err[300];
            gr_grammar *g = gr_parse(w.s, w.n, "root", err, sizeof err);
            char why[300];
            int rule = -9, rc = g ? gr_check(g, &rule, why, sizeof why) : -3, ways = n + (where == 2);
            CHECK(rc == (ways > GR_MAX_STACKS ? -2 : 0));
            if (rc == -2) CHECK(where == 1 ? rule == -1 : rule >= 0 && !strcmp(g->names[rule], "root"));
            if (rc == -2) CHECK(strstr(why, where == 1 ? "at its start the text" : "in its rule \"root\" the text") != NULL);
            gr_state st;
            if (g && !rc) {
                CHECK(gr_init(g, &st) == 0);
                gr_state_free(&st);
            }
            gr_free(g), jw_free(&w);
        }
}

/* Driver for tests/test_schema.py and the hostile probes (not a test):
 *   test_grammar --gbnf FILE          parse a grammar: "ok <seconds>" or "refused <seconds>: why"
 *   test_grammar --schema FILE        FILE is [{"schema": S, "texts": [t...]}...]: per case (its whole
 *                                     language, gr_json_schema_exact) a line,
 *                                     "refused: why", or "ok <seconds> " and per text 1 (a sentence) or 0
 *   test_grammar --schema-gen FILE    the same with what generation writes (gr_json_schema)
 * Exit 0 either way; 2 when FILE cannot be read. */
static int driver(const char *mode, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "%s: cannot open\n", path), 2;
    jw buf = {0};
    char chunk[65536];
    for (size_t k; (k = fread(chunk, 1, sizeof chunk, f)) > 0;) jw_raw(&buf, chunk, k);
    fclose(f);
    char err[512] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!strcmp(mode, "--gbnf")) {
        gr_grammar *g = gr_parse(buf.s ? buf.s : "", buf.n, "root", err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (g) printf("ok %.6f\n", dt);
        else printf("refused %.3f: %s\n", dt, err);
        gr_free(g), jw_free(&buf);
        return 0;
    }
    js_doc *d = js_parse(buf.s ? buf.s : "", buf.n, err, sizeof err);
    jw_free(&buf);
    if (!d) return fprintf(stderr, "%s: %s\n", path, err), 2;
    for (int cs = js_first(d, d->root); cs >= 0; cs = js_next(d, cs)) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        char *text = !strcmp(mode, "--schema-gen") ? gr_json_schema(d, js_get(d, cs, "schema"), err, sizeof err)
                                                   : gr_json_schema_exact(d, js_get(d, cs, "schema"), err, sizeof err);
        gr_grammar *g = text ? gr_parse(text, strlen(text), "root", err, sizeof err) : NULL;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (!g) printf("refused: %s\n", err);
        else {
            printf("ok %.6f ", dt);
            for (int t = js_first(d, js_get(d, cs, "texts")); t >= 0; t = js_next(d, t)) putchar('0' + in_lang(g, js_str(d, t)));
            putchar('\n');
        }
        gr_free(g), free(text);
    }
    js_free(d);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3) return driver(argv[1], argv[2]);
    test_languages();
    test_refusals();
    test_hostile();
    test_schema_generation();
    test_nullable_repeats();
    test_mask();
    test_tables();
    test_enum_trie();
    test_schema();
    test_schema_exact();
    test_tools();
    test_check();
    return check_report("test_grammar");
}
