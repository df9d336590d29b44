/*
 * zenflow.cu: ZenFlow's GPU half for one tensor: column importance, top-k selection, selective AdamW on the
 * selected columns, keep / restore of those columns (see zenflow.cuh; the CPU half and reference are
 * src/zero/zenflow_select.c and zenflow_ref.c, whose arithmetic this file repeats bit for bit).
 *
 *   grad, work: (R, C) row-major, torch shape (R, C); column c = W[:, c], R elements strided by C
 *   importance: (C) fp32, =      imp[c] = fp32(fp64 sum over r = 0..R-1 of |g[r, c]|), in that order
 *   sel:        (k) int32, =     the top k columns (NaN first, then larger, ties to the lower column), ascending
 *   sel_g, sel_p, sel_m, sel_v, kept: (R, k) fp32, column sel[j] of row r at [r * k + j] (zenflow_ref.c keeps
 *               (k, R); the AdamW is elementwise, so only the layout differs: (R, k) makes the gathers'
 *               writes and the scatters' reads coalesced, and their row accesses ascend within a row)
 * There is no backward: these are optimizer kernels.
 *
 * Importance: one thread per column walks its R rows in order, accumulating in fp64 (__dadd_rn, no
 * reassociation), 8 loads in flight per thread; consecutive threads read consecutive columns (coalesced). That
 * is zenflow_column_importance's exact order, so the fp32 result is the CPU's bit for bit and the selected set
 * cannot differ. Parallelism is C threads; with C = d_model (1024) and large R (d_ff rows) it is latency bound
 * (see docs/zero.md), acceptable because it runs at selection boundaries only.
 *
 * Top-k: a 32-bit radix key per column, key = 0 for NaN, else the bitwise NOT of the order-preserving map of the
 * float (-0 taken as +0, as the CPU's `!=` compares them equal), so that ascending keys are NaN first, then larger
 * importance; cub's stable radix sort of (key, column) pairs, column ids ascending on input, leaves ties in
 * ascending column order: zenflow_select.c's ranking exactly. The first k ids are then radix-sorted ascending
 * into sel. Deterministic (cub's radix sort has no atomics on values), any C up to 2^31.
 *
 * Selective AdamW: gather work[:, sel] into fp32 sel_p, cuda/adamw.cu's AdamW (DeepSpeed's CPU Adam arithmetic,
 * the same that zenflow_ref.c runs through cpu_adam.c) on (sel_p, sel_m, sel_v) with sel_g, scatter sel_p back
 * with round to nearest even into the working dtype. The state (m, v) is fp32; the working values are re-read
 * from the 16-bit weights every step (DeepSpeed's ZenFlowSelectiveAdamW updates the 16-bit parameter in place
 * too, but keeps m, v and its step count in the working dtype: here they are fp32 and the count the caller's
 * int64, a deliberate difference documented in docs/zero.md).
 */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "zenflow.cuh"

#define ZENFLOW_BLOCK 256
#define ZENFLOW_IMP_UNROLL 8

// ---- CUDA kernels

// importance (C) = fp32(sum_r fp64 |g[r, c]|), r ascending
template <typename T>
__global__ void zenflow_importance_kernel1(const T* g, int64_t R, int64_t C, float* importance) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        int64_t r = 0;
        for (; r + ZENFLOW_IMP_UNROLL <= R; r += ZENFLOW_IMP_UNROLL) {
            float x[ZENFLOW_IMP_UNROLL];
#pragma unroll
            for (int u = 0; u < ZENFLOW_IMP_UNROLL; u++) x[u] = to_f32(g[(r + u) * C + c]);
#pragma unroll
            for (int u = 0; u < ZENFLOW_IMP_UNROLL; u++) s = __dadd_rn(s, fabs((double)x[u]));
        }
        for (; r < R; r++) s = __dadd_rn(s, fabs((double)to_f32(g[r * C + c])));
        importance[c] = __double2float_rn(s);
    }
}

// keys (C): ascending key = zenflow_select.c's ranking (NaN, then larger importance); ids (C) = 0..C-1
__global__ void zenflow_topk_keys_kernel1(const float* importance, int64_t C, uint32_t* keys, int32_t* ids) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        const float x = importance[c];
        uint32_t key = 0u;  // NaN (any sign or payload): before every number
        if (!isnan(x)) {
            uint32_t u = x == 0.0f ? 0u : __float_as_uint(x);             // -0 ranks as +0
            u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);                 // unsigned order = float order
            key = ~u;                                                       // descending; >= 0x007fffff, never 0
        }
        keys[c] = key;
        ids[c] = (int32_t)c;
    }
}

