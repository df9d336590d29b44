/*
 * cpu_adam.c: DeepSpeed CPU AdamW with fused unscale/clip and working-copy store (see cpu_adam.h).
 *
 * Three paths with identical arithmetic: AVX-512F (16 lanes), AVX2+FMA+F16C (8 lanes), scalar (fmaf).
 * The SIMD functions carry __attribute__((target(...))) so this file builds with the project's plain
 * flags; the path is picked at run time with __builtin_cpu_supports. Within a chunk the vector loop
 * runs while 16 (8) elements remain and the scalar code finishes the tail.
 */
#include "cpu_adam.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

// Elements per OpenMP work item: a multiple of 16 so only the last chunk has a scalar tail; 64K
// elements (~1.8 MB of traffic) amortises scheduling and keeps per-thread streams long.
#define CPU_ADAM_CHUNK ((size_t)1 << 16)

// ---------------------------------------------------------------------------------------------
// scalar conversions

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t cpu_adam_f32_to_f16(float x) {
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN: quiet, top payload
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 (incl. inf): rounds to inf
    if (a >= 0x38800000u) {                                    // >= 2^-14: normal fp16
        a += 0x0fffu + ((a >> 13) & 1u);                       // round to nearest even at bit 13
        return (uint16_t)(sign | ((a - 0x38000000u) >> 13));   // rebias exponent 127 -> 15
    }
    if (a <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie, even = 0)
    // fp16 subnormal: h = round(|x| * 2^24) = mant * 2^(e - 126) with e in [102, 112]
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t s = 126u - e;  // 14 .. 24
    uint32_t h = mant >> s, rem = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

uint16_t cpu_adam_f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN, as DeepSpeed / c10
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float cpu_adam_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m ? 0x400000u : 0u) | (m << 13));  // inf; NaN quieted (as F16C)
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-08f;  // m * 2^-24, exact
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

float cpu_adam_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

// ---------------------------------------------------------------------------------------------
// the per-call constants and pointers

typedef struct {
    float* p;  // (n) fp32 master
    float* m;  // (n) fp32
    float* v;  // (n) fp32
    const void* g;  // (n) gdt
    void* w;        // (n) wdt or NULL
    DType gdt, wdt;
    float gscale;     // input gradient scale (1/combined)
    float b1, b2, omb1, omb2;  // betas and 1 - betas
    float eps, bc2;   // eps, 1/sqrt(1 - b2^t)
    float step_size;  // -lr / (1 - b1^t)
    float wd;         // L2 mode: weight_decay
    float wdc;        // AdamW mode: -lr * weight_decay
    bool l2, decoupled;
} AdamArgs;

static inline float load_grad_scalar(const AdamArgs* A, size_t i) {
    switch (A->gdt) {
        case DT_F16: return cpu_adam_f16_to_f32(((const uint16_t*)A->g)[i]);
        case DT_BF16: return cpu_adam_bf16_to_f32(((const uint16_t*)A->g)[i]);
        default: return ((const float*)A->g)[i];
    }
}

static void adam_range_scalar(const AdamArgs* A, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        float g = load_grad_scalar(A, i) * A->gscale;
        float p = A->p[i];
        if (A->l2) g = fmaf(p, A->wd, g);
        float m = A->m[i] * A->b1;
        m = fmaf(g, A->omb1, m);
        float v = A->v[i] * A->b2;
        float g2 = g * g;
        v = fmaf(g2, A->omb2, v);
        float d = sqrtf(v);
        d = fmaf(d, A->bc2, A->eps);
        float u = m / d;
        if (A->decoupled) p = fmaf(p, A->wdc, p);
        p = fmaf(u, A->step_size, p);
        A->p[i] = p;
        A->m[i] = m;
        A->v[i] = v;
        if (A->w) {
            if (A->wdt == DT_F16) ((uint16_t*)A->w)[i] = cpu_adam_f32_to_f16(p);
            else ((uint16_t*)A->w)[i] = cpu_adam_f32_to_bf16(p);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C, 8 lanes

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

AVX2_TARGET static inline __m256 avx2_load_grad(const AdamArgs* A, size_t i) {
    switch (A->gdt) {
        case DT_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)((const uint16_t*)A->g + i)));
        case DT_BF16: {
            __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)((const uint16_t*)A->g + i)));
            return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        }
        default: return _mm256_loadu_ps((const float*)A->g + i);
    }
}

