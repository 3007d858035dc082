/* 3D batched copies: cuMemcpy3DBatchAsync (the first version, with failIdx), _v2 and their
 * _ptsz twins. Each operation becomes the CUDA_MEMCPY3D it amounts to
 * (channel/copybatch.h: element sizes from the operands' arrays, which this process asks
 * the server for with cuArray3DGetDescriptor, once per array and call), then its sides are
 * classified as the copy engine classifies a single copy's (memcpy.c): a device address
 * that is not the caller's refuses the batch at that operation, the ones before it copied
 * and failIdx naming none (the driver's way). The batch travels as
 * ONE COPY_BATCH3D record (several, in order on the same stream, past what one holds),
 * executed in stream order on the caller's stream (server/memory/copybatch3d.c), with:
 *  - the operations between device, pinned and array memory;
 *  - those with one pageable operand of at most CHAN_INLINE_MAX bytes of extent, as the 1D
 *    batch carries small ones (memcpybatch.c): a pageable source's rows packed in the
 *    record, a pageable destination's coming back packed in the reply (the call then
 *    returns once they landed, as a pageable destination does in the copy engine).
 * Larger pageable operations, and host to host ones, go after the records as one async
 * copy of the engine each, on the same stream (its staging and its host-to-host path). */
#define _GNU_SOURCE
#include "interpose/memcpy.h"

#include <stdlib.h>
#include <string.h>

#include "channel/copybatch.h"
#include "channel/texel.h"

struct op3 {
    CUDA_MEMCPY3D p;
    struct chan_batch_copy3d w;
    int engine;    /* a large pageable operand, or two: a single copy of the engine */
    uint64_t in;   /* staged source bytes in the record (the extent's, packed) */
    uint64_t back; /* staged destination bytes in the reply */
};

/* Element sizes of the arrays one call names, asked once each. */
#define ELEM_CACHE 16
struct elems {
    CUarray a[ELEM_CACHE];
    size_t e[ELEM_CACHE];
    int n;
};

/* The element size of an operand: 0 for a pointer; an array's from its descriptor (a format
 * whose elements are not whole bytes, block-compressed, has none: INVALID_VALUE). */
static CUresult elem_of(const CUmemcpy3DOperand *o, struct elems *c, size_t *e)
{
    *e = 0;
    if (o->type != CU_MEMCPY_OPERAND_TYPE_ARRAY || !o->op.array.array) return CUDA_SUCCESS;
    for (int i = 0; i < c->n; i++)
        if (c->a[i] == o->op.array.array) {
            *e = c->e[i];
            return CUDA_SUCCESS;
        }
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult r = cuArray3DGetDescriptor_v2(&d, o->op.array.array);
    if (r != CUDA_SUCCESS) return r;
    unsigned bits = chan_texel_bits(d.Format, d.NumChannels);
    if (!bits || bits % 8) return CUDA_ERROR_INVALID_VALUE;
    *e = bits / 8;
    if (c->n < ELEM_CACHE) {
        c->a[c->n] = o->op.array.array;
        c->e[c->n++] = *e;
    }
    return CUDA_SUCCESS;
}

