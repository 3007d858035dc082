/* ipc.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_IPC_H
#define MPSSHIM_SERVER_IPC_H

#include "server/core/server.h"
#include "server/memory/mirror.h"

/* Objects shared through IPC whose real object is still held (ipc.c). */
uint64_t srv_shares_live(void);
/* IPC (ipc.c). The record lets go of its share: the real object is destroyed once neither
 * the exporter nor any opener holds it. `leaving`: released because its client or context
 * goes (an exporter's departure revokes the openers' records), not through the API. */
void srv_share_drop(struct srv_client *c, struct srv_obj *o, int leaving);
/* The same; `leak`: the real object is never destroyed, even by the last to let go (its
 * client's work may still be running on it: registry.c, leave_running). */
void srv_share_let_go(struct srv_client *c, struct srv_obj *o, int leaving, int leak);
void srv_ipc_fault(int dev); /* ipc.c */
/* For a sibling server (ipcpeer.c, control.c's ipc_peer_export): the driver's POSIX
 * descriptor (*fd) of the physical allocation this server's handle (nonce, id, secret) names,
 * and its *size, while its exporter holds it. CUDA_ERROR_INVALID_VALUE for any other. */
CUresult srv_ipc_peer_export(uint64_t nonce, uint64_t id, const uint8_t secret[16], int *fd,
                             uint64_t *size);
/* The same for a GPU's server's mirror of one of its client's allocations in another
 * GPU's server of that process (mirror.c): the descriptor of the whole arena mapping the
 * allocation lies in, with *out, when the handle's exporter is process `pid`. */
CUresult srv_ipc_peer_mirror(uint64_t nonce, uint64_t id, const uint8_t secret[16], pid_t pid,
                             int *fd, struct srv_mirror_of *out);
/* The same for an event of this server's handle: the driver's own handle of it (made
 * interprocess in a GPU's server only: events.c). */
CUresult srv_ipc_peer_export_event(uint64_t nonce, uint64_t id, const uint8_t secret[16],
                                   uint8_t event[CU_IPC_HANDLE_SIZE]);

#endif
