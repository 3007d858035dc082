/* pools.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_POOLS_H
#define MPSSHIM_SERVER_POOLS_H

#include "server/core/server.h"

/* spares.c: every pool the server makes or lets go goes through these, one at a time. A
 * pool let go becomes a spare, destroyed in the driver only once nothing in it is in use;
 * a plain one (pinned on its device, nothing else set: srv_pool_props_plain) is made new
 * for the next such create. */
CUresult srv_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult srv_pool_retire(CUmemoryPool pool, int dev, int plain, CUevent after);
int srv_pool_props_plain(const CUmemPoolProps *p);
void srv_pools_report(void); /* the log's line on pools made, made new, kept, destroyed */
void srv_pools_tidy(void);   /* spares trimmed; those a trim cannot empty and nothing uses go */
/* pools.c: cuMemFree of memory from one of the client's pools (its record o): its pool is
 * no spare. */
CUresult srv_pool_mem_free(struct srv_client *c, struct srv_obj *o);

#endif
