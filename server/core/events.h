/* events.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_EVENTS_H
#define MPSSHIM_SERVER_EVENTS_H

#include "server/core/server.h"

/* Internal events (ordering marks and sync points), recycled per client (events.c). */
CUresult srv_event_take(struct srv_client *c, int dev, CUevent *ev);
void srv_event_give(struct srv_client *c, int dev, CUevent ev);
/* Its context on dev died in a fault: the free events made there are only forgotten. */
void srv_events_forget_device(struct srv_client *c, int dev);
/* c's CU_EVENT_BLOCKING_SYNC event on dev, made on first use; NULL if it cannot be made. */
CUevent srv_event_blocking(struct srv_client *c, int dev);

#endif
