/* Handing over to a new server process after a fault, from a standby started before it.
 * This file is the faulted server's side; standby.c is the standby's, and service.c holds
 * what the servers of one service share (the faulted ones alive, the life pipe, the end
 * and the keeper; handover.h).
 *
 * A sticky error loses the device to the process that had the context: cuDevicePrimaryCtxReset
 * succeeds after an illegal address, but the retain after it returns the fault again, every
 * time, in the server and natively (bench/NOTES.md, "Retain after a fault"). No process can
 * make that device's context again, so the server does what MPS does: a new server process
 * serves every new client on fresh contexts, while the faulted one keeps the clients it had for
 * a while (fault.c says how long: MPSSHIM_FAULT_LINGER).
 *
 * The standby. Starting a process and its driver takes most of a recovery (most of a second,
 * several times MPS's: bench/NOTES.md, "Standby"), so the live server keeps one started in
 * advance (MPSSHIM_STANDBY): `init` (the default) has loaded the driver and run cuInit, which
 * costs no device memory; `context` has made its contexts too (a context's memory on every
 * device, hundreds of MiB each: what one shared context saves is what this project is for,
 * hence not the default); `off` starts none, and the successor is started at the fault. The
 * standby is spawned by the main thread as /proc/self/exe with MPSSHIM_STANDBY_OF and a socket
 * pair on fd 3 (nothing else of ours: no listening socket, no lock, so it serves nothing and
 * blocks nobody), dies with the main thread that spawned it (PR_SET_PDEATHSIG, checked against
 * its parent's pid after it is set; the server's quit and fresh start stop it first), is named
 * mpsshim-standby until it takes over (never counted as a server by name) and is started
 * again, later and later, whenever it dies.
 *
 * The hand-over (fault thread, srv_handover_start): the faulted server stops accepting
 * (clients wait in the listening socket's backlog) and sends its standby, over the socket
 * pair, which device faulted when, its control settings and the list of older faulted
 * servers, with the client and control listening sockets, the server lock and both ends of
 * the life pipe (service.c) as SCM_RIGHTS. The standby takes them, finishes its start
 * (contexts, streams, threads) and says "ready"; then (main loop, srv_handover_poll) the
 * faulted server closes its copies, leaving the socket files, the lock and server.pid to
 * it. A successor that fails is tried again HANDOVER_RETRY_NS later (meanwhile this
 * server accepts new clients again; its faulted device answers them with the fault).
 *
 * Nothing here reads memory a client can write: the hand-over is decided by the fault
 * thread's own query of the device (fault.c). */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/clients.h"
#include "server/core/fault.h"
#include "server/handover/handover.h"
#include "server/limits/policy.h"

#include "channel/settings.h"
#include "channel/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define HANDOVER_RETRY_NS (5ull * 1000 * 1000 * 1000)
/* A successor that neither serves nor fails within this long is given up (a cuInit on many
 * GPUs without the persistence daemon takes seconds, never a minute). */
#define HANDOVER_TIMEOUT_NS (60ull * 1000 * 1000 * 1000)
#define STANDBY_RETRY_NS (1000ull * 1000 * 1000) /* after a standby failed, doubling */
#define STANDBY_RETRY_MAX_NS (300ull * 1000 * 1000 * 1000)

extern char **environ;

/* The process that carries on: none, started, said it is ready to take over. */
enum { KID_NONE, KID_STARTING, KID_WAITING };

static int mode = -1; /* MPSSHIM_STANDBY (srv_standby_mode) */
/* The standby, and once told the successor (until it serves). srv_ho.lock held. */
static pid_t kid;
static _Atomic int kid_fd = -1;
static int kid_state;
static uint64_t kid_since_ns; /* spawned; once told, when it was told */
static uint64_t standby_retry_ns, standby_backoff_ns;
static int standby_failing; /* a failure was logged: the next ones are not */
static uint64_t retry_ns;   /* a failed hand-over is tried again then */
static pid_t live;          /* the successor serving (HANDED) */
static int fault_dev;
static CUresult fault_err;
static uint64_t fault_seen_ns;

static const char *const mode_names[] = {"off", "init", "context"};

int srv_standby_mode(void)
{
    if (mode >= 0) return mode;
    /* The choices of channel/settings.def, in the order of mode_names. */
    mode = chan_setting_choice(CHAN_SET_STANDBY);
    return mode;
}

const char *srv_standby_mode_name(void)
{
    return mode_names[srv_standby_mode()];
}

