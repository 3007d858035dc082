/* Managed memory (cuMemAllocManaged and its family).
 *
 * The driver's managed memory lives in one process's address space and migrates on faults;
 * the server cannot hand it to a client. So an allocation here is the server's device memory
 * at an address A with a host view this process maps at A, and its bytes migrate between the
 * two by this process's page protection (migrate.c). Where the server cannot make that
 * (no device virtual memory) or MPSSHIM_MANAGED_MIGRATE=0, it is shared host memory made as
 * pinned memory is (memory.c, shim_host_alloc), registered in the server, which the GPU
 * reads and writes over the bus: coherent at all times, at pinned-memory speed.
 *
 * What follows from that:
 *  - advice (cuMemAdvise) changes nothing but what cuMemRangeGetAttribute(s) answer, so it
 *    is kept here, per allocation (channel/advice.h), and never reaches the server;
 *  - a prefetch is checked (the caller's managed memory, a valid location and stream) and
 *    recorded; of migrating memory it also moves the range (migrate.c): to a device, the
 *    host's writes go at once; to the host, the bytes come back at once;
 *  - cuStreamAttachMemAsync is checked the same way and changes nothing: the memory is
 *    treated as attached globally (a program that respects the attach rules sees no
 *    difference);
 *  - cuMemFree frees it (the server releases it; here it leaves migrate.c's table and is
 *    unmapped after).
 *
 * __managed__ variables of modules (mvars.c) take advice, prefetches and stream attachment
 * the same way, each variable its own range; so do the batch prefetch and discard calls,
 * whose discards keep the contents (any are allowed after one). */
#define _GNU_SOURCE
#include "interpose/shim.h"
#include "channel/advice.h"

#include <string.h>
#include <sys/mman.h>

