/* first_launch busy SECONDS | late GOFILE: a client's first launch of a kernel it loaded at
 * start must not wait for another client's work (issue 29; server/code/module.c, eager_load).
 *   busy   keeps its stream busy with one kernel of SECONDS (delay_set), prints "busy" once
 *          it is queued, and ends when it has run.
 *   late   loads kernels.ptx as a library at start (as cudart does), prints "loaded", waits
 *          for GOFILE, then looks its kernel up, launches it and synchronises: natively, and
 *          through the shim with the image's code loaded when the image was, nothing waits
 *          for the other client; loaded at the first launch it waits for every stream of the
 *          shared context (tests/eager.sh). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    t_init("first_launch", 120);
    REQUIRE(argc == 3 && (!strcmp(argv[1], "busy") || !strcmp(argv[1], "late")),
            "usage: first_launch busy SECONDS | late GOFILE");
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4096));
    if (!strcmp(argv[1], "busy")) {
        CUmodule mod = t_load_module("kernels.ptx");
        CUfunction delay = t_get_function(mod, "delay_set");
        unsigned one = 1;
        unsigned long long ns = strtoull(argv[2], NULL, 10) * 1000000000ull;
        void *params[] = {&d, &one, &ns};
        CHECK(cuLaunchKernel(delay, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        printf("busy\n");
        fflush(stdout);
        CHECK(cuCtxSynchronize());
        t_ok("its kernel ran");
        CHECK(cuModuleUnload(mod));
    } else {
        size_t len;
        void *image = t_read_kernel_file("kernels.ptx", &len);
        CUlibrary lib;
        CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
        free(image);
        printf("loaded\n");
        fflush(stdout);
        while (access(argv[2], F_OK) != 0)
            usleep(10000);
        CUkernel kern;
        CHECK(cuLibraryGetKernel(&kern, lib, "fill_u32"));
        unsigned v = 3;
        unsigned long long n = 1024;
        void *params[] = {&d, &v, &n};
        CHECK(cuLaunchKernel((CUfunction)kern, 4, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
        unsigned got = 0;
        CHECK(cuMemcpyDtoH(&got, d + 4092, 4));
        REQUIRE(got == 3, "the kernel wrote %u, not 3", got);
        t_ok("first launch of a kernel loaded at start");
        CHECK(cuLibraryUnload(lib));
    }
    CHECK(cuMemFree(d));
    t_pass();
}