// dst (R, k) fp32 = src[:, sel] of src (R, C)
template <typename T>
__global__ void zenflow_gather_kernel1(const T* src, int64_t R, int64_t C, const int32_t* sel, int64_t k, float* dst) {
    const int64_t n = R * k;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k, j = i - r * k;
        dst[i] = to_f32(src[r * C + sel[j]]);
    }
}

// dst[:, sel] of dst (R, C) = T(src (R, k)), round to nearest even
template <typename T>
__global__ void zenflow_scatter_kernel1(const float* src, int64_t R, int64_t C, const int32_t* sel, int64_t k, T* dst) {
    const int64_t n = R * k;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k, j = i - r * k;
        dst[r * C + sel[j]] = from_f32<T>(src[i]);
    }
}

// ---- launchers

template <typename T>
static void importance_launch(const void* grad, int64_t R, int64_t C, float* importance, cudaStream_t stream) {
    zenflow_importance_kernel1<T><<<grid_1d((size_t)C, ZENFLOW_BLOCK), ZENFLOW_BLOCK, 0, stream>>>(
        (const T*)grad, R, C, importance);
    CUDA_LAUNCH_CHECK();
}

template <typename T>
static void gather_launch(const void* src, const ZenflowGpuTensor* t, float* dst, cudaStream_t stream) {
    zenflow_gather_kernel1<T><<<grid_1d((size_t)(t->R * t->k), ZENFLOW_BLOCK), ZENFLOW_BLOCK, 0, stream>>>(
        (const T*)src, t->R, t->C, t->sel, t->k, dst);
    CUDA_LAUNCH_CHECK();
}

template <typename T>
static void scatter_launch(const float* src, const ZenflowGpuTensor* t, void* dst, cudaStream_t stream) {
    zenflow_scatter_kernel1<T><<<grid_1d((size_t)(t->R * t->k), ZENFLOW_BLOCK), ZENFLOW_BLOCK, 0, stream>>>(
        src, t->R, t->C, t->sel, t->k, (T*)dst);
    CUDA_LAUNCH_CHECK();
}

static void* zenflow_alloc(size_t bytes) {
    void* d = NULL;
    CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 16));
    CUDA_CHECK(cudaMemset(d, 0, bytes ? bytes : 16));
    return d;
}

extern "C" void zenflow_gpu_init(ZenflowGpuTensor* t, int64_t R, int64_t C, bool is_1d, int64_t k, DType work_dtype,
                                 float weight_decay) {
    memset(t, 0, sizeof *t);
    if (C < 0 || R < 0 || C > 2147483647)
        t5_die(T5_EXIT_FAILURE, "zenflow_gpu_init: shape (%lld, %lld) out of range", (long long)R, (long long)C);
    t->R = is_1d ? 1 : R;
    t->C = C;
    t->is_1d = is_1d;
    t->k = is_1d ? C : k;
    if (t->k < 0 || t->k > C) t5_die(T5_EXIT_FAILURE, "zenflow_gpu_init: k %lld outside [0, %lld]", (long long)k, (long long)C);
    t->work_dtype = work_dtype;
    const size_t ns = (size_t)(t->R * t->k);
    t->sel = (int32_t*)zenflow_alloc((size_t)t->k * sizeof(int32_t));
    t->sel_p = (float*)zenflow_alloc(ns * sizeof(float));
    t->sel_g = (float*)zenflow_alloc(ns * sizeof(float));
    t->sel_m = (float*)zenflow_alloc(ns * sizeof(float));
    t->sel_v = (float*)zenflow_alloc(ns * sizeof(float));
    t->kept = (float*)zenflow_alloc(ns * sizeof(float));
    if (is_1d) {
        int32_t* h = (int32_t*)malloc_check((size_t)(C ? C : 1) * sizeof(int32_t));
        for (int64_t c = 0; c < C; c++) h[c] = (int32_t)c;
        CUDA_CHECK(cudaMemcpy(t->sel, h, (size_t)C * sizeof(int32_t), cudaMemcpyHostToDevice));
        free(h);
    } else {
        t->importance = (float*)zenflow_alloc((size_t)C * sizeof(float));
        t->keys_in = (uint32_t*)zenflow_alloc((size_t)C * sizeof(uint32_t));
        t->keys_out = (uint32_t*)zenflow_alloc((size_t)C * sizeof(uint32_t));
        t->ids_in = (int32_t*)zenflow_alloc((size_t)C * sizeof(int32_t));
        t->ids_out = (int32_t*)zenflow_alloc((size_t)C * sizeof(int32_t));
        size_t pairs = 0, keys = 0;
        CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, pairs, (const uint32_t*)nullptr, (uint32_t*)nullptr,
                                                   (const int32_t*)nullptr, (int32_t*)nullptr, (int)C, 0, 32));
        CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, keys, (const int32_t*)nullptr, (int32_t*)nullptr,
                                                  (int)(t->k), 0, 32));
        t->cub_temp_bytes = pairs > keys ? pairs : keys;
        t->cub_temp = zenflow_alloc(t->cub_temp_bytes);
    }
    AdamWTensor a = {t->sel_p, t->sel_m, t->sel_v, t->sel_g, NULL, (int64_t)ns, DT_F32, DT_F16, weight_decay};
    t->plan = adamw_plan_create(&a, 1);
}

