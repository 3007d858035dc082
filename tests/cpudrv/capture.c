// Stream capture: while a stream captures, the work queued on it becomes nodes of a graph
// instead of running.
//
// A capture has a graph, the stream it began on (its origin) and the streams that joined
// it by waiting for an event recorded in it (fork); each of those streams has the set of
// nodes its next node will depend on. A captured event record makes no node: the event
// stands for the recording stream's set at that point, and a wait for it adds that set to
// the waiting stream's (join). The capture ends on its origin, once every stream that
// joined is joined back (its set reaches the origin's). An invalid operation invalidates
// the capture: it then ends with no graph. Stream-ordered allocations and frees become
// memory allocation and free nodes (graph memory, graphmem.c).
//
// The calling thread's capture mode and the mode each capture began with decide which
// "potentially unsafe" calls (allocations, frees, event queries) are refused, as
// cuThreadExchangeStreamCaptureMode describes.
#include "graph.h"

#include <stdlib.h>
#include <string.h>

struct cpudrv_capture {
    int refs; // the list of captures in progress, and events whose record it holds
    int active, invalid;
    int user_graph; // cuStreamBeginCaptureToGraph: the graph is the caller's
    unsigned long long id;
    CUstreamCaptureMode mode;
    pthread_t thread;       // that began it
    struct cpudrv_graph *g; // a reference held while active
    struct cpudrv_stream *origin;
    struct cpudrv_stream **members; // origin included, references held
    size_t nmembers, capmembers;
    struct cpudrv_capture *prev, *next;
};

// Captures in progress; protected by cpudrv_big.
static struct cpudrv_capture *captures;

// The calling thread's capture mode (thread-local: no lock).
static __thread CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static void cap_put(struct cpudrv_capture *c)
{
    if (--c->refs) return;
    free(c->members);
    free(c);
}

/* ---------------------------------------------------------------- node sets */

static void set_clear(struct cpudrv_nodeset *s)
{
    free(s->node);
    free(s->edge);
    memset(s, 0, sizeof *s);
}

static int set_has(const struct cpudrv_nodeset *s, CUgraphNode n)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->node[i] == n) return 1;
    return 0;
}

// Adds n (with edge data e, default if NULL) unless it is there already.
static int set_add(struct cpudrv_nodeset *s, CUgraphNode n, const CUgraphEdgeData *e)
{
    if (set_has(s, n)) return 0;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        CUgraphNode *nn = realloc(s->node, cap * sizeof *nn);
        if (!nn) return -1;
        s->node = nn;
        CUgraphEdgeData *ne = realloc(s->edge, cap * sizeof *ne);
        if (!ne) return -1;
        s->edge = ne;
        s->cap = cap;
    }
    s->node[s->n] = n;
    if (e)
        s->edge[s->n] = *e;
    else
        memset(&s->edge[s->n], 0, sizeof s->edge[s->n]);
    s->n++;
    return 0;
}

static int set_copy(struct cpudrv_nodeset *dst, const struct cpudrv_nodeset *src)
{
    struct cpudrv_nodeset t = {0};
    for (size_t i = 0; i < src->n; i++)
        if (set_add(&t, src->node[i], &src->edge[i])) {
            set_clear(&t);
            return -1;
        }
    set_clear(dst);
    *dst = t;
    return 0;
}

/* ---------------------------------------------------------------- captures */

static int member_add(struct cpudrv_capture *c, struct cpudrv_stream *s)
{
    if (c->nmembers == c->capmembers) {
        size_t cap = c->capmembers ? c->capmembers * 2 : 4;
        struct cpudrv_stream **m = realloc(c->members, cap * sizeof *m);
        if (!m) return -1;
        c->members = m;
        c->capmembers = cap;
    }
    cpudrv_obj_ref(&s->o);
    c->members[c->nmembers++] = s;
    s->cap = c;
    return 0;
}

static void member_drop(struct cpudrv_capture *c, size_t i)
{
    struct cpudrv_stream *s = c->members[i];
    s->cap = NULL;
    set_clear(&s->capdeps);
    c->members[i] = c->members[--c->nmembers];
    cpudrv_obj_put(&s->o);
}

