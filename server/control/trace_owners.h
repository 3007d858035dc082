/* Whose work a trace's record is (server/control/trace_owners.c), as server/control/trace.c asks
 * it: the owners and tracks of the running trace, and the stream each record ran on. */
#ifndef MPSSHIM_TRACE_OWNERS_H
#define MPSSHIM_TRACE_OWNERS_H

#include "server/control/trace.h"
#include "server/core/server.h"
#include "server/core/streamrec.h"

#include <stddef.h>
#include <stdint.h>

/* Grows *v (of *cap elements of size sz) to hold n+1 (first elements at first); 0, or -1
 * without memory. */
int srv_trace_grow(void **v, size_t *cap, size_t n, size_t sz, size_t first);
/* Before a trace: owner 0, the server. 0, or -1 without memory. */
int srv_trace_owners_init(void);
/* The trace gen runs from now (0: none runs): workers name their streams for it. */
void srv_trace_owners_open(uint32_t gen);
/* Workers asking CUPTI for a stream's ids right now (a detach waits for none). */
unsigned srv_trace_owners_asking(void);
/* After the stop (no worker names a stream, CUPTI adds no record): each record's track, a
 * client's stream or one of the server's (made here); UINT32_MAX when memory ran out. */
void srv_trace_owners_assign(struct srv_trace_ev *evs, size_t nevs);
/* The owners and tracks into d, valid until srv_trace_owners_free. */
void srv_trace_owners_doc(struct srv_trace_doc *d);
/* Frees the owners, tracks and named streams (no trace running). */
void srv_trace_owners_free(void);

/* trace.c: GPU timelines (`trace start|stop|status`). srv_trace_gen is the running trace's
 * number, 0 when none runs. */
extern _Atomic uint32_t srv_trace_gen;
/* Runs a `trace` command (its words after "trace"); the answer in out (cap bytes,
 * terminated). 1 when it failed. */
int srv_trace_control(int argc, char **argv, char *out, size_t cap);
/* 1 while a trace runs (the server does not start afresh under it). */
int srv_trace_active(void);
/* trace_owners.c: c's worker names stream s for the running trace (the stream's first work
 * in it). */
void srv_trace_stream(struct srv_client *c, struct srv_stream *s);
/* Before work goes on s: one relaxed load when no trace runs, or s was named already. */
static inline void srv_trace_note(struct srv_client *c, struct srv_stream *s)
{
    if (atomic_load_explicit(&srv_trace_gen, memory_order_relaxed) != s->trace_gen)
        srv_trace_stream(c, s);
}

#endif
