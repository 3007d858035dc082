/* Migrating managed memory (CHAN_HOST_MIGRATE): cuMemAllocManaged's memory whose bytes live
 * in device memory while the GPU works on them and in host memory while the host does.
 *
 * An allocation is two things of the server's: device memory at address A (the arena's, at
 * least 2 MiB and aligned to its granularity, so that A is page-aligned), which is what the
 * client's kernels, copies and memsets reach at A; and a host view, a sealed memfd mapped at
 * H in the window and registered, which the client maps at A in its own address space (where
 * its host code dereferences A). Nothing here decides from the host view: the server only
 * copies between the two when the client asks (interpose/migrate.c decides when, from its own
 * page states; a client can only fool itself), on the stream of transfers of its current
 * context, in order with __managed__ variables' transfers (managed.c):
 *
 *  - MPUSH: host view -> device, before any later work of the client on any stream
 *    (srv_mvar_ordered); with a reply, answered once the bytes are there (a host function's
 *    writes, which work already queued behind it must see).
 *  - MPULL: device -> host view, after every push and, with CHAN_MPULL_AFTER_WORK, after all
 *    the client's work queued so far (its streams' marks waited for on the transfers' stream:
 *    the server never blocks on them); answered once the bytes are there.
 *
 * Every entry must lie wholly in one migrating allocation of the client's own, checked from
 * the record's private copy with overflow-safe arithmetic. The device memory counts against
 * the client's device memory limit and the host view against the pinned cap, as before
 * (managed.c). A device without the virtual memory calls (the arena) refuses the flag with
 * CUDA_ERROR_NOT_SUPPORTED and the client makes its managed memory the older way. */
#include "server/core/server.h"
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
#include "server/memory/managed.h"
#include "server/memory/memory.h"
#include "channel/fdpass.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A migrating allocation's record's ext. */
struct migrating {
    uint64_t host;   /* H: the host view's mapping here */
    uint64_t mapped; /* bytes of the host view and of the device memory */
};

int srv_migrating(const struct srv_obj *o)
{
    return o && o->key.type == SHIM_HT_MEM_MANAGED && o->ext != NULL;
}

void srv_migrate_alloc(struct srv_client *c, const struct chan_rec *r,
                       const struct chan_host_alloc *m)
{
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint64_t rep[2] = {0, 0}, host = 0, size = 0;
    CUdeviceptr dptr = 0;
    int fd = -1, dev = c->cur->device, taken = 0;
    struct migrating *g = NULL;
    if (!srv_managed_flags_ok(m->flags & ~(CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE)) ||
        m->attempt != 0)
        goto out;
    /* Only the arena's memory is known to be aligned for the client's mapping. */
    res = CUDA_ERROR_NOT_SUPPORTED;
    if (!srv.device_vmm) goto out;
    size = (m->bytes + SRV_WINDOW_ALIGN - 1) & ~(SRV_WINDOW_ALIGN - 1);
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!srv_mem_fits(c, dev, m->bytes) || !srv_account_pinned_take(c, size)) goto out;
    taken = 1;
    if (!(g = calloc(1, sizeof(*g))) || (fd = srv_host_share(size, 0, &host)) < 0) goto fail;
    if ((res = srv_use_device(dev)) != CUDA_SUCCESS ||
        (res = srv_devmem_alloc(c, dev, &dptr, size)) != CUDA_SUCCESS)
        goto fail;
    res = CUDA_ERROR_OUT_OF_MEMORY;
    struct srv_stream *t = srv_stream_mvar(c, c->cur);
    struct srv_obj *o;
    /* Not the arena's own mapping: not aligned for the client's. */
    if ((dptr & (SRV_WINDOW_ALIGN - 1)) || !t ||
        !(o = srv_range_add(c, SHIM_HT_MEM_MANAGED, dptr, m->bytes, 1, NULL)))
        goto fail;
    g->host = host;
    g->mapped = size;
    o->ext = g;
    o->aux = size;
    taken = 0; /* the record's now: given back at its release */
    srv_obj_count(c, o, dev, m->bytes);
    /* Zeroed, as the host view is, before any transfer or work of the client's. */
    CUstream st = srv_stream_prepare(c, t);
    res = srv_mvar_ordered(c, t, st, DRV(cuMemsetD8Async)(dptr, 0, size, st));
    uint8_t one = 0;
    if (res == CUDA_SUCCESS && chan_send_fd(c->sock, &one, 1, fd) != 0)
        res = CUDA_ERROR_OPERATING_SYSTEM;
    if (res != CUDA_SUCCESS) {
        /* Its memset done before the memory can be anyone's; if the client left first,
         * its release frees it after its work. */
        if (srv_stream_settle(c, st) == 0) srv_obj_release(c, o);
        close(fd);
        goto out;
    }
    close(fd);
    rep[0] = dptr;
    rep[1] = size;
    res = CUDA_SUCCESS;
    goto out;
fail:
    if (dptr) srv_devmem_free_orphan(dev, dptr);
    if (fd >= 0) {
        close(fd);
        DRV(cuMemHostUnregister)((void *)(uintptr_t)host);
        srv_window_give(host, size);
    }
    free(g);
    if (taken) srv_account_pinned_give(c, size);
out:
    memcpy(srv_lane_data(c, r->lane), rep, sizeof(rep));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? sizeof(rep) : 0);
}

void srv_migrate_release(struct srv_client *c, struct srv_obj *o)
{
    struct migrating *g = o->ext;
    srv_account_pinned_give(c, g->mapped);
    DRV(cuMemHostUnregister)((void *)(uintptr_t)g->host);
    srv_window_give(g->host, g->mapped);
    /* Device memory of a context a fault killed died with it (fault.c). */
    if (!srv_fault_dead(c, o->dev)) {
        CUresult r = srv_devmem_free_orphan(o->dev, o->key.value);
        if (r != CUDA_SUCCESS)
            srv_log("Client process %d: releasing migrating managed memory failed with %s",
                    (int)c->pid, srv_errname(r));
    }
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

/* After-work pulls: the transfers' stream waits for every other stream of the client. */
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

void srv_migrate_move(struct srv_client *c, struct srv_stream *t, const struct chan_mvar *h,
                      const struct chan_mvar_ent *e, int lane)
{
    int push = h->what == CHAN_MVAR_MPUSH;
    uint64_t total = 0;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < h->n && r == CUDA_SUCCESS; i++)
        if (!migrating(c, e[i].dptr, e[i].len) || __builtin_add_overflow(total, e[i].len, &total))
            r = CUDA_ERROR_INVALID_VALUE;
    if (h->buf & ~(uint64_t)(push ? 0 : CHAN_MPULL_AFTER_WORK)) r = CUDA_ERROR_INVALID_VALUE;
    CUstream st = r == CUDA_SUCCESS ? srv_stream_prepare(c, t) : NULL;
    if (r == CUDA_SUCCESS && !push && (h->buf & CHAN_MPULL_AFTER_WORK)) {
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
    if (push && st) r = srv_mvar_ordered(c, t, st, r);
    if (r == CUDA_SUCCESS) atomic_fetch_add(&c->stats.bytes_copied, total);
    if (lane < 0) {
        srv_defer(c, r, "push of migrating managed memory");
        return;
    }
    if (r == CUDA_SUCCESS && (r = srv_wait_stream_own(c, t, lane, 0)) == CUDA_SUCCESS)
        return; /* replied, now or once the copies are done */
    srv_reply(c, lane, r, 0);
}
