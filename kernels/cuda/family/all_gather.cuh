// all_gather.cuh: T-CUDA's one-shot gather over NVLink peer access
// (peer.cuh): each rank's part of cols columns (kernels.Part: rank k's
// columns [k·cols/R, (k+1)·cols/R)), packed in x, assembled into y on
// every rank; with by_slot the rows are the active rows that want logits,
// each at its slot's row of x and y (x may then be y), else the active
// rows. Only the selected rows move, where NCCL's gather in a graph moves
// every slot's. Grid PEER_BLOCKS, block PEER_THREADS; the last parameter
// is the rank's exchange descriptor.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../peer.cuh"

// gather_row says whether request row i takes part, and at which row of
// x and y.
__device__ __forceinline__ bool gather_row(const u32* io, u32 i, u32 by_slot, u32* row) {
    if (!by_slot) {
        *row = i;
        return true;
    }
    *row = io_row(io, i, ROW_SLOT);
    return (io_row(io, i, ROW_FLAGS) & ROW_WANTS_LOGITS) != 0;
}

extern "C" __global__ void __launch_bounds__(PEER_THREADS) NAME(const float* x, const u32* io, float* y, u32 cols, u32 by_slot, const peer_comm* pc) {
    peer p;
    peer_load(pc, p);
    const u32 R = p.R, r = p.r;
    const u32 rows = io[IO_ROWS];  // the request table is fixed during a replay
    dep_sync();
    const u32 e = peer_epoch(p);
    // A slot holds request row i's part at i·widest.
    const u32 widest = (u32)(((size_t)cols + R - 1) / R);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const u32 lo = (u32)((size_t)r * cols / R), w = (u32)((size_t)(r + 1) * cols / R) - lo;
    float* dst[PEER_MAX_RANKS];
    peer_slots(p, e, dst);
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < (size_t)rows * w; t += stride) {
        u32 i = (u32)(t / w), c = (u32)(t % w), row;
        if (!gather_row(io, i, by_slot, &row)) continue;
        float v = x[(size_t)row * w + c];
#pragma unroll
        for (u32 q = 0; q < PEER_MAX_RANKS; q++)
            if (q < R) dst[q][(size_t)i * widest + c] = v;
    }
    peer_barrier(p, e);
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < (size_t)R * rows * widest; t += stride) {
        u32 k = (u32)(t / ((size_t)rows * widest));
        size_t rest = t % ((size_t)rows * widest);
        u32 i = (u32)(rest / widest), c = (u32)(rest % widest), row;
        u32 klo = (u32)((size_t)k * cols / R), kw = (u32)((size_t)(k + 1) * cols / R) - klo;
        if (c >= kw || !gather_row(io, i, by_slot, &row)) continue;
        y[(size_t)row * cols + klo + c] = __ldcg(peer_slot(p, p.own, k, e) + (size_t)i * widest + c);
    }
}
