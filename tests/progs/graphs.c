/* graphs: stream capture and CUDA graphs of the driver API.
 *
 * A capture on a non-blocking stream (a memset, kernels, copies between device memory and
 * pinned memory, a fork to a second stream through an event and the join back) is
 * instantiated and launched 100 times with a new input each time, copied in from pinned
 * memory outside the capture; the capture status is read during and after the capture.
 * A graph built node by node (kernel nodes from kernelParams and from `extra`, memset,
 * memcpy device to device and to pinned memory, an empty node, an event record and an event wait
 * node, a child graph, edges added and removed) is queried, cloned, instantiated and launched; its
 * executable graph is updated from the graph and node by node, uploaded, and the graph drawn as
 * DOT. The errors both drivers give are checked, without saying which. One graph and one executable
 * graph are left undestroyed at exit: through the shim the server must free them when the client
 * goes. Host nodes are in graph_host.c.
 *
 * Node and edge counts are printed: the capture makes one node per memset, kernel and copy
 * and none for event records and waits, as the driver's capture does. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* cuda.h of CUDA 13 names only the third version; the driver still exports the second. */
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);

#define N 4096 /* words per buffer */
#define LAUNCHES 100

static CUfunction f_fill, f_inc, f_mul_add, f_copy;
static uint32_t *g_in, *g_res; /* pinned: the input, and what the graphs copy back (2N) */
static CUdeviceptr d_in, d_a, d_b, d_out;

