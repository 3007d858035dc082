// graphnodes: graph nodes of the generic form and host nodes through the runtime (cudart
// 12.3+ reaches cuGraphAddNode, cuGraphNodeSetParams and cuGraphExecNodeSetParams). A graph
// [memset a = 5] -> [kernel a = a * mul + add] -> [host node] -> [copy a to pinned memory]
// made with cudaGraphAddNode (the host node with cudaGraphAddHostNode) is launched; its
// kernel node is set with cudaGraphNodeSetParams and then in the exec with
// cudaGraphExecNodeSetParams, each launch checked. A capture with a cudaLaunchHostFunc
// between a kernel and a copy makes a host node, which runs at each replay after the kernel.
#include "common.h"
#include "../kernels/kernels.cu"

#include <atomic>

#define N 1024 // words per buffer

static std::atomic<int> host_calls;
static std::atomic<int> bad_order;
static unsigned *g_out; // pinned
static unsigned *d_a;

static void CUDART_CB count(void *user)
{
    (void)user;
    host_calls++;
}

// Runs between the kernel and the copy of the capture: the copy's destination is not yet
// written, and what it held from the launch before is the value expected then.
static void CUDART_CB between(void *prev)
{
    if (g_out[0] != *(unsigned *)prev) bad_order++;
    host_calls++;
}

static cudaGraphNodeParams kernel_params(void **args)
{
    cudaGraphNodeParams p = {};
    memset(static_cast<void *>(&p), 0, sizeof p); // every byte: = {} zeroes one union member
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = (void *)mul_add_i32;
    p.kernel.gridDim = dim3(t_blocks_for(N, 128));
    p.kernel.blockDim = dim3(128);
    p.kernel.kernelParams = args;
    return p;
}

static void launch_check(cudaGraphExec_t x, cudaStream_t s, unsigned want, const char *what)
{
    memset(g_out, 0, N * sizeof(unsigned));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    for (unsigned i = 0; i < N; i++)
        REQUIRE(g_out[i] == want, "%s: word %u is %u, want %u", what, i, g_out[i], want);
    t_ok("%s: every word %u", what, want);
}

static void generic(cudaStream_t s)
{
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t ms, k, h, cp;
    cudaGraphNodeParams p = {};
    memset(static_cast<void *>(&p), 0, sizeof p); // every byte: = {} zeroes one union member
    p.type = cudaGraphNodeTypeMemset;
    p.memset.dst = d_a;
    p.memset.value = 5;
    p.memset.elementSize = 4;
    p.memset.width = N;
    p.memset.height = 1;
    CHECK(cudaGraphAddNode(&ms, g, NULL, NULL, 0, &p));
    int *a = (int *)d_a, mul = 3, add = 1;
    unsigned long long n = N;
    void *args[] = {&a, &mul, &add, &n};
    p = kernel_params(args);
    CHECK(cudaGraphAddNode(&k, g, &ms, NULL, 1, &p));
    cudaHostNodeParams hp = {count, NULL};
    CHECK(cudaGraphAddHostNode(&h, g, &k, 1, &hp));
    memset(static_cast<void *>(&p), 0, sizeof p); // every byte: = {} zeroes one union member
    p.type = cudaGraphNodeTypeMemcpy;
    p.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(d_a, N * sizeof(unsigned), N, 1);
    p.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(g_out, N * sizeof(unsigned), N, 1);
    p.memcpy.copyParams.extent = make_cudaExtent(N * sizeof(unsigned), 1, 1);
    p.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaGraphAddNode(&cp, g, &h, NULL, 1, &p));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    t_ok("cudaGraphAddNode and cudaGraphAddHostNode: %zu nodes", nodes);

    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    launch_check(x, s, 5 * 3 + 1, "graph of cudaGraphAddNode nodes");
    mul = 2;
    add = 3;
    p = kernel_params(args);
    CHECK(cudaGraphNodeSetParams(k, &p));
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphInstantiate(&x, g, 0));
    launch_check(x, s, 5 * 2 + 3, "after cudaGraphNodeSetParams");
    mul = 5;
    add = 0;
    p = kernel_params(args);
    CHECK(cudaGraphExecNodeSetParams(x, k, &p));
    launch_check(x, s, 5 * 5, "after cudaGraphExecNodeSetParams");
    t_ok("the host node ran at each launch: %d", host_calls.load());
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
}

static void captured(cudaStream_t s)
{
    host_calls = 0;
    static unsigned prev;
    CHECK(cudaMemsetAsync(d_a, 0, N * sizeof(unsigned), s));
    CHECK(cudaStreamSynchronize(s));
    memset(g_out, 0, N * sizeof(unsigned));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    inc_u32<<<t_blocks_for(N, 256), 256, 0, s>>>(d_a, (unsigned long long)N);
    CHECK_LAUNCH();
    CHECK(cudaLaunchHostFunc(s, between, &prev));
    CHECK(cudaMemcpyAsync(g_out, d_a, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    cudaGraph_t g = NULL;
    CHECK(cudaStreamEndCapture(s, &g));
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    t_ok("a capture with a host function: %zu nodes", nodes);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (unsigned i = 1; i <= 3; i++) {
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        for (unsigned j = 0; j < N; j++)
            REQUIRE(g_out[j] == i, "replay %u: word %u is %u", i, j, g_out[j]);
        prev = i;
    }
    REQUIRE(bad_order.load() == 0, "a host function ran out of order");
    t_ok("3 replays, the host function between the kernel and the copy each time: %d",
         host_calls.load());
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
}

int main()
{
    t_init("graphnodes", 300);
    CHECK(cudaSetDevice(0));
    CHECK(cudaMallocHost((void **)&g_out, N * sizeof(unsigned)));
    CHECK(cudaMalloc((void **)&d_a, N * sizeof(unsigned)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    generic(s);
    captured(s);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d_a));
    CHECK(cudaFreeHost(g_out));
    t_pass();
}
