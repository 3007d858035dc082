/* mempool: the stream-ordered allocator of the driver API.
 *
 * Allocations and frees on a created stream, on the legacy NULL stream and on the per-thread
 * stream, with a kernel or a memset writing the memory between the two and a copy back, all
 * queued before one synchronize; an allocation used on a second stream after an event; a
 * created pool with its attributes, access, trimming, as the device's current pool, and
 * destroyed (also with an allocation still outstanding); cuMemFree of pool memory; errors
 * that the real driver and the CPU test driver both give.
 *
 * Only pools this program created are measured (through the shim the default pool may be
 * shared), and only as booleans: byte counts differ from one driver to another. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <string.h>

#define N 4096 /* words per allocation */

static CUfunction f_fill;
static uint32_t *g_pin; /* pinned, N words: async copies back land here */

/* fill_u32 over n words of p, on s. */
static void fill(CUstream s, CUdeviceptr p, uint32_t v, unsigned long long n)
{
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(f_fill, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, s, args, NULL));
}

/* The N words copied back into g_pin are all v. */
static void check_words(uint32_t v, const char *what)
{
    for (int i = 0; i < N; i++)
        REQUIRE(g_pin[i] == v, "%s: word %d is 0x%x, want 0x%x", what, i, g_pin[i], v);
}

static cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    CHECK(cuMemPoolGetAttribute(pool, a, &v));
    return v;
}

/* p (N words) written with v by a kernel on s, copied back and freed on s; then checked. */
static void write_free_check(CUstream s, CUdeviceptr p, uint32_t v, const char *what)
{
    fill(s, p, v, N);
    CHECK(cuMemcpyDtoHAsync(g_pin, p, N * 4, s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    check_words(v, what);
}

/* Allocation, write, copy back and free all queued on s, then one synchronize. */
static void round_trip(CUstream s, const char *stream_name, int kernel, uint32_t v)
{
    CUdeviceptr p = 0;
    memset(g_pin, 0, N * 4);
    CHECK(cuMemAllocAsync(&p, N * 4, s));
    REQUIRE(p != 0, "cuMemAllocAsync on %s gave a NULL pointer", stream_name);
    if (kernel)
        fill(s, p, v, N);
    else
        CHECK(cuMemsetD32Async(p, v, N, s));
    CHECK(cuMemcpyDtoHAsync(g_pin, p, N * 4, s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    check_words(v, stream_name);
    t_ok("cuMemAllocAsync, %s, copy back, cuMemFreeAsync on %s", kernel ? "kernel" : "memset",
         stream_name);
}

/* Allocated and set on s1, written and freed on s2 after an event of s1. */
static void two_streams(CUstream s1, CUstream s2)
{
    CUevent ev;
    CUdeviceptr p = 0;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    memset(g_pin, 0, N * 4);
    CHECK(cuMemAllocAsync(&p, N * 4, s1));
    CHECK(cuMemsetD32Async(p, 0x11, N, s1));
    CHECK(cuEventRecord(ev, s1));
    CHECK(cuStreamWaitEvent(s2, ev, 0));
    fill(s2, p + N * 2, 0x22, N / 2);
    CHECK(cuMemcpyDtoHAsync(g_pin, p, N * 4, s2));
    CHECK(cuMemFreeAsync(p, s2));
    CHECK(cuStreamSynchronize(s2));
    for (int i = 0; i < N; i++)
        REQUIRE(g_pin[i] == (i < N / 2 ? 0x11u : 0x22u), "two streams: word %d is 0x%x", i,
                g_pin[i]);
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuEventDestroy(ev));
    t_ok("allocated on one stream, used and freed on another after an event");
}

/* A pool's reuse flags: int, enabled in a new pool. */
static const CUmemPool_attribute reuse[] = {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
                                            CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
                                            CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES};

/* Reuse flags and the release threshold are set and read back. */
static void attributes(CUmemoryPool pool)
{
    for (size_t i = 0; i < sizeof reuse / sizeof reuse[0]; i++) {
        int v = -1;
        CHECK(cuMemPoolGetAttribute(pool, reuse[i], &v));
        REQUIRE(v == 1, "reuse attribute %d of a new pool is %d, want 1", (int)reuse[i], v);
        v = 0;
        CHECK(cuMemPoolSetAttribute(pool, reuse[i], &v));
        v = -1;
        CHECK(cuMemPoolGetAttribute(pool, reuse[i], &v));
        REQUIRE(v == 0, "reuse attribute %d set to 0 reads %d", (int)reuse[i], v);
        v = 1;
        CHECK(cuMemPoolSetAttribute(pool, reuse[i], &v));
        CHECK(cuMemPoolGetAttribute(pool, reuse[i], &v));
        REQUIRE(v == 1, "reuse attribute %d set to 1 reads %d", (int)reuse[i], v);
    }
    t_ok("reuse attributes: enabled by default, set and read back");
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 0,
            "release threshold of a new pool is not 0");
    cuuint64_t keep = ~(cuuint64_t)0;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == keep,
            "release threshold not read back");
    t_ok("release threshold: 0 by default, set and read back");
}

/* A pool just made holds nothing and has a new pool's attributes, whatever the pools made
 * and destroyed before it held or were set to (the server hands out a destroyed pool's
 * driver pool again, made new: server/memory/pools.c). */
static void new_pool_defaults(CUmemoryPool pool, const char *what)
{
    for (size_t i = 0; i < sizeof reuse / sizeof reuse[0]; i++) {
        int v = -1;
        CHECK(cuMemPoolGetAttribute(pool, reuse[i], &v));
        REQUIRE(v == 1, "%s: reuse attribute %d is %d, want 1", what, (int)reuse[i], v);
    }
    static const CUmemPool_attribute zero[] = {
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_USED_MEM_HIGH};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        cuuint64_t v = pool_attr(pool, zero[i]);
        REQUIRE(v == 0, "%s: attribute %d is %llu, want 0", what, (int)zero[i],
                (unsigned long long)v);
    }
    t_ok("%s: a new pool's attributes, nothing reserved or used", what);
}

