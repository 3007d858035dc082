/* quietctx.c: the context of the server's own in which all host memory is registered and
 * unregistered, so that an unregistration waits for and holds up no client's work. */
#ifndef MPSSHIM_SERVER_QUIETCTX_H
#define MPSSHIM_SERVER_QUIETCTX_H

#include "server/core/server.h"

/* cuMemHostRegister of [p, p + n) with flags (and PORTABLE: every context's), in the quiet
 * context (made now if need be); where there is none (off, or its making failed), in the
 * context current on the calling thread. The driver's answer. */
CUresult srv_host_register(void *p, size_t n, unsigned flags);
/* srv_host_register where the quiet context is made, or none is to be; else (it is yet to be
 * made, or being made) CUDA_ERROR_NOT_READY at once, for a registration that can come later
 * (a client's segment: segment.c). Never starts its making. */
CUresult srv_host_register_soon(void *p, size_t n, unsigned flags);
/* Where srv_host_register_block registered a range: in the quiet context; in the caller's
 * context, this image having none; in the caller's context, the quiet one being made (to be
 * kept registered until the image ends: an unregistration there would wait for every client's
 * work). */
enum { SRV_HOSTREG_QUIET, SRV_HOSTREG_HERE, SRV_HOSTREG_EARLY };
/* For a staging block of client c (hostblocks.c), which must not wait: srv_host_register where
 * the quiet context is made or none is to be; else registered in the caller's context
 * (PORTABLE), and the quiet context's making started. *where says which. */
CUresult srv_host_register_block(const struct srv_client *c, void *p, size_t n, unsigned flags,
                                 int *where);
/* cuMemHostUnregister of p, registered by srv_host_register. The caller has seen to it that
 * no work of the client that held it still touches the range (its streams drained): in the
 * quiet context the driver waits for nothing. Without one, in the current context, gated
 * (codegate.c), waiting there as before. */
CUresult srv_host_unregister(struct srv_client *c, void *p);
/* Starts making the quiet context in a thread of its own, where it is to be made at all and is
 * not made or being made: the first time a client needs it (c, why: logged). Once per image;
 * cheap when already asked (a load). */
void srv_quiet_start(const struct srv_client *c, const char *why);
/* 1 where the quiet context is made, or none will be in this image (off, or its making failed);
 * 0 while it is yet to be made or being made. */
int srv_quiet_settled(void);
/* The server's exit. */
void srv_quiet_release(void);

#endif
