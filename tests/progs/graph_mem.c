/* graph_mem: graph memory allocation and free nodes.
 *
 * A graph [alloc a] -> [memset a = 7] -> [kernel a += 1] -> [memcpy pinned = a] -> [free a]
 * is launched three times, each checked; the nodes' parameters are read back. A graph that
 * allocates without freeing leaves its memory allocated after its launch: it is copied
 * from and freed with cuMemFreeAsync outside the graph, launched again and freed with
 * cuMemFree. The generic form (cuGraphAddNode) adds both node types. Refused, as by the
 * driver: a second free node of one allocation in a graph, and a free node of memory no
 * allocation node made. (Using an address after its exec is gone is not checked, by the
 * driver or the shim.) */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1024 /* words */

static CUfunction f_inc;

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(int dev)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = N * 4;
    return p;
}

/* Memset and memcpy nodes name their context: the real driver refuses a memset node of none
 * (CUDA_ERROR_INVALID_VALUE on an H100), which main prints. */
static CUcontext g_ctx;

static int all_are(const uint32_t *w, uint32_t v)
{
    for (int i = 0; i < N; i++)
        if (w[i] != v) return 0;
    return 1;
}

static void explicit_nodes(CUstream s, uint32_t *res, CUdeviceptr other)
{
    CUgraph g;
    CUgraphNode na, ns, nk, nc, nf, bad;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(0);
    CHECK(cuGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
    CUdeviceptr a = ap.dptr;
    CUDA_MEMSET_NODE_PARAMS mp = {.dst = a, .value = 7, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphAddMemsetNode(&ns, g, &na, 1, &mp, g_ctx));
    uint64_t n = N;
    void *args[] = {&a, &n};
    CUDA_KERNEL_NODE_PARAMS kp = {.func = f_inc,
                                  .gridDimX = t_blocks_for(N, 256),
                                  .gridDimY = 1,
                                  .gridDimZ = 1,
                                  .blockDimX = 256,
                                  .blockDimY = 1,
                                  .blockDimZ = 1,
                                  .kernelParams = args};
    CHECK(cuGraphAddKernelNode(&nk, g, &ns, 1, &kp));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = a;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = res;
    cp.WidthInBytes = N * 4;
    cp.Height = cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&nc, g, &nk, 1, &cp, g_ctx));
    CHECK(cuGraphAddMemFreeNode(&nf, g, &nc, 1, a));
    EXPECT(cuGraphAddMemFreeNode(&bad, g, &nf, 1, a), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddMemFreeNode(&bad, g, &nf, 1, other), CUDA_ERROR_INVALID_VALUE);
    t_ok("a second free of one allocation, and a free of cuMemAlloc memory: INVALID_VALUE");

    CUDA_MEM_ALLOC_NODE_PARAMS got;
    CHECK(cuGraphMemAllocNodeGetParams(na, &got));
    CUdeviceptr freed = 0;
    CHECK(cuGraphMemFreeNodeGetParams(nf, &freed));
    if (got.dptr != a || got.bytesize != N * 4 || got.poolProps.location.id != 0 || freed != a)
        t_fail(__FILE__, __LINE__, "parameters read back differ");
    t_ok("alloc node: %zu bytes on device %d, free node frees its address", got.bytesize,
         got.poolProps.location.id);

    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        memset(res, 0, N * 4);
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        if (!all_are(res, 8)) t_fail(__FILE__, __LINE__, "launch %d: res[0]=%u", i, res[0]);
        t_ok("launch %d: every word 8", i);
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

/* Graph i of two_graphs: memory allocated, set to v, incremented, copied to res and freed,
 * all in the graph; by nodes, or captured from stream-ordered calls on s. */
static CUgraph alloc_free_graph(CUstream s, uint32_t *res, size_t words, unsigned v, int captured,
                                CUdeviceptr *a)
{
    CUgraph g;
    uint64_t n = words;
    void *args[] = {a, &n};
    if (captured) {
        CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK(cuMemAllocAsync(a, words * 4, s));
        CHECK(cuMemsetD32Async(*a, v, words, s));
        CHECK(cuLaunchKernel(f_inc, t_blocks_for(N, 256), 1, 1, 256, 1, 1, 0, s, args, NULL));
        CHECK(cuMemcpyDtoHAsync(res, *a, words * 4, s));
        CHECK(cuMemFreeAsync(*a, s));
        CHECK(cuStreamEndCapture(s, &g));
        return g;
    }
    CUgraphNode na, ns, nk, nc, nf;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(0);
    ap.bytesize = words * 4;
    CHECK(cuGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
    *a = ap.dptr;
    CUDA_MEMSET_NODE_PARAMS mp = {
        .dst = *a, .value = v, .elementSize = 4, .width = words, .height = 1};
    CHECK(cuGraphAddMemsetNode(&ns, g, &na, 1, &mp, g_ctx));
    CUDA_KERNEL_NODE_PARAMS kp = {.func = f_inc,
                                  .gridDimX = t_blocks_for(N, 256),
                                  .gridDimY = 1,
                                  .gridDimZ = 1,
                                  .blockDimX = 256,
                                  .blockDimY = 1,
                                  .blockDimZ = 1,
                                  .kernelParams = args};
    CHECK(cuGraphAddKernelNode(&nk, g, &ns, 1, &kp));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = *a;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = res;
    cp.WidthInBytes = words * 4;
    cp.Height = cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&nc, g, &nk, 1, &cp, g_ctx));
    CHECK(cuGraphAddMemFreeNode(&nf, g, &nc, 1, *a));
    return g;
}

