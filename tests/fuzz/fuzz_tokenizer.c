/* fuzz_tokenizer.c — tok_load (tok.h) on a hostile tokenizer.json, or
 * tok_load_dir on a hostile tiktoken.model + tokenizer_config.json (Kimi K2),
 * then encode, decode and the chat template.
 *
 * Input: tokenizer.json [FUZZ_SEP text], or, when the input does not start
 * with '{', tiktoken.model FUZZ_SEP tokenizer_config.json [FUZZ_SEP text].
 * The files are written to a per-process scratch directory and loaded from
 * there. The text to encode is the part after the files, or (without one)
 * the first 512 bytes of the input; a few fixed strings are encoded too.
 *
 * On a loaded tokenizer:
 *   - every id is below tok_n_ids and has a piece; the 256 one-byte tokens
 *     exist; tok_is_special only for ids in range;
 *   - encoding is deterministic (fresh vs reused tok_ids scratch) and
 *     appends (encoding twice without reset gives the ids twice);
 *   - tok_decode output is valid UTF-8 and equals the streaming decoder's
 *     (tok_stream_put per id, tok_stream_flush);
 *   - decode(encode(x)) == x after invalid UTF-8 is replaced, whenever the
 *     tokenizer makes that hold (no lstrip/rstrip added token, each added
 *     token decodes to its own content);
 *   - tok_chat_text truncates like snprintf; tok_chat gives ids in range
 *     (or -2 when tok_chat_check says a chat token is missing).
 * On refusal the message is non-empty. */
#include "tok.h"

#include "fuzz_common.h"

static const char *const fz_fixed[] = {
    "Hello, world!",
    "  leading spaces\n\nand newlines\r\n\r\n  ",
    "\xe6\x95\xb0\xe5\xad\x97 123456 \xc3\xbc" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 \xf0\x9f\x99\x82",
    "[gMASK]<sop><|system|>sys<|user|>hi<|assistant|><think></think>",
    "'s 'T 'Re 'vE 'm 'll 'd \xc5\xbft x's",
    "\xff\xfe invalid \xc3 \xed\xa0\x80 \xf4\x90\x80\x80 \xe0\x80\xaf end\xc3",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\t \xc2\xa0x \xe3\x80\x80y\x0b\x0c",
    "<|endoftext|><|endoftext|> <|user|> \n<|assistant|>\n",
    "<|im_user|>user<|im_middle|>\xe4\xb8\xad\xe6\x96\x87" "ABCdef \xed\x95\x9c" "A<|im_end|>[BOS]<|reserved_token_4000|>",
    "",
};

/* 1 when decode(encode(x)) must give x back (see the header comment). */
static int fz_roundtrips(const tok *t) {
    for (int k = 0; k < t->n_added; k++) {
        const tok_added_ *a = &t->added[k];
        size_t n;
        const char *p = tok_piece(t, a->id, &n);
        if (a->lstrip || a->rstrip || !p || n != a->len || memcmp(p, t->bytes + a->off, n)) return 0;
    }
    return 1;
}

static void fz_text(const tok *t, const char *text, size_t len, int roundtrip) {
    tok_ids a = {0}, b = {0};
    tok_str out = {0}, st_out = {0};
    FUZZ_CHECK(tok_encode(t, text, len, &a) == 0);
    for (size_t i = 0; i < a.n; i++) FUZZ_CHECK(a.ids[i] >= 0 && a.ids[i] < tok_n_ids(t));
    if (!len) FUZZ_CHECK(a.n == 0);
    /* deterministic with reused scratch; appends */
    FUZZ_CHECK(tok_encode(t, "x\xff yz", 5, &b) == 0);
    b.n = 0;
    FUZZ_CHECK(tok_encode(t, text, len, &b) == 0);
    FUZZ_CHECK(b.n == a.n && (a.n == 0 || !memcmp(a.ids, b.ids, a.n * sizeof(int))));
    FUZZ_CHECK(tok_encode(t, text, len, &b) == 0);
    FUZZ_CHECK(b.n == 2 * a.n && (a.n == 0 || !memcmp(a.ids, b.ids + a.n, a.n * sizeof(int))));
    /* decode, batch and streaming */
    FUZZ_CHECK(tok_decode(t, a.ids, a.n, &out) == 0);
    FUZZ_CHECK(out.s && out.s[out.n] == 0);
    FUZZ_CHECK(fuzz_utf8_ok(out.s, out.n));
    tok_stream ss = {{0}, 0, 0, 0, 0};
    FUZZ_CHECK(tok_str_put(&st_out, "", 0) == 0);
    for (size_t i = 0; i < a.n; i++) FUZZ_CHECK(tok_stream_put(t, &ss, a.ids[i], &st_out) == 0);
    FUZZ_CHECK(tok_stream_flush(&ss, 0, &st_out) == 0);
    FUZZ_CHECK(st_out.n == out.n && !memcmp(st_out.s, out.s, out.n));
    /* round trip */
    if (roundtrip) {
        char *fixed = (char *)malloc(3 * len + 1);
        FUZZ_CHECK(fixed);
        size_t fl = tok_utf8_fix(text, len, fixed);
        if (!(fl == out.n && !memcmp(fixed, out.s, fl))) {
            fprintf(stderr, "round trip: %zu bytes in, %zu ids, %zu bytes out (%zu expected)\n", len, a.n, out.n, fl);
        }
        FUZZ_CHECK(fl == out.n && !memcmp(fixed, out.s, fl));
        free(fixed);
    }
    tok_str_free(&out);
    tok_str_free(&st_out);
    tok_ids_free(&a);
    tok_ids_free(&b);
}

