/*
 * cross_entropy.cuh: fused softmax cross-entropy over the vocabulary, HF semantics
 * (CrossEntropyLoss(ignore_index=-100), mean over the non-ignored tokens).
 *   logits (N,V) X, labels (N) int32 (-100 = ignored). Math in fp32, logits read once per pass.
 *   losses (N) fp32 = per-token loss (0 for ignored rows);
 *   loss (1) fp32 = sum(losses) / count(labels != -100)  (deterministic reduction; count 0 -> loss 0)
 *   dlogits (N,V) X = grad_scale * (softmax(logits) - onehot(label)) / count  (0 rows for ignored tokens);
 *     dlogits may alias logits (in place); NULL skips the backward (eval).
 *   grad_scale multiplies the gradient (the fp16 loss scale); the loss itself is unscaled.
 * cross_entropy_smoothed_forward_backward: the same with the Trainer's LabelSmoother (label_smoothing e in
 * [0, 1)): per token (1-e) * nll + e * mean_k(-log p_k) (mean over the V logits), averaged over the counted
 * tokens like the nll; dlogits = grad_scale * (softmax - (1-e) onehot(label) - e/V) / count. e = 0 is
 * cross_entropy_forward_backward bit for bit.
 * All outputs stay on the device: no host synchronisation.
 * scratch: cross_entropy_scratch_bytes(N) bytes.
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>

#include "../src/base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t cross_entropy_scratch_bytes(int N);
void cross_entropy_forward_backward(float* loss, float* losses, void* dlogits, const void* logits, DType dt,
                                    const int* labels, int N, int V, float grad_scale, void* scratch,
                                    cudaStream_t stream);
void cross_entropy_smoothed_forward_backward(float* loss, float* losses, void* dlogits, const void* logits, DType dt,
                                             const int* labels, int N, int V, float grad_scale, float label_smoothing,
                                             void* scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