void srv_handover_describe(char *out, size_t len)
{
    pthread_mutex_lock(&srv_ho.lock);
    srv_handover_prune();
    size_t n = (size_t)snprintf(out, len, "Faulted servers %d", srv_ho.nfaulted);
    for (int i = 0; i < srv_ho.nfaulted && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%d", i ? " " : " (", (int)srv_ho.faulted[i]);
    if (n < len)
        n += (size_t)snprintf(out + n, len - n, "%s, at most %d\n", srv_ho.nfaulted ? ")" : "",
                              SRV_FAULTED_MAX);
    int m = srv_standby_mode();
    if (n >= len) n = len - 1; /* cut: nothing more fits */
    if (atomic_load(&srv_ho.state) != SRV_HO_IDLE)
        snprintf(out + n, len - n, "Standby none (handed over)\n");
    else if (kid_state == KID_WAITING)
        snprintf(out + n, len - n, "Standby %d ready (MPSSHIM_STANDBY=%s)\n", (int)kid,
                 mode_names[m]);
    else if (kid_state == KID_STARTING)
        snprintf(out + n, len - n, "Standby %d starting (MPSSHIM_STANDBY=%s)\n", (int)kid,
                 mode_names[m]);
    else
        snprintf(out + n, len - n, "Standby none (MPSSHIM_STANDBY=%s)\n", mode_names[m]);
    pthread_mutex_unlock(&srv_ho.lock);
}

/* ---------------------------------------------------------------- the carrying-on process */

/* Starts /proc/self/exe as a standby, its end of a new socket pair on fd 3. lock held. 0,
 * or -1 with errno. */
static int spawn(void)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 3, sizeof(*envp));
    int sv[2] = {-1, -1}, hi = -1, fa_ok = 0, rc = -1, e = 0;
    posix_spawn_file_actions_t fa;
    if (!envp || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) goto out;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], SRV_STANDBY_ENV "=", sizeof(SRV_STANDBY_ENV)) != 0 &&
            strncmp(environ[i], "MPSSHIM_READY_FD=", 17) != 0 &&
            strncmp(environ[i], "MPSSHIM_RECYCLE=", 16) != 0)
            envp[m++] = environ[i];
    char ready[32], of[64];
    snprintf(ready, sizeof(ready), "MPSSHIM_READY_FD=%d", CHAN_READY_FD);
    snprintf(of, sizeof(of), SRV_STANDBY_ENV "=1 %d", (int)getpid());
    envp[m++] = ready;
    envp[m++] = of;
    /* Above the target first: dup2 onto another number clears close-on-exec there only.
     * (Any number above it: one fixed higher, 64, was past a small RLIMIT_NOFILE, where
     * fcntl answers EINVAL and no standby ever started.) */
    if ((hi = fcntl(sv[1], F_DUPFD_CLOEXEC, CHAN_READY_FD + 1)) < 0 ||
        posix_spawn_file_actions_init(&fa) != 0)
        goto out;
    fa_ok = 1;
    /* Nothing else of ours: clients' sockets and segments must not outlive their release. */
    if (posix_spawn_file_actions_adddup2(&fa, hi, CHAN_READY_FD) != 0 ||
        posix_spawn_file_actions_addclosefrom_np(&fa, CHAN_READY_FD + 1) != 0)
        goto out;
    pid_t pid;
    if ((e = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, srv_ho.argv0, envp)) != 0) {
        errno = e;
        goto out;
    }
    kid = pid;
    kid_fd = sv[0];
    sv[0] = -1;
    fcntl(kid_fd, F_SETFL, O_NONBLOCK);
    kid_state = KID_STARTING;
    kid_since_ns = chan_now_ns();
    rc = 0;
out:
    e = errno;
    if (fa_ok) posix_spawn_file_actions_destroy(&fa);
    if (hi >= 0) close(hi);
    for (int i = 0; i < 2; i++)
        if (sv[i] >= 0) close(sv[i]);
    free(envp);
    errno = e;
    return rc;
}

/* The standby or successor is no more of use (it failed, it went, we quit): stopped,
 * collected, forgotten. lock held. */
static void drop_kid(void)
{
    if (kid_fd >= 0) close(kid_fd);
    kid_fd = -1;
    if (kid > 0) {
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
    }
    kid = 0;
    kid_state = KID_NONE;
}

/* Tells the standby to take over: the fault, the settings, the faulted servers and our
 * descriptors. lock held. 0, or -1 with errno. */
