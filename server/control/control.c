/* The control commands: one text command per line, as nvidia-cuda-mps-control takes them,
 * and their answers. Each answer ends with an EOT byte on a line of its own (mpsshim-control
 * strips it; controlsock.c adds it), and the answer to a command that failed (unknown,
 * malformed, naming no such server or client, a value refused) has a NAK byte just before
 * it: mpsshim-control exits 1 for it when run from a script. (An mpsshim-control older than
 * that prints the NAK as it is, unseen.)
 *
 * There is no control daemon apart from the server: the server answers these itself, so
 * "the server's pid" is this process's pid, and the "default" settings apply to clients
 * that connect from then on (under MPS: to the next server). Every command and the first
 * line of its answer go to control.log. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/devctx.h"
#include "server/limits/account.h"
#include "server/core/context.h"
#include "server/core/log.h"
#include "server/core/hex.h"
#include "server/core/clients.h"
#include "server/core/registry.h"
#include "server/control/trace_owners.h"
#include "server/memory/arena.h"
#include "server/control/control.h"
#include "server/control/cmd.h"
#include "server/code/codegate.h"
#include "server/core/devices.h"
#include "server/core/fault.h"
#include "server/handover/handover.h"
#include "server/memory/ipc.h"
#include "server/limits/policy.h"
#include "server/memory/pools.h"
#include "server/handover/recycle.h"
#include "server/control/settings.h"
#include "server/core/capacity.h"
#include "server/core/spin.h"

#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- answers */

static void vsay(struct cmd *k, const char *fmt, va_list ap)
{
    srv_answer_vsay(k->out, fmt, ap);
}

void ctl_say(struct cmd *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(k, fmt, ap);
    va_end(ap);
}

/* Says why the command failed (an answer of its own, marked as a failure). */
void ctl_fail(struct cmd *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(k, fmt, ap);
    va_end(ap);
    k->failed = 1;
}

/* "Usage: ..." when the command has not exactly lo..hi arguments. 0 when it has. */
int ctl_usage(struct cmd *k, int lo, int hi, const char *args)
{
    if (k->argc - 1 >= lo && k->argc - 1 <= hi) return 0;
    ctl_fail(k, "Usage: %s%s%s\n", k->argv[0], *args ? " " : "", args);
    return -1;
}

/* The pid argument names this server; otherwise says so. 1 when it does. */
int ctl_this_server(struct cmd *k, const char *arg)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (end != arg && !*end && v == (long)getpid()) return 1;
    ctl_fail(k, "Server %s not found\n", arg);
    return 0;
}

/* "GPU-cb1213a3-d6a4-be7f": the leading part of a device's UUID, as MPS's ps shows it. */
static void short_uuid(int d, char *out, size_t len)
{
    const unsigned char *u = (const unsigned char *)srv.devinfo.dev[d].uuid.bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5],
             u[6], u[7]);
}

/* The client's command line from /proc (its executable's name if that is unreadable),
 * escaped: the client chose its arguments, newlines and terminal escapes included. */
static void command_line(const struct srv_client *c, char *out, size_t len)
{
    char path[64], raw[256];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)c->pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(raw, 1, sizeof(raw) - 1, f) : 0;
    if (f) fclose(f);
    for (size_t i = 0; i + 1 < n; i++)
        if (raw[i] == '\0') raw[i] = ' ';
    raw[n] = '\0';
    if (n)
        srv_log_escape(raw, out, len);
    else
        snprintf(out, len, "%s", c->exe); /* kept escaped (client.c) */
}

/* The pid namespace of a process, as a number ("pid:[4026531836]" -> 4026531836). */
static unsigned long long pid_namespace(pid_t pid)
{
    char path[64], link[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n <= 0) return 0;
    link[n] = '\0';
    const char *b = strchr(link, '[');
    return b ? strtoull(b + 1, NULL, 10) : 0;
}

/* Calls fn for every connected client (pid 0: all), under clients_lock. How many matched. */
static unsigned each_client(pid_t pid, void (*fn)(struct cmd *, const struct srv_client *),
                            struct cmd *k)
{
    unsigned n = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (const struct srv_client *c = srv.clients; c; c = c->next)
        if (atomic_load(&c->connected) && !atomic_load(&c->finished) && (!pid || c->pid == pid)) {
            fn(k, c);
            n++;
        }
    pthread_mutex_unlock(&srv.clients_lock);
    return n;
}

