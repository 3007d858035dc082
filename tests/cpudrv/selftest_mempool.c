// Self-test: the stream-ordered allocator and memory pools. Each part leaves the default
// pools as it found them (threshold 0, nothing allocated, nothing reserved).
#include "selftest.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull // nanoseconds
#define MIB ((size_t)1 << 20)

static const CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
static const CUmemLocation dev1 = {CU_MEM_LOCATION_TYPE_DEVICE, 1};

static cuuint64_t attr64(CUmemoryPool p, CUmemPool_attribute a)
{
    cuuint64_t v = ~0ull;
    CK(cuMemPoolGetAttribute(p, a, &v));
    return v;
}

static void set64(CUmemoryPool p, CUmemPool_attribute a, cuuint64_t v)
{
    CK(cuMemPoolSetAttribute(p, a, &v));
}

static size_t free_mem(void)
{
    size_t fr = 0, total = 0;
    CK(cuMemGetInfo(&fr, &total));
    return fr;
}

// Keeps s busy for ns before it sets *flag = v.
static void delay(CUstream s, CUdeviceptr flag, unsigned v, unsigned long long ns)
{
    void *args[] = {&flag, &v, &ns};
    CK(cuLaunchKernel(st_fn("delay_set"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static void fill(CUstream s, CUdeviceptr p, unsigned v, unsigned long long n)
{
    void *args[] = {&p, &v, &n};
    CK(cuLaunchKernel(st_fn("fill_u32"), 4, 1, 1, 128, 1, 1, 0, s, args, NULL));
}

// Holds a stream until open_gate: it waits for *gate >= 1 (pinned host memory).
static void hold(CUstream s, unsigned *gate)
{
    __atomic_store_n(gate, 0, __ATOMIC_RELEASE);
    CK(cuStreamWaitValue32(s, (CUdeviceptr)gate, 1, CU_STREAM_WAIT_VALUE_GEQ));
}

static void open_gate(unsigned *gate)
{
    __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
}

// Default and current pools, by device and by location; support attributes.
static void defaults(CUmemoryPool *d0)
{
    int v = -1;
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
    CHECK(v == 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 1));
    CHECK(v == 0);
    CUmemoryPool a = NULL, b = NULL, d1 = NULL, cur = NULL;
    CK(cuDeviceGetDefaultMemPool(&a, 0));
    CK(cuDeviceGetDefaultMemPool(&b, 0));
    CK(cuDeviceGetDefaultMemPool(&d1, 1));
    CHECK(a && a == b && d1 && d1 != a);
    *d0 = a;
    CK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == a);
    CUmemLocation loc = dev1;
    CK(cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK(cur == d1);
    cur = NULL;
    CK(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK(cur == d1);
    // Host locations and managed memory have no pools here.
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED),
           CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, a), CUDA_ERROR_NOT_SUPPORTED);
    loc.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    EXPECT(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_NOT_SUPPORTED);
    loc = dev0;
    EXPECT(cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_MANAGED),
           CUDA_ERROR_NOT_SUPPORTED);
    EXPECT(cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_INVALID),
           CUDA_ERROR_INVALID_VALUE);
    // An unknown device in a location is INVALID_VALUE (the real driver's answer).
    loc.id = 7;
    EXPECT(cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
    loc = (CUmemLocation){CU_MEM_LOCATION_TYPE_INVALID, 0};
    EXPECT(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
    loc = dev0;
    EXPECT(cuMemGetDefaultMemPool(NULL, &loc, CU_MEM_ALLOCATION_TYPE_PINNED),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetDefaultMemPool(&cur, NULL, CU_MEM_ALLOCATION_TYPE_PINNED),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetMemPool(NULL, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);
    // An unknown device: INVALID_DEVICE for the default pool, INVALID_VALUE for the current.
    EXPECT(cuDeviceGetDefaultMemPool(&cur, 5), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGetMemPool(&cur, -1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGetMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    // The defaults' attributes, untouched by earlier groups.
    for (int attr = CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES;
         attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES; attr++) {
        v = -1;
        CK(cuMemPoolGetAttribute(a, (CUmemPool_attribute)attr, &v));
        CHECK(v == 1);
    }
    CHECK(attr64(a, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 0);
    CHECK(attr64(a, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CHECK(attr64(a, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    // A default pool cannot be destroyed.
    EXPECT(cuMemPoolDestroy(a), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolDestroy(d1), CUDA_ERROR_INVALID_VALUE);
}

// Setting and reading attributes, and what cannot be set.
static void attributes(CUmemoryPool d0)
{
    set64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 12345);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 12345);
    set64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0);
    int v = 0, r = -1;
    CK(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &v));
    CK(cuMemPoolGetAttribute(d0, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &r));
    CHECK(r == 0);
    CK(cuMemPoolGetAttribute(d0, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &r));
    CHECK(r == 1);
    v = 1;
    CK(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &v));
    CK(cuMemPoolGetAttribute(d0, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &r));
    CHECK(r == 1);
    cuuint64_t one = 1, zero = 0, out = 7;
    // Current amounts are read-only; high watermarks can only be reset.
    EXPECT(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &one),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one),
           CUDA_ERROR_INVALID_VALUE);
    CK(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    CK(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    EXPECT(cuMemPoolSetAttribute(d0, (CUmemPool_attribute)0, &zero), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAttribute(d0, (CUmemPool_attribute)99, &zero), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAttribute(d0, (CUmemPool_attribute)99, &out), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAttribute(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, NULL),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAttribute(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, NULL),
           CUDA_ERROR_INVALID_VALUE);
    int local = 0;
    EXPECT(cuMemPoolGetAttribute((CUmemoryPool)&local, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &out),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAttribute(NULL, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &out),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAttribute((CUmemoryPool)&local, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero),
           CUDA_ERROR_INVALID_VALUE);
}

// Work between an allocation and its free on the stream sees valid memory; the free
// happens when the stream reaches it; the memory counts as the device's.
static void stream_order(CUmemoryPool d0, unsigned *pin)
{
    enum { N = 1000 };
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr flag, p = 0, q = 0;
    CK(cuMemAlloc(&flag, 4));
    size_t before = free_mem();
    CK(cuMemAllocAsync(&p, N * 4, s));
    CK(cuMemAllocAsync(&q, N * 4, s));
    CHECK(p && p % 256 == 0 && q && q != p);
    CHECK(free_mem() <= before - 2 * N * 4);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= 2 * N * 4);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >= 2 * N * 4);
    // All of it queued behind 200 ms of work: had the frees happened at the call, the
    // kernel would fault on memory that is gone.
    memset(pin, 0, 2 * N * 4);
    delay(s, flag, 1, 200 * MS);
    fill(s, p, 0xabc, N);
    CK(cuMemsetD32Async(q, 7, N, s));
    CK(cuMemcpyDtoHAsync(pin, p, N * 4, s));
    CK(cuMemcpyDtoHAsync(pin + N, q, N * 4, s));
    CK(cuMemFreeAsync(p, s));
    CK(cuMemFreeAsync(q, s));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= 2 * N * 4);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CK(cuStreamSynchronize(s));
    CHECK(pin[0] == 0xabc && pin[N - 1] == 0xabc && pin[N] == 7 && pin[2 * N - 1] == 7);
    CK(cuCtxSynchronize());
    // Freed when the stream got there; with threshold 0 the memory went back too.
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CHECK(free_mem() == before);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= 2 * N * 4);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) >= 2 * N * 4);
    set64(d0, CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0);
    set64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 0);
    CK(cuMemFree(flag));
    CK(cuStreamDestroy(s));
}

