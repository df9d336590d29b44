/*
 * test_zero_adafactor.c: the pure parts of Adafactor in the ZeRO engine (src/zero/step_adafactor.c), on the CPU:
 *   - test_layout_matches_stage0: the engine's state per tensor (zero_adafactor_tensor_floats over the ZeroTensor
 *     shapes the trainer fills) is the trainer's stage 0 layout (cpu_adafactor_state_floats from the ParamTable), for
 *     every preset, beta1 None and a value: so the "adafactor" checkpoint blob is the same at every stage;
 *   - test_estimate_sizes: src/zero/estimate.c for Adafactor: its state replaces Adam's m, v (GPU units on the GPU,
 *     CPU units on the host, split by ratio), the GPU plan's scratch is cuda/adafactor's, AdamW's sizes unchanged,
 *     the 14-byte layout kept (gradients share the 16-bit host weights), the W > 1 rule (a rank holding a slice of a
 *     matrix keeps its whole row + column statistics);
 *   - test_bytes_per_parameter: optimizer state bytes per parameter for t5-3b and t5-11b, Adam and Adafactor, and the
 *     single-GPU t5-11b plan (stage 3, both offloads) host bytes with each (printed; docs/optimizer.md quotes them);
 *   - test_aliased_grad_work: cpu_adafactor_step with the gradient in the 16-bit working copy's own buffer (the
 *     engine's 14-byte layout) gives bit for bit what separate buffers give (fp16 and bf16, matrix and vector, beta1,
 *     weight decay, clipping).
 *   - test_engine_cpu_units: the engine's own CPU path (zp_ada_create over a hand-built ZeroPart whose units are all
 *     CPU-stepped, zp_ada_cpu_unit unit by unit, zp_ada_state_io, zp_ada_last_lr), no CUDA call, over whole small
 *     models (tied and untied head): every tensor of a unit stepped in one shared gradient/weights buffer gives bit
 *     for bit the trainer's stage 0 stepping (per tensor in parameter-table order, separate buffers, the stage 0
 *     state layout): master, 16-bit weights, the "adafactor" blob, the logged lr of tensor 0.
 *   - test_split_partial_sums: several ranks (src/zero/ada_split.c): units of matrices and vectors cut across W = 1..5
 *     ranks at the engine's partition boundaries (anywhere, also inside a row): the slices cover every element once,
 *     the shared sections of the reduce buffers are laid out identically on every rank, and each rank's partial row /
 *     column sums of g^2 and sum of p^2 over its slice (the GPU plan's slice geometry: rows touched, partial first and
 *     last rows), placed at its slots and added over the ranks in rank order, are the whole tensors' sums exactly
 *     (integer data: fp64 sums exact); the tensors one rank holds alone have their whole sums in its local slots.
 *   - test_cpu_split_step: the CPU Adafactor over slices (cpu_adafactor_slice_sums / _factors / _apply, the offloaded
 *     path on several ranks): matrices (wide: several blocks; tall; one row) and vectors cut into k = 2..4 slices at
 *     odd element boundaries, the slices' sums added in rank order between the calls, 3 steps (beta1, weight decay,
 *     parameter scale, clipping by a gradient jump; fp32 and bf16 gradients, a bf16 working copy), against
 *     cpu_adafactor_step on the whole tensor: masters, every rank's replicated row / column statistics, v, exp_avg,
 *     the 16-bit copy and the step's lr / RMS / divisor within 1e-6 (the fp64 sums are split differently).
 */
#include "t5test.h"

#include <math.h>
#include <string.h>

#include "../cuda/adafactor.cuh"
#include "../model/params.h"
#include "../model/t5.h"
#include "../model/t5_config.h"
#include "../src/base/common.h"
#include "../src/cli/planner.h"
#include "../src/zero/ada_split.h"
#include "../src/zero/cpu_adafactor.h"
#include "../src/zero/cpu_adam.h"
#include "../src/zero/estimate.h"
#include "../src/zero/host_mem.h"
#include "../src/zero/recut.h"
#include "../src/zero/part.h"
#include "../src/zero/step_adafactor.h"

static const char* k_presets[] = {"t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b", "google/t5-v1_1-small"};

typedef struct {
    ParamTable T;
    ZeroTensor* zt;
    size_t* numel;
    size_t total_floats[2];  // the stage 0 layout's floats, beta1 None / a value
    size_t n;                // parameters (the units' elements)
} Model;

static void model_build(Model* m, const char* preset) {
    memset(m, 0, sizeof *m);
    T5Config c;
    char err[256];
    assert_true(t5_config_preset(preset, &c));
    assert_int_equal(params_build(&m->T, &c, err, sizeof err), 0);
    m->zt = calloc(m->T.num_params, sizeof *m->zt);
    m->numel = calloc(m->T.num_units, sizeof *m->numel);
    for (int u = 0; u < m->T.num_units; u++) {
        m->numel[u] = m->T.units[u].numel;
        m->n += m->numel[u];
    }
    for (int i = 0; i < m->T.num_params; i++) {
        const ParamDesc* p = &m->T.params[i];
        // as src/train/trainer.c fills them
        m->zt[i] = (ZeroTensor){.unit = p->unit, .offset = p->offset, .numel = p->numel, .decay = p->decay,
                                .fp32_view = params_role_reads_fp32(p->role),
                                .rows = p->ndim == 2 ? p->shape[0] : 0, .cols = p->ndim == 2 ? p->shape[1] : 0};
        for (int b = 0; b < 2; b++)
            m->total_floats[b] += cpu_adafactor_state_floats(p->ndim == 2 ? (size_t)p->shape[0] : 1,
                                                             p->ndim == 2 ? (size_t)p->shape[1] : p->numel,
                                                             p->ndim == 2, b == 1);
    }
}

static void model_free(Model* m) {
    params_free(&m->T);
    free(m->zt);
    free(m->numel);
}

static ZeroOptions options(const Model* m, int stage, DType dt, bool ada, bool beta1) {
    ZeroOptions o;
    zero_options_default(&o);
    o.stage = stage;
    o.working_dtype = o.grad_dtype = o.comm_dtype = o.accum_dtype = dt;
    o.optimizer_pin_memory = o.param_pin_memory = true;
    o.tensors = m->zt;
    o.num_tensors = m->T.num_params;
    o.sub_group_size = 4000000;
    o.reduce_bucket_size = 1 << 20;
    o.optimizer = ada ? ZERO_OPTIM_ADAFACTOR : ZERO_OPTIM_ADAMW;
    o.adafactor.has_beta1 = beta1;
    return o;
}

