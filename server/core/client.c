/* A client's life in the server: handshake, shared segment, worker, and the release of
 * everything it owned when it leaves, however it leaves. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/segment.h"
#include "server/core/devctx.h"
#include "server/code/codegate.h"
#include "server/memory/quietctx.h"
#include "server/core/streamrec.h"
#include "server/core/log.h"
#include "server/core/waits.h"
#include "server/core/clients.h"
#include "server/core/registry.h"
#include "server/limits/account.h"
#include "server/core/context.h"
#include "server/core/devices.h"
#include "server/core/events.h"
#include "server/core/fault.h"
#include "server/core/window.h"
#include "server/core/capacity.h"
#include "server/limits/green.h"
#include "server/limits/policy.h"
#include "channel/fdpass.h"
#include "channel/prof.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static int send_welcome(int sock, const struct chan_welcome *w, int fd)
{
    return chan_send_fd(sock, w, sizeof(*w), fd);
}

static void refuse(int sock, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(int sock, int status, const char *fmt, ...)
{
    struct chan_welcome w = {.magic = CHAN_MAGIC,
                             .major = CHAN_PROTO_MAJOR,
                             .minor = CHAN_PROTO_MINOR,
                             .status = status,
                             .server_pid = getpid()};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w.message, sizeof(w.message), fmt, ap);
    va_end(ap);
    srv_log("Refused a client: %s", w.message);
    send_welcome(sock, &w, -1);
}

/* Creates the client's segment: sealed against resizing, so the client cannot shrink it
 * under the server's feet (which would fault the server on access). */
static int make_segment(struct srv_client *c)
{
    size_t size = chan_segment_size();
    int fd = memfd_create("mpsshim-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (ftruncate(fd, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        close(fd);
        return -1;
    }
    void *base = srv_window_map(size, fd); /* window.c says why there */
    if (!base) {
        close(fd);
        return -1;
    }
    c->shm = base;
    c->shm_size = size;
    chan_attach(&c->ch, base);
    chan_init_header(&c->ch);
    memcpy(c->ch.devinfo, &srv.devinfo, sizeof(srv.devinfo));
    return fd;
}

/* Handshakes in progress: every client the server may take arriving at once (an MPI job
 * starting all its ranks), and 64 more. */
#define SRV_MAX_PENDING (srv.max_clients + 64u)
#define SRV_HELLO_NS (5ull * 1000 * 1000 * 1000)

/* Reads exactly len bytes of the handshake by the client's deadline (however slowly it
 * trickles them); -1 (logged) if it hangs up or runs out of time first. */
static int recv_all(struct srv_client *c, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        uint64_t now = chan_now_ns();
        if (now >= c->hello_by || atomic_load(&c->evicted)) {
            srv_log("Client process %d did not finish its handshake %s", (int)c->pid,
                    now >= c->hello_by ? "in time" : "before newer connections needed its place");
            return -1;
        }
        struct pollfd pf = {.fd = c->sock, .events = POLLIN};
        int ms = (int)((c->hello_by - now + 999999) / 1000000);
        ms = ms > 50 ? 50 : ms; /* and look at `evicted` now and then */
        int k = poll(&pf, 1, ms);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) continue; /* the deadline check above ends it */
        ssize_t n = k > 0 ? recv(c->sock, (char *)buf + got, len - got, MSG_DONTWAIT) : -1;
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
            srv_log("Client process %d hung up before its handshake", (int)c->pid);
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

