// Green contexts: SM resources split in groups of 8 SMs (2 with
// CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING), a descriptor per set of groups, and
// green contexts that share the device's memory with its primary context. Nothing limits
// the CPU time a green context's work gets: the SM count is bookkeeping.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>

#define RES_MAGIC 0x43505544u // "CPUD", in the resource's internal padding

// What cpudrv keeps in CUdevResource::_internal_padding.
struct res_tag {
    uint32_t magic;
    int32_t dev;
    uint64_t split; // id of the split that produced it (0: the whole device)
};

struct desc {
    struct cpudrv_obj o;
    int dev;
    unsigned sms;
};

static void fill(CUdevResource *r, int dev, unsigned sms, uint64_t split)
{
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    r->sm.smCount = sms;
    r->sm.minSmPartitionSize = CPUDRV_SM_GRANULE;
    r->sm.smCoscheduledAlignment = CPUDRV_SM_GRANULE;
    struct res_tag t = {RES_MAGIC, dev, split};
    memcpy(r->_internal_padding, &t, sizeof t);
}

static int tag_of(const CUdevResource *r, struct res_tag *t)
{
    memcpy(t, r->_internal_padding, sizeof *t);
    return r->type == CU_DEV_RESOURCE_TYPE_SM && t->magic == RES_MAGIC && t->dev >= 0 &&
           t->dev < cpudrv_ndev;
}

// The SM resource of a device: all 132 SMs.
CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type)
{
    CUresult rc = cpudrv_dev_check(device);
    if (rc) return TR(rc);
    if (!resource) return TR(CUDA_ERROR_INVALID_VALUE);
    if (type != CU_DEV_RESOURCE_TYPE_SM) return TR(CUDA_ERROR_INVALID_RESOURCE_TYPE);
    fill(resource, device, CPUDRV_SM_COUNT, 0);
    return TR(CUDA_SUCCESS);
}

// Splits an SM resource into groups of minCount SMs (rounded up to the granularity).
CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                                     const CUdevResource *input, CUdevResource *remaining,
                                     unsigned int useFlags, unsigned int minCount)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    unsigned known = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                     CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
    if (!nbGroups || !input || (useFlags & ~known) || (result && !*nbGroups))
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct res_tag t;
    if (!tag_of(input, &t)) return TR(CUDA_ERROR_INVALID_RESOURCE_TYPE);
    unsigned total = input->sm.smCount;
    unsigned gran =
        useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING ? 2 : CPUDRV_SM_GRANULE;
    if (minCount > total) return TR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    unsigned m = minCount ? (minCount + gran - 1) / gran * gran : gran;
    if (m > total) return TR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    unsigned possible = total / m;
    if (!result) {
        *nbGroups = possible;
        return TR(CUDA_SUCCESS);
    }
    unsigned n = *nbGroups < possible ? *nbGroups : possible;
    uint64_t split = cpudrv_next_id();
    for (unsigned i = 0; i < n; i++)
        fill(&result[i], t.dev, m, split);
    if (remaining) fill(remaining, t.dev, total - n * m, split);
    *nbGroups = n;
    return TR(CUDA_SUCCESS);
}

static void desc_release(struct cpudrv_obj *o)
{
    free(o);
}

// A descriptor of SM resources from one device (several only from the same split).
CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                                   unsigned int nbResources)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!phDesc || !resources || !nbResources) return TR(CUDA_ERROR_INVALID_VALUE);
    struct res_tag first = {0, 0, 0};
    unsigned sms = 0;
    for (unsigned i = 0; i < nbResources; i++) {
        struct res_tag t;
        if (!tag_of(&resources[i], &t)) return TR(CUDA_ERROR_INVALID_RESOURCE_TYPE);
        if (i == 0)
            first = t;
        else if (t.dev != first.dev || t.split != first.split || !t.split)
            return TR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
        sms += resources[i].sm.smCount;
    }
    if (!sms || sms > CPUDRV_SM_COUNT) return TR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    struct desc *d = calloc(1, sizeof *d);
    if (!d) return TR(CUDA_ERROR_OUT_OF_MEMORY);
    d->dev = first.dev;
    d->sms = sms;
    cpudrv_lock();
    cpudrv_obj_init(&d->o, CPUDRV_K_DESC, NULL, desc_release);
    cpudrv_obj_publish(&d->o);
    cpudrv_unlock();
    *phDesc = (CUdevResourceDesc)d;
    return TR(CUDA_SUCCESS);
}

