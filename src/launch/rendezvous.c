/*
 * rendezvous.c: rank 0 listens, the other ranks connect, send a hello and get the NCCL id back; the
 * sockets then carry finish / abort messages (rendezvous.h has the rules).
 */
#include "rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../base/common.h"

#define RDV_MAGIC 0x54355256u  // "T5RV"
#define RDV_VERSION 1u
#define HELLO_BYTES (40 + RDV_HOST_BYTES)
#define MSG_BYTES 512
#define REPLY_BYTES (16 + RDV_ID_BYTES + MSG_BYTES)
enum { MSG_FINISH = 1, MSG_ABORT = 2 };

typedef struct {
    int fd;        // -1: none / closed
    bool finished; // sent MSG_FINISH
    int pid;
    char host[RDV_HOST_BYTES];
} Peer;

struct Rdv {
    int rank, world;
    int npeers;    // rank 0: world (index = rank; [0] unused); others: 1 (rank 0)
    Peer* peers;
    bool failed;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void put32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static uint32_t get32(const uint8_t* p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static void put64(uint8_t* p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}
static uint64_t get64(const uint8_t* p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

static int write_all(int fd, const void* buf, size_t n) {
    const uint8_t* p = (const uint8_t*)buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

// 0 read, -1 error or EOF (errno 0 on EOF), -2 deadline passed
static int read_all(int fd, void* buf, size_t n, double deadline) {
    uint8_t* p = (uint8_t*)buf;
    while (n) {
        double left = deadline - now_s();
        if (left <= 0) return -2;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) continue;
        ssize_t k = recv(fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) errno = 0;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void this_host(const RdvOptions* o, char host[RDV_HOST_BYTES]) {
    if (o->host) {
        snprintf(host, RDV_HOST_BYTES, "%s", o->host);
        return;
    }
    if (gethostname(host, RDV_HOST_BYTES) != 0) snprintf(host, RDV_HOST_BYTES, "?");
    host[RDV_HOST_BYTES - 1] = 0;
}

// "2, 3, 5 and 12 more"
static void list_ranks(char* out, size_t cap, const bool* in, int world) {
    size_t len = 0;
    int shown = 0, missing = 0;
    out[0] = 0;
    for (int r = 0; r < world; r++) {
        if (in[r]) continue;
        missing++;
        if (shown < 16 && len < cap) {
            len += (size_t)snprintf(out + len, cap - len, "%s%d", shown ? ", " : "", r);
            shown++;
        }
    }
    if (missing > shown && len < cap) snprintf(out + len, cap - len, " and %d more", missing - shown);
}

static void send_reply(int fd, uint32_t status, const uint8_t* id, int local_rank, int local_world, const char* msg) {
    uint8_t b[REPLY_BYTES] = {0};
    put32(b, RDV_MAGIC);
    put32(b + 4, status);
    put32(b + 8, (uint32_t)local_rank);
    put32(b + 12, (uint32_t)local_world);
    if (id) memcpy(b + 16, id, RDV_ID_BYTES);
    if (msg) snprintf((char*)b + 16 + RDV_ID_BYTES, MSG_BYTES, "%s", msg);
    (void)write_all(fd, b, sizeof b);
}

static void send_msg(int fd, int type, const char* msg) {
    if (fd < 0) return;
    uint8_t b[1 + MSG_BYTES] = {0};
    b[0] = (uint8_t)type;
    if (msg) snprintf((char*)b + 1, MSG_BYTES, "%s", msg);
    (void)write_all(fd, b, type == MSG_ABORT ? sizeof b : 1);
}

static void rdv_free(Rdv* r) {
    if (!r) return;
    for (int i = 0; i < r->npeers; i++)
        if (r->peers[i].fd >= 0) close(r->peers[i].fd);
    free(r->peers);
    free(r);
}

static Rdv* rdv_new(int rank, int world, int npeers) {
    Rdv* r = (Rdv*)calloc_check(1, sizeof(Rdv));
    r->rank = rank;
    r->world = world;
    r->npeers = npeers;
    r->peers = (Peer*)calloc_check((size_t)(npeers ? npeers : 1), sizeof(Peer));
    for (int i = 0; i < npeers; i++) r->peers[i].fd = -1;
    return r;
}

// ---------------------------------------------------------------------------------------------
// rank 0

int rdv_listen(int port, char* err, size_t errlen) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
        if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            if (e == EADDRINUSE) {
                t5_set_err(err, errlen, "rendezvous: MASTER_PORT %d is already in use on rank 0's host (another run?): "
                                        "pick a free port",
                           port);
                return -1;
            }
        }
    }
    if (fd < 0) {  // no IPv6: IPv4 only
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return t5_set_err(err, errlen, "rendezvous: socket: %s", strerror(errno));
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
        if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0) {
            int e = errno;
            close(fd);
            return t5_set_err(err, errlen, "rendezvous: cannot listen on MASTER_PORT %d: %s%s", port, strerror(e),
                              e == EADDRINUSE ? " (another run?): pick a free port" : "");
        }
    }
    if (listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        return t5_set_err(err, errlen, "rendezvous: listen on port %d: %s", port, strerror(e));
    }
    return fd;
}

// the listening socket `t5train --num_gpus` opened for rank 0 (local_launch.c: T5TRAIN_RDV_FD), when it listens on
// `port`; -1 otherwise (then rank 0 binds the port itself). Taken once: the variable is cleared.
int rdv_socket_port(int fd) {
    struct sockaddr_storage a;
    socklen_t l = sizeof a;
    if (getsockname(fd, (struct sockaddr*)&a, &l) != 0) return -1;
    return a.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6*)&a)->sin6_port)
         : a.ss_family == AF_INET  ? ntohs(((struct sockaddr_in*)&a)->sin_port)
                                   : -1;
}

