/* Stream capture and CUDA graphs, described in cuda_symbols.txt; what no description can
 * say is here.
 *
 * Captures run in the server in relaxed mode whatever mode the client asked for: in a
 * global-mode capture the driver refuses "unsafe" calls from every thread of the process,
 * and every client's worker is a thread of this one process, so one client's capture
 * would make the others' calls fail. (The client's shim applies the mode to the client's
 * own threads: interpose/capture.c.) While a client has a capture going, the
 * server adds no work of its own to capturing streams (streams.c, waits.c), and refuses
 * what it could not replay: pageable copies (copy.c); host functions become host nodes
 * (hostfn.c); stream-ordered allocations and frees become graph memory nodes (below).
 *
 * Graphs, nodes and execs are the client's registry objects: nodes die with their graph,
 * graphs and execs with the client. Kernel nodes are hand-written (their parameters are
 * packed by the client, which alone knows each function's layout, and travel as the
 * `extra` buffer, and are read back packed by the layout the server reads from the driver);
 * memset and memcpy nodes name memory, which must be the client's. Host
 * nodes (the client's function, run on each replay) are hostfn.c's. */
#include "server/core/server.h"
#include "server/core/devices.h"
#include "server/memory/devmem.h"
#include "server/graphs/graph.h"
#include "server/graphs/graphrefs.h"
#include "server/memory/hostblocks.h"
#include "server/code/launch.h"
#include "server/memory/memory.h"
#include "server/code/module.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- capture */

/* The legacy stream cannot be captured (as with the driver); the client's streams
 * otherwise begin capturing in relaxed mode (see above). */
static CUresult begin_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_stream *s =
        srv_stream_resolve(c, k->a.val[0], k->r->flags & CHAN_RF_PTDS, k->r->thread);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    return s->legacy ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* The stream the capture call names (the description checked it). */
static struct srv_stream *capture_stream(struct srv_client *c, struct srv_call *k)
{
    return srv_stream_resolve(c, k->a.val[0], k->r->flags & CHAN_RF_PTDS, k->r->thread);
}

static CUresult begin_call(struct srv_client *c, struct srv_call *k)
{
    CUresult r;
    CUstream st = (CUstream)(uintptr_t)k->vals[0];
    /* Pinned blocks of the copies before it are closed now, outside the capture
     * (hostblocks.c). */
    struct srv_stream *before = capture_stream(c, k);
    if (before) srv_hblock_close(c, before);
    /* What it holds now can no longer be waited for once it captures (an event recorded
     * there becomes a node): a mark of it, for frees that must come after it (devmem.c),
     * made once per stream. Without one, it holds nothing when the capture begins. */
    if (before && !before->cap_mark &&
        DRV(cuEventCreate)(&before->cap_mark, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        before->cap_mark = NULL;
    if (before && (!before->cap_mark || DRV(cuEventRecord)(before->cap_mark, st) != CUDA_SUCCESS) &&
        (r = DRV(cuStreamSynchronize)(st)) != CUDA_SUCCESS)
        return r;
    if (k->id == SHIM_ID_cuStreamBeginCaptureToGraph)
        r = DRV(cuStreamBeginCaptureToGraph)(st, (CUgraph)(uintptr_t)k->vals[1],
                                             (const CUgraphNode *)(uintptr_t)k->vals[2],
                                             (const CUgraphEdgeData *)(uintptr_t)k->vals[3],
                                             (size_t)k->vals[4], CU_STREAM_CAPTURE_MODE_RELAXED);
    else
        r = DRV(cuStreamBeginCapture_v2)(st, CU_STREAM_CAPTURE_MODE_RELAXED);
    if (r != CUDA_SUCCESS) return r;
    c->captures++;
    struct srv_stream *s = capture_stream(c, k);
    CUstreamCaptureStatus status;
    CUgraph g = NULL;
    if (s && DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &g, NULL, NULL) == CUDA_SUCCESS)
        s->capture_graph = g;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_capture_begin = {.before = begin_before, .call = begin_call};

/* The driver destroyed the graph a capture was building, which the client knew (it
 * allocated in it, asked cuStreamGetCaptureInfo for it, captured a host function): its
 * record goes (a later graph of another client's at that address would otherwise pass as
 * this one's), and the graph memory under it with it, uncounted (never launched, so never
 * allocated: nothing to free, and the driver may hand the address to anyone now). */
static void capture_graph_gone(struct srv_client *c, struct srv_obj *g)
{
    for (struct srv_obj *o = g->children, *next; o; o = next) {
        next = o->sib_next;
        if (o->key.type == SHIM_HT_MEM_GRAPHMEM) srv_obj_destroyed(c, o);
    }
    srv_obj_destroyed(c, g);
}

/* A capture ends with the call, whether it made a graph or was invalidated; if it failed,
 * the driver destroyed the graph (unless it is the client's own). */
static CUresult end_call(struct srv_client *c, struct srv_call *k)
{
    CUstream st = (CUstream)(uintptr_t)k->vals[0];
    struct srv_stream *s = capture_stream(c, k);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph building = NULL;
    int was =
        DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &building, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE;
    if (s && s->capture_graph)
        building = s->capture_graph; /* also when invalidated, which the driver names not */
    CUresult r = DRV(cuStreamEndCapture)(st, (CUgraph *)k->a.ptr[1]);
    if (was && DRV(cuStreamIsCapturing)(st, &status) == CUDA_SUCCESS &&
        status == CU_STREAM_CAPTURE_STATUS_NONE) {
        if (c->captures) c->captures--;
        if (s) s->capture_graph = NULL;
    }
    struct srv_obj *o = building ? srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)building) : NULL;
    if (r != CUDA_SUCCESS && o && !o->owned) capture_graph_gone(c, o);
    return r;
}

