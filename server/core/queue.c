/* Back-pressure on a client's queued work (issue 11, item 3): a flooding client slows
 * itself, not the server.
 *
 * What a client's queued work costs the server process, beyond what the GPU itself holds
 * per operation, is bytes copied out of its requests that must live until the GPU has used
 * them: the data of copies from pageable memory that travel inside a request (the driver
 * keeps its own copy of them: the CPU test driver a snapshot, the real driver staging or
 * push-buffer memory), the parameters of launches, the server's note for each host
 * function. These are charged to the client as they are enqueued, on their stream; a mark
 * (an internal event) recorded on the stream every so many bytes lets them go when the GPU
 * passes it. While a client holds more than MPSSHIM_QUEUE_LIMIT, its worker takes no more
 * of its requests: its ring fills and its own calls wait. Nothing else waits: other
 * clients have their own workers, and this one still answers its waits and watches for its
 * departure.
 *
 * The count of operations in flight is never capped, only bytes the server holds, which the
 * GPU's progress releases. Queued work that waits on a later call of the client itself (a
 * stream waiting on a host function that waits for the application, or on a value a later
 * call writes) makes no progress until that call is taken: when the held bytes have not
 * moved for a while, requests are taken again, up to four times the limit, which stays a
 * hard bound. "Moved" means a mark passed or another host function of the client was
 * reached; "a while" is short (100 ms) when the server sees such a wait (a host function of
 * the client running, stream waits on values, graph host nodes) and long (10 s) otherwise,
 * so that a flood behind a long kernel stays under the limit itself. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/limits/account.h"
#include "server/core/events.h"
#include "server/limits/policy.h"
#include "server/core/queue.h"

#include <stdlib.h>

/* Bytes the server holds for a client's queued work (queue.c), let go as the GPU passes
 * the marks recorded after it. Owned by the worker. */
struct srv_qmark {
    CUevent ev;
    int dev;
    uint64_t bytes;
};
struct srv_queue {
    struct srv_qmark *marks;
    size_t n, cap;
    uint64_t held;        /* charged and not known complete, marked or not */
    uint64_t unmarked;    /* the part of held no mark covers yet (in streams' queued) */
    uint64_t peak;        /* the most held at once */
    uint64_t over_since;  /* monotonic ns since held is over the limit; 0: it is not */
    uint64_t progress_ns; /* when marks last let bytes go */
    uint64_t pauses;      /* times it went over the limit */
    uint32_t ran_seen;    /* the client's cb_ran when last looked at */
    int logged, stall_logged;
};

#define STALL_SEEN_NS (100ull * 1000 * 1000)      /* a wait on the client is visible */
#define STALL_ANY_NS (10ull * 1000 * 1000 * 1000) /* anything else */

/* Bytes between two marks on one stream. */
static uint64_t mark_step(void)
{
    uint64_t s = srv.queue_limit / 16;
    return s < (64u << 10) ? (64u << 10) : s;
}

/* The client's held bytes, and its process's across its connections (account.c: the
 * limit is the process's), change together. */
static void held_add(struct srv_client *c, uint64_t n)
{
    c->queue->held += n;
    srv_account_queued_add(c, (int64_t)n);
}

static void held_sub(struct srv_client *c, uint64_t n)
{
    if (n > c->queue->held) n = c->queue->held;
    c->queue->held -= n;
    srv_account_queued_add(c, -(int64_t)n);
}

/* Lets go of the bytes of mark i (its work is done, failed or gone). */
static void drop(struct srv_client *c, size_t i, int pool)
{
    struct srv_queue *q = c->queue;
    if (pool) srv_event_give(c, q->marks[i].dev, q->marks[i].ev);
    held_sub(c, q->marks[i].bytes);
    q->marks[i] = q->marks[--q->n];
    q->progress_ns = chan_now_ns();
}

/* Lets go of every mark the GPU has passed. */
static void poll_marks(struct srv_client *c)
{
    struct srv_queue *q = c->queue;
    for (size_t i = 0; i < q->n;) {
        CUresult r = DRV(cuEventQuery)(q->marks[i].ev);
        if (r == CUDA_ERROR_NOT_READY) {
            i++;
            continue;
        }
        /* Failed: its context is dying (fault.c forgets those); not reused. */
        drop(c, i, r == CUDA_SUCCESS);
    }
}

/* Covers the bytes charged on s so far by a mark on s. Without one (no event, no memory),
 * they are let go at once: the bound may then undercount, never wait for nothing. */
static void mark(struct srv_client *c, struct srv_stream *s)
{
    struct srv_queue *q = c->queue;
    uint64_t bytes = s->queued;
    /* In a capture an internal event would be recorded into the client's graph: its bytes
     * are marked after the capture (or let go if the stream goes first). */
    if (!bytes || srv_stream_capturing(c, s)) return;
    s->queued = 0;
    q->unmarked -= bytes;
    if (q->n >= 16) poll_marks(c);
    CUevent ev = NULL;
    if (q->n == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 32;
        struct srv_qmark *n = realloc(q->marks, ncap * sizeof(*n));
        if (n) {
            q->marks = n;
            q->cap = ncap;
        }
    }
    if (q->n == q->cap || srv_event_take(c, s->device, &ev) != CUDA_SUCCESS) {
        held_sub(c, bytes);
        return;
    }
    if (DRV(cuEventRecord)(ev, s->real) != CUDA_SUCCESS) {
        srv_event_give(c, s->device, ev);
        held_sub(c, bytes);
        return;
    }
    q->marks[q->n++] = (struct srv_qmark){.ev = ev, .dev = s->device, .bytes = bytes};
}

