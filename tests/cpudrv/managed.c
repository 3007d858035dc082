// Managed memory's advice, prefetches (single and batched), discards and stream
// attachment. Managed memory here is host memory (memory.c, cuMemAllocManaged; module.c for
// __managed__ variables) that kernels reach at its address: nothing migrates, so advice and
// prefetches are checked and recorded for cuMemRangeGetAttribute(s) (the bookkeeping of
// channel/advice.h, shared with the client library), a discard keeps the contents (any are
// allowed after one), and stream attachment is checked and changes nothing.
#include "cpudrv.h"
#include "channel/advice.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

// The managed memory of modules (__managed__ variables) lives in address space of its own
// from MANAGED_BASE up, as the real driver keeps its managed memory in address space it
// reserved, and never where the process's own mappings go. The client library maps each
// variable's host copy at the variable's address in the client (interpose/mvars.c): there,
// too, nothing else lives this high below the 0x7f... mappings, whereas an address picked
// by mmap here could, by chance, be taken in a client. Guarded by cpudrv_big; it only grows
// (freed pieces are not reused: a test driver loads few modules).
#define MANAGED_BASE 0x200000000000ull
#define MANAGED_ALIGN (64ull << 10)
static uintptr_t managed_next = MANAGED_BASE;

void *cpudrv_managed_map(size_t n, size_t *maplen)
{
    if (n > SIZE_MAX - MANAGED_ALIGN) return NULL;
    size_t len = (n + MANAGED_ALIGN - 1) & ~(size_t)(MANAGED_ALIGN - 1);
    for (int tries = 0; tries < 64; tries++) {
        void *want = (void *)managed_next;
        void *p = mmap(want, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        managed_next += len;
        if (p == want) {
            *maplen = len;
            return p;
        }
        if (p != MAP_FAILED)
            munmap(p, len); // an old kernel took the address as a hint
        else if (errno != EEXIST)
            return NULL;
    }
    return NULL;
}

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
                advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
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
static CUresult prefetch(CUdeviceptr p, size_t count, CUmemLocation l, unsigned flags, CUstream hs)
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
CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
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
    else if (!r || r->type != CPUDRV_MEM_MANAGED)
        rc = CUDA_ERROR_INVALID_VALUE;
    // A module's variables share a range here: any part of it names a variable of its own.
    else if (length && !(r->flags & CPUDRV_RANGE_MODULE) &&
             ((uintptr_t)dptr != r->base || length != r->size))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (length && length > r->size - ((uintptr_t)dptr - r->base))
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// The batches: shapes checked by channel/advice.h as the client library checks them, then
// every range (each wholly in managed memory), then recorded, all or nothing. A batch takes
// no stream but a real or per-thread one: the legacy NULL stream is refused, as documented.
static CUresult batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                      size_t *idxs, size_t nlocs, unsigned long long flags, CUstream hs,
                      int prefetch)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    uint64_t off;
    if ((rc = cpudrv_stream_get(hs, c, &s)) != CUDA_SUCCESS)
        ;
    else if (!hs || hs == CU_STREAM_LEGACY)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = chan_advice_batch_check(dptrs, sizes, count, locs, idxs, nlocs, flags, prefetch,
                                     cpudrv_ndev);
    for (size_t i = 0; !rc && i < count; i++)
        if (!advice_of(dptrs[i], sizes[i], &off)) rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !rc && prefetch && i < count; i++) {
        struct chan_advice *a = advice_of(dptrs[i], sizes[i], &off);
        rc = chan_advice_prefetch(a, off, sizes[i], chan_advice_batch_loc(locs, idxs, nlocs, i));
    }
    cpudrv_unlock();
    return rc;
}

CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                 CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                 size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
    return TR(batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                    hStream, 1));
}

// Discarded contents may read back as anything: here they read back unchanged.
CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                unsigned long long flags, CUstream hStream)
{
    return TR(batch(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, 0));
}

CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                           CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                           size_t numPrefetchLocs, unsigned long long flags,
                                           CUstream hStream)
{
    return TR(batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                    hStream, 1));
}
