// typed.cuh: the weight-typed kernel families. An instance file (written
// by kernels/cuda/gen) defines WT (the ggml type id), FAMILY (which family
// to emit: one of families.cuh's FAMILY_* names) and NAME (the PTX entry:
// the catalog instance name with '.' replaced by '_').
#pragma once
#include "common.cuh"
#include "families.cuh"
#include "mmq.cuh"
#include "mmt.cuh"

#define VT (Geom<WT>::VT)

// The entry points of the integer matrix families (kcuda.EntryPoint):
// NAME, the matrix-vector kernel; NAME_tile, the multi-row kernel (mmt's
// 64-row tile for MMT_TYPE types, else mmq); for MMT_TYPE types
// NAME_tile16 and NAME_tile32, mmt's 16- and 32-row tiles for steps of up
// to 64 rows;
// NAME_stage, which stages the activation rows for mmt (mt_stage): it and
// the three mmt entries take the staging buffer as one more parameter
// (STAGE_PARAM), which the tier appends; and NAME_dp4a, mmq for MMT_TYPE
// types: lm_head's in prefill, and every family's for Q8_0 rows whose k
// is not a multiple of 256 (mmt walks k by 256).
#define ENTRY_MAIN 0
#define ENTRY_TILE 1
#define ENTRY_DP4A 2
#define ENTRY_TILE16 4
#define ENTRY_TILE32 5
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#if MMT_TYPE(WT)
#define STAGE_PARAM , const u8* q8
#define STAGE_ARG q8
#else
#define STAGE_PARAM
#define STAGE_ARG nullptr
#endif

#if FAMILY == FAMILY_EMBED // embed: y[row] = table[token(row)]
extern "C" __global__ void __launch_bounds__(256) NAME(const u8* table, const u32* io, float* y, u32 cols) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    const u8* r = table + (size_t)io_row(io, row, ROW_TOKEN) * row_bytes<WT>(cols);
    for (int c = threadIdx.x; c < (int)cols; c += blockDim.x) y[(size_t)row * cols + c] = deq<WT>(r, c);
}
#endif

#if FAMILY == FAMILY_MATMUL || FAMILY == FAMILY_MATMUL_RESIDUAL
// matmul (2): y[row] = W·x[row] (+ bias). matmul_residual (9): y[row] +=
// W·x[row] (+ bias), the product rounded to float before the add, as the
// unfused matmul and add do; x must not alias y.
// The integer types (mmq.cuh) have two entries: NAME, the matrix-vector
// kernel for single-row variants, and NAME_tile for variants of more rows;
// launch.go shapes each. The other types run the float path below, grid
// (n/MM_WARPS, rows), from NAME.
#define MM_ACC (FAMILY == FAMILY_MATMUL_RESIDUAL)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    NAME(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n) {
    if constexpr (Fast<WT>::OK) {
        mmv<WT>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false);
        return;
    }
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS]) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)n) return;
    float v = dot_row<WT>(w + (size_t)j * row_bytes<WT>(k), xs, k);
    if ((threadIdx.x & 31) == 0) mm_out(y, n, bias, MM_ACC).store(row, j, v);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n STAGE_PARAM) {
    if constexpr (Tc<WT>::OK) // grid (rows/64, n/MT_N, splits)
        mmt<WT, 64>(w, io, k, n, mm_out(y, n, bias, MM_ACC), false, STAGE_ARG);
    else if constexpr (Fast<WT>::OK) mmq<WT>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false); // grid (mmqWidth, rows/MM_MR)
}
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3)
    CAT(NAME, _tile16)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, const u8* q8) {
    mmt<WT, 16>(w, io, k, n, mm_out(y, n, bias, MM_ACC), false, q8); // grid (rows/16, n/MT_N, splits)
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile32)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, const u8* q8) {
    mmt<WT, 32>(w, io, k, n, mm_out(y, n, bias, MM_ACC), false, q8); // grid (rows/32, n/MT_N, splits)
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _dp4a)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n) {
    mmq<WT>(x, w, io, k, n, mm_out(y, n, bias, MM_ACC), false);
}
extern "C" __global__ void __launch_bounds__(256)
    CAT(NAME, _stage)(const float* x, const u8* w, const float* bias, const u32* io, float* y, u32 k, u32 n, u8* q8) {
    mt_stage<VT>(x, io, k, q8, nullptr, 0.f); // grid (rows)
}
#endif
#endif

