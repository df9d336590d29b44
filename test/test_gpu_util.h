/*
 * test_gpu_util.h: helpers shared by the kernel tests test/test_gpu_<op>.c (header-only, static inline).
 *   - a seeded host RNG (splitmix64) for random inputs;
 *   - host fp16/bf16 rounding (round to nearest even, like the device's __float2half_rn/__float2bfloat16_rn);
 *   - device buffers: upload a float array as a dtype, download as floats, poison with 0xFF bytes
 *     (NaN in every dtype) so an element the kernel forgot to write fails the finiteness check;
 *   - check_close: |got - ref| <= atol + rtol |ref| against an fp64 reference, printing the tolerance
 *     applied, the worst element and the percentage of the tolerance it used;
 *   - check_fd: a central finite-difference check of a directional derivative.
 */
#pragma once
#include "t5test.h"

#include <math.h>

#include "../src/base/check.h"
#include "../src/base/dtype.h"

// ---- RNG

typedef struct {
    uint64_t s;
} TRng;

static inline uint64_t trng_next(TRng* r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double trng_u01(TRng* r) { return (double)(trng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline float trng_uniform(TRng* r, float lo, float hi) { return lo + (hi - lo) * (float)trng_u01(r); }
static inline float trng_normal(TRng* r) {
    double u1 = trng_u01(r), u2 = trng_u01(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline void fill_uniform(float* x, size_t n, TRng* r, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = trng_uniform(r, lo, hi);
}

// ---- host 16-bit floats

static inline uint16_t host_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (uint16_t)(u >> 16);
}
static inline float host_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t host_f32_to_f16(float f) {
    _Float16 h = (_Float16)f;  // gcc: IEEE round to nearest even
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static inline float host_f16_to_f32(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
// value of f after a round trip through dtype dt
static inline float host_round(DType dt, float f) {
    if (dt == DT_F16) return host_f16_to_f32(host_f32_to_f16(f));
    if (dt == DT_BF16) return host_bf16_to_f32(host_f32_to_bf16(f));
    return f;
}
static inline void host_round_all(DType dt, float* x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = host_round(dt, x[i]);
}

// ---- device buffers

static inline void* dev_alloc_poisoned(size_t bytes) {
    void* d = NULL;
    CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 16));
    CUDA_CHECK(cudaMemset(d, 0xFF, bytes ? bytes : 16));
    return d;
}
static inline void dev_poison(void* d, size_t bytes) { CUDA_CHECK(cudaMemset(d, 0xFF, bytes)); }

static inline void dev_write(void* d, DType dt, const float* h, size_t n) {
    const size_t es = dtype_size(dt);
    unsigned char* buf = (unsigned char*)malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        if (dt == DT_F32) memcpy(buf + 4 * i, &h[i], 4);
        else {
            uint16_t u = dt == DT_F16 ? host_f32_to_f16(h[i]) : host_f32_to_bf16(h[i]);
            memcpy(buf + 2 * i, &u, 2);
        }
    }
    CUDA_CHECK(cudaMemcpy(d, buf, n * es, cudaMemcpyHostToDevice));
    free(buf);
}
// new device buffer holding h (n floats) converted to dt
static inline void* dev_upload(DType dt, const float* h, size_t n) {
    void* d = dev_alloc_poisoned(n * dtype_size(dt));
    dev_write(d, dt, h, n);
    return d;
}
static inline void* dev_upload_int(const int* h, size_t n) {
    void* d = dev_alloc_poisoned(n * sizeof(int));
    CUDA_CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}
static inline void dev_download(float* h, DType dt, const void* d, size_t n) {
    CUDA_CHECK(cudaDeviceSynchronize());
    const size_t es = dtype_size(dt);
    unsigned char* buf = (unsigned char*)malloc(n * es + 1);
    CUDA_CHECK(cudaMemcpy(buf, d, n * es, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        if (dt == DT_F32) memcpy(&h[i], buf + 4 * i, 4);
        else {
            uint16_t u;
            memcpy(&u, buf + 2 * i, 2);
            h[i] = dt == DT_F16 ? host_f16_to_f32(u) : host_bf16_to_f32(u);
        }
    }
    free(buf);
}
static inline float* host_floats(size_t n) { return (float*)calloc(n ? n : 1, sizeof(float)); }
static inline double* host_doubles(size_t n) { return (double*)calloc(n ? n : 1, sizeof(double)); }

// ---- comparison

typedef struct {
    double atol, rtol;
} Tol;

static const DType ALL_DTYPES[3] = {DT_F32, DT_F16, DT_BF16};

// |got - ref| <= atol + rtol |ref| for every element, and every got finite. Prints one line.
static inline bool check_close(const char* what, DType dt, const float* got, const double* ref, size_t n, Tol tol) {
    double worst = 0.0, worst_err = 0.0;  // worst fraction of the tolerance used
    size_t wi = 0, nonfinite = 0, first_nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(ref[i])) {
            if (nonfinite++ == 0) first_nonfinite = i;
            continue;
        }
        const double err = (double)got[i] == ref[i] ? 0.0 : fabs((double)got[i] - ref[i]);  // equal infinities too
        const double used = err == 0.0 ? 0.0 : err / (tol.atol + tol.rtol * fabs(ref[i]));  // tol 0: exact
        if (used > worst || i == 0) {
            worst = used;
            worst_err = err;
            wi = i;
        }
    }
    printf("# %-34s %-4s atol %.1e rtol %.1e: max err %.3e at %zu (got %.7g ref %.7g), %.1f%% of tolerance%s\n", what,
           dtype_name(dt), tol.atol, tol.rtol, worst_err, wi, n ? got[wi] : 0.0, n ? ref[wi] : 0.0, 100.0 * worst,
           nonfinite ? ", NON-FINITE OUTPUT" : "");
    if (nonfinite)
        printf("# %s: %zu elements not written or not finite, first at %zu (got %g)\n", what, nonfinite,
               first_nonfinite, got[first_nonfinite]);
    fflush(stdout);
    return nonfinite == 0 && worst <= 1.0;
}

// Exact equality of two float arrays (bit patterns), printing the first difference.
static inline bool check_equal_bits(const char* what, const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            printf("# %s: differs at %zu: %.9g vs %.9g\n", what, i, a[i], b[i]);
            return false;
        }
    printf("# %s: %zu elements bit-identical\n", what, n);
    return true;
}

// Central finite differences of a scalar function along direction v: compares
// (f(x + eps v) - f(x - eps v)) / (2 eps) with analytic = <grad, v>. f evaluates on the GPU in fp32.
static inline bool check_fd(const char* what, double fp, double fm, double eps, double analytic, double rtol) {
    const double fd = (fp - fm) / (2.0 * eps);
    const double rel = fabs(fd - analytic) / fmax(fabs(analytic), 1e-6);
    printf("# %-34s finite diff (eps %.0e) %.7g vs analytic %.7g: rel err %.2e (limit %.0e, %.1f%%)\n", what, eps, fd,
           analytic, rel, rtol, 100.0 * rel / rtol);
    fflush(stdout);
    return rel <= rtol;
}

static inline double dot_fd(const float* a, const float* b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}
