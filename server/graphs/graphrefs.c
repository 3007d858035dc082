/* What a client's graph execs name, checked again at every launch.
 *
 * A memset or memcpy node names memory by its address, a memcpy node may name arrays, an
 * event record or wait node names an event. The server checks each when the node is added
 * or set (graphnodes.c, the generic path), but the graph, and an exec made from it, keep those
 * raw values after the client freed the memory or destroyed the array or event; in the one
 * shared context the driver may by then have given the address or handle to another
 * client, and the stale node would write that client's memory or record its event
 * (natively it could only touch the same process's own objects). So each exec keeps the
 * list of what its nodes name, made when it is instantiated or updated (its graph walked,
 * child graphs included) and changed when one of its nodes is set, and a launch is refused
 * unless everything on the list is still the client's. Work already launched is safe: the
 * driver does not hand out memory (or an event) again under work still queued on it.
 * A kernel node's function is listed too (a module the client unloaded may give its
 * function's handle to another client's module); its parameters are not, being no pointers
 * the server can check, as with any launch (the README says so). So are the words of
 * stream memory operations a capture made into batch nodes (the driver captures them; the
 * CPU test driver does not).
 *
 * The check costs nothing in the steady state: a list found good stays good until the
 * client lets go of some object (c->forgotten, counted by the registry), so a loop of
 * launches checks once. Not listed: host nodes (the server's own pairs, hostfn.c), and
 * memory that an allocation node of the exec's graph allocates (the driver keeps those
 * addresses for the exec as long as it lives). */
#include "server/core/server.h"
#include "server/core/registry.h"
#include "server/code/codegate.h"
#include "server/graphs/graphrefs.h"
#include "server/graphs/hostfn.h"
#include "channel/copyplan.h"

#include <stdlib.h>
#include <string.h>

/* Deeper child graphs than this are not walked: the list is then unknown (refused). */
#define MAX_DEPTH 16

enum ref_kind {
    REF_MEM,   /* bytes [first, first + span) of the client's memory */
    REF_HOST,  /* the same, in host memory the server maps (a memcpy node's HOST side) */
    REF_OWN,   /* an allocation node's range: the exec's own, never checked */
    REF_EVENT, /* first: an event of the client's */
    REF_ARRAY, /* first: an array of the client's */
    REF_FUNC,  /* first: a function or kernel of the client's */
};

struct ref {
    uint64_t node; /* the exec's top-level node it comes from (a child graph's: that node) */
    uint32_t kind;
    uint64_t first, span;
};

struct srv_graphrefs {
    int unknown; /* the walk failed: nothing is known, every launch is refused */
    int said;    /* a refused launch of this exec was logged */
    int good;    /* the list was found good when c->forgotten was `checked` */
    uint64_t checked;
    size_t n, cap;
    struct ref r[];
};

/* An exec whose list could not even be allocated: shared, never freed, launches refused. */
static struct srv_graphrefs lost = {.unknown = 1, .said = 1};

/* An exec's record goes, however it goes (cuda_symbols.txt: drop=graphrefs). */
void srv_drop_graphrefs(struct srv_client *c, struct srv_obj *o)
{
    (void)c;
    if (o->refs != &lost) free(o->refs);
    o->refs = NULL;
}

static void set_unknown(struct srv_obj *x)
{
    if (!x->refs)
        x->refs = &lost; /* read-only: every worker may point at it */
    else
        x->refs->unknown = 1;
}

/* The list changed: the next launch checks it whole. */
static void changed(struct srv_obj *x)
{
    if (x->refs && x->refs != &lost) x->refs->good = 0;
}

/* Appends one entry to x's list; the list is unknown from then on when there is no room. */
static void add(struct srv_obj *x, uint64_t node, uint32_t kind, uint64_t first, uint64_t span)
{
    struct srv_graphrefs *l = x->refs;
    if (l && l->unknown) return;
    if (!l || l->n == l->cap) {
        size_t cap = l ? l->cap * 2 : 16;
        struct srv_graphrefs *m = realloc(l, sizeof(*m) + cap * sizeof(m->r[0]));
        if (!m) {
            set_unknown(x);
            return;
        }
        if (!l) *m = (struct srv_graphrefs){0};
        m->cap = cap;
        x->refs = l = m;
    }
    l->r[l->n++] = (struct ref){.node = node, .kind = kind, .first = first, .span = span};
    l->good = 0;
}

/* Forgets what x's node `node` named (it is set anew). */
static void drop_node(struct srv_obj *x, uint64_t node)
{
    struct srv_graphrefs *l = x->refs;
    for (size_t i = 0; l && l != &lost && i < l->n;)
        if (l->r[i].node == node && l->r[i].kind != REF_OWN)
            l->r[i] = l->r[--l->n];
        else
            i++;
    changed(x);
}

