/*
 * t5.h: the T5 encoder-decoder on the GPU: forward (encoder, decoder, lm_head, loss) and backward
 * (every parameter gradient), HF transformers numerics (REFERENCE.md 5.1, docs/numerics.md).
 *
 * The model owns activations, never parameters (DESIGN.md invariant 1): it asks the ZeroEngine for a
 * unit's working weights (zero_fetch) right before using them, hands them back (zero_release) right
 * after, writes zero_grad(unit) and calls zero_grad_ready(unit) when that unit's gradient is
 * complete. Every backward overwrites every parameter gradient (the first contribution to a parameter
 * is a GEMM with beta = 0 or a kernel's `=`; only the shared embedding gets later `+=` contributions),
 * so no clearing pass is needed; the trainer sums micro-batches in fp32 itself. Units and weight offsets come from the ParamTable (model/params.h).
 *
 * Precision (X = the run dtype, fp32 / fp16 / bf16): the residual stream between sublayers is fp32;
 * norm outputs, GEMM inputs, stored attention probabilities and FF activations are X; GEMMs
 * accumulate in fp32; parameter gradients are in the engine's gradient dtype (X by default, as
 * DeepSpeed's grad_accum_dtype; fp32 on request), each the fp32 result rounded once.
 *
 * Streams: everything runs in order on the one stream passed in; forward and backward never
 * synchronise with the host (the loss stays on the device until t5_model_loss copies it out).
 *
 * Usage per step:
 *   t5_model_set_batch(M, &batch, stream);                 // host ids -> device (shift-right here)
 *   zero_begin_grads(Z, stream);
 *   t5_model_forward(M, true, loss_scale, seed, stream);   // loss + dlogits
 *   t5_model_backward(M, stream);                          // = every unit's grad, grad_ready
 *   (or t5_model_forward_backward(M, loss_scale, seed, stream): the same two, as a CUDA graph with opt.cuda_graph)
 *   float loss = t5_model_loss(M, stream);                 // the one host sync, outside fwd/bwd
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

#define T5_LABEL_IGNORE (-100)

typedef struct {
    int max_B, max_Ts, max_Tt;     // activation buffers are sized for these maxima
    DType dtype;                   // X
    bool gradient_checkpointing;   // keep only block inputs; recompute each block in backward
    bool forward_only;             // evaluation only: one block's activations and no gradient buffers; forward
                                   // with_grad, backward and forward_backward refuse (an eval-only run's model)
    bool keep_logits;              // keep the logits after a training forward (else dlogits overwrite them)
    float dropout_rate;            // rate used in train mode (normally cfg.dropout_rate)
    float label_smoothing;         // the Trainer's LabelSmoother epsilon, in [0, 1); 0 = plain cross-entropy. Applies
                                   // to the training and the eval loss alike, as HF's compute_loss/prediction_step
    // Numerics knobs (docs/numerics.md). All false = the default = HF transformers under torch.autocast, which
    // the parity test checks; each true trades that parity for memory or precision.
    bool probs_in_x;               // store attention probabilities only in X (default: fp32, as HF's softmax
                                   // saves its fp32 output for the backward)
    bool scores_fp32;              // keep Q K^T in fp32 (default: rounded to X, as HF's autocast matmul)
    bool nongemm_in_x;             // norm weights, relative-bias tables and the embedding lookup read the X working
                                   // weights (default: the fp32 view, as HF autocast runs those ops on fp32 params)
    // Speed (docs/benchmarks.md). cuda_graph: t5_model_forward_backward captures forward+backward in a CUDA graph
    // per fixed (B, Ts, Tt, decoder mask, dropout rate, grad_scale) and replays it (small batches are
    // launch-bound). Bit-identical to the eager path. Needs an engine whose fetch is pure bookkeeping (stage 0).
    bool cuda_graph;
} T5ModelOptions;

// A batch in host memory, row-major. decoder_input_ids NULL -> shift-right of labels
// (decoder_start_token_id first, -100 -> pad). labels NULL -> no loss (forward only).
typedef struct {
    int B, Ts, Tt;
    const int* input_ids;               // (B, Ts)
    const int* attention_mask;          // (B, Ts) 1 attend / 0 pad; NULL = all ones
    const int* labels;                  // (B, Tt) with -100 = ignored, or NULL
    const int* decoder_input_ids;       // (B, Tt) or NULL
    const int* decoder_attention_mask;  // (B, Tt) or NULL (HF default: causal mask only)
} T5Batch;

typedef struct T5Model T5Model;

// Allocates the activations for the maxima (one arena; the error names the bytes when it does not fit).
T5Model* t5_model_create(const ParamTable* t, ZeroEngine* Z, const T5ModelOptions* opt, char* err, size_t errlen);
void t5_model_destroy(T5Model* M);
// HF --tf32: the GEMMs with fp32 inputs (fp32 runs, fp32 evaluation) on TF32 tensor cores from now on, process-wide
// (torch.backends.cuda.matmul.allow_tf32). Off by default, as in PyTorch; 16-bit GEMMs are not affected.
void t5_set_tf32(bool on);
size_t t5_model_activation_bytes(const T5Model* M);
// The same arena's bytes computed without a GPU (t5_model_create checks that the two agree): the layout for
// these options on the attention path given (noperm: cuBLASLt pointer-array GEMMs, the path an H100 takes;
// fuse_qkv: fused q|k|v projections, taken with noperm when t5_model_qkv_contiguous). *ptr_bytes (may be NULL):
// the device pointer arrays of the noperm path, allocated beside the arena.
size_t t5_model_activation_bytes_for(const ParamTable* t, const T5ModelOptions* opt, bool noperm, bool fuse_qkv,
                                     size_t* ptr_bytes);
bool t5_model_qkv_contiguous(const ParamTable* t);

// Train mode applies dropout (opt.dropout_rate); eval mode does not. Default: train.
void t5_model_set_train(T5Model* M, bool train);

// Validates the batch (sizes within the maxima, ids in [0, V), labels in [0, V) or -100) and copies it
// to the device. Returns 0 or -1 with a message naming the field, row and column.
int t5_model_set_batch(T5Model* M, const T5Batch* batch, cudaStream_t stream, char* err, size_t errlen);

// Forward over the current batch. With labels: the loss (device) and, when with_grad, dlogits scaled by
// grad_scale (the fp16 loss scale; 1 otherwise) for t5_model_backward. seed keys the dropout RNG (the same
// seed gives the same masks; see docs/numerics.md for the per-site offsets).
void t5_model_forward(T5Model* M, bool with_grad, float grad_scale, uint64_t seed, cudaStream_t stream);
// The flops profiler's timing (src/report/flops_profile.h): with ev set, every later t5_model_forward records n =
// 2 L + 3 Ld + 7 events on its stream: before the encoder's embedding, then after the embedding, each T5Layer* of
// each block, each stack's final norm, lm_head and the loss (the segments flops_profile_num_segments counts). The
// backward's recomputation and CUDA graphs record none. NULL stops it. The caller owns the events.
void t5_model_set_profile(T5Model* M, cudaEvent_t* ev, int n);
// Backward of the last forward(with_grad = true): accumulates (+=) every parameter gradient.
void t5_model_backward(T5Model* M, cudaStream_t stream);
// forward(with_grad = true) + backward of the current batch (which must have labels), the same results bit for
// bit. With opt.cuda_graph: the first call for a shape runs eagerly, the second captures a CUDA graph, later
// ones store the seed and launch it (at most 8 shapes kept, least recently used replaced). No host sync.
void t5_model_forward_backward(T5Model* M, float grad_scale, uint64_t seed, cudaStream_t stream);
// The unit order of one t5_model_forward(with_grad) + t5_model_backward (ZeRO stage 3's static trace).
// Writes min(n, cap) units to out and returns n.
int t5_model_fetch_trace(const ParamTable* t, int* out, int cap);
// The order the backward asks for (u + 1) and hands on (-(u + 1)) each unit's gradient (ZeroOptions.grad_trace).
int t5_model_grad_trace(const ParamTable* t, int* out, int cap);
// What the ZeRO engine and its estimate know of the model: o->tensors / num_tensors (every parameter: unit, offset,
// weight decay, fp32 view, matrix shape), o->trace and o->grad_trace (above), allocated; t5_model_zero_free
// releases them.
void t5_model_zero_describe(const ParamTable* t, ZeroOptions* o);
void t5_model_zero_free(ZeroOptions* o);
// Number of captured graphs held (for tests).
int t5_model_num_graphs(const T5Model* M);

// Device pointer to the mean loss (1) fp32 of the last forward.
const float* t5_model_loss_device(const T5Model* M);
// Copies the loss to the host (synchronises the stream).
float t5_model_loss(T5Model* M, cudaStream_t stream);
// Logits of the last forward (B*Tt, V) X on the device; valid after an eval forward, or a training
// forward with keep_logits.
const void* t5_model_logits(const T5Model* M);

// ---- batch files (implemented in src/cli/dump_grads.c)
// A JSON object {"input_ids": [[...]], "attention_mask": [[...]], "labels": [[...]],
// "decoder_input_ids": [[...]], "decoder_attention_mask": [[...]]}; input_ids required, the others optional
// (dump-grads also requires labels); every row of a field has the same length; unknown keys are errors.
// On success *out owns malloc'd arrays (free with t5_batch_free). Returns 0 or -1 with a message naming
// the file, the key and the row.
int t5_batch_load_json(const char* path, T5Batch* out, char* err, size_t errlen);
void t5_batch_free(T5Batch* b);

#ifdef __cplusplus
}
#endif
