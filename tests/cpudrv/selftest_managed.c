// Self-test: __managed__ variables (PTX .attribute(.managed) and a cubin's managed symbols),
// libraries' cuLibraryGetManaged, and the batch prefetch and discard calls.
#include "selftest.h"

#include <stdint.h>
#include <stdlib.h>

static const char managed_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                                  ".global .attribute(.managed) .align 4 .u32 m_one;\n"
                                  ".global .attribute( .managed ) .align 8 .b8 m_arr[100];\n"
                                  ".global .align 4 .u32 plain;\n";

static unsigned is_managed(CUdeviceptr p)
{
    unsigned m = 9;
    CK(cuPointerGetAttribute(&m, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    return m;
}

void st_managed_vars(void)
{
    CUmodule m;
    CK(cuModuleLoadData(&m, managed_ptx));
    CUdeviceptr one, arr, plain;
    size_t n = 0;
    CK(cuModuleGetGlobal(&one, &n, m, "m_one"));
    CHECK(n == 4 && is_managed(one) == 1);
    CK(cuModuleGetGlobal(&arr, &n, m, "m_arr"));
    CHECK(n == 100 && arr % 8 == 0 && is_managed(arr) == 1);
    CK(cuModuleGetGlobal(&plain, &n, m, "plain"));
    CHECK(n == 4 && is_managed(plain) == 0);
    // Managed memory of the driver's own: the host reaches it, cuMemFree does not.
    *(volatile uint32_t *)(uintptr_t)one = 7;
    uint32_t v = 0;
    CK(cuMemcpyDtoH(&v, one, 4));
    CHECK(v == 7);
    EXPECT(cuMemFree(one), CUDA_ERROR_INVALID_VALUE);
    CUmemLocation dev0 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CK(cuMemPrefetchAsync(arr, 100, dev0, 0, NULL));
    CK(cuStreamAttachMemAsync(NULL, arr, 0, CU_MEM_ATTACH_GLOBAL));
    EXPECT(cuStreamAttachMemAsync(NULL, arr, 1 << 20, CU_MEM_ATTACH_GLOBAL),
           CUDA_ERROR_INVALID_VALUE);
    CK(cuModuleUnload(m));

    // The cubin's: initial values, and a library's by cuLibraryGetManaged only.
    unsigned char *fat = st_read("managed.fatbin", NULL);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, fat, NULL, NULL, 0, NULL, NULL, 0));
    free(fat);
    CUdeviceptr init = 0, g = 0;
    CK(cuLibraryGetManaged(&init, &n, lib, "mv_init"));
    CHECK(n == 4 && *(volatile int *)(uintptr_t)init == 1234 && is_managed(init) == 1);
    CK(cuLibraryGetGlobal(&g, NULL, lib, "mv_init"));
    CHECK(g == init);
    CK(cuLibraryGetManaged(NULL, &n, lib, "mv_arr"));
    CHECK(n == 1024);
    EXPECT(cuLibraryGetManaged(NULL, NULL, lib, "mv_arr"), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuLibraryGetManaged(&g, &n, lib, "mv_plain"), CUDA_ERROR_NOT_FOUND);
    CK(cuLibraryGetGlobal(&g, &n, lib, "mv_plain"));
    CHECK(is_managed(g) == 0);
    EXPECT(cuLibraryGetManaged(&g, &n, (CUlibrary)&n, "mv_init"), CUDA_ERROR_INVALID_HANDLE);

    // Batches: shapes, ranges, streams; all or nothing.
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr mm, dm;
    CK(cuMemAllocManaged(&mm, 1 << 16, CU_MEM_ATTACH_GLOBAL));
    CK(cuMemAlloc(&dm, 4096));
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CUmemLocation locs[2] = {dev0, host};
    CUdeviceptr p[2] = {mm, init};
    size_t sz[2] = {4096, 4}, idx[2] = {0, 1};
    CK(cuMemPrefetchBatchAsync(p, sz, 2, locs, idx, 2, 0, s));
    int last = 9;
    CK(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, mm, 4096));
    CHECK(last == 0);
    CK(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, init, 4));
    CHECK(last == CU_DEVICE_CPU);
    p[1] = dm;
    EXPECT(cuMemPrefetchBatchAsync(p, sz, 2, &host, idx, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, mm, 4096));
    CHECK(last == 0); // refused whole: nothing recorded
    EXPECT(cuMemDiscardBatchAsync(p, sz, 2, 0, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemDiscardBatchAsync(p, sz, 1, 0, s));
    EXPECT(cuMemDiscardBatchAsync(p, sz, 1, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemDiscardBatchAsync(p, sz, 0, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemDiscardBatchAsync(p, sz, (size_t)-1, 0, s), CUDA_ERROR_INVALID_VALUE);
    sz[0] = (size_t)-1;
    EXPECT(cuMemDiscardBatchAsync(p, sz, 1, 0, s), CUDA_ERROR_INVALID_VALUE);
    sz[0] = 4096;
    idx[0] = 1;
    EXPECT(cuMemDiscardAndPrefetchBatchAsync(p, sz, 1, &host, idx, 1, 0, s),
           CUDA_ERROR_INVALID_VALUE);
    idx[0] = 0;
    CUmemLocation bad = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 99};
    EXPECT(cuMemDiscardAndPrefetchBatchAsync(p, sz, 1, &bad, idx, 1, 0, s),
           CUDA_ERROR_INVALID_DEVICE);
    CK(cuMemDiscardAndPrefetchBatchAsync(p, sz, 1, &host, idx, 1, 0, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemRangeGetAttribute(&last, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, mm, 4096));
    CHECK(last == CU_DEVICE_CPU);
    CK(cuMemFree(mm));
    CK(cuMemFree(dm));
    CK(cuStreamDestroy(s));
    CK(cuLibraryUnload(lib));
}
