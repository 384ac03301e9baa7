// lm_head.cuh: T-CUDA's kernel family lm_head: logits[slot(row)] = W·x[row]
// for rows that want logits; entries as matmul's.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"

extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    NAME(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv) {
    if constexpr (Fast<WT>::OK) {
        mmv<WT>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
        return;
    }
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)nv) return;
    float v = dot_row<WT>(w + (size_t)j * row_bytes<WT>(k), xs, k);
    if ((threadIdx.x & 31) == 0) logits[(size_t)io_row(io, row, ROW_SLOT) * nv + j] = v;
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv STAGE_PARAM) {
    if constexpr (Tc<WT>::OK) mmt<WT, 64>(w, io, k, nv, mm_out(logits, nv, nullptr), true, STAGE_ARG);
    else if constexpr (Fast<WT>::OK) mmq<WT>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
}
#if MMQ_TYPE(WT)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    CAT(NAME, _rows)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv) {
    mmv<WT, Fast<WT>::U, MMV_MR>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
}
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    CAT(NAME, _rows4)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv) {
    mmv<WT, Fast<WT>::U, MMV_MR4>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
}
#endif
#if MMT_TYPE(WT) // NAME_dp4a: the dp4a tile kernel, for prefill variants (few of whose rows want logits)
extern "C" __global__ void __launch_bounds__(256, 3)
    CAT(NAME, _tile16)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv, const u8* q8) {
    mmt<WT, 16>(w, io, k, nv, mm_out(logits, nv, nullptr), true, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile32)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv, const u8* q8) {
    mmt<WT, 32>(w, io, k, nv, mm_out(logits, nv, nullptr), true, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _dp4a)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv) {
    mmq<WT>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
}
extern "C" __global__ void __launch_bounds__(256)
    CAT(NAME, _stage)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv, u8* q8) {
    mt_stage<VT>(x, io, k, q8, nullptr, 0.f);
}
#endif
