/* The stream core's records (streams.c keeps them): a client's streams and contexts. A
 * header of types alone, so that a family that reads a stream names no function of the
 * stream core by it. */
#ifndef MPSSHIM_SERVER_STREAMREC_H
#define MPSSHIM_SERVER_STREAMREC_H

#include "server/core/server.h"

struct srv_stream {
    uint64_t key; /* what the client names it by: the real handle, or 0 for defaults */
    CUstream real;
    struct srv_obj *obj; /* its registry record (created streams; NULL for defaults) */
    uint32_t ctx;
    int device;
    unsigned flags; /* as the client asked (the real stream is always non-blocking) */
    int priority;
    int blocking;            /* synchronises with its context's legacy stream */
    int legacy;              /* this is the context's legacy default stream */
    uint16_t thread;         /* per-thread default stream of this client thread, else 0 */
    uint64_t nsubmit;        /* operations enqueued so far */
    uint64_t submit_ns;      /* when the last one was (chan_now_ns), for waits.c */
    uint64_t seen_by_legacy; /* our nsubmit when the legacy stream last waited for us */
    uint64_t legacy_seen;    /* the legacy stream's nsubmit when we last waited for it */
    CUevent mark;            /* internal event recorded for those waits */
    /* Recorded on it just before its latest capture began (graph.c): what it held then, for
     * a free that must come after the client's work (devmem.c); NULL: never captured. */
    CUevent cap_mark;
    uint64_t queued;       /* bytes charged here not yet covered by a mark (queue.c) */
    struct srv_hblock *hb; /* the pinned block its inline copies fill now (hostblocks.c) */
    /* The graph a capture begun on it builds (graph.c), NULL: none. Kept from the begin, as
     * the driver names it only while the capture is active, and the end of an invalidated
     * capture must still find what the client held in it. */
    CUgraph capture_graph;
    uint64_t mvar_seen; /* the client's mvar_gen it is ordered after (managed.c) */
    uint32_t trace_gen; /* the trace it was named for (trace.c); the worker's own */
    /* The kernel last launched on it (launch.c; a graph of held launches names its last),
     * a CUkernel when last_is_kernel, else a CUfunction; 0: none. Only for the log of work
     * that outlives its client (streams.c), whose name the driver gives then: one store a
     * launch, no driver call. */
    uint64_t last_func;
    int last_is_kernel;
    UT_hash_handle hh; /* in ctx->defaults (per-thread default streams) */
};
struct srv_ctx {
    uint32_t id;
    int device;
    int primary;
    uint32_t gen;                /* the device's fault generation when it was made (fault.c) */
    CUresult fault;              /* a fault killed it: every call in it returns this (sticky) */
    struct srv_stream *legacy;   /* created on first use */
    struct srv_stream *defaults; /* per-thread default streams, keyed by thread number */
    struct srv_stream *mvar;     /* __managed__ variables' copies (managed.c); on first use */
    struct srv_stream *pulls;    /* migrating memory's pulls after all work (migrate.c); same */
    UT_hash_handle hh;
};

/* The client's context `id` (the client's own number for it), or NULL. */
static inline struct srv_ctx *srv_ctx_get(struct srv_client *c, uint32_t id)
{
    struct srv_ctx *x = NULL;
    HASH_FIND(hh, c->ctxs, &id, sizeof(id), x);
    return x;
}

/* Work of a destroyed stream still running (c->retired): context syncs must wait for it
 * too. */
struct srv_retired {
    CUevent ev;
    uint32_t ctx;
    int dev;
};

#endif
