// Self-test: stream-ordered allocation in a stream capture. A captured cuMemAllocAsync /
// cuMemAllocFromPoolAsync becomes a memory allocation node (its address fixed at capture,
// the pool giving nothing) and a captured cuMemFreeAsync a memory free node, of graph
// memory only; the graph allocates and frees at each launch. An allocation left allocated
// by a launch is freed outside the graph, or in another captured graph. A capture that
// fails (invalidated, or its stream destroyed) takes its graph memory with it. Each part
// frees what it made.
#include "selftest.h"

#include <string.h>

#define N 1024 // words per allocation

// Not in CUDA 13's cuda.h, still exported.
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);

static CUstream s;
static unsigned *pin; // pinned, N words

static cuuint64_t gmem(CUgraphMem_attribute a)
{
    cuuint64_t v = ~0ull;
    CK(cuDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

static cuuint64_t pool_used(CUmemoryPool p)
{
    cuuint64_t v = ~0ull;
    CK(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    return v;
}

static CUstreamCaptureStatus status(void)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CK(cuStreamIsCapturing(s, &st));
    return st;
}

static void inc(CUdeviceptr p)
{
    unsigned long long n = N;
    void *args[] = {&p, &n};
    CK(cuLaunchKernel(st_fn("inc_u32"), 4, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static int pin_is(unsigned v)
{
    for (int i = 0; i < N; i++)
        if (pin[i] != v) return 0;
    return 1;
}

// The types of g's nodes, in a chain from its one root, equal `want` (n of them).
static int chain_is(CUgraph g, const CUgraphNodeType *want, size_t n)
{
    CUgraphNode node[8];
    size_t count = 8;
    if (cuGraphGetRootNodes(g, node, &count) || count != 1) return 0;
    CUgraphNode cur = node[0];
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        if (cuGraphNodeGetType(cur, &t) || t != want[i]) return 0;
        count = 8;
        if (cuGraphNodeGetDependentNodes(cur, node, NULL, &count)) return 0;
        if (count != (i + 1 < n ? 1u : 0u)) return 0;
        cur = node[0];
    }
    return 1;
}

// alloc -> memset 7 -> kernel +1 -> copy to pinned -> free, captured, launched three times.
static void whole_lifetime(CUmemoryPool d0)
{
    cuuint64_t reserved = gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr a = 0, z = 1;
    CK(cuMemAllocAsync(&a, N * 4, s));
    CHECK(a != 0);
    CHECK(pool_used(d0) == 0); // the graph's memory, not the pool's
    CHECK(gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == reserved + N * 4);
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    CUstreamCaptureStatus st;
    CK(cuStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &ndeps));
    CHECK(ndeps == 1);
    CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
    if (ndeps == 1) CK(cuGraphNodeGetType(deps[0], &t));
    CHECK(t == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    CK(cuGraphMemAllocNodeGetParams(deps[0], &ap));
    CHECK(ap.dptr == a && ap.bytesize == N * 4 && ap.poolProps.location.id == 0 &&
          ap.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    CK(cuMemAllocAsync(&z, 0, s)); // nothing allocated: no node
    CHECK(z == 0);
    CK(cuMemsetD32Async(a, 7, N, s));
    inc(a);
    CK(cuMemcpyDtoHAsync(pin, a, N * 4, s));
    CK(cuMemFreeAsync(a, s));
    EXPECT(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE); // twice in one graph
    CHECK(status() == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    static const CUgraphNodeType want[] = {CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_MEMSET,
                                           CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
                                           CU_GRAPH_NODE_TYPE_MEM_FREE};
    CHECK(chain_is(g, want, 5));
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        memset(pin, 0, N * 4);
        CK(cuGraphLaunch(x, s));
        CK(cuStreamSynchronize(s));
        CHECK(pin_is(8));
    }
    CHECK(gmem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CHECK(gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == reserved);
}

// From a created pool: its properties (device 0 here), none of its memory. Left allocated
// by the launch, then freed outside (cuMemFreeAsync) and, after the next launch, in a second
// captured graph; ordinary memory cannot be freed in a capture.
static void left_allocated(CUmemoryPool d0)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr plain;
    CK(cuMemAllocAsync(&plain, 64, s));
    CK(cuStreamSynchronize(s));

    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUdeviceptr a = 0;
    CK(cuMemAllocFromPoolAsync(&a, N * 4, pool, s));
    CHECK(pool_used(pool) == 0);
    CK(cuMemsetD32Async(a, 5, N, s));
    EXPECT(cuMemFreeAsync(plain, s), CUDA_ERROR_INVALID_VALUE); // not graph memory
    CHECK(status() == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    CHECK(gmem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == N * 4);
    CK(cuMemcpyDtoH(pin, a, N * 4));
    CHECK(pin_is(5));
    EXPECT(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE); // its allocation still allocated
    CK(cuMemFreeAsync(a, s));
    CK(cuStreamSynchronize(s));
    CHECK(gmem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));

    // The allocation freed by another graph, captured.
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    inc(a);
    CK(cuMemcpyDtoHAsync(pin, a, N * 4, s));
    CK(cuMemFreeAsync(a, s));
    CUgraph g2;
    CK(cuStreamEndCapture(s, &g2));
    CUgraphExec x2;
    CK(cuGraphInstantiate(&x2, g2, 0));
    CK(cuGraphLaunch(x2, s));
    CK(cuStreamSynchronize(s));
    CHECK(pin_is(6));
    CHECK(gmem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    CK(cuGraphExecDestroy(x2));
    CK(cuGraphDestroy(g2));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CK(cuMemFreeAsync(plain, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool));
    CHECK(pool_used(d0) == 0);
}

// Captures that fail while holding graph memory: invalidated (a query of the capturing
// stream), and ended by the destruction of their stream. Their graph memory goes.
static void failed_captures(void)
{
    cuuint64_t reserved = gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr a = 0;
    CK(cuMemAllocAsync(&a, N * 4, s));
    CHECK(gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == reserved + N * 4);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuMemAllocAsync(&a, N * 4, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(cuMemFreeAsync(a, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUgraph g = (CUgraph)1;
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK(gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == reserved);

    CUstream t;
    CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CK(cuStreamBeginCapture(t, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuMemAllocAsync(&a, N * 4, t));
    CK(cuStreamDestroy(t));
    CHECK(gmem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == reserved);
}

void st_capture_alloc(void)
{
    if (!st_mod) st_load();
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAllocHost((void **)&pin, N * 4));
    CUmemoryPool d0;
    CK(cuDeviceGetDefaultMemPool(&d0, 0));
    size_t free_before = 0, free_after = 0, total;
    CK(cuMemGetInfo(&free_before, &total));
    whole_lifetime(d0);
    left_allocated(d0);
    failed_captures();
    CK(cuDeviceGraphMemTrim(0));
    CK(cuMemGetInfo(&free_after, &total));
    CHECK(free_after == free_before);
    CK(cuMemFreeHost(pin));
    CK(cuStreamDestroy(s));
}
