/* test_json.c — the strict JSON reader on valid and hostile text. */
#include "json.h"

#include "check.h"

static js_doc *parse(const char *s, char *err) { return js_parse(s, strlen(s), err, 160); }

static int rejects(const char *s, const char *why) {
    char err[160];
    js_doc *d = parse(s, err);
    if (d) {
        js_free(d);
        fprintf(stderr, "accepted: %s\n", s);
        return 0;
    }
    if (!strstr(err, why)) {
        fprintf(stderr, "for %s: expected '%s' in '%s'\n", s, why, err);
        return 0;
    }
    return 1;
}

static void test_values(void) {
    char err[160];
    js_doc *d = parse(" {\"a\": [1, -2, 3.5, 1e3, true, false, null], \"b\": {\"c\": \"x\\u00e9\\ud83d\\ude00\\n\"}} ", err);
    CHECK(d != NULL);
    if (!d) return;
    int a = js_get(d, d->root, "a");
    CHECK(js_typeof(d, a) == JS_ARR && js_count(d, a) == 7);
    CHECK(js_is_int(d, js_at(d, a, 0)) && js_int(d, js_at(d, a, 0)) == 1);
    CHECK(js_int(d, js_at(d, a, 1)) == -2);
    CHECK(!js_is_int(d, js_at(d, a, 2)) && js_num(d, js_at(d, a, 2)) == 3.5);
    CHECK(!js_is_int(d, js_at(d, a, 3)) && js_num(d, js_at(d, a, 3)) == 1000);
    CHECK(js_typeof(d, js_at(d, a, 4)) == JS_TRUE && js_typeof(d, js_at(d, a, 6)) == JS_NULL);
    CHECK(js_at(d, a, 7) == -1);
    const char *s = js_str(d, js_get(d, js_get(d, d->root, "b"), "c"));
    CHECK(s && !strcmp(s, "x\xc3\xa9\xf0\x9f\x98\x80\n"));
    CHECK(js_get(d, d->root, "zz") == -1);
    js_free(d);

    d = parse("[9223372036854775807, -9223372036854775808, 18446744073709551616]", err);
    CHECK(d && js_is_int(d, js_at(d, d->root, 0)) && js_int(d, js_at(d, d->root, 0)) == INT64_MAX);
    CHECK(d && js_is_int(d, js_at(d, d->root, 1)) && js_int(d, js_at(d, d->root, 1)) == INT64_MIN);
    CHECK(d && !js_is_int(d, js_at(d, d->root, 2))); /* too big for an exact integer */
    js_free(d);

    d = parse("\"a\\u0000b\"", err); /* embedded NUL keeps its length */
    CHECK(d && js_str_len(d, d->root) == 3);
    js_free(d);
}

static void test_hostile(void) {
    CHECK(rejects("", "unexpected end"));
    CHECK(rejects("{\"a\":1} x", "trailing bytes"));
    CHECK(rejects("{\"a\":1,}", "expected string key"));
    CHECK(rejects("[1,]", "bad number"));
    CHECK(rejects("{\"a\":1,\"a\":2}", "duplicate key"));
    CHECK(rejects("[01]", "leading zero"));
    CHECK(rejects("[1.]", "bad fraction"));
    CHECK(rejects("[1e]", "bad exponent"));
    CHECK(rejects("[1e999]", "out of range"));
    CHECK(rejects("[-]", "bad number"));
    CHECK(rejects("[tru]", "invalid literal"));
    CHECK(rejects("\"abc", "unterminated string"));
    CHECK(rejects("\"a\tb\"", "control character"));
    CHECK(rejects("\"\\x\"", "bad escape"));
    CHECK(rejects("\"\\ud800\"", "lone high surrogate"));
    CHECK(rejects("\"\\udc00\"", "lone low surrogate"));
    CHECK(rejects("\"\\ud800\\u0041\"", "bad surrogate pair"));
    CHECK(rejects("\"\\u12g4\"", "bad hex"));
    CHECK(rejects("\"\xff\"", "invalid UTF-8"));
    CHECK(rejects("\"\xc0\xaf\"", "invalid UTF-8"));         /* overlong */
    CHECK(rejects("\"\xed\xa0\x80\"", "invalid UTF-8"));     /* encoded surrogate */
    CHECK(rejects("\"\xf4\x90\x80\x80\"", "invalid UTF-8")); /* above U+10FFFF */
    CHECK(rejects("\"\xe2\x82\"", "invalid UTF-8"));         /* truncated */
    char deep[300];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    CHECK(rejects(deep, "nested too deeply"));
    /* a large object exercises the sorted duplicate check */
    char big[8192] = "{";
    for (int i = 0; i < 400; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "%s\"k%d\":%d", i ? "," : "", i % 399, i);
    strcat(big, "}");
    CHECK(rejects(big, "duplicate key"));
}

int main(void) {
    test_values();
    test_hostile();
    return check_report("test_json");
}
