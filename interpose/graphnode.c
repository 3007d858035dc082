/* The generic node-parameter forms of CUDA graphs (cuGraphAddNode, cuGraphNodeSetParams,
 * cuGraphExecNodeSetParams: cudart 12.3+'s cudaGraphAddNode and friends). Each
 * CUgraphNodeParams is translated here into the typed call the shim already carries (kernel
 * nodes to interpose/graph.c's packed path, host nodes to hostfn.c's, the rest to their
 * described calls), so the server sees nothing new and checks what it always checks.
 * Conditional nodes, which no typed call stands for, have an operation of their own
 * (CHAN_OP_COND_NODE, server/graphs/graphcond.c); their parameters cannot be changed here. The
 * node types the shim does not carry (batch memory operations, external semaphores) are
 * refused with CUDA_ERROR_NOT_SUPPORTED and one line naming the type. Non-default edge
 * data is added after the node, by cuGraphAddDependencies_v2. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* What the shim does not carry, one message per type (shim_refuse reports each once). */
static CUresult refuse_type(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
        return shim_refuse("graph nodes of type EXT_SEMAS_SIGNAL (external semaphores)");
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        return shim_refuse("graph nodes of type EXT_SEMAS_WAIT (external semaphores)");
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        return shim_refuse("graph nodes of type BATCH_MEM_OP (batch memory operations)");
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return shim_refuse("setting the parameters of a CONDITIONAL graph node");
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The reserved members must be zero (the driver refuses the rest with INVALID_VALUE), and
 * so must a memcpy member's flags and reserved word. */
static CUresult check_params(const CUgraphNodeParams *p)
{
    if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2] || p->reserved2)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY && (p->memcpy.flags || p->memcpy.reserved))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUDA_KERNEL_NODE_PARAMS kernel_typed(const CUDA_KERNEL_NODE_PARAMS_v3 *p)
{
    CUDA_KERNEL_NODE_PARAMS q = {
        .func = p->func,
        .gridDimX = p->gridDimX,
        .gridDimY = p->gridDimY,
        .gridDimZ = p->gridDimZ,
        .blockDimX = p->blockDimX,
        .blockDimY = p->blockDimY,
        .blockDimZ = p->blockDimZ,
        .sharedMemBytes = p->sharedMemBytes,
        .kernelParams = p->kernelParams,
        .extra = p->extra,
        .kern = p->kern,
        .ctx = p->ctx,
    };
    return q;
}

static CUDA_MEMSET_NODE_PARAMS memset_typed(const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    CUDA_MEMSET_NODE_PARAMS q = {
        .dst = p->dst,
        .pitch = p->pitch,
        .value = p->value,
        .elementSize = p->elementSize,
        .width = p->width,
        .height = p->height,
    };
    return q;
}

/* The context a node's work is made in, for the typed calls that take none: `ctx` is
 * made current around them (contexts are the client's own: nothing crosses for that). */
static CUresult ctx_enter(CUcontext ctx, int *pushed)
{
    CUcontext cur = NULL;
    *pushed = 0;
    if (!ctx || (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)) return CUDA_SUCCESS;
    CUresult r = cuCtxPushCurrent_v2(ctx);
    *pushed = r == CUDA_SUCCESS;
    return r;
}

static void ctx_leave(int pushed)
{
    CUcontext c;
    if (pushed) cuCtxPopCurrent_v2(&c);
}

/* ---------------------------------------------------------------- conditional nodes */

/* A conditional node's body graphs as the caller sees them: an array the driver's API says
 * is the driver's, valid while the node lives. Kept here, one record per node, until the node
 * or the outermost graph it lies in is destroyed (interpose/graph.c's hooks). */
struct cond_bodies {
    uint64_t node;
    uint64_t root;
    CUgraph *bodies;
    UT_hash_handle hh;
};

/* Guarded by cond_lock. */
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cond_bodies *cond_all;

void shim_cond_forget(uint64_t node, uint64_t root)
{
    struct cond_bodies *b, *tmp;
    pthread_mutex_lock(&cond_lock);
    HASH_ITER(hh, cond_all, b, tmp) {
        if ((node && b->node == node) || (root && b->root == root)) {
            HASH_DEL(cond_all, b);
            free(b->bodies);
            free(b);
        }
    }
    pthread_mutex_unlock(&cond_lock);
}

