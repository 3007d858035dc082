// Contexts: creation and teardown, primary contexts, the per-thread context stack.
//
// Context structures are never freed: a thread may still hold a destroyed context in
// its stack, and reading a dead structure (o.live == 0) is harmless where freeing it
// would not be.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STACK_MAX 64

// The calling thread's context stack (thread-local: no lock).
static __thread struct cpudrv_ctx *stack[STACK_MAX];
static __thread int depth;

// Live, not being torn down, and (for a primary context) active.
static int usable(const struct cpudrv_ctx *c)
{
    return c && c->o.live && !c->dying && (!c->primary || c->active);
}

// cpudrv_big held: the current context if live and active, else NULL.
struct cpudrv_ctx *cpudrv_ctx_current(void)
{
    struct cpudrv_ctx *c = depth ? stack[depth - 1] : NULL;
    return usable(c) ? c : NULL;
}

// cpudrv_big held: CUDA_SUCCESS, the context's sticky error, or INVALID_CONTEXT if dead.
CUresult cpudrv_ctx_usable(struct cpudrv_ctx *c)
{
    if (!usable(c)) return CUDA_ERROR_INVALID_CONTEXT;
    return cpudrv_ctx_sticky(c);
}

static CUresult enter(struct cpudrv_ctx **out, int any)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_ctx *c = cpudrv_ctx_current();
    if (!c)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else if (!any)
        rc = cpudrv_ctx_sticky(c);
    if (rc) {
        cpudrv_unlock();
        return rc;
    }
    *out = c;
    return CUDA_SUCCESS;
}

// Checks init and the calling thread's current context (live, not faulted). On success
// returns CUDA_SUCCESS with cpudrv_big HELD and *out set; on failure the lock is not held.
CUresult cpudrv_enter(struct cpudrv_ctx **out)
{
    return enter(out, 0);
}

// As cpudrv_enter, but a faulted (sticky) context is accepted.
CUresult cpudrv_enter_any(struct cpudrv_ctx **out)
{
    return enter(out, 1);
}

