// The allocation table and the entry points that fill it: device memory, pinned host
// memory, host registration (mempool.c adds pool allocations, vmm.c mappings of virtual
// memory). Device memory is anonymous process memory whose address is the device pointer;
// every pointer a call receives is checked against this table.
#include "cpudrv.h"
#include "graph.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// Sorted by base, non-overlapping; protected by cpudrv_big.
static struct cpudrv_range *ranges;
static size_t nranges, capranges;

// Storage freed while work may still touch it; protected by cpudrv_big.
struct deferred {
    void *map;
    size_t len;
    struct cpudrv_dep *deps;
    unsigned ndeps;
};
static struct deferred *later;
static size_t nlater, caplater;

// Index of the last range with base <= p, or -1.
static long floor_index(uintptr_t p)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

// All below: cpudrv_big held.
// The range containing p, or NULL.
const struct cpudrv_range *cpudrv_mem_find(uintptr_t p)
{
    long i = floor_index(p);
    if (i < 0 || p - ranges[i].base >= ranges[i].size) return NULL;
    return &ranges[i];
}

// A mapping no device was given access to faults like unmapped memory. Access is not
// checked per device (any device's grant opens it to all) nor for writes (read-only
// access lets kernels write): a model of the common case, where the owner gets RW.
static int reachable(const struct cpudrv_range *r)
{
    if (r->type != CPUDRV_MEM_MAPPED) return 1;
    for (int d = 0; d < CPUDRV_MAX_DEVICES; d++)
        if (r->access[d]) return 1;
    return 0;
}

// SUCCESS if [p, p+n) lies inside one range a kernel or copy engine may address
// (device memory, globals, pinned host memory) or inside adjacent mappings of virtual
// memory that some device has access to; else CUDA_ERROR_INVALID_VALUE.
CUresult cpudrv_mem_check(uintptr_t p, size_t n)
{
    long i = floor_index(p);
    if (i < 0 || p - ranges[i].base >= ranges[i].size) return CUDA_ERROR_INVALID_VALUE;
    // Mappings that meet without a gap are one span of addresses, as on a GPU (a reserved
    // range mapped chunk by chunk: PyTorch's expandable segments).
    for (size_t k = (size_t)i;; k++) {
        const struct cpudrv_range *r = &ranges[k];
        if (!reachable(r)) return CUDA_ERROR_INVALID_VALUE;
        size_t left = r->size - (p - r->base);
        if (n <= left) return CUDA_SUCCESS;
        if (r->type != CPUDRV_MEM_MAPPED || k + 1 == nranges ||
            ranges[k + 1].base != r->base + r->size || ranges[k + 1].type != CPUDRV_MEM_MAPPED)
            return CUDA_ERROR_INVALID_VALUE;
        n -= left;
        p = ranges[k + 1].base;
    }
}

// 1 if [p, p+n) lies in pinned (allocated or registered) host memory.
int cpudrv_mem_pinned(const void *p, size_t n)
{
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)p);
    return r &&
           (r->type == CPUDRV_MEM_HOST || r->type == CPUDRV_MEM_REGISTERED ||
            r->type == CPUDRV_MEM_MANAGED) &&
           n <= r->size - ((uintptr_t)p - r->base);
}

// 1 if p lies in any device-side range (device memory, globals, mappings).
int cpudrv_mem_is_device(uintptr_t p)
{
    const struct cpudrv_range *r = cpudrv_mem_find(p);
    return r && (r->type == CPUDRV_MEM_DEVICE || r->type == CPUDRV_MEM_GLOBAL ||
                 r->type == CPUDRV_MEM_MAPPED);
}

// The first range overlapping [p, p+n) (n > 0), or NULL.
const struct cpudrv_range *cpudrv_mem_overlap(uintptr_t p, size_t n)
{
    long i = floor_index(p + n - 1);
    if (i >= 0 && ranges[i].base + ranges[i].size > p) return &ranges[i];
    return NULL;
}

// Adds a range (module globals, mappings); SUCCESS, OUT_OF_MEMORY, or INVALID_VALUE if
// it overlaps one.
CUresult cpudrv_mem_add(const struct cpudrv_range *r)
{
    if (cpudrv_mem_overlap(r->base, r->size)) return CUDA_ERROR_INVALID_VALUE;
    if (nranges == capranges) {
        size_t cap = capranges ? capranges * 2 : 64;
        struct cpudrv_range *nr = realloc(ranges, cap * sizeof *nr);
        if (!nr) return CUDA_ERROR_OUT_OF_MEMORY;
        ranges = nr;
        capranges = cap;
    }
    size_t at = (size_t)(floor_index(r->base) + 1);
    memmove(&ranges[at + 1], &ranges[at], (nranges - at) * sizeof *ranges);
    ranges[at] = *r;
    nranges++;
    return CUDA_SUCCESS;
}

