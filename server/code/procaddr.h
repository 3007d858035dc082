/* procaddr.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_PROCADDR_H
#define MPSSHIM_SERVER_PROCADDR_H

#include "server/core/server.h"

/* Asks the loaded driver's cuGetProcAddress_v2 for every name the shim knows and keeps the
 * answers as the table CHAN_OP_PROCADDR hands to clients. Once, before serving; 0, or -1
 * (logged) when clients must answer from the shim's compiled-in table. */
int srv_procaddr_build(void *drv);

#endif
