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

#ifdef __cplusplus
}
#endif
