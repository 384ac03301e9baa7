// flash_attn.cuh: T-CUDA's kernel family flash_attn (its body is fa.cuh's,
// or faq.cuh's for a quantized cache).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"
#include "../fa.cuh"
#ifdef KV_K
#include "../faq.cuh" // a quantized cache's instance (kv.cuh's KV_QUANT)
#endif

// The tensor-core prefill tile's constants and fragments (flash_attn_tile,
// below).
#define FAT_WARPS 4
#define FAT_NONE 0x7fffffff // no slot
#define FAT_ROWS (16 * FAT_WARPS) // rows a block; fatRows in launch.go

__device__ __forceinline__ void mma_f16(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 h2_bits(__half2 h) { return *(u32*)&h; }

__device__ __forceinline__ u32 pack_f16(float lo, float hi) { return h2_bits(__floats2half2_rn(lo, hi)); }

// ldsm4 loads four 8×8 matrices of halves from shared memory, lane L
// giving the address of row L%8 of matrix L/8 (trans: transposed), as
// mma's B fragments.
__device__ __forceinline__ void ldsm4(u32* r, const __half* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(u32* r, const __half* p) {
    u32 a = (u32)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// fa1_run is the decode entries' body: faq.cuh's for a quantized cache's
// instance, else fa.cuh's, with softcap 0, window 0 and no sinks.
__device__ __forceinline__ void fa1_run(const float* q, const u8* kv, const u32* io, float* y, u32 layer, u32 n_layer,
    u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u8* stg) {
#ifdef KV_K
    faq_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, stg);
#else
    fa_run(q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, stg);
#endif
}

extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) NAME(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    fa1_run(q, kv, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale_bits, nullptr);
}

// flash_attn_split is the main kernel with a long row's keys split over
// gridDim.z blocks (fa.cuh's flash decoding across blocks), their partial
// states in the staging buffer stg: launch.go's EntrySplit, for decode
// steps of few blocks.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _split)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits, u8* stg) {
    fa1_run(q, kv, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale_bits, stg);
}

// flash_attn_rest is the main kernel for the rows that are no prompt's
// (ROW_PROMPT clear: decode rows a serving step mixes into a prefill),
// launched beside flash_attn_tile (launch.go's Launch.Rest), which takes
// the prompt rows: its warps of 16 rows take a pass over the keys per
// slot among them, sixteen passes for sixteen decode rows.
extern "C" __global__ void __launch_bounds__(32 * FA_MAX_WARPS) CAT(NAME, _rest)(const float* q, const u8* kv, const u32* io, float* y,
    u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    int row = blockIdx.y;
    if (row < (int)io[IO_ROWS] && (io_row(io, row, ROW_FLAGS) & ROW_PROMPT)) return; // the request table is not written during a replay
    fa1_run(q, kv, io, y, layer, n_layer, n_head, n_head_kv, head_dim, scale_bits, nullptr);
}

// The tensor-core prefill tile (flash_attn_tile, over either cache) in the
// FlashAttention-2 way: a block's FAT_WARPS warps, 16 query rows each,
// share tiles of FAT_KEYS keys (FAT_PAGES pages, each found in the slot's
// page table) in shared memory, copied there by the whole block with
// cp.async while the previous tile's products run. Each key is loaded once
// a block (each warp loaded every page for itself, and waited on it), and
// the online softmax's maxima, sums and rescaling of O run once per
// FAT_KEYS keys instead of once per page. A launch of few blocks (launch.go's
// fatSplit) gives each block FAT_SPLIT times the warps: warp w + FAT_WARPS
// takes the same rows as warp w and the second half of every tile's keys,
// and the two softmax states are merged at the end (fat_merge), so that a
// step of few rows still has warps enough to keep the tensor cores busy.
#define FAT_KEYS 64
#define FAT_PAGES (FAT_KEYS / KV_PAGE_TOKENS)
#define FAT_SPLIT 2

// fat_smem is the tile's dynamic shared memory for heads of D: for an F16
// cache two buffers, each a K and a V tile of FAT_KEYS rows of D + 8
// halves (padded against bank conflicts); for a Q8_0 cache one F16 K and
// V tile, then one buffer of the pages' K and V rows as they are (D/32
// blocks of 34 bytes a row). launch.go's fatShared is the same.
__host__ __device__ constexpr int fat_smem(int D, bool quant) {
    return quant ? 2 * FAT_KEYS * (D + 8) * 2 + 2 * FAT_KEYS * (D / 32 * 34) : 2 * 2 * FAT_KEYS * (D + 8) * 2;
}

