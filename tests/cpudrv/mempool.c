// The stream-ordered allocator: memory pools, each device's default and current pool,
// cuMemAllocAsync / cuMemAllocFromPoolAsync / cuMemFreeAsync and their _ptsz variants.
//
// A pool owns blocks, each one mapping that backs at most one allocation at a time. An
// allocation is made when the call is made, so it is valid for all work ordered after it
// (on its stream or anywhere else), and is a device range of the allocation table that
// names its pool. A free is an operation on the stream's queue: when the stream reaches it
// the range leaves the table and the block becomes idle. Only idle blocks are reused, by
// later allocations from the same pool: everything ordered before the free has finished by
// then, so reuse is safe whatever the reuse attributes say (they are stored, not obeyed).
// Idle memory above the release threshold goes back to the system when a free runs or the
// threshold is lowered; the real driver does it at the next synchronize call instead, so
// after a synchronize the two agree.
// On a capturing stream, as with the driver, an allocation becomes a memory allocation node
// of the capture's graph (with the pool's properties, at an address fixed now) and a free a
// memory free node, which must free graph memory (graphmem.c).
#include "cpudrv.h"
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct block {
    struct block *next;
    void *map;
    size_t len;
    int busy; // backs an allocation (whose free may be queued)
};

// The reuse attributes, indexed by CUmemPool_attribute - 1.
#define REUSE_ATTRS 3

struct cpudrv_pool {
    struct cpudrv_obj o;
    int dev;
    int is_default;
    int destroyed; // handle gone: blocks return to the system as their frees run
    CUmemPoolProps props;
    cuuint64_t threshold;
    int reuse[REUSE_ATTRS];
    cuuint64_t reserved, reserved_high, used, used_high;
    CUmemAccess_flags access[CPUDRV_MAX_DEVICES];
    struct block *blocks;
};

// Per device: the default pool (made at first use, never destroyed) and the pool that
// cuMemAllocAsync uses (NULL: the default). Both protected by cpudrv_big.
static struct cpudrv_pool *defaults[CPUDRV_MAX_DEVICES];
static struct cpudrv_pool *current[CPUDRV_MAX_DEVICES];

/* ---------------------------------------------------------------- pools (cpudrv_big held) */

// The last reference went: only the allocations kept the pool alive, and they are freed.
static void pool_release(struct cpudrv_obj *o)
{
    struct cpudrv_pool *p = (struct cpudrv_pool *)o;
    while (p->blocks) {
        struct block *b = p->blocks;
        p->blocks = b->next;
        cpudrv_mem_unreserve(p->dev, b->len);
        cpudrv_mem_unmap_later(b->map, b->len);
        free(b);
    }
    free(p);
}

// Unlinks *pp and gives its memory back (unmapped once queued work passed it).
static void block_release(struct cpudrv_pool *p, struct block **pp)
{
    struct block *b = *pp;
    *pp = b->next;
    cpudrv_mem_unreserve(p->dev, b->len);
    cpudrv_mem_unmap_later(b->map, b->len);
    p->reserved -= b->len;
    free(b);
}

// Releases idle blocks as long as at least keep bytes stay reserved.
static void trim(struct cpudrv_pool *p, cuuint64_t keep)
{
    for (struct block **pp = &p->blocks; *pp;) {
        if (!(*pp)->busy && p->reserved - (*pp)->len >= keep)
            block_release(p, pp);
        else
            pp = &(*pp)->next;
    }
}

// What the release threshold asks for once memory went idle.
static void apply_threshold(struct cpudrv_pool *p)
{
    if (p->destroyed)
        trim(p, 0);
    else if (p->reserved > p->threshold)
        trim(p, p->threshold);
}

static CUresult pool_new(int dev, const CUmemPoolProps *props, int is_default,
                         struct cpudrv_pool **out)
{
    struct cpudrv_pool *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_obj_init(&p->o, CPUDRV_K_POOL, NULL, pool_release);
    p->dev = dev;
    p->is_default = is_default;
    p->props = *props;
    for (int i = 0; i < REUSE_ATTRS; i++)
        p->reuse[i] = 1;
    p->access[dev] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    cpudrv_obj_publish(&p->o);
    *out = p;
    return CUDA_SUCCESS;
}

// dev's default pool (made now if this is its first use), or NULL when out of memory.
static struct cpudrv_pool *default_pool(int dev)
{
    if (!defaults[dev]) {
        CUmemPoolProps props = {0};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        pool_new(dev, &props, 1, &defaults[dev]);
    }
    return defaults[dev];
}

