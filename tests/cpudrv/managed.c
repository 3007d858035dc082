// Managed memory's advice, prefetches and stream attachment. Managed memory here is host
// memory (memory.c, cuMemAllocManaged) that kernels reach at its address: nothing migrates,
// so advice and prefetches are checked and recorded for cuMemRangeGetAttribute(s) (the
// bookkeeping of channel/advice.h, shared with the client library), and stream attachment is
// checked and changes nothing.
#include "cpudrv.h"
#include "channel/advice.h"

#include <stdlib.h>

void cpudrv_managed_drop(struct cpudrv_range *r)
{
    if (r->adv) {
        chan_advice_free(r->adv);
        free(r->adv);
        r->adv = NULL;
    }
}

// cpudrv_big held: the advice of the managed range holding all of [p, p + n), made on
// first use, and p's offset in it; NULL when there is none (INVALID_VALUE).
static struct chan_advice *advice_of(CUdeviceptr p, size_t n, uint64_t *off)
{
    const struct cpudrv_range *c = cpudrv_mem_find((uintptr_t)p);
    if (!c || c->type != CPUDRV_MEM_MANAGED || !n || n > c->size - ((uintptr_t)p - c->base))
        return NULL;
    struct cpudrv_range *r = (struct cpudrv_range *)c;
    if (!r->adv && !(r->adv = calloc(1, sizeof(*r->adv)))) return NULL;
    r->adv->size = r->size;
    *off = (uintptr_t)p - r->base;
    return r->adv;
}

static CUresult advise(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation l)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    int named = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
    if (named && !chan_advice_loc_ok(l, cpudrv_ndev)) return CUDA_ERROR_INVALID_DEVICE;
    cpudrv_lock();
    uint64_t off;
    struct chan_advice *a = advice_of(p, count, &off);
    rc = a ? chan_advice_set(a, off, count, advice, l) : CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return rc;
}

// The legacy entry point (a device, not a location): cuda.h maps the name to _v2.
#undef cuMemAdvise
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    return TR(advise(devPtr, count, advice, chan_advice_loc_of_device(device)));
}

CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                        CUmemLocation location)
{
    return TR(advise(devPtr, count, advice, location));
}

// Checks the stream (NULL and the special handles included) as the work would.
static CUresult prefetch(CUdeviceptr p, size_t count, CUmemLocation l, unsigned flags,
                         CUstream hs)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    uint64_t off;
    struct chan_advice *a;
    if ((rc = cpudrv_stream_get(hs, c, &s)) != CUDA_SUCCESS)
        ;
    else if (flags)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!chan_advice_loc_ok(l, cpudrv_ndev))
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (!(a = advice_of(p, count, &off)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = chan_advice_prefetch(a, off, count, l);
    cpudrv_unlock();
    return rc;
}

// The legacy entry point (a device, not a location): cuda.h maps the name to _v2.
#undef cuMemPrefetchAsync
CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                            CUstream hStream);
CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                            CUstream hStream)
{
    return TR(prefetch(devPtr, count, chan_advice_loc_of_device(dstDevice), 0, hStream));
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                               unsigned int flags, CUstream hStream)
{
    return TR(prefetch(devPtr, count, location, flags, hStream));
}

static CUresult range_attr(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr p,
                           size_t count)
{
    uint64_t off;
    struct chan_advice *a = advice_of(p, count, &off);
    return a ? chan_advice_get(a, off, count, attr, data, size) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
                                CUdeviceptr devPtr, size_t count)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    rc = range_attr(data, dataSize, attribute, devPtr, count);
    cpudrv_unlock();
    return TR(rc);
}

CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                 size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!data || !dataSizes || !attributes || !numAttributes) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    for (size_t i = 0; i < numAttributes && !rc; i++)
        rc = range_attr(data[i], dataSizes[i], attributes[i], devPtr, count);
    cpudrv_unlock();
    return TR(rc);
}

CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
                                unsigned int flags)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    struct cpudrv_stream *s;
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)dptr);
    if ((rc = cpudrv_stream_get(hStream, c, &s)) != CUDA_SUCCESS)
        ;
    else if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
             flags != CU_MEM_ATTACH_SINGLE)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (flags == CU_MEM_ATTACH_SINGLE && (!hStream || hStream == CU_STREAM_LEGACY))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!r || r->type != CPUDRV_MEM_MANAGED ||
             (length && ((uintptr_t)dptr != r->base || length != r->size)))
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}
