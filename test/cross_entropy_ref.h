/*
 * cross_entropy_ref.h: the fp64 CPU reference of the (label-smoothed) cross-entropy that
 * cuda/cross_entropy.cu computes, shared by test/test_label_smoothing.c (which checks it against the numpy
 * transcription of HF's LabelSmoother and by hand) and test/test_gpu_cross_entropy.c (which checks the kernel
 * against it). Header-only (static) because every test/test_*.c is its own program.
 *   logits (N,V) fp32, labels (N) int32 with -100 ignored, eps in [0, 1).
 *   per token n (counted): lse_n = log sum_k exp(x_nk);
 *     losses[n] = (1-eps) (lse_n - x_n,label) + eps (lse_n - sum_k x_nk / V)   (0 for ignored rows)
 *   returns the mean over the counted tokens (0 when none: the kernel's choice, HF gives 0/0 = NaN);
 *   dlogits[n,k] = grad_scale (p_nk - (1-eps) [k == label] - eps / V) / count  (0 rows for ignored tokens).
 *   losses / dlogits may be NULL.
 */
#pragma once
#include <math.h>
#include <stddef.h>

static double ce_ref_smoothed(const float* logits, const int* labels, int N, int V, double eps, double grad_scale,
                              double* losses, double* dlogits) {
    int count = 0;
    for (int n = 0; n < N; n++) count += labels[n] != -100;
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const float* x = logits + (size_t)n * V;
        double* dx = dlogits ? dlogits + (size_t)n * V : NULL;
        if (labels[n] == -100) {
            if (losses) losses[n] = 0.0;
            if (dx)
                for (int k = 0; k < V; k++) dx[k] = 0.0;
            continue;
        }
        double mx = -INFINITY, s = 0.0, sx = 0.0;
        for (int k = 0; k < V; k++) mx = fmax(mx, (double)x[k]);
        for (int k = 0; k < V; k++) {
            s += exp((double)x[k] - mx);
            sx += (double)x[k];
        }
        const double lse = mx + log(s);
        const double l = (1.0 - eps) * (lse - (double)x[labels[n]]) + eps * (lse - sx / V);
        if (losses) losses[n] = l;
        total += l;
        if (dx)
            for (int k = 0; k < V; k++)
                dx[k] = grad_scale * (exp((double)x[k] - lse) - eps / V - (k == labels[n] ? 1.0 - eps : 0.0)) / count;
    }
    return count ? total / count : 0.0;
}
