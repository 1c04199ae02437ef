/* test_env.c — the knob registry: strict parsing, typo suggestions, and
 * ENVIRONMENT.md carrying exactly the registry's table. */
#include "compat.h"
#include "env.h"

#include "check.h"

static int parses(const char *name, const char *raw, env_val *v) {
    char err[256];
    int i = env_index(name);
    CHECK(i >= 0);
    return i >= 0 && env_parse(&env_knobs[i], raw, v, err, sizeof err) == 0;
}

static void test_parse(void) {
    env_val v;
    char err[256];
    CHECK(parses("CAP", "12", &v) && v.i == 12 && v.set);
    CHECK(parses("CAP", NULL, &v) && v.i == 0 && !v.set);
    CHECK(!parses("CAP", "12x", &v));
    CHECK(!parses("CAP", "", &v));
    CHECK(!parses("CAP", " 1", &v));
    CHECK(!parses("CAP", "+1", &v));
    CHECK(!parses("CAP", "-1", &v));
    CHECK(!parses("CAP", "1.5", &v));
    CHECK(!parses("CAP", "99999999999999999999", &v));
    CHECK(!parses("UBATCH", "0", &v));
    CHECK(parses("ABSORB", "1", &v) && v.i == 2);
    CHECK(parses("ABSORB", "auto", &v) && v.i == 0);
    CHECK(!parses("ABSORB", "yes", &v));
    int i = env_index("CAP");
    CHECK(env_parse(&env_knobs[i], "lots", &v, err, sizeof err) == -1);
    CHECK_HAS(err, "CAP=lots");
    CHECK_HAS(err, "integer in [0, 1048576]");
    i = env_index("ABSORB");
    CHECK(env_parse(&env_knobs[i], "2", &v, err, sizeof err) == -1);
    CHECK_HAS(err, "one of auto, 0, 1");
    /* every default parses under its own rules */
    for (int k = 0; k < ENV_COUNT; k++) {
        CHECK(env_parse(&env_knobs[k], NULL, &v, err, sizeof err) == 0);
        if (env_knobs[k].def) CHECK(env_parse(&env_knobs[k], env_knobs[k].def, &v, err, sizeof err) == 0);
        for (int j = 0; j < k; j++) CHECK(strcmp(env_knobs[j].name, env_knobs[k].name) != 0);
    }
}

/* Numbers are plain decimal for every number knob: what strtoll/strtod
 * would also take (hex, hex floats, inf/nan, '+', whitespace anywhere) is
 * refused, naming the variable and the form (issue #32: TEMP=0x10 ran at
 * temperature 16, NGEN=$'\n5' ran 5 tokens). */
