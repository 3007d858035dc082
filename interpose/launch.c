/* Kernel launches: parameters packed by the function's layout into the record, the
 * configuration checked here first so that its errors return at once, as the driver's do;
 * the launch itself is asynchronous. */
#include "interpose/shim.h"

#include <string.h>

/* Extracts the packed buffer of the `extra` form (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE). */
static CUresult parse_extra(void **extra, const void **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    int have_size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (i > 64) return CUDA_ERROR_INVALID_VALUE;
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            *buf = extra[i + 1];
        } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1]) return CUDA_ERROR_INVALID_VALUE;
            *size = *(const size_t *)extra[i + 1];
            have_size = 1;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!*buf || !have_size) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult shim_kernel_params(const struct shim_func *fn, void **kernelParams, void **extra,
                            struct shim_params *out)
{
    out->extra = NULL;
    if (kernelParams && extra) return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        CUresult r = parse_extra(extra, &out->extra, &out->bytes);
        if (r != CUDA_SUCCESS) return r;
    } else {
        out->bytes = shim_func_param_bytes(fn);
        if (out->bytes && !kernelParams) return CUDA_ERROR_INVALID_VALUE;
    }
    out->fn = fn;
    out->kernel_params = kernelParams;
    return out->bytes > CHAN_MAX_PARAM_BYTES ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

void shim_kernel_params_write(const struct shim_params *p, uint8_t *buf)
{
    if (p->extra)
        memcpy(buf, p->extra, p->bytes);
    else if (p->bytes)
        shim_func_pack(p->fn, p->kernel_params, buf);
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                       CUstream stream, void **kernelParams, void **extra,
                       const CUlaunchAttribute *attrs, unsigned nattrs, int cooperative)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if ((r = shim_need_ctx()) != CUDA_SUCCESS) return r;
    const struct shim_func *fn = shim_func_get((uint64_t)(uintptr_t)f);
    if (!f || !fn) return CUDA_ERROR_INVALID_HANDLE;
    if ((r = shim_func_check_launch(fn, grid, block, smem)) != CUDA_SUCCESS) return r;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS) return r;
    shim_hostfn_settle_first(fn); /* its code may load now, waiting for every stream */
    struct shim_params kp;
    if ((r = shim_kernel_params(fn, kernelParams, extra, &kp)) != CUDA_SUCCESS) return r;
    size_t bytes = kp.bytes;
    if (nattrs > 64) return CUDA_ERROR_INVALID_VALUE;
    size_t attr_bytes = (size_t)nattrs * sizeof(CUlaunchAttribute);
    /* The host's writes to __managed__ variables reach the device first (mvars.c). */
    if ((r = shim_mvar_work(stream)) != CUDA_SUCCESS) return r;
    /* Parameters that lie in migrating managed memory fault in here, outside the request: a
     * fault while the ring is held could not be served (migrate.c). */
    if (bytes && shim_mig_live()) {
        uint8_t *staged = shim_stage(); /* bytes <= CHAN_MAX_PARAM_BYTES: it holds them */
        if (!staged) return CUDA_ERROR_OUT_OF_MEMORY;
        shim_kernel_params_write(&kp, staged);
        kp.extra = staged;
    }
    struct shim_req q;
    /* To the server of the stream's context, where the process holds one per device. */
    struct shim_route saved;
    int routed = shim_route_stream(stream, &saved);
    /* A library's kernel as that server names it (replicas.c), found before the ring is
     * taken (finding it may load the library there). */
    uint64_t func = (uint64_t)(uintptr_t)f;
    r = shim_replica_for(func, shim_route_device(), &func);
    if (r == CUDA_SUCCESS)
        r = shim_req_begin(&q, CHAN_OP_LAUNCH,
                           (uint32_t)(sizeof(struct chan_launch) + attr_bytes + bytes), 0, 0);
    if (routed) shim_route_end(&saved);
    if (r != CUDA_SUCCESS) return r;
    struct chan_launch *m = (struct chan_launch *)q.payload;
    m->func = func;
    memcpy(m->grid, grid, sizeof(m->grid));
    memcpy(m->block, block, sizeof(m->block));
    m->smem = smem;
    m->nattrs = nattrs;
    m->stream = (uint64_t)(uintptr_t)stream;
    m->cooperative = (uint32_t)cooperative;
    m->param_bytes = (uint32_t)bytes;
    uint8_t *p = q.payload + sizeof(*m);
    if (attr_bytes) memcpy(p, attrs, attr_bytes);
    p += attr_bytes;
    shim_kernel_params_write(&kp, p);
    shim_req_send(&q);
    shim_mvar_worked(stream);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams, void **extra)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, kernelParams, extra, NULL, 0, 0);
}

