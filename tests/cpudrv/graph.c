// Graphs: creation, destruction, nodes and the edges between them, clones, the queries
// (nodes, roots, edges, dependencies) and the DOT description. Node parameters are in
// graphnode.c, executable graphs in graphexec.c.
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Frees a node that is in no graph (or whose graph is going).
void cpudrv_gnode_free(struct cpudrv_gnode *n)
{
    if (n->o.live) cpudrv_obj_unpublish(&n->o);
    cpudrv_gnode_params_free(n);
    free(n->in.e);
    free(n->out.e);
    free(n);
}

static void graph_release(struct cpudrv_obj *o)
{
    struct cpudrv_graph *g = (struct cpudrv_graph *)o;
    for (struct cpudrv_gnode *n = g->head, *next; n; n = next) {
        next = n->next;
        cpudrv_gnode_free(n);
    }
    free(g->conds);
    free(g);
}

// The live graph / node whose handle is h, or NULL.
struct cpudrv_graph *cpudrv_graph_find(CUgraph h)
{
    return cpudrv_obj_find(h, CPUDRV_K_GRAPH);
}

struct cpudrv_gnode *cpudrv_gnode_find(CUgraphNode h)
{
    return cpudrv_obj_find(h, CPUDRV_K_GNODE);
}

// A new empty graph; publish: as a handle. The caller's reference is the owner's (the
// caller for cuGraphCreate, a child graph node, an executable graph); the handle table
// holds one more.
struct cpudrv_graph *cpudrv_graph_new(int publish)
{
    struct cpudrv_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    cpudrv_obj_init(&g->o, CPUDRV_K_GRAPH, NULL, graph_release);
    g->id = cpudrv_next_id();
    if (publish) {
        cpudrv_obj_ref(&g->o);
        cpudrv_obj_publish(&g->o);
    }
    return g;
}

// Ends a graph (its handle if it has one) and, with its last reference, all its nodes.
void cpudrv_graph_destroy(struct cpudrv_graph *g)
{
    if (g->o.live) cpudrv_obj_unpublish(&g->o);
    cpudrv_obj_put(&g->o);
}

// A new node of a type, in no graph yet, its parameters zeroed. Nodes are freed by their
// graph, never through a reference count: nothing else holds one.
struct cpudrv_gnode *cpudrv_gnode_new(CUgraphNodeType type)
{
    struct cpudrv_gnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    cpudrv_obj_init(&n->o, CPUDRV_K_GNODE, NULL, NULL);
    n->type = type;
    n->id = cpudrv_next_id();
    return n;
}

static int edges_push(struct cpudrv_edges *l, struct cpudrv_gnode *n, const CUgraphEdgeData *d)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct cpudrv_edge *e = realloc(l->e, cap * sizeof *e);
        if (!e) return -1;
        l->e = e;
        l->cap = cap;
    }
    l->e[l->n].n = n;
    if (d)
        l->e[l->n].data = *d;
    else
        memset(&l->e[l->n].data, 0, sizeof l->e[l->n].data);
    l->n++;
    return 0;
}

// Removes the edge to n with data d (any data if d is NULL) from l; 1 if there was one.
static int edges_remove(struct cpudrv_edges *l, const struct cpudrv_gnode *n,
                        const CUgraphEdgeData *d)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->e[i].n != n || (d && memcmp(&l->e[i].data, d, sizeof *d))) continue;
        memmove(&l->e[i], &l->e[i + 1], (l->n - i - 1) * sizeof l->e[0]);
        l->n--;
        return 1;
    }
    return 0;
}

static int edges_find(const struct cpudrv_edges *l, const struct cpudrv_gnode *n)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->e[i].n == n) return 1;
    return 0;
}

static int edge_zero(const CUgraphEdgeData *d)
{
    static const CUgraphEdgeData zero;
    return !d || !memcmp(d, &zero, sizeof zero);
}

