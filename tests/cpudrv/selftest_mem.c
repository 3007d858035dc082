// Self-test: allocations, pointer attributes, host memory, copies, memsets, arrays.
#include "selftest.h"

#include <stdlib.h>
#include <string.h>

void st_memory(void)
{
    CUdeviceptr d = 0, d2 = 0, base = 0;
    size_t fr0, fr1, total, sz = 0, pitch = 0;
    CK(cuMemGetInfo(&fr0, &total));
    CHECK(total == (size_t)1024 << 20);
    CK(cuMemAlloc(&d, 1000));
    CHECK(d && d % 256 == 0);
    CK(cuMemGetInfo(&fr1, &total));
    CHECK(fr1 <= fr0 - 1000);
    EXPECT(cuMemAlloc(&d2, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAlloc(&d2, (size_t)2048 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    // Allocations are accounted, not touched: 900 MiB is fine, a second one is not.
    CK(cuMemAlloc(&d2, (size_t)900 << 20));
    EXPECT(cuMemAlloc(&base, (size_t)200 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuMemFree(d2));
    CK(cuMemGetAddressRange(&base, &sz, d + 10));
    CHECK(base == d && sz == 1000);
    EXPECT(cuMemGetAddressRange(&base, &sz, d + 1000), CUDA_ERROR_NOT_FOUND);
    unsigned mt = 0;
    int ord = -1;
    CUcontext ctx = NULL, cur;
    CK(cuCtxGetCurrent(&cur));
    CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 5));
    CHECK(mt == CU_MEMORYTYPE_DEVICE);
    CK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    CHECK(ctx == cur);
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    CHECK(ord == 0);
    CUdeviceptr start = 0;
    CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 7));
    CHECK(start == d);
    CK(cuPointerGetAttribute(&sz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 7));
    CHECK(sz == 1000);
    void *hp = NULL;
    EXPECT(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
           CUDA_ERROR_INVALID_VALUE);
    int local = 0;
    EXPECT(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&local),
           CUDA_ERROR_INVALID_VALUE);
    unsigned long long id1 = 0, id2 = 0;
    CUdeviceptr dp = 0;
    unsigned managed = 7;
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
    void *vals[] = {&id1, &managed, &dp};
    CK(cuPointerGetAttributes(3, as, vals, d));
    CHECK(id1 && managed == 0 && dp == d);
    CK(cuMemAlloc(&d2, 64));
    CK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d2));
    CHECK(id2 && id2 != id1);
    // cuPointerGetAttributes on an unknown pointer: defaults, not an error.
    mt = 99;
    void *vals2[] = {&mt};
    CUpointer_attribute as2[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
    CK(cuPointerGetAttributes(1, as2, vals2, (CUdeviceptr)&local));
    CHECK(mt == 0);
    CK(cuMemFree(d2));
    EXPECT(cuMemFree(d2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFree(d + 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFree((CUdeviceptr)&local), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr pd;
    EXPECT(cuMemAllocPitch(&pd, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAllocPitch(&pd, &pitch, 100, 10, 4));
    CHECK(pitch == 512);
    CK(cuMemGetAddressRange(NULL, &sz, pd));
    CHECK(sz == 5120);
    CK(cuMemFree(pd));
    // Pinned host memory: its device pointer is its address.
    void *h = NULL, *h2 = NULL;
    unsigned hf = 0;
    CK(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuMemHostGetDevicePointer(&dp, (char *)h + 16, 0));
    CHECK(dp == (CUdeviceptr)h + 16);
    EXPECT(cuMemHostGetDevicePointer(&dp, h, 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemHostGetFlags(&hf, h));
    CHECK(hf == (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)h));
    CHECK(mt == CU_MEMORYTYPE_HOST);
    CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)h + 1));
    CHECK(hp == (char *)h + 1);
    CK(cuMemAllocHost(&h2, 100));
    CK(cuMemFreeHost(h2));
    EXPECT(cuMemFreeHost(h2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFreeHost(&local), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostAlloc(&h2, 16, 0x80), CUDA_ERROR_INVALID_VALUE);
    // Registration: overlaps refused, unknown ranges not unregistered.
    char *buf = malloc(1 << 16);
    CK(cuMemHostRegister(buf, 8192, CU_MEMHOSTREGISTER_PORTABLE));
    EXPECT(cuMemHostRegister(buf + 4096, 8192, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    EXPECT(cuMemHostRegister(h, 64, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CK(cuMemHostRegister_v2(buf + 8192, 100, CU_MEMHOSTREGISTER_DEVICEMAP));
    CK(cuMemHostGetDevicePointer(&dp, buf + 8200, 0));
    CHECK(dp == (CUdeviceptr)(buf + 8200));
    EXPECT(cuMemHostUnregister(buf + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT(cuMemHostUnregister(&local), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CK(cuMemHostUnregister(buf));
    CK(cuMemHostUnregister(buf + 8192));
    EXPECT(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT(cuMemHostRegister(buf, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostRegister(buf, 64, 0x100), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostGetDevicePointer(&dp, buf, 0), CUDA_ERROR_INVALID_VALUE);
    free(buf);
    CK(cuMemFreeHost(h));
    CK(cuMemFree(d));
    CK(cuMemGetInfo(&fr1, &total));
    CHECK(fr1 == fr0);
}

void st_copies(void)
{
    enum { N = 1 << 16 };
    unsigned char *a = malloc(N), *b = malloc(N);
    for (int i = 0; i < N; i++)
        a[i] = (unsigned char)(i * 7 + 1);
    CUdeviceptr d, e;
    CK(cuMemAlloc(&d, N));
    CK(cuMemAlloc(&e, N));
    CK(cuMemcpyHtoD(d, a, N));
    CK(cuMemcpyDtoD(e, d, N));
    memset(b, 0, N);
    CK(cuMemcpyDtoH(b, e, N));
    CHECK(memcmp(a, b, N) == 0);
    // Out-of-range and unknown device pointers: INVALID_VALUE, never a crash.
    EXPECT(cuMemcpyHtoD(d + 1, a, N), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyDtoH(b, d + N, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyDtoD(0x10, d, 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyHtoD(d, NULL, 4), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemcpyHtoD(d, a, 0));
    // Unified cuMemcpy in all four directions.
    unsigned char *h2 = malloc(N);
    CK(cuMemcpy((CUdeviceptr)h2, d, N));
    CHECK(memcmp(h2, a, N) == 0);
    memset(h2, 0x5a, N);
    CK(cuMemcpy(e, (CUdeviceptr)h2, 100));
    CK(cuMemcpy(d + 100, e, 100));
    CK(cuMemcpy((CUdeviceptr)b, (CUdeviceptr)h2, N));
    CHECK(b[0] == 0x5a && b[N - 1] == 0x5a);
    CK(cuMemcpyDtoH(b, d, 300));
    CHECK(b[99] == a[99] && b[100] == 0x5a && b[199] == 0x5a && b[200] == a[200]);
    EXPECT(cuMemcpy(d + N - 4, e, 8), CUDA_ERROR_INVALID_VALUE);
    // Async copies complete in order on a stream; the caller's pageable source may be
    // overwritten as soon as HtoDAsync returns.
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    memset(h2, 1, N);
    CK(cuMemcpyHtoDAsync(d, h2, N, s));
    memset(h2, 2, N);
    CK(cuMemcpyDtoHAsync(b, d, N, s));
    CHECK(b[0] == 1 && b[N - 1] == 1); // pageable destination: landed on return
    CK(cuMemcpyDtoDAsync(e, d, N, s));
    CK(cuMemcpyAsync((CUdeviceptr)b, e, 16, s));
    CK(cuStreamSynchronize(s));
    CHECK(b[0] == 1);
    // Peer copies between two contexts' memory.
    CUcontext p0, p1;
    CK(cuCtxGetCurrent(&p0));
    CK(cuDevicePrimaryCtxRetain(&p1, 1));
    CK(cuCtxPushCurrent(p1));
    CUdeviceptr f;
    CK(cuMemAlloc(&f, N));
    CK(cuCtxPopCurrent(NULL));
    CK(cuMemcpyPeer(f, p1, e, p0, N));
    CK(cuMemcpyPeerAsync(d, p0, f, p1, N, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(b, d, N));
    CHECK(b[7] == 1);
    EXPECT(cuMemcpyPeer(f, (CUcontext)&d, e, p0, 4), CUDA_ERROR_INVALID_CONTEXT);
    // Memsets: values, alignment rules, 2D pitches, streams.
    CK(cuMemsetD8(d, 0xab, 10));
    CK(cuMemsetD16(d + 10, 0x1234, 3));
    CK(cuMemsetD32(d + 16, 0xdeadbeef, 4));
    CK(cuMemcpyDtoH(b, d, 40));
    CHECK(b[9] == 0xab && b[10] == 0x34 && b[11] == 0x12 && b[16] == 0xef && b[31] == 0xde &&
          b[32] == 1);
    EXPECT(cuMemsetD16(d + 1, 0, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD32(d + 2, 0, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD32(d + N - 4, 0, 2), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemsetD8(d, 0, N));
    CK(cuMemsetD2D8(d, 100, 7, 10, 3));
    CK(cuMemsetD2D16Async(d + 300, 100, 0x0909, 5, 2, s));
    CK(cuMemsetD2D32Async(d + 500, 100, 0x01010101, 2, 2, s));
    CK(cuMemsetD8Async(d + 700, 3, 4, s));
    CK(cuMemsetD16Async(d + 704, 0x0303, 2, s));
    CK(cuMemsetD32Async(d + 708, 0x03030303, 1, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(b, d, 800));
    CHECK(b[0] == 7 && b[9] == 7 && b[10] == 0 && b[100] == 7 && b[209] == 7 && b[210] == 0 &&
          b[300] == 9 && b[309] == 9 && b[310] == 0 && b[409] == 9 && b[507] == 1 && b[508] == 0 &&
          b[607] == 1 && b[700] == 3 && b[711] == 3 && b[712] == 0);
    EXPECT(cuMemsetD2D32(d, 6, 0, 2, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD2D8(d, 5, 0, 10, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD8Async(d, 0, 4, (CUstream)&f), CUDA_ERROR_INVALID_HANDLE);
    // Pinned host memory as a memset target (device-mapped).
    void *ph;
    CK(cuMemAllocHost(&ph, 64));
    CK(cuMemsetD32((CUdeviceptr)ph, 0x11111111, 16));
    CHECK(((unsigned *)ph)[15] == 0x11111111u);
    CK(cuMemFreeHost(ph));
    CK(cuStreamDestroy(s));
    CK(cuMemFree(d));
    CK(cuMemFree(e));
    CK(cuCtxPushCurrent(p1));
    CK(cuMemFree(f));
    CK(cuCtxPopCurrent(NULL));
    CK(cuDevicePrimaryCtxRelease(1));
    free(a);
    free(b);
    free(h2);
}

static unsigned char val3(size_t x, size_t y, size_t z)
{
    return (unsigned char)(x * 3 + y * 17 + z * 101);
}

void st_copies_3d(void)
{
    // A 40x30x5 host volume with pitch 48 and 32 rows per slice.
    enum { W = 40, H = 30, D = 5, HP = 48, HR = 32 };
    unsigned char *host = calloc(HP * HR * D, 1), *back = calloc(HP * HR * D, 1);
    for (size_t z = 0; z < D; z++)
        for (size_t y = 0; y < H; y++)
            for (size_t x = 0; x < W; x++)
                host[z * HP * HR + y * HP + x] = val3(x, y, z);
    CUdeviceptr dev;
    size_t dpitch;
    CK(cuMemAllocPitch(&dev, &dpitch, 64, 40 * D, 4));
    // 3D host -> device, a sub-box at (2,3,1) of size 20x10x3 into device at (4,5,0).
    CUDA_MEMCPY3D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = host;
    c.srcPitch = HP;
    c.srcHeight = HR;
    c.srcXInBytes = 2;
    c.srcY = 3;
    c.srcZ = 1;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dev;
    c.dstPitch = dpitch;
    c.dstHeight = 40;
    c.dstXInBytes = 4;
    c.dstY = 5;
    c.WidthInBytes = 20;
    c.Height = 10;
    c.Depth = 3;
    CK(cuMemcpy3D(&c));
    // ... then device -> array (whole box), array -> host with a 3D async copy.
    CUDA_ARRAY3D_DESCRIPTOR ad = {20, 10, 3, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CUarray arr;
    CK(cuArray3DCreate(&arr, &ad));
    CUDA_ARRAY3D_DESCRIPTOR got;
    CK(cuArray3DGetDescriptor(&got, arr));
    CHECK(got.Width == 20 && got.Height == 10 && got.Depth == 3 && got.NumChannels == 1);
    CUDA_MEMCPY3D c2 = {0};
    c2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.srcDevice = dev;
    c2.srcPitch = dpitch;
    c2.srcHeight = 40;
    c2.srcXInBytes = 4;
    c2.srcY = 5;
    c2.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c2.dstArray = arr;
    c2.WidthInBytes = 20;
    c2.Height = 10;
    c2.Depth = 3;
    CK(cuMemcpy3D(&c2));
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    CUDA_MEMCPY3D c3 = {0};
    c3.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c3.srcArray = arr;
    c3.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    c3.dstDevice = (CUdeviceptr)back;
    c3.dstPitch = 20;
    c3.dstHeight = 10;
    c3.WidthInBytes = 20;
    c3.Height = 10;
    c3.Depth = 3;
    CK(cuMemcpy3DAsync(&c3, s));
    CK(cuStreamSynchronize(s));
    int ok = 1;
    for (size_t z = 0; z < 3; z++)
        for (size_t y = 0; y < 10; y++)
            for (size_t x = 0; x < 20; x++)
                ok &= back[z * 200 + y * 20 + x] == val3(x + 2, y + 3, z + 1);
    CHECK(ok);
    // 1D array copies by byte offset.
    unsigned char lin[600];
    CK(cuMemcpyAtoH(lin, arr, 0, 600));
    CHECK(memcmp(lin, back, 600) == 0);
    CK(cuMemcpyHtoA(arr, 590, "0123456789", 10));
    CK(cuMemcpyAtoHAsync(lin, arr, 595, 5, s));
    CK(cuStreamSynchronize(s));
    CHECK(memcmp(lin, "56789", 5) == 0);
    EXPECT(cuMemcpyHtoA(arr, 595, "0123456789", 10), CUDA_ERROR_INVALID_VALUE);
    CUarray arr2;
    CUDA_ARRAY_DESCRIPTOR ad2 = {150, 1, CU_AD_FORMAT_FLOAT, 4};
    CK(cuArrayCreate(&arr2, &ad2));
    CUDA_ARRAY_DESCRIPTOR got2;
    CK(cuArrayGetDescriptor(&got2, arr2));
    CHECK(got2.Width == 150 && got2.NumChannels == 4 && got2.Format == CU_AD_FORMAT_FLOAT);
    CK(cuMemcpyAtoA(arr2, 8, arr, 0, 600));
    CUdeviceptr lin_d;
    CK(cuMemAlloc(&lin_d, 2400));
    CK(cuMemcpyAtoD(lin_d, arr2, 0, 2400));
    CK(cuMemcpyDtoA(arr, 0, lin_d + 8, 600));
    CK(cuMemcpyHtoAAsync(arr2, 0, "abcd", 4, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyAtoH(lin, arr2, 0, 12));
    CHECK(memcmp(lin, "abcd", 4) == 0 && lin[8] == back[0] && lin[11] == back[3]);
    CK(cuMemcpyAtoH(lin, arr, 0, 600));
    CHECK(memcmp(lin, back, 590) == 0);
    // 2D: device (pitched) -> host, with offsets; unaligned variant; async variant.
    CUDA_MEMCPY2D p = {0};
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = dev;
    p.srcPitch = dpitch;
    p.srcXInBytes = 4;
    p.srcY = 6;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = back;
    p.dstPitch = 30;
    p.dstXInBytes = 1;
    p.WidthInBytes = 20;
    p.Height = 9;
    memset(back, 0, HP * HR * D);
    CK(cuMemcpy2D(&p));
    CHECK(back[1] == val3(2, 4, 1) && back[30 + 20] == val3(21, 5, 1) && back[0] == 0 &&
          back[21] == 0);
    CK(cuMemcpy2DUnaligned(&p));
    p.dstPitch = 10; // narrower than the width
    EXPECT(cuMemcpy2D(&p), CUDA_ERROR_INVALID_VALUE);
    p.dstPitch = 30;
    p.srcY = 60 * D; // past the allocation
    EXPECT(cuMemcpy2DAsync(&p, s), CUDA_ERROR_INVALID_VALUE);
    p.srcY = 6;
    p.srcMemoryType = (CUmemorytype)9;
    EXPECT(cuMemcpy2D(&p), CUDA_ERROR_INVALID_VALUE);
    p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    p.srcArray = (CUarray)back;
    EXPECT(cuMemcpy2D(&p), CUDA_ERROR_INVALID_HANDLE);
    c.srcLOD = 1;
    EXPECT(cuMemcpy3D(&c), CUDA_ERROR_INVALID_VALUE);
    // 3D peer copy: device -> device between contexts, asynchronously.
    CUcontext cur;
    CK(cuCtxGetCurrent(&cur));
    CUDA_MEMCPY3D_PEER pp = {0};
    pp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    pp.srcDevice = dev;
    pp.srcPitch = dpitch;
    pp.srcHeight = 40;
    pp.srcContext = cur;
    pp.dstMemoryType = CU_MEMORYTYPE_HOST;
    pp.dstHost = back;
    pp.dstPitch = 64;
    pp.dstHeight = 40;
    pp.dstContext = cur;
    pp.WidthInBytes = 64;
    pp.Height = 40;
    pp.Depth = 2;
    CK(cuMemcpy3DPeerAsync(&pp, s));
    CK(cuStreamSynchronize(s));
    CHECK(back[5 * 64 + 4] == val3(2, 3, 1) && back[64 * 40 + 5 * 64 + 4] == val3(2, 3, 2));
    CK(cuMemcpy3DPeer(&pp));
    EXPECT(cuArrayDestroy((CUarray)back), CUDA_ERROR_INVALID_HANDLE);
    CK(cuArrayDestroy(arr));
    EXPECT(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    CK(cuArrayDestroy(arr2));
    CUDA_ARRAY3D_DESCRIPTOR bad = {10, 0, 4, CU_AD_FORMAT_FLOAT, 1, 0};
    EXPECT(cuArray3DCreate(&arr, &bad), CUDA_ERROR_INVALID_VALUE);
    bad.Depth = 0;
    bad.NumChannels = 3;
    EXPECT(cuArray3DCreate(&arr, &bad), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
    CK(cuMemFree(dev));
    CK(cuMemFree(lin_d));
    free(host);
    free(back);
}
