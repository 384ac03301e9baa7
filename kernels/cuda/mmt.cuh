// mmt.cuh: the multi-row matrix kernel on tensor cores, for the weight
// types prefill and batched decode spend their time on (Q4_K, Q6_K, Q8_0).
//
// The activation rows are quantized once per matrix, by mt_stage
// (RMS-normalizing first for the fused norm kernels), into a staging
// buffer the tier owns. A block of mmt computes a tile of MR activation
// rows × MT_N output features, walking its range of k one 256-element
// super-block at a time. While it computes one, it copies the next ones'
// weight blocks and the rows' staged records into its other shared
// buffers as they are (cp.async). Its eight warps multiply int8 by int8
// into int32 with mma.sync, one weight sub-block (32 for Q4_K and Q8_0,
// 16 for Q6_K) per instruction, so every sub-block's integer dot product
// comes out on its own, exactly the integer the oracle computes. Weight
// quants are unpacked to int8 on the way from shared memory into the B
// fragments. Sub-block sums are scaled by the integer sub-block scales and
// summed as integers; only the per-super-block float combination (d, dmin,
// the activation scale) is rounded, as in mmq.
//
// Three tiles: 64 rows (prefill), whose warps are 2 × 4 pieces of 32 ×
// 32, and 16 and 32 rows (steps of up to 64 rows: decode), whose warps
// each take all the tile's rows × 16 features, so that all eight work
// where a 64-row tile of a 16-row step left six idle. The 16-row tile's
// smaller buffers leave room for three copy stages and more blocks on a
// multiprocessor; the 32-row tile unpacks each weight fragment once for
// two row fragments.
//
// A matrix of few tiles splits k over gridDim.z blocks a tile (split-k),
// so that it fills the GPU: each writes its partial tile to the staging
// buffer, and the last of them to finish adds the partials in split order
// and stores the sum, so the result does not depend on which finished
// first.
#pragma once
#include "mmq.cuh"

#define MT_N 128      // output features a block
#define MT_XS 272     // bytes of a quantized activation row in shared memory (256 + 16: no bank conflicts)
#define MT_THREADS 256
static_assert(MT_THREADS == 2 * MT_N, "mmt unpacks each feature's scales with two threads");

// Mt<MR>: the warp layout of the MR-row tile. Each warp computes MI
// fragments of 16 rows × NI fragments of 8 features; WR warps along the
// rows, WN along the features.
template <int MR> struct Mt {
    static constexpr int MI = MR >= 32 ? 2 : 1, WR = MR / (16 * MI), WN = 8 / WR, NI = MT_N / (8 * WN);
    static_assert(WR * WN == MT_THREADS / 32 && MR == 16 * MI * WR, "mmt's warps must cover the tile");
};

// Tc<T>: whether the tensor-core kernel handles T; the bytes of a
// feature's weights for 256 of k in shared memory (WS): Q4_K's super-block
// of 144 and Q8_0's 8 blocks of 34 as they are, Q6_K's super-block of 210,
// which sits on a 2-byte boundary, in the 53-word aligned window that
// holds it (see mmt); and the bytes a feature's scales take there (WD).
template <int T> struct Tc { enum { OK = 0, WS = 4, WD = 0 }; };
template <> struct Tc<T_Q4_K> { enum { OK = 1, WS = 144, WD = 16 + 8 }; }; // 8 scales, 8 mins; d, dmin
template <> struct Tc<T_Q6_K> { enum { OK = 1, WS = 212, WD = 16 + 8 }; }; // 16 scales; d
template <> struct Tc<T_Q8_0> { enum { OK = 1, WS = 272, WD = 0 }; };      // its blocks' d are read in place
// MMT_TYPE(t) is Tc<t>::OK for the preprocessor, which decides the
// instances that get the _stage and lm_head's _dp4a entries (the matrix
// families: family/matmul.cuh, family/lm_head.cuh, fused_norm.cuh).
#define MMT_TYPE(t) ((t) == T_Q4_K || (t) == T_Q6_K || (t) == T_Q8_0)

