/*
 * grad_clip.h: the two gradient-clipping rules t5train must reproduce, as scalar functions.
 *
 * 1. DeepSpeed ZeRO with fp16/bf16 (stage3.py / stage_1_and_2.py unscale_and_clip_grads): unscaling
 *    and clipping are ONE multiply of the fp32 gradient by 1/combined, with
 *        combined = loss_scale * max(1, (norm/loss_scale + 1e-6) / clip)      (clip > 0)
 *        combined = loss_scale                                                (clip <= 0)
 *    where `norm` is the global L2 norm of the *scaled* gradients (-1 when inf/nan; such steps are
 *    skipped anyway under fp16). DeepSpeed evaluates this on fp32 tensors; ds_grad_inv_scale does the
 *    same fp32 operations in the same order, and returns the fp32 reciprocal 1/combined that
 *    grad.mul_() applies. This is the path of every DeepSpeed config (gradient_clipping key, HF
 *    max_grad_norm 1.0 via "auto"); the result is the `grad_scale` argument of cpu_adam_update and of
 *    the GPU adamw (global_norm_clip_scale computes the same thing on the device).
 *
 * 2. torch.nn.utils.clip_grad_norm_ (HF Trainer without DeepSpeed, after GradScaler.unscale_):
 *        coef = max_norm / (total_norm + 1e-6), clamped to at most 1, grads *= coef (always).
 *    torch_clip_coef returns coef in fp32. Under HF AMP the gradients are first unscaled by
 *    GradScaler (inv_scale = 1/scale in fp32), so the effective input scale is inv_scale * coef
 *    applied as two separate fp32 multiplies (not fused).
 */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// DeepSpeed: combined unscale+clip divisor (fp32 math). scaled_norm: norm of the scaled gradients.
float ds_grad_combined_scale(float scaled_norm, float loss_scale, float clip);
// DeepSpeed: 1/combined as applied by grad.mul_(1. / combined_scale) (fp32 reciprocal).
float ds_grad_inv_scale(float scaled_norm, float loss_scale, float clip);
// torch.nn.utils.clip_grad_norm_: clamp(max_norm / (total_norm + 1e-6), max=1) in fp32.
float torch_clip_coef(float total_norm, float max_norm);

#ifdef __cplusplus
}
#endif
