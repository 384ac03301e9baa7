// fa.cuh: the decode attention body shared by flash_attn and
// flash_attn_ext (family/flash_attn.cuh, family/flash_attn_ext.cuh).
#pragma once
#include "common.cuh"

// flash_attn and flash_attn_ext: one block per (group of query heads
// sharing a KV head, row); grid (heads / fa_group, rows), W = blockDim/32
// warps a block (launch.go's faWarps: more for launches of few blocks, so
// that a decode step of a few rows still keeps the GPU's warps busy).
// Flash decoding in F32: the block's warps split the row's keys (warp w
// takes the w-th chunk of each W), each keeps an online softmax
// (running maximum, sum and V accumulator) over its keys, and the warps'
// states are merged at the end (and for the _split entries, whose grid's
// z splits a long row's keys into ranges, the blocks' states after that:
// fa_split_range). A lane scores one key at a time against
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

// Flash decoding across blocks: the _split entries (launch.go's
// EntrySplit, for decode steps of few blocks) give each (head group, row)
// gridDim.z blocks, which split a long row's keys between them. The keys
// first..pos (n of them), past FA_SPLIT_MIN, are cut into units of
// FA_CHUNK, and each block takes ceil(units / gridDim.z) consecutive units (the last
// block's range ends at pos), and blocks past the last range leave at
// once. All of it follows from the row's position, read on the device, so
// one captured graph serves every length up to the context's: the grid is
// fixed (launch.go's faSplits), the ranges are not. A row of at most
// FA_SPLIT_MIN keys is one range, and its block runs exactly the unsplit
// kernel's arithmetic (same bits). Splitting from 513 keys left the qwen3
// 0.6B shape's tg128 after a 512-token prompt 3% slower (H200), which the
// merge's latency would explain; the threshold is not yet measured. Each block of a split row merges its
// warps' states without the sink and stores the result — per head its
// maximum M, its sum L and its accumulator relative to M — in the staging
// buffer (fa_part); the last block of the row's head group to count
// itself in (fa_split_last) merges the ranges' states in range order
// (fa_split_merge), so the bits depend on the row's length and the grid,
// never on which block finishes when.
#define FA_CHUNK 512
#define FA_SPLIT_MIN 1024 // keys a row has at most without being split
#define FA_MAX_SPLIT 32 // blocks a split row's head group takes at most: a lane each in the merge
// FA_COUNTERS is MT_COUNTERS in mmt.cuh: the staging buffer starts with
// that many counters, zero between launches, one per (row, head group)
// here (launch.go splits launches of at most that many blocks).
#define FA_COUNTERS 256

// fa_split_range narrows a row's keys first..pos to block z's range of
// nz blocks and returns how many ranges the row has: 1 when the row is
// not split (block 0 takes all its keys), 0 when block z has none.
__device__ __forceinline__ int fa_split_range(int& first, int& pos, int z, int nz) {
    const int n = pos + 1 - first;
    if (nz <= 1 || n <= FA_SPLIT_MIN) return z == 0 ? 1 : 0;
    const int units = (n + FA_CHUNK - 1) / FA_CHUNK;
    const int chunk = (units + nz - 1) / nz * FA_CHUNK;
    const int nch = (n + chunk - 1) / chunk;
    if (z >= nch) return 0;
    first += z * chunk;
    pos = min(pos, first + chunk - 1);
    return nch;
}

// fa_part is the partial state of range z of the block's head group in
// row row, past the staging buffer's counters: [G] maxima, [G] sums, [G][D]
// accumulators. launch.go's faStaged sizes the buffer.
__device__ __forceinline__ float* fa_part(u8* stg, int row, int z, int G, int D) {
    const size_t cell = (size_t)row * gridDim.x + blockIdx.x;
    return (float*)(stg + 4 * FA_COUNTERS) + (cell * gridDim.z + z) * (size_t)G * (D + 2);
}

