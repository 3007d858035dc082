/* context.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_CONTEXT_H
#define MPSSHIM_SERVER_CONTEXT_H

#include "server/core/server.h"

/* After client `gone` has left: lowers each limit it raised back to what the others need. */
void srv_limits_settle(struct srv_client *gone);
/* With no client left: the stack size the driver grew each device's context to for the
 * clients' kernels goes back to where it started (context.c). */
void srv_limits_idle(void);

/* Context limits as the server started (main.c; the floor when clients leave): the real
 * limit is the largest of this and what live clients set. */
extern size_t srv_limit_default[CHAN_MAX_DEVICES][CU_LIMIT_MAX];

#endif
