// all_reduce_sum.cuh: T-CUDA's one-shot all-reduce over NVLink peer
// access (peer.cuh): x's active rows (cols each) summed over the ranks of
// a tensor-parallel set, in place, in rank order, so every rank holds the
// same bits. runtime/cuda launches it for the small sums of a decode step
// (grid PEER_BLOCKS, block PEER_THREADS) and NCCL's for the rest; after
// the ABI's parameters come the rank's exchange descriptor and residual:
// where not null, the residual add that follows the sum in the stream
// (residual += x over the active rows) is done here too, with the same
// float addition, and the tier leaves that add's launch out.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../peer.cuh"

extern "C" __global__ void __launch_bounds__(PEER_THREADS) NAME(float* x, const u32* io, u32 cols, const peer_comm* pc, float* residual) {
    peer p;
    peer_load(pc, p);
    const size_t n = (size_t)io[IO_ROWS] * cols;  // the request table is fixed during a replay
    dep_sync();
    const u32 e = peer_epoch(p);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float* dst[PEER_MAX_RANKS];
    peer_slots(p, e, dst);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
#pragma unroll
        for (u32 q = 0; q < PEER_MAX_RANKS; q++)
            if (q < p.R) dst[q][i] = v;
    }
    peer_barrier(p, e);
    const float* mine = peer_slot(p, p.own, 0, e);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = __ldcg(mine + i);
        for (u32 k = 1; k < p.R; k++) s += __ldcg(mine + k * p.floats + i);
        x[i] = s;
        if (residual) residual[i] += s;
    }
}
