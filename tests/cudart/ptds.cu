// ptds [threads]: built with --default-stream per-thread, so that stream 0 (the NULL
// stream) of each host thread is a stream of its own. Every thread runs an order-sensitive
// chain of kernels and copies on its default stream and synchronises only that stream,
// while the others do the same; cudaStreamPerThread names the same stream explicitly; and
// a blocking stream created by the thread does NOT wait for the default stream (the
// per-thread stream is non-synchronising, unlike the legacy one).
#include "common.h"
#include "../kernels/kernels.cu"

#if !defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "build with --default-stream per-thread"
#endif

static int n = 1 << 16;
static const int rounds = 20;

// Host model of the chain each thread runs: mul_add_i32(p, 3, t) then mul_add_i32(p, -1, r)
// for round r, in wrapping int arithmetic.
static int model(int v, int t, int r)
{
    unsigned x = (unsigned)v * 3u + (unsigned)t;
    return (int)(x * (unsigned)-1 + (unsigned)r);
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    CHECK(cudaSetDevice(0));
    size_t bytes = (size_t)n * sizeof(int);
    int *d, *h, *want = (int *)malloc(bytes);
    REQUIRE(want, "out of host memory");
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMallocHost(&h, bytes));
    for (int i = 0; i < n; i++)
        h[i] = want[i] = i ^ (t << 12);
    unsigned block = 256, grid = t_blocks_for((uint64_t)n, block);
    CHECK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, 0));
    for (int r = 0; r < rounds; r++) {
        mul_add_i32<<<grid, block>>>(d, 3, t, (unsigned long long)n);
        // The same per-thread stream, named explicitly.
        mul_add_i32<<<grid, block, 0, cudaStreamPerThread>>>(d, -1, r, (unsigned long long)n);
        CHECK_LAUNCH();
        for (int i = 0; i < n; i++)
            want[i] = model(want[i], t, r);
    }
    CHECK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    for (int i = 0; i < n; i++)
        REQUIRE(h[i] == want[i], "thread %d: [%d] = %d, expected %d", t, i, h[i], want[i]);
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(h));
    free(want);
    return NULL;
}

int main(int argc, char **argv)
{
    t_init("ptds", 300);
    int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    REQUIRE(nthreads > 0 && nthreads <= 64, "bad thread count '%s'", argv[1]);
    CHECK(cudaSetDevice(0));

    pthread_t th[64];
    for (int t = 0; t < nthreads; t++)
        REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0, "pthread_create");
    for (int t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    t_ok("%d threads, %d rounds each on their own default stream", nthreads, rounds);

    // A blocking stream does not wait for the per-thread default stream: a kernel on it can
    // observe the default stream's flag still unset. Only the ordering the runtime promises
    // is checked: after both streams are synchronised, both kernels have run.
    unsigned *flag, hflag[2];
    CHECK(cudaMalloc(&flag, 2 * sizeof(unsigned)));
    CHECK(cudaMemset(flag, 0, 2 * sizeof(unsigned)));
    CHECK(cudaStreamSynchronize(0)); // the memset is on the per-thread stream: unordered with s
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    delay_set<<<1, 1>>>(flag, 1u, 10000000ull);
    delay_set<<<1, 1, 0, s>>>(flag + 1, 2u, 0ull);
    CHECK_LAUNCH();
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    CHECK(cudaMemcpy(hflag, flag, sizeof(hflag), cudaMemcpyDeviceToHost));
    REQUIRE(hflag[0] == 1u && hflag[1] == 2u, "flags %u %u", hflag[0], hflag[1]);
    t_ok("a created stream and the per-thread stream both complete");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(flag));
    CHECK(cudaDeviceSynchronize());
    t_pass();
}
