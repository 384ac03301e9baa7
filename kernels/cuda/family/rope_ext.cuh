// rope_ext.cuh: T-CUDA's kernel family rope_ext: rope with frequency factors,
// an attention factor and YaRN; grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../rope_table.cuh"

// The table is rope_table's with pair p's angle divided by freq[p] (when
// freq is not null) before the scale and cos and sin multiplied by the
// attention factor after, as the oracle and ggml's rope_yarn do; with
// ext_factor ≠ 0 (YaRN) the angle mixes the scaled (interpolated) and the
// unscaled (extrapolated) one by ext_factor times the ramp of rope_yarn_ramp
// between the correction dims, and the attention factor is multiplied by
// 1 + 0.1·ln(1/freq_scale), the mix and that factor each one fused
// multiply-add as ggml's compiled rope_yarn has them (and the oracle). The
// rotation is rope's (rope_pair).
extern "C" __global__ void __launch_bounds__(256) NAME(float* x, const float* freq, const u32* io, u32 n_head,
    u32 head_dim, u32 n_rot, u32 neox, u32 base_bits, u32 scale_bits, u32 attn_bits, u32 ext_bits, u32 lo_bits,
    u32 hi_bits) {
    int row = blockIdx.x;
    int pairs = n_rot / 2;
    __shared__ float cs[256], sn[256];
    float base = __uint_as_float(base_bits), fscale = __uint_as_float(scale_bits), mscale = __uint_as_float(attn_bits);
    float ext = __uint_as_float(ext_bits), lo = __uint_as_float(lo_bits), hi = __uint_as_float(hi_bits);
    if (ext != 0.f) mscale *= __fmaf_rn(0.1f, (float)log((double)(1.f / fscale)), 1.f);
    float theta_scale = (float)pow((double)base, -2.0 / (double)n_rot);
    u32 pos = io_row(io, row, ROW_POS);
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        float theta = (float)pos;
        for (int q = 0; q < p; q++) theta *= theta_scale;
        if (freq) theta = theta / freq[p];
        float t = fscale * theta;
        if (ext != 0.f) {
            float y = ((float)p - lo) / fmaxf(0.001f, hi - lo);
            float mix = (1.f - fminf(1.f, fmaxf(0.f, y))) * ext;
            t = __fmaf_rn(theta, mix, t * (1.f - mix));
        }
        double sd, cd;
        sincos((double)t, &sd, &cd);
        cs[p] = (float)cd * mscale, sn[p] = (float)sd * mscale;
    }
    __syncthreads();
    dep_sync(); // the table comes from the request table and freq (a weight): built before
    if (row >= (int)io[IO_ROWS]) return;
    for (int it = threadIdx.x; it < (int)n_head * pairs; it += blockDim.x) {
        int h = it / pairs, p = it % pairs;
        rope_pair(x + ((size_t)row * n_head + h) * head_dim, p, pairs, neox, cs[p], sn[p]);
    }
}
