/*
 * zero.c: the parameter engine behind model/zero.h. Stage 0 (everything resident on the GPU) lives here;
 * stages 1-3 are the partitioned engine of part.c / gather.c / reduce.c / step.c, to which every call
 * below is handed when Z->P is set.
 */
#include "../../model/zero.h"

#include <stdio.h>
#include <string.h>

#include "../base/check.h"
#include "../../cuda/elementwise.cuh"
#include "../base/common.h"
#include "part.h"
#include "step_adafactor.h"

typedef struct {
    bool fetched;     // between fetch and release
    bool grad_ready;  // grad_ready was called this step
} UnitState;

struct ZeroEngine {
    int stage;
    DType dt;                 // working dtype X
    DType gdt;                // gradient dtype G: X or fp32
    int num_units;
    size_t* numel;            // (num_units)
    size_t* offset;           // (num_units) element offset in the flat buffers
    char** name;              // (num_units)
    UnitState* state;         // (num_units)
    size_t flat_numel;
    float* master;            // (flat_numel) fp32
    void* grad;               // (flat_numel) G
    void* working;            // (flat_numel) X; == master when X is fp32
    int grads_ready;
    cudaStream_t cur_stream;  // the stream of the current backward (zero_begin_grads)
    ZeroPart* P;              // stages 1-3 (NULL: stage 0, the fields above)
    ZeroColl coll;            // several ranks (coll.h); world 1 otherwise
    float* gathered;          // zero_gather_masters: every unit's fp32 master on this host (flat, unit offsets)
    bool world_in_backward;   // ZeroOptions.world_in_backward: the all-reduce sums without pre-dividing
};

ZeroPart* zero_part(ZeroEngine* Z) { return Z->P; }

// the unit tables every stage keeps (sizes, flat offsets, names for messages, fetch/grad bookkeeping)
static ZeroEngine* engine_new(int stage, DType dt, DType gdt, int num_units, const size_t* unit_numel,
                              const char* const* unit_name) {
    ZeroEngine* Z = calloc_check(1, sizeof *Z);
    Z->stage = stage;
    Z->dt = dt;
    Z->gdt = gdt;
    Z->num_units = num_units;
    Z->numel = calloc_check((size_t)num_units, sizeof(size_t));
    Z->offset = calloc_check((size_t)num_units, sizeof(size_t));
    Z->name = calloc_check((size_t)num_units, sizeof(char*));
    Z->state = calloc_check((size_t)num_units, sizeof(UnitState));
    for (int u = 0; u < num_units; u++) {
        Z->numel[u] = unit_numel[u];
        Z->offset[u] = Z->flat_numel;
        Z->flat_numel += CEIL_DIV(unit_numel[u], (size_t)8) * 8;  // keep every unit 16-byte aligned
        char buf[32];
        snprintf(buf, sizeof buf, "unit %d", u);
        Z->name[u] = strdup_check(unit_name && unit_name[u] ? unit_name[u] : buf);
    }
    return Z;
}

ZeroEngine* zero_create(int stage, DType dt, int num_units, const size_t* unit_numel, const char* const* unit_name,
                        char* err, size_t errlen) {
    return zero_create_ex(stage, dt, dt, num_units, unit_numel, unit_name, err, errlen);
}

