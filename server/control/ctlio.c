/* mpsshim-control's talk with a server's control socket: connecting, a command and its
 * answer, and waiting for a server that was told to quit to be gone. Used for the pipe
 * directory's own server (ctl.c) and for its GPUs' own servers (ctlgpus.c). */
#define _GNU_SOURCE
#include "server/control/ctl.h"
#include "channel/proto.h"
#include "channel/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int mctl_connect(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", chan_pipe_dir(), CHAN_CONTROL_NAME);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) return s;
    if (s >= 0) close(s);
    return -1;
}

/* "quit" or "quit -t N": the server goes away after answering. */
int mctl_is_quit(const char *line)
{
    return strncmp(line, "quit", 4) == 0 && (line[4] == '\0' || line[4] == ' ' || line[4] == '\t');
}

/* A quit without -t: answered once the server has exited (wait_exit). */
int mctl_is_plain_quit(const char *line)
{
    return mctl_is_quit(line) && !line[4 + strspn(line + 4, " \t")];
}

/* Sends one command and prints its answer (up to the EOT byte; a NAK just before it marks a
 * failed command and is not printed). 0, 1 if the command failed, -1 if the connection
 * closed first, -2 if the server closed it without taking the command (the answer then
 * starts with a CAN byte: it is not printed, and the command may be sent again). */
int mctl_run(int s, const char *line, FILE *out)
{
    char msg[1100];
    snprintf(msg, sizeof(msg), "%s\n", line);
    /* A failed send is not the end: an answer the server sent before it closed (its reason
     * for turning this connection away) is still there to read. */
    if (send(s, msg, strlen(msg), MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET)
        return -1;
    char buf[4096];
    int held_nak = 0; /* a NAK ended the last read: printed only if more text follows */
    int first = 1;
    for (;;) {
        ssize_t n = read(s, buf, sizeof(buf));
        if (n <= 0) return mctl_is_quit(line) ? 0 : -1;
        if (first && buf[0] == '\x18') return -2;
        first = 0;
        char *eot = memchr(buf, '\x04', (size_t)n);
        size_t len = eot ? (size_t)(eot - buf) : (size_t)n;
        if (held_nak && len) fputc('\x15', out);
        if (eot && len == 0) break; /* held_nak stays: it was the last byte before EOT */
        held_nak = buf[len - 1] == '\x15';
        fwrite(buf, 1, len - (size_t)held_nak, out);
        if (eot) break;
    }
    fflush(out);
    return held_nak;
}

/* The pid of the server at the other end of s (0 if unknown: another pid namespace), and
 * its user (-1 if unknown). */
pid_t mctl_peer_pid(int s, uid_t *uid)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    int ok = getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0;
    if (uid) *uid = ok ? cr.uid : (uid_t)-1;
    return ok ? cr.pid : 0;
}

/* pid has exited: gone, or a zombie (every file it held, the GPU's and its locks included,
 * is released by then). */
static int exited(pid_t pid)
{
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, stat, sizeof(stat) - 1);
    close(fd);
    if (n <= 0) return 1;
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')'); /* the command name may hold anything */
    return !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
}

/* After a plain quit: returns once the server process has exited, so that a new server may
 * start at once (the server closes its connections only as it exits; then its pid leaves
 * the running state within moments: that wait is bounded, in case the pid was reused), and
 * its lock is free. The pid's state was not enough: with two H200s a `-d` right after quit
 * found the lock held (most likely the first thread shows as a zombie while the last one
 * still closes the GPU's descriptors, which takes a while). Both waits are bounded (10 s
 * each); a server that serves again meanwhile (its socket is there: a client started it)
 * ends the second. */
void mctl_wait_exit(int s, pid_t pid)
{
    char b[256];
    for (;;) {
        ssize_t n = read(s, b, sizeof(b));
        if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    for (int i = 0; pid > 0 && i < 1000 && !exited(pid); i++)
        usleep(10 * 1000);
    char lock[PATH_MAX], sock[PATH_MAX];
    snprintf(lock, sizeof(lock), "%s/server.lock", chan_pipe_dir());
    snprintf(sock, sizeof(sock), "%s/%s", chan_pipe_dir(), CHAN_SOCKET_NAME);
    int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    for (int i = 0; fd >= 0 && i < 1000 && flock(fd, LOCK_EX | LOCK_NB) != 0; i++) {
        if (access(sock, F_OK) == 0) break; /* a new server serves: the lock is its own */
        usleep(10 * 1000);
    }
    if (fd >= 0) close(fd); /* the lock, if taken, goes with it */
}
