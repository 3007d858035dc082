/* 3D batched copies: cuMemcpy3DBatchAsync (the first version, with failIdx), _v2 and their
 * _ptsz twins. Each operation becomes the CUDA_MEMCPY3D it amounts to
 * (channel/copybatch.h: element sizes from the operands' arrays, which this process asks
 * the server for with cuArray3DGetDescriptor, once per array and call), then its sides are
 * classified as the copy engine classifies a single copy's (memcpy.c): a device address
 * that is not the caller's refuses the batch before anything moves. The operations between
 * device, pinned and array memory travel as ONE COPY_BATCH3D record (several, in order on
 * the same stream, past what one holds: about 450), executed in stream order on the
 * caller's stream (server/memory/copybatch3d.c); an operation with a pageable operand goes
 * after them as one async copy of the engine on the same stream (its staging and its
 * host-to-host path are the engine's). */
#define _GNU_SOURCE
#include "interpose/memcpy.h"

#include <stdlib.h>
#include <string.h>

#include "channel/copybatch.h"
#include "channel/texel.h"

struct op3 {
    CUDA_MEMCPY3D p;
    struct chan_batch_copy3d w;
    int engine; /* a pageable operand: a single copy of the engine */
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
    o->engine = o->w.src.kind == CHAN_MEM_STAGED || o->w.dst.kind == CHAN_MEM_STAGED;
    return CUDA_SUCCESS;
}

#define PER_REC                                                                                    \
    ((CHAN_REC_MAX - sizeof(struct chan_rec) - sizeof(struct chan_copy_batch3d)) /                 \
     sizeof(struct chan_batch_copy3d))

/* Sends the record operations [a, b) (their non-engine ones, at most PER_REC) on stream;
 * waits for the answer where one asks its sources read before the call returns. */
static CUresult send_record(const struct op3 *o, size_t a, size_t b, uint32_t n, CUstream stream)
{
    int reply = 0;
    for (size_t i = a; i < b; i++)
        reply |= !o[i].engine && o[i].w.order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    struct shim_req q;
    CUresult r = shim_req_begin(
        &q, CHAN_OP_COPY_BATCH3D,
        (uint32_t)(sizeof(struct chan_copy_batch3d) + n * sizeof(struct chan_batch_copy3d)), reply,
        0);
    if (r != CUDA_SUCCESS) return r;
    struct chan_copy_batch3d h = {.stream = (uint64_t)(uintptr_t)stream, .count = n};
    memcpy(q.payload, &h, sizeof(h));
    uint8_t *at = q.payload + sizeof(h);
    for (size_t i = a; i < b; i++)
        if (!o[i].engine) {
            memcpy(at, &o[i].w, sizeof(o[i].w));
            at += sizeof(o[i].w);
        }
    shim_req_send(&q);
    return reply ? shim_req_wait(&q, NULL, NULL) : CUDA_SUCCESS;
}

static CUresult carry(const struct op3 *o, size_t count, CUstream stream)
{
    CUresult r = CUDA_SUCCESS;
    for (size_t a = 0, b; a < count && r == CUDA_SUCCESS; a = b) {
        uint32_t n = 0;
        for (b = a; b < count && n < PER_REC; b++)
            n += !o[b].engine;
        if (n) r = send_record(o, a, b, n, stream);
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
    /* Documented: never the legacy NULL stream (a _ptsz twin's NULL is the thread's). */
    if (stream == CU_STREAM_LEGACY || (stream == NULL && !shim_ptds_active()) || !list || n == 0 ||
        n > CHAN_COPY_BATCH_MAX || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct op3 *o = calloc(n, sizeof(*o));
    if (!o) return CUDA_ERROR_OUT_OF_MEMORY;
    struct elems cache = {.n = 0};
    int staged = 0;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        r = plan(&list[i], &cache, &o[i]);
        if (r != CUDA_SUCCESS && fail) *fail = i;
        staged |= o[i].engine;
    }
    /* Pageable memory cannot be captured (memcpy.c). */
    if (r == CUDA_SUCCESS && staged) r = shim_capture_refuse(stream);
    if (r == CUDA_SUCCESS && (r = shim_mvar_work(stream)) == CUDA_SUCCESS) {
        r = carry(o, n, stream);
        shim_mvar_worked(stream);
    }
    free(o);
    return r;
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
