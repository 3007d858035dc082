/* settings.c: main reads the environment into srv (server.h is the core). */
#ifndef MPSSHIM_SERVER_SETTINGS_H
#define MPSSHIM_SERVER_SETTINGS_H

#include "server/core/server.h"

/* The pipe and log directories, the driver's path and the workers' idle spin. */
void srv_settings_paths(void);
/* How the server uses the driver: synchronisation, context scheduling, green contexts and
 * where cuMemAlloc's memory comes from; *pool_asked: MPSSHIM_DEVICE_POOL=1, *ctx_sched_bad:
 * MPSSHIM_CTX_SCHED's value when it named no scheduling (left as it is otherwise). */
void srv_settings_driver(int *pool_asked, const char **ctx_sched_bad);
/* What clients may hold and how long a departed one's work is waited for. */
void srv_settings_limits(void);
/* Before cuInit: the environment the driver will see (no MPS client settings unless
 * MPSSHIM_ON_MPS, 32 hardware work queues). */
void srv_settings_driver_env(void);
/* A setting in whole seconds, 0 to max, from variable name, in nanoseconds: dflt when unset
 * or empty; anything else is logged and dflt used. For the parts that read their own setting
 * when they start (fault.c, recycle.c, controlsock.c). */
uint64_t srv_settings_seconds_ns(const char *name, unsigned dflt, unsigned long long max);

#endif
