// 2D and 3D copies (CUDA_MEMCPY2D / CUDA_MEMCPY3D / CUDA_MEMCPY3D_PEER): every side is
// host, device, unified or array memory, with x/y/z offsets and pitches.
#include "cpudrv.h"

#include <string.h>

// One side of a 2D/3D copy, as the caller described it.
struct side {
    CUmemorytype type;
    const void *host;
    CUdeviceptr dev;
    CUarray arr;
    size_t x, y, z, pitch, height;
};

// cpudrv_big held: resolves a side to an address with its pitches; checks its extent.
static CUresult resolve(const struct side *sd, size_t w, size_t h, size_t d, unsigned char **addr,
                        size_t *pitch, size_t *slice, int *cls, struct cpudrv_array **arr)
{
    *arr = NULL;
    if (sd->type == CU_MEMORYTYPE_ARRAY) {
        struct cpudrv_array *a = cpudrv_obj_find(sd->arr, CPUDRV_K_ARRAY);
        if (!a) return CUDA_ERROR_INVALID_HANDLE;
        if (sd->x > a->wbytes || w > a->wbytes - sd->x || sd->y > a->h || h > a->h - sd->y ||
            sd->z > a->d || d > a->d - sd->z)
            return CUDA_ERROR_INVALID_VALUE;
        *pitch = a->wbytes;
        *slice = a->wbytes * a->h;
        *addr = a->mem + sd->z * *slice + sd->y * *pitch + sd->x;
        *cls = CPUDRV_SIDE_DEVICE;
        *arr = a;
        return CUDA_SUCCESS;
    }
    uintptr_t base;
    if (sd->type == CU_MEMORYTYPE_HOST)
        base = (uintptr_t)sd->host;
    else if (sd->type == CU_MEMORYTYPE_DEVICE || sd->type == CU_MEMORYTYPE_UNIFIED)
        base = (uintptr_t)sd->dev;
    else
        return CUDA_ERROR_INVALID_VALUE;
    if (!base) return CUDA_ERROR_INVALID_VALUE;
    size_t p = sd->pitch ? sd->pitch : w;
    if ((h > 1 || d > 1) && p < w) return CUDA_ERROR_INVALID_VALUE;
    size_t rows = sd->height ? sd->height : h;
    if (d > 1 && rows < sd->y + h) return CUDA_ERROR_INVALID_VALUE;
    *pitch = p;
    size_t zo, yo, off;
    uintptr_t a;
    if (__builtin_mul_overflow(p, rows, slice) || __builtin_mul_overflow(sd->z, *slice, &zo) ||
        __builtin_mul_overflow(sd->y, p, &yo) || __builtin_add_overflow(zo, yo, &off) ||
        __builtin_add_overflow(off, sd->x, &off) || __builtin_add_overflow(base, off, &a))
        return CUDA_ERROR_INVALID_VALUE;
    size_t span = cpudrv_xfer_span(w, h, d, *pitch, *slice);
    if (span == SIZE_MAX) return CUDA_ERROR_INVALID_VALUE;
    *addr = (unsigned char *)a;
    int device = sd->type == CU_MEMORYTYPE_DEVICE ||
                 (sd->type == CU_MEMORYTYPE_UNIFIED && cpudrv_mem_is_device(a));
    if (device) {
        *cls = CPUDRV_SIDE_DEVICE;
        return cpudrv_mem_check(a, span);
    }
    *cls = cpudrv_host_side((const void *)a, span);
    return CUDA_SUCCESS;
}

static CUresult copy(const struct side *dst, const struct side *src, size_t w, size_t h, size_t d,
                     int async, CUstream hs)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    struct cpudrv_xfer x = {0};
    struct cpudrv_array *da, *sa;
    int dcls = 0, scls = 0;
    rc = cpudrv_stream_get(async ? hs : NULL, c, &s);
    if (!rc && w && h && d) {
        rc = resolve(dst, w, h, d, &x.dst, &x.dpitch, &x.dslice, &dcls, &da);
        if (!rc) {
            unsigned char *sp;
            rc = resolve(src, w, h, d, &sp, &x.spitch, &x.sslice, &scls, &sa);
            x.src = sp;
        }
        if (!rc) {
            x.width = w;
            x.height = h;
            x.depth = d;
            rc = cpudrv_copy_submit(s, &x, async, scls, dcls, da ? &da->o : NULL,
                                    sa ? &sa->o : NULL);
        }
    }
    cpudrv_unlock();
    return rc;
}

