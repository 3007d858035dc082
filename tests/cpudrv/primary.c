// Primary contexts: one per device, retained and released by count; the last release
// (or a reset) destroys everything the context owned, and the next retain revives it.
#include "cpudrv.h"

#include <time.h>
#include <unistd.h>

// cpudrv_big held (dropped while waiting): returns dev's primary context once no teardown
// of it is in progress, so that a retain or release never interleaves with one.
static struct cpudrv_ctx *settled(int dev)
{
    struct cpudrv_ctx *c = cpudrv_devs[dev].primary;
    while (c->dying) {
        cpudrv_unlock();
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        cpudrv_lock();
    }
    return c;
}

// Retains/releases dev's primary context (also used by green contexts).
CUresult cpudrv_primary_retain(int dev, struct cpudrv_ctx **out)
{
    struct cpudrv_ctx *c = settled(dev);
    if (!c->active) {
        CUresult rc = cpudrv_ctx_activate(c);
        if (rc) return rc;
        c->active = 1;
        cpudrv_stats.prim_activations++;
        cpudrv_stats.prim_active++;
        cpudrv_ctx_stats_live(1);
    }
    c->prim_refs++;
    *out = c;
    return CUDA_SUCCESS;
}

// Drops one retain of dev's primary context; the last one tears it down.
void cpudrv_primary_release(int dev)
{
    struct cpudrv_ctx *c = settled(dev);
    if (c->prim_refs && --c->prim_refs == 0 && c->active) {
        cpudrv_ctx_teardown(c);
        c->active = 0;
        cpudrv_stats.prim_active--;
        cpudrv_ctx_stats_live(-1);
    }
}

// Retains dev's primary context, activating it on the first retain.
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!pctx) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    cpudrv_lock();
    rc = cpudrv_primary_retain(dev, &c);
    cpudrv_unlock();
    if (!rc) *pctx = (CUcontext)c;
    return TR(rc);
}

// Drops one retain; the last one destroys the primary context's resources.
CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    cpudrv_lock();
    int last = 0;
    if (settled(dev)->prim_refs == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        last = settled(dev)->prim_refs == 1;
        cpudrv_primary_release(dev);
    }
    cpudrv_unlock();
    if (last && cpudrv_release_delay_ms) usleep((useconds_t)cpudrv_release_delay_ms * 1000);
    return TR(rc);
}

// Destroys every resource of the primary context and marks it inactive.
CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_ctx *c = settled(dev);
    if (c->active) {
        cpudrv_ctx_teardown(c);
        c->active = 0;
        cpudrv_stats.prim_active--;
        cpudrv_ctx_stats_live(-1);
    }
    c->prim_refs = 0;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Flags of the primary context (allowed while it is active since CUDA 11).
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (!rc) rc = cpudrv_ctx_check_flags(flags);
    if (rc) return TR(rc);
    cpudrv_lock();
    cpudrv_devs[dev].primary->flags = flags;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Flags and whether the primary context is active.
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!flags || !active) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    *flags = cpudrv_devs[dev].primary->flags;
    *active = cpudrv_devs[dev].primary->active;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}
