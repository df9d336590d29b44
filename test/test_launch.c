/*
 * test_launch.c: src/launch on the CPU: the launcher environment (torchrun, OpenMPI, Slurm variables,
 * precedence, every bad or partial setting), the TCP rendezvous between 2-4 forked processes on
 * loopback (a 128-byte id reaches every rank, local ranks, a rank that never arrives is named, rank 0
 * missing, different configs, a rank twice, a stale run, two ranks on one GPU) and the liveness channel
 * (a rank that dies is named on every other rank; an orderly finish is not a failure).
 */
#include "t5test.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/common.h"
#include "../src/launch/launch_env.h"
#include "../src/launch/local_launch.h"
#include "../src/launch/rendezvous.h"
#include <time.h>

// ---------------------------------------------------------------------------------------------
// environment

static int parse(LaunchEnv* e, char* err, const char* const* envp) { return launch_env_parse(e, envp, err, 512); }

static void test_env_none(void** state) {
    (void)state;
    const char* envp[] = {"PATH=/bin", "HOME=/root", NULL};
    LaunchEnv e;
    char err[512] = "";
    assert_int_equal(parse(&e, err, envp), 0);
    assert_int_equal(e.source, LAUNCH_SOURCE_NONE);
    assert_int_equal(e.rank, 0);
    assert_int_equal(e.world_size, 1);
    assert_int_equal(e.local_rank, -1);
    assert_false(e.have_master);
    assert_true(e.run_nonce == 0);
}

