/* memory.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_MEMORY_H
#define MPSSHIM_SERVER_MEMORY_H

#include "server/core/server.h"

/* memory.c: 1 if `bytes` more on device dev stay within the client's limit; else 0, and
 * the refusal is logged (once until an allocation there succeeds again). */
int srv_mem_fits(struct srv_client *c, int dev, uint64_t bytes);

/* memory.c: a sealed memfd of `size` bytes (a multiple of SRV_WINDOW_ALIGN) mapped in the
 * window, not at `avoid`, and registered with the driver: the fd, with *addr; -1 (nothing
 * held) when any step fails. Given back by unregistering and srv_window_give. */
int srv_host_share(uint64_t size, uint64_t avoid, uint64_t *addr);
/* migrate.c: cuMemAllocManaged's memory in device memory with a host view (CHAN_HOST_MIGRATE):
 * the request checked, made, and replied to as srv_op_host_alloc replies. */
struct chan_host_alloc;
void srv_migrate_alloc(struct srv_client *c, const struct chan_rec *r,
                       const struct chan_host_alloc *m);

#endif