/* Handshake; returns the segment fd sent, or -1 when the client was refused. */
static int handshake(struct srv_client *c)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) return -1;
    c->pid = cred.pid;
    c->uid = cred.uid;
    /* Named after its client, for whoever looks at a stuck server's threads (ps -L, the
     * stacks SIGUSR2 writes into the log: log.c). */
    char name[16];
    snprintf(name, sizeof(name), "client %d", (int)c->pid);
    pthread_setname_np(pthread_self(), name);
    /* Faults before this client came are not its own (epoch first: see fault.c). */
    c->fault_seen = atomic_load(&srv_fault_epoch);
    atomic_store(&c->fault_ack, c->fault_seen);
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        c->gen_seen[d] = atomic_load(&srv_fault[d].gen);
    /* A client that connects and says nothing (or trickles its hello) must not hold a
     * thread for long. */
    c->hello_by = chan_now_ns() + SRV_HELLO_NS;
    struct chan_hello h;
    memset(&h, 0, sizeof(h));
    /* The head first: its layout never changes, so any client's version can be told. */
    if (recv_all(c, &h.head, sizeof(h.head)) != 0) return -1;
    h.head.exe[sizeof(h.head.exe) - 1] = '\0';
    /* Kept escaped: the name is only ever shown (server.log, get_client_info, ps), so every
     * use, later ones too, is safe from a name holding a newline or a terminal's escape; an
     * odd name is cut sooner for it. */
    srv_log_escape(h.head.exe, c->exe, sizeof(c->exe));
    if (cred.uid != getuid()) {
        refuse(c->sock, CHAN_WELCOME_UID,
               "client process %d runs as user %u, this server as user %u: "
               "start a server of your own (another pipe directory)",
               (int)c->pid, (unsigned)cred.uid, (unsigned)getuid());
        return -1;
    }
    if (h.head.magic != CHAN_MAGIC || h.head.major != CHAN_PROTO_MAJOR ||
        h.head.symbols_hash != SHIM_SYMBOLS_HASH || h.head.size != sizeof(h)) {
        int ours = h.head.magic == CHAN_MAGIC;
        refuse(c->sock, CHAN_WELCOME_VERSION,
               "client protocol %u.%u (symbols %016llx), server protocol %u.%u "
               "(symbols %016llx): use the libmpsshim.so built with this server",
               ours ? h.head.major : 0, ours ? h.head.minor : 0,
               (unsigned long long)h.head.symbols_hash, CHAN_PROTO_MAJOR, CHAN_PROTO_MINOR,
               (unsigned long long)SHIM_SYMBOLS_HASH);
        return -1;
    }
    if (recv_all(c, (char *)&h + sizeof(h.head), sizeof(h) - sizeof(h.head)) != 0) return -1;
    h.active_thread_percentage[sizeof(h.active_thread_percentage) - 1] = '\0';
    h.pinned_mem_limit[sizeof(h.pinned_mem_limit) - 1] = '\0';
    h.client_priority[sizeof(h.client_priority) - 1] = '\0';
    h.visible_devices[sizeof(h.visible_devices) - 1] = '\0';
    srv_devices_select(c, &h);
    char why[sizeof(((struct chan_welcome *)0)->message)];
    if (srv_policy_resolve(&h, c->lim, why, sizeof(why)) != 0) {
        refuse(c->sock, CHAN_WELCOME_LIMITS, "client process %d: %s", (int)c->pid, why);
        return -1;
    }
    c->eager_left = srv.eager_kernels; /* module.c */
    /* Limits and what they count are its process's, across its connections (account.c). */
    if (srv_account_join(c, why, sizeof(why)) != 0) {
        refuse(c->sock, CHAN_WELCOME_ERROR, "client process %d: %s", (int)c->pid, why);
        return -1;
    }
    if (atomic_load(&srv.draining)) {
        refuse(c->sock, CHAN_WELCOME_ERROR, "server is shutting down (quit -t)");
        return -1;
    }
    /* Every client may use every device, so each counts on all of them: the limit per
     * device is a limit on clients. `n` includes this one (and others mid-handshake, so
     * that two arriving at once cannot both take the last place). */
    pthread_mutex_lock(&srv.clients_lock);
    unsigned n = srv_clients_admitted();
    c->admitted = n < srv.max_clients; /* under the lock: two cannot take the last place */
    pthread_mutex_unlock(&srv.clients_lock);
    if (!c->admitted) {
        refuse(c->sock, CHAN_WELCOME_FULL,
               "client process %d: the server already has %u clients, its limit per device "
               "(MPSSHIM_MAX_CLIENTS=%u%s)",
               (int)c->pid, n, srv.max_clients, srv_capacity_note());
        return -1;
    }
    int fd = make_segment(c);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        /* Out of descriptors is a limit of the server's, refused as the client limit is:
         * run on the driver, the client would be outside the operator's limits. */
        srv_capacity_no_fds(why, sizeof(why), errno);
        refuse(c->sock, CHAN_WELCOME_FULL, "client process %d: %s", (int)c->pid, why);
        return -1;
    }
    if (fd < 0) {
        refuse(c->sock, CHAN_WELCOME_ERROR, "server failed to create the shared segment: %s",
               strerror(errno));
        return -1;
    }
    if (srv_green_assign(c) != 0) {
        close(fd);
        refuse(c->sock, CHAN_WELCOME_ERROR,
               "server cannot give client process %d its share of the SMs (%d%%); see the "
               "server log",
               (int)c->pid, c->lim->pct);
        return -1;
    }
    srv_devices_publish(c);
    srv_busy(c, SRV_BUSY_HANDSHAKE); /* its driver calls, watched (not its reads) */
    if (!srv_devctx_first_use()) srv_segment_register(c, 0); /* else at its first context */
    srv_busy(c, 0);
    struct chan_welcome w = {.magic = CHAN_MAGIC,
                             .major = CHAN_PROTO_MAJOR,
                             .minor = CHAN_PROTO_MINOR,
                             .status = CHAN_WELCOME_OK,
                             .server_pid = getpid(),
                             .shm_size = c->shm_size,
                             .client_id = c->id,
                             .flags = srv_devctx_clients_move() ? CHAN_WELCOME_MOVES : 0};
    int ok = send_welcome(c->sock, &w, fd) == 0;
    close(fd);
    if (!ok) return -1;
    return 0; /* from now on the socket only tells us when the client goes away */
}

