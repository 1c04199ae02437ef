/* fuzz_grammar.c — grammar.h on hostile grammars and texts.
 *
 * Input: a GBNF grammar [FUZZ_SEP text], or with a first byte '{' a JSON
 * schema [FUZZ_SEP text]. The grammar is parsed (the schema first written
 * as GBNF; that GBNF must always parse); the text is fed to the
 * recognizer in pieces of 1..4 bytes, and at every piece the mask over a
 * small fixed vocabulary (every byte, and a few multi-byte pieces) is
 * compared with a brute force: a token is allowed exactly when its bytes,
 * appended to the text so far, are accepted from the start.
 * Properties: a refusal has a message with "line L, column C" (GBNF) or a
 * reason (schema); recognition never crashes or loops; the mask equals the
 * brute force, and the mask from token tables the one walking the whole
 * trie; feeding all of the text at once and piece by piece agree. */
#include "grammar.h"

#include "fuzz_common.h"

#define FZ_V 276 /* every byte, and the 20 pieces of fz_vocab */
/* Ways to continue beyond which the brute-force mask check stops: an
 * ambiguous grammar (expr ::= term (root term)*) reaches 500 ways in 12
 * bytes, and 276 re-reads from the start then take tens of seconds under
 * ASan. The mask was computed above, bounded by GR_MAX_STACKS. */
#define FZ_BRUTE_WAYS 128

static const char *fz_pieces[FZ_V];
static size_t fz_lens[FZ_V];
static gr_vocab fz_v;

static void fz_vocab(void) {
    static int ready;
    static char bytes[256];
    static const char *multi[] = {"\"", "{\"", "\": ", "true", "null", "ab", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x99\x82", "\xc3",
                                  "\xa9\"", "12", "-0.5", "\\n", "\\u00", "], ", "\n", "  ", "x\xed\xa0\x80", "\xe0\x80\xaf"};
    if (ready) return;
    FUZZ_CHECK(256 + sizeof multi / sizeof *multi == FZ_V);
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, fz_pieces[i] = &bytes[i], fz_lens[i] = 1;
    for (int i = 0; i < (int)(sizeof multi / sizeof *multi); i++) fz_pieces[256 + i] = multi[i], fz_lens[256 + i] = strlen(multi[i]);
    FUZZ_CHECK(gr_vocab_build(&fz_v, FZ_V, fz_pieces, fz_lens) == 0);
    ready = 1;
}

static int fz_prefix(const gr_grammar *g, const uint8_t *t, size_t n) {
    gr_state s;
    int ok = gr_init(g, &s) == 0 && gr_accept(g, &s, t, n) == 0;
    gr_state_free(&s);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_vocab();
    fuzz_parts p;
    fuzz_split(data, size, 2, &p);
    char err[400];
    err[0] = 0;
    gr_grammar *g;
    char *gbnf = NULL;
    if (p.n[0] && p.p[0][0] == '{') {
        js_doc *d = js_parse((const char *)p.p[0], p.n[0], NULL, 0);
        if (!d) return 0;
        gbnf = gr_json_schema(d, d->root, err, sizeof err);
        js_free(d);
        if (!gbnf) { FUZZ_CHECK(err[0]); return 0; }
        g = gr_parse(gbnf, strlen(gbnf), "root", err, sizeof err);
        if (!g) fprintf(stderr, "schema grammar refused: %s\n%s\n", err, gbnf);
        FUZZ_CHECK(g != NULL); /* what the converter writes always parses */
    } else {
        g = gr_parse((const char *)p.p[0], p.n[0], "root", err, sizeof err);
        if (!g) {
            FUZZ_CHECK(!strncmp(err, "line ", 5) && strstr(err, ", column "));
            return 0;
        }
    }
    gr_state s;
    if (gr_init(g, &s)) { gr_state_free(&s), gr_free(g), free(gbnf); return 0; } /* too ambiguous to follow: refused */
    gr_mask_ctx cx, whole;
    FUZZ_CHECK(gr_mask_ctx_init(&cx, &fz_v) == 0 && gr_mask_ctx_init(&whole, &fz_v) == 0);
    whole.whole_walk = 1;
    uint8_t allowed[FZ_V], all[FZ_V], buf[512 + 16];
    const uint8_t *text = p.count > 1 ? p.p[1] : NULL;
    size_t tn = p.count > 1 ? (p.n[1] < 512 ? p.n[1] : 512) : 0, at = 0;
    int checks = 0;
    while (checks < 6) {
        int n = gr_mask(g, &s, &fz_v, &cx, allowed);
        FUZZ_CHECK(gr_mask(g, &s, &fz_v, &whole, all) == n); /* the token tables and the whole walk agree */
        if (n < 0) break; /* too ambiguous to decide: said, never a wrong mask */
        FUZZ_CHECK(!memcmp(allowed, all, FZ_V));
        if (s.st.n > FZ_BRUTE_WAYS) break; /* the brute force below re-reads the text 276 times: seconds past this many ways */
        if (at) memcpy(buf, text, at);
        for (int t = 0; t < FZ_V; t++) {
            memcpy(buf + at, fz_pieces[t], fz_lens[t]);
            int want = fz_prefix(g, buf, at + fz_lens[t]);
            if (want != allowed[t]) fprintf(stderr, "token %d after %zu bytes: mask %d, brute force %d\n", t, at, allowed[t], want);
            FUZZ_CHECK(want == allowed[t]);
        }
        checks++;
        if (at >= tn) break;
        size_t step = 1 + (text[at] & 3);
        if (step > tn - at) step = tn - at;
        int r = gr_accept(g, &s, text + at, step);
        FUZZ_CHECK((r == 0) == fz_prefix(g, text, at + step));
        if (r) break;
        at += step;
    }
    gr_mask_ctx_free(&cx), gr_mask_ctx_free(&whole);
    gr_state_free(&s);
    gr_free(g);
    free(gbnf);
    return 0;
}