static void test_layout_matches_stage0(void** state) {
    (void)state;
    for (size_t k = 0; k < T5_ARRAY_LEN(k_presets); k++) {
        Model m;
        model_build(&m, k_presets[k]);
        for (int b = 0; b < 2; b++) {
            size_t sum = 0;
            for (int i = 0; i < m.T.num_params; i++) {
                const ParamDesc* p = &m.T.params[i];
                const size_t f = zero_adafactor_tensor_floats(&m.zt[i], m.zt[i].numel, b == 1);
                assert_int_equal(f, cpu_adafactor_state_floats(p->ndim == 2 ? (size_t)p->shape[0] : 1,
                                                               p->ndim == 2 ? (size_t)p->shape[1] : p->numel,
                                                               p->ndim == 2, b == 1));
                sum += f;
            }
            assert_int_equal(sum, m.total_floats[b]);
        }
        model_free(&m);
    }
}

// the plan's scratch over the given tensors (as estimate.c builds the list)
static size_t scratch_of(const Model* m, const ZeroLayout* L) {
    AdafactorTensor* ft = calloc(m->T.num_params, sizeof *ft);
    int nf = 0;
    for (int i = 0; i < m->T.num_params; i++) {
        const ZeroTensor* t = &m->zt[i];
        if (L && L->group_cpu[L->unit_group[t->unit]]) continue;
        const bool fac = t->rows > 0;
        ft[nf++] = (AdafactorTensor){.rows = fac ? t->rows : 1, .cols = fac ? t->cols : (int64_t)t->numel,
                                     .factored = fac};
    }
    size_t s = nf ? adafactor_plan_scratch_bytes_for(ft, nf, NULL) : 0;
    free(ft);
    return s;
}

static void test_estimate_sizes(void** state) {
    (void)state;
    char err[512];
    const char* presets[] = {"t5-small", "t5-3b"};
    for (size_t k = 0; k < T5_ARRAY_LEN(presets); k++) {
        Model m;
        model_build(&m, presets[k]);
        for (int b = 0; b < 2; b++) {
            const size_t state_bytes = m.total_floats[b] * 4;
            ZeroMemEstimate e, ea;
            // stage 0: the trainer's fused Adafactor over every tensor, instead of Adam's m, v
            ZeroOptions o = options(&m, 0, DT_F32, true, b);
            assert_int_equal(zero_estimate(&o, m.T.num_units, m.numel, &e, err, sizeof err), 0);
            ZeroOptions oa = options(&m, 0, DT_F32, false, b);
            assert_int_equal(zero_estimate(&oa, m.T.num_units, m.numel, &ea, err, sizeof err), 0);
            assert_int_equal(e.gpu_m, state_bytes);
            assert_int_equal(e.gpu_v, 0);
            assert_int_equal(e.gpu_ada_scratch, scratch_of(&m, NULL));
            assert_int_equal(ea.gpu_ada_scratch, 0);
            assert_int_equal(ea.gpu_m, ea.gpu_v);
            assert_int_equal(e.gpu_resident + ea.gpu_m + ea.gpu_v, ea.gpu_resident + state_bytes + e.gpu_ada_scratch);
            // stage 2, no offload: all on the GPU (one rank: every tensor whole)
            o = options(&m, 2, DT_F16, true, b);
            oa = options(&m, 2, DT_F16, false, b);
            assert_int_equal(zero_estimate(&o, m.T.num_units, m.numel, &e, err, sizeof err), 0);
            assert_int_equal(zero_estimate(&oa, m.T.num_units, m.numel, &ea, err, sizeof err), 0);
            assert_int_equal(e.gpu_m, state_bytes);
            assert_int_equal(e.gpu_v + e.host_total + e.host_m, 0);
            assert_int_equal(e.gpu_ada_scratch, scratch_of(&m, NULL));
            assert_int_equal(ea.gpu_m, m.n * 4);
            assert_int_equal(e.gpu_resident + ea.gpu_m + ea.gpu_v, ea.gpu_resident + state_bytes + e.gpu_ada_scratch);
            // stage 2 + offload ratio 0.3: the CPU units' state on the host, the rest (and the scratch of the GPU
            // units' plan) on the GPU
            o.offload_optimizer = oa.offload_optimizer = true;
            o.ratio = oa.ratio = 0.3;
            assert_int_equal(zero_estimate(&o, m.T.num_units, m.numel, &e, err, sizeof err), 0);
            assert_int_equal(zero_estimate(&oa, m.T.num_units, m.numel, &ea, err, sizeof err), 0);
            assert_true(e.host_m > 0 && e.gpu_m > 0);
            assert_int_equal(e.host_m + e.gpu_m, state_bytes);
            assert_int_equal(e.host_v + e.gpu_v, 0);
            assert_int_equal(e.cpu_numel, ea.cpu_numel);
            assert_int_equal(e.host_total + ea.host_m + ea.host_v, ea.host_total + e.host_m);
            ZeroLayout L;
            assert_int_equal(zero_layout_build(&L, 1, 0, m.T.num_units, m.numel, o.sub_group_size, 0.3, err,
                                               sizeof err), 0);
            size_t host_floats = 0;
            for (int i = 0; i < m.T.num_params; i++)
                if (L.group_cpu[L.unit_group[m.zt[i].unit]])
                    host_floats += zero_adafactor_tensor_floats(&m.zt[i], m.zt[i].numel, b);
            assert_int_equal(e.host_m, host_floats * 4);
            assert_int_equal(e.gpu_ada_scratch, scratch_of(&m, &L));
            zero_layout_free(&L);
            // stage 3, both offloads, fp16, accumulation 1: everything on the host, the gradients still share the
            // 16-bit weights' buffer (14-byte layout; Adafactor reads a tensor's gradient before writing its weights)
            o = options(&m, 3, DT_F16, true, b);
            o.offload_optimizer = o.offload_param = true;
            o.ratio = 1.0;
            assert_true(zero_host_grads_share_weights(&o));
            int trace[4096];
            o.trace = trace;
            o.trace_len = t5_model_fetch_trace(&m.T, trace, 4096);
            assert_true(o.trace_len > 0);
            assert_int_equal(zero_estimate(&o, m.T.num_units, m.numel, &e, err, sizeof err), 0);
            assert_int_equal(e.cpu_numel, m.n);
            assert_int_equal(e.host_m, state_bytes);
            assert_int_equal(e.gpu_m + e.gpu_v + e.gpu_ada_scratch + e.host_v + e.host_gacc, 0);
            assert_int_equal(e.host_total, m.n * (4 + 2) + state_bytes);
        }
        model_free(&m);
    }
    // several ranks (arithmetic only): a rank holding a slice of a matrix keeps the matrix's whole row and column
    // statistics (its partial row/column sums are all-reduced, docs/zero.md); of a vector and of m, its own elements
    const ZeroTensor mat = {.numel = 12, .rows = 3, .cols = 4}, vec = {.numel = 12};
    assert_int_equal(zero_adafactor_tensor_floats(&mat, 5, false), 7);
    assert_int_equal(zero_adafactor_tensor_floats(&mat, 5, true), 12);
    assert_int_equal(zero_adafactor_tensor_floats(&mat, 0, true), 0);
    assert_int_equal(zero_adafactor_tensor_floats(&vec, 5, false), 5);
    assert_int_equal(zero_adafactor_tensor_floats(&vec, 5, true), 10);
    Model m;
    model_build(&m, "t5-small");
    size_t host2 = 0, single = m.total_floats[0] * 4;
    for (int r = 0; r < 2; r++) {
        ZeroOptions o = options(&m, 2, DT_F16, true, false);
        o.world = 2;
        o.rank = r;
        o.offload_optimizer = true;
        o.ratio = 1.0;
        ZeroMemEstimate e;
        assert_int_equal(zero_estimate(&o, m.T.num_units, m.numel, &e, err, sizeof err), 0);
        host2 += e.host_m;
        // the cut CPU tensors' sums and factors (zp_ada_create's mallocs) are in host_total, which zp_create's
        // alloc_host checks its allocations against; everything else pinned: no staging ring for them (they are never
        // copied through one)
        assert_true(e.host_ada_scratch > 0);
        assert_int_equal(e.host_staging, 0);
        assert_int_equal(e.host_total,
                         e.host_master + e.host_m + e.host_v + e.host_gacc + e.host_w + e.host_ada_scratch);
    }
    // the two ranks together: every vector element once, the statistics of a split matrix twice
    assert_true(host2 >= single && host2 < 2 * single);
    model_free(&m);
}

