// Modules: an image's kernels bound to their CPU twins, and its globals in device memory.
// Loading, unloading, and looking up functions and globals.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void module_release(struct cpudrv_obj *o)
{
    struct cpudrv_module *m = (struct cpudrv_module *)o;
    for (unsigned i = 0; i < m->nfuncs; i++) {
        free(m->funcs[i]->name);
        free(m->funcs[i]->params);
        free(m->funcs[i]);
        if (m->kernels) free(m->kernels[i]);
    }
    free(m->kernels);
    for (unsigned i = 0; i < m->nglobals; i++)
        free(m->globals[i].name);
    free(m->funcs);
    free(m->globals);
    if (m->gmem) cpudrv_mem_unmap_later(m->gmem, m->gmaplen);
    if (m->mmem) cpudrv_mem_unmap_later(m->mmem, m->mmaplen);
    free(m);
}

// Twin layout: natural offsets from the twin's sizes and alignments.
static struct cpudrv_param *twin_layout(const struct cpudrv_twin *t)
{
    struct cpudrv_param *p = calloc(t->nparams ? t->nparams : 1, sizeof *p);
    uint32_t off = 0;
    for (unsigned i = 0; p && i < t->nparams; i++) {
        off = (off + t->align[i] - 1) / t->align[i] * t->align[i];
        p[i].off = off;
        p[i].size = t->size[i];
        off += t->size[i];
    }
    return p;
}

static int same_layout(const struct cpudrv_img_kernel *k, const struct cpudrv_twin *t)
{
    if (k->nparams != t->nparams) return 0;
    for (unsigned i = 0; i < t->nparams; i++)
        if (k->params[i].size != t->size[i]) return 0;
    return 1;
}

static CUresult make_func(struct cpudrv_module *m, const struct cpudrv_img_kernel *k,
                          const struct cpudrv_twin *t, struct cpudrv_func **out)
{
    struct cpudrv_func *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    f->name = strdup(k->name);
    f->nparams = t->nparams;
    if (k->have_params) {
        f->params = calloc(k->nparams ? k->nparams : 1, sizeof *f->params);
        if (f->params && k->nparams) memcpy(f->params, k->params, k->nparams * sizeof *f->params);
    } else {
        f->params = twin_layout(t);
    }
    if (!f->name || !f->params) {
        free(f->name);
        free(f->params);
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned i = 0; i < f->nparams; i++)
        if (f->params[i].off + f->params[i].size > f->argbytes)
            f->argbytes = f->params[i].off + f->params[i].size;
    cpudrv_obj_init(&f->o, CPUDRV_K_FUNC, NULL, NULL);
    f->mod = m;
    f->twin = t;
    f->max_dyn_shmem = CPUDRV_SHMEM_DEFAULT;
    f->carveout = -1;
    f->cache = CU_FUNC_CACHE_PREFER_NONE;
    *out = f;
    return CUDA_SUCCESS;
}

// Lays out the globals of one segment (managed or not) and maps it; 0 bytes: none.
static CUresult make_segment(struct cpudrv_module *m, const struct cpudrv_image *img,
                             struct cpudrv_ctx *ctx, int managed)
{
    size_t off = 0;
    for (unsigned i = 0; i < img->ng; i++) {
        if (img->g[i].managed != managed) continue;
        size_t a = img->g[i].align ? img->g[i].align : 1;
        off = (off + a - 1) / a * a;
        struct cpudrv_global *g = &m->globals[m->nglobals];
        g->name = strdup(img->g[i].name);
        if (!g->name) return CUDA_ERROR_OUT_OF_MEMORY;
        g->off = off;
        g->size = img->g[i].size;
        g->managed = managed;
        m->nglobals++;
        off += img->g[i].size;
    }
    if (!off) return CUDA_SUCCESS;
    size_t maplen;
    unsigned char *mem = managed ? cpudrv_managed_map(off, &maplen) : cpudrv_mem_map(off, &maplen);
    if (!mem) return CUDA_ERROR_OUT_OF_MEMORY;
    if (managed) {
        m->mmem = mem, m->msize = off, m->mmaplen = maplen;
    } else {
        m->gmem = mem, m->gsize = off, m->gmaplen = maplen;
    }
    for (unsigned i = 0, k = 0; i < img->ng; i++) {
        if (img->g[i].managed != managed) continue;
        while (m->globals[k].managed != managed || strcmp(m->globals[k].name, img->g[i].name))
            k++;
        if (img->g[i].init) memcpy(mem + m->globals[k].off, img->g[i].init, img->g[i].size);
        k++;
    }
    // __managed__ variables are managed memory, as the driver makes them: pointer queries
    // say so, advice and prefetches take them, and they go with the module, not cuMemFree.
    struct cpudrv_range r = {0};
    r.base = (uintptr_t)mem;
    r.size = off;
    r.type = managed ? CPUDRV_MEM_MANAGED : CPUDRV_MEM_GLOBAL;
    r.flags = managed ? CPUDRV_RANGE_MODULE : 0;
    r.dev = ctx ? ctx->dev : 0;
    r.ctx = ctx;
    r.id = cpudrv_next_id();
    return cpudrv_mem_add(&r);
}

