/* context.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_CONTEXT_H
#define MPSSHIM_SERVER_CONTEXT_H

#include "server/core/server.h"

/* After client `gone` has left: its account is no longer charged for the limits it raised;
 * the limits themselves stay until no client is left (srv_limits_idle). */
void srv_limits_settle(struct srv_client *gone);
/* With no client left: every limit of each device's context the clients raised, and the
 * stack size the driver grew it to for their kernels, go back to where they started. */
void srv_limits_idle(void);

/* Context limits as the server started (main.c; the floor when clients leave): the real
 * limit is the largest of this and what live clients set. */
extern size_t srv_limit_default[CHAN_MAX_DEVICES][CU_LIMIT_MAX];

#endif