static double gib(double b) { return b / 1073741824.0; }

static void test_bytes_per_parameter(void** state) {
    (void)state;
    const char* presets[] = {"t5-3b", "t5-11b"};
    char err[512];
    for (size_t k = 0; k < T5_ARRAY_LEN(presets); k++) {
        Model m;
        model_build(&m, presets[k]);
        const double none = 4.0 * (double)m.total_floats[0] / (double)m.n, b1 = 4.0 * (double)m.total_floats[1] / (double)m.n;
        print_message("%s: %zu parameters; optimizer state bytes per parameter: Adam 8, Adafactor beta1 None %.4f, "
                      "beta1 0.9 %.4f (+ the fp32 master, 4, with either)\n",
                      presets[k], m.n, none, b1);
        assert_true(none < 0.01);
        assert_true(fabs(b1 - 4.0 - none) < 1e-9);
        // the single-GPU plan: stage 3, both offloads, fp16, pinned, batch 1 x (128 + 128)
        PlanInput in;
        memset(&in, 0, sizeof in);
        assert_true(t5_config_preset(presets[k], &in.model));
        in.dtype = in.grad_dtype = DT_F16;
        in.batch = 1;
        in.src_len = in.tgt_len = 128;
        in.grad_accum_steps = 1;
        in.gpus_per_node = in.num_nodes = 1;
        zero_options_default(&in.knobs);
        in.knobs.comm_dtype = DT_F16;
        in.knobs.optimizer_pin_memory = in.knobs.param_pin_memory = true;
        PlanRow adam, ada;
        assert_int_equal(planner_row(&in, 3, true, true, 1.0, &adam, err, sizeof err), 0);
        in.knobs.optimizer = ZERO_OPTIM_ADAFACTOR;
        assert_int_equal(planner_row(&in, 3, true, true, 1.0, &ada, err, sizeof err), 0);
        print_message("%s stage 3 + both offloads (fp16, batch 1): host %.2f GiB with Adam (%.2f bytes/parameter), "
                      "%.2f GiB with Adafactor beta1 None (%.3f); GPU %.2f / %.2f GiB\n",
                      presets[k], gib((double)adam.h_total), (double)adam.h_total / (double)adam.cpu_numel,
                      gib((double)ada.h_total), (double)ada.h_total / (double)ada.cpu_numel, gib((double)adam.g_total),
                      gib((double)ada.g_total));
        assert_true(fabs((double)adam.h_total / (double)adam.cpu_numel - 14.0) < 1e-6);
        assert_true((double)ada.h_total / (double)ada.cpu_numel < 6.01);
        assert_int_equal(ada.g_total, adam.g_total);  // nothing of the optimizer on the GPU either way
        // stage 2 without offload: the GPU's optimizer column
        in.knobs.optimizer = ZERO_OPTIM_ADAMW;
        assert_int_equal(planner_row(&in, 2, false, false, 1.0, &adam, err, sizeof err), 0);
        in.knobs.optimizer = ZERO_OPTIM_ADAFACTOR;
        assert_int_equal(planner_row(&in, 2, false, false, 1.0, &ada, err, sizeof err), 0);
        print_message("%s stage 2 on the GPU: optim column %.2f GiB (Adam) vs %.2f GiB (Adafactor: master + state + "
                      "plan scratch)\n",
                      presets[k], gib((double)adam.g_optim), gib((double)ada.g_optim));
        assert_true(ada.g_optim < adam.g_optim / 2);
        model_free(&m);
    }
}

// ---- the 14-byte layout: the gradient in the working copy's buffer

