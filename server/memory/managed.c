/* Managed memory (cuMemAllocManaged) shared with clients.
 *
 * The driver's managed memory belongs to the process that allocated it and migrates on
 * page faults there; this server's could not be mapped by a client. So a client's managed
 * allocation is migrating memory (migrate.c: device memory with a host view the client maps,
 * bytes moved when the client asks), or, where that cannot be made or the client does not
 * ask for it, made exactly as pinned memory is (memory.c, srv_op_host_alloc): a sealed memfd
 * mapped at one address here and in the client and registered with
 * cuMemHostRegister(PORTABLE|DEVICEMAP), so that the device pointer is the host pointer and
 * the CPU and the GPU see one coherent buffer (the GPU over the bus). Either is its own kind
 * of range (%range managed), so that pointer queries say IS_MANAGED and cuMemFree, not
 * cuMemFreeHost, frees it.
 *
 * Memory limits: it counts against the client's device memory limit on the device it was
 * allocated for (the pinned device memory limit): a limit set to contain a client must
 * contain a program that allocates everything managed (OpenACC, unified-memory codes). It also
 * counts against the server's pinned host memory cap (MPSSHIM_MAX_PINNED_MB), as pinned
 * memory does, since its host pages are pinned. Advice never reaches the server
 * (interpose/managed.c says why). __managed__ variables of modules are the driver's own
 * managed memory: below. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/core/devices.h"
#include "server/memory/hostblocks.h"
#include "server/memory/managed.h"
#include "server/memory/migrate.h"
#include "server/memory/memops.h"
#include "server/core/queue.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The end of a managed allocation, however it goes (cuMemFree, its context, its client):
 * a migrating one's is migrate.c's, another's the same as a pinned one's; its device bytes are
 * uncounted with its record. */
void srv_release_managed(struct srv_client *c, struct srv_obj *o)
{
    if (srv_migrating(o))
        srv_migrate_release(c, o);
    else
        srv_release_pinned(c, o);
}

/* cuMemFree of managed memory: the caller's kernels and copies may still use it, so its
 * work ends first (its own streams only: other clients' work is not waited for); then it
 * is released. The generic path forgets the record after this. */
