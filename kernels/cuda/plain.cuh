// plain.cuh: the untyped kernel families. An instance file defines FAMILY
// and NAME.
#pragma once
#include "common.cuh"

#if FAMILY == 10 // rms_norm: the block reduces each group of a row in turn; grid (rows)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const float* w, const u32* io, float* y, u32 cols, u32 group, u32 eps_bits) {
    __shared__ double part[8];
    __shared__ float scale_s;
    int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (row >= (int)io[IO_ROWS]) return;
    float eps = __uint_as_float(eps_bits);
    for (int g = 0; g < (int)(cols / group); g++) {
        const float* xs = x + (size_t)row * cols + (size_t)g * group;
        float* ys = y + (size_t)row * cols + (size_t)g * group;
        // The oracle sums squares in double (each square rounded to float).
        double sum = 0;
        for (int j = threadIdx.x; j < (int)group; j += blockDim.x) sum += (double)(xs[j] * xs[j]);
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) part[warp] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            double t = 0;
            for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += part[i];
            scale_s = (float)(1.0 / sqrt((double)((float)(t / (double)group) + eps)));
        }
        __syncthreads();
        float scale = scale_s;
        for (int j = threadIdx.x; j < (int)group; j += blockDim.x) ys[j] = (xs[j] * scale) * w[j];
        __syncthreads(); // part and scale_s are reused by the next group
    }
}
#endif

#if FAMILY == 11 // rope: rotate pairs by pos·θ_i; grid (rows)
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const u32* io, u32 n_head, u32 head_dim,
    u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits) {
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    float base = __uint_as_float(base_bits), fscale = __uint_as_float(scale_bits);
    float theta_scale = (float)pow((double)base, -2.0 / (double)n_rot);
    float pos = (float)io_row(io, row, ROW_POS);
    int pairs = n_rot / 2;
    for (int it = threadIdx.x; it < (int)n_head * pairs; it += blockDim.x) {
        int h = it / pairs, p = it % pairs;
        // θ is built by repeated float multiplication, as the oracle (and
        // ggml's cache) does, so its rounding is the same.
        float theta = pos;
        for (int q = 0; q < p; q++) theta *= theta_scale;
        float t = theta * fscale;
        float c = (float)cos((double)t), s = (float)sin((double)t);
        float* v = x + ((size_t)row * n_head + h) * head_dim;
        int i0 = 2 * p, i1 = 2 * p + 1;
        if (neox) i0 = p, i1 = p + pairs;
        float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x0 * s + x1 * c;
    }
}
#endif

// kv_at is the address of (page, layer, k|v, token) in the KV cache:
// pages of [layer][k|v][token][kv_dim] F16 (kernels/io.go).
__device__ __forceinline__ __half* kv_at(u8* kv, u32 page, u32 layer, u32 n_layer, u32 kv_dim, int which, int tok) {
    size_t page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    return (__half*)(kv + page * page_bytes + ((size_t)(layer * 2 + which) * KV_PAGE_TOKENS + tok) * kv_dim * 2);
}

#if FAMILY == 12 // kv_write: store each row's K and V as F16; grid (rows)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* k, const float* v, const u32* io, u8* kv, u32 layer, u32 kv_dim, u32 n_layer) {
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    int slot = io_row(io, row, ROW_SLOT), pos = io_row(io, row, ROW_POS);
    u32 page = io_page(io, slot, pos);
    __half* dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS);
    __half* dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS);
    for (int j = threadIdx.x; j < (int)kv_dim; j += blockDim.x) {
        dk[j] = __float2half_rn(k[(size_t)row * kv_dim + j]);
        dv[j] = __float2half_rn(v[(size_t)row * kv_dim + j]);
    }
}
#endif

