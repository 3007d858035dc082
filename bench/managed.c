/* managed: an OpenACC-style program on managed memory, timed (issue 14). Two arrays, x and
 * y, of n floats from cuMemAllocManaged (CU_MEM_ATTACH_GLOBAL), written first by the CPU,
 * then worked on in three phases, each timed on its own and printed as
 * `metric managed_<phase>_s <seconds> s`:
 *
 *   gpu       STEPS launches of saxpy (y = x + y) back to back, one synchronize: the GPU
 *             working on memory the CPU wrote. Natively the pages move to the GPU on their
 *             first touch and stay there; through mpsshim what the host wrote goes to the
 *             device before the first launch and stays there (interpose/migrate.c).
 *   pingpong  ROUNDS rounds of one saxpy, a synchronize, then a CPU pass that reads and
 *             updates every element of y: natively the pages move back and forth each round.
 *   prefetch  the pingpong rounds with cuMemPrefetchAsync of both arrays to the device
 *             before each launch and to the host before each CPU pass (the advice a tuned
 *             program gives; through mpsshim a prefetch to the host brings the range back
 *             at once, one to the device sends what the host wrote).
 *
 * Then y is checked: every step adds 1 (x is all ones, y starts at 0; small integers are
 * exact in floats). The same binary runs natively, under native MPS and under mpsshim.
 *
 * usage: managed [--mib M] [--steps S] [--rounds R]   (defaults 64 MiB per array, 100, 10)
 * Any failed driver call prints its error name and exits 1. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 256

static void usage(void)
{
    fprintf(stderr, "usage: managed [--mib M] [--steps S] [--rounds R]\n");
    exit(2);
}

static CUfunction saxpy;
static CUdeviceptr x, y;
static int n;

static void launch(CUstream s)
{
    float alpha = 1.0f;
    void *args[] = {&alpha, &x, &y, &n};
    CK(cuLaunchKernel(saxpy, (unsigned)((n + BLOCK - 1) / BLOCK), 1, 1, BLOCK, 1, 1, 0, s, args,
                      NULL));
}

/* Both arrays to `where` (a device ordinal, or -1 for the host), queued on s. */
static void prefetch(int where, CUstream s)
{
    CUmemLocation loc = {.type =
                             where < 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                         .id = where < 0 ? 0 : where};
    CK(cuMemPrefetchAsync(x, (size_t)n * sizeof(float), loc, 0, s));
    CK(cuMemPrefetchAsync(y, (size_t)n * sizeof(float), loc, 0, s));
}

/* Every element of y is `want`; else the program fails, naming the first that is not. */
static void check(float want)
{
    const float *py = (const float *)(uintptr_t)y;
    for (int i = 0; i < n; i++)
        if (py[i] != want) {
            char what[96];
            snprintf(what, sizeof what, "y[%d] is %g, want %g", i, (double)py[i], (double)want);
            bench_die("%s", what);
        }
}

/* ROUNDS rounds of one launch, a synchronize and a CPU pass over y (with prefetches when
 * asked); the seconds they took. */
static double rounds(unsigned r, int with_prefetch, CUdevice dev, CUstream s)
{
    float *py = (float *)(uintptr_t)y;
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < r; i++) {
        if (with_prefetch) prefetch((int)dev, s);
        launch(s);
        if (with_prefetch) prefetch(-1, s);
        CK(cuStreamSynchronize(s));
        for (int j = 0; j < n; j++)
            py[j] += 1.0f;
    }
    return (double)(bench_now_ns() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    bench_prog = "managed";
    unsigned long long mib = 64, steps = 100, nrounds = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mib") == 0)
            mib = bench_num_arg(argc, argv, i++, 1, 4096, usage);
        else if (strcmp(argv[i], "--steps") == 0)
            steps = bench_num_arg(argc, argv, i++, 1, 100000, usage);
        else if (strcmp(argv[i], "--rounds") == 0)
            nrounds = bench_num_arg(argc, argv, i++, 1, 100000, usage);
        else
            usage();
    }
    /* Every value y takes must stay exact in a float (below 2^24). */
    if (steps + 2 * nrounds >= (1ull << 24)) usage();
    n = (int)(mib * (1ull << 20) / sizeof(float));

    CUdevice dev;
    bench_use_device(0, &dev);
    int managed_ok = 0;
    CK(cuDeviceGetAttribute(&managed_ok, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
    if (!managed_ok) bench_die("%s", "device 0 does not support managed memory");
    CUmodule mod;
    saxpy = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx", "saxpy", &mod);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    printf("# managed: pid %d, 2 arrays of %llu MiB, %llu steps, %llu rounds\n", (int)getpid(), mib,
           steps, nrounds);

    bench_step = "allocate";
    CK(cuMemAllocManaged(&x, (size_t)n * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    CK(cuMemAllocManaged(&y, (size_t)n * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    float *px = (float *)(uintptr_t)x, *py = (float *)(uintptr_t)y;
    for (int i = 0; i < n; i++) {
        px[i] = 1.0f;
        py[i] = 0.0f;
    }

    bench_step = "gpu";
    uint64_t t0 = bench_now_ns();
    for (unsigned long long i = 0; i < steps; i++)
        launch(s);
    CK(cuStreamSynchronize(s));
    double gpu = (double)(bench_now_ns() - t0) / 1e9;
    check((float)steps);

    bench_step = "pingpong";
    double pp = rounds((unsigned)nrounds, 0, dev, s);
    check((float)(steps + 2 * nrounds));

    bench_step = "prefetch";
    double pf = rounds((unsigned)nrounds, 1, dev, s);
    check((float)(steps + 4 * nrounds));

    printf("metric managed_gpu_s %.4f s\n", gpu);
    printf("metric managed_pingpong_s %.4f s\n", pp);
    printf("metric managed_prefetch_s %.4f s\n", pf);

    bench_step = "teardown";
    CK(cuMemFree(x));
    CK(cuMemFree(y));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
