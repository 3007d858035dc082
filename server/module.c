/* Modules, libraries, functions, kernels and globals of a client, loaded into the shared
 * context from images the client uploaded. Each function comes back to the client with its
 * parameter layout and launch limits, so that launches are packed and checked there. */
#include "server/server.h"

#include <stdlib.h>
#include <string.h>

#include "channel/image.h"

#define LOG_MAX (16u << 10) /* JIT log bytes returned per log */

/* Takes the uploaded image (the blob is reset in every case). */
static uint8_t *take_blob(struct srv_client *c, uint64_t size, CUresult *err)
{
    uint8_t *b = c->blob;
    size_t n = c->blob_len;
    c->blob_len = 0;
    *err = CUDA_ERROR_INVALID_IMAGE;
    if (!b || n != size || n == 0)
        return NULL;
    /* The whole image must be there before the driver reads it (its own headers give
     * its size), and PTX must end where the upload ends. */
    if (chan_image_size(b, n) != n)
        return NULL;
    *err = CUDA_SUCCESS;
    return b;
}

void srv_op_module_load(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_module_load m;
    struct chan_module_loaded rep = {0};
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    char *info = NULL, *error = NULL;
    uint8_t *out = srv_lane_data(c, r->lane);
    if (len < sizeof(m)) {
        c->blob_len = 0;
        goto reply;
    }
    memcpy(&m, p, sizeof(m));
    if (m.njit > 32 || len != sizeof(m) + m.njit * sizeof(struct chan_jit_opt)) {
        c->blob_len = 0;
        goto reply;
    }
    uint8_t *image = take_blob(c, m.image_size, &res);
    if (!image)
        goto reply;
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto reply;
    }
    CUjit_option opts[40];
    void *vals[40];
    unsigned n = 0;
    int wall = -1, info_size_i = -1, error_size_i = -1;
    for (uint32_t i = 0; i < m.njit; i++) {
        struct chan_jit_opt o;
        memcpy(&o, p + sizeof(m) + i * sizeof(o), sizeof(o));
        switch (o.option) {
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            if (!info && (info = calloc(1, LOG_MAX))) {
                opts[n] = CU_JIT_INFO_LOG_BUFFER;
                vals[n++] = info;
                info_size_i = (int)n;
                opts[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
                vals[n++] = (void *)(uintptr_t)LOG_MAX;
            }
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            if (!error && (error = calloc(1, LOG_MAX))) {
                opts[n] = CU_JIT_ERROR_LOG_BUFFER;
                vals[n++] = error;
                error_size_i = (int)n;
                opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
                vals[n++] = (void *)(uintptr_t)LOG_MAX;
            }
            break;
        case CU_JIT_INFO_LOG_BUFFER:
        case CU_JIT_ERROR_LOG_BUFFER:
        case CU_JIT_GLOBAL_SYMBOL_NAMES:
        case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
        case CU_JIT_REFERENCED_KERNEL_NAMES:
        case CU_JIT_REFERENCED_VARIABLE_NAMES:
        case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
            break; /* pointers into the client: never passed on */
        case CU_JIT_WALL_TIME:
            wall = (int)n;
            opts[n] = CU_JIT_WALL_TIME;
            vals[n++] = NULL;
            break;
        default:
            opts[n] = (CUjit_option)o.option;
            vals[n++] = (void *)(uintptr_t)o.value;
        }
    }
    struct srv_module *mod = calloc(1, sizeof(*mod));
    if (!mod) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto reply;
    }
    if (m.kind == CHAN_IMAGE_MODULE) {
        res = DRV(cuModuleLoadDataEx)(&mod->mod, image, n, opts, vals);
        mod->key = (uint64_t)(uintptr_t)mod->mod;
    } else if (m.kind == CHAN_IMAGE_FATBIN) {
        res = DRV(cuModuleLoadFatBinary)(&mod->mod, image);
        mod->key = (uint64_t)(uintptr_t)mod->mod;
    } else if (m.kind == CHAN_IMAGE_LIBRARY) {
        res = DRV(cuLibraryLoadData)(&mod->lib, image, opts, vals, n, NULL, NULL, 0);
        mod->is_library = 1;
        mod->key = (uint64_t)(uintptr_t)mod->lib;
    }
    if (res == CUDA_SUCCESS) {
        mod->ctx = c->cur->id;
        HASH_ADD(hh, c->modules, key, sizeof(mod->key), mod);
        rep.handle = mod->key;
    } else {
        free(mod);
    }
    if (wall >= 0)
        memcpy(&rep.wall_time, &vals[wall], sizeof(float));
    (void)info_size_i;
    (void)error_size_i;
