/* test_tier.c — residency policy (LRU bookkeeping, pin choice, LFRU
 * hysteresis, budget plan) and the .coli_usage history format. */
#include "telemetry.h"
#include "tier.h"

#include <math.h>

#include "check.h"

static void test_lru(void) {
    tier_lru l;
    CHECK(tier_lru_init(&l, 10, 3) == 0);
    uint64_t t = 1;
    for (int e = 0; e < 3; e++) {
        CHECK(tier_lru_lookup(&l, e, t) == -1);
        int v = tier_lru_victim(&l);
        CHECK(v == e); /* empty slots first, in order */
        tier_lru_install(&l, v, e, t++);
    }
    CHECK(tier_lru_lookup(&l, 0, t++) == 0); /* 0 is now the most recent */
    int v = tier_lru_victim(&l);
    CHECK(v == 1); /* expert 1 is the least recent */
    tier_lru_install(&l, v, 7, t++);
    CHECK(l.where[1] == -1 && l.where[7] == 1 && l.expert[1] == 7);
    l.busy[2] = 1; /* a read in flight into expert 2's slot */
    CHECK(tier_lru_victim(&l) == 0);
    l.busy[0] = l.busy[1] = 1;
    CHECK(tier_lru_victim(&l) == -1); /* all busy: nothing evictable */
    l.busy[0] = l.busy[1] = l.busy[2] = 0;
    int freed[3];
    CHECK(tier_lru_shrink(&l, 5, 1, freed) == 2 && l.cap == 1); /* floor kept */
    CHECK(freed[0] == 2 && freed[1] == 0);                     /* least recent first */
    CHECK(l.where[2] == -1 && l.where[0] == -1 && l.where[7] == 1);
    CHECK(tier_lru_victim(&l) == 1); /* disabled slots never come back */
    tier_lru_evict(&l, 1);
    CHECK(l.where[7] == -1 && tier_lru_victim(&l) == 1);
    tier_lru_free(&l);
}

static void test_pins(void) {
    enum { L = 3, E = 4 };
    uint64_t count[L * E] = {0, 0, 0, 0, /* dense layer */ 5, 9, 0, 5, /* */ 7, 1, 9, 2};
    uint64_t bytes[L] = {0, 10, 20};
    uint8_t pinned[L * E];
    tier_rank order[L * E];
    /* ranking: (1,1)=9 (2,2)=9 (2,0)=7 (1,0)=5 (1,3)=5 (2,3)=2 (2,1)=1 */
    uint64_t used = tier_pick_hot(count, L, E, bytes, 45, pinned, order);
    CHECK(used == 40); /* 10 + 20, then (2,0)=20 does not fit, (1,0)=10 does */
    CHECK(pinned[1 * E + 1] && pinned[2 * E + 2] && pinned[1 * E + 0] && !pinned[2 * E + 0] && !pinned[1 * E + 3]);
    used = tier_pick_hot(count, L, E, bytes, 1000, pinned, order);
    CHECK(used == 10 * 3 + 20 * 4 && !pinned[1 * E + 2]); /* unused experts never pinned */
    CHECK(tier_pick_hot(count, L, E, bytes, 0, pinned, order) == 0);
    /* the GPU tier's start: the hottest used experts, pinned or not, while they fit */
    uint8_t sel[L * E];
    used = tier_pick_hot(count, L, E, bytes, 25, sel, order);
    CHECK(used == 20 && sel[1 * E + 1] && !sel[2 * E + 2] && sel[1 * E + 0] && !sel[1 * E + 3]); /* (2,2) does not fit after (1,1) */
    used = tier_pick_hot(count, L, E, bytes, 1000, sel, order);
    CHECK(used == 10 * 3 + 20 * 4 && !sel[1 * E + 2] && !sel[0]); /* never an unused one or a dense layer's */
    uint64_t gpu_bytes[L] = {0, 0, 20};                                /* layer 1's experts cannot go to the GPU */
    used = tier_pick_hot(count, L, E, gpu_bytes, 45, sel, order);
    CHECK(used == 40 && sel[2 * E + 2] && sel[2 * E + 0] && !sel[1 * E + 1]);
    CHECK(tier_pick_hot(count, L, E, bytes, 9, sel, order) == 0);
}

