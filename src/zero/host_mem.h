/*
 * host_mem.h: host buffers of the ZeRO engine (offloaded optimizer state, gradients, 16-bit parameters).
 *
 * Pinned buffers (offload_*.pin_memory true) are allocated the fast, bounded way: anonymous mmap with
 * transparent huge pages, first touched by all cores in parallel (OpenMP), then registered with CUDA in
 * one call (cudaHostRegister only pins the faulted pages; a copy may not span two registrations), instead of one cudaHostAlloc that zeroes and pins page by page on one core
 * (the minutes DeepSpeed users wait at start-up). Pageable buffers are the same mmap without the
 * registration; transfers to and from them go through a small pinned staging ring (the engine's), until the engine
 * registers them piece by piece in the background (part_hostreg.c): those registrations are the engine's to undo
 * before host_buf_free, which unregisters only what host_buf_alloc registered (pinned true).
 * Before anything is allocated the engine asks host_mem_available() and fails with a sentence naming the
 * buffer, the bytes asked and the bytes free, never the OOM killer.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void* ptr;
    size_t bytes;
    bool pinned;  // registered with CUDA (page-locked)
} HostBuf;

// Allocates `bytes` (zero-filled). what: the buffer's name for messages. Returns 0, or -1 with a message.
int host_buf_alloc(HostBuf* b, size_t bytes, bool pinned, const char* what, char* err, size_t errlen);
void host_buf_free(HostBuf* b);

// Bytes this process may still allocate: min(MemAvailable, cgroup memory.max - memory.current) (cgroup v2
// or v1). MemTotal is not used: on some VMs it grows as memory is touched.
size_t host_mem_available(void);
// Peak resident set of this process (VmHWM), bytes; 0 if unknown.
size_t host_mem_peak_rss(void);

#ifdef __cplusplus
}
#endif
