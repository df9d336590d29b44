/*
 * grad_clip.c: DeepSpeed's combined unscale+clip factor and torch's clip_grad_norm_ coefficient
 * (see grad_clip.h). Every operation is a separate fp32 operation, as on fp32 torch tensors
 * (Python float operands are rounded to fp32 first: 1e-6 -> 1e-6f).
 */
#include "grad_clip.h"

// volatile stores keep each intermediate an fp32 value (no contraction or excess precision)
float ds_grad_combined_scale(float scaled_norm, float loss_scale, float clip) {
    if (!(clip > 0.0f)) return loss_scale;
    volatile float t = scaled_norm / loss_scale;  // total_norm / self.loss_scale
    t = t + 1e-6f;                                // + 1e-6
    t = t / clip;                                 // / self.clip_grad
    float c = t < 1.0f ? 1.0f : t;                // torch.clamp(clip, min=1.0)  (NaN stays NaN)
    if (t != t) c = t;
    volatile float combined = c * loss_scale;     // clip * self.loss_scale
    return combined;
}

float ds_grad_inv_scale(float scaled_norm, float loss_scale, float clip) {
    volatile float combined = ds_grad_combined_scale(scaled_norm, loss_scale, clip);
    return 1.0f / combined;
}

float torch_clip_coef(float total_norm, float max_norm) {
    volatile float d = total_norm + 1e-6f;
    volatile float coef = max_norm / d;
    return coef > 1.0f ? 1.0f : coef;  // torch.clamp(clip_coef, max=1.0)
}
