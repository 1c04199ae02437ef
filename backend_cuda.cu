/* backend_cuda.cu — the CUDA side of backend_cuda.h: device setup, matrices
 * in device memory, and kernels.h's integer path on the GPU, bit for bit
 * the CPU reference (mm_irows_ref):
 *   per-row formats  y = ((float)D · s[o]) · xs,  D = Σ (code − off)·q exact
 *   grouped int4     L[g mod 16] += (float)D_g · s[o,g] in increasing g,
 *                    then L[j]+=L[j+8], +=L[j+4], +=L[j+2], L0+L1; y = T·xs
 * Integer sums are exact in any order (|D| < 2^31 for I ≤ 2^17); every
 * float step is an explicitly rounded __fmul_rn / __fadd_rn, which nvcc
 * never fuses into an FMA, in the reference's order.
 *
 * One warp per output row; its lanes split the row's bytes (per-row
 * formats) or its groups (grouped int4: a lane per group, the 16 running
 * sums on lanes 0..15, the two halves of each 32 groups added in order),
 * in 16-byte loads where rows (and groups) are 16-byte aligned, else
 * 4-byte words, else bytes, through __dp4a; each load serves up to 8
 * activation rows. A routed expert's SwiGLU and the quantization of its
 * intermediate rows (k_swiglu_quant) follow the CPU's fwd_swiglu and
 * mm_act_quant the same way: fmath.h's fm_silu, whose every step is an
 * __f*_rn intrinsic on the device. */
#include "backend_cuda.h"
#include "fmath.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cu_kv {
    int nl, kvl, rd, nf, id;
    int64_t ctx;
    float *lat, *rope, *ikey; /* [nl][ctx][kvl], [nl][ctx][rd], [nf][ctx][id]: one block */
    uint64_t bytes;
};

struct cu_mat {
    int fmt, gs;
    int64_t O, I, rb, ng; /* rows, inputs, bytes per row, scales per row */
    uint8_t *w;
    float *s;
    uint64_t bytes;
    cudaEvent_t filled; /* the last cu_mat_fill's copy (on G.up) */
    int pending;        /* a fill was queued: matmuls wait for `filled` */
};

/* Pinned staging buffers for cu_mat_fill, used in turn: a fill copies its
 * source into one (after that buffer's previous DMA ended) and the DMA
 * reads from there, so the source is free when the call returns. */
enum { CU_STAGES = 4 };

/* The bound on cu_mla's and cu_index_scores' score buffers: rows go in
 * chunks whose scores fit. */
#define CU_MLA_SCORES ((int64_t)256 << 20)

static struct {
    int on;
    cudaStream_t st, up; /* matmuls; cu_mat_fill's copies */
    uint8_t *stage[CU_STAGES];
    size_t stage_cap[CU_STAGES];
    cudaEvent_t stage_ev[CU_STAGES]; /* the last DMA out of each */
    int stage_next;
    int8_t *q, *hq;
    float *xs, *y, *hg, *hu, *hx; /* hg, hu, hq, hx: cu_experts_rows' intermediate rows (cu_mla's too) */
    size_t qcap, xcap, ycap, hgcap, hucap, hqcap, hxcap; /* bytes */
    float *mq, *mqa, *msc;        /* cu_mla: queries, latent queries then outputs, scores (cu_index_scores: queries, weights, scores) */
    int *mi;                      /* cu_mla: nsel, then sel */
    size_t mqcap, mqacap, msccap, micap;
    cudaEvent_t ev[2];
    cu_stats stats;
} G;