// fat_cp copies N (4, 8 or 16) bytes from global src to shared dst
// asynchronously (cp.async), or stores N zeros where ok is false (src
// must still be a valid address). fat_commit closes a group of copies;
// fat_wait0 waits for all of the thread's.
template <int N> __device__ __forceinline__ void fat_cp(void* dst, const void* src, bool ok) {
    if constexpr (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src),
                     "r"(ok ? 16 : 0)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src),
                     "n"(N), "r"(ok ? N : 0)
                     : "memory");
}
__device__ __forceinline__ void fat_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void fat_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// fat_pass finds the block's next pass over the keys: the least slot
// past done among the block's rows (each lane's two: slot, pos; FAT_NONE
// where the row is not the tile's), FAT_NONE when none is left; hi, the
// last position that slot's rows in the block see, and whi the same for
// the warp's rows (-1: none of them in the pass). The block's NW warps
// agree on the pass through red (2·NW ints of shared memory): every thread
// calls it. Its barriers also order each pass's use of the tiles after
// the previous pass's.
template <int NW>
__device__ __forceinline__ int fat_pass(const int* slot, const int* pos, int done, int* red, int& hi, int& whi) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int s = FAT_NONE;
#pragma unroll
    for (int i = 0; i < 2; i++)
        if (slot[i] > done) s = min(s, slot[i]);
    for (int o2 = 16; o2 > 0; o2 >>= 1) s = min(s, __shfl_xor_sync(0xffffffffu, s, o2));
    if (lane == 0) red[w] = s;
    __syncthreads();
    s = red[0];
#pragma unroll
    for (int i = 1; i < NW; i++) s = min(s, red[i]);
    if (s == FAT_NONE) return s; // the whole block's answer
    int x = -1;
#pragma unroll
    for (int i = 0; i < 2; i++)
        if (slot[i] == s) x = max(x, pos[i]);
    for (int o2 = 16; o2 > 0; o2 >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o2));
    whi = x;
    if (lane == 0) red[NW + w] = x;
    __syncthreads();
    hi = red[NW];
#pragma unroll
    for (int i = 1; i < NW; i++) hi = max(hi, red[NW + i]);
    return s;
}

// fat_keys runs the warp's 16 rows (their query as A fragments, qf) over
// NK keys t0… of a K and a V tile in shared memory (rows of D + 8 halves,
// kt and vt the keys' first): S = Q·Kᵀ with mma.m16n8k16 (Q and K in F16, S in F32),
// scaled by sl2 (the softmax scale times log2 e: the exponentials are
// exp2's) and masked (a row sees the keys up to its position, and only in
// its slot s's pass), then the online softmax's maximum m (log2 units)
// and sum l of each of the lane's two rows, and O += P·V with P rounded
// to F16 — flash attention as ggml's CUDA kernels do it, which differs
// from the F32 oracle by those two roundings. Element e of S's key block
// nb is row g + 8(e>>1), key t0 + 8nb + 2t + (e&1).
template <int D, int NK>
__device__ __forceinline__ void fat_keys(const __half* kt, const __half* vt, u32 (*qf)[4], float (*o)[4], float* m, float* l,
    int t0, int s, const int* slot, const int* pos, float sl2) {
    constexpr int KS = D / 16, NB = D / 8, RS = D + 8, KB = NK / 8;
    const int lane = threadIdx.x & 31, t = lane & 3;
    float sc[KB][4];
#pragma unroll
    for (int nb = 0; nb < KB; nb++) sc[nb][0] = sc[nb][1] = sc[nb][2] = sc[nb][3] = 0.f;
#pragma unroll
    for (int nb = 0; nb < KB; nb++)
#pragma unroll
        for (int ks = 0; ks < KS; ks += 2) {
            u32 b[4]; // keys 8nb.., dimensions 16ks.. in four 8-wide pieces
            ldsm4(b, kt + (8 * nb + (lane & 7)) * RS + 16 * ks + 8 * (lane >> 3));
            mma_f16(sc[nb], qf[ks], b[0], b[1]);
            mma_f16(sc[nb], qf[ks + 1], b[2], b[3]);
        }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < KB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int i = e >> 1, key = t0 + 8 * nb + 2 * t + (e & 1);
            const bool ok = slot[i] == s && key <= pos[i];
            sc[nb][e] = ok ? sc[nb][e] * sl2 : -INFINITY;
            mx[i] = fmaxf(mx[i], sc[nb][e]);
        }
    float alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float mn = fmaxf(m[i], mx[i]);
        alpha[i] = mn == -INFINITY ? 1.f : exp2f(m[i] - mn);
        m[i] = mn;
    }