static void test_env_torchrun(void** state) {
    (void)state;
    const char* envp[] = {"RANK=5", "WORLD_SIZE=8", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=node7",
                          "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=abc", "SLURM_PROCID=0", "SLURM_NTASKS=2", NULL};
    LaunchEnv e;
    char err[512] = "";
    assert_int_equal(parse(&e, err, envp), 0);
    assert_int_equal(e.source, LAUNCH_SOURCE_TORCHRUN);  // torchrun inside a Slurm allocation: torchrun wins
    assert_int_equal(e.rank, 5);
    assert_int_equal(e.world_size, 8);
    assert_int_equal(e.local_rank, 1);
    assert_int_equal(e.local_world_size, 4);
    assert_true(e.have_master);
    assert_string_equal(e.master_addr, "node7");
    assert_int_equal(e.master_port, 29500);
    assert_string_equal(e.run_id, "abc");
    assert_true(e.run_nonce != 0);
    // the same run id on another rank gives the same nonce, another id another
    const char* envp2[] = {"RANK=0", "WORLD_SIZE=8", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=abc", NULL};
    LaunchEnv e2;
    assert_int_equal(parse(&e2, err, envp2), 0);
    assert_true(e2.run_nonce == e.run_nonce);
    const char* envp3[] = {"RANK=0", "WORLD_SIZE=8", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=abd", NULL};
    assert_int_equal(parse(&e2, err, envp3), 0);
    assert_true(e2.run_nonce != e.run_nonce);
}

static void test_env_openmpi_slurm(void** state) {
    (void)state;
    LaunchEnv e;
    char err[512] = "";
    const char* mpi[] = {"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                         "OMPI_COMM_WORLD_LOCAL_SIZE=2", "SLURM_PROCID=0", "SLURM_NTASKS=1", NULL};
    assert_int_equal(parse(&e, err, mpi), 0);
    assert_int_equal(e.source, LAUNCH_SOURCE_OPENMPI);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.world_size, 4);
    assert_int_equal(e.local_rank, 1);
    assert_int_equal(e.local_world_size, 2);
    const char* slurm[] = {"SLURM_PROCID=2", "SLURM_NTASKS=4", "SLURM_LOCALID=0", "SLURM_JOB_ID=77", "SLURM_STEP_ID=3",
                           "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", NULL};
    assert_int_equal(parse(&e, err, slurm), 0);
    assert_int_equal(e.source, LAUNCH_SOURCE_SLURM);
    assert_int_equal(e.rank, 2);
    assert_int_equal(e.world_size, 4);
    assert_int_equal(e.local_rank, 0);
    assert_string_equal(e.run_id, "slurm-77.3");
    // srun's step size wins over the allocation's task count
    const char* step[] = {"SLURM_PROCID=1", "SLURM_NTASKS=8", "SLURM_STEP_NUM_TASKS=2", "SLURM_LOCALID=1", NULL};
    assert_int_equal(parse(&e, err, step), 0);
    assert_int_equal(e.world_size, 2);
    // MPICH / Intel MPI
    const char* pmi[] = {"PMI_RANK=1", "PMI_SIZE=2", "MPI_LOCALRANKID=1", "SLURM_PROCID=0", "SLURM_NTASKS=1", NULL};
    assert_int_equal(parse(&e, err, pmi), 0);
    assert_int_equal(e.source, LAUNCH_SOURCE_PMI);
    assert_int_equal(e.rank, 1);
    assert_int_equal(e.world_size, 2);
    assert_int_equal(e.local_rank, 1);
    // srun-style variables set by hand (no Slurm): accepted
    const char* hand[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0", NULL};
    assert_int_equal(parse(&e, err, hand), 0);
    assert_int_equal(e.rank, 1);
}

typedef struct {
    const char* env[8];
    const char* expect;  // a part of the message
} BadEnv;

static void test_env_bad(void** state) {
    (void)state;
    static const BadEnv cases[] = {
        {{"RANK=1", NULL}, "RANK=1 is set but WORLD_SIZE is not"},
        {{"WORLD_SIZE=2", NULL}, "WORLD_SIZE=2 is set but RANK is not"},
        {{"RANK=x", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL}, "bad RANK=x"},
        {{"RANK=1", "WORLD_SIZE=two", "LOCAL_RANK=0", NULL}, "bad WORLD_SIZE=two"},
        {{"RANK=0", "WORLD_SIZE=0", "LOCAL_RANK=0", NULL}, "bad WORLD_SIZE=0"},
        {{"RANK=-1", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL}, "bad RANK=-1"},
        {{"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL}, "RANK=2 is not below WORLD_SIZE=2"},
        {{"RANK=1", "WORLD_SIZE=2", NULL}, "LOCAL_RANK is not"},
        {{"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", NULL}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
        {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=2", NULL}, "LOCAL_RANK=2 is not below the world size"},
        {{"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1.5", NULL}, "bad LOCAL_RANK=1.5"},
        {{"LOCAL_RANK=0", NULL}, "LOCAL_RANK=0 is set but RANK and WORLD_SIZE are not"},
        {{"OMPI_COMM_WORLD_RANK=4", "OMPI_COMM_WORLD_SIZE=4", NULL}, "OMPI_COMM_WORLD_RANK=4 is not below"},
        {{"OMPI_COMM_WORLD_SIZE=4", NULL}, "OMPI_COMM_WORLD_SIZE=4 is set but OMPI_COMM_WORLD_RANK is not"},
        {{"SLURM_PROCID=0", NULL}, "SLURM_PROCID=0 is set but SLURM_NTASKS is not"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_JOB_ID=5", NULL}, "not started by srun"},
        {{"PMI_SIZE=3", NULL}, "PMI_SIZE=3 is set but PMI_RANK is not"},
        {{"MASTER_ADDR=h", NULL}, "MASTER_ADDR is set but MASTER_PORT is not"},
        {{"MASTER_PORT=29500", NULL}, "MASTER_PORT is set but MASTER_ADDR is not"},
        {{"MASTER_ADDR=h", "MASTER_PORT=70000", NULL}, "bad MASTER_PORT=70000"},
        {{"MASTER_ADDR=h", "MASTER_PORT=0", NULL}, "bad MASTER_PORT=0"},
        {{"MASTER_ADDR=h", "MASTER_PORT=29500x", NULL}, "bad MASTER_PORT=29500x"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
        LaunchEnv e;
        char err[512] = "";
        int rc = parse(&e, err, cases[i].env);
        if (rc != -1 || !strstr(err, cases[i].expect))
            fail_msg("case %zu (%s ...): rc %d, message '%s', expected '%s'", i, cases[i].env[0], rc, err,
                     cases[i].expect);
    }
}

// ---------------------------------------------------------------------------------------------
// rendezvous between forked processes

typedef struct {
    int rc;           // 0 ok, -1 failed
    int local_rank, local_world;
    uint8_t id[RDV_ID_BYTES];
    int poll_rc;      // after the exchange (modes below)
    char err[512];
    char poll_err[512];
} Result;

typedef enum { AFTER_NOTHING, AFTER_FINISH_AND_POLL, AFTER_DIE, AFTER_POLL } After;

typedef struct {
    int rank, world, local_rank;
    uint64_t nonce, cfg;
    double timeout;
    const char* host;
    After after;
} Spec;

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr*)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr*)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static void fill_id(uint8_t id[RDV_ID_BYTES], int seed) {
    for (int i = 0; i < RDV_ID_BYTES; i++) id[i] = (uint8_t)(i * 37 + seed * 11 + 5);
}

static pid_t start_rank(const Spec* s, int port, int fd_out) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid) return pid;
    Result res;
    memset(&res, 0, sizeof res);
    RdvOptions o = {.addr = "127.0.0.1", .port = port, .rank = s->rank, .world_size = s->world,
                    .local_rank = s->local_rank, .nonce = s->nonce, .config_hash = s->cfg,
                    .timeout_s = s->timeout, .host = s->host ? s->host : "testhost"};
    if (s->rank == 0) fill_id(res.id, 3);
    Rdv* r = rdv_exchange(&o, res.id, &res.local_rank, &res.local_world, res.err, sizeof res.err);
    res.rc = r ? 0 : -1;
    if (r && s->after == AFTER_DIE) _exit(9);  // no result: this rank "crashes" without finishing
    if (r && s->after == AFTER_FINISH_AND_POLL) {
        // everybody finishes; rank 0 then sees every peer finished (1)
        if (s->rank == 0) {
            res.poll_rc = 0;
            for (int k = 0; k < 100 && res.poll_rc == 0; k++)
                res.poll_rc = rdv_poll(r, 100, res.poll_err, sizeof res.poll_err);
            rdv_finish(r);
        } else {
            rdv_finish(r);
            res.poll_rc = 1;
        }
    } else if (r && s->after == AFTER_POLL) {
        res.poll_rc = 0;
        for (int k = 0; k < 100 && res.poll_rc == 0; k++) res.poll_rc = rdv_poll(r, 100, res.poll_err, sizeof res.poll_err);
        rdv_close(r);
    } else if (r) {
        rdv_finish(r);
    }
    if (write(fd_out, &res, sizeof res) != (ssize_t)sizeof res) _exit(3);
    _exit(0);
}

// starts the ranks in specs (in order, rank 0 last when late0), collects each result (rc -2: none)
static void run_ranks(const Spec* specs, int n, Result* out, bool late0) {
    int port = free_port();
    int fds[8][2];
    pid_t pids[8];
    for (int k = 0; k < n; k++) assert_int_equal(pipe(fds[k]), 0);
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n; k++) {
            bool is0 = specs[k].rank == 0;
            if ((late0 && is0) != (pass == 1)) continue;
            if (late0 && is0) usleep(300 * 1000);  // rank 0 comes up after the others already try
            pids[k] = start_rank(&specs[k], port, fds[k][1]);
        }
    for (int k = 0; k < n; k++) {
        close(fds[k][1]);
        memset(&out[k], 0, sizeof out[k]);
        out[k].rc = -2;
        Result r;
        if (read(fds[k][0], &r, sizeof r) == (ssize_t)sizeof r) out[k] = r;
        close(fds[k][0]);
        int st;
        waitpid(pids[k], &st, 0);
    }
}

static void exchange_n(int world, bool late0) {
    Spec s[4];
    for (int r = 0; r < world; r++) s[r] = (Spec){.rank = r, .world = world, .local_rank = -1, .nonce = 42, .cfg = 7,
                                                  .timeout = 20};
    Result res[4];
    run_ranks(s, world, res, late0);
    uint8_t want[RDV_ID_BYTES];
    fill_id(want, 3);
    for (int r = 0; r < world; r++) {
        if (res[r].rc != 0) fail_msg("world %d rank %d: %s", world, r, res[r].err);
        assert_memory_equal(res[r].id, want, RDV_ID_BYTES);
        assert_int_equal(res[r].local_rank, r);  // one host name: numbered by rank
        assert_int_equal(res[r].local_world, world);
    }
}

static void test_rdv_exchange_2_3_4(void** state) {
    (void)state;
    exchange_n(2, false);
    exchange_n(3, true);
    exchange_n(4, true);
}

static void test_rdv_world_one(void** state) {
    (void)state;
    RdvOptions o = {.rank = 0, .world_size = 1, .local_rank = -1};
    uint8_t id[RDV_ID_BYTES] = {0};
    int lr = -5, lw = -5;
    char err[256];
    Rdv* r = rdv_exchange(&o, id, &lr, &lw, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(lr, 0);
    assert_int_equal(lw, 1);
    assert_int_equal(rdv_poll(r, 0, err, sizeof err), 1);
    rdv_finish(r);
    // several ranks without an address
    o.world_size = 2;
    assert_null(rdv_exchange(&o, id, &lr, &lw, err, sizeof err));
    assert_non_null(strstr(err, "need MASTER_ADDR and MASTER_PORT"));
}

static void test_rdv_local_ranks_by_host(void** state) {
    (void)state;
    // ranks 0, 2 on host a; 1, 3 on host b: local ranks 0, 0, 1, 1
    Spec s[4];
    const char* hosts[4] = {"a", "b", "a", "b"};
    for (int r = 0; r < 4; r++)
        s[r] = (Spec){.rank = r, .world = 4, .local_rank = -1, .nonce = 1, .cfg = 1, .timeout = 20, .host = hosts[r]};
    Result res[4];
    run_ranks(s, 4, res, false);
    int want[4] = {0, 0, 1, 1};
    for (int r = 0; r < 4; r++) {
        if (res[r].rc != 0) fail_msg("rank %d: %s", r, res[r].err);
        assert_int_equal(res[r].local_rank, want[r]);
        assert_int_equal(res[r].local_world, 2);
    }
    // the launcher's local ranks clash on host a
    for (int r = 0; r < 4; r++) s[r].local_rank = r / 2 == 0 ? 0 : r - 2;  // 0, 0, 0, 1
    run_ranks(s, 4, res, false);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(res[r].rc, -1);
        if (!strstr(res[r].err, "ranks 0 and 2 on host a both have local rank 0")) fail_msg("rank %d: %s", r, res[r].err);
    }
}

static void test_rdv_missing_rank(void** state) {
    (void)state;
    // world 4, rank 2 never comes
    Spec s[3] = {{.rank = 0, .world = 4, .local_rank = -1, .timeout = 1.5},
                 {.rank = 1, .world = 4, .local_rank = -1, .timeout = 1.5},
                 {.rank = 3, .world = 4, .local_rank = -1, .timeout = 1.5}};
    Result res[3];
    run_ranks(s, 3, res, false);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(res[k].rc, -1);
        if (!strstr(res[k].err, "rank 2 of 4 did not arrive at 127.0.0.1:")) fail_msg("rank %d: %s", s[k].rank, res[k].err);
    }
    // rank 0 never comes
    Spec one = {.rank = 1, .world = 2, .local_rank = -1, .timeout = 1};
    run_ranks(&one, 1, res, false);
    assert_int_equal(res[0].rc, -1);
    if (!strstr(res[0].err, "rank 0 at 127.0.0.1:") || !strstr(res[0].err, "did not answer rank 1 within 1 s"))
        fail_msg("%s", res[0].err);
}

static void test_rdv_refusals(void** state) {
    (void)state;
    Result res[3];
    // a different configuration
    Spec cfg[2] = {{.rank = 0, .world = 2, .local_rank = -1, .cfg = 1, .timeout = 10},
                   {.rank = 1, .world = 2, .local_rank = -1, .cfg = 2, .timeout = 10, .host = "hostb"}};
    run_ranks(cfg, 2, res, false);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(res[k].rc, -1);
        if (!strstr(res[k].err, "rank 1 (host hostb) runs a different configuration than rank 0"))
            fail_msg("rank %d: %s", k, res[k].err);
    }
    // a different world size
    Spec ws[2] = {{.rank = 0, .world = 2, .local_rank = -1, .timeout = 10},
                  {.rank = 1, .world = 3, .local_rank = -1, .timeout = 10}};
    run_ranks(ws, 2, res, false);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(res[k].rc, -1);
        if (!strstr(res[k].err, "rank 1 (host testhost) has world size 3, rank 0 has 2")) fail_msg("%s", res[k].err);
    }
    // a rank twice
    Spec twice[3] = {{.rank = 0, .world = 3, .local_rank = -1, .timeout = 10},
                     {.rank = 1, .world = 3, .local_rank = -1, .timeout = 10},
                     {.rank = 1, .world = 3, .local_rank = -1, .timeout = 10}};
    run_ranks(twice, 3, res, false);
    assert_int_equal(res[0].rc, -1);
    if (!strstr(res[0].err, "rank 1 arrived twice")) fail_msg("%s", res[0].err);
    // a stale rank of another run is refused alone; the run's own ranks go on
    Spec stale[3] = {{.rank = 0, .world = 2, .local_rank = -1, .nonce = 5, .timeout = 10},
                     {.rank = 1, .world = 2, .local_rank = -1, .nonce = 6, .timeout = 10},
                     {.rank = 1, .world = 2, .local_rank = -1, .nonce = 5, .timeout = 10}};
    int port = free_port();
    int fds[3][2];
    pid_t pids[3];
    for (int k = 0; k < 3; k++) assert_int_equal(pipe(fds[k]), 0);
    pids[0] = start_rank(&stale[0], port, fds[0][1]);
    pids[1] = start_rank(&stale[1], port, fds[1][1]);
    usleep(500 * 1000);  // the stale one first
    pids[2] = start_rank(&stale[2], port, fds[2][1]);
    for (int k = 0; k < 3; k++) {
        close(fds[k][1]);
        assert_int_equal(read(fds[k][0], &res[k], sizeof res[k]), (ssize_t)sizeof res[k]);
        close(fds[k][0]);
        waitpid(pids[k], NULL, 0);
    }
    if (res[0].rc != 0) fail_msg("rank 0: %s", res[0].err);
    assert_int_equal(res[2].rc, 0);
    assert_int_equal(res[1].rc, -1);
    if (!strstr(res[1].err, "belongs to another run")) fail_msg("%s", res[1].err);
}

static void test_rdv_liveness(void** state) {
    (void)state;
    // rank 2 dies after the exchange: ranks 0 and 1 both name it
    Spec s[3] = {{.rank = 0, .world = 3, .local_rank = -1, .timeout = 10, .after = AFTER_POLL},
                 {.rank = 1, .world = 3, .local_rank = -1, .timeout = 10, .after = AFTER_POLL},
                 {.rank = 2, .world = 3, .local_rank = -1, .timeout = 10, .host = "hostc", .after = AFTER_DIE}};
    Result res[3];
    run_ranks(s, 3, res, false);
    for (int k = 0; k < 2; k++) {
        if (res[k].rc != 0) fail_msg("rank %d: %s", k, res[k].err);
        assert_int_equal(res[k].poll_rc, -1);
        if (!strstr(res[k].poll_err, "rank 2 (host hostc, pid ") || !strstr(res[k].poll_err, "exited"))
            fail_msg("rank %d: %s", k, res[k].poll_err);
    }
    assert_int_equal(res[2].rc, -2);
    // rank 0 dies: rank 1 names rank 0
    Spec s0[2] = {{.rank = 0, .world = 2, .local_rank = -1, .timeout = 10, .after = AFTER_DIE},
                  {.rank = 1, .world = 2, .local_rank = -1, .timeout = 10, .after = AFTER_POLL}};
    run_ranks(s0, 2, res, false);
    assert_int_equal(res[1].poll_rc, -1);
    if (!strstr(res[1].poll_err, "rank 0 (at 127.0.0.1) exited")) fail_msg("%s", res[1].poll_err);
    // everyone finishes: no failure
    Spec f[3];
    for (int r = 0; r < 3; r++)
        f[r] = (Spec){.rank = r, .world = 3, .local_rank = -1, .timeout = 10, .after = AFTER_FINISH_AND_POLL};
    run_ranks(f, 3, res, false);
    for (int k = 0; k < 3; k++) {
        if (res[k].rc != 0) fail_msg("rank %d: %s", k, res[k].err);
        if (res[k].poll_rc != 1) fail_msg("rank %d: poll %d %s", k, res[k].poll_rc, res[k].poll_err);
    }
}


// ---------------------------------------------------------------------------------------------
// t5train --num_gpus N: the local launcher

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_local_launch_env(void** state) {
    (void)state;
    char* out = t5_path_join(t5test_tmpdir(), "ranks.txt");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "echo \"rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lw=$LOCAL_WORLD_SIZE addr=$MASTER_ADDR "
             "port=$MASTER_PORT run=${T5TRAIN_RUN_ID:+set}\" >> %s",
             out);
    char* argv[] = {"sh", "-c", cmd, NULL};
    LocalLaunchOptions o = {.nprocs = 3, .master_port = 29555, .quiet = 1};
    char err[256] = "";
    assert_int_equal(local_launch(&o, argv, err, sizeof err), 0);
    char got[4096];
    assert_int_equal(t5test_run(got, sizeof got, "sort %s", out), 0);
    assert_string_equal(got,
                        "rank=0 world=3 local=0 lw=3 addr=127.0.0.1 port=29555 run=set\n"
                        "rank=1 world=3 local=1 lw=3 addr=127.0.0.1 port=29555 run=set\n"
                        "rank=2 world=3 local=2 lw=3 addr=127.0.0.1 port=29555 run=set\n");
    // every rank parses its environment as one rank of three
    char* envf = t5_path_join(t5test_tmpdir(), "env.txt");
    snprintf(cmd, sizeof cmd, "env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT)=' | sort | tr '\\n' ' ' > %s.$RANK", envf);
    o.master_port = 0;  // a free port
    assert_int_equal(local_launch(&o, argv, err, sizeof err), 0);
    int seen = 0;
    for (int rk = 0; rk < 3; rk++) {
        char fn[512], line[1024];
        snprintf(fn, sizeof fn, "%s.%d", envf, rk);
        FILE* f = fopen(fn, "r");
        assert_non_null(f);
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        const char* envp[8] = {0};
        int k = 0;
        for (char* t = strtok(line, " \n"); t && k < 7; t = strtok(NULL, " \n")) envp[k++] = t;
        LaunchEnv e;
        assert_int_equal(launch_env_parse(&e, envp, err, sizeof err), 0);
        assert_int_equal(e.world_size, 3);
        assert_true(e.have_master);
        assert_true(e.master_port > 0);
        seen |= 1 << e.rank;
    }
    assert_int_equal(seen, 7);
    free(out);
    free(envf);
}

