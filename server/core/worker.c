/* One worker per client: takes its records from the ring in order and replays them, polls
 * the replies that wait for the GPU in between, and sleeps when there is nothing to do. */
#include "server/core/server.h"
#include "server/core/segment.h"
#include "server/core/devctx.h"
#include "server/core/streamrec.h"
#include "server/core/waits.h"
#include "server/core/clients.h"
#include "server/core/reply.h"
#include "server/code/seqgraph.h"
#include "server/limits/account.h"
#include "server/memory/devmem.h"
#include "server/core/fault.h"
#include "server/core/generic.h"
#include "server/core/payload.h"
#include "server/core/queue.h"
#include "server/core/spin.h"
#include "channel/prof.h"
#include "channel/stamp.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a worker polls its client's waits on the GPU while the server is crowded, in us:
 * each poll is a wake-up of this worker, a CPU taken from a client. */
#define CROWDED_POLL_US 200u

/* ---------------------------------------------------------------- small operations */

void srv_op_blob(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    (void)r;
    /* Images are bounded so that a client cannot make the server allocate without end. */
    if (c->blob_len + len > (2ull << 30)) {
        srv_defer(c, CUDA_ERROR_OUT_OF_MEMORY, "image upload");
        return;
    }
    if (c->blob_len + len > c->blob_cap) {
        size_t ncap = c->blob_cap ? c->blob_cap : 1 << 20;
        while (ncap < c->blob_len + len)
            ncap *= 2;
        uint8_t *n = realloc(c->blob, ncap);
        if (!n) {
            srv_defer(c, CUDA_ERROR_OUT_OF_MEMORY, "image upload");
            return;
        }
        c->blob = n;
        c->blob_cap = ncap;
    }
    if (len) /* an empty one has nothing to add (and c->blob may not exist yet) */
        memcpy(c->blob + c->blob_len, p, len);
    c->blob_len += len;
}

void srv_op_error_string(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    int32_t code; /* the payload is one (its %op row) */
    const char *s = NULL;
    uint32_t out = 0;
    (void)len;
    memcpy(&code, p, sizeof(code));
    CUresult res = DRV(cuGetErrorString)((CUresult)code, &s);
    if (res == CUDA_SUCCESS && s) {
        out = (uint32_t)strnlen(s, CHAN_LANE_DATA - 1);
        memcpy(srv_lane_data(c, r->lane), s, out);
    }
    srv_reply(c, r->lane, res, out);
}

/* CHAN_OP_HOLDS: how many records the client holds, once every record it sent before this
 * one was served (the ring is served in order): none, and it may move to another server with
 * nothing of its own left here (interpose/conn.c, MPSSHIM_SERVER_PER_GPU). */
void srv_op_holds(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    (void)p;
    (void)len;
    uint64_t n = 0;
    for (int t = 0; t < SHIM_NHTYPES; t++)
        n += c->nobjs[t];
    memcpy(srv_lane_data(c, r->lane), &n, sizeof(n));
    srv_reply(c, r->lane, CUDA_SUCCESS, sizeof(n));
}

/* ---------------------------------------------------------------- dispatch */

/* One row of the dispatch table, generated from an %op row of cuda_symbols.txt. */
struct srv_op {
    srv_handler *fn;
    uint32_t size; /* the payload's fixed part: at least this many bytes (0: any payload) */
    uint32_t flags;
    CUresult bad; /* the answer to a payload of the wrong size (unless SHORT_PROTOCOL) */
};
#define SRV_OP_EXACT 0x1u          /* the payload is exactly `size` bytes */
#define SRV_OP_AFTER_FAULT 0x2u    /* runs in a context a fault killed too */
#define SRV_OP_TAKES_BLOB 0x4u     /* consumes the uploaded image (CHAN_OP_BLOB records) */
#define SRV_OP_SHORT_PROTOCOL 0x8u /* a payload of the wrong size is a protocol error */

static const struct srv_op ops[CHAN_OP_END - CHAN_OP_BASE] = {
#include "srv_ops.def"
};

