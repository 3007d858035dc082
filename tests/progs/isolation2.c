/* isolation2: the families isolation.c does not cover, tried by one client on another's
 * objects: managed memory, registered and pinned host memory, graph memory nodes, every
 * graph node family (typed and generic forms, exec updates and sets), texture and surface
 * descriptors, IPC handles, events and stream memory operations, launches, the copy and
 * memset variants, pointer queries, pools, virtual memory, libraries and kernels; and
 * descriptors whose members point anywhere, which the server must refuse without reading.
 *
 * As in isolation.c, the process forks before any CUDA call: A makes its objects and sends
 * their raw values to B through a pipe; B tries each of them, and every call must fail
 * (which error is not printed). A refused call prints one `ok` line; an accepted one prints
 * a FAIL line and B goes on, so that one run names every hole; B fails at the end if any
 * was accepted. Then B frees memory and destroys an array and an event that its own
 * graphs name, A makes new ones (which the driver may place at the same addresses and
 * handles), and B launches those graphs: every launch must be refused, since the nodes
 * would now name A's objects. Then A checks that its memory is intact and that its objects
 * still work.
 *
 * Natively another process's handles are dangling pointers, so this runs only through the
 * shim. */
#define _GNU_SOURCE
#include "tests/progs/common.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (1 << 20)
#define SEED 0x150ba
#define GWORDS 1024 /* words of A's graph buffers */
/* A's registered pages: at an address that B, a fork of A from before either mapped it,
 * can map too (far from heaps, libraries and the server's pinned range), one per process
 * id, so that two of these programs on one server do not ask for the same pages. */
#define REG_BASE 0x5a0000000000ull
#define REG_BYTES (64u << 10)
static uint64_t reg_addr; /* set before the fork */
#define PITCH_W 256u      /* A's pitched allocation: bytes per row, rows */
#define PITCH_H 64u
#define STALE_BYTES (5u << 16) /* what B frees and A allocates next, the same size */

/* What A sends to B: raw handle and pointer values. */
struct handles {
    uint64_t dptr, pitched, pitch, managed, pinned, registered, pooled;
    uint64_t array, mip, tex, stream, event;
    uint64_t module, func, library, kernel;
    uint64_t graph, exec, n_memset, n_kernel, n_memcpy, n_host, n_record, n_wait, n_child, n_empty,
        n_alloc, n_free, graphmem;
    uint64_t reserved, mapped, vmm;
    CUipcMemHandle ipc_mem;
    CUipcEventHandle ipc_ev;
};

/* ---------------------------------------------------------------- checks */

static int accepted;

/* One line per call: `ok B: <what> refused`, or a FAIL line when it was accepted (and B
 * goes on; main fails it at the end). */
#define REFUSED(call, what) refused((call), #call, what, __LINE__)

static void refused(CUresult r, const char *call, const char *what, int line)
{
    if (r != CUDA_SUCCESS) {
        t_ok("B: %s refused", what);
        return;
    }
    printf("FAIL %s: %s:%d: %s returned CUDA_SUCCESS: %s accepted\n", t_prog(), __FILE__, line,
           call, what);
    fflush(stdout);
    accepted++;
}

/* B's own memory still takes a memset and a copy: the server still serves it. */
static void b_alive(CUdeviceptr mine, const char *after)
{
    uint8_t w[64];
    CHECK(cuMemsetD8(mine, 0x21, sizeof w));
    CHECK(cuMemcpyDtoH(w, mine, sizeof w));
    REQUIRE(t_bytes_mismatch(w, sizeof w, 0x21) == SIZE_MAX, "B: its memory after %s", after);
    t_ok("B: still served after %s", after);
}

/* An entry point of an older API version (cuMemAdvise before CUDA 12.2, say), which the
 * header's names no longer reach. */
static void *old_entry(const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    REQUIRE(fn && st == CU_GET_PROC_ADDRESS_SUCCESS, "no %s for version %d", name, version);
    return fn;
}

static atomic_int host_calls;

static void CUDA_CB host_fn(void *user)
{
    (void)user;
    atomic_fetch_add(&host_calls, 1);
}

static void CUDA_CB stream_cb(CUstream s, CUresult r, void *user)
{
    (void)s;
    (void)r;
    (void)user;
}

static CUgraphNodeParams params_of(CUgraphNodeType t)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = t;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS memset_u32(CUdeviceptr dst, unsigned value)
{
    CUDA_MEMSET_NODE_PARAMS m = {
        .dst = dst, .value = value, .elementSize = 4, .width = GWORDS, .height = 1};
    return m;
}

static CUDA_MEMCPY3D copy_d2d(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dst;
    c.WidthInBytes = bytes;
    c.Height = c.Depth = 1;
    return c;
}

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **args)
{
    CUDA_KERNEL_NODE_PARAMS k;
    memset(&k, 0, sizeof k);
    k.func = f;
    k.gridDimX = k.gridDimY = k.gridDimZ = 1;
    k.blockDimX = 256;
    k.blockDimY = k.blockDimZ = 1;
    k.kernelParams = args;
    return k;
}

static size_t granule(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t g = 0;
    CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return g;
}

/* ---------------------------------------------------------------- B */

/* B's own objects, the ones it names beside A's. */
struct mine {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr mem, mem2;
    CUstream s;
    CUevent ev, ev2;
    CUmodule mod;
    CUfunction inc;
    CUarray arr;
    CUgraph g;
    CUgraphExec exec;
    CUgraphNode n_memset, n_kernel, n_memcpy, n_record, n_wait, n_child, n_host;
    unsigned long long n;
    void *args[2];
};

static void b_setup(struct mine *m)
{
    t_setup(&m->dev, &m->ctx);
    m->mod = t_load_module("kernels.ptx");
    m->inc = t_get_function(m->mod, "inc_u32");
    CHECK(cuMemAlloc(&m->mem, BYTES));
    CHECK(cuMemAlloc(&m->mem2, BYTES));
    CHECK(cuMemsetD8(m->mem, 0, BYTES));
    CHECK(cuStreamCreate(&m->s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&m->ev, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&m->ev2, CU_EVENT_DEFAULT));
    CUDA_ARRAY3D_DESCRIPTOR ad = {
        .Width = 32, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CHECK(cuArray3DCreate(&m->arr, &ad));
    m->n = GWORDS;
    m->args[0] = &m->mem;
    m->args[1] = &m->n;
    /* A graph of its own with a node of each family, instantiated: memset 0 -> inc ->
     * copy -> record -> wait -> child -> host. */
    CHECK(cuGraphCreate(&m->g, 0));
    CUDA_MEMSET_NODE_PARAMS ms = memset_u32(m->mem, 0);
    CHECK(cuGraphAddMemsetNode(&m->n_memset, m->g, NULL, 0, &ms, m->ctx));
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(m->inc, m->args);
    kp.gridDimX = 4;
    CHECK(cuGraphAddKernelNode(&m->n_kernel, m->g, &m->n_memset, 1, &kp));
    CUDA_MEMCPY3D cp = copy_d2d(m->mem2, m->mem, GWORDS * 4);
    CHECK(cuGraphAddMemcpyNode(&m->n_memcpy, m->g, &m->n_kernel, 1, &cp, m->ctx));
    CHECK(cuGraphAddEventRecordNode(&m->n_record, m->g, &m->n_memcpy, 1, m->ev));
    CHECK(cuGraphAddEventWaitNode(&m->n_wait, m->g, &m->n_record, 1, m->ev));
    CUgraph child;
    CUgraphNode e;
    CHECK(cuGraphCreate(&child, 0));
    CHECK(cuGraphAddEmptyNode(&e, child, NULL, 0));
    CHECK(cuGraphAddChildGraphNode(&m->n_child, m->g, &m->n_wait, 1, child));
    CHECK(cuGraphDestroy(child));
    CUDA_HOST_NODE_PARAMS hp = {.fn = host_fn, .userData = NULL};
    CHECK(cuGraphAddHostNode(&m->n_host, m->g, &m->n_child, 1, &hp));
    CHECK(cuGraphInstantiate(&m->exec, m->g, 0));
    t_ok("B: set up");
}

/* B's graph still runs as built: its words come out as 1. */
static void b_graph_runs(struct mine *m)
{
    static uint32_t w[GWORDS];
    CHECK(cuMemsetD8Async(m->mem2, 0xff, GWORDS * 4, m->s)); /* its stream: non-blocking */
    CHECK(cuGraphLaunch(m->exec, m->s));
    CHECK(cuStreamSynchronize(m->s));
    CHECK(cuMemcpyDtoH(w, m->mem2, sizeof w));
    for (int i = 0; i < GWORDS; i++)
        REQUIRE(w[i] == 1, "B: its graph's word %d is %u", i, w[i]);
    t_ok("B: its own graph still runs");
}

static void b_managed(const struct handles *h, struct mine *m)
{
    CUdeviceptr am = (CUdeviceptr)h->managed;
    CUmemLocation dloc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CUresult (*prefetch_v1)(CUdeviceptr, size_t, CUdevice, CUstream) =
        (CUresult(*)(CUdeviceptr, size_t, CUdevice, CUstream))old_entry("cuMemPrefetchAsync",
                                                                        11000);
    CUresult (*advise_v1)(CUdeviceptr, size_t, CUmem_advise, CUdevice) =
        (CUresult(*)(CUdeviceptr, size_t, CUmem_advise, CUdevice))old_entry("cuMemAdvise", 11000);
    REFUSED(cuMemPrefetchAsync(am, BYTES, dloc, 0, NULL),
            "cuMemPrefetchAsync_v2 of A's managed memory");
    REFUSED(prefetch_v1(am, BYTES, 0, NULL), "cuMemPrefetchAsync of A's managed memory");
    REFUSED(cuMemAdvise(am, BYTES, CU_MEM_ADVISE_SET_READ_MOSTLY, dloc),
            "cuMemAdvise_v2 on A's managed memory");
    REFUSED(advise_v1(am, BYTES, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0),
            "cuMemAdvise on A's managed memory");
    int v = 0;
    REFUSED(cuMemRangeGetAttribute(&v, sizeof v, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, am, BYTES),
            "cuMemRangeGetAttribute of A's managed memory");
    void *data[1] = {&v};
    size_t sizes[1] = {sizeof v};
    CUmem_range_attribute attrs[1] = {CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY};
    REFUSED(cuMemRangeGetAttributes(data, sizes, attrs, 1, am, BYTES),
            "cuMemRangeGetAttributes of A's managed memory");
    unsigned um = 0;
    REFUSED(cuPointerGetAttribute(&um, CU_POINTER_ATTRIBUTE_IS_MANAGED, am),
            "cuPointerGetAttribute IS_MANAGED of A's managed memory");
    REFUSED(cuStreamAttachMemAsync(m->s, am, 0, CU_MEM_ATTACH_SINGLE),
            "cuStreamAttachMemAsync of A's managed memory");
    REFUSED(cuStreamAttachMemAsync(NULL, am, 0, CU_MEM_ATTACH_GLOBAL),
            "cuStreamAttachMemAsync of A's managed memory, global");
    CUdeviceptr base;
    size_t size;
    REFUSED(cuMemGetAddressRange(&base, &size, am), "cuMemGetAddressRange of A's managed memory");
    static uint8_t buf[4096];
    REFUSED(cuMemcpyDtoH(buf, am, sizeof buf), "cuMemcpyDtoH from A's managed memory");
    REFUSED(cuMemcpyHtoD(am, buf, sizeof buf), "cuMemcpyHtoD to A's managed memory");
    REFUSED(cuMemcpyDtoD(m->mem, am, sizeof buf), "cuMemcpyDtoD from A's managed memory");
    REFUSED(cuMemsetD32(am, 0, sizeof buf / 4), "cuMemsetD32 on A's managed memory");
    REFUSED(cuMemFree(am), "cuMemFree of A's managed memory");
    CUdeviceptr gp;
    REFUSED(cuModuleGetGlobal(&gp, &size, (CUmodule)(uintptr_t)h->module, "g_table"),
            "cuModuleGetGlobal in A's module");
    b_alive(m->mem, "managed memory");
}

/* Maps `bytes` of B's own at `addr` (an address A uses), then registers them: the server
 * cannot map them there, since that address is another client's in the server. */
static void b_register_at(uint64_t addr, size_t bytes, const char *what)
{
    void *p = mmap((void *)(uintptr_t)addr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    REQUIRE(p == (void *)(uintptr_t)addr, "B: cannot map its own pages at %s: %s", what,
            strerror(errno));
    memset(p, 0xb0, bytes);
    char line[128];
    snprintf(line, sizeof line, "cuMemHostRegister of B's pages at %s", what);
    CUresult r = cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_DEVICEMAP);
    refused(r, "cuMemHostRegister", line, __LINE__);
    if (r == CUDA_SUCCESS) CHECK(cuMemHostUnregister(p));
    REQUIRE(t_bytes_mismatch(p, bytes, 0xb0) == SIZE_MAX, "B: its pages changed by a refusal");
    munmap(p, bytes);
}

static void b_host(const struct handles *h, struct mine *m)
{
    void *ap = (void *)(uintptr_t)h->pinned, *ar = (void *)(uintptr_t)h->registered;
    CUdeviceptr dp;
    unsigned flags;
    REFUSED(cuMemFreeHost(ap), "cuMemFreeHost of A's pinned memory");
    REFUSED(cuMemHostGetDevicePointer(&dp, ap, 0),
            "cuMemHostGetDevicePointer of A's pinned memory");
    REFUSED(cuMemHostGetFlags(&flags, ap), "cuMemHostGetFlags of A's pinned memory");
    REFUSED(cuMemHostUnregister(ar), "cuMemHostUnregister of A's registered memory");
    REFUSED(cuMemHostGetDevicePointer(&dp, ar, 0),
            "cuMemHostGetDevicePointer of A's registered memory");
    REFUSED(cuMemHostGetFlags(&flags, ar), "cuMemHostGetFlags of A's registered memory");
    void *hp = NULL;
    REFUSED(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)h->pinned),
            "cuPointerGetAttribute HOST_POINTER of A's pinned memory");
    REFUSED(cuMemsetD8((CUdeviceptr)h->pinned, 0, 4096), "cuMemsetD8 on A's pinned memory");
    REFUSED(cuMemsetD8((CUdeviceptr)h->registered, 0, 4096), "cuMemsetD8 on A's registered memory");
    REFUSED(cuMemcpyDtoD(m->mem, (CUdeviceptr)h->pinned, 4096),
            "cuMemcpyDtoD from A's pinned memory");
    REFUSED(cuMemcpyDtoD((CUdeviceptr)h->registered, m->mem, 4096),
            "cuMemcpyDtoD to A's registered memory");
    b_register_at(h->registered, REG_BYTES, "A's registered address");
    b_register_at(h->pinned, 1 << 16, "A's pinned address");
    b_alive(m->mem, "host memory");
}

