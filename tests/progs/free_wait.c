/* free_wait: one process's cuMemFree must not wait for another process's work.
 *
 * The process forks before any CUDA call. A (the parent) queues a host function that, while
 * it runs, tells B it has started and then waits up to 15 s for B to say it has freed its
 * memory. B (the child) allocates, waits for A's word, frees with cuMemFree and says so.
 * Natively (two contexts) B's free has nothing to wait for, and A's host function hears B.
 * In a server that replays both on one context, a cuMemFree that waits for the whole
 * context (the driver's does) waits for A's host function, which waits for B: A's host
 * function gives up after 15 s and A fails. Through the shim this passes when the server
 * frees without that wait (its arena, the default, or its pool: server/memory/devmem.c);
 * tests/devpool.sh runs it so, on the CPU test driver told to make cuMemFree wait for its
 * whole context (MPSSHIM_CPUDRV_FREE_WAITS=1), and with the driver's cuMemAlloc
 * (MPSSHIM_DEVICE_VMM=0) too, where it must fail. */
#include "tests/progs/common.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int to_a[2], to_b[2]; /* pipes: B -> A, A -> B */

/* A's host function: B hears that it runs; it waits for B's free. */
static void CUDA_CB during(void *arg)
{
    int *heard = arg;
    char c = 's';
    t_write_all(to_b[1], &c, 1);
    struct pollfd p = {.fd = to_a[0], .events = POLLIN};
    *heard = poll(&p, 1, 15000) == 1 && read(to_a[0], &c, 1) == 1 && c == 'f';
}

static void b_role(void)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    char c = 0;
    REQUIRE(t_read_all(to_b[0], &c, 1) && c == 's', "B: A's host function did not start");
    CHECK(cuMemFree(d));
    c = 'f';
    t_write_all(to_a[1], &c, 1);
    CHECK(cuDevicePrimaryCtxRelease(dev));
    exit(0);
}

int main(void)
{
    t_init("free_wait", 120);
    REQUIRE(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) b_role();
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int heard = 0;
    CHECK(cuLaunchHostFunc(s, during, &heard));
    CHECK(cuStreamSynchronize(s));
    int sb = 0;
    REQUIRE(waitpid(b, &sb, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "B failed (status %d)", sb);
    REQUIRE(heard, "A: B's cuMemFree waited for A's host function (or B said nothing)");
    t_ok("A: another process's cuMemFree returned while A's host function ran");
    CHECK(cuStreamDestroy(s));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
