/* Launch sequences replayed as graphs: a client's run of kernel launches that it repeats
 * exactly (an inference step, a solver's iteration) is launched as one CUDA graph once it
 * has been seen whole SEQ_SEEN times, instead of launch by launch.
 *
 * Why: in the one shared context every launch takes the driver's launch path under the
 * context's own serialisation, which busy clients crowd; one graph launch stands for many
 * (bench/README.md: "One context's ceiling", and "Launch sequences as graphs" for what this
 * file gains). The server's CPU time per step is what clients on every core compete for.
 *
 * What is the same sequence: the same stream, and launch for launch the same function,
 * grid, block, dynamic shared memory and parameter size. The parameters' values may change
 * (a framework's often do from step to step): a node whose values differ from the held
 * launch's is given them (cuGraphExecKernelNodeSetParams) before the graph goes (up to
 * MPSSHIM_LAUNCH_GRAPH_UPDATE_PCT of them, every one by default; more, and the launches go
 * one by one: update(), below). Plain launches only: a launch with
 * attributes or a cooperative one, a launch into a capture of the client's, a launch on a
 * stream of a green context (an SM share: graph kernels must keep to it exactly as launches
 * do, which is not shown) end the run and are launched as they are.
 *
 * How, per client (its worker's own state, never shared):
 *  - learning: the plain launches since the last other record (the "run") are kept; when
 *    another record comes (any copy, sync, event, allocation, ...), the run is looked up
 *    among SEQ_SLOTS slots by its shape; seen whole SEQ_SEEN times, the slot gets a graph:
 *    a chain of kernel nodes with the latest values, instantiated once.
 *  - replay: a launch of the shape of the first of a slot with a graph, on its stream, is
 *    held back (not issued) while the next ones keep matching; the last one launches the
 *    graph, its nodes given the held launches' values first where those changed. Any
 *    mismatch, any other record, or the ring staying empty for its grace issues the held
 *    launches one by one, in order, as if nothing had been held: nothing waits longer than
 *    that for a launch the client made (a client spinning on a flag its kernel writes to
 *    mapped memory makes no call the server would see).
 *  - one stream per slot: a graph exec launched on two streams would order the two
 *    launches (the driver serialises an exec's launches), which the client never asked for.
 *  - calls that change what a launched kernel does beyond its parameters (function and
 *    kernel attributes, cache and shared-memory configuration, context limits, unloads)
 *    drop every slot of the client; a stream's slots go with it, a device's with its
 *    context in a fault (forgotten there: the context is gone).
 *  - long runs in parts: a run is kept in parts of at most SEQ_MAX launches (and SEQ_PARAMS
 *    bytes), cut where a part is full, each part a sequence of its own. Why: a solver's or an
 *    MPI rank's iteration is often a hundred launches or more between two synchronisations
 *    (bench/mpi_steps: 100), too many to hold whole before the GPU may start on them; in
 *    parts, the GPU waits for at most SEQ_MAX launches' arrival, and the parts of a long run
 *    repeated become graphs as short runs do. A hold that ends before its slot is whole (the
 *    run's last, shorter part was held as the start of a full one) goes as the graph of the
 *    slot that is exactly the held launches, where there is one.
 * Errors: a graph's launch that fails issues the launches one by one, whose errors are the
 * client's as before (deferred to its next synchronisation). */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/reply.h"
#include "server/limits/account.h"
#include "server/code/launch.h"
#include "server/code/seqgraph.h"
#include "server/core/family.h"
#include "server/core/queue.h"
#include "server/core/spin.h"
#include "server/core/coalesce.h"
#include "channel/settings.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_MAX 32             /* launches in a sequence */
#define SEQ_PARAMS (16u << 10) /* parameter bytes of a sequence, all its launches */
#define SEQ_SLOTS 8            /* sequences kept per client */
#define SEQ_SEEN 3             /* seen whole this often, a sequence gets its graph */
/* Holding launches delays the GPU's start on them until the sequence is whole, which is
 * only worth it for a burst: a sequence gets a graph only when, in at least one of its
 * sightings, no two of its launches came more than burst_ns apart (a driver-API loop's
 * come microseconds apart; an interpreter's, tens: holding those delays the GPU more than
 * the graph saves, bench/README.md; while crowded the coalescing bound stands for burst_ns
 * there: gap_rule_bars). Held launches wait burst_ns for the next one (the
 * worker spins), or twice the sequence's own gap where that is longer, or SEQ_CROWDED times
 * burst_ns while the server is crowded (spin.c), when a client is often descheduled
 * mid-burst: the worker then gives its CPU away between looks (sched_yield), perhaps to that
 * client. burst_ns is MPSSHIM_LAUNCH_GRAPH_GAP_US (20 us by default); the tests raise it, so
 * that a client descheduled on a loaded machine of two CPUs still counts as a burst and the
 * rest of the mechanism is what they check. A sequence whose holds end unreplayed SEQ_FAILS
 * times in a row (their grace ran out, or too many values changed) is barred: its graph
 * goes, and it is never made another while its slot lasts. */