static void fz_chat(const tok *t, const char *user) {
    /* the pure template text: snprintf-like truncation */
    size_t full = tok_chat_text("sys", user, 1, NULL, 0);
    char *buf = (char *)malloc(full + 1), small[16];
    FUZZ_CHECK(buf);
    FUZZ_CHECK(tok_chat_text("sys", user, 1, buf, full + 1) == full && buf[full] == 0 && strlen(buf) <= full);
    size_t caps[] = {1, 2, 7, 12, 16};
    for (size_t k = 0; k < sizeof caps / sizeof *caps; k++) {
        memset(small, 'z', sizeof small);
        FUZZ_CHECK(tok_chat_text("sys", user, 1, small, caps[k]) == full);
        size_t l = full < caps[k] - 1 ? full : caps[k] - 1;
        FUZZ_CHECK(small[l] == 0 && !memcmp(small, buf, l));
    }
    free(buf);
    tok_ids ids = {0};
    int ok = tok_chat_check(t, NULL, 0) == 0;
    int rc = tok_chat(t, NULL, user, 0, &ids);
    FUZZ_CHECK(ok ? rc == 0 : rc == -2);
    if (ok) {
        FUZZ_CHECK(tok_chat(t, "You are a helpful assistant.", user, 1, &ids) == 0);
        for (size_t i = 0; i < ids.n; i++) FUZZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < tok_n_ids(t));
        FUZZ_CHECK(ids.n >= 2);
    }
    tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_parts pp;
    int tiktoken = size > 0 && data[0] != '{';
    fuzz_split(data, size, tiktoken ? 3 : 2, &pp);
    const char *dir = fuzz_dir();
    char path[4400], err[512];
    memset(err, 'x', sizeof err);
    tok *t;
    if (tiktoken) {
        fuzz_write("tiktoken.model", pp.p[0], pp.n[0]);
        if (pp.count > 1) fuzz_write("tokenizer_config.json", pp.p[1], pp.n[1]);
        t = tok_load_dir(dir, err, sizeof err);
        if (t) FUZZ_CHECK(t->pre == TOK_PRE_KIMI && t->n_added == TOK_KIMI_SPECIALS);
    } else {
        fuzz_write("tokenizer.json", pp.p[0], pp.n[0]);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        t = tok_load(path, err, sizeof err);
    }
    if (!t) {
        FUZZ_CHECK(fuzz_terminated(err, sizeof err) && err[0]);
        return 0;
    }
    const int n = tok_n_ids(t);
    FUZZ_CHECK(n >= 256 && n <= TOK_MAX_IDS);
    for (int b = 0; b < 256; b++) FUZZ_CHECK(t->byte_id[b] >= 0 && t->byte_id[b] < n);
    for (int id = 0; id < n && id < 4096; id++) {
        size_t len = 0;
        FUZZ_CHECK(tok_piece(t, id, &len) != NULL);
        if (tok_is_special(t, id)) FUZZ_CHECK(t->flags[id] & TOK_F_ADDED);
    }
    size_t len;
    FUZZ_CHECK(tok_piece(t, -1, &len) == NULL && tok_piece(t, n, &len) == NULL);
    FUZZ_CHECK(!tok_is_special(t, -1) && !tok_is_special(t, n));
    for (int k = 0; k < t->n_added; k++) FUZZ_CHECK(t->added[k].id >= 0 && t->added[k].id < n);
    (void)tok_find(t, "<|user|>");
    (void)tok_find(t, "a");

    const int rt = fz_roundtrips(t);
    for (size_t i = 0; i < sizeof fz_fixed / sizeof *fz_fixed; i++) fz_text(t, fz_fixed[i], strlen(fz_fixed[i]), rt);
    int tp = tiktoken ? 2 : 1; /* the part that holds the text, if there is one */
    const char *text = pp.count > tp ? (const char *)pp.p[tp] : (const char *)data;
    size_t tl = pp.count > tp ? pp.n[tp] : (size < 512 ? size : 512);
    fz_text(t, text, tl, rt);

    char *user = (char *)malloc(tl + 1);
    FUZZ_CHECK(user);
    memcpy(user, text, tl);
    user[tl] = 0;
    fz_chat(t, user);
    free(user);
    tok_free(t);
    return 0;
}
