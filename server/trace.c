/* GPU timelines: `trace start|stop|status` on the control socket. What every client's
 * streams ran on the shared context (kernels, copies, sets) and the server's waits on them,
 * from when to when, as CUPTI's activity records report them: the server owns the context,
 * so one activity subscription sees every client. Written as a Chrome/Perfetto trace with a
 * summary of how much of each client's GPU time ran beside other clients' (trace_write.c).
 *
 * CUPTI is loaded (dlopen) at the first `trace start` only: MPSSHIM_CUPTI, else the
 * toolkit's usual places, else the loader's search. A server never asked for a trace never
 * loads it. Once loaded it stays (CUPTI cannot be unloaded safely), with its activities off
 * between traces; the next fresh start of an idle server (recycle.c) leaves it behind.
 *
 * Whose work a record is: records name a stream by CUPTI's stream id (unique within a
 * context) and its context's id. While a trace runs, the worker of each client names each of
 * its streams the first time it puts work on it (srv_trace_note in srv_stream_prepare: one
 * relaxed load per enqueue, nothing else, when no trace runs), so only streams that had work
 * are named and none is walked from another thread. Streams no client named (the server's
 * own) are shown as the server's.
 *
 * Locks, never two at once except as said: ctl_lock (commands: one start, stop or status at
 * a time; held across CUPTI's flush), map_lock (the owners, tracks and stream ids; never held
 * across a driver or CUPTI call), rec_lock (the records; taken by CUPTI's threads in the
 * buffer callback, held across nothing but the walk of a buffer). ctl_lock may be held when
 * taking either of the others. */
#define _GNU_SOURCE
#include "server/server.h"
#include "server/trace.h"
#include "server/trace_cupti.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Records kept per trace: about 56 MB of them; past it they are counted, not kept. */
#define TRACE_MAX_RECORDS (1u << 20)
/* CUPTI's buffers: each this big (CUPTI fills one, hands it over, asks for the next). */
#define TRACE_BUFFER_BYTES (4u << 20)
/* Kernel names are cut here (C++ names can be kilobytes), and so many are kept per trace
 * (the names come from clients' code; past it kernels are named "kernel"). */
#define TRACE_NAME_MAX 256
#define TRACE_MAX_NAMES 65536
/* A `trace start SECONDS` runs for at most a day. */
#define TRACE_MAX_SECONDS 86400

_Atomic uint32_t srv_trace_gen;

/* ---------------------------------------------------------------- CUPTI, loaded */

/* Guarded by ctl_lock (the functions, once resolved, are called from any thread). */
static struct {
    void *handle;
    char path[512];
#define X(name, ret, args) ret(*name) args;
    SRV_CUPTI_FUNCTIONS(X)
#undef X
    srv_cupti_result (*result_string)(srv_cupti_result r, const char **s); /* optional */
    srv_cupti_result (*finalize)(void);                                    /* optional */
    int registered; /* the buffer callbacks are registered */
} cupti;

/* Where CUPTI is looked for when MPSSHIM_CUPTI is not set. */
static const char *const cupti_places[] = {
    "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
    "/usr/local/cuda/lib64/libcupti.so",
    "/usr/local/cuda/lib/libcupti.so",
    "libcupti.so",
    "libcupti.so.13",
    "libcupti.so.12",
};

static const char *cupti_error(srv_cupti_result r)
{
    static __thread char num[32];
    const char *s = NULL;
    if (cupti.result_string && cupti.result_string(r, &s) == SRV_CUPTI_SUCCESS && s) return s;
    snprintf(num, sizeof(num), "CUPTI error %d", r);
    return num;
}

