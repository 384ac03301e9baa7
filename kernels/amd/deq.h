// deq.h: one block-decode function per weight type, deq_<type>(row, i) =
// element i of a row, with ggml's float expressions (kernels/quant's
// dequantize functions: the comment on each names the Go function it
// follows). Every typed family decodes through these, selected by WTYPE;
// WBS and WBB are the type's block elements and bytes.
#pragma once
#include "common.h"

// ggml type ids (format/ggml).
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

#define ROW __global const u8*

static inline float deq_f32(ROW r, int i) { return ((__global const float*)r)[i]; }
static inline float deq_f16(ROW r, int i) { return (float)((__global const half*)r)[i]; }

// nib32 is element j of a 32-element block of nibbles: low nibbles of
// qs[0..15], then their high nibbles.
static inline int nib32(ROW qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

// dequantQ4_0: {d f16; qs[16]}, (q-8)·d.
static inline float deq_q4_0(ROW r, int i) {
    ROW b = r + (i / 32) * 18;
    return (float)(nib32(b + 2, i % 32) - 8) * ld_f16(b);
}
// dequantQ4_1: {d, m f16; qs[16]}, q·d + m.
static inline float deq_q4_1(ROW r, int i) {
    ROW b = r + (i / 32) * 20;
    return (float)nib32(b + 4, i % 32) * ld_f16(b) + ld_f16(b + 2);
}
// q5 is a Q5 block's 5-bit quant j: a nibble and bit j of qh.
static inline int q5(ROW b, int qhAt, int j) {
    u32 qh = b[qhAt] | (b[qhAt + 1] << 8) | (b[qhAt + 2] << 16) | ((u32)b[qhAt + 3] << 24);
    return nib32(b + qhAt + 4, j) | (((qh >> j) & 1) << 4);
}
// dequantQ5_0: {d f16; qh u32; qs[16]}, (q-16)·d.
static inline float deq_q5_0(ROW r, int i) {
    ROW b = r + (i / 32) * 22;
    return (float)(q5(b, 2, i % 32) - 16) * ld_f16(b);
}
// dequantQ5_1: {d, m f16; qh u32; qs[16]}, q·d + m.
static inline float deq_q5_1(ROW r, int i) {
    ROW b = r + (i / 32) * 24;
    return (float)q5(b, 4, i % 32) * ld_f16(b) + ld_f16(b + 2);
}
// dequantQ8_0: {d f16; qs[32] int8}, q·d.
static inline float deq_q8_0(ROW r, int i) {
    ROW b = r + (i / 32) * 34;
    return (float)(char)b[2 + i % 32] * ld_f16(b);
}
// q2 is the 2-bit quant of element e of a Q2_K/Q3_K super-block.
static inline int q2(ROW qs, int e) {
    int c = e / 128, w = e % 128;
    return (qs[32 * c + w % 32] >> (2 * (w / 32))) & 3;
}
// dequantQ2_K: {scales[16]; qs[64]; d, dmin f16}.
static inline float deq_q2_k(ROW r, int i) {
    ROW b = r + (i / 256) * 84;
    int e = i % 256;
    int sc = b[e / 16];
    float dl = ld_f16(b + 80) * (float)(sc & 15), ml = ld_f16(b + 82) * (float)(sc >> 4);
    return dl * (float)q2(b + 16, e) - ml;
}
// dequantQ3_K: {hmask[32]; qs[64]; scales[12]; d f16}.
static inline float deq_q3_k(ROW r, int i) {
    ROW b = r + (i / 256) * 110;
    int e = i % 256;
    int q = q2(b + 32, e);
    if (!((b[e % 32] >> (e / 32)) & 1)) q -= 4;
    ROW s = b + 96;
    int sb = e / 16, j = sb % 4, h = s[8 + j], sc;
    switch (sb / 4) {
    case 0: sc = (s[j] & 15) | ((h & 3) << 4); break;
    case 1: sc = (s[j + 4] & 15) | (((h >> 2) & 3) << 4); break;
    case 2: sc = (s[j] >> 4) | (((h >> 4) & 3) << 4); break;
    default: sc = (s[j + 4] >> 4) | ((h >> 6) << 4); break;
    }
    return ld_f16(b + 108) * (float)(sc - 32) * (float)q;
}
// scale_min_k4 is ggml's get_scale_min_k4 for sub-block sb of Q4_K/Q5_K.
static inline void scale_min_k4(ROW s, int sb, int* sc, int* mn) {
    if (sb < 4) {
        *sc = s[sb] & 63;
        *mn = s[sb + 4] & 63;
    } else {
        *sc = (s[sb + 4] & 15) | ((s[sb - 4] >> 6) << 4);
        *mn = (s[sb + 4] >> 4) | ((s[sb] >> 6) << 4);
    }
}
// dequantQ4_K: {d, dmin f16; scales[12]; qs[128]}.
static inline float deq_q4_k(ROW r, int i) {
    ROW b = r + (i / 256) * 144;
    int e = i % 256, c = e / 64, w = e % 64;
    int q = w < 32 ? (b[16 + 32 * c + w] & 15) : (b[16 + 32 * c + w - 32] >> 4);
    int sc, mn;
    scale_min_k4(b + 4, e / 32, &sc, &mn);
    return ld_f16(b) * (float)sc * (float)q - ld_f16(b + 2) * (float)mn;
}
// dequantQ5_K: {d, dmin f16; scales[12]; qh[32]; qs[128]}.
static inline float deq_q5_k(ROW r, int i) {
    ROW b = r + (i / 256) * 176;
    int e = i % 256, c = e / 64, w = e % 64;
    int q = w < 32 ? (b[48 + 32 * c + w] & 15) : (b[48 + 32 * c + w - 32] >> 4);
    q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
    int sc, mn;
    scale_min_k4(b + 4, e / 32, &sc, &mn);
    return ld_f16(b) * (float)sc * (float)q - ld_f16(b + 2) * (float)mn;
}
// dequantQ6_K: {ql[128]; qh[64]; scales[16] int8; d f16}.
static inline float deq_q6_k(ROW r, int i) {
    ROW b = r + (i / 256) * 210;
    int e = i % 256, h = e / 128, w = e % 128;
    int v = b[64 * h + w % 64];
    if (w >= 64) v >>= 4;
    int hb = (b[128 + 32 * h + w % 32] >> (2 * (w / 32))) & 3;
    int q = ((v & 15) | (hb << 4)) - 32;
    float s = (float)(char)b[192 + e / 16];
    return ld_f16(b + 208) * s * (float)q;
}

#include "iq3s_grid.h"

// dequantIQ3_S: {d f16; qs[64]; qh[8]; signs[32]; scales[4]}. Element e of
// sub-block s (32 elements, eight groups of four) is byte e%4 of the grid
// point qs[8s+e/4] | bit e/4 of qh[s] << 8, times d·(1+2·sc) rounded to
// float once, negated when bit e%8 of signs[4s+e/8] is set.
static inline float deq_iq3_s(ROW r, int i) {
    ROW b = r + (i / 256) * 110;
    int e = i % 256, s = e / 32, w = e % 32, g = w / 4;
    float db = ld_f16(b) * (float)(1 + 2 * ((b[106 + s / 2] >> (4 * (s % 2))) & 15));
    u32 idx = b[2 + 8 * s + g] | (((b[66 + s] >> g) & 1) << 8);
    float v = db * (float)((iq3s_grid[idx] >> (8 * (w % 4))) & 255);
    return (b[74 + 4 * s + w / 8] >> (w % 8)) & 1 ? -v : v;
}

// kvalues_iq4nl: IQ4_NL's and IQ4_XS's 16 levels (kernels/quant).
__constant char kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// dequantIQ4_NL: {d f16; qs[16]}, Q4_0's nibble layout, d·kvalues[q].
static inline float deq_iq4_nl(ROW r, int i) {
    ROW b = r + (i / 32) * 18;
    return ld_f16(b) * (float)kvalues_iq4nl[nib32(b + 2, i % 32)];
}
// dequantIQ4_XS: {d f16; scales_h u16; scales_l[4]; qs[128]}; sub-block s
// is an IQ4_NL block's nibbles at qs[16s..], scaled by d·(ls-32) rounded
// to float once, ls = nibble s%2 of scales_l[s/2] | bit pair s of scales_h << 4.
static inline float deq_iq4_xs(ROW r, int i) {
    ROW b = r + (i / 256) * 136;
    int e = i % 256, s = e / 32;
    u32 sh = b[2] | (b[3] << 8);
    int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4);
    float dl = ld_f16(b) * (float)(ls - 32);
    return dl * (float)kvalues_iq4nl[nib32(b + 8 + 16 * s, e % 32)];
}

