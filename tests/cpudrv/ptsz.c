// The per-thread default stream variants (_ptsz: stream 0 means CU_STREAM_PER_THREAD;
// _ptds: synchronous calls ordered on the per-thread stream). Compiled with cuda.h in
// per-thread mode, so every function defined here gets its _ptsz/_ptds symbol and a
// prototype checked against the header; PLAIN() declares the regular entry point.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <cuda.h>

#define PLAIN(api, sym) extern __typeof__(api) plain_##sym __asm__(#sym)
#define PT(s) ((s) ? (s) : CU_STREAM_PER_THREAD)
#define PTS CU_STREAM_PER_THREAD

PLAIN(cuStreamSynchronize, cuStreamSynchronize);
PLAIN(cuStreamQuery, cuStreamQuery);
PLAIN(cuStreamWaitEvent, cuStreamWaitEvent);
PLAIN(cuStreamGetPriority, cuStreamGetPriority);
PLAIN(cuStreamGetFlags, cuStreamGetFlags);
PLAIN(cuStreamGetId, cuStreamGetId);
PLAIN(cuStreamGetDevice, cuStreamGetDevice);
PLAIN(cuStreamGetCtx, cuStreamGetCtx);
PLAIN(cuStreamGetCtx_v2, cuStreamGetCtx_v2);
PLAIN(cuStreamAddCallback, cuStreamAddCallback);
PLAIN(cuLaunchHostFunc, cuLaunchHostFunc);
PLAIN(cuEventRecord, cuEventRecord);
PLAIN(cuEventRecordWithFlags, cuEventRecordWithFlags);
PLAIN(cuLaunchKernel, cuLaunchKernel);
PLAIN(cuLaunchKernelEx, cuLaunchKernelEx);
PLAIN(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel);
PLAIN(cuStreamWaitValue32, cuStreamWaitValue32_v2);
PLAIN(cuStreamWaitValue64, cuStreamWaitValue64_v2);
PLAIN(cuStreamWriteValue32, cuStreamWriteValue32_v2);
PLAIN(cuStreamWriteValue64, cuStreamWriteValue64_v2);
PLAIN(cuStreamBatchMemOp, cuStreamBatchMemOp_v2);
PLAIN(cuMemcpyAsync, cuMemcpyAsync);
PLAIN(cuMemPrefetchBatchAsync, cuMemPrefetchBatchAsync);
PLAIN(cuMemDiscardBatchAsync, cuMemDiscardBatchAsync);
PLAIN(cuMemDiscardAndPrefetchBatchAsync, cuMemDiscardAndPrefetchBatchAsync);
PLAIN(cuMemcpyPeerAsync, cuMemcpyPeerAsync);
PLAIN(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync);
PLAIN(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
PLAIN(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
PLAIN(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);
PLAIN(cuMemcpyHtoAAsync, cuMemcpyHtoAAsync_v2);
PLAIN(cuMemcpyAtoHAsync, cuMemcpyAtoHAsync_v2);
PLAIN(cuMemcpy2DAsync, cuMemcpy2DAsync_v2);
PLAIN(cuMemcpy3DAsync, cuMemcpy3DAsync_v2);
PLAIN(cuMemsetD8Async, cuMemsetD8Async);
PLAIN(cuMemsetD16Async, cuMemsetD16Async);
PLAIN(cuMemsetD32Async, cuMemsetD32Async);
PLAIN(cuMemsetD2D8Async, cuMemsetD2D8Async);
PLAIN(cuMemsetD2D16Async, cuMemsetD2D16Async);
PLAIN(cuMemsetD2D32Async, cuMemsetD2D32Async);
PLAIN(cuMemcpyAtoD, cuMemcpyAtoD_v2);
PLAIN(cuMemcpyDtoA, cuMemcpyDtoA_v2);
PLAIN(cuMemcpyAtoA, cuMemcpyAtoA_v2);

// Completes a per-thread-stream operation the way a synchronous call does.
static CUresult ptsync(CUresult rc)
{
    return rc ? rc : plain_cuStreamSynchronize(PTS);
}

/* _ptsz: stream-ordered calls. */

// cuStreamSynchronize, stream 0 = per-thread stream.
CUresult cuStreamSynchronize(CUstream s)
{
    return plain_cuStreamSynchronize(PT(s));
}

// cuStreamQuery, stream 0 = per-thread stream.
CUresult cuStreamQuery(CUstream s)
{
    return plain_cuStreamQuery(PT(s));
}

// cuStreamWaitEvent, stream 0 = per-thread stream.
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    return plain_cuStreamWaitEvent(PT(s), e, flags);
}

// cuStreamGetPriority, stream 0 = per-thread stream.
CUresult cuStreamGetPriority(CUstream s, int *priority)
{
    return plain_cuStreamGetPriority(PT(s), priority);
}

// cuStreamGetFlags, stream 0 = per-thread stream.
CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
    return plain_cuStreamGetFlags(PT(s), flags);
}

