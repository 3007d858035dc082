/* twogpus: one process using two devices, each on its own (no peer access): the way a
 * process serves a model per GPU. On each device, with its primary context current: a
 * module's vec_add over memory copied in from pageable memory and from pinned memory made
 * while device 0 was current (usable by every context, as natively), on a stream of its own;
 * an event recorded behind it. Then, with device 0's context current, device 1's stream is
 * synchronised, its event queried and its results copied out on its stream (a call goes
 * where the stream lives), and the other way round; each device's memory freed with the
 * other's context current. Prints one checksum per device. Skips (77) with fewer than two
 * devices.
 *
 * Options:
 *   --library      the kernels come from a library loaded once device 0's context is
 *                  current (cuLibraryLoadData: as the CUDA runtime loads a program's
 *                  kernels), each device launching the same CUkernel, and then running it
 *                  again as a graph's kernel node;
 *   --hostfn       each device's stream also runs a host function, launched with the other
 *                  device's context current; its answer and its run are printed; then a
 *                  host function captured on each device's stream (a graph's host node) runs
 *                  when the graph is launched there, the other device's context current;
 *   --graphs       a graph captured on each device's stream is counted, cloned, instantiated,
 *                  launched there and destroyed with the other device's context current, and
 *                  its nodes (one got from it, one added to it) named alone so;
 *   --events       device 1's stream waits for an event of device 0's recorded behind a
 *                  kernel of 200 ms, then records its own: once that one is synchronised,
 *                  device 0's must be complete (printed), which without the wait it would
 *                  not be;
 *   --lose1        once both devices started, prints "started" and waits for a line on
 *                  stdin (a test ends device 1's server meanwhile); then prints what a
 *                  synchronisation of device 1's stream answers, and reads device 0's results
 *                  as usual, and stops (through both GPUs' servers: device 1's call fails,
 *                  device 0's work goes on);
 *   --vmm          on each device, with its context current, physical memory of its own
 *                  (cuMemCreate) mapped with access for that device (as NCCL's buffers are),
 *                  set and read back;
 *   --vmmpeer      device 0's physical memory (exportable as a POSIX descriptor, as NCCL
 *                  makes its buffers) mapped with access for both devices, read by a kernel
 *                  of device 1 and copied on device 1's stream (NCCL's ranks in one process);
 *   --p2pmap       device 0's physical memory handed to device 1 as a handle, which device
 *                  1 maps at an address of its own (NCCL's p2pMap for ranks in one process):
 *                  read by device 1's kernel, written by device 1 and read back on device 0;
 *   --peer3d       device 0's results copied into device 1's memory as 3D boxes between
 *                  the contexts (cuMemcpy3DPeer, and its async form on device 1's stream);
 *   --device1-first device 1's primary context is retained before device 0's (with
 *                  --vmmpeer: the grant of device 1 goes to device 1's server, the process's
 *                  first, while the memory lies in device 0's);
 *   --named-first  device 1's default pool and granularity asked with only device 0's
 *                  context made (a moved process connects to device 1's server for them);
 *   --early-thread a second thread asks whether device 0 reaches device 1 before the first
 *                  context, and keeps its reply lane, idle, while the main thread makes it
 *                  (a moved process moves all the same: interpose/rpc.c); it then uses
 *                  device 1's memory;
 *   --threads N    a thread per device then runs N rounds at once with the other's:
 *                  pageable memory copied in (through the staging slots: 1 MiB), vec_add,
 *                  the result copied back on the device's stream and checked.
 *
 * Through mpsshim with MPSSHIM_SERVER_PER_GPU_MOVE=1 each device is served by its own GPU's
 * server (interpose/route.c; host functions on each connection's callback thread, hostfn.c;
 * the library loaded again there, replicas.c; the event carried by an interprocess twin,
 * across.c), with the output of one server: tests/server_per_gpu.sh. */
#include "tests/progs/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N (1 << 18)

struct dev {
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction add;
    CUstream s;
    CUevent done;
    CUdeviceptr a, b, c;
    float *out;
};

static CUkernel lib_add; /* --library: vec_add of the library, for every device */

static void host_fn(void *arg)
{
    *(volatile int *)arg = 1;
}