/* A kernel node's function: the client's function, or its library kernel (the driver
 * names either). One the client holds under neither name (the current context's function
 * of one of its kernels, which only a search of every kernel would find) is not listed. */
static void add_func(struct srv_client *c, struct srv_obj *x, uint64_t node, uint64_t func,
                     uint64_t kern)
{
    if (kern && srv_obj_find(c, SHIM_HT_CUkernel, kern))
        add(x, node, REF_FUNC, kern, 0);
    else if (func && srv_func_known(c, func))
        add(x, node, REF_FUNC, func, 0);
}

/* The bytes a memset writes: rows of width * elementSize, pitch apart. */
static void add_memset(struct srv_obj *x, uint64_t node, const CUDA_MEMSET_NODE_PARAMS *p)
{
    uint64_t row, first, span;
    if (p->width == 0 || p->height == 0) return;
    if (__builtin_mul_overflow((uint64_t)p->width, (uint64_t)p->elementSize, &row) ||
        chan_copy_extent(p->dst, 0, 0, 0, p->pitch, 1, row, p->height, 1, &first, &span)) {
        set_unknown(x);
        return;
    }
    add(x, node, REF_MEM, first, span);
}

int srv_memcpy_side_base(CUmemorytype type, const void *host, CUdeviceptr dev, uint64_t *base)
{
    switch (type) {
    case CU_MEMORYTYPE_ARRAY:
        return 0;
    case CU_MEMORYTYPE_HOST:
        *base = (uint64_t)(uintptr_t)host;
        return 1;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        *base = dev;
        return 1;
    default:
        return -1;
    }
}

/* One side of a 3D copy. */
static void add_side(struct srv_obj *x, uint64_t node, CUmemorytype type, const void *host,
                     CUdeviceptr dev, CUarray arr, size_t px, size_t py, size_t pz, size_t pitch,
                     size_t height, const CUDA_MEMCPY3D *p)
{
    uint64_t base, first, span;
    int linear = srv_memcpy_side_base(type, host, dev, &base);
    if (linear == 0) {
        add(x, node, REF_ARRAY, (uint64_t)(uintptr_t)arr, 0);
        return;
    }
    if (linear < 0) {
        set_unknown(x);
        return;
    }
    if (chan_copy_extent(base, px, py, pz, pitch, height, p->WidthInBytes, p->Height, p->Depth,
                         &first, &span)) {
        set_unknown(x);
        return;
    }
    add(x, node, type == CU_MEMORYTYPE_HOST ? REF_HOST : REF_MEM, first, span);
}

static void add_memcpy(struct srv_obj *x, uint64_t node, const CUDA_MEMCPY3D *p)
{
    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return;
    add_side(x, node, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
             p->srcY, p->srcZ, p->srcPitch, p->srcHeight, p);
    add_side(x, node, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
             p->dstY, p->dstZ, p->dstPitch, p->dstHeight, p);
}

/* A batch of stream memory operations (a captured cuStreamWaitValue32 or WriteValue64,
 * say): the words they wait on or write, except those in the client's own segment, which
 * the server's host node pairs wait on (hostfn.c). */
static void add_memops(struct srv_client *c, struct srv_obj *x, uint64_t node,
                       const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    for (unsigned i = 0; p->paramArray && i < p->count; i++) {
        const CUstreamBatchMemOpParams *op = &p->paramArray[i];
        uint64_t addr, bytes;
        switch (op->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
            addr = op->waitValue.address;
            bytes = 4;
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            addr = op->waitValue.address;
            bytes = 8;
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
            addr = op->writeValue.address;
            bytes = 4;
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            addr = op->writeValue.address;
            bytes = 8;
            break;
        default:
            continue; /* flushes and barriers name no memory */
        }
        if (c->shm_dptr && addr >= c->shm_dptr && addr - c->shm_dptr < c->shm_size) continue;
        add(x, node, REF_MEM, addr, bytes);
    }
}

static void walk(struct srv_client *c, struct srv_obj *x, CUgraph g, uint64_t top, int depth);

/* A conditional node's bodies: the driver names them only when the node is made, so they
 * are found as the graphs its record holds (graphcond.c). A node the client never made
 * (one of a clone, or of a child graph's copy) has no record: what its bodies name is not
 * known, and the exec's launches are refused rather than left unchecked. */
