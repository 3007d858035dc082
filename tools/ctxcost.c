/* ctxcost: a developer's probe for the GPU machine: what a second context on device 0 costs in
 * device memory (cuMemGetInfo before and after each step), as the server's quiet context
 * (server/memory/quietctx.c) is one: made plainly, then each limit set to its least, then
 * 32 MiB of pages registered in it (PORTABLE, DEVICEMAP); then made again with an SM-count
 * execution affinity of the fewest SMs the device allows (cuCtxCreate_v4), limits at their
 * least; then made four more times, CUDA_DEVICE_MAX_CONNECTIONS set to 1, 32, 8 and 1 just before
 * each making (the server sets 32 before cuInit, as this probe does unless the variable is set:
 * whether the driver reads it per context); then green contexts
 * (cuGreenCtxCreate) over all the SMs and over the fewest the device allows, each with 32 MiB
 * registered in it. The primary context is retained first, as the server's is. Prints MiB per
 * step, and each step's time. */
#define PROBE_NAME "ctxcost"
#include "tools/ck.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t used(void)
{
    size_t free, total;
    CK(cuMemGetInfo(&free, &total));
    return total - free;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static double t0; /* when the last step ended */

/* The memory in use after a step, and how long the step took (since the last one said). */
static void step(const char *what, size_t *last)
{
    double t = now_ms();
    size_t u = used();
    printf("%-58s %8.1f MiB in use (%+.1f), %7.1f ms\n", what, (double)u / 1048576.0,
           ((double)u - (double)*last) / 1048576.0, t - t0);
    *last = u;
    t0 = now_ms();
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

/* A green context over `sms` SMs of dev (0: all), 32 MiB registered in it, then destroyed. */
static void green(CUdevice dev, unsigned sms, size_t *last)
{
    CUdevResource all, part, rest;
    CUdevResourceDesc desc;
    CUgreenCtx g;
    CUcontext c, popped;
    unsigned n = 1;
    char what[80];
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    part = all;
    if (sms) CK(cuDevSmResourceSplitByCount(&part, &n, &all, &rest, 0, sms));
    CK(cuDevResourceGenerateDesc(&desc, &part, 1));
    CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    snprintf(what, sizeof(what), "green context of %u SMs made", part.sm.smCount);
    step(what, last);
    CK(cuCtxFromGreenCtx(&c, g));
    CK(cuCtxPushCurrent(c));
    void *pages = aligned_alloc(4096, 32u << 20);
    if (!pages) _exit(1);
    memset(pages, 0, 32u << 20);
    CK(cuMemHostRegister(pages, 32u << 20,
                         CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    step("  32 MiB registered in it", last);
    CK(cuMemHostUnregister(pages));
    free(pages);
    CK(cuCtxPopCurrent(&popped));
    CK(cuGreenCtxDestroy(g));
    step("  destroyed", last);
}

int main(void)
{
    CUdevice dev;
    CUcontext prim, c, popped;
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); /* as the server does */
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    t0 = now_ms();
    CK(cuDevicePrimaryCtxRetain(&prim, dev));
    CK(cuCtxSetCurrent(prim));
    size_t last = used(); /* none can be asked before a context is current */
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
    } else {
        CUexecAffinityParam got;
        if (cuCtxGetExecAffinity(&got, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS)
            printf("a context of %u SMs (of %d), made:\n", got.param.smCount.val, sms);
        step("  made", &last);
        least(&last);
        CK(cuCtxPopCurrent(&popped));
        CK(cuCtxDestroy(c));
        step("destroyed", &last);
    }
    /* Whether the driver reads the variable at each context's making: 1, then back. */
    static const char *conns[] = {"1", "32", "8", "1"};
    for (unsigned i = 0; i < sizeof(conns) / sizeof(conns[0]); i++) {
        char what[80];
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", conns[i], 1);
        t0 = now_ms();
        CK(cuCtxCreate(&c, NULL, 0, dev));
        snprintf(what, sizeof(what), "a context made with CUDA_DEVICE_MAX_CONNECTIONS=%s",
                 conns[i]);
        step(what, &last);
        least(&last);
        CK(cuCtxPopCurrent(&popped));
        CK(cuCtxDestroy(c));
        step("destroyed", &last);
    }
    green(dev, 0, &last);
    green(dev, 1, &last); /* the split rounds up to the least partition */
    return 0;
}