static CUresult make_globals(struct cpudrv_module *m, const struct cpudrv_image *img,
                             struct cpudrv_ctx *ctx)
{
    if (!img->ng) return CUDA_SUCCESS;
    m->globals = calloc(img->ng, sizeof *m->globals);
    if (!m->globals) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = make_segment(m, img, ctx, 0);
    return rc ? rc : make_segment(m, img, ctx, 1);
}

// cpudrv_big held: makes a module (with twins and globals) from a parsed image.
CUresult cpudrv_module_create(const struct cpudrv_image *img, struct cpudrv_ctx *ctx,
                              struct cpudrv_library *lib, struct cpudrv_module **out, char *log,
                              size_t logsz)
{
    for (unsigned i = 0; i < img->nk; i++) {
        const struct cpudrv_twin *t = cpudrv_twin_find(img->k[i].name);
        if (!t) {
            cpudrv_warn("kernel '%s' has no CPU twin: module not loaded", img->k[i].name);
            cpudrv_logf(log, logsz, "kernel '%s' has no CPU twin in tests/cpudrv/twins.c\n",
                        img->k[i].name);
            return CUDA_ERROR_INVALID_PTX;
        }
        if (img->k[i].have_params && !same_layout(&img->k[i], t)) {
            cpudrv_warn("kernel '%s' does not match its CPU twin's parameters", img->k[i].name);
            cpudrv_logf(log, logsz, "kernel '%s': parameters differ from its CPU twin's\n",
                        img->k[i].name);
            return CUDA_ERROR_INVALID_PTX;
        }
    }
    struct cpudrv_module *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_obj_init(&m->o, CPUDRV_K_MODULE, ctx, module_release);
    m->lib = lib;
    m->ptx = img->ptx;
    CUresult rc = make_globals(m, img, ctx);
    if (!rc && img->nk) {
        m->funcs = calloc(img->nk, sizeof *m->funcs);
        if (lib) m->kernels = calloc(img->nk, sizeof *m->kernels);
        if (!m->funcs || (lib && !m->kernels)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned i = 0; !rc && i < img->nk; i++) {
        rc = make_func(m, &img->k[i], cpudrv_twin_find(img->k[i].name), &m->funcs[i]);
        if (!rc && lib && !(m->kernels[i] = calloc(1, sizeof *m->kernels[i]))) {
            free(m->funcs[i]->name);
            free(m->funcs[i]->params);
            free(m->funcs[i]);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (!rc) {
            if (lib) {
                cpudrv_obj_init(&m->kernels[i]->o, CPUDRV_K_KERNEL, NULL, NULL);
                m->kernels[i]->f = m->funcs[i];
            }
            m->nfuncs++;
        }
    }
    if (rc) {
        if (m->gmem) cpudrv_mem_remove((uintptr_t)m->gmem);
        if (m->mmem) cpudrv_mem_remove((uintptr_t)m->mmem);
        cpudrv_obj_put(&m->o);
        return rc;
    }
    for (unsigned i = 0; i < m->nfuncs; i++) {
        cpudrv_obj_publish(&m->funcs[i]->o);
        if (m->kernels) cpudrv_obj_publish(&m->kernels[i]->o);
    }
    cpudrv_obj_publish(&m->o);
    *out = m;
    return CUDA_SUCCESS;
}

// cpudrv_big held: unloads (handles die now, storage when the last launch finished).
void cpudrv_module_destroy(struct cpudrv_module *m)
{
    if (!m->o.live) return;
    for (unsigned i = 0; i < m->nfuncs; i++) {
        cpudrv_obj_unpublish(&m->funcs[i]->o); // memory goes with the module's
        if (m->kernels) cpudrv_obj_unpublish(&m->kernels[i]->o);
    }
    if (m->gmem) cpudrv_mem_remove((uintptr_t)m->gmem);
    if (m->mmem) cpudrv_mem_remove((uintptr_t)m->mmem);
    cpudrv_obj_unpublish(&m->o);
}

// A module global's storage, or NULL (size in *size).
unsigned char *cpudrv_module_global(const struct cpudrv_module *m, const char *name, size_t *size)
{
    for (unsigned i = 0; i < m->nglobals; i++)
        if (strcmp(m->globals[i].name, name) == 0) {
            *size = m->globals[i].size;
            return (m->globals[i].managed ? m->mmem : m->gmem) + m->globals[i].off;
        }
    return NULL;
}

// cpudrv_big held: a function handle, or a library kernel handle (CUkernel), or NULL.
struct cpudrv_func *cpudrv_func_find(const void *h)
{
    struct cpudrv_func *f = cpudrv_obj_find(h, CPUDRV_K_FUNC);
    struct cpudrv_kernel *k = f ? NULL : cpudrv_kernel_find(h);
    return f ? f : k ? k->f : NULL;
}

// cpudrv_big held: the live library kernel whose handle is h, or NULL.
struct cpudrv_kernel *cpudrv_kernel_find(const void *h)
{
    return cpudrv_obj_find(h, CPUDRV_K_KERNEL);
}

static void write_log(void *buf, void **sizeslot, const char *text)
{
    size_t cap = (size_t)(uintptr_t)*sizeslot;
    if (!buf || !cap) return;
    size_t n = strlen(text);
    if (n >= cap) n = cap - 1;
    memcpy(buf, text, n);
    ((char *)buf)[n] = 0;
    *sizeslot = (void *)(uintptr_t)(n + 1);
}

// Applies JIT options (log buffers, wall time) after a load with result rc.
CUresult cpudrv_jit_options(unsigned n, const CUjit_option *opt, void **val, CUresult rc,
                            const char *log)
{
    int info = -1, infosz = -1, err = -1, errsz = -1;
    for (unsigned i = 0; i < n; i++) {
        switch (opt[i]) {
        case CU_JIT_INFO_LOG_BUFFER:
            info = (int)i;
            break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
            infosz = (int)i;
            break;
        case CU_JIT_ERROR_LOG_BUFFER:
            err = (int)i;
            break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            errsz = (int)i;
            break;
        case CU_JIT_WALL_TIME: {
            float zero = 0.0f; // an output option: the float is stored in the value slot
            memcpy(&val[i], &zero, sizeof zero);
            break;
        }
        default:
            break;
        }
    }
    if (info >= 0 && infosz >= 0) write_log(val[info], &val[infosz], rc ? "" : log);
    if (err >= 0 && errsz >= 0) write_log(val[err], &val[errsz], rc ? log : "");
    return rc;
}

// INVALID_VALUE for a malformed JIT option list.
CUresult cpudrv_jit_check(unsigned n, const CUjit_option *opt, void **val)
{
    if (n && (!opt || !val)) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)opt[i] >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

// Loads an image (len 0: size from its headers / NUL) into the current context.
static CUresult load(CUmodule *module, const void *image, size_t len, unsigned n, CUjit_option *opt,
                     void **val)
{
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cpudrv_jit_check(n, opt, val);
    if (rc) return rc;
    struct cpudrv_ctx *c;
    rc = cpudrv_enter(&c);
    if (rc) return rc;
    rc = cpudrv_ctx_wait_for_load(c);
    cpudrv_unlock();
    if (rc) return rc;
    char log[1024] = "";
    struct cpudrv_image img;
    rc = cpudrv_image_parse(image, len, &img, log, sizeof log);
    if (!rc) {
        struct cpudrv_module *m;
        cpudrv_lock();
        rc = cpudrv_ctx_usable(c);
        if (!rc) rc = cpudrv_module_create(&img, cpudrv_ctx_owner(c), NULL, &m, log, sizeof log);
        if (!rc) {
            cpudrv_logf(log, sizeof log, "cpudrv: %u kernels, %u globals (CPU twins)\n", m->nfuncs,
                        m->nglobals);
            *module = (CUmodule)m;
        }
        cpudrv_unlock();
        cpudrv_image_free(&img);
    }
    return cpudrv_jit_options(n, opt, val, rc, log);
}

// Loads PTX, a cubin or a fat binary from memory.
CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    return TR(load(module, image, 0, 0, NULL, NULL));
}

// As cuModuleLoadData, with JIT options (log buffers and wall time are filled in).
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                            CUjit_option *options, void **optionValues)
{
    return TR(load(module, image, 0, numOptions, options, optionValues));
}