// a port the launcher picks is never let go before rank 0 listens: rank 0 inherits the listening socket
// (T5TRAIN_RDV_FD, open in its process), the other ranks do not; a port given by the user is bound by rank 0 itself
static void test_local_launch_holds_port(void** state) {
    (void)state;
    char* out = t5_path_join(t5test_tmpdir(), "rdvfd.txt");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "if [ -n \"$T5TRAIN_RDV_FD\" ] && [ -e /proc/$$/fd/$T5TRAIN_RDV_FD ]; then s=open; else s=none; fi; "
             "echo \"rank=$RANK fd=$s port=$MASTER_PORT\" >> %s",
             out);
    char* argv[] = {"sh", "-c", cmd, NULL};
    LocalLaunchOptions o = {.nprocs = 3, .master_port = 0, .quiet = 1};
    char err[256] = "";
    assert_int_equal(local_launch(&o, argv, err, sizeof err), 0);
    char got[4096];
    assert_int_equal(t5test_run(got, sizeof got, "sort %s | cut -d' ' -f1,2", out), 0);
    assert_string_equal(got, "rank=0 fd=open\nrank=1 fd=none\nrank=2 fd=none\n");
    // the socket listens on MASTER_PORT: while a rank runs, nobody else can bind that port
    remove(out);
    snprintf(cmd, sizeof cmd,
             "[ \"$RANK\" = 0 ] || exit 0; python3 -c 'import socket,sys; s=socket.socket(); "
             "s.bind((\"\", int(sys.argv[1])))' $MASTER_PORT 2>/dev/null && echo bound >> %s || echo held >> %s",
             out, out);
    if (t5test_run(got, sizeof got, "python3 -c 'import socket' 2>&1") == 0) {
        assert_int_equal(local_launch(&o, argv, err, sizeof err), 0);
        assert_int_equal(t5test_run(got, sizeof got, "cat %s", out), 0);
        assert_string_equal(got, "held\n");
    }
    // one rank has no rendezvous: no socket handed down (it would stay open in it, unused)
    remove(out);
    snprintf(cmd, sizeof cmd, "echo \"rank=$RANK fd=${T5TRAIN_RDV_FD:-none}\" >> %s", out);
    o.nprocs = 1;
    assert_int_equal(local_launch(&o, argv, err, sizeof err), 0);
    assert_int_equal(t5test_run(got, sizeof got, "cat %s", out), 0);
    assert_string_equal(got, "rank=0 fd=none\n");
    o.nprocs = 3;
    // a port of the user's: nothing inherited
    remove(out);
    snprintf(cmd, sizeof cmd, "echo \"rank=$RANK fd=${T5TRAIN_RDV_FD:-none}\" >> %s", out);
    o.master_port = 29556;
    assert_int_equal(local_launch(&o, argv, err, sizeof err), 0);
    assert_int_equal(t5test_run(got, sizeof got, "sort %s", out), 0);
    assert_string_equal(got, "rank=0 fd=none\nrank=1 fd=none\nrank=2 fd=none\n");
    free(out);
}

