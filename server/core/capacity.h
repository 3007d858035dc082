/* capacity.c: how many clients the server takes at once, worked out at start. */
#ifndef MPSSHIM_SERVER_CORE_CAPACITY_H
#define MPSSHIM_SERVER_CORE_CAPACITY_H

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
/* Why a connection is refused for want of descriptors (err EMFILE: the server's, ENFILE:
 * the machine's): "the server has no descriptors left (RLIMIT_NOFILE N)". */
void srv_capacity_no_fds(char *out, size_t len, int err);
/* The soft RLIMIT_NOFILE now (0 when unknown). */
unsigned long long srv_capacity_nofile(void);
/* get_server_status's line: "Client limit N (sustains M, bounded by ...)". */
void srv_capacity_describe(char *out, size_t len);

#endif
