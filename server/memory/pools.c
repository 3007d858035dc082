/* The stream-ordered allocator: memory pools and cuMemAllocAsync/cuMemFreeAsync, described
 * in cuda_symbols.txt; what no description can say is here.
 *
 * Every client has a pool of its own on each device, made on first use, which it sees as
 * the device's default pool and, until it sets another, as the device's current pool. The
 * real device's default and current pools are shared state of the one context: a client
 * that set the device's current pool would change every other client's cuMemAllocAsync,
 * and memory one client frees into a shared pool could be handed to another client, with
 * the driver adding dependencies between their streams (ALLOW_INTERNAL_DEPENDENCIES) or
 * reusing it as soon as the free completed (ALLOW_OPPORTUNISTIC). With a pool per client,
 * freed memory is only ever reused by the client that freed it, in its own stream order;
 * its pools' attributes are its own; and when it leaves, its allocations are freed and
 * its pools destroyed, so their memory returns to the device. cuMemAllocAsync is replayed
 * as cuMemAllocFromPoolAsync from the client's current pool for the stream's device.
 * Allocations count against the client's memory limit when made, and stop counting when
 * their free is enqueued; what a pool keeps reserved beyond that does not count. In a
 * stream capture an allocation is an allocation node: graph memory (graphmem.c). */
#include "server/core/server.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/memory/devmem.h"
#include "server/graphs/graph.h"
#include "server/memory/pools.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What a pool is to its client, in its record's aux word. */
#define POOL_DEFAULT 0x1u /* the client's default pool of its device */
#define POOL_CURRENT 0x2u /* the current pool of its device, set by the client */
#define POOL_PLAIN 0x4u   /* made with plain properties: retired as a spare (spares.c) */

/* The client's pool of device dev marked `what`, or NULL. */
static struct srv_obj *marked(struct srv_client *c, int dev, uint64_t what)
{
    for (struct srv_obj *o = srv_objs_of(c, SHIM_HT_CUmemoryPool); o; o = o->type_next)
        if (o->dev == dev && (o->aux & what)) return o;
    return NULL;
}

/* The client's own default pool of device dev (made now if need be), or NULL. */
static struct srv_obj *default_pool(struct srv_client *c, int dev, CUresult *err)
{
    *err = CUDA_ERROR_INVALID_DEVICE;
    if (dev < 0 || dev >= srv.ndev) return NULL;
    struct srv_obj *o = marked(c, dev, POOL_DEFAULT);
    if (o) return o;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props); /* padding too: srv_pool_props_plain compares bytes */
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    if ((*err = srv_pool_create(&pool, &props)) != CUDA_SUCCESS) return NULL;
    if (!(o = srv_obj_add(c, SHIM_HT_CUmemoryPool, (uint64_t)(uintptr_t)pool, 1, NULL))) {
        srv_pool_retire(pool, dev, 1, NULL);
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    o->dev = dev;
    o->aux = POOL_DEFAULT | POOL_PLAIN;
    return o;
}

static struct srv_obj *current_pool(struct srv_client *c, int dev, CUresult *err)
{
    struct srv_obj *o = dev >= 0 && dev < srv.ndev ? marked(c, dev, POOL_CURRENT) : NULL;
    return o ? o : default_pool(c, dev, err);
}

/* Writes the pool's handle to output 0 of the call. */
static CUresult give(struct srv_call *k, struct srv_obj *o, CUresult err)
{
    if (!o) return err;
    if (!k->a.ptr[0] || k->a.absent[0]) return CUDA_ERROR_INVALID_VALUE;
    memcpy(k->a.ptr[0], &o->key.value, sizeof(CUmemoryPool));
    return CUDA_SUCCESS;
}

/* The device a CUDA 13 location names, for pinned allocations on a device; -1 (with the
 * error) for the other locations and types, which would put the memory where the client
 * cannot see it (host pools live in the server) or be managed memory (not supported). */
static int location_device(struct srv_call *k, int loc, int type, CUresult *err)
{
    const CUmemLocation *l = k->a.ptr[loc];
    *err = CUDA_ERROR_INVALID_VALUE;
    if (!l) return -1;
    if (k->a.val[type] != CU_MEM_ALLOCATION_TYPE_PINNED || l->type != CU_MEM_LOCATION_TYPE_DEVICE) {
        *err = CUDA_ERROR_NOT_SUPPORTED;
        return -1;
    }
    return l->id;
}

static CUresult get_default(struct srv_client *c, struct srv_call *k)
{
    CUresult err = CUDA_SUCCESS;
    struct srv_obj *o = default_pool(c, (int)k->a.val[1], &err);
    return give(k, o, err);
}

static CUresult get_current(struct srv_client *c, struct srv_call *k)
{
    CUresult err = CUDA_SUCCESS;
    struct srv_obj *o = current_pool(c, (int)k->a.val[1], &err);
    return give(k, o, err);
}

