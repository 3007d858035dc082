// Texture objects, surface objects and mipmapped arrays. Objects keep their descriptors
// (the Get*Desc calls return them as given) and a reference on the array or mipmapped array
// they view, so that a twin reading one never touches freed storage; linear and pitched
// memory is checked again at each read, as a GPU faults on memory freed under a texture.
// Validation follows the driver's documentation: INVALID_VALUE for every bad descriptor
// and for a handle these calls do not know.
//
// What the twins model (cpudrv_tex_*): point sampling of 1-channel float data with
// unnormalized coordinates and clamp addressing, 2D reads of arrays, pitched memory and a
// mipmapped array's level 0, element fetches from linear memory, float surface writes. Not
// modelled: linear filtering, normalized coordinates, wrap/mirror/border addressing,
// read-as-normalized-float of integer formats, sRGB, mipmap level selection (LOD, bias,
// clamps), layered, cubemap and 3D textures, resource views, surface boundary modes other
// than trap. A twin given such a texture faults (ILLEGAL_ADDRESS) instead of guessing.
#include "cpudrv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEVELS 32

struct cpudrv_mipmap {
    struct cpudrv_obj o;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    unsigned nlevels;
    struct cpudrv_array *level[MAX_LEVELS]; // a reference held on each
};

struct cpudrv_tex {
    struct cpudrv_obj o;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;        // textures only
    CUDA_RESOURCE_VIEW_DESC view; // textures only, when has_view
    int has_view;
    struct cpudrv_obj *viewed; // array or mipmapped array, a reference held; or NULL
};

/* ---------------------------------------------------------------- mipmapped arrays */

static void mipmap_release(struct cpudrv_obj *o)
{
    struct cpudrv_mipmap *m = (struct cpudrv_mipmap *)o;
    for (unsigned l = 0; l < m->nlevels; l++) {
        cpudrv_obj_unpublish(&m->level[l]->o);
        cpudrv_obj_put(&m->level[l]->o);
    }
    free(m);
}

static size_t halve(size_t v, unsigned l)
{
    return v ? (v >> l ? v >> l : 1) : 0;
}

// Creates a mipmapped array: level l is the base halved l times along each dimension it
// has (layers kept), down to 1.
CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pDesc,
                                unsigned int numMipmapLevels)
{
    if (!pHandle || !pDesc || !numMipmapLevels) return TR(CUDA_ERROR_INVALID_VALUE);
    size_t big = pDesc->Width > pDesc->Height ? pDesc->Width : pDesc->Height;
    if (!(pDesc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) && pDesc->Depth > big)
        big = pDesc->Depth;
    unsigned most = 1;
    while (most < MAX_LEVELS && big >> most)
        most++;
    if (numMipmapLevels > most) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    struct cpudrv_mipmap *m = calloc(1, sizeof *m);
    if (!m) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_OUT_OF_MEMORY);
    }
    m->desc = *pDesc;
    int layered = pDesc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);
    for (unsigned l = 0; l < numMipmapLevels && !rc; l++) {
        CUDA_ARRAY3D_DESCRIPTOR d = *pDesc;
        d.Width = halve(d.Width, l);
        d.Height = halve(d.Height, l);
        d.Depth = layered ? d.Depth : halve(d.Depth, l);
        struct cpudrv_array *a = NULL;
        rc = cpudrv_array_new(&d, c, &a);
        if (!rc) {
            a->level = 1;
            cpudrv_obj_ref(&a->o);
            m->level[m->nlevels++] = a;
        }
    }
    cpudrv_obj_init(&m->o, CPUDRV_K_MIPMAP, cpudrv_ctx_owner(c), mipmap_release);
    if (rc) {
        cpudrv_obj_put(&m->o);
    } else {
        cpudrv_obj_publish(&m->o);
        *pHandle = (CUmipmappedArray)m;
    }
    cpudrv_unlock();
    return TR(rc);
}

// One level of a mipmapped array: an array that lives as long as the mipmapped array.
CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray,
                                  unsigned int level)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pLevelArray) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_mipmap *m = cpudrv_obj_find(hMipmappedArray, CPUDRV_K_MIPMAP);
    if (!m)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (level >= m->nlevels)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *pLevelArray = (CUarray)m->level[level];
    cpudrv_unlock();
    return TR(rc);
}

