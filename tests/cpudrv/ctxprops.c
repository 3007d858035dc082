// Properties of contexts: device, flags, limits, cache and bank configuration, stream
// priorities, ids, synchronisation.
#include "cpudrv.h"

#include <stdlib.h>

// Device of the current context.
CUresult cuCtxGetDevice(CUdevice *device)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter_any(&c);
    if (rc) return TR(rc);
    if (device)
        *device = c->dev;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: ctx, or the current context when ctx is NULL.
static CUresult ctx_or_current(CUcontext ctx, struct cpudrv_ctx **out)
{
    if (!ctx) {
        *out = cpudrv_ctx_current();
        return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    }
    CUresult rc = cpudrv_ctx_find(ctx, out);
    if (!rc && cpudrv_ctx_usable(*out) == CUDA_ERROR_INVALID_CONTEXT)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    return rc;
}

// Device of ctx (NULL: the current context).
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!device) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = ctx_or_current(ctx, &c);
    if (!rc) *device = c->dev;
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held on entry and exit: waits for every stream of c; its sticky error. A
// context with a capturing stream cannot be waited for.
static CUresult sync_ctx(struct cpudrv_ctx *c)
{
    struct cpudrv_dep *deps = NULL;
    unsigned n = 0, cap = 0;
    CUresult rc = cpudrv_capture_ctx_sync(c);
    if (rc) return rc;
    if (cpudrv_stream_snapshot(c, CPUDRV_SNAP_CTX, &deps, &n, &cap)) {
        cpudrv_deps_release(deps, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cpudrv_unlock();
    cpudrv_deps_wait_release(deps, n);
    cpudrv_lock();
    return cpudrv_ctx_sticky(c);
}

// Whole-context waits going on (cpudrv_ctx_wait_all), and their end; under cpudrv_big.
static unsigned whole_waits;
static pthread_cond_t whole_done = PTHREAD_COND_INITIALIZER;

// Waits for every stream of c, cpudrv_big released meanwhile, counted in *count while it
// waits (whole_done is broadcast when the count drops to 0).
static CUresult wait_counted(struct cpudrv_ctx *c, unsigned *count)
{
    struct cpudrv_dep *deps = NULL;
    unsigned n = 0, cap = 0;
    if (cpudrv_stream_snapshot(c, CPUDRV_SNAP_CTX, &deps, &n, &cap)) {
        cpudrv_deps_release(deps, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    (*count)++;
    cpudrv_unlock();
    cpudrv_deps_wait_release(deps, n);
    cpudrv_lock();
    if (--*count == 0) pthread_cond_broadcast(&whole_done);
    return CUDA_SUCCESS;
}

CUresult cpudrv_ctx_wait_all(struct cpudrv_ctx *c)
{
    return wait_counted(c, &whole_waits);
}

// MPSSHIM_CPUDRV_LOAD_WAITS=1: loading a module waits for every stream of the context, and
// while it waits, launches and stream memory operations of other threads wait too, as on an
// H200 (driver 580.159.04): while cuModuleLoadData waited for a stream blocked on
// cuStreamWaitValue32, a cuStreamWriteValue32 on another stream waited as well
// (server/code/codegate.c). Off by default.
static unsigned load_waits;
static int load_waits_on(void)
{
    static int on = -1;
    return cpudrv_env_level("MPSSHIM_CPUDRV_LOAD_WAITS", 1, &on);
}

CUresult cpudrv_ctx_wait_for_load(struct cpudrv_ctx *c)
{
    return load_waits_on() ? wait_counted(c, &load_waits) : CUDA_SUCCESS;
}

// cpudrv_big held: the contexts kernel or library h was loaded in; 0 if h is neither.
static int loaded_set(const void *h, struct cpudrv_ctx ***loaded, unsigned **n)
{
    struct cpudrv_kernel *k = cpudrv_kernel_find(h);
    struct cpudrv_library *l = k ? NULL : cpudrv_obj_find(h, CPUDRV_K_LIBRARY);
    if (k) {
        *loaded = k->loaded;
        *n = &k->nloaded;
    } else if (l) {
        *loaded = l->loaded;
        *n = &l->nloaded;
    }
    return k || l;
}

CUresult cpudrv_code_load_wait(const void *h)
{
    // Where it was loaded is kept for cpudrv_library_unload_wait too.
    if (!(load_waits_on() || cpudrv_free_waits() >= 2) || !h) return CUDA_SUCCESS;
    struct cpudrv_ctx *c;
    if (cpudrv_enter(&c) != CUDA_SUCCESS) return CUDA_SUCCESS;
    struct cpudrv_ctx **loaded;
    unsigned *n;
    int done = !loaded_set(h, &loaded, &n) || *n >= 8;
    for (unsigned i = 0; !done && i < *n; i++)
        done = loaded[i] == c;
    CUresult rc = CUDA_SUCCESS;
    if (!done) {
        rc = cpudrv_ctx_wait_for_load(c); // nothing waited for without LOAD_WAITS
        // The library may have gone while this waited: found again.
        if (!rc && loaded_set(h, &loaded, &n) && *n < 8) loaded[(*n)++] = c;
    }
    cpudrv_unlock();
    return rc;
}

CUresult cpudrv_node_load_wait(const CUDA_KERNEL_NODE_PARAMS *p)
{
    return p ? cpudrv_code_load_wait(p->func ? (const void *)p->func : (const void *)p->kern)
             : CUDA_SUCCESS;
}

// MPSSHIM_CPUDRV_FREE_WAITS=2: cuLibraryUnload of a library whose code was loaded in a
// context first waits for every stream of each such context, launches held meanwhile, as on
// an H200 (driver 580.159.04, tools/heldwait libunload --spin --launch); one whose code was
// never loaded waited for nothing (libunload-cold). cpudrv_big held, and let go of while it
// waits: the caller finds l again after.
CUresult cpudrv_library_unload_wait(struct cpudrv_library *l)
{
    if (cpudrv_free_waits() < 2) return CUDA_SUCCESS;
    struct cpudrv_ctx *ctxs[64];
    unsigned n = 0;
    for (unsigned i = 0; i < l->nloaded && i < 8 && n < 64; i++)
        ctxs[n++] = l->loaded[i];
    for (unsigned f = 0; l->mod && l->mod->kernels && f < l->mod->nfuncs; f++) {
        struct cpudrv_kernel *k = l->mod->kernels[f];
        for (unsigned i = 0; k && i < k->nloaded && i < 8 && n < 64; i++)
            ctxs[n++] = k->loaded[i];
    }
    for (unsigned i = 0; i < n; i++) {
        int seen = 0;
        for (unsigned j = 0; j < i; j++)
            seen |= ctxs[j] == ctxs[i];
        struct cpudrv_ctx *c;
        if (seen || cpudrv_ctx_find((CUcontext)ctxs[i], &c) != CUDA_SUCCESS) continue;
        CUresult rc = wait_counted(c, &whole_waits);
        if (rc) return rc;
    }
    return CUDA_SUCCESS;
}

// MPSSHIM_CPUDRV_FREE_WAITS=2 holds launches during a free's wait as well, as on an H200
// (driver 580.159.04, tools/heldwait unregister|free|freehost --spin --launch: a launch of a
// function loaded before, on another stream, waited for as long as the free did); stream
// memory operations went through there (heldwait unregister).
void cpudrv_submit_gate(int launch)
{
    while ((load_waits_on() && load_waits) || (launch && cpudrv_free_waits() >= 2 && whole_waits))
        pthread_cond_wait(&whole_done, &cpudrv_big);
}

// MPSSHIM_CPUDRV_CREATE_WAITS=1: making a stream waits while a whole-context wait goes on,
// as on an H200 (driver 580.159.04): while cuMemFree, cuMemHostUnregister or cuMemFreeHost
// waited for a stream blocked on cuStreamWaitValue32, cuStreamCreate in another thread
// waited too (tools/heldwait). Off by default.
void cpudrv_stream_create_gate(void)
{
    static int on = -1;
    while (cpudrv_env_level("MPSSHIM_CPUDRV_CREATE_WAITS", 1, &on) && whole_waits)
        pthread_cond_wait(&whole_done, &cpudrv_big);
}

// Waits for all work of the current context.
CUresult cuCtxSynchronize(void)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter_any(&c);
    if (rc) return TR(rc);
    rc = sync_ctx(c);
    cpudrv_unlock();
    return TR(rc);
}

// Waits for all work of ctx (NULL: the current context).
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = ctx_or_current(ctx, &c);
    if (!rc) rc = sync_ctx(c);
    cpudrv_unlock();
    return TR(rc);
}

// Flags of the current context.
CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter_any(&c);
    if (rc) return TR(rc);
    if (flags)
        *flags = c->flags;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Sets the current context's flags.
CUresult cuCtxSetFlags(unsigned int flags)
{
    CUresult rc = cpudrv_ctx_check_flags(flags);
    if (rc) return TR(rc);
    struct cpudrv_ctx *c;
    rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    c->flags = flags;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Stores a limit of the current context (nothing enforces them).
CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    if ((unsigned)limit >= CU_LIMIT_MAX) return TR(CUDA_ERROR_INVALID_VALUE);
    if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)
        return TR(CUDA_ERROR_UNSUPPORTED_LIMIT);
    if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128)
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    c->limits[limit] = value;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// A limit of the current context.
CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    if (!pvalue || (unsigned)limit >= CU_LIMIT_MAX) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    *pvalue = c->limits[limit];
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Cache preference of the current context (stored only).
CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    if (!pconfig) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    *pconfig = c->cache;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Sets the cache preference of the current context.
CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    c->cache = config;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Deprecated: shared memory bank size (always 4 bytes).
CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
    if (!pConfig) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    cpudrv_unlock();
    *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return TR(CUDA_SUCCESS);
}