static void launch(CUfunction f, CUstream s, void **args)
{
    CHECK(cuLaunchKernel(f, t_blocks_for(N, 256), 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void mul_add(CUstream s, CUdeviceptr p, int mul, int add)
{
    unsigned long long n = N;
    void *args[] = {&p, &mul, &add, &n};
    launch(f_mul_add, s, args);
}

/* The n words at g_res + off are all v. */
static void check_words(size_t off, size_t n, uint32_t v, const char *what)
{
    for (size_t i = 0; i < n; i++)
        REQUIRE(g_res[off + i] == v, "%s: word %zu is %u, want %u", what, off + i, g_res[off + i],
                v);
}

/* The n words at device address p, copied back, are all v. */
static void check_device(CUdeviceptr p, uint32_t v, const char *what)
{
    static uint32_t h[N];
    CHECK(cuMemcpyDtoH(h, p, sizeof h));
    for (size_t i = 0; i < N; i++)
        REQUIRE(h[i] == v, "%s: word %zu is %u, want %u", what, i, h[i], v);
}

static size_t count_nodes(CUgraph g, CUgraphNodeType type, int any)
{
    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode *nodes = calloc(n ? n : 1, sizeof *nodes);
    REQUIRE(nodes, "out of host memory");
    CHECK(cuGraphGetNodes(g, nodes, &n));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(nodes[i], &t));
        k += any || t == type;
    }
    free(nodes);
    return k;
}

static size_t count_edges(CUgraph g)
{
    size_t n = 0;
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
    return n;
}

static void print_status(const char *what, CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    CHECK(cuStreamIsCapturing(s, &st));
    t_ok("cuStreamIsCapturing %s: %d", what, (int)st);
}

/* The capture: memset, kernels, a fork to s2 and back, copies; checked while it is made. */
static CUgraph capture(CUstream s1, CUstream s2)
{
    CUevent fork_ev, join_ev;
    CHECK(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
    unsigned long long bytes = N * 4ull;

    print_status("before the capture", s1);
    CHECK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    print_status("of the capturing stream", s1);
    print_status("of a stream not yet forked to", s2);
    CHECK(cuMemsetD32Async(d_a, 3, N, s1));
    void *copy_args[] = {&d_in, &d_b, &bytes};
    launch(f_copy, s1, copy_args);
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0, id2 = 0;
    CUgraph live = NULL;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    CHECK(cuStreamGetCaptureInfo_v2(s1, &st, &id, &live, &deps, &ndeps));
    t_ok("cuStreamGetCaptureInfo_v2 during the capture: %d, id %d, graph %d, one dependency %d",
         (int)st, id != 0, live != NULL, ndeps == 1 && deps && deps[0]);

    CHECK(cuEventRecord(fork_ev, s1));
    CHECK(cuStreamWaitEvent(s2, fork_ev, 0));
    print_status("of the forked stream", s2);
    CHECK(cuStreamGetCaptureInfo_v2(s2, &st, &id2, NULL, NULL, NULL));
    t_ok("the forked stream is in the same capture: %d", id2 == id);
    mul_add(s2, d_a, 2, 1);                          /* a = 3 * 2 + 1 */
    CHECK(cuMemcpyDtoDAsync(d_out, d_a, bytes, s2)); /* out[0..N) = a */
    mul_add(s1, d_b, 3, 0);                          /* b = 3 * in */
    CHECK(cuEventRecord(join_ev, s2));
    CHECK(cuStreamWaitEvent(s1, join_ev, 0));
    CHECK(cuStreamGetCaptureInfo_v2(s1, &st, NULL, NULL, &deps, &ndeps));
    t_ok("after the join the stream depends on both branches: %d", ndeps == 2);
    void *inc_args[] = {&d_b, &(unsigned long long){N}};
    launch(f_inc, s1, inc_args); /* b = 3 * in + 1 */
    CHECK(cuMemcpyDtoDAsync(d_out + bytes, d_b, bytes, s1));
    CHECK(cuMemcpyDtoHAsync(g_res, d_out, 2 * bytes, s1));
    CUgraph g = NULL;
    CHECK(cuStreamEndCapture(s1, &g));
    REQUIRE(g != NULL, "cuStreamEndCapture gave no graph");
    print_status("after the capture", s1);
    print_status("of the forked stream after the capture", s2);
    CHECK(cuStreamGetCaptureInfo_v2(s1, &st, NULL, NULL, NULL, NULL));
    t_ok("cuStreamGetCaptureInfo_v2 after the capture: %d", (int)st);
    CHECK(cuEventDestroy(fork_ev));
    CHECK(cuEventDestroy(join_ev));
    return g;
}

/* The captured graph's shape, then 100 launches with a new input each. */
static void captured(CUstream s1, CUstream s2)
{
    CHECK(cuMemsetD32(d_a, 0xee, N));
    CHECK(cuMemsetD32(d_out, 0, 2 * N));
    CUgraph g = capture(s1, s2);
    check_device(d_a, 0xee, "memory after the capture");
    check_device(d_out, 0, "output after the capture");
    t_ok("nothing captured ran");
    t_ok("captured graph: %zu nodes (%zu kernels, %zu memsets, %zu memcpys), %zu edges",
         count_nodes(g, 0, 1), count_nodes(g, CU_GRAPH_NODE_TYPE_KERNEL, 0),
         count_nodes(g, CU_GRAPH_NODE_TYPE_MEMSET, 0), count_nodes(g, CU_GRAPH_NODE_TYPE_MEMCPY, 0),
         count_edges(g));
    size_t roots = 0;
    CHECK(cuGraphGetRootNodes(g, NULL, &roots));
    t_ok("captured graph: %zu root node", roots);

    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < LAUNCHES; i++) {
        for (int k = 0; k < N; k++)
            g_in[k] = (uint32_t)(i * 7 + k);
        memset(g_res, 0, 2 * N * 4);
        CHECK(cuMemcpyHtoDAsync(d_in, g_in, N * 4, s1));
        CHECK(cuGraphLaunch(x, s1));
        CHECK(cuStreamSynchronize(s1));
        check_words(0, N, 7, "the forked branch");
        for (int k = 0; k < N; k++)
            REQUIRE(g_res[N + k] == 3 * (uint32_t)(i * 7 + k) + 1,
                    "launch %d: word %d is %u, want %u", i, k, g_res[N + k],
                    3 * (uint32_t)(i * 7 + k) + 1);
    }
    t_ok("%d launches of the captured graph, each with its new input", LAUNCHES);
    /* Launched on the other stream, queued back to back: each launch follows the last. */
    for (int k = 0; k < N; k++)
        g_in[k] = 5;
    CHECK(cuMemcpyHtoDAsync(d_in, g_in, N * 4, s2));
    for (int i = 0; i < 10; i++)
        CHECK(cuGraphLaunch(x, s2));
    CHECK(cuStreamSynchronize(s2));
    check_words(N, N, 16, "queued launches on another stream");
    t_ok("launches queued back to back on another stream");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **args, void **extra)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = t_blocks_for(N, 256);
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 256;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    p.extra = extra;
    return p;
}