const struct srv_hook srv_hook_capture_end = {.call = end_call};

void srv_capture_abandon(struct srv_client *c, struct srv_stream *s, int forget)
{
    if (!srv_stream_capturing(c, s)) return;
    CUgraph g = NULL;
    struct srv_obj *o =
        s->capture_graph ? srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)s->capture_graph) : NULL;
    if (DRV(cuStreamEndCapture)(s->real, &g) == CUDA_SUCCESS && g) {
        struct srv_obj *made = srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)g);
        if (!(made && made->owned)) DRV(cuGraphDestroy)(g);
        if (!o) o = made;
    }
    /* Only the stream that began a capture ends it (one that joined it stays in it). */
    if (srv_stream_capturing(c, s)) return;
    if (c->captures) c->captures--;
    s->capture_graph = NULL;
    if (forget && o && !o->owned) capture_graph_gone(c, o);
}

static void abandon_dropping(struct srv_client *c, struct srv_stream *s, void *arg)
{
    (void)arg;
    srv_capture_abandon(c, s, 1);
}

void srv_captures_abandon(struct srv_client *c, uint32_t ctx)
{
    /* Per-thread default streams can capture too (the legacy stream cannot). */
    if (c->captures) srv_streams_each(c, ctx, 0, abandon_dropping, NULL);
}

/* ---------------------------------------------------------------- DOT files */

/* cuGraphDebugDotPrint writes a file at the client's path as the client sees its files:
 * relative to its working directory, under its root (a container's), not the server's. The
 * driver opens the file in this process, so the path goes through /proc/<client>/cwd or
 * /proc/<client>/root (the client's pid as this server's namespace numbers it). The worker
 * thread makes the call right after: its buffer is its own. */
static __thread char dot_path[4096 + 64];

static CUresult dot_print_before(struct srv_client *c, struct srv_call *k)
{
    const char *p = k->a.ptr[1];
    if (!p || !*p) return CUDA_ERROR_INVALID_VALUE;
    int n = snprintf(dot_path, sizeof(dot_path),
                     p[0] == '/' ? "/proc/%d/root%s" : "/proc/%d/cwd/%s", (int)c->pid, p);
    if (n < 0 || (size_t)n >= sizeof(dot_path)) return CUDA_ERROR_INVALID_VALUE;
    k->vals[1] = (uint64_t)(uintptr_t)dot_path;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_dot_print = {.before = dot_print_before};

/* ---------------------------------------------------------------- memset and memcpy nodes */

/* The parameter of the call whose elements are the struct `name`. */
static const void *struct_param(const struct srv_call *k, const char *name)
{
    for (int i = 0; i < k->d->nparams; i++)
        if (k->d->params[i].st && strcmp(k->d->params[i].st->name, name) == 0) return k->a.ptr[i];
    return NULL;
}

/* A memset node writes (height - 1) * pitch + width * elementSize bytes of the client's. */
static CUresult memset_before(struct srv_client *c, struct srv_call *k)
{
    const CUDA_MEMSET_NODE_PARAMS *p = struct_param(k, "CUDA_MEMSET_NODE_PARAMS");
    uint64_t row;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (!(p->elementSize == 1 || p->elementSize == 2 || p->elementSize == 4) ||
        __builtin_mul_overflow((uint64_t)p->width, p->elementSize, &row))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->width == 0 || p->height == 0) return CUDA_SUCCESS;
    if (p->height > 1 && p->pitch < row) return CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *o = srv_range_extent(c, p->dst, 0, 0, 0, p->pitch, 1, row, p->height, 1);
    if (!o) return CUDA_ERROR_INVALID_VALUE;
    /* Given no context, the driver takes the memory's: cuMemAlloc memory names the one it
     * was made in, that of the server's pool or arena (devmem.c) names none and would be
     * refused. Its device's shared context is what cuMemAlloc memory would have named. */
    if (srv_devmem_pooled(o) && o->dev >= 0 && o->dev < srv.ndev)
        for (int i = 0; i < k->d->nparams; i++)
            if (k->d->params[i].kind == SHIM_PK_CTX && !k->vals[i])
                k->vals[i] = (uint64_t)(uintptr_t)srv.ctx[o->dev];
    return CUDA_SUCCESS;
}