// Freed blocks are reused by later allocations once their free ran, never before; trim
// and the release threshold give idle memory back.
static void reuse_and_trim(CUmemoryPool d0, unsigned *gate)
{
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    set64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 64 * MIB);
    CUdeviceptr a, b, c;
    CK(cuMemAllocAsync(&a, MIB, s1));
    CK(cuMemFreeAsync(a, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == MIB);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CK(cuMemAllocAsync(&b, MIB, s2));
    CHECK(b == a);
    hold(s1, gate);
    CK(cuMemFreeAsync(b, s1));
    CK(cuMemAllocAsync(&c, MIB, s2));
    CHECK(c != b);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 2 * MIB);
    open_gate(gate);
    CK(cuStreamSynchronize(s1));
    CK(cuMemFreeAsync(c, s2));
    CK(cuStreamSynchronize(s2));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * MIB);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    // Trim keeps at least what it is asked to keep.
    size_t f0 = free_mem();
    CK(cuMemPoolTrimTo(d0, 3 * MIB));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * MIB);
    CK(cuMemPoolTrimTo(d0, MIB));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == MIB);
    CHECK(free_mem() == f0 + MIB);
    CK(cuMemPoolTrimTo(d0, 0));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CHECK(free_mem() == f0 + 2 * MIB);
    // Memory in use is never trimmed.
    CK(cuMemAllocAsync(&a, MIB, s1));
    CK(cuMemPoolTrimTo(d0, 0));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == MIB);
    CK(cuMemFreeAsync(a, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == MIB);
    // Lowering the threshold gives back what is above it.
    set64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
}