static CUDA_MEMCPY3D copy_params(CUdeviceptr src, CUdeviceptr dst, void *host_dst, size_t bytes)
{
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = src;
    p.dstMemoryType = host_dst ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    p.dstDevice = dst;
    p.dstHost = host_dst;
    p.WidthInBytes = bytes;
    p.Height = p.Depth = 1;
    return p;
}

/* The arguments of mul_add_i32 as one buffer (the `extra` form). */
struct mul_add_args {
    CUdeviceptr p;
    int mul, add;
    unsigned long long n;
};

struct built {
    CUgraph g;
    CUgraphNode memset, inc, mul, copy, to_host, empty, record, wait, child, back;
    CUevent ev;
};

/* memset a=1; inc a; a = a*mul; copy b=a; copy b to g_res; empty; record; wait;
 * child graph (inc b); copy b to g_res + N. */
static void build(struct built *b, CUcontext ctx, int mul)
{
    CHECK(cuGraphCreate(&b->g, 0));
    CUDA_MEMSET_NODE_PARAMS ms;
    memset(&ms, 0, sizeof ms);
    ms.dst = d_a;
    ms.value = 1;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    CHECK(cuGraphAddMemsetNode(&b->memset, b->g, NULL, 0, &ms, ctx));
    CUdeviceptr a = d_a;
    unsigned long long n = N;
    void *inc_args[] = {&a, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(f_inc, inc_args, NULL);
    CHECK(cuGraphAddKernelNode(&b->inc, b->g, &b->memset, 1, &kp));
    a = d_b; /* copied when the node was made: the node still increments d_a */
    struct mul_add_args ma = {d_a, mul, 0, N};
    size_t size = sizeof ma;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ma, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    kp = kernel_params(f_mul_add, NULL, extra);
    CHECK(cuGraphAddKernelNode(&b->mul, b->g, &b->inc, 1, &kp));
    ma.mul = 1000;
    CUDA_MEMCPY3D cp = copy_params(d_a, d_b, NULL, N * 4);
    CHECK(cuGraphAddMemcpyNode(&b->copy, b->g, &b->mul, 1, &cp, ctx));
    cp = copy_params(d_b, 0, g_res, N * 4);
    CHECK(cuGraphAddMemcpyNode(&b->to_host, b->g, &b->copy, 1, &cp, ctx));
    CHECK(cuGraphAddEmptyNode(&b->empty, b->g, &b->to_host, 1));
    CHECK(cuEventCreate(&b->ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuGraphAddEventRecordNode(&b->record, b->g, &b->empty, 1, b->ev));
    CHECK(cuGraphAddEventWaitNode(&b->wait, b->g, &b->record, 1, b->ev));
    CUgraph child;
    CHECK(cuGraphCreate(&child, 0));
    CUgraphNode cn;
    CUdeviceptr bp = d_b;
    void *child_args[] = {&bp, &n};
    kp = kernel_params(f_inc, child_args, NULL);
    CHECK(cuGraphAddKernelNode(&cn, child, NULL, 0, &kp));
    CHECK(cuGraphAddChildGraphNode(&b->child, b->g, &b->wait, 1, child));
    CHECK(cuGraphDestroy(child)); /* the node has its own copy */
    cp = copy_params(d_b, 0, g_res + N, N * 4);
    CHECK(cuGraphAddMemcpyNode(&b->back, b->g, &b->child, 1, &cp, ctx));
}

/* One launch of x on s: g_res holds v (the memset's value, plus one, times the multiplier),
 * then what the child graph's kernel made of it, one more. */
static void run_built(CUgraphExec x, CUstream s, uint32_t v, const char *what)
{
    memset(g_res, 0, 2 * N * 4);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    check_words(0, N, v, what);
    check_words(N, N, v + 1, what);
}

static void queries(const struct built *b)
{
    t_ok("built graph: %zu nodes, %zu edges", count_nodes(b->g, 0, 1), count_edges(b->g));
    CUgraphNode nodes[4] = {0};
    size_t n = 4;
    CHECK(cuGraphGetRootNodes(b->g, nodes, &n));
    t_ok("one root, the memset node: %d", n == 1 && nodes[0] == b->memset && nodes[1] == NULL);
    n = 4;
    CHECK(cuGraphNodeGetDependencies(b->inc, nodes, NULL, &n));
    int dep_ok = n == 1 && nodes[0] == b->memset;
    n = 4;
    CHECK(cuGraphNodeGetDependentNodes(b->memset, nodes, NULL, &n));
    t_ok("dependencies and dependent nodes: %d", dep_ok && n == 1 && nodes[0] == b->inc);
    static const struct {
        size_t off;
        CUgraphNodeType type;
    } types[] = {
        {offsetof(struct built, memset), CU_GRAPH_NODE_TYPE_MEMSET},
        {offsetof(struct built, inc), CU_GRAPH_NODE_TYPE_KERNEL},
        {offsetof(struct built, copy), CU_GRAPH_NODE_TYPE_MEMCPY},
        {offsetof(struct built, empty), CU_GRAPH_NODE_TYPE_EMPTY},
        {offsetof(struct built, record), CU_GRAPH_NODE_TYPE_EVENT_RECORD},
        {offsetof(struct built, wait), CU_GRAPH_NODE_TYPE_WAIT_EVENT},
        {offsetof(struct built, child), CU_GRAPH_NODE_TYPE_GRAPH},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(*(const CUgraphNode *)((const char *)b + types[i].off), &t));
        REQUIRE(t == types[i].type, "node %zu has type %d, want %d", i, (int)t, (int)types[i].type);
    }
    t_ok("cuGraphNodeGetType of every node type");

    CUDA_MEMSET_NODE_PARAMS ms;
    CHECK(cuGraphMemsetNodeGetParams(b->memset, &ms));
    t_ok("memset node parameters: %u %u %zu", ms.value, ms.elementSize, ms.width);
    CUDA_MEMCPY3D cp;
    CHECK(cuGraphMemcpyNodeGetParams(b->to_host, &cp));
    t_ok("memcpy node parameters: to host %d, %zu bytes",
         cp.dstMemoryType == CU_MEMORYTYPE_HOST && cp.dstHost == g_res, cp.WidthInBytes);
    CUgraph child;
    CHECK(cuGraphChildGraphNodeGetGraph(b->child, &child));
    t_ok("child graph: %zu node", count_nodes(child, 0, 1));
}

/* Edges added and removed: the count comes back. */
static void edges(const struct built *b)
{
    size_t before = count_edges(b->g);
    CHECK(cuGraphAddDependencies(b->g, &b->memset, &b->empty, NULL, 1));
    size_t with = count_edges(b->g);
    EXPECT_ERR(cuGraphAddDependencies(b->g, &b->memset, &b->empty, NULL, 1));
    CHECK(cuGraphRemoveDependencies(b->g, &b->memset, &b->empty, NULL, 1));
    t_ok("an edge added and removed: %d", with == before + 1 && count_edges(b->g) == before);
    EXPECT_ERR(cuGraphRemoveDependencies(b->g, &b->memset, &b->empty, NULL, 1));
    t_ok("an edge that is not there is not removed");
}

static void explicit_graph(CUcontext ctx, CUstream s)
{
    struct built b;
    build(&b, ctx, 5);
    queries(&b);
    edges(&b);

    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, b.g, 0));
    for (int i = 0; i < 3; i++)
        run_built(x, s, 2 * 5, "the built graph");
    t_ok("the built graph ran every node in order, 3 times");

    /* A clone, and its node found from the original's. */
    CUgraph c;
    CHECK(cuGraphClone(&c, b.g));
    CUgraphNode found = NULL;
    CHECK(cuGraphNodeFindInClone(&found, b.mul, c));
    CUgraphNodeType t;
    CHECK(cuGraphNodeGetType(found, &t));
    t_ok("a clone: %zu nodes, the kernel node found in it %d", count_nodes(c, 0, 1),
         found != b.mul && t == CU_GRAPH_NODE_TYPE_KERNEL);
    CUgraphExec cx;
    CHECK(cuGraphInstantiate(&cx, c, 0));
    CHECK(cuGraphDestroy(c)); /* the executable graph outlives its graph */
    run_built(cx, s, 2 * 5, "the clone");
    t_ok("the clone's executable graph runs after the clone is destroyed");
    CHECK(cuGraphExecDestroy(cx));

    /* The graph's node changed, then the executable graph updated from the graph. */
    struct mul_add_args ma = {d_a, 7, 0, N};
    void *args[] = {&ma.p, &ma.mul, &ma.add, &ma.n};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(f_mul_add, args, NULL);
    CHECK(cuGraphKernelNodeSetParams(b.mul, &kp));
    run_built(x, s, 2 * 5, "before the update");
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CHECK(cuGraphExecUpdate(x, b.g, &info));
    t_ok("cuGraphExecUpdate_v2: result %d", (int)info.result);
    run_built(x, s, 2 * 7, "after the update");
    /* Then the executable graph's node alone. */
    ma.mul = 9;
    CHECK(cuGraphExecKernelNodeSetParams(x, b.mul, &kp));
    run_built(x, s, 2 * 9, "after cuGraphExecKernelNodeSetParams_v2");
    CUgraphExec fresh;
    CHECK(cuGraphInstantiate(&fresh, b.g, 0));
    run_built(fresh, s, 2 * 7, "a new instance of the graph");
    CHECK(cuGraphExecDestroy(fresh));
    t_ok("the graph's node keeps its own parameters");
    CHECK(cuGraphUpload(x, s));
    run_built(x, s, 2 * 9, "after cuGraphUpload");
    t_ok("cuGraphUpload");
    CUDA_MEMSET_NODE_PARAMS ms;
    CHECK(cuGraphMemsetNodeGetParams(b.memset, &ms));
    ms.value = 2;
    CHECK(cuGraphExecMemsetNodeSetParams(x, b.memset, &ms, ctx));
    run_built(x, s, 3 * 9, "after cuGraphExecMemsetNodeSetParams");
    t_ok("cuGraphExecMemsetNodeSetParams");

    /* A graph of another shape cannot update it. */
    CUgraph other;
    CHECK(cuGraphClone(&other, b.g));
    CUgraphNode extra_node;
    CHECK(cuGraphAddEmptyNode(&extra_node, other, NULL, 0));
    memset(&info, 0, sizeof info);
    EXPECT(cuGraphExecUpdate(x, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    t_ok("an update from a graph of another shape fails: result %d", (int)info.result);
    CHECK(cuGraphDestroy(other));
    CUgraphNode late;
    CHECK(cuGraphAddEmptyNode(&late, b.g, NULL, 0));
    EXPECT_ERR(cuGraphExecKernelNodeSetParams(x, late, &kp));
    t_ok("a node added after instantiation is not the executable graph's");

    /* DOT. */
    char path[64];
    snprintf(path, sizeof path, "/tmp/mpsshim-graphs-%d.dot", (int)getpid());
    CHECK(cuGraphDebugDotPrint(b.g, path, 0));
    struct stat st;
    int ok = stat(path, &st) == 0 && st.st_size > 0;
    unlink(path);
    t_ok("cuGraphDebugDotPrint wrote a file: %d", ok);
    /* A relative path names a file in the program's working directory (through the shim
     * too: the server writes it there, not in its own). */
    char dir[] = "/tmp/mpsshim-dot-XXXXXX";
    int here = open(".", O_RDONLY | O_DIRECTORY);
    REQUIRE(here >= 0 && mkdtemp(dir) && chdir(dir) == 0, "a temporary working directory");
    CHECK(cuGraphDebugDotPrint(b.g, "relative.dot", 0));
    ok = stat("relative.dot", &st) == 0 && st.st_size > 0;
    unlink("relative.dot");
    REQUIRE(fchdir(here) == 0 && rmdir(dir) == 0, "back from %s", dir);
    close(here);
    t_ok("cuGraphDebugDotPrint with a relative path wrote in the working directory: %d", ok);

    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(b.g));
    CHECK(cuEventDestroy(b.ev));
    t_ok("graphs and executable graphs destroyed");
}

