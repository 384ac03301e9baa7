// rms_norm_gate_up.cuh: T-CUDA's kernel families rms_norm_gate_up.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file; its
// entries are fused_norm.cuh's.
#define FN_ARGS(stage)                                                                                                 \
    (const float* x, const float* w_norm, const u8* w_gate_up, const u32* io, float* gate, float* up, u32 k, u32 f,     \
        u32 eps_bits stage)
#define FN_BODY(tile, q8)                                                                                              \
    fused_norm_mm<WT>(x, w_norm, w_gate_up, io, k, 2 * f, MmOut{gate, up, up, (int)f, (int)f, nullptr},                \
        __uint_as_float(eps_bits), tile, q8)
#include "../fused_norm.cuh"
