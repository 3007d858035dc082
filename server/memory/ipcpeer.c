/* Physical memory shared between the servers of one pipe directory (MPSSHIM_SERVER_PER_GPU
 * gives each GPU its own server, in the pipe directory's folder gpu-<value>): a client of
 * this server imports a descriptor that a client of a sibling server exported, as NCCL's
 * ranks of different GPUs do (cuMemExportToShareableHandle / cuMemImportFromShareableHandle
 * with POSIX file descriptors).
 *
 * The descriptor a client holds is a memfd of the exporting server's handle bytes
 * (interpose/ipc.c), which name a share of that server's only (ipc.c). This server asks the
 * siblings for it: it connects to each one's control socket and sends
 * `ipc_peer_export <nonce> <id> <secret>`; the server whose nonce it is checks the secret
 * and answers with the driver's own descriptor of the physical allocation, sent with the
 * answer's end (server/control/controlsock.c), which this server then imports with the
 * driver. Natively the importer's process holds a reference of the memory's own; so does this
 * server from then on, whatever the exporter does.
 *
 * Decisions, and why:
 *  - Which sockets are asked is decided here, never by the client: the siblings are the
 *    folders gpu-* of the pipe directory this server is in (or of its parent, when this is a
 *    GPU's server) and that directory's own server. A client cannot point this server at
 *    another socket; the handle's secret is what proves it was given the memory.
 *  - Only a peer of this server's user is talked to (SO_PEERCRED), as the control socket
 *    admits only that user.
 *  - Every wait is bounded: PEER_TIMEOUT_S for each sibling's whole answer, and at most
 *    PEER_MAX_ASKED siblings asked. A sibling that hangs, or trickles its answer, holds only
 *    the importing client's worker, and only that long; no lock is held meanwhile.
 *  - The memory is not counted against the importer's limit here: it lies on another
 *    server's GPU, where its exporter is charged for it. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/memory/ipcpeer.h"

#include <dirent.h>
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

#define PEER_TIMEOUT_S 5
/* Siblings asked at most for one handle: the GPUs a machine has, and the directory's own. */
#define PEER_MAX_ASKED (CHAN_MAX_DEVICES + 1)

/* Reads the answer a byte at a time up to its end line (EOT), taking the descriptor that
 * came with the end line's first byte. 0 when it ended without a NAK and gave "size N" and a
 * descriptor; else -1 (with any descriptor closed). */
static int read_answer(int s, int *fd, uint64_t *size)
{
    char text[256];
    size_t n = 0;
    int nak = 0;
    uint64_t until = chan_now_ns() + PEER_TIMEOUT_S * 1000000000ull;
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
            text[n] = '\0';
            unsigned long long v;
            char tail;
            if (!nak && *fd >= 0 && sscanf(text, "size %llu%c", &v, &tail) == 2 && tail == '\n') {
                *size = v;
                return 0;
            }
            break;
        }
        if (n < sizeof(text) - 1) text[n++] = b;
    }
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return -1;
}

/* Asks the server whose control socket is in dir. 0 with *fd, else -1. */
static int ask(const char *dir, const char *line, int *fd, uint64_t *size)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, CHAN_CONTROL_NAME) >=
        sizeof(sa.sun_path))
        return -1;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct timeval tv = {.tv_sec = PEER_TIMEOUT_S};
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    int rc = -1;
    if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == 0 &&
        connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.uid == getuid() &&
        send(s, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line))
        rc = read_answer(s, fd, size);
    close(s);
    return rc;
}

/* Whether path is a directory itself (not a link to one) other than this server's. */
static int sibling_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && strcmp(path, srv.pipe_dir) != 0;
}

int srv_ipc_peer_fetch(uint64_t nonce, uint64_t id, const uint8_t secret[16], int *fd,
                       uint64_t *size)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "ipc_peer_export %016llx %llu ", (unsigned long long)nonce,
                     (unsigned long long)id);
    for (int i = 0; i < 16; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", secret[i]);
    snprintf(line + n, sizeof(line) - (size_t)n, "\n");

    /* The family's top: this server's pipe directory, or its parent when this is a GPU's. */
    char top[PATH_MAX];
    snprintf(top, sizeof(top), "%s", srv.pipe_dir);
    char *slash = strrchr(top, '/');
    int gpu_server = slash && strncmp(slash + 1, "gpu-", 4) == 0;
    if (gpu_server) {
        *slash = '\0';
        if (ask(top, line, fd, size) == 0) return 0;
    }
    DIR *d = opendir(top);
    if (!d) return -1;
    int rc = -1, asked = gpu_server;
    struct dirent *e;
    while (rc != 0 && asked < PEER_MAX_ASKED && (e = readdir(d))) {
        char sub[PATH_MAX];
        if (strncmp(e->d_name, "gpu-", 4) != 0 ||
            (size_t)snprintf(sub, sizeof(sub), "%s/%s", top, e->d_name) >= sizeof(sub) ||
            !sibling_dir(sub))
            continue;
        asked++;
        rc = ask(sub, line, fd, size);
    }
    closedir(d);
    return rc;
}
