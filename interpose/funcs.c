/* What the client knows of each function and kernel it got from the server: the parameter
 * layout (to pack cuLaunchKernel's kernelParams into one buffer) and the limits a launch is
 * checked against before it is sent, so that configuration errors come back at once. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct shim_func {
    uint64_t handle;
    uint64_t owner; /* module or library it came from */
    uint32_t ctx;
    uint32_t nparams;
    uint32_t param_bytes;
    int32_t max_threads;
    int32_t static_smem;
    _Atomic int32_t max_dynamic_smem;
    _Atomic uint64_t used_on; /* bit d: launched or made a node on device d (first_use) */
    uint32_t (*layout)[2];    /* {offset, size} per parameter */
    UT_hash_handle hh;
};

/* Guarded by funcs_lock. Entries are freed only by shim_func_drop (module unload, context
 * destroy); a launch racing with the unload of its own module is the caller's bug, as
 * with the real driver. */
static pthread_rwlock_t funcs_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct shim_func *funcs;

/* The same function's record: what packing and checking a launch read. */
static int same_shape(const struct shim_func *a, const struct shim_func *b)
{
    return a->nparams == b->nparams && a->param_bytes == b->param_bytes &&
           a->max_threads == b->max_threads && a->static_smem == b->static_smem &&
           (!a->nparams || memcmp(a->layout, b->layout, (size_t)a->nparams * 8) == 0);
}

