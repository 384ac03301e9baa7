// mmq.cuh: the integer matrix-vector path of matmul and lm_head for the
// weight types decode spends its time on (Q8_0, Q4_0, Q4_K, Q6_K).
//
// Each block quantizes up to MM_MR activation rows into shared memory the
// way the oracle does (Q8_0 blocks of 32 with an F16 scale, or Q8_K blocks
// of 256 with an F32 scale; see round_x in common.cuh for the rules), as
// int8 plus per-block scales. Each warp then computes whole output
// features: its lanes split a weight row into pieces (TPB lanes per weight
// block), load them with the widest loads the block layout allows, several
// blocks in flight, take integer dot products with __dp4a against every
// activation row of the tile, and a warp tree sums the lanes. Warps stride
// over the output features, so a grid of any width covers n (launch.go
// sizes it to fill the GPU once).
//
// The integer block sums are the oracle's; only the float combination of
// partial sums differs (as in the float path).
#pragma once
#include "common.cuh"

#define MM_MR 8 // activation rows per block (prefill tiles)
#define MM_U 4  // weight blocks in flight per lane (single-row tiles of mm_rows)

// TPB: lanes per weight block; U: weight blocks per lane in one chunk of
// the matrix-vector kernel (mmv), which keeps two chunks in flight.
template <int T> struct Fast { enum { OK = 0, TPB = 1, U = 1 }; };
template <> struct Fast<T_Q8_0> { enum { OK = 1, TPB = 4, U = 4 }; };
template <> struct Fast<T_Q4_0> { enum { OK = 1, TPB = 4, U = 4 }; };
template <> struct Fast<T_Q4_K> { enum { OK = 1, TPB = 8, U = 2 }; };
template <> struct Fast<T_Q6_K> { enum { OK = 1, TPB = 8, U = 1 }; };
// MMQ_TYPE(t) is Fast<t>::OK for the preprocessor, which decides the
// entries an instance has (the _rows entry).
#define MMQ_TYPE(t) ((t) == T_Q8_0 || (t) == T_Q4_0 || (t) == T_Q4_K || (t) == T_Q6_K)

// mm_xstride is the shared-memory bytes of one quantized activation row:
// k int8 quants, then k/32 float scales (Q8_0; Q8_K uses k/256 of them),
// then (Q8_K) k/16 int16 sums of 16 quants, rounded up to 16 bytes.
// launch.go's mmqStride is the same.
__device__ __forceinline__ int mm_xstride(int k) { return (k + k / 4 + 15) & ~15; }
__device__ __forceinline__ float* mm_xd(u8* row, int k) { return (float*)(row + k); }
__device__ __forceinline__ short* mm_bs(u8* row, int k) { return (short*)(row + k + k / 8); }

// xq_swz is the byte of a Q8_K activation row in shared memory that holds
// its quant e: bits 5-6 of e (the 32-quant unit within a half block) are
// XORed with bits 7-8 (the half, and the block's parity). The eight lanes
// of a block in WBlk<Q4_K>::dot read 16 bytes each at units 0, 0, 2, 2, 4,
// 4, 6, 6 of its two halves, and the sixteen lanes of two blocks in
// WBlk<Q6_K>::dot 8 bytes each at the same offsets of four halves: in
// order, every such load met the same banks two or four times over, which
// bounds a product of several rows. Swizzled, each lands on distinct
// banks. Pieces of 8 or 16 bytes at their alignment stay whole; the sums
// (bs) and scales (xd) keep their places.
// Only the kernels of several rows a block swizzle (SW): a one-row
// product lost 1-3% to the address arithmetic, more than the conflicts
// cost it (kernels/cuda/bench/mmvbench.cu).
template <bool SW> __device__ __forceinline__ int xq_swz(int e) { return SW ? e ^ (((e >> 7) & 3) << 5) : e; }

// ld_a2 loads 4 bytes from a 2-byte aligned address.
__device__ __forceinline__ int ld_a2(const u8* p) {
    const unsigned short* h = (const unsigned short*)p;
    return (int)((u32)__ldg(h) | ((u32)__ldg(h + 1) << 16));
}
__device__ __forceinline__ float ldg_f16(const u8* p) {
    return __half2float(__ushort_as_half(__ldg((const unsigned short*)p)));
}
__device__ __forceinline__ int pack4(int a, int b, int c, int d) {
    return (a & 255) | ((b & 255) << 8) | ((c & 255) << 16) | ((u32)(d & 255) << 24);
}

