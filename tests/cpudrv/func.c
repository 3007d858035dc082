// Function and kernel properties: attributes, parameter layout, names, occupancy.
#include "cpudrv.h"

// cpudrv_big held: a function attribute.
static CUresult get_attr(const struct cpudrv_func *f, CUfunction_attribute a, int *pi)
{
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = 1024;
        break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = 32;
        break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = 90;
        break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *pi = f->max_dyn_shmem;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = f->carveout;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        *pi = f->cluster[a - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        *pi = f->nonportable_cluster;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        *pi = f->cluster_policy;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// cpudrv_big held: sets a settable function attribute.
static CUresult set_attr(struct cpudrv_func *f, CUfunction_attribute a, int v)
{
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (v < 0 || v > CPUDRV_SHMEM_OPTIN) return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_shmem = v;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (v < -1 || v > 100) return CUDA_ERROR_INVALID_VALUE;
        f->carveout = v;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (v < 0 || v > 8) return CUDA_ERROR_INVALID_VALUE;
        f->cluster[a - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = v;
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        if (v != 0 && v != 1) return CUDA_ERROR_INVALID_VALUE;
        f->nonportable_cluster = v;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (v < 0 || v > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
            return CUDA_ERROR_INVALID_VALUE;
        f->cluster_policy = v;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// Locks and finds a function (a CUfunction or a CUkernel), or with kernel == 1 a
// library kernel's function; on success cpudrv_big is HELD.
static CUresult lookup(const void *h, int kernel, struct cpudrv_func **out)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_kernel *k = kernel ? cpudrv_kernel_find(h) : NULL;
    struct cpudrv_func *f = kernel ? (k ? k->f : NULL) : cpudrv_func_find(h);
    if (!f) {
        cpudrv_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *out = f;
    return CUDA_SUCCESS;
}

// A function attribute (MAX_THREADS_PER_BLOCK 1024, NUM_REGS 32, versions 90, ...).
CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    if (!pi) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 0, &f);
    if (rc) return TR(rc);
    rc = get_attr(f, attrib, pi);
    cpudrv_unlock();
    return TR(rc);
}

// Sets MAX_DYNAMIC_SHARED_SIZE_BYTES (up to 232448), the carveout and cluster hints.
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 0, &f);
    if (rc) return TR(rc);
    rc = set_attr(f, attrib, value);
    cpudrv_unlock();
    return TR(rc);
}

// Stores the function's cache preference.
CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 0, &f);
    if (rc) return TR(rc);
    f->cache = config;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Deprecated: shared memory bank size per function (accepted and ignored).
CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    if ((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 0, &f);
    if (rc) return TR(rc);
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// The module a function belongs to.
CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    if (!hmod) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 0, &f);
    if (rc) return TR(rc);
    *hmod = (CUmodule)f->mod;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// The kernel's name (valid while its module is loaded).
CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    if (!name) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 0, &f);
    if (rc) return TR(rc);
    *name = f->name;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

static CUresult param_info(const void *h, int kernel, size_t i, size_t *off, size_t *size)
{
    struct cpudrv_func *f;
    CUresult rc = lookup(h, kernel, &f);
    if (rc) return rc;
    if (i >= f->nparams) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        if (off) *off = f->params[i].off;
        if (size) *size = f->params[i].size;
    }
    cpudrv_unlock();
    return rc;
}

// Offset and size of parameter paramIndex (INVALID_VALUE past the last).
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                            size_t *paramSize)
{
    return TR(param_info(func, 0, paramIndex, paramOffset, paramSize));
}

// Functions are loaded with their module.
CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    if (!state) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(function, 0, &f);
    if (rc) return TR(rc);
    cpudrv_unlock();
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return TR(CUDA_SUCCESS);
}

// Functions are loaded with their module: nothing to do.
CUresult cuFuncLoad(CUfunction function)
{
    struct cpudrv_func *f;
    CUresult rc = lookup(function, 0, &f);
    if (rc) return TR(rc);
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// The function of a library kernel in the current context (one function for all).
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    if (!pFunc) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_code_load_wait(kernel);
    if (rc) return TR(rc);
    struct cpudrv_ctx *c;
    rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    struct cpudrv_kernel *k = cpudrv_kernel_find(kernel);
    if (k)
        *pFunc = (CUfunction)k->f;
    else
        rc = CUDA_ERROR_INVALID_HANDLE;
    cpudrv_unlock();
    return TR(rc);
}

// The library a kernel belongs to.
CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    if (!pLib) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(kernel, 1, &f);
    if (rc) return TR(rc);
    *pLib = (CUlibrary)f->mod->lib;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// A kernel attribute on a device (one set of attributes for all devices here).
CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    if (!pi) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    struct cpudrv_func *f;
    rc = lookup(kernel, 1, &f);
    if (rc) return TR(rc);
    rc = get_attr(f, attrib, pi);
    cpudrv_unlock();
    return TR(rc);
}

// Sets a kernel attribute (as cuFuncSetAttribute).
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if ((rc = cpudrv_code_load_wait(kernel))) return TR(rc);
    struct cpudrv_func *f;
    rc = lookup(kernel, 1, &f);
    if (rc) return TR(rc);
    rc = set_attr(f, attrib, val);
    cpudrv_unlock();
    return TR(rc);
}

// Stores a kernel's cache preference.
CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    rc = lookup(kernel, 1, &f);
    if (rc) return TR(rc);
    f->cache = config;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// A kernel's name.
CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    if (!name) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(hfunc, 1, &f);
    if (rc) return TR(rc);
    *name = f->name;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Offset and size of a kernel parameter.
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                              size_t *paramSize)
{
    return TR(param_info(kernel, 1, paramIndex, paramOffset, paramSize));
}