ZeroEngine* zero_create_ex(int stage, DType dt, DType gdt, int num_units, const size_t* unit_numel,
                           const char* const* unit_name, char* err, size_t errlen) {
    if (stage != 0) {
        snprintf(err, errlen, "not implemented yet: ZeRO stage %d (only stage 0 exists)", stage);
        return NULL;
    }
    if (gdt != dt && gdt != DT_F32) {
        snprintf(err, errlen, "gradients in %s with %s weights are not supported (use %s or fp32)", dtype_name(gdt),
                 dtype_name(dt), dtype_name(dt));
        return NULL;
    }
    ZeroEngine* Z = engine_new(stage, dt, gdt, num_units, unit_numel, unit_name);
    size_t n = Z->flat_numel ? Z->flat_numel : 8;
    const size_t gsz = dtype_size(gdt);
    size_t bytes = n * 4 + n * gsz + (dt == DT_F32 ? 0 : n * dtype_size(dt));
    if (cudaMalloc((void**)&Z->master, n * 4) != cudaSuccess || cudaMalloc(&Z->grad, n * gsz) != cudaSuccess ||
        (dt != DT_F32 && cudaMalloc(&Z->working, n * dtype_size(dt)) != cudaSuccess)) {
        (void)cudaGetLastError();
        snprintf(err, errlen,
                 "out of GPU memory allocating the parameters: %.2f GiB for %zu elements (fp32 master + %s "
                 "grads%s%s)",
                 (double)bytes / (1024.0 * 1024 * 1024), Z->flat_numel, dtype_name(gdt), dt == DT_F32 ? "" : " + ",
                 dt == DT_F32 ? "" : dtype_name(dt));
        cudaFree(Z->master);
        cudaFree(Z->grad);
        Z->master = Z->grad = NULL;
        zero_destroy(Z);
        return NULL;
    }
    if (dt == DT_F32) Z->working = Z->master;
    CUDA_CHECK(cudaMemset(Z->master, 0, n * 4));
    CUDA_CHECK(cudaMemset(Z->grad, 0, n * gsz));
    if (dt != DT_F32) CUDA_CHECK(cudaMemset(Z->working, 0, n * dtype_size(dt)));
    return Z;
}

ZeroEngine* zero_create_opts(const ZeroOptions* o, int num_units, const size_t* unit_numel,
                             const char* const* unit_name, char* err, size_t errlen) {
    if (o->world > 1 && !o->comm) {
        snprintf(err, errlen, "internal: a ZeRO engine over %d ranks without the run's communicator", o->world);
        return NULL;
    }
    if (o->stage == 0) {
        ZeroEngine* Z = zero_create_ex(0, o->working_dtype, o->grad_dtype, num_units, unit_numel, unit_name, err,
                                       errlen);
        if (Z) {
            zcoll_init(&Z->coll, o->world > 1 ? o->comm : NULL);
            Z->world_in_backward = o->world_in_backward;
        }
        return Z;
    }
    ZeroPart* P = zp_create(o, num_units, unit_numel, unit_name, err, errlen);
    if (!P) return NULL;
    zp_step_init(P);  // the optimizer above the partition's buffers (part_step.c)
    ZeroEngine* Z = engine_new(o->stage, o->working_dtype, o->grad_dtype, num_units, unit_numel, unit_name);
    Z->P = P;
    Z->coll = P->coll;
    Z->world_in_backward = o->world_in_backward;
    return Z;
}

int zero_stage(const ZeroEngine* Z) { return Z->stage; }
bool zero_owns_optimizer(const ZeroEngine* Z) { return Z->P != NULL; }

void zero_destroy(ZeroEngine* Z) {
    if (!Z) return;
    if (Z->P) zp_step_free(Z->P);
    zp_destroy(Z->P);
    free(Z->gathered);
    if (Z->working && Z->working != Z->master) cudaFree(Z->working);
    cudaFree(Z->master);
    cudaFree(Z->grad);
    for (int u = 0; u < Z->num_units; u++) free(Z->name[u]);
    free(Z->name);
    free(Z->numel);
    free(Z->offset);
    free(Z->state);
    free(Z);
}

// Evaluation-only engines (ZeroOptions.no_optimizer_state) have no gradient buffers, optimizer state or (16-bit)
// master: a call that needs them is a bug (the trainer reaches none of them without --do_train)
static void check_trainable(const ZeroEngine* Z, const char* fn) {
    if (Z->P && Z->P->o.no_optimizer_state)
        t5_die(T5_EXIT_FAILURE, "internal: %s on an evaluation-only ZeRO stage %d engine (no optimizer state or gradient "
               "buffers: it was created without --do_train)", fn, Z->stage);
}

