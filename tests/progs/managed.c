/* managed: cuMemAllocManaged memory is one buffer at one address for the CPU and the GPU
 * (CPU writes, a kernel reads and writes, the CPU reads after a sync), copies and memsets on
 * it, pointer attributes, prefetches and advice answered by cuMemRangeGetAttribute(s),
 * stream attachment, cuMemFree, and the errors of memory that is not managed. With --acc,
 * an OpenACC-style loop: every array managed, touched from both sides many times. Same
 * output natively and through the shim; so with --threads, eight host threads walking their
 * slices of one array after each kernel. With --migrating (through the shim only), the
 * pages' protection follows the migration (interpose/migrate.c). */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (1u << 20)
#define N (BYTES / 4)

static int range_int(CUmem_range_attribute a, CUdeviceptr p, size_t n)
{
    int v = 12345;
    CHECK(cuMemRangeGetAttribute(&v, sizeof(v), a, p, n));
    return v;
}

static void inc(CUfunction f, CUdeviceptr p, unsigned long long n, CUstream s)
{
    void *params[] = {&p, &n};
    CHECK(cuLaunchKernel(f, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, s, params, NULL));
}

/* Eight managed arrays, 40 rounds of CPU and GPU updates each, checked every round. */
static void acc(CUfunction f)
{
    enum { ARRAYS = 8, ROUNDS = 40, LEN = 4096 };
    CUdeviceptr a[ARRAYS];
    for (int i = 0; i < ARRAYS; i++) {
        CHECK(cuMemAllocManaged(&a[i], LEN * 4, CU_MEM_ATTACH_GLOBAL));
        memset((void *)(uintptr_t)a[i], 0, LEN * 4);
    }
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < ARRAYS; i++) {
            unsigned *h = (unsigned *)(uintptr_t)a[i];
            for (int k = 0; k < LEN; k++)
                h[k] += (unsigned)i; /* CPU side */
            inc(f, a[i], LEN, NULL); /* GPU side */
        }
        CHECK(cuCtxSynchronize());
        for (int i = 0; i < ARRAYS; i++) {
            const unsigned *h = (const unsigned *)(uintptr_t)a[i];
            unsigned want = (unsigned)(r + 1) * ((unsigned)i + 1);
            for (int k = 0; k < LEN; k++)
                REQUIRE(h[k] == want, "round %d array %d [%d] = %u, want %u", r, i, k, h[k], want);
        }
    }
    for (int i = 0; i < ARRAYS; i++)
        CHECK(cuMemFree(a[i]));
    t_ok("%d managed arrays, %d rounds of CPU and GPU updates, all coherent", ARRAYS, ROUNDS);
}

/* The protection of the page at p in this process: "rw", "r-" or "--" (/proc/self/maps). */
static const char *perms_at(CUdeviceptr p)
{
    static char out[3];
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    snprintf(out, sizeof(out), "??");
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        char perms[5];
        if (sscanf(line, "%llx-%llx %4s", &lo, &hi, perms) == 3 && p >= lo && p < hi) {
            snprintf(out, sizeof(out), "%.2s", perms);
            break;
        }
    }
    if (f) fclose(f);
    return out;
}

/* A host function that holds its stream until the gate opens (10 s at most). */
struct gate {
    atomic_int open, timed_out;
};

static void CUDA_CB gate_wait(void *arg)
{
    struct gate *g = arg;
    for (int i = 0; i < 10000 && !atomic_load(&g->open); i++)
        usleep(1000);
    if (!atomic_load(&g->open)) atomic_store(&g->timed_out, 1);
}

/* --migrating (through the shim only): the pages follow the chunks' owner
 * (interpose/migrate.c): read-only when allocated, writable once written, no access while the
 * device owns them (after any work), read-only once read again, writable once written. */