// Edge data the driver accepts: ports and a programmatic type only from a kernel node to
// a kernel node, no port on the downstream side, reserved bytes zero. Execution here is
// always full completion of the upstream node, which every edge type allows.
static int edge_ok(const struct cpudrv_gnode *from, const struct cpudrv_gnode *to,
                   const CUgraphEdgeData *d)
{
    if (edge_zero(d)) return 1;
    for (size_t i = 0; i < sizeof d->reserved; i++)
        if (d->reserved[i]) return 0;
    if (d->to_port || d->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER ||
        d->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
        return 0;
    return from->type == CU_GRAPH_NODE_TYPE_KERNEL && to->type == CU_GRAPH_NODE_TYPE_KERNEL;
}

static int link(struct cpudrv_gnode *from, struct cpudrv_gnode *to, const CUgraphEdgeData *d)
{
    if (edges_push(&to->in, from, d)) return -1;
    if (edges_push(&from->out, to, d)) {
        to->in.n--;
        return -1;
    }
    return 0;
}

static void append(struct cpudrv_graph *g, struct cpudrv_gnode *n)
{
    n->g = g;
    n->prev = g->tail;
    if (g->tail)
        g->tail->next = n;
    else
        g->head = n;
    g->tail = n;
    g->n++;
    if (g->o.live) cpudrv_obj_publish(&n->o);
}

// Adds n to g after its dependencies (nodes of g, no duplicates; edge may be NULL); on
// failure n is freed.
CUresult cpudrv_graph_attach(struct cpudrv_graph *g, struct cpudrv_gnode *n,
                             const CUgraphNode *deps, const CUgraphEdgeData *edge, size_t ndeps)
{
    CUresult rc = ndeps && !deps ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    for (size_t i = 0; !rc && i < ndeps; i++) {
        struct cpudrv_gnode *d = cpudrv_gnode_find(deps[i]);
        if (!d || d->g != g || !edge_ok(d, n, edge ? &edge[i] : NULL))
            rc = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; !rc && j < i; j++)
            if (deps[j] == deps[i]) rc = CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; !rc && i < ndeps; i++)
        if (link((struct cpudrv_gnode *)deps[i], n, edge ? &edge[i] : NULL))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc) {
        for (size_t i = 0; i < n->in.n; i++)
            edges_remove(&n->in.e[i].n->out, n, NULL);
        cpudrv_gnode_free(n);
        return rc;
    }
    append(g, n);
    return CUDA_SUCCESS;
}

// Removes n from its graph, with its edges, and frees it.
void cpudrv_gnode_destroy(struct cpudrv_gnode *n)
{
    struct cpudrv_graph *g = n->g;
    for (size_t i = 0; i < n->in.n; i++)
        edges_remove(&n->in.e[i].n->out, n, NULL);
    for (size_t i = 0; i < n->out.n; i++)
        while (edges_remove(&n->out.e[i].n->in, n, NULL))
            ;
    if (n->prev)
        n->prev->next = n->next;
    else
        g->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        g->tail = n->prev;
    g->n--;
    cpudrv_gnode_free(n);
}

