/* copy.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_COPY_H
#define MPSSHIM_SERVER_COPY_H

#include "server/core/server.h"

void srv_copy_forget_device(struct srv_client *c, int dev); /* copy.c */

#endif
