/* Host functions of clients: run by the client (interpose/hostfn.c), ordered on its stream
 * here with a host function of the server's that only posts a notification, and a stream
 * wait on the client's "done" word (see channel/proto.h, struct chan_callbacks).
 * Graph host nodes are hostnode.c's; they post their runs through the same ring
 * (srv_hostfn_post). */
#include "server/core/server.h"
#include "server/core/segment.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/reply.h"
#include "server/code/codegate.h"
#include "server/graphs/graphrefs.h"
#include "server/graphs/hostfn.h"
#include "server/core/queue.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- notifications */

void srv_hostfn_post(struct srv_client *c, uint64_t what)
{
    struct chan_callbacks *cb = c->ch.callbacks;
    uint32_t k = atomic_fetch_add(&c->cb_fired, 1);
    cb->fired[k % CHAN_CB_SLOTS] = what;
    /* In order, should two driver threads ever run host functions at once: the count
     * waited on is the server's own, never the client's copy. */
    while (atomic_load_explicit(&c->cb_published, memory_order_acquire) != k)
        chan_cpu_relax();
    atomic_store_explicit(&cb->fired_tail, k + 1, memory_order_release);
    atomic_store_explicit(&c->cb_published, k + 1, memory_order_release);
    chan_wake(&cb->fired_tail, &cb->fired_waiters);
}

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
    atomic_store_explicit(&f->c->cb_ran, f->seq, memory_order_relaxed);
    srv_hostfn_post(f->c, f->seq);
    free(f);
}

void srv_op_host_func(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_host_func m; /* the payload is one (its %op row) */
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    (void)len;
    srv_segment_need(c); /* its done words are in it, device-mapped */
    if (!c->shm_dptr) goto out;
    memcpy(&m, p, sizeof(m));
    /* Numbered 1, 2, 3... (0 skipped), in the order sent, as the shim numbers them, whether
     * or not the host function is then taken: the release ends every wait of a departed
     * client by storing the last number enqueued into every done word, which satisfies a
     * wait for that number or any before it, never one for a number out of that order (a
     * client that sent 2^30 then 1 left a wait no release could end, and with it every code
     * load on the device waiting at the gate: found by tests/fuzz's fuzz_server). */
    uint32_t want = c->hostfn_seq + 1 ? c->hostfn_seq + 1 : 1;
    if (m.seq != want) {
        if (!c->hostfn_said++)
            srv_log("Client process %d: a host function numbered %u where %u was due refused "
                    "(said once)",
                    (int)c->pid, (unsigned)m.seq, (unsigned)want);
        goto out;
    }
    c->hostfn_seq = m.seq;
    struct srv_stream *s = srv_stream_resolve(c, m.stream, r->flags & CHAN_RF_PTDS, r->thread);
    res = CUDA_ERROR_INVALID_HANDLE;
    if (!s) goto out;
    /* A graph would replay the notification and the wait with their first values: the
     * client sends host functions of a capture as host nodes (CHAN_HN_CAPTURE). */
    res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (srv_stream_capturing(c, s)) goto out;
    struct fire *f = malloc(sizeof(*f));
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!f) goto out;
    f->c = c;
    f->seq = m.seq;
    CUstream st = srv_stream_prepare(c, s);
    /* The wait on the client's done word below ends only when the client says so: gated
     * like the client's own waits (codegate.c), so that a host function that does not
     * return holds up no other client's code load in the driver. */
    srv_codegate_wait_begin(s->device);
    res = DRV(cuLaunchHostFunc)(st, fire, f);
    if (res != CUDA_SUCCESS) {
        srv_codegate_wait_end(c, s->device, st, 0, SRV_WAIT_HOSTFN);
        free(f);
        goto out;
    }
    /* The device address of the slot's done word (the segment is device-mapped). */
    CUdeviceptr done =
        c->shm_dptr +
        (CUdeviceptr)((uint8_t *)&c->ch.callbacks->done[m.seq % CHAN_CB_SLOTS] - (uint8_t *)c->shm);
    res = DRV(cuStreamWaitValue32_v2)(st, done, m.seq, CU_STREAM_WAIT_VALUE_GEQ);
    srv_codegate_wait_end(c, s->device, st, 1, SRV_WAIT_HOSTFN); /* enqueued either way */
    atomic_store(&c->cb_last, m.seq);
    srv_queue_charge(c, s, sizeof(*f)); /* freed when it fires (queue.c) */
out:
    srv_defer(c, res, "host function");
}

/* ---------------------------------------------------------------- departure */

void srv_hostfn_release(struct srv_client *c)
{
    if (!c->shm) return;
    /* The client is gone and will run nothing more: let every stream waiting on one of
     * its host functions go on (the comparison is cyclic: all seqs up to cb_last pass),
     * and every graph waiting on one of its host nodes (fire_node sees hn_gone first).
     * Only stores into its segment, no driver call: the main loop does this as soon as it
     * sees the client gone, while the client's own thread may be inside a driver call that
     * waits for the driver's lock, held by another client's call that waits for the whole
     * device, which waits for these very streams (a cuMemHostUnregister waited so for a killed
     * client's graph, and every client stopped: bench/NOTES.md, "Driver calls held by a waiting
     * stream"). */
    atomic_store(&c->hn_gone, 1);
    for (uint32_t i = 0; i < CHAN_HN_SLOTS; i++)
        atomic_store(&c->ch.callbacks->hn_flag[i], 1);
    uint32_t last = atomic_load(&c->cb_last);
    if (!last) return;
    for (uint32_t i = 0; i < CHAN_CB_SLOTS; i++)
        atomic_store(&c->ch.callbacks->done[i], last);
}

/* The main loop found the client gone: its host functions' waits are let go at once
 * (said once, unless its release does it). */
static void hostfn_lost(struct srv_client *c)
{
    srv_hostfn_release(c);
    if (!c->watch_gone && (atomic_load(&c->cb_last) || c->hn) &&
        atomic_load_explicit(&c->busy_op, memory_order_relaxed) != SRV_BUSY_RELEASE)
        srv_log("Client process %d: its streams' waits on its host functions were "
                "let go before its release (it is gone, or being stopped)",
                (int)c->pid);
}

/* Its host node slots: no graph of its runs any more, unless its work was left running,
 * which may still fire them. */
static void hostfn_fini(struct srv_client *c)
{
    if (!c->left_running) free(c->hn);
}

const struct srv_family srv_family_hostfn = {.name = "hostfn",
                                             .client_leave = srv_hostfn_release,
                                             .client_fini = hostfn_fini,
                                             .client_lost = hostfn_lost};