#pragma unroll
    for (int nb = 0; nb < KB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int i = e >> 1;
            sc[nb][e] = sc[nb][e] == -INFINITY ? 0.f : exp2f(sc[nb][e] - m[i]);
            sum[i] += sc[nb][e];
        }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
        l[i] = l[i] * alpha[i] + sum[i];
    }
#pragma unroll
    for (int nb = 0; nb < NB; nb++) o[nb][0] *= alpha[0], o[nb][1] *= alpha[0], o[nb][2] *= alpha[1], o[nb][3] *= alpha[1];
#pragma unroll
    for (int kc = 0; kc < NK / 16; kc++) {
        // P of keys 16kc.. as the A fragment of P·V: keys 2t.. of S's
        // block 2kc, then of block 2kc+1.
        u32 pa[4] = {pack_f16(sc[2 * kc][0], sc[2 * kc][1]), pack_f16(sc[2 * kc][2], sc[2 * kc][3]),
            pack_f16(sc[2 * kc + 1][0], sc[2 * kc + 1][1]), pack_f16(sc[2 * kc + 1][2], sc[2 * kc + 1][3])};
        // V's B fragments, two 8-wide column blocks at a time: keys
        // 16kc..+7 and 16kc+8..+15 of each, transposed.
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
            u32 b[4];
            ldsm4t(b, vt + (16 * kc + 8 * ((lane >> 3) & 1) + (lane & 7)) * RS + 8 * (nb + (lane >> 4)));
            mma_f16(o[nb], pa, b[0], b[1]);
            mma_f16(o[nb + 1], pa, b[2], b[3]);
        }
    }
}

// fat_pages reads tile n's page numbers from the slot's page table ptab
// into pg: those of the pages whose first key is at most hi (the others,
// past the slot's last page, are not read: 0).
__device__ __forceinline__ void fat_pages(u32* pg, const u32* ptab, int n, int hi) {
#pragma unroll
    for (int j = 0; j < FAT_PAGES; j++) {
        const int p = n * FAT_PAGES + j;
        pg[j] = p * KV_PAGE_TOKENS <= hi ? ptab[p] : 0u;
    }
}

// fat_merge merges the softmax states of a split block's two warps of
// the same rows into the first's (warps FAT_WARPS… hand theirs over):
// each weighs exp2(its maximum − the larger). ms is shared memory for
// FAT_WARPS states, [4·NB + 4][32] floats each (a lane's O, maxima and
// sums, lane-minor against bank conflicts): the tiles', once every warp
// is done with them. Every thread calls it.
template <int NB>
__device__ __forceinline__ void fat_merge(float (*o)[4], float* m, float* l, float* ms) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float* b = ms + (size_t)(w % FAT_WARPS) * (4 * NB + 4) * 32 + lane;
    if (w >= FAT_WARPS) {
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 4; e++) b[(4 * nb + e) * 32] = o[nb][e];
#pragma unroll
        for (int i = 0; i < 2; i++) b[(4 * NB + i) * 32] = m[i], b[(4 * NB + 2 + i) * 32] = l[i];
    }
    __syncthreads();
    if (w >= FAT_WARPS) return;
    float a0[2], a1[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float m1 = b[(4 * NB + i) * 32], l1 = b[(4 * NB + 2 + i) * 32], mn = fmaxf(m[i], m1);
        a0[i] = mn == -INFINITY ? 0.f : exp2f(m[i] - mn);
        a1[i] = mn == -INFINITY ? 0.f : exp2f(m1 - mn);
        l[i] = l[i] * a0[i] + l1 * a1[i];
        m[i] = mn;
    }
