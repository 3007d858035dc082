/* runaway SECONDS [--hostfn]: leaves with a kernel still running (delay_set, which waits
 * SECONDS before it writes its flag), with --hostfn a host function queued behind it. The CI
 * tier runs it against a server whose MPSSHIM_RELEASE_TIMEOUT is shorter: the server must give
 * up waiting, log what it leaves allocated and what still runs, and go on serving (and quit);
 * the host function's wait, still pending behind the kernel, must then hold no other client's
 * unregistration (tests/hostfn_gate.sh). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void CUDA_CB never_reached(void *arg)
{
    (void)arg; /* the process is gone before its stream gets here */
}

int main(int argc, char **argv)
{
    t_init("runaway", 60);
    unsigned long long ns = (argc > 1 ? strtoull(argv[1], NULL, 10) : 600) * 1000000000ull;
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction delay_set = t_get_function(mod, "delay_set");
    CUdeviceptr flag;
    CHECK(cuMemAlloc(&flag, 4096));
    unsigned value = 1;
    void *params[] = {&flag, &value, &ns};
    CHECK(cuLaunchKernel(delay_set, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    if (argc > 2 && !strcmp(argv[2], "--hostfn"))
        CHECK(cuLaunchHostFunc(NULL, never_reached, NULL));
    EXPECT(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    t_ok("leaving with a kernel that runs for %llu s", ns / 1000000000ull);
    t_pass();
}