/* Plans operation op into o. */
static CUresult plan(const CUDA_MEMCPY3D_BATCH_OP *op, struct elems *cache, struct op3 *o)
{
    size_t se, de;
    CUresult r;
    if ((r = elem_of(&op->src, cache, &se)) != CUDA_SUCCESS ||
        (r = elem_of(&op->dst, cache, &de)) != CUDA_SUCCESS ||
        (r = chan_copy3d_batch_op(op, se, de, &o->p)) != CUDA_SUCCESS)
        return r;
    const CUDA_MEMCPY3D *p = &o->p;
    struct shim_copy_side src = shim_copy_side3(p->srcMemoryType, NULL, p->srcDevice, p->srcArray,
                                                p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
                                                p->srcHeight),
                          dst = shim_copy_side3(p->dstMemoryType, NULL, p->dstDevice, p->dstArray,
                                                p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
                                                p->dstHeight);
    int mvar = 0;
    o->w = (struct chan_batch_copy3d){.width = p->WidthInBytes,
                                      .height = p->Height,
                                      .depth = p->Depth,
                                      .order = op->srcAccessOrder,
                                      .flags = op->flags};
    if ((r = shim_copy_wire_side(&src, p->WidthInBytes, p->Height, p->Depth, &o->w.src, &mvar)) !=
            CUDA_SUCCESS ||
        (r = shim_copy_wire_side(&dst, p->WidthInBytes, p->Height, p->Depth, &o->w.dst, &mvar)) !=
            CUDA_SUCCESS)
        return r;
    int ss = o->w.src.kind == CHAN_MEM_STAGED, ds = o->w.dst.kind == CHAN_MEM_STAGED;
    uint64_t n;
    if (!ss && !ds) return CUDA_SUCCESS;
    /* A pageable side's extent: no memory is larger than its product can count. */
    if (__builtin_mul_overflow(p->WidthInBytes, p->Height, &n) ||
        __builtin_mul_overflow(n, p->Depth, &n))
        return CUDA_ERROR_INVALID_VALUE;
    o->engine = (ss && ds) || n > CHAN_INLINE_MAX;
    o->in = !o->engine && ss ? n : 0;
    o->back = !o->engine && ds ? n : 0;
    return CUDA_SUCCESS;
}

/* Moves an operation's extent between its pageable side s (its rows as the caller laid
 * them out) and buf (packed): to_wire, from s into buf. */
static void pack(const struct op3 *o, const struct chan_copy_side *s, uint8_t *buf, int to_wire)
{
    uint64_t w = o->w.width;
    for (uint64_t z = 0; z < o->w.depth; z++)
        for (uint64_t y = 0; y < o->w.height; y++, buf += w) {
            uint8_t *h = (uint8_t *)(uintptr_t)(s->addr + s->x + (s->y + y) * s->pitch +
                                                (s->z + z) * s->pitch * s->height);
            if (to_wire)
                memcpy(buf, h, w);
            else
                memcpy(h, buf, w);
        }
}

#define REC_ROOM (CHAN_REC_MAX - sizeof(struct chan_rec) - sizeof(struct chan_copy_batch3d))

/* The end b of the operations [a, b) of one record: as many record operations from a on as
 * its room, and the reply's for staged destinations, hold (one at least: each fits alone);
 * n of them, in and out bytes staged each way. */
static size_t take(const struct op3 *o, size_t count, size_t a, uint32_t *n, uint64_t *in,
                   uint64_t *out)
{
    uint64_t used = 0;
    *n = 0;
    *in = *out = 0;
    size_t b;
    for (b = a; b < count; b++) {
        if (o[b].engine) continue;
        uint64_t add = sizeof(struct chan_batch_copy3d) + o[b].in;
        if (*n && (used + add > REC_ROOM || *out + o[b].back > CHAN_LANE_DATA)) break;
        used += add;
        *in += o[b].in;
        *out += o[b].back;
        (*n)++;
    }
    return b;
}

/* Sends the record operations [a, b) (n of them, in staged source bytes) on stream; waits
 * for the answer where a destination is staged (out bytes back) or one asks its sources
 * read before the call returns. */