static void list_pid(struct cmd *k, const struct srv_client *c)
{
    ctl_say(k, "%d\n", (int)c->pid);
}

static void list_devices(struct cmd *k, const struct srv_client *c)
{
    /* Only the devices its CUDA_VISIBLE_DEVICES gave it (devices.c), by UUID as MPS names
     * them (an index would be the server's, not the client's). */
    char uuid[48];
    for (int d = 0; d < srv.ndev; d++)
        if (srv_dev_out(c, d) >= 0) {
            srv_dev_uuid(d, uuid, sizeof(uuid));
            ctl_say(k, "%s %d\n", uuid, (int)c->pid);
        }
}

static void ps_row(struct cmd *k, const struct srv_client *c)
{
    char cmdline[512], dev[40];
    command_line(c, cmdline, sizeof(cmdline));
    unsigned long long ns = pid_namespace(c->pid);
    uint32_t mask = atomic_load(&c->stats.devices);
    int rows = 0;
    for (int d = 0; d < srv.ndev; d++)
        if (mask & (1u << d)) {
            short_uuid(d, dev, sizeof(dev));
            ctl_say(k, "%d %u %d %s %llu %s\n", (int)c->pid, c->id, (int)getpid(), dev, ns,
                    cmdline);
            rows++;
        }
    if (!rows) /* connected, no context made yet */
        ctl_say(k, "%d %u %d - %llu %s\n", (int)c->pid, c->id, (int)getpid(), ns, cmdline);
}

/* get_client_info: what the client holds and may use, from counters any thread may read
 * (the tables themselves belong to its worker). */
static void info_block(struct cmd *k, const struct srv_client *c)
{
    ctl_say(k, "Client %d (%s)\n", (int)c->pid, c->exe); /* kept escaped (client.c) */
    for (int d = 0; d < srv.ndev; d++) {
        char lim[32] = "none";
        if (c->lim->mem[d]) srv_format_size(c->lim->mem[d], lim, sizeof(lim));
        ctl_say(k, "  Device %d: memory used %llu bytes, memory limit %s, %u of %u SMs\n", d,
                (unsigned long long)atomic_load(&c->stats.mem_dev[d]), lim, c->lim->sms[d],
                srv_sm[d].total);
    }
    ctl_say(k, "  Active thread percentage %d\n", c->lim->pct);
    ctl_say(k, "  Priority %d (%s)\n", c->lim->priority,
            c->lim->priority ? "below normal" : "normal");
    ctl_say(k, "  Streams %llu\n", (unsigned long long)atomic_load(&c->stats.streams));
    ctl_say(k, "  Kernels launched %llu\n", (unsigned long long)atomic_load(&c->stats.launches));
    ctl_say(k, "  Bytes copied %llu\n", (unsigned long long)atomic_load(&c->stats.bytes_copied));
    /* Every record its worker replayed: what its calls cost the server (a query or
     * synchronisation the client answers itself, interpose/idle.c, is not one). */
    ctl_say(k, "  Requests served %llu\n", (unsigned long long)atomic_load(&c->stats.calls));
    /* Of its replies, those the GPU posted (waits.c: a stream synchronisation or a
     * synchronous copy; while crowded only with MPSSHIM_CROWDED_GPU_REPLIES). */
    ctl_say(k, "  Replies from the GPU %llu\n",
            (unsigned long long)atomic_load(&c->stats.gpu_replies));
    /* Of the others, those its worker posted as soon as the GPU stored a word of the server's
     * (waits.c, word waits: a context's synchronisation, or any while its segment waits for the
     * quiet context). */
    ctl_say(k, "  Replies after a word from the GPU %llu\n",
            (unsigned long long)atomic_load(&c->stats.word_replies));
    /* Where a client that does not go on is held (a stream behind a host function the client
     * has not run, a wait on a value nobody writes): its host functions, numbered in the order
     * it sent them, and its waits that the GPU has not passed. The done word is the client's
     * to write: read for this answer only. */
    uint32_t sent = atomic_load(&c->cb_last), reached = atomic_load(&c->cb_ran);
    int returned = reached && c->shm && c->ch.callbacks && /* shm: NULL once released */
                   atomic_load(&c->ch.callbacks->done[reached % CHAN_CB_SLOTS]) == reached;
    if (sent)
        ctl_say(k,
                "  Host functions: the last enqueued number %u, the last reached by its stream "
                "number %u (%s)\n",
                (unsigned)sent, (unsigned)reached,
                !reached   ? "none reached yet"
                : returned ? "returned"
                           : "not returned yet");
    char pending[256];
    srv_codegate_pending_of(c->pid, pending, sizeof(pending));
    ctl_say(k, "  Waits only it can end, not yet passed by the GPU: %s\n", pending);
}

