/* The registry: every object a client holds, one record each (server.h, struct srv_obj),
 * so that every handle and address it names is checked against its own objects, and so
 * that everything is freed when it leaves, however it leaves, in one walk.
 *
 * What each type is (its destroyer, parents, flags) comes from cuda_symbols.txt through
 * shim_types; families that keep state of their own release it themselves
 * (srv_type_release). All of it is touched by the client's worker thread only. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/limits/account.h"
#include "server/core/fault.h"

#include "channel/copyplan.h"

#include <ffi.h>
#include <stdlib.h>
#include <string.h>

/* The destroyers take one handle or address: one call interface per parameter type. */
static ffi_cif destroy_ptr, destroy_u64;
static ffi_type *arg_ptr[1] = {&ffi_type_pointer}, *arg_u64[1] = {&ffi_type_uint64};

int srv_registry_init(void)
{
    if (ffi_prep_cif(&destroy_ptr, FFI_DEFAULT_ABI, 1, &ffi_type_sint, arg_ptr) != FFI_OK ||
        ffi_prep_cif(&destroy_u64, FFI_DEFAULT_ABI, 1, &ffi_type_sint, arg_u64) != FFI_OK)
        return -1;
    return 0;
}

static const struct shim_type *type_of(const struct srv_obj *o)
{
    return &shim_types[o->key.type];
}

/* ---------------------------------------------------------------- memory counters */

/* Only the client's worker changes these; atomics because the control thread reads them. */
void srv_mem_count(struct srv_client *c, int dev, uint64_t bytes)
{
    atomic_fetch_add(&c->stats.mem_in_use, bytes);
    if (dev >= 0 && dev < CHAN_MAX_DEVICES) atomic_fetch_add(&c->stats.mem_dev[dev], bytes);
    srv_account_mem_add(c, dev, (int64_t)bytes); /* and its process's, which limits check */
}

void srv_mem_uncount(struct srv_client *c, int dev, uint64_t bytes)
{
    atomic_fetch_sub(&c->stats.mem_in_use, bytes);
    if (dev >= 0 && dev < CHAN_MAX_DEVICES) atomic_fetch_sub(&c->stats.mem_dev[dev], bytes);
    srv_account_mem_add(c, dev, -(int64_t)bytes);
}

void srv_obj_count(struct srv_client *c, struct srv_obj *o, int dev, uint64_t bytes)
{
    if (o->bytes) return; /* already counted: the driver handed the same object out twice */
    o->bytes = bytes;
    o->dev = dev;
    srv_mem_count(c, dev, bytes);
    if (dev >= 0 && dev < CHAN_MAX_DEVICES) c->mem_refused[dev] = 0;
}

/* ---------------------------------------------------------------- records */

/* Records of every client together, for get_server_status: none once every client is gone
 * and released (the soak's check that nothing a client took outlives it). */
static _Atomic uint64_t records_live;

uint64_t srv_records_live(void)
{
    return atomic_load_explicit(&records_live, memory_order_relaxed);
}

struct srv_obj *srv_obj_lookup(struct srv_client *c, uint32_t type, uint64_t value)
{
    struct srv_obj *o = type < SHIM_NHTYPES ? c->last_found[type] : NULL;
    if (o && o->key.value == value) return o;
    struct srv_obj_key k = {.value = value, .type = type};
    o = NULL;
    HASH_FIND(hh, c->objs, &k, sizeof(k), o);
    if (o && type < SHIM_NHTYPES) c->last_found[type] = o;
    return o;
}

struct srv_obj *srv_obj_find(struct srv_client *c, uint32_t type, uint64_t value)
{
    struct srv_obj *o = srv_obj_lookup(c, type, value);
    return o && !srv_obj_revoked(o) ? o : NULL;
}

int srv_func_known(struct srv_client *c, uint64_t v)
{
    return srv_obj_find(c, SHIM_HT_CUfunction, v) || srv_obj_find(c, SHIM_HT_CUkernel, v);
}

static void link_child(struct srv_obj *o, struct srv_obj *parent)
{
    o->parent = parent;
    o->sib_prev = NULL;
    o->sib_next = parent ? parent->children : NULL;
    if (parent) {
        if (parent->children) parent->children->sib_prev = o;
        parent->children = o;
    }
}

static void unlink_child(struct srv_obj *o)
{
    if (o->sib_prev)
        o->sib_prev->sib_next = o->sib_next;
    else if (o->parent)
        o->parent->children = o->sib_next;
    if (o->sib_next) o->sib_next->sib_prev = o->sib_prev;
    o->parent = o->sib_prev = o->sib_next = NULL;
}

