/* 3D batched copies: one COPY_BATCH3D record is one batch of cuMemcpy3DBatchAsync (or a
 * part of one, interpose/memcpybatch3d.c), executed in stream order on the client's
 * stream. Every operation's sides are checked as a single copy's are (copy.c: arrays of
 * the client's, every byte of a pitched extent in its ranges, overflow checked), and its
 * source access order and flags, before anything moves: a batch that fails any check moves
 * nothing and is answered with that error. Then each operation is one driver copy, in
 * order (the client sends its operations in bytes, with no element sizes to rebuild the
 * driver's own 3D batch call from). */
#include "server/core/server.h"
#include "server/core/reply.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/memory/copy.h"

#include <stdlib.h>
#include <string.h>

#include "channel/copybatch.h"

/* One operation's side: no pageable (staged) memory, no peer device in a batch. */
static CUresult side(struct srv_client *c, const struct chan_copy_side *s,
                     const struct chan_batch_copy3d *m, struct srv_copy_side *out)
{
    if (s->kind == CHAN_MEM_STAGED || s->device != -1) return CUDA_ERROR_INVALID_VALUE;
    return srv_copy_check_side(c, s, m->width, m->height, m->depth, out);
}

/* Checks every operation into sides[2i] (source) and [2i + 1]. */
static CUresult check(struct srv_client *c, const uint8_t *copies, uint32_t n,
                      struct srv_copy_side *sides)
{
    for (uint32_t i = 0; i < n; i++) {
        struct chan_batch_copy3d m;
        memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
        CUresult r = CUDA_ERROR_INVALID_VALUE;
        if (m.width && m.height && m.depth && chan_copy_batch_order_ok(m.order, m.flags) &&
            (r = side(c, &m.src, &m, &sides[2 * i])) == CUDA_SUCCESS)
            r = side(c, &m.dst, &m, &sides[2 * i + 1]);
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

void srv_op_copy_batch3d(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    /* The %payload line's checks ran: count at least 1, the operations end the record. */
    (void)len;
    struct chan_copy_batch3d h;
    memcpy(&h, p, sizeof(h));
    const uint8_t *copies = p + sizeof(h);
    struct srv_stream *s = srv_stream_resolve(c, h.stream, r->flags & CHAN_RF_PTDS, r->thread);
    struct srv_copy_side *sides = NULL;
    CUresult res = CUDA_SUCCESS;
    if (!c->cur)
        res = CUDA_ERROR_INVALID_CONTEXT;
    else if (c->cur->fault)
        res = c->cur->fault; /* its context died (fault.c) */
    else if (!s || s->legacy)
        res = s ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    else if (!(sides = calloc(h.count, 2 * sizeof(*sides))))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    else
        res = check(c, copies, h.count, sides);
    uint64_t total = 0;
    if (res == CUDA_SUCCESS) {
        CUstream st = srv_stream_prepare(c, s);
        for (uint32_t i = 0; i < h.count && res == CUDA_SUCCESS; i++) {
            struct chan_batch_copy3d m;
            memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
            res = srv_copy_issue(&sides[2 * i], &sides[2 * i + 1], m.width, m.height, m.depth, st);
            uint64_t b; /* an array to array extent was checked by no range: it may wrap */
            if (!__builtin_mul_overflow(m.width, m.height, &b) &&
                !__builtin_mul_overflow(b, m.depth, &b))
                total += b;
        }
    }
    free(sides);
    if (res == CUDA_SUCCESS) atomic_fetch_add(&c->stats.bytes_copied, total);
    if (r->flags & CHAN_RF_REPLY)
        srv_reply(c, r->lane, res, 0);
    else
        srv_defer(c, res, "batched 3D copy");
}
