/* isolation: one client cannot use another client's memory or handles through the API.
 *
 * The process forks before any CUDA call; each side then initialises CUDA on its own.
 * A allocates memory and creates a stream, an event, a module, a function, a memory pool,
 * stream-ordered memory, virtual memory, a graph, arrays, a texture and a surface, sends
 * those values to B through a pipe and waits. B tries to use each of them; every call must fail
 * (any error; which one is not printed) and nothing may crash. Then A checks that its memory
 * is intact and its handles still work.
 *
 * Natively another process's handles are dangling pointers that may crash the real driver,
 * so this runs only through the shim. */
#include "tests/progs/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (1 << 20)
#define SEED 0xa11ce

/* What A sends to B: raw handle and pointer values. */
struct handles {
    uint64_t dptr, stream, event, module, func;
    uint64_t pool, pooled, default_pool, async; /* a pool, memory from it, cuMemAllocAsync's */
    uint64_t reserved, mapped, handle;          /* virtual memory: a reservation, a mapping */
    uint64_t graph, node, exec;                 /* a graph with a memset node, instantiated */
    uint64_t array, mip, tex, surf;             /* an array, a mipmapped array, objects over them */
};

/* Virtual memory of one granule's multiples: the granularity of device 0. */
static size_t granule(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return g;
}

static CUmemGenericAllocationHandle vmm_create(size_t bytes)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CHECK(cuMemCreate(&h, bytes, &prop, 0));
    return h;
}

static void vmm_access(CUdeviceptr p, size_t bytes)
{
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(p, bytes, &d, 1));
}

/* Each call on A's values must fail; the line says which call was refused. */
#define REFUSED(call, what)                                                                        \
    do {                                                                                           \
        EXPECT_ERR(call);                                                                          \
        t_ok("B: %s refused", what);                                                               \
    } while (0)

