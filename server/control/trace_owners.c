/* Whose work a trace's record is. Records name a stream by CUPTI's stream id (unique within
 * a context) and its context's id. While a trace runs, the worker of each client names each
 * of its streams the first time it puts work on it (srv_trace_note in srv_stream_prepare:
 * one relaxed load per enqueue, nothing else, when no trace runs), so only streams that had
 * work are named and none is walked from another thread. Streams no client named (the
 * server's own) are shown as the server's. The owners (client processes, and the server as
 * owner 0) and their tracks (a stream each) are what the trace file draws (trace_write.c).
 *
 * map_lock guards all of it and is never held across a driver or CUPTI call; trace.c calls
 * in here with its ctl_lock held. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/control/trace.h"
#include "server/control/trace_cupti.h"
#include "server/control/trace_owners.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A stream a client named (map_lock): CUPTI's ids and the track it draws on. */
struct named {
    uint64_t key; /* context id << 32 | stream id */
    uint32_t track;
    UT_hash_handle hh;
};

/* A stream id that a client's stream has (map_lock), whatever its context id: records whose
 * context id is not the one the stream was named with (it was not had, or a green context's
 * stream reports another) find the stream here, unless two named streams have that id. */
struct by_sid {
    uint32_t sid;
    uint32_t track;
    int shared;
    UT_hash_handle hh;
};

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

/* The running trace's owners, tracks and named streams, all under map_lock. */
static struct {
    uint32_t gen; /* what workers compare with; 0: no trace runs */
    struct srv_trace_owner *owners;
    size_t nowners, capowners;
    struct srv_trace_track *tracks;
    size_t ntracks, captracks;
    struct named *named;
    struct by_sid *by_sid;
    int id_failed_logged;
} tr;

_Atomic uint32_t srv_trace_gen;

int srv_trace_grow(void **v, size_t *cap, size_t n, size_t sz, size_t first)
{
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : first;
    void *p = realloc(*v, c * sz);
    if (!p) return -1;
    *v = p;
    *cap = c;
    return 0;
}

/* A new track of owner o (map_lock); its index, or UINT32_MAX without memory. */
static uint32_t track_new(uint32_t o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static uint32_t track_new(uint32_t o, const char *fmt, ...)
{
    if (srv_trace_grow((void **)&tr.tracks, &tr.captracks, tr.ntracks, sizeof(*tr.tracks), 64) != 0)
        return UINT32_MAX;
    struct srv_trace_track *t = &tr.tracks[tr.ntracks];
    t->owner = o;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->label, sizeof(t->label), fmt, ap);
    va_end(ap);
    return (uint32_t)tr.ntracks++;
}

/* The owner of client process pid (map_lock), made on first use; UINT32_MAX without
 * memory. Owner 0 is the server. */
static uint32_t owner_of(const struct srv_client *c)
{
    for (size_t i = 1; i < tr.nowners; i++)
        if (tr.owners[i].pid == (int)c->pid) return (uint32_t)i;
    if (srv_trace_grow((void **)&tr.owners, &tr.capowners, tr.nowners, sizeof(*tr.owners), 16) != 0)
        return UINT32_MAX;
    struct srv_trace_owner *w = &tr.owners[tr.nowners];
    w->pid = (int)c->pid;
    w->client = 1;
    snprintf(w->exe, sizeof(w->exe), "%s", c->exe);
    return (uint32_t)tr.nowners++;
}

/* Workers asking CUPTI for a stream's ids now, outside any lock (a driver call can wait on
 * another thread's code load: no other worker must wait behind it). A stop that detaches
 * CUPTI waits for them; they look at srv_trace_gen again after counting themselves. */
static _Atomic unsigned asking;

/* Files s under the trace gen, with CUPTI's ids (map_lock held). */
static void name_stream(struct srv_client *c, struct srv_stream *s, uint32_t sid, uint32_t cid)
{
    uint32_t o = owner_of(c);
    if (o == UINT32_MAX) return;
    char what[48];
    if (s->legacy)
        snprintf(what, sizeof(what), "legacy stream");
    else if (s->thread)
        snprintf(what, sizeof(what), "per-thread stream of thread %u", (unsigned)s->thread);
    else if (s->obj)
        snprintf(what, sizeof(what), "stream 0x%" PRIx64, s->key);
    else
        snprintf(what, sizeof(what), "stream of __managed__ copies");
    uint32_t t = track_new(o, "%s, device %d (id %u)", what, s->device, sid);
    struct named *m = calloc(1, sizeof(*m));
    if (t == UINT32_MAX || !m) {
        free(m);
        return;
    }
    m->key = (uint64_t)cid << 32 | sid;
    m->track = t;
    struct named *old = NULL;
    HASH_REPLACE(hh, tr.named, key, sizeof(m->key), m, old);
    free(old);
    struct by_sid *b = NULL;
    HASH_FIND(hh, tr.by_sid, &sid, sizeof(sid), b);
    if (b) {
        b->shared |= b->track != t;
    } else if ((b = calloc(1, sizeof(*b)))) {
        b->sid = sid;
        b->track = t;
        HASH_ADD(hh, tr.by_sid, sid, sizeof(b->sid), b);
    }
}

