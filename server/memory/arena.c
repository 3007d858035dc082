/* A device-memory allocator over the driver's virtual memory calls, for cuMemAlloc (the
 * default; MPSSHIM_DEVICE_VMM=0 leaves it to the driver, and so does a device without those
 * calls: srv_arena_usable). devmem.c says how a free is ordered.
 *
 * Why not the driver's cuMemFree: it waits for every kernel of the context, and holds a lock
 * of the driver meanwhile; in the one context all clients share that is every client's work, so
 * a free beside another client's kernels lasts as long as they do. Memory mapped with
 * cuMemCreate/cuMemMap is unmapped and released without that wait, and unlike memory of a
 * stream-ordered pool it takes stream memory operations. But its granularity is 2 MiB, and
 * mapping costs about ten times what cuMemAlloc does: so small allocations share slabs here, as
 * the driver's own small allocations share its pages (the figures: bench/README.md, "cuMemFree
 * beside other clients").
 *
 * - Per device, under its lock: requests above half a slab get a mapping of their own,
 *   rounded up to the granularity; smaller ones a block of the smallest class that holds
 *   them (512 B, 1 KiB, ... 1 MiB), from a slab of that class (one mapping of 2 MiB,
 *   reserved at an address aligned to its size, so that a block's slab is found from its
 *   address). A slab left empty is kept while it is its class's only empty one, and
 *   unmapped once the server has no clients (srv_arena_trim).
 * - Nothing here waits for work: the caller frees only memory no work can still use
 *   (devmem.c waits for the client's own work first; other clients have no business there).
 * - Access is granted to the owning device and to every device that can reach it as a peer
 *   (access_of). */
#include "server/core/server.h"
#include "server/core/fault.h"
#include "server/memory/arena.h"
#include "server/core/zone.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define ARENA_MIN_SHIFT 9 /* the smallest block: 512 bytes, cuMemAlloc's alignment and more */
#define ARENA_SLAB (2ull << 20)
#define ARENA_CLASSES 12 /* 512 B .. 1 MiB: blocks of at most half a slab */
#define ARENA_BLOCKS (ARENA_SLAB >> ARENA_MIN_SHIFT)

struct mapping {
    uint64_t va, bytes;
    CUmemGenericAllocationHandle h;
    int dev;
    int exportable;  /* made with a POSIX descriptor's handle type: srv_arena_export */
    uint64_t serial; /* which mapping this is, never reused (a mirror's identity: mirror.c) */
};

struct slab {
    struct mapping m;
    int cls;
    uint32_t used, nblocks;
    uint64_t bits[ARENA_BLOCKS / 64]; /* 1: the block is allocated */
    struct slab *next;                /* in its class's list */
    UT_hash_handle hh;                /* by m.va */
};

struct big {
    struct mapping m;
    UT_hash_handle hh; /* by m.va */
};

static struct arena {
    pthread_mutex_t lock;
    uint64_t gran; /* 0 until the first allocation asks the driver */
    struct slab *classes[ARENA_CLASSES];
    struct slab *slabs;
    struct big *bigs;
} arenas[CHAN_MAX_DEVICES];
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Slabs kept empty exist (maybe): set when one is kept, cleared by a trim. */
static _Atomic int cached;

static void init_locks(void)
{
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        pthread_mutex_init(&arenas[d].lock, NULL);
}

/* Who may reach device dev's mappings: dev, and every device of the server's that can
 * reach it as a peer (copies between devices may go straight between them, and a kernel may
 * read them as it could natively once its context enabled peer access: a client's peer
 * access is its own state, peer.c, while the mappings serve every client). */
