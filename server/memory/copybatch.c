/* Batched copies: one COPY_BATCH record is one batch of cuMemcpyBatchAsync (or a part of
 * one, interpose/memcpybatch.c), executed in stream order on the client's stream. The
 * record is read from the server's copy; every member is checked (its kinds, its attribute,
 * both sides in the client's ranges, the staged bytes against the record and the reply)
 * before anything moves, and a batch that fails any check moves nothing and is answered
 * CUDA_ERROR_INVALID_VALUE. Then the driver's own batch call copies the members, so that
 * it may overlap them, with their attributes; member by member (cuMemcpyAsync) where the
 * loaded driver has no batch call, or staged sources could not be given it from the
 * server's pinned memory (from the record, which the next one overwrites, only the
 * driver's pageable snapshot of a single copy is safe). */
#include "server/core/server.h"
#include "server/core/devices.h"
#include "server/core/queue.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/memory/copy.h"
#include "server/memory/hostblocks.h"

#include <stdlib.h>
#include <string.h>

#include "channel/copybatch.h"

/* A checked batch, ready for the driver. */
struct batch {
    uint32_t n, nattrs;
    CUdeviceptr *dst, *src;
    size_t *size, *idx;        /* idx[k]: the first member of driver attribute k */
    CUmemcpyAttributes *attrs; /* the runs of the members' attributes, as the driver takes */
    uint64_t in, out;          /* staged source bytes (in the record), destination bytes */
};

static void batch_free(struct batch *b)
{
    free(b->dst);
    free(b->src);
    free(b->size);
    free(b->idx);
    free(b->attrs);
}

/* One attribute set as the driver takes it: a hint naming a device names the client's
 * ordinal, which becomes the server's; one naming no device of the client's refuses. */
static CUresult map_attr(struct srv_client *c, const CUmemcpyAttributes *a, CUmemcpyAttributes *o)
{
    *o = *a;
    if (!chan_copy_batch_attr_ok(a)) return CUDA_ERROR_INVALID_VALUE;
    CUmemLocation *hint[2] = {&o->srcLocHint, &o->dstLocHint};
    for (int i = 0; i < 2; i++)
        if (hint[i]->type == CU_MEM_LOCATION_TYPE_DEVICE) {
            int d = srv_dev_in(c, hint[i]->id);
            if (d < 0) return CUDA_ERROR_INVALID_VALUE;
            hint[i]->id = d;
        }
    return CUDA_SUCCESS;
}

/* A member's side: DEVICE or PINNED in the client's ranges, or STAGED. */
static int side_ok(struct srv_client *c, uint32_t kind, uint64_t addr, uint64_t n)
{
    if (kind == CHAN_MEM_STAGED) return 1;
    if (kind != CHAN_MEM_DEVICE && kind != CHAN_MEM_PINNED) return 0;
    return srv_range_extent(c, addr, 0, 0, 0, n, 1, n, 1, 1) != NULL;
}

/* Checks the record's members and attributes into b: a staged source's address is where
 * its bytes lie from `in` on (the record's `have` bytes after its copies), a staged
 * destination's where they go from `out` on (the reply lane; NULL: the client waits for
 * none). */