static void remove_at(size_t i)
{
    memmove(&ranges[i], &ranges[i + 1], (nranges - i - 1) * sizeof *ranges);
    nranges--;
}

// Removes the range starting exactly at base, if any.
void cpudrv_mem_remove(uintptr_t base)
{
    long i = floor_index(base);
    if (i < 0 || ranges[i].base != base) return;
    if (ranges[i].type == CPUDRV_MEM_MANAGED) cpudrv_managed_drop(&ranges[i]);
    remove_at((size_t)i);
}

// The range of any type starting exactly at base, or NULL; valid until the table next
// changes.
struct cpudrv_range *cpudrv_mem_at(uintptr_t base)
{
    long i = floor_index(base);
    return i >= 0 && ranges[i].base == base ? &ranges[i] : NULL;
}

static void reap(void)
{
    size_t j = 0;
    for (size_t i = 0; i < nlater; i++) {
        if (cpudrv_deps_reached(later[i].deps, later[i].ndeps)) {
            munmap(later[i].map, later[i].len);
            cpudrv_deps_release(later[i].deps, later[i].ndeps);
        } else {
            later[j++] = later[i];
        }
    }
    nlater = j;
}

// Maps anonymous, not-yet-committed memory for device storage; NULL on failure.
void *cpudrv_mem_map(size_t n, size_t *maplen)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n > SIZE_MAX - page) return NULL;
    size_t len = (n + page - 1) / page * page;
    reap();
    int fl = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = cpudrv_far_map(len, 0, PROT_READ | PROT_WRITE, fl, -1);
    if (!p && (p = mmap(NULL, len, PROT_READ | PROT_WRITE, fl, -1, 0)) == MAP_FAILED) return NULL;
    *maplen = len;
    return p;
}

// Unmaps storage once every stream on the machine passed its current point.
void cpudrv_mem_unmap_later(void *map, size_t maplen)
{
    struct cpudrv_dep *deps = NULL;
    unsigned n = 0, cap = 0;
    reap();
    if (nlater == caplater) {
        size_t c = caplater ? caplater * 2 : 16;
        struct deferred *d = realloc(later, c * sizeof *d);
        if (d) {
            later = d;
            caplater = c;
        }
    }
    // Without room to remember it (out of memory), leaking is safer than unmapping.
    if (nlater == caplater || cpudrv_stream_snapshot(NULL, CPUDRV_SNAP_ALL, &deps, &n, &cap)) {
        cpudrv_deps_release(deps, n);
        return;
    }
    if (!n) {
        munmap(map, maplen);
        free(deps);
        return;
    }
    later[nlater].map = map;
    later[nlater].len = maplen;
    later[nlater].deps = deps;
    later[nlater].ndeps = n;
    nlater++;
}

// Returns device bytes to the accounting / reserves them (OUT_OF_MEMORY if over).
CUresult cpudrv_mem_reserve(int dev, size_t n)
{
    if (n > cpudrv_mem_bytes - cpudrv_devs[dev].used) return CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_devs[dev].used += n;
    return CUDA_SUCCESS;
}

// Returns n accounted bytes of dev.
void cpudrv_mem_unreserve(int dev, size_t n)
{
    cpudrv_devs[dev].used -= n;
}

// cpudrv_big held: frees what range i holds and removes it.
static void free_at(size_t i)
{
    struct cpudrv_range r = ranges[i];
    remove_at(i);
    // A pool's block stays reserved by the pool; the pool decides when it goes.
    if (r.pool) {
        cpudrv_pool_give_back(r.pool, r.base);
        return;
    }
    if (r.type == CPUDRV_MEM_DEVICE) cpudrv_mem_unreserve(r.dev, r.maplen);
    if (r.type == CPUDRV_MEM_MANAGED) cpudrv_managed_drop(&r);
    if (r.map) cpudrv_mem_unmap_later(r.map, r.maplen);
}