static struct cpudrv_pool *current_pool(int dev)
{
    return current[dev] ? current[dev] : default_pool(dev);
}

// The live pool whose handle is h, or NULL (a destroyed pool's handle is dead).
static struct cpudrv_pool *pool_find(CUmemoryPool h)
{
    return cpudrv_obj_find(h, CPUDRV_K_POOL);
}

// Maps a new block of len bytes (a multiple of the page size), within the pool's maximum
// size and the device's memory; idle blocks are given up first if that makes it fit.
static struct block *block_new(struct cpudrv_pool *p, size_t len)
{
    size_t max = p->props.maxSize;
    if (max && p->reserved + len > max) trim(p, 0);
    if (max && p->reserved + len > max) return NULL;
    if (cpudrv_mem_reserve(p->dev, len)) {
        trim(p, 0);
        if (cpudrv_mem_reserve(p->dev, len)) return NULL;
    }
    struct block *b = calloc(1, sizeof *b);
    size_t maplen = 0;
    void *map = b ? cpudrv_mem_map(len, &maplen) : NULL;
    if (!map) {
        free(b);
        cpudrv_mem_unreserve(p->dev, len);
        return NULL;
    }
    b->map = map;
    b->len = len;
    b->next = p->blocks;
    p->blocks = b;
    p->reserved += len;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    return b;
}

// Allocates n bytes from p: the smallest idle block that fits and wastes at most half of
// itself, else a new block.
static CUresult pool_alloc(struct cpudrv_pool *p, size_t n, uintptr_t *out)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n > SIZE_MAX - page) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = (n + page - 1) / page * page;
    struct block *b = NULL;
    for (struct block *t = p->blocks; t; t = t->next)
        if (!t->busy && t->len >= len && t->len / 2 <= len && (!b || t->len < b->len)) b = t;
    if (!b) b = block_new(p, len);
    if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
    struct cpudrv_range r = {0};
    r.base = (uintptr_t)b->map;
    r.size = n;
    r.type = CPUDRV_MEM_DEVICE;
    r.dev = p->dev;
    r.id = cpudrv_next_id();
    r.maplen = b->len;
    r.pool = p;
    CUresult rc = cpudrv_mem_add(&r);
    if (rc) {
        apply_threshold(p);
        return rc;
    }
    b->busy = 1;
    p->used += b->len;
    if (p->used > p->used_high) p->used_high = p->used;
    cpudrv_obj_ref(&p->o); // the allocation's
    *out = r.base;
    return CUDA_SUCCESS;
}

// cpudrv_big held: takes back the block of a pool allocation whose range was just
// removed, and drops the allocation's reference on the pool.
void cpudrv_pool_give_back(struct cpudrv_pool *p, uintptr_t base)
{
    for (struct block *b = p->blocks; b; b = b->next)
        if (b->busy && (uintptr_t)b->map == base) {
            b->busy = 0;
            p->used -= b->len;
            break;
        }
    apply_threshold(p);
    cpudrv_obj_put(&p->o); // may release p
}

/* ---------------------------------------------------------------- locations */

// The device of a pinned-memory device location. Host locations and managed memory
// have no pools here (NOT_SUPPORTED); an unknown ordinal is INVALID_VALUE, as the real
// driver says.
static CUresult location_dev(const CUmemLocation *loc, CUmemAllocationType type, int *dev)
{
    if (!loc) return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEM_ALLOCATION_TYPE_MANAGED) {
        switch (loc->type) {
        case CU_MEM_LOCATION_TYPE_NONE:
        case CU_MEM_LOCATION_TYPE_DEVICE:
        case CU_MEM_LOCATION_TYPE_HOST:
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
            return CUDA_ERROR_NOT_SUPPORTED;
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (loc->id < 0 || loc->id >= cpudrv_ndev) return CUDA_ERROR_INVALID_VALUE;
        *dev = loc->id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

// INVALID_VALUE unless props describe a pool; NOT_SUPPORTED for one this device cannot
// make (export handle types). As the real driver on Linux, usage bits and
// win32SecurityAttributes are ignored.
static CUresult check_props(const CUmemPoolProps *props)
{
    int dev;
    CUresult rc = location_dev(&props->location, props->allocType, &dev);
    if (props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc) return rc;
    unsigned known = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                     CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
    if ((unsigned)props->handleTypes & ~known) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof props->reserved; i++)
        if (props->reserved[i]) return CUDA_ERROR_INVALID_VALUE;
    // Valid requests this device cannot honour (MEMPOOL_SUPPORTED_HANDLE_TYPES is 0).
    if (props->handleTypes) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pool entry points */

// Creates a pool of device memory (see check_props for what is accepted).
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pool || !poolProps) return TR(CUDA_ERROR_INVALID_VALUE);
    rc = check_props(poolProps);
    if (rc) return TR(rc);
    struct cpudrv_pool *p;
    cpudrv_lock();
    rc = pool_new(poolProps->location.id, poolProps, 0, &p);
    cpudrv_unlock();
    if (!rc) *pool = (CUmemoryPool)p;
    return TR(rc);
}

