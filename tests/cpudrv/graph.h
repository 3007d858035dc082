// Graphs, their nodes and executable graphs: the structures shared by graph.c (graphs,
// nodes, edges, clones, queries), graphnode.c (node parameters), graphexec.c (executable
// graphs and their launches) and capture.c (stream capture). Everything here is protected
// by cpudrv_big.
//
// A graph and each of its nodes are driver objects whose handle is their address; a node
// is a live handle exactly while its graph is one. An executable graph owns a private copy
// of the graph it came from (no handles), so it outlives that graph, and each of its nodes
// remembers the id of the node it was copied from (which is how the Exec*SetParams calls,
// given the original node, find their node).
#ifndef CPUDRV_GRAPH_H
#define CPUDRV_GRAPH_H

#include "cpudrv.h"

struct cpudrv_gnode;

struct cpudrv_edge {
    struct cpudrv_gnode *n;
    CUgraphEdgeData data;
};

struct cpudrv_edges {
    struct cpudrv_edge *e;
    size_t n, cap;
};

// A kernel node: the launch, with its own copy of the arguments.
struct cpudrv_kparams {
    const void *handle;    // the CUfunction given, or the CUkernel (kern)
    int kern;              // handle is a CUkernel
    CUcontext ctx;         // the context given with a CUkernel, else NULL
    struct cpudrv_func *f; // f->mod: a reference held
    unsigned grid[3], block[3], shmem;
    unsigned char *args; // f->argbytes
    void **kp;           // f->nparams pointers into args: the kernelParams form
    int extra;           // last set through `extra`, so given back in that form
    void *xv[5];         // the extra form: BUFFER_POINTER args BUFFER_SIZE &xsize END
    size_t xsize;
    CUkernelNodeAttrValue *attr; // CPUDRV_STREAM_ATTRS values (stored, not enforced), or
                                 // NULL while all are the defaults
};

// A memcpy node: its parameters, resolved again at each launch (the memory may be gone).
struct cpudrv_mparams {
    CUDA_MEMCPY3D p;
    CUcontext ctx;
};

// A memset node.
struct cpudrv_sparams {
    CUDA_MEMSET_NODE_PARAMS p;
    CUcontext ctx;
};

// A batch mem-op node: its own copy of the operations.
struct cpudrv_bparams {
    CUcontext ctx;
    unsigned count, flags;
    CUstreamBatchMemOpParams *ops;
};

struct cpudrv_graph;
struct cpudrv_gmem;

// A conditional node: the handle it reads, its kind and its body graphs, made by the node
// and owned by it (each body's owner is the node, as a child graph's is).
struct cpudrv_cparams {
    CUgraphConditionalHandle h;
    CUgraphConditionalNodeType type;
    unsigned size;
    struct cpudrv_graph **body; // size graphs; given back to the caller as a CUgraph array
    CUcontext ctx;
};

// A conditional handle, made for a graph: the conditional nodes of that graph and of the
// graphs nested in it may read it. Its value lives in each executable graph (graphexec.c).
struct cpudrv_cond {
    CUgraphConditionalHandle h;
    unsigned dflt, flags;
    CUcontext ctx;
};

struct cpudrv_gnode {
    struct cpudrv_obj o;
    struct cpudrv_graph *g;
    struct cpudrv_gnode *prev, *next; // g's nodes, in creation order
    CUgraphNodeType type;
    unsigned long long id;   // process-unique
    unsigned long long orig; // the node this one was copied from (clone, exec), or 0
    struct cpudrv_edges in, out;
    int disabled; // in an executable graph: cuGraphNodeSetEnabled(0)
    size_t mark;  // scratch of the walks (sorting, reachability)
    union {
        struct cpudrv_kparams k;
        struct cpudrv_mparams m;
        struct cpudrv_sparams s;
        CUDA_HOST_NODE_PARAMS h;
        struct cpudrv_bparams b;
        struct cpudrv_event *ev;    // event record and wait nodes: a reference held
        struct cpudrv_graph *child; // child graph nodes: owned
        struct cpudrv_gmem *gm;     // memory allocation nodes: a reference held
        CUdeviceptr fptr;           // memory free nodes: the address freed
        struct cpudrv_cparams c;    // conditional nodes
    } u;
};