static void migrating(CUfunction f)
{
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
    volatile unsigned *h = (volatile unsigned *)(uintptr_t)m;
    const char *want[5] = {"r-", "rw", "--", "r-", "rw"}, *got[5];
    got[0] = strdup(perms_at(m));
    h[0] = 5;
    got[1] = strdup(perms_at(m));
    inc(f, m, N, NULL);
    got[2] = strdup(perms_at(m));
    CHECK(cuCtxSynchronize());
    REQUIRE(h[0] == 6, "the kernel's write: %u", h[0]);
    got[3] = strdup(perms_at(m));
    h[0] = 7;
    got[4] = strdup(perms_at(m));
    for (int i = 0; i < 5; i++)
        REQUIRE(strcmp(got[i], want[i]) == 0, "step %d: pages %s, want %s", i, got[i], want[i]);
    for (int i = 0; i < 5; i++)
        free((void *)got[i]);
    CHECK(cuMemFree(m));
    /* Brought to the host by a prefetch, then written in order: the writes are granted in
     * runs doubling as faults follow each other (1 chunk of 64 KiB, then 2: the third chunk
     * is writable before it is written, the fourth not yet). A fresh allocation: the one
     * above was read, then written, so its pulls come writable at once. */
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
    h = (volatile unsigned *)(uintptr_t)m;
    inc(f, m, N, NULL);
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST};
    CHECK(cuMemPrefetchAsync_v2(m, BYTES, host, 0, NULL));
    CHECK(cuCtxSynchronize());
    const unsigned chunk = (64u << 10) / sizeof(unsigned);
    REQUIRE(strcmp(perms_at(m), "r-") == 0, "after the prefetch to the host: %s", perms_at(m));
    h[0] = 8;
    h[chunk] = 9;
    REQUIRE(strcmp(perms_at(m + 2 * 64 * 1024), "rw") == 0 &&
                strcmp(perms_at(m + 3 * 64 * 1024), "r-") == 0,
            "after writes to chunks 0 and 1: chunk 2 %s, chunk 3 %s",
            strdup(perms_at(m + 2 * 64 * 1024)), perms_at(m + 3 * 64 * 1024));
    REQUIRE(h[1] == 1 && h[chunk + 1] == 1, "the prefetched bytes: %u %u", h[1], h[chunk + 1]);
    CHECK(cuMemFree(m));
    t_ok("managed pages migrate: read-only, written, the device's, read, written; written in "
         "runs after a prefetch");
    /* A prefetch to the host on a stream is queued, not waited for: it returns while a host
     * function still holds the stream, and the stream's synchronisation makes the pages
     * readable without a fault (read-only at once, the kernel's bytes there). */
    CUstream st;
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
    h = (volatile unsigned *)(uintptr_t)m;
    inc(f, m, N, st);
    struct gate g = {0};
    CHECK(cuLaunchHostFunc(st, gate_wait, &g));
    CHECK(cuMemPrefetchAsync_v2(m, BYTES, host, 0, st));
    atomic_store(&g.open, 1);
    CHECK(cuStreamSynchronize(st));
    REQUIRE(!atomic_load(&g.timed_out), "the prefetch to the host waited for the host function");
    REQUIRE(strcmp(perms_at(m), "r-") == 0 && strcmp(perms_at(m + BYTES - 4096), "r-") == 0,
            "after the stream's synchronisation: %s", perms_at(m));
    REQUIRE(h[0] == 1 && h[N - 1] == 1, "the prefetched bytes: %u %u", h[0], h[N - 1]);
    CHECK(cuMemFree(m));
    CHECK(cuStreamDestroy(st));
    t_ok("a prefetch to the host on a stream returns at once; the stream's synchronisation "
         "makes the pages the host's");
    /* Small allocations share 2 MiB blocks by 64 KiB units (server/memory/migrate.c); a
     * freed unit is taken again, zeroed on both sides. */
    enum { SMALL = 5 };
    CUdeviceptr a[SMALL];
    for (int i = 0; i < SMALL; i++) {
        CHECK(cuMemAllocManaged(&a[i], 1000 + 20000 * i, CU_MEM_ATTACH_GLOBAL));
        memset((void *)(uintptr_t)a[i], 0x5a, 1000);
    }
    inc(f, a[2], 250, NULL);
    CHECK(cuCtxSynchronize());
    for (int i = 1; i < SMALL; i++)
        REQUIRE((a[i] & ~((2ull << 20) - 1)) == (a[0] & ~((2ull << 20) - 1)) &&
                    a[i] % (64 << 10) == 0,
                "allocation %d at %llx, the first at %llx", i, (unsigned long long)a[i],
                (unsigned long long)a[0]);
    CUdeviceptr was = a[1];
    CHECK(cuMemFree(a[1]));
    CHECK(cuMemAllocManaged(&a[1], 1000, CU_MEM_ATTACH_GLOBAL));
    const unsigned char *z = (const unsigned char *)(uintptr_t)a[1];
    REQUIRE(a[1] == was && z[0] == 0 && z[999] == 0, "reused unit at %llx (was %llx): %u %u",
            (unsigned long long)a[1], (unsigned long long)was, z[0], z[999]);
    inc(f, a[1], 250, NULL);
    CHECK(cuCtxSynchronize());
    REQUIRE(z[0] == 1 && ((const unsigned *)(uintptr_t)a[2])[0] == 0x5a5a5a5b,
            "after kernels: %u %x", z[0], ((const unsigned *)(uintptr_t)a[2])[0]);
    /* A launch whose parameter values lie in managed memory the device owns (after a
     * launch): they are read, brought to the host first, before the request is built. */
    CUdeviceptr args;
    CHECK(cuMemAllocManaged(&args, 64, CU_MEM_ATTACH_GLOBAL));
    CUdeviceptr *arg_ptr = (CUdeviceptr *)(uintptr_t)args;
    unsigned long long *arg_n = (unsigned long long *)(uintptr_t)(args + 8);
    *arg_ptr = a[3];
    *arg_n = 250;
    inc(f, a[0], 250, NULL);
    void *params[] = {arg_ptr, arg_n};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    REQUIRE(((const unsigned *)(uintptr_t)a[3])[249] == 0x5a5a5a5b,
            "the launch with parameters in managed memory: %x",
            ((const unsigned *)(uintptr_t)a[3])[249]);
    CHECK(cuMemFree(args));
    for (int i = 0; i < SMALL; i++)
        CHECK(cuMemFree(a[i]));
    t_ok("small managed allocations share a block; a freed unit is reused, zeroed; a launch's "
         "parameters in managed memory");
}

