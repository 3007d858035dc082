/* shmguard.c: the server's guard against shared files a client registered being truncated
 * under it. */
#ifndef MPSSHIM_SERVER_SHMGUARD_H
#define MPSSHIM_SERVER_SHMGUARD_H

#include <stdint.h>

/* Shared-file registrations the server guards at once (a registration past them is refused). */
#define SRV_SHMGUARDS 1024
/* Of them, one client's at most: no client can take every guard from the others. */
#define SRV_SHMGUARDS_PER_CLIENT 64

/* Guards the server's mapping [addr, addr + bytes) of a client's shared file: a SIGBUS there
 * replaces it with anonymous pages. The guard's slot, or -1 when none is free (or the handler
 * could not be installed): the registration is then refused. */
int srv_shmguard_add(uint64_t addr, uint64_t bytes);
/* Ends the guard (before the mapping goes). 1 when a SIGBUS was met there: the client had
 * truncated its file. */
int srv_shmguard_drop(int slot);

#endif