static uint64_t sm64(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float urand(uint64_t* s) { return (float)((double)(sm64(s) >> 11) / 9007199254740992.0) * 2.0f - 1.0f; }

static uint16_t to16(DType dt, float x) { return dt == DT_F16 ? cpu_adam_f32_to_f16(x) : cpu_adam_f32_to_bf16(x); }

// jump: the last step's gradient 64x the others' (the second moments lag: the update's rms is clipped)
static void aliased_case(size_t rows, size_t cols, bool factored, DType dt, bool beta1, double wd, bool jump) {
    const size_t n = rows * cols;
    CpuAdafactorOpts o;
    cpu_adafactor_default_opts(&o);
    o.relative_step = false;
    o.has_lr = true;
    o.lr = 1e-2;
    o.has_beta1 = beta1;
    o.beta1 = 0.9;
    o.weight_decay = wd;
    const size_t sf = cpu_adafactor_state_floats(rows, cols, factored, beta1);
    float *p[2], *st[2];
    uint16_t *g[2], *w[2];
    for (int k = 0; k < 2; k++) {
        p[k] = malloc(n * 4);
        st[k] = calloc(sf, 4);
        g[k] = malloc(n * 2);
        w[k] = malloc(n * 2);
    }
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) p[0][i] = p[1][i] = urand(&s);
    for (int step = 1; step <= 3; step++) {
        const float gmul = jump && step == 3 ? 64.0f : 1.0f;
        for (size_t i = 0; i < n; i++) g[0][i] = g[1][i] = to16(dt, urand(&s) * gmul);
        CpuAdafactorStepInfo info[2];
        for (int k = 0; k < 2; k++) {
            CpuAdafactorState S = {.rows = rows, .cols = cols, .factored = factored};
            float* q = st[k];
            if (factored) {
                S.exp_avg_sq_row = q;
                S.exp_avg_sq_col = q + rows;
                q += rows + cols;
            } else {
                S.exp_avg_sq = q;
                q += n;
            }
            if (beta1) S.exp_avg = q;
            // k 0: separate buffers; k 1: the working copy written over the gradient (the engine's shared buffer)
            void* work = k == 0 ? (void*)w[0] : (void*)g[1];
            assert_int_equal(cpu_adafactor_step(&o, step, &S, p[k], g[k], dt, 1.0f / 256, work, dt, &info[k], NULL), 0);
        }
        if (memcmp(p[0], p[1], n * 4) || memcmp(st[0], st[1], sf * 4) || memcmp(w[0], g[1], n * 2) ||
            memcmp(&info[0], &info[1], sizeof info[0]))
            fail_msg("%zu x %zu %s %s: the shared gradient/weight buffer changes the step %d", rows, cols,
                     factored ? "factored" : "vector", dtype_name(dt), step);
        if (step == 3 && jump && !(info[0].clip_div > 1.0f)) fail_msg("the clipping case did not clip");
    }
    for (int k = 0; k < 2; k++) {
        free(p[k]);
        free(st[k]);
        free(g[k]);
        free(w[k]);
    }
}

static void test_aliased_grad_work(void** state) {
    (void)state;
    const DType dts[2] = {DT_F16, DT_BF16};
    for (int d = 0; d < 2; d++) {
        aliased_case(300, 700, true, dts[d], false, 0.0, false);   // several row blocks
        aliased_case(64, 40, true, dts[d], true, 0.01, false);
        aliased_case(1, 150000, false, dts[d], true, 0.1, false);  // a vector of 3 blocks
        aliased_case(40, 64, true, dts[d], false, 0.0, true);      // update rms clipping
    }
}

// ---- the engine's CPU units against the trainer's stage 0 stepping (no GPU: every unit CPU-stepped)

static float grad_value(uint64_t* s, size_t i) { return urand(s) * (i % 7 == 0 ? 3.0f : 1.0f); }

// One rank's engine: a ZeroPart as zp_create carves it for CPU units (its partition of every unit), its buffers
typedef struct {
    ZeroPart* P;
    float* master;   // (part_total)
    void* whost;     // (part_total) 16-bit weights, and the gradient in their place (x16)
    float* gacc32;   // (part_total) fp32: its own gradient buffer
} RankPart;

static void rank_part_create(RankPart* R, const Model* m, const ZeroOptions* o, DType dt, int W, int rank) {
    char err[512];
    const bool x16 = dt != DT_F32;
    ZeroPart* P = calloc(1, sizeof *P);
    R->P = P;
    P->o = *o;
    P->o.tensors = NULL;
    P->num_units = m->T.num_units;
    P->X = P->G = P->C = P->A = dt;
    P->xs = P->gs = P->cs = P->as = dtype_size(dt);
    assert_int_equal(zero_layout_build(&P->L, W, rank, m->T.num_units, m->numel, o->sub_group_size, 1.0, err, sizeof err),
                     0);
    assert_true(P->L.num_groups > 2);
    P->u = calloc((size_t)m->T.num_units, sizeof *P->u);
    P->name = calloc((size_t)m->T.num_units, sizeof *P->name);
    ZeroMemEstimate E;
    zero_estimate_layout(o, &P->L, &E);
    // the CPU units' device buffer for the cut tensors' sums is all the GPU holds
    size_t cred = 0;
    if (W > 1) assert_true(E.ada_reduce_doubles > 0);
    cred = E.ada_reduce_doubles * sizeof(double);
    assert_int_equal(E.gpu_m + E.gpu_ada_scratch, cred);
    assert_int_equal(host_buf_alloc(&P->h_m, E.host_m, false, "state", err, sizeof err), 0);
    const size_t pt = P->L.part_total;
    R->master = calloc(pt, 4);  // the padding after a unit's last owned element stays 0 (never touched)
    R->whost = x16 ? calloc(pt, 2) : NULL;
    R->gacc32 = x16 ? NULL : calloc(pt, 4);
    for (int u = 0; u < m->T.num_units; u++) {
        ZpUnit* U = &P->u[u];
        U->opt_cpu = P->L.group_cpu[P->L.unit_group[u]];
        assert_true(U->opt_cpu);
        U->master = R->master + P->L.part_offset[u];
        U->whost = x16 ? (char*)R->whost + P->L.part_offset[u] * 2 : NULL;
        U->gacc = x16 ? U->whost : (void*)(R->gacc32 + P->L.part_offset[u]);
    }
    pthread_mutex_init(&P->mu, NULL);
    pthread_cond_init(&P->cv, NULL);
    assert_int_equal(zp_ada_create(P, o, err, sizeof err), 0);
}

static void rank_part_free(RankPart* R) {
    ZeroPart* P = R->P;
    zp_ada_destroy(P);
    host_buf_free(&P->h_m);
    zero_layout_free(&P->L);
    pthread_mutex_destroy(&P->mu);
    pthread_cond_destroy(&P->cv);
    free(P->u);
    free(P->name);
    free(P);
    free(R->master);
    free(R->whost);
    free(R->gacc32);
}

// flat (units back to back) <-> rank r's partition: the owned elements of every unit
static void to_rank(const ZeroLayout* L, const size_t* uoff, const void* flat, void* part, size_t es) {
    for (int u = 0; u < L->num_units; u++)
        memcpy((char*)part + L->part_offset[u] * es, (const char*)flat + (uoff[u] + L->lo[u]) * es, (L->hi[u] - L->lo[u]) * es);
}

typedef struct {
    float* d;
    size_t n, got;
} BlobDst;

static void blob_put(void* ctx, int which, size_t off, const float* src, size_t n) {
    (void)which;
    BlobDst* b = ctx;
    assert_true(off + n <= b->n);
    memcpy(b->d + off, src, n * 4);
    b->got += n;
}

// worst |a - b| / max|b| (0 when equal)
static double rel_max(const float* a, const float* b, size_t n) {
    double m = 1e-30, w = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - (double)b[i]));
    return w / m;
}

