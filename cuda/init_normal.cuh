/*
 * init_normal.cuh: random initialisation of a weight tensor on the GPU (see init_normal.cu).
 *
 * Element k of a tensor of n is a normal of standard deviation sd from Box-Muller over the splitmix64
 * stream `state`: pair j (elements 2j, 2j+1) uses the stream's calls 2j+1 and 2j+2 (u1, u2, uniforms in
 * (0, 1) with 53 bits), r = sqrt(-2 log u1), x[2j] = sd r cos(2 pi u2), x[2j+1] = sd r sin(2 pi u2), in
 * double, rounded once to fp32. Every pair is independent, so any grid gives the same bits.
 */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// x (n) fp32 = the normals above.                                                                     (=)
void init_normal(float* x, size_t n, uint64_t state, double sd, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
