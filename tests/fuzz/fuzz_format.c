/* fuzz_format.c — qt_resolve (quant.h): the weight format of an [O, I]
 * tensor detected from its weight and `.qs` scale byte counts, as the
 * engine does for every tensor of a quantized container; then THE
 * quantizer on small shapes.
 *
 * Input: a mode byte, then O, I, weight bytes, scale bytes (8 bytes each,
 * little-endian; missing bytes are 0), then float data. Mode selects how
 * the four numbers are used (so that the fuzzer reaches the accepting
 * paths as well as the edges):
 *   0  as given (any int64 / uint64, negative and huge included)
 *   1  small: O ≤ 4096, I ≤ 65536, counts reduced to real sizes
 *   2  consistent: the counts of format (v2 % 5, group size from v3) for
 *      O and I from the edge table, each nudged by -1, 0 or +1 (or not)
 *   3  every number from the edge table (0, 1, 2^31, 2^40, 2^63, ...)
 * Properties when qt_resolve accepts: O and I in [1, 2^40], a valid format
 * and group size (grouped: multiple of 16 in 16..256, ≤ I; else 0), and
 * the weight and scale byte counts equal qt_weight_bytes and
 * 4·qt_scale_count of that format (non-zero: a count that overflows is
 * never accepted). When it refuses, the reason is non-empty, and a
 * one-byte reason buffer gives the same answer.
 * When accepted with O·I ≤ 4096, the input's floats are quantized with
 * qt_quantize and read back with qt_dequant_row: f32 is bit-exact; integer
 * formats are within half a scale step of each finite input (non-finite
 * ones are counted and read back as 0). */
#include "quant.h"

#include "fuzz_common.h"

static const uint64_t fz_edges[] = {
    0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 192, 255, 256, 257, 4095, 4096,
    65535, 65536, 0x7fffffffull, 0x80000000ull, 0xffffffffull, 0x100000000ull, (1ull << 40) - 1, 1ull << 40,
    (1ull << 40) + 1, 1ull << 42, 1ull << 62, (1ull << 62) + 1, 0x7fffffffffffffffull, 0x8000000000000000ull,
    0xfffffffffffffffcull, 0xfffffffffffffffeull, 0xffffffffffffffffull};
#define FZ_NEDGE (sizeof fz_edges / sizeof *fz_edges)

