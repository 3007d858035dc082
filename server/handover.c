/* Handing over to a new server process after a fault, from a standby started before it.
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
 * the life pipe (below) as SCM_RIGHTS. The standby takes them, finishes its start
 * (contexts, streams, threads) and says "ready"; then (main loop, srv_handover_poll) the
 * faulted server closes its copies, leaving the socket files, the lock and server.pid to
 * it. A successor that fails is tried again HANDOVER_RETRY_NS later (meanwhile this
 * server accepts new clients again; its faulted device answers them with the fault).
 *
 * The life pipe. Every server of a service shares one pipe, made by the first: only the
 * live server holds its write end (and a successor being started, which has it from the
 * hand-over); faulted ones and the keeper hold only its read end. It reads end of file
 * once the live server has gone, however it went (a quit, a crash, SIGKILL), and carries
 * its exit status as one byte (srv_handover_exit). So a faulted server ends with the
 * service without watching a child, and no server needs to stay as a keeper for its
 * parent: only the foreground server (the main process of a systemd service or a
 * container, whose pid must live as long as the service) becomes one, once its clients
 * have left: it replaces itself (execve, which frees all its CUDA state) by a keeper that
 * waits for that end of file, passes SIGTERM, SIGINT and SIGHUP on to the live server
 * (server.pid, checked to be a process of this program) and exits with the status byte. It
 * is a child subreaper (main.c), so the servers after it stay below it.
 *
 * Bounds: a faulted server ends its faulted device's clients MPSSHIM_FAULT_LINGER seconds
 * after the fault (fault.c) and exits once no client is left; clients of its other devices
 * keep it (it is their server, as MPS keeps a fault to its device). Each server is handed
 * the list of faulted servers before it; one that takes over with more than FAULTED_MAX of
 * them alive tells the oldest beyond that (SIGUSR1) to end every client at once. So a
 * service has at most FAULTED_MAX faulted servers, the live one, its standby and, in the
 * foreground, the keeper; get_server_status counts them.
 *
 * Nothing here reads memory a client can write: the hand-over is decided by the fault
 * thread's own query of the device (fault.c). */
#define _GNU_SOURCE
#include "server/server.h"
#include "server/fault.h"
#include "server/handover.h"
#include "server/policy.h"

#include "channel/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define STANDBY_ENV "MPSSHIM_STANDBY_OF"
#define HANDOVER_RETRY_NS (5ull * 1000 * 1000 * 1000)
/* A successor that neither serves nor fails within this long is given up (a cuInit on many
 * GPUs without the persistence daemon takes seconds, never a minute). */
#define HANDOVER_TIMEOUT_NS (60ull * 1000 * 1000 * 1000)
#define STANDBY_RETRY_NS (1000ull * 1000 * 1000) /* after a standby failed, doubling */
#define STANDBY_RETRY_MAX_NS (300ull * 1000 * 1000 * 1000)
#define FAULTED_MAX 4 /* faulted servers of a service alive at once, at most */
#define LIST_MAX 16   /* faulted servers a server knows of */
/* Handed on: the client and control listening sockets, the lock, the life pipe's ends. */
enum { FD_LISTEN, FD_CONTROL, FD_LOCK, FD_LIFE_R, FD_LIFE_W, NFDS };

extern char **environ;

/* The hand-over: none yet, the successor told and starting, the successor serving. */
enum { IDLE, STARTING, HANDED };
/* The process that carries on: none, started, said it is ready to take over. */
enum { KID_NONE, KID_STARTING, KID_WAITING };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int state = IDLE;
static char **argv0; /* main's argv, for the standby */
static int lfd = -1, cfd = -1, lockfd = -1;
static int life_r = -1, life_w = -1;
static int mode = -1; /* MPSSHIM_STANDBY (srv_standby_mode) */
/* The standby, and once told the successor (until it serves). lock held. */
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
/* Faulted servers before this one, oldest first (this one's own pid is added when it hands
 * over). Main thread and control readers: lock held. */
static pid_t faulted[LIST_MAX];
static int nfaulted;
static _Atomic int told_newer; /* SIGUSR1: a newer server has too many faulted before it */
static int service_ended;      /* the life pipe read end of file (HANDED) */
/* The standby's side. */
static int sb_fd = -1;       /* its end of the socket pair */
static uint64_t sb_ready_ns; /* when it was ready to take over */
static pid_t pred_pid;       /* successor: the server it replaced */
static int successor;