AVX2_TARGET static inline __m128i avx2_f32_to_bf16(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
    // pack the 8 low halves: both 128-bit lanes hold values <= 0xffff, packus keeps them
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

AVX2_TARGET static void adam_range_avx2(const AdamArgs* A, size_t i0, size_t i1) {
    const __m256 gs = _mm256_set1_ps(A->gscale), b1 = _mm256_set1_ps(A->b1), b2 = _mm256_set1_ps(A->b2);
    const __m256 omb1 = _mm256_set1_ps(A->omb1), omb2 = _mm256_set1_ps(A->omb2);
    const __m256 eps = _mm256_set1_ps(A->eps), bc2 = _mm256_set1_ps(A->bc2), ss = _mm256_set1_ps(A->step_size);
    const __m256 wd = _mm256_set1_ps(A->wd), wdc = _mm256_set1_ps(A->wdc);
    size_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        __m256 g = _mm256_mul_ps(avx2_load_grad(A, i), gs);
        __m256 p = _mm256_loadu_ps(A->p + i);
        if (A->l2) g = _mm256_fmadd_ps(p, wd, g);
        __m256 m = _mm256_mul_ps(_mm256_loadu_ps(A->m + i), b1);
        m = _mm256_fmadd_ps(g, omb1, m);
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(A->v + i), b2);
        __m256 g2 = _mm256_mul_ps(g, g);
        v = _mm256_fmadd_ps(g2, omb2, v);
        __m256 d = _mm256_fmadd_ps(_mm256_sqrt_ps(v), bc2, eps);
        __m256 u = _mm256_div_ps(m, d);
        if (A->decoupled) p = _mm256_fmadd_ps(p, wdc, p);
        p = _mm256_fmadd_ps(u, ss, p);
        _mm256_storeu_ps(A->p + i, p);
        _mm256_storeu_ps(A->m + i, m);
        _mm256_storeu_ps(A->v + i, v);
        if (A->w) {
            __m128i h = A->wdt == DT_F16 ? _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                         : avx2_f32_to_bf16(p);
            _mm_storeu_si128((__m128i*)((uint16_t*)A->w + i), h);
        }
    }
    adam_range_scalar(A, i, i1);
}

// ---------------------------------------------------------------------------------------------
// AVX-512F, 16 lanes

#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))

AVX512_TARGET static inline __m512 avx512_load_grad(const AdamArgs* A, size_t i) {
    switch (A->gdt) {
        case DT_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)((const uint16_t*)A->g + i)));
        case DT_BF16: {
            __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)((const uint16_t*)A->g + i)));
            return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        }
        default: return _mm512_loadu_ps((const float*)A->g + i);
    }
}

AVX512_TARGET static inline __m256i avx512_f32_to_bf16(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(r);  // values <= 0xffff: truncation is exact
}