/* An exec's memset node set anew: its launches check the new memory (graphrefs.c). */
static CUresult memset_after(struct srv_client *c, struct srv_call *k)
{
    if (k->id == SHIM_ID_cuGraphExecMemsetNodeSetParams)
        srv_graphrefs_memset(srv_obj_find(c, SHIM_HT_CUgraphExec, k->a.val[0]), k->a.val[1],
                             struct_param(k, "CUDA_MEMSET_NODE_PARAMS"));
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graph_memset = {.before = memset_before, .after = memset_after};

/* One side of a memcpy node: device memory of the client's, pinned host memory of the
 * client's (shared with the server: the node copies it whenever the graph runs, so it must
 * be memory the server sees), or one of its arrays (checked as a handle member). */
static CUresult check_node_side(struct srv_client *c, CUmemorytype type, const void *host,
                                CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch,
                                size_t height, const CUDA_MEMCPY3D *p)
{
    uint64_t base;
    switch (type) {
    case CU_MEMORYTYPE_ARRAY:
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_HOST:
        base = (uint64_t)(uintptr_t)host;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = dev;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_SUCCESS;
    struct srv_obj *o =
        srv_range_extent(c, base, x, y, z, pitch, height, p->WidthInBytes, p->Height, p->Depth);
    if (!o) return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEMORYTYPE_HOST && !srv_host_type(o->key.type)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult memcpy_before(struct srv_client *c, struct srv_call *k)
{
    const CUDA_MEMCPY3D *p = struct_param(k, "CUDA_MEMCPY3D");
    CUresult r;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_node_side(c, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                             p->srcZ, p->srcPitch, p->srcHeight, p)) != CUDA_SUCCESS)
        return r;
    return check_node_side(c, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                           p->dstZ, p->dstPitch, p->dstHeight, p);
}

/* An exec's memcpy node set anew: its launches check the new sides (graphrefs.c). */
static CUresult memcpy_after(struct srv_client *c, struct srv_call *k)
{
    if (k->id == SHIM_ID_cuGraphExecMemcpyNodeSetParams)
        srv_graphrefs_memcpy(srv_obj_find(c, SHIM_HT_CUgraphExec, k->a.val[0]), k->a.val[1],
                             struct_param(k, "CUDA_MEMCPY3D"));
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graph_memcpy = {.before = memcpy_before, .after = memcpy_after};

/* ---------------------------------------------------------------- kernel nodes */

/* The client's handle for the function a kernel node runs: the driver may give back the
 * CUkernel the client named, or the current context's CUfunction standing for it (then
 * found among the client's kernels). 0 if none of the client's. */
static uint64_t node_func(struct srv_client *c, const CUDA_KERNEL_NODE_PARAMS *kp, int *is_kernel)
{
    uint64_t f = (uint64_t)(uintptr_t)kp->func, k = (uint64_t)(uintptr_t)kp->kern;
    *is_kernel = 1;
    if (k && srv_obj_find(c, SHIM_HT_CUkernel, k)) return k;
    if (f && srv_obj_find(c, SHIM_HT_CUkernel, f)) return f;
    *is_kernel = 0;
    if (f && srv_obj_find(c, SHIM_HT_CUfunction, f)) return f;
    /* Each lookup loads the kernel's code in the context: through the gate (launch.c). */
    for (struct srv_obj *o = srv_objs_of(c, SHIM_HT_CUkernel); f && o; o = o->type_next) {
        CUfunction g = NULL;
        if (srv_kernel_loaded(c, o, c->cur ? c->cur->device : 0) != CUDA_SUCCESS) return 0;
        if (DRV(cuKernelGetFunction)(&g, (CUkernel)(uintptr_t)o->key.value) == CUDA_SUCCESS &&
            (uint64_t)(uintptr_t)g == f) {
            *is_kernel = 1;
            return o->key.value;
        }
    }
    return 0;
}

/* The parameter bytes the driver holds for a node, `bytes` of them by the layout: from its
 * kernelParams array or its `extra` buffer (the driver's memory, never the client's). */
static CUresult node_param_bytes(const CUDA_KERNEL_NODE_PARAMS *kp, const struct chan_function *f,
                                 const uint32_t (*layout)[2], uint8_t *out)
{
    memset(out, 0, f->param_bytes);
    if (kp->kernelParams) {
        for (uint32_t i = 0; i < f->nparams; i++)
            if (layout[i][1]) memcpy(out + layout[i][0], kp->kernelParams[i], layout[i][1]);
        return CUDA_SUCCESS;
    }
    const void *buf = NULL;
    size_t size = 0;
    for (int i = 0; kp->extra && kp->extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
        if (kp->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = kp->extra[i + 1];
        else if (kp->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && kp->extra[i + 1])
            size = *(const size_t *)kp->extra[i + 1];
    }
    if (!f->param_bytes) return CUDA_SUCCESS;
    if (!buf) return CUDA_ERROR_INVALID_VALUE;
    memcpy(out, buf, size < f->param_bytes ? size : f->param_bytes);
    return CUDA_SUCCESS;
}

/* CHAN_KN_GET: a node of the client's, read from the driver, packed for the client (which
 * builds its own kernelParams array over the bytes: interpose/graph.c). */
static CUresult kernel_node_get(struct srv_client *c, uint64_t node, uint32_t *out_len,
                                uint8_t *out)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUgraphNode, node);
    if (!o) return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof(kp));
    CUresult res = DRV(cuGraphKernelNodeGetParams_v2)((CUgraphNode)(uintptr_t)node, &kp);
    if (res != CUDA_SUCCESS) return res;
    struct chan_kernel_node_got g = {
        .grid = {kp.gridDimX, kp.gridDimY, kp.gridDimZ},
        .block = {kp.blockDimX, kp.blockDimY, kp.blockDimZ},
        .smem = kp.sharedMemBytes,
    };
    int is_kernel = 0;
    g.func = node_func(c, &kp, &is_kernel);
    g.is_kernel = (uint32_t)is_kernel;
    if (!g.func) return CUDA_ERROR_INVALID_HANDLE;
    for (struct srv_obj *p = o->parent; p; p = p->parent)
        if (p->key.type == SHIM_HT_CUgraph) g.root = p->key.value;
    /* The layout is described in the server's memory, then copied out: it says where the
     * parameter bytes go, and the lane is the client's to rewrite at any time. */
    struct {
        struct chan_function f;
        uint32_t layout[CHAN_MAX_PARAMS][2];
    } d;
    _Static_assert(sizeof(d) == sizeof(d.f) + sizeof(d.layout), "layout follows the function");
    _Static_assert(sizeof(g) + sizeof(d) <= CHAN_LANE_DATA, "a description fits the lane");
    uint32_t used = srv_func_describe(c, g.func, is_kernel, (uint8_t *)&d, sizeof(d), &res);
    if (!used) return res;
    uint32_t total = (uint32_t)sizeof(g) + used;
    if (d.f.param_bytes > CHAN_MAX_PARAM_BYTES || d.f.param_bytes > CHAN_LANE_DATA - total)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (uint32_t i = 0; i < d.f.nparams; i++)
        if ((uint64_t)d.layout[i][0] + d.layout[i][1] > d.f.param_bytes)
            return CUDA_ERROR_NOT_SUPPORTED;
    if ((res = node_param_bytes(&kp, &d.f, d.layout, out + total)) != CUDA_SUCCESS) return res;
    memcpy(out, &g, sizeof(g));
    memcpy(out + sizeof(g), &d, used);
    *out_len = total + d.f.param_bytes;
    return CUDA_SUCCESS;
}