// cuStreamGetId, stream 0 = per-thread stream.
CUresult cuStreamGetId(CUstream s, unsigned long long *id)
{
    return plain_cuStreamGetId(PT(s), id);
}

// cuStreamGetDevice, stream 0 = per-thread stream.
CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
    return plain_cuStreamGetDevice(PT(s), dev);
}

// cuStreamGetCtx, stream 0 = per-thread stream.
CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
    return plain_cuStreamGetCtx(PT(s), pctx);
}

// cuStreamGetCtx_v2, stream 0 = per-thread stream.
CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    return plain_cuStreamGetCtx_v2(PT(s), pCtx, pGreenCtx);
}

// cuStreamAddCallback, stream 0 = per-thread stream.
CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
    return plain_cuStreamAddCallback(PT(s), cb, data, flags);
}

// cuLaunchHostFunc, stream 0 = per-thread stream.
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
    return plain_cuLaunchHostFunc(PT(s), fn, data);
}

// cuEventRecord, stream 0 = per-thread stream.
CUresult cuEventRecord(CUevent e, CUstream s)
{
    return plain_cuEventRecord(e, PT(s));
}

// cuEventRecordWithFlags, stream 0 = per-thread stream.
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
    return plain_cuEventRecordWithFlags(e, PT(s), flags);
}

// cuLaunchKernel, stream 0 = per-thread stream.
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream s, void **params, void **extra)
{
    return plain_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, PT(s), params, extra);
}

// cuLaunchCooperativeKernel, stream 0 = per-thread stream.
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream s, void **params)
{
    return plain_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, PT(s), params);
}

// cuLaunchKernelEx, config->hStream 0 = per-thread stream.
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config) return plain_cuLaunchKernelEx(config, f, params, extra);
    CUlaunchConfig c = *config;
    c.hStream = PT(c.hStream);
    return plain_cuLaunchKernelEx(&c, f, params, extra);
}

// cuStreamBatchMemOp_v2, stream 0 = per-thread stream.
CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                            unsigned int flags)
{
    return plain_cuStreamBatchMemOp_v2(PT(s), count, ops, flags);
}

// cuStreamWaitValue32_v2, stream 0 = per-thread stream.
CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
    return plain_cuStreamWaitValue32_v2(PT(s), addr, v, flags);
}

// cuStreamWaitValue64_v2, stream 0 = per-thread stream.
CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
    return plain_cuStreamWaitValue64_v2(PT(s), addr, v, flags);
}

// cuStreamWriteValue32_v2, stream 0 = per-thread stream.
CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
    return plain_cuStreamWriteValue32_v2(PT(s), addr, v, flags);
}

// cuStreamWriteValue64_v2, stream 0 = per-thread stream.
CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
    return plain_cuStreamWriteValue64_v2(PT(s), addr, v, flags);
}

// cuMemcpyAsync, stream 0 = per-thread stream.
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return plain_cuMemcpyAsync(dst, src, n, PT(s));
}

// cuMemPrefetchBatchAsync, stream 0 = per-thread stream.
CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                 CUmemLocation *locs, size_t *idxs, size_t nlocs,
                                 unsigned long long flags, CUstream s)
{
    return plain_cuMemPrefetchBatchAsync(dptrs, sizes, count, locs, idxs, nlocs, flags, PT(s));
}

// cuMemDiscardBatchAsync, stream 0 = per-thread stream.
CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                unsigned long long flags, CUstream s)
{
    return plain_cuMemDiscardBatchAsync(dptrs, sizes, count, flags, PT(s));
}

// cuMemDiscardAndPrefetchBatchAsync, stream 0 = per-thread stream.
CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                           CUmemLocation *locs, size_t *idxs, size_t nlocs,
                                           unsigned long long flags, CUstream s)
{
    return plain_cuMemDiscardAndPrefetchBatchAsync(dptrs, sizes, count, locs, idxs, nlocs, flags,
                                                   PT(s));
}

// cuMemcpyPeerAsync, stream 0 = per-thread stream.
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                           size_t n, CUstream s)
{
    return plain_cuMemcpyPeerAsync(dst, dctx, src, sctx, n, PT(s));
}

