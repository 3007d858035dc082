// The stream engine: one worker thread per stream (started at its first operation)
// runs the stream's operations strictly in order; different streams run concurrently.
//
// Ordering is by sequence numbers: every operation gets the next number of its stream,
// and a stream's `completed` is the number of its last finished operation. A dependency
// (stream, seq) is met once that stream completed seq. Events, the legacy NULL stream's
// implicit barriers and deferred frees are all expressed as such dependencies.
#include "cpudrv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// Every stream that is not yet released; protected by cpudrv_big.
static struct cpudrv_stream *all_streams;

// Allocates an operation with a zeroed payload of n bytes.
struct cpudrv_op *cpudrv_op_new(size_t n)
{
    return calloc(1, sizeof(struct cpudrv_op) + n);
}

// Adds a dependency (takes a reference on s); cpudrv_big held.
int cpudrv_op_dep(struct cpudrv_op *op, struct cpudrv_stream *s, uint64_t seq)
{
    if (op->ndeps == op->capdeps) {
        unsigned cap = op->capdeps ? op->capdeps * 2 : 4;
        struct cpudrv_dep *d = realloc(op->deps, cap * sizeof *d);
        if (!d) return -1;
        op->deps = d;
        op->capdeps = cap;
    }
    cpudrv_obj_ref(&s->o);
    op->deps[op->ndeps].s = s;
    op->deps[op->ndeps].seq = seq;
    op->ndeps++;
    return 0;
}

// cpudrv_big held: drops the references of a dependency list and frees it.
void cpudrv_deps_release(struct cpudrv_dep *deps, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        cpudrv_obj_put(&deps[i].s->o);
    free(deps);
}

// cpudrv_big held.
void cpudrv_op_discard(struct cpudrv_op *op)
{
    if (op->fini) op->fini(op);
    cpudrv_deps_release(op->deps, op->ndeps);
    free(op);
}

static void pending(struct cpudrv_stream *s, int *busy, uint64_t *seq)
{
    pthread_mutex_lock(&s->mu);
    *busy = s->completed < s->submitted;
    *seq = s->submitted;
    pthread_mutex_unlock(&s->mu);
}

static int push_dep(struct cpudrv_dep **deps, unsigned *n, unsigned *cap, struct cpudrv_stream *t,
                    uint64_t seq)
{
    if (*n == *cap) {
        unsigned c = *cap ? *cap * 2 : 8;
        struct cpudrv_dep *d = realloc(*deps, c * sizeof *d);
        if (!d) return -1;
        *deps = d;
        *cap = c;
    }
    cpudrv_obj_ref(&t->o);
    (*deps)[*n].s = t;
    (*deps)[*n].seq = seq;
    (*n)++;
    return 0;
}

// cpudrv_big held: appends to deps, per stream, the last queued operation that may
// access [lo, hi).
int cpudrv_stream_snapshot_touching(uintptr_t lo, uintptr_t hi, struct cpudrv_dep **deps,
                                    unsigned *n, unsigned *cap)
{
    for (struct cpudrv_stream *t = all_streams; t; t = t->all_next) {
        uint64_t last = 0;
        pthread_mutex_lock(&t->mu);
        for (struct cpudrv_op *op = t->head; op; op = op->next)
            if (op->touches && op->touches(op, lo, hi)) last = op->seq;
        pthread_mutex_unlock(&t->mu);
        if (last && push_dep(deps, n, cap, t, last)) return -1;
    }
    return 0;
}

// cpudrv_big held: appends to deps (refs taken) the point each covered stream with
// pending work has been submitted to.
int cpudrv_stream_snapshot(struct cpudrv_ctx *ctx, enum cpudrv_snap which, struct cpudrv_dep **deps,
                           unsigned *n, unsigned *cap)
{
    int all = which == CPUDRV_SNAP_ALL;
    struct cpudrv_stream *t = all ? all_streams : ctx->streams;
    for (; t; t = all ? t->all_next : t->ctx_next) {
        if (which == CPUDRV_SNAP_BLOCKING && (t->flags & CU_STREAM_NON_BLOCKING)) continue;
        int busy;
        uint64_t seq;
        pending(t, &busy, &seq);
        if (busy && push_dep(deps, n, cap, t, seq)) return -1;
    }
    return 0;
}