/* Capture modes: an allocation is refused during a global capture (which it invalidates)
 * and allowed during a relaxed one. */
static void modes(CUstream s)
{
    CUdeviceptr p = 0;
    CUgraph g = (CUgraph)1;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    mul_add(s, d_a, 1, 1);
    EXPECT_ERR(cuMemAlloc(&p, 4096));
    if (cuStreamEndCapture(s, &g) == CUDA_SUCCESS) CHECK(cuGraphDestroy(g));
    t_ok("cuMemAlloc during a global capture fails");
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    mul_add(s, d_a, 1, 1);
    CHECK(cuMemAlloc(&p, 4096));
    CHECK(cuMemFree(p));
    CHECK(cuStreamEndCapture(s, &g));
    t_ok("cuMemAlloc during a relaxed capture: %zu node", count_nodes(g, 0, 1));
    CHECK(cuGraphDestroy(g));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    mul_add(s, d_a, 1, 1);
    CHECK(cuMemAlloc(&p, 4096));
    CHECK(cuMemFree(p));
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    t_ok("cuMemAlloc in a relaxed thread during a global capture; mode restored %d",
         mode == CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(cuGraphDestroy(g));
    /* A host free waits for the client's streams (through the shim, in the server), but a
     * capturing one has nothing to wait for, and querying it would end its capture: the
     * per-thread default stream as much as a created one. */
    void *h = NULL;
    CHECK(cuMemAllocHost(&h, 4096));
    CHECK(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_RELAXED));
    mul_add(CU_STREAM_PER_THREAD, d_a, 1, 1);
    CHECK(cuMemFreeHost(h));
    CHECK(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g));
    t_ok("cuMemFreeHost during a relaxed capture of the per-thread stream: %zu node",
         count_nodes(g, 0, 1));
    CHECK(cuGraphDestroy(g));
}

