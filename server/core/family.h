/* Families as modules: what the server's core (the client's life, the registry, streams,
 * faults) asks of every family that keeps state of its own, through one table.
 *
 * A family (server/<family>.c) defines one `const struct srv_family srv_family_NAME`
 * holding the hooks it needs; family.c lists them all, once, in srv_families[], in the
 * order each step runs (the reasons stand there). The core walks the table and names no
 * family: adding one is a block in its own file and a line in that list. */
#ifndef MPSSHIM_FAMILY_H
#define MPSSHIM_FAMILY_H

#include <stdint.h>
#include <stdlib.h>
#include <cuda.h>

struct srv_client;
struct srv_stream;

struct srv_family {
    const char *name;
    /* A new connection, before it is listed or its thread starts (client.c, on the main
     * loop): the family allocates its own state of the client, as a pointer in struct
     * srv_client that its own header alone defines, so that server.h names no family's
     * fields. Made here, not at the handshake, as other threads (the main loop's watch,
     * the driver's callback thread, the control socket) may read it as soon as the client
     * is listed. 0, or -1 without memory: the connection is dropped (client_free runs). */
    int (*client_init)(struct srv_client *c);
    /* The client's struct goes (client.c: reaped after its worker finished, or dropped at
     * its start): the state client_init made goes with it, after every other step, since
     * the threads above may read it until then. Never run for a client whose release left
     * its work running: that work may still reach its state, kept with the struct. Must
     * take a state client_init never made (NULL). */
    void (*client_free)(struct srv_client *c);
    /* The client leaves, before its records are released: what would hold its work up
     * for ever is let go (client.c). */
    void (*client_leave)(struct srv_client *c);
    /* The client leaves, after its records are released and its contexts gone: the
     * family's own state of it goes (client.c). */
    void (*client_fini)(struct srv_client *c);
    /* The main loop found the client gone, whatever its own thread is doing: stores into
     * its segment and host memory only, under srv.clients_lock (srv_clients_watch). */
    void (*client_lost)(struct srv_client *c);
    /* 1 when the client's queued work may be waiting on the client itself through the
     * family (a stream wait on a value in its memory): queue.c then waits longer before it
     * takes the client's requests again (read by its worker). */
    int (*waits_on_client)(struct srv_client *c);
    /* A release of context ctx (0: everything) begins: what would keep the client's work
     * there from draining is ended (registry.c, srv_release). */
    void (*ctx_quiesce)(struct srv_client *c, uint32_t ctx);
    /* Then, once the client's streams drained by `by` (monotonic ns): 0 once the family's
     * own work for it is done too, or -1 when some still ran then (its work is left
     * running). */
    int (*ctx_drain)(struct srv_client *c, uint32_t ctx, uint64_t by);
    /* Makes the real stream of a client's stream on dev, with priority prio, where the
     * family says the client's streams live: 1 with the driver's answer in *r, or 0 when it
     * has no say (the first family that has makes it; else the shared context does). */
    int (*stream_make)(struct srv_client *c, int dev, CUstream *st, int prio, CUresult *r);
    /* The client destroys stream s through the API, before its work is retired. */
    void (*stream_destroyed)(struct srv_client *c, struct srv_stream *s);
    /* Stream s goes (destroyed, or `dead`: it died with its context in a fault). */
    void (*stream_gone)(struct srv_client *c, struct srv_stream *s, int dead);
    /* The client's context on dev died in a fault: what the family kept there is only
     * forgotten (fault.c, the worker's side). */
    void (*ctx_died)(struct srv_client *c, int dev);
    /* Device dev faulted (fault.c, the fault thread, before any worker lets go). */
    void (*dev_fault)(int dev);
    /* Then, once dev's fault (err) is told to every client. */
    void (*dev_faulted)(int dev, CUresult err);
    /* The fault thread asks: 1 once this faulted server must end every client now. */
    int (*end_all)(void);
};

/* client_init and client_free of a family whose state of a client is one struct, zeroed,
 * at c->FIELD: static NAME_init and NAME_free (in a file where struct srv_client and the
 * state's type are defined). */
#define SRV_CLIENT_STATE(NAME, FIELD)                                                              \
    static int NAME##_init(struct srv_client *c)                                                   \
    {                                                                                              \
        c->FIELD = calloc(1, sizeof(*c->FIELD));                                                   \
        return c->FIELD ? 0 : -1;                                                                  \
    }                                                                                              \
    static void NAME##_free(struct srv_client *c)                                                  \
    {                                                                                              \
        free(c->FIELD);                                                                            \
    }

/* Their entries in the family's table, after its name. */
#define SRV_CLIENT_STATE_HOOKS(NAME) .client_init = NAME##_init, .client_free = NAME##_free

/* Each step walks the table in its order; a family without the hook is passed over. */
int srv_families_client_init(struct srv_client *c);
void srv_families_client_free(struct srv_client *c);
void srv_families_client_leave(struct srv_client *c);
void srv_families_client_fini(struct srv_client *c);
void srv_families_client_lost(struct srv_client *c);
int srv_families_waits_on_client(struct srv_client *c);
void srv_families_ctx_quiesce(struct srv_client *c, uint32_t ctx);
int srv_families_ctx_drain(struct srv_client *c, uint32_t ctx, uint64_t by);
int srv_families_stream_make(struct srv_client *c, int dev, CUstream *st, int prio, CUresult *r);
void srv_families_stream_destroyed(struct srv_client *c, struct srv_stream *s);
void srv_families_stream_gone(struct srv_client *c, struct srv_stream *s, int dead);
void srv_families_ctx_died(struct srv_client *c, int dev);
void srv_families_dev_fault(int dev);
void srv_families_dev_faulted(int dev, CUresult err);
int srv_families_end_all(void);

#endif