// fa_split_last counts the block in for its row's head group, once all
// its threads have stored its partial state, and tells the whole block
// whether it was the last of the row's nch ranges to do so. The last sets
// the counter back to zero for the next launch (the others are done with
// it) and sees every other block's partial state.
__device__ bool fa_split_last(u8* stg, int row, int nch) {
    __shared__ int last;
    u32* count = (u32*)stg + (size_t)row * gridDim.x + blockIdx.x;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(count, 1u) == (u32)nch - 1;
        if (last) *count = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// fa_split_merge merges the nch partial states of the block's G heads in
// row row in range order: each range weighs exp(its maximum − the overall
// one), head h's sink joins as a key with no value, and out(i, o) gets
// output i (head i / D, dimension i % D) normalized. sm is shared memory
// for G·(FA_MAX_SPLIT + 1) floats; the block's W ≥ G warps all call it.
// The partial states are read past L1 (__ldcg): other blocks wrote them.
template <int G, typename Out>
__device__ __forceinline__ void fa_split_merge(u8* stg, int row, int nch, int D, const float* sinks, int h0, float* sm, Out out) {
    const float* p0 = fa_part(stg, row, 0, G, D);
    const size_t ps = (size_t)G * (D + 2); // one range's state
    float* zf = sm;                        // [G][FA_MAX_SPLIT] each range's weight
    float* zinv = zf + G * FA_MAX_SPLIT;   // [G] 1 / the merged sum
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp < G) {
        const int g = warp;
        float mz = lane < nch ? __ldcg(p0 + lane * ps + g) : -INFINITY; // finite: every range has keys
        float M = warp_max(mz);
        if (sinks) M = fmaxf(M, sinks[h0 + g]);
        float f = lane < nch ? expf(mz - M) : 0.f;
        zf[g * FA_MAX_SPLIT + lane] = f;
        float L = warp_sum(lane < nch ? __ldcg(p0 + lane * ps + G + g) * f : 0.f);
        if (sinks) L += expf(sinks[h0 + g] - M);
        if (lane == 0) zinv[g] = L != 0.f ? 1.f / L : 0.f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        const int g = i / D;
        const float* f = zf + g * FA_MAX_SPLIT;
        float o = 0.f;
        // Eight ranges' loads in flight; the sum stays in range order.
#pragma unroll 8
        for (int z = 0; z < nch; z++) o += __ldcg(p0 + z * ps + 2 * G + i) * f[z];
        out(i, o * zinv[g]);
    }
}

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
// the group, blockIdx.y the row, blockIdx.z the range of a split row);
// flash_attn passes softcap 0, window 0 and no sinks, which inlining
// folds away, and every entry but _split no staging buffer stg (no split).
// Heads wider than 64·MAXP2 are left out of the instance
// (flash_attn_lean's).
template <int G, int MAXP2 = FA_P2>
__device__ __forceinline__ void fa_block(float* sm, const float* q, const u8* kv, const float* sinks, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window,
    u8* stg) {
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
    int nch = 1; // the row's ranges (fa_split_range)
    if (stg) {
        nch = fa_split_range(a.first, a.pos, blockIdx.z, gridDim.z);
        if (nch == 0) return;
    }
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
    // keys' phase at one row of the llama 7B shape.) A range of a split
    // row stores its merged state unnormalized, without the sink, which
    // joins the merge of the ranges (fa_split_merge).
    float* part = nch > 1 ? fa_part(stg, row, blockIdx.z, G, D) : nullptr;
    if (warp < G) {
        const int g = warp;
        float mw = lane < W ? wm[g * W + lane] : -INFINITY;
        float M = warp_max(mw);
        if (sinks && !part) M = fmaxf(M, sinks[h0 + g]); // finite: key pos is always seen
        float f = mw == -INFINITY ? 0.f : expf(mw - M);
        if (lane < W) wf[g * W + lane] = f;
        float L = warp_sum(lane < W ? wl[g * W + lane] * f : 0.f);
        if (sinks && !part) L += expf(sinks[h0 + g] - M);
        if (lane == 0) winv[g] = L != 0.f ? 1.f / L : 0.f;
        if (lane == 0 && part) part[g] = M, part[G + g] = L;
    }
    __syncthreads();
    float* yr = y + ((size_t)row * n_head + h0) * D; // the group's outputs, head g's at g·D
    for (int i = tid; i < G * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        const float* f = wf + g * W;
        const float* a = wacc + (size_t)g * W * D + d;
        float o = 0.f;
#pragma unroll 8
        for (int w = 0; w < W; w++)
            if (f[w] != 0.f) o += a[(size_t)w * D] * f[w];
        if (part) part[2 * G + i] = o;
        else yr[i] = o * winv[g];
    }
    if (part && fa_split_last(stg, row, nch))
        fa_split_merge<G>(stg, row, nch, D, sinks, h0, wacc, [&](int i, float o) { yr[i] = o; });
}

// fa_run is the kernels' body: blocks of fa_group query heads, W warps
// each, in fa_smem's dynamic shared memory; stg is the _split entries'
// staging buffer (nullptr: no split).
__device__ __forceinline__ void fa_run(const float* q, const u8* kv, const float* sinks, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window, u8* stg) {
    extern __shared__ __align__(16) float fa_sm[];
    switch (fa_group(n_head, n_head_kv, head_dim)) {
    case 4: fa_block<4>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg); break;
    case 3: fa_block<3>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg); break;
    case 2: fa_block<2>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg); break;
    default: fa_block<1>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg);
    }
}
