/* copysweep: synchronous copy bandwidth by size, host to device and back, from pageable
 * (malloc'd), pinned (cuMemHostAlloc'd) and registered (malloc'd, then cuMemHostRegister'd)
 * memory, on one process. For each size from 4 KiB to 256 MiB (x4 each step) and each of the
 * six kinds, one warm-up copy, then n timed copies (64 MiB worth, at least 5 and at most
 * 200); prints their median as
 * `metric copy_<htod|dtoh>_<pageable|pinned|registered>_<bytes> <GB/s> GB/s` (GB = 1e9 bytes). The
 * same binary runs natively, under native MPS and under mpsshim; bench/run.sh runs it
 * several times, each run one sample of every point.
 *
 * usage: copysweep [--max MIB] [--max-kib KIB] [--kind pageable|pinned|registered]
 *   --max: the largest size, a power of 4 times 4 KiB (default 256 MiB); --max-kib the same
 *   in KiB (4: the 4 KiB copies alone, as `make STAMPS=1`'s notes want them); --kind one kind
 *   of host memory only (default all three)
 * Any failed driver call prints its error name and exits 1. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIN_BYTES ((size_t)4 << 10)
#define WORTH ((size_t)64 << 20) /* bytes timed per point, at least */

static void usage(void)
{
    fprintf(stderr,
            "usage: copysweep [--max MIB] [--max-kib KIB] [--kind pageable|pinned|registered]\n");
    exit(2);
}

/* The median bandwidth, GB/s, of n timed copies of `bytes` (after one warm-up). */
static double median_gbps(void *host, CUdeviceptr dev, size_t bytes, int htod, unsigned n)
{
    uint64_t t[200];
    for (unsigned i = 0; i <= n; i++) {
        uint64_t t0 = bench_now_ns();
        if (htod)
            CK(cuMemcpyHtoD(dev, host, bytes));
        else
            CK(cuMemcpyDtoH(host, dev, bytes));
        if (i > 0) t[i - 1] = bench_now_ns() - t0;
    }
    double ns = bench_median_ns(t, n);
    return (double)bytes / ns; /* bytes per ns = GB/s */
}

/* The kinds of host memory copied from and to. */
enum kind { PAGEABLE, PINNED, REGISTERED };
static const char *const kind_name[] = {"pageable", "pinned", "registered"};

/* Every size and direction from one kind of host memory: malloc'd, cuMemHostAlloc'd, or
 * malloc'd and then cuMemHostRegister'd (how MPI libraries pin a program's own buffers). */
static void sweep(enum kind kind, size_t max, CUdeviceptr dev)
{
    void *host = NULL;
    if (kind == PINNED) {
        CK(cuMemHostAlloc(&host, max, 0));
    } else if (posix_memalign(&host, 4096, max) != 0) {
        bench_die("out of host memory (%s)", "copy buffer");
    }
    memset(host, 0x5a, max); /* touch every page before timing */
    if (kind == REGISTERED) CK(cuMemHostRegister(host, max, 0));
    for (size_t bytes = MIN_BYTES; bytes <= max; bytes *= 4) {
        size_t n = WORTH / bytes;
        n = n < 5 ? 5 : n > 200 ? 200 : n;
        for (int htod = 1; htod >= 0; htod--) {
            double g = median_gbps(host, dev, bytes, htod, (unsigned)n);
            printf("metric copy_%s_%s_%zu %.3f GB/s\n", htod ? "htod" : "dtoh", kind_name[kind],
                   bytes, g);
        }
        fflush(stdout);
    }
    if (kind == PINNED) {
        CK(cuMemFreeHost(host));
        return;
    }
    if (kind == REGISTERED) CK(cuMemHostUnregister(host));
    free(host);
}

int main(int argc, char **argv)
{
    bench_prog = "copysweep";
    size_t max = (size_t)256 << 20;
    int only = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--max") == 0) {
            max = (size_t)bench_num_arg(argc, argv, i++, 1, 1 << 16, usage) << 20;
        } else if (strcmp(argv[i], "--max-kib") == 0) {
            max = (size_t)bench_num_arg(argc, argv, i++, 4, 1 << 26, usage) << 10;
        } else if (strcmp(argv[i], "--kind") == 0 && i + 1 < argc) {
            for (int k = PAGEABLE; k <= REGISTERED; k++)
                if (strcmp(argv[i + 1], kind_name[k]) == 0) only = k;
            if (only < 0) usage();
            i++;
        } else {
            usage();
        }
    }
    /* Only sizes of the sweep: 4 KiB times a power of 4. */
    size_t top = MIN_BYTES;
    while (top * 4 <= max)
        top *= 4;

    CUdevice dev;
    bench_use_device(0, &dev);
    printf("# copysweep: pid %d, 4 KiB to %zu KiB\n", (int)getpid(), top >> 10);
    CUdeviceptr buf;
    CK(cuMemAlloc(&buf, top));
    CK(cuMemsetD8(buf, 0xa5, top));
    CK(cuCtxSynchronize());
    for (enum kind k = PAGEABLE; k <= REGISTERED; k++) {
        if (only >= 0 && (int)k != only) continue;
        bench_step = kind_name[k];
        sweep(k, top, buf);
    }
    bench_step = "teardown";
    CK(cuMemFree(buf));
    CK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
