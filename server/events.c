/* Events: the client's own (real events of the shared context, registry objects of type
 * CUevent, made and destroyed through their descriptions in cuda_symbols.txt, with the
 * hooks below), their synchronisation, and the server's internal events, which order a
 * client's streams and mark when its replies may go. */
#include "server/server.h"
#include "server/events.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- client events */

void srv_op_event_sync(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    uint64_t h = 0;
    struct srv_obj *e = NULL;
    if (len == sizeof(h)) {
        memcpy(&h, p, sizeof(h));
        e = srv_obj_find(c, SHIM_HT_CUevent, h);
    }
    CUresult res =
        e ? srv_wait_event(c, (CUevent)(uintptr_t)h, r->lane) : CUDA_ERROR_INVALID_HANDLE;
    if (res != CUDA_SUCCESS) srv_reply(c, r->lane, res, 0);
}

/* Interprocess events are shared between clients of this server by the server itself
 * (ipc.c), all in one process: the real event needs no interprocess resources, so the flag
 * is kept in the record (aux) and not passed on. The driver's rule stays: it needs
 * CU_EVENT_DISABLE_TIMING. */
static CUresult event_create_before(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    if (!(k->vals[1] & CU_EVENT_INTERPROCESS)) return CUDA_SUCCESS;
    if (!(k->vals[1] & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    k->vals[1] &= ~(uint64_t)CU_EVENT_INTERPROCESS;
    return CUDA_SUCCESS;
}

static CUresult event_create_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUevent, *(uint64_t *)k->a.ptr[0]);
    if (o) o->aux = k->a.val[1]; /* the flags as asked */
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_event_create = {.before = event_create_before,
                                               .after = event_create_after};

/* Another thread of the client may be waiting on the event (a reply that waits for the
 * GPU): that wait ends first, so that no pending wait queries a destroyed event. */
static CUresult event_destroy_before(struct srv_client *c, struct srv_call *k)
{
    CUevent ev = (CUevent)(uintptr_t)k->vals[0];
    for (struct srv_wait *w = c->waits; w; w = w->next)
        for (int i = 0; i < w->nev; i++)
            if (w->ev[i] == ev) DRV(cuEventSynchronize)(ev);
    srv_waits_poll(c);
    return CUDA_SUCCESS;
}

/* An event shared through IPC is destroyed once neither side holds it (ipc.c). */
static CUresult event_destroy_call(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUevent, k->a.val[0]);
    if (o && o->held) {
        o->held->let_go(c, o, 0, 0);
        return CUDA_SUCCESS;
    }
    return DRV(cuEventDestroy_v2)((CUevent)(uintptr_t)k->vals[0]);
}

const struct srv_hook srv_hook_event_destroy = {.before = event_destroy_before,
                                                .call = event_destroy_call};

/* cuGraphEventRecordNodeGetEvent, cuGraphEventWaitNodeGetEvent: a node keeps naming its
 * event after the client destroyed it, and the handle may be another client's by now; the
 * generic path would register what the driver returns as the caller's to use. So an event
 * that is not the caller's reads as NULL (as the driver answers for a node whose event is
 * gone): no grant, and no freed handle ever reaches the driver from this client. */
static CUresult node_event_call(struct srv_client *c, struct srv_call *k)
{
    CUgraphNode n = (CUgraphNode)(uintptr_t)k->vals[0];
    CUevent *out = k->a.ptr[1];
    CUresult r = k->id == SHIM_ID_cuGraphEventRecordNodeGetEvent
                     ? DRV(cuGraphEventRecordNodeGetEvent)(n, out)
                     : DRV(cuGraphEventWaitNodeGetEvent)(n, out);
    if (r == CUDA_SUCCESS && out && *out &&
        !srv_obj_find(c, SHIM_HT_CUevent, (uint64_t)(uintptr_t)*out))
        *out = NULL;
    return r;
}

const struct srv_hook srv_hook_node_event = {.call = node_event_call};

/* ---------------------------------------------------------------- internal events */

CUresult srv_event_take(struct srv_client *c, int dev, CUevent *ev)
{
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_DEVICE;
    struct srv_evpool *p = &c->pool[dev];
    if (p->n) {
        *ev = p->ev[--p->n];
        return CUDA_SUCCESS;
    }
    /* Made in the device's context, pushed so that the thread's current context (the one
     * the call being replayed runs in) is left as it was; timing off: these only order and
     * signal, and untimed events are cheaper. */
    CUresult r = srv_push_device(dev);
    if (r != CUDA_SUCCESS) return r;
    r = DRV(cuEventCreate)(ev, CU_EVENT_DISABLE_TIMING);
    srv_pop_device();
    return r;
}

void srv_event_give(struct srv_client *c, int dev, CUevent ev)
{
    if (dev < 0 || dev >= CHAN_MAX_DEVICES) {
        DRV(cuEventDestroy_v2)(ev);
        return;
    }
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

/* The client leaves, its marks and blocks given back (family.c): every internal event it
 * holds is destroyed, the free ones, the staging slots' and the blocking waits'. */
static void events_fini(struct srv_client *c)
{
    for (int d = 0; d < CHAN_MAX_DEVICES; d++) {
        for (int i = 0; i < CHAN_NSLOTS; i++)
            if (c->slot_ev[d][i]) DRV(cuEventDestroy_v2)(c->slot_ev[d][i]);
        for (size_t i = 0; i < c->pool[d].n; i++)
            DRV(cuEventDestroy_v2)(c->pool[d].ev[i]);
        free(c->pool[d].ev);
        if (c->block_ev[d]) DRV(cuEventDestroy_v2)(c->block_ev[d]);
    }
}

const struct srv_family srv_family_events = {.name = "events", .client_fini = events_fini};