static void start(struct dev *g, int d, const float *pageable, const float *pinned)
{
    CHECK(cuDeviceGet(&g->dev, d));
    CHECK(cuDevicePrimaryCtxRetain(&g->ctx, g->dev));
    CHECK(cuCtxSetCurrent(g->ctx));
    if (lib_add) {
        g->add = (CUfunction)lib_add;
    } else {
        g->mod = t_load_module("kernels.ptx");
        g->add = t_get_function(g->mod, "vec_add");
    }
    CHECK(cuStreamCreate(&g->s, CU_STREAM_DEFAULT)); /* after the legacy stream's copy */
    CHECK(cuEventCreate(&g->done, CU_EVENT_DISABLE_TIMING));
    size_t bytes = N * sizeof(float);
    CHECK(cuMemAlloc(&g->a, bytes));
    CHECK(cuMemAlloc(&g->b, bytes));
    CHECK(cuMemAlloc(&g->c, bytes));
    CHECK(cuMemcpyHtoD(g->a, pageable, bytes));
    CHECK(cuMemcpyHtoDAsync(g->b, pinned, bytes, g->s));
    int n = N;
    void *params[] = {&g->a, &g->b, &g->c, &n};
    CHECK(cuLaunchKernel(g->add, N / 256, 1, 1, 256, 1, 1, 0, g->s, params, NULL));
    CHECK(cuEventRecord(g->done, g->s));
    g->out = malloc(bytes);
    REQUIRE(g->out != NULL, "out of host memory");
}

/* With another device's context current: everything here names g's stream or memory. */
static double finish(struct dev *g, const float *pageable, const float *pinned, int d)
{
    CHECK(cuStreamSynchronize(g->s));
    CHECK(cuEventQuery(g->done));
    CHECK(cuMemcpyDtoHAsync(g->out, g->c, N * sizeof(float), g->s));
    CHECK(cuStreamSynchronize(g->s));
    double sum = 0;
    for (int i = 0; i < N; i++) {
        float want = pageable[i] + pinned[i];
        REQUIRE(g->out[i] == want, "device %d: c[%d] = %g, expected %g", d, i, (double)g->out[i],
                (double)want);
        sum += g->out[i];
    }
    return sum;
}

static void stop(struct dev *g)
{
    CHECK(cuMemFree(g->a));
    CHECK(cuMemFree(g->b));
    CHECK(cuMemFree(g->c));
    CHECK(cuEventDestroy(g->done));
    CHECK(cuStreamDestroy(g->s));
    free(g->out);
}

/* --threads: one device's rounds on a thread of its own. */
struct rounds {
    struct dev *g;
    const float *pageable, *pinned;
    int n, passed;
};

static void *rounds(void *arg)
{
    struct rounds *w = arg;
    struct dev *g = w->g;
    CHECK(cuCtxSetCurrent(g->ctx));
    size_t bytes = N * sizeof(float);
    int n = N;
    void *params[] = {&g->a, &g->b, &g->c, &n};
    for (int i = 0; i < w->n; i++) {
        CHECK(cuMemsetD32Async(g->c, 0xffffffffu, N, g->s));
        CHECK(cuMemcpyHtoDAsync(g->a, w->pageable, bytes, g->s));
        CHECK(cuLaunchKernel(g->add, N / 256, 1, 1, 256, 1, 1, 0, g->s, params, NULL));
        CHECK(cuMemcpyDtoHAsync(g->out, g->c, bytes, g->s));
        CHECK(cuStreamSynchronize(g->s));
        for (int k = 0; k < N; k++)
            REQUIRE(g->out[k] == w->pageable[k] + w->pinned[k], "round %d: c[%d] = %g", i, k,
                    (double)g->out[k]);
        w->passed++;
    }
    return NULL;
}

/* --peer3d: device 0's results copied into device 1's memory as boxes between the two
 * contexts (cuMemcpy3DPeer with device 0's context current, its async form on device 1's
 * stream with device 1's), each read back and compared with the source. */
