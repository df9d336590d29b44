/*
 * init_normal.cu: random initialisation of a weight tensor on the GPU (see init_normal.cuh).
 *
 *   init_normal_kernel1   one thread per pair of elements, grid-stride; double math       (=)
 * No backward: this fills weights before training. The same numbers as the CPU fp64 reference of
 * test/test_gpu_init_normal.c up to the last ulp of CUDA's double log / cos / sin (then rounded to fp32).
 */
#include "common.cuh"
#include "init_normal.cuh"

// ---- CUDA kernels

__device__ __forceinline__ uint64_t splitmix64_next(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double uniform_open01(uint64_t* st) {
    return ((double)(splitmix64_next(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

__global__ void init_normal_kernel1(float* x, size_t n, uint64_t state, double sd) {
    const size_t npairs = (n + 1) / 2;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < npairs; j += (size_t)gridDim.x * blockDim.x) {
        uint64_t s = state + (uint64_t)(2 * j) * 0x9E3779B97F4A7C15ull;
        const double u1 = uniform_open01(&s), u2 = uniform_open01(&s);
        const double r = sqrt(-2.0 * log(u1));
        const double a = 2.0 * 3.14159265358979323846 * u2;
        const size_t k = 2 * j;
        x[k] = (float)(sd * r * cos(a));
        if (k + 1 < n) x[k + 1] = (float)(sd * r * sin(a));
    }
}

// ---- kernel launchers

extern "C" void init_normal(float* x, size_t n, uint64_t state, double sd, cudaStream_t stream) {
    if (n == 0) return;
    const size_t npairs = (n + 1) / 2;
    const int block = 256;
    const int grid = (int)T5_MIN(CEIL_DIV(npairs, (size_t)block), (size_t)65536);
    init_normal_kernel1<<<grid, block, 0, stream>>>(x, n, state, sd);
    CUDA_CHECK(cudaGetLastError());
}
