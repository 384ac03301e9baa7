// kv.cuh: the KV cache's addressing, for the families that write it.
#pragma once
#include "common.cuh"

// kv_at is the address of (page, layer, k|v, token) in the KV cache:
// pages of [layer][k|v][token][kv_dim] F16 (kernels/io.go).
__device__ __forceinline__ __half* kv_at(u8* kv, u32 page, u32 layer, u32 n_layer, u32 kv_dim, int which, int tok) {
    size_t page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    return (__half*)(kv + page * page_bytes + ((size_t)(layer * 2 + which) * KV_PAGE_TOKENS + tok) * kv_dim * 2);
}

// A quantized cache's instances (kernels/cuda/gen, from families.go's
// kvLayouts) define KV_K and KV_V, the K and V rows' element types by
// ggml id (T_Q8_0, or zrt's T_FP8_E4M3), and KV_RK and KV_RV, the runs
// of llama.cpp's Walsh-Hadamard rotation of K and of V (0: not rotated;
// see kernels.KVTypes). An F16 cache's instances define none of them and
// compile only the code above.
#if defined(KV_K)
#define KV_QUANT 1
#define T_FP8_E4M3 65764 // kernels.FP8E4M3: 1<<16 | 0xE4, outside ggml's ids
#if KV_K == T_FP8_E4M3 && KV_V == T_FP8_E4M3 && KV_RK == 0 && KV_RV == 0
// An FP8 cache (kernels/quant/fp8.go): blocks of 64 values, a float32
// scale then 64 E4M3 codes; never rotated.
#define KV_FP8 1
#define KVQ_BS 64 // values a block
#define KVQ_BB 68 // bytes a block
#elif KV_K == T_Q8_0 && KV_V == T_Q8_0
#define Q8_BYTES 34 // a Q8_0 block: an F16 scale, 32 int8 quants
#define KVQ_BS 32
#define KVQ_BB Q8_BYTES
#else
#error "T-CUDA's quantized caches hold Q8_0 K and V rows, or unrotated FP8 E4M3 K and V rows"
#endif

// kvq_row_bytes is the bytes of a quantized row of n values (kernels.KVRowBytes).
__device__ __forceinline__ size_t kvq_row_bytes(u32 n) { return (size_t)(n / KVQ_BS) * KVQ_BB; }

// kvq_page_bytes is a page's bytes (kernels.KVLayout.PageBytes): n_layer
// regions of KV_PAGE_TOKENS K rows then as many V rows, padded to 64.
__device__ __forceinline__ size_t kvq_page_bytes(u32 n_layer, u32 kv_dim) {
    return ((size_t)n_layer * 2 * KV_PAGE_TOKENS * kvq_row_bytes(kv_dim) + 63) & ~(size_t)63;
}

// kvq_at is the address of the row of (page, layer, k|v, token)
// (kernels.KVLayout.Offset).
__device__ __forceinline__ u8* kvq_at(u8* kv, u32 page, u32 layer, u32 n_layer, u32 kv_dim, int which, int tok) {
    return kv + (size_t)page * kvq_page_bytes(n_layer, kv_dim) +
        ((size_t)(layer * 2 + which) * KV_PAGE_TOKENS + tok) * kvq_row_bytes(kv_dim);
}

// hadamard_scale is the magnitude of every entry of ggml_gen_hadamard's
// orthonormal matrix of order n, 1/sqrtf(n) divided in double and
// rounded, as T-CPU's hadamard makes it.
__device__ __forceinline__ float hadamard_scale(int n) { return (float)(1.0 / (double)sqrtf((float)n)); }

