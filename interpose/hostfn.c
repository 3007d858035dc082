/* Host functions, stream callbacks and graph host nodes: they run here, in the client, on
 * a thread of the shim's own, in stream or graph order (channel/proto.h, struct
 * chan_callbacks, says how the server holds the stream or graph until they are done).
 * Application threads never run them, so a thread blocked in a synchronisation never has
 * to. A host node's function and data live in its slot of the shared segment, where the
 * server writes them (server/graphs/hostfn.c). */
#include "interpose/shim.h"
#include "channel/wait.h"

#include <stdlib.h>
#include <string.h>

struct pending {
    int kind; /* 1: host function, 2: stream callback */
    CUhostFn fn;
    CUstreamCallback cb;
    void *user;
    CUstream stream;
};

/* Per connection (its slot, rpc.c; a process of one connection has slot 0 alone): the records
 * of outstanding host functions, by seq % slots, the last seq handed out, and the callback
 * thread serving that connection's segment (each server fires its own clients' callbacks and
 * host nodes there, with seqs of that connection's). Guarded by cb_lock. Slot 0's records
 * are static; another's are made with its thread (a process of several GPUs' servers,
 * route.c). */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending pending0[CHAN_CB_SLOTS];
static _Atomic int8_t devs0[CHAN_CB_SLOTS];
static struct cbconn {
    struct shim_conn *conn; /* set with its thread */
    struct pending *pending;
    /* By seq % slots, the device of a host function's stream (-1: not known), stored under
     * cb_lock before it is sent and read by shim_hostfn_settle without the lock: a seq still
     * outstanding keeps its slot (enqueue's reuse check), so what settle reads of one it waits
     * for is that one's. */
    _Atomic int8_t *dev_of;
    uint32_t last_seq;
    int thread_started;
} cbs[SHIM_CONNS] = {[0] = {.pending = pending0, .dev_of = devs0}};
/* Host functions and callbacks sent and not yet returned (changed under cb_lock when sent,
 * by the callback thread when one returns): the common case, none, costs
 * shim_hostfn_settle one load. */
static _Atomic uint32_t outstanding;
/* Host functions returned so far, a word settling threads sleep on (while settlers says any
 * does, the callback thread wakes them at each return): a settled call goes on microseconds
 * after the host function it waited for, not at a poll's next tick. */
static _Atomic uint32_t returned, settlers;
static __thread int on_callback_thread; /* a call made in a host function waits for none */

static void *callback_thread(void *arg)
{
    struct cbconn *x = arg;
    struct chan_callbacks *cb = x->conn->ch.callbacks;
    uint32_t head = atomic_load(&cb->fired_head);
    struct chan_wait w = shim_waiter;
    w.arg = x->conn;
    w.spin_ns = 20 * 1000;
    on_callback_thread = 1;
    shim_mig_hostfn_thread();
    for (;;) {
        if (chan_wait_for(&cb->fired_tail, head + 1, &cb->fired_waiters, &w) != 0)
            return NULL; /* the server is gone */
        uint64_t what = cb->fired[head % CHAN_CB_SLOTS];
        head++;
        atomic_store(&cb->fired_head, head);
        if (what & CHAN_CB_NODE) {
            uint32_t slot = (uint32_t)what;
            if (slot >= CHAN_HN_SLOTS) continue;
            CUhostFn fn = (CUhostFn)(uintptr_t)cb->hn_fn[slot];
            if (fn) fn((void *)(uintptr_t)cb->hn_user[slot]);
            shim_mig_hostfn_done(); /* its writes to managed memory first (migrate.c) */
            /* Release: what the function wrote is visible before the graph goes on. */
            atomic_store_explicit(&cb->hn_flag[slot], 1, memory_order_release);
            continue;
        }
        uint32_t seq = (uint32_t)what;
        pthread_mutex_lock(&cb_lock);
        struct pending p = x->pending[seq % CHAN_CB_SLOTS];
        pthread_mutex_unlock(&cb_lock);
        if (p.kind == 1 && p.fn)
            p.fn(p.user);
        else if (p.kind == 2 && p.cb)
            p.cb(p.stream, CUDA_SUCCESS, p.user);
        shim_mig_hostfn_done(); /* its writes to managed memory first (migrate.c) */
        /* Release: whatever the function wrote is visible before the stream goes on. */
        atomic_store_explicit(&cb->done[seq % CHAN_CB_SLOTS], seq, memory_order_release);
        if (p.kind) atomic_fetch_sub(&outstanding, 1);
        atomic_fetch_add(&returned, 1); /* seq_cst, as settlers' load: no wake-up is lost */
        if (atomic_load(&settlers)) chan_futex_wake(&returned);
    }
}

