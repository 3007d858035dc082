/* Device memory the client allocates with cuMemAlloc, served from the server's arena of
 * mapped memory (arena.c; the default, on every device that has the virtual memory calls;
 * MPSSHIM_DEVICE_VMM=0 turns it off), or from a pool of the server's when
 * MPSSHIM_DEVICE_POOL=1 with the arena off, so that freeing it never waits for the whole
 * context. The arena shares the pool's records and streams; what differs is said where it
 * does (a free waits for the client's own work, as there is no stream-ordered free of
 * mapped memory).
 *
 * Why: the driver's cuMemFree waits for all the work of the context it frees in, and holds
 * a lock of the driver while it waits (in a 32-client soak every server thread stood in that
 * lock's queue behind one client's cuMemFree, new clients' registration included:
 * bench/NOTES.md, "cuMemFree in the shared context"). Natively that context is the process's
 * own; here it is every client's, so one client's free waits for every client's kernels and
 * stops every other client's driver calls meanwhile; if the work it waits for itself waits on a
 * client whose worker stands in that queue (a host function whose application thread waits for
 * a reply), nothing moves. cuMemFreeAsync does not wait: the memory goes back to the pool in
 * stream order.
 *
 * How:
 * - One pool per device, made on first use, with internal dependencies off
 *   (CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES): an allocation is never made to
 *   wait for another client's streams; freed memory is reused once its free has run.
 * - Per client and device, two streams of the server's: one for its allocations, which
 *   holds nothing else and is synchronised after each (so the memory is usable on every
 *   stream when the call returns, as cuMemAlloc's is), and one for its frees.
 * - A free first makes the free stream wait for everything the client has queued on that
 *   device so far (an event recorded on each of its streams, and its destroyed streams'
 *   work), as the driver's cuMemFree would have, then frees there, and synchronizes that
 *   stream: the call returns once the client's own earlier work is done, as natively (a
 *   program may read its results after a cuMemFree without synchronising), but never
 *   waits for other clients' work, and holds no lock of the driver while it waits. The
 *   memory is never reused under the client's own work.
 * - At release the client's work has drained (registry.c), so the free needs no order.
 * - Records keep DEVMEM_POOLED in aux; a record made for the family's release alone
 *   (registry.c's tmp record) and every other device range go to cuMemFree.
 *
 * - IPC memory of the pool whose last holder lets go (ipc.c) is freed on a stream of the
 *   server's: no client's work is waited for (natively an exporter's free does not wait
 *   for its openers' work either: it lives in their contexts).
 *
 * The pool is not for use. A free beside another client's queued kernels is as quick from the
 * pool as from the arena, where the driver's cuMemFree waits for those kernels
 * (bench/README.md, "cuMemFree beside other clients"). But the driver refuses stream memory
 * operations on pool memory and memset graph nodes on it given no context
 * (CUDA_ERROR_INVALID_VALUE; natively cuMemAlloc memory takes both), and its pointers'
 * context attribute reads NULL: three GPU-tier programs failed with it on (none with the
 * arena). Not covered for the pool either: pitched
 * allocations (cuMemAllocPitch: the driver picks the pitch), peer access from other
 * devices (pool memory needs cuMemPoolSetAccess, which is not set), and streams capturing
 * when the free comes (no event can be recorded on them: their work queued before the
 * capture is not waited for). */
