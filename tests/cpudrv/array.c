// CUDA arrays, stored linearly (row after row, slice after slice), and the copies that
// address them by a byte offset.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Bytes of one channel of an element of format f; 0 for formats this driver does not model
 * (arrays and linear textures alike). */
size_t cpudrv_format_size(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

static void array_release(struct cpudrv_obj *o)
{
    struct cpudrv_array *a = (struct cpudrv_array *)o;
    cpudrv_mem_unreserve(a->o.ctx ? a->o.ctx->dev : 0, a->maplen);
    cpudrv_mem_unmap_later(a->map, a->maplen);
    free(a);
}

CUresult cpudrv_array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, struct cpudrv_ctx *c,
                          struct cpudrv_array **out)
{
    size_t fs = cpudrv_format_size(d->Format);
    unsigned known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                     CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_COLOR_ATTACHMENT;
    if (!fs || !d->Width || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
        (d->Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    // 1D: H = D = 0; 2D: D = 0; 3D: all set; layered 1D: H = 0 with layers in D.
    if (d->Depth && !d->Height && !(d->Flags & CUDA_ARRAY3D_LAYERED))
        return CUDA_ERROR_INVALID_VALUE;
    if (d->Width > 131072 || d->Height > 65536 || d->Depth > 16384) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_array *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    a->desc = *d;
    a->elsize = fs * d->NumChannels;
    a->wbytes = d->Width * a->elsize;
    a->h = d->Height ? d->Height : 1;
    a->d = d->Depth ? d->Depth : 1;
    a->map = cpudrv_mem_map(a->wbytes * a->h * a->d, &a->maplen);
    if (!a->map || cpudrv_mem_reserve(c->dev, a->maplen)) {
        if (a->map) munmap(a->map, a->maplen);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->mem = a->map;
    cpudrv_obj_init(&a->o, CPUDRV_K_ARRAY, cpudrv_ctx_owner(c), array_release);
    cpudrv_obj_publish(&a->o);
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult create(CUarray *ph, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!ph) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_array *a = NULL;
    rc = cpudrv_array_new(d, c, &a);
    cpudrv_unlock();
    if (!rc) *ph = (CUarray)a;
    return rc;
}

// Creates a 1D or 2D array.
CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    if (!pAllocateArray) return TR(CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    d.Width = pAllocateArray->Width;
    d.Height = pAllocateArray->Height;
    d.Format = pAllocateArray->Format;
    d.NumChannels = pAllocateArray->NumChannels;
    return TR(create(pHandle, &d));
}

// Creates a 1D, 2D, 3D or layered array.
CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    if (!pAllocateArray) return TR(CUDA_ERROR_INVALID_VALUE);
    return TR(create(pHandle, pAllocateArray));
}

// Destroys an array (its storage goes once queued copies that use it ran).
CUresult cuArrayDestroy(CUarray hArray)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    // A mipmapped array's level goes with the mipmapped array only.
    struct cpudrv_array *a = cpudrv_obj_find(hArray, CPUDRV_K_ARRAY);
    if (a && a->level) a = NULL;
    if (a) cpudrv_obj_unpublish(&a->o);
    cpudrv_unlock();
    return TR(a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// 2D descriptor of an array.
CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pArrayDescriptor) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_array *a = cpudrv_obj_find(hArray, CPUDRV_K_ARRAY);
    if (a) {
        pArrayDescriptor->Width = a->desc.Width;
        pArrayDescriptor->Height = a->desc.Height;
        pArrayDescriptor->Format = a->desc.Format;
        pArrayDescriptor->NumChannels = a->desc.NumChannels;
    }
    cpudrv_unlock();
    return TR(a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// 3D descriptor of an array.
CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pArrayDescriptor) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_array *a = cpudrv_obj_find(hArray, CPUDRV_K_ARRAY);
    if (a) *pArrayDescriptor = a->desc;
    cpudrv_unlock();
    return TR(a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

enum kind { HOST, DEV, ARR };

struct end {
    enum kind k;
    uintptr_t p;
    CUarray a;
    size_t off;
};

// cpudrv_big held: address of [off, off+n) of an array, or NULL (error in *rc).
static unsigned char *arr_at(CUarray h, size_t off, size_t n, struct cpudrv_array **out,
                             CUresult *rc)
{
    struct cpudrv_array *a = cpudrv_obj_find(h, CPUDRV_K_ARRAY);
    size_t total = a ? a->wbytes * a->h * a->d : 0;
    if (!a) {
        *rc = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    if (off > total || n > total - off) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    *out = a;
    return a->mem + off;
}

// A linear copy where at least one side is an array.
static CUresult acopy(struct end dst, struct end src, size_t n, int async, CUstream hs)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    struct cpudrv_array *da = NULL, *sa = NULL;
    unsigned char *d = NULL, *p = NULL;
    int dside = CPUDRV_SIDE_DEVICE, sside = CPUDRV_SIDE_DEVICE;
    rc = cpudrv_stream_get(async ? hs : NULL, c, &s);
    if (!rc) {
        if (dst.k == ARR)
            d = arr_at(dst.a, dst.off, n, &da, &rc);
        else if (dst.k == DEV)
            rc = cpudrv_mem_check(dst.p, n), d = (unsigned char *)dst.p;
        else if (!dst.p && n)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            d = (unsigned char *)dst.p, dside = cpudrv_host_side(d, n);
    }
    if (!rc) {
        if (src.k == ARR)
            p = arr_at(src.a, src.off, n, &sa, &rc);
        else if (src.k == DEV)
            rc = cpudrv_mem_check(src.p, n), p = (unsigned char *)src.p;
        else if (!src.p && n)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p = (unsigned char *)src.p, sside = cpudrv_host_side(p, n);
    }
    if (!rc && n) {
        struct cpudrv_xfer x = {d, p, n, 1, 1, 0, 0, 0, 0};
        rc = cpudrv_copy_submit(s, &x, async, sside, dside, da ? &da->o : NULL, sa ? &sa->o : NULL);
    }
    cpudrv_unlock();
    return rc;
}

#define HOSTEND(ptr) ((struct end){HOST, (uintptr_t)(ptr), NULL, 0})
#define DEVEND(ptr) ((struct end){DEV, (uintptr_t)(ptr), NULL, 0})
#define ARREND(arr, o) ((struct end){ARR, 0, (arr), (o)})

// Host to array at a byte offset, complete on return.
CUresult cuMemcpyHtoA(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{
    return TR(acopy(ARREND(dstArray, dstOffset), HOSTEND(srcHost), ByteCount, 0, NULL));
}

// Array to host, complete on return.
CUresult cuMemcpyAtoH(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
    return TR(acopy(HOSTEND(dstHost), ARREND(srcArray, srcOffset), ByteCount, 0, NULL));
}

// Array to device memory.
CUresult cuMemcpyAtoD(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
    return TR(acopy(DEVEND(dstDevice), ARREND(srcArray, srcOffset), ByteCount, 0, NULL));
}

// Device memory to array.
CUresult cuMemcpyDtoA(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
{
    return TR(acopy(ARREND(dstArray, dstOffset), DEVEND(srcDevice), ByteCount, 0, NULL));
}

// Array to array.
CUresult cuMemcpyAtoA(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                      size_t ByteCount)
{
    return TR(acopy(ARREND(dstArray, dstOffset), ARREND(srcArray, srcOffset), ByteCount, 0, NULL));
}

// Host to array on a stream.
CUresult cuMemcpyHtoAAsync(CUarray dstArray, size_t dstOffset, const void *srcHost,
                           size_t ByteCount, CUstream hStream)
{
    return TR(acopy(ARREND(dstArray, dstOffset), HOSTEND(srcHost), ByteCount, 1, hStream));
}

// Array to host on a stream.
CUresult cuMemcpyAtoHAsync(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                           CUstream hStream)
{
    return TR(acopy(HOSTEND(dstHost), ARREND(srcArray, srcOffset), ByteCount, 1, hStream));
}
