/* The family table (family.h): every family that keeps state of its own, once, in the
 * order the core's steps run. The order is load-bearing; per step it is:
 *
 *  client_init, client_free  each family's own state of a client (copy, devmem, queue,
 *                events, green, account, memops, spin, coalesce, context, devices; hostblocks
 *                makes its own on first use): no order, none reads another's then. Freed
 *                with the client's struct, after every other step: the main loop's watch
 *                (client_lost), the coalescing sweeper and other workers (context limits)
 *                may read a state until the struct leaves the list.
 *  client_leave  hostfn: the streams and graphs waiting on the departing client's host
 *                functions go on, or the release would wait for work that never ends.
 *  client_fini   (after the release walk, its contexts and waits gone)
 *                seqgraph: its graphs go (a graph in flight is freed by the driver once
 *                it completes);
 *                copy: its staging slots' events are destroyed (they were never pooled);
 *                devmem: its free streams go (the frees queued there still complete);
 *                queue, hostblocks: their marks' and blocks' events go back to the pool;
 *                events: then the internal events are destroyed, the pool's included;
 *                green: its partitions are given back once its streams are gone;
 *                account: last of what it counted there, so everything was given back;
 *                hostfn: its host node slots are freed, unless its work was left running
 *                (no graph of its runs any more, and nothing above touches them).
 *  waits_on_client  memops: any family may say so; no order.
 *  client_lost   hostfn, then memops: host functions' waits, then waits on values in its
 *                host memory (each logged once).
 *  ctx_quiesce   memops: stream waits on values in its memory are ended first, so that its
 *                work can drain; graph: captures left going end, since a capturing stream
 *                cannot be waited for, its work from before the capture must drain with the
 *                rest, and the graphs they built may hold records of no context.
 *  ctx_drain     devmem: its free streams' marks follow its streams' work and complete just
 *                after it (a release that did not wait for them left their blocks out of the
 *                arena for good); what waited for that work (srv_later) is done before the
 *                walk frees the reservations it lies in.
 *  stream_make   green: a throttled client's streams live in its partition's green context.
 *  stream_destroyed  graph: a capture the client began on the stream ends, records and all.
 *  stream_gone   seqgraph (the stream's graphs go; forgotten where it died), queue (bytes
 *                not yet covered get their mark), hostblocks (the open block is closed behind
 *                the stream's work), graph (a capture left going ends).
 *  ctx_died      seqgraph, copy, queue, hostblocks: each forgets what it kept in the dead
 *                context.
 *  dev_fault     ipc: shares there are dead and revoked before any worker lets go.
 *  dev_faulted   handover: once every client was told, a new server takes over the device.
 *  end_all       handover: too many faulted servers are alive.
 *
 * tensormap, peer: the extents of the maps a client was handed, the peer access it enabled
 * (client_free; peer's ctx_quiesce and ctx_died forget what a context's release or death
 * ends): no order.
 *
 * A family appears once; its place serves every step it has a hook for. The last four
 * (spin, coalesce, context, devices) are the core's own rooms with state of a client, and
 * have client_init and client_free only. */
#include "server/core/family.h"

#include <stddef.h>

extern const struct srv_family srv_family_seqgraph, srv_family_copy, srv_family_devmem,
    srv_family_queue, srv_family_hostblocks, srv_family_events, srv_family_green,
    srv_family_account, srv_family_hostfn, srv_family_memops, srv_family_graph, srv_family_ipc,
    srv_family_handover, srv_family_spin, srv_family_coalesce, srv_family_context,
    srv_family_devices, srv_family_tensormap, srv_family_peer;

static const struct srv_family *const families[] = {
    &srv_family_seqgraph,   &srv_family_copy,      &srv_family_devmem,   &srv_family_queue,
    &srv_family_hostblocks, &srv_family_events,    &srv_family_green,    &srv_family_account,
    &srv_family_hostfn,     &srv_family_memops,    &srv_family_graph,    &srv_family_ipc,
    &srv_family_handover,   &srv_family_spin,      &srv_family_coalesce, &srv_family_context,
    &srv_family_devices,    &srv_family_tensormap, &srv_family_peer,
};
#define NFAMILIES (sizeof(families) / sizeof(families[0]))

/* Calls hook H of every family that has it, in the table's order, with ARGS. */
#define EACH(H, ARGS)                                                                              \
    for (size_t i = 0; i < NFAMILIES; i++)                                                         \
        if (families[i]->H) families[i]->H ARGS;

/* Stops at the first family without memory: the caller frees what the others made. */
int srv_families_client_init(struct srv_client *c)
{
    for (size_t i = 0; i < NFAMILIES; i++)
        if (families[i]->client_init && families[i]->client_init(c) != 0) return -1;
    return 0;
}

void srv_families_client_free(struct srv_client *c)
{
    EACH(client_free, (c));
}

void srv_families_client_leave(struct srv_client *c)
{
    EACH(client_leave, (c));
}

void srv_families_client_fini(struct srv_client *c)
{
    EACH(client_fini, (c));
}

void srv_families_client_lost(struct srv_client *c)
{
    EACH(client_lost, (c));
}

int srv_families_waits_on_client(struct srv_client *c)
{
    for (size_t i = 0; i < NFAMILIES; i++)
        if (families[i]->waits_on_client && families[i]->waits_on_client(c)) return 1;
    return 0;
}

void srv_families_ctx_quiesce(struct srv_client *c, uint32_t ctx)
{
    EACH(ctx_quiesce, (c, ctx));
}

/* Stops at the first family whose work still ran at `by`: the release leaves it all
 * running then, and what later families would finish waits for nothing. */
int srv_families_ctx_drain(struct srv_client *c, uint32_t ctx, uint64_t by)
{
    for (size_t i = 0; i < NFAMILIES; i++)
        if (families[i]->ctx_drain && families[i]->ctx_drain(c, ctx, by) != 0) return -1;
    return 0;
}

void srv_families_stream_gone(struct srv_client *c, struct srv_stream *s, int dead)
{
    EACH(stream_gone, (c, s, dead));
}

void srv_families_ctx_died(struct srv_client *c, int dev)
{
    EACH(ctx_died, (c, dev));
}

void srv_families_dev_fault(int dev)
{
    EACH(dev_fault, (dev));
}

int srv_families_stream_make(struct srv_client *c, int dev, CUstream *st, int prio, CUresult *r)
{
    for (size_t i = 0; i < NFAMILIES; i++)
        if (families[i]->stream_make && families[i]->stream_make(c, dev, st, prio, r)) return 1;
    return 0;
}

void srv_families_stream_destroyed(struct srv_client *c, struct srv_stream *s)
{
    EACH(stream_destroyed, (c, s));
}

void srv_families_dev_faulted(int dev, CUresult err)
{
    EACH(dev_faulted, (dev, err));
}

int srv_families_end_all(void)
{
    for (size_t i = 0; i < NFAMILIES; i++)
        if (families[i]->end_all && families[i]->end_all()) return 1;
    return 0;
}
