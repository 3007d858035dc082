// Pointer attributes, answered from the allocation table. Boolean attributes are written
// as a 4-byte unsigned int, as C callers of the driver declare them. Stream-ordered (pool)
// allocations and mappings of virtual memory belong to no context: their CONTEXT is NULL.
// For virtual memory, as on the real driver, RANGE_* is the reservation (also for an
// address of it that nothing is mapped at, in cuPointerGetAttributes) and MAPPING_* the
// mapping.
#include "cpudrv.h"

#include <string.h>

static int is_dev(const struct cpudrv_range *r)
{
    return r->type == CPUDRV_MEM_DEVICE || r->type == CPUDRV_MEM_GLOBAL ||
           r->type == CPUDRV_MEM_MAPPED;
}

// cpudrv_big held: the range RANGE_START_ADDR/RANGE_SIZE describe for p (r may be NULL).
static void user_range(const struct cpudrv_range *r, uintptr_t p, uintptr_t *base, size_t *size)
{
    *base = 0;
    *size = 0;
    if ((!r || r->type == CPUDRV_MEM_MAPPED) && cpudrv_vmm_reservation(p, base, size)) return;
    if (r) {
        *base = r->base;
        *size = r->size;
    }
}

// cpudrv_big held: the access the current context's device (else the memory's) has.
static unsigned access_flags(const struct cpudrv_range *r)
{
    if (!r) return 0;
    if (r->type != CPUDRV_MEM_MAPPED) return CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    struct cpudrv_ctx *c = cpudrv_ctx_current();
    // CUmemAccess_flags and the pointer attribute's flags share their values.
    return r->access[c ? c->dev : r->dev];
}

// cpudrv_big held. r is the range containing p or NULL; lenient (cuPointerGetAttributes)
// writes defaults for unknown pointers instead of failing.
static CUresult attr(CUpointer_attribute a, const struct cpudrv_range *r, uintptr_t p, void *data,
                     int lenient)
{
    if (!r && !lenient) {
        switch (a) {
        case CU_POINTER_ATTRIBUTE_CONTEXT:
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
            return CUDA_ERROR_INVALID_VALUE;
        default:
            break;
        }
    }
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = r ? (CUcontext)r->ctx : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        // Managed memory reads as device memory, as the driver reports it on discrete GPUs.
        *(unsigned *)data = !r                                           ? 0
                            : is_dev(r) || r->type == CPUDRV_MEM_MANAGED ? CU_MEMORYTYPE_DEVICE
                                                                         : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = r ? (CUdeviceptr)p : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (r && is_dev(r) && !lenient) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = r && !is_dev(r) ? (void *)p : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        return lenient ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = r ? r->id : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = r && r->type == CPUDRV_MEM_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = r ? r->dev : -2;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        // Pool memory is shared through its pool's handles, never through cuIpcGetMemHandle.
        *(unsigned *)data = r && r->type == CPUDRV_MEM_DEVICE && !r->pool;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
        uintptr_t base;
        size_t size;
        user_range(r, p, &base, &size);
        if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
            *(size_t *)data = size;
        else
            *(CUdeviceptr *)data = (CUdeviceptr)base;
        break;
    }
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = r ? (CUdeviceptr)r->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = r ? r->size : 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned *)data = r != NULL;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = r && r->type == CPUDRV_MEM_MAPPED
                                          ? (unsigned long long)r->phys->prop.requestedHandleTypes
                                          : 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = access_flags(r);
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = r ? (CUmemoryPool)r->pool : NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// One attribute of a pointer; INVALID_VALUE for pointers the driver does not know.
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!data) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    rc = attr(attribute, cpudrv_mem_find((uintptr_t)ptr), (uintptr_t)ptr, data, 0);
    cpudrv_unlock();
    return TR(rc);
}

// Several attributes; unknown pointers get default (zero/NULL) values and SUCCESS.
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                void **data, CUdeviceptr ptr)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!numAttributes || !attributes || !data) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)ptr);
    for (unsigned i = 0; i < numAttributes && !rc; i++)
        rc =
            data[i] ? attr(attributes[i], r, (uintptr_t)ptr, data[i], 1) : CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Only SYNC_MEMOPS can be set; every copy here is already synchronous where it must be.
CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    if (!cpudrv_mem_find((uintptr_t)ptr)) rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}
