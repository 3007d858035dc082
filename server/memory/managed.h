/* managed.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_MANAGED_H
#define MPSSHIM_SERVER_MANAGED_H

#include "server/core/server.h"

/* managed.c: cuMemAllocManaged's flags are valid; cuMemFree of a managed range. */
int srv_managed_flags_ok(unsigned flags);
CUresult srv_managed_free(struct srv_client *c, struct srv_obj *o);
/* 1 if o is a global range the driver says is managed memory (a __managed__ variable). */
int srv_managed_var(const struct srv_obj *o);

/* managed.c: the work just queued on m's real stream st (the stream of transfers of the
 * client's current context, srv_stream_mvar) comes before every later work of the client,
 * on any of its streams: its mark recorded, the client's count of such transfers bumped
 * (srv_stream_prepare makes each stream wait once). r is the queueing's result so far;
 * returns the final one. */
CUresult srv_mvar_ordered(struct srv_client *c, struct srv_stream *m, CUstream st, CUresult r);

/* migrate.c: 1 if o is migrating managed memory (device memory with a host view). */
int srv_migrating(const struct srv_obj *o);
/* migrate.c: MPUSH or MPULL (channel/proto.h) on m, the transfers' stream; replies itself
 * (lane < 0: an async push, whose error is deferred). */
struct chan_mvar;
struct chan_mvar_ent;
void srv_migrate_move(struct srv_client *c, struct srv_stream *m, const struct chan_mvar *h,
                      const struct chan_mvar_ent *e, int lane);
/* migrate.c: the end of a migrating allocation, however it goes. */
void srv_migrate_release(struct srv_client *c, struct srv_obj *o);

#endif
