/* coalesce.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_COALESCE_H
#define MPSSHIM_SERVER_COALESCE_H

#include "server/core/server.h"

/* Doorbell coalescing while crowded (coalesce.c): MPSSHIM_COALESCE_US read at start; the
 * bound written into c's segment when it changed (c's worker); the sweeper thread, started
 * when the bound is not 0. */
void srv_coalesce_init(void);
void srv_coalesce_publish(struct srv_client *c, int crowded);
void srv_coalesce_start(void);
/* The bound in c's segment now, in µs (0: c's doorbells all rung; c's worker only). */
uint32_t srv_coalesce_now_us(const struct srv_client *c);

#endif