reply:;
    /* Logs follow the reply header, cut to what the lane holds. */
    uint32_t room = CHAN_LANE_DATA - (uint32_t)sizeof(rep);
    rep.info_len = info ? (uint32_t)strnlen(info, LOG_MAX) : 0;
    if (rep.info_len > room / 2)
        rep.info_len = room / 2;
    rep.error_len = error ? (uint32_t)strnlen(error, LOG_MAX) : 0;
    if (rep.error_len > room - rep.info_len)
        rep.error_len = room - rep.info_len;
    memcpy(out, &rep, sizeof(rep));
    if (rep.info_len)
        memcpy(out + sizeof(rep), info, rep.info_len);
    if (rep.error_len)
        memcpy(out + sizeof(rep) + rep.info_len, error, rep.error_len);
    free(info);
    free(error);
    srv_reply(c, r->lane, res, (uint32_t)sizeof(rep) + rep.info_len + rep.error_len);
}

/* Forgets the functions and globals of a module/library (their handles die with it). */
static void drop_children(struct srv_client *c, uint64_t key)
{
    struct srv_func *f, *t;
    HASH_ITER(hh, c->funcs, f, t)
    if (f->owner == key) {
        HASH_DEL(c->funcs, f);
        free(f);
    }
    size_t j = 0;
    for (size_t i = 0; i < c->nallocs; i++)
        if (!(c->allocs[i].kind == SRV_ALLOC_GLOBAL && c->allocs[i].owner == key))
            c->allocs[j++] = c->allocs[i];
    c->nallocs = j;
}

void srv_op_module_unload(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                          uint32_t len)
{
    struct chan_handle m;
    struct srv_module *mod = NULL;
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    if (len == sizeof(m)) {
        memcpy(&m, p, sizeof(m));
        mod = srv_module_get(c, m.handle);
    }
    if (mod && mod->is_library == (m.kind == CHAN_H_LIBRARY) && !mod->borrowed) {
        /* Work in flight may still run its kernels. */
        srv_streams_drain(c, 0);
        res = mod->is_library ? DRV(cuLibraryUnload)(mod->lib) : DRV(cuModuleUnload)(mod->mod);
        drop_children(c, mod->key);
        /* A library's module handle goes with it. */
        struct srv_module *x, *t;
        HASH_ITER(hh, c->modules, x, t)
        if (x->borrowed && x->owner == mod->key) {
            drop_children(c, x->key);
            HASH_DEL(c->modules, x);
            free(x);
        }
        HASH_DEL(c->modules, mod);
        free(mod);
    }
    srv_reply(c, r->lane, res, 0);
}

/* Fills a chan_function (and its layout) for a function or kernel at `out`; returns bytes
 * written, 0 on failure with *err. */
