/* Modules, libraries, functions, kernels and globals. Images (PTX, cubin, fat binaries)
 * are uploaded to the server, which loads them into the shared context; functions and
 * kernels come back with their parameter layouts, which the client keeps for launches. */
#include "interpose/shim.h"
#include "channel/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct fatbin_wrapper {
    int magic;
    int version;
    const void *data;
    void *filename_or_fatbins;
};

/* Size of an in-memory image, which the driver API passes without one. */
static size_t image_size(const void *image)
{
    return chan_image_size(image, 0);
}

/* The fat binary inside cudart's registration wrapper, or the image itself. */
static const void *unwrap(const void *image)
{
    int magic;
    memcpy(&magic, image, sizeof(magic));
    if ((uint32_t)magic == CHAN_FATBIN_WRAPPER_MAGIC)
        return ((const struct fatbin_wrapper *)image)->data;
    return image;
}

/* JIT options the client must rewrite (their values are client pointers) or answer. */
struct jit {
    unsigned n;
    struct chan_jit_opt opt[32];
    char *info_buf, *error_buf;
    size_t info_size, error_size;
    int info_i, error_i, wall_i; /* option indexes to write back, -1 none */
};

static CUresult jit_parse(struct jit *j, unsigned n, const CUjit_option *opts, void **vals)
{
    memset(j, 0, sizeof(*j));
    j->info_i = j->error_i = j->wall_i = -1;
    if (n && (!opts || !vals)) return CUDA_ERROR_INVALID_VALUE;
    if (n > sizeof(j->opt) / sizeof(j->opt[0])) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        uint64_t v = (uint64_t)(uintptr_t)vals[i];
        switch (chan_jit_kind(opts[i])) {
        case CHAN_JIT_INFO_LOG:
            j->info_buf = vals[i];
            continue; /* the server gets a buffer of its own */
        case CHAN_JIT_ERROR_LOG:
            j->error_buf = vals[i];
            continue;
        case CHAN_JIT_INFO_LOG_SIZE:
            j->info_size = (size_t)v;
            j->info_i = (int)i;
            continue;
        case CHAN_JIT_ERROR_LOG_SIZE:
            j->error_size = (size_t)v;
            j->error_i = (int)i;
            continue;
        case CHAN_JIT_WALL_TIME:
            j->wall_i = (int)i;
            continue;
        case CHAN_JIT_POINTER:
            return shim_refuse("JIT options that pass host pointers");
        case CHAN_JIT_VALUE:
            j->opt[j->n].option = (uint32_t)opts[i];
            j->opt[j->n++].value = v;
        }
    }
    return CUDA_SUCCESS;
}

/* Copies the reply's logs and wall time back where the caller asked for them. */
static void jit_answer(struct jit *j, const struct chan_module_loaded *m, const char *logs,
                       uint32_t len, void **vals)
{
    const char *info = logs, *err = logs + m->info_len;
    if ((size_t)m->info_len + m->error_len > len) return;
    if (j->info_buf && j->info_size) {
        size_t n = m->info_len < j->info_size - 1 ? m->info_len : j->info_size - 1;
        memcpy(j->info_buf, info, n);
        j->info_buf[n] = '\0';
        if (j->info_i >= 0) vals[j->info_i] = (void *)(uintptr_t)n;
    }
    if (j->error_buf && j->error_size) {
        size_t n = m->error_len < j->error_size - 1 ? m->error_len : j->error_size - 1;
        memcpy(j->error_buf, err, n);
        j->error_buf[n] = '\0';
        if (j->error_i >= 0) vals[j->error_i] = (void *)(uintptr_t)n;
    }
    if (j->wall_i >= 0) memcpy(&vals[j->wall_i], &m->wall_time, sizeof(float));
}

/* What module calls need: a current context, except for libraries and their kernels,
 * which belong to no context (cuDNN 9 loads its kernels before any context exists). */
static CUresult ready_for(int library)
{
    return library ? shim_ready() : shim_ready_ctx();
}

