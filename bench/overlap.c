/* overlap: one process's share of the "P processes x 200 launches of 2 blocks x 100 us"
 * figure. Launches N small kernels back to back on a stream of its own, each keeping every
 * one of its blocks busy for a fixed time, then synchronizes; prints the time from the first
 * launch to the end of the synchronize as `metric kernel_time_s <seconds> s`. bench/run.sh
 * starts P copies at once: where the GPU runs their kernels side by side (MPS, mpsshim) the
 * time stays near N x the kernel time; time-sliced contexts (native) take about P times it.
 *
 * usage: overlap [--launches N] [--blocks B] [--us US] [--kernel spin_ns|delay_set]
 *                [--barrier FILE --procs P] [--repeats R]
 * --barrier: the P processes given the same (new) FILE wait for each other after their setup,
 * so that their launch loops start together, and again before each of the R repeats (one
 * `metric kernel_time_s <s> s <repeat>` line each: the process and its context are set up once,
 * as a long-running job's are). --kernel delay_set (tests/kernels, spins in block
 * 0 only) is for drivers without spin_ns, such as the CPU test driver. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr, "usage: overlap [--launches N] [--blocks B] [--us US] "
                    "[--kernel spin_ns|delay_set] [--barrier FILE --procs P] [--repeats R]\n");
    exit(2);
}

/* An option's number, 1..max. */
#define num_arg(argc, argv, i, max) bench_num_arg(argc, argv, i, 1, max, usage)

int main(int argc, char **argv)
{
    bench_prog = "overlap";
    unsigned launches = 200, blocks = 2, procs = 1, repeats = 1;
    unsigned long long ns = 100000;
    const char *kernel = "spin_ns", *barrier = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--launches") == 0)
            launches = (unsigned)num_arg(argc, argv, i++, 1000000);
        else if (strcmp(argv[i], "--blocks") == 0)
            blocks = (unsigned)num_arg(argc, argv, i++, 65535);
        else if (strcmp(argv[i], "--us") == 0)
            ns = num_arg(argc, argv, i++, 10000000) * 1000;
        else if (strcmp(argv[i], "--procs") == 0)
            procs = (unsigned)num_arg(argc, argv, i++, 4096);
        else if (strcmp(argv[i], "--repeats") == 0)
            repeats = (unsigned)num_arg(argc, argv, i++, 1000);
        else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
            kernel = argv[++i];
        else if (strcmp(argv[i], "--barrier") == 0 && i + 1 < argc)
            barrier = argv[++i];
        else
            usage();
    }
    int spin = strcmp(kernel, "spin_ns") == 0;
    if (!spin && strcmp(kernel, "delay_set") != 0) usage();

    CUdevice dev;
    bench_use_device(0, &dev);

    CUmodule mod;
    CUfunction f = bench_load_spinner(kernel, &mod);
    CUstream stream;
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr flag;
    CK(cuMemAlloc(&flag, sizeof(unsigned)));
    unsigned value = 1;
    unsigned long long zero = 0;
    void *warm_args[] = {spin ? (void *)&zero : (void *)&flag, &value, &zero};
    void *args[] = {spin ? (void *)&ns : (void *)&flag, &value, &ns};

    /* A zero-length launch first, outside the timing: lazy loading happens here. */
    CK(cuLaunchKernel(f, blocks, 1, 1, 32, 1, 1, 0, stream, warm_args, NULL));
    CK(cuStreamSynchronize(stream));
    printf("# overlap: pid %d, %u launches of %s, %u blocks x %llu us, %u processes, %u repeats\n",
           (int)getpid(), launches, kernel, blocks, ns / 1000, procs, repeats);
    for (unsigned r = 1; r <= repeats; r++) {
        /* Repeat r starts when all P processes have arrived r times. */
        if (barrier) bench_barrier(barrier, procs * r);
        uint64_t t0 = bench_now_ns();
        for (unsigned i = 0; i < launches; i++)
            CK(cuLaunchKernel(f, blocks, 1, 1, 32, 1, 1, 0, stream, args, NULL));
        CK(cuStreamSynchronize(stream));
        uint64_t t1 = bench_now_ns();
        printf("# window_ns %llu %llu %u\n", (unsigned long long)t0, (unsigned long long)t1, r);
        printf("metric kernel_time_s %.6f s %u\n", (double)(t1 - t0) / 1e9, r);
        fflush(stdout);
    }
    CK(cuMemFree(flag));
    CK(cuStreamDestroy(stream));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
