/*
 * test_zero_nvme.c: the engine's NVMe glue (src/zero/part_nvme.c) without a GPU: a partition layout with sub-groups
 * and ratio 0.45 (GPU units first, CPU units after), the optimizer thread's loop of part_step.c (sub-groups in
 * order, units in order, unit_in / DeepSpeed's CPU AdamW / unit_out) over 5 steps with the state in the swap file,
 * against the same steps over m, v in host memory: the same master, m, v bits; the checkpoint path
 * (zp_nvme_state_copy) reads every CPU unit's m and v back in pieces at odd offsets and writes a piece in without
 * touching its neighbours; the swap file's size and pool equal the estimate's; the counters report the traffic.
 */
#include "t5test.h"

#include "../src/base/common.h"
#include "../src/zero/estimate.h"
#include "../src/zero/part.h"

enum { NU = 7, STEPS = 5 };

static void test_glue_matches_host_memory(void** state) {
    (void)state;
    const size_t numel[NU] = {130000, 4096, 800, 16, 65536, 24, 7992};
    ZeroPart* P = calloc(1, sizeof *P);
    char err[512];
    if (zero_layout_build(&P->L, 1, 0, NU, numel, 20000, 0.45, err, sizeof err)) fail_msg("%s", err);
    P->num_units = NU;
    P->u = calloc(NU, sizeof(ZpUnit));
    zero_options_default(&P->o);
    P->o.stage = 2;
    P->o.offload_optimizer = true;
    P->o.ratio = 0.45;
    P->o.buffer_count = 3;
    P->o.nvme_pipeline_read = P->o.nvme_pipeline_write = true;
    P->o.aio_block_size = 8192;
    P->o.aio_queue_depth = 4;
    P->o.aio_threads = 2;
    snprintf(P->o.nvme_path, sizeof P->o.nvme_path, "%s", t5test_tmpdir());
    int ncpu = 0;
    for (int u = 0; u < NU; u++) ncpu += (P->u[u].opt_cpu = P->L.group_cpu[P->L.unit_group[u]]);
    if (!(ncpu >= 2 && ncpu < NU)) fail_msg("%d CPU units of %d", ncpu, NU);  // both kinds of units, several on the CPU
    uint64_t fb;
    size_t pb;
    zero_estimate_nvme(&P->o, &P->L, &fb, &pb);
    if (zp_nvme_create(P, fb, pb, err, sizeof err)) fail_msg("%s", err);  // dies if the sizes differ
    for (int u = 0; u < NU; u++)
        if (P->u[u].opt_cpu) assert_null(P->u[u].m);  // m, v exist only while the unit is stepped
    // host copies: master (both sides), reference m, v, gradients
    float *w[NU], *wr[NU], *mr[NU], *vr[NU], *g[NU];
    for (int u = 0; u < NU; u++) {
        const size_t n = P->L.part[u];
        w[u] = malloc(n * 4), wr[u] = malloc(n * 4), mr[u] = calloc(n, 4), vr[u] = calloc(n, 4), g[u] = malloc(n * 4);
        for (size_t i = 0; i < n; i++) w[u][i] = wr[u][i] = (float)((int)((i * 7 + (size_t)u) % 301) - 150) * 1e-3f;
    }
    CpuAdam ca;
    cpu_adam_init(&ca, 0.9f, 0.999f, 1e-8f, true);
    for (int step = 1; step <= STEPS; step++) {
        cpu_adam_begin_step(&ca, step, 0.9f, 0.999f);
        zp_nvme_step_begin(P);  // part_step.c's opt_thread, one step
        for (int gi = 0; gi < P->L.num_groups; gi++) {
            if (!P->L.group_cpu[gi]) continue;
            for (int u = P->L.group_first[gi]; u < P->L.group_first[gi] + P->L.group_count[gi]; u++) {
                const size_t n = P->L.part[u];
                for (size_t i = 0; i < n; i++)
                    g[u][i] = (float)((int)((i * 2654435761u + (size_t)(step * 97 + u)) % 2001) - 1000) * 1e-4f;
                zp_nvme_unit_in(P, u);
                ZpUnit* U = &P->u[u];
                assert_non_null(U->m);
                assert_ptr_equal(U->v, U->m + n);
                cpu_adam_update(&ca, 1e-3f, 0.01f, w[u], U->m, U->v, g[u], DT_F32, 1.0f, NULL, DT_F32, n);
                zp_nvme_unit_out(P, u);
                cpu_adam_update(&ca, 1e-3f, 0.01f, wr[u], mr[u], vr[u], g[u], DT_F32, 1.0f, NULL, DT_F32, n);
            }
        }
        zp_nvme_step_end(P);
    }
    // the checkpoint's view: m (which 0) and v (1) of each CPU unit, in pieces at odd offsets
    for (int u = 0; u < NU; u++) {
        if (!P->u[u].opt_cpu) continue;
        const size_t n = P->L.part[u];
        assert_memory_equal(w[u], wr[u], n * 4);
        float* back = malloc(n * 4);
        for (int which = 0; which < 2; which++) {
            for (size_t off = 0; off < n; off += 997) {
                const size_t k = T5_MIN((size_t)997, n - off);
                zp_nvme_state_copy(P, u, which, off, k, back + off, true);
            }
            assert_memory_equal(back, which ? vr[u] : mr[u], n * 4);
        }
        free(back);
    }
    // a resume's write of a piece of one unit's v: read back exactly, its m and the other units untouched
    int last = -1;
    for (int u = 0; u < NU; u++)
        if (P->u[u].opt_cpu && P->L.part[u] > 5000) last = u;
    assert_true(last >= 0);
    float piece[1001];
    for (int i = 0; i < 1001; i++) piece[i] = (float)i * 0.5f;
    zp_nvme_state_copy(P, last, 1, 3001, 1001, piece, false);
    memcpy(vr[last] + 3001, piece, sizeof piece);
    for (int u = 0; u < NU; u++) {
        if (!P->u[u].opt_cpu) continue;
        const size_t n = P->L.part[u];
        float* back = malloc(n * 4);
        zp_nvme_state_copy(P, u, 0, 0, n, back, true);
        assert_memory_equal(back, mr[u], n * 4);
        zp_nvme_state_copy(P, u, 1, 0, n, back, true);
        assert_memory_equal(back, vr[u], n * 4);
        free(back);
    }
    ZeroStats st = {0};
    zp_nvme_stats(P, &st);
    assert_int_equal(st.nvme_file_bytes, fb);
    assert_int_equal(st.nvme_pool_bytes, pb);
    assert_true(st.nvme_read_bytes >= (double)STEPS * 8 * (double)P->L.cpu_numel);
    assert_true(st.nvme_written_bytes >= (double)STEPS * 8 * (double)P->L.cpu_numel);
    print_message("%d of %d units on NVMe, %zu elements: %d steps identical to host memory; %.0f bytes read, %.0f "
                  "written\n", ncpu, NU, P->L.cpu_numel, STEPS, st.nvme_read_bytes, st.nvme_written_bytes);
    zp_nvme_destroy(P);
    assert_null(P->nvme);
    for (int u = 0; u < NU; u++) free(w[u]), free(wr[u]), free(mr[u]), free(vr[u]), free(g[u]);
    zero_layout_free(&P->L);
    free(P->u);
    free(P);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_glue_matches_host_memory)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
