/* hostfn_fault [DELAY_MS]: a host function whose touch of managed memory needs this client's
 * own server worker, while another client's call waits for every stream of the shared
 * context (tests/hostfn_gate.sh). A kernel writes 41 into a managed allocation after
 * DELAY_MS (default 2000); a host function queued behind it on the same stream reads that
 * and writes 777 beside it; once both are queued it prints "held", waits 300 ms, prefetches
 * the allocation to the host on the NULL stream (through the shim: a pull after all of the
 * client's work, the first, for which the server makes a stream of its own), synchronises
 * and checks what everyone saw.
 *
 * Through mpsshim, the host function's page fault is served by the client's worker: were the
 * other client's call (unregistering host memory, say) let into the driver while this
 * client's stream is held on its host function, it would wait there for that stream, the
 * worker would be held behind it making the stream, and neither would ever go on (found by
 * tests/managed_kill.sh on an H200). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define host(p) ((unsigned *)(uintptr_t)(p)) /* managed memory's host view: the same address */

struct seen {
    unsigned *arr, got;
};

/* Runs on s between the kernel and the prefetch: may use memory attached to s. */
static void CUDA_CB between(void *arg)
{
    struct seen *sn = arg;
    sn->got = sn->arr[0];
    sn->arr[1] = 777;
}

int main(int argc, char **argv)
{
    t_init("hostfn_fault", 60);
    unsigned long long delay_ms = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000;
    REQUIRE(delay_ms >= 1 && delay_ms <= 20000, "usage: hostfn_fault [DELAY_MS]");
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUfunction delay = t_get_function(t_load_module("kernels.ptx"), "delay_set");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr m;
    CHECK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuStreamAttachMemAsync(s, m, 0, CU_MEM_ATTACH_SINGLE));
    CHECK(cuStreamSynchronize(s));
    host(m)[0] = 40;
    host(m)[1] = 1;
    struct seen sn = {host(m), 0};
    unsigned v = 41;
    unsigned long long ns = delay_ms * 1000000ull;
    void *params[] = {&m, &v, &ns};
    CHECK(cuLaunchKernel(delay, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CHECK(cuLaunchHostFunc(s, between, &sn));
    printf("held\n");
    fflush(stdout);
    usleep(300 * 1000);
    CUmemLocation to_host = {.type = CU_MEM_LOCATION_TYPE_HOST};
    CHECK(cuMemPrefetchAsync_v2(m, 4096, to_host, 0, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamSynchronize(NULL));
    REQUIRE(sn.got == 41 && host(m)[0] == 41 && host(m)[1] == 777,
            "the host function saw %u; then %u %u", sn.got, host(m)[0], host(m)[1]);
    t_ok("a host function's page fault was served while another client's call waited for "
         "every stream");
    CHECK(cuMemFree(m));
    CHECK(cuStreamDestroy(s));
    t_pass();
}
