// all_reduce_sum.cuh: T-CUDA's one-shot all-reduce over NVLink peer
// access (peer.cuh): x's active rows (cols each) summed over the ranks of
// a tensor-parallel set, in place, in rank order, so every rank holds the
// same bits. runtime/cuda launches it for the sums of a decode step
// (block PEER_THREADS; grid PEER_BLOCKS, or a block per multiprocessor
// where the rows are many: kernels/cuda's PeerReduceLaunch) and NCCL's
// for the rest; after
// the ABI's parameters come the rank's exchange descriptor and residual:
// where not null, the residual add that follows the sum in the stream
// (residual += x over the active rows) is done here too, with the same
// float addition, and the tier leaves that add's launch out. Then, where
// norm_y is not null (and residual is), the RMS norm of the residual
// stream that follows the add (rms_norm over whole rows: norm_y =
// residual · rms_scale · norm_w, norm_w null for none) is done here as
// well, a block a row, and the tier leaves that launch out too: a
// layer's collective then costs no launch of its own where the layer
// after it normalizes on its own.
// The values travel as peer.cuh's pairs (value, epoch), one 8-byte store
// each into every rank's pair area: a rank's sum of an element waits for
// that element's pairs only, with no barrier between the ranks' blocks.
// The sum is in rank order, as before, so the bits are the same.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../peer.cuh"

// ALL_REDUCE_U is the elements a thread sums at a time, their pairs'
// loads in flight together.
#define ALL_REDUCE_U 8

extern "C" __global__ void __launch_bounds__(PEER_THREADS) NAME(float* x, const u32* io, u32 cols, const peer_comm* pc, float* residual,
                                                                const float* norm_w, float* norm_y, u32 eps_bits) {
    peer p;
    peer_load(pc, p);
    const u32 rows = io[IO_ROWS];  // the request table is fixed during a replay
    const size_t n = (size_t)rows * cols;
    dep_sync();
    // A large all-reduce runs more blocks than PEER_BLOCKS (runtime/cuda
    // spreads it over the multiprocessors): they count the epoch as a
    // grid (peer_grid_epoch).
    const bool grid = gridDim.x != PEER_BLOCKS;
    const u32 e = grid ? peer_grid_epoch(pc) : peer_epoch(p);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint2* dst[PEER_MAX_RANKS];
#pragma unroll
    for (u32 q = 0; q < PEER_MAX_RANKS; q++) dst[q] = q < p.R ? peer_ll(p, p.bufs[q], p.r, e) : (uint2*)0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
#pragma unroll
        for (u32 q = 0; q < PEER_MAX_RANKS; q++)
            if (q < p.R) peer_ll_put(dst[q] + i, v, e);
    }
    // Every thread has read the epoch: count it. The next collective
    // reads the count after dep_sync, once this grid has finished.
    if (!grid) {
        __syncthreads();
        if (threadIdx.x == 0) *p.epoch = e;
    }
    // An element's sum waits for its pair from every rank, this one's
    // included, whose push read x's element: so x is written only after
    // it was read.
    const uint2* mine = peer_ll(p, p.own, 0, e);
    if (!norm_y || !residual) {
        for (size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += ALL_REDUCE_U * stride) {
            float s[ALL_REDUCE_U];
            peer_ll_sum<ALL_REDUCE_U>(p, mine, i0, stride, n, e, s);
#pragma unroll
            for (int u = 0; u < ALL_REDUCE_U; u++) {
                const size_t i = i0 + u * stride;
                if (i >= n) break;
                x[i] = s[u];
                if (residual) residual[i] += s[u];
            }
        }
    } else {
        // With the norm, a block takes whole rows: the row's sums and adds,
        // then its norm, as rms_norm's block does (its scale, its products).
        const float eps = __uint_as_float(eps_bits);
        for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
            const size_t base = (size_t)row * cols;
            for (u32 i0 = threadIdx.x; i0 < cols; i0 += ALL_REDUCE_U * blockDim.x) {
                float s[ALL_REDUCE_U];
                peer_ll_sum<ALL_REDUCE_U>(p, mine + base, i0, blockDim.x, cols, e, s);
#pragma unroll
                for (int u = 0; u < ALL_REDUCE_U; u++) {
                    const u32 i = i0 + u * blockDim.x;
                    if (i >= cols) break;
                    x[base + i] = s[u];
                    residual[base + i] += s[u];
                }
            }
            __syncthreads();  // every thread's adds before the row's sum of squares
            const float* h = residual + base;
            const float scale = rms_scale(h, (int)cols, eps);
            // norm_y may alias x: each thread writes the columns whose sums
            // it stored, after them.
            for (u32 i = threadIdx.x; i < cols; i += blockDim.x) norm_y[base + i] = (h[i] * scale) * (norm_w ? norm_w[i] : 1.f);
        }
    }
    if (grid && peer_grid_last(pc)) peer_grid_count(pc, e);
}
