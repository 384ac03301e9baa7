// gdn_gates.cuh: T-CUDA's kernel family gdn_gates: alpha = softplus(alpha +
// dt)·a, beta = sigmoid(beta) in place; grid (rows·heads/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// As the oracle (ggml's unary ops): softplus x above 20, else
// logf(1 + expf(x)); sigmoid 1/(1 + expf(-x)); exp and log in double,
// rounded.
extern "C" __global__ void __launch_bounds__(256)
    NAME(float* alpha, float* beta, const float* dt, const float* a, const u32* io, u32 heads) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * heads) return;
    int h = i % heads;
    float x = alpha[i] + dt[h];
    if (x <= 20.f) x = (float)log((double)(1.f + (float)exp((double)x)));
    alpha[i] = x * a[h];
    beta[i] = 1.f / (1.f + (float)exp(-(double)beta[i]));
}
