/* hostfn_stuck [--value] [--load]: a client to be killed while a stream of its own waits on the
 * client itself, and while the server's thread for it is inside a driver call that takes
 * long: a 1 MiB cuMemAlloc, which MPSSHIM_CPUDRV_SLOW_ALLOC slows down on the CPU test
 * driver. The wait is on a host function of its own that never returns, or with --value on
 * a value in its own pinned host memory that nothing writes (cuStreamWaitValue32). Prints
 * "ready" once the stream waits, then allocates, then waits to be killed; with --load it
 * first loads a module, which through the shim waits for the host function first, for ever
 * (tests/hostfn_gate.sh looks for the shim's line saying so).
 * tests/hostfn_death.sh checks that another client's call that waits for the whole device
 * is not held up until that slow call ends (on a GPU such a wait holds the driver's lock,
 * and the killed client's thread could never get to its release). Never ends by itself,
 * natively either. */
#include "tests/progs/common.h"

#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static atomic_int ran;

static void CUDA_CB never(void *arg)
{
    (void)arg;
    atomic_store(&ran, 1);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    t_init("hostfn_stuck", 0);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (t_has_flag(argc, argv, "--value")) {
        volatile uint32_t *flag;
        CHECK(cuMemHostAlloc((void **)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
        *flag = 0;
        CUdeviceptr d;
        CHECK(cuMemHostGetDevicePointer(&d, (void *)flag, 0));
        CHECK(cuStreamWaitValue32(s, d, 1, CU_STREAM_WAIT_VALUE_EQ));
        CUdeviceptr after;
        CHECK(cuMemAlloc(&after, 4096));
        CHECK(cuMemsetD32Async(after, 7, 1024, s)); /* work queued behind the wait */
        EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    } else {
        CHECK(cuLaunchHostFunc(s, never, NULL));
        while (!atomic_load(&ran))
            usleep(1000);
    }
    printf("ready\n");
    fflush(stdout);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    if (t_has_flag(argc, argv, "--load")) (void)t_load_module("kernels.ptx");
    for (;;)
        pause();
}