#if FAMILY == 13 // flash_attn: one block per (row, head); grid (heads, rows)
// The oracle reproduces which of ggml's CPU paths llama.cpp takes and
// their roundings (kernels/cpu/fattn.go), because in a quantized model an
// attention output that differs by 1e-3 flips Q8 roundings downstream;
// this kernel follows the same three paths:
//   - fewer than 64 rows in the step: one_chunk — F16 query, F32 scores,
//     an F16 accumulator rounded after every rescale and every V·p update;
//   - one row over a cache view (positions rounded up to 256) of 512 or
//     more: split — two one_chunk ranges merged in F32;
//   - 64 rows or more (head_dim % 16 == 0): tiled — F32 throughout, keys in
//     tiles of 64, ggml's polynomial expf, tile sums of 16 lanes in double.
// Summation order inside a score differs (a warp tree vs SIMD lanes).
#define FA_MAX_D 8 // head_dim ≤ 256 (one thread per dimension in a block of 256)
#define FA_TILE 64

// v_expf is ggml_v_expf (AVX-512), lane by lane, as fattn.go's vExpf.
__device__ __forceinline__ float v_expf(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.f) return n <= 0.f ? 0.f : INFINITY;
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
        fmaf(0x1.ffffecp-1f, b, 1.f));
    return (float)((double)j * ldexp(1.0, (int)n));
}

__device__ __forceinline__ float expf_d(float x) { return (float)exp((double)x); }

struct FaCtx {
    const u8* kv;
    const u32* io;
    int slot, kvh;
    u32 layer, n_layer, kv_dim, head_dim;
    __device__ const __half* at(int which, int t) const {
        return kv_at((u8*)kv, io_page(io, slot, t), layer, n_layer, kv_dim, which, t % KV_PAGE_TOKENS) + kvh * head_dim;
    }
};

// FA_CH keys are scored at a time by fa_one_chunk.
#define FA_CH 1024
#define FA_UNROLL 16

// fa_one_chunk runs ggml's one_chunk loop over keys [lo, hi) for one
// (row, head) with the whole block, and gives thread d (< head_dim) its
// output dimension's F16 accumulator. The loop's arithmetic is serial —
// every step rounds the accumulator to F16 — but only the accumulator
// needs to be: scores do not depend on it, and the running maximum, hence
// each step's rescale factor ms and weight vs, follows from the scores by
// a prefix maximum. So per chunk of keys: one thread per key scores it,
// warp 0 scans the maximum, every thread computes the factors, and then
// thread d replays the F16 recurrence of its dimension (and the running
// sum S, the same in every thread) from shared memory.
__device__ void fa_one_chunk(const FaCtx& c, const float* q16, int lo, int hi, float scale, float* pm, float* ps,
    float* pacc, float* sc, float* fms, float* fvs) {
    int tid = threadIdx.x, lane = tid & 31, d = tid;
    float m = -INFINITY, s = 0.f, acc = 0.f;
    for (int base = lo; base < hi; base += FA_CH) {
        int n = min(FA_CH, hi - base);
        for (int i = tid; i < n; i += blockDim.x) {
            const __half* ks = c.at(0, base + i);
            float dot = 0.f;
#pragma unroll 16
            for (int j = 0; j < (int)c.head_dim; j++) dot += q16[j] * __half2float(ks[j]);
            sc[i] = dot * scale;
        }
        __syncthreads();
        // Exclusive prefix maximum (the maximum before each key), carried
        // from the previous chunk in m; warp 0 scans segments per lane.
        if (tid < 32) {
            int seg = (n + 31) / 32, s0 = lane * seg, s1 = min(n, s0 + seg);
            float lm = -INFINITY;
            for (int i = s0; i < s1; i++) lm = fmaxf(lm, sc[i]);
            float incl = lm;
            for (int o = 1; o < 32; o <<= 1) {
                float v = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl = fmaxf(incl, v);
            }
            float run = __shfl_up_sync(0xffffffffu, incl, 1);
            run = lane == 0 ? m : fmaxf(m, run);
            for (int i = s0; i < s1; i++) {
                fms[i] = run; // the maximum before key i, for now
                run = fmaxf(run, sc[i]);
            }
        }
        __syncthreads();
        for (int i = tid; i < n; i += blockDim.x) {
            float mb = fms[i], x = sc[i];
            if (x > mb) {
                fms[i] = expf_d(mb - x);
                fvs[i] = 1.f;
            } else {
                fms[i] = 1.f;
                fvs[i] = expf_d(x - mb);
            }
            if (i == n - 1) sc[FA_CH] = fmaxf(mb, x); // the running maximum after the chunk
        }
        __syncthreads();
        // The recurrence is serial, but its V loads are not: issue a group
        // of them before consuming any, so one memory latency covers the
        // group instead of every step paying its own.
        for (int i0 = 0; i0 < n; i0 += FA_UNROLL) {
            float v[FA_UNROLL];
#pragma unroll
            for (int u = 0; u < FA_UNROLL; u++)
                v[u] = (d < (int)c.head_dim && i0 + u < n) ? __half2float(c.at(1, base + i0 + u)[d]) : 0.f;
#pragma unroll
            for (int u = 0; u < FA_UNROLL; u++) {
                if (i0 + u >= n) break;
                float ms = fms[i0 + u], vs = fvs[i0 + u];
                acc = round_f16(acc * ms);
                acc = round_f16(fmaf(v[u], vs, acc));
                s = s * ms + vs;
            }
        }
        m = sc[FA_CH];
        __syncthreads();
    }
    *pm = m, *ps = s, *pacc = acc;
}

