/*
 * t5_weights.h: moving T5 parameters between checkpoints and the ZeroEngine.
 *
 *   load:  a HF safetensors checkpoint (file, directory or sharded index, found by model_lookup) ->
 *          the engine's fp32 master, then working := round(master). Every table tensor must be present
 *          with its HF shape (converted from F32/F16/BF16); unknown tensors are errors naming the tensor
 *          and the file. Accepted and ignored: encoder.embed_tokens.weight / decoder.embed_tokens.weight
 *          (HF aliases of shared.weight; used instead of shared.weight only if that is missing),
 *          lm_head.weight when the model is tied (transformers ties it to shared and ignores the stored copy;
 *          a differing copy gets a warning), and decoder.block.0.layer.1.EncDecAttention.relative_attention_bias
 *          (HF ignores it).
 *   init:  random initialisation exactly per HF T5PreTrainedModel._init_weights (factor 1.0): shared and
 *          lm_head ~ N(0, 1); q ~ N(0, (D*Dk)^-1/2); k, v ~ N(0, D^-1/2); o ~ N(0, (H*Dk)^-1/2);
 *          wi, wi_0, wi_1 ~ N(0, D^-1/2); wo ~ N(0, F^-1/2); relative_attention_bias ~ N(0, D^-1/2);
 *          layer norms = 1. Seeded: each tensor has its own stream (splitmix64 of seed and the tensor's table
 *          index, Box-Muller), so the values do not depend on the order tensors are visited.
 *   save:  safetensors (model.safetensors, sharded above max_shard_bytes) + config.json, HF names, in
 *          `dtype` (fp32 master rounded), loadable by transformers' from_pretrained.
 * All return 0, or -1 with a one-line message in err.
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/dtype.h"
#include "zero.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

int t5_weights_load(ZeroEngine* Z, const ParamTable* t, const char* weights_path, cudaStream_t stream, char* err,
                    size_t errlen);
int t5_weights_init_random(ZeroEngine* Z, const ParamTable* t, uint64_t seed, cudaStream_t stream, char* err,
                           size_t errlen);
int t5_weights_save(ZeroEngine* Z, const ParamTable* t, const char* dir, DType dtype, size_t max_shard_bytes,
                    cudaStream_t stream, char* err, size_t errlen);

// Host copy of one tensor of the fp32 master (numel floats into dst). For tests and tools.
void t5_weights_get_master(ZeroEngine* Z, const ParamTable* t, int pidx, float* dst);

#ifdef __cplusplus
}
#endif