void srv_queue_charge(struct srv_client *c, struct srv_stream *s, uint64_t bytes)
{
    /* No limit, nothing to count; a capture runs nothing now (its graph is the client's). */
    if (!srv.queue_limit || !bytes || srv_stream_capturing(c, s)) return;
    struct srv_queue *q = c->queue;
    s->queued += bytes;
    q->unmarked += bytes;
    held_add(c, bytes);
    if (q->held > q->peak) q->peak = q->held;
    if (s->queued >= mark_step()) mark(c, s);
}

static void mark_each(struct srv_client *c, struct srv_stream *s, void *arg)
{
    (void)arg;
    mark(c, s);
}

/* Marks every stream of the client with bytes not yet covered. */
static void mark_all(struct srv_client *c)
{
    srv_streams_each(c, 0, 1, mark_each, NULL);
}

/* 1 when the client's queued work may be waiting on the client itself, as far as the
 * server can see: a host function of its running now (the server posted it and the client
 * has not said it finished: a word the client writes, used only to choose how long to
 * wait, never waited on), stream waits on values, graph host nodes. */
static int waits_on_client(struct srv_client *c)
{
    uint32_t k = atomic_load_explicit(&c->cb_ran, memory_order_relaxed);
    if (k &&
        atomic_load_explicit(&c->ch.callbacks->done[k % CHAN_CB_SLOTS], memory_order_relaxed) != k)
        return 1;
    return srv_families_waits_on_client(c) || c->hn != NULL;
}

/* The limit bounds what the client's process holds, across its connections (account.c);
 * each connection over it waits for its own work, which is what it can make progress on. */
int srv_queue_paused(struct srv_client *c)
{
    struct srv_queue *q = c->queue;
    uint64_t limit = srv.queue_limit;
    if (!limit || srv_account_queued(c, q->held) <= limit) {
        q->over_since = 0;
        return 0;
    }
    poll_marks(c);
    if (srv_account_queued(c, q->held) <= limit) {
        q->over_since = 0;
        return 0;
    }
    uint64_t now = chan_now_ns();
    /* A host function reached is progress too (a flood of them runs one by one). */
    uint32_t ran = atomic_load_explicit(&c->cb_ran, memory_order_relaxed);
    if (ran != q->ran_seen) {
        q->ran_seen = ran;
        q->progress_ns = now;
    }
    if (!q->over_since) {
        q->over_since = now;
        q->pauses++;
        if (!q->logged) {
            char b[32];
            srv_format_size(limit, b, sizeof(b));
            srv_log("Client process %d: its queued work holds more than MPSSHIM_QUEUE_LIMIT "
                    "(%s) in the server; its requests now wait for the GPU whenever it does "
                    "(logged once)",
                    (int)c->pid, b);
            q->logged = 1;
        }
    }
    /* Bytes not covered by a mark would never be let go. */
    if (q->unmarked) mark_all(c);
    if (srv_account_queued(c, q->held) > SRV_QUEUE_HARD_FACTOR * limit) return 1;
    uint64_t since = q->progress_ns > q->over_since ? q->progress_ns : q->over_since;
    if (now - since < (waits_on_client(c) ? STALL_SEEN_NS : STALL_ANY_NS)) return 1;
    if (!q->stall_logged) {
        srv_log("Client process %d: its queued work made no progress while it waited; taking "
                "its requests again up to %d times MPSSHIM_QUEUE_LIMIT (that work may wait on a "
                "later call of its own; logged once)",
                (int)c->pid, SRV_QUEUE_HARD_FACTOR);
        q->stall_logged = 1;
    }
    return 0;
}

void srv_queue_stream_gone(struct srv_client *c, struct srv_stream *s, int dead)
{
    if (!s->queued) return;
    if (!dead && !srv_stream_capturing(c, s)) {
        mark(c, s); /* recorded before the stream goes: its work still completes */
        return;
    }
    c->queue->unmarked -= s->queued;
    held_sub(c, s->queued);
    s->queued = 0;
}

void srv_queue_forget_device(struct srv_client *c, int dev)
{
    for (size_t i = 0; i < c->queue->n;)
        if (c->queue->marks[i].dev == dev)
            drop(c, i, 0); /* an event of the dead context: only forgotten */
        else
            i++;
}

void srv_queue_release(struct srv_client *c)
{
    struct srv_queue *q = c->queue;
    for (size_t i = 0; i < q->n; i++)
        srv_event_give(c, q->marks[i].dev, q->marks[i].ev);
    free(q->marks);
    if (q->pauses)
        srv_log("Client process %d: its requests waited for its queued work %llu time%s "
                "(at most %llu bytes held)",
                (int)c->pid, (unsigned long long)q->pauses, q->pauses == 1 ? "" : "s",
                (unsigned long long)q->peak);
    held_sub(c, q->held);
    *q = (struct srv_queue){0};
}

SRV_CLIENT_STATE(queue, queue)

const struct srv_family srv_family_queue = {.name = "queue",
                                            SRV_CLIENT_STATE_HOOKS(queue),
                                            .client_fini = srv_queue_release,
                                            .stream_gone = srv_queue_stream_gone,
                                            .ctx_died = srv_queue_forget_device};
