/*
 * part_nvme.c: offload_optimizer device nvme (ZeRO-Infinity) in the partitioned engine: the CPU-stepped units' Adam
 * m and v live in one swap file per rank under nvme_path (src/nvme/swap.h), one region per CPU unit holding its m
 * then its v (8 bytes per element of the unit's partition), and come into host memory only while the optimizer
 * thread steps that unit, through offload_optimizer.buffer_count buffers of the largest region. The fp32 master
 * stays in host memory (the fp32 views, a skipped step's rounding, fp32 gathers and the weights' IO read it there).
 *
 * One step (the CPU optimizer thread, part_step.c): step_begin starts a pass over the CPU units in the thread's
 * order; before a unit's step unit_in waits for its region (and, with pipeline_read, starts reading the next
 * unit's); after it unit_out writes it back (pipeline_write: without waiting, so the write of unit i-1 overlaps
 * the step of unit i); step_end waits for every write before the thread reports the step done, so whoever waited
 * for the optimizer (zp_optimizer_wait: checkpoints, evaluation) finds the file complete. The file is reserved at
 * creation and reads as zeros (fresh Adam state), so the start-up writes nothing (fast_init's effect, always).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/common.h"
#include "../nvme/swap.h"
#include "part.h"

typedef struct ZpNvme {
    NvmeSwap* S;
    int* region;   // (num_units) the unit's region, -1 for a GPU unit
    int* seq;      // (num regions) the regions in the thread's order
    int len;
    int k;         // the pass's next sequence index
} ZpNvme;

static __attribute__((noreturn)) void nvme_die(const char* what, const char* err) {
    t5_die(T5_EXIT_FAILURE, "offload_optimizer nvme: %s: %s", what, err);
}

int zp_nvme_create(ZeroPart* P, uint64_t file_bytes, size_t pool_bytes, char* err, size_t errlen) {
    const ZeroOptions* o = &P->o;
    if (!o->nvme_path[0]) return 0;
    ZpNvme* N = calloc_check(1, sizeof *N);
    P->nvme = N;
    N->region = malloc_check((size_t)P->num_units * sizeof(int));
    N->seq = malloc_check((size_t)T5_MAX(P->num_units, 1) * sizeof(int));
    size_t* rb = malloc_check((size_t)T5_MAX(P->num_units, 1) * sizeof(size_t));
    for (int u = 0; u < P->num_units; u++) N->region[u] = -1;
    // the thread's order: sub-groups in order, units in order inside each (the layout's groups are consecutive
    // unit ranges, so this is unit order over the CPU units)
    for (int g = 0; g < P->L.num_groups; g++)
        for (int u = P->L.group_first[g]; u < P->L.group_first[g] + P->L.group_count[g]; u++) {
            if (!P->L.group_cpu[g]) continue;
            N->region[u] = N->len;
            N->seq[N->len] = N->len;
            rb[N->len++] = P->L.part[u] * 8;
            P->u[u].m = P->u[u].v = NULL;  // only while the thread steps the unit (unit_in)
        }
    NvmeSwapConfig c = {.io = {.block_size = (size_t)o->aio_block_size, .queue_depth = o->aio_queue_depth,
                               .threads = o->aio_threads, .single_submit = o->aio_single_submit,
                               .overlap_events = o->aio_overlap_events},
                        .buffer_count = T5_MAX(o->buffer_count, 1),
                        .pipeline_read = o->nvme_pipeline_read,
                        .pipeline_write = o->nvme_pipeline_write};
    char name[96];
    snprintf(name, sizeof name, "t5train_optimizer_rank%d_pid%ld.swp", o->rank, (long)getpid());
    int rc = N->len ? nvme_swap_create(&N->S, o->nvme_path, name, N->len, rb, &c, err, errlen) : 0;
    free(rb);
    if (rc) return rc;
    if (N->S && (nvme_swap_file_bytes(N->S) != file_bytes || nvme_swap_pool_bytes(N->S) != pool_bytes))
        t5_die(T5_EXIT_FAILURE, "internal: the NVMe swap file / pool is %llu / %zu bytes, src/zero/estimate.c says "
               "%llu / %zu", (unsigned long long)nvme_swap_file_bytes(N->S), nvme_swap_pool_bytes(N->S),
               (unsigned long long)file_bytes, pool_bytes);
    return 0;
}

void zp_nvme_destroy(ZeroPart* P) {
    ZpNvme* N = P->nvme;
    if (!N) return;
    nvme_swap_destroy(N->S);
    free(N->region);
    free(N->seq);
    free(N);
    P->nvme = NULL;
}

void zp_nvme_step_begin(ZeroPart* P) {
    ZpNvme* N = P->nvme;
    if (!N || !N->S) return;
    char err[512];
    N->k = 0;
    if (nvme_swap_begin(N->S, N->seq, N->len, err, sizeof err)) nvme_die("reading the optimizer state", err);
}

void zp_nvme_unit_in(ZeroPart* P, int u) {
    ZpNvme* N = P->nvme;
    if (!N || !N->S || N->region[u] < 0) return;
    if (N->seq[N->k] != N->region[u]) zp_contract_failed(P, u, "zp_nvme_unit_in", "CPU units are stepped in unit order");
    void* buf;
    char err[512];
    if (nvme_swap_acquire(N->S, N->k, &buf, err, sizeof err)) nvme_die("reading the optimizer state", err);
    ZpUnit* U = &P->u[u];
    U->m = buf;
    U->v = (float*)buf + P->L.part[u];
}

void zp_nvme_unit_out(ZeroPart* P, int u) {
    ZpNvme* N = P->nvme;
    if (!N || !N->S || N->region[u] < 0) return;
    char err[512];
    if (nvme_swap_release(N->S, N->k, err, sizeof err)) nvme_die("writing the optimizer state", err);
    P->u[u].m = P->u[u].v = NULL;
    N->k++;
}

void zp_nvme_step_end(ZeroPart* P) {
    ZpNvme* N = P->nvme;
    if (!N || !N->S) return;
    char err[512];
    if (nvme_swap_end(N->S, err, sizeof err)) nvme_die("writing the optimizer state", err);
}

void zp_nvme_state_copy(ZeroPart* P, int u, int which, size_t off, size_t n, float* host, bool to_host) {
    ZpNvme* N = P->nvme;
    const size_t byte_off = ((which ? P->L.part[u] : 0) + off) * sizeof(float);
    char err[512];
    const int rc = to_host ? nvme_swap_read_range(N->S, N->region[u], byte_off, n * sizeof(float), host, err, sizeof err)
                           : nvme_swap_write_range(N->S, N->region[u], byte_off, n * sizeof(float), host, err,
                                                   sizeof err);
    if (rc) nvme_die(to_host ? "reading the optimizer state for a checkpoint" : "writing the resumed optimizer state", err);
}

void zp_nvme_stats(ZeroPart* P, ZeroStats* st) {
    ZpNvme* N = P->nvme;
    if (!N || !N->S) return;
    NvmeIoStats io;
    nvme_io_stats(nvme_swap_io(N->S), &io);
    st->nvme_file_bytes = nvme_swap_file_bytes(N->S);
    st->nvme_pool_bytes = nvme_swap_pool_bytes(N->S);
    st->nvme_read_bytes = (double)io.bytes_read;
    st->nvme_written_bytes = (double)io.bytes_written;
}