/* The advice of each live managed allocation of this process; guarded by lock. */
struct managed {
    uint64_t base;
    struct chan_advice adv;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct managed *tab;
static size_t ntab, captab;

static struct managed *find_locked(uint64_t base)
{
    for (size_t i = 0; i < ntab; i++)
        if (tab[i].base == base) return &tab[i];
    return NULL;
}

int shim_managed_track(uint64_t base, uint64_t size)
{
    int r = 0;
    pthread_mutex_lock(&lock);
    if (!find_locked(base)) {
        if (ntab == captab) {
            struct managed *n = realloc(tab, (captab * 2 + 8) * sizeof(*n));
            if (n) {
                tab = n;
                captab = captab * 2 + 8;
            }
        }
        if (ntab < captab)
            tab[ntab++] = (struct managed){.base = base, .adv = {.size = size}};
        else
            r = -1;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int shim_managed_forget(uint64_t base)
{
    int unmapped = shim_mig_forget(base);
    pthread_mutex_lock(&lock);
    struct managed *m = find_locked(base);
    if (m) {
        chan_advice_free(&m->adv);
        *m = tab[--ntab];
    }
    pthread_mutex_unlock(&lock);
    return unmapped;
}

CUresult SHIM_IMPL(cuMemAllocManaged)(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!dptr || bytesize == 0 || !chan_managed_flags_ok(flags)) return CUDA_ERROR_INVALID_VALUE;
    /* Room for its advice first: nothing to undo in the server if there is none. */
    pthread_mutex_lock(&lock);
    if (ntab == captab) {
        struct managed *n = realloc(tab, (captab * 2 + 8) * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        tab = n;
        captab = captab * 2 + 8;
    }
    pthread_mutex_unlock(&lock);
    void *p = NULL;
    /* Migrating (migrate.c), unless unwanted or refused: then host memory the GPU reads over
     * the bus, as below. */
    if (!shim_mig_wanted() ||
        shim_host_alloc(&p, bytesize, CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE | flags) !=
            CUDA_SUCCESS) {
        if ((r = shim_host_alloc(&p, bytesize, CHAN_HOST_MANAGED | flags)) != CUDA_SUCCESS)
            return r;
    }
    pthread_mutex_lock(&lock);
    tab[ntab++] = (struct managed){.base = (uint64_t)(uintptr_t)p, .adv = {.size = bytesize}};
    pthread_mutex_unlock(&lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* The caller's managed allocation or __managed__ variable holding all of [p, p + count),
 * locked (unlock after), and p's offset in it; NULL (unlocked) when the range is not wholly
 * in one of them, which is the driver's CUDA_ERROR_INVALID_VALUE (device memory, another
 * process's memory, or memory this process never had). */
static struct managed *hold(CUdeviceptr p, size_t count, uint64_t *off)
{
    struct shim_range rg;
    uint64_t end;
    if (count == 0 || __builtin_add_overflow((uint64_t)p, (uint64_t)count, &end)) return NULL;
    if (shim_mvar_find(p, count, &rg.base, &rg.size) != 0 &&
        (shim_range_find(p, count, &rg) != 0 || rg.kind != SHIM_HT_MEM_MANAGED ||
         end > rg.base + rg.size))
        return NULL;
    pthread_mutex_lock(&lock);
    struct managed *m = find_locked(rg.base);
    if (!m) {
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    *off = p - rg.base;
    return m;
}

static CUresult advise(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation l)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    /* The location matters only to advice that names one. */
    int named = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
    if (named && !chan_advice_loc_ok(l, shim_conn.dev.ndev)) return CUDA_ERROR_INVALID_DEVICE;
    uint64_t off;
    struct managed *m = hold(p, count, &off);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    r = chan_advice_set(&m->adv, off, count, advice, l);
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult SHIM_IMPL(cuMemAdvise)(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                CUdevice device)
{
    return advise(devPtr, count, advice, chan_advice_loc_of_device(device));
}

CUresult SHIM_IMPL(cuMemAdvise_v2)(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                   CUmemLocation location)
{
    return advise(devPtr, count, advice, location);
}

/* A prefetch of migrating memory moves it (migrate.c): to the host after the client's queued
 * work, s waiting for it; to a device, the host's writes go before any later work. Captured,
 * it is only recorded: the graph's launch is work that moves it then. */
static CUresult move(CUdeviceptr p, size_t count, CUmemLocation l, CUstream s)
{
    if (!shim_mig_live() || shim_work_captured(s)) return CUDA_SUCCESS;
    if (l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
        l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
        return shim_mig_prefetch_host(p, count, s);
    return shim_mig_work();
}

static CUresult prefetch(CUdeviceptr p, size_t count, CUmemLocation l, unsigned flags, CUstream s)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_handle_check(SHIM_HT_CUstream, (uint64_t)(uintptr_t)s)) != CUDA_SUCCESS) return r;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!chan_advice_loc_ok(l, shim_conn.dev.ndev)) return CUDA_ERROR_INVALID_DEVICE;
    uint64_t off;
    struct managed *m = hold(p, count, &off);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    r = chan_advice_prefetch(&m->adv, off, count, l);
    pthread_mutex_unlock(&lock);
    return r == CUDA_SUCCESS ? move(p, count, l, s) : r;
}

CUresult SHIM_IMPL(cuMemPrefetchAsync)(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                       CUstream hStream)
{
    return prefetch(devPtr, count, chan_advice_loc_of_device(dstDevice), 0, hStream);
}

CUresult SHIM_IMPL(cuMemPrefetchAsync_v2)(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                          unsigned int flags, CUstream hStream)
{
    return prefetch(devPtr, count, location, flags, hStream);
}

CUresult SHIM_IMPL(cuMemRangeGetAttribute)(void *data, size_t dataSize,
                                           CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                           size_t count)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    uint64_t off;
    struct managed *m = hold(devPtr, count, &off);
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    r = chan_advice_get(&m->adv, off, count, attribute, data, dataSize);
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult SHIM_IMPL(cuMemRangeGetAttributes)(void **data, size_t *dataSizes,
                                            CUmem_range_attribute *attributes, size_t numAttributes,
                                            CUdeviceptr devPtr, size_t count)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!data || !dataSizes || !attributes || numAttributes == 0) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttributes && r == CUDA_SUCCESS; i++)
        r = SHIM_IMPL(cuMemRangeGetAttribute)(data[i], dataSizes[i], attributes[i], devPtr, count);
    return r;
}

