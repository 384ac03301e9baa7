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

// The fused families' entries. The family's file defines FN_ARGS(stage)
// (the entries' parameters, stage: the staged entries' extra one) and
// FN_BODY(entry, q8) (the call of fused_norm_mm) before it includes this.
#ifdef FN_BODY
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) NAME FN_ARGS() { FN_BODY(ENTRY_MAIN, nullptr); }
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile) FN_ARGS(STAGE_PARAM) {
    FN_BODY(ENTRY_TILE, STAGE_ARG);
}
#if MMQ_TYPE(WT)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) CAT(NAME, _rows) FN_ARGS() { FN_BODY(ENTRY_ROWS, nullptr); }
#endif
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3) CAT(NAME, _tile16) FN_ARGS(STAGE_PARAM) {
    FN_BODY(ENTRY_TILE16, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile32) FN_ARGS(STAGE_PARAM) {
    FN_BODY(ENTRY_TILE32, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _dp4a) FN_ARGS() { FN_BODY(ENTRY_DP4A, nullptr); }
extern "C" __global__ void __launch_bounds__(256) CAT(NAME, _stage) FN_ARGS(STAGE_PARAM) {
    mt_stage<VT>(x, io, k, (u8*)q8, w_norm, __uint_as_float(eps_bits));
}
#endif
#endif
