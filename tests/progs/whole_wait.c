/* whole_wait free|unregister|freehost|launches|load|graphadd|attrs|nocode|libcode GOFILE: makes one
 * call that waits for the whole device on a real driver, at a moment a test chooses
 * (tests/waitvalue_twin.sh, tests/codegate.sh). First it sets up
 * (1 MiB of device memory, 4 KiB copied into it from pageable memory, 1 MiB of its own pages
 * registered, 1 MiB of pinned memory), runs a
 * kernel of its module (so that no code is loaded later: a load waits for the device too,
 * and a load blocked so holds up more than these calls do) and synchronises, prints "ready",
 * waits for GOFILE to exist, then frees the device memory (cuMemFree), unregisters the pages
 * (cuMemHostUnregister) or frees the pinned memory (cuMemFreeHost), and releases the rest.
 * Natively each of those waits for every stream of the context; through the shim, the
 * server's thread for it makes the call in the shared context. `launches` instead launches
 * its (loaded) kernel 200 times and synchronises: work that must go on while another client
 * waits to load code (tests/codegate.sh); `load` loads the module again and runs its kernel
 * from there: code loaded by a client long connected; `graphadd` gets a library's kernel in
 * its setup, then adds a graph's kernel node of it (which loads its code in the context),
 * launches the graph and synchronises; `attrs` likewise sets the kernel's dynamic shared
 * memory (cuKernelSetAttribute), asks its occupancy and reads a global of the library (each
 * of which loads code in the context the first time), then launches the kernel; `nocode`
 * loads no code at all (a memset in place of the kernel) and frees everything after GOFILE:
 * a client whose release, when it is killed while it waits, has only memory to give back
 * (tests/leave_beside.sh); `libcode` loads no module but a library, launches its kernel (so
 * its code is loaded in the context) and after GOFILE unloads the library, as cudart does
 * at a program's exit (tests/leave_beside.sh); WHOLE_WAIT_LIBS=N (1 to 64) loads, runs and
 * unloads N such libraries. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (1u << 20)

int main(int argc, char **argv)
{
    t_init("whole_wait", 120);
    REQUIRE(
        argc == 3 && (!strcmp(argv[1], "free") || !strcmp(argv[1], "unregister") ||
                      !strcmp(argv[1], "freehost") || !strcmp(argv[1], "launches") ||
                      !strcmp(argv[1], "load") || !strcmp(argv[1], "graphadd") ||
                      !strcmp(argv[1], "attrs") || !strcmp(argv[1], "nocode") ||
                      !strcmp(argv[1], "libcode")),
        "usage: whole_wait free|unregister|freehost|launches|load|graphadd|attrs|nocode|libcode "
        "GOFILE");
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    int nocode = !strcmp(argv[1], "nocode"), libcode = !strcmp(argv[1], "libcode");
    CUmodule mod = nocode || libcode ? NULL : t_load_module("kernels.ptx");
    CUfunction fill = nocode || libcode ? NULL : t_get_function(mod, "fill_u32");
    CUlibrary lib = NULL;
    CUkernel kern = NULL;
    CUlibrary libs[64];
    int nlibs = 0;
    if (libcode) { /* each kernel launched as a function below: its code loaded then */
        const char *e = getenv("WHOLE_WAIT_LIBS");
        nlibs = e ? atoi(e) : 1;
        REQUIRE(nlibs >= 1 && nlibs <= 64, "WHOLE_WAIT_LIBS=%s: 1 to 64", e);
        size_t len;
        void *image = t_read_kernel_file("kernels.ptx", &len);
        for (int i = 0; i < nlibs; i++)
            CHECK(cuLibraryLoadData(&libs[i], image, NULL, NULL, 0, NULL, NULL, 0));
        free(image);
        lib = libs[0];
        CHECK(cuLibraryGetKernel(&kern, lib, "fill_u32"));
        fill = (CUfunction)kern;
    }
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    /* Small enough to travel inside its request: it waits in a staging block of the server's
     * (server/memory/hostblocks.c), registered before anything else of this client's. */
    static unsigned small[1024];
    CHECK(cuMemcpyHtoD(d, small, sizeof(small)));
    void *pages = aligned_alloc(4096, BYTES);
    REQUIRE(pages, "out of host memory");
    CHECK(cuMemHostRegister(pages, BYTES, 0));
    void *pinned;
    CHECK(cuMemAllocHost(&pinned, BYTES));
    unsigned value = 7;
    unsigned long long n = BYTES / 4;
    void *params[] = {&d, &value, &n};
    if (nocode)
        CHECK(cuMemsetD32(d, value, n));
    else
        CHECK(cuLaunchKernel(fill, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    for (int i = 1; i < nlibs; i++) { /* the other libraries' kernels run too */
        CUkernel k;
        CHECK(cuLibraryGetKernel(&k, libs[i], "fill_u32"));
        CHECK(cuLaunchKernel((CUfunction)k, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, params,
                             NULL));
    }
    CHECK(cuCtxSynchronize());
    int attrs = !strcmp(argv[1], "attrs");
    if (!strcmp(argv[1], "graphadd") || attrs) { /* never launched nor looked up: not loaded */
        size_t len;
        void *image = t_read_kernel_file("kernels.ptx", &len);
        CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
        free(image);
        CHECK(cuLibraryGetKernel(&kern, lib, "fill_u32"));
    }
    printf("ready\n");
    fflush(stdout);
    while (access(argv[2], F_OK) != 0)
        usleep(10000);
    int launches = !strcmp(argv[1], "launches");
    if (!strcmp(argv[1], "load")) {
        CUmodule again = t_load_module("kernels.ptx");
        CUfunction f2 = t_get_function(again, "fill_u32");
        CHECK(cuLaunchKernel(f2, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
        CHECK(cuModuleUnload(again));
    } else if (attrs) {
        int blocks = 0;
        CUdeviceptr g;
        size_t gbytes = 0;
        CHECK(
            cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, kern, dev));
        CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (CUfunction)kern, 256, 0));
        REQUIRE(blocks > 0, "occupancy of %d blocks", blocks);
        CHECK(cuLibraryGetGlobal(&g, &gbytes, lib, "g_counter"));
        REQUIRE(gbytes == 4, "g_counter has %zu bytes", gbytes);
        unsigned five = 5;
        void *kparams[] = {&d, &five, &n};
        CHECK(cuLaunchKernel((CUfunction)kern, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL,
                             kparams, NULL));
        CHECK(cuCtxSynchronize());
        unsigned got = 0;
        CHECK(cuMemcpyDtoH(&got, d + BYTES - 4, 4));
        REQUIRE(got == 5, "the kernel wrote %u, not 5", got);
        CHECK(cuLibraryUnload(lib));
    } else if (lib) {
        CUgraph g;
        CUgraphNode node;
        CUgraphExec x;
        unsigned nine = 9;
        void *kparams[] = {&d, &nine, &n};
        CUDA_KERNEL_NODE_PARAMS kp = {.kern = kern,
                                      .ctx = ctx,
                                      .gridDimX = t_blocks_for(n, 256),
                                      .gridDimY = 1,
                                      .gridDimZ = 1,
                                      .blockDimX = 256,
                                      .blockDimY = 1,
                                      .blockDimZ = 1,
                                      .kernelParams = kparams};
        CHECK(cuGraphCreate(&g, 0));
        CHECK(cuGraphAddKernelNode(&node, g, NULL, 0, &kp));
        CHECK(cuGraphInstantiate(&x, g, 0));
        CHECK(cuGraphLaunch(x, NULL));
        CHECK(cuCtxSynchronize());
        unsigned got = 0;
        CHECK(cuMemcpyDtoH(&got, d + BYTES - 4, 4));
        REQUIRE(got == 9, "the graph's kernel wrote %u, not 9", got);
        CHECK(cuGraphExecDestroy(x));
        CHECK(cuGraphDestroy(g));
        CHECK(cuLibraryUnload(lib));
    } else if (launches) {
        for (int i = 0; i < 200; i++)
            CHECK(
                cuLaunchKernel(fill, t_blocks_for(n, 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
    } else if (libcode) {
        for (int i = 0; i < nlibs; i++)
            CHECK(cuLibraryUnload(libs[i]));
    } else if (nocode || !strcmp(argv[1], "free")) {
        CHECK(cuMemFree(d));
    } else if (!strcmp(argv[1], "unregister")) {
        CHECK(cuMemHostUnregister(pages));
    } else {
        CHECK(cuMemFreeHost(pinned));
    }
    t_ok("%s returned", argv[1]);
    if (strcmp(argv[1], "free") && !nocode) CHECK(cuMemFree(d));
    if (strcmp(argv[1], "unregister")) CHECK(cuMemHostUnregister(pages));
    if (strcmp(argv[1], "freehost")) CHECK(cuMemFreeHost(pinned));
    free(pages);
    if (mod) CHECK(cuModuleUnload(mod));
    t_pass();
}