static const char *const mode_names[] = {"off", "init", "context"};

int srv_standby_mode(void)
{
    if (mode >= 0) return mode;
    mode = SRV_STANDBY_INIT;
    const char *v = getenv("MPSSHIM_STANDBY");
    if (v && *v) {
        int m = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(v, mode_names[i]) == 0) m = i;
        if (m < 0)
            srv_log("MPSSHIM_STANDBY=%s is none of off, init, context: init is used", v);
        else
            mode = m;
    }
    return mode;
}

/* ---------------------------------------------------------------- faulted servers */

/* 1 if pid is a faulted server of ours still running with its CUDA state: this program,
 * neither a zombie nor a keeper. */
static int faulted_alive(pid_t pid)
{
    char p[64], exe[PATH_MAX], self[PATH_MAX];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    char buf[512];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *st = strrchr(buf, ')');
    if (!st || st[1] != ' ' || st[2] == 'Z' || st[2] == 'X') return 0;
    snprintf(p, sizeof(p), "/proc/%d/exe", (int)pid);
    ssize_t a = readlink(p, exe, sizeof(exe) - 1),
            b = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (a <= 0 || b <= 0 || a != b || memcmp(exe, self, (size_t)a) != 0) return 0;
    snprintf(p, sizeof(p), "/proc/%d/cmdline", (int)pid);
    if (!(f = fopen(p, "r"))) return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (strcmp(buf + i, "--keeper") == 0)
            return 0;
        else
            i += strlen(buf + i);
    return 1;
}

/* Drops the servers of the list that are gone. lock held. */
static void prune(void)
{
    int j = 0;
    for (int i = 0; i < nfaulted; i++)
        if (faulted_alive(faulted[i])) faulted[j++] = faulted[i];
    nfaulted = j;
}

static void on_newer(int sig)
{
    (void)sig;
    atomic_store(&told_newer, 1);
}

void srv_handover_signals(void)
{
    struct sigaction sa = {.sa_handler = on_newer, .sa_flags = SA_RESTART};
    sigaction(SIGUSR1, &sa, NULL);
}

int srv_handover_end_all(void)
{
    return atomic_load(&state) == HANDED && atomic_load(&told_newer);
}

