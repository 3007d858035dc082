/* copy_victim: the client that the kill -9 test kills in the middle of its copies.
 * Allocates 64 MiB of device memory and 64 MiB of pageable host memory, prints `ready`
 * after its first completed HtoD copy, then copies both ways forever. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES (64u << 20)

int main(void)
{
    t_init("copy_victim", 0); /* no watchdog: it runs until it is killed */
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    unsigned char *h = malloc(BYTES);
    REQUIRE(h, "out of host memory");
    memset(h, 0x5c, BYTES);
    CHECK(cuMemcpyHtoD(d, h, BYTES));
    CHECK(cuCtxSynchronize());
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        CHECK(cuMemcpyHtoD(d, h, BYTES));
        CHECK(cuMemcpyDtoH(h, d, BYTES));
    }
}
