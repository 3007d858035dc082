/* Pinned blocks that the data of inline host-to-device copies waits in until the GPU runs
 * them.
 *
 * A copy from pageable memory small enough to travel inside a request (CHAN_INLINE_MAX)
 * arrives in the server's private copy of the record, which the next record overwrites.
 * Given to the driver as it is, that is a copy from pageable memory: the driver copies it
 * into staging memory of its own and returns, but that staging is one pool for the whole
 * process, so for every client at once, and once it is full the driver blocks the caller
 * until the GPU drains it. A client whose stream waits on a later call of its own (a
 * stream wait value, a host function) with copies queued behind it then fills the pool
 * and blocks its worker inside the driver (natively it only deadlocks itself), and every
 * other client's pageable copy blocks behind it: the whole server stuck (bench/NOTES.md,
 * "Driver staging pool").
 *
 * So the data is copied into memory the server pinned, and the driver is given a copy from
 * pinned memory, which it queues without staging and without ever blocking the caller.
 * Blocks are HB_SIZE bytes of anonymous memory registered with the driver (portable: any
 * context's copy may read it). A stream fills one open block at a time; when the next copy
 * does not fit, the block is closed with an event recorded on the stream after its last
 * copy, and is free again once that event has completed. The event is taken when the block
 * opens, so a block can always be closed. Free blocks are kept for reuse (HB_KEEP at
 * most); past HB_CAP pinned bytes per client, or when pinning fails, the copy takes the
 * driver's pageable path as before (logged once): the bound on queued work (queue.c)
 * keeps a client well under it unless it waits on itself.
 *
 * Registered in the quiet context (server/memory/quietctx.c), where unregistering one waits
 * for nothing. While that context is being made (it is made when first needed, a client's
 * first small copy among the reasons), a block is registered in the shared context instead,
 * and never unregistered there: that would wait for every client's work and hold their
 * launches meanwhile, the hold the quiet context is for. A client that lets go of such a block
 * leaves it in `kept`, and the next client that needs a block takes it from there; the image's
 * end lets go of them. So a client's first small copies never wait for the quiet context's
 * making (0.6-0.7 s on an H200), and the blocks kept so are the few made in that window.
 *
 * Owned by the client's worker, like its streams; `kept` is every worker's, under its lock. */
#include "server/core/server.h"
#include "server/memory/quietctx.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/memory/hostblocks.h"
#include "server/core/window.h"
#include "server/limits/policy.h"
#include "server/core/queue.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HB_SIZE (256u << 10)
#define HB_KEEP 8
#define HB_ALIGN 64 /* each copy's data starts on its own cache line */

_Static_assert(CHAN_INLINE_MAX <= HB_SIZE, "an inline copy fits in a block");

struct srv_hblock {
    struct srv_hblock *next;
    uint8_t *p;
    size_t used;
    CUevent ev; /* taken at open, on ev_dev; recorded at close */
    int ev_dev;
    int reg_dev; /* the device whose context registered it; -1: the quiet context's, where it
                  * is unregistered whatever became of a shared context (after the process's
                  * fault that answers the fault at once: quietctx.c) */
    int early;   /* registered in reg_dev's context while the quiet one was being made: kept
                  * registered until the image ends (`kept`) */
};

/* Early blocks no client holds, for the next client's (the file's comment says why). */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct srv_hblock *kept; /* under kept_lock */

/* A client's blocks (c->hblocks, made at its first inline copy). Owned by the worker. */
struct srv_hblocks {
    struct srv_hblock *busy; /* closed, until their events complete */
    struct srv_hblock *free;
    unsigned nfree;
    uint64_t bytes; /* pinned, all blocks */
    int logged;
};

/* Pinned bytes a client may hold: its hard bound on queued work and some slack, or, with
 * no bound, 256 MiB. */
static uint64_t cap(void)
{
    return srv.queue_limit ? SRV_QUEUE_HARD_FACTOR * srv.queue_limit + 4 * (uint64_t)HB_SIZE
                           : 256ull << 20;
}

/* Unpins and unmaps b (its registration's context still alive when `registered`); an early
 * block whose context is alive goes to `kept` instead. */
static void destroy(struct srv_client *c, struct srv_hblock *b, int registered)
{
    c->hblocks->bytes -= HB_SIZE;
    if (registered && b->early) {
        pthread_mutex_lock(&kept_lock);
        b->next = kept;
        kept = b;
        pthread_mutex_unlock(&kept_lock);
        return;
    }
    if (registered) srv_host_unregister(c, b->p);
    srv_window_give((uint64_t)(uintptr_t)b->p, HB_SIZE);
    free(b);
}

