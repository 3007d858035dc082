/* Replay of generic (`sync`/`async`) calls from their descriptors, through libffi: decode
 * the arguments, check every handle and device address against the caller's tables, map
 * its streams, call the real function, register or forget the handles it created or
 * destroyed, and reply with the outputs. */
#include "server/server.h"

#include <ffi.h>
#include <stdlib.h>
#include <string.h>

#include "channel/marshal.h"

/* Prepared once at start, read-only afterwards. NULL cif: the call cannot be replayed. */
static ffi_cif cifs[SHIM_NCALLS];
static ffi_type *argtypes[SHIM_NCALLS][CHAN_MAX_ARGS];
static int cif_ok[SHIM_NCALLS];

static ffi_type *type_of(const struct shim_param *p)
{
    if (p->kind != SHIM_PK_VAL && p->kind != SHIM_PK_RAW)
        return p->size == 8 ? &ffi_type_uint64 : &ffi_type_pointer;
    switch (p->vclass) {
    case SHIM_VC_S8: return &ffi_type_sint8;
    case SHIM_VC_U8: return &ffi_type_uint8;
    case SHIM_VC_S16: return &ffi_type_sint16;
    case SHIM_VC_U16: return &ffi_type_uint16;
    case SHIM_VC_S32: return &ffi_type_sint32;
    case SHIM_VC_U32: return &ffi_type_uint32;
    case SHIM_VC_S64: return &ffi_type_sint64;
    case SHIM_VC_U64: return &ffi_type_uint64;
    case SHIM_VC_F32: return &ffi_type_float;
    case SHIM_VC_F64: return &ffi_type_double;
    case SHIM_VC_PTR: return &ffi_type_pointer;
    default: return NULL; /* structs by value are not replayed generically */
    }
}

