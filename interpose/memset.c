/* The memset family: 8/16/32-bit values over 1D or pitched 2D ranges, checked here against
 * the caller's ranges (and alignment) so that errors return at once. Sync memsets of device
 * memory are asynchronous to the host, as the driver's are; a pinned host target is set
 * before return. */
#include "interpose/shim.h"

#include <string.h>

static CUresult memset_any(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem,
                           size_t width, size_t height, CUstream stream, int async)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = shim_need_ctx()) != CUDA_SUCCESS)
        return r;
    if (width == 0 || height == 0)
        return CUDA_SUCCESS;
    if (dst % elem || (height > 1 && (pitch < width * elem || pitch % elem)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = shim_stream_check(stream, NULL)) != CUDA_SUCCESS)
        return r;
    uint64_t span = (height - 1) * (uint64_t)pitch + (uint64_t)width * elem;
    struct shim_range rg;
    if (shim_range_find(dst, span, &rg) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct chan_memset m = {.dst = dst, .pitch = height > 1 ? pitch : 0, .width = width,
                            .height = height, .stream = (uint64_t)(uintptr_t)stream,
                            .value = value, .elem = elem, .async = (uint32_t)async,
                            .complete = !async && rg.kind == SHIM_RANGE_PINNED};
    struct shim_req q;
    if ((r = shim_req_begin(&q, CHAN_OP_MEMSET, sizeof(m), m.complete, 0)) != CUDA_SUCCESS)
        return r;
    memcpy(q.payload, &m, sizeof(m));
    shim_req_send(&q);
    return m.complete ? shim_req_wait(&q, NULL, NULL) : CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuMemsetD8_v2)(CUdeviceptr d, unsigned char v, size_t n)
{
    return memset_any(d, 0, v, 1, n, 1, NULL, 0);
}
CUresult SHIM_IMPL(cuMemsetD16_v2)(CUdeviceptr d, unsigned short v, size_t n)
{
    return memset_any(d, 0, v, 2, n, 1, NULL, 0);
}
CUresult SHIM_IMPL(cuMemsetD32_v2)(CUdeviceptr d, unsigned int v, size_t n)
{
    return memset_any(d, 0, v, 4, n, 1, NULL, 0);
}
CUresult SHIM_IMPL(cuMemsetD8Async)(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    return memset_any(d, 0, v, 1, n, 1, s, 1);
}
CUresult SHIM_IMPL(cuMemsetD16Async)(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    return memset_any(d, 0, v, 2, n, 1, s, 1);
}
CUresult SHIM_IMPL(cuMemsetD32Async)(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    return memset_any(d, 0, v, 4, n, 1, s, 1);
}
CUresult SHIM_IMPL(cuMemsetD2D8_v2)(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
    return memset_any(d, p, v, 1, w, h, NULL, 0);
}
CUresult SHIM_IMPL(cuMemsetD2D16_v2)(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h)
{
    return memset_any(d, p, v, 2, w, h, NULL, 0);
}
CUresult SHIM_IMPL(cuMemsetD2D32_v2)(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h)
{
    return memset_any(d, p, v, 4, w, h, NULL, 0);
}
CUresult SHIM_IMPL(cuMemsetD2D8Async)(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h,
                                   CUstream s)
{
    return memset_any(d, p, v, 1, w, h, s, 1);
}
CUresult SHIM_IMPL(cuMemsetD2D16Async)(CUdeviceptr d, size_t p, unsigned short v, size_t w,
                                    size_t h, CUstream s)
{
    return memset_any(d, p, v, 2, w, h, s, 1);
}
CUresult SHIM_IMPL(cuMemsetD2D32Async)(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h,
                                    CUstream s)
{
    return memset_any(d, p, v, 4, w, h, s, 1);
}
