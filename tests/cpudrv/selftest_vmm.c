// Self-test: virtual memory management. Each part releases what it made, so device memory
// is as it found it at the end.
#define _GNU_SOURCE
#include "selftest.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define G ((size_t)2 << 20) // the granularity
#define MS 1000000ull       // nanoseconds

static CUmemAllocationProp dev_prop(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemGenericAllocationHandle create(size_t size, CUmemAllocationHandleType types)
{
    CUmemAllocationProp p = dev_prop(0);
    p.requestedHandleTypes = types;
    CUmemGenericAllocationHandle h = 0;
    CK(cuMemCreate(&h, size, &p, 0));
    return h;
}

static CUdeviceptr reserve(size_t size)
{
    CUdeviceptr p = 0;
    CK(cuMemAddressReserve(&p, size, 0, 0, 0));
    return p;
}

static void access_rw(CUdeviceptr p, size_t size, int dev)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(p, size, &d, 1));
}

static size_t free_mem(void)
{
    size_t fr = 0, total = 0;
    CK(cuMemGetInfo(&fr, &total));
    return fr;
}

static void fill(CUstream s, CUdeviceptr p, unsigned v, unsigned long long n)
{
    void *args[] = {&p, &v, &n};
    CK(cuLaunchKernel(st_fn("fill_u32"), 4, 1, 1, 128, 1, 1, 0, s, args, NULL));
}

// The n words at device address p all equal v.
static int words_are(CUdeviceptr p, size_t n, unsigned v)
{
    unsigned *h = malloc(n * 4);
    int ok = h && cuMemcpyDtoH(h, p, n * 4) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < n; i++)
        ok = h[i] == v;
    free(h);
    return ok;
}

// Support attributes, granularity, and the property checks.
static void granularity(void)
{
    int v = -1;
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    CHECK(v == 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            1));
    CHECK(v == 1);
    CUmemAllocationProp p = dev_prop(1);
    size_t g = 0;
    CK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(g == G);
    g = 0;
    CK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(g == G);
    EXPECT(cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)2),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAllocationGranularity(NULL, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAllocationGranularity(&g, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_INVALID_VALUE);
    p.location.id = 2;
    EXPECT(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_INVALID_VALUE);
    p = dev_prop(0);
    p.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
    EXPECT(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_INVALID_VALUE);
    p = dev_prop(0);
    p.location.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_NOT_SUPPORTED);
    p = dev_prop(0);
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    EXPECT(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_NOT_SUPPORTED);
    p.requestedHandleTypes = (CUmemAllocationHandleType)0x100;
    EXPECT(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_INVALID_VALUE);
}