// hadamard_out is output i of that matrix (entry (i, j) is ±h by the
// parity of i&j: Sylvester's construction) times the run x of n values,
// summed as T-CPU's rotate sums it (llamafile's tinyBLAS on AVX-512): 16
// lanes of FMAs over the run in order, then _mm512_reduce_add_ps's tree.
// The same bits as T-CPU. x may be shared or global memory; every lane of
// a warp reads the same x[k] at once.
__device__ __forceinline__ float hadamard_out(const float* x, int i, int n, float h) {
    float acc[16];
#pragma unroll
    for (int l = 0; l < 16; l++) acc[l] = 0.f;
    for (int k = 0; k < n; k += 16) {
#pragma unroll
        for (int l = 0; l < 16; l++) {
            float s = (__popc(i & (k + l)) & 1) ? -h : h;
            acc[l] = fmaf(s, x[k + l], acc[l]);
        }
    }
    float t3[8], t6[4];
#pragma unroll
    for (int l = 0; l < 8; l++) t3[l] = acc[l + 8] + acc[l];
#pragma unroll
    for (int l = 0; l < 4; l++) t6[l] = t3[l + 4] + t3[l];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

#ifdef KV_FP8
// e4m3_f32 decodes the E4M3 code in the low byte of b exactly as
// quant.E4M3ToF32 (the same bits; S.1111.111 is NaN), without the
// conversion instructions compute_80's PTX lacks: the code's exponent and
// mantissa set into a float's low exponent bits and top mantissa bits,
// then scaled by 2^(127-7), which is exact for the normal codes and the
// subnormal ones alike (the PTX keeps denormals: no -ftz).
__device__ __forceinline__ float e4m3_f32(u32 b) {
    const float v = __int_as_float((int)(((b & 0x80u) << 24) | ((b & 0x7fu) << 20))) * 0x1p120f;
    return (b & 0x7fu) == 0x7fu ? __int_as_float(0x7fc00000) : v;
}

// e4m3x2 decodes the two E4M3 codes of w that the __byte_perm selector
// sel puts in bytes 0 and 2 (0x4140: w's bytes 0 and 1; 0x4342: 2 and 3)
// as their values over 256, exactly: each code's sign, exponent and
// mantissa set into an F16 (bias 15 against E4M3's 7, which the 256
// makes up; the subnormal codes are F16 subnormals), then widened. The
// decode attention's walk multiplies by 256·scale, which gives
// quant.DequantizeFP8Row's values to the bit (the exact product rounded
// once); a NaN code (0x7F, which the encoder writes only for a NaN) reads
// as 480.
__device__ __forceinline__ float2 e4m3x2(u32 w, u32 sel) {
    const u32 t = __byte_perm(w, 0u, sel);
    const u32 h = ((t & 0x00800080u) << 8) | ((t & 0x007f007fu) << 7);
    return make_float2(__half2float(__ushort_as_half((unsigned short)(h & 0xffffu))), __half2float(__ushort_as_half((unsigned short)(h >> 16))));
}

// f32_e4m3 encodes x as quant.E4M3FromF32 does (the same bits): rounded
// to the nearest code, ties to an even mantissa; beyond ±448 (infinity
// too) saturated to ±448; NaN as 0x7F. Integer operations only.
__device__ __forceinline__ u32 f32_e4m3(float x) {
    if (x != x) return 0x7fu;
    const u32 bits = __float_as_uint(x), sign = (bits >> 24) & 0x80u, ab = bits & 0x7fffffffu;
    const float a = __uint_as_float(ab);
    if (a >= 448.f) return sign | 0x7eu;
    // Subnormal codes are multiples of 2^-9 (a·512 is exact); a tie
    // rounding up to 8 is the smallest normal code, 8.
    if (a < 0.015625f) return sign | (u32)__float2int_rn(__fmul_rn(a, 512.f));
    const u32 m = ab & 0x7fffffu, keep = m >> 20, rem = m & 0xfffffu;
    u32 code = (((ab >> 23) - 120u) << 3) + keep; // exponent rebiased from 127 to 7
    if (rem > 0x80000u || (rem == 0x80000u && (keep & 1u))) code++; // a carry moves into the exponent
    return sign | code;
}

// kvq_store over an FP8 cache: the warp stores the n values x (a
// multiple of 64) as FP8 blocks from dst on, as quant.QuantizeFP8Row
// (the same bits): per block, scale = amax/448 and each code
// f32_e4m3(v·(448/amax)), the quotients and products rounded in float32;
// an all-zero block has scale 0 and zero codes. Lane j takes values 2j
// and 2j+1 of a block. rot is 0 (FP8 rows are never rotated). Unlike
// Go's max, fmaxf drops a NaN: a block with a NaN gets the other values'
// scale, where T-CPU's scale is NaN (a NaN in K or V has already broken
// the model).
__device__ __forceinline__ void kvq_store(u8* dst, const float* x, int n, int rot) {
    const int lane = threadIdx.x & 31;
    for (int b = 0; b < n; b += 64) {
        const float v0 = x[b + 2 * lane], v1 = x[b + 2 * lane + 1];
        const float amax = warp_max(fmaxf(fabsf(v0), fabsf(v1)));
        const float scale = __fdiv_rn(amax, 448.f), inv = amax != 0.f ? __fdiv_rn(448.f, amax) : 0.f;
        u8* blk = dst + (size_t)(b / 64) * KVQ_BB; // 4-byte aligned: rows are whole blocks from a 64-byte boundary
        *(unsigned short*)(blk + 4 + 2 * lane) = (unsigned short)(f32_e4m3(__fmul_rn(v0, inv)) | f32_e4m3(__fmul_rn(v1, inv)) << 8);
        if (lane == 0) *(float*)blk = scale;
    }
}

// kvq_run is the run of K (which 0) or V (1) rows a quantized cache
// quantizes at once: a block (FP8 rows are not rotated).
__host__ __device__ constexpr int kvq_run(int) { return 64; }
#else
// kvq_block: the warp quantizes one block of 32 values (lane j's v is
// value j) into the Q8_0 block at dst, as T-CPU's quantQ8_0 (ggml's AVX2
// quantize_row_q8_0): the scale amax/127 stored as F16, each quant
// v·(127/amax) rounded half to even. The same bits as T-CPU.
__device__ __forceinline__ void kvq_block(u8* dst, float v) {
    int lane = threadIdx.x & 31;
    float amax = warp_max(fabsf(v));
    float id = amax != 0.f ? 127.f / amax : 0.f;
    dst[2 + lane] = (u8)(signed char)__float2int_rn(v * id);
    // One 16-bit store of the scale (a block starts on an even byte: rows
    // and pages are whole blocks of 34 bytes from a 64-byte boundary). Two
    // byte stores of the F16's halves went wrong: ptxas (CUDA 13.0, seen
    // for sm_90) compiled the low byte's st.global.u8 of the F16's register
    // as F2I.U8.F16.TRUNC, the half's value converted to an integer (0 for
    // a scale below 1), so the cache's scales lost their low byte.
    if (lane == 0) *(unsigned short*)dst = __half_as_ushort(__float2half_rn(amax / 127.f));
}

// kvq_store: the warp stores the n values x (a multiple of 32 and of rot)
// as Q8_0 blocks from dst on, each run of rot values rotated first (rot
// 0: none), as T-CPU's storeKV. x is read by every lane (the caller has
// made it visible to the warp: __syncwarp).
__device__ __forceinline__ void kvq_store(u8* dst, const float* x, int n, int rot) {
    int lane = threadIdx.x & 31, run = rot > 0 ? rot : 32;
    float h = rot > 0 ? hadamard_scale(rot) : 0.f;
    for (int r0 = 0; r0 < n; r0 += run)
        for (int c = 0; c < run; c += 32) {
            float v = rot > 0 ? hadamard_out(x + r0, c + lane, rot, h) : x[r0 + c + lane];
            kvq_block(dst + (size_t)(r0 + c) / 32 * Q8_BYTES, v);
        }
}

// kvq_run is the run of K (which 0) or V (1) rows a quantized cache
// rotates: its rotation, else a block.
__host__ __device__ constexpr int kvq_run(int which) { return which == 0 ? (KV_RK > 0 ? KV_RK : 32) : (KV_RV > 0 ? KV_RV : 32); }
#endif // KV_FP8
#endif
