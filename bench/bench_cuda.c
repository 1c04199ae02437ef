/* bench_cuda.c — the GPU's decode matmul (backend_cuda.h) against the
 * device's memory bandwidth, in one run:
 *   1. device memory bandwidth: a device-to-device copy of 1 GiB, best of 5,
 *      bytes read plus written per second;
 *   2. y = x·Wᵀ for one activation row (decode) at GLM-5 dense shapes
 *      (q_b 16384×2048, o_proj 6144×16384, lm_head 154880×6144) in int8,
 *      int4, grouped int4 (g64) and int2: GB/s of weight and scale bytes
 *      inside the kernel (CUDA events) and per call as the engine sees it
 *      (activation upload, kernel, result download, synchronisation), each
 *      with its ratio to the copy bandwidth; and 8 rows (a draft batch);
 *   3. absorbed MLA attention of one decode row (cu_mla) at GLM-5's
 *      layer shape (64 heads, kv_b 28672×512 int8, latents of 512 + 64)
 *      over 512 and 2048 keys (2048: the DSA indexer's cap, what decode
 *      reads at any longer context): time per call and per layer pass as
 *      the engine makes it, and kv_b plus the latents read once against
 *      the copy bandwidth.
 * Prints one line per row, or a JSON document with --json. Without a CUDA
 * build or a GPU it says why on one line and exits 0.
 * Build: make build/rel-cuda/bench_cuda
 * Usage: build/rel-cuda/bench_cuda [--json] [--time SEC] */
#include "backend_cuda.h"
#include "kernels.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const char *name;
    int64_t O, I;
} shape;

/* Section 3 (see the header): one JSON object or line per key count.
 * 0, or -1 with err. */
static int bench_mla(int json, double tsec, double copy, char *err, size_t n) {
    const int H = 64, nope = 192, rd = 64, vh = 256, kvl = 512;
    const int64_t O = (int64_t)H * (nope + vh), ctx = 2048;
    const uint64_t wb = qt_weight_bytes(QT_I8, O, kvl, 0), sb = 4 * qt_scale_count(QT_I8, O, kvl, 0);
    uint8_t *w = (uint8_t *)malloc(wb);
    float *s = (float *)malloc(sb), *lat = (float *)malloc((size_t)(ctx * kvl) * 4), *kr = (float *)malloc((size_t)(ctx * rd) * 4),
          *q = (float *)malloc((size_t)H * (nope + rd) * 4), *attn = (float *)malloc((size_t)H * vh * 4);
    int nsel = -1, sel = 0, rc = -1;
    cu_mat *d = NULL;
    cu_kv *c = NULL;
    if (!w || !s || !lat || !kr || !q || !attn) {
        snprintf(err, n, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < wb; i++) w[i] = (uint8_t)(i * 2654435761u >> 13);
    for (uint64_t i = 0; i < sb / 4; i++) s[i] = 1e-3f * (float)(1 + i % 7);
    for (int64_t i = 0; i < ctx * kvl; i++) lat[i] = (float)((i * 40503) % 200) / 100.0f - 1.0f;
    for (int64_t i = 0; i < ctx * rd; i++) kr[i] = (float)((i * 7919) % 200) / 100.0f - 1.0f;
    for (int64_t i = 0; i < (int64_t)H * (nope + rd); i++) q[i] = (float)((i * 104729) % 200) / 400.0f - 0.25f;
    cu_mla_shape sh = {H, nope, rd, vh, kvl, 1, 0.0625f};
    if (!(d = cu_mat_upload(QT_I8, O, kvl, 0, kvl, w, s, err, n)) || !(c = cu_kv_alloc(1, ctx, kvl, rd, 0, 0, err, n)) ||
        cu_kv_write(c, 0, 0, ctx, lat, kr, err, n))
        goto out;
    static const int keys[] = {512, 2048};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        int64_t pos = keys[k] - 1;
        if (cu_mla(c, 0, d, &sh, q, 1, pos, &nsel, &sel, attn, err, n)) goto out; /* warm-up */
        cu_stats a, b;
        cu_stats_get(&a);
        double t0 = now();
        int calls = 0;
        do {
            if (cu_mla(c, 0, d, &sh, q, 1, pos, &nsel, &sel, attn, err, n)) goto out;
            calls++;
        } while (now() - t0 < tsec);
        cu_stats_get(&b);
        double kern = (b.kernel_seconds - a.kernel_seconds) / calls, call = (b.seconds - a.seconds) / calls;
        double bytes = (double)(wb + sb) + (double)keys[k] * (kvl + rd) * 4, kbw = bytes / kern;
        if (json)
            printf("%s{\"keys\": %d, \"heads\": %d, \"mb\": %.2f, \"kernel_us\": %.2f, \"call_us\": %.2f, \"kernel_gbps\": %.1f, \"kernel_vs_copy\": %.3f}",
                   k ? ", " : "", keys[k], H, bytes / 1e6, 1e6 * kern, 1e6 * call, kbw / 1e9, kbw / copy);
        else
            printf("attention %d keys, %d heads: %.2f MB (kv_b + latents once), kernels %8.1f us %7.0f GB/s (%3.0f%% of copy) | per call %8.1f us\n",
                   keys[k], H, bytes / 1e6, 1e6 * kern, kbw / 1e9, 100 * kbw / copy, 1e6 * call);
    }
    rc = 0;
out:
    cu_kv_free(c), cu_mat_free(d);
    free(w), free(s), free(lat), free(kr), free(q), free(attn);
    return rc;
}

