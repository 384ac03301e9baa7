// moe_gate_topk.cuh: T-CUDA's kernel family moe_gate_topk: route[row] = the
// row's n_used experts and weights; grid (rows).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY, WT and NAME, then includes this file.
#include "../typed.cuh"

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