static int inherited_listener(int port) {
    const char* v = getenv("T5TRAIN_RDV_FD");
    if (!v || !*v) return -1;
    char* end;
    long fd = strtol(v, &end, 10);
    unsetenv("T5TRAIN_RDV_FD");
    if (*end || fd < 0 || fd > 1 << 20) return -1;
    int listening = 0;
    socklen_t ll = sizeof listening;
    if (getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) != 0 || !listening) return -1;
    const int p = rdv_socket_port((int)fd);
    if (p != port) return -1;  // MASTER_PORT was changed after the launcher: not ours to use
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return (int)fd;
}

static Rdv* rank0(const RdvOptions* o, const uint8_t id[RDV_ID_BYTES], int* local_rank, int* local_world, char* err,
                  size_t errlen) {
    const int W = o->world_size;
    double timeout = o->timeout_s > 0 ? o->timeout_s : 300;
    double deadline = now_s() + timeout;
    int lfd = inherited_listener(o->port);
    if (lfd < 0) lfd = rdv_listen(o->port, err, errlen);
    if (lfd < 0) return NULL;
    Rdv* r = rdv_new(0, W, W);
    bool* in = (bool*)calloc_check((size_t)W, sizeof(bool));
    int* lrank = (int*)calloc_check((size_t)W, sizeof(int));
    in[0] = true;
    lrank[0] = o->local_rank;
    this_host(o, r->peers[0].host);
    r->peers[0].pid = (int)getpid();
    int arrived = 1;
    char fatal[MSG_BYTES] = "";
    while (arrived < W && !fatal[0]) {
        double left = deadline - now_s();
        if (left <= 0) {
            char miss[256];
            list_ranks(miss, sizeof miss, in, W);
            snprintf(fatal, sizeof fatal, "rendezvous timed out: rank%s %s of %d did not arrive at %s:%d within %g s",
                     W - arrived > 1 ? "s" : "", miss, W, o->addr ? o->addr : "?", o->port, timeout);
            break;
        }
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)(T5_MIN(left, 1.0) * 1000) + 1);
        if (pr <= 0) continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        set_nodelay(fd);
        uint8_t h[HELLO_BYTES];
        if (read_all(fd, h, sizeof h, T5_MIN(deadline, now_s() + 10)) != 0 || get32(h) != RDV_MAGIC ||
            get32(h + 4) != RDV_VERSION) {
            t5_warn("rendezvous: ignored a connection on port %d that is not a t5train rank of this version", o->port);
            close(fd);
            continue;
        }
        int rk = (int)get32(h + 8), w = (int)get32(h + 12), lr = (int)get32(h + 16), pid = (int)get32(h + 20);
        uint64_t nonce = get64(h + 24), cfg = get64(h + 32);
        char host[RDV_HOST_BYTES];
        memcpy(host, h + 40, RDV_HOST_BYTES);
        host[RDV_HOST_BYTES - 1] = 0;
        char msg[MSG_BYTES];
        if (nonce != o->nonce) {
            snprintf(msg, sizeof msg, "rendezvous: rank %d (host %s, pid %d) belongs to another run than rank 0 at port %d "
                                      "(a different run id): refused",
                     rk, host, pid, o->port);
            t5_warn("%s", msg);
            send_reply(fd, 1, NULL, -1, -1, msg);
            close(fd);
            continue;
        }
        if (w != W)
            snprintf(fatal, sizeof fatal, "rendezvous: rank %d (host %s) has world size %d, rank 0 has %d", rk, host, w, W);
        else if (rk <= 0 || rk >= W)
            snprintf(fatal, sizeof fatal, "rendezvous: a process on host %s (pid %d) claims rank %d of %d", host, pid, rk, W);
        else if (in[rk])
            snprintf(fatal, sizeof fatal, "rendezvous: rank %d arrived twice (host %s pid %d, and host %s pid %d)", rk,
                     r->peers[rk].host, r->peers[rk].pid, host, pid);
        else if (cfg != o->config_hash)
            snprintf(fatal, sizeof fatal, "rank %d (host %s) runs a different configuration than rank 0 (config hash "
                                          "%016llx, rank 0 %016llx): give every rank the same config and flags",
                     rk, host, (unsigned long long)cfg, (unsigned long long)o->config_hash);
        if (fatal[0]) {
            send_reply(fd, 1, NULL, -1, -1, fatal);
            close(fd);
            break;
        }
        in[rk] = true;
        lrank[rk] = lr;
        r->peers[rk].fd = fd;
        r->peers[rk].pid = pid;
        snprintf(r->peers[rk].host, RDV_HOST_BYTES, "%s", host);
        arrived++;
    }
    close(lfd);
    // local ranks: the launcher's where given (two ranks of a host must not share one), else by rank order
    int* lworld = (int*)calloc_check((size_t)W, sizeof(int));
    for (int a = 0; a < W && !fatal[0]; a++) {
        int n = 0, idx = 0;
        for (int b = 0; b < W; b++) {
            if (strcmp(r->peers[a].host, r->peers[b].host) != 0) continue;
            if (b < a) idx++;
            n++;
            if (b != a && lrank[a] >= 0 && lrank[a] == lrank[b])
                snprintf(fatal, sizeof fatal, "rendezvous: ranks %d and %d on host %s both have local rank %d", T5_MIN(a, b),
                         T5_MAX(a, b), r->peers[a].host, lrank[a]);
        }
        lworld[a] = n;
        if (lrank[a] < 0) lrank[a] = idx;
    }
    for (int k = 1; k < W; k++) {
        if (r->peers[k].fd < 0) continue;
        if (fatal[0])
            send_reply(r->peers[k].fd, 1, NULL, -1, -1, fatal);
        else
            send_reply(r->peers[k].fd, 0, id, lrank[k], lworld[k], NULL);
    }
    if (local_rank) *local_rank = lrank[0];
    if (local_world) *local_world = lworld[0];
    free(in);
    free(lrank);
    free(lworld);
    if (fatal[0]) {
        t5_set_err(err, errlen, "%s", fatal);
        rdv_free(r);
        return NULL;
    }
    return r;
}