static pid_t parse_pid(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && !*end && v > 0 && v < (1L << 30) ? (pid_t)v : 0;
}

/* quit -t SECONDS: no new clients; the connected ones get up to SECONDS to finish, then
 * the server quits as a plain quit does (their calls fail from then on). */
static void quit_after(struct cmd *k, const char *secs)
{
    char *end;
    double t = strtod(secs, &end);
    if (end == secs || *end || !(t >= 0) || t > 1e6) {
        ctl_fail(k, "Invalid timeout \"%s\": seconds, 0 or more\n", secs);
        return;
    }
    atomic_store(&srv.draining, 1);
    unsigned left = srv_clients_live();
    srv_clog("Quit: waiting up to %g s for %u client(s) to finish", t, left);
    uint64_t end_ns = chan_now_ns() + (uint64_t)(t * 1e9);
    while ((left = srv_clients_live()) && chan_now_ns() < end_ns && !atomic_load(&srv.quitting))
        usleep(50 * 1000);
    if (left)
        srv_clog("Quit: %u client(s) still connected after %g s; shutting down anyway", left, t);
    atomic_store(&srv.quitting, 1);
}

/* ---------------------------------------------------------------- commands */

/* get_server_list: this server, the only one. */
static void cmd_server_list(struct cmd *k)
{
    ctl_say(k, "%d\n", (int)getpid());
}

/* get_client_list <server pid>: the clients' pids. */
static void cmd_client_list(struct cmd *k)
{
    if (ctl_this_server(k, k->argv[1])) each_client(0, list_pid, k);
}

/* get_device_client_list [server pid]: each client's devices. */
static void cmd_device_client_list(struct cmd *k)
{
    if (k->argc == 1 || ctl_this_server(k, k->argv[1])) each_client(0, list_devices, k);
}

/* ps [-p <server pid>]: a row for each client on each device it uses. */
static void cmd_ps(struct cmd *k)
{
    int ok = k->argc == 1 || (k->argc == 3 && strcmp(k->argv[1], "-p") == 0);
    if (!ok)
        ctl_fail(k, "Usage: ps [-p <server pid>]\n");
    else if (k->argc == 1 || ctl_this_server(k, k->argv[2])) {
        ctl_say(k, "PID ID SERVER DEVICE NAMESPACE COMMAND\n");
        each_client(0, ps_row, k);
    }
}

/* get_server_status's memory lines: what each device holds, and what the server can name. */
static void status_devices(struct cmd *k)
{
    /* What the driver itself reports: memory returns to its idle level only when every
     * client's allocations were freed (and spare pools trimmed, pools.c). */
    srv_pools_tidy();
    for (int d = 0; d < srv.ndev; d++) {
        size_t used;
        if (srv_device_used(d, &used) == 0)
            ctl_say(k, "Device %d memory used %zu bytes\n", d, used);
    }
    /* Of that, what the server itself can name: its arena's mappings (client memory and
     * slabs kept empty for later) and the stack the context has per thread (the driver
     * grows it for kernels that need more, context.c). What is left over is the
     * driver's own. */
    for (int d = 0; d < srv.ndev; d++) {
        uint64_t mapped, kept;
        size_t stack = 0;
        srv_arena_usage(d, &mapped, &kept);
        if (!srv_device_made(d)) {
            ctl_say(k, "Device %d: no shared context made yet (made at first use)\n", d);
            continue;
        }
        if (srv_use_device(d) != CUDA_SUCCESS ||
            DRV(cuCtxGetLimit)(&stack, CU_LIMIT_STACK_SIZE) != CUDA_SUCCESS)
            stack = 0;
        ctl_say(k,
                "Device %d arena %llu bytes mapped (%llu in empty slabs kept), stack %zu "
                "bytes per thread (%zu at start)\n",
                d, (unsigned long long)mapped, (unsigned long long)kept, stack,
                srv_limit_default[d][CU_LIMIT_STACK_SIZE]);
    }
}

