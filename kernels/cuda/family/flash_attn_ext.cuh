// flash_attn_ext.cuh: T-CUDA's kernel family flash_attn_ext (its body is fa.cuh's, or
// faq.cuh's for a quantized cache).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../fa.cuh"
#ifdef KV_K
#include "../faq.cuh" // a quantized cache's instance (kv.cuh's KV_QUANT)
#endif

// The oracle's scale is the spec's divided by softcap when there is one
// (ggml_flash_attn_ext's), rounded to float.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const float* sinks, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u32 softcap_bits,
    u32 window) {
    float scale = __uint_as_float(scale_bits), softcap = __uint_as_float(softcap_bits);
    if (softcap != 0.f) scale /= softcap;
#ifdef KV_K
    faq_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window);
#else
    fa_run(q, kv, sinks, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale, softcap, window);
#endif
}
