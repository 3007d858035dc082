/* mpsshim-control (ctl.c): its talk with a server's control socket (ctlio.c), and its part
 * for the GPUs' own servers (ctlgpus.c). */
#ifndef MPSSHIM_SERVER_CTL_H
#define MPSSHIM_SERVER_CTL_H

#include <stdio.h>
#include <sys/types.h>

/* ctlio.c. A connection to the control socket of MPSSHIM_PIPE_DIRECTORY's server; -1 if
 * none. */
int mctl_connect(void);
/* "quit" or "quit -t N"; and a quit without -t (answered once the server has exited). */
int mctl_is_quit(const char *line);
int mctl_is_plain_quit(const char *line);
/* Sends one command and prints its answer to out. 0, 1 if the command failed, -1 if the
 * connection closed first, -2 if the server closed it without taking the command. */
int mctl_run(int s, const char *line, FILE *out);
/* The pid of the server at the other end of s (0 if unknown), and its user. */
pid_t mctl_peer_pid(int s, uid_t *uid);
/* After a plain quit: returns once the server process pid has exited (bounded). */
void mctl_wait_exit(int s, pid_t pid);

/* ctlgpus.c: the servers of the pipe directory's folders gpu-* (MPSSHIM_SERVER_PER_GPU). */

/* How many of them answer. */
int mctl_gpus_count(void);
/* A command naming a GPU's server by its pid (get_client_list PID, terminate_client PID ...,
 * ps -p PID) goes to that server: 1 when it did, its result in *r; 0 when the command names
 * none of them (the pipe directory's own server takes it). */
int mctl_gpus_route(const char *line, int *r);
/* Whether line is get_client_info CLIENT_PID: the pipe directory's server's answer is held
 * (mctl_gpus_client_info) until it is known whether the client is its. */
int mctl_gpus_is_client_info(const char *line);
/* The client is none of the pipe directory's server's (its answer, a failure, in held):
 * the first GPU's server that knows it answers; else held is printed. The result. */
int mctl_gpus_client_info(const char *line, const char *held, size_t len);
/* After the pipe directory's own server took line (its result r): what the GPUs' servers
 * are given too. get_server_list: their pids; quit: they stop; ps, get_device_client_list,
 * get_server_status and get_client_info (without a pid): their answers follow; the
 * set_default_* commands: given to each (a failure there is printed and makes *r 1). */
void mctl_gpus_after(const char *line, int *r);
/* With no server in the pipe directory itself but some in its GPUs' folders: the commands
 * read from stdin, as above without the pipe directory's own; the get_default_* commands
 * and the others that name no server are refused, saying where the servers are. */
int mctl_gpus_only(void);

#endif
