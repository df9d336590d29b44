/*
 * test_cpu_adam.c: src/zero/cpu_adam.c (DeepSpeed CPU AdamW) and src/train/grad_clip.c.
 *
 *  - every SIMD path this CPU has (forced with cpu_adam_set_simd; AVX-512, AVX2 and scalar on a
 *    Sapphire Rapids host) x grad dtype fp32/fp16/bf16 x working copy none/fp16/bf16 x AdamW/L2 x
 *    decay on/off x lengths with tails and OpenMP chunk boundaries, several steps:
 *      (a) each step against an fp64 reference computed from the same fp32 pre-step state, with a
 *          per-element error bound derived from the fp32 operations (see ref_bound below);
 *      (b) every path bit-identical to the scalar path (same IEEE operations, FMAs explicit);
 *      (c) the working copy equal to the conversion of the new master, within half an fp16/bf16 ulp;
 *  - the scalar fp16/bf16 conversions against F16C hardware and the round-to-nearest-even rule;
 *  - trajectories against torch.optim.AdamW (numpy transcription, test/fixtures/adam/torch_adamw.txt);
 *  - IncrementStep running powers vs pow(), resume and beta changes;
 *  - DeepSpeed's combined unscale+clip factor and torch's clip coefficient (fp32 values from numpy).
 */
#include "t5test.h"

#include <immintrin.h>
#include <math.h>

#include "../src/base/common.h"
#include "../src/zero/cpu_adam.h"
#include "../src/train/grad_clip.h"

