/* graph_host: host nodes of CUDA graphs and host functions in stream captures.
 *
 * An explicit graph [inc kernel on pinned p1 -> host node -> copy kernel p2 -> d_out] is
 * launched several times: each time the host function runs once, after the first kernel
 * (it sees p1 incremented) and before the second (which copies what the function wrote to
 * p2). A capture with a cuLaunchHostFunc in it makes a host node, replayed likewise. The
 * host node's parameters are read, set in the graph (an exec made before keeps the old
 * ones) and in an exec; a clone's host node is its own; an exec is updated from the clone;
 * a host node is destroyed; 64 host nodes in parallel branches all run at each launch,
 * before the node that joins them. cuStreamAddCallback in a capture fails, as with the
 * driver. A graph with a host node and its exec are left for the exit.
 *
 *   --limit   (through the shim only) host nodes up to the shim's bound fail cleanly with
 *             CUDA_ERROR_OUT_OF_MEMORY, and are free again once their graph is destroyed.
 *   --victim  launches a graph whose host function never returns, prints `ready` from it
 *             and waits to be killed (the CI tier's kill -9 test).
 *   --leave-capturing  queues a kernel of 300 ms and 8 launches of a graph of a slow host
 *             node on a stream, begins a capture on that stream and exits: the server must
 *             end the capture and wait for those launches before it frees the client's host
 *             node slots (the fuzzer found a release that skipped the capturing stream, and
 *             the next run of the host node read the freed slots: tests/asan.sh). */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 1024 /* words per buffer */
#define LAUNCHES 5
#define BRANCHES 64

static CUfunction f_inc, f_copy;
static uint32_t *p1, *p2; /* pinned: what the first kernel writes, what the host node writes */
static CUdeviceptr d_out;

/* What the host functions saw; written on whatever thread runs them, read after syncs. */
static atomic_int calls, bad_order, last_seen;
static atomic_int tag_a, tag_b, tag_c;
static atomic_ullong branch_bits;
static atomic_int branch_calls;

/* The host node: p1 must hold the first kernel's result for this launch; p2 = 10 * p1. */
static void CUDA_CB host_step(void *user)
{
    (void)user;
    int n = atomic_fetch_add(&calls, 1) + 1;
    for (int i = 0; i < N; i++) {
        if (p1[i] != (uint32_t)(n + i)) atomic_store(&bad_order, 1);
        p2[i] = 10 * p1[i];
    }
    atomic_store(&last_seen, (int)p1[0]);
}

static void CUDA_CB count_a(void *user)
{
    (void)user;
    atomic_fetch_add(&tag_a, 1);
}

static void CUDA_CB count_b(void *user)
{
    atomic_fetch_add(&tag_b, *(int *)user);
}

static void CUDA_CB count_c(void *user)
{
    (void)user;
    atomic_fetch_add(&tag_c, 1);
}

static void CUDA_CB branch(void *user)
{
    atomic_fetch_or(&branch_bits, 1ull << (uintptr_t)user);
    atomic_fetch_add(&branch_calls, 1);
}

static void CUDA_CB no_callback(CUstream s, CUresult st, void *user)
{
    (void)s;
    (void)st;
    (void)user;
}

static CUDA_KERNEL_NODE_PARAMS kparams(CUfunction f, void **args)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = t_blocks_for(N, 256);
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 256;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
}

static size_t count_nodes(CUgraph g, int type)
{
    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode *v = calloc(n ? n : 1, sizeof *v);
    REQUIRE(v, "out of host memory");
    CHECK(cuGraphGetNodes(g, v, &n));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(v[i], &t));
        k += type < 0 || (int)t == type;
    }
    free(v);
    return k;
}

static void check_out(uint32_t mul_of, const char *what)
{
    static uint32_t h[N];
    CHECK(cuMemcpyDtoH(h, d_out, sizeof h));
    for (int i = 0; i < N; i++)
        REQUIRE(h[i] == 10 * (mul_of + (uint32_t)i), "%s: word %d is %u, want %u", what, i, h[i],
                10 * (mul_of + (uint32_t)i));
}

static void reset_p1(void)
{
    for (int i = 0; i < N; i++)
        p1[i] = (uint32_t)i;
    memset(p2, 0, N * 4);
    atomic_store(&calls, 0);
}

static unsigned long long n_words = N, n_bytes = N * 4ull;

