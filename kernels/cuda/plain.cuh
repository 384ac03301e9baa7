// plain.cuh: the untyped kernel families. An instance file (written by
// kernels/cuda/gen) defines FAMILY (one of families.cuh's FAMILY_* names)
// and NAME.
#pragma once
#include "common.cuh"
#include "families.cuh"

#if FAMILY == FAMILY_RMS_NORM // rms_norm: the block normalizes each group of a row in turn (w may be null); grid (rows)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const float* w, const u32* io, float* y, u32 cols, u32 group, u32 eps_bits) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    float eps = __uint_as_float(eps_bits);
    int n = group, nt = blockDim.x;
    for (int g = 0; g < (int)(cols / group); g++) {
        const float* xs = x + (size_t)row * cols + (size_t)g * group;
        float* ys = y + (size_t)row * cols + (size_t)g * group;
        float scale = rms_scale(xs, n, eps);
        for (int i0 = threadIdx.x; i0 < n; i0 += 8 * nt) {
            float v[8], wv[8];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int i = i0 + u * nt;
                v[u] = i < n ? xs[i] : 0.f;
                wv[u] = i < n ? (w ? w[i] : 1.f) : 0.f; // no weight: ×1, exact
            }
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (i0 + u * nt < n) ys[i0 + u * nt] = (v[u] * scale) * wv[u];
        }
        __syncthreads(); // y may alias x
    }
}
#endif

#if FAMILY == FAMILY_ROPE || FAMILY == FAMILY_ROPE_KV_WRITE || FAMILY == FAMILY_RMS_NORM_ROPE_KV_WRITE
// rope_table fills cs and sn with cos and sin of pos·θ_p·freq_scale for the
// n_rot/2 pairs (n_rot ≤ 512), one thread a pair; the block shares them
// across heads. θ is built by repeated float multiplication, as the oracle
// (and ggml's cache) does, so its rounding is the same; sin and cos are
// taken in double and rounded.
__device__ void rope_table(u32 pos, u32 n_rot, u32 base_bits, u32 scale_bits, float* cs, float* sn) {
    float base = __uint_as_float(base_bits), fscale = __uint_as_float(scale_bits);
    float theta_scale = (float)pow((double)base, -2.0 / (double)n_rot);
    for (int p = threadIdx.x; p < (int)n_rot / 2; p += blockDim.x) {
        float theta = (float)pos;
        for (int q = 0; q < p; q++) theta *= theta_scale;
        float t = theta * fscale;
        double sd, cd;
        sincos((double)t, &sd, &cd);
        cs[p] = (float)cd, sn[p] = (float)sd;
    }
    __syncthreads();
}

// rope_elem is element d of head x rotated by rope's expressions (rope
// above): its pair's cos and sin from the table, normal or NeoX pairing;
// elements past n_rot pass through.
__device__ __forceinline__ float rope_elem(const float* x, int d, int n_rot, bool neox, const float* cs, const float* sn) {
    if (d >= n_rot) return x[d];
    int pairs = n_rot / 2, p, i0, i1;
    if (neox) p = d < pairs ? d : d - pairs, i0 = p, i1 = p + pairs;
    else p = d / 2, i0 = 2 * p, i1 = 2 * p + 1;
    float c = cs[p], s = sn[p], x0 = x[i0], x1 = x[i1];
    return d == i0 ? x0 * c - x1 * s : x0 * s + x1 * c;
}
#endif

#if FAMILY == FAMILY_ROPE // rope: rotate pairs by pos·θ_i; grid (rows)
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const u32* io, u32 n_head, u32 head_dim,
    u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits) {
    int row = blockIdx.x;
    int pairs = n_rot / 2;
    __shared__ float cs[256], sn[256];
    rope_table(io_row(io, row, ROW_POS), n_rot, base_bits, scale_bits, cs, sn); // the request table's: before dep_sync
    dep_sync();
    if (row >= (int)io[IO_ROWS]) return;
    for (int it = threadIdx.x; it < (int)n_head * pairs; it += blockDim.x) {
        int h = it / pairs, p = it % pairs;
        float c = cs[p], s = sn[p];
        float* v = x + ((size_t)row * n_head + h) * head_dim;
        int i0 = 2 * p, i1 = 2 * p + 1;
        if (neox) i0 = p, i1 = p + pairs;
        float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * s;
        v[i1] = x0 * s + x1 * c;
    }
}
#endif

#if FAMILY == FAMILY_ROPE_EXT // rope_ext: rope with frequency factors, an attention factor and YaRN; grid (rows)
// The table is rope_table's with pair p's angle divided by freq[p] (when
// freq is not null) before the scale and cos and sin multiplied by the
// attention factor after, as the oracle and ggml's rope_yarn do; with
// ext_factor ≠ 0 (YaRN) the angle mixes the scaled (interpolated) and the
// unscaled (extrapolated) one by ext_factor times the ramp of rope_yarn_ramp
// between the correction dims, and the attention factor is multiplied by
// 1 + 0.1·ln(1/freq_scale), the mix and that factor each one fused
// multiply-add as ggml's compiled rope_yarn has them (and the oracle). The
// rotation is rope's.
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const float* freq, const u32* io, u32 n_head,
    u32 head_dim, u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits, u32 attn_bits, u32 ext_bits, u32 lo_bits,
    u32 hi_bits) {
    int row = blockIdx.x;
    int pairs = n_rot / 2;
    __shared__ float cs[256], sn[256];
    float base = __uint_as_float(base_bits), fscale = __uint_as_float(scale_bits), mscale = __uint_as_float(attn_bits);
    float ext = __uint_as_float(ext_bits), lo = __uint_as_float(lo_bits), hi = __uint_as_float(hi_bits);
    if (ext != 0.f) mscale *= __fmaf_rn(0.1f, (float)log((double)(1.f / fscale)), 1.f);
    float theta_scale = (float)pow((double)base, -2.0 / (double)n_rot);
    u32 pos = io_row(io, row, ROW_POS);
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float theta = (float)pos;
        for (int q = 0; q < p; q++) theta *= theta_scale;
        if (freq) theta = theta / freq[p];
        float t = fscale * theta;
        if (ext != 0.f) {
            float y = ((float)p - lo) / fmaxf(0.001f, hi - lo);
            float mix = (1.f - fminf(1.f, fmaxf(0.f, y))) * ext;
            t = __fmaf_rn(theta, mix, t * (1.f - mix));
        }
        double sd, cd;
        sincos((double)t, &sd, &cd);
        cs[p] = (float)cd * mscale, sn[p] = (float)sd * mscale;
    }
    __syncthreads();
    dep_sync(); // the table comes from the request table and freq (a weight): built before
    if (row >= (int)io[IO_ROWS]) return;
    for (int it = threadIdx.x; it < (int)n_head * pairs; it += blockDim.x) {
        int h = it / pairs, p = it % pairs;
        float c = cs[p], s = sn[p];
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

#if FAMILY == FAMILY_KV_WRITE // kv_write: store each row's K and V as F16; grid (rows)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* k, const float* v, const u32* io, u8* kv, u32 layer, u32 kv_dim, u32 n_layer) {
    dep_sync();
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

#if FAMILY == FAMILY_ROPE_KV_WRITE // rope_kv_write: rope of q in place, rope of k into the cache with v; grid (rows, heads/8)
// Block (row, y) handles heads 8y..8y+7 of its row, a warp a head, after
// one rope table for them (a block per (row, head) built the table again
// for every head: at 64 rows of the llama 7B shape, 46 µs a call). Head h
// is Q head h for h < n_head, else KV head h-n_head (its K roped, its V as
// is). The arithmetic is rope's (same table, same expressions) and
// kv_write's rounding; k itself is not written.
extern "C" __global__ void __launch_bounds__(256) NAME(float* q, const float* k, const float* v, const u32* io, u8* kv,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits) {
    int row = blockIdx.x, lane = threadIdx.x & 31;
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    int pairs = n_rot / 2;
    __shared__ float cs[256], sn[256];
    rope_table(pos, n_rot, base_bits, scale_bits, cs, sn); // the request table's: before dep_sync
    dep_sync();
    if (row >= (int)io[IO_ROWS]) return;
    int h = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (h >= (int)(n_head + n_head_kv)) return;
    if (h < (int)n_head) {
        float* x = q + ((size_t)row * n_head + h) * head_dim;
        for (int p = lane; p < pairs; p += 32) {
            float c = cs[p], s = sn[p];
            int i0 = 2 * p, i1 = 2 * p + 1;
            if (neox) i0 = p, i1 = p + pairs;
            float x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * c - x1 * s;
            x[i1] = x0 * s + x1 * c;
        }
        return;
    }
    h -= n_head;
    u32 kv_dim = n_head_kv * head_dim;
    u32 page = io_page(io, slot, pos);
    __half* dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS) + h * head_dim;
    __half* dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS) + h * head_dim;
    const float* x = k + (size_t)row * kv_dim + h * head_dim;
    const float* vr = v + (size_t)row * kv_dim + h * head_dim;
    for (int d = lane; d < (int)head_dim; d += 32) {
        dk[d] = __float2half_rn(rope_elem(x, d, n_rot, neox, cs, sn));
        dv[d] = __float2half_rn(vr[d]);
    }
}
#endif

