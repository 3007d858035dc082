/* Contexts. A client's contexts are its own objects: the server has one real context per
 * device, shared by every client, and only learns a context's id so that it can tag what
 * is made in it and free exactly that when the client destroys or resets it. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#define CTX_MAGIC 0x4354584du

struct shim_ctx {
    void *self; /* hash key: the handle the application holds */
    uint32_t magic;
    uint32_t id;
    int device;
    unsigned flags;
    int primary;
    int refcount; /* primary: retains; others: 1 while alive */
    int active;   /* the server knows this id */
    /* Per-context hints of the real driver, whose context is shared: kept for this client's
     * context, read back by any of its threads, never applied. Guarded by ctx_lock. */
    CUfunc_cache cache_pref;
    CUsharedconfig smem_pref;
    UT_hash_handle hh;
};

/* Guarded by ctx_lock: the live contexts (by address, so a handle is checked before it is
 * dereferenced), the primary context of each device, the next id. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_ctx *live;
static struct shim_ctx primaries[CHAN_MAX_DEVICES];
static uint32_t next_id = 64; /* ids 1..CHAN_MAX_DEVICES are the primary contexts */

/* The thread's context stack; the top is current. */
#define STACK_MAX 64
static __thread struct shim_ctx *stack[STACK_MAX];
static __thread int depth;

/* Moves (under ctx_lock) whenever a context enters or leaves the live table or is made
 * inactive. A thread that found its current context alive at a value needs neither the
 * lock nor the table again while the value stays: nearly every call asks (current()), and
 * the lock is every thread's. */
static _Atomic uint64_t ctx_gen;
static __thread struct {
    struct shim_ctx *c;
    uint64_t gen;
} known_cur;

static void ctx_changed(void)
{
    atomic_fetch_add_explicit(&ctx_gen, 1, memory_order_release);
}

static struct shim_ctx *find_live(CUcontext c)
{
    struct shim_ctx *x = NULL;
    void *key = c;
    HASH_FIND_PTR(live, &key, x);
    return x;
}

/* The thread's current context if it is still alive; caller holds ctx_lock. */
static struct shim_ctx *current_locked(void)
{
    if (depth == 0) return NULL;
    struct shim_ctx *c = stack[depth - 1];
    return c && find_live((CUcontext)c) && c->active ? c : NULL;
}

/* The thread's current context if it is still alive (what current_locked() says, taking
 * the lock only when a context changed since this thread last asked). A context destroyed
 * by another thread just after is refused by the server, as a stale id always is. */
static struct shim_ctx *current(void)
{
    if (depth == 0 || !stack[depth - 1]) return NULL;
    struct shim_ctx *c = stack[depth - 1];
    if (known_cur.c == c && known_cur.gen == atomic_load_explicit(&ctx_gen, memory_order_acquire))
        return c;
    pthread_mutex_lock(&ctx_lock);
    c = current_locked();
    uint64_t g = atomic_load_explicit(&ctx_gen, memory_order_relaxed);
    pthread_mutex_unlock(&ctx_lock);
    if (c) {
        known_cur.c = c;
        known_cur.gen = g;
    }
    return c;
}

CUresult shim_need_ctx(void)
{
    return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult shim_ready_ctx(void)
{
    CUresult r = shim_ready();
    return r != CUDA_SUCCESS ? r : shim_need_ctx();
}

int shim_ctx_id_device(uint32_t id)
{
    if (id >= 1 && id <= CHAN_MAX_DEVICES) return (int)id - 1; /* a primary context's */
    int dev = -1;
    pthread_mutex_lock(&ctx_lock);
    for (struct shim_ctx *c = live; c; c = c->hh.next)
        if (c->id == id) {
            dev = c->device;
            break;
        }
    pthread_mutex_unlock(&ctx_lock);
    return dev;
}

uint32_t shim_ctx_of_device(int dev)
{
    struct shim_ctx *c = current();
    if (c && c->device == dev) return c->id;
    uint32_t id = 0;
    pthread_mutex_lock(&ctx_lock);
    if (dev >= 0 && dev < CHAN_MAX_DEVICES && primaries[dev].magic == CTX_MAGIC &&
        primaries[dev].active)
        id = primaries[dev].id;
    for (struct shim_ctx *x = live; x && !id; x = x->hh.next)
        if (x->device == dev && x->active) id = x->id;
    pthread_mutex_unlock(&ctx_lock);
    return id;
}

int shim_current_device(void)
{
    struct shim_ctx *c = current(); /* a context's device never changes */
    return c ? c->device : -1;
}

CUresult shim_ctx_lookup(CUcontext h, uint32_t *id, int *device)
{
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = h ? find_live(h) : current_locked();
    CUresult r = CUDA_ERROR_INVALID_CONTEXT;
    if (c && c->active) {
        if (id) *id = c->id;
        if (device) *device = c->device;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&ctx_lock);
    return r;
}

CUcontext shim_ctx_by_id(uint32_t id)
{
    CUcontext r = NULL;
    pthread_mutex_lock(&ctx_lock);
    for (struct shim_ctx *c = live; c; c = c->hh.next)
        if (c->id == id && c->active) r = (CUcontext)c;
    pthread_mutex_unlock(&ctx_lock);
    return r;
}

size_t shim_ctx_active_ids(uint32_t *out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&ctx_lock);
    for (struct shim_ctx *c = live; c; c = c->hh.next)
        if (c->active && n++ < cap) out[n - 1] = c->id;
    pthread_mutex_unlock(&ctx_lock);
    return n;
}