// MPSSHIM_CPUDRV_POOL_STRICT=1: a pool destroyed while an allocation from it is
// outstanding (not freed, nor its free enqueued) kills the process, as the real driver
// (580.159.04, H100) did to the server when other threads used pools meanwhile; legal
// and served natively otherwise. =2: a pool destroyed while any of its memory is in use
// (an allocation, or a free not yet run) kills it too: the H200's driver (same version)
// killed the server inside a destroy once in a soak; the server now destroys only pools
// with nothing in use (server/memory/pools.c, spares).
static int pool_strict(void)
{
    static int on = -1;
    return cpudrv_env_level("MPSSHIM_CPUDRV_POOL_STRICT", 2, &on);
}

// Ends a pool's handle; its memory goes once its outstanding allocations are freed. A
// default pool cannot be destroyed.
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_pool *p = pool_find(pool);
    if (!p || p->is_default) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        if (pool_strict() == 2 && p->used) {
            fprintf(stderr,
                    "cpudrv: cuMemPoolDestroy of a pool with %zu bytes in use "
                    "(MPSSHIM_CPUDRV_POOL_STRICT=2)\n",
                    (size_t)p->used);
            abort();
        }
        size_t n = pool_strict() ? cpudrv_mem_pool_outstanding(p) : 0;
        if (n) {
            fprintf(stderr,
                    "cpudrv: cuMemPoolDestroy with %zu allocations outstanding "
                    "(MPSSHIM_CPUDRV_POOL_STRICT=1)\n",
                    n);
            abort();
        }
        if (current[p->dev] == p) current[p->dev] = NULL;
        p->destroyed = 1;
        trim(p, 0);
        cpudrv_obj_unpublish(&p->o); // may release p
    }
    cpudrv_unlock();
    return TR(rc);
}

// Gives idle memory back until the pool keeps no more than needed for minBytesToKeep.
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_pool *p = pool_find(pool);
    if (!p)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        trim(p, minBytesToKeep);
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: one attribute, with the value type cuda.h gives it.
static CUresult set_attr(struct cpudrv_pool *p, CUmemPool_attribute attr, const void *value)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - 1] = *(const int *)value != 0;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->threshold = *(const cuuint64_t *)value;
        apply_threshold(p);
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        // A high watermark can only be reset, and then restarts from the current value.
        if (*(const cuuint64_t *)value) return CUDA_ERROR_INVALID_VALUE;
        if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            p->reserved_high = p->reserved;
        else
            p->used_high = p->used;
        return CUDA_SUCCESS;
    default: // the _CURRENT ones are read-only
        return CUDA_ERROR_INVALID_VALUE;
    }
}

// Sets a reuse flag (int), the release threshold (cuuint64_t) or resets a high watermark.
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!value) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_pool *p = pool_find(pool);
    rc = p ? set_attr(p, attr, value) : CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: one attribute: int for the reuse flags, cuuint64_t for the others.
static CUresult get_attr(const struct cpudrv_pool *p, CUmemPool_attribute attr, void *value)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - 1];
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->threshold;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = p->reserved;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = p->reserved_high;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = p->used;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

// Reads a reuse flag, the release threshold or a memory counter of the pool.
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!value) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_pool *p = pool_find(pool);
    rc = p ? get_attr(p, attr, value) : CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// 1 for the host location types (a device pool is never host-accessible here).
