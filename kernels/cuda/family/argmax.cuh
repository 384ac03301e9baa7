// argmax.cuh: T-CUDA's kernel family argmax: tokens[slot] = first largest
// logit, rows that want logits; grid (rows), 1024 threads.
// An instance .cu (written by kernels/cuda/gen from the family table in
// families.go) defines FAMILY and NAME, then includes this file.
#include "../common.cuh"

#ifndef CAT
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#endif