/* Starts connection c's callback thread once; cb_lock held. Its entry, or NULL. */
static struct cbconn *start_thread(struct shim_conn *c)
{
    struct cbconn *x = &cbs[c->slot];
    if (x->thread_started) return x;
    if (!x->pending && !(x->pending = calloc(CHAN_CB_SLOTS, sizeof(*x->pending)))) return NULL;
    if (!x->dev_of && !(x->dev_of = calloc(CHAN_CB_SLOTS, sizeof(*x->dev_of)))) return NULL;
    x->conn = c;
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, callback_thread, x) == 0) x->thread_started = 1;
    pthread_attr_destroy(&at);
    return x->thread_started ? x : NULL;
}

/* A host node request (see struct chan_host_node); `out` takes the reply. */
static CUresult host_node(unsigned what, uint64_t graph, CUgraphNode node, const CUgraphNode *deps,
                          size_t ndeps, const CUDA_HOST_NODE_PARAMS *p, void *out, uint32_t cap)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (ndeps > CHAN_MAX_DEPS) return shim_refuse("graph nodes with more than 256 dependencies");
    /* The node may run before anything else of this process's needs the thread: the one of
     * the connection the request goes to, whose server fires it (route.c). */
    pthread_mutex_lock(&cb_lock);
    r = start_thread(shim_route_conn()) ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
    pthread_mutex_unlock(&cb_lock);
    if (r != CUDA_SUCCESS) return r;
    uint8_t buf[sizeof(struct chan_host_node) + CHAN_MAX_DEPS * sizeof(uint64_t)];
    struct chan_host_node m = {
        .what = what,
        .ndeps = (uint32_t)ndeps,
        .graph = graph,
        .node = (uint64_t)(uintptr_t)node,
        .fn = p ? (uint64_t)(uintptr_t)p->fn : 0,
        .user = p ? (uint64_t)(uintptr_t)p->userData : 0,
    };
    memcpy(buf, &m, sizeof(m));
    for (size_t i = 0; i < ndeps; i++) {
        uint64_t d = (uint64_t)(uintptr_t)deps[i];
        memcpy(buf + sizeof(m) + i * sizeof(d), &d, sizeof(d));
    }
    return shim_rpc(CHAN_OP_HOST_NODE, buf, (uint32_t)(sizeof(m) + ndeps * sizeof(uint64_t)), out,
                    cap, NULL);
}

static CUresult enqueue_routed(CUstream stream, const struct pending *p, int dev);

/* To the server of the stream's context, where the process holds one per device (route.c);
 * that connection's callback thread runs it. */
static CUresult enqueue(CUstream stream, const struct pending *p)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    uint32_t ctx = 0;
    if ((r = shim_stream_check(stream, &ctx)) != CUDA_SUCCESS) return r;
    struct shim_route saved;
    int routed = shim_route_stream(stream, &saved);
    r = enqueue_routed(stream, p, shim_ctx_id_device(ctx));
    if (routed) shim_route_end(&saved);
    return r;
}

