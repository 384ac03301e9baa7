// rms_norm_gate_up.cuh: T-CUDA's kernel families rms_norm_gate_up.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../fused_norm.cuh"

#define GU_ARGS(stage)                                                                                                 \
    (const float* x, const float* w_norm, const u8* w_gate_up, const u32* io, float* gate, float* up, u32 k, u32 f,     \
        u32 eps_bits stage)
#define GU_PARAMS GU_ARGS()
#define GU_BODY(tile, q8)                                                                                              \
    fused_norm_mm<WT>(x, w_norm, w_gate_up, io, k, 2 * f, MmOut{gate, up, up, (int)f, (int)f, nullptr},                \
        __uint_as_float(eps_bits), tile, q8)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) NAME GU_PARAMS { GU_BODY(ENTRY_MAIN, nullptr); }
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile) GU_ARGS(STAGE_PARAM) {
    GU_BODY(ENTRY_TILE, STAGE_ARG);
}
#if MMQ_TYPE(WT)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows) GU_PARAMS { GU_BODY(ENTRY_ROWS, nullptr); }
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows4) GU_PARAMS { GU_BODY(ENTRY_ROWS4, nullptr); }
#endif
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3) CAT(NAME, _tile16) GU_ARGS(STAGE_PARAM) {
    GU_BODY(ENTRY_TILE16, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile32) GU_ARGS(STAGE_PARAM) {
    GU_BODY(ENTRY_TILE32, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _dp4a) GU_PARAMS { GU_BODY(ENTRY_DP4A, nullptr); }
extern "C" __global__ void __launch_bounds__(256) CAT(NAME, _stage) GU_ARGS(STAGE_PARAM) {
    mt_stage<VT>(x, io, k, (u8*)q8, w_norm, __uint_as_float(eps_bits));
}
#endif