// cuMemcpy3DPeerAsync, stream 0 = per-thread stream.
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    return plain_cuMemcpy3DPeerAsync(p, PT(s));
}

// cuMemcpyHtoDAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    return plain_cuMemcpyHtoDAsync_v2(dst, src, n, PT(s));
}

// cuMemcpyDtoHAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return plain_cuMemcpyDtoHAsync_v2(dst, src, n, PT(s));
}

// cuMemcpyDtoDAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return plain_cuMemcpyDtoDAsync_v2(dst, src, n, PT(s));
}

// cuMemcpyHtoAAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpyHtoAAsync(CUarray dst, size_t off, const void *src, size_t n, CUstream s)
{
    return plain_cuMemcpyHtoAAsync_v2(dst, off, src, n, PT(s));
}

// cuMemcpyAtoHAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpyAtoHAsync(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{
    return plain_cuMemcpyAtoHAsync_v2(dst, src, off, n, PT(s));
}

// cuMemcpy2DAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
    return plain_cuMemcpy2DAsync_v2(p, PT(s));
}

// cuMemcpy3DAsync_v2, stream 0 = per-thread stream.
CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream s)
{
    return plain_cuMemcpy3DAsync_v2(p, PT(s));
}

// cuMemsetD8Async, stream 0 = per-thread stream.
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return plain_cuMemsetD8Async(d, v, n, PT(s));
}

// cuMemsetD16Async, stream 0 = per-thread stream.
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return plain_cuMemsetD16Async(d, v, n, PT(s));
}

// cuMemsetD32Async, stream 0 = per-thread stream.
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return plain_cuMemsetD32Async(d, v, n, PT(s));
}

// cuMemsetD2D8Async, stream 0 = per-thread stream.
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h,
                           CUstream s)
{
    return plain_cuMemsetD2D8Async(d, pitch, v, w, h, PT(s));
}

// cuMemsetD2D16Async, stream 0 = per-thread stream.
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h,
                            CUstream s)
{
    return plain_cuMemsetD2D16Async(d, pitch, v, w, h, PT(s));
}

// cuMemsetD2D32Async, stream 0 = per-thread stream.
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h,
                            CUstream s)
{
    return plain_cuMemsetD2D32Async(d, pitch, v, w, h, PT(s));
}

/* _ptds: synchronous calls, ordered on the per-thread stream. */

// cuMemcpyHtoD_v2 on the per-thread stream.
CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
    return ptsync(plain_cuMemcpyHtoDAsync_v2(dst, src, n, PTS));
}

// cuMemcpyDtoH_v2 on the per-thread stream.
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
    return ptsync(plain_cuMemcpyDtoHAsync_v2(dst, src, n, PTS));
}

// cuMemcpyDtoD_v2 on the per-thread stream.
CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return ptsync(plain_cuMemcpyDtoDAsync_v2(dst, src, n, PTS));
}

// cuMemcpy on the per-thread stream.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return ptsync(plain_cuMemcpyAsync(dst, src, n, PTS));
}

// cuMemcpyPeer on the per-thread stream.
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
    return ptsync(plain_cuMemcpyPeerAsync(dst, dctx, src, sctx, n, PTS));
}

// cuMemcpy3DPeer on the per-thread stream.
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)
{
    return ptsync(plain_cuMemcpy3DPeerAsync(p, PTS));
}

// cuMemcpyHtoA_v2 on the per-thread stream.
CUresult cuMemcpyHtoA(CUarray dst, size_t off, const void *src, size_t n)
{
    return ptsync(plain_cuMemcpyHtoAAsync_v2(dst, off, src, n, PTS));
}

// cuMemcpyAtoH_v2 on the per-thread stream.
CUresult cuMemcpyAtoH(void *dst, CUarray src, size_t off, size_t n)
{
    return ptsync(plain_cuMemcpyAtoHAsync_v2(dst, src, off, n, PTS));
}

// cuMemcpyAtoD_v2 (no stream variant exists: ordered on the legacy stream).
CUresult cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    return plain_cuMemcpyAtoD_v2(dst, src, off, n);
}

// cuMemcpyDtoA_v2 (no stream variant exists: ordered on the legacy stream).
CUresult cuMemcpyDtoA(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    return plain_cuMemcpyDtoA_v2(dst, off, src, n);
}

// cuMemcpyAtoA_v2 (no stream variant exists: ordered on the legacy stream).
CUresult cuMemcpyAtoA(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
    return plain_cuMemcpyAtoA_v2(dst, doff, src, soff, n);
}