#ifdef WTYPE
#if WTYPE == T_F32
#define DEQ deq_f32
#define WBS 1
#define WBB 4
#elif WTYPE == T_F16
#define DEQ deq_f16
#define WBS 1
#define WBB 2
#elif WTYPE == T_Q4_0
#define DEQ deq_q4_0
#define WBS 32
#define WBB 18
#elif WTYPE == T_Q4_1
#define DEQ deq_q4_1
#define WBS 32
#define WBB 20
#elif WTYPE == T_Q5_0
#define DEQ deq_q5_0
#define WBS 32
#define WBB 22
#elif WTYPE == T_Q5_1
#define DEQ deq_q5_1
#define WBS 32
#define WBB 24
#elif WTYPE == T_Q8_0
#define DEQ deq_q8_0
#define WBS 32
#define WBB 34
#elif WTYPE == T_Q2_K
#define DEQ deq_q2_k
#define WBS 256
#define WBB 84
#elif WTYPE == T_Q3_K
#define DEQ deq_q3_k
#define WBS 256
#define WBB 110
#elif WTYPE == T_Q4_K
#define DEQ deq_q4_k
#define WBS 256
#define WBB 144
#elif WTYPE == T_Q5_K
#define DEQ deq_q5_k
#define WBS 256
#define WBB 176
#elif WTYPE == T_Q6_K
#define DEQ deq_q6_k
#define WBS 256
#define WBB 210
#elif WTYPE == T_IQ3_S
#define DEQ deq_iq3_s
#define WBS 256
#define WBB 110
#elif WTYPE == T_IQ4_NL
#define DEQ deq_iq4_nl
#define WBS 32
#define WBB 18
#elif WTYPE == T_IQ4_XS
#define DEQ deq_iq4_xs
#define WBS 256
#define WBB 136
#else
#error "deq.h: no decoder for WTYPE"
#endif
// row_bytes is the bytes of a row of n weights.
static inline u64 row_bytes(u32 n) { return (u64)(n / WBS) * WBB; }
#endif