#if FAMILY == FAMILY_LM_HEAD // lm_head: logits[slot(row)] = W·x[row] for rows that want logits; entries as matmul's
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS)
    NAME(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv) {
    if constexpr (Fast<WT>::OK) {
        mmv<WT>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
        return;
    }
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)nv) return;
    float v = dot_row<WT>(w + (size_t)j * row_bytes<WT>(k), xs, k);
    if ((threadIdx.x & 31) == 0) logits[(size_t)io_row(io, row, ROW_SLOT) * nv + j] = v;
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv STAGE_PARAM) {
    if constexpr (Tc<WT>::OK) mmt<WT, 64>(w, io, k, nv, mm_out(logits, nv, nullptr), true, STAGE_ARG);
    else if constexpr (Fast<WT>::OK) mmq<WT>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
}
#if MMT_TYPE(WT) // NAME_dp4a: the dp4a tile kernel, for prefill variants (few of whose rows want logits)
extern "C" __global__ void __launch_bounds__(256, 3)
    CAT(NAME, _tile16)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv, const u8* q8) {
    mmt<WT, 16>(w, io, k, nv, mm_out(logits, nv, nullptr), true, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _tile32)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv, const u8* q8) {
    mmt<WT, 32>(w, io, k, nv, mm_out(logits, nv, nullptr), true, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2)
    CAT(NAME, _dp4a)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv) {
    mmq<WT>(x, w, io, k, nv, mm_out(logits, nv, nullptr), true);
}
extern "C" __global__ void __launch_bounds__(256)
    CAT(NAME, _stage)(const float* x, const u8* w, const u32* io, float* logits, u32 k, u32 nv, u8* q8) {
    mt_stage<VT>(x, io, k, q8, nullptr, 0.f);
}
#endif
#endif

#if FAMILY == FAMILY_MOE_GATE_TOPK // moe_gate_topk: route[row] = the row's n_used experts and weights; grid (rows)
// Logits W·x[row] (+ bias). gating 0: softmax over all experts, the
// n_used largest (ties to the lower id), renormalized when norm is set;
// gating 1: the n_used largest logits, weighted by their own softmax.
extern "C" __global__ void __launch_bounds__(256) NAME(const float* x, const u8* w, const float* bias, const u32* io,
    u32* route, u32 k, u32 n_expert, u32 n_used, u32 norm, u32 gating) {
    dep_sync();
    extern __shared__ float xs[];
    float* l = xs + k;
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS]) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    for (int j = threadIdx.x >> 5; j < (int)n_expert; j += blockDim.x >> 5) {
        float v = dot_row<WT>(w + (size_t)j * row_bytes<WT>(k), xs, k);
        if (bias) v += bias[j];
        if ((threadIdx.x & 31) == 0) l[j] = v;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    // Softmax and selection are serial, in the oracle's order: a handful
    // of experts, and it keeps sums and tie-breaks identical.
    if (gating == 0) {
        float mx = l[0];
        for (int j = 0; j < (int)n_expert; j++) mx = fmaxf(mx, l[j]);
        double sum = 0;
        for (int j = 0; j < (int)n_expert; j++) {
            l[j] = (float)exp((double)(l[j] - mx));
            sum += (double)l[j];
        }
        float inv = (float)(1 / sum);
        for (int j = 0; j < (int)n_expert; j++) l[j] *= inv;
    }
    u32* out = route + (size_t)row * n_used * 2;
    float* ws = (float*)out;
    for (int u = 0; u < (int)n_used; u++) {
        int best = -1;
        for (int j = 0; j < (int)n_expert; j++) {
            bool taken = false;
            for (int p = 0; p < u; p++) taken |= out[2 * p] == (u32)j;
            if (!taken && (best < 0 || l[j] > l[best])) best = j;
        }
        out[2 * u] = best;
        ws[2 * u + 1] = l[best];
    }
    if (gating != 0) { // softmax of the selected logits
        float mx = ws[1];
        for (int u = 0; u < (int)n_used; u++) mx = fmaxf(mx, ws[2 * u + 1]);
        double sum = 0;
        for (int u = 0; u < (int)n_used; u++) {
            ws[2 * u + 1] = (float)exp((double)(ws[2 * u + 1] - mx));
            sum += (double)ws[2 * u + 1];
        }
        float inv = (float)(1 / sum);
        for (int u = 0; u < (int)n_used; u++) ws[2 * u + 1] *= inv;
    } else if (norm) {
        float total = 0.f;
        for (int u = 0; u < (int)n_used; u++) total += ws[2 * u + 1];
        for (int u = 0; u < (int)n_used; u++) ws[2 * u + 1] /= total;
    }
}
#endif

#if FAMILY == FAMILY_MOE_GATE_UP // moe_gate_up: gate/up of each row's experts; grid (f/MM_WARPS, rows·n_used)
extern "C" __global__ void __launch_bounds__(256) NAME(const float* x, const u8* w_gate, const u8* w_up,
    const u32* route, const u32* io, float* gate, float* up, u32 k, u32 f, u32 n_used) {
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y / n_used, u = blockIdx.y % n_used;
    if (row >= (int)io[IO_ROWS]) return;
    round_x<VT>(x + (size_t)row * k, xs, k);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)f) return;
    size_t e = route[2 * ((size_t)row * n_used + u)];
    size_t off = (e * f + j) * row_bytes<WT>(k);
    float g = dot_row<WT>(w_gate + off, xs, k);
    float p = dot_row<WT>(w_up + off, xs, k);
    if ((threadIdx.x & 31) == 0) {
        size_t item = ((size_t)row * n_used + u) * f + j;
        gate[item] = g;
        up[item] = p;
    }
}
#endif