#define SEQ_CROWDED 10
#define SEQ_FAILS 4

struct seq_launch {
    uint64_t func;
    uint32_t grid[3], block[3], smem;
    uint32_t kernel;     /* func is a CUkernel (a library's), named so in a node */
    uint32_t poff, plen; /* its parameters in the sequence's bytes */
};

/* A run of plain launches on one stream. */
struct seq {
    struct srv_stream *s;
    uint32_t n, pbytes, off; /* off: something in it cannot be kept; never a slot */
    uint64_t hash;
    uint64_t last_ns, gap_ns; /* arrival of its last launch; longest gap between two */
    struct seq_launch l[SEQ_MAX];
    uint8_t *params; /* SEQ_PARAMS bytes (run and held); exactly pbytes (slots) */
};

struct slot {
    struct seq q;         /* q.n == 0: free; q.params: the values its graph's nodes hold now */
    uint32_t seen, fails; /* fails: holds in a row that ended unreplayed */
    uint32_t barred;      /* never a graph again (its holds failed, or no graph could be made) */
    uint32_t gap_barred;  /* the gap rule settled it while doorbells rang: gap_rule_bars */
    uint32_t gap_said;    /* counted once as held back by the gap rule (n_gap_barred) */
    uint64_t used;        /* tick of its last sighting: the least recent slot is taken */
    uint64_t gap_ns;      /* the least, over its sightings, of the longest gap in one */
    CUgraph graph;        /* kept: its nodes name what an update of the exec changes */
    CUgraphNode node[SEQ_MAX];
    CUgraphExec exec;
};

struct srv_seqs {
    struct seq run;  /* issued one by one since the last other record */
    struct seq held; /* held back: the first held.n launches of slot[match] */
    int match;
    uint64_t tick, replays, replayed;
    /* Why runs ended unkept, for the log at its exit: one launch or none, too long, a
     * launch that ends runs (attributes, cooperative, captured, green), held launches let
     * go unmatched or by their grace. */
    uint64_t n_short, n_long, n_plainless, n_mismatch, n_grace, n_graphs, n_new;
    uint64_t n_updates, n_toomany; /* nodes given new values; replays with too many to give */
    uint64_t n_cut;                /* runs cut where a part was full (long runs in parts) */
    uint64_t n_barred;
    /* Barred by the gap rule: how many, and the least and most of their gaps (the least,
     * over a sequence's sightings, of its longest gap), for choosing the setting. */
    uint64_t n_gap_barred, gap_lo_ns, gap_hi_ns;
    uint64_t n_boundary; /* holds let go by a record that is no launch */
    uint64_t attr_ids;   /* bit i: a launch had attribute i */
    uint32_t said;       /* a graph could not be made: logged once */
    struct slot slot[SEQ_SLOTS];
};

static int enabled = 1;
static uint64_t burst_ns = 20u * 1000;
static uint32_t update_pct = 100;
/* MPSSHIM_LAUNCH_GRAPH_HOLD_SLEEP: a holding worker sleeps on its ring for the rest of the
 * hold's grace instead of looking again. Why it is a setting: on 16 CPUs, 16 PyTorch
 * processes whose steps all went as graphs cost their workers as much CPU as launching one by
 * one (bench/results/issue29-2026-11-28, "Where a crowded fleet's CPU goes"), the yield loop
 * of the holds being the suspect; whether a wake-up per launch costs less is a bench variant's
 * question, not yet answered on a GPU. */
