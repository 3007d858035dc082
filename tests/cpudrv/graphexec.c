// Executable graphs: instantiation, launches and uploads, updates of their nodes.
//
// An executable graph owns a private copy of its graph, its nodes (and those of its child
// graphs, flattened) put in one order that respects every edge. A launch runs them in that
// order on the launch stream's worker: each run of kernel, memcpy, memset, host and batch
// mem-op nodes is one stream operation, and an event record or wait node is an operation
// of its own between them (a record marks the stream's point when the nodes before it are
// done; a wait holds back the nodes after it). Parameters are copied into the operations when the
// launch is queued, so later updates change only later launches. Launches of one
// executable graph are ordered after each other, on whatever streams.
//
// A conditional node is one step whose bodies are runs of steps made when the launch is
// queued; it decides when it runs, on the value of its handle, which the kernels before it
// set (cudaGraphSetConditional: cpudrv_cond_set, called by the twins on the worker running
// the launch). The values are the executable graph's, one per handle of its graphs: set to
// their defaults at each launch that starts for handles made with
// CU_GRAPH_COND_ASSIGN_DEFAULT, kept from launch to launch otherwise.
#include "graph.h"

#include <stdlib.h>
#include <string.h>

// The values of an executable graph's conditional handles. References: the executable
// graph and each queued operation of its launches (changed with cpudrv_big held); the
// values are touched only by the worker running a launch, and launches of one executable
// graph run one after another.
struct condvals {
    int refs;
    size_t n;
    struct condval {
        CUgraphConditionalHandle h;
        unsigned dflt, flags, value;
    } e[];
};

static void condvals_put(struct condvals *v)
{
    if (v && --v->refs == 0) free(v);
}

// The values of the launch the calling thread runs, or NULL.
static __thread struct condvals *cur_vals;

// A kernel's cudaGraphSetConditional: sets h in the launch the calling worker runs (outside
// a graph, or for a handle not of that graph, nothing happens).
void cpudrv_cond_set(CUgraphConditionalHandle h, unsigned value)
{
    struct condvals *v = cur_vals;
    for (size_t i = 0; v && i < v->n; i++)
        if (v->e[i].h == h) v->e[i].value = value;
}

struct cpudrv_gexec {
    struct cpudrv_obj o;
    struct cpudrv_graph *g;      // private copy, no handles
    struct cpudrv_gnode **order; // g's nodes and its child graphs' (not the child nodes)
    size_t n;
    cuuint64_t flags;
    struct cpudrv_stream *last; // stream of the latest launch or upload (reference held)
    uint64_t last_seq;
    struct condvals *vals; // its handles' values, or NULL when it has none
};

enum { ST_KERNEL, ST_COPY, ST_FILL, ST_HOST, ST_MEMOP, ST_FAULT, ST_COND, ST_COND_INIT };

struct step;

// A run of steps: a conditional node's body.
struct steps {
    struct step *s;
    size_t n, cap;
};

// One node of a launch, with what it needs to run unlocked.
struct step {
    int kind;
    union {
        struct cpudrv_launch L; // L.mod: a reference held; L.args malloc'd
        struct {
            struct cpudrv_xfer x;
            struct cpudrv_obj *hold[2]; // arrays, references held
        } c;
        struct cpudrv_fill f;
        CUDA_HOST_NODE_PARAMS h;
        struct {
            CUstreamBatchMemOpParams *ops; // malloc'd
            unsigned n;
            const int *dying;
        } b;
        struct {
            struct condval *v; // in the batch's values
            CUgraphConditionalNodeType type;
            unsigned size;
            struct steps *body; // size runs
        } cond;
    } u;
};

// The payload of a launch's operation: a run of steps, and the values of its executable
// graph's handles (a reference held), or NULL.
struct batch {
    struct step *s;
    size_t n, cap;
    struct condvals *vals;
};

static CUresult steps_run(const struct step *s, size_t n, struct condvals *vals);

// A conditional node, as it decides when it runs.
static CUresult cond_run(const struct step *st, struct condvals *vals)
{
    const struct steps *b = st->u.cond.body;
    unsigned v = st->u.cond.v->value;
    switch (st->u.cond.type) {
    case CU_GRAPH_COND_TYPE_IF:
        if (v) return steps_run(b[0].s, b[0].n, vals);
        return st->u.cond.size == 2 ? steps_run(b[1].s, b[1].n, vals) : CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_WHILE:
        // As on a GPU, a body that never sets the handle to 0 loops for ever.
        while (st->u.cond.v->value) {
            CUresult rc = steps_run(b[0].s, b[0].n, vals);
            if (rc) return rc;
        }
        return CUDA_SUCCESS;
    default: // SWITCH
        return v < st->u.cond.size ? steps_run(b[v].s, b[v].n, vals) : CUDA_SUCCESS;
    }
}

static void exec_release(struct cpudrv_obj *o)
{
    struct cpudrv_gexec *x = (struct cpudrv_gexec *)o;
    cpudrv_graph_destroy(x->g);
    free(x->order);
    if (x->last) cpudrv_obj_put(&x->last->o);
    condvals_put(x->vals);
    free(x);
}

