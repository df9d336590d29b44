/*
 * test_estimate.c: the memory planner on the CPU (issue 17):
 *   - the activation twin (model/t5.c t5_model_activation_bytes_for) against a closed form: what gradient
 *     checkpointing saves is exactly (L-1) encoder + (Ld-1) decoder blocks' activations, each block's buffers
 *     written out here from their shapes; an evaluation-only model (forward_only) keeps checkpointing's one block
 *     and drops exactly the backward's buffers, written out here too;
 *   - src/zero/estimate.c for every preset and plan: the byte identities (16 bytes per fp16 parameter wherever
 *     the optimizer lives, host + GPU optimizer elements = the model), and the engine reports of docs/zero.md
 *     (t5-3b homework config: 42.49 GiB host; ratio 0.5: 13.0 GiB host);
 *   - DeepSpeed's estimator against its published numbers: T0_3B / t5-3b on one GPU, full offload 71.71 GB
 *     host / 0.12 GB GPU (the "~70 GB" of the docs), t5-11b with optimizer offload ~250 GB host;
 *   - the automatic plan: t5-3b at batch 8 x (128 + 128) fp16 on an 80 GB GPU + 125 GiB host picks stage 0
 *     (docs/zero.md measured its peak at 51.0 GiB), a 24 GiB GPU gets an offload plan, a 4 GiB GPU none.
 */
#include "t5test.h"

#include <math.h>
#include <string.h>

#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../cuda/embedding.cuh"
#include "../cuda/rmsnorm.cuh"
#include "../src/base/common.h"
#include "../src/cli/config.h"
#include "../src/cli/planner.h"
#include "../src/train/trainer.h"
#include "../src/zero/estimate.h"

static const char* k_presets[] = {"t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b", "google/t5-v1_1-small"};
static const double GiB = 1073741824.0;

static size_t r256(size_t b) { return CEIL_DIV(b ? b : 1, (size_t)256) * 256; }

// one block's activations on the pointer-array path with fused projections, ReLU FF, dropout on (fp32 probs)
static size_t block_acts(const T5Config* c, size_t xs, int B, int Tq, int Tk, bool decoder) {
    const size_t D = c->d_model, H = c->num_heads, HD = (size_t)c->num_heads * c->d_kv, F = c->d_ff;
    const size_t Nq = (size_t)B * Tq, Nk = (size_t)B * Tk;
    size_t s = 0;
    // self-attention: ln, rstd, q|k|v, probs (fp32), dropped probs (X), ctx, x_out
    s += r256(Nq * D * xs) + r256(Nq * 4) + r256(Nq * 3 * HD * xs) + r256(B * H * Tq * Tq * 4) +
         r256(B * H * Tq * Tq * xs) + r256(Nq * HD * xs) + r256(Nq * D * 4);
    if (decoder)  // cross-attention: q, k|v over the encoder's Tk
        s += r256(Nq * D * xs) + r256(Nq * 4) + r256(Nq * HD * xs) + r256(Nk * 2 * HD * xs) + r256(B * H * Tq * Tk * 4) +
             r256(B * H * Tq * Tk * xs) + r256(Nq * HD * xs) + r256(Nq * D * 4);
    // FF: ln, rstd, a, dropout
    s += r256(Nq * D * xs) + r256(Nq * 4) + 2 * r256(Nq * F * xs);
    return s;
}