// Deprecated: accepted and ignored, as on devices without configurable banks.
CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    if ((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Stream priorities: least 0, greatest -5 (either pointer may be NULL).
CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    cpudrv_unlock();
    if (leastPriority) *leastPriority = CPUDRV_PRIO_LEAST;
    if (greatestPriority) *greatestPriority = CPUDRV_PRIO_GREATEST;
    return TR(CUDA_SUCCESS);
}

// Process-unique id of ctx (NULL: the current context).
CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!ctxId) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = ctx_or_current(ctx, &c);
    if (!rc) *ctxId = c->id;
    cpudrv_unlock();
    return TR(rc);
}

// The context API version (3020 for every context since CUDA 3.2).
CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!version) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = ctx_or_current(ctx, &c);
    cpudrv_unlock();
    if (!rc) *version = 3020;
    return TR(rc);
}

// SM-count affinity of the current context (a green context's share).
CUresult cuCtxGetExecAffinity(CUexecAffinityParam *pExecAffinity, CUexecAffinityType type)
{
    if (!pExecAffinity || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    pExecAffinity->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    pExecAffinity->param.smCount.val = c->green ? c->green->sms : CPUDRV_SM_COUNT;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Nothing is persisted in an L2 here.
CUresult cuCtxResetPersistingL2Cache(void)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}
