/* Migrating managed memory (CHAN_HOST_MIGRATE): cuMemAllocManaged's memory whose bytes live
 * in device memory while the GPU works on them and in host memory while the host does.
 *
 * An allocation is two things of the server's: device memory at address A, which is what the
 * client's kernels, copies and memsets reach at A; and a host view, part of a sealed memfd
 * mapped at H in the window and registered, which the client maps at A in its own address
 * space (where its host code dereferences A). Both are parts of a block (struct srv_mblock,
 * below): the arena's own mapping of 2 MiB or more, aligned to its granularity so that every
 * 64 KiB unit of it is page-aligned for the client, and the memfd of as many bytes. Small
 * allocations of a client on a device share blocks unit by unit (a unit is zeroed on both
 * sides when taken); a larger one has a block of its own. Nothing here decides from the host view:
 * the server only copies between the two when the client asks (interpose/migrate.c decides when,
 * from its own page states; a client can only fool itself), on the stream of transfers of its
 * current context, in order with __managed__ variables' transfers (managed.c):
 *
 *  - MPUSH: host view -> device, before any later work of the client on any stream
 *    (srv_stream_order_all); with a reply, answered once the bytes are there (a host function's
 *    writes, which work already queued behind it must see).
 *  - MPULL: device -> host view, after every push and, with CHAN_MPULL_AFTER_WORK, after all
 *    the client's work queued so far (its streams' marks, the transfers' stream's with them,
 *    waited for on a stream of pulls of their own, srv_stream_pulls: the server never blocks
 *    on them, and the transfers' stream stays free for a host function's pulls and pushes,
 *    which such a pull may be waiting for); answered once the bytes are there. With
 *    CHAN_MPULL_ON_STREAM (a prefetch to the host), the client's stream that the entries name
 *    waits for the pull (an event of the pulls' stream), and the pull may be async: the
 *    client makes the chunks its host's at a synchronisation of that stream. The host view
 *    may be written after the call returns, but only over chunks the client keeps
 *    inaccessible until then, and a free of the allocation waits for the client's work
 *    (managed.c), the pulls' stream with it, before a unit can be taken again.
 *
 * Every entry must lie wholly in one migrating allocation of the client's own, checked from
 * the record's private copy with overflow-safe arithmetic. An allocation's bytes count against
 * the client's device memory limit, and a block's host view against the pinned cap, as before
 * (managed.c). A device without the virtual memory calls (the arena) refuses the flag with
 * CUDA_ERROR_NOT_SUPPORTED and the client makes its managed memory the older way. */
#include "server/core/server.h"
#include "server/memory/quietctx.h"
#include "server/core/devices.h"
#include "server/core/driver.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/window.h"
#include "server/limits/account.h"
#include "server/memory/devmem.h"
#include "server/memory/migrate.h"
#include "channel/fdpass.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UNIT (64ull << 10)     /* small allocations take whole units of a block */
#define BLOCK SRV_WINDOW_ALIGN /* a shared block: 32 units */
#define UNITS ((uint32_t)(BLOCK / UNIT))
#define SMALL_MAX (BLOCK / 2) /* larger ones get a block of their own */
_Static_assert(SMALL_MAX / UNIT < 32, "a small allocation's units fit a shift of a u32");

/* A block of migrating memory: device memory at dev (the arena's own mapping, aligned) and
 * its host view at host here, which the client maps at dev. Small allocations of one client
 * on one device share a block, unit by unit; a larger one has its own. It goes with its last
 * allocation (their release runs after their work: managed.c, registry.c). */
struct srv_mblock {
    CUdeviceptr dev;
    uint64_t host, bytes;
    int device;
    uint32_t used; /* shared blocks: bit u, unit u taken */
    int refs;
    struct srv_mblock *next; /* the client's shared blocks */
};

/* A migrating allocation's record's ext. */
struct migrating {
    struct srv_mblock *b;
    uint64_t host;     /* its host view here: within its block's */
    uint32_t first, n; /* shared blocks: its units */
};

