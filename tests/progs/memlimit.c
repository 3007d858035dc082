/* memlimit: a client's device memory limit, as the server enforces it. Driven by
 * tests/limits.sh (and the GPU tier), which sets the limit in the client's environment:
 *
 *   memlimit limited MIB [--device D] [--hold FILE] [--others-unlimited]
 *       expects a limit of MIB MiB on device D (default 0): cuMemGetInfo shows it as the
 *       total; allocations (plain, pitched, arrays) succeed up to it and fail with
 *       CUDA_ERROR_OUT_OF_MEMORY beyond it; freeing, destroying an array or a context gives
 *       the room back. With --hold it prints `holding` once the whole limit is allocated
 *       and waits until FILE exists. It exits holding memory, an array and a context, so
 *       that the server has them to release. --others-unlimited: every other device shows
 *       its real total and takes more than MIB.
 *   memlimit unlimited MIB [--device D]
 *       expects no limit: the real total, and more than MIB allocated.
 *   memlimit uuid [D]
 *       prints device D's UUID as nvidia-smi does, "GPU-xxxxxxxx-xxxx-...".
 *
 * A memory limit has no native equivalent: this runs through the shim only. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define NCHUNKS 8

static void info(size_t *fr, size_t *total)
{
    CHECK(cuMemGetInfo(fr, total));
}

static void expect_free(uint64_t want, const char *when)
{
    size_t fr, total;
    info(&fr, &total);
    REQUIRE(fr == want, "%s: cuMemGetInfo free %zu, expected %llu", when, fr,
            (unsigned long long)want);
}

/* The context of device d, current. */
static CUcontext use_device(int d)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, d));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* Allocates more than `lim` bytes on the current device in chunks, then frees them all. */
static void takes_more_than(uint64_t lim, int d)
{
    CUdevice dev;
    size_t fr, total, real;
    CHECK(cuDeviceGet(&dev, d));
    CHECK(cuDeviceTotalMem(&real, dev));
    info(&fr, &total);
    REQUIRE(total == real, "device %d: cuMemGetInfo total %zu, device has %zu", d, total, real);
    t_ok("device %d: cuMemGetInfo total is the device's", d);
    uint64_t chunk = lim / NCHUNKS;
    CUdeviceptr p[NCHUNKS + 2];
    for (int i = 0; i < NCHUNKS + 2; i++)
        CHECK(cuMemAlloc(&p[i], chunk));
    for (int i = 0; i < NCHUNKS + 2; i++)
        CHECK(cuMemFree(p[i]));
    t_ok("device %d: more than the other client's limit allocated", d);
}

