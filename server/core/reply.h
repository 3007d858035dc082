/* Replies on a client's lanes (reply.c): answering a request, and the error an asynchronous
 * operation leaves for the next synchronisation. */
#ifndef MPSSHIM_SERVER_REPLY_H
#define MPSSHIM_SERVER_REPLY_H

#include "server/core/server.h"

/* Answers a request on its lane; `len` bytes already in the lane's data (reply.c, as the
 * three below). */
void srv_reply(struct srv_client *c, int lane, CUresult r, uint32_t len);
/* The lane's data area, where replies are written in place. */
uint8_t *srv_lane_data(struct srv_client *c, int lane);
/* Records the first error of an asynchronous operation, reported at the next sync. */
void srv_defer(struct srv_client *c, CUresult r, const char *what);
/* Takes the deferred error (CUDA_SUCCESS if none). */
CUresult srv_take_deferred(struct srv_client *c);

#endif
