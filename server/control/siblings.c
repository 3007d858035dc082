/* The other servers of this server's pipe directory. With MPSSHIM_SERVER_PER_GPU a pipe
 * directory holds a family: its own server (for clients that see several GPUs) and one per
 * GPU in its folders gpu-<value> (interpose/conn.c). They talk over their control sockets,
 * as mpsshim-control does: for memory passed between them (server/memory/ipcpeer.c) and for
 * the defaults a GPU's server takes when it starts (below).
 *
 * Decisions, and why:
 *  - Which sockets are talked to is decided here, from this server's own pipe directory,
 *    never from anything a client sends.
 *  - Only a peer of this server's user is talked to (SO_PEERCRED), as a control socket
 *    admits only that user.
 *  - Every wait is bounded (ASK_TIMEOUT_S for a whole answer): a sibling that hangs, or
 *    trickles its answer, holds the asking thread that long and no lock. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/limits/policy.h"
#include "server/core/devices.h"
#include "server/control/siblings.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define ASK_TIMEOUT_S 5

int srv_siblings_top(char *top, size_t len)
{
    snprintf(top, len, "%s", srv.pipe_dir);
    char *slash = strrchr(top, '/');
    if (!slash || strncmp(slash + 1, "gpu-", 4) != 0) return 0;
    *slash = '\0';
    return 1;
}

int srv_siblings_is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && strcmp(path, srv.pipe_dir) != 0;
}

/* Reads the answer a byte at a time up to its end (EOT), taking a descriptor that came with
 * a byte (the end line's first). 0, 1 (a NAK: the command failed) or -1. */
static int read_answer(int s, char *text, size_t len, int *fd)
{
    size_t n = 0;
    int nak = 0;
    uint64_t until = chan_now_ns() + ASK_TIMEOUT_S * 1000000000ull;
    *fd = -1;
    while (chan_now_ns() < until) {
        char b;
        union {
            struct cmsghdr h;
            char room[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec io = {.iov_base = &b, .iov_len = 1};
        struct msghdr m = {.msg_iov = &io,
                           .msg_iovlen = 1,
                           .msg_control = ctl.room,
                           .msg_controllen = sizeof(ctl)};
        ssize_t r = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR) continue;
        if (r != 1) break;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            int got;
            memcpy(&got, CMSG_DATA(c), sizeof(got));
            if (*fd >= 0) close(*fd); /* one is all an answer has */
            *fd = got;
        }
        if (b == '\x15') nak = 1;
        if (b == '\x04') {
            if (len) text[n] = '\0';
            return nak;
        }
        if (b != '\x15' && n + 1 < len) text[n++] = b;
    }
    if (*fd >= 0) close(*fd);
    *fd = -1;
    if (len) text[0] = '\0';
    return -1;
}

int srv_siblings_ask(const char *dir, const char *line, char *text, size_t len, int *fd)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int got = -1, rc = -1;
    if (len) text[0] = '\0';
    if (fd) *fd = -1;
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, CHAN_CONTROL_NAME) >=
        sizeof(sa.sun_path))
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct timeval tv = {.tv_sec = ASK_TIMEOUT_S};
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 &&
        connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.uid == getuid() &&
        send(s, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line))
        rc = read_answer(s, text, len, &got);
    close(s);
    if (fd)
        *fd = got;
    else if (got >= 0)
        close(got);
    return rc;
}

/* Asks the pipe directory's own server `get`: its one-word answer in value, 0; else -1. */
static int ask_top(const char *top, const char *get, char *value, size_t len)
{
    char q[200];
    snprintf(q, sizeof(q), "%s\n", get);
    if (srv_siblings_ask(top, q, value, len, NULL) != 0) return -1;
    value[strcspn(value, "\n")] = '\0';
    return value[0] && !strchr(value, ' ') ? 0 : -1;
}

/* Stores what was taken, under the policy's lock (policy.c reads it as each client
 * connects), and says so. */
static void took(int *to_int, uint64_t *to_mem, uint64_t v, const char *what, const char *value,
                 const char *top)
{
    pthread_mutex_lock(&srv_policy.lock);
    if (to_int) *to_int = (int)v;
    if (to_mem) *to_mem = v;
    pthread_mutex_unlock(&srv_policy.lock);
    srv_log("Took the default %s %s from the pipe directory's server (%s)", what, value, top);
}

void srv_siblings_inherit(void)
{
    char top[PATH_MAX], value[64];
    if (!srv_siblings_top(top, sizeof(top)) || srv.ndev != 1) return;
    char *end;
    double pct;
    if (ask_top(top, "get_default_active_thread_percentage", value, sizeof(value)) == 0 &&
        (pct = strtod(value, &end), *end == '\0') && pct >= 1 && pct < 100 &&
        pct == (double)(int)pct)
        took(&srv_policy.default_pct, NULL, (uint64_t)pct, "active thread percentage", value, top);
    if (ask_top(top, "get_default_client_priority", value, sizeof(value)) == 0 &&
        strcmp(value, "1") == 0)
        took(&srv_policy.default_priority, NULL, 1, "client priority", value, top);
    /* Its one device, by UUID: the pipe directory's server numbers the GPUs its own way. */
    char uuid[64], get[128];
    uint64_t mem;
    srv_dev_uuid(0, uuid, sizeof(uuid));
    snprintf(get, sizeof(get), "get_default_device_pinned_mem_limit %s", uuid);
    if (ask_top(top, get, value, sizeof(value)) == 0 && srv_parse_size(value, &mem) == 0 && mem)
        took(NULL, &srv_policy.default_mem[0], mem, "device memory limit", value, top);
}