static size_t access_of(int dev, CUmemAccessDesc *out)
{
    size_t n = 0;
    for (int d = 0; d < srv.ndev && d < CHAN_MAX_DEVICES; d++) {
        int can = d == dev;
        if (!can && DRV(cuDeviceCanAccessPeer)(&can, (CUdevice)d, (CUdevice)dev) != CUDA_SUCCESS)
            can = 0;
        if (can)
            out[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
                                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
    return n;
}

static CUresult map_in_ctx(int dev, uint64_t bytes, uint64_t align, int exportable,
                           struct mapping *m)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemAccessDesc access[CHAN_MAX_DEVICES];
    size_t naccess = access_of(dev, access);
    CUdeviceptr va = 0;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (exportable) {
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        r = DRV(cuMemCreate)(&m->h, bytes, &prop, 0);
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    }
    m->exportable = r == CUDA_SUCCESS;
    if (!m->exportable) r = DRV(cuMemCreate)(&m->h, bytes, &prop, 0); /* as before */
    if (r != CUDA_SUCCESS) return r;
    if ((r = srv_zone_reserve(&va, bytes, align)) != CUDA_SUCCESS) goto release;
    if ((r = DRV(cuMemMap)(va, bytes, 0, m->h, 0)) != CUDA_SUCCESS) goto unreserve;
    if ((r = DRV(cuMemSetAccess)(va, bytes, access, naccess)) != CUDA_SUCCESS) goto unmap;
    static _Atomic uint64_t serials;
    m->va = va;
    m->bytes = bytes;
    m->dev = dev;
    m->serial = atomic_fetch_add(&serials, 1) + 1;
    return CUDA_SUCCESS;
unmap:
    DRV(cuMemUnmap)(va, bytes);
unreserve:
    srv_zone_free(va, bytes);
release:
    DRV(cuMemRelease)(m->h);
    return r;
}

/* One mapping of `bytes` on device dev at an address aligned to `align`, readable and
 * writable from that device (and its peers: access_of). The device's shared context is
 * current meanwhile, here and in map_free (the worker's may be another device's). */
static CUresult map_new(int dev, uint64_t bytes, uint64_t align, int exportable, struct mapping *m)
{
    CUresult r = srv_push_device(dev);
    if (r != CUDA_SUCCESS) return r;
    r = map_in_ctx(dev, bytes, align, exportable, m);
    srv_pop_device();
    return r;
}

static void map_free(const struct mapping *m)
{
    CUresult r = srv_push_device(m->dev);
    if (r == CUDA_SUCCESS) {
        r = DRV(cuMemUnmap)(m->va, m->bytes);
        if (r == CUDA_SUCCESS) r = DRV(cuMemRelease)(m->h);
        if (r == CUDA_SUCCESS) r = srv_zone_free(m->va, m->bytes);
        srv_pop_device();
    }
    if (r != CUDA_SUCCESS)
        srv_log("Unmapping %llu bytes of device memory at %#llx failed with %s",
                (unsigned long long)m->bytes, (unsigned long long)m->va, srv_errname(r));
}

/* The device's granularity, asked once; 0 with *r when the driver would not say. */
static uint64_t granularity(struct arena *a, int dev, CUresult *r)
{
    if (a->gran) return a->gran;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    size_t g = 0;
    *r = DRV(cuMemGetAllocationGranularity)(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (*r == CUDA_SUCCESS && (!g || (g & (g - 1))))
        *r = CUDA_ERROR_NOT_SUPPORTED; /* not a power of two: no slab can be aligned to it */
    if (*r == CUDA_SUCCESS) a->gran = g;
    return a->gran;
}

static CUresult alloc_big(struct arena *a, int dev, uint64_t bytes, CUdeviceptr *p)
{
    uint64_t size;
    if (__builtin_add_overflow(bytes, a->gran - 1, &size)) return CUDA_ERROR_OUT_OF_MEMORY;
    size &= ~(a->gran - 1);
    struct big *b = calloc(1, sizeof(*b));
    if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Exportable: its descriptor may go to a sibling server for a legacy IPC handle's
     * opener there (srv_arena_export); it holds this allocation's bytes alone. */
    CUresult r = map_new(dev, size, a->gran, 1, &b->m);
    if (r != CUDA_SUCCESS) {
        free(b);
        return r;
    }
    HASH_ADD(hh, a->bigs, m.va, sizeof(b->m.va), b);
    *p = b->m.va;
    return CUDA_SUCCESS;
}

static CUresult alloc_small(struct arena *a, int dev, int cls, CUdeviceptr *p)
{
    struct slab *s = a->classes[cls];
    while (s && s->used == s->nblocks)
        s = s->next;
    if (!s) {
        if (!(s = calloc(1, sizeof(*s)))) return CUDA_ERROR_OUT_OF_MEMORY;
        /* Exportable in a GPU's server: another GPU's server of a process using both maps
         * it at its own address for that process's peer access (srv_arena_mirror_export). */
        CUresult r = map_new(dev, ARENA_SLAB, ARENA_SLAB, srv_zone_no() != 0, &s->m);
        if (r != CUDA_SUCCESS) {
            free(s);
            return r;
        }
        s->cls = cls;
        s->nblocks = (uint32_t)(ARENA_SLAB >> (ARENA_MIN_SHIFT + cls));
        s->next = a->classes[cls];
        a->classes[cls] = s;
        HASH_ADD(hh, a->slabs, m.va, sizeof(s->m.va), s);
    }
    for (uint32_t w = 0; w * 64 < s->nblocks; w++) {
        if (s->bits[w] == ~0ull) continue;
        uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(~s->bits[w]);
        if (i >= s->nblocks) break;
        s->bits[w] |= 1ull << (i % 64);
        s->used++;
        *p = s->m.va + ((uint64_t)i << (ARENA_MIN_SHIFT + cls));
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_OUT_OF_MEMORY; /* not reached: the slab had a free block */
}

/* Per device: 0 not asked yet, 1 it has the virtual memory calls, 2 it has not. */
static _Atomic int usable[CHAN_MAX_DEVICES];

int srv_arena_usable(int dev)
{
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES) return 0;
    int u = atomic_load(&usable[dev]);
    if (!u) {
        int v = 0;
        if (DRV(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                      (CUdevice)dev) != CUDA_SUCCESS)
            v = 0;
        int want = 0;
        u = v ? 1 : 2;
        if (atomic_compare_exchange_strong(&usable[dev], &want, u) && u == 2)
            srv_log("device %d has no virtual memory management: its cuMemAlloc is the "
                    "driver's, whose cuMemFree waits for every client's work on it",
                    dev);
    }
    return u == 1;
}

CUresult srv_arena_alloc(int dev, uint64_t bytes, CUdeviceptr *p)
{
    pthread_once(&once, init_locks);
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    struct arena *a = &arenas[dev];
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&a->lock);
    uint64_t g = granularity(a, dev, &r);
    if (!g) {
        /* r says why */
    } else if (bytes > ARENA_SLAB / 2 || g > ARENA_SLAB) {
        r = alloc_big(a, dev, bytes, p);
    } else {
        int cls = 0;
        while ((1ull << (ARENA_MIN_SHIFT + cls)) < bytes)
            cls++;
        r = alloc_small(a, dev, cls, p);
    }
    pthread_mutex_unlock(&a->lock);
    return r;
}

static void slab_unmap(struct arena *a, struct slab *s)
{
    for (struct slab **q = &a->classes[s->cls]; *q; q = &(*q)->next)
        if (*q == s) {
            *q = s->next;
            break;
        }
    HASH_DEL(a->slabs, s);
    map_free(&s->m);
    free(s);
}

/* s has no block in use: kept for the next request of its class if it is the class's only
 * empty slab (a mapping costs about 0.2 ms, so a program allocating and freeing a small
 * buffer in a loop would pay it each time), else unmapped. srv_arena_trim unmaps the kept
 * ones once the server has no clients (main.c), so that the device's memory is back when
 * theirs is. */
static void slab_emptied(struct arena *a, struct slab *s)
{
    for (struct slab *q = a->classes[s->cls]; q; q = q->next)
        if (q != s && !q->used) {
            slab_unmap(a, s);
            return;
        }
    atomic_store(&cached, 1);
}

void srv_arena_usage(int dev, uint64_t *mapped, uint64_t *kept)
{
    *mapped = *kept = 0;
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES) return;
    pthread_once(&once, init_locks);
    struct arena *a = &arenas[dev];
    pthread_mutex_lock(&a->lock);
    for (struct slab *s = a->slabs, *n; s; s = n) {
        n = s->hh.next;
        *mapped += s->m.bytes;
        if (!s->used) *kept += s->m.bytes;
    }
    for (struct big *b = a->bigs, *n; b; b = n) {
        n = b->hh.next;
        *mapped += b->m.bytes;
    }
    pthread_mutex_unlock(&a->lock);
}