static struct cpudrv_gexec *exec_find(CUgraphExec h)
{
    return cpudrv_obj_find(h, CPUDRV_K_GEXEC);
}

// The node of x's copy (child graphs included) made from the node whose id is id.
static struct cpudrv_gnode *exec_node(const struct cpudrv_graph *g, unsigned long long id)
{
    for (struct cpudrv_gnode *n = g->head; n; n = n->next) {
        if (n->orig == id) return n;
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            struct cpudrv_gnode *m = exec_node(n->u.child, id);
            if (m) return m;
        }
        for (unsigned k = 0; n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && k < n->u.c.size; k++) {
            struct cpudrv_gnode *m = exec_node(n->u.c.body[k], id);
            if (m) return m;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------- running */

static CUresult steps_run(const struct step *s, size_t n, struct condvals *vals)
{
    for (size_t i = 0; i < n; i++) {
        const struct step *st = &s[i];
        CUresult rc = CUDA_SUCCESS;
        switch (st->kind) {
        case ST_KERNEL:
            rc = st->u.L.f->twin->run(&st->u.L);
            break;
        case ST_COPY:
            cpudrv_xfer_run(&st->u.c.x);
            break;
        case ST_FILL:
            cpudrv_fill_run(&st->u.f);
            break;
        case ST_HOST:
            st->u.h.fn(st->u.h.userData);
            break;
        case ST_MEMOP:
            for (unsigned k = 0; k < st->u.b.n; k++)
                cpudrv_memop_run(&st->u.b.ops[k], st->u.b.dying);
            break;
        case ST_COND:
            rc = cond_run(st, vals);
            break;
        case ST_COND_INIT: // a launch starts: the defaults of the handles that have them
            for (size_t k = 0; vals && k < vals->n; k++)
                if (vals->e[k].flags & CU_GRAPH_COND_ASSIGN_DEFAULT)
                    vals->e[k].value = vals->e[k].dflt;
            break;
        default: // memory the node names was gone when the launch was queued
            rc = CUDA_ERROR_ILLEGAL_ADDRESS;
        }
        if (rc) return rc;
    }
    return CUDA_SUCCESS;
}

static CUresult batch_run(struct cpudrv_op *op)
{
    const struct batch *b = (const struct batch *)op->data;
    struct condvals *saved = cur_vals;
    cur_vals = b->vals;
    CUresult rc = steps_run(b->s, b->n, b->vals);
    cur_vals = saved;
    return rc;
}

// cpudrv_big held: releases what a step holds.
static void step_release(struct step *st)
{
    if (st->kind == ST_KERNEL) {
        cpudrv_obj_put(&st->u.L.mod->o);
        free((void *)st->u.L.args);
    } else if (st->kind == ST_COPY) {
        for (int k = 0; k < 2; k++)
            if (st->u.c.hold[k]) cpudrv_obj_put(st->u.c.hold[k]);
    } else if (st->kind == ST_MEMOP) {
        free(st->u.b.ops);
    } else if (st->kind == ST_COND) {
        for (unsigned k = 0; st->u.cond.body && k < st->u.cond.size; k++) {
            for (size_t j = 0; j < st->u.cond.body[k].n; j++)
                step_release(&st->u.cond.body[k].s[j]);
            free(st->u.cond.body[k].s);
        }
        free(st->u.cond.body);
    }
}

static void batch_fini(struct cpudrv_op *op)
{
    struct batch *b = (struct batch *)op->data;
    for (size_t i = 0; i < b->n; i++)
        step_release(&b->s[i]);
    free(b->s);
    condvals_put(b->vals);
}

static int overlaps(const void *p, size_t n, uintptr_t lo, uintptr_t hi)
{
    return n && (uintptr_t)p < hi && (uintptr_t)p + n > lo;
}

// As the stream operations each step stands for: a kernel may access what any 8-byte
// argument slot points into, a copy or memset its ranges.
static int steps_touch(const struct step *s, size_t n, uintptr_t lo, uintptr_t hi)
{
    for (size_t i = 0; i < n; i++) {
        const struct step *st = &s[i];
        if (st->kind == ST_COND) {
            for (unsigned k = 0; k < st->u.cond.size; k++)
                if (steps_touch(st->u.cond.body[k].s, st->u.cond.body[k].n, lo, hi)) return 1;
        } else if (st->kind == ST_KERNEL) {
            for (uint32_t off = 0; off + 8 <= st->u.L.f->argbytes; off += 8) {
                uint64_t v;
                memcpy(&v, st->u.L.args + off, 8);
                if (v >= lo && v < hi) return 1;
            }
        } else if (st->kind == ST_COPY) {
            const struct cpudrv_xfer *x = &st->u.c.x;
            if (overlaps(x->dst,
                         cpudrv_xfer_span(x->width, x->height, x->depth, x->dpitch, x->dslice), lo,
                         hi) ||
                overlaps(x->src,
                         cpudrv_xfer_span(x->width, x->height, x->depth, x->spitch, x->sslice), lo,
                         hi))
                return 1;
        } else if (st->kind == ST_FILL) {
            if (overlaps(st->u.f.dst, cpudrv_fill_span(&st->u.f), lo, hi)) return 1;
        } else if (st->kind == ST_MEMOP) {
            for (unsigned k = 0; k < st->u.b.n; k++) {
                const CUstreamBatchMemOpParams *o = &st->u.b.ops[k];
                if ((o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
                     o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64) &&
                    overlaps((void *)(uintptr_t)o->waitValue.address, 8, lo, hi))
                    return 1;
                if ((o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
                     o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64) &&
                    overlaps((void *)(uintptr_t)o->writeValue.address, 8, lo, hi))
                    return 1;
            }
        }
    }
    return 0;
}

static int batch_touches(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi)
{
    const struct batch *b = (const struct batch *)op->data;
    return steps_touch(b->s, b->n, lo, hi);
}

static int make_step(const struct cpudrv_gnode *n, struct cpudrv_stream *s, struct condvals *vals,
                     struct step *st);

// Appends a step to a run; -1 if out of memory.
static int steps_push(struct steps *l, const struct step *st)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct step *p = realloc(l->s, cap * sizeof *p);
        if (!p) return -1;
        l->s = p;
        l->cap = cap;
    }
    l->s[l->n++] = *st;
    return 0;
}