/* PROFILE=1 builds: the operations that took c's worker longest, one line. */
static void prof_ops(const struct srv_client *c)
{
    if (!c->prof || !c->prof->op) return;
    char line[512];
    size_t n = 0;
    int said[6];
    for (int k = 0; k < 6; k++) {
        int best = -1;
        for (int i = 0; i < SRV_PROF_SLOTS; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++)
                taken |= said[j] == i;
            if (!taken && c->prof->op[2 * i] &&
                (best < 0 || c->prof->op[2 * i + 1] > c->prof->op[2 * best + 1]))
                best = i;
        }
        if (best < 0) break;
        said[k] = best;
        char name[48];
        if (best < SHIM_NCALLS)
            snprintf(name, sizeof(name), "%s", shim_calls[best].name);
        else if (best < SRV_PROF_SLOTS - 1)
            snprintf(name, sizeof(name), "%s",
                     srv_proto_op_name(CHAN_OP_BASE + (uint32_t)(best - SHIM_NCALLS)));
        else
            snprintf(name, sizeof(name), "other");
        uint64_t cnt = c->prof->op[2 * best], ns = c->prof->op[2 * best + 1];
        int w = snprintf(line + n, sizeof(line) - n, "%s%s %llu x %.2f us", k ? ", " : "", name,
                         (unsigned long long)cnt, ns / 1e3 / (double)cnt);
        if (w < 0 || (size_t)w >= sizeof(line) - n) break;
        n += (size_t)w;
    }
    srv_log("Client process %d profile by operation: %s", (int)c->pid, line);
}