/* What a new object of `type` belongs to, given the object the call named as parent: that
 * one where the type may belong to its type; where it is of the same type (a sibling, such
 * as the node whose dependencies a call returns), the sibling's parent; else nothing. A
 * call returning objects of several types (an exec, and the node that made instantiating
 * fail) so links each only where it belongs: the exec outlives its graph. */
static struct srv_obj *parent_for(uint32_t type, struct srv_obj *parent)
{
    for (int hop = 0; parent && hop < 2; hop++, parent = parent->parent) {
        for (int i = 0; i < shim_types[type].nparents; i++)
            if (shim_types[type].parents[i] == parent->key.type) return parent;
        if (parent->key.type != type) return NULL;
    }
    return NULL;
}

struct srv_obj *srv_obj_add(struct srv_client *c, uint32_t type, uint64_t value, int owned,
                            struct srv_obj *parent)
{
    struct srv_obj *o = srv_obj_lookup(c, type, value);
    if (o) {
        o->owned |= owned;
        return o;
    }
    if (type == SHIM_HT_NONE || type >= SHIM_NHTYPES) return NULL;
    /* Records cost the server memory: capped per process (account.c; issue 34, S6). */
    if (!srv_account_record_take(c)) return NULL;
    if (!(o = calloc(1, sizeof(*o)))) {
        srv_account_record_give(c);
        return NULL;
    }
    o->key.value = value;
    o->key.type = type;
    o->owned = owned;
    o->dev = c->cur ? c->cur->device : -1;
    o->ctx = (shim_types[type].flags & SHIM_TF_CONTEXT_FREE) || !c->cur ? 0 : c->cur->id;
    link_child(o, parent_for(type, parent));
    o->type_next = c->by_type[type];
    if (o->type_next) o->type_next->type_prev = o;
    c->by_type[type] = o;
    c->nobjs[type]++;
    atomic_fetch_add_explicit(&records_live, 1, memory_order_relaxed);
    HASH_ADD(hh, c->objs, key, sizeof(o->key), o);
    return o;
}

struct srv_obj *srv_range_add(struct srv_client *c, uint32_t type, uint64_t base, uint64_t size,
                              int owned, struct srv_obj *parent)
{
    if (!(shim_types[type].flags & SHIM_TF_RANGE)) return NULL;
    struct srv_obj *o = srv_obj_lookup(c, type, base);
    if (o) return o->size == size && !srv_obj_revoked(o) ? (o->owned |= owned, o) : NULL;
    if (shim_types[type].flags & SHIM_TF_UNMAPPED) {
        /* Address space only: a record, never in the address lookups. */
        if ((o = srv_obj_add(c, type, base, owned, parent))) o->size = size;
        return o;
    }
    struct srv_range e = {.r = {.base = base, .size = size}};
    if (chan_ranges_find(&c->ranges, base, size ? size : 1) ||
        !(o = srv_obj_add(c, type, base, owned, parent)))
        return NULL;
    o->size = size;
    e.obj = o;
    if (chan_ranges_add(&c->ranges, &e) != 0) {
        srv_obj_destroyed(c, o);
        return NULL;
    }
    return o;
}

struct srv_obj *srv_range_add_held(struct srv_client *c, uint32_t type, uint64_t base,
                                   uint64_t size, int dev, struct srv_held *held)
{
    struct srv_obj *o = srv_range_add(c, type, base, size, 1, NULL);
    if (!o) {
        struct srv_obj tmp = {.held = held};
        held->let_go(c, &tmp, 0, 0);
        return NULL;
    }
    o->held = held;
    o->dev = dev;
    o->aux = 1;
    return o;
}

struct srv_obj *srv_range_find(struct srv_client *c, uint64_t addr, uint64_t len)
{
    const struct srv_range *e = chan_ranges_cover(&c->ranges, addr, len);
    return e && !srv_obj_revoked(e->obj) ? e->obj : NULL;
}

struct srv_obj *srv_range_extent(struct srv_client *c, uint64_t base, uint64_t x, uint64_t y,
                                 uint64_t z, uint64_t pitch, uint64_t slice_rows, uint64_t width,
                                 uint64_t height, uint64_t depth)
{
    uint64_t first, span;
    if (chan_copy_extent(base, x, y, z, pitch, slice_rows, width, height, depth, &first, &span))
        return NULL;
    return srv_range_find(c, first, span);
}

