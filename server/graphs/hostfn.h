/* hostfn.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_HOSTFN_H
#define MPSSHIM_SERVER_HOSTFN_H

#include "server/core/server.h"

/* hostfn.c: lets every stream and graph waiting on a departed client's host functions and
 * host nodes go on. Stores into its segment only: also called, again and again, by the
 * main loop for a client it finds gone (srv_clients_watch), under clients_lock. */
void srv_hostfn_release(struct srv_client *c);
/* hostfn.c: publishes one notification (a host function's number, or CHAN_CB_NODE and a
 * host node's slot) in the client's ring, in the order taken, and wakes its callback
 * thread. Runs on the driver's callback thread: never waits on the client. */
void srv_hostfn_post(struct srv_client *c, uint64_t what);
/* hostnode.c: 1 when graph exec record x has host nodes (a launch of it waits on the
 * client). */
int srv_hostfn_exec_waits(const struct srv_obj *x);

#endif