/* Uploads an image and loads it as `kind`; the handle comes back in *handle. */
static CUresult load(unsigned kind, const void *image, struct jit *j, void **vals, uint64_t *handle)
{
    CUresult r = ready_for(kind == CHAN_IMAGE_LIBRARY);
    if (r != CUDA_SUCCESS) return r;
    if (!image || !handle) return CUDA_ERROR_INVALID_VALUE;
    size_t size = image_size(image);
    if (j->info_buf && j->info_size) {
        j->opt[j->n].option = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
        j->opt[j->n++].value = j->info_size;
    }
    if (j->error_buf && j->error_size) {
        j->opt[j->n].option = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
        j->opt[j->n++].value = j->error_size;
    }
    if (j->wall_i >= 0) {
        j->opt[j->n].option = CU_JIT_WALL_TIME;
        j->opt[j->n++].value = 0;
    }
    /* Loading code waits for every stream of the context (hostfn.c says why first). */
    shim_hostfn_settle(shim_current_device());
    /* The blob and the load request must be consecutive: another thread's load would
     * otherwise interleave its blob. */
    static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&load_lock);
    r = shim_upload(image, size);
    uint8_t req[sizeof(struct chan_module_load) + sizeof(j->opt)];
    struct chan_module_load *m = (struct chan_module_load *)req;
    m->kind = kind;
    m->njit = j->n;
    m->image_size = size;
    memcpy(req + sizeof(*m), j->opt, j->n * sizeof(j->opt[0]));
    const uint8_t *rep = NULL;
    uint32_t n = 0;
    if (r == CUDA_SUCCESS)
        r = shim_rpc_lane(CHAN_OP_MODULE_LOAD, req,
                          (uint32_t)(sizeof(*m) + j->n * sizeof(j->opt[0])), &rep, &n);
    pthread_mutex_unlock(&load_lock);
    if (n >= sizeof(struct chan_module_loaded)) {
        struct chan_module_loaded ml;
        memcpy(&ml, rep, sizeof(ml));
        if (vals)
            jit_answer(j, &ml, (const char *)rep + sizeof(ml), n - (uint32_t)sizeof(ml), vals);
        if (r == CUDA_SUCCESS) *handle = ml.handle;
    } else if (r == CUDA_SUCCESS) {
        r = CUDA_ERROR_UNKNOWN;
    }
    return r;
}

CUresult SHIM_IMPL(cuModuleLoadDataEx)(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues)
{
    struct jit j;
    if (!module) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = jit_parse(&j, numOptions, options, optionValues);
    uint64_t h;
    if (r == CUDA_SUCCESS &&
        (r = load(CHAN_IMAGE_MODULE, image, &j, optionValues, &h)) == CUDA_SUCCESS)
        *module = (CUmodule)(uintptr_t)h;
    return r;
}

CUresult SHIM_IMPL(cuModuleLoadData)(CUmodule *module, const void *image)
{
    return cuModuleLoadDataEx(module, image, 0, NULL, NULL);
}

CUresult SHIM_IMPL(cuModuleLoadFatBinary)(CUmodule *module, const void *fatCubin)
{
    struct jit j;
    if (!module || !fatCubin) return CUDA_ERROR_INVALID_VALUE;
    jit_parse(&j, 0, NULL, NULL);
    uint64_t h;
    CUresult r = load(CHAN_IMAGE_FATBIN, unwrap(fatCubin), &j, NULL, &h);
    if (r == CUDA_SUCCESS) *module = (CUmodule)(uintptr_t)h;
    return r;
}

/* Reads a whole file into memory, NUL-terminated (PTX files are text). */
static void *read_file(const char *path, CUresult *err)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        *err = CUDA_ERROR_FILE_NOT_FOUND;
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (!buf)
        *err = CUDA_ERROR_OUT_OF_MEMORY;
    else
        buf[n] = '\0';
    return buf;
}

CUresult SHIM_IMPL(cuModuleLoad)(CUmodule *module, const char *fname)
{
    CUresult r = shim_ready_ctx();
    if (r != CUDA_SUCCESS) return r;
    void *image = read_file(fname, &r);
    if (!image) return r;
    r = cuModuleLoadData(module, image);
    free(image);
    return r;
}

