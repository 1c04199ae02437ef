/* fuzz_route.c — rt_parse (route_trace.h), the routing trace reader
 * (ROUTE_REPLAY), on arbitrary bytes.
 *
 * Properties:
 *   - refused: -1, a non-empty terminated message, the trace left empty;
 *   - accepted: every chosen id is below the expert count and distinct in
 *     its row and layer, every prediction an expert or RT_NONE; formatting
 *     it gives the input byte for byte (rt_format), and that less its last
 *     byte is refused;
 *   - fitted to a model (rt_replay_init) of the trace's top-k and 1, 2 or
 *     3 times its experts: each layer's ranks are a permutation of the
 *     trace's experts, and every replayed row of every model layer maps
 *     to distinct experts below the trace's count. */
#include "route_trace.h"

#include "fuzz_common.h"

static void fz_replay(rt_trace *t, int mul) {
    char err[300];
    memset(err, 'x', sizeof err);
    int experts = (int)t->experts * mul;
    if (rt_replay_init(t, (int)t->topk, experts, (int)t->pred_k, err, sizeof err)) {
        FUZZ_CHECK(fuzz_terminated(err, sizeof err) && err[0]);
        return;
    }
    uint8_t *hit = (uint8_t *)calloc(t->experts, 1);
    FUZZ_CHECK(hit);
    for (uint32_t j = 0; j < t->layers; j++) {
        memset(hit, 0, t->experts);
        for (uint32_t e = 0; e < t->experts; e++) {
            uint16_t r = t->rank[(size_t)j * t->experts + e];
            FUZZ_CHECK(r < t->experts && !hit[r]);
            hit[r] = 1;
        }
    }
    free(hit);
    int rows = t->rows < 8 ? (int)t->rows : 8;
    for (int mk = 0; mk < (int)t->layers + 2; mk++)
        for (int s = 0; s < rows; s++) {
            const uint16_t *p = rt_replay_row(t, s, mk);
            for (uint32_t k = 0; k < t->topk; k++) {
                int e = rt_map(t, mk, p[k]);
                FUZZ_CHECK(e >= 0 && e < (int)t->experts);
                for (uint32_t i = 0; i < k; i++) FUZZ_CHECK(rt_map(t, mk, p[i]) != e);
            }
            for (uint32_t k = 0; k < t->pred_k; k++) FUZZ_CHECK(rt_map(t, mk, p[t->topk + k]) < (int)t->experts);
        }
    rt_commit(t, 1, rows);
    FUZZ_CHECK(t->pos < t->rows);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rt_trace t;
    char err[300];
    memset(err, 'x', sizeof err);
    if (rt_parse(&t, data, size, "trace", err, sizeof err)) {
        FUZZ_CHECK(fuzz_terminated(err, sizeof err) && err[0] && !t.id && !t.rows);
        return 0;
    }
    for (uint64_t r = 0; r < t.rows; r++)
        for (uint32_t j = 0; j < t.layers; j++) {
            const uint16_t *p = rt_at(&t, r, j);
            for (uint32_t k = 0; k < t.topk; k++) {
                FUZZ_CHECK(p[k] < t.experts);
                for (uint32_t i = 0; i < k; i++) FUZZ_CHECK(p[i] != p[k]);
            }
            for (uint32_t k = 0; k < t.pred_k; k++) FUZZ_CHECK(p[t.topk + k] < t.experts || p[t.topk + k] == RT_NONE);
        }
    size_t len = 0;
    unsigned char *b = rt_format(&t, &len);
    FUZZ_CHECK(b && len == size && !memcmp(b, data, size));
    rt_trace u;
    FUZZ_CHECK(rt_parse(&u, b, len - 1, "trace", err, sizeof err) == -1 && err[0]);
    free(b);
    for (int mul = 1; mul <= 3; mul++) {
        fz_replay(&t, mul);
        free(t.rank);
        t.rank = NULL;
    }
    rt_free(&t);
    return 0;
}
