// Graph nodes by type: adding kernel, memcpy, memset, host, child graph, empty, event,
// batch mem-op and conditional nodes, by their typed calls or the generic CUgraphNodeParams
// form, and their parameters (validated like the stream calls they stand for, copied when
// set: a kernel node keeps its own copy of the arguments, as the driver does); kernel node
// attributes. A conditional node makes its body graphs, which it owns as a child graph node
// owns its graph; its parameters cannot be changed.
//
// Memory allocation and free nodes are graphmem.c's (captured stream-ordered allocations
// and frees become them too: capture.c). External semaphore nodes are not implemented:
// adding one returns CUDA_ERROR_NOT_SUPPORTED.
#include "graph.h"

#include <stdlib.h>
#include <string.h>

// The node type's name as the driver's DOT output writes it ("KERNEL", "MEMCPY"...).
const char *cpudrv_gnode_type_name(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST:
        return "HOST";
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return "GRAPH";
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return "EMPTY";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        return "BATCH_MEM_OP";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return "MEM_ALLOC";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return "MEM_FREE";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return "CONDITIONAL";
    default:
        return "UNKNOWN";
    }
}

// Points kp and the extra form at k's own argument copy.
static void args_views(struct cpudrv_kparams *k)
{
    for (unsigned i = 0; i < k->f->nparams; i++)
        k->kp[i] = k->args + k->f->params[i].off;
    k->xsize = k->f->argbytes;
    k->xv[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    k->xv[1] = k->args;
    k->xv[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    k->xv[3] = &k->xsize;
    k->xv[4] = CU_LAUNCH_PARAM_END;
}

// Room for f's arguments and their views; on success k's old buffers are the caller's to
// free (swap).
static CUresult args_alloc(struct cpudrv_kparams *k, const struct cpudrv_func *f)
{
    k->args = calloc(1, f->argbytes ? f->argbytes : 1);
    k->kp = calloc(f->nparams ? f->nparams : 1, sizeof *k->kp);
    if (k->args && k->kp) return CUDA_SUCCESS;
    free(k->args);
    free(k->kp);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

// Releases what a node's parameters hold (references, copies, a child graph).
void cpudrv_gnode_params_free(struct cpudrv_gnode *n)
{
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        if (n->u.k.f) cpudrv_obj_put(&n->u.k.f->mod->o);
        free(n->u.k.args);
        free(n->u.k.kp);
        free(n->u.k.attr);
        break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        if (n->u.ev) cpudrv_obj_put(&n->u.ev->o);
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (n->u.child) cpudrv_graph_destroy(n->u.child);
        break;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        free(n->u.b.ops);
        break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        if (n->u.gm) cpudrv_gmem_put(n->u.gm);
        break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        for (unsigned i = 0; n->u.c.body && i < n->u.c.size; i++)
            if (n->u.c.body[i]) cpudrv_graph_destroy(n->u.c.body[i]);
        free(n->u.c.body);
        break;
    default:
        break;
    }
    memset(&n->u, 0, sizeof n->u);
}

// Replaces n's kernel parameters by k (whose function's module gets a reference); new
// parameters (k->attr NULL) keep the node's attributes.
static void kernel_commit(struct cpudrv_gnode *n, struct cpudrv_kparams *k)
{
    cpudrv_obj_ref(&k->f->mod->o);
    if (!k->attr && n->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        k->attr = n->u.k.attr;
        n->u.k.attr = NULL;
    }
    cpudrv_gnode_params_free(n);
    n->u.k = *k;
    args_views(&n->u.k);
}

// Set a node's parameters from the caller's (validated; the previous ones are released
// only on success). cur: the calling thread's context, or NULL.
CUresult cpudrv_gnode_set_kernel(struct cpudrv_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p,
                                 struct cpudrv_ctx *cur)
{
    (void)cur; // a library kernel runs in the context of the stream it is launched on
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_kparams k;
    memset(&k, 0, sizeof k);
    k.kern = !p->func;
    k.handle = p->func ? (const void *)p->func : (const void *)p->kern;
    k.ctx = p->func ? NULL : p->ctx;
    k.f = cpudrv_func_find(k.handle);
    if (!k.f || (k.kern && !cpudrv_kernel_find(k.handle))) return CUDA_ERROR_INVALID_VALUE;
    // A library's CUkernel must come as `kern`: the real driver refuses it as `func` (an
    // H200, 580.159.04), though a launch takes it as a function.
    if (!k.kern && cpudrv_kernel_find(k.handle)) return CUDA_ERROR_INVALID_HANDLE;
    k.grid[0] = p->gridDimX;
    k.grid[1] = p->gridDimY;
    k.grid[2] = p->gridDimZ;
    k.block[0] = p->blockDimX;
    k.block[1] = p->blockDimY;
    k.block[2] = p->blockDimZ;
    k.shmem = p->sharedMemBytes;
    CUresult rc = cpudrv_launch_check(k.f, k.grid, k.block, k.shmem, 0);
    if (!rc) rc = args_alloc(&k, k.f);
    if (rc) return rc;
    rc = cpudrv_launch_pack(k.f, p->kernelParams, p->extra, k.args);
    if (rc) {
        free(k.args);
        free(k.kp);
        return rc;
    }
    k.extra = p->extra != NULL;
    kernel_commit(n, &k);
    return CUDA_SUCCESS;
}

// A kernel node's parameters from a launch already validated (captured launches).
CUresult cpudrv_gnode_set_launch(struct cpudrv_gnode *n, const struct cpudrv_launch *L,
                                 const void *handle)
{
    struct cpudrv_kparams k;
    memset(&k, 0, sizeof k);
    k.handle = handle;
    k.kern = cpudrv_kernel_find(handle) != NULL;
    k.f = (struct cpudrv_func *)L->f;
    memcpy(k.grid, L->grid, sizeof k.grid);
    memcpy(k.block, L->block, sizeof k.block);
    k.shmem = L->shmem;
    CUresult rc = args_alloc(&k, k.f);
    if (rc) return rc;
    memcpy(k.args, L->args, k.f->argbytes);
    kernel_commit(n, &k);
    return CUDA_SUCCESS;
}

// cpudrv_big held: the context a memcpy or memset node runs in (NULL: the current one).
static CUresult node_ctx(CUcontext ctx, struct cpudrv_ctx *cur, CUcontext *out)
{
    struct cpudrv_ctx *c;
    if (!ctx) {
        if (!cur) return CUDA_ERROR_INVALID_CONTEXT;
        *out = (CUcontext)cur;
        return CUDA_SUCCESS;
    }
    CUresult rc = cpudrv_ctx_find(ctx, &c);
    if (!rc) *out = ctx;
    return rc;
}

CUresult cpudrv_gnode_set_memcpy(struct cpudrv_gnode *n, const CUDA_MEMCPY3D *p, CUcontext ctx,
                                 struct cpudrv_ctx *cur)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_xfer x;
    struct cpudrv_array *sa, *da;
    int scls, dcls;
    CUcontext c;
    CUresult rc = cpudrv_copy3d_resolve(p, &x, &scls, &dcls, &sa, &da);
    // A copy of nothing is no operation a node can stand for.
    if (!rc && !x.width) rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) rc = node_ctx(ctx, cur, &c);
    if (rc) return rc;
    cpudrv_gnode_params_free(n);
    n->u.m.p = *p;
    n->u.m.ctx = c;
    return CUDA_SUCCESS;
}