static int cu_fail(char *err, size_t n, const char *what, cudaError_t e) {
    if (err && n) snprintf(err, n, "CUDA: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

static double cu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ------------------------------------------------------------ kernels */

#define FULL 0xffffffffu

__device__ __forceinline__ int32_t warp_sum(int32_t v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* Σ (code − off)·q over the elements of weight word k (4 bytes); q is
 * zero past I, so padding codes add nothing. */
template <int F>
__device__ __forceinline__ int32_t dot_word(uint32_t ww, const int8_t *__restrict__ qs, int64_t k) {
    const int ones = 0x01010101;
    if (F == CU_I8) return __dp4a((int)ww, *(const int *)(qs + 4 * k), 0);
    if (F == CU_I2) {
        int4 qq = *(const int4 *)(qs + 16 * k); /* element 4b+j: byte j of component b */
        int32_t d = 0, sum = __dp4a(ones, qq.x, 0) + __dp4a(ones, qq.y, 0) + __dp4a(ones, qq.z, 0) + __dp4a(ones, qq.w, 0);
        for (int j = 0; j < 4; j++) {
            unsigned sel = (unsigned)j | (unsigned)(4 + j) << 4;
            int lo = (int)__byte_perm(qq.x, qq.y, sel), hi = (int)__byte_perm(qq.z, qq.w, sel);
            d = __dp4a((int)((ww >> (2 * j)) & 0x03030303u), (int)__byte_perm(lo, hi, 0x5410), d);
        }
        return d - 2 * sum;
    }
    int2 qq = *(const int2 *)(qs + 8 * k); /* int4: element 2b low nibble, 2b+1 high */
    int even = (int)__byte_perm(qq.x, qq.y, 0x6420), odd = (int)__byte_perm(qq.x, qq.y, 0x7531);
    int32_t d = __dp4a((int)(ww & 0x0F0F0F0Fu), even, 0);
    d = __dp4a((int)((ww >> 4) & 0x0F0F0F0Fu), odd, d);
    return d - 8 * (__dp4a(ones, qq.x, 0) + __dp4a(ones, qq.y, 0));
}

template <int F>
__device__ __forceinline__ int32_t dot_byte(uint32_t b, const int8_t *__restrict__ qs, int64_t k) {
    if (F == CU_I8) return (int32_t)(int8_t)b * qs[k];
    if (F == CU_I2) {
        int32_t d = 0;
        for (int j = 0; j < 4; j++) d += ((int32_t)(b >> (2 * j) & 3u) - 2) * qs[4 * k + j];
        return d;
    }
    return ((int32_t)(b & 15u) - 8) * qs[2 * k] + ((int32_t)(b >> 4) - 8) * qs[2 * k + 1];
}

#define SB 8 /* activation rows per pass over the weights */

/* What blockIdx.y advances a kernel's pointers by (in elements): matrix
 * rows' weights and scales, activation rows and their scales, outputs.
 * All zero for one matrix; cu_mla's W_UV takes every head in one launch. */
struct cu_steps {
    int64_t w, s, q, x, y;
};

/* Σ (code − off)·q of row s over the weight bytes [b, b + V) held in u
 * (V = 16: four words; 4: one word; 1: one byte). */
template <int F, int V>
__device__ __forceinline__ int32_t dot_chunk(const uint4 &u, const int8_t *__restrict__ qs, int64_t b) {
    if (V == 16)
        return dot_word<F>(u.x, qs, b >> 2) + dot_word<F>(u.y, qs, (b >> 2) + 1) + dot_word<F>(u.z, qs, (b >> 2) + 2) +
               dot_word<F>(u.w, qs, (b >> 2) + 3);
    if (V == 4) return dot_word<F>(u.x, qs, b >> 2);
    return dot_byte<F>(u.x, qs, b);
}

template <int V>
__device__ __forceinline__ uint4 load_chunk(const uint8_t *__restrict__ w, int64_t b) {
    if (V == 16) return *(const uint4 *)(w + b);
    uint4 u = {0, 0, 0, 0};
    u.x = V == 4 ? *(const uint32_t *)(w + b) : (uint32_t)w[b];
    return u;
}

/* Per-row formats: a warp per output row, lanes over V-byte chunks, each
 * chunk loaded once for up to SB activation rows. */
template <int F, int V>
__global__ void k_rows(const uint8_t *__restrict__ W, const float *__restrict__ Sc, int64_t O, int64_t rb, const int8_t *__restrict__ q,
                       int64_t ldq, const float *__restrict__ xs, int S, float *__restrict__ y, cu_steps st) {
    W += blockIdx.y * st.w, Sc += blockIdx.y * st.s, q += blockIdx.y * st.q, xs += blockIdx.y * st.x, y += blockIdx.y * st.y;
    const int64_t o = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (o >= O) return; /* a whole warp */
    const uint8_t *w = W + o * rb;
    for (int s0 = 0; s0 < S; s0 += SB) {
        const int ns = S - s0 < SB ? S - s0 : SB;
        int32_t d[SB];
#pragma unroll
        for (int j = 0; j < SB; j++) d[j] = 0;
        for (int64_t b = (int64_t)lane * V; b < rb; b += 32 * V) {
            const uint4 u = load_chunk<V>(w, b);
#pragma unroll
            for (int j = 0; j < SB; j++)
                if (j < ns) d[j] += dot_chunk<F, V>(u, q + (int64_t)(s0 + j) * ldq, b);
        }
#pragma unroll
        for (int j = 0; j < SB; j++) {
            if (j >= ns) break;
            const int32_t t = warp_sum(d[j]);
            if (lane == 0) y[(int64_t)(s0 + j) * O + o] = __fmul_rn(__fmul_rn((float)t, Sc[o]), xs[s0 + j]);
        }
    }
}

/* Grouped int4: a warp per output row, a lane per group (32 groups a
 * pass), lanes 0..15 the running sums of groups ≡ lane mod 16, for up to
 * SB activation rows per pass over the weights. */
template <int V>
__global__ void k_groups(const uint8_t *__restrict__ W, const float *__restrict__ Sc, int64_t O, int64_t rb, int gs, int64_t ng,
                         const int8_t *__restrict__ q, int64_t ldq, const float *__restrict__ xs, int S, float *__restrict__ y, cu_steps st) {
    W += blockIdx.y * st.w, Sc += blockIdx.y * st.s, q += blockIdx.y * st.q, xs += blockIdx.y * st.x, y += blockIdx.y * st.y;
    const int64_t o = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (o >= O) return;
    const uint8_t *w = W + o * rb;
    const float *sr = Sc + o * ng;
    const int64_t gb = gs / 2; /* bytes per group */
    for (int s0 = 0; s0 < S; s0 += SB) {
        const int ns = S - s0 < SB ? S - s0 : SB;
        float L[SB];
#pragma unroll
        for (int j = 0; j < SB; j++) L[j] = 0.0f;
        for (int64_t g0 = 0; g0 < ng; g0 += 32) {
            const int64_t g = g0 + lane;
            int32_t d[SB];
#pragma unroll
            for (int j = 0; j < SB; j++) d[j] = 0;
            if (g < ng) {
                const int64_t b0 = g * gb, b1 = b0 + gb < rb ? b0 + gb : rb;
                for (int64_t b = b0; b < b1; b += V) {
                    const uint4 u = load_chunk<V>(w, b);
#pragma unroll
                    for (int j = 0; j < SB; j++)
                        if (j < ns) d[j] += dot_chunk<CU_I4, V>(u, q + (int64_t)(s0 + j) * ldq, b);
                }
            }
            const float sg = g < ng ? sr[g] : 0.0f;
#pragma unroll
            for (int j = 0; j < SB; j++) {
                if (j >= ns) break;
                const float P = __fmul_rn((float)d[j], sg), P2 = __shfl_down_sync(FULL, P, 16);
                if (lane < 16) {
                    if (g < ng) L[j] = __fadd_rn(L[j], P);
                    if (g + 16 < ng) L[j] = __fadd_rn(L[j], P2);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < SB; j++) {
            if (j >= ns) break;
            float t = L[j];
            t = __fadd_rn(t, __shfl_down_sync(FULL, t, 8));
            t = __fadd_rn(t, __shfl_down_sync(FULL, t, 4));
            t = __fadd_rn(t, __shfl_down_sync(FULL, t, 2));
            t = __fadd_rn(t, __shfl_down_sync(FULL, t, 1));
            if (lane == 0) y[(int64_t)(s0 + j) * O + o] = __fmul_rn(t, xs[s0 + j]);
        }
    }
}

/* The largest of the block's mb (|value| bit patterns, which order like
 * the values): a max, exact in any order. Every thread gets it. */
__device__ unsigned block_max_bits(unsigned mb) {
    __shared__ unsigned all;
    if (threadIdx.x == 0) all = 0;
    __syncthreads();
    for (int o = 16; o; o >>= 1) {
        const unsigned t = __shfl_xor_sync(FULL, mb, o);
        mb = t > mb ? t : mb;
    }
    if ((threadIdx.x & 31) == 0) atomicMax(&all, mb);
    __syncthreads();
    return all;
}

/* One activation row h[I] (global memory, written by this block before
 * block_max_bits' barrier) quantized as mm_act_quant does in natural
 * order, from mb, the largest |h| bit pattern: xs = absmax/127 and q =
 * rne(h·(127/absmax)) clamped to ±127, zero past I up to ldq; q = 0 with
 * xs 0 (absmax below 1e-30) or NaN (a value not finite). */
__device__ void block_act_quant(const float *h, int64_t I, unsigned mb, int8_t *q, int64_t ldq, float *xs) {
    const float amax = __uint_as_float(mb);
    const bool zero = mb >= 0x7F800000u || !(amax >= 1e-30f);
    const float inv = zero ? 0.0f : __fdiv_rn(127.0f, amax);
    for (int64_t i = threadIdx.x; i < ldq; i += blockDim.x) {
        float r = i < I && !zero ? rintf(__fmul_rn(h[i], inv)) : 0.0f; /* rintf: to nearest, ties to even, as qt_rne */
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        q[i] = (int8_t)(int)r;
    }
    if (threadIdx.x == 0) *xs = mb >= 0x7F800000u ? __uint_as_float(0x7FC00000u) : zero ? 0.0f : __fdiv_rn(amax, 127.0f);
}

/* SwiGLU and the activation quantization of one intermediate row per
 * block, as the CPU's fwd_swiglu then mm_act_quant do: h = fm_silu(g)·u
 * into g, then block_act_quant. */
__global__ void k_swiglu_quant(float *__restrict__ g, const float *__restrict__ u, int64_t I, int8_t *__restrict__ q, int64_t ldq,
                               float *__restrict__ xs) {
    float *gr = g + (int64_t)blockIdx.x * I;
    const float *ur = u + (int64_t)blockIdx.x * I;
    unsigned mb = 0;
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
        const float h = __fmul_rn(fm_silu(gr[i]), ur[i]);
        const unsigned b = __float_as_uint(h) & 0x7FFFFFFFu;
        gr[i] = h, mb = b > mb ? b : mb;
    }
    block_act_quant(gr, I, block_max_bits(mb), q + (int64_t)blockIdx.x * ldq, ldq, xs + blockIdx.x);
}

/* ------------------------------------------------------------ attention
 * cu_mla's steps, one (row s, head h) pair b = h·S + s per block (the
 * CPU's order of the latent rows), each float step rounded alone as the
 * CPU's code does it. */

/* Element j of row r of an integer matrix as mm_deq1: (float)code·scale. */
__device__ __forceinline__ float deq1(int fmt, const uint8_t *__restrict__ w, const float *__restrict__ sc, int64_t rb, int64_t ng, int gs, int64_t r,
                                      int64_t j) {
    const uint8_t *row = w + r * rb;
    int v;
    if (fmt == CU_I8) v = (int8_t)row[j];
    else if (fmt == CU_I2) v = (int)((row[j >> 2] >> ((j & 3) * 2)) & 3u) - 2;
    else v = (int)((row[j >> 1] >> ((j & 1) * 4)) & 15u) - 8;
    return __fmul_rn((float)v, sc[r * ng + (fmt == CU_I4G ? j / gs : 0)]);
}

/* The query pulled into the latent space, as mm_matvec_t: qa[b][j] = Σ_o
 * x[o]·deq(kv_b[h·kvw + o][j]) in increasing o, y + x·deq each step. */
__global__ void k_mla_qa(const uint8_t *__restrict__ W, const float *__restrict__ Sc, int fmt, int64_t rb, int64_t ng, int gs,
                         const float *__restrict__ q, int S, int H, int nope, int qk, int kvw, int kvl, float *__restrict__ qa) {
    const int b = blockIdx.x, s = b % S, h = b / S;
    const float *x = q + ((int64_t)s * H + h) * qk;
    for (int j = threadIdx.x; j < kvl; j += blockDim.x) {
        float y = 0.0f;
        for (int o = 0; o < nope; o++) y = __fadd_rn(y, __fmul_rn(x[o], deq1(fmt, W, Sc, rb, ng, gs, (int64_t)h * kvw + o, j)));
        qa[(int64_t)b * kvl + j] = y;
    }
}

/* kernels.h's mm_dot_f32: 16 running sums (lane i mod 16), the tail into
 * lane 0, then pairwise (j + 8, + 4, + 2, + 1). */
__device__ __forceinline__ float dot16(const float *__restrict__ a, const float *__restrict__ b, int n) {
    float s[16];
#pragma unroll
    for (int j = 0; j < 16; j++) s[j] = 0.0f;
    int i = 0;
    for (; i + 16 <= n; i += 16)
#pragma unroll
        for (int j = 0; j < 16; j++) s[j] = __fadd_rn(s[j], __fmul_rn(a[i + j], b[i + j]));
    for (; i < n; i++) s[0] = __fadd_rn(s[0], __fmul_rn(a[i], b[i]));
#pragma unroll
    for (int w = 8; w > 0; w >>= 1)
#pragma unroll
        for (int j = 0; j < w; j++) s[j] = __fadd_rn(s[j], s[j + w]);
    return s[0];
}

/* The keys of row s that it attends to: every causal one (nsel < 0) or
 * the indexer's. */
__device__ __forceinline__ int64_t mla_keys(const int *__restrict__ nsel, int s, int64_t pos) { return nsel[s] < 0 ? pos + s + 1 : nsel[s]; }

/* One score per thread and step: blockIdx.x = b, keys i from blockIdx.y's
 * chunk on, gridDim.y chunks apart (y is at most 65535):
 * (dot(qa, lat[t]) + dot(q_rope, rope[t]))·scale into score[b][i]. */
__global__ void k_mla_scores(const float *__restrict__ qa, const float *__restrict__ q, const float *__restrict__ lat, const float *__restrict__ kr,
                             const int *__restrict__ nsel, const int *__restrict__ sel, int sel_stride, int S, int H, int nope, int qk, int kvl, int rd,
                             int64_t pos, float scale, int64_t ldsc, float *__restrict__ score) {
    const int b = blockIdx.x, s = b % S, h = b / S;
    const int64_t nk = mla_keys(nsel, s, pos);
    const float *qs = q + ((int64_t)s * H + h) * qk;
    for (int64_t i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; i < nk; i += (int64_t)gridDim.y * blockDim.x) {
        const int64_t t = nsel[s] < 0 ? i : sel[(int64_t)s * sel_stride + i];
        score[(int64_t)b * ldsc + i] = __fmul_rn(__fadd_rn(dot16(qa + (int64_t)b * kvl, lat + t * kvl, kvl), dot16(qs + nope, kr + t * rd, rd)), scale);
    }
}

/* The largest of the block's v under a > b ? a : b (NaN never wins). */
__device__ float block_max_f(float v) {
    __shared__ float part[32];
    for (int o = 16; o; o >>= 1) {
        const float t = __shfl_xor_sync(FULL, v, o);
        v = t > v ? t : v;
    }
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) v = part[w] > v ? part[w] : v;
    __syncthreads(); /* part is free for the next call */
    return v;
}

/* Softmax of row b's scores as forward.h's softmax (max as its loop
 * finds it, e = fm_expf(x − max), their sum in increasing i by one thread,
 * e·(1/sum)), then the weighted latent o[j] = Σ_i p_i·lat[t_i][j] in
 * increasing i (mm_axpy_f32), into o[b], quantized into hq[b], hx[b]. */
__global__ void k_mla_softmax(float *__restrict__ score, int64_t ldsc, const int *__restrict__ nsel, const int *__restrict__ sel, int sel_stride, int S,
                              int64_t pos, const float *__restrict__ lat, int kvl, float *__restrict__ o, int8_t *__restrict__ hq, int64_t ldh,
                              float *__restrict__ hx) {
    __shared__ float inv_all;
    const int b = blockIdx.x, s = b % S;
    const int64_t nk = mla_keys(nsel, s, pos);
    const int *ks = nsel[s] < 0 ? NULL : sel + (int64_t)s * sel_stride;
    float *x = score + (int64_t)b * ldsc;
    const float x0 = x[0]; /* read before the barriers of block_max_f: thread 0 then overwrites it */
    float m = -INFINITY;   /* the loop's mx = x[0], replaced by every later x[i] > mx */
    for (int64_t i = 1 + threadIdx.x; i < nk; i += blockDim.x) m = x[i] > m ? x[i] : m;
    m = block_max_f(m);
    const float mx = x0 != x0 ? x0 : m > x0 ? m : x0;
    for (int64_t i = threadIdx.x; i < nk; i += blockDim.x) x[i] = fm_expf(__fsub_rn(x[i], mx));
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.0f;
#pragma unroll 8
        for (int64_t i = 0; i < nk; i++) sum = __fadd_rn(sum, x[i]);
        inv_all = __fdiv_rn(1.0f, sum);
    }
    __syncthreads();
    const float inv = inv_all;
    for (int64_t i = threadIdx.x; i < nk; i += blockDim.x) x[i] = __fmul_rn(x[i], inv);
    __syncthreads();
    float *ob = o + (int64_t)b * kvl;
    unsigned mb = 0;
    for (int j = threadIdx.x; j < kvl; j += blockDim.x) {
        float acc = 0.0f;
        for (int64_t i = 0; i < nk; i++) acc = __fadd_rn(acc, __fmul_rn(x[i], lat[(ks ? ks[i] : i) * (int64_t)kvl + j]));
        const unsigned u = __float_as_uint(acc) & 0x7FFFFFFFu;
        ob[j] = acc, mb = u > mb ? u : mb;
    }
    block_act_quant(ob, kvl, block_max_bits(mb), hq + (int64_t)b * ldh, ldh, hx + b);
}

/* The DSA indexer's scores, one thread a key and step (blockIdx.x = row
 * s, keys from blockIdx.y's chunk on, gridDim.y chunks apart), as
 * fwd_index_scores: acc + w[h]·relu(dot(q_h, key)·sscale) over heads in
 * increasing order, relu as d > 0 ? d : 0. */
__global__ void k_index_scores(const float *__restrict__ qi, const float *__restrict__ w, const float *__restrict__ keys, int ih, int id, int64_t pos,
                               float sscale, int64_t ldsc, float *__restrict__ score) {
    const int s = blockIdx.x;
    const float *qs = qi + (int64_t)s * ih * id, *ws = w + (int64_t)s * ih;
    for (int64_t t = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; t <= pos + s; t += (int64_t)gridDim.y * blockDim.x) {
        float acc = 0.0f;
        for (int h = 0; h < ih; h++) {
            const float d = __fmul_rn(dot16(qs + (int64_t)h * id, keys + t * id, id), sscale);
            acc = __fadd_rn(acc, __fmul_rn(ws[h], d > 0.0f ? d : 0.0f));
        }
        score[(int64_t)s * ldsc + t] = acc;
    }
}

/* y[h][s][v] (W_UV's output per head) → attn[s][h][v]. */
__global__ void k_mla_permute(const float *__restrict__ y, int S, int H, int vh, float *__restrict__ attn) {
    const int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (int64_t)S * H * vh) return;
    const int64_t v = k % vh, hs = k / vh, s = hs % S, h = hs / S;
    attn[(s * H + h) * vh + v] = y[k];
}

/* ------------------------------------------------------------ the ABI */

extern "C" int cu_init(int device, cu_info *info, char *err, size_t n) {
    if (G.on) cu_shutdown();
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return snprintf(err, n, "no usable NVIDIA GPU or driver (%s)", cudaGetErrorString(e)), -1;
    if (count < 1) return snprintf(err, n, "no NVIDIA GPU found"), -1;
    if (device < 0 || device >= count) return snprintf(err, n, "device %d asked for, but %d found (0..%d)", device, count, count - 1), -1;
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess) return cu_fail(err, n, "reading the device's properties", e);
    if (p.major * 10 + p.minor < 75)
        return snprintf(err, n, "%s has compute capability %d.%d; colibri's kernels need 7.5 or newer", p.name, p.major, p.minor), -1;
    if ((e = cudaSetDevice(device)) != cudaSuccess) return cu_fail(err, n, "selecting the device", e);
    if ((e = cudaStreamCreateWithFlags(&G.st, cudaStreamNonBlocking)) != cudaSuccess) return cu_fail(err, n, "creating a stream", e);
    if ((e = cudaStreamCreateWithFlags(&G.up, cudaStreamNonBlocking)) != cudaSuccess)
        return cudaStreamDestroy(G.st), cu_fail(err, n, "creating a stream", e);
    size_t fr = 0, tot = 0;
    if ((e = cudaMemGetInfo(&fr, &tot)) != cudaSuccess) return cudaStreamDestroy(G.st), cudaStreamDestroy(G.up), cu_fail(err, n, "reading free memory", e);
    if ((e = cudaEventCreate(&G.ev[0])) != cudaSuccess || (e = cudaEventCreate(&G.ev[1])) != cudaSuccess)
        return cudaStreamDestroy(G.st), cudaStreamDestroy(G.up), cu_fail(err, n, "creating events", e);
    for (int k = 0; k < CU_STAGES; k++)
        if ((e = cudaEventCreateWithFlags(&G.stage_ev[k], cudaEventDisableTiming)) != cudaSuccess) {
            for (int j = 0; j < k; j++) cudaEventDestroy(G.stage_ev[j]);
            cudaEventDestroy(G.ev[0]), cudaEventDestroy(G.ev[1]);
            return cudaStreamDestroy(G.st), cudaStreamDestroy(G.up), cu_fail(err, n, "creating events", e);
        }
    memset(&G.stats, 0, sizeof G.stats);
    G.on = 1;
    if (info) {
        memset(info, 0, sizeof *info);
        snprintf(info->name, sizeof info->name, "%.127s", p.name);
        info->device = device, info->cc_major = p.major, info->cc_minor = p.minor, info->sms = p.multiProcessorCount;
        info->mem_total = tot, info->mem_free = fr;
    }
    return 0;
}

