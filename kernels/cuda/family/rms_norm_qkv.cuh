// rms_norm_qkv.cuh: T-CUDA's kernel families rms_norm_qkv.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../fused_norm.cuh"

#define QKV_ARGS(stage)                                                                                                \
    (const float* x, const float* w_norm, const u8* w_qkv, const float* b_qkv, const u32* io, float* q, float* kk,     \
        float* v, u32 k, u32 n_q, u32 n_kv, u32 eps_bits stage)
#define QKV_PARAMS QKV_ARGS()
#define QKV_BODY(tile, q8)                                                                                             \
    fused_norm_mm<WT>(x, w_norm, w_qkv, io, k, n_q + 2 * n_kv, MmOut{q, kk, v, (int)n_q, (int)n_kv, b_qkv},             \
        __uint_as_float(eps_bits), tile, q8)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) NAME QKV_PARAMS { QKV_BODY(ENTRY_MAIN, nullptr); }
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile) QKV_ARGS(STAGE_PARAM) {
    QKV_BODY(ENTRY_TILE, STAGE_ARG);
}
#if MMQ_TYPE(WT)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows) QKV_PARAMS { QKV_BODY(ENTRY_ROWS, nullptr); }
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows4) QKV_PARAMS { QKV_BODY(ENTRY_ROWS4, nullptr); }
#endif
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3) CAT(NAME, _tile16) QKV_ARGS(STAGE_PARAM) {
    QKV_BODY(ENTRY_TILE16, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile32) QKV_ARGS(STAGE_PARAM) {
    QKV_BODY(ENTRY_TILE32, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _dp4a) QKV_PARAMS { QKV_BODY(ENTRY_DP4A, nullptr); }
extern "C" __global__ void __launch_bounds__(256) CAT(NAME, _stage) QKV_ARGS(STAGE_PARAM) {
    mt_stage<VT>(x, io, k, (u8*)q8, w_norm, __uint_as_float(eps_bits));
}
#endif