// ld4 loads x[i..i+3], through a float4 where x is 16-byte aligned; with a
// norm weight wn, it returns them RMS-normalized, (x·scale)·wn as the
// oracle's normRow rounds.
__device__ __forceinline__ float4 ld4(const float* x, int i, bool vec, float scale, const float* wn) {
    float4 v = vec ? *(const float4*)(x + i) : make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
    if (wn) {
        float4 w = vec ? *(const float4*)(wn + i) : make_float4(wn[i], wn[i + 1], wn[i + 2], wn[i + 3]);
        v = make_float4((v.x * scale) * w.x, (v.y * scale) * w.y, (v.z * scale) * w.z, (v.w * scale) * w.w);
    }
    return v;
}

// rms_scales is rms_scale for the nr (≤ MM_MR) consecutive rows of a
// tile, in one pass and one barrier.
__device__ __forceinline__ void rms_scales(const float* x, int k, int nr, float eps, float* scale) {
    __shared__ double part[MM_MR][32];
    int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    double s[MM_MR];
#pragma unroll
    for (int r = 0; r < MM_MR; r++) s[r] = 0;
    for (int i = tid; i < k; i += nt) {
        float v[MM_MR];
#pragma unroll
        for (int r = 0; r < MM_MR; r++) v[r] = r < nr ? x[(size_t)r * k + i] : 0.f;
#pragma unroll
        for (int r = 0; r < MM_MR; r++) s[r] += (double)(v[r] * v[r]);
    }
#pragma unroll
    for (int r = 0; r < MM_MR; r++) {
        for (int o = 16; o > 0; o >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
        if ((tid & 31) == 0) part[r][tid >> 5] = s[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < MM_MR; r++) {
        double t = 0;
        for (int w = 0; w < nt >> 5; w++) t += part[r][w];
        scale[r] = 1.f / sqrtf((float)(t / (double)k) + eps);
    }
}

// q8k_warp quantizes one Q8_K block of 256 activations held by a warp,
// lane l holding elements 8l…8l+7 in v, as the oracle does: scale
// -127/max of the first largest-magnitude element. It writes the quants
// to xq and, where bs is given, the 16 sums of 16 quants (ggml's bsums)
// to bs; it returns the block's scale, and the sum of the lane's 8 quants
// in s8. With b ≥ 0, xq is block b of an activation row and the quants
// go where xq_swz<true> puts them; with b < 0 in order.
__device__ __forceinline__ float q8k_warp(const float v[8], signed char* xq, short* bs, int* s8 = nullptr, int b = -1) {
    int lane = threadIdx.x & 31, e0 = 8 * lane;
    float amax = 0.f, mine = 0.f; // the lane's largest magnitude, and its first element of it
#pragma unroll
    for (int t = 0; t < 8; t++) {
        float a = fabsf(v[t]);
        if (a > amax) amax = a, mine = v[t];
    }
    // The first element (lowest index) of largest magnitude wins: the
    // largest magnitude (non-negative floats order as their bits), then
    // the lowest lane that holds it, then that lane's first.
    float gmax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(amax)));
    int q[8];
    float d = 0.f;
    if (gmax == 0.f) {
#pragma unroll
        for (int t = 0; t < 8; t++) q[t] = 0;
    } else {
        float mx = __shfl_sync(0xffffffffu, mine, __ffs(__ballot_sync(0xffffffffu, amax == gmax)) - 1);
        float iscale = -127.f / mx;
        d = 1.f / iscale;
#pragma unroll
        for (int t = 0; t < 8; t++) q[t] = (int)fminf(127.f, rintf(iscale * v[t]));
    }
    const int at = b < 0 ? e0 : xq_swz<true>(256 * (b & 1) + e0) - 256 * (b & 1);
    *(int2*)(xq + at) = make_int2(pack4(q[0], q[1], q[2], q[3]), pack4(q[4], q[5], q[6], q[7]));
    int s = q[0] + q[1] + q[2] + q[3] + q[4] + q[5] + q[6] + q[7];
    if (s8) *s8 = s;
    if (bs) {
        int s16 = s + __shfl_xor_sync(0xffffffffu, s, 1);
        if (!(lane & 1)) bs[lane / 2] = (short)s16;
    }
    return d;
}

