/*
 * test_gpu_init_normal.c: cuda/init_normal.cu (random weights on the GPU) against a CPU fp64 reference of the
 * same Box-Muller stream.
 *  - lengths 1, 2, 7 (odd: the last pair keeps one value), 4096, 1000003, and one past a grid stride; several
 *    states and standard deviations: every element within 2 fp32 ulp of the reference (CUDA's double log / cos
 *    / sin are within 2 double ulp of glibc's, which moves the fp32 rounding by at most one step), and at least
 *    99.9% bit-identical;
 *  - the statistics of 1e6 draws: mean within 5 sigma/sqrt(n) of 0, standard deviation within 1% of sd;
 *  - determinism: two launches give the same bits.
 */
#include "t5test.h"

#include <math.h>
#include <string.h>

#include "../src/base/check.h"
#include "../cuda/init_normal.cuh"

static uint64_t sm64(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double u01(uint64_t* st) { return ((double)(sm64(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// the sequential definition: the stream's calls 1, 2, 3, ... taken two at a time
static void cpu_init(float* x, size_t n, uint64_t state, double sd) {
    uint64_t s = state;
    for (size_t k = 0; k < n; k += 2) {
        const double u1 = u01(&s), u2 = u01(&s);
        const double r = sqrt(-2.0 * log(u1));
        x[k] = (float)(sd * r * cos(2.0 * M_PI * u2));
        if (k + 1 < n) x[k + 1] = (float)(sd * r * sin(2.0 * M_PI * u2));
    }
}

static int32_t ulp_dist(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? ia - ib : ib - ia;
}

static void test_against_cpu(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    const size_t lens[] = {1, 2, 7, 4096, 1000003, 2 * 65536 * 256 + 3};
    const uint64_t states[] = {0, 0x1234567890ABCDEFull, ~0ull};
    const double sds[] = {1.0, 0.03125, 1.0 / sqrt(16384.0)};
    for (size_t a = 0; a < T5_ARRAY_LEN(lens); a++)
        for (size_t b = 0; b < T5_ARRAY_LEN(states); b++) {
            const size_t n = lens[a];
            const double sd = sds[(a + b) % T5_ARRAY_LEN(sds)];
            float* ref = malloc(n * sizeof(float));
            float* got = malloc(n * sizeof(float));
            float* got2 = malloc(n * sizeof(float));
            float* d;
            CUDA_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
            cpu_init(ref, n, states[b], sd);
            init_normal(d, n, states[b], sd, 0);
            CUDA_CHECK(cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemset(d, 0, n * sizeof(float)));
            init_normal(d, n, states[b], sd, 0);
            CUDA_CHECK(cudaMemcpy(got2, d, n * sizeof(float), cudaMemcpyDeviceToHost));
            int32_t worst = 0;
            size_t at = 0, same = 0;
            for (size_t i = 0; i < n; i++) {
                int32_t u = ulp_dist(got[i], ref[i]);
                if (u > worst) worst = u, at = i;
                same += u == 0;
            }
            print_message("    # n %zu state %016llx sd %.4g: worst %d ulp at %zu (got %.9g ref %.9g), %.5f%% identical\n",
                          n, (unsigned long long)states[b], sd, worst, at, got[at], ref[at], 100.0 * same / n);
            if (worst > 2) fail_msg("n %zu: %d ulp from the CPU reference at %zu", n, worst, at);
            if ((double)same < 0.999 * (double)n) fail_msg("n %zu: only %zu of %zu identical", n, same, n);
            if (memcmp(got, got2, n * sizeof(float))) fail_msg("n %zu: two launches differ", n);
            if (n >= 1000000) {
                double s1 = 0, s2 = 0;
                for (size_t i = 0; i < n; i++) s1 += got[i], s2 += (double)got[i] * got[i];
                const double mean = s1 / n, sdev = sqrt(s2 / n - mean * mean);
                if (fabs(mean) > 5 * sd / sqrt((double)n)) fail_msg("n %zu: mean %g (sd %g)", n, mean, sd);
                if (fabs(sdev / sd - 1) > 0.01) fail_msg("n %zu: standard deviation %g, want %g", n, sdev, sd);
            }
            CUDA_CHECK(cudaFree(d));
            free(ref);
            free(got);
            free(got2);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