#pragma unroll
    for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[nb][e] = o[nb][e] * a0[e >> 1] + b[(4 * nb + e) * 32] * a1[e >> 1];
}

// fat_rows finds the lane's two rows of its warp's 16 (the A and C
// fragments' rows row0+g and row0+g+8): whether each is live (a prompt
// row; the others are NAME_rest's), its position (−1 if not) and slot
// (FAT_NONE if not).
__device__ __forceinline__ void fat_rows(const u32* io, int row0, int* r, bool* live, int* pos, int* slot) {
    const int g = (threadIdx.x & 31) >> 2, rows = io[IO_ROWS];
    r[0] = row0 + g, r[1] = row0 + g + 8;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        live[i] = r[i] < rows && (io_row(io, r[i], ROW_FLAGS) & ROW_PROMPT);
        pos[i] = live[i] ? (int)io_row(io, r[i], ROW_POS) : -1;
        slot[i] = live[i] ? (int)io_row(io, r[i], ROW_SLOT) : FAT_NONE;
    }
}

#ifdef KV_K
// q8_deq8 is values o … o+7 of the Q8_0 block at blk (o a multiple of
// 8) as eight halves: each quant times the block's scale
// (dequantize_row_q8_0), rounded to F16 for the tensor cores.
__device__ __forceinline__ uint4 q8_deq8(const u8* blk, int o) {
    float d = __half2float(__ushort_as_half(*(const unsigned short*)blk));
    const unsigned short* qs = (const unsigned short*)(blk + 2 + o);
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        unsigned short b = qs[j];
        w[j] = pack_f16((float)(signed char)(b & 0xff) * d, (float)(signed char)(b >> 8) * d);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

#ifdef KV_FP8
// kvq_deq8 is values col … col+7 of a head's FP8 row (col a multiple of
// 8) as eight halves: each code decoded times its block's scale in F32
// (quant.DequantizeFP8Row's values), rounded to F16 for the tensor cores.
__device__ __forceinline__ uint4 kvq_deq8(const u8* row, int col) {
    const u8* blk = row + (col / 64) * KVQ_BB;
    const float d = *(const float*)blk;
    const u32* cs = (const u32*)(blk + 4 + col % 64); // 4-byte aligned: blocks are 68 bytes, col % 8 == 0
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const u32 c = cs[j / 2] >> (16 * (j % 2));
        w[j] = pack_f16(__fmul_rn(e4m3_f32(c), d), __fmul_rn(e4m3_f32(c >> 8), d));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
#else
// kvq_deq8 is values col … col+7 of a head's Q8_0 row (q8_deq8).
__device__ __forceinline__ uint4 kvq_deq8(const u8* row, int col) { return q8_deq8(row + (col / 32) * Q8_BYTES, col % 32); }
#endif

// fatq_block is fat_block (the F16 instance's tile, below) over a Q8_0
// cache: each warp's 16 query rows are staged in F32 (fs, the F16 tiles'
// memory before the keys), each lane's fragment values rotated by K's
// runs (T-CPU's arithmetic) and rounded to F16. A tile's K and V rows
// are copied as they are (cp.async, into one buffer past the F16 tiles),
// then dequantized by the block into the F16 K and V tiles, and the
// next tile's rows are copied while the warps multiply. The outputs,
// normalized, are staged again and rotated back by V's runs. The scores
// and values are the F16 tile's (Q, P and the dequantized K and V rounded
// to F16 for mma, sums in F32), so it agrees with T-CPU's q8_0 attention
// as the F16 tile with T-CPU's F16 one, to a few 1e-3. SPLIT is the
// block's warps of the same rows (fat_block).
template <int D, int SPLIT>
__device__ __forceinline__ void fatq_block(const float* q, const u8* kv, const u32* io, float* y, int row0, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, float scale, int h, __half* sm, int* red) {
    constexpr int KS = D / 16, NB = D / 8, RS = D + 8, TILE = FAT_KEYS * RS, FS = D + 1; // FS: a staged row's stride in floats, against bank conflicts
    constexpr int NW = FAT_WARPS * SPLIT, NT = 32 * NW, NK = FAT_KEYS / SPLIT; // warps, threads, a warp's keys of a tile
    // A head's row is D/32 blocks of 34 bytes, which start 8-byte aligned
    // for heads of 128 (rows of 136 bytes) and 4-byte aligned for 64:
    // copied CP bytes at a time, CPR copies a row.
    constexpr int QRB = D / KVQ_BS * KVQ_BB, CP = D % 128 == 0 ? 8 : 4, CPR = QRB / CP;
    static_assert(fat_smem(D, true) == 2 * TILE * 2 + 2 * FAT_KEYS * QRB, "fat_smem");
    static_assert(4 * 16 * FS * FAT_WARPS <= 2 * TILE * 2, "the queries' staging fits the F16 tiles");
    static_assert(4 * FAT_WARPS * (4 * NB + 4) * 32 <= 2 * TILE * 2, "fat_merge's states fit the F16 tiles");
    static_assert(FAT_KEYS * (D / 8) % NT == 0, "a tile's dequantization splits evenly over the block");
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, w = tid >> 5, rw = w % FAT_WARPS;
    __half* kt = sm;
    __half* vt = sm + TILE;
    u8* raw = (u8*)(sm + 2 * TILE); // [K, V][FAT_KEYS][QRB]
    float* fs = (float*)sm + rw * 16 * FS; // the warp's 16 staged rows
    const int rows = io[IO_ROWS], wr0 = row0 + 16 * rw, koff = (w / FAT_WARPS) * NK; // the warp's first key of a tile
    int r[2], pos[2], slot[2];
    bool live[2];
    fat_rows(io, wr0, r, live, pos, slot);
    if (w < FAT_WARPS)
        for (int c = lane; c < 16 * D; c += 32) {
            const int rr = c / D, col = c % D, ri = wr0 + rr;
            const bool ok = ri < rows && (io_row(io, ri, ROW_FLAGS) & ROW_PROMPT);
            fs[rr * FS + col] = ok ? q[((size_t)ri * n_head + h) * D + col] : 0.f;
        }
    if (SPLIT > 1) __syncthreads(); // the rows are the first warp's
    else __syncwarp();
    const float hk = KV_RK > 0 ? hadamard_scale(KV_RK) : 0.f;
    auto qv = [&](int rr, int col) -> float {
        const float* x = fs + rr * FS;
        return KV_RK > 0 ? hadamard_out(x + col / kvq_run(0) * kvq_run(0), col % kvq_run(0), KV_RK, hk) : x[col];
    };
    u32 qf[KS][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            const int c0 = 16 * ks + 2 * t;
            qf[ks][i] = pack_f16(qv(g + 8 * i, c0), qv(g + 8 * i, c0 + 1));
            qf[ks][2 + i] = pack_f16(qv(g + 8 * i, c0 + 8), qv(g + 8 * i, c0 + 9));
        }
    // fs is the F16 tiles' memory from here on: fat_pass's barrier comes
    // before the first tile is written.
    const u32 kv_dim = n_head_kv * D;
    const size_t rb = kvq_row_bytes(kv_dim), page_bytes = kvq_page_bytes(n_layer, kv_dim);
    const size_t head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * rb + (size_t)(h / (n_head / n_head_kv)) * QRB;
    const size_t vofs = (size_t)KV_PAGE_TOKENS * rb;
    const u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    const float sl2 = scale * 1.4426950408889634f; // log2 e
    float o[NB][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
    for (int done = -1;;) {
        int hi = -1, whi = -1;
        const int s = fat_pass<NW>(slot, pos, done, red, hi, whi);
        if (s == FAT_NONE) break;
        const u32* ptab = io + pt + (size_t)s * mp;
        const int nt = hi / FAT_KEYS + 1;
        u32 pg[FAT_PAGES];
        // issue copies tile n's K and V rows (pages pg) into raw, zeros
        // for rows past hi: stale blocks (a NaN scale included) would reach
        // the output through V, where a zero P does not cancel them, and
        // zero blocks dequantize to zeros.
        auto issue = [&](int n) {
#pragma unroll
            for (int j = 0; j < FAT_PAGES; j++) {
                const u8* kp = kv + (size_t)pg[j] * page_bytes + head_ofs;
                for (int c = tid; c < KV_PAGE_TOKENS * CPR; c += NT) {
                    const int kr = c / CPR, off = (c % CPR) * CP;
                    const bool ok = n * FAT_KEYS + KV_PAGE_TOKENS * j + kr <= hi;
                    const u8* src = kp + (size_t)kr * rb + off;
                    u8* dst = raw + (KV_PAGE_TOKENS * j + kr) * QRB + off;
                    fat_cp<CP>(dst, ok ? src : kv, ok);
                    fat_cp<CP>(dst + FAT_KEYS * QRB, ok ? src + vofs : kv, ok);
                }
            }
            fat_commit();
        };
        fat_pages(pg, ptab, 0, hi);
        issue(0);
        if (nt > 1) fat_pages(pg, ptab, 1, hi);
        for (int n = 0; n < nt; n++) {
            fat_wait0();
            __syncthreads(); // tile n's rows are in raw; every warp is done with tile n-1
            // The rows dequantized into the F16 tiles, eight values a
            // thread at a time.
#pragma unroll
            for (int u = 0; u < FAT_KEYS * (D / 8) / NT; u++) {
                const int c = tid + NT * u, kr = c / (D / 8), col = (c % (D / 8)) * 8;
                const u8* rk = raw + kr * QRB;
                *(uint4*)(kt + kr * RS + col) = kvq_deq8(rk, col);
                *(uint4*)(vt + kr * RS + col) = kvq_deq8(rk + FAT_KEYS * QRB, col);
            }
            __syncthreads(); // the F16 tiles are whole; raw is free
            if (n + 1 < nt) {
                issue(n + 1);
                if (n + 2 < nt) fat_pages(pg, ptab, n + 2, hi);
            }
            if (n * FAT_KEYS + koff <= whi)
                fat_keys<D, NK>(kt + koff * RS, vt + koff * RS, qf, o, m, l, n * FAT_KEYS + koff, s, slot, pos, sl2);
        }
        done = s;
    }
    // The last fat_pass's barrier: every warp is done with the tiles.
    if constexpr (SPLIT > 1) {
        fat_merge<NB>(o, m, l, (float*)sm);
        __syncthreads(); // the states are read: fs is free
        if (w >= FAT_WARPS) return;
    }
    // The outputs, normalized, staged in fs and rotated back by V's runs.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float inv = l[i] != 0.f ? 1.f / l[i] : 0.f;
        float* fr = fs + (g + 8 * i) * FS;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) fr[8 * nb + 2 * t] = o[nb][2 * i] * inv, fr[8 * nb + 2 * t + 1] = o[nb][2 * i + 1] * inv;
    }
    __syncwarp();
    const float hv = hadamard_scale(kvq_run(1));
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!live[i]) continue;
        const float* fr = fs + (g + 8 * i) * FS;
        float* out = y + ((size_t)r[i] * n_head + h) * D;
        for (int c = t; c < D; c += 4)
            out[c] = KV_RV > 0 ? hadamard_out(fr + c / kvq_run(1) * kvq_run(1), c % kvq_run(1), kvq_run(1), hv) : fr[c];
    }
}