static void test_activation_twin(void** state) {
    (void)state;
    const char* names[] = {"t5-small", "t5-base", "t5-3b"};
    for (size_t i = 0; i < T5_ARRAY_LEN(names); i++) {
        T5Config c;
        assert_true(t5_config_preset(names[i], &c));
        ParamTable T;
        char err[256];
        assert_int_equal(params_build(&T, &c, err, sizeof err), 0);
        assert_true(t5_model_qkv_contiguous(&T));
        const int B = 4, Ts = 96, Tt = 64;
        T5ModelOptions o = {.max_B = B, .max_Ts = Ts, .max_Tt = Tt, .dtype = DT_F16, .dropout_rate = 0.1f};
        size_t ptr_full = 0, ptr_ck = 0;
        const size_t full = t5_model_activation_bytes_for(&T, &o, true, true, &ptr_full);
        o.gradient_checkpointing = true;
        const size_t ck = t5_model_activation_bytes_for(&T, &o, true, true, &ptr_ck);
        const size_t enc = block_acts(&c, 2, B, Ts, Ts, false), dec = block_acts(&c, 2, B, Tt, Ts, true);
        assert_int_equal(full - ck, (size_t)(c.num_layers - 1) * enc + (size_t)(c.num_decoder_layers - 1) * dec);
        assert_true(ptr_full > ptr_ck && ptr_ck > 0);  // one pointer array per attention operand and block kept
        // the residual stream (fp32, L+1 + Ld+1 block inputs) and the logits are in both
        assert_true(ck > (size_t)(c.num_layers + 1) * B * Ts * c.d_model * 4 + (size_t)B * Tt * c.vocab_size * 2);
        // evaluation only: checkpointing's one block without the backward's buffers (pointer-array path, fused
        // q|k|v, fp16 so the X and fp32-probability gradients are max(4, 2) bytes, no keep_logits)
        o.forward_only = true;
        size_t ptr_fwd = 0;
        const size_t fwd = t5_model_activation_bytes_for(&T, &o, true, true, &ptr_fwd);
        o.gradient_checkpointing = false;  // forward_only alone lays out one block
        assert_int_equal(t5_model_activation_bytes_for(&T, &o, true, true, NULL), fwd);
        o.forward_only = false;
        const size_t D = c.d_model, H = c.num_heads, HD = (size_t)c.num_heads * c.d_kv, F = c.d_ff, xs = 2;
        const size_t Ns = (size_t)B * Ts, Nt = (size_t)B * Tt, Nmax = Ns > Nt ? Ns : Nt, NHD = Nmax * HD;
        const size_t TT = (size_t)Ts * Ts;  // Ts >= Tt: the largest score matrix
        const size_t grads = r256(Nt * D * 4) /* dlm32 */ + r256(Nmax * D * xs) /* dbranch */ +
                             r256(NHD * xs) /* dctx */ + r256(B * H * TT * 4) /* dP */ + r256(NHD * xs) /* dqm */ +
                             r256(3 * NHD * xs) /* dqkv */ + r256(Nmax * D * xs) /* dln */ +
                             3 * r256(Nmax * F * xs) /* dff, dfa, dfb */ + r256(Ns * D * 4) + r256(Nt * D * 4) +
                             r256(Ns * D * 4) /* dres_enc, dres_dec, d_enc */ + r256(H * Ts * Ts * 4) +
                             r256(H * Tt * Tt * 4) /* dbias */ +
                             r256(rmsnorm_backward_scratch_floats((int)Nmax, (int)D) * 4) +
                             r256(embedding_backward_scratch_bytes((int)Nmax));
        assert_int_equal(ck - fwd, grads);
        assert_true(ptr_fwd > 0 && ptr_fwd < ptr_ck);  // the backward's pointer arrays (dP, dctx, dq, dk, dv) gone
        // the permuted path holds four more (B*T, HD) gradients: never smaller
        o.gradient_checkpointing = false;
        assert_true(t5_model_activation_bytes_for(&T, &o, false, false, NULL) >= full - 4 * r256((size_t)B * Ts * c.num_heads * c.d_kv * 2));
        params_free(&T);
    }
}

static PlanInput input(const char* model, int B, int Ts, int Tt, DType dt, bool ckpt) {
    PlanInput in;
    memset(&in, 0, sizeof in);
    assert_true(t5_config_preset(model, &in.model));
    in.dtype = in.grad_dtype = dt;
    in.batch = B;
    in.src_len = Ts;
    in.tgt_len = Tt;
    in.gradient_checkpointing = ckpt;
    in.grad_accum_steps = 1;
    in.gpus_per_node = in.num_nodes = 1;
    zero_options_default(&in.knobs);
    in.knobs.comm_dtype = dt;
    in.knobs.optimizer_pin_memory = in.knobs.param_pin_memory = true;
    const int64_t d = in.model.d_model;
    in.knobs.reduce_bucket_size = d * d;
    in.knobs.prefetch_bucket_size = (int64_t)(0.9 * (double)(d * d));
    in.knobs.persistence_threshold = 10 * d;
    return in;
}