/* Errors both drivers give. */
static void errors(CUstream s1, CUstream s2)
{
    CUgraph g = (CUgraph)1;
    EXPECT_ERR(cuGraphCreate(&g, 1));
    EXPECT_ERR(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_ERR(cuStreamEndCapture(s1, &g));
    t_ok("no capture on the NULL stream, no end without a beginning");

    CHECK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    mul_add(s1, d_a, 1, 0);
    EXPECT_ERR(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_ERR(cuStreamSynchronize(s1));
    g = (CUgraph)1;
    EXPECT_ERR(cuStreamEndCapture(s1, &g));
    print_status("after a failed capture", s1);
    t_ok("a synchronize during the capture fails, and so does the capture: %d", g == NULL);

    CUevent ev;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuEventRecord(ev, s1));
    CHECK(cuStreamWaitEvent(s2, ev, 0));
    mul_add(s2, d_a, 1, 0);
    EXPECT_ERR(cuStreamEndCapture(s2, &g));
    EXPECT_ERR(cuStreamEndCapture(s1, &g));
    print_status("after a capture whose fork was never joined", s1);
    t_ok("a capture with a fork not joined back fails");
    CHECK(cuEventDestroy(ev));

    CHECK(cuGraphCreate(&g, 0));
    CUgraphNode a, b;
    CUDA_MEMSET_NODE_PARAMS ms;
    memset(&ms, 0, sizeof ms);
    ms.dst = d_a;
    ms.elementSize = 3;
    ms.width = 4;
    ms.height = 1;
    EXPECT_ERR(cuGraphAddMemsetNode(&a, g, NULL, 0, &ms, NULL));
    CUdeviceptr p = d_a;
    unsigned long long n = N;
    void *args[] = {&p, &n};
    size_t size = 16;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(f_inc, args, extra);
    EXPECT_ERR(cuGraphAddKernelNode(&a, g, NULL, 0, &kp));
    t_ok("a memset of 3-byte elements and a kernel given both argument forms are refused");
    CHECK(cuGraphAddEmptyNode(&a, g, NULL, 0));
    CHECK(cuGraphAddEmptyNode(&b, g, &a, 1));
    CUgraphExec x;
    if (cuGraphAddDependencies(g, &b, &a, NULL, 1) == CUDA_SUCCESS)
        EXPECT_ERR(cuGraphInstantiate(&x, g, 0));
    t_ok("a cycle is never instantiated");
    CHECK(cuGraphDestroy(g));
}

int main(void)
{
    t_init("graphs", 300);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    f_fill = t_get_function(mod, "fill_u32");
    f_inc = t_get_function(mod, "inc_u32");
    f_mul_add = t_get_function(mod, "mul_add_i32");
    f_copy = t_get_function(mod, "copy_u8");
    CHECK(cuMemHostAlloc((void **)&g_in, N * 4, 0));
    CHECK(cuMemHostAlloc((void **)&g_res, 2 * N * 4, 0));
    CHECK(cuMemAlloc(&d_in, N * 4));
    CHECK(cuMemAlloc(&d_a, N * 4));
    CHECK(cuMemAlloc(&d_b, N * 4));
    CHECK(cuMemAlloc(&d_out, 2 * N * 4));
    CUstream s1, s2;
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

    captured(s1, s2);
    explicit_graph(ctx, s1);
    modes(s1);
    errors(s1, s2);

    /* Left for the server to free when this client exits. */
    CUgraph left;
    CUgraphNode node;
    CUgraphExec left_exec;
    CHECK(cuGraphCreate(&left, 0));
    unsigned v = 0x77;
    unsigned long long n = N;
    void *args[] = {&d_a, &v, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(f_fill, args, NULL);
    CHECK(cuGraphAddKernelNode(&node, left, NULL, 0, &kp));
    CHECK(cuGraphInstantiate(&left_exec, left, 0));
    CHECK(cuGraphLaunch(left_exec, s1));
    CHECK(cuStreamSynchronize(s1));
    check_device(d_a, 0x77, "the graph left at exit");
    t_ok("a graph and an executable graph left for the exit");

    CHECK(cuStreamDestroy(s1));
    CHECK(cuStreamDestroy(s2));
    CHECK(cuMemFree(d_in));
    CHECK(cuMemFree(d_a));
    CHECK(cuMemFree(d_b));
    CHECK(cuMemFree(d_out));
    CHECK(cuMemFreeHost(g_in));
    CHECK(cuMemFreeHost(g_res));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
