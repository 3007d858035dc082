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
 * natively it blocks its stream for ever. */
#include "server/server.h"

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

static CUresult wait_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_waitval w = {.addr = k->a.val[1], .value = k->a.val[2],
                            .flags = (uint32_t)k->a.val[3], .ctx = c->cur ? c->cur->id : 0,
                            .wide = k->d->params[2].size == 8};
    for (size_t i = 0; i < c->nwaitvals; i++)
        if (c->waitvals[i].addr == w.addr) {
            c->waitvals[i] = w;
            return CUDA_SUCCESS;
        }
    if (c->nwaitvals == SRV_MAX_WAITS) {
        memmove(c->waitvals, c->waitvals + 1, (SRV_MAX_WAITS - 1) * sizeof(w));
        c->nwaitvals--;
    }
    if (c->nwaitvals == c->capwaitvals) {
        size_t ncap = c->capwaitvals ? c->capwaitvals * 2 : 16;
        struct srv_waitval *n = realloc(c->waitvals, ncap * sizeof(*n));
        if (!n)
            return CUDA_SUCCESS; /* unremembered: the drain's bound still holds */
        c->waitvals = n;
        c->capwaitvals = ncap;
    }
    c->waitvals[c->nwaitvals++] = w;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_stream_wait_value = {.before = wait_before, .after = wait_after};

void srv_memops_unblock(struct srv_client *c, uint32_t ctx)
{
    size_t j = 0;
    for (size_t i = 0; i < c->nwaitvals; i++) {
        struct srv_waitval *w = &c->waitvals[i];
        if (ctx && w->ctx != ctx) {
            c->waitvals[j++] = *w;
            continue;
        }
        /* Only into memory that is still the client's: freed, it may be another's now. */
        struct srv_obj *o = srv_range_find(c, w->addr, w->wide ? 8 : 4);
        uint64_t v;
        if (!o || satisfying(w->value, w->flags, w->wide, &v) != 0)
            continue;
        int dev = o->dev >= 0 && o->dev < srv.ndev ? o->dev : 0;
        if (DRV(cuCtxPushCurrent_v2)(srv.ctx[dev]) != CUDA_SUCCESS)
            continue;
        /* On a stream of its own: the client's are the ones waiting. */
        CUstream st;
        if (DRV(cuStreamCreate)(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) {
            CUresult r = w->wide ? DRV(cuStreamWriteValue64_v2)(st, w->addr, v, 0)
                                 : DRV(cuStreamWriteValue32_v2)(st, w->addr, (cuuint32_t)v, 0);
            if (r == CUDA_SUCCESS)
                DRV(cuStreamSynchronize)(st);
            DRV(cuStreamDestroy_v2)(st);
        }
        CUcontext old;
        DRV(cuCtxPopCurrent_v2)(&old);
    }
    c->nwaitvals = j;
    if (!ctx) {
        free(c->waitvals);
        c->waitvals = NULL;
        c->nwaitvals = c->capwaitvals = 0;
    }
}
