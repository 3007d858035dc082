// The copy engine and the 1D copies (host/device/unified/peer).
//
// The real driver's rules for async copies with pageable host memory hold here: an
// async copy FROM pageable memory snapshots the source before returning; an async copy
// INTO pageable memory returns once the data landed. Pinned (cuMemHostAlloc'ed or
// registered) memory is used in place by the stream's worker. Synchronous copies
// complete before returning, ordered after earlier work of the legacy NULL stream. On a
// capturing stream a copy between device and pinned memory becomes a memcpy node.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct copy {
    struct cpudrv_xfer x;
    void *snapshot;
    struct cpudrv_obj *hold[2];
};

// Bytes spanned by one side of a transfer.
size_t cpudrv_xfer_span(size_t width, size_t height, size_t depth, size_t pitch, size_t slice)
{
    if (!width || !height || !depth) return 0;
    size_t a, b, r;
    if (__builtin_mul_overflow(depth - 1, slice, &a) ||
        __builtin_mul_overflow(height - 1, pitch, &b) || __builtin_add_overflow(a, b, &r) ||
        __builtin_add_overflow(r, width, &r))
        return SIZE_MAX; // no range holds that much: every check fails
    return r;
}

// Performs x now (worker side).
void cpudrv_xfer_run(const struct cpudrv_xfer *x)
{
    if (x->height == 1 && x->depth == 1) {
        memmove(x->dst, x->src, x->width);
        return;
    }
    for (size_t z = 0; z < x->depth; z++)
        for (size_t y = 0; y < x->height; y++)
            memmove(x->dst + z * x->dslice + y * x->dpitch, x->src + z * x->sslice + y * x->spitch,
                    x->width);
}

static CUresult copy_run(struct cpudrv_op *op)
{
    if (cpudrv_copy_delay_us) usleep((useconds_t)cpudrv_copy_delay_us);
    cpudrv_xfer_run(&((struct copy *)op->data)->x);
    return CUDA_SUCCESS;
}

static void copy_fini(struct cpudrv_op *op)
{
    struct copy *c = (struct copy *)op->data;
    free(c->snapshot);
    for (int i = 0; i < 2; i++)
        if (c->hold[i]) cpudrv_obj_put(c->hold[i]);
}

static int overlaps(const void *p, size_t n, uintptr_t lo, uintptr_t hi)
{
    return n && (uintptr_t)p < hi && (uintptr_t)p + n > lo;
}

static int copy_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct cpudrv_xfer *x = &((const struct copy *)op->data)->x;
    return overlaps(x->dst, cpudrv_xfer_span(x->width, x->height, x->depth, x->dpitch, x->dslice),
                    lo, hi) ||
           overlaps(x->src, cpudrv_xfer_span(x->width, x->height, x->depth, x->spitch, x->sslice),
                    lo, hi);
}

// cpudrv_big held: classifies a host pointer used by a copy.
int cpudrv_host_side(const void *p, size_t n)
{
    return cpudrv_mem_pinned(p, n ? n : 1) ? CPUDRV_SIDE_PINNED : CPUDRV_SIDE_PAGEABLE;
}

