/* Starting a server, the parts every starter shares: the shim (a server on demand),
 * `mpsshim-control -d`, and the server itself (its pipe and log directories). The server
 * says "ready" (or why it failed) on the pipe whose write end it finds in
 * MPSSHIM_READY_FD; the starter waits for that line. */
#ifndef MPSSHIM_SPAWN_H
#define MPSSHIM_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

/* MPS's names and default directories (docs/mps-compat.md). A program run under one of
 * NVIDIA's names (nvidia-cuda-mps-control, from make install-mps-compat) uses MPS's
 * default directories, as does any program with MPSSHIM_MPS_DEFAULTS=1 (a client, whose
 * name is the application's, needs the variable); MPSSHIM_MPS_DEFAULTS=0 turns them off. */
#define CHAN_MPS_NAME_PREFIX "nvidia-cuda-mps-"
#define CHAN_MPS_PIPE_DIR "/tmp/nvidia-mps"
#define CHAN_MPS_LOG_DIR "/var/log/nvidia-mps"
/* 1 when MPS's default directories are ours (above). */
int chan_mps_defaults(void);

/* The pipe directory every end agrees on: MPSSHIM_PIPE_DIRECTORY, else the variable MPS
 * users set (CUDA_MPS_PIPE_DIRECTORY), else MPS's /tmp/nvidia-mps under
 * chan_mps_defaults(), else CHAN_DEFAULT_PIPE_DIR-<uid>: one per user, so that no user's
 * clients find another user's server by default; in a Slurm job (SLURM_JOB_ID)
 * CHAN_DEFAULT_PIPE_DIR-<uid>-job<id>, one per job. */
const char *chan_pipe_dir(void);

/* The log directory: MPSSHIM_LOG_DIRECTORY, else CUDA_MPS_LOG_DIRECTORY, else MPS's
 * /var/log/nvidia-mps under chan_mps_defaults(), else <pipe directory>/log (written into
 * buf, len bytes). */
const char *chan_log_dir(char *buf, size_t len);

/* 0 if path is a directory (not a link) of this user that no one else may write to: what
 * a pipe directory must be, since whoever can write there can put a socket or a link in
 * the server's place. Else -1 with the reason in why. */
int chan_dir_private(const char *path, char *why, size_t len);

/* mkdir -p, private to the user: 0, or -1 with errno. */
int chan_make_dirs(const char *path);

/* Reaps the starter's intermediate child `pid` (it forks the server and exits), then reads
 * what the server wrote on `fd` until it is closed, and closes it. 0 when the server said
 * "ready"; otherwise -1 with its first line in msg ("" if it said nothing). */
int chan_wait_ready(pid_t pid, int fd, char *msg, size_t len);

/* In the server's process, just before exec: standard streams on /dev/null, the ready
 * pipe's write end moved to fd 3 (what MPSSHIM_READY_FD must then say), and every other
 * descriptor of the starter closed: a server that held the write end of an application's
 * pipe (or its sockets, or the autostart lock) would outlive it and keep readers from
 * ever seeing end of file. -1 if the pipe could not be moved. */
#define CHAN_READY_FD 3
int chan_server_fds(int ready);

#endif
