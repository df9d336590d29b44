/*
 * ada_split.h: transformers' Adafactor over ZeRO ranks, pure arithmetic (no CUDA; CPU-tested in
 * test/test_zero_adafactor.c): which slice of each tensor this rank owns, which tensors several ranks share, and the
 * slots of their partial sums in the GPU plan's two fp64 reduce buffers (cuda/adafactor.cuh AdafactorReduce).
 *
 * The engine cuts each unit's flat elements across the ranks (plan.h: rank r owns [r * part, (r + 1) * part) of the
 * unit), so a tensor can be cut anywhere, also inside a row of a matrix. Adafactor's factored second moment needs
 * the whole matrix's row and column sums, its clipping the whole update's rms and scale_parameter the whole
 * parameter's RMS (docs/optimizer.md, "Adafactor on several ranks"). Each rank forms these sums over its own
 * elements; the sums of the tensors several ranks share go to a leading "shared" section of each reduce buffer, laid
 * out in tensor order over every shared tensor (also those this rank holds nothing of: their slots stay 0), so the
 * section is the same on every rank and one all-reduce (SUM) of it gives every rank the whole sums. The tensors only
 * this rank holds follow, unreduced. Buffer 1 per tensor: a matrix's [rows row sums | cols column sums | sum p^2], a
 * vector's [sum p^2]; buffer 2: [sum u^2].
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../model/zero.h"
#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;                     // tensors (ZeroOptions.tensors order)
    size_t* first;             // (n) this rank's first owned element of tensor i (tensor-relative)
    size_t* count;             // (n) its owned elements (0: none)
    bool* shared;              // (n) more than one rank owns elements of tensor i
    int64_t* off1;             // (n) tensor i's first slot in reduce buffer 1; -1: not in the plan here
    int64_t* off2;             // (n) its slot in buffer 2; -1: not in the plan here
    int64_t len1, len2;        // the buffers' doubles
    int64_t shared1, shared2;  // the leading shared sections (0 at one rank)
} ZeroAdaSplit;

// The ranks owning elements of tensor t under layout L (any rank's: the partition is the same): [*r0, *r1].
void zero_ada_tensor_ranks(const ZeroTensor* t, const ZeroLayout* L, int* r0, int* r1);
// Doubles of tensor t's slots in reduce buffer 1 (rows + cols + 1 for a matrix, 1 for a vector).
int64_t zero_ada_red1_len(const ZeroTensor* t);
// This rank's slices and slots. in_plan (n, or NULL = all): tensor i is stepped by the GPU plan (its unit is
// GPU-stepped; must be the same on every rank). Always succeeds.
void zero_ada_split_build(ZeroAdaSplit* s, const ZeroTensor* t, int n, const ZeroLayout* L, const bool* in_plan);
void zero_ada_split_free(ZeroAdaSplit* s);

#ifdef __cplusplus
}
#endif
