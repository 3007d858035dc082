/* The main loop's accept of a connection: out of descriptors, a connection left waiting would
 * keep poll answering and the loop spinning, so one descriptor is kept spare to take it and
 * refuse it with the reason (the client limit itself: server/core/capacity.c). */
#define _GNU_SOURCE
#include "server/control/admit.h"
#include "server/control/control.h"
#include "server/core/capacity.h"
#include "server/core/server.h"
#include "server/core/clients.h"
#include "channel/chan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

/* Answers the connection s, taken with the spare descriptor, as a client past
 * MPSSHIM_MAX_CLIENTS is answered (client.c), without blocking: the shim then reports
 * CUDA_ERROR_MPS_MAX_CLIENTS_REACHED and does not run the process on the driver, where it
 * would be outside the limits the operator set. machine: ENFILE, not EMFILE. */
static void refuse_unserved(int s, int machine)
{
    /* The hello first, as far as it is there: closing with it unread would reset the peer
     * (bounded: a peer that keeps writing must not hold the main loop). A hello still to
     * come fails to send, and the shim reads this answer all the same (interpose/conn.c). */
    char sink[4096];
    for (int i = 0; i < 4 && recv(s, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++) {
    }
    struct ucred cr = {0};
    socklen_t cl = sizeof(cr);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) cr.pid = 0;
    struct chan_welcome w = {.magic = CHAN_MAGIC,
                             .major = CHAN_PROTO_MAJOR,
                             .minor = CHAN_PROTO_MINOR,
                             .status = CHAN_WELCOME_FULL,
                             .server_pid = getpid()};
    char left[160];
    srv_capacity_no_fds(left, sizeof(left), machine ? ENFILE : EMFILE);
    snprintf(w.message, sizeof(w.message), "client process %d: %s", (int)cr.pid, left);
    if (send(s, &w, sizeof(w), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* a peer already gone: closing is all that is left */
    }
}

/* The descriptor kept to take a connection with when none is left (-1: not had again yet). */
static int spare = -1;

void srv_admit_init(void)
{
    if (spare < 0) spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

int srv_admit_accept(int lfd, int control)
{
    static int said;
    /* Taken again (after a refusal) while a descriptor is free. */
    if (spare < 0) spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s >= 0) {
        said = 0;
        return s;
    }
    if (errno != EMFILE && errno != ENFILE) return -1;
    if (spare < 0) {
        /* Another thread took the descriptor freed for it: the connection waits, and the
         * main loop must not spin on it meanwhile. */
        usleep(10 * 1000);
        return -1;
    }
    int machine = errno == ENFILE;
    close(spare);
    s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s >= 0 && control) {
        char left[160], line[220];
        srv_capacity_no_fds(left, sizeof(left), machine ? ENFILE : EMFILE);
        snprintf(line, sizeof(line), "Not served: %s; try again once clients leave", left);
        srv_control_turn_away(s, line);
    } else if (s >= 0) {
        refuse_unserved(s, machine);
        close(s);
    }
    spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!said++)
        srv_log("Out of file descriptors with %u clients (RLIMIT_NOFILE %llu): new clients are "
                "refused (CUDA_ERROR_MPS_MAX_CLIENTS_REACHED) and control connections turned "
                "away until some leave; raise the hard limit or lower MPSSHIM_MAX_CLIENTS",
                srv_clients_live(), srv_capacity_nofile());
    return -1;
}