/* [inc p1] -> [host_step] -> [copy p2 -> d_out]; its three nodes. */
static CUgraph three_step(CUgraphNode nodes[3])
{
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    void *inc_args[] = {&p1, &n_words};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(f_inc, inc_args);
    CHECK(cuGraphAddKernelNode(&nodes[0], g, NULL, 0, &kp));
    CUDA_HOST_NODE_PARAMS hp = {host_step, NULL};
    CHECK(cuGraphAddHostNode(&nodes[1], g, &nodes[0], 1, &hp));
    void *copy_args[] = {&p2, &d_out, &n_bytes};
    kp = kparams(f_copy, copy_args);
    CHECK(cuGraphAddKernelNode(&nodes[2], g, &nodes[1], 1, &kp));
    return g;
}

static void explicit_graph(CUstream s)
{
    CUgraphNode nd[3];
    CUgraph g = three_step(nd);
    CUgraphNodeType t;
    CHECK(cuGraphNodeGetType(nd[1], &t));
    t_ok("cuGraphNodeGetType of a host node: %d", (int)t);
    size_t n = 0, ne = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &ne));
    t_ok("graph: %zu nodes, %zu edges, %zu host node", n, ne,
         count_nodes(g, CU_GRAPH_NODE_TYPE_HOST));
    CUgraphNode dep = NULL;
    size_t nd1 = 1;
    CHECK(cuGraphNodeGetDependencies(nd[2], &dep, NULL, &nd1));
    t_ok("the second kernel depends on the host node: %d", nd1 == 1 && dep == nd[1]);
    CUgraph inner;
    t_ok("a host node is no child graph node: %d",
         cuGraphChildGraphNodeGetGraph(nd[1], &inner) != CUDA_SUCCESS);

    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    reset_p1();
    for (int i = 1; i <= LAUNCHES; i++) {
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        REQUIRE(atomic_load(&calls) == i, "launch %d: the host function ran %d times", i,
                atomic_load(&calls));
        check_out((uint32_t)i, "the kernel after the host node");
    }
    t_ok("%d launches: the host function ran once each, after the first kernel (%d) and "
         "before the second",
         LAUNCHES, !atomic_load(&bad_order));
    /* Queued back to back without a sync: still once each, in order. */
    reset_p1();
    for (int i = 0; i < LAUNCHES; i++)
        CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(atomic_load(&calls) == LAUNCHES && !atomic_load(&bad_order) &&
                atomic_load(&last_seen) == LAUNCHES,
            "queued launches: %d calls, bad order %d", atomic_load(&calls),
            atomic_load(&bad_order));
    check_out(LAUNCHES, "queued launches");
    t_ok("%d launches queued back to back: in order, once each", LAUNCHES);

    /* Parameters: read, set in the graph (the exec keeps its own), set in the exec. */
    CUDA_HOST_NODE_PARAMS hp;
    CHECK(cuGraphHostNodeGetParams(nd[1], &hp));
    t_ok("cuGraphHostNodeGetParams: the function and data given: %d",
         hp.fn == host_step && hp.userData == NULL);
    int two = 2;
    CUDA_HOST_NODE_PARAMS pb = {count_b, &two};
    CHECK(cuGraphHostNodeSetParams(nd[1], &pb));
    CHECK(cuGraphHostNodeGetParams(nd[1], &hp));
    t_ok("cuGraphHostNodeSetParams then GetParams: %d", hp.fn == count_b && hp.userData == &two);
    reset_p1();
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("an exec made before keeps the old function: %d %d", atomic_load(&calls),
         atomic_load(&tag_b));
    CUDA_HOST_NODE_PARAMS pc = {count_c, NULL};
    CHECK(cuGraphExecHostNodeSetParams(x, nd[1], &pc));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("cuGraphExecHostNodeSetParams: the exec runs the new one: %d %d %d", atomic_load(&calls),
         atomic_load(&tag_c), atomic_load(&tag_b));
    CHECK(cuGraphHostNodeGetParams(nd[1], &hp));
    t_ok("the graph's node is unchanged by the exec's: %d", hp.fn == count_b);
    CUgraphExec x2;
    CHECK(cuGraphInstantiate(&x2, g, 0));
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("a new exec runs the graph's new function: %d", atomic_load(&tag_b));

    /* Clone: its host node is its own. */
    CUgraph cl;
    CUgraphNode cn;
    CHECK(cuGraphClone(&cl, g));
    CHECK(cuGraphNodeFindInClone(&cn, nd[1], cl));
    CHECK(cuGraphHostNodeGetParams(cn, &hp));
    CHECK(cuGraphNodeGetType(cn, &t));
    t_ok("the clone's host node: type %d, same parameters %d", (int)t,
         hp.fn == count_b && hp.userData == &two);
    CUDA_HOST_NODE_PARAMS pa = {count_a, NULL};
    CHECK(cuGraphHostNodeSetParams(cn, &pa));
    CHECK(cuGraphHostNodeGetParams(nd[1], &hp));
    t_ok("setting the clone's leaves the original's: %d", hp.fn == count_b);
    CUgraphExec xc;
    CHECK(cuGraphInstantiate(&xc, cl, 0));
    CHECK(cuGraphLaunch(xc, s));
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("clone and original each run their own: a %d, b %d", atomic_load(&tag_a),
         atomic_load(&tag_b));

    /* The exec takes the clone's parameters, then one of its own; the graphs go, the
     * execs stay. */
    CUgraphExecUpdateResultInfo ri;
    CHECK(cuGraphExecUpdate(x, cl, &ri));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("after an update from the clone: a %d, c %d", atomic_load(&tag_a), atomic_load(&tag_c));
    CHECK(cuGraphExecHostNodeSetParams(x, nd[1], &pc));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("an exec set after the update: c %d, a %d", atomic_load(&tag_c), atomic_load(&tag_a));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(cl));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuGraphLaunch(xc, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("with both graphs destroyed the execs run on: a %d, b %d, c %d", atomic_load(&tag_a),
         atomic_load(&tag_b), atomic_load(&tag_c));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphExecDestroy(x2));
    CHECK(cuGraphExecDestroy(xc));
}

