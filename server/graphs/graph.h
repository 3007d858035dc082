/* graph.c (capture) and graphmem.c (graph memory): what the files that use the family need of
 * it (server.h is the core). */
#ifndef MPSSHIM_SERVER_GRAPH_H
#define MPSSHIM_SERVER_GRAPH_H

#include "server/core/server.h"

/* 1 if dptr is graph memory of the client's whose graph still holds the address: a free
 * outside the graph leaves its record (graphmem.c). */
int srv_graphmem_keep(struct srv_client *c, uint64_t dptr);
int srv_graphmem_aliased(const struct srv_obj *o);
/* Stream-ordered allocation in a capture (graphmem.c). An allocation node the driver made for
 * a cuMemAllocAsync/cuMemAllocFromPoolAsync on capturing stream s: its address becomes graph
 * memory of the graph being captured, counted on dev; OUT_OF_MEMORY (the capture then
 * invalidated) when it cannot be registered. */
CUresult srv_graphmem_captured(struct srv_client *c, struct srv_stream *s, int dev, uint64_t dptr,
                               uint64_t bytes);
/* cuMemFreeAsync on a capturing stream: a free node, of the client's graph memory only. */
CUresult srv_graphmem_capture_free(struct srv_client *c, struct srv_call *k);
/* Ends a capture begun on s that its client will not end (s goes, or the client, or its
 * context): the graph goes unless it is the client's own (cuStreamBeginCaptureToGraph).
 * `forget`: its record and the graph memory under it go too; not during a release walk,
 * whose records must stay put (there they are released in the walk). */
void srv_capture_abandon(struct srv_client *c, struct srv_stream *s, int forget);
/* srv_capture_abandon, forgetting, for every stream of context ctx (0: all) of the client:
 * before a release walks its records. */
void srv_captures_abandon(struct srv_client *c, uint32_t ctx);

#endif