// reduce_add16 is _mm512_reduce_add_ps's order (fattn.go's reduceAdd16).
__device__ __forceinline__ float reduce_add16(const float* a) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; i++) t3[i] = a[i + 8] + a[i];
    for (int i = 0; i < 4; i++) t6[i] = t3[i + 4] + t3[i];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

extern "C" __global__ void __launch_bounds__(256) NAME(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    __shared__ float q16[256], sc[FA_CH + 1], fms[FA_CH], fvs[FA_CH];
    int row = blockIdx.y, h = blockIdx.x, tid = threadIdx.x, lane = tid & 31;
    int rows = io[IO_ROWS];
    if (row >= rows || h >= (int)n_head) return;
    float scale = __uint_as_float(scale_bits);
    int pos = io_row(io, row, ROW_POS);
    FaCtx c;
    c.kv = kv, c.io = io, c.slot = io_row(io, row, ROW_SLOT), c.kvh = h / (n_head / n_head_kv);
    c.layer = layer, c.n_layer = n_layer, c.kv_dim = n_head_kv * head_dim, c.head_dim = head_dim;
    const float* qr = q + ((size_t)row * n_head + h) * head_dim;
    float* out = y + ((size_t)row * n_head + h) * head_dim;
    int n_kv = max(256, (pos + 1 + 255) / 256 * 256);
    if (rows >= FA_TILE && head_dim % 16 == 0) { // tiled, F32, by warp 0
        if (tid >= 32) return;
        float* kq = sc;
        float qh[FA_MAX_D], acc[FA_MAX_D];
#pragma unroll
        for (int i = 0; i < FA_MAX_D; i++) {
            int d = lane + 32 * i;
            qh[i] = d < (int)head_dim ? qr[d] : 0.f;
            acc[i] = 0.f;
        }
        float m = -INFINITY, s = 0.f;
        for (int t0 = 0; t0 <= pos; t0 += FA_TILE) {
            float tile_max = -INFINITY;
            for (int tk = 0; tk < FA_TILE; tk++) {
                int t = t0 + tk;
                float v = -INFINITY;
                if (t <= pos) {
                    const __half* ks = c.at(0, t);
                    float dot = 0.f;
#pragma unroll
                    for (int i = 0; i < FA_MAX_D; i++) {
                        int d = lane + 32 * i;
                        if (d < (int)head_dim) dot = fmaf(qh[i], __half2float(ks[d]), dot);
                    }
                    v = warp_sum(dot) * scale;
                }
                if (lane == 0) kq[tk] = v;
                tile_max = fmaxf(tile_max, v);
            }
            __syncwarp();
            if (tile_max > m) {
                float ms = expf_d(m - tile_max);
#pragma unroll
                for (int i = 0; i < FA_MAX_D; i++) acc[i] *= ms;
                s *= ms;
                m = tile_max;
            }
            for (int tk = lane; tk < FA_TILE; tk += 32) kq[tk] = v_expf(kq[tk] - m);
            __syncwarp();
            double sum = 0;
            for (int g = 0; g < FA_TILE; g += 16) sum += (double)reduce_add16(kq + g);
            s = (float)((double)s + sum);
            for (int tk = 0; tk < FA_TILE && t0 + tk <= pos; tk++) {
                const __half* vs_ = c.at(1, t0 + tk);
                float p = kq[tk];
#pragma unroll
                for (int i = 0; i < FA_MAX_D; i++) {
                    int d = lane + 32 * i;
                    if (d < (int)head_dim) acc[i] = fmaf(__half2float(vs_[d]), p, acc[i]);
                }
            }
            __syncwarp();
        }
        float inv = s != 0.f ? 1.f / s : 0.f;
#pragma unroll
        for (int i = 0; i < FA_MAX_D; i++) {
            int d = lane + 32 * i;
            if (d < (int)head_dim) out[d] = acc[i] * inv;
        }
        return;
    }
    for (int d = tid; d < (int)head_dim; d += blockDim.x) q16[d] = round_f16(qr[d]); // rounded like the cache
    __syncthreads();
    float acc;
    if (rows == 1 && n_kv >= 512) { // split: two one_chunk ranges, merged in F32
        float fa = 0.f, mf = -INFINITY, sf = 0.f;
        int chunk = (n_kv + 1) / 2;
        for (int ci = 0; ci < 2; ci++) {
            int lo = ci * chunk, hi = min(min(lo + chunk, n_kv), pos + 1);
            if (lo >= hi) continue;
            float mc, sc_;
            fa_one_chunk(c, q16, lo, hi, scale, &mc, &sc_, &acc, sc, fms, fvs);
            if (sc_ == 0.f) continue;
            float mn = fmaxf(mf, mc);
            float so = expf_d(mf - mn), sn = expf_d(mc - mn);
            fa = fa * so + acc * sn;
            sf = sf * so + sc_ * sn;
            mf = mn;
        }
        float inv = sf != 0.f ? 1.f / sf : 1.f;
        if (tid < (int)head_dim) out[tid] = fa * inv;
        return;
    }
    float m, s;
    fa_one_chunk(c, q16, 0, pos + 1, scale, &m, &s, &acc, sc, fms, fvs);
    float inv = s != 0.f ? 1.f / s : 0.f; // V /= S as a multiplication by 1/S
    if (tid < (int)head_dim) out[tid] = acc * inv;
}
#endif