static CUresult get_default_at(struct srv_client *c, struct srv_call *k)
{
    CUresult err = CUDA_SUCCESS;
    int dev = location_device(k, 1, 2, &err);
    struct srv_obj *o = dev < 0 ? NULL : default_pool(c, dev, &err);
    return give(k, o, err);
}

static CUresult get_current_at(struct srv_client *c, struct srv_call *k)
{
    CUresult err = CUDA_SUCCESS;
    int dev = location_device(k, 1, 2, &err);
    struct srv_obj *o = dev < 0 ? NULL : current_pool(c, dev, &err);
    return give(k, o, err);
}

/* The pool must be the client's (the description checked it) and live on that device. */
static CUresult set_current(struct srv_client *c, int dev, uint64_t pool)
{
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_DEVICE;
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUmemoryPool, pool), *old;
    if (!o || o->dev != dev) return CUDA_ERROR_INVALID_VALUE;
    if ((old = marked(c, dev, POOL_CURRENT))) old->aux &= ~(uint64_t)POOL_CURRENT;
    o->aux |= POOL_CURRENT;
    return CUDA_SUCCESS;
}

static CUresult set(struct srv_client *c, struct srv_call *k)
{
    return set_current(c, (int)k->a.val[0], k->a.val[1]);
}

static CUresult set_at(struct srv_client *c, struct srv_call *k)
{
    CUresult err;
    int dev = location_device(k, 0, 1, &err);
    return dev < 0 ? err : set_current(c, dev, k->a.val[2]);
}

const struct srv_hook srv_hook_pool_default = {.call = get_default};
const struct srv_hook srv_hook_pool_current = {.call = get_current};
const struct srv_hook srv_hook_pool_set = {.call = set};
const struct srv_hook srv_hook_pool_default_at = {.call = get_default_at};
const struct srv_hook srv_hook_pool_current_at = {.call = get_current_at};
const struct srv_hook srv_hook_pool_set_at = {.call = set_at};

/* Pools the client makes live on a device (host pools would hold memory only the server
 * can see); the pool's record remembers which. */
static CUresult create_before(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    const CUmemPoolProps *p = k->a.ptr[1];
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

/* A pool whose client destroyed it while allocations from it were outstanding (spares.c
 * says why it waits): what retiring it takes, once the last of them goes. Guarded by
 * doomed_lock. */
static pthread_mutex_t doomed_lock = PTHREAD_MUTEX_INITIALIZER;
struct doomed {
    CUmemoryPool pool;
    int dev;
    int plain;
    uint64_t left; /* outstanding allocations whose records carry it */
};

static void doomed_allocation_gone(struct srv_client *c, struct srv_obj *o);

/* cuMemFree of memory from one of the client's pools, or its release when the client left:
 * the driver's cuMemFree, and the pool (record o's parent, or the doom o carries once the
 * client destroyed it) is no longer one a spare can be made of (spares.c). */
CUresult srv_pool_mem_free(struct srv_client *c, struct srv_obj *o)
{
    (void)c;
    if (o->drop == doomed_allocation_gone && o->ext) {
        pthread_mutex_lock(&doomed_lock);
        ((struct doomed *)o->ext)->plain = 0;
        pthread_mutex_unlock(&doomed_lock);
    } else if (o->parent && o->parent->key.type == SHIM_HT_CUmemoryPool) {
        o->parent->aux &= ~(uint64_t)POOL_PLAIN;
    }
    return DRV(cuMemFree_v2)((CUdeviceptr)o->key.value);
}

/* A departing client's memory of its pools (cuda_symbols.txt: release=pooled), before its
 * pools are released. */
void srv_release_pooled(struct srv_client *c, struct srv_obj *o)
{
    CUresult r = srv_pool_mem_free(c, o);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: releasing pooled memory failed with %s", (int)c->pid,
                srv_errname(r));
}

/* An allocation of a doomed pool goes (its record's drop): the last one retires the pool,
 * unless the memory was not freed (its client's work left running). */
static void doomed_allocation_gone(struct srv_client *c, struct srv_obj *o)
{
    struct doomed *d = o->ext;
    o->ext = NULL;
    o->drop = NULL;
    if (!d) return;
    pthread_mutex_lock(&doomed_lock);
    int last = --d->left == 0;
    pthread_mutex_unlock(&doomed_lock);
    if (!last) return;
    if (!c->left_running) {
        /* Its client's work may still touch what the pool handed out (issue 34, S11); in
         * its release that work has drained. */
        int releasing = atomic_load(&c->busy_op) == SRV_BUSY_RELEASE;
        CUresult r = srv_pool_retire(d->pool, d->dev, d->plain,
                                     releasing ? NULL : srv_devmem_work_event(c, d->dev));
        if (r != CUDA_SUCCESS)
            srv_log("Client process %d: destroying a CUmemoryPool after its last allocation "
                    "failed with %s",
                    (int)c->pid, srv_errname(r));
    }
    free(d);
}

