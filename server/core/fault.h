/* fault.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_FAULT_H
#define MPSSHIM_SERVER_FAULT_H

#include "server/core/server.h"

/* fault.c: sticky errors in a device's shared context. */
/* Starts the thread that polls each device for a sticky error and raises one. */
int srv_fault_start(void);
/* Ends that thread (the server is quitting). */
void srv_fault_stop(void);
/* A driver call on device dev (-1: unknown) returned r: when r is a sticky error, the
 * fault thread checks the device at once. Cheap when r is not. */
void srv_fault_note(int dev, CUresult r);
/* The worker acts on faults it has not seen yet: lets go of what died and tells its
 * waits. Called before each record and when idle. */
void srv_fault_sync(struct srv_client *c);
/* 0 when the calling worker may go on with work on dev; else the fault to answer with
 * (dev faulted in this server: it is lost here). */
CUresult srv_fault_gate(struct srv_client *c, int dev);
/* 1 if o lives in a context that died since the worker last synced: it must be forgotten,
 * never destroyed (the driver's handles died with the context). */
int srv_fault_dead(const struct srv_client *c, int dev);
/* 1 once any device faulted in this server (get_server_status says FAULT). */
int srv_fault_any(void);
/* Marks the client's work on dev at now (chan_now_ns; srv_stream_prepare): who had work
 * when a fault came. */
static inline void srv_fault_mark_work(struct srv_client *c, int dev, uint64_t now)
{
    if (dev >= 0 && dev < CHAN_MAX_DEVICES)
        atomic_store_explicit(&c->stats.enqueued_ns[dev], now, memory_order_relaxed);
}

/* A device's fault state (fault.c). A sticky error kills the shared context: its clients
 * are told and let go of what lived in it, and a new server serves new clients. */
enum { SRV_DEV_OK, SRV_DEV_FAULT };
extern struct srv_devfault srv_fault[CHAN_MAX_DEVICES];
extern _Atomic uint32_t srv_fault_epoch; /* changes whenever a device faults */

#endif
