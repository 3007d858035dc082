/* Which connection a call goes to, in a process that holds one per device (a client moved to
 * its GPU's server that uses several GPUs: conn.c, issue 30). Each GPU's server knows only
 * what was made through it, so a call goes to the server of what it names: the stream it is
 * enqueued on, a stream, event or graph exec the client knows, a module or function of a
 * context, a context, a device, a device address, mapping or reserved address space
 * (reserved.c), a physical memory handle (physical.c), a graph or pool (owned.c) or
 * properties naming a device; else to its thread's context's (rpc.c). A stream's wait for
 * another server's event is carried by across.c, peer access between two servers' contexts
 * by mirror.c (and copies between their memory by memcpy.c, through mirror.c); any other
 * call that names objects of two of them is refused with CUDA_ERROR_NOT_SUPPORTED, said
 * once. In a process of one connection nothing here runs. */
#include "interpose/shim.h"

#include <string.h>

/* The route of an object of context id `ctx`: 1 with *r set, 0 when the context is unknown. */
static int of_ctx(uint32_t ctx, struct shim_route *r)
{
    int dev = shim_ctx_id_device(ctx);
    if (dev < 0) return 0;
    *r = (struct shim_route){.set = 1, .device = dev, .ctx = ctx};
    return 1;
}

/* physical.c's device of a physical memory handle, registered as the library loads (it
 * reaches this file's callers, not the other way round: one circle less). */
static int (*phys_device)(uint64_t client, int *dev);

void shim_route_on_phys(int (*fn)(uint64_t client, int *dev))
{
    phys_device = fn;
}

/* The route to device dev's server, tagged with a context of the process's there. */
static int of_device(int dev, struct shim_route *r)
{
    *r = (struct shim_route){.set = 1, .device = dev, .ctx = shim_ctx_of_device(dev)};
    return 1;
}

int shim_slot_device(int slot)
{
    int of;
    if (slot == shim_conn.slot) return shim_moved_ordinal(&of);
    for (int d = 0; d < CHAN_MAX_DEVICES; d++) {
        struct shim_conn *c = atomic_load_explicit(&shim_dev_conns[d], memory_order_acquire);
        if (c && c->slot == slot) return d;
    }
    return -1;
}

/* The route of a mapping's address (cuMemMap's, which is no context's): the server it was
 * mapped in, which holds its reservation too. */
static int of_mapped(uint64_t addr, struct shim_route *r)
{
    struct shim_range rg;
    int slot = shim_range_slot(addr, &rg), dev;
    return slot >= 0 && rg.kind == SHIM_HT_MEM_MAPPED && (dev = shim_slot_device(slot)) >= 0 &&
           of_device(dev, r);
}

/* The device of physical memory's or a pool's properties (cuMemCreate,
 * cuMemGetAllocationGranularity, cuMemPoolCreate): that device's server makes it and knows
 * its granularity. */
static int of_prop(const struct shim_param *p, const void *prop, struct shim_route *r)
{
    const CUmemLocation *l;
    if (!prop || !p->st) return 0;
    if (strcmp(p->st->name, "CUmemAllocationProp") == 0)
        l = &((const CUmemAllocationProp *)prop)->location;
    else if (strcmp(p->st->name, "CUmemPoolProps") == 0)
        l = &((const CUmemPoolProps *)prop)->location;
    else
        return 0;
    return l->type == CU_MEM_LOCATION_TYPE_DEVICE && l->id >= 0 && l->id < CHAN_MAX_DEVICES &&
           of_device(l->id, r);
}

