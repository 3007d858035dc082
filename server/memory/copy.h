/* copy.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_COPY_H
#define MPSSHIM_SERVER_COPY_H

#include "server/core/server.h"

void srv_copy_forget_device(struct srv_client *c, int dev); /* copy.c */

/* The staging chunk number c's next staged copy must start at (channel/copyplan.h). */
uint32_t srv_copy_chunk_seq(const struct srv_client *c);

#endif