// cuMemPoolCreate with props; a pool it makes is destroyed at once.
static CUresult try_create(CUmemPoolProps props)
{
    CUmemoryPool p = NULL;
    CUresult rc = cuMemPoolCreate(&p, &props);
    if (!rc) CK(cuMemPoolDestroy(p));
    return rc;
}

// A created pool: its allocations' pointer attributes, access, maximum size, properties.
static void created_pool(CUmemoryPool d0, CUmemoryPool *out)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location = dev0;
    CUmemoryPool pool = NULL;
    CK(cuMemPoolCreate(&pool, &props));
    CHECK(pool && pool != d0);
    CUdeviceptr p = 0, base = 0;
    CK(cuMemAllocFromPoolAsync(&p, 5000, pool, s));
    CHECK(attr64(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) >= 5000);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CUmemoryPool ph = NULL;
    CK(cuPointerGetAttribute(&ph, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p + 100));
    CHECK(ph == pool);
    CUcontext cx = (CUcontext)&ph; // pool memory belongs to no context
    CK(cuPointerGetAttribute(&cx, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    CHECK(cx == NULL);
    unsigned mt = 0, ipc = 9;
    int ord = -1;
    CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    CHECK(mt == CU_MEMORYTYPE_DEVICE);
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    CHECK(ord == 0);
    CK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    CHECK(ipc == 0);
    size_t sz = 0;
    CK(cuMemGetAddressRange(&base, &sz, p + 4999));
    CHECK(base == p && sz == 5000);
    EXPECT(cuMemGetAddressRange(&base, &sz, p + 5000), CUDA_ERROR_NOT_FOUND);
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *vals[] = {&ph, &sz};
    ph = NULL;
    sz = 0;
    CK(cuPointerGetAttributes(2, as, vals, p + 1));
    CHECK(ph == pool && sz == 5000);
    // Plain device memory has no pool.
    CUdeviceptr m;
    CK(cuMemAlloc(&m, 64));
    CK(cuPointerGetAttribute(&ph, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, m));
    CHECK(ph == NULL);
    CK(cuMemFree(m));
    CK(cuMemFreeAsync(p, s));
    // A pool of device 1 serves a stream of device 0.
    props.location = dev1;
    CUmemoryPool pool1;
    CK(cuMemPoolCreate(&pool1, &props));
    CK(cuMemAllocFromPoolAsync(&p, 64, pool1, s));
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    CHECK(ord == 1);
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool1));

    // Access: the owner reads and writes; other devices as set, all of a list or none.
    CUmemAccessDesc acc[2] = {{dev0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
                              {dev1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE}};
    CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_MAX;
    CUmemLocation l0 = dev0, l1 = dev1;
    CK(cuMemPoolGetAccess(&fl, pool, &l1));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CK(cuMemPoolSetAccess(pool, acc, 2));
    CK(cuMemPoolGetAccess(&fl, pool, &l1));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(cuMemPoolGetAccess(&fl, pool, &l0));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    // The errors the real driver gives; a list with one bad entry changes nothing.
    static const struct {
        CUmemLocation loc;
        CUmemAccess_flags flags;
        CUresult want;
    } bad[] = {
        {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
         CU_MEM_ACCESS_FLAGS_PROT_NONE,
         CUDA_ERROR_INVALID_DEVICE},
        {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READ, CUDA_ERROR_NOT_SUPPORTED},
        {{CU_MEM_LOCATION_TYPE_HOST, 0},
         CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
         CUDA_ERROR_NOT_SUPPORTED},
        {{CU_MEM_LOCATION_TYPE_DEVICE, 9},
         CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
         CUDA_ERROR_INVALID_DEVICE},
        {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, (CUmemAccess_flags)2, CUDA_ERROR_INVALID_VALUE},
        {{CU_MEM_LOCATION_TYPE_INVALID, 0},
         CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
         CUDA_ERROR_NOT_SUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CUmemAccessDesc two[2] = {{dev1, CU_MEM_ACCESS_FLAGS_PROT_NONE},
                                  {bad[i].loc, bad[i].flags}};
        CUresult rc = cuMemPoolSetAccess(pool, two, 2);
        if (rc != bad[i].want)
            st_failrc(__FILE__, __LINE__, "cuMemPoolSetAccess case", rc, bad[i].want);
        CK(cuMemPoolGetAccess(&fl, pool, &l1));
        CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    }
    EXPECT(cuMemPoolSetAccess(pool, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAccess(pool, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemPoolSetAccess(pool, acc, 0));
    EXPECT(cuMemPoolSetAccess(NULL, acc, 1), CUDA_ERROR_INVALID_VALUE);
    acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CK(cuMemPoolSetAccess(pool, &acc[1], 1));
    CK(cuMemPoolGetAccess(&fl, pool, &l1));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    EXPECT(cuMemPoolGetAccess(NULL, pool, &l0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAccess(&fl, pool, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAccess(&fl, NULL, &l0), CUDA_ERROR_INVALID_VALUE);
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    fl = CU_MEM_ACCESS_FLAGS_PROT_MAX;
    CK(cuMemPoolGetAccess(&fl, pool, &host));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    host = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 9};
    EXPECT(cuMemPoolGetAccess(&fl, pool, &host), CUDA_ERROR_INVALID_VALUE);

    // A maximum size; idle blocks are given up to make room within it.
    props.location = dev0;
    props.maxSize = 2 * MIB;
    CUmemoryPool small;
    CK(cuMemPoolCreate(&small, &props));
    set64(small, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ~0ull);
    CK(cuMemAllocFromPoolAsync(&p, MIB, small, s));
    CUdeviceptr q;
    EXPECT(cuMemAllocFromPoolAsync(&q, 2 * MIB, small, s), CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    CHECK(attr64(small, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == MIB);
    CK(cuMemAllocFromPoolAsync(&q, 2 * MIB, small, s));
    CHECK(attr64(small, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * MIB);
    CK(cuMemFreeAsync(q, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(small));

    // Properties this driver refuses.
    props.maxSize = 0;
    CUmemoryPool x;
    EXPECT(cuMemPoolCreate(NULL, &props), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolCreate(&x, NULL), CUDA_ERROR_INVALID_VALUE);
    CUmemPoolProps b = props;
    b.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
    EXPECT(try_create(b), CUDA_ERROR_INVALID_VALUE);
    b.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
    EXPECT(try_create(b), CUDA_ERROR_NOT_SUPPORTED);
    b = props;
    b.location.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(try_create(b), CUDA_ERROR_NOT_SUPPORTED);
    b.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    EXPECT(try_create(b), CUDA_ERROR_INVALID_VALUE);
    b = props;
    b.location.id = 9;
    EXPECT(try_create(b), CUDA_ERROR_INVALID_VALUE);
    b = props;
    b.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT(try_create(b), CUDA_ERROR_NOT_SUPPORTED);
    b.handleTypes = (CUmemAllocationHandleType)0x100;
    EXPECT(try_create(b), CUDA_ERROR_INVALID_VALUE);
    b = props;
    b.reserved[53] = 1;
    EXPECT(try_create(b), CUDA_ERROR_INVALID_VALUE);
    // Usage bits and the Windows security attributes are ignored, as by the real driver.
    b = props;
    b.usage = 0x1 | CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS;
    b.win32SecurityAttributes = &b;
    CK(try_create(b));
    CK(cuStreamDestroy(s));
    *out = pool;
}

// cuDeviceSetMemPool / cuMemSetMemPool choose what cuMemAllocAsync uses.
static void current_pool(CUmemoryPool d0, CUmemoryPool pool)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemoryPool cur = NULL, ph = NULL;
    CK(cuDeviceSetMemPool(0, pool));
    CK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == pool);
    CUdeviceptr p;
    CK(cuMemAllocAsync(&p, 64, s));
    CK(cuPointerGetAttribute(&ph, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    CHECK(ph == pool);
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    EXPECT(cuDeviceSetMemPool(1, pool), CUDA_ERROR_INVALID_VALUE); // not device 1's
    EXPECT(cuDeviceSetMemPool(0, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceSetMemPool(0, (CUmemoryPool)s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceSetMemPool(9, pool), CUDA_ERROR_INVALID_VALUE);
    CUmemLocation l0 = dev0, l1 = dev1;
    EXPECT(cuMemSetMemPool(&l1, CU_MEM_ALLOCATION_TYPE_PINNED, pool), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetMemPool(NULL, CU_MEM_ALLOCATION_TYPE_PINNED, pool), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetMemPool(&l0, CU_MEM_ALLOCATION_TYPE_MANAGED, pool), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetMemPool(&l0, CU_MEM_ALLOCATION_TYPE_PINNED, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemSetMemPool(&l0, CU_MEM_ALLOCATION_TYPE_PINNED, d0));
    CK(cuMemGetMemPool(&cur, &l0, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK(cur == d0);
    CK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == d0);
    // Left current for destroy_outstanding, which checks that destroying it undoes this.
    CK(cuMemSetMemPool(&l0, CU_MEM_ALLOCATION_TYPE_PINNED, pool));
    CK(cuStreamDestroy(s));
}

// Destroying a pool with an outstanding allocation succeeds; the allocation stays usable
// and the pool's memory goes with it.
static void destroy_outstanding(CUmemoryPool d0, CUmemoryPool pool, unsigned *pin)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    size_t before = free_mem();
    CUdeviceptr p, q;
    CK(cuMemAllocFromPoolAsync(&p, MIB, pool, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool));
    CUmemoryPool cur = NULL;
    CK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == d0);
    cuuint64_t v;
    EXPECT(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocFromPoolAsync(&q, 64, pool, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemsetD32Async(p, 9, MIB / 4, s));
    pin[0] = pin[3] = 0;
    CK(cuMemcpyDtoHAsync(pin, p + MIB - 16, 16, s));
    CK(cuStreamSynchronize(s));
    CHECK(pin[0] == 9 && pin[3] == 9);
    CHECK(free_mem() <= before - MIB);
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    CHECK(free_mem() == before);
    CK(cuStreamDestroy(s));
}

// cuMemFree of pool memory, double frees, frees of what is no allocation, stream-ordered
// free of cuMemAlloc memory.
static void frees(CUmemoryPool d0, unsigned *gate)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p, m;
    CK(cuMemAllocAsync(&p, 4096, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemFree(p));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    // A free already queued: a second one, or cuMemFree, is refused.
    hold(s, gate);
    CK(cuMemAllocAsync(&p, 4096, s));
    CK(cuMemFreeAsync(p, s));
    EXPECT(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    open_gate(gate);
    CK(cuStreamSynchronize(s));
    CK(cuMemAllocAsync(&p, 4096, s));
    EXPECT(cuMemFreeAsync(p + 8, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeAsync((CUdeviceptr)gate, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFreeAsync(0, s));
    int local;
    EXPECT(cuMemFreeAsync((CUdeviceptr)&local, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    // cuMemAlloc memory freed in stream order: gone when the stream gets there.
    size_t before = free_mem();
    CK(cuMemAlloc(&m, MIB));
    hold(s, gate);
    CK(cuMemFreeAsync(m, s));
    CHECK(free_mem() <= before - MIB);
    open_gate(gate);
    CK(cuStreamSynchronize(s));
    CHECK(free_mem() == before);
    EXPECT(cuMemFree(m), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
}

// Argument errors, and which calls need a current context.
static void errors(void)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = 1;
    int local = 0;
    EXPECT(cuMemAllocAsync(NULL, 64, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAllocAsync(&p, 0, s)); // a NULL pointer, as from the real driver
    CHECK(p == 0);
    EXPECT(cuMemAllocAsync(&p, 64, (CUstream)&local), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuMemAllocAsync(&p, (size_t)4 << 30, s), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuMemAllocFromPoolAsync(NULL, 64, NULL, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocFromPoolAsync(&p, 64, NULL, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocFromPoolAsync(&p, 64, (CUmemoryPool)&local, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocFromPoolAsync(&p, 64, (CUmemoryPool)s, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolTrimTo((CUmemoryPool)&local, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolTrimTo(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolDestroy(NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolDestroy((CUmemoryPool)s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAllocAsync(&p, 64, s));
    EXPECT(cuMemFreeAsync(p, (CUstream)&local), CUDA_ERROR_INVALID_HANDLE);
    // With no current context only the NULL and per-thread streams are unusable.
    CUcontext saved = NULL;
    CK(cuCtxPopCurrent(&saved));
    CUdeviceptr q = 0;
    EXPECT(cuMemAllocAsync(&q, 64, NULL), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuMemAllocAsync(&q, 64, CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuMemAllocAsync(NULL, 64, NULL), CUDA_ERROR_INVALID_CONTEXT); // the stream first
    EXPECT(cuMemFreeAsync(0, NULL), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuMemAllocAsync(&q, 64, s));
    CK(cuMemFreeAsync(q, s));
    CK(cuMemFreeAsync(p, s));
    CUmemoryPool d0;
    CK(cuDeviceGetDefaultMemPool(&d0, 0));
    CK(cuStreamSynchronize(s));
    CK(cuCtxPushCurrent(saved));
    CK(cuStreamDestroy(s));
}

// The _ptsz variants take stream 0 as the per-thread stream, which does not wait for other
// blocking streams; the plain ones take it as the legacy stream, which does.
static void per_thread(CUmemoryPool d0, unsigned *gate)
{
    CUresult (*alloc_pt)(CUdeviceptr *, size_t, CUstream) =
        dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz");
    CUresult (*pool_pt)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        dlsym(RTLD_DEFAULT, "cuMemAllocFromPoolAsync_ptsz");
    CUresult (*free_pt)(CUdeviceptr, CUstream) = dlsym(RTLD_DEFAULT, "cuMemFreeAsync_ptsz");
    CHECK(alloc_pt && pool_pt && free_pt);
    if (!alloc_pt || !pool_pt || !free_pt) return;
    CUstream sb;
    CK(cuStreamCreate(&sb, CU_STREAM_DEFAULT));
    hold(sb, gate);
    CUdeviceptr p;
    CK(alloc_pt(&p, 4096, NULL));
    CK(cuMemsetD32Async(p, 3, 1024, CU_STREAM_PER_THREAD));
    CK(free_pt(p, NULL));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CK(pool_pt(&p, 4096, d0, NULL));
    CK(free_pt(p, NULL));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CK(cuMemAllocAsync(&p, 4096, NULL));
    CK(cuMemFreeAsync(p, NULL));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) > 0);
    EXPECT(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    open_gate(gate);
    CK(cuStreamSynchronize(NULL));
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    CK(cuStreamDestroy(sb));
}

enum { THREADS = 4, ROUNDS = 50 };

// Allocates, writes, checks and frees in stream order, racing with other threads.
static void *worker(void *arg)
{
    CK(cuCtxSetCurrent((CUcontext)arg));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUfunction wp = st_fn("write_pattern"), cp = st_fn("check_pattern");
    unsigned *bad;
    CK(cuMemAllocHost((void **)&bad, 4));
    for (int r = 0; r < ROUNDS; r++) {
        unsigned long long n = 1000 + (unsigned long long)r * 37;
        unsigned seed = (unsigned)r * 7919u;
        CUdeviceptr d, errs;
        CK(cuMemAllocAsync(&d, n * 4, s));
        CK(cuMemAllocAsync(&errs, 4, s));
        CK(cuMemsetD32Async(errs, 0, 1, s));
        void *a[] = {&d, &n, &seed};
        CK(cuLaunchKernel(wp, 4, 1, 1, 128, 1, 1, 0, s, a, NULL));
        void *b[] = {&d, &n, &seed, &errs};
        CK(cuLaunchKernel(cp, 4, 1, 1, 128, 1, 1, 0, s, b, NULL));
        CK(cuMemcpyDtoHAsync(bad, errs, 4, s));
        CK(cuMemFreeAsync(d, s));
        CK(cuMemFreeAsync(errs, s));
        CK(cuStreamSynchronize(s));
        CHECK(*bad == 0);
    }
    CK(cuMemFreeHost(bad));
    CK(cuStreamDestroy(s));
    return NULL;
}

static void threads(CUmemoryPool d0)
{
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    set64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 16 * MIB);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, ctx) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
    set64(d0, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
}

void st_mempool(void)
{
    if (!st_mod) st_load();
    unsigned *pin, *gate;
    CK(cuMemAllocHost((void **)&pin, 8192));
    CK(cuMemAllocHost((void **)&gate, 4));
    CUmemoryPool d0 = NULL, pool = NULL;
    defaults(&d0);
    attributes(d0);
    stream_order(d0, pin);
    reuse_and_trim(d0, gate);
    created_pool(d0, &pool);
    current_pool(d0, pool);
    destroy_outstanding(d0, pool, pin);
    frees(d0, gate);
    errors();
    per_thread(d0, gate);
    threads(d0);
    CHECK(attr64(d0, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
    CK(cuMemFreeHost(pin));
    CK(cuMemFreeHost(gate));
}
