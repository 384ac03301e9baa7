// argmax.cuh: T-CUDA's kernel family argmax: tokens[slot] = first largest
// logit, rows that want logits; grid (rows), 1024 threads.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// argmax_allowed is the first largest of l[0..n_vocab) among the tokens
// whose bit is set in mask (every token where mask is null), -1 where none
// is: a block of 1024 threads a row, so a single-row step's argmax is one
// block, whose loads in flight bound it (a vocabulary of 152k is 600 KB).
// The mask is tested per float4, whose four bits share a word.
__device__ __forceinline__ int argmax_allowed(const float* l, const u32* mask, u32 n_vocab) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float best = -INFINITY;
    int at = -1, tail = 0;
    if (((size_t)l & 15) == 0) { // float4 loads, several in flight; indices still rise per thread
        int n4 = n_vocab / 4;
        tail = 4 * n4;
        const float4* l4 = (const float4*)l;
#pragma unroll 4
        for (int i = threadIdx.x; i < n4; i += blockDim.x) {
            u32 m = mask ? (mask[i >> 3] >> (4 * (i & 7))) & 15u : 15u;
            if (m == 0) continue;
            float4 v = l4[i];
            if ((m & 1) && (at < 0 || v.x > best)) best = v.x, at = 4 * i;
            if ((m & 2) && (at < 0 || v.y > best)) best = v.y, at = 4 * i + 1;
            if ((m & 4) && (at < 0 || v.z > best)) best = v.z, at = 4 * i + 2;
            if ((m & 8) && (at < 0 || v.w > best)) best = v.w, at = 4 * i + 3;
        }
    }
    for (int j = tail + threadIdx.x; j < (int)n_vocab; j += blockDim.x)
        if ((!mask || (mask[j >> 5] >> (j & 31)) & 1u) && (at < 0 || l[j] > best)) best = l[j], at = j;
    for (int o = 16; o > 0; o >>= 1) {
        float b2 = __shfl_xor_sync(0xffffffffu, best, o);
        int a2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 >= 0 && (at < 0 || b2 > best || (b2 == best && a2 < at))) best = b2, at = a2;
    }
    if (lane == 0) bv[warp] = best, bi[warp] = at;
    __syncthreads();
    if (threadIdx.x != 0) return -1;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (bi[w] >= 0 && (at < 0 || bv[w] > best || (bv[w] == best && bi[w] < at))) best = bv[w], at = bi[w];
    return at;
}

extern "C" __global__ void __launch_bounds__(1024) NAME(const float* logits, const u32* io, u32* tokens, u32 n_vocab) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    int slot = io_row(io, row, ROW_SLOT);
    int at = argmax_allowed(logits + (size_t)slot * n_vocab, nullptr, n_vocab);
    if (threadIdx.x == 0) tokens[slot] = at;
}

// NAME_masked is the greedy choice of constrained rows, launched by the
// tier after a step's graph (not part of it): block b takes slot
// slots[b]'s largest logit among the tokens its mask allows (mask words
// of n_vocab bits, one run of words per block), -1 where none is.
extern "C" __global__ void __launch_bounds__(1024)
    CAT(NAME, _masked)(const float* logits, const u32* slots, const u32* masks, u32* tokens, u32 n_vocab, u32 words) {
    int slot = slots[blockIdx.x];
    int at = argmax_allowed(logits + (size_t)slot * n_vocab, masks + (size_t)blockIdx.x * words, n_vocab);
    if (threadIdx.x == 0) tokens[slot] = at;
}

// expf_cpu is kernels/cpu's expf (expf.go) in its float64 operations,
// each rounded as Go rounds it (--fmad=false keeps the separate multiply
// and add separate), so NAME_sampled's weights have the host sampler's
// bits (sample.Sampler.DrawWith).
__device__ __forceinline__ float expf_cpu(float x) {
    double d = fmax(-110.0, fmin((double)x, 100.0));
    double t = __dadd_rn(__dmul_rn(d, 0x1.71547652b82fep0), 0x1.8p52);
    double n = __dsub_rn(t, 0x1.8p52);
    double r = fma(-n, 0x1.62e42fefa39efp-1, d);
    r = fma(-n, 0x1.abc9e3b39803fp-56, r);
    // Taylor's terms 1/k! from k = 13 down, as constants (an array would
    // be read from local memory).
    double p = 1.0 / 6227020800.0;
    p = fma(p, r, 1.0 / 479001600.0);
    p = fma(p, r, 1.0 / 39916800.0);
    p = fma(p, r, 1.0 / 3628800.0);
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 1.0 / 2.0);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    unsigned long long bits = ((unsigned long long)__double_as_longlong(t) + 1023ull) << 52;
    return __double2float_rn(__dmul_rn(p, __longlong_as_double((long long)bits)));
}