/* Tells the server about a context; caller holds ctx_lock. */
static CUresult activate(struct shim_ctx *c)
{
    /* The first context may move this client to its GPU's own server (conn.c). */
    CUresult r = shim_gpu_server_for(c->device);
    if (r != CUDA_SUCCESS) return r;
    struct chan_ctx m = {
        .id = c->id, .device = c->device, .flags = c->flags, .primary = (uint32_t)c->primary};
    /* Through the device's own connection where the process holds one per device. */
    struct shim_route saved;
    shim_route_begin(&saved, c->device, 0);
    r = shim_rpc(CHAN_OP_CTX_CREATE, &m, sizeof(m), NULL, 0, NULL);
    shim_route_end(&saved);
    if (r == CUDA_SUCCESS) c->active = 1;
    return r;
}

/* What each range of a destroyed context is handed to as it leaves the mirror: memory.c's
 * (pinned and managed memory die with the context they were made in), set as the library
 * loads, so that this file names none of the families whose memory it is. */
static void (*range_gone)(const struct shim_range *r);

void shim_ctx_on_range_gone(void (*fn)(const struct shim_range *r))
{
    range_gone = fn;
}

/* Who wants to hear of destroyed contexts; guarded by ctx_lock. */
static void (*on_destroy[4])(CUcontext);
static int non_destroy;

void shim_ctx_on_destroy(void (*fn)(CUcontext ctx))
{
    pthread_mutex_lock(&ctx_lock);
    if (non_destroy < (int)(sizeof(on_destroy) / sizeof(on_destroy[0])))
        on_destroy[non_destroy++] = fn;
    pthread_mutex_unlock(&ctx_lock);
}

/* Frees everything made in the context, server and client side; caller holds ctx_lock. */
static CUresult deactivate(struct shim_ctx *c)
{
    /* Listeners run without the lock (destructors may call back into the driver API). */
    void (*fns[4])(CUcontext);
    int n = non_destroy;
    memcpy(fns, on_destroy, sizeof(fns));
    pthread_mutex_unlock(&ctx_lock);
    for (int i = 0; i < n; i++)
        fns[i]((CUcontext)c);
    pthread_mutex_lock(&ctx_lock);
    struct chan_ctx m = {.id = c->id, .device = c->device};
    struct shim_route saved;
    shim_route_begin(&saved, c->device, 0);
    CUresult r = shim_rpc(CHAN_OP_CTX_DESTROY, &m, sizeof(m), NULL, 0, NULL);
    shim_route_end(&saved);
    c->active = 0;
    /* The preferences die with the context: a primary context retained again after a reset
     * or its last release starts from the defaults, as a new one does. */
    c->cache_pref = CU_FUNC_CACHE_PREFER_NONE;
    c->smem_pref = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;
    ctx_changed();
    shim_range_drop(c->id, 0, range_gone);
    shim_known_drop_ctx(c->id);
    shim_func_drop(0, c->id);
    return r;
}

/* The thread's stack changed: its requests carry the top's id from now (rpc.c). */
static void top_changed(void)
{
    struct shim_ctx *t = depth ? stack[depth - 1] : NULL;
    shim_set_current_ctx(t ? &t->id : NULL, t ? t->device : -1);
}

static void push(struct shim_ctx *c)
{
    if (depth < STACK_MAX) stack[depth++] = c;
    top_changed();
}

/* ---------------------------------------------------------------- primary contexts */

