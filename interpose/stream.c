/* Streams and events: made, destroyed, queried and synchronised in the server, known to
 * the client too (handles.c), so that a bad handle is refused at once and flags read back.
 * Event creation and destruction and the queries are described in cuda_symbols.txt;
 * what no description says is here. Synchronisations whose answer is known are answered
 * without a round trip (idle.c). */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

static int special(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

CUresult shim_stream_check(CUstream s, uint32_t *ctx)
{
    if (special(s)) {
        CUresult r = shim_need_ctx();
        if (r == CUDA_SUCCESS && ctx) *ctx = shim_current_ctx_id();
        return r;
    }
    struct shim_known k;
    if (shim_known_find(SHIM_HT_CUstream, (uint64_t)(uintptr_t)s, &k) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ctx) *ctx = k.ctx;
    return CUDA_SUCCESS;
}

CUresult shim_handle_check(unsigned htype, uint64_t h)
{
    if (htype == SHIM_HT_CUstream) return shim_stream_check((CUstream)(uintptr_t)h, NULL);
    if (htype < SHIM_NHTYPES && (shim_types[htype].flags & SHIM_TF_CLIENT))
        return h && shim_known_find(htype, h, NULL) == 0 ? CUDA_SUCCESS
                                                         : (CUresult)shim_types[htype].bad;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- streams */

static CUresult create(CUstream *ph, unsigned flags, int priority)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct chan_stream_create m = {.flags = flags, .priority = priority};
    uint64_t h = 0;
    r = shim_rpc(CHAN_OP_STREAM_CREATE, &m, sizeof(m), &h, sizeof(h), NULL);
    if (r != CUDA_SUCCESS) return r;
    struct shim_known k = {.ctx = shim_route_ctx(), .flags = flags, .priority = priority};
    shim_known_add(SHIM_HT_CUstream, h, &k);
    *ph = (CUstream)(uintptr_t)h;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuStreamCreate)(CUstream *phStream, unsigned int Flags)
{
    return create(phStream, Flags, 0);
}

CUresult SHIM_IMPL(cuStreamCreateWithPriority)(CUstream *phStream, unsigned int flags, int priority)
{
    return create(phStream, flags, priority);
}

CUresult SHIM_IMPL(cuStreamDestroy_v2)(CUstream hStream)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    uint64_t h = (uint64_t)(uintptr_t)hStream;
    struct shim_route saved; /* to its context's server: asked before it is forgotten */
    int routed = !special(hStream) && shim_route_stream(hStream, &saved);
    if (special(hStream) || shim_known_remove(SHIM_HT_CUstream, h) != 0) {
        if (routed) shim_route_end(&saved);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    shim_capture_stream_gone(hStream);
    shim_mig_stream_gone(hStream);
    r = shim_rpc(CHAN_OP_STREAM_DESTROY, &h, sizeof(h), NULL, 0, NULL);
    if (routed) shim_route_end(&saved);
    return r;
}

/* Answered here when the stream is known to be idle (idle.c). */
CUresult SHIM_IMPL(cuStreamSynchronize)(CUstream hStream)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_stream_check(hStream, NULL)) != CUDA_SUCCESS) return r;
    struct shim_idle q;
    if (shim_idle_stream(&q, hStream, 1)) return CUDA_SUCCESS;
    uint64_t gen = shim_mvar_sync_begin();
    uint64_t h = (uint64_t)(uintptr_t)hStream;
    struct shim_route saved;
    int routed = shim_route_stream(hStream, &saved);
    r = shim_ask(CHAN_OP_STREAM_SYNC, &h, sizeof(h));
    if (routed) shim_route_end(&saved);
    /* The device's writes to __managed__ variables come back first (mvars.c). */
    shim_mvar_synced(SHIM_MVAR_STREAM, hStream, 0, gen, &r);
    if (r == CUDA_SUCCESS) shim_idle_keep(&q, 1);
    return r;
}

/* What the client knows of stream h, for the getters answered here: CUDA_SUCCESS with *k
 * filled (flags and priority 0 for the default streams), or the error the
 * driver gives (no output pointer, no context, unknown handle). */
static CUresult stream_known(CUstream h, const void *out, struct shim_known *k)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    memset(k, 0, sizeof(*k));
    if (special(h)) return shim_need_ctx();
    return shim_known_find(SHIM_HT_CUstream, (uint64_t)(uintptr_t)h, k) == 0
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_HANDLE;
}

CUresult SHIM_IMPL(cuStreamGetFlags)(CUstream hStream, unsigned int *flags)
{
    struct shim_known k;
    CUresult r = stream_known(hStream, flags, &k);
    if (r == CUDA_SUCCESS) *flags = k.flags;
    return r;
}

/* The priority as the client asked for it, clamped to the device's range as the driver
 * does: the server makes the real stream a few steps apart (client priorities and SM
 * shares, server/limits/policy.c), which the client must not see. */
CUresult SHIM_IMPL(cuStreamGetPriority)(CUstream hStream, int *priority)
{
    struct shim_known k;
    CUresult r = stream_known(hStream, priority, &k);
    int least = 0, greatest = 0;
    if (r == CUDA_SUCCESS && !special(hStream)) r = cuCtxGetStreamPriorityRange(&least, &greatest);
    if (r == CUDA_SUCCESS)
        *priority = k.priority < greatest ? greatest : k.priority > least ? least : k.priority;
    return r;
}

CUresult SHIM_IMPL(cuStreamGetCtx)(CUstream hStream, CUcontext *pctx)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    uint32_t ctx;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if ((r = shim_stream_check(hStream, &ctx)) != CUDA_SUCCESS) return r;
    *pctx = shim_ctx_by_id(ctx);
    return *pctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult SHIM_IMPL(cuStreamGetCtx_v2)(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    if (pGreenCtx) *pGreenCtx = NULL; /* clients never see green contexts */
    return cuStreamGetCtx(hStream, pCtx);
}

/* ---------------------------------------------------------------- events */

/* A new event is known with its flags, which its description cannot keep: the records of
 * an interprocess one must reach the driver before they return (ipc.c), and its answers
 * never come from the client (idle.c), since another process may record it. */
static void event_create_after(const void *const *argv)
{
    CUevent e = **(CUevent *const *)argv[0];
    struct shim_known k = {.ctx = shim_route_ctx(), .flags = *(const unsigned *)argv[1]};
    shim_known_add(SHIM_HT_CUevent, (uint64_t)(uintptr_t)e, &k);
}

const struct shim_hook shim_hook_event_create = {.after = event_create_after};

CUresult SHIM_IMPL(cuEventSynchronize)(CUevent hEvent)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    uint64_t h = (uint64_t)(uintptr_t)hEvent;
    if (!hEvent || shim_known_find(SHIM_HT_CUevent, h, NULL) != 0) return CUDA_ERROR_INVALID_HANDLE;
    if ((r = shim_capture_unsafe()) != CUDA_SUCCESS) return r;
    struct shim_idle q;
    if (shim_idle_event(&q, hEvent, 1)) return CUDA_SUCCESS;
    uint64_t gen = shim_mvar_sync_begin();
    struct shim_known k;
    struct shim_route saved;
    int routed = shim_known_find(SHIM_HT_CUevent, h, &k) == 0 && shim_route_to_ctx(k.ctx, &saved);
    r = shim_ask(CHAN_OP_EVENT_SYNC, &h, sizeof(h));
    if (routed) shim_route_end(&saved);
    shim_mvar_synced(SHIM_MVAR_OTHER, NULL, 0, gen, &r);
    if (r == CUDA_SUCCESS) shim_idle_keep(&q, 1);
    return r;
}
