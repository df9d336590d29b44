/*
 * bench_nvme_io.c: the O_DIRECT bandwidth of a folder's disk through t5train's NVMe I/O (src/nvme/), the floor of
 * offload_optimizer nvme (issue 28: "the disk's read/write bandwidth measured first").
 *
 *   build/bench/bench_nvme_io DIR [GiB=4] [block_size=1048576] [queue_depth=8] [threads=1] [reps=3]
 *
 * Makes an unlinked swap file of GiB under DIR (the same nvme_file_create as the engine), writes it whole from a
 * 256 MiB buffer (job by job, each job queue_depth x threads deep), then reads it back, reps times; prints GB/s
 * (10^9 bytes) for each pass and the best. The bytes are not checked here (test_nvme_io does that).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/nvme/aio.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// one pass over the file in jobs of `chunk` bytes; GB/s
static double pass(NvmeIo* io, int op, int fd, char* buf, size_t chunk, uint64_t total) {
    char err[512];
    const double t0 = now_s();
    for (uint64_t off = 0; off < total; off += chunk) {
        NvmeJob j;
        nvme_io_submit(io, &j, op, fd, "bench.swp", buf, (size_t)(total - off < chunk ? total - off : chunk), off);
        if (nvme_io_wait(io, &j, err, sizeof err)) {
            fprintf(stderr, "bench_nvme_io: %s\n", err);
            exit(1);
        }
    }
    return (double)total / (now_s() - t0) / 1e9;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [GiB=4] [block_size=1048576] [queue_depth=8] [threads=1] [reps=3]\n", argv[0]);
        return 2;
    }
    const double gib = argc > 2 ? atof(argv[2]) : 4.0;
    NvmeIoConfig c = nvme_io_config_default();
    if (argc > 3) c.block_size = (size_t)atoll(argv[3]);
    if (argc > 4) c.queue_depth = atoi(argv[4]);
    if (argc > 5) c.threads = atoi(argv[5]);
    const int reps = argc > 6 ? atoi(argv[6]) : 3;
    const size_t chunk = (size_t)256 << 20;
    const uint64_t total = nvme_align_up((uint64_t)(gib * (double)(1ull << 30)));
    char err[1024], fs[64], name[64];
    nvme_fs_name(argv[1], fs, sizeof fs);
    snprintf(name, sizeof name, "bench_nvme_io_%ld.swp", (long)getpid());
    int fd;
    NvmeIo* io;
    if (nvme_file_create(argv[1], name, total, &fd, err, sizeof err) || nvme_io_create(&io, &c, err, sizeof err)) {
        fprintf(stderr, "bench_nvme_io: %s\n", err);
        return 1;
    }
    char* buf = nvme_alloc(chunk);
    if (!buf) return 1;
    for (size_t i = 0; i < chunk; i++) buf[i] = (char)(i * 131 + 7);
    printf("bench_nvme_io: %s (%s), %.2f GiB file, block_size %zu, queue_depth %d, threads %d, jobs of 256 MiB\n",
           argv[1], fs, (double)total / (1ull << 30), c.block_size, c.queue_depth, c.threads);
    double bw = 0, br = 0;
    for (int r = 0; r < reps; r++) {
        const double w = pass(io, NVME_WRITE, fd, buf, chunk, total);
        const double rd = pass(io, NVME_READ, fd, buf, chunk, total);
        printf("pass %d: write %.2f GB/s, read %.2f GB/s\n", r + 1, w, rd);
        bw = w > bw ? w : bw;
        br = rd > br ? rd : br;
    }
    printf("best: write %.2f GB/s, read %.2f GB/s\n", bw, br);
    nvme_io_destroy(io);
    close(fd);
    free(buf);
    return 0;
}
