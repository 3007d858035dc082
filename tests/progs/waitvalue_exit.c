/* waitvalue_exit [--batch] [--kill | --hold | --hold-host | --hold-hostfn | --hold-node]: leaves
 * (exits, or is killed with --kill) while a stream of its own waits for a value that nothing
 * will ever write (cuStreamWaitValue32 on its own device memory, or with --batch the same
 * waits in one cuStreamBatchMemOp), with work queued behind the wait. With --hold it prints "ready"
 * then waits to be killed (tests/waitvalue_twin.sh, tests/codegate.sh); --hold-host holds a stream
 * the same way on a word of its pinned host memory, --hold-hostfn with a host function that never
 * returns, --hold-node with a graph whose host node never returns (tests/codegate.sh: every wait
 * only a client can end). Natively the process's context dies with it; through the shim, the server
 * must still release it (the CI tier checks that the client count and the device memory go back,
 * and that quit works). Before that, a wait no value can satisfy is refused (through the shim only:
 * natively it would block for ever). */
#include "tests/progs/common.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Enqueues waits on 32 and 64-bit words for v32 and v64: single waits, or one batch. */
static void waits(CUstream s, CUdeviceptr w32, uint32_t v32, unsigned f32, CUdeviceptr w64,
                  uint64_t v64, unsigned f64, int batch)
{
    if (!batch) {
        CHECK(cuStreamWaitValue32(s, w32, v32, f32));
        if (w64) CHECK(cuStreamWaitValue64(s, w64, v64, f64));
        return;
    }
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[0].waitValue.address = w32;
    ops[0].waitValue.value = v32;
    ops[0].waitValue.flags = f32;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    ops[1].waitValue.address = w64;
    ops[1].waitValue.value64 = v64;
    ops[1].waitValue.flags = f64;
    CHECK(cuStreamBatchMemOp(s, w64 ? 2 : 1, ops, 0));
}

static void CUDA_CB never_returns(void *arg)
{
    (void)arg;
    for (;;)
        pause();
}

/* Holds a new stream of its own with a wait that only this process could end, per flag. */
static void hold_other(int argc, char **argv)
{
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (t_has_flag(argc, argv, "--hold-host")) {
        unsigned *word;
        CHECK(cuMemHostAlloc((void **)&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
        *word = 0;
        CUdeviceptr dword;
        CHECK(cuMemHostGetDevicePointer(&dword, word, 0));
        CHECK(cuStreamWaitValue32(s, dword, 1, CU_STREAM_WAIT_VALUE_EQ));
    } else if (t_has_flag(argc, argv, "--hold-hostfn")) {
        CHECK(cuLaunchHostFunc(s, never_returns, NULL));
    } else {
        CUgraph g;
        CUgraphNode n;
        CUgraphExec x;
        CUDA_HOST_NODE_PARAMS hp = {.fn = never_returns, .userData = NULL};
        CHECK(cuGraphCreate(&g, 0));
        CHECK(cuGraphAddHostNode(&n, g, NULL, 0, &hp));
        CHECK(cuGraphInstantiate(&x, g, 0));
        CHECK(cuGraphLaunch(x, s));
    }
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    t_init("waitvalue_exit", 60);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    if (t_has_flag(argc, argv, "--hold-host") || t_has_flag(argc, argv, "--hold-hostfn") ||
        t_has_flag(argc, argv, "--hold-node"))
        hold_other(argc, argv);
    CUdeviceptr flag, data;
    CHECK(cuMemAlloc(&flag, 4096));
    CHECK(cuMemAlloc(&data, 1 << 20));
    CHECK(cuMemsetD32(flag, 0, 1024));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int batch = t_has_flag(argc, argv, "--batch");
    /* (*flag & 0) != 0 never holds: refused, reported by the next synchronisation. */
    waits(s, flag, 0, CU_STREAM_WAIT_VALUE_AND, 0, 0, 0, batch);
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_VALUE);
    t_ok("a wait no value can satisfy is refused");
    waits(s, flag, 1, CU_STREAM_WAIT_VALUE_EQ, flag + 8, 5, CU_STREAM_WAIT_VALUE_GEQ, batch);
    CHECK(cuMemsetD32Async(data, 7, (1 << 20) / 4, s));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    t_ok("leaving with the stream waiting");
    if (t_has_flag(argc, argv, "--kill")) kill(getpid(), SIGKILL);
    if (t_has_flag(argc, argv, "--hold")) {
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    t_pass();
}