// Loads a fat binary (or a __fatBinC_Wrapper_t pointing at one).
CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return TR(load(module, fatCubin, 0, 0, NULL, NULL));
}

// Loads an image from a file.
CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (!module || !fname) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    unsigned char *data;
    size_t len;
    rc = cpudrv_read_file(fname, &data, &len);
    if (rc) return TR(rc);
    rc = len ? load(module, data, len, 0, NULL, NULL) : CUDA_ERROR_INVALID_IMAGE;
    free(data);
    return TR(rc);
}

// Unloads a module; kernels already queued from it still run.
CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_module *m = cpudrv_obj_find(hmod, CPUDRV_K_MODULE);
    if (!m || m->lib)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        cpudrv_module_destroy(m);
    cpudrv_unlock();
    return TR(rc);
}

// Lazy loading unless CUDA_MODULE_LOADING=EAGER (the driver's default since 12.2).
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!mode) return TR(CUDA_ERROR_INVALID_VALUE);
    const char *e = getenv("CUDA_MODULE_LOADING");
    *mode = e && strcmp(e, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return TR(CUDA_SUCCESS);
}

// cpudrv_big held: the function called name, or NULL.
struct cpudrv_func *cpudrv_module_func(const struct cpudrv_module *m, const char *name)
{
    for (unsigned i = 0; i < m->nfuncs; i++)
        if (strcmp(m->funcs[i]->name, name) == 0) return m->funcs[i];
    return NULL;
}

