/* quietctx.c: the context of the server's own in which all host memory is registered and
 * unregistered, so that an unregistration waits for and holds up no client's work. */
#ifndef MPSSHIM_SERVER_QUIETCTX_H
#define MPSSHIM_SERVER_QUIETCTX_H

#include "server/core/server.h"

/* cuMemHostRegister of [p, p + n) with flags (and PORTABLE: every context's), in the quiet
 * context (made now if need be); where there is none (off, or its making failed), in the
 * context current on the calling thread. The driver's answer. */
CUresult srv_host_register(void *p, size_t n, unsigned flags);
/* srv_host_register where the quiet context is made, or none is to be; while it is being
 * made (or is yet to be: its making is then started), CUDA_ERROR_NOT_READY at once, for a
 * registration that can come later (a client's segment: segment.c). */
CUresult srv_host_register_soon(void *p, size_t n, unsigned flags);
/* cuMemHostUnregister of p, registered by srv_host_register. The caller has seen to it that
 * no work of the client that held it still touches the range (its streams drained): in the
 * quiet context the driver waits for nothing. Without one, in the current context, gated
 * (codegate.c), waiting there as before. */
CUresult srv_host_unregister(struct srv_client *c, void *p);
/* The device whose shared context a registration made now is in, for a staging block
 * (hostblocks.c): current where there is no quiet context, else -1 (it is in the quiet
 * context, no shared one). */
int srv_host_reg_device(int current);
/* Starts making the quiet context in a thread of its own, where it is to be made at all (the
 * server's start, once the shared contexts made there are: main.c; or the first segment's
 * registration: srv_host_register_soon). Once per image. */
void srv_quiet_start(void);
/* The server's exit. */
void srv_quiet_release(void);

#endif