static void fz_quantize(qt_fmt f, int gs, int64_t O, int64_t I, const uint8_t *p, const uint8_t *end) {
    size_t n = (size_t)(O * I), wb = (size_t)qt_weight_bytes(f, O, I, gs), sc = (size_t)qt_scale_count(f, O, I, gs);
    float *src = (float *)malloc(n * sizeof(float)), *row = (float *)malloc((size_t)I * sizeof(float));
    uint8_t *w = (uint8_t *)malloc(wb);
    float *s = (float *)malloc((sc ? sc : 1) * sizeof(float));
    FUZZ_CHECK(src && row && w && s);
    int64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = 0;
        for (int b = 0; b < 4 && p < end; b++) u |= (uint32_t)*p++ << (8 * b);
        /* mix raw bit patterns with ordinary values */
        if (!(i % 3)) u = (u & 0x807fffffu) | (0x3f000000u + ((u >> 23 & 0xff) % 8) * 0x00800000u);
        memcpy(&src[i], &u, 4);
        bad += !(fabsf(src[i]) <= FLT_MAX);
    }
    FUZZ_CHECK(qt_quantize(src, O, I, f, gs, w, s) == bad);
    qt_tensor W = {f, O, I, w, f == QT_F32 ? NULL : s, gs};
    FUZZ_CHECK(qt_row_bytes(&W) * (size_t)O == wb);
    FUZZ_CHECK((uint64_t)qt_row_scales(&W) * (uint64_t)O == sc);
    const int qmax = f == QT_I8 ? 127 : f == QT_I2 ? 1 : 7;
    for (int64_t o = 0; o < O; o++) {
        qt_dequant_row(&W, o, row);
        for (int64_t i = 0; i < I; i++) {
            float x = src[o * I + i], y = row[i];
            if (f == QT_F32) {
                FUZZ_CHECK(!memcmp(&x, &y, 4));
                continue;
            }
            float scale = s[o * qt_row_scales(&W) + (f == QT_I4G ? i / gs : 0)];
            FUZZ_CHECK(scale >= 1e-8f && scale <= FLT_MAX);
            if (!(fabsf(x) <= FLT_MAX)) {
                FUZZ_CHECK(y == 0);
                continue;
            }
            if (fabsf(x) > 1e30f) continue; /* q·scale may round past FLT_MAX near the top of the range */
            float q = y / scale;
            FUZZ_CHECK(q >= -(float)qmax - 1.5f && q <= (float)qmax + 0.5f);
            FUZZ_CHECK(fabsf(x - y) <= 0.5001f * scale + fabsf(x) * 1e-6f);
        }
    }
    free(src);
    free(row);
    free(w);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    unsigned mode = size ? *p++ : 0;
    uint64_t v[4];
    for (int k = 0; k < 4; k++) v[k] = fuzz_take_u64(&p, end);
    int64_t O, I;
    uint64_t wb, sb;
    switch (mode % 4) {
    case 0:
        O = (int64_t)v[0], I = (int64_t)v[1], wb = v[2], sb = v[3];
        break;
    case 1:
        O = 1 + (int64_t)(v[0] % 4096), I = 1 + (int64_t)(v[1] % 65536), wb = v[2] % (1ull << 28), sb = v[3] % (1ull << 22);
        break;
    case 2: {
        O = (int64_t)((mode >> 2) & 1 ? fz_edges[v[0] % FZ_NEDGE] : 1 + v[0] % 300);
        I = (int64_t)((mode >> 3) & 1 ? fz_edges[v[1] % FZ_NEDGE] : 1 + v[1] % 600);
        qt_fmt f = (qt_fmt)(v[2] % QT_NFMT);
        int nc;
        const int *cand = qt_gs_candidates(&nc);
        int gs = cand[(v[3] >> 8) % (uint64_t)nc];
        wb = qt_weight_bytes(f, O, I, gs);
        sb = f == QT_F32 ? 0 : 4 * qt_scale_count(f, O, I, gs);
        wb += (uint64_t)((int64_t)((v[2] >> 8) % 3) - 1) * ((mode >> 4) & 1);
        sb += (uint64_t)((int64_t)((v[3] >> 16) % 3) - 1) * 4 * ((mode >> 5) & 1);
        break;
    }
    default:
        O = (int64_t)fz_edges[v[0] % FZ_NEDGE], I = (int64_t)fz_edges[v[1] % FZ_NEDGE];
        wb = fz_edges[v[2] % FZ_NEDGE], sb = fz_edges[v[3] % FZ_NEDGE];
        if (mode & 4) O = (int64_t)(0 - (uint64_t)O);
        if (mode & 8) wb *= 4;
        break;
    }

    qt_fmt fmt = (qt_fmt)99;
    int gs = -1;
    char why[256], tiny[1];
    memset(why, 'x', sizeof why);
    int rc = qt_resolve(O, I, wb, sb, &fmt, &gs, why, sizeof why);
    qt_fmt fmt2 = (qt_fmt)99;
    int gs2 = -1;
    tiny[0] = 'x';
    int rc2 = qt_resolve(O, I, wb, sb, &fmt2, &gs2, tiny, sizeof tiny);
    FUZZ_CHECK(rc == rc2 && (rc || (fmt == fmt2 && gs == gs2)));
    if (rc) {
        FUZZ_CHECK(rc == -1 && fuzz_terminated(why, sizeof why) && why[0] && tiny[0] == 0);
        return 0;
    }
    FUZZ_CHECK(O >= 1 && I >= 1 && O <= (INT64_C(1) << 40) && I <= (INT64_C(1) << 40));
    FUZZ_CHECK((unsigned)fmt < QT_NFMT && strcmp(qt_fmt_name(fmt), "?"));
    if (fmt == QT_I4G) FUZZ_CHECK(qt_gs_ok(gs) && gs <= I);
    else FUZZ_CHECK(gs == 0);
    uint64_t want_w = qt_weight_bytes(fmt, O, I, gs), want_s = qt_scale_count(fmt, O, I, gs);
    if (want_w != wb)
        fprintf(stderr, "qt_resolve([%lld, %lld], %llu, %llu) = %s gs %d, but qt_weight_bytes = %llu\n", (long long)O, (long long)I,
                (unsigned long long)wb, (unsigned long long)sb, qt_fmt_name(fmt), gs, (unsigned long long)want_w);
    FUZZ_CHECK(want_w != 0 && want_w == wb);
    if (fmt == QT_F32) FUZZ_CHECK(sb == 0 && want_s == 0);
    else FUZZ_CHECK(want_s != 0 && want_s <= UINT64_MAX / 4 && 4 * want_s == sb);
    if (O <= 4096 && I <= 4096 && O * I <= 4096) fz_quantize(fmt, gs, O, I, p, end);
    return 0;
}
