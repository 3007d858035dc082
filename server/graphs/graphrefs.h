/* graphrefs.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_GRAPHREFS_H
#define MPSSHIM_SERVER_GRAPHREFS_H

#include "server/core/server.h"

/* graphrefs.c: what exec x's nodes name, listed anew from graph g (instantiated or
 * updated from it), or for one node set in it; freed with the record. */
void srv_graphrefs_build(struct srv_client *c, struct srv_obj *x, CUgraph g);
void srv_graphrefs_memset(struct srv_obj *x, uint64_t node, const CUDA_MEMSET_NODE_PARAMS *p);
void srv_graphrefs_memcpy(struct srv_obj *x, uint64_t node, const CUDA_MEMCPY3D *p);
void srv_graphrefs_child(struct srv_client *c, struct srv_obj *x, uint64_t node, CUgraph child);
void srv_graphrefs_func(struct srv_client *c, struct srv_obj *x, uint64_t node, uint64_t func);
/* The address one side of a memcpy node starts at (its host or device field, by type): 1
 * with *base set for linear memory, 0 for an array, -1 for a type that is none of these. */
int srv_memcpy_side_base(CUmemorytype type, const void *host, CUdeviceptr dev, uint64_t *base);

#endif
