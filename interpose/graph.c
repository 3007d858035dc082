/* CUDA graphs: described in cuda_symbols.txt, except kernel nodes, whose parameters only the
 * client can pack (it alone knows each function's layout, server/graphs/graphnodes.c says
 * more): they travel packed, as a launch's do, and the server gives the driver the `extra`
 * form.
 *
 * Reading a kernel node's parameters back (cuGraphKernelNodeGetParams) asks the server,
 * which reads the node from the driver and packs its parameters by the function's layout:
 * so nodes made by a capture, a clone or a child graph read back as well as the client's
 * own. The bytes and the kernelParams array over them are kept here, one record per node,
 * and stay put while the node's parameters do (a later read of the same parameters gives
 * the same array); they go when the parameters change, the node is destroyed or the
 * outermost graph it lies in is. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* Adds a kernel node (what CHAN_KN_ADD), or sets one's parameters in a graph or an exec. */
static CUresult kernel_node_here(unsigned what, CUgraphNode *out, uint64_t graph, CUgraphNode node,
                                 const CUgraphNode *deps, size_t ndeps,
                                 const CUDA_KERNEL_NODE_PARAMS *p);

/* In a process of several GPUs' servers, the request goes to the server of the graph, node
 * or exec it names (route.c), and a node added is kept with it (owned.c). */
static CUresult kernel_node(unsigned what, CUgraphNode *out, uint64_t graph, CUgraphNode node,
                            const CUgraphNode *deps, size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct shim_route saved;
    int routed = what == CHAN_KN_ADD ? shim_route_owned(SHIM_HT_CUgraph, graph, &saved)
                 : what == CHAN_KN_SET
                     ? shim_route_owned(SHIM_HT_CUgraphNode, (uint64_t)(uintptr_t)node, &saved)
                     : shim_route_known(SHIM_HT_CUgraphExec, graph, &saved);
    CUresult r = kernel_node_here(what, out, graph, node, deps, ndeps, p);
    if (r == CUDA_SUCCESS && what == CHAN_KN_ADD)
        shim_owned_made(SHIM_HT_CUgraphNode, (uint64_t)(uintptr_t)*out, graph);
    if (routed) shim_route_end(&saved);
    return r;
}

static CUresult kernel_node_here(unsigned what, CUgraphNode *out, uint64_t graph, CUgraphNode node,
                                 const CUgraphNode *deps, size_t ndeps,
                                 const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!p || (what == CHAN_KN_ADD && !out) || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    if (ndeps > CHAN_MAX_DEPS) return shim_refuse("graph nodes with more than 256 dependencies");
    /* A CUkernel stands for the function of the current context, in either member. */
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    const struct shim_func *fn = shim_func_get((uint64_t)(uintptr_t)f);
    if (!f || !fn) return CUDA_ERROR_INVALID_VALUE;
    shim_hostfn_settle_first(fn); /* a node's kernel may load its code now */
    /* A library's kernel as the server the request goes to names it (replicas.c). */
    uint64_t func = (uint64_t)(uintptr_t)f;
    if ((r = shim_replica_for(func, shim_route_device(), &func)) != CUDA_SUCCESS) return r;
    struct shim_params kp;
    if ((r = shim_kernel_params(fn, p->kernelParams, p->extra, &kp)) != CUDA_SUCCESS) return r;
    size_t deps_bytes = ndeps * sizeof(uint64_t);
    size_t len = sizeof(struct chan_kernel_node) + deps_bytes + kp.bytes;
    uint8_t *buf = malloc(len);
    if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    struct chan_kernel_node m = {
        .what = what,
        .ndeps = (uint32_t)ndeps,
        .graph = graph,
        .node = (uint64_t)(uintptr_t)node,
        .func = func,
        .grid = {p->gridDimX, p->gridDimY, p->gridDimZ},
        .block = {p->blockDimX, p->blockDimY, p->blockDimZ},
        .smem = p->sharedMemBytes,
        .param_bytes = (uint32_t)kp.bytes,
    };
    memcpy(buf, &m, sizeof(m));
    for (size_t i = 0; i < ndeps; i++) {
        uint64_t d = (uint64_t)(uintptr_t)deps[i];
        memcpy(buf + sizeof(m) + i * sizeof(d), &d, sizeof(d));
    }
    shim_kernel_params_write(&kp, buf + sizeof(m) + deps_bytes);
    uint64_t made = 0;
    r = shim_rpc(CHAN_OP_KERNEL_NODE, buf, (uint32_t)len, &made, sizeof(made), NULL);
    free(buf);
    if (r == CUDA_SUCCESS && out) *out = (CUgraphNode)(uintptr_t)made;
    return r;
}