static void green_release(struct cpudrv_obj *o)
{
    free(o);
}

// A green context on dev with the descriptor's SMs (retains the primary context).
CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                          unsigned int flags)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!phCtx || flags != CU_GREEN_CTX_DEFAULT_STREAM) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct desc *d = cpudrv_obj_find(desc, CPUDRV_K_DESC);
    struct cpudrv_green *g = NULL;
    struct cpudrv_ctx *prim, *c = NULL;
    if (!d || d->dev != dev) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!(g = calloc(1, sizeof *g))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!(rc = cpudrv_primary_retain(dev, &prim))) {
        rc = cpudrv_ctx_new(dev, 0, 2, &c);
        if (rc) cpudrv_primary_release(dev);
    }
    if (!rc) {
        cpudrv_obj_init(&g->o, CPUDRV_K_GREEN, NULL, green_release);
        g->ctx = c;
        g->dev = dev;
        g->sms = d->sms;
        g->id = cpudrv_next_id();
        c->green = g;
        cpudrv_obj_publish(&g->o);
        cpudrv_stats.green_created++;
        cpudrv_stats.green_live++;
        cpudrv_stats_changed();
        *phCtx = (CUgreenCtx)g;
    } else {
        free(g);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Destroys a green context, its streams and events, and releases the primary context.
CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_green *g = cpudrv_obj_find(hCtx, CPUDRV_K_GREEN);
    if (!g) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_INVALID_HANDLE);
    }
    cpudrv_obj_ref(&g->o); // g->ctx->green still points here: keep it until the end
    cpudrv_obj_unpublish(&g->o);
    struct cpudrv_ctx *c = g->ctx;
    cpudrv_ctx_forget_current(c);
    cpudrv_ctx_teardown(c);
    c->active = 0;
    cpudrv_obj_unpublish(&c->o);
    cpudrv_primary_release(g->dev);
    cpudrv_stats.green_live--;
    cpudrv_stats_changed();
    c->green = NULL;
    cpudrv_obj_put(&g->o);
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// The CUcontext through which a green context is made current.
CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pContext) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_green *g = cpudrv_obj_find(hCtx, CPUDRV_K_GREEN);
    if (g) *pContext = (CUcontext)g->ctx;
    cpudrv_unlock();
    return TR(g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// The SM resource of a green context.
CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource *resource, CUdevResourceType type)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!resource) return TR(CUDA_ERROR_INVALID_VALUE);
    if (type != CU_DEV_RESOURCE_TYPE_SM) return TR(CUDA_ERROR_INVALID_RESOURCE_TYPE);
    cpudrv_lock();
    struct cpudrv_green *g = cpudrv_obj_find(hCtx, CPUDRV_K_GREEN);
    if (g) fill(resource, g->dev, g->sms, 0);
    cpudrv_unlock();
    return TR(g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// The SM resource of a context (a green context's share, or the whole device).
CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource *resource, CUdevResourceType type)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!resource) return TR(CUDA_ERROR_INVALID_VALUE);
    if (type != CU_DEV_RESOURCE_TYPE_SM) return TR(CUDA_ERROR_INVALID_RESOURCE_TYPE);
    cpudrv_lock();
    struct cpudrv_ctx *c = hCtx ? cpudrv_obj_find(hCtx, CPUDRV_K_CTX) : cpudrv_ctx_current();
    if (c) fill(resource, c->dev, c->green ? c->green->sms : CPUDRV_SM_COUNT, 0);
    cpudrv_unlock();
    return TR(c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

// A stream of a green context (CU_STREAM_NON_BLOCKING is required).
CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags,
                                int priority)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!phStream || flags != CU_STREAM_NON_BLOCKING) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_green *g = cpudrv_obj_find(greenCtx, CPUDRV_K_GREEN);
    struct cpudrv_stream *s;
    if (!g)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        rc = cpudrv_stream_new(g->ctx, flags, priority, 0, &s);
    cpudrv_unlock();
    if (!rc) *phStream = (CUstream)s;
    return TR(rc);
}

// Process-unique id of a green context.
CUresult cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long *greenCtxId)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!greenCtxId) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_green *g = cpudrv_obj_find(greenCtx, CPUDRV_K_GREEN);
    if (g) *greenCtxId = g->id;
    cpudrv_unlock();
    return TR(g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}
