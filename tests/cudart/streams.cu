// streams: the runtime's streams and events. Four streams (two blocking, two non-blocking)
// each copy pinned memory in, run an order-sensitive kernel chain and copy out
// asynchronously; a stream waits on another's event and copies its result; the legacy
// default stream waits for blocking streams; events are queried, synchronised and timed.
#include "common.h"
#include "../kernels/kernels.cu"

#define NSTREAMS 4

// mul_add_i32 applied (mul, add) then (mul2, add2) to v, in int arithmetic that wraps.
static int chain(int v, int mul, int add, int mul2, int add2)
{
    unsigned x = (unsigned)v * (unsigned)mul + (unsigned)add;
    return (int)(x * (unsigned)mul2 + (unsigned)add2);
}

int main(int argc, char **argv)
{
    t_init("streams", 300);
    int n = argc > 1 ? atoi(argv[1]) : 1 << 18;
    REQUIRE(n > 0, "bad element count '%s'", argv[1]);
    size_t bytes = (size_t)n * sizeof(int);
    CHECK(cudaSetDevice(0));

    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    REQUIRE(greatest <= least, "priority range %d..%d", least, greatest);
    cudaStream_t st[NSTREAMS];
    CHECK(cudaStreamCreate(&st[0]));
    CHECK(cudaStreamCreateWithPriority(&st[1], cudaStreamDefault, greatest));
    CHECK(cudaStreamCreateWithFlags(&st[2], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithPriority(&st[3], cudaStreamNonBlocking, least));
    for (int s = 0; s < NSTREAMS; s++) {
        unsigned flags = 99;
        int prio = 99;
        CHECK(cudaStreamGetFlags(st[s], &flags));
        CHECK(cudaStreamGetPriority(st[s], &prio));
        REQUIRE(flags == (s < 2 ? cudaStreamDefault : cudaStreamNonBlocking), "stream %d flags %u",
                s, flags);
        REQUIRE(prio >= greatest && prio <= least, "stream %d priority %d", s, prio);
    }
    t_ok("%d streams with flags and priorities", NSTREAMS);

    int *host[NSTREAMS], *out[NSTREAMS], *dev[NSTREAMS];
    cudaEvent_t done[NSTREAMS];
    for (int s = 0; s < NSTREAMS; s++) {
        CHECK(cudaMallocHost(&host[s], bytes));
        CHECK(cudaMallocHost(&out[s], bytes));
        CHECK(cudaMalloc(&dev[s], bytes));
        CHECK(cudaEventCreateWithFlags(&done[s], cudaEventDisableTiming));
        for (int i = 0; i < n; i++) {
            host[s][i] = i * (s + 1) - 7;
            out[s][i] = 0;
        }
    }
    unsigned block = 256, grid = t_blocks_for((uint64_t)n, block);
    for (int s = 0; s < NSTREAMS; s++) {
        CHECK(cudaMemcpyAsync(dev[s], host[s], bytes, cudaMemcpyHostToDevice, st[s]));
        mul_add_i32<<<grid, block, 0, st[s]>>>(dev[s], 3 + s, s, (unsigned long long)n);
        CHECK_LAUNCH();
        mul_add_i32<<<grid, block, 0, st[s]>>>(dev[s], 5, -(s + 1), (unsigned long long)n);
        CHECK_LAUNCH();
        CHECK(cudaMemcpyAsync(out[s], dev[s], bytes, cudaMemcpyDeviceToHost, st[s]));
        CHECK(cudaEventRecord(done[s], st[s]));
    }
    for (int s = 0; s < NSTREAMS; s++) {
        CHECK(cudaEventSynchronize(done[s]));
        CHECK(cudaEventQuery(done[s]));
        for (int i = 0; i < n; i++) {
            int want = chain(host[s][i], 3 + s, s, 5, -(s + 1));
            REQUIRE(out[s][i] == want, "stream %d: out[%d] = %d, expected %d", s, i, out[s][i],
                    want);
        }
    }
    t_ok("copy in, two kernels, copy out on each stream, in order");

    // Stream 3 waits for stream 0's event, then copies stream 0's result and adds to it.
    cudaEvent_t ready;
    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    delay_set<<<1, 1, 0, st[0]>>>((unsigned *)dev[0], 12345u, 20000000ull); // 20 ms busy
    CHECK_LAUNCH();
    CHECK(cudaEventRecord(ready, st[0]));
    CHECK(cudaStreamWaitEvent(st[3], ready, 0));
    CHECK(cudaMemcpyAsync(dev[3], dev[0], bytes, cudaMemcpyDeviceToDevice, st[3]));
    mul_add_i32<<<grid, block, 0, st[3]>>>(dev[3], 1, 1, (unsigned long long)n);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(out[3], dev[3], bytes, cudaMemcpyDeviceToHost, st[3]));
    CHECK(cudaStreamSynchronize(st[3]));
    REQUIRE(out[3][0] == 12345 + 1, "out[0] = %d: the copy did not wait for the event", out[3][0]);
    for (int i = 1; i < n; i++)
        REQUIRE(out[3][i] == (int)((unsigned)out[0][i] + 1u), "out[%d] = %d, expected %d", i,
                out[3][i], (int)((unsigned)out[0][i] + 1u));
    t_ok("cudaStreamWaitEvent orders a non-blocking stream after another");

    // The legacy default stream waits for the blocking streams' earlier work.
    delay_set<<<1, 1, 0, st[1]>>>((unsigned *)dev[1], 777u, 20000000ull);
    CHECK_LAUNCH();
    unsigned flag = 0;
    CHECK(cudaMemcpy(&flag, dev[1], sizeof(flag), cudaMemcpyDeviceToHost));
    REQUIRE(flag == 777u, "flag = %u: the legacy stream did not wait", flag);
    t_ok("legacy default stream waits for a blocking stream");

    // Timing events: the elapsed time is measured (not printed: it varies).
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0, st[2]));
    delay_set<<<1, 1, 0, st[2]>>>((unsigned *)dev[2], 1u, 5000000ull);
    CHECK_LAUNCH();
    CHECK(cudaEventRecord(t1, st[2]));
    CHECK(cudaEventSynchronize(t1));
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    REQUIRE(ms >= 0.0f, "elapsed %g ms", (double)ms);
    cudaError_t q = cudaStreamQuery(st[2]);
    REQUIRE(q == cudaSuccess, "cudaStreamQuery after the last event completed: %s",
            cudaGetErrorName(q));
    t_ok("event timing and stream query");

    CHECK(cudaDeviceSynchronize());
    for (int s = 0; s < NSTREAMS; s++) {
        CHECK(cudaEventDestroy(done[s]));
        CHECK(cudaStreamDestroy(st[s]));
        CHECK(cudaFree(dev[s]));
        CHECK(cudaFreeHost(host[s]));
        CHECK(cudaFreeHost(out[s]));
    }
    CHECK(cudaEventDestroy(ready));
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));
    t_ok("destroyed");
    t_pass();
}