extern "C" void cu_shutdown(void) {
    if (!G.on) return;
    cudaStreamSynchronize(G.up); /* no DMA still reads a staging buffer */
    for (int k = 0; k < CU_STAGES; k++) cudaFreeHost(G.stage[k]), cudaEventDestroy(G.stage_ev[k]);
    cudaFree(G.q), cudaFree(G.xs), cudaFree(G.y), cudaFree(G.hg), cudaFree(G.hu), cudaFree(G.hq), cudaFree(G.hx);
    cudaFree(G.mq), cudaFree(G.mqa), cudaFree(G.msc), cudaFree(G.mi);
    cudaEventDestroy(G.ev[0]), cudaEventDestroy(G.ev[1]);
    cudaStreamDestroy(G.st), cudaStreamDestroy(G.up);
    memset(&G, 0, sizeof G);
}

extern "C" cu_mat *cu_mat_alloc(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), (cu_mat *)NULL;
    const int64_t epb = fmt == CU_I8 ? 1 : fmt == CU_I2 ? 4 : 2; /* elements per byte */
    if (fmt < CU_I8 || fmt > CU_I4G || O < 1 || I < 1 || I > (INT64_C(1) << 17) || row_bytes != (I + epb - 1) / epb ||
        (fmt == CU_I4G && (gs < 16 || gs > 256 || gs % 16)))
        return snprintf(err, n, "CUDA: cannot hold a matrix of format %d, %lld x %lld, group size %d", fmt, (long long)O, (long long)I, gs),
               (cu_mat *)NULL;
    cu_mat *m = (cu_mat *)calloc(1, sizeof *m);
    if (!m) return snprintf(err, n, "out of memory"), (cu_mat *)NULL;
    m->fmt = fmt, m->gs = gs, m->O = O, m->I = I, m->rb = row_bytes, m->ng = fmt == CU_I4G ? (I + gs - 1) / gs : 1;
    /* one block, weights (16 bytes of slack for the widest loads) then
     * scales: large blocks are taken in 2 MiB pages, one rounding not two */
    size_t wb = (size_t)(O * row_bytes), sb = (size_t)(O * m->ng) * sizeof(float), soff = (wb + 16 + 255) / 256 * 256;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&m->w, soff + sb)) != cudaSuccess || (e = cudaEventCreateWithFlags(&m->filled, cudaEventDisableTiming)) != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory stop (the expert tier fills until one) is not a later launch's error */
        cu_fail(err, n, "allocating a matrix", e);
        cudaFree(m->w), free(m);
        return NULL;
    }
    m->s = (float *)(void *)(m->w + soff);
    m->bytes = wb + sb;
    G.stats.weight_bytes += m->bytes;
    return m;
}

