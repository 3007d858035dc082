/* File descriptors over the UNIX socket (SCM_RIGHTS): the server sends the client its
 * shared segment with the welcome and each pinned allocation's memfd; the client receives
 * them. One helper each way for both. */
#ifndef MPSSHIM_FDPASS_H
#define MPSSHIM_FDPASS_H

#include <stddef.h>

/* Sends the len bytes of buf and, when fd >= 0, the descriptor with them. 0, or -1. */
int chan_send_fd(int sock, const void *buf, size_t len, int fd);

/* Receives exactly len bytes and the descriptor that came with them (*fd -1 if none;
 * close-on-exec). 0, or -1 when the peer hung up or failed first. */
int chan_recv_fd(int sock, void *buf, size_t len, int *fd);

#endif