static struct shim_ctx *primary(CUdevice dev)
{
    struct shim_ctx *c = &primaries[dev];
    if (c->magic != CTX_MAGIC) {
        c->self = c;
        c->magic = CTX_MAGIC;
        c->id = (uint32_t)dev + 1;
        c->device = dev;
        c->primary = 1;
        HASH_ADD_PTR(live, self, c);
        ctx_changed();
    }
    return c;
}

CUcontext shim_primary_ctx(CUdevice dev)
{
    if (dev < 0 || dev >= CHAN_MAX_DEVICES || dev >= shim_conn.dev.ndev) return NULL;
    pthread_mutex_lock(&ctx_lock);
    CUcontext c = (CUcontext)primary(dev);
    pthread_mutex_unlock(&ctx_lock);
    return c;
}

CUresult SHIM_IMPL(cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = primary(dev);
    if (!c->active) r = activate(c);
    if (r == CUDA_SUCCESS) {
        c->refcount++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&ctx_lock);
    return r;
}

CUresult SHIM_IMPL(cuDevicePrimaryCtxRelease_v2)(CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = primary(dev);
    if (c->refcount <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (--c->refcount == 0)
        r = deactivate(c);
    pthread_mutex_unlock(&ctx_lock);
    return r;
}

CUresult SHIM_IMPL(cuDevicePrimaryCtxReset_v2)(CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = primary(dev);
    if (c->active) {
        r = deactivate(c);
        /* Retained handles stay valid: the context comes back, empty, at once. Where it
         * cannot (a fault lost the device to the server, as it loses it to a process
         * natively), the reset itself still succeeded, as natively: the context stays
         * inactive and the next retain or call in it returns why. */
        if (r == CUDA_SUCCESS && c->refcount > 0) activate(c);
    }
    c->flags = 0;
    pthread_mutex_unlock(&ctx_lock);
    return r;
}

CUresult SHIM_IMPL(cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = primary(dev);
    *flags = c->flags;
    *active = c->active && c->refcount > 0;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDevicePrimaryCtxSetFlags_v2)(CUdevice dev, unsigned int flags)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    /* Scheduling flags only matter to the real context, which the server owns; keep them so
     * that they read back. */
    if (flags &
        ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_MAP_HOST |
                    CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    primary(dev)->flags = flags;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- created contexts */

static CUresult create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    struct shim_ctx *c = calloc(1, sizeof(*c));
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ctx_lock);
    c->self = c;
    c->magic = CTX_MAGIC;
    c->id = next_id++;
    c->device = dev;
    c->flags = flags;
    c->refcount = 1;
    r = activate(c);
    if (r == CUDA_SUCCESS) {
        HASH_ADD_PTR(live, self, c);
        ctx_changed();
        push(c);
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&ctx_lock);
    if (r != CUDA_SUCCESS) free(c);
    return r;
}

CUresult SHIM_IMPL(cuCtxCreate_v2)(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return create(pctx, flags, dev);
}

CUresult SHIM_IMPL(cuCtxCreate_v3)(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev)
{
    if (numParams > 0 && paramsArray) return shim_refuse("cuCtxCreate with execution affinity");
    return create(pctx, flags, dev);
}

CUresult SHIM_IMPL(cuCtxCreate_v4)(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                   CUdevice dev)
{
    if (params &&
        ((params->execAffinityParams && params->numExecAffinityParams > 0) || params->cigParams))
        return shim_refuse("cuCtxCreate with execution affinity or CIG parameters");
    return create(pctx, flags, dev);
}

CUresult SHIM_IMPL(cuCtxDestroy_v2)(CUcontext ctx)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = ctx ? find_live(ctx) : NULL;
    if (!c || c->primary) {
        pthread_mutex_unlock(&ctx_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (c->active) r = deactivate(c);
    HASH_DEL(live, c);
    ctx_changed();
    /* Off this thread's stack; other threads that still have it current get
     * CUDA_ERROR_INVALID_CONTEXT (it is no longer live), as with the real driver. */
    for (int i = 0; i < depth; i++)
        if (stack[i] == c) stack[i] = NULL;
    while (depth && !stack[depth - 1])
        depth--;
    top_changed();
    pthread_mutex_unlock(&ctx_lock);
    /* Not freed: other threads' stacks may still hold the address (shim_current_ctx_id
     * reads its id without the lock, and reads 0 from here on). It is dead (off the live table), so
     * never used again. */
    c->magic = 0;
    c->id = 0;
    return r;
}

/* ---------------------------------------------------------------- current context */

CUresult SHIM_IMPL(cuCtxGetCurrent)(CUcontext *pctx)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = depth ? (CUcontext)stack[depth - 1] : NULL;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuCtxSetCurrent)(CUcontext ctx)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!ctx) {
        if (depth) depth--;
        top_changed();
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = find_live(ctx);
    pthread_mutex_unlock(&ctx_lock);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (depth) {
        stack[depth - 1] = c;
        top_changed();
    } else {
        push(c);
    }
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuCtxPushCurrent_v2)(CUcontext ctx)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = ctx ? find_live(ctx) : NULL;
    pthread_mutex_unlock(&ctx_lock);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (depth >= STACK_MAX) return CUDA_ERROR_INVALID_VALUE;
    push(c);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuCtxPopCurrent_v2)(CUcontext *pctx)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    struct shim_ctx *c = stack[--depth];
    top_changed();
    if (pctx) *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* Resolves `ctx` (NULL = current) under the lock and copies out the fields asked for. */
