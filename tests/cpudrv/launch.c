// Kernel launches: validated at once like the real driver, then queued (or, on a capturing
// stream, made a kernel node); the kernel's CPU twin runs on the stream's worker. A fault in a twin
// (a bad pointer) becomes the context's sticky error, as an illegal address does on a GPU.
#include "cpudrv.h"

#include <stdlib.h>
#include <string.h>

struct kernel {
    struct cpudrv_launch L; // L.mod: a reference is held
};

static CUresult kernel_run(struct cpudrv_op *op)
{
    const struct kernel *k = (const struct kernel *)op->data;
    return k->L.f->twin->run(&k->L);
}

static void kernel_fini(struct cpudrv_op *op)
{
    struct kernel *k = (struct kernel *)op->data;
    cpudrv_obj_put(&k->L.mod->o);
}

// A kernel may access what any 8-byte argument slot points into.
static int kernel_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct kernel *k = (const struct kernel *)op->data;
    for (uint32_t off = 0; off + 8 <= k->L.f->argbytes; off += 8) {
        uint64_t v;
        memcpy(&v, k->L.args + off, 8);
        if (v >= lo && v < hi) return 1;
    }
    return 0;
}

// Copies f's arguments into args (f->argbytes) from kernelParams or an `extra` buffer.
CUresult cpudrv_launch_pack(const struct cpudrv_func *f, void **params, void **extra,
                            unsigned char *args)
{
    if (params && extra) return CUDA_ERROR_INVALID_VALUE;
    if (extra) {
        const void *buf = NULL;
        const size_t *size = NULL;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (!f->argbytes) return CUDA_SUCCESS;
        if (!buf || !size || *size < f->argbytes) return CUDA_ERROR_INVALID_VALUE;
        memcpy(args, buf, f->argbytes);
        return CUDA_SUCCESS;
    }
    if (!f->nparams) return CUDA_SUCCESS;
    if (!params) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < f->nparams; i++) {
        if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
        memcpy(args + f->params[i].off, params[i], f->params[i].size);
    }
    return CUDA_SUCCESS;
}

// Validates a launch's dimensions against f (coop: all blocks resident at once).
CUresult cpudrv_launch_check(const struct cpudrv_func *f, const unsigned g[3], const unsigned b[3],
                             unsigned shmem, int coop)
{
    if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2]) return CUDA_ERROR_INVALID_VALUE;
    if (g[0] > 2147483647u || g[1] > 65535 || g[2] > 65535) return CUDA_ERROR_INVALID_VALUE;
    if (b[0] > 1024 || b[1] > 1024 || b[2] > 64 || (uint64_t)b[0] * b[1] * b[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (shmem > (unsigned)f->max_dyn_shmem) return CUDA_ERROR_INVALID_VALUE;
    if (coop) {
        uint64_t blocks = (uint64_t)g[0] * g[1] * g[2];
        int per = cpudrv_occupancy((int)(b[0] * b[1] * b[2]), shmem);
        if (blocks > (uint64_t)per * CPUDRV_SM_COUNT)
            return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    return CUDA_SUCCESS;
}

// MPSSHIM_CPUDRV_KERNEL_STACK=N: every launch needs N bytes of stack per thread, so it
// raises the context's stack size limit to N if lower, and nothing lowers it again, as the
// real driver does for a kernel with more local memory than the limit allows.
static void grow_stack(struct cpudrv_ctx *c)
{
    static long need = -1;
    if (need < 0) {
        const char *v = getenv("MPSSHIM_CPUDRV_KERNEL_STACK");
        need = v ? atol(v) : 0;
        if (need < 0) need = 0;
    }
    if ((size_t)need > c->limits[CU_LIMIT_STACK_SIZE])
        c->limits[CU_LIMIT_STACK_SIZE] = (size_t)need;
}

static CUresult launch(CUfunction fh, const unsigned g[3], const unsigned b[3], unsigned shmem,
                       CUstream hs, void **params, void **extra, int coop)
{
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_code_load_wait(fh); // a CUkernel's first launch in the context
    if (rc) return rc;
    rc = cpudrv_enter(&c);
    if (rc) return rc;
    cpudrv_submit_gate(1); // held back while a module load (or a free) waits
    struct cpudrv_func *f = cpudrv_func_find(fh);
    struct cpudrv_stream *s = NULL;
    struct cpudrv_op *op = NULL;
    int capturing = 0;
    if (!f) rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc) rc = cpudrv_launch_check(f, g, b, shmem, coop);
    if (!rc) rc = cpudrv_stream_get(hs, c, &s);
    if (!rc) rc = cpudrv_capture_check(s, &capturing);
    if (!rc) {
        op = cpudrv_op_new(sizeof(struct kernel) + f->argbytes);
        if (!op) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!rc) {
        struct kernel *k = (struct kernel *)op->data;
        unsigned char *args = op->data + sizeof(struct kernel);
        rc = cpudrv_launch_pack(f, params, extra, args);
        if (!rc) {
            k->L.f = f;
            k->L.mod = f->mod;
            memcpy(k->L.grid, g, sizeof k->L.grid);
            memcpy(k->L.block, b, sizeof k->L.block);
            k->L.shmem = shmem;
            k->L.args = args;
            k->L.dying = &s->o.ctx->dying;
        }
        if (rc || capturing) {
            // A captured launch becomes a kernel node with its own copy of the arguments.
            if (!rc) rc = cpudrv_capture_kernel(s, &k->L, fh);
            free(op);
        } else {
            grow_stack(s->o.ctx);
            cpudrv_obj_ref(&f->mod->o);
            op->run = kernel_run;
            op->fini = kernel_fini;
            op->touches = kernel_touches;
            op->act = (struct cpudrv_act){.kind = CPUDRV_ACT_KERNEL, .name = f->name};
            rc = cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
        }
    }
    cpudrv_unlock();
    return rc;
}

// Queues a kernel (a CUfunction, or a CUkernel cast to one) on a stream.
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return TR(launch(f, g, b, sharedMemBytes, hStream, kernelParams, extra, 0));
}

// As cuLaunchKernel; all blocks must be able to reside at once.
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX,
                                   unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams)
{
    unsigned g[3] = {gridDimX, gridDimY, gridDimZ}, b[3] = {blockDimX, blockDimY, blockDimZ};
    return TR(launch(f, g, b, sharedMemBytes, hStream, kernelParams, NULL, 1));
}

// Launch from a CUlaunchConfig; COOPERATIVE is honoured, other attributes accepted.
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra)
{
    if (!config || (config->numAttrs && !config->attrs)) return TR(CUDA_ERROR_INVALID_VALUE);
    int coop = 0;
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
            coop = config->attrs[i].value.cooperative != 0;
    unsigned g[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    unsigned b[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return TR(launch(f, g, b, config->sharedMemBytes, config->hStream, kernelParams, extra, coop));
}
