/*
 * flops.c: a T5 step's model FLOPs and known GPUs' peaks (formula and sources in flops.h).
 */
#include "flops.h"

#include <string.h>

double flops_t5_forward(const T5Config* cfg, int64_t B, int64_t S, int64_t T) {
    if (!cfg || B <= 0 || S <= 0 || T <= 0 || cfg->d_model <= 0 || cfg->d_ff <= 0) return 0.0;
    const double D = cfg->d_model, I = (double)cfg->num_heads * cfg->d_kv, F = cfg->d_ff, V = cfg->vocab_size;
    const double G = cfg->feed_forward == T5_FF_GATED_GELU ? 2.0 : 1.0;
    const double s = (double)S, t = (double)T;
    const int Ld = cfg->num_decoder_layers > 0 ? cfg->num_decoder_layers : cfg->num_layers;
    const double enc = 2 * s * D * I * 4 + 2 * s * s * I * 2 + 2 * s * D * F * (G + 1);
    const double dec = 2 * t * D * I * 4 + 2 * t * t * I * 2                 // self-attention
                       + 2 * t * D * I * 2 + 2 * s * D * I * 2 + 2 * t * s * I * 2  // cross-attention
                       + 2 * t * D * F * (G + 1);                              // feed-forward
    const double head = 2 * t * D * V;
    return (double)B * (cfg->num_layers * enc + Ld * dec + head);
}

double flops_t5_train_step(const T5Config* cfg, int64_t B, int64_t S, int64_t T) {
    return 3.0 * flops_t5_forward(cfg, B, S, T);
}

// NVIDIA's data sheets (dense: halved where they quote sparsity); the first row whose name (and variant) the device
// name contains
typedef struct {
    const char *name, *variant;
    double peak16, peak32;
} DevicePeak;
static const DevicePeak PEAKS[] = {
    {"H200", NULL, 989e12, 67e12},
    {"H100", "PCIe", 756e12, 51e12},
    {"H100", "NVL", 835e12, 60e12},
    {"H100", NULL, 989e12, 67e12},  // SXM5 (HBM3): "NVIDIA H100 80GB HBM3"
    {"A100", NULL, 312e12, 19.5e12},
};

static const DevicePeak* device_peak(const char* name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof PEAKS / sizeof PEAKS[0]; i++)
        if (strstr(name, PEAKS[i].name) && (!PEAKS[i].variant || strstr(name, PEAKS[i].variant))) return &PEAKS[i];
    return NULL;
}

double flops_device_peak_16bit(const char* name) {
    const DevicePeak* p = device_peak(name);
    return p ? p->peak16 : 0.0;
}

double flops_device_peak_fp32(const char* name) {
    const DevicePeak* p = device_peak(name);
    return p ? p->peak32 : 0.0;
}
