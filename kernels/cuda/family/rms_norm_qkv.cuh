// rms_norm_qkv.cuh: T-CUDA's kernel families rms_norm_qkv.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file; its
// entries are fused_norm.cuh's.
#define FN_ARGS(stage)                                                                                                 \
    (const float* x, const float* w_norm, const u8* w_qkv, const float* b_qkv, const u32* io, float* q, float* kk,     \
        float* v, u32 k, u32 n_q, u32 n_kv, u32 eps_bits stage)
#define FN_BODY(tile, q8)                                                                                              \
    fused_norm_mm<WT>(x, w_norm, w_qkv, io, k, n_q + 2 * n_kv, MmOut{q, kk, v, (int)n_q, (int)n_kv, b_qkv},             \
        __uint_as_float(eps_bits), tile, q8)
#include "../fused_norm.cuh"