static int host_location(CUmemLocationType t)
{
    return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           t == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

// cpudrv_big held: whether d can be applied, with the real driver's errors: access from
// anything but a device and read-only access are NOT_SUPPORTED, an unknown device and
// taking the pool's own device's access away INVALID_DEVICE.
static CUresult check_access(const struct cpudrv_pool *p, const CUmemAccessDesc *d)
{
    if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
    if (d->location.id < 0 || d->location.id >= cpudrv_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (d->flags == CU_MEM_ACCESS_FLAGS_PROT_READ) return CUDA_ERROR_NOT_SUPPORTED;
    if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    if (d->location.id == p->dev && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

// Records which devices may access the pool's memory (all or none of the list). Stored
// and reported, not enforced: every device reaches every device here.
CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!map) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_pool *p = pool_find(pool);
    if (!p) rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !rc && i < count; i++)
        rc = check_access(p, &map[i]);
    for (size_t i = 0; !rc && i < count; i++)
        p->access[map[i].location.id] = map[i].flags;
    cpudrv_unlock();
    return TR(rc);
}

// The access a location has to the pool's memory (none for the host).
CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!flags || !location) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_pool *p = pool_find(memPool);
    if (!p)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (host_location(location->type))
        *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    else if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || location->id < 0 ||
             location->id >= cpudrv_ndev)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = p->access[location->id];
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- default and current pools */

// cpudrv_big held: *out = dev's default (which = 0) or current (which = 1) pool.
static CUresult get_pool(int dev, int which, CUmemoryPool *out)
{
    struct cpudrv_pool *p = which ? current_pool(dev) : default_pool(dev);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

// cpudrv_big held: makes pool (which must be dev's) the one cuMemAllocAsync uses on dev.
static CUresult set_pool(int dev, CUmemoryPool pool)
{
    struct cpudrv_pool *p = pool_find(pool);
    if (!p || p->dev != dev) return CUDA_ERROR_INVALID_VALUE;
    current[dev] = p->is_default ? NULL : p;
    return CUDA_SUCCESS;
}

// The device's default pool.
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!pool_out) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    rc = get_pool(dev, 0, pool_out);
    cpudrv_unlock();
    return TR(rc);
}

// A bad ordinal is INVALID_VALUE for the calls below (the real driver's answer), unlike
// for cuDeviceGetDefaultMemPool.
static CUresult dev_check_value(CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    return rc == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : rc;
}

// The pool cuMemAllocAsync uses on the device (its default until cuDeviceSetMemPool).
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult rc = dev_check_value(dev);
    if (rc) return TR(rc);
    if (!pool) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    rc = get_pool(dev, 1, pool);
    cpudrv_unlock();
    return TR(rc);
}

// Makes a pool of the device the one cuMemAllocAsync uses there.
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult rc = dev_check_value(dev);
    if (rc) return TR(rc);
    cpudrv_lock();
    rc = set_pool(dev, pool);
    cpudrv_unlock();
    return TR(rc);
}

// cuDeviceGetDefaultMemPool by location; only pinned device locations have pools here.
CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
                                CUmemAllocationType type)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pool_out) return TR(CUDA_ERROR_INVALID_VALUE);
    int dev = 0;
    rc = location_dev(location, type, &dev);
    if (rc) return TR(rc);
    cpudrv_lock();
    rc = get_pool(dev, 0, pool_out);
    cpudrv_unlock();
    return TR(rc);
}

// cuDeviceGetMemPool by location.
CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pool) return TR(CUDA_ERROR_INVALID_VALUE);
    int dev = 0;
    rc = location_dev(location, type, &dev);
    if (rc) return TR(rc);
    cpudrv_lock();
    rc = get_pool(dev, 1, pool);
    cpudrv_unlock();
    return TR(rc);
}

// cuDeviceSetMemPool by location; the pool must be of that location and type (no pool
// here is of managed memory).
CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    int dev = 0;
    rc = type == CU_MEM_ALLOCATION_TYPE_MANAGED ? CUDA_ERROR_INVALID_VALUE
                                                : location_dev(location, type, &dev);
    if (rc) return TR(rc);
    cpudrv_lock();
    rc = set_pool(dev, pool);
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- stream-ordered alloc/free */

// cpudrv_big held: the stream a stream-ordered call names, in a usable context; *capturing
// set when the call becomes a node of the stream's capture (as with the driver: an
// allocation or free node). Only the NULL and per-thread streams need a current context.
static CUresult order_stream(CUstream h, struct cpudrv_stream **out, int *capturing)
{
    CUresult rc = cpudrv_stream_get(h, cpudrv_ctx_current(), out);
    if (!rc) rc = cpudrv_ctx_usable((*out)->o.ctx);
    return rc ? rc : cpudrv_capture_check(*out, capturing);
}

