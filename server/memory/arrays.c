/* CUDA arrays and mipmapped arrays: device memory the client's limit counts. Created,
 * queried and destroyed through their descriptions in cuda_symbols.txt; these hooks count
 * their bytes. */
#include "server/core/server.h"
#include "server/core/registry.h"
#include "server/limits/account.h"

#include "channel/texel.h"

/* Texels of one array (or mipmap level) at `bits` each, in bytes; UINT64_MAX on overflow. */
static uint64_t texel_bytes(uint64_t w, uint64_t h, uint64_t dp, uint64_t bits)
{
    uint64_t n;
    if (__builtin_mul_overflow(w, h ? h : 1, &n) || __builtin_mul_overflow(n, dp ? dp : 1, &n) ||
        __builtin_mul_overflow(n, bits, &n))
        return UINT64_MAX;
    return (n + 7) / 8;
}

/* Device bytes an array creation asks for: its texels at their format's size (the driver
 * may pad and tile beyond that; the driver only tells the real footprint of arrays made
 * for deferred mapping). Sparse and deferred-mapping arrays hold no memory of their own,
 * and mapping some into them is not supported. A mipmapped array holds every level, each
 * half the one before along each dimension it has (at least 1), layers whole. 0 for calls that are
 * not array creations. */
static uint64_t array_bytes(int id, const struct chan_args *a)
{
    if (id == SHIM_ID_cuArrayCreate_v2 && a->ptr[1]) {
        const CUDA_ARRAY_DESCRIPTOR *d = a->ptr[1];
        uint64_t bits = chan_texel_bits(d->Format, d->NumChannels);
        return texel_bytes(d->Width, d->Height, 1, bits ? bits : 128);
    }
    if ((id != SHIM_ID_cuArray3DCreate_v2 && id != SHIM_ID_cuMipmappedArrayCreate) || !a->ptr[1])
        return 0;
    const CUDA_ARRAY3D_DESCRIPTOR *d = a->ptr[1];
    if (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) return 0;
    /* An unknown format: as much as the widest known texel. */
    uint64_t bits = chan_texel_bits(d->Format, d->NumChannels), total = 0;
    bits = bits ? bits : 128;
    /* Levels beyond 64 would all be 1x1x1; the driver refuses more than the largest
     * dimension allows anyway. */
    uint64_t levels = id == SHIM_ID_cuMipmappedArrayCreate ? a->val[2] : 1;
    for (uint64_t l = 0; l < levels && l < 64; l++) {
        /* Layers (and a cubemap's faces) are not halved. */
        uint64_t w = d->Width >> l, h = d->Height >> l,
                 dp = d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) ? d->Depth
                                                                               : d->Depth >> l;
        uint64_t b =
            texel_bytes(w ? w : 1, d->Height ? (h ? h : 1) : 0, d->Depth ? (dp ? dp : 1) : 0, bits);
        if (b == UINT64_MAX || __builtin_add_overflow(total, b, &total)) return UINT64_MAX;
    }
    return total;
}

/* Beyond the client's limit the driver is not asked. */
static CUresult array_create_before(struct srv_client *c, struct srv_call *k)
{
    uint64_t bytes = array_bytes(k->id, &k->a);
    return !bytes || srv_mem_fits(c, k->dev, bytes) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* The new array (registered by now) holds those bytes until it is destroyed. */
static CUresult array_create_after(struct srv_client *c, struct srv_call *k)
{
    uint64_t bytes = array_bytes(k->id, &k->a);
    uint32_t type =
        k->id == SHIM_ID_cuMipmappedArrayCreate ? SHIM_HT_CUmipmappedArray : SHIM_HT_CUarray;
    struct srv_obj *o = srv_obj_find(c, type, *(uint64_t *)k->a.ptr[0]);
    if (bytes && o) srv_obj_count(c, o, k->dev, bytes);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_array_create = {.before = array_create_before,
                                               .after = array_create_after};