static uint32_t describe(struct srv_client *c, uint64_t h, int is_kernel, uint8_t *out,
                         uint32_t room, CUresult *err)
{
    struct chan_function f = {.handle = h};
    uint32_t (*layout)[2] = (uint32_t(*)[2])(out + sizeof(f));
    uint32_t maxp = room > sizeof(f) ? (room - (uint32_t)sizeof(f)) / 8 : 0;
    if (maxp > CHAN_MAX_PARAMS)
        maxp = CHAN_MAX_PARAMS;
    int dev = c->cur ? c->cur->device : 0;
    for (uint32_t i = 0;; i++) {
        size_t off = 0, size = 0;
        CUresult r = is_kernel ? DRV(cuKernelGetParamInfo)((CUkernel)(uintptr_t)h, i, &off, &size)
                               : DRV(cuFuncGetParamInfo)((CUfunction)(uintptr_t)h, i, &off, &size);
        if (r == CUDA_ERROR_INVALID_VALUE)
            break; /* past the last parameter */
        if (r != CUDA_SUCCESS) {
            *err = r;
            return 0;
        }
        if (i >= maxp) {
            *err = CUDA_ERROR_NOT_SUPPORTED;
            return 0;
        }
        layout[i][0] = (uint32_t)off;
        layout[i][1] = (uint32_t)size;
        f.nparams = i + 1;
        if (off + size > f.param_bytes)
            f.param_bytes = (uint32_t)(off + size);
    }
    int v[3] = {0, 0, -1};
    static const CUfunction_attribute attrs[3] = {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                                  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                                  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES};
    for (int i = 0; i < 3; i++) {
        CUresult r = is_kernel
                         ? DRV(cuKernelGetAttribute)(&v[i], attrs[i], (CUkernel)(uintptr_t)h, dev)
                         : DRV(cuFuncGetAttribute)(&v[i], attrs[i], (CUfunction)(uintptr_t)h);
        if (r != CUDA_SUCCESS)
            v[i] = i == 2 ? -1 : 0; /* unknown: the client does not check that limit */
    }
    f.max_threads = v[0];
    f.static_smem = v[1];
    f.max_dynamic_smem = v[2];
    memcpy(out, &f, sizeof(f));
    *err = CUDA_SUCCESS;
    return (uint32_t)sizeof(f) + f.nparams * 8;
}

static CUresult add_func(struct srv_client *c, uint64_t key, int is_kernel, uint64_t owner)
{
    if (srv_func_get(c, key))
        return CUDA_SUCCESS;
    struct srv_func *f = calloc(1, sizeof(*f));
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->key = key;
    f->is_kernel = is_kernel;
    f->owner = owner;
    f->ctx = c->cur ? c->cur->id : 0;
    HASH_ADD(hh, c->funcs, key, sizeof(f->key), f);
    return CUDA_SUCCESS;
}

/* Parses a chan_lookup and its NUL-terminated name. */
static int lookup_args(uint8_t *p, uint32_t len, struct chan_lookup *m, const char **name)
{
    if (len < sizeof(*m))
        return -1;
    memcpy(m, p, sizeof(*m));
    if (m->name_len > len - sizeof(*m))
        return -1;
    *name = NULL;
    if (m->name_len) {
        if (p[sizeof(*m) + m->name_len - 1] != '\0')
            return -1;
        *name = (const char *)p + sizeof(*m);
    }
    return 0;
}

