// Peer access between contexts, as cuda.h states it: one-way, per pair of contexts, between
// distinct devices (cuDeviceCanAccessPeer says every pair of distinct devices here). Nothing
// else changes: this driver's memory is the process's, reachable from every context anyway.
#include "cpudrv.h"

// The current context and the peer context, checked (cpudrv_big held on success): the
// errors for no current context or an invalid peer (the current one itself is the device
// check's: below).
static CUresult pair(CUcontext peerContext, struct cpudrv_ctx **cur, struct cpudrv_ctx **peer)
{
    CUresult rc = cpudrv_enter_any(cur);
    if (rc) return rc;
    if ((rc = cpudrv_ctx_find(peerContext, peer)) == CUDA_SUCCESS && !(*peer)->active)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc) cpudrv_unlock();
    return rc;
}

static int find(const struct cpudrv_ctx *cur, const struct cpudrv_ctx *peer)
{
    for (unsigned i = 0; i < cur->npeers; i++)
        if (cur->peers[i] == peer->life) return (int)i;
    return -1;
}

// The current context, or another of its device: no device is its own peer. Driver 580 on
// two H200s answers PEER_ACCESS_UNSUPPORTED for both (tests/progs/peer.c, natively).
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    struct cpudrv_ctx *cur, *peer;
    CUresult rc = cpudrv_ready();
    if (!rc && Flags != 0) rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) rc = pair(peerContext, &cur, &peer);
    if (rc) return TR(rc);
    if (cur->dev == peer->dev)
        rc = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    else if (find(cur, peer) >= 0)
        rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else if (cur->npeers == CPUDRV_MAX_PEERS)
        rc = CUDA_ERROR_TOO_MANY_PEERS;
    else
        cur->peers[cur->npeers++] = peer->life;
    cpudrv_unlock();
    return TR(rc);
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    struct cpudrv_ctx *cur, *peer;
    CUresult rc = pair(peerContext, &cur, &peer);
    if (rc) return TR(rc);
    int i = find(cur, peer);
    if (i < 0)
        rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        cur->peers[i] = cur->peers[--cur->npeers];
    cpudrv_unlock();
    return TR(rc);
}
