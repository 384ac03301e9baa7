// rms_norm_gate_up_swiglu.cuh: T-CUDA's kernel families rms_norm_gate_up_swiglu.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
// y[row] = silu(gate)·up of rms_norm_gate_up's outputs, for one-row
// decode steps (fused_norm.cuh's fused_norm_swiglu): the fuse pass forms
// it only in one-row decode variants, and its one entry is the
// matrix-vector (or float) kernel those take.
#include "../fused_norm.cuh"

extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    NAME(const float* x, const float* w_norm, const u8* w_gate_up, const u32* io, float* y, u32 k, u32 f, u32 eps_bits) {
    fused_norm_swiglu<WT>(x, w_norm, w_gate_up, io, (int)k, (int)f, y, __uint_as_float(eps_bits));
}
