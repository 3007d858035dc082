/* The client's life (client.c), the server's list of clients (clients.c) and the worker
 * (worker.c): what the main loop, the control commands and the handover ask of them. */
#ifndef MPSSHIM_SERVER_CLIENTS_H
#define MPSSHIM_SERVER_CLIENTS_H

#include "server/core/server.h"

/* Starts serving an accepted connection (handshake and worker run in a new thread). */
void srv_client_start(int sock);
/* Ends every client of device dev (-1: every client) as terminate_client does, without
 * waiting: its calls fail with CUDA_ERROR_MPS_CLIENT_TERMINATED from then on, and what it
 * held is released. How many it ended (client.c). */
unsigned srv_clients_end(int dev);
/* clients_lock held: clients holding a place under MPSSHIM_MAX_CLIENTS (admitted, not yet
 * gone), and connections still in their handshake (clients.c). */
unsigned srv_clients_admitted(void);
unsigned srv_clients_pending(void);
/* The protocol's own operation op by name (channel/proto.h), for the log. */
const char *srv_proto_op_name(uint32_t op);
/* Marks every client dead and waits for their workers to clean up. */
void srv_clients_stop(void);
/* Called by the poll loop when a client's socket hangs up. */
void srv_client_hangup(struct srv_client *c);
/* terminate_client: marks every live client of process `pid` terminated (its worker stops
 * replaying, its calls fail with CUDA_ERROR_MPS_CLIENT_TERMINATED) and waits until the
 * server has released everything they held. Returns how many clients it terminated. */
int srv_client_terminate(pid_t pid);
/* Moves the client's alert word (chan_shm.alert): an answer it keeps may have changed
 * without a record of its own. Caller: c's worker, or a thread holding srv.clients_lock
 * that found c in the list (cleanup unmaps the segment under that lock). */
void srv_client_alert(struct srv_client *c);
/* srv_client_alert for every connected client (takes srv.clients_lock). */
void srv_clients_alert(void);
/* Clients whose handshake succeeded and that have not finished yet. */
unsigned srv_clients_live(void);
/* Connections whose worker has not finished: clients, and ones mid-handshake or mid-release. */
unsigned srv_clients_present(void);
/* From the main loop, every pass: a client found gone has its host-function waits and its
 * waits on values in its host memory let go at once (srv_hostfn_release,
 * srv_memops_let_go), whatever its own thread is doing; and each client call (or
 * handshake, or release) in progress SRV_SLOW_CALL_NS is logged, once: a driver call that
 * never returns stops the server's other clients too (its lock), and the line says whose
 * and which it was. */
void srv_clients_watch(void);
/* PROFILE=1 builds (channel/prof.h): a worker's records, time replaying them, and since
 * when it serves; and per operation (srv_prof_slot), records and ns, pairs (NULL when it
 * could not be had). Made by the worker, freed by client.c. */
struct srv_prof {
    uint64_t records, replay_ns, since_ns;
    uint64_t *op;
    /* The worker's CPU time: replaying records, and all told (at its end); its plain
     * launches' driver calls, wall and CPU time: what the one context's launch path costs
     * against the time the worker was not on a CPU (bench/README.md, "Where a 16-process
     * fleet's time goes"). */
    uint64_t replay_cpu_ns, cpu_ns;
    uint64_t launches, launch_ns, launch_cpu_ns;
};
/* PROFILE=1 builds: the slot of an operation in prof->op (generic calls first, then the
 * protocol's own operations, then one for anything else). */
#define SRV_PROF_SLOTS (SHIM_NCALLS + (CHAN_OP_END - CHAN_OP_BASE) + 1)
static inline int srv_prof_slot(uint32_t op)
{
    if (op < SHIM_NCALLS) return (int)op;
    if (op > CHAN_OP_BASE && op < CHAN_OP_END) return SHIM_NCALLS + (int)(op - CHAN_OP_BASE);
    return SRV_PROF_SLOTS - 1;
}
/* Marks what c's thread does now (busy_op). Only that thread writes busy_seq: a load and a
 * store, no locked instruction on the path of every record. */
static inline void srv_busy(struct srv_client *c, uint32_t op)
{
    atomic_store_explicit(&c->busy_op, op, memory_order_relaxed);
    atomic_store_explicit(&c->busy_seq,
                          atomic_load_explicit(&c->busy_seq, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}
/* 1 while the client is connected: waits on it give up otherwise. */
int srv_client_alive(void *client);
/* The worker thread of client arg (client.c starts it after the handshake). */
void *srv_worker_main(void *arg);

#endif