extern "C" void zenflow_gpu_free(ZenflowGpuTensor* t) {
    void* bufs[] = {t->sel, t->sel_p, t->sel_g, t->sel_m, t->sel_v, t->kept, t->importance,
                    t->keys_in, t->keys_out, t->ids_in, t->ids_out, t->cub_temp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) CUDA_CHECK(cudaFree(bufs[i]));
    adamw_plan_free(t->plan);
    memset(t, 0, sizeof *t);
}

extern "C" void zenflow_column_importance_gpu(const void* grad, DType grad_dtype, int64_t R, int64_t C,
                                              float* importance, cudaStream_t stream) {
    if (C <= 0) return;
    DTYPE_DISPATCH(grad_dtype, importance_launch, grad, R, C, importance, stream);
}

extern "C" void zenflow_select_topk_gpu(ZenflowGpuTensor* t, cudaStream_t stream) {
    if (t->is_1d) t5_die(T5_EXIT_FAILURE, "zenflow_select_topk_gpu: a 1-D tensor is never ranked");
    if (t->k == 0) return;
    zenflow_topk_keys_kernel1<<<grid_1d((size_t)t->C, ZENFLOW_BLOCK), ZENFLOW_BLOCK, 0, stream>>>(
        t->importance, t->C, t->keys_in, t->ids_in);
    CUDA_LAUNCH_CHECK();
    size_t bytes = t->cub_temp_bytes;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(t->cub_temp, bytes, t->keys_in, t->keys_out, t->ids_in, t->ids_out,
                                               (int)t->C, 0, 32, stream));
    bytes = t->cub_temp_bytes;
    CUDA_CHECK(cub::DeviceRadixSort::SortKeys(t->cub_temp, bytes, t->ids_out, t->sel, (int)t->k, 0, 32, stream));
}

extern "C" void zenflow_gpu_clear_mv(ZenflowGpuTensor* t, cudaStream_t stream) {
    const size_t bytes = (size_t)(t->R * t->k) * sizeof(float);
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemsetAsync(t->sel_m, 0, bytes, stream));
    CUDA_CHECK(cudaMemsetAsync(t->sel_v, 0, bytes, stream));
}

extern "C" void zenflow_gpu_select(ZenflowGpuTensor* t, const void* grad, DType grad_dtype, cudaStream_t stream) {
    zenflow_gpu_clear_mv(t, stream);
    if (t->is_1d) return;
    zenflow_column_importance_gpu(grad, grad_dtype, t->R, t->C, t->importance, stream);
    zenflow_select_topk_gpu(t, stream);
}

extern "C" void zenflow_gpu_gather_grad(ZenflowGpuTensor* t, const void* grad, DType grad_dtype, cudaStream_t stream) {
    if (t->k == 0 || t->R == 0) return;
    DTYPE_DISPATCH(grad_dtype, gather_launch, grad, t, t->sel_g, stream);
}

extern "C" void zenflow_gpu_keep(ZenflowGpuTensor* t, const void* work, cudaStream_t stream) {
    if (t->k == 0 || t->R == 0) return;
    DTYPE_DISPATCH(t->work_dtype, gather_launch, work, t, t->kept, stream);
}

extern "C" void zenflow_gpu_restore(ZenflowGpuTensor* t, void* work, cudaStream_t stream) {
    if (t->k == 0 || t->R == 0) return;
    DTYPE_DISPATCH(t->work_dtype, scatter_launch, t->kept, t, work, stream);
}

extern "C" void zenflow_gpu_selective_step(ZenflowGpuTensor* t, void* work, const AdamWStepArgs* args,
                                           const float* d_grad_scale, const int* d_skip, cudaStream_t stream) {
    if (t->k == 0 || t->R == 0) return;
    DTYPE_DISPATCH(t->work_dtype, gather_launch, work, t, t->sel_p, stream);
    adamw_step(t->plan, args, d_grad_scale, d_skip, stream);
    DTYPE_DISPATCH(t->work_dtype, scatter_launch, t->sel_p, t, work, stream);
}
