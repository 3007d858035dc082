/* callbench: the cost of single driver calls and the bandwidth of large copies, on one
 * stream of one process. Prints one line per metric, `metric <name> <value> <unit>`, and
 * comment lines starting with `#`. The same binary runs natively, under native MPS and
 * under mpsshim (LD_PRELOAD=libmpsshim.so); bench/README.md says what each figure means.
 *
 * usage: callbench [--quick] [METRIC...]   (no METRIC: all of them, in the order below)
 * Any failed driver call prints its error name and exits 1. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Median of n samples in nanoseconds (sorts them), in microseconds. */
static double median_us(uint64_t *ns, size_t n)
{
    return bench_median_ns(ns, n) / 1e3;
}

static uint64_t *samples(size_t n)
{
    uint64_t *p = malloc(n * sizeof *p);
    if (!p) bench_die("out of host memory (%s)", "samples");
    return p;
}

static void metric(const char *name, double value, const char *unit)
{
    printf("metric %s %.*f %s\n", name, strcmp(unit, "us") == 0 ? 3 : 2, value, unit);
    fflush(stdout);
}

/* Everything the measurements share. */
struct bench {
    int quick;
    CUstream stream;
    CUfunction empty;
};

static void launch_empty(const struct bench *b)
{
    CK(cuLaunchKernel(b->empty, 1, 1, 1, 32, 1, 1, 0, b->stream, NULL, NULL));
}

/* Back-to-back launches, one synchronize at the end: the submission cost per launch. */
static void m_launch_async(struct bench *b)
{
    /* The median of 7 batches: one batch swings by 2x with the GPU's clocks (seen on the
     * H100 machine), a median of several does not. */
    int n = b->quick ? 2000 : 20000, warm = b->quick ? 100 : 1000, batches = b->quick ? 3 : 7;
    uint64_t *s = samples((size_t)batches);
    for (int i = 0; i < warm; i++)
        launch_empty(b);
    CK(cuStreamSynchronize(b->stream));
    for (int k = 0; k < batches; k++) {
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < n; i++)
            launch_empty(b);
        CK(cuStreamSynchronize(b->stream));
        s[k] = (bench_now_ns() - t0) / (uint64_t)n;
    }
    metric("launch_async_us", median_us(s, (size_t)batches), "us");
    free(s);
}

/* One launch then a synchronize, each round trip timed: the latency of a tiny kernel. */
/* ctx: the context synchronised (cuCtxSynchronize, as cudaDeviceSynchronize does), not the
 * stream. */
static void m_launch_sync(struct bench *b, int ctx)
{
    int n = b->quick ? 200 : 2000, warm = n / 20;
    uint64_t *s = samples((size_t)n);
    for (int i = 0; i < warm + n; i++) {
        uint64_t t0 = bench_now_ns();
        launch_empty(b);
        CK(ctx ? cuCtxSynchronize() : cuStreamSynchronize(b->stream));
        if (i >= warm) s[i - warm] = bench_now_ns() - t0;
    }
    metric(ctx ? "launch_ctxsync_us" : "launch_sync_us", median_us(s, (size_t)n), "us");
    free(s);
}

/* cuStreamQuery on a stream with nothing in flight. */
static void m_stream_query(struct bench *b)
{
    int n = b->quick ? 2000 : 20000, warm = n / 20;
    uint64_t *s = samples((size_t)n);
    CK(cuStreamSynchronize(b->stream));
    for (int i = 0; i < warm + n; i++) {
        uint64_t t0 = bench_now_ns();
        CK(cuStreamQuery(b->stream));
        if (i >= warm) s[i - warm] = bench_now_ns() - t0;
    }
    metric("stream_query_us", median_us(s, (size_t)n), "us");
    free(s);
}