static void cleanup(struct srv_client *c)
{
    /* What it held, by type, for the log: "released 3 device memory, 2 CUstream". */
    char what[512];
    size_t used = 0;
    unsigned total = 0;
    what[0] = '\0';
    for (int t = 1; t < SHIM_NHTYPES && used < sizeof(what); t++)
        if (c->nobjs[t]) {
            total += c->nobjs[t];
            used += (size_t)snprintf(what + used, sizeof(what) - used, "%s%u %s", used ? ", " : "",
                                     c->nobjs[t], shim_types[t].name);
        }
    srv_fault_sync(c); /* what died in a fault is forgotten, never destroyed */
    srv_families_client_leave(c);
    srv_release(c, 0);
    /* Its work outlived the release: its waits still pending stop holding other clients'
     * frees (codegate.c). */
    if (c->left_running) srv_codegate_abandon(c);
    if (total)
        srv_log("Client process %d: released %u object%s (%s)", (int)c->pid, total,
                total == 1 ? "" : "s", what);
    if (c->objs) srv_log("Client process %d: tables not empty after release", (int)c->pid);
    srv_limits_settle(c);
    struct srv_ctx *x, *xt;
    HASH_ITER(hh, c->ctxs, x, xt) {
        HASH_DEL(c->ctxs, x);
        free(x);
    }
    for (struct srv_wait *w = c->waits, *n; w; w = n) {
        n = w->next;
        for (int i = 0; i < w->nev; i++)
            if (w->pooled[i]) srv_event_give(c, w->dev[i], w->ev[i]);
        srv_wait_free(c, w);
    }
    c->waits = NULL;
    srv_waits_spares_free(c);
    srv_families_client_fini(c);                 /* in the table's order (family.c says why) */
    if (c->stat_fd1 > 0) close(c->stat_fd1 - 1); /* waits.c */
    c->stat_fd1 = 0;
    if (c->task_fd1 > 0) close(c->task_fd1 - 1);
    c->task_fd1 = 0;
    free(c->retired);
    chan_ranges_free(&c->ranges);
    free(c->blob);
    free(c->rec);
    free(c->scratch);
    free(c->out);
    if (c->shm) {
        /* Tell a client that is still there (server quitting) to stop waiting; a
         * terminated one keeps its own mark (CHAN_DEAD_TERMINATED). */
        uint32_t alive = 0;
        atomic_compare_exchange_strong(&c->ch.shm->dead, &alive, CHAN_DEAD_GONE);
        if (!c->left_running) {
            if (c->shm_registered) srv_host_unregister(c, c->shm);
            /* Under clients_lock: srv_client_alert writes into the segments of the clients
             * it finds in the list from other threads. */
            pthread_mutex_lock(&srv.clients_lock);
            srv_window_give((uint64_t)(uintptr_t)c->shm, c->shm_size);
            c->shm = NULL;
            pthread_mutex_unlock(&srv.clients_lock);
        }
    }
}

/* "Client process 123 limits: active thread percentage 25 (32 SMs on device 0), device
 * memory limit 1G on device 0, priority below normal" */
static void log_limits(const struct srv_client *c)
{
    char line[900];
    size_t n = (size_t)snprintf(line, sizeof(line), "active thread percentage %d (", c->lim->pct);
    for (int d = 0; d < srv.ndev && n < sizeof(line); d++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%u SMs on device %d", d ? ", " : "",
                              c->lim->sms[d], d);
    if (n < sizeof(line))
        n += (size_t)snprintf(line + n, sizeof(line) - n, "), device memory limit ");
    int any = 0;
    for (int d = 0; d < srv.ndev && n < sizeof(line); d++)
        if (c->lim->mem[d]) {
            char sz[32];
            srv_format_size(c->lim->mem[d], sz, sizeof(sz));
            n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s on device %d",
                                  any++ ? ", " : "", sz, d);
        }
    if (n < sizeof(line))
        snprintf(line + n, sizeof(line) - n, "%s, priority %s", any ? "" : "none",
                 c->lim->priority ? "below normal" : "normal");
    srv_log("Client process %d limits: %s", (int)c->pid, line);
}

/* Tells a terminated client at once: its threads waiting for replies, ring space or
 * staging slots wake up, see the mark and return CUDA_ERROR_MPS_CLIENT_TERMINATED. Runs
 * on the client's own thread, which alone may touch its segment. */
static void mark_terminated(struct srv_client *c)
{
    atomic_store(&c->ch.shm->dead, CHAN_DEAD_TERMINATED);
    for (int i = 0; i < CHAN_NLANES; i++)
        chan_futex_wake(&c->ch.lanes[i].seq);
    chan_futex_wake(&c->ch.shm->space_bell);
    for (int i = 0; i < CHAN_NSLOTS; i++) {
        chan_futex_wake(&c->ch.shm->slots[i].filled);
        chan_futex_wake(&c->ch.shm->slots[i].freed);
    }
    chan_futex_wake(&c->ch.callbacks->fired_tail);
}