/* The source goes into the next pinned staging buffer (the host waits
 * for that buffer's previous DMA, CU_STAGES fills ago), then to the device
 * on G.up: w and s are free on return while the DMA runs. No matmul reads
 * m at that moment (cu_mats_idot returns only after its stream drained),
 * and the next one waits for `filled` on the device. */
extern "C" int cu_mat_fill(cu_mat *m, const void *w, const float *s, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!m || !w || !s) return snprintf(err, n, "CUDA: filling a matrix: no matrix or no source"), -1;
    size_t sb = (size_t)(m->O * m->ng) * sizeof(float), wb = (size_t)m->bytes - sb, soff = (wb + 15) / 16 * 16;
    int k = G.stage_next;
    G.stage_next = (k + 1) % CU_STAGES;
    cudaError_t e;
    if ((e = cudaEventSynchronize(G.stage_ev[k])) != cudaSuccess) return cu_fail(err, n, "waiting for a staging buffer", e);
    if (soff + sb > G.stage_cap[k]) {
        cudaFreeHost(G.stage[k]);
        G.stage[k] = NULL, G.stage_cap[k] = 0;
        if ((e = cudaHostAlloc((void **)&G.stage[k], soff + sb, cudaHostAllocDefault)) != cudaSuccess)
            return G.stage[k] = NULL, cu_fail(err, n, "allocating a staging buffer", e);
        G.stage_cap[k] = soff + sb;
    }
    memcpy(G.stage[k], w, wb), memcpy(G.stage[k] + soff, s, sb);
    m->pending = 1; /* before anything is queued: cu_mat_free waits for whatever was */
    if ((e = cudaMemcpyAsync(m->w, G.stage[k], wb, cudaMemcpyHostToDevice, G.up)) != cudaSuccess ||
        (e = cudaMemcpyAsync(m->s, G.stage[k] + soff, sb, cudaMemcpyHostToDevice, G.up)) != cudaSuccess ||
        (e = cudaEventRecord(G.stage_ev[k], G.up)) != cudaSuccess || (e = cudaEventRecord(m->filled, G.up)) != cudaSuccess)
        return cu_fail(err, n, "filling a matrix", e);
    G.stats.fills++, G.stats.fill_bytes += m->bytes;
    return 0;
}

