/*
 * flops.h: the real model FLOPs of a T5 training step (what the GEMMs do), behind the MFU the trainer logs,
 * and the dense 16-bit peak of known GPUs. Pure functions (no GPU).
 *
 * Forward FLOPs of one example with a source of S tokens and a target of T tokens (padded lengths: what runs),
 * D = d_model, I = num_heads * d_kv, F = d_ff, G = 2 for a gated FF (v1.1 / flan: wi_0, wi_1) else 1,
 * Le / Ld encoder / decoder layers, V = vocab_size; a GEMM of m x k by k x n counts 2 m k n:
 *   encoder layer   2 S D I * 4                  q, k, v, o projections
 *                 + 2 S S I * 2                  scores Q K^T and probabilities x V, every head
 *                 + 2 S D F * (G + 1)            wi (wi_0, wi_1) and wo
 *   decoder layer   2 T D I * 4 + 2 T T I * 2    self-attention (the full T x T the kernels compute; the causal
 *                                                mask does not halve it)
 *                 + 2 T D I * 2 + 2 S D I * 2    cross-attention q, o on the target; k, v on the encoder output
 *                 + 2 T S I * 2                  cross scores and values
 *                 + 2 T D F * (G + 1)            feed-forward
 *   lm_head         2 T D V
 * A training step is 3 x forward: the backward of every GEMM is two GEMMs of the same size (input and weight
 * gradients; the scores and values likewise). Not counted: embeddings (lookups), norms, softmax, activations,
 * dropout, loss (elementwise: a few percent at most of t5-small's total, less for larger models), and
 * recomputation (MFU counts the model's FLOPs, not the work a schedule repeats).
 * HF's total_flos is a different, cruder estimate (6 x source tokens x non-embedding parameters:
 * results_hf_floating_point_ops); both are logged, each under its own name.
 */
#pragma once
#include <stdint.h>

#include "../../model/t5_config.h"

#ifdef __cplusplus
extern "C" {
#endif

// Forward FLOPs of a batch of B examples (source length S, target length T), as above. 0 for a bad shape.
double flops_t5_forward(const T5Config* cfg, int64_t B, int64_t S, int64_t T);
// A training micro-batch: forward + backward = 3 x forward.
double flops_t5_train_step(const T5Config* cfg, int64_t B, int64_t S, int64_t T);

// Dense (no sparsity) peak FLOP/s of a GPU for 16-bit (bf16/fp16) tensor-core math, from its CUDA device name
// ("NVIDIA H100 80GB HBM3", "NVIDIA H200", ...): H100 SXM / H200 989e12, H100 NVL 835e12, H100 PCIe 756e12,
// A100 312e12 (NVIDIA's data sheets, halved where they quote sparsity). 0 when the name is not in the table.
double flops_device_peak_16bit(const char* device_name);
// The same GPUs' fp32 peak without tensor cores (the rate of fp32 runs without --tf32): H100 SXM / H200 67e12,
// H100 NVL 60e12, H100 PCIe 51e12, A100 19.5e12. 0 when the name is not in the table.
double flops_device_peak_fp32(const char* device_name);

#ifdef __cplusplus
}
#endif
