/* coalesce.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_COALESCE_H
#define MPSSHIM_SERVER_COALESCE_H

#include "server/core/server.h"

/* Doorbell coalescing while crowded (coalesce.c): MPSSHIM_COALESCE_US read at start; the
 * bound a client's segment gets; the sweeper thread, started when the bound is not 0. */
void srv_coalesce_init(void);
uint32_t srv_coalesce_hint(int crowded);
void srv_coalesce_start(void);

#endif
