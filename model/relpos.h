/*
 * relpos.h: T5's relative position buckets on the host, bit-exact with transformers'
 * T5Attention._relative_position_bucket (REFERENCE.md 5.1), for the table cuda/position_bias.cuh consumes.
 *
 * rel = key_pos - query_pos.
 *   bidirectional (encoder self-attention): nb = num_buckets/2; base = nb if rel > 0 else 0; n = |rel|
 *   causal (decoder self-attention):        nb = num_buckets;   base = 0;                  n = max(-rel, 0)
 *   max_exact = nb/2; n < max_exact -> base + n; otherwise
 *   base + min(nb-1, max_exact + (long)(logf((float)n / max_exact) / (float)log(max_distance/max_exact)
 *                                       * (float)(nb - max_exact)))
 * The large-distance branch is evaluated with torch's float32 arithmetic: n.float() / max_exact is a float32
 * division by an integer scalar, torch.log is float32, the Python-double math.log(...) scalar is rounded to
 * float32 by the tensor op, and .to(torch.long) truncates toward zero. (The CUDA kernel of torch divides by
 * a CPU scalar as a multiplication with its float32 reciprocal; relpos.c documents which variant matches and
 * the exact-match test checks both device dumps.)
 */
#pragma once
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

// bucket of one relative position; num_buckets >= 2 (even for bidirectional), max_distance > max_exact.
int relpos_bucket(int rel, bool bidirectional, int num_buckets, int max_distance);

// Fills out[0 .. 2*max_len-2] with out[rel + rel_offset] = relpos_bucket(rel, ...) for every
// rel in [-(max_len-1), max_len-1] and returns rel_offset = max_len - 1 (the `rel_offset` argument of
// position_bias_forward/backward). max_len must cover max(Tq + q_offset, Tk) of every later use.
int relpos_bucket_table(int* out, int max_len, bool bidirectional, int num_buckets, int max_distance);

// Number of ints relpos_bucket_table writes for max_len: 2*max_len - 1.
static inline int relpos_table_len(int max_len) { return 2 * max_len - 1; }

#ifdef __cplusplus
}
#endif