static void zero_check_unit(const ZeroEngine* Z, int unit, const char* fn) {
    if (unit < 0 || unit >= Z->num_units)
        t5_check_failed("ZERO", fn, "unit index out of range", __FILE__, __LINE__, fn);
}

DType zero_working_dtype(const ZeroEngine* Z) { return Z->dt; }
DType zero_grad_dtype(const ZeroEngine* Z) { return Z->gdt; }
int zero_num_units(const ZeroEngine* Z) { return Z->num_units; }
size_t zero_unit_numel(const ZeroEngine* Z, int unit) {
    zero_check_unit(Z, unit, __func__);
    return Z->numel[unit];
}

void* zero_fetch(ZeroEngine* Z, int unit, cudaStream_t stream) {
    if (Z->P) return zp_fetch(Z->P, unit, stream);
    (void)stream;  // stage 0: resident, nothing to order
    zero_check_unit(Z, unit, __func__);
    if (Z->state[unit].fetched) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s fetched twice without release", Z->name[unit]);
        t5_check_failed("ZERO", "zero_fetch", msg, __FILE__, __LINE__, __func__);
    }
    Z->state[unit].fetched = true;
    return (char*)Z->working + Z->offset[unit] * dtype_size(Z->dt);
}

void zero_release(ZeroEngine* Z, int unit, cudaStream_t stream) {
    if (Z->P) {
        zp_release(Z->P, unit, stream);
        return;
    }
    (void)stream;
    zero_check_unit(Z, unit, __func__);
    if (!Z->state[unit].fetched) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s released but not fetched", Z->name[unit]);
        t5_check_failed("ZERO", "zero_release", msg, __FILE__, __LINE__, __func__);
    }
    Z->state[unit].fetched = false;
}

void* zero_grad(ZeroEngine* Z, int unit) {
    check_trainable(Z, __func__);
    if (Z->P) return zp_grad(Z->P, unit, Z->cur_stream);
    zero_check_unit(Z, unit, __func__);
    if (Z->state[unit].grad_ready) {
        char msg[160];
        snprintf(msg, sizeof msg, "gradient of %s asked for after grad_ready in the same step", Z->name[unit]);
        t5_check_failed("ZERO", "zero_grad", msg, __FILE__, __LINE__, __func__);
    }
    return (char*)Z->grad + Z->offset[unit] * dtype_size(Z->gdt);
}

void zero_grad_ready(ZeroEngine* Z, int unit, cudaStream_t stream) {
    check_trainable(Z, __func__);
    if (Z->P) {
        zp_grad_ready(Z->P, unit, stream);
        Z->grads_ready++;
        return;
    }
    (void)stream;  // stage 0, one rank: the gradient is already where the optimizer reads it
    zero_check_unit(Z, unit, __func__);
    if (Z->state[unit].grad_ready) {
        char msg[160];
        snprintf(msg, sizeof msg, "grad_ready called twice for %s in one step", Z->name[unit]);
        t5_check_failed("ZERO", "zero_grad_ready", msg, __FILE__, __LINE__, __func__);
    }
    Z->state[unit].grad_ready = true;
    Z->grads_ready++;
}

void zero_begin_grads(ZeroEngine* Z, cudaStream_t stream) {
    check_trainable(Z, __func__);
    Z->cur_stream = stream;
    if (Z->P) {
        for (int u = 0; u < Z->num_units; u++) Z->P->u[u].grad_ready = false;
        Z->grads_ready = 0;
        zp_begin_pass(Z->P, stream);
        return;
    }
    (void)stream;  // nothing to clear: the backward writes every gradient
    for (int u = 0; u < Z->num_units; u++) Z->state[u].grad_ready = false;
    Z->grads_ready = 0;
}

bool zero_all_released(const ZeroEngine* Z) {
    if (Z->P) {
        for (int u = 0; u < Z->num_units; u++)
            if (Z->P->u[u].fetched) return false;
        return true;
    }
    for (int u = 0; u < Z->num_units; u++)
        if (Z->state[u].fetched) return false;
    return true;
}

int zero_num_grads_ready(const ZeroEngine* Z) { return Z->grads_ready; }

