// Memsets of 8, 16 and 32-bit values, 1D and 2D, synchronous and on streams.
// The synchronous ones complete before returning (the real driver may return earlier for
// device memory; completing is always allowed).
#include "cpudrv.h"

#include <string.h>

struct fill {
    unsigned char *dst;
    size_t pitch, width, height; // width in elements
    unsigned elsize;
    uint32_t value;
};

static CUresult fill_run(struct cpudrv_op *op)
{
    const struct fill *f = (const struct fill *)op->data;
    for (size_t y = 0; y < f->height; y++) {
        unsigned char *row = f->dst + y * f->pitch;
        if (f->elsize == 1) {
            memset(row, (int)(f->value & 0xff), f->width);
        } else if (f->elsize == 2) {
            uint16_t v = (uint16_t)f->value, *p = (uint16_t *)(void *)row;
            for (size_t i = 0; i < f->width; i++)
                p[i] = v;
        } else {
            uint32_t *p = (uint32_t *)(void *)row;
            for (size_t i = 0; i < f->width; i++)
                p[i] = f->value;
        }
    }
    return CUDA_SUCCESS;
}

static int fill_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct fill *f = (const struct fill *)op->data;
    uintptr_t a = (uintptr_t)f->dst, n = (f->height - 1) * f->pitch + f->width * f->elsize;
    return a < hi && a + n > lo;
}

static CUresult fill(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elsize, size_t width,
                     size_t height, int async, CUstream hs)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    size_t wbytes;
    rc = cpudrv_stream_get(async ? hs : NULL, c, &s);
    if (!rc && width && height) {
        if ((dst % elsize) || (height > 1 && (pitch % elsize || pitch < width * elsize)))
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (__builtin_mul_overflow(width, (size_t)elsize, &wbytes))
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            rc = cpudrv_mem_check((uintptr_t)dst, cpudrv_xfer_span(wbytes, height, 1, pitch, 0));
        struct cpudrv_op *op = rc ? NULL : cpudrv_op_new(sizeof(struct fill));
        if (!rc && !op) rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (!rc) {
            struct fill *f = (struct fill *)op->data;
            f->dst = (unsigned char *)(uintptr_t)dst;
            f->pitch = pitch;
            f->width = width;
            f->height = height;
            f->elsize = elsize;
            f->value = value;
            op->run = fill_run;
            op->touches = fill_touches;
            if (async)
                rc = cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
            else
                rc = cpudrv_stream_run_sync(s, op);
        }
    }
    cpudrv_unlock();
    return rc;
}

// Sets N bytes.
CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return TR(fill(dstDevice, 0, uc, 1, N, 1, 0, NULL));
}

// Sets N 16-bit values (dstDevice 2-byte aligned).
CUresult cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return TR(fill(dstDevice, 0, us, 2, N, 1, 0, NULL));
}

// Sets N 32-bit values (dstDevice 4-byte aligned).
CUresult cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return TR(fill(dstDevice, 0, ui, 4, N, 1, 0, NULL));
}

// Sets Height rows of Width bytes, rows dstPitch apart.
CUresult cuMemsetD2D8(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                      size_t Height)
{
    return TR(fill(dstDevice, dstPitch, uc, 1, Width, Height, 0, NULL));
}

// Sets Height rows of Width 16-bit values.
CUresult cuMemsetD2D16(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                       size_t Height)
{
    return TR(fill(dstDevice, dstPitch, us, 2, Width, Height, 0, NULL));
}

// Sets Height rows of Width 32-bit values.
CUresult cuMemsetD2D32(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                       size_t Height)
{
    return TR(fill(dstDevice, dstPitch, ui, 4, Width, Height, 0, NULL));
}

// cuMemsetD8 on a stream.
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return TR(fill(dstDevice, 0, uc, 1, N, 1, 1, hStream));
}

// cuMemsetD16 on a stream.
CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return TR(fill(dstDevice, 0, us, 2, N, 1, 1, hStream));
}

// cuMemsetD32 on a stream.
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return TR(fill(dstDevice, 0, ui, 4, N, 1, 1, hStream));
}

// cuMemsetD2D8 on a stream.
CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                           size_t Height, CUstream hStream)
{
    return TR(fill(dstDevice, dstPitch, uc, 1, Width, Height, 1, hStream));
}

// cuMemsetD2D16 on a stream.
CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                            size_t Height, CUstream hStream)
{
    return TR(fill(dstDevice, dstPitch, us, 2, Width, Height, 1, hStream));
}

// cuMemsetD2D32 on a stream.
CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                            size_t Height, CUstream hStream)
{
    return TR(fill(dstDevice, dstPitch, ui, 4, Width, Height, 1, hStream));
}