/* The row of a protocol operation; NULL for a call id, the filler or an unknown op. */
static const struct srv_op *op_row(uint32_t op)
{
    if (op <= CHAN_OP_BASE || op >= CHAN_OP_END || !ops[op - CHAN_OP_BASE].fn) return NULL;
    return &ops[op - CHAN_OP_BASE];
}

/* Runs an operation's handler once its payload has the size its row says and passes what
 * its %payload line says (payload.c): 0, or -1 when the client broke the protocol. A
 * payload refused is answered as the row says, on its lane, or at the client's next
 * synchronisation where it asked no reply (as the handlers answer their own errors). */
static int run_op(struct srv_client *c, const struct srv_op *o, struct chan_rec *r, uint8_t *p,
                  uint32_t len)
{
    if (len < o->size || ((o->flags & SRV_OP_EXACT) && len != o->size) ||
        !srv_payload_ok(r->op, p, len)) {
        if (o->flags & SRV_OP_SHORT_PROTOCOL) return -1;
        if (o->flags & SRV_OP_TAKES_BLOB) c->blob_len = 0; /* the image goes with it */
        if (r->lane < CHAN_NLANES)
            srv_reply(c, r->lane, o->bad, 0);
        else
            srv_defer(c, o->bad, srv_proto_op_name(r->op));
        return 0;
    }
    srv_busy(c, r->op);
    o->fn(c, r, p, len);
    srv_busy(c, 0);
    return 0;
}

/* Replays one record. 0, or -1 when the client broke the protocol. */
static int dispatch(struct srv_client *c, struct chan_rec *r)
{
    uint8_t *p = (uint8_t *)(r + 1);
    uint32_t len = r->size - (uint32_t)sizeof(*r);
    if ((r->flags & CHAN_RF_REPLY) && r->lane >= CHAN_NLANES) return -1;
    if (!(r->flags & CHAN_RF_REPLY)) r->lane = 0xffff; /* handlers reply only to real lanes */
    /* The client's context for this call selects the device context. Unknown ids leave no
     * context: calls that need one fail with CUDA_ERROR_INVALID_CONTEXT. */
    srv_fault_sync(c);
    c->cur = r->ctx ? srv_ctx_get(c, r->ctx) : NULL;
    /* A context a fault killed answers every call with the fault, sticky, as the driver
     * does (an asynchronous call's caller sees it at its next synchronisation); one made
     * since on a faulted device answers the fault too (srv_fault_gate). */
    CUresult dead = !c->cur         ? CUDA_SUCCESS
                    : c->cur->fault ? c->cur->fault
                                    : srv_fault_gate(c, c->cur->device);
    const struct srv_op *o = op_row(r->op);
    if (dead != CUDA_SUCCESS && !(o && (o->flags & SRV_OP_AFTER_FAULT))) {
        if (o && (o->flags & SRV_OP_TAKES_BLOB))
            c->blob_len = 0; /* the image uploaded for it goes with it */
        srv_reply(c, r->lane, dead, 0);
        return 0;
    }
    srv_devctx_serving((int)c->pid, r->op);
    if (c->cur) srv_use_device(c->cur->device);
    srv_segment_retry(c);
    atomic_fetch_add_explicit(&c->stats.calls, 1, memory_order_relaxed);
    if (!c->first_thread)
        c->first_thread = r->thread;
    else if (r->thread != c->first_thread)
        c->many_threads = 1;
    /* Any other record ends a launch sequence, held launches first (seqgraph.c). */
    if (c->seqs && r->op != CHAN_OP_LAUNCH) srv_seq_boundary(c, r->op);
    if (r->op < SHIM_NCALLS) {
        srv_busy(c, r->op);
        srv_generic(c, r, p, len);
        srv_busy(c, 0);
        return 0;
    }
    return o ? run_op(c, o, r, p, len) : -1;
}

/* A record handled: what its checks reserved of the process's memory limit is counted by
 * now, or was not taken (account.c). */
static int dispatch_settled(struct srv_client *c, struct chan_rec *r)
{
    int rc = dispatch(c, r);
    srv_account_settle(c);
    return rc;
}