static void walk_bodies(struct srv_client *c, struct srv_obj *x, CUgraphNode n, uint64_t key,
                        int depth)
{
    struct srv_obj *no = srv_obj_find(c, SHIM_HT_CUgraphNode, (uint64_t)(uintptr_t)n);
    if (!no) {
        set_unknown(x);
        return;
    }
    for (struct srv_obj *b = no->children; b; b = b->sib_next)
        if (b->key.type == SHIM_HT_CUgraph)
            walk(c, x, (CUgraph)(uintptr_t)b->key.value, key, depth + 1);
}

/* Adds what graph g's nodes name, under `top` (0: each top-level node is its own key). */
static void walk(struct srv_client *c, struct srv_obj *x, CUgraph g, uint64_t top, int depth)
{
    size_t n = 0;
    CUgraphNode *v = NULL;
    if (depth > MAX_DEPTH || DRV(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS ||
        (n && !(v = malloc(n * sizeof(*v)))) ||
        (n && DRV(cuGraphGetNodes)(g, v, &n) != CUDA_SUCCESS)) {
        free(v);
        set_unknown(x);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t key = top ? top : (uint64_t)(uintptr_t)v[i];
        CUgraphNodeType t;
        CUDA_MEMSET_NODE_PARAMS ms;
        CUDA_MEMCPY3D cp;
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        CUDA_KERNEL_NODE_PARAMS kp;
        CUDA_BATCH_MEM_OP_NODE_PARAMS bp;
        CUevent ev;
        CUgraph child;
        CUresult r = DRV(cuGraphNodeGetType)(v[i], &t);
        if (r != CUDA_SUCCESS) {
            set_unknown(x);
            break;
        }
        switch (t) {
        case CU_GRAPH_NODE_TYPE_MEMSET:
            if ((r = DRV(cuGraphMemsetNodeGetParams)(v[i], &ms)) == CUDA_SUCCESS)
                add_memset(x, key, &ms);
            break;
        case CU_GRAPH_NODE_TYPE_MEMCPY:
            if ((r = DRV(cuGraphMemcpyNodeGetParams)(v[i], &cp)) == CUDA_SUCCESS)
                add_memcpy(x, key, &cp);
            break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
            if ((r = DRV(cuGraphEventRecordNodeGetEvent)(v[i], &ev)) == CUDA_SUCCESS)
                add(x, key, REF_EVENT, (uint64_t)(uintptr_t)ev, 0);
            break;
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
            if ((r = DRV(cuGraphEventWaitNodeGetEvent)(v[i], &ev)) == CUDA_SUCCESS)
                add(x, key, REF_EVENT, (uint64_t)(uintptr_t)ev, 0);
            break;
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
            memset(&ap, 0, sizeof(ap));
            if ((r = DRV(cuGraphMemAllocNodeGetParams)(v[i], &ap)) == CUDA_SUCCESS)
                add(x, key, REF_OWN, ap.dptr, ap.bytesize);
            break;
        case CU_GRAPH_NODE_TYPE_KERNEL:
            memset(&kp, 0, sizeof(kp));
            if ((r = DRV(cuGraphKernelNodeGetParams_v2)(v[i], &kp)) == CUDA_SUCCESS)
                add_func(c, x, key, (uint64_t)(uintptr_t)kp.func, (uint64_t)(uintptr_t)kp.kern);
            break;
        case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
            memset(&bp, 0, sizeof(bp));
            if ((r = DRV(cuGraphBatchMemOpNodeGetParams)(v[i], &bp)) == CUDA_SUCCESS)
                add_memops(c, x, key, &bp);
            break;
        case CU_GRAPH_NODE_TYPE_GRAPH:
            if ((r = DRV(cuGraphChildGraphNodeGetGraph)(v[i], &child)) == CUDA_SUCCESS)
                walk(c, x, child, key, depth + 1);
            break;
        case CU_GRAPH_NODE_TYPE_CONDITIONAL:
            walk_bodies(c, x, v[i], key, depth);
            break;
        default:
            break; /* host, empty, free nodes; the bodies of conditional nodes above */
        }
        if (r != CUDA_SUCCESS) set_unknown(x);
    }
    free(v);
}

void srv_graphrefs_build(struct srv_client *c, struct srv_obj *x, CUgraph g)
{
    if (!x) return;
    srv_drop_graphrefs(c, x);
    walk(c, x, g, 0, 0);
}

void srv_graphrefs_memset(struct srv_obj *x, uint64_t node, const CUDA_MEMSET_NODE_PARAMS *p)
{
    if (!x || !p) return;
    drop_node(x, node);
    add_memset(x, node, p);
}

void srv_graphrefs_memcpy(struct srv_obj *x, uint64_t node, const CUDA_MEMCPY3D *p)
{
    if (!x || !p) return;
    drop_node(x, node);
    add_memcpy(x, node, p);
}

void srv_graphrefs_child(struct srv_client *c, struct srv_obj *x, uint64_t node, CUgraph child)
{
    if (!x) return;
    drop_node(x, node);
    walk(c, x, child, node, 1);
}

void srv_graphrefs_func(struct srv_client *c, struct srv_obj *x, uint64_t node, uint64_t func)
{
    if (!x) return;
    drop_node(x, node);
    add_func(c, x, node, func, func);
}

/* cuGraphExecEventRecordNodeSetEvent, cuGraphExecEventWaitNodeSetEvent: the exec's node
 * names the new event from now on. */
static CUresult exec_event_after(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *x = srv_obj_find(c, SHIM_HT_CUgraphExec, k->a.val[0]);
    if (x) {
        drop_node(x, k->a.val[1]);
        add(x, k->a.val[1], REF_EVENT, k->a.val[2], 0);
    }
    return CUDA_SUCCESS;
}

const struct srv_hook srv_hook_graph_exec_event = {.after = exec_event_after};

/* 1 if [first, first + span) lies in one of the exec's own allocations. */
static int own(const struct srv_graphrefs *l, uint64_t first, uint64_t span)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->r[i].kind == REF_OWN && first >= l->r[i].first &&
            first - l->r[i].first <= l->r[i].span && span <= l->r[i].span - (first - l->r[i].first))
            return 1;
    return 0;
}

