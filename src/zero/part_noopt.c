/*
 * part_noopt.c: the evaluation-only engine's weight path (model/zero.h ZeroOptions.no_optimizer_state, 16-bit working
 * dtype): no unit has an fp32 master, so a load writes what zero_sync_working would have made from one, directly:
 *   - the working 16-bit partition: zp_unit_x_dst (stage 3's GPU partition; stages 1/2 the owned piece of the resident
 *     unit) or, with offload_param, the host partition the gathers read (whost == wpart);
 *   - the owned pieces of the fp32 views (several ranks: the other pieces arrive by zp_views_sync, as after a
 *     publish, once zp_sync_working has moved the weights version on).
 * The rounding is the one the training engine uses for the same unit, so the working weights are bit-identical to a
 * load through a master: a GPU-stepped unit is cast on the GPU (cuda/elementwise.cu cast, as zp_sync_working), a
 * CPU-stepped unit (opt_cpu) is rounded on the host (cpu_adam_f32_to_f16 / bf16, as host_round_to_x) and copied up.
 * Bounded memory: CHUNK elements of scratch at a time (device fp32 for GPU units, host fp32 + 16-bit for CPU units).
 * Every copy is synchronous (the load's callers reuse their buffers at once; start-up only, not the step's path).
 */
#include "part.h"

#include <string.h>

#include "../../cuda/elementwise.cuh"
#include "../base/check.h"
#include "../base/common.h"

#define CHUNK ((size_t)1 << 22)  // elements per scratch round (16 MiB of fp32)

static void host_round(uint16_t* dst, DType X, const float* src, size_t n) {
    if (X == DT_F16) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = cpu_adam_f32_to_f16(src[i]);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = cpu_adam_f32_to_bf16(src[i]);
    }
}

static void host_widen(float* dst, DType X, const uint16_t* src, size_t n) {
    if (X == DT_F16) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = cpu_adam_f16_to_f32(src[i]);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] = cpu_adam_bf16_to_f32(src[i]);
    }
}

// the unit's working partition at owned element `rel` (from lo): on the GPU, or its host partition (offload_param)
static void* working_at(ZeroPart* P, int u, size_t rel, bool* on_host) {
    ZpUnit* U = &P->u[u];
    void* dst = zp_unit_x_dst(P, u);
    *on_host = dst == NULL;
    if (*on_host) {
        if (!U->wpart_host || !U->wpart) zp_contract_failed(P, u, __func__, "has no working partition to load into");
        dst = U->wpart;
    }
    return (char*)dst + rel * P->xs;
}

static void check_range(ZeroPart* P, int u, size_t offset, size_t n, const char* fn) {
    if (!zp_no_master(P)) zp_contract_failed(P, u, fn, "is written without its master although the engine has one");
    if (offset < P->L.lo[u] || offset + n > P->L.hi[u])
        zp_contract_failed(P, u, fn, "range lies outside this rank's owned part");
}

// the owned pieces of the fp32 views inside [offset, offset + n) from src (host or device fp32, unit coordinates)
static void write_views(ZeroPart* P, int u, size_t offset, const float* src, size_t n) {
    ZpUnit* U = &P->u[u];
    for (int k = 0; k < U->nviews; k++) {
        const size_t a = T5_MAX(U->view_off[k], offset), b = T5_MIN(U->view_off[k] + U->view_numel[k], offset + n);
        if (b > a)
            CUDA_CHECK(cudaMemcpy(U->view_ptr[k] + (a - U->view_off[k]), src + (a - offset), (b - a) * sizeof(float),
                                  cudaMemcpyDefault));
    }
}

void zp_write_working(ZeroPart* P, int u, size_t offset, const float* src, size_t n, bool src_dev, cudaStream_t s) {
    check_range(P, u, offset, n, __func__);
    if (n == 0) return;
    CUDA_CHECK(cudaStreamSynchronize(s));  // src is final (the caller's stream, e.g. the random init's draws)
    const size_t rel = offset - P->L.lo[u];
    bool on_host = false;
    char* dst = working_at(P, u, rel, &on_host);
    if (!P->u[u].opt_cpu) {  // a GPU unit: cast on the GPU, as zp_sync_working casts its master
        float* d = NULL;
        if (!src_dev) CUDA_CHECK(cudaMalloc((void**)&d, T5_MIN(n, CHUNK) * sizeof(float)));
        for (size_t i = 0; i < n; i += CHUNK) {
            const size_t m = T5_MIN(CHUNK, n - i);
            const float* f = src + i;
            if (!src_dev) {
                CUDA_CHECK(cudaMemcpyAsync(d, src + i, m * sizeof(float), cudaMemcpyHostToDevice, s));
                f = d;
            }
            cast(dst + i * P->xs, P->X, f, DT_F32, m, s);
        }
        CUDA_CHECK(cudaStreamSynchronize(s));
        if (d) CUDA_CHECK(cudaFree(d));
    } else {  // a CPU unit: rounded on the host, as host_round_to_x rounds its master, then up if it lives on the GPU
        float* hf = src_dev ? malloc_check(T5_MIN(n, CHUNK) * sizeof(float)) : NULL;
        uint16_t* hx = on_host ? NULL : malloc_check(T5_MIN(n, CHUNK) * sizeof(uint16_t));
        for (size_t i = 0; i < n; i += CHUNK) {
            const size_t m = T5_MIN(CHUNK, n - i);
            const float* f = src + i;
            if (src_dev) {
                CUDA_CHECK(cudaMemcpy(hf, src + i, m * sizeof(float), cudaMemcpyDeviceToHost));
                f = hf;
            }
            uint16_t* x = on_host ? (uint16_t*)(dst + i * P->xs) : hx;
            host_round(x, P->X, f, m);
            if (!on_host) CUDA_CHECK(cudaMemcpy(dst + i * P->xs, hx, m * P->xs, cudaMemcpyHostToDevice));
        }
        free(hf);
        free(hx);
    }
    write_views(P, u, offset, src, n);
}

void zp_read_working(ZeroPart* P, int u, size_t offset, float* host, size_t n) {
    check_range(P, u, offset, n, __func__);
    bool on_host = false;
    const char* w = working_at(P, u, offset - P->L.lo[u], &on_host);
    if (on_host) {
        host_widen(host, P->X, (const uint16_t*)w, n);
        return;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    uint16_t* hx = malloc_check(T5_MAX(T5_MIN(n, CHUNK), (size_t)1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t m = T5_MIN(CHUNK, n - i);
        CUDA_CHECK(cudaMemcpy(hx, w + i * P->xs, m * P->xs, cudaMemcpyDeviceToHost));
        host_widen(host + i, P->X, hx, m);
    }
    free(hx);
}
