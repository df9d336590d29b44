/*
 * swap.h: regions of a swap file on NVMe moved through a pool of host buffers (ZeRO-Infinity's optimizer swapper).
 *
 * The file holds `n` regions back to back, region i at an NVME_ALIGN-aligned offset, its payload region_bytes[i]
 * (the offloaded optimizer uses one region per CPU-stepped unit: Adam m then v). The pool is `buffer_count`
 * buffers, each the largest region rounded up to NVME_ALIGN: host memory is bounded by the pool, not by the file.
 *
 * One pass (the optimizer step) walks a sequence of regions: nvme_swap_acquire(k) returns the k-th region's bytes
 * in a buffer, nvme_swap_release(k) writes them back. Buffers are taken round robin (k % buffer_count) and reused
 * only once their write has landed.
 *   pipeline_read   acquire(k) also starts reading region k+1 into the next buffer (overlapping the caller's work
 *                   on k); else each read is done when acquire asks for it.
 *   pipeline_write  release(k) starts the write and returns (the caller steps k+1 while it lands); else release
 *                   waits for it.
 * With both and buffer_count >= 3, region k-1 is written while k is stepped and k+1 is read (DeepSpeed's
 * pipelined optimizer swapper); with fewer buffers the pass is the same, less overlapped.
 * The range calls (checkpoints) read or rewrite part of one region through buffer 0 when no pass is running.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aio.h"

typedef struct {
    NvmeIoConfig io;
    int buffer_count;      // offload_optimizer.buffer_count (4)
    bool pipeline_read;    // offload_optimizer.pipeline_read (false)
    bool pipeline_write;   // offload_optimizer.pipeline_write (false)
} NvmeSwapConfig;

typedef struct NvmeSwap NvmeSwap;

// The file is created under dir (nvme_file_create: checked, O_DIRECT, unlinked, reserved: every region reads as
// zeros until written). 0, or an exit status with the line in err.
int nvme_swap_create(NvmeSwap** S, const char* dir, const char* file_name, int n, const size_t* region_bytes,
                     const NvmeSwapConfig* cfg, char* err, size_t errlen);
void nvme_swap_destroy(NvmeSwap* S);
// bytes of the file / of the pool (what the estimate counts instead of the state)
uint64_t nvme_swap_file_bytes(const NvmeSwap* S);
size_t nvme_swap_pool_bytes(const NvmeSwap* S);
// static sizes for the estimate: the file and the pool for these regions and buffer_count
void nvme_swap_sizes(int n, const size_t* region_bytes, int buffer_count, uint64_t* file_bytes, size_t* pool_bytes);

// A pass over `len` regions in the order `seq` (kept by pointer until nvme_swap_end). Returns 0 or an exit status;
// on an error the pass is over (every job waited for) and err holds the first error's line.
int nvme_swap_begin(NvmeSwap* S, const int* seq, int len, char* err, size_t errlen);
int nvme_swap_acquire(NvmeSwap* S, int k, void** buf, char* err, size_t errlen);
int nvme_swap_release(NvmeSwap* S, int k, char* err, size_t errlen);
int nvme_swap_end(NvmeSwap* S, char* err, size_t errlen);

// Outside a pass: bytes [off, off + n) of region r into out / from in (read, modify, write back the aligned blocks)
int nvme_swap_read_range(NvmeSwap* S, int r, size_t off, size_t n, void* out, char* err, size_t errlen);
int nvme_swap_write_range(NvmeSwap* S, int r, size_t off, size_t n, const void* in, char* err, size_t errlen);
NvmeIo* nvme_swap_io(NvmeSwap* S);  // its I/O (counters)
