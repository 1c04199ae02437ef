/* test_kvq.c — kvq.h, the KV cache's rows in 8 and 4 bits: sizes, what a
 * stored row holds (per group: scale absmax/qmax, every value within half
 * a step), zero and non-finite groups, and the dot product and axpy that
 * attention runs on them against double-precision sums over the stored
 * values, for full and short last groups. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "kvq.h"

static uint32_t rs = 12345;
static float frand(void) {
    rs = rs * 1664525u + 1013904223u;
    return (float)((rs >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* The integer of element i in a row of `bits` (the layout kvq.h states),
 * read without kvq_load. */
static int q_of(int bits, const uint8_t *row, int n, int i) {
    const uint8_t *q = row + (size_t)kvq_groups(n) * 4;
    int g = i / 32, j = i % 32;
    if (bits == 8) return ((const int8_t *)q)[g * 32 + j];
    uint8_t b = q[g * 16 + j % 16];
    return (j < 16 ? b & 15 : b >> 4) - 8;
}

static void test_sizes(void) {
    CHECK(kvq_row_bytes(32, 512) == 2048 && kvq_row_bytes(8, 512) == 576 && kvq_row_bytes(4, 512) == 320);
    CHECK(kvq_row_bytes(8, 64) == 72 && kvq_row_bytes(4, 64) == 40); /* GLM-5's rope key */
    CHECK(kvq_row_bytes(8, 16) == 36 && kvq_row_bytes(4, 16) == 20 && kvq_row_bytes(8, 33) == 72 && kvq_row_bytes(4, 1) == 20);
    CHECK(kvq_groups(1) == 1 && kvq_groups(32) == 1 && kvq_groups(33) == 2);
}

/* Each group's scale is absmax/qmax and each value within half a step of
 * the input, in range; kvq_load gives scale·q. */
static void test_store(int bits, int n) {
    float x[600] = {0}, y[600];
    uint8_t row[3000];
    int qmax = bits == 8 ? 127 : 7, bad = 0;
    for (int i = 0; i < n; i++) x[i] = frand() * (1 + i % 7);
    kvq_store(bits, row, x, n);
    kvq_load(bits, row, y, n);
    const float *scale = (const float *)(void *)row;
    for (int g = 0; g < kvq_groups(n); g++) {
        float mx = 0;
        for (int i = g * 32; i < n && i < g * 32 + 32; i++) mx = fmaxf(mx, fabsf(x[i]));
        bad += scale[g] != mx / (float)qmax;
    }
    for (int i = 0; i < n; i++) {
        int q = q_of(bits, row, n, i);
        float s = scale[i / 32];
        bad += q < -qmax || q > qmax || fabs((double)x[i] - (double)s * q) > 0.5001 * s || y[i] != s * (float)q;
    }
    CHECK(bad == 0);
}

/* A zero group stores scale 0 and loads as zeros; a NaN or an infinity
 * makes its group's scale NaN (and only its group's). */
static void test_special(int bits) {
    float x[64] = {0}, y[64];
    uint8_t row[300];
    for (int i = 32; i < 64; i++) x[i] = 0.25f * (float)(i - 40);
    kvq_store(bits, row, x, 64);
    kvq_load(bits, row, y, 64);
    const float *scale = (const float *)(void *)row;
    CHECK(scale[0] == 0 && y[0] == 0 && y[31] == 0 && scale[1] > 0);
    x[3] = NAN;
    kvq_store(bits, row, x, 64);
    CHECK(isnan(scale[0]) && scale[1] > 0 && q_of(bits, row, 64, 3) == 0);
    x[3] = 0, x[40] = INFINITY;
    kvq_store(bits, row, x, 64);
    CHECK(scale[0] == 0 && isnan(scale[1]));
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = 1;
    CHECK(isnan(bits == 8 ? kvq_dot8(a, row, 64) : kvq_dot4(a, row, 64)));
}

/* kvq_dot and kvq_axpy against sums in double over the stored values. */
static void test_dot_axpy(int bits, int n) {
    float x[600] = {0}, a[600] = {0}, y[600] = {0}, y0[600] = {0};
    uint8_t row[3000];
    for (int i = 0; i < n; i++) x[i] = frand(), a[i] = frand() * 3, y0[i] = y[i] = frand();
    kvq_store(bits, row, x, n);
    const float *scale = (const float *)(void *)row;
    double ref = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        double v = (double)scale[i / 32] * q_of(bits, row, n, i);
        ref += a[i] * v, mag += fabs(a[i] * v);
    }
    float d = bits == 8 ? kvq_dot8(a, row, n) : kvq_dot4(a, row, n);
    CHECK(fabs(d - ref) <= 1e-6 * mag + 1e-30);
    float w = 0.37f;
    kvq_axpy(bits, y, w, row, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double want = y0[i] + (double)w * scale[i / 32] * q_of(bits, row, n, i);
        bad += fabs(y[i] - want) > 1e-6 * (fabs(want) + fabs(y0[i]) + 1e-3);
    }
    CHECK(bad == 0);
    /* the dot of a row with itself stays close to the input's square */
    double xx = 0, xq = 0;
    for (int i = 0; i < n; i++) xx += (double)x[i] * x[i];
    xq = bits == 8 ? kvq_dot8(x, row, n) : kvq_dot4(x, row, n);
    CHECK(fabs(xq - xx) <= (bits == 8 ? 0.01 : 0.2) * xx);
}

int main(void) {
    static const int ns[] = {1, 7, 16, 31, 32, 33, 64, 100, 512, 576};
    test_sizes();
    for (int b = 8; b >= 4; b -= 4) {
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            test_store(b, ns[i]);
            test_dot_axpy(b, ns[i]);
        }
        test_special(b);
    }
    return check_report("test_kvq");
}