/* The route of parameter i of call d, if it names something of a context or device. */
static int of_param(const struct shim_call *d, int i, const uint64_t *val, void *const *ptr,
                    struct shim_route *r)
{
    const struct shim_param *p = &d->params[i];
    struct shim_known k;
    struct shim_range rg;
    int dev;
    if (p->kind == SHIM_PK_IN) return of_prop(p, ptr[i], r);
    if (!val[i]) return 0;
    /* Physical memory goes to its server (physical.c); a mapping is made where its address
     * was reserved (the thread's), of an import of it there. */
    if (p->kind == SHIM_PK_HANDLE && p->htype == SHIM_HT_CUmemGenericAllocationHandle)
        return d != &shim_calls[SHIM_ID_cuMemMap] && phys_device && phys_device(val[i], &dev) &&
               of_device(dev, r);
    /* A graph or a pool: the server that made it (owned.c). */
    if (p->kind == SHIM_PK_HANDLE && shim_owned_kind(p->htype))
        return shim_owned_device(p->htype, val[i], &dev) && of_device(dev, r);
    if (p->kind == SHIM_PK_HANDLE && (shim_types[p->htype].flags & SHIM_TF_CLIENT))
        return shim_known_find(p->htype, val[i], &k) == 0 && of_ctx(k.ctx, r);
    /* A module or function of a context: that context's server's (funcs.c knows them). */
    if (p->kind == SHIM_PK_HANDLE &&
        (p->htype == SHIM_HT_CUmodule || p->htype == SHIM_HT_CUfunction))
        return of_ctx(shim_func_ctx(val[i], p->htype == SHIM_HT_CUmodule), r);
    if (p->kind == SHIM_PK_CTX) return of_ctx((uint32_t)val[i], r);
    if (p->kind == SHIM_PK_DPTR && shim_range_find(val[i], 1, &rg) == 0 && rg.ctx)
        return of_ctx(rg.ctx, r);
    /* A mapping, or address space: where it was mapped or reserved (reserved.c). */
    if (p->kind == SHIM_PK_DPTR || p->kind == SHIM_PK_RAW)
        return of_mapped(val[i], r) || (shim_reserved_device(val[i], &dev) && of_device(dev, r));
    if (p->kind == SHIM_PK_VAL && (p->pflags & SHIM_PF_DEVICE)) {
        dev = (int)val[i];
        /* Named by its device alone: the thread's context goes with it if it is that
         * device's, else none (the call needs none, or the server says it has none). */
        *r = (struct shim_route){.set = 1,
                                 .device = dev,
                                 .ctx = shim_current_device() == dev ? shim_current_ctx_id() : 0};
        return 1;
    }
    return 0;
}

/* Whether two routes reach different connections. */
static int apart(const struct shim_route *a, const struct shim_route *b)
{
    return shim_conn_of_device(a->device) != shim_conn_of_device(b->device);
}

/* Whether a route reaches another connection than the thread's requests go to now. */
static int elsewhere(const struct shim_route *to)
{
    return shim_conn_of_device(to->device) != shim_route_conn();
}

/* The route of context id ctx (*to) when it reaches another connection than the thread's
 * requests go to now: 1; 0 in a process of one connection, for ctx 0 and an unknown one. */
static int ctx_elsewhere(uint32_t ctx, struct shim_route *to)
{
    return atomic_load_explicit(&shim_conns_extra, memory_order_acquire) && ctx &&
           of_ctx(ctx, to) && elsewhere(to);
}

static void refuse_across(const char *name)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        shim_log("%s names objects of two GPUs whose servers differ; nothing carries it "
                 "between them: CUDA_ERROR_NOT_SUPPORTED (said once; MPSSHIM_SERVER_PER_GPU=0 "
                 "serves it, one server for every GPU)",
                 name);
}

/* mirror.c's answer to peer access between two servers' contexts, registered as the library
 * loads (it names this file's callers, not the other way round: one circle less). */
static int (*peer_call)(const struct shim_call *d, const uint64_t *val, CUresult *err);

void shim_route_on_peer_call(int (*fn)(const struct shim_call *d, const uint64_t *val,
                                       CUresult *err))
{
    peer_call = fn;
}

/* A call of a moved process naming, by its ordinal or its properties, a device whose server
 * the process has no connection to yet (no context there: a device-level query, a pool or
 * physical memory's properties): that server is connected to first, as a context there
 * would (conn.c), so that the call reaches the one server that holds the device. Not for a
 * call answered here (a hook that knows the answer: peer queries, moved.c). */