float* zero_master(ZeroEngine* Z, int unit) {
    if (Z->P) {
        if (zp_no_master(Z->P))
            t5_die(T5_EXIT_FAILURE, "internal: zero_master on an evaluation-only engine (no fp32 master: "
                   "zero_master_write / zero_master_write_dev / zero_master_read)");
        zp_optimizer_wait(Z->P);
        return Z->P->u[unit].master;
    }
    zero_check_unit(Z, unit, __func__);
    return Z->master + Z->offset[unit];
}

void zero_sync_working(ZeroEngine* Z, cudaStream_t stream) {
    if (Z->P) {
        zp_optimizer_wait(Z->P);
        zp_sync_working(Z->P, stream);
        return;
    }
    if (Z->dt == DT_F32 || Z->flat_numel == 0) return;
    cast(Z->working, Z->dt, Z->master, DT_F32, Z->flat_numel, stream);
}

size_t zero_unit_offset(const ZeroEngine* Z, int unit) {
    zero_check_unit(Z, unit, __func__);
    return Z->offset[unit];
}
size_t zero_flat_numel(const ZeroEngine* Z) { return Z->flat_numel; }
float* zero_flat_master(ZeroEngine* Z) { return Z->master; }
void* zero_flat_grad(ZeroEngine* Z) { return Z->grad; }