// dt: the working dtype (16-bit: the gradients in the 16-bit host weights' buffer, the 14-byte layout; fp32: a
// separate fp32 gradient buffer and no working copy). W ranks: each its partition (tensors cut anywhere), the cut
// tensors' sums added over the ranks in rank order between zp_ada_cpu_phase's phases (what zp_ada_cpu_sums'
// all-reduces do); W 1 must be bit-identical to the reference, W > 1 within 1e-6 (the sums split differently)
static void engine_cpu_case(const char* preset, DType dt, bool beta1, bool relative, int W) {
    T5Config c;
    assert_true(t5_config_preset(preset, &c));
    c.vocab_size = 96;
    c.d_model = 24;
    c.d_kv = 8;
    c.num_heads = 3;
    c.d_ff = 40;
    c.num_layers = c.num_decoder_layers = 2;
    c.relative_attention_num_buckets = 8;
    Model m;
    memset(&m, 0, sizeof m);
    char err[512];
    assert_int_equal(params_build(&m.T, &c, err, sizeof err), 0);
    m.zt = calloc(m.T.num_params, sizeof *m.zt);
    m.numel = calloc(m.T.num_units, sizeof *m.numel);
    size_t* uoff = calloc(m.T.num_units, sizeof *uoff);  // the flat offset of each unit (units in order)
    for (int u = 0; u < m.T.num_units; u++) {
        uoff[u] = m.n;
        m.n += m.numel[u] = m.T.units[u].numel;
    }
    for (int i = 0; i < m.T.num_params; i++) {
        const ParamDesc* p = &m.T.params[i];
        m.zt[i] = (ZeroTensor){.unit = p->unit, .offset = p->offset, .numel = p->numel, .decay = p->decay,
                               .fp32_view = params_role_reads_fp32(p->role),
                               .rows = p->ndim == 2 ? p->shape[0] : 0, .cols = p->ndim == 2 ? p->shape[1] : 0};
        m.total_floats[beta1] += cpu_adafactor_state_floats(p->ndim == 2 ? (size_t)p->shape[0] : 1,
                                                            p->ndim == 2 ? (size_t)p->shape[1] : p->numel,
                                                            p->ndim == 2, beta1);
    }
    const bool x16 = dt != DT_F32;
    ZeroOptions o = options(&m, 3, dt, true, beta1);
    o.offload_optimizer = o.offload_param = true;
    o.ratio = 1.0;
    o.sub_group_size = 3000;  // several sub-groups
    o.optimizer_pin_memory = o.param_pin_memory = false;  // host_buf_alloc without CUDA
    o.world = W;
    o.adafactor = (ZeroAdafactor){.eps1 = 1e-30, .eps2 = 1e-3, .clip_threshold = 1.0, .decay_rate = -0.8,
                                  .has_beta1 = beta1, .beta1 = 0.9, .weight_decay = 0.05, .scale_parameter = relative,
                                  .relative_step = relative};
    assert_int_equal(zero_host_grads_share_weights(&o), x16);
    RankPart R[4];
    for (int r = 0; r < W; r++) {
        o.rank = r;
        rank_part_create(&R[r], &m, &o, dt, W, r);
    }
    const size_t total = m.total_floats[beta1];
    if (W == 1) assert_int_equal(zp_ada_state_floats(R[0].P), total);
    // the reference: the trainer's stage 0 (per tensor in table order, separate gradient and working buffers, the
    // "adafactor" blob layout), with the options run.c builds
    CpuAdafactorOpts ro;
    cpu_adafactor_default_opts(&ro);
    ro.relative_step = ro.scale_parameter = relative;
    ro.has_lr = !relative;
    ro.has_beta1 = beta1;
    ro.beta1 = 0.9;
    ro.weight_decay = 0.05;
    float* rmaster = malloc(m.n * 4);
    uint16_t* rg16 = malloc(m.n * 2);
    float* rg32 = malloc(m.n * 4);
    uint16_t* rwork = malloc(m.n * 2);
    float* rstate = calloc(total, 4);
    uint64_t s = 7;
    for (size_t i = 0; i < m.n; i++) rmaster[i] = urand(&s) * 0.5f;
    for (int r = 0; r < W; r++) to_rank(&R[r].P->L, uoff, rmaster, R[r].master, 4);
    CpuAdafactorStepInfo info0 = {0};
    double worst = 0;
    int cut = 0;
    for (int step = 1; step <= 3; step++) {
        const double lr = 1e-2 / step;
        // gradients: into the engine's buffers (over its 16-bit weights) and the reference's own
        for (size_t i = 0; i < m.n; i++) {
            const float g = grad_value(&s, i);
            if (x16) rg16[i] = to16(dt, g);
            else rg32[i] = g;
        }
        for (int r = 0; r < W; r++) {
            if (x16) to_rank(&R[r].P->L, uoff, rg16, R[r].whost, 2);
            else to_rank(&R[r].P->L, uoff, rg32, R[r].gacc32, 4);
        }
        const float inv_scale = 0.5f;
        float* st = rstate;
        for (int i = 0; i < m.T.num_params; i++) {
            const ParamDesc* p = &m.T.params[i];
            const bool fac = p->ndim == 2;
            CpuAdafactorState S = cpu_adafactor_state_at(st, fac ? (size_t)p->shape[0] : 1,
                                                         fac ? (size_t)p->shape[1] : p->numel, fac, beta1);
            st += cpu_adafactor_state_floats(S.rows, S.cols, fac, beta1);
            CpuAdafactorOpts oi = ro;
            oi.lr = relative ? 0.0 : lr;
            if (!p->decay) oi.weight_decay = 0.0;
            const size_t off = uoff[p->unit] + p->offset;
            CpuAdafactorStepInfo info;
            assert_int_equal(cpu_adafactor_step(&oi, step, &S, rmaster + off, x16 ? (void*)(rg16 + off) : (void*)(rg32 + off),
                                                dt, inv_scale, x16 ? (void*)(rwork + off) : NULL, dt, &info, NULL), 0);
            if (i == 0) info0 = info;
        }
        // the engine: the cut tensors' sums over the ranks (rank order), then unit by unit in the thread's order
        ZeroStepArgs a = {.lr = (float)lr, .lr64 = lr, .step = step, .inv_scale = inv_scale};
        for (int phase = 1; phase <= 3; phase++) {
            for (int r = 0; r < W; r++) zp_ada_cpu_phase(R[r].P, &a, phase);
            if (phase == 3 || W == 1) continue;
            size_t n;
            double* tot = zp_ada_cpu_sums_buffer(R[0].P, phase, &n);
            double* sum = calloc(n ? n : 1, sizeof(double));
            for (int r = 0; r < W; r++) {
                size_t nr;
                const double* b = zp_ada_cpu_sums_buffer(R[r].P, phase, &nr);
                assert_int_equal(nr, n);
                for (size_t k = 0; k < n; k++) sum[k] += b[k];
            }
            for (int r = 0; r < W; r++) memcpy(zp_ada_cpu_sums_buffer(R[r].P, phase, &n), sum, n * sizeof(double));
            (void)tot;
            cut = (int)n;
            free(sum);
        }
        for (int r = 0; r < W; r++) {
            ZeroPart* P = R[r].P;
            for (int g = 0; g < P->L.num_groups; g++)
                for (int u = P->L.group_first[g]; u < P->L.group_first[g] + P->L.group_count[g]; u++)
                    zp_ada_cpu_unit(P, u, &a);
            // this rank's partition of the reference's master and 16-bit weights, its blob re-cut from the whole one
            const size_t pt = P->L.part_total;
            float* want = calloc(pt, 4);
            to_rank(&P->L, uoff, rmaster, want, 4);
            const size_t nf = zp_ada_state_floats(P);
            float* blob = malloc((nf ? nf : 1) * 4);
            float* wblob = calloc(nf ? nf : 1, 4);
            zp_ada_state_io(P, 0, nf, blob, true);
            ZeroLayout L1;
            assert_int_equal(zero_layout_build(&L1, 1, 0, m.T.num_units, m.numel, 1000000000, 0.0, err, sizeof err), 0);
            BlobDst bd = {.d = wblob, .n = nf};
            recut_ada_chunk(m.zt, m.T.num_params, beta1, &L1, &P->L, 0, rstate, total, blob_put, &bd);
            assert_int_equal(bd.got, nf);
            zero_layout_free(&L1);
            if (W == 1) {
                if (memcmp(R[r].master, want, pt * 4)) fail_msg("%s %s step %d: fp32 master differs", preset, dtype_name(dt), step);
                if (memcmp(blob, wblob, nf * 4)) fail_msg("%s %s step %d: the adafactor blob differs", preset, dtype_name(dt), step);
            } else {
                const double e = fmax(rel_max(R[r].master, want, pt), rel_max(blob, wblob, nf));
                if (e > 1e-6)
                    fail_msg("%s %s W %d rank %d step %d: master / state differ by %.3g", preset, dtype_name(dt), W, r,
                             step, e);
                worst = fmax(worst, e);
            }
            if (x16) {
                uint16_t* w16 = calloc(pt, 2);
                to_rank(&P->L, uoff, rwork, w16, 2);
                for (size_t i = 0; i < pt; i++)
                    if (abs((int)w16[i] - (int)((uint16_t*)R[r].whost)[i]) > (W == 1 ? 0 : 1))
                        fail_msg("%s %s W %d rank %d step %d: 16-bit weight %zu differs", preset, dtype_name(dt), W, r,
                                 step, i);
                free(w16);
            }
            if (W == 1) {
                // a ranged read at an odd offset, and a write back of the same bytes
                zp_ada_state_io(P, 5, total - 9, blob, true);
                assert_memory_equal(blob, rstate + 5, (total - 9) * 4);
                zp_ada_state_io(P, 5, total - 9, blob, false);
            }
            if (r == 0) assert_true(fabsf(zp_ada_last_lr(P, 0) - info0.lr) <= 1e-6f * info0.lr);
            free(want);
            free(blob);
            free(wblob);
        }
    }
    if (W > 1)
        print_message("%s %s%s%s on %d ranks: %d tensors cut, their sums reduced per step; worst difference from the "
                      "whole-tensor stepping %.3g\n", preset, dtype_name(dt), beta1 ? " beta1" : "",
                      relative ? " relative_step" : "", W, cut, worst);
    for (int r = 0; r < W; r++) rank_part_free(&R[r]);
    free(rmaster);
    free(rg16);
    free(rg32);
    free(rwork);
    free(rstate);
    free(uoff);
    model_free(&m);
}

