/* segment.c: a client's shared segment registered with the driver. */
#ifndef MPSSHIM_SERVER_SEGMENT_H
#define MPSSHIM_SERVER_SEGMENT_H

#include "server/core/server.h"
#include "server/memory/quietctx.h"

/* Registers the client's segment with the driver through dev's shared context, once, if
 * that context is made and alive; while the quiet context is being made, later (c->shm_want). */
void srv_segment_register(struct srv_client *c, int dev);
/* The registration left for later, tried with the context of the client's current call. */
void srv_segment_later(struct srv_client *c);
/* Before each record (worker.c): the registration left for later, once the quiet context is
 * made. One branch while nothing is left; a call and a load while it is not made. */
static inline void srv_segment_retry(struct srv_client *c)
{
    if (c->shm_want && !c->shm_registered && srv_quiet_settled()) srv_segment_later(c);
}
/* Where the client's segment waits for the quiet context and the client's call would use it
 * (a copy through its staging slots, a wait the GPU would answer), the context's making started
 * (quietctx.c); the call goes on without it. */
static inline void srv_segment_wanted(struct srv_client *c, const char *why)
{
    if (c->shm_want && !c->shm_registered) srv_quiet_start(c, why);
}
/* For a call that cannot go without the segment device-mapped (host functions and host
 * nodes): the registration left for later made now, waiting for the quiet context. */
void srv_segment_need(struct srv_client *c);

#endif
