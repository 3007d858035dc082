/* Starting afresh when idle: once no client has been connected for MPSSHIM_RECYCLE_IDLE
 * seconds (10 by default; 0: never), after this image served at least one, the server
 * replaces its own image with a fresh one (execve of itself: the same pid), which takes over
 * the listening sockets and the lock, as a fault's successor does (handover.c), and serves
 * on new contexts.
 *
 * Why: the driver keeps state in a long-lived context that no call gives back. The server's
 * device memory grows by hundreds of MiB with its first framework clients (PyTorch, CuPy, JAX)
 * and stays there round after round, with no client object, arena slab or grown stack left
 * (bench/NOTES.md, "Context memory kept"). Only the context's end gives it back.
 * cuDevicePrimaryCtxReset in the running server would need every per-device resource made
 * again in place (the release streams, spare pools, arena slabs, registered staging, the
 * code gate's events, green contexts), each a place to get wrong; the start-up path makes
 * them all and runs at every start, and a new image gives back the process's heap, threads
 * and descriptors too. The pid stays, so server.pid, a service manager, the service's keeper
 * (handover.c) and get_server_list stay right.
 *
 * Only when nothing can notice: no connection in the client list (not one mid-handshake
 * or whose release is under way), no control connection (an interactive mpsshim-control
 * session keeps the server as it is), no fault or hand-over, not quitting, and the pipe
 * directory still ours (the new image checks it again and would refuse to start). Clients
 * and control commands that arrive meanwhile wait in the listening sockets' backlogs and
 * are served by the new image. A departed client's work that its release left running
 * (registry.c, MPSSHIM_RELEASE_TIMEOUT) ends with the old image, as a process's work ends
 * when it exits: that is what gives back what it held.
 *
 * Signals: a SIGTERM or SIGINT must not be lost in the replacement. The main thread blocks
 * them before the execve (the mask and pending signals survive it, and the new image
 * unblocks them once its handlers are set); one that another thread takes meanwhile is
 * sent on to the main thread (srv_recycle_forward), where it stays pending.
 *
 * The description (MPSSHIM_RECYCLE) is checked as a successor's: its fds must be listening
 * sockets and the pipe directory's locked server.lock (handover.c). It carries the
 * service's life pipe and the faulted servers still alive on too (handover.c); the standby
 * is stopped first (the new image starts its own: one that waited for this image would
 * never hear from the next).
 *
 * A new image that cannot start (the driver no longer loads after an upgrade of its files
 * without a reboot, say) exits as a failed start does, after logging why, and a later
 * client starts a server as usual (autostart); it goes on without its log files if they can
 * no longer be opened, which the first start required with --require-logs. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/clients.h"
#include "server/control/trace_owners.h"
#include "server/control/control.h"
#include "server/core/fault.h"
#include "server/handover/handover.h"
#include "server/limits/policy.h"
#include "server/handover/recycle.h"
#include "server/control/settings.h"

#include "channel/spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECYCLE_ENV "MPSSHIM_RECYCLE"

static char **argv0;
static int lfd = -1, cfd = -1, lockfd = -1, fg;
static uint64_t idle_ns;    /* 0: never */
static _Atomic int served;  /* a client connection was accepted by this image */
static uint64_t idle_since; /* main loop: when the server was last seen busy */
static int dir_refused;     /* the pipe directory is no longer ours: said once */
static int failed;          /* an execve failed: not tried again */
static pthread_t main_thread;
static _Atomic int underway; /* the main thread is replacing the image */
/* The image this one replaced (fresh start only). */
static unsigned long long starts, exec_ns, idle_s;

void srv_recycle_init(char **argv, int listen_fd, int control_fd, int lock_fd, int foreground)
{
    argv0 = argv;
    lfd = listen_fd;
    cfd = control_fd;
    lockfd = lock_fd;
    fg = foreground;
    main_thread = pthread_self();
    idle_ns = srv_settings_seconds_ns(CHAN_SET_RECYCLE_IDLE);
}

void srv_recycle_served(void)
{
    atomic_store(&served, 1);
}

void srv_recycle_forward(int sig)
{
    if (atomic_load(&underway) && !pthread_equal(pthread_self(), main_thread))
        pthread_kill(main_thread, sig);
}

void srv_recycle_describe(char *out, size_t len)
{
    if (!idle_ns)
        snprintf(out, len, "Fresh start when idle: off (%s); started afresh %llu times\n",
                 failed ? "it failed: see the log" : "MPSSHIM_RECYCLE_IDLE=0", starts);
    else
        snprintf(out, len,
                 "Fresh start when idle: after %llu s without clients; started "
                 "afresh %llu times\n",
                 (unsigned long long)(idle_ns / 1000000000ull), starts);
}

/* Each device's memory in use, for the log. */
static void log_memory(const char *when)
{
    for (int d = 0; d < srv.ndev; d++) {
        size_t used;
        if (srv_device_used(d, &used) == 0)
            srv_log("Device %d memory used %zu bytes %s", d, used, when);
    }
}

/* The signals that stop the server or reopen its logs: blocked across the replacement. */
static void stop_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGHUP);
}

void srv_recycle_unblock(void)
{
    sigset_t stop;
    stop_signals(&stop);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
}