// A deep copy of g (child graphs too); publish: handles for it and its nodes. Each copy
// remembers what it was copied from.
CUresult cpudrv_graph_clone(const struct cpudrv_graph *g, int publish, struct cpudrv_graph **out)
{
    struct cpudrv_graph *c = cpudrv_graph_new(publish);
    struct cpudrv_gnode **map = calloc(g->n ? g->n : 1, sizeof *map);
    CUresult rc = c && map ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    size_t i = 0;
    // The handles first: the copies of conditional nodes read them.
    if (!rc && g->nconds) {
        c->conds = malloc(g->nconds * sizeof *c->conds);
        if (c->conds) {
            memcpy(c->conds, g->conds, g->nconds * sizeof *c->conds);
            c->nconds = g->nconds;
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    // Index the originals (mark), copy the nodes, then the edges in each node's order.
    for (struct cpudrv_gnode *n = g->head; !rc && n; n = n->next, i++) {
        n->mark = i;
        map[i] = cpudrv_gnode_new(n->type);
        if (!map[i] || cpudrv_gnode_params_copy(map[i], n, publish)) {
            free(map[i]);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        map[i]->orig = n->id;
        append(c, map[i]);
    }
    i = 0;
    for (struct cpudrv_gnode *n = g->head; !rc && n; n = n->next, i++)
        for (size_t k = 0; !rc && k < n->in.n; k++)
            if (link(map[n->in.e[k].n->mark], map[i], &n->in.e[k].data))
                rc = CUDA_ERROR_OUT_OF_MEMORY;
    free(map);
    if (rc) {
        if (c) cpudrv_graph_destroy(c);
        return rc;
    }
    c->orig = g->id;
    *out = c;
    return CUDA_SUCCESS;
}

// g's nodes in an order that respects every edge (Kahn's, from the roots in creation
// order): a malloc'd array; INVALID_VALUE (and *bad, a node on or after a cycle) for a cycle.
CUresult cpudrv_graph_order(const struct cpudrv_graph *g, struct cpudrv_gnode ***order,
                            struct cpudrv_gnode **bad)
{
    struct cpudrv_gnode **q = malloc((g->n ? g->n : 1) * sizeof *q);
    if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t tail = 0;
    for (struct cpudrv_gnode *n = g->head; n; n = n->next) {
        n->mark = n->in.n; // dependencies not yet placed
        if (!n->mark) q[tail++] = n;
    }
    for (size_t head = 0; head < tail; head++)
        for (size_t k = 0; k < q[head]->out.n; k++)
            if (--q[head]->out.e[k].n->mark == 0) q[tail++] = q[head]->out.e[k].n;
    if (tail < g->n) {
        for (struct cpudrv_gnode *n = g->head; n; n = n->next)
            if (n->mark) {
                *bad = n;
                break;
            }
        free(q);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *order = q;
    return CUDA_SUCCESS;
}

// 1 if g is being captured into.
int cpudrv_graph_capturing(const struct cpudrv_graph *g)
{
    return g->cap != NULL;
}

// The conditional handle h as seen from g: made for g or a graph it is nested in.
const struct cpudrv_cond *cpudrv_cond_find(const struct cpudrv_graph *g, CUgraphConditionalHandle h)
{
    for (; g; g = g->owner ? g->owner->g : NULL)
        for (size_t i = 0; i < g->nconds; i++)
            if (g->conds[i].h == h) return &g->conds[i];
    return NULL;
}

// Makes a conditional handle for a graph (flags: 0 or CU_GRAPH_COND_ASSIGN_DEFAULT) in ctx
// (NULL: the current context): a process-unique value. It lives as long as the graph.
CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph,
                                        CUcontext ctx, unsigned int defaultLaunchValue,
                                        unsigned int flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pHandle_out || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    struct cpudrv_ctx *c = NULL;
    if (!g)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (ctx)
        rc = cpudrv_ctx_find(ctx, &c);
    else if (!(c = cpudrv_ctx_current()))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    struct cpudrv_cond *v = rc ? NULL : realloc(g->conds, (g->nconds + 1) * sizeof *v);
    if (!rc && !v) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        g->conds = v;
        v[g->nconds] =
            (struct cpudrv_cond){cpudrv_next_id(), defaultLaunchValue, flags, (CUcontext)c};
        *pHandle_out = v[g->nconds++].h;
    }
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- entry points */

// Creates an empty graph (flags must be 0).
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!phGraph || flags) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_new(1);
    if (g) {
        *phGraph = (CUgraph)g;
        cpudrv_obj_put(&g->o); // the handle is the caller's only claim
    }
    cpudrv_unlock();
    return TR(g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY);
}

// Destroys a graph and its nodes (not one being captured into, nor a child graph node's).
CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    if (!g || g->owner || cpudrv_graph_capturing(g))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        cpudrv_obj_unpublish(&g->o);
    cpudrv_unlock();
    return TR(rc);
}

// Copies a graph, child graphs included.
CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!phGraphClone) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(originalGraph), *c = NULL;
    // Graphs with memory nodes cannot be cloned (the driver's rule).
    rc = g && !cpudrv_graph_has_mem(g) ? cpudrv_graph_clone(g, 1, &c) : CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        *phGraphClone = (CUgraph)c;
        cpudrv_obj_put(&c->o);
    }
    cpudrv_unlock();
    return TR(rc);
}

// The node of a clone that was copied from hOriginalNode (which must still exist, and have
// existed when the clone was made).
CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                CUgraph hClonedGraph)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!phNode) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_gnode *n = cpudrv_gnode_find(hOriginalNode);
    struct cpudrv_graph *c = cpudrv_graph_find(hClonedGraph);
    rc = CUDA_ERROR_INVALID_VALUE;
    if (n && c && c->orig == n->g->id)
        for (struct cpudrv_gnode *m = c->head; m; m = m->next)
            if (m->orig == n->id) {
                *phNode = (CUgraphNode)m;
                rc = CUDA_SUCCESS;
                break;
            }
    cpudrv_unlock();
    return TR(rc);
}

// A node's type.
CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!type) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_gnode *n = cpudrv_gnode_find(hNode);
    if (n)
        *type = n->type;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// The count-or-fill convention of the node queries: with no array, *num is set to the count;
// with one, up to *num entries are written, the rest of *num entries NULL, and *num becomes
// the number written.
static void put_nodes(CUgraphNode *out, size_t *num, struct cpudrv_gnode **list, size_t n)
{
    if (!out) {
        *num = n;
        return;
    }
    size_t k = n < *num ? n : *num;
    for (size_t i = 0; i < *num; i++)
        out[i] = i < k ? (CUgraphNode)list[i] : NULL;
    *num = k;
}

