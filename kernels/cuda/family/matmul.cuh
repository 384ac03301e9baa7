// matmul.cuh: T-CUDA's kernel families matmul and matmul_residual.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"
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