static void launch_check(CUgraphExec x, CUstream s, uint32_t *res, size_t words, unsigned want,
                         const char *what)
{
    memset(res, 0, N * 4);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    for (size_t i = 0; i < words; i++)
        if (res[i] != want)
            t_fail(__FILE__, __LINE__, "%s: word %zu is %u, want %u", what, i, res[i], want);
}

/* Two graphs, each allocating memory and freeing it in itself, launched in turn on one
 * stream; then the first destroyed and the second launched again. The driver may give the
 * second allocation addresses of the first (the first's base, or inside it): it did on an
 * H100 for PyTorch's captures, and
 * MPSSHIM_CPUDRV_GRAPHMEM_ALIAS=1 makes the CPU test driver do it (said only then: with the
 * real driver, whether it does is its own choice, which native and shim runs need not
 * share). */
static void two_graphs(CUstream s, uint32_t *res, int captured)
{
    const char *how = captured ? "captured" : "by nodes";
    CUgraph g[2];
    CUgraphExec x[2];
    CUdeviceptr a[2];
    size_t words[2] = {N, N / 4};
    for (int i = 0; i < 2; i++) {
        g[i] = alloc_free_graph(s, res, words[i], 20 + i, captured, &a[i]);
        CHECK(cuGraphInstantiate(&x[i], g[i], 0));
    }
    if (getenv("MPSSHIM_CPUDRV_GRAPHMEM_ALIAS"))
        t_ok("two graphs %s: the second's allocation inside the first's addresses: %s", how,
             a[1] >= a[0] && a[1] - a[0] < words[0] * 4 ? "yes" : "no");
    for (int r = 0; r < 4; r++)
        launch_check(x[r % 2], s, res, words[r % 2], 21 + r % 2, "a graph launched in turn");
    t_ok("two graphs %s, each freeing its allocation: launched in turn, all words right", how);
    CHECK(cuGraphExecDestroy(x[0]));
    CHECK(cuGraphDestroy(g[0]));
    launch_check(x[1], s, res, words[1], 22, "the second graph after the first went");
    CHECK(cuGraphExecDestroy(x[1]));
    CHECK(cuGraphDestroy(g[1]));
    t_ok("two graphs %s: the second runs on after the first is destroyed", how);
}

/* Allocated by the graph, used and freed outside it. */
static void left_allocated(CUstream s, uint32_t *res)
{
    CUgraph g;
    CUgraphNode na, ns;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.alloc.bytesize = N * 4;
    CHECK(cuGraphAddNode(&na, g, NULL, NULL, 0, &p));
    CUdeviceptr a = p.alloc.dptr;
    if (!a) t_fail(__FILE__, __LINE__, "cuGraphAddNode gave no address");
    CUDA_MEMSET_NODE_PARAMS mp = {.dst = a, .value = 5, .elementSize = 4, .width = N, .height = 1};
    CHECK(cuGraphAddMemsetNode(&ns, g, &na, 1, &mp, g_ctx));
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    cuuint64_t used = 0;
    CHECK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
    t_ok("graph memory in use after the launch: %s", used >= N * 4 ? "at least its size" : "less");
    CHECK(cuMemcpyDtoH(res, a, N * 4));
    if (!all_are(res, 5)) t_fail(__FILE__, __LINE__, "after the launch: res[0]=%u", res[0]);
    t_ok("left allocated by the graph: every word 5, copied outside it");
    CHECK(cuMemFreeAsync(a, s));
    CHECK(cuStreamSynchronize(s));
    mp.value = 6;
    CHECK(cuGraphExecMemsetNodeSetParams(x, ns, &mp, g_ctx));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(res, a, N * 4));
    if (!all_are(res, 6)) t_fail(__FILE__, __LINE__, "second launch: res[0]=%u", res[0]);
    t_ok("freed with cuMemFreeAsync, launched again: every word 6");
    CHECK(cuMemFree(a));
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    t_ok("freed with cuMemFree, trimmed");
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    t_init("graph_mem", 120);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    g_ctx = ctx;
    {
        CUgraph pg;
        CUgraphNode pn;
        CUdeviceptr pd;
        CHECK(cuMemAlloc(&pd, 4096));
        CHECK(cuGraphCreate(&pg, 0));
        CUDA_MEMSET_NODE_PARAMS pm = {.dst = pd, .elementSize = 4, .width = 16, .height = 1};
        const char *name = NULL;
        cuGetErrorName(cuGraphAddMemsetNode(&pn, pg, NULL, 0, &pm, NULL), &name);
        t_ok("a memset node of no context: %s", name ? name : "?");
        CHECK(cuGraphDestroy(pg));
        CHECK(cuMemFree(pd));
    }
    CUmodule mod = t_load_module("kernels.ptx");
    f_inc = t_get_function(mod, "inc_u32");
    uint32_t *res;
    CUdeviceptr other;
    CHECK(cuMemHostAlloc((void **)&res, N * 4, 0));
    CHECK(cuMemAlloc(&other, N * 4));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    explicit_nodes(s, res, other);
    left_allocated(s, res);
    two_graphs(s, res, 0);
    two_graphs(s, res, 1);
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(other));
    CHECK(cuMemFreeHost(res));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
