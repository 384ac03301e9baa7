// matmul.cuh: T-CUDA's kernel families matmul and matmul_residual.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"
#include "../peer.cuh"
// matmul (2): y[row] = W·x[row] (+ bias). matmul_residual (9): y[row] +=
// W·x[row] (+ bias), the product rounded to float before the add, as the
// unfused matmul and add do; x must not alias y.
// The integer types (mmq.cuh) have two entries: NAME, the matrix-vector
// kernel for single-row variants, and NAME_tile for variants of more rows;
// launch.go shapes each. The other types run the float path below, grid
// (n/MM_WARPS, rows), from NAME.
#define MM_ACC (FAMILY == FAMILY_MATMUL_RESIDUAL)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    NAME(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n) {
    if constexpr (Fast<WT>::OK) {
        mmv<WT>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false);
        return;
    }
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS]) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)n) return;
    float v = dot_row<WT>(w + (size_t)j * row_bytes<WT>(k), xs, k);
    if ((threadIdx.x & 31) == 0) mm_out(y, n, bias, MM_ACC).store(row, j, v);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n STAGE_PARAM) {
    if constexpr (Tc<WT>::OK) // grid (rows/64, n/MT_N, splits)
        mmt<WT, 64>(w, io, k, n, mm_out(y, n, bias, MM_ACC), false, STAGE_ARG);
    else if constexpr (Fast<WT>::OK) mmq<WT>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false); // grid (mmqWidth, rows/MM_MR)
}
#if MMQ_TYPE(WT)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    CAT(NAME, _rows)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n) {
    mmv<WT, Fast<WT>::U, MMV_MR>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false);
}
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    CAT(NAME, _rows4)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n) {
    mmv<WT, Fast<WT>::U, MMV_MR4>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false);
}
#endif
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3)
    CAT(NAME, _tile16)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, const u8* q8) {
    mmt<WT, 16>(w, io, k, n, mm_out(y, n, bias, MM_ACC), false, q8); // grid (rows/16, n/MT_N, splits)
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile32)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, const u8* q8) {
    mmt<WT, 32>(w, io, k, n, mm_out(y, n, bias, MM_ACC), false, q8); // grid (rows/32, n/MT_N, splits)
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _dp4a)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n) {
    mmq<WT>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false);
}
extern "C" __global__ void __launch_bounds__(256)
    CAT(NAME, _stage)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, u8* q8) {
    mt_stage<VT>(x, io, k, q8, nullptr, 0.f); // grid (rows)
}
#endif
#if MMQ_TYPE(WT) && FAMILY == FAMILY_MATMUL
// NAME_peer is NAME for a one-row step's row-parallel product of a
// tensor-parallel set, with the one-shot all-reduce after it (and the
// residual add and RMS norm the all-reduce takes in) taken in:
// runtime/cuda launches it in place of the pair where every block of the
// grid is resident at once on every rank (the blocks wait for each
// other's ranks). Each block computes its features as NAME does, then
// pushes them as pairs (value, epoch: peer.cuh's peer_ll) to every rank,
// sums each feature's pairs in rank order (the all-reduce's order, so the
// same bits) into y, and adds the sum to residual where it is not null.
// The grid's last block to finish then normalizes the residual's rows
// into norm_y where it is not null (and residual is), with the
// all-reduce's scale (rms_scale over the same 512 threads) and products.
// The epoch is the collectives' (every block of theirs holds the same
// count between two collectives); the last block counts it for all of
// them, having counted the finished blocks in the word past their
// counters.
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    CAT(NAME, _peer)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, const peer_comm* pc,
        float* residual, const float* norm_w, float* norm_y, u32 eps_bits) {
    mmv<WT>(x, w, io, k, n, mm_out(y, n, bias, false), false);
    peer p;
    peer_load(pc, p);
    const u32 row = blockIdx.y, rows = io[IO_ROWS];
    const u32 e = peer_grid_epoch(pc); // after mmv's dep_sync: the last collective has counted
    const u32 rpb = blockDim.y, jstep = gridDim.x * rpb, j0 = blockIdx.x * rpb;
    const u32 tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    const u32 per = j0 < n ? (n - j0 + jstep - 1) / jstep * rpb : 0; // the block's features, j0 + m·jstep + t for t < rpb
    __syncthreads(); // the block's products are in y
    if (row < rows) {
        uint2* dst[PEER_MAX_RANKS];
#pragma unroll
        for (u32 q = 0; q < PEER_MAX_RANKS; q++) dst[q] = q < p.R ? peer_ll(p, p.bufs[q], p.r, e) : (uint2*)0;
        for (u32 f = tid; f < per; f += nt) {
            const u32 j = j0 + f / rpb * jstep + f % rpb;
            if (j >= n) continue;
            const size_t i = (size_t)row * n + j;
            const float v = y[i];
#pragma unroll
            for (u32 q = 0; q < PEER_MAX_RANKS; q++)
                if (q < p.R) peer_ll_put(dst[q] + i, v, e);
        }
        const uint2* mine = peer_ll(p, p.own, 0, e);
        for (u32 f = tid; f < per; f += nt) {
            const u32 j = j0 + f / rpb * jstep + f % rpb;
            if (j >= n) continue;
            const size_t i = (size_t)row * n + j;
            float s[1];
            peer_ll_sum<1>(p, mine, i, 0, i + 1, e, s);
            y[i] = s[0];
            if (residual) residual[i] += s[0];
        }
    }
    // Count the block in: every thread of it has read the epoch and
    // stored its sums; the last sees every block's sums and adds.
    if (!peer_grid_last(pc)) return;
    if (norm_y && residual) {
        const float eps = __uint_as_float(eps_bits);
        for (u32 r = 0; r < rows; r++) {
            const size_t base = (size_t)r * n;
            // The row into norm_y first (norm_y may alias y, whose sums no
            // one reads any more), from L2: other blocks added to it.
            for (u32 i = tid; i < n; i += nt) norm_y[base + i] = __ldcg(residual + base + i);
            __syncthreads();
            const float scale = rms_scale(norm_y + base, (int)n, eps); // ends with a barrier: read before overwritten
            for (u32 i = tid; i < n; i += nt) norm_y[base + i] = (norm_y[base + i] * scale) * (norm_w ? norm_w[i] : 1.f);
        }
    }
    peer_grid_count(pc, e);
}
#endif
