/*
 * zenflow_select.h: ZenFlow's column importance and its per-tensor top-k selection (DeepSpeed
 * runtime/zenflow/zenflow_stage_1_and_2.py update_selected_channels, engine_stage3.py
 * update_selected_channels; docs/zero.md "ZenFlow").
 *
 * A "column" is what DeepSpeed calls one: for a 2-D weight of torch shape (R, C) (HF's layout,
 * row-major: nn.Linear's (out_features, in_features), the embedding's (V, D)), column c is the R
 * elements W[0..R-1, c]. DeepSpeed flattens ZenFlow's 2-D parameters and gradients transposed
 * (zenflow_utils._flatten_dense_tensors), so each column is R consecutive elements of its flat
 * buffer; here the tensors keep HF's row-major layout and a column is strided by C.
 *
 * importance[c] = sum over r of |grad[r, c]|, and the selection is the k columns of largest
 * importance. k is floor(topk_ratio * C) at stages 1 and 2 (it may be 0) and max(1, that) at stage 3.
 * 1-D tensors (T5's RMSNorm weights) are never ranked: ZenFlow gives all their elements to the
 * selective optimizer (zenflow_ref.h).
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// DeepSpeed's number of selected columns of a tensor with C columns:
//   stage 1, 2: int(topk_ratio * C)          (zenflow_stage_1_and_2.py; may be 0: then no column is selected)
//   stage 3:    max(1, int(C * topk_ratio))  (engine_stage3.py)
// topk_ratio in [0, 1]; C >= 0. Returns a value in [0, C].
int64_t zenflow_select_count(int64_t C, double topk_ratio, int stage);

// importance: (C) fp32, written (=). grad: (R, C) fp32 row-major, read only.
// importance[c] = sum_r |grad[r, c]|, accumulated in fp64 over r = 0..R-1 and rounded once to fp32
// (deterministic and independent of the order a GPU reduction picks, up to that one rounding).
void zenflow_column_importance(const float* grad, int64_t R, int64_t C, float* importance);

// selected: (k) int64, written (=): the k columns of largest importance, in ascending column order (DeepSpeed
// sorts its torch.topk indices before use). Ties go to the lower column index (torch.topk leaves them
// unspecified); NaN ranks above every number, as in torch.topk. importance: (C) fp32. 0 <= k <= C.
void zenflow_select_topk(const float* importance, int64_t C, int64_t k, int64_t* selected);

// How the engine holds one parameter tensor for ZenFlow (src/zero/zenflow.c), from its table shape: rows, cols > 0
// (2-D, torch shape (rows, cols)): R = rows, C = cols, k = zenflow_select_count(C, topk_ratio, stage); otherwise
// (1-D, numel elements): R = 1, C = numel, k = numel (every element selected, never ranked).
typedef struct {
    int64_t R, C, k;
    bool is_1d;
} ZenflowShape;
ZenflowShape zenflow_tensor_shape(int64_t rows, int64_t cols, int64_t numel, double topk_ratio, int stage);

// The GPU bytes cuda/zenflow.cu's zenflow_gpu_init allocates for one tensor, cub's radix-sort temporary storage
// aside (cub_bytes, given by the caller: the estimate counts it as ZENFLOW_CUB_BYTES_EST): sel (4 k), sel_p, sel_g,
// sel_m, sel_v, kept (5 x 4 R k), and for a 2-D tensor importance, keys in/out, ids in/out (5 x 4 C).
uint64_t zenflow_tensor_gpu_bytes(ZenflowShape s, uint64_t cub_bytes);
// what the estimate counts for cub's temporary storage of one 2-D tensor with C columns (an upper guess: cub's
// onesweep radix sort of C (key, value) pairs of 4 bytes asks for about 2 x 4 C plus its histograms)
uint64_t zenflow_cub_bytes_est(int64_t C);

#ifdef __cplusplus
}
#endif
