// moe_route_scale.cuh: T-CUDA's kernel family moe_route_scale: each route's
// weight *= s[expert]; grid (rows·n_used/256).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

extern "C" __global__ void __launch_bounds__(256) NAME(u32* route, const float* s, const u32* io, u32 n_used) {
    dep_sync();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)io[IO_ROWS] * n_used) return;
    route[2 * i + 1] = __float_as_uint(__uint_as_float(route[2 * i + 1]) * s[route[2 * i]]);
}