/* An early block from `kept` whose context is alive, or NULL. */
static struct srv_hblock *take_kept(struct srv_client *c)
{
    struct srv_hblock *b = NULL, **pp;
    pthread_mutex_lock(&kept_lock);
    for (pp = &kept; *pp; pp = &(*pp)->next)
        if (!srv_fault_dead(c, (*pp)->reg_dev)) {
            b = *pp;
            *pp = b->next;
            break;
        }
    pthread_mutex_unlock(&kept_lock);
    return b;
}

/* A block back in the free list, or destroyed when enough are kept. */
static void to_free(struct srv_client *c, struct srv_hblock *b)
{
    struct srv_hblocks *h = c->hblocks;
    b->used = 0;
    b->ev = NULL;
    if (h->nfree >= HB_KEEP) {
        destroy(c, b, 1);
        return;
    }
    b->next = h->free;
    h->free = b;
    h->nfree++;
}

/* Every closed block whose copies have run is free again. */
static void reap(struct srv_client *c)
{
    struct srv_hblock **pp = &c->hblocks->busy;
    while (*pp) {
        struct srv_hblock *b = *pp;
        if (!b->ev) { /* waits for the client's release (close_block) */
            pp = &b->next;
            continue;
        }
        CUresult r = DRV(cuEventQuery)(b->ev);
        if (r == CUDA_ERROR_NOT_READY) {
            pp = &b->next;
            continue;
        }
        *pp = b->next;
        /* Failed: its context is dying (fault.c forgets those first); not reused. */
        if (r == CUDA_SUCCESS) srv_event_give(c, b->ev_dev, b->ev);
        to_free(c, b);
    }
}

/* Closes s's open block: busy until the GPU passes the event recorded now. */
static void close_block(struct srv_client *c, struct srv_stream *s)
{
    struct srv_hblock *b = s->hb;
    s->hb = NULL;
    if (!b) return;
    if (!b->used) {
        srv_event_give(c, b->ev_dev, b->ev);
        to_free(c, b);
        return;
    }
    /* On a stream in a capture (one that joined it: a capture's own begin closes its
     * block first) an event would be recorded into the client's graph, not after the copies;
     * a record can also fail (a context that is going). Then the block is never reused: it
     * waits for the client's release, which comes only once its work has drained
     * (registry.c). Never a wait here: the stream may wait on the client. */
    if (srv_stream_capturing(c, s) || DRV(cuEventRecord)(b->ev, s->real) != CUDA_SUCCESS) {
        srv_event_give(c, b->ev_dev, b->ev);
        b->ev = NULL;
    }
    b->next = c->hblocks->busy;
    c->hblocks->busy = b;
}

/* A block for s: free, or new. NULL when none can be had (logged once). */
static struct srv_hblock *open_block(struct srv_client *c, struct srv_stream *s)
{
    struct srv_hblocks *h = c->hblocks;
    CUevent ev;
    if (srv_event_take(c, s->device, &ev) != CUDA_SUCCESS) return NULL;
    struct srv_hblock *b = h->free;
    int where;
    if (b) {
        h->free = b->next;
        h->nfree--;
    } else if (h->bytes + HB_SIZE <= cap() && (b = take_kept(c))) {
        h->bytes += HB_SIZE;
    } else if (h->bytes + HB_SIZE <= cap() && (b = calloc(1, sizeof(*b)))) {
        b->p = srv_window_map(HB_SIZE, -1); /* window.c says why there */
        /* Not copied on write into a child (the server spawns its successor): the GPU
         * reads the pages it was given, the server must write those same pages. */
        if (b->p) (void)madvise(b->p, HB_SIZE, MADV_DONTFORK);
        if (!b->p || srv_host_register_block(c, b->p, HB_SIZE, CU_MEMHOSTREGISTER_PORTABLE,
                                             &where) != CUDA_SUCCESS) {
            if (b->p) srv_window_give((uint64_t)(uintptr_t)b->p, HB_SIZE);
            free(b);
            b = NULL;
        } else {
            b->reg_dev = where == SRV_HOSTREG_QUIET ? -1 : s->device;
            b->early = where == SRV_HOSTREG_EARLY;
            h->bytes += HB_SIZE;
        }
    }
    if (!b) {
        srv_event_give(c, s->device, ev);
        if (!h->logged) {
            char sz[32];
            srv_format_size(h->bytes, sz, sizeof(sz));
            srv_log("Client process %d: no more pinned memory for its small copies (%s held); "
                    "they take the driver's pageable path, which can block behind its waits "
                    "(logged once)",
                    (int)c->pid, sz);
            h->logged = 1;
        }
        return NULL;
    }
    b->next = NULL;
    b->used = 0;
    b->ev = ev;
    b->ev_dev = s->device;
    return b;
}