// The legacy stream waits for all prior work of the context's blocking streams, and
// blocking streams wait for all prior work of the legacy stream.
static int legacy_deps(struct cpudrv_stream *s, struct cpudrv_op *op)
{
    struct cpudrv_ctx *c = s->o.ctx;
    if (s->flags & CU_STREAM_NON_BLOCKING) return 0;
    if (s->legacy) {
        for (struct cpudrv_stream *t = c->streams; t; t = t->ctx_next) {
            if (t == s || (t->flags & CU_STREAM_NON_BLOCKING)) continue;
            int busy;
            uint64_t seq;
            pending(t, &busy, &seq);
            if (busy && cpudrv_op_dep(op, t, seq)) return -1;
        }
        return 0;
    }
    if (!c->legacy) return 0;
    int busy;
    uint64_t seq;
    pending(c->legacy, &busy, &seq);
    return busy ? cpudrv_op_dep(op, c->legacy, seq) : 0;
}

static void wait_deps(struct cpudrv_stream *self, struct cpudrv_op *op)
{
    for (unsigned i = 0; i < op->ndeps; i++) {
        struct cpudrv_stream *t = op->deps[i].s;
        pthread_mutex_lock(&t->mu);
        while (t->completed < op->deps[i].seq) {
            // A context being torn down must not wait forever on another context.
            if (__atomic_load_n(&self->o.ctx->dying, __ATOMIC_ACQUIRE)) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        pthread_mutex_unlock(&t->mu);
    }
}

static void *worker(void *arg)
{
    struct cpudrv_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->dying)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        struct cpudrv_op *op = s->head;
        pthread_mutex_unlock(&s->mu);
        wait_deps(s, op);
        struct cpudrv_ctx *c = s->o.ctx;
        // After a fault the context is dead, as on a GPU: queued work is dropped.
        if (op->run && !cpudrv_ctx_sticky(c)) {
            CUresult rc = cpudrv_op_run(op);
            if (rc) cpudrv_ctx_fault(c, rc);
        }
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->completed = op->seq;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        cpudrv_lock();
        cpudrv_op_discard(op);
        cpudrv_unlock();
        pthread_mutex_lock(&s->mu);
    }
    s->worker = 0;
    pthread_mutex_unlock(&s->mu);
    cpudrv_lock();
    cpudrv_obj_put(&s->o);
    cpudrv_unlock();
    return NULL;
}

// cpudrv_big held: adds the legacy-stream dependencies and queues op (owned by the
// stream from now on). Returns the op's sequence number.
uint64_t cpudrv_stream_submit(struct cpudrv_stream *s, struct cpudrv_op *op)
{
    if (s->dying || legacy_deps(s, op)) {
        cpudrv_op_discard(op);
        return 0;
    }
    op->stream = s;
    op->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (!s->worker) {
        pthread_attr_t a;
        pthread_t t;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 2 * 1024 * 1024); // host callbacks run here
        int err = pthread_create(&t, &a, worker, s);
        pthread_attr_destroy(&a);
        if (err) {
            pthread_mutex_unlock(&s->mu);
            cpudrv_op_discard(op);
            return 0;
        }
        s->worker = 1;
        cpudrv_obj_ref(&s->o);
    }
    op->seq = ++s->submitted;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    uint64_t seq = op->seq;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return seq;
}

