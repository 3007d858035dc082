// Self-test: conditional graph nodes. Handles and their defaults, IF (with and without an
// else body), WHILE and SWITCH nodes run by the kernels of cond.ptx that set their handle,
// a conditional nested in a body, bodies owned by their node, what instantiation refuses,
// clones, updates of a body's node, capture into a body. Each part frees what it made.
#include "selftest.h"

#include <stdlib.h>
#include <string.h>

#define N 256 // words per buffer

static CUmodule cmod;
static CUstream st;
static CUdeviceptr buf, val, cnt; // N words, one word, one word

static CUfunction cfn(const char *name)
{
    CUfunction f = NULL;
    CK(cuModuleGetFunction(&f, cmod, name));
    return f;
}

static void put(CUdeviceptr p, unsigned v)
{
    CK(cuMemcpyHtoD(p, &v, 4));
}

// Every word of buf is v.
static int buf_is(unsigned v)
{
    unsigned h[N];
    if (cuMemcpyDtoH(h, buf, sizeof h)) return 0;
    for (int i = 0; i < N; i++)
        if (h[i] != v) return 0;
    return 1;
}

// A kernel node of fn(a0, a1) (two 8-byte arguments), one block of N threads.
static CUgraphNode knode(CUgraph g, const CUgraphNode *dep, CUfunction fn, uint64_t a0, uint64_t a1)
{
    void *args[] = {&a0, &a1};
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = fn;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = N;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    CUgraphNode n = NULL;
    CK(cuGraphAddKernelNode(&n, g, dep, dep ? 1 : 0, &p));
    return n;
}

static CUgraphNode inc_node(CUgraph g, const CUgraphNode *dep)
{
    return knode(g, dep, st_fn("inc_u32"), buf, N);
}

static CUgraphNode fill_node(CUgraph g, const CUgraphNode *dep, unsigned v)
{
    unsigned long long n = N;
    void *args[] = {&buf, &v, &n};
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = st_fn("fill_u32");
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = N;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    CUgraphNode k = NULL;
    CK(cuGraphAddKernelNode(&k, g, dep, dep ? 1 : 0, &p));
    return k;
}

// Adds a conditional node; its bodies in body[].
static CUresult cond_node(CUgraphNode *out, CUgraph g, const CUgraphNode *dep,
                          CUgraphConditionalHandle h, CUgraphConditionalNodeType type,
                          unsigned size, CUgraph *body)
{
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = h;
    np.conditional.type = type;
    np.conditional.size = size;
    CUresult rc = cuGraphAddNode(out, g, dep, NULL, dep ? 1 : 0, &np);
    for (unsigned i = 0; !rc && body && i < size; i++)
        body[i] = np.conditional.phGraph_out[i];
    return rc;
}

static void run(CUgraphExec x)
{
    CK(cuGraphLaunch(x, st));
    CK(cuStreamSynchronize(st));
}