void srv_op_kernel_node(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_kernel_node m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint64_t node = 0;
    struct srv_obj *graph = NULL;
    if (len < sizeof(m)) goto reply;
    memcpy(&m, p, sizeof(m));
    uint64_t deps_bytes;
    if (m.ndeps > CHAN_MAX_DEPS || m.param_bytes > CHAN_MAX_PARAM_BYTES ||
        __builtin_mul_overflow((uint64_t)m.ndeps, 8u, &deps_bytes) ||
        len != sizeof(m) + deps_bytes + m.param_bytes)
        goto reply;
    if (!c->cur && (res = srv_use_device(0)) != CUDA_SUCCESS) goto reply;
    if (m.what == CHAN_KN_GET) {
        uint32_t out_len = 0;
        res = kernel_node_get(c, m.node, &out_len, srv_lane_data(c, r->lane));
        srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out_len : 0);
        return;
    }
    /* Everything it names is the client's. */
    res = CUDA_ERROR_INVALID_HANDLE;
    if (!srv_func_known(c, m.func)) goto reply;
    if (m.what == CHAN_KN_ADD && !(graph = srv_obj_find(c, SHIM_HT_CUgraph, m.graph))) goto reply;
    if (m.what != CHAN_KN_ADD && !srv_obj_find(c, SHIM_HT_CUgraphNode, m.node)) goto reply;
    if (m.what == CHAN_KN_EXEC_SET && !srv_obj_find(c, SHIM_HT_CUgraphExec, m.graph)) goto reply;
    CUgraphNode deps[CHAN_MAX_DEPS];
    memcpy(deps, p + sizeof(m), deps_bytes);
    for (uint32_t i = 0; i < m.ndeps; i++)
        if (!srv_obj_find(c, SHIM_HT_CUgraphNode, (uint64_t)(uintptr_t)deps[i])) goto reply;
    size_t psize = m.param_bytes;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, p + sizeof(m) + deps_bytes,
                     CU_LAUNCH_PARAM_BUFFER_SIZE, &psize, CU_LAUNCH_PARAM_END};
    /* A library's kernel goes in its own member (the driver takes it for the current
     * context's function only from there). Its code is loaded in that context first,
     * through the gate: a node of a kernel not loaded there loads it, waiting in the driver
     * for every stream (launch.c). */
    struct srv_obj *kobj = srv_obj_find(c, SHIM_HT_CUkernel, m.func);
    int is_kernel = kobj != NULL;
    /* No context of the client's: the server's of device 0 is current (above). */
    if (kobj && (res = srv_kernel_loaded(c, kobj, c->cur ? c->cur->device : 0)) != CUDA_SUCCESS)
        goto reply;
    CUDA_KERNEL_NODE_PARAMS kp = {
        .func = is_kernel ? NULL : (CUfunction)(uintptr_t)m.func,
        .kern = is_kernel ? (CUkernel)(uintptr_t)m.func : NULL,
        .gridDimX = m.grid[0],
        .gridDimY = m.grid[1],
        .gridDimZ = m.grid[2],
        .blockDimX = m.block[0],
        .blockDimY = m.block[1],
        .blockDimZ = m.block[2],
        .sharedMemBytes = m.smem,
        .extra = psize ? extra : NULL,
    };
    CUgraphNode n = NULL;
    switch (m.what) {
    case CHAN_KN_ADD:
        res = DRV(cuGraphAddKernelNode_v2)(&n, (CUgraph)(uintptr_t)m.graph, deps, m.ndeps, &kp);
        node = (uint64_t)(uintptr_t)n;
        if (res == CUDA_SUCCESS && !srv_obj_add(c, SHIM_HT_CUgraphNode, node, 1, graph)) {
            DRV(cuGraphDestroyNode)(n);
            res = CUDA_ERROR_OUT_OF_MEMORY;
        }
        break;
    case CHAN_KN_SET:
        res = DRV(cuGraphKernelNodeSetParams_v2)((CUgraphNode)(uintptr_t)m.node, &kp);
        break;
    case CHAN_KN_EXEC_SET:
        res = DRV(cuGraphExecKernelNodeSetParams_v2)((CUgraphExec)(uintptr_t)m.graph,
                                                     (CUgraphNode)(uintptr_t)m.node, &kp);
        if (res == CUDA_SUCCESS) /* its launches check the new function (graphrefs.c) */
            srv_graphrefs_func(c, srv_obj_find(c, SHIM_HT_CUgraphExec, m.graph), m.node, m.func);
        break;
    default:
        res = CUDA_ERROR_INVALID_VALUE;
    }
