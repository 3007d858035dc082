/* segment.c: a client's shared segment registered with the driver. */
#ifndef MPSSHIM_SERVER_SEGMENT_H
#define MPSSHIM_SERVER_SEGMENT_H

#include "server/core/server.h"

/* Registers the client's segment with the driver through dev's shared context, once, if
 * that context is made and alive. */
void srv_segment_register(struct srv_client *c, int dev);

#endif