extern "C" cu_mat *cu_mat_upload(int fmt, int64_t O, int64_t I, int gs, int64_t row_bytes, const void *w, const float *s, char *err,
                                 size_t n) {
    if (G.on && (!w || !s)) return snprintf(err, n, "CUDA: uploading a matrix: no source"), (cu_mat *)NULL;
    cu_mat *m = cu_mat_alloc(fmt, O, I, gs, row_bytes, err, n);
    if (!m) return NULL;
    size_t sb = (size_t)(O * m->ng) * sizeof(float), wb = (size_t)m->bytes - sb;
    cudaError_t e;
    if ((e = cudaMemcpy(m->w, w, wb, cudaMemcpyHostToDevice)) != cudaSuccess || (e = cudaMemcpy(m->s, s, sb, cudaMemcpyHostToDevice)) != cudaSuccess) {
        cu_fail(err, n, "uploading a matrix", e);
        cu_mat_free(m);
        return NULL;
    }
    return m;
}

extern "C" void cu_mat_free(cu_mat *m) {
    if (!m) return;
    if (G.on) {
        if (m->pending) cudaEventSynchronize(m->filled); /* no copy lands in freed memory */
        cudaEventDestroy(m->filled);
        cudaFree(m->w); /* the scales too: one block */
        G.stats.weight_bytes -= m->bytes;
    }
    free(m);
}

/* A call's wall time since t0, and its kernels' (between G.ev[0] and
 * G.ev[1], which the synchronised stream has passed), into the stats. */
static void cu_timed(double t0) {
    G.stats.seconds += cu_now() - t0;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, G.ev[0], G.ev[1]) == cudaSuccess) G.stats.kernel_seconds += 1e-3 * ms;
}

/* Grows device buffer *p to at least need bytes. */
static cudaError_t cu_grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return cudaSuccess;
    cudaFree(*p);
    *p = NULL, *cap = 0;
    cudaError_t e = cudaMalloc(p, need);
    if (e == cudaSuccess) *cap = need;
    else cudaGetLastError(); /* reported here; not left for a later launch check to find */
    return e;
}

/* Queues the R activation rows q[R][ldq] (I values each) into G.q, rows
 * ldd apart and zero past I, and their scales into G.xs (both grown). */
static cudaError_t cu_rows_up(const int8_t *q, int64_t ldq, int64_t I, const float *xs, int R, int64_t ldd) {
    cudaError_t e;
    if ((e = cudaMemsetAsync(G.q, 0, (size_t)(R * ldd), G.st)) != cudaSuccess ||
        (e = cudaMemcpy2DAsync(G.q, (size_t)ldd, q, (size_t)ldq, (size_t)I, (size_t)R, cudaMemcpyHostToDevice, G.st)) != cudaSuccess)
        return e;
    return cudaMemcpyAsync(G.xs, xs, (size_t)R * 4, cudaMemcpyHostToDevice, G.st);
}

/* Padded row width of the activations for m: a multiple of 64, at least
 * its row's elements, so the widest loads stay inside zeroed bytes. */
static int64_t cu_act_width(const cu_mat *m) {
    const int64_t epb = m->fmt == CU_I8 ? 1 : m->fmt == CU_I2 ? 4 : 2;
    return (m->rb * epb + 63) / 64 * 64;
}

/* Launches the kernel of m's format over S rows q[S][ldd] (device) with
 * scales xs into y[S][O]: O rows of m from row r0 on; nb times (blockIdx.y)
 * with pointers advanced by st (cu_mla's heads), else once. */
static void cu_launch_rows(const cu_mat *m, int64_t r0, int64_t O, int nb, cu_steps st, const int8_t *q, int64_t ldd, const float *xs, int S, float *y) {
    const int warps = 8;
    const dim3 grid((unsigned)((O + warps - 1) / warps), (unsigned)nb);
    const uint8_t *w = m->w + r0 * m->rb;
    const float *sc = m->s + r0 * m->ng;
    /* widest loads the row (and, grouped, the group) alignment allows */
    const int64_t gb = m->fmt == CU_I4G ? m->gs / 2 : 16;
    const int v = m->rb % 16 == 0 && gb % 16 == 0 ? 16 : m->rb % 4 == 0 ? 4 : 1;
#define LAUNCH(K, ...)                                                                                                  \
    do {                                                                                                               \
        if (v == 16) K<__VA_ARGS__ 16><<<grid, 32 * warps, 0, G.st>>>(ARGS);                                           \
        else if (v == 4) K<__VA_ARGS__ 4><<<grid, 32 * warps, 0, G.st>>>(ARGS);                                        \
        else K<__VA_ARGS__ 1><<<grid, 32 * warps, 0, G.st>>>(ARGS);                                                    \
    } while (0)
#define ARGS w, sc, O, m->rb, q, ldd, xs, S, y, st
    switch (m->fmt) {
    case CU_I8: LAUNCH(k_rows, CU_I8,); break;
    case CU_I4: LAUNCH(k_rows, CU_I4,); break;
    case CU_I2: LAUNCH(k_rows, CU_I2,); break;
    default:
#undef ARGS
#define ARGS w, sc, O, m->rb, m->gs, m->ng, q, ldd, xs, S, y, st
        LAUNCH(k_groups, );
    }
#undef ARGS
#undef LAUNCH
}

/* Launches m's kernel over S rows q[S][ldd] (device) with scales xs, into y. */
static void cu_launch(const cu_mat *m, const int8_t *q, int64_t ldd, const float *xs, int S, float *y) {
    cu_launch_rows(m, 0, m->O, 1, cu_steps{0, 0, 0, 0, 0}, q, ldd, xs, S, y);
}