CUresult srv_managed_free(struct srv_client *c, struct srv_obj *o)
{
    srv_memops_end_range(c, o->key.value, o->size); /* its waits there first (memops.c) */
    if (srv_streams_drain(c, 0) != 0)
        return CUDA_ERROR_NOT_READY; /* it left meanwhile: its release frees it */
    srv_release_managed(c, o);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- __managed__ variables */

/* A module's or library's __managed__ variable is the driver's managed memory at address D
 * in this process, which the kernels of the module reach at D and a client cannot map. The
 * client (interpose/mvars.c) keeps a host copy of its own at D in its own address space,
 * where the runtime's host code dereferences the variable, and moves bytes between the two
 * at the points CUDA's rules for managed memory without concurrent access allow: the host's
 * writes before device work that could read them (PUSH), the device's writes after a
 * synchronisation (PULL). The decisions are the client's: its host copy is its own memory,
 * and a client can only fool itself. The server's part is the checks and the ordering.
 *
 * What a client may name: only bytes inside a global range it looked up itself (its own
 * module's or library's variable, as every global), that the driver said is managed when it
 * was looked up (the record's mark below). Every entry is checked from the server's private
 * copy of the record, with overflow-safe arithmetic, before anything is enqueued.
 *
 * Ordering: copies go on a stream of the client's context of their own (x->mvar, made on
 * first use, drained and released with the context like its default streams). A push must
 * reach D before any work the client enqueues afterwards, on whatever stream: it bumps the
 * client's push count and records the stream's mark, and srv_stream_prepare makes each of the
 * client's streams wait for that mark once before its next work (a capturing stream does not
 * wait: its work runs later, as a graph, whose launch waits). So a push costs the client no
 * round trip. A pull is a synchronous request whose reply comes when its copies are done.
 * Migrating managed memory's transfers (MPUSH, MPULL) come through the same request and the
 * same stream, and are migrate.c's. */

/* A global range's aux: the driver says it is managed memory (a __managed__ variable). */
#define GLOBAL_MANAGED 1ull

int srv_managed_var(const struct srv_obj *o)
{
    return o && o->key.type == SHIM_HT_MEM_GLOBAL && (o->aux & GLOBAL_MANAGED);
}

/* After a global's lookup (cuModuleGetGlobal, cuLibraryGetGlobal, cuLibraryGetManaged):
 * its record says whether it is managed, asked of the driver once. */
static CUresult global_after(struct srv_client *c, struct srv_call *k)
{
    const CUdeviceptr *dp = (const CUdeviceptr *)(uintptr_t)k->vals[0];
    unsigned managed = 0;
    struct srv_obj *o = dp ? srv_obj_find(c, SHIM_HT_MEM_GLOBAL, *dp) : NULL;
    if (o &&
        DRV(cuPointerGetAttribute)(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, *dp) ==
            CUDA_SUCCESS &&
        managed)
        o->aux |= GLOBAL_MANAGED;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_module_global = {.after = global_after};
const struct srv_hook srv_hook_library_global = {.after = global_after};
const struct srv_hook srv_hook_library_managed = {.after = global_after};

/* The variable holding all of [dptr, dptr + len), or NULL. */
static struct srv_obj *variable(struct srv_client *c, uint64_t dptr, uint64_t len)
{
    uint64_t end;
    if (len == 0 || __builtin_add_overflow(dptr, len, &end)) return NULL;
    struct srv_obj *o = srv_range_find(c, dptr, len);
    return srv_managed_var(o) && end - o->key.value <= o->size ? o : NULL;
}

/* The client's pinned memory holding all of [p, p + len): where a pull may write. */
static int pinned_room(struct srv_client *c, uint64_t p, uint64_t len)
{
    uint64_t end;
    if (len == 0 || __builtin_add_overflow(p, len, &end)) return 0;
    struct srv_obj *o = srv_range_find(c, p, len);
    return o && o->key.type == SHIM_HT_MEM_PINNED && end - o->key.value <= o->size;
}

/* PUSH: the entries' bytes, packed after them, to their variables. */
static CUresult push(struct srv_client *c, struct srv_stream *m, const struct chan_mvar_ent *e,
                     uint32_t n, const uint8_t *data, uint64_t data_len)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!variable(c, e[i].dptr, e[i].len) || __builtin_add_overflow(total, e[i].len, &total))
            return CUDA_ERROR_INVALID_VALUE;
    if (total != data_len) return CUDA_ERROR_INVALID_VALUE;
    CUstream st = srv_stream_prepare(c, m);
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        /* From pinned memory of the server's, as an inline copy's data (hostblocks.c). */
        const uint8_t *src = data;
        uint8_t *pin = srv_hblock_take(c, m, e[i].len);
        if (pin) {
            memcpy(pin, data, e[i].len);
            src = pin;
        }
        r = DRV(cuMemcpyHtoDAsync_v2)(e[i].dptr, src, e[i].len, st);
        data += e[i].len;
    }
    if ((r = srv_stream_order_all(c, m, st, r)) == CUDA_SUCCESS) srv_queue_charge(c, m, total);
    atomic_fetch_add(&c->stats.bytes_copied, total);
    return r;
}

/* PULL: each variable's bytes into the client's pinned memory. Replies itself, when they
 * are there or at once with the error. */