#if FAMILY == FAMILY_RMS_NORM_ROPE_KV_WRITE // rms_norm_rope_kv_write: per-head norm and rope of q in place, of k into the cache with v; grid (rows, heads/8)
// Block (row, y) handles heads 8y..8y+7 of its row, a warp a head, after
// one rope table for them (a block per (row, head) rebuilt it per head,
// and a prefill step's thousands of small blocks, each waiting on its
// barriers, cost more than their arithmetic). A head is normalized with
// its norm weight (q_norm for Q heads, k_norm for K heads): the norm's
// arithmetic is rms_norm's (sum of squares in double, then scale and
// weight), the rotation rope's, the rounding kv_write's. K is normalized
// and rotated in place (the unfused sequence leaves it so; nothing reads
// it after).
extern "C" __global__ void __launch_bounds__(256) NAME(float* q, float* k, const float* v, const float* wq, const float* wk,
    const u32* io, u8* kv, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 n_rot, u32 neox,
    u32 base_bits, u32 scale_bits, u32 eps_bits) {
    int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT);
    __shared__ float cs[256], sn[256], xs[8][512];
    rope_table(pos, n_rot, base_bits, scale_bits, cs, sn); // the request table's: before dep_sync
    dep_sync();
    if (row >= (int)io[IO_ROWS] || head_dim > 512) return;
    u32 kv_dim = n_head_kv * head_dim;
    float eps = __uint_as_float(eps_bits);
    float* xn = xs[warp];
    int h = blockIdx.y * (blockDim.x >> 5) + warp;
    if (h < (int)(n_head + n_head_kv)) {
        bool isq = h < (int)n_head;
        float* x = isq ? q + ((size_t)row * n_head + h) * head_dim : k + (size_t)row * kv_dim + (h - n_head) * head_dim;
        const float* w = isq ? wq : wk;
        double ss = 0;
        for (int d = lane; d < (int)head_dim; d += 32) ss += (double)(x[d] * x[d]);
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float scale = 1.f / sqrtf((float)(ss / (double)head_dim) + eps);
        for (int d = lane; d < (int)head_dim; d += 32) xn[d] = (x[d] * scale) * w[d];
        __syncwarp();
        __half *dk = nullptr, *dv = nullptr;
        const float* vr = nullptr;
        if (!isq) {
            int hk = h - n_head;
            u32 page = io_page(io, slot, pos);
            dk = kv_at(kv, page, layer, n_layer, kv_dim, 0, pos % KV_PAGE_TOKENS) + hk * head_dim;
            dv = kv_at(kv, page, layer, n_layer, kv_dim, 1, pos % KV_PAGE_TOKENS) + hk * head_dim;
            vr = v + (size_t)row * kv_dim + hk * head_dim;
        }
        for (int d = lane; d < (int)head_dim; d += 32) {
            float o = rope_elem(xn, d, n_rot, neox, cs, sn);
            x[d] = o;
            if (!isq) {
                dk[d] = __float2half_rn(o);
                dv[d] = __float2half_rn(vr[d]);
            }
        }
    }
}
#endif

#if FAMILY == FAMILY_FLASH_ATTN || FAMILY == FAMILY_FLASH_ATTN_EXT
// flash_attn and flash_attn_ext: one block per (group of query heads
// sharing a KV head, row); grid (heads / fa_group, rows), W = blockDim/32
// warps a block (launch.go's faWarps: more for launches of few blocks, so
// that a decode step of a few rows still keeps the GPU's warps busy).
// Flash decoding in F32: the block's warps split the row's keys (warp w
// takes the w-th chunk of each W), each keeps an online softmax
// (running maximum, sum and V accumulator) over its keys, and the warps'
// states are merged at the end. A lane scores one key at a time against
// the whole query (16-byte K loads), then the warp accumulates the chunk's
// V rows with each lane owning dimension pairs (half2 loads).
//
// T-CPU follows ggml's CPU paths (F16 accumulation for small batches); this
// kernel keeps everything in F32, which agrees with it within the parity
// test's tolerance (runtime/cuda/parity_test.go). Like the oracle, the
// query is rounded to F16 except in a long prompt's rows.
//
// flash_attn_ext's extensions are parameters of the shared body (fa_run),
// which flash_attn passes as none: a soft cap (scores become
// softcap·tanh(dot·scale), scale already divided by softcap as ggml does;
// tanh in double, rounded), a sliding window (the keys are
// max(0, pos-window+1)..pos) and sinks (head h's logit sinks[h] joins the
// merge of the warps' softmax states as a key with no value).
// FA_MAX_WARPS bounds a decode block's warps (launch.go's faMaxWarps),
// and so its registers: 65536 / (32·FA_MAX_WARPS) a thread.
#define FA_MAX_WARPS 16
#define FA_MAX_D 256
#define FA_P2 (FA_MAX_D / 64) // dimension pairs a lane owns

struct FaArgs {
    const u8* kv;
    const u32* ptab; // the slot's page table
    size_t page_bytes, head_ofs, vofs; // offsets in halves, but page_bytes
    u32 kv_dim;
    int D, pos, W;
    int first; // the first key the query sees
    float scale, softcap;
    const float* qs; // the queries, in shared memory ([G][fa_qs(D)])
    __device__ __forceinline__ const __half* row(int t) const {
        return (const __half*)(kv + (size_t)ptab[t / KV_PAGE_TOKENS] * page_bytes) + head_ofs + (size_t)(t % KV_PAGE_TOKENS) * kv_dim;
    }
};

// fa_qs is a query's floats in shared memory: head_dim rounded up to 8,
// so that each starts 32-byte aligned for the float4 loads.
__host__ __device__ constexpr int fa_qs(int head_dim) { return (head_dim + 7) & ~7; }