// One group of AVX512_SPAN vectors per iteration (DeepSpeed's Step_8 does 8): independent loads in
// flight for each of the 4-7 streams. The arithmetic per element is unchanged (bit-identical).
#define AVX512_SPAN 4
AVX512_TARGET static void adam_range_avx512(const AdamArgs* A, size_t i0, size_t i1) {
    const __m512 gs = _mm512_set1_ps(A->gscale), b1 = _mm512_set1_ps(A->b1), b2 = _mm512_set1_ps(A->b2);
    const __m512 omb1 = _mm512_set1_ps(A->omb1), omb2 = _mm512_set1_ps(A->omb2);
    const __m512 eps = _mm512_set1_ps(A->eps), bc2 = _mm512_set1_ps(A->bc2), ss = _mm512_set1_ps(A->step_size);
    const __m512 wd = _mm512_set1_ps(A->wd), wdc = _mm512_set1_ps(A->wdc);
    size_t i = i0;
    for (; i + 16 * AVX512_SPAN <= i1; i += 16 * AVX512_SPAN) {
        __m512 g[AVX512_SPAN], p[AVX512_SPAN], m[AVX512_SPAN], v[AVX512_SPAN];
#pragma GCC unroll 4
        for (int k = 0; k < AVX512_SPAN; k++) {
            g[k] = _mm512_mul_ps(avx512_load_grad(A, i + 16 * k), gs);
            p[k] = _mm512_loadu_ps(A->p + i + 16 * k);
            m[k] = _mm512_loadu_ps(A->m + i + 16 * k);
            v[k] = _mm512_loadu_ps(A->v + i + 16 * k);
        }
#pragma GCC unroll 4
        for (int k = 0; k < AVX512_SPAN; k++) {
            if (A->l2) g[k] = _mm512_fmadd_ps(p[k], wd, g[k]);
            m[k] = _mm512_fmadd_ps(g[k], omb1, _mm512_mul_ps(m[k], b1));
            __m512 g2 = _mm512_mul_ps(g[k], g[k]);
            v[k] = _mm512_fmadd_ps(g2, omb2, _mm512_mul_ps(v[k], b2));
            __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(v[k]), bc2, eps);
            __m512 u = _mm512_div_ps(m[k], d);
            if (A->decoupled) p[k] = _mm512_fmadd_ps(p[k], wdc, p[k]);
            p[k] = _mm512_fmadd_ps(u, ss, p[k]);
            _mm512_storeu_ps(A->p + i + 16 * k, p[k]);
            _mm512_storeu_ps(A->m + i + 16 * k, m[k]);
            _mm512_storeu_ps(A->v + i + 16 * k, v[k]);
            if (A->w) {
                __m256i h = A->wdt == DT_F16 ? _mm512_cvtps_ph(p[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                             : avx512_f32_to_bf16(p[k]);
                _mm256_storeu_si256((__m256i*)((uint16_t*)A->w + i + 16 * k), h);
            }
        }
    }
    for (; i + 16 <= i1; i += 16) {
        __m512 g = _mm512_mul_ps(avx512_load_grad(A, i), gs);
        __m512 p = _mm512_loadu_ps(A->p + i);
        if (A->l2) g = _mm512_fmadd_ps(p, wd, g);
        __m512 m = _mm512_mul_ps(_mm512_loadu_ps(A->m + i), b1);
        m = _mm512_fmadd_ps(g, omb1, m);
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(A->v + i), b2);
        __m512 g2 = _mm512_mul_ps(g, g);
        v = _mm512_fmadd_ps(g2, omb2, v);
        __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(v), bc2, eps);
        __m512 u = _mm512_div_ps(m, d);
        if (A->decoupled) p = _mm512_fmadd_ps(p, wdc, p);
        p = _mm512_fmadd_ps(u, ss, p);
        _mm512_storeu_ps(A->p + i, p);
        _mm512_storeu_ps(A->m + i, m);
        _mm512_storeu_ps(A->v + i, v);
        if (A->w) {
            __m256i h = A->wdt == DT_F16 ? _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                         : avx512_f32_to_bf16(p);
            _mm256_storeu_si256((__m256i*)((uint16_t*)A->w + i), h);
        }
    }
    adam_range_scalar(A, i, i1);
}

// ---------------------------------------------------------------------------------------------
// public API

