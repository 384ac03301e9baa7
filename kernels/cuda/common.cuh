// common.cuh: what every T-CUDA kernel shares — the request table layout
// (kernels/io.go), ggml weight decoding (kernels/quant), and the activation
// rounding that keeps matrix products within reach of the CPU oracle.
//
// Arithmetic contract with T-CPU. Weights are decoded element by element
// with exactly ggml's float expressions (the PTX is built with
// --fmad=false so a*b+c is not fused where the oracle rounds twice).
// Activations entering a dot product are rounded the way the oracle
// quantizes them (Q8_0 / Q8_1 / Q8_K blocks, or F16), then held as floats:
// the products are the oracle's integer products up to float rounding,
// summed in a different order. Element-wise transcendental functions
// (exp, sin, cos) are computed in double and rounded, like the oracle.
#pragma once
#include <stdint.h>
#include <cuda_fp16.h>

typedef unsigned int u32;
typedef unsigned char u8;

// CAT pastes two tokens after expanding them: an instance's entries are
// CAT(NAME, _suffix).
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

// Request table words (kernels/io.go).
#define IO_ROWS 0
#define IO_MAX_PAGES 1
#define IO_PAGE_TABLE 2
#define IO_ROW_BASE 8
#define IO_ROW_WORDS 4
#define ROW_TOKEN 0
#define ROW_POS 1
#define ROW_SLOT 2
#define ROW_FLAGS 3
#define ROW_WANTS_LOGITS 1
#define ROW_PROMPT 2 // the row evaluates a prompt token (kernels.RowPrompt)
#define ROW_LONG_PROMPT 4 // the row's request has a long prompt (kernels.RowLongPrompt)
#define KV_PAGE_TOKENS 16

// Warps per block of the matrix kernels: one output feature per warp.
#define MM_WARPS 8

// Programmatic dependent launch: the tier lets each kernel start while the
// previous one is still running (runtime/cuda, when the PTX holds
// griddepcontrol.wait). A kernel may read weights and the request table
// before dep_sync — neither is written during a replay — but it must call
// dep_sync before it reads any activation or writes anything. dep_sync
// waits until the previous kernel has finished and its writes are
// visible, then allows the next kernel to launch (so at most two overlap).
// Before sm_90 (the cuda:sm_80 target's compute_80 PTX) there is no
// griddepcontrol: dep_sync is empty, and the tier, finding no
// griddepcontrol.wait in the PTX, launches such kernels one after another
// (also on a Hopper GPU, which JIT-compiles that PTX).
__device__ __forceinline__ void dep_sync() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ u32 io_row(const u32* io, int i, int f) {
    return io[IO_ROW_BASE + i * IO_ROW_WORDS + f];
}

