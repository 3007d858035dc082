/* Client events: real events of the shared context, owned by the client that made them. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

void srv_op_event_create(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                         uint32_t len)
{
    uint32_t flags;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t out = 0;
    struct srv_event *e = NULL;
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
    } else if (len == sizeof(flags) && (e = calloc(1, sizeof(*e)))) {
        memcpy(&flags, p, sizeof(flags));
        /* Interprocess events would escape the client's tables. */
        res = (flags & CU_EVENT_INTERPROCESS) ? CUDA_ERROR_NOT_SUPPORTED
                                              : DRV(cuEventCreate)(&e->real, flags);
        if (res == CUDA_SUCCESS) {
            e->key = (uint64_t)(uintptr_t)e->real;
            e->ctx = c->cur->id;
            e->flags = flags;
            HASH_ADD(hh, c->events, key, sizeof(e->key), e);
            memcpy(srv_lane_data(c, r->lane), &e->key, sizeof(e->key));
            out = sizeof(e->key);
        } else {
            free(e);
        }
    }
    srv_reply(c, r->lane, res, out);
}

static struct srv_event *named(struct srv_client *c, uint8_t *p, uint32_t len)
{
    uint64_t h;
    if (len != sizeof(h))
        return NULL;
    memcpy(&h, p, sizeof(h));
    return srv_event_get(c, h);
}

void srv_op_event_destroy(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                          uint32_t len)
{
    struct srv_event *e = named(c, p, len);
    if (e) {
        /* Another thread of the client may be waiting on it: let that wait end first, so
         * that no pending wait queries a destroyed event. */
        for (struct srv_wait *w = c->waits; w; w = w->next)
            for (int i = 0; i < w->nev; i++)
                if (w->ev[i] == e->real)
                    DRV(cuEventSynchronize)(e->real);
        srv_waits_poll(c);
        DRV(cuEventDestroy_v2)(e->real);
        HASH_DEL(c->events, e);
        free(e);
    }
    srv_reply(c, r->lane, e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, 0);
}

void srv_op_event_sync(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct srv_event *e = named(c, p, len);
    CUresult res = e ? srv_wait_event(c, e->real, r->lane) : CUDA_ERROR_INVALID_HANDLE;
    if (res != CUDA_SUCCESS)
        srv_reply(c, r->lane, res, 0);
}
