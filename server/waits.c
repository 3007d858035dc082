/* Replies that wait for the GPU (stream, event and context synchronisation, copies whose
 * caller must see them complete). The worker never blocks on them: each becomes a list of
 * events it polls between requests, so one client thread waiting for a long kernel does
 * not stop its other threads' calls from being served. */
#include "server/server.h"

#include <stdlib.h>

/* Posts the reply of a finished wait, with an error deferred from an async call if any
 * (unless `own`: the reply of a transfer of the shim's own, srv_wait_stream_own). */
static void finish(struct srv_client *c, int lane, CUresult r, uint32_t len, int own)
{
    if (r == CUDA_SUCCESS && !own) r = srv_take_deferred(c);
    srv_reply(c, lane, r, len);
}

/* A client that has only ever called from one thread is blocked in this very wait and can
 * send nothing else: the worker may then block in the driver's own synchronisation, which
 * wakes faster than polling. Any other client is polled, so that one of its threads
 * waiting for the GPU never holds up the others (which might even be the ones to release
 * the work waited for). So is one that has host functions or host nodes (hostfn.c): its
 * work may wait on its callback thread, and should it die there, only this worker, polling
 * and so seeing it go, releases that work. */
static int may_block(struct srv_client *c)
{
    return srv.block_sync && !c->many_threads && !c->cb_last && !c->hn &&
           !chan_ring_pending(&c->ch);
}

static struct srv_wait *new_wait(struct srv_client *c, int lane, uint32_t len)
{
    struct srv_wait *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->lane = lane;
    w->reply_len = len;
    w->result = CUDA_SUCCESS;
    (void)c;
    return w;
}

static void add(struct srv_client *c, struct srv_wait *w)
{
    w->next = c->waits;
    c->waits = w;
    atomic_store_explicit(&c->stats.gpu_waits, 1, memory_order_relaxed);
}

