/* Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64), described in
 * cuda_symbols.txt; what no description can say is here: a client that leaves while one of
 * its streams waits for a value must not keep the server from releasing it.
 *
 * A wait blocks its stream on the GPU until memory of the client's own holds a value. When
 * the client goes, nothing will ever write it, and the release (which first waits for the
 * client's streams, so that nothing is freed under running work) would wait forever, with
 * terminate_client and quit behind it. So the server remembers the waits each client
 * enqueued, and before releasing it writes into each waited word, while that word is still
 * the client's, a value that satisfies the wait; the stream then runs to its end. A wait that
 * no value can satisfy (AND with 0, NOR with all bits set) is refused when it is enqueued:
 * natively it blocks its stream for ever.
 *
 * The release writes with the driver, so it needs the driver's lock: when the client's own
 * thread is stuck behind that lock, held by another client's call that waits for the whole
 * device (cuMemHostUnregister does), which waits for this very stream, nothing moves (seen
 * on an H200 with host functions, hostfn.c). Words in the client's host-mapped memory
 * (pinned, registered, managed), which the server maps at the same address, are therefore
 * also written by the main loop as soon as it finds the client gone, with a plain store and
 * no driver call (srv_memops_let_go). A wait on device memory cannot be let go so: its
 * release writes with the driver, on a stream the server made at start (main.c). Probed on
 * an H200 (580.159.04): while cuMemFree, cuMemHostUnregister or cuMemFreeHost waited for a
 * stream blocked on a value in device memory, cuStreamCreate waited too, but a write on a
 * stream made before went through and all three ended (tests/waitvalue_twin.sh). While a
 * module load or cuCtxSetLimit waits so, even that write waits: those calls therefore wait
 * in the server while any such wait is pending (codegate.c, which also watches each wait
 * enqueued here). */