// cuMemcpy2D_v2 on the per-thread stream.
CUresult cuMemcpy2D(const CUDA_MEMCPY2D *p)
{
    return ptsync(plain_cuMemcpy2DAsync_v2(p, PTS));
}

// cuMemcpy2DUnaligned_v2 on the per-thread stream.
CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *p)
{
    return ptsync(plain_cuMemcpy2DAsync_v2(p, PTS));
}

// cuMemcpy3D_v2 on the per-thread stream.
CUresult cuMemcpy3D(const CUDA_MEMCPY3D *p)
{
    return ptsync(plain_cuMemcpy3DAsync_v2(p, PTS));
}

// cuMemsetD8_v2 on the per-thread stream.
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    return ptsync(plain_cuMemsetD8Async(d, v, n, PTS));
}

// cuMemsetD16_v2 on the per-thread stream.
CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n)
{
    return ptsync(plain_cuMemsetD16Async(d, v, n, PTS));
}

// cuMemsetD32_v2 on the per-thread stream.
CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n)
{
    return ptsync(plain_cuMemsetD32Async(d, v, n, PTS));
}

// cuMemsetD2D8_v2 on the per-thread stream.
CUresult cuMemsetD2D8(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h)
{
    return ptsync(plain_cuMemsetD2D8Async(d, pitch, v, w, h, PTS));
}

// cuMemsetD2D16_v2 on the per-thread stream.
CUresult cuMemsetD2D16(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h)
{
    return ptsync(plain_cuMemsetD2D16Async(d, pitch, v, w, h, PTS));
}

// cuMemsetD2D32_v2 on the per-thread stream.
CUresult cuMemsetD2D32(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h)
{
    return ptsync(plain_cuMemsetD2D32Async(d, pitch, v, w, h, PTS));
}

/* Stream attributes and capture status, stream 0 = per-thread stream. */

PLAIN(cuStreamGetAttribute, cuStreamGetAttribute);
PLAIN(cuStreamSetAttribute, cuStreamSetAttribute);
PLAIN(cuStreamCopyAttributes, cuStreamCopyAttributes);
PLAIN(cuStreamIsCapturing, cuStreamIsCapturing);

// cuStreamGetAttribute, stream 0 = per-thread stream.
CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
    return plain_cuStreamGetAttribute(PT(s), attr, value_out);
}

// cuStreamSetAttribute, stream 0 = per-thread stream.
CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    return plain_cuStreamSetAttribute(PT(s), attr, value);
}

// cuStreamCopyAttributes, stream 0 = per-thread stream.
CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
    return plain_cuStreamCopyAttributes(PT(dst), PT(src));
}

// cuStreamIsCapturing, stream 0 = per-thread stream.
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    return plain_cuStreamIsCapturing(PT(s), status);
}

/* The first (v1) stream memory operations: same prototypes, no header declaration. */

CUresult v1_wait32(CUstream s, CUdeviceptr a, cuuint32_t v,
                   unsigned f) __asm__("cuStreamWaitValue32_ptsz");
CUresult v1_wait64(CUstream s, CUdeviceptr a, cuuint64_t v,
                   unsigned f) __asm__("cuStreamWaitValue64_ptsz");
CUresult v1_write32(CUstream s, CUdeviceptr a, cuuint32_t v,
                    unsigned f) __asm__("cuStreamWriteValue32_ptsz");
CUresult v1_write64(CUstream s, CUdeviceptr a, cuuint64_t v,
                    unsigned f) __asm__("cuStreamWriteValue64_ptsz");
CUresult v1_batch(CUstream s, unsigned n, CUstreamBatchMemOpParams *ops,
                  unsigned f) __asm__("cuStreamBatchMemOp_ptsz");

// cuStreamWaitValue32_ptsz (v1): as the v2 one.
CUresult v1_wait32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f)
{
    return plain_cuStreamWaitValue32_v2(PT(s), a, v, f);
}

// cuStreamWaitValue64_ptsz (v1): as the v2 one.
CUresult v1_wait64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f)
{
    return plain_cuStreamWaitValue64_v2(PT(s), a, v, f);
}

// cuStreamWriteValue32_ptsz (v1): as the v2 one.
CUresult v1_write32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f)
{
    return plain_cuStreamWriteValue32_v2(PT(s), a, v, f);
}

// cuStreamWriteValue64_ptsz (v1): as the v2 one.
CUresult v1_write64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f)
{
    return plain_cuStreamWriteValue64_v2(PT(s), a, v, f);
}