static void b_graphmem(const struct handles *h, struct mine *m)
{
    CUgraph ag = (CUgraph)(uintptr_t)h->graph;
    CUdeviceptr gm = (CUdeviceptr)h->graphmem;
    CUgraphNode n;
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.poolProps.location.id = 0;
    ap.bytesize = 4096;
    REFUSED(cuGraphAddMemAllocNode(&n, ag, NULL, 0, &ap), "cuGraphAddMemAllocNode to A's graph");
    REFUSED(cuGraphAddMemFreeNode(&n, m->g, NULL, 0, gm),
            "cuGraphAddMemFreeNode of A's graph memory");
    CUDA_MEM_ALLOC_NODE_PARAMS got;
    REFUSED(cuGraphMemAllocNodeGetParams((CUgraphNode)(uintptr_t)h->n_alloc, &got),
            "cuGraphMemAllocNodeGetParams of A's node");
    CUdeviceptr fp;
    REFUSED(cuGraphMemFreeNodeGetParams((CUgraphNode)(uintptr_t)h->n_free, &fp),
            "cuGraphMemFreeNodeGetParams of A's node");
    REFUSED(cuMemFreeAsync(gm, NULL), "cuMemFreeAsync of A's graph memory");
    REFUSED(cuMemFree(gm), "cuMemFree of A's graph memory");
    REFUSED(cuMemsetD8(gm, 0, 4096), "cuMemsetD8 on A's graph memory");
    CUDA_MEMSET_NODE_PARAMS ms = memset_u32(gm, 7);
    REFUSED(cuGraphAddMemsetNode(&n, m->g, NULL, 0, &ms, m->ctx),
            "a memset node on A's graph memory");
    /* Garbage in a struct member the server must not read: access descriptors. */
    ap.accessDescs = (CUmemAccessDesc *)(uintptr_t)0x1000;
    ap.accessDescCount = 1;
    REFUSED(cuGraphAddMemAllocNode(&n, m->g, NULL, 0, &ap),
            "an allocation node with access descriptors anywhere");
    b_alive(m->mem, "graph memory");
}

