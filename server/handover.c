/* Handing over to a new server process after a fault.
 *
 * A sticky error loses the device to the process that had the context: on an H100 with
 * driver 580, cuDevicePrimaryCtxReset succeeds after an illegal address, but the retain
 * after it returns the fault again, every time (measured in the server, every 100 ms for
 * minutes, and natively by `fault --restart`). No process can make that device's context
 * again, so the server does what MPS does: the faulted server keeps the clients it has
 * (those of the faulted device get the fault from every call, as natively; those of other
 * devices go on undisturbed) while a new server process takes over the pipe directory and
 * serves every new client on fresh contexts.
 *
 * The predecessor, at the fault (fault thread, srv_handover_start): stops accepting
 * clients (they wait in the listening socket's backlog), starts /proc/self/exe with the
 * client and control listening sockets, the server lock and a ready pipe on fds 3 to 6 and
 * MPSSHIM_HANDOVER saying who it replaces, which device faulted when and the control
 * settings, and goes on answering control connections (status FAULT). When the successor
 * says "ready" (main loop, srv_handover_poll), it closes its listening sockets and exits
 * once its last client has left, leaving the socket files, the lock and server.pid to the
 * successor. If the successor fails, accepting resumes (a new client then gets the fault
 * on that device) and another successor is tried HANDOVER_RETRY_NS later.
 *
 * The successor (srv_handover_adopt, first thing in main) takes the sockets and the lock
 * (flock belongs to the open file, shared by both until the predecessor closes its copy
 * once the successor serves: then only the live server holds it, and a new server may
 * start as soon as it has exited).
 *
 * Lifetimes: the predecessor watches its successor (its child): if the successor exits (a
 * quit, a crash) while it still serves faulted clients, it ends too. When its last client
 * has left it exits, except where a process watches it: a server in the foreground (the
 * main process of a systemd service or a container, which must live as long as the
 * service) and a successor (its predecessor would take its exit for the service's end).
 * Those become keepers instead (srv_keeper: execve of ourselves, which drops every CUDA
 * resource and keeps the pid): a keeper forwards SIGTERM, SIGINT and SIGHUP to its
 * successor and exits with its exit status. After a fault a service is thus a chain of
 * small keepers ending in the live server; `quit` to the live server ends them all.
 *
 * Nothing here reads memory a client can write: the hand-over is decided by the fault
 * thread's own query of the device (fault.c). */
#define _GNU_SOURCE
#include "server/server.h"

#include "channel/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HANDOVER_ENV "MPSSHIM_HANDOVER"
#define HANDOVER_RETRY_NS (5ull * 1000 * 1000 * 1000)
/* The successor's fds: CHAN_READY_FD (3) for its word, then these. */
#define FD_LISTEN 4
#define FD_CONTROL 5
#define FD_LOCK 6

extern char **environ;

enum { IDLE, STARTING, HANDED };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int state = IDLE;
static char **argv0;          /* main's argv, for the successor */
static int lfd = -1, cfd = -1, lockfd = -1;
static pid_t child;           /* the successor being started (STARTING) */
static _Atomic int ready_fd = -1; /* its ready pipe's read end (STARTING) */
static char said[600];        /* what it said so far */
static size_t nsaid;
static int fault_dev;
static CUresult fault_err;
static uint64_t fault_seen_ns, retry_ns;
static pid_t pred_pid;   /* successor: the server it replaced (its parent) */
static int successor;    /* this server replaced another */
static int child_status; /* the successor's exit status, once it exited */

void srv_handover_init(char **argv, int listen_fd, int control_fd, int lock_fd)
{
    argv0 = argv;
    lfd = listen_fd;
    cfd = control_fd;
    lockfd = lock_fd;
}