static void test_local_launch_first_failure(void** state) {
    (void)state;
    // rank 1 fails with 7 at once; the others would sleep 30 s: they are stopped, the launcher exits 7
    char* argv[] = {"sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 30", NULL};
    LocalLaunchOptions o = {.nprocs = 4, .quiet = 1};
    char err[256] = "";
    double t0 = wall();
    assert_int_equal(local_launch(&o, argv, err, sizeof err), 7);
    assert_true(wall() - t0 < 10);
    // a rank that ignores SIGTERM is killed after the grace time; the code stays the first failure's
    char* argv2[] = {"sh", "-c", "if [ \"$RANK\" = 0 ]; then exit 3; fi; trap '' TERM; sleep 30", NULL};
    o.grace_s = 1;
    t0 = wall();
    assert_int_equal(local_launch(&o, argv2, err, sizeof err), 3);
    assert_true(wall() - t0 < 10);
    // a rank killed by a signal: 128 + signal
    char* argv3[] = {"sh", "-c", "if [ \"$RANK\" = 2 ]; then kill -KILL $$; fi; sleep 30", NULL};
    assert_int_equal(local_launch(&o, argv3, err, sizeof err), 128 + 9);
    // a command that does not exist: 127 from the rank
    char* argv4[] = {"/nonexistent/t5train-nope", NULL};
    o.nprocs = 2;
    assert_int_equal(local_launch(&o, argv4, err, sizeof err), 127);
}

