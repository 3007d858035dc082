// Self-test: many threads at once, green contexts, sticky faults, tracing and counters.
#include "selftest.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { THREADS = 8, ROUNDS = 40 };

struct worker {
    CUcontext ctx;
    int id;
};

static void *worker(void *p)
{
    struct worker *w = p;
    CK(cuCtxSetCurrent(w->ctx));
    CUstream s;
    CK(cuStreamCreate(&s, w->id % 2 ? CU_STREAM_NON_BLOCKING : 0));
    CUevent e;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CUfunction wp = st_fn("write_pattern"), cp = st_fn("check_pattern");
    unsigned long long n = 4096 + (unsigned long long)w->id * 100;
    unsigned *host;
    CK(cuMemAllocHost((void **)&host, n * 4));
    for (int r = 0; r < ROUNDS; r++) {
        CUdeviceptr d, errs;
        CK(cuMemAlloc(&d, n * 4));
        CK(cuMemAlloc(&errs, 4));
        CK(cuMemsetD32Async(errs, 0, 1, s));
        unsigned seed = (unsigned)(w->id * 1000 + r);
        void *a[] = {&d, &n, &seed};
        CK(cuLaunchKernel(wp, 4, 1, 1, 128, 1, 1, 0, s, a, NULL));
        void *b[] = {&d, &n, &seed, &errs};
        CK(cuLaunchKernel(cp, 4, 1, 1, 128, 1, 1, 0, s, b, NULL));
        CK(cuMemcpyDtoHAsync(host, d, n * 4, s));
        CK(cuEventRecord(e, s));
        CK(cuEventSynchronize(e));
        unsigned bad = 1;
        CK(cuMemcpyDtoH(&bad, errs, 4));
        CHECK(bad == 0);
        CHECK(host[n - 1] == (((unsigned)((n - 1) * 2654435761ull)) ^ seed));
        CK(cuMemFree(d));
        CK(cuMemFree(errs));
    }
    CK(cuMemFreeHost(host));
    CK(cuEventDestroy(e));
    CK(cuStreamDestroy(s));
    return NULL;
}

// Retains, uses and releases device 1's primary context, racing with other threads.
static void *churn(void *p)
{
    (void)p;
    for (int i = 0; i < 150; i++) {
        CUcontext c;
        CK(cuDevicePrimaryCtxRetain(&c, 1));
        CK(cuCtxPushCurrent(c));
        CUdeviceptr d;
        CUresult rc = cuMemAlloc(&d, 4096);
        // Another thread's last release may have torn the context down in between.
        if (rc == CUDA_SUCCESS) rc = cuMemsetD32(d, (unsigned)i, 1024);
        if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_CONTEXT)
            st_failrc(__FILE__, __LINE__, "alloc/memset", rc, CUDA_SUCCESS);
        CK(cuCtxPopCurrent(NULL));
        CK(cuDevicePrimaryCtxRelease(1));
    }
    return NULL;
}

