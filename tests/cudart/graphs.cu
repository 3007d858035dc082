// graphs: stream capture and CUDA graphs through the runtime. On a non-blocking stream, in
// the global and then the thread-local capture mode: a copy of the input (cudaMemcpyAsync
// device to device), kernels, another device-to-device copy and a copy back to pinned
// memory are captured, instantiated and launched 100 times, the input changed by a copy
// from pinned memory (outside the capture) before each launch; nothing captured runs
// before a launch. The node count is printed: one node per kernel and per copy.
#include "common.h"
#include "../kernels/kernels.cu"

#define N 4096 // words per buffer
#define LAUNCHES 100

static unsigned *g_in, *g_out; // pinned
static unsigned *d_in, *d_a, *d_b;

static size_t node_count(cudaGraph_t g)
{
    size_t n = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &n));
    return n;
}

// Captures in, a = in * 2 + 1, b = a + 1, out = b on s in the given mode.
static cudaGraph_t capture(cudaStream_t s, cudaStreamCaptureMode mode, const char *name)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamIsCapturing(s, &st));
    REQUIRE(st == cudaStreamCaptureStatusNone, "%s: capturing before the capture", name);
    CHECK(cudaStreamBeginCapture(s, mode));
    CHECK(cudaStreamIsCapturing(s, &st));
    REQUIRE(st == cudaStreamCaptureStatusActive, "%s: not capturing", name);
    unsigned blocks = t_blocks_for(N, 256);
    CHECK(cudaMemcpyAsync(d_a, d_in, N * sizeof(unsigned), cudaMemcpyDeviceToDevice, s));
    mul_add_i32<<<blocks, 256, 0, s>>>((int *)d_a, 2, 1, (unsigned long long)N);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(d_b, d_a, N * sizeof(unsigned), cudaMemcpyDeviceToDevice, s));
    inc_u32<<<blocks, 256, 0, s>>>(d_b, (unsigned long long)N);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(g_out, d_b, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    cudaGraph_t g = NULL;
    CHECK(cudaStreamEndCapture(s, &g));
    REQUIRE(g != NULL, "%s: no graph", name);
    CHECK(cudaStreamIsCapturing(s, &st));
    REQUIRE(st == cudaStreamCaptureStatusNone, "%s: still capturing after the capture", name);
    t_ok("%s capture: %zu nodes", name, node_count(g));
    return g;
}

// Instantiates g and launches it LAUNCHES times on s, with a new input each time.
static void replay(cudaGraph_t g, cudaStream_t s, unsigned seed, const char *name)
{
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (unsigned it = 0; it < LAUNCHES; it++) {
        for (unsigned i = 0; i < N; i++)
            g_in[i] = seed + it * 5 + i;
        memset(g_out, 0, N * sizeof(unsigned));
        CHECK(cudaMemcpyAsync(d_in, g_in, N * sizeof(unsigned), cudaMemcpyHostToDevice, s));
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        for (unsigned i = 0; i < N; i++)
            REQUIRE(g_out[i] == (seed + it * 5 + i) * 2 + 2, "%s launch %u: word %u is %u, want %u",
                    name, it, i, g_out[i], (seed + it * 5 + i) * 2 + 2);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    t_ok("%s capture: %d launches, each with its new input", name, LAUNCHES);
}

int main()
{
    t_init("graphs", 300);
    CHECK(cudaSetDevice(0));
    CHECK(cudaMallocHost((void **)&g_in, N * sizeof(unsigned)));
    CHECK(cudaMallocHost((void **)&g_out, N * sizeof(unsigned)));
    CHECK(cudaMalloc((void **)&d_in, N * sizeof(unsigned)));
    CHECK(cudaMalloc((void **)&d_a, N * sizeof(unsigned)));
    CHECK(cudaMalloc((void **)&d_b, N * sizeof(unsigned)));
    CHECK(cudaMemset(d_a, 0, N * sizeof(unsigned)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaGraph_t g = capture(s, cudaStreamCaptureModeGlobal, "global");
    unsigned back = 1;
    CHECK(cudaMemcpy(&back, d_a, sizeof back, cudaMemcpyDeviceToHost));
    REQUIRE(back == 0, "captured work ran before a launch: %u", back);
    t_ok("nothing captured ran before a launch");
    replay(g, s, 1, "global");
    g = capture(s, cudaStreamCaptureModeThreadLocal, "thread-local");
    replay(g, s, 1000, "thread-local");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_a));
    CHECK(cudaFree(d_b));
    CHECK(cudaFreeHost(g_in));
    CHECK(cudaFreeHost(g_out));
    t_pass();
}