// Destroys a mipmapped array and its levels (their storage goes once nothing uses it).
CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_mipmap *m = cpudrv_obj_find(hMipmappedArray, CPUDRV_K_MIPMAP);
    if (m) cpudrv_obj_unpublish(&m->o);
    cpudrv_unlock();
    return TR(m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

/* ---------------------------------------------------------------- texture and surface objects */

static void tex_release(struct cpudrv_obj *o)
{
    struct cpudrv_tex *t = (struct cpudrv_tex *)o;
    if (t->viewed) cpudrv_obj_put(t->viewed);
    free(t);
}

static int aligned(uint64_t v, uint64_t to)
{
    return v % to == 0;
}

// cpudrv_big held: checks a resource descriptor; *viewed gets a reference on the array or
// mipmapped array it names.
static CUresult resource_check(const CUDA_RESOURCE_DESC *r, int surface, struct cpudrv_obj **viewed)
{
    *viewed = NULL;
    if (r->flags) return CUDA_ERROR_INVALID_VALUE;
    if (surface && r->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
        struct cpudrv_array *a = cpudrv_obj_find(r->res.array.hArray, CPUDRV_K_ARRAY);
        if (!a || (surface && !(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST)))
            return CUDA_ERROR_INVALID_VALUE;
        *viewed = &a->o;
        break;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
        struct cpudrv_mipmap *m = cpudrv_obj_find(r->res.mipmap.hMipmappedArray, CPUDRV_K_MIPMAP);
        if (!m) return CUDA_ERROR_INVALID_VALUE;
        *viewed = &m->o;
        break;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
        size_t el = cpudrv_format_size(r->res.linear.format) * r->res.linear.numChannels;
        unsigned ch = r->res.linear.numChannels;
        // The device's texture alignment is 512 (CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT); at
        // most 2^28 elements (MAXIMUM_TEXTURE1D_LINEAR_WIDTH).
        if (!el || (ch != 1 && ch != 2 && ch != 4) || !r->res.linear.sizeInBytes ||
            !aligned(r->res.linear.devPtr, 512) || r->res.linear.sizeInBytes / el > (1u << 28) ||
            cpudrv_mem_check(r->res.linear.devPtr, r->res.linear.sizeInBytes))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
        const __typeof__(r->res.pitch2D) *p = &r->res.pitch2D;
        size_t el = cpudrv_format_size(p->format) * p->numChannels, span;
        unsigned ch = p->numChannels;
        // Pitch a multiple of 32 (TEXTURE_PITCH_ALIGNMENT), at most 2^20 bytes; width and
        // height at most 131072 and 65000 (MAXIMUM_TEXTURE2D_LINEAR_*).
        if (!el || (ch != 1 && ch != 2 && ch != 4) || !p->width || !p->height ||
            p->width > 131072 || p->height > 65000 || p->pitchInBytes > (1u << 20) ||
            !aligned(p->devPtr, 512) || !aligned(p->pitchInBytes, 32) ||
            p->pitchInBytes < p->width * el)
            return CUDA_ERROR_INVALID_VALUE;
        span = (p->height - 1) * p->pitchInBytes + p->width * el;
        if (cpudrv_mem_check(p->devPtr, span)) return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    cpudrv_obj_ref(*viewed);
    return CUDA_SUCCESS;
}

static CUresult texdesc_check(const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
                              const CUDA_RESOURCE_VIEW_DESC *v)
{
    unsigned known = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
                     CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;
    for (int i = 0; i < 3; i++)
        if ((unsigned)t->addressMode[i] > CU_TR_ADDRESS_MODE_BORDER)
            return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)t->filterMode > CU_TR_FILTER_MODE_LINEAR ||
        (unsigned)t->mipmapFilterMode > CU_TR_FILTER_MODE_LINEAR || (t->flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    // A mipmapped array without normalized coordinates is accepted, as by the 580 driver
    // (an H100); the twins do not sample mipmaps (below).
    // Views are of arrays and mipmapped arrays.
    if (v && r->resType != CU_RESOURCE_TYPE_ARRAY && r->resType != CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult object_create(uint64_t *out, int kind, const CUDA_RESOURCE_DESC *r,
                              const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
    if (!out || !r || (kind == CPUDRV_K_TEX && !t)) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = kind == CPUDRV_K_TEX ? texdesc_check(r, t, v) : CUDA_SUCCESS;
    if (rc) return rc;
    struct cpudrv_ctx *c;
    if ((rc = cpudrv_enter(&c))) return rc;
    struct cpudrv_tex *x = calloc(1, sizeof *x);
    if (!x) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) rc = resource_check(r, kind == CPUDRV_K_SURF, &x->viewed);
    if (rc) {
        free(x);
        cpudrv_unlock();
        return rc;
    }
    x->res = *r;
    if (t) x->tex = *t;
    if (v) x->view = *v, x->has_view = 1;
    cpudrv_obj_init(&x->o, kind, cpudrv_ctx_owner(c), tex_release);
    cpudrv_obj_publish(&x->o);
    cpudrv_unlock();
    *out = (uint64_t)(uintptr_t)x;
    return CUDA_SUCCESS;
}

static CUresult object_destroy(uint64_t h, int kind)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_tex *x = cpudrv_obj_find((void *)(uintptr_t)h, kind);
    if (x) cpudrv_obj_unpublish(&x->o);
    cpudrv_unlock();
    return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Copies what `what` selects of a live object: 0 resource, 1 texture, 2 view descriptor.
static CUresult object_get(uint64_t h, int kind, int what, void *out)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    cpudrv_lock();
    struct cpudrv_tex *x = cpudrv_obj_find((void *)(uintptr_t)h, kind);
    if (!x)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (what == 2 && !x->has_view) /* the 580 driver answers success then (H100) */
        memset(out, 0, sizeof x->view);
    else if (what == 0)
        memcpy(out, &x->res, sizeof x->res);
    else if (what == 1)
        memcpy(out, &x->tex, sizeof x->tex);
    else
        memcpy(out, &x->view, sizeof x->view);
    cpudrv_unlock();
    return rc;
}

CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                           const CUDA_TEXTURE_DESC *pTexDesc,
                           const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    return TR(
        object_create((uint64_t *)pTexObject, CPUDRV_K_TEX, pResDesc, pTexDesc, pResViewDesc));
}

CUresult cuTexObjectDestroy(CUtexObject texObject)
{
    return TR(object_destroy(texObject, CPUDRV_K_TEX));
}

CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
    return TR(object_get(texObject, CPUDRV_K_TEX, 0, pResDesc));
}

CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
    return TR(object_get(texObject, CPUDRV_K_TEX, 1, pTexDesc));
}

CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *pResViewDesc,
                                        CUtexObject texObject)
{
    return TR(object_get(texObject, CPUDRV_K_TEX, 2, pResViewDesc));
}

CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    return TR(object_create((uint64_t *)pSurfObject, CPUDRV_K_SURF, pResDesc, NULL, NULL));
}

CUresult cuSurfObjectDestroy(CUsurfObject surfObject)
{
    return TR(object_destroy(surfObject, CPUDRV_K_SURF));
}

CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
    return TR(object_get(surfObject, CPUDRV_K_SURF, 0, pResDesc));
}

/* ---------------------------------------------------------------- kernel access (twins) */

// A 2D view of a texture or surface: base, row pitch, width and height in elements of
// 4 bytes. cpudrv_big held; ILLEGAL_ADDRESS for what the twins do not model.
struct view2d {
    unsigned char *base;
    size_t pitch, w, h;
};

static CUresult view_of(struct cpudrv_tex *x, struct view2d *v)
{
    const CUDA_RESOURCE_DESC *r = &x->res;
    struct cpudrv_array *a = NULL;
    if (x->o.kind == CPUDRV_K_TEX &&
        ((x->tex.flags & CU_TRSF_NORMALIZED_COORDINATES) ||
         x->tex.filterMode != CU_TR_FILTER_MODE_POINT ||
         x->tex.addressMode[0] != CU_TR_ADDRESS_MODE_CLAMP ||
         x->tex.addressMode[1] != CU_TR_ADDRESS_MODE_CLAMP || x->has_view))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        a = (struct cpudrv_array *)x->viewed;
        break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        a = ((struct cpudrv_mipmap *)x->viewed)->level[0];
        break;
    case CU_RESOURCE_TYPE_LINEAR:
        if (r->res.linear.format != CU_AD_FORMAT_FLOAT || r->res.linear.numChannels != 1)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        *v = (struct view2d){(unsigned char *)(uintptr_t)r->res.linear.devPtr, 0,
                             r->res.linear.sizeInBytes / 4, 1};
        return cpudrv_mem_check(r->res.linear.devPtr, v->w * 4) ? CUDA_ERROR_ILLEGAL_ADDRESS : 0;
    case CU_RESOURCE_TYPE_PITCH2D:
        if (r->res.pitch2D.format != CU_AD_FORMAT_FLOAT || r->res.pitch2D.numChannels != 1)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        *v = (struct view2d){(unsigned char *)(uintptr_t)r->res.pitch2D.devPtr,
                             r->res.pitch2D.pitchInBytes, r->res.pitch2D.width,
                             r->res.pitch2D.height};
        return cpudrv_mem_check(r->res.pitch2D.devPtr, (v->h - 1) * v->pitch + v->w * 4)
                   ? CUDA_ERROR_ILLEGAL_ADDRESS
                   : CUDA_SUCCESS;
    default:
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if (a->desc.Format != CU_AD_FORMAT_FLOAT || a->desc.NumChannels != 1 || a->d != 1 ||
        (a->desc.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    *v = (struct view2d){a->mem, a->wbytes, a->desc.Width, a->h};
    return CUDA_SUCCESS;
}

static int64_t clampi(int64_t v, size_t n)
{
    return v < 0 ? 0 : v >= (int64_t)n ? (int64_t)n - 1 : v;
}

// Reads (or writes, with in != NULL) one 4-byte element of a live object of kind.
static CUresult access4(uint64_t h, int kind, int64_t x, int64_t y, int clamp, int linear,
                        float *out, const float *in)
{
    cpudrv_lock();
    struct cpudrv_tex *t = cpudrv_obj_find((void *)(uintptr_t)h, kind);
    struct view2d v;
    CUresult rc = t ? view_of(t, &v) : CUDA_ERROR_ILLEGAL_ADDRESS;
    if (!rc && linear != (t->res.resType == CU_RESOURCE_TYPE_LINEAR))
        rc = CUDA_ERROR_ILLEGAL_ADDRESS;
    if (!rc && clamp) {
        x = clampi(x, v.w);
        y = clampi(y, v.h);
    } else if (!rc && (x < 0 || y < 0 || (size_t)x >= v.w || (size_t)y >= v.h)) {
        if (linear)
            *out = 0.0f; // tex1Dfetch outside the texture reads zero
        else
            rc = CUDA_ERROR_ILLEGAL_ADDRESS;
        cpudrv_unlock();
        return rc;
    }
    if (!rc) {
        unsigned char *p = v.base + (size_t)y * v.pitch + (size_t)x * 4;
        if (in)
            memcpy(p, in, 4);
        else
            memcpy(out, p, 4);
    }
    cpudrv_unlock();
    return rc;
}

CUresult cpudrv_tex_read_f32(uint64_t tex, int64_t x, int64_t y, float *out)
{
    return access4(tex, CPUDRV_K_TEX, x, y, 1, 0, out, NULL);
}

CUresult cpudrv_tex_fetch_f32(uint64_t tex, int64_t i, float *out)
{
    return access4(tex, CPUDRV_K_TEX, i, 0, 0, 1, out, NULL);
}

CUresult cpudrv_surf_write_f32(uint64_t surf, int64_t xbytes, int64_t y, float v)
{
    if (xbytes % 4) return CUDA_ERROR_MISALIGNED_ADDRESS;
    float dummy;
    return access4(surf, CPUDRV_K_SURF, xbytes / 4, y, 0, 0, &dummy, &v);
}
