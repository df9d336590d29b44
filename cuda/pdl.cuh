/*
 * pdl.cuh: programmatic dependent launch (PDL, sm_90) for the decoder step's chain of small kernels
 * (cuda/decode_fused.cu, cuda/decode_gemv.cu; CUDA C++ only).
 *
 * A kernel launched with pdl_launch(...) while PDL is on (pdl_enabled()) may start while the kernel before it on the
 * stream is still running: its blocks run their prologue, then stop at pdl_wait() until that kernel has completed
 * and its writes are visible. Each such kernel calls pdl_trigger() right after its own pdl_wait(), which lets the
 * next kernel start its prologue, so at most one kernel runs ahead. Captured into a CUDA graph, the launches become
 * programmatic edges (the graph keeps the overlap).
 *
 * The rules every kernel launched this way follows (else it must not be launched with PDL):
 *   - every block calls pdl_wait() before it reads anything the previous kernel may have written and before it
 *     writes anything at all (a block that returns early calls it first too);
 *   - before pdl_wait() it only reads what no kernel of the current chain writes: weights, and the decoder caches
 *     written before the step began (the kernel before it has passed its own pdl_wait(), so everything earlier is
 *     complete: only the direct predecessor's outputs are unsafe there);
 *   - pdl_trigger() after pdl_wait() (never before: that would let two kernels run ahead).
 * Outside a PDL launch both calls return at once, so the kernels are correct either way.
 * T5TRAIN_GEN_PDL=0 turns it off (read once); default on.
 */
#pragma once
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/check.h"

__device__ __forceinline__ void pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// PDL needs compute capability 9.0; T5TRAIN_GEN_PDL=0 turns it off (both read once)
static inline bool pdl_enabled(void) {
    static int cached = -1;
    if (cached < 0) {
        const char* e = getenv("T5TRAIN_GEN_PDL");
        int dev = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cached = major >= 9 && !(e && strcmp(e, "0") == 0);
    }
    return cached == 1;
}

// kernel<<<grid, block, smem, stream>>>(args...) in thread-block clusters of (1, cluster_y, 1) when cluster_y > 1
// (gridDim.y a multiple of it), with the programmatic-serialization attribute when PDL is on
template <typename... KArgs, typename... Args>
static inline void pdl_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                      int cluster_y, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    int n = 0;
    if (cluster_y > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = 1;
        attr[n].val.clusterDim.y = (unsigned)cluster_y;
        attr[n].val.clusterDim.z = 1;
        n++;
    }
    if (pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute when PDL is on
template <typename... KArgs, typename... Args>
static inline void pdl_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                              Args... args) {
    pdl_launch_cluster(kernel, grid, block, smem, stream, 1, args...);
}