static void test_local_launch_forwards_signals(void** state) {
    (void)state;
    // the launcher (a forked child here) gets SIGTERM: every rank receives it once and ends its own way
    char* dir = t5_path_join(t5test_tmpdir(), "sig");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s; trap 'echo term >> %s/r$RANK; exit 5' TERM; touch %s/up$RANK; "
             "for i in $(seq 300); do sleep 0.1; done", dir, dir, dir);
    char* argv[] = {"sh", "-c", cmd, NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        LocalLaunchOptions o = {.nprocs = 2, .quiet = 1};
        char err[256];
        _exit(local_launch(&o, argv, err, sizeof err));
    }
    char out[256];
    for (int k = 0; k < 100; k++) {
        if (t5test_run(out, sizeof out, "test -e %s/up0 && test -e %s/up1", dir, dir) == 0) break;
        usleep(50 * 1000);
    }
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 5);
    assert_int_equal(t5test_run(out, sizeof out, "cat %s/r0 %s/r1", dir, dir), 0);
    assert_string_equal(out, "term\nterm\n");  // once each, not twice
    free(dir);
}

static void test_local_launch_flags(void** state) {
    (void)state;
    char a0[] = "t5train", a1[] = "--num_gpus", a2[] = "4", a3[] = "--config", a4[] = "x.json", a5[] = "--master_port=3000";
    char* argv[] = {a0, a1, a2, a3, a4, a5, NULL};
    LocalLaunchOptions o;
    char err[256] = "";
    assert_int_equal(local_launch_take_flags(6, argv, &o, err, sizeof err), 3);
    assert_int_equal(o.nprocs, 4);
    assert_int_equal(o.master_port, 3000);
    assert_string_equal(argv[0], "t5train");
    assert_string_equal(argv[1], "--config");
    assert_string_equal(argv[2], "x.json");
    assert_null(argv[3]);
    const char* bad[][3] = {{"--num_gpus", "0", "1 .. 1024 (got 0)"}, {"--num_gpus=x", NULL, "(got x)"},
                            {"--num_gpus", NULL, "(got nothing)"}, {"--master_port=99999", NULL, "(got 99999)"},
                            {"--master_port=1234", NULL, "give --num_gpus too"}};
    for (size_t i = 0; i < T5_ARRAY_LEN(bad); i++) {
        char* v[4] = {a0, (char*)bad[i][0], (char*)bad[i][1], NULL};
        int n = bad[i][1] ? 3 : 2;
        err[0] = 0;
        assert_int_equal(local_launch_take_flags(n, v, &o, err, sizeof err), -1);
        if (!strstr(err, bad[i][2])) fail_msg("case %zu: %s", i, err);
    }
}

