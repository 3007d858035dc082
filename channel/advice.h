/* Advice and prefetch bookkeeping of one managed allocation: what cuMemAdvise set and where
 * cuMemPrefetchAsync last sent each page, so that cuMemRangeGetAttribute(s) answer what the
 * program set, as the driver does. Pure logic, no I/O: the client library keeps one per
 * managed allocation (interpose/managed.c) and so does the CPU test driver
 * (tests/cpudrv/managed.c), which is why it is a header of static functions.
 *
 * Why per page: advice applies to [devPtr, devPtr + count), any part of an allocation, and a
 * query over a range answers "the same on every page, or not" (READ_MOSTLY 1 only if every
 * page has it; a location only if every page has the same one). Pages are CHAN_ADVICE_PAGE
 * bytes; the table is made on the first advice or prefetch (most allocations never get one).
 * Why the state lives in the client: managed memory here is host memory registered in the
 * server (no driver managed memory exists to advise), so the advice changes nothing but these
 * answers, which are the client's own business. */
#ifndef CHAN_ADVICE_H
#define CHAN_ADVICE_H

#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHAN_ADVICE_PAGE 4096ull
#define CHAN_ADVICE_CPU_BIT 31u /* accessed_by bit of the host; devices are bits 0..30 */

struct chan_advice_page {
    uint8_t read_mostly;
    uint8_t pref_type; /* CUmemLocationType; INVALID: none */
    uint8_t last_type; /* where the last prefetch went; INVALID: never prefetched */
    uint8_t pad;
    int32_t pref_id, last_id;
    uint32_t accessed_by; /* bit per device, CHAN_ADVICE_CPU_BIT for the host */
};

struct chan_advice {
    uint64_t size;               /* the allocation's bytes */
    struct chan_advice_page *pg; /* NULL: every page at its defaults */
};

/* Pages [*first, *end) that [off, off + len) touches inside the allocation; -1 when the
 * range is empty or leaves it (overflow-safe). */
static inline int chan_advice_pages(const struct chan_advice *a, uint64_t off, uint64_t len,
                                    uint64_t *first, uint64_t *end)
{
    uint64_t stop;
    if (len == 0 || off >= a->size || __builtin_add_overflow(off, len, &stop) || stop > a->size)
        return -1;
    *first = off / CHAN_ADVICE_PAGE;
    *end = (stop + CHAN_ADVICE_PAGE - 1) / CHAN_ADVICE_PAGE;
    return 0;
}

static inline int chan_advice_table(struct chan_advice *a)
{
    if (a->pg) return 0;
    uint64_t n = (a->size + CHAN_ADVICE_PAGE - 1) / CHAN_ADVICE_PAGE;
    a->pg = calloc(n ? n : 1, sizeof(*a->pg));
    return a->pg ? 0 : -1;
}

static inline void chan_advice_free(struct chan_advice *a)
{
    free(a->pg);
    a->pg = NULL;
}

/* A location a program may name for advice or a prefetch: a device below ndev, or the host
 * (any NUMA node: host memory is where this memory already is). 1 if valid. */
static inline int chan_advice_loc_ok(CUmemLocation l, int ndev)
{
    switch (l.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return l.id >= 0 && l.id < ndev && l.id < 31;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return 1;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return l.id >= 0;
    default:
        return 0;
    }
}

/* The legacy API's device: CU_DEVICE_CPU or an ordinal, as a location. */
static inline CUmemLocation chan_advice_loc_of_device(CUdevice d)
{
    CUmemLocation l = {.type = d == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST
                                                  : CU_MEM_LOCATION_TYPE_DEVICE,
                       .id = d == CU_DEVICE_CPU ? 0 : d};
    return l;
}

/* Applies one cuMemAdvise to [off, off + len): CUDA_SUCCESS, or the driver's error for a
 * bad advice or location (the location is checked by the caller with chan_advice_loc_ok,
 * except where the advice ignores it). */
