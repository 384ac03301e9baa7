// logit_softcap.cuh: T-CUDA's kernel family logit_softcap: cap·tanh(l/cap) in
// each wanting row's slot; grid (rows, n_vocab/SOFTCAP_CHUNK).
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

// As the oracle (ggml's scale, tanh, scale): l·(1/cap) with 1/cap rounded
// to float, tanh in double rounded, times cap.
#define SOFTCAP_CHUNK 4096 // softcapChunk in launch.go
extern "C" __global__ void __launch_bounds__(256) NAME(float* logits, const u32* io, u32 n_vocab, u32 cap_bits) {
    dep_sync();
    int row = blockIdx.x;
    if (row >= (int)io[IO_ROWS] || !(io_row(io, row, ROW_FLAGS) & ROW_WANTS_LOGITS)) return;
    float c = __uint_as_float(cap_bits), inv = 1.f / c;
    float* l = logits + (size_t)io_row(io, row, ROW_SLOT) * n_vocab;
    int end = min((int)n_vocab, (int)(blockIdx.y + 1) * SOFTCAP_CHUNK);
    for (int j = blockIdx.y * SOFTCAP_CHUNK + threadIdx.x; j < end; j += blockDim.x)
        l[j] = (float)tanh((double)(l[j] * inv)) * c;
}
