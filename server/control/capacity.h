/* capacity.c: how many clients the server takes at once, worked out at start. */
#ifndef MPSSHIM_SERVER_CAPACITY_H
#define MPSSHIM_SERVER_CAPACITY_H

#include <stddef.h>

/* Before any thread starts: raises the soft RLIMIT_NOFILE to the hard one and sets
 * srv.max_clients: MPSSHIM_MAX_CLIENTS where set, else the least of what descriptors,
 * memory, the address window and RLIMIT_NPROC sustain. */
void srv_capacity_init(void);
/* server.log is open: one line, the limit and what bounds it (or that a set one is above). */
void srv_capacity_log(void);
/* For a refused client's message after "MPSSHIM_MAX_CLIENTS=N": how N came, when it was
 * worked out (", worked out at start from this machine; set it to serve more"), else "". */
const char *srv_capacity_note(void);
/* accept4 of a connection waiting on lfd (CLOEXEC): a client's, or with control a
 * control connection's. Out of descriptors (EMFILE, ENFILE), the connection waiting would
 * keep poll answering and the main loop spinning: it is taken with a spare descriptor kept
 * for that and refused, a client as one past the limit is, its message naming
 * descriptors, a control connection with that message as a failed command's answer (said
 * in the log once per run of them). -1 when none was accepted. */
int srv_capacity_accept(int lfd, int control);
/* Why a connection is refused for want of descriptors (err EMFILE: the server's, ENFILE:
 * the machine's): "the server has no descriptors left (RLIMIT_NOFILE N)". */
void srv_capacity_no_fds(char *out, size_t len, int err);
/* get_server_status's line: "Client limit N (sustains M, bounded by ...)". */
void srv_capacity_describe(char *out, size_t len);

#endif