/* CUDA_SUCCESS when everything x's nodes name is still the client's, else the error the
 * launch is refused with. */
static CUresult check(struct srv_client *c, const struct srv_obj *x)
{
    struct srv_graphrefs *l = x->refs;
    if (!l || (l->good && l->checked == c->forgotten))
        return CUDA_SUCCESS; /* nothing let go of since it was found good */
    if (l->unknown) return CUDA_ERROR_NOT_SUPPORTED;
    for (size_t i = 0; i < l->n; i++) {
        const struct ref *e = &l->r[i];
        struct srv_obj *o;
        switch (e->kind) {
        case REF_MEM:
        case REF_HOST:
            if (own(l, e->first, e->span)) break;
            o = srv_range_find(c, e->first, e->span);
            if (!o || (e->kind == REF_HOST && !srv_host_type(o->key.type)))
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case REF_EVENT:
            if (!srv_obj_find(c, SHIM_HT_CUevent, e->first)) return CUDA_ERROR_INVALID_HANDLE;
            break;
        case REF_ARRAY:
            if (!srv_obj_find(c, SHIM_HT_CUarray, e->first)) return CUDA_ERROR_INVALID_HANDLE;
            break;
        case REF_FUNC:
            if (!srv_func_known(c, e->first)) return CUDA_ERROR_INVALID_HANDLE;
            break;
        default:
            break;
        }
    }
    l->good = 1;
    l->checked = c->forgotten;
    return CUDA_SUCCESS;
}

/* cuGraphLaunch: refused when a node of the exec names what the client no longer holds
 * (said once per exec: a program that launches such an exec in a loop would fill the
 * log). */
static CUresult launch_before(struct srv_client *c, struct srv_call *k)
{
    struct srv_obj *x = srv_obj_find(c, SHIM_HT_CUgraphExec, k->a.val[0]);
    CUresult r = x ? check(c, x) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS && !x->refs->said) {
        x->refs->said = 1;
        srv_log("Client process %d: a graph launch refused with %s: a node of it names %s",
                (int)c->pid, srv_errname(r),
                r == CUDA_ERROR_INVALID_VALUE   ? "memory the client no longer holds"
                : r == CUDA_ERROR_NOT_SUPPORTED ? "what the server could not list"
                                                : "an event, array or function no longer its own");
    }
    return r;
}

/* An exec with host nodes waits on the client at each of them (hostfn.c): its launch is
 * enqueued through the code gate, as a client's wait is (codegate.c). */
static CUresult launch_call(struct srv_client *c, struct srv_call *k)
{
    if (!srv_hostfn_exec_waits(srv_obj_find(c, SHIM_HT_CUgraphExec, k->a.val[0])))
        return k->drive(k);
    srv_codegate_wait_begin(k->dev);
    CUresult r = k->drive(k);
    srv_codegate_wait_end(c, k->dev, (CUstream)(uintptr_t)k->vals[k->d->stream], r == CUDA_SUCCESS,
                          SRV_WAIT_HOSTNODE);
    return r;
}

const struct srv_hook srv_hook_graph_launch = {.before = launch_before, .call = launch_call};
