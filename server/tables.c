/* Per-client tables: what each client owns, so that every handle and address it names is
 * checked against its own objects, and so that everything is freed when it leaves.
 * All of it is touched by the client's worker thread only. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- handles */

struct srv_event *srv_event_get(struct srv_client *c, uint64_t key)
{
    struct srv_event *e = NULL;
    HASH_FIND(hh, c->events, &key, sizeof(key), e);
    return e;
}

struct srv_module *srv_module_get(struct srv_client *c, uint64_t key)
{
    struct srv_module *m = NULL;
    HASH_FIND(hh, c->modules, &key, sizeof(key), m);
    return m;
}

struct srv_func *srv_func_get(struct srv_client *c, uint64_t key)
{
    struct srv_func *f = NULL;
    HASH_FIND(hh, c->funcs, &key, sizeof(key), f);
    return f;
}

struct srv_ctx *srv_ctx_get(struct srv_client *c, uint32_t id)
{
    struct srv_ctx *x = NULL;
    HASH_FIND(hh, c->ctxs, &id, sizeof(id), x);
    return x;
}

struct srv_handle *srv_handle_get(struct srv_client *c, uint32_t type, uint64_t value)
{
    struct srv_handle_key k = {.value = value, .type = type};
    struct srv_handle *h = NULL;
    HASH_FIND(hh, c->handles, &k, sizeof(k), h);
    return h;
}

int srv_handle_add(struct srv_client *c, uint32_t type, uint64_t value, int owned)
{
    struct srv_handle *h = srv_handle_get(c, type, value);
    if (h) {
        h->owned |= owned;
        return 0;
    }
    h = calloc(1, sizeof(*h));
    if (!h)
        return -1;
    h->key.value = value;
    h->key.type = type;
    h->owned = owned;
    h->ctx = c->cur ? c->cur->id : 0;
    HASH_ADD(hh, c->handles, key, sizeof(h->key), h);
    return 0;
}

void srv_handle_remove(struct srv_client *c, uint32_t type, uint64_t value)
{
    struct srv_handle *h = srv_handle_get(c, type, value);
    if (h) {
        srv_mem_uncount(c, h->dev, h->bytes);
        HASH_DEL(c->handles, h);
        free(h);
    }
}

/* ---------------------------------------------------------------- internal events */

CUresult srv_event_take(struct srv_client *c, int dev, CUevent *ev)
{
    struct srv_evpool *p = &c->pool[dev];
    if (p->n) {
        *ev = p->ev[--p->n];
        return CUDA_SUCCESS;
    }
    /* Made in the device's context, pushed so that the thread's current context (the one
     * the call being replayed runs in) is left as it was; timing off: these only order and
     * signal, and untimed events are cheaper. */
    if (dev < 0 || dev >= srv.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = DRV(cuCtxPushCurrent_v2)(srv.ctx[dev]);
    if (r != CUDA_SUCCESS)
        return r;
    r = DRV(cuEventCreate)(ev, CU_EVENT_DISABLE_TIMING);
    CUcontext old;
    DRV(cuCtxPopCurrent_v2)(&old);
    return r;
}

void srv_event_give(struct srv_client *c, int dev, CUevent ev)
{
    struct srv_evpool *p = &c->pool[dev];
    if (p->n == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 64;
        CUevent *n = realloc(p->ev, ncap * sizeof(*n));
        if (!n) {
            DRV(cuEventDestroy_v2)(ev);
            return;
        }
        p->ev = n;
        p->cap = ncap;
    }
    p->ev[p->n++] = ev;
}

/* ---------------------------------------------------------------- release */

void srv_release(struct srv_client *c, uint32_t ctx)
{
    /* Work first: nothing is freed under a running kernel or copy. */
    srv_streams_drain(c, ctx);

    struct srv_handle *h, *ht;
    HASH_ITER(hh, c->handles, h, ht)
    {
        if (ctx && h->ctx != ctx)
            continue;
        if (h->owned)
            srv_generic_destroy(c, h->key.type, h->key.value);
        srv_mem_uncount(c, h->dev, h->bytes);
        HASH_DEL(c->handles, h);
        free(h);
    }
    struct srv_event *e, *et;
    HASH_ITER(hh, c->events, e, et)
    {
        if (ctx && e->ctx != ctx)
            continue;
        DRV(cuEventDestroy_v2)(e->real);
        HASH_DEL(c->events, e);
        free(e);
    }
    struct srv_stream *s, *st;
    HASH_ITER(hh, c->streams, s, st)
    {
        if (ctx && s->ctx != ctx)
            continue;
        HASH_DEL(c->streams, s);
        srv_stream_free(c, s);
    }
    struct srv_ctx *x, *xt;
    HASH_ITER(hh, c->ctxs, x, xt)
    {
        if (ctx && x->id != ctx)
            continue;
        struct srv_stream *d, *dt;
        HASH_ITER(hh, x->defaults, d, dt)
        {
            HASH_DEL(x->defaults, d);
            srv_stream_free(c, d);
        }
        if (x->legacy)
            srv_stream_free(c, x->legacy);
        x->legacy = NULL;
    }
    struct srv_func *f, *ft;
    HASH_ITER(hh, c->funcs, f, ft)
    {
        if (ctx && f->ctx != ctx)
            continue;
        HASH_DEL(c->funcs, f);
        free(f);
    }
    struct srv_module *m, *mt;
    HASH_ITER(hh, c->modules, m, mt)
    {
        if (ctx && m->ctx != ctx)
            continue;
        if (m->is_library)
            DRV(cuLibraryUnload)(m->lib);
        else if (!m->borrowed)
            DRV(cuModuleUnload)(m->mod);
        HASH_DEL(c->modules, m);
        free(m);
    }
    size_t j = 0;
    for (size_t i = 0; i < c->nallocs; i++) {
        struct srv_alloc *a = &c->allocs[i];
        if (ctx && a->ctx != ctx) {
            c->allocs[j++] = *a;
            continue;
        }
        if (a->kind == SRV_ALLOC_DEVICE) {
            DRV(cuMemFree_v2)(a->base);
            srv_mem_uncount(c, a->dev, a->size);
        } else if (a->kind == SRV_ALLOC_HOST) {
            srv_host_release(c, a);
        }
    }
    c->nallocs = j;
    /* Everything is gone: the counters limits are checked against must be too. */
    if (!ctx) {
        uint64_t left = atomic_load(&c->stats.mem_in_use);
        for (int d = 0; d < CHAN_MAX_DEVICES; d++)
            left |= atomic_load(&c->stats.mem_dev[d]);
        if (left)
            srv_log("Client process %d: device memory counters not zero after release",
                    (int)c->pid);
    }
}
