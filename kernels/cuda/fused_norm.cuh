// fused_norm.cuh: the fused RMS norm + projections body shared by
// rms_norm_qkv and rms_norm_gate_up.
#pragma once
#include "typed.cuh"

// rms_norm_qkv (7): q|k|v[row] = W_qkv·norm(x[row]) (+ b_qkv), W_qkv's rows
// Q's, then K's, then V's. rms_norm_gate_up (8): gate|up[row] =
// W_gate_up·norm(x[row]), f gate rows then f up rows. The integer types
// normalize each activation row while quantizing it (mmv, mmq, mt_stage);
// the others normalize into shared memory and take the float path, grid
// (n/MM_WARPS, rows).
template <int T>
__device__ __forceinline__ void fused_norm_mm(const float* x, const float* wn, const u8* w, const u32* io, int k, int n,
    const MmOut& o, float eps, int entry, const u8* q8 = nullptr) {
    if constexpr (Fast<T>::OK) {
        if (entry == ENTRY_MAIN) mmv<T>(x, w, io, k, n, o, false, wn, eps);
        else if (entry == ENTRY_ROWS) mmv<T, Fast<T>::U, MMV_MR>(x, w, io, k, n, o, false, wn, eps);
        else if constexpr (Tc<T>::OK) {
            if (entry == ENTRY_TILE) mmt<T, 64>(w, io, k, n, o, false, q8);
            else if (entry == ENTRY_TILE16) mmt<T, 16>(w, io, k, n, o, false, q8);
            else if (entry == ENTRY_TILE32) mmt<T, 32>(w, io, k, n, o, false, q8);
            else mmq<T>(x, w, io, k, n, o, false, wn, eps);
        } else mmq<T>(x, w, io, k, n, o, false, wn, eps);
        return;
    }
    dep_sync();
    extern __shared__ float xs[]; // normalized row, then its rounding
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS]) return;
    const float* xr = x + (size_t)row * k;
    float scale = rms_scale(xr, k, eps);
    for (int i = threadIdx.x; i < k; i += blockDim.x) xs[i] = (xr[i] * scale) * wn[i];
    __syncthreads();
    round_x<VT>(xs, xs + k, k); // T is WT
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= n) return;
    float v = dot_row<T>(w + (size_t)j * row_bytes<T>(k), xs + k, k);
    if ((threadIdx.x & 31) == 0) o.store(row, j, v);
}
