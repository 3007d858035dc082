// capturealloc: the runtime's stream-ordered allocator in a stream capture, as PyTorch's
// cudaMallocAsync backend uses it in CUDA graphs. cudaStreamBeginCapture, cudaMallocAsync,
// a kernel writing the memory, cudaMemcpyAsync into pinned memory, cudaFreeAsync,
// cudaStreamEndCapture: a graph whose allocation and free are nodes, instantiated and
// launched three times. Then an allocation captured without its free: the launch leaves it
// allocated, it is read and freed outside the graph with cudaFreeAsync.
#include "common.h"
#include "../kernels/kernels.cu"

#define N 4096 // words

static unsigned *g_pin; // pinned, N words: the graph's copies land here

static void check_words(unsigned v, const char *what)
{
    for (int i = 0; i < N; i++)
        REQUIRE(g_pin[i] == v, "%s: word %d is 0x%x, want 0x%x", what, i, g_pin[i], v);
}

static size_t count_type(cudaGraph_t g, cudaGraphNodeType t)
{
    cudaGraphNode_t nodes[16];
    size_t n = 16, k = 0;
    CHECK(cudaGraphGetNodes(g, nodes, &n));
    for (size_t i = 0; i < n && i < 16; i++) {
        cudaGraphNodeType got;
        CHECK(cudaGraphNodeGetType(nodes[i], &got));
        k += got == t;
    }
    return k;
}

int main()
{
    t_init("capturealloc", 120);
    CHECK(cudaSetDevice(0));
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    if (!supported) t_skip("device 0 has no memory pools");
    CHECK(cudaMallocHost((void **)&g_pin, N * sizeof(unsigned)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    unsigned *p = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync((void **)&p, N * sizeof(unsigned), s));
    REQUIRE(p != NULL, "a captured cudaMallocAsync gave a NULL pointer");
    fill_u32<<<t_blocks_for(N, 256), 256, 0, s>>>(p, 0x41, (unsigned long long)N);
    CHECK_LAUNCH();
    inc_u32<<<t_blocks_for(N, 256), 256, 0, s>>>(p, (unsigned long long)N);
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(g_pin, p, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(p, s));
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    t_ok("captured: %zu allocation node, %zu kernel nodes, %zu memcpy node, %zu free node",
         count_type(g, cudaGraphNodeTypeMemAlloc), count_type(g, cudaGraphNodeTypeKernel),
         count_type(g, cudaGraphNodeTypeMemcpy), count_type(g, cudaGraphNodeTypeMemFree));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        memset(g_pin, 0, N * sizeof(unsigned));
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        check_words(0x42, "after a launch");
        t_ok("launch %d: every word 0x42", i);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));

    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync((void **)&p, N * sizeof(unsigned), s));
    fill_u32<<<t_blocks_for(N, 256), 256, 0, s>>>(p, 0x51, (unsigned long long)N);
    CHECK_LAUNCH();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaMemcpyAsync(g_pin, p, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    check_words(0x51, "left allocated by the launch");
    t_ok("left allocated by the launch: read and freed outside the graph");
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(g_pin));
    t_pass();
}
