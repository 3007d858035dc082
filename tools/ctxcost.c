/* ctxcost: a developer's probe for the GPU machine: what a second context on device 0 costs in
 * device memory (cuMemGetInfo before and after each step), as the server's quiet context
 * (server/memory/quietctx.c) is one: made plainly, then each limit set to its least, then
 * 32 MiB of pages registered in it (PORTABLE, DEVICEMAP); then made again with an SM-count
 * execution affinity of the fewest SMs the device allows (cuCtxCreate_v4), limits at their
 * least. The primary context is retained first, as the server's is. Prints MiB per step. */
#define PROBE_NAME "ctxcost"
#include "tools/ck.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static size_t used(void)
{
    size_t free, total;
    CK(cuMemGetInfo(&free, &total));
    return total - free;
}

static void step(const char *what, size_t *last)
{
    size_t u = used();
    printf("%-58s %8.1f MiB in use (%+.1f)\n", what, (double)u / 1048576.0,
           ((double)u - (double)*last) / 1048576.0);
    *last = u;
}

/* Each limit at its least in the current context; a refusal is said. */
static void least(size_t *last)
{
    static const struct {
        CUlimit l;
        size_t v;
        const char *name;
    } lims[] = {{CU_LIMIT_STACK_SIZE, 16, "stack 16"},
                {CU_LIMIT_PRINTF_FIFO_SIZE, 4096, "printf FIFO 4096"},
                {CU_LIMIT_MALLOC_HEAP_SIZE, 4096, "malloc heap 4096"},
                {CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1, "pending launch count 1"},
                {CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 0, "sync depth 0"}};
    for (unsigned i = 0; i < sizeof(lims) / sizeof(lims[0]); i++) {
        CUresult r = cuCtxSetLimit(lims[i].l, lims[i].v);
        char what[80];
        snprintf(what, sizeof(what), "  %s%s", lims[i].name, r == CUDA_SUCCESS ? "" : " (refused)");
        step(what, last);
    }
}

int main(void)
{
    CUdevice dev;
    CUcontext prim, c, popped;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&prim, dev));
    CK(cuCtxSetCurrent(prim));
    size_t last = used();
    step("primary context retained", &last);
    CK(cuCtxCreate(&c, NULL, 0, dev));
    step("second context made (cuCtxCreate)", &last);
    least(&last);
    void *pages = aligned_alloc(4096, 32u << 20);
    if (!pages) return 1;
    CK(cuMemHostRegister(pages, 32u << 20,
                         CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    step("32 MiB registered in it", &last);
    CK(cuMemHostUnregister(pages));
    CK(cuCtxDestroy(c));
    step("destroyed", &last);
    int sms = 0;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CUexecAffinityParam aff = {.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT};
    aff.param.smCount.val = 1; /* the driver rounds up to what the device allows */
    CUctxCreateParams p = {.execAffinityParams = &aff, .numExecAffinityParams = 1};
    CUresult r = cuCtxCreate_v4(&c, &p, 0, dev);
    if (r != CUDA_SUCCESS) {
        printf("a context of 1 SM (of %d): refused (%d)\n", sms, (int)r);
        return 0;
    }
    CUexecAffinityParam got;
    if (cuCtxGetExecAffinity(&got, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS)
        printf("a context of %u SMs (of %d), made:\n", got.param.smCount.val, sms);
    step("  made", &last);
    least(&last);
    CK(cuCtxPopCurrent(&popped));
    CK(cuCtxDestroy(c));
    step("destroyed", &last);
    return 0;
}