static int hold_sleep;

void srv_seq_init(void)
{
    enabled = (int)chan_setting_num(CHAN_SET_LAUNCH_GRAPHS);
    burst_ns = chan_setting_num(CHAN_SET_LAUNCH_GRAPH_GAP_US) * 1000;
    hold_sleep = (int)chan_setting_num(CHAN_SET_LAUNCH_GRAPH_HOLD_SLEEP);
    update_pct = (uint32_t)chan_setting_num(CHAN_SET_LAUNCH_GRAPH_UPDATE_PCT);
}

/* Whether slot t's sequence is no burst (yet), asked once it has been seen SEQ_SEEN times:
 * its launches came more than burst_ns apart in every sighting (t->gap_ns, the least of its
 * sightings' longest gaps). Settled then while the client's doorbells ring (t->gap_barred):
 * the arrival times are the worker's, and a worker that fell behind its client takes a
 * backlog of launches microseconds apart, which a later sighting would count as a burst
 * (tests/launchseq.sh's gap rule, on a loaded machine of two CPUs). While its doorbells are
 * coalesced (coalesce.c: the server crowded), the coalescing bound stands for burst_ns where
 * longer, asked at every sighting and whatever was settled before: a worker woken once for a
 * step's launches finds them all in its ring, what holding them costs the GPU the coalescing
 * costs already, and a sequence settled while CPUs were free, or while the worker took its
 * launches one by one, would stay launched one by one (measured on an H200 of 16 CPUs with 16
 * PyTorch processes: bench/results/issue29-2026-11-28, "Coalesced steps as graphs"). */
static int gap_rule_bars(const struct srv_client *c, struct slot *t)
{
    uint64_t co = (uint64_t)srv_coalesce_now_us(c) * 1000;
    if (co) return t->gap_ns > (co > burst_ns ? co : burst_ns);
    if (t->gap_ns > burst_ns) t->gap_barred = 1;
    return t->gap_barred;
}

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static struct srv_seqs *seqs_of(struct srv_client *c)
{
    if (c->seqs) return c->seqs;
    struct srv_seqs *q = calloc(1, sizeof(*q));
    if (!q) return NULL;
    q->run.params = malloc(SEQ_PARAMS);
    q->held.params = malloc(SEQ_PARAMS);
    if (!q->run.params || !q->held.params) {
        free(q->run.params);
        free(q->held.params);
        free(q);
        return NULL;
    }
    q->match = -1;
    return c->seqs = q;
}

/* A launch record's key: what must be equal for two launches to be the same (with its
 * parameter bytes). */
static struct seq_launch key_of(const struct chan_launch *m, int kernel, uint32_t psize)
{
    struct seq_launch l = {.func = m->func, .smem = m->smem, .kernel = kernel != 0, .plen = psize};
    memcpy(l.grid, m->grid, sizeof(l.grid));
    memcpy(l.block, m->block, sizeof(l.block));
    return l;
}

/* Appends launch l (parameters p) on s to run q; marks q off when it does not fit (the run
 * is then only followed to its end, never kept). */
static void append(struct seq *q, struct srv_stream *s, struct seq_launch l, const uint8_t *p)
{
    if (q->n == 0) {
        q->s = s;
        q->pbytes = q->off = 0;
        q->hash = 0xcbf29ce484222325ull;
        q->last_ns = q->gap_ns = 0;
    }
    if (q->n >= SEQ_MAX || l.plen > SEQ_PARAMS - q->pbytes) {
        q->off = 1;
        return;
    }
    l.poff = q->pbytes;
    q->l[q->n++] = l;
    memcpy(q->params + q->pbytes, p, l.plen);
    q->pbytes += l.plen;
    q->hash = mix(q->hash, &l, sizeof(l)); /* its shape: parameters may change (replay) */
}

/* A launch of q arrived at `now` (appended): the longest gap between its launches. */
static void arrived(struct seq *q, uint64_t now)
{
    if (q->last_ns && now - q->last_ns > q->gap_ns) q->gap_ns = now - q->last_ns;
    q->last_ns = now;
}

/* 1 when launch l has the shape of launch i of sequence q: function, grid, block, dynamic
 * shared memory and parameter size (the values may differ: a graph's node takes new ones). */
