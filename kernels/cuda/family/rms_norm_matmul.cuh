// rms_norm_matmul.cuh: T-CUDA's kernel families rms_norm_matmul.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
// y|y2[row] = W·norm(x[row]): W's first n rows into y, the next n2 into
// y2 (null where n2 is 0), by rms_norm_gate_up's body (fused_norm.cuh),
// whose outputs are the same pair with n = n2 = f.
#include "../fused_norm.cuh"

#define NM_ARGS(stage)                                                                                                 \
    (const float* x, const float* w_norm, const u8* w, const u32* io, float* y, float* y2, u32 k, u32 n, u32 n2,        \
        u32 eps_bits stage)
#define NM_PARAMS NM_ARGS()
#define NM_BODY(tile, q8)                                                                                              \
    fused_norm_mm<WT>(x, w_norm, w, io, k, n + n2, MmOut{y, y2, y2, (int)n, (int)n2, nullptr},                          \
        __uint_as_float(eps_bits), tile, q8)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) NAME NM_PARAMS { NM_BODY(ENTRY_MAIN, nullptr); }
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile) NM_ARGS(STAGE_PARAM) {
    NM_BODY(ENTRY_TILE, STAGE_ARG);
}
#if MMQ_TYPE(WT)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows) NM_PARAMS { NM_BODY(ENTRY_ROWS, nullptr); }
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows4) NM_PARAMS { NM_BODY(ENTRY_ROWS4, nullptr); }
#endif
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3) CAT(NAME, _tile16) NM_ARGS(STAGE_PARAM) {
    NM_BODY(ENTRY_TILE16, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile32) NM_ARGS(STAGE_PARAM) {
    NM_BODY(ENTRY_TILE32, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _dp4a) NM_PARAMS { NM_BODY(ENTRY_DP4A, nullptr); }
extern "C" __global__ void __launch_bounds__(256) CAT(NAME, _stage) NM_ARGS(STAGE_PARAM) {
    mt_stage<VT>(x, io, k, (u8*)q8, w_norm, __uint_as_float(eps_bits));
}
#endif