// Resident blocks per SM: min(32, 2048 / blockSize, shared memory per SM / per block).
static int occupancy(int block, size_t shmem)
{
    if (block <= 0 || block > 1024) return 0;
    int n = 2048 / block;
    if (n > 32) n = 32;
    if (shmem) {
        size_t per = shmem + 1024; // the driver reserves 1 KiB per block
        size_t fit = 233472 / per;
        if ((size_t)n > fit) n = (int)fit;
    }
    return n;
}

// func.c: resident blocks per SM for a block size and dynamic shared memory.
int cpudrv_occupancy(int block, size_t shmem)
{
    return occupancy(block, shmem);
}

static CUresult max_active(int *numBlocks, CUfunction func, int blockSize, size_t shmem)
{
    if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_func *f;
    CUresult rc = lookup(func, 0, &f);
    if (rc) return rc;
    if (shmem > (size_t)f->max_dyn_shmem || blockSize > 1024)
        *numBlocks = 0;
    else
        *numBlocks = occupancy(blockSize, shmem);
    cpudrv_unlock();
    return CUDA_SUCCESS;
}

// Resident blocks per SM for a block size and dynamic shared memory.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize)
{
    CUresult rc = cpudrv_code_load_wait(func); // of a CUkernel: its code, once per context
    if (rc) return TR(rc);
    return TR(max_active(numBlocks, func, blockSize, dynamicSMemSize));
}

// As above; the flags only affect caching behaviour on a GPU.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                              int blockSize, size_t dynamicSMemSize,
                                                              unsigned int flags)
{
    if (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_code_load_wait(func);
    if (rc) return TR(rc);
    return TR(max_active(numBlocks, func, blockSize, dynamicSMemSize));
}

static CUresult potential(int *minGrid, int *blockSize, CUfunction func, CUoccupancyB2DSize b2d,
                          size_t shmem, int limit)
{
    if (!minGrid || !blockSize) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_func *f;
    CUresult rc = lookup(func, 0, &f);
    if (rc) return rc;
    int maxdyn = f->max_dyn_shmem;
    cpudrv_unlock();
    int best = 0, bestb = 0;
    int top = limit > 0 && limit < 1024 ? limit : 1024;
    for (int b = 32; b <= top; b += 32) {
        size_t s = b2d ? b2d(b) : shmem;
        if (s > (size_t)maxdyn) continue;
        int n = occupancy(b, s) * b;
        if (n > best || (n == best && b > bestb)) {
            best = n;
            bestb = b;
        }
    }
    *blockSize = bestb;
    *minGrid = bestb ? occupancy(bestb, b2d ? b2d(bestb) : shmem) * CPUDRV_SM_COUNT : 0;
    return CUDA_SUCCESS;
}

// Block size with the highest occupancy, and the grid that fills the device with it.
CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                          CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                          size_t dynamicSMemSize, int blockSizeLimit)
{
    return TR(potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                        blockSizeLimit));
}

// As above, with flags.
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
                                                   CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit,
                                                   unsigned int flags)
{
    if (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return TR(CUDA_ERROR_INVALID_VALUE);
    return TR(potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                        blockSizeLimit));
}

// Blocks per cluster of a configuration: its CLUSTER_DIMENSION attribute, else the
// function's required cluster; 0 when neither sets one.
static int cluster_blocks(const struct cpudrv_func *f, const CUlaunchConfig *cfg)
{
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            const CUlaunchAttributeValue *v = &cfg->attrs[i].value;
            return (int)(v->clusterDim.x * v->clusterDim.y * v->clusterDim.z);
        }
    return f->cluster[0] * f->cluster[1] * f->cluster[2];
}

// Clusters of the configuration that can be resident at once (modelled: whole clusters of
// the blocks resident on all SMs, at most 8 blocks per cluster, 16 when non-portable).
static CUresult clusters(int *out, CUfunction func, const CUlaunchConfig *cfg, int potential)
{
    if (!out || !cfg || (cfg->numAttrs && !cfg->attrs)) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_func *f;
    CUresult rc = lookup(func, 0, &f);
    if (rc) return rc;
    int most = f->nonportable_cluster ? 16 : 8;
    int n = cluster_blocks(f, cfg);
    cpudrv_unlock();
    int threads = (int)(cfg->blockDimX * cfg->blockDimY * cfg->blockDimZ);
    if (potential) {
        *out = occupancy(threads, cfg->sharedMemBytes) ? most : 0;
        return CUDA_SUCCESS;
    }
    if (n <= 0 || n > most) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    *out = occupancy(threads, cfg->sharedMemBytes) * CPUDRV_SM_COUNT / n;
    return CUDA_SUCCESS;
}

// Most clusters of the configuration resident at once.
CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                      const CUlaunchConfig *config)
{
    return TR(clusters(numClusters, func, config, 0));
}

// Largest cluster the configuration could launch with.
CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                            const CUlaunchConfig *config)
{
    return TR(clusters(clusterSize, func, config, 1));
}

// Dynamic shared memory per block that still lets numBlocks blocks reside on an SM.
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
                                                 int numBlocks, int blockSize)
{
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0 || blockSize > 1024)
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_func *f;
    CUresult rc = lookup(func, 0, &f);
    if (rc) return TR(rc);
    cpudrv_unlock();
    if (occupancy(blockSize, 0) < numBlocks) {
        *dynamicSmemSize = 0;
    } else {
        size_t per = 233472 / (size_t)numBlocks;
        per = per > 1024 ? per - 1024 : 0;
        *dynamicSmemSize = per > CPUDRV_SHMEM_OPTIN ? CPUDRV_SHMEM_OPTIN : per;
    }
    return TR(CUDA_SUCCESS);
}
