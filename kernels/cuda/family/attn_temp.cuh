// attn_temp.cuh: T-CUDA's kernel family attn_temp: each row scaled by its
// position's temperature; grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

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
