/* graph_cond [--hold]: CUDA graph conditional nodes through the driver API. IF nodes whose
 * handle is set from device memory by a kernel (set_cond of cond.ptx) and reset to its
 * default at each launch (CU_GRAPH_COND_ASSIGN_DEFAULT), an IF with an else body, a WHILE
 * loop counting down (countdown), a SWITCH with three bodies, an IF nested in a WHILE body
 * on a handle of the outer graph; each instantiated once and launched several times with
 * new inputs, the results checked. Bodies belong to their node: destroying one alone is
 * refused. With --hold it builds such graphs, launches them,
 * prints `ready` and sleeps, for the test that kills it (tests/ci.sh). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 256 /* words of the buffer */

static CUfunction f_set, f_countdown, f_inc, f_fill;
static CUdeviceptr d_buf, d_val, d_cnt;
static CUstream s;
static CUcontext g_ctx; /* handles and conditional nodes name their context */

/* A kernel node of fn(a, b, ...) with one block of N threads, after dep (or none). */
static CUgraphNode kernel(CUgraph g, const CUgraphNode *dep, CUfunction fn, void **args)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = fn;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = N;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    CUgraphNode n;
    CHECK(cuGraphAddKernelNode(&n, g, dep, dep ? 1 : 0, &p));
    return n;
}

static CUgraphNode set_node(CUgraph g, const CUgraphNode *dep, CUgraphConditionalHandle h,
                            CUdeviceptr from)
{
    void *args[] = {&h, &from};
    return kernel(g, dep, f_set, args);
}

static CUgraphNode countdown_node(CUgraph g, const CUgraphNode *dep, CUgraphConditionalHandle h)
{
    void *args[] = {&h, &d_cnt};
    return kernel(g, dep, f_countdown, args);
}

static CUgraphNode inc_node(CUgraph g, const CUgraphNode *dep)
{
    unsigned long long n = N;
    void *args[] = {&d_buf, &n};
    return kernel(g, dep, f_inc, args);
}

static CUgraphNode fill_node(CUgraph g, const CUgraphNode *dep, unsigned v)
{
    unsigned long long n = N;
    void *args[] = {&d_buf, &v, &n};
    return kernel(g, dep, f_fill, args);
}

/* A conditional node after dep (or none); its bodies in body[0..size). */
static CUgraphNode cond_node(CUgraph g, const CUgraphNode *dep, CUgraphConditionalHandle h,
                             CUgraphConditionalNodeType type, unsigned size, CUgraph *body)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.ctx = g_ctx;
    p.conditional.type = type;
    p.conditional.size = size;
    CUgraphNode n;
    CHECK(cuGraphAddNode(&n, g, dep, NULL, dep ? 1 : 0, &p));
    REQUIRE(p.conditional.phGraph_out, "no body graphs given back");
    for (unsigned i = 0; i < size; i++) {
        body[i] = p.conditional.phGraph_out[i];
        REQUIRE(body[i], "body %u is NULL", i);
    }
    return n;
}

static CUgraphConditionalHandle handle(CUgraph g, unsigned dflt)
{
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, g, g_ctx, dflt, CU_GRAPH_COND_ASSIGN_DEFAULT));
    return h;
}

/* Everything goes on s, in order with the launches (s does not wait for the NULL stream). */
static void put(CUdeviceptr d, unsigned v)
{
    CHECK(cuMemcpyHtoDAsync(d, &v, sizeof v, s));
    CHECK(cuStreamSynchronize(s));
}

static void set_buf(unsigned v)
{
    CHECK(cuMemsetD32Async(d_buf, v, N, s));
}

static void run(CUgraphExec x)
{
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
}

/* The buffer's value, which must be the same in every word. */
static unsigned buf_value(void)
{
    static unsigned h[N];
    CHECK(cuMemcpyDtoHAsync(h, d_buf, sizeof h, s));
    CHECK(cuStreamSynchronize(s));
    for (int i = 1; i < N; i++)
        REQUIRE(h[i] == h[0], "word %d is %u, word 0 %u", i, h[i], h[0]);
    return h[0];
}