static void peer3d(struct dev *g)
{
    enum { W = 1024, H = 64, D = 2, FLOATS = W / 4 * H * D };
    float *want = malloc(FLOATS * sizeof(float)), *got = malloc(FLOATS * sizeof(float));
    REQUIRE(want && got, "out of host memory");
    CHECK(cuCtxSetCurrent(g[0].ctx));
    CHECK(cuStreamSynchronize(g[0].s));
    CHECK(cuMemcpyDtoH(want, g[0].c, FLOATS * sizeof(float)));
    for (int async = 0; async < 2; async++) {
        CUDA_MEMCPY3D_PEER p = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                                .srcDevice = g[0].c,
                                .srcContext = g[0].ctx,
                                .srcPitch = W,
                                .srcHeight = H,
                                .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                                .dstDevice = async ? g[1].b : g[1].a,
                                .dstContext = g[1].ctx,
                                .dstPitch = W,
                                .dstHeight = H,
                                .WidthInBytes = W,
                                .Height = H,
                                .Depth = D};
        CHECK(cuCtxSetCurrent(g[async].ctx));
        if (async) {
            CHECK(cuMemcpy3DPeerAsync(&p, g[1].s));
            CHECK(cuStreamSynchronize(g[1].s));
        } else {
            CHECK(cuMemcpy3DPeer(&p));
        }
        CHECK(cuCtxSetCurrent(g[1].ctx));
        CHECK(cuMemcpyDtoH(got, p.dstDevice, FLOATS * sizeof(float)));
        printf("cuMemcpy3DPeer%s from device 0 to device 1: %s (%.2f)\n", async ? "Async" : "",
               memcmp(want, got, FLOATS * sizeof(float)) == 0 ? "same" : "DIFFERENT",
               got[FLOATS - 1]);
    }
    free(want);
    free(got);
}

/* --p2pmap: what NCCL's ranks in one process do (p2pMap with cuMem): device 0's rank makes
 * its buffer and hands its handle on; device 1's maps that handle at an address of its own
 * and grants device 1 access, with its own context current, then releases the handle. */
