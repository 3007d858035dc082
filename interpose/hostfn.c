/* Host functions and stream callbacks: they run here, in the client, on a thread of the
 * shim's own, in stream order (channel/proto.h, struct chan_callbacks, says how the server
 * holds the stream until they are done). Application threads never run them, so a thread
 * blocked in a synchronisation never has to. */
#include "interpose/shim.h"

#include <string.h>

struct pending {
    int kind; /* 1: host function, 2: stream callback */
    CUhostFn fn;
    CUstreamCallback cb;
    void *user;
    CUstream stream;
};

/* Guarded by cb_lock: the records of outstanding host functions, by seq % slots, and the
 * last seq handed out. */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending pending[CHAN_CB_SLOTS];
static uint32_t last_seq;
static int thread_started;

static void *callback_thread(void *arg)
{
    (void)arg;
    struct chan_callbacks *cb = shim_conn.ch.callbacks;
    uint32_t head = atomic_load(&cb->fired_head);
    struct chan_wait w = shim_waiter;
    w.spin_ns = 20 * 1000;
    for (;;) {
        if (chan_wait_for(&cb->fired_tail, head + 1, &cb->fired_waiters, &w) != 0)
            return NULL; /* the server is gone */
        uint32_t seq = cb->fired[head % CHAN_CB_SLOTS];
        head++;
        atomic_store(&cb->fired_head, head);
        pthread_mutex_lock(&cb_lock);
        struct pending p = pending[seq % CHAN_CB_SLOTS];
        pthread_mutex_unlock(&cb_lock);
        if (p.kind == 1 && p.fn)
            p.fn(p.user);
        else if (p.kind == 2 && p.cb)
            p.cb(p.stream, CUDA_SUCCESS, p.user);
        /* Release: whatever the function wrote is visible before the stream goes on. */
        atomic_store_explicit(&cb->done[seq % CHAN_CB_SLOTS], seq, memory_order_release);
    }
}

static CUresult enqueue(CUstream stream, const struct pending *p)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS)
        return r;
    /* Not captured yet: a graph would replay the first notification and wait (see
     * server/hostfn.c). */
    if ((r = shim_capture_refuse(stream)) != CUDA_SUCCESS)
        return shim_refuse_as("a host function in a stream capture", r);
    pthread_mutex_lock(&cb_lock);
    if (!thread_started) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, callback_thread, NULL) == 0)
            thread_started = 1;
        pthread_attr_destroy(&at);
        if (!thread_started) {
            pthread_mutex_unlock(&cb_lock);
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
    }
    uint32_t seq = ++last_seq;
    if (seq == 0)
        seq = ++last_seq; /* 0 means "never" in a fresh slot */
    /* A slot is reused only 65536 host functions later; one still pending then would
     * have its wait released early, so refuse rather than risk it. */
    uint32_t prev = atomic_load(&shim_conn.ch.callbacks->done[seq % CHAN_CB_SLOTS]);
    if (pending[seq % CHAN_CB_SLOTS].kind && prev != seq - CHAN_CB_SLOTS) {
        last_seq--;
        pthread_mutex_unlock(&cb_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pending[seq % CHAN_CB_SLOTS] = *p;
    /* Sent under the lock: host functions reach the server in seq order. */
    struct chan_host_func m = {.stream = (uint64_t)(uintptr_t)stream, .seq = seq};
    struct shim_req q;
    r = shim_req_begin(&q, CHAN_OP_HOST_FUNC, sizeof(m), 0, 0);
    if (r == CUDA_SUCCESS) {
        memcpy(q.payload, &m, sizeof(m));
        shim_req_send(&q);
    }
    pthread_mutex_unlock(&cb_lock);
    return r;
}

CUresult SHIM_IMPL(cuLaunchHostFunc)(CUstream hStream, CUhostFn fn, void *userData)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct pending p = {.kind = 1, .fn = fn, .user = userData, .stream = hStream};
    return enqueue(hStream, &p);
}

CUresult SHIM_IMPL(cuStreamAddCallback)(CUstream hStream, CUstreamCallback callback,
                                        void *userData, unsigned int flags)
{
    if (!callback || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct pending p = {.kind = 2, .cb = callback, .user = userData, .stream = hStream};
    return enqueue(hStream, &p);
}