// A staged activation row is k/256 records of MT_REC bytes, one per 256 of
// k, quantized as the oracle quantizes activations for the weight type
// (Geom<T>::VT): Q8_K's 256 quants, its sub-blocks' sums of 32 quants
// (for Q4_K's mins) as bytes, 32 bytes in all, and the scale; or Q8_0's
// 256 quants and the 8 blocks' scales (rounded through F16) where Q8_K
// has its sums. A sum of 32 quants, within [-4096, 4064], is 128·hi + lo
// with hi in [-32, 31] and lo in [0, 127]: the record holds the eight
// lo, then the eight hi, each a signed byte as dp4a takes them. Padded to
// 16 bytes; launch.go's mmtRecord is the same.
#define MT_REC 304

// The staging buffer starts with split-k's tile counters, at the same
// place for every launch: each launch's records and partial tiles
// overwrite what the launch before left, and a counter elsewhere would lie
// in another launch's partials. launch.go's mmtCounters is the same; a
// launch that splits k has at most that many tiles.
#define MT_COUNTERS 256
#define MT_RECS(q8) ((q8) + 4 * MT_COUNTERS)

// mt_stage quantizes the request's activation rows (RMS-normalized by wn
// first when given) to XT (Q8_K or Q8_0) into q8, row r's kb-th 256 at
// record r·k/256 + kb past the counters: grid (rows, records / warps a
// block), warp w of block (r, y) taking records y·W + w, y·W + w +
// gridDim.y·W, … (W the block's warps). Each warp computes the row's RMS
// scale itself, in the order the in-kernel quantizers do (a warp's lanes
// striding over the row, in double). One launch does for the whole matrix
// what every block of features would otherwise repeat; blocks along y
// keep a step of few rows from walking each row's records a few warps at
// a time.
template <int XT>
__device__ void mt_stage(const float* x, const u32* io, int k, u8* q8, const float* wn, float eps) {
    const int lane = threadIdx.x & 31, row = blockIdx.x, nw = blockDim.x >> 5;
    const int kb0 = blockIdx.y * nw + (threadIdx.x >> 5);
    dep_sync();
    if (row >= (int)io[IO_ROWS] || kb0 >= k / 256) return;
    const float* xr = x + (size_t)row * k;
    float sc = 1.f;
    if (wn) {
        double s = 0;
        for (int i = lane; i < k; i += 32) {
            float v = xr[i];
            s += (double)(v * v);
        }
        for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        sc = 1.f / sqrtf((float)(s / (double)k) + eps);
    }
    const bool vec = ((size_t)x & 15) == 0 && ((size_t)wn & 15) == 0;
    for (int kb = kb0; kb < k / 256; kb += gridDim.y * nw) {
        u8* rec = MT_RECS(q8) + ((size_t)row * (k / 256) + kb) * MT_REC;
        const float* wk = wn ? wn + (size_t)kb * 256 : nullptr;
        float4 a = ld4(xr + (size_t)kb * 256, 8 * lane, vec, sc, wk), c = ld4(xr + (size_t)kb * 256, 8 * lane + 4, vec, sc, wk);
        float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        if (XT == T_Q8_K) {
            int s;
            float d = q8k_warp(v, (signed char*)rec, nullptr, &s);
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if ((lane & 3) == 0) rec[256 + lane / 4] = (u8)(s & 127), rec[264 + lane / 4] = (u8)((s >> 7) & 255);
            if (lane == 0) *(float*)(rec + 288) = d;
        } else { // Q8_0: four lanes a block of 32, as quant_x (mmq.cuh)
            float am = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++) am = fmaxf(am, fabsf(v[i]));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
            am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
            float id = am != 0.f ? 127.f / am : 0.f;
            int q[8];
#pragma unroll
            for (int i = 0; i < 8; i++) q[i] = (int)rintf(v[i] * id);
            *(int2*)(rec + 8 * lane) = make_int2(pack4(q[0], q[1], q[2], q[3]), pack4(q[4], q[5], q[6], q[7]));
            if ((lane & 3) == 0) *(float*)(rec + 256 + lane) = round_f16(am / 127.f);
        }
    }
}

// mt_stage_bytes is one of mmt's copy buffers: per activation row the
// quants (MT_XS), the Q8_K scale and the 32 bytes of sums (Q8_0:
// scales); per feature its weights. mt_stages is the buffers: three for
// the 16-row tile, where they are small, except Q8_0's. mt_smem is
// mmt<T, MR>'s dynamic shared memory: the buffers, then per feature its
// scales (Tc<T>::WD). launch.go's mmtShared is the same.
template <int T, int MR> __host__ __device__ constexpr int mt_stage_bytes() {
    return MR * (MT_XS + 4 + 32) + MT_N * Tc<T>::WS;
}
template <int T, int MR> __host__ __device__ constexpr int mt_stages() { return MR == 16 && T != T_Q8_0 ? 3 : 2; }
template <int T, int MR> __host__ __device__ constexpr int mt_smem() {
    return mt_stages<T, MR>() * mt_stage_bytes<T, MR>() + MT_N * Tc<T>::WD;
}