// ---------------------------------------------------------------------------------------------
// the binary: t5train --num_gpus N launch-check --no_nccl, under mpirun, and its errors

// three lines "rank R of 3, local rank R of 3, ..., id hash H" with one H
static void check_three(const char* out, const char* via) {
    const char* h0 = NULL;
    for (int r = 0; r < 3; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d of 3, local rank %d of 3,", r, r);
        const char* p = strstr(out, want);
        if (!p) fail_msg("no '%s' in:\n%s", want, out);
        const char* v = strstr(p, via);
        const char* h = strstr(p, "id hash ");
        assert_non_null(v);
        assert_non_null(h);
        if (!h0) h0 = h;
        assert_memory_equal(h, h0, 24);
    }
}

static void test_binary_num_gpus(void** state) {
    (void)state;
    char out[8192];
    int rc = t5test_run(out, sizeof out, "%s --num_gpus 3 launch-check --no_nccl", t5test_bin());
    if (rc != 0) fail_msg("rc %d:\n%s", rc, out);
    check_three(out, "id via tcp");
    // torchrun-style variables by hand, with the ranks started apart
    int port = free_port();
    rc = t5test_run(out, sizeof out,
                    "for r in 2 1 0; do RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=%d "
                    "%s launch-check --no_nccl & sleep 0.2; done; wait",
                    port, t5test_bin());
    check_three(out, "id via tcp");
    // srun-style variables by hand (no Slurm)
    port = free_port();
    rc = t5test_run(out, sizeof out,
                    "for r in 0 1 2; do SLURM_PROCID=$r SLURM_NTASKS=3 SLURM_LOCALID=$r MASTER_ADDR=localhost "
                    "MASTER_PORT=%d %s launch-check --no_nccl & done; wait",
                    port, t5test_bin());
    check_three(out, "id via tcp");
    // errors: one line each, non-zero exit
    struct { const char* cmd; int code; const char* msg; } bad[] = {
        {"%s --num_gpus 0 --do_train", 2, "t5train: error: --num_gpus needs a number of ranks, 1 .. 1024 (got 0)"},
        {"RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 %s --num_gpus 2 --do_train", 2, "t5train: error: --num_gpus 2 inside rank 0 of 2"},
        {"RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 %s launch-check --no_nccl", 1,
         "t5train: error: 2 ranks started by torchrun-style variables (RANK/WORLD_SIZE), but MASTER_ADDR and MASTER_PORT are not set"},
        {"RANK=1 WORLD_SIZE=2 %s launch-check --no_nccl", 2, "t5train: error: RANK and WORLD_SIZE are set but LOCAL_RANK is not"},
        {"T5TRAIN_RENDEZVOUS_TIMEOUT=1 RANK=0 WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR=localhost MASTER_PORT=1 %s launch-check --no_nccl", 1,
         "t5train: error: rendezvous"},
        {"T5TRAIN_RENDEZVOUS_TIMEOUT=x RANK=0 WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR=localhost MASTER_PORT=29999 %s launch-check --no_nccl", 1,
         "t5train: error: bad T5TRAIN_RENDEZVOUS_TIMEOUT=x"},
        {"%s launch-check --bogus", 2, "t5train: error: launch-check: unknown argument '--bogus'"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(bad); i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, bad[i].cmd, t5test_bin());
        rc = t5test_run(out, sizeof out, "%s", cmd);
        if (rc != bad[i].code || !strstr(out, bad[i].msg)) fail_msg("case %zu: rc %d:\n%s", i, rc, out);
        // exactly one error line
        int lines = 0;
        for (const char* p = out; (p = strstr(p, "t5train: error:")); p++) lines++;
        if (lines != 1) fail_msg("case %zu: %d error lines:\n%s", i, lines, out);
    }
}