/* Allocation from the pool, used memory while it lives and after its free, reserved memory
 * kept under the threshold and given back by cuMemPoolTrimTo. */
static void allocate_and_trim(CUmemoryPool pool, CUstream s)
{
    CUdeviceptr p = 0;
    memset(g_pin, 0, N * 4);
    CHECK(cuMemAllocFromPoolAsync(&p, N * 4, pool, s));
    REQUIRE(p != 0, "cuMemAllocFromPoolAsync gave a NULL pointer");
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) > 0,
            "pool has no used memory while an allocation lives");
    CUmemoryPool owner = NULL;
    CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    REQUIRE(owner == pool, "CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE is not the pool allocated from");
    write_free_check(s, p, 0x5eed, "created pool");
    t_ok("cuMemAllocFromPoolAsync from a created pool, kernel, copy back, cuMemFreeAsync");
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0,
            "pool still has used memory after the free and a synchronize");
    t_ok("used memory: non-zero while allocated, zero after free and synchronize");
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) > 0,
            "pool kept no memory under its release threshold");
    CHECK(cuMemPoolTrimTo(pool, 0));
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0,
            "pool still holds memory after cuMemPoolTrimTo(0)");
    t_ok("reserved memory kept under the threshold, released by cuMemPoolTrimTo");
}

static void pool_access(CUmemoryPool pool, CUmemoryPool def, CUdevice dev)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemPoolSetAccess(pool, &d, 1));
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CUmemLocation loc = d.location;
    CHECK(cuMemPoolGetAccess(&flags, pool, &loc));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "created pool: access %d", (int)flags);
    flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CHECK(cuMemPoolGetAccess(&flags, def, &loc));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "default pool: access %d", (int)flags);
    t_ok("cuMemPoolSetAccess/cuMemPoolGetAccess: device 0 reads and writes");
}