// cpudrv_big held: the steps of a conditional node's body g launched on s, in an order
// that respects every edge, child graphs in their place (checked at instantiation: no
// cycle, only node types a body may hold). -1 if out of memory.
static int body_steps(const struct cpudrv_graph *g, struct cpudrv_stream *s, struct condvals *vals,
                      struct steps *out)
{
    struct cpudrv_gnode **o, *bad = NULL;
    if (cpudrv_graph_order(g, &o, &bad)) return -1;
    int r = 0;
    for (size_t i = 0; !r && i < g->n; i++) {
        struct step st;
        if (o[i]->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            r = body_steps(o[i]->u.child, s, vals, out);
        } else if ((r = make_step(o[i], s, vals, &st)) > 0) {
            r = steps_push(out, &st);
            if (r) step_release(&st);
        }
    }
    free(o);
    return r;
}

// cpudrv_big held: the step for node n launched on s (0 and no step for a disabled or
// empty node; -1 if out of memory). vals: the values of the executable graph's handles.
static int make_step(const struct cpudrv_gnode *n, struct cpudrv_stream *s, struct condvals *vals,
                     struct step *st)
{
    memset(st, 0, sizeof *st);
    if (n->disabled) return 0;
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const struct cpudrv_kparams *k = &n->u.k;
        unsigned char *args = malloc(k->f->argbytes ? k->f->argbytes : 1);
        if (!args) return -1;
        memcpy(args, k->args, k->f->argbytes);
        st->kind = ST_KERNEL;
        st->u.L.f = k->f;
        st->u.L.mod = k->f->mod;
        cpudrv_obj_ref(&k->f->mod->o);
        memcpy(st->u.L.grid, k->grid, sizeof k->grid);
        memcpy(st->u.L.block, k->block, sizeof k->block);
        st->u.L.shmem = k->shmem;
        st->u.L.args = args;
        st->u.L.dying = &s->o.ctx->dying;
        return 1;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        struct cpudrv_array *sa, *da;
        int scls, dcls;
        st->kind = ST_FAULT;
        if (cpudrv_copy3d_resolve(&n->u.m.p, &st->u.c.x, &scls, &dcls, &sa, &da) == CUDA_SUCCESS) {
            st->kind = ST_COPY;
            if (da) cpudrv_obj_ref(st->u.c.hold[0] = &da->o);
            if (sa) cpudrv_obj_ref(st->u.c.hold[1] = &sa->o);
        }
        return 1;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS *p = &n->u.s.p;
        struct cpudrv_fill f = {(unsigned char *)(uintptr_t)p->dst,
                                p->pitch,
                                p->width,
                                p->height,
                                p->elementSize,
                                p->value};
        st->kind = cpudrv_fill_check(&f) ? ST_FAULT : ST_FILL;
        st->u.f = f;
        return 1;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
        st->kind = ST_HOST;
        st->u.h = n->u.h;
        return 1;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        size_t bytes = n->u.b.count * sizeof *n->u.b.ops;
        st->kind = ST_MEMOP;
        if (!(st->u.b.ops = malloc(bytes))) return -1;
        memcpy(st->u.b.ops, n->u.b.ops, bytes);
        st->u.b.n = n->u.b.count;
        st->u.b.dying = &s->o.ctx->dying;
        return 1;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
        const struct cpudrv_cparams *c = &n->u.c;
        st->kind = ST_FAULT; // a handle of no graph of the executable graph: never, checked
        for (size_t k = 0; vals && k < vals->n; k++)
            if (vals->e[k].h == c->h) st->u.cond.v = &vals->e[k];
        if (!st->u.cond.v) return 1;
        st->kind = ST_COND;
        st->u.cond.type = c->type;
        st->u.cond.size = c->size;
        if (!(st->u.cond.body = calloc(c->size, sizeof *st->u.cond.body))) return -1;
        for (unsigned k = 0; k < c->size; k++)
            if (body_steps(c->body[k], s, vals, &st->u.cond.body[k])) {
                step_release(st);
                return -1;
            }
        return 1;
    }
    default:
        return 0;
    }
}