// quant_x quantizes one activation row of k floats (RMS-normalized first
// when wn is given) into xq (int8) and xd (scales) with the whole block;
// the caller synchronizes.
template <int XT, bool SW = false>
__device__ void quant_x(const float* x, signed char* xq, float* xd, short* bs, int k, float scale = 1.f, const float* wn = nullptr) {
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    int lane = tid & 31, warp = tid >> 5, nw = (blockDim.x * blockDim.y) >> 5;
    bool vec = ((size_t)x & 15) == 0 && ((size_t)wn & 15) == 0;
    if (XT == T_Q8_0) {
        // 8 lanes per block of 32, 4 elements a lane.
        for (int base = warp * 128; base < k; base += nw * 128) {
            int i = base + 4 * lane;
            bool ok = i < k;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (ok) v = ld4(x, i, vec, scale, wn);
            float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 4));
            if (!ok) continue;
            float id = a != 0.f ? 127.f / a : 0.f;
            *(int*)(xq + i) = pack4((int)rintf(v.x * id), (int)rintf(v.y * id), (int)rintf(v.z * id), (int)rintf(v.w * id));
            if ((lane & 7) == 0) xd[i / 32] = round_f16(a / 127.f);
        }
    } else { // Q8_K: a warp per block of 256, 8 consecutive elements a lane
        for (int b = warp; b < k / 256; b += nw) {
            float v[8];
            float4 a = ld4(x, 256 * b + 8 * lane, vec, scale, wn), c = ld4(x, 256 * b + 8 * lane + 4, vec, scale, wn);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
            float d = q8k_warp(v, xq + 256 * b, bs + 16 * b, nullptr, SW ? b : -1);
            if (lane == 0) xd[b] = d;
        }
    }
}

// rms_quant_q8k is rms_scale then quant_x for the rows r < R of x (k
// floats each) that want outputs (orow[r] ≥ 0), each into xs + r·xst, for
// k of at most one Q8_K block a warp (k ≤ 256·warps), from one read of
// each row: each warp holds its block of every row in registers while the
// block sums the squares, so R rows cost one barrier, not R. A row's sums
// are taken in the same order whatever R is. The caller synchronizes.
template <int R>
__device__ void rms_quant_q8k(const float* x, u8* xs, int xst, int k, float eps, const float* wn, const int* orow) {
    __shared__ double part[R][32];
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    int lane = tid & 31, warp = tid >> 5, nw = (blockDim.x * blockDim.y) >> 5;
    bool live = warp < k / 256, vec = ((size_t)x & 15) == 0 && ((size_t)wn & 15) == 0;
    float v[R][8];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int t = 0; t < 8; t++) v[r][t] = 0.f;
        if (!live || orow[r] < 0) continue;
        const float* xr = x + (size_t)r * k;
        float4 a = ld4(xr, 256 * warp + 8 * lane, vec, 1.f, nullptr), c = ld4(xr, 256 * warp + 8 * lane + 4, vec, 1.f, nullptr);
        v[r][0] = a.x, v[r][1] = a.y, v[r][2] = a.z, v[r][3] = a.w, v[r][4] = c.x, v[r][5] = c.y, v[r][6] = c.z, v[r][7] = c.w;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        double s = 0;
#pragma unroll
        for (int t = 0; t < 8; t++) s += (double)(v[r][t] * v[r][t]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) part[r][warp] = s;
    }
    __syncthreads();
    if (!live) return;
    float4 wa = ld4(wn, 256 * warp + 8 * lane, vec, 1.f, nullptr), wc = ld4(wn, 256 * warp + 8 * lane + 4, vec, 1.f, nullptr);
    const float w8[8] = {wa.x, wa.y, wa.z, wa.w, wc.x, wc.y, wc.z, wc.w};
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (orow[r] < 0) continue;
        double t = 0;
        for (int w = 0; w < nw; w++) t += part[r][w];
        float scale = 1.f / sqrtf((float)(t / (double)k) + eps);
#pragma unroll
        for (int i = 0; i < 8; i++) v[r][i] = (v[r][i] * scale) * w8[i];
        u8* row = xs + r * xst;
        float d = q8k_warp(v[r], (signed char*)row + 256 * warp, mm_bs(row, k) + 16 * warp, nullptr, R > 1 ? warp : -1);
        if (lane == 0) mm_xd(row, k)[warp] = d;
    }
}

// WBlk<T> is one lane's piece of one weight block: load() fetches the raw
// bytes (issued for MM_U blocks before any is used), prep() unpacks them,
// dot() is the piece's contribution against one quantized activation row.
template <int T> struct WBlk { // the float path's types never get here
    __device__ __forceinline__ void load(const u8*, int, int) {}
    __device__ __forceinline__ void prep(int) {}
    template <bool SW = false>
    __device__ __forceinline__ float dot(const signed char*, const float*, const short*, int, int) const { return 0.f; }
};