/* The created pool as the device's current pool: cuMemAllocAsync takes from it. */
static void current_pool(CUmemoryPool pool, CUmemoryPool def, CUdevice dev, CUstream s)
{
    CUmemoryPool cur = NULL;
    CHECK(cuDeviceSetMemPool(dev, pool));
    CHECK(cuDeviceGetMemPool(&cur, dev));
    REQUIRE(cur == pool, "cuDeviceGetMemPool is not the pool just set");
    CUdeviceptr p = 0;
    CHECK(cuMemAllocAsync(&p, N * 4, s));
    REQUIRE(pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) > 0,
            "cuMemAllocAsync did not allocate from the current pool");
    CHECK(cuMemsetD32Async(p, 0x33, N, s));
    CHECK(cuMemcpyDtoHAsync(g_pin, p, N * 4, s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    check_words(0x33, "current pool");
    CHECK(cuDeviceSetMemPool(dev, def));
    CHECK(cuDeviceGetMemPool(&cur, dev));
    REQUIRE(cur == def, "cuDeviceGetMemPool is not the default pool after setting it back");
    t_ok("cuDeviceSetMemPool: cuMemAllocAsync allocates from the current pool; set back");
}

/* cuMemFree takes pool memory back without a stream (its work is done); the pool serves
 * the next allocation. (The pool's used memory is not checked after it: driver 580.159
 * keeps counting what cuMemFree freed.) */
static void plain_free(CUmemoryPool pool, CUstream s)
{
    CUdeviceptr p = 0;
    CHECK(cuMemAllocFromPoolAsync(&p, N * 4, pool, s));
    CHECK(cuMemsetD32Async(p, 0x44, N, s));
    CHECK(cuMemcpyDtoHAsync(g_pin, p, N * 4, s));
    CHECK(cuStreamSynchronize(s));
    check_words(0x44, "before cuMemFree");
    CHECK(cuMemFree(p));
    EXPECT_ERR(cuMemFreeAsync(p, s));
    memset(g_pin, 0, N * 4);
    CHECK(cuMemAllocFromPoolAsync(&p, N * 4, pool, s));
    write_free_check(s, p, 0x55, "after cuMemFree");
    t_ok("cuMemFree of a pool allocation; freeing it again fails; the pool serves on");
}

/* A pool destroyed while allocations from it are outstanding: they stay usable until they
 * are freed, by cuMemFreeAsync or cuMemFree. With `leave`, the process then exits holding
 * a third one (the server releases it, and then the pool). */
static void destroy_outstanding(const CUmemPoolProps *props, CUstream s, int leave)
{
    CUmemoryPool pool;
    CUdeviceptr p = 0, q = 0, r = 0;
    CHECK(cuMemPoolCreate(&pool, props));
    CHECK(cuMemAllocFromPoolAsync(&p, N * 4, pool, s));
    CHECK(cuMemAllocFromPoolAsync(&q, N * 4, pool, s));
    CHECK(cuMemAllocFromPoolAsync(&r, N * 4, pool, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolDestroy(pool));
    memset(g_pin, 0, N * 4);
    write_free_check(s, p, 0x66, "destroyed pool");
    fill(s, q, 0x67, N);
    CHECK(cuMemcpyDtoHAsync(g_pin, q, N * 4, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemFree(q));
    check_words(0x67, "destroyed pool, cuMemFree");
    t_ok("cuMemPoolDestroy with allocations outstanding; they stay usable, freed async or not");
    if (leave) {
        fill(s, r, 0x68, N);
        CHECK(cuStreamSynchronize(s));
        t_ok("exits holding an allocation of a destroyed pool");
        exit(0);
    }
    write_free_check(s, r, 0x68, "destroyed pool, last allocation");
}

static void errors(CUmemoryPool def, CUstream s)
{
    EXPECT(cuMemAllocAsync(NULL, 64, s), CUDA_ERROR_INVALID_VALUE);
    t_ok("cuMemAllocAsync with a NULL pointer: CUDA_ERROR_INVALID_VALUE");
    uint32_t local = 0;
    EXPECT_ERR(cuMemFreeAsync((CUdeviceptr)(uintptr_t)&local, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("cuMemFreeAsync of an address that is no allocation fails");
    EXPECT_ERR(cuMemPoolDestroy(def));
    t_ok("cuMemPoolDestroy of the default pool fails");
}

/* Another device's access to a pool does not outlive the pool: the next pool made gives
 * that device none, as a new pool does (through the shim it may be the same driver pool,
 * made new: server/memory/pools.c). Only where a second device can reach this one; prints nothing
 * otherwise, natively and through the shim alike. */
static void access_not_inherited(const CUmemPoolProps *props, CUdevice dev)
{
    int n = 0, can = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) return;
    CUdevice other;
    CHECK(cuDeviceGet(&other, dev == 0 ? 1 : 0));
    CHECK(cuDeviceCanAccessPeer(&can, other, dev));
    if (!can) return;
    CUmemoryPool pool;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = other;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUmemLocation loc = d.location;
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CHECK(cuMemPoolCreate(&pool, props));
    CHECK(cuMemPoolSetAccess(pool, &d, 1));
    CHECK(cuMemPoolGetAccess(&flags, pool, &loc));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "device %d was not given access", other);
    CHECK(cuMemPoolDestroy(pool));
    CHECK(cuMemPoolCreate(&pool, props));
    flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemPoolGetAccess(&flags, pool, &loc));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE,
            "a new pool gives device %d the access the last one had", other);
    CHECK(cuMemPoolDestroy(pool));
    t_ok("another device's access to a pool does not pass to the next pool made");
}

/* --many: MANY pools at once, each used (an allocation written, freed, synchronized), then
 * all destroyed; twice. More pools than the server keeps as spares (server/memory/pools.c: 64)
 * are destroyed there, which must be the spares that hold nothing. */
#define MANY 100
static void many_pools(const CUmemPoolProps *props, CUstream s)
{
    static CUmemoryPool pools[MANY];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < MANY; i++) {
            CUdeviceptr p = 0;
            CHECK(cuMemPoolCreate(&pools[i], props));
            new_pool_defaults(pools[i], "one of many pools");
            CHECK(cuMemAllocFromPoolAsync(&p, N * 4, pools[i], s));
            fill(s, p, 0x70 + (uint32_t)i, N);
            CHECK(cuMemcpyDtoHAsync(g_pin, p, N * 4, s));
            CHECK(cuMemFreeAsync(p, s));
            CHECK(cuStreamSynchronize(s));
            check_words(0x70 + (uint32_t)i, "one of many pools");
        }
        for (int i = 0; i < MANY; i++)
            CHECK(cuMemPoolDestroy(pools[i]));
    }
    t_ok("%d pools at once, each used and destroyed, twice", MANY);
}