// Frees every range owned by ctx (context teardown).
void cpudrv_mem_free_ctx(struct cpudrv_ctx *ctx)
{
    for (size_t i = nranges; i-- > 0;)
        if (ranges[i].ctx == ctx && ranges[i].type != CPUDRV_MEM_GLOBAL &&
            !(ranges[i].flags & CPUDRV_RANGE_MODULE))
            free_at(i);
}

// The device memory range (cuMemAlloc or a pool) starting exactly at p, or NULL; valid
// until the table next changes.
struct cpudrv_range *cpudrv_mem_device_at(uintptr_t p)
{
    long i = floor_index(p);
    if (!p || i < 0 || ranges[i].base != p || ranges[i].type != CPUDRV_MEM_DEVICE) return NULL;
    return &ranges[i];
}

// cpudrv_big held: allocations of pool p whose free has not been asked for.
size_t cpudrv_mem_pool_outstanding(const struct cpudrv_pool *p)
{
    size_t n = 0;
    for (size_t i = 0; i < nranges; i++)
        n += ranges[i].pool == p && !ranges[i].freeing;
    return n;
}

// Frees the range starting at base if it is still allocation id (a stream-ordered free
// that the stream reached; the allocation may have gone with its context meanwhile).
void cpudrv_mem_free_id(uintptr_t base, unsigned long long id)
{
    long i = floor_index(base);
    if (i >= 0 && ranges[i].base == base && ranges[i].id == id) free_at((size_t)i);
}

// cpudrv_big held: maps n bytes and records them as a range of the given type.
static CUresult alloc_range(struct cpudrv_ctx *c, size_t n, int type, unsigned flags,
                            uintptr_t *out)
{
    struct cpudrv_ctx *owner = cpudrv_ctx_owner(c);
    struct cpudrv_range r = {0};
    r.map = cpudrv_mem_map(n, &r.maplen);
    if (!r.map) return CUDA_ERROR_OUT_OF_MEMORY;
    if (type == CPUDRV_MEM_DEVICE && cpudrv_mem_reserve(c->dev, r.maplen)) {
        munmap(r.map, r.maplen);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r.base = (uintptr_t)r.map;
    r.size = n;
    r.type = type;
    r.flags = flags;
    r.dev = c->dev;
    r.ctx = owner;
    r.id = cpudrv_next_id();
    CUresult rc = cpudrv_mem_add(&r);
    if (rc) {
        if (type == CPUDRV_MEM_DEVICE) cpudrv_mem_unreserve(c->dev, r.maplen);
        munmap(r.map, r.maplen);
        return rc;
    }
    *out = r.base;
    return CUDA_SUCCESS;
}

// cpudrv_enter for an allocation or a free, which stream capture counts as potentially
// unsafe (see cuThreadExchangeStreamCaptureMode): on success cpudrv_big is HELD.
static CUresult enter_unsafe(struct cpudrv_ctx **c)
{
    CUresult rc = cpudrv_enter(c);
    if (rc) return rc;
    rc = cpudrv_capture_unsafe();
    if (rc) cpudrv_unlock();
    return rc;
}

// Allocates device memory (page-aligned; OUT_OF_MEMORY past MPSSHIM_CPUDRV_MEM_MB).
// MPSSHIM_CPUDRV_SLOW_ALLOC=S: an allocation of exactly 1 MiB takes S seconds, as a
// driver call that hangs would (the server's watch on calls that do not return, and its
// stack dump: tests/stall_watch.sh). Other sizes are not slowed.
static void slow_alloc(size_t bytesize)
{
    const char *v = getenv("MPSSHIM_CPUDRV_SLOW_ALLOC");
    if (v && bytesize == (1u << 20)) sleep((unsigned)atoi(v));
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    if (!dptr || !bytesize) return TR(CUDA_ERROR_INVALID_VALUE);
    slow_alloc(bytesize);
    struct cpudrv_ctx *c;
    CUresult rc = enter_unsafe(&c);
    if (rc) return TR(rc);
    uintptr_t p;
    rc = alloc_range(c, bytesize, CPUDRV_MEM_DEVICE, 0, &p);
    cpudrv_unlock();
    if (!rc) *dptr = (CUdeviceptr)p;
    return TR(rc);
}

// Allocates Height rows of WidthInBytes, with the pitch rounded up to 512 bytes.
CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                         unsigned int ElementSizeBytes)
{
    if (!dptr || !pPitch || !WidthInBytes || !Height ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return TR(CUDA_ERROR_INVALID_VALUE);
    size_t pitch = (WidthInBytes + 511) / 512 * 512;
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch) return TR(CUDA_ERROR_OUT_OF_MEMORY);
    struct cpudrv_ctx *c;
    CUresult rc = enter_unsafe(&c);
    if (rc) return TR(rc);
    uintptr_t p;
    rc = alloc_range(c, pitch * Height, CPUDRV_MEM_DEVICE, 0, &p);
    cpudrv_unlock();
    if (!rc) {
        *dptr = (CUdeviceptr)p;
        *pPitch = pitch;
    }
    return TR(rc);
}

