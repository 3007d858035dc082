/* coalesce_quiet: a program that launches a kernel and then waits for it with no CUDA call
 * at all, polling a word of its pinned host memory that the kernel writes (as programs that
 * hand results through mapped memory do). Through a server that lets launches go unrung
 * (server/core/coalesce.c) nothing the program does rings for the launch: the server must still
 * replay it. 300 rounds on two streams, each kernel writing its round's number; the write
 * must be seen within 10 s (a liveness bound, not a timing: natively it is microseconds).
 * Then 100 rounds of asynchronous copies, which may be left unrung too (CHAN_RF_GPU_WORK):
 * the round's number from pageable memory to the device (its data inline), from there into
 * pinned memory, polled the same way. Same output natively and through the shim. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <time.h>

#define ROUNDS 300

int main(void)
{
    t_init("coalesce_quiet", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction set = t_get_function(mod, "delay_set");
    volatile unsigned *flag;
    CHECK(cuMemHostAlloc((void **)&flag, 2 * sizeof(unsigned), CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr dflag;
    CHECK(cuMemHostGetDevicePointer(&dflag, (void *)flag, 0));
    CUstream s[2];
    CHECK(cuStreamCreate(&s[0], CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s[1], CU_STREAM_NON_BLOCKING));
    flag[0] = flag[1] = 0;
    for (unsigned round = 1; round <= ROUNDS; round++) {
        int k = round & 1;
        CUdeviceptr where = dflag + (CUdeviceptr)k * sizeof(unsigned);
        unsigned value = round;
        unsigned long long ns = 0;
        void *params[] = {&where, &value, &ns};
        CHECK(cuLaunchKernel(set, 1, 1, 1, 1, 1, 1, 0, s[k], params, NULL));
        /* No CUDA call until the write is seen. */
        double give_up = t_now_s() + 10.0;
        while (flag[k] != round)
            REQUIRE(t_now_s() < give_up, "round %u: the kernel's write not seen in 10 s", round);
    }
    t_ok("%d launches, each waited for by polling mapped memory only", ROUNDS);
    CUdeviceptr dword;
    CHECK(cuMemAlloc(&dword, sizeof(unsigned)));
    for (unsigned round = 1; round <= 100; round++) {
        unsigned value = ROUNDS + round; /* pageable: goes inline, in the record */
        CHECK(cuMemcpyHtoDAsync(dword, &value, sizeof(value), s[0]));
        CHECK(cuMemcpyDtoHAsync((void *)&flag[0], dword, sizeof(unsigned), s[0]));
        /* Natively the pageable copy may return before its bytes are read: it has been staged
         * by then (as the driver promises), so `value` may change; it does not here. */
        double give_up = t_now_s() + 10.0;
        while (flag[0] != ROUNDS + round)
            REQUIRE(t_now_s() < give_up, "copy round %u: the copy not seen in 10 s", round);
    }
    t_ok("100 pairs of asynchronous copies, each waited for by polling pinned memory only");
    CHECK(cuMemFree(dword));
    CHECK(cuStreamSynchronize(s[0]));
    CHECK(cuStreamSynchronize(s[1]));
    CHECK(cuStreamDestroy(s[0]));
    CHECK(cuStreamDestroy(s[1]));
    CHECK(cuMemFreeHost((void *)flag));
    t_pass();
}
