/* test_peak.c — bench/bench_peak.c's instruction loops compute what their
 * rows claim: for each loop this CPU runs, the sum over lanes of what n
 * steps added equals n × accumulators × MACs per step × a × b, so the
 * multiply-adds per second bench_peak reports count what the
 * instructions multiply (a MAC count or operand width that does not match
 * the instruction fails here). That no step is hoisted out of its loop is
 * peak_opaque's job, seen in the disassembly, not here. Timing is not
 * tested. */
#include "check.h"
#include "kernels.h"

#define BENCH_PEAK_NO_MAIN
#include "bench/bench_peak.c"

int main(void) {
    /* a ≤ 127: the first operand is unsigned for vpdpbusd and vpmaddubsw,
     * signed for smull, sdot and smmla; |2ab| < 2^15: vpmaddubsw saturates;
     * |n·a·b| < 2^24: a float lane's sum stays exact */
    static const int ops[][2] = {{3, 2}, {1, 1}, {100, -50}, {127, -127 / 2}};
    int ran = 0;
    for (int i = 0; i < PEAK_NLOOPS; i++) {
        const peak_loop *l = &peak_loops[i];
        if (!mm_level_ok(l->level)) {
            SKIP(mm_level_name(l->level), "kernel level not supported by this CPU (%s)", l->name);
            continue;
        }
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            for (int64_t n = 1; n <= 300; n = n * 3 + 1) {
                int a = ops[k][0], b = ops[k][1];
                int64_t got = l->fn(n, a, b), want = peak_expected(l, n, a, b);
                CHECK(got == want);
                if (got != want) fprintf(stderr, "%s: %lld steps of %d·%d gave %lld, want %lld\n", l->name, (long long)n, a, b, (long long)got, (long long)want);
            }
        ran++;
    }
    CHECK(PEAK_NLOOPS == 0 || ran > 0); /* every CPU with vector kernels runs one */
    return check_report("test_peak");
}
