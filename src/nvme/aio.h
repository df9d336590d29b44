/*
 * aio.h: asynchronous O_DIRECT file I/O for NVMe offload (ZeRO-Infinity), DeepSpeed's `aio` section.
 *
 * Linux kernel AIO called by raw syscalls (io_setup / io_submit / io_getevents of linux/aio_abi.h): no library.
 * A job (one read or write of `bytes` at `offset` of an O_DIRECT file descriptor, buffer, bytes and offset all
 * multiples of NVME_ALIGN) is cut into `threads` slices (aio.intra_op_parallelism), one per worker; each worker
 * cuts its slice into requests of `block_size` bytes and keeps up to `queue_depth` of them in flight on its own AIO
 * context. single_submit: one request per io_submit call (else every free slot in one call). overlap_events: new
 * requests go in as soon as one completes (else the worker waits for the whole batch before submitting more).
 *
 * A short completion (fewer bytes than asked) is continued from the last aligned byte done; a read that makes no
 * progress is the end of the file ("file shorter than expected"). io_submit's EAGAIN waits for a completion (or
 * briefly, with none in flight) and tries again; EINTR is retried. ENOSPC / EFBIG name the bytes the job needed.
 * nvme_io_wait gives the job's first error as one line.
 */
#pragma once
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NVME_ALIGN 4096  // O_DIRECT alignment of buffers, offsets and lengths (the largest logical block in use)

typedef struct {
    size_t block_size;   // bytes per request (aio.block_size, DeepSpeed 1048576); a multiple of NVME_ALIGN
    int queue_depth;     // requests in flight per worker (aio.queue_depth, 8)
    int threads;         // workers a job is split over (aio.intra_op_parallelism, 1)
    bool single_submit;  // aio.single_submit (false)
    bool overlap_events; // aio.overlap_events (true)
} NvmeIoConfig;

NvmeIoConfig nvme_io_config_default(void);  // DeepSpeed 0.19.8's aio defaults

enum { NVME_READ = 0, NVME_WRITE = 1 };

// One job; the caller owns it (zeroed by nvme_io_submit) and must nvme_io_wait it before reusing it or its buffer.
typedef struct {
    int pending;          // slices not finished (under the io's mutex)
    int err;              // first errno (0: none)
    char msg[320];        // its line
    bool submitted;
} NvmeJob;

typedef struct NvmeIo NvmeIo;

// 0, or T5_EXIT_FAILURE with the reason in err (bad config: T5_EXIT_USAGE)
int nvme_io_create(NvmeIo** io, const NvmeIoConfig* cfg, char* err, size_t errlen);
void nvme_io_destroy(NvmeIo* io);
// Queues the job and returns at once. name: the file, for messages (kept by pointer until the wait).
void nvme_io_submit(NvmeIo* io, NvmeJob* job, int op, int fd, const char* name, void* buf, size_t bytes,
                    uint64_t offset);
// Waits for the job: 0, or T5_EXIT_FAILURE with its first error in err. A job never submitted returns 0.
int nvme_io_wait(NvmeIo* io, NvmeJob* job, char* err, size_t errlen);
// Counters since creation (bytes read / written, requests, short completions continued, EAGAIN retries).
typedef struct {
    uint64_t bytes_read, bytes_written, requests, short_continued, eagain;
    int max_in_flight;
} NvmeIoStats;
void nvme_io_stats(NvmeIo* io, NvmeIoStats* st);

// Test hooks (CPU tests only; all zero in a run): every short_every-th completion is reported as half its bytes
// (rounded down to NVME_ALIGN, at least one byte short); fail_write_errno: every write request completes with
// -fail_write_errno once write_fail_after bytes were written; open_einval: nvme_file_create sees EINVAL at open.
typedef struct {
    int short_every;
    int fail_write_errno;
    uint64_t write_fail_after;
    bool open_einval;
} NvmeTestHooks;
extern NvmeTestHooks nvme_test_hooks;

// ---- files (nvme_file.c)
// Checks that dir exists, is a folder and has `bytes` free (statvfs), creates dir/name with O_DIRECT (O_EXCL),
// unlinks it at once (nothing is left behind, even after a crash: the space lives until the descriptor closes) and
// reserves `bytes` with fallocate (reads as zeros). 0 and *fd, or an error line naming the folder, the bytes needed
// and free, or the filesystem that refuses O_DIRECT.
int nvme_file_create(const char* dir, const char* name, uint64_t bytes, int* fd, char* err, size_t errlen);
// The checks nvme_file_create starts with: dir exists, is a folder, and has `bytes` free. 0, or the line in err
// (T5_EXIT_USAGE for the folder, T5_EXIT_FAILURE for the space).
int nvme_path_check(const char* dir, uint64_t bytes, char* err, size_t errlen);
// Free bytes of dir's filesystem for an unprivileged writer (statvfs f_bavail), or -1 with errno.
int64_t nvme_free_bytes(const char* dir);
// The filesystem's name from statfs's f_type ("tmpfs", "ext4", ...; "type 0x..." when unknown) into out.
void nvme_fs_name(const char* dir, char* out, size_t n);
// Aligned host memory (NVME_ALIGN) of `bytes` rounded up to NVME_ALIGN; NULL on failure.
void* nvme_alloc(size_t bytes);
static inline uint64_t nvme_align_up(uint64_t x) { return (x + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN; }