CUresult shim_func_add(const uint8_t *data, uint32_t len, uint64_t owner, uint32_t ctx,
                       uint64_t *handle)
{
    struct chan_function h;
    if (len < sizeof(h)) return CUDA_ERROR_INVALID_VALUE;
    memcpy(&h, data, sizeof(h));
    if (h.nparams > CHAN_MAX_PARAMS || len < sizeof(h) + (size_t)h.nparams * 8)
        return CUDA_ERROR_INVALID_VALUE;
    *handle = h.handle;
    struct shim_func *f = calloc(1, sizeof(*f)), *old = NULL;
    if (!f || (h.nparams && !(f->layout = malloc((size_t)h.nparams * 8)))) {
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    f->handle = h.handle;
    f->owner = owner;
    f->ctx = ctx;
    f->nparams = h.nparams;
    f->param_bytes = h.param_bytes;
    f->max_threads = h.max_threads;
    f->static_smem = h.static_smem;
    f->max_dynamic_smem = h.max_dynamic_smem;
    if (h.nparams) memcpy(f->layout, data + sizeof(h), (size_t)h.nparams * 8);
    pthread_rwlock_wrlock(&funcs_lock);
    HASH_FIND(hh, funcs, &h.handle, sizeof(uint64_t), old);
    if (old && same_shape(old, f)) {
        /* The same function asked for again: the record a launch may be reading stays, with
         * the driver's limit as it is now (cuKernelSetAttribute on its kernel, say, raised it
         * since: cudart meets NCCL's kernels before NCCL raises their shared memory). */
        atomic_store(&old->max_dynamic_smem, f->max_dynamic_smem);
        pthread_rwlock_unlock(&funcs_lock);
        free(f->layout);
        free(f);
        return CUDA_SUCCESS;
    }
    /* A record of another function at this handle outlived its function (whose unload
     * this process never saw dropped it) and the driver gave the handle again: the
     * server's answer is what the handle is now. Packing by the old layout would read
     * parameters the caller never passed. */
    if (old) HASH_DEL(funcs, old);
    HASH_ADD(hh, funcs, handle, sizeof(uint64_t), f);
    pthread_rwlock_unlock(&funcs_lock);
    if (old) {
        free(old->layout);
        free(old);
    }
    return CUDA_SUCCESS;
}

const struct shim_func *shim_func_get(uint64_t handle)
{
    struct shim_func *f = NULL;
    pthread_rwlock_rdlock(&funcs_lock);
    HASH_FIND(hh, funcs, &handle, sizeof(uint64_t), f);
    pthread_rwlock_unlock(&funcs_lock);
    return f;
}

void shim_func_drop(uint64_t owner, uint32_t ctx)
{
    struct shim_func *f, *t;
    pthread_rwlock_wrlock(&funcs_lock);
    HASH_ITER(hh, funcs, f, t)
        if ((owner && f->owner == owner) || (ctx && f->ctx == ctx)) {
            HASH_DEL(funcs, f);
            free(f->layout);
            free(f);
        }
    pthread_rwlock_unlock(&funcs_lock);
}

uint32_t shim_func_param_bytes(const struct shim_func *f)
{
    return f->param_bytes;
}

uint32_t shim_func_pack(const struct shim_func *f, void **params, uint8_t *buf)
{
    memset(buf, 0, f->param_bytes);
    for (uint32_t i = 0; i < f->nparams; i++)
        memcpy(buf + f->layout[i][0], params[i], f->layout[i][1]);
    return f->param_bytes;
}

CUresult shim_func_check_launch(const struct shim_func *f, const unsigned grid[3],
                                const unsigned block[3], unsigned smem)
{
    int dev = shim_current_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    const int32_t *a = shim_conn.dev.dev[dev].attr;
    static const CUdevice_attribute gmax[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
                                               CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                               CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
    static const CUdevice_attribute bmax[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
                                               CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                               CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
    uint64_t threads = 1;
    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
        if (grid[i] > (unsigned)a[gmax[i]] || block[i] > (unsigned)a[bmax[i]])
            return CUDA_ERROR_INVALID_VALUE;
        threads *= block[i];
    }
    if (threads > (uint64_t)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK])
        return CUDA_ERROR_INVALID_VALUE;
    /* More threads than this function's registers allow. */
    if (f->max_threads > 0 && threads > (uint64_t)f->max_threads)
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    if (f->max_dynamic_smem >= 0 && smem > (unsigned)f->max_dynamic_smem) {
        /* The limit known here may be stale: a function's limit is also its kernel's on that
         * device (cuKernelSetAttribute) and another handle's of the same kernel. Refused
         * only by the driver's own value, asked once; a wrong refusal here failed NCCL's first
         * collective with CUDA_ERROR_INVALID_VALUE (issue 30). */
        int now = -1;
        if (cuFuncGetAttribute(&now, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               (CUfunction)(uintptr_t)f->handle) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_VALUE;
        shim_func_set_attr(f->handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, now);
        if (now < 0 || smem > (unsigned)now) return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

int shim_func_used_on(const struct shim_func *f, int dev)
{
    return dev >= 0 && dev < 64 &&
           (atomic_load_explicit(&f->used_on, memory_order_relaxed) & (1ull << dev));
}

void shim_func_mark_used(const struct shim_func *f, int dev)
{
    struct shim_func *m = (struct shim_func *)f; /* used_on is the one field written */
    if (dev >= 0 && dev < 64)
        atomic_fetch_or_explicit(&m->used_on, 1ull << dev, memory_order_relaxed);
}

void shim_func_set_attr(uint64_t handle, int attr, int value)
{
    if (attr != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return;
    pthread_rwlock_rdlock(&funcs_lock);
    struct shim_func *f = NULL;
    HASH_FIND(hh, funcs, &handle, sizeof(uint64_t), f);
    if (f) f->max_dynamic_smem = value;
    pthread_rwlock_unlock(&funcs_lock);
}

uint32_t shim_func_ctx(uint64_t handle, int module)
{
    uint32_t ctx = 0;
    pthread_rwlock_rdlock(&funcs_lock);
    if (!module) {
        struct shim_func *f;
        HASH_FIND(hh, funcs, &handle, sizeof(handle), f);
        if (f) ctx = f->ctx;
    } else {
        for (struct shim_func *f = funcs; f && !ctx; f = f->hh.next)
            if (f->owner == handle) ctx = f->ctx;
    }
    pthread_rwlock_unlock(&funcs_lock);
    return ctx;
}
