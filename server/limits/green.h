/* green.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_GREEN_H
#define MPSSHIM_SERVER_GREEN_H

#include "server/core/server.h"

/* green.c: SM shares. */
void srv_green_init(void);
/* Gives the client a green partition on each device where its share is below the whole;
 * 0, or -1 (logged) if partitions cannot be made. */
int srv_green_assign(struct srv_client *c);
/* The same for device dev, whose shared context was made after the client came (devctx.c:
 * at first use), at the client's first context there; nothing if it was given.
 * CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY (logged) if its partition cannot be made. */
CUresult srv_green_assign_device(struct srv_client *c, int dev);
/* Gives the client's partitions back (after its streams are gone). */
void srv_green_release(struct srv_client *c);
CUgreenCtx srv_green_ctx(struct srv_client *c, int dev); /* green.c */

#endif