/* --then-other: a pool of device 0 gives device 1 access, then the process asks for a
 * context on device 1, before and after the pool is destroyed: each answer printed (natively
 * both CUDA_SUCCESS; a process moved to its GPU's server is refused the first, the pool's
 * memory not being carried to device 1's: tests/server_per_gpu.sh, step 11). */
static void then_other(const CUmemPoolProps *props)
{
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("one device");
    CUmemoryPool pool;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemLocation at = d.location;
    CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CHECK(cuMemPoolCreate(&pool, props));
    CHECK(cuMemPoolSetAccess(pool, &d, 1));
    CHECK(cuMemPoolGetAccess(&f, pool, &at));
    printf("device 1's access to the pool: %d\n", (int)f);
    CUdevice d1;
    CUcontext c1 = NULL;
    CHECK(cuDeviceGet(&d1, 1));
    CUresult r = cuDevicePrimaryCtxRetain(&c1, d1);
    printf("a context on device 1 with the pool's access given: %s\n", t_errname(r));
    if (r == CUDA_SUCCESS) CHECK(cuDevicePrimaryCtxRelease(d1));
    CHECK(cuMemPoolDestroy(pool));
    r = cuDevicePrimaryCtxRetain(&c1, d1);
    printf("a context on device 1 once the pool is destroyed: %s\n", t_errname(r));
    if (r == CUDA_SUCCESS) CHECK(cuDevicePrimaryCtxRelease(d1));
}

/* mempool [--leave-destroyed | --many | --then-other]: the second exits holding memory of a
 * pool it destroyed; the third makes and destroys many pools at once (many_pools) and stops;
 * the fourth is then_other's, and stops. */
int main(int argc, char **argv)
{
    int leave = argc > 1 && strcmp(argv[1], "--leave-destroyed") == 0;
    int many = argc > 1 && strcmp(argv[1], "--many") == 0;
    int other = argc > 1 && strcmp(argv[1], "--then-other") == 0;
    t_init("mempool", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    int supported = 0;
    CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
    if (!supported) t_skip("device 0 has no memory pools");
    CUmodule mod = t_load_module("kernels.ptx");
    f_fill = t_get_function(mod, "fill_u32");
    CHECK(cuMemAllocHost((void **)&g_pin, N * 4));
    CUstream s, s2;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    if (many) {
        many_pools(&props, s);
        t_pass();
    }
    if (other) {
        then_other(&props);
        t_pass();
    }

    CUmemoryPool def = NULL, cur = NULL;
    CHECK(cuDeviceGetDefaultMemPool(&def, dev));
    CHECK(cuDeviceGetMemPool(&cur, dev));
    REQUIRE(def != NULL && cur == def, "the current pool is not the default pool");
    t_ok("cuDeviceGetDefaultMemPool and cuDeviceGetMemPool agree");

    round_trip(s, "a created stream", 1, 0xa1);
    round_trip(s, "a created stream", 0, 0xa2);
    round_trip(NULL, "the NULL stream", 1, 0xb1);
    round_trip(NULL, "the NULL stream", 0, 0xb2);
    round_trip(CU_STREAM_PER_THREAD, "the per-thread stream", 1, 0xc1);
    round_trip(CU_STREAM_PER_THREAD, "the per-thread stream", 0, 0xc2);
    two_streams(s, s2);

    CUmemoryPool pool = NULL;
    CHECK(cuMemPoolCreate(&pool, &props));
    REQUIRE(pool != NULL && pool != def, "cuMemPoolCreate gave the default pool or NULL");
    t_ok("cuMemPoolCreate: pinned device memory, no handle types");
    new_pool_defaults(pool, "cuMemPoolCreate");
    attributes(pool);
    allocate_and_trim(pool, s);
    pool_access(pool, def, dev);
    current_pool(pool, def, dev, s);
    plain_free(pool, s);
    CHECK(cuMemPoolDestroy(pool));
    t_ok("cuMemPoolDestroy of a created pool");
    /* The next pool after one left with memory reserved, a threshold and high marks. */
    CHECK(cuMemPoolCreate(&pool, &props));
    new_pool_defaults(pool, "cuMemPoolCreate after a destroy");
    CHECK(cuMemPoolDestroy(pool));
    access_not_inherited(&props, dev);
    destroy_outstanding(&props, s, leave);
    errors(def, s);

    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuMemFreeHost(g_pin));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
