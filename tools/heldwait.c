/* heldwait CALL [--create] [--spin] [--launch] [--other|--cross] [PTX]: a developer's probe for the
 * GPU machine (issue 11). One stream of the primary context waits on cuStreamWaitValue32 for a word
 * of device memory (--spin: a kernel spins on it, for 5 s at most, as a collective's half waits for
 * its peer); a second thread makes CALL; half a second later a third thread writes the word on a
 * stream made before the wait (--create: on one it makes then), the way the server ends a departed
 * client's wait (server/memory/memops.c), or launches a kernel loaded before that stores it
 * (--launch: a peer's half, tests/progs/thread_peer); --other: CALL's object made, and CALL made,
 * in a second context of the device (cuCtxCreate: free, unregister, freehost and load only), as a
 * helper context of the server's would; --cross: CALL's object made in the primary context
 * (registered PORTABLE), CALL made in the second context, as server/memory/quietctx.c does (unload
 * and libunload: always so with --other); --owned: CALL's object made in the second context
 * (PORTABLE, DEVICEMAP), used by the primary context's copies, CALL made in the second context;
 * --green: as --owned, the second context a green context over all the device's SMs
 * (cuGreenCtxCreate, cuCtxFromGreenCtx): on two H200s (2026-11-30) unregister and freehost
 * waited and held the launch, as --cross's did (what is registered in a green context is the
 * primary's), where --owned's did not.
 * Prints whether CALL waited, whether an event query, a
 * stream query and the write went through, and whether CALL ended after the write. What its scratch
 * forerunners (the same steps, 2026-11-27) found on an H200 (driver 580.159.04) is why
 * server/code/codegate.c and the release streams exist: free, unregister, freehost waited and the
 * write went through, --create's did not; load, kernelgetfunc, kernellaunch and limit waited
 * and the write waited too; getfunc returned but the write waited; libload, libgetkernel
 * and loadedlaunch did not wait. This form on the same H200 the same day: register,
 * register-plain, hostalloc, vmm and streamcreate (also --create) did not wait and the write
 * went through; free waited and the write went through; load, kernelgetfunc, limit and
 * graphadd waited and the write waited; getfunc returned and the write waited; kernelattr and
 * instantiate (of a graph whose node's add had loaded the kernel) did not wait.
 *
 * CALL: none, free (cuMemFree), unregister (cuMemHostUnregister), freehost (cuMemFreeHost),
 * register (cuMemHostRegister of 32 MiB of a memfd's shared pages, PORTABLE and DEVICEMAP,
 * as the server registers a client's segment), register-plain (without flags), hostalloc
 * (cuMemHostAlloc of 32 MiB, PORTABLE and DEVICEMAP), load
 * (cuModuleLoadData), getfunc (cuModuleGetFunction of a function not loaded yet), libload
 * (cuLibraryLoadData), libgetkernel (cuLibraryGetKernel), kernelgetfunc
 * (cuKernelGetFunction), kernellaunch (a CUkernel's first launch), loadedlaunch (a launch of
 * a function loaded before), limit (cuCtxSetLimit of the stack), vmm (cuMemCreate, cuMemMap,
 * cuMemSetAccess of 2 MiB), streamcreate (cuStreamCreate), graphadd (a kernel node of a
 * CUkernel never loaded, added to a graph), instantiate (cuGraphInstantiate of a graph made
 * before with such a node), kernelattr (cuKernelGetAttribute of a CUkernel never loaded),
 * kernelsetattr (cuKernelSetAttribute of its dynamic shared memory on device 0), occupancy
 * (cuOccupancyMaxActiveBlocksPerMultiprocessor of it), libglobal (cuLibraryGetGlobal of a
 * library never used in the context), unload (cuModuleUnload of a module loaded, and its
 * function's code loaded, before the hold), libunload (cuLibraryUnload of a library whose
 * kernel's function was got, so loaded in the context, before the hold), libunload-cold (the
 * same, its kernel got but never loaded in a context), ctxcreate (cuCtxCreate
 * of a second context and its limits set at their least, as server/memory/quietctx.c does),
 * ctxdestroy (cuCtxDestroy of a second context made before the hold, nothing run in it).
 * PTX: the kernels to load (default build/tests/kernels.ptx). Never leaves the word unwritten
 * for good: it exits once it has said what it saw (a call still waiting dies with it). */
