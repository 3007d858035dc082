/* Modules, libraries, functions, kernels and globals of a client, loaded into the shared
 * context from images the client uploaded. Each function comes back to the client with its
 * parameter layout and launch limits, so that launches are packed and checked there. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/code/codegate.h"
#include "server/code/module.h"
#include "server/code/unloads.h"
#include "server/memory/quietctx.h"

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
    if (!b || n != size || n == 0) return NULL;
    /* The whole image must be there before the driver reads it (its own headers give
     * its size), and PTX must end where the upload ends. */
    if (chan_image_size(b, n) != n) return NULL;
    *err = CUDA_SUCCESS;
    return b;
}

/* The code of every kernel of an image the client just loaded, loaded now in the context of
 * device dev (the caller holds the code gate there), while the client's budget lasts.
 *
 * Why: the driver loads a kernel's code in a context lazily, at its first launch, and a load
 * waits for every stream of the context and holds the driver meanwhile. In one shared
 * context that first launch, which a program makes inside its timed work, waits for every
 * other client's queued work: ranks of an MPI job that start together serialise (issue 29:
 * 16 ranks of 75-us kernels took 0.110-0.132 s against MPS's 0.033; with every image loaded
 * eagerly, 0.075). Loaded when the client loads its image (cudart does at start, before the
 * job's work), that wait falls where little is queued. But a framework registers thousands
 * of kernels and uses few: all of PyTorch's loaded eagerly took its start from 7.7 to 13.9 s
 * and the server 400 MiB more. So an image is loaded whole only while the client's budget
 * (MPSSHIM_EAGER_KERNELS kernels, 256 by default; 0: none) covers it; a larger one, and
 * everything past the budget, stays lazy. */
static int eager_load(struct srv_client *c, CUlibrary lib, CUmodule mod)
{
    unsigned n = 0;
    CUresult r =
        lib ? DRV(cuLibraryGetKernelCount)(&n, lib) : DRV(cuModuleGetFunctionCount)(&n, mod);
    if (r != CUDA_SUCCESS || n == 0 || n > c->eager_left) return 0;
    void **h = calloc(n, sizeof(*h));
    if (!h) return 0;
    r = lib ? DRV(cuLibraryEnumerateKernels)((CUkernel *)h, n, lib)
            : DRV(cuModuleEnumerateFunctions)((CUfunction *)h, n, mod);
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        CUfunction f;
        /* A failure here is the first launch's to report, as it would be natively. */
        (void)(lib ? DRV(cuKernelGetFunction)(&f, (CUkernel)h[i])
                   : DRV(cuFuncLoad)((CUfunction)h[i]));
    }
    if (r == CUDA_SUCCESS) c->eager_left -= n;
    free(h);
    return 1; /* some of its code may be loaded (unloads.c) */
}

