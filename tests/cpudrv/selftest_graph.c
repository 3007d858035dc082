// Self-test: stream capture and graphs. Capture of kernel and memset chains, fork and join
// across streams, replays with new inputs; graphs built node by node with every node type,
// queried, cloned, instantiated, updated; batch mem-op nodes; capture modes across threads; the
// errors. Each part frees what it made.
#include "selftest.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 1024 // words per buffer
#define MS 1000000ull

// Not in CUDA 13's cuda.h, still exported.
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);

static CUstream s1, s2, s3;    // non-blocking
static CUdeviceptr da, db, dc; // N words each
static unsigned *pin;          // pinned, 2N words
static CUcontext ctx0;

static void fill(CUstream s, CUdeviceptr p, unsigned v)
{
    unsigned long long n = N;
    void *args[] = {&p, &v, &n};
    CK(cuLaunchKernel(st_fn("fill_u32"), 4, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void inc(CUstream s, CUdeviceptr p)
{
    unsigned long long n = N;
    void *args[] = {&p, &n};
    CK(cuLaunchKernel(st_fn("inc_u32"), 4, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static void mul_add(CUstream s, CUdeviceptr p, int mul, int add)
{
    unsigned long long n = N;
    void *args[] = {&p, &mul, &add, &n};
    CK(cuLaunchKernel(st_fn("mul_add_i32"), 4, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

// Blocks s until *gate (pinned) becomes 1.
static void gate(CUstream s, unsigned *g)
{
    *g = 0;
    CK(cuStreamWaitValue32(s, (CUdeviceptr)g, 1, CU_STREAM_WAIT_VALUE_EQ));
}

static int words_are(CUdeviceptr p, unsigned v)
{
    static unsigned h[N];
    if (cuMemcpyDtoH(h, p, sizeof h)) return 0;
    for (int i = 0; i < N; i++)
        if (h[i] != v) return 0;
    return 1;
}

static size_t nodes_of(CUgraph g, int type)
{
    size_t n = 0;
    CK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode *v = calloc(n + 1, sizeof *v);
    size_t k = 0;
    CK(cuGraphGetNodes(g, v, &n));
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CK(cuGraphNodeGetType(v[i], &t));
        k += type < 0 || (int)t == type;
    }
    free(v);
    return k;
}

static size_t edges_of(CUgraph g)
{
    size_t n = 0;
    CK(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
    return n;
}

static CUstreamCaptureStatus status(CUstream s)
{
    CUstreamCaptureStatus st = (CUstreamCaptureStatus)7;
    CK(cuStreamIsCapturing(s, &st));
    return st;
}

static CUDA_KERNEL_NODE_PARAMS kparams(const char *name, void **args, void **extra)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = st_fn(name);
    p.gridDimX = 4;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 256;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    p.extra = extra;
    return p;
}

static CUDA_MEMCPY3D copy1d(CUmemorytype st, const void *src, CUmemorytype dt, void *dst,
                            size_t bytes)
{
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = st;
    p.srcHost = src;
    p.srcDevice = (CUdeviceptr)src;
    p.dstMemoryType = dt;
    p.dstHost = dst;
    p.dstDevice = (CUdeviceptr)dst;
    p.WidthInBytes = bytes;
    p.Height = p.Depth = 1;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS msparams(CUdeviceptr dst, unsigned v, unsigned el, size_t w,
                                        size_t h, size_t pitch)
{
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.dst = dst;
    p.value = v;
    p.elementSize = el;
    p.width = w;
    p.height = h;
    p.pitch = pitch;
    return p;
}

/* ---------------------------------------------------------------- capture */

// A chain of memsets and kernels, replayed with new inputs; launches ordered across streams.
static void chain(void)
{
    CK(cuMemsetD32(da, 0xab, N));
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(status(s1) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CK(cuMemcpyHtoDAsync(db, pin, N * 4, s1)); // the input, from pinned memory
    CK(cuMemsetD32Async(da, 1, N, s1));
    for (int i = 0; i < 10; i++)
        inc(s1, db);
    mul_add(s1, db, 2, 0);
    CK(cuMemsetD8Async(dc, 0, N * 4, s1));
    CK(cuMemcpyDtoDAsync(dc, db, N * 4, s1));
    CK(cuMemcpyDtoHAsync(pin + N, dc, N * 4, s1));
    CUgraph g = NULL;
    CK(cuStreamEndCapture(s1, &g));
    CHECK(g && status(s1) == CU_STREAM_CAPTURE_STATUS_NONE);
    CHECK(words_are(da, 0xab)); // nothing ran
    CHECK(nodes_of(g, -1) == 16 && nodes_of(g, CU_GRAPH_NODE_TYPE_KERNEL) == 11 &&
          nodes_of(g, CU_GRAPH_NODE_TYPE_MEMSET) == 2 &&
          nodes_of(g, CU_GRAPH_NODE_TYPE_MEMCPY) == 3);
    CHECK(edges_of(g) == 15);
    size_t roots = 0;
    CK(cuGraphGetRootNodes(g, NULL, &roots));
    CHECK(roots == 1);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphDestroy(g)); // the executable graph outlives it
    for (unsigned it = 0; it < 50; it++) {
        for (int i = 0; i < N; i++)
            pin[i] = it * 3 + (unsigned)i;
        CK(cuGraphLaunch(x, s1));
        CK(cuStreamSynchronize(s1));
        int ok = 1;
        for (int i = 0; i < N; i++)
            ok &= pin[N + i] == (it * 3 + (unsigned)i + 10) * 2;
        CHECK(ok);
    }
    CHECK(words_are(da, 1));
    CK(cuGraphExecDestroy(x));

    // Launches of one executable graph follow each other, whatever the streams: an
    // increment launched 200 times on alternating streams counts to 200.
    CK(cuMemsetD32(da, 0, N));
    CK(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL));
    inc(s2, da);
    CK(cuStreamEndCapture(s2, &g));
    CK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 200; i++)
        CK(cuGraphLaunch(x, i % 2 ? s1 : s3));
    CK(cuCtxSynchronize());
    CHECK(words_are(da, 200));
    // A launch is queued after the stream's earlier work, and later work after it.
    gate(s1, pin);
    CK(cuMemsetD32Async(da, 5, N, s1));
    CK(cuGraphLaunch(x, s1));
    CK(cuMemcpyDtoDAsync(db, da, N * 4, s1));
    EXPECT(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    __atomic_store_n(pin, 1, __ATOMIC_RELEASE);
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(db, 6));
    // The legacy NULL stream and the per-thread stream launch it too.
    CK(cuGraphLaunch(x, NULL));
    CK(cuGraphLaunch(x, CU_STREAM_PER_THREAD));
    CK(cuCtxSynchronize());
    CHECK(words_are(da, 8));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
}

// Fork and join over three streams: the dependencies are the streams' and the events'.
static void fork_join(void)
{
    CUevent f, j2, j3;
    CK(cuEventCreate(&f, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&j2, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&j3, CU_EVENT_DISABLE_TIMING));
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    fill(s1, da, 1); // A
    CK(cuEventRecord(f, s1));
    EXPECT(cuEventQuery(f), CUDA_ERROR_CAPTURED_EVENT);
    EXPECT(cuEventSynchronize(f), CUDA_ERROR_CAPTURED_EVENT);
    CHECK(status(s2) == CU_STREAM_CAPTURE_STATUS_NONE);
    CK(cuStreamWaitEvent(s2, f, 0));
    CK(cuStreamWaitEvent(s3, f, 0));
    CHECK(status(s2) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    cuuint64_t i1 = 0, i2 = 1;
    CUstreamCaptureStatus st;
    CK(cuStreamGetCaptureInfo_v2(s1, &st, &i1, NULL, NULL, NULL));
    CK(cuStreamGetCaptureInfo_v2(s2, &st, &i2, NULL, NULL, NULL));
    CHECK(i1 == i2 && i1);
    EXPECT(cuStreamEndCapture(s2, &(CUgraph){0}), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    fill(s2, db, 2);        // B after A
    fill(s3, dc, 3);        // C after A
    mul_add(s1, da, 10, 0); // D after A
    CK(cuEventRecord(j2, s2));
    CK(cuEventRecord(j3, s3));
    CK(cuStreamWaitEvent(s1, j2, 0));
    CK(cuStreamWaitEvent(s1, j3, 0));
    const CUgraphNode *deps = NULL;
    size_t nd = 0;
    CK(cuStreamGetCaptureInfo_v2(s1, &st, NULL, NULL, &deps, &nd));
    CHECK(nd == 3);                           // D, B, C
    CK(cuMemcpyDtoDAsync(da + 4, db, 4, s1)); // E after D, B, C
    CK(cuMemcpyDtoDAsync(da + 8, dc, 4, s1)); // F after E
    CUgraph g = NULL;
    CK(cuStreamEndCapture(s1, &g));
    CHECK(status(s2) == CU_STREAM_CAPTURE_STATUS_NONE &&
          status(s3) == CU_STREAM_CAPTURE_STATUS_NONE);
    CHECK(nodes_of(g, -1) == 6 && edges_of(g) == 7);
    CK(cuEventQuery(f)); // the capture ended: its record no longer counts
    CUgraphNode nodes[8];
    size_t n = 8;
    CK(cuGraphGetNodes(g, nodes, &n));
    CUgraphNode d[4];
    size_t k = 4;
    CK(cuGraphNodeGetDependencies(nodes[4], d, NULL, &k));
    CHECK(k == 3 && d[0] == nodes[3] && d[1] == nodes[1] && d[2] == nodes[2] && d[3] == NULL);
    k = 4;
    CK(cuGraphNodeGetDependentNodes(nodes[0], d, NULL, &k));
    CHECK(k == 3);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 20; i++) {
        CK(cuMemsetD32(da, 0, N));
        CK(cuGraphLaunch(x, s2));
        CK(cuStreamSynchronize(s2));
        unsigned h[3];
        CK(cuMemcpyDtoH(h, da, 12));
        CHECK(h[0] == 10 && h[1] == 2 && h[2] == 3);
    }
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    // A fork never joined back fails the capture; all its streams are free again.
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fill(s1, da, 1);
    CK(cuEventRecord(f, s1));
    CK(cuStreamWaitEvent(s2, f, 0));
    fill(s2, db, 1);
    g = (CUgraph)1;
    EXPECT(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    CHECK(g == NULL && status(s1) == CU_STREAM_CAPTURE_STATUS_NONE &&
          status(s2) == CU_STREAM_CAPTURE_STATUS_NONE);
    // A fork that did nothing is joined already.
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fill(s1, da, 1);
    CK(cuEventRecord(f, s1));
    CK(cuStreamWaitEvent(s2, f, 0));
    fill(s1, da, 2);
    CK(cuStreamEndCapture(s1, &g));
    CHECK(nodes_of(g, -1) == 2);
    CK(cuGraphDestroy(g));
    CK(cuEventDestroy(f));
    CK(cuEventDestroy(j2));
    CK(cuEventDestroy(j3));
}

static void CUDA_CB no_callback(CUstream s, CUresult status, void *p)
{
    (void)s, (void)status, (void)p;
}

// What cannot happen during a capture, and what it does to the capture.
static void capture_errors(void)
{
    CUevent e, out;
    CK(cuEventCreate(&e, 0));
    CK(cuEventCreate(&out, 0));
    CUgraph g = (CUgraph)1;
    EXPECT(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamBeginCapture(s1, (CUstreamCaptureMode)3), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamBeginCapture((CUstream)&g, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuStreamEndCapture(s1, &g), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuStreamEndCapture(s1, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamIsCapturing(s1, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamGetCaptureInfo(s1, NULL, NULL, NULL, NULL, NULL, NULL),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamUpdateCaptureDependencies(s1, NULL, NULL, 0, 0), CUDA_ERROR_ILLEGAL_STATE);

    // Each of these invalidates the capture: later work and the end say so.
    struct {
        int what;
        CUresult want;
    } cases[] = {
        {0, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // cuStreamSynchronize
        {1, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // cuStreamQuery
        {2, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // cuCtxSynchronize
        {3, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // copy from pageable memory
        {4, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // stream callback
        {5, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // stream memory operation
        {7, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // cuMemAlloc (global mode)
        {8, CUDA_ERROR_STREAM_CAPTURE_ISOLATION},    // wait for an event recorded outside
        {9, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},  // cuEventQuery of another event
        {10, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED}, // copy to pageable memory
    };
    static unsigned pageable[4];
    CK(cuEventRecord(out, s3));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
        fill(s1, da, 1);
        CUresult r = CUDA_SUCCESS;
        CUdeviceptr p;
        switch (cases[i].what) {
        case 0:
            r = cuStreamSynchronize(s1);
            break;
        case 1:
            r = cuStreamQuery(s1);
            break;
        case 2:
            r = cuCtxSynchronize();
            break;
        case 3:
            r = cuMemcpyHtoDAsync(da, pageable, sizeof pageable, s1);
            break;
        case 4:
            r = cuStreamAddCallback(s1, no_callback, NULL, 0);
            break;
        case 5:
            r = cuStreamWriteValue32(s1, da, 1, 0);
            break;
        case 7:
            r = cuMemAlloc(&p, 64);
            break;
        case 8:
            r = cuStreamWaitEvent(s1, out, 0);
            break;
        case 9:
            r = cuEventQuery(out);
            break;
        case 10:
            r = cuMemcpyDtoHAsync(pageable, da, sizeof pageable, s1);
            break;
        }
        if (r != cases[i].want) st_failrc(__FILE__, __LINE__, "case", r, cases[i].want);
        CHECK(status(s1) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        unsigned long long n = N;
        void *args[] = {&da, &n};
        EXPECT(cuLaunchKernel(st_fn("inc_u32"), 1, 1, 1, 1, 1, 1, 0, s1, args, NULL),
               CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        EXPECT(cuStreamSynchronize(s1), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        g = (CUgraph)1;
        EXPECT(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        CHECK(g == NULL && status(s1) == CU_STREAM_CAPTURE_STATUS_NONE);
    }
    CK(cuStreamSynchronize(s1));
    // Waiting (externally) for an event recorded outside: an event wait node; a record
    // with the external flag: an event record node, whose event still joins.
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamWaitEvent(s1, out, CU_EVENT_WAIT_EXTERNAL));
    CUevent never;
    CK(cuEventCreate(&never, 0));
    CK(cuStreamWaitEvent(s1, never, 0)); // never recorded: nothing to wait for
    fill(s1, da, 4);
    CK(cuEventRecordWithFlags(e, s1, CU_EVENT_RECORD_EXTERNAL));
    CK(cuStreamWaitEvent(s2, e, 0));
    fill(s2, db, 4);
    CK(cuEventRecord(e, s2));
    CK(cuStreamWaitEvent(s1, e, 0));
    CK(cuStreamEndCapture(s1, &g));
    CHECK(nodes_of(g, -1) == 4 && nodes_of(g, CU_GRAPH_NODE_TYPE_WAIT_EVENT) == 1 &&
          nodes_of(g, CU_GRAPH_NODE_TYPE_EVENT_RECORD) == 1 && edges_of(g) == 3);
    CK(cuGraphDestroy(g));
    CK(cuEventDestroy(never));

    // Two captures cannot merge.
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    fill(s1, da, 1);
    CK(cuEventRecord(e, s1));
    EXPECT(cuStreamWaitEvent(s2, e, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    EXPECT(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    // The legacy stream while a blocking stream captures: refused, the capture given up;
    // asking the legacy stream's status is refused but harmless.
    CUstream blocking;
    CK(cuStreamCreate(&blocking, 0));
    CK(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st;
    EXPECT(cuStreamIsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    EXPECT(cuStreamGetCaptureInfo(NULL, &st, NULL, NULL, NULL, NULL, NULL),
           CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK(status(blocking) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &st)); // not the legacy stream
    unsigned v = 0;
    EXPECT(cuMemcpyHtoD(da, &v, 4), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK(status(blocking) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CK(cuMemcpyHtoD(da, &v, 4));
    // Non-blocking captures leave the legacy stream alone.
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuMemcpyHtoD(da, &v, 4));
    CK(cuStreamIsCapturing(NULL, &st));
    // The graph being captured into can be read, not destroyed; nor its nodes.
    CUgraph live = NULL;
    fill(s1, da, 1);
    const CUgraphNode *deps;
    size_t nd;
    CK(cuStreamGetCaptureInfo_v2(s1, &st, NULL, &live, &deps, &nd));
    CHECK(live && nd == 1 && nodes_of(live, -1) == 1);
    EXPECT(cuGraphDestroy(live), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphDestroyNode(deps[0]), CUDA_ERROR_INVALID_VALUE);
    CUgraphExec x;
    EXPECT(cuGraphInstantiate(&x, live, 0), CUDA_ERROR_INVALID_VALUE);
    // A stream that began a capture and is destroyed takes the capture with it.
    CK(cuStreamDestroy(blocking));
    CK(cuStreamCreate(&blocking, CU_STREAM_NON_BLOCKING));
    CK(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fill(blocking, db, 1);
    CUgraph gone;
    CK(cuStreamGetCaptureInfo_v2(blocking, &st, NULL, &gone, NULL, NULL));
    CK(cuStreamDestroy(blocking));
    size_t cnt;
    EXPECT(cuGraphGetNodes(gone, NULL, &cnt), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamEndCapture(s1, &g));
    CK(cuGraphDestroy(g));
    CK(cuEventDestroy(e));
    CK(cuEventDestroy(out));
}

// Changing a capturing stream's dependencies; edge data; capture into an existing graph;
// a graph launched while capturing; the per-thread stream.
static void capture_more(void)
{
    CUgraph g;
    const CUgraphNode *deps;
    const CUgraphEdgeData *ed;
    size_t nd;
    CUstreamCaptureStatus st;
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fill(s1, da, 1); // A
    CK(cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, &ed, &nd));
    CUgraphNode a = deps[0];
    CK(cuStreamUpdateCaptureDependencies(s1, NULL, NULL, 0, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    fill(s1, db, 2); // B: a root
    CK(cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, &ed, &nd));
    CUgraphNode b = deps[0];
    CK(cuStreamUpdateCaptureDependencies(s1, &a, NULL, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
    CK(cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, &ed, &nd));
    CHECK(nd == 2 && deps[0] == b && deps[1] == a);
    EXPECT(cuStreamUpdateCaptureDependencies(s1, &a, NULL, 1, 2), CUDA_ERROR_INVALID_VALUE);
    // A programmatic edge: given back only with its data.
    CUgraphEdgeData pe;
    memset(&pe, 0, sizeof pe);
    pe.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    pe.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    CK(cuStreamUpdateCaptureDependencies(s1, &a, &pe, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    EXPECT(cuStreamGetCaptureInfo_v2(s1, &st, NULL, NULL, &deps, &nd), CUDA_ERROR_LOSSY_QUERY);
    CK(cuStreamGetCaptureInfo(s1, &st, NULL, NULL, &deps, &ed, &nd));
    CHECK(nd == 1 && ed[0].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);
    mul_add(s1, da, 3, 0); // C after A, programmatic
    CK(cuStreamEndCapture(s1, &g));
    size_t ne = 0;
    CK(cuGraphGetEdges(g, NULL, NULL, NULL, &ne));
    CHECK(ne == 1);
    CUgraphNode from[2], to[2];
    CUgraphEdgeData data[2];
    ne = 2;
    EXPECT(cuGraphGetEdges(g, from, to, NULL, &ne), CUDA_ERROR_LOSSY_QUERY);
    CK(cuGraphGetEdges(g, from, to, data, &ne));
    CHECK(ne == 1 && from[0] == a && data[0].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
          from[1] == NULL);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 3) && words_are(db, 2));

    // Capture into an existing graph, after one of its nodes; a launch of an executable
    // graph captured becomes a child graph node.
    CUgraph h;
    CUgraphNode first;
    CK(cuGraphCreate(&h, 0));
    CUDA_MEMSET_NODE_PARAMS ms = msparams(da, 7, 4, N, 1, 0);
    CK(cuGraphAddMemsetNode(&first, h, NULL, 0, &ms, ctx0));
    CK(cuStreamBeginCaptureToGraph(s2, h, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuStreamBeginCaptureToGraph(s3, h, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_INVALID_VALUE);
    inc(s2, da);
    CK(cuGraphLaunch(x, s2)); // da = 3 * 1 after a fill
    CUgraph back = NULL;
    CK(cuStreamEndCapture(s2, &back));
    CHECK(back == h && nodes_of(h, -1) == 3 && nodes_of(h, CU_GRAPH_NODE_TYPE_GRAPH) == 1 &&
          edges_of(h) == 2);
    CUgraphExec hx;
    CK(cuGraphInstantiate(&hx, h, 0));
    CK(cuMemsetD32(db, 0, N));
    CK(cuGraphLaunch(hx, s3));
    CK(cuStreamSynchronize(s3));
    CHECK(words_are(da, 3) && words_are(db, 2));
    CK(cuGraphExecDestroy(hx));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CK(cuGraphDestroy(h));

    // The per-thread stream captures too, through the plain and the _ptsz entry points.
    CK(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL));
    fill(CU_STREAM_PER_THREAD, da, 9);
    CK(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g));
    CHECK(nodes_of(g, -1) == 1);
    CK(cuGraphDestroy(g));
    CUresult (*begin)(CUstream, CUstreamCaptureMode) =
        (CUresult(*)(CUstream, CUstreamCaptureMode))dlsym(RTLD_DEFAULT,
                                                          "cuStreamBeginCapture_v2_ptsz");
    CUresult (*end)(CUstream, CUgraph *) =
        (CUresult(*)(CUstream, CUgraph *))dlsym(RTLD_DEFAULT, "cuStreamEndCapture_ptsz");
    CUresult (*is)(CUstream, CUstreamCaptureStatus *) =
        (CUresult(*)(CUstream, CUstreamCaptureStatus *))dlsym(RTLD_DEFAULT,
                                                              "cuStreamIsCapturing_ptsz");
    CUresult (*launch)(CUgraphExec, CUstream) =
        (CUresult(*)(CUgraphExec, CUstream))dlsym(RTLD_DEFAULT, "cuGraphLaunch_ptsz");
    CUresult (*begin1)(CUstream) =
        (CUresult(*)(CUstream))dlsym(RTLD_DEFAULT, "cuStreamBeginCapture");
    CUresult (*info1)(CUstream, CUstreamCaptureStatus *, cuuint64_t *) =
        (CUresult(*)(CUstream, CUstreamCaptureStatus *, cuuint64_t *))dlsym(
            RTLD_DEFAULT, "cuStreamGetCaptureInfo");
    CHECK(begin && end && is && launch && begin1 && info1);
    if (!begin || !end || !is || !launch || !begin1 || !info1) return;
    CK(begin(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL));
    st = CU_STREAM_CAPTURE_STATUS_NONE;
    CK(is(NULL, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && status(CU_STREAM_PER_THREAD) == st);
    fill(CU_STREAM_PER_THREAD, da, 9);
    CK(end(NULL, &g));
    CK(cuGraphInstantiate(&x, g, 0));
    CK(launch(x, NULL));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(words_are(da, 9));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CK(begin1(s1));
    cuuint64_t id = 0;
    CK(info1(s1, &st, &id));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id);
    CK(cuStreamEndCapture(s1, &g));
    CHECK(nodes_of(g, -1) == 0);
    CK(cuGraphDestroy(g));
}

/* ---------------------------------------------------------------- capture modes */

struct peer {
    int op; // 0: cuMemAlloc and free; 1: end s's capture
    CUstreamCaptureMode mode;
    CUresult rc;
};

static void *peer_run(void *arg)
{
    struct peer *p = arg;
    CK(cuCtxSetCurrent(ctx0));
    CUstreamCaptureMode m = p->mode;
    CK(cuThreadExchangeStreamCaptureMode(&m));
    if (p->op == 0) {
        CUdeviceptr d;
        p->rc = cuMemAlloc(&d, 64);
        if (!p->rc) CK(cuMemFree(d));
    } else {
        CUgraph g = NULL;
        p->rc = cuStreamEndCapture(s1, &g);
        if (!p->rc) CK(cuGraphDestroy(g));
    }
    return NULL;
}

static CUresult in_thread(int op, CUstreamCaptureMode mode)
{
    struct peer p = {op, mode, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    if (pthread_create(&t, NULL, peer_run, &p)) return CUDA_ERROR_UNKNOWN;
    pthread_join(t, NULL);
    return p.rc;
}

// Which threads may make potentially unsafe calls during a capture, by mode.
static void modes(void)
{
    static const struct {
        CUstreamCaptureMode capture, other;
        CUresult want;
    } cases[] = {
        {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL,
         CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED},
        {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CUDA_SUCCESS},
        {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED, CUDA_SUCCESS},
        {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_GLOBAL, CUDA_SUCCESS},
        {CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_GLOBAL, CUDA_SUCCESS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CK(cuStreamBeginCapture(s1, cases[i].capture));
        fill(s1, da, 1);
        CUresult r = in_thread(0, cases[i].other);
        if (r != cases[i].want) st_failrc(__FILE__, __LINE__, "other thread", r, cases[i].want);
        CUgraph g = NULL;
        EXPECT(cuStreamEndCapture(s1, &g),
               cases[i].want ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
        if (g) CK(cuGraphDestroy(g));
    }
    // The capturing thread itself: refused unless the capture or the thread is relaxed.
    CUdeviceptr d;
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    EXPECT(cuMemAlloc(&d, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT(cuStreamEndCapture(s1, &(CUgraph){0}), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuMemAlloc(&d, 64));
    CK(cuMemFree(d));
    CUgraph g;
    CK(cuStreamEndCapture(s1, &g));
    CK(cuGraphDestroy(g));
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CK(cuThreadExchangeStreamCaptureMode(&m));
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuMemAlloc(&d, 64));
    CK(cuMemFree(d));
    CK(cuStreamEndCapture(s1, &g));
    CK(cuGraphDestroy(g));
    CK(cuThreadExchangeStreamCaptureMode(&m));
    CHECK(m == CU_STREAM_CAPTURE_MODE_RELAXED);
    m = (CUstreamCaptureMode)9;
    EXPECT(cuThreadExchangeStreamCaptureMode(&m), CUDA_ERROR_INVALID_VALUE);
    // Only a relaxed capture may be ended by another thread.
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(in_thread(1, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    CK(cuStreamEndCapture(s1, &g));
    CK(cuGraphDestroy(g));
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(in_thread(1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(status(s1) == CU_STREAM_CAPTURE_STATUS_NONE);
}

/* ---------------------------------------------------------------- graphs built by hand */

static int host_calls;
static unsigned host_saw;
static void host_fn(void *p)
{
    host_saw = *(volatile unsigned *)p;
    __atomic_add_fetch(&host_calls, 1, __ATOMIC_RELEASE);
}

// Every node type, their parameters, queries and edges; clone; the DOT description.
static void built(void)
{
    CUgraph g;
    EXPECT(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphCreate(&g, 0));
    CUgraphNode ms, k1, k2, cp, toh, host, empty, rec, wait, child, rec2;
    CUDA_MEMSET_NODE_PARAMS msp = msparams(da, 1, 4, N, 1, 0);
    CK(cuGraphAddMemsetNode(&ms, g, NULL, 0, &msp, NULL)); // the current context
    CUdeviceptr p = da;
    unsigned long long n = N;
    void *args[] = {&p, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kparams("inc_u32", args, NULL);
    CK(cuGraphAddKernelNode(&k1, g, &ms, 1, &kp));
    p = db; // copied when the node was made
    struct {
        CUdeviceptr p;
        int mul, add;
        unsigned long long n;
    } buf = {da, 4, 1, N};
    size_t size = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    kp = kparams("mul_add_i32", NULL, extra);
    CK(cuGraphAddKernelNode(&k2, g, &k1, 1, &kp)); // da = 2 * 4 + 1 = 9
    buf.mul = 100;
    CUDA_MEMCPY3D c =
        copy1d(CU_MEMORYTYPE_DEVICE, (void *)da, CU_MEMORYTYPE_DEVICE, (void *)db, N * 4);
    CK(cuGraphAddMemcpyNode(&cp, g, &k2, 1, &c, ctx0));
    c = copy1d(CU_MEMORYTYPE_DEVICE, (void *)db, CU_MEMORYTYPE_HOST, pin, N * 4);
    CK(cuGraphAddMemcpyNode(&toh, g, &cp, 1, &c, ctx0));
    CUDA_HOST_NODE_PARAMS hp = {host_fn, pin};
    CK(cuGraphAddHostNode(&host, g, &toh, 1, &hp));
    CK(cuGraphAddEmptyNode(&empty, g, &host, 1));
    CUevent t0, t1, ev;
    CK(cuEventCreate(&t0, 0));
    CK(cuEventCreate(&t1, 0));
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuGraphAddEventRecordNode(&rec, g, &empty, 1, t0));
    CK(cuGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
    CUgraph sub;
    CK(cuGraphCreate(&sub, 0));
    CUgraphNode s_ms, s_k;
    msp = msparams(dc, 0x10, 1, N * 4, 1, 0);
    CK(cuGraphAddMemsetNode(&s_ms, sub, NULL, 0, &msp, ctx0));
    p = dc;
    kp = kparams("inc_u32", args, NULL);
    CK(cuGraphAddKernelNode(&s_k, sub, &s_ms, 1, &kp)); // dc = 0x10101011
    CK(cuGraphAddChildGraphNode(&child, g, &wait, 1, sub));
    CK(cuGraphAddEventRecordNode(&rec2, g, &child, 1, t1));
    CUgraph inner;
    CK(cuGraphChildGraphNodeGetGraph(child, &inner));
    CHECK(nodes_of(inner, -1) == 2);
    EXPECT(cuGraphDestroy(inner), CUDA_ERROR_INVALID_VALUE); // the node's

    // Queries.
    CHECK(nodes_of(g, -1) == 11 && edges_of(g) == 10);
    CUgraphNode v[12];
    size_t cnt = 12;
    CK(cuGraphGetNodes(g, v, &cnt));
    CHECK(cnt == 11 && v[0] == ms && v[10] == rec2 && v[11] == NULL);
    cnt = 3;
    CK(cuGraphGetNodes(g, v, &cnt));
    CHECK(cnt == 3 && v[2] == k2);
    cnt = 5;
    CK(cuGraphGetRootNodes(g, v, &cnt));
    CHECK(cnt == 1 && v[0] == ms && v[1] == NULL);
    CUgraphNodeType t;
    CK(cuGraphNodeGetType(wait, &t));
    CHECK(t == CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    EXPECT(cuGraphNodeGetType(wait, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphNodeGetType((CUgraphNode)&t, &t), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphGetNodes(g, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_KERNEL_NODE_PARAMS got;
    CK(cuGraphKernelNodeGetParams(k1, &got));
    CHECK(got.func == st_fn("inc_u32") && !got.extra && got.kernelParams &&
          *(CUdeviceptr *)got.kernelParams[0] == da &&
          *(unsigned long long *)got.kernelParams[1] == N);
    CK(cuGraphKernelNodeGetParams(k2, &got));
    CHECK(!got.kernelParams && got.extra && got.extra[0] == CU_LAUNCH_PARAM_BUFFER_POINTER &&
          ((int *)got.extra[1])[2] == 4 && *(size_t *)got.extra[3] == 24);
    EXPECT(cuGraphKernelNodeGetParams(ms, &got), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMSET_NODE_PARAMS gm;
    CK(cuGraphMemsetNodeGetParams(ms, &gm));
    CHECK(gm.dst == da && gm.value == 1 && gm.elementSize == 4 && gm.width == N);
    CUDA_MEMCPY3D gc;
    CK(cuGraphMemcpyNodeGetParams(toh, &gc));
    CHECK(gc.dstMemoryType == CU_MEMORYTYPE_HOST && gc.dstHost == pin && gc.WidthInBytes == N * 4);
    CUDA_HOST_NODE_PARAMS gh;
    CK(cuGraphHostNodeGetParams(host, &gh));
    CHECK(gh.fn == host_fn && gh.userData == pin);
    CUevent ge;
    CK(cuGraphEventRecordNodeGetEvent(rec, &ge));
    CHECK(ge == t0);
    CK(cuGraphEventWaitNodeGetEvent(wait, &ge));
    CHECK(ge == ev);
    EXPECT(cuGraphEventWaitNodeGetEvent(rec, &ge), CUDA_ERROR_INVALID_VALUE);

    // Edges: added, refused twice, removed; a node destroyed takes its edges.
    CK(cuGraphAddDependencies(g, &ms, &empty, NULL, 1));
    CHECK(edges_of(g) == 11);
    EXPECT(cuGraphAddDependencies(g, &ms, &empty, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddDependencies(g, &ms, &ms, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddDependencies(g, &ms, &s_k, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CUgraphEdgeData bad;
    memset(&bad, 0, sizeof bad);
    bad.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC; // from a memset node
    EXPECT(cuGraphAddDependencies(g, &ms, &host, &bad, 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphRemoveDependencies(g, &ms, &empty, NULL, 1));
    EXPECT(cuGraphRemoveDependencies(g, &ms, &empty, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(edges_of(g) == 10);
    CUgraphNode spare;
    CK(cuGraphAddEmptyNode(&spare, g, (CUgraphNode[]){k1, k2}, 2));
    CK(cuGraphAddDependencies(g, &spare, &rec2, NULL, 1));
    CHECK(edges_of(g) == 13);
    CK(cuGraphDestroyNode(spare));
    CHECK(edges_of(g) == 10 && nodes_of(g, -1) == 11);
    cnt = 4;
    CK(cuGraphNodeGetDependentNodes(k1, v, NULL, &cnt));
    CHECK(cnt == 1 && v[0] == k2);
    EXPECT(cuGraphNodeGetType(spare, &t), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddEmptyNode(&spare, g, (CUgraphNode[]){k1, k1}, 2), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddEmptyNode(&spare, g, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddEmptyNode(&spare, g, &s_k, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddEmptyNode(&spare, (CUgraph)&t, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddEmptyNode(NULL, g, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(nodes_of(g, -1) == 11);

    // Launches: every node in order; the wait node waits for the event's latest record.
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    unsigned *gt = pin + N + 8;
    for (int i = 0; i < 5; i++) {
        gate(s3, gt);
        CK(cuEventRecord(ev, s3));
        host_calls = 0;
        memset(pin, 0, N * 4);
        CK(cuGraphLaunch(x, s1));
        double t_start = st_ms();
        while (!__atomic_load_n(&host_calls, __ATOMIC_ACQUIRE) && st_ms() - t_start < 20000)
            usleep(1000);
        EXPECT(cuStreamQuery(s1), CUDA_ERROR_NOT_READY); // the wait node waits for ev
        CHECK(host_calls == 1 && host_saw == 9);
        __atomic_store_n(gt, 1, __ATOMIC_RELEASE);
        CK(cuStreamSynchronize(s1));
        CHECK(words_are(da, 9) && words_are(db, 9) && words_are(dc, 0x10101011) && pin[0] == 9 &&
              pin[N - 1] == 9);
        float ms_between = -1;
        CK(cuEventElapsedTime(&ms_between, t0, t1));
        CHECK(ms_between >= 0);
    }
    // The host node runs each launch; its parameters can change.
    hp.userData = pin + 1;
    CK(cuGraphHostNodeSetParams(host, &hp));
    EXPECT(cuGraphHostNodeSetParams(host, &(CUDA_HOST_NODE_PARAMS){NULL, NULL}),
           CUDA_ERROR_INVALID_VALUE);

    // A clone is independent of its original; its nodes are found from the original's.
    CUgraph cl;
    CK(cuGraphClone(&cl, g));
    CUgraphNode ck2 = NULL, cs = NULL;
    CK(cuGraphNodeFindInClone(&ck2, k2, cl));
    CHECK(ck2 && ck2 != k2);
    EXPECT(cuGraphNodeFindInClone(&cs, s_k, cl), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphNodeFindInClone(&cs, k2, g), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphKernelNodeGetParams(ck2, &got));
    CHECK(got.extra && ((int *)got.extra[1])[2] == 4);
    buf.mul = 5;
    CK(cuGraphKernelNodeSetParams(k2, &kp)); // the original only: 2 * 5 + 1
    CK(cuGraphKernelNodeGetParams(ck2, &got));
    CHECK(((int *)got.extra[1])[2] == 4);
    CUgraphNode late;
    CK(cuGraphAddEmptyNode(&late, g, NULL, 0));
    EXPECT(cuGraphNodeFindInClone(&cs, late, cl), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphDestroyNode(late));
    CHECK(nodes_of(cl, -1) == 11 && edges_of(cl) == 10);
    CUgraphExec cx;
    CK(cuGraphInstantiate(&cx, cl, 0));
    CK(cuGraphDestroy(cl));
    CK(cuEventRecord(ev, s3));
    CK(cuGraphLaunch(cx, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 9) && host_saw == 9);
    CK(cuGraphExecDestroy(cx));

    // The DOT description: every node by type, every edge.
    char path[64];
    snprintf(path, sizeof path, "/tmp/cpudrv-selftest-%d.dot", (int)getpid());
    CK(cuGraphDebugDotPrint(g, path, 0));
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    char *text = f ? calloc(1, 65536) : NULL;
    if (f && text) len = fread(text, 1, 65535, f);
    if (f) fclose(f);
    unlink(path);
    int arrows = 0;
    for (char *q = text; q && (q = strstr(q, "->")); q += 2)
        arrows++;
    CHECK(len && strncmp(text, "digraph", 7) == 0 && arrows == 11 && strstr(text, "KERNEL") &&
          strstr(text, "inc_u32") && strstr(text, "MEMSET") && strstr(text, "DtoH") &&
          strstr(text, "WAIT_EVENT") && strstr(text, "cluster"));
    free(text);
    EXPECT(cuGraphDebugDotPrint(g, "/nonexistent/dir/x.dot", 0), CUDA_ERROR_OPERATING_SYSTEM);
    EXPECT(cuGraphDebugDotPrint(g, NULL, 0), CUDA_ERROR_INVALID_VALUE);

    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CK(cuGraphDestroy(sub)); // the child graph node had its own copy
    EXPECT(cuGraphNodeGetType(k1, &t), CUDA_ERROR_INVALID_VALUE); // gone with the graph
    EXPECT(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
    CK(cuEventDestroy(t0));
    CK(cuEventDestroy(t1));
    CK(cuEventDestroy(ev));
}

// Node parameters that are refused, and the nodes that are not implemented.
static void node_errors(void)
{
    CUgraph g;
    CUgraphNode nd;
    CK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS m = msparams(da, 0, 3, N, 1, 0);
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, ctx0), CUDA_ERROR_INVALID_VALUE);
    m = msparams(da + 1, 0, 4, 4, 1, 0);
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, ctx0), CUDA_ERROR_INVALID_VALUE);
    m = msparams(da, 0, 4, 0, 1, 0);
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, ctx0), CUDA_ERROR_INVALID_VALUE);
    m = msparams(da, 0, 4, N + 1, 1, 0);
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, ctx0), CUDA_ERROR_INVALID_VALUE);
    m = msparams(da, 0, 4, 8, 4, 16);
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, ctx0), CUDA_ERROR_INVALID_VALUE); // pitch
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, NULL, ctx0), CUDA_ERROR_INVALID_VALUE);
    m = msparams(da, 0, 4, 4, 1, 0);
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, (CUcontext)&m), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuCtxSetCurrent(NULL));
    EXPECT(cuGraphAddMemsetNode(&nd, g, NULL, 0, &m, NULL), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuCtxSetCurrent(ctx0));
    CUDA_MEMCPY3D c = copy1d(CU_MEMORYTYPE_DEVICE, (void *)da, CU_MEMORYTYPE_DEVICE, (void *)db, 0);
    EXPECT(cuGraphAddMemcpyNode(&nd, g, NULL, 0, &c, ctx0), CUDA_ERROR_INVALID_VALUE);
    c = copy1d(CU_MEMORYTYPE_DEVICE, (void *)da, CU_MEMORYTYPE_DEVICE, (void *)db, N * 4 + 4);
    EXPECT(cuGraphAddMemcpyNode(&nd, g, NULL, 0, &c, ctx0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddMemcpyNode(&nd, g, NULL, 0, NULL, ctx0), CUDA_ERROR_INVALID_VALUE);
    unsigned long long n = N;
    void *args[] = {&da, &n};
    size_t size = 16;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUDA_KERNEL_NODE_PARAMS kp = kparams("inc_u32", args, extra);
    EXPECT(cuGraphAddKernelNode(&nd, g, NULL, 0, &kp), CUDA_ERROR_INVALID_VALUE);
    kp = kparams("inc_u32", NULL, NULL);
    EXPECT(cuGraphAddKernelNode(&nd, g, NULL, 0, &kp), CUDA_ERROR_INVALID_VALUE);
    kp = kparams("inc_u32", args, NULL);
    kp.blockDimX = 2048;
    EXPECT(cuGraphAddKernelNode(&nd, g, NULL, 0, &kp), CUDA_ERROR_INVALID_VALUE);
    kp.blockDimX = 1;
    kp.func = (CUfunction)&kp;
    EXPECT(cuGraphAddKernelNode(&nd, g, NULL, 0, &kp), CUDA_ERROR_INVALID_VALUE);
    kp.func = st_fn("inc_u32");
    CK(cuGraphAddKernelNode(&nd, g, NULL, 0, &kp));
    kp.func = (CUfunction)&kp;
    EXPECT(cuGraphKernelNodeSetParams(nd, &kp), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuGraphAddHostNode(&nd, g, NULL, 0, &(CUDA_HOST_NODE_PARAMS){NULL, NULL}),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddEventRecordNode(&nd, g, NULL, 0, (CUevent)&kp), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddChildGraphNode(&nd, g, NULL, 0, g), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddChildGraphNode(&nd, g, NULL, 0, (CUgraph)&kp), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    EXPECT(cuGraphAddMemAllocNode(&nd, g, NULL, 0, &ap), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddMemFreeNode(&nd, g, NULL, 0, da), CUDA_ERROR_INVALID_VALUE);
    CUgraphConditionalHandle ch; // conditional nodes: selftest_cond.c
    EXPECT(cuGraphConditionalHandleCreate(&ch, g, ctx0, 0, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK(nodes_of(g, -1) == 1);
    CK(cuGraphDestroy(g));
}

// The generic node form, child graphs moved rather than copied, kernel node attributes,
// graph memory (none).
static void generic(void)
{
    CUgraph g, sub;
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphCreate(&sub, 0));
    CUgraphNodeParams np;
    CUgraphNode ms, k, c, e, sk;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_MEMSET;
    np.memset.dst = da;
    np.memset.value = 2;
    np.memset.elementSize = 4;
    np.memset.width = N;
    np.memset.height = 1;
    np.memset.ctx = ctx0;
    CK(cuGraphAddNode(&ms, g, NULL, NULL, 0, &np));
    unsigned long long n = N;
    CUdeviceptr p = da;
    void *args[] = {&p, &n};
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_KERNEL;
    np.kernel.func = st_fn("inc_u32");
    np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
    np.kernel.blockDimX = 64;
    np.kernel.blockDimY = np.kernel.blockDimZ = 1;
    np.kernel.kernelParams = args;
    CK(cuGraphAddNode(&k, g, &ms, NULL, 1, &np));
    CUgraphNode in_sub;
    CK(cuGraphAddNode(&in_sub, sub, NULL, NULL, 0, &np)); // da + 1 again
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_GRAPH;
    np.graph.graph = sub;
    np.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    CK(cuGraphAddNode(&c, g, &k, NULL, 1, &np));
    CUgraph inner;
    CK(cuGraphChildGraphNodeGetGraph(c, &inner));
    CHECK(inner == sub); // moved, not copied
    EXPECT(cuGraphDestroy(sub), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE); // owned now
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_NOT_SUPPORTED);
    np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC; // no size, no pool properties
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE);
    np.type = (CUgraphNodeType)99;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE);
    // Reserved members must be zero, and a memcpy member's flags.
    np.type = CU_GRAPH_NODE_TYPE_EMPTY;
    np.reserved0[1] = 1;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphNodeSetParams(ms, &np), CUDA_ERROR_INVALID_VALUE);
    np.reserved0[1] = 0;
    np.reserved2 = 1;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE);
    np.reserved2 = 0;
    np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    np.memcpy.flags = 1;
    EXPECT(cuGraphAddNode(&e, g, NULL, NULL, 0, &np), CUDA_ERROR_INVALID_VALUE);
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_EMPTY;
    CUgraphEdgeData pe;
    memset(&pe, 0, sizeof pe);
    pe.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    EXPECT(cuGraphAddNode(&e, g, &k, &pe, 1, &np), CUDA_ERROR_INVALID_VALUE); // not to a kernel
    CK(cuGraphAddNode(&e, g, &c, NULL, 1, &np));

    // Kernel node attributes: stored, kept across parameter changes, copied.
    CUkernelNodeAttrValue v;
    memset(&v, 0, sizeof v);
    CK(cuGraphKernelNodeGetAttribute(k, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK(v.priority == 0);
    v.priority = -2;
    CK(cuGraphKernelNodeSetAttribute(k, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    EXPECT(cuGraphKernelNodeSetAttribute(k, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphKernelNodeSetAttribute(ms, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v),
           CUDA_ERROR_INVALID_VALUE);
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_KERNEL;
    np.kernel.func = st_fn("inc_u32");
    np.kernel.gridDimX = np.kernel.gridDimY = np.kernel.gridDimZ = 1;
    np.kernel.blockDimX = 32;
    np.kernel.blockDimY = np.kernel.blockDimZ = 1;
    np.kernel.kernelParams = args;
    CK(cuGraphNodeSetParams(k, &np));
    memset(&v, 0, sizeof v);
    CK(cuGraphKernelNodeGetAttribute(k, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK(v.priority == -2);
    CK(cuGraphChildGraphNodeGetGraph(c, &inner));
    size_t one = 1;
    CK(cuGraphGetNodes(inner, &sk, &one));
    CK(cuGraphKernelNodeCopyAttributes(sk, k));
    memset(&v, 0, sizeof v);
    CK(cuGraphKernelNodeGetAttribute(sk, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK(v.priority == -2);
    CUgraph cl;
    CK(cuGraphClone(&cl, g));
    CUgraphNode ck;
    CK(cuGraphNodeFindInClone(&ck, k, cl));
    memset(&v, 0, sizeof v);
    CK(cuGraphKernelNodeGetAttribute(ck, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK(v.priority == -2);
    CK(cuGraphDestroy(cl));
    np.type = CU_GRAPH_NODE_TYPE_HOST;
    EXPECT(cuGraphNodeSetParams(k, &np), CUDA_ERROR_INVALID_VALUE); // not the node's type

    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 4));
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_MEMSET;
    np.memset.dst = da;
    np.memset.value = 10;
    np.memset.elementSize = 4;
    np.memset.width = N;
    np.memset.height = 1;
    CK(cuGraphExecNodeSetParams(x, ms, &np));
    np.type = CU_GRAPH_NODE_TYPE_EMPTY;
    CK(cuGraphExecNodeSetParams(x, e, &np));
    EXPECT(cuGraphExecNodeSetParams(x, ms, &np), CUDA_ERROR_INVALID_VALUE);
    np.reserved2 = 1;
    EXPECT(cuGraphExecNodeSetParams(x, e, &np), CUDA_ERROR_INVALID_VALUE);
    np.reserved2 = 0;
    np.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    EXPECT(cuGraphExecNodeSetParams(x, ms, &np), CUDA_ERROR_NOT_SUPPORTED);
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 12));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g)); // and the moved child graph with it
    EXPECT(cuGraphGetNodes(sub, NULL, &one), CUDA_ERROR_INVALID_VALUE);

    cuuint64_t used = 1;
    CK(cuDeviceGraphMemTrim(0));
    CK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &used));
    CHECK(used == 0);
    CK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &used));
    EXPECT(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGraphMemTrim(7), CUDA_ERROR_INVALID_DEVICE);
}

/* ---------------------------------------------------------------- executable graphs */

// Instantiation flags and results, cycles, updates of every kind, enabling nodes, and
// parameters changed while a launch is queued.
static void executable(void)
{
    CUgraph g;
    CUgraphNode a, b, h, e;
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphAddEmptyNode(&a, g, NULL, 0));
    CK(cuGraphAddEmptyNode(&b, g, &a, 1));
    CK(cuGraphAddDependencies(g, &b, &a, NULL, 1));
    CUgraphExec x = NULL;
    EXPECT(cuGraphInstantiate(&x, g, 0), CUDA_ERROR_INVALID_VALUE);
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof ip);
    EXPECT(cuGraphInstantiateWithParams(&x, g, &ip), CUDA_ERROR_INVALID_VALUE);
    CHECK(ip.result_out == CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE &&
          (ip.hErrNode_out == a || ip.hErrNode_out == b));
    CUresult (*inst1)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t) =
        (CUresult(*)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))dlsym(
            RTLD_DEFAULT, "cuGraphInstantiate");
    char log[64] = "";
    CUgraphNode err = NULL;
    CHECK(inst1 != NULL);
    if (inst1) {
        EXPECT(inst1(&x, g, &err, log, sizeof log), CUDA_ERROR_INVALID_VALUE);
        CHECK(err && log[0]);
    }
    CK(cuGraphRemoveDependencies(g, &b, &a, NULL, 1));
    EXPECT(cuGraphInstantiate(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphInstantiate(&x, g, 1 | 4), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphInstantiate(&x, g, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphInstantiate(NULL, g, 0), CUDA_ERROR_INVALID_VALUE);
    memset(&ip, 0, sizeof ip);
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
    EXPECT(cuGraphInstantiateWithParams(&x, g, &ip), CUDA_ERROR_INVALID_VALUE);
    CHECK(ip.result_out == CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED);
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    ip.hUploadStream = s2;
    CK(cuGraphInstantiateWithParams(&x, g, &ip));
    CHECK(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS && ip.hErrNode_out == NULL);
    cuuint64_t fl = 0;
    CK(cuGraphExecGetFlags(x, &fl));
    CHECK(fl == CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY);
    CK(cuGraphLaunch(x, s2));
    CK(cuStreamSynchronize(s2));
    CK(cuGraphExecDestroy(x));
    EXPECT(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphLaunch(x, s1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphUpload(x, s1), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphDestroy(g));

    // kernel (fill) -> memset of dc -> host; parameters changed for later launches only.
    CK(cuGraphCreate(&g, 0));
    unsigned v = 1;
    unsigned long long n = N;
    CUdeviceptr p = da;
    void *args[] = {&p, &v, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kparams("fill_u32", args, NULL);
    CUgraphNode k, m;
    CK(cuGraphAddKernelNode(&k, g, NULL, 0, &kp));
    CUDA_MEMSET_NODE_PARAMS msp = msparams(dc, 3, 4, N, 1, 0);
    CK(cuGraphAddMemsetNode(&m, g, &k, 1, &msp, ctx0));
    CUDA_HOST_NODE_PARAMS hp = {host_fn, pin + 4};
    CK(cuGraphAddHostNode(&h, g, &m, 1, &hp));
    CK(cuGraphInstantiate(&x, g, 0));
    gate(s1, pin);
    CK(cuGraphLaunch(x, s1));
    v = 2;
    CK(cuGraphExecKernelNodeSetParams(x, k, &kp));
    msp.value = 4;
    CK(cuGraphExecMemsetNodeSetParams(x, m, &msp, ctx0));
    __atomic_store_n(pin, 1, __ATOMIC_RELEASE);
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 1) && words_are(dc, 3)); // the queued launch kept its parameters
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 2) && words_are(dc, 4));
    CK(cuGraphKernelNodeGetParams(k, &kp)); // the graph's node did not change
    CHECK(*(unsigned *)kp.kernelParams[1] == 1);
    // A 1D memset may change its width; a 1D copy's memory kinds may not change.
    msp.width = N / 2;
    msp.value = 5;
    CK(cuGraphExecMemsetNodeSetParams(x, m, &msp, ctx0));
    msp.height = 2;
    msp.pitch = N * 2;
    EXPECT(cuGraphExecMemsetNodeSetParams(x, m, &msp, ctx0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphExecMemcpyNodeSetParams(x, m, NULL, ctx0), CUDA_ERROR_INVALID_VALUE);
    hp.fn = host_fn;
    hp.userData = pin + 5;
    CK(cuGraphExecHostNodeSetParams(x, h, &hp));
    EXPECT(cuGraphExecHostNodeSetParams(x, k, &hp), CUDA_ERROR_INVALID_VALUE);
    // Disabled nodes do nothing; a host node cannot be disabled.
    unsigned en = 9;
    CK(cuGraphNodeGetEnabled(x, k, &en));
    CHECK(en == 1);
    CK(cuGraphNodeSetEnabled(x, k, 0));
    CK(cuGraphNodeGetEnabled(x, k, &en));
    CHECK(en == 0);
    EXPECT(cuGraphNodeSetEnabled(x, h, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemsetD32(da, 0, N));
    pin[5] = 77;
    host_calls = 0;
    CK(cuGraphUpload(x, s1));
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 0) && host_calls == 1 && host_saw == 77);
    unsigned half[N];
    CK(cuMemcpyDtoH(half, dc, sizeof half));
    CHECK(half[0] == 5 && half[N / 2 - 1] == 5 && half[N / 2] == 4);
    CK(cuGraphNodeSetEnabled(x, k, 1));

    // Updates from a graph: parameters taken; shape, type and function context checked.
    CUgraph g2;
    CK(cuGraphClone(&g2, g));
    CUgraphNode k2;
    CK(cuGraphNodeFindInClone(&k2, k, g2));
    v = 6;
    kp = kparams("fill_u32", args, NULL);
    CK(cuGraphKernelNodeSetParams(k2, &kp));
    CUgraphExecUpdateResultInfo info;
    CK(cuGraphExecUpdate(x, g2, &info));
    CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS && !info.errorNode);
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 6) && words_are(dc, 3));
    CK(cuGraphExecKernelNodeSetParams(x, k, &kp)); // nodes are still named by the first graph's
    EXPECT(cuGraphExecKernelNodeSetParams(x, k2, &kp), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphExecUpdate(x, g2, NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphAddEmptyNode(&e, g2, NULL, 0));
    EXPECT(cuGraphExecUpdate(x, g2, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED && !info.errorNode);
    CK(cuGraphDestroyNode(e));
    CUgraphNode m2, h2;
    CK(cuGraphNodeFindInClone(&m2, m, g2));
    CK(cuGraphNodeFindInClone(&h2, h, g2));
    CK(cuGraphRemoveDependencies(g2, &m2, &h2, NULL, 1));
    CK(cuGraphAddDependencies(g2, &k2, &h2, NULL, 1));
    EXPECT(cuGraphExecUpdate(x, g2, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED && info.errorNode == h2 &&
          info.errorFromNode == k2);
    CK(cuGraphDestroy(g2));
    CUresult (*update1)(CUgraphExec, CUgraph, CUgraphNode *, CUgraphExecUpdateResult *) =
        (CUresult(*)(CUgraphExec, CUgraph, CUgraphNode *, CUgraphExecUpdateResult *))dlsym(
            RTLD_DEFAULT, "cuGraphExecUpdate");
    CHECK(update1 != NULL);
    CK(cuGraphCreate(&g2, 0)); // same count, other types
    CUgraphNode x1, x2, x3;
    CK(cuGraphAddEmptyNode(&x1, g2, NULL, 0));
    CK(cuGraphAddEmptyNode(&x2, g2, &x1, 1));
    CK(cuGraphAddEmptyNode(&x3, g2, &x2, 1));
    CUgraphExecUpdateResult r1 = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    CUgraphNode en1 = NULL;
    if (update1) {
        EXPECT(update1(x, g2, &en1, &r1), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
        CHECK(r1 == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED && en1 == x1);
    }
    CK(cuGraphDestroy(g2));
    // A function of another context is no update.
    CUcontext other;
    CUmodule om;
    CK(cuCtxCreate(&other, NULL, 0, 0));
    unsigned char *ptx = st_read("kernels.ptx", NULL);
    CK(cuModuleLoadData(&om, ptx));
    free(ptx);
    CUfunction of;
    CK(cuModuleGetFunction(&of, om, "fill_u32"));
    CK(cuCtxPopCurrent(NULL));
    CK(cuGraphClone(&g2, g));
    CK(cuGraphNodeFindInClone(&k2, k, g2));
    kp.func = of;
    CK(cuGraphKernelNodeSetParams(k2, &kp));
    EXPECT(cuGraphExecUpdate(x, g2, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE &&
          info.errorNode == k2);
    EXPECT(cuGraphExecKernelNodeSetParams(x, k, &kp), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphDestroy(g2));
    CK(cuCtxDestroy(other));
    CK(cuGraphExecDestroy(x));

    // A child graph node's graph updated in the executable graph; event nodes changed.
    CUgraph parent, sub;
    CUgraphNode c, sk, r;
    CUevent e1, e2;
    CK(cuEventCreate(&e1, 0));
    CK(cuEventCreate(&e2, 0));
    CK(cuGraphCreate(&parent, 0));
    CK(cuGraphCreate(&sub, 0));
    v = 11;
    kp = kparams("fill_u32", args, NULL);
    CK(cuGraphAddKernelNode(&sk, sub, NULL, 0, &kp));
    CK(cuGraphAddChildGraphNode(&c, parent, NULL, 0, sub));
    CK(cuGraphAddEventRecordNode(&r, parent, &c, 1, e1));
    CK(cuGraphInstantiate(&x, parent, 0));
    v = 12;
    kp = kparams("fill_u32", args, NULL);
    CK(cuGraphKernelNodeSetParams(sk, &kp));
    CK(cuGraphExecChildGraphNodeSetParams(x, c, sub));
    CK(cuGraphExecEventRecordNodeSetEvent(x, r, e2));
    EXPECT(cuGraphExecEventWaitNodeSetEvent(x, r, e2), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphLaunch(x, s1));
    CK(cuEventSynchronize(e2));
    CHECK(words_are(da, 12));
    CK(cuEventQuery(e1)); // never recorded
    CUgraph inner;
    CUgraphNode ik;
    CK(cuGraphChildGraphNodeGetGraph(c, &inner));
    size_t one = 1;
    CK(cuGraphGetNodes(inner, &ik, &one));
    v = 13;
    CK(cuGraphExecKernelNodeSetParams(x, ik, &kp)); // a node inside the child graph
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(words_are(da, 13));
    CK(cuGraphAddEmptyNode(&e, sub, NULL, 0));
    EXPECT(cuGraphExecChildGraphNodeSetParams(x, c, sub), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(parent));
    CK(cuGraphDestroy(sub));
    CK(cuEventDestroy(e1));
    CK(cuEventDestroy(e2));
    CK(cuGraphDestroy(g));
}

// Graphs need no context; memory named by a node and freed before a launch is a fault.
static void faults(void)
{
    CUcontext c;
    CK(cuCtxCreate(&c, NULL, 0, 0));
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 4096));
    CK(cuCtxPopCurrent(NULL));
    CUgraph g;
    CUgraphNode m;
    CK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS msp = msparams(d, 1, 4, 1024, 1, 0);
    CK(cuGraphAddMemsetNode(&m, g, NULL, 0, &msp, c));
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuCtxPushCurrent(c));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemFree(d));
    CK(cuGraphLaunch(x, s));
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
    CK(cuCtxPopCurrent(NULL));
    CK(cuCtxDestroy(c));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
}

static CUstreamBatchMemOpParams wait32(const unsigned *p, unsigned v)
{
    CUstreamBatchMemOpParams o;
    memset(&o, 0, sizeof o);
    o.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    o.waitValue.address = (CUdeviceptr)p;
    o.waitValue.value = v;
    o.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    return o;
}

// Batch mem-op nodes: a wait holds the nodes after it until the host writes the word, a
// write lands when reached; replays wait again; clone, exec updates, the errors.
static void batch_memops(void)
{
    unsigned *flag = pin, *done = pin + 1;
    *flag = 0;
    *done = 0;
    CUgraph g;
    CUgraphNode k, w, wr;
    CK(cuGraphCreate(&g, 0));
    unsigned v = 3;
    unsigned long long n = N;
    void *fa[] = {&da, &v, &n};
    CUDA_KERNEL_NODE_PARAMS kp = kparams("fill_u32", fa, NULL);
    CK(cuGraphAddKernelNode(&k, g, NULL, 0, &kp));
    CUstreamBatchMemOpParams ops[2] = {wait32(flag, 1)};
    memset(&ops[1], 0, sizeof ops[1]);
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[1].writeValue.address = (CUdeviceptr)done;
    ops[1].writeValue.value = 7;
    CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {ctx0, 1, ops, 0};
    CK(cuGraphAddBatchMemOpNode(&w, g, &k, 1, &bp));
    bp.paramArray = &ops[1];
    CK(cuGraphAddBatchMemOpNode(&wr, g, &w, 1, &bp));
    CUgraphNodeType t;
    CK(cuGraphNodeGetType(w, &t));
    CHECK(t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    CUDA_BATCH_MEM_OP_NODE_PARAMS got;
    CK(cuGraphBatchMemOpNodeGetParams(w, &got));
    CHECK(got.count == 1 && got.paramArray != ops &&
          got.paramArray[0].waitValue.address == (CUdeviceptr)flag);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    for (int round = 0; round < 2; round++) {
        *flag = 0;
        *done = 0;
        CK(cuGraphLaunch(x, s1));
        usleep(20000);
        CHECK(cuStreamQuery(s1) == CUDA_ERROR_NOT_READY && *done == 0);
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        CK(cuStreamSynchronize(s1));
        CHECK(*done == 7 && words_are(da, 3));
    }
    // The exec's copy changes alone; a clone runs the same operations.
    ops[1].writeValue.value = 9;
    CK(cuGraphExecBatchMemOpNodeSetParams(x, wr, &bp));
    *flag = 1;
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(*done == 9);
    CUgraph cl;
    CUgraphExec cx;
    CK(cuGraphClone(&cl, g));
    CK(cuGraphInstantiate(&cx, cl, 0));
    CK(cuGraphLaunch(cx, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(*done == 7);
    CUgraphExecUpdateResultInfo ri;
    CK(cuGraphExecUpdate(x, cl, &ri));
    CK(cuGraphLaunch(x, s1));
    CK(cuStreamSynchronize(s1));
    CHECK(*done == 7);
    // Errors: no operations, flags, a bad operation, memory the device cannot reach.
    CUgraphNode e;
    bp.count = 0;
    EXPECT(cuGraphAddBatchMemOpNode(&e, g, NULL, 0, &bp), CUDA_ERROR_INVALID_VALUE);
    bp.count = 1;
    bp.flags = 1;
    EXPECT(cuGraphAddBatchMemOpNode(&e, g, NULL, 0, &bp), CUDA_ERROR_INVALID_VALUE);
    bp.flags = 0;
    ops[1].operation = (CUstreamBatchMemOpType)42;
    EXPECT(cuGraphAddBatchMemOpNode(&e, g, NULL, 0, &bp), CUDA_ERROR_INVALID_VALUE);
    static unsigned pageable;
    ops[1] = wait32(&pageable, 1);
    EXPECT(cuGraphAddBatchMemOpNode(&e, g, NULL, 0, &bp), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuGraphBatchMemOpNodeSetParams(k, &bp), CUDA_ERROR_INVALID_VALUE);
    CK(cuGraphExecDestroy(cx));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(cl));
    CK(cuGraphDestroy(g));
}

void st_graph(void)
{
    if (!st_mod) st_load();
    CK(cuCtxGetCurrent(&ctx0));
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&da, N * 4));
    CK(cuMemAlloc(&db, N * 4));
    CK(cuMemAlloc(&dc, N * 4));
    CK(cuMemAllocHost((void **)&pin, 2 * N * 4));
    size_t free_before = 0, free_after = 0, total;
    CK(cuMemGetInfo(&free_before, &total));
    chain();
    fork_join();
    capture_errors();
    capture_more();
    modes();
    built();
    node_errors();
    generic();
    executable();
    batch_memops();
    faults();
    CK(cuMemGetInfo(&free_after, &total));
    CHECK(free_after == free_before); // graphs hold no device memory
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
    CK(cuStreamDestroy(s3));
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuMemFreeHost(pin));
}
