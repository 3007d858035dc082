/* context.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_CONTEXT_H
#define MPSSHIM_SERVER_CONTEXT_H

#include "server/core/server.h"

/* After client `gone` has left: lowers each limit it raised back to what the others need. */
void srv_limits_settle(struct srv_client *gone);
/* With no client left: the stack size the driver grew each device's context to for the
 * clients' kernels goes back to where it started (context.c). */
void srv_limits_idle(void);

#endif
