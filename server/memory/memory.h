/* memory.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_MEMORY_H
#define MPSSHIM_SERVER_MEMORY_H

#include "server/core/server.h"

/* memory.c: 1 if `bytes` more on device dev stay within the client's limit; else 0, and
 * the refusal is logged (once until an allocation there succeeds again). */
int srv_mem_fits(struct srv_client *c, int dev, uint64_t bytes);

#endif
