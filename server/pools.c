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
 * stream capture an allocation is an allocation node: graph memory (graph.c). */
#include "server/server.h"
#include "server/devmem.h"
#include "server/graph.h"
#include "server/pools.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What a pool is to its client, in its record's aux word. */
#define POOL_DEFAULT 0x1u /* the client's default pool of its device */
#define POOL_CURRENT 0x2u /* the current pool of its device, set by the client */
#define POOL_PLAIN 0x4u   /* made with plain properties: retired as a spare (below) */

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
    memset(&props, 0, sizeof props); /* padding too: props_plain compares bytes */
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

/* Pools are made and destroyed one at a time in the server, and never destroyed in the
 * driver while an allocation from them is outstanding.
 *
 * Natively each process makes and destroys its own pools; here every client's pool calls
 * meet in one process. The server died inside cuMemPoolDestroy (a NULL read in the driver) in
 * soaks of 32 clients (bench/NOTES.md, "Pool destroy races"), some running the mempool test,
 * which destroys a pool with an allocation outstanding and frees it after. A plain CUDA program
 * does the same natively and dies too (tests/progs/poolrace.c, 8 threads each creating a pool,
 * allocating from it, destroying the pool, then freeing with cuMemFree or cuMemFreeAsync; with
 * the free before the destroy it runs clean, a destroy while the free is only enqueued
 * included). So the driver's deferred destruction of a pool races with other threads' pool
 * calls.
 *
 * The client's destroy therefore does not reach the driver while the pool's allocations
 * are outstanding: the pool is "doomed". Its record goes (the client's handle is dead, as
 * natively) and each outstanding allocation's record carries the doom; when the last of
 * them goes (freed by the client, or released when it leaves), the pool is retired (below),
 * after those frees. Memory of a pool the client left running (registry.c) is never freed,
 * and so neither is its pool: it stays with the driver until the server stops, like the
 * rest of that client's objects.
 *
 * That was not enough: a 32-client soak died inside cuMemPoolDestroy again, the destroy of some
 * client's pool while other clients' workers used their own pools (bench/NOTES.md, "Pool
 * destroy races"). So no pool is destroyed when its client lets go of it. It is trimmed and
 * becomes a spare of its device, and only a spare that is settled, holding nothing (nothing
 * reserved after a trim, nothing in use, no free still to run), is ever destroyed. A plain pool
 * (pinned memory on a device, no handle types, no size limit: every client's default pool and
 * what programs almost always create) is a reusable spare: the next plain pool asked for on its
 * device is a settled reusable spare made new (make_new: its attributes and other devices'
 * access a new pool's). Other spares are of no use and are destroyed as soon as they are seen
 * settled (reap). Spares cost the driver's record of a pool and no device memory once settled;
 * they are trimmed again whenever the server's status is asked for (srv_pools_tidy, which
 * also destroys those that still reserve memory with nothing in use), so that the device
 * memory it reports is what is in use.
 *
 * A pool that memory was freed from with the driver's cuMemFree (by its client, or when its
 * client left holding it) is of no use either: its counters then say the memory was in use for
 * good, with nothing reserved, so it is judged settled by what it reserves alone. Freeing such
 * memory stream-ordered instead, on a stream of the server's that nothing waits for, kept the
 * counters right but the memory reserved through every trim.
 *
 * Their number is bounded: the driver refuses new pools (CUDA_ERROR_OUT_OF_MEMORY) somewhere
 * past a thousand of them (a soak that kept up to 1024 spares, most never settling, ran
 * into it after 2400 clients), and a spare that the host never saw its last free end (a
 * client killed with one queued) keeps its memory reserved through every trim (tens of MiB a
 * pool, GiBs over hundreds of spares: bench/NOTES.md, "Pool destroy races"). Past POOL_SPARES a
 * spare is destroyed to make room: the settled one retired longest ago, else the one with
 * nothing in use (what it reserves goes with it); only past POOL_SPARES_MAX, none of them idle,
 * is a retiring pool destroyed at once (after a trim), as every pool was before spares. How
 * many went which way is logged when the server stops. A spare's handle may come back to
 * another client: handles are checked against the caller's own records, and the departed
 * client's records are gone. */
static pthread_mutex_t lifecycle = PTHREAD_MUTEX_INITIALIZER;