static void test_binary_mpirun(void** state) {
    (void)state;
    char out[8192];
    if (t5test_run(out, sizeof out, "command -v mpirun && mpirun --version | grep -q 'Open MPI'") != 0) skip();
    int rc = t5test_run(out, sizeof out, "mpirun --allow-run-as-root --oversubscribe -np 3 %s launch-check --no_nccl",
                        t5test_bin());
    if (rc != 0) fail_msg("rc %d:\n%s", rc, out);
    // with an MPI build the id travels by MPI_Bcast; without, mpirun needs MASTER_ADDR/PORT (refused above)
    check_three(out, strstr(out, "via mpi") ? "id via mpi" : "id via tcp");
}

// ---------------------------------------------------------------------------------------------
// scripts/train_on_multi_nodes.sh

static void test_multi_nodes_script(void** state) {
    (void)state;
    char out[8192];
    const char* dir = t5test_tmpdir();
    char hf[512], bad[512], stub[512];
    snprintf(hf, sizeof hf, "%s/hostfile", dir);
    snprintf(bad, sizeof bad, "%s/hostfile.bad", dir);
    snprintf(stub, sizeof stub, "%s/rank.sh", dir);
    t5test_write_file(hf, "# two hosts\nnode-a slots=2\nnode-b slots=3   # the second\n\n");
    int rc = t5test_run(out, sizeof out, "cd %s && env -u SLURM_JOB_ID -u T5TRAIN_BIN scripts/train_on_multi_nodes.sh --hostfile %s "
                        "--master_port 29600 --print_only --max_steps 3", t5test_repo_dir(), hf);
    if (rc != 0) fail_msg("rc %d: %s", rc, out);
    if (!strstr(out, "+ mpirun -np 5 -H node-a:2,node-b:3 ") || !strstr(out, "-x MASTER_ADDR=node-a -x MASTER_PORT=29600") ||
        !strstr(out, "./t5train --deepspeed configs/ds_config_zero3.json") || !strstr(out, "--fp16 --max_steps 3\n"))
        fail_msg("%s", out);
    // under Slurm: srun, the first host of the allocation
    rc = t5test_run(out, sizeof out, "cd %s && PATH=/usr/bin:/bin T5TRAIN_BIN=./t5train SLURM_JOB_ID=9 SLURM_NTASKS=4 SLURM_JOB_NODELIST=n1,n2 "
                    "scripts/train_on_multi_nodes.sh --print_only --max_steps 3", t5test_repo_dir());
    if (rc != 0 || !strstr(out, "+ env MASTER_ADDR=n1 MASTER_PORT=29500 srun --ntasks=4 --kill-on-bad-exit=1 ./t5train "))
        fail_msg("rc %d: %s", rc, out);
    // bad hostfiles and options: one line, exit 2
    const char* cases[][2] = {{"node-a slots=0\n", "is not \"HOST slots=N\""}, {"node-a 4\n", "is not \"HOST slots=N\""},
                              {"a slots=1\na slots=2\n", "host a appears twice"}, {"# nothing\n", "names no host"}};
    for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
        t5test_write_file(bad, cases[i][0]);
        rc = t5test_run(out, sizeof out, "cd %s && env -u SLURM_JOB_ID scripts/train_on_multi_nodes.sh --hostfile %s --print_only",
                        t5test_repo_dir(), bad);
        if (rc != 2 || !strstr(out, "t5train: error: ") || !strstr(out, cases[i][1])) fail_msg("case %zu: rc %d %s", i, rc, out);
    }
    rc = t5test_run(out, sizeof out, "cd %s && env -u SLURM_JOB_ID scripts/train_on_multi_nodes.sh --hostfile %s/none --print_only",
                    t5test_repo_dir(), dir);
    if (rc != 2 || !strstr(out, "not found")) fail_msg("rc %d %s", rc, out);
    rc = t5test_run(out, sizeof out, "cd %s && scripts/train_on_multi_nodes.sh --master_port 0 --print_only", t5test_repo_dir());
    if (rc != 2 || !strstr(out, "give a TCP port")) fail_msg("rc %d %s", rc, out);
    // a real mpirun start on this host (a hostfile naming it once, 2 slots), the binary replaced by a script
    // that prints what each rank sees
    if (t5test_run(out, sizeof out, "command -v mpirun") != 0) return;
    t5test_write_file(hf, "localhost slots=2\n");
    t5test_write_file(stub, "#!/bin/sh\necho \"rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE master $MASTER_ADDR:$MASTER_PORT "
                            "nccl $NCCL_P2P_DISABLE args $*\"\n");
    rc = t5test_run(out, sizeof out, "chmod +x %s && cd %s && env -u SLURM_JOB_ID NCCL_P2P_DISABLE=1 T5TRAIN_BIN=%s "
                    "scripts/train_on_multi_nodes.sh --hostfile %s --master_port 29601 --max_steps 2 --oversubscribe_never",
                    stub, t5test_repo_dir(), stub, hf);
    if (rc != 0) fail_msg("rc %d %s", rc, out);
    for (int r = 0; r < 2; r++) {
        char want[128];
        snprintf(want, sizeof want, "rank %d of 2 master localhost:29601 nccl 1 args --deepspeed", r);
        if (!strstr(out, want)) fail_msg("no '%s' in %s", want, out);
    }
    assert_non_null(strstr(out, "--max_steps 2 --oversubscribe_never\n"));
}

