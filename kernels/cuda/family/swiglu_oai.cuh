// swiglu_oai.cuh: T-CUDA's kernel family swiglu_oai: gpt-oss's clamped SwiGLU;
// grid (rows·cols/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// As the oracle (ggml's swiglu_oai): x = min(gate, limit), v =
// clamp(up, ±limit), y = x/(1 + expf(alpha·(0 - x)))·(v + 1), the
// exponential taken in double and rounded.
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols, u32 alpha_bits, u32 limit_bits) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    float alpha = __uint_as_float(alpha_bits), limit = __uint_as_float(limit_bits);
    float x = fminf(gate[i], limit);
    float v = fminf(fmaxf(up[i], -limit), limit);
    y[i] = x / (1.f + (float)exp((double)(alpha * (0.f - x)))) * (v + 1.f);
}
