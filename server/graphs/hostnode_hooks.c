/* The hooks on graph calls that keep a host node a host node (cuda_symbols.txt names them
 * server:hostnode_*): its type, no child graph node, and the slots that graphs, clones and
 * execs hold as they are made, updated and destroyed (hostnode.c says what a slot is). */
#include "server/core/server.h"
#include "server/core/registry.h"
#include "server/graphs/hostnode.h"
#include "server/graphs/graphrefs.h"

#include <stdlib.h>

static CUgraphNode node_arg(const struct srv_call *k, int i)
{
    return (CUgraphNode)(uintptr_t)k->vals[i];
}

/* cuGraphNodeGetType: a host node is a host node. */
static CUresult type_after(struct srv_client *c, struct srv_call *k)
{
    CUgraphNodeType *t = k->a.ptr[1];
    if (t && *t == CU_GRAPH_NODE_TYPE_GRAPH &&
        srv_hostnode_slot(c, node_arg(k, 0), NULL, NULL) >= 0)
        *t = CU_GRAPH_NODE_TYPE_HOST;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_type = {.after = type_after};

/* cuGraphChildGraphNodeGetGraph: a host node is no child graph node, as with the driver
 * (and its inner graph is the server's). */
static CUresult not_child(struct srv_client *c, struct srv_call *k)
{
    return srv_hostnode_slot(c, node_arg(k, 0), NULL, NULL) >= 0 ? CUDA_ERROR_INVALID_VALUE
                                                                 : CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_not_child = {.before = not_child};

/* cuGraphExecChildGraphNodeSetParams: not on a host node; the exec holds the slots of the
 * host nodes the new child graph brings. */
static CUresult exec_child_before(struct srv_client *c, struct srv_call *k)
{
    return srv_hostnode_slot(c, node_arg(k, 1), NULL, NULL) >= 0 ? CUDA_ERROR_INVALID_VALUE
                                                                 : CUDA_SUCCESS;
}

static CUresult exec_child_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *x = srv_obj_find(c, SHIM_HT_CUgraphExec, k->vals[0]);
    srv_hostnode_share_all(c, x, (CUgraph)(uintptr_t)k->vals[2]);
    srv_graphrefs_child(c, x, k->a.val[1], (CUgraph)(uintptr_t)k->vals[2]); /* graphrefs.c */
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_exec_child = {.before = exec_child_before,
                                                      .after = exec_child_after};

/* cuGraphAddChildGraphNode: the graph holds the host nodes of its new child's copy. */
static CUresult add_child_after(struct srv_client *c, struct srv_call *k)
{
    CUgraph child;
    CUgraphNode n = *(CUgraphNode *)k->a.ptr[0];
    if (DRV(cuGraphChildGraphNodeGetGraph)(n, &child) == CUDA_SUCCESS)
        srv_hostnode_share_all(c, srv_obj_find(c, SHIM_HT_CUgraph, k->vals[1]), child);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_add_child = {.after = add_child_after};

/* cuGraphClone: the clone holds its host nodes' slots (shared with the original's until
 * one of them sets its function). */
static CUresult clone_after(struct srv_client *c, struct srv_call *k)
{
    CUgraph g = *(CUgraph *)k->a.ptr[0];
    srv_hostnode_share_all(c, srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)g), g);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_clone = {.after = clone_after};

struct own {
    struct srv_obj *x;
};

static void own_one(struct srv_client *c, void *arg, CUgraphNode n, uint32_t s)
{
    struct own *o = arg;
    uint64_t fn = c->ch.callbacks->hn_fn[s], user = c->ch.callbacks->hn_user[s];
    srv_hostnode_exec_own(c, o->x, (uint64_t)(uintptr_t)n, fn, user);
}

/* Every instantiation: the exec holds its graph's slots (nested ones stay shared), and
 * gets slots of its own for the graph's top-level host nodes, so that another exec of
 * the same graph, running at the same time, never sets its flags. */
static CUresult instantiate_after(struct srv_client *c, struct srv_call *k)
{
    CUgraphExec e = *(CUgraphExec *)k->a.ptr[0];
    CUgraph g = (CUgraph)(uintptr_t)k->vals[1];
    struct srv_obj *x = srv_obj_find(c, SHIM_HT_CUgraphExec, (uintptr_t)e);
    srv_graphrefs_build(c, x, g); /* what its launches check (graphrefs.c) */
    if (!x || !c->hn) return CUDA_SUCCESS;
    srv_hostnode_share_all(c, x, g);
    size_t n = 0;
    CUgraphNode *v;
    if (DRV(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS || !n || !(v = malloc(n * sizeof(*v))))
        return CUDA_SUCCESS;
    struct own o = {x};
    if (DRV(cuGraphGetNodes)(g, v, &n) == CUDA_SUCCESS)
        for (size_t i = 0; i < n; i++) {
            int s = srv_hostnode_slot(c, v[i], NULL, NULL);
            if (s >= 0) own_one(c, &o, v[i], (uint32_t)s);
        }
    free(v);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_instantiate = {.after = instantiate_after};

/* cuGraphExecUpdate: the exec now runs the new graph's slots, and holds them; its own
 * slots stand for nothing any more (a later exec set gives it new ones). */
static CUresult update_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *x = srv_obj_find(c, SHIM_HT_CUgraphExec, k->vals[0]);
    if (!x) return CUDA_SUCCESS;
    srv_graphrefs_build(c, x, (CUgraph)(uintptr_t)k->vals[1]); /* graphrefs.c */
    srv_hostnode_exec_unbind(x);
    srv_hostnode_share_all(c, x, (CUgraph)(uintptr_t)k->vals[1]);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_hostnode_update = {.after = update_after};

/* cuGraphDestroyNode: a host node's graph lets its slot go. */
static CUresult destroy_call(struct srv_client *c, struct srv_call *k)
{
    CUgraphNode n = node_arg(k, 0);
    int s = srv_hostnode_slot(c, n, NULL, NULL);
    CUresult r = DRV(cuGraphDestroyNode)(n);
    if (r == CUDA_SUCCESS && s >= 0)
        srv_hostnode_put(c,
                         srv_hostnode_top_graph(srv_obj_find(c, SHIM_HT_CUgraphNode, (uintptr_t)n)),
                         (uint32_t)s);
    return r;
}

const struct srv_hook srv_hook_hostnode_destroy = {.call = destroy_call};