/* get_server_status [server pid]: its state, clients, objects, spinning and memory. */
static void cmd_server_status(struct cmd *k)
{
    if (k->argc == 2 && !ctl_this_server(k, k->argv[1])) return;
    ctl_say(k, "Server %d\n", (int)getpid());
    ctl_say(k, "Status %s\n",
            atomic_load(&srv.draining) ? "SHUTTING_DOWN"
            : srv_fault_any()          ? "FAULT"
                                       : "ACTIVE");
    ctl_say(k, "Clients %u\n", srv_clients_live());
    char limit[400];
    srv_capacity_describe(limit, sizeof(limit));
    ctl_say(k, "%s", limit);
    /* What clients hold: 0 and 0 once every client left and was released. */
    ctl_say(k, "Objects %llu (%llu shared through IPC)\n", (unsigned long long)srv_records_live(),
            (unsigned long long)srv_shares_live());
    unsigned nbusy, cpus;
    srv_spin_describe(&nbusy, &cpus);
    ctl_say(k, "Spinning %s (%u busy clients, %u CPUs)\n", srv_spin_grade(), nbusy, cpus);
    status_devices(k);
    /* What no call gives back goes back when idle (recycle.c). */
    char line[200];
    srv_recycle_describe(line, sizeof(line));
    ctl_say(k, "%s", line);
    /* After faults: the faulted servers still alive, and the standby (handover.c). */
    char faults[400];
    srv_handover_describe(faults, sizeof(faults));
    ctl_say(k, "%s", faults);
    /* The settings in force and where each came from (channel/settings.def). */
    char settings[8192];
    srv_settings_describe(settings, sizeof(settings));
    ctl_say(k, "%s", settings);
}

/* start_server -uid <user id>: under MPS the daemon starts a server for that user. Here
 * the server is its own control daemon and serves its own user only: for that user it is
 * already running (nothing to say, as MPS says nothing); for another, mpsshim-control run
 * by root stops an idle root server and starts the user's in its place (ctl.c), and
 * anything else is refused with the reason. */
static void cmd_start_server(struct cmd *k)
{
    char *end;
    unsigned long uid = strtoul(k->argv[2], &end, 10);
    if (strcmp(k->argv[1], "-uid") != 0 || end == k->argv[2] || *end || *k->argv[2] == '-' ||
        uid > 0x7fffffffUL) {
        ctl_fail(k, "Usage: start_server -uid <user id>\n");
        return;
    }
    if (uid == (unsigned long)geteuid()) {
        srv_clog("Server %d already serves user %lu", (int)getpid(), uid);
        return;
    }
    ctl_fail(k,
             "Cannot start a server for user %lu: mpsshim's server is its own control daemon and "
             "serves only its own user (this one, pid %d, runs as user %u); a daemon started by "
             "root hands over to user %lu when idle (docs/mps-compat.md)\n",
             uid, (int)getpid(), (unsigned)geteuid(), uid);
}

/* shutdown_server's wait: no new clients until the connected ones have gone; then the
 * server serves again, as MPS's daemon starts a new server for the next client. */
static void *shutdown_wait(void *arg)
{
    (void)arg;
    while (srv_clients_live() && !atomic_load(&srv.quitting))
        usleep(50 * 1000);
    if (!atomic_load(&srv.quitting)) {
        atomic_store(&srv.draining, 0);
        srv_clog("Server %d shut down: its clients have gone; it serves new ones", (int)getpid());
    }
    return NULL;
}