// MPSSHIM_CPUDRV_FREE_WAITS=1: cuMemFree, cuMemFreeHost and cuMemHostUnregister first wait
// for all work of the current context (pinned memory: of the one that allocated or registered
// it, pinned_owner), as the real driver's do (an H100 with driver
// 580.159.04: a free waited for every kernel of the context; an H200 with the same driver: all
// three waited for a stream blocked on cuStreamWaitValue32, bench/NOTES.md "Driver calls held
// by a waiting stream"; made in another context of the device, none waited, tools/heldwait
// --other). 2: and launches wait meanwhile (ctxprops.c). Off by default, where the storage
// only outlives the queued work.
int cpudrv_free_waits(void)
{
    static int on = -1;
    return cpudrv_env_level("MPSSHIM_CPUDRV_FREE_WAITS", 2, &on);
}

// Frees device memory; the storage itself goes once queued work that may use it ran. A
// pool allocation goes back to its pool at once: the caller promises that its work is
// done, as with the real driver, which does not synchronise for those.
CUresult cuMemFree(CUdeviceptr dptr)
{
    struct cpudrv_ctx *c;
    CUresult rc = enter_unsafe(&c);
    if (rc) return TR(rc);
    if (cpudrv_free_waits() && (rc = cpudrv_ctx_wait_all(c)) != CUDA_SUCCESS) {
        cpudrv_unlock();
        return TR(rc);
    }
    struct cpudrv_range *r = cpudrv_mem_device_at((uintptr_t)dptr);
    long m = floor_index((uintptr_t)dptr);
    if (!r && dptr && m >= 0 && ranges[m].base == (uintptr_t)dptr &&
        ranges[m].type == CPUDRV_MEM_MANAGED && !(ranges[m].flags & CPUDRV_RANGE_MODULE))
        r = &ranges[m]; // managed memory is freed by cuMemFree too (not a module's)
    if (!r || r->freeing)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (r->gmem)
        rc = cpudrv_gmem_free_outside(r->gmem); // graph memory: its node keeps the address
    else
        free_at((size_t)(r - ranges));
    cpudrv_unlock();
    return TR(rc);
}

// Free and total device memory of the current context's device.
CUresult cuMemGetInfo(size_t *free, size_t *total)
{
    if (!free || !total) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    *total = cpudrv_mem_bytes;
    *free = cpudrv_mem_bytes - cpudrv_devs[c->dev].used;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Base and size of the allocation containing dptr (NOT_FOUND if none).
CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)dptr);
    if (!r || r->type == CPUDRV_MEM_REGISTERED) {
        rc = CUDA_ERROR_NOT_FOUND;
    } else {
        if (pbase) *pbase = (CUdeviceptr)r->base;
        if (psize) *psize = r->size;
    }
    cpudrv_unlock();
    return TR(rc);
}

// Allocates pinned, device-mapped host memory (its device pointer is its address).
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    unsigned known =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (!pp || !bytesize || (Flags & ~known)) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = enter_unsafe(&c);
    if (rc) return TR(rc);
    uintptr_t p;
    rc = alloc_range(c, bytesize, CPUDRV_MEM_HOST, Flags, &p);
    cpudrv_unlock();
    if (!rc) *pp = (void *)p;
    return TR(rc);
}

// Managed memory: host memory (each process's memory is its own here) that kernels and
// copies reach at its address; its advice is kept by managed.c.
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = enter_unsafe(&c);
    if (rc) return TR(rc);
    uintptr_t p;
    rc = alloc_range(c, bytesize, CPUDRV_MEM_MANAGED, flags, &p);
    cpudrv_unlock();
    if (!rc) *dptr = (CUdeviceptr)p;
    return TR(rc);
}