static void b_graph_nodes(const struct handles *h, struct mine *m)
{
    CUgraph ag = (CUgraph)(uintptr_t)h->graph, clone;
    CUgraphExec ae = (CUgraphExec)(uintptr_t)h->exec, e;
    CUevent aev = (CUevent)(uintptr_t)h->event, ev;
    CUfunction af = (CUfunction)(uintptr_t)h->func;
    CUdeviceptr ad = (CUdeviceptr)h->dptr;
    CUgraphNode ak = (CUgraphNode)(uintptr_t)h->n_kernel, ams = (CUgraphNode)(uintptr_t)h->n_memset,
                amc = (CUgraphNode)(uintptr_t)h->n_memcpy, ah = (CUgraphNode)(uintptr_t)h->n_host,
                arec = (CUgraphNode)(uintptr_t)h->n_record,
                await = (CUgraphNode)(uintptr_t)h->n_wait, ach = (CUgraphNode)(uintptr_t)h->n_child,
                aem = (CUgraphNode)(uintptr_t)h->n_empty;
    CUgraphNode n;

    /* Kernel nodes. */
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(af, m->args), got;
    REFUSED(cuGraphAddKernelNode(&n, m->g, NULL, 0, &kp), "a kernel node of A's function");
    kp.func = NULL;
    kp.kern = (CUkernel)(uintptr_t)h->kernel;
    REFUSED(cuGraphAddKernelNode(&n, m->g, NULL, 0, &kp), "a kernel node of A's library kernel");
    kp = kernel_params(m->inc, m->args);
    REFUSED(cuGraphAddKernelNode(&n, ag, NULL, 0, &kp), "cuGraphAddKernelNode to A's graph");
    REFUSED(cuGraphKernelNodeSetParams(ak, &kp), "cuGraphKernelNodeSetParams of A's node");
    REFUSED(cuGraphKernelNodeGetParams(ak, &got), "cuGraphKernelNodeGetParams of A's node");
    kp.func = af;
    REFUSED(cuGraphKernelNodeSetParams(m->n_kernel, &kp),
            "cuGraphKernelNodeSetParams to A's function");
    REFUSED(cuGraphExecKernelNodeSetParams(m->exec, m->n_kernel, &kp),
            "cuGraphExecKernelNodeSetParams to A's function");
    kp.func = m->inc;
    REFUSED(cuGraphExecKernelNodeSetParams(ae, ak, &kp),
            "cuGraphExecKernelNodeSetParams in A's exec");
    REFUSED(cuGraphKernelNodeCopyAttributes(m->n_kernel, ak),
            "cuGraphKernelNodeCopyAttributes from A's node");
    CUkernelNodeAttrValue av;
    memset(&av, 0, sizeof av);
    REFUSED(cuGraphKernelNodeGetAttribute(ak, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av),
            "cuGraphKernelNodeGetAttribute of A's node");
    REFUSED(cuGraphKernelNodeSetAttribute(ak, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &av),
            "cuGraphKernelNodeSetAttribute of A's node");
    memset(&av, 0, sizeof av);
    av.programmaticEvent.event = aev;
    REFUSED(cuGraphKernelNodeSetAttribute(m->n_kernel, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, &av),
            "a kernel node attribute naming A's event (programmatic)");
    memset(&av, 0, sizeof av);
    av.launchCompletionEvent.event = aev;
    REFUSED(cuGraphKernelNodeSetAttribute(m->n_kernel, CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT,
                                          &av),
            "a kernel node attribute naming A's event (launch completion)");

    /* Memset and memcpy nodes: A's nodes, and B's naming A's memory or memory anywhere. */
    CUDA_MEMSET_NODE_PARAMS ms = memset_u32(m->mem, 3), msg;
    REFUSED(cuGraphMemsetNodeSetParams(ams, &ms), "cuGraphMemsetNodeSetParams of A's node");
    REFUSED(cuGraphMemsetNodeGetParams(ams, &msg), "cuGraphMemsetNodeGetParams of A's node");
    ms.dst = ad;
    REFUSED(cuGraphExecMemsetNodeSetParams(m->exec, m->n_memset, &ms, m->ctx),
            "cuGraphExecMemsetNodeSetParams onto A's memory");
    ms.dst = (CUdeviceptr)h->pitched;
    ms.pitch = h->pitch;
    ms.height = 2;
    ms.width = PITCH_W / 4;
    REFUSED(cuGraphAddMemsetNode(&n, m->g, NULL, 0, &ms, m->ctx),
            "a 2D memset node on A's pitched memory");
    ms = memset_u32(m->mem, 3);
    ms.pitch = h->pitched - m->mem; /* the second row lands in A's memory */
    ms.height = 2;
    REFUSED(cuGraphAddMemsetNode(&n, m->g, NULL, 0, &ms, m->ctx),
            "a 2D memset node whose pitch reaches A's memory");
    CUDA_MEMCPY3D cp = copy_d2d(m->mem2, m->mem, 4096), cpg;
    REFUSED(cuGraphMemcpyNodeSetParams(amc, &cp), "cuGraphMemcpyNodeSetParams of A's node");
    REFUSED(cuGraphMemcpyNodeGetParams(amc, &cpg), "cuGraphMemcpyNodeGetParams of A's node");
    cp = copy_d2d(ad, m->mem, 4096);
    REFUSED(cuGraphMemcpyNodeSetParams(m->n_memcpy, &cp),
            "cuGraphMemcpyNodeSetParams onto A's memory");
    REFUSED(cuGraphExecMemcpyNodeSetParams(m->exec, m->n_memcpy, &cp, m->ctx),
            "cuGraphExecMemcpyNodeSetParams onto A's memory");
    cp = copy_d2d(m->mem2, m->mem, 4096);
    cp.srcMemoryType = CU_MEMORYTYPE_HOST;
    cp.srcHost = (const void *)(uintptr_t)h->pinned;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx),
            "a memcpy node from A's pinned memory");
    cp.srcHost = (const void *)(uintptr_t)0x1000;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx),
            "a memcpy node from a host pointer anywhere");
    static uint8_t pageable[4096];
    cp.srcHost = pageable;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx),
            "a memcpy node from B's pageable memory");
    cp = copy_d2d(m->mem2, m->mem, 4096);
    cp.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    cp.srcDevice = (CUdeviceptr)h->managed;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx),
            "a memcpy node from A's managed memory");
    cp = copy_d2d(m->mem2, m->mem, 4096);
    cp.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    cp.dstArray = (CUarray)(uintptr_t)h->array;
    cp.dstDevice = 0;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx), "a memcpy node into A's array");
    cp = copy_d2d(m->mem2, m->mem, 4096);
    cp.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    cp.srcArray = (CUarray)(uintptr_t)h->array;
    cp.srcDevice = 0;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx), "a memcpy node from A's array");
    cp = copy_d2d(m->mem2, m->mem, 4096);
    cp.srcMemoryType = (CUmemorytype)0x77;
    REFUSED(cuGraphAddMemcpyNode(&n, m->g, NULL, 0, &cp, m->ctx),
            "a memcpy node of an unknown memory type");

    /* Host nodes. */
    CUDA_HOST_NODE_PARAMS hp = {.fn = host_fn, .userData = NULL}, hg;
    REFUSED(cuGraphAddHostNode(&n, ag, NULL, 0, &hp), "cuGraphAddHostNode to A's graph");
    REFUSED(cuGraphHostNodeSetParams(ah, &hp), "cuGraphHostNodeSetParams of A's node");
    REFUSED(cuGraphHostNodeGetParams(ah, &hg), "cuGraphHostNodeGetParams of A's node");
    REFUSED(cuGraphExecHostNodeSetParams(ae, ah, &hp), "cuGraphExecHostNodeSetParams in A's exec");
    REFUSED(cuGraphExecHostNodeSetParams(m->exec, ah, &hp),
            "cuGraphExecHostNodeSetParams of A's node in B's exec");

    /* Event record and wait nodes. */
    REFUSED(cuGraphAddEventRecordNode(&n, m->g, NULL, 0, aev), "an event record node of A's event");
    REFUSED(cuGraphAddEventWaitNode(&n, m->g, NULL, 0, aev), "an event wait node of A's event");
    REFUSED(cuGraphEventRecordNodeSetEvent(m->n_record, aev),
            "cuGraphEventRecordNodeSetEvent to A's event");
    REFUSED(cuGraphEventWaitNodeSetEvent(m->n_wait, aev),
            "cuGraphEventWaitNodeSetEvent to A's event");
    REFUSED(cuGraphEventRecordNodeSetEvent(arec, m->ev),
            "cuGraphEventRecordNodeSetEvent of A's node");
    REFUSED(cuGraphEventWaitNodeSetEvent(await, m->ev), "cuGraphEventWaitNodeSetEvent of A's node");
    REFUSED(cuGraphEventRecordNodeGetEvent(arec, &ev),
            "cuGraphEventRecordNodeGetEvent of A's node");
    REFUSED(cuGraphEventWaitNodeGetEvent(await, &ev), "cuGraphEventWaitNodeGetEvent of A's node");
    REFUSED(cuGraphExecEventRecordNodeSetEvent(m->exec, m->n_record, aev),
            "cuGraphExecEventRecordNodeSetEvent to A's event");
    REFUSED(cuGraphExecEventWaitNodeSetEvent(m->exec, m->n_wait, aev),
            "cuGraphExecEventWaitNodeSetEvent to A's event");
    REFUSED(cuGraphExecEventRecordNodeSetEvent(ae, arec, m->ev),
            "cuGraphExecEventRecordNodeSetEvent in A's exec");

    /* Child graph and empty nodes. */
    REFUSED(cuGraphAddChildGraphNode(&n, m->g, NULL, 0, ag), "a child graph node of A's graph");
    CUgraph cg;
    REFUSED(cuGraphChildGraphNodeGetGraph(ach, &cg), "cuGraphChildGraphNodeGetGraph of A's node");
    REFUSED(cuGraphExecChildGraphNodeSetParams(m->exec, m->n_child, ag),
            "cuGraphExecChildGraphNodeSetParams to A's graph");
    REFUSED(cuGraphExecChildGraphNodeSetParams(ae, ach, m->g),
            "cuGraphExecChildGraphNodeSetParams in A's exec");
    REFUSED(cuGraphAddEmptyNode(&n, m->g, &aem, 1), "an empty node depending on A's empty node");

    /* The generic forms, each naming A's object in its union. */
    CUgraphNodeParams p = params_of(CU_GRAPH_NODE_TYPE_MEMSET);
    p.memset.dst = ad;
    p.memset.value = 9;
    p.memset.elementSize = 4;
    p.memset.width = GWORDS;
    p.memset.height = 1;
    p.memset.ctx = m->ctx;
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p), "cuGraphAddNode, a memset of A's memory");
    REFUSED(cuGraphNodeSetParams(m->n_memset, &p),
            "cuGraphNodeSetParams, a memset onto A's memory");
    REFUSED(cuGraphExecNodeSetParams(m->exec, m->n_memset, &p),
            "cuGraphExecNodeSetParams, a memset onto A's memory");
    p.memset.dst = m->mem;
    REFUSED(cuGraphNodeSetParams(ams, &p), "cuGraphNodeSetParams of A's memset node");
    REFUSED(cuGraphExecNodeSetParams(ae, ams, &p), "cuGraphExecNodeSetParams of A's memset node");
    p = params_of(CU_GRAPH_NODE_TYPE_MEMCPY);
    p.memcpy.copyCtx = m->ctx;
    p.memcpy.copyParams = copy_d2d(m->mem2, ad, 4096);
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p),
            "cuGraphAddNode, a memcpy from A's memory");
    REFUSED(cuGraphNodeSetParams(m->n_memcpy, &p),
            "cuGraphNodeSetParams, a memcpy from A's memory");
    p = params_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel.func = af;
    p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = 32;
    p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = m->args;
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p),
            "cuGraphAddNode, a kernel of A's function");
    REFUSED(cuGraphNodeSetParams(m->n_kernel, &p),
            "cuGraphNodeSetParams, a kernel of A's function");
    REFUSED(cuGraphExecNodeSetParams(m->exec, m->n_kernel, &p),
            "cuGraphExecNodeSetParams, a kernel of A's function");
    p = params_of(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    p.eventRecord.event = aev;
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p), "cuGraphAddNode, a record of A's event");
    REFUSED(cuGraphNodeSetParams(m->n_record, &p), "cuGraphNodeSetParams, a record of A's event");
    REFUSED(cuGraphExecNodeSetParams(m->exec, m->n_record, &p),
            "cuGraphExecNodeSetParams, a record of A's event");
    p = params_of(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    p.eventWait.event = aev;
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p), "cuGraphAddNode, a wait on A's event");
    REFUSED(cuGraphNodeSetParams(m->n_wait, &p), "cuGraphNodeSetParams, a wait on A's event");
    p = params_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = ag;
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p), "cuGraphAddNode, a child graph of A's");
    REFUSED(cuGraphExecNodeSetParams(m->exec, m->n_child, &p),
            "cuGraphExecNodeSetParams, a child graph of A's");
    p = params_of(CU_GRAPH_NODE_TYPE_MEM_FREE);
    p.free.dptr = (CUdeviceptr)h->graphmem;
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p),
            "cuGraphAddNode, a free of A's graph memory");
    p = params_of(CU_GRAPH_NODE_TYPE_HOST);
    p.host.fn = host_fn;
    REFUSED(cuGraphAddNode(&n, ag, NULL, NULL, 0, &p),
            "cuGraphAddNode of a host node to A's graph");
    REFUSED(cuGraphNodeSetParams(ah, &p), "cuGraphNodeSetParams of A's host node");
    p = params_of(CU_GRAPH_NODE_TYPE_EMPTY);
    REFUSED(cuGraphAddNode(&n, m->g, &ak, NULL, 1, &p), "cuGraphAddNode depending on A's node");
    p = params_of((CUgraphNodeType)0x7777);
    REFUSED(cuGraphAddNode(&n, m->g, NULL, NULL, 0, &p), "cuGraphAddNode of an unknown type");

    /* Edges, whole graphs, execs. */
    REFUSED(cuGraphAddDependencies(ag, &ams, &aem, NULL, 1), "cuGraphAddDependencies in A's graph");
    REFUSED(cuGraphRemoveDependencies(ag, &ams, &ak, NULL, 1),
            "cuGraphRemoveDependencies in A's graph");
    REFUSED(cuGraphAddDependencies(m->g, &m->n_host, &ak, NULL, 1),
            "cuGraphAddDependencies to A's node");
    REFUSED(cuGraphRemoveDependencies(m->g, &ams, &ak, NULL, 1),
            "cuGraphRemoveDependencies of A's nodes in B's graph");
    size_t count = 0;
    REFUSED(cuGraphGetNodes(ag, NULL, &count), "cuGraphGetNodes of A's graph");
    REFUSED(cuGraphGetRootNodes(ag, NULL, &count), "cuGraphGetRootNodes of A's graph");
    REFUSED(cuGraphGetEdges(ag, NULL, NULL, NULL, &count), "cuGraphGetEdges of A's graph");
    REFUSED(cuGraphNodeGetDependencies(ak, NULL, NULL, &count),
            "cuGraphNodeGetDependencies of A's node");
    REFUSED(cuGraphNodeGetDependentNodes(ak, NULL, NULL, &count),
            "cuGraphNodeGetDependentNodes of A's node");
    REFUSED(cuGraphClone(&clone, ag), "cuGraphClone of A's graph");
    CHECK(cuGraphClone(&clone, m->g));
    REFUSED(cuGraphNodeFindInClone(&n, ak, clone), "cuGraphNodeFindInClone of A's node");
    CHECK(cuGraphDestroy(clone));
    REFUSED(cuGraphDebugDotPrint(ag, "/dev/null", 0), "cuGraphDebugDotPrint of A's graph");
    CUgraphExecUpdateResultInfo info;
    REFUSED(cuGraphExecUpdate(m->exec, ag, &info), "cuGraphExecUpdate of B's exec to A's graph");
    REFUSED(cuGraphExecUpdate(ae, m->g, &info), "cuGraphExecUpdate of A's exec");
    cuuint64_t fl;
    REFUSED(cuGraphExecGetFlags(ae, &fl), "cuGraphExecGetFlags of A's exec");
    REFUSED(cuGraphUpload(ae, NULL), "cuGraphUpload of A's exec");
    REFUSED(cuGraphNodeSetEnabled(ae, ak, 0), "cuGraphNodeSetEnabled in A's exec");
    REFUSED(cuGraphNodeSetEnabled(m->exec, ak, 0), "cuGraphNodeSetEnabled of A's node in B's exec");
    unsigned en;
    REFUSED(cuGraphNodeGetEnabled(ae, ak, &en), "cuGraphNodeGetEnabled in A's exec");
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof ip);
    REFUSED(cuGraphInstantiateWithParams(&e, ag, &ip), "cuGraphInstantiateWithParams of A's graph");
    REFUSED(cuStreamBeginCaptureToGraph(m->s, ag, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED),
            "cuStreamBeginCaptureToGraph into A's graph");
    b_alive(m->mem, "graph nodes");
    b_graph_runs(m);
}

