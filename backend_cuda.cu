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

static struct {
    int on;
    cudaStream_t st, up; /* matmuls; cu_mat_fill's copies */
    uint8_t *stage[CU_STAGES];
    size_t stage_cap[CU_STAGES];
    cudaEvent_t stage_ev[CU_STAGES]; /* the last DMA out of each */
    int stage_next;
    int8_t *q, *hq;
    float *xs, *y, *hg, *hu, *hx; /* hg, hu, hq, hx: cu_experts_rows' intermediate rows */
    size_t qcap, xcap, ycap, hgcap, hucap, hqcap, hxcap; /* bytes */
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
                       int64_t ldq, const float *__restrict__ xs, int S, float *__restrict__ y) {
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
                         const int8_t *__restrict__ q, int64_t ldq, const float *__restrict__ xs, int S, float *__restrict__ y) {
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

/* SwiGLU and the activation quantization of one intermediate row per
 * block, as the CPU's fwd_swiglu then mm_act_quant (natural order) do:
 * h = fm_silu(g)·u into g; xs = absmax/127 and q = rne(h·(127/absmax))
 * clamped to ±127, zero past I up to ldq; q = 0 with xs 0 (absmax below
 * 1e-30) or NaN (a value not finite). The absmax is the largest |h| bit
 * pattern, which orders like the values: a max, exact in any order. */
__global__ void k_swiglu_quant(float *__restrict__ g, const float *__restrict__ u, int64_t I, int8_t *__restrict__ q, int64_t ldq,
                               float *__restrict__ xs) {
    __shared__ unsigned mb_all;
    float *gr = g + (int64_t)blockIdx.x * I;
    const float *ur = u + (int64_t)blockIdx.x * I;
    int8_t *qr = q + (int64_t)blockIdx.x * ldq;
    if (threadIdx.x == 0) mb_all = 0;
    __syncthreads();
    unsigned mb = 0;
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
        const float h = __fmul_rn(fm_silu(gr[i]), ur[i]);
        const unsigned b = __float_as_uint(h) & 0x7FFFFFFFu;
        gr[i] = h, mb = b > mb ? b : mb;
    }
    for (int o = 16; o; o >>= 1) {
        const unsigned t = __shfl_xor_sync(FULL, mb, o);
        mb = t > mb ? t : mb;
    }
    if ((threadIdx.x & 31) == 0) atomicMax(&mb_all, mb);
    __syncthreads();
    mb = mb_all;
    const float amax = __uint_as_float(mb);
    const bool zero = mb >= 0x7F800000u || !(amax >= 1e-30f);
    const float inv = zero ? 0.0f : __fdiv_rn(127.0f, amax);
    for (int64_t i = threadIdx.x; i < ldq; i += blockDim.x) {
        float r = i < I && !zero ? rintf(__fmul_rn(gr[i], inv)) : 0.0f; /* rintf: to nearest, ties to even, as qt_rne */
        r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
        qr[i] = (int8_t)(int)r;
    }
    if (threadIdx.x == 0) xs[blockIdx.x] = mb >= 0x7F800000u ? __uint_as_float(0x7FC00000u) : zero ? 0.0f : __fdiv_rn(amax, 127.0f);
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

/* Grows device buffer *p to at least need bytes. */
static cudaError_t cu_grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return cudaSuccess;
    cudaFree(*p);
    *p = NULL, *cap = 0;
    cudaError_t e = cudaMalloc(p, need);
    if (e == cudaSuccess) *cap = need;
    return e;
}

/* Padded row width of the activations for m: a multiple of 64, at least
 * its row's elements, so the widest loads stay inside zeroed bytes. */
static int64_t cu_act_width(const cu_mat *m) {
    const int64_t epb = m->fmt == CU_I8 ? 1 : m->fmt == CU_I2 ? 4 : 2;
    return (m->rb * epb + 63) / 64 * 64;
}

/* Launches m's kernel over S rows q[S][ldd] (device) with scales xs, into y. */
static void cu_launch(const cu_mat *m, const int8_t *q, int64_t ldd, const float *xs, int S, float *y) {
    const int warps = 8;
    const unsigned blocks = (unsigned)((m->O + warps - 1) / warps);
    /* widest loads the row (and, grouped, the group) alignment allows */
    const int64_t gb = m->fmt == CU_I4G ? m->gs / 2 : 16;
    const int v = m->rb % 16 == 0 && gb % 16 == 0 ? 16 : m->rb % 4 == 0 ? 4 : 1;
#define LAUNCH(K, ...)                                                                                                  \
    do {                                                                                                               \
        if (v == 16) K<__VA_ARGS__ 16><<<blocks, 32 * warps, 0, G.st>>>(ARGS);                                         \
        else if (v == 4) K<__VA_ARGS__ 4><<<blocks, 32 * warps, 0, G.st>>>(ARGS);                                      \
        else K<__VA_ARGS__ 1><<<blocks, 32 * warps, 0, G.st>>>(ARGS);                                                  \
    } while (0)
#define ARGS m->w, m->s, m->O, m->rb, q, ldd, xs, S, y
    switch (m->fmt) {
    case CU_I8: LAUNCH(k_rows, CU_I8,); break;
    case CU_I4: LAUNCH(k_rows, CU_I4,); break;
    case CU_I2: LAUNCH(k_rows, CU_I2,); break;
    default:
#undef ARGS
#define ARGS m->w, m->s, m->O, m->rb, m->gs, m->ng, q, ldd, xs, S, y
        LAUNCH(k_groups, );
    }
#undef ARGS
#undef LAUNCH
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
    if ((e = cudaMemsetAsync(G.q, 0, (size_t)(R * ldd), G.st)) != cudaSuccess ||
        (e = cudaMemcpy2DAsync(G.q, (size_t)ldd, q, (size_t)ldq, (size_t)m[0]->I, (size_t)R, cudaMemcpyHostToDevice, G.st)) != cudaSuccess ||
        (e = cudaMemcpyAsync(G.xs, xs, (size_t)R * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess)
        return cu_fail(err, n, "copying activations", e);
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
    G.stats.seconds += cu_now() - t0;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, G.ev[0], G.ev[1]) == cudaSuccess) G.stats.kernel_seconds += 1e-3 * ms;
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
    if ((e = cudaMemsetAsync(G.q, 0, (size_t)(R * ldd), G.st)) != cudaSuccess ||
        (e = cudaMemcpy2DAsync(G.q, (size_t)ldd, q, (size_t)ldq, (size_t)gate[0]->I, (size_t)R, cudaMemcpyHostToDevice, G.st)) != cudaSuccess ||
        (e = cudaMemcpyAsync(G.xs, xs, (size_t)R * 4, cudaMemcpyHostToDevice, G.st)) != cudaSuccess)
        return cu_fail(err, n, "copying activations", e);
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
    G.stats.seconds += cu_now() - t0;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, G.ev[0], G.ev[1]) == cudaSuccess) G.stats.kernel_seconds += 1e-3 * ms;
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