void *srv_hblock_take(struct srv_client *c, struct srv_stream *s, size_t n)
{
    size_t need = (n + HB_ALIGN - 1) & ~(size_t)(HB_ALIGN - 1);
    if (n == 0 || n > HB_SIZE) return NULL;
    if (!c->hblocks && !(c->hblocks = calloc(1, sizeof(*c->hblocks)))) return NULL;
    if (s->hb && HB_SIZE - s->hb->used < need) close_block(c, s);
    if (!s->hb) {
        reap(c);
        if (!(s->hb = open_block(c, s))) return NULL;
    }
    void *p = s->hb->p + s->hb->used;
    s->hb->used += need;
    return p;
}

void srv_hblock_close(struct srv_client *c, struct srv_stream *s)
{
    close_block(c, s);
}

void srv_hblock_stream_gone(struct srv_client *c, struct srv_stream *s, int dead)
{
    struct srv_hblock *b = s->hb;
    if (!b) return;
    if (!dead) {
        close_block(c, s); /* recorded before the stream goes: its work still completes */
        return;
    }
    /* Died with its context: no copy of it runs any more; its event is only forgotten. */
    s->hb = NULL;
    if (b->reg_dev == s->device) {
        srv_window_give((uint64_t)(uintptr_t)b->p,
                        HB_SIZE); /* its registration went with the context */
        c->hblocks->bytes -= HB_SIZE;
        free(b);
    } else {
        to_free(c, b);
    }
}

void srv_hblock_forget_device(struct srv_client *c, int dev)
{
    struct srv_hblocks *h = c->hblocks;
    struct srv_hblock *keep = NULL, *b, *n;
    if (!h) return; /* it made no inline copy */
    /* Busy on dev: their copies will never run, their events are dead. */
    for (b = h->busy; b; b = n) {
        n = b->next;
        if (b->ev_dev != dev) {
            b->next = keep;
            keep = b;
        } else if (b->reg_dev == dev) {
            b->next = NULL;
            h->bytes -= HB_SIZE;
            srv_window_give((uint64_t)(uintptr_t)b->p, HB_SIZE);
            free(b);
        } else {
            to_free(c, b);
        }
    }
    h->busy = keep;
    /* Free ones registered there: their registration went with the context. */
    struct srv_hblock **pp = &h->free;
    while ((b = *pp)) {
        if (b->reg_dev != dev) {
            pp = &b->next;
            continue;
        }
        *pp = b->next;
        h->nfree--;
        h->bytes -= HB_SIZE;
        srv_window_give((uint64_t)(uintptr_t)b->p, HB_SIZE);
        free(b);
    }
}

void srv_hblock_release(struct srv_client *c)
{
    struct srv_hblocks *h = c->hblocks;
    if (!h) return; /* it made no inline copy */
    if (c->left_running) {
        /* Its work may still read them: left pinned and mapped, as its other objects are
         * left allocated (registry.c); the driver lets go of them when the server stops. */
        if (h->bytes)
            srv_log("Client process %d: %llu bytes of pinned copy blocks left under its "
                    "running work",
                    (int)c->pid, (unsigned long long)h->bytes);
        c->hblocks = NULL;
        free(h);
        return;
    }
    /* Its work has drained (registry.c): every block is free. The streams' open blocks
     * went with the streams (srv_hblock_stream_gone). */
    for (struct srv_hblock *b = h->busy, *n; b; b = n) {
        n = b->next;
        if (b->ev) srv_event_give(c, b->ev_dev, b->ev);
        destroy(c, b, !srv_fault_dead(c, b->reg_dev));
    }
    for (struct srv_hblock *b = h->free, *n; b; b = n) {
        n = b->next;
        destroy(c, b, !srv_fault_dead(c, b->reg_dev));
    }
    c->hblocks = NULL;
    free(h);
}

const struct srv_family srv_family_hostblocks = {.name = "hostblocks",
                                                 .client_fini = srv_hblock_release,
                                                 .stream_gone = srv_hblock_stream_gone,
                                                 .ctx_died = srv_hblock_forget_device};