template <> struct WBlk<T_Q8_0> { // 4 lanes a block, 8 quants each
    int q0, q1;
    float d;
    __device__ __forceinline__ void load(const u8* wr, int b, int sub) {
        const u8* p = wr + (size_t)b * 34;
        d = ldg_f16(p);
        q0 = ld_a2(p + 2 + 8 * sub);
        q1 = ld_a2(p + 6 + 8 * sub);
    }
    __device__ __forceinline__ void prep(int) {}
    template <bool SW = false>
    __device__ __forceinline__ float dot(const signed char* xq, const float* xd, const short* bs, int b, int sub) const {
        int2 x = *(const int2*)(xq + 32 * b + 8 * sub);
        return (float)__dp4a(q0, x.x, __dp4a(q1, x.y, 0)) * (d * xd[b]);
    }
};

template <> struct WBlk<T_Q4_0> { // 4 lanes a block: 4 bytes, 8 nibbles each
    int lo, hi;
    float d;
    __device__ __forceinline__ void load(const u8* wr, int b, int sub) {
        const u8* p = wr + (size_t)b * 18;
        d = ldg_f16(p);
        lo = ld_a2(p + 2 + 4 * sub);
    }
    __device__ __forceinline__ void prep(int) {
        hi = __vsub4((lo >> 4) & 0x0F0F0F0F, 0x08080808);
        lo = __vsub4(lo & 0x0F0F0F0F, 0x08080808);
    }
    template <bool SW = false>
    __device__ __forceinline__ float dot(const signed char* xq, const float* xd, const short* bs, int b, int sub) const {
        int x0 = *(const int*)(xq + 32 * b + 4 * sub), x1 = *(const int*)(xq + 32 * b + 16 + 4 * sub);
        return (float)__dp4a(lo, x0, __dp4a(hi, x1, 0)) * (d * xd[b]);
    }
};


template <> struct WBlk<T_Q4_K> { // 8 lanes a block: 16 bytes of qs (32 quants) each
    uint4 hd, qs;
    int sc0, sc1, mn0, mn1;
    float d, dmin;
    __device__ __forceinline__ void load(const u8* wr, int b, int sub) {
        const u8* p = wr + (size_t)b * 144;
        hd = __ldg((const uint4*)p);
        qs = __ldg((const uint4*)(p + 16 + 16 * sub));
    }
    __device__ __forceinline__ void prep(int sub) {
        d = __half2float(__ushort_as_half((unsigned short)(hd.x & 0xffff)));
        dmin = __half2float(__ushort_as_half((unsigned short)(hd.x >> 16)));
        // ggml's get_scale_min_k4 for sub-blocks 2c (low nibbles) and 2c+1
        // (high), c = sub/2, two bytes at a time: scales bytes 0-3 are hd.y,
        // 4-7 hd.z, 8-11 hd.w.
        int c = sub >> 1, sh = 16 * (c & 1);
        u32 ys = hd.y >> sh, zs = hd.z >> sh, ws = hd.w >> sh;
        u32 sc = c < 2 ? ys & 0x3F3F : (ws & 0x0F0F) | ((ys >> 2) & 0x3030);
        u32 mn = c < 2 ? zs & 0x3F3F : ((ws >> 4) & 0x0F0F) | ((zs >> 2) & 0x3030);
        sc0 = sc & 255, sc1 = (sc >> 8) & 255, mn0 = mn & 255, mn1 = (mn >> 8) & 255;
    }
    template <bool SW = false>
    __device__ __forceinline__ float dot(const signed char* xq, const float* xd, const short* bs, int b, int sub) const {
        int e = 256 * b + 64 * (sub >> 1) + 16 * (sub & 1); // the lane's low quants; high ones 32 on
        int4 xl = *(const int4*)(xq + xq_swz<SW>(e)), xh = *(const int4*)(xq + xq_swz<SW>(e + 32));
        const int M = 0x0F0F0F0F;
        int sl = __dp4a((int)qs.x & M, xl.x, __dp4a((int)qs.y & M, xl.y, __dp4a((int)qs.z & M, xl.z, __dp4a((int)qs.w & M, xl.w, 0))));
        int sh = __dp4a((int)(qs.x >> 4) & M, xh.x,
            __dp4a((int)(qs.y >> 4) & M, xh.y, __dp4a((int)(qs.z >> 4) & M, xh.z, __dp4a((int)(qs.w >> 4) & M, xh.w, 0))));
        int ml = bs[e / 16], mh = bs[e / 16 + 2];
        return xd[b] * (d * (float)(sc0 * sl + sc1 * sh) - dmin * (float)(mn0 * ml + mn1 * mh));
    }
};

