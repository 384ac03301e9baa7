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
#define FA_STAGE 8192 // a warp's stage of the F16 staged walk (fa_stage_at)
#define FA_MAX_STAGES 4 // a warp's stages at most (fa_stage_walk's ring)

// FaKeys is what a decode block's warps share about the keys they walk,
// over either cache (FaArgs, faq.cuh's FaqArgs); fa_keys sets it.
struct FaKeys {
    const u8* kv;
    const u32* ptab; // the slot's page table
    size_t page_bytes, head_ofs, vofs; // offsets in halves (F16) or bytes (Q8_0), but page_bytes
    int D, pos, W;
    int first; // the first key the query sees
    float scale, softcap;
    u8* stage; // the warp's stages (shared; fa_stage_walk)
    int nst;   // how many: 0 (the register walk) to FA_MAX_STAGES
};

struct FaArgs : FaKeys {
    u32 kv_dim;
    const float* qs; // the queries, in shared memory ([G][fa_qs(D)])
    __device__ __forceinline__ const __half* row(int t) const {
        return (const __half*)(kv + (size_t)ptab[t / KV_PAGE_TOKENS] * page_bytes) + head_ofs + (size_t)(t % KV_PAGE_TOKENS) * kv_dim;
    }
};

// fa_cp copies N (8 or 16) bytes from global src to shared dst
// asynchronously (cp.async: 8 cached in L1, the Q8_0 rows' pieces being
// only 8-byte aligned; 16 past it); fa_commit closes the thread's group
// of copies, fa_wait<N> waits until at most N of its groups are still in
// flight.
template <int N> __device__ __forceinline__ void fa_cp(void* dst, const void* src) {
    static_assert(N == 8 || N == 16, "copies of 8 or 16 bytes");
    if constexpr (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// fa_stage_copy sends the K and V rows of the nk ≤ NK keys from key base
// (a chunk of a warp's walk: at most two pages) into stage st, R bytes a
// row: K row j is the stage's row j, V row j its row NK + j, in pieces of
// N bytes, piece c of stage row r at byte at(r, c) of the stage;
// consecutive lanes take consecutive pieces (piece f = lane + 32·i of
// the rows', r = f / (R/N)), each copy instruction a contiguous run of
// the rows. It closes the lane's group of copies. Offsets are in bytes:
// the head's slice of the layer at head_ofs in a page, rows rb apart,
// V's vofs past K's. Rows past the chunk's last key are left as they are
// (never read).
template <int NK, int R, int N, typename At>
__device__ __forceinline__ void fa_stage_copy(const FaKeys& a, size_t head_ofs, size_t rb, size_t vofs, int base, int nk, u8* st, At at) {
    constexpr int NG = R / N, NC = 2 * NK * NG / 32;
    static_assert(R % N == 0 && NC * 32 == 2 * NK * NG && NK <= KV_PAGE_TOKENS, "a chunk's rows in whole copies, within two pages");
    const int lane = threadIdx.x & 31;
    // Key o0 + j of the first page's count is row o of page b0's slice,
    // or past it row o − KV_PAGE_TOKENS of page b1's, b1 taken
    // KV_PAGE_TOKENS rows back (unsigned: wraps, never read there).
    const int o0 = base % KV_PAGE_TOKENS;
    const size_t b0 = (size_t)a.ptab[base / KV_PAGE_TOKENS] * a.page_bytes + head_ofs;
    const size_t b1 = (size_t)a.ptab[(base + nk - 1) / KV_PAGE_TOKENS] * a.page_bytes + head_ofs - (size_t)KV_PAGE_TOKENS * rb;
#pragma unroll
    for (int i = 0; i < NC; i++) {
        const int f = lane + 32 * i, r = f / NG, c = f % NG;
        const int j = r < NK ? r : r - NK, o = o0 + j;
        if (j < nk) fa_cp<N>(st + at(r, c), a.kv + (o < KV_PAGE_TOKENS ? b0 : b1) + (size_t)o * rb + (r < NK ? 0 : vofs) + N * c);
    }
    fa_commit();
}

// fa_stage_walk is a warp's staged walk over its chunks of ch keys
// (fa_start's: chunks warp, warp + W, …), in a ring of a.nst stages of SB
// bytes from a.stage: fetch(base, st) copies the chunk from key base into
// stage st (fa_stage_copy, one group of copies), and body(base, nk, st)
// runs the arithmetic of its nk keys once every lane's copies have
// landed. The copies of the chunk nst − 1 ahead go out before a chunk's
// arithmetic (with one stage, the chunk's own, after the previous
// chunk's arithmetic); past the last chunk an empty group keeps the
// count, so that waiting until nst − 1 groups are in flight always means
// this chunk's have landed.
template <int SB, typename Fetch, typename Body>
__device__ __forceinline__ void fa_stage_walk(const FaKeys& a, int ch, Fetch fetch, Body body) {
    const int warp = threadIdx.x >> 5, step = a.W * ch, nst = a.nst;
    int base = a.first + warp * ch;
    if (base > a.pos) return;
    for (int i = 0; i + 1 < nst; i++) {
        if (base + i * step <= a.pos) fetch(base + i * step, a.stage + i * SB);
        else fa_commit();
    }
    for (int s = 0; base <= a.pos; base += step, s = s + 1 == nst ? 0 : s + 1) {
        const int ahead = base + (nst - 1) * step, sa = s + nst - 1 < nst ? s + nst - 1 : s - 1; // its stage: (s + nst − 1) mod nst
        if (ahead <= a.pos) fetch(ahead, a.stage + sa * SB);
        else fa_commit();
        switch (nst) {
        case 1: fa_wait<0>(); break;
        case 2: fa_wait<1>(); break;
        case 3: fa_wait<2>(); break;
        default: fa_wait<3>();
        }
        __syncwarp(); // every lane's copies of this chunk have landed
        body(base, min(ch, a.pos + 1 - base), (const u8*)(a.stage + s * SB));
        __syncwarp(); // the stage is read before a copy overwrites it
    }
}

// fa_stages is a decode block's stages a warp (0 to FA_MAX_STAGES) for
// heads of D: as many as its dynamic shared memory holds past at bytes (W
// warps, SB bytes a stage) where the kernel has a staged walk for D, so
// that launch.go alone decides (faqStaged, faStagedShared). It points
// a.stage at the warp's.
template <int SB> __device__ __forceinline__ void fa_stages(FaKeys& a, u8* sm, int at, bool staged) {
    u32 dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    a.nst = staged && (int)dyn > at ? min(FA_MAX_STAGES, ((int)dyn - at) / (a.W * SB)) : 0;
    a.stage = sm + at + (size_t)(threadIdx.x >> 5) * a.nst * SB;
}

// fa_qs is a query's floats in shared memory: head_dim rounded up to 8,
// so that each starts 32-byte aligned for the float4 loads.
__host__ __device__ constexpr int fa_qs(int head_dim) { return (head_dim + 7) & ~7; }

// fa_start begins a warp's walk over its keys: its online softmax state
// for G heads has no keys yet, and it returns the walk's chunk of ch ≤ 32
// keys, one a lane, so that short contexts still spread over every warp
// (the warp takes chunks warp, warp + W, … from the first key).
template <int P2, int G> __device__ __forceinline__ int fa_start(const FaKeys& a, float* m, float* l, float2 (*acc)[P2]) {
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < P2; i++) acc[g][i] = make_float2(0.f, 0.f);
    }
    return min(32, (a.pos - a.first + a.W) / a.W);
}