static void destroy_node(void)
{
    CUgraphNode nd[3];
    CUgraph g = three_step(nd);
    CHECK(cuGraphDestroyNode(nd[1]));
    size_t n = 0, ne = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &ne));
    t_ok("a host node destroyed: %zu nodes, %zu edges, %zu host nodes", n, ne,
         count_nodes(g, CU_GRAPH_NODE_TYPE_HOST));
    CHECK(cuGraphDestroy(g));
}

static void captured(CUstream s)
{
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void *inc_args[] = {&p1, &n_words};
    CHECK(cuLaunchKernel(f_inc, t_blocks_for(N, 256), 1, 1, 256, 1, 1, 0, s, inc_args, NULL));
    CHECK(cuLaunchHostFunc(s, host_step, NULL));
    void *copy_args[] = {&p2, &d_out, &n_bytes};
    CHECK(cuLaunchKernel(f_copy, t_blocks_for(N, 256), 1, 1, 256, 1, 1, 0, s, copy_args, NULL));
    CUgraph g = NULL;
    CHECK(cuStreamEndCapture(s, &g));
    size_t ne = 0;
    CHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &ne));
    t_ok("captured cuLaunchHostFunc: %zu nodes, %zu host node, %zu edges", count_nodes(g, -1),
         count_nodes(g, CU_GRAPH_NODE_TYPE_HOST), ne);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    reset_p1();
    for (int i = 1; i <= LAUNCHES; i++) {
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        REQUIRE(atomic_load(&calls) == i, "captured, launch %d: %d calls", i, atomic_load(&calls));
        check_out((uint32_t)i, "captured host function");
    }
    t_ok("the captured host function ran once per launch, in order (%d)", !atomic_load(&bad_order));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    /* A stream callback cannot be captured: the capture fails. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT_ERR(cuStreamAddCallback(s, no_callback, NULL, 0));
    g = NULL;
    EXPECT_ERR(cuStreamEndCapture(s, &g));
    t_ok("cuStreamAddCallback in a capture fails, and so does the capture: %d", g == NULL);
}

static void branches(CUstream s)
{
    CUgraph g;
    CUgraphNode root, join, hn[BRANCHES];
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddEmptyNode(&root, g, NULL, 0));
    for (int i = 0; i < BRANCHES; i++) {
        CUDA_HOST_NODE_PARAMS hp = {branch, (void *)(uintptr_t)i};
        CHECK(cuGraphAddHostNode(&hn[i], g, &root, 1, &hp));
    }
    /* The join: a host node after all of them sees every bit set. */
    CHECK(cuGraphAddEmptyNode(&join, g, hn, BRANCHES));
    CUDA_HOST_NODE_PARAMS last = {count_a, NULL};
    CUgraphNode after;
    CHECK(cuGraphAddHostNode(&after, g, &join, 1, &last));
    t_ok("%d host nodes in parallel branches: %zu host nodes", BRANCHES,
         count_nodes(g, CU_GRAPH_NODE_TYPE_HOST));
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    atomic_store(&tag_a, 0);
    for (int i = 0; i < 3; i++) {
        atomic_store(&branch_bits, 0);
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        REQUIRE(atomic_load(&branch_bits) == ~0ull, "launch %d: branches %llx", i,
                (unsigned long long)atomic_load(&branch_bits));
    }
    t_ok("3 launches: %d branch calls, the node after the join ran %d times",
         atomic_load(&branch_calls), atomic_load(&tag_a));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