static void p2pmap(struct dev *g)
{
    CHECK(cuCtxSetCurrent(g[0].ctx));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran = 0, bytes = N * sizeof(float);
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = (bytes + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h, held;
    CUdeviceptr va0, va1;
    CUmemAccessDesc rw = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemCreate(&h, size, &prop, 0));
    CHECK(cuMemAddressReserve(&va0, size, gran, 0, 0));
    CHECK(cuMemMap(va0, size, 0, h, 0));
    CHECK(cuMemSetAccess(va0, size, &rw, 1));
    CHECK(cuMemsetD32(va0, 0x40000000u, N)); /* 2.0f */
    CHECK(cuCtxSynchronize());
    CHECK(cuMemRetainAllocationHandle(&held, (void *)(uintptr_t)va0)); /* the peer's reference */
    printf("device 0's buffer: the handle retained from its mapping is the one made: %d\n",
           held == h);

    CHECK(cuCtxSetCurrent(g[1].ctx));
    CUmemAllocationProp got;
    memset(&got, 0, sizeof(got));
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, held));
    printf("device 1 reads its properties: device %d, exportable as a descriptor %d\n",
           got.location.id,
           !!(got.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    size_t gran1 = 0;
    CHECK(cuMemGetAllocationGranularity(&gran1, &got, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(cuMemAddressReserve(&va1, size, gran1, 0, 0));
    CHECK(cuMemMap(va1, size, 0, held, 0));
    rw.location.id = 1;
    CHECK(cuMemSetAccess(va1, size, &rw, 1));
    CHECK(cuMemRelease(held));
    int elems = N;
    void *params[] = {&va1, &va1, &g[1].c, &elems};
    CHECK(cuLaunchKernel(g[1].add, N / 256, 1, 1, 256, 1, 1, 0, g[1].s, params, NULL));
    CHECK(cuMemcpyDtoHAsync(g[1].out, g[1].c, bytes, g[1].s));
    CHECK(cuStreamSynchronize(g[1].s));
    printf("device 1's kernel read device 0's buffer through its own mapping: %.1f %.1f\n",
           g[1].out[0], g[1].out[N - 1]);
    CHECK(cuMemsetD32Async(va1, 0x40400000u, N, g[1].s)); /* 3.0f */
    CHECK(cuStreamSynchronize(g[1].s));

    CHECK(cuCtxSetCurrent(g[0].ctx));
    float back[2];
    CHECK(cuMemcpyDtoH(&back[0], va0, sizeof(float)));
    CHECK(cuMemcpyDtoH(&back[1], va0 + bytes - sizeof(float), sizeof(float)));
    printf("device 0 reads what device 1 wrote there: %.1f %.1f\n", back[0], back[1]);
    /* Device 1's mapping and reservation freed with device 0's context current (the
     * process's address space, whichever device is current). */
    CHECK(cuMemUnmap(va1, size));
    CHECK(cuMemAddressFree(va1, size));
    CHECK(cuMemUnmap(va0, size));
    CHECK(cuMemAddressFree(va0, size));
    CHECK(cuMemRelease(h));
    printf("both mappings gone, the handle released\n");
}

/* --early-thread: a thread that asks about the devices before the first context (as a
 * runtime's threads do: JAX's), then waits, idle, while the main thread makes it; then uses
 * device 1 itself. */
static pthread_mutex_t early_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t early_cond = PTHREAD_COND_INITIALIZER;
static int early_stage; /* 1: it asked; 2: go on */
static struct dev *early_g;

static void *early_thread(void *arg)
{
    (void)arg;
    int can = -1;
    CHECK(cuDeviceCanAccessPeer(&can, 0, 1));
    pthread_mutex_lock(&early_lock);
    early_stage = 1;
    pthread_cond_broadcast(&early_cond);
    while (early_stage != 2)
        pthread_cond_wait(&early_cond, &early_lock);
    pthread_mutex_unlock(&early_lock);
    CHECK(cuCtxSetCurrent(early_g[1].ctx));
    CUdeviceptr p;
    unsigned back = 0;
    CHECK(cuMemAlloc(&p, 4096));
    CHECK(cuMemsetD32(p, 0x5a5a5a5au, 1024));
    CHECK(cuMemcpyDtoH(&back, p + 4092, sizeof(back)));
    CHECK(cuMemFree(p));
    printf("a thread that asked before the first context: peer access %d, then device 1's "
           "memory set and read back: %#x\n",
           can, back);
    return NULL;
}

int main(int argc, char **argv)
{
    t_init("twogpus", 120);
    CHECK(cuInit(0));
    int n = 0;
    CHECK(cuDeviceGetCount(&n));
    if (n < 2) t_skip("needs two devices, found %d", n);
    pthread_t early;
    int early_on = t_has_flag(argc, argv, "--early-thread");
    if (early_on) {
        REQUIRE(pthread_create(&early, NULL, early_thread, NULL) == 0, "no thread");
        pthread_mutex_lock(&early_lock);
        while (early_stage != 1)
            pthread_cond_wait(&early_cond, &early_lock);
        pthread_mutex_unlock(&early_lock);
    }
    CUlibrary lib = NULL;
    struct dev g[2];
    memset(g, 0, sizeof(g));
    float *pageable = malloc(N * sizeof(float)), *pinned = NULL;
    REQUIRE(pageable != NULL, "out of host memory");
    /* --device1-first: device 1's context is the process's first (a runtime's threads may
     * make them in any order: XLA's do), so its moved process's first server is device 1's. */
    CUcontext first1 = NULL;
    if (t_has_flag(argc, argv, "--device1-first")) {
        CUdevice d1;
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDevicePrimaryCtxRetain(&first1, d1));
    }
    /* Device 0's context current for the pinned allocation: every context may use it. */
    CUdevice d0;
    CUcontext c0;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c0, d0));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemHostAlloc((void **)&pinned, N * sizeof(float), CU_MEMHOSTALLOC_PORTABLE));
    if (t_has_flag(argc, argv, "--named-first")) {
        /* Device 1 named before it has a context: its default pool and its physical
         * memory's granularity, asked with device 0's context current. */
        CUmemoryPool pool1;
        cuuint64_t threshold = 1;
        size_t gran1 = 0;
        CUmemAllocationProp p1 = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                  .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1}};
        CHECK(cuDeviceGetDefaultMemPool(&pool1, 1));
        CHECK(cuMemPoolGetAttribute(pool1, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
        CHECK(cuMemGetAllocationGranularity(&gran1, &p1, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        printf("device 1 before its context: default pool's release threshold %llu, "
               "granularity %zu\n",
               (unsigned long long)threshold, gran1);
    }
    if (t_has_flag(argc, argv, "--library")) {
        void *image = t_read_kernel_file("kernels.ptx", NULL);
        CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
        CHECK(cuLibraryGetKernel(&lib_add, lib, "vec_add"));
        free(image);
    }
    for (int i = 0; i < N; i++) {
        pageable[i] = (float)(i % 1000);
        pinned[i] = (float)(i % 7) * 0.25f;
    }
    for (int d = 0; d < 2; d++)
        start(&g[d], d, pageable, pinned);
    t_ok("both devices started");
    if (early_on) {
        early_g = g;
        pthread_mutex_lock(&early_lock);
        early_stage = 2;
        pthread_cond_broadcast(&early_cond);
        pthread_mutex_unlock(&early_lock);
        pthread_join(early, NULL);
    }
    if (t_has_flag(argc, argv, "--lose1")) {
        printf("started\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof(line), stdin)) line[0] = '\0';
        CHECK(cuCtxSetCurrent(g[0].ctx));
        printf("device 1's stream synchronised: %s\n", t_errname(cuStreamSynchronize(g[1].s)));
        printf("device 0 checksum %.2f\n", finish(&g[0], pageable, pinned, 0));
        t_pass();
    }
    int hostfn = t_has_flag(argc, argv, "--hostfn");
    static int ran[2];
    for (int d = 0; d < 2; d++) {
        CHECK(cuCtxSetCurrent(g[1 - d].ctx)); /* the other device's context current */
        if (hostfn) {
            CUresult h = cuLaunchHostFunc(g[d].s, host_fn, &ran[d]);
            printf("device %d host function %s\n", d, t_errname(h));
        }
        printf("device %d checksum %.2f\n", d, finish(&g[d], pageable, pinned, d));
        if (hostfn) printf("device %d host function ran %d\n", d, ran[d]);
    }
    t_ok("both devices' results, each read with the other's context current");
    for (int d = 0; d < 2 && lib_add; d++) {
        CUgraph graph;
        CUgraphExec exec;
        CUgraphNode node;
        int elems = N;
        void *params[] = {&g[d].a, &g[d].b, &g[d].c, &elems};
        CUDA_KERNEL_NODE_PARAMS kp = {.kern = lib_add,
                                      .gridDimX = N / 256,
                                      .gridDimY = 1,
                                      .gridDimZ = 1,
                                      .blockDimX = 256,
                                      .blockDimY = 1,
                                      .blockDimZ = 1,
                                      .kernelParams = params};
        CHECK(cuCtxSetCurrent(g[d].ctx)); /* a graph is made through its device's server */
        CHECK(cuGraphCreate(&graph, 0));
        CHECK(cuGraphAddKernelNode(&node, graph, NULL, 0, &kp));
        CHECK(cuGraphInstantiate(&exec, graph, 0));
        CHECK(cuMemsetD32Async(g[d].c, 0xffffffffu, N, g[d].s));
        CHECK(cuGraphLaunch(exec, g[d].s));
        printf("device %d checksum %.2f as a graph's kernel node\n", d,
               finish(&g[d], pageable, pinned, d));
        CHECK(cuGraphExecDestroy(exec));
        CHECK(cuGraphDestroy(graph));
    }
    /* --graphs: a graph captured on each device's stream, then, with the other device's
     * context current, its nodes counted, cloned, instantiated, launched on the device's
     * stream and destroyed (a graph is no context's: natively any may be current). */
    for (int d = 0; d < 2 && t_has_flag(argc, argv, "--graphs"); d++) {
        CUgraph graph, clone;
        CUgraphExec exec;
        int elems = N;
        void *params[] = {&g[d].a, &g[d].b, &g[d].c, &elems};
        CHECK(cuCtxSetCurrent(g[d].ctx));
        CHECK(cuMemsetD32Async(g[d].c, 0xffffffffu, N, g[d].s));
        CHECK(cuStreamBeginCapture(g[d].s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        CHECK(cuLaunchKernel(g[d].add, N / 256, 1, 1, 256, 1, 1, 0, g[d].s, params, NULL));
        CHECK(cuStreamEndCapture(g[d].s, &graph));
        CHECK(cuCtxSetCurrent(g[1 - d].ctx));
        size_t nodes = 0;
        CHECK(cuGraphGetNodes(graph, NULL, &nodes));
        /* Its nodes named alone: one got from the graph, one added to it, the second destroyed. */
        CUgraphNode got[4] = {0}, empty;
        size_t room = 4;
        CUgraphNodeType type, etype;
        CUDA_KERNEL_NODE_PARAMS kp;
        CHECK(cuGraphGetNodes(graph, got, &room));
        CHECK(cuGraphNodeGetType(got[0], &type));
        CHECK(cuGraphKernelNodeGetParams(got[0], &kp));
        CHECK(cuGraphAddEmptyNode(&empty, graph, got, 1));
        CHECK(cuGraphNodeGetType(empty, &etype));
        CHECK(cuGraphDestroyNode(empty));
        printf("device %d: node types %d and %d, the kernel's grid %u x %u threads, named with "
               "the other device current\n",
               d, (int)type, (int)etype, kp.gridDimX, kp.blockDimX);
        CHECK(cuGraphClone(&clone, graph));
        CHECK(cuGraphInstantiate(&exec, clone, 0));
        CHECK(cuGraphLaunch(exec, g[d].s));
        printf("device %d: a graph of %zu node(s) handled with the other device current: "
               "checksum %.2f\n",
               d, nodes, finish(&g[d], pageable, pinned, d));
        CHECK(cuCtxSetCurrent(g[1 - d].ctx));
        CHECK(cuGraphExecDestroy(exec));
        CHECK(cuGraphDestroy(clone));
        CHECK(cuGraphDestroy(graph));
    }
    for (int d = 0; d < 2 && hostfn; d++) {
        static int node_ran[2];
        CUgraph graph;
        CUgraphExec exec;
        CHECK(cuCtxSetCurrent(g[d].ctx)); /* a graph is made through its device's server */
        CHECK(cuStreamBeginCapture(g[d].s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        CHECK(cuLaunchHostFunc(g[d].s, host_fn, &node_ran[d]));
        CHECK(cuStreamEndCapture(g[d].s, &graph));
        CHECK(cuGraphInstantiate(&exec, graph, 0));
        CHECK(cuCtxSetCurrent(g[1 - d].ctx));
        CHECK(cuGraphLaunch(exec, g[d].s));
        CHECK(cuStreamSynchronize(g[d].s));
        printf("device %d host node ran %d\n", d, node_ran[d]);
        CHECK(cuCtxSetCurrent(g[d].ctx));
        CHECK(cuGraphExecDestroy(exec));
        CHECK(cuGraphDestroy(graph));
    }
    if (t_has_flag(argc, argv, "--events")) {
        CHECK(cuCtxSetCurrent(g[0].ctx));
        CUmodule m = t_load_module("kernels.ptx");
        CUfunction delay = t_get_function(m, "delay_set");
        CUevent e0, e1;
        CUdeviceptr flag;
        CHECK(cuMemAlloc(&flag, sizeof(unsigned)));
        CHECK(cuEventCreate(&e0, CU_EVENT_DISABLE_TIMING));
        unsigned value = 1;
        unsigned long long ns = 200ull * 1000 * 1000;
        void *params[] = {&flag, &value, &ns};
        CHECK(cuLaunchKernel(delay, 1, 1, 1, 1, 1, 1, 0, g[0].s, params, NULL));
        CHECK(cuEventRecord(e0, g[0].s));
        CHECK(cuCtxSetCurrent(g[1].ctx));
        CHECK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
        CHECK(cuStreamWaitEvent(g[1].s, e0, 0));
        CHECK(cuEventRecord(e1, g[1].s));
        CHECK(cuEventSynchronize(e1));
        printf("device 1's event after waiting for device 0's: device 0's %s\n",
               t_errname(cuEventQuery(e0)));
        CHECK(cuEventDestroy(e1));
        CHECK(cuCtxSetCurrent(g[0].ctx));
        CHECK(cuEventSynchronize(e0));
        CHECK(cuEventDestroy(e0));
        CHECK(cuMemFree(flag));
        CHECK(cuModuleUnload(m));
    }
    for (int d = 0; d < 2 && t_has_flag(argc, argv, "--vmm"); d++) {
        CHECK(cuCtxSetCurrent(g[d].ctx));
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d}};
        size_t gran = 0;
        CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        CUmemAccessDesc rw = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CHECK(cuMemCreate(&h, gran, &prop, 0));
        CHECK(cuMemAddressReserve(&va, gran, 0, 0, 0));
        CHECK(cuMemMap(va, gran, 0, h, 0));
        CHECK(cuMemSetAccess(va, gran, &rw, 1));
        CHECK(cuMemsetD32(va, 0x1000u + (unsigned)d, gran / 4));
        unsigned back[4];
        CHECK(cuMemcpyDtoH(back, va + gran - sizeof(back), sizeof(back)));
        printf("device %d: its own physical memory mapped, set and read back: %#x\n", d, back[3]);
        CHECK(cuMemUnmap(va, gran));
        CHECK(cuMemAddressFree(va, gran));
        CHECK(cuMemRelease(h));
    }
    if (t_has_flag(argc, argv, "--vmmpeer")) {
        CHECK(cuCtxSetCurrent(g[0].ctx));
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .requestedHandleTypes =
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
        size_t gran = 0, bytes = N * sizeof(float);
        CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        size_t size = (bytes + gran - 1) / gran * gran;
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        CUmemAccessDesc rw[2] = {{.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
                                 {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                                  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE}};
        CHECK(cuMemCreate(&h, size, &prop, 0));
        CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
        CHECK(cuMemMap(va, size, 0, h, 0));
        CHECK(cuMemSetAccess(va, size, rw, 2));
        CHECK(cuMemsetD32(va, 0x40000000u, N)); /* 2.0f */
        CHECK(cuCtxSynchronize());
        CHECK(cuCtxSetCurrent(g[1].ctx));
        int elems = N;
        void *params[] = {&va, &va, &g[1].c, &elems};
        CHECK(cuLaunchKernel(g[1].add, N / 256, 1, 1, 256, 1, 1, 0, g[1].s, params, NULL));
        CHECK(cuMemcpyDtoHAsync(g[1].out, g[1].c, bytes, g[1].s));
        CHECK(cuStreamSynchronize(g[1].s));
        printf("device 1's kernel read device 0's physical memory: %.1f %.1f\n", g[1].out[0],
               g[1].out[N - 1]);
        CHECK(cuMemcpyDtoDAsync(g[1].a, va, bytes, g[1].s));
        CHECK(cuMemcpyDtoHAsync(g[1].out, g[1].a, bytes, g[1].s));
        CHECK(cuStreamSynchronize(g[1].s));
        printf("copied from it on device 1's stream: %.1f\n", g[1].out[N / 2]);
        CHECK(cuCtxSetCurrent(g[0].ctx));
        CHECK(cuMemUnmap(va, size));
        CHECK(cuMemAddressFree(va, size));
        CHECK(cuMemRelease(h));
    }
    if (t_has_flag(argc, argv, "--p2pmap")) p2pmap(g);
    if (t_has_flag(argc, argv, "--peer3d")) peer3d(g);
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--threads") != 0) continue;
        struct rounds w[2];
        pthread_t t[2];
        for (int d = 0; d < 2; d++) {
            w[d] = (struct rounds){.g = &g[d],
                                   .pageable = pageable,
                                   .pinned = pinned,
                                   .n = atoi(argv[i + 1]),
                                   .passed = 0};
            REQUIRE(pthread_create(&t[d], NULL, rounds, &w[d]) == 0, "no thread");
        }
        for (int d = 0; d < 2; d++) {
            pthread_join(t[d], NULL);
            printf("device %d: %d rounds passed on a thread of its own\n", d, w[d].passed);
        }
    }
    for (int d = 0; d < 2; d++) {
        CHECK(cuCtxSetCurrent(g[1 - d].ctx));
        stop(&g[d]);
    }
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFreeHost(pinned));
    for (int d = 0; d < 2; d++) {
        CHECK(cuCtxSetCurrent(g[d].ctx)); /* a module is its context's */
        if (g[d].mod) CHECK(cuModuleUnload(g[d].mod));
    }
    CHECK(cuCtxSetCurrent(NULL));
    for (int d = 0; d < 2; d++)
        CHECK(cuDevicePrimaryCtxRelease(g[d].dev));
    CHECK(cuDevicePrimaryCtxRelease(d0));
    if (first1) CHECK(cuDevicePrimaryCtxRelease(g[1].dev));
    if (lib) CHECK(cuLibraryUnload(lib));
    free(pageable);
    t_pass();
}