// fa_weigh takes a chunk's scores into the warp's online softmax, a lane a
// key (live: the lane has one): each head's score is dot·scale (soft
// capped), the running maximum m and sum l take the chunk's, the
// accumulators are rescaled, and p gets the lane's key's weight.
template <int P2, int G>
__device__ __forceinline__ void fa_weigh(const float* dot, bool live, float scale, float softcap, float* m, float* l,
    float2 (*acc)[P2], float* p) {
#pragma unroll
    for (int g = 0; g < G; g++) {
        float s = -INFINITY;
        if (live) {
            s = dot[g] * scale;
            if (softcap != 0.f) s = softcap * (float)tanh((double)s);
        }
        float mn = fmaxf(m[g], warp_max(s)); // finite: the chunk's first key is live
        float alpha = expf(m[g] - mn);
        p[g] = live ? expf(s - mn) : 0.f;
        l[g] = l[g] * alpha + warp_sum(p[g]);
#pragma unroll
        for (int i = 0; i < P2; i++) acc[g][i].x *= alpha, acc[g][i].y *= alpha;
        m[g] = mn;
    }
}

// fa_add_v adds the chunk's key j's V row v (the lane's dimension pairs)
// to each head's accumulators, weighed by the key's p (lane j's); the
// products are fused (__fmaf_rn; the PTX is built with --fmad=false).
template <int P2, int G> __device__ __forceinline__ void fa_add_v(float2 (*acc)[P2], const float* p, int j, const float2* v) {
#pragma unroll
    for (int g = 0; g < G; g++) {
        float pj = __shfl_sync(0xffffffffu, p[g], j);
#pragma unroll
        for (int i = 0; i < P2; i++)
            acc[g][i].x = __fmaf_rn(pj, v[i].x, acc[g][i].x), acc[g][i].y = __fmaf_rn(pj, v[i].y, acc[g][i].y);
    }
}

