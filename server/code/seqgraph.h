/* seqgraph.c: a client's repeated launch sequences replayed as graphs. */
#ifndef MPSSHIM_SERVER_SEQGRAPH_H
#define MPSSHIM_SERVER_SEQGRAPH_H

#include "server/core/server.h"

/* MPSSHIM_LAUNCH_GRAPHS (1 by default; 0 turns it off), read once at start. */
void srv_seq_init(void);
/* A checked launch m of a function (kernel: a CUkernel) on s, attributes a (m->nattrs),
 * parameters p (psize bytes), before it
 * is issued: 1 when the sequences took it (held back, or launched within a graph); 0 when
 * the caller issues it (then srv_seq_issued, where it succeeded as a plain launch). */
int srv_seq_launch(struct srv_client *c, struct srv_stream *s, const struct chan_launch *m,
                   int kernel, const CUlaunchAttribute *a, const uint8_t *p, uint32_t psize);
void srv_seq_issued(struct srv_client *c, struct srv_stream *s, const struct chan_launch *m,
                    int kernel, const uint8_t *p, uint32_t psize);
/* Before the worker handles any other record (call id or op `op`): held launches are
 * issued, the run ends, and a call that changes what kernels do drops the client's graphs. */
void srv_seq_boundary(struct srv_client *c, uint32_t op);
/* The ring was empty at `now`: 1 while launches are held and their grace lasts (the worker
 * looks again at once, or first sleeps on its ring for *nap_ns where that is not 0:
 * MPSSHIM_LAUNCH_GRAPH_HOLD_SLEEP), 0 once none are (issued now if their grace ran out). */
int srv_seq_idle(struct srv_client *c, uint64_t now, uint64_t *nap_ns);

#endif