// fa_warp runs one warp's online softmax over its keys for the G query
// heads of one KV head the block serves (each key's K and V rows are loaded
// once for all of them); P2 dimension pairs a lane (head_dim ≤ 64·P2). It
// returns each head's maximum and sum, and its accumulator in acc. Each
// lane finds its key's cache row once (the page lookup) and hands the V
// row's offset to the others by shuffle, so a chunk's V loads are all
// independent. NV = 16/P2 V rows are loaded at once, kept as raw half2s
// (half the registers of floats), and the chunk's first NV are issued with
// its keys.
template <int P2, int G>
__device__ __forceinline__ void fa_warp(const FaArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    constexpr int NV = 16 / P2;
    static_assert(G * P2 <= 8, "fa_group keeps a block's accumulators small");
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = a.D, QS = fa_qs(D);
    bool vec8 = D % 8 == 0, even = D % 2 == 0;
    float m[G], l[G];
    const __half* kv0 = (const __half*)a.kv;
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < P2; i++) acc[g][i] = make_float2(0.f, 0.f);
    }
    // Chunks of ch ≤ 32 keys, one a lane, so that short contexts still
    // spread over every warp.
    const int ch = min(32, (a.pos - a.first + a.W) / a.W);
    for (int base = a.first + warp * ch; base <= a.pos; base += a.W * ch) {
        int t = base + lane;
        bool live = lane < ch && t <= a.pos;
        const __half* kp = a.row(min(t, a.pos));
        size_t vo = (size_t)(kp - kv0) + a.vofs; // this lane's V row, in halves
        const u32 vlo = (u32)vo, vhi = (u32)(vo >> 32);
        const int nk = min(ch, a.pos + 1 - base);
        // vload loads V rows j0 … j0+NV−1 of the chunk (those before nk),
        // each lane its dimension pairs as raw half2s. The first NV go out
        // before the scores are taken, so that their round trip overlaps
        // the keys'.
        u32 vr[NV][P2];
        auto vload = [&](int j0) {
#pragma unroll
            for (int u = 0; u < NV; u++) {
                int j = (j0 + u) & 31;
                size_t o = (size_t)__shfl_sync(0xffffffffu, vlo, j) | ((size_t)__shfl_sync(0xffffffffu, vhi, j) << 32);
                const __half* vp = kv0 + o;
#pragma unroll
                for (int i = 0; i < P2; i++) {
                    int d = 64 * i + 2 * lane;
                    vr[u][i] = 0;
                    if (j0 + u >= nk || d >= D) continue;
                    if (d + 1 < D && even) vr[u][i] = *(const u32*)(vp + d);
                    else vr[u][i] = (u32)__half_as_ushort(vp[d]) | (d + 1 < D ? (u32)__half_as_ushort(vp[d + 1]) << 16 : 0u);
                }
            }
        };
        vload(0);
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; g++) dot[g] = 0.f;
        if (vec8) {
            // Four lanes a key: lane 4q + part takes the 16-byte pieces
            // part, part + 4, … of key k0 + q's row (at most 2·P2 of them,
            // all loads in flight at once), eight keys a pass; the parts'
            // sums meet by shuffle and lane j takes key j's. (A lane a
            // key walked its row's 16 pieces four at a time: four memory
            // round trips where a step of one row gives each warp a few
            // keys.)
            const int part = lane & 3;
            for (int k0 = 0; k0 < ch; k0 += 8) {
                const int tk = base + k0 + (lane >> 2);
                float pd[G];
#pragma unroll
                for (int g = 0; g < G; g++) pd[g] = 0.f;
                if (k0 + (lane >> 2) < ch && tk <= a.pos) {
                    const __half* kq = a.row(tk);
                    uint4 raw[2 * P2];
#pragma unroll
                    for (int c = 0; c < 2 * P2; c++)
                        if (8 * (part + 4 * c) < D) raw[c] = *(const uint4*)(kq + 8 * (part + 4 * c));
#pragma unroll
                    for (int c = 0; c < 2 * P2; c++) {
                        const int i = 8 * (part + 4 * c);
                        if (i >= D) break;
                        const __half2* hp = (const __half2*)&raw[c];
                        float2 k0v = __half22float2(hp[0]), k1v = __half22float2(hp[1]), k2v = __half22float2(hp[2]),
                               k3v = __half22float2(hp[3]);
#pragma unroll
                        for (int g = 0; g < G; g++) {
                            const float* qg = a.qs + g * QS;
                            float4 qa = *(const float4*)(qg + i), qb = *(const float4*)(qg + i + 4);
                            pd[g] += qa.x * k0v.x + qa.y * k0v.y + qa.z * k1v.x + qa.w * k1v.y + qb.x * k2v.x +
                                qb.y * k2v.y + qb.z * k3v.x + qb.w * k3v.y;
                        }
                    }
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    pd[g] += __shfl_xor_sync(0xffffffffu, pd[g], 1);
                    pd[g] += __shfl_xor_sync(0xffffffffu, pd[g], 2);
                    float v = __shfl_sync(0xffffffffu, pd[g], 4 * (lane & 7));
                    if ((lane >> 3) == (k0 >> 3)) dot[g] = v;
                }
            }
        } else if (live) {
            for (int i = 0; i < D; i++) {
                float k = __half2float(kp[i]);
#pragma unroll
                for (int g = 0; g < G; g++) dot[g] += a.qs[g * QS + i] * k;
            }
        }
        float s[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            s[g] = -INFINITY;
            if (live) {
                s[g] = dot[g] * a.scale;
                if (a.softcap != 0.f) s[g] = a.softcap * (float)tanh((double)s[g]);
            }
        }
        float p[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mn = fmaxf(m[g], warp_max(s[g])); // finite: key base ≤ pos is valid
            float alpha = expf(m[g] - mn);
            p[g] = live ? expf(s[g] - mn) : 0.f;
            l[g] = l[g] * alpha + warp_sum(p[g]);
#pragma unroll
            for (int i = 0; i < P2; i++) acc[g][i].x *= alpha, acc[g][i].y *= alpha;
            m[g] = mn;
        }
        for (int j0 = 0; j0 < nk; j0 += NV) {
            if (j0 > 0) vload(j0);
#pragma unroll
            for (int u = 0; u < NV; u++) {
                if (j0 + u >= nk) break;
                float2 v[P2];
#pragma unroll
                for (int i = 0; i < P2; i++) v[i] = __half22float2(*(const __half2*)&vr[u][i]);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float pj = __shfl_sync(0xffffffffu, p[g], (j0 + u) & 31);
#pragma unroll
                    for (int i = 0; i < P2; i++) acc[g][i].x += pj * v[i].x, acc[g][i].y += pj * v[i].y;
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}

// fa_group is how many query heads one block of the decode kernels
// serves: all of them share their KV head, whose rows it loads once. The
// largest of 4, 3, 2 that divides the heads a KV head serves and keeps
// the group's accumulators within 8 dimension pairs a lane (a head of
// 256 takes 4: groups of at most 2), else 1; launch.go's faGroup is the
// same.
__host__ __device__ constexpr int fa_group(u32 n_head, u32 n_head_kv, u32 head_dim) {
    return (n_head / n_head_kv) % 4 == 0 && head_dim <= 128 ? 4
        : (n_head / n_head_kv) % 3 == 0 && head_dim <= 128  ? 3
        : (n_head / n_head_kv) % 2 == 0                     ? 2
                                                            : 1;
}

// fa_smem is the decode kernels' dynamic shared memory for G heads a
// block, W warps and head width D: the queries, each warp's maximum, sum
// and merge weight per head, each warp's accumulators per head, and each
// head's 1/sum. launch.go's faShared is the same.
__host__ __device__ constexpr int fa_smem(int G, int W, int D) { return 4 * G * (fa_qs(D) + 3 * W + W * D + 1); }

// fa_keep stores a warp's accumulators into its rows of wacc ([G][W][D]).
template <int P2, int G> __device__ __forceinline__ void fa_keep(float2 (*acc)[P2], float* wacc, int W, int D) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < P2; i++) {
            int d = 64 * i + 2 * lane;
            float* wr = wacc + ((size_t)g * W + warp) * D;
            if (d < D) wr[d] = acc[g][i].x;
            if (d + 1 < D) wr[d + 1] = acc[g][i].y;
        }
}

