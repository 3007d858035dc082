/* hold [seconds]: an idle client, for counting contexts and memory. Initialises CUDA,
 * allocates 1 MiB, prints `ready`, sleeps (default an hour) and exits 0. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    t_init("hold", 0); /* no watchdog: it is meant to sit idle */
    long secs = argc > 1 ? atol(argv[1]) : 3600;
    REQUIRE(secs >= 0, "bad duration '%s'", argv[1]);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    CHECK(cuMemsetD8(d, 0, 1 << 20));
    CHECK(cuCtxSynchronize());
    printf("ready\n");
    fflush(stdout);
    /* sleep() returns early on a signal; keep sleeping until the time is up. */
    for (unsigned left = (unsigned)secs; left;)
        left = sleep(left);
    CHECK(cuMemFree(d));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
