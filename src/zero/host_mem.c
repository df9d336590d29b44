/*
 * host_mem.c: host buffers (see host_mem.h).
 */
#include "host_mem.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../base/common.h"


static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static size_t read_u64_file(const char* path, bool* ok) {
    *ok = false;
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    if (fgets(buf, sizeof buf, f)) {
        if (strncmp(buf, "max", 3) != 0) {
            char* end;
            unsigned long long v = strtoull(buf, &end, 10);
            if (end != buf) {
                *ok = true;
                fclose(f);
                return (size_t)v;
            }
        }
    }
    fclose(f);
    return 0;
}

static size_t meminfo_field(const char* key) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    size_t v = SIZE_MAX;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = (size_t)strtoull(line + kl + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

size_t host_mem_available(void) {
    size_t avail = meminfo_field("MemAvailable");
    bool ok1, ok2;
    size_t lim = read_u64_file("/sys/fs/cgroup/memory.max", &ok1);
    size_t cur = read_u64_file("/sys/fs/cgroup/memory.current", &ok2);
    if (!ok1) {
        lim = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &ok1);
        cur = read_u64_file("/sys/fs/cgroup/memory/memory.usage_in_bytes", &ok2);
        if (ok1 && lim > ((size_t)1 << 60)) ok1 = false;  // v1 "unlimited"
    }
    // MemAvailable underestimates on VMs whose memory grows as it is touched; a cgroup limit, when set, is the
    // real bound there. T5TRAIN_HOST_MEM_GIB overrides both (a machine this heuristic reads wrong).
    if (ok1 && ok2 && lim > cur) avail = avail == SIZE_MAX ? lim - cur : T5_MAX(avail, lim - cur);
    const char* e = getenv("T5TRAIN_HOST_MEM_GIB");
    if (e && atof(e) > 0) avail = (size_t)(atof(e) * 1024.0 * 1024.0 * 1024.0);
    return avail;
}

size_t host_mem_peak_rss(void) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) v = (size_t)strtoull(line + 6, NULL, 10) * 1024;
    fclose(f);
    return v;
}

int host_buf_alloc(HostBuf* b, size_t bytes, bool pinned, const char* what, char* err, size_t errlen) {
    memset(b, 0, sizeof *b);
    if (bytes == 0) return 0;
    size_t avail = host_mem_available();
    if (bytes > avail)
        return t5_set_err(err, errlen,
                          "not enough host memory for the %s: %.2f GiB asked, %.2f GiB available (MemAvailable / "
                          "cgroup limit)",
                          what, gib(bytes), gib(avail));
    void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return t5_set_err(err, errlen, "cannot map %.2f GiB of host memory for the %s: %s", gib(bytes), what,
                          strerror(errno));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    // first touch by every core (the pages are faulted in parallel; the mapping is already zero)
    const size_t page = 4096;
    const int64_t npages = (int64_t)((bytes + page - 1) / page);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < npages; i++) ((volatile char*)p)[(size_t)i * page] = 0;
    if (pinned) {
        // one registration for the whole buffer: a copy may not span two registrations. The pages are already
        // faulted in (above, in parallel), so the driver only pins them.
        cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            munmap(p, bytes);
            return t5_set_err(err, errlen,
                              "cannot pin %.2f GiB of host memory for the %s (%s); set pin_memory false in the "
                              "offload section, or offload less (ratio)",
                              gib(bytes), what, cudaGetErrorString(e));
        }
    }
    b->ptr = p;
    b->bytes = bytes;
    b->pinned = pinned;
    return 0;
}

void host_buf_free(HostBuf* b) {
    if (!b->ptr) return;
    if (b->pinned) {
        (void)cudaHostUnregister(b->ptr);
        (void)cudaGetLastError();
    }
    munmap(b->ptr, b->bytes);
    memset(b, 0, sizeof *b);
}