reply:
    if (res == CUDA_SUCCESS) memcpy(srv_lane_data(c, r->lane), &node, sizeof(node));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? sizeof(node) : 0);
}

/* ---------------------------------------------------------------- graph memory */

/* Graph memory (allocation and free nodes). An allocation node's address is fixed when the
 * node is added: it becomes a `graphmem` range of the client's, so that its later calls
 * naming it (memcpy, memset and kernel nodes, copies, cuMemFreeAsync) pass the range
 * checks and another client's do not. Its bytes count against the client's limit from the
 * node's creation (the size is known then, the moment a launch allocates it is not), until
 * the record goes. The record belongs to the node's graph and outlives it (the exec, or
 * memory a launch left allocated, may still use the address): it goes when the client
 * frees the memory outside a graph once the graph is gone, or when the client leaves.
 *
 * A cuMemAllocAsync or cuMemAllocFromPoolAsync captured on a stream is an allocation node
 * the driver adds to the graph being captured (from the client's own pool's properties:
 * pools.c): the same, the record belonging to that graph's record (made, not owned, if the
 * client did not know the graph yet; the end of the capture makes it the client's). If the
 * capture fails, or its stream or client goes first, the driver destroys the graph, never
 * launched: its graph memory was never allocated, and its records go with the graph's
 * (capture_graph_gone). A captured cuMemFreeAsync is a free node, of graph memory only. */

/* The record of the graph a capture on st is building, made (not owned) if the client did
 * not know it; NULL if the capture is not active or there is no memory for the record. */
static struct srv_obj *capture_graph(struct srv_client *c, CUstream st)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph g = NULL;
    if (DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &g, NULL, NULL) != CUDA_SUCCESS ||
        status != CU_STREAM_CAPTURE_STATUS_ACTIVE || !g)
        return NULL;
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)g);
    return o ? o : srv_obj_add(c, SHIM_HT_CUgraph, (uintptr_t)g, 0, NULL);
}

