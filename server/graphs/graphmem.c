/* Graph memory (allocation and free nodes). An allocation node's address is fixed when the
 * node is added: it becomes a `graphmem` range of the client's, so that its later calls
 * naming it (memcpy, memset and kernel nodes, copies, cuMemFreeAsync) pass the range
 * checks and another client's do not. Its bytes count against the client's limit from the
 * node's creation (the size is known then, the moment a launch allocates it is not), until
 * the record goes. The record belongs to the node's graph and outlives it (the exec, or
 * memory a launch left allocated, may still use the address): it goes when the client
 * frees the memory outside a graph once the graph is gone, or when the client leaves.
 * A cuMemAllocAsync or cuMemAllocFromPoolAsync captured on a stream is an allocation node
 * the driver adds to the graph being captured (from the client's own pool's properties:
 * pools.c): the same, the record belonging to that graph's record (made, not owned, if the
 * client did not know the graph yet; the end of the capture makes it the client's). If the
 * capture fails, or its stream or client goes first, the driver destroys the graph, never
 * launched: its graph memory was never allocated, and its records go with the graph's
 * (capture_graph_gone, graph.c). A captured cuMemFreeAsync is a free node, of graph memory only. */
#include "server/core/server.h"
#include "server/code/codegate.h"
#include "server/core/streamrec.h"
#include "server/core/clients.h"
#include "server/core/registry.h"
#include "server/core/devices.h"
#include "server/graphs/graph.h"
#include "server/limits/account.h"

#include <stdio.h>
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
    if (o->parent && o->parent->owned) (void)srv_gated_free(c, (CUdeviceptr)o->key.value);
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
