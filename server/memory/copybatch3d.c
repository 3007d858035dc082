/* 3D batched copies: one COPY_BATCH3D record is one batch of cuMemcpy3DBatchAsync (or a
 * part of one, interpose/memcpybatch3d.c), executed in stream order on the client's
 * stream. Every operation's sides are checked as a single copy's are (copy.c: arrays of
 * the client's, every byte of a pitched extent in its ranges, overflow checked), and its
 * source access order and flags, before anything moves: a batch that fails any check moves
 * nothing and is answered with that error. A pageable (STAGED) side is packed: a source's
 * rows follow the operations in the record, a destination's go back in the reply lane, in
 * operation order, each its extent's bytes exactly (checked against the record and the lane,
 * overflow checked); the driver reads a source from a pinned copy (srv_hblock_take) and
 * writes a destination into the lane, each described as a packed pitched host side, and the
 * reply waits for the stream (server/core/waits.c). Then the driver's own 3D batch call copies
 * them, so that it may overlap them: the operations, which travel in bytes, are rebuilt in
 * elements (1 byte between pointers, an array's element size where one takes part). Where
 * the loaded driver has no such call, or an operation does not divide into its elements or
 * crosses devices (peer memory under unified addressing), or staged sources could not be
 * given it from pinned memory (from the record, which the next one overwrites, only the
 * driver's pageable snapshot of a single copy is safe), each operation is one driver copy,
 * in order. */
#include "server/core/server.h"
#include "server/core/queue.h"
#include "server/core/reply.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/waits.h"
#include "server/memory/copy.h"
#include "server/memory/hostblocks.h"

#include <stdlib.h>
#include <string.h>

#include "channel/copybatch.h"
#include "channel/texel.h"

/* Where the staged bytes lie: the sources' (have bytes from in on), the destinations'
 * (the reply lane from out on; NULL: the client waits for none), and how many each holds
 * so far. */
struct staged {
    const uint8_t *in;
    uint64_t have, nin;
    uint8_t *out;
    uint64_t nout;
};

/* A checked STAGED side as the driver's host side: the next n bytes of base, of which
 * `room` may be used and *at are, rows packed (pitch the width, no offset). */
static CUresult stage(const struct chan_batch_copy3d *m, uint64_t n, const uint8_t *base,
                      uint64_t room, uint64_t *at, struct srv_copy_side *out)
{
    uint64_t end;
    if (!base || __builtin_add_overflow(*at, n, &end) || end > room)
        return CUDA_ERROR_INVALID_VALUE;
    out->addr = (uint64_t)(uintptr_t)(base + *at);
    out->x = out->y = out->z = 0;
    out->pitch = m->width;
    out->height = m->height;
    *at = end;
    return CUDA_SUCCESS;
}

/* One operation's side: no peer device in a batch; a STAGED one placed by stage(). */
static CUresult side(struct srv_client *c, const struct chan_copy_side *s,
                     const struct chan_batch_copy3d *m, struct staged *st, int is_src,
                     struct srv_copy_side *out)
{
    if (s->device != -1) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = srv_copy_check_side(c, s, m->width, m->height, m->depth, out);
    if (r != CUDA_SUCCESS || s->kind != CHAN_MEM_STAGED) return r;
    uint64_t n; /* the extent's bytes */
    if (__builtin_mul_overflow(m->width, m->height, &n) || __builtin_mul_overflow(n, m->depth, &n))
        return CUDA_ERROR_INVALID_VALUE;
    return is_src ? stage(m, n, st->in, st->have, &st->nin, out)
                  : stage(m, n, st->out, CHAN_LANE_DATA, &st->nout, out);
}

/* Checks every operation into sides[2i] (source) and [2i + 1]; the staged sources' bytes
 * must be exactly the rest of the record. */
static CUresult check(struct srv_client *c, const uint8_t *copies, uint32_t n, struct staged *st,
                      struct srv_copy_side *sides)
{
    for (uint32_t i = 0; i < n; i++) {
        struct chan_batch_copy3d m;
        memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
        CUresult r = CUDA_ERROR_INVALID_VALUE;
        if (m.width && m.height && m.depth && chan_copy_batch_order_ok(m.order, m.flags) &&
            (m.src.kind != CHAN_MEM_STAGED || m.dst.kind != CHAN_MEM_STAGED) &&
            (r = side(c, &m.src, &m, st, 1, &sides[2 * i])) == CUDA_SUCCESS)
            r = side(c, &m.dst, &m, st, 0, &sides[2 * i + 1]);
        if (r != CUDA_SUCCESS) return r;
    }
    return st->nin == st->have ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* One checked side as the driver's batch operand of e-byte elements; -1 where it does not
 * divide into them. */
static int operand(const struct srv_copy_side *s, size_t e, CUmemcpy3DOperand *o)
{
    memset(o, 0, sizeof(*o));
    if (s->type == CU_MEMORYTYPE_ARRAY) {
        o->type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
        o->op.array.array = (CUarray)(uintptr_t)s->addr;
        o->op.array.offset = (CUoffset3D){s->x / e, s->y, s->z};
        return s->x % e ? -1 : 0;
    }
    /* The side lies in the client's memory (checked): its origin does not wrap. */
    o->type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    o->op.ptr.ptr = s->addr + s->x + s->y * s->pitch + s->z * s->pitch * s->height;
    o->op.ptr.rowLength = s->pitch / e;
    o->op.ptr.layerHeight = s->height;
    return s->pitch % e ? -1 : 0;
}

/* An array's element size, 0 where its descriptor gives none in whole bytes. */
static size_t elem_size(const struct srv_copy_side *s)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (s->type != CU_MEMORYTYPE_ARRAY) return 1;
    if (DRV(cuArray3DGetDescriptor_v2)(&d, (CUarray)(uintptr_t)s->addr) != CUDA_SUCCESS) return 0;
    unsigned bits = chan_texel_bits(d.Format, d.NumChannels);
    return bits % 8 ? 0 : bits / 8;
}

