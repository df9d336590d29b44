/*
 * aio.c: the NVMe offload's asynchronous O_DIRECT I/O (aio.h): jobs cut into slices, one worker thread per slice
 * (aio.intra_op_parallelism), each with its own kernel AIO context driven by raw syscalls, `queue_depth` requests
 * of `block_size` bytes in flight. No library: the device machine has neither liburing nor libaio.
 */
#include "aio.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/aio_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/common.h"

NvmeTestHooks nvme_test_hooks;

NvmeIoConfig nvme_io_config_default(void) {
    return (NvmeIoConfig){.block_size = 1048576, .queue_depth = 8, .threads = 1, .single_submit = false,
                          .overlap_events = true};
}

typedef struct Slice {
    NvmeJob* job;
    int op, fd;
    const char* name;
    char* buf;
    size_t bytes;
    uint64_t off;
    struct Slice* next;
} Slice;

typedef struct {
    struct iocb cb;
    char* buf;
    uint64_t off;
    size_t len, done;
    bool busy;
} Req;

struct NvmeIo {
    NvmeIoConfig cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    Slice** head;  // (threads) each worker's queue
    pthread_t* th;
    int started;
    bool quit;
    NvmeIoStats st;     // under mu
    uint64_t hook_completions, hook_written;  // test hooks' counters (atomics)
};

typedef struct {
    NvmeIo* io;
    int w;
} WorkerArg;

static long sys_io_setup(unsigned n, aio_context_t* ctx) { return syscall(SYS_io_setup, n, ctx); }
static long sys_io_destroy(aio_context_t ctx) { return syscall(SYS_io_destroy, ctx); }
static long sys_io_submit(aio_context_t ctx, long n, struct iocb** cbs) { return syscall(SYS_io_submit, ctx, n, cbs); }
static long sys_io_getevents(aio_context_t ctx, long min, long max, struct io_event* ev) {
    return syscall(SYS_io_getevents, ctx, min, max, ev, NULL);
}

static void stat_add(uint64_t* field, uint64_t v) { __atomic_add_fetch(field, v, __ATOMIC_RELAXED); }

// one worker's state while it runs a slice
typedef struct {
    NvmeIo* io;
    aio_context_t ctx;
    Slice* s;
    Req* req;       // (queue_depth)
    int inflight;
    int err;
    char msg[320];
} Run;

