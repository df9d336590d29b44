/*
 * swap.c: the swap file's regions through a pool of buffers, with the read of k+1 and the write of k-1 overlapping
 * the caller's work on k (swap.h).
 */
#include "swap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/common.h"

struct NvmeSwap {
    NvmeSwapConfig cfg;
    NvmeIo* io;
    int fd;
    char name[4200];     // the file, for messages
    int n;
    size_t* bytes;       // (n) payload
    uint64_t* off;       // (n) offsets in the file
    uint64_t file_bytes;
    size_t slot_bytes;
    char** slot;         // (buffer_count)
    NvmeJob* rjob;       // (buffer_count) the slot's read
    NvmeJob* wjob;       // (buffer_count) the slot's write
    int* slot_k;         // (buffer_count) the sequence index the slot holds or is reading (-1: none)
    const int* seq;
    int len;
    int next_read;       // the first sequence index whose read is not issued
    bool in_pass;
};

void nvme_swap_sizes(int n, const size_t* region_bytes, int buffer_count, uint64_t* file_bytes, size_t* pool_bytes) {
    uint64_t f = 0;
    size_t mx = 0;
    for (int i = 0; i < n; i++) {
        f += nvme_align_up(region_bytes[i]);
        mx = T5_MAX(mx, (size_t)nvme_align_up(region_bytes[i]));
    }
    *file_bytes = f;
    *pool_bytes = mx * (size_t)buffer_count;
}

int nvme_swap_create(NvmeSwap** out, const char* dir, const char* file_name, int n, const size_t* region_bytes,
                     const NvmeSwapConfig* cfg, char* err, size_t errlen) {
    *out = NULL;
    if (cfg->buffer_count < 1)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "offload_optimizer.buffer_count %d: at least 1", cfg->buffer_count);
    NvmeSwap* S = calloc(1, sizeof *S);
    if (!S) return t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme: out of memory");
    S->cfg = *cfg;
    S->fd = -1;
    S->n = n;
    snprintf(S->name, sizeof S->name, "%s/%s", dir, file_name);
    const int B = cfg->buffer_count;
    S->bytes = calloc((size_t)T5_MAX(n, 1), sizeof(size_t));
    S->off = calloc((size_t)T5_MAX(n, 1), sizeof(uint64_t));
    S->slot = calloc((size_t)B, sizeof(char*));
    S->rjob = calloc((size_t)B, sizeof(NvmeJob));
    S->wjob = calloc((size_t)B, sizeof(NvmeJob));
    S->slot_k = calloc((size_t)B, sizeof(int));
    int rc = 0;
    if (!S->bytes || !S->off || !S->slot || !S->rjob || !S->wjob || !S->slot_k) {
        rc = t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme: out of memory");
        goto fail;
    }
    size_t pool;
    nvme_swap_sizes(n, region_bytes, B, &S->file_bytes, &pool);
    S->slot_bytes = pool / (size_t)B;
    for (int i = 0; i < n; i++) {
        S->bytes[i] = region_bytes[i];
        S->off[i] = i ? S->off[i - 1] + nvme_align_up(region_bytes[i - 1]) : 0;
    }
    for (int b = 0; b < B; b++) {
        S->slot_k[b] = -1;
        if (S->slot_bytes && !(S->slot[b] = nvme_alloc(S->slot_bytes))) {
            rc = t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme: cannot allocate %d buffers of %zu bytes", B,
                         S->slot_bytes);
            goto fail;
        }
    }
    if ((rc = nvme_io_create(&S->io, &cfg->io, err, errlen))) goto fail;
    if ((rc = nvme_file_create(dir, file_name, S->file_bytes, &S->fd, err, errlen))) goto fail;
    *out = S;
    return 0;
fail:
    nvme_swap_destroy(S);
    return rc;
}

void nvme_swap_destroy(NvmeSwap* S) {
    if (!S) return;
    if (S->io && S->wjob)
        for (int b = 0; b < S->cfg.buffer_count; b++) {
            nvme_io_wait(S->io, &S->rjob[b], NULL, 0);
            nvme_io_wait(S->io, &S->wjob[b], NULL, 0);
        }
    nvme_io_destroy(S->io);
    if (S->fd >= 0) close(S->fd);
    for (int b = 0; S->slot && b < S->cfg.buffer_count; b++) free(S->slot[b]);
    free(S->slot);
    free(S->rjob);
    free(S->wjob);
    free(S->slot_k);
    free(S->bytes);
    free(S->off);
    free(S);
}

uint64_t nvme_swap_file_bytes(const NvmeSwap* S) { return S->file_bytes; }
size_t nvme_swap_pool_bytes(const NvmeSwap* S) { return S->slot_bytes * (size_t)S->cfg.buffer_count; }
NvmeIo* nvme_swap_io(NvmeSwap* S) { return S->io; }

// every job of the pool waited for; the first error kept
static int wait_all(NvmeSwap* S, int rc, char* err, size_t errlen) {
    for (int b = 0; b < S->cfg.buffer_count; b++) {
        int r1 = nvme_io_wait(S->io, &S->rjob[b], rc ? NULL : err, rc ? 0 : errlen);
        if (!rc) rc = r1;
        int r2 = nvme_io_wait(S->io, &S->wjob[b], rc ? NULL : err, rc ? 0 : errlen);
        if (!rc) rc = r2;
        S->slot_k[b] = -1;
    }
    return rc;
}

