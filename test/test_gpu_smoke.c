/*
 * test_gpu_smoke.c: the device is there and a round trip through device memory works.
 */
#include "t5test.h"

#include "../src/base/check.h"

static void test_device_roundtrip(void** state) {
    (void)state;
    T5_REQUIRE_GPU();
    float h[256], back[256];
    for (int i = 0; i < 256; i++) h[i] = (float)i * 0.5f - 7.0f;
    float* d = NULL;
    CUDA_CHECK(cudaMalloc((void**)&d, sizeof h));
    CUDA_CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(d));
    assert_memory_equal(h, back, sizeof h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
