/* Graph host nodes of clients (and host functions captured into graphs): unlike hostfn.c's
 * host functions they run once per launch, so they are slots instead (proto.h says how the
 * two ends use one). The node the client sees is a child graph node whose graph is [the
 * server's host function -> a batch mem-op node waiting for the slot's flag]: one node, so
 * its edges, dependencies, clones and updates are the driver's own; the hooks of
 * hostnode_hooks.c make it answer as a host node (its type, its parameters) and refuse to
 * be used as a child graph node.
 *
 * Slots are counted: each graph holds one reference per host node it contains (child
 * graphs included), each exec one per host node it was instantiated or updated with, and
 * a slot is handed out again only when none is left, so a graph may go while its execs
 * run. Setting a host node's function copies the slot first when others hold it (a clone,
 * an exec), and each exec gets slots of its own for its graph's host nodes, so that two
 * execs of one graph never release each other's waits. */
#include "server/core/server.h"
#include "server/core/segment.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/graphs/hostnode.h"
#include "server/graphs/hostfn.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- host node slots */

/* One slot: what the server's host function is given (it must outlive every launch of a
 * graph using the slot: the array lives as long as the client), and its references. Owned
 * by the worker, but for `c` and `slot`, read by the driver's callback thread. */
struct srv_hostnode {
    struct srv_client *c;
    uint32_t slot;
    uint32_t refs; /* 0: free */
};

/* The server's host node function: the flag goes back to 0 before the client hears of the
 * run, so the wait after it holds until the client's function has run this time. Once the
 * client is gone nothing will run it: the flag is left set (srv_hostfn_release sets every
 * flag after hn_gone; one of the two stores below comes last either way). */
static void CUDA_CB fire_node(void *arg)
{
    struct srv_hostnode *h = arg;
    struct chan_callbacks *cb = h->c->ch.callbacks;
    atomic_store(&cb->hn_flag[h->slot], 0);
    if (atomic_load(&h->c->hn_gone)) {
        atomic_store(&cb->hn_flag[h->slot], 1);
        return;
    }
    srv_hostfn_post(h->c, CHAN_CB_NODE | h->slot);
}

/* A free slot, with one reference, holding fn and user; -1 when the client holds
 * CHAN_HN_SLOTS already (or out of memory). */
static int slot_new(struct srv_client *c, uint64_t fn, uint64_t user)
{
    if (!c->hn) {
        /* `c` and `slot` are written once, here: the driver's callback thread reads them. */
        if (!(c->hn = calloc(CHAN_HN_SLOTS, sizeof(*c->hn)))) return -1;
        for (uint32_t i = 0; i < CHAN_HN_SLOTS; i++)
            c->hn[i] = (struct srv_hostnode){.c = c, .slot = i};
    }
    for (uint32_t i = 0; i < CHAN_HN_SLOTS; i++)
        if (!c->hn[i].refs) {
            c->hn[i].refs = 1;
            c->ch.callbacks->hn_fn[i] = fn;
            c->ch.callbacks->hn_user[i] = user;
            return (int)i;
        }
    return -1;
}

static void slot_unref(struct srv_client *c, uint32_t s)
{
    if (c->hn && s < CHAN_HN_SLOTS && c->hn[s].refs) c->hn[s].refs--;
}

/* The references a graph or exec record holds (its ext): one per host node in it, with
 * the node an exec's own slot stands in for (0: a reference only). */
struct slots {
    uint32_t n, cap;
    struct {
        uint64_t node;
        uint32_t slot;
    } e[];
};

static void slots_drop(struct srv_client *c, struct srv_obj *o)
{
    struct slots *l = o->ext;
    for (uint32_t i = 0; l && i < l->n; i++)
        slot_unref(c, l->e[i].slot);
    free(l);
    o->ext = NULL;
    o->drop = NULL;
}

int srv_hostfn_exec_waits(const struct srv_obj *x)
{
    const struct slots *l = x && x->drop == slots_drop ? x->ext : NULL;
    return l && l->n > 0;
}

/* Gives o (a graph or exec) the reference `s` holds already. -1 when out of memory (the
 * reference is dropped). */
