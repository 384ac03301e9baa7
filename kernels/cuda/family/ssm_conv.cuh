// ssm_conv.cuh: T-CUDA's kernel family ssm_conv: causal convolution + SiLU
// over each slot's rows; grid (rows, cols/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../recurrent.cuh"

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