static void test_engine_cpu_units(void** state) {
    (void)state;
    const char* presets[] = {"t5-small", "google/t5-v1_1-small"};  // tied / untied head
    for (size_t k = 0; k < T5_ARRAY_LEN(presets); k++) {
        engine_cpu_case(presets[k], DT_F16, false, false, 1);
        engine_cpu_case(presets[k], DT_BF16, true, true, 1);
        engine_cpu_case(presets[k], DT_F32, true, false, 1);
        // several ranks (offload_optimizer: every tensor CPU-stepped, the cut ones as slices)
        engine_cpu_case(presets[k], DT_F16, false, true, 2);
        engine_cpu_case(presets[k], DT_BF16, true, true, 3);
        engine_cpu_case(presets[k], DT_F32, true, false, 4);
    }
}


// ---- several ranks: the partial sums

// One rank's partial sums of tensor t over its slice [f, f + c) into buffer 1 at off (the GPU plan's geometry: the
// rows the slice touches, the first and last clipped to it; cuda/adafactor.cu rowstats / colstats): row sums and
// column sums of g^2, then sum p^2 (a vector: sum p^2 only).
static void slice_sums(const ZeroTensor* t, const double* g, const double* p, size_t f, size_t c, double* red1) {
    const bool fac = t->rows > 0 && t->cols > 0;
    const int64_t cols = fac ? t->cols : (int64_t)t->numel;
    double ps = 0;
    for (size_t i = f; i < f + c; i++) ps += p[i] * p[i];
    if (!fac) {
        red1[0] = ps;
        return;
    }
    const int64_t r0 = (int64_t)f / cols, r1 = CEIL_DIV((int64_t)(f + c), cols);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t jlo = (int64_t)f > r * cols ? (int64_t)f - r * cols : 0;
        const int64_t jhi = (int64_t)(f + c) < (r + 1) * cols ? (int64_t)(f + c) - r * cols : cols;
        for (int64_t j = jlo; j < jhi; j++) {
            const double gg = g[r * cols + j] * g[r * cols + j];
            red1[r] += gg;
            red1[t->rows + j] += gg;
        }
    }
    red1[t->rows + t->cols] = ps;
}