static int same_shape(const struct seq *q, uint32_t i, const struct seq_launch *l)
{
    const struct seq_launch *k = &q->l[i];
    return k->func == l->func && !memcmp(k->grid, l->grid, sizeof(k->grid)) &&
           !memcmp(k->block, l->block, sizeof(k->block)) && k->smem == l->smem &&
           k->plen == l->plen;
}

static int same_seq(const struct seq *a, const struct seq *b)
{
    return a->s == b->s && a->n == b->n && a->hash == b->hash && a->pbytes == b->pbytes &&
           !memcmp(a->l, b->l, a->n * sizeof(a->l[0]));
}

/* Issues launch i of q one by one (its errors deferred, as a launch's are). */
static void issue_one(struct srv_client *c, const struct seq *q, uint32_t i)
{
    const struct seq_launch *l = &q->l[i];
    CUresult r = srv_launch_plain(c, q->s, l->func, (int)l->kernel, l->grid, l->block, l->smem,
                                  q->params + l->poff, l->plen);
    srv_defer(c, r, "kernel launch");
}

/* Slot t's graph goes (destroyed, or only forgotten where its context died). */
static void drop_graph(struct slot *t, int destroy)
{
    if (t->exec && destroy) DRV(cuGraphExecDestroy)(t->exec);
    if (t->graph && destroy) DRV(cuGraphDestroy)(t->graph);
    t->exec = NULL;
    t->graph = NULL;
}

static void drop_slot(struct slot *t, int destroy)
{
    drop_graph(t, destroy);
    free(t->q.params);
    memset(t, 0, sizeof(*t));
}

/* The node parameters of launch l of sequence q, with its parameter buffer `extra` (which
 * must outlive the call that takes them; *psize, its size, too). */
static CUDA_KERNEL_NODE_PARAMS node_params(const struct seq *q, const struct seq_launch *l,
                                           void *extra[5], size_t *psize)
{
    *psize = l->plen;
    extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    extra[1] = q->params + l->poff;
    extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    extra[3] = psize;
    extra[4] = CU_LAUNCH_PARAM_END;
    /* A CUkernel is named as one (its function in the current context is the driver's
     * to find): the driver refuses it as a node's function (INVALID_HANDLE), though a
     * launch takes it so. */
    return (CUDA_KERNEL_NODE_PARAMS){.func = l->kernel ? NULL : (CUfunction)(uintptr_t)l->func,
                                     .kern = l->kernel ? (CUkernel)(uintptr_t)l->func : NULL,
                                     .gridDimX = l->grid[0],
                                     .gridDimY = l->grid[1],
                                     .gridDimZ = l->grid[2],
                                     .blockDimX = l->block[0],
                                     .blockDimY = l->block[1],
                                     .blockDimZ = l->block[2],
                                     .sharedMemBytes = l->smem,
                                     .extra = l->plen ? extra : NULL};
}

/* The graph of slot t: its launches as a chain of kernel nodes, in the current context
 * (the stream's device's). CUDA_SUCCESS with t->graph, t->node[] and t->exec set. */
static CUresult build(struct srv_client *c, struct slot *t)
{
    CUresult r = DRV(cuGraphCreate)(&t->graph, 0);
    if (r != CUDA_SUCCESS) return r;
    const char *what = "cuGraphAddKernelNode";
    for (uint32_t i = 0; i < t->q.n && r == CUDA_SUCCESS; i++) {
        void *extra[5];
        size_t psize;
        CUDA_KERNEL_NODE_PARAMS k = node_params(&t->q, &t->q.l[i], extra, &psize);
        r = DRV(cuGraphAddKernelNode_v2)(&t->node[i], t->graph, i ? &t->node[i - 1] : NULL,
                                         i ? 1 : 0, &k);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuGraphInstantiateWithFlags";
        r = DRV(cuGraphInstantiateWithFlags)(&t->exec, t->graph, 0);
    }
    if (r != CUDA_SUCCESS && !c->seqs->said++)
        srv_log("Client process %d: a sequence of %u launches stays launched one by one: %s "
                "failed with %s (said once for this client)",
                (int)c->pid, t->q.n, what, srv_errname(r));
    if (r != CUDA_SUCCESS) {
        DRV(cuGraphDestroy)(t->graph);
        t->graph = NULL;
        t->exec = NULL;
    }
    return r;
}