// fa_block is the kernels' body for G query heads a block (blockIdx.x is
// the group, blockIdx.y the row); flash_attn passes softcap 0, window 0
// and no sinks, which inlining folds away. Heads wider than 64·MAXP2 are
// left out of the instance (flash_attn_lean's).
template <int G, int MAXP2 = FA_P2>
__device__ __forceinline__ void fa_block(float* sm, const float* q, const u8* kv, const float* sinks, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window) {
    const int W = blockDim.x >> 5, D = head_dim, QS = fa_qs(D);
    float* qs = sm;                  // [G][QS]
    float* wm = qs + G * QS;         // [G][W] each warp's maximum,
    float* wl = wm + G * W;          // its sum,
    float* wf = wl + G * W;          // and its weight in the merge
    float* wacc = wf + G * W;        // [G][W][D]
    float* winv = wacc + G * W * D;  // [G] 1 / the merged sum
    int row = blockIdx.y, h0 = blockIdx.x * G, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Every load the block needs first is issued before any is used (the
    // request table and q have rows for the variant's whole capacity); the
    // request table's before dep_sync.
    int rows = io[IO_ROWS];
    int pos = io_row(io, row, ROW_POS), slot = io_row(io, row, ROW_SLOT), flags = io_row(io, row, ROW_FLAGS);
    u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    dep_sync();
    const float* qr = q + ((size_t)row * n_head + h0) * head_dim;
    float qv[G];
#pragma unroll
    for (int g = 0; g < G; g++) qv[g] = tid < D ? qr[g * D + tid] : 0.f;
    if (row >= rows || h0 >= (int)n_head || D > 64 * MAXP2 || W > FA_MAX_WARPS) return;
    FaArgs a;
    a.D = D;
    a.W = W;
    a.scale = scale;
    a.softcap = softcap;
    a.pos = pos;
    a.first = window != 0 && pos + 1 > (int)window ? pos + 1 - (int)window : 0;
    int kvh = h0 / (n_head / n_head_kv);
    a.kv = kv;
    a.kv_dim = n_head_kv * head_dim;
    a.page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * a.kv_dim * 2;
    a.ptab = io + pt + slot * mp;
    a.head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * a.kv_dim + (size_t)kvh * head_dim;
    a.vofs = (size_t)KV_PAGE_TOKENS * a.kv_dim;
    a.qs = qs;
    // As T-CPU (ggml's CPU paths), the query is rounded to F16 except in a
    // long prompt's rows: decided by the row's request, never by how many
    // rows share the step, so a request's bits do not depend on its batch.
    bool f16q = !(flags & ROW_LONG_PROMPT);
#pragma unroll
    for (int g = 0; g < G; g++)
        if (tid < D) qs[g * QS + tid] = f16q ? round_f16(qv[g]) : qv[g]; // head_dim ≤ 256 ≤ blockDim.x
    __syncthreads();
    float m[G], l[G];
    int p2 = (D + 63) / 64;
    if (p2 <= 1) {
        float2 acc[G][1];
        fa_warp<1, G>(a, m, l, acc);
        fa_keep<1, G>(acc, wacc, W, D);
    } else if (p2 == 2) {
        float2 acc[G][2];
        fa_warp<2, G>(a, m, l, acc);
        fa_keep<2, G>(acc, wacc, W, D);
    } else if constexpr (G <= 2 && MAXP2 > 2) { // fa_group: wider heads come in groups of at most 2
        float2 acc[G][FA_P2];
        fa_warp<FA_P2, G>(a, m, l, acc);
        fa_keep<FA_P2, G>(acc, wacc, W, D);
    }
#pragma unroll
    for (int g = 0; g < G; g++)
        if (lane == 0) wm[g * W + warp] = m[g], wl[g * W + warp] = l[g];
    __syncthreads();
    // The merge: each warp's state weighs exp(its maximum − the overall
    // one), the sink's too. Warp g merges head g's maxima and sums, a lane
    // a warp (W ≤ 32, G ≤ 4 ≤ W); then every thread sums its outputs' W
    // accumulators in warp order. (A thread looping over all W states, as
    // this did, made a chain of dependent shared loads as long as the
    // keys' phase at one row of the llama 7B shape.)
    if (warp < G) {
        const int g = warp;
        float mw = lane < W ? wm[g * W + lane] : -INFINITY;
        float M = warp_max(mw);
        if (sinks) M = fmaxf(M, sinks[h0 + g]); // finite: key pos is always seen
        float f = mw == -INFINITY ? 0.f : expf(mw - M);
        if (lane < W) wf[g * W + lane] = f;
        float L = warp_sum(lane < W ? wl[g * W + lane] * f : 0.f);
        if (sinks) L += expf(sinks[h0 + g] - M);
        if (lane == 0) winv[g] = L != 0.f ? 1.f / L : 0.f;
    }
    __syncthreads();
    for (int i = tid; i < G * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        const float* f = wf + g * W;
        const float* a = wacc + (size_t)g * W * D + d;
        float o = 0.f;
#pragma unroll 8
        for (int w = 0; w < W; w++)
            if (f[w] != 0.f) o += a[(size_t)w * D] * f[w];
        y[((size_t)row * n_head + h0 + g) * D + d] = o * winv[g];
    }
}

// fa_run is the kernels' body: blocks of fa_group query heads, W warps
// each, in fa_smem's dynamic shared memory.
__device__ __forceinline__ void fa_run(const float* q, const u8* kv, const float* sinks, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window) {
    extern __shared__ __align__(16) float fa_sm[];
    switch (fa_group(n_head, n_head_kv, head_dim)) {
    case 4: fa_block<4>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window); break;
    case 3: fa_block<3>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window); break;
    case 2: fa_block<2>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window); break;
    default: fa_block<1>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window);
    }
}
#endif

#if FAMILY == FAMILY_FLASH_ATTN
#ifndef CAT
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#endif
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    fa_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0);
}

// flash_attn_rest is the main kernel for the rows that are no prompt's
// (ROW_PROMPT clear: decode rows a serving step mixes into a prefill),
// launched beside flash_attn_tile (launch.go's Launch.Rest), which takes
// the prompt rows: its warps of 16 rows take a pass over the keys per
// slot among them, sixteen passes for sixteen decode rows.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _rest)(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    int row = blockIdx.y;
    if (row < (int)io[IO_ROWS] && (io_row(io, row, ROW_FLAGS) & ROW_PROMPT)) return; // the request table is not written during a replay
    fa_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0);
}

// flash_attn_lean is the same for one query head a block, heads of at
// most 128 and blocks of at most FA_LEAN_WARPS warps, compiled for four
// such blocks a multiprocessor (64 registers a thread, where the main
// entry's every group and width take 128): launch.go picks it for decode
// steps of many blocks, which then keep twice the keys and values in
// flight.
#define FA_LEAN_WARPS 8
extern "C" __global__ void __launch_bounds__(32 * FA_LEAN_WARPS, 4) CAT(NAME, _lean)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    extern __shared__ __align__(16) float fa_sm[];
    fa_block<1, 2>(fa_sm, q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0);
}