// ---------------------------------------------------------------------------------------------
// ranks 1 .. W-1

// one non-blocking connect attempt to any address of addr:port within `wait` seconds
static int try_connect(const char* addr, int port, double wait, int* last_errno, int* resolved) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(addr, ps, &hints, &res);
    if (g != 0) {
        *resolved = 0;
        *last_errno = g;
        return -1;
    }
    *resolved = 1;
    int fd = -1;
    for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        int c = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (c != 0 && errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int soerr = ETIMEDOUT;
            if (poll(&pf, 1, (int)(wait * 1000) + 1) == 1) {
                socklen_t sl = sizeof soerr;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            }
            c = soerr ? -1 : 0;
            errno = soerr;
        }
        if (c != 0) {
            *last_errno = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        set_nodelay(fd);
    }
    return fd;
}

static Rdv* rank_other(const RdvOptions* o, uint8_t id[RDV_ID_BYTES], int* local_rank, int* local_world, char* err,
                       size_t errlen) {
    double timeout = o->timeout_s > 0 ? o->timeout_s : 300;
    double t0 = now_s(), deadline = t0 + timeout;
    int fd = -1, last = 0, resolved = 0;
    while (fd < 0) {
        double left = deadline - now_s();
        if (left <= 0) {
            if (!resolved)
                t5_set_err(err, errlen, "rendezvous: MASTER_ADDR=%s does not resolve (%s)", o->addr, gai_strerror(last));
            else
                t5_set_err(err, errlen, "rendezvous timed out: rank 0 at %s:%d did not answer rank %d within %g s (%s): "
                                        "is rank 0 started, and MASTER_ADDR/MASTER_PORT the same on every rank?",
                           o->addr, o->port, o->rank, timeout, strerror(last));
            return NULL;
        }
        fd = try_connect(o->addr, o->port, T5_MIN(left, 2.0), &last, &resolved);
        if (fd < 0) usleep(100 * 1000);
    }
    uint8_t h[HELLO_BYTES] = {0};
    put32(h, RDV_MAGIC);
    put32(h + 4, RDV_VERSION);
    put32(h + 8, (uint32_t)o->rank);
    put32(h + 12, (uint32_t)o->world_size);
    put32(h + 16, (uint32_t)o->local_rank);
    put32(h + 20, (uint32_t)getpid());
    put64(h + 24, o->nonce);
    put64(h + 32, o->config_hash);
    this_host(o, (char*)h + 40);
    uint8_t b[REPLY_BYTES];
    // rank 0 answers at the latest when its own timeout strikes (started later than us at worst): a margin
    int rc = write_all(fd, h, sizeof h) ? -1 : read_all(fd, b, sizeof b, deadline + 10);
    if (rc != 0 || get32(b) != RDV_MAGIC) {
        close(fd);
        if (rc == -2)
            t5_set_err(err, errlen, "rendezvous timed out: rank 0 at %s:%d took rank %d in but sent no NCCL id within %g s",
                       o->addr, o->port, o->rank, timeout + 10);
        else
            t5_set_err(err, errlen, "rendezvous: rank 0 at %s:%d closed the connection of rank %d without an answer "
                                    "(rank 0 failed, or another program listens on that port)",
                       o->addr, o->port, o->rank);
        return NULL;
    }
    if (get32(b + 4) != 0) {
        close(fd);
        char msg[MSG_BYTES];
        memcpy(msg, b + 16 + RDV_ID_BYTES, MSG_BYTES);
        msg[MSG_BYTES - 1] = 0;
        t5_set_err(err, errlen, "%s", msg);
        return NULL;
    }
    memcpy(id, b + 16, RDV_ID_BYTES);
    if (local_rank) *local_rank = (int)get32(b + 8);
    if (local_world) *local_world = (int)get32(b + 12);
    Rdv* r = rdv_new(o->rank, o->world_size, 1);
    r->peers[0].fd = fd;
    snprintf(r->peers[0].host, RDV_HOST_BYTES, "%s", o->addr);
    return r;
}