/* The run ended (another record came): counted in its slot, which gets its graph once seen
 * SEQ_SEEN times; a new run takes a free slot or the least recently seen one. */
static void end_run(struct srv_client *c, struct srv_seqs *q)
{
    struct seq *run = &q->run;
    if (run->n < 2 || run->off) {
        if (run->off)
            q->n_long++;
        else if (run->n == 1)
            q->n_short++;
        run->n = 0;
        return;
    }
    struct slot *t = NULL, *lru = &q->slot[0];
    for (int i = 0; i < SEQ_SLOTS && !t; i++) {
        if (q->slot[i].q.n && same_seq(&q->slot[i].q, run)) t = &q->slot[i];
        if (q->slot[i].used < lru->used) lru = &q->slot[i];
    }
    if (!t) {
        uint8_t *copy = malloc(run->pbytes ? run->pbytes : 1);
        if (!copy) {
            run->n = 0;
            return;
        }
        drop_slot(lru, 1);
        q->n_new++;
        t = lru;
        t->q = *run;
        t->gap_ns = UINT64_MAX;
        t->q.params = copy;
        memcpy(copy, run->params, run->pbytes);
    }
    t->used = ++q->tick;
    if (!t->exec) /* the graph is made with the latest values */
        memcpy(t->q.params, run->params, run->pbytes);
    if (run->gap_ns < t->gap_ns) t->gap_ns = run->gap_ns;
    int slow = 0; /* not a burst (yet): holding it would delay the GPU */
    if (++t->seen >= SEQ_SEEN && !t->exec && !t->barred && gap_rule_bars(c, t)) {
        slow = 1;
        if (!t->gap_said) { /* counted once a slot, for the log */
            t->gap_said = 1;
            if (!q->n_gap_barred++ || t->gap_ns < q->gap_lo_ns) q->gap_lo_ns = t->gap_ns;
            if (t->gap_ns > q->gap_hi_ns) q->gap_hi_ns = t->gap_ns;
        }
    }
    if (t->seen >= SEQ_SEEN && !t->exec && !t->barred && !slow) {
        int dev = t->q.s->device;
        if (srv_push_device(dev) == CUDA_SUCCESS) {
            if (build(c, t) == CUDA_SUCCESS)
                q->n_graphs++;
            else
                t->barred = 1; /* it stays launched one by one */
            srv_pop_device();
        }
    }
    run->n = 0;
}

/* Whether launch l, added to the run, would start a part of it: the run's first, or the
 * first after a cut (the run full, or followed only to its end). Only there can a kept
 * sequence start: a hold begun elsewhere (in a loop of one kernel, the launch after a hold
 * let go mid-step) would only be let go at the step's end, one more failure. */
static int part_starts(const struct seq *run, const struct seq_launch *l)
{
    return !run->n || run->off || run->n >= SEQ_MAX || l->plen > SEQ_PARAMS - run->pbytes;
}

/* Launch l (parameters p) on s joins the client's run; a run that is full (SEQ_MAX launches
 * or SEQ_PARAMS bytes), or followed only to its end, ends there first: long runs are kept in
 * parts (above). */
static void run_add(struct srv_client *c, struct srv_seqs *q, struct srv_stream *s,
                    struct seq_launch l, const uint8_t *p)
{
    struct seq *run = &q->run;
    if (run->n && part_starts(run, &l)) {
        q->n_cut += !run->off;
        end_run(c, q);
    }
    append(run, s, l, p);
}

/* Launch i of held sequence h joins the run (issued one by one, or replayed). */
static void run_add_held(struct srv_client *c, struct srv_seqs *q, const struct seq *h, uint32_t i)
{
    run_add(c, q, h->s, h->l[i], h->params + h->l[i].poff);
}

/* A hold of slot t ended unreplayed: SEQ_FAILS in a row bar it. */
static void failed(struct srv_seqs *q, struct slot *t)
{
    if (!t->exec || ++t->fails < SEQ_FAILS) return;
    drop_graph(t, 1);
    t->barred = 1;
    q->n_barred++;
}

/* The held launches issued one by one, in order; they join the run. The hold ended
 * unreplayed (a mismatch, another record, its grace, a failed update or launch). */