static void test_vram_admission(void) {
    enum { N = 3 };
    uint64_t heat[8] = {10, 9, 30, 1, 0, 40, 11, 0}, last[8] = {0};
    int owner[N] = {0, -1, 2};
    uint8_t busy[N] = {0, 0, 0};
    CHECK(tier_vram_victim(owner, NULL, N, heat, last, 5, 3) == 1); /* an empty slot takes anyone */
    busy[1] = 1;
    CHECK(tier_vram_victim(owner, busy, N, heat, last, 5, 3) == -1); /* ... unless a job uses it; 1 against 10 and 30 */
    busy[1] = 0;
    owner[1] = 1;                                                    /* slots hold heats 10, 9, 30 */
    CHECK(tier_vram_victim(owner, busy, N, heat, last, 5, 6) == -1); /* 11 against 9: too close, no churn */
    CHECK(tier_vram_victim(owner, busy, N, heat, last, 5, 5) == 1);  /* 40 evicts the coldest, 9 */
    busy[1] = 1;
    CHECK(tier_vram_victim(owner, busy, N, heat, last, 5, 5) == 0); /* the coldest is in use: the next, 10 */
    busy[1] = 0;
    CHECK(tier_vram_victim(owner, NULL, N, heat, last, 5, 4) == -1); /* never used: stays out */
    heat[1] = 10, last[0] = 5;                                       /* equal heat: the older use goes first */
    CHECK(tier_vram_victim(owner, NULL, N, heat, last, 5, 5) == 1);
    CHECK(tier_vram_victim(owner, NULL, 0, heat, last, 5, 5) == -1); /* no tier */
}

static void test_lfru(void) {
    CHECK(tier_score(1, 300) > tier_score(0, 0)); /* heat beats recency */
    CHECK(tier_score(3, 0) > tier_score(3, 10));
    CHECK(!tier_should_swap(tier_score(10, 0), tier_score(9, 0)));  /* similar heat: no ping-pong */
    CHECK(tier_should_swap(tier_score(20, 0), tier_score(9, 0)));
    enum { L = 2, E = 4 };
    uint64_t heat[L * E] = {1, 30, 0, 2, /* */ 5, 6, 7, 4};
    uint64_t last[L * E] = {0};
    uint8_t pinned[L * E] = {1, 0, 0, 1, /* */ 1, 0, 0, 1};
    tier_swap sw[L];
    int n = tier_repin_pass(heat, last, pinned, NULL, L, E, 100, 8, sw);
    CHECK(n == 1 && sw[0].layer == 0 && sw[0].admit == 1 && sw[0].evict == 0);
    CHECK(tier_repin_pass(heat, last, pinned, NULL, L, E, 100, 0, sw) == 0);
    int away[L * E] = {-1, 0, -1, -1, /* */ -1, -1, -1, -1}; /* the GPU tier holds expert 1 of layer 0 */
    CHECK(tier_repin_pass(heat, last, pinned, away, L, E, 100, 8, sw) == 0);
    tier_decay(heat, L * E);
    CHECK(heat[1] == 15 && heat[0] == 0);
}

static void test_budget(void) {
    const uint64_t MB = 1000000;
    tier_budget b = {.ram = 1000 * MB, .dense = 300 * MB, .kv = 50 * MB, .work = 50 * MB, .reserve = 100 * MB,
                     .expert = 2 * MB, .moe_layers = 10, .n_experts = 64, .topk = 4};
    tier_plan p;
    CHECK(tier_plan_make(&b, &p) == 0); /* 500 MB left, 20 MB per slot across layers */
    CHECK(p.pin_bytes == 0 && p.lru_slots == 25 && p.lru_bytes == 500 * MB && p.peak == 900 * MB);
    b.pin_mode = TIER_PIN_ALL;
    CHECK(tier_plan_make(&b, &p) == 0 && p.lru_slots == 4 && p.pin_bytes == 420 * MB);
    b.pin_mode = TIER_PIN_AUTO, b.pin_bytes = 100 * MB;
    CHECK(tier_plan_make(&b, &p) == 0 && p.pin_bytes == 100 * MB && p.lru_slots == 20);
    b.pin_bytes = 5000 * MB; /* history alone: at most half the room */
    CHECK(tier_plan_make(&b, &p) == 0 && p.pin_bytes == 210 * MB && p.lru_slots == 14);
    b.pin_mode = TIER_PIN_BYTES, b.pin_bytes = 5000 * MB;
    CHECK(tier_plan_make(&b, &p) == 0 && p.pin_bytes == 420 * MB && p.lru_slots == 4);
    b.pin_mode = TIER_PIN_NONE, b.cap = 40; /* 800 MB wanted, 500 available */
    CHECK(tier_plan_make(&b, &p) == 0 && p.cap_lowered && p.lru_slots == 25);
    b.cap = 8;
    CHECK(tier_plan_make(&b, &p) == 0 && !p.cap_lowered && p.lru_slots == 8);
    b.ram = 100 * MB; /* the fixed part alone is 500 MB */
    CHECK(tier_plan_make(&b, &p) == -1 && p.short_by == 420 * MB);
    b.ram = 100000 * MB, b.cap = 0; /* plenty: never more than every expert */
    CHECK(tier_plan_make(&b, &p) == 0 && p.lru_slots == 64);
}

