/*
 * embedding.cuh: token embedding lookup (T5 does not scale by sqrt(D)).
 *   forward:  out[n,:] (N,D) fp32 = table[ids[n], :]   table (V,D) dtype dt; ids (N) int32 in [0,V)
 *   backward: dtable (V,D) dt_dtable += for each n: dout[n,:]   (deterministic: rows of the same id are
 *             summed in index order in fp32, no float atomics, then added to the (fp32, fp16 or bf16)
 *             gradient row once)
 *   scratch:  embedding_backward_scratch_bytes(N) bytes of device memory.
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void embedding_forward(float* out, const int* ids, const void* table, DType dt, int N, int D, cudaStream_t stream);
size_t embedding_backward_scratch_bytes(int N);
void embedding_backward(void* dtable, DType dt_dtable, const float* dout, const int* ids, int N, int D, int V,
                        void* scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