/* Resolves every function of h; 0, or -1 with the first one missing in why. */
static int cupti_resolve(void *h, char *why, size_t len)
{
#define X(name, ret, args)                                                                         \
    if (!(cupti.name = (ret(*) args)dlsym(h, #name))) {                                            \
        snprintf(why, len, "it has no %s", #name);                                                 \
        return -1;                                                                                 \
    }
    SRV_CUPTI_FUNCTIONS(X)
#undef X
    cupti.result_string =
        (srv_cupti_result(*)(srv_cupti_result, const char **))dlsym(h, "cuptiGetResultString");
    cupti.finalize = (srv_cupti_result(*)(void))dlsym(h, "cuptiFinalize");
    return 0;
}

/* Loads CUPTI once (ctl_lock held); 0, or -1 with why (a line for the operator). */
static int cupti_load(char *why, size_t len)
{
    if (cupti.handle) return 0;
    const char *want = getenv("MPSSHIM_CUPTI");
    const char *const *places = cupti_places;
    size_t n = sizeof(cupti_places) / sizeof(cupti_places[0]);
    if (want && *want) {
        places = &want;
        n = 1;
    }
    char tried[1024] = "", err[300] = "";
    for (size_t i = 0; i < n; i++) {
        void *h = dlopen(places[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            size_t t = strlen(tried);
            snprintf(tried + t, sizeof(tried) - t, "%s%s", t ? ", " : "", places[i]);
            const char *e = dlerror();
            if (!*err && e) snprintf(err, sizeof(err), "%s", e);
            continue;
        }
        char bad[128];
        if (cupti_resolve(h, bad, sizeof(bad)) != 0) {
            snprintf(why, len, "%s is no CUPTI library: %s", places[i], bad);
            dlclose(h);
            return -1;
        }
        cupti.handle = h;
        snprintf(cupti.path, sizeof(cupti.path), "%s", places[i]);
        srv_log("Trace: loaded CUPTI from %s", places[i]);
        return 0;
    }
    if (want && *want)
        snprintf(why, len, "CUPTI could not be loaded from MPSSHIM_CUPTI=%s: %s", want, err);
    else
        snprintf(why, len,
                 "CUPTI was not found (tried %s); set MPSSHIM_CUPTI to the path of libcupti.so "
                 "(the CUDA toolkit's extras/CUPTI/lib64, or pip's nvidia-cuda-cupti) when "
                 "starting the server",
                 tried);
    return -1;
}

/* ---------------------------------------------------------------- one trace */

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

/* A kernel name met so far (rec_lock). */
struct name {
    char *s;
    uint32_t index;
    UT_hash_handle hh;
};

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ended = PTHREAD_COND_INITIALIZER; /* with ctl_lock: a trace ended */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;

/* The trace (gen 0: none runs). Fields say their lock. */
static struct {
    /* ctl_lock */
    uint32_t gen;        /* also under map_lock: what workers compare with */
    uint32_t last_gen;   /* the last trace's number */
    char path[1024];     /* where it is written */
    uint64_t started_ns; /* monotonic */
    uint64_t unix_start_ns;
    uint64_t deadline_ns; /* monotonic; 0: until `trace stop` */
    int sync_on;          /* SYNCHRONIZATION records were enabled */
    char last[4096];      /* the last trace's answer, for `trace status` */
    /* map_lock */
    struct srv_trace_owner *owners;
    size_t nowners, capowners;
    struct srv_trace_track *tracks;
    size_t ntracks, captracks;
    struct named *named;
    struct by_sid *by_sid;
    int id_failed_logged;
    /* rec_lock */
    int collecting;
    uint64_t t0; /* CUPTI's clock at the start */
    struct srv_trace_ev *evs;
    size_t nevs, capevs;
    struct name *names;
    char **name_list;
    size_t nnames, capnames;
    uint64_t dropped, incomplete;
} tr;

/* Grows *v (of *cap elements of size sz) to hold n+1; 0, or -1 without memory. */
static int grow(void **v, size_t *cap, size_t n, size_t sz, size_t first)
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
    if (grow((void **)&tr.tracks, &tr.captracks, tr.ntracks, sizeof(*tr.tracks), 64) != 0)
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
    if (grow((void **)&tr.owners, &tr.capowners, tr.nowners, sizeof(*tr.owners), 16) != 0)
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
        r = cupti.cuptiGetStreamIdEx(NULL, s->real, 0, &sid);
        unsigned long long id = 0;
        if (r != SRV_CUPTI_SUCCESS && DRV(cuStreamGetId)(s->real, &id) == CUDA_SUCCESS) {
            sid = (uint32_t)id; /* the driver's id, which CUPTI's records carry as well */
            r = SRV_CUPTI_SUCCESS;
        }
        CUcontext ctx = NULL;
        if (r == SRV_CUPTI_SUCCESS && (DRV(cuStreamGetCtx)(s->real, &ctx) != CUDA_SUCCESS || !ctx ||
                                       cupti.cuptiGetContextId(ctx, &cid) != SRV_CUPTI_SUCCESS))
            cid = 0; /* found by its stream id alone */
    }
    atomic_fetch_sub(&asking, 1);
    const char *why = r == SRV_CUPTI_SUCCESS ? NULL : cupti_error(r); /* not under map_lock */
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

/* ---------------------------------------------------------------- records */

/* The index of kernel name s (rec_lock), kept once; UINT32_MAX without memory. */
static uint32_t name_index(const char *s)
{
    char cut[TRACE_NAME_MAX + 4];
    size_t n = strnlen(s, TRACE_NAME_MAX + 1);
    if (n > TRACE_NAME_MAX) {
        memcpy(cut, s, TRACE_NAME_MAX);
        memcpy(cut + TRACE_NAME_MAX, "...", 4);
        s = cut;
        n = TRACE_NAME_MAX + 3;
    }
    struct name *e = NULL;
    HASH_FIND(hh, tr.names, s, n, e);
    if (e) return e->index;
    if (tr.nnames >= TRACE_MAX_NAMES ||
        grow((void **)&tr.name_list, &tr.capnames, tr.nnames, sizeof(char *), 64) != 0 ||
        !(e = calloc(1, sizeof(*e))))
        return UINT32_MAX;
    if (!(e->s = strdup(s))) {
        free(e);
        return UINT32_MAX;
    }
    e->index = (uint32_t)tr.nnames;
    tr.name_list[tr.nnames++] = e->s;
    HASH_ADD_KEYPTR(hh, tr.names, e->s, n, e);
    return e->index;
}

/* A record CUPTI handed over, as an interval of the trace (rec_lock held). */
static void take(const struct srv_cupti_activity *a)
{
    struct srv_trace_ev ev = {0};
    uint64_t start, end;
    uint32_t cid, sid, dev;
    switch (a->kind) {
    case SRV_CUPTI_KIND_CONCURRENT_KERNEL:
    case SRV_CUPTI_KIND_KERNEL: {
        const struct srv_cupti_kernel *k = (const void *)a;
        start = k->start, end = k->end, cid = k->context_id, sid = k->stream_id;
        dev = k->device_id;
        ev.kind = SRV_TRACE_KERNEL;
        ev.correlation = k->correlation_id;
        ev.detail = k->name ? name_index(k->name) : UINT32_MAX;
        break;
    }
    case SRV_CUPTI_KIND_MEMCPY: {
        const struct srv_cupti_memcpy *m = (const void *)a;
        start = m->start, end = m->end, cid = m->context_id, sid = m->stream_id;
        dev = m->device_id;
        ev.kind = SRV_TRACE_MEMCPY;
        ev.correlation = m->correlation_id;
        ev.detail = m->copy_kind;
        ev.bytes = m->bytes;
        break;
    }
    case SRV_CUPTI_KIND_MEMSET: {
        const struct srv_cupti_memset *m = (const void *)a;
        start = m->start, end = m->end, cid = m->context_id, sid = m->stream_id;
        dev = m->device_id;
        ev.kind = SRV_TRACE_MEMSET;
        ev.correlation = m->correlation_id;
        ev.bytes = m->bytes;
        break;
    }
    case SRV_CUPTI_KIND_SYNCHRONIZATION: {
        const struct srv_cupti_sync *y = (const void *)a;
        /* A stream's wait for an event is a call that returns at once: the waits that
         * hold a server thread are the synchronisations. */
        if (y->type == SRV_CUPTI_SYNC_STREAM_WAIT_EVENT) return;
        start = y->start, end = y->end, cid = y->context_id, sid = y->stream_id;
        dev = UINT32_MAX;
        ev.kind = SRV_TRACE_SYNC;
        ev.correlation = y->correlation_id;
        ev.detail = y->type;
        break;
    }
    default:
        return;
    }
    if (!start || !end || end < start) {
        tr.incomplete++; /* timing could not be had (still running at a forced flush) */
        return;
    }
    if (tr.nevs >= TRACE_MAX_RECORDS ||
        grow((void **)&tr.evs, &tr.capevs, tr.nevs, sizeof(*tr.evs), 4096) != 0) {
        tr.dropped++;
        return;
    }
    /* Work that began before the start (queued before it) is drawn from the start. */
    ev.start = start > tr.t0 ? start - tr.t0 : 0;
    ev.end = end > tr.t0 ? end - tr.t0 : 0;
    ev.stream_id = sid;
    ev.context_id = cid;
    ev.device = dev == UINT32_MAX ? -1 : (int32_t)dev;
    ev.track = UINT32_MAX; /* found at the stop (trace_tracks) */
    tr.evs[tr.nevs++] = ev;
}

static void buffer_new(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* Past the bound buffers are still given, so that take() counts what it drops. */
    pthread_mutex_lock(&rec_lock);
    int on = tr.collecting;
    pthread_mutex_unlock(&rec_lock);
    *buffer = on ? aligned_alloc(8, TRACE_BUFFER_BYTES) : NULL;
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void buffer_done(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                        size_t valid)
{
    (void)ctx;
    (void)stream_id;
    (void)size;
    struct srv_cupti_activity *a = NULL;
    pthread_mutex_lock(&rec_lock);
    /* Parsing takes none of CUPTI's locks (it walks the buffer): safe under rec_lock. */
    while (tr.collecting && buffer &&
           cupti.cuptiActivityGetNextRecord(buffer, valid, &a) == SRV_CUPTI_SUCCESS)
        take(a);
    pthread_mutex_unlock(&rec_lock);
    free(buffer);
}

/* ---------------------------------------------------------------- start, stop */

/* Where the trace goes: FILE as given (relative: in the log directory), or
 * <log dir>/trace-<date>-<time>.json. 0, or -1 with why. */
static int trace_path(const char *file, char *out, size_t len, char *why, size_t wlen)
{
    int n;
    if (file && file[0] == '/') {
        n = snprintf(out, len, "%s", file);
    } else if (file) {
        n = snprintf(out, len, "%s/%s", srv.log_dir, file);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        char stamp[32];
        localtime_r(&now, &tm);
        strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
        n = snprintf(out, len, "%s/trace-%s.json", srv.log_dir, stamp);
        /* Two traces in one second: the second gets a number, not the first one's file. */
        struct stat st;
        for (int k = 2; k < 100 && n > 0 && (size_t)n < len && stat(out, &st) == 0; k++)
            n = snprintf(out, len, "%s/trace-%s-%d.json", srv.log_dir, stamp, k);
    }
    if (n < 0 || (size_t)n >= len - 32) {
        snprintf(why, wlen, "Invalid trace file: the path is too long\n");
        return -1;
    }
    /* The directory must take the file now: better said at the start than at the stop. */
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", out);
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(why, wlen, "Invalid trace file \"%s\": a directory\n", out);
        return -1;
    }
    if (access(dirname(dir), W_OK) != 0) {
        snprintf(why, wlen, "Invalid trace file \"%s\": its directory is not writable (%s)\n", out,
                 strerror(errno));
        return -1;
    }
    return 0;
}

static const uint32_t kinds_needed[] = {SRV_CUPTI_KIND_CONCURRENT_KERNEL, SRV_CUPTI_KIND_MEMCPY,
                                        SRV_CUPTI_KIND_MEMSET};

/* Turns CUPTI's activities off (ctl_lock). */
static void kinds_off(void)
{
    for (size_t i = 0; i < sizeof(kinds_needed) / sizeof(kinds_needed[0]); i++)
        cupti.cuptiActivityDisable(kinds_needed[i]);
    if (tr.sync_on) cupti.cuptiActivityDisable(SRV_CUPTI_KIND_SYNCHRONIZATION);
    tr.sync_on = 0;
}

/* Frees what a trace gathered (ctl_lock; no trace running). */
static void trace_free(void)
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
    pthread_mutex_lock(&rec_lock);
    struct name *e, *et;
    HASH_ITER(hh, tr.names, e, et) {
        HASH_DEL(tr.names, e);
        free(e->s);
        free(e);
    }
    free(tr.name_list);
    free(tr.evs);
    tr.name_list = NULL;
    tr.evs = NULL;
    tr.nnames = tr.capnames = tr.nevs = tr.capevs = 0;
    tr.dropped = tr.incomplete = 0;
    pthread_mutex_unlock(&rec_lock);
}

/* Starts a trace (ctl_lock held). 0, or -1 with the answer in out. */
static int trace_start(const char *file, double seconds, char *out, size_t cap)
{
    char path[sizeof(tr.path)], why[1400];
    if (tr.gen) {
        snprintf(out, cap, "A trace is already running (to %s): trace stop first\n", tr.path);
        return -1;
    }
    if (trace_path(file, path, sizeof(path), out, cap) != 0) return -1;
    if (cupti_load(why, sizeof(why)) != 0) {
        srv_log("Trace: %s", why);
        snprintf(out, cap, "%s\n", why);
        return -1;
    }
    trace_free();
    srv_cupti_result r = SRV_CUPTI_SUCCESS;
    if (!cupti.registered &&
        (r = cupti.cuptiActivityRegisterCallbacks(buffer_new, buffer_done)) != SRV_CUPTI_SUCCESS) {
        snprintf(out, cap, "CUPTI (%s) refused its buffers: %s\n", cupti.path, cupti_error(r));
        return -1;
    }
    cupti.registered = 1;
    uint64_t t0 = 0;
    if ((r = cupti.cuptiGetTimestamp(&t0)) != SRV_CUPTI_SUCCESS) {
        snprintf(out, cap, "CUPTI (%s) gave no time: %s\n", cupti.path, cupti_error(r));
        return -1;
    }
    /* Owner 0: the server's own streams and any stream no client named. */
    pthread_mutex_lock(&map_lock);
    if (grow((void **)&tr.owners, &tr.capowners, 0, sizeof(*tr.owners), 16) == 0) {
        tr.owners[0] = (struct srv_trace_owner){.pid = (int)getpid(), .client = 0};
        snprintf(tr.owners[0].exe, sizeof(tr.owners[0].exe), "mpsshim-server");
        tr.nowners = 1;
    }
    pthread_mutex_unlock(&map_lock);
    if (!tr.nowners) {
        snprintf(out, cap, "Out of memory\n");
        return -1;
    }
    pthread_mutex_lock(&rec_lock);
    tr.t0 = t0;
    tr.collecting = 1;
    pthread_mutex_unlock(&rec_lock);
    for (size_t i = 0; i < sizeof(kinds_needed) / sizeof(kinds_needed[0]); i++)
        if ((r = cupti.cuptiActivityEnable(kinds_needed[i])) != SRV_CUPTI_SUCCESS) {
            snprintf(out, cap, "CUPTI (%s) cannot trace activity kind %u: %s\n", cupti.path,
                     kinds_needed[i], cupti_error(r));
            kinds_off();
            pthread_mutex_lock(&rec_lock);
            tr.collecting = 0;
            pthread_mutex_unlock(&rec_lock);
            trace_free();
            return -1;
        }
    /* The server's waits on the GPU: shown when CUPTI gives them, not needed. */
    tr.sync_on = cupti.cuptiActivityEnable(SRV_CUPTI_KIND_SYNCHRONIZATION) == SRV_CUPTI_SUCCESS;
    static uint32_t gens;
    uint32_t gen = ++gens ? gens : ++gens; /* never 0 */
    snprintf(tr.path, sizeof(tr.path), "%s", path);
    tr.started_ns = chan_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    tr.unix_start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    tr.deadline_ns = seconds > 0 ? tr.started_ns + (uint64_t)(seconds * 1e9) : 0;
    pthread_mutex_lock(&map_lock);
    tr.gen = gen;
    atomic_store_explicit(&srv_trace_gen, gen, memory_order_release);
    pthread_mutex_unlock(&map_lock);
    srv_log("Trace: started, to %s%s", tr.path, seconds > 0 ? " (timed)" : "");
    if (seconds > 0)
        snprintf(out, cap, "Tracing to %s for %g s\n", tr.path, seconds);
    else
        snprintf(out, cap, "Tracing to %s until `trace stop`\n", tr.path);
    return 0;
}

/* The track of each record (map_lock): a client's stream, or one of the server's. */
static void trace_tracks(void)
{
    for (size_t i = 0; i < tr.nevs; i++) {
        struct srv_trace_ev *ev = &tr.evs[i];
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
}

/* Writes the file: <path>.<pid>.tmp, then renamed (a reader never sees half a file). 0, or
 * -1 with why. */
static int trace_file(const struct srv_trace_doc *d, const struct srv_trace_busy *per,
                      const struct srv_trace_total *all, char *why, size_t len)
{
    char tmp[sizeof(tr.path) + 32];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", tr.path, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        snprintf(why, len, "cannot write %s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int bad = srv_trace_write_json(f, d, per, all) != 0 || fflush(f) != 0 || fsync(fd) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (!bad && rename(tmp, tr.path) != 0) {
        bad = 1;
        err = errno;
    }
    if (bad) {
        unlink(tmp);
        snprintf(why, len, "cannot write %s: %s", tr.path, strerror(err));
        return -1;
    }
    return 0;
}

/* Stops the trace, writes it and says how it went in out and tr.last (ctl_lock held, a
 * trace running). 0, or -1 when the file could not be written. */
static int trace_stop(char *out, size_t cap)
{
    pthread_mutex_lock(&map_lock);
    tr.gen = 0;
    atomic_store_explicit(&srv_trace_gen, 0, memory_order_release);
    pthread_mutex_unlock(&map_lock);
    uint64_t window = chan_now_ns() - tr.started_ns;
    /* Nothing new from here; what ran is handed over (first what is complete, then the
     * rest: work still running then has no end yet and counts as incomplete). */
    kinds_off();
    cupti.cuptiActivityFlushAll(0);
    cupti.cuptiActivityFlushAll(SRV_CUPTI_FLUSH_FORCED);
    pthread_mutex_lock(&rec_lock);
    tr.collecting = 0;
    pthread_mutex_unlock(&rec_lock);
    /* No worker names a stream nor CUPTI adds a record now: both tables are this thread's. */
    pthread_mutex_lock(&map_lock);
    trace_tracks();
    pthread_mutex_unlock(&map_lock);
    struct srv_trace_doc d = {
        .owners = tr.owners,
        .nowners = tr.nowners,
        .tracks = tr.tracks,
        .ntracks = tr.ntracks,
        .evs = tr.evs,
        .nevs = tr.nevs,
        .names = (const char *const *)tr.name_list,
        .nnames = tr.nnames,
        .server_pid = (int)getpid(),
        .window_ns = window,
        .unix_start_ns = tr.unix_start_ns,
        .dropped = tr.dropped,
        .incomplete = tr.incomplete,
    };
    struct srv_trace_total all;
    struct srv_trace_busy *per = calloc(d.nowners ? d.nowners : 1, sizeof(*per));
    char why[1200] = "";
    int rc = -1;
    if (!per || srv_trace_summarize(&d, per, &all) != 0)
        snprintf(why, sizeof(why), "out of memory");
    else
        rc = trace_file(&d, per, &all, why, sizeof(why));
    size_t n = 0;
    if (rc == 0)
        n = (size_t)snprintf(tr.last, sizeof(tr.last), "Trace written to %s\n", tr.path);
    else
        n = (size_t)snprintf(tr.last, sizeof(tr.last), "Trace not written: %s\n", why);
    if (per && n < sizeof(tr.last))
        srv_trace_describe(&d, per, &all, tr.last + n, sizeof(tr.last) - n);
    srv_log("Trace: %s (%zu records, %" PRIu64 " dropped)", rc == 0 ? "written" : why, d.nevs,
            d.dropped);
    free(per);
    trace_free();
    tr.last_gen++;
    /* MPSSHIM_TRACE_DETACH=1: CUPTI leaves the process until the next trace, once no
     * worker asks it for ids (srv_trace_gen is 0: none starts asking). Its activity is off
     * and flushed, but CUPTI asks that calls be quiet when it detaches, and other clients'
     * calls go on: not the default. */
    const char *detach = getenv("MPSSHIM_TRACE_DETACH");
    if (detach && strcmp(detach, "1") == 0 && cupti.finalize) {
        for (int i = 0; i < 1000 && atomic_load(&asking); i++)
            usleep(1000); /* a worker inside a driver call: a second at most */
        srv_cupti_result r = SRV_CUPTI_ERROR_NOT_INITIALIZED;
        if (!atomic_load(&asking) && (r = cupti.finalize()) == SRV_CUPTI_SUCCESS)
            cupti.registered = 0;
        else
            srv_log("Trace: CUPTI stays attached (%s)",
                    atomic_load(&asking) ? "a worker was still asking it for ids" : cupti_error(r));
    }
    pthread_cond_broadcast(&ended);
    snprintf(out, cap, "%s", tr.last);
    return rc;
}

/* trace start SECONDS: waits until the trace's deadline (or another connection's stop, or
 * the server quitting) with ctl_lock held but for the waits; stops it at the deadline. */
static int trace_wait(char *out, size_t cap)
{
    uint32_t mine = tr.last_gen;
    while (tr.gen && tr.last_gen == mine && !atomic_load(&srv.quitting)) {
        uint64_t now = chan_now_ns();
        if (now >= tr.deadline_ns) return trace_stop(out, cap);
        uint64_t step = tr.deadline_ns - now < 100000000ull ? tr.deadline_ns - now : 100000000ull;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + step;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&ended, &ctl_lock, &ts);
    }
    if (tr.last_gen != mine) { /* stopped by another command */
        snprintf(out, cap, "%s", tr.last);
        return 0;
    }
    snprintf(out, cap, "The server is quitting: the trace was not written\n");
    return -1;
}

/* trace status: what runs, or what the last trace gave. */
static void trace_status(char *out, size_t cap)
{
    size_t n = 0;
    if (tr.gen) {
        uint64_t now = chan_now_ns();
        cupti.cuptiActivityFlushAll(0); /* what is complete, counted now */
        pthread_mutex_lock(&rec_lock);
        size_t nevs = tr.nevs;
        uint64_t dropped = tr.dropped;
        pthread_mutex_unlock(&rec_lock);
        n = (size_t)snprintf(
            out, cap,
            "Tracing for %.1f s to %s: %zu records so far (%" PRIu64 " dropped, at most %u kept)\n",
            (double)(now - tr.started_ns) / 1e9, tr.path, nevs, dropped, TRACE_MAX_RECORDS);
        if (n < cap && tr.deadline_ns)
            n += (size_t)snprintf(out + n, cap - n, "Stops in %.1f s\n",
                                  tr.deadline_ns > now ? (double)(tr.deadline_ns - now) / 1e9 : 0);
    } else {
        n = (size_t)snprintf(out, cap, "Not tracing\n");
        if (n < cap && tr.last[0])
            n += (size_t)snprintf(out + n, cap - n, "Last trace: %s", tr.last);
    }
    if (n < cap) snprintf(out + n, cap - n, "CUPTI %s\n", cupti.handle ? cupti.path : "not loaded");
}

int srv_trace_control(int argc, char **argv, char *out, size_t cap)
{
    static const char use[] = "Usage: trace start [seconds] [file] | trace stop | trace status\n";
    if (!cap) return 1;
    out[0] = '\0';
    if (argc < 1) {
        snprintf(out, cap, "%s", use);
        return 1;
    }
    int rc = 0;
    pthread_mutex_lock(&ctl_lock);
    if (strcmp(argv[0], "start") == 0 && argc <= 3) {
        double secs = 0;
        const char *file = NULL;
        char *end;
        if (argc >= 2) {
            double v = strtod(argv[1], &end);
            if (end != argv[1] && !*end) {
                secs = v;
                file = argc == 3 ? argv[2] : NULL;
            } else if (argc == 2) {
                file = argv[1];
            } else {
                secs = -1;
            }
        }
        if (!(secs >= 0 && secs <= TRACE_MAX_SECONDS)) {
            snprintf(out, cap,
                     "Invalid trace length \"%s\": seconds, 0 to %d (0: until `trace "
                     "stop`)\n",
                     argv[1], TRACE_MAX_SECONDS);
            rc = 1;
        } else if (trace_start(file, secs, out, cap) != 0) {
            rc = 1;
        } else if (secs > 0) {
            rc = trace_wait(out, cap) != 0;
        }
    } else if (strcmp(argv[0], "stop") == 0 && argc == 1) {
        if (!tr.gen) {
            snprintf(out, cap, "No trace is running\n");
            rc = 1;
        } else {
            rc = trace_stop(out, cap) != 0;
        }
    } else if (strcmp(argv[0], "status") == 0 && argc == 1) {
        trace_status(out, cap);
    } else {
        snprintf(out, cap, "%s", use);
        rc = 1;
    }
    pthread_mutex_unlock(&ctl_lock);
    return rc;
}

int srv_trace_active(void)
{
    /* A relaxed look is enough: recycle.c asks again on its next pass. */
    return atomic_load_explicit(&srv_trace_gen, memory_order_relaxed) != 0;
}
