/* The server's list of clients (srv.clients, under srv.clients_lock): counting them, the
 * main loop's watch over them, and what the control commands and the fault thread do to
 * them (alert, terminate, end). One client's own life is client.c's. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/clients.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* clients_lock held: clients holding a place under the cap (admitted, not yet gone), and
 * connections still in their handshake. Only admitted ones count against
 * MPSSHIM_MAX_CLIENTS: connections that never finish a hello cannot lock real clients out;
 * they are bounded apart (SRV_MAX_PENDING, the oldest making way for a new one: a real
 * client says hello at once, a crowd of silent ones only evicts itself) and each has
 * SRV_HELLO_NS to finish (client.c). */
unsigned srv_clients_admitted(void)
{
    unsigned n = 0;
    for (struct srv_client *x = srv.clients; x; x = x->next)
        n += x->admitted && !atomic_load(&x->finished);
    return n;
}

unsigned srv_clients_pending(void)
{
    unsigned n = 0;
    for (struct srv_client *x = srv.clients; x; x = x->next)
        n += !x->admitted && !atomic_load(&x->finished) && !atomic_load(&x->evicted);
    return n;
}

int srv_client_alive(void *arg)
{
    struct srv_client *c = arg;
    if (atomic_load(&c->dead)) return 0;
    char b;
    ssize_t n = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        atomic_store(&c->dead, 1);
        return 0;
    }
    return 1;
}

/* The protocol's own operations by name (their %op rows), for the profile line. */
const char *srv_proto_op_name(uint32_t op)
{
    static const char *const names[CHAN_OP_END - CHAN_OP_BASE] = CHAN_OP_NAMES;
    const char *n = op >= CHAN_OP_BASE && op < CHAN_OP_END ? names[op - CHAN_OP_BASE] : NULL;
    return n ? n : "unnamed operation";
}

void srv_clients_stop(void)
{
    pthread_mutex_lock(&srv.clients_lock);
    /* Workers notice within one sleep slice (they never sleep longer). */
    for (struct srv_client *x = srv.clients; x; x = x->next)
        atomic_store(&x->dead, 1);
    struct srv_client *list = srv.clients;
    srv.clients = NULL;
    pthread_mutex_unlock(&srv.clients_lock);
    while (list) {
        struct srv_client *n = list->next;
        pthread_join(list->worker, NULL);
        free(list);
        list = n;
    }
}

void srv_client_hangup(struct srv_client *c)
{
    atomic_store(&c->dead, 1);
}

unsigned srv_clients_live(void)
{
    unsigned n = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next)
        n += atomic_load(&x->connected) && !atomic_load(&x->finished);
    pthread_mutex_unlock(&srv.clients_lock);
    return n;
}

unsigned srv_clients_present(void)
{
    unsigned n = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next)
        n += !atomic_load(&x->finished);
    pthread_mutex_unlock(&srv.clients_lock);
    return n;
}

void srv_clients_watch(void)
{
    uint64_t now = chan_now_ns();
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next) {
        /* Gone, its thread perhaps inside a driver call: its streams must not wait for the
         * callbacks it will never run, nor for values in its host memory that it will never
         * write (memops.c), for another client's call may be holding the
         * driver's lock until the whole device is idle. Repeated each pass: the thread may
         * still enqueue host functions of its queued records before it sees the death.
         * (x->shm stays mapped under clients_lock until its release ends.) */
        if (atomic_load(&x->connected) && !atomic_load(&x->finished) && x->shm &&
            !srv_client_alive(x)) {
            srv_families_client_lost(x);
            x->watch_gone = 1;
        }
        uint32_t op = atomic_load_explicit(&x->busy_op, memory_order_relaxed);
        uint64_t seq = atomic_load_explicit(&x->busy_seq, memory_order_relaxed);
        if (!op || seq != x->watch_seq) {
            x->watch_seq = seq;
            x->watch_since_ns = now;
            x->watch_said = 0;
            continue;
        }
        if (x->watch_said || now - x->watch_since_ns < SRV_SLOW_CALL_NS) continue;
        x->watch_said = 1;
        char what[64];
        if (op == SRV_BUSY_HANDSHAKE)
            snprintf(what, sizeof(what), "its handshake");
        else if (op == SRV_BUSY_RELEASE)
            snprintf(what, sizeof(what), "the release of what it held");
        else if (op < SHIM_NCALLS)
            snprintf(what, sizeof(what), "its call %s", shim_calls[op].name);
        else
            snprintf(what, sizeof(what), "its operation %s (0x%x)", srv_proto_op_name(op), op);
        srv_log("Client process %d: %s has been going on for %llu s in server thread "
                "\"client %d\" (a driver call that does not return holds up every client: "
                "SIGUSR2 writes the server's stacks into this log)",
                (int)x->pid, what, (unsigned long long)((now - x->watch_since_ns) / 1000000000ull),
                (int)x->pid);
    }
    pthread_mutex_unlock(&srv.clients_lock);
}

/* 1 while a client of process `pid` is still being served or released. */
static int pid_pending(pid_t pid)
{
    int any = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x && !any; x = x->next)
        any = x->pid == pid && atomic_load(&x->connected) && !atomic_load(&x->finished);
    pthread_mutex_unlock(&srv.clients_lock);
    return any;
}

void srv_client_alert(struct srv_client *c)
{
    uint32_t v = atomic_fetch_add(&c->alerts, 1) + 1;
    /* Two alerts at once may store their values in either order: each is one never stored
     * before, so the word moves either way, which is all the client looks at. */
    if (c->shm) atomic_store_explicit(&c->ch.shm->alert, v, memory_order_release);
}

void srv_clients_alert(void)
{
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next)
        if (atomic_load(&x->connected) && !atomic_load(&x->finished)) srv_client_alert(x);
    pthread_mutex_unlock(&srv.clients_lock);
}

int srv_client_terminate(pid_t pid)
{
    int n = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next)
        if (x->pid == pid && atomic_load(&x->connected) && !atomic_load(&x->finished) &&
            !atomic_exchange(&x->terminated, 1)) {
            /* The worker stops at its next record (never later than one sleep slice) and
             * the client's thread releases everything as when a client exits. Kernels
             * already on the GPU cannot be stopped: in one shared context there is no way
             * to preempt one client's kernels without resetting everyone's, so the release
             * waits for them to finish. */
            atomic_store(&x->dead, 1);
            srv_client_alert(x); /* its next query asks: answered once it is marked */
            n++;
        }
    pthread_mutex_unlock(&srv.clients_lock);
    /* Entries are freed only by srv_client_start's reaping once finished: look the client
     * up again each time rather than keep a pointer. */
    while (n && pid_pending(pid) && !atomic_load(&srv.quitting))
        usleep(10 * 1000);
    return n;
}

unsigned srv_clients_end(int dev)
{
    unsigned n = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (struct srv_client *x = srv.clients; x; x = x->next) {
        int expected = 0;
        if (atomic_load(&x->connected) && !atomic_load(&x->finished) &&
            (dev < 0 || (atomic_load(&x->stats.devices) & (1u << dev))) &&
            atomic_compare_exchange_strong(&x->terminated, &expected, SRV_ENDED_BY_FAULT)) {
            /* As terminate_client: the worker stops at its next record and the client's
             * thread marks it terminated and releases what it held. */
            atomic_store(&x->dead, 1);
            srv_client_alert(x);
            n++;
        }
    }
    pthread_mutex_unlock(&srv.clients_lock);
    return n;
}