static void block_free(struct srv_client *c, struct srv_mblock *b)
{
    for (struct srv_mblock **p = &c->mblocks; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    srv_account_pinned_give(c, b->bytes);
    srv_host_unregister(c, (void *)(uintptr_t)b->host);
    srv_window_give(b->host, b->bytes);
    /* Device memory of a context a fault killed died with it (fault.c). */
    if (!srv_fault_dead(c, b->device)) {
        CUresult r = srv_devmem_free_orphan(b->device, b->dev);
        if (r != CUDA_SUCCESS)
            srv_log("Client process %d: releasing migrating managed memory failed with %s",
                    (int)c->pid, srv_errname(r));
    }
    free(b);
}

/* A new block of `bytes` on dev: its fd in *fd (for the client), or NULL with the error. */
static struct srv_mblock *block_new(struct srv_client *c, int dev, uint64_t bytes, int *fd,
                                    CUresult *res)
{
    struct srv_mblock *b = calloc(1, sizeof(*b));
    *res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!b || !srv_account_pinned_take(c, bytes)) {
        free(b);
        return NULL;
    }
    b->bytes = bytes;
    b->device = dev;
    srv_quiet_start(c, "managed memory"); /* waited for just below */
    if ((*fd = srv_window_share(bytes, 0, &b->host)) >= 0 &&
        (*res = srv_use_device(dev)) == CUDA_SUCCESS &&
        (*res = srv_devmem_alloc(c, dev, &b->dev, bytes)) == CUDA_SUCCESS) {
        if (!(b->dev & (BLOCK - 1))) return b;
        *res = CUDA_ERROR_OUT_OF_MEMORY; /* not the arena's own mapping: unaligned */
        srv_devmem_free_orphan(dev, b->dev);
    }
    if (*fd >= 0) {
        close(*fd);
        srv_host_unregister(c, (void *)(uintptr_t)b->host);
        srv_window_give(b->host, bytes);
    }
    srv_account_pinned_give(c, bytes);
    free(b);
    return NULL;
}

/* Units [first, first + n) of a shared block as bits of its `used` (n is at most
 * SMALL_MAX / UNIT, 16: the shift stays within the word). */
static uint32_t units(uint32_t n, uint32_t first)
{
    return ((1u << n) - 1) << first;
}

/* n free units in a row of shared block b: the first, or -1. */
static int units_free(const struct srv_mblock *b, uint32_t n)
{
    for (uint32_t u = 0; u + n <= UNITS; u++)
        if (!(b->used & units(n, u))) return (int)u;
    return -1;
}

