// Batched copies: cuMemcpyBatchAsync and cuMemcpy3DBatchAsync (the first versions, with
// failIdx), _v2 and their _ptsz twins (cuda.h declares the first versions and the twins only
// for the driver's own build, so they are declared here). The batch's shape is checked by
// channel/copybatch.h as the client library checks it (a 3D operation becomes the
// CUDA_MEMCPY3D it amounts to there); then every copy's sides in order, each going on the
// stream as cuMemcpyAsync or cuMemcpy3DAsync would; a bad one refuses the batch there, failIdx
// its index, the copies before it made (the real driver's way, 580.159.04). A batch takes no
// stream but a real or per-thread one: the legacy NULL stream is refused, as documented, and
// so is NULL under a _ptsz twin (the real driver's way too). Zero-byte copies move nothing. An
// attribute asking its sources read during the call (CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL)
// returns once the stream ran the batch, which holds that and more. What the real driver
// answers for zero-byte copies and for location hints is to be confirmed on a GPU.
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

// One checked copy of a batch, ready to submit.
struct bop {
    struct cpudrv_xfer x;
    int scls, dcls;
    struct cpudrv_array *sa, *da; // arrays addressed (3D), else NULL
};

// cpudrv_big held (taken by the caller with cpudrv_enter): submits the n checked copies on s
// in order, then lets go of the lock and ops; waits for the stream where `during` (a
// source to be read during the call).
// rc: the batch's answer (its first n copies are submitted all the same).
static CUresult submit(struct cpudrv_stream *s, struct bop *ops, size_t n, CUresult rc, int during,
                       CUstream hs)
{
    CUresult sr = CUDA_SUCCESS;
    for (size_t i = 0; !sr && i < n; i++)
        sr = cpudrv_copy_submit(s, &ops[i].x, 1, ops[i].scls, ops[i].dcls,
                                ops[i].sa ? &ops[i].sa->o : NULL, ops[i].da ? &ops[i].da->o : NULL);
    cpudrv_unlock();
    free(ops);
    if (sr) return sr;
    return !rc && during ? cuStreamSynchronize(hs) : rc;
}

// Enters the driver (cpudrv_big held after, but where *entered is 0) and resolves the
// batch's stream: never the legacy NULL stream. failIdx, where asked, says no copy yet.
static CUresult batch_begin(CUstream hs, size_t *fail, struct cpudrv_stream **s, int *entered)
{
    if (fail) *fail = CHAN_COPY_BATCH_NOIDX;
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    *entered = !rc;
    if (!rc) rc = cpudrv_stream_get(hs, c, s);
    return rc ? rc : !hs || hs == CU_STREAM_LEGACY ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// cpudrv_big held: every copy's sides; *ok: how many come before a bad one.
static CUresult classify(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                         struct bop *ops, size_t *fail, size_t *ok)
{
    for (size_t i = 0; i < count; *ok = ++i) {
        if (!sizes[i]) continue;
        CUresult rc = cpudrv_unified_side(srcs[i], sizes[i], &ops[i].scls);
        if (!rc) rc = cpudrv_unified_side(dsts[i], sizes[i], &ops[i].dcls);
        if (rc) {
            if (fail) *fail = i;
            return rc;
        }
        ops[i].x = (struct cpudrv_xfer){.dst = (unsigned char *)(uintptr_t)dsts[i],
                                        .src = (const unsigned char *)(uintptr_t)srcs[i],
                                        .width = sizes[i],
                                        .height = 1,
                                        .depth = 1};
    }
    return CUDA_SUCCESS;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail,
                      CUstream hs)
{
    struct cpudrv_stream *s = NULL;
    struct bop *ops = NULL;
    int entered;
    size_t ok = 0;
    CUresult rc = batch_begin(hs, fail, &s, &entered);
    if (!entered) return rc;
    if (!rc &&
        (rc = chan_copy_batch_check(dsts, srcs, sizes, count, attrs, idxs, nattrs)) == CUDA_SUCCESS)
        rc = !(ops = calloc(count, sizeof(*ops)))
                 ? CUDA_ERROR_OUT_OF_MEMORY
                 : classify(dsts, srcs, sizes, count, ops, fail, &ok);
    int during = 0;
    for (size_t k = 0; !rc && k < nattrs; k++)
        during |= attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    return submit(s, ops, ok, rc, during, hs);
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

// The _ptsz twins: a batch takes no NULL stream there either.
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                    size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                    size_t numAttrs, CUstream hStream)
{
    return TR(batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream));
}

CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                 size_t *failIdx, CUstream hStream)
{
    return TR(batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream));
}

/* ---------------------------------------------------------------- 3D batches */

#undef cuMemcpy3DBatchAsync
CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                              unsigned long long flags, CUstream hStream);
CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                                   unsigned long long flags, CUstream hStream);
CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                      unsigned long long flags, CUstream hStream);

// cpudrv_big held: the element size of an array operand, 0 for a pointer (1 for an array
// this driver does not know, which resolving it then refuses).
static size_t elsize(const CUmemcpy3DOperand *o)
{
    if (o->type != CU_MEMCPY_OPERAND_TYPE_ARRAY) return 0;
    struct cpudrv_array *a = cpudrv_obj_find(o->op.array.array, CPUDRV_K_ARRAY);
    return a ? a->elsize : 1;
}

// cpudrv_big held: every operation resolved into ops; *ok: how many before a bad one.
static CUresult resolve3d(const CUDA_MEMCPY3D_BATCH_OP *list, size_t n, struct bop *ops, size_t *ok)
{
    for (size_t i = 0; i < n; *ok = ++i) {
        CUDA_MEMCPY3D p;
        CUresult rc =
            chan_copy3d_batch_op(&list[i], elsize(&list[i].src), elsize(&list[i].dst), &p);
        if (!rc)
            rc = cpudrv_copy3d_resolve(&p, &ops[i].x, &ops[i].scls, &ops[i].dcls, &ops[i].sa,
                                       &ops[i].da);
        if (rc) return rc; // failIdx names none (the real driver's way, 580.159.04)
    }
    return CUDA_SUCCESS;
}

static CUresult batch3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *list, size_t *fail,
                        unsigned long long flags, CUstream hs)
{
    struct cpudrv_stream *s = NULL;
    struct bop *ops = NULL;
    int entered;
    size_t ok = 0;
    CUresult rc = batch_begin(hs, fail, &s, &entered);
    if (!entered) return rc;
    if (!rc && (!list || !n || n > CHAN_COPY_BATCH_MAX || flags)) rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = !(ops = calloc(n, sizeof(*ops))) ? CUDA_ERROR_OUT_OF_MEMORY
                                              : resolve3d(list, n, ops, &ok);
    int during = 0;
    for (size_t i = 0; !rc && i < n; i++)
        during |= list[i].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    return submit(s, ops, ok, rc, during, hs);
}

CUresult cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                 unsigned long long flags, CUstream hStream)
{
    return TR(batch3d(numOps, opList, NULL, flags, hStream));
}

CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                              unsigned long long flags, CUstream hStream)
{
    return TR(batch3d(numOps, opList, failIdx, flags, hStream));
}

CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                      unsigned long long flags, CUstream hStream)
{
    return TR(batch3d(numOps, opList, NULL, flags, hStream));
}

CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                                   unsigned long long flags, CUstream hStream)
{
    return TR(batch3d(numOps, opList, failIdx, flags, hStream));
}