/* IF on a value from device memory (default 0 each launch); an IF whose default, 1, is
 * applied again at each launch after a kernel set it to 0; IF/ELSE. */
static void if_nodes(void)
{
    CUgraph g, b[2], c[1];
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle h = handle(g, 0), hd = handle(g, 1);
    CUgraphNode set = set_node(g, NULL, h, d_val);
    CUgraphNode n = cond_node(g, &set, h, CU_GRAPH_COND_TYPE_IF, 1, b);
    inc_node(b[0], NULL);
    CUgraphNodeType t;
    CHECK(cuGraphNodeGetType(n, &t));
    REQUIRE(t == CU_GRAPH_NODE_TYPE_CONDITIONAL, "node type %d", (int)t);
    t_ok("an IF node is a CU_GRAPH_NODE_TYPE_CONDITIONAL node with one body");
    /* hd: 1 at each launch; the IF runs, then a kernel sets hd to 0 (d_zero). */
    CUdeviceptr d_zero = d_val + 4;
    put(d_zero, 0);
    CUgraphNode n2 = cond_node(g, &n, hd, CU_GRAPH_COND_TYPE_IF, 1, c);
    inc_node(c[0], NULL);
    set_node(g, &n2, hd, d_zero);
    EXPECT_ERR(cuGraphDestroy(b[0]));
    t_ok("a body graph cannot be destroyed alone");

    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    set_buf(0);
    const unsigned vals[] = {0, 1, 1, 0, 5, 0};
    unsigned want = 0;
    for (unsigned i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        put(d_val, vals[i]);
        run(x);
        want += (vals[i] != 0) + 1;
        unsigned got = buf_value();
        REQUIRE(got == want, "launch %u (value %u): %u, want %u", i, vals[i], got, want);
        printf("IF launch %u: value %u -> buffer %u\n", i, vals[i], got);
    }
    t_ok("IF nodes: the body runs when the value is not 0; defaults applied at each launch");
    CHECK(cuGraphExecDestroy(x));

    /* The IF node goes with its bodies (naming one after that would be a stale handle:
     * undefined natively, refused by the server). */
    CHECK(cuGraphDestroyNode(n));
    CHECK(cuGraphDestroy(g));

    CUgraph g2, e[2];
    CHECK(cuGraphCreate(&g2, 0));
    CUgraphConditionalHandle he = handle(g2, 0);
    set = set_node(g2, NULL, he, d_val);
    cond_node(g2, &set, he, CU_GRAPH_COND_TYPE_IF, 2, e);
    fill_node(e[0], NULL, 11);
    fill_node(e[1], NULL, 22);
    CHECK(cuGraphInstantiate(&x, g2, 0));
    for (unsigned v = 0; v < 4; v++) {
        put(d_val, v & 1);
        run(x);
        unsigned got = buf_value();
        REQUIRE(got == ((v & 1) ? 11u : 22u), "IF/ELSE with %u: %u", v & 1, got);
        printf("IF/ELSE launch %u: value %u -> buffer %u\n", v, v & 1, got);
    }
    t_ok("IF/ELSE: the second body runs when the value is 0");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g2));
}