void srv_migrate_alloc(struct srv_client *c, const struct chan_rec *r,
                       const struct chan_host_alloc *m)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    /* The reply: the allocation's address and bytes, its block's address, and the block's
     * bytes when it is new (its fd then came first), else 0. */
    uint64_t rep[4] = {0, 0, 0, 0};
    int fd = -1, dev = c->cur->device, u = 0;
    struct migrating *g = NULL;
    struct srv_mblock *b = NULL;
    if (!chan_managed_flags_ok(m->flags & ~(CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE)) ||
        m->attempt != 0)
        goto out;
    /* Only the arena's memory is known to be aligned for the client's mapping. */
    res = CUDA_ERROR_NOT_SUPPORTED;
    if (!srv.device_vmm) goto out;
    res = CUDA_ERROR_OUT_OF_MEMORY;
    struct srv_stream *t = srv_stream_mvar(c, c->cur);
    if (!t || !srv_mem_fits(c, dev, m->bytes) || !(g = calloc(1, sizeof(*g)))) goto fail;
    uint64_t size = (m->bytes + UNIT - 1) & ~(UNIT - 1);
    if (size <= SMALL_MAX) {
        g->n = (uint32_t)(size / UNIT);
        for (b = c->mblocks; b; b = b->next)
            if (b->device == dev && (u = units_free(b, g->n)) >= 0) break;
    } else {
        size = (m->bytes + BLOCK - 1) & ~(BLOCK - 1);
    }
    if (!b) {
        if (!(b = block_new(c, dev, g->n ? BLOCK : size, &fd, &res))) goto fail;
        if (g->n) {
            b->next = c->mblocks;
            c->mblocks = b;
        }
        u = 0;
    }
    g->b = b;
    g->first = (uint32_t)u;
    uint64_t off = (uint64_t)u * UNIT, addr = b->dev + off;
    g->host = b->host + off;
    struct srv_obj *o = srv_range_add(c, SHIM_HT_MEM_MANAGED, addr, m->bytes, 1, NULL);
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!o) goto fail;
    if (g->n) b->used |= units(g->n, (uint32_t)u);
    b->refs++;
    o->ext = g;
    o->aux = size;
    srv_obj_count(c, o, dev, m->bytes);
    /* Both sides zeroed, equal before any transfer or work of the client's: a new block's
     * memfd is zero, a unit of an old one may have held an earlier allocation (nothing moves
     * to or from a free one); device memory may have held anyone's. */
    if (fd < 0) memset((void *)(uintptr_t)g->host, 0, size);
    CUstream st = srv_stream_prepare(c, t);
    res = srv_stream_order_all(c, t, st, DRV(cuMemsetD8Async)(addr, 0, size, st));
    uint8_t one = 0;
    if (res == CUDA_SUCCESS && fd >= 0 && chan_send_fd(c->sock, &one, 1, fd) != 0)
        res = CUDA_ERROR_OPERATING_SYSTEM;
    if (fd >= 0) close(fd);
    if (res != CUDA_SUCCESS) {
        /* Its memset done before the memory can be anyone's; if the client left first,
         * its release frees it after its work. */
        if (srv_stream_settle(c, st) == 0) srv_obj_release(c, o);
        goto out;
    }
    rep[0] = addr;
    rep[1] = size;
    rep[2] = b->dev;
    rep[3] = fd >= 0 ? b->bytes : 0;
    goto out;
fail:
    if (b && !b->refs) { /* new, holding nothing */
        if (fd >= 0) close(fd);
        block_free(c, b);
    }
    free(g);
out:
    memcpy(srv_lane_data(c, r->lane), rep, sizeof(rep));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? sizeof(rep) : 0);
}

void srv_migrate_release(struct srv_client *c, struct srv_obj *o)
{
    struct migrating *g = o->ext;
    struct srv_mblock *b = g->b;
    if (g->n) b->used &= ~units(g->n, g->first);
    if (!--b->refs) block_free(c, b);
    free(g);
    o->ext = NULL;
}

/* The migrating allocation holding all of [p, p + len), or NULL. */
static struct srv_obj *migrating(struct srv_client *c, uint64_t p, uint64_t len)
{
    uint64_t end;
    if (len == 0 || __builtin_add_overflow(p, len, &end)) return NULL;
    struct srv_obj *o = srv_range_find(c, p, len);
    return srv_migrating(o) && end - o->key.value <= o->size ? o : NULL;
}

/* After-work pulls: their stream (t) waits for every other stream of the client. */
struct after {
    struct srv_stream *t;
    CUstream st;
    CUresult r;
};

static void wait_for(struct srv_client *c, struct srv_stream *s, void *arg)
{
    struct after *a = arg;
    CUevent ev;
    /* A capturing stream runs nothing now; a stream never used holds nothing. */
    if (a->r != CUDA_SUCCESS || s == a->t || !s->real || !s->nsubmit ||
        srv_stream_capturing(c, s) || srv_event_take(c, s->device, &ev) != CUDA_SUCCESS)
        return;
    if ((a->r = DRV(cuEventRecord)(ev, s->real)) == CUDA_SUCCESS)
        a->r = DRV(cuStreamWaitEvent)(a->st, ev, 0);
    srv_event_give(c, s->device, ev); /* the wait holds what was recorded */
}

/* The client's stream an ON_STREAM pull's entries name (all the same one; not capturing,
 * where a wait would become part of a graph), or NULL. */