/* Drops the record (not the object it stands for); its children must be gone already. */
static void forget(struct srv_client *c, struct srv_obj *o)
{
    if (o->held) o->held->let_go(c, o, 1, 0); /* a share outlives no record of it */
    if (o->drop) o->drop(c, o);
    if (srv_type_drop[o->key.type]) srv_type_drop[o->key.type](c, o);
    unlink_child(o);
    if (o->type_prev)
        o->type_prev->type_next = o->type_next;
    else
        c->by_type[o->key.type] = o->type_next;
    if (o->type_next) o->type_next->type_prev = o->type_prev;
    c->nobjs[o->key.type]--;
    if ((type_of(o)->flags & (SHIM_TF_RANGE | SHIM_TF_UNMAPPED)) == SHIM_TF_RANGE)
        chan_ranges_remove(&c->ranges, o->key.value, NULL);
    if (o->bytes) srv_mem_uncount(c, o->dev, o->bytes);
    HASH_DEL(c->objs, o);
    if (c->last_found[o->key.type] == o) c->last_found[o->key.type] = NULL;
    free(o);
    atomic_fetch_sub_explicit(&records_live, 1, memory_order_relaxed);
    srv_account_record_give(c);
    c->forgotten++; /* execs naming what went are checked again at launch (graphrefs.c) */
}

/* Calls type t's destroyer on a value; its result. */
static CUresult call_destroyer(const struct shim_type *t, uint64_t value)
{
    if (t->destroyer < 0 || !srv_drv_fns[t->destroyer]) return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t v = value;
    void *avalue[1] = {&v};
    ffi_sarg rc;
    ffi_cif *cif =
        shim_calls[t->destroyer].params[0].vclass == SHIM_VC_PTR ? &destroy_ptr : &destroy_u64;
    ffi_call(cif, FFI_FN(srv_drv_fns[t->destroyer]), &rc, avalue);
    return (CUresult)rc;
}

void srv_obj_undo(struct srv_client *c, uint32_t type, uint64_t value, uint64_t size)
{
    if (type == SHIM_HT_NONE || type >= SHIM_NHTYPES) return;
    if ((shim_types[type].flags & SHIM_TF_RELEASE) && srv_type_release[type]) {
        /* The family's release, given a record that exists only for it. */
        struct srv_obj tmp = {
            .key = {.value = value, .type = type}, .size = size, .owned = 1, .dev = -1};
        srv_type_release[type](c, &tmp);
        return;
    }
    call_destroyer(&shim_types[type], value);
}

/* Destroys the object the record stands for, when the client owns it. */
static void destroy(struct srv_client *c, struct srv_obj *o)
{
    const struct shim_type *t = type_of(o);
    if (o->held) {
        /* Shared (through IPC): the real object goes when nobody holds it any more. */
        o->held->let_go(c, o, 1, 0);
        return;
    }
    if (!o->owned) return;
    /* Made in a context a fault killed since this worker last looked (fault.c): the handle
     * died with it and may be another's in the new context. Pinned memory is our own host
     * range and is let go of as usual. */
    if (!srv_host_type(o->key.type) && srv_fault_dead(c, o->dev)) return;
    if (t->flags & SHIM_TF_RELEASE) {
        if (srv_type_release[o->key.type]) srv_type_release[o->key.type](c, o);
        return;
    }
    if (t->destroyer < 0) return;
    CUresult r = call_destroyer(t, o->key.value);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: releasing a %s failed with %s", (int)c->pid, t->name,
                srv_errname(r));
}

/* What belongs to o, before o goes. When o is released (its client leaves, or it is
 * released with its own parent), an object that outlives it or must go before it is
 * released on its own (a pool's allocations, a reservation's mappings); when the client
 * destroyed o through the API, what outlives o stays the client's, belonging to nothing.
 * The rest died with o in the driver and is only forgotten, with what belongs to it, in the
 * same way: a texture over a level of a mipmapped array the client destroyed stays its own. */
static void drop_children(struct srv_client *c, struct srv_obj *o, int destroyed)
{
    while (o->children) {
        struct srv_obj *k = o->children;
        unsigned f = type_of(k)->flags;
        if (destroyed && (f & SHIM_TF_OUTLIVES_PARENT)) {
            unlink_child(k);
        } else if (!destroyed && (f & (SHIM_TF_OUTLIVES_PARENT | SHIM_TF_BEFORE_PARENT))) {
            srv_obj_release(c, k);
        } else {
            drop_children(c, k, destroyed);
            forget(c, k);
        }
    }
}

void srv_obj_release(struct srv_client *c, struct srv_obj *o)
{
    drop_children(c, o, 0);
    destroy(c, o);
    forget(c, o);
}

void srv_obj_forget_tree(struct srv_client *c, struct srv_obj *o)
{
    /* Everything here died with a context (fault.c): no destroyer, no release, only the
     * family's private state (its type's forget) and the records go. */
    while (o->children)
        srv_obj_forget_tree(c, o->children);
    if (srv_type_forget[o->key.type]) srv_type_forget[o->key.type](c, o);
    forget(c, o);
}

void srv_obj_destroyed(struct srv_client *c, struct srv_obj *o)
{
    drop_children(c, o, 1);
    forget(c, o);
}

/* ---------------------------------------------------------------- release */

