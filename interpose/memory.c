/* Pinned host memory (a sealed memfd the server maps at one address in both processes and
 * registers with the driver, so that the GPU copies straight from/to the client's pages),
 * and pointer queries answered from the client's own ranges. Device memory is described in
 * cuda_symbols.txt (its ranges enter the mirror from the description). */
#include "interpose/shim.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

CUresult SHIM_IMPL(cuMemGetAddressRange_v2)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    struct shim_range rg;
    if (shim_range_find(dptr, 1, &rg) != 0 || rg.kind == SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = rg.base;
    if (psize)
        *psize = rg.size;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pinned host memory */

/* Host allocations receive their fd on the socket in reply order: one at a time. */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = shim_capture_unsafe()) != CUDA_SUCCESS)
        return r;
    struct chan_host_alloc m = {.bytes = bytesize, .flags = flags};
    pthread_mutex_lock(&host_lock);
    /* The server picks an address free in its own address space; if it is taken in ours,
     * it picks another. */
    for (m.attempt = 0; m.attempt < 8; m.attempt++) {
        uint64_t rep[2];
        uint32_t n = 0;
        r = shim_rpc(CHAN_OP_HOST_ALLOC, &m, sizeof(m), rep, sizeof(rep), &n);
        if (r != CUDA_SUCCESS)
            break;
        int fd = shim_recv_fd();
        if (fd < 0 || n != sizeof(rep)) {
            r = shim_dead_error();
            break;
        }
        void *want = (void *)(uintptr_t)rep[0];
        void *p = mmap(want, rep[1], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
                       fd, 0);
        close(fd);
        if (p == want) {
            struct shim_range rg = {.base = rep[0], .size = bytesize,
                                    .kind = SHIM_HT_MEM_PINNED,
                                    .ctx = shim_current_ctx_id(), .flags = flags,
                                    .mapped = rep[1]};
            shim_range_add(&rg);
            *pp = p;
            break;
        }
        if (p != MAP_FAILED)
            munmap(p, rep[1]); /* an old kernel ignored the hint */
        uint64_t a = rep[0];
        shim_rpc(CHAN_OP_HOST_FREE, &a, sizeof(a), NULL, 0, NULL);
        m.avoid = rep[0];
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&host_lock);
    return r;
}

CUresult SHIM_IMPL(cuMemHostAlloc)(void **pp, size_t bytesize, unsigned int Flags)
{
    return host_alloc(pp, bytesize, Flags);
}

CUresult SHIM_IMPL(cuMemAllocHost_v2)(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

CUresult SHIM_IMPL(cuMemFreeHost)(void *p)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    struct shim_range rg;
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (!p || shim_range_find(a, 1, &rg) != 0 || rg.base != a || rg.kind != SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = shim_capture_unsafe()) != CUDA_SUCCESS)
        return r;
    r = shim_rpc(CHAN_OP_HOST_FREE, &a, sizeof(a), NULL, 0, NULL);
    if (r == CUDA_SUCCESS) {
        shim_range_remove(a, NULL);
        munmap(p, rg.mapped);
    }
    return r;
}

CUresult SHIM_IMPL(cuMemHostGetDevicePointer_v2)(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    struct shim_range rg;
    if (!pdptr || Flags != 0 || shim_range_find((uint64_t)(uintptr_t)p, 1, &rg) != 0 ||
        rg.kind != SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    /* Unified addressing: the device sees pinned memory at its host address. */
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuMemHostGetFlags)(unsigned int *pFlags, void *p)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    struct shim_range rg;
    if (!pFlags || shim_range_find((uint64_t)(uintptr_t)p, 1, &rg) != 0 ||
        rg.kind != SHIM_HT_MEM_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    *pFlags = rg.flags;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- pointer attributes */

/* Writes one attribute of a known range; CUDA_ERROR_INVALID_VALUE for ones that do not
 * apply. `found` is 0 for memory the shim does not know (pageable host memory). */
static CUresult attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr, int found,
                          const struct shim_range *rg)
{
    int dev = -1;
    CUcontext ctx = NULL;
    if (found) {
        ctx = shim_ctx_by_id(rg->ctx);
        shim_ctx_lookup(ctx, NULL, &dev);
    }
    int host = found && rg->kind == SHIM_HT_MEM_PINNED;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUcontext *)data = ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        /* Unique among live allocations of this process: the base address. */
        *(unsigned long long *)data = rg->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = dev;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = rg->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(size_t *)data = rg->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
        /* The pool a range belongs to when its kind belongs to pools (the description
         * named the pool: cuMemAllocFromPoolAsync); NULL otherwise (cuMemAllocAsync's pool
         * is the server's choice). */
        *(CUmemoryPool *)data = NULL;
        for (int i = 0; i < shim_types[rg->kind].nparents; i++)
            if (shim_types[rg->kind].parents[i] == SHIM_HT_CUmemoryPool)
                *(CUmemoryPool *)data = (CUmemoryPool)(uintptr_t)rg->owner;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult SHIM_IMPL(cuPointerGetAttribute)(void *data, CUpointer_attribute attribute_,
                                       CUdeviceptr ptr)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct shim_range rg;
    int found = shim_range_find(ptr, 1, &rg) == 0;
    return attribute(data, attribute_, ptr, found, &rg);
}

CUresult SHIM_IMPL(cuPointerGetAttributes)(unsigned int numAttributes,
                                        CUpointer_attribute *attributes, void **data,
                                        CUdeviceptr ptr)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct shim_range rg;
    int found = shim_range_find(ptr, 1, &rg) == 0;
    /* Unlike the singular call, unknown pointers are not an error: the values read as
     * zero (memory type 0 = unregistered host memory). */
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (attribute(data[i], attributes[i], ptr, found, &rg) != CUDA_SUCCESS) {
            switch (attributes[i]) {
            case CU_POINTER_ATTRIBUTE_CONTEXT:
            case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
                *(void **)data[i] = NULL;
                break;
            case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            case CU_POINTER_ATTRIBUTE_BUFFER_ID:
            case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
                *(unsigned long long *)data[i] = 0;
                break;
            case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                *(int *)data[i] = -2;
                break;
            default:
                *(unsigned *)data[i] = 0;
                break;
            }
        }
    }
    return CUDA_SUCCESS;
}