// A launch being queued: the operation being filled, and what was queued so far.
struct launch {
    struct cpudrv_stream *s;
    struct cpudrv_op *op;
    uint64_t seq;          // of the latest operation queued
    struct condvals *vals; // the executable graph's handle values, or NULL
};

static CUresult launch_op(struct launch *l)
{
    if (l->op) return CUDA_SUCCESS;
    l->op = cpudrv_op_new(sizeof(struct batch));
    if (!l->op) return CUDA_ERROR_OUT_OF_MEMORY;
    l->op->run = batch_run;
    l->op->fini = batch_fini;
    l->op->touches = batch_touches;
    if (l->vals) {
        ((struct batch *)l->op->data)->vals = l->vals;
        l->vals->refs++;
    }
    return CUDA_SUCCESS;
}

// Queues the operation being filled, if it has steps or dependencies (force: anyway).
static CUresult launch_flush(struct launch *l, int force)
{
    struct batch *b = l->op ? (struct batch *)l->op->data : NULL;
    if (!l->op || (!force && !b->n && !l->op->ndeps)) return CUDA_SUCCESS;
    uint64_t seq = cpudrv_stream_submit(l->s, l->op);
    l->op = NULL;
    if (!seq) return CUDA_ERROR_INVALID_HANDLE;
    l->seq = seq;
    return CUDA_SUCCESS;
}

