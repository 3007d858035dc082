// Stream entry points: create, destroy, query, synchronize, wait for events, properties.
#include "cpudrv.h"

#include <stdlib.h>

// cpudrv_big held: resolves h for the calling thread (current context may be NULL).
static CUresult resolve(CUstream h, struct cpudrv_stream **s)
{
    return cpudrv_stream_get(h, cpudrv_ctx_current(), s);
}

// Same as resolve but a faulted context still answers (properties, not work).
static CUresult resolve_any(CUstream h, struct cpudrv_stream **out)
{
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return resolve(h, out);
    struct cpudrv_stream *s = cpudrv_obj_find(h, CPUDRV_K_STREAM);
    if (!s || s->dying) return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult create(CUstream *ph, unsigned flags, int prio)
{
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    cpudrv_stream_create_gate();
    struct cpudrv_stream *s;
    // A green context's streams never synchronise with its NULL stream.
    if (c->green) flags |= CU_STREAM_NON_BLOCKING;
    rc = cpudrv_stream_new(c, flags, prio, 0, &s);
    cpudrv_unlock();
    if (!rc) *ph = (CUstream)s;
    return rc;
}

// Creates a stream in the current context (flags: CU_STREAM_NON_BLOCKING or 0).
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return TR(create(phStream, Flags, 0));
}

// Creates a stream with a priority, clamped to [-5, 0].
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return TR(create(phStream, flags, priority));
}

// Destroys a stream; work already queued still runs to completion, a capture it takes part
// in is invalidated.
CUresult cuStreamDestroy(CUstream hStream)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_stream *s = cpudrv_obj_find(hStream, CPUDRV_K_STREAM);
    if (!s || s->dying)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        cpudrv_stream_destroy(s);
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: the points a synchronisation on s must reach (s itself, and for the
// legacy stream every blocking stream of its context).
static int sync_points(struct cpudrv_stream *s, struct cpudrv_dep **deps, unsigned *n,
                       unsigned *cap)
{
    if (s->legacy) return cpudrv_stream_snapshot(s->o.ctx, CPUDRV_SNAP_BLOCKING, deps, n, cap);
    struct cpudrv_dep *d = malloc(sizeof *d);
    if (!d) return -1;
    cpudrv_obj_ref(&s->o);
    pthread_mutex_lock(&s->mu);
    d->seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
    d->s = s;
    *deps = d;
    *n = *cap = 1;
    return 0;
}

// CUDA_SUCCESS if all work of the stream finished, CUDA_ERROR_NOT_READY if not (a capturing
// stream has no work to finish: refused).
CUresult cuStreamQuery(CUstream hStream)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve(hStream, &s);
    if (!rc) rc = cpudrv_capture_sync(s);
    if (!rc) {
        struct cpudrv_dep *deps = NULL;
        unsigned n = 0, cap = 0;
        if (sync_points(s, &deps, &n, &cap))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if (!cpudrv_deps_reached(deps, n))
            rc = CUDA_ERROR_NOT_READY;
        cpudrv_deps_release(deps, n);
        if (!rc) rc = cpudrv_ctx_usable(s->o.ctx);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Waits until all work queued on the stream so far has finished (refused while capturing).
CUresult cuStreamSynchronize(CUstream hStream)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve(hStream, &s);
    if (!rc) rc = cpudrv_capture_sync(s);
    if (!rc) {
        struct cpudrv_dep *deps = NULL;
        unsigned n = 0, cap = 0;
        if (sync_points(s, &deps, &n, &cap)) {
            cpudrv_deps_release(deps, n);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            struct cpudrv_ctx *c = s->o.ctx;
            cpudrv_unlock();
            cpudrv_deps_wait_release(deps, n);
            cpudrv_lock();
            rc = cpudrv_ctx_sticky(c);
        }
    }
    cpudrv_unlock();
    return TR(rc);
}

// Ordinal of the stream's device.
CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!device) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) *device = s->o.ctx->dev;
    cpudrv_unlock();
    return TR(rc);
}

// Priority of the stream (0 for the NULL stream).
CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!priority) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) *priority = s->prio;
    cpudrv_unlock();
    return TR(rc);
}

// Creation flags of the stream.
CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!flags) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) *flags = s->flags;
    cpudrv_unlock();
    return TR(rc);
}

// Process-unique id of the stream.
CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!streamId) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) *streamId = s->id;
    cpudrv_unlock();
    return TR(rc);
}

// Context of the stream (a green context's stream gives the green context's context).
CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pctx) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) *pctx = (CUcontext)s->o.ctx;
    cpudrv_unlock();
    return TR(rc);
}

// Context and green context of the stream (a green stream: its device's primary context).
CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pCtx || !pGreenCtx) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) {
        struct cpudrv_ctx *c = s->o.ctx;
        *pGreenCtx = c->green ? (CUgreenCtx)c->green : NULL;
        *pCtx = (CUcontext)cpudrv_ctx_owner(c);
    }
    cpudrv_unlock();
    return TR(rc);
}

// The green context a stream belongs to, or NULL.
CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx *phCtx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!phCtx) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    cpudrv_lock();
    rc = resolve_any(hStream, &s);
    if (!rc) *phCtx = s->o.ctx->green ? (CUgreenCtx)s->o.ctx->green : NULL;
    cpudrv_unlock();
    return TR(rc);
}