static CUresult library_options(unsigned n, const CUlibraryOption *opts)
{
    for (unsigned i = 0; i < n; i++)
        if (opts[i] != CU_LIBRARY_BINARY_IS_PRESERVED)
            return shim_refuse("cuLibraryLoad with library options other than "
                               "CU_LIBRARY_BINARY_IS_PRESERVED");
    /* The server keeps its own copy of the image, so "preserved" needs nothing. */
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuLibraryLoadData)(CUlibrary *library, const void *code,
                                      CUjit_option *jitOptions, void **jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                      void **libraryOptionValues, unsigned int numLibraryOptions)
{
    (void)libraryOptionValues;
    struct jit j;
    if (!library || !code || (numLibraryOptions && !libraryOptions))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = library_options(numLibraryOptions, libraryOptions);
    if (r == CUDA_SUCCESS) r = jit_parse(&j, numJitOptions, jitOptions, jitOptionsValues);
    uint64_t h;
    const void *image = unwrap(code);
    if (r == CUDA_SUCCESS &&
        (r = load(CHAN_IMAGE_LIBRARY, image, &j, jitOptionsValues, &h)) == CUDA_SUCCESS) {
        *library = (CUlibrary)(uintptr_t)h;
        /* Kept for the process's other GPUs' servers (replicas.c). */
        shim_replica_library(h, image, image_size(image), numJitOptions == 0);
    }
    return r;
}

static CUresult load_image(const void *image, uint64_t *out)
{
    struct jit j;
    CUresult r = jit_parse(&j, 0, NULL, NULL);
    return r == CUDA_SUCCESS ? load(CHAN_IMAGE_LIBRARY, image, &j, NULL, out) : r;
}

CUresult SHIM_IMPL(cuLibraryLoadFromFile)(CUlibrary *library, const char *fileName,
                                          CUjit_option *jitOptions, void **jitOptionsValues,
                                          unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions,
                                          void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    void *image = read_file(fileName, &r);
    if (!image) return r;
    r = cuLibraryLoadData(library, image, jitOptions, jitOptionsValues, numJitOptions,
                          libraryOptions, libraryOptionValues, numLibraryOptions);
    free(image);
    return r;
}

/* A library's module (cuLibraryGetModule): its functions and globals are recorded under
 * the module's handle, and unloading the library unloads it, so the library's unload drops
 * them too. Pairs are few (one per library asked for its module); guarded by lib_lock. */
struct lib_module {
    uint64_t lib, mod;
};
static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lib_module *lib_mods;
static size_t nlib_mods, cap_lib_mods;

static void library_module_after(const void *const *argv)
{
    const CUmodule *pm = *(CUmodule *const *)argv[0];
    uint64_t lib = *(const uint64_t *)argv[1], mod = (uint64_t)(uintptr_t)*pm;
    pthread_mutex_lock(&lib_lock);
    for (size_t i = 0; i < nlib_mods; i++)
        if (lib_mods[i].lib == lib && lib_mods[i].mod == mod) goto out;
    if (nlib_mods == cap_lib_mods) {
        size_t ncap = cap_lib_mods ? cap_lib_mods * 2 : 8;
        struct lib_module *n = realloc(lib_mods, ncap * sizeof(*n));
        if (!n) goto out; /* its records then stay until the context goes: only memory */
        lib_mods = n;
        cap_lib_mods = ncap;
    }
    lib_mods[nlib_mods++] = (struct lib_module){.lib = lib, .mod = mod};
out:
    pthread_mutex_unlock(&lib_lock);
}

const struct shim_hook shim_hook_library_module = {.after = library_module_after};

/* What the client kept of a module's (or library's) functions and globals (and the host
 * copies of its __managed__ variables). */
static void forget(uint64_t h)
{
    shim_func_drop(h, 0);
    shim_range_drop(0, h, shim_mvar_range_gone);
}

/* Unloading is described in cuda_symbols.txt; what the client kept of the module's
 * functions and globals goes with it, and of a library's module's. */