CUresult cpudrv_gnode_set_memset(struct cpudrv_gnode *n, const CUDA_MEMSET_NODE_PARAMS *p,
                                 CUcontext ctx, struct cpudrv_ctx *cur)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->width ||
        !p->height)
        return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_fill f = {(unsigned char *)(uintptr_t)p->dst,
                            p->pitch,
                            p->width,
                            p->height,
                            p->elementSize,
                            p->value};
    CUcontext c;
    CUresult rc = cpudrv_fill_check(&f);
    // Given no context, the driver takes the memory's: memory of a pool or of cuMemMap has
    // none, and the node is refused (driver 580 on an H200, both kinds).
    const struct cpudrv_range *r = ctx ? NULL : cpudrv_mem_find((uintptr_t)p->dst);
    if (!rc && r && (r->type == CPUDRV_MEM_MAPPED || (r->type == CPUDRV_MEM_DEVICE && !r->ctx)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) rc = node_ctx(ctx, cur, &c);
    if (rc) return rc;
    cpudrv_gnode_params_free(n);
    n->u.s.p = *p;
    n->u.s.ctx = c;
    return CUDA_SUCCESS;
}

// Batch mem-op parameters: valid operations (as the stream calls take them), flags 0, a
// context (the current one if none is given); the node keeps its own copy.
CUresult cpudrv_gnode_set_batch(struct cpudrv_gnode *n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p,
                                struct cpudrv_ctx *cur)
{
    if (!p || p->flags) return CUDA_ERROR_INVALID_VALUE;
    CUcontext c;
    CUresult rc = cpudrv_memops_check(p->paramArray, p->count);
    if (!rc) rc = node_ctx(p->ctx, cur, &c);
    if (rc) return rc;
    CUstreamBatchMemOpParams *ops = malloc(p->count * sizeof *ops);
    if (!ops) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(ops, p->paramArray, p->count * sizeof *ops);
    cpudrv_gnode_params_free(n);
    n->u.b = (struct cpudrv_bparams){c, p->count, p->flags, ops};
    return CUDA_SUCCESS;
}