/* Through the shim: host nodes up to its bound, then OUT_OF_MEMORY; free again after. */
static void limit(void)
{
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_HOST_NODE_PARAMS hp = {count_a, NULL};
    CUgraphNode n;
    CUresult r = CUDA_SUCCESS;
    int made = 0;
    while (made < 100000 && (r = cuGraphAddHostNode(&n, g, NULL, 0, &hp)) == CUDA_SUCCESS)
        made++;
    REQUIRE(r == CUDA_ERROR_OUT_OF_MEMORY, "host node %d: %s", made, t_errname(r));
    t_ok("host nodes past the bound: CUDA_ERROR_OUT_OF_MEMORY after %d", made);
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddHostNode(&n, g, NULL, 0, &hp));
    t_ok("free again once their graph is destroyed");
    CHECK(cuGraphDestroy(g));
}

static void CUDA_CB never_returns(void *user)
{
    (void)user;
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* An exec of a graph of one host node that calls fn (the graph is left for the exit). */
static CUgraphExec one_host_node(CUhostFn fn)
{
    CUgraph g;
    CUgraphNode h;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_HOST_NODE_PARAMS hp = {fn, NULL};
    CHECK(cuGraphAddHostNode(&h, g, NULL, 0, &hp));
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    return x;
}

static void victim(CUstream s)
{
    CHECK(cuGraphLaunch(one_host_node(never_returns), s));
    CHECK(cuStreamSynchronize(s)); /* never returns: killed here */
}

static void CUDA_CB slow_step(void *user)
{
    (void)user;
    usleep(20 * 1000);
}

static void leave_capturing(CUstream s)
{
    CUgraphExec x = one_host_node(slow_step);
    /* A kernel of 300 ms first, so that the launches run after the client has gone. */
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction delay = t_get_function(mod, "delay_set");
    CUdeviceptr flag;
    CHECK(cuMemAlloc(&flag, 4096));
    unsigned int one = 1;
    unsigned long long ns = 300ull * 1000 * 1000;
    void *args[] = {&flag, &one, &ns};
    CHECK(cuLaunchKernel(delay, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    for (int i = 0; i < 8; i++)
        CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    t_ok("a 300-ms kernel and 8 launches of a slow host node queued, then a capture begun "
         "on their stream");
    /* The capture stays going: exit here, as a program that fails mid-capture does. */
    printf("PASS graph_host\n");
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv)
{
    int victim_mode = t_has_flag(argc, argv, "--victim");
    t_init("graph_host", victim_mode ? 0 : 300);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (victim_mode) victim(s);
    if (t_has_flag(argc, argv, "--leave-capturing")) leave_capturing(s);
    if (t_has_flag(argc, argv, "--limit")) {
        limit();
        t_pass();
    }
    CUmodule mod = t_load_module("kernels.ptx");
    f_inc = t_get_function(mod, "inc_u32");
    f_copy = t_get_function(mod, "copy_u8");
    CHECK(cuMemHostAlloc((void **)&p1, N * 4, 0));
    CHECK(cuMemHostAlloc((void **)&p2, N * 4, 0));
    CHECK(cuMemAlloc(&d_out, N * 4));

    explicit_graph(s);
    destroy_node();
    captured(s);
    branches(s);

    /* Left for the server to free when this client exits. */
    CUgraphNode nd[3];
    CUgraph left = three_step(nd);
    CUgraphExec left_exec;
    CHECK(cuGraphInstantiate(&left_exec, left, 0));
    reset_p1();
    CHECK(cuGraphLaunch(left_exec, s));
    CHECK(cuStreamSynchronize(s));
    check_out(1, "the graph left at exit");
    t_ok("a graph with a host node and its exec left for the exit");
    t_pass();
}
