/* bench_kv.c — attention's reads of the KV cache in each row format
 * (KV_BITS: kvq.h), on one thread, for GLM-5's shapes.
 *
 *   make build/rel/bench_kv
 *   build/rel/bench_kv [keys] [seconds per format] [kv_lora] [rope]
 * Defaults: 131072 keys (a 128k context: 302 MB of f32 latents and rope
 * keys per layer, past any cache), 1.0 s, GLM-5's (and DeepSeek-V3's)
 * kv_lora 512 and rope 64.
 *
 * What one absorbed head does per layer (forward.h, attn_head_latent):
 * a score per key (the query in latent space · the latent row, plus the
 * rope query · the rope key), a softmax, then the latent rows summed with
 * the weights. Per format: ns per key, the cache bytes read per second
 * (every row twice: scores, then the sum), and the time against f32's. A
 * line per format:
 *   kv 8: 131072 keys | 1.234 ns/key | 12.34 GB/s | 0.42 x f32's time */
#include "../kvq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One head over T keys: scores, softmax, weighted sum into out. */
static int KVL, RD; /* kv_lora, rope: from the command line */

static void head(int bits, const uint8_t *lat, const uint8_t *rope, size_t lrb, size_t rrb, const float *qa, const float *qr, int T, float *score,
                 float *out) {
    float mx = -INFINITY, sum = 0;
    for (int t = 0; t < T; t++) {
        score[t] = (kvq_dot(bits, qa, lat + (size_t)t * lrb, KVL) + kvq_dot(bits, qr, rope + (size_t)t * rrb, RD)) * 0.0625f;
        if (score[t] > mx) mx = score[t];
    }
    for (int t = 0; t < T; t++) sum += score[t] = expf(score[t] - mx);
    for (int t = 0; t < T; t++) score[t] /= sum;
    memset(out, 0, KVL * 4);
    for (int t = 0; t < T; t++) kvq_axpy(bits, out, score[t], lat + (size_t)t * lrb, KVL);
}

int main(int argc, char **argv) {
    int T = argc > 1 ? atoi(argv[1]) : 131072;
    double secs = argc > 2 ? atof(argv[2]) : 1.0;
    KVL = argc > 3 ? atoi(argv[3]) : 512, RD = argc > 4 ? atoi(argv[4]) : 64;
    if (T < 1 || secs <= 0 || KVL < 1 || RD < 1) return fprintf(stderr, "usage: bench_kv [keys] [seconds] [kv_lora] [rope]\n"), 2;
    float *x = malloc((size_t)KVL * 4), *r = malloc((size_t)RD * 4), *qa = malloc(KVL * 4), *qr = malloc(RD * 4);
    float *score = malloc((size_t)T * 4), *out = malloc(KVL * 4);
    uint32_t s = 1;
    for (int i = 0; i < KVL; i++) s = s * 1664525u + 1013904223u, qa[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < RD; i++) s = s * 1664525u + 1013904223u, qr[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    static const int fmts[] = {32, 8, 4};
    double base = 0;
    for (int f = 0; f < 3; f++) {
        int bits = fmts[f];
        size_t lrb = kvq_row_bytes(bits, KVL), rrb = kvq_row_bytes(bits, RD);
        uint8_t *lat = malloc((size_t)T * lrb), *rope = malloc((size_t)T * rrb);
        if (!x || !r || !qa || !qr || !score || !out || !lat || !rope) return fprintf(stderr, "bench_kv: out of memory\n"), 2;
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < KVL; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
            for (int i = 0; i < RD; i++) s = s * 1664525u + 1013904223u, r[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
            kvq_store(bits, lat + (size_t)t * lrb, x, KVL);
            kvq_store(bits, rope + (size_t)t * rrb, r, RD);
        }
        head(bits, lat, rope, lrb, rrb, qa, qr, T, score, out); /* warm */
        int n = 0;
        double t0 = now_s(), dt;
        do {
            head(bits, lat, rope, lrb, rrb, qa, qr, T, score, out);
            n++;
        } while ((dt = now_s() - t0) < secs);
        double per = dt / n;
        if (bits == 32) base = per;
        printf("kv %d: %d keys | %.3f ns/key | %.2f GB/s | %.2f x f32's time | checksum %.6g\n", bits, T, per / T * 1e9,
               (double)T * (2 * lrb + rrb) / per / 1e9, per / base, (double)out[0] + out[KVL - 1]);
        free(lat), free(rope);
    }
    free(x), free(r), free(qa), free(qr), free(score), free(out);
    return 0;
}
