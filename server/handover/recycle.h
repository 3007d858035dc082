/* recycle.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_RECYCLE_H
#define MPSSHIM_SERVER_RECYCLE_H

#include "server/core/server.h"

/* recycle.c: a server idle after serving clients starts afresh in the same process. */
/* main: what the fresh image needs (as srv_handover_init) and whether this server runs in
 * the foreground; reads MPSSHIM_RECYCLE_IDLE. */
void srv_recycle_init(char **argv, int listen_fd, int control_fd, int lock_fd, int foreground);
/* Main loop: a client connection was accepted. */
void srv_recycle_served(void);
/* Main loop: starts afresh (execve, no return) once idle long enough after serving, and
 * while no control connection is open (control_open: srv_control_busy, which the main loop
 * asks, as it owns the control socket: recycle.c then needs nothing of controlsock.c). */
void srv_recycle_poll(int control_open);
/* Signal handler (async-signal-safe): a stop asked for while the image is being replaced is
 * passed on to the new one. */
void srv_recycle_forward(int sig);
/* main, once its handlers are set: unblocks the stop signals a fresh image inherits blocked
 * (any that came during the replacement are delivered now). */
void srv_recycle_unblock(void);
/* In main: 1 with the sockets, lock and foreground flag of the image this one replaced, 0
 * when this image is not a fresh start, -1 (why says) when its description is malformed. */
int srv_recycle_adopt(int *listen_fd, int *control_fd, int *lock_fd, int *foreground, char *why,
                      size_t len);
/* Fresh image, once serving: logs how long the start took and the devices' memory. */
void srv_recycle_adopted(void);
/* get_server_status: its line about starting afresh. */
void srv_recycle_describe(char *out, size_t len);

#endif
