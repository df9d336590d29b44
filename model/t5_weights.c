/*
 * t5_weights.c: checkpoint load / random init / save between HF safetensors and the ZeroEngine
 * (see t5_weights.h for the rules).
 */
#include "t5_weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../src/base/check.h"
#include "../src/base/common.h"
#include "../src/base/safetensors.h"
#include "../cuda/elementwise.cuh"
#include "../cuda/init_normal.cuh"

// copies this rank's part of a host fp32 unit image to the unit's master (device or host memory: the
// engine's stages 1-3 may keep it on the host, hence cudaMemcpyDefault)
static void upload_unit(ZeroEngine* Z, int unit, const float* h, cudaStream_t s) {
    size_t lo, hi;
    zero_unit_owned(Z, unit, &lo, &hi);
    CUDA_CHECK(cudaStreamSynchronize(s));
    zero_master_write(Z, unit, lo, h + lo, hi - lo);  // synchronous: h is reused for the next unit
}

static size_t max_unit_numel(const ParamTable* t) {
    size_t m = 0;
    for (int u = 0; u < t->num_units; u++) m = T5_MAX(m, t->units[u].numel);
    return m;
}

static bool is_ignored_alias(const ParamTable* t, const char* name) {
    if (strcmp(name, "encoder.embed_tokens.weight") == 0 || strcmp(name, "decoder.embed_tokens.weight") == 0)
        return true;
    if (t->cfg.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) return true;
    if (strcmp(name, "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight") == 0) return true;
    return false;
}

int t5_weights_load(ZeroEngine* Z, const ParamTable* t, const char* path, cudaStream_t s, char* err, size_t errlen) {
    SafeTensors* st = NULL;
    if (safetensors_open(&st, path, err, errlen)) return -1;
    float* h = malloc_check(max_unit_numel(t) * sizeof(float));
    int rc = 0;
    for (int u = 0; u < t->num_units && rc == 0; u++) {
        const UnitDesc* U = &t->units[u];
        memset(h, 0, U->numel * sizeof(float));
        for (int i = U->first_param; i < U->first_param + U->num_params; i++) {
            const ParamDesc* p = &t->params[i];
            const char* name = p->name;
            // some exports carry only the encoder/decoder aliases of the shared embedding
            if (p->role == ROLE_EMBED && !safetensors_has(st, name)) {
                if (safetensors_has(st, "encoder.embed_tokens.weight")) name = "encoder.embed_tokens.weight";
                else if (safetensors_has(st, "decoder.embed_tokens.weight")) name = "decoder.embed_tokens.weight";
            }
            if (!safetensors_has(st, name)) {
                char shp[64];
                if (p->ndim == 2) snprintf(shp, sizeof shp, "(%lld, %lld)", (long long)p->shape[0], (long long)p->shape[1]);
                else snprintf(shp, sizeof shp, "(%lld,)", (long long)p->shape[0]);
                rc = t5_set_err(err, errlen, "checkpoint %s is missing tensor '%s' (shape %s expected for %s)", path,
                             p->name, shp, t->cfg.name);
                break;
            }
            if (safetensors_read(st, name, h + p->offset, DT_F32, p->shape, p->ndim, err, errlen)) {
                rc = -1;
                break;
            }
        }
        if (rc == 0) upload_unit(Z, u, h, s);
    }
    if (rc == 0) {
        // aliases: consume them (so they are not "unexpected"); a tied lm_head that differs from shared gets a warning
        const int ne = (int)t->params[0].numel;
        for (int i = 0; i < safetensors_count(st) && rc == 0; i++) {
            const char* name = safetensors_name(st, i);
            if (!is_ignored_alias(t, name)) continue;
            const SafeTensorInfo* info = NULL;
            if (safetensors_info(st, name, &info, err, errlen)) {
                rc = -1;
                break;
            }
            if (info->consumed) continue;
            if (strstr(name, "relative_attention_bias")) {
                float* tmp = malloc_check(info->numel * sizeof(float));
                rc = safetensors_read(st, name, tmp, DT_F32, NULL, -1, err, errlen);
                free(tmp);
                continue;
            }
            // (V, D) aliases of the shared embedding: compare with it
            if (info->numel != (size_t)ne) {
                rc = t5_set_err(err, errlen, "checkpoint %s: tensor '%s' has %zu elements, shared.weight has %d", path,
                             name, info->numel, ne);
                break;
            }
            float* tmp = malloc_check(info->numel * sizeof(float));
            if (safetensors_read(st, name, tmp, DT_F32, t->params[0].shape, 2, err, errlen)) {
                free(tmp);
                rc = -1;
                break;
            }
            // compared on this rank's owned part of shared.weight (several ranks: each checks its own piece)
            const ParamDesc* p0 = &t->params[0];
            size_t lo, hi;
            zero_unit_owned(Z, p0->unit, &lo, &hi);
            const size_t a = T5_MAX(lo, p0->offset), b = T5_MIN(hi, p0->offset + p0->numel);
            float* sh = malloc_check(T5_MAX(b > a ? b - a : 0, (size_t)1) * sizeof(float));
            if (b > a) zero_master_read(Z, p0->unit, a, sh, b - a);
            // an evaluation-only engine keeps no fp32 master (model/zero.h no_optimizer_state): it reads back the 16-bit
            // working weights, so the alias is compared rounded the same way (a difference below that rounding passes)
            if (b > a && !zero_has_master(Z)) {
                const DType X = zero_working_dtype(Z);
                float* q = tmp + (a - p0->offset);
                void* x = malloc_check((b - a) * dtype_size(X));
                safetensors_convert(x, X, q, DT_F32, b - a);
                safetensors_convert(q, DT_F32, x, X, b - a);
                free(x);
            }
            if (b > a && memcmp(sh, tmp + (a - p0->offset), (b - a) * sizeof(float)) != 0)
                t5_warn("checkpoint %s: '%s' differs from shared.weight; ignored (the model ties it to shared.weight, "
                        "as transformers does)",
                        path, name);
            free(sh);
            free(tmp);
        }
    }
    if (rc == 0) {
        char names[1024];
        int n = safetensors_unconsumed(st, names, sizeof names);
        if (n > 0)
            rc = t5_set_err(err, errlen, "checkpoint %s has %d unexpected tensor%s for %s (%s): %s", path, n,
                         n == 1 ? "" : "s", t->cfg.name, t->cfg.tie_word_embeddings ? "tied" : "untied", names);
    }
    free(h);
    safetensors_close(st);
    if (rc == 0) {
        zero_sync_working(Z, s);
        CUDA_CHECK(cudaStreamSynchronize(s));
    }
    return rc;
}

