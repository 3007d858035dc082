/* Whose work a trace's record is (server/control/trace_owners.c), as server/control/trace.c asks
 * it: the owners and tracks of the running trace, and the stream each record ran on. */
#ifndef MPSSHIM_TRACE_OWNERS_H
#define MPSSHIM_TRACE_OWNERS_H

#include "server/control/trace.h"

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

#endif