static void test_usage(void) {
    enum { L = 4, E = 5 };
    uint32_t id = tel_engine_id("glm_moe_dsa");
    uint64_t c[L * E] = {0}, back[(L + 1) * E]; /* room for the wrong-shape probe */
    c[1 * E + 2] = 7, c[3 * E + 4] = 1, c[3 * E + 0] = 123456789012ull;
    size_t len;
    char *txt = tel_usage_format(L, E, id, c, &len), err[200];
    CHECK(tel_usage_parse(txt, len, L, E, id, back, err, sizeof err) == 0 && !memcmp(c, back, sizeof c));
    CHECK(tel_usage_parse(txt, len, L + 1, E, id, back, err, sizeof err) == -1);
    CHECK_HAS(err, "history is for 4 layers x 5 experts, this model has 5 x 5");
    CHECK(tel_usage_parse(txt, len, L, E, id + 1, back, err, sizeof err) == -1);
    CHECK_HAS(err, "engine");
    CHECK(tel_usage_parse(txt, len - 1, L, E, id, back, err, sizeof err) == -1);
    CHECK_HAS(err, "truncated");
    /* cut after a whole record line: no end record */
    char *cut = strstr(txt, "3 0 ");
    CHECK(tel_usage_parse(txt, (size_t)(cut - txt), L, E, id, back, err, sizeof err) == -1);
    CHECK_HAS(err, "truncated");
    for (int i = 0; i < L * E; i++) CHECK(back[i] == 0); /* refused: nothing half-loaded */
    /* counts at their cap: the end record's sum saturates, and what is
     * written can be read back (found by the fuzzer) */
    uint64_t big[L * E] = {0};
    big[0] = big[7] = big[19] = TEL_USAGE_MAX_COUNT;
    char *bt = tel_usage_format(L, E, id, big, &len);
    CHECK(tel_usage_parse(bt, len, L, E, id, back, err, sizeof err) == 0 && !memcmp(big, back, sizeof big));
    free(bt);
    const char *bad[] = {
        "-1 4 5\n-2 1 %u\n1 2 x\n-3 1 7\n",        "-1 4 5\n-2 1 %u\n1 9 7\n-3 1 7\n",  "-1 4 5\n-2 1 %u\n1 2 7\n-3 1 8\n",
        "-1 4 5\n-2 1 %u\n1 2 7\n1 2 7\n-3 2 14\n", "-1 4 5\n-2 1 %u\n1 2 0\n-3 1 0\n", "-1 4 5\n-2 1 %u\n1  2 7\n-3 1 7\n",
        "-2 1 %u\n1 2 7\n-3 1 7\n",                "-1 4 5\n-2 1 %u\n-3 0 0\n1 2 7\n",  "-1 4 5\n-2 1 %u\n-1 4 5\n-3 0 0\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, bad[i], id);
        int rc = tel_usage_parse(buf, strlen(buf), L, E, id, back, err, sizeof err);
        CHECK(rc == -1);
        if (rc == 0) fprintf(stderr, "accepted bad usage file %zu\n", i);
    }
    /* save and load through the file system, atomically */
    char dir[] = "/tmp/colibri-test-tier-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/.coli_usage", dir);
    CHECK(tel_usage_load(path, L, E, id, back, err, sizeof err) == 1);
    CHECK(tel_usage_save(path, L, E, id, c, err, sizeof err) == 0);
    CHECK(tel_usage_load(path, L, E, id, back, err, sizeof err) == 0 && !memcmp(c, back, sizeof c));
    unlink(path);
    rmdir(dir);
    free(txt);
}

static void test_prof(void) {
    tel_stats t;
    tel_start(&t, 1);
    for (int i = 0; i < 1000; i++) tel_lap(&t, (tel_stage)(i % TEL_NSTAGE));
    double sum = 0;
    for (int s = 0; s < TEL_NSTAGE; s++) sum += t.stage[s];
    CHECK(fabs(sum - (t.last - t.t0)) < 1e-9); /* the parts add up to the wall time */
}

int main(void) {
    test_lru();
    test_pins();
    test_vram_admission();
    test_lfru();
    test_budget();
    test_usage();
    test_prof();
    return check_report("test_tier");
}
