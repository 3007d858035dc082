/* Conditional graph nodes (IF, WHILE, SWITCH): their handles and the nodes themselves.
 *
 * A handle is a 64-bit value the driver makes for a graph; nothing says it is unique
 * across graphs (one client's two graphs may get the same value), so its registry record
 * is keyed by a mix of the graph and the value (cond_key), and belongs to the graph: a
 * conditional node may name a handle its client made for the node's graph or for a graph
 * that graph lies in (a body, a child graph), as the driver allows, and nothing else.
 *
 * A conditional node is added by cuGraphAddNode alone (no typed call stands for it), so
 * it has an operation of its own (CHAN_OP_COND_NODE). The driver makes the node's body
 * graphs: they become the client's graphs, belonging to the node and not owned (destroyed
 * with it, as the driver does; never by cuGraphDestroy, which the driver refuses), to which
 * the client adds nodes as to any graph of its own. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/registry.h"
#include "server/core/reply.h"

#include <string.h>

/* The record of handle h of graph g: a value no two (graph, handle) pairs of one client
 * share but by a 64-bit accident, never 0 (register_outputs skips 0). */
static uint64_t cond_key(uint64_t g, uint64_t h)
{
    uint64_t x = g ^ (h * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x ? x : 1;
}

/* cuGraphConditionalHandleCreate's arguments: the handle out, the graph, the context, the
 * default value, the flags. The real handle waits here while the registry takes its key. */
#define COND_REAL (CHAN_MAX_ARGS - 1)
_Static_assert(COND_REAL > 5, "cuGraphConditionalHandleCreate's values leave room");

/* The driver's handle, and its key in the output, which the generic path registers (new:,
 * belonging to the graph); `after` gives the client the driver's value. */
static CUresult handle_call(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    CUgraphConditionalHandle h = 0;
    if (!k->a.ptr[0]) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = DRV(cuGraphConditionalHandleCreate)(&h, (CUgraph)(uintptr_t)k->vals[1],
                                                     (CUcontext)(uintptr_t)k->vals[2],
                                                     (unsigned)k->vals[3], (unsigned)k->vals[4]);
    if (r != CUDA_SUCCESS) return r;
    k->vals[COND_REAL] = h;
    uint64_t key = cond_key(k->a.val[1], h);
    memcpy(k->a.ptr[0], &key, sizeof(key));
    return CUDA_SUCCESS;
}

static CUresult handle_after(struct srv_client *c, struct srv_call *k)
{
    (void)c;
    memcpy(k->a.ptr[0], &k->vals[COND_REAL], sizeof(uint64_t));
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_cond_handle = {.call = handle_call, .after = handle_after};

/* 1 if h is a handle the client made for graph g or a graph g lies in. */
static int cond_known(struct srv_client *c, struct srv_obj *g, uint64_t h)
{
    for (; g; g = g->parent)
        if (g->key.type == SHIM_HT_CUgraph &&
            srv_obj_find(c, SHIM_HT_CUgraphConditionalHandle, cond_key(g->key.value, h)))
            return 1;
    return 0;
}

/* Adds the node; its record and its bodies' belong to what they belong to, or it goes. */
static CUresult add(struct srv_client *c, const struct chan_cond_node *m, struct srv_obj *g,
                    const CUgraphNode *deps, uint8_t *out, uint32_t *out_len)
{
    CUcontext ctx = NULL;
    if (m->ctx) {
        struct srv_ctx *x = srv_ctx_get(c, m->ctx);
        if (!x) return CUDA_ERROR_INVALID_CONTEXT;
        ctx = srv.ctx[x->device];
    }
    CUgraphNodeParams np;
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = m->handle;
    np.conditional.type = (CUgraphConditionalNodeType)m->type;
    np.conditional.size = m->size;
    np.conditional.ctx = ctx;
    CUgraphNode n = NULL;
    CUresult r =
        DRV(cuGraphAddNode_v2)(&n, (CUgraph)(uintptr_t)m->graph, deps, NULL, m->ndeps, &np);
    if (r != CUDA_SUCCESS) return r;
    struct chan_cond_node_made made = {.node = (uint64_t)(uintptr_t)n};
    struct srv_obj *no = srv_obj_add(c, SHIM_HT_CUgraphNode, made.node, 1, g);
    for (uint32_t i = 0; no && np.conditional.phGraph_out && i < m->size; i++) {
        uint64_t b = (uint64_t)(uintptr_t)np.conditional.phGraph_out[i];
        if (!srv_obj_add(c, SHIM_HT_CUgraph, b, 0, no)) r = CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(out + sizeof(made) + (size_t)i * 8, &b, 8);
    }
    if (!no || !np.conditional.phGraph_out || r != CUDA_SUCCESS) {
        DRV(cuGraphDestroyNode)(n);
        if (no) srv_obj_destroyed(c, no);
        return no && np.conditional.phGraph_out ? r : CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (struct srv_obj *p = g; p; p = p->parent)
        if (p->key.type == SHIM_HT_CUgraph) made.root = p->key.value;
    memcpy(out, &made, sizeof(made));
    *out_len = (uint32_t)sizeof(made) + m->size * 8u;
    return CUDA_SUCCESS;
}

void srv_op_cond_node(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_cond_node m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t out_len = 0;
    /* Its dependencies end it, and its bodies fit the reply (its %payload line: the client
     * refuses more first; the driver refuses none). */
    (void)len;
    memcpy(&m, p, sizeof(m));
    if (!c->cur && (res = srv_use_device(0)) != CUDA_SUCCESS) goto reply;
    /* Everything it names is the client's. */
    res = CUDA_ERROR_INVALID_VALUE;
    struct srv_obj *g = srv_obj_find(c, SHIM_HT_CUgraph, m.graph);
    if (!g || !cond_known(c, g, m.handle)) goto reply;
    CUgraphNode deps[CHAN_MAX_DEPS];
    memcpy(deps, p + sizeof(m), (size_t)m.ndeps * sizeof(uint64_t));
    for (uint32_t i = 0; i < m.ndeps; i++)
        if (!srv_obj_find(c, SHIM_HT_CUgraphNode, (uint64_t)(uintptr_t)deps[i])) goto reply;
    res = add(c, &m, g, deps, srv_lane_data(c, r->lane), &out_len);
reply:
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? out_len : 0);
}