void srv_op_get_function(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                         uint32_t len)
{
    struct chan_lookup m;
    const char *name;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t out = 0;
    if (lookup_args(p, len, &m, &name) != 0)
        goto reply;
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto reply;
    }
    uint64_t key = 0, owner = 0;
    int is_kernel = 0;
    if (m.kind == CHAN_H_KERNEL) {
        struct srv_func *k = srv_func_get(c, m.handle);
        res = CUDA_ERROR_INVALID_HANDLE;
        if (!k || !k->is_kernel)
            goto reply;
        CUfunction f;
        res = DRV(cuKernelGetFunction)(&f, (CUkernel)(uintptr_t)m.handle);
        key = (uint64_t)(uintptr_t)f;
        owner = k->owner;
    } else {
        struct srv_module *mod = srv_module_get(c, m.handle);
        res = CUDA_ERROR_INVALID_HANDLE;
        if (!mod || mod->is_library != (m.kind == CHAN_H_LIBRARY))
            goto reply;
        res = CUDA_ERROR_INVALID_VALUE;
        if (!name)
            goto reply;
        if (mod->is_library) {
            CUkernel k;
            res = DRV(cuLibraryGetKernel)(&k, mod->lib, name);
            key = (uint64_t)(uintptr_t)k;
            is_kernel = 1;
        } else {
            CUfunction f;
            res = DRV(cuModuleGetFunction)(&f, mod->mod, name);
            key = (uint64_t)(uintptr_t)f;
        }
        owner = mod->key;
    }
    if (res != CUDA_SUCCESS)
        goto reply;
    out = describe(c, key, is_kernel, srv_lane_data(c, r->lane), CHAN_LANE_DATA, &res);
    if (res == CUDA_SUCCESS)
        res = add_func(c, key, is_kernel, owner);
reply:
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out : 0);
}

void srv_op_get_global(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                       uint32_t len)
{
    struct chan_lookup m;
    const char *name;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint64_t rep[2] = {0, 0};
    struct srv_module *mod = NULL;
    if (lookup_args(p, len, &m, &name) != 0 || !name)
        goto reply;
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto reply;
    }
    mod = srv_module_get(c, m.handle);
    if (!mod || mod->is_library != (m.kind == CHAN_H_LIBRARY)) {
        res = CUDA_ERROR_INVALID_HANDLE;
        goto reply;
    }
    CUdeviceptr d = 0;
    size_t size = 0;
    res = mod->is_library ? DRV(cuLibraryGetGlobal)(&d, &size, mod->lib, name)
                          : DRV(cuModuleGetGlobal_v2)(&d, &size, mod->mod, name);
    if (res == CUDA_SUCCESS) {
        struct srv_alloc *old = srv_alloc_find(c, d, 1);
        if (!old || old->base != d) {
            struct srv_alloc a = {.base = d, .size = size, .kind = SRV_ALLOC_GLOBAL,
                                  .ctx = c->cur->id, .owner = mod->key};
            if (srv_alloc_add(c, &a) != 0)
                res = CUDA_ERROR_OUT_OF_MEMORY;
        }
        rep[0] = d;
        rep[1] = size;
    }
reply:
    memcpy(srv_lane_data(c, r->lane), rep, sizeof(rep));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? sizeof(rep) : 0);
}

void srv_op_enum_functions(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                           uint32_t len)
{
    struct chan_handle m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint8_t *out = srv_lane_data(c, r->lane);
    uint32_t used = 4, count = 0;
    if (len != sizeof(m))
        goto reply;
    memcpy(&m, p, sizeof(m));
    struct srv_module *mod = srv_module_get(c, m.handle);
    res = CUDA_ERROR_INVALID_HANDLE;
    if (!mod || mod->is_library != (m.kind == CHAN_H_LIBRARY))
        goto reply;
    unsigned n = 0;
    res = mod->is_library ? DRV(cuLibraryGetKernelCount)(&n, mod->lib)
                          : DRV(cuModuleGetFunctionCount)(&n, mod->mod);
    if (res != CUDA_SUCCESS)
        goto reply;
    if (n > m.arg)
        n = m.arg;
    if (n > 4096)
        n = 4096;
    uint64_t *hs = calloc(n ? n : 1, sizeof(*hs));
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!hs)
        goto reply;
    res = mod->is_library ? DRV(cuLibraryEnumerateKernels)((CUkernel *)hs, n, mod->lib)
                          : DRV(cuModuleEnumerateFunctions)((CUfunction *)hs, n, mod->mod);
    for (unsigned i = 0; i < n && res == CUDA_SUCCESS; i++) {
        uint32_t w = describe(c, hs[i], mod->is_library, out + used, CHAN_LANE_DATA - used, &res);
        if (res == CUDA_SUCCESS)
            res = add_func(c, hs[i], mod->is_library, mod->key);
        used += w;
        count++;
    }
    free(hs);