// fa_dot8 adds the products of the 8 halves in k (a key's dimensions
// i … i+7) with G queries' (qs, QS floats apart) to pd, in order, fused.
template <int G> __device__ __forceinline__ void fa_dot8(const float* qs, int QS, int i, uint4 k, float* pd) {
    const __half2* hp = (const __half2*)&k;
    float2 k0v = __half22float2(hp[0]), k1v = __half22float2(hp[1]), k2v = __half22float2(hp[2]), k3v = __half22float2(hp[3]);
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float* qg = qs + g * QS;
        float4 qa = *(const float4*)(qg + i), qb = *(const float4*)(qg + i + 4);
        float t = pd[g];
        t = __fmaf_rn(qa.x, k0v.x, t), t = __fmaf_rn(qa.y, k0v.y, t), t = __fmaf_rn(qa.z, k1v.x, t);
        t = __fmaf_rn(qa.w, k1v.y, t), t = __fmaf_rn(qb.x, k2v.x, t), t = __fmaf_rn(qb.y, k2v.y, t);
        pd[g] = __fmaf_rn(qb.w, k3v.y, __fmaf_rn(qb.z, k3v.x, t));
    }
}

// fa_batches is S for fa_warp and faq_warp: 1 where a lane's
// accumulators (G·P2 pairs) leave room for a whole chunk's loads in the
// main entries' 128 registers, else 2; 2 in the lean entry (MAXP2 2, 64
// registers). The batches change no arithmetic, only when loads go out.
__host__ __device__ constexpr int fa_batches(int G, int P2, int MAXP2) { return MAXP2 > 2 && G * P2 <= 4 ? 1 : 2; }

