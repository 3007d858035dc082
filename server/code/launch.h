/* launch.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_LAUNCH_H
#define MPSSHIM_SERVER_LAUNCH_H

#include "server/core/server.h"

/* Loads CUkernel k's code in device dev's context through the gate, once (launch.c);
 * CUDA_SUCCESS unless c left while it waited (a failed load is the caller's call's to see). */
CUresult srv_kernel_loaded(struct srv_client *c, struct srv_obj *k, int dev);

/* Issues a plain launch (no attributes) of func (a CUkernel when is_kernel) on s with the
 * parameter buffer p (psize bytes) and counts it: the driver's answer (launch.c). */
CUresult srv_launch_plain(struct srv_client *c, struct srv_stream *s, uint64_t func, int is_kernel,
                          const uint32_t grid[3], const uint32_t block[3], uint32_t smem,
                          const uint8_t *p, size_t psize);

#endif
