/* Peer access (cuCtxEnablePeerAccess, cuCtxDisablePeerAccess), per client and context.
 *
 * A client's contexts are the device's one shared context in the server, so what a client
 * enables is kept as its own: the pairs (its current context, the peer context), each enabled
 * once until it disables it, destroys either context or leaves. The answers (already enabled,
 * not enabled, unsupported) come from that state alone, so one client's enable or disable never
 * changes what another sees.
 *
 * A fault (fault.c) kills a device's shared context for this server for good: a client's
 * pairs with a context that died go with it, and an enable or disable naming such a context
 * answers the fault, as every call in it does (the real driver's answer for a dead peer is
 * to be confirmed on a GPU; the CPU test driver keeps the pair).
 *
 * The shared context's own peer access is enabled in the driver at a client's first enable
 * of a pair of devices and left so for the server's life. No flag says it was: the context
 * that replaces a dead one is the successor server's (handover.c), which starts without it,
 * and each client's first enable of a pair asks the driver again (its ALREADY_ENABLED is a
 * success here). It is never disabled when no client holds it any more: the driver's disable
 * unmaps every allocation of the peer from the context, and its enable maps them again, a
 * cost that grows with all clients' allocations and that a client coming and going would
 * make every other client pay; it grants nothing the clients have not already: the arena's
 * memory is mapped for every device that can reach it (arena.c, access_of), and kernels can
 * reach any address of the shared context anyway (as on pre-Volta MPS, DESIGN.md). */
#include "server/core/server.h"
#include "server/core/family.h"
#include "server/core/driver.h"
#include "server/core/streamrec.h"

#include <stdlib.h>

/* Pairs one client may hold: every pair of its contexts of 8 devices (CUDA_ERROR_TOO_MANY_PEERS
 * past it, the driver's answer when its own resources run out). */
#define PEER_MAX 64

struct srv_peers {
    unsigned n;
    struct {
        uint32_t ctx, peer; /* the client's context ids */
    } pair[PEER_MAX];
};

/* The index of pair (ctx, peer) in the client's list, or -1. */
static int find(const struct srv_client *c, uint32_t ctx, uint32_t peer)
{
    const struct srv_peers *p = c->peers;
    for (unsigned i = 0; p && i < p->n; i++)
        if (p->pair[i].ctx == ctx && p->pair[i].peer == peer) return (int)i;
    return -1;
}

static void drop(struct srv_client *c, unsigned i)
{
    c->peers->pair[i] = c->peers->pair[--c->peers->n];
}

/* The client's current context and the peer context the call names (the generic path has
 * refused an id the client does not have): INVALID_CONTEXT where the driver says it. The
 * current context as its own peer is no error here: the device checks answer it (below). */
static CUresult pair_of(struct srv_client *c, struct srv_call *k, struct srv_ctx **peer)
{
    *peer = k->a.val[0] ? srv_ctx_get(c, (uint32_t)k->a.val[0]) : NULL;
    if (!c->cur || !*peer) return CUDA_ERROR_INVALID_CONTEXT;
    return (*peer)->fault; /* a peer context a fault killed: its error (above) */
}

/* The driver's own checks, in its order (flags, contexts, devices, already enabled), then
 * the shared context's peer access, then the client's pair. */
static CUresult peer_enable(struct srv_client *c, struct srv_call *k)
{
    struct srv_ctx *peer;
    if (k->a.val[1] != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = pair_of(c, k, &peer);
    if (r != CUDA_SUCCESS) return r;
    int dev = c->cur->device, pdev = peer->device, can = 0;
    /* The current context, or another of its device (the client made several): no device
     * is its own peer. Driver 580 on two H200s answers PEER_ACCESS_UNSUPPORTED for both
     * (tests/progs/peer.c, natively). */
    if (dev == pdev) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if ((r = DRV(cuDeviceCanAccessPeer)(&can, dev, pdev)) != CUDA_SUCCESS) return r;
    if (!can) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (find(c, c->cur->id, peer->id) >= 0) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (!c->peers && !(c->peers = calloc(1, sizeof(*c->peers)))) return CUDA_ERROR_OUT_OF_MEMORY;
    if (c->peers->n == PEER_MAX) return CUDA_ERROR_TOO_MANY_PEERS;
    /* In the device's shared context, whatever context (a green one) the worker has current. */
    /* The peer's shared context exists: the client's context there was made (context.c). */
    if ((r = srv_push_device(dev)) != CUDA_SUCCESS) return r;
    r = DRV(cuCtxEnablePeerAccess)(srv.ctx[pdev], 0);
    srv_pop_device();
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return r;
    c->peers->pair[c->peers->n].ctx = c->cur->id;
    c->peers->pair[c->peers->n++].peer = peer->id;
    return CUDA_SUCCESS;
}

/* The client's pair alone goes; the shared context keeps its peer access (above). */
static CUresult peer_disable(struct srv_client *c, struct srv_call *k)
{
    struct srv_ctx *peer;
    CUresult r = pair_of(c, k, &peer);
    if (r != CUDA_SUCCESS) return r;
    int i = find(c, c->cur->id, peer->id);
    if (i < 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    drop(c, (unsigned)i);
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_peer_enable = {.call = peer_enable};
const struct srv_hook srv_hook_peer_disable = {.call = peer_disable};

/* A context of the client's released (destroyed, its primary context reset or let go):
 * the pairs it is in end with it, as the driver's end with a context. */
static void peers_ctx_quiesce(struct srv_client *c, uint32_t ctx)
{
    for (unsigned i = 0; c->peers && ctx && i < c->peers->n;)
        if (c->peers->pair[i].ctx == ctx || c->peers->pair[i].peer == ctx)
            drop(c, i);
        else
            i++;
}

/* The client's contexts on dev died in a fault (marked already): the pairs they are in go. */
static void peers_ctx_died(struct srv_client *c, int dev)
{
    (void)dev;
    for (unsigned i = 0; c->peers && i < c->peers->n;) {
        struct srv_ctx *x = srv_ctx_get(c, c->peers->pair[i].ctx);
        struct srv_ctx *y = srv_ctx_get(c, c->peers->pair[i].peer);
        if (!x || !y || x->fault || y->fault)
            drop(c, i);
        else
            i++;
    }
}

static void peers_free(struct srv_client *c)
{
    free(c->peers);
    c->peers = NULL;
}

const struct srv_family srv_family_peer = {.name = "peer",
                                           .client_free = peers_free,
                                           .ctx_quiesce = peers_ctx_quiesce,
                                           .ctx_died = peers_ctx_died};