#if FAMILY == FAMILY_MOE_DOWN_ACC // moe_down_acc: y[row] += sum_u weight_u · (W_e(u)·h[row,u] + bias_e(u)); grid (n/MM_WARPS, rows)
extern "C" __global__ void __launch_bounds__(256) NAME(const float* h, const u8* w, const float* bias, const u32* route,
    const u32* io, float* y, u32 f, u32 n, u32 n_used) {
    dep_sync();
    extern __shared__ float xs[];
    int row = blockIdx.y;
    if (row >= (int)io[IO_ROWS]) return;
    for (int u = 0; u < (int)n_used; u++)
        round_x<VT>(h + ((size_t)row * n_used + u) * f, xs + (size_t)u * f, f);
    int j = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (j >= (int)n) return;
    float sum = 0.f;
    for (int u = 0; u < (int)n_used; u++) {
        const u32* rr = route + 2 * ((size_t)row * n_used + u);
        float wt = __uint_as_float(rr[1]);
        float d = dot_row<WT>(w + ((size_t)rr[0] * n + j) * row_bytes<WT>(f), xs + (size_t)u * f, f);
        if (bias) d += bias[(size_t)rr[0] * n + j]; // before the weight, as ggml_add_id
        sum += wt * d;
    }
    if ((threadIdx.x & 31) == 0) y[(size_t)row * n + j] += sum;
}
#endif

#if FAMILY == FAMILY_RMS_NORM_QKV || FAMILY == FAMILY_RMS_NORM_GATE_UP // the fused RMS norm + projections
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
#endif

#if FAMILY == FAMILY_RMS_NORM_QKV
#define QKV_ARGS(stage)                                                                                                \
    (const float* x, const float* w_norm, const u8* w_qkv, const float* b_qkv, const u32* io, float* q, float* kk,     \
        float* v, u32 k, u32 n_q, u32 n_kv, u32 eps_bits stage)
#define QKV_PARAMS QKV_ARGS()
#define QKV_BODY(tile, q8)                                                                                             \
    fused_norm_mm<WT>(x, w_norm, w_qkv, io, k, n_q + 2 * n_kv, MmOut{q, kk, v, (int)n_q, (int)n_kv, b_qkv},             \
        __uint_as_float(eps_bits), tile, q8)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) NAME QKV_PARAMS { QKV_BODY(ENTRY_MAIN, nullptr); }
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile) QKV_ARGS(STAGE_PARAM) {
    QKV_BODY(ENTRY_TILE, STAGE_ARG);
}
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3) CAT(NAME, _tile16) QKV_ARGS(STAGE_PARAM) {
    QKV_BODY(ENTRY_TILE16, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile32) QKV_ARGS(STAGE_PARAM) {
    QKV_BODY(ENTRY_TILE32, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _dp4a) QKV_PARAMS { QKV_BODY(ENTRY_DP4A, nullptr); }
extern "C" __global__ void __launch_bounds__(256) CAT(NAME, _stage) QKV_ARGS(STAGE_PARAM) {
    mt_stage<VT>(x, io, k, (u8*)q8, w_norm, __uint_as_float(eps_bits));
}
#endif
#endif

#if FAMILY == FAMILY_RMS_NORM_GATE_UP
#define GU_ARGS(stage)                                                                                                 \
    (const float* x, const float* w_norm, const u8* w_gate_up, const u32* io, float* gate, float* up, u32 k, u32 f,     \
        u32 eps_bits stage)
#define GU_PARAMS GU_ARGS()
#define GU_BODY(tile, q8)                                                                                              \
    fused_norm_mm<WT>(x, w_norm, w_gate_up, io, k, 2 * f, MmOut{gate, up, up, (int)f, (int)f, nullptr},                \
        __uint_as_float(eps_bits), tile, q8)
extern "C" __global__ void __launch_bounds__(MMV_THREADS, MMV_BLOCKS) NAME GU_PARAMS { GU_BODY(ENTRY_MAIN, nullptr); }
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile) GU_ARGS(STAGE_PARAM) {
    GU_BODY(ENTRY_TILE, STAGE_ARG);
}
#if MMT_TYPE(WT)
extern "C" __global__ void __launch_bounds__(256, 3) CAT(NAME, _tile16) GU_ARGS(STAGE_PARAM) {
    GU_BODY(ENTRY_TILE16, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _tile32) GU_ARGS(STAGE_PARAM) {
    GU_BODY(ENTRY_TILE32, q8);
}
extern "C" __global__ void __launch_bounds__(256, 2) CAT(NAME, _dp4a) GU_PARAMS { GU_BODY(ENTRY_DP4A, nullptr); }
extern "C" __global__ void __launch_bounds__(256) CAT(NAME, _stage) GU_ARGS(STAGE_PARAM) {
    mt_stage<VT>(x, io, k, (u8*)q8, w_norm, __uint_as_float(eps_bits));
}
#endif
#endif