static void release_held(struct srv_client *c, struct srv_seqs *q)
{
    struct seq *h = &q->held;
    for (uint32_t i = 0; i < h->n; i++) {
        issue_one(c, h, i);
        run_add_held(c, q, h, i);
    }
    if (q->match >= 0) failed(q, &q->slot[q->match]);
    h->n = 0;
    q->match = -1;
}

/* The held launches' values in slot t's graph where they differ from its nodes', up to
 * MPSSHIM_LAUNCH_GRAPH_UPDATE_PCT of them, or the launches go one by one. Every node, by
 * default: an update costs far less than a launch (H200, driver 580, one context, 16
 * threads of 12 launches a step, bench/onectx --param: 49390 steps/s launched one by one,
 * 229091 as graphs whose 12 nodes all got new values, 203915 with none; through the shim
 * 13827 against 37174). This rule used to bar more than half, assuming an update cost a
 * launch. An update that fails drops the slot (its exec may hold some of the new values). */
static CUresult update(struct srv_seqs *q, struct slot *t)
{
    const struct seq *h = &q->held;
    uint32_t differ = 0;
    for (uint32_t i = 0; i < h->n; i++)
        differ += memcmp(t->q.params + h->l[i].poff, h->params + h->l[i].poff, h->l[i].plen) != 0;
    if ((uint64_t)differ * 100 > (uint64_t)h->n * update_pct) {
        q->n_toomany++;
        return CUDA_ERROR_NOT_READY;
    }
    for (uint32_t i = 0; i < h->n && differ; i++) {
        const struct seq_launch *l = &h->l[i];
        if (!memcmp(t->q.params + l->poff, h->params + l->poff, l->plen)) continue;
        void *extra[5];
        size_t psize;
        CUDA_KERNEL_NODE_PARAMS k = node_params(h, l, extra, &psize);
        CUresult r = DRV(cuGraphExecKernelNodeSetParams_v2)(t->exec, t->node[i], &k);
        if (r != CUDA_SUCCESS) {
            drop_slot(t, 1);
            return r;
        }
        memcpy(t->q.params + l->poff, h->params + l->poff, l->plen);
        q->n_updates++;
        differ--;
    }
    return CUDA_SUCCESS;
}

/* The held launches are the whole of slot t: its graph launched on their stream. */
static void replay(struct srv_client *c, struct srv_seqs *q, struct slot *t)
{
    struct seq *h = &q->held;
    if (update(q, t) != CUDA_SUCCESS) {
        release_held(c, q);
        return;
    }
    CUstream st = srv_stream_prepare(c, h->s);
    if (DRV(cuGraphLaunch)(t->exec, st) != CUDA_SUCCESS) {
        /* Launched one by one instead: their own errors are the client's to see. */
        drop_slot(t, 1);
        release_held(c, q);
        return;
    }
    atomic_fetch_add_explicit(&c->stats.launches, h->n, memory_order_relaxed);
    h->s->last_func = h->l[h->n - 1].func; /* the stream's last kernel (streamrec.h) */
    h->s->last_is_kernel = (int)h->l[h->n - 1].kernel;
    t->fails = 0;
    srv_queue_charge(c, h->s, h->pbytes); /* the exec holds its own copy; counted alike */
    q->replays++;
    q->replayed += h->n;
    for (uint32_t i = 0; i < h->n; i++) /* the run goes on as if issued one by one */
        run_add_held(c, q, h, i);
    h->n = 0;
    q->match = -1;
}

/* The hold ends before slot[match] is whole (a launch of another shape, another record, its
 * grace): the held launches go as the graph of a slot that is exactly them (a long run's last
 * part, held as the start of a full part), else one by one. */
static void let_go(struct srv_client *c, struct srv_seqs *q)
{
    const struct seq *h = &q->held;
    for (int i = 0; i < SEQ_SLOTS; i++) {
        struct slot *t = &q->slot[i];
        if (i == q->match || !t->exec || t->q.s != h->s || t->q.n != h->n) continue;
        uint32_t k = 0;
        while (k < h->n && same_shape(&t->q, k, &h->l[k]))
            k++;
        if (k == h->n) {
            replay(c, q, t);
            return;
        }
    }
    release_held(c, q);
}