// Asynchronous copies into shared memory (cp.async): n bytes, or zeros
// where ok is false (src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src),
                 "r"(ok ? 4 : 0)
                 : "memory");
}
// The same, to a shared memory address as cp.async takes it (32 bits).
__device__ __forceinline__ void cp_async16s(u32 dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4s(u32 dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ldsm4 and ldsm2 load four and two 8×16-byte matrices of shared memory
// (ldmatrix): lane l gives the address of row l % 8 of matrix l / 8, and
// gets word l % 4 of row l / 4 of each, in r[0], r[1], …: the int8 mma
// fragments, one instruction for what took four 32-bit loads.
__device__ __forceinline__ void ldsm4(int* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm2(int* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// Ic<N>: the constant N as a type, for a generic lambda's argument.
template <int N> struct Ic { static constexpr int value = N; };

__device__ __forceinline__ void mma_k32(int* c, const int* a, const int* b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_k16(int* c, const int* a, int b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
}

// mmt computes the tile (blockIdx.x·MR rows, blockIdx.y·MT_N features) of
// y = W·x, x staged in q8 by mt_stage, over blockIdx.z's share of the
// k/256 super-blocks, and stores it through o: row r's outputs as row r,
// or with lm (lm_head) as its slot's, and only if it wants logits. Rows
// past the request's n_rows and features past n are computed on zeros and
// not stored. The staging buffer holds the counters, the records of
// gridDim.x·MR rows, then with split-k a partial tile per block; launch.go's
// mmtStaged sizes it. The row tiles of a block of features are launched
// side by side (x before y), so that its weights come from memory once and
// from L2 for the others.
template <int TW, int MR>
__device__ void mmt(const u8* __restrict__ w, const u32* io, int k, int n, const MmOut& o, bool lm, const u8* q8) {
    using L = Mt<MR>;
    constexpr int MI = L::MI, NI = L::NI, NS = mt_stages<TW, MR>();
    // CB: a feature's bytes for 256 of k (Q8_0: eight blocks).
    constexpr int WS = Tc<TW>::WS, CB = TW == T_Q8_0 ? 8 * Geom<TW>::BB : Geom<TW>::BB, SB = mt_stage_bytes<TW, MR>();
    extern __shared__ __align__(16) u8 smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Per feature: K-quants' 16 sub-block scales (Q4_K: 8, then 8 mins),
    // then d and dmin.
    u8* wsm = smem + NS * SB;               // [MT_N][16]
    float* wdd = (float*)(wsm + MT_N * 16); // [MT_N][2]
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * MR, f0 = blockIdx.y * MT_N;
    const size_t rb = row_bytes<TW>(k);
    const u8* recs = MT_RECS(q8);
    const int rows = io[IO_ROWS]; // the request table: before dep_sync
    if (row0 >= rows) return;
    const int nr = min(MR, rows - row0);
    // lm_head: a tile none of whose rows wants logits (a prefill's rows
    // but each prompt's last) has nothing to store. Its blocks over k all
    // leave, so its split-k counter stays zero.
    static_assert(MR <= MT_THREADS, "mmt's logits vote");
    if (lm && !__syncthreads_or(tid < nr && (io_row(io, row0 + tid, ROW_FLAGS) & ROW_WANTS_LOGITS))) return;
    // Rows copied: those of the 16-row fragments that have a row of the
    // request (the warps skip the others).
    const int nc = min(MR, (nr + 15) & ~15);
    const int kbs = k / 256, splits = gridDim.z, kb0 = blockIdx.z * kbs / splits, kb1 = (blockIdx.z + 1) * kbs / splits;
    // copy_x and copy_w start copying the kb-th 256 of k's records and
    // weights into buffer buf (copy commits both as one group). Each
    // thread's share is the same every step, so that a step costs it a few
    // additions. The records: their quants in 16-byte pieces, 16 threads a
    // row; their sums in two more by the first 2·nc threads, their scale
    // in 4 bytes by the next nc. The weights: PPF consecutive threads a
    // feature, FPP features at once, Q4_K's and Q8_0's in 16-byte pieces
    // (rows of k a multiple of 256 keep them aligned) and each Q6_K block
    // as the 53 aligned words from the one holding its first byte (its
    // offset in them, sh, is 0 or 2 bytes; FPP·rb is a multiple of 4, so a
    // thread's offset is the same for all its features). Rows and features
    // past the ends are zeros (0 bytes copied from a valid address).
    static_assert(MT_THREADS >= 3 * 64, "mmt's record copies");
    // Each thread's sources and destinations are worked out once, here:
    // per step only the super-block's offset is added (recomputing them
    // every step took as many instructions as a super-block's mma).
    // Shared memory is addressed as the 32-bit offsets cp.async takes.
    const u32 sm0 = (u32)__cvta_generic_to_shared(smem);
    const int xr = tid >> 4, xp = 16 * (tid & 15); // the quants: this thread's first row, its piece
    // Offsets into the records, 32 bits: a launch's records take about
    // 1.2 bytes an activation (32768 rows of k = 28672: 1.1 GB).
    const u32 xrow = kbs * MT_REC; // a row's records
    const u32 xq0 = (row0 + min(xr, nr - 1)) * xrow + xp;
    // The sums (2·nc threads, two pieces a row) or the scale (nc more).
    const int xs_r = tid < 2 * nc ? tid >> 1 : tid - 2 * nc;
    const bool xs_on = tid < 3 * nc, xs_sum = tid < 2 * nc;
    const u32 xs0 = (row0 + min(max(xs_r, 0), nr - 1)) * xrow + (xs_sum ? 256 + 16 * (tid & 1) : 288);
    const u32 xs_dst = xs_sum ? MR * (MT_XS + 4) + xs_r * 32 + 16 * (tid & 1) : MR * MT_XS + 4 * xs_r;
    auto copy_x = [&](int kb, int buf) {
        const u32 base = sm0 + buf * SB;
        const u32 at = kb * MT_REC;
#pragma unroll
        for (int j = 0; j < MR / 16; j++) {
            const int r = xr + 16 * j;
            if (r < nc) cp_async16s(base + r * MT_XS + xp, recs + (r < nr ? xq0 + at + 16 * j * xrow : 0), r < nr);
        }
        if (xs_sum) cp_async16s(base + xs_dst, recs + (xs_r < nr ? xs0 + at : 0), xs_r < nr);
        else if (xs_on) cp_async4s(base + xs_dst, recs + (xs_r < nr ? xs0 + at : 0), xs_r < nr);
    };
    constexpr int PB = TW == T_Q6_K ? 4 : 16, PPF = (TW == T_Q6_K ? WS : CB) / PB, FPP = MT_THREADS / PPF;
    constexpr int WJ = (MT_N + FPP - 1) / FPP; // the features a thread copies
    const int cf = tid / PPF, cpo = PB * (tid % PPF); // this thread's first feature, and its piece's offset
    const size_t wat0 = (size_t)(f0 + cf) * rb;
    u32 wok = 0; // bit j: feature cf + FPP·j is one to copy
#pragma unroll
    for (int j = 0; j < WJ; j++)
        if (tid < FPP * PPF && cf + FPP * j < MT_N && f0 + cf + FPP * j < n) wok |= 1u << j;
    // Q6_K's 53 words a feature make 32 copies a thread: their sources
    // are stepped one from the last and their features checked as they
    // go, which kept its mma loop's registers from spilling.
    auto copy_w = [&](int kb, int buf) {
        if (tid >= FPP * PPF) return;
        const u32 wb = sm0 + buf * SB + MR * (MT_XS + 4 + 32) + cf * WS + cpo;
        if (TW == T_Q6_K) {
            const u8* src = w + (((size_t)(f0 + cf) * rb + (size_t)kb * CB) & ~(size_t)3) + cpo;
#pragma unroll
            for (int j = 0; j < WJ; j++, src += (size_t)FPP * rb) {
                if (cf + FPP * j >= MT_N) break;
                const bool ok = f0 + cf + FPP * j < n;
                cp_async4s(wb + FPP * j * WS, ok ? src : w, ok);
            }
            return;
        }
        const u8* src = w + wat0 + (size_t)kb * CB + cpo;
#pragma unroll
        for (int j = 0; j < WJ; j++) {
            if (cf + FPP * j >= MT_N) break;
            const bool ok = wok >> j & 1;
            cp_async16s(wb + FPP * j * WS, ok ? src + (size_t)FPP * j * rb : w, ok);
        }
    };
    auto copy = [&](int kb, int buf) {
        copy_w(kb, buf);
        copy_x(kb, buf);
        cp_async_commit();
    };
    // The warp's piece: rows wr0 … + 16·MI, features wf0 … + 8·NI.
    const int wr0 = (warp / L::WN) * 16 * MI, wf0 = (warp % L::WN) * 8 * NI;
    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.f;
    // The pipeline: step kb copies super-block kb + D into its buffer,
    // waits for kb's copy (all but the newest D groups done: a group is
    // committed every step, empty past the end) and, once every thread is
    // past one barrier, reads it. With three buffers or more, kb + D's
    // buffer is the one of kb + D − NS ≤ kb − 2, which every thread was
    // done with at the barrier of kb − 1; with two it is kb − 1's, so a
    // barrier comes first. The first D steps' weight copies go out before
    // dep_sync: the weights are not the previous kernels' (the staged
    // records are), so their round trip overlaps the kernel before
    // (programmatic dependent launch).
    constexpr int D = NS == 2 ? 1 : NS - 2;
#pragma unroll
    for (int s = 0; s < D; s++)
        if (kb0 + s < kb1) copy_w(kb0 + s, s);
    dep_sync();
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (kb0 + s < kb1) copy_x(kb0 + s, s);
        cp_async_commit();
    }
    for (int kb = kb0; kb < kb1; kb++) {
        if (NS == 2) __syncthreads();
        if (kb + D < kb1) copy(kb + D, (kb - kb0 + D) % NS);
        else cp_async_commit();
        cp_async_wait<D>();
        __syncthreads();
        const u8* base = smem + (kb - kb0) % NS * SB;
        const signed char* xq = (const signed char*)base;      // [MR][MT_XS]
        const float* xd = (const float*)(base + MR * MT_XS);   // [MR] Q8_K scales
        const u8* xbs = (const u8*)(xd + MR);                  // [MR][32] Q8_K's sums as bytes (see MT_REC; Q8_0: 8 scales)
        const u8* wr = base + MR * (MT_XS + 4 + 32);           // [MT_N][WS] weight blocks
        // Q6_K: byte offset of feature f's block in its window.
        auto q6sh = [&](int f) { return (int)((((size_t)(f0 + f) * rb + (size_t)kb * CB)) & 3); };
        { // each feature's sub-block scales (Q4_K: and mins, ggml's get_scale_min_k4) and d
            // A warp that alone takes its features (one warp along the
            // rows) unpacks them itself, LPF lanes a feature, and only its
            // own lanes wait; otherwise all threads do, two a feature, and
            // all wait.
            constexpr bool OWN = L::WR == 1;
            constexpr int LPF = OWN ? 32 / (8 * NI) : 2;
            const int f = OWN ? wf0 + lane / LPF : tid / 2;
            for (int h = (OWN ? lane : tid) % LPF; h < 2; h += LPF) {
                if (TW == T_Q4_K) {
                    // ggml's get_scale_min_k4 four bytes at a time, h = 0
                    // the scales, 1 the mins: those of sub-blocks 0-3 are
                    // the low 6 bits of bytes 4h…4h+3 of the 12, those of
                    // 4-7 a nibble of bytes 8-11 (the low for scales) under
                    // the top 2 bits of bytes 4h….
                    const u8* b = wr + f * WS;
                    const u32* q = (const u32*)(b + 4);
                    const u32 lo = q[h], hi = q[2];
                    *(uint2*)(wsm + f * 16 + 8 * h) =
                        make_uint2(lo & 0x3f3f3f3fu, ((hi >> (4 * h)) & 0x0f0f0f0fu) | ((lo >> 2) & 0x30303030u));
                    wdd[2 * f + h] = __half2float(*(const __half*)(b + 2 * h));
                } else if (TW == T_Q6_K) {
                    // The 16 scales at byte 192 of the block, sh into its window.
                    const u32* q = (const u32*)(wr + f * WS) + 48 + 2 * h;
                    const u32 sel = 0x3210 + 0x1111 * q6sh(f);
                    *(uint2*)(wsm + f * 16 + 8 * h) = make_uint2(__byte_perm(q[0], q[1], sel), __byte_perm(q[1], q[2], sel));
                    if (!h) wdd[2 * f] = __half2float(*(const __half*)(wr + f * WS + q6sh(f) + 208));
                }
            }
            if (OWN) __syncwarp();
            else __syncthreads();
        }
        // Fragments whose 16 rows are all past the request's rows are
        // skipped: a decode step of 9 rows computes 16.
        const int nmi = min(MI, max(0, (nr - wr0 + 15) / 16));
        if (nmi == 0) continue;
        int isc[MI][NI][4];
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
#pragma unroll
                for (int e = 0; e < 4; e++) isc[mi][ni][e] = 0;
        // The sub-blocks' integer products. NM, the fragments of 16 rows
        // computed, is a constant: a warp all of whose fragments have rows
        // (every warp of a prefill but the last tile's) runs code without a
        // branch per fragment, which let the compiler neither overlap the
        // mma of one B fragment with the multiply-adds of the last nor
        // hoist the loads.
        auto product = [&](auto nm, int nmr) {
            constexpr int NM = decltype(nm)::value;
            // ldmatrix's rows: lane l's of the A fragments (rows l % 8 and
            // + 8, bytes 16·(l / 16) of the 32), and of two B fragments
            // (features l % 8 of fragment l / 16, bytes 16·(l / 8 % 2)).
            const u32 la = sm0 + (u32)(base - smem) + (wr0 + (lane & 7) + 8 * (lane >> 3 & 1)) * MT_XS + 16 * (lane >> 4);
            const u32 lb = sm0 + (u32)(wr - smem) + (wf0 + (lane & 7) + 8 * (lane >> 4)) * WS + 16 * (lane >> 3 & 1);
            if (TW == T_Q4_K) {
#pragma unroll 2
                for (int s = 0; s < 8; s++) {
                    int a[MI][4], b[NI][2];
#pragma unroll
                    for (int mi = 0; mi < MI; mi++) {
                        if (mi >= NM || mi >= nmr) break;
                        ldsm4(a[mi], la + mi * 16 * MT_XS + 32 * s);
                    }
                    // The sub-block pair's packed quants, as they are: one
                    // ldmatrix a pair of B fragments, the same for both
                    // sub-blocks (low nibbles, then high).
                    int bq[NI][2];
#pragma unroll
                    for (int ni = 0; ni < NI; ni += 2) ldsm4(&bq[ni][0], lb + ni * 8 * WS + 16 + 32 * (s >> 1));
#pragma unroll
                    for (int ni = 0; ni < NI; ni++) {
                        const int sh = 4 * (s & 1);
                        b[ni][0] = (bq[ni][0] >> sh) & 0x0F0F0F0F;
                        b[ni][1] = (bq[ni][1] >> sh) & 0x0F0F0F0F;
                    }
#pragma unroll
                    for (int ni = 0; ni < NI; ni++) {
                        int fc = wf0 + ni * 8 + 2 * t;
                        int s0 = wsm[fc * 16 + s], s1 = wsm[(fc + 1) * 16 + s];
#pragma unroll
                        for (int mi = 0; mi < MI; mi++) {
                            if (mi >= NM || mi >= nmr) break;
                            int c[4] = {0, 0, 0, 0};
                            mma_k32(c, a[mi], b[ni]);
                            isc[mi][ni][0] += s0 * c[0], isc[mi][ni][1] += s1 * c[1];
                            isc[mi][ni][2] += s0 * c[2], isc[mi][ni][3] += s1 * c[3];
                        }
                    }
                }
            } else if (TW == T_Q8_0) {
                // Block s's quants start at byte 34s + 2 of the feature's 272,
                // on a 4-byte boundary for odd s and 2 past one for even s:
                // its words come through byte_perm. The float combination is
                // per block of 32, (dx·dw)·sum, as the oracle's.
                const u32* wq[NI];
#pragma unroll
                for (int ni = 0; ni < NI; ni++) wq[ni] = (const u32*)(wr + (wf0 + ni * 8 + g) * WS);
                const float* xs = (const float*)xbs; // [MR][8] the rows' block scales
#pragma unroll 2
                for (int s = 0; s < 8; s++) {
                    int a[MI][4], b[NI][2];
#pragma unroll
                    for (int mi = 0; mi < MI; mi++) {
                        if (mi >= NM || mi >= nmr) break;
                        ldsm4(a[mi], la + mi * 16 * MT_XS + 32 * s);
                    }
                    const int o = (34 * s + 2 + 4 * t) >> 2;
                    const u32 sel = s & 1 ? 0x3210 : 0x5432;
#pragma unroll
                    for (int ni = 0; ni < NI; ni++) {
                        b[ni][0] = __byte_perm(wq[ni][o], wq[ni][o + 1], sel);
                        b[ni][1] = __byte_perm(wq[ni][o + 4], wq[ni][o + 5], sel);
                    }
#pragma unroll
                    for (int ni = 0; ni < NI; ni++) {
                        int fc = wf0 + ni * 8 + 2 * t;
                        float w0 = __half2float(*(const __half*)(wr + fc * WS + 34 * s));
                        float w1 = __half2float(*(const __half*)(wr + (fc + 1) * WS + 34 * s));
#pragma unroll
                        for (int mi = 0; mi < MI; mi++) {
                            if (mi >= NM || mi >= nmr) break;
                            int c[4] = {0, 0, 0, 0};
                            mma_k32(c, a[mi], b[ni]);
                            int r = wr0 + mi * 16 + g;
                            float x0 = xs[r * 8 + s], x1 = xs[(r + 8) * 8 + s];
                            acc[mi][ni][0] += (x0 * w0) * (float)c[0], acc[mi][ni][1] += (x0 * w1) * (float)c[1];
                            acc[mi][ni][2] += (x1 * w0) * (float)c[2], acc[mi][ni][3] += (x1 * w1) * (float)c[3];
                        }
                    }
                }
            } else {
                // Each B-fragment feature's window and the byte_perm selector
                // that takes a word from its offset (0x3210: none, 0x5432: 2).
                const u32* wq[NI];
                u32 sel[NI];
#pragma unroll
                for (int ni = 0; ni < NI; ni++) {
                    int f = wf0 + ni * 8 + g;
                    wq[ni] = (const u32*)(wr + f * WS);
                    sel[ni] = 0x3210 + 0x1111 * q6sh(f);
                }
#pragma unroll 8
                for (int s = 0; s < 16; s++) { // Q6_K: sub-blocks of 16 (8 a step: qu a constant)
                    int a[MI][2], b[NI];
#pragma unroll
                    for (int mi = 0; mi < MI; mi++) {
                        if (mi >= NM || mi >= nmr) break;
                        ldsm2(a[mi], la + mi * 16 * MT_XS + 16 * s);
                    }
                    // Elements e = 16s+4t…+3: half h, quarter qu of it,
                    // position l. Each byte of B is 4·(q − 32), q the 6-bit
                    // quant: q's bits in bits 2-7 with the top one flipped,
                    // one instruction from the two fields where q − 32 took
                    // five; the products are 4 times theirs (exactly: 4·127·32
                    // a term, ±2^29 a super-block's sum), divided out below.
                    int e = 16 * s + 4 * t, h = e >> 7, qu = (e >> 5) & 3, l = e & 31;
#pragma unroll
                    for (int ni = 0; ni < NI; ni++) {
                        int o1 = (64 * h + l + 32 * (qu & 1)) / 4, o2 = (128 + 32 * h + l) / 4;
                        u32 wl = __byte_perm(wq[ni][o1], wq[ni][o1 + 1], sel[ni]), wh = __byte_perm(wq[ni][o2], wq[ni][o2 + 1], sel[ni]);
                        u32 ql = (qu >> 1 ? wl >> 2 : wl << 2) & 0x3C3C3C3Cu, qh = (wh << (6 - 2 * qu)) & 0xC0C0C0C0u;
                        b[ni] = (int)((ql | qh) ^ 0x80808080u);
                    }
#pragma unroll
                    for (int ni = 0; ni < NI; ni++) {
                        int fc = wf0 + ni * 8 + 2 * t;
                        int s0 = (signed char)wsm[fc * 16 + s], s1 = (signed char)wsm[(fc + 1) * 16 + s];
#pragma unroll
                        for (int mi = 0; mi < MI; mi++) {
                            if (mi >= NM || mi >= nmr) break;
                            int c[4] = {0, 0, 0, 0};
                            mma_k16(c, a[mi], b[ni]);
                            isc[mi][ni][0] += s0 * c[0], isc[mi][ni][1] += s1 * c[1];
                            isc[mi][ni][2] += s0 * c[2], isc[mi][ni][3] += s1 * c[3];
                        }
                    }
                }
            }
        };
        if (TW == T_Q6_K) product(Ic<MI>{}, nmi);
        else if (MI == 1 || nmi == MI) product(Ic<MI>{}, MI);
        else product(Ic<1>{}, 1);
        // The super-block's float combination, per (row, feature). Q4_K's
        // min term is Σ mins·(sums of the activation quants), per sub-block
        // of 32: with the record's bytes of the sums (see MT_REC) as an A
        // fragment (k: the eight lo, then the eight hi) and the mins as B,
        // [mins; 0] gives Σ mins·lo and [0; mins] Σ mins·hi, the same
        // integer as eight multiply-adds. (Q8_0 combined per block above.)
#pragma unroll
        for (int mi = 0; mi < MI; mi++) {
            if (TW == T_Q8_0 || mi >= nmi) break;
            int imn[NI][4];
            if (TW == T_Q4_K) {
                const int r0 = wr0 + mi * 16 + g;
                const int a[2] = {*(const int*)(xbs + r0 * 32 + 4 * t), *(const int*)(xbs + (r0 + 8) * 32 + 4 * t)};
#pragma unroll
                for (int ni = 0; ni < NI; ni++) {
                    const int mw = *(const int*)(wsm + (wf0 + ni * 8 + g) * 16 + 8 + 4 * (t & 1));
                    int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
                    mma_k16(lo, a, t < 2 ? mw : 0);
                    mma_k16(hi, a, t < 2 ? 0 : mw);
#pragma unroll
                    for (int e = 0; e < 4; e++) imn[ni][e] = hi[e] * 128 + lo[e];
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const float dx = xd[wr0 + mi * 16 + g + 8 * hh];
#pragma unroll
                for (int ni = 0; ni < NI; ni++)
#pragma unroll
                    for (int cc = 0; cc < 2; cc++) {
                        const int fc = wf0 + ni * 8 + 2 * t + cc, e = 2 * hh + cc;
                        if (TW == T_Q4_K)
                            acc[mi][ni][e] += dx * (wdd[2 * fc] * (float)isc[mi][ni][e] - wdd[2 * fc + 1] * (float)imn[ni][e]);
                        else
                            acc[mi][ni][e] += (wdd[2 * fc] * dx) * (float)(isc[mi][ni][e] >> 2); // Q6_K: see its B
                    }
            }
        }
    }
    if (splits > 1) {
        // This block's partial tile, the threads' values side by side
        // (float4 i of thread tid at i·MT_THREADS + tid, so that a warp's
        // stores and loads are 512 contiguous bytes); the last block of
        // the tile to count itself in sums them in order.
        constexpr int NV = MI * NI * 4;
        const int tile = blockIdx.y * gridDim.x + blockIdx.x;
        u32* count = (u32*)q8;
        float4* part = (float4*)(recs + (size_t)gridDim.x * MR * kbs * MT_REC) + (size_t)tile * splits * (MT_THREADS * NV / 4) + tid;
        float4* mine = part + (size_t)blockIdx.z * (MT_THREADS * NV / 4);
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < NI; ni++)
                mine[(mi * NI + ni) * MT_THREADS] = make_float4(acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]);
        __threadfence();
        __syncthreads();
        __shared__ int last;
        if (tid == 0) last = atomicAdd(count + tile, 1u) == (u32)splits - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        for (int z = 0; z < splits; z++) {
            const float4* pz = part + (size_t)z * (MT_THREADS * NV / 4);
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++) {
                    float4 v = __ldcg(pz + (mi * NI + ni) * MT_THREADS);
                    if (z == 0) acc[mi][ni][0] = v.x, acc[mi][ni][1] = v.y, acc[mi][ni][2] = v.z, acc[mi][ni][3] = v.w;
                    else acc[mi][ni][0] += v.x, acc[mi][ni][1] += v.y, acc[mi][ni][2] += v.z, acc[mi][ni][3] += v.w;
                }
        }
        if (tid == 0) count[tile] = 0; // for the next launch
    }
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = wr0 + mi * 16 + g + 8 * (e >> 1);
            if (r >= nr) continue;
            int orow = row0 + r;
            if (lm) orow = io_row(io, orow, ROW_FLAGS) & ROW_WANTS_LOGITS ? (int)io_row(io, orow, ROW_SLOT) : -1;
            if (orow < 0) continue;
#pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                int j = f0 + wf0 + ni * 8 + 2 * t + (e & 1);
                if (j < n) o.store(orow, j, acc[mi][ni][e]);
            }
        }
}
