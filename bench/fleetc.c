/* fleetc: one process of a driver-API "inference fleet", the shape of bench/fleet.py's
 * PyTorch clients without Python: each step spends some CPU time of its own (a framework's
 * host work), launches a few small kernels on the legacy stream, and reads 4 bytes back
 * with a synchronous copy (what `.item()` does). It counts the steps it finishes in a fixed
 * time from a common start and prints `metric steps_per_s <n> steps/s`. bench/run.sh starts
 * P copies at once; the sum is the fleet's throughput. With many processes on few cores it
 * measures what every wait for a reply costs the CPUs that the processes share (spinning
 * threads take them from the ones with work), which is where mpsshim fell behind MPS.
 *
 * usage: fleetc [--seconds S] [--work-us W] [--launches K] [--barrier FILE --procs P]
 * Defaults: 1 s, 100 us of host work, 8 launches of tests/kernels' empty_kernel per step. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr, "usage: fleetc [--seconds S] [--work-us W] [--launches K] "
                    "[--barrier FILE --procs P]\n");
    exit(2);
}

/* Keeps this thread busy for `ns`, as host code between launches does. */
static void host_work(uint64_t ns)
{
    uint64_t end = bench_now_ns() + ns;
    volatile unsigned x = 0;
    while (bench_now_ns() < end)
        for (int i = 0; i < 64; i++)
            x += (unsigned)i;
}

int main(int argc, char **argv)
{
    bench_prog = "fleetc";
    unsigned long long seconds = 1, work_us = 100, launches = 8, procs = 1;
    const char *barrier = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = bench_num_arg(argc, argv, i++, 1, 3600, usage);
        else if (strcmp(argv[i], "--work-us") == 0)
            work_us = bench_num_arg(argc, argv, i++, 0, 1000000, usage);
        else if (strcmp(argv[i], "--launches") == 0)
            launches = bench_num_arg(argc, argv, i++, 0, 100000, usage);
        else if (strcmp(argv[i], "--procs") == 0)
            procs = bench_num_arg(argc, argv, i++, 1, 4096, usage);
        else if (strcmp(argv[i], "--barrier") == 0 && i + 1 < argc)
            barrier = argv[++i];
        else
            usage();
    }
    bench_step = "setup";
    CUdevice dev;
    bench_use_device(0, &dev);
    CUmodule mod;
    CUfunction empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx",
                                           "empty_kernel", &mod);
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 4));
    CK(cuMemsetD32(d, 7, 1));
    uint32_t v = 0;
    /* One step before the barrier: code loaded, every path warm. */
    CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CK(cuMemcpyDtoH(&v, d, sizeof(v)));
    if (v != 7) bench_die("read back %s instead of 7", "another value");
    if (barrier) bench_barrier(barrier, (unsigned)procs);
    bench_step = "steps";
    uint64_t t0 = bench_now_ns(), end = t0 + seconds * 1000000000ull, steps = 0, now;
    do {
        host_work(work_us * 1000);
        for (unsigned long long k = 0; k < launches; k++)
            CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        CK(cuMemcpyDtoH(&v, d, sizeof(v)));
        steps++;
    } while ((now = bench_now_ns()) < end);
    if (v != 7) bench_die("read back %s instead of 7", "another value");
    printf("metric steps_per_s %.1f steps/s\n", (double)steps * 1e9 / (double)(now - t0));
    CK(cuMemFree(d));
    CK(cuModuleUnload(mod));
    return 0;
}