/* The slot with a graph on s whose first launch is m, the most recently seen; -1 if none. */
static int starting_with(struct srv_seqs *q, struct srv_stream *s, const struct seq_launch *l)
{
    int best = -1;
    for (int i = 0; i < SEQ_SLOTS; i++) {
        struct slot *t = &q->slot[i];
        if (t->exec && t->q.s == s && same_shape(&t->q, 0, l) &&
            (best < 0 || t->used > q->slot[best].used))
            best = i;
    }
    return best;
}

int srv_seq_launch(struct srv_client *c, struct srv_stream *s, const struct chan_launch *m,
                   int kernel, const CUlaunchAttribute *a, const uint8_t *p, uint32_t psize)
{
    if (!enabled) return 0;
    struct srv_seqs *q = seqs_of(c);
    if (!q) return 0;
    /* (srv.green_each: every client's streams may be in a green context of its own.) */
    if (m->nattrs || m->cooperative || c->lim->part[s->device] >= 0 || srv.green_each ||
        srv_stream_capturing(c, s)) {
        q->n_plainless++;
        for (uint32_t i = 0; i < m->nattrs; i++)
            if (a[i].id < 64) q->attr_ids |= 1ull << a[i].id;
        srv_seq_boundary(c, 0);
        return 0;
    }
    struct seq_launch l = key_of(m, kernel, psize);
    if (q->held.n) {
        struct slot *t = &q->slot[q->match];
        if (s == q->held.s && same_shape(&t->q, q->held.n, &l)) {
            append(&q->held, s, l, p);
            arrived(&q->held, chan_now_ns());
            if (q->held.n == t->q.n) replay(c, q, t);
            return 1;
        }
        q->n_mismatch++;
        let_go(c, q);
    }
    if (q->run.n && q->run.s != s) end_run(c, q); /* a run is of one stream */
    int k = part_starts(&q->run, &l) ? starting_with(q, s, &l) : -1;
    if (k < 0) return 0;
    q->match = k;
    append(&q->held, s, l, p);
    arrived(&q->held, chan_now_ns());
    return 1;
}

void srv_seq_issued(struct srv_client *c, struct srv_stream *s, const struct chan_launch *m,
                    int kernel, const uint8_t *p, uint32_t psize)
{
    if (!c->seqs) return;
    run_add(c, c->seqs, s, key_of(m, kernel, psize), p);
    arrived(&c->seqs->run, chan_now_ns());
}

/* Calls that change what a launched kernel does beyond its parameters. */
static int changes_kernels(uint32_t op)
{
    switch (op) {
    case SHIM_ID_cuFuncSetAttribute:
    case SHIM_ID_cuFuncSetCacheConfig:
    case SHIM_ID_cuFuncSetSharedMemConfig:
    case SHIM_ID_cuFuncSetBlockShape:
    case SHIM_ID_cuFuncSetSharedSize:
    case SHIM_ID_cuKernelSetAttribute:
    case SHIM_ID_cuKernelSetCacheConfig:
    case SHIM_ID_cuCtxSetCacheConfig:
    case SHIM_ID_cuCtxSetSharedMemConfig:
    case SHIM_ID_cuModuleUnload:
    case SHIM_ID_cuLibraryUnload:
    case CHAN_OP_CTX_LIMIT:
        return 1;
    default:
        return 0;
    }
}

void srv_seq_boundary(struct srv_client *c, uint32_t op)
{
    struct srv_seqs *q = c->seqs;
    if (!q) return;
    if (q->held.n) {
        q->n_boundary++;
        let_go(c, q);
    }
    end_run(c, q);
    if (changes_kernels(op))
        for (int i = 0; i < SEQ_SLOTS; i++)
            if (q->slot[i].q.n) drop_slot(&q->slot[i], 1);
}

