/* Stream capture, described in cuda_symbols.txt; what no description can say is here:
 * cuStreamBeginCapture, cuStreamEndCapture and the end of a capture its client leaves going
 * (its stream, its context or the client goes: the graph family's hooks, at the end). Graph
 * nodes are graphnodes.c's, graph memory graphmem.c's. Captures run in the server in relaxed
 * mode whatever mode the client asked for: in a global-mode capture the driver refuses
 * "unsafe" calls from every thread of the process, and every client's worker is a thread of
 * this one process, so one client's capture would make the others' calls fail. (The client's
 * shim applies the mode to the client's own threads: interpose/capture.c.) While a client has
 * a capture going, the server adds no work of its own to capturing streams (streams.c,
 * waits.c), and refuses what it could not replay: pageable copies (copy.c); host functions
 * become host nodes (hostfn.c); stream-ordered allocations and frees become graph memory
 * nodes (graphmem.c). */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/graphs/graph.h"
#include "server/memory/hostblocks.h"

/* The legacy stream cannot be captured (as with the driver); the client's streams
 * otherwise begin capturing in relaxed mode (see above). */
static CUresult begin_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_stream *s =
        srv_stream_resolve(c, k->a.val[0], k->r->flags & CHAN_RF_PTDS, k->r->thread);
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    return s->legacy ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* The stream the capture call names (the description checked it). */
static struct srv_stream *capture_stream(struct srv_client *c, struct srv_call *k)
{
    return srv_stream_resolve(c, k->a.val[0], k->r->flags & CHAN_RF_PTDS, k->r->thread);
}

static CUresult begin_call(struct srv_client *c, struct srv_call *k)
{
    CUresult r;
    CUstream st = (CUstream)(uintptr_t)k->vals[0];
    /* Pinned blocks of the copies before it are closed now, outside the capture
     * (hostblocks.c). */
    struct srv_stream *before = capture_stream(c, k);
    if (before) srv_hblock_close(c, before);
    /* What it holds now can no longer be waited for once it captures (an event recorded
     * there becomes a node): a mark of it, for frees that must come after it (devmem.c),
     * made once per stream. Without one, it holds nothing when the capture begins. */
    if (before && !before->cap_mark &&
        DRV(cuEventCreate)(&before->cap_mark, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        before->cap_mark = NULL;
    if (before && (!before->cap_mark || DRV(cuEventRecord)(before->cap_mark, st) != CUDA_SUCCESS) &&
        (r = DRV(cuStreamSynchronize)(st)) != CUDA_SUCCESS)
        return r;
    if (k->id == SHIM_ID_cuStreamBeginCaptureToGraph)
        r = DRV(cuStreamBeginCaptureToGraph)(st, (CUgraph)(uintptr_t)k->vals[1],
                                             (const CUgraphNode *)(uintptr_t)k->vals[2],
                                             (const CUgraphEdgeData *)(uintptr_t)k->vals[3],
                                             (size_t)k->vals[4], CU_STREAM_CAPTURE_MODE_RELAXED);
    else
        r = DRV(cuStreamBeginCapture_v2)(st, CU_STREAM_CAPTURE_MODE_RELAXED);
    if (r != CUDA_SUCCESS) return r;
    c->captures++;
    struct srv_stream *s = capture_stream(c, k);
    CUstreamCaptureStatus status;
    CUgraph g = NULL;
    if (s && DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &g, NULL, NULL) == CUDA_SUCCESS)
        s->capture_graph = g;
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_capture_begin = {.before = begin_before, .call = begin_call};

/* The driver destroyed the graph a capture was building, which the client knew (it
 * allocated in it, asked cuStreamGetCaptureInfo for it, captured a host function): its
 * record goes (a later graph of another client's at that address would otherwise pass as
 * this one's), and the graph memory under it with it, uncounted (never launched, so never
 * allocated: nothing to free, and the driver may hand the address to anyone now). */
static void capture_graph_gone(struct srv_client *c, struct srv_obj *g)
{
    for (struct srv_obj *o = g->children, *next; o; o = next) {
        next = o->sib_next;
        if (o->key.type == SHIM_HT_MEM_GRAPHMEM) srv_obj_destroyed(c, o);
    }
    srv_obj_destroyed(c, g);
}

/* A capture ends with the call, whether it made a graph or was invalidated; if it failed,
 * the driver destroyed the graph (unless it is the client's own). */
static CUresult end_call(struct srv_client *c, struct srv_call *k)
{
    CUstream st = (CUstream)(uintptr_t)k->vals[0];
    struct srv_stream *s = capture_stream(c, k);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph building = NULL;
    int was =
        DRV(cuStreamGetCaptureInfo_v2)(st, &status, NULL, &building, NULL, NULL) == CUDA_SUCCESS &&
        status != CU_STREAM_CAPTURE_STATUS_NONE;
    if (s && s->capture_graph)
        building = s->capture_graph; /* also when invalidated, which the driver names not */
    CUresult r = DRV(cuStreamEndCapture)(st, (CUgraph *)k->a.ptr[1]);
    if (was && DRV(cuStreamIsCapturing)(st, &status) == CUDA_SUCCESS &&
        status == CU_STREAM_CAPTURE_STATUS_NONE) {
        if (c->captures) c->captures--;
        if (s) s->capture_graph = NULL;
    }
    struct srv_obj *o = building ? srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)building) : NULL;
    if (r != CUDA_SUCCESS && o && !o->owned) capture_graph_gone(c, o);
    return r;
}

const struct srv_hook srv_hook_capture_end = {.call = end_call};

void srv_capture_abandon(struct srv_client *c, struct srv_stream *s, int forget)
{
    if (!srv_stream_capturing(c, s)) return;
    CUgraph g = NULL;
    struct srv_obj *o =
        s->capture_graph ? srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)s->capture_graph) : NULL;
    if (DRV(cuStreamEndCapture)(s->real, &g) == CUDA_SUCCESS && g) {
        struct srv_obj *made = srv_obj_find(c, SHIM_HT_CUgraph, (uintptr_t)g);
        if (!(made && made->owned)) DRV(cuGraphDestroy)(g);
        if (!o) o = made;
    }
    /* Only the stream that began a capture ends it (one that joined it stays in it). */
    if (srv_stream_capturing(c, s)) return;
    if (c->captures) c->captures--;
    s->capture_graph = NULL;
    if (forget && o && !o->owned) capture_graph_gone(c, o);
}

static void abandon_dropping(struct srv_client *c, struct srv_stream *s, void *arg)
{
    (void)arg;
    srv_capture_abandon(c, s, 1);
}

void srv_captures_abandon(struct srv_client *c, uint32_t ctx)
{
    /* Per-thread default streams can capture too (the legacy stream cannot). */
    if (c->captures) srv_streams_each(c, ctx, 0, abandon_dropping, NULL);
}

/* A stream that goes with a capture left going ends it (not one that died in a fault). */
static void graph_stream_gone(struct srv_client *c, struct srv_stream *s, int dead)
{
    if (!dead) srv_capture_abandon(c, s, 0);
}

/* The client destroys s: its capture's graph and what the client held in it go now, records
 * included. */
static void graph_stream_destroyed(struct srv_client *c, struct srv_stream *s)
{
    srv_capture_abandon(c, s, 1);
}

const struct srv_family srv_family_graph = {.name = "graph",
                                            .ctx_quiesce = srv_captures_abandon,
                                            .stream_destroyed = graph_stream_destroyed,
                                            .stream_gone = graph_stream_gone};