extern "C" int cu_mats_idot_rows(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int R, const int *r0,
                                 const int *nr, float *const *y, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (nm < 1 || nm > CU_MAX_BATCH) return snprintf(err, n, "CUDA: %d matrices in one call (1..%d)", nm, (int)CU_MAX_BATCH), -1;
    int64_t ldd = 0, outs = 0;
    for (int i = 0; i < nm; i++) {
        if (m[i]->I != m[0]->I) return snprintf(err, n, "CUDA: matrices of %lld and %lld inputs in one call", (long long)m[0]->I, (long long)m[i]->I), -1;
        if (r0[i] < 0 || nr[i] < 0 || r0[i] > R - nr[i]) return snprintf(err, n, "CUDA: rows %d+%d of %d", r0[i], nr[i], R), -1;
        const int64_t l = cu_act_width(m[i]);
        ldd = l > ldd ? l : ldd, outs += (int64_t)nr[i] * m[i]->O;
    }
    if (R < 1 || !outs) return 0;
    double t0 = cu_now();
    cudaError_t e;
    if ((e = cu_grow((void **)&G.q, &G.qcap, (size_t)(R * ldd))) != cudaSuccess || (e = cu_grow((void **)&G.xs, &G.xcap, (size_t)R * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.y, &G.ycap, (size_t)outs * 4)) != cudaSuccess)
        return cu_fail(err, n, "allocating activations", e);
    if ((e = cu_rows_up(q, ldq, m[0]->I, xs, R, ldd)) != cudaSuccess) return cu_fail(err, n, "copying activations", e);
    for (int i = 0; i < nm && e == cudaSuccess; i++) /* a fill still copying: the device waits, the host does not */
        if (m[i]->pending) e = cudaStreamWaitEvent(G.st, m[i]->filled, 0);
    if (e != cudaSuccess) return cu_fail(err, n, "waiting for a fill", e);
    cudaEventRecord(G.ev[0], G.st);
    for (int64_t i = 0, off = 0; i < nm; off += (int64_t)nr[i] * m[i]->O, i++)
        if (nr[i]) cu_launch(m[i], G.q + (int64_t)r0[i] * ldd, ldd, G.xs + r0[i], nr[i], G.y + off);
    if ((e = cudaGetLastError()) != cudaSuccess) return cu_fail(err, n, "launching the matmul", e);
    cudaEventRecord(G.ev[1], G.st);
    for (int64_t i = 0, off = 0; i < nm && e == cudaSuccess; off += (int64_t)nr[i] * m[i]->O, i++)
        if (nr[i]) e = cudaMemcpyAsync(y[i], G.y + off, (size_t)((int64_t)nr[i] * m[i]->O) * 4, cudaMemcpyDeviceToHost, G.st);
    if (e != cudaSuccess || (e = cudaStreamSynchronize(G.st)) != cudaSuccess) return cu_fail(err, n, "running the matmul", e);
    G.stats.calls++, G.stats.mats += (uint64_t)nm, G.stats.rows += (uint64_t)R;
    G.stats.bytes_in += (uint64_t)(R * m[0]->I) + (uint64_t)R * 4, G.stats.bytes_out += (uint64_t)outs * 4;
    cu_timed(t0);
    return 0;
}

/* Rows up once; per expert the gate and up kernels into hg and hu, one
 * block a row for SwiGLU and quantization into hq and hx, the down kernel
 * into y; every y back; one synchronisation. */
extern "C" int cu_experts_rows(const cu_mat *const *gate, const cu_mat *const *up, const cu_mat *const *down, int ne, const int8_t *q,
                               int64_t ldq, const float *xs, int R, const int *r0, const int *nr, float *const *y, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (ne < 1 || ne > CU_MAX_EXPERTS) return snprintf(err, n, "CUDA: %d experts in one call (1..%d)", ne, (int)CU_MAX_EXPERTS), -1;
    int64_t ldd = 0, ldh = 0, outs = 0, hs = 0, hrows = 0;
    for (int i = 0; i < ne; i++) {
        const cu_mat *g = gate[i], *u = up[i], *d = down[i];
        if (g->I != gate[0]->I || u->I != g->I)
            return snprintf(err, n, "CUDA: matrices of %lld and %lld inputs in one call", (long long)gate[0]->I, (long long)(g->I != gate[0]->I ? g->I : u->I)), -1;
        if (u->O != g->O || d->I != g->O)
            return snprintf(err, n, "CUDA: expert %d: gate of %lld rows, up of %lld and down of %lld inputs do not chain", i, (long long)g->O, (long long)u->O,
                            (long long)d->I), -1;
        if (r0[i] < 0 || nr[i] < 0 || r0[i] > R - nr[i]) return snprintf(err, n, "CUDA: rows %d+%d of %d", r0[i], nr[i], R), -1;
        const int64_t lg = cu_act_width(g) > cu_act_width(u) ? cu_act_width(g) : cu_act_width(u);
        ldd = lg > ldd ? lg : ldd, ldh = cu_act_width(d) > ldh ? cu_act_width(d) : ldh;
        outs += (int64_t)nr[i] * d->O, hs += (int64_t)nr[i] * g->O, hrows += nr[i];
    }
    if (R < 1 || !outs) return 0;
    double t0 = cu_now();
    cudaError_t e;
    if ((e = cu_grow((void **)&G.q, &G.qcap, (size_t)(R * ldd))) != cudaSuccess || (e = cu_grow((void **)&G.xs, &G.xcap, (size_t)R * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.y, &G.ycap, (size_t)outs * 4)) != cudaSuccess || (e = cu_grow((void **)&G.hg, &G.hgcap, (size_t)hs * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.hu, &G.hucap, (size_t)hs * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.hq, &G.hqcap, (size_t)(hrows * ldh))) != cudaSuccess ||
        (e = cu_grow((void **)&G.hx, &G.hxcap, (size_t)hrows * 4)) != cudaSuccess)
        return cu_fail(err, n, "allocating activations", e);
    if ((e = cu_rows_up(q, ldq, gate[0]->I, xs, R, ldd)) != cudaSuccess) return cu_fail(err, n, "copying activations", e);
    for (int i = 0; i < ne && e == cudaSuccess; i++) {
        const cu_mat *three[3] = {gate[i], up[i], down[i]};
        for (int t = 0; t < 3 && e == cudaSuccess; t++)
            if (three[t]->pending) e = cudaStreamWaitEvent(G.st, three[t]->filled, 0);
    }
    if (e != cudaSuccess) return cu_fail(err, n, "waiting for a fill", e);
    cudaEventRecord(G.ev[0], G.st);
    for (int64_t i = 0, off = 0, hoff = 0, hr = 0; i < ne; off += (int64_t)nr[i] * down[i]->O, hoff += (int64_t)nr[i] * gate[i]->O, hr += nr[i], i++) {
        if (!nr[i]) continue;
        const int8_t *qi = G.q + (int64_t)r0[i] * ldd;
        cu_launch(gate[i], qi, ldd, G.xs + r0[i], nr[i], G.hg + hoff);
        cu_launch(up[i], qi, ldd, G.xs + r0[i], nr[i], G.hu + hoff);
        k_swiglu_quant<<<(unsigned)nr[i], 256, 0, G.st>>>(G.hg + hoff, G.hu + hoff, gate[i]->O, G.hq + hr * ldh, ldh, G.hx + hr);
        cu_launch(down[i], G.hq + hr * ldh, ldh, G.hx + hr, nr[i], G.y + off);
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return cu_fail(err, n, "launching the experts", e);
    cudaEventRecord(G.ev[1], G.st);
    for (int64_t i = 0, off = 0; i < ne && e == cudaSuccess; off += (int64_t)nr[i] * down[i]->O, i++)
        if (nr[i]) e = cudaMemcpyAsync(y[i], G.y + off, (size_t)((int64_t)nr[i] * down[i]->O) * 4, cudaMemcpyDeviceToHost, G.st);
    if (e != cudaSuccess || (e = cudaStreamSynchronize(G.st)) != cudaSuccess) return cu_fail(err, n, "running the experts", e);
    G.stats.calls++, G.stats.mats += 3 * (uint64_t)ne, G.stats.rows += (uint64_t)R;
    G.stats.bytes_in += (uint64_t)(R * gate[0]->I) + (uint64_t)R * 4, G.stats.bytes_out += (uint64_t)outs * 4;
    cu_timed(t0);
    return 0;
}

extern "C" cu_kv *cu_kv_alloc(int nl, int64_t ctx, int kvl, int rd, int nf, int id, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), (cu_kv *)NULL;
    if (nl < 1 || ctx < 1 || kvl < 1 || rd < 0 || ctx > (INT64_C(1) << 24) || kvl > 4096 || rd > 4096 || nf < 0 || nf > nl || id < 0 || id > 4096 || (nf && !id))
        return snprintf(err, n, "CUDA: cannot hold a latent cache of %d layers x %lld positions x (%d + %d), %d x %d indexer keys", nl, (long long)ctx, kvl,
                        rd, nf, id), (cu_kv *)NULL;
    cu_kv *c = (cu_kv *)calloc(1, sizeof *c);
    if (!c) return snprintf(err, n, "out of memory"), (cu_kv *)NULL;
    c->nl = nl, c->ctx = ctx, c->kvl = kvl, c->rd = rd, c->nf = nf, c->id = id;
    c->bytes = (uint64_t)ctx * ((uint64_t)nl * (uint64_t)(kvl + rd) + (uint64_t)nf * (uint64_t)id) * 4;
    cudaError_t e = cudaMalloc((void **)&c->lat, (size_t)c->bytes);
    if (e != cudaSuccess) return cudaGetLastError(), cu_fail(err, n, "allocating the latent cache", e), free(c), (cu_kv *)NULL;
    c->rope = c->lat + (size_t)nl * (size_t)ctx * (size_t)kvl, c->ikey = c->rope + (size_t)nl * (size_t)ctx * (size_t)rd;
    return c;
}

