/* migrate.c: what the files that use the family need of it (server.h is the core). Whether a
 * range is migrating memory is the core's (registry.h, srv_migrating). */
#ifndef MPSSHIM_SERVER_MIGRATE_H
#define MPSSHIM_SERVER_MIGRATE_H

#include "server/core/server.h"

/* cuMemAllocManaged's memory in device memory with a host view (CHAN_HOST_MIGRATE): the
 * request checked, made, and replied to (srv_op_host_alloc passes it on). */
struct chan_host_alloc;
void srv_migrate_alloc(struct srv_client *c, const struct chan_rec *r,
                       const struct chan_host_alloc *m);
/* MPUSH or MPULL (channel/proto.h) on t, the transfers' stream, for record r; replies
 * itself (lane < 0: an async push or pull, whose error is deferred). */
struct chan_mvar;
struct chan_mvar_ent;
void srv_migrate_move(struct srv_client *c, struct srv_stream *t, const struct chan_rec *r,
                      const struct chan_mvar *h, const struct chan_mvar_ent *e, int lane);
/* The end of a migrating allocation, however it goes. */
void srv_migrate_release(struct srv_client *c, struct srv_obj *o);

#endif