void srv_trace_stream(struct srv_client *c, struct srv_stream *s)
{
    uint32_t gen = atomic_load(&srv_trace_gen);
    s->trace_gen = gen; /* asked once per trace, whatever comes of it */
    if (!gen) return;
    uint32_t sid = 0, cid = 0;
    srv_cupti_result r = SRV_CUPTI_ERROR_NOT_INITIALIZED;
    atomic_fetch_add(&asking, 1);
    if (atomic_load(&srv_trace_gen) == gen) { /* not stopped meanwhile: CUPTI is there */
        r = srv_cupti.cuptiGetStreamIdEx(NULL, s->real, 0, &sid);
        unsigned long long id = 0;
        if (r != SRV_CUPTI_SUCCESS && DRV(cuStreamGetId)(s->real, &id) == CUDA_SUCCESS) {
            sid = (uint32_t)id; /* the driver's id, which CUPTI's records carry as well */
            r = SRV_CUPTI_SUCCESS;
        }
        CUcontext ctx = NULL;
        if (r == SRV_CUPTI_SUCCESS && (DRV(cuStreamGetCtx)(s->real, &ctx) != CUDA_SUCCESS || !ctx ||
                                       srv_cupti.cuptiGetContextId(ctx, &cid) != SRV_CUPTI_SUCCESS))
            cid = 0; /* found by its stream id alone */
    }
    atomic_fetch_sub(&asking, 1);
    const char *why = r == SRV_CUPTI_SUCCESS ? NULL : srv_cupti_error(r); /* not under map_lock */
    pthread_mutex_lock(&map_lock);
    int say = 0;
    if (tr.gen == gen && !why)
        name_stream(c, s, sid, cid);
    else if (tr.gen == gen && !tr.id_failed_logged)
        say = tr.id_failed_logged = 1;
    pthread_mutex_unlock(&map_lock);
    if (say)
        srv_log("Trace: CUPTI gave no id for a stream of client process %d (%s): its work "
                "shows as the server's",
                (int)c->pid, why);
}

void srv_trace_owners_assign(struct srv_trace_ev *evs, size_t nevs)
{
    pthread_mutex_lock(&map_lock);
    for (size_t i = 0; i < nevs; i++) {
        struct srv_trace_ev *ev = &evs[i];
        struct named *m = NULL;
        uint64_t key = (uint64_t)ev->context_id << 32 | ev->stream_id;
        HASH_FIND(hh, tr.named, &key, sizeof(key), m);
        struct by_sid *b = NULL;
        if (!m) HASH_FIND(hh, tr.by_sid, &ev->stream_id, sizeof(ev->stream_id), b);
        if (b && !b->shared) {
            ev->track = b->track;
            continue;
        }
        if (!m && (m = calloc(1, sizeof(*m)))) { /* no client's: the server's */
            m->key = (uint64_t)ev->context_id << 32 | ev->stream_id;
            m->track = track_new(0, "stream id %u, context id %u", ev->stream_id, ev->context_id);
            if (m->track == UINT32_MAX) {
                free(m);
                m = NULL;
            } else {
                HASH_ADD(hh, tr.named, key, sizeof(m->key), m);
            }
        }
        ev->track = m ? m->track : UINT32_MAX; /* none: left out of the file and summary */
    }
    pthread_mutex_unlock(&map_lock);
}

int srv_trace_owners_init(void)
{
    /* Owner 0: the server's own streams and any stream no client named. */
    pthread_mutex_lock(&map_lock);
    if (srv_trace_grow((void **)&tr.owners, &tr.capowners, 0, sizeof(*tr.owners), 16) == 0) {
        tr.owners[0] = (struct srv_trace_owner){.pid = (int)getpid(), .client = 0};
        snprintf(tr.owners[0].exe, sizeof(tr.owners[0].exe), "mpsshim-server");
        tr.nowners = 1;
    }
    int ok = tr.nowners == 1;
    pthread_mutex_unlock(&map_lock);
    return ok ? 0 : -1;
}

void srv_trace_owners_open(uint32_t gen)
{
    pthread_mutex_lock(&map_lock);
    tr.gen = gen;
    atomic_store_explicit(&srv_trace_gen, gen, memory_order_release);
    pthread_mutex_unlock(&map_lock);
}

unsigned srv_trace_owners_asking(void)
{
    return atomic_load(&asking);
}

void srv_trace_owners_doc(struct srv_trace_doc *d)
{
    d->owners = tr.owners;
    d->nowners = tr.nowners;
    d->tracks = tr.tracks;
    d->ntracks = tr.ntracks;
}

void srv_trace_owners_free(void)
{
    pthread_mutex_lock(&map_lock);
    struct named *m, *mt;
    HASH_ITER(hh, tr.named, m, mt) {
        HASH_DEL(tr.named, m);
        free(m);
    }
    struct by_sid *b, *bt;
    HASH_ITER(hh, tr.by_sid, b, bt) {
        HASH_DEL(tr.by_sid, b);
        free(b);
    }
    free(tr.owners);
    free(tr.tracks);
    tr.owners = NULL;
    tr.tracks = NULL;
    tr.nowners = tr.capowners = tr.ntracks = tr.captracks = 0;
    tr.id_failed_logged = 0;
    pthread_mutex_unlock(&map_lock);
}