#include "server/core/server.h"
#include "server/code/codegate.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/memory/arena.h"
#include "server/memory/devmem.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/memory/pools.h"
#include "server/core/zone.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Actions the server takes once all the work a client queued before asking for them has
 * run, on whatever stream (issue 34, S11): its memory must not reach another client while
 * that work may still touch it. The client's free stream of the device waits for all of it,
 * an event behind that marks the end, and the worker carries the actions out in order once
 * their events have completed (srv_later_reap: polled as its waits are). Nothing waits on
 * the host, as the natively non-waiting calls do not. What they are:
 * - a stream-ordered free of an arena block (a free on stream S waited for S alone, and a
 *   copy queued earlier on stream T read the next owner's data);
 * - an unmap or an address free (vmm.c: the driver does both at once, and a client's copy still
 *   queued read another client's secret mapped there since). */
struct srv_later {
    CUevent ev; /* the client's pool's, of dev */
    int dev;
    enum srv_later_kind kind;
    uint64_t base, size;
};

/* A client's own (its devmem), the worker's: its allocation and free streams per device,
 * and the frees, unmaps and address frees waiting for the work it queued before them, in
 * order (srv_later). */
struct srv_devmem {
    struct {
        CUstream alloc, free;
    } dev[CHAN_MAX_DEVICES];
    struct srv_later *later;
    size_t nlater, caplater;
};

#define DEVMEM_POOLED (1ull << 62) /* in a device range's aux: it came from the pool */

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static CUmemoryPool pools[CHAN_MAX_DEVICES];

/* The device's pool (made now if need be), or NULL with the error. */
static CUmemoryPool pool_of(int dev, CUresult *err)
{
    *err = CUDA_ERROR_INVALID_DEVICE;
    if (dev < 0 || dev >= srv.ndev) return NULL;
    pthread_mutex_lock(&pools_lock);
    if (!pools[dev]) {
        CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
        CUmemoryPool p;
        if ((*err = srv_pool_create(&p, &props)) == CUDA_SUCCESS) {
            int off = 0;
            (void)DRV(cuMemPoolSetAttribute)(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                                             &off);
            pools[dev] = p;
        }
    }
    CUmemoryPool p = pools[dev];
    pthread_mutex_unlock(&pools_lock);
    if (p) *err = CUDA_SUCCESS;
    return p;
}

/* The client's stream *s of device dev, made now if need be, in the device's shared
 * context (the one current for the call may be another device's, or a green context). */
static CUresult stream_of(int dev, CUstream *s)
{
    if (*s) return CUDA_SUCCESS;
    CUresult r = srv_push_device(dev);
    if (r != CUDA_SUCCESS) return r;
    r = DRV(cuStreamCreate)(s, CU_STREAM_NON_BLOCKING);
    srv_pop_device();
    return r;
}

CUresult srv_devmem_alloc(struct srv_client *c, int dev, CUdeviceptr *p, size_t bytes)
{
    if (srv.device_vmm) {
        if (c->devmem->nlater) /* its own blocks freed since, first */
            srv_later_reap(c, 0);
        return srv_arena_alloc(dev, bytes, p);
    }
    CUresult r;
    CUmemoryPool pool = pool_of(dev, &r);
    if (!pool) return r;
    if ((r = stream_of(dev, &c->devmem->dev[dev].alloc)) != CUDA_SUCCESS) return r;
    if ((r = DRV(cuMemAllocFromPoolAsync)(p, bytes, pool, c->devmem->dev[dev].alloc)) !=
        CUDA_SUCCESS)
        return r;
    return DRV(cuStreamSynchronize)(c->devmem->dev[dev].alloc);
}

/* The free stream (arg) waits for what each of the client's streams holds now, on any
 * device (a kernel on another device may reach this one's memory through peer access). A
 * capturing stream's work from before the capture is its capture mark (graph.c): an event
 * recorded there now would become a node of the graph. */
static void order_after(struct srv_client *c, struct srv_stream *s, void *arg)
{
    CUstream fs = arg;
    CUevent ev;
    if (srv_stream_capturing(c, s)) {
        if (s->cap_mark) (void)DRV(cuStreamWaitEvent)(fs, s->cap_mark, 0);
        return;
    }
    if (DRV(cuStreamQuery)(s->real) == CUDA_SUCCESS ||
        srv_event_take(c, s->device, &ev) != CUDA_SUCCESS)
        return;
    /* The wait takes the event's state now: it can be recorded again at once. */
    if (DRV(cuEventRecord)(ev, s->real) == CUDA_SUCCESS) (void)DRV(cuStreamWaitEvent)(fs, ev, 0);
    srv_event_give(c, s->device, ev);
}

/* Whether any of the client's streams may still run work it queued, its destroyed streams'
 * and what a capturing stream held when its capture began included (note_busy: into the
 * int at arg, for one stream). */
static void note_busy(struct srv_client *c, struct srv_stream *s, void *arg)
{
    int *busy = arg;
    if (*busy) return;
    if (srv_stream_capturing(c, s))
        *busy = s->cap_mark && DRV(cuEventQuery)(s->cap_mark) == CUDA_ERROR_NOT_READY;
    else
        *busy = DRV(cuStreamQuery)(s->real) == CUDA_ERROR_NOT_READY;
}

static int client_busy(struct srv_client *c)
{
    int busy = 0;
    srv_streams_each(c, 0, 1, note_busy, &busy);
    for (size_t i = 0; i < c->nretired && !busy; i++)
        busy = DRV(cuEventQuery)(c->retired[i].ev) == CUDA_ERROR_NOT_READY;
    return busy;
}

/* Device dev's free stream of the client waits for all the work it has queued so far, its
 * destroyed streams' included. */
static void order_free_stream(struct srv_client *c, int dev)
{
    CUstream fs = c->devmem->dev[dev].free;
    srv_streams_each(c, 0, 1, order_after, fs);
    for (size_t i = 0; i < c->nretired; i++)
        (void)DRV(cuStreamWaitEvent)(fs, c->retired[i].ev, 0);
}

static CUresult devmem_free(struct srv_client *c, int dev, uint64_t p, int after_work)
{
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = stream_of(dev, &c->devmem->dev[dev].free);
    if (r != CUDA_SUCCESS) return r;
    if (after_work) order_free_stream(c, dev);
    if (srv.device_vmm) {
        /* The arena has no stream-ordered free: the block goes back once the client's
         * earlier work is done, waited for here (as cuMemFree waits natively), unless the
         * client leaves first (its release then frees it, after its work). */
        if (after_work && srv_stream_settle(c, c->devmem->dev[dev].free) != 0)
            return CUDA_ERROR_NOT_READY;
        return srv_arena_free(dev, (CUdeviceptr)p);
    }
    if ((r = DRV(cuMemFreeAsync)((CUdeviceptr)p, c->devmem->dev[dev].free)) != CUDA_SUCCESS ||
        !after_work)
        return r;
    /* As natively, cuMemFree returns once the work the client queued before it is done (a
     * program may read that work's results after it without synchronising); other clients'
     * work is not waited for, and no lock of the driver is held meanwhile. */
    return srv_stream_settle(c, c->devmem->dev[dev].free) == 0 ? CUDA_SUCCESS
                                                               : CUDA_ERROR_NOT_READY;
}

/* Per device, a stream of the server's for memory no client holds any more. */
static CUstream orphans[CHAN_MAX_DEVICES];

CUresult srv_devmem_free_orphan(int dev, uint64_t p)
{
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_VALUE;
    if (srv.device_vmm) return srv_arena_free(dev, (CUdeviceptr)p);
    pthread_mutex_lock(&pools_lock);
    CUresult r = stream_of(dev, &orphans[dev]);
    pthread_mutex_unlock(&pools_lock);
    return r == CUDA_SUCCESS ? DRV(cuMemFreeAsync)((CUdeviceptr)p, orphans[dev]) : r;
}

int srv_devmem_pooled(const struct srv_obj *o)
{
    return o && o->key.type == SHIM_HT_MEM_DEVICE && (o->aux & DEVMEM_POOLED);
}

CUresult srv_devmem_free(struct srv_client *c, struct srv_obj *o)
{
    return devmem_free(c, o->dev, o->key.value, 1);
}

static void later_do(struct srv_client *c, const struct srv_later *x)
{
    CUresult r = x->kind == SRV_LATER_ARENA_FREE ? srv_arena_free(x->dev, x->base)
                 : x->kind == SRV_LATER_UNMAP    ? DRV(cuMemUnmap)(x->base, x->size)
                                                 : srv_zone_free(x->base, x->size);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: %s of %#llx after its work failed with %s", (int)c->pid,
                x->kind == SRV_LATER_ARENA_FREE ? "freeing device memory"
                : x->kind == SRV_LATER_UNMAP    ? "unmapping"
                                                : "freeing reserved addresses",
                (unsigned long long)x->base, srv_errname(r));
}

CUresult srv_later(struct srv_client *c, int dev, enum srv_later_kind kind, uint64_t base,
                   uint64_t size)
{
    struct srv_later x = {.dev = dev, .kind = kind, .base = base, .size = size};
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_VALUE;
    if (!client_busy(c)) { /* no work of its can touch it any more */
        later_do(c, &x);
        return CUDA_SUCCESS;
    }
    CUresult r = stream_of(dev, &c->devmem->dev[dev].free);
    if (r != CUDA_SUCCESS) return r;
    if (c->devmem->nlater == c->devmem->caplater) {
        size_t ncap = c->devmem->caplater ? c->devmem->caplater * 2 : 8;
        struct srv_later *n = realloc(c->devmem->later, ncap * sizeof(*n));
        if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
        c->devmem->later = n;
        c->devmem->caplater = ncap;
    }
    if ((r = srv_event_take(c, dev, &x.ev)) != CUDA_SUCCESS) return r;
    order_free_stream(c, dev);
    if ((r = DRV(cuEventRecord)(x.ev, c->devmem->dev[dev].free)) != CUDA_SUCCESS) {
        srv_event_give(c, dev, x.ev);
        return r;
    }
    c->devmem->later[c->devmem->nlater++] = x;
    return CUDA_SUCCESS;
}

CUresult srv_devmem_free_after(struct srv_client *c, struct srv_obj *o)
{
    return srv_later(c, o->dev, SRV_LATER_ARENA_FREE, o->key.value, o->size);
}

CUevent srv_devmem_work_event(struct srv_client *c, int dev)
{
    CUevent ev = NULL;
    if (!client_busy(c)) /* nothing to wait for: what follows need not */
        return NULL;
    if (dev < 0 || dev >= srv.ndev || stream_of(dev, &c->devmem->dev[dev].free) != CUDA_SUCCESS)
        return NULL;
    order_free_stream(c, dev);
    if (DRV(cuEventCreate)(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        DRV(cuEventRecord)(ev, c->devmem->dev[dev].free) != CUDA_SUCCESS) {
        if (ev) DRV(cuEventDestroy_v2)(ev);
        (void)DRV(cuStreamSynchronize)(c->devmem->dev[dev].free); /* the work is done by now */
        return NULL;
    }
    return ev;
}

size_t srv_later_reap(struct srv_client *c, int wait)
{
    size_t i = 0;
    /* In order: an address free comes after the unmaps of its range queued before it. */
    for (; i < c->devmem->nlater; i++) {
        struct srv_later *x = &c->devmem->later[i];
        if (srv_fault_dead(c, x->dev))
            continue; /* lost with its context there, the memory too (arena.c, fault.c) */
        CUresult q = DRV(cuEventQuery)(x->ev);
        /* Waiting, polled: the work may wait on the client itself, and a client that left
         * must get to its release instead (which ends its waits, memops.c). */
        for (unsigned us = 10; wait && q == CUDA_ERROR_NOT_READY && !atomic_load(&c->dead);
             us = us < 1000 ? us * 2 : us) {
            struct timespec ts = {0, (long)us * 1000};
            nanosleep(&ts, NULL);
            q = DRV(cuEventQuery)(x->ev);
        }
        if (q == CUDA_ERROR_NOT_READY) break;
        /* Done; or failed, which ends the context's work for good (a fault: what it
         * would free is forgotten, as everything there is). */
        if (q == CUDA_SUCCESS) later_do(c, x);
        srv_event_give(c, x->dev, x->ev);
    }
    if (i && i < c->devmem->nlater)
        memmove(c->devmem->later, c->devmem->later + i,
                (c->devmem->nlater - i) * sizeof(*c->devmem->later));
    c->devmem->nlater -= i;
    return c->devmem->nlater;
}

int srv_devmem_drain_by(struct srv_client *c, uint64_t by)
{
    int late = 0;
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        if (c->devmem->dev[d].free && !srv_fault_dead(c, d))
            late |= srv_stream_settle_by(c, c->devmem->dev[d].free, by) != 0;
    return late ? -1 : 0;
}

/* A departing client's device memory (cuda_symbols.txt: release=devmem). */
void srv_release_devmem(struct srv_client *c, struct srv_obj *o)
{
    CUresult r = srv_devmem_pooled(o) ? devmem_free(c, o->dev, o->key.value, 0)
                                      : srv_gated_free(c, (CUdeviceptr)o->key.value);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: releasing device memory failed with %s", (int)c->pid,
                srv_errname(r));
}

/* The client leaves: its streams go (frees still queued on them complete). Its
 * stream-ordered frees' work has drained with the rest, unless the release left its work
 * running: those blocks then stay out of the arena, as its other memory does (registry.c). */
void srv_devmem_gone(struct srv_client *c)
{
    if (!c->left_running) srv_later_reap(c, 0);
    free(c->devmem->later); /* what is left waits on work left running: kept out for good */
    c->devmem->later = NULL;
    c->devmem->nlater = c->devmem->caplater = 0;
    for (int d = 0; d < CHAN_MAX_DEVICES; d++) {
        if (c->devmem->dev[d].alloc && !srv_fault_dead(c, d))
            DRV(cuStreamDestroy_v2)(c->devmem->dev[d].alloc);
        if (c->devmem->dev[d].free && !srv_fault_dead(c, d))
            DRV(cuStreamDestroy_v2)(c->devmem->dev[d].free);
        c->devmem->dev[d].alloc = c->devmem->dev[d].free = NULL;
    }
}

/* Whether cuMemAlloc on dev is served here (arena or pool) rather than by the driver. */
static int served_here(int dev)
{
    return srv.device_vmm ? srv_arena_usable(dev) : srv.device_pool;
}

/* cuMemAlloc: from the arena or the pool when on, else the driver's. */
static CUresult alloc_call(struct srv_client *c, struct srv_call *k)
{
    CUdeviceptr *p = k->a.ptr[0];
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (!served_here(k->dev)) return DRV(cuMemAlloc_v2)(p, (size_t)k->vals[1]);
    return srv_devmem_alloc(c, k->dev, p, (size_t)k->vals[1]);
}

static CUresult alloc_after(struct srv_client *c, struct srv_call *k)
{
    const CUdeviceptr *p = k->a.ptr[0];
    struct srv_obj *o = served_here(k->dev) ? srv_obj_find(c, SHIM_HT_MEM_DEVICE, *p) : NULL;
    if (o) o->aux |= DEVMEM_POOLED;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_mem_alloc = {.call = alloc_call, .after = alloc_after};

/* A release, once the client's streams drained: its free streams' marks follow that work,
 * and what waited for it (srv_later) is done before the walk frees what it lies in. Only
 * when the client leaves: a context's release frees nothing of those. */
static int devmem_drain(struct srv_client *c, uint32_t ctx, uint64_t by)
{
    if (ctx) return 0;
    if (srv_devmem_drain_by(c, by) != 0) return -1;
    if (c->devmem->nlater) srv_later_reap(c, 1);
    return 0;
}

SRV_CLIENT_STATE(devmem_state, devmem)

size_t srv_later_pending(const struct srv_client *c)
{
    return c->devmem->nlater;
}

const struct srv_family srv_family_devmem = {.name = "devmem",
                                             SRV_CLIENT_STATE_HOOKS(devmem_state),
                                             .client_fini = srv_devmem_gone,
                                             .ctx_drain = devmem_drain};
