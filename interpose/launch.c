/* Kernel launches: parameters packed by the function's layout into the record, the
 * configuration checked here first so that its errors return at once, as the driver's do;
 * the launch itself is asynchronous. */
#include "interpose/shim.h"

#include <string.h>

/* Largest parameter buffer of a CUDA 12.1+ kernel. */
#define MAX_PARAM_BYTES 32764u

/* Extracts the packed buffer of the `extra` form (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE). */
static CUresult parse_extra(void **extra, const void **buf, size_t *size)
{
    *buf = NULL;
    *size = 0;
    int have_size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (i > 64)
            return CUDA_ERROR_INVALID_VALUE;
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
            *buf = extra[i + 1];
        } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
            if (!extra[i + 1])
                return CUDA_ERROR_INVALID_VALUE;
            *size = *(const size_t *)extra[i + 1];
            have_size = 1;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!*buf || !have_size)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       unsigned smem, CUstream stream, void **kernelParams, void **extra,
                       const CUlaunchAttribute *attrs, unsigned nattrs, int cooperative,
                       unsigned flags)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = shim_need_ctx()) != CUDA_SUCCESS)
        return r;
    const struct shim_func *fn = shim_func_get((uint64_t)(uintptr_t)f);
    if (!f || !fn)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = shim_func_check_launch(fn, grid, block, smem)) != CUDA_SUCCESS)
        return r;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS)
        return r;
    const void *ebuf = NULL;
    size_t bytes;
    if (kernelParams && extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        if ((r = parse_extra(extra, &ebuf, &bytes)) != CUDA_SUCCESS)
            return r;
    } else {
        bytes = shim_func_param_bytes(fn);
        if (bytes && !kernelParams)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (bytes > MAX_PARAM_BYTES || nattrs > 64)
        return CUDA_ERROR_INVALID_VALUE;
    size_t attr_bytes = (size_t)nattrs * sizeof(CUlaunchAttribute);
    struct shim_req q;
    r = shim_req_begin(&q, CHAN_OP_LAUNCH,
                       (uint32_t)(sizeof(struct chan_launch) + attr_bytes + bytes), 0, flags);
    if (r != CUDA_SUCCESS)
        return r;
    struct chan_launch *m = (struct chan_launch *)q.payload;
    m->func = (uint64_t)(uintptr_t)f;
    memcpy(m->grid, grid, sizeof(m->grid));
    memcpy(m->block, block, sizeof(m->block));
    m->smem = smem;
    m->nattrs = nattrs;
    m->stream = (uint64_t)(uintptr_t)stream;
    m->cooperative = (uint32_t)cooperative;
    m->param_bytes = (uint32_t)bytes;
    uint8_t *p = q.payload + sizeof(*m);
    if (attr_bytes)
        memcpy(p, attrs, attr_bytes);
    p += attr_bytes;
    if (ebuf)
        memcpy(p, ebuf, bytes);
    else if (bytes)
        shim_func_pack(fn, kernelParams, p);
    shim_req_send(&q);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, kernelParams, extra, NULL, 0, 0, 0);
}

CUresult SHIM_IMPL(cuLaunchKernel_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, kernelParams, extra, NULL, 0, 0,
                  CHAN_RF_PTDS);
}

CUresult SHIM_IMPL(cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, kernelParams, NULL, NULL, 0, 1, 0);
}

CUresult SHIM_IMPL(cuLaunchCooperativeKernel_ptsz)(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ,
                                                unsigned int sharedMemBytes, CUstream hStream,
                                                void **kernelParams)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return launch(f, g, b, sharedMemBytes, hStream, kernelParams, NULL, NULL, 0, 1,
                  CHAN_RF_PTDS);
}

/* Attributes are plain values except these, which name host or foreign objects. */
static CUresult check_attrs(const CUlaunchAttribute *a, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        switch (a[i].id) {
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
            return shim_refuse("cuLaunchKernelEx with event or graph-node attributes");
        default:
            break;
        }
    return CUDA_SUCCESS;
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra, unsigned flags)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_attrs(config->attrs, config->numAttrs);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    unsigned b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(f, g, b, config->sharedMemBytes, config->hStream, kernelParams, extra,
                  config->attrs, config->numAttrs, 0, flags);
}

CUresult SHIM_IMPL(cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f,
                                  void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, 0);
}

CUresult SHIM_IMPL(cuLaunchKernelEx_ptsz)(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, CHAN_RF_PTDS);
}