#define U32 (1.0 / 16777216.0)  // unit roundoff of fp32, 2^-24

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng_u32(void) {  // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
static float rng_uniform(void) { return (float)(rng_u32() >> 8) * (1.0f / 16777216.0f); }
static float rng_normal(void) {
    float u1 = rng_uniform() + 1e-7f, u2 = rng_uniform();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static float grad_value(const void* g, DType dt, size_t i) {
    if (dt == DT_F16) return cpu_adam_f16_to_f32(((const uint16_t*)g)[i]);
    if (dt == DT_BF16) return cpu_adam_bf16_to_f32(((const uint16_t*)g)[i]);
    return ((const float*)g)[i];
}

/*
 * fp64 reference of one element from the fp32 pre-step state, and the error bound of the fp32 path.
 * With u = 2^-24 and every fp32 operation exact up to a factor (1 + d), |d| <= u:
 *   g = g0*s                              |eg| <= u|g|            (L2: + u|p wd| + u|g'|)
 *   m = fma(g, 1-b1, m0*b1)               |em| <= u|b1 m0| + u|m| + (1-b1)|eg|
 *   v = fma(g*g, 1-b2, v0*b2)             |ev| <= u|b2 v0| + u|v| + (1-b2)(u g^2 + 2|g||eg|)
 *   r = sqrt(v)                           |er| <= |ev|/(2 r) + u r
 *   d = fma(r, bc2, eps)                  |ed| <= bc2 |er| + u d
 *   q = m / d                             |eq| <= |em|/d + |q| |ed|/d + u|q|
 *   p1 = fma(p0, -lr wd, p0); p = fma(q, step, p1)
 *                                         |ep| <= u|p1| + u|p| + |step| |eq| + u|step q|  (step's rounding)
 * first order in u; the test allows 2x these bounds (and a 1e-40 absolute floor for subnormal noise).
 */
typedef struct {
    double p, m, v, bp, bm, bv;
} RefOut;

static RefOut ref_element(const CpuAdam* a, float lr, float wd, float p0f, float m0f, float v0f, float g0f,
                          float gscale) {
    const double u = U32;
    double b1 = a->beta1, b2 = a->beta2, omb1 = 1.0 - b1, omb2 = 1.0 - b2, eps = a->eps;
    double bc2 = a->bias_correction2, step = -(double)lr / (double)a->bias_correction1;
    double p0 = p0f, m0 = m0f, v0 = v0f;
    double g = (double)g0f * (double)gscale, eg = u * fabs(g);
    if (!a->adamw_mode && wd > 0) {
        double gl = p0 * wd + g;
        eg += u * fabs(p0 * wd) + u * fabs(gl);
        g = gl;
    }
    double m = b1 * m0 + omb1 * g;
    double em = u * fabs(b1 * m0) + u * fabs(m) + omb1 * eg;
    double v = b2 * v0 + omb2 * g * g;
    double ev = u * fabs(b2 * v0) + u * fabs(v) + omb2 * (u * g * g + 2.0 * fabs(g) * eg);
    double r = sqrt(v);
    double er = r > 0 ? ev / (2.0 * r) + u * r : sqrt(ev);
    double d = r * bc2 + eps;
    double ed = bc2 * er + u * d;
    double q = m / d;
    double eq = em / d + fabs(q) * ed / d + u * fabs(q);
    double p1 = p0;
    if (a->adamw_mode && wd > 0) p1 = p0 + (-(double)lr * wd) * p0;
    double p = p1 + step * q;
    double ep = u * fabs(p1) + u * fabs(p) + fabs(step) * eq + u * fabs(step * q) + u * fabs(p0 * lr * wd);
    RefOut o = {p, m, v, 2.0 * ep + 1e-40, 2.0 * em + 1e-40, 2.0 * ev + 1e-40};
    return o;
}

typedef struct {
    size_t n;
    float *p, *m, *v, *g32;
    uint16_t *g16, *w;
} Bufs;

static Bufs bufs_alloc(size_t n) {
    Bufs b = {n, malloc(n * 4), malloc(n * 4), malloc(n * 4), malloc(n * 4), malloc(n * 2), malloc(n * 2)};
    return b;
}
static void bufs_free(Bufs* b) {
    free(b->p), free(b->m), free(b->v), free(b->g32), free(b->g16), free(b->w);
}

static const char* dname(DType d) { return d == DT_F32 ? "fp32" : d == DT_F16 ? "fp16" : "bf16"; }

// Runs `steps` updates of one configuration on `path`; checks (a) and (c); returns the final state in
// out (for the bit-identity check (b)) and the worst fraction of the bound used.
static double run_config(CpuAdamSimd path, size_t n, DType gdt, bool with_work, DType wdt, bool adamw, float wd,
                         int steps, Bufs* out) {
    CpuAdam a;
    cpu_adam_init(&a, 0.9f, 0.999f, 1e-8f, adamw);
    assert_int_equal(cpu_adam_set_simd(&a, path), 0);
    Bufs b = bufs_alloc(n);
    rng_state = 0x1234567ull + n * 7 + (uint64_t)gdt * 131;  // same data on every path
    for (size_t i = 0; i < n; i++) {
        b.p[i] = rng_normal() * 0.5f;
        b.m[i] = 0.0f;
        b.v[i] = 0.0f;
    }
    b.p[0] = 0.0f;
    float* pre_p = malloc(n * 4);
    float* pre_m = malloc(n * 4);
    float* pre_v = malloc(n * 4);
    double worst = 0.0;
    for (int s = 1; s <= steps; s++) {
        // gradients spanning 7 decades, some exact zeros; scaled as by a loss scale of 1024
        for (size_t i = 0; i < n; i++) {
            float x = rng_normal() * powf(10.0f, -5.0f + 5.0f * rng_uniform()) * 1024.0f;
            if (i % 97 == 3) x = 0.0f;
            b.g32[i] = x;
            b.g16[i] = gdt == DT_F16 ? cpu_adam_f32_to_f16(x) : cpu_adam_f32_to_bf16(x);
        }
        const void* g = gdt == DT_F32 ? (const void*)b.g32 : (const void*)b.g16;
        float lr = 1e-3f / (float)s, gscale = 1.0f / 1024.0f * (s == 3 ? 0.37f : 1.0f);  // step 3: clipped
        memcpy(pre_p, b.p, n * 4), memcpy(pre_m, b.m, n * 4), memcpy(pre_v, b.v, n * 4);
        cpu_adam_begin_step(&a, s, 0.9f, 0.999f);
        memset(b.w, 0xAB, n * 2);
        cpu_adam_update(&a, lr, wd, b.p, b.m, b.v, g, gdt, gscale, with_work ? b.w : NULL, wdt, n);
        for (size_t i = 0; i < n; i++) {
            RefOut r = ref_element(&a, lr, wd, pre_p[i], pre_m[i], pre_v[i], grad_value(g, gdt, i), gscale);
            double dp = fabs(b.p[i] - r.p), dm = fabs(b.m[i] - r.m), dv = fabs(b.v[i] - r.v);
            if (dp > r.bp || dm > r.bm || dv > r.bv)
                fail_msg("%s grad %s adamw %d wd %g n %zu step %d elem %zu: p %.9g ref %.17g (bound %.3g) m %.9g ref %.17g "
                         "(bound %.3g) v %.9g ref %.17g (bound %.3g)",
                         cpu_adam_simd_name(path), dname(gdt), adamw, wd, n, s, i, b.p[i], r.p, r.bp, b.m[i], r.m, r.bm,
                         b.v[i], r.v, r.bv);
            double f = fmax(dp / r.bp, fmax(dm / r.bm, dv / r.bv));
            if (f > worst) worst = f;
            if (with_work) {
                uint16_t expect = wdt == DT_F16 ? cpu_adam_f32_to_f16(b.p[i]) : cpu_adam_f32_to_bf16(b.p[i]);
                if (b.w[i] != expect)
                    fail_msg("%s work %s elem %zu: 0x%04x, expected 0x%04x for %.9g", cpu_adam_simd_name(path), dname(wdt),
                             i, b.w[i], expect, b.p[i]);
                float back = wdt == DT_F16 ? cpu_adam_f16_to_f32(b.w[i]) : cpu_adam_bf16_to_f32(b.w[i]);
                // half an ulp: 2^-11 relative (fp16, normal range) / 2^-8 (bf16); fp16 subnormals 2^-25 absolute
                double tol = wdt == DT_F16 ? fmax(fabs(b.p[i]) * 0x1p-11, 0x1p-25) : fabs(b.p[i]) * 0x1p-8;
                if (fabs(back - b.p[i]) > tol) fail_msg("working copy %g of %g off by more than half an ulp", back, b.p[i]);
            }
        }
    }
    free(pre_p), free(pre_m), free(pre_v);
    *out = b;
    return worst;
}

static void test_paths_vs_fp64(void** state) {
    (void)state;
    CpuAdamSimd paths[3];
    int np = 0;
    for (int s = CPU_ADAM_AVX512; s >= CPU_ADAM_SCALAR; s--) {
        CpuAdam t;
        cpu_adam_init(&t, 0.9f, 0.999f, 1e-8f, true);
        if (cpu_adam_set_simd(&t, (CpuAdamSimd)s) == 0) paths[np++] = (CpuAdamSimd)s;
        else print_message("# %s not available on this CPU: not tested\n", cpu_adam_simd_name((CpuAdamSimd)s));
    }
    const size_t lens[] = {1, 15, 17, 37, 1000, (size_t)2 * 65536 + 37};
    const DType gdts[] = {DT_F32, DT_F16, DT_BF16};
    int configs = 0;
    double worst = 0.0;
    for (size_t li = 0; li < T5_ARRAY_LEN(lens); li++)
        for (int gi = 0; gi < 3; gi++)
            for (int wi = 0; wi < 3; wi++)
                for (int mode = 0; mode < 3; mode++) {
                    size_t n = lens[li];
                    if (n > 1000 && (wi == 1 || mode == 1)) continue;  // keep the big case short
                    bool with_work = wi > 0;
                    DType wdt = wi == 2 ? DT_BF16 : DT_F16;
                    bool adamw = mode != 2;                         // mode 2: Adam + L2
                    float wd = mode == 0 ? 0.0f : 0.01f;
                    Bufs ref;
                    double w0 = run_config(CPU_ADAM_SCALAR, n, gdts[gi], with_work, wdt, adamw, wd, 4, &ref);
                    worst = fmax(worst, w0);
                    for (int k = 0; k < np; k++) {
                        if (paths[k] == CPU_ADAM_SCALAR) continue;
                        Bufs got;
                        worst = fmax(worst, run_config(paths[k], n, gdts[gi], with_work, wdt, adamw, wd, 4, &got));
                        if (memcmp(got.p, ref.p, n * 4) || memcmp(got.m, ref.m, n * 4) || memcmp(got.v, ref.v, n * 4) ||
                            (with_work && memcmp(got.w, ref.w, n * 2)))
                            fail_msg("%s differs from the scalar path (grad %s, n %zu, work %d, mode %d)",
                                     cpu_adam_simd_name(paths[k]), dname(gdts[gi]), n, wi, mode);
                        bufs_free(&got);
                    }
                    bufs_free(&ref);
                    configs++;
                }
    print_message("# %d configurations x %d paths, 4 steps each: worst error %.1f%% of the bound\n", configs, np,
                  100.0 * worst);
}

// Scalar conversions vs F16C hardware (all fp16 values round-trip; 2M random fp32 bit patterns and the
// edge cases convert identically) and vs the bf16 round-to-nearest-even rule.
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float x) {
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(x), _MM_FROUND_TO_NEAREST_INT), 0);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16((short)h)));
}