static void test_split_partial_sums(void** state) {
    (void)state;
    // three units: matrices (odd shapes, one row, one column) and vectors, every unit a multiple of 8 elements
    enum { NT = 9 };
    const int64_t shape[NT][2] = {{7, 13}, {0, 0}, {1, 40}, {16, 1}, {0, 0}, {33, 17}, {5, 9}, {0, 0}, {64, 3}};
    const size_t vlen[NT] = {0, 11, 0, 0, 29, 0, 0, 8, 0};
    const int unit_of[NT] = {0, 0, 0, 1, 1, 1, 2, 2, 2};
    ZeroTensor zt[NT];
    size_t numel[3] = {0, 0, 0};
    memset(zt, 0, sizeof zt);
    for (int i = 0; i < NT; i++) {
        zt[i].unit = unit_of[i];
        zt[i].rows = shape[i][0];
        zt[i].cols = shape[i][1];
        zt[i].numel = shape[i][0] ? (size_t)(shape[i][0] * shape[i][1]) : vlen[i];
        zt[i].offset = numel[unit_of[i]];
        numel[unit_of[i]] += zt[i].numel;
    }
    for (int u = 0; u < 3; u++) numel[u] = CEIL_DIV(numel[u], (size_t)8) * 8;
    // integer data: every sum below is exact in fp64, so "equal" means equal
    double* g[NT];
    double* p[NT];
    uint64_t seed = 17;
    for (int i = 0; i < NT; i++) {
        g[i] = malloc(zt[i].numel * sizeof(double));
        p[i] = malloc(zt[i].numel * sizeof(double));
        for (size_t k = 0; k < zt[i].numel; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            g[i][k] = (double)((int)(seed >> 40) % 201 - 100);
            p[i][k] = (double)((int)(seed >> 20) % 21 - 10);
        }
    }
    char err[256];
    int shared_seen = 0, partial_rows_seen = 0;
    for (int W = 1; W <= 5; W++) {
        ZeroLayout L[5];
        ZeroAdaSplit S[5];
        for (int r = 0; r < W; r++) {
            assert_int_equal(zero_layout_build(&L[r], W, r, 3, numel, 1000000000, 0.0, err, sizeof err), 0);
            zero_ada_split_build(&S[r], zt, NT, &L[r], NULL);
        }
        // the shared sections: the same on every rank
        for (int r = 1; r < W; r++) {
            assert_int_equal(S[r].shared1, S[0].shared1);
            assert_int_equal(S[r].shared2, S[0].shared2);
            for (int i = 0; i < NT; i++) {
                assert_int_equal(S[r].shared[i], S[0].shared[i]);
                if (S[0].shared[i]) {
                    assert_int_equal(S[r].off1[i], S[0].off1[i]);
                    assert_int_equal(S[r].off2[i], S[0].off2[i]);
                }
            }
        }
        double* total = calloc((size_t)T5_MAX(S[0].shared1, (int64_t)1), sizeof(double));
        double* red[5];
        for (int r = 0; r < W; r++) {
            red[r] = calloc((size_t)T5_MAX(S[r].len1, (int64_t)1), sizeof(double));
            for (int i = 0; i < NT; i++) {
                if (S[r].count[i] == 0) continue;
                assert_true(S[r].off1[i] >= 0 && S[r].off1[i] + zero_ada_red1_len(&zt[i]) <= S[r].len1);
                assert_true(S[r].off2[i] >= 0 && S[r].off2[i] < S[r].len2);
                if (zt[i].rows > 0 && (S[r].first[i] % (size_t)zt[i].cols || S[r].count[i] % (size_t)zt[i].cols))
                    partial_rows_seen++;
                slice_sums(&zt[i], g[i], p[i], S[r].first[i], S[r].count[i], red[r] + S[r].off1[i]);
            }
            for (int64_t k = 0; k < S[0].shared1; k++) total[k] += red[r][k];  // the all-reduce, in rank order
        }
        for (int i = 0; i < NT; i++) {
            // every element on exactly one rank, the slices back to back in rank order
            size_t next = 0;
            int holders = 0;
            for (int r = 0; r < W; r++) {
                if (S[r].count[i] == 0) continue;
                assert_int_equal(S[r].first[i], next);
                next += S[r].count[i];
                holders++;
            }
            assert_int_equal(next, zt[i].numel);
            assert_int_equal(S[0].shared[i], holders > 1);
            shared_seen += holders > 1;
            // the whole tensor's sums
            const int64_t len = zero_ada_red1_len(&zt[i]);
            double* want = calloc((size_t)len, sizeof(double));
            slice_sums(&zt[i], g[i], p[i], 0, zt[i].numel, want);
            const double* got = NULL;
            if (S[0].shared[i]) {
                got = total + S[0].off1[i];
            } else {
                for (int r = 0; r < W; r++)
                    if (S[r].count[i]) got = red[r] + S[r].off1[i];  // the one holder's local slots
                assert_true(S[0].off1[i] < 0 || S[0].off1[i] >= S[0].shared1);
            }
            for (int64_t k = 0; k < len; k++)
                if (got[k] != want[k])
                    fail_msg("W %d tensor %d (%lld x %lld): reduced sum %lld is %.17g, the whole tensor's %.17g", W, i,
                             (long long)zt[i].rows, (long long)zt[i].cols, (long long)k, got[k], want[k]);
            free(want);
        }
        for (int r = 0; r < W; r++) {
            free(red[r]);
            zero_ada_split_free(&S[r]);
            zero_layout_free(&L[r]);
        }
        free(total);
    }
    print_message("split partial sums: %d shared tensors over W = 1..5, %d slices with partial rows: every reduced "
                  "sum equal to the whole tensor's\n", shared_seen, partial_rows_seen);
    assert_true(shared_seen > 10);
    assert_true(partial_rows_seen > 5);
    for (int i = 0; i < NT; i++) {
        free(g[i]);
        free(p[i]);
    }
}

// ---- the CPU Adafactor over slices against the whole tensor

static double worst_rel(const float* got, const float* want, size_t n, double scale) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)got[i] - (double)want[i]) / scale);
    return w;
}

