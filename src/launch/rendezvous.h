/*
 * rendezvous.h: the TCP rendezvous that hands rank 0's NCCL unique id to every rank when MPI did not
 * start us (torchrun-style variables, Slurm srun, `t5train --num_gpus N`), and the liveness channel
 * it leaves behind.
 *
 * Rank 0 listens on MASTER_PORT (every interface); every other rank connects to MASTER_ADDR:MASTER_PORT
 * (retrying while rank 0 is not up yet) and sends a hello: rank, world size, local rank, the run nonce,
 * the config hash, its pid and host name. Rank 0 checks each hello and, once all world_size - 1 ranks
 * are in, answers each with the id (RDV_ID_BYTES opaque bytes: ncclUniqueId) and its local rank and
 * local world size (from the host names, where the launcher gave none). Refused, with one sentence
 * sent to every connected rank and returned on rank 0:
 *   - a hello from another run (a different nonce: a stale rank of an earlier job on the same port;
 *     only that connection is refused, the rendezvous goes on), a connection that is not a t5train rank;
 *   - a different world size, a rank out of range, a rank that arrives twice, a different config hash
 *     (ranks with different configurations), two ranks of one host with the same local rank;
 *   - the timeout: "ranks 2, 3 of 4 did not arrive at HOST:PORT within T s".
 * A rank that cannot reach rank 0 within the timeout says so ("rank 0 at HOST:PORT did not answer").
 *
 * After the exchange the sockets stay open (a star around rank 0) as a liveness channel: rdv_poll
 * reports a rank that exited without rdv_finish (its socket closed), and an abort message any rank sent
 * with rdv_abort; rank 0 relays both to every other rank, so one failure ends every rank with the same
 * sentence naming the rank (the NCCL watchdog of comm.c polls it). Pure C with POSIX sockets; CPU-tested
 * with forked processes on loopback (test/test_launch.c).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDV_ID_BYTES 128
#define RDV_HOST_BYTES 64

typedef struct {
    const char* addr;      // MASTER_ADDR (host name or IPv4/IPv6 literal)
    int port;              // MASTER_PORT
    int rank, world_size;
    int local_rank;        // -1: unknown (rank 0 numbers the ranks of each host by rank)
    uint64_t nonce;        // run nonce (launch_env.h); every rank of one run has the same
    uint64_t config_hash;  // hash of the resolved config; ranks must agree
    double timeout_s;      // the whole rendezvous; <= 0: 300 s
    const char* host;      // this rank's host name for messages (NULL: gethostname)
} RdvOptions;

typedef struct Rdv Rdv;

// Rank 0 passes the id in `id`; every other rank receives it there. local_rank / local_world_size
// (may be NULL) get this rank's place on its host. NULL + one sentence in err on failure.
Rdv* rdv_exchange(const RdvOptions* o, uint8_t id[RDV_ID_BYTES], int* local_rank, int* local_world_size,
                  char* err, size_t errlen);

// Waits up to timeout_ms for news on the liveness channel. 0: nothing wrong (yet); 1: every peer
// finished in order; -1: a rank died or aborted, err says which (rank 0 has relayed it to the rest).
int rdv_poll(Rdv* r, int timeout_ms, char* err, size_t errlen);

// Tells the other ranks this rank fails with msg (rank 0: every rank; others: rank 0, which relays).
void rdv_abort(Rdv* r, const char* msg);

// Orderly end: tells the peers this rank finished, closes the sockets, frees r (NULL is fine).
void rdv_finish(Rdv* r);

// Closes without the finish message (the peers see this rank as gone), frees r.
void rdv_close(Rdv* r);

// Rank 0's listening socket on `port` (0: a free one, found with getsockname), IPv6 dual stack or else IPv4,
// SO_REUSEADDR, close-on-exec; -1 with err on failure. `t5train --num_gpus` opens it before the ranks start and rank 0
// inherits it (T5TRAIN_RDV_FD), so no other program can take the port in between.
int rdv_listen(int port, char* err, size_t errlen);

// The local port a socket is bound to; -1 if none (not a socket, not bound, not IPv4 / IPv6).
int rdv_socket_port(int fd);

#ifdef __cplusplus
}
#endif