// Copies src's parameters into dst (of the same type; child graphs are cloned, publish as
// for cpudrv_graph_clone), releasing dst's.
CUresult cpudrv_gnode_params_copy(struct cpudrv_gnode *dst, const struct cpudrv_gnode *src,
                                  int publish)
{
    if (src->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        struct cpudrv_kparams k = src->u.k;
        CUresult rc = args_alloc(&k, k.f);
        if (rc) return rc;
        memcpy(k.args, src->u.k.args, k.f->argbytes);
        k.attr = NULL;
        if (src->u.k.attr) {
            size_t bytes = CPUDRV_STREAM_ATTRS * sizeof *k.attr;
            k.attr = malloc(bytes);
            if (!k.attr) {
                free(k.args);
                free(k.kp);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            memcpy(k.attr, src->u.k.attr, bytes);
        }
        if (dst->type == CU_GRAPH_NODE_TYPE_KERNEL) { // the copy's attributes, not dst's
            free(dst->u.k.attr);
            dst->u.k.attr = NULL;
        }
        kernel_commit(dst, &k);
        return CUDA_SUCCESS;
    }
    if (src->type == CU_GRAPH_NODE_TYPE_GRAPH) {
        struct cpudrv_graph *c;
        CUresult rc = cpudrv_graph_clone(src->u.child, publish, &c);
        if (rc) return rc;
        cpudrv_gnode_params_free(dst);
        dst->u.child = c;
        c->owner = dst;
        return CUDA_SUCCESS;
    }
    if (src->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        struct cpudrv_cparams c = src->u.c;
        CUresult rc = CUDA_SUCCESS;
        c.body = calloc(c.size, sizeof *c.body);
        if (!c.body) return CUDA_ERROR_OUT_OF_MEMORY;
        for (unsigned i = 0; !rc && i < c.size; i++)
            if (!(rc = cpudrv_graph_clone(src->u.c.body[i], publish, &c.body[i])))
                c.body[i]->owner = dst;
        if (rc) {
            for (unsigned i = 0; i < c.size; i++)
                if (c.body[i]) cpudrv_graph_destroy(c.body[i]);
            free(c.body);
            return rc;
        }
        cpudrv_gnode_params_free(dst);
        dst->u.c = c;
        return CUDA_SUCCESS;
    }
    if (src->type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) {
        size_t bytes = src->u.b.count * sizeof *src->u.b.ops;
        CUstreamBatchMemOpParams *ops = malloc(bytes);
        if (!ops) return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(ops, src->u.b.ops, bytes);
        cpudrv_gnode_params_free(dst);
        dst->u.b = src->u.b;
        dst->u.b.ops = ops;
        return CUDA_SUCCESS;
    }
    if (src->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT || src->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
        cpudrv_obj_ref(&src->u.ev->o);
    if (src->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) cpudrv_gmem_ref(src->u.gm);
    cpudrv_gnode_params_free(dst);
    dst->u = src->u;
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- entry points */

// Locks and finds a node of a type (0 in type: any); on success cpudrv_big is HELD.
static CUresult node_of(CUgraphNode h, int type, struct cpudrv_gnode **out)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_gnode *n = cpudrv_gnode_find(h);
    if (!n || (type >= 0 && (int)n->type != type)) {
        cpudrv_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    *out = n;
    return CUDA_SUCCESS;
}

// The parameters an add call gives, by node type.
struct add_params {
    const CUDA_KERNEL_NODE_PARAMS *k;
    const CUDA_MEMCPY3D *m;
    const CUDA_MEMSET_NODE_PARAMS *s;
    const CUDA_HOST_NODE_PARAMS *h;
    const CUDA_BATCH_MEM_OP_NODE_PARAMS *b;
    CUcontext ctx;
    CUevent ev;
    CUgraph child;
    int move; // the child graph becomes the node's (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
    CUDA_MEM_ALLOC_NODE_PARAMS *ma; // its dptr is written
    CUdeviceptr fptr;
    CUDA_CONDITIONAL_NODE_PARAMS *cp; // its phGraph_out is written
};

// Most bodies a SWITCH node may have here (the driver's limit is not documented).
#define COND_MAX_BODIES 1024u

// cpudrv_big held: a new conditional node's parameters: a handle made for g or a graph g
// is nested in, in the node's context; IF with 1 or 2 bodies, WHILE with 1, SWITCH with
// at least 1. Its bodies are made now (published if g is), and given back in phGraph_out.
static CUresult cond_set(struct cpudrv_gnode *n, CUDA_CONDITIONAL_NODE_PARAMS *p,
                         struct cpudrv_graph *g)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    unsigned most = p->type == CU_GRAPH_COND_TYPE_IF       ? 2
                    : p->type == CU_GRAPH_COND_TYPE_WHILE  ? 1
                    : p->type == CU_GRAPH_COND_TYPE_SWITCH ? COND_MAX_BODIES
                                                           : 0;
    if (!p->size || p->size > most) return CUDA_ERROR_INVALID_VALUE;
    const struct cpudrv_cond *h = cpudrv_cond_find(g, p->handle);
    struct cpudrv_ctx *cur = cpudrv_ctx_current();
    CUcontext ctx = p->ctx ? p->ctx : (CUcontext)cur;
    if (!h || ctx != h->ctx) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_cparams c = {p->handle, p->type, p->size, NULL, ctx};
    if (!(c.body = calloc(c.size, sizeof *c.body))) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < c.size; i++) {
        if (!(c.body[i] = cpudrv_graph_new(g->o.live))) {
            for (unsigned k = 0; k < i; k++)
                cpudrv_graph_destroy(c.body[k]);
            free(c.body);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c.body[i]->owner = n;
    }
    n->u.c = c;
    p->phGraph_out = (CUgraph *)c.body;
    return CUDA_SUCCESS;
}

// cpudrv_big held: sets a new node's parameters.
static CUresult add_set(struct cpudrv_gnode *n, const struct add_params *a, struct cpudrv_graph *g)
{
    struct cpudrv_ctx *cur = cpudrv_ctx_current();
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return cpudrv_gnode_set_kernel(n, a->k, cur);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cpudrv_gnode_set_memcpy(n, a->m, a->ctx, cur);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return cpudrv_gnode_set_memset(n, a->s, a->ctx, cur);
    case CU_GRAPH_NODE_TYPE_HOST:
        if (!a->h || !a->h->fn) return CUDA_ERROR_INVALID_VALUE;
        n->u.h = *a->h;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        return cpudrv_gnode_set_batch(n, a->b, cur);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        n->u.ev = cpudrv_event_find(a->ev);
        if (!n->u.ev) return CUDA_ERROR_INVALID_VALUE;
        cpudrv_obj_ref(&n->u.ev->o);
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        struct cpudrv_graph *c = cpudrv_graph_find(a->child);
        if (!c || c == g || c->owner || cpudrv_graph_capturing(c) || cpudrv_graph_has_mem(c))
            return CUDA_ERROR_INVALID_VALUE;
        if (a->move) { // the caller's handle stays valid, owned by the node from now on
            cpudrv_obj_ref(&c->o);
            n->u.child = c;
            c->owner = n;
            return CUDA_SUCCESS;
        }
        CUresult rc = cpudrv_graph_clone(c, 1, &n->u.child);
        if (!rc) n->u.child->owner = n;
        return rc;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return cpudrv_gmem_node_set(n, a->ma, g);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cpudrv_gmem_free_node_set(n, a->fptr, g);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return cond_set(n, a->cp, g);
    default:
        return CUDA_SUCCESS;
    }
}

// Adds a node of a type to a graph, after its dependencies.
static CUresult add(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                    const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeType type,
                    const struct add_params *a)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    struct cpudrv_gnode *n = g ? cpudrv_gnode_new(type) : NULL;
    if (!g)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!n)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else if ((rc = add_set(n, a, g)) != CUDA_SUCCESS)
        cpudrv_gnode_free(n);
    else if ((rc = cpudrv_graph_attach(g, n, deps, edges, ndeps)) == CUDA_SUCCESS)
        *out = (CUgraphNode)n;
    cpudrv_unlock();
    return rc;
}

