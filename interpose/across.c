/* A stream of one GPU's server waiting for an event of another's, in a process that holds a
 * connection per GPU it uses (route.c, issue 30): cuStreamWaitEvent naming both.
 *
 * Neither server knows the other's event, but interprocess events cross between the GPUs'
 * servers of a pipe directory (server/core/events.c, server/memory/ipcpeer.c). So the
 * event's server is asked for an interprocess twin that completes when the event does: a
 * stream of the shim's own there waits for the event, and the twin is recorded behind that
 * wait (the event's state is taken when the wait is enqueued, as the caller's own wait would
 * take it). The stream's server opens the twin's handle and its stream waits for it; the
 * opened twin is destroyed at once (a wait already enqueued keeps what it waits for).
 *
 * The twins themselves live a while: one is destroyed once it has completed and TWINS newer
 * ones exist, so that a wait enqueued on it has long been taken by its stream (the driver
 * keeps an interprocess event's state in memory both processes map). Guarded by lock: the
 * shim's streams per device and the twins. Each wait costs eight requests, two of them
 * round trips to the servers' siblings; a program's own waits of one server stay one
 * asynchronous request. */
#include "interpose/shim.h"

#include <string.h>

#define TWINS 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUstream waiters[CHAN_MAX_DEVICES]; /* the shim's stream on each device's server */
static uint32_t waiter_ctx[CHAN_MAX_DEVICES];
static struct twin {
    CUevent ev;
    uint32_t ctx;
    int dev;
} twins[TWINS];
static unsigned ntwins, next_twin;

/* Destroys the oldest twin to make room, once it has completed (else keeps it: the caller
 * then makes no twin). Lock held. 0 when there is room. */
static int make_room(void)
{
    if (ntwins < TWINS) return 0;
    struct twin *t = &twins[next_twin % TWINS];
    struct shim_route saved;
    shim_route_begin(&saved, t->dev, t->ctx);
    CUresult q = cuEventQuery(t->ev);
    if (q != CUDA_ERROR_NOT_READY) cuEventDestroy_v2(t->ev);
    shim_route_end(&saved);
    if (q == CUDA_ERROR_NOT_READY) return -1;
    next_twin++;
    ntwins--;
    return 0;
}

int shim_across_wait(const struct shim_call *d, const uint64_t *val)
{
    if (d != &shim_calls[SHIM_ID_cuStreamWaitEvent]) return 0;
    struct shim_known ks, ke;
    /* The NULL stream (and the special handles) is the thread's context's. */
    int a = shim_known_find(SHIM_HT_CUstream, val[0], &ks) == 0 ? shim_ctx_id_device(ks.ctx)
                                                                : shim_route_device();
    int b = shim_known_find(SHIM_HT_CUevent, val[1], &ke) == 0 ? shim_ctx_id_device(ke.ctx) : a;
    return shim_conn_of_device(a) != shim_conn_of_device(b);
}

CUresult shim_across_wait_event(CUstream stream, CUevent event, unsigned flags)
{
    struct shim_known ks, ke;
    if (shim_known_find(SHIM_HT_CUevent, (uint64_t)(uintptr_t)event, &ke) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (shim_known_find(SHIM_HT_CUstream, (uint64_t)(uintptr_t)stream, &ks) != 0)
        ks.ctx = shim_current_ctx_id(); /* the NULL stream: the thread's context's */
    int a = shim_ctx_id_device(ks.ctx), b = shim_ctx_id_device(ke.ctx);
    if (a < 0 || b < 0 || a >= CHAN_MAX_DEVICES || b >= CHAN_MAX_DEVICES)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult r;
    CUipcEventHandle h;
    CUevent twin = NULL, opened = NULL;
    struct shim_route saved;
    pthread_mutex_lock(&lock);
    if (make_room() != 0) {
        pthread_mutex_unlock(&lock);
        return shim_refuse("more than 256 waits across GPUs' servers still pending");
    }
    /* On the event's server: the twin, behind a wait for the event on the shim's stream. */
    shim_route_begin(&saved, b, ke.ctx);
    r = CUDA_SUCCESS;
    /* Made in the event's context; one the shim no longer knows went with its context (a
     * primary context reset keeps its id). */
    int known =
        waiters[b] && shim_known_find(SHIM_HT_CUstream, (uint64_t)(uintptr_t)waiters[b], NULL) == 0;
    if (!known || waiter_ctx[b] != ke.ctx) {
        if (known) cuStreamDestroy_v2(waiters[b]);
        waiters[b] = NULL;
        if ((r = cuStreamCreate(&waiters[b], CU_STREAM_NON_BLOCKING)) == CUDA_SUCCESS)
            waiter_ctx[b] = ke.ctx;
    }
    if (r == CUDA_SUCCESS)
        r = cuEventCreate(&twin, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS && (r = cuStreamWaitEvent(waiters[b], event, 0)) == CUDA_SUCCESS &&
        (r = cuEventRecord(twin, waiters[b])) == CUDA_SUCCESS)
        r = cuIpcGetEventHandle(&h, twin);
    shim_route_end(&saved);
    if (twin && r != CUDA_SUCCESS) {
        shim_route_begin(&saved, b, ke.ctx);
        cuEventDestroy_v2(twin);
        shim_route_end(&saved);
        twin = NULL;
    }
    if (twin) {
        twins[(next_twin + ntwins) % TWINS] = (struct twin){.ev = twin, .ctx = ke.ctx, .dev = b};
        ntwins++;
    }
    pthread_mutex_unlock(&lock);
    if (r != CUDA_SUCCESS) return r;
    /* On the stream's server: the twin opened, waited for, let go. */
    shim_route_begin(&saved, a, ks.ctx);
    if ((r = cuIpcOpenEventHandle(&opened, h)) == CUDA_SUCCESS) {
        r = cuStreamWaitEvent(stream, opened, flags);
        cuEventDestroy_v2(opened);
    }
    shim_route_end(&saved);
    return r;
}