CUresult SHIM_IMPL(cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX,
                                              unsigned int gridDimY, unsigned int gridDimZ,
                                              unsigned int blockDimX, unsigned int blockDimY,
                                              unsigned int blockDimZ, unsigned int sharedMemBytes,
                                              CUstream hStream, void **kernelParams)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, kernelParams, NULL, NULL, 0, 1);
}

/* Attributes that carry handles are refused (see chan_launch_attr_unmapped). */
static CUresult check_attrs(const CUlaunchAttribute *a, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (chan_launch_attr_unmapped(a[i].id))
            return shim_refuse("cuLaunchKernelEx with event or graph-node attributes");
    return CUDA_SUCCESS;
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra)
{
    if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_attrs(config->attrs, config->numAttrs);
    if (r != CUDA_SUCCESS) return r;
    unsigned g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    unsigned b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(f, g, b, config->sharedMemBytes, config->hStream, kernelParams, extra,
                  config->attrs, config->numAttrs, 0);
}

CUresult SHIM_IMPL(cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f,
                                     void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra);
}

/* ---------------------------------------------------------------- occupancy */

/* The block size with the most resident threads per SM, tried from the largest allowed
 * down by warps (ties keep the larger), as the runtime's own occupancy calculator does.
 * The callback giving dynamic shared memory per block size is the client's, so the search
 * runs here, asking the server one block size at a time; the grid that fills the device
 * counts the SMs this client may use (its share, under a thread percentage). */
static CUresult potential_block(int *minGridSize, int *blockSize, CUfunction func,
                                CUoccupancyB2DSize b2d, size_t smem, int limit, unsigned flags)
{
    if (!minGridSize || !blockSize) return CUDA_ERROR_INVALID_VALUE;
    CUdevice dev;
    int fmax = 0, dmax = 0, warp = 32, sms = 0;
    CUresult r = cuFuncGetAttribute(&fmax, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
    if (r == CUDA_SUCCESS) r = cuCtxGetDevice(&dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&dmax, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
    if (r == CUDA_SUCCESS) r = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (r != CUDA_SUCCESS) return r;
    int top = fmax < dmax ? fmax : dmax;
    if (limit > 0 && limit < top) top = limit;
    if (warp <= 0) warp = 32;
    int best_threads = 0, best_size = 0, best_blocks = 0;
    for (int aligned = (top + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
        int size = aligned < top ? aligned : top;
        int blocks = 0;
        r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, size,
                                                                 b2d ? b2d(size) : smem, flags);
        if (r != CUDA_SUCCESS) return r;
        if (blocks * size > best_threads) {
            best_threads = blocks * size;
            best_size = size;
            best_blocks = blocks;
        }
    }
    *blockSize = best_size;
    *minGridSize = best_blocks * sms;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuOccupancyMaxPotentialBlockSize)(int *minGridSize, int *blockSize,
                                                     CUfunction func,
                                                     CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                     size_t dynamicSMemSize, int blockSizeLimit)
{
    return potential_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                           dynamicSMemSize, blockSizeLimit, 0);
}

CUresult SHIM_IMPL(cuOccupancyMaxPotentialBlockSizeWithFlags)(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags)
{
    return potential_block(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                           dynamicSMemSize, blockSizeLimit, flags);
}
