/* graph_nodes: the generic node-parameter forms of CUDA graphs (cuGraphAddNode,
 * cuGraphNodeSetParams, cuGraphExecNodeSetParams) and kernel nodes read back.
 *
 * A graph of every node type the shim carries is built with cuGraphAddNode alone:
 * [event wait] [memset a] -> [kernel a = a * mul + add] -> [memcpy b = a] -> [host] ->
 * [event record] -> [empty] -> [child graph: b += 1] -> [memcpy pinned = b]; launched, the
 * pinned words show every step ran. Each node's parameters are then set with
 * cuGraphNodeSetParams (a child graph node excepted: the shim refuses that one) and the
 * graph instantiated again, then set in that exec with cuGraphExecNodeSetParams, each
 * launch checked. The kernel node's parameters are read with cuGraphKernelNodeGetParams
 * after it is added and after it is set, through the returned kernelParams, and those of a
 * captured launch's node and of a clone's node too. Edge data: default data given as an
 * array, a programmatic edge between kernel nodes read back, and one to an empty node
 * refused. Reserved members and an unknown type are refused.
 *
 *   --unsupported  (through the shim only) the node types the shim does not carry, and a
 *                  child graph node's cuGraphNodeSetParams, fail with
 *                  CUDA_ERROR_NOT_SUPPORTED. */
#include "tests/progs/common.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define N 1024 /* words per buffer */

static CUfunction f_inc, f_mul_add;
static CUdeviceptr d_a, d_b;
static uint32_t *g_res; /* pinned */
static CUcontext g_ctx;
static atomic_int host_calls[3];

static void CUDA_CB host_fn(void *user)
{
    atomic_fetch_add(&host_calls[(uintptr_t)user], 1);
}

static CUgraphNodeParams params_of(CUgraphNodeType t)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = t;
    return p;
}

static CUgraphNodeParams memset_params(unsigned value)
{
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_MEMSET);
    p.memset.dst = d_a;
    p.memset.value = value;
    p.memset.elementSize = 4;
    p.memset.width = N;
    p.memset.height = 1;
    p.memset.ctx = g_ctx;
    return p;
}

/* Arguments of a kernel node: they must outlive nothing (the node copies them). */
struct mul_add_args {
    CUdeviceptr p;
    int mul, add;
    unsigned long long n;
    void *v[4];
};

static CUgraphNodeParams mul_add_params(struct mul_add_args *a, int mul, int add)
{
    a->p = d_a;
    a->mul = mul;
    a->add = add;
    a->n = N;
    a->v[0] = &a->p;
    a->v[1] = &a->mul;
    a->v[2] = &a->add;
    a->v[3] = &a->n;
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel.func = f_mul_add;
    p.kernel.gridDimX = t_blocks_for(N, 128);
    p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = 128;
    p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = a->v;
    return p;
}

static CUgraphNodeParams copy_params(CUmemorytype dst_type, CUdeviceptr dst, void *dst_host,
                                     CUdeviceptr src)
{
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_MEMCPY);
    p.memcpy.copyCtx = g_ctx;
    CUDA_MEMCPY3D *c = &p.memcpy.copyParams;
    c->srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c->srcDevice = src;
    c->dstMemoryType = dst_type;
    c->dstDevice = dst;
    c->dstHost = dst_host;
    c->WidthInBytes = N * 4;
    c->Height = c->Depth = 1;
    return p;
}

static CUgraphNodeParams host_params(uintptr_t which)
{
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_HOST);
    p.host.fn = host_fn;
    p.host.userData = (void *)which;
    return p;
}

static CUgraphNodeParams event_params(CUgraphNodeType t, CUevent ev)
{
    CUgraphNodeParams p = params_of(t);
    if (t == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
        p.eventRecord.event = ev;
    else
        p.eventWait.event = ev;
    return p;
}

/* A graph of one node, b += 1, made with cuGraphAddNode. */
static CUgraph inc_graph(void)
{
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    static unsigned long long n = N;
    static void *args[] = {&d_b, &n};
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel.func = f_inc;
    p.kernel.gridDimX = t_blocks_for(N, 256);
    p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = 256;
    p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = args;
    CUgraphNode k;
    CHECK(cuGraphAddNode(&k, g, NULL, NULL, 0, &p));
    return g;
}

static CUgraphNode add(CUgraph g, CUgraphNode *dep, CUgraphNodeParams p)
{
    CUgraphNode n;
    CHECK(cuGraphAddNode(&n, g, dep, NULL, dep ? 1 : 0, &p));
    return n;
}

static void launch_check(CUgraphExec x, CUstream s, uint32_t want, const char *what)
{
    memset(g_res, 0, N * 4);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < N; i++)
        REQUIRE(g_res[i] == want, "%s: word %d is %u, want %u", what, i, g_res[i], want);
    t_ok("%s: every word %u", what, want);
}

