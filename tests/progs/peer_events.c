/* peer_events: two devices' work ordered by events, in one process, as multi-GPU pipelines and
 * peer-to-peer benchmarks order it. Each round, device 0's stream sets a flag after a delay
 * and writes a pattern, then records an event; device 1's stream waits for that event (one of
 * the other device's context), copies the flag and the pattern over (peer copies on its own
 * stream), checks the pattern with a kernel and records an event of its own; device 0's
 * stream waits for that one and copies the flag back by unified address. Without the waits
 * the copies would find the flag unset (the delay is 20 ms). Also an event of device 0
 * synchronised and queried with device 1's context current, and each device's timing events
 * (their times are not printed: the output must be the same natively and through the shim).
 * Peer access is enabled where the devices have it (copies go either way). Skips (77) with
 * fewer than two devices. */
#include "tests/progs/common.h"

#include <stdio.h>

#define ELEMS (1u << 18)
#define ROUNDS 3

struct side {
    CUcontext ctx;
    CUstream st;
    CUmodule mod;
    CUfunction delay, write, check;
    CUdeviceptr flag, data, errors, back;
    CUevent done, t0, t1;
};

static void use(const struct side *s)
{
    CHECK(cuCtxSetCurrent(s->ctx));
}

/* Access from the current context to peer's memory, where the devices have it; 1 if so. */
static int enable_peer(CUdevice self, CUdevice other, CUcontext peer)
{
    int can = 0;
    CHECK(cuDeviceCanAccessPeer(&can, self, other));
    if (!can) return 0;
    CUresult r = cuCtxEnablePeerAccess(peer, 0);
    if (r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) CHECK(r);
    return 1;
}

