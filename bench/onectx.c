/* onectx: the ceiling of one shared context. T threads of ONE process, each with a stream of
 * its own in the device's primary context, run fleetc's step (W us of host work, K launches
 * of an empty kernel, a 4-byte read back and a synchronize) for a fixed time from a common
 * start; it prints the steps per second of all of them together. Run natively, it is what
 * mpsshim's server (one context, one worker thread per client) could at best give T clients
 * of bench/fleetc: what the driver lets T threads of one context launch, whatever the shim
 * costs on top. Native MPS gives each client its own context and is not bound by it.
 *
 * usage: onectx THREADS [--work-us W] [--launches K] [--seconds S] [--sched auto|spin|yield|blocking]
 * Defaults: 100 us, 8 launches, 1 s, the driver's own scheduling (auto). Not part of
 * bench/run.sh: a diagnosis (bench/README.md, "One context's ceiling"). */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CUcontext ctx;
static CUfunction empty;
static unsigned long long work_us = 100, launches = 8;
static uint64_t window_ns = 1000000000ull;
static pthread_barrier_t start;

static void usage(void)
{
    fprintf(stderr, "usage: onectx THREADS [--work-us W] [--launches K] [--seconds S] "
                    "[--sched auto|spin|yield|blocking]\n");
    exit(2);
}

/* One thread: its stream and 4 bytes, one warm step, then steps until the window ends. */
static void *run(void *arg)
{
    uint64_t *steps = arg;
    CK(cuCtxSetCurrent(ctx));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 4));
    uint32_t v;
    CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    CK(cuMemcpyDtoHAsync(&v, d, sizeof(v), s));
    CK(cuStreamSynchronize(s));
    pthread_barrier_wait(&start);
    uint64_t end = bench_now_ns() + window_ns, n = 0;
    while (bench_now_ns() < end) {
        uint64_t busy = bench_now_ns() + work_us * 1000;
        volatile unsigned x = 0;
        while (bench_now_ns() < busy)
            for (int i = 0; i < 64; i++)
                x += (unsigned)i;
        for (unsigned long long k = 0; k < launches; k++)
            CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
        CK(cuMemcpyDtoHAsync(&v, d, sizeof(v), s));
        CK(cuStreamSynchronize(s));
        n++;
    }
    *steps = n;
    CK(cuMemFree(d));
    CK(cuStreamDestroy(s));
    return NULL;
}

int main(int argc, char **argv)
{
    bench_prog = "onectx";
    if (argc < 2) usage();
    unsigned long long threads = bench_num_arg(argc, argv, 0, 1, 1024, usage);
    unsigned flags = CU_CTX_SCHED_AUTO;
    const char *sched = "auto";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--work-us") == 0)
            work_us = bench_num_arg(argc, argv, i++, 0, 1000000, usage);
        else if (strcmp(argv[i], "--launches") == 0)
            launches = bench_num_arg(argc, argv, i++, 0, 100000, usage);
        else if (strcmp(argv[i], "--seconds") == 0)
            window_ns = bench_num_arg(argc, argv, i++, 1, 3600, usage) * 1000000000ull;
        else if (strcmp(argv[i], "--sched") == 0 && i + 1 < argc) {
            sched = argv[++i];
            flags = !strcmp(sched, "auto")       ? CU_CTX_SCHED_AUTO
                    : !strcmp(sched, "spin")     ? CU_CTX_SCHED_SPIN
                    : !strcmp(sched, "yield")    ? CU_CTX_SCHED_YIELD
                    : !strcmp(sched, "blocking") ? CU_CTX_SCHED_BLOCKING_SYNC
                                                 : (usage(), 0u);
        } else
            usage();
    }
    bench_step = "setup";
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxSetFlags(dev, flags));
    ctx = bench_use_device(0, &dev);
    CUmodule mod;
    empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx", "empty_kernel",
                                &mod);
    pthread_t *th = calloc(threads, sizeof(*th));
    uint64_t *steps = calloc(threads, sizeof(*steps));
    if (!th || !steps) bench_die("%s", "out of memory");
    if (pthread_barrier_init(&start, NULL, (unsigned)threads) != 0)
        bench_die("%s", "pthread_barrier_init failed");
    bench_step = "steps";
    for (unsigned long long i = 0; i < threads; i++)
        if (pthread_create(&th[i], NULL, run, &steps[i]) != 0)
            bench_die("%s", "pthread_create failed");
    uint64_t total = 0;
    for (unsigned long long i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        total += steps[i];
    }
    printf("metric steps_per_s %.1f steps/s threads=%llu work_us=%llu launches=%llu sched=%s\n",
           (double)total * 1e9 / (double)window_ns, threads, work_us, launches, sched);
    CK(cuModuleUnload(mod));
    return 0;
}
