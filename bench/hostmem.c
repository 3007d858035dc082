/* hostmem: small and middle-sized copies between the device and host memory of each kind a
 * process may hand the driver, natively, and in each way a copy may be issued. Through
 * mpsshim a client's pinned memory is a memfd the server maps and registers
 * (interpose/memory.c), and its synchronous copy is the server's cuMemcpy*Async on a stream
 * of its own followed by a reply; natively cuMemHostAlloc's memory and the legacy stream's
 * synchronous copy. This says which of those differences costs time (bench/NOTES.md,
 * "Host memory kinds").
 *
 * usage: hostmem [--reps N]
 * Prints `metric <kind>_<way>_<dir>_<size>_us`, the median of N copies (after 10 untimed):
 * kind hostalloc (cuMemHostAlloc), anon (mmap'd anonymous memory, MADV_NOHUGEPAGE, then
 * cuMemHostRegister), anonhuge (the same with MADV_HUGEPAGE), memfd (a shared mapping of a
 * memfd, registered), memfdhuge (the same with MADV_HUGEPAGE, which tmpfs takes only where
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled allows); way sync (cuMemcpyHtoD /
 * cuMemcpyDtoH) or async (cuMemcpy*Async on a non-blocking stream, then
 * cuStreamSynchronize); dir htod or dtoh; size 4k 64k 256k 1m 4m. */
#define _GNU_SOURCE
#include <cuda.h>

#include "bench/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_BYTES (4u << 20)
#define REGION (8u << 20) /* 2 MiB aligned inside it */

enum kind { K_HOSTALLOC, K_ANON, K_ANONHUGE, K_MEMFD, K_MEMFDHUGE, NKINDS };
static const char *const kind_names[NKINDS] = {"hostalloc", "anon", "anonhuge", "memfd",
                                               "memfdhuge"};

/* A 2 MiB aligned buffer of MAX_BYTES of the kind, registered or allocated by the driver;
 * *region: the mapping to release. */
static void *host_buffer(enum kind k, void **region)
{
    *region = NULL;
    if (k == K_HOSTALLOC) {
        void *p;
        CK(cuMemHostAlloc(&p, MAX_BYTES, 0));
        return p;
    }
    int fd = -1;
    void *r;
    if (k == K_MEMFD || k == K_MEMFDHUGE) {
        fd = memfd_create("hostmem", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, REGION) != 0) bench_die("memfd: %s", "failed");
        r = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {
        r = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (r == MAP_FAILED) bench_die("mmap: %s", "failed");
    if (fd >= 0) close(fd);
    *region = r;
    uint8_t *p = (uint8_t *)(((uintptr_t)r + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
    int advice = k == K_ANON ? MADV_NOHUGEPAGE : MADV_HUGEPAGE;
    if (k != K_MEMFD && madvise(p, MAX_BYTES, advice) != 0)
        printf("# %s: madvise refused\n", kind_names[k]);
    memset(p, 1, MAX_BYTES); /* the pages exist before registering */
    CK(cuMemHostRegister(p, MAX_BYTES, 0));
    return p;
}

static void host_free(enum kind k, void *p, void *region)
{
    if (k == K_HOSTALLOC) {
        CK(cuMemFreeHost(p));
        return;
    }
    CK(cuMemHostUnregister(p));
    munmap(region, REGION);
}

/* AnonHugePages and ShmemPmdMapped of this process's mapping that holds p, in kB, from
 * /proc/self/smaps: how the kernel backed it. */
static long huge_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        long v;
        if (in && (sscanf(line, "AnonHugePages: %ld kB", &v) == 1 ||
                   sscanf(line, "ShmemPmdMapped: %ld kB", &v) == 1)) {
            kb = kb < 0 ? v : kb + v;
        }
    }
    fclose(f);
    return kb;
}

static void copy(int async, int htod, CUdeviceptr dev, void *host, size_t n, CUstream st)
{
    if (!async) {
        if (htod)
            CK(cuMemcpyHtoD(dev, host, n));
        else
            CK(cuMemcpyDtoH(host, dev, n));
        return;
    }
    if (htod)
        CK(cuMemcpyHtoDAsync(dev, host, n, st));
    else
        CK(cuMemcpyDtoHAsync(host, dev, n, st));
    CK(cuStreamSynchronize(st));
}

static void usage(void)
{
    fprintf(stderr, "usage: hostmem [--reps N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    bench_prog = "hostmem";
    int reps = 400;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0)
            reps = (int)bench_num_arg(argc, argv, i++, 1, 1000000, usage);
        else
            usage();
    }
    CUdevice d;
    bench_use_device(0, &d);
    CUstream st;
    CUdeviceptr dev;
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&dev, MAX_BYTES));
    static const size_t sizes[] = {4u << 10, 64u << 10, 256u << 10, 1u << 20, 4u << 20};
    static const char *const size_names[] = {"4k", "64k", "256k", "1m", "4m"};
    uint64_t *s = malloc((size_t)reps * sizeof *s);
    if (!s) bench_die("out of host memory (%s)", "samples");
    for (int k = 0; k < NKINDS; k++) {
        void *region, *host = host_buffer((enum kind)k, &region);
        printf("# %s: %ld kB of huge pages\n", kind_names[k], huge_kb(host));
        for (int async = 0; async < 2; async++)
            for (int htod = 1; htod >= 0; htod--)
                for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
                    for (int i = 0; i < 10; i++)
                        copy(async, htod, dev, host, sizes[z], st);
                    for (int i = 0; i < reps; i++) {
                        uint64_t t0 = bench_now_ns();
                        copy(async, htod, dev, host, sizes[z], st);
                        s[i] = bench_now_ns() - t0;
                    }
                    printf("metric %s_%s_%s_%s_us %.3f us\n", kind_names[k],
                           async ? "async" : "sync", htod ? "htod" : "dtoh", size_names[z],
                           bench_median_ns(s, (size_t)reps) / 1e3);
                }
        fflush(stdout);
        host_free((enum kind)k, host, region);
    }
    free(s);
    CK(cuMemFree(dev));
    CK(cuStreamDestroy(st));
    printf("PASS hostmem\n");
    return 0;
}
