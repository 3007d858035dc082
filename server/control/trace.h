/* A GPU timeline of the server's clients (server/control/trace.c collects it,
 * server/control/trace_write.c sums it up and writes it): what each client's streams ran on the
 * GPU, from when to when, and how much of each client's GPU time ran beside other clients' work.
 * Plain data, no driver and no server state, so that tests/unit/trace_test.c checks the summary and
 * the file with records of its own. */
#ifndef MPSSHIM_TRACE_H
#define MPSSHIM_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What ran: GPU work (kernels, copies, sets: counted as busy) or a host thread of the
 * server waiting for the GPU (drawn, never counted). */
enum srv_trace_kind { SRV_TRACE_KERNEL, SRV_TRACE_MEMCPY, SRV_TRACE_MEMSET, SRV_TRACE_SYNC };

/* Whose work a track is: a client process, or the server itself (its own streams, and any
 * stream it cannot name). */
struct srv_trace_owner {
    int pid;
    int client;   /* 0: the server */
    char exe[64]; /* escaped already (srv_log_escape): shown as it is */
};

/* One stream's row in the timeline. */
struct srv_trace_track {
    uint32_t owner; /* index in the owners */
    char label[80]; /* "stream 0x..., device 0 (id 7)", "legacy stream, ...", ... */
};

/* One interval, in ns from the trace's start (end >= start). */
struct srv_trace_ev {
    uint64_t start, end;
    uint64_t bytes;       /* copies and sets */
    uint32_t track;       /* index in the tracks */
    uint32_t detail;      /* kernels: index in the names; copies: the copy kind
                           * (SRV_CUPTI_MEMCPY_*); syncs: the type (SRV_CUPTI_SYNC_*) */
    uint32_t correlation; /* CUPTI's correlation id */
    uint32_t stream_id;   /* CUPTI's ids of its stream and context */
    uint32_t context_id;
    int32_t device; /* -1: not known (syncs) */
    uint8_t kind;   /* enum srv_trace_kind */
};

/* A whole trace. */
struct srv_trace_doc {
    const struct srv_trace_owner *owners;
    size_t nowners;
    const struct srv_trace_track *tracks;
    size_t ntracks;
    const struct srv_trace_ev *evs;
    size_t nevs;
    const char *const *names; /* kernel names (from clients' code: any bytes) */
    size_t nnames;
    int server_pid;
    uint64_t window_ns;     /* from the start to the stop */
    uint64_t unix_start_ns; /* the start, as wall-clock time (for the reader) */
    uint64_t dropped;       /* records beyond the bound, or refused by a full buffer */
    uint64_t incomplete;    /* records without timestamps (work still running at the stop) */
};

/* One owner's GPU time: the union of its intervals, and the part of it during which at
 * least one other client's work ran too (for the server: any client's). */
struct srv_trace_busy {
    uint64_t busy_ns;
    uint64_t beside_ns;
    uint64_t events;
};

/* The whole: when any owner's GPU work ran, when work of two or more clients ran at once,
 * and the sum of the owners' busy times (sum / union: how many ran side by side). */
struct srv_trace_total {
    uint64_t union_ns;
    uint64_t multi_ns;
    uint64_t sum_ns;
};

/* Sums up d's GPU work (syncs left out) into per[d->nowners] and *all. 0, or -1 when memory
 * ran out (nothing summed). */
int srv_trace_summarize(const struct srv_trace_doc *d, struct srv_trace_busy *per,
                        struct srv_trace_total *all);
/* Writes d as a Chrome/Perfetto trace (JSON: "traceEvents" of complete events, pid the
 * owner's, tid the track's, microseconds from the start), its summary last in "metadata".
 * 0, or -1 when writing failed. */
int srv_trace_write_json(FILE *f, const struct srv_trace_doc *d, const struct srv_trace_busy *per,
                         const struct srv_trace_total *all);
/* The summary as lines of text (the control command's answer) into out (cap bytes, always
 * terminated). */
void srv_trace_describe(const struct srv_trace_doc *d, const struct srv_trace_busy *per,
                        const struct srv_trace_total *all, char *out, size_t cap);

#endif