/* The checked batch as the driver's 3D batch call: 0 with ops filled, -1 where it is not
 * one (then copied operation by operation). */
static int as_driver_batch(const uint8_t *copies, uint32_t n, const struct srv_copy_side *sides,
                           CUDA_MEMCPY3D_BATCH_OP *ops)
{
    if (!srv_drv_fns[SHIM_ID_cuMemcpy3DBatchAsync_v2]) return -1;
    for (uint32_t i = 0; i < n; i++) {
        struct chan_batch_copy3d m;
        memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
        const struct srv_copy_side *src = &sides[2 * i], *dst = &sides[2 * i + 1];
        size_t se = elem_size(src), de = elem_size(dst), e = se > 1 ? se : de;
        if (!se || !de || src->device != dst->device || m.width % e ||
            operand(src, e, &ops[i].src) || operand(dst, e, &ops[i].dst))
            return -1;
        ops[i].extent = (CUextent3D){m.width / e, m.height, m.depth};
        ops[i].srcAccessOrder = (CUmemcpySrcAccessOrder)m.order;
        ops[i].flags = m.flags;
    }
    return 0;
}

/* Copies the checked batch on st: one driver batch where whole allows, or operation by
 * operation. */
static CUresult issue(const uint8_t *copies, uint32_t n, const struct srv_copy_side *sides,
                      int whole, CUstream st)
{
    CUDA_MEMCPY3D_BATCH_OP *ops = calloc(n, sizeof(*ops));
    CUresult res = CUDA_SUCCESS;
    if (ops && whole && as_driver_batch(copies, n, sides, ops) == 0)
        res = DRV(cuMemcpy3DBatchAsync_v2)(n, ops, 0, st);
    else
        for (uint32_t i = 0; i < n && res == CUDA_SUCCESS; i++) {
            struct chan_batch_copy3d m;
            memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
            res = srv_copy_issue(&sides[2 * i], &sides[2 * i + 1], m.width, m.height, m.depth, st);
        }
    free(ops);
    return res;
}

void srv_op_copy_batch3d(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    /* The %payload line's checks ran: count at least 1, the operations in the record; what
     * follows them is the staged sources' bytes. */
    struct chan_copy_batch3d h;
    memcpy(&h, p, sizeof(h));
    const uint8_t *copies = p + sizeof(h);
    const uint8_t *data = copies + (uint64_t)h.count * sizeof(struct chan_batch_copy3d);
    int lane = (r->flags & CHAN_RF_REPLY) ? r->lane : -1;
    struct staged st = {.have = len - (uint64_t)(data - p),
                        .out = lane >= 0 ? srv_lane_data(c, lane) : NULL};
    struct srv_stream *s;
    struct srv_copy_side *sides = NULL;
    CUresult res = srv_batch_stream(c, r, h.stream, &s);
    /* The stream before the operations, as the staged bytes go to its pinned block. */
    uint8_t *pin = res == CUDA_SUCCESS && st.have ? srv_hblock_take(c, s, st.have) : NULL;
    if (pin) memcpy(pin, data, st.have);
    st.in = pin ? pin : data;
    if (res == CUDA_SUCCESS && !(sides = calloc(h.count, 2 * sizeof(*sides))))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res == CUDA_SUCCESS) res = check(c, copies, h.count, &st, sides);
    /* Pageable memory cannot be captured (copy.c says why). */
    if (res == CUDA_SUCCESS && (st.have || st.nout) && srv_stream_capturing(c, s))
        res = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (res == CUDA_SUCCESS) {
        res = issue(copies, h.count, sides, pin || !st.have, srv_stream_prepare(c, s));
        /* The driver copied the record's bytes, or reads the pinned block in stream order
         * (queue.c counts what the client's queued work holds). */
        if (res == CUDA_SUCCESS && st.have) srv_queue_charge(c, s, st.have);
    }
    uint64_t total = 0;
    for (uint32_t i = 0; res == CUDA_SUCCESS && i < h.count; i++) {
        struct chan_batch_copy3d m;
        memcpy(&m, copies + (uint64_t)i * sizeof(m), sizeof(m));
        uint64_t b; /* an array to array extent was checked by no range: it may wrap */
        if (!__builtin_mul_overflow(m.width, m.height, &b) &&
            !__builtin_mul_overflow(b, m.depth, &b))
            total += b;
    }
    free(sides);
    if (res == CUDA_SUCCESS) atomic_fetch_add(&c->stats.bytes_copied, total);
    srv_batch_answer(c, r, s, res, st.nout, "batched 3D copy");
}