static CUresult send_record(const struct op3 *o, size_t a, size_t b, uint32_t n, uint64_t in,
                            uint64_t out, CUstream stream)
{
    int reply = out > 0;
    for (size_t i = a; i < b; i++)
        reply |= !o[i].engine && o[i].w.order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    struct shim_req q;
    CUresult r = shim_req_begin(
        &q, CHAN_OP_COPY_BATCH3D,
        (uint32_t)(sizeof(struct chan_copy_batch3d) + n * sizeof(struct chan_batch_copy3d) + in),
        reply, 0);
    if (r != CUDA_SUCCESS) return r;
    struct chan_copy_batch3d h = {.stream = (uint64_t)(uintptr_t)stream, .count = n};
    memcpy(q.payload, &h, sizeof(h));
    uint8_t *at = q.payload + sizeof(h), *data = at + n * sizeof(struct chan_batch_copy3d);
    for (size_t i = a; i < b; i++)
        if (!o[i].engine) {
            memcpy(at, &o[i].w, sizeof(o[i].w));
            at += sizeof(o[i].w);
            if (o[i].in) pack(&o[i], &o[i].w.src, data, 1);
            data += o[i].in;
        }
    shim_req_send(&q);
    const uint8_t *back = NULL;
    uint32_t got = 0;
    if (reply && (r = shim_req_wait(&q, &back, &got)) == CUDA_SUCCESS && got < out)
        r = CUDA_ERROR_UNKNOWN; /* the server answers every staged byte or an error */
    for (size_t i = a; i < b && r == CUDA_SUCCESS && out; i++)
        if (!o[i].engine && o[i].back) {
            pack(&o[i], &o[i].w.dst, (void *)back, 0);
            back += o[i].back;
        }
    return r;
}

static CUresult carry(const struct op3 *o, size_t count, CUstream stream)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t a = 0, b; a < count && r == CUDA_SUCCESS; a = b) {
        uint32_t n;
        uint64_t in, out;
        b = take(o, count, a, &n, &in, &out);
        if (n) r = send_record(o, a, b, n, in, out, stream);
    }
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
        if (o[i].engine) r = shim_copy_3d(&o[i].p, stream, CHAN_CF_ASYNC);
    return r;
}

static CUresult batch3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *list, size_t *fail,
                        unsigned long long flags, CUstream stream)
{
    if (fail) *fail = CHAN_COPY_BATCH_NOIDX;
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS) return r;
    /* Documented: never the legacy NULL stream; the driver refuses NULL under a _ptsz twin
     * as well (580.159.04, the 1D batch). */
    if (stream == CU_STREAM_LEGACY || stream == NULL || !list || n == 0 ||
        n > CHAN_COPY_BATCH_MAX || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct op3 *o = calloc(n, sizeof(*o));
    if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
    struct elems cache = {.n = 0};
    int staged = 0;
    /* An operation refused ends the batch there, the ones before it copied (as the 1D
     * batch, memcpybatch.c), and failIdx names none: the driver's way (580.159.04 on an
     * H200, an operation past the end of its memory; tests/progs/copybatch.c prints it). */
    CUresult refused = CUDA_SUCCESS;
    size_t ok = n;
    for (size_t i = 0; i < n; i++) {
        if ((refused = plan(&list[i], &cache, &o[i])) != CUDA_SUCCESS) {
            ok = i;
            break;
        }
        staged |= o[i].w.src.kind == CHAN_MEM_STAGED || o[i].w.dst.kind == CHAN_MEM_STAGED;
    }
    /* Pageable memory cannot be captured (memcpy.c). */
    if (ok && staged) r = shim_capture_refuse(stream);
    if (ok && r == CUDA_SUCCESS && (r = shim_mvar_work(stream)) == CUDA_SUCCESS) {
        r = carry(o, ok, stream);
        shim_mvar_worked(stream);
    }
    free(o);
    return r != CUDA_SUCCESS ? r : refused;
}

CUresult SHIM_IMPL(cuMemcpy3DBatchAsync)(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                         size_t *failIdx, unsigned long long flags,
                                         CUstream hStream)
{
    return batch3d(numOps, opList, failIdx, flags, hStream);
}

CUresult SHIM_IMPL(cuMemcpy3DBatchAsync_v2)(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
                                            unsigned long long flags, CUstream hStream)
{
    return batch3d(numOps, opList, NULL, flags, hStream);
}
