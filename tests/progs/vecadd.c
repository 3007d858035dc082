/* vecadd [n]: the hello world. Allocates three vectors, copies two in, adds them with
 * vec_add, copies the sum out and checks every element; prints a checksum. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    t_init("vecadd", 300);
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    REQUIRE(n > 0, "bad element count '%s'", argv[1]);

    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction vec_add = t_get_function(mod, "vec_add");
    t_ok("setup");

    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    REQUIRE(a && b && c, "out of host memory");
    /* Small integers and quarters: every sum is exact in float, so the check is exact. */
    for (int i = 0; i < n; i++) {
        a[i] = (float)(i % 1000);
        b[i] = (float)(i % 7) * 0.25f;
        c[i] = -1.0f;
    }

    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc(&da, bytes));
    CHECK(cuMemAlloc(&db, bytes));
    CHECK(cuMemAlloc(&dc, bytes));
    CHECK(cuMemcpyHtoD(da, a, bytes));
    CHECK(cuMemcpyHtoD(db, b, bytes));
    CHECK(cuMemsetD32(dc, 0xffffffffu, (size_t)n)); /* NaN: an unwritten element shows */
    t_ok("alloc and copy in");

    void *params[] = {&da, &db, &dc, &n};
    unsigned block = 256, grid = (unsigned)((n + block - 1) / block);
    CHECK(cuLaunchKernel(vec_add, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    t_ok("vec_add launched");

    CHECK(cuMemcpyDtoH(c, dc, bytes));
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float want = a[i] + b[i];
        REQUIRE(c[i] == want, "c[%d] = %g, expected %g", i, (double)c[i], (double)want);
        sum += c[i];
    }
    t_ok("all %d elements", n);
    printf("checksum %.2f\n", sum);

    CHECK(cuMemFree(da));
    CHECK(cuMemFree(db));
    CHECK(cuMemFree(dc));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    free(a);
    free(b);
    free(c);
    t_pass();
}
