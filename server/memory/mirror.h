/* mirror.c: another GPU's server's memory of a client, mapped here at its own address. */
#ifndef MPSSHIM_SERVER_MIRROR_H
#define MPSSHIM_SERVER_MIRROR_H

#include <cuda.h>
#include <stdint.h>

struct srv_client;

/* What a sibling server answers for a mirror (ipc.c, srv_ipc_peer_mirror): the mapping the
 * allocation lies in, and the allocation. */
struct srv_mirror_of {
    uint64_t base, bytes; /* the mapping's address and bytes, in that server's zone */
    uint64_t value, size; /* the allocation's */
    uint64_t serial;      /* which of that server's mappings it is (another at that address later
                             has another) */
};

/* CHAN_IPC_OPEN_MIRROR: the memory a sibling's handle (nonce, id, secret) names, of this
 * client's process, mapped here at its own address for the client's device (or counted once
 * more), and the client's record of it (an `opened` range, closed with CHAN_IPC_CLOSE_MEM):
 * CUDA_SUCCESS with the allocation's *value, *size and the client's opens of it. */
CUresult srv_mirror_open(struct srv_client *c, uint64_t nonce, uint64_t id,
                         const uint8_t secret[16], uint64_t *value, uint64_t *size,
                         uint64_t *opens);

/* The same for a sibling's handle of physical memory (the process's own cuMemCreate memory,
 * exported there): the whole of it mapped here at `at`, which must lie in that server's zone
 * (where the process mapped it there), for the client's device; closed as above. */
CUresult srv_mirror_open_vmm(struct srv_client *c, uint64_t nonce, uint64_t id,
                             const uint8_t secret[16], uint64_t at, uint64_t *size,
                             uint64_t *opens);

#endif