int main(void)
{
    t_init("peer_events", 120);
    CHECK(cuInit(0));
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("needs two devices, found %d", n);
    struct side s[2];
    CUdevice dev[2];
    for (int d = 0; d < 2; d++) {
        CHECK(cuDeviceGet(&dev[d], d));
        CHECK(cuDevicePrimaryCtxRetain(&s[d].ctx, dev[d]));
        use(&s[d]);
        s[d].mod = t_load_module("kernels.ptx");
        s[d].delay = t_get_function(s[d].mod, "delay_set");
        s[d].write = t_get_function(s[d].mod, "write_pattern");
        s[d].check = t_get_function(s[d].mod, "check_pattern");
        CHECK(cuStreamCreate(&s[d].st, CU_STREAM_NON_BLOCKING));
        CHECK(cuMemAlloc(&s[d].flag, 4));
        CHECK(cuMemAlloc(&s[d].back, 4));
        CHECK(cuMemAlloc(&s[d].errors, 4));
        CHECK(cuMemAlloc(&s[d].data, ELEMS * 4));
        CHECK(cuEventCreate(&s[d].done, CU_EVENT_DISABLE_TIMING));
        CHECK(cuEventCreate(&s[d].t0, CU_EVENT_DEFAULT));
        CHECK(cuEventCreate(&s[d].t1, CU_EVENT_DEFAULT));
    }
    use(&s[0]);
    int peer01 = enable_peer(dev[0], dev[1], s[1].ctx);
    use(&s[1]);
    int peer10 = enable_peer(dev[1], dev[0], s[0].ctx);
    /* Whether the devices are peers is the machine's: on stderr, so that stdout is the same
     * on every machine (natively and through the shim on one machine, both are the same). */
    fprintf(stderr, "peer access 0->1 %d, 1->0 %d\n", peer01, peer10);

    unsigned long long cnt = ELEMS, delay_ns = 20000000ull;
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned value = 100u + r, seed = 7000u + r;
        /* Device 0: the flag, set late, and the pattern, then its event. */
        use(&s[0]);
        CHECK(cuMemsetD32Async(s[0].flag, 0, 1, s[0].st));
        CHECK(cuEventRecord(s[0].t0, s[0].st));
        void *dargs[] = {&s[0].flag, &value, &delay_ns};
        CHECK(cuLaunchKernel(s[0].delay, 1, 1, 1, 32, 1, 1, 0, s[0].st, dargs, NULL));
        void *wargs[] = {&s[0].data, &cnt, &seed};
        CHECK(cuLaunchKernel(s[0].write, 64, 1, 1, 256, 1, 1, 0, s[0].st, wargs, NULL));
        CHECK(cuEventRecord(s[0].t1, s[0].st));
        CHECK(cuEventRecord(s[0].done, s[0].st));
        /* Device 1: after device 0's event, the flag and the pattern over, checked there. */
        use(&s[1]);
        CHECK(cuEventRecord(s[1].t0, s[1].st));
        CHECK(cuStreamWaitEvent(s[1].st, s[0].done, 0));
        CHECK(cuMemcpyPeerAsync(s[1].flag, s[1].ctx, s[0].flag, s[0].ctx, 4, s[1].st));
        CHECK(cuMemcpyPeerAsync(s[1].data, s[1].ctx, s[0].data, s[0].ctx, ELEMS * 4, s[1].st));
        CHECK(cuMemsetD32Async(s[1].errors, 0, 1, s[1].st));
        void *cargs[] = {&s[1].data, &cnt, &seed, &s[1].errors};
        CHECK(cuLaunchKernel(s[1].check, 64, 1, 1, 256, 1, 1, 0, s[1].st, cargs, NULL));
        CHECK(cuEventRecord(s[1].t1, s[1].st));
        CHECK(cuEventRecord(s[1].done, s[1].st));
        /* Device 0 again: after device 1's event, the flag it copied, back by address. */
        use(&s[0]);
        CHECK(cuStreamWaitEvent(s[0].st, s[1].done, 0));
        CHECK(cuMemcpyAsync(s[0].back, s[1].flag, 4, s[0].st));
        /* Device 0's event, waited for from device 1's context. */
        use(&s[1]);
        CHECK(cuEventSynchronize(s[0].done));
        CHECK(cuEventQuery(s[0].done));
        CHECK(cuStreamSynchronize(s[1].st));
        unsigned flag1 = 0, errors = 1;
        CHECK(cuMemcpyDtoH(&flag1, s[1].flag, 4));
        CHECK(cuMemcpyDtoH(&errors, s[1].errors, 4));
        REQUIRE(flag1 == value,
                "round %u: device 1 copied flag %u, want %u (its wait did not wait)", r, flag1,
                value);
        REQUIRE(errors == 0, "round %u: %u words of the pattern wrong on device 1", r, errors);
        use(&s[0]);
        CHECK(cuStreamSynchronize(s[0].st));
        unsigned back = 0;
        CHECK(cuMemcpyDtoH(&back, s[0].back, 4));
        REQUIRE(back == value, "round %u: device 0 got %u back, want %u", r, back, value);
        float ms[2];
        for (int d = 0; d < 2; d++) {
            use(&s[d]);
            CHECK(cuEventElapsedTime(&ms[d], s[d].t0, s[d].t1));
            REQUIRE(ms[d] >= 0, "round %u: device %d's events %.3f ms apart", r, d, ms[d]);
        }
        printf("round %u: flag %u over and back, pattern checked\n", r, value);
    }
    t_ok("%d rounds of work ordered across two devices by events", ROUNDS);
    for (int d = 0; d < 2; d++) {
        use(&s[d]);
        CHECK(cuEventDestroy(s[d].done));
        CHECK(cuEventDestroy(s[d].t0));
        CHECK(cuEventDestroy(s[d].t1));
        CHECK(cuMemFree(s[d].flag));
        CHECK(cuMemFree(s[d].back));
        CHECK(cuMemFree(s[d].errors));
        CHECK(cuMemFree(s[d].data));
        CHECK(cuStreamDestroy(s[d].st));
        CHECK(cuModuleUnload(s[d].mod));
        CHECK(cuDevicePrimaryCtxRelease(dev[d]));
    }
    t_pass();
}