// cuStreamBatchMemOp_ptsz (v1): refused, as the real driver refuses the first version.
CUresult v1_batch(CUstream s, unsigned n, CUstreamBatchMemOpParams *ops, unsigned f)
{
    (void)s, (void)n, (void)ops, (void)f;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Stream capture and graph launches, stream 0 = per-thread stream. */

PLAIN(cuStreamBeginCapture, cuStreamBeginCapture_v2);
PLAIN(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph);
PLAIN(cuStreamEndCapture, cuStreamEndCapture);
PLAIN(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3);
PLAIN(cuStreamUpdateCaptureDependencies, cuStreamUpdateCaptureDependencies_v2);
PLAIN(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams);
PLAIN(cuGraphUpload, cuGraphUpload);
PLAIN(cuGraphLaunch, cuGraphLaunch);

// cuStreamBeginCapture_v2, stream 0 = per-thread stream.
CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
    return plain_cuStreamBeginCapture_v2(PT(s), mode);
}

// cuStreamBeginCaptureToGraph, stream 0 = per-thread stream.
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                     const CUgraphEdgeData *data, size_t n,
                                     CUstreamCaptureMode mode)
{
    return plain_cuStreamBeginCaptureToGraph(PT(s), g, deps, data, n, mode);
}

// cuStreamEndCapture, stream 0 = per-thread stream.
CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    return plain_cuStreamEndCapture(PT(s), g);
}

// cuStreamGetCaptureInfo_v3, stream 0 = per-thread stream.
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                CUgraph *g, const CUgraphNode **deps, const CUgraphEdgeData **data,
                                size_t *n)
{
    return plain_cuStreamGetCaptureInfo_v3(PT(s), status, id, g, deps, data, n);
}

// cuStreamUpdateCaptureDependencies_v2, stream 0 = per-thread stream.
CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps,
                                           const CUgraphEdgeData *data, size_t n,
                                           unsigned int flags)
{
    return plain_cuStreamUpdateCaptureDependencies_v2(PT(s), deps, data, n, flags);
}

// cuGraphInstantiateWithParams, upload stream 0 = per-thread stream.
CUresult cuGraphInstantiateWithParams(CUgraphExec *x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p) return plain_cuGraphInstantiateWithParams(x, g, p);
    CUstream given = p->hUploadStream;
    p->hUploadStream = PT(given);
    CUresult rc = plain_cuGraphInstantiateWithParams(x, g, p);
    p->hUploadStream = given;
    return rc;
}

// cuGraphUpload, stream 0 = per-thread stream.
CUresult cuGraphUpload(CUgraphExec x, CUstream s)
{
    return plain_cuGraphUpload(x, PT(s));
}

// cuGraphLaunch, stream 0 = per-thread stream.
CUresult cuGraphLaunch(CUgraphExec x, CUstream s)
{
    return plain_cuGraphLaunch(x, PT(s));
}

/* The first capture entry points' per-thread variants: no header declaration. */

CUresult v1_begin_capture(CUstream s) __asm__("cuStreamBeginCapture_ptsz");
CUresult v1_capture_info(CUstream s, CUstreamCaptureStatus *status,
                         cuuint64_t *id) __asm__("cuStreamGetCaptureInfo_ptsz");
CUresult v2_capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *g,
                         const CUgraphNode **deps,
                         size_t *n) __asm__("cuStreamGetCaptureInfo_v2_ptsz");
CUresult v1_update_capture(CUstream s, CUgraphNode *deps, size_t n,
                           unsigned int flags) __asm__("cuStreamUpdateCaptureDependencies_ptsz");

// cuStreamBeginCapture_ptsz (v1: no mode, as the global one).
CUresult v1_begin_capture(CUstream s)
{
    return plain_cuStreamBeginCapture_v2(PT(s), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

// cuStreamGetCaptureInfo_ptsz (v1): status and id only.
CUresult v1_capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return plain_cuStreamGetCaptureInfo_v3(PT(s), status, id, NULL, NULL, NULL, NULL);
}

// cuStreamGetCaptureInfo_v2_ptsz: without edge data.
CUresult v2_capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *g,
                         const CUgraphNode **deps, size_t *n)
{
    return plain_cuStreamGetCaptureInfo_v3(PT(s), status, id, g, deps, NULL, n);
}

// cuStreamUpdateCaptureDependencies_ptsz (v1): without edge data.
CUresult v1_update_capture(CUstream s, CUgraphNode *deps, size_t n, unsigned int flags)
{
    return plain_cuStreamUpdateCaptureDependencies_v2(PT(s), deps, NULL, n, flags);
}
