/* capture_alloc: stream-ordered allocation in a stream capture. On the driver, a captured
 * cuMemAllocAsync / cuMemAllocFromPoolAsync adds a memory allocation node to the graph (its
 * address fixed at capture, the graph's memory when it runs) and a captured cuMemFreeAsync
 * a memory free node.
 *
 *   capture_alloc
 *       A capture [alloc a] -> [memset a = 7] -> [kernel a += 1] -> [copy a to another
 *       buffer] -> [free a], launched three times, each checked. An allocation from a
 *       created pool captured without its free: the launch leaves it allocated; it is read
 *       and freed outside the graph (cuMemFreeAsync), launched again, and then freed by a
 *       second captured graph. A capture invalidated while it holds an allocation: its end
 *       fails, and the next capture works.
 *   capture_alloc --limit MIB   (through the shim only, with a memory limit of MIB MiB on
 *       device 0 in MPSSHIM_PINNED_DEVICE_MEM_LIMIT) a captured allocation beyond the limit
 *       is refused with CUDA_ERROR_OUT_OF_MEMORY and the capture goes on; what a graph
 *       holds counts until the graph goes; an invalidated capture and one whose stream is
 *       destroyed give their allocations' room back.
 *   capture_alloc --victim      captures an allocation and a memset, prints `ready` and
 *       sleeps mid-capture, to be killed (tests/ci.sh: the server must let go of it all). */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 1024 /* words */
#define MIB (1ull << 20)

static CUfunction f_inc;
static uint32_t res[N];

static void inc(CUstream s, CUdeviceptr p)
{
    uint64_t n = N;
    void *args[] = {&p, &n};
    CHECK(cuLaunchKernel(f_inc, t_blocks_for(N, 256), 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void expect_words(CUdeviceptr p, uint32_t v, const char *when)
{
    memset(res, 0, sizeof res);
    CHECK(cuMemcpyDtoH(res, p, sizeof res));
    for (int i = 0; i < N; i++)
        REQUIRE(res[i] == v, "%s: word %d is %u, want %u", when, i, res[i], v);
}

static CUstreamCaptureStatus status(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CHECK(cuStreamIsCapturing(s, &st));
    return st;
}

/* How many of g's nodes are of type t. */
static int count_type(CUgraph g, CUgraphNodeType t)
{
    CUgraphNode nodes[16];
    size_t n = 16;
    int k = 0;
    CHECK(cuGraphGetNodes(g, nodes, &n));
    for (size_t i = 0; i < n && i < 16; i++) {
        CUgraphNodeType got;
        CHECK(cuGraphNodeGetType(nodes[i], &got));
        k += got == t;
    }
    return k;
}

/* Asked in relaxed mode: the driver counts a pool query among the calls a global capture
 * forbids (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED on an H100). */
static cuuint64_t pool_used(CUmemoryPool p)
{
    cuuint64_t v = 0;
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK(cuThreadExchangeStreamCaptureMode(&m));
    CHECK(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    CHECK(cuThreadExchangeStreamCaptureMode(&m));
    return v;
}

/* The whole lifetime of an allocation in one captured graph. */
static void whole_lifetime(CUstream s, CUdeviceptr out)
{
    CUmemoryPool cur;
    CHECK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr a = 0;
    CHECK(cuMemAllocAsync(&a, N * 4, s));
    REQUIRE(a != 0, "a captured cuMemAllocAsync gave no address");
    t_ok("captured cuMemAllocAsync: an address; the current pool gives nothing: %d",
         pool_used(cur) == 0);
    CHECK(cuMemsetD32Async(a, 7, N, s));
    inc(s, a);
    CHECK(cuMemcpyDtoDAsync(out, a, N * 4, s));
    CHECK(cuMemFreeAsync(a, s));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g));
    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    t_ok("captured graph: %zu nodes, %d allocation, %d memset, %d kernel, %d memcpy, %d free", n,
         count_type(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC), count_type(g, CU_GRAPH_NODE_TYPE_MEMSET),
         count_type(g, CU_GRAPH_NODE_TYPE_KERNEL), count_type(g, CU_GRAPH_NODE_TYPE_MEMCPY),
         count_type(g, CU_GRAPH_NODE_TYPE_MEM_FREE));
    CUgraphNode root;
    size_t nroot = 1;
    CHECK(cuGraphGetRootNodes(g, &root, &nroot));
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    CHECK(cuGraphMemAllocNodeGetParams(root, &ap));
    REQUIRE(ap.dptr == a, "the allocation node's address is not the one captured");
    t_ok("allocation node: at least the bytes asked for, on device %d, at the captured address",
         ap.poolProps.location.id);
    REQUIRE(ap.bytesize >= N * 4, "the allocation node has %zu bytes", ap.bytesize);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        CHECK(cuMemsetD32Async(out, 0, N, s));
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuStreamSynchronize(s));
        expect_words(out, 8, "after a launch");
        t_ok("launch %d: every word copied out is 8", i);
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

/* Allocated in one graph from a created pool, freed outside it, then in another graph. */
static void left_allocated(CUstream s)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUdeviceptr a = 0;
    CHECK(cuMemAllocFromPoolAsync(&a, N * 4, pool, s));
    CHECK(cuMemsetD32Async(a, 5, N, s));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g));
    t_ok("captured cuMemAllocFromPoolAsync: the pool gives nothing: %d", pool_used(pool) == 0);
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_words(a, 5, "left allocated by the launch");
    t_ok("left allocated by the launch: every word 5, read outside the graph");
    CHECK(cuMemFreeAsync(a, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_words(a, 5, "launched again");
    t_ok("freed with cuMemFreeAsync, launched again: every word 5");

    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    inc(s, a);
    CHECK(cuMemFreeAsync(a, s));
    CUgraph g2;
    CHECK(cuStreamEndCapture(s, &g2));
    CUgraphExec x2;
    CHECK(cuGraphInstantiate(&x2, g2, 0));
    CHECK(cuGraphLaunch(x2, s));
    CHECK(cuStreamSynchronize(s));
    t_ok("freed by a second captured graph: %d free node",
         count_type(g2, CU_GRAPH_NODE_TYPE_MEM_FREE));
    CHECK(cuGraphExecDestroy(x2));
    CHECK(cuGraphDestroy(g2));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemPoolDestroy(pool));
}