// fa_warp_regs runs one warp's online softmax over its keys for the G query
// heads of one KV head the block serves (each key's K and V rows are loaded
// once for all of them); P2 dimension pairs a lane (head_dim ≤ 64·P2). It
// returns each head's maximum and sum, and its accumulator in acc. A warp
// takes chunks of at most NK = 32/P2 keys: LP = P2 lanes a key load its K
// row, 16 bytes at a time (KC = 8 pieces a lane), and each lane loads its
// dimension pairs of every V row as raw half2s (32 words). The chunk's
// loads come in S batches: with S = 1 (the main entries, 128 registers)
// every one of them is issued before any is used, one memory round trip a
// chunk; S = 2 (the lean entry's 64 registers, and groups of many
// accumulators: fa_batches) keeps half the loads in registers at once, in
// the same order of arithmetic (the lean entry's bits are the main
// entry's). Four lanes a key in passes of eight keys, then the V rows
// eight at a time, made seven or eight round trips a chunk of 32, and the
// qwen3 0.6B shape's decode at depth 32768 read its cache at a quarter of
// the H200's bandwidth. The products are fused (__fmaf_rn; the PTX is
// built with --fmad=false): half the instructions of a multiply and an
// add, and closer to the exact sums (fa_add_v's too). Each lane finds the cache row of the
// chunk's key lane once (the page lookup) and hands it to the others by
// shuffle. fa_warp takes it where the staged walk does not.
template <int P2, int G, int S = 1>
__device__ __forceinline__ void fa_warp_regs(const FaArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    constexpr int NK = 32 / P2, LP = P2, KC = 8, KB = KC / S, VB = NK / S;
    static_assert(G * P2 <= 8, "fa_group keeps a block's accumulators small");
    static_assert(KC % S == 0 && NK % S == 0, "whole batches");
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = a.D, QS = fa_qs(D);
    bool vec8 = D % 8 == 0, even = D % 2 == 0;
    float m[G], l[G];
    const __half* kv0 = (const __half*)a.kv;
    const int ch = min(NK, fa_start<P2, G>(a, m, l, acc)); // chunks of ch ≤ NK keys
    const int part = lane % LP, kk = lane / LP; // this lane's pieces of key kk in the K loads
    for (int base = a.first + warp * ch; base <= a.pos; base += a.W * ch) {
        const int nk = min(ch, a.pos + 1 - base);
        const bool live = lane < nk;
        const __half* kp = a.row(base + min(lane, nk - 1)); // key lane's K row
        const size_t ko = (size_t)(kp - kv0);
        const u32 klo = (u32)ko, khi = (u32)(ko >> 32);
        // rowof is key j's K row (every lane calls it: a shuffle).
        auto rowof = [&](int j) {
            return kv0 + ((size_t)__shfl_sync(0xffffffffu, klo, j) | ((size_t)__shfl_sync(0xffffffffu, khi, j) << 32));
        };
        const __half* kq = rowof(kk);
        // vload loads V batch b (rows VB·b …), each lane its dimension
        // pairs; rows past the chunk's last key (stale bytes, NaN
        // perhaps) are not read.
        u32 vr[VB][P2];
        auto vload = [&](int b) {
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const int j = VB * b + u;
                const __half* vp = rowof(j) + a.vofs;
#pragma unroll
                for (int i = 0; i < P2; i++) {
                    int d = 64 * i + 2 * lane;
                    vr[u][i] = 0;
                    if (j >= nk || d >= D) continue;
                    if (d + 1 < D && even) vr[u][i] = *(const u32*)(vp + d);
                    else vr[u][i] = (u32)__half_as_ushort(vp[d]) | (d + 1 < D ? (u32)__half_as_ushort(vp[d + 1]) << 16 : 0u);
                }
            }
        };
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; g++) dot[g] = 0.f;
        if (vec8) {
            // Each lane's pieces part, part + LP, … of key kk against the
            // queries (the first V batch issued with the first K batch);
            // the LP parts' sums meet by shuffle and lane j takes key j's.
            float pd[G];
#pragma unroll
            for (int g = 0; g < G; g++) pd[g] = 0.f;
#pragma unroll
            for (int b = 0; b < S; b++) {
                uint4 kr[KB];
                if (kk < nk) {
#pragma unroll
                    for (int c = 0; c < KB; c++)
                        if (8 * (part + LP * (KB * b + c)) < D) kr[c] = *(const uint4*)(kq + 8 * (part + LP * (KB * b + c)));
                }
                if (b == 0) vload(0);
                if (kk >= nk) continue;
#pragma unroll
                for (int c = 0; c < KB; c++) {
                    const int i = 8 * (part + LP * (KB * b + c));
                    if (i >= D) break;
                    fa_dot8<G>(a.qs, QS, i, kr[c], pd);
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
#pragma unroll
                for (int o = 1; o < LP; o <<= 1) pd[g] += __shfl_xor_sync(0xffffffffu, pd[g], o);
                dot[g] = __shfl_sync(0xffffffffu, pd[g], (lane % NK) * LP);
            }
        } else {
            vload(0);
            if (live)
                for (int i = 0; i < D; i++) {
                    float k = __half2float(kp[i]);
#pragma unroll
                    for (int g = 0; g < G; g++) dot[g] += a.qs[g * QS + i] * k;
                }
        }
        float p[G];
        fa_weigh<P2, G>(dot, live, a.scale, a.softcap, m, l, acc, p);
#pragma unroll
        for (int b = 0; b < S; b++) {
            if (VB * b >= nk) break;
            if (b > 0) vload(b);
#pragma unroll
            for (int u = 0; u < VB; u++) {
                const int j = VB * b + u;
                if (j >= nk) break;
                float2 v[P2];
#pragma unroll
                for (int i = 0; i < P2; i++) v[i] = __half22float2(*(const __half2*)&vr[u][i]);
                fa_add_v<P2, G>(acc, p, j, v);
            }
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}

// fa_warp_staged is fa_warp_regs for heads of D = 64·P2 (128 or 256:
// rows of 128·P2 bytes, 16-byte aligned), with its arithmetic in the same
// order (the same bits) but its loads made otherwise, as faq.cuh's staged
// walk: the warp copies a chunk's K rows and V rows into its stage in
// shared memory with cp.async, 16 bytes a lane, consecutive lanes taking
// consecutive pieces (fa_stage_copy, fa_stage_walk), and reads the keys'
// pieces and the value pairs from there; with more than one stage the
// copies of the chunks ahead go out before this chunk's arithmetic. Piece c of a
// stage row r lies at piece c ^ (r·LP mod 8) of it (at), so that the eight
// lanes of a quarter warp, which read 16 bytes each of four or two keys'
// rows, find eight different banks' quads; a V row's 32 words stay in
// their 128 bytes. A chunk's ≤ NK ≤ 16 keys lie in at most two pages.
template <int P2, int G>
__device__ __forceinline__ void fa_warp_staged(const FaArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    constexpr int NK = 32 / P2, LP = P2, KC = 8, D = 64 * P2, QS = fa_qs(D), R = 2 * D, NG = R / 16;
    static_assert(P2 == 2 || P2 == 4, "heads of 128 or 256");
    static_assert(2 * NK * R == FA_STAGE && NG == LP * KC && NG % 8 == 0, "a chunk's rows fill a stage");
    const int lane = threadIdx.x & 31;
    float m[G], l[G];
    const int ch = min(NK, fa_start<P2, G>(a, m, l, acc)); // chunks of ch ≤ NK keys
    const int part = lane % LP, kk = lane / LP; // this lane's pieces part, part + LP, … of key kk
    auto at = [&](int r, int c) { return 16 * (r * NG + (c ^ ((r * LP) & 7))); };
    auto fetch = [&](int base, u8* st) {
        fa_stage_copy<NK, R, 16>(a, 2 * a.head_ofs, 2 * (size_t)a.kv_dim, 2 * a.vofs, base, min(ch, a.pos + 1 - base), st, at);
    };
    fa_stage_walk<FA_STAGE>(a, ch, fetch, [&](int base, int nk, const u8* st) {
        const bool live = lane < nk;
        // fa_warp_regs' products and sums (same order, same bits).
        float dot[G], pd[G];
#pragma unroll
        for (int g = 0; g < G; g++) pd[g] = 0.f;
        if (kk < nk) {
#pragma unroll
            for (int c = 0; c < KC; c++) fa_dot8<G>(a.qs, QS, 8 * (part + LP * c), *(const uint4*)(st + at(kk, part + LP * c)), pd);
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (int o = 1; o < LP; o <<= 1) pd[g] += __shfl_xor_sync(0xffffffffu, pd[g], o);
            dot[g] = __shfl_sync(0xffffffffu, pd[g], (lane % NK) * LP);
        }
        float p[G];
        fa_weigh<P2, G>(dot, live, a.scale, a.softcap, m, l, acc, p);
#pragma unroll
        for (int j = 0; j < NK; j++) {
            if (j >= nk) break;
            float2 v[P2];
#pragma unroll
            for (int i = 0; i < P2; i++) {
                const int b = 128 * i + 4 * lane; // the byte of the lane's pair (dimensions 64·i + 2·lane) in the row
                v[i] = __half22float2(*(const __half2*)(st + at(NK + j, b / 16) + b % 16));
            }
            fa_add_v<P2, G>(acc, p, j, v);
        }
    });
#pragma unroll
    for (int g = 0; g < G; g++) pm[g] = m[g], pl[g] = l[g];
}

// fa_warp over an F16 cache (fa_warps calls it for FaArgs): the staged
// walk where the head's rows suit it and the block has stages, else the
// register walk.
template <int P2, int G, int S = 1>
__device__ __forceinline__ void fa_warp(const FaArgs& a, float* pm, float* pl, float2 (*acc)[P2]) {
    if constexpr (P2 == 2 || P2 == 4) {
        if (a.D == 64 * P2 && a.nst > 0) {
            fa_warp_staged<P2, G>(a, pm, pl, acc);
            return;
        }
    }
    fa_warp_regs<P2, G, S>(a, pm, pl, acc);
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

// FaGroup is fa_group's G as a type, for the body fa_grouped calls.
template <int N> struct FaGroup {
    static constexpr int G = N;
};

// fa_grouped calls body(FaGroup<G>()) with the launch's fa_group G: the
// decode kernels' bodies (fa_block, faq_block) are templates of G.
template <typename Body> __device__ __forceinline__ void fa_grouped(u32 n_head, u32 n_head_kv, u32 head_dim, Body body) {
    switch (fa_group(n_head, n_head_kv, head_dim)) {
    case 4: body(FaGroup<4>()); break;
    case 3: body(FaGroup<3>()); break;
    case 2: body(FaGroup<2>()); break;
    default: body(FaGroup<1>());
    }
}

// fa_smem is the decode kernels' dynamic shared memory for G heads a
// block, W warps and head width D: the queries, each warp's maximum, sum
// and merge weight per head, each warp's accumulators per head, and each
// head's 1/sum. launch.go's faShared is the same.
__host__ __device__ constexpr int fa_smem(int G, int W, int D) { return 4 * G * (fa_qs(D) + 3 * W + W * D + 1); }

// The staged walk (fa_warp_staged) of heads of 128 and 256 copies each
// chunk's K and V rows into the warp's stages past fa_smem's layout
// (from fa_stage_at, 16-byte aligned): FA_STAGE bytes a stage, 2·(32/P2)
// rows of 128·P2 bytes. The kernel takes as many stages a warp (1 to 4,
// else 0: the register walk) as its dynamic shared memory holds
// (fa_stages), so launch.go alone decides (faStagedShared); the lean entry
// takes none.
__host__ __device__ constexpr int fa_stage_at(int G, int W, int D) { return (fa_smem(G, W, D) + 15) & ~15; }
__host__ __device__ constexpr bool fa_staged(int D) { return D == 128 || D == 256; }

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
// never on which block finishes when. FA_CHUNK is the keys a block's
// warps take in one step of fa_warp's chunks at heads of 128 (16 warps
// of 16 keys): ranges of whole steps, and at the qwen3 0.6B shape's
// depth 32768 (16 blocks a head group) 15 ranges of 2304 keys where
// units of 512 made 13 of 2560.
#define FA_CHUNK 256
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

// fa_keys sets a decode block's keys: the slot's page table ptab, the
// query's scale and soft cap, the W warps, heads of D, and the keys
// first..pos the row at pos sees (a sliding window's, then the block's
// range of a split row: stg is the _split entries' staging buffer). It
// returns the row's ranges (fa_split_range: 0 when the block has none).
__device__ __forceinline__ int fa_keys(FaKeys& a, const u8* kv, const u32* ptab, int D, int W, float scale, float softcap,
    u32 window, int pos, u8* stg) {
    a.kv = kv;
    a.ptab = ptab;
    a.D = D;
    a.W = W;
    a.scale = scale;
    a.softcap = softcap;
    a.pos = pos;
    a.first = window != 0 && pos + 1 > (int)window ? pos + 1 - (int)window : 0;
    return stg ? fa_split_range(a.first, a.pos, blockIdx.z, gridDim.z) : 1;
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

// fa_warps runs the block's W warps over their keys (fa_warp, over an F16
// cache's FaArgs or a Q8_0 cache's FaqArgs, faq.cuh) with the dimension
// pairs a lane the head needs, and keeps each warp's maxima, sums and
// accumulators in sm (fa_merge's layout). Heads wider than 64·MAXP2 are
// left out of the instance.
template <int G, int MAXP2, typename Args>
__device__ __forceinline__ void fa_warps(const Args& a, float* sm) {
    const int W = a.W, D = a.D, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* wacc = sm + 3 * G * W;
    float m[G], l[G];
    int p2 = (D + 63) / 64;
    if (p2 <= 1) {
        float2 acc[G][1];
        fa_warp<1, G, fa_batches(G, 1, MAXP2)>(a, m, l, acc);
        fa_keep<1, G>(acc, wacc, W, D);
    } else if (p2 == 2) {
        float2 acc[G][2];
        fa_warp<2, G, fa_batches(G, 2, MAXP2)>(a, m, l, acc);
        fa_keep<2, G>(acc, wacc, W, D);
    } else if constexpr (G <= 2 && MAXP2 > 2) { // fa_group: wider heads come in groups of at most 2
        float2 acc[G][FA_P2];
        fa_warp<FA_P2, G, fa_batches(G, FA_P2, MAXP2)>(a, m, l, acc);
        fa_keep<FA_P2, G>(acc, wacc, W, D);
    }
#pragma unroll
    for (int g = 0; g < G; g++)
        if (lane == 0) sm[g * W + warp] = m[g], sm[(G + g) * W + warp] = l[g];
}

// fa_merge merges the block's W warps' states (fa_warps': sm holds [G][W]
// maxima, [G][W] sums, then room for [G][W] merge weights, the [G][W][D]
// accumulators and [G] inverse sums) and hands each output i (head i / D,
// dimension i % D) to out(i, o), normalized. Each warp's state weighs
// exp(its maximum − the overall one), the sink's too. Warp g merges head
// g's maxima and sums, a lane a warp (W ≤ 32, G ≤ 4 ≤ W); then every
// thread sums its outputs' W accumulators in warp order. (A thread looping
// over all W states, as this did, made a chain of dependent shared loads
// as long as the keys' phase at one row of the llama 7B shape.) A range
// of a split row (nch > 1) stores its merged state unnormalized, without
// the sink, which joins the merge of the ranges (fa_split_merge, which the
// last range's block runs). It returns whether the block gave the
// outputs: false for a split row's block that was not the last.
template <int G, typename Out>
__device__ __forceinline__ bool fa_merge(float* sm, int W, int D, const float* sinks, int h0, u8* stg, int row, int nch, Out out) {
    float* wm = sm;                 // [G][W] each warp's maximum,
    float* wl = wm + G * W;         // its sum,
    float* wf = wl + G * W;         // and its weight in the merge
    float* wacc = wf + G * W;       // [G][W][D]
    float* winv = wacc + G * W * D; // [G] 1 / the merged sum
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    __syncthreads();
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
    for (int i = tid; i < G * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        const float* f = wf + g * W;
        const float* a = wacc + (size_t)g * W * D + d;
        float o = 0.f;
#pragma unroll 8
        for (int w = 0; w < W; w++)
            if (f[w] != 0.f) o += a[(size_t)w * D] * f[w];
        if (part) part[2 * G + i] = o;
        else out(i, o * winv[g]);
    }
    if (!part) return true;
    if (!fa_split_last(stg, row, nch)) return false;
    fa_split_merge<G>(stg, row, nch, D, sinks, h0, wacc, out);
    return true;
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
    float* qs = sm;          // [G][QS]
    float* ws = qs + G * QS; // the warps' states (fa_merge's)
    int row = blockIdx.y, h0 = blockIdx.x * G, tid = threadIdx.x;
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
    const int nch = fa_keys(a, kv, io + pt + slot * mp, D, W, scale, softcap, window, pos, stg); // the row's ranges
    if (nch == 0) return;
    int kvh = h0 / (n_head / n_head_kv);
    a.kv_dim = n_head_kv * head_dim;
    a.page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * a.kv_dim * 2;
    a.head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * a.kv_dim + (size_t)kvh * head_dim;
    a.vofs = (size_t)KV_PAGE_TOKENS * a.kv_dim;
    a.qs = qs;
    // The warps' stages: as many as the block's shared memory holds
    // (launch.go's faStagedShared), past fa_smem's layout; none in the lean
    // entry (MAXP2 2), compiled for 64 registers.
    fa_stages<FA_STAGE>(a, (u8*)sm, fa_stage_at(G, W, D), MAXP2 > 2 && fa_staged(D));
    // As T-CPU (ggml's CPU paths), the query is rounded to F16 except in a
    // long prompt's rows: decided by the row's request, never by how many
    // rows share the step, so a request's bits do not depend on its batch.
    bool f16q = !(flags & ROW_LONG_PROMPT);
#pragma unroll
    for (int g = 0; g < G; g++)
        if (tid < D) qs[g * QS + tid] = f16q ? round_f16(qv[g]) : qv[g]; // head_dim ≤ 256 ≤ blockDim.x
    __syncthreads();
    fa_warps<G, MAXP2>(a, ws);
    float* yr = y + ((size_t)row * n_head + h0) * D; // the group's outputs, head g's at g·D
    fa_merge<G>(ws, W, D, sinks, h0, stg, row, nch, [&](int i, float o) { yr[i] = o; });
}

// fa_run is the kernels' body: blocks of fa_group query heads, W warps
// each, in fa_smem's dynamic shared memory; stg is the _split entries'
// staging buffer (nullptr: no split).
__device__ __forceinline__ void fa_run(const float* q, const u8* kv, const float* sinks, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, float scale, float softcap, u32 window, u8* stg) {
    extern __shared__ __align__(16) float fa_sm[];
    fa_grouped(n_head, n_head_kv, head_dim, [&](auto grp) {
        fa_block<decltype(grp)::G>(fa_sm, q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg);
    });
}