int srv_generic_init(void)
{
    for (int id = 0; id < SHIM_NCALLS; id++) {
        const struct shim_call *d = &shim_calls[id];
        if (d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC)
            continue;
        if (d->nparams > CHAN_MAX_ARGS) {
            srv_log("%s: too many parameters to replay", d->name);
            continue;
        }
        int ok = 1;
        for (int i = 0; i < d->nparams; i++)
            if (!(argtypes[id][i] = type_of(&d->params[i]))) {
                srv_log("%s: parameter %d is a struct by value; not replayed", d->name, i);
                ok = 0;
            }
        if (ok && ffi_prep_cif(&cifs[id], FFI_DEFAULT_ABI, d->nparams, &ffi_type_sint,
                               argtypes[id]) == FFI_OK)
            cif_ok[id] = 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- arrays and the limit */

/* Bits one texel takes in each format; 0: unknown. */
static unsigned texel_bits(CUarray_format f, unsigned channels)
{
    switch ((int)f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 8 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 16 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 32 * channels;
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1: return 8;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
    case CU_AD_FORMAT_NV16:
    case CU_AD_FORMAT_YUY2: return 16;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT_101010_2:
    case CU_AD_FORMAT_P210:
    case CU_AD_FORMAT_P216:
    case CU_AD_FORMAT_Y210:
    case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_AYUV:
    case CU_AD_FORMAT_Y410: return 32;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
    case CU_AD_FORMAT_Y416: return 64;
    case CU_AD_FORMAT_BC1_UNORM:
    case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM: return 4;
    case CU_AD_FORMAT_BC2_UNORM:
    case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC5_UNORM:
    case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16:
    case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB: return 8;
    case CU_AD_FORMAT_NV12: return 12;
    case CU_AD_FORMAT_P010:
    case CU_AD_FORMAT_P016:
    case CU_AD_FORMAT_Y444_PLANAR8:
    case CU_AD_FORMAT_YUV444_8bit_SemiPlanar: return 24;
    case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar: return 48;
    default: return 0;
    }
}

/* Device bytes an array creation asks for: its texels at their format's size (the driver
 * may pad and tile beyond that; the driver only tells the real footprint of arrays made
 * for deferred mapping). Sparse and deferred-mapping arrays hold no memory of their own,
 * and mapping some into them is not supported. 0 for calls that are not array creations. */
static uint64_t array_bytes(int id, const struct chan_args *a)
{
    uint64_t w, h, dp = 1, bits;
    if (id == SHIM_ID_cuArrayCreate_v2 && a->ptr[1]) {
        const CUDA_ARRAY_DESCRIPTOR *d = a->ptr[1];
        w = d->Width;
        h = d->Height;
        bits = texel_bits(d->Format, d->NumChannels);
    } else if (id == SHIM_ID_cuArray3DCreate_v2 && a->ptr[1]) {
        const CUDA_ARRAY3D_DESCRIPTOR *d = a->ptr[1];
        if (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
            return 0;
        w = d->Width;
        h = d->Height;
        dp = d->Depth ? d->Depth : 1;
        bits = texel_bits(d->Format, d->NumChannels);
    } else {
        return 0;
    }
    if (!bits)
        bits = 128; /* an unknown format: as much as the widest known texel */
    uint64_t n;
    if (__builtin_mul_overflow(w, h ? h : 1, &n) || __builtin_mul_overflow(n, dp, &n) ||
        __builtin_mul_overflow(n, bits, &n))
        return UINT64_MAX;
    return (n + 7) / 8;
}

/* Checks a handle the client named and gives the value to pass to the driver. */
static CUresult check_handle(struct srv_client *c, const struct chan_rec *r, uint32_t ht,
                             uint64_t v, uint64_t *out)
{
    *out = v;
    switch (ht) {
    case SHIM_HT_CUstream: {
        struct srv_stream *s = srv_stream_resolve(c, v, r->flags & CHAN_RF_PTDS, r->thread);
        if (!s)
            return c->cur ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_CONTEXT;
        *out = (uint64_t)(uintptr_t)s->real;
        return CUDA_SUCCESS;
    }
    case SHIM_HT_CUevent:
        return srv_event_get(c, v) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case SHIM_HT_CUmodule: {
        struct srv_module *m = srv_module_get(c, v);
        return m && !m->is_library ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    case SHIM_HT_CUlibrary: {
        struct srv_module *m = srv_module_get(c, v);
        return m && m->is_library ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    case SHIM_HT_CUfunction:
        /* A CUkernel may stand for a CUfunction (CUDA 12+). */
        return srv_func_get(c, v) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case SHIM_HT_CUkernel: {
        struct srv_func *f = srv_func_get(c, v);
        return f && f->is_kernel ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    case SHIM_HT_CUcontext:
    case SHIM_HT_CUgreenCtx:
        return CUDA_ERROR_INVALID_CONTEXT; /* the generator never lets these through */
    default:
        if (v == 0)
            return CUDA_SUCCESS; /* NULL means "none" where the API allows it */
        return srv_handle_get(c, ht, v) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
}

void srv_generic(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    int id = r->op;
    const struct shim_call *d = &shim_calls[id];
    int lane = (r->flags & CHAN_RF_REPLY) ? r->lane : -1;
    uint8_t *out = srv_lane_data(c, lane);
    struct chan_args a;
    a.out_len = 0;
    CUresult res;
    if ((d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC) || !cif_ok[id]) {
        res = CUDA_ERROR_NOT_SUPPORTED;
        goto done;
    }
    if (!srv_drv_fns[id]) {
        res = CUDA_ERROR_NOT_SUPPORTED;
        goto done;
    }
    if ((res = chan_unpack_call(d, p, len, out, CHAN_LANE_DATA, &a)) != CUDA_SUCCESS)
        goto done;
    void *avalue[CHAN_MAX_ARGS];
    uint64_t vals[CHAN_MAX_ARGS];
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *pp = &d->params[i];
        switch (pp->kind) {
        case SHIM_PK_HANDLE:
            if ((res = check_handle(c, r, pp->htype, a.val[i], &vals[i])) != CUDA_SUCCESS)
                goto done;
            if (i == d->stream && d->cls == SHIM_ASYNC) {
                struct srv_stream *s = srv_stream_resolve(c, a.val[i], r->flags & CHAN_RF_PTDS,
                                                          r->thread);
                vals[i] = (uint64_t)(uintptr_t)srv_stream_prepare(c, s);
            }
            avalue[i] = &vals[i];
            break;
        case SHIM_PK_DPTR:
            if (!srv_alloc_find(c, a.val[i], 1)) {
                res = CUDA_ERROR_INVALID_VALUE;
                goto done;
            }
            vals[i] = a.val[i];
            avalue[i] = &vals[i];
            break;
        case SHIM_PK_VAL:
        case SHIM_PK_RAW:
            vals[i] = a.val[i];
            avalue[i] = &vals[i];
            break;
        default:
            /* Handle elements of IN arrays are the client's too. */
            if (pp->kind == SHIM_PK_IN && pp->htype && a.ptr[i])
                for (uint32_t k = 0; k < a.count[i]; k++) {
                    uint64_t h = ((uint64_t *)a.ptr[i])[k], m;
                    if ((res = check_handle(c, r, pp->htype, h, &m)) != CUDA_SUCCESS)
                        goto done;
                    ((uint64_t *)a.ptr[i])[k] = m;
                }
            vals[i] = (uint64_t)(uintptr_t)a.ptr[i];
            avalue[i] = &vals[i];
        }
    }
    /* Device-level calls need no client context, but the driver wants one current. */
    if (!c->cur && (res = srv_use_device(0)) != CUDA_SUCCESS)
        goto done;
    /* Arrays are device memory: beyond the client's limit the driver is not asked. */
    int dev = c->cur ? c->cur->device : 0;
    uint64_t bytes = array_bytes(id, &a);
    if (bytes && !srv_mem_fits(c, dev, bytes)) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    ffi_sarg rc = 0;
    ffi_call(&cifs[id], FFI_FN(srv_drv_fns[id]), &rc, avalue);
    res = (CUresult)rc;
    if (res == CUDA_SUCCESS) {
        /* Handles the call made or returned become the caller's; destroyed ones go. */
        for (int i = 0; i < d->nparams; i++) {
            const struct shim_param *pp = &d->params[i];
            if (pp->kind != SHIM_PK_OUT || !pp->htype || !a.ptr[i] || pp->ckind != SHIM_CK_ONE)
                continue;
            uint64_t v = *(uint64_t *)a.ptr[i];
            if (srv_handle_add(c, pp->htype, v, pp->creates) != 0 || !bytes || !pp->creates)
                continue;
            struct srv_handle *h = srv_handle_get(c, pp->htype, v);
            if (h->bytes)
                continue; /* already counted: the driver handed the same handle out twice */
            h->bytes = bytes;
            h->dev = dev;
            srv_mem_count(c, dev, bytes);
            c->mem_refused[dev] = 0;
        }
        if (d->destroys >= 0)
            srv_handle_remove(c, d->params[d->destroys].htype, a.val[d->destroys]);
    }
done:
    if (d->cls == SHIM_ASYNC || lane < 0) {
        srv_defer(c, res, d->name);
        return;
    }
    srv_reply(c, lane, res, res == CUDA_SUCCESS ? (uint32_t)a.out_len : 0);
}

void srv_generic_destroy(struct srv_client *c, uint32_t type, uint64_t value)
{
    (void)c;
    int id = type < SHIM_NHTYPES ? shim_htype_destroyer[type] : -1;
    if (id < 0 || !cif_ok[id] || !srv_drv_fns[id] || shim_calls[id].nparams != 1)
        return;
    uint64_t v = value;
    void *avalue[1] = {&v};
    ffi_sarg rc;
    ffi_call(&cifs[id], FFI_FN(srv_drv_fns[id]), &rc, avalue);
}