static void test_conversions(void** state) {
    (void)state;
    // bf16 rule
    assert_int_equal(cpu_adam_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(cpu_adam_f32_to_bf16(0x1.00800p+0f), 0x3f80);  // tie, even stays
    assert_int_equal(cpu_adam_f32_to_bf16(0x1.03p+0f), 0x3f82);     // 0x3f818000: tie, odd rounds up
    assert_int_equal(cpu_adam_f32_to_bf16(0x1.01002p+0f), 0x3f81);  // 0x3f808010: above the tie
    assert_int_equal(cpu_adam_f32_to_bf16(0x1.00ffep+0f), 0x3f80);  // 0x3f807ff0: below the tie
    assert_int_equal(cpu_adam_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(cpu_adam_f32_to_bf16(NAN), 0x7fc0);
    assert_int_equal(cpu_adam_f32_to_bf16(-NAN), 0x7fc0);
    assert_int_equal(cpu_adam_f32_to_bf16(3.4e38f), 0x7f80);  // rounds up to inf
    // fp16 anchors
    assert_int_equal(cpu_adam_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(cpu_adam_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(cpu_adam_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(cpu_adam_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(cpu_adam_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(cpu_adam_f32_to_f16(0x1.8p-25f), 0x0001);
    assert_int_equal(cpu_adam_f32_to_f16(-0.0f), 0x8000);
    if (!__builtin_cpu_supports("f16c")) {
        print_message("# no F16C: hardware comparison skipped\n");
        return;
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float a = cpu_adam_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
        if (memcmp(&a, &b, 4) != 0) fail_msg("f16->f32 of 0x%04x: %g vs F16C %g", h, a, b);
        if (!isnan(a) && cpu_adam_f32_to_f16(a) != h) fail_msg("f16 round trip of 0x%04x", h);
    }
    rng_state = 42;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rng_u32();
        if (i % 4 == 1) u = (u & 0x87ffffffu) | 0x30000000u;  // concentrate near the fp16 range
        if (i % 4 == 2) u = (u & 0x83ffffffu) | 0x38000000u;
        if (i % 4 == 3) u = (u & 0x80003fffu) | (rng_u32() & 0x7fffc000u) | 0x1000u;  // ties and near-ties
        float x;
        memcpy(&x, &u, 4);
        uint16_t a = cpu_adam_f32_to_f16(x), b = hw_f32_to_f16(x);
        if (a != b) fail_msg("f32->f16 of 0x%08x (%g): 0x%04x vs F16C 0x%04x", u, x, a, b);
    }
}

// NaN / inf gradients: every path keeps NaN in master and in both working-copy formats.
static void test_nan_propagation(void** state) {
    (void)state;
    for (int s = CPU_ADAM_SCALAR; s <= CPU_ADAM_AVX512; s++) {
        for (int wi = 0; wi < 2; wi++) {
            CpuAdam a;
            cpu_adam_init(&a, 0.9f, 0.999f, 1e-8f, true);
            if (cpu_adam_set_simd(&a, (CpuAdamSimd)s) != 0) continue;
            enum { N = 40 };
            float p[N], m[N] = {0}, v[N] = {0}, g[N];
            uint16_t w[N];
            for (int i = 0; i < N; i++) p[i] = 0.25f * i, g[i] = 0.1f;
            g[5] = NAN, g[21] = INFINITY, g[39] = -NAN;
            cpu_adam_begin_step(&a, 1, 0.9f, 0.999f);
            DType wdt = wi ? DT_BF16 : DT_F16;
            cpu_adam_update(&a, 1e-3f, 0.01f, p, m, v, g, DT_F32, 1.0f, w, wdt, N);
            for (int i = 0; i < N; i++) {
                bool bad = i == 5 || i == 21 || i == 39;
                float back = wi ? cpu_adam_bf16_to_f32(w[i]) : cpu_adam_f16_to_f32(w[i]);
                if (bad && !(isnan(p[i]) && isnan(back)))
                    fail_msg("%s: element %d should be NaN (master %g, work %g)", cpu_adam_simd_name((CpuAdamSimd)s), i, p[i], back);
                if (!bad && !isfinite(p[i])) fail_msg("element %d became %g", i, p[i]);
            }
        }
    }
}

// Trajectory of torch.optim.AdamW (numpy fp32 transcription) vs DeepSpeed's formula: they differ by
// rounding only (torch: denom = sqrt(v)/sqrt(bc2) + eps, p *= 1 - lr wd, lerp, unfused addcmul/addcdiv).
// Per step each side makes a few fp32 roundings of p (~2u|p|), of the update (~8u|step q|) and of m, v
// (~4u). On top of rounding there is one systematic difference (NOTE(numerics), docs/optimizer.md):
// DeepSpeed forms 1 - beta in fp32 from the fp32 beta (1 - 0.999f = 9.9998713e-4), torch rounds the
// double 1 - 0.999 to fp32 (1.0e-3): the g^2 term of v differs by 1.3e-5 relative, the g term of m by
// 2.4e-7. In the bias-corrected update this cancels to first order (DeepSpeed's (1-b2) and 1-b2^t come
// from the same fp32 beta, torch's nearly so), leaving < 1e-5 relative of the update.
// Allowance after K steps (differences accumulate at most linearly):
//   p: K*(4u|p| + lr*max|q|*(16u + 1e-5)),  m: K*(8u + 5e-7)*M,  v: K*(8u + 2e-5)|v|,
// where M = sum of |terms| of m (b1*M + (1-b1)|g|): m itself can be a cancellation of larger terms.
static void read_floats(char* line, const char* tag, int step, float* out, int n) {
    char* save = NULL;
    char* tok = strtok_r(line, " \n", &save);
    assert_string_equal(tok, tag);
    if (step >= 0) {
        tok = strtok_r(NULL, " \n", &save);
        assert_int_equal(atoi(tok), step);
    }
    for (int i = 0; i < n; i++) {
        tok = strtok_r(NULL, " \n", &save);
        assert_non_null(tok);
        out[i] = strtof(tok, NULL);
    }
}

static void test_vs_torch_adamw(void** state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/test/fixtures/adam/torch_adamw.txt", t5test_repo_dir());
    FILE* f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    static char line[65536];
    int n = 0, steps = 0;
    double b1, b2, eps, wd, lrs[64];
    assert_non_null(fgets(line, sizeof line, f));  // comment
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(sscanf(line, "cfg %d %d %lf %lf %lf %lf", &n, &steps, &b1, &b2, &eps, &wd), 6);
    assert_true(n <= 64 && steps <= 64);
    for (int s = 1; s <= steps; s++) {
        int k;
        assert_non_null(fgets(line, sizeof line, f));
        assert_int_equal(sscanf(line, "lr %d %lf", &k, &lrs[s]), 2);
    }
    float p[64], m[64] = {0}, v[64] = {0}, g[64], tp[64], tm[64], tv[64];
    double mabs[64] = {0};
    assert_non_null(fgets(line, sizeof line, f));
    read_floats(line, "p0", -1, p, n);
    CpuAdam a;
    cpu_adam_init(&a, (float)b1, (float)b2, (float)eps, true);
    double worst = 0.0;
    for (int s = 1; s <= steps; s++) {
        assert_non_null(fgets(line, sizeof line, f)), read_floats(line, "g", s, g, n);
        assert_non_null(fgets(line, sizeof line, f)), read_floats(line, "p", s, tp, n);
        assert_non_null(fgets(line, sizeof line, f)), read_floats(line, "m", s, tm, n);
        assert_non_null(fgets(line, sizeof line, f)), read_floats(line, "v", s, tv, n);
        cpu_adam_begin_step(&a, s, (float)b1, (float)b2);
        cpu_adam_update(&a, (float)lrs[s], (float)wd, p, m, v, g, DT_F32, 1.0f, NULL, DT_F16, (size_t)n);
        for (int i = 0; i < n; i++) {
            mabs[i] = b1 * mabs[i] + (1.0 - b1) * fabs(g[i]);
            double q = 10.0;  // |m_hat / (sqrt(v_hat) + eps)| <= (1-b1)/sqrt(1-b2) * ... < 10 for these steps
            double tolp = s * (4 * U32 * fabs(tp[i]) + lrs[s] * q * (16 * U32 + 1e-5)) + 1e-38;
            double tolm = s * (8 * U32 + 5e-7) * mabs[i] + 1e-38;
            double tolv = s * (8 * U32 + 2e-5) * fabs(tv[i]) + 1e-38;
            double ep = fabs(p[i] - tp[i]), em = fabs(m[i] - tm[i]), ev = fabs(v[i] - tv[i]);
            if (ep > tolp || em > tolm || ev > tolv)
                fail_msg("step %d elem %d: p %.9g torch %.9g | m %.9g torch %.9g | v %.9g torch %.9g", s, i, p[i], tp[i],
                         m[i], tm[i], v[i], tv[i]);
            worst = fmax(worst, fmax(ep / tolp, fmax(em / tolm, ev / tolv)));
        }
    }
    fclose(f);
    print_message("# %d steps x %d elements match torch AdamW, worst %.1f%% of the tolerance\n", steps, n, 100 * worst);
}

static void test_increment_step(void** state) {
    (void)state;
    CpuAdam a;
    cpu_adam_init(&a, 0.9f, 0.999f, 1e-8f, true);
    for (int s = 1; s <= 2000; s++) {
        cpu_adam_begin_step(&a, s, 0.9f, 0.999f);
        // running products of fp32 values: relative error <= s*u against the exact power, plus s half-ulps
        // of the smallest subnormal once b1^t underflows (t > ~830)
        double e1 = pow((double)0.9f, s), e2 = pow((double)0.999f, s);
        if (fabs(a.beta1_t - e1) > (s + 1) * (U32 * e1 + 0x1p-150) || fabs(a.beta2_t - e2) > (s + 1) * U32 * e2)
            fail_msg("step %d: running powers %.9g %.9g vs %.17g %.17g", s, a.beta1_t, a.beta2_t, e1, e2);
        assert_int_equal(a.step, s);
    }
    assert_true(a.bias_correction1 == 1.0f - a.beta1_t);
    assert_true(a.bias_correction2 == 1.0f / sqrtf(1.0f - a.beta2_t));
    // a skipped or resumed step number recomputes with pow (std::pow(float, size_t) in double)
    cpu_adam_begin_step(&a, 5000, 0.9f, 0.999f);
    assert_true(a.beta2_t == (float)pow((double)0.999f, 5000.0));
    assert_int_equal(a.step, 5000);
    // changed betas: pow from the new betas
    cpu_adam_begin_step(&a, 5001, 0.8f, 0.99f);
    assert_true(a.beta1_t == (float)pow((double)0.8f, 5001.0));
    assert_true(a.beta2_t == (float)pow((double)0.99f, 5001.0));
    // first step: bias corrections 1-b1 and 1/sqrt(1-b2)
    cpu_adam_init(&a, 0.9f, 0.999f, 1e-8f, true);
    cpu_adam_begin_step(&a, 1, 0.9f, 0.999f);
    assert_true(a.bias_correction1 == 1.0f - 0.9f);
    assert_true(a.bias_correction2 == 1.0f / sqrtf(1.0f - 0.999f));
}

// DeepSpeed combined scale and torch clip coefficient: fp32 bit patterns from numpy float32 arithmetic
// in the same operation order (see grad_clip.c).
static void test_grad_clip(void** state) {
    (void)state;
    const struct {
        float norm, ls, clip;
        uint32_t combined, inv;
    } ds[] = {
        {163840.0f, 65536.0f, 1.0f, 1210056708u, 919391432u},
        {3.0f, 1.0f, 1.0f, 1077936132u, 1051372199u},
        {1e9f, 1024.0f, 0.5f, 1324247848u, 805924959u},
        {0.3f, 1.0f, 1.0f, 1065353216u, 1065353216u},
        {1234.5678f, 8.0f, 2.0f, 1142575659u, 986994224u},
    };
    for (size_t i = 0; i < T5_ARRAY_LEN(ds); i++) {
        float c = ds_grad_combined_scale(ds[i].norm, ds[i].ls, ds[i].clip);
        float inv = ds_grad_inv_scale(ds[i].norm, ds[i].ls, ds[i].clip);
        uint32_t cb, ib;
        memcpy(&cb, &c, 4), memcpy(&ib, &inv, 4);
        if (cb != ds[i].combined || ib != ds[i].inv)
            fail_msg("DeepSpeed combined scale for norm %g scale %g clip %g: %.9g (0x%08x) inv %.9g, numpy 0x%08x 0x%08x",
                     ds[i].norm, ds[i].ls, ds[i].clip, c, cb, inv, ds[i].combined, ds[i].inv);
    }
    // no clipping configured: the loss scale alone; norm below clip: exactly the loss scale
    assert_true(ds_grad_combined_scale(1e6f, 4096.0f, 0.0f) == 4096.0f);
    assert_true(ds_grad_combined_scale(100.0f, 4096.0f, 1.0f) == 4096.0f);
    // DeepSpeed's -1 for a non-finite norm leaves the scale alone (such fp16 steps are skipped)
    assert_true(ds_grad_combined_scale(-1.0f, 1.0f, 1.0f) == 1.0f);
    const struct {
        float norm, max;
        uint32_t coef;
    } th[] = {{5.0f, 1.0f, 1045220554u}, {0.5f, 1.0f, 1065353216u}, {123.25f, 0.25f, 990179037u}};
    for (size_t i = 0; i < T5_ARRAY_LEN(th); i++) {
        float c = torch_clip_coef(th[i].norm, th[i].max);
        uint32_t cb;
        memcpy(&cb, &c, 4);
        if (cb != th[i].coef) fail_msg("torch clip coef for %g/%g: %.9g, numpy 0x%08x", th[i].norm, th[i].max, c, th[i].coef);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),     cmocka_unit_test(test_paths_vs_fp64),
        cmocka_unit_test(test_nan_propagation), cmocka_unit_test(test_vs_torch_adamw),
        cmocka_unit_test(test_increment_step),  cmocka_unit_test(test_grad_clip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