CUresult SHIM_IMPL(cuGraphAddKernelNode_v2)(CUgraphNode *phGraphNode, CUgraph hGraph,
                                            const CUgraphNode *dependencies, size_t numDependencies,
                                            const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return kernel_node(CHAN_KN_ADD, phGraphNode, (uint64_t)(uintptr_t)hGraph, NULL, dependencies,
                       numDependencies, nodeParams);
}

CUresult SHIM_IMPL(cuGraphKernelNodeSetParams_v2)(CUgraphNode hNode,
                                                  const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return kernel_node(CHAN_KN_SET, NULL, 0, hNode, NULL, 0, nodeParams);
}

CUresult SHIM_IMPL(cuGraphExecKernelNodeSetParams_v2)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                      const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return kernel_node(CHAN_KN_EXEC_SET, NULL, (uint64_t)(uintptr_t)hGraphExec, hNode, NULL, 0,
                       nodeParams);
}

/* ---------------------------------------------------------------- reading kernel nodes */

/* One node's parameters as last read: the function, the launch, and params[] pointing
 * into bytes[]. One allocation. */
struct kn_read {
    uint64_t node;
    uint64_t root; /* the outermost graph it lies in (0: unknown): it goes with that */
    uint64_t func;
    uint32_t is_kernel, nparams, param_bytes;
    uint32_t grid[3], block[3], smem;
    void **params;  /* nparams pointers into bytes (the kernelParams returned) */
    uint8_t *bytes; /* param_bytes */
    UT_hash_handle hh;
};

/* Guarded by kn_lock. */
static pthread_mutex_t kn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kn_read *kn_reads;

/* The same function and parameters: the array handed out before still holds them. */
static int kn_same(const struct kn_read *a, const struct kn_read *b)
{
    if (a->func != b->func || a->is_kernel != b->is_kernel || a->nparams != b->nparams ||
        a->param_bytes != b->param_bytes || memcmp(a->bytes, b->bytes, a->param_bytes) != 0)
        return 0;
    for (uint32_t i = 0; i < a->nparams; i++)
        if ((uint8_t *)a->params[i] - a->bytes != (uint8_t *)b->params[i] - b->bytes) return 0;
    return 1;
}

/* A record from the server's CHAN_KN_GET reply (checked: the server describes, the client
 * only indexes by what it was told); NULL if malformed or out of memory. */