/* Up to max pids of connected clients, into pids. How many. */
static unsigned client_pids(pid_t *pids, unsigned max)
{
    unsigned n = 0;
    pthread_mutex_lock(&srv.clients_lock);
    for (const struct srv_client *c = srv.clients; c && n < max; c = c->next)
        if (atomic_load(&c->connected) && !atomic_load(&c->finished)) pids[n++] = c->pid;
    pthread_mutex_unlock(&srv.clients_lock);
    return n;
}

/* Ends every client's work (terminate_client for each), in rounds of a bounded size, each
 * taking a snapshot of the list (the lock is not held while a client is released). */
static unsigned terminate_all(void)
{
    pid_t pids[256];
    unsigned total = 0, n;
    for (int round = 0; round < 64 && (n = client_pids(pids, 256)); round++)
        for (unsigned i = 0; i < n; i++)
            total += (unsigned)srv_client_terminate(pids[i]);
    return total;
}

/* shutdown_server <server pid> [-f]: MPS's server takes no new client and exits once its
 * clients have gone (-f: at once, their work ended). This server is the control daemon
 * too, so it stays: it refuses new clients until the connected ones are gone, or with -f
 * ends every client's work now (as terminate_client), then serves new clients, as MPS's
 * daemon would with a new server (same pid here: docs/mps-compat.md). */
static void cmd_shutdown_server(struct cmd *k)
{
    if (k->argc == 3 && strcmp(k->argv[2], "-f") != 0) {
        ctl_fail(k, "Usage: shutdown_server <server pid> [-f]\n");
        return;
    }
    if (!ctl_this_server(k, k->argv[1])) return;
    if (k->argc == 3) {
        srv_clog("Server %d shutting down (forced)", (int)getpid());
        unsigned n = terminate_all();
        srv_clog("Server %d shut down (forced): %u client(s) terminated", (int)getpid(), n);
        return;
    }
    atomic_store(&srv.draining, 1);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &a, shutdown_wait, NULL);
    pthread_attr_destroy(&a);
    if (e) {
        atomic_store(&srv.draining, 0);
        ctl_fail(k, "Cannot shut the server down: %s\n", strerror(e));
        return;
    }
    srv_clog("Server %d shutting down: no new clients until its %u client(s) have gone",
             (int)getpid(), srv_clients_live());
}

/* terminate_client <server pid> <client pid>: 0 once the client's work is gone, as MPS. */
static void cmd_terminate_client(struct cmd *k)
{
    if (!ctl_this_server(k, k->argv[1])) return;
    pid_t pid = parse_pid(k->argv[2]);
    srv_clog("Terminating client %s", k->argv[2]);
    if (!pid || srv_client_terminate(pid) == 0)
        ctl_fail(k, "Client %s not found\n", k->argv[2]);
    else
        ctl_say(k, "%d\n", CUDA_SUCCESS);
}

/* quit [-t <seconds>]: now, or once the clients finished (quit_after). */
static void cmd_quit(struct cmd *k)
{
    if (k->argc == 1)
        atomic_store(&srv.quitting, 1);
    else if (k->argc == 3 && strcmp(k->argv[1], "-t") == 0)
        quit_after(k, k->argv[2]);
    else
        ctl_fail(k, "Usage: quit [-t <seconds>]\n");
}

/* get_client_info [client pid]: what each client (or the one named) holds and may use. */
static void cmd_client_info(struct cmd *k)
{
    pid_t pid = 0;
    if (k->argc == 2 && !(pid = parse_pid(k->argv[1]))) {
        ctl_fail(k, "Invalid client pid \"%s\"\n", k->argv[1]);
        return;
    }
    if (each_client(pid, info_block, k) == 0 && pid)
        ctl_fail(k, "Client %s not found\n", k->argv[1]);
}

/* trace ...: GPU timelines (trace.c); the answer is written in place. */
static void cmd_trace(struct cmd *k)
{
    struct srv_answer *a = k->out;
    size_t room = srv_answer_room(a, 64u << 10); /* its answers are a few lines */
    k->failed = srv_trace_control(k->argc - 1, k->argv + 1, a->buf + a->n, room);
    a->n += strlen(a->buf + a->n);
}