int srv_arena_cached(void)
{
    return atomic_load(&cached);
}

void srv_arena_trim(void)
{
    pthread_once(&once, init_locks);
    atomic_store(&cached, 0); /* a slab kept after this is seen by the next trim */
    for (int d = 0; d < srv.ndev && d < CHAN_MAX_DEVICES; d++) {
        struct arena *a = &arenas[d];
        if (atomic_load(&srv_fault[d].state) != SRV_DEV_OK)
            continue; /* lost with its context (fault.c): nothing there is unmapped */
        pthread_mutex_lock(&a->lock);
        for (int cls = 0; cls < ARENA_CLASSES; cls++)
            for (struct slab *s = a->classes[cls], *n; s; s = n) {
                n = s->next;
                if (!s->used) slab_unmap(a, s);
            }
        pthread_mutex_unlock(&a->lock);
    }
}

CUresult srv_arena_free(int dev, CUdeviceptr p)
{
    pthread_once(&once, init_locks);
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES) return CUDA_ERROR_INVALID_VALUE;
    struct arena *a = &arenas[dev];
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&a->lock);
    uint64_t va = p, base = p & ~(ARENA_SLAB - 1);
    struct big *b;
    struct slab *s;
    HASH_FIND(hh, a->bigs, &va, sizeof(va), b);
    HASH_FIND(hh, a->slabs, &base, sizeof(base), s);
    if (b) {
        HASH_DEL(a->bigs, b);
        map_free(&b->m);
        free(b);
        r = CUDA_SUCCESS;
    } else if (s) {
        unsigned shift = ARENA_MIN_SHIFT + (unsigned)s->cls;
        uint64_t i = (p - base) >> shift;
        if (((p - base) & ((1ull << shift) - 1)) == 0 && i < s->nblocks &&
            (s->bits[i / 64] & (1ull << (i % 64)))) {
            s->bits[i / 64] &= ~(1ull << (i % 64));
            if (!--s->used) slab_emptied(a, s);
            r = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return r;
}

CUresult srv_arena_export(int dev, CUdeviceptr p, uint64_t *bytes, int *fd)
{
    pthread_once(&once, init_locks);
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES) return CUDA_ERROR_INVALID_VALUE;
    struct arena *a = &arenas[dev];
    uint64_t va = p;
    struct big *b;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&a->lock);
    HASH_FIND(hh, a->bigs, &va, sizeof(va), b);
    if (b && b->m.exportable) {
        r = DRV(cuMemExportToShareableHandle)(fd, b->m.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                              0);
        *bytes = b->m.bytes;
    }
    pthread_mutex_unlock(&a->lock);
    return r;
}