static float maxabs(const float* x, size_t n) {
    float m = 1e-30f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static void split_step_case(size_t rows, size_t cols, bool fac, int k, DType gdt, uint64_t seed) {
    const size_t n = rows * cols;
    CpuAdafactorOpts o;
    cpu_adafactor_default_opts(&o);
    o.has_lr = true, o.lr = 1e-2, o.relative_step = false, o.scale_parameter = true;
    o.has_beta1 = true, o.beta1 = 0.9, o.weight_decay = 0.01;
    // the whole tensor (reference) and k ranks' slices: cuts at i * n / k + 5 i
    float* P = malloc(n * 4);
    float* G = malloc(n * 4);
    uint16_t* G16 = malloc(n * 2);
    uint16_t* W = malloc(n * 2);
    float* st = calloc(cpu_adafactor_state_floats(fac ? rows : 1, fac ? cols : n, fac, true), 4);
    CpuAdafactorState S = cpu_adafactor_state_at(st, fac ? rows : 1, fac ? cols : n, fac, true);
    size_t cut[5];
    for (int r = 0; r <= k; r++) cut[r] = r == k ? n : T5_MIN(n, (size_t)r * n / (size_t)k + 5 * (size_t)r);
    float* rp[4];
    float* rst[4];
    uint16_t* rw[4];
    CpuAdafactorSlice sl[4];
    const size_t len1 = fac ? rows + cols + 1 : 1;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        P[i] = ((float)((seed >> 33) % 2001) - 1000.0f) * 5e-5f;
    }
    for (int r = 0; r < k; r++) {
        const size_t c = cut[r + 1] - cut[r];
        rp[r] = malloc((c ? c : 1) * 4);
        memcpy(rp[r], P + cut[r], c * 4);
        rw[r] = malloc((c ? c : 1) * 2);
        // the slice's state: whole statistics of a matrix (replicated), the slice's v; then its exp_avg
        rst[r] = calloc((fac ? rows + cols : c) + c + 1, 4);
        sl[r] = (CpuAdafactorSlice){.rows = fac ? rows : 1, .cols = fac ? cols : n, .factored = fac, .first = cut[r],
                                    .count = c, .master = rp[r], .grad_dtype = gdt, .grad_scale = 0.5f,
                                    .work = rw[r], .work_dtype = DT_BF16};
        sl[r].state = cpu_adafactor_state_at(rst[r], fac ? rows : 1, fac ? cols : c, fac, true);
    }
    double* red1 = malloc(len1 * 8);
    double* tot1 = malloc(len1 * 8);
    float* factors[4];
    for (int r = 0; r < k; r++) factors[r] = malloc((rows + cols) * 4);
    double worst = 0;
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            G[i] = i % 53 == 3 ? 0.0f : ((float)((seed >> 30) % 4001) - 2000.0f) * 1e-3f * (step == 2 ? 30.0f : 1.0f);
            G16[i] = cpu_adam_f32_to_bf16(G[i]);
        }
        const void* g = gdt == DT_BF16 ? (const void*)G16 : (const void*)G;
        CpuAdafactorStepInfo want, got;
        assert_int_equal(cpu_adafactor_step(&o, step, &S, P, g, gdt, 0.5f, W, DT_BF16, &want, NULL), 0);
        // the three calls, the sums added over the ranks in rank order between them
        double tot2 = 0;
        for (size_t q = 0; q < len1; q++) tot1[q] = 0;
        for (int r = 0; r < k; r++) {
            if (!sl[r].count) continue;
            sl[r].grad = gdt == DT_BF16 ? (const void*)(G16 + cut[r]) : (const void*)(G + cut[r]);
            double r2 = 0;
            cpu_adafactor_slice_sums(&o, step, &sl[r], red1, &r2, NULL);
            for (size_t q = 0; q < len1; q++) tot1[q] += red1[q];
            tot2 += r2;
        }
        double tot2b = fac ? 0 : tot2;
        for (int r = 0; r < k; r++) {
            if (!sl[r].count) continue;
            double r2 = 0;
            cpu_adafactor_slice_factors(&o, step, &sl[r], tot1, factors[r], &r2);
            if (fac) tot2b += r2;
        }
        for (int r = 0; r < k; r++) {
            if (!sl[r].count) continue;
            cpu_adafactor_slice_apply(&o, step, &sl[r], tot1[len1 - 1], tot2b, factors[r], &got);
            const float sv[4] = {got.param_rms, got.lr, got.update_rms, got.clip_div};
            const float rv[4] = {want.param_rms, want.lr, want.update_rms, want.clip_div};
            for (int z = 0; z < 4; z++)
                if (fabs((double)sv[z] - rv[z]) > 1e-6 * fabs((double)rv[z]))
                    fail_msg("%zu x %zu k %d step %d rank %d: scalar %d %.9g, whole %.9g", rows, cols, k, step, r, z,
                             sv[z], rv[z]);
        }
        // compare every rank's pieces with the whole tensor's
        const double sp = maxabs(P, n), sm = maxabs(S.exp_avg, n);
        for (int r = 0; r < k; r++) {
            const size_t c = sl[r].count;
            if (!c) continue;
            double w = worst_rel(rp[r], P + cut[r], c, sp);
            w = fmax(w, worst_rel(sl[r].state.exp_avg, S.exp_avg + cut[r], c, sm));
            if (fac) {
                w = fmax(w, worst_rel(sl[r].state.exp_avg_sq_row, S.exp_avg_sq_row, rows, maxabs(S.exp_avg_sq_row, rows)));
                w = fmax(w, worst_rel(sl[r].state.exp_avg_sq_col, S.exp_avg_sq_col, cols, maxabs(S.exp_avg_sq_col, cols)));
            } else {
                w = fmax(w, worst_rel(sl[r].state.exp_avg_sq, S.exp_avg_sq + cut[r], c, maxabs(S.exp_avg_sq, n)));
            }
            for (size_t i = 0; i < c; i++)
                if (abs((int)rw[r][i] - (int)W[cut[r] + i]) > 1)
                    fail_msg("%zu x %zu k %d step %d rank %d work[%zu]: 0x%04x, whole 0x%04x", rows, cols, k, step, r,
                             cut[r] + i, rw[r][i], W[cut[r] + i]);
            if (w > 1e-6) fail_msg("%zu x %zu k %d step %d rank %d: slices differ from the whole by %.3g", rows, cols, k,
                                   step, r, w);
            worst = fmax(worst, w);
        }
    }
    print_message("%zu x %zu%s, %s gradients, %d slices: 3 steps, worst %.3g of the array's max\n", rows, cols,
                  fac ? "" : " (vector)", dtype_name(gdt), k, worst);
    for (int r = 0; r < k; r++) {
        free(rp[r]);
        free(rst[r]);
        free(rw[r]);
        free(factors[r]);
    }
    free(P), free(G), free(G16), free(W), free(st), free(red1), free(tot1);
}

static void test_cpu_split_step(void** state) {
    (void)state;
    split_step_case(7, 13, true, 2, DT_F32, 1);
    split_step_case(3, 70000, true, 3, DT_BF16, 2);   // several blocks per slice, cuts inside the rows
    split_step_case(300, 250, true, 4, DT_F32, 3);    // tall: a slice of many row blocks
    split_step_case(1, 777, true, 2, DT_BF16, 4);     // one row: both slices partial
    split_step_case(1, 150000, false, 3, DT_F32, 5);  // a vector of several blocks
    split_step_case(1, 29, false, 4, DT_BF16, 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_matches_stage0),
        cmocka_unit_test(test_estimate_sizes),
        cmocka_unit_test(test_bytes_per_parameter),
        cmocka_unit_test(test_aliased_grad_work),
        cmocka_unit_test(test_engine_cpu_units),
        cmocka_unit_test(test_split_partial_sums),
        cmocka_unit_test(test_cpu_split_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