/* Every descriptor but the standard streams and the three handed on is closed by the
 * execve, the driver's included (whatever flags it opened them with): their close is what
 * ends the old contexts. 0, or -1 (errno) when the list of fds cannot be read. */
static int only_ours_inherited(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd < 3 || fd == self) continue;
        int keep = fd == lfd || fd == cfd || fd == lockfd || srv_handover_inherit((int)fd);
        int fl = fcntl((int)fd, F_GETFD);
        if (fl >= 0) fcntl((int)fd, F_SETFD, keep ? fl & ~FD_CLOEXEC : fl | FD_CLOEXEC);
    }
    closedir(d);
    return 0;
}

static void start_afresh(uint64_t now)
{
    sigset_t stop, old;
    stop_signals(&stop);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    atomic_store(&underway, 1);
    char desc[512 + 48 * CHAN_MAX_DEVICES];
    unsigned long long idle = (now - idle_since) / 1000000000ull;
    int k = snprintf(desc, sizeof(desc), "1 %d %d %d %d %llu %llu %llu", lfd, cfd, lockfd, fg,
                     starts + 1, (unsigned long long)chan_now_ns(), idle);
    /* Then the hand-over's state, then the operator's settings. */
    size_t used = k > 0 ? (size_t)k : sizeof(desc);
    if (used < sizeof(desc) && srv_handover_encode(desc + used, sizeof(desc) - used) == 0)
        used += strlen(desc + used);
    else
        used = sizeof(desc);
    int e = 0;
    if (used >= sizeof(desc) || srv_policy_encode(desc + used, sizeof(desc) - used) != 0) {
        e = ENAMETOOLONG;
    } else if (!atomic_load(&srv.quitting)) {
        srv_log("No client for %llu s: this server starts afresh in the same process (pid %d) "
                "to give back what the driver keeps in a long-lived context; clients that "
                "arrive meanwhile wait for it",
                idle, (int)getpid());
        log_memory("before");
        if (atomic_load(&srv.left_running_any))
            srv_log("Work of departed clients that was left running ends with the old "
                    "contexts, and what it held is given back");
        unsetenv("MPSSHIM_READY_FD");
        srv_handover_standby_stop();
        if (only_ours_inherited() != 0 || setenv(RECYCLE_ENV, desc, 1) != 0) {
            e = errno;
        } else {
            execv("/proc/self/exe", argv0);
            e = errno;
        }
        unsetenv(RECYCLE_ENV);
        int fds[3] = {lfd, cfd, lockfd};
        for (int i = 0; i < 3; i++)
            fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    if (e) {
        srv_log("Cannot start afresh (%s): serving on in this image, and not trying again",
                strerror(e));
        idle_ns = 0;
        failed = 1;
    }
    /* Quitting (asked before the execve): the main loop ends; a forwarded signal is
     * delivered again here once unblocked, to the same handler. */
    atomic_store(&underway, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void srv_recycle_poll(int control_open)
{
    uint64_t now = chan_now_ns();
    int busy = !idle_ns || !atomic_load(&served) || srv_clients_present() || control_open ||
               !srv_handover_accepting() || srv_fault_any() || atomic_load(&srv.quitting) ||
               atomic_load(&srv.draining) || srv_trace_active();
    if (busy || !idle_since) {
        idle_since = now;
        return;
    }
    if (now - idle_since < idle_ns) return;
    char why[1024];
    if (chan_dir_private(srv.pipe_dir, why, sizeof(why)) != 0) {
        if (!dir_refused)
            srv_log("Not starting afresh: the new image would refuse the pipe directory (%s)", why);
        dir_refused = 1;
        idle_since = now;
        return;
    }
    dir_refused = 0;
    start_afresh(now);
    idle_since = chan_now_ns();
}

int srv_recycle_adopt(int *listen_fd, int *control_fd, int *lock_fd, int *foreground, char *why,
                      size_t len)
{
    const char *s = getenv(RECYCLE_ENV);
    if (!s) return 0;
    unsigned long long v[8];
    if (srv_parse_nums(&s, v, 8) != 0 || v[0] != 1 || v[1] > 1 << 20 || v[2] > 1 << 20 ||
        v[3] > 1 << 20 || v[4] > 1) {
        snprintf(why, len, "malformed %s", RECYCLE_ENV);
        return -1;
    }
    if (srv_handover_decode(&s, why, len) != 0) return -1;
    /* srv_policy_init ran before: what the operator set in the old image wins. */
    if (srv_policy_decode(s) != 0) {
        snprintf(why, len, "malformed %s settings", RECYCLE_ENV);
        return -1;
    }
    unsetenv(RECYCLE_ENV);
    if (srv_handover_check_fds((int)v[1], (int)v[2], (int)v[3], why, len) != 0) return -1;
    *listen_fd = (int)v[1];
    *control_fd = (int)v[2];
    *lock_fd = (int)v[3];
    *foreground = (int)v[4];
    starts = v[5];
    exec_ns = v[6];
    idle_s = v[7];
    return 1;
}

void srv_recycle_adopted(void)
{
    uint64_t now = chan_now_ns();
    srv_log("Started afresh (%llu time%s) after %llu s without clients: serving again %.0f ms "
            "after the old image ended",
            starts, starts == 1 ? "" : "s", idle_s,
            exec_ns && now > exec_ns ? (double)(now - exec_ns) / 1e6 : 0.0);
    log_memory("now");
}