// flash_attn_tile over a Q8_0 cache: the F16 instance's grid and warps,
// in fat_smem(head_dim, true)'s dynamic shared memory.
extern "C" __global__ void __launch_bounds__(32 * FAT_WARPS * FAT_SPLIT) CAT(NAME, _tile)(const float* q, const u8* kv,
    const u32* io, float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    dep_sync();
    const int h = blockIdx.x, row0 = blockIdx.y * FAT_ROWS;
    if (row0 >= (int)io[IO_ROWS] || h >= (int)n_head || head_dim % kvq_run(0) != 0 || head_dim % kvq_run(1) != 0) return;
    extern __shared__ __align__(16) float fa_sm[];
    __shared__ int red[2 * FAT_WARPS * FAT_SPLIT];
    const float scale = __uint_as_float(scale_bits);
    __half* sm = (__half*)fa_sm;
    const bool split = blockDim.x == 32 * FAT_WARPS * FAT_SPLIT;
    if (head_dim == 64) {
        if (split) fatq_block<64, FAT_SPLIT>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
        else fatq_block<64, 1>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
    } else if (head_dim == 128) {
        if (split) fatq_block<128, FAT_SPLIT>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
        else fatq_block<128, 1>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
    }
}
#else
// flash_attn_lean is the main kernel for one query head a block, heads of at
// most 128 and blocks of at most FA_LEAN_WARPS warps, compiled for four
// such blocks a multiprocessor (64 registers a thread, where the main
// entry's every group and width take 128): launch.go picks it for decode
// steps of many blocks, which then keep twice the keys and values in
// flight.
#define FA_LEAN_WARPS 8
extern "C" __global__ void __launch_bounds__(32 * FA_LEAN_WARPS, 4) CAT(NAME, _lean)(const float* q, const u8* kv, const u32* io,
    float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    extern __shared__ __align__(16) float fa_sm[];
    fa_block<1, 2>(fa_sm, q, kv, nullptr, io, y, layer, n_layer, n_head, n_head_kv, head_dim, __uint_as_float(scale_bits), 0.f, 0, nullptr);
}