int srv_seq_idle(struct srv_client *c, uint64_t now, uint64_t *nap_ns)
{
    struct srv_seqs *q = c->seqs;
    *nap_ns = 0;
    if (!q || !q->held.n) return 0;
    int crowded = srv_spin_crowded();
    /* Twice the gap its sequence showed when it qualified, at least burst_ns: with the gap
     * raised (launches tens of microseconds apart) a grace of the gap itself ran out on their
     * jitter, and four holds let go so barred the sequence. */
    uint64_t gap = q->match >= 0 ? q->slot[q->match].gap_ns : 0;
    uint64_t gap2 = 2 * (gap < burst_ns ? gap : burst_ns); /* a slot's graph: gap <= burst */
    uint64_t grace = crowded ? SEQ_CROWDED * burst_ns : burst_ns;
    if (gap2 > grace) grace = gap2;
    /* While its doorbells are coalesced the client does not ring for its launches: the rest
     * of the step comes in the ring unannounced, or with the record that ends it (which
     * rings). The worker sleeps for as long as the client may leave records unrung,
     * instead of giving its CPU away in turns (its sched_yield loop was a twentieth of a
     * crowded server's samples). */
    uint64_t co = (uint64_t)srv_coalesce_now_us(c) * 1000;
    if (co > grace) grace = co;
    if (now - q->held.last_ns < grace) {
        if (hold_sleep || co)
            *nap_ns = grace - (now - q->held.last_ns);
        else if (crowded)
            sched_yield();
        return 1;
    }
    q->n_grace++;
    let_go(c, q);
    return 0;
}

/* ---------------------------------------------------------------- the family's hooks */

static void seq_stream_gone(struct srv_client *c, struct srv_stream *s, int dead)
{
    struct srv_seqs *q = c->seqs;
    if (!q) return;
    if (q->held.n && q->held.s == s) { /* not issued: the stream's end came first */
        q->held.n = 0;
        q->match = -1;
    }
    if (q->run.s == s) q->run.n = 0;
    for (int i = 0; i < SEQ_SLOTS; i++)
        if (q->slot[i].q.n && q->slot[i].q.s == s) drop_slot(&q->slot[i], !dead);
}

static void seq_ctx_died(struct srv_client *c, int dev)
{
    struct srv_seqs *q = c->seqs;
    if (!q) return;
    q->held.n = 0;
    q->match = -1;
    q->run.n = 0;
    for (int i = 0; i < SEQ_SLOTS; i++)
        if (q->slot[i].q.n && q->slot[i].q.s->device == dev) drop_slot(&q->slot[i], 0);
}

/* What became of the client's sequences, at its exit (when any had a graph): how many went
 * as graphs, and why the others did not. */
static void log_seqs(const struct srv_client *c, const struct srv_seqs *q)
{
    typedef unsigned long long ull;
    srv_log(
        "Client process %d: %llu launch sequences replayed as graphs (%llu launches, "
        "%llu graphs made, %llu runs new, %llu nodes updated, %llu replays that would "
        "have updated too many, %llu sequences barred, %llu runs cut into parts); runs "
        "unkept: %llu of one launch, %llu too long, %llu ended by a launch with attributes "
        "(ids %#llx); held launches let go: %llu unmatched, %llu by their grace, %llu by "
        "another record; %llu held back by the gap rule (their gaps %.1f-%.1f us, the rule's %.1f)",
        (int)c->pid, (ull)q->replays, (ull)q->replayed, (ull)q->n_graphs, (ull)q->n_new,
        (ull)q->n_updates, (ull)q->n_toomany, (ull)q->n_barred, (ull)q->n_cut, (ull)q->n_short,
        (ull)q->n_long, (ull)q->n_plainless, (ull)q->attr_ids, (ull)q->n_mismatch, (ull)q->n_grace,
        (ull)q->n_boundary, (ull)q->n_gap_barred, (double)q->gap_lo_ns / 1e3,
        (double)q->gap_hi_ns / 1e3, (double)burst_ns / 1e3);
}

static void seq_client_fini(struct srv_client *c)
{
    struct srv_seqs *q = c->seqs;
    if (!q) return;
    if (q->replays || q->n_graphs || q->n_barred || q->n_gap_barred) log_seqs(c, q);
    for (int i = 0; i < SEQ_SLOTS; i++)
        if (q->slot[i].q.n) drop_slot(&q->slot[i], 1);
    free(q->run.params);
    free(q->held.params);
    free(q);
    c->seqs = NULL;
}

const struct srv_family srv_family_seqgraph = {.name = "seqgraph",
                                               .client_fini = seq_client_fini,
                                               .stream_gone = seq_stream_gone,
                                               .ctx_died = seq_ctx_died};
