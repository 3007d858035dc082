/* CUDA graphs: described in cuda_symbols.txt, except kernel nodes, whose parameters only the
 * client can pack (it alone knows each function's layout, server/graph.c says more): they
 * travel packed, as a launch's do, and the server gives the driver the `extra` form. */
#include "interpose/shim.h"

#include <stdlib.h>
#include <string.h>

/* Adds a kernel node (what CHAN_KN_ADD), or sets one's parameters in a graph or an exec. */
static CUresult kernel_node(unsigned what, CUgraphNode *out, uint64_t graph, CUgraphNode node,
                            const CUgraphNode *deps, size_t ndeps,
                            const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!p || (what == CHAN_KN_ADD && !out) || (ndeps && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if (ndeps > CHAN_MAX_DEPS)
        return shim_refuse("graph nodes with more than 256 dependencies");
    /* A CUkernel stands for the function of the current context, in either member. */
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    const struct shim_func *fn = shim_func_get((uint64_t)(uintptr_t)f);
    if (!f || !fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct shim_params kp;
    if ((r = shim_kernel_params(fn, p->kernelParams, p->extra, &kp)) != CUDA_SUCCESS)
        return r;
    size_t deps_bytes = ndeps * sizeof(uint64_t);
    size_t len = sizeof(struct chan_kernel_node) + deps_bytes + kp.bytes;
    uint8_t *buf = malloc(len);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct chan_kernel_node m = {
        .what = what,
        .ndeps = (uint32_t)ndeps,
        .graph = graph,
        .node = (uint64_t)(uintptr_t)node,
        .func = (uint64_t)(uintptr_t)f,
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
    if (r == CUDA_SUCCESS && out)
        *out = (CUgraphNode)(uintptr_t)made;
    return r;
}

CUresult SHIM_IMPL(cuGraphAddKernelNode_v2)(CUgraphNode *phGraphNode, CUgraph hGraph,
                                            const CUgraphNode *dependencies,
                                            size_t numDependencies,
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
