/* Batched copies (cuMemcpyBatchAsync, its versions and _ptsz twins): the batch's shape as
 * the driver documents it, checked the same way by the client library
 * (interpose/memcpybatch.c), the CPU test driver (tests/cpudrv/copybatch.c) and, for what
 * travels, the server (server/memory/copybatch.c). The addresses are each end's own to
 * check. */
#ifndef MPSSHIM_COPYBATCH_H
#define MPSSHIM_COPYBATCH_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* The most copies one batch may name: a larger count is refused before any array is read,
 * since the arrays' lengths are only the caller's word (no program needs more). */
#define CHAN_COPY_BATCH_MAX (1u << 20)

/* What the failIdx of cuMemcpyBatchAsync (the first version) says for an error that
 * pertains to no one copy (the documented SIZE_MAX). */
#define CHAN_COPY_BATCH_NOIDX SIZE_MAX

/* One attribute set: a source access order of the enum (INVALID is not one) and no flag
 * but CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE. The location hints are hints, which the
 * driver ignores but for managed and system memory: passed as given. */
static inline int chan_copy_batch_attr_ok(const CUmemcpyAttributes *a)
{
    return a->srcAccessOrder >= CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
           a->srcAccessOrder <= CU_MEMCPY_SRC_ACCESS_ORDER_ANY &&
           (a->flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE) == 0;
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

#endif