static inline CUresult chan_advice_set(struct chan_advice *a, uint64_t off, uint64_t len,
                                       CUmem_advise advice, CUmemLocation l)
{
    uint64_t first, end;
    if (chan_advice_pages(a, off, len, &first, &end) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    /* Accessed-by takes a device or the host, not a NUMA node. */
    if ((advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) &&
        l.type != CU_MEM_LOCATION_TYPE_DEVICE && l.type != CU_MEM_LOCATION_TYPE_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    if (chan_advice_table(a) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    uint32_t bit = l.type == CU_MEM_LOCATION_TYPE_DEVICE ? 1u << l.id : 1u << CHAN_ADVICE_CPU_BIT;
    for (uint64_t p = first; p < end; p++) {
        struct chan_advice_page *g = &a->pg[p];
        switch (advice) {
        case CU_MEM_ADVISE_SET_READ_MOSTLY:
            g->read_mostly = 1;
            break;
        case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
            g->read_mostly = 0;
            break;
        case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
            g->pref_type = (uint8_t)l.type;
            g->pref_id =
                l.type == CU_MEM_LOCATION_TYPE_DEVICE || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA
                    ? l.id
                    : 0;
            break;
        case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
            g->pref_type = 0;
            g->pref_id = 0;
            break;
        case CU_MEM_ADVISE_SET_ACCESSED_BY:
            g->accessed_by |= bit;
            break;
        case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
            g->accessed_by &= ~bit;
            break;
        default:
            break;
        }
    }
    return CUDA_SUCCESS;
}

/* Records a prefetch of [off, off + len) to l (already checked). */
static inline CUresult chan_advice_prefetch(struct chan_advice *a, uint64_t off, uint64_t len,
                                            CUmemLocation l)
{
    uint64_t first, end;
    if (chan_advice_pages(a, off, len, &first, &end) != 0) return CUDA_ERROR_INVALID_VALUE;
    if (chan_advice_table(a) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    /* The host, whichever NUMA node was named: this memory is host memory. */
    int dev = l.type == CU_MEM_LOCATION_TYPE_DEVICE;
    for (uint64_t p = first; p < end; p++) {
        a->pg[p].last_type = dev ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
        a->pg[p].last_id = dev ? l.id : 0;
    }
    return CUDA_SUCCESS;
}

/* The legacy device number of a location: an ordinal, CU_DEVICE_CPU for the host, or
 * CU_DEVICE_INVALID for none. */
static inline int32_t chan_advice_legacy(uint8_t type, int32_t id)
{
    switch (type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return id;
    case CU_MEM_LOCATION_TYPE_INVALID:
        return (int32_t)CU_DEVICE_INVALID;
    default:
        return (int32_t)CU_DEVICE_CPU;
    }
}

/* Answers one cuMemRangeGetAttribute over [off, off + len) into data (dataSize bytes), as
 * the driver documents it: a value only where every page agrees. */
static inline CUresult chan_advice_get(const struct chan_advice *a, uint64_t off, uint64_t len,
                                       CUmem_range_attribute attr, void *data, size_t size)
{
    uint64_t first, end;
    if (!data || chan_advice_pages(a, off, len, &first, &end) != 0) return CUDA_ERROR_INVALID_VALUE;
    static const struct chan_advice_page none;
    int same_pref = 1, same_last = 1;
    uint32_t rm = 1, acc = ~0u;
    const struct chan_advice_page *f = a->pg ? &a->pg[first] : &none;
    for (uint64_t p = first; p < end; p++) {
        const struct chan_advice_page *g = a->pg ? &a->pg[p] : &none;
        rm &= g->read_mostly;
        acc &= g->accessed_by;
        same_pref &= g->pref_type == f->pref_type && g->pref_id == f->pref_id;
        same_last &= g->last_type == f->last_type && g->last_id == f->last_id;
    }
    uint8_t pt = same_pref ? f->pref_type : 0, lt = same_last ? f->last_type : 0;
    int32_t v;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        v = (int32_t)rm;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
        v = chan_advice_legacy(pt, f->pref_id);
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
        v = chan_advice_legacy(lt, f->last_id);
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
        v = pt;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
        v = pt ? f->pref_id : (int32_t)CU_DEVICE_INVALID;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        v = lt;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        v = lt ? f->last_id : (int32_t)CU_DEVICE_INVALID;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        /* Every device (and the host) advised on the whole range, then CU_DEVICE_INVALID. */
        if (size == 0 || size % 4) return CUDA_ERROR_INVALID_VALUE;
        int32_t *out = data;
        size_t n = size / 4, k = 0;
        if ((acc >> CHAN_ADVICE_CPU_BIT) & 1 && k < n) out[k++] = (int32_t)CU_DEVICE_CPU;
        for (uint32_t d = 0; d < CHAN_ADVICE_CPU_BIT && k < n; d++)
            if ((acc >> d) & 1) out[k++] = (int32_t)d;
        while (k < n)
            out[k++] = (int32_t)CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (size != 4) return CUDA_ERROR_INVALID_VALUE;
    memcpy(data, &v, 4);
    return CUDA_SUCCESS;
}

/* ---- batches (cuMemPrefetchBatchAsync, cuMemDiscardBatchAsync and their combination) ----
 * Both ends check a batch's shape here, the same way, before any range: the client library
 * (interpose/managed.c) and the CPU test driver (tests/cpudrv/managed.c). */

/* The most operations one batch may name: a larger count is refused before any array is
 * read, since the arrays' lengths are only the caller's word (no program needs more). */
#define CHAN_ADVICE_BATCH_MAX (1u << 20)

/* A batch's shape: count operations of dptrs/sizes, flags (reserved: 0) and, where the
 * call prefetches (with_locs), numLocs locations each applying from prefetchLocIdxs[k] on:
 * the first index 0, each above the one before, all below count, numLocs at most count.
 * CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, or CUDA_ERROR_INVALID_DEVICE for a location
 * that names no device of ndev or host. The ranges are each end's own to check. */
static inline CUresult chan_advice_batch_check(const CUdeviceptr *dptrs, const size_t *sizes,
                                               size_t count, const CUmemLocation *locs,
                                               const size_t *idxs, size_t nlocs,
                                               unsigned long long flags, int with_locs, int ndev)
{
    if (!dptrs || !sizes || count == 0 || count > CHAN_ADVICE_BATCH_MAX || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!with_locs) return CUDA_SUCCESS;
    if (!locs || !idxs || nlocs == 0 || nlocs > count || idxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < nlocs; k++)
        if (idxs[k] >= count || (k > 0 && idxs[k] <= idxs[k - 1])) return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < nlocs; k++)
        if (!chan_advice_loc_ok(locs[k], ndev)) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* The location operation i of a checked batch prefetches to. */
static inline CUmemLocation chan_advice_batch_loc(const CUmemLocation *locs, const size_t *idxs,
                                                  size_t nlocs, size_t i)
{
    size_t k = nlocs;
    while (k > 1 && idxs[k - 1] > i)
        k--;
    return locs[k - 1];
}

#endif