/* A WHILE loop counting down, its body holding an IF on a handle of the outer graph. */
static void while_node(void)
{
    CUgraph g, w[1], in[1];
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle hw = handle(g, 1), hi = handle(g, 0);
    cond_node(g, NULL, hw, CU_GRAPH_COND_TYPE_WHILE, 1, w);
    CUgraphNode k = inc_node(w[0], NULL);
    k = countdown_node(w[0], &k, hw);
    k = set_node(w[0], &k, hi, d_val);
    cond_node(w[0], &k, hi, CU_GRAPH_COND_TYPE_IF, 1, in);
    inc_node(in[0], NULL);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    const unsigned counts[] = {5, 1, 12, 3};
    for (unsigned i = 0; i < 4; i++) {
        set_buf(0);
        put(d_cnt, counts[i]);
        put(d_val, i & 1);
        run(x);
        unsigned got = buf_value(), left;
        CHECK(cuMemcpyDtoHAsync(&left, d_cnt, sizeof left, s));
        CHECK(cuStreamSynchronize(s));
        unsigned want = counts[i] * ((i & 1) + 1);
        REQUIRE(got == want && left == 0, "WHILE from %u (inner %u): %u, counter %u, want %u",
                counts[i], i & 1, got, left, want);
        printf("WHILE launch %u: %u iterations, inner IF %u -> buffer %u\n", i, counts[i], i & 1,
               got);
    }
    t_ok("WHILE: the body runs until its kernel sets the value to 0, nested IF included");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

/* SWITCH with three bodies; a value past the last runs none. */
static void switch_node(void)
{
    CUgraph g, b[3];
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle h = handle(g, 0);
    CUgraphNode set = set_node(g, NULL, h, d_val);
    cond_node(g, &set, h, CU_GRAPH_COND_TYPE_SWITCH, 3, b);
    for (unsigned i = 0; i < 3; i++)
        fill_node(b[i], NULL, 100 + i);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    const unsigned vals[] = {2, 0, 1, 3, 1, 7};
    for (unsigned i = 0; i < 6; i++) {
        set_buf(9);
        put(d_val, vals[i]);
        run(x);
        unsigned got = buf_value(), want = vals[i] < 3 ? 100 + vals[i] : 9;
        REQUIRE(got == want, "SWITCH on %u: %u, want %u", vals[i], got, want);
        printf("SWITCH launch %u: value %u -> buffer %u\n", i, vals[i], got);
    }
    t_ok("SWITCH: body n runs for value n, none past the last");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

/* Graphs with conditional nodes, instantiated and launched, then held. */
static void hold(void)
{
    CUgraph g, w[1], in[2];
    CHECK(cuGraphCreate(&g, 0));
    CUgraphConditionalHandle hw = handle(g, 1), hi = handle(g, 0);
    cond_node(g, NULL, hw, CU_GRAPH_COND_TYPE_WHILE, 1, w);
    CUgraphNode k = countdown_node(w[0], NULL, hw);
    k = set_node(w[0], &k, hi, d_val);
    cond_node(w[0], &k, hi, CU_GRAPH_COND_TYPE_IF, 2, in);
    inc_node(in[0], NULL);
    fill_node(in[1], NULL, 3);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    put(d_cnt, 3);
    put(d_val, 1);
    run(x);
    CUgraph g2, b[3];
    CHECK(cuGraphCreate(&g2, 0));
    cond_node(g2, NULL, handle(g2, 1), CU_GRAPH_COND_TYPE_SWITCH, 3, b);
    printf("ready\n");
    fflush(stdout);
    sleep(600);
}

int main(int argc, char **argv)
{
    int holding = t_has_flag(argc, argv, "--hold");
    t_init("graph_cond", holding ? 0 : 300);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    g_ctx = ctx;
    /* The driver's answer for a handle of no context, printed, so that the tiers compare
     * the shim's with it rather than assume one. */
    CUgraph pg;
    CUgraphConditionalHandle ph;
    CHECK(cuGraphCreate(&pg, 0));
    const char *pn = NULL;
    cuGetErrorName(cuGraphConditionalHandleCreate(&ph, pg, NULL, 0, 0), &pn);
    t_ok("cuGraphConditionalHandleCreate with no context: %s", pn ? pn : "?");
    CHECK(cuGraphDestroy(pg));
    CUmodule kmod = t_load_module("kernels.ptx"), cmod = t_load_module("cond.ptx");
    f_inc = t_get_function(kmod, "inc_u32");
    f_fill = t_get_function(kmod, "fill_u32");
    f_set = t_get_function(cmod, "set_cond");
    f_countdown = t_get_function(cmod, "countdown");
    CHECK(cuMemAlloc(&d_buf, N * 4));
    CHECK(cuMemAlloc(&d_val, 8));
    CHECK(cuMemAlloc(&d_cnt, 4));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (holding) hold();
    if_nodes();
    while_node();
    switch_node();
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(d_buf));
    CHECK(cuMemFree(d_val));
    CHECK(cuMemFree(d_cnt));
    CHECK(cuModuleUnload(cmod));
    CHECK(cuModuleUnload(kmod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
