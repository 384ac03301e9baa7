// geglu.cuh: T-CUDA's kernel family geglu: y = gelu(gate)·up; grid
// (rows·cols/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// GELU as ggml's F16 table gives it (GGML_GELU_FP16, the oracle's
// geluF16): 0 at or below -10, x at or above 10, else ggml_gelu_f32's tanh
// form in float of the gate rounded to F16, the result rounded to F16;
// tanh in double, rounded.
__device__ __forceinline__ float gelu_f16(float x) {
    if (x <= -10.f) return 0.f;
    if (x >= 10.f) return x;
    const float a = 0.044715f, c = 0.79788456080286535587989211986876f;
    float h = round_f16(x);
    float t = (float)tanh((double)(c * h * (1.f + a * h * h)));
    return round_f16(0.5f * h * (1.f + t));
}
extern "C" __global__ void __launch_bounds__(256)
    NAME(const float* gate, const float* up, const u32* io, float* y, u32 cols) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * cols) return;
    y[i] = gelu_f16(gate[i]) * up[i];
}