// Ends a capture: its streams are their own again; its graph goes unless handed out.
static void terminate(struct cpudrv_capture *c, int keep_graph)
{
    while (c->nmembers)
        member_drop(c, c->nmembers - 1);
    if (c->prev)
        c->prev->next = c->next;
    else
        captures = c->next;
    if (c->next) c->next->prev = c->prev;
    c->active = 0;
    c->g->cap = NULL;
    // The capture's reference goes; a graph of its own that is not handed out goes too.
    if (!keep_graph && !c->user_graph && c->g->o.live) cpudrv_obj_unpublish(&c->g->o);
    cpudrv_obj_put(&c->g->o);
    c->g = NULL;
    cap_put(c);
}

static CUresult begin(struct cpudrv_stream *s, CUstreamCaptureMode mode, struct cpudrv_graph *g,
                      const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps)
{
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->cap) return CUDA_ERROR_ILLEGAL_STATE;
    struct cpudrv_capture *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->user_graph = g != NULL;
    if (!g) {
        g = cpudrv_graph_new(1);
        if (!g) {
            free(c);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else {
        cpudrv_obj_ref(&g->o);
    }
    c->refs = 1;
    c->active = 1;
    c->id = cpudrv_next_id();
    c->mode = mode;
    c->thread = pthread_self();
    c->g = g;
    c->origin = s;
    CUresult rc = member_add(c, s) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    for (size_t i = 0; !rc && i < ndeps; i++) {
        struct cpudrv_gnode *n = cpudrv_gnode_find(deps[i]);
        if (!n || n->g != g)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (set_add(&s->capdeps, deps[i], edges ? &edges[i] : NULL))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->next = captures;
    if (captures) captures->prev = c;
    captures = c;
    g->cap = c;
    if (rc) terminate(c, 0);
    return rc;
}

// Invalidates every capture that stream s of context ctx, blocking, takes part in: the
// legacy stream was used while they captured. IMPLICIT if there was one.
static CUresult implicit(struct cpudrv_ctx *ctx)
{
    CUresult rc = CUDA_SUCCESS;
    for (struct cpudrv_capture *c = captures; c; c = c->next)
        for (size_t i = 0; i < c->nmembers; i++) {
            struct cpudrv_stream *m = c->members[i];
            if (m->o.ctx == ctx && !(m->flags & CU_STREAM_NON_BLOCKING)) {
                c->invalid = 1;
                rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
            }
        }
    return rc;
}

// cpudrv_big held. Before work is queued on s (see cpudrv.h).
CUresult cpudrv_capture_check(struct cpudrv_stream *s, int *capturing)
{
    *capturing = 0;
    if (s->legacy) return implicit(s->o.ctx);
    if (!s->cap) return CUDA_SUCCESS;
    if (s->cap->invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    *capturing = 1;
    return CUDA_SUCCESS;
}

// As cpudrv_capture_check for work that cannot be captured.
CUresult cpudrv_capture_uncapturable(struct cpudrv_stream *s, CUresult why)
{
    int capturing;
    CUresult rc = cpudrv_capture_check(s, &capturing);
    if (rc || !capturing) return rc;
    s->cap->invalid = 1;
    return why;
}

// Before a wait for or a query of s.
CUresult cpudrv_capture_sync(struct cpudrv_stream *s)
{
    return cpudrv_capture_uncapturable(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

// Before a call that waits for all of c.
CUresult cpudrv_capture_ctx_sync(struct cpudrv_ctx *ctx)
{
    CUresult rc = CUDA_SUCCESS;
    for (struct cpudrv_capture *c = captures; c; c = c->next)
        for (size_t i = 0; i < c->nmembers; i++)
            if (c->members[i]->o.ctx == ctx) {
                c->invalid = 1;
                rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            }
    return rc;
}

// Before a potentially unsafe call: a thread in global or thread-local mode may not make
// one while it has a capture of its own that is not relaxed; in global mode, not while
// another thread has a global capture either. The captures in the way are invalidated.
CUresult cpudrv_capture_unsafe(void)
{
    CUstreamCaptureMode m = capture_mode;
    CUresult rc = CUDA_SUCCESS;
    if (m == CU_STREAM_CAPTURE_MODE_RELAXED) return rc;
    pthread_t self = pthread_self();
    for (struct cpudrv_capture *c = captures; c; c = c->next) {
        int mine = pthread_equal(c->thread, self);
        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && m == CU_STREAM_CAPTURE_MODE_GLOBAL &&
             c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            c->invalid = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

// Adds n to s's capture after s's dependencies; s then depends on n alone.
CUresult cpudrv_capture_add(struct cpudrv_stream *s, struct cpudrv_gnode *n)
{
    struct cpudrv_nodeset *d = &s->capdeps;
    CUresult rc = cpudrv_graph_attach(s->cap->g, n, d->node, d->edge, d->n);
    if (rc) return rc;
    struct cpudrv_nodeset one = {0};
    if (set_add(&one, (CUgraphNode)n, NULL)) return CUDA_ERROR_OUT_OF_MEMORY;
    set_clear(d);
    *d = one;
    return CUDA_SUCCESS;
}

// A new node of a type for s's capture, or NULL.
static struct cpudrv_gnode *node(CUgraphNodeType t, CUresult *rc)
{
    struct cpudrv_gnode *n = cpudrv_gnode_new(t);
    *rc = n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    return n;
}

// Adds n if making its parameters succeeded (rc), else frees it.
static CUresult add_or_free(struct cpudrv_stream *s, struct cpudrv_gnode *n, CUresult rc)
{
    if (rc) {
        if (n) cpudrv_gnode_free(n);
        return rc;
    }
    return cpudrv_capture_add(s, n);
}

// A captured launch: a kernel node with its own copy of the arguments.
CUresult cpudrv_capture_kernel(struct cpudrv_stream *s, const struct cpudrv_launch *L,
                               const void *handle)
{
    CUresult rc;
    struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_KERNEL, &rc);
    if (n) rc = cpudrv_gnode_set_launch(n, L, handle);
    return add_or_free(s, n, rc);
}

// One side of a captured copy as a memcpy node describes it: an array with its offsets,
// else device or host memory (pinned: a graph cannot hold pageable memory).
struct side {
    CUmemorytype type;
    const void *host;
    CUdeviceptr dev;
    CUarray array;
    size_t x, y, z, pitch, height;
};

static struct side copy_side(int cls, struct cpudrv_obj *arr, const unsigned char *p, size_t pitch,
                             size_t slice)
{
    struct side sd;
    memset(&sd, 0, sizeof sd);
    if (arr) {
        const struct cpudrv_array *a = (const struct cpudrv_array *)arr;
        size_t off = (size_t)(p - a->mem), sl = a->wbytes * a->h;
        sd.type = CU_MEMORYTYPE_ARRAY;
        sd.array = (CUarray)arr;
        sd.z = off / sl;
        sd.y = off % sl / a->wbytes;
        sd.x = off % sl % a->wbytes;
        return sd;
    }
    sd.pitch = pitch;
    sd.height = pitch ? slice / pitch : 0;
    sd.type = cls == CPUDRV_SIDE_DEVICE ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    sd.host = p;
    sd.dev = (CUdeviceptr)(uintptr_t)p;
    return sd;
}

// A captured copy: a memcpy node (arrays by handle and offsets, other memory by address).
CUresult cpudrv_capture_copy(struct cpudrv_stream *s, const struct cpudrv_xfer *x, int src_side,
                             int dst_side, struct cpudrv_obj *dst_array,
                             struct cpudrv_obj *src_array)
{
    struct side a = copy_side(src_side, src_array, x->src, x->spitch, x->sslice);
    struct side b = copy_side(dst_side, dst_array, x->dst, x->dpitch, x->dslice);
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = a.type;
    if (a.type == CU_MEMORYTYPE_HOST) p.srcHost = a.host;
    if (a.type == CU_MEMORYTYPE_DEVICE) p.srcDevice = a.dev;
    p.srcArray = a.array;
    p.srcXInBytes = a.x;
    p.srcY = a.y;
    p.srcZ = a.z;
    p.srcPitch = a.pitch;
    p.srcHeight = a.height;
    p.dstMemoryType = b.type;
    if (b.type == CU_MEMORYTYPE_HOST) p.dstHost = (void *)(uintptr_t)b.host;
    if (b.type == CU_MEMORYTYPE_DEVICE) p.dstDevice = b.dev;
    p.dstArray = b.array;
    p.dstXInBytes = b.x;
    p.dstY = b.y;
    p.dstZ = b.z;
    p.dstPitch = b.pitch;
    p.dstHeight = b.height;
    p.WidthInBytes = x->width;
    p.Height = x->height;
    p.Depth = x->depth;
    CUresult rc;
    struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
    if (n) rc = cpudrv_gnode_set_memcpy(n, &p, (CUcontext)s->o.ctx, NULL);
    return add_or_free(s, n, rc);
}

// A captured memset: a memset node.
CUresult cpudrv_capture_fill(struct cpudrv_stream *s, const struct cpudrv_fill *f)
{
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.dst = (CUdeviceptr)(uintptr_t)f->dst;
    p.pitch = f->height > 1 ? f->pitch : f->width * f->elsize;
    p.value = f->value;
    p.elementSize = f->elsize;
    p.width = f->width;
    p.height = f->height;
    CUresult rc;
    struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_MEMSET, &rc);
    if (n) rc = cpudrv_gnode_set_memset(n, &p, (CUcontext)s->o.ctx, NULL);
    return add_or_free(s, n, rc);
}

// A captured host function: a host node.
CUresult cpudrv_capture_host(struct cpudrv_stream *s, CUhostFn fn, void *data)
{
    CUresult rc;
    struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_HOST, &rc);
    if (n) {
        n->u.h.fn = fn;
        n->u.h.userData = data;
    }
    return add_or_free(s, n, rc);
}

// A captured cuMemAllocAsync / cuMemAllocFromPoolAsync: an allocation node with the pool's
// properties. As with the driver, the address is the graph's from now on (valid for work
// ordered after the node whenever the graph runs), not an allocation of the pool.
CUresult cpudrv_capture_alloc(struct cpudrv_stream *s, size_t bytes, const CUmemPoolProps *props,
                              CUdeviceptr *dptr)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps = *props;
    p.bytesize = bytes;
    CUresult rc;
    struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_MEM_ALLOC, &rc);
    if (n) rc = cpudrv_gmem_node_set(n, &p, s->cap->g);
    rc = add_or_free(s, n, rc);
    if (!rc) *dptr = p.dptr;
    return rc;
}

// A captured cuMemFreeAsync: a free node. The driver documents that the address must then
// be a graph allocation's (of this graph, another one, or one left allocated by a launch).
CUresult cpudrv_capture_free(struct cpudrv_stream *s, CUdeviceptr dptr)
{
    CUresult rc;
    struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_MEM_FREE, &rc);
    if (n) rc = cpudrv_gmem_free_node_set(n, dptr, s->cap->g);
    return add_or_free(s, n, rc);
}

// Forgets e's captured record (a new record, or e's release).
void cpudrv_capture_event_clear(struct cpudrv_event *e)
{
    set_clear(&e->capnodes);
    if (e->cap) cap_put(e->cap);
    e->cap = NULL;
}

// 1 if e's latest record belongs to a capture still in progress.
int cpudrv_capture_event_live(const struct cpudrv_event *e)
{
    return e->cap && e->cap->active;
}

// A record of e on capturing s: e stands for s's dependency set from now on.
CUresult cpudrv_capture_record(struct cpudrv_stream *s, struct cpudrv_event *e, unsigned flags)
{
    if (flags & CU_EVENT_RECORD_EXTERNAL) {
        CUresult rc;
        struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_EVENT_RECORD, &rc);
        if (n) {
            n->u.ev = e;
            cpudrv_obj_ref(&e->o);
        }
        rc = add_or_free(s, n, rc);
        if (rc) return rc;
    }
    struct cpudrv_nodeset t = {0};
    if (set_copy(&t, &s->capdeps)) return CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_capture_event_clear(e);
    e->capnodes = t;
    e->cap = s->cap;
    e->cap->refs++;
    return CUDA_SUCCESS;
}