// flash_attn_tile: prefill on tensor cores, for head widths 64 and 128
// (launch.go picks it for prefill variants of at least 64 rows). A warp
// takes 16 consecutive rows of one head; grid (heads, rows/64), FAT_WARPS
// warps a block. Per 16-key tile (one KV page, staged in the warp's shared
// memory) it forms S = Q·Kᵀ with mma.m16n8k16 (Q and K in F16, S in F32),
// keeps the online softmax in
// F32, and adds P·V with P rounded to F16 — flash attention as ggml's
// CUDA kernels do it, which differs from the F32 oracle by those two
// roundings (within the parity test's tolerance). It takes the prompt
// rows (ROW_PROMPT); the step's others are flash_attn_rest's. Rows in a
// warp's 16 that belong to different slots (a step's prompts meet there)
// take one pass over the keys per slot; a row outside the pass's slot
// sees all its scores masked and keeps its state.
#define FAT_WARPS 4
#define FAT_NONE 0x7fffffff // no slot
#define FAT_ROWS (16 * FAT_WARPS) // rows a block; fatRows in launch.go

__device__ __forceinline__ void mma_f16(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 h2_bits(__half2 h) { return *(u32*)&h; }

__device__ __forceinline__ u32 pack_f16(float lo, float hi) { return h2_bits(__floats2half2_rn(lo, hi)); }

// ldsm4 loads four 8×8 matrices of halves from shared memory, lane L
// giving the address of row L%8 of matrix L/8 (trans: transposed), as
// mma's B fragments.
__device__ __forceinline__ void ldsm4(u32* r, const __half* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(u32* r, const __half* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

template <int D>
__device__ __forceinline__ void fat_warp(const float* q, const u8* kv, const u32* io, float* y, int row0, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, float scale, int h, __half* kt, __half* vt) {
    constexpr int KS = D / 16, NB = D / 8, RS = D + 8; // RS: a tile row's stride in halves, padded against bank conflicts
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rows = io[IO_ROWS];
    // This lane's two rows (A and C fragments): row0+g and row0+g+8.
    const int r[2] = {row0 + g, row0 + g + 8};
    int pos[2], slot[2];
    bool live[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        live[i] = r[i] < rows && (io_row(io, r[i], ROW_FLAGS) & ROW_PROMPT); // the others are NAME_rest's
        pos[i] = live[i] ? (int)io_row(io, r[i], ROW_POS) : -1;
        slot[i] = live[i] ? (int)io_row(io, r[i], ROW_SLOT) : FAT_NONE;
    }
    u32 qf[KS][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float* qr = q + ((size_t)min(r[i], rows - 1) * n_head + h) * D;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            float2 a = live[i] ? *(const float2*)(qr + 16 * ks + 2 * t) : make_float2(0.f, 0.f);
            float2 b = live[i] ? *(const float2*)(qr + 16 * ks + 2 * t + 8) : make_float2(0.f, 0.f);
            qf[ks][i] = pack_f16(a.x, a.y), qf[ks][2 + i] = pack_f16(b.x, b.y);
        }
    }
    const u32 kv_dim = n_head_kv * D;
    const size_t page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    const size_t head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * kv_dim + (size_t)(h / (n_head / n_head_kv)) * D;
    const size_t vofs = (size_t)KV_PAGE_TOKENS * kv_dim;
    const u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    float o[NB][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
    for (int done = -1;;) {
        // The next slot among the warp's rows, and how far its rows see.
        int s = FAT_NONE;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (slot[i] > done) s = min(s, slot[i]);
        for (int o2 = 16; o2 > 0; o2 >>= 1) s = min(s, __shfl_xor_sync(0xffffffffu, s, o2));
        if (s == FAT_NONE) break;
        int hi = -1;
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (slot[i] == s) hi = max(hi, pos[i]);
        for (int o2 = 16; o2 > 0; o2 >>= 1) hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o2));
        const u32* ptab = io + pt + (size_t)s * mp;
        for (int t0 = 0; t0 <= hi; t0 += KV_PAGE_TOKENS) {
            const __half* kp = (const __half*)(kv + (size_t)ptab[t0 / KV_PAGE_TOKENS] * page_bytes) + head_ofs;
            // The page's K and V rows into the warp's tiles, 16 bytes a
            // lane at a time. V rows past the pass's last position may be
            // stale cache bytes, NaN included, which a zero P would not
            // cancel: they are stored as 0. (Stale K only makes scores
            // that the mask replaces.)
            __syncwarp(); // the previous tile's readers are done
#pragma unroll
            for (int c = lane; c < KV_PAGE_TOKENS * (D / 8); c += 32) {
                int kr = c / (D / 8), col = (c % (D / 8)) * 8;
                const __half* src = kp + (size_t)kr * kv_dim + col;
                *(uint4*)(kt + kr * RS + col) = *(const uint4*)src;
                *(uint4*)(vt + kr * RS + col) = t0 + kr <= hi ? *(const uint4*)(src + vofs) : make_uint4(0, 0, 0, 0);
            }
            __syncwarp();
            float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int ks = 0; ks < KS; ks += 2) {
                    u32 b[4]; // keys 8nb.., dimensions 16ks.. in four 8-wide pieces
                    ldsm4(b, kt + (8 * nb + (lane & 7)) * RS + 16 * ks + 8 * (lane >> 3));
                    mma_f16(sc[nb], qf[ks], b[0], b[1]);
                    mma_f16(sc[nb], qf[ks + 1], b[2], b[3]);
                }
            // Scale and mask: element e of block nb is row r[e>>1], key t0+8nb+2t+(e&1).
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1, key = t0 + 8 * nb + 2 * t + (e & 1);
                    bool ok = slot[i] == s && key <= pos[i];
                    sc[nb][e] = ok ? sc[nb][e] * scale : -INFINITY;
                    mx[i] = fmaxf(mx[i], sc[nb][e]);
                }
            float alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                float mn = fmaxf(m[i], mx[i]);
                alpha[i] = mn == -INFINITY ? 1.f : expf(m[i] - mn);
                m[i] = mn;
            }
#pragma unroll
            for (int nb = 0; nb < 2; nb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = e >> 1;
                    sc[nb][e] = sc[nb][e] == -INFINITY ? 0.f : expf(sc[nb][e] - m[i]);
                    sum[i] += sc[nb][e];
                }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
                l[i] = l[i] * alpha[i] + sum[i];
            }
#pragma unroll
            for (int nb = 0; nb < NB; nb++) o[nb][0] *= alpha[0], o[nb][1] *= alpha[0], o[nb][2] *= alpha[1], o[nb][3] *= alpha[1];
            // P as the A fragment of P·V: keys 2t.. of block 0, then of block 1.
            u32 pa[4] = {pack_f16(sc[0][0], sc[0][1]), pack_f16(sc[0][2], sc[0][3]), pack_f16(sc[1][0], sc[1][1]),
                pack_f16(sc[1][2], sc[1][3])};
            // V's B fragments, two 8-wide column blocks at a time: keys 0-7
            // and 8-15 of each, transposed.
#pragma unroll
            for (int nb = 0; nb < NB; nb += 2) {
                u32 b[4];
                ldsm4t(b, vt + (8 * ((lane >> 3) & 1) + (lane & 7)) * RS + 8 * (nb + (lane >> 4)));
                mma_f16(o[nb], pa, b[0], b[1]);
                mma_f16(o[nb + 1], pa, b[2], b[3]);
            }
        }
        done = s;
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!live[i]) continue;
        float inv = l[i] != 0.f ? 1.f / l[i] : 0.f;
        float* out = y + ((size_t)r[i] * n_head + h) * D;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) *(float2*)(out + 8 * nb + 2 * t) = make_float2(o[nb][2 * i] * inv, o[nb][2 * i + 1] * inv);
    }
}