/* A graphmem record's aux: its allocation is freed in its own graph, so no call outside
 * that graph may name it once the graph is gone; or its address is several graphs'
 * (graphmem_register). */
#define GRAPHMEM_FREED_IN_GRAPH 0x1u
#define GRAPHMEM_ALIASED 0x2u

/* Records left over [base, base + size) by graphs the client destroyed: the driver hands
 * an address out again only once its old allocation is gone. (Compared without computing
 * an end: no sum can overflow.) */
static void forget_stale(struct srv_client *c, uint64_t base, uint64_t size)
{
    for (struct srv_obj *o = srv_objs_of(c, SHIM_HT_MEM_GRAPHMEM), *next; o; o = next) {
        next = o->type_next;
        if (!o->parent && !(o->aux & GRAPHMEM_ALIASED) &&
            (o->key.value - base < size || base - o->key.value < o->size))
            srv_obj_destroyed(c, o);
    }
}

/* The client's graph memory record holding address a: the one made at a, or an aliased
 * one running over it. */
static struct srv_obj *graphmem_at(struct srv_client *c, uint64_t a)
{
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_MEM_GRAPHMEM, a);
    if (!o && (o = srv_range_find(c, a, 1)) &&
        (o->key.type != SHIM_HT_MEM_GRAPHMEM || !(o->aux & GRAPHMEM_ALIASED)))
        o = NULL;
    return o;
}

/* Registers graph memory [dptr, dptr + bytes) of graph g (NULL: none known). The driver
 * gives one address to allocations of several graphs, mapping it for each at its own
 * launches (PyTorch, capturing one graph after another, had an allocation of the second at the
 * address of one of the first, which the first frees in itself: bench/NOTES.md, "Graph memory
 * addresses"). Such an address is one record, the union of the allocations over it, that
 * belongs to the client rather than to any graph: each graph's launches still find it,
 * whichever graph goes first, and it stays until the client leaves (a free of it outside a
 * graph keeps the record, as for the address of a graph that lives: srv_graphmem_keep). Its
 * bytes count once. NULL when out of memory, or when it overlaps memory other than graph
 * memory. */
static struct srv_obj *graphmem_register(struct srv_client *c, uint64_t dptr, uint64_t bytes,
                                         struct srv_obj *g)
{
    uint64_t lo = dptr, hi;
    if (__builtin_add_overflow(dptr, bytes, &hi)) return NULL;
    forget_stale(c, dptr, bytes);
    struct srv_obj *o = srv_range_add(c, SHIM_HT_MEM_GRAPHMEM, dptr, bytes, 1, g);
    if (o && (o->parent == g || (o->aux & GRAPHMEM_ALIASED))) return o;
    /* Another graph's allocation over some of it: the union of every one overlapping. */
    int others = 0;
    for (struct srv_obj *r = srv_objs_of(c, SHIM_HT_MEM_GRAPHMEM); r; r = r->type_next)
        if (r->key.value - dptr < bytes || dptr - r->key.value < r->size) {
            lo = r->key.value < lo ? r->key.value : lo;
            hi = r->key.value + r->size > hi ? r->key.value + r->size : hi;
            others = 1;
        }
    if (!others) return NULL; /* what it overlaps is not graph memory, or no memory for a record */
    for (struct srv_obj *r = srv_objs_of(c, SHIM_HT_MEM_GRAPHMEM), *next; r; r = next) {
        next = r->type_next;
        if (r->key.value - lo < hi - lo)
            srv_obj_destroyed(c, r); /* its exec's launches find the union (graphrefs.c) */
    }
    if (!(o = srv_range_add(c, SHIM_HT_MEM_GRAPHMEM, lo, hi - lo, 1, NULL))) return NULL;
    o->aux |= GRAPHMEM_ALIASED;
    return o;
}

/* One line for graph memory the server could not register, and why: the range of the
 * client's it overlaps, or no active capture on its stream, or no memory for the record. */
static void graphmem_refused(struct srv_client *c, uint64_t dptr, uint64_t bytes, int captured,
                             int capturing)
{
    const struct srv_range *e = chan_ranges_find(&c->ranges, dptr, bytes ? bytes : 1);
    char why[160];
    if (e)
        snprintf(why, sizeof(why), "overlaps its %s at 0x%llx (%llu bytes)",
                 shim_types[e->obj->key.type].name, (unsigned long long)e->r.base,
                 (unsigned long long)e->r.size);
    else
        snprintf(why, sizeof(why), "%s",
                 capturing ? "no memory for its record" : "the driver shows no capture on it");
    srv_log("Client process %d: graph memory at 0x%llx (%llu bytes, %s) not registered: %s; "
            "CUDA_ERROR_OUT_OF_MEMORY",
            (int)c->pid, (unsigned long long)dptr, (unsigned long long)bytes,
            captured ? "a captured allocation" : "an allocation node", why);
}