/* Starts a successor. lock held. 0, or -1 (logged). */
static int spawn(void)
{
    char desc[64 + 48 * CHAN_MAX_DEVICES];
    int k = snprintf(desc, sizeof(desc), HANDOVER_ENV "=1 %d %d %d %llu", (int)getpid(),
                     fault_dev, (int)fault_err, (unsigned long long)fault_seen_ns);
    if (k <= 0 || (size_t)k >= sizeof(desc) ||
        srv_policy_encode(desc + k, sizeof(desc) - (size_t)k) != 0) {
        srv_log("Cannot start a new server: its description does not fit");
        return -1;
    }
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 3, sizeof(*envp));
    int p[2] = {-1, -1}, hi[4] = {-1, -1, -1, -1};
    posix_spawn_file_actions_t fa;
    int fa_ok = 0, rc = -1;
    if (!envp || pipe2(p, O_CLOEXEC) != 0)
        goto out;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], HANDOVER_ENV "=", sizeof(HANDOVER_ENV)) != 0 &&
            strncmp(environ[i], "MPSSHIM_READY_FD=", 17) != 0)
            envp[m++] = environ[i];
    char ready[32];
    snprintf(ready, sizeof(ready), "MPSSHIM_READY_FD=%d", CHAN_READY_FD);
    envp[m++] = ready;
    envp[m++] = desc;
    /* Above every target first, so that no dup2 below overwrites a source still to move;
     * dup2 onto another number clears close-on-exec there and only there. */
    int src[4] = {p[1], lfd, cfd, lockfd};
    for (int i = 0; i < 4; i++)
        if ((hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 64)) < 0)
            goto out;
    if (posix_spawn_file_actions_init(&fa) != 0)
        goto out;
    fa_ok = 1;
    for (int i = 0; i < 4; i++)
        if (posix_spawn_file_actions_adddup2(&fa, hi[i], CHAN_READY_FD + i) != 0)
            goto out;
    /* Nothing else of ours: clients' sockets and segments must not outlive their release. */
    if (posix_spawn_file_actions_addclosefrom_np(&fa, FD_LOCK + 1) != 0)
        goto out;
    int e = posix_spawn(&child, "/proc/self/exe", &fa, NULL, argv0, envp);
    if (e != 0) {
        errno = e;
        goto out;
    }
    ready_fd = p[0];
    p[0] = -1;
    fcntl(ready_fd, F_SETFL, O_NONBLOCK);
    nsaid = 0;
    rc = 0;
    srv_log("Starting a new server process (pid %d) to serve new clients on fresh contexts; "
            "this one keeps its clients until they leave",
            (int)child);
out:
    if (rc != 0)
        srv_log("Cannot start a new server: %s; new clients are served here (device %d "
                "answers them with the fault), trying again in %llu s",
                strerror(errno), fault_dev, (unsigned long long)(HANDOVER_RETRY_NS / 1000000000ull));
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 4; i++)
        if (hi[i] >= 0)
            close(hi[i]);
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
    free(envp);
    return rc;
}

/* Starts a successor, or schedules another try. lock held. */
static void try_spawn(void)
{
    atomic_store(&state, STARTING);
    if (spawn() != 0) {
        atomic_store(&state, IDLE);
        retry_ns = chan_now_ns() + HANDOVER_RETRY_NS;
    }
}

/* The successor being started is gone (it failed, or we quit): its pipe closed, its exit
 * collected, and no successor any more. lock held. */
static void forget_child(void)
{
    close(ready_fd);
    ready_fd = -1;
    waitpid(child, NULL, 0);
    atomic_store(&state, IDLE);
}