static void b_textures(const struct handles *h, struct mine *m)
{
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_POINT};
    CUDA_RESOURCE_DESC rd;
    CUtexObject t;
    CUsurfObject s;
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_PITCH2D;
    rd.res.pitch2D.devPtr = (CUdeviceptr)h->pitched;
    rd.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    rd.res.pitch2D.numChannels = 1;
    rd.res.pitch2D.width = PITCH_W / 4;
    rd.res.pitch2D.height = PITCH_H;
    rd.res.pitch2D.pitchInBytes = h->pitch;
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a texture over A's pitched memory");
    rd.res.pitch2D.devPtr = m->mem;
    /* Far past B's memory: on a GPU B's allocations can follow each other without a gap,
     * and a view over several of them is B's own; 60000 rows of 4 KiB (245 MB, within the
     * driver's 65000-row limit) leave them. */
    rd.res.pitch2D.height = 60000;
    rd.res.pitch2D.pitchInBytes = 4096;
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a pitched texture reaching past B's memory");
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_LINEAR;
    rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1;
    rd.res.linear.sizeInBytes = 4096;
    rd.res.linear.devPtr = (CUdeviceptr)h->managed;
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a texture over A's managed memory");
    rd.res.linear.devPtr = (CUdeviceptr)h->pinned;
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a texture over A's pinned memory");
    rd.res.linear.devPtr = (CUdeviceptr)h->graphmem;
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a texture over A's graph memory");
    rd.res.linear.devPtr = 0x1000;
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a texture over an address anywhere");
    rd.res.linear.devPtr = m->mem + BYTES - 64; /* runs past B's memory (and past any */
    rd.res.linear.sizeInBytes = 64u << 20;      /* allocation of B's right after it) */
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a linear texture reaching past B's memory");
    memset(&rd, 0x5c, sizeof rd);
    REFUSED(cuTexObjectCreate(&t, &rd, &td, NULL), "a texture over a garbage descriptor");
    REFUSED(cuSurfObjectCreate(&s, &rd), "a surface over a garbage descriptor");
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    rd.res.mipmap.hMipmappedArray = (CUmipmappedArray)(uintptr_t)h->mip;
    REFUSED(cuSurfObjectCreate(&s, &rd), "a surface over A's mipmapped array");
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = (CUarray)(uintptr_t)h->array;
    CUDA_RESOURCE_VIEW_DESC vd = {
        .format = CU_RES_VIEW_FORMAT_FLOAT_1X32, .width = 32, .height = 32, .depth = 0};
    REFUSED(cuTexObjectCreate(&t, &rd, &td, &vd), "a texture with a view over A's array");
    CUDA_TEXTURE_DESC tdo;
    CUDA_RESOURCE_VIEW_DESC vdo;
    REFUSED(cuTexObjectGetTextureDesc(&tdo, (CUtexObject)h->tex),
            "cuTexObjectGetTextureDesc of A's texture");
    REFUSED(cuTexObjectGetResourceViewDesc(&vdo, (CUtexObject)h->tex),
            "cuTexObjectGetResourceViewDesc of A's texture");
    b_alive(m->mem, "textures and surfaces");
}

