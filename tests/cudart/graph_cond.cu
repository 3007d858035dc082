// graph_cond: CUDA graph conditional nodes through the runtime (cudart reaches
// cuGraphConditionalHandleCreate and cuGraphAddNode). A graph [set_cond(h, value)] ->
// [IF h: inc] -> [WHILE hw: inc, countdown(hw, counter)] -> [SWITCH on hs, set from the
// same value: fill 100 + n] is instantiated once and launched with several values, the
// buffer checked after each launch. The kernels are tests/kernels/cond.cu's, which call
// cudaGraphSetConditional.
#include "common.h"
#include "../kernels/kernels.cu"
#include "../kernels/cond.cu"

#define N 256 // words of the buffer

static unsigned *d_buf, *d_val, *d_cnt;
static cudaStream_t s;

static cudaGraphConditionalHandle handle(cudaGraph_t g, unsigned dflt)
{
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, dflt, cudaGraphCondAssignDefault));
    return h;
}

// A kernel node of one block of N threads after dep (or none).
static cudaGraphNode_t kernel(cudaGraph_t g, cudaGraphNode_t dep, void *fn, void **args)
{
    cudaGraphNodeParams p = {};
    memset((void *)&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = fn;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(N);
    p.kernel.kernelParams = args;
    cudaGraphNode_t n;
    CHECK(cudaGraphAddNode(&n, g, dep ? &dep : NULL, NULL, dep ? 1 : 0, &p));
    return n;
}

static cudaGraphNode_t cond(cudaGraph_t g, cudaGraphNode_t dep, cudaGraphConditionalHandle h,
                            cudaGraphConditionalNodeType type, unsigned size, cudaGraph_t *body)
{
    cudaGraphNodeParams p = {};
    memset((void *)&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    cudaGraphNode_t n;
    CHECK(cudaGraphAddNode(&n, g, dep ? &dep : NULL, NULL, dep ? 1 : 0, &p));
    REQUIRE(p.conditional.phGraph_out, "no body graphs given back");
    for (unsigned i = 0; i < size; i++)
        body[i] = p.conditional.phGraph_out[i];
    return n;
}

static unsigned buf_value(void)
{
    static unsigned h[N];
    CHECK(cudaMemcpyAsync(h, d_buf, sizeof h, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 1; i < N; i++)
        REQUIRE(h[i] == h[0], "word %d is %u, word 0 %u", i, h[i], h[0]);
    return h[0];
}

static void put(unsigned *d, unsigned v)
{
    CHECK(cudaMemcpyAsync(d, &v, sizeof v, cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
}

int main()
{
    t_init("cudart_graph_cond", 300);
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&d_buf, N * 4));
    CHECK(cudaMalloc(&d_val, 4));
    CHECK(cudaMalloc(&d_cnt, 4));

    cudaGraph_t g, bi[1], bw[1], bs[3];
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h = handle(g, 0), hw = handle(g, 1), hs = handle(g, 0);
    unsigned long long n = N;
    void *set_args[] = {&h, &d_val};
    cudaGraphNode_t k = kernel(g, NULL, (void *)set_cond, set_args);
    void *sets_args[] = {&hs, &d_val};
    k = kernel(g, k, (void *)set_cond, sets_args);
    k = cond(g, k, h, cudaGraphCondTypeIf, 1, bi);
    void *inc_args[] = {&d_buf, &n};
    kernel(bi[0], NULL, (void *)inc_u32, inc_args);
    k = cond(g, k, hw, cudaGraphCondTypeWhile, 1, bw);
    cudaGraphNode_t w = kernel(bw[0], NULL, (void *)inc_u32, inc_args);
    void *cd_args[] = {&hw, &d_cnt};
    kernel(bw[0], w, (void *)countdown, cd_args);
    cond(g, k, hs, cudaGraphCondTypeSwitch, 3, bs);
    unsigned fills[3] = {100, 101, 102};
    void *fill_args[3][3];
    for (int i = 0; i < 3; i++) {
        fill_args[i][0] = &d_buf;
        fill_args[i][1] = &fills[i];
        fill_args[i][2] = &n;
        kernel(bs[i], NULL, (void *)fill_u32, fill_args[i]);
    }
    t_ok("a graph with IF, WHILE and SWITCH nodes built with cudaGraphAddNode");

    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    const unsigned vals[] = {0, 1, 2, 3, 1};
    const unsigned counts[] = {4, 2, 1, 6, 3};
    for (unsigned i = 0; i < 5; i++) {
        CHECK(cudaMemsetAsync(d_buf, 0, N * 4, s));
        put(d_val, vals[i]);
        put(d_cnt, counts[i]);
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaStreamSynchronize(s));
        unsigned got = buf_value();
        unsigned want = vals[i] < 3 ? 100 + vals[i] : (vals[i] != 0) + counts[i];
        REQUIRE(got == want, "launch %u (value %u, count %u): %u, want %u", i, vals[i], counts[i],
                got, want);
        printf("launch %u: value %u, count %u -> buffer %u\n", i, vals[i], counts[i], got);
    }
    t_ok("the conditional nodes ran as their handles said, launch after launch");
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(d_buf));
    CHECK(cudaFree(d_val));
    CHECK(cudaFree(d_cnt));
    CHECK(cudaStreamDestroy(s));
    t_pass();
}