extern "C" int cu_kv_write_keys(cu_kv *c, int f, int64_t p0, int64_t np, const float *key, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!c || f < 0 || f >= c->nf || p0 < 0 || np < 0 || p0 > c->ctx - np)
        return snprintf(err, n, "CUDA: writing positions %lld+%lld of indexer layer %d to a key cache of %lld", (long long)p0, (long long)np, f,
                        (long long)(c ? c->ctx : 0)), -1;
    cudaError_t e;
    if (np && (e = cudaMemcpyAsync(c->ikey + ((size_t)f * (size_t)c->ctx + (size_t)p0) * (size_t)c->id, key, (size_t)np * (size_t)c->id * 4,
                                   cudaMemcpyHostToDevice, G.st)) != cudaSuccess)
        return cu_fail(err, n, "writing the indexer's key cache", e);
    G.stats.kv_bytes += (uint64_t)np * (uint64_t)c->id * 4;
    return 0;
}

/* The queries and weights go in, one launch, each row's scores come back,
 * one synchronisation; rows in chunks whose scores fit CU_MLA_SCORES. */
extern "C" int cu_index_scores(const cu_kv *c, int f, const float *qi, const float *w, int S, int64_t pos, int ih, float sscale, float *const *score,
                               char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!c || f < 0 || f >= c->nf || ih < 1) return snprintf(err, n, "CUDA: indexer: no key cache for layer %d, or %d heads", f, ih), -1;
    if (S < 1 || pos < 0 || pos > c->ctx - S) return snprintf(err, n, "CUDA: indexer: rows %lld+%d of a cache of %lld", (long long)pos, S, (long long)c->ctx), -1;
    const int id = c->id;
    const int64_t ld = pos + S, per = CU_MLA_SCORES / (ld * 4), chunk = per < 1 ? 1 : per < S ? per : S;
    const float *keys = c->ikey + (size_t)f * (size_t)c->ctx * (size_t)id;
    double t0 = cu_now();
    cudaError_t e = cudaSuccess;
    cudaEventRecord(G.ev[0], G.st);
    for (int64_t s0 = 0; s0 < S && e == cudaSuccess; s0 += chunk) {
        const int64_t ns = S - s0 < chunk ? S - s0 : chunk, blocks = (ld + 127) / 128;
        if ((e = cu_grow((void **)&G.mq, &G.mqcap, (size_t)(ns * ih * id) * 4)) != cudaSuccess ||
            (e = cu_grow((void **)&G.mqa, &G.mqacap, (size_t)(ns * ih) * 4)) != cudaSuccess ||
            (e = cu_grow((void **)&G.msc, &G.msccap, (size_t)(ns * ld) * 4)) != cudaSuccess ||
            (e = cudaMemcpyAsync(G.mq, qi + s0 * ih * id, (size_t)(ns * ih * id) * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess ||
            (e = cudaMemcpyAsync(G.mqa, w + s0 * ih, (size_t)(ns * ih) * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess)
            break;
        k_index_scores<<<dim3((unsigned)ns, (unsigned)(blocks < 65535 ? blocks : 65535)), 128, 0, G.st>>>(G.mq, G.mqa, keys, ih, id, pos + s0, sscale, ld,
                                                                                                         G.msc);
        if ((e = cudaGetLastError()) != cudaSuccess) break;
        for (int64_t s = 0; s < ns && e == cudaSuccess; s++)
            e = cudaMemcpyAsync(score[s0 + s], G.msc + s * ld, (size_t)(pos + s0 + s + 1) * 4, cudaMemcpyDeviceToHost, G.st);
    }
    cudaEventRecord(G.ev[1], G.st);
    if (e != cudaSuccess || (e = cudaStreamSynchronize(G.st)) != cudaSuccess) return cu_fail(err, n, "running the indexer", e);
    G.stats.calls++, G.stats.attn_calls++, G.stats.rows += (uint64_t)S;
    G.stats.bytes_in += (uint64_t)S * (uint64_t)ih * (uint64_t)(id + 1) * 4;
    for (int s = 0; s < S; s++) G.stats.bytes_out += (uint64_t)(pos + s + 1) * 4;
    cu_timed(t0);
    return 0;
}

/* Queued on the matmul stream, which every later call drains before it
 * returns; the engine does not touch those host rows before its next
 * cu_mla. */
extern "C" int cu_kv_write(cu_kv *c, int l, int64_t p0, int64_t np, const float *lat, const float *rope, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    if (!c || l < 0 || l >= c->nl || p0 < 0 || np < 0 || p0 > c->ctx - np)
        return snprintf(err, n, "CUDA: writing positions %lld+%lld of layer %d to a latent cache of %lld", (long long)p0, (long long)np, l,
                        (long long)(c ? c->ctx : 0)), -1;
    if (!np) return 0;
    cudaError_t e;
    if ((e = cudaMemcpyAsync(c->lat + ((size_t)l * (size_t)c->ctx + (size_t)p0) * (size_t)c->kvl, lat, (size_t)np * (size_t)c->kvl * 4,
                             cudaMemcpyHostToDevice, G.st)) != cudaSuccess ||
        (c->rd && (e = cudaMemcpyAsync(c->rope + ((size_t)l * (size_t)c->ctx + (size_t)p0) * (size_t)c->rd, rope, (size_t)np * (size_t)c->rd * 4,
                                       cudaMemcpyHostToDevice, G.st)) != cudaSuccess))
        return cu_fail(err, n, "writing the latent cache", e);
    G.stats.kv_bytes += (uint64_t)np * (uint64_t)(c->kvl + c->rd) * 4;
    return 0;
}

extern "C" void cu_kv_free(cu_kv *c) {
    if (!c) return;
    if (G.on) cudaStreamSynchronize(G.st), cudaFree(c->lat);
    free(c);
}

/* Queues cu_mla for rows [s0, s1) of a call (their scores take at most
 * CU_MLA_SCORES bytes): the queries and kept keys go in, five launches
 * (latent queries, scores, softmax with the weighted latents and their
 * quantization, W_UV for every head at once, the reorder to [s][h][v]),
 * attn comes back. nkmax: the most keys a row of them keeps. */
static cudaError_t cu_mla_rows(const cu_kv *c, int l, const cu_mat *kv_b, const cu_mla_shape *sh, const float *q, int S, int64_t pos, const int *nsel,
                               const int *sel, float *attn, int64_t nkmax, int any) {
    const int H = sh->H, kvl = sh->kvl, rd = sh->rd, nope = sh->nope, vh = sh->vh, kvw = nope + vh, qk = nope + rd;
    const int64_t B = (int64_t)S * H, ldh = cu_act_width(kv_b), nint = S + (any ? (int64_t)S * sh->sel_stride : 0);
    cudaError_t e;
    if ((e = cu_grow((void **)&G.mq, &G.mqcap, (size_t)(B * qk) * 4)) != cudaSuccess || (e = cu_grow((void **)&G.mi, &G.micap, (size_t)nint * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.mqa, &G.mqacap, (size_t)(B * kvl) * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.msc, &G.msccap, (size_t)(B * nkmax) * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.hq, &G.hqcap, (size_t)(B * ldh))) != cudaSuccess || (e = cu_grow((void **)&G.hx, &G.hxcap, (size_t)B * 4)) != cudaSuccess ||
        (e = cu_grow((void **)&G.y, &G.ycap, (size_t)(B * vh) * 4)) != cudaSuccess || (e = cu_grow((void **)&G.hu, &G.hucap, (size_t)(B * vh) * 4)) != cudaSuccess)
        return e;
    if ((e = cudaMemcpyAsync(G.mq, q, (size_t)(B * qk) * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess ||
        (e = cudaMemcpyAsync(G.mi, nsel, (size_t)S * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess ||
        (any && (e = cudaMemcpyAsync(G.mi + S, sel, (size_t)S * (size_t)sh->sel_stride * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess))
        return e;
    const float *lat = c->lat + (size_t)l * (size_t)c->ctx * (size_t)kvl, *kr = c->rope + (size_t)l * (size_t)c->ctx * (size_t)rd;
    k_mla_qa<<<(unsigned)B, 128, 0, G.st>>>(kv_b->w, kv_b->s, kv_b->fmt, kv_b->rb, kv_b->ng, kv_b->gs, G.mq, S, H, nope, qk, kvw, kvl, G.mqa);
    const int64_t chunks = (nkmax + 127) / 128;
    k_mla_scores<<<dim3((unsigned)B, (unsigned)(chunks < 65535 ? chunks : 65535)), 128, 0, G.st>>>(G.mqa, G.mq, lat, kr, G.mi, G.mi + S, sh->sel_stride, S, H, nope, qk,
                                                                                      kvl, rd, pos, sh->scale, nkmax, G.msc);
    k_mla_softmax<<<(unsigned)B, 256, 0, G.st>>>(G.msc, nkmax, G.mi, G.mi + S, sh->sel_stride, S, pos, lat, kvl, G.mqa, G.hq, ldh, G.hx);
    cu_launch_rows(kv_b, nope, vh, H, cu_steps{kvw * kv_b->rb, kvw * kv_b->ng, S * ldh, S, (int64_t)S * vh}, G.hq, ldh, G.hx, S, G.y);
    k_mla_permute<<<(unsigned)((B * vh + 255) / 256), 256, 0, G.st>>>(G.y, S, H, vh, G.hu);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    return cudaMemcpyAsync(attn, G.hu, (size_t)(B * vh) * 4, cudaMemcpyDeviceToHost, G.st);
}

/* Checks everything, then the rows in chunks (cu_mla_rows) and one
 * synchronisation. */
extern "C" int cu_mla(const cu_kv *c, int l, const cu_mat *kv_b, const cu_mla_shape *sh, const float *q, int S, int64_t pos, const int *nsel,
                      const int *sel, float *attn, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    const int H = sh->H, vh = sh->vh, qk = sh->nope + sh->rd;
    int64_t nkmax;
    int any;
    if (cu_mla_check_(c != NULL, c ? c->nl : 0, c ? c->ctx : 0, c ? c->kvl : 0, c ? c->rd : 0, l, kv_b != NULL, kv_b ? kv_b->O : 0, kv_b ? kv_b->I : 0, sh,
                      S, pos, nsel, sel, &nkmax, &any, err, n))
        return -1;
    const int64_t per = CU_MLA_SCORES / ((int64_t)H * nkmax * 4), chunk = per < 1 ? 1 : per < S ? per : S;
    double t0 = cu_now();
    cudaError_t e = kv_b->pending ? cudaStreamWaitEvent(G.st, kv_b->filled, 0) : cudaSuccess;
    cudaEventRecord(G.ev[0], G.st);
    for (int64_t s0 = 0; s0 < S && e == cudaSuccess; s0 += chunk) {
        const int ns = (int)(S - s0 < chunk ? S - s0 : chunk);
        e = cu_mla_rows(c, l, kv_b, sh, q + s0 * H * qk, ns, pos + s0, nsel + s0, sel + s0 * sh->sel_stride, attn + s0 * H * vh, nkmax, any);
    }
    cudaEventRecord(G.ev[1], G.st);
    if (e != cudaSuccess || (e = cudaStreamSynchronize(G.st)) != cudaSuccess) return cu_fail(err, n, "running attention", e);
    G.stats.calls++, G.stats.attn_calls++, G.stats.mats += 1, G.stats.rows += (uint64_t)S;
    G.stats.bytes_in += (uint64_t)((int64_t)S * H * qk) * 4 + (uint64_t)(S + (any ? (int64_t)S * sh->sel_stride : 0)) * 4;
    G.stats.bytes_out += (uint64_t)((int64_t)S * H * vh) * 4;
    cu_timed(t0);
    return 0;
}

extern "C" int cu_mats_idot(const cu_mat *const *m, int nm, const int8_t *q, int64_t ldq, const float *xs, int S, float *const *y, char *err,
                            size_t n) {
    if (nm < 1 || nm > CU_MAX_GROUP) return snprintf(err, n, "CUDA: %d matrices in one call (1..%d)", nm, (int)CU_MAX_GROUP), -1;
    int r0[CU_MAX_GROUP] = {0}, nr[CU_MAX_GROUP];
    for (int i = 0; i < nm; i++) nr[i] = S > 0 ? S : 0;
    return cu_mats_idot_rows(m, nm, q, ldq, xs, S, r0, nr, y, err, n);
}

extern "C" int cu_mat_idot(const cu_mat *m, const int8_t *q, int64_t ldq, const float *xs, int S, float *y, char *err, size_t n) {
    return cu_mats_idot(&m, 1, q, ldq, xs, S, &y, err, n);
}

extern "C" uint64_t cu_mem_free(void) {
    size_t fr = 0, tot = 0;
    return G.on && cudaMemGetInfo(&fr, &tot) == cudaSuccess ? (uint64_t)fr : 0;
}

extern "C" int cu_copy_bandwidth(uint64_t bytes, int reps, double *bytes_per_s, char *err, size_t n) {
    if (!G.on) return snprintf(err, n, "CUDA: not initialised"), -1;
    void *a = NULL, *b = NULL;
    cudaError_t e;
    if ((e = cudaMalloc(&a, bytes)) != cudaSuccess || (e = cudaMalloc(&b, bytes)) != cudaSuccess || (e = cudaMemset(a, 1, bytes)) != cudaSuccess) {
        cudaFree(a), cudaFree(b);
        return cu_fail(err, n, "allocating the copy buffers", e);
    }
    float best = 0;
    for (int r = 0; r <= reps && e == cudaSuccess; r++) { /* the first is a warm-up */
        float ms = 0;
        cudaEventRecord(G.ev[0], G.st);
        e = cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, G.st);
        cudaEventRecord(G.ev[1], G.st);
        if (e == cudaSuccess) e = cudaEventSynchronize(G.ev[1]);
        if (e == cudaSuccess && r && cudaEventElapsedTime(&ms, G.ev[0], G.ev[1]) == cudaSuccess && (best == 0 || ms < best)) best = ms;
    }
    cudaFree(a), cudaFree(b);
    if (e != cudaSuccess) return cu_fail(err, n, "copying", e);
    *bytes_per_s = best > 0 ? 2.0 * (double)bytes / (1e-3 * best) : 0;
    return 0;
}

extern "C" void cu_stats_get(cu_stats *st) {
    if (st) *st = G.stats;
}