static void test_engine_sizes(void** state) {
    (void)state;
    char err[512];
    for (size_t i = 0; i < T5_ARRAY_LEN(k_presets); i++) {
        PlanInput in = input(k_presets[i], 2, 64, 64, DT_F16, false);
        static PlanRow rows[PLANNER_MAX_ROWS];
        int n = planner_table(&in, 0.25, rows, PLANNER_MAX_ROWS, err, sizeof err);
        assert_true(n == 20);
        ParamTable T;
        assert_int_equal(params_build(&T, &in.model, err, sizeof err), 0);
        const double P = (double)T.total_padded;
        for (int k = 0; k < n; k++) {
            const PlanRow* r = &rows[k];
            // fp16, one rank: 16 bytes per CPU-stepped parameter on the host (master, m, v 4 each, gradient, weights);
            // 14 at stage 3 with both offloads, where the gradient shares the weights' buffer (accumulation 1)
            const double per = r->stage == 3 && r->off_opt && r->off_param ? 14.0 : 16.0;
            assert_true(fabs((double)r->h_total - per * (double)r->cpu_numel) < 1);
            assert_true(r->h_pinned == r->h_total);
            assert_true((double)r->cpu_numel <= P);
            if (r->stage == 0) assert_true(fabs((double)r->g_optim - 12.0 * P) < 1);  // master + trainer's m, v
            else assert_true(fabs((double)r->g_optim - 12.0 * (P - (double)r->cpu_numel)) < 1);
            if (r->off_opt && r->ratio >= 1.0) assert_true((double)r->cpu_numel == P);
            assert_true(r->g_total > r->g_act && r->step_s > 0);
        }
        params_free(&T);
    }
    // the engine's host allocations docs/zero.md reports for t5-3b (homework config; ratio 0.5): 37.18 and 11.4 GiB
    // (14 bytes per offloaded parameter); 42.49 GiB (16 bytes) with gradient accumulation, where they cannot share
    PlanInput in = input("t5-3b", 8, 128, 128, DT_F16, false);
    PlanRow r;
    assert_int_equal(planner_row(&in, 3, true, true, 1.0, &r, err, sizeof err), 0);
    assert_true(fabs(r.h_total / GiB - 37.18) < 0.01);
    assert_int_equal(planner_row(&in, 3, true, true, 0.5, &r, err, sizeof err), 0);
    assert_true(fabs(r.h_total / GiB - 11.4) < 0.05);
    PlanInput in_gas = in;
    in_gas.grad_accum_steps = 2;
    assert_int_equal(planner_row(&in_gas, 3, true, true, 1.0, &r, err, sizeof err), 0);
    assert_true(fabs(r.h_total / GiB - 42.49) < 0.01);
    // pin_memory false: the same buffers pageable, plus the engine's two pinned staging rings of buffer_count slots
    // (a t5-3b unit is larger than the 4 MiB cap of a slot); pinned, there is no ring (h_pinned == h_total above)
    PlanInput in_pg = in;
    in_pg.knobs.optimizer_pin_memory = in_pg.knobs.param_pin_memory = false;
    for (int count = 1; count <= 8; count *= 2) {
        in_pg.knobs.buffer_count = count;
        assert_int_equal(planner_row(&in_pg, 3, true, true, 1.0, &r, err, sizeof err), 0);
        const size_t ring = (size_t)ZERO_STAGING_RINGS * (size_t)count * ZERO_STAGING_SLOT_MAX_BYTES;
        assert_int_equal(r.h_pinned, ring);
        assert_int_equal(r.h_pageable + ring, r.h_total);
        assert_true(fabs((double)r.h_pageable / GiB - 37.18) < 0.01);
    }
    // stage 0 at batch 8: docs/zero.md measured a 51.0 GiB GPU peak
    assert_int_equal(planner_row(&in, 0, false, false, 1.0, &r, err, sizeof err), 0);
    assert_true(fabs(r.g_total / GiB - 51.0) < 0.1 * 51.0);
    // the arithmetic rows of several ranks shrink the partitions
    PlanInput in8 = in;
    in8.gpus_per_node = 8;
    PlanRow r8;
    assert_int_equal(planner_row(&in8, 3, false, false, 1.0, &r8, err, sizeof err), 0);
    assert_int_equal(planner_row(&in, 3, false, false, 1.0, &r, err, sizeof err), 0);
    assert_true(r8.g_optim * 7 < r.g_optim);
    // one node: a step time from the measured NVLink rates, never below the one-rank compute; several nodes: none
    assert_true(r8.step_s >= planner_compute_s(&in) * 0.999);
    PlanInput in2n = in8;
    in2n.num_nodes = 2;
    assert_int_equal(planner_row(&in2n, 3, false, false, 1.0, &r8, err, sizeof err), 0);
    assert_true(r8.step_s < 0);
    // offload_optimizer nvme: Adam m, v leave the host (8 of the 14 bytes per offloaded parameter), replaced by
    // buffer_count swap buffers of the largest unit's m + v; the swap file holds every offloaded unit's m + v
    PlanInput in_nv = in;
    snprintf(in_nv.knobs.nvme_path, sizeof in_nv.knobs.nvme_path, "/nvme");
    PlanRow rn;
    assert_int_equal(planner_row(&in, 3, true, true, 1.0, &r, err, sizeof err), 0);
    assert_int_equal(planner_row(&in_nv, 3, true, true, 1.0, &rn, err, sizeof err), 0);
    const size_t pool = rn.h_total - (r.h_total - 8 * r.cpu_numel);
    assert_true(pool > 0 && pool % 4096 == 0 && pool < ((size_t)3 << 30));  // 4 x a decoder block's 8 x 67.1M bytes
    assert_true(rn.nvme_file_bytes >= 8 * (uint64_t)r.cpu_numel && rn.nvme_file_bytes < 8 * (uint64_t)r.cpu_numel + 4096 * 200);
    assert_int_equal(r.nvme_file_bytes, 0);
    char name[128];
    planner_row_name(&rn, name, sizeof name);
    assert_string_equal(name, "stage 3, offload_optimizer nvme (ratio 1.00), offload_param cpu");
    // exactly: two units of 1000 and 5000 elements, both on the CPU (stage 2: no fetch trace needed)
    ZeroOptions on;
    zero_options_default(&on);
    on.stage = 2;
    on.offload_optimizer = true;
    on.buffer_count = 3;
    snprintf(on.nvme_path, sizeof on.nvme_path, "/nvme");
    size_t nu[] = {1000, 5000};
    ZeroMemEstimate en;
    if (zero_estimate(&on, 2, nu, &en, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(en.host_m + en.host_v, 0);
    assert_int_equal(en.nvme_file_bytes, 8192 + 40960);  // 8000 and 40000 bytes, each region 4096-aligned
    assert_int_equal(en.host_nvme_pool, 3 * 40960);
    assert_int_equal(en.host_total, en.host_master + en.host_gacc + en.host_w + en.host_staging + en.host_nvme_pool);
    assert_int_equal(en.host_pinned + en.host_pageable + en.host_nvme_pool, en.host_total);  // the pool: neither
    on.optimizer = ZERO_OPTIM_ADAFACTOR;  // not on NVMe: its state stays in host memory
    assert_int_equal(zero_estimate(&on, 2, nu, &en, err, sizeof err), -1);
    assert_non_null(strstr(err, "not implemented yet: offload_optimizer nvme with Adafactor"));
    // zero_estimate refuses what the engine refuses
    ZeroOptions o;
    zero_options_default(&o);
    o.stage = 2;
    o.offload_param = true;
    size_t units[] = {64, 128};
    ZeroMemEstimate e;
    assert_int_equal(zero_estimate(&o, 2, units, &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "offload_param needs ZeRO stage 3"));
}

// Evaluation only (PlanInput.forward_only; the engine's ZeroOptions.no_optimizer_state at stages 1-3): every row drops
// exactly the gradient, optimizer-state and comm bytes; a 16-bit run also its fp32 master (the load writes the working
// partitions); fp32 keeps the master (it is the working copy). The 16-bit weights, gathered peak and views stay.
static void test_eval_only_sizes(void** state) {
    (void)state;
    char err[512];
    const char* models[] = {"t5-small", "t5-3b", "t5-11b"};
    const DType dts[] = {DT_BF16, DT_F32};
    for (size_t i = 0; i < T5_ARRAY_LEN(models); i++)
        for (size_t d = 0; d < T5_ARRAY_LEN(dts); d++)
            for (int world = 1; world <= 2; world++) {
                PlanInput tr = input(models[i], 4, 64, 64, dts[d], false);
                tr.gpus_per_node = world;
                PlanInput ev = tr;
                ev.forward_only = true;
                static PlanRow rt[PLANNER_MAX_ROWS], re[PLANNER_MAX_ROWS];
                const int n = planner_table(&tr, 0.25, rt, PLANNER_MAX_ROWS, err, sizeof err);
                assert_int_equal(planner_table(&ev, 0.25, re, PLANNER_MAX_ROWS, err, sizeof err), n);
                ParamTable T;
                assert_int_equal(params_build(&T, &tr.model, err, sizeof err), 0);
                for (int k = 0; k < n; k++) {
                    const PlanRow *t = &rt[k], *e = &re[k];
                    assert_int_equal(e->cpu_numel, t->cpu_numel);
                    if (t->stage == 0) {  // stage 0: no m, v (no optimizer built); master, gradients, working stay
                        size_t n = 0;
                        for (int u = 0; u < T.num_units; u++) n += T.units[u].numel;
                        assert_int_equal(t->g_optim, 12 * n);
                        assert_int_equal(e->g_optim, 4 * n);
                        assert_int_equal(e->g_grads, t->g_grads);
                        assert_int_equal(e->g_params, t->g_params);
                        continue;
                    }
                    assert_int_equal(e->g_params, t->g_params);
                    assert_int_equal(e->g_grads, 0);
                    assert_int_equal(e->g_comm, 0);
                    // the GPU-stepped partition's fp32 master stays only in fp32
                    const size_t gpu_part = t->g_optim / 12;  // master + Adam m, v: 12 bytes per GPU element
                    assert_int_equal(t->g_optim, 12 * gpu_part);
                    assert_int_equal(e->g_optim, dts[d] == DT_F32 ? 4 * gpu_part : 0);
                    assert_int_equal(e->g_total, e->g_params + e->g_optim + e->g_act + e->g_work);
                    // host per node: the offloaded 16-bit partitions the gathers read (offload_param), or the fp32
                    // master; no m, v, gradients, and no fp32 gather for saving (nothing saves)
                    const size_t host = dts[d] == DT_F32 ? 4 * e->cpu_numel : t->off_param ? 2 * e->cpu_numel : 0;
                    assert_int_equal(e->h_total, host * (size_t)world);
                }
                params_free(&T);
            }
    // exactly, on the engine's own numbers: two units at stage 2, bf16, one sub-group on the CPU and one on the GPU
    ZeroOptions o;
    zero_options_default(&o);
    o.stage = 2;
    o.working_dtype = o.grad_dtype = o.comm_dtype = o.accum_dtype = DT_BF16;
    o.offload_optimizer = true;
    o.ratio = 0.5;
    o.sub_group_size = 5000;
    size_t nu[] = {5000, 1000};  // the trailing group (1000 elements, within ratio x total) on the CPU
    ZeroMemEstimate et, ee;
    if (zero_estimate(&o, 2, nu, &et, err, sizeof err)) fail_msg("%s", err);
    o.no_optimizer_state = true;
    if (zero_estimate(&o, 2, nu, &ee, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(et.gpu_master + et.host_master, 4 * (et.gpu_numel + et.cpu_numel));
    assert_true(et.gpu_comm > 0 && et.gpu_grad_peak > 0 && et.host_total > 0);
    assert_int_equal(ee.gpu_numel, et.gpu_numel);
    assert_int_equal(ee.cpu_numel, et.cpu_numel);
    assert_int_equal(ee.gpu_master + ee.gpu_m + ee.gpu_v + ee.gpu_gacc + ee.gpu_grads + ee.gpu_comm, 0);
    assert_int_equal(ee.gpu_grad_peak + ee.gpu_zenflow + ee.gpu_ada_scratch, 0);
    assert_int_equal(ee.gpu_weights, et.gpu_weights);
    assert_int_equal(ee.gpu_views, et.gpu_views);
    assert_int_equal(ee.gpu_resident, ee.gpu_weights + ee.gpu_views);
    assert_int_equal(ee.host_total, 0);  // no offload_param: the CPU units' 16-bit host weights go too
    assert_int_equal(zero_estimate_gpu_peak(&ee), ee.gpu_weights + ee.gpu_views);
}

static void test_deepspeed_estimator(void** state) {
    (void)state;
    T5Config c;
    DsEstimateRow ds[8];
    assert_true(t5_config_preset("t5-3b", &c));
    assert_int_equal((int)(planner_ds_total_params(&c) / 1000000), 2851);  // DeepSpeed's "2851M total params"
    assert_int_equal((int)(planner_ds_largest_layer(&c) / 1000000), 32);   // "32M largest layer params"
    assert_int_equal(planner_ds_zero3(&c, 1, 1, ds), 6);
    assert_true(fabs(ds[0].cpu_bytes / GiB - 71.71) < 0.01 && fabs(ds[0].gpu_bytes / GiB - 0.12) < 0.01);
    assert_true(fabs(ds[2].cpu_bytes / GiB - 63.74) < 0.01 && fabs(ds[2].gpu_bytes / GiB - 5.43) < 0.01);
    assert_true(fabs(ds[4].cpu_bytes / GiB - 0.18) < 0.01 && fabs(ds[5].cpu_bytes / GiB - 15.93) < 0.01);
    assert_true(ds[4].gpu_bytes / GiB > 47.8 && ds[4].gpu_bytes / GiB < 48.0);
    assert_true(t5_config_preset("t5-11b", &c));
    planner_ds_zero3(&c, 1, 1, ds);
    const double host = ds[2].cpu_bytes / GiB;  // offload_optimizer only: "~250 GB host"
    assert_true(host > 240 && host < 260);
    assert_true(ds[0].cpu_bytes / GiB > 275 && ds[0].cpu_bytes / GiB < 290);  // docs/zero.md: 284 GB
    assert_int_equal(planner_ds_zero2(&c, 1, 1, ds), 2);
    assert_true(fabs(ds[0].gpu_bytes - 2.0 * (double)planner_ds_total_params(&c)) < 1);
}

static void test_auto_choice(void** state) {
    (void)state;
    char err[512];
    static PlanRow rows[256];
    int n = 0;
    PlanInput in = input("t5-3b", 8, 128, 128, DT_F16, false);
    int k = planner_auto_choose(&in, true, (size_t)(79.6 * GiB), (size_t)(125 * GiB), 0.05, rows, 256, &n, NULL, err,
                                sizeof err);
    assert_true(k >= 0);
    assert_int_equal(rows[k].stage, 0);
    // a 24 GiB GPU: stage 0..2 without offload do not fit; an offload plan does
    k = planner_auto_choose(&in, true, (size_t)(24 * GiB), (size_t)(125 * GiB), 0.05, rows, 256, &n, NULL, err,
                            sizeof err);
    assert_true(k >= 0);
    assert_true(rows[k].off_opt && rows[k].g_total * 1.05 <= 24 * GiB);
    for (int i = 0; i < n; i++)
        if (rows[i].fits) assert_true(rows[i].step_s >= rows[k].step_s);
    // no GPU to plan against, or one too small: nothing
    assert_int_equal(planner_auto_choose(&in, false, 0, (size_t)(125 * GiB), 0.05, rows, 256, &n, NULL, err, sizeof err), -1);
    assert_int_equal(planner_auto_choose(&in, true, (size_t)(4 * GiB), (size_t)(125 * GiB), 0.05, rows, 256, &n, NULL, err,
                                         sizeof err), -1);
    // t5-11b, batch 8 with checkpointing, on the measured machine (79.6 GiB GPU, 125 GiB host): a stage 3 plan with
    // both offloads and part of the optimizer on the GPU
    in = input("t5-11b", 8, 128, 128, DT_F16, true);
    k = planner_auto_choose(&in, true, (size_t)(79.6 * GiB), (size_t)(125 * GiB), 0.05, rows, 256, &n, NULL, err,
                            sizeof err);
    assert_true(k >= 0);
    assert_int_equal(rows[k].stage, 3);
    assert_true(rows[k].off_opt && rows[k].off_param && rows[k].ratio > 0.5 && rows[k].ratio < 1.0);
}

// the automatic micro-batch and gradient checkpointing (issue 17 item 3) on fake machines
static int search(const PlanInput* in, bool bauto, bool cauto, double gpu_gib, double host_gib, PlanPick* p, FILE* log) {
    char err[512];
    PlanSearch s = {.batch_auto = bauto, .ckpt_auto = cauto, .max_batch = PLANNER_AUTO_MAX_BATCH};
    return planner_auto_search(in, &s, true, (size_t)(gpu_gib * GiB), (size_t)(host_gib * GiB), 0.05, p, log, err,
                               sizeof err);
}

static bool plan_fits(const PlanInput* in, const PlanRow* plan, int batch, bool ckpt, double gpu_gib, double host_gib) {
    PlanInput x = *in;
    x.batch = batch;
    x.gradient_checkpointing = ckpt;
    PlanRow r;
    char err[256];
    assert_int_equal(planner_row(&x, plan->stage, plan->off_opt, plan->off_param, plan->ratio, &r, err, sizeof err), 0);
    planner_fit(&r, 1, true, (size_t)(gpu_gib * GiB), (size_t)(host_gib * GiB), 0.05);
    return r.fits;
}

static void test_auto_batch_and_checkpointing(void** state) {
    (void)state;
    const double H100 = 79.6, HOST = 125, G24 = 24e9 / GiB;  // the measured machine; a 24 GB card
    PlanPick p;
    // t5-3b, batch 8 fixed, checkpointing auto: stage 0 fits without it (docs/zero.md measured 51.0 GiB)
    PlanInput in = input("t5-3b", 8, 128, 128, DT_F16, false);
    assert_int_equal(search(&in, false, true, H100, HOST, &p, NULL), 0);
    assert_int_equal(p.batch, 8);
    assert_false(p.ckpt);
    assert_int_equal(p.row.stage, 0);
    // batch auto: stage 0 at the largest batch it fits, the next batch does not fit with stage 0
    assert_int_equal(search(&in, true, false, H100, HOST, &p, NULL), 0);
    assert_int_equal(p.row.stage, 0);
    assert_true(p.batch > 8 && p.batch < PLANNER_AUTO_MAX_BATCH);
    assert_true(plan_fits(&in, &p.row, p.batch, false, H100, HOST));
    assert_false(plan_fits(&in, &p.row, p.batch + 1, false, H100, HOST));
    // both auto on a 24 GB card: no (batch, checkpointing) of 1..64 x {off, on} has more predicted samples/s, and
    // checkpointing is on only where the same plan at the same batch does not fit without it
    assert_int_equal(search(&in, true, true, G24, HOST, &p, NULL), 0);
    assert_true(p.row.fits && p.row.g_total * 1.05 <= G24 * GiB);
    static PlanRow rows[256];
    char err[512];
    int n;
    for (int ck = 0; ck < 2; ck++)
        for (int b = 1; b <= PLANNER_AUTO_MAX_BATCH; b++) {
            PlanInput x = in;
            x.batch = b;
            x.gradient_checkpointing = ck;
            int k = planner_auto_choose(&x, true, (size_t)(G24 * GiB), (size_t)(HOST * GiB), 0.05, rows, 256, &n, NULL,
                                        err, sizeof err);
            if (k >= 0) assert_true(b / rows[k].step_s <= p.samples_s * (1 + 1e-9));
        }
    if (p.ckpt) assert_false(plan_fits(&in, &p.row, p.batch, false, G24, HOST));
    // its log: the choice, why not the next batch / the plan without checkpointing, the faster families rejected
    char* text = NULL;
    size_t len = 0;
    FILE* log = open_memstream(&text, &len);
    assert_int_equal(search(&in, true, true, G24, HOST, &p, log), 0);
    fclose(log);
    char want[96];
    snprintf(want, sizeof want, "zero plan auto: micro-batch %d, gradient checkpointing %s: ", p.batch, p.ckpt ? "on" : "off");
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, p.batch == PLANNER_AUTO_MAX_BATCH ? "is the cap (64)" : "rejected micro-batch"));
    assert_non_null(strstr(text, p.ckpt ? "rejected the same plan without gradient checkpointing" : "checkpointing off"));
    assert_non_null(strstr(text, "zero plan auto: rejected stage 0 ("));
    free(text);

    // t5-11b, batch 8 fixed, checkpointing auto, on the measured machine: without checkpointing (its activations at
    // batch 8: docs/zero.md "~29 GiB more") only a larger offload ratio fits, slower than a smaller ratio with
    // checkpointing, so it is on, with a stage 3 plan with both offloads (docs/zero.md ran ratio 0.65 with
    // checkpointing at batch 8)
    in = input("t5-11b", 8, 128, 128, DT_F16, false);
    const int k_off = planner_auto_choose(&in, true, (size_t)(H100 * GiB), (size_t)(HOST * GiB), 0.05, rows, 256, &n,
                                          NULL, err, sizeof err);
    const double off_samples_s = k_off >= 0 ? 8.0 / rows[k_off].step_s : 0.0;
    assert_int_equal(search(&in, false, true, H100, HOST, &p, NULL), 0);
    assert_int_equal(p.batch, 8);
    assert_true(p.ckpt);
    assert_true(p.samples_s > off_samples_s);
    assert_true(p.row.stage == 3 && p.row.off_opt && p.row.off_param && p.row.ratio > 0.5 && p.row.ratio < 1.0);
    PlanRow with, without;
    PlanInput ck = in;
    ck.gradient_checkpointing = true;
    assert_int_equal(planner_row(&ck, 3, true, true, 0.65, &with, err, sizeof err), 0);
    assert_int_equal(planner_row(&in, 3, true, true, 0.65, &without, err, sizeof err), 0);
    assert_true((without.g_act - with.g_act) / GiB > 25 && (without.g_act - with.g_act) / GiB < 30);
    // both auto: checkpointing on, and a batch of at least 8
    assert_int_equal(search(&in, true, true, H100, HOST, &p, NULL), 0);
    assert_true(p.ckpt && p.batch >= 8);
    assert_false(plan_fits(&in, &p.row, p.batch, false, H100, HOST));
    // a 24 GB card: full offload needs 168.5 GiB of host, the partial ones too much GPU: nothing (the sentence's case)
    assert_int_equal(search(&in, true, true, G24, HOST, &p, NULL), 1);
    assert_int_equal(p.batch, 1);
    assert_true(p.ckpt);
}

static void test_auto_from_config(void** state) {
    (void)state;
    static RunConfig c;
    char err[CONFIG_ERR_LEN];
    PlanSearch s;
    struct {
        const char* extra[4];
        bool batch_auto, ckpt_auto;
    } cases[] = {
        {{"--deepspeed", "configs/ds_config_zero3.json", NULL}, true, false},  // micro-batch "auto", no HF batch
        {{"--deepspeed", "configs/ds_config_zero3.json", "--per_device_train_batch_size", "1"}, false, false},
        {{"--per_device_train_batch_size", "auto", "--gradient_checkpointing", "auto"}, true, true},
        {{NULL}, false, false},  // no DeepSpeed config: HF's batch 8
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(cases); i++) {
        const char* argv[16] = {"t5train", "--model_name_or_path", "t5-small", "--dataset_name", "wmt16", "--source_lang",
                                "en", "--target_lang", "ro", "--zero_plan", "auto"};
        int argc = 11;
        for (int k = 0; k < 4 && cases[i].extra[k]; k++) argv[argc++] = cases[i].extra[k];
        config_init(&c);
        assert_int_equal(config_parse_args(&c, argc, (char**)argv, err, sizeof err), 0);
        planner_search_from_config(&c, &s);
        assert_int_equal(s.batch_auto, cases[i].batch_auto);
        assert_int_equal(s.ckpt_auto, cases[i].ckpt_auto);
        assert_int_equal(config_resolve(&c, err, sizeof err), 0);
        // the pick into the config: the values, marked derived
        PlanPick p = {.batch = 24, .ckpt = true};
        planner_pick_to_config(&p, &s, &c);
        assert_int_equal(c.per_device_train_batch_size, s.batch_auto ? 24 : cases[i].extra[2] ? 1 : 8);
        assert_int_equal(c.gradient_checkpointing, s.ckpt_auto);
    }
    // "auto" without the planner: one error line
    const char* argv[] = {"t5train", "--model_name_or_path", "t5-small", "--dataset_name", "wmt16", "--source_lang", "en",
                          "--target_lang", "ro", "--gradient_checkpointing", "auto"};
    config_init(&c);
    assert_int_equal(config_parse_args(&c, (int)T5_ARRAY_LEN(argv), (char**)argv, err, sizeof err), 0);
    assert_int_equal(config_resolve(&c, err, sizeof err), T5_EXIT_USAGE);
    assert_non_null(strstr(err, "gradient_checkpointing \"auto\" needs the memory planner"));
}

// out of memory explained (issue 17 item 4): the sentence the trainer appends to an allocation failure
static void test_oom_sentence(void** state) {
    (void)state;
    char buf[1024];
    // t5-11b at batch 8 without checkpointing under the measured ratio 0.65 plan: the arena fails (fake failure:
    // the model's own message), the advice is the same plan with checkpointing
    PlanInput in = input("t5-11b", 8, 128, 128, DT_F16, false);
    ZeroOptions cur = in.knobs;
    cur.stage = 3;
    cur.offload_optimizer = cur.offload_param = true;
    cur.ratio = 0.65;
    const size_t gpu = (size_t)(79.6 * GiB), host = (size_t)(125 * GiB);
    assert_int_equal(planner_oom_sentence(&in, &cur, true, gpu, host, buf, sizeof buf), 0);
    char msg[1200];
    snprintf(msg, sizeof msg, "out of GPU memory for activations: 29.34 GiB needed for batch 8 x (128, 128) in fp16, "
                              "6.10 GiB free%s", buf);
    assert_non_null(strstr(msg, "; the estimate for this job (stage 3, offload_optimizer cpu (ratio 0.65), offload_param "
                                "cpu, micro-batch 8): "));
    assert_non_null(strstr(msg, "; set gradient_checkpointing true: predicted "));
    assert_null(strstr(msg, "offload_optimizer.ratio"));  // the ratio stays: checkpointing alone fits
    // t5-3b stage 0 at batch 8 on a 24 GB card: an offload plan
    in = input("t5-3b", 8, 128, 128, DT_F16, false);
    cur = in.knobs;
    cur.stage = 0;
    assert_int_equal(planner_oom_sentence(&in, &cur, true, (size_t)24e9, host, buf, sizeof buf), 0);
    assert_non_null(strstr(buf, "(stage 0, micro-batch 8): 51.0 GiB GPU, 0.0 GiB host"));
    assert_non_null(strstr(buf, "offload_optimizer.device cpu"));
    // t5-11b on a 24 GB card: nothing fits, and the sentence says so
    in = input("t5-11b", 8, 128, 128, DT_F16, false);
    assert_int_equal(planner_oom_sentence(&in, &cur, true, (size_t)24e9, host, buf, sizeof buf), 1);
    assert_non_null(strstr(buf, "no plan is predicted to fit 22.4 GiB of GPU and 125.0 GiB of host memory"));
}

// a fixed plan predicted not to fit is refused before the run (issue 17 item 4): the sentence and the plan that fits
static void test_fixed_plan_check(void** state) {
    (void)state;
    char buf[2048];
    const size_t total = (size_t)(79.6 * GiB), host = (size_t)(125 * GiB);
    // t5-3b stage 0 at batch 8 (51.0 GiB predicted) fits an H100 with 79 GiB free
    PlanInput in = input("t5-3b", 8, 128, 128, DT_F16, false);
    ZeroOptions cur = in.knobs;
    cur.stage = 0;
    assert_int_equal(planner_fixed_plan_check(&in, &cur, (size_t)(79 * GiB), total, host, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    // at batch 64 it does not: GPU need and free named, the estimate, a change that fits
    in = input("t5-3b", 64, 128, 128, DT_F16, false);
    assert_int_equal(planner_fixed_plan_check(&in, &cur, (size_t)(79 * GiB), total, host, buf, sizeof buf), 1);
    print_message("%s\n", buf);
    assert_non_null(strstr(buf, "the ZeRO plan of this run is predicted not to fit this machine: GPU: "));
    assert_non_null(strstr(buf, "GiB needed, 79.5 GiB free; the estimate for this job (stage 0, micro-batch 64): "));
    assert_non_null(strstr(buf, "; set "));
    assert_non_null(strstr(buf, "(or --zero_plan auto)"));
    // the homework plan (stage 3, both offloads, pinned) on a host with 20 GiB: the host part is named
    in = input("t5-3b", 8, 128, 128, DT_F16, false);
    cur = in.knobs;
    cur.stage = 3;
    cur.offload_optimizer = cur.offload_param = true;
    cur.ratio = 1.0;
    assert_int_equal(planner_fixed_plan_check(&in, &cur, (size_t)(79 * GiB), total, (size_t)(20 * GiB), buf, sizeof buf),
                     1);
    print_message("%s\n", buf);
    assert_non_null(strstr(buf, "predicted not to fit this machine: host: "));
    assert_non_null(strstr(buf, " GiB needed (+2 GiB for the process), 20.0 GiB available; the estimate for this job "
                                "(stage 3, offload_optimizer cpu (ratio 1.00), offload_param cpu, micro-batch 8)"));
    assert_null(strstr(buf, "GPU: "));
}

// the run's planner input with several ranks (a review found it planned every run for one GPU): the world's
// partitions and this host's ranks, so the fixed plan's check and the automatic plan see `estimate --num_gpus N`
static void test_run_input_several_ranks(void** state) {
    (void)state;
    TrainerArgs a;
    trainer_args_default(&a);
    assert_true(t5_config_preset("t5-11b", &a.model));
    a.dtype = a.grad_dtype = DT_BF16;
    a.do_train = true;
    a.data.train_batch_size = 8;
    a.data.max_source_length = a.data.max_target_length = 128;
    a.plan_src_len = a.plan_tgt_len = 128;
    PlanInput ref = input("t5-11b", 8, 128, 128, DT_BF16, false);
    a.zero = ref.knobs;
    a.zero.stage = 3;
    a.zero.world = 8;
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "8", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    PlanInput in;
    planner_input_from_args(&a, &in);
    assert_int_equal(in.gpus_per_node, 8);
    assert_int_equal(in.num_nodes, 1);
    assert_int_equal(in.src_len, 128);
    char err[256];
    PlanRow run_row, one_row, est_row;
    assert_int_equal(planner_row(&in, 3, false, false, 1.0, &run_row, err, sizeof err), 0);
    ref.gpus_per_node = 8;
    assert_int_equal(planner_row(&ref, 3, false, false, 1.0, &est_row, err, sizeof err), 0);
    ref.gpus_per_node = 1;
    assert_int_equal(planner_row(&ref, 3, false, false, 1.0, &one_row, err, sizeof err), 0);
    assert_true(run_row.g_total == est_row.g_total);  // what `t5train estimate --num_gpus 8` prints
    assert_true(run_row.g_total < one_row.g_total / 3);  // not one GPU's stage 3 (the whole optimizer state)
    print_message("t5-11b stage 3 bf16 8 x (128+128): %.1f GiB per GPU on 8 GPUs, %.1f on one\n",
                  run_row.g_total / GiB, one_row.g_total / GiB);
    // two nodes of four: the host's share is its four ranks
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    planner_input_from_args(&a, &in);
    assert_int_equal(in.gpus_per_node, 4);
    assert_int_equal(in.num_nodes, 2);
    // no local world size and no GPU here: every rank on this host (the most host memory)
    unsetenv("LOCAL_WORLD_SIZE");
    planner_input_from_args(&a, &in);
    assert_int_equal(in.gpus_per_node * in.num_nodes, 8);
    // one rank
    a.zero.world = 1;
    planner_input_from_args(&a, &in);
    assert_int_equal(in.gpus_per_node, 1);
    assert_int_equal(in.num_nodes, 1);
    const char* vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    for (int i = 0; i < 5; i++) unsetenv(vars[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_plan_check),
        cmocka_unit_test(test_activation_twin),
        cmocka_unit_test(test_engine_sizes),
        cmocka_unit_test(test_eval_only_sizes),
        cmocka_unit_test(test_deepspeed_estimator),
        cmocka_unit_test(test_auto_choice),
        cmocka_unit_test(test_auto_batch_and_checkpointing),
        cmocka_unit_test(test_auto_from_config),
        cmocka_unit_test(test_oom_sentence),
        cmocka_unit_test(test_run_input_several_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