// Nodes of a graph that match (roots: no dependencies), in creation order.
static CUresult graph_nodes(CUgraph hGraph, CUgraphNode *nodes, size_t *num, int roots)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    if (!num) return CUDA_ERROR_INVALID_VALUE;
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    struct cpudrv_gnode **list = g ? malloc((g->n ? g->n : 1) * sizeof *list) : NULL;
    if (!g)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!list)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        size_t n = 0;
        for (struct cpudrv_gnode *m = g->head; m; m = m->next)
            if (!roots || !m->in.n) list[n++] = m;
        put_nodes(nodes, num, list, n);
    }
    free(list);
    cpudrv_unlock();
    return rc;
}

// A graph's nodes, in creation order.
CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    return TR(graph_nodes(hGraph, nodes, numNodes, 0));
}

// A graph's nodes without dependencies, in creation order.
CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    return TR(graph_nodes(hGraph, rootNodes, numRootNodes, 1));
}

// A graph's edges (to[i] depends on from[i]), by dependent node in creation order; with
// no edgeData every edge must carry default data (LOSSY_QUERY otherwise).
CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                            CUgraphEdgeData *edgeData, size_t *numEdges)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!numEdges || (!from != !to) || (edgeData && !from)) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    size_t total = 0, k = 0;
    int lossy = 0;
    if (!g) rc = CUDA_ERROR_INVALID_VALUE;
    for (struct cpudrv_gnode *n = g ? g->head : NULL; n; n = n->next)
        for (size_t i = 0; i < n->in.n; i++, total++)
            lossy |= !edge_zero(&n->in.e[i].data);
    if (!rc && from && !edgeData && lossy) rc = CUDA_ERROR_LOSSY_QUERY;
    if (!rc && from) {
        for (struct cpudrv_gnode *n = g->head; n; n = n->next)
            for (size_t i = 0; i < n->in.n && k < *numEdges; i++, k++) {
                from[k] = (CUgraphNode)n->in.e[i].n;
                to[k] = (CUgraphNode)n;
                if (edgeData) edgeData[k] = n->in.e[i].data;
            }
        for (size_t i = k; i < *numEdges; i++) {
            from[i] = to[i] = NULL;
            if (edgeData) memset(&edgeData[i], 0, sizeof edgeData[i]);
        }
        *numEdges = k;
    } else if (!rc) {
        *numEdges = total;
    }
    cpudrv_unlock();
    return TR(rc);
}

// One side of a node's edges, with the count-or-fill convention.
static CUresult node_edges(CUgraphNode hNode, CUgraphNode *nodes, CUgraphEdgeData *edgeData,
                           size_t *num, int out)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    if (!num || (edgeData && !nodes)) return CUDA_ERROR_INVALID_VALUE;
    cpudrv_lock();
    struct cpudrv_gnode *n = cpudrv_gnode_find(hNode);
    const struct cpudrv_edges *l = n ? (out ? &n->out : &n->in) : NULL;
    if (!n) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!nodes) {
        *num = l->n;
    } else {
        for (size_t i = 0; i < l->n && !edgeData; i++)
            if (!edge_zero(&l->e[i].data)) rc = CUDA_ERROR_LOSSY_QUERY;
        size_t k = l->n < *num ? l->n : *num;
        for (size_t i = 0; !rc && i < *num; i++) {
            nodes[i] = i < k ? (CUgraphNode)l->e[i].n : NULL;
            if (edgeData && i < k)
                edgeData[i] = l->e[i].data;
            else if (edgeData)
                memset(&edgeData[i], 0, sizeof edgeData[i]);
        }
        if (!rc) *num = k;
    }
    cpudrv_unlock();
    return rc;
}

// The nodes hNode depends on.
CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
                                       CUgraphEdgeData *edgeData, size_t *numDependencies)
{
    return TR(node_edges(hNode, dependencies, edgeData, numDependencies, 0));
}

// The nodes that depend on hNode.
CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                         CUgraphEdgeData *edgeData, size_t *numDependentNodes)
{
    return TR(node_edges(hNode, dependentNodes, edgeData, numDependentNodes, 1));
}

