/* Host functions of clients: run by the client (interpose/hostfn.c), ordered on its stream
 * here with a host function of the server's that only posts a notification, and a stream
 * wait on the client's "done" word (see channel/proto.h, struct chan_callbacks). */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

struct fire {
    struct srv_client *c;
    uint32_t seq;
};

/* Runs on the driver's callback thread when the stream reaches the host function: posts
 * the notification in order and wakes the client's callback thread. Never blocks for long:
 * the driver runs every client's host functions on this thread. */
static void CUDA_CB fire(void *arg)
{
    struct fire *f = arg;
    struct chan_callbacks *cb = f->c->ch.callbacks;
    uint32_t k = atomic_fetch_add(&f->c->cb_fired, 1);
    cb->fired[k % CHAN_CB_SLOTS] = f->seq;
    /* Publish in order, should two driver threads ever run host functions at once. */
    while (atomic_load_explicit(&cb->fired_tail, memory_order_acquire) != k)
        chan_cpu_relax();
    atomic_store_explicit(&cb->fired_tail, k + 1, memory_order_release);
    chan_wake(&cb->fired_tail, &cb->fired_waiters);
    free(f);
}

void srv_op_host_func(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_host_func m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    if (len != sizeof(m) || !c->shm_dptr)
        goto out;
    memcpy(&m, p, sizeof(m));
    struct srv_stream *s = srv_stream_resolve(c, m.stream, r->flags & CHAN_RF_PTDS, r->thread);
    res = CUDA_ERROR_INVALID_HANDLE;
    if (!s)
        goto out;
    /* A graph would replay the notification and the wait with their first values: host
     * functions are not captured yet. */
    res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (srv_stream_capturing(c, s))
        goto out;
    struct fire *f = malloc(sizeof(*f));
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!f)
        goto out;
    f->c = c;
    f->seq = m.seq;
    CUstream st = srv_stream_prepare(c, s);
    res = DRV(cuLaunchHostFunc)(st, fire, f);
    if (res != CUDA_SUCCESS) {
        free(f);
        goto out;
    }
    /* The device address of the slot's done word (the segment is device-mapped). */
    CUdeviceptr done = c->shm_dptr + (CUdeviceptr)((uint8_t *)&c->ch.callbacks->done[m.seq % CHAN_CB_SLOTS] -
                                                   (uint8_t *)c->shm);
    res = DRV(cuStreamWaitValue32_v2)(st, done, m.seq, CU_STREAM_WAIT_VALUE_GEQ);
    c->cb_last = m.seq;
out:
    srv_defer(c, res, "host function");
}

void srv_hostfn_release(struct srv_client *c)
{
    if (!c->shm || !c->cb_last)
        return;
    /* The client is gone and will run nothing more: let every stream waiting on one of
     * its host functions go on (the comparison is cyclic: all seqs up to cb_last pass). */
    for (uint32_t i = 0; i < CHAN_CB_SLOTS; i++)
        atomic_store(&c->ch.callbacks->done[i], c->cb_last);
}
