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
    test_ids();
    test_suggest();
    test_doc();
    test_readme();
    return check_report("test_env");
}
