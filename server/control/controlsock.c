/* The control socket: its connections, each served by a thread of its own, bounded in
 * number and closed when idle or when a newcomer needs the place. A connection reads
 * command lines and writes each answer (control.c) followed by an EOT byte on a line of
 * its own, with a NAK byte just before it when the command failed. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/log.h"
#include "server/control/control.h"
#include "server/control/answer.h"
#include "server/control/settings.h"
#include "channel/fdpass.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int srv_control_listen(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", srv.pipe_dir,
                         CHAN_CONTROL_NAME) >= sizeof(sa.sun_path))
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return -1;
    unlink(sa.sun_path);
    mode_t old = umask(0077);
    int ok = bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(s, 16) == 0;
    umask(old);
    if (!ok) {
        close(s);
        return -1;
    }
    /* The last step before the server serves (the client socket is already listening). */
    srv_clog("NEW SERVER %d: Ready", (int)getpid());
    return s;
}

/* Who connects here. The socket file is made 0700 (the umask at bind) in a pipe directory
 * of the server's user, so only that user and root can open it (SO_PEERCRED is checked all
 * the same, as for clients). A hostile program of the user's own therefore has the same uid
 * as the operator it would lock out: a place kept "for the server's own user" would be
 * taken by it as easily. What keeps operators in is eviction instead: a new connection
 * always gets in, closing (if the table is full) the one idle the longest, so that a crowd
 * of idle connections, however large, holds nothing a newcomer cannot take. The one peer
 * that can be told apart is root in a server that is not root's (an administrator): it has
 * a place no other peer may take, and the server user's connections never close one of
 * its connections to make room.
 *
 * Each connection has a thread (answers may block on a slow reader; the main loop must
 * not) and an answer buffer, so they are bounded. One idle for MPSSHIM_CONTROL_IDLE
 * seconds is closed: it no longer holds the idle server's fresh start off (recycle.c). A
 * connection closed while it waits for a command is told why first, on a line that starts
 * with a CAN byte, and only then, never once a command was taken: mpsshim-control, seeing
 * it, connects again and sends its command there (an interactive session is not cut). */
#define SRV_MAX_CONTROL 32
/* Places for connections told to go whose thread has not ended yet (moments). */
#define CONTROL_SLOTS (2 * SRV_MAX_CONTROL)

enum conn_state {
    CONN_FREE,      /* the place is free */
    CONN_WAITING,   /* waiting for (the rest of) a command: idle */
    CONN_RUNNING,   /* a command is being run: never closed under it */
    CONN_ANSWERING, /* its answer is being written (the reader may be slow) */
    CONN_GONE,      /* told to go; its thread closes the socket */
};

struct conn {
    int fd;
    enum conn_state state;
    int admin;      /* root, in a server that is not root's: the reserved place */
    pid_t pid;      /* the peer, for the log */
    uint64_t since; /* when it last did something: a byte read, its answer's progress */
};

/* Guarded by conns_lock, which nobody holds across a wait on a peer. */
static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn conns[CONTROL_SLOTS];
static uint64_t idle_ns; /* 0: never closed for idleness; set before the first thread */

/* Says why on k's socket, if that can be done without blocking, and closes it for both
 * directions (its thread wakes and ends). Only a waiting connection is told: anything
 * else would land inside an answer. Under conns_lock. */
