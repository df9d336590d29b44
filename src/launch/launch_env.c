/*
 * launch_env.c: rank, world size, local rank and the rendezvous address from the launcher's
 * environment (launch_env.h has the rules).
 */
#include "launch_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/common.h"

extern char** environ;

static const char* env_get(const char* const* envp, const char* name) {
    if (!envp) envp = (const char* const*)environ;
    size_t n = strlen(name);
    for (const char* const* p = envp; p && *p; p++)
        if (strncmp(*p, name, n) == 0 && (*p)[n] == '=') return *p + n + 1;
    return NULL;
}

// set and not empty
static const char* env_val(const char* const* envp, const char* name) {
    const char* v = env_get(envp, name);
    return v && v[0] ? v : NULL;
}

uint64_t launch_hash64(const void* data, size_t n, uint64_t seed) {
    const unsigned char* p = (const unsigned char*)data;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

int launch_parse_int(const char* s, long lo, long hi, long* out) {
    if (!s || !s[0]) return -1;
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

const char* launch_source_name(LaunchSource s) {
    switch (s) {
        case LAUNCH_SOURCE_TORCHRUN: return "torchrun-style variables (RANK/WORLD_SIZE)";
        case LAUNCH_SOURCE_OPENMPI: return "OpenMPI (OMPI_COMM_WORLD_*)";
        case LAUNCH_SOURCE_SLURM: return "Slurm (SLURM_PROCID/SLURM_NTASKS)";
        case LAUNCH_SOURCE_PMI: return "MPICH/Intel MPI (PMI_RANK/PMI_SIZE)";
        default: return "no launcher (one process)";
    }
}

// one integer variable; -1 with err when set but bad; *out = dflt when unset
static int get_int(const char* const* envp, const char* name, long lo, long hi, long dflt, long* out, char* err,
                   size_t errlen) {
    const char* v = env_val(envp, name);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (launch_parse_int(v, lo, hi, out))
        return t5_set_err(err, errlen, "bad %s=%s in the environment (an integer in [%ld, %ld])", name, v, lo, hi);
    return 0;
}

#define MAX_WORLD (1L << 20)

int launch_env_parse(LaunchEnv* e, const char* const* envp, char* err, size_t errlen) {
    memset(e, 0, sizeof *e);
    e->world_size = 1;
    e->local_rank = -1;
    e->local_world_size = -1;
    const char *rank_var = NULL, *world_var = NULL, *local_var = NULL, *local_world_var = NULL;

    if (env_val(envp, "RANK") || env_val(envp, "WORLD_SIZE")) {
        e->source = LAUNCH_SOURCE_TORCHRUN;
        rank_var = "RANK", world_var = "WORLD_SIZE", local_var = "LOCAL_RANK", local_world_var = "LOCAL_WORLD_SIZE";
    } else if (env_val(envp, "OMPI_COMM_WORLD_RANK") || env_val(envp, "OMPI_COMM_WORLD_SIZE")) {
        e->source = LAUNCH_SOURCE_OPENMPI;
        rank_var = "OMPI_COMM_WORLD_RANK", world_var = "OMPI_COMM_WORLD_SIZE";
        local_var = "OMPI_COMM_WORLD_LOCAL_RANK", local_world_var = "OMPI_COMM_WORLD_LOCAL_SIZE";
    } else if (env_val(envp, "PMI_RANK") || env_val(envp, "PMI_SIZE")) {
        e->source = LAUNCH_SOURCE_PMI;
        rank_var = "PMI_RANK", world_var = "PMI_SIZE", local_var = "MPI_LOCALRANKID";
    } else if (env_val(envp, "SLURM_PROCID") || env_val(envp, "SLURM_STEP_NUM_TASKS")) {
        e->source = LAUNCH_SOURCE_SLURM;
        rank_var = "SLURM_PROCID";
        world_var = env_val(envp, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        local_var = "SLURM_LOCALID";
    } else if (env_val(envp, "LOCAL_RANK")) {
        return t5_set_err(err, errlen,
                          "LOCAL_RANK=%s is set but RANK and WORLD_SIZE are not: set all three (as torchrun does) "
                          "or none",
                          env_val(envp, "LOCAL_RANK"));
    }

    if (e->source != LAUNCH_SOURCE_NONE) {
        const char* rv = env_val(envp, rank_var);
        const char* wv = env_val(envp, world_var);
        if (!rv || !wv)
            return t5_set_err(err, errlen, "%s=%s is set but %s is not: a launcher sets both", rv ? rank_var : world_var,
                              rv ? rv : wv, rv ? world_var : rank_var);
        long w, r;
        if (get_int(envp, world_var, 1, MAX_WORLD, 1, &w, err, errlen)) return -1;
        if (launch_parse_int(rv, 0, MAX_WORLD, &r))
            return t5_set_err(err, errlen, "bad %s=%s in the environment (an integer in [0, %ld])", rank_var, rv,
                              w - 1);
        if (r >= w)
            return t5_set_err(err, errlen, "%s=%ld is not below %s=%ld (ranks are 0 .. world size - 1)", rank_var, r,
                              world_var, w);
        e->rank = (int)r;
        e->world_size = (int)w;
        long lw = -1, lr = -1;
        if (local_world_var && get_int(envp, local_world_var, 1, w, -1, &lw, err, errlen)) return -1;
        if (get_int(envp, local_var, 0, MAX_WORLD, -1, &lr, err, errlen)) return -1;
        if (lr >= w)
            return t5_set_err(err, errlen, "%s=%ld is not below the world size %s=%ld", local_var, lr, world_var, w);
        if (lw > 0 && lr >= lw)
            return t5_set_err(err, errlen, "%s=%ld is not below %s=%ld", local_var, lr, local_world_var, lw);
        if (lr < 0 && e->source == LAUNCH_SOURCE_TORCHRUN && w > 1)
            return t5_set_err(err, errlen, "RANK and WORLD_SIZE are set but LOCAL_RANK is not: torchrun and deepspeed "
                                           "set all three; set LOCAL_RANK to this process's GPU index on its host");
        e->local_rank = (int)lr;
        e->local_world_size = (int)lw;
        // sbatch -n 8 runs the script once, with SLURM_NTASKS=8: that one process is not 8 ranks
        if (e->source == LAUNCH_SOURCE_SLURM && w > 1 && env_val(envp, "SLURM_JOB_ID") &&
            !env_val(envp, "SLURM_STEP_ID") && !env_val(envp, "SLURM_STEPID"))
            return t5_set_err(err, errlen,
                              "%s=%ld but this process was not started by srun (SLURM_STEP_ID is not set): start the "
                              "ranks with srun or scripts/train_on_multi_nodes.sh",
                              world_var, w);
    }

    const char* ma = env_val(envp, "MASTER_ADDR");
    const char* mp = env_val(envp, "MASTER_PORT");
    if (ma || mp) {
        if (!ma || !mp)
            return t5_set_err(err, errlen, "%s is set but %s is not: the rendezvous needs both (rank 0's host and a "
                                           "free TCP port on it)",
                              ma ? "MASTER_ADDR" : "MASTER_PORT", ma ? "MASTER_PORT" : "MASTER_ADDR");
        long port;
        if (launch_parse_int(mp, 1, 65535, &port))
            return t5_set_err(err, errlen, "bad MASTER_PORT=%s in the environment (a TCP port, 1..65535)", mp);
        if (strlen(ma) >= sizeof e->master_addr)
            return t5_set_err(err, errlen, "MASTER_ADDR is too long (%zu characters)", strlen(ma));
        snprintf(e->master_addr, sizeof e->master_addr, "%s", ma);
        e->master_port = (int)port;
        e->have_master = true;
    }

    // the run id: ranks of one run agree on it; a stale rank of another run is refused by the rendezvous
    const char* id = NULL;
    char slurm_id[96];
    if (e->source == LAUNCH_SOURCE_TORCHRUN && env_val(envp, "TORCHELASTIC_RUN_ID"))
        id = env_val(envp, "TORCHELASTIC_RUN_ID");
    else if (env_val(envp, "T5TRAIN_RUN_ID"))
        id = env_val(envp, "T5TRAIN_RUN_ID");
    else if (e->source == LAUNCH_SOURCE_SLURM && env_val(envp, "SLURM_JOB_ID")) {
        const char* step = env_val(envp, "SLURM_STEP_ID");
        snprintf(slurm_id, sizeof slurm_id, "slurm-%.40s.%.40s", env_val(envp, "SLURM_JOB_ID"), step ? step : "0");
        id = slurm_id;
    }
    if (id) {
        snprintf(e->run_id, sizeof e->run_id, "%s", id);
        e->run_nonce = launch_hash64(e->run_id, strlen(e->run_id), 0);
    }
    return 0;
}