// cpudrv_big held: copies x on stream s. async == 0: the call completes the copy
// before returning (legacy-stream ordering); async == 1: stream-ordered with the real
// driver's pageable-memory rules, given the host sides' classification. hold[] are
// objects (arrays) to keep alive until the copy ran. Drops and retakes cpudrv_big.
CUresult cpudrv_copy_submit(struct cpudrv_stream *s, const struct cpudrv_xfer *x, int async,
                            int src_side, int dst_side, struct cpudrv_obj *hold0,
                            struct cpudrv_obj *hold1)
{
    int capturing = 0;
    CUresult rc = cpudrv_capture_check(s, &capturing);
    if (rc) return rc;
    if (!x->width || !x->height || !x->depth) return CUDA_SUCCESS;
    if (capturing) {
        // A graph cannot hold a copy of pageable memory: it would be read or written at
        // every launch, long after the call returned.
        if (src_side == CPUDRV_SIDE_PAGEABLE || dst_side == CPUDRV_SIDE_PAGEABLE)
            return cpudrv_capture_uncapturable(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        return cpudrv_capture_copy(s, x, src_side, dst_side, hold0, hold1);
    }
    struct cpudrv_op *op = cpudrv_op_new(sizeof(struct copy));
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    struct copy *c = (struct copy *)op->data;
    c->x = *x;
    op->run = copy_run;
    op->fini = copy_fini;
    op->touches = copy_touches;
    op->act = (struct cpudrv_act){.kind = CPUDRV_ACT_MEMCPY,
                                  .copy_kind = cpudrv_copy_kind(src_side, dst_side),
                                  .bytes = (uint64_t)x->width * x->height * x->depth};
    // The stream, arrays and (for async) the caller's memory must outlive the unlocked
    // section below.
    cpudrv_obj_ref(&s->o);
    if (hold0) cpudrv_obj_ref(c->hold[0] = hold0);
    if (hold1) cpudrv_obj_ref(c->hold[1] = hold1);
    if (async && src_side == CPUDRV_SIDE_PAGEABLE) {
        size_t span = cpudrv_xfer_span(x->width, x->height, x->depth, x->spitch, x->sslice);
        // The copy into the snapshot runs unlocked: it may be hundreds of megabytes.
        cpudrv_unlock();
        c->snapshot = malloc(span);
        if (c->snapshot) memcpy(c->snapshot, x->src, span);
        cpudrv_lock();
        if (!c->snapshot) {
            cpudrv_op_discard(op);
            cpudrv_obj_put(&s->o);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->x.src = c->snapshot;
    }
    int wait = !async || dst_side == CPUDRV_SIDE_PAGEABLE;
    if (wait) {
        rc = cpudrv_stream_run_sync(s, op);
    } else {
        rc = cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    cpudrv_obj_put(&s->o);
    return rc;
}

// cpudrv_big held: classifies a unified address (device range or host memory).
CUresult cpudrv_unified_side(uintptr_t p, size_t n, int *side)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (cpudrv_mem_is_device(p)) {
        *side = CPUDRV_SIDE_DEVICE;
        return cpudrv_mem_check(p, n);
    }
    *side = cpudrv_host_side((const void *)p, n);
    return CUDA_SUCCESS;
}

enum dir { HTOD, DTOH, DTOD, ANY };

// One 1D copy of n bytes; stream NULL means "synchronous on the legacy stream".
static CUresult copy1d(enum dir d, uintptr_t dst, uintptr_t src, size_t n, int async, CUstream hs)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    rc = cpudrv_stream_get(async ? hs : NULL, c, &s);
    int sside = CPUDRV_SIDE_DEVICE, dside = CPUDRV_SIDE_DEVICE;
    if (!rc && n) {
        switch (d) {
        case HTOD:
            rc = !src ? CUDA_ERROR_INVALID_VALUE : cpudrv_mem_check(dst, n);
            sside = cpudrv_host_side((const void *)src, n);
            break;
        case DTOH:
            rc = !dst ? CUDA_ERROR_INVALID_VALUE : cpudrv_mem_check(src, n);
            dside = cpudrv_host_side((const void *)dst, n);
            break;
        case DTOD:
            rc = cpudrv_mem_check(dst, n);
            if (!rc) rc = cpudrv_mem_check(src, n);
            break;
        case ANY:
            rc = cpudrv_unified_side(dst, n, &dside);
            if (!rc) rc = cpudrv_unified_side(src, n, &sside);
            break;
        }
    }
    if (!rc && n) {
        struct cpudrv_xfer x = {
            (unsigned char *)dst, (const unsigned char *)src, n, 1, 1, 0, 0, 0, 0};
        rc = cpudrv_copy_submit(s, &x, async, sside, dside, NULL, NULL);
    }
    cpudrv_unlock();
    return rc;
}

// Host to device, complete on return.
CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return TR(copy1d(HTOD, (uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, 0, NULL));
}

// Device to host, complete on return.
CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return TR(copy1d(DTOH, (uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, 0, NULL));
}

// Device to device, complete on return.
CUresult cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return TR(copy1d(DTOD, (uintptr_t)dstDevice, (uintptr_t)srcDevice, ByteCount, 0, NULL));
}

// Host to device on a stream (pageable source: snapshotted before returning).
CUresult cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                           CUstream hStream)
{
    return TR(copy1d(HTOD, (uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, 1, hStream));
}

// Device to host on a stream (pageable destination: returns once the data landed).
CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return TR(copy1d(DTOH, (uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, 1, hStream));
}

// Device to device on a stream.
CUresult cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                           CUstream hStream)
{
    return TR(copy1d(DTOD, (uintptr_t)dstDevice, (uintptr_t)srcDevice, ByteCount, 1, hStream));
}

// Unified addressing: each side is classified by the allocation table.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return TR(copy1d(ANY, (uintptr_t)dst, (uintptr_t)src, ByteCount, 0, NULL));
}

// Unified addressing, on a stream.
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return TR(copy1d(ANY, (uintptr_t)dst, (uintptr_t)src, ByteCount, 1, hStream));
}

static CUresult peer(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n,
                     int async, CUstream hs)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_ctx *a = cpudrv_obj_find(dstCtx, CPUDRV_K_CTX);
    struct cpudrv_ctx *b = cpudrv_obj_find(srcCtx, CPUDRV_K_CTX);
    rc = cpudrv_ctx_usable(a);
    if (!rc) rc = cpudrv_ctx_usable(b);
    cpudrv_unlock();
    return rc ? rc : copy1d(DTOD, (uintptr_t)dst, (uintptr_t)src, n, async, hs);
}

// Copy between two contexts' memory (one address space here), complete on return.
CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                      CUcontext srcContext, size_t ByteCount)
{
    return TR(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 0, NULL));
}

// Copy between two contexts' memory on a stream.
CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    return TR(peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 1, hStream));
}