struct cpudrv_graph {
    struct cpudrv_obj o;
    struct cpudrv_gnode *head, *tail;
    size_t n;
    unsigned long long id, orig; // orig: the graph this one was cloned from, or 0
    struct cpudrv_gnode *owner;  // the child graph node embedding this graph, or NULL
    struct cpudrv_capture *cap;  // a capture in progress into this graph, or NULL
    struct cpudrv_cond *conds;   // the conditional handles made for it (copied by clones)
    size_t nconds;
};

/* graph.c */

// The live graph / node whose handle is h, or NULL.
struct cpudrv_graph *cpudrv_graph_find(CUgraph h);
struct cpudrv_gnode *cpudrv_gnode_find(CUgraphNode h);
// A new empty graph; publish: as a handle.
struct cpudrv_graph *cpudrv_graph_new(int publish);
// Ends a graph (its handle if it has one) and all its nodes.
void cpudrv_graph_destroy(struct cpudrv_graph *g);
// A new node of a type, in no graph yet, its parameters zeroed.
struct cpudrv_gnode *cpudrv_gnode_new(CUgraphNodeType type);
// Adds n to g after its dependencies (nodes of g, no duplicates; edge may be NULL); on
// failure n is freed.
CUresult cpudrv_graph_attach(struct cpudrv_graph *g, struct cpudrv_gnode *n,
                             const CUgraphNode *deps, const CUgraphEdgeData *edge, size_t ndeps);
// Frees a node that is in no graph (or whose graph is going).
void cpudrv_gnode_free(struct cpudrv_gnode *n);
// Removes n from its graph, with its edges, and frees it.
void cpudrv_gnode_destroy(struct cpudrv_gnode *n);
// A deep copy of g (child graphs too); publish: handles for it and its nodes. Each copy
// remembers what it was copied from.
CUresult cpudrv_graph_clone(const struct cpudrv_graph *g, int publish, struct cpudrv_graph **out);
// g's nodes in an order that respects every edge (Kahn's, from the roots in creation
// order): a malloc'd array; INVALID_VALUE (and *bad, a node on or after a cycle) for a cycle.
CUresult cpudrv_graph_order(const struct cpudrv_graph *g, struct cpudrv_gnode ***order,
                            struct cpudrv_gnode **bad);
// 1 if g is being captured into (no node may leave it, nor it be instantiated).
int cpudrv_graph_capturing(const struct cpudrv_graph *g);
// The conditional handle h as seen from g: made for g or for a graph g is nested in (as a
// child graph or a conditional body), else NULL.
const struct cpudrv_cond *cpudrv_cond_find(const struct cpudrv_graph *g,
                                           CUgraphConditionalHandle h);

/* graphnode.c */

// Set a node's parameters from the caller's (validated; the previous ones are released
// only on success). cur: the calling thread's context, or NULL.
CUresult cpudrv_gnode_set_kernel(struct cpudrv_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p,
                                 struct cpudrv_ctx *cur);
CUresult cpudrv_gnode_set_memcpy(struct cpudrv_gnode *n, const CUDA_MEMCPY3D *p, CUcontext ctx,
                                 struct cpudrv_ctx *cur);
CUresult cpudrv_gnode_set_memset(struct cpudrv_gnode *n, const CUDA_MEMSET_NODE_PARAMS *p,
                                 CUcontext ctx, struct cpudrv_ctx *cur);
CUresult cpudrv_gnode_set_batch(struct cpudrv_gnode *n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p,
                                struct cpudrv_ctx *cur);