// Adds a kernel node (the arguments are copied now, from kernelParams or `extra`).
CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *dependencies, size_t numDependencies,
                                 const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct add_params a = {.k = nodeParams};
    CUresult rc = cpudrv_node_load_wait(nodeParams);
    if (rc) return TR(rc);
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_KERNEL, &a));
}

// A kernel node's parameters; the argument arrays given back belong to the node.
CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (!nodeParams) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n);
    if (rc) return TR(rc);
    const struct cpudrv_kparams *k = &n->u.k;
    memset(nodeParams, 0, sizeof *nodeParams);
    if (k->kern)
        nodeParams->kern = (CUkernel)k->handle;
    else
        nodeParams->func = (CUfunction)k->handle;
    nodeParams->ctx = k->ctx;
    nodeParams->gridDimX = k->grid[0];
    nodeParams->gridDimY = k->grid[1];
    nodeParams->gridDimZ = k->grid[2];
    nodeParams->blockDimX = k->block[0];
    nodeParams->blockDimY = k->block[1];
    nodeParams->blockDimZ = k->block[2];
    nodeParams->sharedMemBytes = k->shmem;
    if (k->extra)
        nodeParams->extra = (void **)k->xv;
    else
        nodeParams->kernelParams = k->kp;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Sets a kernel node's parameters (an unknown function: INVALID_HANDLE).
CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gnode *n;
    CUresult rc = cpudrv_node_load_wait(nodeParams);
    if (rc) return TR(rc);
    rc = node_of(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n);
    if (rc) return TR(rc);
    if (nodeParams && !cpudrv_func_find(nodeParams->func ? (const void *)nodeParams->func
                                                         : (const void *)nodeParams->kern))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = cpudrv_gnode_set_kernel(n, nodeParams, cpudrv_ctx_current());
    cpudrv_unlock();
    return TR(rc);
}

// Adds a memcpy node (any memory cuMemcpy3D takes) to run in ctx.
CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    struct add_params a = {.m = copyParams, .ctx = ctx};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_MEMCPY, &a));
}

// A memcpy node's parameters.
CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    if (!nodeParams) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
    if (rc) return TR(rc);
    *nodeParams = n->u.m.p;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Sets a memcpy node's parameters (it keeps its context).
CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &n);
    if (rc) return TR(rc);
    rc = cpudrv_gnode_set_memcpy(n, nodeParams, n->u.m.ctx, NULL);
    cpudrv_unlock();
    return TR(rc);
}

// Adds a memset node (elements of 1, 2 or 4 bytes in device memory) to run in ctx.
CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    struct add_params a = {.s = memsetParams, .ctx = ctx};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_MEMSET, &a));
}

// A memset node's parameters.
CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    if (!nodeParams) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &n);
    if (rc) return TR(rc);
    *nodeParams = n->u.s.p;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Sets a memset node's parameters (it keeps its context).
CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &n);
    if (rc) return TR(rc);
    rc = cpudrv_gnode_set_memset(n, nodeParams, n->u.s.ctx, NULL);
    cpudrv_unlock();
    return TR(rc);
}