// ---------------------------------------------------------------------------------------------
// random init

static uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}


static double init_std(const ParamTable* t, const ParamDesc* p) {
    const T5Config* c = &t->cfg;
    const double D = c->d_model, Dk = c->d_kv, H = c->num_heads, F = c->d_ff;
    switch (p->role) {
        case ROLE_EMBED:
        case ROLE_LM_HEAD: return 1.0;
        case ROLE_SA_Q:
        case ROLE_CA_Q: return pow(D * Dk, -0.5);
        case ROLE_SA_K:
        case ROLE_SA_V:
        case ROLE_CA_K:
        case ROLE_CA_V: return pow(D, -0.5);
        case ROLE_SA_O:
        case ROLE_CA_O: return pow(H * Dk, -0.5);
        case ROLE_SA_RELBIAS: return pow(D, -0.5);
        case ROLE_FF_WI:
        case ROLE_FF_WI0:
        case ROLE_FF_WI1: return pow(D, -0.5);
        case ROLE_FF_WO: return pow(F, -0.5);
        default: return 0.0;  // layer norms: constant 1
    }
}

int t5_weights_init_random(ZeroEngine* Z, const ParamTable* t, uint64_t seed, cudaStream_t s, char* err,
                           size_t errlen) {
    // Each unit is drawn on the GPU (cuda/init_normal.cu: the same Box-Muller stream per tensor as a
    // sequential CPU loop, in double) into one device scratch, then this rank's part goes straight to its master
    // (device, or pinned/pageable host memory for an offloaded optimizer): no host staging, no host RNG. An
    // evaluation-only engine without a master rounds it into the working weights instead (zero_master_write_dev).
    float* d = NULL;
    const size_t maxn = max_unit_numel(t);
    if (cudaMalloc((void**)&d, maxn * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        return t5_set_err(err, errlen, "random init: out of GPU memory for a %.1f MiB scratch of the largest unit",
                          (double)maxn * 4 / (1 << 20));
    }
    for (int u = 0; u < t->num_units; u++) {
        const UnitDesc* U = &t->units[u];
        CUDA_CHECK(cudaMemsetAsync(d, 0, U->numel * sizeof(float), s));
        for (int i = U->first_param; i < U->first_param + U->num_params; i++) {
            const ParamDesc* p = &t->params[i];
            if (p->role == ROLE_SA_LN || p->role == ROLE_CA_LN || p->role == ROLE_FF_LN || p->role == ROLE_FINAL_LN) {
                fill(d + p->offset, DT_F32, p->numel, 1.0f, s);
                continue;
            }
            uint64_t st = seed ^ (0xA0761D6478BD642Full * (uint64_t)(i + 1));
            splitmix64(&st);
            init_normal(d + p->offset, p->numel, st, init_std(t, p), s);
        }
        size_t lo, hi;
        zero_unit_owned(Z, u, &lo, &hi);
        zero_master_write_dev(Z, u, lo, d + lo, hi - lo, s);
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(d));
    zero_sync_working(Z, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    return 0;
}

void t5_weights_get_master(ZeroEngine* Z, const ParamTable* t, int pidx, float* dst) {
    const ParamDesc* p = &t->params[pidx];
    size_t lo, hi;
    zero_unit_owned(Z, p->unit, &lo, &hi);
    if (lo != 0 || hi < p->offset + p->numel)
        t5_die(T5_EXIT_FAILURE, "internal: %s is not wholly on this rank (gathered saving is the multi-GPU issue's)",
               p->name);
    zero_master_read(Z, p->unit, p->offset, dst, p->numel);
}

// ---------------------------------------------------------------------------------------------
// save

typedef struct {
    ZeroEngine* Z;
    const ParamDesc* p;
    DType dt;
    float* stage;  // host staging, SAVE_CHUNK floats
} SaveCtx;

static int save_produce(void* ctx, const char* name, size_t byte_offset, void* dst, size_t nbytes, char* err,
                        size_t errlen) {
    (void)name;
    (void)err;
    (void)errlen;
    SaveCtx* c = ctx;
    size_t es = dtype_size(c->dt);
    size_t first = byte_offset / es, n = nbytes / es;
    const size_t src = c->p->offset + first;  // element offset in the unit
    // the writer asks for at most 64 MiB at a time; stage through a host buffer of floats
    const size_t chunk = (size_t)1 << 22;
    for (size_t done = 0; done < n; done += chunk) {
        size_t m = T5_MIN(chunk, n - done);
        zero_master_read(c->Z, c->p->unit, src + done, c->stage, m);
        safetensors_convert((char*)dst + done * es, c->dt, c->stage, DT_F32, m);
    }
    return 0;
}

int t5_weights_save(ZeroEngine* Z, const ParamTable* t, const char* dir, DType dtype, size_t max_shard_bytes,
                    cudaStream_t s, char* err, size_t errlen) {
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (t5_mkdir_p(dir) != 0) return t5_set_err(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
    SafeTensorsWriter* w = safetensors_writer_new();
    SaveCtx* ctx = calloc_check((size_t)t->num_params, sizeof(SaveCtx));
    float* stage = malloc_check(((size_t)1 << 22) * sizeof(float));
    int rc = 0;
    for (int i = 0; i < t->num_params && rc == 0; i++) {
        ctx[i] = (SaveCtx){.Z = Z, .p = &t->params[i], .dt = dtype, .stage = stage};
        rc = safetensors_writer_add_fn(w, t->params[i].name, dtype, t->params[i].ndim, t->params[i].shape,
                                       save_produce, &ctx[i], err, errlen);
    }
    if (rc == 0) rc = safetensors_writer_write_dir(w, dir, max_shard_bytes, NULL, err, errlen);
    if (rc == 0) {
        char* cfg = t5_path_join(dir, "config.json");
        rc = t5_config_save_json(&t->cfg, cfg, err, errlen);
        free(cfg);
    }
    safetensors_writer_free(w);
    free(stage);
    free(ctx);
    return rc;
}