static struct srv_stream *waiting_stream(struct srv_client *c, const struct chan_rec *rec,
                                         const struct chan_mvar *h, const struct chan_mvar_ent *e)
{
    for (uint32_t i = 1; i < h->n; i++)
        if (e[i].off != e[0].off) return NULL;
    struct srv_stream *s = srv_stream_resolve(c, e[0].off, rec->flags & CHAN_RF_PTDS, rec->thread);
    return s && !srv_stream_capturing(c, s) ? s : NULL;
}

void srv_migrate_move(struct srv_client *c, struct srv_stream *t, const struct chan_rec *rec,
                      const struct chan_mvar *h, const struct chan_mvar_ent *e, int lane)
{
    int push = h->what == CHAN_MVAR_MPUSH;
    uint64_t total = 0;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < h->n && r == CUDA_SUCCESS; i++)
        if (!migrating(c, e[i].dptr, e[i].len) || __builtin_add_overflow(total, e[i].len, &total))
            r = CUDA_ERROR_INVALID_VALUE;
    if (h->buf & ~(uint64_t)(push ? 0 : CHAN_MPULL_AFTER_WORK | CHAN_MPULL_ON_STREAM))
        r = CUDA_ERROR_INVALID_VALUE;
    /* A stream waits for the pull: only one after all the work (what the client's chunks
     * rely on), named by a stream of the client's own. */
    struct srv_stream *on = NULL;
    if (r == CUDA_SUCCESS && !push && (h->buf & CHAN_MPULL_ON_STREAM) &&
        (!(h->buf & CHAN_MPULL_AFTER_WORK) || !(on = waiting_stream(c, rec, h, e))))
        r = CUDA_ERROR_INVALID_VALUE;
    /* A pull after all work goes on the context's stream of such pulls: the transfers' stream
     * is one of those it waits for (every push before it), and stays free meanwhile. */
    int after = r == CUDA_SUCCESS && !push && (h->buf & CHAN_MPULL_AFTER_WORK);
    struct srv_ctx *x = after ? srv_ctx_get(c, t->ctx) : NULL;
    if (after && !(x && (t = srv_stream_pulls(c, x)))) r = CUDA_ERROR_OUT_OF_MEMORY;
    CUstream st = r == CUDA_SUCCESS ? srv_stream_prepare(c, t) : NULL;
    if (r == CUDA_SUCCESS && after) {
        struct after a = {.t = t, .st = st, .r = CUDA_SUCCESS};
        srv_streams_each(c, 0, 1, wait_for, &a);
        r = a.r;
    }
    for (uint32_t i = 0; i < h->n && r == CUDA_SUCCESS; i++) {
        struct srv_obj *o = migrating(c, e[i].dptr, e[i].len);
        void *host =
            (void *)(uintptr_t)(((struct migrating *)o->ext)->host + (e[i].dptr - o->key.value));
        r = push ? DRV(cuMemcpyHtoDAsync_v2)(e[i].dptr, host, e[i].len, st)
                 : DRV(cuMemcpyDtoHAsync_v2)(host, e[i].dptr, e[i].len, st);
    }
    if (push && st) r = srv_stream_order_all(c, t, st, r);
    if (on && r == CUDA_SUCCESS && on != t) {
        CUevent ev;
        CUstream os = srv_stream_prepare(c, on);
        if ((r = srv_event_take(c, t->device, &ev)) == CUDA_SUCCESS) {
            if ((r = DRV(cuEventRecord)(ev, st)) == CUDA_SUCCESS)
                r = DRV(cuStreamWaitEvent)(os, ev, 0);
            srv_event_give(c, t->device, ev); /* the wait holds what was recorded */
        }
    }
    if (r == CUDA_SUCCESS) atomic_fetch_add(&c->stats.bytes_copied, total);
    if (lane < 0) {
        srv_defer(c, r,
                  push ? "push of migrating managed memory"
                       : "prefetch of migrating managed memory to the host");
        return;
    }
    if (r == CUDA_SUCCESS && (r = srv_wait_stream_own(c, t, lane, 0)) == CUDA_SUCCESS)
        return; /* replied, now or once the copies are done */
    srv_reply(c, lane, r, 0);
}