void srv_handover_start(int dev, CUresult err)
{
    pthread_mutex_lock(&lock);
    if (atomic_load(&state) == IDLE && lfd >= 0 && !atomic_load(&srv.quitting)) {
        fault_dev = dev;
        fault_err = err;
        fault_seen_ns = atomic_load(&srv.fault[dev].seen_ns);
        try_spawn();
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
    return atomic_load(&state) == STARTING ? ready_fd : -1;
}

int srv_handover_poll(void)
{
    pthread_mutex_lock(&lock);
    int done = 0;
    if (atomic_load(&state) == STARTING) {
        ssize_t r = -1;
        while (nsaid < sizeof(said) - 1 &&
               (r = read(ready_fd, said + nsaid, sizeof(said) - 1 - nsaid)) > 0)
            nsaid += (size_t)r;
        said[nsaid] = '\0';
        int eof = nsaid == sizeof(said) - 1 || (r == 0);
        if (strncmp(said, "ready", 5) == 0) {
            close(ready_fd);
            ready_fd = -1;
            atomic_store(&state, HANDED);
            srv_log("Server %d serves new clients now; this one serves its %u client(s) until "
                    "they leave, then exits",
                    (int)child, srv_clients_live());
            done = 1;
        } else if (eof) {
            forget_child();
            said[strcspn(said, "\n")] = '\0';
            srv_log("The new server (pid %d) did not start: %s; new clients are served here "
                    "(device %d answers them with the fault), trying again in %llu s",
                    (int)child, *said ? said : "it exited without a word", fault_dev,
                    (unsigned long long)(HANDOVER_RETRY_NS / 1000000000ull));
            retry_ns = chan_now_ns() + HANDOVER_RETRY_NS;
        }
    } else if (atomic_load(&state) == IDLE && retry_ns && chan_now_ns() >= retry_ns &&
               !atomic_load(&srv.quitting)) {
        retry_ns = 0;
        try_spawn();
    }
    pthread_mutex_unlock(&lock);
    return done;
}

/* ---------------------------------------------------------------- the successor */

/* What a server hands on to the one that carries on from it and nothing else: two listening
 * sockets and the locked file (an environment a client set for the server it starts cannot
 * pass off other fds). Each is made close-on-exec again. */
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

int srv_handover_adopt(int *listen_fd, int *control_fd, int *lock_fd, char *why, size_t len)
{
    const char *s = getenv(HANDOVER_ENV);
    if (!s)
        return 0;
    unsigned long long v[5];
    if (srv_parse_nums(&s, v, 5) != 0 || v[0] != 1 || v[2] >= CHAN_MAX_DEVICES) {
        snprintf(why, len, "malformed %s", HANDOVER_ENV);
        return -1;
    }
    pred_pid = (pid_t)v[1];
    fault_dev = (int)v[2];
    fault_err = (CUresult)v[3];
    fault_seen_ns = v[4];
    /* srv_policy_init ran before: what the predecessor's users set wins. */
    if (srv_policy_decode(s) != 0) {
        snprintf(why, len, "malformed %s settings", HANDOVER_ENV);
        return -1;
    }
    unsetenv(HANDOVER_ENV);
    if (srv_handover_check_fds(FD_LISTEN, FD_CONTROL, FD_LOCK, why, len) != 0)
        return -1;
    successor = 1;
    *listen_fd = FD_LISTEN;
    *control_fd = FD_CONTROL;
    *lock_fd = FD_LOCK;
    return 1;
}

pid_t srv_handover_predecessor(void)
{
    return successor ? pred_pid : 0;
}

void srv_handover_resume(pid_t pred)
{
    successor = 1;
    pred_pid = pred;
}

void srv_handover_adopted(void)
{
    srv_log("Device %d: shared context made again %.0f ms after the fault was seen (%s in "
            "server %d), in this new server; serving. Server %d keeps its clients until they "
            "leave",
            fault_dev, (double)(chan_now_ns() - fault_seen_ns) / 1e6, srv_errname(fault_err),
            (int)pred_pid, (int)pred_pid);
}

void srv_handover_end(int told)
{
    pthread_mutex_lock(&lock);
    if (atomic_load(&state) == STARTING) {
        /* Quitting while a successor starts: it must not serve from sockets about to go. */
        kill(child, SIGTERM);
        forget_child();
    } else if (atomic_load(&state) == HANDED && told && !child_status) {
        /* Told to quit (SIGTERM from systemd, say) while serving faulted clients: the
         * service is the live server too. */
        kill(child, SIGTERM);
    }
    pthread_mutex_unlock(&lock);
}

int srv_handover_successor_gone(void)
{
    if (atomic_load(&state) != HANDED || child_status)
        return child_status != 0;
    int st = 0;
    if (waitpid(child, &st, WNOHANG) != child)
        return 0;
    child_status = WIFEXITED(st) ? 0x100 | WEXITSTATUS(st) : 0x200 | WTERMSIG(st);
    srv_log("Server %d has exited; this one ends too", (int)child);
    return 1;
}

/* The successor's exit status as ours: its code, or 128 + its signal. */
static int as_status(int st)
{
    return st & 0x100 ? st & 0xff : 128 + (st & 0xff);
}

void srv_handover_exit(int foreground)
{
    if (atomic_load(&state) != HANDED)
        return;
    if (child_status)
        exit(as_status(child_status));
    if (!foreground && !successor)
        return; /* nobody waits for this pid: the successor lives on by itself */
    char pid[16];
    snprintf(pid, sizeof(pid), "%d", (int)child);
    srv_log("No client left; this process keeps watch over server %d (the pid a service "
            "manager knows)",
            (int)child);
    char *args[] = {argv0[0], "--keeper", pid, NULL};
    execv("/proc/self/exe", args);
    srv_log("Cannot keep watch (%s); exiting", strerror(errno));
}

/* ---------------------------------------------------------------- the keeper */

static volatile sig_atomic_t keep_child;

static void pass_on(int sig)
{
    if (keep_child > 0)
        kill(keep_child, sig);
}

int srv_keeper(const char *pid)
{
    char *end;
    long v = strtol(pid, &end, 10);
    if (*end || v <= 0)
        return 2;
    keep_child = (pid_t)v;
    struct sigaction sa = {.sa_handler = pass_on};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    for (;;) {
        int st;
        pid_t r = waitpid(keep_child, &st, 0);
        if (r == keep_child)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 && errno != EINTR)
            return 1; /* not our child: nothing to keep */
    }
}