static CUresult graphmem_alloc_call(struct srv_client *c, struct srv_call *k)
{
    CUDA_MEM_ALLOC_NODE_PARAMS *p = k->a.ptr[4];
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    /* Device memory of one of the client's devices, as pools are (pools.c). */
    if (p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_NOT_SUPPORTED;
    int client_dev = p->poolProps.location.id, dev = srv_dev_in(c, client_dev);
    if (dev < 0) return CUDA_ERROR_INVALID_VALUE;
    if (!srv_mem_fits(c, dev, p->bytesize)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUDA_MEM_ALLOC_NODE_PARAMS q = *p;
    q.poolProps.location.id = dev;
    CUgraphNode *out = k->a.ptr[0];
    CUresult r = DRV(cuGraphAddMemAllocNode)(out, (CUgraph)(uintptr_t)k->vals[1],
                                             (const CUgraphNode *)(uintptr_t)k->vals[2],
                                             (size_t)k->vals[3], &q);
    if (r == CUDA_SUCCESS) {
        p->dptr = q.dptr;
        k->dev = dev;
    }
    return r;
}

/* The node is registered: its range now, belonging to its graph; without room for it the
 * node goes again. */
static CUresult graphmem_alloc_after(struct srv_client *c, struct srv_call *k)
{
    const CUDA_MEM_ALLOC_NODE_PARAMS *p = k->a.ptr[4];
    uint64_t node = *(const uint64_t *)k->a.ptr[0];
    struct srv_obj *g = srv_obj_find(c, SHIM_HT_CUgraph, k->a.val[1]);
    struct srv_obj *o = graphmem_register(c, p->dptr, p->bytesize, g);
    if (!o) {
        graphmem_refused(c, p->dptr, p->bytesize, 0, 1);
        struct srv_obj *n = srv_obj_find(c, SHIM_HT_CUgraphNode, node);
        DRV(cuGraphDestroyNode)((CUgraphNode)(uintptr_t)node);
        if (n) srv_obj_destroyed(c, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    srv_obj_count(c, o, k->dev, o->size);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graphmem_alloc = {.call = graphmem_alloc_call,
                                                 .after = graphmem_alloc_after};

/* What a free node frees is an allocation node's address of the client's. */
static CUresult graphmem_free_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = graphmem_at(c, k->a.val[4]);
    if (!o) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult graphmem_free_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *o = graphmem_at(c, k->a.val[4]);
    if (o && o->parent && o->parent->key.value == k->a.val[1]) o->aux |= GRAPHMEM_FREED_IN_GRAPH;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graphmem_free = {.before = graphmem_free_before,
                                                .after = graphmem_free_after};

CUresult srv_graphmem_captured(struct srv_client *c, struct srv_stream *s, int dev, uint64_t dptr,
                               uint64_t bytes)
{
    if (!dptr) return CUDA_SUCCESS; /* nothing allocated (0 bytes): no node */
    struct srv_obj *g = capture_graph(c, s->real), *o = NULL;
    if (g) o = graphmem_register(c, dptr, bytes, g);
    if (!o) {
        graphmem_refused(c, dptr, bytes, 1, g != NULL);
        /* The node cannot be taken out of a graph being captured, and an address the
         * server does not know must not run in the client's graph: the capture is made to
         * fail (a query of a capturing stream invalidates it), and its end says so. */
        (void)DRV(cuStreamQuery)(s->real);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    srv_obj_count(c, o, dev, o->size);
    return CUDA_SUCCESS;
}

/* The driver documents that a captured free must name a graph allocation. Ordinary memory
 * is refused before the driver sees it (INVALID_VALUE, the driver's answer; logged once):
 * a free node of it would free, at each launch, memory the server still counts as the
 * client's and would free again when it leaves. So is graph memory of another capture
 * still going: if that one failed, its address would be the driver's to give anyone while
 * this graph still frees it. The record of graph memory stays (its address stays its
 * graph's); freed in its own graph, it goes with that graph. */
CUresult srv_graphmem_capture_free(struct srv_client *c, struct srv_call *k)
{
    uint64_t dptr = k->vals[0];
    CUstream st = (CUstream)(uintptr_t)k->vals[1];
    struct srv_obj *o = dptr ? graphmem_at(c, dptr) : NULL;
    CUstreamCaptureStatus status;
    CUgraph g = NULL;
    if (o && o->parent && !o->parent->owned &&
        (DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &g, NULL, NULL) != CUDA_SUCCESS ||
         o->parent->key.value != (uintptr_t)g))
        o = NULL;
    if (dptr && !o) {
        static atomic_int said;
        if (!atomic_exchange(&said, 1))
            srv_log("Client process %d: cuMemFreeAsync in a stream capture of memory that is "
                    "not graph memory (or is another capture's): refused (the driver takes "
                    "graph allocations only)",
                    (int)c->pid);
        return CUDA_ERROR_INVALID_VALUE;
    }
    k->keep = 1;
    CUresult r = DRV(cuMemFreeAsync)((CUdeviceptr)dptr, st);
    if (r == CUDA_SUCCESS && o && o->parent &&
        DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &g, NULL, NULL) == CUDA_SUCCESS && g &&
        o->parent->key.value == (uintptr_t)g)
        o->aux |= GRAPHMEM_FREED_IN_GRAPH;
    return r;
}

/* A destroyed graph's allocations freed in the graph go with it (their exec, if any, uses
 * them only between its own nodes); the others outlive it (registry: outlives-parent). */
static CUresult graphmem_graph_destroy_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *g = srv_obj_find(c, SHIM_HT_CUgraph, k->a.val[0]);
    for (struct srv_obj *o = g ? g->children : NULL, *next; o; o = next) {
        next = o->sib_next;
        if (o->key.type == SHIM_HT_MEM_GRAPHMEM && (o->aux & GRAPHMEM_FREED_IN_GRAPH))
            srv_obj_destroyed(c, o);
    }
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graphmem_graph_destroy = {.after = graphmem_graph_destroy_after};

/* The driver's access descriptors are its memory (not given back: none are carried in),
 * and the device is the client's ordinal. */
static CUresult graphmem_get_after(struct srv_client *c, struct srv_call *k)
{
    CUDA_MEM_ALLOC_NODE_PARAMS *p = k->a.ptr[1];
    p->accessDescs = NULL;
    p->accessDescCount = 0;
    if (p->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        p->poolProps.location.id = srv_dev_out(c, p->poolProps.location.id);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graphmem_get = {.after = graphmem_get_after};

/* The high-water marks are the device's, shared by every client of the one context:
 * resetting one would change what every other client reads. Allowed while the caller is
 * the server's only client; refused otherwise (NOT_PERMITTED, logged once). Trimming is
 * left to the driver: it releases only graph memory that no graph holds allocated. */
static CUresult graphmem_set_attr_before(struct srv_client *c, struct srv_call *k)
{
    (void)k;
    static atomic_int said;
    if (srv_clients_live() <= 1) return CUDA_SUCCESS;
    if (!atomic_exchange(&said, 1))
        srv_log("Client process %d: cuDeviceSetGraphMemAttribute refused: the graph memory "
                "high-water marks are shared by every client of the device",
                (int)c->pid);
    return CUDA_ERROR_NOT_PERMITTED;
}

const struct srv_hook srv_hook_graphmem_set_attr = {.before = graphmem_set_attr_before};

/* A departing client's graph memory: freed if a launch left it allocated. Only while its
 * graph lives (the address is then surely still this client's, so the free can touch no
 * other memory; released before the graph, as a child that outlives it); the driver
 * answers INVALID_VALUE for memory not allocated, which is fine. Memory left allocated by
 * a graph the client already destroyed stays with the driver's graph pool. A graph the
 * client does not own is one a capture was building: never launched, nothing allocated,
 * and its stream's release may already have destroyed it (the address may be another's). */
void srv_release_graphmem(struct srv_client *c, struct srv_obj *o)
{
    (void)c;
    if (o->parent && o->parent->owned) (void)DRV(cuMemFree_v2)((CUdeviceptr)o->key.value);
}

/* 1 if o is an aliased graph memory record: allocations of several graphs over one
 * address, each freed by its own address, which may lie inside it (generic.c's check of
 * a freed address). */
int srv_graphmem_aliased(const struct srv_obj *o)
{
    return o->key.type == SHIM_HT_MEM_GRAPHMEM && (o->aux & GRAPHMEM_ALIASED);
}

/* cuMemFree/cuMemFreeAsync of graph memory (ipc.c): the address stays the client's while
 * its graph holds the node. */
int srv_graphmem_keep(struct srv_client *c, uint64_t dptr)
{
    struct srv_obj *o = graphmem_at(c, dptr);
    return o && (o->parent || (o->aux & GRAPHMEM_ALIASED));
}

/* A stream that goes with a capture left going ends it (not one that died in a fault). */
static void graph_stream_gone(struct srv_client *c, struct srv_stream *s, int dead)
{
    if (!dead) srv_capture_abandon(c, s, 0);
}

/* The client destroys s: its capture's graph and what the client held in it go now, records
 * included. */
static void graph_stream_destroyed(struct srv_client *c, struct srv_stream *s)
{
    srv_capture_abandon(c, s, 1);
}

const struct srv_family srv_family_graph = {.name = "graph",
                                            .ctx_quiesce = srv_captures_abandon,
                                            .stream_destroyed = graph_stream_destroyed,
                                            .stream_gone = graph_stream_gone};