CUresult SHIM_IMPL(cuStreamAttachMemAsync)(CUstream hStream, CUdeviceptr dptr, size_t length,
                                           unsigned int flags)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_handle_check(SHIM_HT_CUstream, (uint64_t)(uintptr_t)hStream)) != CUDA_SUCCESS)
        return r;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    /* Attaching singly to the NULL stream names no stream (the driver refuses it). */
    if (flags == CU_MEM_ATTACH_SINGLE && (hStream == NULL || hStream == CU_STREAM_LEGACY))
        return CUDA_ERROR_INVALID_VALUE;
    /* The whole allocation or variable: length 0, or its size from its start. */
    struct shim_range rg;
    if (shim_mvar_find(dptr, 1, &rg.base, &rg.size) != 0 &&
        (shim_range_find(dptr, 1, &rg) != 0 || rg.kind != SHIM_HT_MEM_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    if (length != 0 && (dptr != rg.base || length != rg.size)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- batches */

/* The batch calls, checked as the single prefetch is: the stream (never the legacy NULL
 * stream, as documented), the batch's shape (channel/advice.h, as the CPU test driver
 * checks it), then every range, each wholly in one managed allocation or variable of this
 * process's; then recorded, all or nothing. Nothing moves and nothing is added to the
 * stream (as for cuMemPrefetchAsync): a discard keeps the contents. */
static CUresult batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                      size_t *idxs, size_t nlocs, unsigned long long flags, CUstream s,
                      int prefetch)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_handle_check(SHIM_HT_CUstream, (uint64_t)(uintptr_t)s)) != CUDA_SUCCESS) return r;
    if (s == CU_STREAM_LEGACY || (s == NULL && !shim_ptds_active()))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = chan_advice_batch_check(dptrs, sizes, count, locs, idxs, nlocs, flags, prefetch,
                                     shim_conn.dev.ndev)) != CUDA_SUCCESS)
        return r;
    uint64_t off;
    for (size_t i = 0; i < count; i++) {
        struct managed *m = hold(dptrs[i], sizes[i], &off);
        if (!m) return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_unlock(&lock);
    }
    for (size_t i = 0; prefetch && i < count && r == CUDA_SUCCESS; i++) {
        struct managed *m = hold(dptrs[i], sizes[i], &off);
        if (!m) return CUDA_ERROR_INVALID_VALUE; /* freed meanwhile by another thread */
        CUmemLocation l = chan_advice_batch_loc(locs, idxs, nlocs, i);
        r = chan_advice_prefetch(&m->adv, off, sizes[i], l);
        pthread_mutex_unlock(&lock);
        if (r == CUDA_SUCCESS) r = move(dptrs[i], sizes[i], l, s);
    }
    return r;
}

CUresult SHIM_IMPL(cuMemPrefetchBatchAsync)(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                            CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                            size_t numPrefetchLocs, unsigned long long flags,
                                            CUstream hStream)
{
    return batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                 hStream, 1);
}

CUresult SHIM_IMPL(cuMemDiscardBatchAsync)(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                           unsigned long long flags, CUstream hStream)
{
    return batch(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, 0);
}

CUresult SHIM_IMPL(cuMemDiscardAndPrefetchBatchAsync)(CUdeviceptr *dptrs, size_t *sizes,
                                                      size_t count, CUmemLocation *prefetchLocs,
                                                      size_t *prefetchLocIdxs,
                                                      size_t numPrefetchLocs,
                                                      unsigned long long flags, CUstream hStream)
{
    return batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                 hStream, 1);
}

/* ---------------------------------------------------------------- cuMemFree */

/* cuMemFree of managed memory: the server frees it (server/memory/managed.c); the mapping here goes
 * once it has. The range leaves the mirror before `after` runs, so `before` notes it. */
static __thread struct shim_range freeing;

static CUresult mem_free_before(const void *const *argv)
{
    CUdeviceptr p = *(const CUdeviceptr *)argv[0];
    struct shim_range rg;
    freeing.base = 0;
    if (p && shim_range_find(p, 1, &rg) == 0 && rg.base == p && rg.kind == SHIM_HT_MEM_MANAGED)
        freeing = rg;
    /* Any free waits in the server for the client's work that may still use the memory (a
     * device free through the arena or the driver, managed memory's host view unregistered),
     * as a native cuMemFree waits (hostfn.c; hostfn_fault --own free hung without this). */
    shim_hostfn_settle(SHIM_SETTLE_ALL);
    CUresult r = shim_capture_unsafe();
    /* That wait in the server must not hold the process's other threads (ctxsync.c). */
    return r == CUDA_SUCCESS && p ? shim_ctx_settle_before_free() : r;
}

static void mem_free_after(const void *const *argv)
{
    CUdeviceptr p = *(const CUdeviceptr *)argv[0];
    if (!freeing.base || freeing.base != p) return;
    if (!shim_managed_forget(freeing.base)) /* migrate.c unmaps its own */
        munmap((void *)(uintptr_t)freeing.base, freeing.mapped);
    freeing.base = 0;
}

const struct shim_hook shim_hook_mem_free = {.before = mem_free_before, .after = mem_free_after};