static int send_go(void)
{
    char msg[256 + 24 * SRV_FAULTED_LIST + 48 * CHAN_MAX_DEVICES];
    srv_handover_prune();
    int k = snprintf(msg, sizeof(msg), "1 %d %d %d %llu %d", (int)getpid(), fault_dev,
                     (int)fault_err, (unsigned long long)fault_seen_ns,
                     srv_ho.nfaulted < SRV_FAULTED_LIST ? srv_ho.nfaulted + 1 : SRV_FAULTED_LIST);
    /* The newest SRV_FAULTED_LIST: an older one beyond was told to end long ago. */
    for (int i = srv_ho.nfaulted < SRV_FAULTED_LIST ? 0 : 1;
         i < srv_ho.nfaulted && k > 0 && (size_t)k < sizeof(msg); i++)
        k += snprintf(msg + k, sizeof(msg) - (size_t)k, " %d", (int)srv_ho.faulted[i]);
    if (k > 0 && (size_t)k < sizeof(msg))
        k += snprintf(msg + k, sizeof(msg) - (size_t)k, " %d", (int)getpid());
    if (k <= 0 || (size_t)k >= sizeof(msg) ||
        srv_policy_encode(msg + k, sizeof(msg) - (size_t)k) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fds[SRV_HO_NFDS] = {[SRV_HO_LISTEN] = srv_ho.lfd,
                            [SRV_HO_CONTROL] = srv_ho.cfd,
                            [SRV_HO_LOCK] = srv_ho.lockfd,
                            [SRV_HO_LIFE_R] = srv_ho.life_r,
                            [SRV_HO_LIFE_W] = srv_ho.life_w};
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct iovec io = {.iov_base = msg, .iov_len = strlen(msg)};
    struct msghdr mh = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(cm), fds, sizeof(fds));
    return sendmsg(kid_fd, &mh, MSG_NOSIGNAL) == (ssize_t)io.iov_len ? 0 : -1;
}

/* Hands over to the standby, starting one first if there is none. lock held. */
static void hand_over(void)
{
    atomic_store(&srv_ho.state, SRV_HO_STARTING);
    int had = kid_fd >= 0;
    const char *how = kid_state == KID_WAITING ? "its standby, ready" : "its standby, starting";
    uint64_t age = chan_now_ns() - kid_since_ns;
    if (had && send_go() == 0) {
        srv_log("Server %d (%s for %.1f s) takes over to serve new clients on fresh contexts; "
                "this one keeps its clients for now",
                (int)kid, how, (double)age / 1e9);
        kid_since_ns = chan_now_ns();
        return;
    }
    if (had) drop_kid(); /* its socket failed: it is gone */
    if (spawn() == 0 && send_go() == 0) {
        srv_log("Starting a new server process (pid %d) to serve new clients on fresh contexts "
                "(%s); this one keeps its clients for now",
                (int)kid, mode == SRV_STANDBY_OFF ? "MPSSHIM_STANDBY=off" : "no standby was left");
        return;
    }
    int e = errno;
    drop_kid();
    atomic_store(&srv_ho.state, SRV_HO_IDLE);
    retry_ns = chan_now_ns() + HANDOVER_RETRY_NS;
    srv_log("Cannot start a new server: %s; new clients are served here (device %d answers "
            "them with the fault), trying again in %llu s",
            strerror(e), fault_dev, (unsigned long long)(HANDOVER_RETRY_NS / 1000000000ull));
}

void srv_handover_start(int dev, CUresult err)
{
    pthread_mutex_lock(&srv_ho.lock);
    if (atomic_load(&srv_ho.state) == SRV_HO_IDLE && srv_ho.lfd >= 0 &&
        !atomic_load(&srv.quitting)) {
        fault_dev = dev;
        fault_err = err;
        fault_seen_ns = atomic_load(&srv_fault[dev].seen_ns);
        hand_over();
    }
    pthread_mutex_unlock(&srv_ho.lock);
}

int srv_handover_accepting(void)
{
    return atomic_load(&srv_ho.state) == SRV_HO_IDLE;
}

int srv_handover_done(void)
{
    return atomic_load(&srv_ho.state) == SRV_HO_HANDED;
}

int srv_handover_fd(void)
{
    return atomic_load(&kid_fd);
}

/* The successor failed (what it said in why). lock held. */
static void successor_failed(const char *why)
{
    srv_log("The new server (pid %d) did not start: %s; new clients are served here (device "
            "%d answers them with the fault), trying again in %llu s",
            (int)kid, why, fault_dev, (unsigned long long)(HANDOVER_RETRY_NS / 1000000000ull));
    drop_kid();
    atomic_store(&srv_ho.state, SRV_HO_IDLE);
    retry_ns = chan_now_ns() + HANDOVER_RETRY_NS;
}

/* The standby failed or went (why). lock held. */
static void standby_failed(const char *why)
{
    standby_backoff_ns = !standby_backoff_ns                             ? STANDBY_RETRY_NS
                         : standby_backoff_ns * 2 > STANDBY_RETRY_MAX_NS ? STANDBY_RETRY_MAX_NS
                                                                         : standby_backoff_ns * 2;
    if (!standby_failing && kid)
        srv_log("Standby server %d failed: %s; another in %llu s (later ones that fail are "
                "not logged until one is ready)",
                (int)kid, why, (unsigned long long)(standby_backoff_ns / 1000000000ull));
    else if (!standby_failing)
        srv_log("A standby server could not be started: %s; another try in %llu s (later "
                "ones that fail are not logged until one is ready)",
                why, (unsigned long long)(standby_backoff_ns / 1000000000ull));
    standby_failing = 1;
    drop_kid();
    standby_retry_ns = chan_now_ns() + standby_backoff_ns;
}