static void run_fail(Run* r, int e, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void run_fail(Run* r, int e, const char* fmt, ...) {
    if (r->err) return;
    r->err = e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

// submits cbs[0..n): several per call unless single_submit; EINTR retried, EAGAIN retried after a pause
static void run_submit(Run* r, struct iocb** cbs, int n) {
    int waited_ms = 0;
    while (n > 0) {
        const long k = sys_io_submit(r->ctx, r->io->cfg.single_submit ? 1 : n, cbs);
        if (k > 0) {
            cbs += k;
            n -= (int)k;
            continue;
        }
        const int e = k == 0 ? EAGAIN : errno;
        if (e == EINTR) continue;
        if (e == EAGAIN && waited_ms < 10000) {
            stat_add(&r->io->st.eagain, 1);
            usleep(1000);
            waited_ms++;
            continue;
        }
        // the requests not submitted are no longer in flight
        for (int i = 0; i < n; i++) ((Req*)(uintptr_t)cbs[i]->aio_data)->busy = false;
        r->inflight -= n;
        run_fail(r, e, "nvme: io_submit on %s failed: %s", r->s->name, strerror(e));
        return;
    }
}

static void req_prepare(Run* r, Req* q) {
    memset(&q->cb, 0, sizeof q->cb);
    q->cb.aio_data = (uint64_t)(uintptr_t)q;
    q->cb.aio_lio_opcode = r->s->op == NVME_READ ? IOCB_CMD_PREAD : IOCB_CMD_PWRITE;
    q->cb.aio_fildes = (uint32_t)r->s->fd;
    q->cb.aio_buf = (uint64_t)(uintptr_t)(q->buf + q->done);
    q->cb.aio_nbytes = q->len - q->done;
    q->cb.aio_offset = (int64_t)(q->off + q->done);
    q->busy = true;
    r->inflight++;
}

// the test hooks' view of a completion's result
static long long hooked_result(Run* r, const Req* q, long long res) {
    NvmeIo* io = r->io;
    const NvmeTestHooks* h = &nvme_test_hooks;
    if (h->fail_write_errno && r->s->op == NVME_WRITE &&
        __atomic_load_n(&io->hook_written, __ATOMIC_RELAXED) >= h->write_fail_after)
        return -h->fail_write_errno;
    if (res > 0 && r->s->op == NVME_WRITE) __atomic_add_fetch(&io->hook_written, (uint64_t)res, __ATOMIC_RELAXED);
    if (h->short_every > 0 && res > 0 &&
        __atomic_add_fetch(&io->hook_completions, 1, __ATOMIC_RELAXED) % (uint64_t)h->short_every == 0) {
        const long long half = res / 2 / NVME_ALIGN * NVME_ALIGN;
        if (half > 0 && (size_t)half < q->len - q->done) return half;
    }
    return res;
}

// one completion: done, continued from its last aligned byte (short), or the slice's error
static void run_complete(Run* r, Req* q, long long res, struct iocb** again, int* nagain) {
    r->inflight--;
    q->busy = false;
    res = hooked_result(r, q, res);
    const size_t want = q->len - q->done;
    const char* what = r->s->op == NVME_READ ? "read" : "write";
    if (res < 0) {
        const int e = (int)-res;
        if (e == ENOSPC || e == EFBIG) {  // the folder's free bytes beside the bytes asked
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", r->s->name);
            char* slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            run_fail(r, e, "nvme: %s of %zu bytes at offset %" PRIu64 " of %s failed: %s (%" PRId64 " bytes free in %s)",
                     what, want, q->off + q->done, r->s->name, strerror(e), nvme_free_bytes(slash ? dir : "."),
                     slash ? dir : ".");
        }
        else
            run_fail(r, e, "nvme: %s of %zu bytes at offset %" PRIu64 " of %s failed: %s", what, want,
                     q->off + q->done, r->s->name, strerror(e));
        return;
    }
    if (r->s->op == NVME_READ) stat_add(&r->io->st.bytes_read, (uint64_t)res);
    else stat_add(&r->io->st.bytes_written, (uint64_t)res);
    if ((size_t)res >= want) return;
    const size_t adv = (size_t)res / NVME_ALIGN * NVME_ALIGN;
    if (adv == 0) {
        run_fail(r, EIO, "nvme: short %s at offset %" PRIu64 " of %s: %lld of %zu bytes (%s)", what,
                 q->off + q->done, r->s->name, res, want,
                 r->s->op == NVME_READ ? "the file is shorter than expected" : "no progress");
        return;
    }
    stat_add(&r->io->st.short_continued, 1);
    q->done += adv;
    if (r->err) return;
    req_prepare(r, q);
    again[(*nagain)++] = &q->cb;
}

static void run_slice(Run* r) {
    const NvmeIoConfig* c = &r->io->cfg;
    const int qd = c->queue_depth;
    struct iocb* batch[qd];
    struct io_event ev[qd];
    size_t next = 0;
    r->inflight = 0;
    while ((next < r->s->bytes && !r->err) || r->inflight > 0) {
        int nb = 0;
        if (!r->err && (c->overlap_events || r->inflight == 0)) {
            for (int i = 0; i < qd && next < r->s->bytes; i++) {
                Req* q = &r->req[i];
                if (q->busy) continue;
                q->buf = r->s->buf + next;
                q->off = r->s->off + next;
                q->len = T5_MIN(c->block_size, r->s->bytes - next);
                q->done = 0;
                next += q->len;
                req_prepare(r, q);
                batch[nb++] = &q->cb;
            }
            if (nb) {
                stat_add(&r->io->st.requests, (uint64_t)nb);
                pthread_mutex_lock(&r->io->mu);
                if (r->inflight > r->io->st.max_in_flight) r->io->st.max_in_flight = r->inflight;
                pthread_mutex_unlock(&r->io->mu);
                run_submit(r, batch, nb);
            }
        }
        if (r->inflight == 0) continue;
        const long n = sys_io_getevents(r->ctx, 1, qd, ev);
        if (n < 0) {
            if (errno == EINTR) continue;
            run_fail(r, errno, "nvme: io_getevents on %s failed: %s", r->s->name, strerror(errno));
            break;  // the kernel keeps the requests; the context is destroyed with the worker
        }
        int na = 0;
        for (long i = 0; i < n; i++)
            run_complete(r, (Req*)(uintptr_t)ev[i].data, (long long)ev[i].res, batch, &na);
        if (na) run_submit(r, batch, na);
    }
}

static void* worker(void* arg) {
    WorkerArg* wa = arg;
    NvmeIo* io = wa->io;
    const int w = wa->w;
    free(wa);
    Run r = {.io = io};
    r.req = calloc((size_t)io->cfg.queue_depth, sizeof(Req));
    const long rc = sys_io_setup((unsigned)io->cfg.queue_depth, &r.ctx);
    const int setup_err = rc < 0 || !r.req ? (rc < 0 ? errno : ENOMEM) : 0;
    for (;;) {
        pthread_mutex_lock(&io->mu);
        while (!io->head[w] && !io->quit) pthread_cond_wait(&io->cv_work, &io->mu);
        Slice* s = io->head[w];
        if (!s) {
            pthread_mutex_unlock(&io->mu);
            break;
        }
        io->head[w] = s->next;
        pthread_mutex_unlock(&io->mu);
        r.s = s;
        r.err = 0;
        if (setup_err) run_fail(&r, setup_err, "nvme: io_setup(%d) failed: %s (HINT: /proc/sys/fs/aio-max-nr)",
                                io->cfg.queue_depth, strerror(setup_err));
        else run_slice(&r);
        pthread_mutex_lock(&io->mu);
        if (r.err && !s->job->err) {
            s->job->err = r.err;
            snprintf(s->job->msg, sizeof s->job->msg, "%s", r.msg);
        }
        s->job->pending--;
        pthread_cond_broadcast(&io->cv_done);
        pthread_mutex_unlock(&io->mu);
        free(s);
    }
    if (rc >= 0) sys_io_destroy(r.ctx);
    free(r.req);
    return NULL;
}

int nvme_io_create(NvmeIo** out, const NvmeIoConfig* cfg, char* err, size_t errlen) {
    *out = NULL;
    if (cfg->block_size == 0 || cfg->block_size % NVME_ALIGN)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "aio.block_size %zu is not a positive multiple of %d",
                       cfg->block_size, NVME_ALIGN);
    if (cfg->queue_depth < 1 || cfg->queue_depth > 4096)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "aio.queue_depth %d is not in [1, 4096]", cfg->queue_depth);
    if (cfg->threads < 1 || cfg->threads > 256)
        return t5_errf(err, errlen, T5_EXIT_USAGE, "aio.intra_op_parallelism %d is not in [1, 256]", cfg->threads);
    NvmeIo* io = calloc(1, sizeof *io);
    if (!io) return t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme: out of memory");
    io->cfg = *cfg;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->cv_work, NULL);
    pthread_cond_init(&io->cv_done, NULL);
    io->head = calloc((size_t)cfg->threads, sizeof(Slice*));
    io->th = calloc((size_t)cfg->threads, sizeof(pthread_t));
    for (int w = 0; io->head && io->th && w < cfg->threads; w++) {
        WorkerArg* a = malloc(sizeof *a);
        if (!a) break;
        *a = (WorkerArg){io, w};
        if (pthread_create(&io->th[w], NULL, worker, a) != 0) {
            free(a);
            break;
        }
        io->started++;
    }
    if (io->started < cfg->threads) {
        nvme_io_destroy(io);
        return t5_errf(err, errlen, T5_EXIT_FAILURE, "nvme: cannot start %d I/O worker threads", cfg->threads);
    }
    *out = io;
    return 0;
}

