// Events: a record is an operation on a stream; waiting for an event is waiting for the
// stream of its latest record to reach that operation. On a capturing stream a record
// marks a point of the capture instead, and a wait joins it (capture.c).
#include "cpudrv.h"

#include <stdlib.h>

struct record {
    struct cpudrv_event *e; // reference held
    unsigned long long gen;
};

static void event_release(struct cpudrv_obj *o)
{
    struct cpudrv_event *e = (struct cpudrv_event *)o;
    if (e->s) cpudrv_obj_put(&e->s->o);
    cpudrv_capture_event_clear(e);
    cpudrv_ipcev_release(e);
    free(e);
}

static struct cpudrv_event *find(CUevent h)
{
    return cpudrv_obj_find(h, CPUDRV_K_EVENT);
}

// cpudrv_big held: the live event whose handle is h, or NULL.
struct cpudrv_event *cpudrv_event_find(CUevent h)
{
    return find(h);
}

// cpudrv_big held: a new event of ctx with flags, not yet published.
struct cpudrv_event *cpudrv_event_new(struct cpudrv_ctx *ctx, unsigned flags)
{
    struct cpudrv_event *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    cpudrv_obj_init(&e->o, CPUDRV_K_EVENT, ctx, event_release);
    e->flags = flags;
    e->ipc_fd = -1;
    return e;
}

// Creates an event (flags: BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS with DISABLE_TIMING).
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) return TR(rc);
    struct cpudrv_event *e = cpudrv_event_new(c, Flags);
    if (!e) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_OUT_OF_MEMORY);
    }
    cpudrv_obj_publish(&e->o);
    cpudrv_unlock();
    *phEvent = (CUevent)e;
    return TR(CUDA_SUCCESS);
}

// Destroys an event; pending records and waits on it still complete.
CUresult cuEventDestroy(CUevent hEvent)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_event *e = find(hEvent);
    if (e) cpudrv_obj_unpublish(&e->o);
    cpudrv_unlock();
    return TR(e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

static CUresult record_run(struct cpudrv_op *op)
{
    struct record *r = (struct record *)op->data;
    uint64_t t = cpudrv_now_ns();
    cpudrv_lock();
    if (r->gen > r->e->t_gen) {
        r->e->t_gen = r->gen;
        r->e->t_ns = t;
    }
    cpudrv_ipcev_executed(r->e, r->gen);
    cpudrv_unlock();
    return CUDA_SUCCESS;
}

static void record_fini(struct cpudrv_op *op)
{
    struct record *r = (struct record *)op->data;
    cpudrv_obj_put(&r->e->o);
}

// cpudrv_big held: queues a record of e on s (not capturing), as cuEventRecord does.
CUresult cpudrv_event_record_on(struct cpudrv_event *e, struct cpudrv_stream *s)
{
    struct cpudrv_op *op = cpudrv_op_new(sizeof(struct record));
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    struct record *r = (struct record *)op->data;
    r->e = e;
    r->gen = e->gen + 1;
    cpudrv_obj_ref(&e->o);
    op->run = record_run;
    op->fini = record_fini;
    uint64_t seq = cpudrv_stream_submit(s, op);
    if (!seq) return CUDA_ERROR_INVALID_HANDLE;
    e->gen++;
    cpudrv_ipcev_recorded(e);
    cpudrv_obj_ref(&s->o);
    if (e->s) cpudrv_obj_put(&e->s->o);
    e->s = s;
    e->seq = seq;
    cpudrv_capture_event_clear(e);
    return CUDA_SUCCESS;
}

static CUresult record(CUevent hEvent, CUstream hStream, unsigned flags)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    struct cpudrv_event *e = find(hEvent);
    struct cpudrv_stream *s;
    int capturing = 0;
    if (!e)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (e->imported)
        rc = CUDA_ERROR_NOT_SUPPORTED; /* this driver's limit (ipcevent.c) */
    else
        rc = cpudrv_stream_get(hStream, cpudrv_ctx_current(), &s);
    // As on a GPU: an event is recorded only on a stream of the context it was made in.
    if (!rc && cpudrv_ctx_owner(s->o.ctx) != cpudrv_ctx_owner(e->o.ctx))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc) rc = cpudrv_capture_check(s, &capturing);
    // MPSSHIM_CPUDRV_FAULT_AFTER_STORE: the context dies here, right behind a store.
    if (!rc && !capturing && cpudrv_fault_after_store && cpudrv_stored_on == s &&
        --cpudrv_fault_after_store == 0) {
        cpudrv_ctx_fault(s->o.ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
        rc = CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    cpudrv_stored_on = NULL;
    if (!rc) rc = capturing ? cpudrv_capture_record(s, e, flags) : cpudrv_event_record_on(e, s);
    cpudrv_unlock();
    return rc;
}

// Records the event on a stream: it completes when the stream's prior work has.
CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return TR(record(hEvent, hStream, 0));
}

// As cuEventRecord; CU_EVENT_RECORD_EXTERNAL (a graph-capture flag) is accepted.
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return TR(record(hEvent, hStream, flags));
}