/* 1 if o was made in context ctx (0: any context). */
static int in_ctx(const struct srv_obj *o, uint32_t ctx)
{
    return ctx == 0 || o->ctx == ctx;
}

/* The release could not wait any longer for the client's work: its records go, but not
 * what they stand for (no destroyer runs), so no memory or handle is freed, and so handed
 * to another client, under work that may still touch it. The driver frees it all when the
 * server stops. */
static void leave_running(struct srv_client *c, uint32_t ctx)
{
    c->left_running = 1;
    atomic_store(&srv.left_running_any, 1);
    uint64_t bytes = 0;
    size_t n = 0;
    struct srv_obj *o, *t;
    HASH_ITER(hh, c->objs, o, t)
        if (in_ctx(o, ctx)) {
            bytes += o->bytes;
            n++;
        }
    srv_log("Client process %d: its work was still running %llu s after it %s; %zu objects "
            "(%llu bytes of device memory) are left allocated, not freed under it",
            (int)c->pid, (unsigned long long)(srv.release_ns / 1000000000ull),
            ctx ? "destroyed the context" : "left", n, (unsigned long long)bytes);
    /* What still runs, for whoever must find out why (a kernel waiting for a peer that never
     * came, a stream held behind a host function): each stream's last kernel, and how far its
     * streams got through its host functions (numbered in the order it sent them). */
    srv_streams_say_running(c, ctx);
    uint32_t sent = atomic_load(&c->cb_last), reached = atomic_load(&c->cb_ran);
    if (sent != reached)
        srv_log("Client process %d: the last host function it enqueued is number %u; the last "
                "its streams reached, number %u",
                (int)c->pid, (unsigned)sent, (unsigned)reached);
    for (;;) {
        struct srv_obj *root = NULL;
        HASH_ITER(hh, c->objs, o, t)
            if (in_ctx(o, ctx) && !o->children) {
                root = o;
                break;
            }
        if (!root) break;
        o = root;
        o->owned = 0;                             /* forgotten, never destroyed */
        if (o->held) o->held->let_go(c, o, 1, 1); /* let go of, never destroyed */
        srv_obj_destroyed(c, o);
    }
}

void srv_release(struct srv_client *c, uint32_t ctx)
{
    /* Work first: nothing is freed under a running kernel or copy. What would keep it from
     * draining (waits on the client's memory, captures left going) is ended first. */
    srv_families_ctx_quiesce(c, ctx);
    uint64_t by = chan_now_ns() + srv.release_ns;
    /* Then the families' own work (a departing client's free streams, whose frees must
     * complete before the walk: family.c). */
    if (srv_streams_drain_by(c, ctx, by) != 0 || srv_families_ctx_drain(c, ctx, by) != 0) {
        leave_running(c, ctx);
        return;
    }

    /* The roots of what goes: objects of the context none of whose ancestors goes too
     * (those are released with their ancestor). Collected first, since a release frees
     * records the hash iteration would otherwise step on. */
    size_t n = 0, cap = HASH_COUNT(c->objs);
    struct srv_obj **roots = cap ? malloc(cap * sizeof(*roots)) : NULL;
    struct srv_obj *o, *t;
    HASH_ITER(hh, c->objs, o, t) {
        if (!in_ctx(o, ctx)) continue;
        int covered = 0;
        for (struct srv_obj *a = o->parent; a && !covered; a = a->parent)
            covered = in_ctx(a, ctx);
        if (!covered && roots) roots[n++] = o;
    }
    if (!roots && cap) {
        /* Out of memory for the list: release one root at a time, rescanning. */
        for (;;) {
            struct srv_obj *root = NULL;
            HASH_ITER(hh, c->objs, o, t)
                if (in_ctx(o, ctx)) {
                    root = o;
                    break;
                }
            if (!root) break;
            for (struct srv_obj *a = root->parent; a; a = a->parent)
                if (in_ctx(a, ctx)) root = a;
            srv_obj_release(c, root);
        }
    }
    for (size_t i = 0; i < n; i++)
        srv_obj_release(c, roots[i]);
    free(roots);

    /* Default streams belong to the contexts (streams.c). */
    struct srv_ctx *x, *xt;
    HASH_ITER(hh, c->ctxs, x, xt) {
        if (ctx && x->id != ctx) continue;
        srv_streams_drop(c, x, srv_stream_free);
    }
    /* Everything is gone: the counters limits are checked against must be too. */
    if (!ctx) {
        uint64_t left = atomic_load(&c->stats.mem_in_use);
        for (int d = 0; d < CHAN_MAX_DEVICES; d++)
            left |= atomic_load(&c->stats.mem_dev[d]);
        if (left || c->objs)
            srv_log("Client process %d: %s after release", (int)c->pid,
                    c->objs ? "objects left" : "device memory counters not zero");
    }
}