/* Adds a conditional node; its bodies go in p->phGraph_out. */
static CUresult cond_add(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                         CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (ndeps > CHAN_MAX_DEPS) return shim_refuse("graph nodes with more than 256 dependencies");
    if (p->size > CHAN_MAX_COND_BODIES)
        return shim_refuse("conditional graph nodes with more than 256 bodies");
    struct chan_cond_node m = {.graph = (uint64_t)(uintptr_t)g,
                               .handle = p->handle,
                               .type = (uint32_t)p->type,
                               .size = p->size,
                               .ndeps = (uint32_t)ndeps};
    if (p->ctx && (r = shim_ctx_lookup(p->ctx, &m.ctx, NULL)) != CUDA_SUCCESS) return r;
    size_t len = sizeof(m) + ndeps * sizeof(uint64_t);
    uint8_t *buf = malloc(len);
    struct cond_bodies *b = calloc(1, sizeof(*b));
    CUgraph *bodies = calloc(p->size ? p->size : 1, sizeof(*bodies));
    if (!buf || !b || !bodies) {
        free(buf);
        free(b);
        free(bodies);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(buf, &m, sizeof(m));
    for (size_t i = 0; i < ndeps; i++) {
        uint64_t d = (uint64_t)(uintptr_t)deps[i];
        memcpy(buf + sizeof(m) + i * sizeof(d), &d, sizeof(d));
    }
    const uint8_t *data;
    uint32_t got = 0;
    struct chan_cond_node_made made;
    r = shim_rpc_lane(CHAN_OP_COND_NODE, buf, (uint32_t)len, &data, &got);
    free(buf);
    if (r == CUDA_SUCCESS && got != sizeof(made) + (uint64_t)p->size * 8)
        r = CUDA_ERROR_UNKNOWN; /* a reply the server never sends */
    if (r != CUDA_SUCCESS) {
        free(b);
        free(bodies);
        return r;
    }
    memcpy(&made, data, sizeof(made));
    for (unsigned i = 0; i < p->size; i++) {
        uint64_t v;
        memcpy(&v, data + sizeof(made) + (size_t)i * 8, 8);
        bodies[i] = (CUgraph)(uintptr_t)v;
    }
    b->node = made.node;
    b->root = made.root;
    b->bodies = bodies;
    pthread_mutex_lock(&cond_lock);
    HASH_ADD(hh, cond_all, node, sizeof(b->node), b);
    pthread_mutex_unlock(&cond_lock);
    p->phGraph_out = bodies;
    *out = (CUgraphNode)(uintptr_t)made.node;
    return CUDA_SUCCESS;
}

/* Adds the node by its typed call, after ndeps default edges. */
static CUresult add_typed(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                          CUgraphNodeParams *p)
{
    CUresult r;
    int pushed;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS q = kernel_typed(&p->kernel);
        /* A kernel runs in ctx when given (the driver ignores it beside a function). */
        if ((r = ctx_enter(q.func ? NULL : q.ctx, &pushed)) != CUDA_SUCCESS) return r;
        r = cuGraphAddKernelNode_v2(out, g, deps, ndeps, &q);
        ctx_leave(pushed);
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphAddMemcpyNode(out, g, deps, ndeps, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS q = memset_typed(&p->memset);
        return cuGraphAddMemsetNode(out, g, deps, ndeps, &q, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS q = {.fn = p->host.fn, .userData = p->host.userData};
        return cuGraphAddHostNode(out, g, deps, ndeps, &q);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
            return shim_refuse("child graph nodes that take the graph "
                               "(CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)");
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return CUDA_ERROR_INVALID_VALUE;
        return cuGraphAddChildGraphNode(out, g, deps, ndeps, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(out, g, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphAddEventWaitNode(out, g, deps, ndeps, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphAddEventRecordNode(out, g, deps, ndeps, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        /* The address the node gets is given back in the caller's parameters. */
        CUDA_MEM_ALLOC_NODE_PARAMS q = {.poolProps = p->alloc.poolProps,
                                        .accessDescs = p->alloc.accessDescs,
                                        .accessDescCount = p->alloc.accessDescCount,
                                        .bytesize = p->alloc.bytesize};
        if ((r = cuGraphAddMemAllocNode(out, g, deps, ndeps, &q)) == CUDA_SUCCESS)
            p->alloc.dptr = q.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cuGraphAddMemFreeNode(out, g, deps, ndeps, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return cond_add(out, g, deps, ndeps, &p->conditional);
    default:
        return refuse_type(p->type);
    }
}

/* 1 if every edge's data is the default (all zero), as a NULL array means. */
static int edges_default(const CUgraphEdgeData *e, size_t n)
{
    static const CUgraphEdgeData zero;
    for (size_t i = 0; e && i < n; i++)
        if (memcmp(&e[i], &zero, sizeof(zero)) != 0) return 0;
    return 1;
}

static CUresult add_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                         const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
    CUresult r = check_params(p);
    if (r != CUDA_SUCCESS) return r;
    if (!out || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    if (edges_default(edges, ndeps)) return add_typed(out, g, deps, ndeps, p);
    /* Edges with data: the node first, then its edges, which the driver checks (the node
     * goes again if they fail). */
    CUgraphNode n = NULL;
    if ((r = add_typed(&n, g, NULL, 0, p)) != CUDA_SUCCESS) return r;
    CUgraphNode *to = malloc(ndeps * sizeof(*to));
    if (!to) {
        cuGraphDestroyNode(n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < ndeps; i++)
        to[i] = n;
    r = cuGraphAddDependencies_v2(g, deps, to, edges, ndeps);
    free(to);
    if (r != CUDA_SUCCESS) {
        cuGraphDestroyNode(n);
        return r;
    }
    *out = n;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuGraphAddNode_v2)(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies,
                                      const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                      CUgraphNodeParams *nodeParams)
{
    return add_node(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams);
}

CUresult SHIM_IMPL(cuGraphAddNode)(CUgraphNode *phGraphNode, CUgraph hGraph,
                                   const CUgraphNode *dependencies, size_t numDependencies,
                                   CUgraphNodeParams *nodeParams)
{
    return add_node(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

/* The node's type must be the parameters' (INVALID_VALUE otherwise, as with the driver). */
static CUresult check_type(CUgraphNode node, CUgraphNodeType want)
{
    CUgraphNodeType t;
    CUresult r = cuGraphNodeGetType(node, &t);
    if (r != CUDA_SUCCESS) return r;
    return t == want ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult SHIM_IMPL(cuGraphNodeSetParams)(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    const CUgraphNodeParams *p = nodeParams;
    CUresult r = check_params(p);
    if (r != CUDA_SUCCESS) return r;
    if (p->type > CU_GRAPH_NODE_TYPE_EVENT_RECORD) return refuse_type(p->type);
    if ((r = check_type(hNode, p->type)) != CUDA_SUCCESS) return r;
    int pushed;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS q = kernel_typed(&p->kernel);
        if ((r = ctx_enter(q.func ? NULL : q.ctx, &pushed)) != CUDA_SUCCESS) return r;
        r = cuGraphKernelNodeSetParams_v2(hNode, &q);
        ctx_leave(pushed);
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if ((r = ctx_enter(p->memcpy.copyCtx, &pushed)) != CUDA_SUCCESS) return r;
        r = cuGraphMemcpyNodeSetParams(hNode, &p->memcpy.copyParams);
        ctx_leave(pushed);
        return r;
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS q = memset_typed(&p->memset);
        if ((r = ctx_enter(p->memset.ctx, &pushed)) != CUDA_SUCCESS) return r;
        r = cuGraphMemsetNodeSetParams(hNode, &q);
        ctx_leave(pushed);
        return r;
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS q = {.fn = p->host.fn, .userData = p->host.userData};
        return cuGraphHostNodeSetParams(hNode, &q);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        /* No typed call replaces a child graph in a graph (only in an exec). */
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return CUDA_ERROR_INVALID_VALUE;
        return shim_refuse("cuGraphNodeSetParams of a child graph node");
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return CUDA_SUCCESS; /* nothing to set */
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphEventWaitNodeSetEvent(hNode, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphEventRecordNodeSetEvent(hNode, p->eventRecord.event);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult SHIM_IMPL(cuGraphExecNodeSetParams)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                             CUgraphNodeParams *nodeParams)
{
    const CUgraphNodeParams *p = nodeParams;
    CUresult r = check_params(p);
    if (r != CUDA_SUCCESS) return r;
    int pushed;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS q = kernel_typed(&p->kernel);
        if ((r = ctx_enter(q.func ? NULL : q.ctx, &pushed)) != CUDA_SUCCESS) return r;
        r = cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &q);
        ctx_leave(pushed);
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &p->memcpy.copyParams,
                                              p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS q = memset_typed(&p->memset);
        return cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &q, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS q = {.fn = p->host.fn, .userData = p->host.userData};
        return cuGraphExecHostNodeSetParams(hGraphExec, hNode, &q);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY: {
        /* Nothing to set: the exec and the node must still be what they say. */
        cuuint64_t flags;
        if ((r = cuGraphExecGetFlags(hGraphExec, &flags)) != CUDA_SUCCESS) return r;
        return check_type(hNode, CU_GRAPH_NODE_TYPE_EMPTY);
    }
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, p->eventRecord.event);
    default:
        return refuse_type(p->type);
    }
}
