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

double flops_device_peak_16bit(const char* name) {
    if (!name) return 0.0;
    if (strstr(name, "H200")) return 989e12;
    if (strstr(name, "H100")) {
        if (strstr(name, "PCIe")) return 756e12;
        if (strstr(name, "NVL")) return 835e12;
        return 989e12;  // SXM5 (HBM3): "NVIDIA H100 80GB HBM3"
    }
    if (strstr(name, "A100")) return 312e12;
    return 0.0;
}

double flops_device_peak_fp32(const char* name) {
    if (!name) return 0.0;
    if (strstr(name, "H200")) return 67e12;
    if (strstr(name, "H100")) {
        if (strstr(name, "PCIe")) return 51e12;
        if (strstr(name, "NVL")) return 60e12;
        return 67e12;
    }
    if (strstr(name, "A100")) return 19.5e12;
    return 0.0;
}
