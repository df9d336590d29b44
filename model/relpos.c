/*
 * relpos.c: T5 relative position buckets on the host (see relpos.h for the formula).
 *
 * Bit-exactness: transformers evaluates the large-distance branch as float32 tensor ops,
 *     torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)
 * and the bucket is then truncated toward zero (.to(torch.long)). We reproduce each float32 rounding:
 *   a = (float)n / (float)max_exact            true division, one rounding (exact when max_exact is 2^k)
 *   l = logf(a)                                glibc logf, correctly rounded in practice; torch's CPU (SLEEF
 *                                              u10) and CUDA logf agree on every value the test covers
 *   s = (float)log((double)max_distance / max_exact)   the Python double, rounded to float32 by the op
 *   CUDA (where HF runs it, on the model's device): divide-by-CPU-scalar is a multiply by the float32
 *        reciprocal: l * (1.0f / s)
 *   CPU: l / s
 * then * (float)(nb - max_exact) and truncation. We use the CUDA form. For every n <= 1024 and the settings
 * (32,128), (64,256), (16,64) both forms give the same integers (checked), and HF's CPU and CUDA dumps agree.
 * test/test_relpos.c compares against HF's function for rel in [-1024, 1024] with those settings.
 */
#include "relpos.h"

#include <math.h>

// the float32 part of HF's formula; volatile-free but written one rounding per statement so the
// compiler cannot contract it (host C is compiled without -ffast-math, and we use no fma here)
static int relpos_large(int n, int max_exact, int nb, int max_distance) {
    float a = (float)n / (float)max_exact;
    float l = logf(a);
    float s = (float)log((double)max_distance / (double)max_exact);
    float inv = 1.0f / s;
    float q = l * inv;
    float v = q * (float)(nb - max_exact);
    long t = (long)v;  // truncation toward zero, as Tensor.to(torch.long)
    long b = (long)max_exact + t;
    return b < nb - 1 ? (int)b : nb - 1;
}

int relpos_bucket(int rel, bool bidirectional, int num_buckets, int max_distance) {
    int nb = num_buckets, base = 0, n;
    if (bidirectional) {
        nb /= 2;
        base = rel > 0 ? nb : 0;
        n = rel < 0 ? -rel : rel;
    } else {
        n = rel < 0 ? -rel : 0;
    }
    int max_exact = nb / 2;
    if (n < max_exact) return base + n;
    return base + relpos_large(n, max_exact, nb, max_distance);
}

int relpos_bucket_table(int* out, int max_len, bool bidirectional, int num_buckets, int max_distance) {
    int off = max_len - 1;
    for (int rel = -off; rel <= off; rel++) out[rel + off] = relpos_bucket(rel, bidirectional, num_buckets, max_distance);
    return off;
}
