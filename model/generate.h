/*
 * generate.h: T5 generation on the GPU with a KV cache: greedy and beam search with the semantics of
 * transformers 5.x `model.generate` for T5 (docs/generate.md lists every rule matched).
 *
 * Per batch: the encoder runs once over the padded sources (B, Ts); every decoder block's cross-attention
 * K/V are computed once from the encoder output (B, H, Ts, Dk); then the decoder runs one position at a time
 * over R = B * num_beams rows with a self-attention K/V cache (R, H, Tmax, Dk) per block that grows by one
 * position per step (the position bias of the new query row uses q_offset). Numerics are those of
 * model/t5.c in eval mode (fp32 residual stream, X = the engine's working dtype, docs/numerics.md).
 *
 * Output (what HF generate returns): (B, out_len) token ids on the host, column 0 = decoder_start_token_id,
 * out_len = 1 + the longest generated sequence of the batch (<= max_length).
 *   greedy: after a row's `</s>` its positions hold pad (0);
 *   beam:   the best finished hypothesis per row, length-penalised score sum(logprobs) / len^length_penalty
 *           (len = generated tokens including `</s>`); positions after it hold HF's fill value
 *           (`pad_token_id or eos_token_id`, i.e. `</s>` = 1 when pad is 0).
 * Finished rows (greedy) and finished batch items (beam) stop costing compute: the batch is compacted to
 * the live rows (rounded up to a multiple of 8 rows, so that few GEMM shapes occur).
 * Each decoder step is replayed from a CUDA graph captured per step shape (t5_generator_set_cuda_graphs); the step
 * is fused (cuda/decode_fused.cuh: residual add + RMSNorm and each attention as one kernel); greedy search, and beam
 * search up to 8 beams (running beams chosen on the
 * device, finished hypotheses kept on the host a few steps behind), run without a host synchronisation per step.
 * Environment switches (read at t5_generator_create; outputs are HF's either way, fp32 bit-identical paths apart):
 * T5TRAIN_GEN_FUSED=0 (the unfused step), T5TRAIN_GEN_DEVICE_BEAM=0 (host beam bookkeeping with one synchronisation
 * per step), T5TRAIN_GEN_GRAPHS=0 (no CUDA graphs), T5TRAIN_GEN_GEMV=0 (cuBLASLt for every projection; default:
 * cuda/decode_gemv.cuh at <= 32 rows; =1: up to 8 rows, =3: up to 16), T5TRAIN_GEN_PDL=0 (no programmatic dependent launch,
 * cuda/pdl.cuh), T5TRAIN_GEN_ATTN=split|split1|wide|block|warp|bulk (decode_attention's kernel for every grid; per
 * sublayer T5TRAIN_GEN_ATTN_SELF / T5TRAIN_GEN_ATTN_CROSS), T5TRAIN_GEN_ATTN_LARGE=block|wide|warp (grids of >= 1024
 * (item, head) pairs where the split kernel does not apply), T5TRAIN_GEN_ATTN_BULK=0 (no BULK cross-attention in the
 * automatic choice). Defaults and measurements: docs/generate.md.
 *
 * Errors (bad options, a batch larger than the generator was created for, not enough GPU memory) are
 * returned as -1/NULL with a one-line message; nothing here exits on bad input.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../src/base/dtype.h"
#include "zero.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

// HF GenerationConfig.early_stopping: False (heuristic on the current length), True (stop a batch item once
// num_beams hypotheses are finished), "never" (canonical beam search: heuristic on max_length when
// length_penalty > 0).
typedef enum { GEN_EARLY_STOP_FALSE = 0, GEN_EARLY_STOP_TRUE = 1, GEN_EARLY_STOP_NEVER = 2 } GenEarlyStopping;

typedef struct {
    int max_length;            // total length including the decoder start token (HF max_length); >= 2
    int min_length;            // `</s>` is banned while the current length (start token included) < min_length
    int num_beams;             // 1 = greedy
    float length_penalty;      // beam: score = sum logprobs / len^length_penalty
    GenEarlyStopping early_stopping;
    int no_repeat_ngram_size;  // only 0 is supported (anything else is an error)
} GenerateOptions;

// HF defaults with run_translation's max length 128: greedy, length_penalty 1, early_stopping False.
void generate_options_default(GenerateOptions* o);
// Validates the options; 0, or -1 with a message naming the option.
int generate_options_check(const GenerateOptions* o, char* err, size_t errlen);

// Time and work counters, summed over every t5_generate call of a generator.
typedef struct {
    int64_t batches;           // t5_generate calls
    int64_t sequences;         // rows generated (B summed)
    int64_t steps;             // decoder steps
    int64_t decoder_rows;      // rows computed, summed over steps (after compaction)
    int64_t tokens;            // generated tokens returned (non-fill positions after column 0, up to </s>)
    double encoder_ms;         // encoder + cross K/V (GPU time, CUDA events)
    double decoder_ms;         // decoder steps incl. the top-k kernel (GPU time)
    double total_ms;           // wall time of t5_generate, host bookkeeping included
    int64_t graph_steps;       // decoder steps replayed from a captured CUDA graph
    int64_t graphs_captured;   // CUDA graphs captured (one per step shape: rows, source length, key bucket)
    int64_t agreements;        // lockstep: finished-checks agreed with the other ranks (t5_generator_set_lockstep)
} GenerateStats;

typedef struct T5Generator T5Generator;

// Bytes of GPU memory a generator for (max_B, max_Ts, opt) needs in `dtype` (KV caches, encoder and decoder
// activations, logits); *kv_bytes (may be NULL) gets the self- plus cross-attention KV cache part.
size_t t5_generator_bytes(const T5Config* cfg, DType dtype, int max_B, int max_Ts, const GenerateOptions* opt,
                          size_t* kv_bytes);

// Allocates everything for batches of up to max_B sources of up to max_Ts tokens. Fails (NULL + message with the
// numbers: the KV cache size, the total, the free GPU memory) when the memory does not fit: T5 has relative
// positions, so max_length is limited only by this.
T5Generator* t5_generator_create(const ParamTable* t, ZeroEngine* Z, int max_B, int max_Ts,
                                 const GenerateOptions* opt, char* err, size_t errlen);
void t5_generator_destroy(T5Generator* G);

// Generates for one batch: input_ids / attention_mask (B, Ts) row-major host int32 (mask NULL = all ones;
// every row needs at least one unmasked token). out (B, opt.max_length) host, written row-major with row
// stride opt.max_length; *out_len = the width HF returns. Returns 0, or -1 with err.
int t5_generate(T5Generator* G, const int32_t* input_ids, const int32_t* attention_mask, int B, int Ts, int32_t* out,
                int* out_len, cudaStream_t stream, char* err, size_t errlen);

// CUDA graphs for the decoder step (default on; the environment variable T5TRAIN_GEN_GRAPHS=0 turns them off at
// creation). Outputs are identical either way (the same kernels run).
void t5_generator_set_cuda_graphs(T5Generator* G, bool on);
// Greedy search reads the finished flags back exactly every few steps, never earlier because the copy happened to be
// done (default off): the number of decoder steps, so the engine fetches of a ZeRO-3 run gathering on demand, then
// depends on the batch alone, the same on every rank generating the same batch. Outputs are identical either way.
void t5_generator_set_fixed_checks(T5Generator* G, bool on);

// Several ranks generating their own batches in lockstep (ZeRO-3 gathering on demand: every fetch is a collective, so
// every rank must run the same decoder steps). At each finished-check (greedy: the fixed checks, every GEN_CHECK_LAG
// steps; beam search: every step the host processes) the generator calls agree(ctx, vote) with its vote:
//   0 every row of this rank's batch is finished, 1 some row is not, 2 some row is not and beam search waits for
//   its launched steps before compacting the batch (device beam search);
// agree must return the maximum of the votes over the ranks (a collective: every rank calls it at the same check).
// The generator stops when it is 0; while it is 2, no rank launches further steps (so the ranks' steps stay the same).
// A rank whose rows are all finished keeps stepping on (finished rows stay finished: its outputs do not change).
// Implies the fixed checks. agree NULL: off (the default).
typedef int (*T5GenAgreeFn)(void* ctx, int vote);
void t5_generator_set_lockstep(T5Generator* G, T5GenAgreeFn agree, void* ctx);
// Lockstep: the following batches are generated only to step with the other ranks (a padding step; their outputs
// are not read): this rank votes as if every row were finished from the start and follows the others (default off).
void t5_generator_set_lockstep_idle(T5Generator* G, bool idle);

const GenerateStats* t5_generator_stats(const T5Generator* G);
void t5_generator_reset_stats(T5Generator* G);

#ifdef __cplusplus
}
#endif
