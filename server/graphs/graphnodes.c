/* Graph nodes, described in cuda_symbols.txt; what no description can say is here: the
 * checks of memset and memcpy nodes, kernel nodes (the KERNEL_NODE operation) and the path of
 * cuGraphDebugDotPrint. Graphs, nodes and execs are the client's registry objects: nodes die
 * with their graph, graphs and execs with the client. Kernel nodes are hand-written (their
 * parameters are packed by the client, which alone knows each function's layout, and travel
 * as the `extra` buffer, and are read back packed by the layout the server reads from the
 * driver); memset and memcpy nodes name memory, which must be the client's. Host nodes (the
 * client's function, run on each replay) are hostfn.c's; graph memory nodes graphmem.c's. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/memory/devmem.h"
#include "server/graphs/graphrefs.h"
#include "server/code/launch.h"
#include "server/code/module.h"

#include <stdio.h>
#include <string.h>
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
    int linear = srv_memcpy_side_base(type, host, dev, &base);
    if (linear <= 0) return linear == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_SUCCESS;
    struct srv_obj *o =
        srv_range_extent(c, base, x, y, z, pitch, height, p->WidthInBytes, p->Height, p->Depth);
    if (!o) return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEMORYTYPE_HOST && !srv_host_type(o->key.type)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A checked host side naming migrating managed memory names device memory here (migrate.c):
 * the driver is told so. */
static void host_to_device(struct srv_client *c, CUmemorytype *type, const void *host,
                           CUdeviceptr *dev)
{
    if (*type != CU_MEMORYTYPE_HOST) return;
    if (srv_migrating(srv_range_find(c, (uint64_t)(uintptr_t)host, 1))) {
        *type = CU_MEMORYTYPE_DEVICE;
        *dev = (CUdeviceptr)(uintptr_t)host;
    }
}

static CUresult memcpy_before(struct srv_client *c, struct srv_call *k)
{
    const CUDA_MEMCPY3D *p = struct_param(k, "CUDA_MEMCPY3D");
    CUresult r;
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_node_side(c, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                             p->srcZ, p->srcPitch, p->srcHeight, p)) != CUDA_SUCCESS ||
        (r = check_node_side(c, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                             p->dstZ, p->dstPitch, p->dstHeight, p)) != CUDA_SUCCESS)
        return r;
    CUDA_MEMCPY3D *w = (CUDA_MEMCPY3D *)p; /* the record's private copy, which the driver gets */
    host_to_device(c, &w->srcMemoryType, w->srcHost, &w->srcDevice);
    host_to_device(c, &w->dstMemoryType, w->dstHost, &w->dstDevice);
    return CUDA_SUCCESS;
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
    (void)len; /* its dependencies and parameters end it (its %payload line) */
    memcpy(&m, p, sizeof(m));
    size_t deps_bytes = (size_t)m.ndeps * sizeof(uint64_t);
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
    }
reply:
    if (res == CUDA_SUCCESS) memcpy(srv_lane_data(c, r->lane), &node, sizeof(node));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? sizeof(node) : 0);
}
