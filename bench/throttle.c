/* throttle: one client of the SM-share and memory-limit figures (bench/throttle.sh). Prints
 * the SM count the device reports to this process, optionally allocates some MiB in chunks
 * and says whether and where it got CUDA_ERROR_OUT_OF_MEMORY, then runs a compute-bound
 * kernel that fills the GPU (tests/kernels/throttle.cu: every block the same FMA work) N
 * times and prints the kernel phase's time (host clock and events) and how many distinct SMs
 * its blocks ran on (%smid). A client held to a share of the SMs takes about 1/share as long.
 *
 * usage: throttle [--launches N] [--blocks B] [--iters I] [--alloc MIB [--chunk MIB]]
 *                 [--barrier FILE --procs P] [--kernel burn_fma|delay_set]
 * --barrier: the P processes given the same (new) FILE wait for each other after their setup
 * and warm-up, so that their allocations and kernels start together; they meet again after
 * allocating, so that every one holds its memory while the others allocate theirs.
 * --kernel delay_set (tests/kernels.ptx; block 0 sleeps I ns) is for the CPU test driver,
 * which cannot run burn_fma: it tests the plumbing only and sees no SMs.
 *
 * Output: `sms_reported N`, `alloc ...` lines, `metric NAME VALUE UNIT` lines (wall_s,
 * event_s, sms_seen, mem_free_mib, mem_total_mib, alloc_mib, alloc_oom) and `# window_ns T0 T1`
 * (CLOCK_MONOTONIC). */
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

#define SEEN_WORDS 32 /* THROTTLE_SEEN_WORDS of tests/kernels/throttle.cu */
#define MAX_CHUNKS 4096

static void usage(void)
{
    fprintf(stderr, "usage: throttle [--launches N] [--blocks B] [--iters I] "
                    "[--alloc MIB [--chunk MIB]] [--barrier FILE --procs P] "
                    "[--kernel burn_fma|delay_set]\n");
    exit(2);
}

/* The numeric value of option argv[i + 1], from lo to max. */
#define num_arg(argc, argv, i, lo, hi) bench_num_arg(argc, argv, i, lo, hi, usage)

static const char *err_name(CUresult r)
{
    const char *name = NULL;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "?";
    return name;
}

/* Allocates `mib` MiB in chunks of `chunk` MiB into ptrs (*n of them) until done or an
 * allocation fails; prints what it got. Returns the failing call's result (or success). */
static CUresult alloc_phase(unsigned long long mib, unsigned long long chunk, CUdeviceptr *ptrs,
                            unsigned *n)
{
    unsigned long long got = 0;
    CUresult r = CUDA_SUCCESS;
    size_t free_b = 0, total_b = 0;
    *n = 0;
    /* What the device says is free and in all, before: a limit may show here (MPS's does). */
    CK(cuMemGetInfo(&free_b, &total_b));
    printf("metric mem_free_mib %zu MiB\n", free_b >> 20);
    printf("metric mem_total_mib %zu MiB\n", total_b >> 20);
    while (got < mib && *n < MAX_CHUNKS) {
        unsigned long long want = mib - got < chunk ? mib - got : chunk;
        r = cuMemAlloc(&ptrs[*n], (size_t)want << 20);
        if (r != CUDA_SUCCESS) {
            printf("alloc: chunk %u (%llu MiB, %llu MiB allocated before it) returned %s\n", *n + 1,
                   want, got, err_name(r));
            break;
        }
        /* Touch it, so that a limit enforced only on use would show here too. */
        CK(cuMemsetD8(ptrs[*n], 0x5a, (size_t)want << 20));
        ++*n;
        got += want;
    }
    CK(cuCtxSynchronize());
    if (r == CUDA_SUCCESS)
        printf("alloc: all %llu MiB in %u chunk(s) of at most %llu MiB\n", got, *n, chunk);
    printf("metric alloc_mib %llu MiB\n", got);
    printf("metric alloc_oom %d bool\n", r == CUDA_ERROR_OUT_OF_MEMORY);
    return r;
}