template <> struct WBlk<T_Q6_K> { // 8 lanes a block: 8 positions l of a half (32 quants) each
    // A block of 210 bytes starts on a 2-byte boundary (0 or 2 past a
    // word), and each piece a lane needs is 8 bytes at a multiple of 8 in
    // it: load keeps the three aligned words that hold each piece (ql at
    // l, at l+32, qh, the scales) and prep shifts them into place with
    // byte_perm. Twelve word loads instead of the 24 halfword ones that
    // assembling each word from two took: the load/store unit, not DRAM,
    // was the bound.
    u32 raw[4][3];
    u32 sel;
    int q[8]; // unpacked quants - 32 of y[l], y[l+32], y[l+64], y[l+96], two ints each
    int s0, s2, s4, s6;
    float d;
    __device__ __forceinline__ void load(const u8* wr, int b, int sub) {
        const u8* p = wr + (size_t)b * 210;
        int h = sub >> 2, g = sub & 3;
        const int at[4] = {64 * h + 8 * g, 64 * h + 8 * g + 32, 128 + 32 * h + 8 * g, 192 + 8 * h};
        bool odd = (size_t)p & 2;
        sel = odd ? 0x5432 : 0x3210;
        // An aligned block needs two words a piece: its third is the second
        // again, so the last block of a matrix reads nothing past its end.
        const u32* w0 = (const u32*)((size_t)p & ~(size_t)3);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            raw[i][0] = __ldg(w0 + at[i] / 4), raw[i][1] = __ldg(w0 + at[i] / 4 + 1);
            raw[i][2] = __ldg(w0 + at[i] / 4 + (odd ? 2 : 1));
        }
        d = ldg_f16(p + 208);
    }
    __device__ __forceinline__ void prep(int sub) {
        u32 x[4][2];
#pragma unroll
        for (int i = 0; i < 4; i++) x[i][0] = __byte_perm(raw[i][0], raw[i][1], sel), x[i][1] = __byte_perm(raw[i][1], raw[i][2], sel);
        const int a0 = x[0][0], a1 = x[0][1], b0 = x[1][0], b1 = x[1][1], h0 = x[2][0], h1 = x[2][1];
        // The sub-block scales at bytes (g>>1) + 0, 2, 4, 6 of the eight.
        int sh = 8 * ((sub & 3) >> 1);
        s0 = (signed char)(x[3][0] >> sh), s2 = (signed char)(x[3][0] >> (16 + sh));
        s4 = (signed char)(x[3][1] >> sh), s6 = (signed char)(x[3][1] >> (16 + sh));
        const int M = 0x0F0F0F0F, H = 0x30303030, B = 0x20202020;
        q[0] = __vsub4((a0 & M) | ((h0 << 4) & H), B), q[1] = __vsub4((a1 & M) | ((h1 << 4) & H), B);
        q[2] = __vsub4((b0 & M) | ((h0 << 2) & H), B), q[3] = __vsub4((b1 & M) | ((h1 << 2) & H), B);
        q[4] = __vsub4(((a0 >> 4) & M) | (h0 & H), B), q[5] = __vsub4(((a1 >> 4) & M) | (h1 & H), B);
        q[6] = __vsub4(((b0 >> 4) & M) | ((h0 >> 2) & H), B), q[7] = __vsub4(((b1 >> 4) & M) | ((h1 >> 2) & H), B);
    }
    template <bool SW = false>
    __device__ __forceinline__ float dot(const signed char* xq, const float* xd, const short* bs, int b, int sub) const {
        const int e = 256 * b + 128 * (sub >> 2) + 8 * (sub & 3);
        int2 x1 = *(const int2*)(xq + xq_swz<SW>(e)), x2 = *(const int2*)(xq + xq_swz<SW>(e + 32)),
             x3 = *(const int2*)(xq + xq_swz<SW>(e + 64)), x4 = *(const int2*)(xq + xq_swz<SW>(e + 96));
        int sum = s0 * __dp4a(q[0], x1.x, __dp4a(q[1], x1.y, 0)) + s2 * __dp4a(q[2], x2.x, __dp4a(q[3], x2.y, 0)) +
            s4 * __dp4a(q[4], x3.x, __dp4a(q[5], x3.y, 0)) + s6 * __dp4a(q[6], x4.x, __dp4a(q[7], x4.y, 0));
        return d * xd[b] * (float)sum;
    }
};

