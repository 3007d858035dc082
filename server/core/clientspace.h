/* clientspace.c: the clients' address space kept free in the server. */
#ifndef MPSSHIM_SERVER_CLIENTSPACE_H
#define MPSSHIM_SERVER_CLIENTSPACE_H

#include <stdint.h>
#include <sys/types.h>

/* At start, before the driver is loaded and any thread made: the reservation, where
 * MPSSHIM_KEEP_CLIENT_SPACE asks for it. Said in the log by srv_clientspace_log. */
void srv_clientspace_init(void);
void srv_clientspace_log(void);
/* Maps fd's pages (shared, from `off`) at a client's address [addr, addr + len), which does
 * not wrap: 0, or an errno (EEXIST: something of the server's, or another client's
 * registration, is there). Given back with srv_clientspace_unmap. */
int srv_clientspace_map(uint64_t addr, uint64_t len, int prot, int fd, off_t off);
void srv_clientspace_unmap(uint64_t addr, uint64_t len);

#endif