/* Reads what the standby or successor said. lock held. 1 once the successor serves. */
static int hear(void)
{
    for (;;) {
        char m[600];
        ssize_t r = read(kid_fd, m, sizeof(m) - 1);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
        if (r > 0) {
            m[r] = '\0';
            m[strcspn(m, "\n")] = '\0';
        }
        int st = atomic_load(&srv_ho.state);
        if (r > 0 && strncmp(m, "standby ", 8) == 0 && kid_state == KID_STARTING) {
            kid_state = KID_WAITING;
            if (st == SRV_HO_IDLE) {
                srv_log("Standby server %d ready to take over after a fault "
                        "(MPSSHIM_STANDBY=%s; %s ms to get there)",
                        (int)kid, mode_names[srv_standby_mode()], m + 8);
                standby_failing = 0;
                standby_backoff_ns = 0;
            }
            continue;
        }
        if (r > 0 && strcmp(m, "ready") == 0 && st == SRV_HO_STARTING) {
            close(kid_fd);
            kid_fd = -1;
            live = kid;
            kid = 0;
            kid_state = KID_NONE;
            /* Only the live server holds the write end: its end is the service's. */
            close(srv_ho.life_w);
            srv_ho.life_w = -1;
            atomic_store(&srv_ho.state, SRV_HO_HANDED);
            srv_log("Server %d serves new clients now; this one serves its %u client(s) until "
                    "they leave (those of device %d for MPSSHIM_FAULT_LINGER at most), then "
                    "exits",
                    (int)live, srv_clients_live(), fault_dev);
            return 1;
        }
        /* A failure (its reason), end of file, or a word out of turn. */
        const char *why = r > 0 ? m : r == 0 ? "it exited without a word" : strerror(errno);
        if (st == SRV_HO_STARTING)
            successor_failed(why);
        else
            standby_failed(why);
        return 0;
    }
}

int srv_handover_poll(void)
{
    pthread_mutex_lock(&srv_ho.lock);
    int done = 0, st = atomic_load(&srv_ho.state);
    uint64_t now = chan_now_ns();
    if (st == SRV_HO_HANDED) /* the successor, and servers orphaned below a foreground one */
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
    if (kid_fd >= 0) done = hear();
    st = atomic_load(&srv_ho.state);
    if (st == SRV_HO_STARTING && now - kid_since_ns > HANDOVER_TIMEOUT_NS)
        successor_failed("it neither served nor failed within 60 s");
    int quitting = atomic_load(&srv.quitting) || atomic_load(&srv.draining);
    if (st == SRV_HO_IDLE && retry_ns && now >= retry_ns && !quitting) {
        retry_ns = 0;
        hand_over();
    } else if (st == SRV_HO_IDLE && !retry_ns && kid_fd < 0 && !quitting &&
               now >= standby_retry_ns && srv_standby_mode() != SRV_STANDBY_OFF &&
               !srv_fault_any() && srv_ho.lfd >= 0) {
        /* From the main thread: the standby's PR_SET_PDEATHSIG is the thread's. */
        if (spawn() != 0) {
            kid = 0;
            standby_failed(strerror(errno));
        }
    }
    pthread_mutex_unlock(&srv_ho.lock);
    return done;
}

void srv_handover_standby_stop(void)
{
    pthread_mutex_lock(&srv_ho.lock);
    if (atomic_load(&srv_ho.state) == SRV_HO_IDLE && kid_fd >= 0) drop_kid();
    pthread_mutex_unlock(&srv_ho.lock);
}

void srv_handover_end(int told, int foreground)
{
    pthread_mutex_lock(&srv_ho.lock);
    /* A standby, or a successor still starting: it must not serve from sockets about to go. */
    if (kid_fd >= 0 || kid > 0) drop_kid();
    pthread_mutex_unlock(&srv_ho.lock);
    /* Told to stop (SIGTERM from systemd to the service's main process, say) while serving
     * faulted clients: the service is the live server too. */
    if (told) srv_handover_forward(SIGTERM, foreground);
}

/* The fault thread's (family.c): once every client was told of the fault, a new server takes
 * over; and too many faulted servers alive end their clients. */
const struct srv_family srv_family_handover = {
    .name = "handover", .dev_faulted = srv_handover_start, .end_all = srv_handover_end_all};