// The two sides of a CUDA_MEMCPY3D; -1 if it is malformed (levels of detail, reserved).
static int sides3d(const CUDA_MEMCPY3D *p, struct side *src, struct side *dst)
{
    if (!p || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1) return -1;
    *src = (struct side){p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                         p->srcY,          p->srcZ,    p->srcPitch,  p->srcHeight};
    *dst = (struct side){p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                         p->dstY,          p->dstZ,    p->dstPitch,  p->dstHeight};
    return 0;
}

// cpudrv_big held: resolves a CUDA_MEMCPY3D (host, device, unified or array sides) into a
// transfer, classifying each side; *sa / *da are the arrays addressed (no reference
// taken), or NULL. Zero extents resolve to an empty transfer.
CUresult cpudrv_copy3d_resolve(const CUDA_MEMCPY3D *p, struct cpudrv_xfer *x, int *scls, int *dcls,
                               struct cpudrv_array **sa, struct cpudrv_array **da)
{
    memset(x, 0, sizeof *x);
    *sa = *da = NULL;
    *scls = *dcls = 0;
    struct side src, dst;
    if (sides3d(p, &src, &dst)) return CUDA_ERROR_INVALID_VALUE;
    size_t w = p->WidthInBytes, h = p->Height, d = p->Depth;
    if (!w || !h || !d) return CUDA_SUCCESS;
    unsigned char *sp;
    CUresult rc = resolve(&dst, w, h, d, &x->dst, &x->dpitch, &x->dslice, dcls, da);
    if (!rc) rc = resolve(&src, w, h, d, &sp, &x->spitch, &x->sslice, scls, sa);
    if (rc) return rc;
    x->src = sp;
    x->width = w;
    x->height = h;
    x->depth = d;
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, int async, CUstream hs)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct side src = {
        p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, 0,
        p->srcPitch,      0};
    struct side dst = {
        p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, 0,
        p->dstPitch,      0};
    return copy(&dst, &src, p->WidthInBytes, p->Height, 1, async, hs);
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, int async, CUstream hs)
{
    struct side src, dst;
    if (sides3d(p, &src, &dst)) return CUDA_ERROR_INVALID_VALUE;
    return copy(&dst, &src, p->WidthInBytes, p->Height, p->Depth, async, hs);
}

static CUresult copy3dpeer(const CUDA_MEMCPY3D_PEER *p, int async, CUstream hs)
{
    if (!p || p->srcLOD || p->dstLOD) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    if (p->srcContext) rc = cpudrv_ctx_usable(cpudrv_obj_find(p->srcContext, CPUDRV_K_CTX));
    if (!rc && p->dstContext) rc = cpudrv_ctx_usable(cpudrv_obj_find(p->dstContext, CPUDRV_K_CTX));
    cpudrv_unlock();
    if (rc) return rc;
    struct side src = {p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                       p->srcY,          p->srcZ,    p->srcPitch,  p->srcHeight};
    struct side dst = {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                       p->dstY,          p->dstZ,    p->dstPitch,  p->dstHeight};
    return copy(&dst, &src, p->WidthInBytes, p->Height, p->Depth, async, hs);
}

// 2D copy, complete on return.
CUresult cuMemcpy2D(const CUDA_MEMCPY2D *pCopy)
{
    return TR(copy2d(pCopy, 0, NULL));
}

// 2D copy without pitch alignment requirements (none are imposed here either).
CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D *pCopy)
{
    return TR(copy2d(pCopy, 0, NULL));
}

// 2D copy on a stream.
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return TR(copy2d(pCopy, 1, hStream));
}

// 3D copy, complete on return.
CUresult cuMemcpy3D(const CUDA_MEMCPY3D *pCopy)
{
    return TR(copy3d(pCopy, 0, NULL));
}

// 3D copy on a stream.
CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return TR(copy3d(pCopy, 1, hStream));
}

// 3D copy between contexts, complete on return.
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy)
{
    return TR(copy3dpeer(pCopy, 0, NULL));
}

// 3D copy between contexts on a stream.
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
    return TR(copy3dpeer(pCopy, 1, hStream));
}