// ---------------------------------------------------------------------------------------------
// scripts/eval_bleu.sh --num_gpus N: taken out of the extra flags and handed to t5train's launcher first (t5train
// replaced by a script that prints its arguments one per bracket)

static void test_eval_bleu_num_gpus(void** state) {
    (void)state;
    char out[8192], stub[512];
    const char* dir = t5test_tmpdir();
    snprintf(stub, sizeof stub, "%s/t5train_args.sh", dir);
    t5test_write_file(stub, "#!/bin/sh\nprintf 'args'; printf ' [%s]' \"$@\"; echo\n");
    const char* ok[][2] = {
        {"m test --max_predict_samples 3 --num_gpus 2", "args [--num_gpus] [2] [--model_name_or_path] [m] "},
        {"m --num_gpus=4", "args [--num_gpus] [4] [--model_name_or_path] [m] "},
        {"m validation --max_eval_samples 5", "args [--model_name_or_path] [m] "},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(ok); i++) {
        int rc = t5test_run(out, sizeof out, "chmod +x %s && cd %s && T5TRAIN=%s RESULTS_DIR=%s/eb bash "
                            "scripts/eval_bleu.sh %s", stub, t5test_repo_dir(), stub, dir, ok[i][0]);
        if (rc != 0 || !strstr(out, ok[i][1])) fail_msg("%s: rc %d, want '%s' in:\n%s", ok[i][0], rc, ok[i][1], out);
        // the flag reaches t5train once, and the other extra flags after the script's own
        const char* a = strstr(out, "args ");
        const char* first = strstr(a, "[--num_gpus]");
        if (first && strstr(first + 1, "[--num_gpus]")) fail_msg("%s: --num_gpus twice:\n%s", ok[i][0], out);
        if (strstr(ok[i][0], "samples") && !strstr(a, "[--num_beams] [1] [--max_"))
            fail_msg("%s: extra flags misplaced:\n%s", ok[i][0], out);
    }
    const char* bad[][2] = {
        {"m --num_gpus 0", "--num_gpus '0' is not a positive whole number"},
        {"m --num_gpus two", "--num_gpus 'two' is not a positive whole number"},
        {"m --num_gpus", "--num_gpus needs a number of GPUs"},
        {"m --num_gpus 2 --num_gpus=2", "--num_gpus given twice"},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(bad); i++) {
        int rc = t5test_run(out, sizeof out, "cd %s && T5TRAIN=%s RESULTS_DIR=%s/eb bash scripts/eval_bleu.sh %s",
                            t5test_repo_dir(), stub, dir, bad[i][0]);
        if (rc != 2 || !strstr(out, bad[i][1]) || strstr(out, "args "))
            fail_msg("%s: rc %d, want exit 2 and '%s' before t5train runs:\n%s", bad[i][0], rc, bad[i][1], out);
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_bleu_num_gpus),
        cmocka_unit_test(test_env_none),
        cmocka_unit_test(test_env_torchrun),
        cmocka_unit_test(test_env_openmpi_slurm),
        cmocka_unit_test(test_env_bad),
        cmocka_unit_test(test_rdv_world_one),
        cmocka_unit_test(test_rdv_exchange_2_3_4),
        cmocka_unit_test(test_rdv_local_ranks_by_host),
        cmocka_unit_test(test_rdv_missing_rank),
        cmocka_unit_test(test_rdv_refusals),
        cmocka_unit_test(test_rdv_liveness),
        cmocka_unit_test(test_local_launch_env), cmocka_unit_test(test_local_launch_holds_port),
        cmocka_unit_test(test_local_launch_first_failure),
        cmocka_unit_test(test_local_launch_forwards_signals),
        cmocka_unit_test(test_local_launch_flags),
        cmocka_unit_test(test_binary_num_gpus),
        cmocka_unit_test(test_binary_mpirun),
        cmocka_unit_test(test_multi_nodes_script),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