#include "server/server.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Waits remembered per client, the latest per address; past this many the oldest goes
 * (its stream may then hold up the release until the drain's bound, see registry.c). */
#define SRV_MAX_WAITS 1024

struct srv_waitval {
    uint64_t addr, value;
    uint32_t flags;
    uint32_t ctx;
    int wide; /* 64-bit */
    int host; /* in the client's host memory, mapped here: the main loop may write it */
};

/* The value that makes the wait condition true, or -1 when none does. */
static int satisfying(uint64_t value, uint32_t flags, int wide, uint64_t *out)
{
    uint64_t all = wide ? ~0ull : 0xffffffffull;
    switch (flags & 0x3u) {
    case CU_STREAM_WAIT_VALUE_GEQ:
    case CU_STREAM_WAIT_VALUE_EQ:
        *out = value;
        return 0;
    case CU_STREAM_WAIT_VALUE_AND:
        *out = value;
        return (value & all) ? 0 : -1;
    default: /* NOR: ~(*addr | value) != 0 */
        *out = 0;
        return (value & all) != all ? 0 : -1;
    }
}

static CUresult wait_before(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    uint64_t v;
    if (satisfying(k->a.val[2], (uint32_t)k->a.val[3], k->d->params[2].size == 8, &v) != 0) {
        srv_log("Client process %d: a stream wait no value can satisfy (flags %#x, value %#llx) "
                "refused: it would block its stream for ever",
                (int)c->pid, (unsigned)k->a.val[3], (unsigned long long)k->a.val[2]);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static int host_mapped(const struct srv_obj *o)
{
    return o && (o->key.type == SHIM_HT_MEM_PINNED || o->key.type == SHIM_HT_MEM_MANAGED);
}

static CUresult wait_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_waitval w = {.addr = k->a.val[1], .value = k->a.val[2],
                            .flags = (uint32_t)k->a.val[3], .ctx = c->cur ? c->cur->id : 0,
                            .wide = k->d->params[2].size == 8};
    w.host = host_mapped(srv_range_find(c, w.addr, w.wide ? 8 : 4));
    pthread_mutex_lock(&c->waitvals_lock);
    size_t i = 0;
    while (i < c->nwaitvals && c->waitvals[i].addr != w.addr)
        i++;
    if (i < c->nwaitvals) {
        c->waitvals[i] = w;
        goto out;
    }
    if (c->nwaitvals == SRV_MAX_WAITS) {
        memmove(c->waitvals, c->waitvals + 1, (SRV_MAX_WAITS - 1) * sizeof(w));
        c->nwaitvals--;
    }
    if (c->nwaitvals == c->capwaitvals) {
        size_t ncap = c->capwaitvals ? c->capwaitvals * 2 : 16;
        struct srv_waitval *n = realloc(c->waitvals, ncap * sizeof(*n));
        if (!n)
            goto out; /* unremembered: the drain's bound still holds */
        c->waitvals = n;
        c->capwaitvals = ncap;
    }
    c->waitvals[c->nwaitvals++] = w;
out:
    pthread_mutex_unlock(&c->waitvals_lock);
    return CUDA_SUCCESS;
}

/* The driver's enqueue, with the code gate around it (codegate.c): no code is being loaded
 * while it is enqueued, and its end is watched. Every wait: one on host memory holds a code
 * load in the driver as long as one on device memory (a module load waited for a hold of
 * 11 s on pinned host memory, and held every client's launches meanwhile: issue 34, S4). */
static CUresult wait_call(struct srv_client *c, struct srv_call *k)
{
    srv_codegate_wait_begin(k->dev);
    CUresult r = srv_generic_drive(k);
    srv_codegate_wait_end(c, k->dev, (CUstream)(uintptr_t)k->vals[k->d->stream],
                          r == CUDA_SUCCESS);
    return r;
}

const struct srv_hook srv_hook_stream_wait_value = {
    .before = wait_before, .call = wait_call, .after = wait_after};

void srv_memops_unblock(struct srv_client *c, uint32_t ctx)
{
    /* The waits to end leave the list under the lock; the driver's writes come after it,
     * since the main loop takes the lock and must never wait behind a driver call. */
    pthread_mutex_lock(&c->waitvals_lock);
    struct srv_waitval *ends = c->nwaitvals ? malloc(c->nwaitvals * sizeof(*ends)) : NULL;
    size_t n = 0, j = 0;
    for (size_t i = 0; i < c->nwaitvals; i++) {
        if (ctx && c->waitvals[i].ctx != ctx)
            c->waitvals[j++] = c->waitvals[i];
        else if (ends)
            ends[n++] = c->waitvals[i];
    }
    c->nwaitvals = j;
    if (!ctx) {
        free(c->waitvals);
        c->waitvals = NULL;
        c->nwaitvals = c->capwaitvals = 0;
    }
    pthread_mutex_unlock(&c->waitvals_lock);
    for (size_t i = 0; i < n; i++) {
        struct srv_waitval *w = &ends[i];
        /* Only into memory that is still the client's: freed, it may be another's now. */
        struct srv_obj *o = srv_range_find(c, w->addr, w->wide ? 8 : 4);
        uint64_t v;
        if (!o || satisfying(w->value, w->flags, w->wide, &v) != 0)
            continue;
        int dev = o->dev >= 0 && o->dev < srv.ndev ? o->dev : 0;
        if (DRV(cuCtxPushCurrent_v2)(srv.ctx[dev]) != CUDA_SUCCESS)
            continue;
        /* Not on the client's streams, which are the ones waiting: on the server's release
         * stream, made at start (main.c), since making one now can wait for the very stream
         * this write lets go. Only where that stream could not be made, one made now. */
        CUstream st = srv.release_stream[dev], made = NULL;
        if (!st && DRV(cuStreamCreate)(&made, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS)
            st = made;
        if (st) {
            CUresult r = w->wide ? DRV(cuStreamWriteValue64_v2)(st, w->addr, v, 0)
                                 : DRV(cuStreamWriteValue32_v2)(st, w->addr, (cuuint32_t)v, 0);
            if (r == CUDA_SUCCESS)
                DRV(cuStreamSynchronize)(st);
        }
        if (made)
            DRV(cuStreamDestroy_v2)(made);
        CUcontext old;
        DRV(cuCtxPopCurrent_v2)(&old);
    }
    free(ends);
}

size_t srv_memops_let_go(struct srv_client *c)
{
    size_t n = 0;
    pthread_mutex_lock(&c->waitvals_lock);
    for (size_t i = 0; i < c->nwaitvals; i++) {
        const struct srv_waitval *w = &c->waitvals[i];
        uint64_t v;
        /* host: checked to be the client's host range when enqueued, and cleared under
         * this lock before that range is unmapped (srv_memops_unmapping). */
        if (!w->host || w->addr % (w->wide ? 8 : 4) ||
            satisfying(w->value, w->flags, w->wide, &v) != 0)
            continue;
        if (w->wide)
            atomic_store((_Atomic uint64_t *)(uintptr_t)w->addr, v);
        else
            atomic_store((_Atomic uint32_t *)(uintptr_t)w->addr, (uint32_t)v);
        n++;
    }
    pthread_mutex_unlock(&c->waitvals_lock);
    return n;
}

void srv_memops_unmapping(struct srv_client *c, uint64_t addr, uint64_t bytes)
{
    pthread_mutex_lock(&c->waitvals_lock);
    for (size_t i = 0; i < c->nwaitvals; i++)
        if (c->waitvals[i].addr >= addr && c->waitvals[i].addr - addr < bytes)
            c->waitvals[i].host = 0;
    pthread_mutex_unlock(&c->waitvals_lock);
}
