/* stack_limit: the context's stack size limit, as this process reads it, before and after a
 * launch. The real driver raises the limit of a context itself when a kernel needs a bigger
 * stack than it has, and never lowers it: on an H200 a kernel with 8 KiB of local memory per
 * thread took the limit from 1024 to 8192 and 1.8 GiB of device memory, until it was set
 * back. In a server's shared context that growth stays after its client leaves unless the
 * server sets it back; tests/stack_idle.sh runs this twice through one server, on the CPU
 * test driver told to grow the limit at every launch (MPSSHIM_CPUDRV_KERNEL_STACK), and the
 * second run must start from the default again. */
#include "tests/progs/common.h"

#include <stdio.h>

int main(void)
{
    t_init("stack_limit", 60);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    size_t before = 0, after = 0;
    CHECK(cuCtxGetLimit(&before, CU_LIMIT_STACK_SIZE));
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, mod, "empty_kernel"));
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxGetLimit(&after, CU_LIMIT_STACK_SIZE));
    printf("stack limit before a launch %zu, after %zu\n", before, after);
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