extern "C" __global__ void __launch_bounds__(32 * FAT_WARPS) CAT(NAME, _tile)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    dep_sync();
    int h = blockIdx.x, row0 = (blockIdx.y * FAT_WARPS + (threadIdx.x >> 5)) * 16;
    if (row0 >= (int)io[IO_ROWS] || h >= (int)n_head) return;
    __shared__ __align__(16) __half kt[FAT_WARPS][KV_PAGE_TOKENS * (128 + 8)], vt[FAT_WARPS][KV_PAGE_TOKENS * (128 + 8)];
    int w = threadIdx.x >> 5;
    float scale = __uint_as_float(scale_bits);
    if (head_dim == 64) fat_warp<64>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, kt[w], vt[w]);
    else if (head_dim == 128) fat_warp<128>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, kt[w], vt[w]);
}
#endif

#if FAMILY == FAMILY_FLASH_ATTN_EXT
// The oracle's scale is the spec's divided by softcap when there is one
// (ggml_flash_attn_ext's), rounded to float.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const float* sinks, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u32 softcap_bits,
    u32 window) {
    float scale = __uint_as_float(scale_bits), softcap = __uint_as_float(softcap_bits);
    if (softcap != 0.f) scale /= softcap;
    fa_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window);
}
#endif

#if FAMILY == FAMILY_ADD // add: x += y over the active rows; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const float* y, const u32* io, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) x[i] += y[i];
}
#endif

#if FAMILY == FAMILY_ADD_GATED // add_gated: x += sigmoid(g·w)·y per row; grid (rows)
// The gate's dot takes float products summed in double, and the sigmoid
// is taken in double, each rounded to float, as the oracle does (it sums
// in another order).
extern "C" __global__ void __launch_bounds__(256)
    NAME(float* x, const float* y, const float* g, const float* w, const u32* io, u32 cols, u32 k) {
    dep_sync();
    __shared__ double part[32];
    __shared__ float gate;
    int row = blockIdx.x, tid = threadIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    const float* gr = g + (size_t)row * k;
    double s = 0;
    for (int i = tid; i < (int)k; i += blockDim.x) s += (double)(gr[i] * w[i]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((tid & 31) == 0) part[tid >> 5] = s;
    __syncthreads();
    if (tid == 0) {
        double t = 0;
        for (int i = 0; i < (int)blockDim.x >> 5; i++) t += part[i];
        gate = (float)(1.0 / (1.0 + exp(-(double)(float)t)));
    }
    __syncthreads();
    float* xr = x + (size_t)row * cols;
    const float* yr = y + (size_t)row * cols;
    for (int i = tid; i < (int)cols; i += blockDim.x) xr[i] += gate * yr[i];
}
#endif

#if FAMILY == FAMILY_SWIGLU // swiglu: y = silu(gate)·up; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    float v = gate[i];
    y[i] = v / (1.f + (float)exp(-(double)v)) * up[i];
}
#endif

#if FAMILY == FAMILY_GEGLU // geglu: y = gelu(gate)·up; grid (rows·cols/256)
// GELU as ggml's F16 table gives it (GGML_GELU_FP16, the oracle's
// geluF16): 0 at or below -10, x at or above 10, else ggml_gelu_f32's tanh
// form in float of the gate rounded to F16, the result rounded to F16;
// tanh in double, rounded.
__device__ __forceinline__ float gelu_f16(float x) {
    if (x <= -10.f) return 0.f;
    if (x >= 10.f) return x;
    const float a = 0.044715f, c = 0.79788456080286535587989211986876f;
    float h = round_f16(x);
    float t = (float)tanh((double)(c * h * (1.f + a * h * h)));
    return round_f16(0.5f * h * (1.f + t));
}
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    y[i] = gelu_f16(gate[i]) * up[i];
}
#endif

#if FAMILY == FAMILY_SCALE // scale: x *= factor over the active rows; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const u32* io, u32 cols, u32 factor_bits) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) x[i] *= __uint_as_float(factor_bits);
}
#endif

#if FAMILY == FAMILY_LOGIT_SOFTCAP // logit_softcap: cap·tanh(l/cap) in each wanting row's slot; grid (rows, n_vocab/SOFTCAP_CHUNK)
// As the oracle (ggml's scale, tanh, scale): l·(1/cap) with 1/cap rounded
// to float, tanh in double rounded, times cap.
#define SOFTCAP_CHUNK 4096 // softcapChunk in launch.go
extern "C" __global__ void __launch_bounds__(256) NAME(float* logits, const u32* io, u32 n_vocab, u32 cap_bits) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    float c = __uint_as_float(cap_bits), inv = 1.f / c;
    float* l = logits + (size_t)io_row(io, row, ROW_SLOT) * n_vocab;
    int end = min((int)n_vocab, (int)(blockIdx.y + 1) * SOFTCAP_CHUNK);
    for (int j = blockIdx.y * SOFTCAP_CHUNK + threadIdx.x; j < end; j += blockDim.x)
        l[j] = (float)tanh((double)(l[j] * inv)) * c;
}
#endif

#if FAMILY == FAMILY_ATTN_TEMP // attn_temp: each row scaled by its position's temperature; grid (rows)
// f = 1 + temp_scale·ln(⌊pos/floor⌋ + 1): the quotient and floor in
// float, the rest in double, rounded to float, as the oracle does.
extern "C" __global__ void __launch_bounds__(256)
    NAME(float* x, const u32* io, u32 cols, u32 temp_bits, u32 floor_) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    float pos = (float)io_row(io, row, ROW_POS);
    float q = floorf(pos / (float)floor_);
    float f = (float)(log((double)q + 1.0) * (double)__uint_as_float(temp_bits) + 1.0);
    float* xr = x + (size_t)row * cols;
    for (int i = threadIdx.x; i < (int)cols; i += blockDim.x) xr[i] *= f;
}
#endif

#if FAMILY == FAMILY_ARGMAX // argmax: tokens[slot] = first largest logit, rows that want logits; grid (rows), 1024 threads
#ifndef CAT
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#endif
// argmax_allowed is the first largest of l[0..n_vocab) among the tokens
// whose bit is set in mask (every token where mask is null), -1 where none
// is: a block of 1024 threads a row, so a single-row step's argmax is one
// block, whose loads in flight bound it (a vocabulary of 152k is 600 KB).
// The mask is tested per float4, whose four bits share a word.
__device__ __forceinline__ int argmax_allowed(const float* l, const u32* mask, u32 n_vocab) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float best = -INFINITY;
    int at = -1, tail = 0;
    if (((size_t)l & 15) == 0) { // float4 loads, several in flight; indices still rise per thread
        int n4 = n_vocab / 4;
        tail = 4 * n4;
        const float4* l4 = (const float4*)l;
#pragma unroll 4
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            u32 m = mask ? (mask[i >> 3] >> (4 * (i & 7))) & 15u : 15u;
            if (m == 0) continue;
            float4 v = l4[i];
            if ((m & 1) && (at < 0 || v.x > best)) best = v.x, at = 4 * i;
            if ((m & 2) && (at < 0 || v.y > best)) best = v.y, at = 4 * i + 1;
            if ((m & 4) && (at < 0 || v.z > best)) best = v.z, at = 4 * i + 2;
            if ((m & 8) && (at < 0 || v.w > best)) best = v.w, at = 4 * i + 3;
        }
    }
    for (int j = tail + threadIdx.x; j < (int)n_vocab; j += blockDim.x)
        if ((!mask || (mask[j >> 5] >> (j & 31)) & 1u) && (at < 0 || l[j] > best)) best = l[j], at = j;
    for (int o = 16; o > 0; o >>= 1) {
        float b2 = __shfl_xor_sync(0xffffffffu, best, o);
        int a2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 >= 0 && (at < 0 || b2 > best || (b2 == best && a2 < at))) best = b2, at = a2;
    }
    if (lane == 0) bv[warp] = best, bi[warp] = at;
    __syncthreads();
    if (threadIdx.x != 0) return -1;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (bi[w] >= 0 && (at < 0 || bv[w] > best || (bv[w] == best && bi[w] < at))) best = bv[w], at = bi[w];
    return at;
}

