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
 * Whose work a record is: trace_owners.c. CUPTI's loader: trace_cupti.c.
 *
 * Locks, never two at once except as said: ctl_lock (commands: one start, stop or status at
 * a time; held across CUPTI's flush), trace_owners.c's map_lock (the owners, tracks and
 * stream ids; never held across a driver or CUPTI call), rec_lock (the records; taken by
 * CUPTI's threads in the buffer callback, held across nothing but the walk of a buffer).
 * ctl_lock may be held when taking either of the others. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/control/trace.h"
#include "server/control/trace_cupti.h"
#include "server/control/trace_owners.h"
#include "channel/settings.h"

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

/* ---------------------------------------------------------------- one trace */

/* A kernel name met so far (rec_lock). */
struct name {
    char *s;
    uint32_t index;
    UT_hash_handle hh;
};

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ended = PTHREAD_COND_INITIALIZER; /* with ctl_lock: a trace ended */
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;

/* The trace (gen 0: none runs). Fields say their lock. */
static struct {
    /* ctl_lock */
    uint32_t gen;        /* trace_owners.c has it too, for the workers */
    uint32_t last_gen;   /* the last trace's number */
    char path[1024];     /* where it is written */
    uint64_t started_ns; /* monotonic */
    uint64_t unix_start_ns;
    uint64_t deadline_ns; /* monotonic; 0: until `trace stop` */
    int sync_on;          /* SYNCHRONIZATION records were enabled */
    char last[4096];      /* the last trace's answer, for `trace status` */
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
        srv_trace_grow((void **)&tr.name_list, &tr.capnames, tr.nnames, sizeof(char *), 64) != 0 ||
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
        srv_trace_grow((void **)&tr.evs, &tr.capevs, tr.nevs, sizeof(*tr.evs), 4096) != 0) {
        tr.dropped++;
        return;
    }
    /* Work that began before the start (queued before it) is drawn from the start. */
    ev.start = start > tr.t0 ? start - tr.t0 : 0;
    ev.end = end > tr.t0 ? end - tr.t0 : 0;
    ev.stream_id = sid;
    ev.context_id = cid;
    ev.device = dev == UINT32_MAX ? -1 : (int32_t)dev;
    ev.track = UINT32_MAX; /* found at the stop (srv_trace_owners_assign) */
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
           srv_cupti.cuptiActivityGetNextRecord(buffer, valid, &a) == SRV_CUPTI_SUCCESS)
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
        srv_cupti.cuptiActivityDisable(kinds_needed[i]);
    if (tr.sync_on) srv_cupti.cuptiActivityDisable(SRV_CUPTI_KIND_SYNCHRONIZATION);
    tr.sync_on = 0;
}

/* Frees what a trace gathered (ctl_lock; no trace running). */
static void trace_free(void)
{
    srv_trace_owners_free();
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
    if (srv_cupti_load(why, sizeof(why)) != 0) {
        srv_log("Trace: %s", why);
        snprintf(out, cap, "%s\n", why);
        return -1;
    }
    trace_free();
    srv_cupti_result r = SRV_CUPTI_SUCCESS;
    if (!srv_cupti.registered && (r = srv_cupti.cuptiActivityRegisterCallbacks(
                                      buffer_new, buffer_done)) != SRV_CUPTI_SUCCESS) {
        snprintf(out, cap, "CUPTI (%s) refused its buffers: %s\n", srv_cupti.path,
                 srv_cupti_error(r));
        return -1;
    }
    srv_cupti.registered = 1;
    uint64_t t0 = 0;
    if ((r = srv_cupti.cuptiGetTimestamp(&t0)) != SRV_CUPTI_SUCCESS) {
        snprintf(out, cap, "CUPTI (%s) gave no time: %s\n", srv_cupti.path, srv_cupti_error(r));
        return -1;
    }
    if (srv_trace_owners_init() != 0) {
        snprintf(out, cap, "Out of memory\n");
        return -1;
    }
    pthread_mutex_lock(&rec_lock);
    tr.t0 = t0;
    tr.collecting = 1;
    pthread_mutex_unlock(&rec_lock);
    for (size_t i = 0; i < sizeof(kinds_needed) / sizeof(kinds_needed[0]); i++)
        if ((r = srv_cupti.cuptiActivityEnable(kinds_needed[i])) != SRV_CUPTI_SUCCESS) {
            snprintf(out, cap, "CUPTI (%s) cannot trace activity kind %u: %s\n", srv_cupti.path,
                     kinds_needed[i], srv_cupti_error(r));
            kinds_off();
            pthread_mutex_lock(&rec_lock);
            tr.collecting = 0;
            pthread_mutex_unlock(&rec_lock);
            trace_free();
            return -1;
        }
    /* The server's waits on the GPU: shown when CUPTI gives them, not needed. */
    tr.sync_on = srv_cupti.cuptiActivityEnable(SRV_CUPTI_KIND_SYNCHRONIZATION) == SRV_CUPTI_SUCCESS;
    static uint32_t gens;
    uint32_t gen = ++gens ? gens : ++gens; /* never 0 */
    snprintf(tr.path, sizeof(tr.path), "%s", path);
    tr.started_ns = chan_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    tr.unix_start_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    tr.deadline_ns = seconds > 0 ? tr.started_ns + (uint64_t)(seconds * 1e9) : 0;
    tr.gen = gen;
    srv_trace_owners_open(gen);
    srv_log("Trace: started, to %s%s", tr.path, seconds > 0 ? " (timed)" : "");
    if (seconds > 0)
        snprintf(out, cap, "Tracing to %s for %g s\n", tr.path, seconds);
    else
        snprintf(out, cap, "Tracing to %s until `trace stop`\n", tr.path);
    return 0;
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
    tr.gen = 0;
    srv_trace_owners_open(0);
    uint64_t window = chan_now_ns() - tr.started_ns;
    /* Nothing new from here; what ran is handed over (first what is complete, then the
     * rest: work still running then has no end yet and counts as incomplete). */
    kinds_off();
    srv_cupti.cuptiActivityFlushAll(0);
    srv_cupti.cuptiActivityFlushAll(SRV_CUPTI_FLUSH_FORCED);
    pthread_mutex_lock(&rec_lock);
    tr.collecting = 0;
    pthread_mutex_unlock(&rec_lock);
    /* No worker names a stream nor CUPTI adds a record now: both tables are this thread's. */
    srv_trace_owners_assign(tr.evs, tr.nevs);
    struct srv_trace_doc d = {
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
    srv_trace_owners_doc(&d);
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
    if (chan_setting_num(CHAN_SET_TRACE_DETACH) && srv_cupti.finalize) {
        for (int i = 0; i < 1000 && srv_trace_owners_asking(); i++)
            usleep(1000); /* a worker inside a driver call: a second at most */
        srv_cupti_result r = SRV_CUPTI_ERROR_NOT_INITIALIZED;
        if (!srv_trace_owners_asking() && (r = srv_cupti.finalize()) == SRV_CUPTI_SUCCESS)
            srv_cupti.registered = 0;
        else
            srv_log("Trace: CUPTI stays attached (%s)", srv_trace_owners_asking()
                                                            ? "a worker was still asking it for ids"
                                                            : srv_cupti_error(r));
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
        srv_cupti.cuptiActivityFlushAll(0); /* what is complete, counted now */
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
    if (n < cap)
        snprintf(out + n, cap - n, "CUPTI %s\n", srv_cupti.handle ? srv_cupti.path : "not loaded");
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
