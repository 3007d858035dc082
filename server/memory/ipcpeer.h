/* ipcpeer.c: physical memory and events shared between the servers of one pipe directory. */
#ifndef MPSSHIM_SERVER_IPCPEER_H
#define MPSSHIM_SERVER_IPCPEER_H

#include <cuda.h>
#include <stdint.h>
#include <sys/types.h>

#include "server/memory/mirror.h"

/* Asks the sibling servers (the pipe directory's, its GPUs' folders') for the driver's own
 * descriptor of the physical allocation their handle (nonce, id, secret) names. 0 with *fd
 * (close-on-exec, the caller's to close) and the allocation's *size, else -1. */
int srv_ipc_peer_fetch(uint64_t nonce, uint64_t id, const uint8_t secret[16], int *fd,
                       uint64_t *size);
/* The same for an IPC event: the driver's own handle of the sibling's event, 0, else -1. */
int srv_ipc_peer_fetch_event(uint64_t nonce, uint64_t id, const uint8_t secret[16],
                             uint8_t event[CU_IPC_HANDLE_SIZE]);

/* The same for a mirror (mirror.c): the descriptor of the whole mapping that a sibling's
 * handle's allocation lies in, with where it and the allocation are (*of), given only when
 * the handle's exporter is process pid (`ipc_peer_mirror`). */
int srv_ipc_peer_fetch_mirror(uint64_t nonce, uint64_t id, const uint8_t secret[16], pid_t pid,
                              int *fd, struct srv_mirror_of *of);

#endif