void zero_grads_to_host_f32(ZeroEngine* Z, float* out, cudaStream_t stream) {
    check_trainable(Z, __func__);
    if (Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_grads_to_host_f32 at ZeRO stage %d", Z->stage);
    if (Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_flat_grad at ZeRO stage %d", Z->stage);
    if (Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_flat_master at ZeRO stage %d", Z->stage);
    if (Z->flat_numel == 0) return;
    if (Z->gdt == DT_F32) {
        CUDA_CHECK(cudaMemcpyAsync(out, Z->grad, Z->flat_numel * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return;
    }
    const size_t chunk = T5_MIN(Z->flat_numel, (size_t)1 << 24);  // 64 MiB of fp32 at a time
    float* tmp = NULL;
    CUDA_CHECK(cudaMalloc((void**)&tmp, chunk * sizeof(float)));
    for (size_t i = 0; i < Z->flat_numel; i += chunk) {
        const size_t n = T5_MIN(chunk, Z->flat_numel - i);
        cast(tmp, DT_F32, (const char*)Z->grad + i * dtype_size(Z->gdt), Z->gdt, n, stream);
        CUDA_CHECK(cudaMemcpyAsync(out + i, tmp, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    CUDA_CHECK(cudaFree(tmp));
}

const float* zero_fp32_tensor(ZeroEngine* Z, int unit, size_t offset) {
    zero_check_unit(Z, unit, __func__);
    if (Z->P) return zp_fp32_tensor(Z->P, unit, offset);
    return Z->master + Z->offset[unit] + offset;
}

void zero_unit_owned(const ZeroEngine* Z, int unit, size_t* lo, size_t* hi) {
    zero_check_unit(Z, unit, __func__);
    if (Z->P) {
        *lo = Z->P->L.lo[unit];
        *hi = Z->P->L.hi[unit];
        return;
    }
    *lo = 0;
    *hi = Z->numel[unit];
}

void zero_set_micro_step(ZeroEngine* Z, int micro, int n_micro) {
    if (!Z->P) return;
    check_trainable(Z, __func__);
    if (n_micro < 1 || micro < 0 || micro >= n_micro)
        t5_die(T5_EXIT_FAILURE, "internal: micro-batch %d of %d", micro, n_micro);
    if (n_micro > 1 && Z->P->share_gw)
        t5_die(T5_EXIT_FAILURE, "internal: %d micro-batches, but the ZeRO engine was created for "
                                "gradient_accumulation_steps 1 (its host gradients share the 16-bit weights)", n_micro);
    Z->P->micro = micro;
    Z->P->n_micro = n_micro;
}

void zero_grad_norm(ZeroEngine* Z, float* d_norm2, int* d_overflow, cudaStream_t stream) {
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_grad_norm at ZeRO stage 0 (step0.c takes the norm)");
    check_trainable(Z, __func__);
    zp_grad_norm(Z->P, d_norm2, d_overflow, stream);
}

void zero_optimizer_step(ZeroEngine* Z, const ZeroStepArgs* a, cudaStream_t stream) {
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_optimizer_step at ZeRO stage 0 (step0.c steps)");
    check_trainable(Z, __func__);
    zp_optimizer_step(Z->P, a, stream);
}

void zero_optimizer_skip(ZeroEngine* Z, cudaStream_t stream) {
    (void)stream;
    check_trainable(Z, __func__);
    if (Z->P) zp_optimizer_skip(Z->P);
}

void zero_optimizer_wait(ZeroEngine* Z) {
    if (Z->P) zp_optimizer_wait(Z->P);
}

size_t zero_partition_numel(const ZeroEngine* Z) { return Z->P ? Z->P->L.part_total : Z->flat_numel; }

void zero_opt_state_read(ZeroEngine* Z, int which, size_t offset, size_t n, float* host_out) {
    check_trainable(Z, __func__);
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_opt_state_read at ZeRO stage 0");
    if (Z->P->ada) t5_die(T5_EXIT_FAILURE, "internal: zero_opt_state_read (Adam m, v) on an Adafactor engine "
                                           "(its state: zero_adafactor_state_read)");
    zp_optimizer_wait(Z->P);
    zp_state_read(Z->P, which, offset, n, host_out);
}

void zero_opt_state_write(ZeroEngine* Z, int which, size_t offset, size_t n, const float* host_in) {
    check_trainable(Z, __func__);
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_opt_state_write at ZeRO stage 0");
    if (Z->P->ada) t5_die(T5_EXIT_FAILURE, "internal: zero_opt_state_write (Adam m, v) on an Adafactor engine "
                                           "(its state: zero_adafactor_state_write)");
    zp_optimizer_wait(Z->P);
    zp_state_write(Z->P, which, offset, n, host_in);
}

size_t zero_adafactor_state_floats(const ZeroEngine* Z) { return Z->P ? zp_ada_state_floats(Z->P) : 0; }

void zero_adafactor_state_read(ZeroEngine* Z, size_t offset, size_t n, float* host_out) {
    check_trainable(Z, __func__);
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_adafactor_state_read at ZeRO stage 0 (step0.c's state)");
    zp_optimizer_wait(Z->P);  // the CPU units' state: the optimizer thread is idle
    zp_ada_state_io(Z->P, offset, n, host_out, true);
}

void zero_adafactor_state_write(ZeroEngine* Z, size_t offset, size_t n, const float* host_in) {
    check_trainable(Z, __func__);
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_adafactor_state_write at ZeRO stage 0 (step0.c's state)");
    zp_optimizer_wait(Z->P);
    zp_ada_state_io(Z->P, offset, n, (float*)host_in, false);
}

float zero_adafactor_last_lr(ZeroEngine* Z, int tensor) {
    check_trainable(Z, __func__);
    if (!Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_adafactor_last_lr at ZeRO stage 0 (step0.c steps)");
    return zp_optimizer_ada_lr(Z->P, tensor);
}

bool zero_hold_begin(ZeroEngine* Z, cudaStream_t stream) { return Z->P ? zp_hold_begin(Z->P, stream) : true; }
void zero_hold_end(ZeroEngine* Z, cudaStream_t stream) {
    if (Z->P) zp_hold_end(Z->P, stream);
}

void zero_stats(const ZeroEngine* Z, ZeroStats* out) {
    memset(out, 0, sizeof *out);
    if (!Z->P) {
        out->gpu_bytes = Z->flat_numel * (4 + dtype_size(Z->gdt) + (Z->dt == DT_F32 ? 0 : dtype_size(Z->dt)));
        return;
    }
    *out = Z->P->st;
    out->h2d_bytes += (double)__atomic_load_n(&Z->P->thread_h2d, __ATOMIC_RELAXED);
    if (Z->P->ring_main) out->staged_bytes = zero_ring_bytes(&Z->P->ring_main->r) + zero_ring_bytes(&Z->P->ring_opt->r);
    out->direct_bytes = (double)__atomic_load_n(&Z->P->direct_bytes, __ATOMIC_RELAXED);
    zp_nvme_stats(Z->P, out);  // offload_optimizer nvme: the swap file's bytes
    zp_hostreg_stats(Z->P, out);  // pageable buffers registered in the background
    out->unit_buf_gathered = zp_bufs_bytes(&Z->P->wbufs);
    out->unit_buf_grads = zp_bufs_bytes(&Z->P->gbufs);
    uint64_t used = 0, reserved = 0;
    if (cudaMemPoolGetAttribute(Z->P->pool, cudaMemPoolAttrUsedMemHigh, &used) == cudaSuccess &&
        cudaMemPoolGetAttribute(Z->P->pool, cudaMemPoolAttrReservedMemHigh, &reserved) == cudaSuccess) {
        out->pool_used_high = (size_t)used;
        out->pool_reserved_high = (size_t)reserved;
    }
    (void)cudaGetLastError();
}

void zero_stats_reset(ZeroEngine* Z) {
    if (!Z->P) return;
    ZeroStats* s = &Z->P->st;
    s->h2d_bytes = s->d2h_bytes = 0;
    s->gathers = s->prefetches = s->releases = s->trace_mismatches = s->grad_order_mismatches = 0;
    __atomic_store_n(&Z->P->thread_h2d, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&Z->P->direct_bytes, 0, __ATOMIC_RELAXED);
    if (Z->P->ring_main) {
        zero_ring_reset_bytes(&Z->P->ring_main->r);
        zero_ring_reset_bytes(&Z->P->ring_opt->r);
    }
}

// memcpy on every core (a unit is up to a few hundred MB; one core copies about 5 GB/s)
static void host_copy_f32(float* dst, const float* src, size_t n) {
    const size_t chunk = (size_t)1 << 20;
    const int64_t nc = (int64_t)CEIL_DIV(n, chunk);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; c++) {
        size_t o = (size_t)c * chunk;
        memcpy(dst + o, src + o, T5_MIN(chunk, n - o) * sizeof(float));
    }
}

void zero_master_write(ZeroEngine* Z, int unit, size_t offset, const float* host, size_t n) {
    size_t lo, hi;
    zero_unit_owned(Z, unit, &lo, &hi);
    if (offset < lo || offset + n > hi) t5_die(T5_EXIT_FAILURE, "internal: master write outside the owned range");
    if (Z->P) {
        zp_optimizer_wait(Z->P);
        if (zp_no_master(Z->P)) {  // evaluation only: straight into the working partition and views (part_noopt.c)
            zp_write_working(Z->P, unit, offset, host, n, false, Z->P->s_copy);
            return;
        }
        ZpUnit* U = &Z->P->u[unit];
        if (U->opt_cpu) host_copy_f32(U->master + (offset - lo), host, n);
        else CUDA_CHECK(cudaMemcpy(U->master + (offset - lo), host, n * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    CUDA_CHECK(cudaMemcpy(Z->master + Z->offset[unit] + offset, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

void zero_master_read(ZeroEngine* Z, int unit, size_t offset, float* host, size_t n) {
    if (Z->gathered) {  // zero_gather_masters: any range of any unit
        if (offset + n > Z->numel[unit]) t5_die(T5_EXIT_FAILURE, "internal: master read beyond the unit");
        host_copy_f32(host, Z->gathered + Z->offset[unit] + offset, n);
        return;
    }
    size_t lo, hi;
    zero_unit_owned(Z, unit, &lo, &hi);
    if (offset < lo || offset + n > hi) t5_die(T5_EXIT_FAILURE, "internal: master read outside the owned range");
    if (Z->P) {
        zp_optimizer_wait(Z->P);
        if (zp_no_master(Z->P)) {  // evaluation only: the working weights widened (part_noopt.c)
            zp_read_working(Z->P, unit, offset, host, n);
            return;
        }
        ZpUnit* U = &Z->P->u[unit];
        if (U->opt_cpu) host_copy_f32(host, U->master + (offset - lo), n);
        else CUDA_CHECK(cudaMemcpy(host, U->master + (offset - lo), n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    CUDA_CHECK(cudaMemcpy(host, Z->master + Z->offset[unit] + offset, n * sizeof(float), cudaMemcpyDeviceToHost));
}

void zero_master_write_dev(ZeroEngine* Z, int unit, size_t offset, const float* dev, size_t n, cudaStream_t stream) {
    size_t lo, hi;
    zero_unit_owned(Z, unit, &lo, &hi);
    if (offset < lo || offset + n > hi) t5_die(T5_EXIT_FAILURE, "internal: master write outside the owned range");
    if (Z->P && zp_no_master(Z->P)) {
        zp_write_working(Z->P, unit, offset, dev, n, true, stream);
        return;
    }
    float* m = Z->P ? zero_master(Z, unit) + (offset - lo) : Z->master + Z->offset[unit] + offset;
    CUDA_CHECK(cudaMemcpyAsync(m, dev, n * sizeof(float), cudaMemcpyDefault, stream));
}

bool zero_has_master(const ZeroEngine* Z) { return !(Z->P && zp_no_master(Z->P)); }

// ---- several ranks

void zero_dp_allreduce_mean(ZeroEngine* Z, void* buf, DType dt, size_t n, cudaStream_t s) {
    if (Z->coll.world == 1) return;
    if (Z->P) t5_die(T5_EXIT_FAILURE, "internal: zero_dp_allreduce_mean at ZeRO stage %d (the engine reduces)", Z->stage);
    // pre-divided by the world size, then summed: the order of DeepSpeed's ZeRO 1-3 reductions (its stage 0,
    // engine.allreduce_bucket, sums first and scales after: the same mean, rounded in another place; docs/multi_gpu.md);
    // world_in_backward: the backward already divided
    if (!Z->world_in_backward) scale_inplace(buf, dt, n, 1.0f / (float)Z->coll.world, s);
    zcoll_all_reduce(&Z->coll, buf, n, dt, ncclSum, s, "the gradient all-reduce");
}

void zero_gather_masters(ZeroEngine* Z, bool keep, cudaStream_t s) {
    if (Z->coll.world == 1 || !Z->P) return;  // one rank, or stage 0: every rank holds every master
    check_trainable(Z, __func__);  // evaluation only: nothing saves (engine_save_weights refuses first)
    ZeroPart* P = Z->P;
    zp_optimizer_wait(P);
    CUDA_CHECK(cudaDeviceSynchronize());
    size_t maxp = 8;
    for (int u = 0; u < Z->num_units; u++) maxp = T5_MAX(maxp, P->pnumel[u]);
    float* d = NULL;
    CUDA_CHECK(cudaMallocAsync((void**)&d, maxp * sizeof(float), s));
    free(Z->gathered);
    Z->gathered = keep ? malloc_check(T5_MAX(Z->flat_numel, (size_t)1) * sizeof(float)) : NULL;
    for (int u = 0; u < Z->num_units; u++) {
        const size_t part = P->L.part[u];
        CUDA_CHECK(cudaMemcpyAsync(d + (size_t)P->coll.rank * part, P->u[u].master, part * sizeof(float),
                                   cudaMemcpyDefault, s));
        zcoll_all_gather(&P->coll, P->coll.main, d, part, DT_F32, s, "the fp32 master gather for saving");
        if (keep) CUDA_CHECK(cudaMemcpyAsync(Z->gathered + Z->offset[u], d, Z->numel[u] * sizeof(float),
                                             cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    }
    CUDA_CHECK(cudaFreeAsync(d, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void zero_gather_masters_free(ZeroEngine* Z) {
    free(Z->gathered);
    Z->gathered = NULL;
}