// cuMemHostAlloc with no flags.
CUresult cuMemAllocHost(void **pp, size_t bytesize)
{
    if (!pp || !bytesize) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = enter_unsafe(&c);
    if (rc) return TR(rc);
    uintptr_t p;
    rc = alloc_range(c, bytesize, CPUDRV_MEM_HOST, 0, &p);
    cpudrv_unlock();
    if (!rc) *pp = (void *)p;
    return TR(rc);
}

// cpudrv_big held: the context whose work freeing or unregistering pinned memory at p waits
// for: the one that allocated or registered it, while it lives, else cur. As on an H200
// (driver 580.159.04): registered in the primary context and unregistered with a second one
// current, the call waited for the primary's work and held its launches (tools/heldwait
// unregister --cross; cuMemFreeHost alike); registered in the second one and used by the
// primary's copies, it waited for nothing (--owned).
static struct cpudrv_ctx *pinned_owner(const void *p, struct cpudrv_ctx *cur)
{
    long i = floor_index((uintptr_t)p);
    struct cpudrv_ctx *o;
    if (p && i >= 0 && ranges[i].base == (uintptr_t)p && ranges[i].ctx &&
        cpudrv_ctx_find((CUcontext)ranges[i].ctx, &o) == CUDA_SUCCESS)
        return o;
    return cur;
}

// Frees memory from cuMemHostAlloc/cuMemAllocHost.
CUresult cuMemFreeHost(void *p)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    rc = cpudrv_capture_unsafe();
    if (rc) {
        cpudrv_unlock();
        return TR(rc);
    }
    struct cpudrv_ctx *c = cpudrv_free_waits() ? pinned_owner(p, cpudrv_ctx_current()) : NULL;
    if (c && (rc = cpudrv_ctx_wait_all(c)) != CUDA_SUCCESS) {
        cpudrv_unlock();
        return TR(rc);
    }
    long i = floor_index((uintptr_t)p);
    if (!p || i < 0 || ranges[i].base != (uintptr_t)p || ranges[i].type != CPUDRV_MEM_HOST)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        free_at((size_t)i);
    cpudrv_unlock();
    return TR(rc);
}

// Device address of pinned host memory: the same address (flags must be 0).
CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!pdptr || Flags) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    if (cpudrv_mem_pinned(p, 1))
        *pdptr = (CUdeviceptr)(uintptr_t)p;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Flags given when pinned host memory was allocated or registered.
CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    if (!pFlags) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)p);
    if (r && (r->type == CPUDRV_MEM_HOST || r->type == CPUDRV_MEM_REGISTERED))
        *pFlags = r->flags;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Pins a caller's range: async copies from/to it become truly asynchronous.
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                     CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    if (!p || !bytesize || (Flags & ~known) || (uintptr_t)p > UINTPTR_MAX - bytesize)
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    const struct cpudrv_range *o = cpudrv_mem_overlap((uintptr_t)p, bytesize);
    if (o) {
        rc = o->type == CPUDRV_MEM_HOST || o->type == CPUDRV_MEM_REGISTERED
                 ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                 : CUDA_ERROR_INVALID_VALUE;
    } else {
        struct cpudrv_range r = {0};
        r.base = (uintptr_t)p;
        r.size = bytesize;
        r.type = CPUDRV_MEM_REGISTERED;
        r.flags = Flags;
        r.dev = c->dev;
        r.ctx = cpudrv_ctx_owner(c);
        r.id = cpudrv_next_id();
        rc = cpudrv_mem_add(&r);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Unpins a range registered at exactly p, after queued work that may use it has run.
CUresult cuMemHostUnregister(void *p)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    if (cpudrv_free_waits() && (rc = cpudrv_ctx_wait_all(pinned_owner(p, c))) != CUDA_SUCCESS) {
        cpudrv_unlock();
        return TR(rc);
    }
    long i = floor_index((uintptr_t)p);
    if (!p || i < 0 || ranges[i].base != (uintptr_t)p || ranges[i].type != CPUDRV_MEM_REGISTERED) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    }
    uintptr_t lo = ranges[i].base, hi = lo + ranges[i].size;
    remove_at((size_t)i);
    // The caller may free the memory as soon as this returns: wait for the queued work
    // that may still access it (not for unrelated work, which may never finish).
    struct cpudrv_dep *deps = NULL;
    unsigned n = 0, cap = 0;
    int err = cpudrv_stream_snapshot_touching(lo, hi, &deps, &n, &cap);
    cpudrv_unlock();
    cpudrv_deps_wait_release(deps, n);
    return TR(err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS);
}
