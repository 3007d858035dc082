/* A trace's summary and its file (server/control/trace.h): pure functions of the records, so that
 * tests/unit/trace_test.c checks them with records of its own. */
#include "server/control/trace.h"
#include "server/control/trace_cupti.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- summary */

/* An interval's start (+1) or end (-1). */
struct point {
    uint64_t t;
    uint32_t owner;
    int delta;
};

/* By time; at one instant ends first, so that intervals that only touch do not overlap. */
static int by_time(const void *a, const void *b)
{
    const struct point *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta;
}

/* The owner of ev, or -1 when the record names no track or owner of d's. */
static int64_t owner_of(const struct srv_trace_doc *d, const struct srv_trace_ev *ev)
{
    if (ev->track >= d->ntracks || d->tracks[ev->track].owner >= d->nowners) return -1;
    return d->tracks[ev->track].owner;
}

/* One sweep over every start and end. Two clocks run along: the time during which one or
 * more clients ran (`one`) and two or more (`two`). An owner's time beside others is what
 * the relevant clock gained while it ran: `two` for a client (itself and another), `one`
 * for the server (any client beside it). */
int srv_trace_summarize(const struct srv_trace_doc *d, struct srv_trace_busy *per,
                        struct srv_trace_total *all)
{
    memset(per, 0, d->nowners * sizeof(*per));
    memset(all, 0, sizeof(*all));
    size_t n = 0;
    for (size_t i = 0; i < d->nevs; i++)
        n += d->evs[i].kind != SRV_TRACE_SYNC && owner_of(d, &d->evs[i]) >= 0;
    if (!n) return 0;
    struct point *pt = calloc(2 * n, sizeof(*pt));
    struct state {
        uint64_t depth, since, clock_then;
    } *st = calloc(d->nowners, sizeof(*st));
    if (!pt || !st) {
        free(pt);
        free(st);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < d->nevs; i++) {
        const struct srv_trace_ev *ev = &d->evs[i];
        int64_t o = ev->kind == SRV_TRACE_SYNC ? -1 : owner_of(d, ev);
        if (o < 0) continue;
        uint64_t end = ev->end < ev->start ? ev->start : ev->end;
        pt[k++] = (struct point){ev->start, (uint32_t)o, +1};
        pt[k++] = (struct point){end, (uint32_t)o, -1};
        per[o].events++;
    }
    qsort(pt, k, sizeof(*pt), by_time);
    uint64_t one = 0, two = 0, prev = pt[0].t;
    unsigned running = 0, clients = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t dt = pt[i].t - prev;
        prev = pt[i].t;
        all->union_ns += running ? dt : 0;
        one += clients >= 1 ? dt : 0;
        two += clients >= 2 ? dt : 0;
        uint32_t o = pt[i].owner;
        int client = d->owners[o].client;
        uint64_t clock = client ? two : one;
        struct state *s = &st[o];
        if (pt[i].delta > 0) {
            if (s->depth++ == 0) {
                s->since = pt[i].t;
                s->clock_then = clock;
                running++;
                clients += client;
            }
        } else if (--s->depth == 0) {
            per[o].busy_ns += pt[i].t - s->since;
            per[o].beside_ns += clock - s->clock_then;
            running--;
            clients -= client;
        }
    }
    all->multi_ns = two;
    for (size_t o = 0; o < d->nowners; o++)
        all->sum_ns += d->owners[o].client ? per[o].busy_ns : 0;
    free(pt);
    free(st);
    return 0;
}

/* ---------------------------------------------------------------- text */