// Adds a host node: fn(userData) runs on the launch stream's worker at each launch.
CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                            const CUgraphNode *dependencies, size_t numDependencies,
                            const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct add_params a = {.h = nodeParams};
    return TR(
        add(phGraphNode, hGraph, dependencies, NULL, numDependencies, CU_GRAPH_NODE_TYPE_HOST, &a));
}

// A host node's function and user data.
CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!nodeParams) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_HOST, &n);
    if (rc) return TR(rc);
    *nodeParams = n->u.h;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Sets a host node's function and user data.
CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_HOST, &n);
    if (rc) return TR(rc);
    if (!nodeParams || !nodeParams->fn)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        n->u.h = *nodeParams;
    cpudrv_unlock();
    return TR(rc);
}

// Adds a batch mem-op node: its operations run in order at each launch, as
// cuStreamBatchMemOp's would on the launch stream.
CUresult cuGraphAddBatchMemOpNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *dependencies, size_t numDependencies,
                                  const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    struct add_params a = {.b = nodeParams};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &a));
}

// A batch mem-op node's parameters; paramArray is the node's own copy.
CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode,
                                        CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams_out)
{
    if (!nodeParams_out) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &n);
    if (rc) return TR(rc);
    *nodeParams_out =
        (CUDA_BATCH_MEM_OP_NODE_PARAMS){n->u.b.ctx, n->u.b.count, n->u.b.ops, n->u.b.flags};
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Replaces a batch mem-op node's operations.
CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode,
                                        const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &n);
    if (rc) return TR(rc);
    rc = cpudrv_gnode_set_batch(n, nodeParams, cpudrv_ctx_current());
    cpudrv_unlock();
    return TR(rc);
}

// Adds a node that runs a copy of childGraph (made now).
CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *dependencies, size_t numDependencies,
                                  CUgraph childGraph)
{
    struct add_params a = {.child = childGraph};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_GRAPH, &a));
}

// The graph a child graph node runs (owned by the node: changes to it change the node).
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    if (!phGraph) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_GRAPH, &n);
    if (rc) return TR(rc);
    *phGraph = (CUgraph)n->u.child;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Adds a node that does nothing (an ordering point).
CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                             const CUgraphNode *dependencies, size_t numDependencies)
{
    struct add_params a = {0};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_EMPTY, &a));
}

// Adds a node that records event at each launch, once its dependencies completed.
CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                   const CUgraphNode *dependencies, size_t numDependencies,
                                   CUevent event)
{
    struct add_params a = {.ev = event};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_EVENT_RECORD, &a));
}

// Adds a node that waits, at each launch, for event's latest record.
CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *dependencies, size_t numDependencies,
                                 CUevent event)
{
    struct add_params a = {.ev = event};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_WAIT_EVENT, &a));
}

static CUresult event_get(CUgraphNode hNode, int type, CUevent *out)
{
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, type, &n);
    if (rc) return rc;
    *out = (CUevent)n->u.ev;
    cpudrv_unlock();
    return CUDA_SUCCESS;
}

static CUresult event_set(CUgraphNode hNode, int type, CUevent event)
{
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, type, &n);
    if (rc) return rc;
    struct cpudrv_event *e = cpudrv_event_find(event);
    if (e) {
        cpudrv_obj_ref(&e->o);
        cpudrv_obj_put(&n->u.ev->o);
        n->u.ev = e;
    } else {
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    cpudrv_unlock();
    return rc;
}

// The event of an event record node.
CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return TR(event_get(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_out));
}

// Sets the event of an event record node.
CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return TR(event_set(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event));
}

// The event of an event wait node.
CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return TR(event_get(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_out));
}

// Sets the event of an event wait node.
CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return TR(event_set(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event));
}

// Adds a memory allocation node; its address is given back in nodeParams->dptr.
CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies, size_t numDependencies,
                                CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    struct add_params a = {.ma = nodeParams};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_MEM_ALLOC, &a));
}

// Adds a memory free node of an allocation node's address.
CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                               const CUgraphNode *dependencies, size_t numDependencies,
                               CUdeviceptr dptr)
{
    struct add_params a = {.fptr = dptr};
    return TR(add(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                  CU_GRAPH_NODE_TYPE_MEM_FREE, &a));
}

/* ---------------------------------------------------------------- kernel node attributes */

