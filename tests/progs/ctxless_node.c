/* ctxless_node: a library's kernel named in graph calls before the process has any context.
 * Libraries need no context, so a program may load one, take a kernel and add a graph's
 * kernel node of it before it makes a context; through the shim the server then serves the
 * call in its own context of device 0 (a server that took the client's missing context for
 * granted there died, taking every client with it). Prints nothing that depends on where it
 * ran: the context-less add may succeed or be refused, but it must be answered, and the
 * process then makes a context, adds the node again, runs the graph and checks its result. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    t_init("ctxless_node", 60);
    CHECK(cuInit(0));
    size_t len;
    void *image = t_read_kernel_file("kernels.ptx", &len);
    CUlibrary lib;
    CUkernel kern;
    CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    free(image);
    CHECK(cuLibraryGetKernel(&kern, lib, "fill_u32"));
    CUdeviceptr none = 0;
    unsigned value = 3;
    unsigned long long n = 1024;
    void *params[] = {&none, &value, &n};
    CUDA_KERNEL_NODE_PARAMS kp = {.kern = kern,
                                  .gridDimX = 4,
                                  .gridDimY = 1,
                                  .gridDimZ = 1,
                                  .blockDimX = 256,
                                  .blockDimY = 1,
                                  .blockDimZ = 1,
                                  .kernelParams = params};
    CUgraph g;
    CUgraphNode node;
    /* Whatever the driver says without a context (not checked: drivers differ), the server
     * must say it and live: an MPS error here is the server gone. */
    CUresult r = cuGraphCreate(&g, 0);
    if (r == CUDA_SUCCESS) {
        r = cuGraphAddKernelNode(&node, g, NULL, 0, &kp);
        REQUIRE(r < CUDA_ERROR_MPS_CONNECTION_FAILED || r > CUDA_ERROR_MPS_CLIENT_TERMINATED,
                "a kernel node added before any context: %s", t_errname(r));
        (void)cuGraphDestroy(g);
    }
    REQUIRE(r < CUDA_ERROR_MPS_CONNECTION_FAILED || r > CUDA_ERROR_MPS_CLIENT_TERMINATED,
            "graph calls before any context: %s", t_errname(r));
    t_ok("graph calls before any context answered");
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, n * 4));
    params[0] = &d;
    kp.ctx = ctx;
    CUgraphExec x;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddKernelNode(&node, g, NULL, 0, &kp));
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, NULL));
    CHECK(cuCtxSynchronize());
    unsigned got[1024];
    CHECK(cuMemcpyDtoH(got, d, sizeof got));
    for (unsigned i = 0; i < 1024; i++)
        REQUIRE(got[i] == 3, "word %u is %u, not 3", i, got[i]);
    t_ok("the library kernel's node ran in the context made after");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree(d));
    CHECK(cuLibraryUnload(lib));
    t_pass();
}