// MmOut stores output feature j of activation row i: features [0, n0) go
// to p0 (rows of n0), [n0, n0+n1) to p1 and [n0+n1, …) to p2 (rows of n1)
// — one segment for matmul and lm_head, Q/K/V or gate/up for the fused
// kernels — plus bias[j] where there is one. With acc (matmul_residual)
// the value, bias included, is added to what the output holds.
struct MmOut {
    float *p0, *p1, *p2;
    int n0, n1;
    const float* bias;
    bool acc;
    __device__ __forceinline__ void put(float* p, float v) const { *p = acc ? *p + v : v; }
    __device__ __forceinline__ void store(size_t i, int j, float v) const {
        if (bias) v += bias[j];
        if (j < n0) put(p0 + i * n0 + j, v);
        else if (j < n0 + n1) put(p1 + i * n1 + j - n0, v);
        else put(p2 + i * n1 + j - n0 - n1, v);
    }
};

__device__ __forceinline__ MmOut mm_out(float* y, int n, const float* bias, bool acc = false) {
    return MmOut{y, y, y, n, 0, bias, acc};
}

// mm_rows computes, for the warp's output features j = j0, j0+jstep, …,
// the dot products of weight row j with the tile's MR (nr live)
// activation rows and stores them through out[r] (null: not wanted).
template <int TW, int MR>
__device__ __forceinline__ void mm_rows(const u8* __restrict__ w, const u8* xs, int xst, int k, int n, int nr,
    const int* orow, const MmOut& o, int j0, int jstep) {
    constexpr int TPB = Fast<TW>::TPB, BPI = 32 / TPB;
    constexpr int U = MR == 1 ? MM_U : 2; // a tile's compute covers latency itself
    int lane = threadIdx.x & 31, sub = lane % TPB;
    int nb = k / Geom<TW>::BS;
    size_t rb = row_bytes<TW>(k);
    for (int j = j0; j < n; j += jstep) {
        const u8* wr = w + (size_t)j * rb;
        float acc[MR];
#pragma unroll
        for (int r = 0; r < MR; r++) acc[r] = 0.f;
        for (int b0 = lane / TPB; b0 < nb; b0 += BPI * U) {
            WBlk<TW> wb[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (b0 + u * BPI < nb) wb[u].load(wr, b0 + u * BPI, sub);
#pragma unroll
            for (int u = 0; u < U; u++) {
                int b = b0 + u * BPI;
                if (b >= nb) break;
                wb[u].prep(sub);
#pragma unroll
                for (int r = 0; r < MR; r++)
                    if (r < nr)
                        acc[r] += wb[u].dot((const signed char*)(xs + r * xst), (const float*)(xs + r * xst + k),
                            (const short*)(xs + r * xst + k + k / 8), b, sub);
            }
        }
#pragma unroll
        for (int r = 0; r < MR; r++) {
            float v = warp_sum(acc[r]);
            if (lane == 0 && r < nr && orow[r] >= 0) o.store(orow[r], j, v);
        }
    }
}

// mmq is the multi-row (tile) kernel: the activation rows blockIdx.y·MM_MR…
// (rows that do not want logits skipped when lm), each RMS-normalized by
// wn first when given, against every output feature.
template <int TW>
__device__ __forceinline__ void mmq(const float* x, const u8* w, const u32* io, int k, int n, const MmOut& o, bool lm,
    const float* wn = nullptr, float eps = 0.f) {
    extern __shared__ __align__(16) u8 smem[];
    dep_sync();
    int rows = io[IO_ROWS];
    int row0 = blockIdx.y * MM_MR;
    if (row0 >= rows) return;
    int nr = min(MM_MR, rows - row0);
    int orow[MM_MR]; // where row r's outputs go (its slot for lm_head), -1: nowhere
    bool any = false;
#pragma unroll
    for (int r = 0; r < MM_MR; r++) {
        orow[r] = -1;
        if (r >= nr) continue;
        int row = row0 + r;
        if (!lm) orow[r] = row;
        else if (io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS) orow[r] = io_row(io, row, ROW_SLOT);
        any |= orow[r] >= 0;
    }
    if (!any) return;
    int xst = mm_xstride(k);
    const float* x0 = x + (size_t)row0 * k;
    float scale[MM_MR];
    if (wn) rms_scales(x0, k, nr, eps, scale);
#pragma unroll
    for (int r = 0; r < MM_MR; r++)
        if (r < nr && orow[r] >= 0)
            quant_x<Geom<TW>::VT>(x0 + (size_t)r * k, (signed char*)(smem + r * xst), mm_xd(smem + r * xst, k),
                mm_bs(smem + r * xst, k), k, wn ? scale[r] : 1.f, wn);
    __syncthreads();
    int j0 = blockIdx.x * MM_WARPS + (threadIdx.x >> 5), jstep = gridDim.x * MM_WARPS;
    if (nr == 1)
        mm_rows<TW, 1>(w, smem, xst, k, n, 1, orow, o, j0, jstep);
    else
        mm_rows<TW, MM_MR>(w, smem, xst, k, n, nr, orow, o, j0, jstep);
}

// mmv is the decode kernel: R activation rows per blockIdx.y (rows
// R·blockIdx.y…, at most R), blocks of (32·WPR, RPB) threads, RPB·WPR =
// MMV_WARPS — RPB output features at a time, each split over WPR warps
// (launch.go picks WPR so that small matrices still spread over the GPU),
// partial sums combined through shared memory. A warp's work is a stream of
// chunks, U weight blocks per lane each: the batches of one row, then the
// next row's. The loads of the next chunk are issued before the current one
// is computed, so the memory system always has a chunk in flight; the first
// chunk's loads are issued before the activation rows are quantized,
// overlapping that. Each weight block is loaded and unpacked once for the
// block's R rows (the _rows entry, R = MMV_MR, for 2-row steps over large
// matrices: see launch.go; the _rows4 entry, R = MMV_MR4, for the steps
// whose rows must have one-row bits: see onerow.go), and each row's sum is
// taken in the same order as with R = 1, so a row's result does not
// depend on its neighbours.
#define MMV_WARPS 16
#define MMV_THREADS (32 * MMV_WARPS)
#define MMV_BLOCKS (32 / MMV_WARPS) // blocks a multiprocessor keeps (launch bounds): 32 warps, 64 registers a thread
#define MMV_MR 2 // rows a block of the _rows entry takes (launch.go's mmvRows)
#define MMV_MR4 4 // rows a block of the _rows4 entry takes (onerow.go's mmvRowsWide), for verify steps
// mmv_sum is a feature's sum of its wpr warps' partial sums in red, as the
// matrix-vector kernel takes it: the one warp's own where wpr is 1, else
// added in warp order from 0.
__device__ __forceinline__ float mmv_sum(const float* red, int at, int wpr) {
    if (wpr == 1) return red[at];
    float v = 0.f;
    for (int i = 0; i < wpr; i++) v += red[at + i];
    return v;
}
// mmv's epilogue (PE): NoPair stores each feature's sum through o. A pair
// epilogue (ON) takes features 2i and 2i+1 together, both of which a
// block holds (its features are RPB at a time, RPB even): row(j, n) is
// the weight row of feature j, and pair(o, r, j, a, b) stores the sums a
// and b of features j (even) and j+1 of row r, which are the sums the
// plain walk would store.
struct NoPair {
    static constexpr bool ON = false;
    __device__ __forceinline__ int row(int j, int) const { return j; }
    __device__ __forceinline__ void pair(const MmOut&, size_t, int, float, float) const {}
};
// SwiGLUPair (rms_norm_gate_up_swiglu): n is 2f features of a gate|up
// weight, features 2i and 2i+1 its rows i and f + i (gate i and up i), and
// feature i of o gets silu(gate i)·up i formed as the swiglu kernel forms
// it from the sums the unfused product would have stored: the same bits,
// without their round trip through memory or the swiglu launch.
struct SwiGLUPair {
    static constexpr bool ON = true;
    __device__ __forceinline__ int row(int j, int n) const { return (j & 1) ? (n >> 1) + (j >> 1) : j >> 1; }
    __device__ __forceinline__ void pair(const MmOut& o, size_t r, int j, float g, float u) const {
        o.store(r, j >> 1, g / (1.f + (float)exp(-(double)g)) * u);
    }
};
template <int TW, int U = Fast<TW>::U, int R = 1, class PE = NoPair>
__device__ __forceinline__ void mmv(const float* x, const u8* __restrict__ w, const u32* io, int k, int n, const MmOut& o, bool lm,
    const float* wn = nullptr, float eps = 0.f, const PE& pe = PE()) {
    extern __shared__ __align__(16) u8 smem[];
    __shared__ float red[R][MMV_WARPS];
    constexpr int TPB = Fast<TW>::TPB, BPI = 32 / TPB;
    int row0 = blockIdx.y * R;
    int rows = io[IO_ROWS];
    const int wpr = blockDim.x >> 5, rpb = blockDim.y;
    const int lane = threadIdx.x & 31, part = threadIdx.x >> 5, sub = lane % TPB;
    const int nb = k / Geom<TW>::BS;
    const size_t rb = row_bytes<TW>(k);
    const int bfirst = part * BPI + lane / TPB, bstep = wpr * BPI, per = bstep * U;
    const int nchunk = (nb + per - 1) / per; // chunks per row
    const int jstep = gridDim.x * rpb;
    WBlk<TW> cur[U], nxt[U];
    auto load = [&](WBlk<TW>* wb, int base, int c) {
        int j = base + threadIdx.y;
        if (j >= n) return;
        const u8* wr = w + (size_t)pe.row(j, n) * rb;
#pragma unroll
        for (int u = 0; u < U; u++) {
            int b = bfirst + c * per + u * bstep;
            if (b < nb) wb[u].load(wr, b, sub);
        }
    };
    int base = blockIdx.x * rpb;
    load(cur, base, 0);
    dep_sync(); // the weights are not the previous kernel's
    if (row0 >= rows) return;
    const int nr = min(R, rows - row0);
    int orow[R]; // where row r's outputs go (its slot for lm_head), -1: nowhere
    bool any = false;
#pragma unroll
    for (int r = 0; r < R; r++) {
        orow[r] = -1;
        if (r >= nr) continue;
        int row = row0 + r;
        if (!lm) orow[r] = row;
        else if (io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS) orow[r] = io_row(io, row, ROW_SLOT);
        any |= orow[r] >= 0;
    }
    if (!any) return; // uniform over the block
    const int xst = R == 1 ? 0 : mm_xstride(k);
    if (Geom<TW>::VT == T_Q8_K && wn && k <= 256 * MMV_WARPS) {
        rms_quant_q8k<R>(x + (size_t)row0 * k, smem, xst, k, eps, wn, orow);
    } else {
        // rms_scale ends with a barrier, so the rows need none between them.
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (orow[r] < 0) continue;
            const float* xr = x + (size_t)(row0 + r) * k;
            u8* xs = smem + r * xst;
            float scale = wn ? rms_scale(xr, k, eps) : 1.f;
            quant_x<Geom<TW>::VT, (R > 1)>(xr, (signed char*)xs, mm_xd(xs, k), mm_bs(xs, k), k, scale, wn);
        }
    }
    __syncthreads();
    for (; base < n; base += jstep) { // uniform over the block: the barriers below
        int j = base + threadIdx.y;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        for (int c = 0; c < nchunk; c++) {
            if (c + 1 < nchunk) load(nxt, base, c + 1);
            else if (base + jstep < n) load(nxt, base + jstep, 0);
            if (j < n) {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int b = bfirst + c * per + u * bstep;
                    if (b < nb) {
                        cur[u].prep(sub);
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            u8* xs = smem + r * xst;
                            if (orow[r] >= 0) acc[r] += cur[u].template dot<(R > 1)>((const signed char*)xs, mm_xd(xs, k), mm_bs(xs, k), b, sub);
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) cur[u] = nxt[u];
        }
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = warp_sum(acc[r]);
        if (wpr == 1 && !PE::ON) {
            if (lane == 0 && j < n) {
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (orow[r] >= 0) o.store(orow[r], j, acc[r]);
            }
            continue;
        }
        int wi = threadIdx.y * wpr + part;
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) red[r][wi] = acc[r];
        }
        __syncthreads();
        if constexpr (PE::ON) {
            // The pair's even and odd features' warps' sums are both in
            // red: the even one's first warp takes the pair.
            if (part == 0 && lane == 0 && j < n && (threadIdx.y & 1) == 0) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (orow[r] < 0) continue;
                    pe.pair(o, orow[r], j, mmv_sum(red[r], threadIdx.y * wpr, wpr), mmv_sum(red[r], (threadIdx.y + 1) * wpr, wpr));
                }
            }
        } else if (part == 0 && lane == 0 && j < n) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (orow[r] < 0) continue;
                float v = 0.f;
                for (int i = 0; i < wpr; i++) v += red[r][threadIdx.y * wpr + i];
                o.store(orow[r], j, v);
            }
        }
        __syncthreads();
    }
}