/* Adds "everything on `s` so far" to w; blocks instead if w is full. */
static CUresult add_stream(struct srv_client *c, struct srv_wait *w, struct srv_stream *s)
{
    /* A capturing stream runs nothing now; its recorded work runs when the graph does. */
    if (srv_stream_capturing(c, s) || DRV(cuStreamQuery)(s->real) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    if (w->nev == SRV_WAIT_EVENTS)
        return DRV(cuStreamSynchronize)(s->real);
    CUevent ev;
    CUresult r = srv_event_take(c, s->device, &ev);
    if (r != CUDA_SUCCESS) {
        srv_log("Client process %d: no event to wait with on device %d: %s", (int)c->pid,
                s->device, srv_errname(r));
        return r;
    }
    if ((r = DRV(cuEventRecord)(ev, s->real)) != CUDA_SUCCESS) {
        srv_log("Client process %d: recording a wait on a stream of device %d failed: %s",
                (int)c->pid, s->device, srv_errname(r));
        srv_event_give(c, s->device, ev);
        return r;
    }
    w->ev[w->nev] = ev;
    w->dev[w->nev] = s->device;
    w->pooled[w->nev++] = 1;
    return CUDA_SUCCESS;
}

static CUresult wait_stream(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len,
                            int own)
{
    if (may_block(c)) {
        CUresult r = DRV(cuStreamSynchronize)(s->real);
        finish(c, lane, r, r == CUDA_SUCCESS ? len : 0, own);
        return CUDA_SUCCESS;
    }
    struct srv_wait *w = new_wait(c, lane, len);
    if (!w) {
        /* No memory for a wait: block instead. */
        CUresult r = DRV(cuStreamSynchronize)(s->real);
        if (r == CUDA_SUCCESS) finish(c, lane, r, len, own);
        return r;
    }
    w->own = own;
    CUresult r = add_stream(c, w, s);
    if (r != CUDA_SUCCESS || w->nev == 0) {
        free(w);
        if (r == CUDA_SUCCESS) finish(c, lane, CUDA_SUCCESS, len, own);
        return r;
    }
    add(c, w);
    return CUDA_SUCCESS;
}

CUresult srv_wait_stream(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len)
{
    return wait_stream(c, s, lane, len, 0);
}

CUresult srv_wait_stream_own(struct srv_client *c, struct srv_stream *s, int lane, uint32_t len)
{
    return wait_stream(c, s, lane, len, 1);
}

CUresult srv_wait_ctx(struct srv_client *c, struct srv_ctx *x, int lane)
{
    struct srv_wait *w = new_wait(c, lane, 0);
    if (!w)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (struct srv_obj *o = srv_objs_of(c, SHIM_HT_CUstream); o && r == CUDA_SUCCESS;
         o = o->type_next) {
        struct srv_stream *s = o->ext;
        if (s->ctx == x->id)
            r = add_stream(c, w, s);
    }
    struct srv_stream *s, *t;
    if (x->legacy && r == CUDA_SUCCESS)
        r = add_stream(c, w, x->legacy);
    HASH_ITER(hh, x->defaults, s, t)
    if (r == CUDA_SUCCESS)
        r = add_stream(c, w, s);
    if (x->mvar && r == CUDA_SUCCESS) r = add_stream(c, w, x->mvar);
    /* Destroyed streams' pending work: the wait takes their events over. */
    size_t j = 0;
    for (size_t i = 0; i < c->nretired; i++) {
        if (c->retired[i].ctx == x->id && w->nev < SRV_WAIT_EVENTS) {
            w->ev[w->nev] = c->retired[i].ev;
            w->dev[w->nev] = c->retired[i].dev;
            w->pooled[w->nev++] = 1;
        } else {
            c->retired[j++] = c->retired[i];
        }
    }
    c->nretired = j;
    if (r == CUDA_SUCCESS && may_block(c))
        for (int i = 0; i < w->nev; i++) {
            CUresult q = DRV(cuEventSynchronize)(w->ev[i]);
            if (q != CUDA_SUCCESS && r == CUDA_SUCCESS)
                r = q;
        }
    if (r != CUDA_SUCCESS || w->nev == 0 || may_block(c)) {
        for (int i = 0; i < w->nev; i++)
            srv_event_give(c, w->dev[i], w->ev[i]);
        free(w);
        if (r == CUDA_SUCCESS) finish(c, lane, CUDA_SUCCESS, 0, 0);
        return r;
    }
    add(c, w);
    return CUDA_SUCCESS;
}

CUresult srv_wait_event(struct srv_client *c, CUevent ev, int lane)
{
    if (may_block(c)) {
        finish(c, lane, DRV(cuEventSynchronize)(ev), 0, 0);
        return CUDA_SUCCESS;
    }
    CUresult q = DRV(cuEventQuery)(ev);
    if (q != CUDA_ERROR_NOT_READY) {
        finish(c, lane, q, 0, 0);
        return CUDA_SUCCESS;
    }
    struct srv_wait *w = new_wait(c, lane, 0);
    if (!w)
        return CUDA_ERROR_OUT_OF_MEMORY;
    w->ev[0] = ev;
    w->pooled[0] = 0;
    w->nev = 1;
    add(c, w);
    return CUDA_SUCCESS;
}

int srv_waits_poll(struct srv_client *c)
{
    struct srv_wait **pw = &c->waits;
    while (*pw) {
        struct srv_wait *w = *pw;
        while (w->nev > 0) {
            int i = w->nev - 1;
            CUresult q = DRV(cuEventQuery)(w->ev[i]);
            if (q == CUDA_ERROR_NOT_READY)
                break;
            if (q != CUDA_SUCCESS && w->result == CUDA_SUCCESS) {
                srv_fault_note(w->dev[i], q);
                w->result = q;
                srv_log("Client process %d: work waited for failed: %s", (int)c->pid,
                        srv_errname(q));
            }
            if (w->pooled[i])
                srv_event_give(c, w->dev[i], w->ev[i]);
            w->nev--;
        }
        if (w->nev == 0) {
            *pw = w->next;
            finish(c, w->lane, w->result, w->result == CUDA_SUCCESS ? w->reply_len : 0, w->own);
            free(w);
        } else {
            pw = &w->next;
        }
    }
    atomic_store_explicit(&c->stats.gpu_waits, c->waits != NULL, memory_order_relaxed);
    return c->waits != NULL;
}
