/* quietctx.c: the context of the server's own where departed clients' host memory is
 * unregistered, waiting for and holding up no other client's work. */
#ifndef MPSSHIM_SERVER_QUIETCTX_H
#define MPSSHIM_SERVER_QUIETCTX_H

#include "server/core/server.h"

/* Unregisters p, a portable registration no work can touch any more, in the quiet context
 * (made now if need be): 1, with the driver's answer in *res; 0 where there is none (off, or
 * its making failed): the caller unregisters as before. */
int srv_quiet_unregister(void *p, CUresult *res);
/* The main loop's tick with no client left: the quiet context goes. */
void srv_quiet_idle(void);
/* The server's exit. */
void srv_quiet_release(void);

#endif
