// Memsets of 8, 16 and 32-bit values, 1D and 2D, synchronous and on streams (and, on a
// capturing stream, memset nodes).
// The synchronous ones complete before returning (the real driver may return earlier for
// device memory; completing is always allowed).
#include "cpudrv.h"

#include <string.h>

// Performs f now (worker side).
void cpudrv_fill_run(const struct cpudrv_fill *f)
{
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
}

// Bytes a fill spans from its first byte.
size_t cpudrv_fill_span(const struct cpudrv_fill *f)
{
    size_t wbytes;
    if (__builtin_mul_overflow(f->width, (size_t)f->elsize, &wbytes)) return SIZE_MAX;
    return cpudrv_xfer_span(wbytes, f->height, 1, f->pitch, 0);
}

// cpudrv_big held: SUCCESS if f is aligned and lies in device-accessible memory (a fill of
// no elements always is), else INVALID_VALUE.
CUresult cpudrv_fill_check(const struct cpudrv_fill *f)
{
    if (!f->width || !f->height) return CUDA_SUCCESS;
    uintptr_t dst = (uintptr_t)f->dst;
    if ((dst % f->elsize) ||
        (f->height > 1 && (f->pitch % f->elsize || f->pitch / f->elsize < f->width)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t span = cpudrv_fill_span(f);
    return span == SIZE_MAX ? CUDA_ERROR_INVALID_VALUE : cpudrv_mem_check(dst, span);
}

static CUresult fill_run(struct cpudrv_op *op)
{
    cpudrv_fill_run((const struct cpudrv_fill *)op->data);
    return CUDA_SUCCESS;
}

static int fill_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct cpudrv_fill *f = (const struct cpudrv_fill *)op->data;
    uintptr_t a = (uintptr_t)f->dst, n = cpudrv_fill_span(f);
    return a < hi && a + n > lo;
}

static CUresult fill(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elsize, size_t width,
                     size_t height, int async, CUstream hs)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return rc;
    struct cpudrv_stream *s;
    struct cpudrv_fill f = {(unsigned char *)(uintptr_t)dst, pitch, width, height, elsize, value};
    int capturing = 0;
    rc = cpudrv_stream_get(async ? hs : NULL, c, &s);
    if (!rc) rc = cpudrv_capture_check(s, &capturing);
    if (!rc) rc = cpudrv_fill_check(&f);
    if (!rc && width && height) {
        struct cpudrv_op *op = capturing ? NULL : cpudrv_op_new(sizeof f);
        if (capturing) {
            rc = cpudrv_capture_fill(s, &f);
        } else if (!op) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            memcpy(op->data, &f, sizeof f);
            op->run = fill_run;
            op->touches = fill_touches;
            op->act = (struct cpudrv_act){.kind = CPUDRV_ACT_MEMSET,
                                          .bytes = (uint64_t)width * height * elsize};
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
