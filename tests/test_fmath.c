/* test_fmath.c — fmath.h against libm's double-precision functions, which
 * round e^x to double well inside the float ulps compared here: fm_expf
 * within 1 ulp over a sweep of every 257th float bit pattern (16.7 million
 * arguments, both signs, normal and subnormal results) and at its edges
 * (overflow, underflow, ±0, ±inf, NaN); fm_silu and fm_sigmoid within 3
 * ulps (1 from the exponential, ½ from each of the add and the divide,
 * which the rounded e^x can double near the result's binade edges) where
 * e^-x is finite, and below 1e-36 in size where it is not. */
#include "fmath.h"

#include "check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* Distance in ulps between finite floats of one sign (or zero): their bit
 * patterns are ordered like their values. */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
    ia = ia < 0 ? (int32_t)(INT32_MIN - ia) : ia; /* negative floats mirrored below zero */
    ib = ib < 0 ? (int32_t)(INT32_MIN - ib) : ib;
    int64_t d = (int64_t)ia - ib;
    return d < 0 ? -d : d;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The worst distance of f from ref over the sweep; prints the argument. */
static int64_t sweep(const char *name, float (*f)(float), double (*ref)(double), float lo, float hi) {
    int64_t worst = 0;
    float at = 0;
    for (uint64_t b = 0; b < ((uint64_t)1 << 32); b += 257) {
        float x = from_bits((uint32_t)b);
        if (!(x >= lo && x <= hi)) continue;
        float want = (float)ref((double)x), got = f(x);
        if (isinf(want) || isinf(got)) {
            if (want != got) worst = INT64_MAX / 2, at = x;
            continue;
        }
        int64_t d = ulps(got, want);
        if (d > worst) worst = d, at = x;
    }
    printf("%s: worst %lld ulp at x = %.9g\n", name, (long long)worst, (double)at);
    return worst;
}

static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static float f_expf(float x) { return fm_expf(x); }
static float f_silu(float x) { return fm_silu(x); }
static float f_sigmoid(float x) { return fm_sigmoid(x); }

int main(void) {
    CHECK(sweep("fm_expf", f_expf, exp, -FLT_MAX, FLT_MAX) <= 1);
    /* below -88.72, e^-x overflows and both give 0 for what is about
     * x·e^x, under 1e-36 in size (as torch's x / (1 + exp(-x)) does) */
    CHECK(sweep("fm_silu", f_silu, ref_silu, -88.7f, FLT_MAX) <= 3);
    CHECK(sweep("fm_sigmoid", f_sigmoid, ref_sigmoid, -88.7f, FLT_MAX) <= 3);
    for (float x = -88.8f; x > -1e6f; x *= 1.5f) CHECK(fabsf(fm_silu(x)) <= 1e-36f && fm_sigmoid(x) <= 1e-36f);

    /* the edges, against the double exp too */
    const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.7228317f, 88.7228394f, 88.72283f, 89.0f, 100.0f,
                          -87.3365479f, -87.3365555f, -100.0f, -103.2789f, -103.9720f, -103.9721f, -104.0f, -200.0f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        float x = edge[i], want = (float)exp((double)x), got = fm_expf(x);
        CHECK(isinf(want) ? got == want : !isinf(got) && ulps(got, want) <= 1);
    }
    CHECK(fm_expf(0.0f) == 1.0f && fm_expf(-0.0f) == 1.0f);
    CHECK(fm_expf(INFINITY) == INFINITY && fm_expf(-INFINITY) == 0.0f);
    CHECK(isnan(fm_expf(NAN)) && isnan(fm_silu(NAN)) && isnan(fm_sigmoid(NAN)));
    CHECK(fm_sigmoid(INFINITY) == 1.0f && fm_sigmoid(-INFINITY) == 0.0f);
    CHECK(fm_silu(INFINITY) == INFINITY && isnan(fm_silu(-INFINITY))); /* -inf / inf, as x / (1 + exp(-x)) in torch */
    return check_report("test_fmath");
}
