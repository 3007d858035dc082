/* The life of the driver's memory pools behind every client's pools: made and destroyed one
 * at a time, and kept as spares rather than destroyed (below says why). pools.c serves the
 * clients' pool calls and comes here to make a pool and to let one go. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/fault.h"

#include <stdlib.h>
#include <string.h>

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

/* Pinned memory on a device, no handle types, no size limit, nothing else set: a pool
 * that a spare can stand for. */
int srv_pool_props_plain(const CUmemPoolProps *p)
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
    return dev >= 0 && dev < srv.ndev && atomic_load(&srv_fault[dev].state) == SRV_DEV_OK;
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
    CUmemoryPool p = props && srv_pool_props_plain(props) && dev_ok(props->location.id)
                         ? spare_take(props->location.id)
                         : NULL;
    CUresult r = CUDA_SUCCESS;
    if (p) {
        *pool = p;
        n_reused++;
    } else {
        r = DRV(cuMemPoolCreate)(pool, props);
        n_made += r == CUDA_SUCCESS && props && srv_pool_props_plain(props);
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