reply:
    memcpy(out, &count, 4);
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? used : 0);
}

void srv_op_handle_query(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                         uint32_t len)
{
    struct chan_handle_query q;
    CUresult res = CUDA_ERROR_INVALID_HANDLE;
    uint8_t *out = srv_lane_data(c, r->lane);
    uint32_t n = 0;
    if (len != sizeof(q)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto reply;
    }
    memcpy(&q, p, sizeof(q));
    struct srv_func *f = srv_func_get(c, q.handle);
    struct srv_module *mod = srv_module_get(c, q.handle);
    uint64_t h = 0;
    const char *name = NULL;
    switch (q.query) {
    case CHAN_Q_FUNC_MODULE:
        if (f && !f->is_kernel && srv_module_get(c, f->owner)) {
            struct srv_module *o = srv_module_get(c, f->owner);
            if (!o->is_library) {
                h = o->key;
                res = CUDA_SUCCESS;
            } else {
                CUmodule mm;
                res = DRV(cuFuncGetModule)(&mm, (CUfunction)(uintptr_t)q.handle);
                h = (uint64_t)(uintptr_t)mm;
            }
        }
        break;
    case CHAN_Q_KERNEL_LIBRARY:
        if (f && f->is_kernel) {
            h = f->owner;
            res = CUDA_SUCCESS;
        }
        break;
    case CHAN_Q_LIB_MODULE:
        if (mod && mod->is_library) {
            CUmodule mm;
            res = DRV(cuLibraryGetModule)(&mm, mod->lib);
            h = (uint64_t)(uintptr_t)mm;
            /* The module belongs to the library: usable by the client, unloaded with it. */
            if (res == CUDA_SUCCESS && !srv_module_get(c, h)) {
                struct srv_module *x = calloc(1, sizeof(*x));
                if (!x) {
                    res = CUDA_ERROR_OUT_OF_MEMORY;
                    break;
                }
                x->key = h;
                x->mod = mm;
                x->borrowed = 1;
                x->owner = mod->key;
                x->ctx = mod->ctx;
                HASH_ADD(hh, c->modules, key, sizeof(x->key), x);
            }
        }
        break;
    case CHAN_Q_FUNC_NAME:
        if (f && !f->is_kernel)
            res = DRV(cuFuncGetName)(&name, (CUfunction)(uintptr_t)q.handle);
        break;
    case CHAN_Q_KERNEL_NAME:
        if (f && f->is_kernel)
            res = DRV(cuKernelGetName)(&name, (CUkernel)(uintptr_t)q.handle);
        break;
    default:
        res = CUDA_ERROR_INVALID_VALUE;
    }
    if (res == CUDA_SUCCESS && name) {
        n = (uint32_t)strnlen(name, CHAN_LANE_DATA - 1);
        memcpy(out, name, n);
    } else if (res == CUDA_SUCCESS) {
        memcpy(out, &h, sizeof(h));
        n = sizeof(h);
    }
reply:
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? n : 0);
}

void srv_op_func_set_attr(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                          uint32_t len)
{
    struct chan_func_attr m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    if (len == sizeof(m)) {
        memcpy(&m, p, sizeof(m));
        struct srv_func *f = srv_func_get(c, m.handle);
        if (!f || (m.is_kernel && !f->is_kernel))
            res = CUDA_ERROR_INVALID_HANDLE;
        else if (m.is_kernel)
            res = DRV(cuKernelSetAttribute)((CUfunction_attribute)m.attr, m.value,
                                            (CUkernel)(uintptr_t)m.handle, m.device);
        else
            res = DRV(cuFuncSetAttribute)((CUfunction)(uintptr_t)m.handle,
                                          (CUfunction_attribute)m.attr, m.value);
    }
    srv_reply(c, r->lane, res, 0);
}