extern "C" __global__ void __launch_bounds__(1024) NAME(const float* logits, const u32* io, u32* tokens, u32 n_vocab) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    int slot = io_row(io, row, ROW_SLOT);
    int at = argmax_allowed(logits + (size_t)slot * n_vocab, nullptr, n_vocab);
    if (threadIdx.x == 0) tokens[slot] = at;
}

// NAME_masked is the greedy choice of constrained rows, launched by the
// tier after a step's graph (not part of it): block b takes slot
// slots[b]'s largest logit among the tokens its mask allows (mask words
// of n_vocab bits, one run of words per block), -1 where none is.
extern "C" __global__ void __launch_bounds__(1024)
    CAT(NAME, _masked)(const float* logits, const u32* slots, const u32* masks, u32* tokens, u32 n_vocab, u32 words) {
    int slot = slots[blockIdx.x];
    int at = argmax_allowed(logits + (size_t)slot * n_vocab, masks + (size_t)blockIdx.x * words, n_vocab);
    if (threadIdx.x == 0) tokens[slot] = at;
}
#endif

#if FAMILY == FAMILY_MOE_ADD_BIAS // moe_add_bias: x[row, u, :] += b[e(row, u), :]; grid (rows·n_used·f/256)
extern "C" __global__ void __launch_bounds__(256)
    NAME(float* x, const float* b, const u32* route, const u32* io, u32 f, u32 n_used) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * n_used * f) return;
    size_t item = i / f, j = i % f;
    x[i] += b[(size_t)route[2 * item] * f + j];
}
#endif

#if FAMILY == FAMILY_SWIGLU_OAI // swiglu_oai: gpt-oss's clamped SwiGLU; grid (rows·cols/256)
// As the oracle (ggml's swiglu_oai): x = min(gate, limit), v =
// clamp(up, ±limit), y = x/(1 + expf(alpha·(0 - x)))·(v + 1), the
// exponential taken in double and rounded.
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols, u32 alpha_bits, u32 limit_bits) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    float alpha = __uint_as_float(alpha_bits), limit = __uint_as_float(limit_bits);
    float x = fminf(gate[i], limit);
    float v = fminf(fmaxf(up[i], -limit), limit);
    y[i] = x / (1.f + (float)exp((double)(alpha * (0.f - x)))) * (v + 1.f);
}
#endif

#if FAMILY == FAMILY_SSM_CONV || FAMILY == FAMILY_GATED_DELTA_NET
// slot_leader tells whether row is its slot's first row of the step (no
// earlier active row has its slot): the block of that row then runs every
// row of the slot, in order, since a recurrent state advances row by row.
// The whole block calls it (it synchronizes).
__device__ __forceinline__ bool slot_leader(const u32* io, int row, u32 slot) {
    int hit = 0;
    for (int j = threadIdx.x; j < row; j += blockDim.x) hit |= io_row(io, j, ROW_SLOT) == slot;
    return !__syncthreads_or(hit);
}

// silu_f is ggml's SiLU as T-CUDA's swiglu takes it: x/(1 + expf(-x)), the
// exponential in double, rounded (T-CPU takes ggml's 16-lane polynomial
// over whole groups of 16 channels, a few ulp away).
__device__ __forceinline__ float silu_f(float x) { return x / (1.f + (float)exp(-(double)x)); }
#endif

#if FAMILY == FAMILY_SSM_CONV // ssm_conv: causal convolution + SiLU over each slot's rows; grid (rows, cols/256)
// The block of a slot's first row of the step runs the slot: a thread per
// channel slides its window (k-1 floats of state, oldest first) over the
// slot's rows in order. The sum is the oracle's: fmaf over the window,
// then the row's input.
extern "C" __global__ void __launch_bounds__(256) NAME(const float* x, const float* w, u8* state, const u32* io,
    float* y, u32 cols, u32 off, u32 k, u32 slot_bytes) {
    int row = blockIdx.x, rows = io[IO_ROWS];
    if (row >= rows) return;
    u32 slot = io_row(io, row, ROW_SLOT);
    if (!slot_leader(io, row, slot)) return;
    dep_sync();
    int ch = blockIdx.y * blockDim.x + threadIdx.x;
    if (ch >= (int)cols) return;
    int kw = k - 1;
    float* win = (float*)(state + (size_t)slot * slot_bytes + off) + (size_t)ch * kw;
    const float* wc = w + (size_t)ch * k;
    for (int i = row; i < rows; i++) {
        if (io_row(io, i, ROW_SLOT) != slot) continue;
        if (io_row(io, i, ROW_POS) == 0)
            for (int j = 0; j < kw; j++) win[j] = 0.f;
        float sum = 0.f;
        for (int j = 0; j < kw; j++) sum = fmaf(win[j], wc[j], sum);
        float xv = x[(size_t)i * cols + ch];
        y[(size_t)i * cols + ch] = silu_f(fmaf(xv, wc[kw], sum));
        for (int j = 0; j + 1 < kw; j++) win[j] = win[j + 1];
        if (kw > 0) win[kw - 1] = xv;
    }
}
#endif

#if FAMILY == FAMILY_GDN_GATES // gdn_gates: alpha = softplus(alpha + dt)·a, beta = sigmoid(beta) in place; grid (rows·heads/256)
// As the oracle (ggml's unary ops): softplus x above 20, else
// logf(1 + expf(x)); sigmoid 1/(1 + expf(-x)); exp and log in double,
// rounded.
extern "C" __global__ void __launch_bounds__(256)
    NAME(float* alpha, float* beta, const float* dt, const float* a, const u32* io, u32 heads) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * heads) return;
    int h = i % heads;
    float x = alpha[i] + dt[h];
    if (x <= 20.f) x = (float)log((double)(1.f + (float)exp((double)x)));
    alpha[i] = x * a[h];
    beta[i] = 1.f / (1.f + (float)exp(-(double)beta[i]));
}
#endif

#if FAMILY == FAMILY_GATED_DELTA_NET // gated_delta_net: the gated delta rule over each slot's rows; grid (rows, h_v)
// The block of a slot's first row of the step runs the slot's v head h
// over the slot's rows in order. Row j of the (transposed) state is
// independent of the others within a step: warp w owns rows w, w+8, …,
// lane l their columns l, l+32, …, so the state stays in registers for
// heads of up to GDN_REG_S columns (GDN_REG_S² floats over 256 threads);
// wider heads update it in memory. The dot products are warp sums (the
// oracle sums in ggml's AVX-512 order).
#define GDN_REG_S 128
#define GDN_WARPS 8

// gdn_row updates state rows j = warp + GDN_WARPS·r (r < RW) for one
// token: decay, delta against k, rank-one update, output against q. S is
// the lane's registers (REG) or the state in memory.
template <bool REG, int RW, int EL>
__device__ __forceinline__ void gdn_row(float (&S)[RW][EL], float* m, int s, const float* qs, const float* ks,
    const float* vs, float decay, float b, float scale, float* out) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int rw = REG ? RW : (s + GDN_WARPS - 1) / GDN_WARPS;
