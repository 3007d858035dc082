// Batched copies: cuMemcpyBatchAsync (the first version, with failIdx), _v2 and their _ptsz
// twins (cuda.h declares the first version and the twins only for the driver's own build,
// so they are declared here). The batch's shape is checked by channel/copybatch.h as the
// client library checks it; then every copy's sides, before any moves (a bad one refuses
// the batch, failIdx its index); then each copy goes on the stream as cuMemcpyAsync would.
// A batch takes no stream but a real or per-thread one: the legacy NULL stream is refused,
// as documented. Zero-byte copies move nothing. An attribute asking its sources read
// during the call (CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL) returns once the stream ran
// the batch, which holds that and more. What the real driver answers for zero-byte copies
// and for location hints is to be confirmed on a GPU.
#include "cpudrv.h"

#include <stdlib.h>

#include "channel/copybatch.h"

#undef cuMemcpyBatchAsync
CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                            CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                            size_t *failIdx, CUstream hStream);
CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                 size_t *failIdx, CUstream hStream);
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                    size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                    size_t numAttrs, CUstream hStream);

// cpudrv_big held: both sides of every copy, into sides[2i] (source) and [2i + 1].
static CUresult classify(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                         int *sides, size_t *fail)
{
    for (size_t i = 0; i < count; i++) {
        if (!sizes[i]) continue;
        CUresult rc = cpudrv_unified_side(srcs[i], sizes[i], &sides[2 * i]);
        if (!rc) rc = cpudrv_unified_side(dsts[i], sizes[i], &sides[2 * i + 1]);
        if (rc) {
            if (fail) *fail = i;
            return rc;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail,
                      CUstream hs)
{
    if (fail) *fail = CHAN_COPY_BATCH_NOIDX;
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    int *sides = NULL;
    if ((rc = cpudrv_stream_get(hs, c, &s)) != CUDA_SUCCESS)
        ;
    else if (!hs || hs == CU_STREAM_LEGACY)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((rc = chan_copy_batch_check(dsts, srcs, sizes, count, attrs, idxs, nattrs)) ==
             CUDA_SUCCESS)
        rc = !(sides = calloc(2 * count, sizeof(*sides)))
                 ? CUDA_ERROR_OUT_OF_MEMORY
                 : classify(dsts, srcs, sizes, count, sides, fail);
    for (size_t i = 0; !rc && i < count; i++) {
        struct cpudrv_xfer x = {(unsigned char *)(uintptr_t)dsts[i],
                                (const unsigned char *)(uintptr_t)srcs[i],
                                sizes[i],
                                1,
                                1,
                                0,
                                0,
                                0,
                                0};
        rc = cpudrv_copy_submit(s, &x, 1, sides[2 * i], sides[2 * i + 1], NULL, NULL);
    }
    cpudrv_unlock();
    free(sides);
    for (size_t k = 0; !rc && k < nattrs; k++)
        if (attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL)
            return cuStreamSynchronize(hs);
    return rc;
}

CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                               CUstream hStream)
{
    return TR(batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream));
}

CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                            CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                            size_t *failIdx, CUstream hStream)
{
    return TR(batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream));
}

// The _ptsz twins: stream 0 is the per-thread stream.
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                    size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                    size_t numAttrs, CUstream hStream)
{
    return TR(batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL,
                    hStream ? hStream : CU_STREAM_PER_THREAD));
}

CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                 size_t *failIdx, CUstream hStream)
{
    return TR(batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx,
                    hStream ? hStream : CU_STREAM_PER_THREAD));
}