static void pull(struct srv_client *c, struct srv_stream *m, const struct chan_mvar *h,
                 const struct chan_mvar_ent *e, uint32_t n, int lane)
{
    uint64_t total = 0, at;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        if (!variable(c, e[i].dptr, e[i].len) || __builtin_add_overflow(h->buf, e[i].off, &at) ||
            !pinned_room(c, at, e[i].len) || __builtin_add_overflow(total, e[i].len, &total))
            r = CUDA_ERROR_INVALID_VALUE;
    CUstream st = r == CUDA_SUCCESS ? srv_stream_prepare(c, m) : NULL;
    for (uint32_t i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = DRV(cuMemcpyDtoHAsync_v2)((void *)(uintptr_t)(h->buf + e[i].off), e[i].dptr, e[i].len,
                                      st);
    if (r == CUDA_SUCCESS) {
        atomic_fetch_add(&c->stats.bytes_copied, total);
        if ((r = srv_wait_stream_own(c, m, lane, 0)) == CUDA_SUCCESS)
            return; /* replied, now or once the copies are done */
    }
    srv_reply(c, lane, r, 0);
}

/* READ: the entries' bytes into the reply lane, by a synchronous copy on the device's
 * context (the client may have none: its runtime looks its variables up first thing). */
static CUresult read_vars(struct srv_client *c, const struct chan_mvar_ent *e, uint32_t n, int lane,
                          uint32_t *out_len)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!variable(c, e[i].dptr, e[i].len) || __builtin_add_overflow(total, e[i].len, &total) ||
            total > CHAN_LANE_DATA)
            return CUDA_ERROR_INVALID_VALUE;
    CUresult r = srv_use_device(c->cur ? c->cur->device : srv_dev_any(c));
    uint8_t *to = srv_lane_data(c, lane);
    for (uint32_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        r = DRV(cuMemcpyDtoH_v2)(to, e[i].dptr, e[i].len);
        to += e[i].len;
    }
    *out_len = (uint32_t)total;
    return r;
}

void srv_op_mvar(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    int lane = (r->flags & CHAN_RF_REPLY) ? r->lane : -1;
    struct chan_mvar h = {0};
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t reply = 0;
    /* At least one entry, whole, in the record; what is one of the four (its %payload line). */
    memcpy(&h, p, sizeof(h));
    struct chan_mvar_ent *e = malloc((size_t)h.n * sizeof(*e));
    if (!e) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    memcpy(e, p + sizeof(h), (size_t)h.n * sizeof(*e));
    const uint8_t *data = p + sizeof(h) + (size_t)h.n * sizeof(*e);
    uint64_t data_len = len - sizeof(h) - (uint64_t)h.n * sizeof(*e);
    struct srv_stream *m = NULL;
    uint32_t out_len = 0;
    if (h.what == CHAN_MVAR_READ) {
        res = lane >= 0 && !data_len ? read_vars(c, e, h.n, lane, &out_len)
                                     : CUDA_ERROR_INVALID_VALUE;
    } else if (h.what == CHAN_MVAR_INFO) {
        /* Whether a global of the client's is managed: one entry, no data. */
        struct srv_obj *o = h.n == 1 && !data_len ? srv_range_find(c, e[0].dptr, 1) : NULL;
        if (o && o->key.type == SHIM_HT_MEM_GLOBAL) {
            reply = srv_managed_var(o) ? CHAN_MVAR_MANAGED : 0;
            res = CUDA_SUCCESS;
        }
    } else if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
    } else if (c->cur->fault) {
        res = c->cur->fault; /* its context died (fault.c) */
    } else if (!(m = srv_stream_mvar(c, c->cur))) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (h.what == CHAN_MVAR_PUSH) {
        res = push(c, m, e, h.n, data, data_len);
    } else if (data_len || (lane < 0 && h.what != CHAN_MVAR_MPUSH &&
                            !(h.what == CHAN_MVAR_MPULL && (h.buf & CHAN_MPULL_ON_STREAM)))) {
        res = CUDA_ERROR_INVALID_VALUE;
    } else if (h.what == CHAN_MVAR_MPUSH || h.what == CHAN_MVAR_MPULL) {
        srv_migrate_move(c, m, r, &h, e, lane); /* replies itself (migrate.c) */
        free(e);
        return;
    } else {
        pull(c, m, &h, e, h.n, lane);
        free(e);
        return;
    }
    free(e);
out:
    if (lane < 0) {
        srv_defer(c, res, "push of __managed__ variables");
        return;
    }
    if (res == CUDA_SUCCESS && h.what == CHAN_MVAR_INFO) {
        memcpy(srv_lane_data(c, lane), &reply, sizeof(reply));
        out_len = sizeof(reply);
    }
    srv_reply(c, lane, res, res == CUDA_SUCCESS ? out_len : 0);
}
