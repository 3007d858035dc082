/* handover.c, standby.c, service.c: what the files that use the family need of it (server.h is
 * the core), then what those three files share: handover.c hands over to a standby after a
 * fault, standby.c is the standby's side, service.c what the servers of one service share
 * (the faulted ones alive, the life pipe, the end, the keeper). */
#ifndef MPSSHIM_SERVER_HANDOVER_H
#define MPSSHIM_SERVER_HANDOVER_H

#include "server/core/server.h"

#include <pthread.h>
#include <sys/types.h>

/* handover.c: a new server process, started before as a standby, takes over after a fault
 * loses a device to this one. */
/* MPSSHIM_STANDBY: how far the standby gets before a fault (read once, logged if bad). */
#define SRV_STANDBY_OFF 0     /* none: the successor is started at the fault */
#define SRV_STANDBY_INIT 1    /* the driver loaded and cuInit run (the default) */
#define SRV_STANDBY_CONTEXT 2 /* and the devices' contexts made */
int srv_standby_mode(void);
/* Standby, first in main: 1 when this process is a standby (its socket taken, its death
 * tied to its server's), 0 when not, 2 when its server is already gone (exit quietly), -1
 * (why says) when the description is malformed. */
int srv_standby_adopt(char *why, size_t len);
/* Standby, once prepared (ready_ms after it started): says so and waits to be told to take
 * over. 1 with the sockets and lock handed on (MPSSHIM_READY_FD then names the socket for
 * "ready"), 2 when its server went or no longer needs it (exit quietly), -1 (why says)
 * when the hand-over is malformed. */
int srv_standby_wait(unsigned ready_ms, int *listen_fd, int *control_fd, int *lock_fd, char *why,
                     size_t len);
/* main: the arguments to start a standby with, and the sockets and lock it takes; makes the
 * service's life pipe unless this server carries one on. 0, or -1 (errno). */
int srv_handover_init(char **argv, int listen_fd, int control_fd, int lock_fd);
/* main, at start: SIGUSR1 tells a faulted server to end every client now (too many faulted
 * servers are alive: the live server's hand-over says). */
void srv_handover_signals(void);
/* Fault thread: 1 once this faulted server was told to end every client now. */
int srv_handover_end_all(void);
/* Fault thread: device dev faulted with err; tells the standby to take over (once per
 * server; a standby is started first if there is none). */
void srv_handover_start(int dev, CUresult err);
/* Main loop: whether to accept clients (not while a successor starts, nor after). */
int srv_handover_accepting(void);
/* Main loop: the socket of the standby or starting successor (-1: none to watch). */
int srv_handover_fd(void);
/* Main loop: hears the standby or successor, replaces a standby that died, retries a
 * failed hand-over when due; 1 once the successor serves (close the listening sockets,
 * exit with the last client). */
int srv_handover_poll(void);
/* 1 once a successor serves this server's pipe directory. */
int srv_handover_done(void);
/* Main loop, once handed over: 1 when the live server has exited (the service ended: this
 * one ends too). */
int srv_handover_service_ended(void);
/* The listening sockets and locked file a server hands on: 0 (each made close-on-exec
 * again), or -1 (why says) when any is something else. */
int srv_handover_check_fds(int listen_fd, int control_fd, int lock_fd, char *why, size_t len);
/* A fresh image (recycle.c): what it carries on of the hand-over (the life pipe, the
 * faulted servers), appended as text at b; 0, or -1 (does not fit). decode takes it back at
 * *s (moved past it): 0, or -1 (why says). inherit: 1 if fd must survive the execve. */
int srv_handover_encode(char *b, size_t n);
int srv_handover_decode(const char **s, char *why, size_t len);
int srv_handover_inherit(int fd);
/* Stops the standby (before a fresh image replaces this one: the new one starts its own). */
void srv_handover_standby_stop(void);
/* Successor, once serving: logs the recovery time and whether a standby was used (the
 * time its contexts were made again, or, where they are made at first use, the time it
 * serves again: contexts_made 0); tells the oldest faulted servers beyond the bound to end
 * their clients. */
void srv_handover_adopted(int contexts_made);
/* get_server_status: the faulted servers alive and the standby, a line each. */
void srv_handover_describe(char *out, size_t len);
/* A faulted server in the foreground (the service's main process) passes sig (a stop, a
 * reopening of the logs) on to the live server. */
void srv_handover_forward(int sig, int foreground);
/* At shutdown: stops the standby or a successor still starting; in the foreground, passes
 * the stop on to the live server when this server was told to (`told`: SIGTERM to a
 * service's main process, say). */
void srv_handover_end(int told, int foreground);
/* Last in main: the live server writes its status into the life pipe and returns; a
 * faulted one in the foreground exits with the live server's status if it has ended, else
 * becomes the keeper (execve); other faulted ones return. */
void srv_handover_exit(int foreground);
/* `mpsshim-server --keeper FD`: waits for the end of the service's life pipe FD, passing
 * SIGTERM, SIGINT and SIGHUP on to the live server; its exit status. */
int srv_keeper(const char *fd);

/* ---------------------------------------------------------------- shared by the three files */

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