__device__ __forceinline__ u32 io_page(const u32* io, int slot, int pos) {
    u32 mp = io[IO_MAX_PAGES];
    return io[io[IO_PAGE_TABLE] + slot * mp + pos / KV_PAGE_TOKENS];
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float ld_f16(const u8* p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

__device__ __forceinline__ float round_f16(float x) { return __half2float(__float2half_rn(x)); }

// rms_scale is the RMS norm's 1.0f/sqrtf(mean(x²)+eps) of one group of k
// floats, the squares summed in double as the oracle does (in another
// order); the whole block calls it (it synchronizes).
__device__ float rms_scale(const float* x, int k, float eps) {
    __shared__ double part[32];
    int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    double s = 0;
    for (int i0 = tid; i0 < k; i0 += 8 * nt) { // 8 loads in flight
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = i0 + u * nt < k ? x[i0 + u * nt] : 0.f;
#pragma unroll
        for (int u = 0; u < 8; u++) s += (double)(v[u] * v[u]);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((tid & 31) == 0) part[tid >> 5] = s;
    __syncthreads();
    double t = 0;
    for (int w = 0; w < nt >> 5; w++) t += part[w];
    __syncthreads(); // part is reused
    return 1.f / sqrtf((float)(t / (double)k) + eps);
}

// ggml type ids.
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q8_1 9
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_Q8_K 15
#define T_IQ4_NL 20
#define T_IQ3_S 21
#define T_IQ4_XS 23
#define T_MXFP4 39

template <int T> struct Geom;
template <> struct Geom<T_F32> { enum { BS = 1, BB = 4, VT = T_F32 }; };
template <> struct Geom<T_F16> { enum { BS = 1, BB = 2, VT = T_F16 }; };
template <> struct Geom<T_Q4_0> { enum { BS = 32, BB = 18, VT = T_Q8_0 }; };
template <> struct Geom<T_Q4_1> { enum { BS = 32, BB = 20, VT = T_Q8_1 }; };
template <> struct Geom<T_Q5_0> { enum { BS = 32, BB = 22, VT = T_Q8_0 }; };
template <> struct Geom<T_Q5_1> { enum { BS = 32, BB = 24, VT = T_Q8_1 }; };
template <> struct Geom<T_Q8_0> { enum { BS = 32, BB = 34, VT = T_Q8_0 }; };
template <> struct Geom<T_Q2_K> { enum { BS = 256, BB = 84, VT = T_Q8_K }; };
template <> struct Geom<T_Q3_K> { enum { BS = 256, BB = 110, VT = T_Q8_K }; };
template <> struct Geom<T_Q4_K> { enum { BS = 256, BB = 144, VT = T_Q8_K }; };
template <> struct Geom<T_Q5_K> { enum { BS = 256, BB = 176, VT = T_Q8_K }; };
template <> struct Geom<T_Q6_K> { enum { BS = 256, BB = 210, VT = T_Q8_K }; };
template <> struct Geom<T_IQ4_NL> { enum { BS = 32, BB = 18, VT = T_Q8_0 }; };
template <> struct Geom<T_IQ3_S> { enum { BS = 256, BB = 110, VT = T_Q8_K }; };
template <> struct Geom<T_IQ4_XS> { enum { BS = 256, BB = 136, VT = T_Q8_K }; };
template <> struct Geom<T_MXFP4> { enum { BS = 32, BB = 17, VT = T_Q8_0 }; };

template <int T> __device__ __forceinline__ size_t row_bytes(u32 n) {
    return (size_t)(n / Geom<T>::BS) * Geom<T>::BB;
}

// deq returns element i of a row of type T, bit-identical to ggml's
// dequantize_row_* (kernels/quant).
template <int T> __device__ __forceinline__ float deq(const u8* r, int i);

template <> __device__ __forceinline__ float deq<T_F32>(const u8* r, int i) { return ((const float*)r)[i]; }
template <> __device__ __forceinline__ float deq<T_F16>(const u8* r, int i) {
    return __half2float(((const __half*)r)[i]);
}

__device__ __forceinline__ int nib32(const u8* qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

template <> __device__ __forceinline__ float deq<T_Q4_0>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 18;
    return (float)(nib32(b + 2, i % 32) - 8) * ld_f16(b);
}
template <> __device__ __forceinline__ float deq<T_Q4_1>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 20;
    return (float)nib32(b + 4, i % 32) * ld_f16(b) + ld_f16(b + 2);
}
__device__ __forceinline__ int q5(const u8* b, int qhAt, int j) {
    u32 qh = b[qhAt] | (b[qhAt + 1] << 8) | (b[qhAt + 2] << 16) | ((u32)b[qhAt + 3] << 24);
    return nib32(b + qhAt + 4, j) | (((qh >> j) & 1) << 4);
}
template <> __device__ __forceinline__ float deq<T_Q5_0>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 22;
    return (float)(q5(b, 2, i % 32) - 16) * ld_f16(b);
}
template <> __device__ __forceinline__ float deq<T_Q5_1>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 24;
    return (float)q5(b, 4, i % 32) * ld_f16(b) + ld_f16(b + 2);
}
template <> __device__ __forceinline__ float deq<T_Q8_0>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 34;
    return (float)(signed char)b[2 + i % 32] * ld_f16(b);
}
// q2 is the 2-bit quant of element e of a Q2_K/Q3_K super-block.
__device__ __forceinline__ int q2(const u8* qs, int e) {
    int c = e / 128, w = e % 128;
    return (qs[32 * c + w % 32] >> (2 * (w / 32))) & 3;
}
template <> __device__ __forceinline__ float deq<T_Q2_K>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 84;
    int e = i % 256;
    int sc = b[e / 16];
    float dl = ld_f16(b + 80) * (float)(sc & 15), ml = ld_f16(b + 82) * (float)(sc >> 4);
    return dl * (float)q2(b + 16, e) - ml;
}
template <> __device__ __forceinline__ float deq<T_Q3_K>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 110;
    int e = i % 256;
    int q = q2(b + 32, e);
    if (!((b[e % 32] >> (e / 32)) & 1)) q -= 4;
    const u8* s = b + 96;
    int sb = e / 16, j = sb % 4, h = s[8 + j], sc;
    switch (sb / 4) {
    case 0: sc = (s[j] & 15) | ((h & 3) << 4); break;
    case 1: sc = (s[j + 4] & 15) | (((h >> 2) & 3) << 4); break;
    case 2: sc = (s[j] >> 4) | (((h >> 4) & 3) << 4); break;
    default: sc = (s[j + 4] >> 4) | ((h >> 6) << 4); break;
    }
    float dl = ld_f16(b + 108) * (float)(sc - 32);
    return dl * (float)q;
}
// scale_min_k4 is ggml's get_scale_min_k4 for sub-block s of Q4_K/Q5_K.
__device__ __forceinline__ void scale_min_k4(const u8* s, int sb, int* sc, int* mn) {
    if (sb < 4) {
        *sc = s[sb] & 63;
        *mn = s[sb + 4] & 63;
    } else {
        *sc = (s[sb + 4] & 15) | ((s[sb - 4] >> 6) << 4);
        *mn = (s[sb + 4] >> 4) | ((s[sb] >> 6) << 4);
    }
}
template <> __device__ __forceinline__ float deq<T_Q4_K>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 144;
    int e = i % 256, c = e / 64, w = e % 64;
    int q = w < 32 ? (b[16 + 32 * c + w] & 15) : (b[16 + 32 * c + w - 32] >> 4);
    int sc, mn;
    scale_min_k4(b + 4, e / 32, &sc, &mn);
    return ld_f16(b) * (float)sc * (float)q - ld_f16(b + 2) * (float)mn;
}
template <> __device__ __forceinline__ float deq<T_Q5_K>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 176;
    int e = i % 256, c = e / 64, w = e % 64;
    int q = w < 32 ? (b[48 + 32 * c + w] & 15) : (b[48 + 32 * c + w - 32] >> 4);
    q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
    int sc, mn;
    scale_min_k4(b + 4, e / 32, &sc, &mn);
    return ld_f16(b) * (float)sc * (float)q - ld_f16(b + 2) * (float)mn;
}
template <> __device__ __forceinline__ float deq<T_Q6_K>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 210;
    int e = i % 256, h = e / 128, w = e % 128;
    int v = b[64 * h + w % 64];
    if (w >= 64) v >>= 4;
    int hb = (b[128 + 32 * h + w % 32] >> (2 * (w / 32))) & 3;
    int q = ((v & 15) | (hb << 4)) - 32;
    float s = (float)(signed char)b[192 + e / 16];
    return ld_f16(b + 208) * s * (float)q;
}
// MXFP4 (kernels/quant/mxfp4.go): blocks of 32, {u8 e; u8 qs[16]}, Q4_0's
// nibble layout. A nibble's level is ggml's kvalues_mxfp4 (twice its E2M1
// value: magnitudes 0 1 2 3 4 6 8 12, bit 3 the sign), computed here rather
// than read from a table; e8m0_half is ggml_e8m0_to_fp32_half, 2^(e-128)
// (e = 0 and 1 the subnormals 2^-128 and 2^-127). The product is exact.
__device__ __forceinline__ float e8m0_half(u32 e) { return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23); }
__device__ __forceinline__ int kvalue_mxfp4(int q) {
    int m = q & 7;
    int v = m < 4 ? m : (2 | (m & 1)) << ((m >> 1) - 1);
    return q & 8 ? -v : v;
}
template <> __device__ __forceinline__ float deq<T_MXFP4>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 17;
    return (float)kvalue_mxfp4(nib32(b + 1, i % 32)) * e8m0_half(b[0]);
}
// The i-quants (kernels/quant/iq4.go, iq3.go) take the plain warp-dot path
// (no dp4a or tensor-core variant), like MXFP4: deq decodes one element
// with ggml's float expressions and dot_row pairs it with the activations
// rounded as the oracle's Q8_0 (IQ4_NL) or Q8_K (IQ4_XS, IQ3_S) blocks.
//
// kvalue_iq4nl is ggml's kvalues_iq4nl[q], the 16 int8 levels packed into
// two 64-bit immediates (levels 0-7, 8-15) rather than read from memory.
__device__ __forceinline__ int kvalue_iq4nl(int q) {
    unsigned long long t = q & 8 ? 0x7159453526190d01ull : 0xf6eaddcfbfad9881ull;
    return (int)(signed char)(t >> (8 * (q & 7)));
}
// IQ4_NL {f16 d; qs[16]}, blocks of 32 in Q4_0's nibble layout:
// d*kvalues[q].
template <> __device__ __forceinline__ float deq<T_IQ4_NL>(const u8* r, int i) {
    const u8* b = r + (i / 32) * 18;
    return ld_f16(b) * (float)kvalue_iq4nl(nib32(b + 2, i % 32));
}
// IQ4_XS {f16 d; u16 scales_h; scales_l[4]; qs[128]}, super-blocks of 256:
// sub-block s (32 elements, an IQ4_NL block's nibbles at qs[16s:]) has the
// 6-bit scale ls = nibble s%2 of scales_l[s/2] | bits 2s..2s+1 of scales_h
// << 4; ggml rounds dl = d*(ls-32) once, then dl*kvalues[q].
template <> __device__ __forceinline__ float deq<T_IQ4_XS>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 136;
    int e = i % 256, s = e / 32;
    u32 sh = b[2] | (b[3] << 8);
    int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4);
    float dl = ld_f16(b) * (float)(ls - 32);
    return dl * (float)kvalue_iq4nl(nib32(b + 8 + 16 * s, e % 32));
}
#if defined(WT) && WT == T_IQ3_S
#include "iq3s_grid.cuh"
// IQ3_S {f16 d; qs[64]; qh[8]; signs[32]; scales[4]}, super-blocks of 256
// in sub-blocks of 32, each eight groups of four: group g of sub-block s is
// the grid point iq3s_grid[qs[8s+g] | (bit g of qh[s]) << 8], element j of
// the group its byte j; the element is negative when bit e%8 of
// signs[4s+e/8] is set (e within the sub-block). ggml rounds db =
// d*(1+2*sc) once (sc nibble s%2 of scales[s/2]), then db*magnitude, and
// negates.
template <> __device__ __forceinline__ float deq<T_IQ3_S>(const u8* r, int i) {
    const u8* b = r + (i / 256) * 110;
    int e = i % 256, s = e / 32, w = e % 32, g = w / 4;
    float db = ld_f16(b) * (float)(1 + 2 * ((b[106 + s / 2] >> (4 * (s % 2))) & 15));
    u32 idx = b[2 + 8 * s + g] | (((b[66 + s] >> g) & 1) << 8);
    float v = db * (float)((iq3s_grid[idx] >> (8 * (w % 4))) & 255);
    return (b[74 + 4 * s + w / 8] >> (w % 8)) & 1 ? -v : v;
}
#endif

