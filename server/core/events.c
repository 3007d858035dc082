/* Events: the client's own (real events of the shared context, registry objects of type
 * CUevent, made and destroyed through their descriptions in cuda_symbols.txt, with the
 * hooks below) and their synchronisation. The server's internal events are evpool.c's. */
#include "server/core/server.h"
#include "server/core/waits.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/core/events.h"
#include "server/control/siblings.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- client events */

void srv_op_event_sync(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    uint64_t h; /* the payload is one (its %op row) */
    (void)len;
    memcpy(&h, p, sizeof(h));
    struct srv_obj *e = srv_obj_find(c, SHIM_HT_CUevent, h);
    CUresult res =
        e ? srv_wait_event(c, (CUevent)(uintptr_t)h, r->lane) : CUDA_ERROR_INVALID_HANDLE;
    if (res != CUDA_SUCCESS) srv_reply(c, r->lane, res, 0);
}

/* Interprocess events are shared between clients of this server by the server itself
 * (ipc.c), all in one process: the real event needs no interprocess resources, so the flag
 * is kept in the record (aux) and not passed on. Except in a GPU's server
 * (MPSSHIM_SERVER_PER_GPU): a client of a sibling server may open the event, which its server
 * does with the driver's own handle of it (ipc.c, "between servers"), and the driver gives
 * one only of an event made interprocess. The driver's rule stays: it needs
 * CU_EVENT_DISABLE_TIMING. */
static CUresult event_create_before(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    if (!(k->vals[1] & CU_EVENT_INTERPROCESS)) return CUDA_SUCCESS;
    if (!(k->vals[1] & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    char top[PATH_MAX];
    if (!srv_siblings_top(top, sizeof(top))) k->vals[1] &= ~(uint64_t)CU_EVENT_INTERPROCESS;
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
    srv_waits_poll(c, 1);
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