void srv_handover_describe(char *out, size_t len)
{
    pthread_mutex_lock(&lock);
    prune();
    size_t n = (size_t)snprintf(out, len, "Faulted servers %d", nfaulted);
    for (int i = 0; i < nfaulted && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%d", i ? " " : " (", (int)faulted[i]);
    if (n < len)
        n += (size_t)snprintf(out + n, len - n, "%s, at most %d\n", nfaulted ? ")" : "",
                              FAULTED_MAX);
    int m = srv_standby_mode();
    if (n >= len) n = len - 1; /* cut: nothing more fits */
    if (atomic_load(&state) != IDLE)
        snprintf(out + n, len - n, "Standby none (handed over)\n");
    else if (kid_state == KID_WAITING)
        snprintf(out + n, len - n, "Standby %d ready (MPSSHIM_STANDBY=%s)\n", (int)kid,
                 mode_names[m]);
    else if (kid_state == KID_STARTING)
        snprintf(out + n, len - n, "Standby %d starting (MPSSHIM_STANDBY=%s)\n", (int)kid,
                 mode_names[m]);
    else
        snprintf(out + n, len - n, "Standby none (MPSSHIM_STANDBY=%s)\n", mode_names[m]);
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- the life pipe */

/* 0 if r and w are the two ends of one pipe (each made close-on-exec again), else -1. */
static int check_life(int r, int w, char *why, size_t len)
{
    struct stat a, b;
    int fr = r >= 3 ? fcntl(r, F_GETFL) : -1, fw = w >= 3 ? fcntl(w, F_GETFL) : -1;
    if (fr < 0 || fw < 0 || fstat(r, &a) != 0 || fstat(w, &b) != 0 || !S_ISFIFO(a.st_mode) ||
        a.st_ino != b.st_ino || a.st_dev != b.st_dev || (fr & O_ACCMODE) != O_RDONLY ||
        (fw & O_ACCMODE) != O_WRONLY || fcntl(r, F_SETFD, FD_CLOEXEC) != 0 ||
        fcntl(w, F_SETFD, FD_CLOEXEC) != 0) {
        snprintf(why, len, "descriptors %d and %d are not the two ends of a pipe", r, w);
        return -1;
    }
    return 0;
}

int srv_handover_encode(char *b, size_t n)
{
    pthread_mutex_lock(&lock);
    prune();
    int k = snprintf(b, n, " %d %d %d", life_r, life_w, nfaulted);
    for (int i = 0; i < nfaulted && k > 0 && (size_t)k < n; i++)
        k += snprintf(b + k, n - (size_t)k, " %d", (int)faulted[i]);
    pthread_mutex_unlock(&lock);
    return k > 0 && (size_t)k < n ? 0 : -1;
}

/* The list of faulted servers at *s ("N PID..."): 0 with *s past it, or -1. */
static int decode_list(const char **s)
{
    unsigned long long v[LIST_MAX], nv;
    if (srv_parse_nums(s, &nv, 1) != 0 || nv > LIST_MAX || srv_parse_nums(s, v, (int)nv) != 0)
        return -1;
    for (unsigned long long i = 0; i < nv; i++)
        if (!v[i] || v[i] > INT_MAX) return -1;
    for (unsigned long long i = 0; i < nv; i++)
        faulted[i] = (pid_t)v[i];
    nfaulted = (int)nv;
    return 0;
}

int srv_handover_decode(const char **s, char *why, size_t len)
{
    unsigned long long v[2];
    if (srv_parse_nums(s, v, 2) != 0 || v[0] > INT_MAX || v[1] > INT_MAX || decode_list(s) != 0) {
        snprintf(why, len, "malformed hand-over state");
        return -1;
    }
    if (check_life((int)v[0], (int)v[1], why, len) != 0) return -1;
    life_r = (int)v[0];
    life_w = (int)v[1];
    return 0;
}

int srv_handover_inherit(int fd)
{
    return fd >= 0 && (fd == life_r || fd == life_w);
}

int srv_handover_init(char **argv, int listen_fd, int control_fd, int lock_fd)
{
    argv0 = argv;
    lfd = listen_fd;
    cfd = control_fd;
    lockfd = lock_fd;
    if (life_r >= 0) return 0; /* a successor's or a fresh image's: the service's */
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    life_r = p[0];
    life_w = p[1];
    return 0;
}

int srv_handover_service_ended(void)
{
    if (atomic_load(&state) != HANDED || life_r < 0) return 0;
    if (service_ended) return 1;
    struct pollfd p = {.fd = life_r, .events = POLLIN};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLHUP | POLLERR))) return 0;
    service_ended = 1;
    srv_log("The live server of this pipe directory has exited (the service ended): this one "
            "ends too");
    return 1;
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
        if (strncmp(environ[i], STANDBY_ENV "=", sizeof(STANDBY_ENV)) != 0 &&
            strncmp(environ[i], "MPSSHIM_READY_FD=", 17) != 0 &&
            strncmp(environ[i], "MPSSHIM_RECYCLE=", 16) != 0)
            envp[m++] = environ[i];
    char ready[32], of[64];
    snprintf(ready, sizeof(ready), "MPSSHIM_READY_FD=%d", CHAN_READY_FD);
    snprintf(of, sizeof(of), STANDBY_ENV "=1 %d", (int)getpid());
    envp[m++] = ready;
    envp[m++] = of;
    /* Above the target first: dup2 onto another number clears close-on-exec there only. */
    if ((hi = fcntl(sv[1], F_DUPFD_CLOEXEC, 64)) < 0 || posix_spawn_file_actions_init(&fa) != 0)
        goto out;
    fa_ok = 1;
    /* Nothing else of ours: clients' sockets and segments must not outlive their release. */
    if (posix_spawn_file_actions_adddup2(&fa, hi, CHAN_READY_FD) != 0 ||
        posix_spawn_file_actions_addclosefrom_np(&fa, CHAN_READY_FD + 1) != 0)
        goto out;
    pid_t pid;
    if ((e = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv0, envp)) != 0) {
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
    char msg[256 + 24 * LIST_MAX + 48 * CHAN_MAX_DEVICES];
    prune();
    int k =
        snprintf(msg, sizeof(msg), "1 %d %d %d %llu %d", (int)getpid(), fault_dev, (int)fault_err,
                 (unsigned long long)fault_seen_ns, nfaulted < LIST_MAX ? nfaulted + 1 : LIST_MAX);
    /* The newest LIST_MAX: an older one beyond was told to end long ago. */
    for (int i = nfaulted < LIST_MAX ? 0 : 1; i < nfaulted && k > 0 && (size_t)k < sizeof(msg); i++)
        k += snprintf(msg + k, sizeof(msg) - (size_t)k, " %d", (int)faulted[i]);
    if (k > 0 && (size_t)k < sizeof(msg))
        k += snprintf(msg + k, sizeof(msg) - (size_t)k, " %d", (int)getpid());
    if (k <= 0 || (size_t)k >= sizeof(msg) ||
        srv_policy_encode(msg + k, sizeof(msg) - (size_t)k) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fds[NFDS] = {[FD_LISTEN] = lfd,
                     [FD_CONTROL] = cfd,
                     [FD_LOCK] = lockfd,
                     [FD_LIFE_R] = life_r,
                     [FD_LIFE_W] = life_w};
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
    atomic_store(&state, STARTING);
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
    atomic_store(&state, IDLE);
    retry_ns = chan_now_ns() + HANDOVER_RETRY_NS;
    srv_log("Cannot start a new server: %s; new clients are served here (device %d answers "
            "them with the fault), trying again in %llu s",
            strerror(e), fault_dev, (unsigned long long)(HANDOVER_RETRY_NS / 1000000000ull));
}

void srv_handover_start(int dev, CUresult err)
{
    pthread_mutex_lock(&lock);
    if (atomic_load(&state) == IDLE && lfd >= 0 && !atomic_load(&srv.quitting)) {
        fault_dev = dev;
        fault_err = err;
        fault_seen_ns = atomic_load(&srv.fault[dev].seen_ns);
        hand_over();
    }
    pthread_mutex_unlock(&lock);
}

int srv_handover_accepting(void)
{
    return atomic_load(&state) == IDLE;
}

int srv_handover_done(void)
{
    return atomic_load(&state) == HANDED;
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
    atomic_store(&state, IDLE);
    retry_ns = chan_now_ns() + HANDOVER_RETRY_NS;
}

/* The standby failed or went (why). lock held. */
static void standby_failed(const char *why)
{
    standby_backoff_ns = !standby_backoff_ns                             ? STANDBY_RETRY_NS
                         : standby_backoff_ns * 2 > STANDBY_RETRY_MAX_NS ? STANDBY_RETRY_MAX_NS
                                                                         : standby_backoff_ns * 2;
    if (!standby_failing)
        srv_log("Standby server %d failed: %s; another in %llu s (later ones that fail are "
                "not logged until one is ready)",
                (int)kid, why, (unsigned long long)(standby_backoff_ns / 1000000000ull));
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
        int st = atomic_load(&state);
        if (r > 0 && strncmp(m, "standby ", 8) == 0 && kid_state == KID_STARTING) {
            kid_state = KID_WAITING;
            if (st == IDLE) {
                srv_log("Standby server %d ready to take over after a fault "
                        "(MPSSHIM_STANDBY=%s; %s ms to get there)",
                        (int)kid, mode_names[srv_standby_mode()], m + 8);
                standby_failing = 0;
                standby_backoff_ns = 0;
            }
            continue;
        }
        if (r > 0 && strcmp(m, "ready") == 0 && st == STARTING) {
            close(kid_fd);
            kid_fd = -1;
            live = kid;
            kid = 0;
            kid_state = KID_NONE;
            /* Only the live server holds the write end: its end is the service's. */
            close(life_w);
            life_w = -1;
            atomic_store(&state, HANDED);
            srv_log("Server %d serves new clients now; this one serves its %u client(s) until "
                    "they leave (those of device %d for MPSSHIM_FAULT_LINGER at most), then "
                    "exits",
                    (int)live, srv_clients_live(), fault_dev);
            return 1;
        }
        /* A failure (its reason), end of file, or a word out of turn. */
        const char *why = r > 0 ? m : r == 0 ? "it exited without a word" : strerror(errno);
        if (st == STARTING)
            successor_failed(why);
        else
            standby_failed(why);
        return 0;
    }
}