/* A 4-byte synchronous copy from or to pageable (malloc'd) memory. */
static void m_memcpy_4b(struct bench *b, int htod)
{
    int n = b->quick ? 500 : 5000, warm = n / 20;
    uint64_t *s = samples((size_t)n);
    uint32_t *host = malloc(sizeof *host);
    if (!host) bench_die("out of host memory (%s)", "4-byte buffer");
    *host = 0x12345678u;
    CUdeviceptr dev;
    CK(cuMemAlloc(&dev, sizeof *host));
    CK(cuMemcpyHtoD(dev, host, sizeof *host)); /* so that DtoH reads the value back */
    for (int i = 0; i < warm + n; i++) {
        uint64_t t0 = bench_now_ns();
        if (htod)
            CK(cuMemcpyHtoD(dev, host, sizeof *host));
        else
            CK(cuMemcpyDtoH(host, dev, sizeof *host));
        if (i >= warm) s[i - warm] = bench_now_ns() - t0;
    }
    if (*host != 0x12345678u) bench_die("4-byte copy read back a wrong value%s", "");
    CK(cuMemFree(dev));
    free(host);
    metric(htod ? "memcpy_4b_htod_us" : "memcpy_4b_dtoh_us", median_us(s, (size_t)n), "us");
    free(s);
}

/* cuMemAlloc of `bytes` and its cuMemFree, on an idle device, in pairs: the median pair.
 * (A server's arena, MPSSHIM_DEVICE_VMM=1, maps memory where the driver hands out its own.) */
static void m_alloc_free(struct bench *b, size_t bytes, const char *name)
{
    int n = b->quick ? 50 : 500, warm = n / 10;
    uint64_t *s = samples((size_t)n);
    for (int i = 0; i < warm + n; i++) {
        CUdeviceptr dev;
        uint64_t t0 = bench_now_ns();
        CK(cuMemAlloc(&dev, bytes));
        CK(cuMemFree(dev));
        if (i >= warm) s[i - warm] = bench_now_ns() - t0;
    }
    metric(name, median_us(s, (size_t)n), "us");
    free(s);
}

/* Best bandwidth of 5 synchronous copies of `bytes` (after one warm-up), in GB/s (1e9 B). */
static double copy_gbps(void *host, CUdeviceptr dev, size_t bytes, int htod)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 6; i++) {
        uint64_t t0 = bench_now_ns();
        if (htod)
            CK(cuMemcpyHtoD(dev, host, bytes));
        else
            CK(cuMemcpyDtoH(host, dev, bytes));
        uint64_t t = bench_now_ns() - t0;
        if (i > 0 && t < best) best = t;
    }
    return (double)bytes / (double)best; /* bytes per ns = GB/s */
}

/* HtoD and/or DtoH bandwidth from malloc'd (pinned == 0) or cuMemHostAlloc'd memory. */
static void m_bandwidth(struct bench *b, int pinned, int want_htod, int want_dtoh)
{
    size_t bytes = (size_t)(b->quick ? 32 : 256) << 20;
    void *host;
    if (pinned) {
        CK(cuMemHostAlloc(&host, bytes, 0));
    } else {
        host = malloc(bytes);
        if (!host) bench_die("out of host memory (%s)", "copy buffer");
    }
    memset(host, 0x5a, bytes); /* touch every page before timing */
    CUdeviceptr dev;
    CK(cuMemAlloc(&dev, bytes));
    CK(cuMemsetD8(dev, 0xa5, bytes));
    CK(cuCtxSynchronize());
    if (want_htod)
        metric(pinned ? "htod_pinned_GBps" : "htod_pageable_GBps", copy_gbps(host, dev, bytes, 1),
               "GB/s");
    if (want_dtoh)
        metric(pinned ? "dtoh_pinned_GBps" : "dtoh_pageable_GBps", copy_gbps(host, dev, bytes, 0),
               "GB/s");
    CK(cuMemFree(dev));
    if (pinned)
        CK(cuMemFreeHost(host));
    else
        free(host);
}

