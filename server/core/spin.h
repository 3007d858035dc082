/* spin.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_SPIN_H
#define MPSSHIM_SERVER_SPIN_H

#include "server/core/server.h"

/* Reads how many CPUs the spinning policy counts (MPSSHIM_SPIN_CPUS, else the affinity),
 * and asks for the server's scheduler slice (MPSSHIM_SERVER_SLICE_US): called by the main
 * thread before any other thread exists. */
void srv_spin_init(void);
/* Logs a spinning setting that was not understood (once the log is open). */
void srv_spin_log_settings(void);
/* How many clients are busy now, and how many CPUs the policy counts. */
void srv_spin_describe(unsigned *nbusy, unsigned *cpus);
/* True while more clients are busy than half the CPUs: workers do not spin. */
int srv_spin_crowded(void);
/* The grade of the policy now: "on", "short" or "off" (spin.c). */
const char *srv_spin_grade(void);
/* How long a worker spins for requests before it sleeps: MPSSHIM_SERVER_SPIN_US, or while
 * crowded MPSSHIM_CROWDED_WORKER_SPIN_US (0 by default). */
uint64_t srv_spin_worker_ns(void);
/* While crowded: how long a worker spins on a synchronisation before sleeping (waits.c). */
uint64_t srv_spin_sync_ns(void);
/* The worker of c replayed records at `now`: c counts as busy for a while. */
void srv_spin_worked(struct srv_client *c, uint64_t now);
/* The worker of c found nothing to do: ends c's busy spell when it is over; returns how
 * long c still counts as busy (UINT64_MAX: it does not), which bounds the worker's sleep. */
uint64_t srv_spin_idle(struct srv_client *c, uint64_t now);
/* c's worker stops: it no longer counts. */
void srv_spin_gone(struct srv_client *c);

#endif