static bool cpu_has(CpuAdamSimd s) {
    __builtin_cpu_init();
    if (s == CPU_ADAM_AVX512) return __builtin_cpu_supports("avx512f");
    if (s == CPU_ADAM_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return true;
}

CpuAdamSimd cpu_adam_detect_simd(void) {
    if (cpu_has(CPU_ADAM_AVX512)) return CPU_ADAM_AVX512;
    if (cpu_has(CPU_ADAM_AVX2)) return CPU_ADAM_AVX2;
    return CPU_ADAM_SCALAR;
}

const char* cpu_adam_simd_name(CpuAdamSimd s) {
    return s == CPU_ADAM_AVX512 ? "AVX512" : s == CPU_ADAM_AVX2 ? "AVX2" : "scalar";
}

int cpu_adam_set_simd(CpuAdam* a, CpuAdamSimd s) {
    if (!cpu_has(s)) return -1;
    a->simd = s;
    return 0;
}

void cpu_adam_init(CpuAdam* a, float beta1, float beta2, float eps, bool adamw_mode) {
    memset(a, 0, sizeof *a);
    a->beta1 = beta1;
    a->beta2 = beta2;
    a->eps = eps;
    a->adamw_mode = adamw_mode;
    a->bias_correction = true;
    a->step = 0;
    a->beta1_t = 1.0f;
    a->beta2_t = 1.0f;
    a->bias_correction1 = 1.0f;
    a->bias_correction2 = 1.0f;
    a->simd = cpu_adam_detect_simd();
}

void cpu_adam_begin_step(CpuAdam* a, int64_t step, float beta1, float beta2) {
    // Adam_Optimizer::IncrementStep
    if (beta1 != a->beta1 || beta2 != a->beta2) {
        a->step = step;
        a->beta1 = beta1;
        a->beta2 = beta2;
        a->beta1_t = (float)pow((double)beta1, (double)step);  // std::pow(float, size_t) -> double
        a->beta2_t = (float)pow((double)beta2, (double)step);
    } else {
        a->step++;
        if (a->step != step) {
            a->beta1_t = (float)pow((double)a->beta1, (double)step);
            a->beta2_t = (float)pow((double)a->beta2, (double)step);
            a->step = step;
        } else {
            a->beta1_t *= a->beta1;
            a->beta2_t *= a->beta2;
        }
    }
    // Adam_Optimizer::update_state (fp32)
    a->bias_correction1 = 1.0f;
    a->bias_correction2 = 1.0f;
    if (a->bias_correction) {
        a->bias_correction1 = 1.0f - a->beta1_t;
        a->bias_correction2 = 1.0f / sqrtf(1.0f - a->beta2_t);
    }
}

void cpu_adam_update(const CpuAdam* a, float lr, float weight_decay, float* master, float* m, float* v,
                     const void* grad, DType grad_dtype, float grad_scale, void* work, DType work_dtype, size_t n) {
    AdamArgs A = {
        .p = master, .m = m, .v = v, .g = grad, .w = work, .gdt = grad_dtype, .wdt = work_dtype,
        .gscale = grad_scale, .b1 = a->beta1, .b2 = a->beta2,
        .omb1 = 1.0f - a->beta1, .omb2 = 1.0f - a->beta2,
        .eps = a->eps, .bc2 = a->bias_correction2,
        .step_size = -1.0f * lr / a->bias_correction1,
        .wd = weight_decay, .wdc = -1.0f * lr * weight_decay,
        .l2 = weight_decay > 0.0f && !a->adamw_mode,
        .decoupled = weight_decay > 0.0f && a->adamw_mode,
    };
    if (work && work_dtype == DT_F32) A.w = NULL;  // an fp32 working copy would be the master itself
    void (*fn)(const AdamArgs*, size_t, size_t) =
        a->simd == CPU_ADAM_AVX512 ? adam_range_avx512 : a->simd == CPU_ADAM_AVX2 ? adam_range_avx2 : adam_range_scalar;
    size_t nchunks = (n + CPU_ADAM_CHUNK - 1) / CPU_ADAM_CHUNK;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * CPU_ADAM_CHUNK;
        size_t i1 = i0 + CPU_ADAM_CHUNK < n ? i0 + CPU_ADAM_CHUNK : n;
        fn(&A, i0, i1);
    }
}