// round_x writes the k activations x into xs as the oracle sees them after
// quantizing to type VT and decoding: Q8_0/Q8_1 blocks of 32 with an F16
// scale 127/amax and half-to-even rounding (ggml's AVX2 path), Q8_K blocks
// of 256 scaled by -127/max of the first largest-magnitude element, F16 by
// rounding. The whole block cooperates; it ends with a barrier.
template <int VT> __device__ void round_x(const float* x, float* xs, int k) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (VT == T_F32 || VT == T_F16) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) xs[i] = VT == T_F16 ? round_f16(x[i]) : x[i];
    } else if (VT == T_Q8_0 || VT == T_Q8_1) {
        for (int b = warp; b < k / 32; b += nw) {
            float v = x[32 * b + lane];
            float amax = warp_max(fabsf(v));
            float id = amax != 0.f ? 127.f / amax : 0.f;
            xs[32 * b + lane] = rintf(v * id) * round_f16(amax / 127.f);
        }
    } else { // Q8_K
        for (int b = warp; b < k / 256; b += nw) {
            float v[8], amax = 0.f;
            int at = 1 << 30;
            for (int t = 0; t < 8; t++) {
                v[t] = x[256 * b + lane + 32 * t];
                float a = fabsf(v[t]);
                int idx = lane + 32 * t;
                if (a > amax) amax = a, at = idx;
            }
            // The first element (lowest index) of largest magnitude wins.
            for (int o = 16; o > 0; o >>= 1) {
                float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
                int at2 = __shfl_xor_sync(0xffffffffu, at, o);
                if (a2 > amax || (a2 == amax && at2 < at)) amax = a2, at = at2;
            }
            if (amax == 0.f) {
                for (int t = 0; t < 8; t++) xs[256 * b + lane + 32 * t] = 0.f;
                continue;
            }
            float mx = x[256 * b + at];
            float iscale = -127.f / mx, d = 1.f / iscale;
            for (int t = 0; t < 8; t++) xs[256 * b + lane + 32 * t] = d * fminf(127.f, rintf(iscale * v[t]));
        }
    }
    __syncthreads();
}

// dot_row is one warp's dot product of a weight row with rounded
// activations; every lane returns the sum.
template <int T> __device__ __forceinline__ float dot_row(const u8* w, const float* xs, int k) {
    int lane = threadIdx.x & 31;
    float acc = 0.f;
#pragma unroll 8
    for (int i = lane; i < k; i += 32) acc += deq<T>(w, i) * xs[i];
    return warp_sum(acc);
}