int main(int argc, char **argv) {
    int json = 0;
    double tsec = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--time") && i + 1 < argc) tsec = atof(argv[++i]);
        else return fprintf(stderr, "usage: %s [--json] [--time SEC]\n", argv[0]), 2;
    }
    char err[300];
    cu_info info;
    if (cu_init(0, &info, err, sizeof err)) {
        if (json) printf("{\"skipped\": \"%s\"}\n", "no GPU or no CUDA build");
        else printf("bench_cuda: skipped: %s\n", err);
        return 0;
    }
    double copy = 0;
    if (cu_copy_bandwidth((uint64_t)1 << 30, 5, &copy, err, sizeof err)) return fprintf(stderr, "bench_cuda: %s\n", err), 1;
    if (json) printf("{\"device\": \"%s\", \"cc\": \"%d.%d\", \"sms\": %d, \"mem_gb\": %.1f, \"copy_gbps\": %.1f, \"rows\": [", info.name, info.cc_major,
                     info.cc_minor, info.sms, info.mem_total / 1e9, copy / 1e9);
    else printf("device: %s (compute %d.%d, %d SMs, %.1f GB); device-to-device copy %.0f GB/s (read + write)\n", info.name, info.cc_major,
                info.cc_minor, info.sms, info.mem_total / 1e9, copy / 1e9);
    static const shape shapes[] = {{"q_b", 16384, 2048}, {"o_proj", 6144, 16384}, {"lm_head", 154880, 6144}};
    static const qt_fmt fmts[] = {QT_I8, QT_I4, QT_I4G, QT_I2};
    int first = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t fi = 0; fi < sizeof fmts / sizeof *fmts; fi++) {
            const shape sh = shapes[si];
            qt_fmt f = fmts[fi];
            int gs = f == QT_I4G ? 64 : 0;
            uint64_t wb = qt_weight_bytes(f, sh.O, sh.I, gs), sb = 4 * qt_scale_count(f, sh.O, sh.I, gs);
            uint8_t *w = (uint8_t *)malloc(wb);
            float *s = (float *)malloc(sb), *x = (float *)malloc((size_t)(8 * sh.I) * 4), *y = (float *)malloc((size_t)(8 * sh.O) * 4),
                  xs[8];
            int8_t *q = (int8_t *)malloc((size_t)(8 * sh.I));
            int32_t *xg = (int32_t *)malloc((size_t)(sh.I / 16 + 32) * 4);
            if (!w || !s || !x || !y || !q || !xg) return fprintf(stderr, "bench_cuda: out of memory\n"), 1;
            for (uint64_t i = 0; i < wb; i++) w[i] = (uint8_t)(i * 2654435761u >> 13);
            for (uint64_t i = 0; i < sb / 4; i++) s[i] = 1e-3f * (float)(1 + i % 7);
            for (int64_t i = 0; i < 8 * sh.I; i++) x[i] = (float)((i * 40503) % 200) / 100.0f - 1.0f;
            for (int r = 0; r < 8; r++) mm_act_quant(x + r * sh.I, sh.I, f, gs, 0, q + r * sh.I, xs + r, xg);
            cu_mat *d = cu_mat_upload((int)f, sh.O, sh.I, gs, (int64_t)qt_row_bytes_of(f, sh.I), w, s, err, sizeof err);
            if (!d) return fprintf(stderr, "bench_cuda: %s\n", err), 1;
            for (int S = 1; S <= 8; S += 7) {
                cu_stats a, b;
                if (cu_mat_idot(d, q, sh.I, xs, S, y, err, sizeof err)) return fprintf(stderr, "bench_cuda: %s\n", err), 1; /* warm-up */
                cu_stats_get(&a);
                double t0 = now();
                int calls = 0;
                do {
                    if (cu_mat_idot(d, q, sh.I, xs, S, y, err, sizeof err)) return fprintf(stderr, "bench_cuda: %s\n", err), 1;
                    calls++;
                } while (now() - t0 < tsec);
                cu_stats_get(&b);
                double kern = (b.kernel_seconds - a.kernel_seconds) / calls, call = (b.seconds - a.seconds) / calls;
                double kbw = (double)(wb + sb) / kern, cbw = (double)(wb + sb) / call;
                if (json)
                    printf("%s{\"shape\": \"%s\", \"O\": %lld, \"I\": %lld, \"format\": \"%s\", \"rows\": %d, \"weight_mb\": %.2f, \"kernel_us\": %.2f, "
                           "\"call_us\": %.2f, \"kernel_gbps\": %.1f, \"call_gbps\": %.1f, \"kernel_vs_copy\": %.3f, \"call_vs_copy\": %.3f}",
                           first ? "" : ", ", sh.name, (long long)sh.O, (long long)sh.I, qt_fmt_name(f), S, (wb + sb) / 1e6, 1e6 * kern, 1e6 * call,
                           kbw / 1e9, cbw / 1e9, kbw / copy, cbw / copy);
                else
                    printf("%-8s %6lldx%-6lld %-13s S=%d  %7.2f MB  kernel %8.1f us %7.0f GB/s (%3.0f%% of copy) | per call %8.1f us %7.0f GB/s (%3.0f%%)\n",
                           sh.name, (long long)sh.O, (long long)sh.I, qt_fmt_name(f), S, (wb + sb) / 1e6, 1e6 * kern, kbw / 1e9, 100 * kbw / copy,
                           1e6 * call, cbw / 1e9, 100 * cbw / copy);
                first = 0;
            }
            cu_mat_free(d);
            free(w), free(s), free(x), free(y), free(q), free(xg);
        }
    if (json) printf("], \"attention\": [");
    if (bench_mla(json, tsec, copy, err, sizeof err)) return fprintf(stderr, "bench_cuda: %s\n", err), 1;
    if (json) printf("]}\n");
    cu_shutdown();
    return 0;
}
