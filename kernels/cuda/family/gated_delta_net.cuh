// gated_delta_net.cuh: T-CUDA's kernel family gated_delta_net: the gated delta
// rule over each slot's rows; grid (rows, h_v).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../recurrent.cuh"

// The block of a slot's first row of the step runs the slot's v head h
// over the slot's rows in order. Row j of the (transposed) state is
// independent of the others within a step: warp w owns rows w, w+8, …,
// lane l their columns l, l+32, …, so the state stays in registers for
// heads of up to GDN_REG_S columns (GDN_REG_S² floats over 256 threads);
// wider heads update it in memory. The dot products are warp sums (the
// oracle sums in ggml's AVX-512 order).
#define GDN_REG_S 128
#define GDN_WARPS 8

// gdn_row updates state rows j = warp + GDN_WARPS·r (r < RW) for one
// token: decay, delta against k, rank-one update, output against q. S is
// the lane's registers (REG) or the state in memory.
template <bool REG, int RW, int EL>
__device__ __forceinline__ void gdn_row(float (&S)[RW][EL], float* m, int s, const float* qs, const float* ks,
    const float* vs, float decay, float b, float scale, float* out) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int rw = REG ? RW : (s + GDN_WARPS - 1) / GDN_WARPS;
#pragma unroll
    for (int r = 0; r < (REG ? RW : 1); r++) {
        for (int rr = REG ? r : 0; rr < (REG ? r + 1 : rw); rr++) {
            int j = warp + GDN_WARPS * rr;
            if (j >= s) break;
            float* mj = m + (size_t)j * s;
            float d = 0.f;
            if (REG) {
#pragma unroll
                for (int u = 0; u < EL; u++) {
                    int t = lane + 32 * u;
                    if (t < s) S[r][u] *= decay, d = fmaf(S[r][u], ks[t], d);
                }
            } else {
                for (int t = lane; t < s; t += 32) {
                    float v = mj[t] * decay;
                    mj[t] = v;
                    d = fmaf(v, ks[t], d);
                }
            }
            float delta = (vs[j] - warp_sum(d)) * b;
            float o = 0.f;
            if (REG) {
#pragma unroll
                for (int u = 0; u < EL; u++) {
                    int t = lane + 32 * u;
                    if (t < s) S[r][u] = fmaf(ks[t], delta, S[r][u]), o = fmaf(S[r][u], qs[t], o);
                }
            } else {
                for (int t = lane; t < s; t += 32) {
                    float v = fmaf(ks[t], delta, mj[t]);
                    mj[t] = v;
                    o = fmaf(v, qs[t], o);
                }
            }
            o = warp_sum(o);
            if (lane == 0) out[j] = o * scale;
        }
    }
}

// gdn_norm_scale is ggml_l2_norm's 1/max(‖x‖, eps) of s floats, for one
// warp: the squares summed in double, the root in float.
__device__ __forceinline__ float gdn_norm_scale(const float* x, int s, float eps) {
    double sum = 0;
    for (int t = threadIdx.x & 31; t < s; t += 32) sum += (double)(x[t] * x[t]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return 1.f / fmaxf(sqrtf((float)sum), eps);
}

template <bool REG>
__device__ void gdn_run(const float* qkv, const float* alpha, const float* beta, u8* state, const u32* io, float* y,
    u32 off, int hk, int hv, int s, float eps, u32 slot_bytes, u32 grouped, int row, u32 slot) {
    constexpr int RW = REG ? GDN_REG_S / GDN_WARPS : 1, EL = REG ? GDN_REG_S / 32 : 1;
    __shared__ float qs[2 * GDN_REG_S], ks[2 * GDN_REG_S], vs[2 * GDN_REG_S];
    __shared__ float sc[2];
    int h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, rows = io[IO_ROWS];
    int c = (2 * hk + hv) * s;
    int kh = grouped ? h / (hv / hk) : h % hk; // the q and k head of v head h
    float* m = (float*)(state + (size_t)slot * slot_bytes + off) + (size_t)h * s * s;
    float scale = 1.f / sqrtf((float)s);
    float S[RW][EL];
    if (REG) {
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < EL; u++) {
                int j = warp + GDN_WARPS * r, t = lane + 32 * u;
                S[r][u] = j < s && t < s ? m[(size_t)j * s + t] : 0.f;
            }
    }
    for (int i = row; i < rows; i++) {
        if (io_row(io, i, ROW_SLOT) != slot) continue;
        if (io_row(io, i, ROW_POS) == 0) {
            if (REG) {
#pragma unroll
                for (int r = 0; r < RW; r++)
#pragma unroll
                    for (int u = 0; u < EL; u++) S[r][u] = 0.f;
            } else {
                __syncthreads();
                for (int t = tid; t < s * s; t += blockDim.x) m[t] = 0.f;
            }
        }
        const float* rw = qkv + (size_t)i * c;
        for (int t = tid; t < s; t += blockDim.x) {
            qs[t] = rw[kh * s + t];
            ks[t] = rw[(hk + kh) * s + t];
            vs[t] = rw[(2 * hk + h) * s + t];
        }
        __syncthreads();
        if (warp < 2) {
            float f = gdn_norm_scale(warp ? ks : qs, s, eps);
            if (lane == 0) sc[warp] = f;
        }
        __syncthreads();
        for (int t = tid; t < s; t += blockDim.x) qs[t] *= sc[0], ks[t] *= sc[1];
        __syncthreads();
        float decay = (float)exp((double)alpha[(size_t)i * hv + h]), b = beta[(size_t)i * hv + h];
        gdn_row<REG, RW, EL>(S, m, s, qs, ks, vs, decay, b, scale, y + ((size_t)i * hv + h) * s);
        __syncthreads(); // qs, ks, vs are reused
    }
    if (REG) {
#pragma unroll
        for (int r = 0; r < RW; r++)
#pragma unroll
            for (int u = 0; u < EL; u++) {
                int j = warp + GDN_WARPS * r, t = lane + 32 * u;
                if (j < s && t < s) m[(size_t)j * s + t] = S[r][u];
            }
    }
}

extern "C" __global__ void __launch_bounds__(256) NAME(const float* qkv, const float* alpha, const float* beta,
    u8* state, const u32* io, float* y, u32 off, u32 h_k, u32 h_v, u32 s, u32 eps_bits, u32 slot_bytes, u32 grouped) {
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || s > 2 * GDN_REG_S) return;
    u32 slot = io_row(io, row, ROW_SLOT);
    if (!slot_leader(io, row, slot)) return;
    dep_sync();
    float eps = __uint_as_float(eps_bits);
    if (s <= GDN_REG_S)
        gdn_run<true>(qkv, alpha, beta, state, io, y, off, h_k, h_v, s, eps, slot_bytes, grouped, row, slot);
    else gdn_run<false>(qkv, alpha, beta, state, io, y, off, h_k, h_v, s, eps, slot_bytes, grouped, row, slot);
}