// Adds a step to the operation being filled (released if it cannot be).
static CUresult launch_push(struct launch *l, struct step *st)
{
    CUresult rc = launch_op(l);
    struct batch *b = l->op ? (struct batch *)l->op->data : NULL;
    if (!rc && b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        struct step *s = realloc(b->s, cap * sizeof *s);
        if (s) {
            b->s = s;
            b->cap = cap;
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc)
        step_release(st);
    else
        b->s[b->n++] = *st;
    return rc;
}

static CUresult launch_step(struct launch *l, const struct cpudrv_gnode *n)
{
    struct step st;
    int r = make_step(n, l->s, l->vals, &st);
    if (r <= 0) return r ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    return launch_push(l, &st);
}

// cpudrv_big held: queues a launch of x on s (not capturing).
static CUresult launch(struct cpudrv_gexec *x, struct cpudrv_stream *s)
{
    struct launch l = {s, NULL, 0, x->vals};
    CUresult rc = cpudrv_gmem_launch_check(
        x->order, x->n, !!(x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    if (rc) return rc;
    rc = launch_op(&l);
    if (!rc && x->last && cpudrv_op_dep(l.op, x->last, x->last_seq)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && x->vals) { // the handles' defaults, first
        struct step init = {.kind = ST_COND_INIT};
        rc = launch_push(&l, &init);
    }
    for (size_t i = 0; !rc && i < x->n; i++) {
        const struct cpudrv_gnode *n = x->order[i];
        if (n->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
            rc = launch_flush(&l, 0);
            if (!rc) rc = cpudrv_event_record_on(n->u.ev, s);
            if (!rc) l.seq = n->u.ev->seq;
        } else if (n->type == CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
            struct batch *b = l.op ? (struct batch *)l.op->data : NULL;
            if (b && b->n) rc = launch_flush(&l, 0);
            if (!rc) rc = launch_op(&l);
            if (!rc && cpudrv_event_dep(n->u.ev, l.op)) rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            rc = launch_step(&l, n);
        }
    }
    if (!rc) rc = launch_flush(&l, !l.seq);
    if (!rc) cpudrv_gmem_launched(x->order, x->n);
    if (l.op) cpudrv_op_discard(l.op);
    if (l.seq) {
        cpudrv_obj_ref(&s->o);
        if (x->last) cpudrv_obj_put(&x->last->o);
        x->last = s;
        x->last_seq = l.seq;
    }
    return rc;
}

/* ---------------------------------------------------------------- instantiation */

static CUresult cond_ok(const struct cpudrv_gnode *n);

// A conditional node's body as instantiation checks it: no cycle, and only kernel, empty,
// memcpy, memset, child graph and conditional nodes, at any depth (the driver's rule).
static CUresult body_ok(const struct cpudrv_graph *g)
{
    struct cpudrv_gnode **o, *bad = NULL;
    CUresult rc = cpudrv_graph_order(g, &o, &bad);
    if (rc) return rc;
    free(o);
    for (const struct cpudrv_gnode *n = g->head; !rc && n; n = n->next)
        switch (n->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL:
        case CU_GRAPH_NODE_TYPE_EMPTY:
        case CU_GRAPH_NODE_TYPE_MEMCPY:
        case CU_GRAPH_NODE_TYPE_MEMSET:
            break;
        case CU_GRAPH_NODE_TYPE_GRAPH:
            rc = body_ok(n->u.child);
            break;
        case CU_GRAPH_NODE_TYPE_CONDITIONAL:
            rc = cond_ok(n);
            break;
        default:
            rc = CUDA_ERROR_INVALID_VALUE;
        }
    return rc;
}

// A conditional node reads a handle of its graph's (or of a graph it is nested in), and
// its bodies are fit to run.
static CUresult cond_ok(const struct cpudrv_gnode *n)
{
    if (!cpudrv_cond_find(n->g, n->u.c.h)) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    for (unsigned k = 0; !rc && k < n->u.c.size; k++)
        rc = body_ok(n->u.c.body[k]);
    return rc;
}

// The handles made for g and the graphs nested in it: counted, or (v) gathered.
static size_t conds_of(const struct cpudrv_graph *g, struct condvals *v)
{
    size_t total = g->nconds;
    for (size_t i = 0; v && i < g->nconds; i++) {
        const struct cpudrv_cond *c = &g->conds[i];
        v->e[v->n++] = (struct condval){c->h, c->dflt, c->flags, c->dflt};
    }
    for (const struct cpudrv_gnode *n = g->head; n; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) total += conds_of(n->u.child, v);
        for (unsigned k = 0; n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && k < n->u.c.size; k++)
            total += conds_of(n->u.c.body[k], v);
    }
    return total;
}

// The values of x's handles (none: NULL), each starting at its default.
static CUresult vals_make(struct cpudrv_gexec *x)
{
    size_t n = conds_of(x->g, NULL);
    if (!n) return CUDA_SUCCESS;
    x->vals = calloc(1, sizeof *x->vals + n * sizeof x->vals->e[0]);
    if (!x->vals) return CUDA_ERROR_OUT_OF_MEMORY;
    x->vals->refs = 1;
    conds_of(x->g, x->vals);
    return CUDA_SUCCESS;
}

// Appends g's nodes, in an order that respects every edge, to x->order, a child graph
// node's graph in its place. INVALID_VALUE for a cycle (*bad: the top-level node on it).
static CUresult flatten(struct cpudrv_gexec *x, const struct cpudrv_graph *g, size_t *cap,
                        struct cpudrv_gnode **bad)
{
    struct cpudrv_gnode **o, *b = NULL;
    CUresult rc = cpudrv_graph_order(g, &o, &b);
    if (rc) {
        *bad = b;
        return rc;
    }
    for (size_t i = 0; !rc && i < g->n; i++) {
        if (o[i]->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            rc = flatten(x, o[i]->u.child, cap, bad);
            if (rc) *bad = o[i];
            continue;
        }
        // A conditional node is one step: its bodies run (or not) when it runs.
        if (o[i]->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && (rc = cond_ok(o[i])) != CUDA_SUCCESS) {
            *bad = o[i];
            break;
        }
        if (x->n == *cap) {
            size_t c = *cap ? *cap * 2 : 16;
            struct cpudrv_gnode **p = realloc(x->order, c * sizeof *p);
            if (!p) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            x->order = p;
            *cap = c;
        }
        x->order[x->n++] = o[i];
    }
    free(o);
    return rc;
}

// Only kernel, memcpy, memset and child graph nodes may be launched from the device, and
// at least one node must do work.
static int device_ok(const struct cpudrv_gexec *x, const struct cpudrv_graph *g,
                     struct cpudrv_gnode **bad)
{
    for (struct cpudrv_gnode *n = g->head; n; n = n->next)
        if (n->type != CU_GRAPH_NODE_TYPE_KERNEL && n->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
            n->type != CU_GRAPH_NODE_TYPE_MEMSET &&
            (n->type != CU_GRAPH_NODE_TYPE_GRAPH || !device_ok(x, n->u.child, bad))) {
            if (!*bad) *bad = n;
            return 0;
        }
    return g != x->g || x->n > 0;
}

// cpudrv_big held: queues an upload of x on s: it orders nothing but the launches.
static CUresult upload(struct cpudrv_gexec *x, struct cpudrv_stream *s)
{
    int capturing = 0;
    CUresult rc = cpudrv_capture_check(s, &capturing);
    if (rc || capturing) return rc; // nothing for a graph to capture
    struct cpudrv_op *op = cpudrv_op_new(0);
    if (!op || (x->last && cpudrv_op_dep(op, x->last, x->last_seq))) {
        if (op) cpudrv_op_discard(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t seq = cpudrv_stream_submit(s, op);
    if (!seq) return CUDA_ERROR_INVALID_HANDLE;
    cpudrv_obj_ref(&s->o);
    if (x->last) cpudrv_obj_put(&x->last->o);
    x->last = s;
    x->last_seq = seq;
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *out, CUgraph hGraph, cuuint64_t flags, int with_params,
                            CUstream hUpload, CUgraphNode *err, CUgraphInstantiateResult *res)
{
    const cuuint64_t known =
        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
        CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    *err = NULL;
    *res = CUDA_GRAPH_INSTANTIATE_ERROR;
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    if (!out || (flags & ~known) ||
        (!with_params && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) ||
        ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) &&
         (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)))
        return CUDA_ERROR_INVALID_VALUE;
    cpudrv_lock();
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    struct cpudrv_gexec *x = NULL;
    struct cpudrv_gnode *bad = NULL;
    struct cpudrv_stream *us = NULL;
    size_t cap = 0;
    // One instantiation at a time of a graph with memory nodes (the driver's rule).
    if (!g || cpudrv_graph_capturing(g) || cpudrv_graph_mem_instantiated(g))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
        rc = cpudrv_stream_get(hUpload, cpudrv_ctx_current(), &us);
    if (!rc && !(x = calloc(1, sizeof *x))) rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        cpudrv_obj_init(&x->o, CPUDRV_K_GEXEC, NULL, exec_release);
        x->flags = flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
        rc = cpudrv_graph_clone(g, 0, &x->g);
    }
    if (!rc) {
        rc = flatten(x, x->g, &cap, &bad);
        if (!rc) rc = vals_make(x);
        if (rc == CUDA_ERROR_INVALID_VALUE) {
            *res = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
            for (struct cpudrv_gnode *n = g->head; bad && n; n = n->next)
                if (n->id == bad->orig) *err = (CUgraphNode)n;
        }
    }
    if (!rc && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) && !device_ok(x, x->g, &bad)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        *res = CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
        for (struct cpudrv_gnode *n = g->head; bad && n; n = n->next)
            if (n->id == bad->orig) *err = (CUgraphNode)n;
    }
    if (!rc && us) rc = upload(x, us);
    if (rc) {
        if (x && x->g)
            exec_release(&x->o);
        else
            free(x);
    } else {
        cpudrv_obj_publish(&x->o);
        *out = (CUgraphExec)x;
        *res = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    }
    cpudrv_unlock();
    return rc;
}