static struct kn_read *kn_parse(uint64_t node, const uint8_t *d, uint32_t len)
{
    struct chan_kernel_node_got g;
    struct chan_function f;
    if (len < sizeof(g) + sizeof(f)) return NULL;
    memcpy(&g, d, sizeof(g));
    memcpy(&f, d + sizeof(g), sizeof(f));
    uint64_t layout_bytes = (uint64_t)f.nparams * 8;
    if (f.nparams > CHAN_MAX_PARAMS || f.param_bytes > CHAN_MAX_PARAM_BYTES ||
        len != sizeof(g) + sizeof(f) + layout_bytes + f.param_bytes)
        return NULL;
    const uint8_t *lp = d + sizeof(g) + sizeof(f);
    size_t ptrs = (f.nparams ? f.nparams : 1) * sizeof(void *);
    struct kn_read *k = calloc(1, sizeof(*k) + ptrs + f.param_bytes);
    if (!k) return NULL;
    k->node = node;
    k->root = g.root;
    k->func = g.func;
    k->is_kernel = g.is_kernel;
    k->nparams = f.nparams;
    k->param_bytes = f.param_bytes;
    memcpy(k->grid, g.grid, sizeof(k->grid));
    memcpy(k->block, g.block, sizeof(k->block));
    k->smem = g.smem;
    k->params = (void **)(k + 1);
    k->bytes = (uint8_t *)k->params + ptrs;
    memcpy(k->bytes, lp + layout_bytes, f.param_bytes);
    for (uint32_t i = 0; i < f.nparams; i++) {
        uint32_t off, size;
        memcpy(&off, lp + i * 8, 4);
        memcpy(&size, lp + i * 8 + 4, 4);
        if ((uint64_t)off + size > f.param_bytes) {
            free(k);
            return NULL;
        }
        k->params[i] = k->bytes + off;
    }
    return k;
}

/* Reads node's parameters; *out is the node's record, valid until its parameters change
 * or it goes (see above). */
static CUresult kernel_node_read(CUgraphNode node, struct kn_read *out)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    struct chan_kernel_node m = {.what = CHAN_KN_GET, .node = (uint64_t)(uintptr_t)node};
    const uint8_t *data;
    uint32_t len = 0;
    struct shim_route saved;
    int routed = shim_route_owned(SHIM_HT_CUgraphNode, m.node, &saved); /* its graph's server */
    r = shim_rpc_lane(CHAN_OP_KERNEL_NODE, &m, sizeof(m), &data, &len);
    if (routed) shim_route_end(&saved);
    if (r != CUDA_SUCCESS) return r;
    struct kn_read *k = kn_parse(m.node, data, len);
    if (!k) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&kn_lock);
    struct kn_read *old = NULL;
    HASH_FIND(hh, kn_reads, &m.node, sizeof(m.node), old);
    if (old && kn_same(old, k)) {
        old->root = k->root;
        free(k);
        k = old;
    } else {
        if (old) {
            HASH_DEL(kn_reads, old);
            free(old);
        }
        HASH_ADD(hh, kn_reads, node, sizeof(k->node), k);
    }
    *out = *k;
    pthread_mutex_unlock(&kn_lock);
    return CUDA_SUCCESS;
}

/* Drops the records of a node (root 0) or of every node in a graph (node 0). */
static void kn_forget(uint64_t node, uint64_t root)
{
    struct kn_read *k, *tmp;
    pthread_mutex_lock(&kn_lock);
    HASH_ITER(hh, kn_reads, k, tmp) {
        if ((node && k->node == node) || (root && k->root == root)) {
            HASH_DEL(kn_reads, k);
            free(k);
        }
    }
    pthread_mutex_unlock(&kn_lock);
}

static void destroy_node_after(const void *const *argv)
{
    uint64_t n = (uint64_t)(uintptr_t)*(const CUgraphNode *)argv[0];
    kn_forget(n, 0);
    shim_cond_forget(n, 0);
}

const struct shim_hook shim_hook_kernel_node_forget = {.after = destroy_node_after};

static void destroy_graph_after(const void *const *argv)
{
    uint64_t g = (uint64_t)(uintptr_t)*(const CUgraph *)argv[0];
    if (g) {
        kn_forget(0, g);
        shim_cond_forget(0, g);
    }
}

const struct shim_hook shim_hook_kernel_node_forget_graph = {.after = destroy_graph_after};