static int slots_take(struct srv_client *c, struct srv_obj *o, uint32_t s, uint64_t node)
{
    struct slots *l = o->ext;
    if (!l || l->n == l->cap) {
        uint32_t cap = l ? l->cap * 2 : 8;
        struct slots *m = realloc(l, sizeof(*l) + cap * sizeof(l->e[0]));
        if (!m) {
            slot_unref(c, s);
            return -1;
        }
        if (!l) m->n = 0;
        m->cap = cap;
        o->ext = l = m;
        o->drop = slots_drop;
    }
    l->e[l->n].node = node;
    l->e[l->n].slot = s;
    l->n++;
    return 0;
}

/* Gives o one more reference to slot s. */
static int slots_share(struct srv_client *c, struct srv_obj *o, uint32_t s)
{
    c->hn[s].refs++;
    return slots_take(c, o, s, 0);
}

/* Drops one of o's references to slot s, if it has one. */
void srv_hostnode_put(struct srv_client *c, struct srv_obj *o, uint32_t s)
{
    struct slots *l = o ? o->ext : NULL;
    for (uint32_t i = 0; l && i < l->n; i++)
        if (l->e[i].slot == s) {
            l->e[i] = l->e[--l->n];
            slot_unref(c, s);
            return;
        }
}

/* ---------------------------------------------------------------- the node's graph */

/* The wait for slot s's flag. */
static CUstreamBatchMemOpParams wait_op(struct srv_client *c, uint32_t s)
{
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof(op));
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address =
        c->shm_dptr + (CUdeviceptr)((uint8_t *)&c->ch.callbacks->hn_flag[s] - (uint8_t *)c->shm);
    op.waitValue.value = 1;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    return op;
}

/* A new graph [fire_node(slot s) -> wait for its flag]: what a host node of slot s runs. */
static CUresult pair_graph(struct srv_client *c, uint32_t s, CUgraph *out)
{
    CUgraph g;
    CUgraphNode h, w;
    CUcontext ctx = NULL;
    CUresult r = DRV(cuCtxGetCurrent)(&ctx);
    if (r != CUDA_SUCCESS || (r = DRV(cuGraphCreate)(&g, 0)) != CUDA_SUCCESS) return r;
    CUDA_HOST_NODE_PARAMS hp = {.fn = fire_node, .userData = &c->hn[s]};
    CUstreamBatchMemOpParams op = wait_op(c, s);
    CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {.ctx = ctx, .count = 1, .paramArray = &op};
    if ((r = DRV(cuGraphAddHostNode)(&h, g, NULL, 0, &hp)) != CUDA_SUCCESS ||
        (r = DRV(cuGraphAddBatchMemOpNode)(&w, g, &h, 1, &bp)) != CUDA_SUCCESS) {
        DRV(cuGraphDestroy)(g);
        return r;
    }
    *out = g;
    return CUDA_SUCCESS;
}

/* The slot of a node that is one of the client's host nodes, else -1; its inner host and
 * wait nodes. Asked of the driver (the node's graph holds fire_node with a slot of this
 * client's as its data), so clones, captures and nodes found by queries are known too. */
int srv_hostnode_slot(struct srv_client *c, CUgraphNode n, CUgraphNode *host, CUgraphNode *wait)
{
    CUgraphNodeType t;
    CUgraph g;
    CUgraphNode v[2];
    size_t nv = 0;
    CUDA_HOST_NODE_PARAMS hp;
    if (!c->hn || DRV(cuGraphNodeGetType)(n, &t) != CUDA_SUCCESS || t != CU_GRAPH_NODE_TYPE_GRAPH ||
        DRV(cuGraphChildGraphNodeGetGraph)(n, &g) != CUDA_SUCCESS ||
        DRV(cuGraphGetNodes)(g, NULL, &nv) != CUDA_SUCCESS || nv != 2 ||
        DRV(cuGraphGetNodes)(g, v, &nv) != CUDA_SUCCESS || nv != 2)
        return -1;
    for (int i = 0; i < 2; i++)
        if (DRV(cuGraphNodeGetType)(v[i], &t) == CUDA_SUCCESS && t == CU_GRAPH_NODE_TYPE_HOST &&
            DRV(cuGraphHostNodeGetParams)(v[i], &hp) == CUDA_SUCCESS && hp.fn == fire_node) {
            uintptr_t off = (uintptr_t)hp.userData - (uintptr_t)c->hn;
            if (off % sizeof(*c->hn) || off / sizeof(*c->hn) >= CHAN_HN_SLOTS) return -1;
            if (host) *host = v[i];
            if (wait) *wait = v[1 - i];
            return (int)(off / sizeof(*c->hn));
        }
    return -1;
}

