// Self-test: legacy and per-thread-stream entry points, stream attributes, capture status,
// and host unregistration that waits only for the work that uses the range.
#include "selftest.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static void *sym(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) st_fail(__FILE__, __LINE__, name);
    return p;
}

void st_variants(void)
{
    static const char *names[] = {
        "cuEventElapsedTime",
        "cuStreamWaitValue32",
        "cuStreamWriteValue64",
        "cuStreamDestroy",
        "cuEventDestroy",
        "cuCtxDestroy",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxReset",
        "cuDeviceGetUuid",
        "cuMemHostRegister",
        "cuCtxCreate",
        "cuCtxCreate_v2",
        "cuCtxCreate_v3",
        "cuMemcpyHtoDAsync_v2_ptsz",
        "cuMemcpyHtoD_v2_ptds",
        "cuLaunchKernel_ptsz",
        "cuStreamSynchronize_ptsz",
        "cuEventRecord_ptsz",
        "cuMemsetD2D32_v2_ptds",
        "cuMemcpy3DPeer_ptds",
        "cuStreamGetCtx_v2_ptsz",
        "cuStreamWaitValue32_ptsz",
        "cuStreamWaitValue32_v2_ptsz",
        "cuStreamGetAttribute_ptsz",
        "cuStreamIsCapturing_ptsz",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        sym(names[i]);
    // Only cu* names leave the library.
    CHECK(dlsym(RTLD_DEFAULT, "cpudrv_big") == NULL);
    CHECK(dlsym(RTLD_DEFAULT, "cpudrv_stream_submit") == NULL);

    // _ptds / _ptsz: stream 0 is the calling thread's per-thread stream.
    CUresult (*htod_ptds)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2_ptds");
    CUresult (*dtoh_ptds)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2_ptds");
    CUresult (*memset_ptds)(CUdeviceptr, unsigned, size_t) = sym("cuMemsetD32_v2_ptds");
    CUresult (*launch_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void **, void **) = sym("cuLaunchKernel_ptsz");
    CUresult (*query_ptsz)(CUstream) = sym("cuStreamQuery_ptsz");
    CUresult (*sync_ptsz)(CUstream) = sym("cuStreamSynchronize_ptsz");
    CUresult (*elapsed)(float *, CUevent, CUevent) = sym("cuEventElapsedTime");
    if (!htod_ptds || !dtoh_ptds || !memset_ptds || !launch_ptsz || !query_ptsz || !sync_ptsz ||
        !elapsed)
        return;
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 64));
    unsigned v = 0x1234, back = 0;
    CK(htod_ptds(d, &v, 4));
    CK(memset_ptds(d + 4, 7, 1));
    CK(dtoh_ptds(&back, d, 4));
    CHECK(back == 0x1234);
    unsigned long long ns = 100000000ull;
    CUdeviceptr flag = d + 8;
    unsigned one = 1;
    void *args[] = {&flag, &one, &ns};
    CK(launch_ptsz(st_fn("delay_set"), 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    EXPECT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    EXPECT(query_ptsz(NULL), CUDA_ERROR_NOT_READY);
    CK(sync_ptsz(NULL));
    CK(cuStreamQuery(CU_STREAM_PER_THREAD));
    CUevent a, b;
    CK(cuEventCreate(&a, 0));
    CK(cuEventCreate(&b, 0));
    CK(cuEventRecord(a, NULL));
    CK(cuEventRecord(b, NULL));
    CK(cuEventSynchronize(b));
    float ms = -1;
    CK(elapsed(&ms, a, b));
    CHECK(ms >= 0 && ms < 100);
    CK(cuEventDestroy(a));
    CK(cuEventDestroy(b));

    // Stream attributes are stored; a stream that does not capture reports NONE.
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUstreamAttrValue val;
    memset(&val, 0, sizeof val);
    val.priority = -3;
    CK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &val));
    int prio = 0;
    CK(cuStreamGetPriority(s, &prio));
    CHECK(prio == -3);
    val.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
    CK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &val));
    memset(&val, 0, sizeof val);
    CK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &val));
    CHECK(val.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC);
    EXPECT(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &val),
           CUDA_ERROR_INVALID_VALUE);
    CUstream s2;
    CK(cuStreamCreate(&s2, 0));
    CK(cuStreamCopyAttributes(s2, s));
    CK(cuStreamGetPriority(s2, &prio));
    CHECK(prio == -3);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    CK(cuStreamIsCapturing(s, &cs));
    CHECK(cs == CU_STREAM_CAPTURE_STATUS_NONE);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == CU_STREAM_CAPTURE_MODE_RELAXED);

    // Unregistering host memory waits for queued work that uses it, not for a stream
    // that is stuck on something else.
    unsigned *gate;
    CK(cuMemAllocHost((void **)&gate, 4));
    *gate = 0;
    CK(cuStreamWaitValue32(s, (CUdeviceptr)gate, 1, CU_STREAM_WAIT_VALUE_EQ));
    char *buf = malloc(4096);
    memset(buf, 3, 4096);
    CK(cuMemHostRegister(buf, 4096, 0));
    CK(cuMemcpyHtoDAsync(d, buf, 4, s2));
    double t = st_ms();
    CK(cuMemHostUnregister(buf));
    CHECK(st_ms() - t < 1000);
    CK(cuMemcpyDtoH(&back, d, 4));
    CHECK(back == 0x03030303u);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
    CK(cuStreamSynchronize(s));
    free(buf);
    CK(cuMemFreeHost(gate));
    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(s2));
    CK(cuMemFree(d));
}