/* The client destroys pool record p: in the driver now if nothing of it is outstanding,
 * else when its last outstanding allocation goes. */
static CUresult destroy_or_doom(struct srv_client *c, struct srv_obj *p, CUmemoryPool pool)
{
    uint64_t n = 0;
    for (struct srv_obj *k = p ? p->children : NULL; k; k = k->sib_next)
        n += k->key.type == SHIM_HT_MEM_POOLED;
    int plain = p && (p->aux & POOL_PLAIN);
    int dev = p ? p->dev : -1;
    /* Memory freed into it may still be touched by the client's work (issue 34, S11). */
    if (!n) return srv_pool_retire(pool, dev, plain, srv_devmem_work_event(c, dev));
    struct doomed *d = malloc(sizeof(*d));
    if (!d) return CUDA_ERROR_OUT_OF_MEMORY; /* nothing changed: the pool is still the client's */
    *d = (struct doomed){.pool = pool, .dev = p->dev, .plain = plain, .left = n};
    for (struct srv_obj *k = p->children; k; k = k->sib_next)
        if (k->key.type == SHIM_HT_MEM_POOLED) {
            k->ext = d;
            k->drop = doomed_allocation_gone;
        }
    return CUDA_SUCCESS;
}

/* A departing client's pool (its default one too), one at a time as above. */
void srv_release_pool(struct srv_client *c, struct srv_obj *o)
{
    CUresult r = srv_pool_retire((CUmemoryPool)(uintptr_t)o->key.value, o->dev,
                                 (o->aux & POOL_PLAIN) != 0, NULL); /* its work has drained */
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: releasing a CUmemoryPool failed with %s", (int)c->pid,
                srv_errname(r));
}

static CUresult create_call(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    if (!k->a.ptr[0]) return CUDA_ERROR_INVALID_VALUE;
    return srv_pool_create(k->a.ptr[0], k->a.ptr[1]);
}

static CUresult create_after(struct srv_client *c, struct srv_call *k)
{
    const CUmemPoolProps *p = k->a.ptr[1];
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUmemoryPool, *(uint64_t *)k->a.ptr[0]);
    if (o) {
        o->dev = p->location.id;
        if (srv_pool_props_plain(p)) o->aux |= POOL_PLAIN;
    }
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_pool_create = {
    .before = create_before, .call = create_call, .after = create_after};

/* A default pool cannot be destroyed (the driver's rule for its own); destroying the
 * current pool makes the default one current again (its mark goes with its record). */
static CUresult destroy_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUmemoryPool, k->a.val[0]);
    return o && (o->aux & POOL_DEFAULT) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult destroy_call(struct srv_client *c, struct srv_call *k)
{
    return destroy_or_doom(c, srv_obj_find(c, SHIM_HT_CUmemoryPool, k->a.val[0]),
                           (CUmemoryPool)(uintptr_t)k->vals[0]);
}

const struct srv_hook srv_hook_pool_destroy = {.before = destroy_before, .call = destroy_call};

/* Captured on a stream, a stream-ordered allocation is an allocation node the driver adds
 * to the graph being captured, with the properties of the pool the call names (the
 * client's: its current pool for cuMemAllocAsync, one of its own for
 * cuMemAllocFromPoolAsync, so the node's memory is on the client's device): its address is
 * the graph's, not the pool's, and is registered as graph memory (graphmem.c) instead of as
 * the description says. The limit is checked before, as for any allocation. */
static CUresult capture_before(struct srv_client *c, struct srv_call *k)
{
    c->pool_allocs = 1; /* its synchronisations are the worker's from now on (waits.c) */
    k->registers = k->stream && srv_stream_capturing(c, k->stream);
    return CUDA_SUCCESS;
}

static CUresult capture_after(struct srv_client *c, struct srv_call *k)
{
    const uint64_t *dptr = k->a.ptr[0]; /* the server's own storage if the client gave none */
    if (!k->registers || !dptr) return CUDA_SUCCESS;
    return srv_graphmem_captured(c, k->stream, k->dev, *dptr, k->a.val[1]);
}

/* cuMemAllocAsync allocates from the current pool of the stream's device: the client's. */
static CUresult alloc_before(struct srv_client *c, struct srv_call *k)
{
    CUresult err = capture_before(c, k);
    k->parent = current_pool(c, k->dev, &err);
    return k->parent ? CUDA_SUCCESS : err;
}

static CUresult alloc_call(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    return DRV(cuMemAllocFromPoolAsync)((CUdeviceptr *)k->a.ptr[0], (size_t)k->vals[1],
                                        (CUmemoryPool)(uintptr_t)k->parent->key.value,
                                        (CUstream)(uintptr_t)k->vals[2]);
}

const struct srv_hook srv_hook_alloc_async = {
    .before = alloc_before, .call = alloc_call, .after = capture_after};

const struct srv_hook srv_hook_alloc_pool_async = {.before = capture_before,
                                                   .after = capture_after};
