/* fuzz_usage.c — tel_usage_parse (telemetry.h), the `.coli_usage` expert
 * history reader, on arbitrary text.
 *
 * The text is parsed for a few model shapes (L MoE layers x E experts):
 * 1x1, 3x8 and 4x8 (the tiny fixtures), 75x256 (GLM-5), and the shape its
 * own "-1 L E" line names when L·E ≤ 65536; with the engine id of
 * glm_moe_dsa. Properties:
 *   - refused: every count is zero and the message is non-empty;
 *   - accepted: counts are within (0, TEL_USAGE_MAX_COUNT], and the
 *     round trip holds: tel_usage_format then tel_usage_parse gives the same
 *     counts, formatting those gives the same text byte for byte, and that
 *     text less its last newline is refused as truncated.
 * A stronger round trip too: counts
 * taken from the input bytes (each capped at TEL_USAGE_MAX_COUNT, as
 * tel_usage_merge caps them) must format into a text that parses back to
 * them — what tel_usage_merge writes, the next run must be able to read. */
#include "telemetry.h"

#include "fuzz_common.h"

static void fz_roundtrip(int L, int E, uint32_t eng, const uint64_t *counts) {
    size_t n1 = 0, n2 = 0, cells = (size_t)L * E;
    char *t1 = tel_usage_format(L, E, eng, counts, &n1);
    FUZZ_CHECK(t1 && n1 > 0 && t1[n1 - 1] == '\n');
    uint64_t *back = (uint64_t *)malloc(cells * sizeof *back);
    FUZZ_CHECK(back);
    char err[200];
    int rc = tel_usage_parse(t1, n1, L, E, eng, back, err, sizeof err);
    if (rc) fprintf(stderr, "formatted history refused: %s\n", err);
    FUZZ_CHECK(rc == 0);
    for (size_t i = 0; i < cells; i++) {
        uint64_t want = counts[i] > TEL_USAGE_MAX_COUNT ? TEL_USAGE_MAX_COUNT : counts[i];
        FUZZ_CHECK(back[i] == want);
    }
    char *t2 = tel_usage_format(L, E, eng, back, &n2);
    FUZZ_CHECK(t2 && n2 == n1 && !memcmp(t1, t2, n1));
    FUZZ_CHECK(tel_usage_parse(t1, n1 - 1, L, E, eng, back, err, sizeof err) == -1 && err[0]);
    for (size_t i = 0; i < cells; i++) FUZZ_CHECK(back[i] == 0);
    free(t1);
    free(t2);
    free(back);
}

static void fz_shape(const char *text, size_t len, int L, int E, uint32_t eng) {
    size_t cells = (size_t)L * E;
    uint64_t *c = (uint64_t *)malloc(cells * sizeof *c);
    FUZZ_CHECK(c);
    memset(c, 0xab, cells * sizeof *c);
    char err[200];
    memset(err, 'x', sizeof err);
    int rc = tel_usage_parse(text, len, L, E, eng, c, err, sizeof err);
    if (rc) {
        FUZZ_CHECK(rc == -1 && fuzz_terminated(err, sizeof err) && err[0]);
        for (size_t i = 0; i < cells; i++) FUZZ_CHECK(c[i] == 0);
    } else {
        for (size_t i = 0; i < cells; i++) FUZZ_CHECK(c[i] <= TEL_USAGE_MAX_COUNT);
        fz_roundtrip(L, E, eng, c);
    }
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const uint32_t eng = tel_engine_id("glm_moe_dsa");
    static const int shapes[][2] = {{1, 1}, {3, 8}, {4, 8}, {75, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) fz_shape(text, size, shapes[i][0], shapes[i][1], eng);
    /* the shape the text names on a "-1 L E" line */
    const char *s = memmem(text, size, "\n-1 ", 4);
    if (s) {
        char buf[64];
        size_t n = (size_t)(text + size - (s + 4));
        if (n > sizeof buf - 1) n = sizeof buf - 1;
        memcpy(buf, s + 4, n);
        buf[n] = 0;
        long L = 0, E = 0;
        if (sscanf(buf, "%ld %ld", &L, &E) == 2 && L >= 1 && E >= 1 && L <= 65536 && E <= 65536 && L * E <= 65536)
            fz_shape(text, size, (int)L, (int)E, eng);
    }
    /* arbitrary counts (the input's bytes) must survive format + parse */
    if (size >= 2) {
        int L = 1 + data[0] % 4, E = 1 + data[1] % 8;
        uint64_t c[32];
        const uint8_t *p = data + 2, *end = data + size;
        for (int i = 0; i < L * E; i++) {
            uint64_t v = fuzz_take_u64(&p, end);
            /* mostly small counts, some near and at the cap */
            c[i] = (v & 3) == 0 ? v >> 2 : (v & 3) == 1 ? TEL_USAGE_MAX_COUNT - ((v >> 2) & 0xff) : (v >> 2) & 0xffff;
        }
        fz_roundtrip(L, E, eng, c);
    }
    return 0;
}
