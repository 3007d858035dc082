/* acct_limits ctxlimit|ipc: what a client's device memory limit covers besides its
 * allocations (issue 34: S9 and S5's IPC part). Through the shim only, under a limit
 * (tests/accounts.sh sets it): natively nothing is limited.
 *   ctxlimit  under a 1 MiB limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1M): a stack of 1 MiB a
 *             thread and an 8 GiB heap cost far more than the limit and are refused with
 *             CUDA_ERROR_OUT_OF_MEMORY, the limits reading back as before; a heap 256 KiB
 *             over its start is taken and counted: 900 KiB more no longer fit, 700 KiB do.
 *   ipc       A (no limit) exports 4 blocks of 1 MiB; B (forked, limited to 2 MiB) opens
 *             them: two opens fit, the third is refused with CUDA_ERROR_OUT_OF_MEMORY; once
 *             A has freed them all, B still pays for the two it holds; one closed, another
 *             opens. */
#include "tests/progs/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BLOCKS 4
#define MiB (1u << 20)

static void ctxlimit(void)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    size_t stack0, heap0;
    CHECK(cuCtxGetLimit(&stack0, CU_LIMIT_STACK_SIZE));
    CHECK(cuCtxGetLimit(&heap0, CU_LIMIT_MALLOC_HEAP_SIZE));
    EXPECT(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, MiB), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8ull << 30), CUDA_ERROR_OUT_OF_MEMORY);
    size_t v;
    CHECK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    REQUIRE(v == stack0, "the stack limit changed to %zu", v);
    CHECK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
    REQUIRE(v == heap0, "the heap limit changed to %zu", v);
    t_ok("a 1 MiB stack a thread and an 8 GiB heap refused under a 1 MiB limit");
    CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap0 + 256 * 1024));
    CUdeviceptr d;
    EXPECT(cuMemAlloc(&d, 900 * 1024), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAlloc(&d, 700 * 1024));
    t_ok("a heap 256 KiB larger is counted against the limit");
    CHECK(cuMemFree(d));
    CHECK(cuDevicePrimaryCtxRelease(dev));
}

static int to_b[2], to_a[2];

static void ipc_b(void)
{
    setenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=2M", 1);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUipcMemHandle h[BLOCKS];
    REQUIRE(t_read_all(to_b[0], h, sizeof(h)), "B: no handles");
    CUdeviceptr p[BLOCKS];
    CHECK(cuIpcOpenMemHandle(&p[0], h[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK(cuIpcOpenMemHandle(&p[1], h[1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    EXPECT(cuIpcOpenMemHandle(&p[2], h[2], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
           CUDA_ERROR_OUT_OF_MEMORY);
    t_ok("B: two 1 MiB opens fit a 2 MiB limit, a third does not");
    char c = 'o';
    t_write_all(to_a[1], &c, 1);
    REQUIRE(t_read_all(to_b[0], &c, 1) && c == 'f', "B: A did not free");
    CUdeviceptr extra;
    EXPECT(cuMemAlloc(&extra, MiB), CUDA_ERROR_OUT_OF_MEMORY);
    t_ok("B: what it opened still counts once the exporter freed it");
    CHECK(cuIpcCloseMemHandle(p[1]));
    CHECK(cuIpcCloseMemHandle(p[0]));
    CHECK(cuMemAlloc(&extra, MiB));
    CHECK(cuMemFree(extra));
    t_ok("B: closed, the room is back");
    CHECK(cuDevicePrimaryCtxRelease(dev));
    exit(0);
}

static void ipc(void)
{
    REQUIRE(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) ipc_b();
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr p[BLOCKS];
    CUipcMemHandle h[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        CHECK(cuMemAlloc(&p[i], MiB));
        CHECK(cuIpcGetMemHandle(&h[i], p[i]));
    }
    t_write_all(to_b[1], h, sizeof(h));
    char c = 0;
    REQUIRE(t_read_all(to_a[0], &c, 1) && c == 'o', "A: B did not open");
    for (int i = 0; i < BLOCKS; i++)
        CHECK(cuMemFree(p[i]));
    c = 'f';
    t_write_all(to_b[1], &c, 1);
    int sb = 0;
    REQUIRE(waitpid(b, &sb, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "B failed (status %d)", sb);
    CHECK(cuDevicePrimaryCtxRelease(dev));
}

int main(int argc, char **argv)
{
    t_init("acct_limits", 60);
    REQUIRE(argc == 2 && (!strcmp(argv[1], "ctxlimit") || !strcmp(argv[1], "ipc")),
            "usage: acct_limits ctxlimit|ipc");
    if (!strcmp(argv[1], "ctxlimit"))
        ctxlimit();
    else
        ipc();
    t_pass();
}
