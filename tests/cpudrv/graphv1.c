// The first versions of the graph and stream capture entry points, still exported by the
// driver for older runtimes: cuda.h now gives their names to later versions, so the macros
// are removed here. Each calls its later version.
#include "graph.h"

#include <stdio.h>
#include <string.h>

#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies
#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeGetParams
#undef cuGraphKernelNodeSetParams
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphGetEdges
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
#undef cuGraphAddDependencies
#undef cuGraphRemoveDependencies
#undef cuGraphInstantiate
#undef cuGraphExecUpdate
#undef cuGraphAddNode

CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                cuuint64_t *id_out);
CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                           size_t numDependencies, unsigned int flags);
CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                    const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);
CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                    size_t *numDependencies);
CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                      size_t *numDependentNodes);
CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                size_t numDependencies);
CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   size_t numDependencies);
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                            char *logBuffer, size_t bufferSize);
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize);
CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           CUgraphExecUpdateResult *updateResult_out);
CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams);

// Begins a capture in the global mode (the first version had no mode).
CUresult cuStreamBeginCapture(CUstream hStream)
{
    return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

// A stream's capture status and id.
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                cuuint64_t *id_out)
{
    return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

// cuStreamUpdateCaptureDependencies_v2 without edge data.
CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                           size_t numDependencies, unsigned int flags)
{
    return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, NULL, numDependencies,
                                                flags);
}

static CUDA_KERNEL_NODE_PARAMS kernel_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
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
    return q;
}

// cuGraphAddKernelNode_v2 with a function handle.
CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    if (!nodeParams)
        return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, NULL);
    CUDA_KERNEL_NODE_PARAMS q = kernel_v2(nodeParams);
    return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &q);
}

// cuGraphKernelNodeGetParams_v2, a library kernel given back as the function handle.
CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    if (!nodeParams) return cuGraphKernelNodeGetParams_v2(hNode, NULL);
    CUDA_KERNEL_NODE_PARAMS q;
    CUresult rc = cuGraphKernelNodeGetParams_v2(hNode, &q);
    if (rc) return rc;
    nodeParams->func = q.func ? q.func : (CUfunction)q.kern;
    nodeParams->gridDimX = q.gridDimX;
    nodeParams->gridDimY = q.gridDimY;
    nodeParams->gridDimZ = q.gridDimZ;
    nodeParams->blockDimX = q.blockDimX;
    nodeParams->blockDimY = q.blockDimY;
    nodeParams->blockDimZ = q.blockDimZ;
    nodeParams->sharedMemBytes = q.sharedMemBytes;
    nodeParams->kernelParams = q.kernelParams;
    nodeParams->extra = q.extra;
    return CUDA_SUCCESS;
}

// cuGraphKernelNodeSetParams_v2 with a function handle.
CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    if (!nodeParams) return cuGraphKernelNodeSetParams_v2(hNode, NULL);
    CUDA_KERNEL_NODE_PARAMS q = kernel_v2(nodeParams);
    return cuGraphKernelNodeSetParams_v2(hNode, &q);
}

// cuGraphExecKernelNodeSetParams_v2 with a function handle.
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    if (!nodeParams) return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, NULL);
    CUDA_KERNEL_NODE_PARAMS q = kernel_v2(nodeParams);
    return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &q);
}

// cuGraphGetEdges_v2 without edge data.
CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
    return cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

// cuGraphNodeGetDependencies_v2 without edge data.
CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                    size_t *numDependencies)
{
    return cuGraphNodeGetDependencies_v2(hNode, dependencies, NULL, numDependencies);
}

// cuGraphNodeGetDependentNodes_v2 without edge data.
CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                      size_t *numDependentNodes)
{
    return cuGraphNodeGetDependentNodes_v2(hNode, dependentNodes, NULL, numDependentNodes);
}

// cuGraphAddDependencies_v2 with default edge data.
CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                size_t numDependencies)
{
    return cuGraphAddDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

// cuGraphRemoveDependencies_v2 with default edge data.
CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   size_t numDependencies)
{
    return cuGraphRemoveDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

// Instantiates with no flags; the node on a cycle, and a line of log, if that failed.
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                            char *logBuffer, size_t bufferSize)
{
    CUDA_GRAPH_INSTANTIATE_PARAMS p;
    memset(&p, 0, sizeof p);
    CUresult rc = cuGraphInstantiateWithParams(phGraphExec, hGraph, &p);
    if (phErrorNode) *phErrorNode = p.hErrNode_out;
    if (logBuffer && bufferSize)
        snprintf(logBuffer, bufferSize, "%s",
                 p.result_out == CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE ? "graph has a cycle"
                                                                          : "");
    return rc;
}

// Same as cuGraphInstantiate.
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize)
{
    return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

// cuGraphExecUpdate_v2 with its result in two outputs.
CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           CUgraphExecUpdateResult *updateResult_out)
{
    if (!hErrorNode_out || !updateResult_out) return CUDA_ERROR_INVALID_VALUE;
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    info.result = CU_GRAPH_EXEC_UPDATE_ERROR;
    CUresult rc = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
    *hErrorNode_out = info.errorNode;
    *updateResult_out = info.result;
    return rc;
}

// cuGraphAddNode_v2 with default edge data.
CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}