static void unload_after(const void *const *argv)
{
    uint64_t h = *(const uint64_t *)argv[0];
    forget(h);
    pthread_mutex_lock(&lib_lock);
    for (size_t i = 0; i < nlib_mods;) {
        if (lib_mods[i].lib != h && lib_mods[i].mod != h) {
            i++;
            continue;
        }
        if (lib_mods[i].lib == h) forget(lib_mods[i].mod);
        lib_mods[i] = lib_mods[--nlib_mods];
    }
    pthread_mutex_unlock(&lib_lock);
}

/* Before the unload is sent: the host copies of its __managed__ variables (and of its
 * library module's) go first, so that no transfer sent after it names them (mvars.c); and
 * this process's host functions, since the server waits for its streams' work before it
 * unloads (hostfn.c). */
static CUresult unload_before(const void *const *argv)
{
    uint64_t h = *(const uint64_t *)argv[0];
    shim_replica_forget(h);
    shim_hostfn_settle(SHIM_SETTLE_ALL);
    shim_mvar_owner_gone(h);
    pthread_mutex_lock(&lib_lock);
    for (size_t i = 0; i < nlib_mods; i++)
        if (lib_mods[i].lib == h) shim_mvar_owner_gone(lib_mods[i].mod);
    pthread_mutex_unlock(&lib_lock);
    return CUDA_SUCCESS;
}

const struct shim_hook shim_hook_module_unload = {.before = unload_before, .after = unload_after};

/* ---------------------------------------------------------------- functions, kernels */

/* Asks for a function/kernel (by name in a module/library, or a kernel's function) and
 * records it; `owner` is what unloading it drops with. */
static CUresult get_function(uint64_t h, unsigned kind, const char *name, uint64_t owner,
                             uint64_t *out)
{
    CUresult r = ready_for(kind == CHAN_H_LIBRARY);
    if (r != CUDA_SUCCESS) return r;
    if (!out || !h || (kind != CHAN_H_KERNEL && !name))
        return kind == CHAN_H_KERNEL || !h ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    size_t nlen = name ? strlen(name) + 1 : 0;
    if (nlen > 4096) return CUDA_ERROR_INVALID_VALUE;
    shim_hostfn_settle(shim_current_device()); /* the server loads its code, in the context */
    uint8_t req[sizeof(struct chan_lookup) + 4096];
    struct chan_lookup *m = (struct chan_lookup *)req;
    m->handle = h;
    m->kind = kind;
    m->name_len = (uint32_t)nlen;
    memcpy(req + sizeof(*m), name, nlen);
    const uint8_t *rep;
    uint32_t n = 0;
    r = shim_rpc_lane(CHAN_OP_GET_FUNCTION, req, (uint32_t)(sizeof(*m) + nlen), &rep, &n);
    if (r != CUDA_SUCCESS) return r;
    /* A library's kernels outlive contexts, as in the driver; functions belong to one. */
    return shim_func_add(rep, n, owner, kind == CHAN_H_LIBRARY ? 0 : shim_current_ctx_id(), out);
}

CUresult SHIM_IMPL(cuModuleGetFunction)(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    uint64_t h = (uint64_t)(uintptr_t)hmod, f;
    if (!hfunc) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = get_function(h, CHAN_H_MODULE, name, h, &f);
    if (r == CUDA_SUCCESS) *hfunc = (CUfunction)(uintptr_t)f;
    return r;
}

static CUresult kernel_lookup(uint64_t lib, const char *name, uint64_t owner, uint64_t *out)
{
    return get_function(lib, CHAN_H_LIBRARY, name, owner, out);
}

/* As the library loads: replicas.c loads libraries and finds kernels on other servers so. */
__attribute__((constructor)) static void give_replicas_loaders(void)
{
    shim_replicas_use(load_image, kernel_lookup);
}

/* The library, and the kernel, named on the server the call goes to (replicas.c). */
CUresult SHIM_IMPL(cuLibraryGetKernel)(CUkernel *pKernel, CUlibrary library, const char *name)
{
    uint64_t h = (uint64_t)(uintptr_t)library, there, k;
    if (!pKernel) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_replica_for(h, shim_route_device(), &there);
    if (r == CUDA_SUCCESS) r = get_function(there, CHAN_H_LIBRARY, name, h, &k);
    if (r != CUDA_SUCCESS) return r;
    *pKernel = (CUkernel)(uintptr_t)k;
    shim_replica_kernel(k, h, name);
    return r;
}

