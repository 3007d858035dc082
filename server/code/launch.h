/* launch.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_LAUNCH_H
#define MPSSHIM_SERVER_LAUNCH_H

#include "server/core/server.h"

/* Loads CUkernel k's code in device dev's context through the gate, once (launch.c);
 * CUDA_SUCCESS unless c left while it waited (a failed load is the caller's call's to see). */
CUresult srv_kernel_loaded(struct srv_client *c, struct srv_obj *k, int dev);

#endif