// Attributes a kernel node takes (the launch attributes valid for graph nodes).
static int node_attr(CUkernelNodeAttrID id)
{
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        return 1;
    default:
        return 0;
    }
}

// A kernel node's attributes, made (with their defaults) on first use; NULL if out of memory.
static CUkernelNodeAttrValue *attrs(struct cpudrv_gnode *n)
{
    if (!n->u.k.attr) {
        n->u.k.attr = calloc(CPUDRV_STREAM_ATTRS, sizeof *n->u.k.attr);
        if (n->u.k.attr)
            n->u.k.attr[CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP].memSyncDomainMap.remote = 1;
    }
    return n->u.k.attr;
}

// A kernel node's attribute.
CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                       CUkernelNodeAttrValue *value_out)
{
    if (!value_out || !node_attr(attr)) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n);
    if (rc) return TR(rc);
    const CUkernelNodeAttrValue *a = attrs(n);
    if (a)
        *value_out = a[attr];
    else
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_unlock();
    return TR(rc);
}

// Sets a kernel node's attribute (stored and given back; nothing here depends on it).
CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                       const CUkernelNodeAttrValue *value)
{
    if (!value || !node_attr(attr)) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n);
    if (rc) return TR(rc);
    CUkernelNodeAttrValue *a = attrs(n);
    if (a)
        a[attr] = *value;
    else
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_unlock();
    return TR(rc);
}

// Copies every attribute of one kernel node to another.
CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
    struct cpudrv_gnode *d;
    CUresult rc = node_of(dst, CU_GRAPH_NODE_TYPE_KERNEL, &d);
    if (rc) return TR(rc);
    struct cpudrv_gnode *s = cpudrv_gnode_find(src);
    CUkernelNodeAttrValue *a = s && s->type == CU_GRAPH_NODE_TYPE_KERNEL ? attrs(s) : NULL;
    CUkernelNodeAttrValue *b = a ? attrs(d) : NULL;
    if (!s || s->type != CU_GRAPH_NODE_TYPE_KERNEL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!a || !b)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        memcpy(b, a, CPUDRV_STREAM_ATTRS * sizeof *b);
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- nodes of any type */

// The typed forms of the kernel and memset members of CUgraphNodeParams.
CUDA_KERNEL_NODE_PARAMS cpudrv_kernel_params_typed(const CUDA_KERNEL_NODE_PARAMS_v3 *p)
{
    CUDA_KERNEL_NODE_PARAMS q;
    memset(&q, 0, sizeof q);
    q.func = p->func;
    q.gridDimX = p->gridDimX;
    q.gridDimY = p->gridDimY;
    q.gridDimZ = p->gridDimZ;
    q.blockDimX = p->blockDimX;
    q.blockDimY = p->blockDimY;
    q.blockDimZ = p->blockDimZ;
    q.sharedMemBytes = p->sharedMemBytes;
    q.kernelParams = p->kernelParams;
    q.extra = p->extra;
    q.kern = p->kern;
    q.ctx = p->ctx;
    return q;
}

CUDA_MEMSET_NODE_PARAMS cpudrv_memset_params_typed(const CUDA_MEMSET_NODE_PARAMS_v2 *p)
{
    CUDA_MEMSET_NODE_PARAMS q;
    memset(&q, 0, sizeof q);
    q.dst = p->dst;
    q.pitch = p->pitch;
    q.value = p->value;
    q.elementSize = p->elementSize;
    q.width = p->width;
    q.height = p->height;
    return q;
}

// Storage for the typed forms of a CUgraphNodeParams.
struct typed {
    CUDA_KERNEL_NODE_PARAMS k;
    CUDA_MEMSET_NODE_PARAMS s;
    CUDA_HOST_NODE_PARAMS h;
    CUDA_BATCH_MEM_OP_NODE_PARAMS b;
    CUDA_MEM_ALLOC_NODE_PARAMS ma;
};

// Reserved members of a CUgraphNodeParams, and a memcpy member's flags and reserved word,
// must be zero (INVALID_VALUE otherwise).
CUresult cpudrv_node_params_check(const CUgraphNodeParams *p)
{
    if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2] || p->reserved2)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY && (p->memcpy.flags || p->memcpy.reserved))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