#define POOL_SPARES 16        /* past this, an idle spare is destroyed to make room */
#define POOL_SPARES_MAX 64    /* past this, with none idle, the retiring pool is destroyed */
#define POOL_UNSETTLED_SAID 3 /* spares found unsettled that the log describes */

struct spare {
    CUmemoryPool pool;
    int dev;
    int reusable; /* plain, and never freed from with the driver's cuMemFree */
    /* Behind all the work its client had queued when it let the pool go (devmem.c), NULL:
     * none or done. Until it completes the spare is not settled: its memory, which that
     * work may still touch, must not reach another client (issue 34, S11). */
    CUevent after;
    struct spare *next;
};
static struct spare *spares; /* under lifecycle, the last retired first */
static unsigned nspares;
/* Under lifecycle: plain pools made in the driver, spares made new for a later pool, pools
 * kept as spares, spares destroyed once settled because no use (reaped), settled spares
 * destroyed past POOL_SPARES (evicted), retiring pools destroyed past POOL_SPARES_MAX;
 * reusable spares found unsettled when one was wanted. */
static uint64_t n_made, n_reused, n_kept, n_reaped, n_evicted, n_destroyed, n_unsettled;

struct doomed {
    CUmemoryPool pool;
    int dev;
    int plain;
    uint64_t left; /* outstanding allocations whose records carry it */
};

/* Pinned memory on a device, no handle types, no size limit, nothing else set: a pool
 * that a spare can stand for. */
static int props_plain(const CUmemPoolProps *p)
{
    CUmemPoolProps q;
    memset(&q, 0, sizeof q);
    q.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    q.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    q.location.id = p->location.id;
    return !memcmp(p, &q, sizeof q);
}

static int dev_ok(int dev)
{
    return dev >= 0 && dev < srv.ndev && atomic_load(&srv.fault[dev].state) == SRV_DEV_OK;
}

/* Under lifecycle: spare x trimmed; 1 if it holds nothing now: nothing reserved and, for a
 * reusable one, nothing in use (one that cuMemFree freed from counts memory in use for
 * good, above, and is judged by what it reserves alone). When `say`, the first few
 * reusable ones that do not are described in the log. */