// No lock held, a reference on s held: waits until op seq of s has completed.
void cpudrv_stream_wait(struct cpudrv_stream *s, uint64_t seq)
{
    pthread_mutex_lock(&s->mu);
    while (s->completed < seq)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

// cpudrv_big held: 1 if op seq of s has completed.
int cpudrv_stream_reached(struct cpudrv_stream *s, uint64_t seq)
{
    pthread_mutex_lock(&s->mu);
    int r = s->completed >= seq;
    pthread_mutex_unlock(&s->mu);
    return r;
}

// cpudrv_big held: 1 if every dependency has been reached.
int cpudrv_deps_reached(const struct cpudrv_dep *deps, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (!cpudrv_stream_reached(deps[i].s, deps[i].seq)) return 0;
    return 1;
}

// No lock held: waits for a snapshot, then drops its references (takes cpudrv_big).
void cpudrv_deps_wait_release(struct cpudrv_dep *deps, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        cpudrv_stream_wait(deps[i].s, deps[i].seq);
    cpudrv_lock();
    cpudrv_deps_release(deps, n);
    cpudrv_unlock();
}

// cpudrv_big held: submits op, then waits (dropping and retaking cpudrv_big) until
// it ran; returns the context's sticky error if the work faulted.
CUresult cpudrv_stream_run_sync(struct cpudrv_stream *s, struct cpudrv_op *op)
{
    uint64_t seq = cpudrv_stream_submit(s, op);
    if (!seq) return CUDA_ERROR_INVALID_HANDLE;
    cpudrv_obj_ref(&s->o);
    cpudrv_unlock();
    cpudrv_stream_wait(s, seq);
    cpudrv_lock();
    CUresult rc = cpudrv_ctx_sticky(s->o.ctx);
    cpudrv_obj_put(&s->o);
    return rc;
}

// No lock held, reference on s held: waits until its queue is empty.
void cpudrv_stream_drain(struct cpudrv_stream *s)
{
    pthread_mutex_lock(&s->mu);
    while (s->completed < s->submitted)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void stream_release(struct cpudrv_obj *o)
{
    struct cpudrv_stream *s = (struct cpudrv_stream *)o;
    struct cpudrv_ctx *c = o->ctx;
    if (s->ctx_prev)
        s->ctx_prev->ctx_next = s->ctx_next;
    else
        c->streams = s->ctx_next;
    if (s->ctx_next) s->ctx_next->ctx_prev = s->ctx_prev;
    if (s->all_prev)
        s->all_prev->all_next = s->all_next;
    else
        all_streams = s->all_next;
    if (s->all_next) s->all_next->all_prev = s->all_prev;
    if (c->legacy == s) c->legacy = NULL;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static CUresult stream_new(struct cpudrv_ctx *ctx, unsigned flags, int prio, int publish,
                           struct cpudrv_stream **out)
{
    struct cpudrv_stream *s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_obj_init(&s->o, CPUDRV_K_STREAM, ctx, stream_release);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->flags = flags;
    s->prio = prio < CPUDRV_PRIO_GREATEST ? CPUDRV_PRIO_GREATEST
              : prio > CPUDRV_PRIO_LEAST  ? CPUDRV_PRIO_LEAST
                                          : prio;
    s->id = cpudrv_next_id();
    s->attr[CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY].syncPolicy = CU_SYNC_POLICY_AUTO;
    s->attr[CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP].memSyncDomainMap.remote = 1;
    s->ctx_next = ctx->streams;
    if (ctx->streams) ctx->streams->ctx_prev = s;
    ctx->streams = s;
    s->all_next = all_streams;
    if (all_streams) all_streams->all_prev = s;
    all_streams = s;
    // The priority it really got (tests of the server's client priorities read this).
    if (publish) {
        cpudrv_obj_publish(&s->o);
        cpudrv_note("stream %llu created with priority %d", s->id, s->prio);
    }
    *out = s;
    return CUDA_SUCCESS;
}

// cpudrv_big held: creates a stream in ctx.
CUresult cpudrv_stream_new(struct cpudrv_ctx *ctx, unsigned flags, int prio, int legacy,
                           struct cpudrv_stream **out)
{
    CUresult rc = stream_new(ctx, flags, prio, !legacy, out);
    if (!rc) (*out)->legacy = legacy;
    return rc;
}

// cpudrv_big held: ends a stream's handle; its queued work still runs.
void cpudrv_stream_destroy(struct cpudrv_stream *s)
{
    if (s->dying) return;
    cpudrv_capture_stream_gone(s);
    pthread_mutex_lock(&s->mu);
    s->dying = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    // Drop the owner's reference: the handle table's, or the context's for internal ones.
    if (s->o.live)
        cpudrv_obj_unpublish(&s->o);
    else
        cpudrv_obj_put(&s->o);
}

/* Per-thread default streams: one blocking stream per (thread, context), kept in a
 * thread-local table and destroyed when the thread exits. */

struct ptds_ent {
    struct cpudrv_ctx *ctx;
    struct cpudrv_stream *s;
    unsigned long long id;
};

struct ptds_tab {
    unsigned n, cap;
    struct ptds_ent e[];
};

// Set once through ptds_once; the table it names is thread-local (no lock).
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;

// cpudrv_big held: is e->s still a live stream of e->ctx?
static int ptds_valid(const struct ptds_ent *e)
{
    for (struct cpudrv_stream *t = e->ctx->streams; t; t = t->ctx_next)
        if (t == e->s) return t->id == e->id && !t->dying;
    return 0;
}

static void ptds_exit(void *p)
{
    struct ptds_tab *tab = p;
    cpudrv_lock();
    for (unsigned i = 0; i < tab->n; i++)
        if (ptds_valid(&tab->e[i])) cpudrv_stream_destroy(tab->e[i].s);
    cpudrv_unlock();
    free(tab);
}

static void ptds_init(void)
{
    pthread_key_create(&ptds_key, ptds_exit);
}

static CUresult ptds_get(struct cpudrv_ctx *cur, struct cpudrv_stream **out)
{
    pthread_once(&ptds_once, ptds_init);
    struct ptds_tab *tab = pthread_getspecific(ptds_key);
    if (tab)
        for (unsigned i = 0; i < tab->n; i++) {
            if (tab->e[i].ctx != cur) continue;
            if (ptds_valid(&tab->e[i])) {
                *out = tab->e[i].s;
                return CUDA_SUCCESS;
            }
            tab->e[i] = tab->e[--tab->n];
            break;
        }
    if (!tab || tab->n == tab->cap) {
        unsigned cap = tab ? tab->cap * 2 : 4;
        struct ptds_tab *t = realloc(tab, sizeof *t + cap * sizeof t->e[0]);
        if (!t) return CUDA_ERROR_OUT_OF_MEMORY;
        if (!tab) t->n = 0;
        t->cap = cap;
        tab = t;
        pthread_setspecific(ptds_key, tab);
    }
    struct cpudrv_stream *s;
    CUresult rc = stream_new(cur, 0, 0, 0, &s);
    if (rc) return rc;
    s->perthread = 1;
    tab->e[tab->n].ctx = cur;
    tab->e[tab->n].s = s;
    tab->e[tab->n].id = s->id;
    tab->n++;
    *out = s;
    return CUDA_SUCCESS;
}

// cpudrv_big held: resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
// or a created stream) for a caller whose current context is cur (may be NULL).
CUresult cpudrv_stream_get(CUstream h, struct cpudrv_ctx *cur, struct cpudrv_stream **out)
{
    if (h == NULL || h == CU_STREAM_LEGACY) {
        if (!cur || !cur->legacy) return CUDA_ERROR_INVALID_CONTEXT;
        *out = cur->legacy;
        return CUDA_SUCCESS;
    }
    if (h == CU_STREAM_PER_THREAD) {
        if (!cur) return CUDA_ERROR_INVALID_CONTEXT;
        if (cur->green) return CUDA_ERROR_INVALID_HANDLE;
        return ptds_get(cur, out);
    }
    struct cpudrv_stream *s = cpudrv_obj_find(h, CPUDRV_K_STREAM);
    if (!s || s->dying) return CUDA_ERROR_INVALID_HANDLE;
    CUresult rc = cpudrv_ctx_usable(s->o.ctx);
    if (rc) return rc;
    *out = s;
    return CUDA_SUCCESS;
}