static void connect_named(const struct shim_call *d, const uint64_t *val, void *const *ptr)
{
    static _Atomic uint64_t failed; /* bit d: device d's server could not serve (said once) */
    int of, own = shim_moved_ordinal(&of);
    if (own < 0) return;
    const struct shim_hook *hook = shim_hooks[d - shim_calls];
    if (hook && hook->known) return;
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        struct shim_route r;
        int dev = -1;
        if (p->kind == SHIM_PK_VAL && (p->pflags & SHIM_PF_DEVICE))
            dev = (int)val[i];
        else if (p->kind == SHIM_PK_IN && of_prop(p, ptr[i], &r))
            dev = r.device;
        /* On failure the first server refuses the device, as it did before. */
        if (dev >= 0 && dev < of && dev < CHAN_MAX_DEVICES && dev != own &&
            !atomic_load_explicit(&shim_dev_conns[dev], memory_order_acquire) &&
            !(atomic_load(&failed) & (1ull << dev)) && shim_gpu_server_for(dev) != CUDA_SUCCESS)
            atomic_fetch_or(&failed, 1ull << dev);
    }
}

int shim_route_call(const struct shim_call *d, const uint64_t *val, void *const *ptr,
                    struct shim_route *saved, CUresult *err)
{
    *err = CUDA_SUCCESS;
    connect_named(d, val, ptr);
    if (!atomic_load_explicit(&shim_conns_extra, memory_order_acquire)) return 0;
    /* A stream waiting for another GPU's server's event: carried by across.c. */
    if (shim_across_wait(d, val)) return -1;
    /* Peer access between two servers' contexts: mirror.c's. */
    if (peer_call && peer_call(d, val, err)) return -2;
    struct shim_route to = {0}, other;
    if (d->stream >= 0) of_param(d, d->stream, val, ptr, &to);
    for (int i = 0; i < d->nparams; i++) {
        if (!of_param(d, i, val, ptr, &other)) continue;
        if (!to.set)
            to = other;
        else if (apart(&to, &other)) {
            refuse_across(d->name);
            *err = CUDA_ERROR_NOT_SUPPORTED;
            return 0;
        }
    }
    /* Where the thread's own requests go already: nothing to change (its context stays the
     * one the call runs in, as natively). */
    if (!to.set || !elsewhere(&to)) return 0;
    shim_route_begin(saved, to.device, to.ctx);
    return 1;
}

int shim_route_to_ctx(uint32_t ctx, struct shim_route *saved)
{
    struct shim_route to;
    if (!ctx_elsewhere(ctx, &to)) return 0;
    shim_route_begin(saved, to.device, to.ctx);
    return 1;
}

int shim_route_owned(uint32_t type, uint64_t value, struct shim_route *saved)
{
    struct shim_route to;
    int dev;
    if (!atomic_load_explicit(&shim_conns_extra, memory_order_acquire) || !value ||
        !shim_owned_device(type, value, &dev) || !of_device(dev, &to) || !elsewhere(&to))
        return 0;
    shim_route_begin(saved, to.device, to.ctx);
    return 1;
}

int shim_route_known(uint32_t type, uint64_t value, struct shim_route *saved)
{
    struct shim_known k;
    if (!atomic_load_explicit(&shim_conns_extra, memory_order_acquire) || !value ||
        shim_known_find(type, value, &k) != 0)
        return 0;
    return shim_route_to_ctx(k.ctx, saved);
}

int shim_route_stream(CUstream s, struct shim_route *saved)
{
    return shim_route_known(SHIM_HT_CUstream, (uint64_t)(uintptr_t)s, saved);
}

int shim_route_apart(uint32_t ctx)
{
    struct shim_route to;
    return ctx_elsewhere(ctx, &to);
}

/* The mirror's slot for a range of context id ctx (ranges.c): its server's connection's. */
static int range_slot(uint32_t ctx)
{
    return (ctx ? shim_conn_of_device(shim_ctx_id_device(ctx)) : shim_route_conn())->slot;
}

__attribute__((constructor)) static void tell_ranges(void)
{
    shim_ranges_on_slot(range_slot);
}