/* dev: the device of the stream's context (-1: not known), for shim_hostfn_settle. */
static CUresult enqueue_routed(CUstream stream, const struct pending *p, int dev)
{
    CUresult r;
    /* A host function in a capture becomes a host node of the capture's graph (a graph
     * would replay a plain one's notification and wait with their first values); a stream
     * callback cannot be captured, as with the driver. */
    if (p->kind == 1 && shim_capture_active(stream)) {
        CUDA_HOST_NODE_PARAMS hp = {.fn = p->fn, .userData = p->user};
        r = host_node(CHAN_HN_CAPTURE, (uint64_t)(uintptr_t)stream, NULL, NULL, 0, &hp, NULL, 0);
        if (r != CUDA_ERROR_NOT_READY) /* not capturing any more: enqueued below */
            return r;
    } else if (p->kind == 2 && (r = shim_capture_refuse(stream)) != CUDA_SUCCESS) {
        return r;
    }
    struct shim_conn *c = shim_route_conn(); /* where it is sent */
    pthread_mutex_lock(&cb_lock);
    struct cbconn *x = start_thread(c);
    if (!x) {
        pthread_mutex_unlock(&cb_lock);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    uint32_t seq = ++x->last_seq;
    if (seq == 0) seq = ++x->last_seq; /* 0 means "never" in a fresh slot */
    /* A slot is reused only 65536 host functions later; one still pending then would
     * have its wait released early, so refuse rather than risk it. */
    uint32_t prev = atomic_load(&c->ch.callbacks->done[seq % CHAN_CB_SLOTS]);
    if (x->pending[seq % CHAN_CB_SLOTS].kind && prev != seq - CHAN_CB_SLOTS) {
        x->last_seq--;
        pthread_mutex_unlock(&cb_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->pending[seq % CHAN_CB_SLOTS] = *p;
    atomic_store_explicit(&x->dev_of[seq % CHAN_CB_SLOTS],
                          (int8_t)(dev >= 0 && dev < 128 ? dev : -1), memory_order_relaxed);
    /* Sent under the lock: host functions reach the server in seq order. */
    struct chan_host_func m = {.stream = (uint64_t)(uintptr_t)stream, .seq = seq};
    struct shim_req q;
    r = shim_req_begin(&q, CHAN_OP_HOST_FUNC, sizeof(m), 0, 0);
    if (r == CUDA_SUCCESS) {
        memcpy(q.payload, &m, sizeof(m));
        atomic_fetch_add(&outstanding, 1); /* before it can return */
        shim_req_send(&q);
    } else {
        /* Never sent: never to run. Its slot says so, for shim_hostfn_settle (and for the
         * reuse check above, 65536 host functions on). */
        x->pending[seq % CHAN_CB_SLOTS].kind = 0;
        atomic_store(&c->ch.callbacks->done[seq % CHAN_CB_SLOTS], seq);
    }
    pthread_mutex_unlock(&cb_lock);
    return r;
}

/* Calls that wait for every stream of the context (unregistering or freeing host memory,
 * loading code, setting a context limit) first wait here, in the calling thread, for this
 * process's host functions and stream callbacks sent before them: those on the device the
 * call loads code on, or all of them (dev < 0) for a call that waits on every device.
 *
 * Why: such a call waits in the server, outside the driver, until no client's stream is held
 * on something only a client can end, this process's host functions included
 * (server/code/codegate.c); and it waits there in this process's own server worker. A host
 * function that touches managed memory has its page fault served by that worker
 * (interpose/pager.c), queued behind the call: neither would ever end (docs/apis.md). Natively
 * the call waits for the host function too, so waiting for it here first changes no result,
 * and meanwhile the worker is free to serve its touches.
 *
 * Why by device: the server holds a load on device d only for waits on device d, as the
 * driver holds it only for the streams of d's context. A process with a thread per GPU (XLA's
 * pmap) has one thread's collective kernel on GPU 0 waiting for its peer's on GPU 1, and a
 * host function queued behind it on GPU 0; when the thread of GPU 1 then launches a function
 * for the first time there (a load), waiting for GPU 0's host function would wait for the
 * peer kernel it is about to launch: both GPUs stopped for good (tests/gpu_multi/jax_pmap.py
 * on two H200s, about half the runs; tests/progs/thread_peer's devices form). Natively that load
 * waits for neither.
 *
 * Bounded: it stops waiting when the server is gone or has marked this client dead (a host
 * function of a context that died is never run), and the call then answers as it would. A
 * call made inside a host function (CUDA forbids it) does not wait: it would wait for itself.
 * Callers: every call that waits for every stream natively or may load code in the server
 * (module.c's loads, lookups and unloads, memory.c, managed.c's cuMemFree, ctxsync.c, ipc.c,
 * call.c for the calls marked loads-code, and shim_hostfn_settle_first, for a function's first
 * launch or node on a device). Not covered: graph host nodes (a graph's launch may run them any
 * number of times, none counted here) and a synchronous cuMemcpy2DUnaligned on the host
 * function's stream, which may still meet the hang documented in docs/apis.md. */

/* Whether settling for device dev waits for host function seq of x. */
static int settles_for(const struct cbconn *x, uint32_t seq, int dev)
{
    if (dev < 0) return 1;
    int d = atomic_load_explicit(&x->dev_of[seq % CHAN_CB_SLOTS], memory_order_relaxed);
    return d < 0 || d == dev;
}

/* The wait of shim_hostfn_settle for one connection's host functions sent up to now. */
static void settle_conn(const struct cbconn *x, struct shim_conn *c, uint32_t last, int dev)
{
    struct chan_callbacks *cb = c->ch.callbacks;
    /* The oldest one still to return among the last CHAN_CB_SLOTS handed out (every seq
     * handed out is sent, or marked done when it could not be; a slot is reused only once its
     * host function returned: enqueue's check); 0 when none. */
    uint32_t oldest = 0;
    for (uint32_t k = 0; k < CHAN_CB_SLOTS && k < last; k++) {
        uint32_t seq = last - k;
        if (seq &&
            atomic_load_explicit(&cb->done[seq % CHAN_CB_SLOTS], memory_order_acquire) != seq &&
            settles_for(x, seq, dev))
            oldest = seq;
    }
    if (!oldest) return;
    atomic_fetch_add(&settlers, 1);
    uint64_t start = chan_now_ns();
    int said = 0;
    for (uint32_t seq = oldest;
         (int32_t)(last - seq) >= 0 && shim_conn_up() && shim_server_alive(c);) {
        uint32_t seen = atomic_load(&returned); /* before the look: a return after it wakes */
        if (!seq ||
            atomic_load_explicit(&cb->done[seq % CHAN_CB_SLOTS], memory_order_acquire) == seq ||
            !settles_for(x, seq, dev)) {
            seq++;
            continue;
        }
        /* A wait this long is as the driver's would be, or a hang: the work before that host
         * function may wait for something this thread was about to do. Said once per wait. */
        if (!said && chan_now_ns() - start > 10ull * 1000 * 1000 * 1000) {
            said = 1;
            int d = atomic_load_explicit(&x->dev_of[seq % CHAN_CB_SLOTS], memory_order_relaxed);
            shim_log("a call that waits for every stream (loading code, a first launch, a "
                     "free) has waited 10 s for this process's host function %u (device %d), "
                     "queued before it, to return; that runs once the work before it on its "
                     "stream has ended",
                     (unsigned)seq, d);
        }
        /* At most 1 ms asleep: the server's and the connection's life are looked at again. */
        chan_futex_wait(&returned, seen, 1000 * 1000);
    }
    atomic_fetch_sub(&settlers, 1);
}

void shim_hostfn_settle(int dev)
{
    if (!atomic_load(&outstanding) || on_callback_thread) return;
    struct cbconn *xs[SHIM_CONNS];
    struct shim_conn *conns[SHIM_CONNS];
    uint32_t last[SHIM_CONNS];
    int n = 0;
    pthread_mutex_lock(&cb_lock);
    for (int s = 0; s < SHIM_CONNS; s++)
        if (cbs[s].thread_started) {
            xs[n] = &cbs[s];
            conns[n] = cbs[s].conn;
            last[n++] = cbs[s].last_seq;
        }
    pthread_mutex_unlock(&cb_lock);
    for (int i = 0; i < n; i++)
        settle_conn(xs[i], conns[i], last[i], dev);
}

/* Marked used after the wait, so a racing second first use waits as well (it may be the one
 * the server loads for); a device past 63 is never marked and waits every time. */
void shim_hostfn_settle_first(const struct shim_func *f)
{
    int dev = shim_current_device();
    if (shim_func_used_on(f, dev)) return;
    shim_hostfn_settle(dev);
    shim_func_mark_used(f, dev);
}

CUresult SHIM_IMPL(cuLaunchHostFunc)(CUstream hStream, CUhostFn fn, void *userData)
{
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    struct pending p = {.kind = 1, .fn = fn, .user = userData, .stream = hStream};
    return enqueue(hStream, &p);
}

CUresult SHIM_IMPL(cuStreamAddCallback)(CUstream hStream, CUstreamCallback callback, void *userData,
                                        unsigned int flags)
{
    if (!callback || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    struct pending p = {.kind = 2, .cb = callback, .user = userData, .stream = hStream};
    return enqueue(hStream, &p);
}

CUresult SHIM_IMPL(cuGraphAddHostNode)(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!phGraphNode || !nodeParams || !nodeParams->fn || (numDependencies && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t made = 0;
    CUresult r = host_node(CHAN_HN_ADD, (uint64_t)(uintptr_t)hGraph, NULL, dependencies,
                           numDependencies, nodeParams, &made, sizeof(made));
    if (r == CUDA_SUCCESS) *phGraphNode = (CUgraphNode)(uintptr_t)made;
    return r;
}

CUresult SHIM_IMPL(cuGraphHostNodeGetParams)(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    uint64_t got[2];
    CUresult r = host_node(CHAN_HN_GET, 0, hNode, NULL, 0, NULL, got, sizeof(got));
    if (r == CUDA_SUCCESS) {
        nodeParams->fn = (CUhostFn)(uintptr_t)got[0];
        nodeParams->userData = (void *)(uintptr_t)got[1];
    }
    return r;
}

CUresult SHIM_IMPL(cuGraphHostNodeSetParams)(CUgraphNode hNode,
                                             const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!nodeParams || !nodeParams->fn) return CUDA_ERROR_INVALID_VALUE;
    return host_node(CHAN_HN_SET, 0, hNode, NULL, 0, nodeParams, NULL, 0);
}

CUresult SHIM_IMPL(cuGraphExecHostNodeSetParams)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!nodeParams || !nodeParams->fn) return CUDA_ERROR_INVALID_VALUE;
    return host_node(CHAN_HN_EXEC_SET, (uint64_t)(uintptr_t)hGraphExec, hNode, NULL, 0, nodeParams,
                     NULL, 0);
}
