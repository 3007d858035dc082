/* managed.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_MANAGED_H
#define MPSSHIM_SERVER_MANAGED_H

#include "server/core/server.h"

/* managed.c: cuMemFree of a managed range. */
CUresult srv_managed_free(struct srv_client *c, struct srv_obj *o);
/* 1 if o is a global range the driver says is managed memory (a __managed__ variable). */
int srv_managed_var(const struct srv_obj *o);

#endif
