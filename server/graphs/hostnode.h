/* What graph host nodes (server/graphs/hostnode.c) give the hooks on graph calls
 * (server/graphs/hostnode_hooks.c). All run on the client's worker. */
#ifndef MPSSHIM_HOSTNODE_H
#define MPSSHIM_HOSTNODE_H

#include "server/core/server.h"

/* The slot of a node that is one of the client's host nodes, else -1; its inner host and
 * wait nodes. */
int srv_hostnode_slot(struct srv_client *c, CUgraphNode n, CUgraphNode *host, CUgraphNode *wait);
/* o (a graph or exec) takes a reference to every host node slot graph g uses. */
void srv_hostnode_share_all(struct srv_client *c, struct srv_obj *o, CUgraph g);
/* The graph (not a child graph node's) that node record o belongs to, or NULL. */
struct srv_obj *srv_hostnode_top_graph(struct srv_obj *o);
/* Gives exec x a slot of its own for its host node `node`, holding fn and user. */
CUresult srv_hostnode_exec_own(struct srv_client *c, struct srv_obj *x, uint64_t node, uint64_t fn,
                               uint64_t user);
/* Drops one of o's references to slot s, if it has one. */
void srv_hostnode_put(struct srv_client *c, struct srv_obj *o, uint32_t s);
/* Exec x's own slots stand for no node any more (after an update). */
void srv_hostnode_exec_unbind(struct srv_obj *x);

#endif