enum {
    M_LAUNCH_ASYNC,
    M_LAUNCH_SYNC,
    M_LAUNCH_CTXSYNC,
    M_STREAM_QUERY,
    M_MEMCPY_4B_HTOD,
    M_MEMCPY_4B_DTOH,
    M_HTOD_PAGEABLE,
    M_DTOH_PAGEABLE,
    M_HTOD_PINNED,
    M_DTOH_PINNED,
    M_ALLOC_FREE_4K,
    M_ALLOC_FREE_64M,
    NMETRICS
};
static const char *const metric_names[NMETRICS] = {
    [M_LAUNCH_ASYNC] = "launch_async_us",     [M_LAUNCH_SYNC] = "launch_sync_us",
    [M_LAUNCH_CTXSYNC] = "launch_ctxsync_us", [M_STREAM_QUERY] = "stream_query_us",
    [M_MEMCPY_4B_HTOD] = "memcpy_4b_htod_us", [M_MEMCPY_4B_DTOH] = "memcpy_4b_dtoh_us",
    [M_HTOD_PAGEABLE] = "htod_pageable_GBps", [M_DTOH_PAGEABLE] = "dtoh_pageable_GBps",
    [M_HTOD_PINNED] = "htod_pinned_GBps",     [M_DTOH_PINNED] = "dtoh_pinned_GBps",
    [M_ALLOC_FREE_4K] = "alloc_free_4k_us",   [M_ALLOC_FREE_64M] = "alloc_free_64m_us",
};

static void usage(void)
{
    fprintf(stderr, "usage: callbench [--quick] [METRIC...]\nmetrics:");
    for (int i = 0; i < NMETRICS; i++)
        fprintf(stderr, " %s", metric_names[i]);
    fprintf(stderr, "\n");
    exit(2);
}

int main(int argc, char **argv)
{
    bench_prog = "callbench";
    struct bench b = {0};
    int want[NMETRICS] = {0}, any = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            b.quick = 1;
            continue;
        }
        int k = 0;
        while (k < NMETRICS && strcmp(argv[i], metric_names[k]) != 0)
            k++;
        if (k == NMETRICS) usage();
        want[k] = any = 1;
    }
    for (int k = 0; k < NMETRICS && !any; k++)
        want[k] = 1;

    CUdevice dev;
    CUcontext ctx;
    char name[256] = "?";
    int drv = 0;
    CK(cuInit(0));
    CK(cuDriverGetVersion(&drv));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetName(name, sizeof name, dev));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    printf("# callbench: device 0 %s, driver API %d, pid %d%s\n", name, drv, (int)getpid(),
           b.quick ? ", quick" : "");

    CUmodule mod;
    b.empty = bench_load_function("MPSSHIM_TEST_KERNELS", "../tests/", "kernels.ptx",
                                  "empty_kernel", &mod);
    CK(cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
    /* First launch outside any timing: lazy module loading happens here. */
    launch_empty(&b);
    CK(cuStreamSynchronize(b.stream));

    for (int k = 0; k < NMETRICS; k++) {
        if (!want[k]) continue;
        bench_step = metric_names[k];
        switch (k) {
        case M_LAUNCH_ASYNC:
            m_launch_async(&b);
            break;
        case M_LAUNCH_SYNC:
            m_launch_sync(&b, 0);
            break;
        case M_LAUNCH_CTXSYNC:
            m_launch_sync(&b, 1);
            break;
        case M_STREAM_QUERY:
            m_stream_query(&b);
            break;
        case M_MEMCPY_4B_HTOD:
            m_memcpy_4b(&b, 1);
            break;
        case M_MEMCPY_4B_DTOH:
            m_memcpy_4b(&b, 0);
            break;
        case M_HTOD_PAGEABLE: /* each pair of directions shares one buffer */
            m_bandwidth(&b, 0, 1, want[M_DTOH_PAGEABLE]);
            want[M_DTOH_PAGEABLE] = 0;
            break;
        case M_DTOH_PAGEABLE:
            m_bandwidth(&b, 0, 0, 1);
            break;
        case M_HTOD_PINNED:
            m_bandwidth(&b, 1, 1, want[M_DTOH_PINNED]);
            want[M_DTOH_PINNED] = 0;
            break;
        case M_DTOH_PINNED:
            m_bandwidth(&b, 1, 0, 1);
            break;
        case M_ALLOC_FREE_4K:
            m_alloc_free(&b, 4096, metric_names[k]);
            break;
        case M_ALLOC_FREE_64M:
            m_alloc_free(&b, 64u << 20, metric_names[k]);
            break;
        }
    }
    bench_step = "teardown";
    CK(cuStreamDestroy(b.stream));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