CUresult SHIM_IMPL(cuKernelGetFunction)(CUfunction *pFunc, CUkernel kernel)
{
    uint64_t k = (uint64_t)(uintptr_t)kernel, there, f;
    if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
    if (!shim_func_get(k)) return CUDA_ERROR_INVALID_HANDLE;
    CUlibrary lib = NULL;
    CUresult r = cuKernelGetLibrary(&lib, kernel);
    if (r == CUDA_SUCCESS) r = shim_replica_for(k, shim_route_device(), &there);
    if (r == CUDA_SUCCESS)
        r = get_function(there, CHAN_H_KERNEL, NULL, (uint64_t)(uintptr_t)lib, &f);
    if (r == CUDA_SUCCESS) *pFunc = (CUfunction)(uintptr_t)f;
    return r;
}

/* Enumerations return a variable-size list of chan_function records. */
static CUresult enumerate(uint64_t h, unsigned kind, unsigned num, uint64_t *out)
{
    CUresult r = ready_for(kind == CHAN_H_LIBRARY);
    if (r != CUDA_SUCCESS) return r;
    if (!out || num == 0) return CUDA_ERROR_INVALID_VALUE;
    struct chan_handle m = {.handle = h, .kind = kind, .arg = num};
    struct shim_req q;
    if ((r = shim_req_begin(&q, CHAN_OP_ENUM_FUNCTIONS, sizeof(m), 1, 0)) != CUDA_SUCCESS) return r;
    memcpy(q.payload, &m, sizeof(m));
    shim_req_send(&q);
    const uint8_t *data;
    uint32_t len;
    if ((r = shim_req_wait(&q, &data, &len)) != CUDA_SUCCESS) return r;
    /* Copy out of the lane before making further calls. */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, data, len);
    uint32_t cnt = 0, off = 4;
    if (len >= 4) memcpy(&cnt, copy, 4);
    for (uint32_t i = 0; i < cnt && i < num && r == CUDA_SUCCESS; i++) {
        struct chan_function f;
        if (off + sizeof(f) > len) {
            r = CUDA_ERROR_UNKNOWN;
            break;
        }
        memcpy(&f, copy + off, sizeof(f));
        uint32_t rec = (uint32_t)sizeof(f) + f.nparams * 8;
        if (off + rec > len) {
            r = CUDA_ERROR_UNKNOWN;
            break;
        }
        r = shim_func_add(copy + off, rec, h, kind == CHAN_H_LIBRARY ? 0 : shim_current_ctx_id(),
                          &out[i]);
        off += rec;
    }
    free(copy);
    return r;
}

CUresult SHIM_IMPL(cuModuleEnumerateFunctions)(CUfunction *functions, unsigned int numFunctions,
                                               CUmodule mod)
{
    return enumerate((uint64_t)(uintptr_t)mod, CHAN_H_MODULE, numFunctions, (uint64_t *)functions);
}

CUresult SHIM_IMPL(cuLibraryEnumerateKernels)(CUkernel *kernels, unsigned int numKernels,
                                              CUlibrary lib)
{
    return enumerate((uint64_t)(uintptr_t)lib, CHAN_H_LIBRARY, numKernels, (uint64_t *)kernels);
}

/* ---------------------------------------------------------------- attributes */

/* Attributes are set through their descriptions; the launch limits the client checks
 * follow (a kernel's maximum dynamic shared memory). */
static void func_attr_after(const void *const *argv)
{
    shim_func_set_attr(*(const uint64_t *)argv[0], *(const int *)argv[1], *(const int *)argv[2]);
}

const struct shim_hook shim_hook_func_set_attribute = {.after = func_attr_after};

static void kernel_attr_after(const void *const *argv)
{
    shim_func_set_attr(*(const uint64_t *)argv[2], *(const int *)argv[0], *(const int *)argv[1]);
}

const struct shim_hook shim_hook_kernel_set_attribute = {.after = kernel_attr_after};
