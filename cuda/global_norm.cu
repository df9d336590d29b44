/*
 * global_norm.cu: sum of squares over a list of gradient buffers (fp32 / fp16 / bf16) with an
 * inf/nan flag in the same pass, then DeepSpeed's combined unscale+clip factor on the device.
 *
 *   global_norm_kernel1:   grid GN_GRID blocks, block b takes chunks b, b + GN_GRID, ...; each thread
 *                          sums (double)x*x of its elements; block tree-reduce -> partial[b] (=),
 *                          any non-finite element -> bad[b] (=)
 *   global_norm_kernel2:   one block sums the GN_GRID partials in a fixed tree order -> *out_norm2 (=),
 *                          ORs the flags -> *out_overflow (=)
 *   clip_scale_kernel1:    one thread: norm, 1/combined (=)
 * Deterministic: no atomics; the grid, the chunk table and the reduction trees are fixed, so the same
 * inputs always give the same bits (llm.c's global_norm pattern, in fp64 to make the order immaterial
 * at fp32 output precision). No backward: this is the optimizer's norm.
 */
#include "common.cuh"
#include "global_norm.cuh"

#define GN_CHUNK 8192
#define GN_BLOCK 256
#define GN_GRID 512

typedef struct {
    int buf;
    int64_t start;
} GnChunk;

struct GlobalNormPlan {
    GradBuffer* d_bufs;  // (count)
    GnChunk* d_chunks;   // (nchunks)
    double* d_partial;   // (GN_GRID)
    int* d_bad;          // (GN_GRID)
    int count;
    int64_t nchunks;
};

// ---- CUDA kernels

// fixed-order tree over blockDim.x (a power of two) doubles in shared memory; result in s[0]
__global__ void global_norm_kernel1(const GradBuffer* bufs, const GnChunk* chunks, int64_t nchunks, double* partial,
                                    int* bad) {
    __shared__ double s[GN_BLOCK];
    __shared__ int sb[GN_BLOCK];
    double acc = 0.0;
    int nonfinite = 0;
    for (int64_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
        const GnChunk ch = chunks[c];
        const GradBuffer g = bufs[ch.buf];
        const int64_t end = ch.start + GN_CHUNK < g.n ? ch.start + GN_CHUNK : g.n;
        for (int64_t i = ch.start + threadIdx.x; i < end; i += blockDim.x) {
            float x;
            if (g.dtype == DT_F16) x = __half2float(((const __half*)g.ptr)[i]);
            else if (g.dtype == DT_BF16) x = __bfloat162float(((const __nv_bfloat16*)g.ptr)[i]);
            else x = ((const float*)g.ptr)[i];
            if (!isfinite(x)) nonfinite = 1;
            acc += (double)x * (double)x;
        }
    }
    s[threadIdx.x] = acc;
    sb[threadIdx.x] = nonfinite;
    block_sum_or(s, sb);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = s[0];
        bad[blockIdx.x] = sb[0];
    }
}

__global__ void global_norm_kernel2(const double* partial, const int* bad, int n, float* out_norm2, int* out_overflow) {
    __shared__ double s[GN_BLOCK];
    __shared__ int sb[GN_BLOCK];
    double acc = 0.0;
    int any = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i], any |= bad[i];
    s[threadIdx.x] = acc;
    sb[threadIdx.x] = any;
    block_sum_or(s, sb);
    if (threadIdx.x == 0) {
        *out_norm2 = (float)s[0];
        *out_overflow = sb[0] ? 1 : 0;
    }
}

// DeepSpeed stage3.py unscale_and_clip_grads with the norm convention of
// complete_grad_norm_calculation_for_cpu_offload; fp32 operations in the order of grad_clip.c
__global__ void clip_scale_kernel1(const float* norm2, const int* overflow, float loss_scale, float clip,
                                   float* inv_scale, float* norm_out) {
    float norm = __fsqrt_rn(*norm2);
    if ((overflow && *overflow) || !isfinite(norm)) norm = -1.0f;
    float combined = loss_scale;
    if (clip > 0.0f) {
        float t = __fdiv_rn(norm, loss_scale);
        t = __fadd_rn(t, 1e-6f);
        t = __fdiv_rn(t, clip);
        if (t < 1.0f) t = 1.0f;
        combined = __fmul_rn(t, loss_scale);
    }
    *inv_scale = __fdiv_rn(1.0f, combined);
    if (norm_out) *norm_out = norm;
}

// ---- launchers

GlobalNormPlan* global_norm_plan_create(const GradBuffer* bufs, int count) {
    GlobalNormPlan* plan = (GlobalNormPlan*)calloc_check(1, sizeof(GlobalNormPlan));
    plan->count = count;
    int64_t nchunks = 0;
    for (int i = 0; i < count; i++) {
        if (bufs[i].n < 0) t5_die(T5_EXIT_FAILURE, "global_norm_plan_create: buffer %d has n = %lld", i, (long long)bufs[i].n);
        nchunks += CEIL_DIV(bufs[i].n, (int64_t)GN_CHUNK);
    }
    GnChunk* h = (GnChunk*)malloc_check((size_t)(nchunks ? nchunks : 1) * sizeof(GnChunk));
    int64_t k = 0;
    for (int i = 0; i < count; i++)
        for (int64_t s = 0; s < bufs[i].n; s += GN_CHUNK) h[k].buf = i, h[k].start = s, k++;
    plan->nchunks = nchunks;
    CUDA_CHECK(cudaMalloc((void**)&plan->d_bufs, (size_t)(count ? count : 1) * sizeof(GradBuffer)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_chunks, (size_t)(nchunks ? nchunks : 1) * sizeof(GnChunk)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_partial, GN_GRID * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_bad, GN_GRID * sizeof(int)));
    if (count) CUDA_CHECK(cudaMemcpy(plan->d_bufs, bufs, (size_t)count * sizeof(GradBuffer), cudaMemcpyHostToDevice));
    if (nchunks) CUDA_CHECK(cudaMemcpy(plan->d_chunks, h, (size_t)nchunks * sizeof(GnChunk), cudaMemcpyHostToDevice));
    free(h);
    return plan;
}

void global_norm_plan_free(GlobalNormPlan* plan) {
    if (!plan) return;
    CUDA_CHECK(cudaFree(plan->d_bufs));
    CUDA_CHECK(cudaFree(plan->d_chunks));
    CUDA_CHECK(cudaFree(plan->d_partial));
    CUDA_CHECK(cudaFree(plan->d_bad));
    free(plan);
}

void global_norm_compute(const GlobalNormPlan* plan, float* d_out_norm2, int* d_out_overflow, cudaStream_t stream) {
    // always GN_GRID blocks (idle ones write zeros) so the reduction tree never depends on the sizes
    global_norm_kernel1<<<GN_GRID, GN_BLOCK, 0, stream>>>(plan->d_bufs, plan->d_chunks, plan->nchunks, plan->d_partial,
                                                          plan->d_bad);
    CUDA_LAUNCH_CHECK();
    global_norm_kernel2<<<1, GN_BLOCK, 0, stream>>>(plan->d_partial, plan->d_bad, GN_GRID, d_out_norm2, d_out_overflow);
    CUDA_LAUNCH_CHECK();
}

void global_norm_clip_scale(const float* d_norm2, const int* d_overflow, float loss_scale, float clip,
                            float* d_inv_scale, float* d_norm, cudaStream_t stream) {
    clip_scale_kernel1<<<1, 1, 0, stream>>>(d_norm2, d_overflow, loss_scale, clip, d_inv_scale, d_norm);
    CUDA_LAUNCH_CHECK();
}
