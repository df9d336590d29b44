/*
 * attention_softmax.cuh: T5 attention probabilities (no 1/sqrt(Dk) scaling: T5 folds it into q's init).
 *   forward:  probs[b,h,q,k] = softmax_k( scores[b,h,q,k] + bias[h,q,k] + mask ) in fp32, stored as X;
 *             probs_drop = dropout(probs, p) (the tensor multiplied with V); may equal probs when p == 0.
 *     scores (B,H,Tq,Tk) fp32; bias (H,Tq,Tk) fp32 or NULL (shared over the batch);
 *     key_mask (B,Tk) int32, 1 = attend, 0 = padding, or NULL; causal: key k > query q + q_offset masked.
 *     Masked keys get probability 0; a fully masked row is uniform (HF adds finfo.min, never -inf).
 *   backward: dscores (B,H,Tq,Tk) X  =  softmax backward of dprobs_drop through the dropout mask;
 *             dbias (H,Tq,Tk) fp32 += sum over b of dscores (NULL to skip; deterministic, no atomics).
 * Dropout uses the counter-based RNG of dropout.cuh with (seed, offset): the backward regenerates the
 * same mask, element index = ((b*H + h)*Tq + q)*Tk + k.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void attention_softmax_forward(void* probs, void* probs_drop, DType dt, const float* scores, const float* bias,
                               const int* key_mask, bool causal, int q_offset, int B, int H, int Tq, int Tk,
                               float dropout_p, uint64_t seed, uint64_t offset, cudaStream_t stream);
void attention_softmax_backward(void* dscores, float* dbias, DType dt, const void* dprobs_drop, const void* probs,
                                int B, int H, int Tq, int Tk, float dropout_p, uint64_t seed, uint64_t offset,
                                cudaStream_t stream);

// Mixed dtypes (the model's path, no casts around the softmax): scores (B,H,Tq,Tk) dt_scores = fp32 or X; probs
// dt_probs = fp32 or X; probs_drop X = dt_drop (the P of P V: round_X(round_PX(softmax)) * dropout factor; written
// whenever probs_drop != probs, also with p == 0, which makes it the rounded copy). Backward: dprobs_drop and probs
// in dt_probs, dscores in X = dt_dscores (the fp32 gradient rounded once), dbias fp32 +=.
void attention_softmax_forward_ex(void* probs, DType dt_probs, void* probs_drop, DType dt_drop, const void* scores,
                                  DType dt_scores, const float* bias, const int* key_mask, bool causal, int q_offset,
                                  int B, int H, int Tq, int Tk, float dropout_p, uint64_t seed, uint64_t offset,
                                  cudaStream_t stream);
void attention_softmax_backward_ex(void* dscores, DType dt_dscores, float* dbias, const void* dprobs_drop,
                                   const void* probs, DType dt_probs, int B, int H, int Tq, int Tk, float dropout_p,
                                   uint64_t seed, uint64_t offset, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