static const char *copy_kind(uint32_t k)
{
    static const char *const names[] = {"copy", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
    return k < sizeof(names) / sizeof(names[0]) ? names[k] : "copy";
}

static const char *sync_kind(uint32_t k)
{
    switch (k) {
    case SRV_CUPTI_SYNC_EVENT:
        return "event synchronize";
    case SRV_CUPTI_SYNC_STREAM_WAIT_EVENT:
        return "stream wait event";
    case SRV_CUPTI_SYNC_STREAM:
        return "stream synchronize";
    case SRV_CUPTI_SYNC_CONTEXT:
        return "context synchronize";
    default:
        return "synchronize";
    }
}

/* "12.345" milliseconds from ns. */
static void ms(char *out, size_t cap, uint64_t ns)
{
    snprintf(out, cap, "%" PRIu64 ".%03" PRIu64, ns / 1000000, ns / 1000 % 1000);
}

/* Appends to out at *n (never past cap; out stays terminated). */
static void put(char *out, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t cap, size_t *n, const char *fmt, ...)
{
    if (*n >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(out + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (m > 0) *n = *n + (size_t)m < cap ? *n + (size_t)m : cap - 1;
}

/* Records of d that name an owner: those the file shows. */
static size_t shown(const struct srv_trace_doc *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->nevs; i++)
        n += owner_of(d, &d->evs[i]) >= 0;
    return n;
}

void srv_trace_describe(const struct srv_trace_doc *d, const struct srv_trace_busy *per,
                        const struct srv_trace_total *all, char *out, size_t cap)
{
    size_t n = 0;
    char a[32], b[32], c[32];
    if (!cap) return;
    out[0] = '\0';
    ms(a, sizeof(a), d->window_ns);
    put(out, cap, &n, "Window %s ms, %zu records (%" PRIu64 " dropped, %" PRIu64 " incomplete)\n",
        a, shown(d), d->dropped, d->incomplete);
    for (size_t o = 0; o < d->nowners; o++) {
        const struct srv_trace_owner *w = &d->owners[o];
        if (!w->client && !per[o].events) continue;
        ms(a, sizeof(a), per[o].busy_ns);
        ms(b, sizeof(b), per[o].beside_ns);
        unsigned pct = per[o].busy_ns ? (unsigned)(per[o].beside_ns * 100 / per[o].busy_ns) : 0;
        if (w->client)
            put(out, cap, &n,
                "Client %d (%s): GPU busy %s ms, beside other clients %s ms (%u%%), %" PRIu64
                " records\n",
                w->pid, w->exe, a, b, pct, per[o].events);
        else
            put(out, cap, &n,
                "Server %d (its own streams): GPU busy %s ms, beside clients %s ms (%u%%), %" PRIu64
                " records\n",
                w->pid, a, b, pct, per[o].events);
    }
    ms(a, sizeof(a), all->union_ns);
    ms(b, sizeof(b), all->multi_ns);
    ms(c, sizeof(c), all->sum_ns);
    unsigned x100 = all->union_ns ? (unsigned)(all->sum_ns * 100 / all->union_ns) : 0;
    put(out, cap, &n,
        "All: GPU busy %s ms, two or more clients at once %s ms, clients' busy times add up to "
        "%s ms (%u.%02ux)\n",
        a, b, c, x100 / 100, x100 % 100);
}

/* ---------------------------------------------------------------- JSON */

/* s as a JSON string. Kernel names come from clients' code: any byte. Bytes past ASCII are
 * written as the Latin-1 characters they would be, so the file is valid whatever they are. */
static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Microseconds, exactly, from ns. */
static void jus(FILE *f, uint64_t ns)
{
    fprintf(f, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
}

/* A track's tid: GPU work on 2t+1, the server's waits on it on 2t+2 (waits would cut
 * across the work's nesting). */
static unsigned tid(uint32_t t, int waits)
{
    return 2 * t + 1 + !!waits;
}

static void meta(FILE *f, int *first, const char *what, int pid, long thread, const char *name,
                 const char *suffix)
{
    fprintf(f, "%s\n{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%ld,\"args\":{\"name\":",
            *first ? "" : ",", what, pid, thread);
    *first = 0;
    if (!suffix) {
        jstr(f, name);
    } else {
        char both[160];
        snprintf(both, sizeof(both), "%s%s", name, suffix);
        jstr(f, both);
    }
    fputs("}}", f);
}

static void event(FILE *f, const struct srv_trace_doc *d, const struct srv_trace_ev *ev, int pid)
{
    static const char *const cats[] = {"kernel", "memcpy", "memset", "sync"};
    char name[64];
    const char *nm = name;
    switch (ev->kind) {
    case SRV_TRACE_KERNEL:
        nm = ev->detail < d->nnames && d->names[ev->detail] ? d->names[ev->detail] : "kernel";
        break;
    case SRV_TRACE_MEMCPY:
        snprintf(name, sizeof(name), "%s %" PRIu64 " B", copy_kind(ev->detail), ev->bytes);
        break;
    case SRV_TRACE_MEMSET:
        snprintf(name, sizeof(name), "memset %" PRIu64 " B", ev->bytes);
        break;
    default:
        nm = sync_kind(ev->detail);
    }
    uint64_t end = ev->end < ev->start ? ev->start : ev->end;
    fputs(",\n{\"ph\":\"X\",\"name\":", f);
    jstr(f, nm);
    fprintf(f, ",\"cat\":\"%s\",\"pid\":%d,\"tid\":%u,\"ts\":", cats[ev->kind & 3], pid,
            tid(ev->track, ev->kind == SRV_TRACE_SYNC));
    jus(f, ev->start);
    fputs(",\"dur\":", f);
    jus(f, end - ev->start);
    fprintf(f, ",\"args\":{\"device\":%d,\"stream\":%u,\"correlation\":%u", (int)ev->device,
            ev->stream_id, ev->correlation);
    if (ev->kind == SRV_TRACE_MEMCPY || ev->kind == SRV_TRACE_MEMSET)
        fprintf(f, ",\"bytes\":%" PRIu64, ev->bytes);
    fputs("}}", f);
}

int srv_trace_write_json(FILE *f, const struct srv_trace_doc *d, const struct srv_trace_busy *per,
                         const struct srv_trace_total *all)
{
    unsigned char *waits = calloc(d->ntracks ? d->ntracks : 1, 1);
    if (!waits) return -1;
    for (size_t i = 0; i < d->nevs; i++)
        if (d->evs[i].kind == SRV_TRACE_SYNC && d->evs[i].track < d->ntracks)
            waits[d->evs[i].track] = 1;
    int first = 1;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    for (size_t o = 0; o < d->nowners; o++) {
        const struct srv_trace_owner *w = &d->owners[o];
        char name[120];
        if (w->client)
            snprintf(name, sizeof(name), "client %d: %s", w->pid, w->exe);
        else
            snprintf(name, sizeof(name), "mpsshim-server %d (its own streams)", w->pid);
        meta(f, &first, "process_name", w->pid, 0, name, NULL);
    }
    for (size_t t = 0; t < d->ntracks; t++) {
        const struct srv_trace_track *k = &d->tracks[t];
        if (k->owner >= d->nowners) continue;
        int pid = d->owners[k->owner].pid;
        meta(f, &first, "thread_name", pid, tid((uint32_t)t, 0), k->label, NULL);
        if (waits[t])
            meta(f, &first, "thread_name", pid, tid((uint32_t)t, 1), k->label, ": server's waits");
    }
    free(waits);
    if (first) /* no owner at all: the first event needs no comma */
        fputs("\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":"
              "\"nothing traced\"}}",
              f);
    for (size_t i = 0; i < d->nevs; i++) {
        int64_t o = owner_of(d, &d->evs[i]);
        if (o >= 0) event(f, d, &d->evs[i], d->owners[o].pid);
    }
    fprintf(f,
            "\n],\n\"metadata\":{\"mpsshim\":{\"server_pid\":%d,\"start_unix_ns\":%" PRIu64
            ",\"window_us\":",
            d->server_pid, d->unix_start_ns);
    jus(f, d->window_ns);
    fprintf(f, ",\"records\":%zu,\"dropped\":%" PRIu64 ",\"incomplete\":%" PRIu64 ",\"owners\":[",
            shown(d), d->dropped, d->incomplete);
    for (size_t o = 0; o < d->nowners; o++) {
        const struct srv_trace_owner *w = &d->owners[o];
        fprintf(f, "%s\n{\"pid\":%d,\"client\":%s,\"exe\":", o ? "," : "", w->pid,
                w->client ? "true" : "false");
        jstr(f, w->client ? w->exe : "mpsshim-server");
        fputs(",\"busy_us\":", f);
        jus(f, per[o].busy_ns);
        fputs(",\"beside_us\":", f);
        jus(f, per[o].beside_ns);
        fprintf(f, ",\"records\":%" PRIu64 "}", per[o].events);
    }
    fputs("],\n\"all\":{\"union_us\":", f);
    jus(f, all->union_ns);
    fputs(",\"multi_us\":", f);
    jus(f, all->multi_ns);
    fputs(",\"sum_us\":", f);
    jus(f, all->sum_ns);
    fputs("}}}}\n", f);
    return ferror(f) ? -1 : 0;
}
