/* See spawn.h. */
#include "channel/spawn.h"
#include "channel/proto.h"

#include <errno.h>
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
            if (mkdir(buf, 0700) != 0 && errno != EEXIST)
                return -1;
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
    if (strncmp(msg, "ready", 5) == 0)
        return 0;
    msg[strcspn(msg, "\n")] = '\0';
    return -1;
}

const char *chan_pipe_dir(void)
{
    const char *d = getenv("MPSSHIM_PIPE_DIRECTORY");
    if (!d || !*d)
        d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && *d ? d : CHAN_DEFAULT_PIPE_DIR;
}
