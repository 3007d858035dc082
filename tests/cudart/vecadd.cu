// vecadd [n]: the CUDA runtime hello world. cudaMalloc, cudaMemcpy, a <<<>>> launch of
// vec_add and one of saxpy, every element checked; prints a checksum.
#include "common.h"
#include "../kernels/kernels.cu"

int main(int argc, char **argv)
{
    t_init("vecadd", 300);
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    REQUIRE(n > 0, "bad element count '%s'", argv[1]);

    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    REQUIRE(ndev >= 1, "no device");
    CHECK(cudaSetDevice(0));
    int driver = 0, runtime = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    REQUIRE(driver >= runtime, "driver %d older than runtime %d", driver, runtime);
    t_ok("device 0, driver covers the runtime");

    size_t bytes = (size_t)n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    REQUIRE(a && b && c, "out of host memory");
    // Small integers and quarters: every result is exact in float, so the check is exact.
    for (int i = 0; i < n; i++) {
        a[i] = (float)(i % 1000);
        b[i] = (float)(i % 7) * 0.25f;
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dc, 0xff, bytes)); // NaN: an unwritten element shows
    t_ok("alloc and copy in");

    unsigned block = 256, grid = (unsigned)((n + block - 1) / block);
    vec_add<<<grid, block>>>(da, db, dc, n);
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float want = a[i] + b[i];
        REQUIRE(c[i] == want, "c[%d] = %g, expected %g", i, (double)c[i], (double)want);
        sum += c[i];
    }
    t_ok("vec_add: all %d elements", n);
    printf("checksum %.2f\n", sum);

    // y = 2x + y in place, then read back with an implicit synchronisation.
    saxpy<<<grid, block>>>(2.0f, da, dc, n);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float want = 2.0f * a[i] + (a[i] + b[i]);
        REQUIRE(c[i] == want, "saxpy c[%d] = %g, expected %g", i, (double)c[i], (double)want);
    }
    t_ok("saxpy: all %d elements", n);

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    free(a);
    free(b);
    free(c);
    CHECK(cudaDeviceReset());
    t_ok("freed, device reset");
    t_pass();
}