// The typed parameters of a CUgraphNodeParams (kept in t); NOT_SUPPORTED for the types
// this driver lacks.
static CUresult from_generic(CUgraphNodeParams *p, struct add_params *a, struct typed *t)
{
    CUDA_KERNEL_NODE_PARAMS *k = &t->k;
    CUDA_MEMSET_NODE_PARAMS *s = &t->s;
    memset(a, 0, sizeof *a);
    if (cpudrv_node_params_check(p)) return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        *k = cpudrv_kernel_params_typed(&p->kernel);
        a->k = k;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        a->m = &p->memcpy.copyParams;
        a->ctx = p->memcpy.copyCtx;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        *s = cpudrv_memset_params_typed(&p->memset);
        a->s = s;
        a->ctx = p->memset.ctx;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_HOST:
        t->h.fn = p->host.fn;
        t->h.userData = p->host.userData;
        a->h = &t->h;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if ((unsigned)p->graph.ownership > CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
            return CUDA_ERROR_INVALID_VALUE;
        a->child = p->graph.graph;
        a->move = p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        a->ev = p->eventWait.event;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        a->ev = p->eventRecord.event;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        t->b = (CUDA_BATCH_MEM_OP_NODE_PARAMS){p->memOp.ctx, p->memOp.count, p->memOp.paramArray,
                                               p->memOp.flags};
        a->b = &t->b;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        t->ma = (CUDA_MEM_ALLOC_NODE_PARAMS){p->alloc.poolProps, p->alloc.accessDescs,
                                             p->alloc.accessDescCount, p->alloc.bytesize, 0};
        a->ma = &t->ma;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        a->fptr = p->free.dptr;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        a->cp = &p->conditional;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        return CUDA_ERROR_NOT_SUPPORTED; // not implemented by this driver
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

// Adds a node of any type this driver has, after dependencies with edge data.
CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                           const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
                           size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    if (!nodeParams) return TR(CUDA_ERROR_INVALID_VALUE);
    struct add_params a;
    struct typed t;
    CUresult rc = cpudrv_ready();
    if (!rc) rc = from_generic(nodeParams, &a, &t);
    if (rc) return TR(rc);
    rc = add(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams->type,
             &a);
    if (!rc && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) nodeParams->alloc.dptr = t.ma.dptr;
    // A conditional node's bodies went into nodeParams->conditional.phGraph_out.
    return TR(rc);
}

// Sets the parameters of a node of any type (the type must be the node's).
CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    if (!nodeParams) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gnode *n;
    CUresult rc = node_of(hNode, nodeParams->type, &n);
    if (rc) return TR(rc);
    struct add_params a;
    struct typed t;
    struct cpudrv_ctx *cur = cpudrv_ctx_current();
    rc = from_generic(nodeParams, &a, &t);
    if (!rc && n->type == CU_GRAPH_NODE_TYPE_GRAPH && a.move) rc = CUDA_ERROR_INVALID_VALUE;
    // Memory nodes' parameters cannot be changed (the driver's rule); nor, here, a
    // conditional node's (its bodies are changed through their own nodes).
    if (!rc && (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) rc = CUDA_ERROR_NOT_SUPPORTED;
    if (rc) {
        cpudrv_unlock();
        return TR(rc);
    }
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) {
        rc = cpudrv_gnode_set_kernel(n, a.k, cur);
    } else if (n->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
        rc = cpudrv_gnode_set_memcpy(n, a.m, a.ctx, cur);
    } else if (n->type == CU_GRAPH_NODE_TYPE_MEMSET) {
        rc = cpudrv_gnode_set_memset(n, a.s, a.ctx, cur);
    } else if (n->type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) {
        rc = cpudrv_gnode_set_batch(n, a.b, cur);
    } else {
        // Made on a node of no graph first, so that a refusal changes nothing.
        struct cpudrv_gnode *tmp = cpudrv_gnode_new(n->type);
        rc = tmp ? add_set(tmp, &a, n->g) : CUDA_ERROR_OUT_OF_MEMORY;
        if (!rc) rc = cpudrv_gnode_params_copy(n, tmp, n->g->o.live);
        if (tmp) cpudrv_gnode_free(tmp);
    }
    cpudrv_unlock();
    return TR(rc);
}