// cpudrv_big held: has the latest record of e completed (or was e never recorded)?
static int done(struct cpudrv_event *e)
{
    if (e->imported) return cpudrv_ipcev_reached(e, cpudrv_ipcev_target(e));
    return !e->s || cpudrv_stream_reached(e->s, e->seq);
}

// SUCCESS if the latest record completed (or none was made), NOT_READY otherwise; a record
// in a capture still in progress cannot be queried.
CUresult cuEventQuery(CUevent hEvent)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_event *e = find(hEvent);
    rc = !e                             ? CUDA_ERROR_INVALID_HANDLE
         : cpudrv_capture_event_live(e) ? CUDA_ERROR_CAPTURED_EVENT
                                        : cpudrv_capture_unsafe();
    if (!rc && !done(e))
        rc = CUDA_ERROR_NOT_READY;
    else if (!rc && e->s)
        rc = cpudrv_ctx_sticky(e->s->o.ctx);
    cpudrv_unlock();
    return TR(rc);
}

// Waits for the latest record of the event.
CUresult cuEventSynchronize(CUevent hEvent)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_event *e = find(hEvent);
    rc = !e                             ? CUDA_ERROR_INVALID_HANDLE
         : cpudrv_capture_event_live(e) ? CUDA_ERROR_CAPTURED_EVENT
                                        : cpudrv_capture_unsafe();
    if (rc) {
        cpudrv_unlock();
        return TR(rc);
    }
    if (e->imported) { /* the exporter's page: polled (ipcevent.c) */
        uint64_t target = cpudrv_ipcev_target(e);
        cpudrv_obj_ref(&e->o);
        cpudrv_unlock();
        cpudrv_ipcev_wait(e, target, NULL);
        cpudrv_lock();
        cpudrv_obj_put(&e->o);
        cpudrv_unlock();
        return TR(CUDA_SUCCESS);
    }
    struct cpudrv_stream *s = e->s;
    if (s) {
        uint64_t seq = e->seq;
        cpudrv_obj_ref(&s->o);
        cpudrv_unlock();
        cpudrv_stream_wait(s, seq);
        cpudrv_lock();
        rc = cpudrv_ctx_sticky(s->o.ctx);
        cpudrv_obj_put(&s->o);
    }
    cpudrv_unlock();
    return TR(rc);
}

// Milliseconds between the executions of two completed records.
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!pMilliseconds) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_event *a = find(hStart), *b = find(hEnd);
    if (!a || !b || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || !a->gen || !b->gen)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!done(a) || !done(b) || a->t_gen != a->gen || b->t_gen != b->gen)
        rc = CUDA_ERROR_NOT_READY;
    else
        *pMilliseconds = (float)(((double)b->t_ns - (double)a->t_ns) / 1e6);
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: makes op wait for e's latest record (none: no dependency).
int cpudrv_event_dep(const struct cpudrv_event *e, struct cpudrv_op *op)
{
    return e->s ? cpudrv_op_dep(op, e->s, e->seq) : 0;
}

struct opened_wait {
    struct cpudrv_event *e; /* reference held */
    uint64_t target;
};

static CUresult opened_wait_run(struct cpudrv_op *op)
{
    struct opened_wait *w = (struct opened_wait *)op->data;
    cpudrv_ipcev_wait(w->e, w->target, &op->stream->o.ctx->dying);
    return CUDA_SUCCESS;
}

static void opened_wait_fini(struct cpudrv_op *op)
{
    cpudrv_obj_put(&((struct opened_wait *)op->data)->e->o);
}

// cpudrv_big held: s's later work waits until the opened event's record of now has executed
// in its exporting process.
static CUresult wait_opened(struct cpudrv_stream *s, struct cpudrv_event *e)
{
    struct cpudrv_op *op = cpudrv_op_new(sizeof(struct opened_wait));
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    struct opened_wait *w = (struct opened_wait *)op->data;
    w->e = e;
    w->target = cpudrv_ipcev_target(e);
    cpudrv_obj_ref(&e->o);
    op->run = opened_wait_run;
    op->fini = opened_wait_fini;
    return cpudrv_stream_submit(s, op) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Makes all later work of the stream wait for the event's latest record.
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_event *e = find(hEvent);
    struct cpudrv_stream *s;
    int handled = 0;
    if (!e)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = cpudrv_stream_get(hStream, cpudrv_ctx_current(), &s);
    if (!rc && e->imported) {
        rc = cpudrv_capture_uncapturable(s, CUDA_ERROR_NOT_SUPPORTED);
        if (!rc) rc = wait_opened(s, e);
        handled = 1;
    }
    if (!rc && !handled) rc = cpudrv_capture_wait(s, e, Flags, &handled);
    if (!rc && !handled) {
        struct cpudrv_op *op = cpudrv_op_new(0); // runs nothing: only its dependency
        if (!op || cpudrv_event_dep(e, op)) {
            if (op) cpudrv_op_discard(op);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (!cpudrv_stream_submit(s, op)) {
            rc = CUDA_ERROR_INVALID_HANDLE;
        }
    }
    cpudrv_unlock();
    return TR(rc);
}
