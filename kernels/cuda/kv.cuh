// kv.cuh: the KV cache's addressing, for the families that write it.
#pragma once
#include "common.cuh"

// kv_at is the address of (page, layer, k|v, token) in the KV cache:
// pages of [layer][k|v][token][kv_dim] F16 (kernels/io.go).
__device__ __forceinline__ __half* kv_at(u8* kv, u32 page, u32 layer, u32 n_layer, u32 kv_dim, int which, int tok) {
    size_t page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    return (__half*)(kv + page * page_bytes + ((size_t)(layer * 2 + which) * KV_PAGE_TOKENS + tok) * kv_dim * 2);
}