static int spare_settled(struct spare *x, int say)
{
    cuuint64_t used = 0, reserved = 1;
    if (x->after) {
        if (dev_ok(x->dev) && DRV(cuEventQuery)(x->after) == CUDA_ERROR_NOT_READY) return 0;
        if (dev_ok(x->dev)) DRV(cuEventDestroy_v2)(x->after);
        x->after = NULL;
    }
    CUresult r = dev_ok(x->dev) ? DRV(cuMemPoolTrimTo)(x->pool, 0) : CUDA_ERROR_INVALID_DEVICE;
    if (r == CUDA_SUCCESS)
        r = DRV(cuMemPoolGetAttribute)(x->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    if (r == CUDA_SUCCESS && x->reusable)
        r = DRV(cuMemPoolGetAttribute)(x->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
    if (r == CUDA_SUCCESS && !used && !reserved) return 1;
    if (say && x->reusable && n_unsettled++ < POOL_UNSETTLED_SAID)
        srv_log("A spare CUmemoryPool of device %d is not settled yet (%s, %llu bytes in use, "
                "%llu reserved after a trim): kept for a later pool (said for the first %d "
                "only)",
                x->dev, srv_errname(r), (unsigned long long)used, (unsigned long long)reserved,
                POOL_UNSETTLED_SAID);
    return 0;
}

/* Under lifecycle: spare *pp, settled, leaves the list and is destroyed in the driver. */
static void spare_destroy(struct spare **pp)
{
    struct spare *x = *pp;
    *pp = x->next;
    nspares--;
    CUresult r = DRV(cuMemPoolDestroy)(x->pool);
    if (r != CUDA_SUCCESS)
        srv_log("Destroying a spare CUmemoryPool failed with %s", srv_errname(r));
    free(x);
}

/* Under lifecycle: every spare that is no use (not reusable) and settled is destroyed;
 * spares of a dead device's context leave the list (they went with it). */
static void reap(void)
{
    for (struct spare **pp = &spares; *pp;) {
        struct spare *x = *pp;
        if (!dev_ok(x->dev)) {
            *pp = x->next;
            nspares--;
            free(x);
        } else if (!x->reusable && spare_settled(x, 0)) {
            spare_destroy(pp);
            n_reaped++;
        } else {
            pp = &x->next;
        }
    }
}

/* Under lifecycle: settled reusable spare x made as a new pool would be: its attributes and
 * other devices' access a new pool's. 0 if that failed (said; the spare is then no use). */
static int make_new(struct spare *x)
{
    static const CUmemPool_attribute reuse[] = {CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
                                                CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
                                                CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES};
    CUmemoryPool p = x->pool;
    cuuint64_t zero = 0;
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < sizeof reuse / sizeof reuse[0] && r == CUDA_SUCCESS; i++) {
        int on = 1;
        r = DRV(cuMemPoolSetAttribute)(p, reuse[i], &on);
    }
    if (r == CUDA_SUCCESS)
        r = DRV(cuMemPoolSetAttribute)(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
    if (r == CUDA_SUCCESS)
        r = DRV(cuMemPoolSetAttribute)(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
    if (r == CUDA_SUCCESS) r = DRV(cuMemPoolSetAttribute)(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
    /* Another device given access by the last owner has none in a new pool. */
    for (int d = 0; d < srv.ndev && r == CUDA_SUCCESS; d++) {
        if (d == x->dev) continue;
        CUmemAccessDesc none = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_NONE};
        CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        CUmemLocation at = none.location;
        if (DRV(cuMemPoolGetAccess)(&f, p, &at) == CUDA_SUCCESS &&
            f != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            r = DRV(cuMemPoolSetAccess)(p, &none, 1);
    }
    if (r != CUDA_SUCCESS) {
        srv_log("A spare CUmemoryPool of device %d could not be made new (%s): it is no use "
                "now",
                x->dev, srv_errname(r));
        x->reusable = 0;
        return 0;
    }
    return 1;
}

/* Under lifecycle: a settled reusable spare of device dev made new and out of the list, or
 * NULL. */
static CUmemoryPool spare_take(int dev)
{
    reap();
    for (struct spare **pp = &spares; *pp; pp = &(*pp)->next) {
        struct spare *x = *pp;
        if (x->dev != dev || !x->reusable || !spare_settled(x, 1) || !make_new(x)) continue;
        CUmemoryPool p = x->pool;
        *pp = x->next;
        nspares--;
        free(x);
        return p;
    }
    return NULL;
}

CUresult srv_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    pthread_mutex_lock(&lifecycle);
    CUmemoryPool p = props && props_plain(props) && dev_ok(props->location.id)
                         ? spare_take(props->location.id)
                         : NULL;
    CUresult r = CUDA_SUCCESS;
    if (p) {
        *pool = p;
        n_reused++;
    } else {
        r = DRV(cuMemPoolCreate)(pool, props);
        n_made += r == CUDA_SUCCESS && props && props_plain(props);
    }
    pthread_mutex_unlock(&lifecycle);
    return r;
}

/* Under lifecycle: reusable spare x has nothing in use (what it reserves may be memory of
 * a free the host never saw end, which a trim keeps reserved for good). */
static int spare_unused(const struct spare *x)
{
    cuuint64_t used = 1;
    return x->reusable && dev_ok(x->dev) &&
           (!x->after || DRV(cuEventQuery)(x->after) != CUDA_ERROR_NOT_READY) &&
           DRV(cuMemPoolGetAttribute)(x->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) ==
               CUDA_SUCCESS &&
           !used;
}

/* Under lifecycle: a spare destroyed to make room: the settled one retired longest ago,
 * else the reusable one with nothing in use retired longest ago (what it still reserves is
 * then given back with it); 0 if none is either. */
static int evict(void)
{
    struct spare **settled = NULL, **unused = NULL;
    for (struct spare **pp = &spares; *pp; pp = &(*pp)->next) {
        if (spare_settled(*pp, 0))
            settled = pp;
        else if (spare_unused(*pp))
            unused = pp;
    }
    struct spare **pp = settled ? settled : unused;
    if (!pp) return 0;
    spare_destroy(pp);
    n_evicted++;
    return 1;
}

/* Under lifecycle: pool of device dev goes (its client destroyed it or left): a spare,
 * reusable if `reusable`, unless POOL_SPARES_MAX are kept, none of them settled; then it
 * is destroyed at once, after a trim. In a device's dead context (a fault) it went with
 * the context. */
static CUresult retire(CUmemoryPool pool, int dev, int reusable, CUevent after)
{
    if (!dev_ok(dev)) return CUDA_SUCCESS;
    reap();
    if (nspares >= POOL_SPARES) evict();
    struct spare *x = nspares < POOL_SPARES_MAX ? malloc(sizeof(*x)) : NULL;
    if (x) {
        /* Its memory goes back to the device now, and what pending frees return later
         * at the next trim (a threshold of 0). */
        cuuint64_t zero = 0;
        (void)DRV(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
        (void)DRV(cuMemPoolTrimTo)(pool, 0);
        *x = (struct spare){
            .pool = pool, .dev = dev, .reusable = reusable, .after = after, .next = spares};
        spares = x;
        nspares++;
        n_kept++;
        if (!reusable) reap(); /* settled already, most often */
        return CUDA_SUCCESS;
    }
    n_destroyed++;
    if (after) { /* destroyed now: not under its client's work */
        (void)DRV(cuEventSynchronize)(after);
        DRV(cuEventDestroy_v2)(after);
    }
    (void)DRV(cuMemPoolTrimTo)(pool, 0); /* what it still reserves goes back first */
    return DRV(cuMemPoolDestroy)(pool);
}

CUresult srv_pool_retire(CUmemoryPool pool, int dev, int plain, CUevent after)
{
    pthread_mutex_lock(&lifecycle);
    CUresult r = retire(pool, dev, plain, after);
    pthread_mutex_unlock(&lifecycle);
    return r;
}

/* Every spare trimmed; a reusable one that still reserves memory with nothing in use (the
 * host never saw its last free end, so no trim gives that memory back) is destroyed. */
void srv_pools_tidy(void)
{
    pthread_mutex_lock(&lifecycle);
    reap();
    for (struct spare **pp = &spares; *pp;) {
        if (!spare_settled(*pp, 0) && spare_unused(*pp)) {
            spare_destroy(pp);
            n_evicted++;
        } else {
            pp = &(*pp)->next;
        }
    }
    pthread_mutex_unlock(&lifecycle);
}

void srv_pools_report(void)
{
    pthread_mutex_lock(&lifecycle);
    if (n_made || n_kept)
        srv_log("CUmemoryPools: %llu plain ones made, %llu spares made new for a later pool, "
                "%llu pools kept as spares, %llu of no use destroyed once settled, %llu "
                "idle ones destroyed (past %d spares, or by a status), %llu retiring ones "
                "destroyed past %d; "
                "%u spares now",
                (unsigned long long)n_made, (unsigned long long)n_reused,
                (unsigned long long)n_kept, (unsigned long long)n_reaped,
                (unsigned long long)n_evicted, POOL_SPARES, (unsigned long long)n_destroyed,
                POOL_SPARES_MAX, nspares);
    pthread_mutex_unlock(&lifecycle);
}

static void doomed_allocation_gone(struct srv_client *c, struct srv_obj *o);

/* cuMemFree of memory from one of the client's pools, or its release when the client left:
 * the driver's cuMemFree, and the pool (record o's parent, or the doom o carries once the
 * client destroyed it) is no longer one a spare can be made of (above). */
CUresult srv_pool_mem_free(struct srv_client *c, struct srv_obj *o)
{
    (void)c;
    if (o->drop == doomed_allocation_gone && o->ext) {
        pthread_mutex_lock(&lifecycle);
        ((struct doomed *)o->ext)->plain = 0;
        pthread_mutex_unlock(&lifecycle);
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
    pthread_mutex_lock(&lifecycle);
    int last = --d->left == 0;
    if (last && !c->left_running) {
        /* Its client's work may still touch what the pool handed out (issue 34, S11); in
         * its release that work has drained. */
        int releasing = atomic_load(&c->busy_op) == SRV_BUSY_RELEASE;
        CUresult r =
            retire(d->pool, d->dev, d->plain, releasing ? NULL : srv_devmem_work_event(c, d->dev));
        if (r != CUDA_SUCCESS)
            srv_log("Client process %d: destroying a CUmemoryPool after its last allocation "
                    "failed with %s",
                    (int)c->pid, srv_errname(r));
    }
    pthread_mutex_unlock(&lifecycle);
    if (last) free(d);
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
        if (props_plain(p)) o->aux |= POOL_PLAIN;
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
 * the graph's, not the pool's, and is registered as graph memory (graph.c) instead of as
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
