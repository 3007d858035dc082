/* managed_migrate: the rules of managed memory that pages moving between the host and the
 * device (issue 31) must keep: the host's writes reach the next device work, the device's
 * reach the host after every kind of synchronisation; granules both sides write; small
 * neighbours; copies, memsets; 32 MiB touched sparsely; prefetches, advice, attachment; two
 * host threads; a host function between kernels; frees. Every access is one CUDA allows
 * without concurrent managed access: the same output natively and through the shim.
 * --forbidden (through the shim only): the host reads, unsynchronised, what a running kernel
 * writes last; mpsshim defines that the read waits for the client's queued work. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GRANULE (64u << 10)

static CUfunction k_inc, k_fill, k_wpat, k_cpat, k_sum, k_delay, k_muladd;
static CUdeviceptr errs; /* check_pattern's counter, device memory */
static CUdevice dev;

/* A grid-stride kernel over n elements on s, 256 threads a block. */
static void launch(CUfunction f, uint64_t n, CUstream s, void **params)
{
    CHECK(cuLaunchKernel(f, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, s, params, NULL));
}

static void inc(CUdeviceptr p, unsigned long long n, CUstream s)
{
    void *params[] = {&p, &n};
    launch(k_inc, n, s, params);
}

static void fill(CUdeviceptr p, unsigned v, unsigned long long n, CUstream s)
{
    void *params[] = {&p, &v, &n};
    launch(k_fill, n, s, params);
}

static void wpat(CUdeviceptr p, unsigned long long n, unsigned seed, CUstream s)
{
    void *params[] = {&p, &n, &seed};
    launch(k_wpat, n, s, params);
}

/* How many of p's n words a kernel on s finds differ from the pattern of seed (s synced). */
static unsigned kcheck(CUdeviceptr p, unsigned long long n, unsigned seed, CUstream s)
{
    unsigned e = 0;
    void *params[] = {&p, &n, &seed, &errs};
    CHECK(cuMemsetD32Async(errs, 0, 1, s));
    launch(k_cpat, n, s, params);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(&e, errs, sizeof(e)));
    return e;
}

/* The host's view of n words at p must be the pattern of seed plus add. */
static void hcheck(CUdeviceptr p, size_t n, unsigned seed, unsigned add, const char *when)
{
    const unsigned *h = (const unsigned *)(uintptr_t)p;
    for (size_t i = 0; i < n; i++)
        REQUIRE(h[i] == t_pattern_at(seed, i) + add, "%s: [%zu] = %u, want %u", when, i, h[i],
                t_pattern_at(seed, i) + add);
}

#define host(p) ((unsigned *)(uintptr_t)(p)) /* managed memory's host view: the same address */

/* ---------------------------------------------------------------- 1: synchronisations */

