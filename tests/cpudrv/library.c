// Libraries: context-independent modules. A CUkernel is a handle of its own naming its
// library module's function; the launch and cuFunc* calls accept it as a CUfunction (as
// the driver does since CUDA 12). One copy of a library's globals serves every context.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>

static void library_release(struct cpudrv_obj *o)
{
    free(o);
}

static CUresult library_load(CUlibrary *library, const void *code, size_t len, unsigned n,
                             CUjit_option *opt, void **val, unsigned nlib, CUlibraryOption *lopt,
                             void **lval)
{
    if (!library || !code || (nlib && (!lopt || !lval))) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nlib; i++)
        if ((unsigned)lopt[i] >= CU_LIBRARY_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cpudrv_jit_check(n, opt, val);
    if (!rc) rc = cpudrv_ready();
    if (rc) return rc;
    char log[1024] = "";
    struct cpudrv_image img;
    rc = cpudrv_image_parse(code, len, &img, log, sizeof log);
    if (!rc) {
        cpudrv_lock();
        struct cpudrv_library *l = calloc(1, sizeof *l);
        if (!l)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            rc = cpudrv_module_create(&img, NULL, l, &l->mod, log, sizeof log);
        if (!rc) {
            cpudrv_obj_init(&l->o, CPUDRV_K_LIBRARY, NULL, library_release);
            cpudrv_obj_publish(&l->o);
            *library = (CUlibrary)l;
        } else {
            free(l);
        }
        cpudrv_unlock();
        cpudrv_image_free(&img);
    }
    return cpudrv_jit_options(n, opt, val, rc, log);
}

// Loads a library from memory (JIT and library options accepted and ignored).
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                           void **jitOptionsValues, unsigned int numJitOptions,
                           CUlibraryOption *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions)
{
    return TR(library_load(library, code, 0, numJitOptions, jitOptions, jitOptionsValues,
                           numLibraryOptions, libraryOptions, libraryOptionValues));
}

// Loads a library from a file.
CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                               void **jitOptionsValues, unsigned int numJitOptions,
                               CUlibraryOption *libraryOptions, void **libraryOptionValues,
                               unsigned int numLibraryOptions)
{
    if (!library || !fileName) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    unsigned char *data;
    size_t len;
    rc = cpudrv_read_file(fileName, &data, &len);
    if (rc) return TR(rc);
    rc = len ? library_load(library, data, len, numJitOptions, jitOptions, jitOptionsValues,
                            numLibraryOptions, libraryOptions, libraryOptionValues)
             : CUDA_ERROR_INVALID_IMAGE;
    free(data);
    return TR(rc);
}

// Unloads a library and its kernels.
CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_library *l = cpudrv_obj_find(library, CPUDRV_K_LIBRARY);
    if (l && (rc = cpudrv_library_unload_wait(l)) != CUDA_SUCCESS) {
        cpudrv_unlock();
        return TR(rc);
    }
    l = cpudrv_obj_find(library, CPUDRV_K_LIBRARY); // it may have gone meanwhile
    if (l) {
        cpudrv_module_destroy(l->mod);
        cpudrv_obj_unpublish(&l->o);
    }
    cpudrv_unlock();
    return TR(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// A library's kernel by name.
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pKernel || !name) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_library *l = cpudrv_obj_find(library, CPUDRV_K_LIBRARY);
    struct cpudrv_func *f = l ? cpudrv_module_func(l->mod, name) : NULL;
    rc = !l ? CUDA_ERROR_INVALID_HANDLE : !f ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
    for (unsigned i = 0; f && i < l->mod->nfuncs; i++)
        if (l->mod->funcs[i] == f) *pKernel = (CUkernel)l->mod->kernels[i];
    cpudrv_unlock();
    return TR(rc);
}

// Number of kernels of a library.
CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!count) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_library *l = cpudrv_obj_find(lib, CPUDRV_K_LIBRARY);
    if (l) *count = l->mod->nfuncs;
    cpudrv_unlock();
    return TR(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// Up to numKernels kernel handles of a library.
CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!kernels) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_library *l = cpudrv_obj_find(lib, CPUDRV_K_LIBRARY);
    for (unsigned i = 0; l && i < l->mod->nfuncs && i < numKernels; i++)
        kernels[i] = (CUkernel)l->mod->kernels[i];
    cpudrv_unlock();
    return TR(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// The module of a library (valid while the library is loaded).
CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pMod) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    struct cpudrv_library *l = cpudrv_obj_find(library, CPUDRV_K_LIBRARY);
    if (l) *pMod = (CUmodule)l->mod;
    cpudrv_unlock();
    return TR(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

// Address and size of a library global (one copy shared by every context here).
CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    if (!name) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_code_load_wait(library); // its module in the context, once
    if (rc) return TR(rc);
    struct cpudrv_ctx *c;
    rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    struct cpudrv_library *l = cpudrv_obj_find(library, CPUDRV_K_LIBRARY);
    rc = l ? cpudrv_module_global_info(l->mod, name, dptr, bytes) : CUDA_ERROR_INVALID_HANDLE;
    cpudrv_unlock();
    return TR(rc);
}

// Address and size of a library's __managed__ variable (NOT_FOUND for any other name,
// __device__ variables included); one of dptr and bytes may be NULL, not both. Managed
// memory is every device's: no context need be current (the runtime asks before it has one).
CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!name || (!dptr && !bytes)) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_library *l = cpudrv_obj_find(library, CPUDRV_K_LIBRARY);
    rc = l ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_HANDLE;
    for (unsigned i = 0; l && i < l->mod->nglobals; i++) {
        const struct cpudrv_global *g = &l->mod->globals[i];
        if (!g->managed || strcmp(g->name, name) != 0) continue;
        if (dptr) *dptr = (CUdeviceptr)(uintptr_t)(l->mod->mmem + g->off);
        if (bytes) *bytes = g->size;
        rc = CUDA_SUCCESS;
        break;
    }
    cpudrv_unlock();
    return TR(rc);
}