static CUresult check(struct srv_client *c, const struct chan_copy_batch *h, const uint8_t *attrs,
                      const uint8_t *copies, const uint8_t *in, uint64_t have, uint8_t *out,
                      struct batch *b)
{
    b->n = h->count;
    if (h->nattrs > h->count) return CUDA_ERROR_INVALID_VALUE;
    if (!(b->dst = calloc(b->n, sizeof(*b->dst))) || !(b->src = calloc(b->n, sizeof(*b->src))) ||
        !(b->size = calloc(b->n, sizeof(*b->size))) || !(b->idx = calloc(b->n, sizeof(*b->idx))) ||
        !(b->attrs = calloc(b->n, sizeof(*b->attrs))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    int64_t last = -1;
    for (uint32_t i = 0; i < b->n; i++) {
        struct chan_batch_copy m;
        memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
        int ss = m.src_kind == CHAN_MEM_STAGED, ds = m.dst_kind == CHAN_MEM_STAGED;
        if (m.attr >= h->nattrs || m.bytes == 0 || (ss && ds) ||
            !side_ok(c, m.src_kind, m.src, m.bytes) || !side_ok(c, m.dst_kind, m.dst, m.bytes))
            return CUDA_ERROR_INVALID_VALUE;
        if ((int64_t)m.attr != last) {
            CUmemcpyAttributes a;
            memcpy(&a, attrs + (uint64_t)m.attr * sizeof(a), sizeof(a));
            CUresult r = map_attr(c, &a, &b->attrs[b->nattrs]);
            if (r != CUDA_SUCCESS) return r;
            b->idx[b->nattrs++] = i;
            last = m.attr;
        }
        /* Each staged side's bytes within what holds them, overflow checked. */
        uint64_t end;
        if (ss && (__builtin_add_overflow(b->in, m.bytes, &end) || end > have))
            return CUDA_ERROR_INVALID_VALUE;
        if (ds && (!out || __builtin_add_overflow(b->out, m.bytes, &end) || end > CHAN_LANE_DATA))
            return CUDA_ERROR_INVALID_VALUE;
        b->size[i] = m.bytes;
        b->src[i] = ss ? (CUdeviceptr)(uintptr_t)(in + b->in) : m.src;
        b->dst[i] = ds ? (CUdeviceptr)(uintptr_t)(out + b->out) : m.dst;
        b->in += ss ? m.bytes : 0;
        b->out += ds ? m.bytes : 0;
    }
    /* The staged sources' bytes are exactly the rest of the record. */
    return b->in == have ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Copies the checked batch on st: one driver batch, or member by member. */
static CUresult issue(const struct batch *b, int whole, CUstream st)
{
    if (whole && srv_drv_fns[SHIM_ID_cuMemcpyBatchAsync_v2])
        return DRV(cuMemcpyBatchAsync_v2)(b->dst, b->src, b->size, b->n, b->attrs, b->idx,
                                          b->nattrs, st);
    CUresult r = CUDA_SUCCESS;
    for (uint32_t i = 0; i < b->n && r == CUDA_SUCCESS; i++)
        r = DRV(cuMemcpyAsync)(b->dst[i], b->src[i], b->size[i], st);
    return r;
}

CUresult srv_batch_stream(struct srv_client *c, const struct chan_rec *r, uint64_t stream,
                          struct srv_stream **sp)
{
    struct srv_stream *s = srv_stream_resolve(c, stream, r->flags & CHAN_RF_PTDS, r->thread);
    *sp = s;
    if (!c->cur) return CUDA_ERROR_INVALID_CONTEXT;
    if (c->cur->fault) return c->cur->fault; /* its context died (fault.c) */
    if (!s || s->legacy) return s ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

void srv_batch_answer(struct srv_client *c, const struct chan_rec *r, struct srv_stream *s,
                      CUresult res, uint64_t out, const char *what)
{
    if (!(r->flags & CHAN_RF_REPLY)) {
        srv_defer(c, res, what);
        return;
    }
    /* Staged destinations: answered with their bytes once the stream has run them. */
    if (res == CUDA_SUCCESS && out &&
        (res = srv_wait_stream(c, s, r->lane, (uint32_t)out)) == CUDA_SUCCESS)
        return;
    srv_reply(c, r->lane, res, 0);
}

void srv_op_copy_batch(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    /* The %payload line's checks ran: count and nattrs at least 1, their parts in the
     * record; what follows them is the staged sources' bytes. */
    struct chan_copy_batch h;
    memcpy(&h, p, sizeof(h));
    const uint8_t *attrs = p + sizeof(h);
    const uint8_t *copies = attrs + (uint64_t)h.nattrs * sizeof(CUmemcpyAttributes);
    uint8_t *data = (uint8_t *)copies + (uint64_t)h.count * sizeof(struct chan_batch_copy);
    uint64_t have = len - (uint64_t)(data - p);
    int lane = (r->flags & CHAN_RF_REPLY) ? r->lane : -1;
    struct batch b;
    memset(&b, 0, sizeof(b));
    struct srv_stream *s;
    /* The stream before the members, as the staged bytes go to its pinned block. */
    CUresult res = srv_batch_stream(c, r, h.stream, &s);
    uint8_t *pin = res == CUDA_SUCCESS && have ? srv_hblock_take(c, s, have) : NULL;
    if (pin) memcpy(pin, data, have);
    if (res == CUDA_SUCCESS)
        res = check(c, &h, attrs, copies, pin ? pin : data, have,
                    lane >= 0 ? srv_lane_data(c, lane) : NULL, &b);
    /* Pageable memory cannot be captured (copy.c says why). */
    if (res == CUDA_SUCCESS && (have || b.out) && srv_stream_capturing(c, s))
        res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (res == CUDA_SUCCESS) {
        CUstream st = srv_stream_prepare(c, s);
        res = issue(&b, pin || !have, st);
        /* The driver copied the record's bytes, or reads the pinned block in stream order
         * (queue.c counts what the client's queued work holds). */
        if (res == CUDA_SUCCESS && have) srv_queue_charge(c, s, have);
    }
    uint64_t total = 0;
    for (uint32_t i = 0; res == CUDA_SUCCESS && i < b.n; i++)
        total += b.size[i]; /* each in the client's ranges or the record: no wrap */
    if (res == CUDA_SUCCESS) atomic_fetch_add(&c->stats.bytes_copied, total);
    uint64_t out = b.out;
    batch_free(&b);
    srv_batch_answer(c, r, s, res, out, "batched copy");
}