static void test_decimal(void) {
    env_val v;
    char err[256];
    CHECK(parses("TEMP", "0.7", &v) && v.f == 0.7);
    CHECK(parses("TEMP", "1e-3", &v) && v.f == 1e-3);
    CHECK(parses("TEMP", "2E+1", &v) && v.f == 20);
    CHECK(parses("TEMP", ".5", &v) && v.f == 0.5);
    CHECK(parses("TEMP", "1.", &v) && v.f == 1);
    CHECK(parses("DRAFT", "-1", &v) && v.i == -1); /* the range has negatives */
    CHECK(parses("SEED", "9007199254740991", &v) && v.i == 9007199254740991LL);
    CHECK(parses("PIN_GB", "all", &v) && v.i == 1);
    CHECK(parses("PIN_GB", "2.5", &v) && v.f == 2.5);
    static const char *const bad_float[] = {"0x10", "0X10", "0x0.8p0", "0x1p-1", "inf", "INF", "infinity", "nan", "NAN(1)", "+1", "-0", "-1",
                                            " 1", "1 ", "\n1", "1\n", "\t1", "\v1", "\f1", "\r1", "1e", "1e+", "e3", ".", "-", "", "1..2",
                                            "1e3.5", "1,5", "\xef\xbc\x91"};
    static const char *const bad_int[] = {"0x10", "0X1", "010x", "+1", " 1", "1 ", "\n5", "5\n", "\t5", "\v5", "1e3", "1.0", "1.", ".5", "-",
                                          "--1", "", "inf", "nan"};
    for (int k = 0; k < ENV_COUNT; k++) {
        const env_knob *kn = &env_knobs[k];
        if (kn->kind == ENV_KIND_FLOAT || kn->kind == ENV_KIND_FLOAT_OR) {
            for (size_t i = 0; i < sizeof bad_float / sizeof *bad_float; i++) {
                int r = env_parse(kn, bad_float[i], &v, err, sizeof err);
                CHECK(r == -1);
                if (r != -1) fprintf(stderr, "%s accepted %s\n", kn->name, bad_float[i]);
            }
            CHECK(env_parse(kn, "0", &v, err, sizeof err) == 0 && v.f == 0);
        } else if (kn->kind == ENV_KIND_INT || kn->kind == ENV_KIND_BOOL) {
            for (size_t i = 0; i < sizeof bad_int / sizeof *bad_int; i++) {
                int r = env_parse(kn, bad_int[i], &v, err, sizeof err);
                CHECK(r == -1);
                if (r != -1) fprintf(stderr, "%s accepted %s\n", kn->name, bad_int[i]);
            }
            char lo[32];
            snprintf(lo, sizeof lo, "%.0f", kn->lo);
            CHECK(env_parse(kn, lo, &v, err, sizeof err) == 0 && v.i == (long long)kn->lo);
        }
    }
    int i = env_index("TEMP");
    CHECK(env_parse(&env_knobs[i], "0x10", &v, err, sizeof err) == -1);
    CHECK_HAS(err, "TEMP=0x10 is invalid: expected a number in [0, 100]");
    CHECK_HAS(err, "decimal");
    CHECK_HAS(err, "hex");
    i = env_index("NGEN");
    CHECK(env_parse(&env_knobs[i], "\n5", &v, err, sizeof err) == -1);
    CHECK_HAS(err, "NGEN=\\n5 is invalid: expected an integer in [1, 1048576], written in decimal digits");
    CHECK(strchr(err, '\n') == NULL); /* the value cannot break the message's line */
    i = env_index("DRAFT");
    CHECK(env_parse(&env_knobs[i], "+2", &v, err, sizeof err) == -1);
    CHECK_HAS(err, "optional leading -");
}

/* STR knobs refuse an empty value (a path or a name that is empty is a
 * mistake: issue #32's SERVE_MODEL="" served a model named ""); TEXT knobs
 * take it where it means something, and say what. */
static void test_empty(void) {
    env_val v;
    char err[256];
    int strs = 0;
    for (int k = 0; k < ENV_COUNT; k++) {
        const env_knob *kn = &env_knobs[k];
        if (kn->kind == ENV_KIND_STR) {
            strs++;
            CHECK(env_parse(kn, "", &v, err, sizeof err) == -1);
            char want[96];
            snprintf(want, sizeof want, "%s= is invalid: expected non-empty text", kn->name);
            CHECK_HAS(err, want);
            CHECK(env_parse(kn, "x", &v, err, sizeof err) == 0 && !strcmp(v.s, "x"));
        } else if (kn->kind == ENV_KIND_TEXT) {
            CHECK(env_parse(kn, "", &v, err, sizeof err) == 0 && v.set && !strcmp(v.s, ""));
            CHECK_HAS(kn->doc, "empty =");
        } else if (kn->kind == ENV_KIND_CHOICE) {
            CHECK(env_parse(kn, "", &v, err, sizeof err) == -1);
        }
    }
    CHECK(strs >= 11);
    CHECK(env_knobs[ENV_SERVE_MODEL].kind == ENV_KIND_STR && env_knobs[ENV_COLI_MODEL_MIRROR].kind == ENV_KIND_STR);
    CHECK(env_knobs[ENV_KV_SAVE].kind == ENV_KIND_STR && env_knobs[ENV_COLI_HOST].kind == ENV_KIND_STR);
    CHECK(env_knobs[ENV_HOST].kind == ENV_KIND_TEXT); /* not read: a shell's empty HOST must not stop serve mode */
    CHECK(parses("PROMPT", "", &v) && v.set);
    CHECK(parses("SYSTEM", "", &v) && v.set);
}

/* The ids the engine uses name their knobs, and every name finds its id. */
static void test_ids(void) {
    CHECK(!strcmp(env_knobs[ENV_CAP].name, "CAP"));
    CHECK(!strcmp(env_knobs[ENV_COLI_IO_FAULT].name, "COLI_IO_FAULT"));
    CHECK(env_index("CAP") == ENV_CAP && env_index("PROMPT") == ENV_PROMPT);
    CHECK(env_index("NOT_A_KNOB") == -1);
    for (int k = 0; k < ENV_COUNT; k++) CHECK(env_index(env_knobs[k].name) == k);
}

