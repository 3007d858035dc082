/* freewait: whether one process's cuMemFree waits for another process's kernels (issue 12:
 * "measure cuMemFree while other clients run"). Two processes meet at a barrier before each
 * repeat; process 0 (busy) then launches KERNELS kernels of one block spinning MS ms each,
 * back to back, and synchronizes; process 1 (free), a few ms later, allocates and frees
 * 1 MiB PAIRS times, PAUSE_MS apart, timing each cuMemFree. It prints the longest as
 * `metric free_max_ms <ms> ms <repeat>` and their mean as `metric free_mean_ms`.
 *
 * Natively, and under native MPS, each process frees in a context of its own and the other's
 * kernels do not concern it. In one shared context (mpsshim's server) the driver's cuMemFree
 * waits for every kernel of the context, so a free can take as long as the other process's
 * queued kernels (up to KERNELS x MS); a server that frees from a pool (MPSSHIM_DEVICE_POOL=1,
 * server/memory/devmem.c) should not.
 *
 * usage: freewait --index 0|1 --barrier FILE [--repeats R] [--kernels K] [--ms MS]
 *                 [--pairs N] [--pause-ms P] [--kernel spin_ns|delay_set]
 * --kernel delay_set (tests/kernels, spins in block 0 only) is for drivers without spin_ns,
 * such as the CPU test driver. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr, "usage: freewait --index 0|1 --barrier FILE [--repeats R] [--kernels K] "
                    "[--ms MS] [--pairs N] [--pause-ms P] [--kernel spin_ns|delay_set]\n");
    exit(2);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Process 0: K kernels of `ms` each, back to back, then a synchronize. */
static void busy(CUfunction f, int spin, CUstream s, CUdeviceptr flag, unsigned kernels,
                 unsigned ms)
{
    unsigned value = 1;
    unsigned long long ns = (unsigned long long)ms * 1000000ull;
    void *args[] = {spin ? (void *)&ns : (void *)&flag, &value, &ns};
    for (unsigned i = 0; i < kernels; i++)
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    CK(cuStreamSynchronize(s));
}

/* Process 1: `pairs` allocations and frees of 1 MiB; the longest free and the mean, in ms. */
static void frees(unsigned pairs, unsigned pause_ms, double *max_ms, double *mean_ms)
{
    double sum = 0, max = 0;
    for (unsigned i = 0; i < pairs; i++) {
        CUdeviceptr d;
        CK(cuMemAlloc(&d, 1 << 20));
        uint64_t t0 = bench_now_ns();
        CK(cuMemFree(d));
        double ms = (double)(bench_now_ns() - t0) / 1e6;
        sum += ms;
        if (ms > max) max = ms;
        sleep_ms(pause_ms);
    }
    *max_ms = max;
    *mean_ms = sum / pairs;
}

int main(int argc, char **argv)
{
    bench_prog = "freewait";
    unsigned repeats = 1, kernels = 10, ms = 20, pairs = 10, pause_ms = 10;
    int index = -1;
    const char *kernel = "spin_ns", *barrier = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--index") == 0)
            index = (int)bench_num_arg(argc, argv, i++, 0, 1, usage);
        else if (strcmp(argv[i], "--repeats") == 0)
            repeats = (unsigned)bench_num_arg(argc, argv, i++, 1, 1000, usage);
        else if (strcmp(argv[i], "--kernels") == 0)
            kernels = (unsigned)bench_num_arg(argc, argv, i++, 1, 1000, usage);
        else if (strcmp(argv[i], "--ms") == 0)
            ms = (unsigned)bench_num_arg(argc, argv, i++, 1, 10000, usage);
        else if (strcmp(argv[i], "--pairs") == 0)
            pairs = (unsigned)bench_num_arg(argc, argv, i++, 1, 100000, usage);
        else if (strcmp(argv[i], "--pause-ms") == 0)
            pause_ms = (unsigned)bench_num_arg(argc, argv, i++, 0, 10000, usage);
        else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
            kernel = argv[++i];
        else if (strcmp(argv[i], "--barrier") == 0 && i + 1 < argc)
            barrier = argv[++i];
        else
            usage();
    }
    int spin = strcmp(kernel, "spin_ns") == 0;
    if (index < 0 || !barrier || (!spin && strcmp(kernel, "delay_set") != 0)) usage();

    CUdevice dev;
    bench_use_device(0, &dev);
    CUmodule mod;
    CUfunction f = bench_load_spinner(kernel, &mod);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr flag;
    CK(cuMemAlloc(&flag, sizeof(unsigned)));
    /* Outside the timing: lazy loading of the kernel, and a first allocation and free. */
    busy(f, spin, s, flag, 1, 1);
    double max_ms, mean_ms;
    frees(1, 0, &max_ms, &mean_ms);
    printf("# freewait: pid %d, process %d, %u kernels of %s x %u ms, %u frees of 1 MiB %u ms "
           "apart, %u repeats\n",
           (int)getpid(), index, kernels, kernel, ms, pairs, pause_ms, repeats);
    for (unsigned r = 1; r <= repeats; r++) {
        bench_barrier(barrier, 2 * r);
        if (index == 0) {
            busy(f, spin, s, flag, kernels, ms);
            continue;
        }
        sleep_ms(ms / 4 + 1); /* the first kernel runs */
        frees(pairs, pause_ms, &max_ms, &mean_ms);
        printf("metric free_max_ms %.3f ms %u\n", max_ms, r);
        printf("metric free_mean_ms %.3f ms %u\n", mean_ms, r);
        fflush(stdout);
        /* The next repeat starts at the barrier, which process 0 reaches once this
         * repeat's kernels are done: no free meets kernels of the repeat before. */
    }
    CK(cuMemFree(flag));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
