/* The GPU timeline's summary and file (server/control/trace_write.c) on records whose overlaps are
 * known. Usage: trace_test [FILE.json]: also writes the trace of the first case to FILE, for
 * tests/trace.sh to load with a JSON parser.
 *
 * Three clients and the server, times in microseconds:
 *   A (two streams)  [0,100) [50,150) and an empty [600,600)
 *   B                [100,200) [300,400)
 *   C                [390,500)
 *   server           [120,130), and a wait [0,1000) (a sync: drawn, never counted)
 *   a record naming no track (left out)
 * A's busy time is the union of its streams, 150; beside B [100,150): 50. B beside A 50 and
 * C 10: 60. C beside B 10. The server beside any client 10. Any work: [0,200) [300,500): 400;
 * two clients at once: 50 + 10 = 60; the clients' busy times add up to 150 + 200 + 110. */
#include "server/control/trace.h"
#include "server/control/trace_cupti.h"
#include "tests/unit/check.h"

#include <string.h>

#define US 1000ull

static const struct srv_trace_owner owners[] = {
    {.pid = 100, .client = 0, .exe = "mpsshim-server"},
    {.pid = 101, .client = 1, .exe = "a"},
    {.pid = 102, .client = 1, .exe = "b"},
    {.pid = 103, .client = 1, .exe = "c"},
};

static const struct srv_trace_track tracks[] = {
    {.owner = 1, .label = "stream 0x1, device 0 (id 1)"},
    {.owner = 1, .label = "legacy stream, device 0 (id 2)"},
    {.owner = 2, .label = "stream 0x3, device 0 (id 3)"},
    {.owner = 3, .label = "stream 0x4, device 1 (id 4)"},
    {.owner = 0, .label = "stream id 5, context id 1"},
};

/* A kernel name as a client's code may have it: quotes, a backslash, a newline, a byte
 * that is no UTF-8 character. */
static const char *const names[] = {"vec_add", "we\"ird\\name\n\xff", NULL};

#define EV(k, t, s, e, d)                                                                          \
    {.kind = (k), .track = (t), .start = (s) * US, .end = (e) * US, .detail = (d)}
static const struct srv_trace_ev evs[] = {
    EV(SRV_TRACE_KERNEL, 0, 0, 100, 0),   EV(SRV_TRACE_KERNEL, 1, 50, 150, 1),
    EV(SRV_TRACE_MEMSET, 0, 600, 600, 0), EV(SRV_TRACE_MEMCPY, 2, 100, 200, SRV_CUPTI_MEMCPY_HTOD),
    EV(SRV_TRACE_KERNEL, 2, 300, 400, 2), /* a name index with no name: "kernel" */
    EV(SRV_TRACE_KERNEL, 3, 390, 500, 7), /* a name index past the names */
    EV(SRV_TRACE_KERNEL, 4, 120, 130, 0), EV(SRV_TRACE_SYNC, 2, 0, 1000, SRV_CUPTI_SYNC_STREAM),
    EV(SRV_TRACE_KERNEL, 99, 0, 5000, 0), /* no such track */
};

static int summary_case(const char *json)
{
    struct srv_trace_doc d = {.owners = owners,
                              .nowners = 4,
                              .tracks = tracks,
                              .ntracks = 5,
                              .evs = evs,
                              .nevs = sizeof(evs) / sizeof(evs[0]),
                              .names = names,
                              .nnames = 3,
                              .server_pid = 100,
                              .window_ns = 1000 * US,
                              .dropped = 2,
                              .incomplete = 1};
    struct srv_trace_busy per[4];
    struct srv_trace_total all;
    CHECK(srv_trace_summarize(&d, per, &all) == 0);
    CHECK(per[1].busy_ns == 150 * US && per[1].beside_ns == 50 * US && per[1].events == 3);
    CHECK(per[2].busy_ns == 200 * US && per[2].beside_ns == 60 * US && per[2].events == 2);
    CHECK(per[3].busy_ns == 110 * US && per[3].beside_ns == 10 * US && per[3].events == 1);
    CHECK(per[0].busy_ns == 10 * US && per[0].beside_ns == 10 * US && per[0].events == 1);
    CHECK(all.union_ns == 400 * US);
    CHECK(all.multi_ns == 60 * US);
    CHECK(all.sum_ns == 460 * US);

    char text[2048];
    srv_trace_describe(&d, per, &all, text, sizeof(text));
    CHECK(strstr(text, "Window 1.000 ms, 8 records (2 dropped, 1 incomplete)\n") != NULL);
    CHECK(strstr(text, "Client 101 (a): GPU busy 0.150 ms, beside other clients 0.050 ms (33%), "
                       "3 records\n") != NULL);
    CHECK(strstr(text, "Client 102 (b): GPU busy 0.200 ms, beside other clients 0.060 ms (30%)") !=
          NULL);
    CHECK(strstr(text, "Server 100 (its own streams): GPU busy 0.010 ms, beside clients 0.010 ms "
                       "(100%), 1 records\n") != NULL);
    CHECK(strstr(text, "All: GPU busy 0.400 ms, two or more clients at once 0.060 ms, clients' "
                       "busy times add up to 0.460 ms (1.15x)\n") != NULL);
    /* An answer buffer too small is cut, still terminated. */
    char small[16];
    srv_trace_describe(&d, per, &all, small, sizeof(small));
    CHECK(strlen(small) == sizeof(small) - 1);

    if (json) {
        FILE *f = fopen(json, "w");
        CHECK(f != NULL);
        if (f) {
            CHECK(srv_trace_write_json(f, &d, per, &all) == 0);
            fclose(f);
        }
    }
    return 0;
}

/* Intervals that only touch do not run beside each other; nothing at all sums to nothing. */
static void touching_case(void)
{
    static const struct srv_trace_ev touch[] = {
        EV(SRV_TRACE_KERNEL, 0, 0, 10, 0), EV(SRV_TRACE_KERNEL, 2, 10, 20, 0),
        EV(SRV_TRACE_KERNEL, 1, 20, 30, 0), /* A again, touching B's end */
    };
    struct srv_trace_doc d = {.owners = owners,
                              .nowners = 4,
                              .tracks = tracks,
                              .ntracks = 5,
                              .evs = touch,
                              .nevs = 3,
                              .names = names,
                              .nnames = 3};
    struct srv_trace_busy per[4];
    struct srv_trace_total all;
    CHECK(srv_trace_summarize(&d, per, &all) == 0);
    CHECK(per[1].busy_ns == 20 * US && per[1].beside_ns == 0);
    CHECK(per[2].busy_ns == 10 * US && per[2].beside_ns == 0);
    CHECK(all.union_ns == 30 * US && all.multi_ns == 0 && all.sum_ns == 30 * US);

    d.nevs = 0;
    CHECK(srv_trace_summarize(&d, per, &all) == 0);
    CHECK(per[1].busy_ns == 0 && all.union_ns == 0 && all.sum_ns == 0);
}

int main(int argc, char **argv)
{
    summary_case(argc > 1 ? argv[1] : NULL);
    touching_case();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("trace summary and file: all checks passed\n");
    return failures ? 1 : 0;
}
