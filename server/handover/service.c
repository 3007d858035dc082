/* The servers of one service across faults (handover.c hands over, standby.c takes over):
 * the faulted servers still alive, the life pipe that ties them to the live server, how
 * each ends, and the keeper.
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
 * the list of faulted servers before it; one that takes over with more than SRV_FAULTED_MAX
 * of them alive tells the oldest beyond that (SIGUSR1) to end every client at once. So a
 * service has at most SRV_FAULTED_MAX faulted servers, the live one, its standby and, in the
 * foreground, the keeper; get_server_status counts them. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/handover/handover.h"
#include "server/limits/policy.h"

#include "channel/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct srv_handover_state srv_ho = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                    .state = SRV_HO_IDLE,
                                    .lfd = -1,
                                    .cfd = -1,
                                    .lockfd = -1,
                                    .life_r = -1,
                                    .life_w = -1};

static _Atomic int told_newer; /* SIGUSR1: a newer server has too many faulted before it */
static int service_ended;      /* the life pipe read end of file (HANDED) */

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

void srv_handover_prune(void)
{
    int j = 0;
    for (int i = 0; i < srv_ho.nfaulted; i++)
        if (faulted_alive(srv_ho.faulted[i])) srv_ho.faulted[j++] = srv_ho.faulted[i];
    srv_ho.nfaulted = j;
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
    return atomic_load(&srv_ho.state) == SRV_HO_HANDED && atomic_load(&told_newer);
}

/* ---------------------------------------------------------------- the life pipe */

int srv_handover_check_life(int r, int w, char *why, size_t len)
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
    pthread_mutex_lock(&srv_ho.lock);
    srv_handover_prune();
    int k = snprintf(b, n, " %d %d %d", srv_ho.life_r, srv_ho.life_w, srv_ho.nfaulted);
    for (int i = 0; i < srv_ho.nfaulted && k > 0 && (size_t)k < n; i++)
        k += snprintf(b + k, n - (size_t)k, " %d", (int)srv_ho.faulted[i]);
    pthread_mutex_unlock(&srv_ho.lock);
    return k > 0 && (size_t)k < n ? 0 : -1;
}

int srv_handover_decode_list(const char **s)
{
    unsigned long long v[SRV_FAULTED_LIST], nv;
    if (srv_parse_nums(s, &nv, 1) != 0 || nv > SRV_FAULTED_LIST ||
        srv_parse_nums(s, v, (int)nv) != 0)
        return -1;
    for (unsigned long long i = 0; i < nv; i++)
        if (!v[i] || v[i] > INT_MAX) return -1;
    for (unsigned long long i = 0; i < nv; i++)
        srv_ho.faulted[i] = (pid_t)v[i];
    srv_ho.nfaulted = (int)nv;
    return 0;
}

int srv_handover_decode(const char **s, char *why, size_t len)
{
    unsigned long long v[2];
    if (srv_parse_nums(s, v, 2) != 0 || v[0] > INT_MAX || v[1] > INT_MAX ||
        srv_handover_decode_list(s) != 0) {
        snprintf(why, len, "malformed hand-over state");
        return -1;
    }
    if (srv_handover_check_life((int)v[0], (int)v[1], why, len) != 0) return -1;
    srv_ho.life_r = (int)v[0];
    srv_ho.life_w = (int)v[1];
    return 0;
}

int srv_handover_inherit(int fd)
{
    return fd >= 0 && (fd == srv_ho.life_r || fd == srv_ho.life_w);
}

int srv_handover_init(char **argv, int listen_fd, int control_fd, int lock_fd)
{
    srv_ho.argv0 = argv;
    srv_ho.lfd = listen_fd;
    srv_ho.cfd = control_fd;
    srv_ho.lockfd = lock_fd;
    if (srv_ho.life_r >= 0) return 0; /* a successor's or a fresh image's: the service's */
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    srv_ho.life_r = p[0];
    srv_ho.life_w = p[1];
    return 0;
}

int srv_handover_service_ended(void)
{
    if (atomic_load(&srv_ho.state) != SRV_HO_HANDED || srv_ho.life_r < 0) return 0;
    if (service_ended) return 1;
    struct pollfd p = {.fd = srv_ho.life_r, .events = POLLIN};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLHUP | POLLERR))) return 0;
    service_ended = 1;
    srv_log("The live server of this pipe directory has exited (the service ended): this one "
            "ends too");
    return 1;
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
    if (foreground && atomic_load(&srv_ho.state) == SRV_HO_HANDED && !service_ended &&
        (p = live_server()) > 0)
        kill(p, sig);
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
    if (atomic_load(&srv_ho.state) != SRV_HO_HANDED) {
        /* The live server: its status for a keeper, and end of file for the faulted. */
        unsigned char b = 0;
        if (srv_ho.life_w >= 0 && write(srv_ho.life_w, &b, 1) != 1)
            srv_log("Cannot tell the service's keeper this server's status: %s", strerror(errno));
        return;
    }
    if (!foreground) return; /* nobody waits for this pid */
    if (srv_handover_service_ended()) exit(read_status(srv_ho.life_r));
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", srv_ho.life_r);
    srv_log("No client left; this process keeps watch over the live server (the pid a service "
            "manager knows)");
    fcntl(srv_ho.life_r, F_SETFD, 0);
    char *args[] = {srv_ho.argv0[0], "--keeper", fd, NULL};
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
