/*
 * adamw.cu: fused multi-tensor AdamW (DeepSpeed CPU-Adam arithmetic) over a fixed list of tensors.
 *
 *   master, m, v: (n) fp32 per tensor, updated in place (=)
 *   grad:         (n) fp32 / fp16 / bf16 per tensor, read, multiplied by *d_grad_scale
 *   work:         (n) fp16 / bf16 per tensor or none, = fp16/bf16(new master), round to nearest even
 * Per element (same operations as src/zero/cpu_adam.c, every rounding explicit with __f*_rn so nvcc cannot
 * contract or reorder):
 *   g = grad*gs; [Adam L2: g = fma(p, wd, g)]; m = fma(g, 1-b1, m*b1); v = fma(g*g, 1-b2, v*b2)
 *   d = fma(sqrt(v), bc2, eps); [AdamW: p = fma(p, -lr*wd, p)]; p = fma(m/d, -lr/bc1, p)
 * There is no backward: this is the optimizer step.
 *
 * Work split: the plan cuts every tensor into chunks of ADAMW_CHUNK elements; block b of the launch
 * owns chunk b (one tensor, so the dtype switches are uniform across the block); threads stride
 * through the chunk so consecutive threads touch consecutive elements (coalesced).
 */
#include "adamw.cuh"
#include "common.cuh"

#define ADAMW_CHUNK 4096
#define ADAMW_BLOCK 256

typedef struct {
    int tensor;     // index into the tensor list
    int64_t start;  // first element of the chunk
} AdamWChunk;

struct AdamWPlan {
    AdamWTensor* d_tensors;  // (count) on the device
    AdamWChunk* d_chunks;    // (nchunks) on the device
    int count;
    int64_t nchunks;
};

// ---- CUDA kernels

__device__ __forceinline__ float adamw_load_grad(const void* g, DType dt, int64_t i) {
    if (dt == DT_F16) return __half2float(((const __half*)g)[i]);
    if (dt == DT_BF16) return __bfloat162float(((const __nv_bfloat16*)g)[i]);
    return ((const float*)g)[i];
}

__global__ void adamw_kernel1(const AdamWTensor* tensors, const AdamWChunk* chunks, AdamWStepArgs a,
                              float omb1, float omb2, float step_size, const float* d_grad_scale, const int* d_skip) {
    if (d_skip && *d_skip) return;
    const AdamWChunk c = chunks[blockIdx.x];
    const AdamWTensor t = tensors[c.tensor];
    const float gs = d_grad_scale ? *d_grad_scale : 1.0f;
    const bool l2 = t.weight_decay > 0.0f && !a.adamw_mode;
    const bool decoupled = t.weight_decay > 0.0f && a.adamw_mode;
    const float wdc = __fmul_rn(-a.lr, t.weight_decay);  // -1 * lr * wd, as the CPU path
    const int64_t end = c.start + ADAMW_CHUNK < t.n ? c.start + ADAMW_CHUNK : t.n;
    for (int64_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
        float g = __fmul_rn(adamw_load_grad(t.grad, t.grad_dtype, i), gs);
        float p = t.master[i];
        if (l2) g = __fmaf_rn(p, t.weight_decay, g);
        float m = __fmul_rn(t.m[i], a.beta1);
        m = __fmaf_rn(g, omb1, m);
        float v = __fmul_rn(t.v[i], a.beta2);
        const float g2 = __fmul_rn(g, g);
        v = __fmaf_rn(g2, omb2, v);
        float d = __fsqrt_rn(v);
        d = __fmaf_rn(d, a.bias_correction2, a.eps);
        const float u = __fdiv_rn(m, d);
        if (decoupled) p = __fmaf_rn(p, wdc, p);
        p = __fmaf_rn(u, step_size, p);
        t.master[i] = p;
        t.m[i] = m;
        t.v[i] = v;
        if (t.work) {
            if (t.work_dtype == DT_F16) ((__half*)t.work)[i] = __float2half_rn(p);
            else ((__nv_bfloat16*)t.work)[i] = __float2bfloat16_rn(p);
        }
    }
}

// ---- launchers

AdamWPlan* adamw_plan_create(const AdamWTensor* tensors, int count) {
    AdamWPlan* plan = (AdamWPlan*)calloc_check(1, sizeof(AdamWPlan));
    plan->count = count;
    int64_t nchunks = 0;
    for (int i = 0; i < count; i++) {
        if (tensors[i].n < 0) t5_die(T5_EXIT_FAILURE, "adamw_plan_create: tensor %d has n = %lld", i, (long long)tensors[i].n);
        if (tensors[i].work && tensors[i].work_dtype == DT_F32)
            t5_die(T5_EXIT_FAILURE, "adamw_plan_create: tensor %d: an fp32 working copy is the master itself", i);
        nchunks += CEIL_DIV(tensors[i].n, (int64_t)ADAMW_CHUNK);
    }
    if (nchunks > 2147483647) t5_die(T5_EXIT_FAILURE, "adamw_plan_create: %lld chunks exceed the grid limit", (long long)nchunks);
    AdamWChunk* h = (AdamWChunk*)malloc_check((size_t)(nchunks ? nchunks : 1) * sizeof(AdamWChunk));
    int64_t k = 0;
    for (int i = 0; i < count; i++)
        for (int64_t s = 0; s < tensors[i].n; s += ADAMW_CHUNK) h[k].tensor = i, h[k].start = s, k++;
    plan->nchunks = nchunks;
    CUDA_CHECK(cudaMalloc((void**)&plan->d_tensors, (size_t)(count ? count : 1) * sizeof(AdamWTensor)));
    CUDA_CHECK(cudaMalloc((void**)&plan->d_chunks, (size_t)(nchunks ? nchunks : 1) * sizeof(AdamWChunk)));
    if (count) CUDA_CHECK(cudaMemcpy(plan->d_tensors, tensors, (size_t)count * sizeof(AdamWTensor), cudaMemcpyHostToDevice));
    if (nchunks) CUDA_CHECK(cudaMemcpy(plan->d_chunks, h, (size_t)nchunks * sizeof(AdamWChunk), cudaMemcpyHostToDevice));
    free(h);
    return plan;
}

void adamw_plan_free(AdamWPlan* plan) {
    if (!plan) return;
    CUDA_CHECK(cudaFree(plan->d_tensors));
    CUDA_CHECK(cudaFree(plan->d_chunks));
    free(plan);
}

void adamw_step(const AdamWPlan* plan, const AdamWStepArgs* args, const float* d_grad_scale, const int* d_skip,
                cudaStream_t stream) {
    if (plan->nchunks == 0) return;
    // fp32 host arithmetic, as cpu_adam_update: 1 - beta, -1 * lr / bias_correction1
    const float omb1 = 1.0f - args->beta1, omb2 = 1.0f - args->beta2;
    const float step_size = -1.0f * args->lr / args->bias_correction1;
    adamw_kernel1<<<(unsigned)plan->nchunks, ADAMW_BLOCK, 0, stream>>>(plan->d_tensors, plan->d_chunks, *args, omb1, omb2,
                                                                       step_size, d_grad_scale, d_skip);
    CUDA_LAUNCH_CHECK();
}