// cpudrv_big held: the edges' nodes, all of g.
static CUresult edge_nodes(struct cpudrv_graph *g, CUgraphNode f, CUgraphNode t,
                           struct cpudrv_gnode **a, struct cpudrv_gnode **b)
{
    *a = cpudrv_gnode_find(f);
    *b = cpudrv_gnode_find(t);
    return *a && *b && (*a)->g == g && (*b)->g == g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Adds edges (to[i] depends on from[i]); an edge that exists, a node on itself or a node of
// another graph is refused before any edge is added. Cycles are found at instantiation.
CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (numDependencies && (!from || !to)) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    struct cpudrv_gnode *a, *b;
    if (!g) rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !rc && i < numDependencies; i++) {
        rc = edge_nodes(g, from[i], to[i], &a, &b);
        if (!rc &&
            (a == b || edges_find(&b->in, a) || !edge_ok(a, b, edgeData ? &edgeData[i] : NULL)))
            rc = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; !rc && j < i; j++)
            if (from[j] == from[i] && to[j] == to[i]) rc = CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; !rc && i < numDependencies; i++) {
        edge_nodes(g, from[i], to[i], &a, &b);
        if (link(a, b, edgeData ? &edgeData[i] : NULL)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    cpudrv_unlock();
    return TR(rc);
}

// Removes edges, each of which must exist with the data given (default data if none).
CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                      const CUgraphNode *to, const CUgraphEdgeData *edgeData,
                                      size_t numDependencies)
{
    static const CUgraphEdgeData zero;
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (numDependencies && (!from || !to)) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    struct cpudrv_gnode *a, *b;
    if (!g) rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !rc && i < numDependencies; i++) {
        rc = edge_nodes(g, from[i], to[i], &a, &b);
        const CUgraphEdgeData *d = edgeData ? &edgeData[i] : &zero;
        int found = 0;
        for (size_t k = 0; !rc && k < b->in.n; k++)
            found |= b->in.e[k].n == a && !memcmp(&b->in.e[k].data, d, sizeof *d);
        if (!rc && !found) rc = CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; !rc && i < numDependencies; i++) {
        edge_nodes(g, from[i], to[i], &a, &b);
        const CUgraphEdgeData *d = edgeData ? &edgeData[i] : &zero;
        edges_remove(&b->in, a, d);
        edges_remove(&a->out, b, d);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Removes a node and its edges (not from a graph being captured into).
CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_gnode *n = cpudrv_gnode_find(hNode);
    if (!n || cpudrv_graph_capturing(n->g))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        cpudrv_gnode_destroy(n);
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- DOT */

// The direction of a memcpy node, as the driver's DOT output names it.
static const char *copy_dir(const CUDA_MEMCPY3D *p)
{
    static const char *names[2][2] = {{"HtoH", "HtoD"}, {"DtoH", "DtoD"}};
    int s = p->srcMemoryType != CU_MEMORYTYPE_HOST, d = p->dstMemoryType != CU_MEMORYTYPE_HOST;
    return names[s][d];
}

// Writes g's nodes (each: its id, its type and what it runs) and edges; child graphs as
// clusters inside their node's cluster.
static void dot_graph(FILE *f, const struct cpudrv_graph *g, int depth)
{
    for (const struct cpudrv_gnode *n = g->head; n; n = n->next) {
        fprintf(f, "%*s\"n%llu\" [shape=\"rectangle\" label=\"%llu\\n%s", depth * 2, "", n->id,
                n->id, cpudrv_gnode_type_name(n->type));
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL)
            fprintf(f, "\\n%s", n->u.k.f->name);
        else if (n->type == CU_GRAPH_NODE_TYPE_MEMCPY)
            fprintf(f, "\\n%s", copy_dir(&n->u.m.p));
        fprintf(f, "\"];\n");
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            fprintf(f, "%*ssubgraph \"cluster_%llu\" {\n%*slabel=\"graph_%llu\";\n", depth * 2, "",
                    n->u.child->id, depth * 2 + 2, "", n->u.child->id);
            dot_graph(f, n->u.child, depth + 1);
            fprintf(f, "%*s}\n", depth * 2, "");
        }
    }
    for (const struct cpudrv_gnode *n = g->head; n; n = n->next)
        for (size_t i = 0; i < n->in.n; i++)
            fprintf(f, "%*s\"n%llu\" -> \"n%llu\";\n", depth * 2, "", n->in.e[i].n->id, n->id);
}

// Writes a DOT description of the graph to path (flags add detail: accepted, not written).
CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    (void)flags;
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!path) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    FILE *f = g ? fopen(path, "w") : NULL;
    if (!g) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!f) {
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    } else {
        fprintf(f, "digraph dot {\n  subgraph \"cluster_%llu\" {\n    label=\"graph_%llu\";\n",
                g->id, g->id);
        dot_graph(f, g, 2);
        fprintf(f, "  }\n}\n");
        if (fclose(f)) rc = CUDA_ERROR_OPERATING_SYSTEM;
    }
    cpudrv_unlock();
    return TR(rc);
}
