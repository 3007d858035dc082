/* The server's internal events, which order a client's streams and mark when its replies
 * may go: recycled per client and device, below every family that uses them. */
#include "server/core/server.h"
#include "server/core/events.h"

#include <stdlib.h>

/* A client's (its events), the worker's own: its free internal events, per device (an
 * event can only be recorded on streams of the context it was made in), and per device,
 * made when first needed, the CU_EVENT_BLOCKING_SYNC event through which the worker waits
 * for a stream while the server is crowded (waits.c block_stream). */
struct srv_events {
    struct srv_evpool {
        CUevent *ev;
        size_t n, cap;
    } pool[CHAN_MAX_DEVICES];
    CUevent block_ev[CHAN_MAX_DEVICES];
};

CUresult srv_event_take(struct srv_client *c, int dev, CUevent *ev)
{
    if (dev < 0 || dev >= srv.ndev) return CUDA_ERROR_INVALID_DEVICE;
    struct srv_evpool *p = &c->events->pool[dev];
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
    struct srv_evpool *p = &c->events->pool[dev];
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

void srv_events_forget_device(struct srv_client *c, int dev)
{
    c->events->pool[dev].n = 0;
}

CUevent srv_event_blocking(struct srv_client *c, int dev)
{
    CUevent *b = &c->events->block_ev[dev];
    if (!*b) {
        /* Made in the device's context; the thread's current one is left as it was. */
        if (srv_push_device(dev) != CUDA_SUCCESS) return NULL;
        CUevent ev = NULL;
        if (DRV(cuEventCreate)(&ev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) ==
            CUDA_SUCCESS)
            *b = ev;
        srv_pop_device();
    }
    return *b;
}

/* The client leaves, its marks and blocks given back (family.c): every internal event it
 * holds is destroyed, the free ones and the blocking waits' (copy.c destroys its slots'). */
static void events_fini(struct srv_client *c)
{
    for (int d = 0; d < CHAN_MAX_DEVICES; d++) {
        for (size_t i = 0; i < c->events->pool[d].n; i++)
            DRV(cuEventDestroy_v2)(c->events->pool[d].ev[i]);
        free(c->events->pool[d].ev);
        if (c->events->block_ev[d]) DRV(cuEventDestroy_v2)(c->events->block_ev[d]);
    }
}

SRV_CLIENT_STATE(events, events)

const struct srv_family srv_family_events = {
    .name = "events", SRV_CLIENT_STATE_HOOKS(events), .client_fini = events_fini};
