// common.h: what every AMD kernel shares — the launch shape, the request
// table (kernels/io.go), wave and workgroup reductions, F16 loads. The
// kernels use clang's AMDGPU builtins rather than OpenCL's work-item and
// math library functions, so that a code object needs nothing but clang
// and lld (no ROCm device libraries).
#pragma once
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#if __AMDGCN_WAVEFRONT_SIZE != 32
#error "the AMD kernels are written for wave32"
#endif

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long u64;

// WG threads per workgroup (amd.WorkgroupSize), WAVE lanes per wave.
#define WG 256
#define WAVE 32
#define NWAVES (WG / WAVE)
#define KERNEL __kernel __attribute__((reqd_work_group_size(WG, 1, 1)))

#define GROUP() ((int)__builtin_amdgcn_workgroup_id_x())
#define TID() ((int)__builtin_amdgcn_workitem_id_x())
#define LANE() (TID() & (WAVE - 1))
#define WAVE_ID() (TID() / WAVE)

#define INF __builtin_inff()

// wg_barrier is OpenCL's barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
// for one workgroup.
static inline void wg_barrier(void) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// Request table words (kernels/io.go).
#define IO_ROWS 0
#define IO_MAX_PAGES 1
#define IO_PAGE_TABLE 2
#define IO_ROW_BASE 8
#define IO_ROW_WORDS 4
#define ROW_TOKEN 0
#define ROW_POS 1
#define ROW_SLOT 2
#define ROW_FLAGS 3
#define ROW_WANTS_LOGITS 1
#define KV_PAGE_TOKENS 16

static inline u32 io_row(__global const u32* io, int i, int f) { return io[IO_ROW_BASE + i * IO_ROW_WORDS + f]; }

// io_page is the KV page that holds position pos of slot.
static inline u32 io_page(__global const u32* io, u32 slot, u32 pos) {
    return io[io[IO_PAGE_TABLE] + slot * io[IO_MAX_PAGES] + pos / KV_PAGE_TOKENS];
}

// kv_at is the address of (page, layer, k|v, token) in the KV cache:
// pages of [layer][k|v][token][kv_dim] F16 (kernels.KVPageBytes).
static inline __global half* kv_at(__global u8* kv, u32 page, u32 layer, u32 n_layer, u32 kv_dim, u32 which, u32 tok) {
    u64 page_bytes = (u64)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    return (__global half*)(kv + page * page_bytes + ((u64)(layer * 2 + which) * KV_PAGE_TOKENS + tok) * kv_dim * 2);
}

// Lane shuffles within a wave (ds_bpermute: lane i reads lane src).
static inline int shfl_xor_i(int v, int o) { return __builtin_amdgcn_ds_bpermute((LANE() ^ o) << 2, v); }
static inline float shfl_xor_f(float v, int o) { return as_float(shfl_xor_i(as_int(v), o)); }
static inline double shfl_xor_d(double v, int o) {
    int2 p = as_int2(v);
    p.x = shfl_xor_i(p.x, o);
    p.y = shfl_xor_i(p.y, o);
    return as_double(p);
}

static inline float wave_sum(float v) {
    for (int o = WAVE / 2; o > 0; o >>= 1) v += shfl_xor_f(v, o);
    return v;
}
static inline float wave_max(float v) {
    for (int o = WAVE / 2; o > 0; o >>= 1) v = __builtin_fmaxf(v, shfl_xor_f(v, o));
    return v;
}
static inline double wave_sum_d(double v) {
    for (int o = WAVE / 2; o > 0; o >>= 1) v += shfl_xor_d(v, o);
    return v;
}

// Workgroup reductions: every thread passes its value and gets the
// workgroup's result. part is NWAVES words of LDS; both barriers are
// needed (part is reused by the next call).
static inline float wg_sum(float v, __local float* part) {
    v = wave_sum(v);
    if (LANE() == 0) part[WAVE_ID()] = v;
    wg_barrier();
    float t = 0.f;
    for (int w = 0; w < NWAVES; w++) t += part[w];
    wg_barrier();
    return t;
}
static inline float wg_max(float v, __local float* part) {
    v = wave_max(v);
    if (LANE() == 0) part[WAVE_ID()] = v;
    wg_barrier();
    float t = -INF;
    for (int w = 0; w < NWAVES; w++) t = __builtin_fmaxf(t, part[w]);
    wg_barrier();
    return t;
}
static inline double wg_sum_d(double v, __local double* part) {
    v = wave_sum_d(v);
    if (LANE() == 0) part[WAVE_ID()] = v;
    wg_barrier();
    double t = 0.0;
    for (int w = 0; w < NWAVES; w++) t += part[w];
    wg_barrier();
    return t;
}

static inline float ld_f16(__global const u8* p) { return (float)as_half((ushort)(p[0] | (p[1] << 8))); }
static inline float round_f16(float x) { return (float)(half)x; }

// Float functions as LLVM intrinsics (the AMDGPU backend expands them).
static inline float exp_f(float x) { return __builtin_expf(x); }
static inline float silu_f(float x) { return x / (1.f + exp_f(-x)); }

// sin_cos returns cos and sin of t, reduced modulo 2π in double first (the
// hardware sine is accurate on a small range only; rope's angles reach
// thousands of radians).
static inline void sin_cos(float t, float* c, float* s) {
    const double two_pi = 6.283185307179586;
    double td = (double)t;
    float r = (float)(td - __builtin_rint(td / two_pi) * two_pi);
    *c = __builtin_cosf(r);
    *s = __builtin_sinf(r);
}