#define _GNU_SOURCE
#define PROBE_NAME "heldwait"
#include "tools/ck.h"

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static CUcontext ctx, ctx2; /* ctx2: CALL's context, the primary's or --other's */
static CUcontext spare;     /* ctxdestroy's: made before the hold, nothing run in it */
static const char *call;
static int create, spin, launch, other, cross, owned, green;
static char *ptx;
static CUdeviceptr word, big;
static CUstream before, held;
static CUmodule mod, mod2;
static CUlibrary lib2;
static CUfunction loaded, fill, await;
static CUlibrary lib;
static CUkernel kern;
static CUevent behind;
static CUgraph graph, kgraph; /* empty; one kernel node of kern */
static void *pages, *pinned;
static _Atomic int call_done, write_done, query_done;

/* CALL's result, plus one (0: not returned). */
static void *call_main(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx2));
    CUresult r = CUDA_SUCCESS;
    CUmodule m;
    CUfunction f;
    CUlibrary l;
    CUkernel k;
    CUstream s;
    if (!strcmp(call, "free"))
        r = cuMemFree(big);
    else if (!strcmp(call, "unregister"))
        r = cuMemHostUnregister(pages);
    else if (!strcmp(call, "freehost"))
        r = cuMemFreeHost(pinned);
    else if (!strcmp(call, "register") || !strcmp(call, "register-plain")) {
        /* As the server registers a client's segment: shared memory of a memfd. */
        size_t n = 32u << 20;
        int fd = memfd_create("heldwait", 0);
        void *p = fd >= 0 && ftruncate(fd, (off_t)n) == 0
                      ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
        r = p != MAP_FAILED
                ? cuMemHostRegister(p, n,
                                    strcmp(call, "register") ? 0
                                                             : CU_MEMHOSTREGISTER_PORTABLE |
                                                                   CU_MEMHOSTREGISTER_DEVICEMAP)
                : CUDA_ERROR_OUT_OF_MEMORY;
    } else if (!strcmp(call, "hostalloc")) {
        void *p;
        r = cuMemHostAlloc(&p, 32u << 20, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    } else if (!strcmp(call, "load"))
        r = cuModuleLoadData(&m, ptx);
    else if (!strcmp(call, "getfunc"))
        r = cuModuleGetFunction(&f, mod, "fill_u32");
    else if (!strcmp(call, "libload"))
        r = cuLibraryLoadData(&l, ptx, NULL, NULL, 0, NULL, NULL, 0);
    else if (!strcmp(call, "libgetkernel"))
        r = cuLibraryGetKernel(&k, lib, "fill_u32");
    else if (!strcmp(call, "kernelgetfunc"))
        r = cuKernelGetFunction(&f, kern);
    else if (!strcmp(call, "kernellaunch"))
        r = cuLaunchKernel((CUfunction)kern, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    else if (!strcmp(call, "unload"))
        r = cuModuleUnload(mod2);
    else if (!strcmp(call, "libunload") || !strcmp(call, "libunload-cold"))
        r = cuLibraryUnload(lib2);
    else if (!strcmp(call, "loadedlaunch"))
        r = cuLaunchKernel(loaded, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    else if (!strcmp(call, "limit"))
        r = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 8192);
    else if (!strcmp(call, "graphadd")) {
        CUgraphNode n;
        CUDA_KERNEL_NODE_PARAMS kp = {.kern = kern,
                                      .ctx = ctx,
                                      .gridDimX = 1,
                                      .gridDimY = 1,
                                      .gridDimZ = 1,
                                      .blockDimX = 1,
                                      .blockDimY = 1,
                                      .blockDimZ = 1};
        r = cuGraphAddKernelNode(&n, graph, NULL, 0, &kp);
    } else if (!strcmp(call, "instantiate")) {
        CUgraphExec x;
        r = cuGraphInstantiate(&x, kgraph, 0);
    } else if (!strcmp(call, "kernelsetattr")) {
        r = cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, kern, 0);
    } else if (!strcmp(call, "occupancy")) {
        int blocks;
        r = cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (CUfunction)kern, 128, 0);
    } else if (!strcmp(call, "libglobal")) {
        CUdeviceptr g;
        size_t bytes;
        r = cuLibraryGetGlobal(&g, &bytes, lib, "g_counter");
    } else if (!strcmp(call, "kernelattr")) {
        int v;
        r = cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, kern, 0);
    } else if (!strcmp(call, "streamcreate"))
        r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    else if (!strcmp(call, "ctxcreate")) {
        /* As server/memory/quietctx.c makes its context: limits at their least. */
        CUcontext c, popped;
        CUdevice d;
        r = cuDeviceGet(&d, 0);
        if (r == CUDA_SUCCESS) r = cuCtxCreate(&c, NULL, 0, d);
        if (r == CUDA_SUCCESS) {
            (void)cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 16);
            (void)cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 4096);
            (void)cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 4096);
            (void)cuCtxPopCurrent(&popped);
        }
    } else if (!strcmp(call, "ctxdestroy"))
        r = cuCtxDestroy(spare);
    else if (!strcmp(call, "vmm")) {
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
        CUmemAccessDesc acc = {.location = prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        size_t n = 2 << 20;
        r = cuMemCreate(&h, n, &prop, 0);
        if (r == CUDA_SUCCESS) r = cuMemAddressReserve(&va, n, n, 0, 0);
        if (r == CUDA_SUCCESS) r = cuMemMap(va, n, 0, h, 0);
        if (r == CUDA_SUCCESS) r = cuMemSetAccess(va, n, &acc, 1);
    }
    atomic_store(&call_done, 1 + (int)r);
    return NULL;
}