// Records a fault raised by a kernel (sticky for the context, as on a GPU; for every
// context of the process unless MPSSHIM_CPUDRV_FAULTS_PER_CONTEXT=1: cpudrv_lost). A green
// context's kernel faults its device's primary context too: they share one address space
// (its memory and modules are the primary's), so the model takes the fault as the device
// context's, which is what the mpsshim server recovers from.
int cpudrv_lost;
void cpudrv_ctx_fault(struct cpudrv_ctx *c, CUresult err)
{
    int zero = 0;
    if (!cpudrv_faults_per_context)
        __atomic_compare_exchange_n(&cpudrv_lost, &zero, (int)err, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
    zero = 0;
    __atomic_compare_exchange_n(&c->sticky, &zero, (int)err, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (c->green) {
        zero = 0;
        __atomic_compare_exchange_n(&cpudrv_devs[c->dev].primary->sticky, &zero, (int)err, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
}

// The context that owns memory and modules created while c is current (a green
// context's resources belong to its device's primary context).
struct cpudrv_ctx *cpudrv_ctx_owner(struct cpudrv_ctx *c)
{
    return c->green ? cpudrv_devs[c->dev].primary : c;
}

// cpudrv_big held: counts a context coming (1) or going (-1).
void cpudrv_ctx_stats_live(long delta)
{
    cpudrv_stats.ctx_live += delta;
    if (cpudrv_stats.ctx_live > cpudrv_stats.ctx_live_max)
        cpudrv_stats.ctx_live_max = cpudrv_stats.ctx_live;
    cpudrv_stats_changed();
}

static void default_limits(struct cpudrv_ctx *c)
{
    memset(c->limits, 0, sizeof c->limits);
    c->limits[CU_LIMIT_STACK_SIZE] = 1024;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1048576;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8388608;
    c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    c->limits[CU_LIMIT_SHMEM_SIZE] = CPUDRV_SHMEM_OPTIN;
    c->limits[CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = 1;
}

// cpudrv_big held: resets a context's settings and gives it a legacy stream; the fault
// that lost the process its devices, if one did.
CUresult cpudrv_ctx_activate(struct cpudrv_ctx *c)
{
    CUresult lost = (CUresult)__atomic_load_n(&cpudrv_lost, __ATOMIC_ACQUIRE);
    if (lost) return lost;
    default_limits(c);
    c->cache = CU_FUNC_CACHE_PREFER_NONE;
    c->sticky = 0;
    c->life = cpudrv_next_id();
    c->npeers = 0;
    return cpudrv_stream_new(c, 0, 0, 1, &c->legacy);
}

// cpudrv_big held: creates a context object (not current anywhere) on dev; kind is
// 0 for cuCtxCreate, 1 for a primary context (inactive), 2 for a green context's.
CUresult cpudrv_ctx_new(int dev, unsigned flags, int kind, struct cpudrv_ctx **out)
{
    struct cpudrv_ctx *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_obj_init(&c->o, CPUDRV_K_CTX, NULL, NULL);
    c->dev = dev;
    c->flags = flags;
    c->primary = kind == 1;
    c->id = cpudrv_next_id();
    if (kind != 1) {
        CUresult rc = cpudrv_ctx_activate(c);
        if (rc) {
            free(c);
            return rc;
        }
        c->active = 1;
        if (kind == 0) cpudrv_ctx_stats_live(1);
    }
    cpudrv_obj_publish(&c->o);
    *out = c;
    return CUDA_SUCCESS;
}

// cpudrv_big held on entry and exit (dropped inside): waits for the context's work,
// destroys its streams, events, modules, arrays and memory.
void cpudrv_ctx_teardown(struct cpudrv_ctx *c)
{
    c->dying = 1;
    size_t n = cpudrv_obj_collect(0, c, NULL, 0);
    struct cpudrv_obj **objs = calloc(n ? n : 1, sizeof *objs);
    n = objs ? cpudrv_obj_collect(0, c, objs, n) : 0;
    for (size_t i = 0; i < n; i++) {
        struct cpudrv_obj *o = objs[i];
        if (o->kind == CPUDRV_K_MODULE)
            cpudrv_module_destroy((struct cpudrv_module *)o);
        else if (o->kind == CPUDRV_K_STREAM)
            cpudrv_stream_destroy((struct cpudrv_stream *)o);
        else
            cpudrv_obj_unpublish(o);
        cpudrv_obj_put(o);
    }
    free(objs);
    // Internal streams (legacy, per-thread) are not handles: end them through the list.
    size_t ns = 0;
    for (struct cpudrv_stream *s = c->streams; s; s = s->ctx_next)
        ns++;
    struct cpudrv_stream **ss = calloc(ns ? ns : 1, sizeof *ss);
    ns = 0;
    for (struct cpudrv_stream *s = c->streams; s && ss; s = s->ctx_next) {
        cpudrv_obj_ref(&s->o);
        ss[ns++] = s;
    }
    for (size_t i = 0; i < ns; i++)
        cpudrv_stream_destroy(ss[i]);
    cpudrv_unlock();
    for (size_t i = 0; i < ns; i++)
        cpudrv_stream_drain(ss[i]);
    cpudrv_lock();
    for (size_t i = 0; i < ns; i++)
        cpudrv_obj_put(&ss[i]->o);
    free(ss);
    c->legacy = NULL;
    cpudrv_mem_free_ctx(c);
    c->sticky = 0;
    c->dying = 0;
}

// cpudrv_big held: pops c from the calling thread's stack if it is there.
void cpudrv_ctx_forget_current(struct cpudrv_ctx *c)
{
    if (depth && stack[depth - 1] == c) depth--;
}

// INVALID_VALUE unless flags are valid context creation flags.
CUresult cpudrv_ctx_check_flags(unsigned flags)
{
    if (flags & ~(unsigned)CU_CTX_FLAGS_MASK) return CUDA_ERROR_INVALID_VALUE;
    unsigned sched = flags & CU_CTX_SCHED_MASK;
    if (sched != 0 && sched != CU_CTX_SCHED_SPIN && sched != CU_CTX_SCHED_YIELD &&
        sched != CU_CTX_SCHED_BLOCKING_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult push(struct cpudrv_ctx *c)
{
    if (depth == STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    stack[depth++] = c;
    return CUDA_SUCCESS;
}

// Creates a context on dev and pushes it; affinity and CIG parameters are not supported.
CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                     CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (!rc) rc = cpudrv_ctx_check_flags(flags);
    if (rc) return TR(rc);
    if (!pctx) return TR(CUDA_ERROR_INVALID_VALUE);
    if (ctxCreateParams) {
        if (ctxCreateParams->execAffinityParams && ctxCreateParams->numExecAffinityParams > 0)
            return TR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
        if (ctxCreateParams->cigParams) return TR(CUDA_ERROR_NOT_SUPPORTED);
    }
    if (depth == STACK_MAX) return TR(CUDA_ERROR_OUT_OF_MEMORY);
    if (cpudrv_ctx_delay_ms) usleep((useconds_t)cpudrv_ctx_delay_ms * 1000); // no lock held
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = cpudrv_ctx_new(dev, flags, 0, &c);
    if (!rc) {
        cpudrv_stats.ctx_created++;
        cpudrv_stats_changed();
        push(c);
        *pctx = (CUcontext)c;
    }
    cpudrv_unlock();
    return TR(rc);
}

// Destroys a context made by cuCtxCreate, waiting for its work first.
CUresult cuCtxDestroy(CUcontext ctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_ctx *c = cpudrv_obj_find(ctx, CPUDRV_K_CTX);
    if (!c || c->primary || c->green || c->dying) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_INVALID_CONTEXT);
    }
    cpudrv_ctx_forget_current(c);
    cpudrv_ctx_teardown(c);
    c->active = 0;
    cpudrv_obj_unpublish(&c->o);
    cpudrv_ctx_stats_live(-1);
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// cpudrv_big held: a live context handle (INVALID_CONTEXT otherwise).
CUresult cpudrv_ctx_find(CUcontext ctx, struct cpudrv_ctx **out)
{
    struct cpudrv_ctx *c = cpudrv_obj_find(ctx, CPUDRV_K_CTX);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

// Replaces the top of the calling thread's stack (NULL pops it).
CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!ctx) {
        if (depth) depth--;
        return TR(CUDA_SUCCESS);
    }
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = cpudrv_ctx_find(ctx, &c);
    cpudrv_unlock();
    if (rc) return TR(rc);
    if (depth)
        stack[depth - 1] = c;
    else
        stack[depth++] = c;
    return TR(CUDA_SUCCESS);
}

// The top of the calling thread's stack, or NULL.
CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pctx) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_ctx *c = depth ? stack[depth - 1] : NULL;
    *pctx = c && c->o.live ? (CUcontext)c : NULL;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Pushes a context on the calling thread's stack.
CUresult cuCtxPushCurrent(CUcontext ctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = cpudrv_ctx_find(ctx, &c);
    cpudrv_unlock();
    if (!rc) rc = push(c);
    return TR(rc);
}

// Pops the calling thread's stack; INVALID_CONTEXT when it is empty.
CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!depth) return TR(CUDA_ERROR_INVALID_CONTEXT);
    struct cpudrv_ctx *c = stack[--depth];
    if (pctx) *pctx = (CUcontext)c;
    return TR(CUDA_SUCCESS);
}
