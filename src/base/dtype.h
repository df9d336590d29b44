/*
 * dtype.h: the element types kernels are instantiated for (C-compatible).
 * X below means "the run's compute dtype": f32 for fp32 runs, f16 or bf16 for mixed precision.
 */
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 } DType;

static inline size_t dtype_size(DType t) { return t == DT_F32 ? 4 : 2; }
static inline const char* dtype_name(DType t) { return t == DT_F32 ? "fp32" : t == DT_F16 ? "fp16" : "bf16"; }

#ifdef __cplusplus
}
#endif
