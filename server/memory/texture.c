/* Texture and surface objects: integer handles the client owns, each viewing an array, a
 * mipmapped array or device memory that its resource descriptor names in a union. The
 * generic path carries the call; this hook checks the member the descriptor's resType
 * selects against the caller's own objects (the descriptor is already the server's private
 * copy), and names what the object views as its parent, so that a departing client's
 * objects go before the memory they view. */
#include "server/core/server.h"
#include "server/core/registry.h"

/* Bytes of one element of linear texture memory; 0 for a format the server cannot size
 * (the block-compressed and video formats, which linear textures do not take). */
static uint64_t element_bytes(CUarray_format f, unsigned channels)
{
    uint64_t b;
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        b = 1;
        break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        b = 2;
        break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        b = 4;
        break;
    default:
        return 0;
    }
    return channels == 1 || channels == 2 || channels == 4 ? b * channels : 0;
}

/* The client's object that a resource descriptor views, or the one error the driver
 * documents for these calls, INVALID_VALUE: for an array or mipmapped array that is not
 * the caller's, memory outside its ranges, a descriptor the server cannot size. */
static CUresult resource_check(struct srv_client *c, const CUDA_RESOURCE_DESC *r,
                               struct srv_obj **viewed)
{
    *viewed = NULL;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        *viewed = srv_obj_find(c, SHIM_HT_CUarray, (uintptr_t)r->res.array.hArray);
        return *viewed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        *viewed =
            srv_obj_find(c, SHIM_HT_CUmipmappedArray, (uintptr_t)r->res.mipmap.hMipmappedArray);
        return *viewed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_LINEAR: {
        /* The driver reads sizeInBytes of it; a zero size is the driver's to refuse, but
         * the address must still be the caller's. */
        uint64_t n = r->res.linear.sizeInBytes ? r->res.linear.sizeInBytes : 1;
        if (!element_bytes(r->res.linear.format, r->res.linear.numChannels))
            return CUDA_ERROR_INVALID_VALUE;
        *viewed = srv_range_find(c, r->res.linear.devPtr, n);
        return *viewed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
        /* (height - 1) * pitch + width * element bytes, overflow-checked by the extent. */
        uint64_t el = element_bytes(r->res.pitch2D.format, r->res.pitch2D.numChannels), row;
        if (!el || !r->res.pitch2D.width || !r->res.pitch2D.height ||
            __builtin_mul_overflow((uint64_t)r->res.pitch2D.width, el, &row) ||
            (r->res.pitch2D.height > 1 && r->res.pitch2D.pitchInBytes < row))
            return CUDA_ERROR_INVALID_VALUE;
        *viewed = srv_range_extent(c, r->res.pitch2D.devPtr, 0, 0, 0, r->res.pitch2D.pitchInBytes,
                                   1, row, r->res.pitch2D.height, 1);
        return *viewed ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* cuTexObjectCreate, cuSurfObjectCreate: the viewed object must be the caller's; the new
 * object belongs to it (registered by the generic path with k->parent). */
static CUresult create_before(struct srv_client *c, struct srv_call *k)
{
    const CUDA_RESOURCE_DESC *r = k->a.ptr[1];
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    return resource_check(c, r, &k->parent);
}

const struct srv_hook srv_hook_tex_create = {.before = create_before};
