// flash_attn_ext.cuh: T-CUDA's kernel family flash_attn_ext (its body is fa.cuh's, or
// faq.cuh's for a quantized cache).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../fa.cuh"
#ifdef KV_K
#include "../faq.cuh" // a quantized cache's instance (kv.cuh's KV_QUANT)
#endif

#ifndef CAT
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#endif

// fae_run is the entries' body. The oracle's scale is the spec's divided
// by softcap when there is one (ggml_flash_attn_ext's), rounded to float.
__device__ __forceinline__ void fae_run(const float* q, const u8* kv, const float* sinks, const u32* io, float* y, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u32 softcap_bits, u32 window, u8* stg) {
    float scale = __uint_as_float(scale_bits), softcap = __uint_as_float(softcap_bits);
    if (softcap != 0.f) scale /= softcap;
#ifdef KV_K
    faq_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg);
#else
    fa_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window, stg);
#endif
}

extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const float* sinks, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u32 softcap_bits,
    u32 window) {
    fae_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale_bits, softcap_bits, window, nullptr);
}

// flash_attn_ext_split is the main kernel with a long row's keys split
// over gridDim.z blocks (fa.cuh's flash decoding across blocks), their
// partial states in the staging buffer stg: launch.go's EntrySplit.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _split)(const float* q, const u8* kv, const float* sinks,
    const u32* io, float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u32 softcap_bits,
    u32 window, u8* stg) {
    fae_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale_bits, softcap_bits, window, stg);
}