// SAMPLE_BLOCK is sample.drawBlock: the tokens a partial sum of the
// weights covers; SAMPLE_MAX_CHUNKS bounds the vocabulary NAME_sampled
// draws from (524 288 tokens), its sums in shared memory.
#define SAMPLE_BLOCK 256
#define SAMPLE_MAX_CHUNKS 2048

// sample_w is token t's weight in a draw (sample.Sampler.exps): 0 for a
// banned token and a logit at -Inf or NaN, else expf_cpu of its distance
// from the largest logit times the inverse temperature, rounded to float.
__device__ __forceinline__ double sample_w(const float* l, int t, float mx, double inv, const int* ban) {
    float v = l[t];
    if (!(v > -INFINITY) || t == ban[0] || t == ban[1] || t == ban[2] || t == ban[3]) return 0.0;
    return (double)expf_cpu(__double2float_rn(__dmul_rn(__dsub_rn((double)v, (double)mx), inv)));
}

// NAME_sampled draws the token of sampled rows, launched by the tier
// after a step's graph (not part of it): block b takes slot slots[b] with
// the parameters at spec + 4b (the inverse temperature, the uniform draw
// u, then four banned token ids, -1 for none) and makes
// sample.Sampler.DrawWith's draw in its operations: the largest logit;
// the weights summed by blocks of SAMPLE_BLOCK tokens (a thread a block,
// in token order), the blocks' sums in order; then on thread 0 the walk
// to the block where u times the total falls and through its tokens. It
// leaves -1 where the host's draw is not this one: no token of weight, a
// logit at +Inf, or a vocabulary past SAMPLE_MAX_CHUNKS blocks.
extern "C" __global__ void __launch_bounds__(1024)
    CAT(NAME, _sampled)(const float* logits, const u32* slots, const double* spec, u32* tokens, u32 n_vocab) {
    __shared__ double sums[SAMPLE_MAX_CHUNKS];
    __shared__ float wmax[32];
    int slot = slots[blockIdx.x];
    const float* l = logits + (size_t)slot * n_vocab;
    const double* sp = spec + 4 * blockIdx.x;
    double inv = sp[0], u = sp[1];
    const int* ban = (const int*)(sp + 2);
    int n = (int)n_vocab, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mx = -INFINITY;
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        float v = l[t];
        if (v > mx && t != ban[0] && t != ban[1] && t != ban[2] && t != ban[3]) mx = v;
    }
    mx = warp_max(mx);
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    mx = wmax[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) mx = fmaxf(mx, wmax[w]);
    int chunks = (n + SAMPLE_BLOCK - 1) / SAMPLE_BLOCK;
    bool host = isinf(mx) || chunks > SAMPLE_MAX_CHUNKS;
    if (!host) {
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            double s = 0.0;
            int end = min(n, (c + 1) * SAMPLE_BLOCK);
            for (int t = c * SAMPLE_BLOCK; t < end; t++) s = __dadd_rn(s, sample_w(l, t, mx, inv, ban));
            sums[c] = s;
        }
    }
    __shared__ double s_r;
    __shared__ int s_from, s_draw;
    __shared__ float ws[SAMPLE_BLOCK];
    __syncthreads();
    // Thread 0 finds the block where the draw falls; the block's weights
    // are then computed by a thread each, and thread 0 walks them.
    if (threadIdx.x == 0) {
        double total = 0.0;
        if (!host)
            for (int c = 0; c < chunks; c++) total = __dadd_rn(total, sums[c]);
        s_draw = !host && total > 0.0 && !isinf(total);
        double r = __dmul_rn(u, total);
        int from = 0;
        for (int c = 0; s_draw && c < chunks; c++) {
            if (r < sums[c] || from + SAMPLE_BLOCK >= n) break;
            r = __dsub_rn(r, sums[c]);
            from += SAMPLE_BLOCK;
        }
        s_r = r, s_from = from;
    }
    __syncthreads();
    if (!s_draw) {
        if (threadIdx.x == 0) tokens[slot] = (u32)-1;
        return;
    }
    int from = s_from;
    if (threadIdx.x < SAMPLE_BLOCK && from + (int)threadIdx.x < n)
        ws[threadIdx.x] = (float)sample_w(l, from + threadIdx.x, mx, inv, ban);
    __syncthreads();
    if (threadIdx.x != 0) return;
    double r = s_r;
    int tok = -1, last = -1;
    for (int t = from; t < n && tok < 0; t++) {
        double x = t < from + SAMPLE_BLOCK ? (double)ws[t - from] : sample_w(l, t, mx, inv, ban);
        if (x > 0.0) {
            r = __dsub_rn(r, x);
            if (r < 0.0) tok = t;
            last = t;
        }
    }
    for (int t = from - 1; tok < 0 && last < 0 && t >= 0; t--)
        if (sample_w(l, t, mx, inv, ban) > 0.0) tok = t;
    if (tok < 0) tok = max(last, 0);
    tokens[slot] = (u32)tok;
}