static void *query_main(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    (void)cuEventQuery(behind);
    (void)cuStreamQuery(held);
    atomic_store(&query_done, 1);
    return NULL;
}

static void *write_main(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    CUstream s = before;
    if (create) CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (launch) {
        unsigned one = 1;
        unsigned long long n = 1;
        void *params[] = {&word, &one, &n};
        CK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    } else {
        CK(cuStreamWriteValue32(s, word, 1, 0));
    }
    CK(cuStreamSynchronize(s));
    atomic_store(&write_done, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *file = "build/tests/kernels.ptx";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--create"))
            create = 1;
        else if (!strcmp(argv[i], "--spin"))
            spin = 1;
        else if (!strcmp(argv[i], "--launch"))
            launch = 1;
        else if (!strcmp(argv[i], "--other"))
            other = 1;
        else if (!strcmp(argv[i], "--cross"))
            other = cross = 1;
        else if (!strcmp(argv[i], "--owned"))
            other = owned = 1;
        else if (!strcmp(argv[i], "--green"))
            other = owned = green = 1;
        else if (!call)
            call = argv[i];
        else
            file = argv[i];
    }
    if (!call) {
        fprintf(stderr, "usage: heldwait CALL [--create] [--spin] [--launch] "
                        "[--other|--cross|--owned|--green] [PTX]\n");
        return 2;
    }
    FILE *f = fopen(file, "r");
    ptx = calloc(1, 4 << 20);
    if (!f || !ptx || fread(ptx, 1, (4 << 20) - 1, f) == 0) {
        fprintf(stderr, "heldwait: cannot read %s\n", file);
        return 2;
    }
    fclose(f);
    CUdevice dev;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    /* Everything CALL needs is made before the stream is held. */
    CK(cuModuleLoadData(&mod, ptx));
    CK(cuModuleGetFunction(&loaded, mod, "empty_kernel"));
    CK(cuFuncLoad(loaded));
    CK(cuModuleGetFunction(&fill, mod, "fill_u32"));
    CK(cuFuncLoad(fill));
    CK(cuModuleGetFunction(&await, mod, "await_u32"));
    CK(cuFuncLoad(await));
    CK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    if (!strcmp(call, "unload")) {
        CUfunction f2;
        CK(cuModuleLoadData(&mod2, ptx));
        CK(cuModuleGetFunction(&f2, mod2, "empty_kernel"));
        CK(cuFuncLoad(f2));
    }
    if (!strcmp(call, "libunload") || !strcmp(call, "libunload-cold")) {
        CUkernel k2;
        CUfunction f2;
        CK(cuLibraryLoadData(&lib2, ptx, NULL, NULL, 0, NULL, NULL, 0));
        CK(cuLibraryGetKernel(&k2, lib2, "empty_kernel"));
        if (!strcmp(call, "libunload")) CK(cuKernelGetFunction(&f2, k2));
    }
    CK(cuLibraryGetKernel(&kern, lib, "empty_kernel"));
    CK(cuGraphCreate(&graph, 0));
    if (!strcmp(call, "instantiate")) {
        CUgraphNode n;
        CUDA_KERNEL_NODE_PARAMS kp = {.kern = kern,
                                      .ctx = ctx,
                                      .gridDimX = 1,
                                      .gridDimY = 1,
                                      .gridDimZ = 1,
                                      .blockDimX = 1,
                                      .blockDimY = 1,
                                      .blockDimZ = 1};
        CK(cuGraphCreate(&kgraph, 0));
        CK(cuGraphAddKernelNode(&n, kgraph, NULL, 0, &kp));
    }
    if (!strcmp(call, "ctxdestroy")) {
        CUcontext popped;
        CK(cuCtxCreate(&spare, NULL, 0, dev));
        CK(cuCtxPopCurrent(&popped));
    }
    ctx2 = ctx;
    if (green) {
        /* A green context over all the device's SMs, as a context for CALL. */
        CUdevResource all;
        CUdevResourceDesc desc;
        CUgreenCtx g;
        CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
        CK(cuDevResourceGenerateDesc(&desc, &all, 1));
        CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
        CK(cuCtxFromGreenCtx(&ctx2, g));
        CK(cuCtxSetCurrent(ctx2));
    } else if (other) {
        CK(cuCtxCreate(&ctx2, NULL, 0, dev));
        CK(cuCtxSetCurrent(cross ? ctx : ctx2));
    }
    pages = aligned_alloc(4096, 1 << 20);
    if (!pages) return 2;
    CK(cuMemHostRegister(pages, 1 << 20,
                         other ? CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP : 0));
    if (owned)
        CK(cuMemHostAlloc(&pinned, 1 << 20, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    else
        CK(cuMemAllocHost(&pinned, 1 << 20));
    CK(cuMemAlloc(&big, 1 << 20));
    if (other) CK(cuCtxSynchronize());
    CK(cuCtxSetCurrent(ctx));
    if (owned || cross) {
        /* The pages and the pinned block used by the primary context's copies, as the
         * server's copies use a client's segment; how fast (pinned speed, or staged). */
        CUdeviceptr dst;
        CK(cuMemAlloc(&dst, 1 << 20));
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < 64; i++) {
            CK(cuMemcpyHtoDAsync(dst, i & 1 ? pinned : pages, 1 << 20, NULL));
            CK(cuMemcpyDtoHAsync(i & 1 ? pages : pinned, dst, 1 << 20, NULL));
        }
        CK(cuCtxSynchronize());
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        printf("copies in the primary context of memory made in the %s one: %.1f GB/s\n",
               green   ? "green"
               : owned ? "second"
                       : "primary",
               128.0 * (1 << 20) / s / 1e9);
    }
    CK(cuMemAlloc(&word, 4));
    CK(cuMemsetD32(word, 0, 1));
    CK(cuStreamCreate(&before, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&behind, CU_EVENT_DISABLE_TIMING));
    CK(cuCtxSynchronize());
    CUdeviceptr out;
    CK(cuMemAlloc(&out, 4));
    CK(cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
    if (spin) {
        unsigned one = 1;
        unsigned long long ns = 5000000000ull;
        void *params[] = {&word, &one, &ns, &out};
        CK(cuLaunchKernel(await, 1, 1, 1, 1, 1, 1, 0, held, params, NULL));
    } else {
        CK(cuStreamWaitValue32(held, word, 1, CU_STREAM_WAIT_VALUE_EQ));
    }
    CK(cuEventRecord(behind, held));
    usleep(100000);
    pthread_t t;
    if (strcmp(call, "none"))
        pthread_create(&t, NULL, call_main, NULL);
    else
        atomic_store(&call_done, 1);
    usleep(500000);
    int waited = !atomic_load(&call_done);
    pthread_create(&t, NULL, query_main, NULL);
    pthread_create(&t, NULL, write_main, NULL);
    for (int i = 0; i < 30 && !atomic_load(&write_done); i++)
        usleep(100000);
    for (int i = 0; i < 10 && !atomic_load(&call_done); i++)
        usleep(100000);
    int done = atomic_load(&call_done);
    printf("%-14s %-8s%s%s%s: it %s; an event and a stream query %s; the %s %s; it %s (error %d)\n",
           call, create ? "--create" : "", spin ? " --spin" : "", launch ? " --launch" : "",
           cross   ? " --cross"
           : green ? " --green"
           : owned ? " --owned"
           : other ? " --other"
                   : "",
           waited ? "WAITED" : "did not wait", atomic_load(&query_done) ? "went through" : "WAITED",
           launch ? "launch" : "write", atomic_load(&write_done) ? "went through" : "WAITED",
           done ? "returned" : "never returned", done ? done - 1 : -1);
    fflush(stdout);
    _exit(0);
}