/* --threads: after each kernel, THREADS host threads walk their own slices of one managed
 * array at once, reading and updating every element (an OpenMP-style host pass): their
 * faults come together (interpose/migrate.c serves them in shared pulls). */
enum { THREADS = 8, TROUNDS = 6 };
#define TLEN (4u << 20) /* elements: 16 MiB */
struct slice {
    unsigned *h;
    unsigned round, lo, hi, bad;
};

static void *walk(void *arg)
{
    struct slice *w = arg;
    for (unsigned k = w->lo; k < w->hi; k++) {
        if (w->h[k] != 2 * w->round + 1) w->bad++;
        w->h[k]++;
    }
    return NULL;
}

static void threads(CUfunction f)
{
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, TLEN * 4ull, CU_MEM_ATTACH_GLOBAL));
    unsigned *h = (unsigned *)(uintptr_t)m;
    memset(h, 0, TLEN * 4ull);
    for (unsigned r = 0; r < TROUNDS; r++) {
        inc(f, m, TLEN, NULL); /* every element 2r -> 2r + 1 */
        CHECK(cuCtxSynchronize());
        pthread_t t[THREADS];
        struct slice w[THREADS];
        for (unsigned i = 0; i < THREADS; i++) {
            w[i] = (struct slice){.h = h, .round = r, .lo = i * (TLEN / THREADS)};
            w[i].hi = w[i].lo + TLEN / THREADS;
            REQUIRE(pthread_create(&t[i], NULL, walk, &w[i]) == 0, "thread %u", i);
        }
        for (unsigned i = 0; i < THREADS; i++) {
            pthread_join(t[i], NULL);
            REQUIRE(w[i].bad == 0, "round %u: thread %u saw %u elements wrong", r, i, w[i].bad);
        }
    }
    CHECK(cuMemFree(m));
    t_ok("%d host threads over their slices of one managed array, %d rounds with a kernel", THREADS,
         TROUNDS);
}