static void run_b(int from_a, int to_a)
{
    struct handles h;
    REQUIRE(t_read_all(from_a, &h, sizeof h), "B: A sent no handles");
    CUdeviceptr adptr = (CUdeviceptr)h.dptr;
    CUstream as = (CUstream)(uintptr_t)h.stream;
    CUevent aev = (CUevent)(uintptr_t)h.event;
    CUmodule amod = (CUmodule)(uintptr_t)h.module;
    CUfunction af = (CUfunction)(uintptr_t)h.func;

    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mine_mod = t_load_module("kernels.ptx");
    CUfunction mine_inc = t_get_function(mine_mod, "inc_u32");
    CUdeviceptr mine;
    CHECK(cuMemAlloc(&mine, BYTES));
    CHECK(cuMemsetD8(mine, 0, BYTES));
    t_ok("B: set up");

    static unsigned char buf[4096];
    memset(buf, 0xbb, sizeof buf);
    REFUSED(cuMemcpyDtoH(buf, adptr, sizeof buf), "cuMemcpyDtoH from A's memory");
    REFUSED(cuMemcpyHtoD(adptr, buf, sizeof buf), "cuMemcpyHtoD to A's memory");
    REFUSED(cuMemsetD8(adptr, 0, sizeof buf), "cuMemsetD8 on A's memory");
    REFUSED(cuMemcpyDtoD(mine, adptr, sizeof buf), "cuMemcpyDtoD from A's memory");
    REFUSED(cuMemcpyDtoD(adptr, mine, sizeof buf), "cuMemcpyDtoD to A's memory");
    REFUSED(cuMemcpy((CUdeviceptr)(uintptr_t)buf, adptr, sizeof buf), "cuMemcpy from A's memory");
    CUdeviceptr base;
    size_t size;
    REFUSED(cuMemGetAddressRange(&base, &size, adptr), "cuMemGetAddressRange of A's memory");
    REFUSED(cuMemFree(adptr), "cuMemFree of A's memory");
    REFUSED(cuStreamSynchronize(as), "cuStreamSynchronize on A's stream");
    REFUSED(cuStreamQuery(as), "cuStreamQuery on A's stream");
    REFUSED(cuEventSynchronize(aev), "cuEventSynchronize on A's event");
    REFUSED(cuEventQuery(aev), "cuEventQuery on A's event");
    REFUSED(cuStreamWaitEvent(NULL, aev, 0), "cuStreamWaitEvent on A's event");
    REFUSED(cuEventRecord(aev, NULL), "cuEventRecord of A's event");
    CUfunction f;
    REFUSED(cuModuleGetFunction(&f, amod, "inc_u32"), "cuModuleGetFunction in A's module");
    unsigned long long n = 1024;
    void *args[] = {&mine, &n};
    REFUSED(cuLaunchKernel(af, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
            "cuLaunchKernel of A's function");
    REFUSED(cuLaunchKernel(mine_inc, 1, 1, 1, 32, 1, 1, 0, as, args, NULL),
            "cuLaunchKernel on A's stream");
    REFUSED(cuStreamDestroy(as), "cuStreamDestroy of A's stream");
    REFUSED(cuEventDestroy(aev), "cuEventDestroy of A's event");
    REFUSED(cuModuleUnload(amod), "cuModuleUnload of A's module");

    /* The stream-ordered allocator: A's pools and the memory in them. */
    CUmemoryPool apool = (CUmemoryPool)(uintptr_t)h.pool, mypool;
    CUdeviceptr x;
    cuuint64_t threshold = 0;
    REFUSED(cuMemAllocFromPoolAsync(&x, 4096, apool, NULL),
            "cuMemAllocFromPoolAsync from A's pool");
    REFUSED(cuMemPoolSetAttribute(apool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            "cuMemPoolSetAttribute of A's pool");
    REFUSED(cuMemPoolGetAttribute(apool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &threshold),
            "cuMemPoolGetAttribute of A's pool");
    REFUSED(cuMemPoolTrimTo(apool, 0), "cuMemPoolTrimTo of A's pool");
    REFUSED(cuDeviceSetMemPool(dev, apool), "cuDeviceSetMemPool to A's pool");
    REFUSED(cuMemPoolDestroy(apool), "cuMemPoolDestroy of A's pool");
    REFUSED(cuMemFreeAsync((CUdeviceptr)h.pooled, NULL), "cuMemFreeAsync of A's pool memory");
    REFUSED(cuMemFree((CUdeviceptr)h.async), "cuMemFree of A's stream-ordered memory");
    REFUSED(cuMemsetD8Async((CUdeviceptr)h.pooled, 0, 4096, NULL),
            "cuMemsetD8Async on A's pool memory");
    REFUSED(cuMemcpyDtoH(buf, (CUdeviceptr)h.async, sizeof buf),
            "cuMemcpyDtoH from A's stream-ordered memory");
    CHECK(cuDeviceGetDefaultMemPool(&mypool, dev));
    REQUIRE((uint64_t)(uintptr_t)mypool != h.default_pool, "B got A's default pool");
    CHECK(cuMemAllocAsync(&x, 4096, NULL));
    CHECK(cuMemFreeAsync(x, NULL));
    CHECK(cuStreamSynchronize(NULL));
    t_ok("B: its default pool is its own");

    /* Virtual memory: A's reservation (the half A left unmapped), mapping and physical
     * allocation. In the one shared context, mapping into A's reservation would put B's
     * memory at A's addresses. */
    size_t g = granule();
    CUmemGenericAllocationHandle ah = (CUmemGenericAllocationHandle)h.handle, bh = vmm_create(g);
    CUdeviceptr mine_va;
    CHECK(cuMemAddressReserve(&mine_va, 2 * g, 0, 0, 0));
    REFUSED(cuMemMap((CUdeviceptr)h.reserved + g, g, 0, bh, 0), "cuMemMap into A's reservation");
    REFUSED(cuMemMap(mine_va, g, 0, ah, 0), "cuMemMap of A's physical memory");
    CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    REFUSED(cuMemSetAccess((CUdeviceptr)h.mapped, g, &rw, 1), "cuMemSetAccess on A's mapping");
    REFUSED(cuMemsetD8((CUdeviceptr)h.mapped, 0, g), "cuMemsetD8 on A's mapped memory");
    REFUSED(cuMemUnmap((CUdeviceptr)h.mapped, g), "cuMemUnmap of A's mapping");
    REFUSED(cuMemAddressFree((CUdeviceptr)h.reserved, 2 * g),
            "cuMemAddressFree of A's reservation");
    REFUSED(cuMemRelease(ah), "cuMemRelease of A's physical memory");
    CHECK(cuMemMap(mine_va, g, 0, bh, 0));
    vmm_access(mine_va, g);
    CHECK(cuMemsetD8(mine_va, 0x3c, g));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemUnmap(mine_va, g));
    CHECK(cuMemAddressFree(mine_va, 2 * g));
    CHECK(cuMemRelease(bh));
    t_ok("B: its own virtual memory works");

    /* Graphs: A's graph, node and exec, and nodes naming A's memory or nodes in B's own
     * graph. */
    CUgraph ag = (CUgraph)(uintptr_t)h.graph, bg;
    CUgraphNode an = (CUgraphNode)(uintptr_t)h.node, bn, bn2;
    CUgraphExec ae = (CUgraphExec)(uintptr_t)h.exec, be;
    CUgraphNodeType type;
    REFUSED(cuGraphLaunch(ae, NULL), "cuGraphLaunch of A's exec");
    REFUSED(cuGraphInstantiateWithFlags(&be, ag, 0), "cuGraphInstantiate of A's graph");
    REFUSED(cuGraphAddEmptyNode(&bn, ag, NULL, 0), "cuGraphAddEmptyNode to A's graph");
    REFUSED(cuGraphNodeGetType(an, &type), "cuGraphNodeGetType of A's node");
    REFUSED(cuGraphDestroyNode(an), "cuGraphDestroyNode of A's node");
    REFUSED(cuGraphExecDestroy(ae), "cuGraphExecDestroy of A's exec");
    REFUSED(cuGraphDestroy(ag), "cuGraphDestroy of A's graph");
    REFUSED(cuStreamBeginCapture(as, CU_STREAM_CAPTURE_MODE_GLOBAL),
            "cuStreamBeginCapture of A's stream");
    CUdeviceptr mine2;
    CHECK(cuMemAlloc(&mine2, sizeof buf));
    CHECK(cuGraphCreate(&bg, 0));
    CUDA_MEMSET_NODE_PARAMS ms = {
        .dst = adptr, .value = 0xbb, .elementSize = 1, .width = sizeof buf, .height = 1};
    REFUSED(cuGraphAddMemsetNode(&bn, bg, NULL, 0, &ms, ctx), "cuGraphAddMemsetNode on A's memory");
    CUDA_MEMCPY3D cp = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                        .srcDevice = adptr,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = mine2,
                        .WidthInBytes = sizeof buf,
                        .Height = 1,
                        .Depth = 1};
    REFUSED(cuGraphAddMemcpyNode(&bn, bg, NULL, 0, &cp, ctx),
            "cuGraphAddMemcpyNode from A's memory");
    ms.dst = mine2;
    CHECK(cuGraphAddMemsetNode(&bn, bg, NULL, 0, &ms, ctx));
    REFUSED(cuGraphAddDependencies(bg, &an, &bn, NULL, 1), "cuGraphAddDependencies on A's node");
    REFUSED(cuGraphAddEmptyNode(&bn2, bg, &an, 1), "a node of B's depending on A's node");
    REFUSED(cuGraphMemsetNodeSetParams(
                bn,
                &(CUDA_MEMSET_NODE_PARAMS){
                    .dst = adptr, .value = 1, .elementSize = 1, .width = 16, .height = 1}),
            "cuGraphMemsetNodeSetParams onto A's memory");
    CHECK(cuGraphInstantiateWithFlags(&be, bg, 0));
    CHECK(cuGraphLaunch(be, NULL));
    CHECK(cuStreamSynchronize(NULL));
    memset(buf, 0, sizeof buf);
    CHECK(cuMemcpyDtoH(buf, mine2, sizeof buf));
    REQUIRE(t_bytes_mismatch(buf, sizeof buf, 0xbb) == SIZE_MAX, "B: its own graph's memset");
    CHECK(cuGraphExecDestroy(be));
    CHECK(cuGraphDestroy(bg));
    REFUSED(cuGraphNodeGetType(bn, &type), "cuGraphNodeGetType of a node of a destroyed graph");
    CHECK(cuMemFree(mine2));
    t_ok("B: its own graph works");

    /* Textures and surfaces: A's objects, and objects of B's over A's memory and arrays. */
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_POINT};
    CUDA_RESOURCE_DESC rd = {.resType = CU_RESOURCE_TYPE_LINEAR};
    rd.res.linear.devPtr = adptr;
    rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1;
    rd.res.linear.sizeInBytes = 4096;
    CUtexObject bt;
    CUsurfObject bs;
    CUDA_RESOURCE_DESC back;
    CUarray lvl;
    REFUSED(cuTexObjectCreate(&bt, &rd, &td, NULL), "a texture over A's memory");
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = (CUarray)(uintptr_t)h.array;
    REFUSED(cuTexObjectCreate(&bt, &rd, &td, NULL), "a texture over A's array");
    REFUSED(cuSurfObjectCreate(&bs, &rd), "a surface over A's array");
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    rd.res.mipmap.hMipmappedArray = (CUmipmappedArray)(uintptr_t)h.mip;
    td.flags = CU_TRSF_NORMALIZED_COORDINATES;
    REFUSED(cuTexObjectCreate(&bt, &rd, &td, NULL), "a texture over A's mipmapped array");
    REFUSED(cuMipmappedArrayGetLevel(&lvl, (CUmipmappedArray)(uintptr_t)h.mip, 0),
            "cuMipmappedArrayGetLevel of A's mipmapped array");
    REFUSED(cuTexObjectGetResourceDesc(&back, (CUtexObject)h.tex),
            "cuTexObjectGetResourceDesc of A's texture");
    REFUSED(cuSurfObjectGetResourceDesc(&back, (CUsurfObject)h.surf),
            "cuSurfObjectGetResourceDesc of A's surface");
    REFUSED(cuTexObjectDestroy((CUtexObject)h.tex), "cuTexObjectDestroy of A's texture");
    REFUSED(cuSurfObjectDestroy((CUsurfObject)h.surf), "cuSurfObjectDestroy of A's surface");
    REFUSED(cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h.mip),
            "cuMipmappedArrayDestroy of A's mipmapped array");

    /* The refusals left B itself working. */
    CHECK(cuLaunchKernel(mine_inc, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    uint32_t w[1024];
    CHECK(cuMemcpyDtoH(w, mine, sizeof w));
    for (int i = 0; i < 1024; i++)
        REQUIRE(w[i] == 1, "B: own buffer word %d is %u after inc_u32", i, w[i]);
    t_ok("B: its own work still runs");

    /* Its own handles, once destroyed, are refused too (nothing is created in between, so
     * they cannot have been reused). The real driver may crash here, hence shim only. */
    CUstream sd;
    CUevent ed;
    CHECK(cuStreamCreate(&sd, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ed, CU_EVENT_DEFAULT));
    CHECK(cuStreamDestroy(sd));
    CHECK(cuEventDestroy(ed));
    REFUSED(cuStreamQuery(sd), "cuStreamQuery on a destroyed stream");
    REFUSED(cuEventQuery(ed), "cuEventQuery on a destroyed event");
    REFUSED(cuMemFree(mine + 4), "cuMemFree inside an allocation");

    CHECK(cuMemFree(mine));
    CHECK(cuModuleUnload(mine_mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    char done = 1;
    t_write_all(to_a, &done, 1);
}

static void run_a(int to_b, int from_b, pid_t b)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUmodule mod = t_load_module("kernels.ptx");
    CUfunction inc = t_get_function(mod, "inc_u32");
    CUdeviceptr p, pooled, async;
    CUstream s;
    CUevent ev;
    CUmemoryPool pool, dflt;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CHECK(cuMemPoolCreate(&pool, &props));
    CHECK(cuDeviceGetDefaultMemPool(&dflt, dev));
    CHECK(cuMemAllocFromPoolAsync(&pooled, BYTES, pool, NULL));
    CHECK(cuMemAllocAsync(&async, BYTES, NULL));
    CHECK(cuMemsetD8Async(pooled, 0x5a, BYTES, NULL));
    CHECK(cuMemsetD8Async(async, 0xa5, BYTES, NULL));
    size_t g = granule();
    CUmemGenericAllocationHandle vh = vmm_create(g);
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
    CHECK(cuMemMap(va, g, 0, vh, 0));
    vmm_access(va, g);
    CHECK(cuMemsetD8(va, 0x77, g));
    CHECK(cuMemAlloc(&p, BYTES));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    uint32_t *host = malloc(BYTES);
    REQUIRE(host, "out of host memory");
    t_fill_pattern(host, BYTES, SEED);
    CHECK(cuMemcpyHtoD(p, host, BYTES));
    CHECK(cuEventRecord(ev, s));
    CHECK(cuStreamSynchronize(s));
    CUdeviceptr gmem;
    CUgraph graph;
    CUgraphNode node;
    CUgraphExec exec;
    CHECK(cuMemAlloc(&gmem, 4096));
    CHECK(cuMemsetD8(gmem, 0, 4096));
    CHECK(cuGraphCreate(&graph, 0));
    CUDA_MEMSET_NODE_PARAMS ms = {
        .dst = gmem, .value = 0x42, .elementSize = 1, .width = 4096, .height = 1};
    CHECK(cuGraphAddMemsetNode(&node, graph, NULL, 0, &ms, ctx));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = 32,
                                  .Height = 32,
                                  .Format = CU_AD_FORMAT_FLOAT,
                                  .NumChannels = 1,
                                  .Flags = CUDA_ARRAY3D_SURFACE_LDST};
    CUarray arr;
    CUmipmappedArray mip;
    CHECK(cuArray3DCreate(&arr, &ad));
    ad.Flags = 0;
    CHECK(cuMipmappedArrayCreate(&mip, &ad, 2));
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_POINT};
    CUDA_RESOURCE_DESC rd = {.resType = CU_RESOURCE_TYPE_ARRAY};
    rd.res.array.hArray = arr;
    CUtexObject tex;
    CUsurfObject surf;
    CHECK(cuTexObjectCreate(&tex, &rd, &td, NULL));
    CHECK(cuSurfObjectCreate(&surf, &rd));
    t_ok("A: set up");

    struct handles h = {(uint64_t)p,
                        (uint64_t)(uintptr_t)s,
                        (uint64_t)(uintptr_t)ev,
                        (uint64_t)(uintptr_t)mod,
                        (uint64_t)(uintptr_t)inc,
                        (uint64_t)(uintptr_t)pool,
                        (uint64_t)pooled,
                        (uint64_t)(uintptr_t)dflt,
                        (uint64_t)async,
                        (uint64_t)va,
                        (uint64_t)va,
                        (uint64_t)vh,
                        (uint64_t)(uintptr_t)graph,
                        (uint64_t)(uintptr_t)node,
                        (uint64_t)(uintptr_t)exec,
                        (uint64_t)(uintptr_t)arr,
                        (uint64_t)(uintptr_t)mip,
                        (uint64_t)tex,
                        (uint64_t)surf};
    t_write_all(to_b, &h, sizeof h);
    char done = 0;
    int got = t_read_all(from_b, &done, 1);
    int status = 0;
    REQUIRE(waitpid(b, &status, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(!WIFSIGNALED(status), "B was killed by signal %d", WTERMSIG(status));
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got, "B failed (exit status %d)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    memset(host, 0, BYTES);
    CHECK(cuMemcpyDtoH(host, p, BYTES));
    REQUIRE(t_pattern_mismatch(host, BYTES, SEED) == SIZE_MAX, "A: memory changed by B");
    CHECK(cuMemcpyDtoH(host, pooled, BYTES));
    REQUIRE(t_bytes_mismatch(host, BYTES, 0x5a) == SIZE_MAX, "A: pool memory changed by B");
    CHECK(cuMemcpyDtoH(host, async, BYTES));
    REQUIRE(t_bytes_mismatch(host, BYTES, 0xa5) == SIZE_MAX,
            "A: stream-ordered memory changed by B");
    CHECK(cuMemcpyDtoH(host, va, g < BYTES ? g : BYTES));
    REQUIRE(t_bytes_mismatch(host, g < BYTES ? g : BYTES, 0x77) == SIZE_MAX,
            "A: mapped memory changed by B");
    CHECK(cuMemcpyDtoH(host, gmem, 4096));
    REQUIRE(t_bytes_mismatch(host, 4096, 0) == SIZE_MAX, "A: graph memory changed by B");
    t_ok("A: memory intact");
    CHECK(cuGraphNodeGetType(node, &(CUgraphNodeType){0}));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, gmem, 4096));
    REQUIRE(t_bytes_mismatch(host, 4096, 0x42) == SIZE_MAX, "A: its graph's memset");
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuMemFree(gmem));
    t_ok("A: its graph still works");
    CUDA_RESOURCE_DESC back;
    CHECK(cuTexObjectGetResourceDesc(&back, tex));
    REQUIRE(back.res.array.hArray == arr, "A: its texture's resource");
    CHECK(cuTexObjectDestroy(tex));
    CHECK(cuSurfObjectDestroy(surf));
    CHECK(cuMipmappedArrayDestroy(mip));
    CHECK(cuArrayDestroy(arr));
    t_ok("A: its textures, surface and mipmapped array still work");
    CHECK(cuMemUnmap(va, g));
    CHECK(cuMemAddressFree(va, 2 * g));
    CHECK(cuMemRelease(vh));
    CHECK(cuMemFreeAsync(pooled, NULL));
    CHECK(cuMemFreeAsync(async, NULL));
    CHECK(cuMemPoolDestroy(pool));
    CHECK(cuStreamSynchronize(NULL));
    t_ok("A: its pool and pool memory still work");

    CHECK(cuStreamQuery(s));
    CHECK(cuEventSynchronize(ev));
    unsigned long long n = BYTES / 4;
    void *args[] = {&p, &n};
    CHECK(cuLaunchKernel(inc, 64, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CHECK(cuEventRecord(ev, s));
    CHECK(cuEventSynchronize(ev));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, p, BYTES));
    for (unsigned long long i = 0; i < n; i++)
        REQUIRE(host[i] == t_pattern_at(SEED, i) + 1, "A: word %llu wrong after inc_u32", i);
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, mod, "vec_add"));
    t_ok("A: stream, event, module and function still work");

    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(p));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    free(host);
}

int main(void)
{
    t_init("isolation", 120);
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "libmpsshim")) t_skip("needs the shim");

    int a2b[2], b2a[2];
    REQUIRE(pipe(a2b) == 0 && pipe(b2a) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        close(a2b[1]);
        close(b2a[0]);
        alarm(100); /* the watchdog's alarm does not survive fork */
        run_b(a2b[0], b2a[1]);
        exit(0);
    }
    close(a2b[0]);
    close(b2a[1]);
    run_a(a2b[1], b2a[0], b);
    t_pass();
}
