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
        else if (entry == ENTRY_ROWS4) mmv<T, Fast<T>::U, MMV_MR4>(x, w, io, k, n, o, false, wn, eps);
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

// fused_norm_pairs is fused_norm_mm for one-row steps with a pair
// epilogue (mmq.cuh's PE): the matrix-vector kernel's pairs, or on the
// float path a pair to two adjacent warps of a block (MM_WARPS is even,
// so a block's features start even), whose sums meet in shared memory.
template <int T, class PE>
__device__ __forceinline__ void fused_norm_pairs(const float* x, const float* wn, const u8* w, const u32* io, int k, int n,
    const MmOut& o, const PE& pe, float eps) {
    if constexpr (Fast<T>::OK) {
        mmv<T, Fast<T>::U, 1, PE>(x, w, io, k, n, o, false, wn, eps, pe);
        return;
    }
    dep_sync();
    extern __shared__ float xs[]; // normalized row, then its rounding
    __shared__ float sums[MM_WARPS];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS]) return;
    const float* xr = x + (size_t)row * k;
    float scale = rms_scale(xr, k, eps);
    for (int i = threadIdx.x; i < k; i += blockDim.x) xs[i] = (xr[i] * scale) * wn[i];
    __syncthreads();
    round_x<VT>(xs, xs + k, k); // T is WT
    const int warp = threadIdx.x >> 5, j = blockIdx.x * MM_WARPS + warp;
    float v = 0.f;
    if (j < n) v = dot_row<T>(w + (size_t)pe.row(j, n) * row_bytes<T>(k), xs + k, k);
    if ((threadIdx.x & 31) == 0) sums[warp] = v;
    __syncthreads();
    if ((threadIdx.x & 31) == 0 && (j & 1) == 0 && j < n) pe.pair(o, row, j, sums[warp], sums[warp + 1]);
}

// rms_norm_gate_up_swiglu (41): y[row] = silu(gate)·up of
// W_gate_up·norm(x[row]) (f gate rows then f up rows), for one-row steps
// only (launch.go refuses more): fused_norm_pairs with SwiGLUPair, each
// product formed as the swiglu kernel forms it from rms_norm_gate_up's
// sums, so y holds the bits of rms_norm_gate_up then swiglu.
template <int T>
__device__ __forceinline__ void fused_norm_swiglu(const float* x, const float* wn, const u8* w, const u32* io, int k, int f,
    float* y, float eps) {
    fused_norm_pairs<T, SwiGLUPair>(x, wn, w, io, k, 2 * f, mm_out(y, f, nullptr), SwiGLUPair(), eps);
}