void st_threads(void)
{
    pthread_t ch[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&ch[i], NULL, churn, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(ch[i], NULL);
    unsigned fl;
    int act = 1;
    CK(cuDevicePrimaryCtxGetState(1, &fl, &act));
    CHECK(act == 0);

    pthread_t t[THREADS];
    struct worker w[THREADS];
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    for (int i = 0; i < THREADS; i++) {
        w[i].ctx = ctx;
        w[i].id = i;
        pthread_create(&t[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    size_t fr, total;
    CK(cuMemGetInfo(&fr, &total));
    CHECK(fr == total);
}

void st_green(void)
{
    CUdevResource all, groups[20], rest;
    CK(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(all.type == CU_DEV_RESOURCE_TYPE_SM && all.sm.smCount == 132);
    unsigned ng = 0;
    CK(cuDevSmResourceSplitByCount(NULL, &ng, &all, NULL, 0, 16));
    CHECK(ng == 8);
    ng = 2;
    CK(cuDevSmResourceSplitByCount(groups, &ng, &all, &rest, 0, 10)); // rounded up to 16
    CHECK(ng == 2 && groups[0].sm.smCount == 16 && rest.sm.smCount == 100);
    EXPECT(cuDevSmResourceSplitByCount(groups, &ng, &all, NULL, 0, 200),
           CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
    CUdevResourceDesc desc;
    CK(cuDevResourceGenerateDesc(&desc, groups, 1));
    CUgreenCtx g;
    EXPECT(cuGreenCtxCreate(&g, desc, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
    CUdevResource gr;
    CK(cuGreenCtxGetDevResource(g, &gr, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(gr.sm.smCount == 16);
    CUcontext gc, prim;
    CK(cuCtxFromGreenCtx(&gc, g));
    CK(cuCtxGetCurrent(&prim));
    CHECK(gc && gc != prim);
    CK(cuCtxGetDevResource(gc, &gr, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(gr.sm.smCount == 16);
    CUstream s;
    EXPECT(cuGreenCtxStreamCreate(&s, g, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
    CUgreenCtx back = NULL;
    CK(cuStreamGetGreenCtx(s, &back));
    CHECK(back == g);
    CUcontext c2;
    CK(cuStreamGetCtx_v2(s, &c2, &back));
    CHECK(c2 == prim && back == g);
    // Memory from the primary context is used by a kernel on a green stream.
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 1024));
    unsigned v = 31;
    unsigned long long n = 256;
    void *args[] = {&d, &v, &n};
    CK(cuLaunchKernel(st_fn("fill_u32"), 2, 1, 1, 64, 1, 1, 0, s, args, NULL));
    CK(cuStreamSynchronize(s));
    unsigned got = 0;
    CK(cuMemcpyDtoH(&got, d + 1020, 4));
    CHECK(got == 31);
    // With the green context current, allocations still belong to the device's memory.
    CK(cuCtxPushCurrent(gc));
    CUdeviceptr d2;
    CK(cuMemAlloc(&d2, 64));
    CK(cuMemsetD32(d2, 5, 16));
    CK(cuCtxPopCurrent(NULL));
    CK(cuGreenCtxDestroy(g));
    EXPECT(cuGreenCtxDestroy(g), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    CK(cuMemcpyDtoH(&got, d2 + 60, 4));
    CHECK(got == 5);
    CK(cuMemFree(d2));
    CK(cuMemFree(d));
    unsigned flags;
    int active;
    CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);
}

void st_faults(void)
{
    // A kernel given a host (pageable) pointer faults; the fault is sticky for its context.
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 64));
    unsigned local[4];
    CUdeviceptr bad = (CUdeviceptr)local;
    unsigned v = 1;
    unsigned long long n = 4;
    void *args[] = {&bad, &v, &n};
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuLaunchKernel(st_fn("fill_u32"), 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT(cuMemAlloc(&d, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    // Other contexts are unaffected; a misaligned pointer faults there as such.
    CUcontext c;
    CK(cuCtxCreate(&c, NULL, 0, 0));
    CUdeviceptr e;
    CK(cuMemAlloc(&e, 64));
    CUdeviceptr mis = e + 2;
    void *margs[] = {&mis, &v, &n};
    CK(cuLaunchKernel(st_fn("fill_u32"), 1, 1, 1, 32, 1, 1, 0, NULL, margs, NULL));
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_MISALIGNED_ADDRESS);
    CK(cuCtxDestroy(c));
    // Resetting the primary context clears the fault (and everything it owned).
    CK(cuDevicePrimaryCtxReset(0));
    CUcontext p;
    CK(cuDevicePrimaryCtxRetain(&p, 0));
    CK(cuCtxSetCurrent(p));
    CK(cuMemAlloc(&d, 64));
    CK(cuCtxSynchronize());
    EXPECT(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    // block_sum with less dynamic shared memory than it indexes faults too.
    st_load();
    int cnt = 4;
    void *bargs[] = {&d, &d, &cnt};
    CK(cuLaunchKernel(st_fn("block_sum"), 1, 1, 1, 4, 1, 1, 16, NULL, bargs, NULL));
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CK(cuDevicePrimaryCtxRelease(0));
    CK(cuDevicePrimaryCtxReset(0));
}

// Runs in a child process: with MPSSHIM_CPUDRV_TRACE and _STATS set by the parent.
int st_env_child(void)
{
    CUcontext p, c;
    CUdeviceptr d;
    cuInit(0);
    cuMemAlloc(&d, 16); // no context yet: traced as an error
    cuDevicePrimaryCtxRetain(&p, 0);
    cuCtxCreate(&c, NULL, 0, 0);
    cuCtxDestroy(c);
    cuDevicePrimaryCtxRelease(0);
    return 0;
}

static int file_has(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, text) != NULL;
}

void st_env(void)
{
    char trace[] = "/tmp/cpudrv-trace-XXXXXX", stats[64];
    int fd = mkstemp(trace);
    CHECK(fd >= 0);
    snprintf(stats, sizeof stats, "%s.stats", trace);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        setenv("MPSSHIM_CPUDRV_TRACE", "1", 1);
        setenv("MPSSHIM_CPUDRV_STATS", stats, 1);
        execl("/proc/self/exe", "selftest", "--env-child", (char *)NULL);
        _exit(127);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    close(fd);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(file_has(trace, "cuInit -> CUDA_SUCCESS"));
    CHECK(file_has(trace, "cuMemAlloc_v2 -> CUDA_ERROR_INVALID_CONTEXT"));
    CHECK(file_has(trace, "cuCtxCreate_v4 -> CUDA_SUCCESS"));
    CHECK(file_has(trace, "contexts created 1"));
    CHECK(file_has(stats, "contexts_created=1\n"));
    CHECK(file_has(stats, "primary_activations=1\n"));
    CHECK(file_has(stats, "contexts_live=0\n"));
    CHECK(file_has(stats, "contexts_live_max=2\n"));
    unlink(trace);
    unlink(stats);
}