// flash_attn_tile: prefill on tensor cores, for head widths 64 and 128
// (launch.go picks it for prefill variants of at least 64 rows). A block
// takes FAT_ROWS consecutive rows of one head, a warp 16 of them; grid
// (heads, rows/FAT_ROWS), FAT_WARPS warps a block (FAT_SPLIT times that
// for launches of few blocks: SPLIT warps take each 16 rows, a part of
// every tile's keys each), fat_smem(head_dim, false) bytes of dynamic
// shared memory. The block walks the keys in tiles of FAT_KEYS
// (fat_keys: S = Q·Kᵀ on tensor cores, the online softmax in F32, P·V
// with P rounded to F16), each tile copied by the whole block into one of
// two buffers while the warps multiply the other's. It takes the prompt
// rows (ROW_PROMPT); the step's others are flash_attn_rest's. Rows of the
// block that belong to different slots (a step's prompts meet there) take
// one pass over the keys per slot, which the block agrees on (fat_pass); a
// row outside the pass's slot sees all its scores masked and keeps its
// state, and a warp with no row that sees its keys of a tile skips its
// products.
template <int D, int SPLIT>
__device__ __forceinline__ void fat_block(const float* q, const u8* kv, const u32* io, float* y, int row0, u32 layer,
    u32 n_layer, u32 n_head, u32 n_head_kv, float scale, int h, __half* sm, int* red) {
    constexpr int KS = D / 16, NB = D / 8, RS = D + 8, TILE = FAT_KEYS * RS; // RS: a tile row's stride in halves
    constexpr int NW = FAT_WARPS * SPLIT, NT = 32 * NW, NK = FAT_KEYS / SPLIT; // warps, threads, a warp's keys of a tile
    constexpr int CPR = D / 8; // 16-byte copies a row
    static_assert(fat_smem(D, false) == 2 * 2 * TILE * 2, "fat_smem");
    static_assert(4 * FAT_WARPS * (4 * NB + 4) * 32 <= 2 * 2 * TILE * 2, "fat_merge's states fit the tiles");
    const int tid = threadIdx.x, lane = tid & 31, t = lane & 3, w = tid >> 5;
    const int rows = io[IO_ROWS], wr0 = row0 + 16 * (w % FAT_WARPS), koff = (w / FAT_WARPS) * NK; // the warp's first key of a tile
    int r[2], pos[2], slot[2];
    bool live[2];
    fat_rows(io, wr0, r, live, pos, slot);
    u32 qf[KS][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float* qr = q + ((size_t)min(r[i], rows - 1) * n_head + h) * D;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            float2 a = live[i] ? *(const float2*)(qr + 16 * ks + 2 * t) : make_float2(0.f, 0.f);
            float2 b = live[i] ? *(const float2*)(qr + 16 * ks + 2 * t + 8) : make_float2(0.f, 0.f);
            qf[ks][i] = pack_f16(a.x, a.y), qf[ks][2 + i] = pack_f16(b.x, b.y);
        }
    }
    const u32 kv_dim = n_head_kv * D;
    const size_t page_bytes = (size_t)n_layer * 2 * KV_PAGE_TOKENS * kv_dim * 2;
    const size_t head_ofs = (size_t)(layer * 2) * KV_PAGE_TOKENS * kv_dim + (size_t)(h / (n_head / n_head_kv)) * D;
    const size_t vofs = (size_t)KV_PAGE_TOKENS * kv_dim;
    const u32 pt = io[IO_PAGE_TABLE], mp = io[IO_MAX_PAGES];
    const float sl2 = scale * 1.4426950408889634f; // log2 e
    float o[NB][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int nb = 0; nb < NB; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
    for (int done = -1;;) {
        int hi = -1, whi = -1;
        const int s = fat_pass<NW>(slot, pos, done, red, hi, whi);
        if (s == FAT_NONE) break;
        const u32* ptab = io + pt + (size_t)s * mp;
        const int nt = hi / FAT_KEYS + 1;
        u32 pg[FAT_PAGES];
        // issue copies tile n's K and V rows (pages pg) into buffer n&1,
        // 16 bytes a copy. Rows past hi are stored as 0: they may be
        // stale cache bytes, NaN included, which a zero P would not cancel
        // in V (stale K only makes scores that the mask replaces).
        auto issue = [&](int n) {
            __half* kt = sm + (n & 1) * 2 * TILE;
#pragma unroll
            for (int j = 0; j < FAT_PAGES; j++) {
                const __half* kp = (const __half*)(kv + (size_t)pg[j] * page_bytes) + head_ofs;
                for (int c = tid; c < KV_PAGE_TOKENS * CPR; c += NT) {
                    const int kr = c / CPR, col = (c % CPR) * 8;
                    const bool ok = n * FAT_KEYS + KV_PAGE_TOKENS * j + kr <= hi;
                    const __half* src = kp + (size_t)kr * kv_dim + col;
                    __half* dst = kt + (KV_PAGE_TOKENS * j + kr) * RS + col;
                    fat_cp<16>(dst, ok ? (const void*)src : (const void*)kv, ok);
                    fat_cp<16>(dst + TILE, ok ? (const void*)(src + vofs) : (const void*)kv, ok);
                }
            }
            fat_commit();
        };
        fat_pages(pg, ptab, 0, hi);
        issue(0);
        if (nt > 1) fat_pages(pg, ptab, 1, hi);
        for (int n = 0; n < nt; n++) {
            fat_wait0();
            __syncthreads(); // tile n is in its buffer; every warp is done with tile n-1's, the next one's
            if (n + 1 < nt) {
                issue(n + 1);
                if (n + 2 < nt) fat_pages(pg, ptab, n + 2, hi);
            }
            const __half* kt = sm + (n & 1) * 2 * TILE + koff * RS;
            if (n * FAT_KEYS + koff <= whi) fat_keys<D, NK>(kt, kt + TILE, qf, o, m, l, n * FAT_KEYS + koff, s, slot, pos, sl2);
        }
        done = s;
    }
    // The last fat_pass's barrier: every warp is done with the tiles.
    if constexpr (SPLIT > 1) {
        fat_merge<NB>(o, m, l, (float*)sm);
        if (w >= FAT_WARPS) return;
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!live[i]) continue;
        const float inv = l[i] != 0.f ? 1.f / l[i] : 0.f;
        float* out = y + ((size_t)r[i] * n_head + h) * D;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) *(float2*)(out + 8 * nb + 2 * t) = make_float2(o[nb][2 * i] * inv, o[nb][2 * i + 1] * inv);
    }
}

extern "C" __global__ void __launch_bounds__(32 * FAT_WARPS * FAT_SPLIT) CAT(NAME, _tile)(const float* q, const u8* kv,
    const u32* io, float* y, u32 layer, u32 n_layer, u32 n_head, u32 n_head_kv, u32 head_dim, u32 scale_bits) {
    dep_sync();
    const int h = blockIdx.x, row0 = blockIdx.y * FAT_ROWS;
    if (row0 >= (int)io[IO_ROWS] || h >= (int)n_head) return;
    extern __shared__ __align__(16) float fa_sm[];
    __shared__ int red[2 * FAT_WARPS * FAT_SPLIT];
    const float scale = __uint_as_float(scale_bits);
    __half* sm = (__half*)fa_sm;
    const bool split = blockDim.x == 32 * FAT_WARPS * FAT_SPLIT;
    if (head_dim == 64) {
        if (split) fat_block<64, FAT_SPLIT>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
        else fat_block<64, 1>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
    } else if (head_dim == 128) {
        if (split) fat_block<128, FAT_SPLIT>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
        else fat_block<128, 1>(q, kv, io, y, row0, layer, n_layer, n_head, n_head_kv, scale, h, sm, red);
    }
}
#endif
