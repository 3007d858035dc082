/* hostfn_stuck: a client to be killed while a stream of its own waits on a host function of
 * its own that never returns, and while the server's thread for it is inside a driver call
 * that takes long: a 1 MiB cuMemAlloc, which MPSSHIM_CPUDRV_SLOW_ALLOC slows down on the CPU
 * test driver. Prints "ready" once the host function runs, then allocates, then waits to be
 * killed. tests/hostfn_death.sh checks that another client's call that waits for the whole
 * device is not held up until that slow call ends (on a GPU such a wait holds the driver's
 * lock, and the killed client's thread could never get to its release). Never ends by
 * itself, natively either. */
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

int main(void)
{
    t_init("hostfn_stuck", 0);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuLaunchHostFunc(s, never, NULL));
    while (!atomic_load(&ran))
        usleep(1000);
    printf("ready\n");
    fflush(stdout);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    for (;;)
        pause();
}
