/* A context's synchronisation and limits: the context calls that the server answers
 * (cuCtxSynchronize, cuCtxGetLimit, cuCtxSetLimit). The client's table of contexts, and
 * the calls it answers from that table, are context.c's. */
#include "interpose/shim.h"

/* The client's streams of context `id` (0: the current one), answered here when they are
 * known to be idle (idle.c). */
static CUresult ctx_sync(uint32_t id)
{
    struct shim_idle q;
    if (shim_idle_ctx(&q, id ? id : shim_current_ctx_id())) return CUDA_SUCCESS;
    uint64_t gen = shim_mvar_sync_begin();
    CUresult r = shim_ask(CHAN_OP_CTX_SYNC, &id, id ? sizeof(id) : 0);
    /* The device's writes to __managed__ variables come back first (mvars.c). */
    shim_mvar_synced(SHIM_MVAR_CTX, NULL, id ? id : shim_current_ctx_id(), gen, &r);
    if (r == CUDA_SUCCESS) shim_idle_keep(&q, 1);
    return r;
}

CUresult SHIM_IMPL(cuCtxSynchronize)(void)
{
    CUresult r = shim_ready();
    if (r == CUDA_SUCCESS) r = shim_need_ctx();
    if (r != CUDA_SUCCESS) return r;
    return ctx_sync(0);
}

CUresult SHIM_IMPL(cuCtxSynchronize_v2)(CUcontext ctx)
{
    if (!ctx) return cuCtxSynchronize();
    uint32_t id;
    CUresult r = shim_ctx_lookup(ctx, &id, NULL);
    if (r != CUDA_SUCCESS) return r;
    return ctx_sync(id);
}

static CUresult limit_call(struct chan_limit *m)
{
    CUresult r = shim_ready();
    if (r == CUDA_SUCCESS) r = shim_need_ctx();
    if (r != CUDA_SUCCESS) return r;
    return shim_rpc(CHAN_OP_CTX_LIMIT, m, sizeof(*m), &m->value, sizeof(m->value), NULL);
}

CUresult SHIM_IMPL(cuCtxGetLimit)(size_t *pvalue, CUlimit limit)
{
    if (!pvalue) return CUDA_ERROR_INVALID_VALUE;
    struct chan_limit m = {.set = 0, .limit = (uint32_t)limit};
    CUresult r = limit_call(&m);
    if (r == CUDA_SUCCESS) *pvalue = (size_t)m.value;
    return r;
}

CUresult SHIM_IMPL(cuCtxSetLimit)(CUlimit limit, size_t value)
{
    struct chan_limit m = {.set = 1, .limit = (uint32_t)limit, .value = value};
    /* Setting a limit waits for every stream of the context (hostfn.c). */
    shim_hostfn_settle(shim_current_device());
    return limit_call(&m);
}
