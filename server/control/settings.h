/* settings.c: main reads the environment into srv (server.h is the core). */
#ifndef MPSSHIM_SERVER_SETTINGS_H
#define MPSSHIM_SERVER_SETTINGS_H

#include "server/core/server.h"
#include "channel/settings.h"

#include <stdio.h>

/* The pipe and log directories, the driver's path and the workers' idle spin; first: bad
 * values are said from here on (on stderr until server.log is open). */
void srv_settings_paths(void);
/* How the server uses the driver: synchronisation, context scheduling, green contexts and
 * where cuMemAlloc's memory comes from; *pool_asked: MPSSHIM_DEVICE_POOL=1. */
void srv_settings_driver(int *pool_asked);
/* What clients may hold and how long a departed one's work is waited for. */
void srv_settings_limits(void);
/* Before cuInit: the environment the driver will see (no MPS client settings unless
 * MPSSHIM_ON_MPS, 32 hardware work queues). */
void srv_settings_driver_env(void);
/* server.log is open: the bad values said before go into it too, and later ones to it. */
void srv_settings_log_open(void);
/* A setting in seconds (channel/settings.def), in nanoseconds. For the parts that read
 * their own setting when they start (fault.c, recycle.c, controlsock.c). */
uint64_t srv_settings_seconds_ns(enum chan_setting_id id);
/* get_server_status's lines: each server setting in force and where it came from. */
void srv_settings_describe(char *out, size_t len);

/* mpsshim-server --settings: the table, one setting a line, tab-separated (name, MPS's name
 * or -, side, kind, what it accepts, default, on a bad value, what it does); 1 when a
 * default is not a value its setting takes (said on stderr), else 0. */
int srv_settings_print(FILE *f);

#endif
