/* vmm: virtual memory management of the driver API (cuMemCreate, cuMemAddressReserve,
 * cuMemMap, cuMemSetAccess), as PyTorch's expandable segments use it.
 *
 * Two physical allocations of 2 granules are mapped side by side into a reservation of 8
 * granules and given access in one call; a memset, kernels and copies cross the boundary
 * between them; the first allocation mapped a second time shows the same bytes; queries of
 * access, properties and pointers; memory released while mapped stays usable until it is
 * unmapped; errors both drivers give. One reservation stays mapped and one allocation
 * unreleased at exit: through the shim the server must release them when the client goes.
 *
 * Nothing printed depends on the GPU: only the granularity's shape is checked (a power of
 * two of at least 4096), sizes are in granules. */
#include "tests/progs/common.h"

#include <stdlib.h>
#include <string.h>

static CUfunction f_fill, f_inc;
static size_t g_n;       /* words on each side of a boundary that crossing work touches */
static uint32_t *g_host; /* 2 * g_n words */

static void fill(CUdeviceptr p, uint32_t v, unsigned long long n)
{
    void *args[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(f_fill, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

static void inc(CUdeviceptr p, unsigned long long n)
{
    void *args[] = {&p, &n};
    CHECK(cuLaunchKernel(f_inc, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

/* The n words at p, copied back in one copy, are all v. */
static void check_words(CUdeviceptr p, size_t n, uint32_t v, const char *what)
{
    memset(g_host, 0, n * 4);
    CHECK(cuMemcpyDtoH(g_host, p, n * 4));
    for (size_t i = 0; i < n; i++)
        REQUIRE(g_host[i] == v, "%s: word %zu is 0x%x, want 0x%x", what, i, g_host[i], v);
}

static CUmemAccessDesc rw_desc(CUdevice dev)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

/* Minimum and recommended granularity: powers of two of at least a page; the minimum. */
static size_t granularity(const CUmemAllocationProp *prop)
{
    size_t min = 0, rec = 0;
    CHECK(cuMemGetAllocationGranularity(&min, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(cuMemGetAllocationGranularity(&rec, prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    REQUIRE(min >= 4096 && (min & (min - 1)) == 0, "minimum granularity %zu", min);
    REQUIRE(rec >= 4096 && (rec & (rec - 1)) == 0, "recommended granularity %zu", rec);
    t_ok("granularity: minimum and recommended are powers of two >= 4096");
    return min;
}

/* Memset, kernels and copies across the boundary at edge between two mappings; scratch
 * (2 * g_n words) lies in the first mapping, away from the boundary. */
static void across(CUdeviceptr edge, CUdeviceptr scratch)
{
    CUdeviceptr lo = edge - g_n * 4;
    CHECK(cuMemsetD32(lo, 0x11, 2 * g_n));
    check_words(lo, 2 * g_n, 0x11, "memset across the boundary");
    t_ok("cuMemsetD32 across the boundary of two mappings, copied back in one copy");
    fill(lo, 0x22, 2 * g_n);
    inc(lo, 2 * g_n);
    CHECK(cuCtxSynchronize());
    check_words(lo, 2 * g_n, 0x23, "kernels across the boundary");
    t_ok("fill_u32 and inc_u32 across the boundary, copied back in one copy");
    t_fill_pattern(g_host, 2 * g_n * 4, 0x5eed);
    CHECK(cuMemcpyHtoD(lo, g_host, 2 * g_n * 4));
    CHECK(cuMemcpyDtoD(scratch, lo, 2 * g_n * 4));
    CHECK(cuMemcpyDtoD(lo + 4, scratch, 2 * g_n * 4 - 4));
    memset(g_host, 0, 2 * g_n * 4);
    CHECK(cuMemcpyDtoH(g_host, lo + 4, 2 * g_n * 4 - 4));
    size_t bad = t_pattern_mismatch(g_host, 2 * g_n * 4 - 4, 0x5eed);
    REQUIRE(bad == SIZE_MAX, "pattern copied across the boundary differs at byte %zu", bad);
    t_ok("host to device, device to device and back, each across the boundary");
}

/* The first allocation mapped again at second shows what first holds, both ways. */
static void shared(CUdeviceptr first, CUdeviceptr second, size_t size, CUdevice dev)
{
    CUmemAccessDesc d = rw_desc(dev);
    CHECK(cuMemSetAccess(second, size, &d, 1));
    fill(first, 0x33, 2 * g_n);
    CHECK(cuCtxSynchronize());
    check_words(second, 2 * g_n, 0x33, "second mapping after a kernel wrote the first");
    CHECK(cuMemsetD32(second + size - 2 * g_n * 4, 0x44, 2 * g_n));
    check_words(first + size - 2 * g_n * 4, 2 * g_n, 0x44,
                "first mapping after a memset of the second");
    t_ok("one allocation mapped twice: each mapping shows what the other wrote");
}

/* After cuMemRelease of both allocations: kernels still cross the boundary at edge, and
 * the first allocation's other mapping (ending at tail) sees its part. */
static void released(CUdeviceptr edge, CUdeviceptr tail)
{
    CUdeviceptr lo = edge - g_n * 4;
    fill(lo, 0x66, 2 * g_n);
    inc(lo, 2 * g_n);
    CHECK(cuCtxSynchronize());
    check_words(lo, 2 * g_n, 0x67, "released allocations");
    check_words(tail - g_n * 4, g_n, 0x67, "second mapping of a released allocation");
    t_ok("released while mapped: both allocations stay usable until unmapped");
}

/* Access, properties and pointer queries. */
static void queries(CUmemGenericAllocationHandle h, CUdeviceptr at, size_t size, CUdevice dev)
{
    CUmemLocation loc;
    memset(&loc, 0, sizeof loc);
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = dev;
    unsigned long long flags = 0;
    CHECK(cuMemGetAccess(&flags, &loc, at + 100));
    REQUIRE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess: %llu", flags);
    t_ok("cuMemGetAccess: the device reads and writes");
    CUmemAllocationProp p;
    memset(&p, 0xff, sizeof p);
    CHECK(cuMemGetAllocationPropertiesFromHandle(&p, h));
    REQUIRE(p.type == CU_MEM_ALLOCATION_TYPE_PINNED &&
                p.location.type == CU_MEM_LOCATION_TYPE_DEVICE && p.location.id == dev &&
                p.requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE,
            "properties: type %d location %d/%d handle types %d", (int)p.type, (int)p.location.type,
            p.location.id, (int)p.requestedHandleTypes);
    t_ok("cuMemGetAllocationPropertiesFromHandle: pinned, on the device, no handle types");
    int ord = -1;
    CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, at + 100));
    REQUIRE(ord == dev, "device ordinal %d", ord);
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at + 100));
    REQUIRE(type == CU_MEMORYTYPE_DEVICE, "memory type %u", type);
    t_ok("cuPointerGetAttribute: device memory of device 0");
    CUdeviceptr base = 0;
    size_t bytes = 0;
    CHECK(cuMemGetAddressRange(&base, &bytes, at + 100));
    REQUIRE(base == at && bytes == size, "cuMemGetAddressRange is not the mapping");
    t_ok("cuMemGetAddressRange: the mapping the address lies in");
}

int main(void)
{
    t_init("vmm", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    int supported = 0;
    CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                               dev));
    if (!supported) t_skip("device 0 has no virtual memory management");
    CUmodule mod = t_load_module("kernels.ptx");
    f_fill = t_get_function(mod, "fill_u32");
    f_inc = t_get_function(mod, "inc_u32");

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = granularity(&prop);
    g_n = g / 16; /* a quarter of a granule on each side */
    g_host = malloc(2 * g_n * 4);
    REQUIRE(g_host != NULL, "out of host memory");

    CUmemGenericAllocationHandle a = 0, b = 0;
    CHECK(cuMemCreate(&a, 2 * g, &prop, 0));
    CHECK(cuMemCreate(&b, 2 * g, &prop, 0));
    t_ok("cuMemCreate: two allocations of 2 granules");
    CUdeviceptr va = 0;
    CHECK(cuMemAddressReserve(&va, 8 * g, 0, 0, 0));
    REQUIRE(va != 0 && va % g == 0, "reservation not aligned to the granularity");
    t_ok("cuMemAddressReserve: 8 granules, aligned to the granularity");
    CHECK(cuMemMap(va, 2 * g, 0, a, 0));
    CHECK(cuMemMap(va + 2 * g, 2 * g, 0, b, 0));
    t_ok("cuMemMap: the two allocations at granules 0 and 2");
    CUmemAccessDesc d = rw_desc(dev);
    CHECK(cuMemSetAccess(va, 4 * g, &d, 1));
    t_ok("cuMemSetAccess: read-write over both mappings in one call");

    across(va + 2 * g, va);
    queries(b, va + 2 * g, 2 * g, dev);
    CHECK(cuMemMap(va + 6 * g, 2 * g, 0, a, 0));
    shared(va, va + 6 * g, 2 * g, dev);

    /* Errors: a range that is no reservation (one just freed), a range already mapped. An
     * unmap of reserved addresses with nothing mapped is no error (driver 580 on an H100). */
    CUdeviceptr gone = 0;
    CHECK(cuMemAddressReserve(&gone, 2 * g, 0, 0, 0));
    CHECK(cuMemAddressFree(gone, 2 * g));
    EXPECT_ERR(cuMemMap(gone, 2 * g, 0, b, 0));
    t_ok("cuMemMap outside any reservation fails");
    EXPECT_ERR(cuMemMap(va, 2 * g, 0, b, 0));
    t_ok("cuMemMap over a mapping fails");
    CHECK(cuMemUnmap(va + 4 * g, 2 * g));
    t_ok("cuMemUnmap of reserved addresses with nothing mapped succeeds");

    CHECK(cuMemRelease(a));
    CHECK(cuMemRelease(b));
    released(va + 2 * g, va + 8 * g);
    CHECK(cuMemUnmap(va, 2 * g));
    CHECK(cuMemUnmap(va + 2 * g, 2 * g));
    CHECK(cuMemUnmap(va + 6 * g, 2 * g));
    t_ok("cuMemUnmap of each mapping");
    CHECK(cuMemAddressFree(va, 8 * g));
    t_ok("cuMemAddressFree of the reservation");

    /* Left for the server: a mapped reservation and an allocation never released. */
    CUmemGenericAllocationHandle kept = 0, unmapped = 0;
    CUdeviceptr vk = 0;
    CHECK(cuMemCreate(&kept, 2 * g, &prop, 0));
    CHECK(cuMemCreate(&unmapped, 2 * g, &prop, 0));
    CHECK(cuMemAddressReserve(&vk, 4 * g, 0, 0, 0));
    CHECK(cuMemMap(vk + 2 * g, 2 * g, 0, kept, 0));
    CHECK(cuMemSetAccess(vk + 2 * g, 2 * g, &d, 1));
    fill(vk + 2 * g, 0x55, 2 * g_n);
    CHECK(cuCtxSynchronize());
    check_words(vk + 2 * g, 2 * g_n, 0x55, "mapping left at exit");
    t_ok("a mapped reservation and an unreleased allocation are left at exit");

    free(g_host);
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