/* Reads the kernel node's parameters and prints them, read through kernelParams. */
static void print_kernel_node(CUgraphNode k, const char *what)
{
    CUDA_KERNEL_NODE_PARAMS q;
    memset(&q, 0xff, sizeof q);
    CHECK(cuGraphKernelNodeGetParams(k, &q));
    REQUIRE(q.kernelParams != NULL && q.extra == NULL, "%s: no kernelParams", what);
    void **kp = q.kernelParams;
    t_ok("%s: function %d, grid %u %u %u, block %u %u %u, smem %u, p is a %d, mul %d, add %d, "
         "n %llu",
         what, q.func == f_mul_add, q.gridDimX, q.gridDimY, q.gridDimZ, q.blockDimX, q.blockDimY,
         q.blockDimZ, q.sharedMemBytes, *(CUdeviceptr *)kp[0] == d_a, *(int *)kp[1], *(int *)kp[2],
         *(unsigned long long *)kp[3]);
    /* Read again: the array first returned still holds the parameters. */
    CUDA_KERNEL_NODE_PARAMS again;
    CHECK(cuGraphKernelNodeGetParams(k, &again));
    REQUIRE(*(int *)kp[1] == *(int *)again.kernelParams[1] &&
                *(int *)kp[2] == *(int *)again.kernelParams[2],
            "%s: the first array changed", what);
}

static void print_types(CUgraphNode *nodes, int n, const char *what)
{
    char line[256];
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(nodes[i], &t));
        used += (size_t)snprintf(line + used, sizeof line - used, " %d", (int)t);
    }
    t_ok("%s node types:%s", what, line);
}