int main(int argc, char **argv)
{
    bench_prog = "throttle";
    unsigned launches = 10, blocks = 16896, procs = 1;
    unsigned long long iters = 60000, alloc_mib = 0, chunk_mib = 256;
    const char *kernel = "burn_fma", *barrier = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--launches") == 0)
            launches = (unsigned)num_arg(argc, argv, i++, 0, 100000);
        else if (strcmp(argv[i], "--blocks") == 0)
            blocks = (unsigned)num_arg(argc, argv, i++, 1, 1u << 30);
        else if (strcmp(argv[i], "--iters") == 0)
            iters = num_arg(argc, argv, i++, 1, 1ull << 40);
        else if (strcmp(argv[i], "--alloc") == 0)
            alloc_mib = num_arg(argc, argv, i++, 0, 1ull << 30);
        else if (strcmp(argv[i], "--chunk") == 0)
            chunk_mib = num_arg(argc, argv, i++, 1, 1ull << 30);
        else if (strcmp(argv[i], "--procs") == 0)
            procs = (unsigned)num_arg(argc, argv, i++, 1, 4096);
        else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
            kernel = argv[++i];
        else if (strcmp(argv[i], "--barrier") == 0 && i + 1 < argc)
            barrier = argv[++i];
        else
            usage();
    }
    int burn = strcmp(kernel, "burn_fma") == 0;
    if (!burn && strcmp(kernel, "delay_set") != 0) usage();
    if (alloc_mib / chunk_mib >= MAX_CHUNKS) usage();

    CUdevice dev;
    int sms;
    bench_use_device(0, &dev);
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    unsigned one = 1, threads = burn ? 256 : 32, grid = burn ? blocks : 1;
    printf("# throttle: pid %d, %u launches of %s, %u blocks x %u threads, %s %llu, "
           "alloc %llu MiB in %llu MiB chunks, %u processes\n",
           (int)getpid(), launches, kernel, grid, threads, burn ? "iters" : "ns", iters, alloc_mib,
           chunk_mib, procs);
    printf("sms_reported %d\n", sms);
    fflush(stdout);

    /* The cubin: no JIT, so every mode runs the same machine code. */
    CUmodule mod;
    CUfunction f = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/",
                                       burn ? "throttle.sm_90.cubin" : "kernels.ptx", kernel, &mod);
    CUstream stream;
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUevent ev0, ev1;
    CK(cuEventCreate(&ev0, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&ev1, CU_EVENT_DEFAULT));
    /* Only when there are kernels to run: an allocation-only run holds nothing but its
     * chunks, so that a memory limit shows at exactly limit / chunk chunks. */
    CUdeviceptr seen = 0, sink = 0;
    if (launches) {
        CK(cuMemAlloc(&seen, SEEN_WORDS * sizeof(unsigned)));
        CK(cuMemAlloc(&sink, sizeof(float)));
        CK(cuMemsetD32(seen, 0, SEEN_WORDS));
    }
    void *args[] = {&seen, burn ? (void *)&iters : (void *)&one,
                    burn ? (void *)&sink : (void *)&iters};

    /* One launch outside the timing: lazy loading, and clocks up from idle. Then the bitmap
     * is cleared, so that it holds the timed launches' SMs alone. */
    bench_step = "warm-up";
    if (launches) {
        CK(cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, 0, stream, args, NULL));
        CK(cuStreamSynchronize(stream));
        CK(cuMemsetD32(seen, 0, SEEN_WORDS));
        CK(cuCtxSynchronize());
    }
    bench_step = "barrier";
    if (barrier) bench_barrier(barrier, procs);

    CUresult alloc_rc = CUDA_SUCCESS;
    CUdeviceptr *chunks = NULL;
    unsigned nchunks = 0;
    if (alloc_mib) {
        bench_step = "alloc";
        chunks = calloc(MAX_CHUNKS, sizeof(*chunks));
        if (!chunks) bench_die("%s", "out of host memory");
        alloc_rc = alloc_phase(alloc_mib, chunk_mib, chunks, &nchunks);
        fflush(stdout);
        /* Every one holds what it got until all have allocated. */
        if (barrier) bench_barrier(barrier, 2 * procs);
    }

    bench_step = "kernels";
    if (launches) {
        uint64_t t0 = bench_now_ns();
        CK(cuEventRecord(ev0, stream));
        for (unsigned i = 0; i < launches; i++)
            CK(cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, 0, stream, args, NULL));
        CK(cuEventRecord(ev1, stream));
        CK(cuStreamSynchronize(stream));
        uint64_t t1 = bench_now_ns();
        float ms = 0;
        CK(cuEventElapsedTime(&ms, ev0, ev1));
        unsigned bits[SEEN_WORDS];
        CK(cuMemcpyDtoH(bits, seen, sizeof bits));
        unsigned distinct = 0;
        for (unsigned i = 0; i < SEEN_WORDS; i++)
            distinct += (unsigned)__builtin_popcount(bits[i]);
        printf("# window_ns %llu %llu\n", (unsigned long long)t0, (unsigned long long)t1);
        printf("metric wall_s %.6f s\n", (double)(t1 - t0) / 1e9);
        printf("metric event_s %.6f s\n", ms / 1e3);
        if (burn)
            printf("metric sms_seen %u SMs\n", distinct);
        else
            printf("metric sms_seen n/a SMs\n"); /* delay_set records no %smid */
    }

    bench_step = "teardown";
    for (unsigned i = 0; i < nchunks; i++)
        CK(cuMemFree(chunks[i]));
    free(chunks);
    if (launches) {
        CK(cuMemFree(seen));
        CK(cuMemFree(sink));
    }
    CK(cuEventDestroy(ev0));
    CK(cuEventDestroy(ev1));
    CK(cuStreamDestroy(stream));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    /* An allocation error other than running out of memory is a failure. */
    return alloc_rc == CUDA_SUCCESS || alloc_rc == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}
