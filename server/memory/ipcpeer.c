/* Physical memory and events shared between the servers of one pipe directory
 * (MPSSHIM_SERVER_PER_GPU gives each GPU its own server, in the pipe directory's folder
 * gpu-<value>): a client of this server imports a descriptor that a client of a sibling
 * server exported, as NCCL's ranks of different GPUs do (cuMemExportToShareableHandle /
 * cuMemImportFromShareableHandle with POSIX file descriptors), or opens an IPC event handle
 * a client of a sibling made (cuIpcOpenEventHandle, as torch.multiprocessing does for the
 * CUDA tensors it passes): the sibling answers with the driver's own handle of its event.
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
 *  - Every wait is bounded: 5 s for each sibling's whole answer (server/control/siblings.c),
 *    and at most PEER_MAX_ASKED siblings asked. A sibling that hangs, or trickles its answer, holds
 * only the importing client's worker, and only that long; no lock is held meanwhile.
 *  - The memory is not counted against the importer's limit here: it lies on another
 *    server's GPU, where its exporter is charged for it. */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/memory/ipcpeer.h"
#include "server/control/siblings.h"
#include "server/core/hex.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Siblings asked at most for one handle: the GPUs a machine has, and the directory's own. */
#define PEER_MAX_ASKED (CHAN_MAX_DEVICES + 1)

/* What a handle is asked for: memory ("size N" and a descriptor) or an event ("event" and
 * the driver's handle in hex, no descriptor). */
struct want {
    uint8_t *event; /* CU_IPC_HANDLE_SIZE bytes: an event wanted; NULL: memory */
    int *fd;
    uint64_t *size;
    struct srv_mirror_of *mirror; /* a mirror's mapping wanted ("mirror ..."), with *fd */
};

/* 0 when text is "event " and CU_IPC_HANDLE_SIZE bytes in hex, ending the line; out gets them. */
static int event_text(const char *text, uint8_t *out)
{
    const char *end;
    return strncmp(text, "event ", 6) == 0 &&
                   srv_hex_get(text + 6, out, CU_IPC_HANDLE_SIZE, &end) == 0 && !strcmp(end, "\n")
               ? 0
               : -1;
}

/* Asks the server whose control socket is in dir. 0 with what w wants, else -1. */
static int ask(const char *dir, const char *line, const struct want *w)
{
    char text[256];
    unsigned long long v;
    char tail;
    int fd = -1;
    int answered = srv_siblings_ask(dir, line, text, sizeof(text), &fd) == 0;
    unsigned long long m[5];
    if (answered && w->mirror && fd >= 0 &&
        sscanf(text, "mirror %llx %llu %llx %llu %llu%c", &m[0], &m[1], &m[2], &m[3], &m[4],
               &tail) == 6 &&
        tail == '\n') {
        *w->fd = fd;
        *w->mirror = (struct srv_mirror_of){
            .base = m[0], .bytes = m[1], .value = m[2], .size = m[3], .serial = m[4]};
        return 0;
    }
    if (answered && !w->event && !w->mirror && fd >= 0 &&
        sscanf(text, "size %llu%c", &v, &tail) == 2 && tail == '\n') {
        *w->fd = fd;
        *w->size = v;
        return 0;
    }
    if (fd >= 0) close(fd);
    return answered && w->event && event_text(text, w->event) == 0 ? 0 : -1;
}

/* pid: the mirror's process (w->mirror), else unused. */
static int fetch(uint64_t nonce, uint64_t id, const uint8_t secret[16], long pid,
                 const struct want *w)
{
    char line[180], hex[33];
    srv_hex_put(hex, secret, 16);
    if (w->mirror)
        snprintf(line, sizeof(line), "ipc_peer_mirror %016llx %llu %s %ld\n",
                 (unsigned long long)nonce, (unsigned long long)id, hex, pid);
    else
        snprintf(line, sizeof(line), "ipc_peer_export %016llx %llu %s\n", (unsigned long long)nonce,
                 (unsigned long long)id, hex);

    /* The family's top: this server's pipe directory, or its parent when this is a GPU's. */
    char top[PATH_MAX];
    int gpu_server = srv_siblings_top(top, sizeof(top));
    if (gpu_server && ask(top, line, w) == 0) return 0;
    DIR *d = opendir(top);
    if (!d) return -1;
    int rc = -1, asked = gpu_server;
    struct dirent *e;
    while (rc != 0 && asked < PEER_MAX_ASKED && (e = readdir(d))) {
        char sub[PATH_MAX];
        if (strncmp(e->d_name, "gpu-", 4) != 0 ||
            (size_t)snprintf(sub, sizeof(sub), "%s/%s", top, e->d_name) >= sizeof(sub) ||
            !srv_siblings_is_dir(sub))
            continue;
        asked++;
        rc = ask(sub, line, w);
    }
    closedir(d);
    return rc;
}

int srv_ipc_peer_fetch(uint64_t nonce, uint64_t id, const uint8_t secret[16], int *fd,
                       uint64_t *size)
{
    *fd = -1;
    struct want w = {.fd = fd, .size = size};
    return fetch(nonce, id, secret, 0, &w);
}

int srv_ipc_peer_fetch_event(uint64_t nonce, uint64_t id, const uint8_t secret[16],
                             uint8_t event[CU_IPC_HANDLE_SIZE])
{
    struct want w = {.event = event};
    return fetch(nonce, id, secret, 0, &w);
}

int srv_ipc_peer_fetch_mirror(uint64_t nonce, uint64_t id, const uint8_t secret[16], pid_t pid,
                              int *fd, struct srv_mirror_of *of)
{
    *fd = -1;
    struct want w = {.fd = fd, .mirror = of};
    return fetch(nonce, id, secret, (long)pid, &w);
}