static void *client_main(void *arg)
{
    struct srv_client *c = arg;
    if (handshake(c) == 0) {
        srv_log("New client %d connected (%s)", (int)c->pid, c->exe);
        log_limits(c);
        atomic_store(&c->connected, 1);
        srv_worker_main(c);
        if (atomic_load(&c->terminated)) {
            mark_terminated(c);
            if (atomic_load(&c->terminated) == SRV_ENDED_BY_FAULT)
                srv_log("Client process %d ended by this faulted server: its calls fail with "
                        "CUDA_ERROR_MPS_CLIENT_TERMINATED from now on (the process must start "
                        "again, as under MPS); releasing what it held",
                        (int)c->pid);
            else
                srv_log("Client process %d terminated (terminate_client): its queued calls "
                        "were dropped; releasing what it held once its work already on the "
                        "GPU ends",
                        (int)c->pid);
        }
        srv_busy(c, SRV_BUSY_RELEASE);
        cleanup(c);
        srv_busy(c, 0);
        srv_log("Client process %d disconnected", (int)c->pid);
        if (CHAN_PROFILING && c->prof) {
            uint64_t wall = chan_now_ns() - c->prof->since_ns;
            srv_log("Client process %d profile: %llu records, replaying them %.1f ms (%.1f ms on "
                    "a CPU) of its worker's %.1f ms (%.1f ms on a CPU); %llu plain launches, "
                    "%.2f us each in the driver (%.2f us on a CPU)",
                    (int)c->pid, (unsigned long long)c->prof->records, c->prof->replay_ns / 1e6,
                    c->prof->replay_cpu_ns / 1e6, wall / 1e6, c->prof->cpu_ns / 1e6,
                    (unsigned long long)c->prof->launches,
                    c->prof->launches ? c->prof->launch_ns / 1e3 / (double)c->prof->launches : 0,
                    c->prof->launches ? c->prof->launch_cpu_ns / 1e3 / (double)c->prof->launches
                                      : 0);
            prof_ops(c);
        }
    } else {
        cleanup(c);
    }
    if (c->prof) free(c->prof->op);
    free(c->prof);
    c->prof = NULL;
    close(c->sock);
    c->sock = -1;
    /* What it held on the heap goes back to the system, not only to the allocator. */
    malloc_trim(0);
    atomic_store(&c->finished, 1);
    return NULL;
}

/* The struct of a new connection on sock, with every family's state of it; NULL (sock
 * left open) without memory. */
static struct srv_client *client_new(int sock)
{
    struct srv_client *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->sock = sock;
    c->ranges.elem = sizeof(struct srv_range);
    if (srv_families_client_init(c) != 0) {
        srv_families_client_free(c);
        free(c);
        return NULL;
    }
    return c;
}

/* The struct goes, once no other thread can find it (out of the list, or never in it). */
static void client_free(struct srv_client *c)
{
    srv_families_client_free(c);
    free(c);
}

void srv_client_start(int sock)
{
    struct srv_client *c = client_new(sock);
    if (!c) {
        close(sock);
        return;
    }
    pthread_mutex_lock(&srv.clients_lock);
    /* Reap entries whose workers are done. */
    for (struct srv_client **p = &srv.clients; *p;) {
        struct srv_client *x = *p;
        if (atomic_load(&x->finished)) {
            *p = x->next;
            pthread_join(x->worker, NULL);
            if (!x->left_running)
                client_free(
                    x); /* else its running work may still reach it: kept (a leak, logged) */
        } else {
            p = &x->next;
        }
    }
    /* Connections mid-handshake are bounded apart from clients: past the bound the oldest
     * one gives up its place (said once per burst). */
    static int said_full;
    if (srv_clients_pending() >= SRV_MAX_PENDING) {
        struct srv_client *old = NULL;
        for (struct srv_client *x = srv.clients; x; x = x->next)
            if (!x->admitted && !atomic_load(&x->finished) && !atomic_load(&x->evicted) &&
                (!old || x->id < old->id))
                old = x;
        if (old) atomic_store(&old->evicted, 1);
        if (!said_full++)
            srv_log("%u connections are in their handshake: the oldest make way for new ones",
                    SRV_MAX_PENDING);
    } else {
        said_full = 0;
    }
    c->id = ++srv.next_client_id;
    c->next = srv.clients;
    srv.clients = c;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 1u << 20);
    if (pthread_create(&c->worker, &at, client_main, c) != 0) {
        srv.clients = c->next;
        close(sock);
        client_free(c);
    }
    pthread_attr_destroy(&at);
    pthread_mutex_unlock(&srv.clients_lock);
}
