/*
 * bootstrap.c: MPI or the TCP rendezvous, by the launcher (bootstrap.h).
 */
#include "bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

int launch_timeout_env(const char* name, double dflt, double* out, char* err, size_t errlen) {
    const char* v = getenv(name);
    *out = dflt;
    if (!v || !v[0]) return 0;
    char* end;
    double x = strtod(v, &end);
    if (*end || !(x > 0) || x > 1e7)
        return t5_set_err(err, errlen, "bad %s=%s in the environment (seconds, a positive number)", name, v);
    *out = x;
    return 0;
}

int launch_bootstrap(const LaunchEnv* env, uint64_t config_hash, double timeout_s, MpiBootMakeId make_id, void* ctx,
                     Bootstrap* b, char* err, size_t errlen) {
    memset(b, 0, sizeof *b);
    if (timeout_s <= 0 && launch_timeout_env("T5TRAIN_RENDEZVOUS_TIMEOUT", 300, &timeout_s, err, errlen)) return -1;
    if (env->world_size <= 1) {
        b->world_size = 1;
        b->local_world_size = 1;
        b->local_rank = env->local_rank > 0 ? env->local_rank : 0;
        return 0;
    }
    if (env->source == LAUNCH_SOURCE_OPENMPI && (mpi_boot_built() || !env->have_master)) {
        if (mpi_boot(config_hash, make_id, ctx, &b->rank, &b->world_size, &b->local_rank, &b->local_world_size, b->id,
                     err, errlen))
            return -1;
        if (b->rank != env->rank || b->world_size != env->world_size)
            return t5_set_err(err, errlen, "MPI says rank %d of %d, OMPI_COMM_WORLD_RANK/SIZE say %d of %d", b->rank,
                              b->world_size, env->rank, env->world_size);
        if (env->local_rank >= 0) b->local_rank = env->local_rank;
        b->via_mpi = true;
        return 0;
    }
    if (!env->have_master)
        return t5_set_err(err, errlen, "%d ranks started by %s, but MASTER_ADDR and MASTER_PORT are not set: every rank "
                                       "needs rank 0's host and a free TCP port on it for the rendezvous",
                          env->world_size, launch_source_name(env->source));
    b->rank = env->rank;
    b->world_size = env->world_size;
    if (env->rank == 0 && make_id(b->id, ctx, err, errlen)) return -1;
    RdvOptions o = {.addr = env->master_addr, .port = env->master_port, .rank = env->rank,
                    .world_size = env->world_size, .local_rank = env->local_rank, .nonce = env->run_nonce,
                    .config_hash = config_hash, .timeout_s = timeout_s};
    b->rdv = rdv_exchange(&o, b->id, &b->local_rank, &b->local_world_size, err, errlen);
    return b->rdv ? 0 : -1;
}