#if FAMILY == 14 // add: x += y over the active rows; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const float* y, const u32* io, u32 cols) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) x[i] += y[i];
}
#endif

#if FAMILY == 15 // swiglu: y = silu(gate)·up; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    float v = gate[i];
    y[i] = v / (1.f + (float)exp(-(double)v)) * up[i];
}
#endif

#if FAMILY == 16 // argmax: tokens[slot] = first largest logit, rows that want logits; grid (rows)
extern "C" __global__ void __launch_bounds__(256) NAME(const float* logits, const u32* io, u32* tokens, u32 n_vocab) {
    __shared__ float bv[8];
    __shared__ int bi[8];
    int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    int slot = io_row(io, row, ROW_SLOT);
    const float* l = logits + (size_t)slot * n_vocab;
    float best = -INFINITY;
    int at = -1;
    for (int j = threadIdx.x; j < (int)n_vocab; j += blockDim.x)
        if (at < 0 || l[j] > best) best = l[j], at = j;
    for (int o = 16; o > 0; o >>= 1) {
        float b2 = __shfl_xor_sync(0xffffffffu, best, o);
        int a2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 >= 0 && (at < 0 || b2 > best || (b2 == best && a2 < at))) best = b2, at = a2;
    }
    if (lane == 0) bv[warp] = best, bi[warp] = at;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (bi[w] >= 0 && (at < 0 || bv[w] > best || (bv[w] == best && bi[w] < at))) best = bv[w], at = bi[w];
    tokens[slot] = at;
}
#endif