/* 32 hex digits into 16 bytes; 0, or -1 when s is not exactly that. */
static int hex16(const char *s, uint8_t out[16])
{
    const char *end;
    return srv_hex_get(s, out, 16, &end) == 0 && !*end ? 0 : -1;
}

/* ipc_peer_export <nonce> <id> <secret>: asked by a sibling server of this pipe directory
 * (server/memory/ipcpeer.c) for the driver's descriptor of the physical allocation one of
 * this server's handles names: "size N", the descriptor sent with the answer's end; or, for
 * an event, "event" and the driver's own handle of it in hex. Not for people: the arguments
 * are the handle's secret, which the log never shows. */
static void cmd_ipc_peer_export(struct cmd *k)
{
    uint8_t secret[16], event[CU_IPC_HANDLE_SIZE];
    char *end1 = NULL, *end2 = NULL;
    unsigned long long nonce = strtoull(k->argv[1], &end1, 16);
    unsigned long long id = strtoull(k->argv[2], &end2, 10);
    uint64_t size = 0;
    k->out->fd = -1;
    if (!*k->argv[1] || *end1 || !*k->argv[2] || *end2 || hex16(k->argv[3], secret) != 0) {
        ctl_fail(k, "No such handle\n");
    } else if (srv_ipc_peer_export(nonce, id, secret, &k->out->fd, &size) == CUDA_SUCCESS) {
        ctl_say(k, "size %llu\n", (unsigned long long)size);
    } else {
        k->out->fd = -1; /* not memory: no descriptor goes */
        if (srv_ipc_peer_export_event(nonce, id, secret, event) == CUDA_SUCCESS) {
            char hex[2 * CU_IPC_HANDLE_SIZE + 1];
            srv_hex_put(hex, event, CU_IPC_HANDLE_SIZE);
            ctl_say(k, "event %s\n", hex);
        } else {
            ctl_fail(k, "No such handle\n");
        }
    }
}

/* ipc_peer_mirror <nonce> <id> <secret> <pid>: asked by a sibling server for a mirror of
 * memory of this server's handle in its own context (server/memory/mirror.c): "mirror BASE
 * BYTES VALUE SIZE SERIAL" (the mapping's address and bytes in hex and decimal, the
 * allocation's likewise, which mapping it is), the mapping's descriptor sent with the answer's end,
 * when the handle's exporter is process pid. Only to a sibling server (a peer running this
 * program): the pid is the asker's word, and the mapping (an arena slab) may hold other
 * clients' blocks, so a client asking itself, with any pid, is refused. Not for people. */
static void cmd_ipc_peer_mirror(struct cmd *k)
{
    uint8_t secret[16];
    char *end1 = NULL, *end2 = NULL, *end3 = NULL;
    unsigned long long nonce = strtoull(k->argv[1], &end1, 16);
    unsigned long long id = strtoull(k->argv[2], &end2, 10);
    long pid = strtol(k->argv[4], &end3, 10);
    struct srv_mirror_of of;
    k->out->fd = -1;
    if (!k->out->server || !*k->argv[1] || *end1 || !*k->argv[2] || *end2 ||
        hex16(k->argv[3], secret) != 0 || !*k->argv[4] || *end3 || pid <= 0 || pid > INT_MAX ||
        srv_ipc_peer_mirror(nonce, id, secret, (pid_t)pid, &k->out->fd, &of) != CUDA_SUCCESS) {
        k->out->fd = -1;
        ctl_fail(k, "No such handle\n");
        return;
    }
    ctl_say(k, "mirror %llx %llu %llx %llu %llu\n", (unsigned long long)of.base,
            (unsigned long long)of.bytes, (unsigned long long)of.value, (unsigned long long)of.size,
            (unsigned long long)of.serial);
}

/* A command's name, the arguments ctl_usage() checks before it runs (lo to hi, named in
 * args for its usage line; lo < 0: it checks its own) and what runs it. */
struct handler {
    const char *name;
    int lo, hi;
    const char *args;
    void (*run)(struct cmd *k);
};