// A kernel node's parameters from a launch already validated (captured launches).
CUresult cpudrv_gnode_set_launch(struct cpudrv_gnode *n, const struct cpudrv_launch *L,
                                 const void *handle);
// Releases what a node's parameters hold (references, copies, a child graph).
void cpudrv_gnode_params_free(struct cpudrv_gnode *n);
// Copies src's parameters into dst (of the same type; child graphs are cloned, publish as
// for cpudrv_graph_clone), releasing dst's.
CUresult cpudrv_gnode_params_copy(struct cpudrv_gnode *dst, const struct cpudrv_gnode *src,
                                  int publish);
// The node type's name as the driver's DOT output writes it ("KERNEL", "MEMCPY"...).
const char *cpudrv_gnode_type_name(CUgraphNodeType t);
// Reserved members of a CUgraphNodeParams (and a memcpy member's flags) must be zero.
CUresult cpudrv_node_params_check(const CUgraphNodeParams *p);
// The typed forms of the kernel and memset members of CUgraphNodeParams.
CUDA_KERNEL_NODE_PARAMS cpudrv_kernel_params_typed(const CUDA_KERNEL_NODE_PARAMS_v3 *p);
CUDA_MEMSET_NODE_PARAMS cpudrv_memset_params_typed(const CUDA_MEMSET_NODE_PARAMS_v2 *p);

/* capture.c */

// Adds n (of no graph yet) to capturing stream s's capture, after s's dependencies; s then
// depends on n alone. n is freed if it could not be added.
CUresult cpudrv_capture_add(struct cpudrv_stream *s, struct cpudrv_gnode *n);

/* graphmem.c: graph memory (allocation and free nodes) */

// One allocation node's memory: its address is fixed when the node is added; it is
// "allocated" from a launch reaching the node to a free (node, cuMemFree, cuMemFreeAsync).
// References: the node, and its copies in executable graphs. Its range goes when nobody
// refers to it and it is not allocated.
struct cpudrv_gmem {
    uintptr_t base;
    size_t size;
    int dev;
    int refs;
    int allocated;
    unsigned long long id; // of its range
    CUmemPoolProps props;
    const void *graph;               // the handle of the graph whose node made it
    struct cpudrv_gmem *prev, *next; // every graph allocation but aliases (for aliasing)
    struct cpudrv_gmem *alias_of;    // an alias: the allocation whose address it takes
};
void cpudrv_gmem_ref(struct cpudrv_gmem *m);
void cpudrv_gmem_put(struct cpudrv_gmem *m);
// 1 if g holds a memory allocation or free node (such graphs cannot be cloned, be a
// child graph, or have two instantiations at once).
int cpudrv_graph_has_mem(const struct cpudrv_graph *g);
// 1 if g's allocations belong to an executable graph already.
int cpudrv_graph_mem_instantiated(const struct cpudrv_graph *g);
// Before a launch of x's nodes: INVALID_VALUE if an allocation is still allocated (and
// x does not free it on launch); after it: marks what the launch allocates and frees.
CUresult cpudrv_gmem_launch_check(struct cpudrv_gnode *const *order, size_t n, int autofree);
void cpudrv_gmem_launched(struct cpudrv_gnode *const *order, size_t n);
// A free outside any graph (cuMemFree, cuMemFreeAsync) of graph memory: INVALID_VALUE if
// it is not allocated.
CUresult cpudrv_gmem_free_outside(struct cpudrv_gmem *m);
// New nodes' parameters: an allocation (its address written to p->dptr), a free of dptr.
CUresult cpudrv_gmem_node_set(struct cpudrv_gnode *n, CUDA_MEM_ALLOC_NODE_PARAMS *p,
                              const struct cpudrv_graph *g);
CUresult cpudrv_gmem_free_node_set(struct cpudrv_gnode *n, CUdeviceptr dptr,
                                   const struct cpudrv_graph *g);

#endif