static void limited(uint64_t lim, int d, const char *hold, int others_unlimited)
{
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, d));
    size_t fr, total;
    info(&fr, &total);
    REQUIRE(total == lim, "cuMemGetInfo total %zu, expected the limit %llu", total,
            (unsigned long long)lim);
    REQUIRE(fr == lim, "cuMemGetInfo free %zu before any allocation, expected %llu", fr,
            (unsigned long long)lim);
    t_ok("cuMemGetInfo: the limit as total and free");

    CUdeviceptr big;
    EXPECT(cuMemAlloc(&big, lim + 1), CUDA_ERROR_OUT_OF_MEMORY);
    t_ok("one allocation beyond the limit: CUDA_ERROR_OUT_OF_MEMORY");

    uint64_t chunk = lim / NCHUNKS;
    CUdeviceptr p[NCHUNKS];
    for (int i = 0; i < NCHUNKS; i++)
        CHECK(cuMemAlloc(&p[i], chunk));
    CUdeviceptr extra;
    EXPECT(cuMemAlloc(&extra, chunk), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuMemAlloc(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
    size_t pitch;
    EXPECT(cuMemAllocPitch(&extra, &pitch, 512, 1, 4), CUDA_ERROR_OUT_OF_MEMORY);
    expect_free(0, "at the limit");
    t_ok("allocations up to the limit succeed, the next ones fail");

    /* Refusals leave the context working. */
    CHECK(cuMemsetD32(p[NCHUNKS - 1], 0x5a5a5a5a, chunk / 4));
    uint32_t *h = malloc(chunk);
    REQUIRE(h != NULL, "malloc");
    CHECK(cuMemcpyDtoH(h, p[NCHUNKS - 1], chunk));
    REQUIRE(t_bytes_mismatch(h, chunk, 0x5a) == SIZE_MAX, "memory at the limit reads back wrong");
    free(h);
    t_ok("memory at the limit works");

    if (hold) {
        printf("holding\n");
        fflush(stdout);
        while (access(hold, F_OK) != 0)
            usleep(20000);
    }

    CHECK(cuMemFree(p[0]));
    CHECK(cuMemFree(p[1]));
    expect_free(2 * chunk, "after two frees");
    CHECK(cuMemAlloc(&p[0], chunk));
    expect_free(chunk, "after one allocation again");
    t_ok("freed memory can be allocated again");

    /* Pitched: the pitch the driver chose counts, times the rows. */
    uint64_t rows = chunk / 4096;
    CUdeviceptr pp;
    EXPECT(cuMemAllocPitch(&pp, &pitch, 4096, rows + 1, 4), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocPitch(&pp, &pitch, 4000, rows / 2, 4));
    expect_free(chunk - (uint64_t)pitch * (rows / 2), "after a pitched allocation");
    CHECK(cuMemFree(pp));
    expect_free(chunk, "after freeing the pitched allocation");
    t_ok("pitched allocations count pitch times height");

    /* Arrays: their texels count. */
    CUDA_ARRAY_DESCRIPTOR ad = {
        .Width = 1024, .Height = chunk / 4096, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUarray arr;
    CHECK(cuArrayCreate(&arr, &ad));
    expect_free(0, "after an array of the remaining size");
    CUDA_ARRAY3D_DESCRIPTOR ad3 = {.Width = 16,
                                   .Height = 16,
                                   .Depth = 1,
                                   .Format = CU_AD_FORMAT_UNSIGNED_INT8,
                                   .NumChannels = 1};
    CUarray arr3;
    EXPECT(cuArray3DCreate(&arr3, &ad3), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuArrayDestroy(arr));
    expect_free(chunk, "after destroying the array");
    t_ok("arrays count against the limit");

    /* Stream-ordered allocations count when made and stop counting once their free is
     * enqueued; a pool's allocations count the same. */
    CUdeviceptr sa;
    EXPECT(cuMemAllocAsync(&sa, chunk + 1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocAsync(&sa, chunk, NULL));
    expect_free(0, "after a stream-ordered allocation of the remaining size");
    EXPECT(cuMemAllocAsync(&extra, 1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFreeAsync(sa, NULL));
    CHECK(cuStreamSynchronize(NULL));
    expect_free(chunk, "after freeing it in stream order");
    CUmemoryPool pool;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CHECK(cuMemPoolCreate(&pool, &props));
    EXPECT(cuMemAllocFromPoolAsync(&sa, chunk + 1, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAllocFromPoolAsync(&sa, chunk, pool, NULL));
    expect_free(0, "after a pool allocation of the remaining size");
    CHECK(cuMemFree(sa));
    expect_free(chunk, "after cuMemFree of the pool allocation");
    CHECK(cuMemPoolDestroy(pool));
    t_ok("stream-ordered allocations count against the limit");

    /* Physical memory of virtual memory management counts from cuMemCreate until it is
     * released and no longer mapped. */
    CUmemAllocationProp vp = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d}};
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &vp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    uint64_t vbytes = chunk / g * g;
    if (vbytes) {
        CUmemGenericAllocationHandle vh;
        CUdeviceptr va;
        EXPECT(cuMemCreate(&vh, vbytes + g, &vp, 0), CUDA_ERROR_OUT_OF_MEMORY);
        CHECK(cuMemCreate(&vh, vbytes, &vp, 0));
        expect_free(chunk - vbytes, "after cuMemCreate");
        CHECK(cuMemAddressReserve(&va, vbytes, 0, 0, 0));
        CHECK(cuMemMap(va, vbytes, 0, vh, 0));
        CHECK(cuMemRelease(vh));
        expect_free(chunk - vbytes, "released but still mapped");
        CHECK(cuMemUnmap(va, vbytes));
        expect_free(chunk, "after the last unmap");
        CHECK(cuMemAddressFree(va, vbytes));
    }
    t_ok("virtual memory counts against the limit while it exists");

    /* Destroying a context gives back what was allocated in it. */
    CUcontext prim, mine;
    CHECK(cuCtxGetCurrent(&prim));
    CHECK(cuCtxCreate(&mine, NULL, 0, dev));
    CUdeviceptr q;
    CHECK(cuMemAlloc(&q, chunk));
    EXPECT(cuMemAlloc(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuCtxDestroy(mine));
    CHECK(cuCtxSetCurrent(prim));
    expect_free(chunk, "after destroying a context that held memory");
    t_ok("a destroyed context's memory leaves the count");

    for (int i = 0; i < NCHUNKS; i++)
        if (i != 1) CHECK(cuMemFree(p[i]));
    expect_free(lim, "after freeing everything");
    CHECK(cuMemAlloc(&big, lim));
    CHECK(cuMemFree(big));
    t_ok("the whole limit in one allocation");

    if (others_unlimited) {
        int n;
        CHECK(cuDeviceGetCount(&n));
        for (int o = 0; o < n; o++)
            if (o != d) {
                use_device(o);
                takes_more_than(lim, o);
            }
        use_device(d);
    }

    /* Left for the server to release when we exit: memory, an array, a context, a pool
     * with memory in it, stream-ordered memory. */
    CHECK(cuMemAlloc(&p[0], chunk / 4));
    CHECK(cuMemPoolCreate(&pool, &props));
    CHECK(cuMemAllocFromPoolAsync(&sa, chunk / 4, pool, NULL));
    CHECK(cuMemAllocAsync(&sa, chunk / 4, NULL));
    if (vbytes) {
        CUmemGenericAllocationHandle vh;
        CUdeviceptr va;
        CHECK(cuMemCreate(&vh, g, &vp, 0));
        CHECK(cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
        CHECK(cuMemMap(va, g, 0, vh, 0));
    }
    ad.Height = 16;
    CHECK(cuArrayCreate(&arr, &ad));
    CHECK(cuCtxCreate(&mine, NULL, 0, dev));
    CHECK(cuMemAlloc(&q, chunk));
    t_ok("exits holding memory, an array, a context, pool and virtual memory");
}

int main(int argc, char **argv)
{
    t_init("memlimit", 120);
    if (argc < 2) {
        fprintf(stderr, "usage: memlimit limited|unlimited MIB [--device D] [--hold FILE] "
                        "[--others-unlimited] | memlimit uuid [D]\n");
        return 2;
    }
    CHECK(cuInit(0));
    int ndev;
    CHECK(cuDeviceGetCount(&ndev));
    if (strcmp(argv[1], "uuid") == 0) {
        int d = argc > 2 ? atoi(argv[2]) : 0;
        CUdevice dev;
        CUuuid u;
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDeviceGetUuid(&u, dev));
        const unsigned char *b = (const unsigned char *)u.bytes;
        printf("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n", b[0],
               b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
               b[14], b[15]);
        return 0;
    }
    REQUIRE(argc >= 3 && atoll(argv[2]) > 0, "no size in MiB");
    uint64_t lim = (uint64_t)atoll(argv[2]) * MIB;
    REQUIRE(lim % (NCHUNKS * 4096) == 0, "the size must be a multiple of 32 KiB");
    int d = 0, others = 0;
    const char *hold = NULL;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            d = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hold") == 0 && i + 1 < argc)
            hold = argv[++i];
        else if (strcmp(argv[i], "--others-unlimited") == 0)
            others = 1;
        else
            t_fail(__FILE__, __LINE__, "unknown argument %s", argv[i]);
    }
    if (d >= ndev) t_skip("needs %d devices, has %d", d + 1, ndev);
    if (others && ndev < 2) t_skip("needs 2 devices, has %d", ndev);
    use_device(d);
    if (strcmp(argv[1], "limited") == 0)
        limited(lim, d, hold, others);
    else if (strcmp(argv[1], "unlimited") == 0)
        takes_more_than(lim, d);
    else
        t_fail(__FILE__, __LINE__, "unknown mode %s", argv[1]);
    t_pass();
}