static void sync_kinds(CUstream s)
{
    enum { N = 1 << 16, KINDS = 6 };
    CUdeviceptr m, other;
    CUevent ev;
    CHECK(cuMemAllocManaged(&m, N * 4, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAlloc(&other, 4));
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    static const char *names[KINDS] = {"cuCtxSynchronize",   "cuStreamSynchronize",
                                       "cuEventSynchronize", "cuStreamQuery",
                                       "cuEventQuery",       "a blocking cuMemcpyDtoH"};
    for (unsigned r = 0; r < 2 * KINDS; r++) {
        unsigned kind = r % KINDS, word;
        CUstream on = kind == KINDS - 1 ? NULL : s; /* the copy orders after the legacy stream */
        CUresult q;
        t_fill_pattern(host(m), N * 4, r);
        REQUIRE(kcheck(m, N, r, s) == 0, "round %u: the kernel missed the host's writes", r);
        inc(m, N, on);
        if (kind == 2 || kind == 4) CHECK(cuEventRecord(ev, s));
        if (kind == 0)
            CHECK(cuCtxSynchronize());
        else if (kind == 1)
            CHECK(cuStreamSynchronize(s));
        else if (kind == 2)
            CHECK(cuEventSynchronize(ev));
        else if (kind == 5)
            CHECK(cuMemcpyDtoH(&word, other, sizeof(word)));
        else {
            while ((q = kind == 3 ? cuStreamQuery(s) : cuEventQuery(ev)) == CUDA_ERROR_NOT_READY)
                usleep(50);
            CHECK(q);
        }
        hcheck(m, N, r, 1, names[kind]);
    }
    CHECK(cuEventDestroy(ev));
    CHECK(cuMemFree(other));
    CHECK(cuMemFree(m));
    t_ok("host writes reach the kernel; its writes reach the host after each of %d "
         "synchronisations",
         KINDS);
}

/* ---------------------------------------------------------------- 2: partial granules */

static void one_granule(CUstream s)
{
    enum { GRANULES = 4, PER = GRANULE / 4, ROUNDS = 300 };
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, GRANULES * GRANULE, CU_MEM_ATTACH_GLOBAL));
    unsigned *h = host(m), *want = calloc(GRANULES * PER, 4);
    REQUIRE(want, "calloc");
    memset(h, 0, GRANULES * GRANULE);
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned g = r % GRANULES, a = g * PER + (r * 37) % PER, b = g * PER + (r * 101 + 7) % PER;
        if (a == b) b ^= 1;
        /* Odd rounds: the host's first touch of the granule since the kernel is a write. */
        REQUIRE(r % 2 || (h[a] == want[a] && h[b] == want[b]), "round %u: [%u] %u, [%u] %u", r, a,
                h[a], b, h[b]);
        h[a] = 1000 + r; /* the host's element, which the kernel then increments */
        inc(m + 4ull * a, 1, s);
        fill(m + 4ull * b, 5000 + r, 1, s); /* the device's element of the same granule */
        want[a] = 1001 + r;
        want[b] = 5000 + r;
        CHECK(cuStreamSynchronize(s));
    }
    for (unsigned i = 0; i < GRANULES * PER; i++)
        REQUIRE(h[i] == want[i], "at the end: [%u] = %u, want %u", i, h[i], want[i]);
    free(want);
    CHECK(cuMemFree(m));
    t_ok("%d rounds of the host and a kernel writing elements of one granule: both kept", ROUNDS);
}

static void neighbours(CUstream s)
{
    enum { ALLOCS = 100 };
    CUdeviceptr p[ALLOCS];
    size_t n[ALLOCS];
    for (unsigned i = 0; i < ALLOCS; i++) {
        n[i] = 24 + (size_t)i * 50 + i % 3; /* 24 .. 4976 bytes, some not whole words */
        CHECK(cuMemAllocManaged(&p[i], n[i], CU_MEM_ATTACH_GLOBAL));
        t_fill_pattern(host(p[i]), n[i], i);
    }
    for (unsigned i = 0; i < ALLOCS; i += 2)
        inc(p[i], n[i] / 4, s);
    CHECK(cuStreamSynchronize(s));
    for (unsigned i = 0; i < ALLOCS; i++) {
        const unsigned char *b = (const unsigned char *)host(p[i]);
        size_t words = n[i] / 4;
        hcheck(p[i], words, i, i % 2 ? 0 : 1, "a neighbour");
        for (size_t k = 0; k < n[i] % 4; k++) /* the bytes past the last whole word */
            REQUIRE(b[words * 4 + k] == (unsigned char)(t_pattern_at(i, words) >> (8 * k)),
                    "allocation %u's tail changed", i);
        t_fill_pattern(host(p[i]), n[i], 7000 + i);
    }
    for (unsigned i = 1; i < ALLOCS; i += 2)
        REQUIRE(kcheck(p[i], n[i] / 4, 7000 + i, s) == 0, "allocation %u: the kernel read wrong",
                i);
    for (unsigned i = 0; i < ALLOCS; i++) {
        REQUIRE(t_pattern_mismatch(host(p[i]), n[i], 7000 + i) == SIZE_MAX, "allocation %u", i);
        CHECK(cuMemFree(p[i]));
    }
    t_ok("%d neighbouring allocations of 24 to 4976 bytes keep their own data", ALLOCS);
}

/* ---------------------------------------------------------------- 3: copies, memsets */

