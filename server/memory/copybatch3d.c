/* 3D batched copies: one COPY_BATCH3D record is one batch of cuMemcpy3DBatchAsync (or a
 * part of one, interpose/memcpybatch3d.c), executed in stream order on the client's
 * stream. Every operation's sides are checked as a single copy's are (copy.c: arrays of
 * the client's, every byte of a pitched extent in its ranges, overflow checked), and its
 * source access order and flags, before anything moves: a batch that fails any check moves
 * nothing and is answered with that error. Then the driver's own 3D batch call copies
 * them, so that it may overlap them: the operations, which travel in bytes, are rebuilt in
 * elements (1 byte between pointers, an array's element size where one takes part). Where
 * the loaded driver has no such call, or an operation does not divide into its elements or
 * crosses devices (peer memory under unified addressing), each operation is one driver copy,
 * in order. */
#include "server/core/server.h"
#include "server/core/reply.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/memory/copy.h"

#include <stdlib.h>
#include <string.h>

#include "channel/copybatch.h"
#include "channel/texel.h"

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

/* Copies the checked batch on st. */
static CUresult issue(const uint8_t *copies, uint32_t n, const struct srv_copy_side *sides,
                      CUstream st)
{
    CUDA_MEMCPY3D_BATCH_OP *ops = calloc(n, sizeof(*ops));
    CUresult res = CUDA_SUCCESS;
    if (ops && as_driver_batch(copies, n, sides, ops) == 0)
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
    if (res == CUDA_SUCCESS) res = issue(copies, h.count, sides, srv_stream_prepare(c, s));
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
    if (r->flags & CHAN_RF_REPLY)
        srv_reply(c, r->lane, res, 0);
    else
        srv_defer(c, res, "batched 3D copy");
}