CUresult srv_arena_mirror_export(int dev, uint64_t value, uint64_t size, uint64_t *base,
                                 uint64_t *bytes, uint64_t *serial, int *fd)
{
    pthread_once(&once, init_locks);
    if (dev < 0 || dev >= srv.ndev || dev >= CHAN_MAX_DEVICES || !size)
        return CUDA_ERROR_INVALID_VALUE;
    struct arena *a = &arenas[dev];
    uint64_t va = value, slab = value & ~(ARENA_SLAB - 1);
    struct big *b;
    struct slab *s;
    const struct mapping *m = NULL;
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&a->lock);
    HASH_FIND(hh, a->bigs, &va, sizeof(va), b);
    if (b) {
        m = &b->m;
    } else {
        HASH_FIND(hh, a->slabs, &slab, sizeof(slab), s);
        if (s) m = &s->m;
    }
    /* The allocation lies in the mapping whole (its record's bounds, the server's). */
    if (m && m->exportable && value - m->va <= m->bytes && size <= m->bytes - (value - m->va)) {
        r = DRV(cuMemExportToShareableHandle)(fd, m->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                              0);
        *base = m->va;
        *bytes = m->bytes;
        *serial = m->serial;
    }
    pthread_mutex_unlock(&a->lock);
    return r;
}