static int fail_pass(NvmeSwap* S, int rc, char* err, size_t errlen) {
    rc = wait_all(S, rc, err, errlen);
    S->in_pass = false;
    return rc;
}

// issues the read of sequence index k into its slot, once the slot's last write has landed
static int issue_read(NvmeSwap* S, int k, char* err, size_t errlen) {
    const int b = k % S->cfg.buffer_count, r = S->seq[k];
    int rc = nvme_io_wait(S->io, &S->wjob[b], err, errlen);
    if (rc) return rc;
    S->slot_k[b] = k;
    nvme_io_submit(S->io, &S->rjob[b], NVME_READ, S->fd, S->name, S->slot[b], nvme_align_up(S->bytes[r]), S->off[r]);
    S->next_read = k + 1;
    return 0;
}

int nvme_swap_begin(NvmeSwap* S, const int* seq, int len, char* err, size_t errlen) {
    if (S->in_pass) t5_die(T5_EXIT_FAILURE, "nvme_swap_begin: a pass is already running (a bug)");
    for (int k = 0; k < len; k++)
        if (seq[k] < 0 || seq[k] >= S->n) t5_die(T5_EXIT_FAILURE, "nvme_swap_begin: region %d of %d (a bug)", seq[k], S->n);
    S->seq = seq;
    S->len = len;
    S->next_read = 0;
    S->in_pass = true;
    if (len > 0 && S->cfg.pipeline_read) {
        const int rc = issue_read(S, 0, err, errlen);
        if (rc) return fail_pass(S, rc, err, errlen);
    }
    return 0;
}

int nvme_swap_acquire(NvmeSwap* S, int k, void** buf, char* err, size_t errlen) {
    if (!S->in_pass || k < 0 || k >= S->len || k > S->next_read)
        t5_die(T5_EXIT_FAILURE, "nvme_swap_acquire(%d): out of order (a bug)", k);
    const int b = k % S->cfg.buffer_count;
    int rc = 0;
    if (k == S->next_read) rc = issue_read(S, k, err, errlen);
    if (!rc) rc = nvme_io_wait(S->io, &S->rjob[b], err, errlen);
    // the next region's read overlaps the caller's work on this one (its slot must not be this one's)
    if (!rc && S->cfg.pipeline_read && k + 1 < S->len && S->cfg.buffer_count > 1) rc = issue_read(S, k + 1, err, errlen);
    if (rc) return fail_pass(S, rc, err, errlen);
    *buf = S->slot[b];
    return 0;
}

int nvme_swap_release(NvmeSwap* S, int k, char* err, size_t errlen) {
    const int b = k % S->cfg.buffer_count;
    if (!S->in_pass || S->slot_k[b] != k) t5_die(T5_EXIT_FAILURE, "nvme_swap_release(%d): not acquired (a bug)", k);
    const int r = S->seq[k];
    nvme_io_submit(S->io, &S->wjob[b], NVME_WRITE, S->fd, S->name, S->slot[b], nvme_align_up(S->bytes[r]), S->off[r]);
    if (!S->cfg.pipeline_write) {
        const int rc = nvme_io_wait(S->io, &S->wjob[b], err, errlen);
        if (rc) return fail_pass(S, rc, err, errlen);
    }
    return 0;
}

int nvme_swap_end(NvmeSwap* S, char* err, size_t errlen) {
    if (!S->in_pass) return 0;
    return fail_pass(S, 0, err, errlen);
}

// the aligned blocks around [off, off + n) of region r in buffer 0: read (and, for a write, patched and written)
static int range_io(NvmeSwap* S, int r, size_t off, size_t n, void* out, const void* in, char* err, size_t errlen) {
    if (S->in_pass) t5_die(T5_EXIT_FAILURE, "nvme swap: range I/O during a pass (a bug)");
    if (r < 0 || r >= S->n || off + n > S->bytes[r])
        t5_die(T5_EXIT_FAILURE, "nvme swap: bytes [%zu, %zu) outside region %d of %zu bytes (a bug)", off, off + n, r,
               r >= 0 && r < S->n ? S->bytes[r] : 0);
    if (n == 0) return 0;
    const size_t a = off / NVME_ALIGN * NVME_ALIGN, e = nvme_align_up(off + n);
    int rc = wait_all(S, 0, err, errlen);
    if (rc) return rc;
    nvme_io_submit(S->io, &S->rjob[0], NVME_READ, S->fd, S->name, S->slot[0], e - a, S->off[r] + a);
    if ((rc = nvme_io_wait(S->io, &S->rjob[0], err, errlen))) return rc;
    if (out) {
        memcpy(out, S->slot[0] + (off - a), n);
        return 0;
    }
    memcpy(S->slot[0] + (off - a), in, n);
    nvme_io_submit(S->io, &S->wjob[0], NVME_WRITE, S->fd, S->name, S->slot[0], e - a, S->off[r] + a);
    return nvme_io_wait(S->io, &S->wjob[0], err, errlen);
}

int nvme_swap_read_range(NvmeSwap* S, int r, size_t off, size_t n, void* out, char* err, size_t errlen) {
    return range_io(S, r, off, n, out, NULL, err, errlen);
}

int nvme_swap_write_range(NvmeSwap* S, int r, size_t off, size_t n, const void* in, char* err, size_t errlen) {
    return range_io(S, r, off, n, NULL, in, err, errlen);
}