Rdv* rdv_exchange(const RdvOptions* o, uint8_t id[RDV_ID_BYTES], int* local_rank, int* local_world_size, char* err,
                  size_t errlen) {
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size) {
        t5_set_err(err, errlen, "rendezvous: bad rank %d for world size %d", o->rank, o->world_size);
        return NULL;
    }
    if (o->world_size == 1) {
        if (local_rank) *local_rank = o->local_rank < 0 ? 0 : o->local_rank;
        if (local_world_size) *local_world_size = 1;
        return rdv_new(0, 1, 0);
    }
    if (!o->addr || !o->addr[0] || o->port < 1 || o->port > 65535) {
        t5_set_err(err, errlen, "rendezvous: %d ranks need MASTER_ADDR and MASTER_PORT (rank 0's host and a free TCP port "
                                "on it) in every rank's environment",
                   o->world_size);
        return NULL;
    }
    return o->rank == 0 ? rank0(o, id, local_rank, local_world_size, err, errlen)
                        : rank_other(o, id, local_rank, local_world_size, err, errlen);
}

// ---------------------------------------------------------------------------------------------
// liveness

int rdv_poll(Rdv* r, int timeout_ms, char* err, size_t errlen) {
    if (!r || r->npeers == 0) return 1;
    if (r->failed) return t5_set_err(err, errlen, "the run was aborted");
    struct pollfd pf[r->npeers];
    int idx[r->npeers], n = 0;
    for (int i = 0; i < r->npeers; i++) {
        if (r->peers[i].fd < 0 || r->peers[i].finished) continue;
        pf[n] = (struct pollfd){.fd = r->peers[i].fd, .events = POLLIN};
        idx[n++] = i;
    }
    if (n == 0) return 1;
    int pr = poll(pf, (nfds_t)n, timeout_ms);
    if (pr <= 0) return 0;
    for (int k = 0; k < n; k++) {
        if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Peer* p = &r->peers[idx[k]];
        int who = r->rank == 0 ? idx[k] : 0;
        uint8_t t = 0;
        ssize_t got = recv(p->fd, &t, 1, 0);
        char msg[MSG_BYTES];
        if (got == 1 && t == MSG_FINISH) {
            p->finished = true;
            continue;
        }
        if (got == 1 && t == MSG_ABORT) {
            if (read_all(p->fd, msg, MSG_BYTES, now_s() + 5) != 0) snprintf(msg, sizeof msg, "rank %d aborted", who);
            msg[MSG_BYTES - 1] = 0;
        } else if (r->rank == 0) {
            snprintf(msg, sizeof msg, "rank %d (host %s, pid %d) exited or lost its connection before finishing", who,
                     p->host, p->pid);
        } else {
            snprintf(msg, sizeof msg, "rank 0 (at %s) exited or lost its connection before finishing", p->host);
        }
        r->failed = true;
        if (r->rank == 0)  // relay to every other rank
            for (int i = 1; i < r->npeers; i++)
                if (i != idx[k] && !r->peers[i].finished) send_msg(r->peers[i].fd, MSG_ABORT, msg);
        return t5_set_err(err, errlen, "%s", msg);
    }
    return 0;
}

void rdv_abort(Rdv* r, const char* msg) {
    if (!r) return;
    r->failed = true;
    for (int i = 0; i < r->npeers; i++) send_msg(r->peers[i].fd, MSG_ABORT, msg);
}

void rdv_finish(Rdv* r) {
    if (!r) return;
    for (int i = 0; i < r->npeers; i++) send_msg(r->peers[i].fd, MSG_FINISH, NULL);
    rdv_free(r);
}

void rdv_close(Rdv* r) { rdv_free(r); }