// Instantiates a graph (flags: AUTO_FREE_ON_LAUNCH, DEVICE_LAUNCH, USE_NODE_PRIORITY).
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    CUgraphNode err;
    CUgraphInstantiateResult res;
    return TR(instantiate(phGraphExec, hGraph, flags, 0, NULL, &err, &res));
}

// Instantiates a graph, uploading it if asked, and says why it could not.
CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    if (!instantiateParams) return TR(CUDA_ERROR_INVALID_VALUE);
    CUDA_GRAPH_INSTANTIATE_PARAMS *p = instantiateParams;
    return TR(instantiate(phGraphExec, hGraph, p->flags, 1, p->hUploadStream, &p->hErrNode_out,
                          &p->result_out));
}

// The flags an executable graph was instantiated with (UPLOAD is not one of them).
CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!flags) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_gexec *x = exec_find(hGraphExec);
    if (x)
        *flags = x->flags;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Destroys an executable graph; launches already queued still run.
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_gexec *x = exec_find(hGraphExec);
    if (x)
        cpudrv_obj_unpublish(&x->o);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- launch and upload */

// Queues the executable graph on a stream, after the stream's work and the graph's
// previous launches. On a capturing stream it becomes a child graph node.
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_gexec *x = exec_find(hGraphExec);
    struct cpudrv_stream *s;
    int capturing = 0;
    rc = x ? cpudrv_stream_get(hStream, cpudrv_ctx_current(), &s) : CUDA_ERROR_INVALID_VALUE;
    if (!rc) rc = cpudrv_capture_check(s, &capturing);
    if (!rc && capturing) {
        struct cpudrv_gnode *n = cpudrv_gnode_new(CU_GRAPH_NODE_TYPE_GRAPH);
        if (!n)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((rc = cpudrv_graph_clone(x->g, 1, &n->u.child)) != CUDA_SUCCESS)
            cpudrv_gnode_free(n);
        if (!rc) {
            n->u.child->owner = n;
            rc = cpudrv_capture_add(s, n);
        }
    } else if (!rc) {
        rc = launch(x, s);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Prepares the executable graph on a stream (ordered like a launch; nothing to do here).
CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_gexec *x = exec_find(hGraphExec);
    struct cpudrv_stream *s;
    rc = x ? cpudrv_stream_get(hStream, cpudrv_ctx_current(), &s) : CUDA_ERROR_INVALID_VALUE;
    if (!rc) rc = upload(x, s);
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- updates */

// Pairs the nodes of executable graph copy eg and graph sg in creation order and says
// whether sg's parameters can replace eg's (topology, types, what may change by type).
static CUgraphExecUpdateResult update_check(const struct cpudrv_graph *eg,
                                            const struct cpudrv_graph *sg, CUgraphNode *err,
                                            CUgraphNode *err_from)
{
    if (eg->n != sg->n) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    size_t i = 0;
    for (struct cpudrv_gnode *a = eg->head, *b = sg->head; a; a = a->next, b = b->next, i++)
        a->mark = b->mark = i;
    for (struct cpudrv_gnode *a = eg->head, *b = sg->head; a; a = a->next, b = b->next) {
        *err = (CUgraphNode)b;
        if (a->type != b->type) return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        if (a->in.n != b->in.n) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        for (size_t k = 0; k < b->in.n; k++) {
            int found = 0;
            for (size_t j = 0; j < a->in.n; j++)
                found |= a->in.e[j].n->mark == b->in.e[k].n->mark;
            if (!found) {
                *err_from = (CUgraphNode)b->in.e[k].n;
                return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
            }
        }
        if (a->type == CU_GRAPH_NODE_TYPE_KERNEL && a->u.k.f->mod->o.ctx != b->u.k.f->mod->o.ctx)
            return CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
        if (a->type == CU_GRAPH_NODE_TYPE_MEMCPY &&
            (a->u.m.p.srcMemoryType != b->u.m.p.srcMemoryType ||
             a->u.m.p.dstMemoryType != b->u.m.p.dstMemoryType))
            return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        if (a->type == CU_GRAPH_NODE_TYPE_MEMSET) {
            const CUDA_MEMSET_NODE_PARAMS *p = &a->u.s.p, *q = &b->u.s.p;
            if ((p->height > 1 || q->height > 1) &&
                (p->height != q->height || p->width != q->width ||
                 p->elementSize != q->elementSize || p->pitch != q->pitch))
                return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        }
        if (a->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            CUgraphExecUpdateResult r = update_check(a->u.child, b->u.child, err, err_from);
            if (r != CU_GRAPH_EXEC_UPDATE_SUCCESS) return r;
        }
        if (a->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            // The same kind of node on the same handle; its bodies update as child graphs.
            if (a->u.c.type != b->u.c.type || a->u.c.size != b->u.c.size || a->u.c.h != b->u.c.h)
                return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
            for (unsigned k = 0; k < a->u.c.size; k++) {
                CUgraphExecUpdateResult r =
                    update_check(a->u.c.body[k], b->u.c.body[k], err, err_from);
                if (r != CU_GRAPH_EXEC_UPDATE_SUCCESS) return r;
            }
        }
    }
    *err = NULL;
    return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

// Copies the parameters of sg's nodes into their pairs in eg (checked by update_check).
static CUresult update_apply(struct cpudrv_graph *eg, const struct cpudrv_graph *sg)
{
    CUresult rc = CUDA_SUCCESS;
    for (struct cpudrv_gnode *a = eg->head, *b = sg->head; !rc && a; a = a->next, b = b->next)
        if (a->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
            for (unsigned k = 0; !rc && k < a->u.c.size; k++)
                rc = update_apply(a->u.c.body[k], b->u.c.body[k]);
        else
            rc = a->type == CU_GRAPH_NODE_TYPE_GRAPH ? update_apply(a->u.child, b->u.child)
                                                     : cpudrv_gnode_params_copy(a, b, 0);
    return rc;
}

// Takes the parameters of a graph of the same shape into the executable graph.
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                              CUgraphExecUpdateResultInfo *resultInfo)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!resultInfo) return TR(CUDA_ERROR_INVALID_VALUE);
    memset(resultInfo, 0, sizeof *resultInfo);
    resultInfo->result = CU_GRAPH_EXEC_UPDATE_ERROR;
    cpudrv_lock();
    struct cpudrv_gexec *x = exec_find(hGraphExec);
    struct cpudrv_graph *g = cpudrv_graph_find(hGraph);
    if (!x || !g || cpudrv_graph_capturing(g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        resultInfo->result =
            update_check(x->g, g, &resultInfo->errorNode, &resultInfo->errorFromNode);
        if (resultInfo->result != CU_GRAPH_EXEC_UPDATE_SUCCESS)
            rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        else
            rc = update_apply(x->g, g);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Locks and finds an executable graph and its copy of node h (of a type, or any if type
// is negative); on success cpudrv_big is HELD.
static CUresult exec_and_node(CUgraphExec hx, CUgraphNode h, int type, struct cpudrv_gexec **x,
                              struct cpudrv_gnode **n)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_gnode *o = cpudrv_gnode_find(h);
    *x = exec_find(hx);
    *n = *x && o ? exec_node((*x)->g, o->id) : NULL;
    if (!*n || (type >= 0 && (int)(*n)->type != type)) {
        cpudrv_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// Replaces en's parameters with those of tmp (a node made only to validate them), then
// frees tmp.
static CUresult take_params(struct cpudrv_gnode *en, struct cpudrv_gnode *tmp)
{
    CUresult rc = cpudrv_gnode_params_copy(en, tmp, 0);
    cpudrv_gnode_free(tmp);
    return rc;
}

// Sets a kernel node's parameters for later launches of the executable graph (its
// function must stay in the same context).
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = cpudrv_node_load_wait(nodeParams);
    if (rc) return TR(rc);
    rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, &x, &en);
    if (rc) return TR(rc);
    struct cpudrv_gnode *tmp = cpudrv_gnode_new(CU_GRAPH_NODE_TYPE_KERNEL);
    rc = tmp ? cpudrv_gnode_set_kernel(tmp, nodeParams, cpudrv_ctx_current())
             : CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && tmp->u.k.f->mod->o.ctx != en->u.k.f->mod->o.ctx) rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = take_params(en, tmp);
    else if (tmp)
        cpudrv_gnode_free(tmp);
    cpudrv_unlock();
    return TR(rc);
}

// Sets a memcpy node's parameters for later launches: a 1D copy between memory of the same
// kinds as before.
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &x, &en);
    if (rc) return TR(rc);
    struct cpudrv_gnode *tmp = cpudrv_gnode_new(CU_GRAPH_NODE_TYPE_MEMCPY);
    rc = tmp ? cpudrv_gnode_set_memcpy(tmp, copyParams, ctx, cpudrv_ctx_current())
             : CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        const CUDA_MEMCPY3D *a = &en->u.m.p, *b = &tmp->u.m.p;
        if (a->Height != 1 || a->Depth != 1 || b->Height != 1 || b->Depth != 1 ||
            a->srcMemoryType != b->srcMemoryType || a->dstMemoryType != b->dstMemoryType)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (!rc)
        rc = take_params(en, tmp);
    else if (tmp)
        cpudrv_gnode_free(tmp);
    cpudrv_unlock();
    return TR(rc);
}

