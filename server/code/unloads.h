/* unloads.c: a client's libraries whose code ran in a shared context, unloaded when that holds
 * up no other client. */
#ifndef MPSSHIM_SERVER_UNLOADS_H
#define MPSSHIM_SERVER_UNLOADS_H

#include "server/core/server.h"

/* o, the client's CUlibrary or CUkernel record (else nothing): its library's code may be
 * loaded in a context now (a kernel's first launch or lookup, an eager load, a call that
 * loads code). */
void srv_library_hot(struct srv_obj *o);
/* Unloads client c's library (record o), now or later: its answer. */
CUresult srv_library_unload(struct srv_client *c, struct srv_obj *o);
/* The main loop's tick with no client left: the libraries kept are unloaded. */
void srv_unloads_idle(void);

#endif