static void copies(CUstream s)
{
    enum { BYTES = 1 << 20, N = BYTES / 4 };
    CUdeviceptr m1, m2, d;
    CHECK(cuMemAllocManaged(&m1, BYTES, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&m2, BYTES, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAlloc(&d, BYTES));
    unsigned char *buf = malloc(BYTES), *buf2 = malloc(BYTES);
    REQUIRE(buf && buf2, "malloc");

    /* Synchronous: the host's writes just before are what a copy from managed memory takes. */
    t_fill_pattern(host(m1), BYTES, 1);
    CHECK(cuMemcpyDtoH(buf, m1, BYTES));
    REQUIRE(t_pattern_mismatch(buf, BYTES, 1) == SIZE_MAX, "DtoH from managed");
    t_fill_pattern(buf, BYTES, 2);
    CHECK(cuMemcpyHtoD(m2, buf, BYTES));
    CHECK(cuCtxSynchronize()); /* the copy may return once staged */
    hcheck(m2, N, 2, 0, "HtoD into managed");
    REQUIRE(kcheck(m2, N, 2, s) == 0, "HtoD into managed, read by a kernel");
    t_fill_pattern(host(m1), BYTES, 3);
    CHECK(cuMemcpyDtoD(d, m1, BYTES));
    CHECK(cuMemcpyDtoH(buf, d, BYTES));
    REQUIRE(t_pattern_mismatch(buf, BYTES, 3) == SIZE_MAX, "DtoD from managed after host writes");
    wpat(m1, N, 4, NULL); /* the device's writes, not synchronised, then a copy */
    CHECK(cuMemcpyDtoD(d, m1, BYTES));
    CHECK(cuMemcpyDtoD(m2, d, BYTES));
    CHECK(cuCtxSynchronize()); /* a device-to-device copy does not wait */
    hcheck(m2, N, 4, 0, "DtoD into managed");
    hcheck(m1, N, 4, 0, "a kernel's writes");
    t_fill_pattern(host(m2), BYTES, 5);
    CHECK(cuMemcpy(m1, m2, BYTES));
    CHECK(cuCtxSynchronize());
    hcheck(m1, N, 5, 0, "cuMemcpy managed to managed");
    REQUIRE(kcheck(m1, N, 5, s) == 0, "cuMemcpy managed to managed, read by a kernel");
    t_ok("synchronous copies from, to and between managed memory");

    /* Asynchronous on a stream. */
    t_fill_pattern(host(m1), BYTES, 6);
    t_fill_pattern(buf2, BYTES, 7);
    CHECK(cuMemcpyDtoHAsync(buf, m1, BYTES, s));
    CHECK(cuMemcpyHtoDAsync(m2, buf2, BYTES, s));
    CHECK(cuMemcpyDtoDAsync(d, m1, BYTES, s));
    inc(m1, N, s);
    CHECK(cuMemcpyAsync(m2 + BYTES / 2, m1, BYTES / 2, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(t_pattern_mismatch(buf, BYTES, 6) == SIZE_MAX, "async DtoH from managed");
    hcheck(m1, N, 6, 1, "a kernel after the async copies");
    hcheck(m2, N / 2, 7, 0, "async HtoD into managed");
    hcheck(m2 + BYTES / 2, N / 2, 6, 1, "async managed to managed");
    REQUIRE(kcheck(d, N, 6, s) == 0, "async DtoD from managed");
    t_ok("asynchronous copies on a stream from, to and between managed memory");

    /* Memsets, synchronous and asynchronous, whole and within a granule the host wrote. */
    CHECK(cuMemsetD8(m1, 0xab, BYTES));
    CHECK(cuCtxSynchronize()); /* a synchronous memset may return before it ran */
    REQUIRE(t_bytes_mismatch(host(m1), BYTES, 0xab) == SIZE_MAX, "cuMemsetD8");
    inc(m1, N, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(host(m1)[0] == 0xababababu + 1 && host(m1)[N - 1] == 0xababababu + 1, "memset, inc");
    t_fill_pattern(host(m2), BYTES, 8);
    CHECK(cuMemsetD32(m2 + 40, 0x12345678, 10));
    CHECK(cuMemsetD8Async(m2 + GRANULE + 3, 0xcd, 5, s));
    CHECK(cuMemsetD32Async(m1, 7, N, s));
    CHECK(cuCtxSynchronize()); /* the synchronous one ran on the legacy stream */
    for (unsigned i = 0; i < N; i++) {
        unsigned want = i >= 10 && i < 20 ? 0x12345678u : t_pattern_at(8, i);
        if (i == GRANULE / 4) want = (want & 0xffffffu) | 0xcd000000u;
        if (i == GRANULE / 4 + 1) want = 0xcdcdcdcdu;
        REQUIRE(host(m2)[i] == want, "memsets in a written granule: [%u] = %x, want %x", i,
                host(m2)[i], want);
    }
    REQUIRE(host(m1)[0] == 7 && host(m1)[N - 1] == 7, "cuMemsetD32Async");
    fill(m1, 9, N, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(host(m1)[N / 3] == 9, "a kernel after memsets");
    t_ok("memsets of managed memory, synchronous and asynchronous, beside the host's writes");
    free(buf);
    free(buf2);
    CHECK(cuMemFree(d));
    CHECK(cuMemFree(m1));
    CHECK(cuMemFree(m2));
}

/* ---------------------------------------------------------------- 4: a large allocation */

static void large(CUstream s)
{
    enum { BYTES = 32 << 20, N = BYTES / 4, BLOCK = 256, BLOCKS = N / BLOCK };
    CUdeviceptr m, sums;
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAlloc(&sums, BLOCKS * 8));
    unsigned *h = host(m);
    fill(m, 5, N, s);
    CHECK(cuStreamSynchronize(s));
    unsigned base = 5;
    for (unsigned r = 0; r < 4; r++) {
        for (unsigned k = 0; k < 64; k++) { /* a few scattered pages */
            size_t i = (size_t)k * (N / 64) + (k * 4099u + r * 977u) % (N / 64);
            REQUIRE(h[i] == base, "round %u: scattered [%zu] = %u, want %u", r, i, h[i], base);
            h[i] = 1000 + k;
        }
        inc(m, N, s);
        CHECK(cuStreamSynchronize(s));
        base++;
        for (unsigned k = 0; k < 64; k++) {
            size_t i = (size_t)k * (N / 64) + (k * 4099u + r * 977u) % (N / 64);
            REQUIRE(h[i] == 1001 + k, "round %u: scattered [%zu] = %u", r, i, h[i]);
            h[i] = base; /* back to the rest's value */
        }
        for (size_t i = 3; i < N; i += 4093)
            REQUIRE(h[i] == base, "round %u: [%zu] = %u, want %u", r, i, h[i], base);
    }
    unsigned long long total = 0; /* a read-only pass, then a kernel */
    for (size_t i = 0; i < N; i++)
        total += h[i];
    REQUIRE(total == (unsigned long long)N * base, "read-only pass: %llu", total);
    inc(m, N, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(h[0] == base + 1 && h[N - 1] == base + 1 && h[N / 2] == base + 1, "after the read");
    long long want = 0;
    for (size_t i = 0; i < N; i++) { /* every element, then a kernel sums */
        h[i] = (unsigned)(i % 1000);
        want += (long long)(i % 1000);
    }
    int n = N;
    void *params[] = {&m, &sums, &n};
    CHECK(cuLaunchKernel(k_sum, BLOCKS, 1, 1, BLOCK, 1, 1, BLOCK * 8, s, params, NULL));
    CHECK(cuStreamSynchronize(s));
    long long *part = malloc(BLOCKS * 8), got = 0;
    REQUIRE(part, "malloc");
    CHECK(cuMemcpyDtoH(part, sums, BLOCKS * 8));
    for (unsigned i = 0; i < BLOCKS; i++)
        got += part[i];
    REQUIRE(got == want, "the kernel's sum %lld, want %lld", got, want);
    free(part);
    CHECK(cuMemFree(sums));
    CHECK(cuMemFree(m));
    t_ok("32 MiB: scattered host pages between launches, a read-only pass, a full write summed");
}

/* ---------------------------------------------------------------- 5: prefetch, advice */

/* The legacy prefetch, which takes a device or CU_DEVICE_CPU (cuda.h names _v2 for it). */
#undef cuMemPrefetchAsync
CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);

static int last_prefetch(CUdeviceptr p, size_t n)
{
    int v = 12345;
    CHECK(
        cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, p, n));
    return v;
}

static void prefetch_advise(CUstream s)
{
    enum { BYTES = 1 << 20, N = BYTES / 4 };
    CUdeviceptr m;
    CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUmemLocation cpu = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
    t_fill_pattern(host(m), BYTES, 11);
    CHECK(cuMemPrefetchAsync_v2(m, BYTES, here, 0, s));
    inc(m, N, s);
    CHECK(cuMemPrefetchAsync_v2(m, BYTES, cpu, 0, s));
    CHECK(cuStreamSynchronize(s));
    hcheck(m, N, 11, 1, "prefetched to the device, a kernel, to the host");
    printf("managed_migrate: last prefetch %d\n", last_prefetch(m, BYTES));
    t_fill_pattern(host(m), BYTES, 12);
    CHECK(cuMemPrefetchAsync(m, BYTES / 2, dev, s));
    CHECK(cuMemPrefetchAsync(m + BYTES / 2, BYTES / 2, CU_DEVICE_CPU, s));
    REQUIRE(kcheck(m, N, 12, s) == 0, "a kernel after the legacy prefetches");
    hcheck(m, N, 12, 0, "after the legacy prefetches");
    printf("managed_migrate: legacy prefetches: first half %d, second half %d\n",
           last_prefetch(m, BYTES / 2), last_prefetch(m + BYTES / 2, BYTES / 2));

    static const struct {
        CUmem_advise advice;
        int host_loc;
    } phases[] = {
        {CU_MEM_ADVISE_SET_READ_MOSTLY, 0},        {CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0},
        {CU_MEM_ADVISE_SET_ACCESSED_BY, 0},        {CU_MEM_ADVISE_UNSET_READ_MOSTLY, 0},
        {CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 1}, {CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, 0},
        {CU_MEM_ADVISE_UNSET_ACCESSED_BY, 0}};
    for (unsigned i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        CHECK(cuMemAdvise(m, BYTES, phases[i].advice, phases[i].host_loc ? cpu : here));
        REQUIRE(kcheck(m, N, 12 + i, s) == 0, "advice %u: a kernel read wrong", i);
        inc(m, N, s); /* the device writes, the host reads and writes */
        CHECK(cuStreamSynchronize(s));
        hcheck(m, N, 12 + i, 1, "after advice");
        t_fill_pattern(host(m), BYTES, 13 + i);
        int rm = 9, pref = 9;
        CHECK(
            cuMemRangeGetAttribute(&rm, sizeof(rm), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, BYTES));
        CHECK(cuMemRangeGetAttribute(&pref, sizeof(pref), CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                     m, BYTES));
        printf("managed_migrate: advice %u: read mostly %d, preferred %d\n", i, rm, pref);
    }
    CHECK(cuMemFree(m));
    t_ok("prefetches and advice between phases change no result");
}

/* ---------------------------------------------------------------- 6: stream attachment */

static void attach(CUstream s, CUstream s2)
{
    enum { N = 1 << 15 };
    CUdeviceptr m, m2, flag;
    CHECK(cuMemAllocManaged(&m, N * 4, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&m2, N * 4, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAlloc(&flag, 4));
    wpat(m, N, 21, s);
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_HOST));
    CHECK(cuStreamAttachMemAsync(s, m2, 0, CU_MEM_ATTACH_SINGLE));
    CHECK(cuStreamSynchronize(s));
    /* A kernel runs on another stream: host-attached memory, and memory attached to an idle
     * stream, are the host's all the same. */
    unsigned v = 1;
    unsigned long long ns = 150000000ull;
    void *params[] = {&flag, &v, &ns};
    CHECK(cuLaunchKernel(k_delay, 1, 1, 1, 1, 1, 1, 0, s2, params, NULL));
    hcheck(m, N, 21, 0, "host-attached, while another stream's kernel runs");
    t_fill_pattern(host(m), N * 4, 22);
    wpat(m2, N, 23, s);
    CHECK(cuStreamSynchronize(s));
    hcheck(m2, N, 23, 0, "attached to an idle stream, while another stream's kernel runs");
    host(m2)[5] = 55;
    CHECK(cuStreamSynchronize(s2));
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    REQUIRE(kcheck(m, N, 22, s) == 0, "the host's writes to host-attached memory");
    inc(m2, N, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(host(m2)[5] == 56 && host(m2)[6] == t_pattern_at(23, 6) + 1, "single: %u %u",
            host(m2)[5], host(m2)[6]);
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamAttachMemAsync(s, m2, 0, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemFree(flag));
    CHECK(cuMemFree(m));
    CHECK(cuMemFree(m2));
    t_ok("attached to the host and to one stream: the host's while another stream works");
}

/* ---------------------------------------------------------------- 7: two host threads */

enum { T_N = 4 * GRANULE / 4 };
static unsigned *t_arr;
static pthread_barrier_t t_bar;
static unsigned t_round;

/* Thread t (0 or 1) reads the elements i % 3 == 2 and writes those i % 3 == t. */
static void *toucher(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    pthread_barrier_wait(&t_bar);
    for (unsigned i = 0; i < T_N; i++) {
        unsigned want = t_pattern_at(t_round, i) + 1;
        if (i % 3 == 2) REQUIRE(t_arr[i] == want, "thread %u read [%u] = %u", t, i, t_arr[i]);
        if (i % 3 != t) continue;
        /* Thread 0 reads its elements before writing them, thread 1 writes blind. */
        REQUIRE(t || t_arr[i] == want, "thread 0: [%u] = %u before its write", i, t_arr[i]);
        t_arr[i] = want ^ (0x100u << t);
    }
    return NULL;
}

static void threads(CUstream s)
{
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, T_N * 4, CU_MEM_ATTACH_GLOBAL));
    t_arr = host(m);
    for (t_round = 0; t_round < 20; t_round++) {
        wpat(m, T_N, t_round, s);
        inc(m, T_N, s);
        CHECK(cuStreamSynchronize(s));
        pthread_t th[2];
        REQUIRE(pthread_barrier_init(&t_bar, NULL, 2) == 0, "barrier");
        for (unsigned t = 0; t < 2; t++)
            REQUIRE(pthread_create(&th[t], NULL, toucher, (void *)(uintptr_t)t) == 0, "thread");
        for (unsigned t = 0; t < 2; t++)
            pthread_join(th[t], NULL);
        pthread_barrier_destroy(&t_bar);
        inc(m, T_N, s); /* the kernel reads everything the threads wrote */
        CHECK(cuStreamSynchronize(s));
        for (unsigned i = 0; i < T_N; i++) {
            unsigned want = t_pattern_at(t_round, i) + 1;
            want = (i % 3 == 2 ? want : want ^ (0x100u << (i % 3))) + 1;
            REQUIRE(t_arr[i] == want, "round %u: [%u] = %u, want %u", t_round, i, t_arr[i], want);
        }
    }
    CHECK(cuMemFree(m));
    t_ok("two host threads touching the same granules after a sync, 20 rounds");
}

/* ---------------------------------------------------------------- 8: a host function */

struct seen {
    unsigned *arr, got;
};

/* Runs on s between two kernels: the stream is idle for its duration, so it may use memory
 * attached to s (cuLaunchHostFunc's documented Unified Memory guarantees). */
static void between(void *arg)
{
    struct seen *sn = arg;
    sn->got = sn->arr[0];
    sn->arr[1] = 777;
}

static void host_function(CUstream s)
{
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, GRANULE, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    CHECK(cuStreamSynchronize(s));
    struct seen sn = {host(m), 0};
    host(m)[0] = 40;
    host(m)[1] = 1;
    inc(m, 1, s);
    CHECK(cuLaunchHostFunc(s, between, &sn));
    int two = 2, one = 1;
    unsigned long long n = 2;
    void *params[] = {&m, &two, &one, &n};
    launch(k_muladd, n, s, params);
    CHECK(cuStreamSynchronize(s));
    printf("managed_migrate: the host function saw %u\n", sn.got);
    REQUIRE(sn.got == 41, "the host function read %u", sn.got);
    REQUIRE(host(m)[0] == 83 && host(m)[1] == 1555, "after the host function: %u %u", host(m)[0],
            host(m)[1]);
    CHECK(cuMemFree(m));
    t_ok("a host function reads a kernel's write and writes what the next kernel reads");
}

/* A prefetch to the host while a host function that touches the range is queued ahead of
 * it: on the NULL stream (through the shim it waits for all the client's work, the host
 * function's with it) and on another stream (queued there). The host function's touches are
 * served meanwhile, and everyone sees everyone's writes after. */
static void prefetch_beside_host_function(CUstream s, CUstream s2)
{
    CUmemLocation to_host = {.type = CU_MEM_LOCATION_TYPE_HOST};
    for (int on_s2 = 0; on_s2 < 2; on_s2++) {
        CUdeviceptr m;
        CHECK(cuMemAllocManaged(&m, GRANULE, CU_MEM_ATTACH_GLOBAL));
        CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
        CHECK(cuStreamSynchronize(s));
        host(m)[0] = 40;
        host(m)[1] = 1;
        struct seen sn = {host(m), 0};
        /* 41 into m[0] after 200 ms: the prefetch is queued before the host function runs. */
        unsigned v = 41;
        unsigned long long ns = 200000000ull;
        void *params[] = {&m, &v, &ns};
        CHECK(cuLaunchKernel(k_delay, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        CHECK(cuLaunchHostFunc(s, between, &sn));
        CHECK(cuMemPrefetchAsync_v2(m, GRANULE, to_host, 0, on_s2 ? s2 : NULL));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuStreamSynchronize(on_s2 ? s2 : NULL));
        REQUIRE(sn.got == 41 && host(m)[0] == 41 && host(m)[1] == 777,
                "prefetch on %s beside a host function: it saw %u; then %u %u",
                on_s2 ? "a stream" : "the NULL stream", sn.got, host(m)[0], host(m)[1]);
        CHECK(cuMemFree(m));
    }
    t_ok("a prefetch to the host behind a host function touching the range, on the NULL stream "
         "and on another");
}

/* One thread prefetches an allocation to the host (on the NULL stream: it waits) while
 * another writes into it, after each round's kernel: the writes are never overwritten by the
 * prefetched bytes, and the kernel's writes are seen. */
enum { PW_ROUNDS = 60, PW_STRIDE = 4096 };
#define PW_BYTES (4u << 20)
static CUdeviceptr pw_arr;
static CUcontext pw_ctx;
static pthread_barrier_t pw_bar;

static void *pw_prefetcher(void *arg)
{
    (void)arg;
    CUmemLocation to_host = {.type = CU_MEM_LOCATION_TYPE_HOST};
    CHECK(cuCtxSetCurrent(pw_ctx));
    for (int r = 0; r < PW_ROUNDS; r++) {
        pthread_barrier_wait(&pw_bar);
        CHECK(cuMemPrefetchAsync_v2(pw_arr, PW_BYTES, to_host, 0, NULL));
        pthread_barrier_wait(&pw_bar);
    }
    return NULL;
}

static void prefetch_beside_writer(CUstream s)
{
    CHECK(cuMemAllocManaged(&pw_arr, PW_BYTES, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuCtxGetCurrent(&pw_ctx));
    REQUIRE(pthread_barrier_init(&pw_bar, NULL, 2) == 0, "barrier");
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, pw_prefetcher, NULL) == 0, "thread");
    unsigned *h = host(pw_arr);
    const unsigned n = PW_BYTES / 4;
    for (int r = 0; r < PW_ROUNDS; r++) {
        inc(pw_arr, n, s);
        CHECK(cuStreamSynchronize(s));
        pthread_barrier_wait(&pw_bar); /* the prefetch and the writes, at once */
        for (unsigned i = (unsigned)r % PW_STRIDE; i < n; i += PW_STRIDE)
            h[i] = 1000000u + (unsigned)r;
        pthread_barrier_wait(&pw_bar);
        for (unsigned i = (unsigned)r % PW_STRIDE; i < n; i += PW_STRIDE)
            REQUIRE(h[i] == 1000000u + (unsigned)r, "round %d: element %u is %u, written %u", r, i,
                    h[i], 1000000u + (unsigned)r);
        unsigned j = ((unsigned)r + PW_STRIDE / 2) % PW_STRIDE; /* never written */
        REQUIRE(h[j] == (unsigned)r + 1, "round %d: element %u is %u, want %d", r, j, h[j], r + 1);
    }
    REQUIRE(pthread_join(t, NULL) == 0, "join");
    pthread_barrier_destroy(&pw_bar);
    CHECK(cuMemFree(pw_arr));
    t_ok("%d rounds of a thread prefetching to the host while another writes: no write lost",
         PW_ROUNDS);
}

/* ---------------------------------------------------------------- 9: --forbidden */

static void forbidden(CUstream s)
{
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, GRANULE, CU_MEM_ATTACH_GLOBAL));
    host(m)[0] = 1;
    host(m)[100] = 7;
    unsigned v = 99;
    unsigned long long ns = 300000000ull;
    void *params[] = {&m, &v, &ns};
    CHECK(cuLaunchKernel(k_delay, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    unsigned seen = *(volatile unsigned *)host(m); /* no synchronisation */
    REQUIRE(seen == 99, "the host read %u while the kernel ran, want its final 99", seen);
    host(m)[100] = 8;
    inc(m + 400, 1, s);
    CHECK(cuStreamSynchronize(s));
    REQUIRE(host(m)[0] == 99 && host(m)[100] == 9, "after: %u %u", host(m)[0], host(m)[100]);
    CHECK(cuMemFree(m));
    t_ok("a host read while a kernel runs waits for it and sees its write");
}

/* ---------------------------------------------------------------- 10: free */

static void free_on_device(CUstream s)
{
    enum { BYTES = 1 << 20, N = BYTES / 4 };
    CUdeviceptr m;
    for (unsigned r = 0; r < 4; r++) {
        CHECK(cuMemAllocManaged(&m, BYTES, CU_MEM_ATTACH_GLOBAL));
        /* Managed memory is not cleared (cuMemAllocManaged): only what is written counts. */
        t_fill_pattern(host(m), BYTES / 2, 30 + r);
        wpat(m + BYTES / 2, N / 2, 40 + r, s);
        inc(m, N, s);
        CHECK(cuStreamSynchronize(s));
        hcheck(m, N / 2, 30 + r, 1, "a fresh allocation, first half");
        hcheck(m + BYTES / 2, N / 2, 40 + r, 1, "a fresh allocation, second half");
        inc(m, N, s); /* its pages on the device when freed */
        CHECK(cuStreamSynchronize(s));
        if (r % 2) host(m)[3] = 3; /* or dirty on the host */
        CHECK(cuMemFree(m));
    }
    CUdeviceptr small, big;
    CHECK(cuMemAllocManaged(&small, 24, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&big, 3 * BYTES, CU_MEM_ATTACH_GLOBAL));
    t_fill_pattern(host(small), 24, 50);
    wpat(big, 3 * N, 51, s);
    REQUIRE(kcheck(small, 6, 50, s) == 0, "a small allocation after the frees");
    hcheck(big, 3 * N, 51, 0, "a big allocation after the frees");
    CHECK(cuMemFree(small));
    CHECK(cuMemFree(big));
    t_ok("freed with pages on the device or dirty on the host; allocated again, all correct");
}

int main(int argc, char **argv)
{
    t_init("managed_migrate", 120);
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    k_inc = t_get_function(mod, "inc_u32");
    k_fill = t_get_function(mod, "fill_u32");
    k_wpat = t_get_function(mod, "write_pattern");
    k_cpat = t_get_function(mod, "check_pattern");
    k_sum = t_get_function(mod, "block_sum");
    k_delay = t_get_function(mod, "delay_set");
    k_muladd = t_get_function(mod, "mul_add_i32");
    CHECK(cuMemAlloc(&errs, 4));
    CUstream s, s2;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    if (t_has_flag(argc, argv, "--forbidden")) {
        forbidden(s);
        t_pass();
    }
    sync_kinds(s);
    one_granule(s);
    neighbours(s);
    copies(s);
    large(s);
    prefetch_advise(s);
    attach(s, s2);
    threads(s);
    host_function(s);
    prefetch_beside_host_function(s, s2);
    prefetch_beside_writer(s);
    free_on_device(s);
    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuMemFree(errs));
    t_pass();
}