static CUresult ctx_fields(CUcontext ctx, struct shim_ctx *out)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = ctx ? find_live(ctx) : current_locked();
    if (c && c->active) *out = *c;
    pthread_mutex_unlock(&ctx_lock);
    return c && c->active ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult SHIM_IMPL(cuCtxGetDevice)(CUdevice *device)
{
    struct shim_ctx c;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(NULL, &c);
    if (r == CUDA_SUCCESS) *device = c.device;
    return r;
}

CUresult SHIM_IMPL(cuCtxGetDevice_v2)(CUdevice *device, CUcontext ctx)
{
    struct shim_ctx c;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(ctx, &c);
    if (r == CUDA_SUCCESS) *device = c.device;
    return r;
}

CUresult SHIM_IMPL(cuCtxGetFlags)(unsigned int *flags)
{
    struct shim_ctx c;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(NULL, &c);
    if (r == CUDA_SUCCESS) *flags = c.flags;
    return r;
}

CUresult SHIM_IMPL(cuCtxSetFlags)(unsigned int flags)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = current_locked();
    if (c) c->flags = flags;
    pthread_mutex_unlock(&ctx_lock);
    return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult SHIM_IMPL(cuCtxGetId)(CUcontext ctx, unsigned long long *ctxId)
{
    struct shim_ctx c;
    if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(ctx, &c);
    if (r == CUDA_SUCCESS) *ctxId = c.id;
    return r;
}

CUresult SHIM_IMPL(cuCtxGetApiVersion)(CUcontext ctx, unsigned int *version)
{
    struct shim_ctx c;
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(ctx, &c);
    if (r == CUDA_SUCCESS)
        *version = 3020; /* every context made through the v2+ API reports 3020 */
    return r;
}

/* Sets the current context's preferences given (NULL: left as they are). */
static CUresult set_prefs(const CUfunc_cache *cache, const CUsharedconfig *smem)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&ctx_lock);
    struct shim_ctx *c = current_locked();
    if (c && cache) c->cache_pref = *cache;
    if (c && smem) c->smem_pref = *smem;
    pthread_mutex_unlock(&ctx_lock);
    return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult SHIM_IMPL(cuCtxGetCacheConfig)(CUfunc_cache *pconfig)
{
    struct shim_ctx c;
    if (!pconfig) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(NULL, &c);
    if (r == CUDA_SUCCESS) *pconfig = c.cache_pref;
    return r;
}

CUresult SHIM_IMPL(cuCtxSetCacheConfig)(CUfunc_cache config)
{
    return set_prefs(&config, NULL);
}

CUresult SHIM_IMPL(cuCtxGetSharedMemConfig)(CUsharedconfig *pConfig)
{
    struct shim_ctx c;
    if (!pConfig) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(NULL, &c);
    if (r == CUDA_SUCCESS) *pConfig = c.smem_pref;
    return r;
}

CUresult SHIM_IMPL(cuCtxSetSharedMemConfig)(CUsharedconfig config)
{
    return set_prefs(NULL, &config);
}

CUresult SHIM_IMPL(cuCtxGetExecAffinity)(CUexecAffinityParam *pExecAffinity,
                                         CUexecAffinityType type)
{
    struct shim_ctx c;
    if (!pExecAffinity || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ctx_fields(NULL, &c);
    if (r == CUDA_SUCCESS) {
        pExecAffinity->type = type;
        pExecAffinity->param.smCount.val =
            (unsigned)shim_conn.dev.dev[c.device].attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
    }
    return r;
}