/* Points host node n (slot now `from`) at slot s. */
static CUresult pair_rebind(struct srv_client *c, CUgraphNode n, uint32_t s)
{
    CUgraphNode h, w;
    CUcontext ctx = NULL;
    if (srv_hostnode_slot(c, n, &h, &w) < 0) return CUDA_ERROR_INVALID_VALUE;
    CUDA_HOST_NODE_PARAMS hp = {.fn = fire_node, .userData = &c->hn[s]};
    CUstreamBatchMemOpParams op = wait_op(c, s);
    CUresult r = DRV(cuCtxGetCurrent)(&ctx);
    CUDA_BATCH_MEM_OP_NODE_PARAMS bp = {.ctx = ctx, .count = 1, .paramArray = &op};
    if (r == CUDA_SUCCESS) r = DRV(cuGraphBatchMemOpNodeSetParams)(w, &bp);
    if (r == CUDA_SUCCESS) r = DRV(cuGraphHostNodeSetParams)(h, &hp);
    return r;
}

/* Calls fn for every host node in g, child graphs included (to a depth no program
 * reaches; deeper ones are not counted). */
static void walk(struct srv_client *c, CUgraph g, int depth,
                 void (*fn)(struct srv_client *c, void *arg, CUgraphNode n, uint32_t s), void *arg)
{
    size_t n = 0;
    CUgraphNode *v;
    if (!c->hn || depth > 16 || DRV(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS || !n ||
        !(v = malloc(n * sizeof(*v))))
        return;
    if (DRV(cuGraphGetNodes)(g, v, &n) == CUDA_SUCCESS)
        for (size_t i = 0; i < n; i++) {
            CUgraphNodeType t;
            CUgraph child;
            int s = srv_hostnode_slot(c, v[i], NULL, NULL);
            if (s >= 0)
                fn(c, arg, v[i], (uint32_t)s);
            else if (DRV(cuGraphNodeGetType)(v[i], &t) == CUDA_SUCCESS &&
                     t == CU_GRAPH_NODE_TYPE_GRAPH &&
                     DRV(cuGraphChildGraphNodeGetGraph)(v[i], &child) == CUDA_SUCCESS)
                walk(c, child, depth + 1, fn, arg);
        }
    free(v);
}

static void share_one(struct srv_client *c, void *arg, CUgraphNode n, uint32_t s)
{
    (void)n;
    slots_share(c, arg, s);
}

/* o (a graph or exec) takes a reference to every host node slot graph g uses. */
void srv_hostnode_share_all(struct srv_client *c, struct srv_obj *o, CUgraph g)
{
    if (o) walk(c, g, 0, share_one, o);
}

/* The graph (not a child graph node's) that node record o belongs to, or NULL. */
struct srv_obj *srv_hostnode_top_graph(struct srv_obj *o)
{
    struct srv_obj *g = NULL;
    for (; o; o = o->parent)
        if (o->key.type == SHIM_HT_CUgraph) g = o;
    return g;
}

/* ---------------------------------------------------------------- the operation */

/* The exec's own slot for node, with its index in the exec's list; -1 if none. */
static int exec_slot(struct srv_obj *x, uint64_t node, uint32_t *at)
{
    struct slots *l = x->ext;
    for (uint32_t i = 0; l && i < l->n; i++)
        if (l->e[i].node == node) {
            *at = i;
            return (int)l->e[i].slot;
        }
    return -1;
}

/* Gives exec x a slot of its own for its host node `node` (now slot `from`), holding fn
 * and user: its graph is given to the exec's copy of the node. */
CUresult srv_hostnode_exec_own(struct srv_client *c, struct srv_obj *x, uint64_t node, uint64_t fn,
                               uint64_t user)
{
    uint32_t at;
    int s = exec_slot(x, node, &at);
    if (s >= 0 && c->hn[s].refs == 1) {
        c->ch.callbacks->hn_fn[s] = fn;
        c->ch.callbacks->hn_user[s] = user;
        return CUDA_SUCCESS;
    }
    int e = slot_new(c, fn, user);
    CUgraph g;
    if (e < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = pair_graph(c, (uint32_t)e, &g);
    if (r == CUDA_SUCCESS) {
        r = DRV(cuGraphExecChildGraphNodeSetParams)((CUgraphExec)(uintptr_t)x->key.value,
                                                    (CUgraphNode)(uintptr_t)node, g);
        DRV(cuGraphDestroy)(g);
    }
    if (r != CUDA_SUCCESS) {
        slot_unref(c, (uint32_t)e);
        return r;
    }
    if (s >= 0) {
        struct slots *l = x->ext;
        slot_unref(c, l->e[at].slot);
        l->e[at].slot = (uint32_t)e;
        return CUDA_SUCCESS;
    }
    return slots_take(c, x, (uint32_t)e, node) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* A host function captured on a capturing stream: a host node added to the capture's
 * graph after the stream's dependencies, which the stream then depends on alone. */
static CUresult capture(struct srv_client *c, const struct chan_rec *r,
                        const struct chan_host_node *m)
{
    struct srv_stream *s = srv_stream_resolve(c, m->graph, r->flags & CHAN_RF_PTDS, r->thread);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    if (!srv_stream_capturing(c, s))
        return CUDA_ERROR_NOT_READY; /* ended meanwhile: the client enqueues it plainly */
    CUstream st = srv_stream_prepare(c, s);
    CUstreamCaptureStatus status;
    CUgraph graph = NULL, pg;
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = NULL;
    size_t ndeps = 0;
    CUgraphNode node;
    int slot = slot_new(c, m->fn, m->user);
    if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult res = pair_graph(c, (uint32_t)slot, &pg);
    if (res != CUDA_SUCCESS) {
        slot_unref(c, (uint32_t)slot);
        return res;
    }
    /* The dependencies' array is the driver's, valid until the next call on the stream. */
    res = DRV(cuStreamGetCaptureInfo_v3)(st, &status, NULL, &graph, &deps, &edges, &ndeps);
    if (res == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        res = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    /* The graph is known to the server from now on (the end of the capture makes it the
     * client's, or forgets it with its slots). */
    struct srv_obj *go =
        res == CUDA_SUCCESS ? srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)graph) : NULL;
    if (res == CUDA_SUCCESS && !go &&
        !(go = srv_obj_add(c, SHIM_HT_CUgraph, (uintptr_t)graph, 0, NULL)))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    if (res == CUDA_SUCCESS) {
        /* Edge data other than the default (programmatic edges) needs the generic form. */
        int plain = 1;
        for (size_t i = 0; edges && i < ndeps; i++)
            plain &= edges[i].type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && !edges[i].from_port &&
                     !edges[i].to_port;
        if (plain) {
            res = DRV(cuGraphAddChildGraphNode)(&node, graph, deps, ndeps, pg);
        } else {
            CUgraphNodeParams np;
            memset(&np, 0, sizeof(np));
            np.type = CU_GRAPH_NODE_TYPE_GRAPH;
            np.graph.graph = pg;
            res = DRV(cuGraphAddNode_v2)(&node, graph, deps, edges, ndeps, &np);
        }
    }
    DRV(cuGraphDestroy)(pg);
    if (res == CUDA_SUCCESS)
        res = DRV(cuStreamUpdateCaptureDependencies)(st, &node, 1,
                                                     CU_STREAM_SET_CAPTURE_DEPENDENCIES);
    if (res != CUDA_SUCCESS) {
        slot_unref(c, (uint32_t)slot);
        return res;
    }
    return slots_take(c, go, (uint32_t)slot, 0) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* Adds a host node to a graph of the client's. */
static CUresult add(struct srv_client *c, const struct chan_host_node *m, const uint8_t *depbytes,
                    uint64_t *made)
{
    struct srv_obj *go = srv_obj_find(c, SHIM_HT_CUgraph, m->graph);
    CUgraphNode deps[CHAN_MAX_DEPS], node;
    CUgraph pg;
    if (!go) return CUDA_ERROR_INVALID_VALUE;
    memcpy(deps, depbytes, m->ndeps * sizeof(uint64_t));
    for (uint32_t i = 0; i < m->ndeps; i++)
        if (!srv_obj_find(c, SHIM_HT_CUgraphNode, (uint64_t)(uintptr_t)deps[i]))
            return CUDA_ERROR_INVALID_VALUE;
    int slot = slot_new(c, m->fn, m->user);
    if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult res = pair_graph(c, (uint32_t)slot, &pg);
    if (res == CUDA_SUCCESS) {
        res =
            DRV(cuGraphAddChildGraphNode)(&node, (CUgraph)(uintptr_t)m->graph, deps, m->ndeps, pg);
        DRV(cuGraphDestroy)(pg);
    }
    if (res != CUDA_SUCCESS) {
        slot_unref(c, (uint32_t)slot);
        return res;
    }
    *made = (uint64_t)(uintptr_t)node;
    struct srv_obj *no = srv_obj_add(c, SHIM_HT_CUgraphNode, *made, 1, go);
    if (!no) slot_unref(c, (uint32_t)slot);
    if (!no || slots_take(c, go, (uint32_t)slot, 0)) { /* the reference is dropped */
        DRV(cuGraphDestroyNode)(node);
        if (no) srv_obj_destroyed(c, no);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* Sets a host node's function in its graph: in its slot, or, when a clone or an exec
 * shares that slot, in a copy the node then uses alone. */
static CUresult set(struct srv_client *c, struct srv_obj *no, const struct chan_host_node *m)
{
    CUgraphNode n = (CUgraphNode)(uintptr_t)m->node;
    int s = srv_hostnode_slot(c, n, NULL, NULL);
    if (s < 0) return CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *go = srv_hostnode_top_graph(no);
    if (c->hn[s].refs == 1 || !go) {
        c->ch.callbacks->hn_fn[s] = m->fn;
        c->ch.callbacks->hn_user[s] = m->user;
        return CUDA_SUCCESS;
    }
    int e = slot_new(c, m->fn, m->user);
    if (e < 0 || slots_take(c, go, (uint32_t)e, 0)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = pair_rebind(c, n, (uint32_t)e);
    srv_hostnode_put(c, go, r == CUDA_SUCCESS ? (uint32_t)s : (uint32_t)e);
    return r;
}

void srv_op_host_node(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_host_node m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint64_t out[2] = {0, 0};
    uint32_t out_len = 0;
    struct srv_obj *no = NULL, *x;
    (void)len;           /* its dependencies end it (its %payload line) */
    srv_segment_need(c); /* its done words are in it, device-mapped */
    if (!c->shm_dptr) goto reply;
    memcpy(&m, p, sizeof(m));
    if (!c->cur && (res = srv_use_device(0)) != CUDA_SUCCESS) goto reply;
    res = CUDA_ERROR_INVALID_VALUE;
    if (m.what != CHAN_HN_ADD && m.what != CHAN_HN_CAPTURE &&
        !(no = srv_obj_find(c, SHIM_HT_CUgraphNode, m.node)))
        goto reply;
    switch (m.what) {
    case CHAN_HN_ADD:
        res = add(c, &m, p + sizeof(m), &out[0]);
        out_len = sizeof(out[0]);
        break;
    case CHAN_HN_CAPTURE:
        res = capture(c, r, &m);
        break;
    case CHAN_HN_GET: {
        int s = srv_hostnode_slot(c, (CUgraphNode)(uintptr_t)m.node, NULL, NULL);
        if (s < 0) break;
        out[0] = c->ch.callbacks->hn_fn[s];
        out[1] = c->ch.callbacks->hn_user[s];
        out_len = sizeof(out);
        res = CUDA_SUCCESS;
        break;
    }
    case CHAN_HN_SET:
        res = set(c, no, &m);
        break;
    case CHAN_HN_EXEC_SET:
        if (!(x = srv_obj_find(c, SHIM_HT_CUgraphExec, m.graph))) break;
        if (srv_hostnode_slot(c, (CUgraphNode)(uintptr_t)m.node, NULL, NULL) >= 0)
            res = srv_hostnode_exec_own(c, x, m.node, m.fn, m.user);
        break;
    default:
        break;
    }
reply:
    if (res == CUDA_SUCCESS && out_len) memcpy(srv_lane_data(c, r->lane), out, out_len);
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out_len : 0);
}

void srv_hostnode_exec_unbind(struct srv_obj *x)
{
    struct slots *l = x->ext;
    for (uint32_t i = 0; l && i < l->n; i++)
        l->e[i].node = 0;
}
