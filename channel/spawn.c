/* See spawn.h. */
#define _GNU_SOURCE
#include "channel/spawn.h"
#include "channel/proto.h"
#include "channel/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int chan_make_dirs(const char *path)
{
    char buf[PATH_MAX];
    if ((size_t)snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

int chan_wait_ready(pid_t pid, int fd, char *msg, size_t len)
{
    waitpid(pid, NULL, 0);
    size_t got = 0;
    ssize_t n;
    while (got < len - 1 && (n = read(fd, msg + got, len - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    msg[got] = '\0';
    if (strncmp(msg, "ready", 5) == 0) return 0;
    msg[strcspn(msg, "\n")] = '\0';
    return -1;
}

int chan_mps_defaults(void)
{
    unsigned long long on; /* 0 or 1 only: mpsshim-control refuses other words (ctl.c) */
    if (chan_setting_get(CHAN_SET_MPS_DEFAULTS, &on)) return (int)on;
    return strncmp(program_invocation_short_name, CHAN_MPS_NAME_PREFIX,
                   strlen(CHAN_MPS_NAME_PREFIX)) == 0;
}

const char *chan_pipe_dir(void)
{
    static char own[96];
    const char *d = chan_setting_text(CHAN_SET_PIPE_DIRECTORY, NULL);
    if (d) return d;
    if (chan_mps_defaults()) return CHAN_MPS_PIPE_DIR;
    /* In a Slurm job, the job's own: a server a task starts belongs to the job (the epilog
     * stops it, ops/slurm), and is never the one another job of the same user uses on the
     * node, which that job's end would take away. A job id that is not a number is not used. */
    const char *job = getenv("SLURM_JOB_ID");
    size_t jl = job ? strspn(job, "0123456789") : 0;
    if (jl && jl <= 20 && !job[jl])
        snprintf(own, sizeof(own), "%s-%u-job%s", CHAN_DEFAULT_PIPE_DIR, (unsigned)geteuid(), job);
    else
        snprintf(own, sizeof(own), "%s-%u", CHAN_DEFAULT_PIPE_DIR, (unsigned)geteuid());
    return own;
}

const char *chan_log_dir(char *buf, size_t len)
{
    const char *d = chan_setting_text(CHAN_SET_LOG_DIRECTORY, NULL);
    if (d) return d;
    if (chan_mps_defaults()) return CHAN_MPS_LOG_DIR;
    snprintf(buf, len, "%.240s/log", chan_pipe_dir());
    return buf;
}

int chan_dir_private(const char *path, char *why, size_t len)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        snprintf(why, len, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, len, "%s is not a directory%s", path,
                 S_ISLNK(st.st_mode) ? " (a symbolic link)" : "");
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, len, "%s belongs to user %u, not to this one (%u)", path, (unsigned)st.st_uid,
                 (unsigned)geteuid());
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, len, "%s may be written by other users (mode %03o)", path,
                 (unsigned)(st.st_mode & 0777));
        return -1;
    }
    return 0;
}

int chan_server_fds(int ready)
{
    if (ready != CHAN_READY_FD && dup2(ready, CHAN_READY_FD) < 0) return -1;
    fcntl(CHAN_READY_FD, F_SETFD, 0); /* dup2 clears close-on-exec, unless it was fd 3 */
    /* Opened after the move, so that it cannot be fd 3 (closed by the range below). */
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(nul, 2);
    }
    if (close_range(CHAN_READY_FD + 1, ~0u, 0) != 0)
        for (long fd = CHAN_READY_FD + 1, max = sysconf(_SC_OPEN_MAX); fd < max && fd < 65536; fd++)
            close((int)fd);
    return 0;
}