static void generic(CUstream s)
{
    CUevent ev_a, ev_b;
    CHECK(cuEventCreate(&ev_a, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&ev_b, CU_EVENT_DISABLE_TIMING));
    CUgraph g, child = inc_graph();
    CHECK(cuGraphCreate(&g, 0));
    struct mul_add_args ka;
    enum { WAIT, MEMSET, KERNEL, COPY, HOST, RECORD, EMPTY, CHILD, BACK, NNODES };
    CUgraphNode nd[NNODES];
    nd[WAIT] = add(g, NULL, event_params(CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev_a));
    nd[MEMSET] = add(g, NULL, memset_params(5));
    nd[KERNEL] = add(g, &nd[MEMSET], mul_add_params(&ka, 3, 1));
    nd[COPY] = add(g, &nd[KERNEL], copy_params(CU_MEMORYTYPE_DEVICE, d_b, NULL, d_a));
    nd[HOST] = add(g, &nd[COPY], host_params(0));
    nd[RECORD] = add(g, &nd[HOST], event_params(CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev_b));
    nd[EMPTY] = add(g, &nd[RECORD], params_of(CU_GRAPH_NODE_TYPE_EMPTY));
    CUgraphNodeParams cp = params_of(CU_GRAPH_NODE_TYPE_GRAPH);
    cp.graph.graph = child;
    nd[CHILD] = add(g, &nd[EMPTY], cp);
    nd[BACK] = add(g, &nd[CHILD], copy_params(CU_MEMORYTYPE_HOST, 0, g_res, d_b));
    print_types(nd, NNODES, "cuGraphAddNode");
    size_t n = 0;
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
    t_ok("cuGraphAddNode: %zu edges", n);
    print_kernel_node(nd[KERNEL], "kernel node after cuGraphAddNode");

    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    launch_check(x, s, 5 * 3 + 1 + 1, "graph of cuGraphAddNode nodes");
    t_ok("host node ran: %d", atomic_load(&host_calls[0]));

    /* Every node's parameters set in the graph (a child graph node's the shim refuses). */
    CUgraphNodeParams p = memset_params(7);
    CHECK(cuGraphNodeSetParams(nd[MEMSET], &p));
    p = mul_add_params(&ka, 2, 3);
    CHECK(cuGraphNodeSetParams(nd[KERNEL], &p));
    p = copy_params(CU_MEMORYTYPE_DEVICE, d_b, NULL, d_a);
    CHECK(cuGraphNodeSetParams(nd[COPY], &p));
    p = host_params(1);
    CHECK(cuGraphNodeSetParams(nd[HOST], &p));
    p = event_params(CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev_a);
    CHECK(cuGraphNodeSetParams(nd[RECORD], &p));
    p = event_params(CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev_b);
    CHECK(cuGraphNodeSetParams(nd[WAIT], &p));
    p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(cuGraphNodeSetParams(nd[EMPTY], &p));
    p = copy_params(CU_MEMORYTYPE_HOST, 0, g_res, d_b);
    CHECK(cuGraphNodeSetParams(nd[BACK], &p));
    CUevent got = NULL;
    CHECK(cuGraphEventRecordNodeGetEvent(nd[RECORD], &got));
    REQUIRE(got == ev_a, "the event record node's event was not set");
    CHECK(cuGraphEventWaitNodeGetEvent(nd[WAIT], &got));
    REQUIRE(got == ev_b, "the event wait node's event was not set");
    t_ok("cuGraphNodeSetParams of every node but the child graph");
    p = params_of(CU_GRAPH_NODE_TYPE_KERNEL);
    EXPECT_ERR(cuGraphNodeSetParams(nd[EMPTY], &p));
    t_ok("cuGraphNodeSetParams of another type than the node's is refused");
    print_kernel_node(nd[KERNEL], "kernel node after cuGraphNodeSetParams");
    launch_check(x, s, 5 * 3 + 1 + 1, "the exec made before keeps the old parameters");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphInstantiate(&x, g, 0));
    launch_check(x, s, 7 * 2 + 3 + 1, "graph instantiated after cuGraphNodeSetParams");
    t_ok("host node ran with its new parameters: %d %d", atomic_load(&host_calls[0]),
         atomic_load(&host_calls[1]));

    /* Every node's parameters set in the exec. */
    p = memset_params(4);
    CHECK(cuGraphExecNodeSetParams(x, nd[MEMSET], &p));
    p = mul_add_params(&ka, 5, 0);
    CHECK(cuGraphExecNodeSetParams(x, nd[KERNEL], &p));
    p = copy_params(CU_MEMORYTYPE_DEVICE, d_b, NULL, d_a);
    CHECK(cuGraphExecNodeSetParams(x, nd[COPY], &p));
    p = host_params(2);
    CHECK(cuGraphExecNodeSetParams(x, nd[HOST], &p));
    p = event_params(CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev_b);
    CHECK(cuGraphExecNodeSetParams(x, nd[RECORD], &p));
    p = event_params(CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev_a);
    CHECK(cuGraphExecNodeSetParams(x, nd[WAIT], &p));
    p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(cuGraphExecNodeSetParams(x, nd[EMPTY], &p));
    CUgraph child2 = inc_graph();
    cp.graph.graph = child2;
    CHECK(cuGraphExecNodeSetParams(x, nd[CHILD], &cp));
    p = copy_params(CU_MEMORYTYPE_HOST, 0, g_res, d_b);
    CHECK(cuGraphExecNodeSetParams(x, nd[BACK], &p));
    t_ok("cuGraphExecNodeSetParams of every node");
    launch_check(x, s, 4 * 5 + 0 + 1, "graph after cuGraphExecNodeSetParams");
    t_ok("host node ran with the exec's parameters: %d %d %d", atomic_load(&host_calls[0]),
         atomic_load(&host_calls[1]), atomic_load(&host_calls[2]));
    print_kernel_node(nd[KERNEL], "kernel node after cuGraphExecNodeSetParams (unchanged)");

    /* A clone's kernel node reads back as the original's. */
    CUgraph clone;
    CUgraphNode ck;
    CHECK(cuGraphClone(&clone, g));
    CHECK(cuGraphNodeFindInClone(&ck, nd[KERNEL], clone));
    print_kernel_node(ck, "the clone's kernel node");
    CHECK(cuGraphDestroy(clone));

    /* Reserved members, a memcpy member's flags and an unknown type are refused. */
    CUgraphNode e;
    p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    p.reserved0[0] = 1;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphNodeSetParams(nd[EMPTY], &p), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphExecNodeSetParams(x, nd[EMPTY], &p), CUDA_ERROR_INVALID_VALUE);
    p = copy_params(CU_MEMORYTYPE_DEVICE, d_b, NULL, d_a);
    p.memcpy.flags = 1;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE);
    p = params_of((CUgraphNodeType)99);
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphGetNodes(g, NULL, &n));
    t_ok("reserved members and unknown types refused: still %zu nodes", n);

    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(child));
    CHECK(cuGraphDestroy(child2));
    CHECK(cuEventDestroy(ev_a));
    CHECK(cuEventDestroy(ev_b));
}

