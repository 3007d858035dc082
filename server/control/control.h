/* control.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_CONTROL_H
#define MPSSHIM_SERVER_CONTROL_H

#include "server/core/server.h"

struct srv_answer;
/* control.c: runs one command line; its answer goes to out (emptied first, grown as needed:
 * answer.c). 1 if it failed. */
int srv_control_command(char *line, struct srv_answer *out);
/* controlsock.c: the control socket. */
int srv_control_listen(void);
/* main loop: serves a connection just accepted; never blocks on its peer. */
void srv_control_serve(int fd);
/* Answers a connection that cannot be served with why (as a failed command), without
 * blocking, and closes it. */
void srv_control_turn_away(int fd, const char *why);
/* 1 while any control connection is open (an interactive session holds one until it has
 * been idle for MPSSHIM_CONTROL_IDLE seconds). */
int srv_control_busy(void);

#endif
