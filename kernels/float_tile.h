/* kernels/float_tile.h — the float path written once for every vector width:
 * one weight row against up to MM_TILE activation rows, and the transposed
 * product. A translation unit includes it once per vector family with:
 *   MMT_SFX, MMT_TGT      name suffix and target attribute
 *   MMF_V, MMF_W          the f32 vector type and its lanes
 *   MMF_NV                vectors per 16-element block (16 / MMF_W)
 *   MMF_STEP              16-element blocks per loop step (independent
 *                         accumulator chains per activation row)
 *   MMF_ZERO()            a zero vector
 *   MMF_LOAD(p), MMF_STORE(p, v), MMF_SET1(s)
 *   MMF_ADD(a, b), MMF_MUL(a, b), MMF_FMA(a, b, c) = c + a·b (fused)
 *   MMF_DEQ16(f, w, i, sc, v)  v[MMF_NV] = elements [i, i+16) of row w
 *                         dequantized (q·sc; f32 loads as is)
 *   MMF_HSUM16(v)         fixed-order sum of the 16 lanes of v[MMF_NV]
 * Summation order per (row, activation row) is fixed by the family (chains
 * by block position, then MMF_HSUM16, then the scalar tail), so a row's
 * result never depends on S, the tile it lands in or the thread count.
 * The transposed product reproduces the reference bit for bit (mul then
 * add, increasing o). Every step prefetches the weights MM_PF_DIST ahead. */

/* One row o × T activation rows from s0. */
static MM_AI MMT_TGT void MMT_F(mmf_tile)(const mm_args *a, int64_t o, int s0, const qt_fmt f, const int T) {
    const qt_tensor *W = a->W;
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    const uint8_t *w = mm_wrow(W, o);
    const float *sr = mm_srow(W, o);
    const float *x[MM_TILE];
    MMF_V acc[MM_TILE][MMF_STEP][MMF_NV];
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        x[t] = a->x + (size_t)(s0 + t) * (size_t)I;
        for (int b = 0; b < MMF_STEP; b++)
            for (int v = 0; v < MMF_NV; v++) acc[t][b][v] = MMF_ZERO();
    }
    mm_gcursor gc = mm_gcursor_init(sr, gk);
    int64_t k = 0;
    for (; k + MMF_STEP <= n16; k += MMF_STEP) {
        const uint8_t *pf = w + mm_boff(f, 16 * k) + MM_PF_DIST;
        MM_PREFETCH(pf);
        if (f == QT_F32 && MMF_STEP > 1) MM_PREFETCH(pf + 64); /* f32: 64 bytes per block */
        MMF_V wv[MMF_STEP][MMF_NV];
        for (int b = 0; b < MMF_STEP; b++) MMF_DEQ16(f, w, 16 * (k + b), mm_gcursor_next(&gc, f), wv[b]);
        MM_UNROLL
        for (int t = 0; t < T; t++)
            for (int b = 0; b < MMF_STEP; b++)
                for (int v = 0; v < MMF_NV; v++)
                    acc[t][b][v] = MMF_FMA(wv[b][v], MMF_LOAD(x[t] + 16 * (k + b) + MMF_W * v), acc[t][b][v]);
    }
    for (; k < n16; k++) { /* blocks left over from the last step */
        MMF_V wv[MMF_NV];
        MMF_DEQ16(f, w, 16 * k, mm_gcursor_next(&gc, f), wv);
        MM_UNROLL
        for (int t = 0; t < T; t++)
            for (int v = 0; v < MMF_NV; v++) acc[t][0][v] = MMF_FMA(wv[v], MMF_LOAD(x[t] + 16 * k + MMF_W * v), acc[t][0][v]);
    }
    MM_UNROLL
    for (int t = 0; t < T; t++) {
        MMF_V blk[MMF_NV];
        for (int v = 0; v < MMF_NV; v++) {
            blk[v] = acc[t][0][v];
            for (int b = 1; b < MMF_STEP; b++) blk[v] = MMF_ADD(blk[v], acc[t][b][v]);
        }
        a->y[(size_t)(s0 + t) * (size_t)W->O + (size_t)o] = MMF_HSUM16(blk) + mm_ftail(W, w, sr, x[t], 16 * n16, I);
    }
}

static MM_AI MMT_TGT void MMT_F(mmf_rows_f)(const mm_args *a, int64_t o0, int64_t o1, const qt_fmt f) {
    for (int64_t o = o0; o < o1; o++)
        for (int s0 = 0; s0 < a->S; s0 += MM_TILE) switch (a->S - s0) {
            case 1: MMT_F(mmf_tile)(a, o, s0, f, 1); break;
            case 2: MMT_F(mmf_tile)(a, o, s0, f, 2); break;
            case 3: MMT_F(mmf_tile)(a, o, s0, f, 3); break;
            default: MMT_F(mmf_tile)(a, o, s0, f, 4); break;
            }
}

/* Float path of this family for rows [o0, o1). */
static MMT_TGT void MMT_F(mmf_rows)(const mm_args *a, int64_t o0, int64_t o1) {
    switch (a->W->fmt) {
    case QT_F32: MMT_F(mmf_rows_f)(a, o0, o1, QT_F32); break;
    case QT_I8: MMT_F(mmf_rows_f)(a, o0, o1, QT_I8); break;
    case QT_I4: MMT_F(mmf_rows_f)(a, o0, o1, QT_I4); break;
    case QT_I2: MMT_F(mmf_rows_f)(a, o0, o1, QT_I2); break;
    case QT_I4G: MMT_F(mmf_rows_f)(a, o0, o1, QT_I4G); break;
    }
}

static MM_AI MMT_TGT void MMT_F(mmf_mvt_f)(const qt_tensor *W, const float *x, float *y, const qt_fmt f) {
    const int64_t I = W->I, n16 = I / 16, gk = f == QT_I4G ? W->gs / 16 : 0;
    memset(y, 0, (size_t)I * 4);
    for (int64_t o = 0; o < W->O; o++) {
        const uint8_t *w = mm_wrow(W, o);
        const float *sr = mm_srow(W, o);
        const MMF_V av = MMF_SET1(x[o]);
        mm_gcursor gc = mm_gcursor_init(sr, gk);
        for (int64_t k = 0; k < n16; k++) {
            MMF_V wv[MMF_NV];
            MMF_DEQ16(f, w, 16 * k, mm_gcursor_next(&gc, f), wv);
            for (int v = 0; v < MMF_NV; v++) {
                float *yp = y + 16 * k + MMF_W * v;
                MMF_STORE(yp, MMF_ADD(MMF_LOAD(yp), MMF_MUL(av, wv[v])));
            }
        }
        for (int64_t i = 16 * n16; i < I; i++) y[i] = y[i] + x[o] * mm_deq1(W, w, sr, i);
    }
}

/* Transposed product of this family (see mm_matvec_t). */
static MMT_TGT void MMT_F(mmf_mvt)(const qt_tensor *W, const float *x, float *y) {
    switch (W->fmt) {
    case QT_F32: MMT_F(mmf_mvt_f)(W, x, y, QT_F32); break;
    case QT_I8: MMT_F(mmf_mvt_f)(W, x, y, QT_I8); break;
    case QT_I4: MMT_F(mmf_mvt_f)(W, x, y, QT_I4); break;
    case QT_I2: MMT_F(mmf_mvt_f)(W, x, y, QT_I2); break;
    case QT_I4G: MMT_F(mmf_mvt_f)(W, x, y, QT_I4G); break;
    }
}
