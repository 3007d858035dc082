/* devctx.c: the server's shared contexts, one per device, made at start or at first use. */
#ifndef MPSSHIM_SERVER_DEVCTX_H
#define MPSSHIM_SERVER_DEVCTX_H

#include "server/core/server.h"

#include <stddef.h>

/* Every device's shared context made now, the devices' at once, unless first_use: then each
 * is made by the first request that needs its device (srv_use_device, srv_push_device), and
 * clients_move says whether this server tells its clients to move (first_use only). The
 * per-device state kept beside a context (its limits as made, a stream for releasing
 * departed clients' waits, the priority range) is taken as each is made. 0, or -1 with why
 * (the contexts made before the failure released). */
int srv_devctx_start(int first_use, int clients_move, char *why, size_t len);
/* 1 when the devices' contexts are made at first use. */
int srv_devctx_first_use(void);
/* 1 when clients are told to move to their GPUs' own servers at their first context
 * (clients_move above; the welcome's CHAN_WELCOME_MOVES). */
int srv_devctx_clients_move(void);
/* 1 when dev's shared context is made (srv.ctx[dev] may be read). */
int srv_device_made(int dev);
/* dev's shared context made if it is not yet: CUDA_SUCCESS, or what its making returned
 * (logged once; a later call tries again). */
CUresult srv_device_make(int dev);
/* What the calling worker serves (worker.c sets them before each record), for the log line
 * of a context made at first use: which call of which client process made it. */
void srv_devctx_serving(int pid, uint32_t op);
/* Releases every shared context made (the server's exit). */
void srv_devctx_release_all(void);

#endif
