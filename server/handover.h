/* What the files of the hand-over after a fault share: handover.c (the faulted server
 * hands over to a standby), standby.c (the standby takes over) and service.c (the servers
 * of one service: the faulted ones alive, the life pipe, the end, the keeper). */
#ifndef MPSSHIM_HANDOVER_H
#define MPSSHIM_HANDOVER_H

#include "server/server.h"

#include <pthread.h>
#include <sys/types.h>

/* A standby's environment names its server: "1 PID". */
#define SRV_STANDBY_ENV "MPSSHIM_STANDBY_OF"
#define SRV_FAULTED_MAX 4   /* faulted servers of a service alive at once, at most */
#define SRV_FAULTED_LIST 16 /* faulted servers a server knows of */
/* Handed on: the client and control listening sockets, the lock, the life pipe's ends. */
enum { SRV_HO_LISTEN, SRV_HO_CONTROL, SRV_HO_LOCK, SRV_HO_LIFE_R, SRV_HO_LIFE_W, SRV_HO_NFDS };
/* The hand-over: none yet, the successor told and starting, the successor serving. */
enum { SRV_HO_IDLE, SRV_HO_STARTING, SRV_HO_HANDED };

/* Defined in service.c. */
struct srv_handover_state {
    pthread_mutex_t lock;
    _Atomic int state; /* SRV_HO_* */
    char **argv0;      /* main's argv, for the standby and the keeper */
    int lfd, cfd, lockfd;
    int life_r, life_w;
    /* Faulted servers before this one, oldest first (this one's own pid is added when it
     * hands over). Main thread and control readers: lock held. */
    pid_t faulted[SRV_FAULTED_LIST];
    int nfaulted;
};
extern struct srv_handover_state srv_ho;

/* service.c: drops the faulted servers of the list that are gone (lock held); the list at
 * *s ("N PID...") taken in: 0 with *s past it, or -1; 0 if r and w are the two ends of one
 * pipe (each made close-on-exec again), else -1 with why. */
void srv_handover_prune(void);
int srv_handover_decode_list(const char **s);
int srv_handover_check_life(int r, int w, char *why, size_t len);
/* handover.c: MPSSHIM_STANDBY's word for the mode in force. */
const char *srv_standby_mode_name(void);

#endif