/* cuGraphAddNode_v2's edge data: default data as an array; a programmatic edge between
 * kernel nodes, read back; one to an empty node refused, the node not added. */
static void edges(void)
{
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    struct mul_add_args a1, a2;
    CUgraphNode k1, k2, e;
    CUgraphNodeParams p = mul_add_params(&a1, 1, 1);
    CHECK(cuGraphAddNode(&k1, g, NULL, NULL, 0, &p));
    CUgraphEdgeData ed;
    memset(&ed, 0, sizeof ed);
    p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(cuGraphAddNode(&e, g, &k1, &ed, 1, &p));
    ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    p = mul_add_params(&a2, 1, 2);
    CHECK(cuGraphAddNode(&k2, g, &k1, &ed, 1, &p));
    CUgraphNode dep = NULL;
    CUgraphEdgeData got;
    memset(&got, 0xff, sizeof got);
    size_t n = 1;
    CHECK(cuGraphNodeGetDependencies(k2, &dep, &got, &n));
    t_ok("programmatic edge read back: %zu dependency, the first kernel %d, type %d, from port "
         "%d, to port %d",
         n, dep == k1, got.type, got.from_port, got.to_port);
    p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    EXPECT_ERR(cuGraphAddNode(&e, g, &k1, &ed, 1, &p));
    CHECK(cuGraphGetNodes(g, NULL, &n));
    t_ok("a programmatic edge to an empty node is refused: %zu nodes", n);
    CHECK(cuGraphDestroy(g));
}

/* A captured launch's kernel node reads back too. */
static void captured(CUstream s)
{
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    struct mul_add_args a;
    CUgraphNodeParams p = mul_add_params(&a, 9, 4);
    CHECK(cuLaunchKernel(f_mul_add, p.kernel.gridDimX, 1, 1, 128, 1, 1, 0, s, a.v, NULL));
    CUgraph g = NULL;
    CHECK(cuStreamEndCapture(s, &g));
    CUgraphNode k;
    size_t n = 1;
    CHECK(cuGraphGetNodes(g, &k, &n));
    print_kernel_node(k, "a captured launch's kernel node");
    CHECK(cuGraphDestroy(g));
}

/* The node types the shim does not carry. */
static void unsupported(void)
{
    CUgraph g, child;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphCreate(&child, 0));
    static const CUgraphNodeType types[] = {
        CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL, CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT,
        CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, /* conditional nodes: tests/progs/graph_cond.c */
    };
    CUgraphNode e, c;
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(cuGraphAddNode(&e, g, NULL, NULL, 0, &p));
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        p = params_of(types[i]);
        EXPECT(cuGraphAddNode(&c, g, NULL, NULL, 0, &p), CUDA_ERROR_NOT_SUPPORTED);
        EXPECT(cuGraphNodeSetParams(e, &p), CUDA_ERROR_NOT_SUPPORTED);
        t_ok("node type %d: CUDA_ERROR_NOT_SUPPORTED", (int)types[i]);
    }
    p = params_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = child;
    CHECK(cuGraphAddNode(&c, g, NULL, NULL, 0, &p));
    EXPECT(cuGraphNodeSetParams(c, &p), CUDA_ERROR_NOT_SUPPORTED);
    t_ok("cuGraphNodeSetParams of a child graph node: CUDA_ERROR_NOT_SUPPORTED");
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    EXPECT(cuGraphAddNode(&c, g, NULL, NULL, 0, &p), CUDA_ERROR_NOT_SUPPORTED);
    t_ok("a child graph node that takes its graph: CUDA_ERROR_NOT_SUPPORTED");
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(child));
}

int main(int argc, char **argv)
{
    t_init("graph_nodes", 300);
    CUdevice dev;
    t_setup(&dev, &g_ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_inc = t_get_function(mod, "inc_u32");
    f_mul_add = t_get_function(mod, "mul_add_i32");
    CHECK(cuMemHostAlloc((void **)&g_res, N * 4, 0));
    CHECK(cuMemAlloc(&d_a, N * 4));
    CHECK(cuMemAlloc(&d_b, N * 4));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    if (t_has_flag(argc, argv, "--unsupported")) {
        unsupported();
    } else {
        generic(s);
        edges();
        captured(s);
    }

    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d_a));
    CHECK(cuMemFree(d_b));
    CHECK(cuMemFreeHost(g_res));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