void srv_op_module_load(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_module_load m;
    struct chan_module_loaded rep = {0};
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    char *info = NULL, *error = NULL;
    uint8_t *out = srv_lane_data(c, r->lane);
    (void)len; /* its JIT options end it (its %payload line) */
    /* Not for the load: a client that loads code is about to work, and its first pinned
     * allocation waits for the quiet context's making (quietctx.c), less once it has begun. */
    srv_quiet_start(c, "a load of code, ahead of its work");
    memcpy(&m, p, sizeof(m));
    uint8_t *image = take_blob(c, m.image_size, &res);
    if (!image) goto reply;
    /* Libraries belong to no context (the driver loads them into each lazily); modules
     * to the current one. */
    if (!c->cur && m.kind != CHAN_IMAGE_LIBRARY) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto reply;
    }
    if (!c->cur && (res = srv_use_device(0)) != CUDA_SUCCESS) goto reply;
    CUjit_option opts[40];
    void *vals[40];
    unsigned n = 0;
    int wall = -1;
    for (uint32_t i = 0; i < m.njit; i++) {
        struct chan_jit_opt o;
        memcpy(&o, p + sizeof(m) + i * sizeof(o), sizeof(o));
        switch (chan_jit_kind((CUjit_option)o.option)) {
        case CHAN_JIT_INFO_LOG_SIZE:
            if (!info && (info = calloc(1, LOG_MAX))) {
                opts[n] = CU_JIT_INFO_LOG_BUFFER;
                vals[n++] = info;
                opts[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
                vals[n++] = (void *)(uintptr_t)LOG_MAX;
            }
            break;
        case CHAN_JIT_ERROR_LOG_SIZE:
            if (!error && (error = calloc(1, LOG_MAX))) {
                opts[n] = CU_JIT_ERROR_LOG_BUFFER;
                vals[n++] = error;
                opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
                vals[n++] = (void *)(uintptr_t)LOG_MAX;
            }
            break;
        case CHAN_JIT_INFO_LOG:
        case CHAN_JIT_ERROR_LOG:
        case CHAN_JIT_POINTER:
            break; /* pointers into the client: never passed on */
        case CHAN_JIT_WALL_TIME:
            wall = (int)n;
            opts[n] = CU_JIT_WALL_TIME;
            vals[n++] = NULL;
            break;
        case CHAN_JIT_VALUE:
            opts[n] = (CUjit_option)o.option;
            vals[n++] = (void *)(uintptr_t)o.value;
        }
    }
    CUmodule mod = NULL;
    CUlibrary lib = NULL;
    /* Loading waits for every stream of the context in the driver: not while one is held
     * on a value in device memory (codegate.c). */
    int gdev = c->cur ? c->cur->device : 0;
    if ((res = srv_codegate_enter(c, gdev, "loading code")) != CUDA_SUCCESS) goto reply;
    if (m.kind == CHAN_IMAGE_MODULE)
        res = DRV(cuModuleLoadDataEx)(&mod, image, n, opts, vals);
    else if (m.kind == CHAN_IMAGE_FATBIN)
        res = DRV(cuModuleLoadFatBinary)(&mod, image);
    else /* CHAN_IMAGE_LIBRARY: kind is one of the three (its %payload line) */
        res = DRV(cuLibraryLoadData)(&lib, image, opts, vals, n, NULL, NULL, 0);
    int loaded = res == CUDA_SUCCESS && eager_load(c, lib, mod);
    srv_codegate_leave(gdev);
    if (res == CUDA_SUCCESS) {
        uint64_t h = lib ? (uint64_t)(uintptr_t)lib : (uint64_t)(uintptr_t)mod;
        struct srv_obj *o = srv_obj_add(c, lib ? SHIM_HT_CUlibrary : SHIM_HT_CUmodule, h, 1, NULL);
        if (o) {
            if (loaded) srv_library_hot(o);
            rep.handle = h;
        } else {
            lib ? DRV(cuLibraryUnload)(lib) : DRV(cuModuleUnload)(mod);
            res = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (wall >= 0) memcpy(&rep.wall_time, &vals[wall], sizeof(float));
reply:;
    /* Logs follow the reply header, cut to what the lane holds. */
    uint32_t room = CHAN_LANE_DATA - (uint32_t)sizeof(rep);
    rep.info_len = info ? (uint32_t)strnlen(info, LOG_MAX) : 0;
    if (rep.info_len > room / 2) rep.info_len = room / 2;
    rep.error_len = error ? (uint32_t)strnlen(error, LOG_MAX) : 0;
    if (rep.error_len > room - rep.info_len) rep.error_len = room - rep.info_len;
    memcpy(out, &rep, sizeof(rep));
    if (rep.info_len) memcpy(out + sizeof(rep), info, rep.info_len);
    if (rep.error_len) memcpy(out + sizeof(rep) + rep.info_len, error, rep.error_len);
    free(info);
    free(error);
    srv_reply(c, r->lane, res, (uint32_t)sizeof(rep) + rep.info_len + rep.error_len);
}

/* Unloading (described in cuda_symbols.txt): work in flight may still run its kernels. */
static CUresult unload_before(struct srv_client *c, struct srv_call *k)
{
    (void)k;
    /* It left meanwhile: nothing is unloaded under its work (its release sees to it). */
    return srv_streams_drain(c, 0) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

const struct srv_hook srv_hook_module_unload = {.before = unload_before};

/* A library whose code ran may be kept loaded (unloads.c). */
static CUresult library_unload_call(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUlibrary, k->a.val[0]);
    return o ? srv_library_unload(c, o) : k->drive(k);
}

const struct srv_hook srv_hook_library_unload = {.before = unload_before,
                                                 .call = library_unload_call};

/* A departed client's library (cuda_symbols.txt: release=library). */
void srv_release_library(struct srv_client *c, struct srv_obj *o)
{
    CUresult r = srv_library_unload(c, o);
    if (r != CUDA_SUCCESS)
        srv_log("Client process %d: releasing a CUlibrary failed with %s", (int)c->pid,
                srv_errname(r));
}

uint32_t srv_func_describe(struct srv_client *c, uint64_t h, int is_kernel, uint8_t *out,
                           uint32_t room, CUresult *err)
{
    struct chan_function f = {.handle = h};
    uint32_t(*layout)[2] = (uint32_t(*)[2])(out + sizeof(f));
    uint32_t maxp = room > sizeof(f) ? (room - (uint32_t)sizeof(f)) / 8 : 0;
    if (maxp > CHAN_MAX_PARAMS) maxp = CHAN_MAX_PARAMS;
    int dev = c->cur ? c->cur->device : 0;
    for (uint32_t i = 0;; i++) {
        size_t off = 0, size = 0;
        CUresult r = is_kernel ? DRV(cuKernelGetParamInfo)((CUkernel)(uintptr_t)h, i, &off, &size)
                               : DRV(cuFuncGetParamInfo)((CUfunction)(uintptr_t)h, i, &off, &size);
        if (r == CUDA_ERROR_INVALID_VALUE) break; /* past the last parameter */
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
        if (off + size > f.param_bytes) f.param_bytes = (uint32_t)(off + size);
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

/* A function or kernel the client may use from now on; it dies with `owner`. */
static CUresult add_func(struct srv_client *c, uint64_t key, int is_kernel, struct srv_obj *owner)
{
    return srv_obj_add(c, is_kernel ? SHIM_HT_CUkernel : SHIM_HT_CUfunction, key, 0, owner)
               ? CUDA_SUCCESS
               : CUDA_ERROR_OUT_OF_MEMORY;
}

void srv_op_get_function(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_lookup m;
    CUresult res;
    uint32_t out = 0;
    (void)len;
    /* Its name, NUL-terminated, ends it; none when name_len is 0 (its %payload line). */
    memcpy(&m, p, sizeof(m));
    const char *name = m.name_len ? (const char *)p + sizeof(m) : NULL;
    /* A library's kernels need no context; a module's functions and a kernel's function
     * in the current context do. */
    if (!c->cur && m.kind != CHAN_H_LIBRARY) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto reply;
    }
    if (!c->cur && (res = srv_use_device(0)) != CUDA_SUCCESS) goto reply;
    uint64_t key = 0;
    struct srv_obj *owner = NULL;
    int is_kernel = 0;
    /* A function's code is loaded here, in the gate (codegate.c), so that neither this
     * call nor its first launch loads it later in the driver while a stream is held on a
     * value in device memory. */
    int gdev = c->cur ? c->cur->device : 0;
    if ((res = srv_codegate_enter(c, gdev, "loading code")) != CUDA_SUCCESS) goto reply;
    if (m.kind == CHAN_H_KERNEL) {
        /* A kernel's function in the current context: it belongs to the kernel. */
        owner = srv_obj_find(c, SHIM_HT_CUkernel, m.handle);
        res = CUDA_ERROR_INVALID_HANDLE;
        if (!owner) goto ungate;
        CUfunction f;
        res = DRV(cuKernelGetFunction)(&f, (CUkernel)(uintptr_t)m.handle);
        key = (uint64_t)(uintptr_t)f;
        if (res == CUDA_SUCCESS && gdev >= 0 && gdev < 64) /* loaded there (launch.c) */
            owner->aux |= 1ull << gdev;
        srv_library_hot(owner);
    } else {
        int lib = m.kind == CHAN_H_LIBRARY;
        owner = srv_obj_find(c, lib ? SHIM_HT_CUlibrary : SHIM_HT_CUmodule, m.handle);
        res = CUDA_ERROR_INVALID_HANDLE;
        if (!owner) goto ungate;
        res = CUDA_ERROR_INVALID_VALUE;
        if (!name) goto ungate;
        if (lib) {
            CUkernel k;
            res = DRV(cuLibraryGetKernel)(&k, (CUlibrary)(uintptr_t)m.handle, name);
            key = (uint64_t)(uintptr_t)k;
            is_kernel = 1;
        } else {
            CUfunction f;
            res = DRV(cuModuleGetFunction)(&f, (CUmodule)(uintptr_t)m.handle, name);
            key = (uint64_t)(uintptr_t)f;
            /* A driver without cuFuncLoad loads at the first launch, as before. */
            if (res == CUDA_SUCCESS) DRV(cuFuncLoad)(f);
        }
    }
    /* Describing a kernel asks for its attributes in each device's context, which may load
     * it there: in the gate too. */
    if (res == CUDA_SUCCESS)
        out = srv_func_describe(c, key, is_kernel, srv_lane_data(c, r->lane), CHAN_LANE_DATA, &res);
ungate:
    srv_codegate_leave(gdev);
    if (res == CUDA_SUCCESS) res = add_func(c, key, is_kernel, owner);
reply:
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out : 0);
}

void srv_op_enum_functions(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_handle m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint8_t *out = srv_lane_data(c, r->lane);
    uint32_t used = 4, count = 0;
    (void)len;
    memcpy(&m, p, sizeof(m)); /* the payload is one (its %op row) */
    int lib = m.kind == CHAN_H_LIBRARY;
    struct srv_obj *mod = srv_obj_find(c, lib ? SHIM_HT_CUlibrary : SHIM_HT_CUmodule, m.handle);
    res = CUDA_ERROR_INVALID_HANDLE;
    if (!mod) goto reply;
    unsigned n = 0;
    res = lib ? DRV(cuLibraryGetKernelCount)(&n, (CUlibrary)(uintptr_t)m.handle)
              : DRV(cuModuleGetFunctionCount)(&n, (CUmodule)(uintptr_t)m.handle);
    if (res != CUDA_SUCCESS) goto reply;
    if (n > m.arg) n = m.arg;
    if (n > 4096) n = 4096;
    uint64_t *hs = calloc(n ? n : 1, sizeof(*hs));
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!hs) goto reply;
    res = lib ? DRV(cuLibraryEnumerateKernels)((CUkernel *)hs, n, (CUlibrary)(uintptr_t)m.handle)
              : DRV(cuModuleEnumerateFunctions)((CUfunction *)hs, n, (CUmodule)(uintptr_t)m.handle);
    for (unsigned i = 0; i < n && res == CUDA_SUCCESS; i++) {
        uint32_t w = srv_func_describe(c, hs[i], lib, out + used, CHAN_LANE_DATA - used, &res);
        if (res == CUDA_SUCCESS) res = add_func(c, hs[i], lib, mod);
        used += w;
        count++;
    }
    free(hs);
reply:
    memcpy(out, &count, 4);
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? used : 0);
}
