/* runaway SECONDS: leaves with a kernel still running (delay_set, which waits SECONDS before
 * it writes its flag). The CI tier runs it against a server whose MPSSHIM_RELEASE_TIMEOUT is
 * shorter: the server must give up waiting, log what it leaves allocated, and go on serving
 * (and quit). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>

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
    EXPECT(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    t_ok("leaving with a kernel that runs for %llu s", ns / 1000000000ull);
    t_pass();
}
