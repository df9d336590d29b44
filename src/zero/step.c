/*
 * step.c: AdamW over the partition's tensors (step.h): the fused GPU plan (cuda/adamw.cu) for the GPU-stepped
 * units, DeepSpeed's CPU AdamW (cpu_adam.c) for one CPU-stepped unit. part_step.c drives both.
 */
#include "step.h"

#include "../base/common.h"

AdamWPlan* zstep_adamw_plan(ZeroPart* P, int* count) {
    *count = 0;
    for (int u = 0; u < P->num_units; u++)
        if (!P->u[u].opt_cpu) *count += P->u[u].nsegs;
    if (*count == 0) return NULL;
    AdamWTensor* at = calloc_check((size_t)*count, sizeof(AdamWTensor));
    int i = 0;
    for (int u = 0; u < P->num_units; u++) {
        ZpUnit* U = &P->u[u];
        if (U->opt_cpu) continue;
        char* xdst = zp_unit_x_dst(P, u);
        for (int k = 0; k < U->nsegs; k++) {
            const ZpSeg* sg = &U->segs[k];
            at[i++] = (AdamWTensor){.master = U->master + sg->offset, .m = U->m + sg->offset,
                                    .v = U->v + sg->offset,
                                    .grad = (const char*)U->gacc + sg->offset * P->as,
                                    .work = P->X == DT_F32 ? NULL : xdst + sg->offset * P->xs,
                                    .n = (int64_t)sg->numel, .grad_dtype = P->A,
                                    .work_dtype = P->X == DT_F32 ? DT_F16 : P->X,
                                    .weight_decay = sg->decay ? P->o.weight_decay : 0.0f};
        }
    }
    AdamWPlan* plan = adamw_plan_create(at, *count);
    free(at);
    return plan;
}

void zstep_adamw_gpu(const ZeroPart* P, AdamWPlan* plan, const ZeroStepArgs* a, cudaStream_t s) {
    AdamWStepArgs sa = {.lr = a->lr, .beta1 = P->o.beta1, .beta2 = P->o.beta2, .eps = P->o.eps,
                        .bias_correction1 = a->bias_correction1, .bias_correction2 = a->bias_correction2,
                        .adamw_mode = P->o.adamw_mode};
    adamw_step(plan, &sa, a->d_inv_scale, NULL, s);
}

void zstep_adamw_cpu_unit(ZeroPart* P, int u, const ZeroStepArgs* a, const CpuAdam* ca) {
    ZpUnit* U = &P->u[u];
    for (int k = 0; k < U->nsegs; k++) {
        const ZpSeg* sg = &U->segs[k];
        void* work = U->whost ? (char*)U->whost + sg->offset * P->xs : NULL;
        cpu_adam_update(ca, a->lr, sg->decay ? P->o.weight_decay : 0.0f, U->master + sg->offset, U->m + sg->offset,
                        U->v + sg->offset, (const char*)U->gacc + sg->offset * P->as, P->A, a->inv_scale, work,
                        P->X == DT_F32 ? DT_F16 : P->X, sg->numel);
    }
}