// n bytes from pool h (from_pool) or from the current pool of the stream's device. The
// stream is checked first, and 0 bytes is a NULL pointer, as with the real driver. In a
// capture, an allocation node with the pool's properties (the pool gives no memory).
static CUresult alloc_async(CUdeviceptr *dptr, size_t n, CUmemoryPool h, int from_pool, CUstream hs)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_stream *s;
    struct cpudrv_pool *p;
    uintptr_t base = 0;
    CUdeviceptr node_ptr = 0;
    int capturing = 0;
    rc = order_stream(hs, &s, &capturing);
    if (!rc && !dptr) rc = CUDA_ERROR_INVALID_VALUE;
    if (rc || !n) goto out;
    p = from_pool ? pool_find(h) : current_pool(s->o.ctx->dev);
    if (!p) {
        rc = from_pool ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    } else if (capturing) {
        rc = cpudrv_capture_alloc(s, n, &p->props, &node_ptr);
        base = (uintptr_t)node_ptr;
    } else {
        rc = pool_alloc(p, n, &base);
    }
out:
    if (!rc) *dptr = (CUdeviceptr)base;
    cpudrv_unlock();
    return rc;
}

struct async_free {
    uintptr_t base;
    unsigned long long id;
    int armed; // queued: fini must free it if the stream dropped the operation
    int done;
};

// The stream reached the free (takes cpudrv_big, as kernels checking memory do).
static CUresult free_run(struct cpudrv_op *op)
{
    struct async_free *f = (struct async_free *)op->data;
    cpudrv_lock();
    cpudrv_mem_free_id(f->base, f->id);
    f->done = 1;
    cpudrv_unlock();
    return CUDA_SUCCESS;
}

// cpudrv_big held. A faulted context drops its queued work; the memory is freed anyway.
static void free_fini(struct cpudrv_op *op)
{
    struct async_free *f = (struct async_free *)op->data;
    if (f->armed && !f->done) cpudrv_mem_free_id(f->base, f->id);
}

// Queues the free of dptr (a pool allocation, cuMemAlloc memory or graph memory) on a
// stream; freeing 0 does nothing. In a capture, a free node of graph memory.
static CUresult free_async(CUdeviceptr dptr, CUstream hs)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_stream *s;
    struct cpudrv_range *r;
    struct cpudrv_op *op;
    struct async_free *f;
    int capturing = 0;
    rc = order_stream(hs, &s, &capturing);
    if (rc || !dptr) goto out;
    if (capturing) { // a free node, of graph memory only (the driver's documented rule)
        rc = cpudrv_capture_free(s, dptr);
        goto out;
    }
    r = cpudrv_mem_device_at((uintptr_t)dptr);
    if (!r || r->freeing) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (r->gmem) { // graph memory: freed in stream order (marked now), its address kept
        rc = cpudrv_gmem_free_outside(r->gmem);
        goto out;
    }
    op = cpudrv_op_new(sizeof(struct async_free));
    if (!op) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    f = (struct async_free *)op->data;
    f->base = r->base;
    f->id = r->id;
    op->run = free_run;
    op->fini = free_fini;
    if (!cpudrv_stream_submit(s, op)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    // The stream owns op now, but its worker needs cpudrv_big (held here) to run or
    // release it, and the table has not changed, so f and r are still valid.
    f->armed = 1;
    r->freeing = 1;
out:
    cpudrv_unlock();
    return rc;
}

// Allocates from the current pool of the stream's device, valid for work ordered after it.
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return TR(alloc_async(dptr, bytesize, NULL, 0, hStream));
}

// Allocates from a given pool (of any device), valid for work ordered after it.
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream)
{
    return TR(alloc_async(dptr, bytesize, pool, 1, hStream));
}

// Frees when the stream reaches this point; the memory returns to its pool then.
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return TR(free_async(dptr, hStream));
}

/* The per-thread-stream variants: stream 0 is the calling thread's per-thread stream.
 * cuda.h declares these names only in per-thread mode: declared here from the plain ones. */

__typeof__(cuMemAllocAsync) cuMemAllocAsync_ptsz;
__typeof__(cuMemAllocFromPoolAsync) cuMemAllocFromPoolAsync_ptsz;
__typeof__(cuMemFreeAsync) cuMemFreeAsync_ptsz;

#define PT(s) ((s) ? (s) : CU_STREAM_PER_THREAD)

// cuMemAllocAsync, stream 0 = per-thread stream.
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return TR(alloc_async(dptr, bytesize, NULL, 0, PT(hStream)));
}

// cuMemAllocFromPoolAsync, stream 0 = per-thread stream.
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream)
{
    return TR(alloc_async(dptr, bytesize, pool, 1, PT(hStream)));
}

// cuMemFreeAsync, stream 0 = per-thread stream.
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return TR(free_async(dptr, PT(hStream)));
}
