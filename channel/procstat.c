/* A /proc/PID/stat text's fields (procstat.h). */
#include "channel/procstat.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *chan_stat_field(const char *stat, int field)
{
    const char *p = strrchr(stat, ')');
    for (int f = 2; p && f < field; f++)
        p = strchr(p + 1, ' ');
    return p && field > 2 ? p + 1 : NULL;
}

long long chan_stat_read(int fd, int field)
{
    char buf[1024];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    if (n <= 0) return -1;
    buf[n] = '\0';
    const char *v = chan_stat_field(buf, field);
    return v ? strtoll(v, NULL, 10) : -1;
}