static const struct handler handlers[] = {
    {"get_server_list", 0, 0, "", cmd_server_list},
    {"get_client_list", 1, 1, "<server pid>", cmd_client_list},
    {"get_device_client_list", 0, 1, "[server pid]", cmd_device_client_list},
    {"ps", -1, 0, NULL, cmd_ps},
    {"get_server_status", 0, 1, "[server pid]", cmd_server_status},
    {"start_server", 2, 2, "-uid <user id>", cmd_start_server},
    {"shutdown_server", 1, 2, "<server pid> [-f]", cmd_shutdown_server},
    {"terminate_client", 2, 2, "<server pid> <client pid>", cmd_terminate_client},
    {"quit", -1, 0, NULL, cmd_quit},
    {"set_default_active_thread_percentage", 1, 1, "<percentage>", cmd_set_default_pct},
    {"get_default_active_thread_percentage", 0, 0, "", cmd_get_default_pct},
    {"set_active_thread_percentage", 2, 2, "<server pid> <percentage>", cmd_set_pct},
    {"get_active_thread_percentage", 1, 1, "<server pid>", cmd_get_pct},
    {"set_default_device_pinned_mem_limit", 2, 2, "<device> <value>", cmd_set_default_mem},
    {"get_default_device_pinned_mem_limit", 1, 1, "<device>", cmd_get_default_mem},
    {"set_device_pinned_mem_limit", 3, 3, "<server pid> <device> <value>", cmd_set_mem},
    {"get_device_pinned_mem_limit", 2, 2, "<server pid> <device>", cmd_get_mem},
    {"set_default_client_priority", 1, 1, "<0|1>", cmd_set_priority},
    {"get_default_client_priority", 0, 0, "", cmd_get_priority},
    {"get_client_info", 0, 1, "[client pid]", cmd_client_info},
    {"trace", -1, 0, NULL, cmd_trace},
    {"ipc_peer_export", 3, 3, "<nonce> <id> <secret>", cmd_ipc_peer_export},
    {"ipc_peer_mirror", 4, 4, "<nonce> <id> <secret> <pid>", cmd_ipc_peer_mirror},
};

/* Runs one command (its words in k->argv). */
static void run(struct cmd *k)
{
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        const struct handler *c = &handlers[i];
        if (strcmp(k->argv[0], c->name) != 0) continue;
        if (c->lo < 0 || ctl_usage(k, c->lo, c->hi, c->args) == 0) c->run(k);
        return;
    }
    ctl_fail(k, "Unknown command \"%s\"\n", k->argv[0]);
}

int srv_control_command(char *line, struct srv_answer *out)
{
    struct cmd k = {.out = out};
    srv_answer_reset(out);
    char *save = NULL;
    for (char *w = strtok_r(line, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save)) {
        if (k.argc == MAXARGS) {
            ctl_fail(&k, "Too many arguments\n");
            break;
        }
        k.argv[k.argc++] = w;
    }
    if (!k.argc) return 0;
    char words[256] = "";
    /* A handle's secret is never logged: of ipc_peer_export and _mirror, only the name; of
     * the first's answer
     * for an event, only "event" (the rest is the driver's own handle of it). */
    int peer =
        strcmp(k.argv[0], "ipc_peer_export") == 0 || strcmp(k.argv[0], "ipc_peer_mirror") == 0;
    int shown = peer ? 1 : k.argc;
    for (int i = 0, n = 0; i < shown && n < (int)sizeof(words); i++)
        n += snprintf(words + n, sizeof(words) - (size_t)n, "%s%s", i ? " " : "", k.argv[i]);
    if (out->n == 0) run(&k);
    if (out->cut && out->n >= 4) {
        memcpy(out->buf + out->n - 4, "...\n", 5); /* the answer did not fit: say it was cut */
        srv_log("Command %s: its answer was cut at %zu bytes", words, out->n);
    }
    /* The command and the first line of its answer (MPS logs commands and results). */
    const char *text = out->buf;
    size_t first = peer && strncmp(text, "event ", 6) == 0 ? 5 : strcspn(text, "\n");
    unsigned more = 0;
    for (const char *q = text + first; *q; q++)
        more += *q == '\n' && q[1];
    srv_clog("Command: %s -> %.*s%s", words, first ? (int)(first > 200 ? 200 : first) : 2,
             first ? text : "ok", more ? " (and more lines)" : "");
    return k.failed;
}
