// tilebench times the tensor-core tile kernel (mmt.cuh) alone on the
// prefill products of the qwen3 0.6B shape (embd 1024, 16 q / 8 kv heads
// of 128, ffn 3072, Q4_K_M) and the llama 7B shape, at 512 and 1024 rows:
// for each, the tile and split-k launch.go picks (first line, marked *)
// and the other tiles and splits, each launch's microseconds and TOPS
// (2·rows·n·k), then a few decode steps and a partial tile, each on the
// tile launch.go picks. Weights rotate through a pool several times the L2, so
// each launch reads them from memory as a prefill step does. With an
// argument, it writes every picked launch's output there, so that two
// builds of mmt.cuh can be compared bit for bit (cmp).
//
//   nvcc -arch=sm_90 -O3 --fmad=false -std=c++17 -o tilebench kernels/cuda/bench/tilebench.cu
#include "../mmt.cuh"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t ck_ = (x);                                                                                           \
        if (ck_ != cudaSuccess) {                                                                                      \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(ck_));                         \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

__global__ void k_fill(u32* p, size_t n, u32 seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        u32 h = (u32)i * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = h & 0xbfffbfffu; // every half finite, as mmvbench's
    }
}

__global__ void k_xfill(float* x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = (float)((i * 7919) % 2001) / 500.f - 2.f;
}

template <int T>
__global__ void __launch_bounds__(256) k_stage(const float* x, const u32* io, int k, u8* q8) {
    mt_stage<Geom<T>::VT>(x, io, k, q8, nullptr, 0.f);
}

template <int T, int MR>
__global__ void __launch_bounds__(256, MR == 16 ? 3 : 2) k_mmt(const u8* w, const u32* io, float* y, int k, int n, const u8* q8) {
    mmt<T, MR>(w, io, k, n, mm_out(y, n, nullptr), false, q8);
}

template <typename F> static float timeit(F launch, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) launch(i);
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) launch(i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGetLastError());
    return ms * 1000.f / reps;
}

// launch.go's mmtPerSM and mmtSplits.
static int per_sm(int st, int mr) { return std::min(mr == 16 ? 3 : 2, (228 << 10) / (st + (1 << 10))); }
static int splits_for(int tiles, int kbs, int psm) {
    if (tiles > MT_COUNTERS) return 1;
    int fill = std::max(1, std::min(kbs, psm * 132 / tiles)), part = (kbs + fill - 1) / fill;
    return (kbs + part - 1) / part;
}

struct Env {
    u8* pool;
    size_t pool_size;
    float *x, *y;
    u32* io;
    u8* q8;
    FILE* out;
};

template <int T, int MR>
static void one(const Env& e, const char* name, int rows, int k, int n, int splits, bool picked) {
    const int st = mt_smem<T, MR>(), kbs = k / 256, rt = (rows + MR - 1) / MR, ft = (n + MT_N - 1) / MT_N;
    if (splits > kbs || (splits > 1 && rt * ft > MT_COUNTERS)) return;
    const size_t mb = (size_t)n * (k / 256) * Geom<T>::BB, span = (mb + 4095) & ~(size_t)4095;
    const int copies = (int)(e.pool_size / span);
    CK(cudaFuncSetAttribute(k_mmt<T, MR>, cudaFuncAttributeMaxDynamicSharedMemorySize, st));
    dim3 g(rt, ft, splits);
    float us = timeit([&](int i) { k_mmt<T, MR><<<g, MT_THREADS, st>>>(e.pool + (size_t)(i % copies) * span, e.io, e.y, k, n, e.q8); }, 20);
    printf("| %-12s | %-4s | %4d | %5d | %5d | %2d | %2d%s | %8.1f | %6.1f |\n", name, T == T_Q4_K ? "q4_k" : "q6_k", rows, k, n, MR,
        splits, picked ? "*" : " ", us, 2.0 * rows * n * k / us / 1e6);
    if (picked && e.out) {
        // the picked launch once more on the pool's first copy: its output
        k_mmt<T, MR><<<g, MT_THREADS, st>>>(e.pool, e.io, e.y, k, n, e.q8);
        std::vector<float> h((size_t)rows * n);
        CK(cudaMemcpy(h.data(), e.y, h.size() * 4, cudaMemcpyDeviceToHost));
        fwrite(h.data(), 4, h.size(), e.out);
    }
}