// cuMemCreate/cuMemRelease, their accounting and errors, and the properties read back.
static void create_release(void)
{
    size_t before = free_mem();
    CUmemAllocationProp p = dev_prop(0), q;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CK(cuMemCreate(&h, 3 * G, &p, 0));
    CHECK(h != 0);
    CHECK(free_mem() == before - 3 * G);
    CK(cuMemGetAllocationPropertiesFromHandle(&q, h));
    CHECK(q.type == CU_MEM_ALLOCATION_TYPE_PINNED);
    CHECK(q.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(q.location.type == CU_MEM_LOCATION_TYPE_DEVICE && q.location.id == 0);
    CHECK(q.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_NONE);
    // Memory of device 1 counts there, not on device 0.
    p = dev_prop(1);
    CK(cuMemCreate(&h2, G, &p, 0));
    CHECK(free_mem() == before - 3 * G);
    CK(cuMemGetAllocationPropertiesFromHandle(&q, h2));
    CHECK(q.location.id == 1 && q.requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE);
    CK(cuMemRelease(h2));
    CK(cuMemRelease(h));
    CHECK(free_mem() == before);
    EXPECT(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAllocationPropertiesFromHandle(&q, h), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAllocationPropertiesFromHandle(NULL, h), CUDA_ERROR_INVALID_VALUE);
    // Sizes, flags, devices, NULLs.
    p = dev_prop(0);
    EXPECT(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemCreate(&h, G + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemCreate(&h, G, &p, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemCreate(NULL, G, &p, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemCreate(&h, G, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    p.location.id = 2;
    EXPECT(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_INVALID_DEVICE);
    p = dev_prop(0);
    p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    EXPECT(cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
    // More than the device has (1024 MiB in this test).
    p = dev_prop(0);
    EXPECT(cuMemCreate(&h, 600 * G, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(free_mem() == before);
}

// Reservations: alignment, the address hint, sizes, and what cuMemAddressFree accepts.
static void reservations(void)
{
    CUdeviceptr p = 0, q = 0;
    CK(cuMemAddressReserve(&p, 4 * G, 16 * G, 0, 0));
    CHECK(p && p % (16 * G) == 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    // Nothing mapped: no allocation is there, though cuPointerGetAttributes knows the range.
    unsigned mapped = 7;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_MAPPED};
    void *data[] = {&base, &size, &mapped};
    CK(cuPointerGetAttributes(3, attrs, data, p + 100));
    CHECK(base == p && size == 4 * G && mapped == 0);
    EXPECT(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    EXPECT(cuMemsetD8(p, 0, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressFree(p, 2 * G), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressFree(p + G, 3 * G), CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxSynchronize()); // no queued work: the addresses are given back at once
    CK(cuMemAddressFree(p, 4 * G));
    EXPECT(cuMemAddressFree(p, 4 * G), CUDA_ERROR_INVALID_VALUE);
    // A free, aligned hint is taken.
    CK(cuMemAddressReserve(&q, 2 * G, 0, p, 0));
    CHECK(q == p);
    // An unaligned or taken one is ignored.
    CUdeviceptr r = 0;
    CK(cuMemAddressReserve(&r, 2 * G, 0, q, 0));
    CHECK(r && r != q && r % G == 0);
    CK(cuMemAddressFree(r, 2 * G));
    CK(cuMemAddressReserve(&r, 2 * G, 0, q + 4096, 0));
    CHECK(r && r % G == 0);
    CK(cuMemAddressFree(r, 2 * G));
    CK(cuMemAddressFree(q, 2 * G));
    EXPECT(cuMemAddressReserve(&r, G + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressReserve(&r, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressReserve(&r, G, 3 * G, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressReserve(&r, G, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressReserve(NULL, G, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    unsigned local = 0;
    EXPECT(cuMemAddressFree((CUdeviceptr)&local, G), CUDA_ERROR_INVALID_VALUE);
}

// cuMemMap's checks: inside one reservation, aligned, over no other mapping, within the
// allocation, offset and flags 0, a live handle.
static void map_errors(void)
{
    CUmemGenericAllocationHandle h = create(2 * G, CU_MEM_HANDLE_TYPE_NONE);
    CUdeviceptr v = reserve(4 * G);
    unsigned local[4];
    EXPECT(cuMemMap((CUdeviceptr)local, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v + 4096, G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v, G + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v, 0, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v, G, G, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v, G, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v, 4 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);         // larger than h
    EXPECT(cuMemMap(v + 3 * G, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE); // past the end
    EXPECT(cuMemMap(v, 2 * G, 0, h + 8, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(v, 2 * G, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemMap(v + G, 2 * G, 0, h, 0));
    EXPECT(cuMemMap(v, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE); // overlaps it
    CK(cuMemMap(v + 3 * G, G, 0, h, 0));                           // a prefix of h
    EXPECT(cuMemAddressFree(v, 4 * G), CUDA_ERROR_INVALID_VALUE);  // mappings left
    // Unmap takes whole mappings only, one or several without a gap.
    EXPECT(cuMemUnmap(v + G, G), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemUnmap(v, 3 * G), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemUnmap(v + 2 * G, 2 * G), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemUnmap(v + G, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemUnmap(v + G, 3 * G));
    CK(cuMemUnmap(v + G, 2 * G)); // nothing mapped there now: no error (driver 580)
    CK(cuMemRelease(h));
    EXPECT(cuMemMap(v, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAddressFree(v, 4 * G));
}

// Before cuMemSetAccess a mapping cannot be used: copies and memsets fail, a kernel
// faults (sticky for its context, here a context of its own); then access errors.
static void no_access(void)
{
    CUmemGenericAllocationHandle h = create(G, CU_MEM_HANDLE_TYPE_NONE);
    CUdeviceptr v = reserve(2 * G);
    CK(cuMemMap(v, G, 0, h, 0));
    unsigned long long flags = 7;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CK(cuMemGetAccess(&flags, &loc, v + 64));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    unsigned word = 5, acc = 9;
    CK(cuPointerGetAttribute(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, v));
    CHECK(acc == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE);
    EXPECT(cuMemcpyHtoD(v, &word, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyDtoH(&word, v, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD32(v, 1, 4), CUDA_ERROR_INVALID_VALUE);
    CUcontext c;
    CK(cuCtxCreate(&c, NULL, 0, 0));
    fill(NULL, v, 1, 4);
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CK(cuCtxDestroy(c));
    // Access errors: NULLs, an unknown device, a host, bad flags, not whole mappings.
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT(cuMemSetAccess(v, G, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetAccess(v, G, &d, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetAccess(v, G / 2, &d, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetAccess(v, 2 * G, &d, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetAccess(v + G, G, &d, 1), CUDA_ERROR_INVALID_VALUE);
    d.location.id = 2;
    EXPECT(cuMemSetAccess(v, G, &d, 1), CUDA_ERROR_INVALID_DEVICE);
    d.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST, 0};
    EXPECT(cuMemSetAccess(v, G, &d, 1), CUDA_ERROR_INVALID_VALUE);
    d.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 0};
    d.flags = (CUmemAccess_flags)2;
    EXPECT(cuMemSetAccess(v, G, &d, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAccess(NULL, &loc, v), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAccess(&flags, NULL, v), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemGetAccess(&flags, &loc, v + G), CUDA_ERROR_INVALID_VALUE);
    loc.id = 2;
    EXPECT(cuMemGetAccess(&flags, &loc, v), CUDA_ERROR_INVALID_DEVICE);
    // Access for device 1 only, then read-only: both open it here (not per device).
    loc.id = 1;
    d.location.id = 1;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(v, G, &d, 1));
    CK(cuMemGetAccess(&flags, &loc, v));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    loc.id = 0;
    CK(cuMemGetAccess(&flags, &loc, v));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CK(cuMemsetD32(v, 3, 4));
    CUmemAccessDesc two[2] = {{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_NONE},
                              {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ}};
    CK(cuMemSetAccess(v, G, two, 2));
    CK(cuMemGetAccess(&flags, &loc, v));
    CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READ);
    CK(cuPointerGetAttribute(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, v));
    CHECK(acc == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ);
    CHECK(words_are(v, 4, 3));
    // All taken away: unusable again.
    two[1].flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CK(cuMemSetAccess(v, G, two, 2));
    EXPECT(cuMemcpyDtoH(&word, v, 4), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemUnmap(v, G));
    CK(cuMemRelease(h));
    CK(cuMemAddressFree(v, 2 * G));
}

// Two allocations mapped side by side are one span for memsets, kernels and every kind
// of copy; a span running past the last mapping fails. Pointer queries.
static void one_span(unsigned *pin)
{
    size_t before = free_mem();
    CUmemGenericAllocationHandle a = create(2 * G, CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle b = create(2 * G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(free_mem() == before - 4 * G);
    CUdeviceptr v = reserve(8 * G);
    CK(cuMemMap(v, 2 * G, 0, a, 0));
    CK(cuMemMap(v + 2 * G, 2 * G, 0, b, 0));
    access_rw(v, 4 * G, 0);
    CUdeviceptr edge = v + 2 * G; // the boundary
    size_t n = 2048;              // words on each side of it
    CK(cuMemsetD32(edge - n * 4, 0x11, 2 * n));
    CHECK(words_are(edge - n * 4, 2 * n, 0x11));
    fill(NULL, edge - n * 4, 0x22, 2 * n);
    CK(cuCtxSynchronize());
    CHECK(words_are(edge - n * 4, 2 * n, 0x22));
    // Device to device across the boundary, both ways, and unified.
    CK(cuMemsetD32(v, 0x33, n));
    CK(cuMemcpyDtoD(edge - 4, v, n * 4));
    CHECK(words_are(edge - 4, n, 0x33));
    CK(cuMemcpy(v + G, edge - 4, 16));
    CHECK(words_are(v + G, 4, 0x33));
    // Async copies through pinned memory, on a stream.
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < n; i++)
        pin[i] = (unsigned)i;
    CK(cuMemcpyHtoDAsync(edge - n * 2, pin, n * 4, s));
    CK(cuStreamSynchronize(s)); // pinned memory is read in place, when the copy runs
    memset(pin, 0, n * 4);
    CK(cuMemcpyDtoHAsync(pin, edge - n * 2, n * 4, s));
    CK(cuStreamSynchronize(s));
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= pin[i] == (unsigned)i;
    CHECK(ok);
    // A 2D memset whose rows straddle the boundary.
    CK(cuMemsetD2D8(edge - 4096, 8192, 0x44, 8192, 4));
    CHECK(words_are(edge - 4096, 2048, 0x44444444));
    // Past the end of the mapped span: refused, or a fault for a kernel.
    CUdeviceptr end = v + 4 * G;
    EXPECT(cuMemsetD32(end - 8, 0, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyHtoD(end - 8, pin, 16), CUDA_ERROR_INVALID_VALUE);
    // Pointer queries: the range is the reservation, the mapping is the mapping.
    CUdeviceptr base = 0;
    size_t size = 0;
    CK(cuMemGetAddressRange(&base, &size, edge + 100));
    CHECK(base == edge && size == 2 * G);
    CK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, edge + 100));
    CHECK(base == v);
    CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, edge + 100));
    CHECK(size == 8 * G);
    CK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, edge + 100));
    CHECK(base == edge);
    CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, edge + 100));
    CHECK(size == 2 * G);
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, v));
    CHECK(ord == 0);
    unsigned type = 0, ipc = 9;
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, v));
    CHECK(type == CU_MEMORYTYPE_DEVICE);
    CK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, v));
    CHECK(ipc == 0);
    unsigned long long types = 9;
    CK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, edge));
    CHECK(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    void *host = NULL;
    EXPECT(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, v),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, end),
           CUDA_ERROR_INVALID_VALUE);
    // cuMemFree does not take mappings.
    EXPECT(cuMemFree(v), CUDA_ERROR_INVALID_VALUE);
    // Released while mapped: still usable, still counted; gone with the unmap. Both
    // mappings go in one call.
    CK(cuMemRelease(a));
    CK(cuMemRelease(b));
    CHECK(free_mem() == before - 4 * G);
    fill(s, v, 0x55, 4 * G / 4);
    CK(cuStreamSynchronize(s));
    CHECK(words_are(edge - 16, 8, 0x55));
    CK(cuMemUnmap(v, 4 * G));
    CHECK(free_mem() == before);
    EXPECT(cuMemsetD8(v, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
    CK(cuMemAddressFree(v, 8 * G));
}

// One allocation mapped twice shows the same bytes at both addresses; it lives until its
// last mapping goes. cuMemRetainAllocationHandle gives its handle back.
static void shared_pages(void)
{
    size_t before = free_mem();
    CUmemGenericAllocationHandle h = create(2 * G, CU_MEM_HANDLE_TYPE_NONE), r = 0;
    CUdeviceptr v = reserve(8 * G), w = reserve(2 * G);
    CK(cuMemMap(v, 2 * G, 0, h, 0));
    CK(cuMemMap(v + 6 * G, 2 * G, 0, h, 0));
    CK(cuMemMap(w, G, 0, h, 0));
    access_rw(v, 2 * G, 0);
    access_rw(v + 6 * G, 2 * G, 0);
    access_rw(w, G, 0);
    CK(cuMemsetD32(v, 0x66, 1024));
    CHECK(words_are(v + 6 * G, 1024, 0x66));
    CHECK(words_are(w, 1024, 0x66));
    fill(NULL, v + 6 * G + G - 64, 0x77, 32); // across w's end: only v's see all of it
    CK(cuCtxSynchronize());
    CHECK(words_are(v + G - 64, 32, 0x77));
    CHECK(words_are(w + G - 64, 16, 0x77));
    // Retain from any address of a mapping: the same handle, one more release needed.
    CK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(w + 12345)));
    CHECK(r == h);
    EXPECT(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(v + 3 * G)),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemRetainAllocationHandle(NULL, (void *)(uintptr_t)w), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemRelease(h));
    CK(cuMemRelease(h));
    EXPECT(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    // Released: a retain through a mapping revives the handle.
    CK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)v));
    CHECK(r == h);
    CUmemAllocationProp q;
    CK(cuMemGetAllocationPropertiesFromHandle(&q, h));
    CK(cuMemRelease(h));
    CK(cuMemUnmap(v, 2 * G));
    CK(cuMemUnmap(w, G));
    CHECK(words_are(v + 6 * G, 1024, 0x66));
    CHECK(free_mem() == before - 2 * G);
    CK(cuMemUnmap(v + 6 * G, 2 * G));
    CHECK(free_mem() == before);
    CK(cuMemAddressFree(v, 8 * G));
    CK(cuMemAddressFree(w, 2 * G));
}

// cuMemUnmap waits for queued work that uses the mapping (it is synchronous): a delayed
// kernel's write lands, seen through a second mapping, and nothing faults.
static void unmap_waits(void)
{
    CUmemGenericAllocationHandle h = create(G, CU_MEM_HANDLE_TYPE_NONE);
    CUdeviceptr v = reserve(2 * G);
    CK(cuMemMap(v, G, 0, h, 0));
    CK(cuMemMap(v + G, G, 0, h, 0));
    access_rw(v, 2 * G, 0);
    CK(cuMemsetD32(v, 0, 16));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr flag = v + 64;
    unsigned val = 42;
    unsigned long long ns = 100 * MS;
    void *args[] = {&flag, &val, &ns};
    double t0 = st_ms();
    CK(cuLaunchKernel(st_fn("delay_set"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CK(cuMemUnmap(v, G));
    CHECK(st_ms() - t0 >= 90);
    CHECK(words_are(v + G + 64, 1, 42));
    CK(cuStreamSynchronize(s));
    // Work whose pointer lies in the mapping just before may run on into this one: the
    // unmap waits for it too.
    fill(s, v + G, 0, 16);
    CK(cuMemMap(v, G, 0, h, 0));
    access_rw(v, G, 0);
    flag = v + G - 4;
    t0 = st_ms();
    CK(cuLaunchKernel(st_fn("delay_set"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CK(cuMemUnmap(v + G, G));
    CHECK(st_ms() - t0 >= 90);
    CK(cuStreamSynchronize(s));
    CHECK(words_are(v + G - 4, 1, 42));
    CK(cuMemUnmap(v, G));
    CK(cuMemRelease(h));
    CK(cuStreamDestroy(s));
    CK(cuMemAddressFree(v, 2 * G));
}

// A file descriptor exported and imported again maps the same memory; only memory made
// for it can be exported, only such descriptors imported.
static void export_import(void)
{
    size_t before = free_mem();
    CUmemGenericAllocationHandle h = create(G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle plain = create(G, CU_MEM_HANDLE_TYPE_NONE), imp = 0;
    int fd = -1;
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(fd >= 0);
    EXPECT(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemExportToShareableHandle(NULL, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
           CUDA_ERROR_INVALID_VALUE);
    CK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CHECK(imp != 0);
    CHECK(free_mem() == before - 2 * G); // counted once, by its creator
    CUmemAllocationProp q;
    CK(cuMemGetAllocationPropertiesFromHandle(&q, imp));
    CHECK(q.location.id == 0 && q.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    CUdeviceptr v = reserve(2 * G);
    CK(cuMemMap(v, G, 0, h, 0));
    CK(cuMemMap(v + G, G, 0, imp, 0));
    access_rw(v, 2 * G, 0);
    CK(cuMemsetD32(v, 0x88, 256));
    CHECK(words_are(v + G, 256, 0x88));
    CK(cuMemRelease(h));
    CK(cuMemRelease(imp));
    CK(cuMemRelease(plain));
    CK(cuMemUnmap(v, 2 * G));
    CK(cuMemAddressFree(v, 2 * G));
    CHECK(free_mem() == before);
    int p[2];
    CHECK(pipe(p) == 0);
    EXPECT(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)p[0],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
           CUDA_ERROR_INVALID_VALUE);
    close(p[0]);
    close(p[1]);
    EXPECT(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)-1,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
           CUDA_ERROR_INVALID_VALUE);
}

#define THREADS 4
#define ROUNDS 40

struct job {
    CUdeviceptr at; // two granules of a shared reservation
    CUcontext ctx;
    unsigned id;
};

// Each thread maps, uses and unmaps chunks of one shared reservation, as allocators that
// grow a segment do, while the others do the same next to it.
static void *worker(void *arg)
{
    const struct job *j = arg;
    CUstream s;
    CK(cuCtxSetCurrent(j->ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (unsigned r = 0; r < ROUNDS; r++) {
        CUmemGenericAllocationHandle h = create(G, CU_MEM_HANDLE_TYPE_NONE);
        CK(cuMemMap(j->at, G, 0, h, 0));
        CK(cuMemMap(j->at + G, G, 0, h, 0));
        CK(cuMemRelease(h));
        access_rw(j->at, 2 * G, 0);
        unsigned v = j->id * 1000 + r;
        fill(s, j->at + G - 256, v, 128); // the end of h, then its start again
        CK(cuStreamSynchronize(s));
        CHECK(words_are(j->at + 2 * G - 256, 64, v));
        CHECK(words_are(j->at, 64, v));
        CK(cuMemUnmap(j->at, 2 * G));
    }
    CK(cuStreamDestroy(s));
    return NULL;
}

static void threads(void)
{
    size_t before = free_mem();
    CUdeviceptr v = reserve(THREADS * 2 * G);
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    struct job jobs[THREADS];
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        jobs[i] = (struct job){v + i * 2 * G, ctx, i};
        CHECK(pthread_create(&t[i], NULL, worker, &jobs[i]) == 0);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CK(cuMemAddressFree(v, THREADS * 2 * G));
    CHECK(free_mem() == before);
}

void st_vmm(void)
{
    if (!st_mod) st_load();
    unsigned *pin;
    CK(cuMemAllocHost((void **)&pin, 8192 * 4));
    granularity();
    create_release();
    reservations();
    map_errors();
    no_access();
    one_span(pin);
    shared_pages();
    unmap_waits();
    export_import();
    threads();
    CK(cuMemFreeHost(pin));
}