static void send_away(struct conn *k, const char *why)
{
    if (k->state == CONN_WAITING) {
        char line[200];
        int n = snprintf(line, sizeof(line), "\x18%s\n", why);
        if (send(k->fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
            /* not even that fits: it is closed all the same */
        }
    }
    shutdown(k->fd, SHUT_RDWR);
    k->state = CONN_GONE;
}

/* Moves k to state `to` and notes the time; 0, or -1 when it was told to go meanwhile. */
static int conn_step(struct conn *k, enum conn_state to)
{
    pthread_mutex_lock(&conns_lock);
    int gone = k->state == CONN_GONE;
    if (!gone) {
        k->state = to;
        k->since = chan_now_ns();
    }
    pthread_mutex_unlock(&conns_lock);
    return gone ? -1 : 0;
}

/* Returns once there is input on k, its peer hung up, or it was told to go: by the main
 * loop, or here, once it was idle for MPSSHIM_CONTROL_IDLE seconds. */
static void wait_input(struct conn *k)
{
    for (;;) {
        int ms = -1;
        if (idle_ns) {
            pthread_mutex_lock(&conns_lock);
            uint64_t now = chan_now_ns(), since = k->since;
            int gone = k->state == CONN_GONE;
            if (!gone && now - since >= idle_ns) {
                send_away(k, "Closed: this control connection was idle for "
                             "MPSSHIM_CONTROL_IDLE seconds; connect again");
                srv_clog("Closed the control connection of process %d: idle for %llu s",
                         (int)k->pid, (unsigned long long)((now - since) / 1000000000ull));
                gone = 1;
            }
            pthread_mutex_unlock(&conns_lock);
            if (gone) return; /* its read ends it */
            uint64_t left = idle_ns - (now - since);
            ms = left / 1000000u >= 60000 ? 60000 : (int)(left / 1000000u) + 1;
        }
        struct pollfd pf = {.fd = k->fd, .events = POLLIN};
        int r = poll(&pf, 1, ms);
        if (r > 0 || (r < 0 && errno != EINTR)) return;
    }
}

/* Writes all of buf to k's peer (blocking: SO_SNDTIMEO bounds a reader that stops
 * reading). 0, or -1 when the connection ended or was told to go. */
static int send_answer(struct conn *k, const char *buf, size_t len)
{
    size_t sent = 0;
    while (sent < len) {
        ssize_t w = send(k->fd, buf + sent, len - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0 || conn_step(k, CONN_ANSWERING) != 0) return -1;
        sent += (size_t)w;
    }
    return 0;
}

/* An answer's first size, and its ceiling: that, and for each client the server may have
 * its longest block, get_client_info's or ps's (a row per device, each with a command line
 * of up to 511 bytes, escaped), generously. */
#define ANSWER_FIRST (256u << 10)
#define ANSWER_PER_CLIENT 1024u
#define ANSWER_PER_DEVICE 1024u

/* Whether process pid runs this very program (the file of /proc/self/exe): a sibling server,
 * which ipc_peer_mirror answers alone (control.c). */
static int same_program(pid_t pid)
{
    char path[64];
    struct stat a, b;
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    return pid > 0 && stat(path, &a) == 0 && stat("/proc/self/exe", &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void control_main(struct conn *k)
{
    char in[1024];
    size_t have = 0;
    struct srv_answer out;
    size_t per = ANSWER_PER_CLIENT + (size_t)srv.ndev * ANSWER_PER_DEVICE;
    if (srv_answer_init(&out, ANSWER_FIRST,
                        srv_answer_ceiling(ANSWER_FIRST, srv.max_clients, per)) != 0)
        return;
    out.server = same_program(k->pid);
    for (;;) {
        wait_input(k);
        ssize_t r = read(k->fd, in + have, sizeof(in) - 1 - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0 || conn_step(k, CONN_WAITING) != 0) break;
        have += (size_t)r;
        in[have] = '\0';
        char *nl;
        while ((nl = memchr(in, '\n', have))) {
            *nl = '\0';
            /* Taken only while it was not told to go: a connection told so never had
             * its command run, and mpsshim-control may send it again elsewhere. */
            if (conn_step(k, CONN_RUNNING) != 0) goto done;
            int failed = srv_control_command(in, &out);
            const char *end = failed ? "\x15\x04\n" : "\x04\n";
            /* A descriptor (ipc_peer_export's) travels with the end line, which a reader
             * takes a byte at a time (server/memory/ipcpeer.c). */
            if (conn_step(k, CONN_ANSWERING) != 0 || send_answer(k, out.buf, out.n) != 0 ||
                (out.fd >= 0 ? chan_send_fd(k->fd, end, strlen(end), out.fd)
                             : send_answer(k, end, strlen(end))) != 0 ||
                conn_step(k, CONN_WAITING) != 0)
                goto done;
            srv_answer_reset(&out); /* the descriptor sent is closed here */
            have -= (size_t)(nl + 1 - in);
            memmove(in, nl + 1, have);
        }
        if (have == sizeof(in) - 1) have = 0; /* an absurdly long line: dropped */
    }
done:
    srv_answer_free(&out);
}

static void *control_thread(void *arg)
{
    struct conn *k = arg;
    control_main(k);
    pthread_mutex_lock(&conns_lock);
    close(k->fd);
    k->fd = -1;
    k->state = CONN_FREE;
    pthread_mutex_unlock(&conns_lock);
    return NULL;
}

int srv_control_busy(void)
{
    int busy = 0;
    pthread_mutex_lock(&conns_lock);
    for (int i = 0; i < CONTROL_SLOTS && !busy; i++)
        busy = conns[i].state != CONN_FREE && conns[i].state != CONN_GONE;
    pthread_mutex_unlock(&conns_lock);
    return busy;
}

/* MPSSHIM_CONTROL_IDLE, read once (by the main loop, before any connection's thread). */
static void read_idle(void)
{
    static int done;
    if (done++) return;
    idle_ns = srv_settings_seconds_ns(CHAN_SET_CONTROL_IDLE);
}

/* A connection that can be closed to make room for one of `admin`'s: the one idle (or
 * stuck answering) the longest, a server user's before an administrator's, one with a
 * command waiting to be read last. NULL when every connection is running a command.
 * Under conns_lock. */
static struct conn *victim(int admin)
{
    struct conn *best = NULL;
    int best_rank = 0;
    for (int i = 0; i < CONTROL_SLOTS; i++) {
        struct conn *k = &conns[i];
        if ((k->state != CONN_WAITING && k->state != CONN_ANSWERING) || (k->admin && !admin))
            continue;
        struct pollfd pf = {.fd = k->fd, .events = POLLIN};
        int pending =
            k->state == CONN_WAITING && poll(&pf, 1, 0) > 0 && !(pf.revents & (POLLHUP | POLLERR));
        int rank = 1 + !k->admin * 2 + !pending; /* higher: closed first */
        if (!best || rank > best_rank || (rank == best_rank && k->since < best->since)) {
            best = k;
            best_rank = rank;
        }
    }
    return best;
}

void srv_control_turn_away(int fd, const char *why)
{
    /* Its command first, if it is there: closing with it unread would reset the peer
     * (bounded: a peer that keeps writing must not hold the main loop). */
    char sink[1024];
    for (int i = 0; i < 8 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
    }
    char line[200];
    int n = snprintf(line, sizeof(line), "%s\n\x15\x04\n", why);
    if (send(fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* closing is all that is left to do */
    }
    close(fd);
}

void srv_control_serve(int fd)
{
    read_idle();
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 ||
        (cr.uid != getuid() && cr.uid != 0)) {
        srv_control_turn_away(fd, "This server serves its own user only");
        return;
    }
    int admin = cr.uid == 0 && getuid() != 0;
    pthread_mutex_lock(&conns_lock);
    struct conn *slot = NULL;
    int open = 0, users = 0;
    for (int i = 0; i < CONTROL_SLOTS; i++) {
        struct conn *k = &conns[i];
        if (k->state == CONN_FREE && !slot) slot = k;
        open += k->state != CONN_FREE && k->state != CONN_GONE;
        users += k->state != CONN_FREE && k->state != CONN_GONE && !k->admin;
    }
    /* The server user's connections leave the administrator's place free. */
    int full = open >= SRV_MAX_CONTROL || (!admin && getuid() != 0 && users >= SRV_MAX_CONTROL - 1);
    if (slot && full) {
        struct conn *v = victim(admin);
        if (v) {
            uint64_t idle = chan_now_ns() - v->since;
            send_away(v, "Closed: the server's control connections were all taken and this "
                         "one was idle the longest; connect again");
            srv_clog("Closed the control connection of process %d (idle for %llu ms) for one "
                     "of process %d: %d connections open, at most %d",
                     (int)v->pid, (unsigned long long)(idle / 1000000u), (int)cr.pid, open,
                     SRV_MAX_CONTROL);
            full = 0;
        }
    }
    if (!slot || full) {
        pthread_mutex_unlock(&conns_lock);
        srv_control_turn_away(fd, "Too many control connections; try again");
        return;
    }
    *slot = (struct conn){
        .fd = fd, .state = CONN_WAITING, .admin = admin, .pid = cr.pid, .since = chan_now_ns()};
    pthread_mutex_unlock(&conns_lock);
    /* An answer nobody reads for a minute ends the connection. */
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    pthread_t t;
    if (pthread_create(&t, NULL, control_thread, slot) == 0) {
        pthread_detach(t);
        return;
    }
    pthread_mutex_lock(&conns_lock);
    slot->state = CONN_FREE;
    slot->fd = -1;
    pthread_mutex_unlock(&conns_lock);
    close(fd);
}
