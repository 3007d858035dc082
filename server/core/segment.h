/* segment.c: a client's shared segment registered with the driver. */
#ifndef MPSSHIM_SERVER_SEGMENT_H
#define MPSSHIM_SERVER_SEGMENT_H

#include "server/core/server.h"

/* Registers the client's segment with the driver through dev's shared context, once, if
 * that context is made and alive; while the quiet context is being made, later (c->shm_want). */
void srv_segment_register(struct srv_client *c, int dev);
/* The registration left for later, tried with the context of the client's current call once
 * the quiet context is made; before, that context's making started if c->quiet_why says a call
 * needed it. */
void srv_segment_later(struct srv_client *c);
/* Before each record (worker.c): the registration left for later, once the quiet context is
 * made; while it is not, its making started where a call of the client's would have used the
 * segment (c->quiet_why: copy.c and waits.c set it, and go on without). One branch while
 * nothing is left. */
static inline void srv_segment_retry(struct srv_client *c)
{
    if (c->shm_want && !c->shm_registered) srv_segment_later(c);
}
/* For a call that cannot go without the segment device-mapped (host functions and host
 * nodes): the registration left for later made now, waiting for the quiet context. */
void srv_segment_need(struct srv_client *c);

#endif