// Sets a memset node's parameters for later launches: a 2D memset keeps its shape, a 1D
// one stays 1D.
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, &x, &en);
    if (rc) return TR(rc);
    struct cpudrv_gnode *tmp = cpudrv_gnode_new(CU_GRAPH_NODE_TYPE_MEMSET);
    rc = tmp ? cpudrv_gnode_set_memset(tmp, memsetParams, ctx, cpudrv_ctx_current())
             : CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        const CUDA_MEMSET_NODE_PARAMS *p = &en->u.s.p, *q = &tmp->u.s.p;
        if ((p->height > 1 || q->height > 1) &&
            (p->height != q->height || p->width != q->width || p->elementSize != q->elementSize ||
             p->pitch != q->pitch))
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (!rc)
        rc = take_params(en, tmp);
    else if (tmp)
        cpudrv_gnode_free(tmp);
    cpudrv_unlock();
    return TR(rc);
}

// Sets a host node's function and data for later launches.
CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                      const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, &x, &en);
    if (rc) return TR(rc);
    if (!nodeParams || !nodeParams->fn)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        en->u.h = *nodeParams;
    cpudrv_unlock();
    return TR(rc);
}

// Sets a batch mem-op node's operations for later launches.
CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                            const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &x, &en);
    if (rc) return TR(rc);
    struct cpudrv_gnode *tmp = cpudrv_gnode_new(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    rc = tmp ? cpudrv_gnode_set_batch(tmp, nodeParams, cpudrv_ctx_current())
             : CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc)
        rc = take_params(en, tmp);
    else if (tmp)
        cpudrv_gnode_free(tmp);
    cpudrv_unlock();
    return TR(rc);
}