// A kernel of a module by name (NOT_FOUND if it has none of that name).
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!hfunc || !name) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_module *m = cpudrv_obj_find(hmod, CPUDRV_K_MODULE);
    struct cpudrv_func *f = m ? cpudrv_module_func(m, name) : NULL;
    if (!m)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!f)
        rc = CUDA_ERROR_NOT_FOUND;
    else
        *hfunc = (CUfunction)f;
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: address and size of a module global (NOT_FOUND if none); either
// output may be NULL.
CUresult cpudrv_module_global_info(const struct cpudrv_module *m, const char *name,
                                   CUdeviceptr *dptr, size_t *bytes)
{
    size_t size;
    unsigned char *p = cpudrv_module_global(m, name, &size);
    if (!p) return CUDA_ERROR_NOT_FOUND;
    if (dptr) *dptr = (CUdeviceptr)(uintptr_t)p;
    if (bytes) *bytes = size;
    return CUDA_SUCCESS;
}

// Address and size of a module's __device__/__constant__ variable.
CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!name) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_module *m = cpudrv_obj_find(hmod, CPUDRV_K_MODULE);
    rc = m ? cpudrv_module_global_info(m, name, dptr, bytes) : CUDA_ERROR_INVALID_HANDLE;
    cpudrv_unlock();
    return TR(rc);
}

// Number of kernels in a module.
CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!count) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_module *m = cpudrv_obj_find(mod, CPUDRV_K_MODULE);
    if (m) *count = m->nfuncs;
    cpudrv_unlock();
    return TR(m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// Up to numFunctions kernel handles of a module.
CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!functions) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_module *m = cpudrv_obj_find(mod, CPUDRV_K_MODULE);
    for (unsigned i = 0; m && i < m->nfuncs && i < numFunctions; i++)
        functions[i] = (CUfunction)m->funcs[i];
    cpudrv_unlock();
    return TR(m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}