template <int T> static void shape(const Env& e, const char* name, int rows, int k, int n, bool sweep) {
    u32 tio[16] = {(u32)rows};
    CK(cudaMemcpy(e.io, tio, sizeof tio, cudaMemcpyHostToDevice));
    const int kbs = k / 256, warps = std::min(std::max(kbs, 1), 8);
    k_stage<T><<<dim3(rows, (kbs + warps - 1) / warps), 32 * warps>>>(e.x, e.io, k, e.q8);
    CK(cudaDeviceSynchronize());
    // launch.go's tile: 16 rows up to 32 (64 where k < 4096), 32 up to 64, else 64
    const int mr = rows <= 32 || (rows <= 64 && k < 4096) ? 16 : rows <= 64 ? 32 : 64;
    const int tiles = (rows + mr - 1) / mr * ((n + MT_N - 1) / MT_N);
    if (mr == 16) one<T, 16>(e, name, rows, k, n, splits_for(tiles, kbs, per_sm(mt_smem<T, 16>(), 16)), true);
    if (mr == 32) one<T, 32>(e, name, rows, k, n, splits_for(tiles, kbs, per_sm(mt_smem<T, 32>(), 32)), true);
    if (mr == 64) one<T, 64>(e, name, rows, k, n, splits_for(tiles, kbs, per_sm(mt_smem<T, 64>(), 64)), true);
    if (!sweep || mr != 64) return;
    for (int s : {1, 2, 3, 4, 6, 8}) one<T, 64>(e, name, rows, k, n, s, false);
    for (int s : {1, 2, 4}) one<T, 32>(e, name, rows, k, n, s, false);
    for (int s : {1, 2}) one<T, 16>(e, name, rows, k, n, s, false);
}

int main(int argc, char** argv) {
    const bool sweep = argc > 2;
    Env e;
    e.pool_size = (size_t)1 << 30;
    CK(cudaMalloc(&e.pool, e.pool_size));
    k_fill<<<1024, 256>>>((u32*)e.pool, e.pool_size / 4, 1);
    const int K = 11008, R = 1024;
    CK(cudaMalloc(&e.x, (size_t)R * K * 4));
    k_xfill<<<1024, 256>>>(e.x, (size_t)R * K);
    CK(cudaMalloc(&e.y, (size_t)R * 22016 * 4));
    CK(cudaMalloc(&e.io, 64));
    // the counters, the records of R rows, and the partial tiles of up to
    // MT_COUNTERS tiles of 64 rows split 8 ways
    const size_t q8n = 4 * MT_COUNTERS + (size_t)R * (K / 256) * MT_REC + (size_t)MT_COUNTERS * 8 * 64 * MT_N * 4;
    CK(cudaMalloc(&e.q8, q8n));
    CK(cudaMemset(e.q8, 0, q8n));
    e.out = argc > 1 ? fopen(argv[1], "wb") : nullptr;
    printf("| %-12s | type | rows | k | n | MR | splits | us | TOPS |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n", "product");
    for (int rows : {512, 1024}) {
        shape<T_Q4_K>(e, "q06 qkv", rows, 1024, 4096, sweep);
        shape<T_Q4_K>(e, "q06 q+k", rows, 1024, 3072, sweep);
        shape<T_Q4_K>(e, "q06 kv", rows, 1024, 1024, sweep);
        shape<T_Q6_K>(e, "q06 v", rows, 1024, 1024, sweep);
        shape<T_Q4_K>(e, "q06 o", rows, 2048, 1024, sweep);
        shape<T_Q4_K>(e, "q06 gate+up", rows, 1024, 6144, sweep);
        shape<T_Q4_K>(e, "q06 down", rows, 3072, 1024, sweep);
        shape<T_Q6_K>(e, "q06 down", rows, 3072, 1024, sweep);
        shape<T_Q4_K>(e, "7b q,o", rows, 4096, 4096, sweep);
        shape<T_Q6_K>(e, "7b v", rows, 4096, 4096, sweep);
        shape<T_Q4_K>(e, "7b gate+up", rows, 4096, 22016, sweep);
        shape<T_Q6_K>(e, "7b down", rows, 11008, 4096, sweep);
    }
    // decode steps and a partial last tile: every tile's code, for the
    // bit-for-bit comparison
    for (int rows : {9, 16, 40, 100}) {
        shape<T_Q4_K>(e, "q06 o", rows, 2048, 1024, false);
        shape<T_Q6_K>(e, "q06 v", rows, 1024, 1024, false);
        shape<T_Q4_K>(e, "7b q,o", rows, 4096, 4096, false);
        shape<T_Q6_K>(e, "7b v", rows, 4096, 4096, false);
    }
    if (e.out) fclose(e.out);
    return 0;
}
