/* peer: peer access between the primary contexts of two devices, per process.
 *
 * One process: the errors cuda.h gives (flags, the current context as its own peer, disabling
 * what is not enabled, enabling twice, two contexts of one device), each direction on its own,
 * a kernel on device 1 reading device 0's memory with access enabled, and peer access that
 * ends with its context (released and retained again: enabled anew).
 *
 * Other processes at the same time, forked before any CUDA call: one enables 0 -> 1 and
 * leaves without disabling it; one enables 0 -> 1 while this process has it enabled too and
 * disables it after this one did. Each sees only its own state. Skips (77) with fewer than
 * two devices. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define ELEMS (1u << 16)

static pid_t parent;

/* Retains both devices' primary contexts, device 0's current; a process of a machine with one
 * device leaves quietly (the parent skips). */
static void primaries(CUcontext *c0, CUcontext *c1)
{
    CUdevice d0, d1;
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2 && getpid() != parent) _exit(0);
    if (n < 2) t_skip("needs two devices, found %d", n);
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDeviceGet(&d1, 1));
    CHECK(cuDevicePrimaryCtxRetain(c0, d0));
    CHECK(cuDevicePrimaryCtxRetain(c1, d1));
    CHECK(cuCtxSetCurrent(*c0));
}

/* A process that enables 0 -> 1 and leaves with it enabled. */
static void leaver(void)
{
    CUcontext c0, c1;
    CHECK(cuInit(0));
    primaries(&c0, &c1);
    CHECK(cuCtxEnablePeerAccess(c1, 0));
    _exit(0);
}

/* A process that enables 0 -> 1 when told (the parent has it enabled then), and disables it
 * when told again (the parent has disabled its own by then). A parent that failed first
 * closes the pipe: this one leaves then, rather than keep its context (and the GPU's
 * memory) waiting for good (a GPU tier's rows that count the GPU's processes failed so). */
static void sharer(int go, int done)
{
    CUcontext c0, c1;
    char c;
    CHECK(cuInit(0));
    primaries(&c0, &c1);
    if (!t_read_all(go, &c, 1)) _exit(1);
    CHECK(cuCtxEnablePeerAccess(c1, 0));
    t_write_all(done, "e", 1);
    if (!t_read_all(go, &c, 1)) _exit(1);
    CHECK(cuCtxDisablePeerAccess(c1));
    EXPECT(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    _exit(0);
}

static void wait_ok(pid_t p, const char *who)
{
    int st = 0;
    REQUIRE(waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the %s process failed", who);
}

/* Device 1's kernel copies device 0's pattern into device 1's memory. */
static void peer_read(CUcontext c0, CUcontext c1)
{
    CUdeviceptr src, dst;
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(&src, ELEMS * 4));
    CUmodule m0 = t_load_module("kernels.ptx");
    unsigned long long n = ELEMS;
    unsigned seed = 77;
    void *wargs[] = {&src, &n, &seed};
    CHECK(cuLaunchKernel(t_get_function(m0, "write_pattern"), 16, 1, 1, 256, 1, 1, 0, NULL, wargs,
                         NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&dst, ELEMS * 4));
    CUmodule m1 = t_load_module("kernels.ptx");
    unsigned long long bytes = ELEMS * 4ull;
    void *cargs[] = {&src, &dst, &bytes};
    CHECK(cuLaunchKernel(t_get_function(m1, "copy_u8"), 16, 1, 1, 256, 1, 1, 0, NULL, cargs, NULL));
    CHECK(cuCtxSynchronize());
    uint32_t *host = malloc(ELEMS * 4);
    CHECK(cuMemcpyDtoH(host, dst, ELEMS * 4));
    REQUIRE(t_pattern_mismatch(host, ELEMS * 4, seed) == SIZE_MAX,
            "device 1 read device 0's memory wrong");
    free(host);
    CHECK(cuMemFree(dst));
    CHECK(cuModuleUnload(m1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFree(src));
    CHECK(cuModuleUnload(m0));
    t_ok("a kernel on device 1 reads device 0's memory");
}

int main(void)
{
    t_init("peer", 120);
    parent = getpid();
    int go[2], done[2];
    REQUIRE(pipe(go) == 0 && pipe(done) == 0, "pipe");
    pid_t left = fork();
    REQUIRE(left >= 0, "fork");
    if (left == 0) leaver();
    wait_ok(left, "leaving");
    pid_t other = fork();
    REQUIRE(other >= 0, "fork");
    if (other == 0) {
        close(go[1]); /* the parent's end: its exit is this one's end of file */
        close(done[0]);
        sharer(go[0], done[1]);
    }
    close(go[0]);
    close(done[1]);

    CHECK(cuInit(0));
    CUcontext c0, c1;
    primaries(&c0, &c1);
    EXPECT(cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE);
    /* The current context as its own peer: driver 580 (two H200s) says unsupported. */
    EXPECT(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
    EXPECT(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    t_ok("flags, the current context and a disable of nothing refused");
    printf("disable with the current context as the peer: %s\n",
           t_errname(cuCtxDisablePeerAccess(c0)));
    CHECK(cuCtxEnablePeerAccess(c1, 0));
    t_ok("0 -> 1 enabled where another process left it enabled");
    EXPECT(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    t_ok("a second enable is refused");
    t_write_all(go[1], "g", 1);
    char c;
    REQUIRE(t_read_all(done[0], &c, 1) == 1, "no word from the other process");
    t_ok("another process enables the same pair meanwhile");
    CHECK(cuCtxSetCurrent(c1));
    EXPECT(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    CHECK(cuCtxEnablePeerAccess(c0, 0));
    t_ok("1 -> 0 is a pair of its own");
    peer_read(c0, c1);
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuCtxDisablePeerAccess(c1));
    EXPECT(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    t_ok("0 -> 1 disabled");
    t_write_all(go[1], "g", 1);
    wait_ok(other, "sharing");
    t_ok("the other process disables its own afterwards");

    /* Device 0's second context: no device is its own peer. */
    CUdevice d0, d1;
    CUcontext extra;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDeviceGet(&d1, 1));
    CHECK(cuCtxCreate(&extra, NULL, 0, d0));
    printf("enable between two contexts of one device: %s\n",
           t_errname(cuCtxEnablePeerAccess(c0, 0)));
    CHECK(cuCtxDestroy(extra));

    /* Peer access ends with its context: 1 -> 0 goes when device 1's primary is let go. */
    CHECK(cuDevicePrimaryCtxRelease(d1));
    CHECK(cuDevicePrimaryCtxRetain(&c1, d1));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuCtxEnablePeerAccess(c0, 0));
    CHECK(cuCtxDisablePeerAccess(c0));
    t_ok("a context let go and retained again starts without peer access");
    CHECK(cuDevicePrimaryCtxRelease(d1));
    CHECK(cuDevicePrimaryCtxRelease(d0));
    t_pass();
}
