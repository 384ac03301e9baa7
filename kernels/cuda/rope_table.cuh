// rope_table.cuh: the rope table and rotation shared by rope, rope_ext,
// rope_kv_write and rms_norm_rope_kv_write.
#pragma once
#include "common.cuh"

// rope_table fills cs and sn with cos and sin of pos·θ_p·freq_scale for the
// n_rot/2 pairs (n_rot ≤ 512), one thread a pair; the block shares them
// across heads. θ is built by repeated float multiplication, as the oracle
// (and ggml's cache) does, so its rounding is the same; sin and cos are
// taken in double and rounded.
__device__ void rope_table(u32 pos, u32 n_rot, u32 base_bits, u32 scale_bits, float* cs, float* sn) {
    float base = __uint_as_float(base_bits), fscale = __uint_as_float(scale_bits);
    float theta_scale = (float)pow((double)base, -2.0 / (double)n_rot);
    for (int p = threadIdx.x; p < (int)n_rot / 2; p += blockDim.x) {
        float theta = (float)pos;
        for (int q = 0; q < p; q++) theta *= theta_scale;
        float t = theta * fscale;
        double sd, cd;
        sincos((double)t, &sd, &cd);
        cs[p] = (float)cd, sn[p] = (float)sd;
    }
    __syncthreads();
}

// rope_pair rotates pair p of head v in place by the angle whose cos and
// sin are c and s: elements 2p and 2p+1, or p and p+pairs (NeoX).
__device__ __forceinline__ void rope_pair(float* v, int p, int pairs, u32 neox, float c, float s) {
    int i0 = 2 * p, i1 = 2 * p + 1;
    if (neox) i0 = p, i1 = p + pairs;
    float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x0 * s + x1 * c;
}

// rope_elem is element d of head x rotated by rope's expressions (rope
// above): its pair's cos and sin from the table, normal or NeoX pairing;
// elements past n_rot pass through.
__device__ __forceinline__ float rope_elem(const float* x, int d, int n_rot, bool neox, const float* cs, const float* sn) {
    if (d >= n_rot) return x[d];
    int pairs = n_rot / 2, p, i0, i1;
    if (neox) p = d < pairs ? d : d - pairs, i0 = p, i1 = p + pairs;
    else p = d / 2, i0 = 2 * p, i1 = 2 * p + 1;
    float c = cs[p], s = sn[p], x0 = x[i0], x1 = x[i1];
    return d == i0 ? x0 * c - x1 * s : x0 * s + x1 * c;
}