static void test_suggest(void) {
    CHECK(env_suggest("CAP") == NULL);
    CHECK(env_suggest("CAPP") && !strcmp(env_suggest("CAPP"), "CAP"));
    CHECK(env_suggest("UBACH") && !strcmp(env_suggest("UBACH"), "UBATCH"));
    CHECK(env_suggest("COLI_CTX") && !strcmp(env_suggest("COLI_CTX"), "CTX"));
    CHECK(env_suggest("HOSTNAME") == NULL);
    CHECK(env_suggest("COLI_FOO") == NULL); /* three edits from CAP: too far for a three-letter name */
    CHECK(env_suggest("cap") && !strcmp(env_suggest("cap"), "CAP"));
    CHECK(env_suggest("Prompt") && !strcmp(env_suggest("Prompt"), "PROMPT"));
    CHECK(env_suggest("coli_mmap") && !strcmp(env_suggest("coli_mmap"), "COLI_MMAP"));
    CHECK(env_suggest("COLI_PIPE_WORKRS") && !strcmp(env_suggest("COLI_PIPE_WORKRS"), "PIPE_WORKERS"));
    CHECK(env_suggest("XDG_SESSION_ID") == NULL);
    CHECK(env_distance("kitten", "sitting") == 3);
}

/* ENVIRONMENT.md holds the registry table between two marker lines. */
static void test_doc(void) {
    size_t len;
    char *doc = compat_read_file("ENVIRONMENT.md", 1 << 20, &len);
    CHECK(doc != NULL);
    if (!doc) return;
    const char *b = strstr(doc, "<!-- env-table -->\n"), *e = strstr(doc, "<!-- /env-table -->");
    CHECK(b && e && e > b);
    char *want = NULL;
    size_t wl = 0;
    FILE *f = tmpfile(); /* not open_memstream: Windows has none */
    CHECK(f != NULL);
    if (!f) return;
    env_write_table(f);
    long end = ftell(f);
    want = (char *)malloc(end > 0 ? (size_t)end + 1 : 1);
    rewind(f);
    wl = want && end > 0 ? fread(want, 1, (size_t)end, f) : 0;
    if (want) want[wl] = 0;
    fclose(f);
    if (b && e) {
        b += strlen("<!-- env-table -->\n");
        int same = (size_t)(e - b) == wl && !memcmp(b, want, wl);
        CHECK(same);
        if (!same) fprintf(stderr, "ENVIRONMENT.md table is stale; regenerate with ./colibri --env-table:\n%s", want);
    }
    /* every knob is also named in a section heading ("### `A`, `B`") */
    for (int k = 0; k < ENV_COUNT; k++) {
        char h[96];
        snprintf(h, sizeof h, "`%s`", env_knobs[k].name);
        int found = 0;
        for (const char *p = strstr(doc, "\n### "); p && !found; p = strstr(p + 1, "\n### ")) {
            const char *eol = strchr(p + 1, '\n');
            const char *at = strstr(p, h);
            found = at && (!eol || at < eol);
        }
        CHECK(found);
        if (!found) fprintf(stderr, "ENVIRONMENT.md has no section heading naming %s\n", h);
    }
    free(want);
    free(doc);
}

/* README's table of the knobs that matter names registry knobs only. */
static void test_readme(void) {
    size_t len;
    char *doc = compat_read_file("README.md", 1 << 20, &len);
    CHECK(doc != NULL);
    if (!doc) return;
    const char *t = strstr(doc, "| knob | what it does |");
    CHECK(t != NULL);
    int rows = 0;
    for (const char *line = t ? strchr(t, '\n') : NULL; line && line[1] == '|'; line = strchr(line + 1, '\n')) {
        const char *eol = strchr(line + 1, '\n'), *cell = strchr(line + 2, '|');
        for (const char *p = line + 1; p && cell && p < cell && p < eol; p++) {
            if (*p != '`') continue;
            const char *q = strchr(p + 1, '`');
            if (!q || q > cell) break;
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(q - p - 1), p + 1);
            int known = env_index(name) >= 0;
            CHECK(known);
            if (!known) fprintf(stderr, "README.md names %s, which is not a knob\n", name);
            rows += known;
            p = q;
        }
    }
    CHECK(rows > 10);
    free(doc);
}

int main(void) {
    test_parse();
    test_decimal();
    test_empty();
    test_ids();
    test_suggest();
    test_doc();
    test_readme();
    return check_report("test_env");
}