static void b_ipc(const struct handles *h, struct mine *m)
{
    CUipcMemHandle mh, forged;
    CUipcEventHandle eh, fev;
    CUdeviceptr p;
    CUevent ev;
    REFUSED(cuIpcGetMemHandle(&mh, (CUdeviceptr)h->dptr), "cuIpcGetMemHandle of A's memory");
    REFUSED(cuIpcGetEventHandle(&eh, (CUevent)(uintptr_t)h->event),
            "cuIpcGetEventHandle of A's event");
    REFUSED(cuIpcCloseMemHandle((CUdeviceptr)h->dptr),
            "cuIpcCloseMemHandle of A's memory, never opened");
    CHECK(cuIpcGetMemHandle(&mh, m->mem));
    REFUSED(cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle of its own handle");
    memset(&forged, 0, sizeof forged);
    REFUSED(cuIpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle of a zero handle");
    memset(&forged, 0x5a, sizeof forged);
    REFUSED(cuIpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle of a made-up handle");
    for (size_t i = 0; i < sizeof forged; i++)
        forged.reserved[i] = (char)~h->ipc_mem.reserved[i];
    REFUSED(cuIpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle of A's handle inverted");
    /* The server's handle starts with what can be guessed (a tag, the server's nonce, an
     * id); the rest is a secret. A's guessable part with a made-up secret: */
    memset(&forged, 0, sizeof forged);
    memcpy(forged.reserved, h->ipc_mem.reserved, 24);
    REFUSED(cuIpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle of A's handle with its secret guessed");
    memset(&fev, 0, sizeof fev);
    memcpy(fev.reserved, h->ipc_ev.reserved, 24);
    REFUSED(cuIpcOpenEventHandle(&ev, fev),
            "cuIpcOpenEventHandle of A's handle with its secret guessed");
    memcpy(fev.reserved, h->ipc_mem.reserved, sizeof fev.reserved);
    REFUSED(cuIpcOpenEventHandle(&ev, fev), "cuIpcOpenEventHandle of A's memory handle");
    /* A's real handle is a grant: B opens it, but the memory stays A's to free and export. */
    CHECK(cuIpcOpenMemHandle(&p, h->ipc_mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    REQUIRE(p == (CUdeviceptr)h->dptr, "B: A's handle opened elsewhere");
    REFUSED(cuMemFree(p), "cuMemFree of A's memory opened through IPC");
    REFUSED(cuIpcGetMemHandle(&mh, p), "cuIpcGetMemHandle of A's memory opened through IPC");
    CHECK(cuIpcCloseMemHandle(p));
    REFUSED(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle a second time");
    b_alive(m->mem, "IPC");
}

static void b_streams(const struct handles *h, struct mine *m)
{
    CUevent aev = (CUevent)(uintptr_t)h->event;
    CUstream as = (CUstream)(uintptr_t)h->stream;
    CUdeviceptr ad = (CUdeviceptr)h->dptr;
    float ms;
    CHECK(cuEventRecord(m->ev, m->s));
    CHECK(cuEventRecord(m->ev2, m->s));
    CHECK(cuStreamSynchronize(m->s));
    CUresult (*elapsed_v1)(float *, CUevent, CUevent) =
        (CUresult(*)(float *, CUevent, CUevent))old_entry("cuEventElapsedTime", 11000);
    REFUSED(cuEventElapsedTime(&ms, aev, m->ev2), "cuEventElapsedTime_v2 from A's event");
    REFUSED(cuEventElapsedTime(&ms, m->ev, aev), "cuEventElapsedTime_v2 to A's event");
    REFUSED(elapsed_v1(&ms, aev, m->ev2), "cuEventElapsedTime from A's event");
    REFUSED(cuEventRecordWithFlags(aev, m->s, 0), "cuEventRecordWithFlags of A's event");
    REFUSED(cuStreamWaitEvent(m->s, aev, 0), "cuStreamWaitEvent of B's stream on A's event");
    REFUSED(cuEventSynchronize(aev), "cuEventSynchronize on A's event");
    REFUSED(cuLaunchHostFunc(as, host_fn, NULL), "cuLaunchHostFunc on A's stream");
    REFUSED(cuStreamAddCallback(as, stream_cb, NULL, 0), "cuStreamAddCallback on A's stream");
    CUstreamAttrValue sv;
    memset(&sv, 0, sizeof sv);
    REFUSED(cuStreamGetAttribute(as, CU_STREAM_ATTRIBUTE_PRIORITY, &sv),
            "cuStreamGetAttribute of A's stream");
    REFUSED(cuStreamSetAttribute(as, CU_STREAM_ATTRIBUTE_PRIORITY, &sv),
            "cuStreamSetAttribute of A's stream");
    REFUSED(cuStreamCopyAttributes(m->s, as), "cuStreamCopyAttributes from A's stream");
    memset(&sv, 0, sizeof sv);
    sv.programmaticEvent.event = aev;
    REFUSED(cuStreamSetAttribute(m->s, (CUstreamAttrID)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, &sv),
            "a stream attribute naming A's event");
    /* Stream memory operations, on A's memory from B's stream and on B's from A's. */
    CUresult (*wait32_v1)(CUstream, CUdeviceptr, cuuint32_t, unsigned) =
        (CUresult(*)(CUstream, CUdeviceptr, cuuint32_t, unsigned))old_entry("cuStreamWaitValue32",
                                                                            11000);
    CUresult (*write32_v1)(CUstream, CUdeviceptr, cuuint32_t, unsigned) =
        (CUresult(*)(CUstream, CUdeviceptr, cuuint32_t, unsigned))old_entry("cuStreamWriteValue32",
                                                                            11000);
    REFUSED(cuStreamWaitValue32(m->s, ad, 0, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32 on A's memory");
    REFUSED(cuStreamWaitValue64(m->s, ad, 0, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue64 on A's memory");
    REFUSED(cuStreamWriteValue32(m->s, ad, 0xbbbbbbbbu, 0), "cuStreamWriteValue32 to A's memory");
    REFUSED(cuStreamWriteValue64(m->s, ad, 0xbbbbbbbbbbbbbbbbull, 0),
            "cuStreamWriteValue64 to A's memory");
    REFUSED(wait32_v1(m->s, ad, 0, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32 (v1) on A's memory");
    REFUSED(write32_v1(m->s, ad, 0xbbbbbbbbu, 0), "cuStreamWriteValue32 (v1) to A's memory");
    REFUSED(cuStreamWriteValue32(m->s, (CUdeviceptr)h->managed, 0xbbbbbbbbu, 0),
            "cuStreamWriteValue32 to A's managed memory");
    REFUSED(cuStreamWriteValue32(m->s, (CUdeviceptr)h->pinned, 0xbbbbbbbbu, 0),
            "cuStreamWriteValue32 to A's pinned memory");
    REFUSED(cuStreamWaitValue32(as, m->mem, 0, CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue32 on A's stream");
    REFUSED(cuStreamWriteValue32(as, m->mem, 1, 0), "cuStreamWriteValue32 on A's stream");
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof op);
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = ad;
    op.writeValue.value = 0xbbbbbbbbu;
    REFUSED(cuStreamBatchMemOp(m->s, 1, &op, 0), "cuStreamBatchMemOp writing A's memory");
    CHECK(cuStreamSynchronize(m->s));
    b_alive(m->mem, "events and stream memory operations");
}

static void b_launches(const struct handles *h, struct mine *m)
{
    CUfunction af = (CUfunction)(uintptr_t)h->func;
    CUkernel ak = (CUkernel)(uintptr_t)h->kernel;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 32;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = m->s;
    REFUSED(cuLaunchKernelEx(&cfg, af, m->args, NULL), "cuLaunchKernelEx of A's function");
    REFUSED(cuLaunchKernelEx(&cfg, (CUfunction)ak, m->args, NULL),
            "cuLaunchKernelEx of A's library kernel");
    REFUSED(cuLaunchCooperativeKernel(af, 1, 1, 1, 32, 1, 1, 0, m->s, m->args),
            "cuLaunchCooperativeKernel of A's function");
    REFUSED(cuLaunchKernel((CUfunction)ak, 1, 1, 1, 32, 1, 1, 0, m->s, m->args, NULL),
            "cuLaunchKernel of A's library kernel");
    CUlaunchAttribute at;
    memset(&at, 0, sizeof at);
    at.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    at.value.launchCompletionEvent.event = (CUevent)(uintptr_t)h->event;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    REFUSED(cuLaunchKernelEx(&cfg, m->inc, m->args, NULL), "cuLaunchKernelEx recording A's event");
    int v;
    REFUSED(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, af),
            "cuFuncGetAttribute of A's function");
    REFUSED(cuFuncSetAttribute(af, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0),
            "cuFuncSetAttribute of A's function");
    REFUSED(cuFuncSetCacheConfig(af, CU_FUNC_CACHE_PREFER_NONE),
            "cuFuncSetCacheConfig of A's function");
    CUmodule mod;
    REFUSED(cuFuncGetModule(&mod, af), "cuFuncGetModule of A's function");
    const char *name;
    REFUSED(cuFuncGetName(&name, af), "cuFuncGetName of A's function");
    size_t off, size;
    REFUSED(cuFuncGetParamInfo(af, 0, &off, &size), "cuFuncGetParamInfo of A's function");
    b_alive(m->mem, "launches");
}

static void b_libraries(const struct handles *h, struct mine *m)
{
    CUlibrary al = (CUlibrary)(uintptr_t)h->library;
    CUkernel ak = (CUkernel)(uintptr_t)h->kernel, k;
    CUmodule am = (CUmodule)(uintptr_t)h->module, mod;
    CUfunction f;
    CUdeviceptr gp;
    size_t size, off;
    unsigned count;
    int v;
    const char *name;
    REFUSED(cuLibraryGetKernel(&k, al, "inc_u32"), "cuLibraryGetKernel in A's library");
    REFUSED(cuKernelGetFunction(&f, ak), "cuKernelGetFunction of A's kernel");
    REFUSED(cuLibraryGetModule(&mod, al), "cuLibraryGetModule of A's library");
    REFUSED(cuLibraryGetGlobal(&gp, &size, al, "g_table"), "cuLibraryGetGlobal in A's library");
    REFUSED(cuLibraryGetKernelCount(&count, al), "cuLibraryGetKernelCount of A's library");
    REFUSED(cuLibraryEnumerateKernels(&k, 1, al), "cuLibraryEnumerateKernels of A's library");
    REFUSED(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, ak, m->dev),
            "cuKernelGetAttribute of A's kernel");
    REFUSED(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, ak, m->dev),
            "cuKernelSetAttribute of A's kernel");
    REFUSED(cuKernelSetCacheConfig(ak, CU_FUNC_CACHE_PREFER_NONE, m->dev),
            "cuKernelSetCacheConfig of A's kernel");
    REFUSED(cuKernelGetName(&name, ak), "cuKernelGetName of A's kernel");
    REFUSED(cuKernelGetParamInfo(ak, 0, &off, &size), "cuKernelGetParamInfo of A's kernel");
    CUlibrary lib;
    REFUSED(cuKernelGetLibrary(&lib, ak), "cuKernelGetLibrary of A's kernel");
    REFUSED(cuModuleGetFunctionCount(&count, am), "cuModuleGetFunctionCount of A's module");
    REFUSED(cuModuleEnumerateFunctions(&f, 1, am), "cuModuleEnumerateFunctions of A's module");
    REFUSED(cuLibraryUnload(al), "cuLibraryUnload of A's library");
    b_alive(m->mem, "libraries and kernels");
}

static void b_copies(const struct handles *h, struct mine *m)
{
    CUdeviceptr ad = (CUdeviceptr)h->dptr, apitch = (CUdeviceptr)h->pitched;
    CUarray aa = (CUarray)(uintptr_t)h->array;
    static uint8_t buf[8192];
    memset(buf, 0xbb, sizeof buf);
    REFUSED(cuMemcpyPeer(m->mem, m->ctx, ad, m->ctx, 4096), "cuMemcpyPeer from A's memory");
    REFUSED(cuMemcpyPeer(ad, m->ctx, m->mem, m->ctx, 4096), "cuMemcpyPeer to A's memory");
    REFUSED(cuMemcpyPeerAsync(ad, m->ctx, m->mem, m->ctx, 4096, m->s),
            "cuMemcpyPeerAsync to A's memory");
    REFUSED(cuMemcpyHtoDAsync(ad, buf, 4096, m->s), "cuMemcpyHtoDAsync to A's memory");
    REFUSED(cuMemcpyDtoHAsync(buf, ad, 4096, m->s), "cuMemcpyDtoHAsync from A's memory");
    REFUSED(cuMemcpyDtoDAsync(ad, m->mem, 4096, m->s), "cuMemcpyDtoDAsync to A's memory");
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.srcDevice = apitch;
    c2.srcPitch = h->pitch;
    c2.dstMemoryType = CU_MEMORYTYPE_HOST;
    c2.dstHost = buf;
    c2.dstPitch = PITCH_W;
    c2.WidthInBytes = PITCH_W;
    c2.Height = 4;
    REFUSED(cuMemcpy2D(&c2), "cuMemcpy2D from A's pitched memory");
    REFUSED(cuMemcpy2DAsync(&c2, m->s), "cuMemcpy2DAsync from A's pitched memory");
    REFUSED(cuMemcpy2DUnaligned(&c2), "cuMemcpy2DUnaligned from A's pitched memory");
    c2.srcDevice = m->mem;
    c2.srcPitch = (size_t)(apitch - m->mem); /* the second row is A's */
    REFUSED(cuMemcpy2D(&c2), "cuMemcpy2D whose pitch reaches A's memory");
    CUDA_MEMCPY3D c3;
    memset(&c3, 0, sizeof c3);
    c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.srcDevice = ad;
    c3.dstMemoryType = CU_MEMORYTYPE_HOST;
    c3.dstHost = buf;
    c3.WidthInBytes = 4096;
    c3.Height = c3.Depth = 1;
    REFUSED(cuMemcpy3D(&c3), "cuMemcpy3D from A's memory");
    REFUSED(cuMemcpy3DAsync(&c3, m->s), "cuMemcpy3DAsync from A's memory");
    memset(&c3, 0, sizeof c3);
    c3.srcMemoryType = CU_MEMORYTYPE_HOST;
    c3.srcHost = buf;
    c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.dstDevice = ad;
    c3.WidthInBytes = 4096;
    c3.Height = c3.Depth = 1;
    REFUSED(cuMemcpy3D(&c3), "cuMemcpy3D to A's memory");
    memset(&c3, 0, sizeof c3);
    c3.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c3.srcArray = aa;
    c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.dstDevice = m->mem;
    c3.WidthInBytes = 128;
    c3.Height = 4;
    c3.Depth = 1;
    REFUSED(cuMemcpy3D(&c3), "cuMemcpy3D from A's array");
    memset(&c3, 0, sizeof c3);
    c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.srcDevice = m->mem;
    c3.srcPitch = 4096;
    c3.srcHeight = 4;
    c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.dstDevice = m->mem2;
    c3.dstPitch = 4096;
    c3.dstHeight = 4;
    c3.WidthInBytes = 64;
    c3.Height = 4;
    c3.Depth = BYTES / (4096 * 4) + 2; /* slices past B's memory */
    REFUSED(cuMemcpy3D(&c3), "cuMemcpy3D whose depth runs past B's memory");
    CUDA_MEMCPY3D_PEER cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = ad;
    cp.srcContext = m->ctx;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = m->mem;
    cp.dstContext = m->ctx;
    cp.WidthInBytes = 4096;
    cp.Height = cp.Depth = 1;
    REFUSED(cuMemcpy3DPeer(&cp), "cuMemcpy3DPeer from A's memory");
    REFUSED(cuMemcpy3DPeerAsync(&cp, m->s), "cuMemcpy3DPeerAsync from A's memory");
    REFUSED(cuMemcpyAtoH(buf, aa, 0, 128), "cuMemcpyAtoH from A's array");
    REFUSED(cuMemcpyHtoA(aa, 0, buf, 128), "cuMemcpyHtoA to A's array");
    REFUSED(cuMemcpyAtoHAsync(buf, aa, 0, 128, m->s), "cuMemcpyAtoHAsync from A's array");
    REFUSED(cuMemcpyHtoAAsync(aa, 0, buf, 128, m->s), "cuMemcpyHtoAAsync to A's array");
    REFUSED(cuMemcpyAtoD(m->mem, aa, 0, 128), "cuMemcpyAtoD from A's array");
    REFUSED(cuMemcpyDtoA(aa, 0, m->mem, 128), "cuMemcpyDtoA to A's array");
    REFUSED(cuMemcpyAtoA(m->arr, 0, aa, 0, 128), "cuMemcpyAtoA from A's array");
    REFUSED(cuMemcpyAtoA(aa, 0, m->arr, 0, 128), "cuMemcpyAtoA to A's array");
    REFUSED(cuMemcpyAtoD(m->mem, m->arr, 32 * 32 * 4 - 64, 128),
            "cuMemcpyAtoD past the end of B's array");
    REFUSED(cuMemsetD16(ad, 0, 64), "cuMemsetD16 on A's memory");
    REFUSED(cuMemsetD32(ad, 0, 64), "cuMemsetD32 on A's memory");
    REFUSED(cuMemsetD2D8(apitch, h->pitch, 0, PITCH_W, 2), "cuMemsetD2D8 on A's pitched memory");
    REFUSED(cuMemsetD2D16(apitch, h->pitch, 0, PITCH_W / 2, 2),
            "cuMemsetD2D16 on A's pitched memory");
    REFUSED(cuMemsetD2D32(apitch, h->pitch, 0, PITCH_W / 4, 2),
            "cuMemsetD2D32 on A's pitched memory");
    REFUSED(cuMemsetD2D8(m->mem, (size_t)(apitch - m->mem), 0, 64, 2),
            "cuMemsetD2D8 whose pitch reaches A's memory");
    REFUSED(cuMemsetD16Async(ad, 0, 64, m->s), "cuMemsetD16Async on A's memory");
    REFUSED(cuMemsetD32Async(ad, 0, 64, m->s), "cuMemsetD32Async on A's memory");
    REFUSED(cuMemsetD2D8Async(apitch, h->pitch, 0, PITCH_W, 2, m->s),
            "cuMemsetD2D8Async on A's pitched memory");
    REFUSED(cuMemsetD2D32Async(apitch, h->pitch, 0, PITCH_W / 4, 2, m->s),
            "cuMemsetD2D32Async on A's pitched memory");
    CUdeviceptr base;
    size_t size;
    REFUSED(cuMemGetAddressRange(&base, &size, apitch),
            "cuMemGetAddressRange of A's pitched memory");
    REFUSED(cuMemGetAddressRange(&base, &size, (CUdeviceptr)h->graphmem),
            "cuMemGetAddressRange of A's graph memory");
    CUdeviceptr dp;
    CUcontext cx;
    REFUSED(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ad),
            "cuPointerGetAttribute DEVICE_POINTER of A's memory");
    REFUSED(cuPointerGetAttribute(&cx, CU_POINTER_ATTRIBUTE_CONTEXT, ad),
            "cuPointerGetAttribute CONTEXT of A's memory");
    REFUSED(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ad),
            "cuPointerGetAttribute RANGE_START_ADDR of A's memory");
    unsigned type = 77, one = 1;
    CUpointer_attribute pa[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
    dp = 77;
    void *pd[2] = {&type, &dp};
    CHECK(cuPointerGetAttributes(2, pa, pd, ad)); /* unknown pointers read as zero, natively too */
    REQUIRE(type == 0 && dp == 0, "B: cuPointerGetAttributes of A's memory says type %u", type);
    t_ok("B: cuPointerGetAttributes of A's memory says nothing");
    REFUSED(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, ad),
            "cuPointerSetAttribute on A's memory");
    CHECK(cuStreamSynchronize(m->s));
    b_alive(m->mem, "copies and memsets");
}

static void b_pools_vmm(const struct handles *h, struct mine *m)
{
    CUmemPoolPtrExportData data;
    memset(&data, 0, sizeof data);
    CUdeviceptr p;
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, m->dev));
    REFUSED(cuMemPoolExportPointer(&data, (CUdeviceptr)h->pooled),
            "cuMemPoolExportPointer of A's pool memory");
    REFUSED(cuMemPoolImportPointer(&p, pool, &data), "cuMemPoolImportPointer of made-up data");
    CUmemGenericAllocationHandle vh;
    REFUSED(cuMemRetainAllocationHandle(&vh, (void *)(uintptr_t)h->mapped),
            "cuMemRetainAllocationHandle of A's mapping");
    REFUSED(cuMemRetainAllocationHandle(&vh, (void *)(uintptr_t)h->dptr),
            "cuMemRetainAllocationHandle of A's memory");
    unsigned long long fl;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    REFUSED(cuMemGetAccess(&fl, &loc, (CUdeviceptr)h->mapped), "cuMemGetAccess of A's mapping");
    CUmemAllocationProp prop;
    REFUSED(cuMemGetAllocationPropertiesFromHandle(&prop, (CUmemGenericAllocationHandle)h->vmm),
            "cuMemGetAllocationPropertiesFromHandle of A's physical memory");
    int fd = -1;
    REFUSED(cuMemExportToShareableHandle(&fd, (CUmemGenericAllocationHandle)h->vmm,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle of A's physical memory");
    b_alive(m->mem, "pools and virtual memory");
}

/* A graph of one node of B's, instantiated. */
static CUgraphExec one_node_exec(struct mine *m, CUgraph *g, CUgraphNode *n, int kind,
                                 CUdeviceptr mem, CUarray arr, CUevent ev)
{
    CHECK(cuGraphCreate(g, 0));
    if (kind == 0) {
        CUDA_MEMSET_NODE_PARAMS ms = memset_u32(mem, 0xeeeeeeeeu);
        CHECK(cuGraphAddMemsetNode(n, *g, NULL, 0, &ms, m->ctx));
    } else if (kind == 1) {
        CUDA_MEMCPY3D cp = copy_d2d(0, m->mem, 128);
        cp.dstMemoryType = CU_MEMORYTYPE_ARRAY;
        cp.dstArray = arr;
        cp.Height = 4;
        cp.srcPitch = 128;
        CHECK(cuGraphAddMemcpyNode(n, *g, NULL, 0, &cp, m->ctx));
    } else {
        CHECK(cuGraphAddEventRecordNode(n, *g, NULL, 0, ev));
    }
    CUgraphExec x;
    CHECK(cuGraphInstantiate(&x, *g, 0));
    return x;
}

/* A launch of B's exec, or the synchronisation after it, fails. */
static CUresult launch_result(CUgraphExec x, CUstream s)
{
    CUresult r = cuGraphLaunch(x, s);
    CUresult q = cuStreamSynchronize(s);
    return r != CUDA_SUCCESS ? r : q;
}

/* B's graphs name memory, an array and an event that B then frees and destroys; A makes
 * new ones of the same sizes, which may land at the same addresses and handles; none of
 * B's graphs may run on them. */
static void b_stale(struct mine *m, int from_a, int to_a)
{
    CUdeviceptr mem, mem2;
    CUarray arr;
    CUevent ev;
    CHECK(cuMemAlloc(&mem, STALE_BYTES));
    CHECK(cuMemAlloc(&mem2, STALE_BYTES));
    CUDA_ARRAY3D_DESCRIPTOR ad = {
        .Width = 32, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CHECK(cuArray3DCreate(&arr, &ad));
    CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    CUgraph g[6];
    CUgraphNode n[6];
    CUgraphExec x[6];
    x[0] = one_node_exec(m, &g[0], &n[0], 0, mem, NULL, NULL);
    x[1] = one_node_exec(m, &g[1], &n[1], 1, 0, arr, NULL);
    x[2] = one_node_exec(m, &g[2], &n[2], 2, 0, NULL, ev);
    /* An exec whose memset node is set to memory B frees after. */
    x[3] = one_node_exec(m, &g[3], &n[3], 0, m->mem, NULL, NULL);
    CUDA_MEMSET_NODE_PARAMS ms = memset_u32(mem2, 0xeeeeeeeeu);
    CHECK(cuGraphExecMemsetNodeSetParams(x[3], n[3], &ms, m->ctx));
    CHECK(launch_result(x[0], m->s));
    CHECK(launch_result(x[1], m->s));
    CHECK(launch_result(x[2], m->s));
    CHECK(launch_result(x[3], m->s));
    /* An exec whose kernel node runs a function of a module B unloads after. */
    CUmodule mod2 = t_load_module("kernels.ptx");
    CUfunction inc2 = t_get_function(mod2, "inc_u32");
    CHECK(cuGraphCreate(&g[4], 0));
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(inc2, m->args);
    CHECK(cuGraphAddKernelNode(&n[4], g[4], NULL, 0, &kp));
    CHECK(cuGraphInstantiate(&x[4], g[4], 0));
    CHECK(launch_result(x[4], m->s));
    /* An exec whose IF node (taken: default 1) has a body that sets memory B frees. */
    CUgraphConditionalHandle ch;
    CHECK(cuGraphCreate(&g[5], 0));
    CHECK(cuGraphConditionalHandleCreate(&ch, g[5], m->ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNodeParams cp = params_of(CU_GRAPH_NODE_TYPE_CONDITIONAL);
    cp.conditional.handle = ch;
    cp.conditional.ctx = m->ctx;
    cp.conditional.type = CU_GRAPH_COND_TYPE_IF;
    cp.conditional.size = 1;
    CHECK(cuGraphAddNode(&n[5], g[5], NULL, NULL, 0, &cp));
    REQUIRE(cp.conditional.phGraph_out, "B: its IF node has no body");
    CUgraphNode bn;
    CUDA_MEMSET_NODE_PARAMS bms = memset_u32(mem, 0xeeeeeeeeu);
    CHECK(cuGraphAddMemsetNode(&bn, cp.conditional.phGraph_out[0], NULL, 0, &bms, m->ctx));
    CHECK(cuGraphInstantiate(&x[5], g[5], 0));
    CHECK(launch_result(x[5], m->s));
    t_ok("B: its graphs over its own memory, array, event and function run");
    CHECK(cuModuleUnload(mod2));
    CHECK(cuMemFree(mem));
    CHECK(cuMemFree(mem2));
    CHECK(cuArrayDestroy(arr));
    CHECK(cuEventDestroy(ev));
    char go = 'g';
    t_write_all(to_a, &go, 1);
    REQUIRE(t_read_all(from_a, &go, 1), "B: A made nothing");

    REFUSED(launch_result(x[0], m->s),
            "a launch of its exec whose memset node names memory it freed");
    REFUSED(launch_result(x[1], m->s),
            "a launch of its exec whose memcpy node names an array it destroyed");
    REFUSED(launch_result(x[2], m->s),
            "a launch of its exec whose record node names an event it destroyed");
    REFUSED(launch_result(x[3], m->s),
            "a launch of its exec whose memset node was set to memory it freed");
    CUgraphExec late;
    CHECK(cuGraphInstantiate(&late, g[0], 0));
    REFUSED(launch_result(late, m->s),
            "a launch of an exec made after the free from a graph naming that memory");
    CHECK(cuGraphExecDestroy(late));
    REFUSED(launch_result(x[4], m->s),
            "a launch of its exec whose kernel node runs a function of a module it unloaded");
    REFUSED(launch_result(x[5], m->s),
            "a launch of its exec whose IF node's body names memory it freed");
    CUevent got = NULL;
    CUresult r = cuGraphEventRecordNodeGetEvent(n[2], &got);
    if (r == CUDA_SUCCESS && got)
        REFUSED(cuEventRecord(got, m->s),
                "cuEventRecord of the event its record node names, destroyed");
    else
        t_ok("B: cuEventRecord of the event its record node names, destroyed refused");
    /* The graph a capture was building, which B learned, goes with the capturing stream:
     * its handle is no longer B's (the server's answer for a graph B does not hold). */
    CUstream cs;
    CUstreamCaptureStatus cst;
    CUgraph building = NULL;
    CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuStreamGetCaptureInfo(cs, &cst, NULL, &building, NULL, NULL, NULL));
    REQUIRE(building, "B: its capture builds no graph");
    CHECK(cuStreamDestroy(cs));
    CUgraphNode e;
    EXPECT(cuGraphAddEmptyNode(&e, building, NULL, 0), CUDA_ERROR_INVALID_HANDLE);
    t_ok("B: cuGraphAddEmptyNode to the graph of a capture whose stream it destroyed refused");
    for (int i = 0; i < 6; i++) {
        CHECK(cuGraphExecDestroy(x[i]));
        CHECK(cuGraphDestroy(g[i]));
    }
    b_graph_runs(m);
}

static void run_b(int from_a, int to_a)
{
    struct handles h;
    REQUIRE(t_read_all(from_a, &h, sizeof h), "B: A sent no handles");
    struct mine m;
    b_setup(&m);
    b_managed(&h, &m);
    b_host(&h, &m);
    b_graphmem(&h, &m);
    b_graph_nodes(&h, &m);
    b_textures(&h, &m);
    b_ipc(&h, &m);
    b_streams(&h, &m);
    b_launches(&h, &m);
    b_libraries(&h, &m);
    b_copies(&h, &m);
    b_pools_vmm(&h, &m);
    b_graph_runs(&m);
    b_stale(&m, from_a, to_a);

    CHECK(cuGraphExecDestroy(m.exec));
    CHECK(cuGraphDestroy(m.g));
    CHECK(cuArrayDestroy(m.arr));
    CHECK(cuEventDestroy(m.ev));
    CHECK(cuEventDestroy(m.ev2));
    CHECK(cuStreamDestroy(m.s));
    CHECK(cuMemFree(m.mem));
    CHECK(cuMemFree(m.mem2));
    CHECK(cuModuleUnload(m.mod));
    CHECK(cuDevicePrimaryCtxRelease(m.dev));
    REQUIRE(accepted == 0, "B: %d call(s) on A's objects accepted", accepted);
    char done = 1;
    t_write_all(to_a, &done, 1);
}

/* ---------------------------------------------------------------- A */

struct a_objs {
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction inc;
    CUlibrary lib;
    CUkernel kern;
    CUdeviceptr p, pitched, managed, pooled, gmem, gout, graphmem, va;
    size_t pitch, g;
    void *pinned, *reg;
    CUarray arr;
    CUmipmappedArray mip;
    CUtexObject tex;
    CUstream s;
    CUevent ev, ev_ipc;
    CUmemGenericAllocationHandle vh;
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode n_memset, n_kernel, n_memcpy, n_host, n_record, n_wait, n_child, n_empty, n_alloc,
        n_free;
    unsigned long long n;
    void *args[2];
};

/* A's graph: memset 5 -> inc -> copy to gout -> host -> record -> wait -> child -> empty;
 * and an allocation node followed by its free. gout comes out as 6s. */
static void a_graph(struct a_objs *a)
{
    CHECK(cuMemAlloc(&a->gmem, GWORDS * 4));
    CHECK(cuMemAlloc(&a->gout, GWORDS * 4));
    CHECK(cuGraphCreate(&a->graph, 0));
    CUDA_MEMSET_NODE_PARAMS ms = memset_u32(a->gmem, 5);
    CHECK(cuGraphAddMemsetNode(&a->n_memset, a->graph, NULL, 0, &ms, a->ctx));
    a->n = GWORDS;
    a->args[0] = &a->gmem;
    a->args[1] = &a->n;
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(a->inc, a->args);
    kp.gridDimX = 4;
    CHECK(cuGraphAddKernelNode(&a->n_kernel, a->graph, &a->n_memset, 1, &kp));
    CUDA_MEMCPY3D cp = copy_d2d(a->gout, a->gmem, GWORDS * 4);
    CHECK(cuGraphAddMemcpyNode(&a->n_memcpy, a->graph, &a->n_kernel, 1, &cp, a->ctx));
    CUDA_HOST_NODE_PARAMS hp = {.fn = host_fn, .userData = NULL};
    CHECK(cuGraphAddHostNode(&a->n_host, a->graph, &a->n_memcpy, 1, &hp));
    CHECK(cuGraphAddEventRecordNode(&a->n_record, a->graph, &a->n_host, 1, a->ev));
    CHECK(cuGraphAddEventWaitNode(&a->n_wait, a->graph, &a->n_record, 1, a->ev));
    CUgraph child;
    CUgraphNode e;
    CHECK(cuGraphCreate(&child, 0));
    CHECK(cuGraphAddEmptyNode(&e, child, NULL, 0));
    CHECK(cuGraphAddChildGraphNode(&a->n_child, a->graph, &a->n_wait, 1, child));
    CHECK(cuGraphDestroy(child));
    CHECK(cuGraphAddEmptyNode(&a->n_empty, a->graph, &a->n_child, 1));
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.poolProps.location.id = 0;
    ap.bytesize = 1 << 16;
    CHECK(cuGraphAddMemAllocNode(&a->n_alloc, a->graph, NULL, 0, &ap));
    a->graphmem = ap.dptr;
    CHECK(cuGraphAddMemFreeNode(&a->n_free, a->graph, &a->n_alloc, 1, a->graphmem));
    CHECK(cuGraphInstantiate(&a->exec, a->graph, 0));
}

/* A's graph runs as built: gout all 6, its host node once more. */
static void a_graph_runs(struct a_objs *a, const char *when)
{
    static uint32_t w[GWORDS];
    int before = atomic_load(&host_calls);
    CHECK(cuMemsetD8Async(a->gout, 0, GWORDS * 4, a->s)); /* its stream: non-blocking */
    CHECK(cuGraphLaunch(a->exec, a->s));
    CHECK(cuStreamSynchronize(a->s));
    CHECK(cuMemcpyDtoH(w, a->gout, sizeof w));
    for (int i = 0; i < GWORDS; i++)
        REQUIRE(w[i] == 6, "A: its graph's word %d is %u %s", i, w[i], when);
    REQUIRE(atomic_load(&host_calls) == before + 1, "A: its host node ran %d times %s",
            atomic_load(&host_calls) - before, when);
    t_ok("A: its graph runs %s", when);
}

static void a_setup(struct a_objs *a)
{
    t_setup(&a->dev, &a->ctx);
    a->mod = t_load_module("kernels.ptx");
    a->inc = t_get_function(a->mod, "inc_u32");
    size_t len;
    void *ptx = t_read_kernel_file("kernels.ptx", &len);
    CHECK(cuLibraryLoadData(&a->lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    free(ptx);
    CHECK(cuLibraryGetKernel(&a->kern, a->lib, "inc_u32"));

    uint8_t *host = malloc(BYTES);
    REQUIRE(host, "out of host memory");
    t_fill_pattern(host, BYTES, SEED);
    CHECK(cuMemAlloc(&a->p, BYTES));
    CHECK(cuMemcpyHtoD(a->p, host, BYTES));
    free(host);
    CHECK(cuMemAllocPitch(&a->pitched, &a->pitch, PITCH_W, PITCH_H, 4));
    CHECK(cuMemsetD2D8(a->pitched, a->pitch, 0x3c, PITCH_W, PITCH_H));
    CHECK(cuMemAllocManaged(&a->managed, BYTES, CU_MEM_ATTACH_GLOBAL));
    memset((void *)(uintptr_t)a->managed, 0x6d, BYTES);
    CHECK(cuMemHostAlloc(&a->pinned, BYTES, 0));
    memset(a->pinned, 0x9e, BYTES);
    a->reg = mmap((void *)(uintptr_t)reg_addr, REG_BYTES, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    REQUIRE(a->reg == (void *)(uintptr_t)reg_addr, "A: cannot map its pages at %#llx: %s",
            (unsigned long long)reg_addr, strerror(errno));
    memset(a->reg, 0x4f, REG_BYTES);
    CHECK(cuMemHostRegister(a->reg, REG_BYTES, CU_MEMHOSTREGISTER_DEVICEMAP));
    CHECK(cuMemAllocAsync(&a->pooled, 4096, NULL));
    CHECK(cuMemsetD8Async(a->pooled, 0x5a, 4096, NULL));

    a->g = granule();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CHECK(cuMemCreate(&a->vh, a->g, &prop, 0));
    CHECK(cuMemAddressReserve(&a->va, a->g, 0, 0, 0));
    CHECK(cuMemMap(a->va, a->g, 0, a->vh, 0));
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(a->va, a->g, &d, 1));
    CHECK(cuMemsetD8(a->va, 0x77, a->g));

    CUDA_ARRAY3D_DESCRIPTOR ad = {
        .Width = 32, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CHECK(cuArray3DCreate(&a->arr, &ad));
    static uint8_t texels[32 * 32 * 4];
    memset(texels, 0xa7, sizeof texels);
    CHECK(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST,
                                      .srcHost = texels,
                                      .srcPitch = 128,
                                      .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                                      .dstArray = a->arr,
                                      .WidthInBytes = 128,
                                      .Height = 32}));
    CHECK(cuMipmappedArrayCreate(&a->mip, &ad, 2));
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_POINT};
    CUDA_RESOURCE_DESC rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = a->arr;
    CHECK(cuTexObjectCreate(&a->tex, &rd, &td, NULL));

    CHECK(cuStreamCreate(&a->s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&a->ev, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&a->ev_ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    a_graph(a);
    a_graph_runs(a, "before B");
    CHECK(cuCtxSynchronize());
    t_ok("A: set up");
}

/* After B: every byte as A left it, every object working. */
static void a_check(struct a_objs *a)
{
    uint8_t *host = malloc(BYTES);
    REQUIRE(host, "out of host memory");
    CHECK(cuMemcpyDtoH(host, a->p, BYTES));
    REQUIRE(t_pattern_mismatch(host, BYTES, SEED) == SIZE_MAX, "A: memory changed by B");
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.srcDevice = a->pitched;
    c2.srcPitch = a->pitch;
    c2.dstMemoryType = CU_MEMORYTYPE_HOST;
    c2.dstHost = host;
    c2.dstPitch = PITCH_W;
    c2.WidthInBytes = PITCH_W;
    c2.Height = PITCH_H;
    CHECK(cuMemcpy2D(&c2));
    REQUIRE(t_bytes_mismatch(host, PITCH_W * PITCH_H, 0x3c) == SIZE_MAX,
            "A: pitched memory changed by B");
    REQUIRE(t_bytes_mismatch((void *)(uintptr_t)a->managed, BYTES, 0x6d) == SIZE_MAX,
            "A: managed memory changed by B");
    REQUIRE(t_bytes_mismatch(a->pinned, BYTES, 0x9e) == SIZE_MAX, "A: pinned memory changed by B");
    REQUIRE(t_bytes_mismatch(a->reg, REG_BYTES, 0x4f) == SIZE_MAX,
            "A: registered memory changed by B");
    CHECK(cuMemcpyDtoH(host, a->pooled, 4096));
    REQUIRE(t_bytes_mismatch(host, 4096, 0x5a) == SIZE_MAX, "A: pool memory changed by B");
    CHECK(cuMemcpyDtoH(host, a->va, 4096));
    REQUIRE(t_bytes_mismatch(host, 4096, 0x77) == SIZE_MAX, "A: mapped memory changed by B");
    CHECK(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                                      .srcArray = a->arr,
                                      .dstMemoryType = CU_MEMORYTYPE_HOST,
                                      .dstHost = host,
                                      .dstPitch = 128,
                                      .WidthInBytes = 128,
                                      .Height = 32}));
    REQUIRE(t_bytes_mismatch(host, 32 * 32 * 4, 0xa7) == SIZE_MAX, "A: its array changed by B");
    t_ok("A: memory intact");

    /* Its nodes as it made them, its graph and exec running as before. */
    CUDA_MEMSET_NODE_PARAMS ms;
    CHECK(cuGraphMemsetNodeGetParams(a->n_memset, &ms));
    REQUIRE(ms.dst == a->gmem && ms.value == 5, "A: its memset node changed");
    CUDA_KERNEL_NODE_PARAMS kp;
    CHECK(cuGraphKernelNodeGetParams(a->n_kernel, &kp));
    REQUIRE(kp.func == a->inc || (CUkernel)kp.func == a->kern || kp.kern,
            "A: its kernel node changed");
    CUevent ev;
    CHECK(cuGraphEventRecordNodeGetEvent(a->n_record, &ev));
    REQUIRE(ev == a->ev, "A: its record node's event changed");
    CHECK(cuGraphEventWaitNodeGetEvent(a->n_wait, &ev));
    REQUIRE(ev == a->ev, "A: its wait node's event changed");
    CUDA_HOST_NODE_PARAMS hp;
    CHECK(cuGraphHostNodeGetParams(a->n_host, &hp));
    REQUIRE(hp.fn == host_fn, "A: its host node changed");
    size_t count = 0;
    CHECK(cuGraphGetNodes(a->graph, NULL, &count));
    REQUIRE(count == 10, "A: its graph has %zu nodes", count);
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    CHECK(cuGraphMemAllocNodeGetParams(a->n_alloc, &ap));
    REQUIRE(ap.dptr == a->graphmem, "A: its allocation node changed");
    a_graph_runs(a, "after B");

    /* Its texture, library kernel, event and stream. */
    CUDA_RESOURCE_DESC rd;
    CHECK(cuTexObjectGetResourceDesc(&rd, a->tex));
    REQUIRE(rd.res.array.hArray == a->arr, "A: its texture's resource");
    unsigned long long n = 256;
    void *args[] = {&a->p, &n};
    CHECK(cuLaunchKernel((CUfunction)a->kern, 1, 1, 1, 256, 1, 1, 0, a->s, args, NULL));
    CHECK(cuEventRecord(a->ev_ipc, a->s));
    CHECK(cuEventSynchronize(a->ev_ipc));
    uint32_t w[256];
    CHECK(cuMemcpyDtoH(w, a->p, sizeof w));
    for (unsigned i = 0; i < 256; i++)
        REQUIRE(w[i] == t_pattern_at(SEED, i) + 1, "A: word %u after its library kernel", i);
    CUfunction f;
    CHECK(cuKernelGetFunction(&f, a->kern));
    t_ok("A: its texture, library kernel, events and stream still work");
    free(host);
}

static void a_teardown(struct a_objs *a)
{
    CHECK(cuGraphExecDestroy(a->exec));
    CHECK(cuGraphDestroy(a->graph));
    CHECK(cuTexObjectDestroy(a->tex));
    CHECK(cuMipmappedArrayDestroy(a->mip));
    CHECK(cuArrayDestroy(a->arr));
    CHECK(cuMemUnmap(a->va, a->g));
    CHECK(cuMemAddressFree(a->va, a->g));
    CHECK(cuMemRelease(a->vh));
    CHECK(cuMemFreeAsync(a->pooled, NULL));
    CHECK(cuStreamSynchronize(NULL));
    CHECK(cuMemHostUnregister(a->reg));
    munmap(a->reg, REG_BYTES);
    CHECK(cuMemFreeHost(a->pinned));
    CHECK(cuMemFree(a->managed));
    CHECK(cuMemFree(a->pitched));
    CHECK(cuMemFree(a->gmem));
    CHECK(cuMemFree(a->gout));
    CHECK(cuMemFree(a->p));
    CHECK(cuEventDestroy(a->ev));
    CHECK(cuEventDestroy(a->ev_ipc));
    CHECK(cuStreamDestroy(a->s));
    CHECK(cuLibraryUnload(a->lib));
    CHECK(cuModuleUnload(a->mod));
    CHECK(cuDevicePrimaryCtxRelease(a->dev));
    t_ok("A: everything freed");
}

static void run_a(int to_b, int from_b, pid_t b)
{
    struct a_objs a;
    memset(&a, 0, sizeof a);
    a_setup(&a);
    struct handles h;
    memset(&h, 0, sizeof h);
    h.dptr = a.p;
    h.pitched = a.pitched;
    h.pitch = a.pitch;
    h.managed = a.managed;
    h.pinned = (uint64_t)(uintptr_t)a.pinned;
    h.registered = (uint64_t)(uintptr_t)a.reg;
    h.pooled = a.pooled;
    h.array = (uint64_t)(uintptr_t)a.arr;
    h.mip = (uint64_t)(uintptr_t)a.mip;
    h.tex = a.tex;
    h.stream = (uint64_t)(uintptr_t)a.s;
    h.event = (uint64_t)(uintptr_t)a.ev;
    h.module = (uint64_t)(uintptr_t)a.mod;
    h.func = (uint64_t)(uintptr_t)a.inc;
    h.library = (uint64_t)(uintptr_t)a.lib;
    h.kernel = (uint64_t)(uintptr_t)a.kern;
    h.graph = (uint64_t)(uintptr_t)a.graph;
    h.exec = (uint64_t)(uintptr_t)a.exec;
    h.n_memset = (uint64_t)(uintptr_t)a.n_memset;
    h.n_kernel = (uint64_t)(uintptr_t)a.n_kernel;
    h.n_memcpy = (uint64_t)(uintptr_t)a.n_memcpy;
    h.n_host = (uint64_t)(uintptr_t)a.n_host;
    h.n_record = (uint64_t)(uintptr_t)a.n_record;
    h.n_wait = (uint64_t)(uintptr_t)a.n_wait;
    h.n_child = (uint64_t)(uintptr_t)a.n_child;
    h.n_empty = (uint64_t)(uintptr_t)a.n_empty;
    h.n_alloc = (uint64_t)(uintptr_t)a.n_alloc;
    h.n_free = (uint64_t)(uintptr_t)a.n_free;
    h.graphmem = a.graphmem;
    h.reserved = a.va;
    h.mapped = a.va;
    h.vmm = a.vh;
    CHECK(cuIpcGetMemHandle(&h.ipc_mem, a.p));
    CHECK(cuIpcGetEventHandle(&h.ipc_ev, a.ev_ipc));
    t_write_all(to_b, &h, sizeof h);

    /* B has freed what its graphs name: A's new objects of the same sizes. */
    char done = 0;
    CUdeviceptr fresh = 0;
    CUarray fresh_arr = NULL;
    CUevent fresh_ev = NULL;
    static uint8_t texels[32 * 32 * 4];
    if (t_read_all(from_b, &done, 1)) {
        CHECK(cuMemAlloc(&fresh, STALE_BYTES));
        CHECK(cuMemsetD8(fresh, 0x33, STALE_BYTES));
        CUDA_ARRAY3D_DESCRIPTOR ad = {
            .Width = 32, .Height = 32, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
        CHECK(cuArray3DCreate(&fresh_arr, &ad));
        memset(texels, 0x44, sizeof texels);
        CHECK(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_HOST,
                                          .srcHost = texels,
                                          .srcPitch = 128,
                                          .dstMemoryType = CU_MEMORYTYPE_ARRAY,
                                          .dstArray = fresh_arr,
                                          .WidthInBytes = 128,
                                          .Height = 32}));
        CHECK(cuEventCreate(&fresh_ev, CU_EVENT_DEFAULT));
        CHECK(cuCtxSynchronize());
        t_write_all(to_b, &done, 1);
    }
    int got = t_read_all(from_b, &done, 1);
    int status = 0;
    REQUIRE(waitpid(b, &status, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(!WIFSIGNALED(status), "B was killed by signal %d", WTERMSIG(status));
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got, "B failed (exit status %d)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    a_check(&a);
    REQUIRE(fresh, "A: B never freed its objects");
    uint8_t *host = malloc(STALE_BYTES);
    REQUIRE(host, "out of host memory");
    CHECK(cuMemcpyDtoH(host, fresh, STALE_BYTES));
    REQUIRE(t_bytes_mismatch(host, STALE_BYTES, 0x33) == SIZE_MAX,
            "A: memory made after B's free changed by B's graph");
    free(host);
    CHECK(cuMemcpy2D(&(CUDA_MEMCPY2D){.srcMemoryType = CU_MEMORYTYPE_ARRAY,
                                      .srcArray = fresh_arr,
                                      .dstMemoryType = CU_MEMORYTYPE_HOST,
                                      .dstHost = texels,
                                      .dstPitch = 128,
                                      .WidthInBytes = 128,
                                      .Height = 32}));
    REQUIRE(t_bytes_mismatch(texels, sizeof texels, 0x44) == SIZE_MAX,
            "A: array made after B's destroy changed by B's graph");
    CHECK(cuEventQuery(fresh_ev));
    CHECK(cuMemFree(fresh));
    CHECK(cuArrayDestroy(fresh_arr));
    CHECK(cuEventDestroy(fresh_ev));
    t_ok("A: memory, array and event made after B let go of its own untouched by B's graphs");
    a_teardown(&a);
}

int main(void)
{
    t_init("isolation2", 120);
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "libmpsshim")) t_skip("needs the shim");

    int a2b[2], b2a[2];
    REQUIRE(pipe(a2b) == 0 && pipe(b2a) == 0, "pipe: %s", strerror(errno));
    reg_addr = REG_BASE + (uint64_t)(getpid() % 4096) * REG_BYTES;
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
