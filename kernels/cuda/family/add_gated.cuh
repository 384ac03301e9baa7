// add_gated.cuh: T-CUDA's kernel family add_gated: x += sigmoid(g·w)·y per
// row; grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// The gate's dot takes float products summed in double, and the sigmoid
// is taken in double, each rounded to float, as the oracle does (it sums
// in another order).
extern "C" __global__ void __launch_bounds__(256)
    NAME(float* x, const float* y, const float* g, const float* w, const u32* io, u32 cols, u32 k) {
    dep_sync();
    __shared__ double part[32];
    __shared__ float gate;
    int row = blockIdx.x, tid = threadIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    const float* gr = g + (size_t)row * k;
    double s = 0;
    for (int i = tid; i < (int)k; i += blockDim.x) s += (double)(gr[i] * w[i]);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((tid & 31) == 0) part[tid >> 5] = s;
    __syncthreads();
    if (tid == 0) {
        double t = 0;
        for (int i = 0; i < (int)blockDim.x >> 5; i++) t += part[i];
        gate = (float)(1.0 / (1.0 + exp(-(double)(float)t)));
    }
    __syncthreads();
    float* xr = x + (size_t)row * cols;
    const float* yr = y + (size_t)row * cols;
    for (int i = tid; i < (int)cols; i += blockDim.x) xr[i] += gate * yr[i];
}