// Takes the parameters of a graph shaped like a child graph node's into its copy.
CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                            CUgraph childGraph)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_GRAPH, &x, &en);
    if (rc) return TR(rc);
    struct cpudrv_graph *g = cpudrv_graph_find(childGraph);
    CUgraphNode err = NULL, from = NULL;
    if (!g || cpudrv_graph_capturing(g) ||
        update_check(en->u.child, g, &err, &from) != CU_GRAPH_EXEC_UPDATE_SUCCESS)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = update_apply(en->u.child, g);
    cpudrv_unlock();
    return TR(rc);
}

static CUresult exec_event(CUgraphExec hGraphExec, CUgraphNode hNode, int type, CUevent event)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, type, &x, &en);
    if (rc) return rc;
    struct cpudrv_event *e = cpudrv_event_find(event);
    if (e) {
        cpudrv_obj_ref(&e->o);
        cpudrv_obj_put(&en->u.ev->o);
        en->u.ev = e;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    cpudrv_unlock();
    return rc;
}

// Sets an event record node's event for later launches.
CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                            CUevent event)
{
    return TR(exec_event(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event));
}

// Sets an event wait node's event for later launches.
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    return TR(exec_event(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event));
}

// Kernel, memcpy and memset nodes can be disabled (they then do nothing) and enabled.
static int can_disable(const struct cpudrv_gnode *n)
{
    return n->type == CU_GRAPH_NODE_TYPE_KERNEL || n->type == CU_GRAPH_NODE_TYPE_MEMCPY ||
           n->type == CU_GRAPH_NODE_TYPE_MEMSET;
}

// Enables or disables a node for later launches.
CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, -1, &x, &en);
    if (rc) return TR(rc);
    if (can_disable(en))
        en->disabled = !isEnabled;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Whether a node is enabled in the executable graph.
CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
    if (!isEnabled) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_gexec *x;
    struct cpudrv_gnode *en;
    CUresult rc = exec_and_node(hGraphExec, hNode, -1, &x, &en);
    if (rc) return TR(rc);
    if (can_disable(en))
        *isEnabled = !en->disabled;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    cpudrv_unlock();
    return TR(rc);
}

// Sets a node's parameters of any type for later launches, with the rules of the typed
// calls it stands for (empty nodes have none).
CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                  CUgraphNodeParams *nodeParams)
{
    if (cpudrv_node_params_check(nodeParams)) return TR(CUDA_ERROR_INVALID_VALUE);
    const CUgraphNodeParams *p = nodeParams;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS k = cpudrv_kernel_params_typed(&p->kernel);
        return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &k);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &p->memcpy.copyParams,
                                              p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m = cpudrv_memset_params_typed(&p->memset);
        return cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS h = {p->host.fn, p->host.userData};
        return cuGraphExecHostNodeSetParams(hGraphExec, hNode, &h);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_EMPTY: {
        struct cpudrv_gexec *x;
        struct cpudrv_gnode *en;
        CUresult rc = exec_and_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EMPTY, &x, &en);
        if (!rc) cpudrv_unlock();
        return TR(rc);
    }
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
        CUDA_BATCH_MEM_OP_NODE_PARAMS b = {p->memOp.ctx, p->memOp.count, p->memOp.paramArray,
                                           p->memOp.flags};
        return cuGraphExecBatchMemOpNodeSetParams(hGraphExec, hNode, &b);
    }
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return TR(CUDA_ERROR_NOT_SUPPORTED);
    default:
        return TR(CUDA_ERROR_INVALID_VALUE);
    }
}