int main(int argc, char **argv)
{
    t_init("managed", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction incf = t_get_function(mod, "inc_u32");
    if (t_has_flag(argc, argv, "--acc")) {
        acc(incf);
        t_pass();
    }
    if (t_has_flag(argc, argv, "--threads")) {
        threads(incf);
        t_pass();
    }
    if (t_has_flag(argc, argv, "--migrating")) {
        migrating(incf);
        t_pass();
    }

    /* One buffer, one address. */
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
    unsigned *h = (unsigned *)(uintptr_t)m;
    for (unsigned i = 0; i < N; i++)
        h[i] = i;
    inc(incf, m, N, NULL);
    CHECK(cuCtxSynchronize());
    for (unsigned i = 0; i < N; i++)
        REQUIRE(h[i] == i + 1, "[%u] = %u after the kernel, want %u", i, h[i], i + 1);
    t_ok("CPU wrote, a kernel incremented, the CPU read the result at the same address");

    /* Copies and memsets name it as device memory. */
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    CHECK(cuMemcpyDtoD(d, m, BYTES));
    CHECK(cuMemsetD32(m, 7, N));
    REQUIRE(h[0] == 7 && h[N - 1] == 7, "memset: %u %u", h[0], h[N - 1]);
    CHECK(cuMemcpyDtoD(m, d, BYTES));
    REQUIRE(h[5] == 6 && h[N - 1] == N, "copy back: %u %u", h[5], h[N - 1]);
    t_ok("memset and device copies on managed memory");

    /* Pointer attributes. */
    unsigned managed = 0, type = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m + 64));
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m + 64));
    CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, m + 64));
    CHECK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, m + 64));
    printf("managed: is_managed %u, memory type %s, range start %s, size %zu\n", managed,
           type == CU_MEMORYTYPE_DEVICE ? "device"
           : type == CU_MEMORYTYPE_HOST ? "host"
                                        : "?",
           start == m ? "= base" : "!= base", size);
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    REQUIRE(managed == 0, "device memory says managed");
    CUdeviceptr base;
    CHECK(cuMemGetAddressRange(&base, &size, m + 100));
    REQUIRE(base == m && size == BYTES, "address range %llx %zu", (unsigned long long)base, size);
    t_ok("pointer attributes: managed, device memory type, its range");

    /* Prefetch, ordered on a stream; advice; what the range attributes answer. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    printf("managed: last prefetch before any %d\n",
           range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, BYTES));
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CHECK(cuMemPrefetchAsync(m, BYTES, here, 0, s));
    inc(incf, m, N, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(h[0] == 2 && h[N - 1] == N + 1, "after prefetch + kernel: %u %u", h[0], h[N - 1]);
    printf("managed: last prefetch after one to the device %d\n",
           range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, BYTES));
    CHECK(cuMemPrefetchAsync(m, BYTES / 2, host, 0, s));
    CHECK(cuStreamSynchronize(s));
    printf("managed: last prefetch, first half to the host: first half %d, whole %d\n",
           range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, BYTES / 2),
           range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, BYTES));

    CHECK(cuMemAdvise(m, BYTES, CU_MEM_ADVISE_SET_READ_MOSTLY, here));
    CHECK(cuMemAdvise(m, BYTES, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, here));
    CHECK(cuMemAdvise(m, BYTES, CU_MEM_ADVISE_SET_ACCESSED_BY, here));
    int acc_by[3] = {9, 9, 9};
    int rm = 9, pref = 9;
    void *data[] = {&rm, &pref, acc_by};
    size_t sizes[] = {sizeof(rm), sizeof(pref), sizeof(acc_by)};
    CUmem_range_attribute attrs[] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                                     CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                     CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY};
    CHECK(cuMemRangeGetAttributes(data, sizes, attrs, 3, m, BYTES));
    printf("managed: advised: read mostly %d, preferred %d, accessed by %d %d %d\n", rm, pref,
           acc_by[0], acc_by[1], acc_by[2]);
    CHECK(cuMemAdvise(m, BYTES / 2, CU_MEM_ADVISE_UNSET_READ_MOSTLY, here));
    CHECK(cuMemAdvise(m + BYTES / 2, BYTES / 2, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    CHECK(cuMemAdvise(m, BYTES, CU_MEM_ADVISE_UNSET_ACCESSED_BY, here));
    printf("managed: half unset: read mostly first %d second %d whole %d; preferred first %d "
           "second %d whole %d; second half's type %s\n",
           range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, BYTES / 2),
           range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m + BYTES / 2, BYTES / 2),
           range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, BYTES),
           range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, BYTES / 2),
           range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m + BYTES / 2, BYTES / 2),
           range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, BYTES),
           range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, m + BYTES / 2, BYTES / 2) ==
                   CU_MEM_LOCATION_TYPE_HOST
               ? "host"
               : "other");
    CHECK(cuMemRangeGetAttribute(acc_by, sizeof(acc_by), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m,
                                 BYTES));
    printf("managed: accessed by after unset %d %d %d\n", acc_by[0], acc_by[1], acc_by[2]);
    t_ok("prefetches and advice answered by the range attributes");

    /* Stream attachment. */
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    inc(incf, m, N, s);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_GLOBAL));
    REQUIRE(h[0] == 3, "after the attached kernel: %u", h[0]);
    t_ok("attached to a stream, used there, attached back");

    /* Memory that is not managed, bad arguments. */
    EXPECT(cuMemAdvise(d, BYTES, CU_MEM_ADVISE_SET_READ_MOSTLY, here), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(d, BYTES, here, 0, s), CUDA_ERROR_INVALID_VALUE);
    int v;
    EXPECT(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, d, BYTES),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(m, 2 * (size_t)BYTES, here, 0, s), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr x;
    EXPECT(cuMemAllocManaged(&x, BYTES, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocManaged(&x, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    t_ok("device memory and bad arguments refused as natively");

    /* Freed: gone for every call. */
    CHECK(cuMemFree(m));
    EXPECT(cuMemFree(m), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_HOST));
    h = (unsigned *)(uintptr_t)m;
    h[3] = 41;
    inc(incf, m, N, NULL);
    CHECK(cuCtxSynchronize());
    REQUIRE(h[3] == 42, "host-attached allocation: %u", h[3]);
    CHECK(cuMemFree(m));
    t_ok("freed; a host-attached allocation works too");
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
    t_pass();
}