/* A capture invalidated while it holds an allocation; another capture works after it. */
static void invalidated(CUstream s, CUdeviceptr out)
{
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr a = 0;
    CHECK(cuMemAllocAsync(&a, N * 4, s));
    CHECK(cuMemsetD32Async(a, 3, N, s));
    EXPECT_ERR(cuStreamQuery(s)); /* illegal in a capture: invalidates it */
    REQUIRE(status(s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "the capture is not invalidated");
    CUgraph g = NULL;
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQUIRE(g == NULL && status(s) == CU_STREAM_CAPTURE_STATUS_NONE, "the capture did not end");
    t_ok("invalidated holding an allocation: the end says CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&a, N * 4, s));
    CHECK(cuMemsetD32Async(a, 9, N, s));
    CHECK(cuMemcpyDtoDAsync(out, a, N * 4, s));
    CHECK(cuMemFreeAsync(a, s));
    CHECK(cuStreamEndCapture(s, &g));
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    expect_words(out, 9, "the capture after");
    t_ok("the next capture allocates and runs: every word 9");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
}

/* 1 if `bytes` can be allocated (and freed again) with cuMemAlloc. */
static int fits(uint64_t bytes)
{
    CUdeviceptr p;
    CUresult r = cuMemAlloc(&p, bytes);
    if (r == CUDA_SUCCESS)
        CHECK(cuMemFree(p));
    else
        REQUIRE(r == CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: %s", t_errname(r));
    return r == CUDA_SUCCESS;
}

static void limit(CUstream s, uint64_t lim)
{
    uint64_t half = lim / 2, most = lim / 4 * 3;
    REQUIRE(fits(most), "%llu bytes do not fit before any capture", (unsigned long long)most);
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr a = 0, b = 0;
    CHECK(cuMemAllocAsync(&a, half, s));
    EXPECT(cuMemAllocAsync(&b, lim, s), CUDA_ERROR_OUT_OF_MEMORY);
    REQUIRE(status(s) == CU_STREAM_CAPTURE_STATUS_ACTIVE, "the refusal ended the capture");
    t_ok("a captured allocation beyond the limit: CUDA_ERROR_OUT_OF_MEMORY, the capture goes on");
    CHECK(cuMemsetD32Async(a, 1, N, s));
    CHECK(cuMemFreeAsync(a, s));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g));
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    REQUIRE(!fits(most), "the graph's allocation does not count");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    REQUIRE(fits(most), "the graph's allocation still counts after the graph went");
    t_ok("the graph's allocation counts while the graph lives");

    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&a, most, s));
    EXPECT(cuMemAllocAsync(&b, half, s), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_ERR(cuStreamQuery(s));
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQUIRE(fits(most), "an invalidated capture's allocation still counts");
    t_ok("an invalidated capture's allocation: its room given back");

    CUstream t;
    CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture(t, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&a, most, t));
    CHECK(cuStreamDestroy(t));
    REQUIRE(fits(most), "the allocation of a capture whose stream went still counts");
    t_ok("a capture's stream destroyed mid-capture: its allocation's room given back");
}

static void victim(CUstream s)
{
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr a = 0;
    CHECK(cuMemAllocAsync(&a, MIB, s));
    CHECK(cuMemsetD32Async(a, 1, MIB / 4, s));
    printf("ready\n");
    fflush(stdout);
    sleep(600);
}

int main(int argc, char **argv)
{
    int victim_mode = t_has_flag(argc, argv, "--victim");
    t_init("capture_alloc", victim_mode ? 0 : 120);
    uint64_t lim = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--limit") == 0) lim = strtoull(argv[i + 1], NULL, 10) * MIB;
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    int pools = 0;
    CHECK(cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev));
    if (!pools) t_skip("device 0 has no memory pools");
    CUmodule mod = t_load_module("kernels.ptx");
    f_inc = t_get_function(mod, "inc_u32");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    if (victim_mode) victim(s);
    if (lim) {
        limit(s, lim);
    } else {
        CUdeviceptr out;
        CHECK(cuMemAlloc(&out, N * 4));
        whole_lifetime(s, out);
        left_allocated(s);
        invalidated(s, out);
        CHECK(cuMemFree(out));
    }
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    t_pass();
}
