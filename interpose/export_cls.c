/* CONTEXT_LOCAL_STORAGE_INTERFACE_V0301: cudart keeps its per-context state in the driver,
 * as values keyed by (context, key) with a destructor the driver runs when the context goes
 * away (destroyed, last primary release, primary reset). Contexts are client-side objects
 * here (context.c), so the map is too; context.c tells us when one goes. */
#include "interpose/export_tables.h"
#include "interpose/shim.h"

#include <stdlib.h>
#include <uthash.h>

typedef void (*cls_dtor)(CUcontext ctx, void *key, void *value);

struct cls_key {
    CUcontext ctx;
    void *key;
};

struct cls_entry {
    struct cls_key k; /* hash key: two pointers, no padding */
    void *value;
    cls_dtor dtor;
    struct cls_entry *gone; /* next on a list of entries taken out of the map */
    UT_hash_handle hh;
};

/* Guarded by cls_lock: every stored value of every context. */
static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cls_entry *cls_map;
/* The context.c listener is registered once, by the first put. */
static pthread_once_t cls_hooked = PTHREAD_ONCE_INIT;

/* CUDA_SUCCESS if `ctx` is a context of this process: a live one, or a device's primary
 * context even when not retained (cudart makes it current and looks it up before it
 * retains it). */
static CUresult known_ctx(CUcontext ctx)
{
    if (shim_ctx_lookup(ctx, NULL, NULL) == CUDA_SUCCESS) return CUDA_SUCCESS;
    for (int d = 0; d < shim_conn.dev.ndev; d++)
        if (shim_primary_ctx(d) == ctx) return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_CONTEXT;
}

/* The context an entry point means: `ctx`, or the current one when NULL. */
static CUresult resolve(CUcontext ctx, CUcontext *out)
{
    if (!ctx) {
        CUresult r = cuCtxGetCurrent(&ctx);
        if (r != CUDA_SUCCESS) return r;
        if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    }
    CUresult r = known_ctx(ctx);
    if (r == CUDA_SUCCESS) *out = ctx;
    return r;
}

/* Runs the destructors of everything stored in a context that is going away (called by
 * context.c without its lock; destructors may call back into the driver API). */
static void cls_context_gone(CUcontext ctx)
{
    struct cls_entry *e, *tmp, *gone = NULL;
    pthread_mutex_lock(&cls_lock);
    HASH_ITER(hh, cls_map, e, tmp) {
        if (e->k.ctx == ctx) {
            HASH_DEL(cls_map, e);
            e->gone = gone;
            gone = e;
        }
    }
    pthread_mutex_unlock(&cls_lock);
    while (gone) {
        e = gone;
        gone = e->gone;
        if (e->dtor) e->dtor(ctx, e->k.key, e->value);
        free(e);
    }
}

static void cls_hook(void)
{
    shim_ctx_on_destroy(cls_context_gone);
}

/* Slot 0: stores `value` under (ctx, key), replacing what was there (without running its
 * destructor: the caller replaces its own value); `dtor` runs when the context goes. */
static CUresult cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor)
{
    CUresult r = resolve(ctx, &ctx);
    if (r != CUDA_SUCCESS) return r;
    pthread_once(&cls_hooked, cls_hook);
    struct cls_key k = {.ctx = ctx, .key = key};
    struct cls_entry *e;
    pthread_mutex_lock(&cls_lock);
    HASH_FIND(hh, cls_map, &k, sizeof(k), e);
    if (!e && (e = calloc(1, sizeof(*e)))) {
        e->k = k;
        HASH_ADD(hh, cls_map, k, sizeof(k), e);
    }
    if (e) {
        e->value = value;
        e->dtor = dtor;
    }
    pthread_mutex_unlock(&cls_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Slot 1: forgets (ctx, key) without running its destructor (the owner is deleting it). */
static CUresult cls_delete(CUcontext ctx, void *key)
{
    CUresult r = resolve(ctx, &ctx);
    if (r != CUDA_SUCCESS) return r;
    struct cls_key k = {.ctx = ctx, .key = key};
    struct cls_entry *e;
    pthread_mutex_lock(&cls_lock);
    HASH_FIND(hh, cls_map, &k, sizeof(k), e);
    if (e) HASH_DEL(cls_map, e);
    pthread_mutex_unlock(&cls_lock);
    free(e);
    return CUDA_SUCCESS;
}

/* Slot 2: the value stored under (ctx, key); CUDA_ERROR_INVALID_HANDLE when none is. */
static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = resolve(ctx, &ctx);
    if (r != CUDA_SUCCESS) return r;
    struct cls_key k = {.ctx = ctx, .key = key};
    struct cls_entry *e;
    pthread_mutex_lock(&cls_lock);
    HASH_FIND(hh, cls_map, &k, sizeof(k), e);
    if (e) *value = e->value;
    pthread_mutex_unlock(&cls_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Slot 3: present in the driver's table, purpose unknown. */
static CUresult cls_slot3(void)
{
    return shim_export_unserved("CONTEXT_LOCAL_STORAGE_INTERFACE_V0301", 3);
}

/* No size word: this table starts with its first function and ends with NULL. */
const void *const shim_export_cls[5] = {
    (const void *)cls_put,
    (const void *)cls_delete,
    (const void *)cls_get,
    (const void *)cls_slot3,
    NULL,
};
