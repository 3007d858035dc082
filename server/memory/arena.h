/* arena.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_ARENA_H
#define MPSSHIM_SERVER_ARENA_H

#include "server/core/server.h"

/* arena.c: device memory mapped with the virtual memory calls, small requests sharing 2 MiB
 * slabs; srv_arena_free waits for nothing. */
CUresult srv_arena_alloc(int dev, uint64_t bytes, CUdeviceptr *p);
/* 1 when device dev has the virtual memory calls (asked once, logged once when not). */
int srv_arena_usable(int dev);
CUresult srv_arena_free(int dev, CUdeviceptr p);
/* Unmaps the slabs kept empty for later requests (the main loop, once no client is left);
 * srv_arena_cached: whether any is kept. */
void srv_arena_trim(void);
int srv_arena_cached(void);
/* The driver's POSIX descriptor of the physical memory of the allocation at p, when it has
 * a mapping of its own (more than half a slab) made exportable, and that mapping's bytes:
 * for a sibling server opening a legacy IPC handle of it (ipc.c). CUDA_ERROR_NOT_SUPPORTED
 * for a block of a slab, which other clients' blocks share. */
CUresult srv_arena_export(int dev, CUdeviceptr p, uint64_t *bytes, int *fd);
/* Bytes the arena has mapped on dev, and of those the slabs kept empty (for the status). */
void srv_arena_usage(int dev, uint64_t *mapped, uint64_t *kept);

/* The descriptor of the whole mapping that the allocation [value, value + size) of dev's
 * arena lies in (a slab, shared with other allocations, or its own), with the mapping's
 * address, bytes and serial (which mapping it is: none other has it): for another GPU's
 * server to map at that same address (mirror.c). CUDA_ERROR_NOT_SUPPORTED where the mapping
 * was not made exportable (not a GPU's server). */
CUresult srv_arena_mirror_export(int dev, uint64_t value, uint64_t size, uint64_t *base,
                                 uint64_t *bytes, uint64_t *serial, int *fd);

#endif
