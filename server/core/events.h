/* events.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_EVENTS_H
#define MPSSHIM_SERVER_EVENTS_H

#include "server/core/server.h"

/* Internal events (ordering marks and sync points), recycled per client (events.c). */
CUresult srv_event_take(struct srv_client *c, int dev, CUevent *ev);
void srv_event_give(struct srv_client *c, int dev, CUevent ev);

#endif