static void errors(void)
{
    CUgraph g, other;
    CUgraphConditionalHandle h, ho;
    CUgraphNode n;
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphCreate(&other, 0));
    EXPECT(cuGraphConditionalHandleCreate(NULL, g, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphConditionalHandleCreate(&h, g, NULL, 0, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphConditionalHandleCreate(&h, (CUgraph)&h, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphConditionalHandleCreate(&h, g, (CUcontext)&h, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuGraphConditionalHandleCreate(&h, g, NULL, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&ho, other, NULL, 0, 0));
    CHECK(h != ho);
    EXPECT(cond_node(&n, g, NULL, h, CU_GRAPH_COND_TYPE_IF, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cond_node(&n, g, NULL, h, CU_GRAPH_COND_TYPE_IF, 3, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cond_node(&n, g, NULL, h, CU_GRAPH_COND_TYPE_WHILE, 2, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cond_node(&n, g, NULL, h, (CUgraphConditionalNodeType)7, 1, NULL),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cond_node(&n, g, NULL, ho, CU_GRAPH_COND_TYPE_IF, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cond_node(&n, g, NULL, h + 1000, CU_GRAPH_COND_TYPE_IF, 1, NULL),
           CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphGetNodes(g, NULL, &(size_t){0}) == CUDA_SUCCESS);
    // A body is the node's: not destroyed alone, gone with the node.
    CUgraph body[2] = {0};
    CK(cond_node(&n, g, NULL, h, CU_GRAPH_COND_TYPE_IF, 2, body));
    CUgraphNodeType t;
    CK(cuGraphNodeGetType(n, &t));
    CHECK(t == CU_GRAPH_NODE_TYPE_CONDITIONAL);
    EXPECT(cuGraphDestroy(body[0]), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphNodeSetParams(n, &(CUgraphNodeParams){.type = CU_GRAPH_NODE_TYPE_CONDITIONAL}),
           CUDA_ERROR_NOT_SUPPORTED);
    // Only kernel, empty, memcpy, memset, child and conditional nodes in a body.
    CUgraphNode e;
    EXPECT(cuGraphAddEventRecordNode(&e, body[1], NULL, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphAddEmptyNode(&e, body[1], NULL, 0));
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphExecDestroy(x));
    CUevent ev;
    CK(cuEventCreate(&ev, 0));
    CK(cuGraphAddEventRecordNode(&e, body[0], NULL, 0, ev));
    EXPECT(cuGraphInstantiate(&x, g, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphDestroyNode(n));
    EXPECT(cuGraphGetNodes(body[0], NULL, &(size_t){0}), CUDA_ERROR_INVALID_VALUE);
    CK(cuEventDestroy(ev));
    CK(cuGraphDestroy(other));
    CK(cuGraphDestroy(g));
}

// IF with the value from device memory, reset to its default (0) at each launch; IF/ELSE.
static void if_nodes(void)
{
    CUgraph g, b[2] = {0}, e[2] = {0};
    CUgraphConditionalHandle h, h2;
    CUgraphNode set, c, c2;
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphConditionalHandleCreate(&h, g, NULL, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&h2, g, NULL, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    set = knode(g, NULL, cfn("set_cond"), h, val);
    CK(cond_node(&c, g, &set, h, CU_GRAPH_COND_TYPE_IF, 1, b));
    inc_node(b[0], NULL);
    // h2 is 1 at each launch unless a kernel sets it: the else body never runs here.
    CK(cond_node(&c2, g, &c, h2, CU_GRAPH_COND_TYPE_IF, 2, e));
    inc_node(e[0], NULL);
    fill_node(e[1], NULL, 99);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuMemsetD32(buf, 0, N));
    put(val, 0);
    run(x); // IF skipped, IF/ELSE's then: +1
    CHECK(buf_is(1));
    put(val, 1);
    run(x); // both: +2
    CHECK(buf_is(3));
    put(val, 7); // any non-zero value
    run(x);
    CHECK(buf_is(5));
    put(val, 0);
    run(x);
    CHECK(buf_is(6));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    // The else body: a kernel sets the handle to 0.
    CUgraph g2, b2[2] = {0};
    CK(cuGraphCreate(&g2, 0));
    CK(cuGraphConditionalHandleCreate(&h, g2, NULL, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    set = knode(g2, NULL, cfn("set_cond"), h, val);
    CK(cond_node(&c, g2, &set, h, CU_GRAPH_COND_TYPE_IF, 2, b2));
    fill_node(b2[0], NULL, 11);
    fill_node(b2[1], NULL, 22);
    CK(cuGraphInstantiate(&x, g2, 0));
    put(val, 0);
    run(x);
    CHECK(buf_is(22));
    put(val, 1);
    run(x);
    CHECK(buf_is(11));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g2));
}

// WHILE counting down, with an IF nested in its body; SWITCH with three bodies.
static void while_switch(void)
{
    CUgraph g, w[1] = {0}, in[1] = {0}, sw[3] = {0};
    CUgraphConditionalHandle hw, hi, hs;
    CUgraphNode c, k, ci, set, cs;
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphConditionalHandleCreate(&hw, g, NULL, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&hi, g, NULL, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cond_node(&c, g, NULL, hw, CU_GRAPH_COND_TYPE_WHILE, 1, w));
    k = inc_node(w[0], NULL);
    k = knode(w[0], &k, cfn("countdown"), hw, cnt);
    // In the body: an IF on a handle of the outer graph, set from val each iteration.
    set = knode(w[0], &k, cfn("set_cond"), hi, val);
    CK(cond_node(&ci, w[0], &set, hi, CU_GRAPH_COND_TYPE_IF, 1, in));
    inc_node(in[0], NULL);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuMemsetD32(buf, 0, N));
    put(cnt, 5);
    put(val, 0);
    run(x);
    CHECK(buf_is(5));
    put(cnt, 3);
    put(val, 1);
    run(x);
    CHECK(buf_is(11));
    put(cnt, 0); // a WHILE body runs once at least with a default of 1
    put(val, 0);
    run(x);
    CHECK(buf_is(12));
    // A kernel of a body updated in the executable graph.
    unsigned v = 5;
    unsigned long long n = N;
    void *args[] = {&buf, &v, &n};
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = st_fn("fill_u32");
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = N;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    CUgraphNode inner;
    size_t one = 1;
    CK(cuGraphGetNodes(in[0], &inner, &one));
    CK(cuGraphExecKernelNodeSetParams(x, inner, &p));
    put(cnt, 2);
    put(val, 1);
    run(x); // +1, fill 5, +1, fill 5
    CHECK(buf_is(5));
    // A clone runs the same.
    CUgraph cl;
    CUgraphExec xc;
    CK(cuGraphClone(&cl, g));
    CK(cuGraphInstantiate(&xc, cl, 0));
    put(cnt, 4);
    put(val, 0);
    run(xc);
    CHECK(buf_is(9));
    CK(cuGraphExecDestroy(xc));
    CK(cuGraphDestroy(cl));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    CK(cuGraphCreate(&g, 0));
    CK(cuGraphConditionalHandleCreate(&hs, g, NULL, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    set = knode(g, NULL, cfn("set_cond"), hs, val);
    CK(cond_node(&cs, g, &set, hs, CU_GRAPH_COND_TYPE_SWITCH, 3, sw));
    for (unsigned i = 0; i < 3; i++)
        fill_node(sw[i], NULL, 100 + i);
    CK(cuGraphInstantiate(&x, g, 0));
    for (unsigned i = 0; i < 4; i++) {
        CK(cuMemsetD32(buf, 7, N));
        put(val, i);
        run(x);
        CHECK(buf_is(i < 3 ? 100 + i : 7)); // no body for a value past the last
    }
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
}

// A body filled by stream capture.
static void captured_body(void)
{
    CUgraph g, b[1] = {0};
    CUgraphConditionalHandle h;
    CUgraphNode c;
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphConditionalHandleCreate(&h, g, NULL, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cond_node(&c, g, NULL, h, CU_GRAPH_COND_TYPE_IF, 1, b));
    CK(cuStreamBeginCaptureToGraph(st, b[0], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    unsigned long long n = N;
    void *args[] = {&buf, &n};
    CK(cuLaunchKernel(st_fn("inc_u32"), 1, 1, 1, N, 1, 1, 0, st, args, NULL));
    CUgraph got;
    CK(cuStreamEndCapture(st, &got));
    CHECK(got == b[0]);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuMemsetD32(buf, 0, N));
    run(x);
    run(x);
    CHECK(buf_is(2));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
}

void st_graph_cond(void)
{
    if (!st_mod) st_load();
    unsigned char *ptx = st_read("cond.ptx", NULL);
    CK(cuModuleLoadData(&cmod, ptx));
    free(ptx);
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&buf, N * 4));
    CK(cuMemAlloc(&val, 4));
    CK(cuMemAlloc(&cnt, 4));
    errors();
    if_nodes();
    while_switch();
    captured_body();
    // A set_cond outside any graph launch does nothing.
    unsigned long long h = 1;
    void *args[] = {&h, &val};
    CK(cuLaunchKernel(cfn("set_cond"), 1, 1, 1, 1, 1, 1, 0, st, args, NULL));
    CK(cuStreamSynchronize(st));
    CK(cuMemFree(buf));
    CK(cuMemFree(val));
    CK(cuMemFree(cnt));
    CK(cuStreamDestroy(st));
    CK(cuModuleUnload(cmod));
}
