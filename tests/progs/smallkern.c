/* smallkern [iterations] [--pool|--ctx]: the small-kernel workload of the "many clients at
 * once" test. Many short launches (inc_u32 on 1024 elements, 2 blocks) with a synchronize
 * every 100, then every element checked and a checksum printed. --pool: the elements come
 * from the stream-ordered allocator (cuMemAllocAsync, cuMemFreeAsync), as a program on
 * cudaMallocAsync's do. --ctx: every 100 launches the context is synchronised, not the
 * stream (cudaDeviceSynchronize's way). MPSSHIM_TEST_GO=FIFO: the launches wait, once set up, until
 * FIFO is opened for writing. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#define ELEMS 1024

int main(int argc, char **argv)
{
    t_init("smallkern", 300);
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    REQUIRE(iters >= 1 && iters <= 100000000, "bad iteration count '%s'", argv[1]);
    int pool = argc > 2 && strcmp(argv[2], "--pool") == 0;
    int ctxsync = argc > 2 && strcmp(argv[2], "--ctx") == 0;
    REQUIRE(argc <= 2 || pool || ctxsync, "unknown option '%s'", argv[2]);

    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction inc = t_get_function(mod, "inc_u32");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    unsigned long long n = ELEMS;
    if (pool)
        CHECK(cuMemAllocAsync(&p, ELEMS * 4, s));
    else
        CHECK(cuMemAlloc(&p, ELEMS * 4));
    CHECK(cuMemsetD32Async(p, 7, ELEMS, s));
    t_ok("setup");
    /* MPSSHIM_TEST_GO=FIFO (bench/clients.sh): once set up, wait until FIFO is opened for
     * writing, so that many clients work at once however long their start took (opening
     * blocks: thousands of clients polling for a file took the CPUs from the others' start). */
    const char *go = getenv("MPSSHIM_TEST_GO");
    fflush(stdout); /* "ok setup" seen by whoever waits for it */
    int gofd = go ? open(go, O_RDONLY) : -1;
    if (gofd >= 0) close(gofd);

    void *args[] = {&p, &n};
    for (long i = 1; i <= iters; i++) {
        /* 2 blocks of 256 threads: each thread covers two elements through the stride. */
        CHECK(cuLaunchKernel(inc, 2, 1, 1, 256, 1, 1, 0, s, args, NULL));
        if (i % 100 == 0 && ctxsync)
            CHECK(cuCtxSynchronize());
        else if (i % 100 == 0)
            CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuStreamSynchronize(s));

    uint32_t host[ELEMS];
    CHECK(cuMemcpyDtoHAsync(host, p, sizeof host, s));
    CHECK(cuStreamSynchronize(s));
    uint64_t sum = 0;
    for (int i = 0; i < ELEMS; i++) {
        REQUIRE(host[i] == (uint32_t)(7 + iters), "element %d is %u, want %lu", i, host[i],
                (unsigned long)(7 + iters));
        sum += host[i];
    }
    t_ok("%ld launches applied to all %d elements", iters, ELEMS);
    printf("checksum %llu\n", (unsigned long long)sum);

    if (pool) {
        CHECK(cuMemFreeAsync(p, s));
        CHECK(cuStreamSynchronize(s));
    } else {
        CHECK(cuMemFree(p));
    }
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