int srv_handover_poll(void)
{
    pthread_mutex_lock(&lock);
    int done = 0, st = atomic_load(&state);
    uint64_t now = chan_now_ns();
    if (st == HANDED) /* the successor, and servers orphaned below a foreground one */
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
    if (kid_fd >= 0) done = hear();
    st = atomic_load(&state);
    if (st == STARTING && now - kid_since_ns > HANDOVER_TIMEOUT_NS)
        successor_failed("it neither served nor failed within 60 s");
    int quitting = atomic_load(&srv.quitting) || atomic_load(&srv.draining);
    if (st == IDLE && retry_ns && now >= retry_ns && !quitting) {
        retry_ns = 0;
        hand_over();
    } else if (st == IDLE && !retry_ns && kid_fd < 0 && !quitting && now >= standby_retry_ns &&
               srv_standby_mode() != SRV_STANDBY_OFF && !srv_fault_any() && lfd >= 0) {
        /* From the main thread: the standby's PR_SET_PDEATHSIG is the thread's. */
        if (spawn() != 0) {
            kid = 0;
            standby_failed(strerror(errno));
        }
    }
    pthread_mutex_unlock(&lock);
    return done;
}

void srv_handover_standby_stop(void)
{
    pthread_mutex_lock(&lock);
    if (atomic_load(&state) == IDLE && kid_fd >= 0) drop_kid();
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- the standby */

int srv_standby_adopt(char *why, size_t len)
{
    const char *s = getenv(STANDBY_ENV);
    if (!s) return 0;
    unsigned long long v[2];
    if (srv_parse_nums(&s, v, 2) != 0 || *s || v[0] != 1 || !v[1] || v[1] > INT_MAX) {
        snprintf(why, len, "malformed %s", STANDBY_ENV);
        return -1;
    }
    unsetenv(STANDBY_ENV);
    /* Dies with the thread that started it; if that is already gone, nothing to wait for. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != (pid_t)v[1]) return 2;
    int type = 0;
    socklen_t sl = sizeof(type);
    if (getsockopt(CHAN_READY_FD, SOL_SOCKET, SO_TYPE, &type, &sl) != 0 || type != SOCK_SEQPACKET) {
        snprintf(why, len, "descriptor %d is not the standby's socket", CHAN_READY_FD);
        return -1;
    }
    sb_fd = CHAN_READY_FD;
    fcntl(sb_fd, F_SETFD, FD_CLOEXEC);
    prctl(PR_SET_NAME, "mpsshim-standby");
    return 1;
}

int srv_standby_wait(unsigned ready_ms, int *listen_fd, int *control_fd, int *lock_fd, char *why,
                     size_t len)
{
    char word[32];
    snprintf(word, sizeof(word), "standby %u\n", ready_ms);
    if (write(sb_fd, word, strlen(word)) < 0) return 2; /* its server is gone */
    sb_ready_ns = chan_now_ns();
    char msg[1024];
    int fds[NFDS];
    union {
        char buf[CMSG_SPACE(sizeof(fds))];
        struct cmsghdr align;
    } u;
    struct iovec io = {.iov_base = msg, .iov_len = sizeof(msg) - 1};
    struct msghdr mh = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t r;
    while ((r = recvmsg(sb_fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (r <= 0) return 2; /* its server quit, started afresh or replaced it: not needed */
    /* Told: from now on it lives on after the server that started it. */
    prctl(PR_SET_PDEATHSIG, 0);
    prctl(PR_SET_NAME, "mpsshim-server");
    msg[r] = '\0';
    int nfd = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        nfd = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        memcpy(fds, CMSG_DATA(cm), (size_t)(nfd < NFDS ? nfd : NFDS) * sizeof(int));
    }
    if (nfd != NFDS || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
        snprintf(why, len, "the hand-over came without its %d descriptors", NFDS);
        return -1;
    }
    const char *s = msg;
    unsigned long long v[5];
    if (srv_parse_nums(&s, v, 5) != 0 || v[0] != 1 || !v[1] || v[1] > INT_MAX ||
        v[2] >= CHAN_MAX_DEVICES || decode_list(&s) != 0) {
        snprintf(why, len, "malformed hand-over");
        return -1;
    }
    pred_pid = (pid_t)v[1];
    fault_dev = (int)v[2];
    fault_err = (CUresult)v[3];
    fault_seen_ns = v[4];
    /* srv_policy_init ran before: what the predecessor's users set wins. */
    if (srv_policy_decode(s) != 0) {
        snprintf(why, len, "malformed hand-over settings");
        return -1;
    }
    if (srv_handover_check_fds(fds[FD_LISTEN], fds[FD_CONTROL], fds[FD_LOCK], why, len) != 0 ||
        check_life(fds[FD_LIFE_R], fds[FD_LIFE_W], why, len) != 0)
        return -1;
    life_r = fds[FD_LIFE_R];
    life_w = fds[FD_LIFE_W];
    successor = 1;
    *listen_fd = fds[FD_LISTEN];
    *control_fd = fds[FD_CONTROL];
    *lock_fd = fds[FD_LOCK];
    /* "ready", or why it failed, goes back on the same socket (tell_starter in main). */
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", sb_fd);
    setenv("MPSSHIM_READY_FD", fd, 1);
    return 1;
}

/* What a server hands on to the one that carries on from it and nothing else: two listening
 * sockets and the locked file. Each is made close-on-exec again. */
int srv_handover_check_fds(int listen_fd, int control_fd, int lock_fd, char *why, size_t len)
{
    int fds[3] = {listen_fd, control_fd, lock_fd};
    for (int i = 0; i < 3; i++)
        if (fds[i] < 3 || fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0) {
            snprintf(why, len, "descriptor %d not inherited: %s", fds[i],
                     fds[i] < 3 ? "a standard stream" : strerror(errno));
            return -1;
        }
    for (int i = 0; i < 2; i++) {
        int on = 0;
        socklen_t sl = sizeof(on);
        if (getsockopt(fds[i], SOL_SOCKET, SO_ACCEPTCONN, &on, &sl) != 0 || !on) {
            snprintf(why, len, "descriptor %d is not a listening socket", fds[i]);
            return -1;
        }
    }
    struct stat st, named;
    char path[600];
    snprintf(path, sizeof(path), "%s/server.lock", srv.pipe_dir);
    if (fstat(lock_fd, &st) != 0 || !S_ISREG(st.st_mode) || lstat(path, &named) != 0 ||
        st.st_dev != named.st_dev || st.st_ino != named.st_ino) {
        snprintf(why, len, "descriptor %d is not %s", lock_fd, path);
        return -1;
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(why, len, "the server lock was not inherited: %s", strerror(errno));
        return -1;
    }
    return 0;
}

void srv_handover_adopted(void)
{
    uint64_t now = chan_now_ns();
    char how[200];
    if (sb_ready_ns && sb_ready_ns < fault_seen_ns)
        snprintf(how, sizeof(how), "a standby since %.1f s before the fault (MPSSHIM_STANDBY=%s)",
                 (double)(fault_seen_ns - sb_ready_ns) / 1e9, mode_names[srv_standby_mode()]);
    else
        snprintf(how, sizeof(how), "started at the fault or just before, not waiting yet");
    srv_log("Device %d: shared context made again %.0f ms after the fault was seen (%s in "
            "server %d), in this new server, %s; serving. Server %d keeps its clients for now",
            fault_dev, (double)(now - fault_seen_ns) / 1e6, srv_errname(fault_err), (int)pred_pid,
            how, (int)pred_pid);
    /* More faulted servers alive than a service keeps: the oldest end their clients now. */
    pthread_mutex_lock(&lock);
    prune();
    for (int i = 0; i + FAULTED_MAX < nfaulted; i++) {
        srv_log("Faulted server %d ends its clients now: %d faulted servers are alive, at "
                "most %d are kept",
                (int)faulted[i], nfaulted, FAULTED_MAX);
        kill(faulted[i], SIGUSR1);
    }
    pthread_mutex_unlock(&lock);
}

/* ---------------------------------------------------------------- the end */

/* The live server named by server.pid, if it is a process of this program (not this one):
 * where a keeper's signals go. 0 if none. */
static pid_t live_server(void)
{
    char path[600], buf[32];
    snprintf(path, sizeof(path), "%s/server.pid", chan_pipe_dir());
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    if (v <= 0 || v > INT_MAX || (*end && *end != '\n') || (pid_t)v == getpid()) return 0;
    char exe[PATH_MAX], self[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%ld/exe", v);
    ssize_t a = readlink(path, exe, sizeof(exe)),
            b = readlink("/proc/self/exe", self, sizeof(self));
    return a > 0 && a == b && memcmp(exe, self, (size_t)a) == 0 ? (pid_t)v : 0;
}

void srv_handover_forward(int sig, int foreground)
{
    pid_t p;
    if (foreground && atomic_load(&state) == HANDED && !service_ended && (p = live_server()) > 0)
        kill(p, sig);
}

void srv_handover_end(int told, int foreground)
{
    pthread_mutex_lock(&lock);
    /* A standby, or a successor still starting: it must not serve from sockets about to go. */
    if (kid_fd >= 0 || kid > 0) drop_kid();
    pthread_mutex_unlock(&lock);
    /* Told to stop (SIGTERM from systemd to the service's main process, say) while serving
     * faulted clients: the service is the live server too. */
    if (told) srv_handover_forward(SIGTERM, foreground);
}

/* The live server's exit status from the life pipe, once it has ended: 1 without one. */
static int read_status(int fd)
{
    unsigned char b;
    ssize_t r;
    while ((r = read(fd, &b, 1)) < 0 && errno == EINTR)
        ;
    return r == 1 ? b : 1;
}

void srv_handover_exit(int foreground)
{
    if (atomic_load(&state) != HANDED) {
        /* The live server: its status for a keeper, and end of file for the faulted. */
        unsigned char b = 0;
        if (life_w >= 0 && write(life_w, &b, 1) != 1)
            srv_log("Cannot tell the service's keeper this server's status: %s", strerror(errno));
        return;
    }
    if (!foreground) return; /* nobody waits for this pid */
    if (srv_handover_service_ended()) exit(read_status(life_r));
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", life_r);
    srv_log("No client left; this process keeps watch over the live server (the pid a service "
            "manager knows)");
    fcntl(life_r, F_SETFD, 0);
    char *args[] = {argv0[0], "--keeper", fd, NULL};
    execv("/proc/self/exe", args);
    srv_log("Cannot keep watch (%s); exiting", strerror(errno));
}

/* ---------------------------------------------------------------- the keeper */

static volatile sig_atomic_t keep_sig;

static void note_sig(int sig)
{
    keep_sig = sig;
}

int srv_keeper(const char *arg)
{
    char *end;
    long v = strtol(arg, &end, 10);
    struct stat st;
    if (*end || v < 3 || v > INT_MAX || fstat((int)v, &st) != 0 || !S_ISFIFO(st.st_mode)) return 2;
    int fd = (int)v;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    struct sigaction sa = {.sa_handler = note_sig}; /* no SA_RESTART: poll sees it */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    int status = -1;
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ; /* servers orphaned below this one (a child subreaper) */
        int sig = keep_sig;
        if (sig) {
            keep_sig = 0;
            pid_t p = live_server();
            if (p > 0) kill(p, sig);
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 500) <= 0) continue;
        if (p.revents & POLLIN) {
            unsigned char b;
            ssize_t r = read(fd, &b, 1);
            if (r == 1)
                status = b; /* said; its end of file follows once it has exited */
            else if (r == 0)
                break;
        } else if (p.revents & (POLLHUP | POLLERR)) {
            break;
        }
    }
    /* The servers below it end with the service: collected as they go, for a while. */
    for (int i = 0; i < 50 && waitpid(-1, NULL, WNOHANG) >= 0; i++)
        usleep(100 * 1000);
    return status < 0 ? 1 : status;
}

/* The fault thread's (family.c): once every client was told of the fault, a new server takes
 * over; and too many faulted servers alive end their clients. */
const struct srv_family srv_family_handover = {
    .name = "handover", .dev_faulted = srv_handover_start, .end_all = srv_handover_end_all};