CUresult SHIM_IMPL(cuGraphKernelNodeGetParams_v2)(CUgraphNode hNode,
                                                  CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    struct kn_read k;
    CUresult r = kernel_node_read(hNode, &k);
    if (r != CUDA_SUCCESS) return r;
    memset(nodeParams, 0, sizeof(*nodeParams));
    if (k.is_kernel)
        nodeParams->kern = (CUkernel)(uintptr_t)k.func;
    else
        nodeParams->func = (CUfunction)(uintptr_t)k.func;
    nodeParams->gridDimX = k.grid[0];
    nodeParams->gridDimY = k.grid[1];
    nodeParams->gridDimZ = k.grid[2];
    nodeParams->blockDimX = k.block[0];
    nodeParams->blockDimY = k.block[1];
    nodeParams->blockDimZ = k.block[2];
    nodeParams->sharedMemBytes = k.smem;
    nodeParams->kernelParams = k.params;
    return CUDA_SUCCESS;
}

/* The first version has no kernel member: a library's kernel reads back as the function
 * of the current context it stands for (which every call here takes for it). */
CUresult SHIM_IMPL(cuGraphKernelNodeGetParams)(CUgraphNode hNode,
                                               CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS q;
    CUresult r = SHIM_IMPL(cuGraphKernelNodeGetParams_v2)(hNode, &q);
    if (r != CUDA_SUCCESS) return r;
    memset(nodeParams, 0, sizeof(*nodeParams));
    nodeParams->func = q.func ? q.func : (CUfunction)q.kern;
    nodeParams->gridDimX = q.gridDimX;
    nodeParams->gridDimY = q.gridDimY;
    nodeParams->gridDimZ = q.gridDimZ;
    nodeParams->blockDimX = q.blockDimX;
    nodeParams->blockDimY = q.blockDimY;
    nodeParams->blockDimZ = q.blockDimZ;
    nodeParams->sharedMemBytes = q.sharedMemBytes;
    nodeParams->kernelParams = q.kernelParams;
    return CUDA_SUCCESS;
}

/* An allocation node's address is the client's device memory from now on (its graph's to
 * allocate): the mirror knows it, so that copies naming it go to the device. */
static void graphmem_alloc_after(const void *const *argv)
{
    const CUDA_MEM_ALLOC_NODE_PARAMS *p = *(CUDA_MEM_ALLOC_NODE_PARAMS *const *)argv[4];
    struct shim_range rg = {.base = p->dptr,
                            .size = p->bytesize,
                            .kind = SHIM_HT_MEM_GRAPHMEM,
                            .owner = (uint64_t)(uintptr_t)*(const CUgraph *)argv[1]};
    if (p->dptr && shim_range_find(rg.base, rg.size, NULL) != 0) shim_range_add(&rg);
}

const struct shim_hook shim_hook_graphmem_alloc = {.after = graphmem_alloc_after};

/* A stream-ordered allocation made in a stream capture is an allocation node's address
 * (server/graphs/graphmem.c): graph memory in the mirror too, so that it stays known after a free
 * outside the graph (the graph allocates it again at its next launch), as the server's
 * table keeps it. Asked of the server only while this process has a capture going. (A
 * _ptsz call's NULL stream, the thread's own, is not asked about: its range stays a pool's,
 * device memory all the same.) */
static void captured_alloc(const void *const *argv, int stream_arg)
{
    CUdeviceptr p = **(CUdeviceptr *const *)argv[0];
    CUstream s = *(const CUstream *)argv[stream_arg];
    struct shim_range rg;
    /* The legacy stream never captures. */
    if (!p || !s || s == CU_STREAM_LEGACY || !shim_capture_active(s) ||
        shim_range_remove(p, &rg) != 0)
        return;
    rg.kind = SHIM_HT_MEM_GRAPHMEM;
    rg.owner = 0;
    shim_range_add(&rg);
}

static void alloc_async_after(const void *const *argv)
{
    captured_alloc(argv, 2);
}

static void alloc_pool_async_after(const void *const *argv)
{
    captured_alloc(argv, 3);
}

const struct shim_hook shim_hook_alloc_async = {.after = alloc_async_after};
const struct shim_hook shim_hook_alloc_pool_async = {.after = alloc_pool_async_after};