#pragma unroll
    for (int r = 0; r < (REG ? RW : 1); r++) {
        for (int rr = REG ? r : 0; rr < (REG ? r + 1 : rw); rr++) {
            int j = warp + GDN_WARPS * rr;
            if (j >= s) break;
            float* mj = m + (size_t)j * s;
            float d = 0.f;
            if (REG) {
#pragma unroll
                for (int u = 0; u < EL; u++) {
                    int t = lane + 32 * u;
                    if (t < s) S[r][u] *= decay, d = fmaf(S[r][u], ks[t], d);
                }
            } else {
                for (int t = lane; t < s; t += 32) {
                    float v = mj[t] * decay;
                    mj[t] = v;
                    d = fmaf(v, ks[t], d);
                }
            }
            float delta = (vs[j] - warp_sum(d)) * b;
            float o = 0.f;
            if (REG) {
#pragma unroll
                for (int u = 0; u < EL; u++) {
                    int t = lane + 32 * u;
                    if (t < s) S[r][u] = fmaf(ks[t], delta, S[r][u]), o = fmaf(S[r][u], qs[t], o);
                }
            } else {
                for (int t = lane; t < s; t += 32) {
                    float v = fmaf(ks[t], delta, mj[t]);
                    mj[t] = v;
                    o = fmaf(v, qs[t], o);
                }
            }
            o = warp_sum(o);
            if (lane == 0) out[j] = o * scale;
        }
    }
}

// gdn_norm_scale is ggml_l2_norm's 1/max(‖x‖, eps) of s floats, for one
// warp: the squares summed in double, the root in float.
__device__ __forceinline__ float gdn_norm_scale(const float* x, int s, float eps) {
    double sum = 0;
    for (int t = threadIdx.x & 31; t < s; t += 32) sum += (double)(x[t] * x[t]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return 1.f / fmaxf(sqrtf((float)sum), eps);
}

template <bool REG>
__device__ void gdn_run(const float* qkv, const float* alpha, const float* beta, u8* state, const u32* io, float* y,
    u32 off, int hk, int hv, int s, float eps, u32 slot_bytes, u32 grouped, int row, u32 slot) {
    constexpr int RW = REG ? GDN_REG_S / GDN_WARPS : 1, EL = REG ? GDN_REG_S / 32 : 1;
    __shared__ float qs[2 * GDN_REG_S], ks[2 * GDN_REG_S], vs[2 * GDN_REG_S];
    __shared__ float sc[2];
    int h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, rows = io[IO_ROWS];
    int c = (2 * hk + hv) * s;
    int kh = grouped ? h / (hv / hk) : h % hk; // the q and k head of v head h
    float* m = (float*)(state + (size_t)slot * slot_bytes + off) + (size_t)h * s * s;
    float scale = 1.f / sqrtf((float)s);
    float S[RW][EL];
    if (REG) {
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < EL; u++) {
                int j = warp + GDN_WARPS * r, t = lane + 32 * u;
                S[r][u] = j < s && t < s ? m[(size_t)j * s + t] : 0.f;
            }
    }
    for (int i = row; i < rows; i++) {
        if (io_row(io, i, ROW_SLOT) != slot) continue;
        if (io_row(io, i, ROW_POS) == 0) {
            if (REG) {
#pragma unroll
                for (int r = 0; r < RW; r++)
#pragma unroll
                    for (int u = 0; u < EL; u++) S[r][u] = 0.f;
            } else {
                __syncthreads();
                for (int t = tid; t < s * s; t += blockDim.x) m[t] = 0.f;
            }
        }
        const float* rw = qkv + (size_t)i * c;
        for (int t = tid; t < s; t += blockDim.x) {
            qs[t] = rw[kh * s + t];
            ks[t] = rw[(hk + kh) * s + t];
            vs[t] = rw[(2 * hk + h) * s + t];
        }
        __syncthreads();
        if (warp < 2) {
            float f = gdn_norm_scale(warp ? ks : qs, s, eps);
            if (lane == 0) sc[warp] = f;
        }
        __syncthreads();
        for (int t = tid; t < s; t += blockDim.x) qs[t] *= sc[0], ks[t] *= sc[1];
        __syncthreads();
        float decay = (float)exp((double)alpha[(size_t)i * hv + h]), b = beta[(size_t)i * hv + h];
        gdn_row<REG, RW, EL>(S, m, s, qs, ks, vs, decay, b, scale, y + ((size_t)i * hv + h) * s);
        __syncthreads(); // qs, ks, vs are reused
    }
    if (REG) {
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < EL; u++) {
                int j = warp + GDN_WARPS * r, t = lane + 32 * u;
                if (j < s && t < s) m[(size_t)j * s + t] = S[r][u];
            }
    }
}

extern "C" __global__ void __launch_bounds__(256) NAME(const float* qkv, const float* alpha, const float* beta,
    u8* state, const u32* io, float* y, u32 off, u32 h_k, u32 h_v, u32 s, u32 eps_bits, u32 slot_bytes, u32 grouped) {
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || s > 2 * GDN_REG_S) return;
    u32 slot = io_row(io, row, ROW_SLOT);
    if (!slot_leader(io, row, slot)) return;
    dep_sync();
    float eps = __uint_as_float(eps_bits);
    if (s <= GDN_REG_S)
        gdn_run<true>(qkv, alpha, beta, state, io, y, off, h_k, h_v, s, eps, slot_bytes, grouped, row, slot);
    else gdn_run<false>(qkv, alpha, beta, state, io, y, off, h_k, h_v, s, eps, slot_bytes, grouped, row, slot);
}
#endif

#if FAMILY == FAMILY_RMS_NORM_GATED // rms_norm_gated: y = rms_norm(x per group)·w·silu(z); grid (rows, cols/group)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const float* w, const float* z, const u32* io, float* y, u32 cols, u32 group, u32 eps_bits) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    size_t o = (size_t)row * cols + (size_t)blockIdx.y * group;
    float scale = rms_scale(x + o, group, __uint_as_float(eps_bits));
    for (int j = threadIdx.x; j < (int)group; j += blockDim.x) {
        float g = z[o + j];
        float v = (x[o + j] * scale) * w[j];
        y[o + j] = v * (g / (1.f + (float)exp(-(double)g)));
    }
}
#endif

#if FAMILY == FAMILY_SPLIT_HALVES // split_halves: each head's halves to a and b; grid (rows·heads·width/256)
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* x, const u32* io, float* a, float* b, u32 heads, u32 width) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * heads * width) return;
    size_t hd = i / width, t = i % width;
    a[i] = x[2 * hd * width + t];
    b[i] = x[(2 * hd + 1) * width + t];
}
#endif

#if FAMILY == FAMILY_MUL_SIGMOID // mul_sigmoid: x ·= sigmoid(g); grid (rows·cols/256)
// sigmoid as ggml's: 1/(1 + expf(-g)), the exponential in double, rounded.
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const float* g, const u32* io, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) x[i] *= 1.f / (1.f + (float)exp(-(double)g[i]));
}
#endif

#if FAMILY == FAMILY_COPY_COLS // copy_cols: y[r] = x[r][off..off+cols) of rows of stride; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256) NAME(const float* x, const u32* io, float* y, u32 cols, u32 off, u32 stride) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    size_t r = i / cols, c = i % cols;
    y[i] = x[r * stride + off + c];
}
#endif

#if FAMILY == FAMILY_ZERO // zero: y = 0 over the active rows; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256) NAME(float* y, const u32* io, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) y[i] = 0.f;
}
#endif

#if FAMILY == FAMILY_MUL_VEC // mul_vec: x[r][c] *= w[c] over the active rows; grid (rows·cols/256)
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const float* w, const u32* io, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)io[IO_ROWS] * cols) x[i] *= w[i % cols];
}
#endif

#if FAMILY == FAMILY_MOE_ROUTE_SCALE // moe_route_scale: each route's weight *= s[expert]; grid (rows·n_used/256)
extern "C" __global__ void __launch_bounds__(256) NAME(u32* route, const float* s, const u32* io, u32 n_used) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * n_used) return;
    route[2 * i + 1] = __float_as_uint(__uint_as_float(route[2 * i + 1]) * s[route[2 * i]]);
}
#endif
