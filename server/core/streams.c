/* Client streams on the shared context.
 *
 * Every real stream the server creates is CU_STREAM_NON_BLOCKING, so that no client's work
 * ever waits for another's through the real context's legacy stream. Each client context
 * gets its own legacy default stream and per-thread default streams, and CUDA's legacy
 * semantics are rebuilt among that client's streams only: before work goes on the legacy
 * stream it waits for the blocking streams that have new work, and before work goes on a
 * blocking stream it waits for new work of the legacy stream. Counters make each wait
 * happen only when the other stream actually received work since the last one. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/log.h"
#include "server/core/waits.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/control/trace_owners.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/limits/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct srv_stream *make(struct srv_client *c, struct srv_ctx *x, unsigned flags,
                               int priority, CUresult *err)
{
    struct srv_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    *err = srv_use_device(x->device);
    /* A throttled client's streams live in its green context (its share of the SMs); the
     * real priority follows its client priority (policy.c). */
    int prio = srv_policy_stream_priority(c, x->device, priority);
    if (*err == CUDA_SUCCESS && !srv_families_stream_make(c, x->device, &s->real, prio, err))
        *err = DRV(cuStreamCreateWithPriority)(&s->real, CU_STREAM_NON_BLOCKING, prio);
    if (*err == CUDA_SUCCESS &&
        (*err = DRV(cuEventCreate)(&s->mark, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
        DRV(cuStreamDestroy_v2)(s->real);
    if (*err != CUDA_SUCCESS) {
        free(s);
        return NULL;
    }
    s->key = (uint64_t)(uintptr_t)s->real;
    s->ctx = x->id;
    s->device = x->device;
    s->flags = flags;
    s->priority = priority;
    s->blocking = !(flags & CU_STREAM_NON_BLOCKING);
    /* Counted for get_client_info, which runs on another thread than the tables. */
    atomic_fetch_add_explicit(&c->stats.streams, 1, memory_order_relaxed);
    return s;
}

/* Teardown of a stream the client still held (its work has drained). */
void srv_release_stream(struct srv_client *c, struct srv_obj *o)
{
    srv_stream_free(c, o->ext);
    o->ext = NULL;
}

/* A stream that died with its context (cuda_symbols.txt: forget=stream). */
void srv_forget_stream(struct srv_client *c, struct srv_obj *o)
{
    if (!o->ext) return;
    srv_stream_forget(c, o->ext);
    o->ext = NULL;
}

/* A capture left going on a stream that goes ends first, and the graph it built goes with
 * it, unless it is a graph of the client's own (cuStreamBeginCaptureToGraph's): graph.c.
 * This may run in a release walk, so the records stay (the walk releases them). */
void srv_stream_free(struct srv_client *c, struct srv_stream *s)
{
    if (c->mvar_last == s)
        c->mvar_last = NULL; /* its pushes were queued before anything that follows */
    if (srv_fault_dead(c, s->device)) {
        srv_stream_forget(c, s); /* died with its context: the handle may be another's now */
        return;
    }
    srv_families_stream_gone(c, s, 0);
    atomic_fetch_sub_explicit(&c->stats.streams, 1, memory_order_relaxed);
    /* Destroying a stream with work pending is allowed: the work completes. */
    DRV(cuStreamDestroy_v2)(s->real);
    DRV(cuEventDestroy_v2)(s->mark);
    if (s->cap_mark) DRV(cuEventDestroy_v2)(s->cap_mark);
    free(s);
}

/* A stream that died with its context (fault.c): only the server's record of it goes. */
void srv_stream_forget(struct srv_client *c, struct srv_stream *s)
{
    if (c->mvar_last == s) c->mvar_last = NULL;
    srv_families_stream_gone(c, s, 1);
    atomic_fetch_sub_explicit(&c->stats.streams, 1, memory_order_relaxed);
    free(s);
}

void srv_streams_each(struct srv_client *c, uint32_t ctx, int with_legacy,
                      void (*fn)(struct srv_client *c, struct srv_stream *s, void *arg), void *arg)
{
    for (struct srv_obj *o = srv_objs_of(c, SHIM_HT_CUstream); o; o = o->type_next) {
        struct srv_stream *s = o->ext;
        if (s && (!ctx || s->ctx == ctx)) fn(c, s, arg);
    }
    struct srv_ctx *x, *xt;
    struct srv_stream *d, *dt;
    HASH_ITER(hh, c->ctxs, x, xt) {
        if (ctx && x->id != ctx) continue;
        if (with_legacy && x->legacy) fn(c, x->legacy, arg);
        HASH_ITER(hh, x->defaults, d, dt)
            fn(c, d, arg);
        if (x->mvar) fn(c, x->mvar, arg);
        if (x->pulls) fn(c, x->pulls, arg);
    }
}

void srv_streams_drop(struct srv_client *c, struct srv_ctx *x,
                      void (*gone)(struct srv_client *c, struct srv_stream *s))
{
    struct srv_stream *d, *dt;
    HASH_ITER(hh, x->defaults, d, dt) {
        HASH_DEL(x->defaults, d);
        gone(c, d);
    }
    if (x->legacy) gone(c, x->legacy);
    x->legacy = NULL;
    if (x->mvar) gone(c, x->mvar);
    x->mvar = NULL;
    if (x->pulls) gone(c, x->pulls);
    x->pulls = NULL;
}

static struct srv_stream *legacy(struct srv_client *c, struct srv_ctx *x)
{
    CUresult r;
    if (!x->legacy && (x->legacy = make(c, x, 0, 0, &r))) x->legacy->legacy = 1;
    return x->legacy;
}

static struct srv_stream *per_thread(struct srv_client *c, struct srv_ctx *x, uint16_t thread)
{
    struct srv_stream *s = NULL;
    uint64_t key = thread;
    HASH_FIND(hh, x->defaults, &key, sizeof(key), s);
    if (s) return s;
    CUresult r;
    /* A per-thread default stream synchronises with the legacy stream only. */
    if (!(s = make(c, x, 0, 0, &r))) return NULL;
    s->thread = thread;
    s->key = key;
    HASH_ADD(hh, x->defaults, key, sizeof(s->key), s);
    return s;
}

struct srv_stream *srv_stream_mvar(struct srv_client *c, struct srv_ctx *x)
{
    CUresult r;
    if (!x->mvar) x->mvar = make(c, x, CU_STREAM_NON_BLOCKING, 0, &r);
    return x->mvar;
}

struct srv_stream *srv_stream_pulls(struct srv_client *c, struct srv_ctx *x)
{
    CUresult r;
    if (!x->pulls) x->pulls = make(c, x, CU_STREAM_NON_BLOCKING, 0, &r);
    return x->pulls;
}

struct srv_stream *srv_stream_resolve(struct srv_client *c, uint64_t handle, int ptds,
                                      uint16_t thread)
{
    if (handle == 0 || handle == (uint64_t)(uintptr_t)CU_STREAM_LEGACY ||
        handle == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD) {
        if (!c->cur) return NULL;
        int pt = handle == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD || (handle == 0 && ptds);
        return pt ? per_thread(c, c->cur, thread) : legacy(c, c->cur);
    }
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_CUstream, handle);
    return o ? o->ext : NULL;
}

int srv_stream_capturing(struct srv_client *c, struct srv_stream *s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!c->captures) return 0;
    return DRV(cuStreamIsCapturing)(s->real, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult srv_captures_sync(struct srv_client *c, uint32_t ctx)
{
    CUresult res = CUDA_SUCCESS;
    for (struct srv_obj *o = c->captures ? srv_objs_of(c, SHIM_HT_CUstream) : NULL; o;
         o = o->type_next) {
        struct srv_stream *s = o->ext;
        if (s->ctx == ctx && srv_stream_capturing(c, s)) res = DRV(cuStreamSynchronize)(s->real);
    }
    return res;
}

/* `a` waits, on the GPU, for everything enqueued on `b` so far. Never into or out of a
 * capture: the event would become part of the graph (CUDA refuses such implicit
 * dependencies on the legacy stream too). */
static void order_after(struct srv_client *c, struct srv_stream *a, struct srv_stream *b)
{
    if (srv_stream_capturing(c, a) || srv_stream_capturing(c, b)) return;
    DRV(cuEventRecord)(b->mark, b->real);
    DRV(cuStreamWaitEvent)(a->real, b->mark, 0);
}

/* s waits for the client's last push of __managed__ variables (managed.c sets mvar_last and
 * mvar_gen): a copy it queued before s's new work must have landed. */
static void mvar_order(struct srv_client *c, struct srv_stream *s)
{
    struct srv_stream *last = c->mvar_last;
    if (last && last != s) {
        /* Its work runs when its graph is launched: that launch's stream waits then. */
        if (srv_stream_capturing(c, s)) return;
        (void)DRV(cuStreamWaitEvent)(s->real, last->mark, 0);
    }
    s->mvar_seen = c->mvar_gen;
}

CUstream srv_stream_prepare(struct srv_client *c, struct srv_stream *s)
{
    struct srv_ctx *x = srv_ctx_get(c, s->ctx);
    if (x && s->legacy) {
        struct srv_stream *b, *t;
        for (struct srv_obj *o = srv_objs_of(c, SHIM_HT_CUstream); o; o = o->type_next) {
            b = o->ext;
            if (b->ctx == s->ctx && b->blocking && b->nsubmit != b->seen_by_legacy) {
                order_after(c, s, b);
                b->seen_by_legacy = b->nsubmit;
            }
        }
        HASH_ITER(hh, x->defaults, b, t)
            if (b->nsubmit != b->seen_by_legacy) {
                order_after(c, s, b);
                b->seen_by_legacy = b->nsubmit;
            }
    } else if (x && s->blocking && x->legacy && x->legacy->nsubmit != s->legacy_seen) {
        order_after(c, s, x->legacy);
        s->legacy_seen = x->legacy->nsubmit;
    }
    /* After a host write to a __managed__ variable, whatever stream the work is on. */
    if (s->mvar_seen != c->mvar_gen) mvar_order(c, s);
    srv_trace_note(c, s); /* a trace learns whose stream this is (trace.c) */
    s->nsubmit++;
    s->submit_ns = chan_now_ns(); /* one clock read for both (every launch comes here) */
    srv_fault_mark_work(c, s->device, s->submit_ns);
    return s->real;
}

/* Waits for a stream (or event) to finish, until `by` (monotonic ns; 0: no bound, but
 * only while client c is there). 0 when it finished, -1 when the bound came first or c
 * left. Polls, backing off to 10 ms (1 ms with no bound): a stream that never finishes
 * must not hold the caller for ever. Without a bound the client's own call waits for its
 * own work, which may wait on the client (a stream wait on a value it writes later): when
 * the client goes, its worker must get to its release, which ends such waits (memops.c),
 * instead of waiting here for good. */
static int settle(struct srv_client *c, CUstream st, CUevent ev, uint64_t by)
{
    for (unsigned us = 10;; us = us < (by ? 10000u : 1000u) ? us * 2 : us) {
        CUresult r = ev ? DRV(cuEventQuery)(ev) : DRV(cuStreamQuery)(st);
        if (r != CUDA_ERROR_NOT_READY)
            return 0; /* done, or failed: either way nothing more will run */
        if (by ? chan_now_ns() >= by : atomic_load(&c->dead) != 0) return -1;
        struct timespec ts = {0, (long)us * 1000};
        nanosleep(&ts, NULL);
    }
}

/* srv_streams_drain_by's walk: its bound, and whether a stream outlasted it. */
struct drain_walk {
    uint64_t by;
    int late;
};

/* A capturing stream runs nothing now, and a query would end its capture (a created stream
 * or the per-thread default one alike): it is left out. */
static void drain_each(struct srv_client *c, struct srv_stream *s, void *arg)
{
    struct drain_walk *k = arg;
    if (!srv_stream_capturing(c, s)) k->late |= settle(c, s->real, NULL, k->by);
}

int srv_streams_drain_by(struct srv_client *c, uint32_t ctx, uint64_t by)
{
    int late = 0;
    size_t j = 0;
    for (size_t i = 0; i < c->nretired; i++) {
        if ((ctx && c->retired[i].ctx != ctx) || settle(c, NULL, c->retired[i].ev, by) != 0) {
            late |= !(ctx && c->retired[i].ctx != ctx);
            c->retired[j++] = c->retired[i]; /* still running: its event stays out */
            continue;
        }
        srv_event_give(c, c->retired[i].dev, c->retired[i].ev);
    }
    c->nretired = j;
    struct drain_walk k = {.by = by, .late = late};
    srv_streams_each(c, ctx, 1, drain_each, &k);
    return k.late ? -1 : 0;
}

int srv_streams_drain(struct srv_client *c, uint32_t ctx)
{
    return srv_streams_drain_by(c, ctx, 0);
}

int srv_stream_settle(struct srv_client *c, CUstream st)
{
    return settle(c, st, NULL, 0);
}

int srv_stream_settle_by(struct srv_client *c, CUstream st, uint64_t by)
{
    return settle(c, st, NULL, by);
}

/* ---------------------------------------------------------------- operations */

void srv_op_stream_create(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_stream_create m;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint32_t out = 0;
    (void)len; /* the payload is one (its %op row) */
    if (c->cur) {
        memcpy(&m, p, sizeof(m));
        struct srv_stream *s = make(c, c->cur, m.flags & CU_STREAM_NON_BLOCKING, m.priority, &res);
        if (s && !(s->obj = srv_obj_add(c, SHIM_HT_CUstream, s->key, 1, NULL))) {
            srv_stream_free(c, s);
            s = NULL;
            res = CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (s) {
            s->obj->ext = s;
            memcpy(srv_lane_data(c, r->lane), &s->key, sizeof(s->key));
            out = sizeof(s->key);
        }
    } else {
        res = CUDA_ERROR_INVALID_CONTEXT;
    }
    srv_reply(c, r->lane, res, out);
}

/* A stream destroyed with work pending: that work still completes (as with the driver),
 * and the context's synchronisation and legacy stream must still wait for it. */
static void retire(struct srv_client *c, struct srv_stream *s)
{
    if (DRV(cuStreamQuery)(s->real) != CUDA_ERROR_NOT_READY) return;
    CUevent ev;
    if (srv_event_take(c, s->device, &ev) != CUDA_SUCCESS) return;
    if (DRV(cuEventRecord)(ev, s->real) != CUDA_SUCCESS) {
        srv_event_give(c, s->device, ev);
        return;
    }
    struct srv_ctx *x = srv_ctx_get(c, s->ctx);
    if (x && x->legacy && s->blocking && s->nsubmit != s->seen_by_legacy)
        DRV(cuStreamWaitEvent)(x->legacy->real, ev, 0);
    if (c->nretired == c->capretired) {
        size_t ncap = c->capretired ? c->capretired * 2 : 16;
        struct srv_retired *n = realloc(c->retired, ncap * sizeof(*n));
        if (!n) {
            DRV(cuEventSynchronize)(ev);
            srv_event_give(c, s->device, ev);
            return;
        }
        c->retired = n;
        c->capretired = ncap;
    }
    c->retired[c->nretired].ev = ev;
    c->retired[c->nretired].dev = s->device;
    c->retired[c->nretired++].ctx = s->ctx;
}

void srv_op_stream_destroy(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    uint64_t h;
    struct srv_obj *o = NULL;
    if (len == sizeof(h)) {
        memcpy(&h, p, sizeof(h));
        o = srv_obj_find(c, SHIM_HT_CUstream, h);
    }
    struct srv_stream *s = o ? o->ext : NULL;
    if (s) {
        /* Its capture's graph and what the client held in it go now, records included. */
        srv_families_stream_destroyed(c, s);
        retire(c, s);
        srv_obj_destroyed(c, o);
        srv_stream_free(c, s);
    }
    srv_reply(c, r->lane, s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE, 0);
}

static struct srv_stream *named(struct srv_client *c, const struct chan_rec *r, uint8_t *p,
                                uint32_t len)
{
    uint64_t h;
    if (len != sizeof(h)) return NULL;
    memcpy(&h, p, sizeof(h));
    return srv_stream_resolve(c, h, r->flags & CHAN_RF_PTDS, r->thread);
}

void srv_op_stream_sync(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct srv_stream *s = named(c, r, p, len);
    if (!s) {
        srv_reply(c, r->lane, CUDA_ERROR_INVALID_HANDLE, 0);
        return;
    }
    /* Synchronising a capturing stream is an error that invalidates the capture: the
     * driver's own call says so at once (it does not wait). */
    if (srv_stream_capturing(c, s)) {
        srv_reply(c, r->lane, DRV(cuStreamSynchronize)(s->real), 0);
        return;
    }
    /* A sync on the legacy stream covers the blocking streams' earlier work too. That
     * ordering is no work of the client's on it: the stream stays as fresh as it was (a
     * fresh one is not asked whether it is idle, waits.c gpu_reply). */
    uint64_t fresh = s->submit_ns;
    if (s->legacy) srv_stream_prepare(c, s);
    s->submit_ns = fresh;
    CUresult res = srv_wait_stream(c, s, r->lane, 0);
    if (res != CUDA_SUCCESS) srv_reply(c, r->lane, res, 0);
}

CUresult srv_stream_order_all(struct srv_client *c, struct srv_stream *m, CUstream st, CUresult r)
{
    if (r == CUDA_SUCCESS) r = DRV(cuEventRecord)(m->mark, st);
    /* Even after a failure: what was queued must come before later work too. */
    c->mvar_gen++;
    c->mvar_last = m;
    m->mvar_seen = c->mvar_gen;
    return r;
}

/* ---------------------------------------------------------------- work that outlives it */

/* Into buf: the name of the kernel last launched on s (streamrec.h), or why there is none. */
static void launched_name(struct srv_client *c, const struct srv_stream *s, char *buf, size_t len)
{
    const char *name = NULL;
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    /* Asked of the driver only while the handle is still the client's: an unloaded
     * function's handle is not the driver's to read any more. */
    if (!s->last_func)
        name = "none launched there directly (its work is copies, waits or graphs)";
    else if (!srv_obj_find(c, s->last_is_kernel ? SHIM_HT_CUkernel : SHIM_HT_CUfunction,
                           s->last_func))
        name = "one since unloaded";
    else if ((r = s->last_is_kernel
                      ? DRV(cuKernelGetName)(&name, (CUkernel)(uintptr_t)s->last_func)
                      : DRV(cuFuncGetName)(&name, (CUfunction)(uintptr_t)s->last_func)) !=
                 CUDA_SUCCESS ||
             !name)
        name = NULL;
    if (name)
        srv_log_escape(name, buf, len); /* the client's image names it: never raw in the log */
    else
        snprintf(buf, len, "a kernel whose name the driver did not give (%s)", srv_errname(r));
}

/* srv_streams_say_running's walk: lines said, streams left unsaid. */
struct say_walk {
    unsigned said, more;
};

#define SAY_MAX 8 /* streams named in the log, at most; the rest counted */

static void say_each(struct srv_client *c, struct srv_stream *s, void *arg)
{
    struct say_walk *w = arg;
    /* A capturing stream runs nothing (and a query would end its capture). */
    if (srv_stream_capturing(c, s) || DRV(cuStreamQuery)(s->real) != CUDA_ERROR_NOT_READY) return;
    if (w->said >= SAY_MAX) {
        w->more++;
        return;
    }
    w->said++;
    char which[48], name[160];
    if (s->legacy)
        snprintf(which, sizeof(which), "legacy default stream");
    else if (s->thread)
        snprintf(which, sizeof(which), "per-thread default stream (thread %u)",
                 (unsigned)s->thread);
    else
        snprintf(which, sizeof(which), "stream %#llx", (unsigned long long)s->key);
    launched_name(c, s, name, sizeof(name));
    srv_log("Client process %d: device %d, its %s still runs; the last kernel launched there: %s",
            (int)c->pid, s->device, which, name);
}

void srv_streams_say_running(struct srv_client *c, uint32_t ctx)
{
    struct say_walk w = {0, 0};
    srv_streams_each(c, ctx, 1, say_each, &w);
    if (w.more)
        srv_log("Client process %d: and %u more of its streams still run", (int)c->pid, w.more);
}