void nvme_io_destroy(NvmeIo* io) {
    if (!io) return;
    pthread_mutex_lock(&io->mu);
    io->quit = true;
    pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
    for (int w = 0; w < io->started; w++) pthread_join(io->th[w], NULL);
    free(io->head);
    free(io->th);
    pthread_mutex_destroy(&io->mu);
    pthread_cond_destroy(&io->cv_work);
    pthread_cond_destroy(&io->cv_done);
    free(io);
}

void nvme_io_submit(NvmeIo* io, NvmeJob* job, int op, int fd, const char* name, void* buf, size_t bytes,
                    uint64_t offset) {
    memset(job, 0, sizeof *job);
    job->submitted = true;
    // slices of whole NVME_ALIGN blocks, as even as they come; at most one per worker, none empty
    const size_t blocks = (bytes + NVME_ALIGN - 1) / NVME_ALIGN;
    const int n = (int)T5_MAX((size_t)1, T5_MIN((size_t)io->cfg.threads, blocks));
    size_t start = 0;
    pthread_mutex_lock(&io->mu);
    for (int i = 0; i < n; i++) {
        const size_t end = i == n - 1 ? bytes : T5_MIN(bytes, (blocks * (size_t)(i + 1) / (size_t)n) * NVME_ALIGN);
        Slice* s = malloc(sizeof *s);
        if (!s) t5_die(T5_EXIT_FAILURE, "nvme: out of memory queueing an I/O job");
        *s = (Slice){job, op, fd, name, (char*)buf + start, end - start, offset + start, NULL};
        Slice** tail = &io->head[i];
        while (*tail) tail = &(*tail)->next;
        *tail = s;
        job->pending++;
        start = end;
    }
    pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
}

int nvme_io_wait(NvmeIo* io, NvmeJob* job, char* err, size_t errlen) {
    if (!job->submitted) return 0;
    pthread_mutex_lock(&io->mu);
    while (job->pending > 0) pthread_cond_wait(&io->cv_done, &io->mu);
    pthread_mutex_unlock(&io->mu);
    job->submitted = false;
    if (job->err) return t5_errf(err, errlen, T5_EXIT_FAILURE, "%s", job->msg);
    return 0;
}

void nvme_io_stats(NvmeIo* io, NvmeIoStats* st) {
    pthread_mutex_lock(&io->mu);
    *st = io->st;
    st->bytes_read = __atomic_load_n(&io->st.bytes_read, __ATOMIC_RELAXED);
    st->bytes_written = __atomic_load_n(&io->st.bytes_written, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&io->mu);
}