void *srv_worker_main(void *arg)
{
    struct srv_client *c = arg;
    c->rec = malloc(CHAN_REC_MAX);
    c->scratch = malloc(CHAN_LANE_DATA);
    c->out = malloc(CHAN_LANE_DATA);
    if (!c->rec || !c->scratch || !c->out) return NULL;
    if (CHAN_PROFILING && (c->prof = calloc(1, sizeof(*c->prof)))) {
        c->prof->op = calloc(2 * SRV_PROF_SLOTS, sizeof(uint64_t));
        c->prof->since_ns = chan_now_ns();
    }
    uint64_t idle_since = 0, alive_checked = 0, waits_looked = 0;
    unsigned backoff_us = 0;
    while (!atomic_load(&c->dead)) {
        int got = 0, paused = 0;
        srv_fault_sync(c); /* an idle worker too lets go of a dead context promptly */
        /* A bounded batch, so that pending waits are polled even under a flood. */
        for (int i = 0; i < 64 && !atomic_load_explicit(&c->dead, memory_order_relaxed); i++) {
            /* Over its bound on queued work (queue.c): its requests stay in its ring, which
             * fills, and its own calls wait; this worker goes on with its waits. */
            if ((paused = srv_queue_paused(c))) break;
            enum chan_next n = chan_ring_next(&c->ch, c->rec);
            if (n == CHAN_NEXT_NONE) break;
            uint64_t t0 = CHAN_PROFILING || CHAN_STAMPING ? chan_now_ns() : 0;
            uint64_t c0 = CHAN_PROFILING && c->prof ? chan_thread_cpu_ns() : 0;
            const struct chan_rec *rec = (const struct chan_rec *)c->rec;
            /* The record's position, as its client noted it (stamp.h): read before the
             * handler, which may change the record. */
            uint64_t at =
                CHAN_STAMPING && n == CHAN_NEXT_REC ? c->ch.pos - CHAN_REC_SPAN(rec->size) : 0;
            uint16_t op = rec->op;
            if (CHAN_STAMPING && n == CHAN_NEXT_REC)
                chan_stamp(CHAN_STAMP_TAKEN, (uint32_t)c->pid, op, at, t0);
            int bad = n == CHAN_NEXT_BAD || dispatch_settled(c, (struct chan_rec *)c->rec) != 0;
            if (CHAN_STAMPING && n == CHAN_NEXT_REC)
                chan_stamp(CHAN_STAMP_REPLAYED, (uint32_t)c->pid, op, at, chan_now_ns());
            if (CHAN_PROFILING && c->prof) {
                uint64_t ns = chan_now_ns() - t0;
                c->prof->records++;
                c->prof->replay_ns += ns;
                c->prof->replay_cpu_ns += chan_thread_cpu_ns() - c0;
                if (c->prof->op && !bad) {
                    int k = srv_prof_slot(((struct chan_rec *)c->rec)->op);
                    c->prof->op[2 * k]++;
                    c->prof->op[2 * k + 1] += ns;
                }
            }
            if (bad) {
                srv_log("Client process %d broke the protocol; disconnecting it", (int)c->pid);
                atomic_store(&c->dead, 1);
                break;
            }
            got = 1;
        }
        /* Launches held for a sequence wait a few microseconds for the next record, then go
         * one by one (seqgraph.c): look again at once meanwhile, or sleep on the ring till the
         * next request or the hold's end where the setting asks. */
        uint64_t hold_nap = 0;
        if (!got && c->seqs && srv_seq_idle(c, chan_now_ns(), &hold_nap)) {
            /* The nap lasts up to the coalescing bound (1 ms) while the client's doorbells
             * are coalesced. Its other threads' waits the worker polls (an event another
             * thread synchronises on) would wait that long too: they are polled first, and
             * the nap cut to the crowded poll period (200 us) while one remains. Those whose
             * replies the GPU posts (2) need no polls; shorter naps and the spin between
             * launches keep their own pace. A wait never depends on the held launches: any
             * record after them but a launch lets them go first. */
            if (hold_nap > CROWDED_POLL_US * 1000ull && c->waits && (srv_waits_poll(c, 1) & 3) == 1)
                hold_nap = CROWDED_POLL_US * 1000ull;
            if (hold_nap) chan_ring_sleep(&c->ch, hold_nap);
            continue;
        }
        /* A full look (the driver asked about waits whose replies need no ask: waits.h) every
         * SRV_WAITS_LAZY_US at most; words (SRV_WAITS_WORDS) are loads, read at every turn. */
        uint64_t now = chan_now_ns();
        int waiting = 0;
        if (c->waits) {
            int full = now - waits_looked >= SRV_WAITS_LAZY_US * 1000ull;
            waiting = srv_waits_poll(c, full);
            if (full) waits_looked = now;
        }
        int words = waiting & SRV_WAITS_WORDS;
        waiting &= 3;
        if (srv_later_pending(c)) /* polled as waits are: frees and unmaps soon after their work */
            waiting |= srv_later_reap(c, 0) != 0;
        if (got) {
            srv_spin_worked(c, now);
            idle_since = 0;
            backoff_us = 0;
            continue;
        }
        uint64_t busy_left = srv_spin_idle(c, now);
        if (paused) {
            /* Records wait in the ring (so the doorbell would not let it sleep): poll the
             * GPU's progress, backing off to 200 us, and see now and then that the client is
             * still there. */
            backoff_us = backoff_us ? (backoff_us * 2 > 200 ? 200 : backoff_us * 2) : 5;
            struct timespec ts = {0, (long)backoff_us * 1000};
            nanosleep(&ts, NULL);
            if (now - alive_checked > 50ull * 1000 * 1000) {
                alive_checked = now;
                srv_client_alive(c);
            }
            continue;
        }
        if (!idle_since) idle_since = now;
        /* A word wait's store is to land (waits.c): looked for at every turn for its first
         * 20 ms, as the driver's synchronisation spins while the server is not crowded (word
         * waits are made only then; once crowded, or later, polled as any other wait). */
        if (words && !srv_spin_crowded()) continue;
        /* A chatty client's next request is usually microseconds away; but while the
         * server is crowded (spin.c) the CPU this would spin on is another thread's. */
        if (now - idle_since < srv_spin_worker_ns()) continue;
        if (waiting) {
            /* The GPU is busy for this client: poll its events less and less often, down to
             * every 50 us while CPUs are free (a finished wait is seen 25 us late on average)
             * and every 200 us while the server is crowded (the polls' CPU is another
             * thread's). Its work may wait on the client itself (host functions and nodes,
             * hostfn.c): see now and then whether it is still there, else the wait would
             * never end. */
            /* Replies the GPU posts to threads spinning for them (waits.c) need the worker
             * only should a thread tire of spinning (MPSSHIM_GPU_WAIT_SPIN_US, 20 ms by
             * default) and sleep, which it tells the worker by ringing (chan_lane_wait):
             * till then polled every 2 ms at most, to take back their events. */
            unsigned cap = waiting == 2 ? 2000 : srv_spin_crowded() ? CROWDED_POLL_US : 50;
            backoff_us = backoff_us ? (backoff_us * 2 > cap ? cap : backoff_us * 2) : 5;
            /* While crowded, not even the first polls: each is a wake-up of this worker, a
             * CPU taken from a client, and the thread rings should it tire. */
            if (waiting == 2 && srv_spin_crowded()) backoff_us = cap;
            chan_ring_sleep(&c->ch, (uint64_t)backoff_us * 1000);
            if (now - alive_checked > 50ull * 1000 * 1000) {
                alive_checked = now;
                srv_client_alive(c);
            }
            continue;
        }
        /* Wakes when c's busy spell ends too, so that it stops counting on time. */
        uint64_t nap = 50ull * 1000 * 1000;
        chan_ring_sleep(&c->ch, busy_left < nap ? busy_left + 1 : nap);
        if (!chan_ring_pending(&c->ch) && busy_left >= nap) srv_client_alive(c);
    }
    srv_spin_gone(c);
    chan_stamp_flush(); /* a fresh start would lose them (stamp.h) */
    if (CHAN_PROFILING && c->prof) c->prof->cpu_ns = chan_thread_cpu_ns();
    return NULL;
}
