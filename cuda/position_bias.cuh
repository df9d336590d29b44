/*
 * position_bias.cuh: T5's bucketed relative position bias.
 *   forward:  bias[h,q,k] = table[bucket(k - (q + q_offset)), h]      bias (H,Tq,Tk) fp32,
 *             table (NB,H) dtype dt (relative_attention_bias.weight), buckets: device int32 array with
 *             bucket(rel) = buckets[rel + rel_offset] (computed on the host by model/relpos.c with HF's
 *             fp32 formula, uploaded once: the float log must not be re-derived on the device).
 *   backward: dtable (NB,H) dtype dt_dtable (fp32 or the run's 16-bit gradient dtype) = (or += when
 *             accumulate) the sum over (q,k) with that bucket of dbias[h,q,k], in fp32; deterministic.
 */
#pragma once
#include <cuda_runtime.h>

#include <stdbool.h>
#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void position_bias_forward(float* bias, const void* table, DType dt, const int* buckets, int rel_offset, int NB,
                           int H, int Tq, int Tk, int q_offset, cudaStream_t stream);
void position_bias_backward(void* dtable, DType dt_dtable, bool accumulate, const float* dbias, const int* buckets,
                            int rel_offset, int NB, int H, int Tq, int Tk, int q_offset, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
