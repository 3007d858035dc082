/* The copy engine (memcpy.c). A copy row of cuda_symbols.txt (class copy) names its sides,
 * its extent and its stream; the generator writes its entry point as one call of the engine
 * (build/gen/shim_stubs.c, SHIM_COPY_ENTRY in stubs.h), so no variant has code of its own.
 * The flags are the wire's (CHAN_CF_ASYNC: returns once queued; CHAN_CF_UNALIGNED). */
#ifndef MPSSHIM_MEMCPY_H
#define MPSSHIM_MEMCPY_H

#include "interpose/shim.h"

/* One side of a copy as the caller described it. */
struct shim_copy_side {
    int memtype;      /* CU_MEMORYTYPE_* as given (UNIFIED resolved by classify) */
    const void *host; /* host pointer (HOST) */
    CUdeviceptr dev;  /* device or unified pointer */
    CUarray array;
    int device;    /* peer copies: the side's device, else -1 */
    CUcontext ctx; /* a peer side's context (shim_copy_peer), which names its device */
    int peer;
    uint64_t x, y, z, pitch, height;
};

/* The sides a row's notes name: src:p[host], [device], [unified], [array+offset],
 * [peer+context]. */
struct shim_copy_side shim_copy_host(const void *p);
struct shim_copy_side shim_copy_device(CUdeviceptr p);
struct shim_copy_side shim_copy_unified(CUdeviceptr p);
struct shim_copy_side shim_copy_array(CUarray a, size_t offset);
struct shim_copy_side shim_copy_peer(CUdeviceptr p, CUcontext ctx);

/* A side of a struct-described copy: memory type, pointers, offsets (x in bytes), pitch and
 * rows per slice. */
struct shim_copy_side shim_copy_side3(int mt, const void *host, CUdeviceptr dev, CUarray arr,
                                      size_t x, size_t y, size_t z, size_t pitch, size_t height);

/* bytes from src to dst, on stream (NULL: the caller's default stream). */
CUresult shim_copy(struct shim_copy_side src, struct shim_copy_side dst, uint64_t bytes,
                   CUstream stream, unsigned cflags);
/* A copy its struct describes (struct:p), by the struct's type. */
CUresult shim_copy_2d(const CUDA_MEMCPY2D *p, CUstream stream, unsigned cflags);
CUresult shim_copy_3d(const CUDA_MEMCPY3D *p, CUstream stream, unsigned cflags);
CUresult shim_copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream stream, unsigned cflags);

/* A side of a w x h x d copy (w in bytes) resolved (a unified address becomes HOST or
 * DEVICE) and described as the engine sends it: CUDA_ERROR_INVALID_VALUE where a single
 * copy refuses it; *mvar set when it lies in a __managed__ variable (memcpybatch3d.c). */
CUresult shim_copy_wire_side(struct shim_copy_side *s, uint64_t w, uint64_t h, uint64_t d,
                             struct chan_copy_side *out, int *mvar);

#endif
