/* Batched copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync, their versions and _ptsz
 * twins): the batch's shape as the driver documents it, checked the same way by the client
 * library (interpose/memcpybatch.c, memcpybatch3d.c), the CPU test driver
 * (tests/cpudrv/copybatch.c) and, for what travels, the server (server/memory/copybatch.c,
 * copybatch3d.c). The addresses are each end's own to check. */
#ifndef MPSSHIM_COPYBATCH_H
#define MPSSHIM_COPYBATCH_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The most copies one batch may name: a larger count is refused before any array is read,
 * since the arrays' lengths are only the caller's word (no program needs more). */
#define CHAN_COPY_BATCH_MAX (1u << 20)

/* What the failIdx of cuMemcpyBatchAsync (the first version) says for an error that
 * pertains to no one copy (the documented SIZE_MAX). */
#define CHAN_COPY_BATCH_NOIDX SIZE_MAX

/* One attribute set: a source access order of the enum (INVALID is not one) and no flag
 * but CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE. The location hints are hints, which the
 * driver ignores but for managed and system memory: passed as given. */
static inline int chan_copy_batch_order_ok(unsigned order, unsigned flags)
{
    return order >= CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && order <= CU_MEMCPY_SRC_ACCESS_ORDER_ANY &&
           (flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE) == 0;
}

static inline int chan_copy_batch_attr_ok(const CUmemcpyAttributes *a)
{
    return chan_copy_batch_order_ok(a->srcAccessOrder, a->flags);
}

/* A batch's shape: count copies of dsts/srcs/sizes, numAttrs attribute sets each applying
 * from attrsIdxs[k] on (the first index 0, each above the one before, all below count,
 * numAttrs at most count), each set valid. CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE. */
static inline CUresult chan_copy_batch_check(const CUdeviceptr *dsts, const CUdeviceptr *srcs,
                                             const size_t *sizes, size_t count,
                                             const CUmemcpyAttributes *attrs, const size_t *idxs,
                                             size_t nattrs)
{
    if (!dsts || !srcs || !sizes || count == 0 || count > CHAN_COPY_BATCH_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!attrs || !idxs || nattrs == 0 || nattrs > count || idxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < nattrs; k++)
        if (idxs[k] >= count || (k > 0 && idxs[k] <= idxs[k - 1]) ||
            !chan_copy_batch_attr_ok(&attrs[k]))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The attribute set copy i of a checked batch takes: the last whose first index is at
 * most i. */
static inline size_t chan_copy_batch_attr_of(const size_t *idxs, size_t nattrs, size_t i)
{
    size_t k = nattrs;
    while (k > 1 && idxs[k - 1] > i)
        k--;
    return k - 1;
}

/* ---- 3D batches (cuMemcpy3DBatchAsync) ---- */

/* One operand of a 3D batch operation as a side of a CUDA_MEMCPY3D of e-byte elements: a
 * pointer (a unified address; its rows rowLength elements apart, its slices layerHeight
 * rows, each 0 for packed, else at least the extent) or an array at an offset. -1 when
 * malformed. */
static inline int chan_copy3d_operand(const CUmemcpy3DOperand *o, size_t e, const CUextent3D *ext,
                                      CUmemorytype *type, CUdeviceptr *dev, CUarray *arr, size_t *x,
                                      size_t *y, size_t *z, size_t *pitch, size_t *height)
{
    if (o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
        *type = CU_MEMORYTYPE_ARRAY;
        *arr = o->op.array.array;
        *y = o->op.array.offset.y;
        *z = o->op.array.offset.z;
        return !*arr || __builtin_mul_overflow(o->op.array.offset.x, e, x) ? -1 : 0;
    }
    if (o->type != CU_MEMCPY_OPERAND_TYPE_POINTER || !o->op.ptr.ptr) return -1;
    size_t row = o->op.ptr.rowLength ? o->op.ptr.rowLength : ext->width;
    size_t layer = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : ext->height;
    if (row < ext->width || layer < ext->height) return -1;
    *type = CU_MEMORYTYPE_UNIFIED;
    *dev = o->op.ptr.ptr;
    *height = layer;
    return __builtin_mul_overflow(row, e, pitch) ? -1 : 0;
}

/* Operation op of a 3D batch as the CUDA_MEMCPY3D it amounts to, in bytes: selem and delem
 * the element sizes of its array operands (0 for a pointer); pointer to pointer copies
 * bytes, an array sets the element size, two arrays must agree. Each extent must be
 * nonzero, the source access order and flags valid. CUDA_ERROR_INVALID_VALUE otherwise. */
static inline CUresult chan_copy3d_batch_op(const CUDA_MEMCPY3D_BATCH_OP *op, size_t selem,
                                            size_t delem, CUDA_MEMCPY3D *p)
{
    memset(p, 0, sizeof(*p));
    size_t e = selem ? selem : delem ? delem : 1;
    const CUextent3D *ext = &op->extent;
    if (!chan_copy_batch_order_ok(op->srcAccessOrder, op->flags) || !ext->width || !ext->height ||
        !ext->depth || (selem && delem && selem != delem) ||
        __builtin_mul_overflow(ext->width, e, &p->WidthInBytes))
        return CUDA_ERROR_INVALID_VALUE;
    p->Height = ext->height;
    p->Depth = ext->depth;
    if (chan_copy3d_operand(&op->src, e, ext, &p->srcMemoryType, &p->srcDevice, &p->srcArray,
                            &p->srcXInBytes, &p->srcY, &p->srcZ, &p->srcPitch, &p->srcHeight) ||
        chan_copy3d_operand(&op->dst, e, ext, &p->dstMemoryType, &p->dstDevice, &p->dstArray,
                            &p->dstXInBytes, &p->dstY, &p->dstZ, &p->dstPitch, &p->dstHeight))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

#endif