// cuStreamWaitEvent's capture rules (see cpudrv.h).
CUresult cpudrv_capture_wait(struct cpudrv_stream *s, struct cpudrv_event *e, unsigned flags,
                             int *handled)
{
    struct cpudrv_capture *ec = cpudrv_capture_event_live(e) ? e->cap : NULL;
    int capturing;
    *handled = 1;
    CUresult rc = cpudrv_capture_check(s, &capturing);
    if (rc) return rc;
    if (s->legacy && ec) { // the legacy stream cannot join a capture
        ec->invalid = 1;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (capturing && ec) {
        if (ec != s->cap) { // two captures cannot become one
            ec->invalid = s->cap->invalid = 1;
            return CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
        for (size_t i = 0; i < e->capnodes.n; i++)
            if (set_add(&s->capdeps, e->capnodes.node[i], &e->capnodes.edge[i]))
                return CUDA_ERROR_OUT_OF_MEMORY;
        return CUDA_SUCCESS;
    }
    if (capturing) {
        if (flags & CU_EVENT_WAIT_EXTERNAL) {
            struct cpudrv_gnode *n = node(CU_GRAPH_NODE_TYPE_WAIT_EVENT, &rc);
            if (n) {
                n->u.ev = e;
                cpudrv_obj_ref(&e->o);
            }
            return add_or_free(s, n, rc);
        }
        if (!e->s) return CUDA_SUCCESS; // never recorded: nothing to wait for
        // A dependency on work outside the capture would cross its boundary.
        s->cap->invalid = 1;
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    if (ec) { // fork: s joins the capture where the event was recorded
        if (ec->invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (member_add(ec, s) || set_copy(&s->capdeps, &e->capnodes)) {
            if (s->cap) member_drop(ec, ec->nmembers - 1);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return CUDA_SUCCESS;
    }
    *handled = 0;
    return CUDA_SUCCESS;
}

// s is being destroyed: its capture is invalidated (ended, if s began it).
void cpudrv_capture_stream_gone(struct cpudrv_stream *s)
{
    struct cpudrv_capture *c = s->cap;
    if (!c) return;
    c->invalid = 1;
    if (c->origin == s) {
        terminate(c, 0);
        return;
    }
    for (size_t i = 0; i < c->nmembers; i++)
        if (c->members[i] == s) {
            member_drop(c, i);
            break;
        }
}

// 1 if every stream that joined c has been joined back: what each depends on is reached
// backwards from the origin's dependencies (marked with an explicit stack: chains of
// captured nodes can be long).
static int joined(struct cpudrv_capture *c)
{
    for (struct cpudrv_gnode *n = c->g->head; n; n = n->next)
        n->mark = 0;
    struct cpudrv_gnode **stack = malloc((c->g->n ? c->g->n : 1) * sizeof *stack);
    if (!stack) return 0;
    size_t top = 0;
    const struct cpudrv_nodeset *o = &c->origin->capdeps;
    for (size_t i = 0; i < o->n; i++) {
        struct cpudrv_gnode *n = (struct cpudrv_gnode *)o->node[i];
        if (!n->mark) {
            n->mark = 1;
            stack[top++] = n;
        }
    }
    while (top) {
        struct cpudrv_gnode *n = stack[--top];
        for (size_t i = 0; i < n->in.n; i++)
            if (!n->in.e[i].n->mark) {
                n->in.e[i].n->mark = 1;
                stack[top++] = n->in.e[i].n;
            }
    }
    free(stack);
    for (size_t i = 0; i < c->nmembers; i++) {
        const struct cpudrv_nodeset *d = &c->members[i]->capdeps;
        for (size_t k = 0; k < d->n; k++)
            if (!((struct cpudrv_gnode *)d->node[k])->mark) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- entry points */

// Locks and resolves a stream for the calling thread; on success cpudrv_big is HELD.
static CUresult stream_of(CUstream h, struct cpudrv_stream **s)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    rc = cpudrv_stream_get(h, cpudrv_ctx_current(), s);
    if (rc) cpudrv_unlock();
    return rc;
}

// Begins capture on a stream (not the legacy NULL stream, not one already capturing).
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    struct cpudrv_stream *s;
    CUresult rc = stream_of(hStream, &s);
    if (rc) return TR(rc);
    rc = begin(s, mode, NULL, NULL, NULL, 0);
    cpudrv_unlock();
    return TR(rc);
}

// Begins capture on a stream into an existing graph, its first node after dependencies.
CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode)
{
    if (numDependencies && !dependencies) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = stream_of(hStream, &s);
    if (rc) return TR(rc);
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    // A conditional node's body may be captured into (the driver's documented way to fill
    // one); another node's graph may not.
    if (!g || (g->owner && g->owner->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) ||
        cpudrv_graph_capturing(g))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = begin(s, mode, g, dependencies, dependencyData, numDependencies);
    cpudrv_unlock();
    return TR(rc);
}

// Ends the capture begun on this stream: the graph, or NULL with the reason the capture
// failed (invalidated, or a fork never joined back).
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    if (!phGraph) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = stream_of(hStream, &s);
    if (rc) return TR(rc);
    struct cpudrv_capture *c = s->cap;
    if (!c) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else if (c->origin != s) {
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
               !pthread_equal(c->thread, pthread_self())) {
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        rc = c->invalid  ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
             : joined(c) ? CUDA_SUCCESS
                         : CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        *phGraph = rc ? NULL : (CUgraph)c->g;
        terminate(c, !rc);
    }
    cpudrv_unlock();
    return TR(rc);
}

// The legacy stream while a blocking stream of its context captures: IMPLICIT (nothing is
// invalidated by asking).
static int legacy_blocked(const struct cpudrv_stream *s)
{
    if (!s->legacy) return 0;
    for (struct cpudrv_capture *c = captures; c; c = c->next)
        for (size_t i = 0; i < c->nmembers; i++)
            if (c->members[i]->o.ctx == s->o.ctx &&
                !(c->members[i]->flags & CU_STREAM_NON_BLOCKING))
                return 1;
    return 0;
}

static CUstreamCaptureStatus status_of(const struct cpudrv_stream *s)
{
    return !s->cap           ? CU_STREAM_CAPTURE_STATUS_NONE
           : s->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                             : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

// Whether a stream captures: NONE, ACTIVE or INVALIDATED.
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    if (!captureStatus) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = stream_of(hStream, &s);
    if (rc) return TR(rc);
    if (legacy_blocked(s))
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else
        *captureStatus = status_of(s);
    cpudrv_unlock();
    return TR(rc);
}

// A stream's capture: status, and while active its id, graph and current dependencies
// (an array valid until the next call on the stream). Dependencies with edge data asked
// for without it: LOSSY_QUERY.
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   const CUgraphEdgeData **edgeData_out,
                                   size_t *numDependencies_out)
{
    if (!captureStatus_out || (edgeData_out && !dependencies_out))
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = stream_of(hStream, &s);
    if (rc) return TR(rc);
    if (legacy_blocked(s)) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    }
    CUstreamCaptureStatus st = status_of(s);
    const struct cpudrv_nodeset *d = &s->capdeps;
    static const CUgraphEdgeData zero;
    if (st == CU_STREAM_CAPTURE_STATUS_ACTIVE && dependencies_out && !edgeData_out)
        for (size_t i = 0; i < d->n; i++)
            if (memcmp(&d->edge[i], &zero, sizeof zero)) rc = CUDA_ERROR_LOSSY_QUERY;
    if (!rc) {
        *captureStatus_out = st;
        if (st == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
            if (id_out) *id_out = s->cap->id;
            if (graph_out) *graph_out = (CUgraph)s->cap->g;
            if (dependencies_out) *dependencies_out = d->node;
            if (edgeData_out) *edgeData_out = d->edge;
            if (numDependencies_out) *numDependencies_out = d->n;
        }
    }
    cpudrv_unlock();
    return TR(rc);
}

// As cuStreamGetCaptureInfo_v3 without edge data.
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out)
{
    return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out,
                                     dependencies_out, NULL, numDependencies_out);
}

// Adds nodes of the capture's graph to a capturing stream's dependencies, or (SET)
// replaces them.
CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
                                              const CUgraphEdgeData *dependencyData,
                                              size_t numDependencies, unsigned int flags)
{
    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES || (numDependencies && !dependencies))
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = stream_of(hStream, &s);
    if (rc) return TR(rc);
    struct cpudrv_nodeset t = {0};
    if (!s->cap)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (s->cap->invalid)
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES && set_copy(&t, &s->capdeps))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    for (size_t i = 0; !rc && i < numDependencies; i++) {
        struct cpudrv_gnode *n = cpudrv_gnode_find(dependencies[i]);
        if (!n || n->g != s->cap->g)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (set_add(&t, dependencies[i], dependencyData ? &dependencyData[i] : NULL))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!rc) {
        set_clear(&s->capdeps);
        s->capdeps = t;
    } else {
        set_clear(&t);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Swaps the calling thread's capture mode (kept per thread, as in the driver).
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return TR(CUDA_ERROR_INVALID_VALUE);
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return TR(CUDA_SUCCESS);
}
