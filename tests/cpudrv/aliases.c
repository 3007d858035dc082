// Unversioned legacy entry points whose prototypes equal the current versions', and the
// older cuCtxCreate versions. cuda.h maps each of these names to the versioned one, so
// the macros are removed here to define the old symbols.
#include <cuda.h>

#undef cuEventElapsedTime
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuCtxDestroy
#undef cuCtxPopCurrent
#undef cuCtxPushCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuDeviceGetUuid
#undef cuMemHostRegister
#undef cuCtxCreate

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                            unsigned int flags);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuEventDestroy(CUevent hEvent);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuCtxPopCurrent(CUcontext *pctx);
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev);

// Same as cuEventElapsedTime_v2.
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

// Same as cuStreamWaitValue32_v2.
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return cuStreamWaitValue32_v2(s, addr, value, flags);
}

// The first version: the real driver (580.159.04, H200) refuses it; _v2 is the call.
CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                            unsigned int flags)
{
    (void)s, (void)count, (void)ops, (void)flags;
    return CUDA_ERROR_NOT_SUPPORTED;
}

// Same as cuStreamWaitValue64_v2.
CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return cuStreamWaitValue64_v2(s, addr, value, flags);
}

// Same as cuStreamWriteValue32_v2.
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return cuStreamWriteValue32_v2(s, addr, value, flags);
}

// Same as cuStreamWriteValue64_v2.
CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return cuStreamWriteValue64_v2(s, addr, value, flags);
}

// Same as cuStreamDestroy_v2.
CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

// Same as cuEventDestroy_v2.
CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

// Same as cuCtxDestroy_v2.
CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

// Same as cuCtxPopCurrent_v2.
CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

// Same as cuCtxPushCurrent_v2.
CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

// Same as cuDevicePrimaryCtxRelease_v2.
CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

// Same as cuDevicePrimaryCtxReset_v2.
CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

// Same as cuDevicePrimaryCtxSetFlags_v2.
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

// Same as cuDeviceGetUuid_v2.
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

// Same as cuMemHostRegister_v2.
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

// cuCtxCreate without creation parameters.
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

// cuCtxCreate without creation parameters.
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

// cuCtxCreate with execution affinity (only an empty list is supported).
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev)
{
    CUctxCreateParams p = {paramsArray, numParams, NULL};
    return cuCtxCreate_v4(pctx, &p, flags, dev);
}
